//! The archive contract: where content goes when it leaves the context, and how it comes back.
//!
//! The compaction engine never deletes content. Before a tool output is cut to a preview or a
//! prefix of the conversation is summarized, the full content is written through an
//! [`Offloader`]; only after the write succeeded does the placeholder (which names the returned
//! [`ArchiveRef`]) replace it in the context. Retrieval (read with paging, grep, glob, list) is
//! part of the same contract so that the MCP tools and the agent can pull anything back.
//!
//! Every operation is scoped by an [`ArchiveScope`] (tenant + session). A reference is a
//! relative path inside the scope's archive, such as `sessions/s1/tool_result-call_7.txt`; a
//! reference that escapes its scope, or names another tenant's content, reads as not found.
//! Identifiers become path segments only through [`sanitize_segment`].

use std::fmt;

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
use serde::{Deserialize, Serialize};

use crate::StoreError;

/// The tenant and session an archive operation belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArchiveScope {
    pub tenant: String,
    pub session: String,
}

impl ArchiveScope {
    /// The tenant used when a deployment has only one.
    pub const DEFAULT_TENANT: &'static str = "default";

    /// A scope in the default tenant.
    pub fn session(session: impl Into<String>) -> ArchiveScope {
        ArchiveScope {
            tenant: Self::DEFAULT_TENANT.to_string(),
            session: session.into(),
        }
    }
}

/// A stable reference to archived content, relative to its tenant's archive root
/// (`sessions/{session}/tool_result-{id}.txt`, `sessions/{session}/context.jsonl#L10-L42`,
/// `data/{sha256}.png`). Placeholders in the context show it verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ArchiveRef(pub String);

impl ArchiveRef {
    /// The reference text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ArchiveRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A page of an archived item read back as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// The text from `offset` (in bytes, on a character boundary) up to `limit` bytes.
    pub content: String,
    pub offset: u64,
    /// Total size of the item in bytes.
    pub total_bytes: u64,
    /// Where the next page starts, or `None` at the end.
    pub next_offset: Option<u64>,
}

/// One line of an archived item that matched a grep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepHit {
    pub reference: ArchiveRef,
    /// 1-based line number.
    pub line: u64,
    pub text: String,
}

/// One archived item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveEntry {
    pub reference: ArchiveRef,
    pub bytes: u64,
}

/// Where content leaves the context to, and how it is read back.
///
/// Implementations must make a write durable before returning its reference (the engine
/// removes content from the context only afterwards), must never let an identifier or a
/// reference reach outside the scope's archive, and must give repeated tool-call ids distinct
/// references (ids repeat within real sessions).
#[async_trait]
pub trait Offloader: Send + Sync + fmt::Debug {
    /// Appends compacted messages to the session's context archive (one JSON message per line)
    /// and returns a reference to exactly those lines.
    async fn offload_context(
        &self,
        scope: &ArchiveScope,
        messages: &[Message],
    ) -> Result<ArchiveRef, StoreError>;

    /// Stores the *whole* output of a tool call and returns its reference.
    async fn offload_tool_result(
        &self,
        scope: &ArchiveScope,
        call_id: &str,
        content: &str,
    ) -> Result<ArchiveRef, StoreError>;

    /// Stores the *whole* output of a tool call in Agentrail's layout,
    /// `sessions/<session>/tool-results/<toolCallId>.txt` (`<toolCallId>(1).txt`, … for a
    /// repeated id), and returns its reference. The id becomes one file name inside that
    /// folder only through [`sanitize_segment`].
    async fn offload_tool_result_file(
        &self,
        scope: &ArchiveScope,
        call_id: &str,
        content: &str,
    ) -> Result<ArchiveRef, StoreError>;

    /// Stores binary data (an image, audio) by content hash: `data/{sha256}.{ext}`. Storing the
    /// same bytes twice returns the same reference.
    async fn put_data(
        &self,
        scope: &ArchiveScope,
        bytes: &[u8],
        media_type: &str,
    ) -> Result<ArchiveRef, StoreError>;

    /// Stores messages as one whole file of the session's archive, in a seed system's layout:
    /// `name` is `<chat_id>_<g>.json` (a JSON array: ReMe's group of originals) or
    /// `messages.compactions/<id>.jsonl` (one message per line: Agentrail's compaction
    /// archive). Names carry fresh ids, so an existing file is never overwritten (that is
    /// a conflict). Inline data parts go to `data/<sha256>.<ext>` as in `offload_context`.
    async fn offload_messages_file(
        &self,
        scope: &ArchiveScope,
        name: &str,
        messages: &[Message],
    ) -> Result<ArchiveRef, StoreError>;

    /// Reads up to `limit` bytes of an item from `offset`, as text.
    async fn read(
        &self,
        scope: &ArchiveScope,
        reference: &ArchiveRef,
        offset: u64,
        limit: u64,
    ) -> Result<Page, StoreError>;

    /// The whole bytes of an item.
    async fn read_all(
        &self,
        scope: &ArchiveScope,
        reference: &ArchiveRef,
    ) -> Result<Vec<u8>, StoreError>;

    /// Lines of the session's archived items matching a regular expression, at most `limit`.
    async fn grep(
        &self,
        scope: &ArchiveScope,
        pattern: &regex::Regex,
        limit: usize,
    ) -> Result<Vec<GrepHit>, StoreError>;

    /// The session's archived items whose reference matches a glob (`*.txt`,
    /// `tool_result-*`).
    async fn glob(
        &self,
        scope: &ArchiveScope,
        pattern: &str,
    ) -> Result<Vec<ArchiveEntry>, StoreError>;

    /// All of the session's archived items.
    async fn list(&self, scope: &ArchiveScope) -> Result<Vec<ArchiveEntry>, StoreError>;
}

pub use crate::blob::{COMPACTIONS_DIR, TOOL_RESULTS_DIR};

/// The media type and bytes of an inline data part (base64, or a base64 `data:` URL), as
/// [`Offloader::put_data`] stores them; `None` for a remote URL, archived data, or base64
/// that does not decode.
pub fn inline_data(source: &ctxkeeper_core::model::DataSource) -> Option<(String, Vec<u8>)> {
    crate::blob::inline_bytes(source)
}

/// At most `width` characters of a grep hit's `line`, around the first match of `pattern` when
/// the line is longer (archived messages are one JSON object per line and can be very long);
/// `…` marks what was cut at either end.
pub fn excerpt(line: &str, pattern: &regex::Regex, width: usize) -> String {
    let chars = line.chars().count();
    if chars <= width {
        return line.to_string();
    }
    let at = pattern
        .find(line)
        .map_or(0, |m| line[..m.start()].chars().count());
    let start = at.saturating_sub(width / 4).min(chars - width);
    let body: String = line.chars().skip(start).take(width).collect();
    let head = if start > 0 { "…" } else { "" };
    let tail = if start + width < chars { "…" } else { "" };
    format!("{head}{body}{tail}")
}

/// Turns an identifier (session id, tool-call id) into a safe single path segment.
///
/// Characters outside `[A-Za-z0-9._-]` become `_`, leading dots are replaced, and the result is
/// capped in length; when anything had to change, a short hash of the original is appended so
/// that distinct ids never collide: `../../x` becomes `_.____x-<hash>`, with no separator
/// and no leading dot.
///
/// ```
/// use ctxkeeper_store::archive::sanitize_segment;
///
/// assert_eq!(sanitize_segment("call_7"), "call_7");
/// let hostile = sanitize_segment("../../etc/passwd");
/// assert!(!hostile.contains('/') && !hostile.starts_with('.'));
/// assert_ne!(sanitize_segment("a/b"), sanitize_segment("a_b"));
/// ```
pub fn sanitize_segment(id: &str) -> String {
    const MAX_LEN: usize = 96;
    let mut clean: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.starts_with('.') {
        clean.replace_range(0..1, "_");
    }
    let changed = clean != id || clean.is_empty() || clean.len() > MAX_LEN;
    if !changed {
        return clean;
    }
    clean.truncate(MAX_LEN);
    format!("{clean}-{}", short_hash(id))
}

/// The first 12 hex digits of the SHA-256 of `text`.
fn short_hash(text: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    hex::encode(&digest[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_ids_never_become_paths() {
        for id in [
            "../../x",
            "/etc/passwd",
            "..",
            ".",
            "",
            "a\\b",
            "a\0b",
            "C:\\x",
            "~root",
        ] {
            let segment = sanitize_segment(id);
            assert!(!segment.is_empty(), "{id:?}");
            assert!(
                !segment.contains('/') && !segment.contains('\\'),
                "{id:?} -> {segment}"
            );
            assert!(!segment.starts_with('.'), "{id:?} -> {segment}");
            assert!(segment != "." && segment != "..");
        }
    }

    #[test]
    fn distinct_ids_stay_distinct() {
        let ids = ["a/b", "a_b", "a b", "a\\b", "a?b"];
        let mut seen: Vec<String> = ids.iter().map(|id| sanitize_segment(id)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), ids.len());
    }

    #[test]
    fn long_ids_are_capped() {
        assert!(sanitize_segment(&"x".repeat(10_000)).len() < 120);
    }
}
