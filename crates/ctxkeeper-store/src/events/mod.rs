//! Session events across replicas: a small publish/subscribe bus keyed by session.
//!
//! The gateway announces what happens to a session (a compaction started or finished, an
//! overflow recovered, the history diverged) to whoever watches it, over
//! `GET /v1/sessions/{id}/events`. With several gateway replicas behind one store, the
//! watcher's replica is often not the one that served the step, so the events travel through
//! the store's own pub/sub where it has one. An [`EventBus`] is opened from the same URL as
//! the session store ([`open_event_bus`]):
//!
//! | store URL | bus | reach |
//! | --- | --- | --- |
//! | `redis://…`, `rediss://…`, `redis+cluster://…`, `redis+sentinel://…` | Redis `PUBLISH` / `SUBSCRIBE` on one channel, `PREFIX:events` | every process on the deployment |
//! | `postgres://…` | PostgreSQL `NOTIFY` / `LISTEN` on the channel `ctxkeeper_events` | every process on the database |
//! | `memory://`, `sqlite://…`, `file://…`, `mysql://…` | in-process broadcast | subscribers of the same bus handle only |
//!
//! SQLite, JSON files and MySQL/MariaDB have no pub/sub, so replicas on them share events
//! only within a process: open the bus once per process and share the handle
//! ([`EventBus::spans_processes`] says which kind a bus is).
//!
//! **Delivery** is at most once, in publish order per publisher, to the subscriptions that
//! exist when an event arrives (nothing is stored: a late subscriber sees only later events).
//! A subscriber that falls more than [`SUBSCRIBER_BUFFER`] events behind, or a bus whose
//! server connection dropped for a while, gets a [`Delivery::Lost`] in the stream instead of
//! the events it missed, so it can say so (the gateway's `events_lost`). A remote bus holds
//! one server connection for all its subscriptions, whatever their number, and filters
//! incoming events by session in the process; every replica therefore receives every
//! session's events (small, and one per step at most), and subscribing or leaving costs no
//! round trip.
//!
//! **Subscriptions are released when dropped**: the last [`EventSubscription`] of a session
//! dropping frees that session's channel, so a client subscribing to many distinct sessions
//! and disconnecting leaves nothing behind ([`EventBus::subscribed_sessions`] counts what is
//! live). [`EventBus::close`] ends every stream (at shutdown); dropping the last handle of a
//! bus does too and stops its listening task.
//!
//! Events are small: a name of 1–64 characters `[A-Za-z0-9_.-]` (it becomes an SSE `event:`
//! line, so no line breaks can slip in) and JSON data, at most [`MAX_EVENT_BYTES`] encoded
//! (PostgreSQL's `NOTIFY` payload limit is 8,000 bytes).
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ctxkeeper_store::events::{open_event_bus, Delivery, SessionEvent};
//! use ctxkeeper_store::SessionKey;
//! use serde_json::json;
//!
//! let bus = open_event_bus("memory://").await?;
//! let key = SessionKey::simple("s1")?;
//! let mut watcher = bus.subscribe(&key);
//! bus.publish(&key, &SessionEvent::new("context_compaction_end", json!({"tokens_after": 900}))?)
//!     .await?;
//! match watcher.recv().await {
//!     Some(Delivery::Event(event)) => assert_eq!(event.name, "context_compaction_end"),
//!     other => panic!("{other:?}"),
//! }
//! drop(watcher);
//! assert_eq!(bus.subscribed_sessions(), 0);
//! # Ok::<(), ctxkeeper_store::StoreError>(())
//! # }).unwrap();
//! ```

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod remote;

use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_stream::Stream;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use crate::StoreError;
use crate::state::SessionKey;

/// The most bytes an event may take on the wire (its session key, name and data as JSON).
pub const MAX_EVENT_BYTES: usize = 7_000;

/// How many undelivered events one subscription may hold before it is told it lost some.
pub const SUBSCRIBER_BUFFER: usize = 64;

/// The longest event name.
pub const MAX_EVENT_NAME: usize = 64;

/// One event about a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEvent {
    /// What happened (`context_compaction_start`, `overflow_recovered`, …): 1–64 characters
    /// of `A-Z a-z 0-9 _ . -`.
    pub name: String,
    /// Details, as JSON.
    pub data: Value,
}

impl SessionEvent {
    /// An event, with its name checked.
    pub fn new(name: impl Into<String>, data: Value) -> Result<SessionEvent, StoreError> {
        let event = SessionEvent {
            name: name.into(),
            data,
        };
        check_name(&event.name)?;
        Ok(event)
    }
}

fn check_name(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_EVENT_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidInput(format!(
            "event name {:?} must be 1-{MAX_EVENT_NAME} characters of A-Z a-z 0-9 _ . -",
            name.chars().take(80).collect::<String>()
        )))
    }
}

/// What a subscription yields.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Delivery {
    /// An event of the subscribed session.
    Event(SessionEvent),
    /// Events of the session were lost: `Some(n)` when this subscriber fell `n` events
    /// behind, `None` when the bus lost its server connection for a while (it reconnects by
    /// itself) and events published meanwhile never arrived.
    Lost { missed: Option<u64> },
}

/// Publish and subscribe to small JSON events keyed by session; see the [module docs](self).
#[async_trait]
pub trait EventBus: Send + Sync + fmt::Debug {
    /// `redis`, `postgres` or `local`, for messages and metrics.
    fn backend(&self) -> &'static str;

    /// Whether events reach subscribers in other processes (Redis, PostgreSQL), or only
    /// subscribers of this bus handle.
    fn spans_processes(&self) -> bool;

    /// Sends `event` to every current subscriber of `key`, on every replica the bus reaches.
    /// Refuses an event larger than [`MAX_EVENT_BYTES`] or with a bad name.
    async fn publish(&self, key: &SessionKey, event: &SessionEvent) -> Result<(), StoreError>;

    /// The events of `key` from now on. Dropping the subscription releases it.
    fn subscribe(&self, key: &SessionKey) -> EventSubscription;

    /// How many sessions have at least one live subscription on this handle.
    fn subscribed_sessions(&self) -> usize;

    /// Ends every subscription's stream, and those made afterwards at once (shutdown).
    fn close(&self);
}

/// Opens the event bus for the store a URL names (the same URL as [`open_store`]):
/// Redis pub/sub for `redis://…`, PostgreSQL `LISTEN`/`NOTIFY` for `postgres://…`, an
/// in-process broadcast otherwise (see the [module docs](self)). A backend whose cargo
/// feature is off answers [`StoreError::NotImplemented`].
///
/// [`open_store`]: crate::open_store
pub async fn open_event_bus(url: &str) -> Result<Arc<dyn EventBus>, StoreError> {
    crate::install_tls_provider();
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        None | Some("memory") | Some("file") | Some("sqlite") | Some("mysql") | Some("mariadb") => {
            Ok(Arc::new(LocalEventBus::new()))
        }
        Some("postgres") | Some("postgresql") => open_postgres(url).await,
        Some(scheme) if scheme.starts_with("redis") => open_redis(url).await,
        Some(other) => Err(StoreError::InvalidInput(format!(
            "unknown store scheme `{other}://`"
        ))),
    }
}

#[cfg(feature = "postgres")]
async fn open_postgres(url: &str) -> Result<Arc<dyn EventBus>, StoreError> {
    Ok(Arc::new(postgres::PgEventBus::connect(url).await?))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(url: &str) -> Result<Arc<dyn EventBus>, StoreError> {
    Err(StoreError::NotImplemented(format!(
        "{}: built without the `postgres` feature",
        crate::redact(url)
    )))
}

#[cfg(feature = "redis")]
async fn open_redis(url: &str) -> Result<Arc<dyn EventBus>, StoreError> {
    Ok(Arc::new(redis::RedisEventBus::connect(url).await?))
}

#[cfg(not(feature = "redis"))]
async fn open_redis(url: &str) -> Result<Arc<dyn EventBus>, StoreError> {
    Err(StoreError::NotImplemented(format!(
        "{}: built without the `redis` feature",
        crate::redact(url)
    )))
}

/// An event as it travels between processes.
#[derive(Serialize, Deserialize)]
struct Wire {
    key: SessionKey,
    #[serde(flatten)]
    event: SessionEvent,
}

/// Checks an event and encodes it for the wire.
fn encode(key: &SessionKey, event: &SessionEvent) -> Result<String, StoreError> {
    check_name(&event.name)?;
    let payload = serde_json::to_string(&Wire {
        key: key.clone(),
        event: event.clone(),
    })
    .map_err(|err| StoreError::InvalidInput(format!("event does not serialize: {err}")))?;
    if payload.len() > MAX_EVENT_BYTES {
        return Err(StoreError::InvalidInput(format!(
            "event {} is {} bytes encoded; events carry at most {MAX_EVENT_BYTES}",
            event.name,
            payload.len()
        )));
    }
    Ok(payload)
}

/// Decodes an event from the wire (for the remote buses); `None` for a payload this bus did
/// not write.
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
fn decode(payload: &[u8]) -> Option<(SessionKey, SessionEvent)> {
    let wire: Wire = serde_json::from_slice(payload).ok()?;
    check_name(&wire.event.name).ok()?;
    Some((wire.key, wire.event))
}

/// The subscriptions of one bus handle: a broadcast channel per subscribed session, removed
/// when its last receiver goes.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    topics: Mutex<HashMap<SessionKey, broadcast::Sender<Delivery>>>,
    closed: AtomicBool,
}

impl Hub {
    pub(crate) fn new() -> Arc<Hub> {
        Arc::new(Hub::default())
    }

    fn subscribe(self: &Arc<Self>, key: &SessionKey) -> EventSubscription {
        let receiver = match self.topics.lock() {
            Ok(mut topics) if !self.closed.load(Ordering::Acquire) => topics
                .entry(key.clone())
                .or_insert_with(|| broadcast::channel(SUBSCRIBER_BUFFER).0)
                .subscribe(),
            // Closed (or poisoned by a panic): a stream that ends at once.
            _ => broadcast::channel(1).1,
        };
        EventSubscription {
            stream: Some(BroadcastStream::new(receiver)),
            hub: Arc::clone(self),
            key: key.clone(),
        }
    }

    /// Hands an event to the session's subscribers, if it has any here.
    pub(crate) fn deliver(&self, key: &SessionKey, event: SessionEvent) {
        if let Ok(topics) = self.topics.lock()
            && let Some(sender) = topics.get(key)
        {
            // No receiver left is not an error: the event simply has no audience.
            let _ = sender.send(Delivery::Event(event));
        }
    }

    /// Decodes a payload from the server and hands it on.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn deliver_payload(&self, payload: &[u8]) {
        if let Some((key, event)) = decode(payload) {
            self.deliver(&key, event);
        }
    }

    /// Tells every subscriber that events may have been lost (the server connection dropped).
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn report_gap(&self) {
        if let Ok(topics) = self.topics.lock() {
            for sender in topics.values() {
                let _ = sender.send(Delivery::Lost { missed: None });
            }
        }
    }

    /// Forgets a session's channel once its last subscriber has gone.
    fn release(&self, key: &SessionKey) {
        if let Ok(mut topics) = self.topics.lock() {
            if topics.get(key).is_some_and(|s| s.receiver_count() == 0) {
                topics.remove(key);
            }
            // A burst of distinct sessions must not leave its table behind either.
            if topics.capacity() > 64 && topics.len() * 4 < topics.capacity() {
                topics.shrink_to_fit();
            }
        }
    }

    fn len(&self) -> usize {
        self.topics.lock().map_or(0, |topics| topics.len())
    }

    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Ok(mut topics) = self.topics.lock() {
            // Dropping the senders ends every receiver's stream.
            topics.clear();
            topics.shrink_to_fit();
        }
    }
}

/// The events of one session, from the moment of subscribing; a [`Stream`] of
/// [`Delivery`]s (or call [`recv`](Self::recv)). Ends when the bus is closed or dropped.
/// Dropping it releases the subscription.
pub struct EventSubscription {
    /// Dropped before the hub is told, so the release sees this receiver gone.
    stream: Option<BroadcastStream<Delivery>>,
    hub: Arc<Hub>,
    key: SessionKey,
}

impl fmt::Debug for EventSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSubscription")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl EventSubscription {
    /// The subscribed session.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// The next delivery, or `None` once the bus is closed.
    pub async fn recv(&mut self) -> Option<Delivery> {
        use tokio_stream::StreamExt;
        self.next().await
    }
}

impl Stream for EventSubscription {
    type Item = Delivery;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        let this = self.get_mut();
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Ready(None);
        };
        Pin::new(stream).poll_next(cx).map(|item| {
            item.map(|result| match result {
                Ok(delivery) => delivery,
                Err(BroadcastStreamRecvError::Lagged(missed)) => Delivery::Lost {
                    missed: Some(missed),
                },
            })
        })
    }
}

impl Drop for EventSubscription {
    fn drop(&mut self) {
        drop(self.stream.take());
        self.hub.release(&self.key);
    }
}

/// The in-process bus: events reach the subscribers of this handle (and its clones) only.
#[derive(Debug, Clone)]
pub struct LocalEventBus {
    owner: Arc<HubOwner>,
}

/// Closes the hub when the last handle of a bus goes, ending its subscriptions' streams.
#[derive(Debug)]
struct HubOwner(Arc<Hub>);

impl Drop for HubOwner {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl LocalEventBus {
    pub fn new() -> LocalEventBus {
        LocalEventBus {
            owner: Arc::new(HubOwner(Hub::new())),
        }
    }

    fn hub(&self) -> &Arc<Hub> {
        &self.owner.0
    }
}

impl Default for LocalEventBus {
    fn default() -> LocalEventBus {
        LocalEventBus::new()
    }
}

#[async_trait]
impl EventBus for LocalEventBus {
    fn backend(&self) -> &'static str {
        "local"
    }

    fn spans_processes(&self) -> bool {
        false
    }

    async fn publish(&self, key: &SessionKey, event: &SessionEvent) -> Result<(), StoreError> {
        // The same limits as the remote buses, so code tested here behaves the same there.
        encode(key, event)?;
        self.hub().deliver(key, event.clone());
        Ok(())
    }

    fn subscribe(&self, key: &SessionKey) -> EventSubscription {
        self.hub().subscribe(key)
    }

    fn subscribed_sessions(&self) -> usize {
        self.hub().len()
    }

    fn close(&self) {
        self.hub().close();
    }
}

/// A spawned task stopped when its owner is dropped, so a bus never leaves its listener
/// running behind it.
#[derive(Debug)]
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long a listener waits before reconnecting after attempt `n` failed (0.1 s doubling,
/// at most 5 s).
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
pub(crate) fn backoff(attempt: u32) -> std::time::Duration {
    std::time::Duration::from_millis(100u64.saturating_mul(1 << attempt.min(6)).min(5_000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_round_trip_and_hostile_names_are_refused() -> Result<(), StoreError> {
        let key = SessionKey::new("acme", "u", "a", "s1")?;
        let event = SessionEvent::new("context_compaction_end", json!({"n": 1}))?;
        let payload = encode(&key, &event)?;
        assert_eq!(decode(payload.as_bytes()), Some((key.clone(), event)));
        for name in ["", "a\nevent: forged", "a b", &"x".repeat(65)] {
            assert!(SessionEvent::new(name, Value::Null).is_err(), "{name:?}");
        }
        let huge = SessionEvent::new("big", json!("x".repeat(MAX_EVENT_BYTES)))?;
        assert!(matches!(
            encode(&key, &huge),
            Err(StoreError::InvalidInput(m)) if m.contains("at most")
        ));
        // Payloads another program put on the channel are ignored.
        assert_eq!(decode(b"not json"), None);
        assert_eq!(decode(br#"{"key":{"tenant":"../x","user":"u","agent":"a","session":"s"},"name":"n","data":1}"#), None);
        Ok(())
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(0).as_millis(), 100);
        assert_eq!(backoff(3).as_millis(), 800);
        assert_eq!(backoff(30).as_millis(), 5_000);
    }
}
