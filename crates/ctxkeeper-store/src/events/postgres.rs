//! The event bus over PostgreSQL `LISTEN` / `NOTIFY` on one channel, `ctxkeeper_events`:
//! `pg_notify` through a small pool, and one listening connection per bus handle whose
//! notifications a task hands to the subscribers in this process.
//!
//! One channel for every session, not one per session: a `LISTEN` issued while the listener
//! waits for a notification would have to interrupt that wait, which sqlx's listener does
//! not survive, and a fixed channel needs no `LISTEN` round trip per subscriber.

use std::sync::Weak;

use async_trait::async_trait;
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};

use super::remote::{Publisher, RemoteBus};
use super::{Hub, backoff};
use crate::{StoreError, redact};

/// The notification channel.
pub(crate) const CHANNEL: &str = "ctxkeeper_events";

/// The publishing side of the PostgreSQL event bus.
#[derive(Debug)]
pub(crate) struct PgEventBus {
    pool: PgPool,
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
    pub(crate) async fn connect(url: &str) -> Result<RemoteBus<PgEventBus>, StoreError> {
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
        Ok(RemoteBus::start(PgEventBus { pool }, |hub| {
            listen(listener, hub)
        }))
    }
}

#[async_trait]
impl Publisher for PgEventBus {
    const BACKEND: &'static str = "postgres";

    async fn publish(&self, payload: String) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(payload)
            .execute(&self.pool)
            .await
            .map_err(|e| StoreError::backend_caused("postgres", e))?;
        Ok(())
    }
}
