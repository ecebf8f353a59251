//! Replaying a recorded session under a real context policy.
//!
//! [`PolicyReplay`] is a [`StepPolicy`] backed by a [`ContextManager`]: the engine runs as an
//! agent host runs it (ingest every message, prepare the context before every model call,
//! recover from overflow errors) and archives through a real [`Offloader`]. When a session
//! ends, everything the engine was given is verified to be either still in the context or
//! recoverable byte-for-byte from the archive; what is not is counted in
//! [`PolicyReplay::unrecoverable_items`].
//!
//! ```
//! use std::sync::Arc;
//! use ctxkeeper::replay::PolicyReplay;
//! use ctxkeeper_core::engine::presets;
//! use ctxkeeper_core::import::Session;
//! use ctxkeeper_core::model::{CheckRules, Message};
//! use ctxkeeper_core::replay::{replay, ReplayOptions};
//! use ctxkeeper_core::tokens::{Profiles, TokenModel};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let archive = Arc::new(ctxkeeper::store::LocalWorkspace::new(dir.path()).unwrap());
//! let summarizer = Arc::new(ctxkeeper::llm::ExtractiveSummarizer::default());
//! let mut policy = PolicyReplay::new(presets::preset("default").unwrap(), 8_000, archive, summarizer).unwrap();
//! let session = Session { id: "s".into(), messages: vec![Message::user("hi"), Message::assistant("hello")], ..Session::default() };
//! let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
//! let options = ReplayOptions { window: 8_000, rules: CheckRules::openai() };
//! let report = replay(&[session], &model, &options, &mut policy, &mut |_| Ok::<(), String>(())).unwrap();
//! policy.finish().unwrap();
//! assert_eq!((report.steps, policy.unrecoverable_items), (1, 0));
//! ```

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::{ContextManager, Settings};
use ctxkeeper_core::engine::{ContextState, Event, PolicyConfig};
use ctxkeeper_core::import::Session;
use ctxkeeper_core::model::{Message, Part};
use ctxkeeper_core::replay::{StepPolicy, StepRequest};
use ctxkeeper_core::tokens::{TokenCache, TokenModel};
use ctxkeeper_llm::Summarizer;
use ctxkeeper_store::archive::{ArchiveRef, ArchiveScope, Offloader};
use ctxkeeper_store::memory::{LongTermMemory, MemoryScope};
use ctxkeeper_store::state::SessionKey;
use tokio::runtime::Runtime;
use tokio::sync::broadcast;

/// A [`StepPolicy`] backed by a [`ContextManager`].
pub struct PolicyReplay {
    name: String,
    policy: PolicyConfig,
    window: u64,
    runtime: Runtime,
    offloader: Arc<dyn Offloader>,
    summarizer: Arc<dyn Summarizer>,
    session: Option<ActiveSession>,
    /// Archive scopes for the sessions in replay order (see [`PolicyReplay::archive_under`]).
    scopes: Vec<ArchiveScope>,
    /// Sessions started so far.
    started: usize,
    compactions: usize,
    /// Bytes the sessions already closed wrote to the archive (the open session's own count
    /// is its manager's): a multi-session replay reports the sum over all its sessions.
    closed_archived_bytes: u64,
    /// References that did not resolve plus removed content not found in the archive.
    pub unrecoverable_items: usize,
    /// Summaries that fell back to lossy truncation.
    pub degraded_summaries: usize,
    /// Summary lines dropped because they quoted the user with words no user message holds,
    /// and lines marked unverified because they name a path or identifier the summarized
    /// messages never mention.
    pub summary_lines_dropped: usize,
    pub summary_lines_unverified: usize,
    report_cache: TokenCache,
    /// Long-term memory the sessions flush to (see [`PolicyReplay::with_memory`]).
    memory: Option<Arc<LongTermMemory>>,
    /// The context each closed session ended with, in replay order, when the host asked for
    /// them (see [`PolicyReplay::keep_final_states`]).
    final_states: Option<Vec<ContextState>>,
}

struct ActiveSession {
    manager: ContextManager,
    events: broadcast::Receiver<Event>,
    scope: ArchiveScope,
    originals: Vec<Message>,
    refs: Vec<String>,
    seen: usize,
    fixed_tokens: u64,
    /// References shown to the model, and whether each reads back from the archive.
    resolved: HashMap<String, bool>,
}

impl std::fmt::Debug for PolicyReplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyReplay")
            .field("name", &self.name)
            .finish()
    }
}

impl PolicyReplay {
    /// A replay policy over `policy` for a `window`-token model.
    pub fn new(
        policy: PolicyConfig,
        window: u64,
        offloader: Arc<dyn Offloader>,
        summarizer: Arc<dyn Summarizer>,
    ) -> std::io::Result<PolicyReplay> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(PolicyReplay {
            name: policy.name.clone(),
            policy,
            window,
            runtime,
            offloader,
            summarizer,
            session: None,
            scopes: Vec::new(),
            started: 0,
            compactions: 0,
            closed_archived_bytes: 0,
            unrecoverable_items: 0,
            degraded_summaries: 0,
            summary_lines_dropped: 0,
            summary_lines_unverified: 0,
            report_cache: TokenCache::with_capacity(1 << 14),
            memory: None,
            final_states: None,
        })
    }

    /// Gives every replayed session long-term memory (its archive scope's tenant, the default
    /// user): facts are flushed there before each compaction that summarizes, and a policy
    /// whose summaries go to memory (`placement = "memory"`, CowAgent) writes them to the
    /// daily file, as [`ContextManager::with_memory`] does.
    pub fn with_memory(mut self, memory: Arc<LongTermMemory>) -> PolicyReplay {
        self.memory = Some(memory);
        self
    }

    /// Archives the replay's sessions, in order, under these scopes instead of
    /// `ArchiveScope::session(<trace session id>)`: a replay that is stored under another
    /// tenant and session id archives where that stored session's readers look. Sessions past
    /// the end of the list keep the default scope.
    pub fn archive_under(mut self, scopes: Vec<ArchiveScope>) -> PolicyReplay {
        self.scopes = scopes;
        self
    }

    /// Keeps the managed context every session ends with (entries with their bookkeeping, the
    /// running summary, counters), for a host that stores the replayed sessions as a serving
    /// host would; read them with [`PolicyReplay::take_final_states`] after
    /// [`PolicyReplay::finish`].
    pub fn keep_final_states(mut self) -> PolicyReplay {
        self.final_states = Some(Vec::new());
        self
    }

    /// The contexts kept by [`PolicyReplay::keep_final_states`], one per session in replay
    /// order (empty when they were not kept).
    pub fn take_final_states(&mut self) -> Vec<ContextState> {
        self.final_states
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Verifies the last session and stops. Call once after the replay.
    pub fn finish(&mut self) -> Result<(), String> {
        self.close_session()
    }

    fn drain_events(&mut self) {
        let Some(active) = &mut self.session else {
            return;
        };
        while let Ok(event) = active.events.try_recv() {
            match event {
                // A compaction at a request boundary, or (under a policy that tells them
                // apart) inside a request.
                Event::ContextCompactionEnd {
                    archive_refs,
                    summary_degraded,
                    ..
                }
                | Event::Compaction {
                    archive_refs,
                    summary_degraded,
                    ..
                } => {
                    self.compactions += 1;
                    if summary_degraded {
                        self.degraded_summaries += 1;
                    }
                    active.refs.extend(archive_refs);
                }
                Event::ToolResultTruncated { reference, .. } => active.refs.push(reference),
                // Images over the limit: their bytes must read back from the data file.
                Event::ContentOffloaded {
                    reference, kind, ..
                } if kind == "data" && reference.starts_with("data/") => {
                    active.refs.push(reference)
                }
                Event::SummaryChecked {
                    dropped,
                    unverified,
                    ..
                } => {
                    if std::env::var_os("CTXKEEPER_DEBUG_SUMMARY_CHECK").is_some() {
                        for line in dropped.iter().chain(&unverified) {
                            eprintln!("summary check: {line}");
                        }
                    }
                    self.summary_lines_dropped += dropped.len();
                    self.summary_lines_unverified += unverified.len();
                }
                _ => {}
            }
        }
    }

    fn request(
        &mut self,
        compacted: bool,
        engine_before: std::time::Duration,
    ) -> Result<StepRequest<'static>, String> {
        self.drain_events();
        let Some(active) = &mut self.session else {
            return Err("no session".into());
        };
        let messages = active.manager.state().to_messages();
        // Counted here for the report, with the harness's own cache: the engine's state is
        // left as the engine left it, so its timing includes only the counting it needs.
        let model = active.manager.engine().model().clone();
        let message_tokens: Vec<u32> = messages
            .iter()
            .map(|m| self.report_cache.message_tokens(m, &model))
            .collect();
        Ok(StepRequest {
            messages: Cow::Owned(messages),
            message_tokens,
            fixed_tokens: active.fixed_tokens,
            engine_time: active.manager.clock().engine.saturating_sub(engine_before),
            compacted,
        })
    }

    /// Checks that everything the session ever saw is either still in its context or
    /// recoverable byte-for-byte from the archive.
    fn close_session(&mut self) -> Result<(), String> {
        self.drain_events();
        let Some(active) = self.session.take() else {
            return Ok(());
        };
        self.closed_archived_bytes += active.manager.archived_bytes();
        if let Some(states) = &mut self.final_states {
            states.push(active.manager.state().clone());
        }
        let runtime = &self.runtime;
        let offloader = &self.offloader;
        let mut archived_messages: HashSet<String> = HashSet::new();
        let mut archived_texts: HashSet<String> = HashSet::new();
        for reference in &active.refs {
            let bytes =
                runtime.block_on(offloader.read_all(&active.scope, &ArchiveRef(reference.clone())));
            let Ok(bytes) = bytes else {
                self.unrecoverable_items += 1;
                continue;
            };
            let text = String::from_utf8_lossy(&bytes).into_owned();
            // A seed's group file (ReMe `<chat_id>_<g>.json`) holds a JSON array of messages.
            if reference.ends_with(".json")
                && let Ok(messages) = serde_json::from_str::<Vec<Message>>(&text)
            {
                for message in &messages {
                    collect_result_texts(message, &mut archived_texts);
                    if let Some(json) = canonical_json(message) {
                        archived_messages.insert(json);
                    }
                }
            } else if reference.contains(".jsonl") {
                for line in text.lines() {
                    if let Ok(message) = serde_json::from_str::<Message>(line) {
                        collect_result_texts(&message, &mut archived_texts);
                        if let Some(json) = canonical_json(&message) {
                            archived_messages.insert(json);
                        }
                    }
                }
            } else {
                archived_texts.insert(text);
            }
        }
        let in_context: HashSet<String> = active
            .manager
            .state()
            .messages()
            .filter_map(canonical_json)
            .collect();
        // Only what the engine was given can be asked back (the final reply never was).
        for original in &active.originals[..active.seen.min(active.originals.len())] {
            let Some(json) = canonical_json(original) else {
                continue;
            };
            if in_context.contains(&json) || archived_messages.contains(&json) {
                continue;
            }
            // A tool result whose whole output was archived on its own is recoverable.
            let mut texts = HashSet::new();
            collect_result_texts(original, &mut texts);
            let only_results = original.is_only_tool_results();
            if only_results && !texts.is_empty() && texts.iter().all(|t| archived_texts.contains(t))
            {
                continue;
            }
            if std::env::var_os("CTXKEEPER_DEBUG_UNRECOVERABLE").is_some() {
                eprintln!(
                    "unrecoverable: {}",
                    json.chars().take(300).collect::<String>()
                );
            }
            self.unrecoverable_items += 1;
        }
        Ok(())
    }
}

/// A message as JSON with every data part named by its content hash: an image stored inline,
/// stored as `data/<sha256>.<ext>` (in an archived message), or replaced in the context by
/// the line naming that file reads the same, so a message whose image went to the data
/// files still counts as recoverable. Messages without data parts are their plain JSON.
fn canonical_json(message: &Message) -> Option<String> {
    use ctxkeeper_core::engine::image_placeholder;
    use ctxkeeper_core::model::DataSource;
    let placeholder_head = image_placeholder("");
    let placeholder_head = placeholder_head.trim_end_matches(']');
    let is_placeholder = |part: &Part| {
        part.as_text()
            .is_some_and(|t| t.starts_with(placeholder_head))
    };
    let touched = |part: &Part| matches!(part, Part::Data { .. }) || is_placeholder(part);
    let any = message.parts.iter().any(|part| match part {
        Part::ToolResult { content, .. } => content.iter().any(touched),
        other => touched(other),
    });
    if !any {
        return serde_json::to_string(message).ok();
    }
    let canonical = |part: &mut Part| {
        let key = match &*part {
            Part::Data { source, .. } => match source {
                DataSource::Archived { sha256, .. } => sha256.clone(),
                DataSource::Url { url } if !url.starts_with("data:") => url.clone(),
                other => match ctxkeeper_store::archive::inline_data(other) {
                    Some((_, bytes)) => {
                        use sha2::Digest;
                        hex::encode(sha2::Sha256::digest(&bytes))
                    }
                    None => return,
                },
            },
            Part::Text { text, .. } if text.starts_with(placeholder_head) => {
                let reference = text[placeholder_head.len()..].trim_end_matches(']');
                match reference.strip_prefix("data/") {
                    Some(file) => file.split('.').next().unwrap_or_default().to_string(),
                    None => reference.to_string(),
                }
            }
            _ => return,
        };
        *part = Part::text(format!("\u{0}data {key}"));
    };
    let mut message = message.clone();
    for part in &mut message.parts {
        match part {
            Part::ToolResult { content, .. } => content.iter_mut().for_each(canonical),
            other => canonical(other),
        }
    }
    serde_json::to_string(&message).ok()
}

fn collect_result_texts(message: &Message, out: &mut HashSet<String>) {
    for part in &message.parts {
        if let Part::ToolResult { content, .. } = part {
            out.insert(Message::new(ctxkeeper_core::model::Role::Tool, content.clone()).text());
        }
    }
}

impl StepPolicy for PolicyReplay {
    fn name(&self) -> &str {
        &self.name
    }

    fn start_session(&mut self, session: &Session, model: &TokenModel) -> Result<(), String> {
        self.close_session()?;
        let fixed_tokens = u64::from(model.tools_tokens(&session.tools));
        let settings = Settings {
            policy: self.policy.clone(),
            model: model.clone(),
            window: self.window,
            fixed_tokens,
        };
        let scope = self
            .scopes
            .get(self.started)
            .cloned()
            .unwrap_or_else(|| ArchiveScope::session(&session.id));
        self.started += 1;
        let mut manager = ContextManager::with_scope(
            settings,
            scope.clone(),
            self.offloader.clone(),
            self.summarizer.clone(),
        );
        if let Some(memory) = &self.memory {
            let memory_scope = MemoryScope::new(scope.tenant.clone(), SessionKey::DEFAULT)
                .map_err(|e| format!("memory of tenant {:?}: {e}", scope.tenant))?;
            manager = manager.with_memory(memory.clone(), memory_scope);
        }
        let events = manager.subscribe();
        self.session = Some(ActiveSession {
            manager,
            events,
            scope,
            originals: session.messages.clone(),
            refs: Vec::new(),
            seen: 0,
            fixed_tokens,
            resolved: HashMap::new(),
        });
        Ok(())
    }

    fn prepare<'h>(&mut self, history: &'h [Message]) -> Result<StepRequest<'h>, String> {
        let Some(active) = &mut self.session else {
            return Err("no session".into());
        };
        let before = active.manager.clock().engine;
        let runtime = &self.runtime;
        for message in &history[active.seen.min(history.len())..] {
            runtime
                .block_on(active.manager.ingest(message.clone()))
                .map_err(|e| e.to_string())?;
        }
        active.seen = history.len();
        let prepared = runtime
            .block_on(active.manager.prepare())
            .map_err(|e| e.to_string())?;
        self.request(prepared.compacted, before)
    }

    fn recover_overflow(
        &mut self,
        attempt: u32,
        tokens: u64,
        window: u64,
    ) -> Result<Option<StepRequest<'static>>, String> {
        let Some(active) = &mut self.session else {
            return Ok(None);
        };
        let before = active.manager.clock().engine;
        match self.runtime.block_on(
            active
                .manager
                .handle_overflow(attempt, tokens, Some(window)),
        ) {
            Ok(_) => self.request(true, before).map(Some),
            Err(crate::Error::Unrecoverable { .. } | crate::Error::NoRoom { .. }) => Ok(None),
            Err(err) => Err(err.to_string()),
        }
    }

    fn observe_usage(&mut self, input_tokens: u64) {
        if let Some(active) = &mut self.session {
            active.manager.observe_usage(input_tokens);
        }
    }

    fn compactions(&self) -> usize {
        self.compactions
    }

    fn archived_bytes(&self) -> u64 {
        let open = self
            .session
            .as_ref()
            .map_or(0, |active| active.manager.archived_bytes());
        self.closed_archived_bytes + open
    }

    fn resolve_reference(&mut self, reference: &str) -> Option<bool> {
        let active = self.session.as_mut()?;
        if let Some(known) = active.resolved.get(reference) {
            return Some(*known);
        }
        // A marker or the "(not archived)" note names nothing: no read needed.
        let plausible = !reference.starts_with('(') && !reference.contains('\u{1}');
        let resolves = plausible
            && self
                .runtime
                .block_on(
                    self.offloader
                        .read_all(&active.scope, &ArchiveRef(reference.to_string())),
                )
                .is_ok();
        if !resolves && std::env::var_os("CTXKEEPER_DEBUG_UNRECOVERABLE").is_some() {
            eprintln!("unresolved reference: {reference:?}");
        }
        active.resolved.insert(reference.to_string(), resolves);
        Some(resolves)
    }
}
