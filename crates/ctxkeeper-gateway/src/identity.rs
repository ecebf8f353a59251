//! Which session a request continues, and the fingerprints of its messages.
//!
//! Agents change only their base URL, so nothing else about them can be assumed:
//!
//! - the **session** is the `x-ctxkeeper-session` header, else the agent harness's own
//!   session header ([`harness_session`]), else derived from the conversation: a hash of the
//!   model, the instructions and the first user message, which stay the same on every call of
//!   one agent run ([`derived_session`]); a conversation that departs early from its session's
//!   takes a fork of its own ([`fork_session`]);
//! - every client **message** has a 128-bit fingerprint of its neutral form, cache hints left
//!   out, so the gateway can tell which part of a resent history it has already seen
//!   ([`FingerprintMemo`] finds a resent message's fingerprint again without serializing it).
//!
//! Who the request belongs to (its tenant) is [`crate::tenancy`]'s decision; the client's
//! current cache markers are put back on a managed context by [`crate::cache_hints`].
//! Identifiers from headers must pass the store's identifier rules; anything else (`../../x`,
//! slashes, whitespace) is refused, never rewritten into a path.
//!
//! ```
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_gateway::identity::{derived_session, message_hash};
//!
//! assert_eq!(message_hash(&Message::user("hi")), message_hash(&Message::user("hi")));
//! let messages = [Message::system("be brief"), Message::user("fix the bug")];
//! assert!(derived_session(Some("gpt-4o"), &messages).starts_with("auto-"));
//! ```

use std::collections::HashMap;

use axum::http::HeaderMap;
pub use ctxkeeper::snapshot::{
    CACHE_CONTROL, Fingerprinter, has_volatile, message_hash, strip_volatile,
};
use ctxkeeper_core::model::{Message, Part, Role, ToolSpec};
use ctxkeeper_store::StoreError;
use ctxkeeper_store::state::validate_identifier;
use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

/// How the name of a session derived from its conversation ([`derived_session`]) begins.
pub const DERIVED_PREFIX: &str = "auto-";

/// Header naming the session.
pub const SESSION_HEADER: &str = "x-ctxkeeper-session";
/// `x-ctxkeeper-pin: latest` pins the newest user message of the request: it stays verbatim
/// through every compaction of the session.
pub const PIN_HEADER: &str = "x-ctxkeeper-pin";

/// Whether the request asks to pin its newest user message; any other value is an error
/// (a typo must not silently pin nothing).
pub fn pin_header(headers: &HeaderMap) -> Result<bool, String> {
    let Some(value) = headers.get(PIN_HEADER) else {
        return Ok(false);
    };
    match value.to_str().map(str::trim) {
        Ok(v) if v.eq_ignore_ascii_case("latest") => Ok(true),
        Ok(v) if v.eq_ignore_ascii_case("none") || v.is_empty() => Ok(false),
        _ => Err(format!(
            "{PIN_HEADER} must be `latest` (pin the newest user message) or `none`"
        )),
    }
}
/// `x-ctxkeeper-focus: TEXT` tells the summarizer what to keep in view if this request's
/// preparation compacts (the MCP `compact` tool's `focus`, per request).
pub const FOCUS_HEADER: &str = "x-ctxkeeper-focus";

/// The longest focus the header may carry, in bytes.
pub const MAX_FOCUS_BYTES: usize = 2_000;

/// The focus the request asks for, if any: UTF-8 text of at most [`MAX_FOCUS_BYTES`] (a
/// longer one is an error, not silently cut).
pub fn focus_header(headers: &HeaderMap) -> Result<Option<String>, String> {
    let Some(value) = headers.get(FOCUS_HEADER) else {
        return Ok(None);
    };
    let text = std::str::from_utf8(value.as_bytes())
        .map_err(|_| format!("{FOCUS_HEADER} is not UTF-8 text"))?
        .trim();
    if text.len() > MAX_FOCUS_BYTES {
        return Err(format!(
            "{FOCUS_HEADER} is {} bytes; at most {MAX_FOCUS_BYTES} are accepted",
            text.len()
        ));
    }
    Ok((!text.is_empty()).then(|| text.to_string()))
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
/// remove tools mid-run. Cache hints are left out too ([`strip_volatile`]).
pub fn derived_session(model: Option<&str>, messages: &[Message]) -> String {
    let mut hasher = Xxh3::new();
    hasher.update(model.unwrap_or("").as_bytes());
    hasher.update(&[0]);
    let mut fingerprints = Fingerprinter::default();
    for message in messages.iter().take_while(|m| m.role.is_instruction()) {
        hasher.update(fingerprints.canonical_bytes(message));
    }
    hasher.update(&[0]);
    if let Some(first) = messages.iter().find(|m| m.role == Role::User) {
        hasher.update(fingerprints.canonical_bytes(first));
    }
    format!("{DERIVED_PREFIX}{:032x}", hasher.digest128())
}

/// The session an agent harness names in its own headers, scoped by the gateway to the
/// tenant like any session: Claude Code's `x-claude-code-session-id` (its sub-agents add
/// `x-claude-code-agent-id`, and each is a conversation of its own), Codex's `session-id`.
/// A value the store's identifier rules refuse is ignored (the header is the harness's, not
/// a request to the gateway), and the session is derived instead.
pub fn harness_session(headers: &HeaderMap) -> Option<String> {
    let value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let id = if let Some(session) = value("x-claude-code-session-id") {
        match value("x-claude-code-agent-id") {
            Some(agent) => format!("cc-{session}-{agent}"),
            None => format!("cc-{session}"),
        }
    } else {
        format!("codex-{}", value("session-id")?)
    };
    validate_identifier("session", &id).ok().map(|()| id)
}

/// The id of the fork of `session` that a conversation diverging from it takes: the same
/// root (the part before any `+`) and a hash of the parent and of the conversation up to and
/// including its first message the parent does not have. Deterministic, so every later
/// request of the forked conversation finds the same fork again; rooted, so ids do not grow
/// with each fork of a fork.
pub fn fork_session(session: &str, prefix: &[u128]) -> String {
    let root = session.split('+').next().unwrap_or(session);
    let mut hasher = Xxh3::new();
    hasher.update(session.as_bytes());
    for hash in prefix {
        hasher.update(&hash.to_le_bytes());
    }
    // Leaves room for the suffix within the identifier limit.
    let root: String = root.chars().take(96).collect();
    format!("{root}+{:016x}", hasher.digest())
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

/// Fingerprints of the messages a gateway saw recently, found again by an exact hash of
/// everything a message holds (every field in order, cache hints included) and the tenant
/// that sent it. Agents resend their whole history on every call; hashing a message's fields
/// is several times cheaper than serializing it for its fingerprint, so a resent message
/// costs one pass over its bytes instead of a serialization. A message that differs in
/// anything (a moved cache hint, a reordered field) is a miss and fingerprinted in full, so
/// every fingerprint is the one [`Fingerprinter`] gives. Two generations of at most
/// [`FingerprintMemo::GENERATION`] entries each bound its memory.
#[derive(Debug, Default)]
pub struct FingerprintMemo {
    maps: std::sync::Mutex<MemoMaps>,
}

#[derive(Debug, Default)]
struct MemoMaps {
    current: HashMap<u128, u128>,
    previous: HashMap<u128, u128>,
}

impl MemoMaps {
    fn get(&mut self, key: u128) -> Option<u128> {
        if let Some(found) = self.current.get(&key) {
            return Some(*found);
        }
        let found = self.previous.remove(&key)?;
        self.insert(key, found);
        Some(found)
    }

    fn insert(&mut self, key: u128, fingerprint: u128) {
        if self.current.len() >= FingerprintMemo::GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, fingerprint);
    }
}

impl FingerprintMemo {
    /// Entries per generation (two are kept).
    pub const GENERATION: usize = 1 << 16;

    /// The fingerprints of `messages` (each equal to [`message_hash`]) sent by `tenant`.
    pub fn fingerprints(&self, tenant: &str, messages: &[Message]) -> Vec<u128> {
        let keys: Vec<u128> = messages.iter().map(|m| content_key(tenant, m)).collect();
        let mut found: Vec<Option<u128>> = match self.maps.lock() {
            Ok(mut maps) => keys.iter().map(|key| maps.get(*key)).collect(),
            Err(_) => vec![None; keys.len()],
        };
        let mut fingerprints = Fingerprinter::default();
        let mut computed = Vec::new();
        for (index, slot) in found.iter_mut().enumerate() {
            if slot.is_none() {
                let fingerprint = fingerprints.message(&messages[index]);
                *slot = Some(fingerprint);
                computed.push((keys[index], fingerprint));
            }
        }
        if !computed.is_empty()
            && let Ok(mut maps) = self.maps.lock()
        {
            for (key, fingerprint) in computed {
                maps.insert(key, fingerprint);
            }
        }
        found.into_iter().flatten().collect()
    }
}

/// An exact hash of `message` and `tenant`: every field, in order, each with its length or
/// tag, so that different messages have different inputs. The destructuring names every
/// field, so a field added to the model does not compile until it is hashed here.
fn content_key(tenant: &str, message: &Message) -> u128 {
    let mut hasher = Xxh3::new();
    key_str(&mut hasher, tenant);
    let Message {
        role,
        parts,
        name,
        extra,
        hints,
    } = message;
    key_str(&mut hasher, role.as_str());
    key_len(&mut hasher, parts.len());
    for part in parts {
        key_part(&mut hasher, part);
    }
    key_opt(&mut hasher, name.as_deref());
    key_map(&mut hasher, extra);
    let ctxkeeper_core::model::WireHints {
        origin,
        content_form,
        private,
    } = hints;
    key_opt(&mut hasher, origin.as_deref());
    hasher.update(&[*content_form as u8]);
    key_map(&mut hasher, private);
    hasher.digest128()
}

fn key_part(hasher: &mut Xxh3, part: &Part) {
    use ctxkeeper_core::model::DataSource;
    match part {
        Part::Text { text, extra } => {
            hasher.update(b"t");
            key_str(hasher, text);
            key_map(hasher, extra);
        }
        Part::Data {
            source,
            wire_type,
            extra,
        } => {
            hasher.update(b"d");
            match source {
                DataSource::Url { url } => {
                    hasher.update(b"u");
                    key_str(hasher, url);
                }
                DataSource::Base64 { media_type, data } => {
                    hasher.update(b"b");
                    key_str(hasher, media_type);
                    key_str(hasher, data);
                }
                DataSource::Archived { sha256, media_type } => {
                    hasher.update(b"a");
                    key_str(hasher, sha256);
                    key_str(hasher, media_type);
                }
            }
            key_opt(hasher, wire_type.as_deref());
            key_map(hasher, extra);
        }
        Part::ToolCall {
            id,
            name,
            arguments,
            extra,
        } => {
            hasher.update(b"c");
            key_str(hasher, id);
            key_str(hasher, name);
            key_str(hasher, arguments);
            key_map(hasher, extra);
        }
        Part::ToolResult {
            call_id,
            content,
            is_error,
            extra,
        } => {
            hasher.update(b"r");
            key_str(hasher, call_id);
            key_len(hasher, content.len());
            for inner in content {
                key_part(hasher, inner);
            }
            hasher.update(&[u8::from(*is_error)]);
            key_map(hasher, extra);
        }
        Part::Reasoning {
            text,
            signature,
            encrypted,
            redacted,
            extra,
        } => {
            hasher.update(b"z");
            key_opt(hasher, text.as_deref());
            key_opt(hasher, signature.as_deref());
            key_opt(hasher, encrypted.as_deref());
            hasher.update(&[u8::from(*redacted)]);
            key_map(hasher, extra);
        }
        Part::Opaque { value } => {
            hasher.update(b"o");
            key_value(hasher, value);
        }
    }
}

fn key_len(hasher: &mut Xxh3, len: usize) {
    hasher.update(&(len as u64).to_le_bytes());
}

fn key_str(hasher: &mut Xxh3, text: &str) {
    key_len(hasher, text.len());
    hasher.update(text.as_bytes());
}

fn key_opt(hasher: &mut Xxh3, text: Option<&str>) {
    match text {
        Some(text) => {
            hasher.update(b"s");
            key_str(hasher, text);
        }
        None => hasher.update(b"n"),
    }
}

fn key_map(hasher: &mut Xxh3, map: &serde_json::Map<String, Value>) {
    key_len(hasher, map.len());
    for (name, value) in map {
        key_str(hasher, name);
        key_value(hasher, value);
    }
}

fn key_value(hasher: &mut Xxh3, value: &Value) {
    match value {
        Value::Null => hasher.update(b"n"),
        Value::Bool(b) => hasher.update(if *b { b"T" } else { b"F" }),
        Value::Number(number) => {
            // The number's own text: 1 and 1.0 are different JSON.
            hasher.update(b"#");
            key_str(hasher, &number.to_string());
        }
        Value::String(text) => {
            hasher.update(b"s");
            key_str(hasher, text);
        }
        Value::Array(items) => {
            hasher.update(b"[");
            key_len(hasher, items.len());
            for item in items {
                key_value(hasher, item);
            }
        }
        Value::Object(map) => {
            hasher.update(b"{");
            key_map(hasher, map);
        }
    }
}

/// Length of the longest common prefix of two fingerprint lists.
pub fn common_prefix(a: &[u128], b: &[u128]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_hints::tests::marked;
    use crate::tenancy::tests::{headers, tenant};
    use crate::tenancy::{TENANT_HEADER, TenantError, TenantRule};

    #[test]
    fn hostile_ids_are_refused() {
        let trusted = TenantRule::default().trust_header(true);
        for id in ["../../x", "a/b", "..", " ", ".hidden"] {
            assert!(session_header(&headers(&[(SESSION_HEADER, id)])).is_err());
            assert!(matches!(
                tenant(&trusted, &[(TENANT_HEADER, id)]),
                Err(TenantError::Malformed(_))
            ));
        }
    }

    #[test]
    fn a_moved_cache_marker_changes_neither_fingerprint_nor_derived_session() {
        // Regression: Claude Code moves `cache_control` to its newest block on every call;
        // with the marker in the fingerprint, every request looked like an edited history.
        assert_eq!(
            message_hash(&marked("task")),
            message_hash(&Message::user("task"))
        );
        assert_ne!(
            message_hash(&marked("task")),
            message_hash(&Message::user("other"))
        );
        let system = Message::system("rules");
        assert_eq!(
            derived_session(Some("m"), &[system.clone(), marked("task")]),
            derived_session(Some("m"), &[system, Message::user("task")])
        );
        let mut result = Message::tool_result("c1", "out");
        if let Part::ToolResult { extra, .. } = &mut result.parts[0] {
            extra.insert(
                CACHE_CONTROL.into(),
                serde_json::json!({"type": "ephemeral"}),
            );
        }
        assert!(has_volatile(&result));
        assert_eq!(
            message_hash(&result),
            message_hash(&Message::tool_result("c1", "out"))
        );
    }

    #[test]
    fn remembered_fingerprints_are_the_ones_computed_in_full() {
        let memo = FingerprintMemo::default();
        let mut call = Message::assistant("calling");
        call.parts
            .push(Part::tool_call("c1", "read", r#"{"path":"a.rs"}"#));
        let messages = vec![
            Message::system("rules"),
            marked("task"),
            call,
            Message::tool_result("c1", "fn main() {}"),
        ];
        let expected: Vec<u128> = messages.iter().map(message_hash).collect();
        assert_eq!(memo.fingerprints("t", &messages), expected, "computed");
        assert_eq!(memo.fingerprints("t", &messages), expected, "remembered");

        // What the memo answers is what it holds for exactly this content and tenant.
        let planted = content_key("t", &messages[0]);
        memo.maps.lock().unwrap().current.insert(planted, 7);
        assert_eq!(memo.fingerprints("t", &messages[..1]), vec![7]);
        assert_eq!(
            memo.fingerprints("other", &messages[..1]),
            vec![expected[0]],
            "another tenant's entries are never used"
        );
    }

    #[test]
    fn messages_that_differ_in_anything_have_different_content_keys() {
        let with_extra = |pairs: &[(&str, Value)]| {
            let mut message = Message::user("x");
            for (name, value) in pairs {
                message.extra.insert((*name).into(), value.clone());
            }
            message
        };
        let named = {
            let mut m = Message::user("x");
            m.name = Some(String::new());
            m
        };
        let split = Message::new(Role::User, vec![Part::text("a"), Part::text("b")]);
        let cases = [
            Message::user("x"),
            Message::assistant("x"),
            marked("x"),
            named,
            Message::user("ab"),
            split,
            with_extra(&[("a", serde_json::json!(1)), ("b", serde_json::json!(2))]),
            with_extra(&[("b", serde_json::json!(2)), ("a", serde_json::json!(1))]),
            with_extra(&[("a", serde_json::json!(1.0))]),
            with_extra(&[("a", serde_json::json!("1"))]),
            with_extra(&[("a", serde_json::json!([1]))]),
        ];
        let keys: Vec<u128> = cases.iter().map(|m| content_key("t", m)).collect();
        for i in 0..keys.len() {
            for j in i + 1..keys.len() {
                assert_ne!(keys[i], keys[j], "{:?} and {:?}", cases[i], cases[j]);
            }
        }
        // Equal fields in another order serialize differently, so their fingerprints differ
        // too: the memo never answers one with the other's.
        let memo = FingerprintMemo::default();
        let first = memo.fingerprints("t", &cases[6..7]);
        let second = memo.fingerprints("t", &cases[7..8]);
        assert_eq!(first, vec![message_hash(&cases[6])]);
        assert_eq!(second, vec![message_hash(&cases[7])]);
        assert_ne!(first, second);
    }

    #[test]
    fn the_memo_keeps_two_generations() {
        let memo = FingerprintMemo::default();
        let messages: Vec<Message> = (0..FingerprintMemo::GENERATION + 10)
            .map(|i| Message::user(i.to_string()))
            .collect();
        memo.fingerprints("t", &messages);
        let maps = memo.maps.lock().unwrap();
        assert_eq!(maps.previous.len(), FingerprintMemo::GENERATION);
        assert_eq!(maps.current.len(), 10);
    }

    #[test]
    fn harness_headers_name_the_session_and_sub_agents_apart() {
        let main = headers(&[("x-claude-code-session-id", "0b7c9e2a-1111-4c1d-9f00-aa")]);
        assert_eq!(
            harness_session(&main).unwrap(),
            "cc-0b7c9e2a-1111-4c1d-9f00-aa"
        );
        let agent = headers(&[
            ("x-claude-code-session-id", "0b7c9e2a-1111-4c1d-9f00-aa"),
            ("x-claude-code-agent-id", "a1b2c3d4e5f60718"),
        ]);
        assert_eq!(
            harness_session(&agent).unwrap(),
            "cc-0b7c9e2a-1111-4c1d-9f00-aa-a1b2c3d4e5f60718"
        );
        let codex = headers(&[("session-id", "019a1b2c-3d4e-7f00-8000-000000000001")]);
        assert_eq!(
            harness_session(&codex).unwrap(),
            "codex-019a1b2c-3d4e-7f00-8000-000000000001"
        );
        assert_eq!(
            harness_session(&headers(&[("session-id", "../../x")])),
            None
        );
        assert_eq!(harness_session(&HeaderMap::new()), None);
    }

    #[test]
    fn forks_are_deterministic_and_keep_their_root() {
        let first = fork_session("auto-abc", &[1, 2, 3]);
        assert_eq!(first, fork_session("auto-abc", &[1, 2, 3]));
        assert_ne!(first, fork_session("auto-abc", &[1, 2, 4]));
        assert!(first.starts_with("auto-abc+"));
        let nested = fork_session(&first, &[1, 2, 3, 5]);
        assert!(nested.starts_with("auto-abc+") && nested.matches('+').count() == 1);
        assert_ne!(nested, first);
        validate_identifier("session", &nested).unwrap();
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
