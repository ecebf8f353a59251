//! The archive logic every [`Offloader`] backend shares: naming, clash suffixes, reference
//! validation, paging, grep, glob and list. A backend only provides [`Blobs`]: create-if-absent,
//! get, list, and the append-only context archive.
//!
//! Reference grammar (relative to the tenant's archive root):
//!
//! ```text
//! data/<sha256>.<ext>
//! sessions/<session>/<name>                      name: tool_result-<id>.txt, tool_result-<id>(1).txt, …
//! sessions/<session>/context.jsonl               the whole context archive
//! sessions/<session>/context.jsonl#L<a>-L<b>     lines a..=b of it (1-based)
//! sessions/<session>/<chat_id>_<g>.json          a summarized group's originals (ReMe)
//! sessions/<session>/messages.compactions/<id>.jsonl   one compaction's messages (Agentrail)
//! sessions/<session>/tool-results/<id>.txt       a tool call's whole output (Agentrail)
//! ```
//!
//! Data parts (images, audio) of archived messages are stored once as `data/<sha256>.<ext>`
//! and the archived message names them ([`DataSource::Archived`]), as AgentScope's
//! `LocalWorkspace` does: the message lines stay small and a repeated image is stored once.
//!
//! Anything else — absolute paths, backslashes, `.` or `..` segments, another session's
//! directory, hidden names — is refused before a backend sees it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;
use ctxkeeper_core::model::{DataSource, Message, Part};

use crate::StoreError;
use crate::archive::{
    ArchiveEntry, ArchiveRef, ArchiveScope, GrepHit, Offloader, Page, sanitize_segment,
};

/// The name of a session's context archive.
pub(crate) const CONTEXT_FILE: &str = "context.jsonl";

/// A sub-directory of a session's archive: Agentrail's compaction archive.
pub const COMPACTIONS_DIR: &str = "messages.compactions";

/// A sub-directory of a session's archive: Agentrail's whole tool outputs
/// (`tool-results/<toolCallId>.txt`).
pub const TOOL_RESULTS_DIR: &str = "tool-results";

/// The sub-directories of a session's archive, each holding files directly.
const SESSION_SUBDIRS: [&str; 2] = [COMPACTIONS_DIR, TOOL_RESULTS_DIR];

/// Where an archive operation acts: the tenant's directory (`""` for the default tenant,
/// `tenants/<tenant>` otherwise) and the session's sanitized segment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Loc {
    pub tenant_dir: String,
    pub session: String,
}

impl Loc {
    pub(crate) fn of(scope: &ArchiveScope) -> Result<Loc, StoreError> {
        if scope.tenant.is_empty() || scope.session.is_empty() {
            return Err(StoreError::InvalidInput(
                "archive scope needs a tenant and a session".into(),
            ));
        }
        let tenant_dir = if scope.tenant == ArchiveScope::DEFAULT_TENANT {
            String::new()
        } else {
            format!("tenants/{}", sanitize_segment(&scope.tenant))
        };
        Ok(Loc {
            tenant_dir,
            session: sanitize_segment(&scope.session),
        })
    }

    /// `sessions/<session>`.
    pub(crate) fn session_dir(&self) -> String {
        format!("sessions/{}", self.session)
    }
}

/// Storage primitives of one archive backend. Paths are relative to the tenant directory.
#[async_trait]
pub(crate) trait Blobs: Send + Sync + fmt::Debug {
    /// Stores `bytes` at `path` unless something is there already (then returns false). The
    /// item must be durable when this returns true.
    async fn create(
        &self,
        tenant_dir: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<bool, StoreError>;

    /// The bytes at `path`, or `None`.
    async fn get(&self, tenant_dir: &str, path: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// The items directly inside `dir` (names and sizes), the context archive included as
    /// [`CONTEXT_FILE`]; never hidden or internal names.
    async fn list(&self, tenant_dir: &str, dir: &str) -> Result<Vec<(String, u64)>, StoreError>;

    /// Appends `count` complete JSON lines to the session's context archive and returns the
    /// 1-based numbers of the first and last line written.
    async fn append_context(
        &self,
        loc: &Loc,
        lines: Vec<u8>,
        count: u64,
    ) -> Result<(u64, u64), StoreError>;

    /// Lines `first..=last` of the context archive (each with its newline), or the whole
    /// archive; `None` when it does not exist or has fewer lines.
    async fn read_context(
        &self,
        loc: &Loc,
        lines: Option<(u64, u64)>,
    ) -> Result<Option<Vec<u8>>, StoreError>;
}

/// What a validated reference points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `data/<name>`.
    Data(String),
    /// `sessions/<s>/<name>` other than the context archive.
    Item(String),
    /// The context archive, whole or a line range.
    Context(Option<(u64, u64)>),
}

/// A name that may appear as a path segment in a reference.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 255
        && name.chars().all(|c| {
            !c.is_control() && !matches!(c, '/' | '\\' | ':' | '*' | '?' | '"' | '<' | '>' | '|')
        })
}

/// Validates a reference against a scope.
pub(crate) fn resolve(loc: &Loc, reference: &ArchiveRef) -> Result<Target, StoreError> {
    let text = reference.as_str();
    let invalid =
        || StoreError::InvalidInput(format!("invalid archive reference {:?}", truncate(text)));
    if text.is_empty()
        || text.len() > 1024
        || text.starts_with('/')
        || text.contains('\\')
        || text.contains('\0')
    {
        return Err(invalid());
    }
    let (path, fragment) = match text.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (text, None),
    };
    let segments: Vec<&str> = path.split('/').collect();
    if segments
        .iter()
        .any(|s| s.is_empty() || *s == "." || *s == "..")
    {
        return Err(invalid());
    }
    let range = match fragment {
        None => None,
        Some(fragment) => Some(parse_line_range(fragment).ok_or_else(invalid)?),
    };
    match segments.as_slice() {
        ["data", name] if valid_name(name) && range.is_none() => {
            Ok(Target::Data((*name).to_string()))
        }
        ["sessions", session, name] if valid_name(session) && valid_name(name) => {
            if *session != loc.session {
                // Another session's content does not exist from this scope.
                return Err(StoreError::NotFound(format!(
                    "archive reference {}",
                    truncate(text)
                )));
            }
            if *name == CONTEXT_FILE {
                Ok(Target::Context(range))
            } else if range.is_some() {
                Err(invalid())
            } else {
                Ok(Target::Item((*name).to_string()))
            }
        }
        ["sessions", session, dir, name]
            if SESSION_SUBDIRS.contains(dir) && valid_name(session) && valid_name(name) =>
        {
            if *session != loc.session {
                return Err(StoreError::NotFound(format!(
                    "archive reference {}",
                    truncate(text)
                )));
            }
            if range.is_some() {
                return Err(invalid());
            }
            Ok(Target::Item(format!("{dir}/{name}")))
        }
        _ => Err(invalid()),
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(80).collect()
}

/// `L<a>-L<b>` with 1 ≤ a ≤ b.
fn parse_line_range(fragment: &str) -> Option<(u64, u64)> {
    let (a, b) = fragment.split_once('-')?;
    let a: u64 = a.strip_prefix('L')?.parse().ok()?;
    let b: u64 = b.strip_prefix('L')?.parse().ok()?;
    (a >= 1 && a <= b).then_some((a, b))
}

/// The file extension for a media type.
pub(crate) fn extension_for(media_type: &str) -> &'static str {
    let base = media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match base.as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "audio/wav" | "audio/x-wav" | "audio/wave" => "wav",
        "audio/mpeg" | "audio/mp3" => "mp3",
        "audio/ogg" => "ogg",
        "audio/flac" => "flac",
        "application/pdf" => "pdf",
        "application/json" => "json",
        "text/plain" => "txt",
        "text/markdown" => "md",
        _ => "bin",
    }
}

/// A page of `bytes` from `offset`: at most `limit` bytes, never ending inside a UTF-8
/// character (a character longer than `limit` is returned whole so paging always advances).
pub(crate) fn page_of(bytes: &[u8], offset: u64, limit: u64) -> Result<Page, StoreError> {
    let total = bytes.len() as u64;
    if offset > total {
        return Err(StoreError::InvalidInput(format!(
            "offset {offset} is past the end ({total} bytes)"
        )));
    }
    let mut start = offset as usize;
    // An offset inside a character moves forward to the next character.
    while start < bytes.len() && is_continuation(bytes[start]) {
        start += 1;
    }
    let limit = limit.max(1) as usize;
    let mut end = start.saturating_add(limit).min(bytes.len());
    let chunk = &bytes[start..end];
    let content = match std::str::from_utf8(chunk) {
        Ok(text) => text.to_string(),
        Err(err) if err.error_len().is_none() => {
            // The page ends inside a character: end before it, or after it if it is the first.
            let valid = err.valid_up_to();
            if valid > 0 {
                end = start + valid;
            } else {
                end = start + 1;
                while end < bytes.len() && is_continuation(bytes[end]) {
                    end += 1;
                }
            }
            String::from_utf8_lossy(&bytes[start..end]).into_owned()
        }
        // Not text at all (binary data): show it lossily; read_all gives the bytes.
        Err(_) => String::from_utf8_lossy(chunk).into_owned(),
    };
    Ok(Page {
        content,
        offset: start as u64,
        total_bytes: total,
        next_offset: (end < bytes.len()).then_some(end as u64),
    })
}

fn is_continuation(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

/// An [`Offloader`] over any [`Blobs`] backend.
#[derive(Debug)]
pub(crate) struct BlobArchive<B: Blobs> {
    pub(crate) blobs: B,
    /// Next clash suffix to try per (scope, tool-call id): repeated ids cost one probe, not n.
    next_suffix: Mutex<HashMap<(Loc, String), u32>>,
}

impl<B: Blobs> BlobArchive<B> {
    pub(crate) fn new(blobs: B) -> BlobArchive<B> {
        BlobArchive {
            blobs,
            next_suffix: Mutex::new(HashMap::new()),
        }
    }

    async fn fetch(
        &self,
        loc: &Loc,
        target: &Target,
        reference: &ArchiveRef,
    ) -> Result<Vec<u8>, StoreError> {
        let found = match target {
            Target::Data(name) => {
                self.blobs
                    .get(&loc.tenant_dir, &format!("data/{name}"))
                    .await?
            }
            Target::Item(name) => {
                self.blobs
                    .get(&loc.tenant_dir, &format!("{}/{name}", loc.session_dir()))
                    .await?
            }
            Target::Context(range) => self.blobs.read_context(loc, *range).await?,
        };
        found.ok_or_else(|| {
            StoreError::NotFound(format!(
                "archive reference {}",
                truncate(reference.as_str())
            ))
        })
    }

    async fn items(&self, loc: &Loc) -> Result<Vec<ArchiveEntry>, StoreError> {
        let dir = loc.session_dir();
        let mut entries: Vec<ArchiveEntry> = self
            .blobs
            .list(&loc.tenant_dir, &dir)
            .await?
            .into_iter()
            .filter(|(name, _)| valid_name(name))
            .map(|(name, bytes)| ArchiveEntry {
                reference: ArchiveRef(format!("{dir}/{name}")),
                bytes,
            })
            .collect();
        for sub in SESSION_SUBDIRS {
            let sub = format!("{dir}/{sub}");
            entries.extend(
                self.blobs
                    .list(&loc.tenant_dir, &sub)
                    .await?
                    .into_iter()
                    .filter(|(name, _)| valid_name(name) && name != CONTEXT_FILE)
                    .map(|(name, bytes)| ArchiveEntry {
                        reference: ArchiveRef(format!("{sub}/{name}")),
                        bytes,
                    }),
            );
        }
        entries.sort_by(|a, b| a.reference.cmp(&b.reference));
        Ok(entries)
    }

    /// The messages with every inline data part (base64, or a `data:` URL) stored as
    /// `data/<sha256>.<ext>` and named by reference; messages without one are copied as-is.
    async fn externalize_data(
        &self,
        scope: &ArchiveScope,
        messages: &[Message],
    ) -> Result<Vec<Message>, StoreError> {
        let mut out = messages.to_vec();
        for message in &mut out {
            let mut parts: Vec<&mut Part> = Vec::new();
            for part in &mut message.parts {
                match part {
                    Part::ToolResult { content, .. } => parts.extend(content.iter_mut()),
                    other => parts.push(other),
                }
            }
            for part in parts {
                let Part::Data { source, .. } = part else {
                    continue;
                };
                let Some((media_type, bytes)) = inline_bytes(source) else {
                    continue;
                };
                let reference = self.put_data(scope, &bytes, &media_type).await?;
                let sha256 = reference
                    .as_str()
                    .trim_start_matches("data/")
                    .split('.')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                *source = DataSource::Archived { sha256, media_type };
            }
        }
        Ok(out)
    }

    /// Creates `<base>.txt` in the session's directory (or its sub-directory `sub`), or
    /// `<base>(1).txt`, `<base>(2).txt`, … when a repeated tool-call id already has one: ids
    /// repeat within real sessions, and no output is ever overwritten.
    async fn create_numbered(
        &self,
        loc: Loc,
        sub: Option<&str>,
        base: String,
        call_id: &str,
        content: &str,
    ) -> Result<ArchiveRef, StoreError> {
        let dir = match sub {
            Some(sub) => format!("{}/{sub}", loc.session_dir()),
            None => loc.session_dir(),
        };
        let key = (loc.clone(), format!("{dir}/{base}"));
        let start = self.suffix_hint(&key);
        for suffix in start..start.saturating_add(100_000) {
            let name = if suffix == 0 {
                format!("{base}.txt")
            } else {
                format!("{base}({suffix}).txt")
            };
            let path = format!("{dir}/{name}");
            if self
                .blobs
                .create(&loc.tenant_dir, &path, content.as_bytes().to_vec())
                .await?
            {
                self.remember_suffix(key, suffix + 1);
                return Ok(ArchiveRef(path));
            }
        }
        Err(StoreError::InvalidInput(format!(
            "too many results for tool call id {call_id:?}"
        )))
    }

    fn suffix_hint(&self, key: &(Loc, String)) -> u32 {
        self.next_suffix
            .lock()
            .map(|m| m.get(key).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    fn remember_suffix(&self, key: (Loc, String), next: u32) {
        if let Ok(mut map) = self.next_suffix.lock() {
            // Bounded: a long-running process must not grow without limit.
            if map.len() > 100_000 {
                map.clear();
            }
            map.insert(key, next);
        }
    }
}

#[async_trait]
impl<B: Blobs> Offloader for BlobArchive<B> {
    async fn offload_context(
        &self,
        scope: &ArchiveScope,
        messages: &[Message],
    ) -> Result<ArchiveRef, StoreError> {
        let loc = Loc::of(scope)?;
        if messages.is_empty() {
            return Err(StoreError::InvalidInput("offload of no messages".into()));
        }
        let messages = &self.externalize_data(scope, messages).await?;
        let mut lines = Vec::new();
        for message in messages {
            serde_json::to_writer(&mut lines, message).map_err(|err| {
                StoreError::InvalidInput(format!("message does not serialize: {err}"))
            })?;
            lines.push(b'\n');
        }
        let (first, last) = self
            .blobs
            .append_context(&loc, lines, messages.len() as u64)
            .await?;
        Ok(ArchiveRef(format!(
            "{}/{CONTEXT_FILE}#L{first}-L{last}",
            loc.session_dir()
        )))
    }

    async fn offload_tool_result(
        &self,
        scope: &ArchiveScope,
        call_id: &str,
        content: &str,
    ) -> Result<ArchiveRef, StoreError> {
        let loc = Loc::of(scope)?;
        let base = format!("tool_result-{}", sanitize_segment(call_id));
        self.create_numbered(loc, None, base, call_id, content)
            .await
    }

    async fn offload_tool_result_file(
        &self,
        scope: &ArchiveScope,
        call_id: &str,
        content: &str,
    ) -> Result<ArchiveRef, StoreError> {
        let loc = Loc::of(scope)?;
        // The id is hostile input: one sanitized segment, never a path of its own.
        let base = sanitize_segment(call_id);
        self.create_numbered(loc, Some(TOOL_RESULTS_DIR), base, call_id, content)
            .await
    }

    async fn put_data(
        &self,
        scope: &ArchiveScope,
        bytes: &[u8],
        media_type: &str,
    ) -> Result<ArchiveRef, StoreError> {
        use sha2::Digest;
        let loc = Loc::of(scope)?;
        let hash = hex::encode(sha2::Sha256::digest(bytes));
        let path = format!("data/{hash}.{}", extension_for(media_type));
        // Content-addressed: an existing item with this name already holds these bytes.
        self.blobs
            .create(&loc.tenant_dir, &path, bytes.to_vec())
            .await?;
        Ok(ArchiveRef(path))
    }

    async fn offload_messages_file(
        &self,
        scope: &ArchiveScope,
        name: &str,
        messages: &[Message],
    ) -> Result<ArchiveRef, StoreError> {
        let loc = Loc::of(scope)?;
        let dir = loc.session_dir();
        let path = format!("{dir}/{name}");
        // The same grammar every reader applies: a name that could not be read back is
        // refused before anything is written.
        match resolve(&loc, &ArchiveRef(path.clone()))? {
            Target::Item(_) => {}
            _ => {
                return Err(StoreError::InvalidInput(format!(
                    "{name:?} is not a file name of the session archive"
                )));
            }
        }
        let messages = self.externalize_data(scope, messages).await?;
        let bytes = if name.ends_with(".jsonl") {
            let mut lines = Vec::new();
            for message in &messages {
                serde_json::to_writer(&mut lines, message).map_err(|err| {
                    StoreError::InvalidInput(format!("message does not serialize: {err}"))
                })?;
                lines.push(b'\n');
            }
            lines
        } else {
            serde_json::to_vec_pretty(&messages).map_err(|err| {
                StoreError::InvalidInput(format!("messages do not serialize: {err}"))
            })?
        };
        if self.blobs.create(&loc.tenant_dir, &path, bytes).await? {
            Ok(ArchiveRef(path))
        } else {
            // Names carry a fresh id: an existing file is someone else's, never overwritten.
            Err(StoreError::Conflict {
                expected: None,
                actual: None,
            })
        }
    }

    async fn read(
        &self,
        scope: &ArchiveScope,
        reference: &ArchiveRef,
        offset: u64,
        limit: u64,
    ) -> Result<Page, StoreError> {
        let loc = Loc::of(scope)?;
        let target = resolve(&loc, reference)?;
        let bytes = self.fetch(&loc, &target, reference).await?;
        page_of(&bytes, offset, limit)
    }

    async fn read_all(
        &self,
        scope: &ArchiveScope,
        reference: &ArchiveRef,
    ) -> Result<Vec<u8>, StoreError> {
        let loc = Loc::of(scope)?;
        let target = resolve(&loc, reference)?;
        self.fetch(&loc, &target, reference).await
    }

    async fn grep(
        &self,
        scope: &ArchiveScope,
        pattern: &regex::Regex,
        limit: usize,
    ) -> Result<Vec<GrepHit>, StoreError> {
        let loc = Loc::of(scope)?;
        let mut hits = Vec::new();
        for entry in self.items(&loc).await? {
            if hits.len() >= limit {
                break;
            }
            let target = resolve(&loc, &entry.reference)?;
            let Ok(bytes) = self.fetch(&loc, &target, &entry.reference).await else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            for (index, line) in text.lines().enumerate() {
                if pattern.is_match(line) {
                    hits.push(GrepHit {
                        reference: entry.reference.clone(),
                        line: index as u64 + 1,
                        text: line.to_string(),
                    });
                    if hits.len() >= limit {
                        break;
                    }
                }
            }
        }
        Ok(hits)
    }

    async fn glob(
        &self,
        scope: &ArchiveScope,
        pattern: &str,
    ) -> Result<Vec<ArchiveEntry>, StoreError> {
        let loc = Loc::of(scope)?;
        let glob = globset::Glob::new(pattern)
            .map_err(|err| StoreError::InvalidInput(format!("glob {pattern:?}: {err}")))?
            .compile_matcher();
        Ok(self
            .items(&loc)
            .await?
            .into_iter()
            .filter(|entry| {
                let name = entry
                    .reference
                    .as_str()
                    .rsplit('/')
                    .next()
                    .unwrap_or_default();
                glob.is_match(name) || glob.is_match(entry.reference.as_str())
            })
            .collect())
    }

    async fn list(&self, scope: &ArchiveScope) -> Result<Vec<ArchiveEntry>, StoreError> {
        let loc = Loc::of(scope)?;
        self.items(&loc).await
    }
}

/// The media type and bytes of an inline data source (base64, or a base64 `data:` URL).
/// Remote URLs and already archived data have no bytes here; undecodable base64 is left
/// inline rather than lost.
pub(crate) fn inline_bytes(source: &DataSource) -> Option<(String, Vec<u8>)> {
    use base64::Engine as _;
    let (media_type, data) = match source {
        DataSource::Base64 { media_type, data } => (media_type.clone(), data.as_str()),
        DataSource::Url { url } => {
            let rest = url.strip_prefix("data:")?;
            let (meta, data) = rest.split_once(',')?;
            let media_type = meta.strip_suffix(";base64")?;
            (media_type.to_string(), data)
        }
        DataSource::Archived { .. } => return None,
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .ok()?;
    Some((media_type, bytes))
}

/// Counts lines (newlines) in a byte slice.
pub(crate) fn count_lines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// Lines `first..=last` (1-based) of `bytes`, each with its newline; `None` if too short.
pub(crate) fn slice_lines(bytes: &[u8], first: u64, last: u64) -> Option<Vec<u8>> {
    let mut line = 1u64;
    let mut start = None;
    if first == 1 {
        start = Some(0);
    }
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' {
            if line == last {
                return start.map(|s| bytes[s..=i].to_vec());
            }
            line += 1;
            if line == first {
                start = Some(i + 1);
            }
        }
    }
    None
}

/// Implements [`Offloader`] for a wrapper type by delegating to its `inner: BlobArchive<_>`.
macro_rules! delegate_offloader {
    ($ty:ty) => {
        #[async_trait::async_trait]
        impl $crate::archive::Offloader for $ty {
            async fn offload_context(
                &self,
                scope: &$crate::archive::ArchiveScope,
                messages: &[ctxkeeper_core::model::Message],
            ) -> Result<$crate::archive::ArchiveRef, $crate::StoreError> {
                $crate::archive::Offloader::offload_context(&self.inner, scope, messages).await
            }

            async fn offload_tool_result(
                &self,
                scope: &$crate::archive::ArchiveScope,
                call_id: &str,
                content: &str,
            ) -> Result<$crate::archive::ArchiveRef, $crate::StoreError> {
                $crate::archive::Offloader::offload_tool_result(
                    &self.inner,
                    scope,
                    call_id,
                    content,
                )
                .await
            }

            async fn offload_tool_result_file(
                &self,
                scope: &$crate::archive::ArchiveScope,
                call_id: &str,
                content: &str,
            ) -> Result<$crate::archive::ArchiveRef, $crate::StoreError> {
                $crate::archive::Offloader::offload_tool_result_file(
                    &self.inner,
                    scope,
                    call_id,
                    content,
                )
                .await
            }

            async fn put_data(
                &self,
                scope: &$crate::archive::ArchiveScope,
                bytes: &[u8],
                media_type: &str,
            ) -> Result<$crate::archive::ArchiveRef, $crate::StoreError> {
                $crate::archive::Offloader::put_data(&self.inner, scope, bytes, media_type).await
            }

            async fn offload_messages_file(
                &self,
                scope: &$crate::archive::ArchiveScope,
                name: &str,
                messages: &[ctxkeeper_core::model::Message],
            ) -> Result<$crate::archive::ArchiveRef, $crate::StoreError> {
                $crate::archive::Offloader::offload_messages_file(
                    &self.inner,
                    scope,
                    name,
                    messages,
                )
                .await
            }

            async fn read(
                &self,
                scope: &$crate::archive::ArchiveScope,
                reference: &$crate::archive::ArchiveRef,
                offset: u64,
                limit: u64,
            ) -> Result<$crate::archive::Page, $crate::StoreError> {
                $crate::archive::Offloader::read(&self.inner, scope, reference, offset, limit).await
            }

            async fn read_all(
                &self,
                scope: &$crate::archive::ArchiveScope,
                reference: &$crate::archive::ArchiveRef,
            ) -> Result<Vec<u8>, $crate::StoreError> {
                $crate::archive::Offloader::read_all(&self.inner, scope, reference).await
            }

            async fn grep(
                &self,
                scope: &$crate::archive::ArchiveScope,
                pattern: &regex::Regex,
                limit: usize,
            ) -> Result<Vec<$crate::archive::GrepHit>, $crate::StoreError> {
                $crate::archive::Offloader::grep(&self.inner, scope, pattern, limit).await
            }

            async fn glob(
                &self,
                scope: &$crate::archive::ArchiveScope,
                pattern: &str,
            ) -> Result<Vec<$crate::archive::ArchiveEntry>, $crate::StoreError> {
                $crate::archive::Offloader::glob(&self.inner, scope, pattern).await
            }

            async fn list(
                &self,
                scope: &$crate::archive::ArchiveScope,
            ) -> Result<Vec<$crate::archive::ArchiveEntry>, $crate::StoreError> {
                $crate::archive::Offloader::list(&self.inner, scope).await
            }
        }
    };
}
pub(crate) use delegate_offloader;

#[cfg(test)]
mod tests {
    use super::*;

    fn loc() -> Loc {
        Loc {
            tenant_dir: String::new(),
            session: "s1".into(),
        }
    }

    #[test]
    fn references_resolve_or_are_refused() {
        let ok = |r: &str| resolve(&loc(), &ArchiveRef(r.into()));
        assert_eq!(ok("data/ab.png").ok(), Some(Target::Data("ab.png".into())));
        assert_eq!(
            ok("sessions/s1/tool_result-x.txt").ok(),
            Some(Target::Item("tool_result-x.txt".into()))
        );
        assert_eq!(
            ok("sessions/s1/tool-results/call_7.txt").ok(),
            Some(Target::Item("tool-results/call_7.txt".into()))
        );
        assert_eq!(
            ok("sessions/s1/context.jsonl#L2-L5").ok(),
            Some(Target::Context(Some((2, 5))))
        );
        for hostile in [
            "../x",
            "/etc/passwd",
            "sessions/s1/../../x",
            "sessions\\s1\\x",
            "sessions/s1/.lock",
            "sessions/s1/x#L1-L2",
            "sessions/s1/context.jsonl#L5-L2",
            "sessions/s1/context.jsonl#L0-L1",
            "sessions//x",
            "data/../sessions/s1/x",
            "sessions/s1/tool-results/../x",
            "sessions/s1/tool-results/.x",
            "sessions/s1/other-dir/x.txt",
            "C:\\x",
            "",
            "data/a/b",
        ] {
            assert!(
                matches!(ok(hostile), Err(StoreError::InvalidInput(_))),
                "{hostile}"
            );
        }
        assert!(matches!(
            ok("sessions/s2/tool_result-x.txt"),
            Err(StoreError::NotFound(_))
        ));
    }

    #[test]
    fn pages_never_split_characters() -> Result<(), StoreError> {
        let text = "aé€😀b".repeat(50);
        for limit in [1, 2, 3, 5, 7] {
            let mut offset = 0;
            let mut out = String::new();
            loop {
                let page = page_of(text.as_bytes(), offset, limit)?;
                out.push_str(&page.content);
                match page.next_offset {
                    Some(next) => offset = next,
                    None => break,
                }
            }
            assert_eq!(out, text, "limit {limit}");
        }
        Ok(())
    }

    #[test]
    fn line_slices() {
        let bytes = b"a\nb\nc\n";
        assert_eq!(slice_lines(bytes, 1, 1), Some(b"a\n".to_vec()));
        assert_eq!(slice_lines(bytes, 2, 3), Some(b"b\nc\n".to_vec()));
        assert_eq!(slice_lines(bytes, 3, 4), None);
        assert_eq!(count_lines(bytes), 3);
    }
}
