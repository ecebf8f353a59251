//! Deliver: the answer the client gets.
//!
//! An upstream answer goes to the client as the upstream sent it (status, headers but the
//! hop-by-hop ones, body): read whole, or streamed on as it arrives after the opening the
//! gateway held back ([`super::upstream::Answer`]). For a managed session the usage it reports
//! is fed back, with whether the answer called a tool
//! ([`crate::sessions::Sessions::answered`]): at once for a whole body, at the end of a
//! stream. A managed answer carries the gateway's report in `x-ctxkeeper-*`
//! headers ([`Report`]). A Responses compaction the gateway answers itself is delivered here
//! too, as one `compaction` item, whole or as server-sent events ([`compaction`]).

use std::io;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use ctxkeeper_store::SessionKey;
use futures_util::StreamExt;
use serde_json::Value;

use super::upstream::{Answer, ByteStream};
use crate::Gateway;
use crate::compaction_items::CompactionAnswer;
use crate::sessions::Answered;
use crate::streaming::{SseUsage, calls_tools, input_tokens};
use crate::summarize::UpstreamRoute;
use crate::telemetry::{RequestTrace, UsageReport};

/// What the gateway reports on an answer (`x-ctxkeeper-*` headers).
#[derive(Debug, Clone)]
pub(super) struct Report {
    pub session: String,
    pub budget_used_pct: f64,
    pub compacted: bool,
    pub input_tokens: u64,
}

impl Report {
    /// The report on a request the gateway forwarded untouched.
    pub fn unmanaged(session: String) -> Report {
        Report {
            session,
            budget_used_pct: 0.0,
            compacted: false,
            input_tokens: 0,
        }
    }

    fn apply(&self, headers: &mut HeaderMap) {
        let pairs = [
            ("x-ctxkeeper-session", self.session.clone()),
            (
                "x-ctxkeeper-budget-used",
                format!("{:.2}", self.budget_used_pct),
            ),
            ("x-ctxkeeper-compacted", self.compacted.to_string()),
            ("x-ctxkeeper-input-tokens", self.input_tokens.to_string()),
        ];
        for (name, value) in pairs {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        }
    }
}

/// A managed session's step whose answer is being delivered: what the gateway tells the
/// session once the answer is complete ([`crate::sessions::Sessions::answered`]).
#[derive(Debug, Clone)]
pub(super) struct Finish {
    pub key: SessionKey,
    /// The request offered tools: an answer that calls none ends the agent's turn.
    pub offered_tools: bool,
    pub route: Option<Arc<UpstreamRoute>>,
}

impl Finish {
    fn answered(
        &self,
        input_tokens: Option<u64>,
        called_tools: bool,
        usage: Option<UsageReport>,
    ) -> Answered {
        Answered {
            input_tokens,
            ends_turn: self.offered_tools && !called_tools,
            route: self.route.clone(),
            usage,
        }
    }
}

/// Builds the client's response from an upstream answer; for a managed session (`finish`),
/// the session hears how the answer ended (the usage it reports, whether it called a tool):
/// at once for a plain body, at the end of a stream. The call's span (`trace`) ends then too,
/// with the usage the answer reported, or with the error it is.
pub(super) async fn answer(
    gw: &Arc<Gateway>,
    answer: Answer,
    finish: Option<Finish>,
    report: Option<&Report>,
    trace: Option<RequestTrace>,
) -> Response {
    match answer {
        Answer::Whole {
            status,
            headers,
            body,
        } => {
            if !status.is_success() {
                if let Some(trace) = trace {
                    trace.fail(&status.as_u16().to_string(), Some(status.as_u16()));
                }
                return whole(status, headers, body, report);
            }
            let value = (finish.is_some() || trace.is_some())
                .then(|| serde_json::from_slice::<Value>(&body).ok())
                .flatten();
            let usage = value.as_ref().map(UsageReport::from_body);
            let mut stalled = false;
            if let Some(finish) = finish {
                let tokens = value.as_ref().and_then(input_tokens);
                // An unreadable body is no evidence that the turn ended.
                let called = value.as_ref().is_none_or(calls_tools);
                let answered = finish.answered(tokens, called, usage.clone());
                stalled = gw.sessions.answered(&finish.key, answered).await;
            }
            if let Some(mut trace) = trace {
                trace.cache_stalled = stalled;
                trace.finish(&usage.unwrap_or_default(), status.as_u16());
            }
            whole(status, headers, body, report)
        }
        Answer::Stream {
            status,
            headers,
            error,
            held,
            rest,
        } => {
            // An error event before any content, passed to the client as it came: the span
            // ends here, and the stream carries none.
            let trace = match (error, trace) {
                (Some(_), Some(trace)) => {
                    trace.fail("stream_error", Some(status.as_u16()));
                    None
                }
                (_, trace) => trace,
            };
            stream(
                gw.clone(),
                status,
                headers,
                held,
                rest,
                finish,
                report,
                trace,
            )
        }
    }
}

/// A whole body with the upstream's status and headers.
pub(super) fn whole(
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    report: Option<&Report>,
) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    if let Some(report) = report {
        report.apply(response.headers_mut());
    }
    response
}

/// What a stream's end reports to: the session (a managed one), the call's span.
struct StreamEnd {
    gw: Arc<Gateway>,
    finish: Option<Finish>,
    trace: Option<RequestTrace>,
    status: u16,
}

impl StreamEnd {
    async fn ended(&mut self, usage: &SseUsage) {
        let mut stalled = false;
        if let Some(finish) = self.finish.take() {
            let answered = finish.answered(
                usage.input_tokens(),
                usage.called_tools(),
                Some(usage.report().clone()),
            );
            stalled = self.gw.sessions.answered(&finish.key, answered).await;
        }
        if let Some(mut trace) = self.trace.take() {
            trace.cache_stalled = stalled;
            trace.finish(usage.report(), self.status);
        }
    }

    fn broke(&mut self) {
        // The session hears nothing of an answer that broke off.
        self.finish = None;
        if let Some(trace) = self.trace.take() {
            trace.fail("stream_interrupted", Some(self.status));
        }
    }
}

/// Streams the upstream's answer to the client unchanged (the held-back opening first, then
/// the rest as it arrives), reading its usage on the way.
#[allow(clippy::too_many_arguments)]
fn stream(
    gw: Arc<Gateway>,
    status: StatusCode,
    headers: HeaderMap,
    held: Vec<Bytes>,
    rest: ByteStream,
    finish: Option<Finish>,
    report: Option<&Report>,
    trace: Option<RequestTrace>,
) -> Response {
    let upstream = futures_util::stream::iter(held.into_iter().map(Ok)).chain(rest);
    let upstream = Box::pin(upstream);
    let end = StreamEnd {
        gw,
        finish,
        trace,
        status: status.as_u16(),
    };
    let body = futures_util::stream::unfold(
        (upstream, SseUsage::default(), end),
        |(mut upstream, mut usage, mut end)| async move {
            match upstream.next().await {
                Some(Ok(chunk)) => {
                    usage.feed(&chunk);
                    Some((Ok::<Bytes, io::Error>(chunk), (upstream, usage, end)))
                }
                Some(Err(err)) => {
                    // The client sees the stream break off, as it would without the gateway.
                    end.broke();
                    Some((Err(io::Error::other(err)), (upstream, usage, end)))
                }
                None => {
                    end.ended(&usage).await;
                    None
                }
            }
        },
    );
    let mut out = Response::new(Body::from_stream(body));
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    if let Some(report) = report {
        report.apply(out.headers_mut());
    }
    out
}

/// A Responses compaction answered by the gateway: one compaction item, as server-sent
/// events when the client asked for a stream.
pub(super) fn compaction(answer: &CompactionAnswer, stream: bool, report: &Report) -> Response {
    let mut response = if stream {
        let mut response = Response::new(Body::from(answer.events().concat()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response
    } else {
        axum::Json(answer.body()).into_response()
    };
    report.apply(response.headers_mut());
    response
}
