//! The MCP face: tool names, descriptions and input schemas, routed to [`crate::tools`].
//!
//! Each `#[tool]` method is a thin shim: it takes the raw argument object and hands it to
//! [`ContextServer::call`], which parses it against the tool's argument type. Parsing there
//! (rather than in rmcp's `Parameters` extractor) turns a malformed argument into a tool error
//! the model can read and correct, instead of a JSON-RPC error it may never see.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde_json::Value;

use crate::observe::{ERROR_KIND_META, ToolCallRecord};
use crate::tools::{self, Backend};
use crate::{Options, Services, SetupError};

/// The MCP server: one tenant's (or one session's) archive, log, memory and state as tools.
/// Cloning is cheap; clones share the backends.
#[derive(Clone)]
pub struct ContextServer {
    pub(crate) backend: Arc<Backend>,
    tool_router: ToolRouter<ContextServer>,
}

impl std::fmt::Debug for ContextServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextServer")
            .field("tenant", &self.backend.options.tenant)
            .field("session", &self.backend.options.session)
            .finish()
    }
}

/// The input schema of a tool's argument type (an object schema, as MCP requires).
fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_input::<T>()
        .unwrap_or_else(|_| rmcp::handler::server::common::schema_for_empty_input())
}

const INSTRUCTIONS: &str = "ctxkeeper keeps this agent's context inside its window by \
compacting it: old tool outputs are replaced by placeholders and old turns by summaries, and \
everything removed is archived. A placeholder names an archive reference such as \
`sessions/s1/tool_result-call_7.txt`; pass it to `context_read` to get the original back. \
`session_search` finds words anywhere in the full, uncompacted session log; `context_grep` \
searches the archived items with a regular expression; `session_history` pages through the log; \
`memory_search` / `memory_get` read long-term memory; `context_stats` shows how full the \
window is and `compact` frees room on demand.";

impl ContextServer {
    /// A server over the given backends, confined to `options.tenant` (and `options.session`
    /// when set).
    pub fn new(services: Services, options: Options) -> Result<ContextServer, SetupError> {
        options.validate()?;
        Ok(ContextServer {
            backend: Arc::new(Backend { services, options }),
            tool_router: Self::tool_router(),
        })
    }

    /// Runs a tool by name with JSON arguments, exactly as an MCP `tools/call` would. Unknown
    /// tools and bad arguments come back as tool errors.
    pub async fn call(&self, name: &str, arguments: Value) -> CallToolResult {
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => JsonObject::new(),
            other => {
                return tools::error_result(&tools::ToolError::invalid(format!(
                    "arguments must be a JSON object, got {}",
                    ctxkeeper::core::json_kind(&other)
                )));
            }
        };
        tools::dispatch(&self.backend, name, arguments).await
    }

    /// What the observer is told of a call, before it runs: who asked, in which trace.
    fn record_of(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> ToolCallRecord {
        let http = context.extensions.get::<axum::http::request::Parts>();
        let header = |name: &str| {
            http.and_then(|parts| parts.headers.get(name))
                .and_then(|value| value.to_str().ok())
                .map(str::to_string)
        };
        // An MCP client propagates its trace in the request's `_meta` (any transport); over
        // HTTP an instrumented client may send the headers instead.
        let traced = |field: &str| {
            request
                .meta
                .as_ref()
                .and_then(|meta| meta.get(field))
                .or_else(|| context.meta.get(field))
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| header(field))
        };
        let session = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("session"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| self.backend.options.session.clone());
        ToolCallRecord {
            tool: request.name.to_string(),
            tenant: self.backend.options.tenant.clone(),
            session,
            request_id: context.id.to_string(),
            mcp_session: header("mcp-session-id"),
            traceparent: traced("traceparent"),
            tracestate: traced("tracestate"),
            started: SystemTime::now(),
            duration: Duration::ZERO,
            error: None,
        }
    }

    /// The names of every tool this server offers.
    pub fn tool_names(&self) -> Vec<String> {
        self.tool_router
            .list_all()
            .into_iter()
            .map(|tool| tool.name.to_string())
            .collect()
    }
}

#[tool_router]
impl ContextServer {
    #[tool(
        name = "session_list",
        description = "List the stored sessions you can read (most recently updated first), \
        with how many messages each session log holds. Use the `session` values with the other \
        tools.",
        input_schema = input_schema::<tools::ListArgs>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn session_list(&self, arguments: JsonObject) -> CallToolResult {
        tools::dispatch(&self.backend, "session_list", arguments).await
    }

    #[tool(
        name = "session_history",
        description = "Read the session log: every message the session ever saw, uncompacted, \
        oldest first. Returns the last `last` messages; to page further back, pass the returned \
        `next_before_seq` as `before_seq`. Long messages are cut to `max_chars` (the result says \
        so); use `session_search` or `context_read` for the full text.",
        input_schema = input_schema::<tools::HistoryArgs>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn session_history(&self, arguments: JsonObject) -> CallToolResult {
        tools::dispatch(&self.backend, "session_history", arguments).await
    }

    #[tool(
        name = "session_search",
        description = "Full-text search over session logs (the complete history, including tool \
        outputs that were compacted out of your context). Words are matched, best matches \
        first, each hit with its session, log sequence number and a snippet. Without `session` \
        it searches every session you can read.",
        input_schema = input_schema::<tools::SearchArgs>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn session_search(&self, arguments: JsonObject) -> CallToolResult {
        tools::dispatch(&self.backend, "session_search", arguments).await
    }

    #[tool(
        name = "context_read",
        description = "Read back archived content by the reference a placeholder shows (for \
        example `sessions/s1/tool_result-call_7.txt` or `sessions/s1/context.jsonl#L1-L40`). \
        Returns up to `limit` bytes from `offset`, the item's total size and `next_offset`; call \
        again with `offset` = `next_offset` until it is null to read everything.",
        input_schema = input_schema::<tools::ReadArgs>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn context_read(&self, arguments: JsonObject) -> CallToolResult {
        tools::dispatch(&self.backend, "context_read", arguments).await
    }

    #[tool(
        name = "context_grep",
        description = "Search a session's archived items (full tool outputs, compacted \
        messages) with a regular expression (Rust regex syntax). Returns matching lines with \
        their reference and 1-based line number; read around a hit with `context_read`.",
        input_schema = input_schema::<tools::GrepArgs>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn context_grep(&self, arguments: JsonObject) -> CallToolResult {
        tools::dispatch(&self.backend, "context_grep", arguments).await
    }

    #[tool(
        name = "context_list",
        description = "List a session's archived items with their sizes, optionally filtered \
        by a glob on the item name (`tool_result-*`, `*.jsonl`).",
        input_schema = input_schema::<tools::ListArchiveArgs>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn context_list(&self, arguments: JsonObject) -> CallToolResult {
        tools::dispatch(&self.backend, "context_list", arguments).await
    }

    #[tool(
        name = "memory_search",
        description = "Search long-term memory (MEMORY.md and the daily memory files) for \
        durable facts; paragraphs ranked best first, each with its file and line.",
        input_schema = input_schema::<tools::MemorySearchArgs>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_search(&self, arguments: JsonObject) -> CallToolResult {
        tools::dispatch(&self.backend, "memory_search", arguments).await
    }

    #[tool(
        name = "memory_get",
        description = "Read a long-term memory file (`MEMORY.md` or `memory/YYYY-MM-DD.md`), \
        whole or `lines` lines from `from_line`.",
        input_schema = input_schema::<tools::MemoryGetArgs>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_get(&self, arguments: JsonObject) -> CallToolResult {
        tools::dispatch(&self.backend, "memory_get", arguments).await
    }

    #[tool(
        name = "context_stats",
        description = "How full a session's context is: tokens used against the window, \
        whether a summary is present, message counts by role, tool calls and results, log \
        length and the number of archived items.",
        input_schema = input_schema::<tools::StatsArgs>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn context_stats(&self, arguments: JsonObject) -> CallToolResult {
        tools::dispatch(&self.backend, "context_stats", arguments).await
    }

    #[tool(
        name = "compact",
        description = "Compact the stored session's context, to free room in the window: \
        old tool outputs are archived behind placeholders and older turns summarized (nothing \
        is lost; it stays readable with `context_read`). Below the policy's trigger nothing is \
        done unless `force` is true, so it is safe to call between turns. `focus` tells the \
        summarizer what to keep; `config` overrides policy settings for this compaction only. \
        Reports tokens before and after, or why nothing was compacted.",
        input_schema = input_schema::<tools::CompactArgs>(),
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn compact(&self, arguments: JsonObject) -> CallToolResult {
        tools::dispatch(&self.backend, "compact", arguments).await
    }
}

#[tool_handler]
impl ServerHandler for ContextServer {
    /// The router's call, timed and reported to the host's observer when there is one.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let Some(observer) = self.backend.services.tool_calls.clone() else {
            return self
                .tool_router
                .call(ToolCallContext::new(self, request, context))
                .await;
        };
        let mut record = self.record_of(&request, &context);
        let started = Instant::now();
        let answer = self
            .tool_router
            .call(ToolCallContext::new(self, request, context))
            .await;
        record.duration = started.elapsed();
        record.error = match &answer {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => Some(
                result
                    .meta
                    .as_ref()
                    .and_then(|meta| meta.get(ERROR_KIND_META))
                    .and_then(Value::as_str)
                    .unwrap_or("tool error")
                    .to_string(),
            ),
            Ok(_) => None,
            Err(error) => Some(format!("jsonrpc {}", error.code.0)),
        };
        observer.tool_called(&record);
        answer
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("ctxkeeper", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}
