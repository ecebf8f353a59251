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

use super::common::{
    CHAT_CALL_TYPES, DataKind, Fields, JsonPath, ParsedPart, data_detail, data_file_name,
    data_kind, data_url, emit_request_body, file_name, has_string, is_custom_call, move_extra,
    native, object_with_extra, omitted_data, opaque_part, origin_hints, parse_array, parse_each,
    parse_recorded_parts, parse_request_body, private_at, private_str, put_extra, record_at,
    same_origin, source_base64, source_url, take_string,
};
use super::tools::{
    NO_PARAMETERS, declared_tool, insert_name_and_description, take_request_tools, verbatim_tool,
};
use super::{Wire, tools};
use crate::ParseError;
use crate::json_kind;
use crate::model::{
    ContentForm, DataSource, Extra, Message, Part, Request, Role, ToolSpec, WireHints,
};

mod emit;
mod plain;
pub use emit::{emit_message, emit_messages};
pub use plain::{Plain, PlainCall, PlainContent};

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
    parse_array(value, path, "an array of messages", parse_message_owned)
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
                            json_kind(other)
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
                            json_kind(other)
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
            let parts = parse_recorded_parts(items, &path, private, PART_TYPES, parse_part)?;
            Ok((ContentForm::Parts, parts))
        }
        Some(other) => Err(ParseError::at(
            message_path.key("content"),
            format!(
                "content must be a string, an array of parts or null, found {}",
                json_kind(&other)
            ),
        )),
    }
}

/// Parses one content part; the second value names the wire type when the part kind alone does
/// not say it (`refusal`).
fn parse_part(value: Value, path: JsonPath<'_>) -> ParsedPart {
    let mut fields = Fields::new(value, path, "a content part object")?;
    let kind = fields.kind()?;
    match kind.as_str() {
        "text" => Ok((fields.into_text_part("text")?, None)),
        "refusal" => Ok((fields.into_text_part("refusal")?, Some("refusal"))),
        "image_url" => nested_url_part(fields, "image_url", "url"),
        "input_audio" => {
            let Some(mut inner) = fields.take_object_if("input_audio", |inner| {
                inner.len() == 2 && has_string(inner, "data") && has_string(inner, "format")
            }) else {
                return opaque_part(fields);
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
        "file" => nested_url_part(fields, "file", "file_data"),
        _ => opaque_part(fields),
    }
}

/// A data part whose URL is the string `url_key` inside the object under `kind` (`image_url.url`,
/// `file.file_data`); without that string the part is kept opaque.
fn nested_url_part(mut fields: Fields<'_>, kind: &str, url_key: &str) -> ParsedPart {
    let Some(mut inner) = fields.take_object_if(kind, |inner| has_string(inner, url_key)) else {
        return opaque_part(fields);
    };
    let url = take_string(&mut inner, url_key);
    fields.take("type");
    let part = Part::Data {
        source: DataSource::Url { url },
        wire_type: Some(kind.into()),
        extra: nested_extra(kind, inner, fields.rest()),
    };
    Ok((part, None))
}

/// The `extra` of a part or call whose payload sits in a nested object under `key`: the nested
/// object's remaining fields stay under `key` (the outer object cannot hold that key itself, since
/// it was taken out), followed by the outer object's remaining fields.
fn nested_extra(key: &str, inner: Map<String, Value>, outer: Extra) -> Extra {
    let mut extra = Extra::new();
    if !inner.is_empty() {
        extra.insert(key.into(), Value::Object(inner));
    }
    move_extra(&mut extra, outer);
    extra
}

/// Parses one entry of `tool_calls`; the second value records the wire type when it is not a
/// typed `function` call (`custom`, or `untyped` when the `type` key was absent).
fn parse_tool_call(value: Value, path: JsonPath<'_>) -> ParsedPart {
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
    let extra = nested_extra(kind, inner.rest(), fields.rest());
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

/// Parses a Chat Completions `tools` array.
pub fn parse_tools(value: &Value) -> Result<Vec<ToolSpec>, ParseError> {
    parse_array(value.clone(), "$", "an array of tools", parse_tool)
}

fn parse_tool(value: Value, path: JsonPath<'_>) -> Result<ToolSpec, ParseError> {
    let mut fields = Fields::new(value, path, "a tool object")?;
    let kind = fields.kind()?;
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
        return Ok(verbatim_tool(name, value, WIRE));
    };
    let mut tool = parse_function(
        function,
        JsonPath::At(&fields.path_of("function")),
        origin_hints(WIRE),
    )?;
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
    hints: WireHints,
) -> Result<ToolSpec, ParseError> {
    let fields = Fields::new(value, path, "a function object")?;
    declared_tool(fields, "parameters", hints)
}

fn is_legacy_function(tool: &ToolSpec) -> bool {
    same_origin(&tool.hints, WIRE) && tool.hints.private.get(LEGACY) == Some(&json!("functions"))
}

/// Emits tools as a Chat Completions `tools` array. Tools of other types that came from another
/// format (hosted tools, Anthropic server tools) are left out: they cannot be declared here.
pub fn emit_tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools::emit_tools(tools, WIRE, declared_tool_value)
}

/// A tool declared in full (not kept verbatim); `same` when it came from this format.
fn declared_tool_value(tool: &ToolSpec, same: bool) -> Value {
    let mut obj = Map::new();
    obj.insert("type".into(), json!("function"));
    obj.insert("function".into(), function_value(tool));
    if same && let Some(Value::Object(outer)) = tool.hints.private.get(TOOL_OUTER) {
        put_extra(&mut obj, outer);
    }
    Value::Object(obj)
}

/// The function declaration of a tool (the inside of a function tool, or a legacy `functions`
/// entry).
fn function_value(tool: &ToolSpec) -> Value {
    let same = same_origin(&tool.hints, WIRE);
    let mut function = Map::new();
    insert_name_and_description(&mut function, tool);
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
    parse_request_body(body, |fields| {
        let messages = match fields.take("messages") {
            Some(value) => parse_messages_at(value, "$.messages")?,
            None => return Err(ParseError::at("$.messages", "missing required field")),
        };
        let mut tools = take_request_tools(fields, parse_tool)?;
        // Legacy `functions` are tools too (a legacy `function_call` needs its declaration when
        // converted); a hint sends them back to `functions`.
        if let Some(functions) = fields.take_nonempty_array("functions") {
            let legacy_function = |function: Value, path: JsonPath<'_>| {
                let mut hints = origin_hints(WIRE);
                hints.private.insert(LEGACY.into(), json!("functions"));
                parse_function(function, path, hints)
            };
            tools.extend(parse_each(functions, "$.functions", legacy_function)?);
        }
        Ok((messages, tools, origin_hints(WIRE)))
    })
}

/// Emits a whole Chat Completions request body.
pub fn emit_request(request: &Request) -> Value {
    emit_request_body(request, WIRE, |obj| {
        obj.insert(
            "messages".into(),
            Value::Array(emit_messages(&request.messages)),
        );
        let (functions, tools): (Vec<&ToolSpec>, Vec<&ToolSpec>) = request
            .tools
            .iter()
            .partition(|tool| is_legacy_function(tool));
        let tool_values: Vec<Value> = super::tools::emit_tools(&tools, WIRE, declared_tool_value);
        if !tool_values.is_empty() || (same_origin(&request.hints, WIRE) && !tools.is_empty()) {
            obj.insert("tools".into(), Value::Array(tool_values));
        }
        if !functions.is_empty() {
            let values = functions.iter().map(|tool| function_value(tool)).collect();
            obj.insert("functions".into(), Value::Array(values));
        }
    })
}

#[cfg(test)]
mod tests;
