//! The tools themselves: argument types (their doc comments become the JSON schema a model
//! reads), scope checks, and the calls into the store, the archive, memory and the facade.
//!
//! Every tool answers a [`CallToolResult`]: structured JSON on success, a tool error
//! (`isError: true`) with a one-line message otherwise. Scope rules live here:
//!
//! - the tenant is fixed by the server; a `session` argument must be a valid identifier and,
//!   when the server is confined to one session, that session;
//! - archive references and globs are checked before the archive sees them (no `..`, no
//!   absolute paths, no NUL or backslash), and the archive checks references again against the
//!   tenant and session, so another tenant's or session's reference reads as not found;
//! - a symbolic link planted in the workspace or the memory directory (`MEMORY.md →
//!   /etc/passwd`, a session directory linked to `/etc` or to another tenant's) is never
//!   followed: the tool answers a `forbidden:` error naming it, and listings and greps pass
//!   over linked items;
//! - queries, patterns and focus texts have size limits, so a 1 MB query is refused with a
//!   message instead of being scanned.

use std::collections::BTreeMap;

use ctxkeeper::ContextManager;
use ctxkeeper::core::engine::{
    Budget, ContextState, Engine, Event, PolicyConfig, PolicyOverlay, Stage,
};
use ctxkeeper::core::model::{Message, Part, Role, api_rounds, turns};
use ctxkeeper::snapshot::Snapshot;
use ctxkeeper::store::archive::{ArchiveRef, ArchiveScope, excerpt};
use ctxkeeper::store::memory::MemoryScope;
use ctxkeeper::store::state::validate_identifier;
use ctxkeeper::store::{
    HistoryPage, SearchQuery, SessionFilter, SessionInfo, SessionKey, StoreError, format_timestamp,
};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{Options, Services};

mod state;
use state::*;

/// Longest accepted search query (bytes).
pub const MAX_QUERY_BYTES: usize = 4_096;
/// Longest accepted regular expression (bytes).
pub const MAX_PATTERN_BYTES: usize = 1_024;
/// Longest accepted glob (bytes).
pub const MAX_GLOB_BYTES: usize = 512;
/// Longest accepted archive reference (bytes).
pub const MAX_REFERENCE_BYTES: usize = 1_024;
/// Longest accepted focus instruction for `compact` (bytes).
pub const MAX_FOCUS_BYTES: usize = 8_192;
/// Longest accepted one-off policy `config` for `compact` (bytes): a policy admin PATCH's limit.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;
/// Default and largest page of `context_read` (bytes).
pub const DEFAULT_READ_LIMIT: u64 = 16_000;
pub const MAX_READ_LIMIT: u64 = 200_000;
/// Characters of a grep hit's line shown around the match.
const GREP_LINE_CHARS: usize = 400;
/// Compiled-program ceiling for `context_grep` regexes.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// The server's backends and settings.
#[derive(Debug)]
pub(crate) struct Backend {
    pub services: Services,
    pub options: Options,
}

/// Why a tool call failed; the message is written for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolError {
    kind: &'static str,
    message: String,
}

impl ToolError {
    pub(crate) fn invalid(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: "invalid",
            message: message.into(),
        }
    }

    fn not_found(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: "not found",
            message: message.into(),
        }
    }

    fn unavailable(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: "unavailable",
            message: message.into(),
        }
    }
}

impl From<StoreError> for ToolError {
    fn from(err: StoreError) -> ToolError {
        match err {
            StoreError::NotFound(what) => ToolError::not_found(what),
            StoreError::InvalidInput(message) => ToolError::invalid(message),
            StoreError::Forbidden(message) => ToolError {
                kind: "forbidden",
                message,
            },
            StoreError::Conflict { .. } => ToolError {
                kind: "conflict",
                message: format!("{err}; the session changed meanwhile, try again"),
            },
            other => ToolError::unavailable(other.to_string()),
        }
    }
}

/// A failed call as the model reads it (`kind: message`), with the kind also in `_meta`
/// ([`crate::observe::ERROR_KIND_META`]) for programs.
pub(crate) fn error_result(err: &ToolError) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(format!(
        "{}: {}",
        err.kind, err.message
    ))]);
    let mut meta = MetaObject::new();
    meta.insert(crate::observe::ERROR_KIND_META.into(), json!(err.kind));
    result.meta = Some(meta);
    result
}

type ToolResult = Result<Value, ToolError>;

/// Runs the named tool.
pub(crate) async fn dispatch(
    backend: &Backend,
    name: &str,
    arguments: JsonObject,
) -> CallToolResult {
    let outcome = match name {
        "session_list" => session_list(backend, parse(name, arguments)).await,
        "session_history" => session_history(backend, parse(name, arguments)).await,
        "session_search" => session_search(backend, parse(name, arguments)).await,
        "context_read" => context_read(backend, parse(name, arguments)).await,
        "context_grep" => context_grep(backend, parse(name, arguments)).await,
        "context_list" => context_list(backend, parse(name, arguments)).await,
        "memory_search" => memory_search(backend, parse(name, arguments)).await,
        "memory_get" => memory_get(backend, parse(name, arguments)).await,
        "context_stats" => context_stats(backend, parse(name, arguments)).await,
        "compact" => compact(backend, parse(name, arguments)).await,
        other => Err(ToolError::not_found(format!(
            "no tool named {:?}",
            clip(other, 80)
        ))),
    };
    match outcome {
        Ok(value) => CallToolResult::structured(value),
        Err(err) => error_result(&err),
    }
}

/// Parses a tool's arguments; a mistake becomes a tool error naming the field.
fn parse<T: DeserializeOwned>(tool: &str, arguments: JsonObject) -> Result<T, ToolError> {
    serde_json::from_value(Value::Object(arguments))
        .map_err(|err| ToolError::invalid(format!("{tool} arguments: {err}")))
}

/// The first `max` characters of `text`.
fn clip(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

fn check_len(what: &str, text: &str, max: usize) -> Result<(), ToolError> {
    if text.len() > max {
        return Err(ToolError::invalid(format!(
            "{what} is {} bytes; the limit is {max}",
            text.len()
        )));
    }
    Ok(())
}

// ----- scope -----------------------------------------------------------------------------

impl Backend {
    /// The session a call acts on: the `session` argument or the server's own, never another.
    fn session(&self, requested: Option<&str>) -> Result<String, ToolError> {
        match (requested, self.options.session.as_deref()) {
            (Some(requested), Some(own)) if requested != own => Err(ToolError::not_found(format!(
                "session {:?} is outside this server's scope (it serves only session {own:?})",
                clip(requested, 80)
            ))),
            (Some(requested), _) => {
                validate_identifier("session", requested).map_err(ToolError::from)?;
                Ok(requested.to_string())
            }
            (None, Some(own)) => Ok(own.to_string()),
            (None, None) => Err(ToolError::invalid(
                "this server serves several sessions: pass `session` (session_list shows them)",
            )),
        }
    }

    fn archive_scope(&self, session: &str) -> ArchiveScope {
        ArchiveScope {
            tenant: self.options.tenant.clone(),
            session: session.to_string(),
        }
    }

    fn filter(&self) -> SessionFilter {
        SessionFilter::tenant(self.options.tenant.clone())
    }

    /// Sessions of the tenant the server may show.
    async fn visible_sessions(&self) -> Result<Vec<SessionInfo>, ToolError> {
        let mut sessions = self.services.store.list(&self.filter()).await?;
        if let Some(own) = &self.options.session {
            sessions.retain(|info| info.key.session() == own);
        }
        Ok(sessions)
    }

    /// The stored key of a session id in the tenant (the most recently updated one when
    /// several users or agents share the id).
    async fn stored_key(&self, session: &str) -> Result<SessionKey, ToolError> {
        self.services
            .store
            .list(&self.filter())
            .await?
            .into_iter()
            .find(|info| info.key.session() == session)
            .map(|info| info.key)
            .ok_or_else(|| {
                ToolError::not_found(format!(
                    "no stored session {:?} in this tenant (session_list shows them)",
                    clip(session, 80)
                ))
            })
    }
}

// ----- argument types (their docs are the schema a model reads) ----------------------------

/// Arguments of `session_list`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Most sessions to return (default 50, at most 500).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Arguments of `session_history`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryArgs {
    /// The session id (optional when the server serves a single session).
    #[serde(default)]
    pub session: Option<String>,
    /// How many messages to return, newest last (default 20, at most 200).
    #[serde(default)]
    pub last: Option<u32>,
    /// Return only messages with a sequence number below this one: pass the previous
    /// result's `next_before_seq` to page back.
    #[serde(default)]
    pub before_seq: Option<u64>,
    /// Cut each message's text to this many characters (default 2000, at most 100000).
    #[serde(default)]
    pub max_chars: Option<u32>,
}

/// Arguments of `session_search`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Words to look for (any word matches; entries with more of them rank higher).
    pub query: String,
    /// Search only this session (default: every session you can read).
    #[serde(default)]
    pub session: Option<String>,
    /// Most hits to return (default 10, at most 50).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Arguments of `context_read`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The archive reference exactly as the placeholder shows it, e.g.
    /// `sessions/s1/tool_result-call_7.txt` or `sessions/s1/context.jsonl#L1-L40`.
    pub reference: String,
    /// The session the reference belongs to (default: taken from the reference).
    #[serde(default)]
    pub session: Option<String>,
    /// Byte offset to start from (default 0); use the previous page's `next_offset`.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Most bytes to return (default 16000, at most 200000).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Arguments of `context_grep`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// A regular expression (Rust regex syntax, no look-around), matched against each line.
    pub pattern: String,
    /// The session whose archive to search (optional when the server serves one session).
    #[serde(default)]
    pub session: Option<String>,
    /// Match case-insensitively (default false).
    #[serde(default)]
    pub ignore_case: Option<bool>,
    /// Most matching lines to return (default 50, at most 500).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Arguments of `context_list`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArchiveArgs {
    /// A glob on item names, e.g. `tool_result-*` or `*.jsonl` (default: all items).
    #[serde(default)]
    pub pattern: Option<String>,
    /// The session whose archive to list (optional when the server serves one session).
    #[serde(default)]
    pub session: Option<String>,
}

/// Arguments of `memory_search`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchArgs {
    /// Words to look for.
    pub query: String,
    /// Most paragraphs to return (default 5, at most 50).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Arguments of `memory_get`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryGetArgs {
    /// `MEMORY.md` or `memory/YYYY-MM-DD.md` (as `memory_search` reports it).
    pub path: String,
    /// First line to return, 1-based (default 1).
    #[serde(default)]
    pub from_line: Option<u64>,
    /// How many lines to return (default: to the end).
    #[serde(default)]
    pub lines: Option<u64>,
}

/// Arguments of `context_stats`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatsArgs {
    /// The session id (optional when the server serves a single session).
    #[serde(default)]
    pub session: Option<String>,
}

/// Arguments of `compact`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactArgs {
    /// The session id (optional when the server serves a single session).
    #[serde(default)]
    pub session: Option<String>,
    /// What the summary must preserve, e.g. "keep the failing test names and the fix plan".
    #[serde(default)]
    pub focus: Option<String>,
    /// Compact even when the context is below the policy's trigger. Without it a context
    /// below the trigger is left as it is and the answer says so (AgentScope's
    /// `compress_context()`), so calling `compact` between turns is always safe.
    #[serde(default)]
    pub force: bool,
    /// Policy settings for this compaction only, laid over the server's policy key by key as
    /// a `--config` file's `[policy]` table is: an object such as
    /// `{"trigger_ratio": 0.5, "keep_recent_rounds": 2}` or the same as a TOML fragment
    /// (`"trigger_ratio = 0.5"`). The trigger checked is the one this gives.
    #[serde(default)]
    pub config: Option<Value>,
}

// ----- session log -------------------------------------------------------------------------

async fn session_list(backend: &Backend, args: Result<ListArgs, ToolError>) -> ToolResult {
    let args = args?;
    let limit = args.limit.unwrap_or(50).clamp(1, 500) as usize;
    let sessions = backend.visible_sessions().await?;
    let total = sessions.len();
    let listed: Vec<Value> = sessions
        .iter()
        .take(limit)
        .map(|info| {
            json!({
                "session": info.key.session(),
                "user": info.key.user(),
                "agent": info.key.agent(),
                "log_entries": info.log_len,
                "state_version": info.version,
                "created_at": format_timestamp(info.created_at_ms),
                "updated_at": format_timestamp(info.updated_at_ms),
            })
        })
        .collect();
    Ok(json!({
        "tenant": backend.options.tenant,
        "total": total,
        "sessions": listed,
    }))
}

async fn session_history(backend: &Backend, args: Result<HistoryArgs, ToolError>) -> ToolResult {
    let args = args?;
    let session = backend.session(args.session.as_deref())?;
    let key = backend.stored_key(&session).await?;
    let last = args.last.unwrap_or(20).clamp(1, 200) as usize;
    let max_chars = args.max_chars.unwrap_or(2_000).clamp(1, 100_000) as usize;
    let page = match args.before_seq {
        Some(seq) => HistoryPage::before(last, seq),
        None => HistoryPage::last(last),
    };
    let entries = backend.services.store.history(&key, page).await?;
    let next_before_seq = entries.first().map(|e| e.seq).filter(|&seq| seq > 1);
    let shown: Vec<Value> = entries
        .iter()
        .map(|entry| {
            let text = render_message(&entry.message);
            let chars = text.chars().count();
            json!({
                "seq": entry.seq,
                "at": format_timestamp(entry.at_ms),
                "role": entry.message.role.as_str(),
                "text": clip(&text, max_chars),
                "chars": chars,
                "truncated": chars > max_chars,
            })
        })
        .collect();
    Ok(json!({
        "session": session,
        "entries": shown,
        "next_before_seq": next_before_seq,
    }))
}

async fn session_search(backend: &Backend, args: Result<SearchArgs, ToolError>) -> ToolResult {
    let args = args?;
    check_len("query", &args.query, MAX_QUERY_BYTES)?;
    let limit = args.limit.unwrap_or(10).clamp(1, 50) as usize;
    let confined = args.session.is_some() || backend.options.session.is_some();
    let mut query = if confined {
        let session = backend.session(args.session.as_deref())?;
        SearchQuery::session(backend.stored_key(&session).await?, args.query.as_str())
    } else {
        SearchQuery::tenant(backend.options.tenant.clone(), args.query.as_str())
    };
    query.limit = limit;
    let hits = backend.services.store.search(&query).await?;
    let shown: Vec<Value> = hits
        .iter()
        .map(|hit| {
            json!({
                "session": hit.key.session(),
                "seq": hit.seq,
                "at": format_timestamp(hit.at_ms),
                "score": hit.score,
                "snippet": hit.snippet,
            })
        })
        .collect();
    Ok(json!({
        "query": args.query,
        "hits": shown,
    }))
}

/// Renders a message as readable text: text parts, tool calls and results labelled.
pub(crate) fn render_message(message: &Message) -> String {
    let mut out = Vec::new();
    for part in &message.parts {
        match part {
            Part::Text { text, .. } => out.push(text.clone()),
            Part::ToolCall {
                id,
                name,
                arguments,
                ..
            } => out.push(format!("[tool call {name} id={id}] {arguments}")),
            Part::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => {
                let body = Message::new(Role::Tool, content.clone()).text();
                let label = if *is_error {
                    "tool error"
                } else {
                    "tool result"
                };
                out.push(format!("[{label} id={call_id}] {body}"));
            }
            Part::Reasoning {
                text: Some(text), ..
            } => out.push(format!("[reasoning] {text}")),
            Part::Reasoning { .. } => {}
            Part::Data { .. } => out.push("[data]".to_string()),
            Part::Opaque { .. } => {}
        }
    }
    out.join("\n")
}

// ----- archive ------------------------------------------------------------------------------

/// The session segment of `sessions/<session>/…`, when it is a plausible session id.
fn session_of_reference(reference: &str) -> Option<&str> {
    let rest = reference.strip_prefix("sessions/")?;
    let (session, _) = rest.split_once('/')?;
    validate_identifier("session", session).ok()?;
    Some(session)
}

/// A reference as a model may paste it: surrounding quotes, backticks or a closing bracket
/// from the placeholder text are dropped.
fn clean_reference(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || matches!(c, '`' | '"' | '\'' | ']'))
}

/// Refuses paths that could leave the archive before any backend sees them.
fn check_path_like(what: &str, text: &str, max: usize) -> Result<(), ToolError> {
    check_len(what, text, max)?;
    let shown = clip(text, 80);
    if text.is_empty() {
        return Err(ToolError::invalid(format!("{what} is empty")));
    }
    if text.contains('\0') || text.contains('\\') {
        return Err(ToolError::invalid(format!(
            "{what} {shown:?} contains a NUL or a backslash"
        )));
    }
    if text.starts_with('/') || text.starts_with('~') || text.contains(":/") {
        return Err(ToolError::invalid(format!(
            "{what} {shown:?} is absolute; archive references are relative (sessions/…)"
        )));
    }
    let path = text.split('#').next().unwrap_or_default();
    if path.split('/').any(|s| s == ".." || s == ".") {
        return Err(ToolError::invalid(format!(
            "{what} {shown:?} contains a `.` or `..` segment"
        )));
    }
    Ok(())
}

async fn context_read(backend: &Backend, args: Result<ReadArgs, ToolError>) -> ToolResult {
    let args = args?;
    let reference = clean_reference(&args.reference);
    check_path_like("reference", reference, MAX_REFERENCE_BYTES)?;
    let session = match (args.session.as_deref(), session_of_reference(reference)) {
        (Some(requested), _) => backend.session(Some(requested))?,
        (None, Some(from_reference)) => match &backend.options.session {
            // Confined: the archive itself answers "not found" for another session.
            Some(own) => own.clone(),
            None => from_reference.to_string(),
        },
        (None, None) => match &backend.options.session {
            Some(own) => own.clone(),
            // `data/…` items belong to the tenant, not to a session: any scope reads them.
            None => "_".to_string(),
        },
    };
    let offset = args.offset.unwrap_or(0);
    let limit = args
        .limit
        .unwrap_or(DEFAULT_READ_LIMIT)
        .clamp(1, MAX_READ_LIMIT);
    let page = backend
        .services
        .archive
        .read(
            &backend.archive_scope(&session),
            &ArchiveRef(reference.to_string()),
            offset,
            limit,
        )
        .await?;
    let returned = page.content.len();
    Ok(json!({
        "reference": reference,
        "offset": page.offset,
        "returned_bytes": returned,
        "total_bytes": page.total_bytes,
        "next_offset": page.next_offset,
        "complete": page.next_offset.is_none(),
        "content": page.content,
    }))
}

async fn context_grep(backend: &Backend, args: Result<GrepArgs, ToolError>) -> ToolResult {
    let args = args?;
    check_len("pattern", &args.pattern, MAX_PATTERN_BYTES)?;
    if args.pattern.is_empty() {
        return Err(ToolError::invalid("pattern is empty"));
    }
    let session = backend.session(args.session.as_deref())?;
    let regex = regex::RegexBuilder::new(&args.pattern)
        .case_insensitive(args.ignore_case.unwrap_or(false))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|err| {
            ToolError::invalid(format!(
                "invalid regular expression {:?}: {}",
                clip(&args.pattern, 80),
                one_line(&err.to_string())
            ))
        })?;
    let limit = args.limit.unwrap_or(50).clamp(1, 500) as usize;
    // One more than asked, to tell the model whether there is more.
    let mut hits = backend
        .services
        .archive
        .grep(&backend.archive_scope(&session), &regex, limit + 1)
        .await?;
    let more = hits.len() > limit;
    hits.truncate(limit);
    let shown: Vec<Value> = hits
        .iter()
        .map(|hit| {
            json!({
                "reference": hit.reference.as_str(),
                "line": hit.line,
                "text": excerpt(&hit.text, &regex, GREP_LINE_CHARS),
            })
        })
        .collect();
    Ok(json!({
        "session": session,
        "pattern": args.pattern,
        "hits": shown,
        "more": more,
    }))
}

/// Collapses a multi-line message (regex errors draw a caret diagram) into one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn context_list(backend: &Backend, args: Result<ListArchiveArgs, ToolError>) -> ToolResult {
    let args = args?;
    let session = backend.session(args.session.as_deref())?;
    let scope = backend.archive_scope(&session);
    let entries = match args.pattern.as_deref() {
        None | Some("") | Some("*") => backend.services.archive.list(&scope).await?,
        Some(pattern) => {
            check_path_like("glob", pattern, MAX_GLOB_BYTES)?;
            backend.services.archive.glob(&scope, pattern).await?
        }
    };
    let total_bytes: u64 = entries.iter().map(|e| e.bytes).sum();
    let items: Vec<Value> = entries
        .iter()
        .map(|e| json!({"reference": e.reference.as_str(), "bytes": e.bytes}))
        .collect();
    Ok(json!({
        "session": session,
        "count": items.len(),
        "total_bytes": total_bytes,
        "items": items,
    }))
}

// ----- memory ----------------------------------------------------------------------------------

impl Backend {
    fn memory(
        &self,
    ) -> Result<(&ctxkeeper::store::memory::LongTermMemory, MemoryScope), ToolError> {
        let memory = self.services.memory.as_deref().ok_or_else(|| {
            ToolError::unavailable("long-term memory is not configured on this server")
        })?;
        let scope = MemoryScope::new(self.options.tenant.clone(), SessionKey::DEFAULT)?;
        Ok((memory, scope))
    }
}

async fn memory_search(backend: &Backend, args: Result<MemorySearchArgs, ToolError>) -> ToolResult {
    let args = args?;
    check_len("query", &args.query, MAX_QUERY_BYTES)?;
    let limit = args.limit.unwrap_or(5).clamp(1, 50) as usize;
    let (memory, scope) = backend.memory()?;
    let hits = memory.memory_search(&scope, &args.query, limit).await?;
    Ok(json!({
        "query": args.query,
        "hits": hits,
    }))
}

async fn memory_get(backend: &Backend, args: Result<MemoryGetArgs, ToolError>) -> ToolResult {
    let args = args?;
    check_path_like("path", &args.path, 256)?;
    let (memory, scope) = backend.memory()?;
    let text = memory
        .memory_get(&scope, &args.path, args.from_line, args.lines)
        .await?;
    Ok(serde_json::to_value(text).unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests;
