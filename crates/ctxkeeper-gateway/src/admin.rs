//! The admin API under `/admin`, behind `Authorization: Bearer <token>`. The admin token
//! reaches every tenant: the one `x-ctxkeeper-tenant` names, `default` when absent. A tenant
//! token (`--tenant-token TENANT=TOKEN`) reaches only its own tenant.
//!
//! | route | does |
//! | --- | --- |
//! | `GET /admin/sessions` | the tenant's sessions, most recent first |
//! | `GET /admin/sessions/{id}` | context statistics of one session |
//! | `POST /admin/sessions/{id}/clear` | empties the session's context (its log stays) |
//! | `POST /admin/sessions/{id}/rebuild` | rebuilds the context from the session log (for a state that cannot be read) |
//! | `GET /admin/sessions/{id}/policy` | its policy overrides and the effective policy |
//! | `PATCH /admin/sessions/{id}/policy` | merges a TOML (or JSON) fragment into its overrides |
//! | `GET /admin/sessions/{id}/search?q=…&limit=…` | full-text search of its log |
//! | `GET /admin/sessions/{id}/orders` | its standing orders (rules, constraints, facts, preferences, goal), current or not |
//! | `PATCH /admin/sessions/{id}/orders/{n}` | `{"pinned": true\|false, "current": true\|false}`: pin, unpin, withdraw or reinstate order `n` (the capsule shows it from the next compaction) |
//!
//! Without a configured token the whole API answers 403 and says how to enable it; a missing
//! or wrong token answers 401. Errors use the OpenAI error shape.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use ctxkeeper_core::orders::StandingOrder;
use ctxkeeper_store::{SearchQuery, SessionFilter, SessionKey, StoreError};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Gateway;
use crate::error::ApiError;
use crate::sessions::{PatchError, SessionError, Sessions};
use crate::tenancy::{TENANT_HEADER, TenantRule};

/// The admin routes, to be nested under `/admin`.
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/sessions", get(list))
        .route("/sessions/{id}", get(stats))
        .route("/sessions/{id}/clear", post(clear))
        .route("/sessions/{id}/rebuild", post(rebuild))
        .route("/sessions/{id}/policy", get(policy).patch(patch_policy))
        .route("/sessions/{id}/search", get(search))
        .route("/sessions/{id}/orders", get(orders))
        .route("/sessions/{id}/orders/{n}", patch(edit_order))
}

/// Checks the bearer token and returns the tenant the request is scoped to: the admin token
/// reaches any tenant (`x-ctxkeeper-tenant`, else `default`); a tenant token only its own
/// (a header naming another is refused with 403).
fn authorize(gw: &Gateway, headers: &HeaderMap) -> Result<String, ApiError> {
    authorize_with(
        gw.config.admin_token.as_deref(),
        &gw.config.tenants,
        headers,
    )
}

/// [`authorize`] against an admin token and tenant tokens given apart from a gateway (the
/// console served by `ctxkeeper ui` checks its credentials with it too).
pub(crate) fn authorize_with(
    admin_token: Option<&str>,
    tenants: &TenantRule,
    headers: &HeaderMap,
) -> Result<String, ApiError> {
    if admin_token.is_none() && !tenants.has_tokens() {
        return Err(ApiError::forbidden(
            "the admin API is disabled: start the gateway with --admin-token (or --tenant-token \
             for tenant-scoped access) to enable it",
        ));
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let named = match headers.get(TENANT_HEADER) {
        Some(value) => {
            let tenant = value
                .to_str()
                .map_err(|_| ApiError::invalid_request("x-ctxkeeper-tenant is not ASCII"))?;
            ctxkeeper_store::state::validate_identifier("tenant", tenant)
                .map_err(|e| ApiError::invalid_request(e.to_string()))?;
            Some(tenant)
        }
        None => None,
    };
    if let Some(expected) = admin_token
        && constant_time_eq(given.as_bytes(), expected.as_bytes())
    {
        return Ok(named.unwrap_or(crate::tenancy::DEFAULT_TENANT).to_string());
    }
    match tenants.token_tenant(given) {
        Some(tenant) if named.is_none_or(|named| named == tenant) => Ok(tenant.to_string()),
        Some(_) => Err(ApiError::forbidden(
            "this tenant token does not reach the tenant x-ctxkeeper-tenant names",
        )),
        None => Err(ApiError::unauthorized(
            "missing or wrong admin token (Authorization: Bearer <admin-token or tenant token>)",
        )),
    }
}

/// Compares without stopping at the first difference, so response timing does not reveal
/// how much of a guessed token was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, byte) in b.iter().enumerate() {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ byte);
    }
    diff == 0
}

fn key(tenant: &str, id: &str) -> Result<SessionKey, ApiError> {
    SessionKey::new(tenant, SessionKey::DEFAULT, SessionKey::DEFAULT, id)
        .map_err(|e| ApiError::invalid_request(e.to_string()))
}

/// The session a route `/admin/sessions/{id}…` names, in the tenant the request is scoped
/// to: extracting it authorizes the request (before a byte of its body is read).
struct TenantSession {
    id: String,
    tenant: String,
    key: SessionKey,
}

impl FromRequestParts<Arc<Gateway>> for TenantSession {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, gw: &Arc<Gateway>) -> Result<Self, Response> {
        let Path(id) = Path::<String>::from_request_parts(parts, gw)
            .await
            .map_err(IntoResponse::into_response)?;
        let tenant = authorize(gw, &parts.headers).map_err(IntoResponse::into_response)?;
        let key = key(&tenant, &id).map_err(IntoResponse::into_response)?;
        Ok(TenantSession { id, tenant, key })
    }
}

/// The answer to an action on a session: `{"id": …, <done>: true}` once it applied, 404 when
/// there was no such session.
fn applied(
    id: String,
    outcome: Result<bool, SessionError>,
    done: &str,
) -> Result<Response, ApiError> {
    if !outcome.map_err(store_error)? {
        return Err(not_found(&id));
    }
    Ok(axum::Json(json!({"id": id, done: true})).into_response())
}

/// What the session holds, 404 when there is no such session.
fn found<T>(id: &str, read: Result<Option<T>, SessionError>) -> Result<T, ApiError> {
    read.map_err(store_error)?.ok_or_else(|| not_found(id))
}

fn store_error(err: impl std::fmt::Display) -> ApiError {
    ApiError::internal(err.to_string())
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("no session {id:?} in this tenant"))
}

async fn list(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let tenant = authorize(&gw, &headers)?;
    let sessions = gw
        .sessions
        .store()
        .list(&SessionFilter::tenant(tenant))
        .await
        .map_err(store_error)?;
    let items: Vec<Value> = sessions
        .iter()
        .map(|s| {
            json!({
                "id": s.key.session(),
                "version": s.version,
                "log_len": s.log_len,
                "created_at_ms": s.created_at_ms,
                "updated_at_ms": s.updated_at_ms,
            })
        })
        .collect();
    Ok(axum::Json(json!({ "sessions": items })).into_response())
}

async fn stats(
    State(gw): State<Arc<Gateway>>,
    TenantSession { id, tenant, key }: TenantSession,
) -> Result<Response, ApiError> {
    let stats = found(&id, gw.sessions.stats(&key).await)?;
    let log_len = gw
        .sessions
        .store()
        .list(&SessionFilter::tenant(tenant))
        .await
        .map_err(store_error)?
        .into_iter()
        .find(|s| s.key == key)
        .map(|s| s.log_len);
    let mut body = serde_json::to_value(&stats).map_err(store_error)?;
    body["id"] = json!(id);
    body["log_len"] = json!(log_len);
    Ok(axum::Json(body).into_response())
}

/// One standing order as the API shows it, with its position (what `PATCH …/orders/{n}`
/// names).
fn order_json(index: usize, order: &ctxkeeper_core::orders::StandingOrder) -> Value {
    json!({
        "index": index,
        "kind": order.kind.as_str(),
        "text": order.text,
        "source": order.source,
        "log_index": order.log_index,
        "reference": order.reference,
        "current": order.is_current(),
        "pinned": order.pinned,
        "withdrawn": order.withdrawn,
        "superseded_by": order.superseded_by,
    })
}

async fn orders(
    State(gw): State<Arc<Gateway>>,
    TenantSession { id, key, .. }: TenantSession,
) -> Result<Response, ApiError> {
    let orders = found(&id, gw.sessions.orders(&key).await)?;
    let items: Vec<Value> = orders
        .orders
        .iter()
        .enumerate()
        .map(|(index, order)| order_json(index, order))
        .collect();
    Ok(axum::Json(json!({"id": id, "orders": items})).into_response())
}

/// A change to one standing order: the body of `PATCH /admin/sessions/{id}/orders/{n}`, or
/// one of the console's buttons ([`OrderEdit::action`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OrderEdit {
    pinned: Option<bool>,
    current: Option<bool>,
}

impl OrderEdit {
    /// The console's actions, each one field of the API's body.
    pub(crate) const ACTIONS: [&'static str; 4] = ["pin", "unpin", "withdraw", "reinstate"];

    /// The edit a console action names (one of [`OrderEdit::ACTIONS`]).
    pub(crate) fn action(action: &str) -> Option<OrderEdit> {
        let (pinned, current) = match action {
            "pin" => (Some(true), None),
            "unpin" => (Some(false), None),
            "withdraw" => (None, Some(false)),
            "reinstate" => (None, Some(true)),
            _ => return None,
        };
        Some(OrderEdit { pinned, current })
    }
}

/// Why an order edit was not applied.
#[derive(Debug)]
pub(crate) enum OrderEditError {
    /// The edit names nothing to change.
    Empty,
    UnknownSession,
    /// The session has no order at that position (or none yet): why, for the caller.
    UnknownOrder(String),
    Session(SessionError),
}

/// Applies `edit` to order `index` of the session and saves it. The admin API and the
/// console both edit through here, so they cannot drift apart.
pub(crate) async fn apply_order_edit(
    sessions: &Sessions,
    key: &SessionKey,
    index: usize,
    edit: OrderEdit,
) -> Result<StandingOrder, OrderEditError> {
    if edit.pinned.is_none() && edit.current.is_none() {
        return Err(OrderEditError::Empty);
    }
    match sessions
        .edit_order(key, index, edit.pinned, edit.current)
        .await
    {
        Ok(Some(Ok(order))) => Ok(order),
        Ok(Some(Err(why))) => Err(OrderEditError::UnknownOrder(why)),
        Ok(None) => Err(OrderEditError::UnknownSession),
        Err(err) => Err(OrderEditError::Session(err)),
    }
}

async fn edit_order(
    State(gw): State<Arc<Gateway>>,
    Path((id, index)): Path<(String, usize)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let tenant = authorize(&gw, &headers)?;
    let key = key(&tenant, &id)?;
    let body = read_fragment(body).await?;
    let edit: OrderEdit = serde_json::from_slice(&body).map_err(|e| {
        ApiError::invalid_request(format!(
            "the body must be JSON like {{\"pinned\": true}} or {{\"current\": false}}: {e}"
        ))
    })?;
    let edited = apply_order_edit(&gw.sessions, &key, index, edit)
        .await
        .map_err(|err| match err {
            OrderEditError::Empty => ApiError::invalid_request(
                "nothing to change: give \"pinned\" or \"current\" (true or false)",
            ),
            OrderEditError::UnknownSession => not_found(&id),
            OrderEditError::UnknownOrder(why) => ApiError::not_found(why),
            OrderEditError::Session(err) => store_error(err),
        })?;
    Ok(axum::Json(json!({"id": id, "order": order_json(index, &edited)})).into_response())
}

async fn clear(
    State(gw): State<Arc<Gateway>>,
    TenantSession { id, key, .. }: TenantSession,
) -> Result<Response, ApiError> {
    applied(id, gw.sessions.clear(&key).await, "cleared")
}

async fn rebuild(
    State(gw): State<Arc<Gateway>>,
    TenantSession { id, key, .. }: TenantSession,
) -> Result<Response, ApiError> {
    applied(id, gw.sessions.rebuild(&key).await, "rebuilt")
}

async fn policy(
    State(gw): State<Arc<Gateway>>,
    TenantSession { id, key, .. }: TenantSession,
) -> Result<Response, ApiError> {
    let overrides = found(&id, gw.sessions.overrides(&key).await)?;
    let effective = match &overrides {
        Some(fragment) => gw.sessions.policy().with_overrides(fragment),
        None => Ok(gw.sessions.policy().clone()),
    }
    .map_err(|e| store_error(format!("stored overrides no longer valid: {e}")))?;
    Ok(axum::Json(json!({
        "id": id,
        "overrides": overrides,
        "effective": effective,
    }))
    .into_response())
}

async fn patch_policy(
    State(gw): State<Arc<Gateway>>,
    // Authorised before a byte of the body is read: a client without a token cannot hold
    // the connection by sending it slowly.
    TenantSession { id, key, .. }: TenantSession,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = read_fragment(body).await?;
    let patch = parse_fragment(&headers, &body)?;
    match gw.sessions.patch_overrides(&key, patch).await {
        Ok(Some(merged)) => Ok(axum::Json(json!({"id": id, "overrides": merged})).into_response()),
        Ok(None) => Err(not_found(&id)),
        Err(PatchError::Invalid(message)) => Err(ApiError::invalid_request(format!(
            "invalid policy override: {message}"
        ))),
        Err(PatchError::Session(err)) => Err(store_error(err)),
    }
}

/// The most a policy fragment may hold.
const FRAGMENT_LIMIT: usize = 64 * 1024;

/// Reads a policy fragment's body (within the server's body deadline).
async fn read_fragment(body: Body) -> Result<Bytes, ApiError> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut fragment = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            if crate::limits::BodyDeadline::caused(&e) {
                ApiError::new(
                    axum::http::StatusCode::REQUEST_TIMEOUT,
                    crate::error::Kind::InvalidRequest,
                    e.to_string(),
                )
            } else {
                ApiError::invalid_request(format!("could not read the policy fragment: {e}"))
            }
        })?;
        if fragment.len() + chunk.len() > FRAGMENT_LIMIT {
            return Err(ApiError::too_large(FRAGMENT_LIMIT));
        }
        fragment.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(fragment))
}

/// A policy fragment: JSON when the content type says so, else TOML.
fn parse_fragment(headers: &HeaderMap, body: &[u8]) -> Result<toml::Table, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::invalid_request("the policy fragment is not UTF-8"))?;
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    if is_json {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ApiError::invalid_request(format!("malformed JSON: {e}")))?;
        if !value.is_object() {
            return Err(ApiError::invalid_request(
                "the policy fragment must be a JSON object",
            ));
        }
        toml::Table::try_from(value).map_err(|e| {
            ApiError::invalid_request(format!("not a policy fragment (no nulls): {e}"))
        })
    } else {
        toml::from_str(text)
            .map_err(|e| ApiError::invalid_request(format!("malformed TOML: {}", e.message())))
    }
}

#[derive(Debug, Deserialize)]
struct SearchParams {
    q: String,
    limit: Option<usize>,
}

async fn search(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    Query(params): Query<SearchParams>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = authorize(&gw, &headers)?;
    let key = key(&tenant, &id)?;
    let mut query = SearchQuery::session(key, params.q);
    query.limit = params
        .limit
        .unwrap_or(SearchQuery::DEFAULT_LIMIT)
        .clamp(1, 200);
    let hits = gw
        .sessions
        .store()
        .search(&query)
        .await
        .map_err(|e| match e {
            StoreError::InvalidInput(message) => ApiError::invalid_request(message),
            other => store_error(other),
        })?;
    let hits: Vec<Value> = hits
        .iter()
        .map(|h| json!({"seq": h.seq, "at_ms": h.at_ms, "score": h.score, "snippet": h.snippet}))
        .collect();
    Ok(axum::Json(json!({"id": id, "hits": hits})).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison_needs_every_byte() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"secret-longer", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
    }

    #[test]
    fn each_console_action_is_one_field_of_the_api_body() {
        let body = |text: &str| serde_json::from_str::<OrderEdit>(text).unwrap();
        let expected = [
            body(r#"{"pinned": true}"#),
            body(r#"{"pinned": false}"#),
            body(r#"{"current": false}"#),
            body(r#"{"current": true}"#),
        ];
        for (action, edit) in OrderEdit::ACTIONS.iter().zip(expected) {
            assert_eq!(OrderEdit::action(action), Some(edit), "{action}");
        }
        assert_eq!(OrderEdit::action("explode"), None);
        assert_eq!(OrderEdit::action(""), None);
    }

    #[test]
    fn fragments_parse_from_toml_and_json() {
        let mut headers = HeaderMap::new();
        let toml = parse_fragment(&headers, b"keep_recent_rounds = 5").unwrap();
        assert_eq!(toml["keep_recent_rounds"].as_integer(), Some(5));
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        let json = parse_fragment(&headers, br#"{"keep_recent_rounds": 6}"#).unwrap();
        assert_eq!(json["keep_recent_rounds"].as_integer(), Some(6));
        assert!(parse_fragment(&headers, b"[1]").is_err());
    }
}
