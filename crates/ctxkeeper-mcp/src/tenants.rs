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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};

use crate::{ContextServer, Options, Services, SetupError};

/// Most tenants kept warm at once. Tenant names come from request headers, so the map must be
/// bounded; beyond this, tenants without a live MCP session are forgotten (their next request
/// simply builds a fresh server), and only when every one of them has a live session are new
/// tenants refused with 503.
pub const MAX_TENANTS: usize = 1_024;

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
}

impl TenantService {
    /// Whether the tenant has no live MCP session (so forgetting it loses nothing). A session
    /// map that is being written to right now counts as live.
    fn idle(&self) -> bool {
        self.sessions
            .sessions
            .try_read()
            .is_ok_and(|live| live.is_empty())
    }
}

struct Inner {
    services: Services,
    /// Everything but the tenant, which each request replaces.
    options: Options,
    config: StreamableHttpServerConfig,
    resolve: TenantResolver,
    by_tenant: Mutex<HashMap<String, TenantService>>,
}

impl Inner {
    fn service(&self, tenant: &str) -> Result<TenantService, TenantRefusal> {
        // A panic while the lock was held cannot leave the map half-updated: every write is a
        // single insert or retain.
        let mut by_tenant = self
            .by_tenant
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(service) = by_tenant.get(tenant) {
            return Ok(service.clone());
        }
        if by_tenant.len() >= MAX_TENANTS {
            by_tenant.retain(|_, service| !service.idle());
            if by_tenant.len() >= MAX_TENANTS {
                return Err(TenantRefusal {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    message: format!(
                        "{MAX_TENANTS} tenants have open MCP sessions; try again later"
                    ),
                });
            }
        }
        let options = Options {
            tenant: tenant.to_string(),
            ..self.options.clone()
        };
        let server = ContextServer::new(self.services.clone(), options)
            .map_err(|e| TenantRefusal::bad_request(e.0))?;
        let sessions = Arc::new(LocalSessionManager::default());
        let http = StreamableHttpService::new(
            move || Ok(server.clone()),
            sessions.clone(),
            self.config.clone(),
        );
        let service = TenantService { http, sessions };
        by_tenant.insert(tenant.to_string(), service.clone());
        Ok(service)
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
            .finish_non_exhaustive()
    }
}

impl TenantEndpoint {
    /// An endpoint over `services`. `options` give the session confinement, policy, model and
    /// window of every tenant's server; their `tenant` is replaced by what `resolve` returns
    /// for each request (it is validated like any tenant). `allowed_hosts` extends the
    /// loopback `Host` headers rmcp accepts.
    pub fn new(
        services: Services,
        options: Options,
        allowed_hosts: &[String],
        resolve: TenantResolver,
    ) -> Result<TenantEndpoint, SetupError> {
        options.validate()?;
        Ok(TenantEndpoint {
            inner: Arc::new(Inner {
                services,
                options,
                config: crate::http_config(allowed_hosts),
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

    /// Answers one request (what the router runs for `/mcp`).
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
}

async fn handle(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let service = match (inner.resolve)(request.headers()).and_then(|t| inner.service(&t)) {
        Ok(service) => service,
        Err(refusal) => return refusal.into_response(),
    };
    service.http.handle(request).await.map(Body::new)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    use axum::http::Request as HttpRequest;
    use ctxkeeper::core::engine::presets;
    use ctxkeeper::core::model::Message;
    use ctxkeeper::core::tokens::{Profiles, TokenModel};
    use ctxkeeper::llm::ExtractiveSummarizer;
    use ctxkeeper::store::{LocalWorkspace, SessionKey, open_store};
    use serde_json::{Value, json};

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
        };
        let options = Options {
            tenant: "default".into(),
            session: None,
            policy: presets::preset("default").unwrap(),
            model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
            window: 8_000,
        };
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

    #[tokio::test]
    async fn each_request_is_served_for_the_tenant_its_headers_name() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = endpoint(dir.path(), &[]).await;

        let acme = open_session(&endpoint, "acme").await;
        let answer = text(
            endpoint
                .handle(post(&list_sessions(), Some("acme"), Some(&acme)))
                .await,
        )
        .await;
        assert!(answer.contains(r#"\"session\":\"theirs\""#), "{answer}");
        assert!(!answer.contains("ours"), "{answer}");

        let ours = open_session(&endpoint, "default").await;
        let answer = text(
            endpoint
                .handle(post(&list_sessions(), None, Some(&ours)))
                .await,
        )
        .await;
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
        let response = endpoint
            .handle(post(&list_sessions(), None, Some(&acme)))
            .await;
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

    #[tokio::test]
    async fn idle_tenants_are_forgotten_once_the_map_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = endpoint(dir.path(), &[]).await;
        let kept = open_session(&endpoint, "acme").await;
        for i in 0..MAX_TENANTS + 5 {
            let mut request = post(&initialize(), Some(&format!("t{i}")), None);
            // A foreign host: the tenant's server is built, but no session is ever opened.
            request
                .headers_mut()
                .insert(header::HOST, "evil.example".parse().unwrap());
            endpoint.handle(request).await;
        }
        assert!(endpoint.tenants() <= MAX_TENANTS);
        // The tenant with a live session survived the eviction.
        let answer = text(
            endpoint
                .handle(post(&list_sessions(), Some("acme"), Some(&kept)))
                .await,
        )
        .await;
        assert!(answer.contains("theirs"), "{answer}");
    }

    #[tokio::test]
    async fn shutdown_refuses_further_requests() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = endpoint(dir.path(), &[]).await;
        let acme = open_session(&endpoint, "acme").await;
        endpoint.shutdown();
        let response = endpoint
            .handle(post(&list_sessions(), Some("acme"), Some(&acme)))
            .await;
        assert!(!response.status().is_success(), "{:?}", response.status());
        assert!(!text(response).await.contains("theirs"));
    }
}
