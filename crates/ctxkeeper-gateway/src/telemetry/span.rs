//! One finished span as the exporter sends it: OTLP's own protobuf types
//! (`opentelemetry-proto`), filled in by a small builder.
//!
//! ```
//! use ctxkeeper_gateway::telemetry::{SpanId, SpanKind, SpanRecord, TraceContext};
//!
//! let trace = TraceContext::root();
//! let mut span = SpanRecord::new(&trace, SpanId::random(), "chat gpt-4o", SpanKind::Client, 1_000);
//! span.str("gen_ai.request.model", "gpt-4o").int("gen_ai.usage.input_tokens", 1200);
//! span.end(2_000);
//! let proto = span.into_proto();
//! assert_eq!(proto.attributes.len(), 2);
//! assert_eq!(proto.end_time_unix_nano, 2_000);
//! ```

use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, Status, span, status};

use super::context::{SpanId, TraceContext};

/// The kinds of span the gateway records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// A call the gateway makes (a model call upstream).
    Client,
    /// Work inside the gateway (a compaction).
    Internal,
    /// A call the gateway serves (an MCP tool call at `/mcp`).
    Server,
}

/// A span being filled in, and once ended, sent.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    proto: Span,
}

impl SpanRecord {
    /// A span of `trace` named `name`, child of the trace's parent (the client's span).
    pub fn new(
        trace: &TraceContext,
        id: SpanId,
        name: impl Into<String>,
        kind: SpanKind,
        start_unix_nano: u64,
    ) -> SpanRecord {
        let kind = match kind {
            SpanKind::Client => span::SpanKind::Client,
            SpanKind::Internal => span::SpanKind::Internal,
            SpanKind::Server => span::SpanKind::Server,
        };
        SpanRecord {
            proto: Span {
                trace_id: trace.trace_id.to_vec(),
                span_id: id.0.to_vec(),
                trace_state: trace.trace_state.clone(),
                parent_span_id: trace.parent.map(|p| p.0.to_vec()).unwrap_or_default(),
                flags: u32::from(trace.flags),
                name: name.into(),
                kind: kind as i32,
                start_time_unix_nano: start_unix_nano,
                end_time_unix_nano: start_unix_nano,
                ..Span::default()
            },
        }
    }

    /// The same span as a child of `parent` (within the same trace).
    pub fn child_of(mut self, parent: SpanId) -> SpanRecord {
        self.proto.parent_span_id = parent.0.to_vec();
        self
    }

    pub fn name(&self) -> &str {
        &self.proto.name
    }

    pub fn end(&mut self, end_unix_nano: u64) -> &mut SpanRecord {
        self.proto.end_time_unix_nano = end_unix_nano.max(self.proto.start_time_unix_nano);
        self
    }

    pub fn str(&mut self, key: &str, value: impl Into<String>) -> &mut SpanRecord {
        self.set(key, any_value::Value::StringValue(value.into()))
    }

    pub fn int(&mut self, key: &str, value: u64) -> &mut SpanRecord {
        self.set(
            key,
            any_value::Value::IntValue(i64::try_from(value).unwrap_or(i64::MAX)),
        )
    }

    pub fn double(&mut self, key: &str, value: f64) -> &mut SpanRecord {
        self.set(key, any_value::Value::DoubleValue(value))
    }

    pub fn bool(&mut self, key: &str, value: bool) -> &mut SpanRecord {
        self.set(key, any_value::Value::BoolValue(value))
    }

    pub fn strs<S: Into<String>>(
        &mut self,
        key: &str,
        values: impl IntoIterator<Item = S>,
    ) -> &mut SpanRecord {
        let values = values
            .into_iter()
            .map(|v| AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            })
            .collect();
        self.set(key, any_value::Value::ArrayValue(ArrayValue { values }))
    }

    /// Marks the span failed with `message` (the `error.type` attribute is set apart).
    pub fn error(&mut self, message: impl Into<String>) -> &mut SpanRecord {
        self.proto.status = Some(Status {
            message: message.into(),
            code: status::StatusCode::Error as i32,
        });
        self
    }

    /// Sets `key`, replacing an earlier value.
    fn set(&mut self, key: &str, value: any_value::Value) -> &mut SpanRecord {
        let value = Some(AnyValue { value: Some(value) });
        match self.proto.attributes.iter_mut().find(|kv| kv.key == key) {
            Some(existing) => existing.value = value,
            None => self.proto.attributes.push(KeyValue {
                key: key.to_string(),
                value,
                ..KeyValue::default()
            }),
        }
        self
    }

    /// The value of attribute `key`, for tests and the exporter's own checks.
    pub fn attribute(&self, key: &str) -> Option<&any_value::Value> {
        self.proto
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref())
    }

    pub fn into_proto(self) -> Span {
        self.proto
    }
}

/// The current time in nanoseconds since the Unix epoch.
pub fn now_unix_nano() -> u64 {
    unix_nano(std::time::SystemTime::now())
}

/// `at` in nanoseconds since the Unix epoch (0 before it).
pub fn unix_nano(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
