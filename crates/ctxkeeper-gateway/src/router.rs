//! The HTTP surface: every route of the gateway on one axum [`Router`], and the server that
//! runs it with graceful shutdown.
//!
//! | route | |
//! | --- | --- |
//! | `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages` | managed model calls ([`http`](crate::http)) |
//! | `GET /v1/models`, `GET /v1/models/{id}`, `POST /v1/messages/count_tokens` | passed through |
//! | `GET /v1/sessions/{id}/events` | the session's events as server-sent events |
//! | `GET /metrics` | Prometheus text |
//! | `GET /healthz` | liveness |
//! | `GET /`, `HEAD /` | the agents' connectivity check |
//! | `/admin/…` | the [admin API](crate::admin) |
//! | `/ui/…` | the [web console](crate::ui) |
//!
//! The events of a session are visible to its tenant only: the tenant is resolved exactly as
//! for model calls ([`TenantRule`](crate::tenancy::TenantRule): a tenant token, else the API
//! key's hash; `x-ctxkeeper-tenant` only where the operator trusts it).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ctxkeeper_store::SessionKey;
use ctxkeeper_store::events::Delivery;
use futures_util::Stream;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower_http::catch_panic::CatchPanicLayer;

use crate::error::{ApiError, Flavor, GatewayError, Kind};
use crate::limits::{DeadlineBody, Handshake};
use crate::sessions::SessionEvent;
use crate::{Gateway, GatewayConfig, admin, http};

/// Every route of the gateway over `gateway`.
pub fn router(gateway: Arc<Gateway>) -> Router {
    let console = crate::ui::Console::for_gateway(&gateway).router();
    http::endpoint::routes()
        .route("/v1/sessions/{id}/events", get(events))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        // Agents check that their base URL answers before the first call (Claude Code sends
        // `HEAD /`); GET also answers HEAD.
        .route("/", get(root))
        .nest("/admin", admin::routes())
        .with_state(gateway)
        .merge(console)
        // A bug in one request answers 500 instead of dropping the connection.
        .layer(CatchPanicLayer::new())
}

async fn root() -> impl IntoResponse {
    axum::Json(serde_json::json!({
        "service": "ctxkeeper",
        "version": env!("CARGO_PKG_VERSION"),
        "endpoints": ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/healthz", "/metrics"],
    }))
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
    let tenant = gw.config.tenants.resolve(&headers)?;
    let key = SessionKey::new(tenant, SessionKey::DEFAULT, SessionKey::DEFAULT, id)
        .map_err(|e| ApiError::caused_by(StatusCode::BAD_REQUEST, Kind::InvalidRequest, e))?;
    let subscription = gw.sessions.subscribe(&key);
    let stream = futures_util::stream::unfold(subscription, |mut subscription| async move {
        let event = match subscription.recv().await? {
            Delivery::Event(event) => event,
            Delivery::Lost { missed } => SessionEvent {
                name: "events_lost".into(),
                data: serde_json::json!({"type": "events_lost", "missed": missed}),
            },
            _ => return None,
        };
        Some((Ok(sse_event(&event)), subscription))
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
    /// requests (each saved its session before answering). A client gets
    /// [`GatewayConfig::header_timeout`] to send a request's headers (its body is bounded
    /// by the handlers), so half-sent requests cannot hold connections open.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), GatewayError> {
        let gateway = self.gateway.clone();
        let header_timeout = gateway.config.header_timeout;
        let body_timeout = gateway.config.body_timeout;
        let app = router(self.gateway)
            .merge(self.extra)
            .layer(axum::middleware::from_fn(too_large_as_json));
        let mut builder = ConnBuilder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout);
        // An HTTP/2 client is pinged once its connection has been quiet for the header
        // timeout, and dropped when it does not answer within it.
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(header_timeout)
            .keep_alive_timeout(header_timeout);
        let graceful = GracefulShutdown::new();
        // Idle sessions leave memory on a clock, not only when a new session arrives.
        let sweeper = tokio::spawn(sweep_idle_sessions(gateway.clone()));
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(err) => {
                            // Out of file descriptors and the like: wait instead of spinning.
                            tracing::warn!(%err, "accept failed");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    // The peer address reaches handlers as axum's `ConnectInfo` (the MCP
                    // endpoint bounds its tenants per source address).
                    let service = TowerToHyperService::new(tower::ServiceExt::map_request(
                        app.clone(),
                        move |request: axum::http::Request<hyper::body::Incoming>| {
                            let (mut parts, body) = request.into_parts();
                            parts.extensions.insert(ConnectInfo(peer));
                            // Every route's body arrives within the body timeout.
                            let body = if hyper::body::Body::is_end_stream(&body) {
                                axum::body::Body::new(body)
                            } else {
                                axum::body::Body::new(DeadlineBody::new(
                                    axum::body::Body::new(body),
                                    body_timeout,
                                ))
                            };
                            axum::http::Request::from_parts(parts, body)
                        },
                    ));
                    let connection = builder
                        .serve_connection(
                            TokioIo::new(Handshake::new(stream, header_timeout)),
                            service,
                        )
                        .into_owned();
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        // A client that breaks off or times out ends only its own connection.
                        let _ = connection.await;
                    });
                }
                () = &mut shutdown => break,
            }
        }
        drop(self.listener);
        sweeper.abort();
        // Event streams never end on their own: a connected subscriber would hold the
        // graceful shutdown forever.
        gateway.sessions.close_events();
        graceful.shutdown().await;
        Ok(())
    }
}

/// A 413 that is not JSON yet (axum's body limit on `/admin` and `/ui`, rmcp's on `/mcp`)
/// becomes one in the gateway's error shape. The model endpoints' answers are left alone:
/// an upstream's error goes to the client as the upstream sent it.
async fn too_large_as_json(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let model_call = request.uri().path().starts_with("/v1/");
    let response = next.run(request).await;
    if model_call
        || response.status() != StatusCode::PAYLOAD_TOO_LARGE
        || response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/json"))
    {
        return response;
    }
    let mut error = ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        Kind::TooLarge,
        "request body is larger than this endpoint accepts",
    );
    error.code = Some("request_too_large");
    error.render(Flavor::OpenAi)
}

/// Drops warm sessions idle past `--session-idle`, and the resent histories kept for them,
/// every quarter of it (at most every 30 s).
async fn sweep_idle_sessions(gateway: Arc<Gateway>) {
    let every = gateway.sessions.sweep_interval();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let evicted = gateway.sessions.evict_idle();
        let idle = gateway
            .resent
            .take_idle(gateway.config.session_idle, std::time::Instant::now());
        if evicted > 0 || !idle.is_empty() {
            tracing::debug!(evicted, histories = idle.len(), "idle sessions swept");
        }
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
