//! OpenAI Chat Completions (`/v1/chat/completions`).
//!
//! A message is `{"role", "content", ...}` where `content` is a string, `null`, absent or an
//! array of parts (`text`, `image_url`, `input_audio`, `file`, `refusal`, anything else kept
//! opaque). Assistant messages carry `tool_calls` (or the legacy `function_call`); `tool`
//! messages answer one call each through `tool_call_id`. Every field the model has no slot for
//! is kept in an `extra` map, and the shape of `content` in [`WireHints`], so parse → emit gives
//! back the same JSON.
//!
//! ```
//! use ctxkeeper_core::formats::openai_chat;
//! use ctxkeeper_core::model::Role;
//! use serde_json::json;
//!
//! let body = json!({
//!     "model": "gpt-4o",
//!     "messages": [
//!         {"role": "user", "content": "weather in Paris?"},
//!         {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
//!             "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
//!         {"role": "tool", "tool_call_id": "c1", "content": "18C"}
//!     ],
//!     "temperature": 0
//! });
//! let request = openai_chat::parse_request(&body)?;
//! assert_eq!(request.messages[2].role, Role::Tool);
//! assert_eq!(request.messages[1].tool_calls().next(), Some(("c1", "weather", "{\"city\":\"Paris\"}")));
//! assert_eq!(openai_chat::emit_request(&request), body);
//! # Ok::<(), ctxkeeper_core::ParseError>(())
//! ```
//!
//! # Conversions when the messages came from another format
//!
//! - A user message holding tool results (Anthropic) becomes one `tool` message per result,
//!   in order, followed by a user message with the rest of its content.
//! - Chat tool messages carry only text: images and files inside a tool result are replaced by a
//!   short marker in the tool message and sent right after the run of tool messages, in one user
//!   message that says which call returned them. The `is_error` flag has no slot and is dropped.
//! - Images, audio and files are allowed only in user messages; elsewhere they become a marker
//!   text. Anthropic base64 images become `data:` URLs. Files go as `file_data` `data:` URLs;
//!   a file known only by an `http(s)` URL or archive reference becomes a marker text.
//! - All reasoning is dropped (Chat Completions has no reasoning input), as are opaque parts of
//!   other formats and their unknown fields.

use serde_json::{Map, Value, json};

use super::Wire;
use super::common::{
    CHAT_CALL_TYPES, DataKind, Fields, JsonPath, convert_custom_tool, data_detail, data_file_name,
    data_kind, data_url, expect_array, file_name, has_string, is_custom_call, move_extra, native,
    omitted_data, origin_hints, portable_request_extra, private_at, private_str, put_extra,
    record_at, same_origin, source_base64, source_url, take_string, type_name,
};
use crate::ParseError;
use crate::model::{
    ContentForm, DataSource, Extra, Message, Part, Request, Role, ToolSpec, WireHints,
};

const WIRE: Wire = Wire::OpenAiChat;

/// Private hint: the message used the legacy functions API (`"function_call"` on an assistant
/// message, `"function"` for the answering `role: "function"` message).
const LEGACY: &str = "legacy";
/// Private hint: per-part wire type when it is not the default (`refusal`).
const PART_TYPES: &str = "part_types";
/// Private hint: per-tool-call wire type when it is not `function`.
const CALL_TYPES: &str = CHAT_CALL_TYPES;
/// Recorded call type of a tool call written without a `type` key.
const UNTYPED: &str = "untyped";
/// Tool hint: the tool's fields outside `function`.
const TOOL_OUTER: &str = "outer";
/// Tool hint: the tool had no `parameters` field.
const NO_PARAMETERS: &str = "no_parameters";
/// Tool hint: a tool of a type other than `function`, kept verbatim.
const VERBATIM: &str = "verbatim";

/// The call id given to a legacy `function_call` and to the `function` message that answers it.
/// The legacy API has no ids; a call is answered by the next `function` message of the same
/// name, so an id built from the name pairs them without any context.
fn legacy_call_id(name: &str) -> String {
    format!("fc_{name}")
}

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
pub fn parse_message(value: &Value, path: &str) -> Result<Message, ParseError> {
    parse_message_owned(value.clone(), JsonPath::At(path))
}

fn parse_message_owned(value: Value, path: JsonPath<'_>) -> Result<Message, ParseError> {
    let mut fields = Fields::new(value, path, "a message object")?;
    let role_name = fields.required_str("role")?;
    let legacy_function = role_name == "function";
    let role = if legacy_function {
        Role::Tool
    } else {
        Role::parse(&role_name).ok_or_else(|| {
            ParseError::at(
                fields.path_of("role"),
                format!("unknown role {role_name:?}"),
            )
        })?
    };
    let mut message = Message::new(role, Vec::new());
    message.hints = origin_hints(WIRE);
    let mut private = Extra::new();
    message.name = fields.optional_str("name");

    let content = fields.take("content");
    let (form, content) = parse_content(content, fields.path(), &mut private)?;
    message.hints.content_form = form;

    match role {
        Role::Tool => {
            let call_id = if legacy_function {
                private.insert(LEGACY.into(), json!("function"));
                match &message.name {
                    Some(name) => legacy_call_id(name),
                    None => {
                        return Err(ParseError::at(
                            fields.path_of("name"),
                            "a function message needs the name of the function it answers",
                        ));
                    }
                }
            } else {
                fields.required_str("tool_call_id")?
            };
            message.parts.push(Part::ToolResult {
                call_id,
                content,
                is_error: false,
                extra: Extra::new(),
            });
        }
        Role::Assistant => {
            message.parts = content;
            match fields.get("tool_calls") {
                // An empty list or null has no call to hold: it stays in `extra` verbatim.
                Some(Value::Array(calls)) if !calls.is_empty() => {
                    let calls_path = fields.path_of("tool_calls");
                    let calls = match fields.take("tool_calls") {
                        Some(Value::Array(calls)) => calls,
                        _ => Vec::new(),
                    };
                    for (i, call) in calls.into_iter().enumerate() {
                        let index = message.parts.len();
                        let (part, kind) = parse_tool_call(call, JsonPath::Index(&calls_path, i))?;
                        if let Some(kind) = kind {
                            record_at(&mut private, CALL_TYPES, index, kind);
                        }
                        message.parts.push(part);
                    }
                }
                Some(Value::Array(_) | Value::Null) | None => {}
                Some(other) => {
                    return Err(ParseError::at(
                        fields.path_of("tool_calls"),
                        format!(
                            "expected an array of tool calls, found {}",
                            type_name(other)
                        ),
                    ));
                }
            }
            // The legacy call is the message's call only when it has no `tool_calls`: beside
            // them it is a field of its own, kept as sent.
            let has_tool_calls = message
                .parts
                .iter()
                .any(|p| matches!(p, Part::ToolCall { .. }));
            match fields.get("function_call") {
                Some(Value::Object(_)) if has_tool_calls => {}
                Some(Value::Object(_)) => {
                    let call_path = fields.path_of("function_call");
                    let call = fields.take("function_call").unwrap_or(Value::Null);
                    let mut inner =
                        Fields::new(call, JsonPath::At(&call_path), "a function call object")?;
                    let name = inner.required_str("name")?;
                    let arguments = inner.required_str("arguments")?;
                    private.insert(LEGACY.into(), json!("function_call"));
                    message.parts.push(Part::ToolCall {
                        id: legacy_call_id(&name),
                        name,
                        arguments,
                        extra: inner.rest(),
                    });
                }
                Some(Value::Null) | None => {}
                Some(other) => {
                    return Err(ParseError::at(
                        fields.path_of("function_call"),
                        format!(
                            "expected a function call object, found {}",
                            type_name(other)
                        ),
                    ));
                }
            }
        }
        Role::System | Role::Developer | Role::User => message.parts = content,
    }
    move_extra(&mut message.extra, fields.rest());
    message.hints.private = private;
    Ok(message)
}

/// Parses `content` (the field of the message at `message_path`) into parts, recording its
/// shape.
fn parse_content(
    content: Option<Value>,
    message_path: JsonPath<'_>,
    private: &mut Extra,
) -> Result<(ContentForm, Vec<Part>), ParseError> {
    match content {
        None => Ok((ContentForm::Absent, Vec::new())),
        Some(Value::Null) => Ok((ContentForm::Null, Vec::new())),
        Some(Value::String(text)) => Ok((ContentForm::String, vec![Part::text(text)])),
        Some(Value::Array(items)) => {
            let path = message_path.key("content");
            let mut parts = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let (part, kind) = parse_part(item, JsonPath::Index(&path, i))?;
                if let Some(kind) = kind {
                    record_at(private, PART_TYPES, i, kind);
                }
                parts.push(part);
            }
            Ok((ContentForm::Parts, parts))
        }
        Some(other) => Err(ParseError::at(
            message_path.key("content"),
            format!(
                "content must be a string, an array of parts or null, found {}",
                type_name(&other)
            ),
        )),
    }
}

/// Parses one content part; the second value names the wire type when the part kind alone does
/// not say it (`refusal`).
fn parse_part(
    value: Value,
    path: JsonPath<'_>,
) -> Result<(Part, Option<&'static str>), ParseError> {
    let mut fields = Fields::new(value, path, "a content part object")?;
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
    match kind.as_str() {
        "text" => {
            fields.take("type");
            let text = fields.required_str("text")?;
            Ok((
                Part::Text {
                    text,
                    extra: fields.rest(),
                },
                None,
            ))
        }
        "refusal" => {
            fields.take("type");
            let text = fields.required_str("refusal")?;
            Ok((
                Part::Text {
                    text,
                    extra: fields.rest(),
                },
                Some("refusal"),
            ))
        }
        "image_url" => {
            let Some(mut inner) =
                fields.take_object_if("image_url", |inner| has_string(inner, "url"))
            else {
                return opaque(fields);
            };
            let url = take_string(&mut inner, "url");
            fields.take("type");
            let mut extra = Extra::new();
            if !inner.is_empty() {
                extra.insert("image_url".into(), Value::Object(inner));
            }
            move_extra(&mut extra, fields.rest());
            let part = Part::Data {
                source: DataSource::Url { url },
                wire_type: Some("image_url".into()),
                extra,
            };
            Ok((part, None))
        }
        "input_audio" => {
            let Some(mut inner) = fields.take_object_if("input_audio", |inner| {
                inner.len() == 2 && has_string(inner, "data") && has_string(inner, "format")
            }) else {
                return opaque(fields);
            };
            let source = DataSource::Base64 {
                media_type: format!("audio/{}", take_string(&mut inner, "format")),
                data: take_string(&mut inner, "data"),
            };
            fields.take("type");
            let part = Part::Data {
                source,
                wire_type: Some("input_audio".into()),
                extra: fields.rest(),
            };
            Ok((part, None))
        }
        "file" => {
            let Some(mut inner) =
                fields.take_object_if("file", |inner| has_string(inner, "file_data"))
            else {
                return opaque(fields);
            };
            let url = take_string(&mut inner, "file_data");
            fields.take("type");
            let mut extra = Extra::new();
            if !inner.is_empty() {
                extra.insert("file".into(), Value::Object(inner));
            }
            move_extra(&mut extra, fields.rest());
            let part = Part::Data {
                source: DataSource::Url { url },
                wire_type: Some("file".into()),
                extra,
            };
            Ok((part, None))
        }
        _ => opaque(fields),
    }
}

/// Parses one entry of `tool_calls`; the second value records the wire type when it is not a
/// typed `function` call (`custom`, or `untyped` when the `type` key was absent).
fn parse_tool_call(
    value: Value,
    path: JsonPath<'_>,
) -> Result<(Part, Option<&'static str>), ParseError> {
    let mut fields = Fields::new(value, path, "a tool call object")?;
    let (kind, record) = match fields.get("type") {
        None => ("function", Some(UNTYPED)),
        Some(_) => match fields.kind()?.as_str() {
            "function" => ("function", None),
            "custom" => ("custom", Some("custom")),
            other => {
                return Err(ParseError::at(
                    fields.path_of("type"),
                    format!(
                        "unknown tool call type {other:?} (expected \"function\" or \"custom\")"
                    ),
                ));
            }
        },
    };
    fields.take("type");
    let id = fields.required_str("id")?;
    let args_key = if kind == "custom" {
        "input"
    } else {
        "arguments"
    };
    let inner_path = fields.path_of(kind);
    let inner = fields
        .take(kind)
        .ok_or_else(|| ParseError::at(inner_path.clone(), "missing required field"))?;
    let mut inner = Fields::new(inner, JsonPath::At(&inner_path), "an object")?;
    let name = inner.required_str("name")?;
    let arguments = inner.required_str(args_key)?;
    let inner_rest = inner.rest();
    // Fields of the nested object live under its own key; the outer object cannot hold that key
    // in `extra`, since it was just taken out.
    let mut extra = Extra::new();
    if !inner_rest.is_empty() {
        extra.insert(kind.into(), Value::Object(inner_rest));
    }
    move_extra(&mut extra, fields.rest());
    Ok((
        Part::ToolCall {
            id,
            name,
            arguments,
            extra,
        },
        record,
    ))
}

/// Emits neutral messages as a Chat Completions `messages` list.
///
/// Messages parsed from this format come back exactly as they were; others are converted as the
/// module documentation describes.
pub fn emit_messages(messages: &[Message]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    let mut pending = PendingMedia::default();
    for message in messages {
        emit_into(message, &mut out, &mut pending);
    }
    pending.flush(&mut out);
    out
}

/// Emits one message. A message usually gives one wire message; a message holding several tool
/// results (or tool results with images) gives several.
pub fn emit_message(message: &Message) -> Vec<Value> {
    emit_messages(std::slice::from_ref(message))
}

/// Images and files that tool results returned, waiting to be sent in a user message after the
/// run of tool messages (tool messages themselves carry only text).
#[derive(Default)]
struct PendingMedia {
    content: Vec<Value>,
}

impl PendingMedia {
    fn flush(&mut self, out: &mut Vec<Value>) {
        if !self.content.is_empty() {
            let content = std::mem::take(&mut self.content);
            out.push(json!({"role": "user", "content": content}));
        }
    }
}

fn emit_into(message: &Message, out: &mut Vec<Value>, pending: &mut PendingMedia) {
    let same = same_origin(&message.hints, WIRE);
    let native = native(&message.hints, WIRE);
    match message.role {
        Role::Tool | Role::User => {
            // Results first (each its own tool message), then the remaining content as one
            // message of the original role (a user message for a tool message's stray parts).
            let mut rest: Vec<(usize, &Part)> = Vec::new();
            for (index, part) in message.parts.iter().enumerate() {
                match part {
                    Part::ToolResult { .. } => {
                        if !rest.is_empty() {
                            pending.flush(out);
                            out.push(content_message(message, Role::User, &rest, same, native));
                            rest.clear();
                        }
                        out.push(tool_message(message, part, same, native, pending));
                    }
                    _ => rest.push((index, part)),
                }
            }
            let keep = if rest.is_empty() {
                !message.has_tool_results()
            } else {
                same || !all_dropped(&rest, Role::User, native)
            };
            if keep {
                pending.flush(out);
                out.push(content_message(message, Role::User, &rest, same, native));
            }
        }
        Role::System | Role::Developer | Role::Assistant => {
            let parts: Vec<(usize, &Part)> = message.parts.iter().enumerate().collect();
            if same || parts.is_empty() || !all_dropped(&parts, message.role, native) {
                pending.flush(out);
                out.push(content_message(message, message.role, &parts, same, native));
            }
        }
    }
}

/// A `tool` (or legacy `function`) message answering one call.
fn tool_message(
    message: &Message,
    result: &Part,
    same: bool,
    native: bool,
    pending: &mut PendingMedia,
) -> Value {
    let Part::ToolResult {
        call_id,
        content,
        extra: part_extra,
        ..
    } = result
    else {
        return Value::Null;
    };
    let mut obj = Map::new();
    let legacy = same && private_str(&message.hints, LEGACY) == Some("function");
    if legacy {
        obj.insert("role".into(), json!("function"));
    } else {
        obj.insert("role".into(), json!("tool"));
        obj.insert("tool_call_id".into(), json!(call_id));
    }
    let parts: Vec<(usize, &Part)> = content.iter().enumerate().collect();
    let value = if same && message.role == Role::Tool {
        content_value(message, Role::Tool, &parts, true, true)
    } else {
        // Tool messages take text only: move media to the pending user message.
        let mut texts: Vec<(usize, &Part)> = Vec::new();
        let mut moved = Vec::new();
        let mut markers = Vec::new();
        for (index, part) in &parts {
            match part {
                Part::Text { .. } => texts.push((*index, *part)),
                Part::Data {
                    source,
                    wire_type,
                    extra,
                } => match data_part(source, wire_type.as_deref(), extra, false) {
                    Ok(value) => {
                        markers.push(Part::text(format!(
                            "[{} returned by this tool is attached in the next user message]",
                            kind_word(data_kind(wire_type.as_deref(), source))
                        )));
                        moved.push(value);
                    }
                    Err(text) => markers.push(Part::text(text)),
                },
                _ => {}
            }
        }
        if !moved.is_empty() {
            pending.content.push(json!({
                "type": "text",
                "text": format!("Attachments returned by tool call {call_id}:")
            }));
            pending.content.extend(moved);
        }
        let marker_refs: Vec<(usize, &Part)> = markers.iter().map(|p| (usize::MAX, p)).collect();
        texts.extend(marker_refs);
        content_value(message, Role::Tool, &texts, false, native)
    };
    if let Some(value) = value {
        obj.insert("content".into(), value);
    }
    if let Some(name) = &message.name {
        obj.insert("name".into(), json!(name));
    }
    if native {
        put_extra(&mut obj, part_extra);
        put_extra(&mut obj, &message.extra);
    }
    Value::Object(obj)
}

/// True when none of a foreign message's parts can be written here (only reasoning or opaque
/// parts of another format): the message is left out rather than sent empty.
fn all_dropped(parts: &[(usize, &Part)], role: Role, native: bool) -> bool {
    parts.iter().all(|(_, part)| {
        !matches!(part, Part::ToolCall { .. }) && foreign_part_value(part, role, native).is_none()
    })
}

fn kind_word(kind: DataKind) -> &'static str {
    match kind {
        DataKind::Image => "The image",
        DataKind::Audio => "The audio",
        DataKind::File => "The file",
    }
}

/// A system, developer, user or assistant message from the given parts (indices are positions
/// in `message.parts`, used to look up per-part hints).
fn content_message(
    message: &Message,
    role: Role,
    parts: &[(usize, &Part)],
    same: bool,
    native: bool,
) -> Value {
    let mut obj = Map::new();
    obj.insert("role".into(), json!(role.as_str()));
    let content_parts: Vec<(usize, &Part)> = parts
        .iter()
        .copied()
        .filter(|(_, p)| !matches!(p, Part::ToolCall { .. }))
        .collect();
    let calls: Vec<(usize, &Part)> = parts
        .iter()
        .copied()
        .filter(|(_, p)| matches!(p, Part::ToolCall { .. }))
        .collect();
    let same = same && role == message.role;
    if let Some(value) = content_value_with_calls(
        message,
        role,
        &content_parts,
        !calls.is_empty(),
        same,
        native,
    ) {
        obj.insert("content".into(), value);
    }
    if let Some(name) = &message.name {
        obj.insert("name".into(), json!(name));
    }
    if role == Role::Assistant && !calls.is_empty() {
        let legacy = same
            && calls.len() == 1
            && private_str(&message.hints, LEGACY) == Some("function_call");
        if legacy {
            if let Some((
                _,
                Part::ToolCall {
                    name,
                    arguments,
                    extra,
                    ..
                },
            )) = calls.first()
            {
                let mut call = Map::new();
                call.insert("name".into(), json!(name));
                call.insert("arguments".into(), json!(arguments));
                put_extra(&mut call, extra);
                obj.insert("function_call".into(), Value::Object(call));
            }
        } else {
            let values = calls
                .iter()
                .map(|(index, part)| tool_call_value(message, *index, part, same, native))
                .collect();
            obj.insert("tool_calls".into(), Value::Array(values));
        }
    }
    if native {
        put_extra(&mut obj, &message.extra);
    }
    Value::Object(obj)
}

fn tool_call_value(
    message: &Message,
    index: usize,
    part: &Part,
    same: bool,
    native: bool,
) -> Value {
    let Part::ToolCall {
        id,
        name,
        arguments,
        extra,
    } = part
    else {
        return Value::Null;
    };
    let record = if same {
        private_at(&message.hints, CALL_TYPES, index)
    } else if is_custom_call(message, index) {
        Some("custom")
    } else {
        None
    };
    let (kind, args_key) = match record {
        Some("custom") => ("custom", "input"),
        _ => ("function", "arguments"),
    };
    let mut inner = Map::new();
    inner.insert("name".into(), json!(name));
    inner.insert(args_key.into(), json!(arguments));
    let mut obj = Map::new();
    obj.insert("id".into(), json!(id));
    if record != Some(UNTYPED) {
        obj.insert("type".into(), json!(kind));
    }
    if native && let Some(Value::Object(inner_extra)) = extra.get(kind) {
        put_extra(&mut inner, inner_extra);
    }
    obj.insert(kind.into(), Value::Object(inner));
    if native {
        put_extra(&mut obj, extra);
    }
    Value::Object(obj)
}

fn content_value(
    message: &Message,
    role: Role,
    parts: &[(usize, &Part)],
    same: bool,
    native: bool,
) -> Option<Value> {
    content_value_with_calls(message, role, parts, false, same, native)
}

/// The `content` value (`None` when the key is absent).
fn content_value_with_calls(
    message: &Message,
    role: Role,
    parts: &[(usize, &Part)],
    has_calls: bool,
    same: bool,
    native: bool,
) -> Option<Value> {
    if same {
        match message.hints.content_form {
            ContentForm::String => {
                if let [(index, Part::Text { text, extra })] = parts
                    && extra.is_empty()
                    && private_at(&message.hints, PART_TYPES, *index).is_none()
                {
                    return Some(json!(text));
                }
            }
            ContentForm::Null if parts.is_empty() => return Some(Value::Null),
            ContentForm::Absent if parts.is_empty() => return None,
            ContentForm::Parts => {
                let values = parts
                    .iter()
                    .filter_map(|(index, part)| same_part_value(message, *index, part))
                    .collect();
                return Some(Value::Array(values));
            }
            _ => {}
        }
    }
    // Canonical form: a plain string when the content is one text, else an array of parts.
    let mut values = Vec::with_capacity(parts.len());
    for (index, part) in parts {
        let value = if same {
            same_part_value(message, *index, part)
        } else {
            foreign_part_value(part, role, native)
        };
        values.extend(value);
    }
    match values.as_slice() {
        [] if role == Role::Assistant && has_calls => Some(Value::Null),
        [] => Some(json!("")),
        [single] if is_plain_text(single) => single.get("text").cloned(),
        _ => Some(Value::Array(values)),
    }
}

fn is_plain_text(value: &Value) -> bool {
    value.as_object().is_some_and(|o| {
        o.len() == 2
            && o.get("type") == Some(&json!("text"))
            && o.get("text").is_some_and(Value::is_string)
    })
}

/// A part of a message parsed from this format, rebuilt exactly.
fn same_part_value(message: &Message, index: usize, part: &Part) -> Option<Value> {
    match part {
        Part::Text { text, extra } => {
            let kind = match private_at(&message.hints, PART_TYPES, index) {
                Some("refusal") => "refusal",
                _ => "text",
            };
            let mut obj = Map::new();
            obj.insert("type".into(), json!(kind));
            obj.insert(kind.into(), json!(text));
            put_extra(&mut obj, extra);
            Some(Value::Object(obj))
        }
        Part::Data { source, wire_type, extra } => {
            data_part(source, wire_type.as_deref(), extra, true).ok().or_else(|| {
                Some(json!({"type": "text", "text": omitted_data(data_kind(wire_type.as_deref(), source), source, WIRE)}))
            })
        }
        Part::Opaque { value } => Some(value.clone()),
        Part::ToolCall { .. } | Part::ToolResult { .. } | Part::Reasoning { .. } => None,
    }
}

/// A part of a message from another format (or built by the engine), converted.
fn foreign_part_value(part: &Part, role: Role, native: bool) -> Option<Value> {
    match part {
        Part::Text { text, extra } => {
            let mut obj = Map::new();
            obj.insert("type".into(), json!("text"));
            obj.insert("text".into(), json!(text));
            if native {
                put_extra(&mut obj, extra);
            }
            Some(Value::Object(obj))
        }
        Part::Data {
            source,
            wire_type,
            extra,
        } => {
            let kind = data_kind(wire_type.as_deref(), source);
            if role != Role::User {
                return Some(json!({"type": "text", "text": omitted_data(kind, source, WIRE)}));
            }
            Some(
                match data_part(source, wire_type.as_deref(), extra, native) {
                    Ok(value) => value,
                    Err(text) => json!({"type": "text", "text": text}),
                },
            )
        }
        Part::Opaque { value } if native => Some(value.clone()),
        _ => None,
    }
}

/// A data part as a Chat content part, or the marker text when Chat cannot carry it.
/// `keep_extra` writes the part's own extra fields (same origin or engine-built).
fn data_part(
    source: &DataSource,
    wire_type: Option<&str>,
    extra: &Extra,
    keep_extra: bool,
) -> Result<Value, String> {
    let kind = data_kind(wire_type, source);
    let mut obj = Map::new();
    match kind {
        DataKind::Image => {
            let url = source_url(source).ok_or_else(|| omitted_data(kind, source, WIRE))?;
            let mut inner = Map::new();
            inner.insert("url".into(), json!(url));
            if keep_extra && wire_type == Some("image_url") {
                if let Some(Value::Object(inner_extra)) = extra.get("image_url") {
                    put_extra(&mut inner, inner_extra);
                }
            } else if let Some(detail) = data_detail(extra) {
                inner.insert("detail".into(), json!(detail));
            }
            obj.insert("type".into(), json!("image_url"));
            obj.insert("image_url".into(), Value::Object(inner));
        }
        DataKind::Audio => {
            let (media_type, data) =
                source_base64(source).ok_or_else(|| omitted_data(kind, source, WIRE))?;
            let format = match media_type.trim_start_matches("audio/") {
                "mpeg" => "mp3",
                "x-wav" | "wave" => "wav",
                other => other,
            };
            obj.insert("type".into(), json!("input_audio"));
            obj.insert(
                "input_audio".into(),
                json!({"data": data, "format": format}),
            );
        }
        DataKind::File => {
            // Chat takes inline files only; an http(s) URL or archive reference cannot be sent.
            let url = match source {
                DataSource::Url { url } if keep_extra && wire_type == Some("file") => url.clone(),
                _ => {
                    let (media_type, data) =
                        source_base64(source).ok_or_else(|| omitted_data(kind, source, WIRE))?;
                    data_url(&media_type, &data)
                }
            };
            let mut inner = Map::new();
            inner.insert("file_data".into(), json!(url));
            if keep_extra && wire_type == Some("file") {
                if let Some(Value::Object(inner_extra)) = extra.get("file") {
                    put_extra(&mut inner, inner_extra);
                }
            } else {
                inner.insert(
                    "filename".into(),
                    json!(file_name(data_file_name(extra), source)),
                );
            }
            obj.insert("type".into(), json!("file"));
            obj.insert("file".into(), Value::Object(inner));
        }
    }
    if keep_extra {
        // `image_url` / `file` hold the inner object's own fields when the part came as that
        // type (written above); on another part they are fields of their own, kept as sent.
        let inner_fields = wire_type.filter(|t| matches!(*t, "image_url" | "file"));
        for (key, value) in extra {
            if Some(key.as_str()) != inner_fields && !obj.contains_key(key) {
                obj.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(Value::Object(obj))
}

/// Parses a Chat Completions `tools` array.
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
    let kind = fields.kind()?;
    let mut hints = origin_hints(WIRE);
    let function = match (kind.as_str(), fields.get("function")) {
        ("function", Some(Value::Object(_))) => fields.take("function"),
        _ => None,
    };
    let Some(function) = function else {
        // A tool of another type: keep it whole (nothing was taken out of it).
        let value = fields.into_value();
        let name = value
            .get(kind.as_str())
            .and_then(|inner| inner.get("name"))
            .and_then(Value::as_str)
            .unwrap_or(kind.as_str())
            .to_string();
        hints.private.insert(VERBATIM.into(), value);
        return Ok(ToolSpec {
            name,
            description: None,
            parameters: Value::Null,
            extra: Extra::new(),
            hints,
        });
    };
    let mut tool = parse_function(function, JsonPath::At(&fields.path_of("function")), hints)?;
    fields.take("type");
    let outer = fields.rest();
    if !outer.is_empty() {
        tool.hints
            .private
            .insert(TOOL_OUTER.into(), Value::Object(outer));
    }
    Ok(tool)
}

/// Parses a function declaration (`{name, description, parameters, ...}`), the inside of a
/// function tool and the shape of a legacy `functions` entry.
fn parse_function(
    value: Value,
    path: JsonPath<'_>,
    mut hints: WireHints,
) -> Result<ToolSpec, ParseError> {
    let mut inner = Fields::new(value, path, "a function object")?;
    let name = inner.required_str("name")?;
    let description = inner.optional_str("description");
    let parameters = match inner.take("parameters") {
        Some(parameters) => parameters,
        None => {
            hints
                .private
                .insert(NO_PARAMETERS.into(), Value::Bool(true));
            Value::Null
        }
    };
    Ok(ToolSpec {
        name,
        description,
        parameters,
        extra: inner.rest(),
        hints,
    })
}

fn is_legacy_function(tool: &ToolSpec) -> bool {
    same_origin(&tool.hints, WIRE) && tool.hints.private.get(LEGACY) == Some(&json!("functions"))
}

/// Emits tools as a Chat Completions `tools` array. Tools of other types that came from another
/// format (hosted tools, Anthropic server tools) are left out: they cannot be declared here.
pub fn emit_tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools.iter().filter_map(emit_tool).collect()
}

fn emit_tool(tool: &ToolSpec) -> Option<Value> {
    let same = same_origin(&tool.hints, WIRE);
    if let Some(verbatim) = tool.hints.private.get(VERBATIM) {
        if same {
            return Some(verbatim.clone());
        }
        return convert_custom_tool(verbatim, Wire::Responses, WIRE)
            .filter(|_| same_origin(&tool.hints, Wire::Responses));
    }
    let mut obj = Map::new();
    obj.insert("type".into(), json!("function"));
    obj.insert("function".into(), function_value(tool));
    if same && let Some(Value::Object(outer)) = tool.hints.private.get(TOOL_OUTER) {
        put_extra(&mut obj, outer);
    }
    Some(Value::Object(obj))
}

/// The function declaration of a tool (the inside of a function tool, or a legacy `functions`
/// entry).
fn function_value(tool: &ToolSpec) -> Value {
    let same = same_origin(&tool.hints, WIRE);
    let mut function = Map::new();
    function.insert("name".into(), json!(tool.name));
    if let Some(description) = &tool.description {
        function.insert("description".into(), json!(description));
    }
    let omit_parameters =
        tool.parameters.is_null() && (!same || tool.hints.private.contains_key(NO_PARAMETERS));
    if !omit_parameters {
        function.insert("parameters".into(), tool.parameters.clone());
    }
    if native(&tool.hints, WIRE) {
        put_extra(&mut function, &tool.extra);
    } else if let Some(strict) = tool.extra.get("strict").filter(|v| v.is_boolean()) {
        function.insert("strict".into(), strict.clone());
    }
    Value::Object(function)
}

/// Parses a whole Chat Completions request body: `model`, `messages`, `tools`, and every other
/// field kept in [`Request::extra`].
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
    let messages = match fields.take("messages") {
        Some(value) => parse_messages_at(value, "$.messages")?,
        None => return Err(ParseError::at("$.messages", "missing required field")),
    };
    let mut tools = match fields.get("tools") {
        // An empty list declares nothing: it stays in `extra` verbatim.
        Some(Value::Array(tools)) if !tools.is_empty() => match fields.take("tools") {
            Some(value) => parse_tools_at(value, "$.tools")?,
            None => Vec::new(),
        },
        _ => Vec::new(),
    };
    // Legacy `functions` are tools too (a legacy `function_call` needs its declaration when
    // converted); a hint sends them back to `functions`.
    if let Some(Value::Array(functions)) = fields.get("functions")
        && !functions.is_empty()
        && let Some(Value::Array(functions)) = fields.take("functions")
    {
        for (i, function) in functions.into_iter().enumerate() {
            let mut hints = origin_hints(WIRE);
            hints.private.insert(LEGACY.into(), json!("functions"));
            tools.push(parse_function(
                function,
                JsonPath::Index("$.functions", i),
                hints,
            )?);
        }
    }
    let extra = fields.rest();
    Ok(Request {
        model,
        messages,
        tools,
        extra,
        hints: origin_hints(WIRE),
    })
}

/// Emits a whole Chat Completions request body.
pub fn emit_request(request: &Request) -> Value {
    let mut obj = Map::new();
    if let Some(model) = &request.model {
        obj.insert("model".into(), json!(model));
    }
    obj.insert(
        "messages".into(),
        Value::Array(emit_messages(&request.messages)),
    );
    let (functions, tools): (Vec<&ToolSpec>, Vec<&ToolSpec>) = request
        .tools
        .iter()
        .partition(|tool| is_legacy_function(tool));
    let tool_values: Vec<Value> = tools.iter().filter_map(|tool| emit_tool(tool)).collect();
    if !tool_values.is_empty() || (same_origin(&request.hints, WIRE) && !tools.is_empty()) {
        obj.insert("tools".into(), Value::Array(tool_values));
    }
    if !functions.is_empty() {
        let values = functions.iter().map(|tool| function_value(tool)).collect();
        obj.insert("functions".into(), Value::Array(values));
    }
    put_extra(&mut obj, &portable_request_extra(request, WIRE));
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `input` as a message list and checks that emit gives it back.
    fn round_trip(input: Value) {
        let messages = parse_messages(&input).unwrap_or_else(|e| panic!("{e}: {input}"));
        assert_eq!(Value::Array(emit_messages(&messages)), input);
    }

    #[test]
    fn messages_round_trip() {
        let cases = [
            json!([{"role": "system", "content": "be brief"}]),
            json!([{"role": "developer", "content": [{"type": "text", "text": "rules"}]}]),
            json!([{"role": "user", "name": "ann", "content": "hi", "x-trace": 7}]),
            json!([{"role": "assistant"}]),
            json!([{"role": "assistant", "content": null, "tool_calls": []}]),
            json!([{"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "refusal": "no"}]),
            json!([{"role": "assistant", "content": "", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "custom", "custom": {"name": "g", "input": "raw text"}}
            ]}]),
            json!([{"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{}"}},
                   {"role": "function", "name": "f", "content": "ok"}]),
            json!([{"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "1"}]}]),
            json!([{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}},
                {"type": "file", "file": {"file_id": "file-1"}},
                {"type": "video", "video": {"url": "v"}}
            ]}]),
        ];
        for case in cases {
            round_trip(case);
        }
    }

    #[test]
    fn legacy_function_call_and_answer_share_an_id() {
        let input = json!([
            {"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{}"}},
            {"role": "function", "name": "f", "content": "ok"}
        ]);
        let messages = parse_messages(&input).expect("valid");
        assert_eq!(messages[0].tool_calls().next().map(|c| c.0), Some("fc_f"));
        assert_eq!(messages[1].tool_result_ids().next(), Some("fc_f"));
    }

    #[test]
    fn malformed_messages_report_their_path() {
        let cases = [
            (
                json!([{"role": "narrator", "content": "x"}]),
                "$[0].role",
                "unknown role \"narrator\"",
            ),
            (json!([{"content": "x"}]), "$[0].role", "missing"),
            (
                json!([{"role": "user", "content": 3}]),
                "$[0].content",
                "found a number",
            ),
            (
                json!([{"role": "assistant", "tool_calls": {}}]),
                "$[0].tool_calls",
                "expected an array",
            ),
            (
                json!([{"role": "tool", "content": "x"}]),
                "$[0].tool_call_id",
                "missing",
            ),
            (
                json!([{"role": "user", "content": [{"type": "text"}]}]),
                "$[0].content[0].text",
                "missing",
            ),
            (
                json!([{"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
                "function": {"name": "f", "arguments": {}}}]}]),
                "$[0].tool_calls[0].function.arguments",
                "expected a string",
            ),
            (json!({"role": "user"}), "$", "expected an array"),
        ];
        super::super::common::assert_path_errors(parse_messages, &cases);
    }

    #[test]
    fn anthropic_style_results_become_tool_messages_and_images_follow() {
        let mut user = Message::new(
            Role::User,
            vec![
                Part::ToolResult {
                    call_id: "a".into(),
                    content: vec![
                        Part::text("see image"),
                        Part::Data {
                            source: DataSource::Base64 {
                                media_type: "image/png".into(),
                                data: "AAAA".into(),
                            },
                            wire_type: Some("image".into()),
                            extra: Extra::new(),
                        },
                    ],
                    is_error: false,
                    extra: Extra::new(),
                },
                Part::tool_result("b", "two"),
                Part::text("go on"),
            ],
        );
        user.hints.origin = Some("anthropic".into());
        let out = emit_messages(&[user]);
        assert_eq!(out.len(), 4, "{out:?}");
        assert_eq!(out[0]["role"], "tool");
        assert_eq!(out[0]["tool_call_id"], "a");
        assert_eq!(out[1]["tool_call_id"], "b");
        assert_eq!(out[2]["role"], "user");
        assert_eq!(
            out[2]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AAAA"
        );
        assert_eq!(out[3], json!({"role": "user", "content": "go on"}));
    }

    #[test]
    fn a_legacy_function_call_beside_tool_calls_is_kept_as_sent() {
        // Found by the fuzzer: both on one message came back as two tool calls.
        let body = json!({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
             "function_call": {"name": "g", "arguments": "{\"x\":1}"}},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}
        ]});
        let request = parse_request(&body).expect("parses");
        assert_eq!(request.messages[1].tool_calls().count(), 1);
        assert_eq!(emit_request(&request), body);
    }

    #[test]
    fn a_part_keeps_a_field_named_like_another_parts_payload() {
        // Found by the fuzzer: an audio part's own `image_url` field was dropped on emit.
        let body = json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}, "image_url": -1},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==", "detail": "low"}, "file": "x"}
        ]}]});
        let request = parse_request(&body).expect("parses");
        assert_eq!(emit_request(&request), body);
    }

    #[test]
    fn tools_round_trip() {
        let input = json!([
            {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}},
            {"type": "function", "function": {"name": "g"}, "x": 1},
            {"type": "custom", "custom": {"name": "h", "format": {"type": "text"}}}
        ]);
        let tools = parse_tools(&input).expect("valid");
        assert_eq!(tools[2].name, "h");
        assert_eq!(Value::Array(emit_tools(&tools)), input);
    }
}
