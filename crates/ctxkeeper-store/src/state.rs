//! The persisted agent state and the key that names it.
//!
//! An [`AgentState`] is everything that makes an agent restartable: the context the model
//! sees, the summary of what was compacted, the compaction engine's own bookkeeping, and
//! extension fields (plan, tasks, permissions, tool groups, anything a host adds) that
//! compaction never touches. It is serialized as JSON with a `format_version`; fields a newer
//! version adds are kept verbatim in [`AgentState::unknown`], so an older reader that saves the
//! state back does not drop them.
//!
//! ```
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_store::{AgentState, SessionKey};
//!
//! let key = SessionKey::new("acme", "alice", "bot", "2026-06-02-001").unwrap();
//! assert!(SessionKey::new("acme", "alice", "bot", "../../etc/passwd").is_err());
//!
//! let mut state = AgentState::new();
//! state.context.push(Message::user("hello"));
//! state.extensions.insert("plan".into(), serde_json::json!({"mode": "on"}));
//! let json = state.to_json().unwrap();
//! assert_eq!(AgentState::from_json(&json).unwrap(), state);
//! # let _ = key;
//! ```

use std::collections::BTreeMap;
use std::fmt;

use ctxkeeper_core::model::Message;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::StoreError;

/// The format version this build writes. Every older version stays readable.
pub const AGENT_STATE_FORMAT: u32 = 1;

/// The most bytes an identifier (tenant, user, agent, session) may have.
pub const MAX_IDENTIFIER_LEN: usize = 128;

/// Checks an identifier: 1 to [`MAX_IDENTIFIER_LEN`] bytes of `A-Z a-z 0-9 . _ - : @ + =`, not
/// starting with a dot. Anything else (slashes, backslashes, NUL, whitespace, `..`) is refused
/// rather than rewritten, so two different ids can never name the same session.
pub fn validate_identifier(kind: &str, id: &str) -> Result<(), StoreError> {
    let ok_char =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '@' | '+' | '=');
    if id.is_empty()
        || id.len() > MAX_IDENTIFIER_LEN
        || id.starts_with('.')
        || !id.chars().all(ok_char)
    {
        let shown: String = id.chars().take(40).collect();
        return Err(StoreError::InvalidInput(format!(
            "{kind} id {shown:?} must be 1-{MAX_IDENTIFIER_LEN} characters of A-Z a-z 0-9 . _ - : @ + = and not start with a dot"
        )));
    }
    Ok(())
}

/// Names one session: tenant / user / agent / session, each a validated identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "RawKey", into = "RawKey")]
pub struct SessionKey {
    tenant: String,
    user: String,
    agent: String,
    session: String,
}

#[derive(Serialize, Deserialize)]
struct RawKey {
    tenant: String,
    user: String,
    agent: String,
    session: String,
}

impl TryFrom<RawKey> for SessionKey {
    type Error = StoreError;
    fn try_from(raw: RawKey) -> Result<SessionKey, StoreError> {
        SessionKey::new(raw.tenant, raw.user, raw.agent, raw.session)
    }
}

impl From<SessionKey> for RawKey {
    fn from(key: SessionKey) -> RawKey {
        RawKey {
            tenant: key.tenant,
            user: key.user,
            agent: key.agent,
            session: key.session,
        }
    }
}

impl SessionKey {
    /// The tenant, user and agent used when a deployment does not name one.
    pub const DEFAULT: &'static str = "default";

    /// A key; every part must pass [`validate_identifier`].
    pub fn new(
        tenant: impl Into<String>,
        user: impl Into<String>,
        agent: impl Into<String>,
        session: impl Into<String>,
    ) -> Result<SessionKey, StoreError> {
        let key = SessionKey {
            tenant: tenant.into(),
            user: user.into(),
            agent: agent.into(),
            session: session.into(),
        };
        validate_identifier("tenant", &key.tenant)?;
        validate_identifier("user", &key.user)?;
        validate_identifier("agent", &key.agent)?;
        validate_identifier("session", &key.session)?;
        Ok(key)
    }

    /// A session in the default tenant, user and agent.
    pub fn simple(session: impl Into<String>) -> Result<SessionKey, StoreError> {
        SessionKey::new(Self::DEFAULT, Self::DEFAULT, Self::DEFAULT, session)
    }

    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn agent(&self) -> &str {
        &self.agent
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    /// The archive scope of this session (archives are per tenant and session).
    pub fn archive_scope(&self) -> crate::ArchiveScope {
        crate::ArchiveScope {
            tenant: self.tenant.clone(),
            session: self.session.clone(),
        }
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.tenant, self.user, self.agent, self.session
        )
    }
}

/// Everything that makes an agent restartable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    /// The format this state was written in ([`AGENT_STATE_FORMAT`] when this build writes).
    #[serde(default = "first_format")]
    pub format_version: u32,
    /// The conversation the model sees (after compaction).
    #[serde(default)]
    pub context: Vec<Message>,
    /// Per-message bookkeeping of `context`: empty, or one value per message. Stored with its
    /// message, so a step that appends messages writes only their bookkeeping.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context_meta: Vec<Value>,
    /// An append-only record a host keeps beside the context (the gateway: fingerprints of
    /// its client's messages), stored incrementally like the context.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trail: Vec<Value>,
    /// The structured summary of the compacted prefix, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Value>,
    /// The compaction engine's own bookkeeping, opaque to the store.
    #[serde(default)]
    pub engine: Value,
    /// Host fields that compaction never touches: plan, tasks, permissions, tool groups…
    #[serde(default)]
    pub extensions: BTreeMap<String, Value>,
    /// When the session's state was first created (ms since the Unix epoch).
    #[serde(default)]
    pub created_at_ms: i64,
    /// When the state was last changed by its owner (ms since the Unix epoch).
    #[serde(default)]
    pub updated_at_ms: i64,
    /// Fields written by a newer version, kept verbatim.
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

fn first_format() -> u32 {
    1
}

impl Default for AgentState {
    fn default() -> AgentState {
        AgentState::new()
    }
}

impl AgentState {
    /// An empty state stamped with the current time.
    pub fn new() -> AgentState {
        let now = crate::time::now_ms();
        AgentState {
            format_version: AGENT_STATE_FORMAT,
            context: Vec::new(),
            context_meta: Vec::new(),
            trail: Vec::new(),
            summary: None,
            engine: Value::Null,
            extensions: BTreeMap::new(),
            created_at_ms: now,
            updated_at_ms: now,
            unknown: Map::new(),
        }
    }

    /// The JSON text of the state.
    pub fn to_json(&self) -> Result<String, StoreError> {
        serde_json::to_string(self)
            .map_err(|err| StoreError::InvalidInput(format!("state does not serialize: {err}")))
    }

    /// Parses a state written by this or any earlier version.
    pub fn from_json(text: &str) -> Result<AgentState, StoreError> {
        let state: AgentState = serde_json::from_str(text)
            .map_err(|err| StoreError::Corrupt(format!("agent state: {err}")))?;
        if state.format_version > AGENT_STATE_FORMAT {
            return Err(StoreError::Corrupt(format!(
                "agent state format {} is newer than this build reads ({AGENT_STATE_FORMAT})",
                state.format_version
            )));
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_identifiers_are_refused() {
        for id in [
            "",
            "..",
            ".",
            "../x",
            "a/b",
            "a\\b",
            "a\0b",
            "a b",
            ".hidden",
            "é",
            &"x".repeat(129),
        ] {
            assert!(SessionKey::simple(id).is_err(), "{id:?}");
        }
        for id in ["s1", "alice@example.com", "a:b", "2026-06-02-001", "x=y+z"] {
            assert!(SessionKey::simple(id).is_ok(), "{id:?}");
        }
    }

    #[test]
    fn keys_deserialize_only_when_valid() {
        let bad = r#"{"tenant":"t","user":"u","agent":"a","session":"../x"}"#;
        assert!(serde_json::from_str::<SessionKey>(bad).is_err());
    }

    #[test]
    fn unknown_fields_survive_a_round_trip() -> Result<(), StoreError> {
        let text = r#"{"format_version":1,"context":[],"engine":null,"future_field":{"a":1}}"#;
        let state = AgentState::from_json(text)?;
        assert_eq!(
            state.unknown.get("future_field"),
            Some(&serde_json::json!({"a": 1}))
        );
        assert!(state.to_json()?.contains("future_field"));
        Ok(())
    }

    #[test]
    fn newer_formats_are_refused() {
        assert!(AgentState::from_json(r#"{"format_version":99}"#).is_err());
    }
}
