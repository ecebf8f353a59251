//! ctxkeeper: a context engine for LLM agents.
//!
//! A [`ContextManager`] owns one session's context. The agent host calls it around every model
//! call:
//!
//! - [`ContextManager::ingest`] each message as it arrives (tool results over the cap are cut to
//!   a preview, their whole output archived first);
//! - [`ContextManager::prepare`] before each model call: compacts when a trigger fires and
//!   returns the messages to send;
//! - [`ContextManager::observe_usage`] with the input tokens the provider reported (drives the
//!   reactive tiers and calibrates estimates);
//! - [`ContextManager::handle_overflow`] when the provider answers that the context is too long:
//!   compacts harder, within a hard bound, so the retry fits;
//! - [`ContextManager::compact`] on demand, with a one-off policy override;
//! - [`ContextManager::subscribe`] to receive every [`Event`].
//!
//! Content leaves the context only after the [`Offloader`] confirmed it is durably archived;
//! a failed summarizer never fails the turn (its lossy fallback is marked degraded).
//!
//! The summarizer given to [`ContextManager::new`] serves every step that names none. A host
//! whose summaries depend on the request (the gateway writes them on each caller's own
//! upstream, with that caller's credentials) passes the step's summarizer as an argument
//! instead: [`ContextManager::prepare_with`], [`ContextManager::prepare_counted_with`],
//! [`ContextManager::handle_overflow_with`], [`ContextManager::compact_to_with`] and
//! [`ContextManager::summary_to_prepare_with`]. The manager never keeps it: a step that is
//! cancelled half-way (its future dropped) leaves nothing of its caller behind.
//!
//! ```
//! use std::sync::Arc;
//! use ctxkeeper::{ContextManager, Settings};
//! use ctxkeeper::core::engine::presets;
//! use ctxkeeper::core::model::Message;
//! use ctxkeeper::core::tokens::{Profiles, TokenModel};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let settings = Settings {
//!     policy: presets::preset("default").unwrap(),
//!     model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
//!     window: 128_000,
//!     fixed_tokens: 0,
//! };
//! let offloader = Arc::new(ctxkeeper::store::LocalWorkspace::new(dir.path()).unwrap());
//! let summarizer = Arc::new(ctxkeeper::llm::ExtractiveSummarizer::default());
//! let mut context = ContextManager::new(settings, "session-1", offloader, summarizer);
//! context.ingest(Message::user("hello")).await.unwrap();
//! let prepared = context.prepare().await.unwrap();
//! assert_eq!(prepared.messages.len(), 1);
//! # });
//! ```

mod archiving;
use archiving::{describe_source, message_has_data};
mod assembly;
mod overflow;
mod prepared;
pub mod replay;
pub mod snapshot;
pub mod summarizers;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use assembly::{Assembly, ContextProvider, Placement, SystemPromptHook, Transform};
pub use ctxkeeper_core as core;
pub use ctxkeeper_llm as llm;
pub use ctxkeeper_store as store;
pub use prepared::{Preparations, PreparedSummary, SummaryPreparation};

use ctxkeeper_core::engine::{
    ArchiveItem, ArchiveLayout, Budget, CompactionReason, ContextState, Engine, Entry, Event,
    Ingest, Plan, PlanOutcome, PlanRequest, PolicyConfig,
};
use ctxkeeper_core::model::Message;
use ctxkeeper_core::tokens::TokenModel;
use ctxkeeper_llm::Summarizer;
use ctxkeeper_store::StoreError;
use ctxkeeper_store::archive::{ArchiveScope, Offloader};
use ctxkeeper_store::memory::{LongTermMemory, MemoryScope};
use tokio::sync::broadcast;

/// What a session's context manager needs to know.
#[derive(Debug, Clone)]
pub struct Settings {
    pub policy: PolicyConfig,
    pub model: TokenModel,
    /// The model's context window in tokens.
    pub window: u64,
    /// Tokens every request carries outside the context (tool schemas, overhead).
    pub fixed_tokens: u64,
}

/// Errors of the context manager.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Archiving failed; the context is unchanged (nothing left it).
    #[error("archiving failed, context left unchanged: {0}")]
    Archive(#[from] StoreError),
    /// The policy override is invalid.
    #[error("invalid policy: {0}")]
    Config(String),
    /// Overflow recovery gave up after its bounded attempts.
    #[error("context still too long after {attempts} recovery attempts ({tokens} tokens)")]
    Unrecoverable { attempts: u32, tokens: u64 },
    /// What a recovery must keep (instructions, tool schemas, the capsule, the user's latest
    /// request and the newest round) is alone over the limit: sending less would leave the
    /// model nothing to work with, so nothing is sent.
    #[error(
        "the context cannot fit: the instructions, tool schemas, the user's latest request \
         and the newest round alone need about {needed} tokens, over the limit of {limit}"
    )]
    NoRoom { needed: u64, limit: u64 },
}

/// The messages to send for one model call.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub messages: Vec<Message>,
    /// Request tokens (context + fixed); messages not yet counted exactly are estimated.
    pub input_tokens: u64,
    /// Whether a compaction ran while preparing.
    pub compacted: bool,
    /// Share of the window the request uses.
    pub budget_used_pct: f64,
    /// The budget notice added to the last message of this request (policy `budget_notice`),
    /// if the request crossed its threshold. Request-time only: never stored in the context.
    pub budget_notice: Option<String>,
}

/// Timing of the engine's own work, kept apart from archive and summarizer latency.
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineClock {
    /// Time in the pure engine (ingest decisions, trigger checks, planning, applying).
    pub engine: Duration,
}

/// The last request `prepare` returned: how many context messages it held, the compaction
/// count then (a later compaction makes a usage report stale), and the estimated tokens it
/// carried beyond the context (a budget notice).
#[derive(Debug, Clone, Copy)]
struct SentRequest {
    len: usize,
    compactions: u32,
    extra_tokens: u64,
}

/// Events buffered per session for slow subscribers (see [`ContextManager::subscribe`]).
pub const EVENT_BUFFER: usize = 128;

/// Below this many steps between two compactions the window is tight (the fixed prompt and
/// what every compaction keeps nearly fill it): a compaction then summarizes extractively,
/// and no summary is prepared ahead, instead of paying a model call on almost every step
/// ([`Event::SummaryDowngraded`]).
pub const TIGHT_WINDOW_STEPS: u64 = 2;

/// One session's managed context.
#[derive(Debug)]
pub struct ContextManager {
    engine: Engine,
    settings: Settings,
    scope: ArchiveScope,
    offloader: Arc<dyn Offloader>,
    /// The summarizer of steps that name none (see the crate documentation).
    summarizer: Arc<dyn Summarizer>,
    state: ContextState,
    last_usage: Option<u64>,
    /// The shape of the last request handed out, so a usage report can be tied to it.
    sent: Option<SentRequest>,
    events: broadcast::Sender<Event>,
    clock: EngineClock,
    archived_bytes: u64,
    memory: Option<(Arc<LongTermMemory>, MemoryScope)>,
    /// Consecutive compactions that ended over the trigger (see `stop_compaction_loop`).
    stalled_compactions: u32,
    /// A summary written ahead of the trigger (see [`ContextManager::summary_to_prepare`]).
    prepared: Option<PreparedSummary>,
    /// The compaction count of the context a preparation handed out is running for.
    preparing: Option<u32>,
    /// Focus for the summarizer of the next preparation's compaction, if it compacts (see
    /// [`ContextManager::focus_next`]).
    next_focus: Option<String>,
    /// Context providers and transforms run on every request handed out (see
    /// [`ContextManager::add_provider`]).
    hooks: assembly::RequestHooks,
}

impl ContextManager {
    /// A manager for `session` in the default tenant.
    pub fn new(
        settings: Settings,
        session: &str,
        offloader: Arc<dyn Offloader>,
        summarizer: Arc<dyn Summarizer>,
    ) -> ContextManager {
        ContextManager::with_scope(
            settings,
            ArchiveScope::session(session),
            offloader,
            summarizer,
        )
    }

    /// A manager for an explicit tenant + session scope.
    pub fn with_scope(
        settings: Settings,
        scope: ArchiveScope,
        offloader: Arc<dyn Offloader>,
        summarizer: Arc<dyn Summarizer>,
    ) -> ContextManager {
        // The channel's slots are allocated up front for every live session (a gateway holds
        // thousands): 1,024 of them cost ~150 KB per session. A compaction emits its events
        // in one burst of (items archived + 3); a subscriber that falls further behind gets
        // `Lagged` and resumes at the newest, which always include the compaction's end.
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        ContextManager {
            engine: Engine::new(settings.policy.clone(), settings.model.clone()),
            settings,
            scope,
            offloader,
            summarizer,
            state: ContextState::default(),
            last_usage: None,
            sent: None,
            events,
            clock: EngineClock::default(),
            archived_bytes: 0,
            memory: None,
            stalled_compactions: 0,
            prepared: None,
            preparing: None,
            next_focus: None,
            hooks: assembly::RequestHooks::default(),
        }
    }

    /// Registers a context provider: before every request this manager hands out, it reads
    /// the history (after the transforms) and returns messages (an identity header, today's
    /// date, a memory index, a workspace snapshot) that go where the policy places
    /// request-time context, `provider_placement`: after the history by default, before it
    /// (right after the instructions) under `agentrail`, whose providers are prepended to
    /// the session history. Providers run in the order registered; their messages are sent
    /// with the request and never stored in the context, so every request carries fresh
    /// ones. Content placed before the history should change rarely: it starts the prefix a
    /// provider's prompt cache serves.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ctxkeeper::{ContextManager, Settings};
    /// use ctxkeeper::core::engine::presets;
    /// use ctxkeeper::core::model::{Message, Role};
    /// use ctxkeeper::core::tokens::{Profiles, TokenModel};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let dir = tempfile::tempdir().unwrap();
    /// let settings = Settings {
    ///     policy: presets::preset("agentrail").unwrap(),
    ///     model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
    ///     window: 128_000,
    ///     fixed_tokens: 0,
    /// };
    /// let offloader = Arc::new(ctxkeeper::store::LocalWorkspace::new(dir.path()).unwrap());
    /// let summarizer = Arc::new(ctxkeeper::llm::ExtractiveSummarizer::default());
    /// let mut context = ContextManager::new(settings, "s1", offloader, summarizer);
    /// context.add_provider(|_: &[Message]| vec![Message::user("Tenant: acme")]);
    /// // Redact every secret before it is sent (the context keeps it as it was).
    /// context.add_transform(|history: Vec<Message>| {
    ///     history
    ///         .into_iter()
    ///         .map(|m| match m.text().contains("hunter2") {
    ///             true => Message::new(m.role, vec![ctxkeeper::core::model::Part::text("[redacted]")]),
    ///             false => m,
    ///         })
    ///         .collect()
    /// });
    /// context.ingest(Message::system("You are terse.")).await.unwrap();
    /// context.ingest(Message::user("my password is hunter2")).await.unwrap();
    /// let sent = context.prepare().await.unwrap().messages;
    /// let texts: Vec<String> = sent.iter().map(|m| m.text()).collect();
    /// assert_eq!(texts, ["You are terse.", "Tenant: acme", "[redacted]"]);
    /// assert!(context.state().to_messages()[1].text().contains("hunter2"));
    /// # });
    /// ```
    pub fn add_provider(&mut self, provider: impl ContextProvider + 'static) {
        self.hooks.add_provider(Box::new(provider));
    }

    /// Registers a transform hook: it gets the messages of every request this manager hands
    /// out, before the providers run and before they are sent, and returns the messages to
    /// send instead (redact, normalize, drop or rewrite; several run left to right). The
    /// context itself is left as it is. A transform that rewrites the history makes the
    /// provider's usage report describe other messages than the context's: it then drives
    /// the reactive tiers but no longer anchors the context's token count. See
    /// [`ContextManager::add_provider`] for an example.
    pub fn add_transform(&mut self, transform: impl Transform + 'static) {
        self.hooks.add_transform(Box::new(transform));
    }

    /// Flushes durable facts to long-term memory before every compaction that summarizes
    /// (the summarizer extracts them, or finds none); under a policy whose summaries go to
    /// memory (`placement = "memory"`, CowAgent), the summaries are written there too.
    pub fn with_memory(
        mut self,
        memory: Arc<LongTermMemory>,
        scope: MemoryScope,
    ) -> ContextManager {
        self.memory = Some((memory, scope));
        self
    }

    /// Resumes from a saved state.
    pub fn restore(&mut self, state: ContextState) {
        self.state = state;
        self.sent = None;
        self.prepared = None;
        self.preparing = None;
    }

    /// Resumes a stored session after a restart, as the policy's `[session]` says: under
    /// `restore_recent_turns = N` (CowAgent) only the last `max(3, N / 6)` turns come back,
    /// each its user text and final reply (the instructions kept); otherwise the whole saved
    /// state, as [`ContextManager::restore`]. Returns the messages the resume left out.
    pub fn resume(&mut self, state: ContextState) -> usize {
        let Some(max_turns) = self.settings.policy.session.restore_recent_turns else {
            self.restore(state);
            return 0;
        };
        let messages = state.to_messages();
        let kept = ctxkeeper_store::restore::restore(
            &messages,
            ctxkeeper_store::restore::RestoreStrategy::RecentTurns { max_turns },
        );
        let dropped = messages.len().saturating_sub(kept.len());
        let mut resumed = ContextState::from_messages(kept);
        // The reduced messages are new texts, not entries of the log; the log goes on where
        // it was, so new messages keep their log positions.
        for entry in &mut resumed.entries {
            entry.meta.log_index = None;
        }
        resumed.appended = state.appended;
        resumed.compactions = state.compactions;
        self.restore(resumed);
        dropped
    }

    /// The managed context.
    pub fn state(&self) -> &ContextState {
        &self.state
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The summarizer of steps that name none: the one the manager was built with, whatever
    /// summarizers its steps were given.
    pub fn summarizer(&self) -> &Arc<dyn Summarizer> {
        &self.summarizer
    }

    /// The engine's accumulated time.
    pub fn clock(&self) -> EngineClock {
        self.clock
    }

    /// Bytes written to the archive so far.
    pub fn archived_bytes(&self) -> u64 {
        self.archived_bytes
    }

    /// A receiver of every event from now on. It buffers [`EVENT_BUFFER`] events; a receiver
    /// that falls further behind loses the oldest (`RecvError::Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    fn budget(&self) -> Budget {
        Budget {
            window: self.settings.window,
            fixed_tokens: self.settings.fixed_tokens,
        }
    }

    fn emit(&self, events: Vec<Event>) {
        for event in events {
            self.emit_one(event);
        }
    }

    /// [`Self::emit`] for one event (every step emits one: no list is allocated for it).
    fn emit_one(&self, event: Event) {
        // No subscriber is fine: events are offered, not required.
        let _ = self.events.send(event);
    }

    /// Appends a message pinned: it stays verbatim through every compaction (the policy's
    /// `[pin]` rules pin messages the same way without the caller asking).
    pub fn ingest_pinned(&mut self, message: Message) {
        self.state.push(message);
        if let Some(entry) = self.state.entries.last_mut() {
            entry.meta.pinned = true;
        }
    }

    /// Appends a message to the context, capping oversized tool results first.
    pub async fn ingest(&mut self, message: Message) -> Result<(), Error> {
        self.ingest_as_given(message).await.map(|_| ())
    }

    /// [`Self::ingest`], and whether the context's new last entry is the message as given
    /// (false when a tool result was cut to a preview). Images over the policy's limit may
    /// still be moved out of it or of older messages when it carries an image.
    pub async fn ingest_as_given(&mut self, message: Message) -> Result<bool, Error> {
        let budget = self.budget();
        let started = Instant::now();
        // A message the policy pins is kept verbatim from the start: no ingest cap either.
        if self.engine.pins(&self.state, &message) {
            self.ingest_pinned(message);
            self.clock.engine += started.elapsed();
            return Ok(true);
        }
        let has_data = message_has_data(&message);
        let decision = self.engine.plan_ingest(&self.state, &budget, message);
        self.clock.engine += started.elapsed();
        let as_given = match decision {
            Ingest::Ready(message) => {
                self.state.push(message);
                true
            }
            Ingest::Cap(plan) => {
                let layout = self.engine.config().archive.clone();
                let refs = self.archive(&plan.archive, &layout).await?;
                let started = Instant::now();
                let events = self.engine.apply_ingest(&mut self.state, plan, &refs);
                self.clock.engine += started.elapsed();
                self.emit(events);
                false
            }
        };
        if has_data {
            self.limit_images().await?;
        }
        Ok(as_given)
    }

    /// Enforces the policy's `ingest.max_images`: the oldest images over the limit are
    /// stored as `data/<sha256>.<ext>` and a line naming the file takes their place. A remote
    /// image (an http URL) has no bytes here: its URL is what the line names.
    async fn limit_images(&mut self) -> Result<(), Error> {
        let plan = self.engine.plan_images(&self.state);
        if plan.is_empty() {
            return Ok(());
        }
        let mut refs = Vec::with_capacity(plan.len());
        for image in &plan {
            refs.push(match ctxkeeper_store::archive::inline_data(&image.source) {
                Some((media_type, bytes)) => {
                    let reference = self
                        .offloader
                        .put_data(&self.scope, &bytes, &media_type)
                        .await?;
                    self.archived_bytes += bytes.len() as u64;
                    (reference.0, bytes.len() as u64)
                }
                None => (describe_source(&image.source), 0),
            });
        }
        let events = self.engine.apply_images(&mut self.state, &plan, &refs);
        self.emit(events);
        Ok(())
    }

    /// Records the input tokens the provider reported for the last request `prepare` returned
    /// (all of them: for Anthropic, `input_tokens` plus the cache reads and writes). The
    /// report drives the reactive tiers and anchors the token count: until the context is
    /// rewritten, only messages ingested since are estimated (see
    /// [`ContextState::anchor_usage`]).
    pub fn observe_usage(&mut self, input_tokens: u64) {
        self.last_usage = Some(input_tokens);
        if let Some(sent) = self.sent
            && sent.compactions == self.state.compactions
        {
            let context_tokens =
                input_tokens.saturating_sub(self.settings.fixed_tokens + sent.extra_tokens);
            self.state.anchor_usage(sent.len, context_tokens);
        }
    }

    /// Gives the next preparation a focus for its summarizer (what the summary should keep
    /// in view: "the failing invoice test"), used if that preparation compacts, then
    /// forgotten. The gateway's `x-ctxkeeper-focus` header sets it per request.
    pub fn focus_next(&mut self, focus: Option<String>) {
        self.next_focus = focus.filter(|f| !f.trim().is_empty());
    }

    /// Compacts if a trigger fires and returns the messages to send.
    pub async fn prepare(&mut self) -> Result<Prepared, Error> {
        let summarizer = Arc::clone(&self.summarizer);
        self.prepare_with(summarizer.as_ref()).await
    }

    /// [`Self::prepare`], summarizing (if it compacts) with `summarizer`, which the manager
    /// does not keep.
    pub async fn prepare_with(&mut self, summarizer: &dyn Summarizer) -> Result<Prepared, Error> {
        let mut prepared = self.prepare_counted_with(summarizer).await?;
        prepared.messages = self.sent_messages(prepared.budget_notice.as_deref());
        Ok(prepared)
    }

    /// [`Self::prepare`] without copying the context out: [`Prepared::messages`] is left
    /// empty. For a host that forwards its client's own request while the context is still
    /// the client's messages; [`Self::request_messages`] builds them when it is not.
    pub async fn prepare_counted(&mut self) -> Result<Prepared, Error> {
        let summarizer = Arc::clone(&self.summarizer);
        self.prepare_counted_with(summarizer.as_ref()).await
    }

    /// [`Self::prepare_counted`], summarizing (if it compacts) with `summarizer`, which the
    /// manager does not keep.
    pub async fn prepare_counted_with(
        &mut self,
        summarizer: &dyn Summarizer,
    ) -> Result<Prepared, Error> {
        let budget = self.budget();
        let request = PlanRequest {
            reported_usage: self.last_usage.take(),
            summarize_through: self.prepared_span().map(|span| span.last),
            focus: self.next_focus.take(),
            ..PlanRequest::default()
        };
        let started = Instant::now();
        let plan = self.engine.plan(&mut self.state, &budget, &request);
        self.clock.engine += started.elapsed();
        let mut compacted = match plan {
            Some(plan) => {
                self.execute(plan, summarizer).await?;
                true
            }
            None => false,
        };
        // A request known not to fit the window is not sent as it is: what a provider's
        // overflow error would make the caller do (the recovery's deeper compaction, the
        // newest output cut to a preview) is done now, so a window the fixed prompt nearly
        // fills does not cost an error and a retry on every step. When even that cannot fit,
        // the request goes as it is and the provider has the last word.
        // The estimate decides first: the exact count (a tokenizer pass over what is not
        // counted yet) is only paid when the estimate is over the window.
        if budget.window > 0
            && self.engine.config().overflow.max_attempts > 0
            && self.engine.approx_request_tokens(&mut self.state, &budget) > budget.window
        {
            let tokens = self.engine.request_tokens(&mut self.state, &budget);
            if tokens > budget.window {
                match self
                    .handle_overflow_with(summarizer, 1, tokens + 1, Some(budget.window))
                    .await
                {
                    Ok(_) => compacted = true,
                    Err(Error::Archive(err)) => return Err(Error::Archive(err)),
                    Err(_) => {}
                }
            }
        }
        Ok(self.counted(compacted))
    }

    /// The messages of the request [`Self::prepare_counted`] prepared: the context, rewritten
    /// by the transforms and completed by the providers (if any were registered), with its
    /// budget notice (if any) on the last message.
    pub fn request_messages(&self, budget_notice: Option<&str>) -> Vec<Message> {
        self.assemble_request(budget_notice).0
    }

    /// [`Self::request_messages`], and the messages the providers added.
    fn assemble_request(&self, budget_notice: Option<&str>) -> (Vec<Message>, Vec<Message>) {
        let context = self.state.to_messages();
        let (mut messages, provided) = if self.hooks.is_empty() {
            (context, Vec::new())
        } else {
            self.hooks
                .apply(context, self.engine.config().provider_placement)
        };
        if let Some(notice) = budget_notice {
            attach_notice(&mut messages, notice);
        }
        (messages, provided)
    }

    /// The messages of the request just counted, with what they carry beyond the context
    /// noted, so that the provider's usage report for them anchors the context's count.
    fn sent_messages(&mut self, budget_notice: Option<&str>) -> Vec<Message> {
        let (messages, provided) = self.assemble_request(budget_notice);
        if self.hooks.transforms() {
            // What was sent is not the context: its usage says nothing exact about it.
            self.sent = None;
        } else if let Some(sent) = &mut self.sent
            && !provided.is_empty()
        {
            sent.extra_tokens += self.engine.model().messages_tokens(&provided);
        }
        messages
    }

    /// What `prepare` would do now, without doing it (a dry run): the plan is made on a copy
    /// of the state, so nothing it learns (the step's size, a hold on retries, see
    /// [`Engine::plan`]) reaches the session.
    pub fn plan(&self) -> Option<Plan> {
        let budget = self.budget();
        let mut draft = self.state.clone();
        let request = PlanRequest {
            reported_usage: self.last_usage,
            summarize_through: self.prepared_span().map(|span| span.last),
            ..PlanRequest::default()
        };
        self.engine.plan(&mut draft, &budget, &request)
    }

    /// Compacts now, optionally under a one-off policy override (a TOML fragment) and with
    /// focus instructions for the summarizer. Returns whether anything changed.
    pub async fn compact(
        &mut self,
        overrides: Option<&str>,
        focus: Option<String>,
    ) -> Result<bool, Error> {
        self.compact_to(overrides, focus, None).await
    }

    /// Compacts as [`ContextManager::compact`] does, down to at most `target` tokens when
    /// given (below the policy's own target: `Some(0)` summarizes everything but what must
    /// stay, for a client that replaces its whole history by the result).
    pub async fn compact_to(
        &mut self,
        overrides: Option<&str>,
        focus: Option<String>,
        target: Option<u64>,
    ) -> Result<bool, Error> {
        let summarizer = Arc::clone(&self.summarizer);
        self.compact_to_with(summarizer.as_ref(), overrides, focus, target)
            .await
    }

    /// [`Self::compact_to`], summarizing with `summarizer`, which the manager does not keep.
    pub async fn compact_to_with(
        &mut self,
        summarizer: &dyn Summarizer,
        overrides: Option<&str>,
        focus: Option<String>,
        target: Option<u64>,
    ) -> Result<bool, Error> {
        let engine = match overrides {
            Some(fragment) => {
                let policy = self
                    .settings
                    .policy
                    .with_overrides(fragment)
                    .map_err(|e| Error::Config(e.0))?;
                Engine::new(policy, self.settings.model.clone())
            }
            None => self.engine.clone(),
        };
        let budget = self.budget();
        let request = PlanRequest {
            force: Some(CompactionReason::Manual),
            focus,
            target_tokens: target,
            ..PlanRequest::default()
        };
        match engine.plan(&mut self.state, &budget, &request) {
            Some(plan) => {
                self.execute_with(&engine, plan, summarizer).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn prepared(&mut self, compacted: bool) -> Prepared {
        let mut prepared = self.counted(compacted);
        prepared.messages = self.sent_messages(prepared.budget_notice.as_deref());
        prepared
    }

    /// [`Self::prepared`] without the messages.
    fn counted(&mut self, compacted: bool) -> Prepared {
        let budget = self.budget();
        let started = Instant::now();
        let input_tokens = self.engine.approx_request_tokens(&mut self.state, &budget);
        self.clock.engine += started.elapsed();
        let budget_used_pct = input_tokens as f64 * 100.0 / budget.window.max(1) as f64;
        self.emit_one(Event::BudgetUsed {
            tokens: input_tokens,
            window: budget.window,
            pct: budget_used_pct,
        });
        let budget_notice = self.budget_notice(input_tokens, &budget);
        self.sent = Some(SentRequest {
            len: self.state.entries.len(),
            compactions: self.state.compactions,
            // A rough figure is enough: it only keeps the notice out of the calibration.
            extra_tokens: budget_notice.as_ref().map_or(0, |n| n.len() as u64 / 4),
        });
        Prepared {
            messages: Vec::new(),
            input_tokens,
            compacted,
            budget_used_pct,
            budget_notice,
        }
    }

    /// The notice for a request of `tokens`, when the policy asks for one and the request
    /// reached its share of the trigger.
    fn budget_notice(&self, tokens: u64, budget: &Budget) -> Option<String> {
        let config = self.engine.config().budget_notice.as_ref()?;
        let (trigger, _) = self.engine.active_trigger(&self.state, budget)?;
        if (tokens as f64) < config.nudge_at * trigger as f64 {
            return None;
        }
        let pct = tokens as f64 * 100.0 / budget.window.max(1) as f64;
        let trigger_pct = trigger as f64 * 100.0 / budget.window.max(1) as f64;
        Some(format!(
            "[context budget] {pct:.0}% of the context window is used ({tokens} of {} tokens). \
             At {trigger_pct:.0}% older messages are compacted (archived, with a summary). \
             Write down now anything you will need later: decisions, file paths, open tasks.",
            budget.window
        ))
    }

    /// Reports and stops a compaction that keeps repeating without progress: after two
    /// compactions in a row that could not get under the trigger (what remains is pinned),
    /// token triggers hold until the context has grown by a twentieth of the window, so the
    /// next steps do not recompact (and re-break the prompt cache) for a few tokens each.
    fn stop_compaction_loop(&mut self) {
        let budget = self.budget();
        let Some((trigger, _)) = self.engine.active_trigger(&self.state, &budget) else {
            return;
        };
        let tokens = self.engine.approx_request_tokens(&mut self.state, &budget);
        if tokens < trigger || self.state.holding(tokens) {
            // Under the trigger, or the engine already holds it (hysteresis).
            self.stalled_compactions = 0;
            return;
        }
        self.stalled_compactions += 1;
        if self.stalled_compactions < 2 {
            return;
        }
        let growth = budget.window / 20;
        self.state.hold_until_growth(tokens, growth);
        self.emit(vec![Event::CompactionSkipped {
            reason: format!(
                "compaction left {tokens} tokens, still over the trigger ({trigger}): what \
                 remains is pinned; compaction resumes once the context grows by {growth} tokens"
            ),
            tokens,
        }]);
    }

    /// Steps between compactions when they are too few for a model summary each time
    /// ([`TIGHT_WINDOW_STEPS`]); `None` when there is room, or when the summarizer is the
    /// extractive one anyway.
    fn tight_window(&mut self, summarizer: &dyn Summarizer) -> Option<u64> {
        if summarizer.name() == ctxkeeper_llm::EXTRACTIVE_PRODUCER {
            return None;
        }
        let budget = self.budget();
        self.engine
            .steps_between_compactions(&self.state, &budget)
            .filter(|steps| *steps < TIGHT_WINDOW_STEPS)
    }

    /// Cuts the tool results of the newest message, when it is one carrying them, so the
    /// context loses at least `excess` tokens: each result becomes a preview (the policy's
    /// shape) naming where its whole text is archived. A recovery's last resort, when the
    /// newest round alone does not fit beside the instructions and tool schemas. False when
    /// there is nothing to cut; else the entry as it was, for a recovery that still fails to
    /// put back.
    async fn cut_newest_results(&mut self, excess: u64) -> Result<Option<Entry>, Error> {
        let Some(last) = self.state.entries.last() else {
            return Ok(None);
        };
        if last.meta.synthetic || !last.message.has_tool_results() {
            return Ok(None);
        }
        let results = last
            .message
            .parts
            .iter()
            .filter(|p| matches!(p, ctxkeeper_core::model::Part::ToolResult { .. }))
            .count() as u64;
        let size = self.state.estimate_entry(last);
        // Each result gets an equal share of what is left, less room for the note.
        let limit = size.saturating_sub(excess + 64) / results.max(1);
        let Some(entry) = self.state.entries.pop() else {
            return Ok(None);
        };
        let plan =
            match self
                .engine
                .plan_result_cut(&self.state, entry.message.clone(), limit.max(32))
            {
                Ingest::Cap(plan) => plan,
                Ingest::Ready(_) => {
                    self.state.entries.push(entry);
                    return Ok(None);
                }
            };
        let layout = self.engine.config().archive.clone();
        let refs = match self.archive(&plan.archive, &layout).await {
            Ok(refs) => refs,
            Err(err) => {
                self.state.entries.push(entry);
                return Err(err);
            }
        };
        let events = self.engine.apply_ingest(&mut self.state, plan, &refs);
        // The same message of the log, cut: its place in the log does not move.
        self.state.appended -= 1;
        if let Some(cut) = self.state.entries.last_mut() {
            cut.meta.log_index = entry.meta.log_index;
        }
        self.state.invalidate_totals();
        self.emit(events);
        Ok(Some(entry))
    }

    async fn execute(&mut self, plan: Plan, summarizer: &dyn Summarizer) -> Result<(), Error> {
        let engine = self.engine.clone();
        self.execute_with(&engine, plan, summarizer).await
    }

    /// Archives, summarizes, then applies: content leaves only after the archive confirmed.
    async fn execute_with(
        &mut self,
        engine: &Engine,
        mut plan: Plan,
        summarizer: &dyn Summarizer,
    ) -> Result<(), Error> {
        let refs = self
            .archive(&plan.archive, &engine.config().archive)
            .await?;
        plan.fill_summary_requests(&refs);
        if self.memory.is_some() {
            for request in &plan.summaries {
                let facts = summarizer
                    .extract_facts(&request.messages, 600)
                    .await
                    .unwrap_or(None);
                // One fact per line in the memory file, whatever bullets the summarizer used.
                let facts = facts
                    .iter()
                    .flat_map(|text| text.lines())
                    .map(|line| line.trim().trim_start_matches("- ").trim().to_string())
                    .filter(|line| !line.is_empty())
                    .collect();
                self.remember(facts).await;
            }
        }
        let mut summaries = Vec::with_capacity(plan.summaries.len());
        let tight = self.tight_window(summarizer);
        for (index, request) in plan.summaries.iter().enumerate() {
            if let Some(summary) =
                self.take_prepared(plan.summary_spans.get(index).copied().flatten())
            {
                summaries.push(summary);
                continue;
            }
            if let Some(steps_between_compactions) = tight {
                self.emit(vec![Event::SummaryDowngraded {
                    summarizer: summarizer.name().to_string(),
                    steps_between_compactions,
                }]);
                summaries.push(extractive(request).await);
                continue;
            }
            let summary = match summarizer.summarize(request).await {
                Ok(summary) => summary,
                // A failed summary never kills the turn: the extractive summary (no model, it
                // cannot fail) stands in, marked degraded, and the cause is reported.
                Err(err) => {
                    let cause = err.to_string();
                    self.emit(vec![Event::SummaryFailed {
                        summarizer: summarizer.name().to_string(),
                        cause,
                    }]);
                    degraded_extractive(request).await
                }
            };
            summaries.push(summary);
        }
        if engine.config().summary.placement == ctxkeeper_core::engine::SummaryPlacement::Memory {
            for summary in &summaries {
                self.remember_summary(summary, &engine.config().summary.schema)
                    .await;
            }
        }
        let started = Instant::now();
        let events = engine.apply(&mut self.state, plan, PlanOutcome { refs, summaries });
        self.clock.engine += started.elapsed();
        self.emit(events);
        // A summary prepared for the context before this compaction would now be applied
        // over messages it never read.
        if let Some(stale) = self.prepared.take() {
            self.emit(vec![prepared::prepared_event(
                stale.span,
                "discarded",
                None,
            )]);
        }
        self.stop_compaction_loop();
        Ok(())
    }
}

/// Adds the budget notice to the request's last message without changing its role sequence:
/// to the text of a trailing user ask, or to the last tool result of a trailing tool turn
/// (a separate user message there would break role alternation for Anthropic). Only the
/// newest message changes, so the cached prefix before it holds.
fn attach_notice(messages: &mut [Message], notice: &str) {
    use ctxkeeper_core::model::{Part, Role};
    let Some(last) = messages.last_mut() else {
        return;
    };
    if last.role == Role::Assistant || last.role.is_instruction() {
        return;
    }
    if let Some(Part::ToolResult { content, .. }) = last
        .parts
        .iter_mut()
        .rev()
        .find(|p| matches!(p, Part::ToolResult { .. }))
    {
        content.push(Part::text(notice));
        return;
    }
    last.parts.push(Part::text(notice));
}

/// The extractive summary of `request` (no model: it takes microseconds and cannot fail).
async fn extractive(
    request: &ctxkeeper_core::summary::SummaryRequest,
) -> ctxkeeper_core::summary::Summary {
    let mut summary = degraded_extractive(request).await;
    summary.degraded = false;
    summary
}

/// The extractive summary of `request`, marked degraded: what stands in for a failed model
/// summary.
async fn degraded_extractive(
    request: &ctxkeeper_core::summary::SummaryRequest,
) -> ctxkeeper_core::summary::Summary {
    let extractive = ctxkeeper_llm::ExtractiveSummarizer::default();
    let mut summary = match extractive.summarize(request).await {
        Ok(summary) => summary,
        Err(_) => ctxkeeper_llm::fallback_truncation(request),
    };
    summary.degraded = true;
    summary
}
