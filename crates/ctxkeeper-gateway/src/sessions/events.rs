//! A session's events: what the engine and the gateway announce about a step, published
//! through the store's event bus so a watcher on any replica sees them.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use ctxkeeper_core::engine::Event;
use ctxkeeper_store::SessionKey;
use ctxkeeper_store::events::{Delivery, EventBus, EventSubscription};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::{Outbox, Sessions};
use crate::metrics::Metrics;

pub use ctxkeeper_store::events::SessionEvent;

/// What the gateway itself announces about a session, beside the engine's own events
/// ([`Event`]). Each becomes a [`SessionEvent`] named by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum GatewayEvent {
    /// The client's history departed from the stored one where no fork was allowed: the
    /// context was rebuilt from the client's messages.
    HistoryDiverged {
        common_prefix: usize,
        stored_messages: usize,
        received_messages: usize,
    },
    /// The client compacted its own history (its summary is message `summary_at` of the
    /// request) and the session continued from it instead of forking; `capsule_kept` when the
    /// session's capsule was carried into the new context.
    ClientCompactionContinued {
        common_prefix: usize,
        summary_at: usize,
        stored_messages: usize,
        received_messages: usize,
        capsule_kept: bool,
    },
    /// A conversation that departed early from `parent` got this session of its own.
    SessionForked { parent: String, session: String },
    /// The client replaced its newest message; the stored compaction stands.
    NewestMessageReplaced { position: usize },
    /// A request overflowed the window right after another one did.
    OverflowRepeated { consecutive: u32 },
    /// The provider reported the input tokens of the session's last request.
    UsageReported { input_tokens: u64 },
    /// The upstream answered an error; nothing of the step was committed.
    UpstreamError { status: u16 },
    /// A context overflow could not be recovered; the provider's error went to the client.
    OverflowUnrecovered { attempt: u32, error: String },
    /// The client's history had broken tool-call pairs and was repaired (`[gateway]
    /// repair`): each kind of repair with how many times it was made.
    HistoryRepaired {
        repairs: std::collections::BTreeMap<String, usize>,
    },
    /// The provider's prompt cache served less than half of each of the session's last
    /// `calls` requests, each sending at least `min_fresh_tokens` uncached input tokens: the
    /// prefix keeps changing, so every call pays for nearly its whole input again
    /// ([`crate::telemetry::CacheStallRule`]). Raised once per run of such calls.
    CacheStalled {
        calls: u32,
        fresh_input_tokens: u64,
        min_fresh_tokens: u64,
    },
}

impl GatewayEvent {
    /// The event as published.
    pub fn to_session_event(&self) -> SessionEvent {
        let data = serde_json::to_value(self).unwrap_or(Value::Null);
        SessionEvent {
            name: data["type"].as_str().unwrap_or("gateway").to_string(),
            data,
        }
    }
}

/// A session event made from an engine event.
pub(super) fn engine_event(event: &Event) -> SessionEvent {
    SessionEvent {
        name: event.name().to_string(),
        data: serde_json::to_value(event).unwrap_or(Value::Null),
    }
}

/// The events a committed step returns to its request ([`Sessions::commit`]): the
/// compactions and what their summaries did.
pub const COMPACTION_EVENTS: [&str; 5] = [
    "context_compaction_end",
    "compaction",
    "summary_failed",
    "summary_downgraded",
    "summary_prepared",
];

/// How many events may wait for the publisher before new ones are dropped (and counted).
const EVENT_QUEUE: usize = 4_096;

/// Where a session's events go: the store's [`EventBus`], so that a subscriber on any
/// replica sees them. Steps never wait for it: events are queued to one publisher task,
/// which keeps their order; a full queue drops events (and counts them) rather than slowing
/// steps down.
#[derive(Debug)]
pub(super) struct Events {
    pub(super) bus: Arc<dyn EventBus>,
    queue: StdMutex<Option<mpsc::Sender<(SessionKey, SessionEvent)>>>,
    metrics: Arc<Metrics>,
}

impl Events {
    pub(super) fn new(bus: Arc<dyn EventBus>, metrics: Arc<Metrics>) -> Events {
        Events {
            bus,
            queue: StdMutex::new(None),
            metrics,
        }
    }

    /// The publisher's queue, started on first use (inside the runtime).
    fn sender(&self) -> Option<mpsc::Sender<(SessionKey, SessionEvent)>> {
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sender) = queue.as_ref().filter(|s| !s.is_closed()) {
            return Some(sender.clone());
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (sender, mut receiver) = mpsc::channel::<(SessionKey, SessionEvent)>(EVENT_QUEUE);
        let bus = self.bus.clone();
        // Ends when `Events` (the only sender) is dropped.
        runtime.spawn(async move {
            while let Some((key, event)) = receiver.recv().await {
                if let Err(err) = bus.publish(&key, &event).await {
                    match shrink(&event).map(|small| (small, bus.clone())) {
                        Some((small, bus)) if bus.publish(&key, &small).await.is_ok() => {}
                        _ => tracing::warn!(session = %key, event = %event.name, %err, "session event not published"),
                    }
                }
            }
        });
        *queue = Some(sender.clone());
        Some(sender)
    }

    pub(super) fn publish(&self, key: &SessionKey, event: SessionEvent) {
        if let Some(sender) = self.sender()
            && sender.try_send((key.clone(), event)).is_err()
        {
            Metrics::add(&self.metrics.events_dropped, 1);
        }
    }

    pub(super) fn subscribe(&self, key: &SessionKey) -> Subscription {
        let inner = self.bus.subscribe(key);
        Metrics::add(&self.metrics.event_subscriptions, 1);
        Metrics::set(
            &self.metrics.event_channels,
            self.bus.subscribed_sessions() as u64,
        );
        Subscription {
            inner: Some(inner),
            bus: self.bus.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// An event too large for the bus, cut to its scalar fields and marked `truncated` (archive
/// reference lists of a big compaction can exceed what a `NOTIFY` carries).
fn shrink(event: &SessionEvent) -> Option<SessionEvent> {
    let Value::Object(fields) = &event.data else {
        return None;
    };
    let mut small: Map<String, Value> = fields
        .iter()
        .filter(|(_, v)| !(v.is_array() || v.is_object()) && v.to_string().len() <= 256)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    small.insert("truncated".into(), Value::Bool(true));
    Some(SessionEvent {
        name: event.name.clone(),
        data: Value::Object(small),
    })
}

/// A subscription to one session's events, on every replica the store's bus reaches;
/// dropping it unsubscribes (and frees the session's channel when it was the last).
#[derive(Debug)]
pub struct Subscription {
    inner: Option<EventSubscription>,
    bus: Arc<dyn EventBus>,
    metrics: Arc<Metrics>,
}

impl Subscription {
    /// The next delivery (an event, or word that some were lost); `None` at shutdown.
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.inner.as_mut()?.recv().await
    }

    /// The next event, if one already arrived (within `wait`).
    pub async fn next_within(&mut self, wait: Duration) -> Option<SessionEvent> {
        match tokio::time::timeout(wait, self.recv()).await {
            Ok(Some(Delivery::Event(event))) => Some(event),
            _ => None,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        drop(self.inner.take());
        Metrics::sub(&self.metrics.event_subscriptions, 1);
        Metrics::set(
            &self.metrics.event_channels,
            self.bus.subscribed_sessions() as u64,
        );
    }
}

impl Sessions {
    /// The session's events from now on. The subscription ends (and its channel is freed
    /// once no one else listens) when it is dropped.
    pub fn subscribe(&self, key: &SessionKey) -> Subscription {
        self.events.subscribe(key)
    }

    /// Ends every event stream (`/v1/sessions/{id}/events`), at shutdown: their receivers
    /// see the channel closed.
    pub fn close_events(&self) {
        self.events.bus.close();
    }

    /// How many sessions have an event subscriber in this process.
    pub fn event_channels(&self) -> usize {
        self.events.bus.subscribed_sessions()
    }

    pub(super) fn publish(&self, key: &SessionKey, event: SessionEvent) {
        self.events.publish(key, event);
    }

    /// Announces what a committed step did: metrics, then subscribers. Returns its
    /// compaction events ([`COMPACTION_EVENTS`]).
    pub(super) fn release(&self, key: &SessionKey, outbox: Outbox) -> Vec<SessionEvent> {
        Metrics::add(&self.metrics.compactions, outbox.compactions);
        Metrics::add(&self.metrics.tokens_saved, outbox.tokens_saved);
        Metrics::add(
            &self.metrics.overflow_recoveries,
            outbox.overflow_recoveries,
        );
        Metrics::add(&self.metrics.divergences, outbox.divergences);
        Metrics::add(&self.metrics.session_forks, outbox.forks);
        Metrics::add(&self.metrics.client_compactions, outbox.client_compactions);
        Metrics::add(&self.metrics.summaries_failed, outbox.summaries_failed);
        Metrics::add(&self.metrics.summaries_degraded, outbox.summaries_degraded);
        let mut compactions = Vec::new();
        for event in outbox.events {
            if COMPACTION_EVENTS.contains(&event.name.as_str()) {
                compactions.push(event.clone());
            }
            self.publish(key, event);
        }
        compactions
    }

    /// Publishes a gateway event to the session's subscribers.
    pub fn announce(&self, key: &SessionKey, event: &GatewayEvent) {
        self.publish(key, event.to_session_event());
    }
}
