//! Intake: the request's body, read within the gateway's limits, and what can be done while
//! it arrives.
//!
//! The body is refused when it is announced (or turns out) over the body limit (413), when
//! the gateway already holds as many request bytes as it may (503, `max_inflight_bytes`:
//! the bytes received while the body arrives, then what parsing it will cost,
//! [`crate::limits::PARSED_BYTE_COST`]) and
//! when the client takes longer than the body timeout to send it (408). For a session a
//! header names, two things happen while the bytes arrive: the body's message elements are
//! found and hashed ([`crate::resent::ElementScanner`]), so that the part the session's
//! previous request already held need not be parsed again; and a large body of a session
//! whose previous request went upstream as it came starts its upload at once
//! ([`crate::early`]), its last byte held until the gateway decides.
//!
//! ```text
//! client body ──▶ read_body ──▶ bytes (+ permit against the in-flight cap)
//!                    ├─▶ ElementScanner::feed   (resent prefix: hashes of the elements)
//!                    └─▶ EarlyRequest::feed     (upload, last byte held)
//! ```

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use bytes::Bytes;
use futures_util::StreamExt;

use super::endpoint::Endpoint;
use super::upstream::Upstream;
use crate::Gateway;
use crate::early::EarlyRequest;
use crate::error::{ApiError, Kind};
use crate::identity;
use crate::limits::BodyPermit;
use crate::metrics::Metrics;
use crate::resent::{ElementScanner, Grouping, PrefixKey, Reading};

/// Why a body was not taken in.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error(
        "request body is larger than the gateway's limit of {limit} bytes: raise the limit \
         with `ctxkeeper serve --body-limit BYTES` (or `body_limit` in [gateway]), or let the \
         agent compact its own history"
    )]
    TooLarge { limit: usize },
    #[error(
        "the gateway is holding as many request bytes as it may (max_inflight_bytes); retry \
         shortly"
    )]
    Overloaded,
    #[error("could not read the request body: {0}")]
    Read(#[source] axum::Error),
    #[error("the request body did not arrive within {} s (body_timeout_secs)", .0.as_secs())]
    Timeout(Duration),
}

impl IntakeError {
    pub(super) fn into_api(self) -> ApiError {
        let api = match &self {
            IntakeError::TooLarge { limit } => ApiError::too_large(*limit),
            IntakeError::Overloaded => ApiError::overloaded(self.to_string()),
            IntakeError::Read(_) => ApiError::invalid_request(self.to_string()),
            IntakeError::Timeout(_) => ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                Kind::InvalidRequest,
                self.to_string(),
            ),
        };
        api.with_source(self)
    }
}

/// A body taken in.
#[derive(Debug)]
pub(super) struct Received {
    /// The client's bytes, as they came.
    pub bytes: Bytes,
    /// Holds the body's bytes against the in-flight cap until the request is done.
    pub permit: BodyPermit,
    /// The body read for its resent prefix, when its session is named by a header.
    pub resent: Option<Reading>,
}

/// Reads a model request's body, scanning it for its resent prefix and starting its early
/// upload (kept in `upstream`) when its session allows.
pub(super) async fn receive(
    gw: &Gateway,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
    upstream: &mut Upstream,
) -> Result<Received, IntakeError> {
    let mut scan = resent_scan(gw, endpoint, headers);
    // A large body of a session answered here before most likely goes on as it came: its
    // upload starts now, its last byte held until that is decided (`crate::early`).
    let mut early = scan
        .as_ref()
        .and_then(|(key, _, _)| early_request(gw, key, headers, upstream));
    let (bytes, permit) = read_body(
        gw,
        body,
        headers,
        scan.as_mut().map(|(_, scanner, _)| scanner),
        early.as_mut(),
    )
    .await?;
    upstream.received(&bytes, early);
    let resent = scan
        .and_then(|(key, scanner, grouping)| Reading::start(&gw.resent, key, scanner, grouping));
    // Now the permit holds what the request will: the body and the copies parsing it makes.
    let mut permit = permit;
    let parsed = bytes.len() - resent.as_ref().map_or(0, Reading::known_bytes);
    if !gw.inflight.hold_parsed(&mut permit, bytes.len(), parsed) {
        return Err(IntakeError::Overloaded);
    }
    Ok(Received {
        bytes,
        permit,
        resent,
    })
}

/// The early upload of a request's body (`crate::early`), when the body is announced at
/// `[gateway] forward_early_from_bytes` or more (and within the body limit) and the session's
/// previous request was answered here and went upstream as its client sent it, so that this
/// one most likely does too (a session that compacted sends its managed context instead).
fn early_request(
    gw: &Gateway,
    key: &PrefixKey,
    client_headers: &HeaderMap,
    upstream: &Upstream,
) -> Option<EarlyRequest> {
    let from = gw.config.forward_early_from;
    let announced = announced_length(client_headers)?;
    if from == 0
        || announced < from
        || announced > gw.config.body_limit
        || !gw.resent.continues_as_sent(key)
    {
        return None;
    }
    Some(upstream.open_early(gw, announced))
}

/// The scanner that looks for a body's resent prefix while it arrives, with the key of the
/// session's kept record and how the wire's elements form messages: for a request whose
/// session a header names, on the endpoints that carry a history (the `messages` of Chat
/// Completions and Anthropic Messages, the `input` items of Responses), when the gateway
/// keeps prefixes at all.
fn resent_scan(
    gw: &Gateway,
    endpoint: Endpoint,
    headers: &HeaderMap,
) -> Option<(PrefixKey, ElementScanner, Grouping)> {
    let (field, grouping): (&[u8], Grouping) = match endpoint {
        Endpoint::ChatCompletions | Endpoint::Messages => (b"messages", Grouping::OnePerElement),
        Endpoint::Responses => (b"input", Grouping::ResponsesItems),
    };
    if gw.config.resent_prefix_bytes == 0 {
        return None;
    }
    let tenant = gw.config.tenants.resolve(headers).ok()?;
    let session = identity::session_header(headers)
        .ok()
        .flatten()
        .or_else(|| identity::harness_session(headers))?;
    let key = (tenant, session, endpoint.name());
    Some((key, ElementScanner::new(field), grouping))
}

/// The body length the client announced (`content-length`).
fn announced_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
}

/// Reads the body, refusing more than the body limit (before reading, when the client
/// announced the length), more than the gateway may hold in flight, and a client that takes
/// longer than the body timeout to send it. The permit holds the body's bytes against the
/// in-flight cap until the request is done.
pub(super) async fn read_body(
    gw: &Gateway,
    body: Body,
    headers: &HeaderMap,
    mut scanner: Option<&mut ElementScanner>,
    mut early: Option<&mut EarlyRequest>,
) -> Result<(Bytes, BodyPermit), IntakeError> {
    let limit = gw.config.body_limit;
    let announced = announced_length(headers);
    if announced.is_some_and(|n| n > limit) {
        return Err(IntakeError::TooLarge { limit });
    }
    let mut permit = gw
        .inflight
        .admit(announced.unwrap_or(0))
        .ok_or(IntakeError::Overloaded)?;
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buffer = Vec::with_capacity(announced.unwrap_or(8192));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                // The server's own deadline on every body (`limits::DeadlineBody`).
                if crate::limits::BodyDeadline::caused(&e) {
                    IntakeError::Timeout(gw.config.body_timeout)
                } else {
                    IntakeError::Read(e)
                }
            })?;
            if buffer.len() + chunk.len() > limit {
                return Err(IntakeError::TooLarge { limit });
            }
            let beyond = (buffer.len() + chunk.len()).saturating_sub(announced.unwrap_or(0));
            let already = buffer.len().saturating_sub(announced.unwrap_or(0));
            if !gw.inflight.grow(&mut permit, beyond - already) {
                return Err(IntakeError::Overloaded);
            }
            buffer.extend_from_slice(&chunk);
            if let Some(early) = early.as_deref_mut() {
                early.feed(&chunk);
            }
            if let Some(scanner) = scanner.as_deref_mut() {
                scanner.feed(&buffer);
            }
        }
        Ok(Bytes::from(buffer))
    };
    match tokio::time::timeout(gw.config.body_timeout, read).await {
        Ok(Err(IntakeError::Timeout(timeout))) => {
            Metrics::add(&gw.metrics.client_timeouts, 1);
            Err(IntakeError::Timeout(timeout))
        }
        Ok(bytes) => Ok((bytes?, permit)),
        Err(_) => {
            Metrics::add(&gw.metrics.client_timeouts, 1);
            Err(IntakeError::Timeout(gw.config.body_timeout))
        }
    }
}
