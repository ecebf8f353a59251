//! The bridge from importers to the wire adapters, and the bare wire-format "traces".
//!
//! Importers never parse a wire shape themselves: a tau-bench or SWE-agent message is an OpenAI
//! chat message, a Claude Code `message` is an Anthropic message, a Codex `response_item` is a
//! Responses item, and the adapters in [`crate::formats`] own those shapes. This module is the
//! one place that calls them, so an importer reads as a mapping of log entries, not of JSON.

use serde_json::Value;

use super::{Session, TraceFormat, parse_document};
use crate::ParseError;
use crate::formats::{Wire, anthropic, openai_chat, responses};
use crate::json_kind;
use crate::model::{Message, ToolSpec};

/// One OpenAI chat message; errors are reported under `path`.
pub(super) fn chat_message(value: &Value, path: &str) -> Result<Message, ParseError> {
    openai_chat::parse_message(value, path)
}

/// One Anthropic message; errors are reported under `path`.
pub(super) fn anthropic_message(value: &Value, path: &str) -> Result<Message, ParseError> {
    anthropic::parse_message(value, path)
}

/// A run of OpenAI Responses items; errors are reported as `$[index]…` into `items`.
pub(super) fn responses_items(items: &[Value]) -> Result<Vec<Message>, ParseError> {
    responses::parse_items(items)
}

/// An OpenAI chat `tools` array.
pub(super) fn chat_tools(value: &Value) -> Result<Vec<ToolSpec>, ParseError> {
    openai_chat::parse_tools(value)
}

/// Imports a bare request body (or message / item array) of one of the wire formats as a
/// single session with the id `"0"`.
pub(super) fn import_bare(text: &str, format: TraceFormat) -> Result<Session, ParseError> {
    let wire = match format {
        TraceFormat::Anthropic => Wire::Anthropic,
        TraceFormat::Responses => Wire::Responses,
        _ => Wire::OpenAiChat,
    };
    let doc = parse_document(text)?;
    let session = match &doc {
        Value::Object(_) => {
            let request = wire.parse_request_owned(doc)?;
            Session {
                id: "0".to_string(),
                model: request.model,
                messages: request.messages,
                tools: request.tools,
                parent: None,
            }
        }
        Value::Array(items) => {
            let messages = match wire {
                Wire::OpenAiChat => openai_chat::parse_messages(&doc)?,
                Wire::Anthropic => anthropic::parse_messages(&doc)?,
                Wire::Responses => responses::parse_items(items)?,
            };
            Session {
                id: "0".to_string(),
                messages,
                ..Session::default()
            }
        }
        other => {
            return Err(ParseError::at(
                "$",
                format!(
                    "expected a {} request body or message array, found {}",
                    wire.as_str(),
                    json_kind(other)
                ),
            ));
        }
    };
    Ok(session)
}
