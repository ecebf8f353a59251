//! Anthropic Messages (`/v1/messages`).
//!
//! A request has a top-level `system` (a string or an array of text blocks) and `messages` of
//! role `user` or `assistant`, whose `content` is a string or an array of blocks: `text`,
//! `image`, `document`, `tool_use`, `tool_result`, `thinking`, `redacted_thinking`, and any
//! other block type kept opaque. The `system` field becomes a leading [`Role::System`] message;
//! a user message that answers tool calls stays a user message holding
//! [`Part::ToolResult`]s, so parse → emit gives back the same JSON. A message of role `system`
//! inside `messages` (mid-conversation instructions, which Claude Code sends to its default
//! model) is a [`Role::System`] message that stays where it was.
//!
//! ```
//! use ctxkeeper_core::formats::anthropic;
//! use ctxkeeper_core::model::Role;
//! use serde_json::json;
//!
//! let body = json!({
//!     "model": "claude-sonnet-4-5",
//!     "max_tokens": 1024,
//!     "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
//!     "messages": [
//!         {"role": "user", "content": "weather in Paris?"},
//!         {"role": "assistant", "content": [
//!             {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
//!         {"role": "user", "content": [
//!             {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}]}
//!     ]
//! });
//! let request = anthropic::parse_request(&body)?;
//! assert_eq!(request.messages[0].role, Role::System);
//! assert_eq!(request.messages[2].tool_calls().next(), Some(("toolu_1", "weather", "{\"city\":\"Paris\"}")));
//! assert_eq!(anthropic::emit_request(&request), body);
//! # Ok::<(), ctxkeeper_core::ParseError>(())
//! ```
//!
//! # Conversions when the messages came from another format
//!
//! - Leading system/developer messages become the `system` field (text only). Instruction
//!   messages after the conversation started (a concatenated trace) become user text.
//! - Tool messages become user messages of `tool_result` blocks. Adjacent messages of the same
//!   side are merged (Anthropic wants all results of one assistant turn in the next user
//!   message), and in a merged user message the `tool_result` blocks come first.
//! - Tool arguments: text that parses as a JSON object is sent as `input`; empty text as `{}`;
//!   anything else (invalid JSON, a JSON array or string) as `{"input": "<the text>"}`, since
//!   `input` must be an object.
//! - Tool-call ids outside `[A-Za-z0-9_-]` (which Anthropic rejects) have each such character
//!   replaced by `_` and a short hash of the original id appended, the same way for the call and
//!   its result, so pairs stay paired and distinct ids stay distinct.
//! - `data:` URL images become base64 sources, `http(s)` URLs stay URL sources; PDFs become
//!   `document` blocks; audio, other file types and archived data become a marker text, as does
//!   any media in an assistant message.
//! - Reasoning is kept only when Anthropic can verify it: `thinking` with its signature and
//!   `redacted_thinking`. Reasoning without a signature and OpenAI's encrypted reasoning are
//!   dropped. Empty text is dropped (Anthropic rejects empty text blocks), then messages left
//!   without content, and opaque parts of other formats.
//! - A conversation that would open with an assistant message gets a short user message
//!   ([`CONTINUATION_TEXT`]) in front, because Anthropic requires a user message first.

use serde_json::{Map, Value, json};

use super::common::{
    DataKind, Fields, JsonPath, ParsedPart, data_kind, emit_request_body, has_string,
    leading_instructions, media_type, native, object_with_extra, omitted_data, opaque_part,
    origin_hints, parse_array, parse_recorded_parts, parse_request_body, private_at, private_flag,
    put_extra, reasoning_portable, same_origin, source_base64, take_string,
};
use super::tools::{
    declared_tool, insert_name_and_description, object_schema, take_request_tools, verbatim_tool,
};
use super::{Wire, tools};
use crate::ParseError;
use crate::json_kind;
use crate::model::{ContentForm, DataSource, Extra, Message, Part, Request, Role, ToolSpec};

mod emit;
pub use emit::{emit_message, emit_messages, emit_system, sanitize_tool_id};

const WIRE: Wire = Wire::Anthropic;

/// Private hint: the message is the request's top-level `system` field.
const SYSTEM: &str = "system";
/// Private hint: a `system` message inside `messages`, emitted back in place.
const INLINE_SYSTEM: &str = "inline_system";
/// Private hint: per-part shape of a `tool_result`'s `content` (`string` or `absent`).
const RESULT_FORMS: &str = "result_forms";

/// The text of the user message put in front of a converted conversation that would otherwise
/// open with an assistant message.
pub const CONTINUATION_TEXT: &str = "(continued)";

/// Parses a list of messages (the `messages` array) into the neutral model.
pub fn parse_messages(value: &Value) -> Result<Vec<Message>, ParseError> {
    parse_messages_at(value.clone(), "$")
}

fn parse_messages_at(value: Value, path: &str) -> Result<Vec<Message>, ParseError> {
    parse_array(value, path, "an array of messages", parse_message_owned)
}

/// Parses one message; `path` locates it in errors (for example `$.messages[3]`).
///
/// Fields other than `role` and `content` (such as the `id`, `model` and `usage` of a logged
/// response) are kept in [`Message::extra`].
pub fn parse_message(value: &Value, path: &str) -> Result<Message, ParseError> {
    parse_message_owned(value.clone(), JsonPath::At(path))
}

fn parse_message_owned(value: Value, path: JsonPath<'_>) -> Result<Message, ParseError> {
    let mut fields = Fields::new(value, path, "a message object")?;
    let role_name = fields.required_str("role")?;
    let role = match role_name.as_str() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" => Role::System,
        other if Role::parse(other).is_some() => {
            return Err(ParseError::at(
                fields.path_of("role"),
                format!(
                    "role {other:?} is not allowed in Anthropic messages (expected \"user\", \"assistant\" or \"system\"; instructions go in the top-level system field)"
                ),
            ));
        }
        other => {
            return Err(ParseError::at(
                fields.path_of("role"),
                format!("unknown role {other:?}"),
            ));
        }
    };
    let content = fields
        .take("content")
        .ok_or_else(|| ParseError::at(fields.path_of("content"), "missing required field"))?;
    let mut message = Message::new(role, Vec::new());
    message.hints = origin_hints(WIRE);
    if role == Role::System {
        message
            .hints
            .private
            .insert(INLINE_SYSTEM.into(), Value::Bool(true));
    }
    // A string needs no path: it is built only for blocks, which may report errors.
    let (form, parts) = match content {
        Value::String(text) => (ContentForm::String, vec![Part::text(text)]),
        other => parse_content(
            other,
            &fields.path_of("content"),
            &mut message.hints.private,
        )?,
    };
    message.hints.content_form = form;
    message.parts = parts;
    message.extra = fields.rest();
    Ok(message)
}

/// Parses a message `content` (or the `system` field): a string or an array of blocks.
fn parse_content(
    content: Value,
    path: &str,
    private: &mut Extra,
) -> Result<(ContentForm, Vec<Part>), ParseError> {
    match content {
        Value::String(text) => Ok((ContentForm::String, vec![Part::text(text)])),
        Value::Array(blocks) => {
            let parse = |block, path: JsonPath<'_>| parse_block(block, path, false);
            let parts = parse_recorded_parts(blocks, path, private, RESULT_FORMS, parse)?;
            Ok((ContentForm::Parts, parts))
        }
        other => Err(ParseError::at(
            path,
            format!(
                "content must be a string or an array of content blocks, found {}",
                json_kind(&other)
            ),
        )),
    }
}

/// Parses one content block. For a `tool_result`, the second value records the shape of its
/// `content` when it is not an array. Inside a tool result (`nested`), tool blocks are not
/// meaningful and are kept opaque.
fn parse_block(value: Value, path: JsonPath<'_>, nested: bool) -> ParsedPart {
    let mut fields = Fields::new(value, path, "a content block object")?;
    let kind = fields.kind()?;
    let part = match kind.as_str() {
        "text" => fields.into_text_part("text")?,
        "image" | "document" => {
            let Some(source) = fields.take_object_if("source", is_plain_source) else {
                return opaque_part(fields);
            };
            fields.take("type");
            Part::Data {
                source: parse_source(source),
                wire_type: Some(kind),
                extra: fields.rest(),
            }
        }
        "tool_use" if !nested => {
            fields.take("type");
            let id = fields.required_str("id")?;
            let name = fields.required_str("name")?;
            let input = fields
                .take("input")
                .ok_or_else(|| ParseError::at(fields.path_of("input"), "missing required field"))?;
            let arguments = serde_json::to_string(&input).map_err(|e| {
                ParseError::at(
                    fields.path_of("input"),
                    format!("input cannot be written back: {e}"),
                )
            })?;
            Part::ToolCall {
                id,
                name,
                arguments,
                extra: fields.rest(),
            }
        }
        "tool_result" if !nested => {
            fields.take("type");
            let call_id = fields.required_str("tool_use_id")?;
            let (content, form) = match fields.take("content") {
                None => (Vec::new(), Some("absent")),
                Some(Value::String(text)) => (vec![Part::text(text)], Some("string")),
                Some(Value::Array(blocks)) => {
                    let content_path = fields.path_of("content");
                    let mut parts = Vec::with_capacity(blocks.len());
                    for (i, block) in blocks.into_iter().enumerate() {
                        parts.push(parse_block(block, JsonPath::Index(&content_path, i), true)?.0);
                    }
                    (parts, None)
                }
                Some(other) => {
                    return Err(ParseError::at(
                        fields.path_of("content"),
                        format!(
                            "tool_result content must be a string or an array of content blocks, found {}",
                            json_kind(&other)
                        ),
                    ));
                }
            };
            // `is_error: true` is the flag; an explicit `false` stays in `extra` verbatim.
            let is_error = fields.get("is_error") == Some(&Value::Bool(true));
            if is_error {
                fields.take("is_error");
            }
            let part = Part::ToolResult {
                call_id,
                content,
                is_error,
                extra: fields.rest(),
            };
            return Ok((part, form));
        }
        "thinking" => {
            fields.take("type");
            let text = fields.required_str("thinking")?;
            let signature = fields.optional_str("signature");
            Part::Reasoning {
                text: Some(text),
                signature,
                encrypted: None,
                redacted: false,
                extra: fields.rest(),
            }
        }
        "redacted_thinking" => {
            fields.take("type");
            let data = fields.required_str("data")?;
            Part::Reasoning {
                text: None,
                signature: None,
                encrypted: Some(data),
                redacted: true,
                extra: fields.rest(),
            }
        }
        _ => return opaque_part(fields),
    };
    Ok((part, None))
}

/// True for a `base64` or `url` source with exactly its known fields; anything else (file ids,
/// text sources, extra fields) keeps the whole block opaque.
fn is_plain_source(source: &Map<String, Value>) -> bool {
    match source.get("type").and_then(Value::as_str) {
        Some("base64") => {
            source.len() == 3 && has_string(source, "media_type") && has_string(source, "data")
        }
        Some("url") => source.len() == 2 && has_string(source, "url"),
        _ => false,
    }
}

/// The source [`is_plain_source`] accepted.
fn parse_source(mut source: Map<String, Value>) -> DataSource {
    if source.get("type").and_then(Value::as_str) == Some("url") {
        DataSource::Url {
            url: take_string(&mut source, "url"),
        }
    } else {
        DataSource::Base64 {
            media_type: take_string(&mut source, "media_type"),
            data: take_string(&mut source, "data"),
        }
    }
}

/// Parses the top-level `system` field (a string or an array of text blocks) into one
/// [`Role::System`] message that emits back to the same shape.
pub fn parse_system(value: &Value, path: &str) -> Result<Message, ParseError> {
    parse_system_owned(value.clone(), path)
}

fn parse_system_owned(value: Value, path: &str) -> Result<Message, ParseError> {
    let mut message = Message::new(Role::System, Vec::new());
    message.hints = origin_hints(WIRE);
    let (form, parts) = match value {
        Value::String(_) => parse_content(value, path, &mut message.hints.private)?,
        Value::Array(blocks) => {
            // The field holds text. Any other block is kept opaque, so that it is emitted back
            // as it came: read as a message's block (a call, an image, thinking), it would be a
            // part the `system` field is never written with, and lost.
            let mut parts = Vec::with_capacity(blocks.len());
            for (i, block) in blocks.into_iter().enumerate() {
                let typed_other = block
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|kind| kind != "text");
                let part = if typed_other {
                    Part::Opaque { value: block }
                } else {
                    parse_block(block, JsonPath::Index(path, i), false)?.0
                };
                parts.push(part);
            }
            (ContentForm::Parts, parts)
        }
        other => {
            return Err(ParseError::at(
                path,
                format!(
                    "system must be a string or an array of text blocks, found {}",
                    json_kind(&other)
                ),
            ));
        }
    };
    message.parts = parts;
    message.hints.content_form = form;
    message
        .hints
        .private
        .insert(SYSTEM.into(), Value::Bool(true));
    Ok(message)
}

/// Parses an Anthropic `tools` array.
pub fn parse_tools(value: &Value) -> Result<Vec<ToolSpec>, ParseError> {
    parse_array(value.clone(), "$", "an array of tools", parse_tool)
}

fn parse_tool(value: Value, path: JsonPath<'_>) -> Result<ToolSpec, ParseError> {
    let fields = Fields::new(value, path, "a tool object")?;
    if fields.get("input_schema").is_none() {
        // A server tool or a versioned client tool (`{"type": "bash_20250124", "name": "bash"}`).
        let name = match (fields.get("name"), fields.get("type")) {
            (Some(Value::String(name)), _) | (None, Some(Value::String(name))) => name.clone(),
            _ => String::new(),
        };
        // Nothing was taken out: the object is whole.
        return Ok(verbatim_tool(name, fields.into_value(), WIRE));
    }
    // The schema is there, so no "no parameters" hint is recorded.
    declared_tool(fields, "input_schema", origin_hints(WIRE))
}

/// Emits tools as an Anthropic `tools` array. Tools that only another provider can run (hosted
/// or custom-grammar tools kept verbatim) are left out.
pub fn emit_tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools::emit_tools(tools, WIRE, declared_tool_value)
}

/// A tool declared in full (not kept verbatim); `same` when it came from this format.
fn declared_tool_value(tool: &ToolSpec, same: bool) -> Value {
    let mut obj = Map::new();
    insert_name_and_description(&mut obj, tool);
    let schema = if same {
        tool.parameters.clone()
    } else {
        object_schema(&tool.parameters)
    };
    obj.insert("input_schema".into(), schema);
    object_with_extra(obj, &tool.extra, native(&tool.hints, WIRE))
}

/// Parses a whole Anthropic request body: `model`, `system` (as a leading system message),
/// `messages`, `tools`, and every other field kept in [`Request::extra`].
///
/// The body is cloned once; [`parse_request_owned`] parses a body it may consume.
pub fn parse_request(body: &Value) -> Result<Request, ParseError> {
    parse_request_owned(body.clone())
}

/// Parses a request body it takes ownership of: nothing is cloned. Otherwise the same as
/// [`parse_request`].
pub fn parse_request_owned(body: Value) -> Result<Request, ParseError> {
    parse_request_body(body, |fields| {
        let system = match fields.get("system") {
            Some(Value::Null) | None => None,
            Some(_) => match fields.take("system") {
                Some(value) => Some(parse_system_owned(value, "$.system")?),
                None => None,
            },
        };
        let mut messages: Vec<Message> = system.into_iter().collect();
        match fields.take("messages") {
            Some(value) => messages.extend(parse_messages_at(value, "$.messages")?),
            None => return Err(ParseError::at("$.messages", "missing required field")),
        }
        let tools = take_request_tools(fields, parse_tool)?;
        Ok((messages, tools, origin_hints(WIRE)))
    })
}

/// Emits a whole Anthropic request body.
pub fn emit_request(request: &Request) -> Value {
    emit_request_body(request, WIRE, |obj| {
        if let Some(system) = emit_system(&request.messages) {
            obj.insert("system".into(), system);
        }
        obj.insert(
            "messages".into(),
            Value::Array(emit_messages(&request.messages)),
        );
        let mut tools = emit_tools(&request.tools);
        let same = same_origin(&request.hints, WIRE);
        if tools.is_empty() && !same {
            tools = declare_history_tools(&request.messages);
        }
        if !tools.is_empty() || (same && !request.tools.is_empty()) {
            obj.insert("tools".into(), Value::Array(tools));
        }
    })
}

/// Declarations for the tools called in a converted conversation that declares none.
///
/// Anthropic rejects a request whose messages hold `tool_use` or `tool_result` blocks when it
/// defines no tools; a conversation from another format (a trace, or a request that dropped its
/// tool list) declares each called tool by name with an open object schema.
fn declare_history_tools(messages: &[Message]) -> Vec<Value> {
    let mut names: Vec<&str> = Vec::new();
    for (_, name, _) in messages.iter().flat_map(Message::tool_calls) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|name| json!({"name": name, "input_schema": {"type": "object"}}))
        .collect()
}

/// True when the message is the `system` field of a request parsed from this format.
pub fn is_system_field(message: &Message) -> bool {
    same_origin(&message.hints, WIRE) && private_flag(&message.hints, SYSTEM)
}

#[cfg(test)]
mod tests;
