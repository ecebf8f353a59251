//! The event bus over Redis pub/sub: `PUBLISH PREFIX:events` through the store's kind of
//! connection, and one dedicated `SUBSCRIBE`d connection per bus handle whose messages a
//! listening task hands to the subscribers in this process.

use std::sync::Weak;

use async_trait::async_trait;
use tokio_stream::StreamExt;

use super::remote::{Publisher, RemoteBus};
use super::{Hub, backoff};
use crate::StoreError;
use crate::redis_store::{Conn, connect_deployment};

/// The publishing side of the Redis event bus.
pub(crate) struct RedisEventBus {
    conn: Conn,
    channel: String,
    shown_url: String,
}

impl std::fmt::Debug for RedisEventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisEventBus")
            .field("url", &self.shown_url)
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

/// A subscribed pub/sub connection's messages.
async fn subscribed(
    client: &redis::Client,
    channel: &str,
) -> Result<redis::aio::PubSubStream, redis::RedisError> {
    let mut pubsub = client.get_async_pubsub().await?;
    // Returns once the server confirmed the subscription.
    pubsub.subscribe(channel).await?;
    Ok(pubsub.into_on_message())
}

/// Hands every message to the hub; after a lost connection, reports the gap and reconnects.
/// Ends when the hub is gone (the task is also aborted with its bus).
async fn listen(
    client: redis::Client,
    channel: String,
    first: redis::aio::PubSubStream,
    hub: Weak<Hub>,
) {
    let mut messages = Some(first);
    let mut attempt = 0;
    loop {
        let mut stream = match messages.take() {
            Some(stream) => stream,
            None => match subscribed(&client, &channel).await {
                Ok(stream) => {
                    attempt = 0;
                    stream
                }
                Err(_) => {
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt = attempt.saturating_add(1);
                    if hub.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            },
        };
        while let Some(message) = stream.next().await {
            let Some(hub) = hub.upgrade() else { return };
            hub.deliver_payload(message.get_payload_bytes());
        }
        let Some(live) = hub.upgrade() else { return };
        live.report_gap();
    }
}

impl RedisEventBus {
    pub(crate) async fn connect(url: &str) -> Result<RemoteBus<RedisEventBus>, StoreError> {
        let deployment = connect_deployment(url).await?;
        let channel = format!("{}:events", deployment.prefix);
        let first = subscribed(&deployment.pubsub, &channel)
            .await
            .map_err(|e| {
                StoreError::backend(
                    "redis",
                    format!("cannot subscribe on {}: {e}", deployment.shown_url),
                )
            })?;
        let publisher = RedisEventBus {
            conn: deployment.conn,
            channel: channel.clone(),
            shown_url: deployment.shown_url,
        };
        Ok(RemoteBus::start(publisher, |hub| {
            listen(deployment.pubsub, channel, first, hub)
        }))
    }
}

#[async_trait]
impl Publisher for RedisEventBus {
    const BACKEND: &'static str = "redis";

    async fn publish(&self, payload: String) -> Result<(), StoreError> {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&self.channel)
            .arg(payload)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError::backend_caused("redis", e))?;
        Ok(())
    }
}
