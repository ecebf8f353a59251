//! What the buses that span processes (Redis, PostgreSQL) share: a backend that publishes
//! encoded events to every replica, and in this process a [`Hub`] of subscriptions that a
//! listening task feeds from the server.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};

use async_trait::async_trait;

use super::{AbortOnDrop, EventBus, EventSubscription, Hub, SessionEvent, encode};
use crate::StoreError;
use crate::state::SessionKey;

/// The publishing side of a bus that spans processes.
#[async_trait]
pub(crate) trait Publisher: fmt::Debug + Send + Sync + 'static {
    /// The bus's [`EventBus::backend`].
    const BACKEND: &'static str;

    /// Sends an encoded event to every replica.
    async fn publish(&self, payload: String) -> Result<(), StoreError>;
}

/// A bus that spans processes: its backend's publisher, the subscriptions of this handle, and
/// the task that listens to the server for them.
pub(crate) struct RemoteBus<P> {
    publisher: P,
    hub: Arc<Hub>,
    _listener: AbortOnDrop,
}

impl<P> RemoteBus<P> {
    /// The bus of `publisher`, its subscriptions fed by the task `listen` makes of a weak
    /// handle of them (so the task ends when the bus is gone; it is also aborted then).
    pub(crate) fn start<F>(publisher: P, listen: impl FnOnce(Weak<Hub>) -> F) -> RemoteBus<P>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let hub = Hub::new();
        let task = tokio::spawn(listen(Arc::downgrade(&hub)));
        RemoteBus {
            publisher,
            hub,
            _listener: AbortOnDrop(task),
        }
    }
}

impl<P: fmt::Debug> fmt::Debug for RemoteBus<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.publisher.fmt(f)
    }
}

impl<P> Drop for RemoteBus<P> {
    fn drop(&mut self) {
        self.hub.close();
    }
}

#[async_trait]
impl<P: Publisher> EventBus for RemoteBus<P> {
    fn backend(&self) -> &'static str {
        P::BACKEND
    }

    fn spans_processes(&self) -> bool {
        true
    }

    async fn publish(&self, key: &SessionKey, event: &SessionEvent) -> Result<(), StoreError> {
        self.publisher.publish(encode(key, event)?).await
    }

    fn subscribe(&self, key: &SessionKey) -> EventSubscription {
        self.hub.subscribe(key)
    }

    fn subscribed_sessions(&self) -> usize {
        self.hub.len()
    }

    fn close(&self) {
        self.hub.close();
    }
}
