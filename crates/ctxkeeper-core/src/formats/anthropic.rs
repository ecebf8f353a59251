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

use super::Wire;
use super::common::{
    DataKind, Fields, JsonPath, data_kind, expect_array, has_string, leading_instructions,
    media_type, native, object_schema, omitted_data, origin_hints, portable_request_extra,
    private_at, private_flag, put_extra, reasoning_portable, record_at, same_origin, source_base64,
    take_string, type_name,
};
use crate::ParseError;
use crate::model::{ContentForm, DataSource, Extra, Message, Part, Request, Role, ToolSpec};

const WIRE: Wire = Wire::Anthropic;

/// Private hint: the message is the request's top-level `system` field.
const SYSTEM: &str = "system";
/// Private hint: a `system` message inside `messages`, emitted back in place.
const INLINE_SYSTEM: &str = "inline_system";
/// Private hint: per-part shape of a `tool_result`'s `content` (`string` or `absent`).
const RESULT_FORMS: &str = "result_forms";
/// Tool hint: a tool without `input_schema` (server or versioned client tool), kept verbatim.
const VERBATIM: &str = "verbatim";

/// The text of the user message put in front of a converted conversation that would otherwise
/// open with an assistant message.
pub const CONTINUATION_TEXT: &str = "(continued)";

/// Parses a list of messages (the `messages` array) into the neutral model.
pub fn parse_messages(value: &Value) -> Result<Vec<Message>, ParseError> {
    parse_messages_at(value.clone(), "$")
}

fn parse_messages_at(value: Value, path: &str) -> Result<Vec<Message>, ParseError> {
    let items = expect_array(value, path, "an array of messages")?;
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        messages.push(parse_message_owned(item, JsonPath::Index(path, i))?);
    }
    Ok(messages)
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
            let mut parts = Vec::with_capacity(blocks.len());
            for (i, block) in blocks.into_iter().enumerate() {
                let (part, form) = parse_block(block, JsonPath::Index(path, i), false)?;
                if let Some(form) = form {
                    record_at(private, RESULT_FORMS, i, form);
                }
                parts.push(part);
            }
            Ok((ContentForm::Parts, parts))
        }
        other => Err(ParseError::at(
            path,
            format!(
                "content must be a string or an array of content blocks, found {}",
                type_name(&other)
            ),
        )),
    }
}

/// Parses one content block. For a `tool_result`, the second value records the shape of its
/// `content` when it is not an array. Inside a tool result (`nested`), tool blocks are not
/// meaningful and are kept opaque.
fn parse_block(
    value: Value,
    path: JsonPath<'_>,
    nested: bool,
) -> Result<(Part, Option<&'static str>), ParseError> {
    let mut fields = Fields::new(value, path, "a content block object")?;
    let kind = fields.kind()?;
    // Only called before anything is taken out of `fields`.
    let opaque = |fields: Fields| {
        Ok((
            Part::Opaque {
                value: fields.into_value(),
            },
            None,
        ))
    };
    let part = match kind.as_str() {
        "text" => {
            fields.take("type");
            let text = fields.required_str("text")?;
            Part::Text {
                text,
                extra: fields.rest(),
            }
        }
        "image" | "document" => {
            let Some(source) = fields.take_object_if("source", is_plain_source) else {
                return opaque(fields);
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
                            type_name(&other)
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
        _ => return opaque(fields),
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
                    type_name(&other)
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

/// Emits neutral messages as an Anthropic `messages` list.
///
/// Leading system/developer messages are not part of this list: they belong in the `system`
/// field (see [`emit_system`] and [`emit_request`]). Messages parsed from this format come back
/// exactly as they were; others are converted as the module documentation describes.
pub fn emit_messages(messages: &[Message]) -> Vec<Value> {
    let start = system_field_len(messages);
    let mut outs: Vec<Out> = Vec::with_capacity(messages.len() - start);
    for message in &messages[start..] {
        let Some(out) = convert(message) else {
            continue;
        };
        match outs.last_mut() {
            Some(prev) if prev.role == out.role && (prev.foreign || out.foreign) => {
                prev.absorb(out)
            }
            _ => outs.push(out),
        }
    }
    let mut values = Vec::with_capacity(outs.len() + 1);
    if outs
        .first()
        .is_some_and(|o| o.role == Role::Assistant && o.foreign)
    {
        values.push(json!({"role": "user", "content": CONTINUATION_TEXT}));
    }
    values.extend(outs.into_iter().map(Out::into_value));
    values
}

/// Emits one message (an instruction message gives nothing: it belongs in `system`).
pub fn emit_message(message: &Message) -> Vec<Value> {
    emit_messages(std::slice::from_ref(message))
}

/// The `system` field for the leading system/developer messages of `messages`, or `None` when
/// there are none. A `system` parsed from this format comes back in its exact shape; otherwise
/// one plain text gives a string and anything more an array of text blocks (non-text parts are
/// dropped: the field holds text only).
pub fn emit_system(messages: &[Message]) -> Option<Value> {
    let leading = &messages[..system_field_len(messages)];
    if let [only] = leading {
        let exact_string =
            same_origin(&only.hints, WIRE) && only.hints.content_form == ContentForm::String;
        if let (true, [Part::Text { text, extra }]) = (exact_string, only.parts.as_slice())
            && extra.is_empty()
        {
            return Some(json!(text));
        }
    }
    let mut blocks = Vec::new();
    let mut any_same = false;
    for message in leading {
        let same = same_origin(&message.hints, WIRE);
        any_same |= same;
        let native = native(&message.hints, WIRE);
        for part in &message.parts {
            match part {
                Part::Text { text, extra } if same || !text.trim().is_empty() => {
                    blocks.push(text_block(text, extra, native));
                }
                Part::Opaque { value } if native => blocks.push(value.clone()),
                _ => {}
            }
        }
    }
    if !any_same {
        if blocks.is_empty() {
            return None;
        }
        if let [single] = blocks.as_slice()
            && is_plain_text(single)
        {
            return single.get("text").cloned();
        }
    }
    Some(Value::Array(blocks))
}

/// How many leading messages make up the `system` field: the leading instruction messages, up
/// to the first `system` message that was parsed from inside `messages` (it goes back there).
fn system_field_len(messages: &[Message]) -> usize {
    let leading = leading_instructions(messages);
    messages[..leading]
        .iter()
        .position(is_inline_system)
        .unwrap_or(leading)
}

/// True when the message is a `system` message parsed from inside `messages`.
fn is_inline_system(message: &Message) -> bool {
    same_origin(&message.hints, WIRE) && private_flag(&message.hints, INLINE_SYSTEM)
}

/// A message on its way out: its wire role and content, and whether it came from another
/// format (only such messages are merged, so a parsed conversation round-trips unchanged).
struct Out {
    role: Role,
    content: OutContent,
    extra: Extra,
    foreign: bool,
}

enum OutContent {
    Text(String),
    Blocks(Vec<Value>),
}

impl Out {
    fn into_blocks(content: OutContent) -> Vec<Value> {
        match content {
            OutContent::Blocks(blocks) => blocks,
            OutContent::Text(text) if text.trim().is_empty() => Vec::new(),
            OutContent::Text(text) => vec![json!({"type": "text", "text": text})],
        }
    }

    /// Appends the next message of the same side.
    fn absorb(&mut self, next: Out) {
        let current = std::mem::replace(&mut self.content, OutContent::Blocks(Vec::new()));
        let mut blocks = Out::into_blocks(current);
        blocks.extend(Out::into_blocks(next.content));
        if self.role == Role::User {
            results_first(&mut blocks);
        }
        self.content = OutContent::Blocks(blocks);
        put_extra(&mut self.extra, &next.extra);
        self.foreign = true;
    }

    fn into_value(self) -> Value {
        let mut obj = Map::new();
        obj.insert("role".into(), json!(self.role.as_str()));
        let content = match self.content {
            OutContent::Text(text) => json!(text),
            OutContent::Blocks(blocks) => match blocks.as_slice() {
                [single] if self.foreign && is_plain_text(single) => {
                    single.get("text").cloned().unwrap_or(Value::Null)
                }
                _ => Value::Array(blocks),
            },
        };
        obj.insert("content".into(), content);
        put_extra(&mut obj, &self.extra);
        Value::Object(obj)
    }
}

/// Moves `tool_result` blocks in front of the other blocks, keeping each group's order:
/// Anthropic wants the results of a tool turn first in the user message.
fn results_first(blocks: &mut Vec<Value>) {
    let (mut results, others): (Vec<Value>, Vec<Value>) = std::mem::take(blocks)
        .into_iter()
        .partition(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"));
    results.extend(others);
    *blocks = results;
}

fn is_plain_text(value: &Value) -> bool {
    value.as_object().is_some_and(|o| {
        o.len() == 2
            && o.get("type").and_then(Value::as_str) == Some("text")
            && o.get("text").is_some_and(Value::is_string)
    })
}

fn text_block(text: &str, extra: &Extra, keep_extra: bool) -> Value {
    let mut obj = Map::new();
    obj.insert("type".into(), json!("text"));
    obj.insert("text".into(), json!(text));
    if keep_extra {
        put_extra(&mut obj, extra);
    }
    Value::Object(obj)
}

/// Converts one message; `None` when nothing of it can be sent.
fn convert(message: &Message) -> Option<Out> {
    let same = same_origin(&message.hints, WIRE)
        && (matches!(message.role, Role::User | Role::Assistant) || is_inline_system(message));
    if same {
        let content = match (message.hints.content_form, message.parts.as_slice()) {
            (ContentForm::String, [Part::Text { text, extra }]) if extra.is_empty() => {
                OutContent::Text(text.clone())
            }
            _ => OutContent::Blocks(
                message
                    .parts
                    .iter()
                    .enumerate()
                    .map(|(index, part)| same_block(message, index, part))
                    .collect(),
            ),
        };
        return Some(Out {
            role: message.role,
            content,
            extra: message.extra.clone(),
            foreign: false,
        });
    }
    let native = native(&message.hints, WIRE);
    let role = if message.role == Role::Assistant {
        Role::Assistant
    } else {
        Role::User
    };
    let mut blocks: Vec<Value> = message
        .parts
        .iter()
        .filter_map(|part| foreign_block(part, role, native))
        .collect();
    if blocks.is_empty() {
        return None;
    }
    if role == Role::User {
        results_first(&mut blocks);
    }
    let extra = if native {
        message.extra.clone()
    } else {
        Extra::new()
    };
    Some(Out {
        role,
        content: OutContent::Blocks(blocks),
        extra,
        foreign: true,
    })
}

/// A block of a message parsed from this format, rebuilt exactly.
fn same_block(message: &Message, index: usize, part: &Part) -> Value {
    match part {
        Part::Text { text, extra } => text_block(text, extra, true),
        Part::Data {
            source,
            wire_type,
            extra,
        } => {
            let kind = data_kind(wire_type.as_deref(), source);
            let source_value = match source {
                DataSource::Base64 { media_type, data } => {
                    json!({"type": "base64", "media_type": media_type, "data": data})
                }
                DataSource::Url { url } => json!({"type": "url", "url": url}),
                DataSource::Archived { .. } => {
                    return json!({"type": "text", "text": omitted_data(kind, source, WIRE)});
                }
            };
            let block_type = wire_type
                .clone()
                .unwrap_or_else(|| block_type_for(kind).to_string());
            let mut obj = Map::new();
            obj.insert("type".into(), json!(block_type));
            obj.insert("source".into(), source_value);
            put_extra(&mut obj, extra);
            Value::Object(obj)
        }
        Part::ToolCall {
            id,
            name,
            arguments,
            extra,
        } => tool_use_block(id.clone(), name, input_value(arguments, true), extra, true),
        Part::ToolResult {
            call_id,
            content,
            is_error,
            extra,
        } => {
            let mut obj = Map::new();
            obj.insert("type".into(), json!("tool_result"));
            obj.insert("tool_use_id".into(), json!(call_id));
            let form = private_at(&message.hints, RESULT_FORMS, index);
            match (form, content.as_slice()) {
                (Some("absent"), []) => {}
                (Some("string"), [Part::Text { text, extra }]) if extra.is_empty() => {
                    obj.insert("content".into(), json!(text));
                }
                _ => {
                    let inner = content
                        .iter()
                        .enumerate()
                        .map(|(i, part)| same_block(&Message::new(Role::User, Vec::new()), i, part))
                        .collect();
                    obj.insert("content".into(), Value::Array(inner));
                }
            }
            if *is_error {
                obj.insert("is_error".into(), Value::Bool(true));
            }
            put_extra(&mut obj, extra);
            Value::Object(obj)
        }
        Part::Reasoning { .. } => reasoning_block(part, true),
        Part::Opaque { value } => value.clone(),
    }
}

fn block_type_for(kind: DataKind) -> &'static str {
    match kind {
        DataKind::Image => "image",
        DataKind::Audio | DataKind::File => "document",
    }
}

fn tool_use_block(id: String, name: &str, input: Value, extra: &Extra, keep_extra: bool) -> Value {
    let mut obj = Map::new();
    obj.insert("type".into(), json!("tool_use"));
    obj.insert("id".into(), json!(id));
    obj.insert("name".into(), json!(name));
    obj.insert("input".into(), input);
    if keep_extra {
        put_extra(&mut obj, extra);
    }
    Value::Object(obj)
}

fn reasoning_block(part: &Part, keep_extra: bool) -> Value {
    let Part::Reasoning {
        text,
        signature,
        encrypted,
        redacted,
        extra,
    } = part
    else {
        return Value::Null;
    };
    let mut obj = Map::new();
    if *redacted {
        obj.insert("type".into(), json!("redacted_thinking"));
        obj.insert("data".into(), json!(encrypted.clone().unwrap_or_default()));
    } else {
        obj.insert("type".into(), json!("thinking"));
        obj.insert("thinking".into(), json!(text.clone().unwrap_or_default()));
        if let Some(signature) = signature {
            obj.insert("signature".into(), json!(signature));
        }
    }
    if keep_extra {
        put_extra(&mut obj, extra);
    }
    Value::Object(obj)
}

/// The `input` object for tool-call arguments.
///
/// Text that parses as a JSON object is used as is; empty text becomes `{}`. For a call parsed
/// from this format (`exact`), any JSON value is written back as it was. Anything else is
/// wrapped as `{"input": "<the text>"}`: Anthropic requires an object, and the model still
/// sees exactly what was sent.
fn input_value(arguments: &str, exact: bool) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Map::new());
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => value,
        Ok(value) if exact => value,
        _ => json!({"input": arguments}),
    }
}

/// A tool-call id Anthropic accepts (`^[a-zA-Z0-9_-]+$`). Valid ids are unchanged; otherwise
/// each other character becomes `_` and a hash of the original id is appended, so that two
/// different ids never collapse into one.
pub fn sanitize_tool_id(id: &str) -> String {
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !id.is_empty() && id.chars().all(valid) {
        return id.to_string();
    }
    let cleaned: String = id.chars().map(|c| if valid(c) { c } else { '_' }).collect();
    // FNV-1a: stable across runs and platforms, which `std`'s hasher does not promise.
    let hash = id.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("{cleaned}_{hash:08x}")
}

/// A part of a message from another format (or built by the engine), converted; `None` when
/// Anthropic cannot carry it in this position.
fn foreign_block(part: &Part, role: Role, native: bool) -> Option<Value> {
    match part {
        Part::Text { text, extra } => {
            (!text.trim().is_empty()).then(|| text_block(text, extra, native))
        }
        Part::Data {
            source,
            wire_type,
            extra,
        } => {
            let kind = data_kind(wire_type.as_deref(), source);
            let block = if role == Role::User {
                media_block(kind, source)
            } else {
                None
            };
            Some(match block {
                Some(mut block) => {
                    if native && let Value::Object(obj) = &mut block {
                        put_extra(obj, extra);
                    }
                    block
                }
                None => json!({"type": "text", "text": omitted_data(kind, source, WIRE)}),
            })
        }
        Part::ToolCall {
            id,
            name,
            arguments,
            extra,
        } if role == Role::Assistant => Some(tool_use_block(
            sanitize_tool_id(id),
            name,
            input_value(arguments, false),
            extra,
            native,
        )),
        Part::ToolResult {
            call_id,
            content,
            is_error,
            extra,
        } if role == Role::User => {
            let mut obj = Map::new();
            obj.insert("type".into(), json!("tool_result"));
            obj.insert("tool_use_id".into(), json!(sanitize_tool_id(call_id)));
            let inner: Vec<Value> = content
                .iter()
                .filter(|p| matches!(p, Part::Text { .. } | Part::Data { .. }))
                .filter_map(|p| foreign_block(p, Role::User, native))
                .collect();
            match inner.as_slice() {
                [] => {}
                [single] if is_plain_text(single) => {
                    obj.insert(
                        "content".into(),
                        single.get("text").cloned().unwrap_or_default(),
                    );
                }
                _ => {
                    obj.insert("content".into(), Value::Array(inner));
                }
            }
            if *is_error {
                obj.insert("is_error".into(), Value::Bool(true));
            }
            if native {
                put_extra(&mut obj, extra);
            }
            Some(Value::Object(obj))
        }
        Part::Reasoning { .. } if role == Role::Assistant && reasoning_portable(part, WIRE) => {
            Some(reasoning_block(part, native))
        }
        Part::Opaque { value } if native => Some(value.clone()),
        _ => None,
    }
}

/// An `image` or `document` block for media from another format, when Anthropic can take it.
fn media_block(kind: DataKind, source: &DataSource) -> Option<Value> {
    let source_value = match source {
        DataSource::Url { url } if url.starts_with("http://") || url.starts_with("https://") => {
            json!({"type": "url", "url": url})
        }
        _ => {
            let (media_type, data) = source_base64(source)?;
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
    };
    match kind {
        DataKind::Image => Some(json!({"type": "image", "source": source_value})),
        // Anthropic reads PDF documents (inline or by URL); other file types are not accepted.
        DataKind::File
            if media_type(source) == Some("application/pdf")
                || source_value.get("type") == Some(&json!("url")) =>
        {
            Some(json!({"type": "document", "source": source_value}))
        }
        DataKind::File | DataKind::Audio => None,
    }
}

/// Parses an Anthropic `tools` array.
pub fn parse_tools(value: &Value) -> Result<Vec<ToolSpec>, ParseError> {
    parse_tools_at(value.clone(), "$")
}

fn parse_tools_at(value: Value, path: &str) -> Result<Vec<ToolSpec>, ParseError> {
    let items = expect_array(value, path, "an array of tools")?;
    let mut tools = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        tools.push(parse_tool(item, JsonPath::Index(path, i))?);
    }
    Ok(tools)
}

fn parse_tool(value: Value, path: JsonPath<'_>) -> Result<ToolSpec, ParseError> {
    let mut fields = Fields::new(value, path, "a tool object")?;
    let mut hints = origin_hints(WIRE);
    if fields.get("input_schema").is_none() {
        // A server tool or a versioned client tool (`{"type": "bash_20250124", "name": "bash"}`).
        let name = match (fields.get("name"), fields.get("type")) {
            (Some(Value::String(name)), _) | (None, Some(Value::String(name))) => name.clone(),
            _ => String::new(),
        };
        // Nothing was taken out: the object is whole.
        hints.private.insert(VERBATIM.into(), fields.into_value());
        return Ok(ToolSpec {
            name,
            description: None,
            parameters: Value::Null,
            extra: Extra::new(),
            hints,
        });
    }
    let name = fields.required_str("name")?;
    let description = fields.optional_str("description");
    let parameters = fields.take("input_schema").unwrap_or(Value::Null);
    Ok(ToolSpec {
        name,
        description,
        parameters,
        extra: fields.rest(),
        hints,
    })
}

/// Emits tools as an Anthropic `tools` array. Tools that only another provider can run (hosted
/// or custom-grammar tools kept verbatim) are left out.
pub fn emit_tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools.iter().filter_map(emit_tool).collect()
}

fn emit_tool(tool: &ToolSpec) -> Option<Value> {
    let same = same_origin(&tool.hints, WIRE);
    if let Some(verbatim) = tool.hints.private.get(VERBATIM) {
        return same.then(|| verbatim.clone());
    }
    let mut obj = Map::new();
    obj.insert("name".into(), json!(tool.name));
    if let Some(description) = &tool.description {
        obj.insert("description".into(), json!(description));
    }
    let schema = if same {
        tool.parameters.clone()
    } else {
        object_schema(&tool.parameters)
    };
    obj.insert("input_schema".into(), schema);
    if native(&tool.hints, WIRE) {
        put_extra(&mut obj, &tool.extra);
    }
    Some(Value::Object(obj))
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
    let mut fields = Fields::new(body, JsonPath::At("$"), "a request object")?;
    let model = fields.optional_str("model");
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
    let tools = match fields.get("tools") {
        // An empty list declares nothing: it stays in `extra` verbatim.
        Some(Value::Array(tools)) if !tools.is_empty() => match fields.take("tools") {
            Some(value) => parse_tools_at(value, "$.tools")?,
            None => Vec::new(),
        },
        _ => Vec::new(),
    };
    Ok(Request {
        model,
        messages,
        tools,
        extra: fields.rest(),
        hints: origin_hints(WIRE),
    })
}

/// Emits a whole Anthropic request body.
pub fn emit_request(request: &Request) -> Value {
    let mut obj = Map::new();
    if let Some(model) = &request.model {
        obj.insert("model".into(), json!(model));
    }
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
    put_extra(&mut obj, &portable_request_extra(request, WIRE));
    Value::Object(obj)
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
mod tests {
    use super::*;

    fn round_trip(input: Value) {
        let messages = parse_messages(&input).unwrap_or_else(|e| panic!("{e}: {input}"));
        assert_eq!(Value::Array(emit_messages(&messages)), input);
    }

    #[test]
    fn messages_round_trip() {
        let cases = [
            json!([{"role": "user", "content": "hi"}]),
            json!([{"role": "user", "content": []}]),
            json!([{"role": "user", "content": [
                {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}, "title": "t"}
            ]}]),
            json!([{"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig=="},
                {"type": "redacted_thinking", "data": "blob"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"b": 1, "a": [1.5, "x"]}},
                {"type": "tool_use", "id": "t2", "name": "g", "input": {}}
            ], "id": "msg_1", "usage": {"input_tokens": 3}}]),
            json!([{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": false},
                {"type": "tool_result", "tool_use_id": "t2", "is_error": true},
                {"type": "tool_result", "tool_use_id": "t3", "content": [
                    {"type": "text", "text": "chart"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}}
                ]},
                {"type": "tool_result", "tool_use_id": "t4", "content": []},
                {"type": "text", "text": "continue"}
            ]}]),
            json!([{"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}]}]),
        ];
        for case in cases {
            round_trip(case);
        }
    }

    #[test]
    fn system_messages_inside_messages_stay_in_place() {
        round_trip(
            json!([{"role": "system", "content": "first"}, {"role": "user", "content": "x"}]),
        );
        let body = json!({"model": "m", "max_tokens": 5,
        "system": [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "task"}]},
            {"role": "system", "content": "Available agent types: ..."},
            {"role": "system", "content": [{"type": "text", "text": "more"}]},
            {"role": "assistant", "content": "ok"}
        ]});
        let request = parse_request(&body).expect("valid");
        let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::System,
                Role::System,
                Role::Assistant
            ]
        );
        assert_eq!(emit_request(&request), body);
        // Without a top-level system field, a leading inline one is not hoisted into it.
        let body = json!({"model": "m", "max_tokens": 5,
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]});
        let request = parse_request(&body).expect("valid");
        assert_eq!(emit_request(&request), body);
    }

    /// Claude Code 2.1.197 with its default model puts the agent list in a `system` message
    /// after the first user message (beta `mid-conversation-system-2026-04-07`).
    #[test]
    fn claude_code_request_with_a_mid_conversation_system_message_round_trips() {
        let body: Value = serde_json::from_str(include_str!(
            "../../../../tests/python/fixtures/agents/claude-code-2.1.197-request-3.json"
        ))
        .expect("fixture is JSON");
        assert_eq!(body["messages"][1]["role"], "system");
        let request = parse_request(&body).expect("Claude Code's request parses");
        assert_eq!(emit_request(&request), body);
    }

    #[test]
    fn requests_round_trip_with_both_system_shapes() {
        for system in [
            json!("rules"),
            json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}]),
            json!([]),
        ] {
            let body = json!({"model": "m", "max_tokens": 5, "system": system,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
                          {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]});
            let request = parse_request(&body).expect("valid");
            assert!(is_system_field(&request.messages[0]));
            assert_eq!(emit_request(&request), body);
        }
    }

    /// Found by the `wire_anthropic` fuzz target: a `system` array holding a block other than
    /// text (a `tool_use`, an image) was read as a message's part and left out when emitted.
    #[test]
    fn system_blocks_other_than_text_round_trip() {
        let system = json!([
            {"type": "text", "text": "rules"},
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a"}},
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
            {"type": "thinking", "thinking": "t", "signature": "s"}
        ]);
        let body = json!({"model": "m", "max_tokens": 5, "system": system,
            "messages": [{"role": "user", "content": "x"}]});
        let request = parse_request(&body).expect("valid");
        assert_eq!(request.messages[0].text(), "rules");
        assert_eq!(request.messages[0].tool_calls().count(), 0);
        assert_eq!(emit_request(&request), body);
        // A text block is still read as one: a malformed one is still an error.
        let broken = json!({"model": "m", "max_tokens": 5, "system": [{"type": "text"}],
            "messages": [{"role": "user", "content": "x"}]});
        assert!(parse_request(&broken).is_err());
    }

    #[test]
    fn foreign_tool_messages_merge_into_one_user_message() {
        let messages = vec![
            Message::system("rules"),
            Message::user("go"),
            Message::assistant_with_calls(
                "",
                vec![
                    Part::tool_call("a", "f", "{\"x\":1}"),
                    Part::tool_call("b/../c", "g", "not json"),
                ],
            ),
            Message::tool_result("a", "1"),
            Message::tool_result("b/../c", "2"),
            Message::user("thanks"),
            Message::system("late rules"),
        ];
        let out = emit_messages(&messages);
        let safe = sanitize_tool_id("b/../c");
        assert_eq!(
            Value::Array(out),
            json!([
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "a", "name": "f", "input": {"x": 1}},
                    {"type": "tool_use", "id": safe, "name": "g", "input": {"input": "not json"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                    {"type": "tool_result", "tool_use_id": safe, "content": "2"},
                    {"type": "text", "text": "thanks"},
                    {"type": "text", "text": "late rules"}
                ]}
            ])
        );
        assert_eq!(emit_system(&messages), Some(json!("rules")));
    }

    #[test]
    fn sanitized_ids_are_valid_and_distinct() {
        let cases = [
            "toolu_01",
            "call-2",
            "../../etc/passwd",
            "a.b",
            "a/b",
            "",
            "fc_x",
        ];
        let mut seen = std::collections::HashSet::new();
        for id in cases {
            let safe = sanitize_tool_id(id);
            assert!(
                !safe.is_empty()
                    && safe
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                "{safe}"
            );
            assert!(seen.insert(safe), "{id} collides");
        }
        assert_eq!(sanitize_tool_id("toolu_01"), "toolu_01");
    }

    #[test]
    fn malformed_messages_report_their_path() {
        let cases = [
            (
                json!([{"role": "developer", "content": "x"}]),
                "$[0].role",
                "not allowed",
            ),
            (
                json!([{"role": "narrator", "content": "x"}]),
                "$[0].role",
                "unknown role",
            ),
            (json!([{"role": "user"}]), "$[0].content", "missing"),
            (
                json!([{"role": "user", "content": 1}]),
                "$[0].content",
                "found a number",
            ),
            (
                json!([{"role": "user", "content": [{"text": "x"}]}]),
                "$[0].content[0].type",
                "missing",
            ),
            (
                json!([{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f"}]}]),
                "$[0].content[0].input",
                "missing",
            ),
            (
                json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": 5}]}]),
                "$[0].content[0].content",
                "found a number",
            ),
        ];
        super::super::common::assert_path_errors(parse_messages, &cases);
    }

    #[test]
    fn arguments_become_objects() {
        let cases = [
            ("{\"a\":1}", json!({"a": 1})),
            ("", json!({})),
            ("[1]", json!({"input": "[1]"})),
            ("{broken", json!({"input": "{broken"})),
        ];
        for (arguments, expected) in cases {
            assert_eq!(input_value(arguments, false), expected, "{arguments}");
        }
    }
}
