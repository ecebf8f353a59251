//! The event bus over PostgreSQL `LISTEN` / `NOTIFY` on one channel, `ctxkeeper_events`:
//! `pg_notify` through a small pool, and one listening connection per bus handle whose
//! notifications a task hands to the subscribers in this process.
//!
//! One channel for every session, not one per session: a `LISTEN` issued while the listener
//! waits for a notification would have to interrupt that wait, which sqlx's listener does
//! not survive, and a fixed channel needs no `LISTEN` round trip per subscriber.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};

use super::{AbortOnDrop, EventBus, EventSubscription, Hub, SessionEvent, backoff, encode};
use crate::state::SessionKey;
use crate::{StoreError, redact};

/// The notification channel.
pub(crate) const CHANNEL: &str = "ctxkeeper_events";

/// The PostgreSQL event bus.
#[derive(Debug)]
pub(crate) struct PgEventBus {
    pool: PgPool,
    hub: Arc<Hub>,
    _listener: AbortOnDrop,
}

/// Hands every notification to the hub. sqlx reconnects a lost listening connection (and
/// listens again) inside `try_recv`, which then answers `None`: the gap is reported.
async fn listen(mut listener: PgListener, hub: Weak<Hub>) {
    let mut attempt = 0;
    loop {
        let received = listener.try_recv().await;
        let Some(live) = hub.upgrade() else { return };
        match received {
            Ok(Some(notification)) => {
                attempt = 0;
                live.deliver_payload(notification.payload().as_bytes());
            }
            Ok(None) => live.report_gap(),
            Err(_) => {
                // The reconnection failed: report, wait, try again.
                live.report_gap();
                drop(live);
                tokio::time::sleep(backoff(attempt)).await;
                attempt = attempt.saturating_add(1);
            }
        }
    }
}

impl PgEventBus {
    pub(crate) async fn connect(url: &str) -> Result<PgEventBus, StoreError> {
        let shown = redact(url);
        let fail =
            |e: sqlx::Error| StoreError::backend("postgres", format!("event bus on {shown}: {e}"));
        // One connection listens for the bus's lifetime; the others publish.
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect(url)
            .await
            .map_err(fail)?;
        let mut listener = PgListener::connect_with(&pool).await.map_err(fail)?;
        listener.listen(CHANNEL).await.map_err(fail)?;
        let hub = Hub::new();
        let task = tokio::spawn(listen(listener, Arc::downgrade(&hub)));
        Ok(PgEventBus {
            pool,
            hub,
            _listener: AbortOnDrop(task),
        })
    }
}

impl Drop for PgEventBus {
    fn drop(&mut self) {
        self.hub.close();
    }
}

#[async_trait]
impl EventBus for PgEventBus {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn spans_processes(&self) -> bool {
        true
    }

    async fn publish(&self, key: &SessionKey, event: &SessionEvent) -> Result<(), StoreError> {
        let payload = encode(key, event)?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(payload)
            .execute(&self.pool)
            .await
            .map_err(|e| StoreError::backend_caused("postgres", e))?;
        Ok(())
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
