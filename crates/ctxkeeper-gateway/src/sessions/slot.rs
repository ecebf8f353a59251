//! One session in memory: its context (in a running manager, or as loaded), what it knows
//! of its client, and the uncommitted step it belongs to; and the map of warm sessions.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxkeeper::snapshot::{ClientRecord, Snapshot, SnapshotRef, StoredShape};
use ctxkeeper::{ContextManager, Settings};
use ctxkeeper_core::engine::{ContextState, Event};
use ctxkeeper_core::model::ToolSpec;
use ctxkeeper_core::tokens::TokenModel;
use ctxkeeper_store::{AgentState, ContextWrite, SessionKey};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, broadcast};

use super::events::{GatewayEvent, SessionEvent};
use super::{Incoming, POLICY_OVERRIDES, SessionError, Sessions, input_window, now_ms};
use crate::metrics::Metrics;

/// The step a slot's in-memory state belongs to while it is not committed.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) generation: u64,
    pub(super) outbox: Outbox,
}

/// What a step did that is announced only once its save committed.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    pub(super) events: Vec<SessionEvent>,
    pub(super) compactions: u64,
    pub(super) tokens_saved: u64,
    pub(super) overflow_recoveries: u64,
    pub(super) divergences: u64,
    pub(super) forks: u64,
    /// The client's own compactions the session continued through.
    pub(super) client_compactions: u64,
    pub(super) summaries_failed: u64,
    pub(super) summaries_degraded: u64,
    /// The step met a context overflow.
    pub(super) overflowed: bool,
}

impl Outbox {
    /// Adds a gateway event to what the step announces.
    pub(super) fn announce(&mut self, event: &GatewayEvent) {
        self.events.push(event.to_session_event());
    }

    /// Takes over what an older step would have announced (its events first).
    pub(super) fn absorb(&mut self, older: Outbox) {
        let mut events = older.events;
        events.append(&mut self.events);
        self.events = events;
        self.compactions += older.compactions;
        self.tokens_saved += older.tokens_saved;
        self.overflow_recoveries += older.overflow_recoveries;
        self.divergences += older.divergences;
        self.forks += older.forks;
        self.client_compactions += older.client_compactions;
        self.summaries_failed += older.summaries_failed;
        self.summaries_degraded += older.summaries_degraded;
        self.overflowed |= older.overflowed;
    }
}

/// A running context manager and the settings it was built with.
#[derive(Debug)]
pub(super) struct Live {
    pub(super) manager: ContextManager,
    pub(super) events: broadcast::Receiver<Event>,
    pub(super) model: String,
    pub(super) window: u64,
    pub(super) tools_hash: u128,
    pub(super) overrides: Option<String>,
}

/// One session in memory.
#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) loaded: bool,
    pub(super) version: Option<u64>,
    pub(super) created_at_ms: i64,
    pub(super) extensions: BTreeMap<String, Value>,
    /// The records the gateway appends as steps commit (the console's timeline): those of
    /// the stored generation, then the ones not yet saved. Bounded when a new generation is
    /// written ([`crate::sessions::timeline::bound`]).
    pub(super) journal: Vec<Value>,
    pub(super) unknown: Map<String, Value>,
    /// Engine-record fields this build does not know, kept for the next save.
    pub(super) engine_unknown: Map<String, Value>,
    /// What this session knows of its client: fingerprints of the messages ingested,
    /// whether the context is exactly them, the window an overflow taught.
    pub(super) client: ClientRecord,
    /// The context while no manager runs (after a load, before the first step).
    pub(super) state: Option<ContextState>,
    pub(super) live: Option<Live>,
    /// The client fingerprints of the stored state (`hashes` runs ahead between a step and
    /// its commit): the log of a commit is what the client sent beyond them.
    pub(super) stored_hashes: Vec<u128>,
    /// What the store's current generation holds of this session, when this slot knows it
    /// (read from it, or saved it): the base a save that only appended continues.
    pub(super) stored_shape: Option<StoredShape>,
    /// The in-memory context differs from the stored one.
    pub(super) unsaved: bool,
    /// Counts steps; the newest step's ticket.
    pub(super) generation: u64,
    /// The uncommitted step the in-memory state belongs to.
    pub(super) pending: Option<Pending>,
    /// Consecutive committed or abandoned requests that met a context overflow.
    pub(super) overflow_streak: u32,
    /// The body of the last forwarded request, when the gateway summarizes upstream: the
    /// next summary call repeats it, so the provider serves it from its prompt cache.
    pub(super) last_forwarded: Option<bytes::Bytes>,
    /// A summary prepared (or being prepared) by a manager that was dropped to be rebuilt
    /// around the same context: the next manager takes it over.
    pub(super) preparations: ctxkeeper::Preparations,
    /// The summary being prepared in the background, delivered here when it is written: the
    /// session's next step takes it over, or waits for it when that step compacts.
    pub(super) preparation: Option<tokio::sync::oneshot::Receiver<ctxkeeper::PreparedSummary>>,
    /// Steps to wait before preparing a summary again, after prepared summaries failed.
    pub(super) prepare_backoff: super::prepare::Backoff,
    /// The session's run of calls without prompt-cache reads (the cache-stall alarm).
    pub(super) cache_streak: crate::telemetry::CacheStreak,
}

impl Slot {
    pub(super) fn overrides(&self) -> Option<String> {
        self.extensions
            .get(POLICY_OVERRIDES)
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    pub(super) fn take_state(&mut self) -> ContextState {
        match (self.live.take(), self.state.take()) {
            (Some(mut live), _) => {
                self.preparations = live.manager.take_preparations();
                live.manager.state().clone()
            }
            (None, Some(state)) => state,
            (None, None) => ContextState::default(),
        }
    }

    pub(super) fn state_ref(&self) -> Option<&ContextState> {
        match &self.live {
            Some(live) => Some(live.manager.state()),
            None => self.state.as_ref(),
        }
    }
}

/// How long a warm session may sit idle in memory by default.
pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(30 * 60);
/// How often looking up a new session also sweeps out idle ones.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The sessions held in memory.
#[derive(Debug)]
pub(super) struct WarmSlots {
    pub(super) map: HashMap<SessionKey, WarmSlot>,
    /// When idle sessions were last swept out.
    pub(super) swept: Instant,
}

#[derive(Debug)]
pub(super) struct WarmSlot {
    pub(super) slot: Arc<Mutex<Slot>>,
    pub(super) used: Instant,
}

impl WarmSlot {
    /// Whether forgetting the slot loses nothing: no request holds it and no step waits to
    /// commit from it.
    fn evictable(&self) -> bool {
        Arc::strong_count(&self.slot) == 1
            && self
                .slot
                .try_lock()
                .is_ok_and(|slot| slot.pending.is_none())
    }
}

impl Sessions {
    pub(super) fn slot(&self, key: &SessionKey) -> Arc<Mutex<Slot>> {
        let Ok(mut warm) = self.slots.lock() else {
            // A poisoned map only means a panic elsewhere; a fresh slot is still correct
            // (the store is the source of truth), merely not cached.
            return Arc::new(Mutex::new(Slot::default()));
        };
        let now = Instant::now();
        if let Some(found) = warm.map.get_mut(key) {
            found.used = now;
            return found.slot.clone();
        }
        let before = warm.map.len();
        if now.duration_since(warm.swept) >= SWEEP_EVERY {
            warm.swept = now;
            let idle = self.idle_ttl;
            warm.map
                .retain(|_, w| now.duration_since(w.used) < idle || !w.evictable());
        }
        if warm.map.len() >= self.capacity {
            warm.map.retain(|_, w| !w.evictable());
        }
        Metrics::add(
            &self.metrics.sessions_evicted,
            before.saturating_sub(warm.map.len()) as u64,
        );
        let slot = Arc::new(Mutex::new(Slot::default()));
        warm.map.insert(
            key.clone(),
            WarmSlot {
                slot: slot.clone(),
                used: now,
            },
        );
        Metrics::set(&self.metrics.warm_sessions, warm.map.len() as u64);
        slot
    }

    /// Drops the warm sessions idle for longer than the idle time now, without waiting for
    /// the next new session to sweep; returns how many went.
    pub fn evict_idle(&self) -> usize {
        let Ok(mut warm) = self.slots.lock() else {
            return 0;
        };
        let now = Instant::now();
        let before = warm.map.len();
        let idle = self.idle_ttl;
        warm.swept = now;
        warm.map
            .retain(|_, w| now.duration_since(w.used) < idle || !w.evictable());
        let evicted = before - warm.map.len();
        Metrics::add(&self.metrics.sessions_evicted, evicted as u64);
        Metrics::set(&self.metrics.warm_sessions, warm.map.len() as u64);
        evicted
    }

    /// How often a server sweeps idle sessions out ([`Self::evict_idle`]): a quarter of the
    /// idle time, between 10 ms and 30 s.
    pub fn sweep_interval(&self) -> Duration {
        (self.idle_ttl / 4).clamp(Duration::from_millis(10), Duration::from_secs(30))
    }

    /// How many sessions are warm in memory.
    pub fn warm_sessions(&self) -> usize {
        self.slots.lock().map_or(0, |warm| warm.map.len())
    }

    /// Replaces the slot with a stored session (`None`: a new one).
    pub(super) fn install(slot: &mut Slot, stored: Option<(Snapshot, u64)>) {
        // A reload forgets what was never committed, but not the step counter (tickets stay
        // unique), nor a window an upstream stated, nor the overflow streak (they hold
        // whether or not a step commits).
        let generation = slot.generation;
        let learned = slot.client.learned_window;
        let streak = slot.overflow_streak;
        *slot = Slot::default();
        slot.generation = generation;
        slot.overflow_streak = streak;
        slot.loaded = true;
        let Some((snapshot, version)) = stored else {
            slot.client.verbatim = true;
            slot.client.learned_window = learned;
            slot.created_at_ms = now_ms();
            return;
        };
        let Snapshot {
            context,
            client,
            extensions,
            journal,
            created_at_ms,
            unknown,
            engine_unknown,
            stored,
        } = snapshot;
        slot.version = Some(version);
        slot.stored_shape = stored;
        slot.created_at_ms = created_at_ms;
        slot.extensions = extensions;
        slot.journal = journal;
        slot.unknown = unknown;
        slot.engine_unknown = engine_unknown;
        slot.client = client;
        slot.client.learned_window = match (learned, slot.client.learned_window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        slot.stored_hashes.clone_from(&slot.client.hashes);
        slot.state = Some(context);
    }

    /// The state to store for the slot, from its parts (nothing is cloned but what the
    /// stored form copies anyway), and how to write it: only what follows the stored
    /// generation when the context continues it and `incremental` (the store saves in
    /// generations), else the whole context as a new generation, carrying only the newest
    /// records of the journal (which the slot keeps from then on).
    pub(super) fn state_to_store(slot: &mut Slot, incremental: bool) -> (AgentState, ContextWrite) {
        let empty = ContextState::default();
        let append = slot.stored_shape.filter(|shape| {
            incremental
                && shape.continued_by(
                    slot.state_ref().unwrap_or(&empty),
                    &slot.client.hashes,
                    &slot.stored_hashes,
                    slot.journal.len(),
                )
        });
        if append.is_none() {
            crate::sessions::timeline::bound(&mut slot.journal);
        }
        let parts = SnapshotRef {
            context: slot.state_ref().unwrap_or(&empty),
            client: &slot.client,
            extensions: &slot.extensions,
            journal: &slot.journal,
            created_at_ms: slot.created_at_ms,
            unknown: &slot.unknown,
            engine_unknown: &slot.engine_unknown,
        };
        parts.encode_for(append)
    }

    /// The stored shape of the slot once its state is saved.
    pub(super) fn shape_of(slot: &Slot) -> StoredShape {
        let empty = ContextState::default();
        StoredShape::of(
            slot.state_ref().unwrap_or(&empty),
            slot.client.hashes.len(),
            slot.journal.len(),
        )
    }

    /// Makes sure a manager with the request's settings runs, rebuilding it around the
    /// current context when the model, window, tools or policy changed.
    pub(super) fn ensure_live(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
        incoming: &Incoming,
        tools: &[ToolSpec],
    ) -> Result<(), SessionError> {
        let model = incoming.model.clone().unwrap_or_default();
        // The table's own entry for the model first, then the window the provider's model
        // list states, then the table's nearest name or default; a request that asks for a
        // larger window gets it.
        let (profile, matched) = self.profiles.resolve(&model);
        let known = match matched {
            ctxkeeper_core::tokens::MatchKind::Exact => None,
            _ => self.listed_window(&model),
        };
        let profile_window = known
            .unwrap_or_else(|| self.policy.window_for(profile, &self.profiles))
            .max(incoming.requested_window.unwrap_or(0));
        let window = input_window(
            slot.client
                .learned_window
                .map_or(profile_window, |w| w.min(profile_window)),
            incoming.requested_output,
        );
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
        manager.restore_preparations(std::mem::take(&mut slot.preparations));
        let manager = self.attach_memory(key, manager);
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
}
