//! Streamable HTTP for a host that serves several tenants on one endpoint (`ctxkeeper serve`
//! at `/mcp`): the host supplies the rule that reads a request's tenant from its headers, and
//! every request is answered by a [`ContextServer`] confined to that tenant.
//!
//! Each tenant gets its own server *and its own rmcp session manager*. An MCP session is
//! created by `initialize` and afterwards addressed only by its `Mcp-Session-Id`; keeping the
//! sessions per tenant means a session id is honoured only together with headers that resolve
//! to the tenant it was created for (with any other tenant's headers it is "session not
//! found"), and the tools keep the single fixed tenant their scope checks are built around.
//!
//! rmcp's checks still run on every request, inside the tenant's service: the `Host` header
//! must be loopback or explicitly allowed, exactly as for [`crate::router`].

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};

use crate::{ContextServer, Options, Services, SetupError};

/// Most tenants kept warm at once (the default of [`TenantLimits::max_tenants`]).
pub const MAX_TENANTS: usize = 1_024;

/// The bounds of the per-tenant state `/mcp` keeps. Tenant names come from request headers
/// (any bearer string is a tenant), so every bound evicts instead of refusing: a full map
/// forgets the least recently used tenant of the source address holding the most tenants, and
/// a new tenant is always served. A client with made-up keys can therefore only push out its
/// own tenants (and, past the global bound, those of the busiest source), never lock a real key
/// out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantLimits {
    /// Tenants with a server at once, over every source.
    pub max_tenants: usize,
    /// Tenants one source address (the TCP peer's IP) may have created and still hold; its
    /// next new tenant forgets its least recently used one.
    pub tenants_per_source: usize,
    /// Open MCP sessions per tenant; a new one closes the tenant's oldest.
    pub sessions_per_tenant: usize,
    /// A tenant without a request for this long is forgotten (its sessions closed), and an MCP
    /// session without a message for this long ends.
    pub idle: Duration,
}

impl Default for TenantLimits {
    fn default() -> TenantLimits {
        TenantLimits {
            max_tenants: MAX_TENANTS,
            tenants_per_source: 64,
            sessions_per_tenant: 32,
            idle: Duration::from_secs(600),
        }
    }
}

/// Reads the tenant a request is served for from its headers. A refusal is answered with its
/// status and message, before any tool or MCP session is involved.
pub type TenantResolver = Arc<dyn Fn(&HeaderMap) -> Result<String, TenantRefusal> + Send + Sync>;

/// Why a request was not given a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRefusal {
    pub status: StatusCode,
    pub message: String,
}

impl TenantRefusal {
    /// A malformed tenant (400).
    pub fn bad_request(message: impl Into<String>) -> TenantRefusal {
        TenantRefusal {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// Credentials that name no tenant (401).
    pub fn unauthorized(message: impl Into<String>) -> TenantRefusal {
        TenantRefusal {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
        }
    }

    /// A tenant this endpoint does not serve (403).
    pub fn forbidden(message: impl Into<String>) -> TenantRefusal {
        TenantRefusal {
            status: StatusCode::FORBIDDEN,
            message: message.into(),
        }
    }
}

impl IntoResponse for TenantRefusal {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.message,
        )
            .into_response()
    }
}

type HttpService = StreamableHttpService<ContextServer, LocalSessionManager>;

/// One tenant's server behind its own session manager.
#[derive(Clone)]
struct TenantService {
    http: HttpService,
    sessions: Arc<LocalSessionManager>,
    /// Its own cancellation token (a child of the endpoint's): cancelling it ends the tenant's
    /// sessions and their streams.
    config: StreamableHttpServerConfig,
    /// The sessions it opened, oldest first (some may have ended since).
    opened: Arc<Mutex<VecDeque<SessionId>>>,
}

/// A tenant's entry in the map.
struct Entry {
    service: TenantService,
    /// The peer address that created it (`None`: served without a peer address).
    source: Option<IpAddr>,
    last_used: Instant,
}

impl Entry {
    fn forget(self) {
        self.service.config.cancellation_token.cancel();
    }
}

impl TenantService {
    /// Records a session the tenant just opened and closes its oldest past `cap`.
    async fn opened(&self, id: SessionId, cap: usize) {
        let closing: Vec<SessionId> = {
            let mut opened = self.opened.lock().unwrap_or_else(PoisonError::into_inner);
            opened.push_back(id);
            let mut closing = Vec::new();
            if opened.len() > cap {
                // Sessions that ended on their own first.
                let live = self.sessions.sessions.try_read();
                if let Ok(live) = live {
                    opened.retain(|id| live.contains_key(id));
                }
                while opened.len() > cap {
                    if let Some(oldest) = opened.pop_front() {
                        closing.push(oldest);
                    }
                }
            }
            closing
        };
        for id in closing {
            let _ = self.sessions.close_session(&id).await;
        }
    }
}

struct Inner {
    services: Services,
    /// Everything but the tenant, which each request replaces.
    options: Options,
    config: StreamableHttpServerConfig,
    limits: TenantLimits,
    resolve: TenantResolver,
    by_tenant: Mutex<HashMap<String, Entry>>,
}

impl Inner {
    fn service(
        &self,
        tenant: &str,
        source: Option<IpAddr>,
    ) -> Result<TenantService, TenantRefusal> {
        // A panic while the lock was held cannot leave the map half-updated: every write is a
        // single insert, remove or retain.
        let mut by_tenant = self
            .by_tenant
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if let Some(entry) = by_tenant.get_mut(tenant) {
            entry.last_used = now;
            return Ok(entry.service.clone());
        }
        self.make_room(&mut by_tenant, source, now);
        let options = Options {
            tenant: tenant.to_string(),
            ..self.options.clone()
        };
        let server = ContextServer::new(self.services.clone(), options)
            .map_err(|e| TenantRefusal::bad_request(e.to_string()))?;
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(self.limits.idle);
        let sessions = Arc::new(manager);
        let mut config = self.config.clone();
        config.cancellation_token = self.config.cancellation_token.child_token();
        let http = StreamableHttpService::new(
            move || Ok(server.clone()),
            sessions.clone(),
            config.clone(),
        );
        let service = TenantService {
            http,
            sessions,
            config,
            opened: Arc::default(),
        };
        by_tenant.insert(
            tenant.to_string(),
            Entry {
                service: service.clone(),
                source,
                last_used: now,
            },
        );
        Ok(service)
    }

    /// Before a new tenant from `source` is added: forgets idle tenants, then `source`'s least
    /// recently used one when it holds its share, then, when the map is full, the least
    /// recently used tenant of the source holding the most.
    fn make_room(
        &self,
        by_tenant: &mut HashMap<String, Entry>,
        source: Option<IpAddr>,
        now: Instant,
    ) {
        let idle = self.limits.idle;
        let expired: Vec<String> = by_tenant
            .iter()
            .filter(|(_, e)| now.duration_since(e.last_used) >= idle)
            .map(|(t, _)| t.clone())
            .collect();
        for tenant in expired {
            if let Some(entry) = by_tenant.remove(&tenant) {
                entry.forget();
            }
        }
        let per_source = self.limits.tenants_per_source.max(1);
        while by_tenant.values().filter(|e| e.source == source).count() >= per_source {
            if !forget_lru(by_tenant, source) {
                break;
            }
        }
        while by_tenant.len() >= self.limits.max_tenants.max(1) {
            let mut counts: HashMap<Option<IpAddr>, usize> = HashMap::new();
            for entry in by_tenant.values() {
                *counts.entry(entry.source).or_default() += 1;
            }
            let Some((busiest, _)) = counts.into_iter().max_by_key(|(_, n)| *n) else {
                break;
            };
            if !forget_lru(by_tenant, busiest) {
                break;
            }
        }
    }
}

/// Forgets the least recently used tenant created from `source`; false when it has none.
fn forget_lru(by_tenant: &mut HashMap<String, Entry>, source: Option<IpAddr>) -> bool {
    let oldest = by_tenant
        .iter()
        .filter(|(_, e)| e.source == source)
        .min_by_key(|(_, e)| e.last_used)
        .map(|(t, _)| t.clone());
    match oldest.and_then(|t| by_tenant.remove(&t)) {
        Some(entry) => {
            entry.forget();
            true
        }
        None => false,
    }
}

/// The MCP endpoint of a multi-tenant host: mount [`TenantEndpoint::router`] and call
/// [`TenantEndpoint::shutdown`] when the host shuts down.
#[derive(Clone)]
pub struct TenantEndpoint {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TenantEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantEndpoint")
            .field("session", &self.inner.options.session)
            .field("allowed_hosts", &self.inner.config.allowed_hosts)
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl TenantEndpoint {
    /// An endpoint over `services` with the default [`TenantLimits`]. `options` give the
    /// session confinement, policy, model and window of every tenant's server; their `tenant`
    /// is replaced by what `resolve` returns for each request (it is validated like any
    /// tenant). `allowed_hosts` extends the loopback `Host` headers rmcp accepts.
    pub fn new(
        services: Services,
        options: Options,
        allowed_hosts: &[String],
        resolve: TenantResolver,
    ) -> Result<TenantEndpoint, SetupError> {
        TenantEndpoint::with_limits(
            services,
            options,
            allowed_hosts,
            resolve,
            TenantLimits::default(),
        )
    }

    /// [`TenantEndpoint::new`] with explicit bounds.
    pub fn with_limits(
        services: Services,
        options: Options,
        allowed_hosts: &[String],
        resolve: TenantResolver,
        limits: TenantLimits,
    ) -> Result<TenantEndpoint, SetupError> {
        options.validate()?;
        if limits.idle.is_zero() {
            return Err(SetupError::new("the MCP idle limit must be greater than 0"));
        }
        Ok(TenantEndpoint {
            inner: Arc::new(Inner {
                services,
                options,
                config: crate::http_config(allowed_hosts),
                limits,
                resolve,
                by_tenant: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// An axum router serving MCP at `/mcp`; merge it into the host's application.
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .route("/mcp", axum::routing::any(handle))
            .with_state(self.inner.clone())
    }

    /// Ends every MCP session and its open event streams and refuses further requests, so the
    /// host's graceful shutdown does not wait for MCP clients to hang up.
    pub fn shutdown(&self) {
        self.inner.config.cancellation_token.cancel();
    }

    /// Answers one request (what the router runs for `/mcp`). The request's source is the
    /// [`ConnectInfo`] in its extensions, when the host put one there.
    pub async fn handle(&self, request: Request) -> Response {
        handle(State(self.inner.clone()), request).await
    }

    /// How many tenants currently have a server.
    pub fn tenants(&self) -> usize {
        self.inner
            .by_tenant
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The bounds this endpoint keeps.
    pub fn limits(&self) -> TenantLimits {
        self.inner.limits
    }
}

async fn handle(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let source = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip());
    let opening =
        request.method() == Method::POST && !request.headers().contains_key("mcp-session-id");
    let service = match (inner.resolve)(request.headers()).and_then(|t| inner.service(&t, source)) {
        Ok(service) => service,
        Err(refusal) => return refusal.into_response(),
    };
    let response = service.http.handle(request).await.map(Body::new);
    if opening {
        let id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|id| id.to_str().ok());
        if let Some(id) = id {
            service
                .opened(SessionId::from(id), inner.limits.sessions_per_tenant.max(1))
                .await;
        }
    }
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    use axum::http::Request as HttpRequest;
    use ctxkeeper::core::model::Message;
    use ctxkeeper::llm::ExtractiveSummarizer;
    use ctxkeeper::store::{LocalWorkspace, SessionKey, open_store};
    use serde_json::{Value, json};

    use crate::ServerConfig;

    /// The tenant header, else `default` (the gateway's rule without the API-key hash).
    fn header_tenant(headers: &HeaderMap) -> Result<String, TenantRefusal> {
        match headers.get("x-ctxkeeper-tenant") {
            None => Ok("default".into()),
            Some(value) => value
                .to_str()
                .map(str::to_string)
                .map_err(|_| TenantRefusal::bad_request("x-ctxkeeper-tenant is not ASCII")),
        }
    }

    async fn endpoint(dir: &std::path::Path, allowed_hosts: &[String]) -> TenantEndpoint {
        let store = open_store("memory://").await.unwrap();
        for (tenant, session, text) in [
            ("default", "ours", "the default tenant's plan"),
            ("acme", "theirs", "ACMESECRET rotates monthly"),
        ] {
            let key = SessionKey::new(tenant, "default", "default", session).unwrap();
            store.append(&key, &[Message::user(text)]).await.unwrap();
        }
        let services = Services {
            store,
            archive: Arc::new(LocalWorkspace::new(dir.join("workspace")).unwrap()),
            memory: None,
            summarizer: Arc::new(ExtractiveSummarizer::default()),
            tool_calls: None,
        };
        // The default tenant, policy and model, in an 8,000-token window.
        let options = ServerConfig {
            window: Some(8_000),
            ..ServerConfig::new("memory://", dir)
        }
        .options()
        .unwrap();
        TenantEndpoint::new(services, options, allowed_hosts, Arc::new(header_tenant)).unwrap()
    }

    fn post(body: &Value, tenant: Option<&str>, session: Option<&str>) -> Request {
        let mut request = HttpRequest::post("http://127.0.0.1/mcp")
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream");
        if let Some(tenant) = tenant {
            request = request.header("x-ctxkeeper-tenant", tenant);
        }
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.body(Body::from(body.to_string())).unwrap()
    }

    fn initialize() -> Value {
        json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}
        })
    }

    async fn text(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    /// Opens an MCP session for `tenant` and returns its id.
    async fn open_session(endpoint: &TenantEndpoint, tenant: &str) -> String {
        let response = endpoint
            .handle(post(&initialize(), Some(tenant), None))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let id = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(text(response).await.contains("ctxkeeper"));
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = endpoint
            .handle(post(&initialized, Some(tenant), Some(&id)))
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        id
    }

    fn list_sessions() -> Value {
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "session_list", "arguments": {}}})
    }

    /// Lists the sessions in MCP session `id` for `tenant`.
    async fn list(endpoint: &TenantEndpoint, tenant: Option<&str>, id: &str) -> Response {
        endpoint
            .handle(post(&list_sessions(), tenant, Some(id)))
            .await
    }

    #[tokio::test]
    async fn each_request_is_served_for_the_tenant_its_headers_name() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = endpoint(dir.path(), &[]).await;

        let acme = open_session(&endpoint, "acme").await;
        let answer = text(list(&endpoint, Some("acme"), &acme).await).await;
        assert!(answer.contains(r#"\"session\":\"theirs\""#), "{answer}");
        assert!(!answer.contains("ours"), "{answer}");

        let ours = open_session(&endpoint, "default").await;
        let answer = text(list(&endpoint, None, &ours).await).await;
        assert!(answer.contains(r#"\"session\":\"ours\""#), "{answer}");
        assert!(!answer.contains("theirs"), "{answer}");
        assert_eq!(endpoint.tenants(), 2);
    }

    #[tokio::test]
    async fn a_session_id_is_honoured_only_with_its_own_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = endpoint(dir.path(), &[]).await;
        let acme = open_session(&endpoint, "acme").await;
        // The default tenant presents acme's session id: not found, and nothing of acme's.
        let response = list(&endpoint, None, &acme).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert!(!text(response).await.contains("theirs"));
    }

    #[tokio::test]
    async fn bad_tenants_and_foreign_hosts_are_refused_before_any_tool() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = endpoint(dir.path(), &[]).await;
        for tenant in ["../acme", "a/b", ""] {
            let response = endpoint
                .handle(post(&initialize(), Some(tenant), None))
                .await;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{tenant:?}");
        }
        let mut request = post(&initialize(), Some("acme"), None);
        request
            .headers_mut()
            .insert(header::HOST, "evil.example".parse().unwrap());
        let response = endpoint.handle(request).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);

        // An explicitly allowed host is accepted.
        let allowing = self::endpoint(dir.path(), &["mcp.internal".to_string()]).await;
        let mut request = post(&initialize(), Some("acme"), None);
        request
            .headers_mut()
            .insert(header::HOST, "mcp.internal".parse().unwrap());
        assert_eq!(allowing.handle(request).await.status(), StatusCode::OK);
    }

    fn from(mut request: Request, source: [u8; 4]) -> Request {
        request
            .extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((source, 40_000))));
        request
    }

    async fn endpoint_with(dir: &std::path::Path, limits: TenantLimits) -> TenantEndpoint {
        let plain = endpoint(dir, &[]).await;
        let inner = &plain.inner;
        TenantEndpoint::with_limits(
            inner.services.clone(),
            inner.options.clone(),
            &[],
            inner.resolve.clone(),
            limits,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn invented_keys_never_lock_a_real_key_out() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = endpoint(dir.path(), &[]).await;
        let limits = endpoint.limits();
        let kept = open_session(&endpoint, "acme").await;
        // 2,000 made-up keys from one address, each opening a live session.
        for i in 0..2_000 {
            let request = from(
                post(&initialize(), Some(&format!("made-up-{i}")), None),
                [10, 0, 0, 2],
            );
            let response = endpoint.handle(request).await;
            assert_eq!(response.status(), StatusCode::OK, "key {i}");
        }
        assert!(endpoint.tenants() <= limits.tenants_per_source + 1);
        // A tenant from another address kept its session.
        let answer = text(list(&endpoint, Some("acme"), &kept).await).await;
        assert!(answer.contains("theirs"), "{answer}");
        // A real key from the flooding address itself is served too.
        let response = endpoint
            .handle(from(
                post(&initialize(), Some("default"), None),
                [10, 0, 0, 2],
            ))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn a_full_map_forgets_the_busiest_sources_oldest_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let limits = TenantLimits {
            max_tenants: 8,
            tenants_per_source: 6,
            ..TenantLimits::default()
        };
        let endpoint = endpoint_with(dir.path(), limits).await;
        let kept = open_session(&endpoint, "acme").await;
        for (source, n) in [(2, 20), (3, 20)] {
            for i in 0..n {
                let tenant = format!("s{source}-{i}");
                let request = from(post(&initialize(), Some(&tenant), None), [10, 0, 0, source]);
                assert_eq!(endpoint.handle(request).await.status(), StatusCode::OK);
            }
        }
        assert!(endpoint.tenants() <= 8);
        let answer = text(list(&endpoint, Some("acme"), &kept).await).await;
        assert!(answer.contains("theirs"), "{answer}");
    }

    #[tokio::test]
    async fn an_idle_tenant_is_forgotten_with_its_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let limits = TenantLimits {
            idle: Duration::from_millis(300),
            ..TenantLimits::default()
        };
        let endpoint = endpoint_with(dir.path(), limits).await;
        let old = open_session(&endpoint, "acme").await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        open_session(&endpoint, "default").await;
        assert_eq!(endpoint.tenants(), 1);
        let response = list(&endpoint, Some("acme"), &old).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn a_tenants_sessions_are_bounded_oldest_closed_first() {
        let dir = tempfile::tempdir().unwrap();
        let limits = TenantLimits {
            sessions_per_tenant: 2,
            ..TenantLimits::default()
        };
        let endpoint = endpoint_with(dir.path(), limits).await;
        let first = open_session(&endpoint, "acme").await;
        let second = open_session(&endpoint, "acme").await;
        let third = open_session(&endpoint, "acme").await;
        // Closing runs through the session's worker: give it a moment.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = |id: String| {
            let endpoint = endpoint.clone();
            async move { list(&endpoint, Some("acme"), &id).await.status() }
        };
        assert_eq!(status(first).await, StatusCode::NOT_FOUND);
        assert_eq!(status(second).await, StatusCode::OK);
        assert_eq!(status(third).await, StatusCode::OK);
    }

    #[tokio::test]
    async fn shutdown_refuses_further_requests() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = endpoint(dir.path(), &[]).await;
        let acme = open_session(&endpoint, "acme").await;
        endpoint.shutdown();
        let response = list(&endpoint, Some("acme"), &acme).await;
        assert!(!response.status().is_success(), "{:?}", response.status());
        assert!(!text(response).await.contains("theirs"));
    }
}
