//! ctxkeeper-gateway: an OpenAI- and Anthropic-compatible proxy that manages the context of
//! any agent. Agents change only their base URL.
//!
//! - [`config`]: [`GatewayConfig`] and the TOML configuration file;
//! - [`router`]: the axum [`Router`](axum::Router) ([`router::router`]) and [`router::serve`];
//! - [`http`]: the model endpoints (`/v1/chat/completions`, `/v1/responses`, `/v1/messages`,
//!   `/v1/models`) as a request walks through them: intake, interpretation, the managed
//!   session, the upstream (overflow recovery, pass-through of upstream errors), delivery;
//! - [`sessions`]: recognising the part of a resent history already seen, persisting with
//!   compare-and-swap, per-session events;
//! - [`tenancy`]: who a request belongs to (the security boundary); [`identity`]: which
//!   session it continues, and message fingerprints; [`cache_hints`]: the client's cache
//!   markers on a managed context;
//! - [`streaming`]: `usage` from streamed and plain answers;
//! - [`telemetry`]: OpenTelemetry GenAI spans of the model calls and their compactions, over
//!   OTLP/HTTP, and the cache-stall alarm;
//! - [`admin`]: the admin API; [`ui`]: the web console; [`metrics`]: Prometheus metrics; [`error`]: errors in each
//!   provider's shape; [`limits`]: the cap on request bytes in flight.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use ctxkeeper_gateway::{GatewayConfig, router};
//!
//! let mut config = GatewayConfig::new("/var/lib/ctxkeeper");
//! config.upstream = "http://127.0.0.1:9000/v1".into();
//! let server = router::Server::bind(config).await?;
//! println!("listening on http://{}", server.local_addr());
//! server.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod admin;
pub mod assembly;
pub mod cache_hints;
pub mod compaction_items;
pub mod config;
pub mod early;
pub mod error;
pub mod http;
pub mod identity;
pub mod limits;
pub mod metrics;
pub mod repair;
pub mod resent;
pub mod router;
pub mod sessions;
pub mod streaming;
pub mod summarize;
pub mod telemetry;
pub mod tenancy;
pub mod ui;

use std::sync::Arc;

pub use config::GatewayConfig;
pub use error::GatewayError;
pub use router::{Server, router, serve};

use crate::metrics::Metrics;
use crate::sessions::Sessions;

/// The shared state of one gateway process.
#[derive(Debug)]
pub struct Gateway {
    pub config: GatewayConfig,
    pub sessions: Sessions,
    pub metrics: Arc<Metrics>,
    /// Request body bytes held at once, over every request.
    pub inflight: limits::InflightBytes,
    /// The span exporter, when traces are exported (`[gateway.telemetry]`).
    pub telemetry: Option<telemetry::Telemetry>,
    client: reqwest::Client,
    /// Fingerprints of recently seen messages: a resent history is not serialized again.
    fingerprints: identity::FingerprintMemo,
    /// The messages of each session's previous request, for the next one that resends them.
    resent: resent::ResentPrefixes,
}

impl Gateway {
    /// Opens the store and the archive the configuration names and builds the upstream client.
    pub async fn open(config: GatewayConfig) -> Result<Arc<Gateway>, GatewayError> {
        config
            .validate()
            .map_err(|e| GatewayError::Config(e.to_string()))?;
        let opening = |what: String| move |source| GatewayError::Store { what, source };
        let redacted = ctxkeeper_store::redact(&config.store_url);
        let store = ctxkeeper_store::open_store(&config.store_url)
            .await
            .map_err(opening(redacted.to_string()))?;
        let archive = ctxkeeper_store::open_archive(&config.workspace)
            .await
            .map_err(opening(format!("archive {}", config.workspace)))?;
        let bus = ctxkeeper_store::open_event_bus(&config.store_url)
            .await
            .map_err(opening(format!("events of {redacted}")))?;
        let metrics = Arc::new(Metrics::default());
        let sessions = Sessions::for_gateway(store, archive, &config)
            .with_idle_ttl(config.session_idle)
            .with_max_consecutive_recoveries(config.max_consecutive_recoveries)
            .with_summarizer_choice(config.summarizer.clone())
            .with_summary_preparation(config.prepare_summaries_at)
            .with_summary_wait(config.summary_wait)
            .with_metrics(metrics.clone())
            .with_cache_stall(config.cache_stall)
            .with_event_bus(bus);
        let sessions = match open_memory(&config)? {
            Some(memory) => sessions.with_memory(memory),
            None => sessions,
        };
        Gateway::with_sessions(config, sessions, metrics)
    }

    /// A gateway over sessions built by the caller (tests share one store between several).
    pub fn with_sessions(
        config: GatewayConfig,
        sessions: Sessions,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Gateway>, GatewayError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.upstream_timeout)
            // A total deadline besides the one between reads: an upstream that trickles bytes
            // would otherwise hold a request (and its memory) forever.
            .timeout(config.upstream_deadline)
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            .build()
            .map_err(GatewayError::Client)?;
        let inflight = limits::InflightBytes::new(config.max_inflight_bytes, metrics.clone());
        let resent = resent::ResentPrefixes::new(config.resent_prefix_bytes);
        let telemetry = config
            .telemetry
            .as_ref()
            .and_then(|telemetry| telemetry::Telemetry::start(telemetry, metrics.clone()));
        Ok(Arc::new(Gateway {
            config,
            sessions,
            metrics,
            inflight,
            telemetry,
            client,
            fingerprints: identity::FingerprintMemo::default(),
            resent,
        }))
    }
}

/// The long-term memory sessions get: in the workspace directory, when memory is on. Under a
/// policy that wants memory, an archive that is no directory leaves it off with a warning (an
/// explicit `memory = true` there is a configuration error, see [`GatewayConfig::validate`]).
fn open_memory(
    config: &GatewayConfig,
) -> Result<Option<Arc<ctxkeeper_store::memory::LongTermMemory>>, GatewayError> {
    if !config.memory_enabled() {
        return Ok(None);
    }
    let Some(dir) = config.workspace_dir() else {
        tracing::warn!(
            workspace = %ctxkeeper_store::redact(&config.workspace),
            "long-term memory off: the workspace is not a directory"
        );
        return Ok(None);
    };
    let memory = ctxkeeper_store::memory::LongTermMemory::new(&dir).map_err(|source| {
        GatewayError::Store {
            what: format!("long-term memory in {}", dir.display()),
            source,
        }
    })?;
    Ok(Some(Arc::new(memory)))
}
