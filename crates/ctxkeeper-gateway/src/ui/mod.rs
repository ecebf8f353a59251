//! The web console under `/ui`: every session of a tenant, how each session's context grew
//! and was compacted, what each compaction archived (readable back, paged), a search over a
//! session's log and archive, live updates, and the totals `/metrics` counts.
//!
//! | route | page |
//! | --- | --- |
//! | `GET /ui` | the login form, or a redirect to the caller's tenant |
//! | `POST /ui/login`, `POST /ui/logout` | sets / clears the console's cookie |
//! | `GET /ui/t/{tenant}/sessions?sort=…&q=…` | the tenant's sessions; for the admin also every tenant holding sessions, with its count and a link |
//! | `GET /ui/t/{tenant}/sessions/{id}?page=…` | one session: chart, summary, capsule, standing orders, compactions |
//! | `POST /ui/t/{tenant}/sessions/{id}/orders/{n}` | `action=pin\|unpin\|withdraw\|reinstate` on standing order `n`, then back to the session (inside the gateway only) |
//! | `GET /ui/t/{tenant}/sessions/{id}/archive?ref=…&offset=…` | an archived item, paged |
//! | `GET /ui/t/{tenant}/sessions/{id}/search?q=…` | search of the session's log and archive |
//! | `GET /ui/t/{tenant}/sessions/{id}/events` | the session's events (server-sent events) |
//! | `GET /ui/t/{tenant}/totals` | per-tenant totals (and the process's, for the admin) |
//! | `GET /ui/assets/…` | the stylesheet and the one script, embedded in the binary |
//!
//! **Access** is the admin API's ([`crate::admin`]), checked by the same function: the admin
//! token reaches every tenant, a tenant token only its own. A browser cannot send a bearer
//! header when following a link, so the login form stores the token in an `HttpOnly`,
//! `SameSite=Strict` cookie scoped to `/ui`; a request with an `Authorization` header uses that
//! instead. Only the admin (the admin token, or the open loopback console) sees the list of
//! tenants; a tenant token's pages never name another tenant. With no token configured the
//! console is open only when the server listens on a loopback address and the request names
//! a loopback host (not a DNS name rebound to it), and refused otherwise. Every form post must also come from the console's own pages
//! (its `Origin`, when a browser sends one, names this host): on an open loopback console
//! there is no cookie that another site's form would lack.
//!
//! **Rendering** is on the server ([maud](https://maud.lambda.xyz), which escapes every
//! interpolated value); the chart is an SVG drawn on the server ([`chart`]). Every answer
//! carries a strict Content-Security-Policy (no inline script or style, nothing from other
//! origins) and is not cached. No token, API key or store URL is ever rendered.
//!
//! The data: the session's state (its context, and the [`timeline`](crate::sessions::timeline) the gateway records in it
//! with every committed step), its log (full-text search) and the archive (read, grep). The
//! same pages run inside `ctxkeeper serve` ([`Console::for_gateway`]) and over a store alone
//! (`ctxkeeper ui`, [`Console::standalone`]); only inside the gateway may they change a
//! session (its standing orders), since the gateway serving a session owns its state.

mod archive_text;
pub mod chart;
mod pages;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use ctxkeeper_store::archive::{ArchiveRef, Offloader};
use ctxkeeper_store::events::{Delivery, EventBus, EventSubscription};
use ctxkeeper_store::{SessionKey, SessionStore, StoreError};
use futures_util::Stream;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde::Deserialize;

use crate::Gateway;
use crate::admin::{OrderEdit, OrderEditError, apply_order_edit};
use crate::metrics::Metrics;
use crate::sessions::Subscription;
use crate::tenancy::{TENANT_HEADER, TenantRule};

/// The cookie the login form sets.
const COOKIE: &str = "ctxkeeper_console";
/// The policy every console answer carries: scripts and styles from the console's own
/// assets only (no inline code), no frames, no plug-ins, forms post to the console only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";
/// Bytes of an archived item shown per page.
pub const ARCHIVE_PAGE: u64 = 64 * 1024;

/// Characters left as they are in a path segment or query value; everything else is
/// percent-encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes one URL component (a tenant, a session id, an archive reference).
pub(crate) fn enc(text: &str) -> String {
    utf8_percent_encode(text, COMPONENT).to_string()
}

/// Who may use the console.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The admin token: every tenant.
    pub admin_token: Option<String>,
    /// Tenant tokens: their own tenant only.
    pub tenants: TenantRule,
    /// The server listens on a loopback address only: without any token the console is open.
    pub loopback: bool,
}

impl Access {
    /// Access for a server listening on `ip`.
    pub fn new(admin_token: Option<String>, tenants: TenantRule, ip: IpAddr) -> Access {
        Access {
            admin_token,
            tenants,
            loopback: ip.is_loopback(),
        }
    }

    fn open(&self) -> bool {
        self.admin_token.is_none() && !self.tenants.has_tokens()
    }
}

/// Where a page's live updates come from.
#[derive(Clone)]
enum Live {
    /// The gateway's own events (counted in its metrics).
    Gateway(Arc<Gateway>),
    /// The store's event bus (across processes for Redis and PostgreSQL).
    Bus(Arc<dyn EventBus>),
}

enum LiveSubscription {
    Gateway(Subscription),
    Bus(EventSubscription),
}

impl LiveSubscription {
    async fn recv(&mut self) -> Option<Delivery> {
        match self {
            LiveSubscription::Gateway(s) => s.recv().await,
            LiveSubscription::Bus(s) => s.recv().await,
        }
    }
}

/// The console's state: where it reads sessions, archived content and events, and who may.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn SessionStore>,
    archive: Arc<dyn Offloader>,
    access: Access,
    live: Live,
    metrics: Option<Arc<Metrics>>,
    archive_text: archive_text::ArchiveText,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("loopback", &self.inner.access.loopback)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// The console of a running gateway: its store, archive, events, metrics and tokens.
    pub fn for_gateway(gateway: &Arc<Gateway>) -> Console {
        let config = &gateway.config;
        Console {
            inner: Arc::new(Inner {
                store: gateway.sessions.store().clone(),
                archive: gateway.sessions.archive().clone(),
                access: Access::new(
                    config.admin_token.clone(),
                    config.tenants.clone(),
                    config.listen.ip(),
                ),
                live: Live::Gateway(gateway.clone()),
                metrics: Some(gateway.metrics.clone()),
                archive_text: Default::default(),
            }),
        }
    }

    /// A console over a store without a gateway (`ctxkeeper ui`).
    pub fn standalone(
        store: Arc<dyn SessionStore>,
        archive: Arc<dyn Offloader>,
        bus: Arc<dyn EventBus>,
        access: Access,
    ) -> Console {
        Console {
            inner: Arc::new(Inner {
                store,
                archive,
                access,
                live: Live::Bus(bus),
                metrics: None,
                archive_text: Default::default(),
            }),
        }
    }

    /// Every console route, under `/ui`.
    pub fn router(self) -> Router {
        Router::new()
            .route("/ui", get(landing))
            .route("/ui/", get(landing))
            .route("/ui/login", post(login))
            .route("/ui/logout", post(logout))
            .route("/ui/assets/console.css", get(css))
            .route("/ui/assets/console.js", get(js))
            .route("/ui/t/{tenant}/sessions", get(sessions_page))
            .route("/ui/t/{tenant}/sessions/{id}", get(session_page))
            .route("/ui/t/{tenant}/sessions/{id}/archive", get(archive_page))
            .route("/ui/t/{tenant}/sessions/{id}/search", get(search_page))
            .route("/ui/t/{tenant}/sessions/{id}/events", get(events))
            .route("/ui/t/{tenant}/sessions/{id}/orders/{n}", post(edit_order))
            .route("/ui/t/{tenant}/totals", get(totals_page))
            // Unknown console paths answer the console's own 404 page; the rest of the
            // server keeps its own.
            .route("/ui/{*rest}", get(not_found))
            .with_state(self)
            .layer(axum::middleware::map_response(secure_headers))
    }

    pub(crate) fn store(&self) -> &Arc<dyn SessionStore> {
        &self.inner.store
    }

    pub(crate) fn archive(&self) -> &Arc<dyn Offloader> {
        &self.inner.archive
    }

    pub(crate) fn archive_text(&self) -> &archive_text::ArchiveText {
        &self.inner.archive_text
    }

    pub(crate) fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.inner.metrics.as_ref()
    }

    /// The gateway whose sessions this console may change: none when standalone, where a
    /// gateway serving the session would race the edit.
    fn gateway(&self) -> Option<&Arc<Gateway>> {
        match &self.inner.live {
            Live::Gateway(gateway) => Some(gateway),
            Live::Bus(_) => None,
        }
    }

    /// Whether the pages offer edits (see [`Console::gateway`]).
    pub(crate) fn edits(&self) -> bool {
        self.gateway().is_some()
    }

    /// Checks the caller's credentials for `tenant`.
    fn authorize(&self, headers: &HeaderMap, tenant: &str) -> Result<Caller, Denied> {
        ctxkeeper_store::state::validate_identifier("tenant", tenant)
            .map_err(|e| Denied::BadRequest(e.to_string()))?;
        let access = &self.inner.access;
        if access.open() {
            return if access.loopback && loopback_host(headers) {
                Ok(Caller { admin: true })
            } else {
                Err(Denied::Disabled)
            };
        }
        let token = credentials(headers).ok_or(Denied::Login)?;
        let mut scoped = HeaderMap::new();
        let bearer =
            HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| Denied::Login)?;
        scoped.insert(header::AUTHORIZATION, bearer);
        scoped.insert(
            HeaderName::from_static(TENANT_HEADER),
            HeaderValue::from_str(tenant).map_err(|_| Denied::Forbidden)?,
        );
        match crate::admin::authorize_with(access.admin_token.as_deref(), &access.tenants, &scoped)
        {
            Ok(granted) if granted == tenant => Ok(Caller {
                admin: access.admin_token.as_deref().is_some_and(|admin| {
                    crate::admin::constant_time_eq(token.as_bytes(), admin.as_bytes())
                }),
            }),
            Ok(_) => Err(Denied::Forbidden),
            Err(err) if err.status == StatusCode::FORBIDDEN => Err(Denied::Forbidden),
            Err(_) => Err(Denied::Login),
        }
    }

    /// The tenant the caller's credentials name by themselves: the tenant token's, or
    /// `default` for the admin token and an open console.
    fn home_tenant(&self, headers: &HeaderMap) -> Result<String, Denied> {
        let access = &self.inner.access;
        if access.open() {
            return if access.loopback && loopback_host(headers) {
                Ok(crate::tenancy::DEFAULT_TENANT.to_string())
            } else {
                Err(Denied::Disabled)
            };
        }
        let token = credentials(headers).ok_or(Denied::Login)?;
        token_tenant(access, &token).ok_or(Denied::Login)
    }

    fn subscribe(&self, key: &SessionKey) -> LiveSubscription {
        match &self.inner.live {
            Live::Gateway(gateway) => LiveSubscription::Gateway(gateway.sessions.subscribe(key)),
            Live::Bus(bus) => LiveSubscription::Bus(bus.subscribe(key)),
        }
    }
}

/// Whether the request names a loopback host. A console open without a token must not answer
/// a page whose DNS name was rebound to 127.0.0.1: the browser would let that site read it.
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The tenant a token reaches without naming one, if it is a valid token.
fn token_tenant(access: &Access, token: &str) -> Option<String> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).ok()?,
    );
    crate::admin::authorize_with(access.admin_token.as_deref(), &access.tenants, &headers).ok()
}

/// What a page knows about the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller {
    /// The admin (or an open loopback console): may see the whole process's figures.
    pub(crate) admin: bool,
}

/// Why a page was refused.
#[derive(Debug)]
pub(crate) enum Denied {
    /// No or wrong credentials: the login form.
    Login,
    /// Valid credentials for another tenant.
    Forbidden,
    /// No token configured and not on loopback.
    Disabled,
    BadRequest(String),
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        match self {
            Denied::Login => (
                StatusCode::UNAUTHORIZED,
                pages::login(Some("Sign in with the admin token or a tenant token.")),
            )
                .into_response(),
            Denied::Forbidden => pages::error(
                StatusCode::FORBIDDEN,
                "These credentials do not reach this tenant.",
            ),
            Denied::Disabled => pages::error(
                StatusCode::FORBIDDEN,
                "The console is disabled: start the server with --admin-token (or \
                 --tenant-token), or listen on a loopback address and open it as \
                 localhost or 127.0.0.1.",
            ),
            Denied::BadRequest(message) => pages::error(StatusCode::BAD_REQUEST, &message),
        }
    }
}

/// A failed page: a store error, an unknown session or item.
pub(crate) enum PageError {
    Denied(Denied),
    NotFound(String),
    BadRequest(String),
    Store(String),
}

impl From<Denied> for PageError {
    fn from(denied: Denied) -> PageError {
        PageError::Denied(denied)
    }
}

impl From<StoreError> for PageError {
    fn from(err: StoreError) -> PageError {
        match err {
            StoreError::InvalidInput(message) => PageError::BadRequest(message),
            StoreError::NotFound(message) => PageError::NotFound(message),
            other => PageError::Store(other.to_string()),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        match self {
            PageError::Denied(denied) => denied.into_response(),
            PageError::NotFound(message) => pages::error(StatusCode::NOT_FOUND, &message),
            PageError::BadRequest(message) => pages::error(StatusCode::BAD_REQUEST, &message),
            PageError::Store(message) => {
                tracing::warn!(%message, "console: store error");
                pages::error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "The store failed to answer; see the server's log.",
                )
            }
        }
    }
}

/// The bearer token of the request: its `Authorization` header, else the console's cookie.
fn credentials(headers: &HeaderMap) -> Option<String> {
    if let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(token.to_string());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .and_then(|(_, value)| percent_decode_str(value).decode_utf8().ok())
        .map(|token| token.into_owned())
        .filter(|token| !token.is_empty())
}

/// Headers on every console answer.
async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // `same-origin`, not `no-referrer`: with the latter a browser posts forms with
    // `Origin: null`, and the login's same-origin check could not tell the console's own form.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

fn session_key(tenant: &str, id: &str) -> Result<SessionKey, PageError> {
    SessionKey::new(tenant, SessionKey::DEFAULT, SessionKey::DEFAULT, id).map_err(PageError::from)
}

async fn landing(State(console): State<Console>, headers: HeaderMap) -> Response {
    match console.home_tenant(&headers) {
        Ok(tenant) => Redirect::to(&format!("/ui/t/{}/sessions", enc(&tenant))).into_response(),
        Err(Denied::Login) if credentials(&headers).is_none() => pages::login(None).into_response(),
        Err(denied) => denied.into_response(),
    }
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// Whether a form post comes from the console's own pages: a browser names the page's origin
/// in `Origin`, which must be this server's host (a client that sends none is no browser
/// form). Keeps another site from signing a visitor in or out.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin = origin.to_str().ok().and_then(|o| {
        o.strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"))
    });
    matches!((origin, host), (Some(origin), Some(host)) if origin.eq_ignore_ascii_case(host))
}

fn cross_site() -> Response {
    pages::error(
        StatusCode::FORBIDDEN,
        "This form was posted from another site.",
    )
}

async fn login(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    let token = form.token.trim();
    let access = &console.inner.access;
    match token_tenant(access, token).filter(|_| !token.is_empty()) {
        Some(tenant) => {
            let cookie = format!(
                "{COOKIE}={}; Path=/ui; HttpOnly; SameSite=Strict",
                enc(token)
            );
            let mut response =
                Redirect::to(&format!("/ui/t/{}/sessions", enc(&tenant))).into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        None if access.open() => Redirect::to("/ui/").into_response(),
        None => (
            StatusCode::UNAUTHORIZED,
            pages::login(Some("That token is not valid here.")),
        )
            .into_response(),
    }
}

async fn logout(headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    let mut response = Redirect::to("/ui/").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "ctxkeeper_console=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    response
}

async fn css() -> Response {
    asset(
        "text/css; charset=utf-8",
        include_str!("assets/console.css"),
    )
}

async fn js() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/console.js"),
    )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

async fn not_found() -> Response {
    pages::error(StatusCode::NOT_FOUND, "No such console page.")
}

#[derive(Deserialize, Default)]
struct ListParams {
    sort: Option<String>,
    q: Option<String>,
}

async fn sessions_page(
    State(console): State<Console>,
    Path(tenant): Path<String>,
    Query(params): Query<ListParams>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let caller = console.authorize(&headers, &tenant)?;
    pages::sessions(
        &console,
        caller,
        &tenant,
        params.sort.as_deref(),
        params.q.as_deref(),
    )
    .await
}

#[derive(Deserialize, Default)]
struct SessionParams {
    page: Option<usize>,
}

async fn session_page(
    State(console): State<Console>,
    Path((tenant, id)): Path<(String, String)>,
    Query(params): Query<SessionParams>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    console.authorize(&headers, &tenant)?;
    let key = session_key(&tenant, &id)?;
    pages::session(&console, &key, params.page.unwrap_or(1)).await
}

#[derive(Deserialize)]
struct ArchiveParams {
    #[serde(rename = "ref")]
    reference: String,
    offset: Option<u64>,
}

async fn archive_page(
    State(console): State<Console>,
    Path((tenant, id)): Path<(String, String)>,
    Query(params): Query<ArchiveParams>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    console.authorize(&headers, &tenant)?;
    let key = session_key(&tenant, &id)?;
    // The archive checks the reference against the session's scope: one of another
    // session or tenant, or one that climbs out, reads as not found.
    let reference = ArchiveRef(params.reference);
    pages::archived(&console, &key, &reference, params.offset.unwrap_or(0)).await
}

#[derive(Deserialize)]
struct SearchParams {
    q: Option<String>,
}

async fn search_page(
    State(console): State<Console>,
    Path((tenant, id)): Path<(String, String)>,
    Query(params): Query<SearchParams>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    console.authorize(&headers, &tenant)?;
    let key = session_key(&tenant, &id)?;
    pages::search(&console, &key, params.q.as_deref().unwrap_or("")).await
}

async fn totals_page(
    State(console): State<Console>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let caller = console.authorize(&headers, &tenant)?;
    pages::totals(&console, caller, &tenant).await
}

/// The session's events from now on, as the gateway's own event stream sends them.
async fn events(
    State(console): State<Console>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, PageError> {
    console.authorize(&headers, &tenant)?;
    let key = session_key(&tenant, &id)?;
    let subscription = console.subscribe(&key);
    let stream = futures_util::stream::unfold(subscription, |mut subscription| async move {
        let event = match subscription.recv().await? {
            Delivery::Event(event) => SseEvent::default()
                .event(event.name.clone())
                .data(event.data.to_string()),
            Delivery::Lost { missed } => SseEvent::default()
                .event("events_lost")
                .data(serde_json::json!({"type": "events_lost", "missed": missed}).to_string()),
            _ => return None,
        };
        Some((Ok(event), subscription))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

#[derive(Deserialize)]
struct OrderForm {
    #[serde(default)]
    action: String,
}

/// One button of the session page's standing orders: the edit the admin API's
/// `PATCH /admin/sessions/{id}/orders/{n}` makes, then back to the session page.
async fn edit_order(
    State(console): State<Console>,
    Path((tenant, id, n)): Path<(String, String, String)>,
    headers: HeaderMap,
    form: Result<Form<OrderForm>, FormRejection>,
) -> Result<Response, PageError> {
    if !same_origin(&headers) {
        return Ok(cross_site());
    }
    console.authorize(&headers, &tenant)?;
    let Some(gateway) = console.gateway() else {
        return Ok(read_only());
    };
    let key = session_key(&tenant, &id)?;
    let index: usize = n.parse().map_err(|_| {
        PageError::BadRequest(format!(
            "{n:?} is not a standing order's number (0, 1, 2, …)"
        ))
    })?;
    let action = form.map(|Form(form)| form.action).unwrap_or_default();
    let actions = OrderEdit::ACTIONS.join(", ");
    let edit = OrderEdit::action(&action).ok_or_else(|| {
        PageError::BadRequest(format!(
            "unknown action {action:?}: the form's action is one of {actions}"
        ))
    })?;
    match apply_order_edit(&gateway.sessions, &key, index, edit).await {
        Ok(_) => Ok(Redirect::to(&format!("{}#orders", pages::session_href(&key))).into_response()),
        Err(OrderEditError::UnknownSession) => Err(PageError::NotFound(format!(
            "no session {id:?} in this tenant"
        ))),
        Err(OrderEditError::UnknownOrder(why)) => Err(PageError::BadRequest(why)),
        Err(OrderEditError::Empty) => Err(PageError::BadRequest("nothing to change".into())),
        Err(OrderEditError::Session(err)) => Err(PageError::Store(err.to_string())),
    }
}

/// The standalone console's answer to an edit: 405, with no method allowed.
fn read_only() -> Response {
    let mut response = pages::error(StatusCode::METHOD_NOT_ALLOWED, pages::READ_ONLY_ORDERS);
    // An empty `Allow`: the resource is disabled here, not served by another method.
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(""));
    response
}

/// The process-wide counters the totals page shows, named as `/metrics` exports them.
pub(crate) fn metrics_figures(metrics: &Metrics) -> Vec<(&'static str, u64)> {
    [
        ("ctxkeeper_compactions_total", &metrics.compactions),
        ("ctxkeeper_tokens_saved_total", &metrics.tokens_saved),
        (
            "ctxkeeper_overflow_recoveries_total",
            &metrics.overflow_recoveries,
        ),
        (
            "ctxkeeper_recoveries_refused_total",
            &metrics.recoveries_refused,
        ),
        ("ctxkeeper_steps_abandoned_total", &metrics.steps_abandoned),
        ("ctxkeeper_session_forks_total", &metrics.session_forks),
        ("ctxkeeper_warm_sessions", &metrics.warm_sessions),
    ]
    .into_iter()
    .map(|(name, counter)| (name, Metrics::get(counter)))
    .collect()
}

impl Console {
    /// Serves the console alone on `listener` until `shutdown` completes (`ctxkeeper ui`).
    /// Open event streams end at shutdown, so the graceful stop does not wait for browsers.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let live = self.inner.live.clone();
        let app = self
            .router()
            .route("/", get(|| async { Redirect::to("/ui/") }))
            .layer(tower_http::catch_panic::CatchPanicLayer::new());
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                shutdown.await;
                if let Live::Bus(bus) = live {
                    bus.close();
                }
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: HeaderName, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_str(value).expect("header"));
        headers
    }

    #[test]
    fn only_loopback_hosts_reach_an_open_console() {
        for host in [
            "127.0.0.1:8787",
            "localhost:1",
            "LOCALHOST",
            "[::1]:8787",
            "127.0.0.2",
        ] {
            assert!(loopback_host(&with(header::HOST, host)), "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:8787",
            "10.0.0.1:80",
            "[::2]:1",
        ] {
            assert!(!loopback_host(&with(header::HOST, host)), "{host}");
        }
        assert!(!loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn the_token_comes_from_the_header_else_the_cookie() {
        let bearer = with(header::AUTHORIZATION, "Bearer abc-123");
        assert_eq!(credentials(&bearer).as_deref(), Some("abc-123"));
        let cookie = with(header::COOKIE, "other=1; ctxkeeper_console=a%3Bb%20c; x=2");
        assert_eq!(credentials(&cookie).as_deref(), Some("a;b c"));
        assert_eq!(
            credentials(&with(header::COOKIE, "ctxkeeper_console=")),
            None
        );
        assert_eq!(credentials(&HeaderMap::new()), None);
    }

    #[test]
    fn form_posts_must_come_from_this_host() {
        let mut headers = with(header::HOST, "127.0.0.1:8787");
        assert!(same_origin(&headers), "no Origin: not a browser form");
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8787"),
        );
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&headers));
    }

    #[test]
    fn components_are_percent_encoded() {
        assert_eq!(enc("sessions/s 1/a.txt"), "sessions%2Fs%201%2Fa.txt");
        assert_eq!(enc("a-b_c.d~e"), "a-b_c.d~e");
        assert_eq!(enc("\"><script>"), "%22%3E%3Cscript%3E");
    }
}
