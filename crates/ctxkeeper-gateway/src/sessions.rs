//! Sessions: the managed context of each conversation, cached in memory and persisted in the
//! shared store.
//!
//! Agents resend their whole history on every call. A session remembers the fingerprints of
//! the client messages it has ingested ([`identity::message_hash`]); when they are a prefix of
//! a request's messages, only the new messages are ingested into the session's
//! [`ContextManager`], so its earlier compaction (summary, placeholders, archive references)
//! is reused and the forwarded prefix stays byte-identical. When the client's history diverged
//! (an edited turn, a branch), the context is rebuilt from the client's messages and a
//! `history_diverged` event says so.
//!
//! Persistence: the managed messages go to [`AgentState::context`], the engine's bookkeeping
//! and the fingerprints to [`AgentState::engine`], per-session policy overrides to
//! [`AgentState::extensions`]. Every save is a compare-and-swap on the version this process
//! last saw; a lost swap (another gateway saved first) reloads the session and redoes the
//! step, so two gateways never commit two compactions of one version and never lose a
//! message. Within a process, a per-session mutex serializes the steps. A step's events
//! (compactions, divergences, overflow recoveries) reach subscribers and metrics only once its
//! save committed: a step that lost its swap is redone, and what it did is not announced.
//!
//! The client messages a step ingests also go to the session log. On a store that
//! [commits atomically](SessionStore::commits_atomically) (SQLite, PostgreSQL, MySQL, Redis,
//! memory) they are written with the state in one commit, so the log never misses or
//! repeats a message. On a store that cannot (the JSON file store), the log is a second
//! write after the save. So that no message is lost when a process dies (or the store
//! fails) between the two, each save also records the client messages it commits to the log
//! and the log length they end at (write-ahead). The saver appends them right after the
//! save; whoever next saves on top of that state first checks the log, waits (up to
//! [`DEFAULT_LOG_LEASE`]) while the saver's append is still due, and then appends whatever
//! never arrived itself, inside its own compare-and-swapped save. This also keeps the log in
//! commit order across gateways. The one case left on such a store: a saver stalled for
//! longer than the lease between its two writes appends late, and its messages are logged
//! twice (never lost).
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use std::sync::Arc;
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_gateway::sessions::{Incoming, Sessions};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = ctxkeeper_store::open_store("memory://").await.unwrap();
//! let archive = ctxkeeper_store::open_archive(dir.path().to_str().unwrap()).await.unwrap();
//! let sessions = Sessions::new(store, archive, Default::default(), Default::default(), 100);
//! let key = ctxkeeper_store::SessionKey::simple("s1").unwrap();
//! let incoming = Incoming::new(Some("gpt-4o".into()), vec![Message::user("hi")], &[]);
//! let step = sessions.step(&key, &incoming, &[]).await.unwrap();
//! assert_eq!(step.prepared.messages.len(), 1);
//! assert!(step.verbatim, "nothing was compacted: the client's body can go as it is");
//! # });
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use ctxkeeper::{ContextManager, Prepared, Settings};
use ctxkeeper_core::engine::{ContextState, Entry, EntryMeta, Event, PolicyConfig};
use ctxkeeper_core::model::{Message, ToolSpec};
use ctxkeeper_core::overflow::Overflow;
use ctxkeeper_core::summary::Summary;
use ctxkeeper_core::tokens::{Profiles, TokenModel};
use ctxkeeper_llm::{ExtractiveSummarizer, Summarizer};
use ctxkeeper_store::archive::Offloader;
use ctxkeeper_store::{AgentState, HistoryPage, SessionKey, SessionStore, StoreError, Versioned};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::{Mutex, broadcast};

use crate::identity::{self, common_prefix};
use crate::metrics::Metrics;

/// The extension key holding a session's policy overrides (a TOML fragment).
pub const POLICY_OVERRIDES: &str = "policy_overrides";
/// How many times a step is redone after losing a compare-and-swap before giving up.
const MAX_CAS_RETRIES: usize = 8;
/// Marks the gateway's layout of [`AgentState::engine`].
const ENGINE_FORMAT: &str = "ctxkeeper-gateway/1";
/// How long a step waits for the saver of the stored state to append that save's messages to
/// the session log before it presumes the saver dead and appends them itself. A saver appends
/// within milliseconds of its save, so this is only ever waited out after a crash.
pub const DEFAULT_LOG_LEASE: Duration = Duration::from_secs(5);
/// How often a step waiting for another saver's append looks at the log again.
const LOG_POLL: Duration = Duration::from_millis(10);

/// Errors of a session step.
#[derive(Debug)]
#[non_exhaustive]
pub enum SessionError {
    /// The store failed, or kept losing compare-and-swaps.
    Store(StoreError),
    /// The context manager failed (archive write, policy).
    Context(ctxkeeper::Error),
    /// Stored session data that cannot be read back.
    Corrupt(String),
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::Store(err) => write!(f, "session store: {err}"),
            SessionError::Context(err) => write!(f, "context: {err}"),
            SessionError::Corrupt(message) => write!(f, "stored session unreadable: {message}"),
        }
    }
}

impl std::error::Error for SessionError {}

impl From<StoreError> for SessionError {
    fn from(err: StoreError) -> SessionError {
        SessionError::Store(err)
    }
}

impl From<ctxkeeper::Error> for SessionError {
    fn from(err: ctxkeeper::Error) -> SessionError {
        SessionError::Context(err)
    }
}

/// An event of a session, as streamed on `/v1/sessions/{id}/events`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionEvent {
    /// The SSE event name (`context_compaction_start`, `history_diverged`, …).
    pub name: String,
    pub data: Value,
}

impl SessionEvent {
    fn engine(event: &Event) -> SessionEvent {
        SessionEvent {
            name: event.name().to_string(),
            data: serde_json::to_value(event).unwrap_or(Value::Null),
        }
    }
}

/// A request's conversation, fingerprinted.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub model: Option<String>,
    pub messages: Vec<Message>,
    pub hashes: Vec<u128>,
    pub tools_hash: u128,
}

impl Incoming {
    /// Fingerprints a request's messages and tools.
    pub fn new(model: Option<String>, messages: Vec<Message>, tools: &[ToolSpec]) -> Incoming {
        let mut fingerprints = identity::Fingerprinter::default();
        let hashes = messages.iter().map(|m| fingerprints.message(m)).collect();
        Incoming {
            model,
            messages,
            hashes,
            tools_hash: identity::tools_hash(tools),
        }
    }
}

/// What one step produced.
#[derive(Debug)]
pub struct Step {
    pub prepared: Prepared,
    /// The managed context is exactly the client's messages (nothing compacted, capped or
    /// added): the client's own body can be forwarded unchanged.
    pub verbatim: bool,
    /// The client's history diverged from the stored one and the context was rebuilt.
    pub diverged: bool,
}

/// The engine's bookkeeping as stored in [`AgentState::engine`].
#[derive(Debug, Default, Serialize, Deserialize)]
struct StoredEngine {
    format: String,
    /// One per message of [`AgentState::context`].
    #[serde(default)]
    meta: Vec<EntryMeta>,
    #[serde(default)]
    compactions: u32,
    #[serde(default)]
    appended: u64,
    /// Fingerprints of the client messages ingested, hex.
    #[serde(default)]
    client_hashes: Vec<String>,
    /// The window an upstream's overflow error stated, when smaller than the profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    learned_window: Option<u64>,
    #[serde(default)]
    verbatim: bool,
    /// The log length once `pending_log` is appended; absent in states written before the log
    /// was tracked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    log_len: Option<u64>,
    /// The client messages this save committed to the session log (write-ahead: the saver
    /// appends them right after the save, a later saver appends what never arrived).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pending_log: Vec<Message>,
}

/// Where the session log stands against the slot's state. See the [module docs](self).
#[derive(Debug, Default)]
struct LogCursor {
    /// The client messages the state committed to the log ([`StoredEngine::pending_log`]).
    pending: Vec<Message>,
    /// The log length the state expects once `pending` is in ([`StoredEngine::log_len`]).
    expected: Option<u64>,
    /// When the state was saved (ms since the Unix epoch).
    saved_at_ms: i64,
    /// The log's length as last seen and how many of `pending` are in it (`pending[n..]` are
    /// still owed); `None` until the log was compared with the state.
    seen: Option<(u64, usize)>,
    /// This process saved `pending` and has not reloaded since: nobody else appends them.
    owner: bool,
}

/// What a step did that is announced only once its save committed.
#[derive(Debug, Default)]
struct Outbox {
    events: Vec<SessionEvent>,
    compactions: u64,
    tokens_saved: u64,
    overflow_recoveries: u64,
    divergences: u64,
}

/// Why a save did not happen.
#[derive(Debug)]
enum PersistError {
    Store(StoreError),
    /// The stored state's messages are not in the session log yet and their saver may still
    /// be appending them: look again shortly.
    LogBehind,
}

impl From<StoreError> for PersistError {
    fn from(err: StoreError) -> PersistError {
        PersistError::Store(err)
    }
}

/// A running context manager and the settings it was built with.
#[derive(Debug)]
struct Live {
    manager: ContextManager,
    events: broadcast::Receiver<Event>,
    model: String,
    window: u64,
    tools_hash: u128,
    overrides: Option<String>,
}

/// One session in memory.
#[derive(Debug, Default)]
struct Slot {
    loaded: bool,
    version: Option<u64>,
    created_at_ms: i64,
    extensions: BTreeMap<String, Value>,
    unknown: Map<String, Value>,
    hashes: Vec<u128>,
    learned_window: Option<u64>,
    verbatim: bool,
    /// The context while no manager runs (after a load, before the first step).
    state: Option<ContextState>,
    live: Option<Live>,
    log: LogCursor,
}

impl Slot {
    fn overrides(&self) -> Option<String> {
        self.extensions
            .get(POLICY_OVERRIDES)
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    fn take_state(&mut self) -> ContextState {
        match (self.live.take(), self.state.take()) {
            (Some(live), _) => live.manager.state().clone(),
            (None, Some(state)) => state,
            (None, None) => ContextState::default(),
        }
    }

    fn state_ref(&self) -> Option<&ContextState> {
        match &self.live {
            Some(live) => Some(live.manager.state()),
            None => self.state.as_ref(),
        }
    }
}

/// Statistics of one session's context (admin API).
#[derive(Debug, Clone, Serialize)]
pub struct ContextStats {
    pub version: Option<u64>,
    pub messages: usize,
    pub client_messages: usize,
    pub approx_tokens: u64,
    pub compactions: u32,
    pub appended: u64,
    pub has_summary: bool,
    pub archived_refs: usize,
    pub learned_window: Option<u64>,
    pub verbatim: bool,
    pub policy_overrides: Option<String>,
}

/// Every session this process serves.
#[derive(Debug)]
pub struct Sessions {
    store: Arc<dyn SessionStore>,
    offloader: Arc<dyn Offloader>,
    summarizer: Arc<dyn Summarizer>,
    policy: PolicyConfig,
    profiles: Profiles,
    capacity: usize,
    slots: StdMutex<HashMap<SessionKey, Arc<Mutex<Slot>>>>,
    channels: StdMutex<HashMap<SessionKey, broadcast::Sender<SessionEvent>>>,
    metrics: Arc<Metrics>,
    log_lease: Duration,
}

impl Sessions {
    /// Sessions over a store and an archive, under `policy`, keeping up to `capacity`
    /// sessions warm in memory.
    pub fn new(
        store: Arc<dyn SessionStore>,
        offloader: Arc<dyn Offloader>,
        policy: PolicyConfig,
        profiles: Profiles,
        capacity: usize,
    ) -> Sessions {
        Sessions {
            store,
            offloader,
            summarizer: Arc::new(ExtractiveSummarizer::default()),
            policy,
            profiles,
            capacity: capacity.max(1),
            slots: StdMutex::new(HashMap::new()),
            channels: StdMutex::new(HashMap::new()),
            metrics: Arc::new(Metrics::default()),
            log_lease: DEFAULT_LOG_LEASE,
        }
    }

    /// Waits this long (instead of [`DEFAULT_LOG_LEASE`]) for another saver's log append
    /// before appending its messages itself.
    pub fn with_log_lease(mut self, lease: Duration) -> Sessions {
        self.log_lease = lease;
        self
    }

    /// Records into these metrics instead of a private set.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Sessions {
        self.metrics = metrics;
        self
    }

    /// Summarizes with this summarizer instead of the extractive one.
    pub fn with_summarizer(mut self, summarizer: Arc<dyn Summarizer>) -> Sessions {
        self.summarizer = summarizer;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// The policy every session starts from.
    /// The archive compacted content goes to.
    pub fn archive(&self) -> &Arc<dyn Offloader> {
        &self.offloader
    }

    pub fn policy(&self) -> &PolicyConfig {
        &self.policy
    }

    fn slot(&self, key: &SessionKey) -> Arc<Mutex<Slot>> {
        let Ok(mut slots) = self.slots.lock() else {
            // A poisoned map only means a panic elsewhere; a fresh slot is still correct
            // (the store is the source of truth), merely not cached.
            return Arc::new(Mutex::new(Slot::default()));
        };
        if let Some(slot) = slots.get(key) {
            return slot.clone();
        }
        if slots.len() >= self.capacity {
            // Drop idle sessions (nobody holds their slot); they reload from the store.
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        let slot = Arc::new(Mutex::new(Slot::default()));
        slots.insert(key.clone(), slot.clone());
        slot
    }

    /// A receiver of the session's events from now on.
    pub fn subscribe(&self, key: &SessionKey) -> broadcast::Receiver<SessionEvent> {
        match self.channels.lock() {
            Ok(mut channels) => channels
                .entry(key.clone())
                .or_insert_with(|| broadcast::channel(256).0)
                .subscribe(),
            Err(_) => broadcast::channel(1).1,
        }
    }

    /// Ends every event stream (`/v1/sessions/{id}/events`), at shutdown: their receivers
    /// see the channel closed.
    pub fn close_events(&self) {
        if let Ok(mut channels) = self.channels.lock() {
            channels.clear();
        }
    }

    fn publish(&self, key: &SessionKey, event: SessionEvent) {
        let Ok(mut channels) = self.channels.lock() else {
            return;
        };
        if let Some(sender) = channels.get(key) {
            if sender.receiver_count() == 0 {
                channels.remove(key);
            } else {
                // A slow subscriber lags; the step never waits for it.
                let _ = sender.send(event);
            }
        }
    }

    /// Moves the manager's events into `outbox`; returns whether the managed context stopped
    /// being the client's messages verbatim.
    fn drain(live: &mut Live, outbox: &mut Outbox) -> bool {
        let mut changed = false;
        loop {
            match live.events.try_recv() {
                Ok(event) => {
                    match &event {
                        Event::ContextCompactionEnd {
                            tokens_before,
                            tokens_after,
                            ..
                        } => {
                            changed = true;
                            outbox.compactions += 1;
                            outbox.tokens_saved += tokens_before.saturating_sub(*tokens_after);
                        }
                        Event::ToolResultTruncated {
                            tokens_before,
                            tokens_after,
                            ..
                        } => {
                            changed = true;
                            outbox.tokens_saved += tokens_before.saturating_sub(*tokens_after);
                        }
                        Event::OverflowRecovered { .. } => {
                            outbox.overflow_recoveries += 1;
                        }
                        _ => {}
                    }
                    outbox.events.push(SessionEvent::engine(&event));
                }
                Err(broadcast::error::TryRecvError::Lagged(_)) => changed = true,
                Err(_) => return changed,
            }
        }
    }

    /// Announces what a committed step did: metrics, then subscribers.
    fn release(&self, key: &SessionKey, outbox: Outbox) {
        Metrics::add(&self.metrics.compactions, outbox.compactions);
        Metrics::add(&self.metrics.tokens_saved, outbox.tokens_saved);
        Metrics::add(
            &self.metrics.overflow_recoveries,
            outbox.overflow_recoveries,
        );
        Metrics::add(&self.metrics.divergences, outbox.divergences);
        for event in outbox.events {
            self.publish(key, event);
        }
    }

    /// The session log's length.
    async fn log_length(&self, key: &SessionKey) -> Result<u64, StoreError> {
        let last = self.store.history(key, HistoryPage::last(1)).await?;
        Ok(last.last().map_or(0, |entry| entry.seq))
    }

    /// Compares the slot's state with the session log, once per load: which of the messages
    /// the state committed are in the log. While some are missing and their saver may still
    /// append them, answers [`PersistError::LogBehind`]; once the lease is over (counted from
    /// the save, or from `waiting_since` against clock skew) they become this process's to
    /// append.
    async fn check_log(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
        waiting_since: Option<Instant>,
    ) -> Result<(), PersistError> {
        let cursor = &mut slot.log;
        if cursor.seen.is_some() {
            return Ok(());
        }
        let pending = cursor.pending.len() as u64;
        if let (0, Some(expected)) = (pending, cursor.expected) {
            // Nothing committed to the log by this state: its expectation is the length.
            cursor.seen = Some((expected, 0));
            return Ok(());
        }
        let len = self.log_length(key).await?;
        let in_log = match cursor.expected {
            Some(expected) if len < expected && len + pending >= expected => {
                pending - (expected - len)
            }
            // Everything arrived; or no expectation (a state from before the log was
            // tracked); or a log shorter than the state knows (trimmed or rewritten by
            // something else), where nothing can be placed.
            _ => pending,
        };
        if in_log < pending && !cursor.owner {
            let lease_ms = i64::try_from(self.log_lease.as_millis()).unwrap_or(i64::MAX);
            let young = now_ms().saturating_sub(cursor.saved_at_ms) < lease_ms;
            let waited = waiting_since.is_some_and(|since| since.elapsed() >= self.log_lease);
            if young && !waited {
                return Err(PersistError::LogBehind);
            }
            tracing::warn!(
                session = %key,
                missing = pending - in_log,
                "messages of the last save never reached the session log; appending them"
            );
        }
        cursor.seen = Some((len, in_log as usize));
        Ok(())
    }

    /// Appends what this process owes the log: the messages of its own last save, while no
    /// other saver may have taken them over (within the lease). A failure leaves them in the
    /// stored state for the next save to carry.
    async fn flush_log(&self, key: &SessionKey, slot: &mut Slot) {
        let cursor = &mut slot.log;
        let Some((_, in_log)) = cursor.seen else {
            return;
        };
        if !cursor.owner || in_log >= cursor.pending.len() {
            return;
        }
        let lease_ms = i64::try_from(self.log_lease.as_millis()).unwrap_or(i64::MAX);
        if now_ms().saturating_sub(cursor.saved_at_ms) >= lease_ms {
            return;
        }
        match self.store.append(key, &cursor.pending[in_log..]).await {
            Ok(outcome) => cursor.seen = Some((outcome.last_seq, cursor.pending.len())),
            Err(err) => {
                tracing::warn!(session = %key, %err, "session log append failed; the next save carries the messages");
                // A partial append is possible: compare with the log again before the next save.
                cursor.seen = None;
            }
        }
    }

    async fn ensure_loaded(&self, key: &SessionKey, slot: &mut Slot) -> Result<(), SessionError> {
        if slot.loaded {
            return Ok(());
        }
        let stored = self.store.load(key).await?;
        Self::install(slot, stored)
    }

    /// Replaces the slot with a stored session (`None`: a new one).
    fn install(slot: &mut Slot, stored: Option<Versioned>) -> Result<(), SessionError> {
        *slot = Slot::default();
        let Some(versioned) = stored else {
            slot.loaded = true;
            slot.verbatim = true;
            slot.created_at_ms = now_ms();
            return Ok(());
        };
        let AgentState {
            context,
            summary,
            engine,
            extensions,
            created_at_ms,
            updated_at_ms,
            unknown,
            ..
        } = versioned.state;
        let stored: StoredEngine = if engine.is_null() {
            StoredEngine::default()
        } else {
            serde_json::from_value(engine).map_err(|e| SessionError::Corrupt(e.to_string()))?
        };
        let mut state = ContextState::default();
        let mut meta = stored.meta.into_iter();
        state.entries = context
            .into_iter()
            .map(|message| {
                let mut entry = Entry::new(message);
                entry.meta = meta.next().unwrap_or_default();
                entry
            })
            .collect();
        state.summary = match summary {
            Some(value) => Some(
                serde_json::from_value::<Summary>(value)
                    .map_err(|e| SessionError::Corrupt(format!("summary: {e}")))?,
            ),
            None => None,
        };
        state.compactions = stored.compactions;
        state.appended = stored.appended.max(state.entries.len() as u64);
        slot.hashes = stored
            .client_hashes
            .iter()
            .map(|h| u128::from_str_radix(h, 16))
            .collect::<Result<_, _>>()
            .map_err(|e| SessionError::Corrupt(format!("client hash: {e}")))?;
        slot.loaded = true;
        slot.version = Some(versioned.version);
        slot.created_at_ms = created_at_ms;
        slot.extensions = extensions;
        slot.unknown = unknown;
        slot.learned_window = stored.learned_window;
        // A state written by something else (a replay, the CLI) is not the client's messages.
        slot.verbatim = stored.format == ENGINE_FORMAT && stored.verbatim;
        slot.state = Some(state);
        slot.log = LogCursor {
            pending: stored.pending_log,
            expected: stored.log_len,
            saved_at_ms: updated_at_ms,
            seen: None,
            owner: false,
        };
        Ok(())
    }

    /// Makes sure a manager with the request's settings runs, rebuilding it around the
    /// current context when the model, window, tools or policy changed.
    fn ensure_live(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
        incoming: &Incoming,
        tools: &[ToolSpec],
    ) -> Result<(), SessionError> {
        let model = incoming.model.clone().unwrap_or_default();
        let profile_window = self.profiles.resolve(&model).0.context_window;
        let window = slot
            .learned_window
            .map_or(profile_window, |w| w.min(profile_window));
        let overrides = slot.overrides();
        if let Some(live) = &slot.live
            && live.model == model
            && live.window == window
            && live.tools_hash == incoming.tools_hash
            && live.overrides == overrides
        {
            return Ok(());
        }
        let policy = match &overrides {
            Some(fragment) => self
                .policy
                .with_overrides(fragment)
                .map_err(|e| SessionError::Context(ctxkeeper::Error::Config(e.0)))?,
            None => self.policy.clone(),
        };
        let tokens = TokenModel::for_model(&model, &self.profiles);
        let fixed_tokens = u64::from(tokens.tools_tokens(tools));
        let settings = Settings {
            policy,
            model: tokens,
            window,
            fixed_tokens,
        };
        let state = slot.take_state();
        let mut manager = ContextManager::with_scope(
            settings,
            key.archive_scope(),
            self.offloader.clone(),
            self.summarizer.clone(),
        );
        manager.restore(state);
        let events = manager.subscribe();
        slot.live = Some(Live {
            manager,
            events,
            model,
            window,
            tools_hash: incoming.tools_hash,
            overrides,
        });
        Ok(())
    }

    /// Ingests what is new in `incoming`, prepares the request and persists the session.
    pub async fn step(
        &self,
        key: &SessionKey,
        incoming: &Incoming,
        tools: &[ToolSpec],
    ) -> Result<Step, SessionError> {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        let mut conflicts = 0;
        let mut waiting_since = None;
        loop {
            let mut outbox = Outbox::default();
            let Some((step, log)) = self
                .reconcile(
                    key,
                    &mut slot,
                    incoming,
                    tools,
                    &mut waiting_since,
                    &mut outbox,
                )
                .await?
            else {
                continue;
            };
            let saved = self.persist(key, &mut slot, log).await;
            if self.settle(&mut slot, saved, &mut conflicts)? {
                self.release(key, outbox);
                return Ok(step);
            }
        }
    }

    /// Judges a save: `Ok(true)` when it committed, `Ok(false)` when the caller reloads and
    /// tries again (a lost compare-and-swap within the retry budget, or a log still behind),
    /// and the error otherwise. Every outcome but success leaves the slot to be reloaded.
    fn settle(
        &self,
        slot: &mut Slot,
        saved: Result<(), PersistError>,
        conflicts: &mut usize,
    ) -> Result<bool, SessionError> {
        let retry = match saved {
            Ok(()) => return Ok(true),
            Err(PersistError::LogBehind) => Ok(false),
            Err(PersistError::Store(err)) if err.is_conflict() && *conflicts < MAX_CAS_RETRIES => {
                *conflicts += 1;
                Metrics::add(&self.metrics.store_conflicts, 1);
                Ok(false)
            }
            Err(PersistError::Store(err)) => Err(err.into()),
        };
        slot.loaded = false;
        retry
    }

    /// Loads the session and brings its context up to the client's messages ([`Self::advance`]).
    /// `Ok(None)` when it first had to wait for another saver's log append: the caller looks
    /// again, so a step is never computed on a state whose log is behind.
    async fn reconcile<'a>(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
        incoming: &'a Incoming,
        tools: &[ToolSpec],
        waiting_since: &mut Option<Instant>,
        outbox: &mut Outbox,
    ) -> Result<Option<(Step, Option<&'a [Message]>)>, SessionError> {
        self.ensure_loaded(key, slot).await?;
        if self.wait_for_log(key, slot, waiting_since).await? {
            return Ok(None);
        }
        match self.advance(key, slot, incoming, tools, outbox).await {
            Ok(done) => Ok(Some(done)),
            Err(err) => {
                // The manager may hold messages that were never saved: start over from the
                // store next time.
                slot.loaded = false;
                Err(err)
            }
        }
    }

    /// Checks the log against the loaded state; `Ok(true)` after waiting a moment for another
    /// saver's append (the caller reloads and looks again).
    async fn wait_for_log(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
        waiting_since: &mut Option<Instant>,
    ) -> Result<bool, SessionError> {
        match self.check_log(key, slot, *waiting_since).await {
            Ok(()) => Ok(false),
            Err(PersistError::LogBehind) => {
                waiting_since.get_or_insert_with(Instant::now);
                slot.loaded = false;
                tokio::time::sleep(LOG_POLL).await;
                Ok(true)
            }
            Err(PersistError::Store(err)) => {
                slot.loaded = false;
                Err(err.into())
            }
        }
    }

    /// Brings the context up to the client's messages and prepares; returns the step and the
    /// client messages the session log has not seen.
    async fn advance<'a>(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
        incoming: &'a Incoming,
        tools: &[ToolSpec],
        outbox: &mut Outbox,
    ) -> Result<(Step, Option<&'a [Message]>), SessionError> {
        let common = common_prefix(&slot.hashes, &incoming.hashes);
        let diverged = common < slot.hashes.len();
        if diverged {
            outbox.divergences += 1;
            outbox.events.push(SessionEvent {
                name: "history_diverged".into(),
                data: json!({
                    "type": "history_diverged",
                    "common_prefix": common,
                    "stored_messages": slot.hashes.len(),
                    "received_messages": incoming.hashes.len(),
                }),
            });
            // Follow the client: rebuild the context from its messages.
            slot.live = None;
            slot.state = Some(ContextState::default());
            slot.hashes.clear();
            slot.verbatim = true;
        }
        self.ensure_live(key, slot, incoming, tools)?;
        let start = slot.hashes.len();
        let Some(live) = slot.live.as_mut() else {
            return Err(SessionError::Corrupt("no context manager".into()));
        };
        for message in &incoming.messages[start..] {
            live.manager.ingest(message.clone()).await?;
        }
        let prepared = live.manager.prepare().await?;
        let changed = Self::drain(live, outbox);
        slot.hashes.clone_from(&incoming.hashes);
        if changed || prepared.compacted {
            slot.verbatim = false;
        }
        let verbatim = slot.verbatim
            && prepared.budget_notice.is_none()
            && prepared.messages.len() == incoming.messages.len();
        let log = &incoming.messages[common.min(incoming.messages.len())..];
        let log = (start < incoming.messages.len() || diverged).then_some(log);
        let dirty = log.is_some() || prepared.compacted || changed;
        Ok((
            Step {
                prepared,
                verbatim,
                diverged,
            },
            if dirty {
                Some(log.unwrap_or(&[]))
            } else {
                None
            },
        ))
    }

    /// Saves the slot (compare-and-swap), committing `log` to the session log, then appends it.
    /// Messages an earlier save committed but the log never received ride along. `None`
    /// means nothing changed and nothing is saved. See the [module docs](self).
    async fn persist(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
        log: Option<&[Message]>,
    ) -> Result<(), PersistError> {
        let Some(log) = log else {
            self.flush_log(key, slot).await;
            return Ok(());
        };
        self.check_log(key, slot, None).await?;
        let (len, in_log) = slot.log.seen.unwrap_or((0, slot.log.pending.len()));
        let mut pending = slot.log.pending.get(in_log..).unwrap_or_default().to_vec();
        pending.extend_from_slice(log);
        let expected = len + pending.len() as u64;
        if self.store.commits_atomically() {
            // The state and its log entries in one write: nothing is ever owed to the log.
            let state = self.agent_state(slot, &[], expected);
            let committed = self
                .store
                .save_and_append(key, &state, slot.version, &pending)
                .await?;
            let len = committed.appended.map_or(len, |appended| appended.last_seq);
            slot.version = Some(committed.version);
            slot.log = LogCursor {
                pending: Vec::new(),
                expected: Some(len),
                saved_at_ms: state.updated_at_ms,
                seen: Some((len, 0)),
                owner: true,
            };
            return Ok(());
        }
        let state = self.agent_state(slot, &pending, expected);
        let version = self.store.save(key, &state, slot.version).await?;
        slot.version = Some(version);
        slot.log = LogCursor {
            pending,
            expected: Some(expected),
            saved_at_ms: state.updated_at_ms,
            seen: Some((len, 0)),
            owner: true,
        };
        self.flush_log(key, slot).await;
        Ok(())
    }

    fn agent_state(&self, slot: &Slot, pending_log: &[Message], log_len: u64) -> AgentState {
        let (context, meta, summary, compactions, appended) = match slot.state_ref() {
            Some(state) => (
                state.to_messages(),
                state.entries.iter().map(|e| e.meta.clone()).collect(),
                state
                    .summary
                    .as_ref()
                    .and_then(|s| serde_json::to_value(s).ok()),
                state.compactions,
                state.appended,
            ),
            None => (Vec::new(), Vec::new(), None, 0, 0),
        };
        let engine = StoredEngine {
            format: ENGINE_FORMAT.into(),
            meta,
            compactions,
            appended,
            client_hashes: slot.hashes.iter().map(|h| format!("{h:032x}")).collect(),
            learned_window: slot.learned_window,
            verbatim: slot.verbatim,
            log_len: Some(log_len),
            pending_log: pending_log.to_vec(),
        };
        let mut state = AgentState::new();
        state.context = context;
        state.summary = summary;
        state.engine = serde_json::to_value(&engine).unwrap_or(Value::Null);
        state.extensions = slot.extensions.clone();
        state.unknown = slot.unknown.clone();
        if slot.created_at_ms > 0 {
            state.created_at_ms = slot.created_at_ms;
        }
        state
    }

    /// Compacts harder after the upstream said the context is too long (attempt 1, 2, …) and
    /// returns the request to retry with. The size of the failed request is the one the error
    /// stated, else the exact count of what was sent. The window the error stated is
    /// remembered for the session, so later requests compact before they overflow.
    pub async fn recover(
        &self,
        key: &SessionKey,
        incoming: &Incoming,
        tools: &[ToolSpec],
        overflow: &Overflow,
        attempt: u32,
    ) -> Result<Prepared, SessionError> {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        let mut conflicts = 0;
        let mut waiting_since = None;
        loop {
            let mut outbox = Outbox::default();
            // Reconcile first: after a reload (or another request) the context must hold
            // exactly this request's messages before it is compacted.
            let Some((_, log)) = self
                .reconcile(
                    key,
                    &mut slot,
                    incoming,
                    tools,
                    &mut waiting_since,
                    &mut outbox,
                )
                .await?
            else {
                continue;
            };
            if let Some(limit) = overflow.limit.filter(|l| *l > 0) {
                let current = slot.learned_window.unwrap_or(u64::MAX);
                if limit < current {
                    slot.learned_window = Some(limit);
                    self.ensure_live(key, &mut slot, incoming, tools)?;
                }
            }
            let Some(live) = slot.live.as_mut() else {
                return Err(SessionError::Corrupt("no context manager".into()));
            };
            let failed = match overflow.input.or(overflow.requested) {
                Some(stated) => stated,
                // The provider stated no size (OpenAI's Responses API never does): count what
                // was sent exactly. The budget estimate reported with the request can be well
                // above the exact size, and a target derived from it can lie above the context
                // itself, leaving the engine nothing to compact.
                None => {
                    let tokens = live.manager.engine().model();
                    let mut state = live.manager.state().clone();
                    state.sync_tokens(tokens) + u64::from(tokens.tools_tokens(tools))
                }
            };

            let limit = overflow.max_input_tokens().filter(|l| *l > 0);
            let outcome = live.manager.handle_overflow(attempt, failed, limit).await;
            Self::drain(live, &mut outbox);
            slot.verbatim = false;
            let prepared = match outcome {
                Ok(prepared) => prepared,
                Err(err) => {
                    // Nothing to save from a failed recovery beyond what advance did.
                    match self.persist(key, &mut slot, log).await {
                        Ok(()) => self.release(key, outbox),
                        Err(_) => slot.loaded = false,
                    }
                    return Err(err.into());
                }
            };
            let saved = self.persist(key, &mut slot, Some(log.unwrap_or(&[]))).await;
            if self.settle(&mut slot, saved, &mut conflicts)? {
                self.release(key, outbox);
                return Ok(prepared);
            }
        }
    }

    /// Feeds the input tokens the upstream reported for the session's last request.
    pub async fn observe_usage(&self, key: &SessionKey, input_tokens: u64) {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        if let Some(live) = slot.live.as_mut() {
            live.manager.observe_usage(input_tokens);
        }
        self.publish(
            key,
            SessionEvent {
                name: "usage_reported".into(),
                data: json!({"type": "usage_reported", "input_tokens": input_tokens}),
            },
        );
    }

    /// Publishes a gateway event (upstream errors, retries) to the session's subscribers.
    pub fn notify(&self, key: &SessionKey, name: &str, data: Value) {
        self.publish(
            key,
            SessionEvent {
                name: name.to_string(),
                data,
            },
        );
    }

    /// Brings the slot up to the stored session for a reader. Another gateway may have moved
    /// the session on, so it reloads when the stored version is not the one in memory; a
    /// current warm session keeps its manager, and with it the usage calibration its next
    /// request counts with.
    async fn refresh(&self, key: &SessionKey, slot: &mut Slot) -> Result<(), SessionError> {
        let stored = self.store.load(key).await?;
        let version = stored.as_ref().map(|found| found.version);
        if !slot.loaded || slot.version.is_none() || slot.version != version {
            Self::install(slot, stored)?;
        }
        Ok(())
    }

    /// Statistics of a session's context, `None` if it was never saved.
    pub async fn stats(&self, key: &SessionKey) -> Result<Option<ContextStats>, SessionError> {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        self.refresh(key, &mut slot).await?;
        if slot.version.is_none() {
            return Ok(None);
        }
        // A copy: counting caches token totals, and the running manager's state is its own.
        let Some(mut state) = slot.state_ref().cloned() else {
            return Ok(None);
        };
        Ok(Some(ContextStats {
            version: slot.version,
            messages: state.entries.len(),
            client_messages: slot.hashes.len(),
            approx_tokens: state.approx_tokens(),
            compactions: state.compactions,
            appended: state.appended,
            has_summary: state.summary.is_some(),
            archived_refs: state
                .entries
                .iter()
                .map(|e| e.meta.archived.len() + e.meta.result_refs.len())
                .sum(),
            learned_window: slot.learned_window,
            verbatim: slot.verbatim,
            policy_overrides: slot.overrides(),
        }))
    }

    /// Empties a session's context (its log stays); the next request rebuilds it from the
    /// client's messages. Returns false for an unknown session.
    pub async fn clear(&self, key: &SessionKey) -> Result<bool, SessionError> {
        self.update(key, |slot| {
            slot.live = None;
            slot.state = Some(ContextState::default());
            slot.hashes.clear();
            slot.verbatim = true;
            slot.learned_window = None;
            Ok(())
        })
        .await
    }

    /// The session's policy overrides (TOML), `Ok(None)` when there are none, `Err` for an
    /// unknown session.
    pub async fn overrides(
        &self,
        key: &SessionKey,
    ) -> Result<Option<Option<String>>, SessionError> {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        self.refresh(key, &mut slot).await?;
        Ok(slot.version.map(|_| slot.overrides()))
    }

    /// Merges a TOML fragment into the session's policy overrides after checking the result
    /// against the gateway's policy; returns the merged fragment, or `None` for an unknown
    /// session.
    pub async fn patch_overrides(
        &self,
        key: &SessionKey,
        patch: toml::Table,
    ) -> Result<Option<String>, PatchError> {
        let mut merged_text = None;
        let base = self.policy.clone();
        let found = self
            .update(key, |slot| {
                let mut merged: toml::Table = match slot.overrides() {
                    Some(text) => toml::from_str(&text).unwrap_or_default(),
                    None => toml::Table::new(),
                };
                for (k, v) in &patch {
                    merged.insert(k.clone(), v.clone());
                }
                let text = merged.to_string();
                base.with_overrides(&text)
                    .map_err(|e| SessionError::Context(ctxkeeper::Error::Config(e.0)))?;
                slot.extensions
                    .insert(POLICY_OVERRIDES.into(), Value::String(text.clone()));
                merged_text = Some(text);
                Ok(())
            })
            .await
            .map_err(|err| match err {
                SessionError::Context(ctxkeeper::Error::Config(message)) => {
                    PatchError::Invalid(message)
                }
                other => PatchError::Session(other),
            })?;
        Ok(if found { merged_text } else { None })
    }

    /// Applies `change` to a stored session and saves it (compare-and-swap, retried).
    async fn update(
        &self,
        key: &SessionKey,
        mut change: impl FnMut(&mut Slot) -> Result<(), SessionError>,
    ) -> Result<bool, SessionError> {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        let mut conflicts = 0;
        let mut waiting_since = None;
        loop {
            slot.loaded = false;
            self.ensure_loaded(key, &mut slot).await?;
            if slot.version.is_none() {
                return Ok(false);
            }
            if self
                .wait_for_log(key, &mut slot, &mut waiting_since)
                .await?
            {
                continue;
            }
            change(&mut slot)?;
            let saved = self.persist(key, &mut slot, Some(&[])).await;
            if self.settle(&mut slot, saved, &mut conflicts)? {
                return Ok(true);
            }
        }
    }
}

/// Why a policy patch failed.
#[derive(Debug)]
pub enum PatchError {
    /// The merged overrides do not make a valid policy.
    Invalid(String),
    Session(SessionError),
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxkeeper_core::engine::presets;
    use ctxkeeper_core::model::Part;

    async fn sessions(store: Arc<dyn SessionStore>, dir: &std::path::Path) -> Sessions {
        let archive = ctxkeeper_store::open_archive(dir.to_str().unwrap())
            .await
            .unwrap();
        Sessions::new(
            store,
            archive,
            presets::preset("default").unwrap(),
            Profiles::builtin(),
            16,
        )
    }

    fn conversation(rounds: usize) -> Vec<Message> {
        let mut messages = vec![Message::system("be brief"), Message::user("work")];
        for i in 0..rounds {
            let id = format!("c{i}");
            messages.push(Message::assistant_with_calls(
                "",
                vec![Part::tool_call(&id, "read", "{}")],
            ));
            messages.push(Message::tool_result(&id, format!("output {i} ").repeat(20)));
        }
        messages
    }

    #[tokio::test]
    async fn only_new_messages_reach_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        let sessions = sessions(store.clone(), dir.path()).await;
        let key = SessionKey::simple("s").unwrap();
        for rounds in [1, 2, 3] {
            let incoming = Incoming::new(Some("gpt-4o".into()), conversation(rounds), &[]);
            let step = sessions.step(&key, &incoming, &[]).await.unwrap();
            assert!(step.verbatim && !step.diverged);
        }
        let log = store
            .history(&key, ctxkeeper_store::HistoryPage::last(100))
            .await
            .unwrap();
        assert_eq!(log.len(), conversation(3).len(), "each message logged once");
    }

    #[tokio::test]
    async fn reading_stats_keeps_a_warm_session_calibrated() {
        let dir = tempfile::tempdir().unwrap();
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        let sessions = sessions(store, dir.path()).await;
        let key = SessionKey::simple("s").unwrap();
        let incoming = Incoming::new(Some("gpt-4o".into()), conversation(3), &[]);
        sessions.step(&key, &incoming, &[]).await.unwrap();
        // The provider's count, far from any estimate of these few messages.
        sessions.observe_usage(&key, 54_321).await;
        for _ in 0..2 {
            let stats = sessions.stats(&key).await.unwrap().unwrap();
            assert_eq!(
                stats.approx_tokens, 54_321,
                "the reported usage anchors the count"
            );
        }
        // A second process moving the session on is seen: the stats follow the store.
        let other = sessions.store().clone();
        let dir2 = tempfile::tempdir().unwrap();
        let second = self::sessions(other, dir2.path()).await;
        let longer = Incoming::new(Some("gpt-4o".into()), conversation(4), &[]);
        second.step(&key, &longer, &[]).await.unwrap();
        let stats = sessions.stats(&key).await.unwrap().unwrap();
        assert_eq!(stats.client_messages, conversation(4).len());
        assert_ne!(stats.approx_tokens, 54_321);
    }

    #[tokio::test]
    async fn an_edited_turn_rebuilds_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        let sessions = sessions(store, dir.path()).await;
        let key = SessionKey::simple("s").unwrap();
        let mut events = sessions.subscribe(&key);
        let incoming = Incoming::new(Some("gpt-4o".into()), conversation(2), &[]);
        sessions.step(&key, &incoming, &[]).await.unwrap();
        let mut edited = conversation(2);
        edited[1] = Message::user("a different task");
        let step = sessions
            .step(
                &key,
                &Incoming::new(Some("gpt-4o".into()), edited, &[]),
                &[],
            )
            .await
            .unwrap();
        assert!(step.diverged);
        let mut names = Vec::new();
        while let Ok(event) = events.try_recv() {
            names.push(event.name);
        }
        assert!(names.iter().any(|n| n == "history_diverged"), "{names:?}");
    }

    /// A store that fails or delays on demand, in front of a real one.
    #[derive(Debug)]
    struct Flaky {
        inner: Arc<dyn SessionStore>,
        /// Appends still to fail.
        failing_appends: std::sync::atomic::AtomicUsize,
        /// Saves still to answer with a (fake) lost compare-and-swap.
        conflicting_saves: std::sync::atomic::AtomicUsize,
        /// Every append waits this long first.
        append_delay: Duration,
        /// Passes the inner store's atomic save-and-append through (else the store is one
        /// that saves, then appends).
        atomic: bool,
    }

    impl Flaky {
        fn new(inner: Arc<dyn SessionStore>) -> Flaky {
            Flaky {
                inner,
                failing_appends: 0.into(),
                conflicting_saves: 0.into(),
                append_delay: Duration::ZERO,
                atomic: false,
            }
        }

        fn take(counter: &std::sync::atomic::AtomicUsize) -> bool {
            use std::sync::atomic::Ordering::SeqCst;
            counter
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
        }
    }

    #[async_trait::async_trait]
    impl SessionStore for Flaky {
        fn backend(&self) -> &'static str {
            "flaky"
        }
        async fn load(
            &self,
            key: &SessionKey,
        ) -> Result<Option<ctxkeeper_store::Versioned>, StoreError> {
            self.inner.load(key).await
        }
        async fn save(
            &self,
            key: &SessionKey,
            state: &AgentState,
            expected: Option<u64>,
        ) -> Result<u64, StoreError> {
            if Flaky::take(&self.conflicting_saves) {
                return Err(StoreError::Conflict {
                    expected,
                    actual: None,
                });
            }
            self.inner.save(key, state, expected).await
        }
        async fn append(
            &self,
            key: &SessionKey,
            messages: &[Message],
        ) -> Result<ctxkeeper_store::AppendOutcome, StoreError> {
            tokio::time::sleep(self.append_delay).await;
            if Flaky::take(&self.failing_appends) {
                return Err(StoreError::Backend {
                    backend: "flaky",
                    message: "injected".into(),
                });
            }
            self.inner.append(key, messages).await
        }
        fn commits_atomically(&self) -> bool {
            self.atomic && self.inner.commits_atomically()
        }
        async fn save_and_append(
            &self,
            key: &SessionKey,
            state: &AgentState,
            expected: Option<u64>,
            messages: &[Message],
        ) -> Result<ctxkeeper_store::Committed, StoreError> {
            if !self.atomic {
                let version = self.save(key, state, expected).await?;
                let appended = match messages {
                    [] => None,
                    _ => Some(self.append(key, messages).await?),
                };
                return Ok(ctxkeeper_store::Committed { version, appended });
            }
            if Flaky::take(&self.conflicting_saves) {
                return Err(StoreError::Conflict {
                    expected,
                    actual: None,
                });
            }
            self.inner
                .save_and_append(key, state, expected, messages)
                .await
        }
        async fn list(
            &self,
            filter: &ctxkeeper_store::SessionFilter,
        ) -> Result<Vec<ctxkeeper_store::SessionInfo>, StoreError> {
            self.inner.list(filter).await
        }
        async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
            self.inner.delete(key).await
        }
        async fn history(
            &self,
            key: &SessionKey,
            page: HistoryPage,
        ) -> Result<Vec<ctxkeeper_store::LogEntry>, StoreError> {
            self.inner.history(key, page).await
        }
        async fn search(
            &self,
            query: &ctxkeeper_store::SearchQuery,
        ) -> Result<Vec<ctxkeeper_store::SearchHit>, StoreError> {
            self.inner.search(query).await
        }
        async fn purge_before(
            &self,
            tenant: Option<&str>,
            cutoff_ms: i64,
        ) -> Result<u64, StoreError> {
            self.inner.purge_before(tenant, cutoff_ms).await
        }
    }

    async fn log_of(store: &Arc<dyn SessionStore>, key: &SessionKey) -> Vec<Message> {
        store
            .history(key, HistoryPage::last(1000))
            .await
            .unwrap()
            .into_iter()
            .map(|entry| entry.message)
            .collect()
    }

    fn step_of(rounds: usize) -> Incoming {
        Incoming::new(Some("gpt-4o".into()), conversation(rounds), &[])
    }

    #[tokio::test]
    async fn a_failed_log_append_is_carried_by_the_next_save() {
        let dir = tempfile::tempdir().unwrap();
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        let flaky = Flaky::new(store.clone());
        flaky
            .failing_appends
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let sessions = sessions(Arc::new(flaky), dir.path()).await;
        let key = SessionKey::simple("s").unwrap();
        // The save committed the messages; the request goes on although the log is behind.
        sessions.step(&key, &step_of(1), &[]).await.unwrap();
        assert!(log_of(&store, &key).await.is_empty(), "the append failed");
        sessions.step(&key, &step_of(2), &[]).await.unwrap();
        assert_eq!(
            log_of(&store, &key).await,
            conversation(2),
            "every message once, in order"
        );
    }

    #[tokio::test]
    async fn an_atomic_store_gets_each_step_in_one_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        let mut atomic = Flaky::new(store.clone());
        atomic.atomic = true;
        // A separate append would fail: the steps must not need one.
        atomic
            .failing_appends
            .store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
        // And one lost swap, which is redone without logging its messages twice.
        atomic
            .conflicting_saves
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let sessions = sessions(Arc::new(atomic), dir.path()).await;
        let key = SessionKey::simple("s").unwrap();
        for rounds in [1, 2, 3] {
            sessions.step(&key, &step_of(rounds), &[]).await.unwrap();
            assert_eq!(log_of(&store, &key).await, conversation(rounds));
        }
        let engine = store.load(&key).await.unwrap().unwrap().state.engine;
        assert_eq!(engine["log_len"], json!(conversation(3).len()));
        assert!(
            engine.get("pending_log").is_none(),
            "nothing is ever owed to the log: {engine}"
        );
    }

    #[tokio::test]
    async fn a_process_dying_between_save_and_append_loses_no_message() {
        let dir = tempfile::tempdir().unwrap();
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        let key = SessionKey::simple("s").unwrap();
        {
            // Its append never lands: as if it died right after the save.
            let dying = Flaky::new(store.clone());
            dying
                .failing_appends
                .store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
            let dying = sessions(Arc::new(dying), dir.path()).await;
            // Whether its request failed or not, its save committed the messages.
            let _ = dying.step(&key, &step_of(1), &[]).await;
        }
        assert!(log_of(&store, &key).await.is_empty());
        let lease = Duration::from_millis(200);
        let survivor = sessions(store.clone(), dir.path())
            .await
            .with_log_lease(lease);
        let started = Instant::now();
        let step = survivor.step(&key, &step_of(2), &[]).await.unwrap();
        assert!(!step.diverged, "the stored state was continued");
        assert_eq!(log_of(&store, &key).await, conversation(2));
        assert!(
            started.elapsed() >= lease / 2,
            "the survivor gave the saver its lease first"
        );
        // And nothing is appended twice afterwards.
        survivor.step(&key, &step_of(3), &[]).await.unwrap();
        assert_eq!(log_of(&store, &key).await, conversation(3));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_follows_commit_order_across_processes() {
        let dir = tempfile::tempdir().unwrap();
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        let key = SessionKey::simple("s").unwrap();
        let mut slow = Flaky::new(store.clone());
        slow.append_delay = Duration::from_millis(300);
        let first = Arc::new(sessions(Arc::new(slow), dir.path()).await);
        let second = sessions(store.clone(), dir.path()).await;
        let task = {
            let (first, key) = (first.clone(), key.clone());
            tokio::spawn(async move { first.step(&key, &step_of(1), &[]).await.unwrap() })
        };
        // Wait until the first process saved (its append is still sleeping).
        while store.load(&key).await.unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        second.step(&key, &step_of(2), &[]).await.unwrap();
        task.await.unwrap();
        assert_eq!(
            log_of(&store, &key).await,
            conversation(2),
            "the second save's messages come after the first's"
        );
    }

    #[tokio::test]
    async fn a_step_that_lost_its_swap_announces_only_what_it_committed() {
        let dir = tempfile::tempdir().unwrap();
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        let flaky = Arc::new(Flaky::new(store.clone()));
        let sessions = sessions(flaky.clone(), dir.path()).await;
        let key = SessionKey::simple("s").unwrap();
        sessions.step(&key, &step_of(2), &[]).await.unwrap();
        let mut events = sessions.subscribe(&key);
        let mut edited = conversation(2);
        edited[1] = Message::user("a different task");
        flaky
            .conflicting_saves
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let step = sessions
            .step(
                &key,
                &Incoming::new(Some("gpt-4o".into()), edited, &[]),
                &[],
            )
            .await
            .unwrap();
        assert!(step.diverged);
        let mut names = Vec::new();
        while let Ok(event) = events.try_recv() {
            names.push(event.name);
        }
        assert_eq!(
            names.iter().filter(|n| *n == "history_diverged").count(),
            1,
            "the step ran twice and committed once: {names:?}"
        );
        assert_eq!(
            sessions
                .metrics
                .divergences
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }

    #[tokio::test]
    async fn a_second_process_continues_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        let first = sessions(store.clone(), dir.path()).await;
        let second = sessions(store.clone(), dir.path()).await;
        let key = SessionKey::simple("s").unwrap();
        first
            .step(
                &key,
                &Incoming::new(Some("gpt-4o".into()), conversation(1), &[]),
                &[],
            )
            .await
            .unwrap();
        let step = second
            .step(
                &key,
                &Incoming::new(Some("gpt-4o".into()), conversation(2), &[]),
                &[],
            )
            .await
            .unwrap();
        assert!(!step.diverged, "the stored prefix was recognised");
        // The first process's cache is stale now: its save conflicts, it reloads, no loss.
        first
            .step(
                &key,
                &Incoming::new(Some("gpt-4o".into()), conversation(3), &[]),
                &[],
            )
            .await
            .unwrap();
        let log = store
            .history(&key, ctxkeeper_store::HistoryPage::last(100))
            .await
            .unwrap();
        assert_eq!(log.len(), conversation(3).len());
    }
}
