//! What a host learns of every `tools/call` the server answers: the tool, the tenant and
//! session, how long it took, how it ended, and the caller's W3C trace context. The gateway's
//! `ctxkeeper serve` turns each record into an OpenTelemetry `execute_tool` span; this crate
//! itself knows nothing of tracing.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use ctxkeeper_mcp::{ToolCallObserver, ToolCallRecord};
//!
//! #[derive(Debug, Default)]
//! struct Tally(Mutex<Vec<(String, Option<String>)>>);
//!
//! impl ToolCallObserver for Tally {
//!     fn tool_called(&self, call: &ToolCallRecord) {
//!         self.0.lock().unwrap().push((call.tool.clone(), call.error.clone()));
//!     }
//! }
//! let tally: Arc<dyn ToolCallObserver> = Arc::new(Tally::default());
//! # let _ = tally;
//! ```

use std::time::{Duration, SystemTime};

/// One answered `tools/call`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallRecord {
    /// The tool's name as the client sent it.
    pub tool: String,
    /// The tenant the call was served for.
    pub tenant: String,
    /// The session the call named (its `session` argument), else the server's own.
    pub session: Option<String>,
    /// The JSON-RPC request id.
    pub request_id: String,
    /// The MCP session (`Mcp-Session-Id`) over streamable HTTP.
    pub mcp_session: Option<String>,
    /// The caller's `traceparent` / `tracestate`: from the request's `_meta` (as MCP clients
    /// propagate it), else from the HTTP request's headers.
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    pub started: SystemTime,
    pub duration: Duration,
    /// `None` when the tool succeeded; else what went wrong: the tool error's kind (`invalid`,
    /// `not found`, `forbidden`, `conflict`, `unavailable`) or, for a call refused before any
    /// tool ran, `jsonrpc {code}`.
    pub error: Option<String>,
}

/// Receives a record of every answered tool call. Called on the request's task after the
/// answer is built: keep it quick (queue, don't export inline).
pub trait ToolCallObserver: Send + Sync + std::fmt::Debug {
    fn tool_called(&self, call: &ToolCallRecord);
}

/// The `_meta` key under which the error kind of a failed tool call travels in its result,
/// for clients and for the observer alike.
pub const ERROR_KIND_META: &str = "ctxkeeper/error";
