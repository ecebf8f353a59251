//! The upstream: where a model request goes, and each attempt to send it there.
//!
//! One [`Upstream`] value per request holds what every attempt shares: the URL (the
//! configured OpenAI or Anthropic upstream and the endpoint's path, the client's query
//! string), the client's headers as they go upstream ([`forward_headers`]), whether the
//! client asked for a stream, the body's early upload ([`crate::early`]) while it is still
//! open, and the time spent waiting for the upstream (the gateway's own overhead is the rest).
//!
//! [`Upstream::send`] makes one attempt and reads the answer far enough to know whether it
//! failed ([`Answer`]): a non-2xx status decides at once; a 2xx stream is held back until its
//! first content event, because the Responses API reports an overflow met after opening the
//! stream as an `error` event ([`StreamHead`]). Retrying after an overflow is the managed
//! path's decision ([`super::managed`]), not this module's.
//!
//! ```text
//! Upstream { url, headers, stream, early } ──send(body)──▶ Answer::Whole { status, headers, body }
//!                                                     └──▶ Answer::Stream { held, rest, error }
//! ```

use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use bytes::Bytes;
use futures_util::StreamExt;

use super::endpoint::Endpoint;
use crate::Gateway;
use crate::early::{EarlyRequest, same_buffer};
use crate::error::ApiError;
use crate::streaming::{Opening, StreamHead};
use crate::telemetry::RequestTrace;

/// Why the upstream gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the upstream did not answer in time")]
    Timeout(#[source] reqwest::Error),
    #[error("the upstream could not be reached")]
    Unreachable(#[source] reqwest::Error),
    #[error("the upstream failed: {0}")]
    Failed(#[source] reqwest::Error),
    #[error("the upstream's stream ended before any content")]
    Incomplete,
}

impl From<reqwest::Error> for UpstreamError {
    fn from(err: reqwest::Error) -> UpstreamError {
        if err.is_timeout() {
            UpstreamError::Timeout(err)
        } else if err.is_connect() {
            UpstreamError::Unreachable(err)
        } else {
            UpstreamError::Failed(err)
        }
    }
}

impl UpstreamError {
    /// The error's kind, as a span's `error.type`.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Timeout(_) => "timeout",
            UpstreamError::Unreachable(_) => "unreachable",
            UpstreamError::Failed(_) => "upstream_failed",
            UpstreamError::Incomplete => "incomplete_stream",
        }
    }

    pub(crate) fn into_api(self) -> ApiError {
        // The client (often an agent a newcomer just pointed at the gateway) sees only this
        // message, so it names the URL tried and why, and the operator sees it at WARN.
        let message = self.explained();
        tracing::warn!(error = %message, "upstream request failed");
        let api = match &self {
            UpstreamError::Timeout(_) => ApiError::timeout(message),
            UpstreamError::Unreachable(_)
            | UpstreamError::Failed(_)
            | UpstreamError::Incomplete => ApiError::bad_gateway(message),
        };
        api.with_source(self)
    }

    fn reqwest_error(&self) -> Option<&reqwest::Error> {
        match self {
            UpstreamError::Timeout(err)
            | UpstreamError::Unreachable(err)
            | UpstreamError::Failed(err) => Some(err),
            UpstreamError::Incomplete => None,
        }
    }

    /// The error, the upstream URL tried (no credentials, no query) and the cause.
    fn explained(&self) -> String {
        let Some(err) = self.reqwest_error() else {
            return self.to_string();
        };
        let url = err
            .url()
            .map(|url| format!(" at {}", shown_url(url)))
            .unwrap_or_default();
        format!("{self}{url}: {}", cause_of(err))
    }
}

/// A URL as safe to show: no userinfo, no query (it may carry a key), no fragment.
fn shown_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    // Both fail only for URLs that cannot have userinfo; then there is nothing to strip.
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// The root cause of a failed attempt in words a newcomer can act on.
fn cause_of(err: &reqwest::Error) -> String {
    use std::error::Error as _;
    if err.is_timeout() {
        return "timed out waiting for the upstream".to_owned();
    }
    let mut chain: Vec<String> = Vec::new();
    let mut source = err.source();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return "connection refused (is the upstream running, and is the port right?)"
                .to_owned();
        }
        chain.push(cause.to_string());
        source = cause.source();
    }
    let detail = chain.last().cloned().unwrap_or_else(|| err.to_string());
    if chain.iter().any(|cause| cause.contains("dns error")) {
        return format!("DNS lookup failed (is the host name right?): {detail}");
    }
    detail
}

/// Where one model request goes, and what its attempts share.
#[derive(Debug)]
pub struct Upstream {
    pub url: String,
    /// The client's headers as they go upstream (credentials included).
    pub headers: HeaderMap,
    /// The client asked for a stream.
    pub stream: bool,
    /// The body's early upload and the buffer it is the upload of, until the first attempt.
    early: Option<(EarlyRequest, Bytes)>,
    /// Time spent waiting for the upstream, over every attempt.
    pub spent: Duration,
    /// The request's spans, when traces are exported: each attempt goes upstream with a
    /// `traceparent` naming its own span ([`crate::telemetry`]).
    pub trace: Option<RequestTrace>,
}

impl Upstream {
    /// The upstream of a request to `endpoint` with the client's `query` and `headers`.
    pub fn new(
        gw: &Gateway,
        endpoint: Endpoint,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Upstream {
        let config = &gw.config;
        let base = match endpoint {
            Endpoint::ChatCompletions => join(&config.upstream, "/chat/completions"),
            Endpoint::Responses => join(&config.upstream, "/responses"),
            Endpoint::Messages => join(&config.anthropic_upstream, "/v1/messages"),
        };
        let url = with_query(base, query);
        let mut forwarded = forward_headers(headers);
        let trace = gw
            .telemetry
            .as_ref()
            .and_then(|telemetry| telemetry.begin(headers, endpoint.wire(), &url));
        if let Some(trace) = &trace {
            trace.propagate(&mut forwarded);
        }
        Upstream {
            url,
            headers: forwarded,
            stream: false,
            early: None,
            spent: Duration::ZERO,
            trace,
        }
    }

    /// Starts uploading a body of `announced` bytes while it arrives ([`EarlyRequest`]).
    pub(super) fn open_early(&self, gw: &Gateway, announced: usize) -> EarlyRequest {
        EarlyRequest::open(
            &gw.client,
            &self.url,
            self.headers.clone(),
            announced,
            gw.metrics.clone(),
        )
    }

    /// The client's body arrived whole into `client`; `early` is its upload, if one runs.
    pub(super) fn received(&mut self, client: &Bytes, early: Option<EarlyRequest>) {
        self.early = early.map(|early| (early, client.clone()));
    }

    /// Sends `body` once and reads the answer far enough to know whether it failed. The
    /// first attempt completes the early upload when `body` is the very buffer the client's
    /// body was read into; otherwise the upload is cut and the body sent whole.
    pub async fn send(&mut self, gw: &Gateway, body: Bytes) -> Result<Answer, UpstreamError> {
        let sent_at = Instant::now();
        let early = self
            .early
            .take()
            .filter(|(_, client)| same_buffer(&body, client));
        let released = match early {
            Some((early, _)) => early.release().await,
            None => None,
        };
        let sent = match released {
            Some(Ok(response)) => Ok(response),
            Some(Err(err)) if err.is_connect() || err.is_timeout() => Err(err),
            // The early upload failed on its way (or never completed): the whole body is
            // here, so it goes again.
            _ => {
                gw.client
                    .post(&self.url)
                    .headers(self.headers.clone())
                    .body(body)
                    .send()
                    .await
            }
        };
        let answer = match sent {
            Ok(response) => {
                warn_if_path_missing_v1(&response);
                read_answer(response, self.stream).await
            }
            Err(err) => Err(err.into()),
        };
        let elapsed = sent_at.elapsed();
        self.spent += elapsed;
        gw.metrics.upstream_latency(elapsed);
        if let Err(error) = &answer
            && let Some(trace) = self.trace.take()
        {
            trace.fail(error.kind(), None);
        }
        answer
    }

    /// The current attempt failed with `error_type` and another one follows: its span ends
    /// and the next attempt goes upstream under a span of its own.
    pub(super) fn retrying(&mut self, error_type: &str, status: u16) {
        if let Some(trace) = self.trace.as_mut() {
            trace.retry(error_type, Some(status));
            trace.propagate(&mut self.headers);
        }
    }
}

/// A 404 from an upstream whose URL has no `/v1` is almost always a base URL configured
/// without it (`http://host:8000` for `http://host:8000/v1`); say so where the operator looks.
fn warn_if_path_missing_v1(response: &reqwest::Response) {
    if response.status() == StatusCode::NOT_FOUND && !response.url().path().contains("/v1") {
        tracing::warn!(
            url = %shown_url(response.url()),
            "the upstream answered 404; its base URL may be missing `/v1`"
        );
    }
}

pub(super) fn join(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
}

pub(super) fn with_query(mut url: String, query: Option<&str>) -> String {
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    url
}

/// Headers that describe one connection, not the message, and never cross a proxy.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The client's headers as sent upstream.
pub(super) fn forward_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let n = name.as_str();
        if is_hop_by_hop(name)
            || n == "host"
            || n == "content-length"
            || n == "accept-encoding"
            || n.starts_with("x-ctxkeeper-")
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    if !out.contains_key(header::CONTENT_TYPE) {
        out.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    out
}

/// The upstream's headers as returned to the client.
pub(super) fn response_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len() + 4);
    for (name, value) in headers {
        if is_hop_by_hop(name) || name == header::CONTENT_LENGTH {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// The most bytes of a stream's opening held back while waiting for its first content event.
/// Preambles are a few hundred bytes; past this the stream is released as it is.
const MAX_HELD: usize = 256 * 1024;

pub(super) type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// An upstream answer, read far enough to know whether it failed.
pub enum Answer {
    /// A plain body, read whole.
    Whole {
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
    },
    /// A 2xx stream: the opening bytes held back, and the rest still to come. `error` holds
    /// the data of an error event that came before any content.
    Stream {
        status: StatusCode,
        headers: HeaderMap,
        held: Vec<Bytes>,
        rest: ByteStream,
        error: Option<String>,
    },
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Whole { status, body, .. } => f
                .debug_struct("Whole")
                .field("status", status)
                .field("bytes", &body.len())
                .finish_non_exhaustive(),
            Answer::Stream { status, error, .. } => f
                .debug_struct("Stream")
                .field("status", status)
                .field("error", error)
                .finish_non_exhaustive(),
        }
    }
}

impl Answer {
    /// What to classify, and the status to classify it with, when the answer is an error.
    pub fn failure(&self) -> Option<(u16, String)> {
        match self {
            Answer::Whole { status, body, .. } if !status.is_success() => {
                Some((status.as_u16(), String::from_utf8_lossy(body).into_owned()))
            }
            // The status (200) says nothing: the stream reported the error in an event.
            Answer::Stream {
                error: Some(error), ..
            } => Some((0, error.clone())),
            _ => None,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Answer::Whole { status, .. } | Answer::Stream { status, .. } => *status,
        }
    }
}

/// Reads the upstream's answer: a streamed 2xx until its first content event or an error
/// event (nothing reaches the client meanwhile), anything else whole.
async fn read_answer(response: reqwest::Response, stream: bool) -> Result<Answer, UpstreamError> {
    let status = response.status();
    let headers = response_headers(response.headers());
    if !(stream && status.is_success()) {
        let body = response.bytes().await?;
        return Ok(Answer::Whole {
            status,
            headers,
            body,
        });
    }
    let mut rest: ByteStream = Box::pin(response.bytes_stream());
    let mut head = StreamHead::default();
    let mut held = Vec::new();
    let mut held_bytes = 0;
    let mut error = None;
    let mut settled = false;
    while let Some(chunk) = rest.next().await {
        // Nothing was sent to the client yet, so a broken stream is still a clean error.
        let chunk = chunk?;
        let decided = head.feed(&chunk);
        held_bytes += chunk.len();
        held.push(chunk);
        match decided {
            Some(Opening::Error(data)) => {
                error = Some(data);
                settled = true;
                break;
            }
            Some(Opening::Content) => {
                settled = true;
                break;
            }
            None if held_bytes > MAX_HELD => {
                settled = true;
                break;
            }
            None => {}
        }
    }
    if !settled && head.opened() {
        // The stream ended with only its preamble (a role chunk, `message_start`): the
        // model's answer was cut off, and nothing of it reached the client yet.
        return Err(UpstreamError::Incomplete);
    }
    Ok(Answer::Stream {
        status,
        headers,
        held,
        rest,
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_provider_headers_go_upstream_but_not_hop_by_hop_ones() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer sk-1"),
            ("x-api-key", "sk-ant-1"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "tools-2024"),
            ("openai-organization", "org-1"),
            ("connection", "keep-alive"),
            ("content-length", "12"),
            ("host", "localhost"),
            ("x-ctxkeeper-session", "s1"),
            ("accept-encoding", "gzip"),
        ] {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let out = forward_headers(&headers);
        for kept in [
            "authorization",
            "x-api-key",
            "anthropic-version",
            "anthropic-beta",
            "openai-organization",
        ] {
            assert_eq!(out.get(kept), headers.get(kept), "{kept}");
        }
        for dropped in [
            "connection",
            "content-length",
            "host",
            "x-ctxkeeper-session",
            "accept-encoding",
        ] {
            assert!(!out.contains_key(dropped), "{dropped}");
        }
        assert_eq!(out.get("content-type").unwrap(), "application/json");
    }
}
