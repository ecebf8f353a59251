//! The HTTP surface: every route of the gateway on one axum [`Router`], and the server that
//! runs it with graceful shutdown.
//!
//! | route | |
//! | --- | --- |
//! | `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages` | managed model calls ([`proxy`](crate::proxy)) |
//! | `GET /v1/models`, `GET /v1/models/{id}`, `POST /v1/messages/count_tokens` | passed through |
//! | `GET /v1/sessions/{id}/events` | the session's events as server-sent events |
//! | `GET /metrics` | Prometheus text |
//! | `GET /healthz` | liveness |
//! | `/admin/…` | the [admin API](crate::admin) |
//!
//! The events of a session are visible to its tenant only: the tenant is resolved exactly as
//! for model calls (the `x-ctxkeeper-tenant` header, else the API key's hash).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ctxkeeper_store::SessionKey;
use futures_util::Stream;
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tower_http::catch_panic::CatchPanicLayer;

use crate::error::{ApiError, Flavor};
use crate::sessions::SessionEvent;
use crate::{Gateway, GatewayConfig, admin, identity, proxy};

/// Errors starting or running the gateway.
#[derive(Debug)]
#[non_exhaustive]
pub enum GatewayError {
    /// An invalid setting.
    Config(String),
    /// The session store or the archive could not be opened.
    Store(String),
    /// Binding or serving failed.
    Io(std::io::Error),
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatewayError::Config(message) => write!(f, "configuration: {message}"),
            GatewayError::Store(message) => write!(f, "store: {message}"),
            GatewayError::Io(err) => write!(f, "server: {err}"),
        }
    }
}

impl std::error::Error for GatewayError {}

/// Every route of the gateway over `gateway`.
pub fn router(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(proxy::chat_completions))
        .route("/v1/responses", post(proxy::responses))
        .route("/v1/messages", post(proxy::messages))
        .route("/v1/messages/count_tokens", post(proxy::count_tokens))
        .route("/v1/models", get(proxy::models))
        .route("/v1/models/{id}", get(proxy::models))
        .route("/v1/sessions/{id}/events", get(events))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .nest("/admin", admin::routes())
        // A bug in one request answers 500 instead of dropping the connection.
        .layer(CatchPanicLayer::new())
        .with_state(gateway)
}

async fn healthz() -> impl IntoResponse {
    axum::Json(serde_json::json!({"status": "ok"}))
}

async fn metrics(State(gw): State<Arc<Gateway>>) -> Response {
    let mut response = gw.metrics.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

/// `GET /v1/sessions/{id}/events`: the session's events from now on, as SSE.
async fn events(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let bad =
        |e: ctxkeeper_store::StoreError| ApiError::invalid_request(Flavor::OpenAi, e.to_string());
    let tenant = identity::tenant_of(&headers).map_err(bad)?;
    let key = SessionKey::new(tenant, SessionKey::DEFAULT, SessionKey::DEFAULT, id).map_err(bad)?;
    let receiver = gw.sessions.subscribe(&key);
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let event = match receiver.recv().await {
            Ok(event) => event,
            Err(broadcast::error::RecvError::Lagged(missed)) => SessionEvent {
                name: "events_lost".into(),
                data: serde_json::json!({"type": "events_lost", "missed": missed}),
            },
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((Ok(sse_event(&event)), receiver))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

fn sse_event(event: &SessionEvent) -> SseEvent {
    SseEvent::default()
        .event(event.name.clone())
        .data(event.data.to_string())
}

/// A bound gateway, ready to serve.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    gateway: Arc<Gateway>,
    /// Routes served beside the gateway's own (the CLI mounts the MCP server here).
    extra: Router,
}

impl Server {
    /// Opens the store and archive and binds the listen address (port 0 picks a free port).
    pub async fn bind(config: GatewayConfig) -> Result<Server, GatewayError> {
        let listen = config.listen;
        let gateway = Gateway::open(config).await?;
        Server::bind_gateway(gateway, listen).await
    }

    /// Binds an already built gateway.
    pub async fn bind_gateway(
        gateway: Arc<Gateway>,
        listen: SocketAddr,
    ) -> Result<Server, GatewayError> {
        let listener = TcpListener::bind(listen).await.map_err(GatewayError::Io)?;
        Ok(Server {
            listener,
            gateway,
            extra: Router::new(),
        })
    }

    /// Serves `routes` beside the gateway's own; their paths must not overlap the gateway's.
    pub fn merge(mut self, routes: Router) -> Server {
        self.extra = self.extra.merge(routes);
        self
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The gateway's shared state.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Serves until `shutdown` completes, then stops accepting and waits for in-flight
    /// requests (each saved its session before answering).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), GatewayError> {
        let gateway = self.gateway.clone();
        let shutdown = async move {
            shutdown.await;
            // Event streams never end on their own: a connected subscriber would hold the
            // graceful shutdown forever.
            gateway.sessions.close_events();
        };
        let app = router(self.gateway).merge(self.extra);
        axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(GatewayError::Io)
    }
}

/// Binds `config.listen` and serves until `shutdown` completes.
pub async fn serve(
    config: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), GatewayError> {
    let server = Server::bind(config).await?;
    tracing::info!(address = %server.local_addr(), "listening");
    server.run(shutdown).await
}
