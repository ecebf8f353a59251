//! Who a request belongs to: tenant, session, and the fingerprints of its messages.
//!
//! Agents change only their base URL, so nothing else about them can be assumed:
//!
//! - the **tenant** is the `x-ctxkeeper-tenant` header, else a hash of the API key
//!   (`key-` + 16 hex digits of its SHA-256; the key itself is never kept), else `default`;
//! - the **session** is the `x-ctxkeeper-session` header, else derived from the conversation:
//!   a hash of the model, the instructions and the first user message, which stay the same on
//!   every call of one agent run;
//! - every client **message** has a 128-bit fingerprint of its neutral form, so the gateway can
//!   tell which part of a resent history it has already seen.
//!
//! Identifiers from headers must pass the store's identifier rules; anything else (`../../x`,
//! slashes, whitespace) is refused, never rewritten into a path.
//!
//! ```
//! use axum::http::HeaderMap;
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_gateway::identity::{message_hash, tenant_of};
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("authorization", "Bearer sk-secret".parse().unwrap());
//! let tenant = tenant_of(&headers).unwrap();
//! assert!(tenant.starts_with("key-") && !tenant.contains("secret"));
//! assert_eq!(message_hash(&Message::user("hi")), message_hash(&Message::user("hi")));
//! ```

use axum::http::HeaderMap;
use ctxkeeper_core::model::{Message, Role, ToolSpec};
use ctxkeeper_store::StoreError;
use ctxkeeper_store::state::validate_identifier;
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::{Xxh3, xxh3_128};

/// Header naming the session.
pub const SESSION_HEADER: &str = "x-ctxkeeper-session";
/// Header naming the tenant.
pub const TENANT_HEADER: &str = "x-ctxkeeper-tenant";
/// The tenant of requests without a tenant header or an API key.
pub const DEFAULT_TENANT: &str = "default";

/// The tenant of a request (see the [module docs](self)).
pub fn tenant_of(headers: &HeaderMap) -> Result<String, StoreError> {
    if let Some(value) = headers.get(TENANT_HEADER) {
        let tenant = value
            .to_str()
            .map_err(|_| StoreError::InvalidInput("x-ctxkeeper-tenant is not ASCII".into()))?;
        validate_identifier("tenant", tenant)?;
        return Ok(tenant.to_string());
    }
    Ok(match api_key(headers) {
        Some(key) => {
            let digest = Sha256::digest(key.as_bytes());
            format!("key-{}", &hex::encode(digest)[..16])
        }
        None => DEFAULT_TENANT.to_string(),
    })
}

/// The client's API key: `x-api-key`, else the bearer token of `Authorization`.
fn api_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim()).filter(|k| !k.is_empty());
    }
    let auth = headers.get("authorization")?.to_str().ok()?.trim();
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
        .unwrap_or(auth)
        .trim();
    Some(token).filter(|t| !t.is_empty())
}

/// The session id from the header, if one was sent (validated).
pub fn session_header(headers: &HeaderMap) -> Result<Option<String>, StoreError> {
    let Some(value) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    let id = value
        .to_str()
        .map_err(|_| StoreError::InvalidInput("x-ctxkeeper-session is not ASCII".into()))?;
    validate_identifier("session", id)?;
    Ok(Some(id.to_string()))
}

/// A session id derived from what stays fixed during one agent run: the model, the leading
/// instructions and the first user message. Tools are left out on purpose: agents add and
/// remove tools mid-run.
pub fn derived_session(model: Option<&str>, messages: &[Message]) -> String {
    let mut hasher = Xxh3::new();
    hasher.update(model.unwrap_or("").as_bytes());
    hasher.update(&[0]);
    for message in messages.iter().take_while(|m| m.role.is_instruction()) {
        hash_json(&mut hasher, message);
    }
    hasher.update(&[0]);
    if let Some(first) = messages.iter().find(|m| m.role == Role::User) {
        hash_json(&mut hasher, first);
    }
    format!("auto-{:032x}", hasher.digest128())
}

/// The fingerprint of one client message: its neutral form (content, ids, wire hints), so a
/// message resent unchanged has the same fingerprint and any edit changes it. Fingerprints are
/// stored with the session: the same message must keep the same fingerprint across versions.
pub fn message_hash(message: &Message) -> u128 {
    Fingerprinter::default().message(message)
}

/// Fingerprints many messages with one reusable serialization buffer: hashing the finished
/// bytes at once is several times faster than feeding the serializer's many small writes to a
/// streaming hasher, and gives the same value.
#[derive(Debug, Default)]
pub struct Fingerprinter {
    buffer: Vec<u8>,
}

impl Fingerprinter {
    /// The fingerprint of `message` (equal to [`message_hash`]).
    pub fn message(&mut self, message: &Message) -> u128 {
        self.buffer.clear();
        write_json(&mut self.buffer, message);
        xxh3_128(&self.buffer)
    }
}

/// The fingerprint of a request's tool declarations (their token cost is cached per set).
pub fn tools_hash(tools: &[ToolSpec]) -> u128 {
    let mut hasher = Xxh3::new();
    for tool in tools {
        hash_json(&mut hasher, tool);
    }
    hasher.digest128()
}

/// Feeds the JSON serialization of `value` to the hasher.
fn hash_json<T: serde::Serialize>(hasher: &mut Xxh3, value: &T) {
    let mut buffer = Vec::new();
    write_json(&mut buffer, value);
    hasher.update(&buffer);
}

fn write_json<T: serde::Serialize>(buffer: &mut Vec<u8>, value: &T) {
    // Serializing plain data into memory cannot fail.
    let _ = serde_json::to_writer(buffer, value);
}

/// Length of the longest common prefix of two fingerprint lists.
pub fn common_prefix(a: &[u128], b: &[u128]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn tenant_comes_from_header_then_key_then_default() {
        assert_eq!(
            tenant_of(&headers(&[(TENANT_HEADER, "acme")])).unwrap(),
            "acme"
        );
        let a = tenant_of(&headers(&[("x-api-key", "sk-ant-1")])).unwrap();
        let b = tenant_of(&headers(&[("authorization", "Bearer sk-ant-1")])).unwrap();
        assert_eq!(a, b, "the same key names the same tenant in both headers");
        assert_ne!(
            a,
            tenant_of(&headers(&[("x-api-key", "sk-ant-2")])).unwrap()
        );
        assert_eq!(tenant_of(&HeaderMap::new()).unwrap(), DEFAULT_TENANT);
    }

    #[test]
    fn hostile_ids_are_refused() {
        for id in ["../../x", "a/b", "..", " ", ".hidden"] {
            assert!(session_header(&headers(&[(SESSION_HEADER, id)])).is_err());
            assert!(tenant_of(&headers(&[(TENANT_HEADER, id)])).is_err());
        }
    }

    #[test]
    fn derived_session_ignores_later_turns() {
        let mut history = vec![Message::system("rules"), Message::user("task")];
        let first = derived_session(Some("gpt-4o"), &history);
        history.push(Message::assistant("ok"));
        history.push(Message::user("more"));
        assert_eq!(derived_session(Some("gpt-4o"), &history), first);
        assert_ne!(derived_session(Some("gpt-4.1"), &history), first);
        history[1] = Message::user("another task");
        assert_ne!(derived_session(Some("gpt-4o"), &history), first);
    }

    #[test]
    fn common_prefix_counts_equal_leading_items() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3]), 2);
    }

    #[test]
    fn fingerprints_are_stable_across_versions() {
        // Stored sessions hold these values: a change here makes every stored conversation
        // look edited on its next request.
        let mut tool = Message::assistant("calling");
        tool.parts
            .push(ctxkeeper_core::model::Part::text("é \"quoted\" ✓"));
        assert_eq!(
            format!("{:032x}", message_hash(&Message::user("hi"))),
            "dd7d796585dbde8a8df0abab149417a6"
        );
        let mut many = Fingerprinter::default();
        assert_eq!(
            format!("{:032x}", many.message(&tool)),
            "05fc0046edf87859c4dec3e6ad4bbb16"
        );
        assert_eq!(
            many.message(&Message::user("hi")),
            message_hash(&Message::user("hi"))
        );
        assert_eq!(
            derived_session(Some("m"), &[Message::system("s"), Message::user("u")]),
            "auto-ada44369be49ec1960a8c25b4cfa3ec4"
        );
    }
}
