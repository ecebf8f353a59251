//! The span of one MCP tool call served at `/mcp`: `execute_tool {tool}`, kind SERVER (a
//! remote client called it), in the GenAI conventions' `execute_tool` operation with the MCP
//! conventions' attributes (`mcp.method.name`, `mcp.session.id`, `jsonrpc.request.id`). The
//! caller's trace context (from the request's `_meta` or its HTTP headers) is continued, so an
//! agent's retrieval calls nest under the same trace as its model calls.
//!
//! ```
//! use ctxkeeper_gateway::telemetry::{SpanKind, ToolCallSpan};
//!
//! let call = ToolCallSpan {
//!     tool: "context_read",
//!     conversation: Some("s1"),
//!     request_id: "7",
//!     mcp_session: None,
//!     traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
//!     tracestate: None,
//!     start_unix_nano: 1_000,
//!     end_unix_nano: 5_000,
//!     error: Some("not found"),
//! };
//! let span = call.record().unwrap().into_proto();
//! assert_eq!(span.name, "execute_tool context_read");
//! assert_eq!(hex::encode(&span.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
//! assert_eq!(span.end_time_unix_nano, 5_000);
//! # let _ = SpanKind::Server;
//! ```

use super::context::{SpanId, TraceContext};
use super::span::{SpanKind, SpanRecord};

/// One answered `tools/call`, as the host reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolCallSpan<'a> {
    pub tool: &'a str,
    /// The ctxkeeper session the call read or compacted (`gen_ai.conversation.id`).
    pub conversation: Option<&'a str>,
    /// The JSON-RPC request id.
    pub request_id: &'a str,
    pub mcp_session: Option<&'a str>,
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// What went wrong (`error.type`), `None` when the tool succeeded.
    pub error: Option<&'a str>,
}

impl ToolCallSpan<'_> {
    /// The finished span; `None` when the caller's trace context says it is not sampled.
    pub fn record(&self) -> Option<SpanRecord> {
        let context = TraceContext::from_values(self.traceparent, self.tracestate);
        if !context.sampled() {
            return None;
        }
        let mut span = SpanRecord::new(
            &context,
            SpanId::random(),
            format!("execute_tool {}", self.tool),
            SpanKind::Server,
            self.start_unix_nano,
        );
        span.str("gen_ai.operation.name", "execute_tool")
            .str("gen_ai.tool.name", self.tool)
            .str("mcp.method.name", "tools/call")
            .str("jsonrpc.request.id", self.request_id)
            .str("network.protocol.name", "http")
            .end(self.end_unix_nano);
        if let Some(conversation) = self.conversation {
            span.str("gen_ai.conversation.id", conversation);
        }
        if let Some(session) = self.mcp_session {
            span.str("mcp.session.id", session);
        }
        if let Some(error) = self.error {
            span.str("error.type", error).error(error);
        }
        Some(span)
    }
}
