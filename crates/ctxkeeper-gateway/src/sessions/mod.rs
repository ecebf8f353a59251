//! Sessions: the managed context of each conversation, cached in memory and persisted in the
//! shared store.
//!
//! Agents resend their whole history on every call. A session remembers the fingerprints of
//! the client messages it has ingested ([`ctxkeeper::snapshot::message_hash`]); when they are a
//! prefix of a request's messages, only the new messages are ingested into the session's
//! [`ctxkeeper::ContextManager`], so its earlier compaction (summary, placeholders, archive references)
//! is reused and the forwarded prefix stays byte-identical ([`advance`]: forks and replaced
//! newest messages too).
//!
//! A request is a step in two halves: [`Sessions::begin`] brings the context up to the
//! client's messages in memory and prepares the request; [`Sessions::commit`], once the
//! upstream accepted it, saves the session ([`ctxkeeper::snapshot`], the codec every face
//! shares) with the step's new log entries in one compare-and-swapped write and announces the
//! step's events ([`events`]); [`Sessions::abandon`] forgets a step whose call failed. A lost
//! swap (another gateway saved first) reloads the session and redoes the step, so two
//! gateways never commit two compactions of one version and never lose a message. Within a
//! process, a per-session mutex serializes the steps ([`slot`]). The admin API's reads and
//! changes are in [`inspect`].
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

mod advance;
mod client_compaction;
pub mod events;
mod inspect;
mod memory;
mod persist;
mod prepare;
mod slot;
#[cfg(test)]
mod tests;
pub mod timeline;
mod wait;

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use ctxkeeper::Prepared;
use ctxkeeper::snapshot::{PersistError, SnapshotError};
use ctxkeeper_core::engine::PolicyConfig;
use ctxkeeper_core::model::{Message, ToolSpec};
use ctxkeeper_core::overflow::Overflow;
use ctxkeeper_core::tokens::Profiles;
use ctxkeeper_llm::{ExtractiveSummarizer, Summarizer};
use ctxkeeper_store::archive::Offloader;
use ctxkeeper_store::events::{EventBus, LocalEventBus};
use ctxkeeper_store::{SessionKey, SessionStore, StoreError};

use crate::identity::{self, common_prefix};
use crate::metrics::Metrics;
use crate::summarize::{SummarizerChoice, UpstreamRoute, UpstreamSummarizer};
use crate::telemetry::{CacheStallRule, CacheVerdict, UsageReport};
use advance::{Advance, MAX_FORK_DEPTH};
use bytes::Bytes;
use events::{Events, GatewayEvent};
use slot::{Outbox, Pending, Slot, WarmSlots};

pub use events::{SessionEvent, Subscription};
pub use inspect::{ContextStats, PatchError};
pub use prepare::DEFAULT_PREPARE_AT;
pub use slot::DEFAULT_IDLE_TTL;
pub use wait::DEFAULT_SUMMARY_WAIT;

/// The extension key holding a session's policy overrides (a TOML fragment).
pub const POLICY_OVERRIDES: &str = "policy_overrides";
/// How many times a step is redone after losing a compare-and-swap before giving up.
const MAX_CAS_RETRIES: usize = 8;

/// Errors of a session step. Each keeps its cause ([`std::error::Error::source`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum SessionError {
    /// The store failed, or kept losing compare-and-swaps.
    Store(StoreError),
    /// The context manager failed (archive write, policy).
    Context(ctxkeeper::Error),
    /// The stored session cannot be read back: which session, at which version, and why.
    /// `POST /admin/sessions/{id}/rebuild` rebuilds it from its log.
    Unreadable {
        session: String,
        version: u64,
        error: SnapshotError,
    },
    /// Stored session data inconsistent with itself.
    Corrupt(String),
    /// The session's requests kept overflowing; this overflow goes to the client as it is.
    RecoveryRefused { consecutive: u32 },
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::Store(err) => write!(f, "session store: {err}"),
            SessionError::Context(err) => write!(f, "context: {err}"),
            SessionError::Unreadable {
                session,
                version,
                error,
            } => write!(
                f,
                "session {session} (version {version}) cannot be read: {error}; rebuild it from \
                 its log with POST /admin/sessions/{{id}}/rebuild"
            ),
            SessionError::Corrupt(message) => write!(f, "stored session unreadable: {message}"),
            SessionError::RecoveryRefused { consecutive } => write!(
                f,
                "{consecutive} consecutive requests overflowed the context window; not \
                 recovering again (is the model's window configured?)"
            ),
        }
    }
}

impl SessionError {
    /// What a client may be told: the kind of failure, without the store's or the
    /// workspace's paths and messages (those go to the log).
    pub fn public(&self) -> String {
        match self {
            SessionError::Store(_) => {
                "the session store failed; the gateway's log has the details".into()
            }
            SessionError::Context(_) => "the context could not be updated (archive or policy); \
                                         the gateway's log has the details"
                .into(),
            // The snapshot's own error names the format it found (`ctxkeeper/99`) and the
            // one this build reads: no paths, and what an operator needs to decide.
            SessionError::Unreadable { version, error, .. } => format!(
                "the stored session (version {version}) cannot be read: {error}; rebuild it \
                 from its log with POST /admin/sessions/{{id}}/rebuild"
            ),
            SessionError::Corrupt(_) => "the stored session is unreadable".into(),
            SessionError::RecoveryRefused { .. } => self.to_string(),
        }
    }
}

impl std::error::Error for SessionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SessionError::Store(err) => Some(err),
            SessionError::Context(err) => Some(err),
            SessionError::Unreadable { error, .. } => Some(error),
            _ => None,
        }
    }
}

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

impl From<PersistError> for SessionError {
    fn from(err: PersistError) -> SessionError {
        match err {
            PersistError::Store(err) => SessionError::Store(err),
            PersistError::Unreadable {
                session,
                version,
                error,
            } => SessionError::Unreadable {
                session,
                version,
                error,
            },
            other => SessionError::Corrupt(other.to_string()),
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
    /// The output budget the request asks for (`max_tokens`, `max_output_tokens`,
    /// `max_completion_tokens`): providers refuse input + output over the window, so the
    /// context is budgeted to the window minus this.
    pub requested_output: Option<u64>,
    /// The context window the request asks for itself (Anthropic's `context-1m-…` beta):
    /// the session's window is never narrower than this, whatever the model table says.
    pub requested_window: Option<u64>,
    /// The client asked (`x-ctxkeeper-pin: latest`) to pin the newest user message of this
    /// request, when it is new to the session.
    pub pin_latest_user: bool,
    /// What the summarizer should keep in view if this request's preparation compacts
    /// (`x-ctxkeeper-focus`).
    pub focus: Option<String>,
    /// How this request reaches its upstream (for summaries written there).
    pub route: Option<Arc<UpstreamRoute>>,
    /// What repairing the client's history changed (`[gateway] repair`), by kind.
    pub repairs: Option<std::collections::BTreeMap<String, usize>>,
    /// The body forwarded for this step, kept for the next summary call's cached prefix.
    pub forwarded: Option<Bytes>,
    /// The host forwards the client's own request when the step is verbatim, so such a step
    /// leaves [`Prepared::messages`] empty instead of copying the context out.
    pub forwards_verbatim: bool,
}

impl Incoming {
    /// Fingerprints a request's messages and tools.
    pub fn new(model: Option<String>, messages: Vec<Message>, tools: &[ToolSpec]) -> Incoming {
        let mut fingerprints = identity::Fingerprinter::default();
        let hashes = messages.iter().map(|m| fingerprints.message(m)).collect();
        Incoming::fingerprinted(model, messages, hashes, tools)
    }

    /// A request's conversation whose fingerprints were already taken (`hashes[i]` is
    /// [`identity::message_hash`] of `messages[i]`, as [`identity::FingerprintMemo`] gives).
    pub fn fingerprinted(
        model: Option<String>,
        messages: Vec<Message>,
        hashes: Vec<u128>,
        tools: &[ToolSpec],
    ) -> Incoming {
        debug_assert_eq!(messages.len(), hashes.len());
        Incoming {
            model,
            messages,
            hashes,
            tools_hash: identity::tools_hash(tools),
            requested_output: None,
            requested_window: None,
            pin_latest_user: false,
            focus: None,
            route: None,
            repairs: None,
            forwarded: None,
            forwards_verbatim: false,
        }
    }

    /// Says that the host forwards the client's own request when the step is verbatim (see
    /// [`Incoming::forwards_verbatim`]).
    pub fn with_forwards_verbatim(mut self, forwards: bool) -> Incoming {
        self.forwards_verbatim = forwards;
        self
    }

    /// Pins the newest user message of the request (see [`Incoming::pin_latest_user`]).
    pub fn with_pin_latest_user(mut self, pin: bool) -> Incoming {
        self.pin_latest_user = pin;
        self
    }

    /// Gives the summarizer a focus for this request (see [`Incoming::focus`]).
    pub fn with_focus(mut self, focus: Option<String>) -> Incoming {
        self.focus = focus;
        self
    }

    /// Names how the request reaches its upstream (see [`Incoming::route`]).
    pub fn with_route(mut self, route: Option<Arc<UpstreamRoute>>) -> Incoming {
        self.route = route;
        self
    }

    /// States the context window the request asks for (see [`Incoming::requested_window`]).
    pub fn with_requested_window(mut self, tokens: Option<u64>) -> Incoming {
        self.requested_window = tokens.filter(|t| *t > 0);
        self
    }

    /// States the request's output budget.
    pub fn with_requested_output(mut self, tokens: Option<u64>) -> Incoming {
        self.requested_output = tokens.filter(|t| *t > 0);
        self
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
    /// Names this step to [`Sessions::commit`] and [`Sessions::abandon`].
    pub ticket: Ticket,
    /// The session the step belongs to: the one asked for, or the fork a conversation that
    /// diverged from it early took ([`identity::fork_session`]).
    pub key: SessionKey,
}

/// Consecutive requests of a session that may overflow and be recovered before the next
/// overflow is passed to the client: past it, recovering again would only loop.
pub const DEFAULT_MAX_CONSECUTIVE_RECOVERIES: u32 = 3;

/// A step prepared by [`Sessions::begin`] and not yet committed. Only the newest step of a
/// session can commit: a later one carries its messages too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64);

/// Every session this process serves.
#[derive(Debug)]
pub struct Sessions {
    store: Arc<dyn SessionStore>,
    offloader: Arc<dyn Offloader>,
    summarizer: Arc<dyn Summarizer>,
    /// Long-term memory every session flushes to ([`memory`]).
    memory: Option<Arc<ctxkeeper_store::memory::LongTermMemory>>,
    policy: PolicyConfig,
    profiles: Profiles,
    capacity: usize,
    slots: StdMutex<WarmSlots>,
    events: Events,
    idle_ttl: Duration,
    max_consecutive_recoveries: u32,
    metrics: Arc<Metrics>,
    /// Summaries are asked of each request's own upstream (`Some`, with the model that
    /// replaces the request's, if any); `self.summarizer` then serves only requests without
    /// a route.
    upstream_summaries: Option<Option<String>>,
    /// The share of the trigger past which a summary is prepared in the background
    /// ([`Sessions::with_summary_preparation`]).
    prepare_at: Option<f64>,
    /// How long a request waits for a model's summary ([`Sessions::with_summary_wait`]).
    summary_wait: Duration,
    /// Model windows stated by a provider's model list ([`Sessions::learn_model_list`]),
    /// by lowercase model id.
    listed_windows: StdMutex<HashMap<String, u64>>,
    /// When a session's prompt cache counts as stalled ([`Sessions::with_cache_stall`]).
    cache_stall: CacheStallRule,
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
            memory: None,
            policy,
            profiles,
            capacity: capacity.max(1),
            slots: StdMutex::new(WarmSlots {
                map: HashMap::new(),
                swept: Instant::now(),
            }),
            events: Events::new(Arc::new(LocalEventBus::new()), Arc::new(Metrics::default())),
            idle_ttl: DEFAULT_IDLE_TTL,
            max_consecutive_recoveries: DEFAULT_MAX_CONSECUTIVE_RECOVERIES,
            metrics: Arc::new(Metrics::default()),
            upstream_summaries: None,
            prepare_at: Some(prepare::DEFAULT_PREPARE_AT),
            summary_wait: wait::DEFAULT_SUMMARY_WAIT,
            listed_windows: StdMutex::new(HashMap::new()),
            cache_stall: CacheStallRule::default(),
        }
    }

    /// Sessions over a store and an archive with the policy, the token profiles and the
    /// warm-session capacity a gateway's configuration names (the other settings are applied
    /// by [`Gateway::open`](crate::Gateway::open), or by the caller).
    pub fn for_gateway(
        store: Arc<dyn SessionStore>,
        offloader: Arc<dyn Offloader>,
        config: &crate::GatewayConfig,
    ) -> Sessions {
        let (policy, profiles) = (config.policy.clone(), config.profiles.clone());
        Sessions::new(store, offloader, policy, profiles, config.session_cache)
    }

    /// Raises `cache_stalled` (an event, `ctxkeeper_cache_stalls_total`) for a session whose
    /// provider stops serving its prompt from cache, as `rule` says (default
    /// [`CacheStallRule::default`]).
    pub fn with_cache_stall(mut self, rule: CacheStallRule) -> Sessions {
        self.cache_stall = rule;
        self
    }

    /// Drops a warm session from memory once it has been idle this long (default
    /// [`DEFAULT_IDLE_TTL`]); it reloads from the store on its next request.
    pub fn with_idle_ttl(mut self, idle: Duration) -> Sessions {
        self.idle_ttl = idle;
        self
    }

    /// Passes a context overflow to the client, instead of recovering, once this many
    /// consecutive requests of a session overflowed (default
    /// [`DEFAULT_MAX_CONSECUTIVE_RECOVERIES`]).
    pub fn with_max_consecutive_recoveries(mut self, n: u32) -> Sessions {
        self.max_consecutive_recoveries = n;
        self
    }

    /// Records into these metrics instead of a private set.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Sessions {
        self.metrics = metrics.clone();
        self.events = Events::new(self.events.bus.clone(), metrics);
        self
    }

    /// Publishes and subscribes events through `bus` (the store's pub/sub, so subscribers
    /// on every replica see every step) instead of a bus of this process only.
    pub fn with_event_bus(mut self, bus: Arc<dyn EventBus>) -> Sessions {
        self.events = Events::new(bus, self.metrics.clone());
        self
    }

    /// Summarizes with this summarizer instead of the extractive one.
    pub fn with_summarizer(mut self, summarizer: Arc<dyn Summarizer>) -> Sessions {
        self.summarizer = summarizer;
        self.upstream_summaries = None;
        self
    }

    /// Summarizes as `choice` says: on each request's own upstream, or with a fixed
    /// summarizer. A model summary costs a call, which a cost rule weighs (at the cache-read
    /// price of the context it reads, since the call shares the conversation's cached prefix).
    pub fn with_summarizer_choice(mut self, choice: SummarizerChoice) -> Sessions {
        match choice {
            SummarizerChoice::Upstream { model } => {
                self.upstream_summaries = Some(model);
                if let Some(cost) = self.policy.cost.as_mut()
                    && cost.summary_call == 0.0
                {
                    cost.summary_call = cost.cache_read;
                }
            }
            SummarizerChoice::Fixed(summarizer) => {
                self = self.with_summarizer(summarizer);
            }
        }
        self
    }

    /// The summarizer of a step that reaches the upstream by `route`.
    pub(super) fn step_summarizer(
        &self,
        route: Option<&Arc<UpstreamRoute>>,
        prefix: Option<Bytes>,
    ) -> Arc<dyn Summarizer> {
        match (&self.upstream_summaries, route) {
            (Some(model), Some(route)) => self.with_fact_finder(Arc::new(UpstreamSummarizer::new(
                route.clone(),
                prefix,
                model.clone(),
            ))),
            _ => self.summarizer.clone(),
        }
    }

    /// Whether summaries are asked of each request's upstream.
    pub fn summarizes_upstream(&self) -> bool {
        self.upstream_summaries.is_some()
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

    /// Ingests what is new in `incoming`, prepares the request and persists the session at
    /// once: [`Self::begin`] then [`Self::commit`], for hosts that commit before the model
    /// call is known to succeed.
    pub async fn step(
        &self,
        key: &SessionKey,
        incoming: &Incoming,
        tools: &[ToolSpec],
    ) -> Result<Step, SessionError> {
        let step = self.begin(key, incoming, tools).await?;
        self.commit(&step.key, incoming, tools, step.ticket).await?;
        let answered = Answered {
            route: incoming.route.clone(),
            ..Answered::default()
        };
        self.answered(&step.key, answered).await;
        Ok(step)
    }

    /// Ingests what is new in `incoming` and prepares the request, in memory only. Nothing
    /// is stored, logged or announced until [`Self::commit`]: a model call that fails is
    /// [abandoned](Self::abandon), and the log never shows a step the model never answered.
    pub async fn begin(
        &self,
        key: &SessionKey,
        incoming: &Incoming,
        tools: &[ToolSpec],
    ) -> Result<Step, SessionError> {
        let mut key = key.clone();
        let mut parent: Option<SessionKey> = None;
        for depth in 0..=MAX_FORK_DEPTH {
            let slot = self.slot(&key);
            let mut slot = slot.lock().await;
            let mut outbox = Outbox::default();
            if let Some(repairs) = &incoming.repairs {
                outbox.announce(&GatewayEvent::HistoryRepaired {
                    repairs: repairs.clone(),
                });
            }
            let advanced = self
                .reconcile(
                    &key,
                    &mut slot,
                    incoming,
                    tools,
                    &mut outbox,
                    depth < MAX_FORK_DEPTH,
                )
                .await?;
            match advanced {
                Advance::Fork(fork) => {
                    tracing::debug!(session = %key, fork = %fork, "conversation departed early: forked");
                    parent = Some(key);
                    key = fork;
                }
                Advance::Step(mut step) => {
                    if let Some(parent) = parent.as_ref().filter(|_| slot.version.is_none()) {
                        outbox.forks += 1;
                        outbox.announce(&GatewayEvent::SessionForked {
                            parent: parent.session().to_string(),
                            session: key.session().to_string(),
                        });
                    }
                    step.ticket = Self::hold(&mut slot, outbox);
                    step.key = key;
                    return Ok(step);
                }
            }
        }
        // The last depth allows no fork, so it always ends in a step.
        Err(SessionError::Corrupt("fork depth exceeded".into()))
    }

    /// Makes the slot's in-memory state the newest step's, holding what it will announce.
    /// An uncommitted older step is superseded: its changes are part of this state, so what
    /// it would have announced is announced with this step's commit.
    fn hold(slot: &mut Slot, mut outbox: Outbox) -> Ticket {
        if let Some(older) = slot.pending.take() {
            outbox.absorb(older.outbox);
        }
        slot.generation += 1;
        slot.pending = Some(Pending {
            generation: slot.generation,
            outbox,
        });
        Ticket(slot.generation)
    }

    /// Commits the step `ticket` names, once its model call succeeded: the state with the
    /// client messages the log has not seen, in one compare-and-swapped write; then its
    /// events. A step that a newer one of the same session superseded commits nothing (the
    /// newer one carries its messages). A lost swap reloads, brings the stored state up to
    /// `incoming` and tries again within the retry budget.
    ///
    /// Returns the compaction events the commit announced (what a trace's compaction spans
    /// are made of, [`crate::telemetry::RequestTrace::compactions`]).
    pub async fn commit(
        &self,
        key: &SessionKey,
        incoming: &Incoming,
        tools: &[ToolSpec],
        ticket: Ticket,
    ) -> Result<Vec<SessionEvent>, SessionError> {
        let cell = self.slot(key);
        let mut slot = cell.lock().await;
        let Some(pending) = slot
            .pending
            .take_if(|pending| pending.generation == ticket.0)
        else {
            return Ok(Vec::new());
        };
        let mut outbox = pending.outbox;
        let mut conflicts = 0;
        loop {
            let start = common_prefix(&slot.stored_hashes, &incoming.hashes);
            let saved = if slot.unsaved {
                let model = slot.live.as_ref().map(|live| live.model.clone());
                let (events, at) = (&outbox.events, now_ms());
                let slot = &mut *slot;
                crate::sessions::timeline::record_step(
                    &mut slot.extensions,
                    &mut slot.journal,
                    events,
                    model.as_deref(),
                    at,
                );
                let log = incoming.messages.get(start..).unwrap_or_default();
                self.persist(key, slot, log).await
            } else {
                Ok(())
            };
            if self.settle(&mut slot, saved, &mut conflicts)? {
                let slot = &mut *slot;
                if !outbox.overflowed {
                    slot.overflow_streak = 0;
                }
                slot.unsaved = false;
                slot.stored_hashes.clone_from(&slot.client.hashes);
                slot.last_forwarded.clone_from(&incoming.forwarded);
                return Ok(self.release(key, outbox));
            }
            // Another writer moved the session on: redo the step on what it stored. Only
            // what the redone step does is announced, and the fork that created this session
            // as long as the session still does not exist.
            let overflowed = outbox.overflowed;
            let forked: Vec<SessionEvent> = outbox
                .events
                .drain(..)
                .filter(|e| e.name == "session_forked")
                .collect();
            let forks = outbox.forks;
            let mut redo = Outbox {
                overflowed,
                ..Outbox::default()
            };
            self.reconcile(key, &mut slot, incoming, tools, &mut redo, false)
                .await?;
            if slot.version.is_none() {
                redo.forks = forks;
                redo.events.splice(0..0, forked);
            }
            outbox = redo;
        }
    }

    /// Forgets the step `ticket` names after its model call failed: the session goes back
    /// to what is stored (a window the upstream stated is kept). Nothing of the step reaches
    /// the store, the log or the subscribers.
    pub async fn abandon(&self, key: &SessionKey, ticket: Ticket) {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        if slot
            .pending
            .take_if(|pending| pending.generation == ticket.0)
            .is_some()
        {
            slot.loaded = false;
            Metrics::add(&self.metrics.steps_abandoned, 1);
        }
    }

    /// Compacts harder after the upstream said the context is too long (attempt 1, 2, …) and
    /// returns the request to retry with; `ticket` then names the recovered step (commit or
    /// abandon it as any step).
    ///
    /// What the overflow teaches is kept for the session, so later requests compact before
    /// they overflow: the window the error stated, else (OpenAI's Responses API states none)
    /// a window just below the failed request's own size, which it cannot exceed. A session
    /// whose requests keep overflowing is not recovered again past
    /// [`Self::with_max_consecutive_recoveries`]: the error goes to the client.
    #[allow(clippy::too_many_arguments)]
    pub async fn recover(
        &self,
        key: &SessionKey,
        incoming: &Incoming,
        tools: &[ToolSpec],
        overflow: &Overflow,
        attempt: u32,
        ticket: &mut Ticket,
    ) -> Result<Prepared, SessionError> {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        // What the step being recovered will announce, when the slot still holds it.
        let mut outbox = slot
            .pending
            .take_if(|pending| pending.generation == ticket.0)
            .map(|pending| pending.outbox)
            .unwrap_or_default();
        if !outbox.overflowed {
            // The first overflow of this request.
            outbox.overflowed = true;
            slot.overflow_streak += 1;
            if slot.overflow_streak > 1 {
                Metrics::add(&self.metrics.repeated_overflows, 1);
                tracing::warn!(session = %key, streak = slot.overflow_streak, "context overflow again on the next request");
                outbox.announce(&GatewayEvent::OverflowRepeated {
                    consecutive: slot.overflow_streak,
                });
            }
            if slot.overflow_streak > self.max_consecutive_recoveries {
                Metrics::add(&self.metrics.recoveries_refused, 1);
                tracing::warn!(
                    session = %key,
                    streak = slot.overflow_streak,
                    "requests of this session keep overflowing: passing the error to the client"
                );
                *ticket = Self::hold(&mut slot, outbox);
                return Err(SessionError::RecoveryRefused {
                    consecutive: slot.overflow_streak,
                });
            }
        }
        // Reconcile first: after a reload (or another request) the context must hold
        // exactly this request's messages before it is compacted.
        self.reconcile(key, &mut slot, incoming, tools, &mut outbox, false)
            .await?;
        let failed = {
            let Some(live) = slot.live.as_mut() else {
                return Err(SessionError::Corrupt("no context manager".into()));
            };
            match overflow.input.or(overflow.requested) {
                Some(stated) => stated,
                // The provider stated no size (OpenAI's Responses API never does): count
                // what was sent exactly. The budget estimate reported with the request can be
                // well above the exact size, and a target derived from it can lie above the
                // context itself, leaving the engine nothing to compact.
                None => {
                    let tokens = live.manager.engine().model();
                    let mut state = live.manager.state().clone();
                    state.sync_tokens(tokens) + u64::from(tokens.tools_tokens(tools))
                }
            }
        };
        let learned = match overflow.limit.filter(|l| *l > 0) {
            Some(stated) => stated,
            // Without a stated window, the failed request's own size (with the output it
            // asked for) is an upper bound; a margin below it makes each further overflow
            // shrink the window, so learning converges.
            None => {
                let total = failed + incoming.requested_output.unwrap_or(0);
                total - total / 20
            }
        };
        if learned < slot.client.learned_window.unwrap_or(u64::MAX) {
            tracing::info!(session = %key, window = learned, stated = overflow.limit.is_some(), "learned the session's context window");
            slot.client.learned_window = Some(learned);
            self.ensure_live(key, &mut slot, incoming, tools)?;
        }
        let Some(live) = slot.live.as_mut() else {
            return Err(SessionError::Corrupt("no context manager".into()));
        };
        let limit = overflow
            .max_input_tokens()
            .filter(|l| *l > 0)
            .or_else(|| Some(input_window(learned, incoming.requested_output)));
        // The request that overflowed cannot be the summary call's prefix: it is too long.
        let summarizer = self.waited(self.step_summarizer(incoming.route.as_ref(), None));
        let outcome = live
            .manager
            .handle_overflow_with(summarizer.as_ref(), attempt, failed, limit)
            .await;
        Self::drain(live, &mut outbox);
        slot.client.verbatim = false;
        slot.unsaved = true;
        *ticket = Self::hold(&mut slot, outbox);
        Ok(outcome?)
    }

    /// Learns the context windows a provider's model list states (`GET /v1/models` on its
    /// way to a client; see [`LISTED_WINDOW_FIELDS`]): a model the table knows only by a
    /// prefix, or not at all (a local vLLM model), is then given the window its provider
    /// states. Returns how many models the list taught.
    pub fn learn_model_list(&self, list: &serde_json::Value) -> usize {
        let Some(entries) = list.get("data").and_then(serde_json::Value::as_array) else {
            return 0;
        };
        let mut listed = self
            .listed_windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut learned = 0;
        for (id, window) in entries.iter().filter_map(listed_window) {
            if listed.len() >= MAX_LISTED_MODELS && !listed.contains_key(&id) {
                break;
            }
            listed.insert(id, window);
            learned += 1;
        }
        learned
    }

    /// The window a provider's model list stated for `model`, if it did.
    pub(super) fn listed_window(&self, model: &str) -> Option<u64> {
        self.listed_windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&model.trim().to_ascii_lowercase())
            .copied()
    }

    /// Feeds the input tokens the upstream reported for the session's last request.
    pub async fn observe_usage(&self, key: &SessionKey, input_tokens: u64) {
        let answered = Answered {
            input_tokens: Some(input_tokens),
            ..Answered::default()
        };
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        self.observe(key, &mut slot, &answered);
    }

    /// After the upstream's answer to a committed step has reached the client (a whole body,
    /// or the end of a stream): the usage it reported calibrates the session's counts, and
    /// the next compaction's summary is prepared when it is due and the answer did not end
    /// the agent's turn ([`Self::with_summary_preparation`]).
    ///
    /// Returns whether the session's prompt cache is stalled after this answer
    /// ([`Sessions::with_cache_stall`]).
    pub async fn answered(&self, key: &SessionKey, answered: Answered) -> bool {
        let cell = self.slot(key);
        let mut slot = cell.lock().await;
        self.observe(key, &mut slot, &answered);
        let stalled = self.watch_cache(key, &mut slot, answered.usage.as_ref());
        self.prepare_ahead(&mut slot, answered.route.as_ref(), answered.ends_turn);
        stalled
    }

    /// Feeds an answer's usage to the session's cache-stall streak; announces the stall
    /// when this answer made it.
    fn watch_cache(&self, key: &SessionKey, slot: &mut Slot, usage: Option<&UsageReport>) -> bool {
        let Some(usage) = usage else {
            return false;
        };
        match self.cache_stall.observe(&mut slot.cache_streak, usage) {
            CacheVerdict::Fine => false,
            CacheVerdict::StillStalled => true,
            CacheVerdict::Stalled => {
                Metrics::add(&self.metrics.cache_stalls, 1);
                let streak = slot.cache_streak;
                tracing::info!(session = %key, calls = streak.misses, fresh_tokens = streak.fresh_tokens, "prompt cache stalled");
                let event = GatewayEvent::CacheStalled {
                    calls: streak.misses,
                    fresh_input_tokens: streak.fresh_tokens,
                    min_fresh_tokens: self.cache_stall.min_fresh_tokens,
                };
                self.publish(key, event.to_session_event());
                true
            }
        }
    }

    fn observe(&self, key: &SessionKey, slot: &mut Slot, answered: &Answered) {
        let Some(input_tokens) = answered.input_tokens else {
            return;
        };
        if let Some(live) = slot.live.as_mut() {
            live.manager.observe_usage(input_tokens);
        }
        self.publish(
            key,
            GatewayEvent::UsageReported { input_tokens }.to_session_event(),
        );
    }
}

/// How the upstream's answer to a step ended ([`Sessions::answered`]).
#[derive(Debug, Clone, Default)]
pub struct Answered {
    /// The input tokens the upstream reported, when it did.
    pub input_tokens: Option<u64>,
    /// The answer ended the agent's turn: text without a tool call, to a request that offered
    /// tools.
    pub ends_turn: bool,
    /// How the request reached its upstream (a summary prepared now goes the same way).
    pub route: Option<Arc<UpstreamRoute>>,
    /// Everything the answer reported about its usage (the cache-stall alarm reads it).
    pub usage: Option<UsageReport>,
}

/// Most model windows a provider's model list may teach: a real list is far shorter, and a
/// hostile upstream cannot make the gateway hold more.
const MAX_LISTED_MODELS: usize = 4_096;

/// The fields a model list entry states its window in: OpenRouter's and Together's
/// `context_length`, vLLM's `max_model_len`, LM Studio's `max_context_length`, and the
/// `context_window` / `max_input_tokens` some providers use.
const LISTED_WINDOW_FIELDS: [&str; 5] = [
    "context_length",
    "max_model_len",
    "max_context_length",
    "context_window",
    "max_input_tokens",
];

/// The window one model list entry states (its own field, or OpenRouter's
/// `top_provider.context_length`), with its id.
fn listed_window(entry: &serde_json::Value) -> Option<(String, u64)> {
    let id = entry.get("id")?.as_str()?.trim().to_ascii_lowercase();
    let window = LISTED_WINDOW_FIELDS
        .iter()
        .find_map(|field| entry.get(*field).and_then(serde_json::Value::as_u64))
        .or_else(|| {
            entry
                .pointer("/top_provider/context_length")
                .and_then(serde_json::Value::as_u64)
        })
        .filter(|window| (256..=100_000_000).contains(window))?;
    (!id.is_empty()).then_some((id, window))
}

/// The tokens the context may take in a window of `window` when the request asks for
/// `output` tokens of answer (providers count both against the window). The output budget is
/// capped at three quarters of the window, so an outsized `max_tokens` cannot leave the
/// context no room at all (the provider then refuses it, as it would without the gateway).
fn input_window(window: u64, output: Option<u64>) -> u64 {
    let output = output.unwrap_or(0).min(window / 4 * 3);
    window - output
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
