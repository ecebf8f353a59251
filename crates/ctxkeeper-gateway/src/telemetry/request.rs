//! The spans of one model request: one `{operation} {model}` CLIENT span per upstream call
//! (an overflow recovery's retry is a second call, so a second span), and under the call that
//! carried it one INTERNAL `compaction` span per compaction the step announced.
//!
//! The first call's span starts when the request arrives (the context is prepared, and
//! compacted, inside it) and ends when the answer has reached the client (after the last
//! streamed byte), when the usage is known. Each call goes upstream with a `traceparent`
//! naming its own span, so the provider's spans nest under the gateway's.
//!
//! ```text
//! client span (traceparent 00-T-C-01)
//! └─ chat gpt-4o            CLIENT  gen_ai.*, error.type=context_length_exceeded
//!    └─ compaction          INTERNAL  trigger=tokens (the step's own)
//!    └─ chat gpt-4o         CLIENT  ctxkeeper.call.purpose=summary (a summary written upstream)
//! └─ chat gpt-4o            CLIENT  the retry: gen_ai.usage.*, gen_ai.conversation.compacted
//!    └─ compaction          INTERNAL  trigger=overflow (the recovery's)
//! ```

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue};
use ctxkeeper_core::formats::Wire;
use serde_json::Value;

use super::context::{SpanId, TraceContext};
use super::export::Exporter;
use super::span::{SpanKind, SpanRecord, now_unix_nano};
use super::usage::UsageReport;
use crate::sessions::SessionEvent;

/// The GenAI operation of every model call through the gateway.
const OPERATION: &str = "chat";

/// The traced state of one model request, carried from its arrival to its delivery.
#[derive(Debug)]
pub struct RequestTrace {
    context: TraceContext,
    exporter: Arc<Exporter>,
    provider: &'static str,
    server: Option<(String, u16)>,
    /// The span of the current upstream call, and when it started.
    call: SpanId,
    call_started: u64,
    /// When the context of the current call was prepared (its compactions ran then).
    prepared: Option<(u64, u64)>,
    /// The first call's span and when its context was prepared: the step's own compactions
    /// belong there, an overflow recovery's to the call that retried.
    first_call: SpanId,
    first_prepared: Option<(u64, u64)>,
    /// Compaction spans, sent with the call they belong to.
    children: Vec<SpanRecord>,
    pub model: Option<String>,
    pub conversation: Option<String>,
    pub stream: bool,
    pub compacted: bool,
    /// The gateway's count of the context it sent, and the share of the window it fills.
    pub context_tokens: Option<u64>,
    pub budget_used_pct: Option<f64>,
    /// The session's prompt cache keeps missing ([`super::CacheStallRule`]).
    pub cache_stalled: bool,
    /// The messages sent, as `gen_ai.input.messages` JSON (only when content capture is on).
    pub input_messages: Option<String>,
    capture_content: bool,
}

impl RequestTrace {
    /// The trace of a request with `headers` to the `wire` endpoint at `url`; `None` when the
    /// client's trace context says it is not sampled.
    pub fn begin(
        exporter: Arc<Exporter>,
        capture_content: bool,
        headers: &HeaderMap,
        wire: Wire,
        url: &str,
    ) -> Option<RequestTrace> {
        let context = TraceContext::from_headers(headers);
        if !context.sampled() {
            return None;
        }
        let provider = match wire {
            Wire::Anthropic => "anthropic",
            _ => "openai",
        };
        let server = reqwest::Url::parse(url).ok().and_then(|url| {
            let port = url.port_or_known_default()?;
            Some((url.host_str()?.to_string(), port))
        });
        let call = SpanId::random();
        Some(RequestTrace {
            context,
            exporter,
            provider,
            server,
            call,
            call_started: now_unix_nano(),
            prepared: None,
            first_call: call,
            first_prepared: None,
            children: Vec::new(),
            model: None,
            conversation: None,
            stream: false,
            compacted: false,
            context_tokens: None,
            budget_used_pct: None,
            cache_stalled: false,
            input_messages: None,
            capture_content,
        })
    }

    pub fn trace_id(&self) -> [u8; 16] {
        self.context.trace_id
    }

    /// What a summary call made on this request's behalf needs to be traced: its spans are
    /// children of the request's first call (a summary prepared in the background too).
    pub fn for_summaries(&self) -> SummaryTrace {
        let mut context = self.context.clone();
        context.parent = Some(self.first_call);
        SummaryTrace {
            exporter: self.exporter.clone(),
            context,
            provider: self.provider,
            conversation: self.conversation.clone(),
        }
    }

    /// Whether message contents go into the spans (`capture_content`).
    pub fn captures_content(&self) -> bool {
        self.capture_content
    }

    /// Sets `traceparent` (the current call's span as the parent) and the client's
    /// `tracestate` on the headers that go upstream.
    pub fn propagate(&self, headers: &mut HeaderMap) {
        if let Ok(value) = HeaderValue::from_str(&self.context.traceparent(self.call)) {
            headers.insert("traceparent", value);
        }
        headers.remove("tracestate");
        if !self.context.trace_state.is_empty()
            && let Ok(value) = HeaderValue::from_str(&self.context.trace_state)
        {
            headers.insert("tracestate", value);
        }
    }

    /// The context of the current call was prepared from `since` until now.
    pub fn prepared_since(&mut self, since: u64) {
        self.prepared = Some((since, now_unix_nano()));
        if self.call == self.first_call {
            self.first_prepared = self.prepared;
        }
    }

    /// One `compaction` span per compaction among the events a committed step announced
    /// (the events the session's subscribers received, so the figures are the same).
    pub fn compactions(&mut self, events: &[SessionEvent], summarizer: &str) {
        let downgraded = events.iter().any(|e| e.name == "summary_downgraded");
        let prepared_used = events.iter().any(|e| {
            e.name == "summary_prepared"
                && e.data.get("outcome").and_then(Value::as_str) == Some("used")
        });
        for event in events {
            if !matches!(event.name.as_str(), "context_compaction_end" | "compaction") {
                continue;
            }
            let data = &event.data;
            let reason = data.get("reason").and_then(Value::as_str);
            let (parent, prepared) = if reason == Some("overflow") {
                (self.call, self.prepared)
            } else {
                (self.first_call, self.first_prepared)
            };
            let (start, end) = prepared.unwrap_or((self.call_started, self.call_started));
            // `compaction` (Agentrail's runtime event) names its fields in camelCase.
            let number = |snake: &str, camel: &str| {
                data.get(snake)
                    .or_else(|| data.get(camel))
                    .and_then(Value::as_u64)
            };
            let mut span = SpanRecord::new(
                &self.context,
                SpanId::random(),
                "compaction",
                SpanKind::Internal,
                start,
            )
            .child_of(parent);
            span.end(end)
                .str("ctxkeeper.compaction.event", event.name.clone());
            if let Some(reason) = reason {
                span.str("ctxkeeper.compaction.trigger", reason);
            }
            if let Some(strategy) = data.get("strategy").and_then(Value::as_str) {
                span.str("ctxkeeper.compaction.strategy", strategy);
            }
            let stages: Vec<String> = data
                .get("stages")
                .and_then(Value::as_array)
                .map(|stages| {
                    stages
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let (tokens_before, tokens_after) = (
                number("tokens_before", "tokensBefore"),
                number("tokens_after", "tokensAfter"),
            );
            for (key, value) in [
                ("ctxkeeper.compaction.tokens_before", tokens_before),
                ("ctxkeeper.compaction.tokens_after", tokens_after),
                (
                    "ctxkeeper.compaction.messages_before",
                    number("messages_before", "messagesBefore"),
                ),
                (
                    "ctxkeeper.compaction.messages_after",
                    number("messages_after", "messagesAfter"),
                ),
            ] {
                if let Some(value) = value {
                    span.int(key, value);
                }
            }
            if let (Some(before), Some(after)) = (tokens_before, tokens_after) {
                span.int(
                    "ctxkeeper.compaction.tokens_saved",
                    before.saturating_sub(after),
                );
            }
            let degraded = data
                .get("summary_degraded")
                .or_else(|| data.get("summaryDegraded"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let summarizes = stages
                .iter()
                .any(|stage| stage.contains("summar") || stage.contains("compress"));
            let outcome = if !summarizes {
                "none"
            } else if degraded {
                "degraded"
            } else if downgraded {
                "extractive"
            } else if prepared_used {
                "prepared"
            } else {
                "written"
            };
            span.strs("ctxkeeper.compaction.stages", stages)
                .str("ctxkeeper.compaction.summarizer", summarizer)
                .str("ctxkeeper.compaction.summary_outcome", outcome);
            if let Some(refs) = data.get("archive_refs").or_else(|| data.get("archiveRefs")) {
                let count = refs.as_array().map_or(0, Vec::len);
                span.int("ctxkeeper.compaction.archive_refs", count as u64);
            }
            if let Some(economics) = data.get("economics").filter(|e| e.is_object()) {
                let billed = |field: &str| economics.get(field).and_then(Value::as_f64);
                if let (Some(chosen), Some(configured)) = (
                    billed("billed_per_step"),
                    billed("billed_per_step_configured"),
                ) {
                    span.double(
                        "ctxkeeper.compaction.billed_input_saved_per_step",
                        configured - chosen,
                    );
                }
            }
            if let Some(conversation) = &self.conversation {
                span.str("gen_ai.conversation.id", conversation.clone());
            }
            self.children.push(span);
        }
    }

    /// The current call failed with `error_type` and the request goes upstream again: its
    /// span is sent, and the next call gets a span of its own, starting now.
    pub fn retry(&mut self, error_type: &str, status: Option<u16>) {
        let finished = self.call_span(now_unix_nano());
        self.send(finished, None, Some(error_type), status);
        self.call = SpanId::random();
        self.call_started = now_unix_nano();
        self.prepared = None;
    }

    /// The last call failed with `error_type` (no answer, or an error answer passed to the
    /// client).
    pub fn fail(mut self, error_type: &str, status: Option<u16>) {
        let span = self.call_span(now_unix_nano());
        let children = std::mem::take(&mut self.children);
        self.send(span, None, Some(error_type), status);
        for child in children {
            self.exporter.record(child);
        }
    }

    /// The answer reached the client; `report` is what it said about itself.
    pub fn finish(mut self, report: &UsageReport, status: u16) {
        let span = self.call_span(now_unix_nano());
        let children = std::mem::take(&mut self.children);
        self.send(span, Some(report), None, Some(status));
        for child in children {
            self.exporter.record(child);
        }
    }

    fn call_span(&self, end: u64) -> SpanRecord {
        let name = match &self.model {
            Some(model) => format!("{OPERATION} {model}"),
            None => OPERATION.to_string(),
        };
        let mut span = SpanRecord::new(
            &self.context,
            self.call,
            name,
            SpanKind::Client,
            self.call_started,
        );
        span.end(end);
        span
    }

    fn send(
        &self,
        mut span: SpanRecord,
        report: Option<&UsageReport>,
        error_type: Option<&str>,
        status: Option<u16>,
    ) {
        span.str("gen_ai.operation.name", OPERATION)
            .str("gen_ai.provider.name", self.provider)
            .bool("gen_ai.request.stream", self.stream);
        if let Some(model) = &self.model {
            span.str("gen_ai.request.model", model.clone());
        }
        if let Some(conversation) = &self.conversation {
            span.str("gen_ai.conversation.id", conversation.clone());
        }
        if let Some((host, port)) = &self.server {
            span.str("server.address", host.clone())
                .int("server.port", u64::from(*port));
        }
        if let Some(status) = status.filter(|s| *s > 0) {
            span.int("http.response.status_code", u64::from(status));
        }
        // The conventions set this only when true.
        if self.compacted {
            span.bool("gen_ai.conversation.compacted", true);
        }
        if let Some(tokens) = self.context_tokens {
            span.int("ctxkeeper.context.input_tokens", tokens);
        }
        if let Some(pct) = self.budget_used_pct {
            span.double("ctxkeeper.context.budget_used_pct", pct);
        }
        if self.cache_stalled {
            span.bool("ctxkeeper.cache.stalled", true);
        }
        if let Some(messages) = &self.input_messages {
            span.str("gen_ai.input.messages", messages.clone());
        }
        if let Some(report) = report {
            usage_attributes(&mut span, report);
            if let Some(model) = &report.response_model {
                span.str("gen_ai.response.model", model.clone());
            }
            if let Some(id) = &report.response_id {
                span.str("gen_ai.response.id", id.clone());
            }
        }
        if let Some(error_type) = error_type {
            span.str("error.type", error_type).error(error_type);
        }
        self.exporter.record(span);
    }
}

/// The trace summary calls of one request belong to ([`RequestTrace::for_summaries`]).
#[derive(Debug, Clone)]
pub struct SummaryTrace {
    exporter: Arc<Exporter>,
    context: TraceContext,
    provider: &'static str,
    conversation: Option<String>,
}

/// One summary call being traced: a `chat {model}` CLIENT span marked
/// `ctxkeeper.call.purpose = summary`.
#[derive(Debug)]
pub struct SummarySpan {
    trace: SummaryTrace,
    id: SpanId,
    started: u64,
}

impl SummaryTrace {
    /// A span for a summary call starting now.
    pub fn begin(&self) -> SummarySpan {
        SummarySpan {
            trace: self.clone(),
            id: SpanId::random(),
            started: now_unix_nano(),
        }
    }
}

impl SummarySpan {
    /// Sets the `traceparent` naming this call's span on the headers it goes upstream with.
    pub fn propagate(&self, headers: &mut HeaderMap) {
        if let Ok(value) = HeaderValue::from_str(&self.trace.context.traceparent(self.id)) {
            headers.insert("traceparent", value);
        }
    }

    /// The call ended: with the answer's report, or with `error_type`.
    pub fn end(
        self,
        model: Option<&str>,
        report: Option<&UsageReport>,
        status: Option<u16>,
        error_type: Option<&str>,
    ) {
        let name = match model {
            Some(model) => format!("{OPERATION} {model}"),
            None => OPERATION.to_string(),
        };
        let mut span = SpanRecord::new(
            &self.trace.context,
            self.id,
            name,
            SpanKind::Client,
            self.started,
        );
        span.end(now_unix_nano())
            .str("gen_ai.operation.name", OPERATION)
            .str("gen_ai.provider.name", self.trace.provider)
            .str("ctxkeeper.call.purpose", "summary");
        if let Some(model) = model {
            span.str("gen_ai.request.model", model);
        }
        if let Some(conversation) = &self.trace.conversation {
            span.str("gen_ai.conversation.id", conversation.clone());
        }
        if let Some(status) = status {
            span.int("http.response.status_code", u64::from(status));
        }
        if let Some(report) = report {
            usage_attributes(&mut span, report);
        }
        if let Some(error_type) = error_type {
            span.str("error.type", error_type).error(error_type);
        }
        self.trace.exporter.record(span);
    }
}

/// The provider's usage report on an inference or summary span: token counts (the cache-write
/// count under both names it has had) and finish reasons.
fn usage_attributes(span: &mut SpanRecord, report: &UsageReport) {
    let usage = [
        ("gen_ai.usage.input_tokens", report.input_tokens),
        ("gen_ai.usage.output_tokens", report.output_tokens),
        (
            "gen_ai.usage.cache_read.input_tokens",
            report.cache_read_tokens,
        ),
        (
            "gen_ai.usage.cache_creation.input_tokens",
            report.cache_write_tokens,
        ),
        (
            "gen_ai.usage.cache_write.input_tokens",
            report.cache_write_tokens,
        ),
    ];
    for (key, value) in usage {
        if let Some(value) = value {
            span.int(key, value);
        }
    }
    if !report.finish_reasons.is_empty() {
        span.strs(
            "gen_ai.response.finish_reasons",
            report.finish_reasons.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::trace::v1::Span;
    use serde_json::json;

    fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a Any> {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
    }

    fn int(span: &Span, key: &str) -> Option<i64> {
        match attribute(span, key) {
            Some(Any::IntValue(n)) => Some(*n),
            _ => None,
        }
    }

    fn string<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
        match attribute(span, key) {
            Some(Any::StringValue(s)) => Some(s),
            _ => None,
        }
    }

    fn traced() -> (RequestTrace, tokio::sync::mpsc::Receiver<Span>) {
        let (exporter, spans) = Exporter::capturing(64);
        let mut headers = HeaderMap::new();
        headers.insert(
            "traceparent",
            HeaderValue::from_static("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        );
        let trace = RequestTrace::begin(
            Arc::new(exporter),
            false,
            &headers,
            Wire::Anthropic,
            "https://api.anthropic.com/v1/messages",
        )
        .expect("sampled");
        (trace, spans)
    }

    #[test]
    fn agentrail_compactions_and_the_economics_become_child_spans() {
        let (mut trace, mut spans) = traced();
        trace.model = Some("claude-x".into());
        trace.conversation = Some("s1".into());
        trace.compacted = true;
        trace.prepared_since(now_unix_nano());
        let events = [
            SessionEvent {
                name: "compaction".into(),
                data: json!({"type": "compaction", "reason": "reactive_full",
                    "strategy": "agentrail", "stages": ["summarize"], "messagesBefore": 40,
                    "messagesAfter": 6, "tokensBefore": 9000, "tokensAfter": 1200,
                    "archiveRefs": ["a", "b"], "summaryDegraded": true}),
            },
            SessionEvent {
                name: "context_compaction_end".into(),
                data: json!({"type": "context_compaction_end", "reason": "tokens",
                    "strategy": "default", "stages": ["cap_results"], "tokens_before": 5000,
                    "tokens_after": 3000, "messages_before": 20, "messages_after": 20,
                    "archive_refs": [], "summary_degraded": false,
                    "economics": {"billed_per_step": 1500.0, "billed_per_step_configured": 1800.5}}),
            },
            SessionEvent {
                name: "budget_used".into(),
                data: json!({"tokens": 1, "window": 2, "pct": 50.0}),
            },
        ];
        trace.compactions(&events, "upstream");
        let report = UsageReport {
            input_tokens: Some(1300),
            output_tokens: Some(20),
            cache_read_tokens: Some(1000),
            cache_write_tokens: Some(200),
            finish_reasons: vec!["end_turn".into()],
            ..UsageReport::default()
        };
        trace.finish(&report, 200);
        let call = spans.try_recv().expect("the call's span");
        let agentrail = spans.try_recv().expect("a span per compaction");
        let tokens = spans.try_recv().expect("a span per compaction");
        assert!(spans.try_recv().is_err(), "budget_used is no compaction");

        assert_eq!(call.name, "chat claude-x");
        assert_eq!(hex::encode(&call.parent_span_id), "b7ad6b7169203331");
        assert_eq!(string(&call, "gen_ai.provider.name"), Some("anthropic"));
        assert_eq!(string(&call, "server.address"), Some("api.anthropic.com"));
        assert_eq!(int(&call, "server.port"), Some(443));
        assert_eq!(
            int(&call, "gen_ai.usage.cache_creation.input_tokens"),
            Some(200)
        );
        assert_eq!(
            int(&call, "gen_ai.usage.cache_write.input_tokens"),
            Some(200)
        );
        assert!(matches!(
            attribute(&call, "gen_ai.conversation.compacted"),
            Some(Any::BoolValue(true))
        ));

        for child in [&agentrail, &tokens] {
            assert_eq!(child.parent_span_id, call.span_id, "children of the call");
            assert_eq!(child.trace_id, call.trace_id);
        }
        assert_eq!(
            string(&agentrail, "ctxkeeper.compaction.trigger"),
            Some("reactive_full")
        );
        assert_eq!(
            int(&agentrail, "ctxkeeper.compaction.tokens_before"),
            Some(9000)
        );
        assert_eq!(
            int(&agentrail, "ctxkeeper.compaction.messages_after"),
            Some(6)
        );
        assert_eq!(
            int(&agentrail, "ctxkeeper.compaction.tokens_saved"),
            Some(7800)
        );
        assert_eq!(
            int(&agentrail, "ctxkeeper.compaction.archive_refs"),
            Some(2)
        );
        assert_eq!(
            string(&agentrail, "ctxkeeper.compaction.summary_outcome"),
            Some("degraded")
        );
        assert_eq!(
            string(&tokens, "ctxkeeper.compaction.summary_outcome"),
            Some("none")
        );
        assert_eq!(
            string(&tokens, "ctxkeeper.compaction.summarizer"),
            Some("upstream")
        );
        assert!(matches!(
            attribute(&tokens, "ctxkeeper.compaction.billed_input_saved_per_step"),
            Some(Any::DoubleValue(saved)) if (saved - 300.5).abs() < 1e-9
        ));
    }

    #[test]
    fn a_retry_ends_the_first_call_with_its_error_and_an_overflow_compaction_joins_the_retry() {
        let (mut trace, mut spans) = traced();
        let first = trace.call;
        let mut headers = HeaderMap::new();
        trace.propagate(&mut headers);
        assert!(
            headers["traceparent"]
                .to_str()
                .unwrap()
                .contains(&first.hex())
        );
        trace.retry("context_length_exceeded", Some(400));
        trace.propagate(&mut headers);
        let second = trace.call;
        assert_ne!(first, second);
        assert!(
            headers["traceparent"]
                .to_str()
                .unwrap()
                .contains(&second.hex())
        );
        trace.prepared_since(now_unix_nano());
        let overflow = SessionEvent {
            name: "context_compaction_end".into(),
            data: json!({"reason": "overflow", "stages": ["summarize"], "tokens_before": 9,
                "tokens_after": 3, "messages_before": 4, "messages_after": 2}),
        };
        trace.compactions(&[overflow], "extractive");
        trace.fail("502", Some(502));
        let failed = spans.try_recv().expect("the first call");
        assert_eq!(failed.span_id, first.0.to_vec());
        assert_eq!(
            string(&failed, "error.type"),
            Some("context_length_exceeded")
        );
        assert_eq!(int(&failed, "http.response.status_code"), Some(400));
        let retried = spans.try_recv().expect("the retry");
        assert_eq!(retried.span_id, second.0.to_vec());
        assert_eq!(string(&retried, "error.type"), Some("502"));
        let child = spans.try_recv().expect("the recovery's compaction");
        assert_eq!(child.parent_span_id, second.0.to_vec());
    }
}
