//! Interpret: what a request body says, parsed once, and whether the gateway manages it.
//!
//! - **Parse once.** A body whose first elements are the session's previous request
//!   ([`crate::resent`]) is parsed without them and their messages are put back; anything
//!   that does not line up is parsed in full, which also gives an error its exact position.
//! - **The gateway's own Responses compaction items** ([`crate::compaction_items`]) go
//!   upstream as the text they stand for, and a `compaction_trigger` the gateway answers is
//!   taken out of the body.
//! - **Refused as a provider would refuse it:** malformed JSON, a request the wire format
//!   does not allow (its field named as OpenAI's `param`), broken tool call pairing (after
//!   the opt-in repair, [`crate::repair`]), and the gateway's own headers when they are wrong
//!   (tenant, session id, pin).
//! - **Unmanaged**, forwarded as it came: a Responses request continuing a stored response
//!   (`previous_response_id`: the upstream holds the history), a request whose
//!   `context_management` hands the context to the provider, a Responses
//!   `compaction_trigger` the provider answers itself, and a request without messages.
//!
//! ```text
//! bytes ──skeleton / parse──▶ Value ──compaction items──▶ WireRequest ──repair, pairing──▶ Interpreted
//!                                                                         └─ tenant, session header, pin
//! ```

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use bytes::Bytes;
use ctxkeeper_core::formats::Wire;
use ctxkeeper_core::model::{CheckRules, Request as WireRequest, check};
use ctxkeeper_core::{ParseError, Position};
use ctxkeeper_store::StoreError;
use serde_json::Value;

use super::endpoint::Endpoint;
use super::intake::Received;
use crate::Gateway;
use crate::compaction_items;
use crate::error::ApiError;
use crate::identity;
use crate::limits::BodyPermit;
use crate::metrics::Metrics;
use crate::resent::Reading;
use crate::tenancy::TenantError;

/// Why a request was refused before any session saw it.
#[derive(Debug, thiserror::Error)]
pub enum InterpretError {
    #[error("malformed JSON body: {0}")]
    MalformedJson(#[source] serde_json::Error),
    #[error("invalid request: {0}")]
    Invalid(#[source] ParseError),
    #[error("invalid tool call pairing: {0}")]
    ToolPairing(String),
    #[error(transparent)]
    Tenant(#[from] TenantError),
    #[error("{0}")]
    SessionId(#[source] StoreError),
    #[error("{0}")]
    /// A ctxkeeper header (`x-ctxkeeper-pin`, `x-ctxkeeper-focus`) with a value it refuses.
    Header(String),
}

impl InterpretError {
    pub(super) fn into_api(self) -> ApiError {
        let api = match &self {
            InterpretError::Tenant(err) => ApiError::from(err.clone()),
            InterpretError::Invalid(err) => {
                let error = ApiError::invalid_request(self.to_string());
                match &err.position {
                    Position::Path { path, .. } if !path.trim_start_matches("$.").is_empty() => {
                        error.with_param(path.trim_start_matches("$."))
                    }
                    _ => error,
                }
            }
            InterpretError::ToolPairing(_) => {
                ApiError::invalid_request(self.to_string()).with_param("messages")
            }
            InterpretError::MalformedJson(_)
            | InterpretError::SessionId(_)
            | InterpretError::Header(_) => ApiError::invalid_request(self.to_string()),
        };
        api.with_source(self)
    }
}

/// A request as the gateway understands it.
#[derive(Debug)]
pub(super) struct Interpreted {
    pub wire: Wire,
    /// The request as parsed (its messages repaired when the gateway repairs).
    pub request: WireRequest,
    /// What goes upstream when the request goes as it came: the client's own bytes, or
    /// them with the gateway's own compaction items expanded.
    pub body: Bytes,
    /// The client's own bytes.
    pub client_bytes: Bytes,
    /// The body was rewritten before going upstream: not a record for the next request.
    pub rewritten: bool,
    pub stream: bool,
    /// Forwarded untouched: the provider or the client manages this context.
    pub unmanaged: bool,
    /// A Responses `compaction_trigger` the gateway answers itself.
    pub client_compaction: bool,
    /// What repairing the history changed, by kind.
    pub repairs: Option<BTreeMap<String, usize>>,
    pub tenant: String,
    /// The session the client named (`x-ctxkeeper-session`).
    pub header_session: Option<String>,
    /// `x-ctxkeeper-pin: latest`.
    pub pin_latest_user: bool,
    /// The summarizer's focus for this request (`x-ctxkeeper-focus`).
    pub focus: Option<String>,
    /// The body read for its resent prefix, while its record can still be kept.
    pub resent: Option<Reading>,
    /// Holds the body's bytes against the in-flight cap.
    pub _permit: BodyPermit,
}

impl Interpreted {
    /// Whether the gateway manages this request's context.
    pub fn managed(&self) -> bool {
        !self.unmanaged && !self.request.messages.is_empty()
    }
}

/// Parses and checks a body taken in for `endpoint`.
pub(super) fn interpret(
    gw: &Gateway,
    endpoint: Endpoint,
    headers: &HeaderMap,
    received: Received,
) -> Result<Interpreted, InterpretError> {
    let wire = endpoint.wire();
    let Received {
        bytes: client_bytes,
        permit,
        mut resent,
    } = received;
    let mut bytes = client_bytes.clone();
    let skeleton = resent.as_ref().and_then(|reading| reading.skeleton(&bytes));
    let mut from_skeleton = skeleton.is_some();
    let mut value: Value = match skeleton {
        Some(value) => value,
        None => parse_json(&bytes)?,
    };
    // Responses server-side compaction, answered here when the upstream cannot
    // (`compaction_items`): the gateway's own items go upstream as the text they stand for,
    // and a trigger it answers never reaches the upstream.
    let gateway_compacts = endpoint == Endpoint::Responses
        && gw
            .config
            .responses_compaction
            .gateway_answers(&gw.config.upstream);
    let mut client_compaction = false;
    let mut rewritten = false;
    if gateway_compacts {
        let mut expanded = compaction_items::expand_own_items(&mut value);
        client_compaction = compaction_items::take_trigger(&mut value);
        if from_skeleton && (expanded > 0 || client_compaction) {
            // The body sent on is rewritten from the whole request, not from its new part.
            resent = None;
            from_skeleton = false;
            value = parse_json(&bytes)?;
            expanded = compaction_items::expand_own_items(&mut value);
            client_compaction = compaction_items::take_trigger(&mut value);
        }
        if expanded > 0 || client_compaction {
            rewritten = true;
            bytes = Bytes::from(serde_json::to_vec(&value).unwrap_or_default());
        }
    }
    let stream = value.get("stream").and_then(Value::as_bool) == Some(true);
    let unmanaged = unmanaged(endpoint, gateway_compacts, &value);
    let mut request = match wire.parse_request_owned(value) {
        Ok(mut request) if from_skeleton => {
            let spliced = resent
                .as_mut()
                .and_then(|reading| reading.splice(&mut request.messages));
            match spliced {
                Some(reused) => {
                    Metrics::add(&gw.metrics.resent_messages_reused, reused as u64);
                    request
                }
                None => {
                    resent = None;
                    parse_whole(wire, &bytes)?
                }
            }
        }
        Ok(request) => request,
        // The full body gives the error its exact position.
        Err(_) if from_skeleton => {
            resent = None;
            parse_whole(wire, &bytes)?
        }
        Err(error) => return Err(InterpretError::Invalid(error)),
    };
    let repairs = gw
        .config
        .repair
        .then(|| crate::repair::repair_history(&mut request.messages))
        .flatten();
    let pairing = CheckRules {
        internal_markers: false,
        ..CheckRules::openai()
    };
    if let Some(violation) = check(&request.messages, &pairing)
        .into_iter()
        .find(|v| v.kind.is_tool_pairing())
    {
        return Err(InterpretError::ToolPairing(violation.to_string()));
    }
    let tenant = gw.config.tenants.resolve(headers)?;
    let header_session = identity::session_header(headers).map_err(InterpretError::SessionId)?;
    let pin_latest_user = identity::pin_header(headers).map_err(InterpretError::Header)?;
    let focus = identity::focus_header(headers).map_err(InterpretError::Header)?;
    Ok(Interpreted {
        wire,
        request,
        body: bytes,
        client_bytes,
        rewritten,
        stream,
        unmanaged,
        client_compaction,
        repairs,
        tenant,
        header_session,
        pin_latest_user,
        focus,
        resent,
        _permit: permit,
    })
}

/// Whether the context of a request is not the gateway's to manage.
fn unmanaged(endpoint: Endpoint, gateway_compacts: bool, value: &Value) -> bool {
    // Responses continuing a stored response: the upstream holds the history, so there is no
    // context here to manage; forward as it is.
    (endpoint == Endpoint::Responses
        && value
            .get("previous_response_id")
            .is_some_and(|v| !v.is_null()))
        // The client asked the provider to manage the context (Anthropic context editing and
        // compaction, OpenAI Responses server-side compaction): managing it here too would
        // compact one context twice and rewrite what the provider's compaction items stand
        // for. Forwarded untouched.
        || value
            .get("context_management")
            .is_some_and(provider_manages_context)
        // The provider compacts this context itself (Responses `compaction_trigger`).
        || (endpoint == Endpoint::Responses
            && !gateway_compacts
            && compaction_items::has_trigger(value))
}

/// Whether a request's `context_management` hands the context to the provider: an
/// Anthropic edit that clears tool uses or compacts (Claude Code sends
/// `clear_thinking_20251015` on every call, which leaves the conversation alone), or an OpenAI
/// Responses compaction setting (`compact_threshold`).
fn provider_manages_context(management: &Value) -> bool {
    let compacts = |item: &Value| {
        item.get("compact_threshold").is_some()
            || item
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|kind| !kind.starts_with("clear_thinking"))
    };
    match management {
        Value::Object(object) => match object.get("edits") {
            Some(Value::Array(edits)) => edits.iter().any(compacts),
            _ => object.contains_key("compact_threshold"),
        },
        Value::Array(items) => items.iter().any(compacts),
        _ => false,
    }
}

fn parse_json(bytes: &[u8]) -> Result<Value, InterpretError> {
    serde_json::from_slice(bytes).map_err(InterpretError::MalformedJson)
}

/// The whole body parsed, for when its new part alone did not do.
fn parse_whole(wire: Wire, bytes: &[u8]) -> Result<WireRequest, InterpretError> {
    wire.parse_request_owned(parse_json(bytes)?)
        .map_err(InterpretError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_compacting_context_management_hands_the_context_to_the_provider() {
        // What Claude Code sends on every call: thinking blocks only.
        let thinking =
            serde_json::json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]});
        assert!(!provider_manages_context(&thinking));
        let tools = serde_json::json!({"edits": [{"type": "clear_tool_uses_20250919"}]});
        assert!(provider_manages_context(&tools));
        let compact = serde_json::json!({"edits": [{"type": "compact_20260112"}]});
        assert!(provider_manages_context(&compact));
        let responses = serde_json::json!([{"type": "compaction", "compact_threshold": 200000}]);
        assert!(provider_manages_context(&responses));
        assert!(!provider_manages_context(&serde_json::json!(null)));
    }
}
