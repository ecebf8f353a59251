//! OpenAI Responses (`/v1/responses`) input items.
//!
//! `input` is a string or a list of items: messages (`{"role", "content"}`, with or without
//! `"type": "message"`; content parts `input_text`, `input_image`, `input_file`, `output_text`,
//! `refusal`), `function_call` / `function_call_output`, `custom_tool_call` /
//! `custom_tool_call_output`, `reasoning` (its `encrypted_content` carried byte-for-byte), and
//! any other item type kept opaque.
//!
//! In the neutral model, consecutive assistant-side items (reasoning, assistant messages, tool
//! calls and other `*_call` items) form one assistant [`Message`], and each tool output is a
//! [`Role::Tool`] message. The item boundaries and per-item fields are kept in
//! [`WireHints::private`](crate::model::WireHints) so parse → emit gives back the same items.
//!
//! ```
//! use ctxkeeper_core::formats::responses;
//! use ctxkeeper_core::model::Role;
//! use serde_json::json;
//!
//! let items = vec![
//!     json!({"role": "user", "content": "weather in Paris?"}),
//!     json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAAA..."}),
//!     json!({"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"}),
//!     json!({"type": "function_call_output", "call_id": "c1", "output": "18C"}),
//! ];
//! let messages = responses::parse_items(&items)?;
//! assert_eq!(messages.len(), 3);
//! assert_eq!(messages[1].role, Role::Assistant);
//! assert_eq!(messages[1].parts.len(), 2);
//! assert_eq!(responses::emit_messages(&messages), items);
//! # Ok::<(), ctxkeeper_core::ParseError>(())
//! ```
//!
//! # Conversions when the messages came from another format
//!
//! - Each message becomes a `type: "message"` item with `input_text` parts (`output_text` for
//!   the assistant); an assistant message's tool calls become `function_call` items after its
//!   text, and every tool result a `function_call_output` item (the `is_error` flag has no slot
//!   and is dropped). A user message holding tool results (Anthropic) gives its outputs first,
//!   then a message with the rest.
//! - Images become `input_image` with a URL or a `data:` URL (`detail` kept when known, else
//!   `auto`); files become `input_file` (`file_data` inline, `file_url` for `http(s)`); audio,
//!   archived data and media in assistant messages become a marker text.
//! - Only OpenAI's own encrypted reasoning can be sent back; Anthropic thinking (readable or
//!   redacted) is dropped, as are opaque parts of other formats.
//! - Tools become flat function tools with `strict: false` unless the source said otherwise,
//!   since Responses would otherwise apply strict schema rules the tool was not written for.

use serde_json::{Map, Value, json};

use super::common::{
    DataKind, Fields, JsonPath, ParsedPart, data_detail, data_file_name, data_kind,
    emit_request_body, expect_array, file_name, is_custom_call, move_extra, native,
    object_with_extra, omitted_data, opaque_part, origin_hints, parse_array, parse_recorded_parts,
    parse_request_body, private_at, private_flag, private_str, put_extra, reasoning_portable,
    same_origin, source_base64, source_url,
};
use super::tools::{
    NO_PARAMETERS, declared_tool, insert_name_and_description, object_schema, take_request_tools,
    verbatim_tool,
};
use super::{Wire, tools};
use crate::ParseError;
use crate::json_kind;
use crate::model::{ContentForm, DataSource, Extra, Message, Part, Request, Role, ToolSpec};

mod emit;
pub use emit::{emit_message, emit_messages};

const WIRE: Wire = Wire::Responses;

/// Private hint of an assistant message: the items it was parsed from, in order. An entry is
/// `"function_call"`, `"custom_tool_call"`, `"reasoning"` or `"opaque"` (one part each), or
/// `{"message": <part count>, ...}` for an assistant message item (with its `form`, `untyped`,
/// `part_types` and item-level `extra`).
const ITEMS: &str = "items";
/// Private hint: the message item had no `"type": "message"`.
const UNTYPED: &str = "untyped";
/// Private hint: per-part wire type when it is not the role's default text type.
const PART_TYPES: &str = "part_types";
/// Private hint: the item type of a tool output or opaque standalone item.
const ITEM_TYPE: &str = "item_type";
/// Private hint: the message is the request's `instructions` string.
const INSTRUCTIONS: &str = "instructions";
/// Private hint: the message is the request's `input` given as a plain string.
const INPUT_STRING: &str = "input_string";
/// Request hint: the request had no `input`.
const INPUT_ABSENT: &str = "input_absent";

/// One parsed item: either part of the assistant turn being built, or a message of its own.
enum Item {
    Assistant { parts: Vec<Part>, entry: Value },
    Standalone(Message),
}

/// Parses a list of input items into messages (consecutive assistant-side items form one
/// assistant message); errors are reported as `$[index]…`.
pub fn parse_items(items: &[Value]) -> Result<Vec<Message>, ParseError> {
    parse_items_at(items.to_vec(), "$")
}

/// Parses the `input` value: an array of items, or a string (one user message).
pub fn parse_messages(value: &Value) -> Result<Vec<Message>, ParseError> {
    parse_input(value.clone(), "$")
}

fn parse_input(value: Value, path: &str) -> Result<Vec<Message>, ParseError> {
    match value {
        Value::String(text) => Ok(vec![string_message(Message::user(text), INPUT_STRING)]),
        other => {
            let items = expect_array(other, path, "a string or an array of input items")?;
            parse_items_at(items, path)
        }
    }
}

fn parse_items_at(items: Vec<Value>, path: &str) -> Result<Vec<Message>, ParseError> {
    let mut out = Vec::new();
    let mut turn: Option<(Vec<Part>, Vec<Value>)> = None;
    for (i, item) in items.into_iter().enumerate() {
        match parse_item(item, JsonPath::Index(path, i))? {
            Item::Assistant { parts, entry } => {
                let (turn_parts, layout) = turn.get_or_insert_with(Default::default);
                turn_parts.extend(parts);
                layout.push(entry);
            }
            Item::Standalone(message) => {
                if let Some((parts, layout)) = turn.take() {
                    out.push(assistant_message(parts, layout));
                }
                out.push(message);
            }
        }
    }
    if let Some((parts, layout)) = turn {
        out.push(assistant_message(parts, layout));
    }
    Ok(out)
}

fn assistant_message(parts: Vec<Part>, layout: Vec<Value>) -> Message {
    let mut message = Message::new(Role::Assistant, parts);
    message.hints = origin_hints(WIRE);
    message
        .hints
        .private
        .insert(ITEMS.into(), Value::Array(layout));
    message
}

/// How many input items a message parsed from Responses input stands for: the run of
/// assistant-side items it groups, else one.
///
/// ```
/// use ctxkeeper_core::formats::responses::{input_items_in, parse_items};
/// let items = serde_json::json!([
///     {"role": "user", "content": "list the files"},
///     {"type": "reasoning", "summary": []},
///     {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
///     {"type": "function_call_output", "call_id": "c1", "output": "a.rs"}]);
/// let messages = parse_items(items.as_array().unwrap()).unwrap();
/// let counts: Vec<usize> = messages.iter().map(input_items_in).collect();
/// assert_eq!(counts, [1, 2, 1]);
/// ```
pub fn input_items_in(message: &Message) -> usize {
    if !same_origin(&message.hints, WIRE) {
        return 1;
    }
    match message.hints.private.get(ITEMS) {
        Some(Value::Array(layout)) if !layout.is_empty() => layout.len(),
        _ => 1,
    }
}

/// Parses one item into a message; `path` locates it in errors. An assistant-side item gives an
/// assistant message of its own (use [`parse_items`] to group a run of them).
pub fn parse_message(value: &Value, path: &str) -> Result<Message, ParseError> {
    Ok(match parse_item(value.clone(), JsonPath::At(path))? {
        Item::Assistant { parts, entry } => assistant_message(parts, vec![entry]),
        Item::Standalone(message) => message,
    })
}

fn parse_item(value: Value, path: JsonPath<'_>) -> Result<Item, ParseError> {
    let mut fields = Fields::new(value, path, "an input item object")?;
    let kind = match fields.get("type") {
        None => None,
        Some(_) => Some(fields.kind()?),
    };
    let single = |part: Part, entry: &str| Item::Assistant {
        parts: vec![part],
        entry: json!(entry),
    };
    match kind.as_deref() {
        None | Some("message") => parse_message_item(fields, kind.is_some()),
        Some("function_call") => {
            fields.take("type");
            Ok(single(tool_call(fields, "arguments")?, "function_call"))
        }
        Some("custom_tool_call") => {
            // `type` stays in `extra`: it marks the call as custom even when the turn's item
            // layout no longer applies, or when the turn is converted to OpenAI Chat.
            Ok(single(tool_call(fields, "input")?, "custom_tool_call"))
        }
        Some("reasoning") => {
            fields.take("type");
            let encrypted = fields.optional_str("encrypted_content");
            // `summary` and `content` stay verbatim in `extra`; their text is the readable part.
            let text = reasoning_text(fields.get("summary"), fields.get("content"));
            let part = Part::Reasoning {
                text,
                signature: None,
                encrypted,
                redacted: false,
                extra: fields.rest(),
            };
            Ok(single(part, "reasoning"))
        }
        Some(kind @ ("function_call_output" | "custom_tool_call_output")) => {
            let kind = kind.to_string();
            fields.take("type");
            let call_id = fields.required_str("call_id")?;
            let mut message = Message::new(Role::Tool, Vec::new());
            message.hints = origin_hints(WIRE);
            let (form, content) = string_or_parts(
                &mut fields,
                "output",
                "input_text",
                &mut message.hints.private,
            )?;
            message.hints.content_form = form;
            if kind != "function_call_output" {
                message.hints.private.insert(ITEM_TYPE.into(), json!(kind));
            }
            message.parts.push(Part::ToolResult {
                call_id,
                content,
                is_error: false,
                extra: fields.rest(),
            });
            Ok(Item::Standalone(message))
        }
        // Nothing was taken out of `fields` on the way to an opaque item: it is whole.
        Some(kind) if kind.ends_with("_call") => Ok(single(
            Part::Opaque {
                value: fields.into_value(),
            },
            "opaque",
        )),
        Some(kind) => {
            // Outputs of hosted tools, item references, and item types not known yet.
            let role = if kind.ends_with("_output") {
                Role::Tool
            } else {
                Role::User
            };
            let mut message = Message::new(
                role,
                vec![Part::Opaque {
                    value: fields.into_value(),
                }],
            );
            message.hints = origin_hints(WIRE);
            message
                .hints
                .private
                .insert(ITEM_TYPE.into(), json!("opaque"));
            Ok(Item::Standalone(message))
        }
    }
}

/// The readable text of a reasoning item: its summary texts, then its reasoning texts.
fn reasoning_text(summary: Option<&Value>, content: Option<&Value>) -> Option<String> {
    let texts: Vec<&str> = [summary, content]
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

fn default_text_type(role: Role) -> &'static str {
    if role == Role::Assistant {
        "output_text"
    } else {
        "input_text"
    }
}

fn parse_message_item(mut fields: Fields, typed: bool) -> Result<Item, ParseError> {
    if typed {
        fields.take("type");
    }
    let role_name = fields.required_str("role")?;
    let role = match Role::parse(&role_name) {
        Some(Role::Tool) => {
            return Err(ParseError::at(
                fields.path_of("role"),
                "role \"tool\" is not valid in a Responses message (tool output is a function_call_output item)",
            ));
        }
        Some(role) => role,
        None => {
            return Err(ParseError::at(
                fields.path_of("role"),
                format!("unknown role {role_name:?}"),
            ));
        }
    };
    let mut private = Extra::new();
    let (form, parts) = string_or_parts(
        &mut fields,
        "content",
        default_text_type(role),
        &mut private,
    )?;
    if !typed {
        private.insert(UNTYPED.into(), Value::Bool(true));
    }
    let extra = fields.rest();
    if role == Role::Assistant {
        let mut entry = Map::new();
        entry.insert("message".into(), json!(parts.len()));
        if form == ContentForm::String {
            entry.insert("form".into(), json!("string"));
        }
        move_extra(&mut entry, private);
        if !extra.is_empty() {
            entry.insert("extra".into(), Value::Object(extra));
        }
        return Ok(Item::Assistant {
            parts,
            entry: Value::Object(entry),
        });
    }
    let mut message = Message::new(role, parts);
    message.hints = origin_hints(WIRE);
    message.hints.content_form = form;
    message.hints.private = private;
    message.extra = extra;
    Ok(Item::Standalone(message))
}

/// A message this format had as a plain string, marked so with `flag` (it is emitted as one).
fn string_message(mut message: Message, flag: &str) -> Message {
    message.hints = origin_hints(WIRE);
    message.hints.content_form = ContentForm::String;
    message.hints.private.insert(flag.into(), Value::Bool(true));
    message
}

/// The call of a `function_call` or `custom_tool_call` item, its arguments under
/// `arguments_key`.
fn tool_call(mut fields: Fields<'_>, arguments_key: &str) -> Result<Part, ParseError> {
    let id = fields.required_str("call_id")?;
    let name = fields.required_str("name")?;
    let arguments = fields.required_str(arguments_key)?;
    Ok(Part::ToolCall {
        id,
        name,
        arguments,
        extra: fields.rest(),
    })
}

/// The required field `key`: a string (one text part) or an array of content parts, with the
/// form it had.
fn string_or_parts(
    fields: &mut Fields<'_>,
    key: &str,
    default_type: &str,
    private: &mut Extra,
) -> Result<(ContentForm, Vec<Part>), ParseError> {
    match fields.take(key) {
        Some(Value::String(text)) => Ok((ContentForm::String, vec![Part::text(text)])),
        Some(Value::Array(parts)) => Ok((
            ContentForm::Parts,
            parse_parts(parts, &fields.path_of(key), default_type, private)?,
        )),
        Some(other) => Err(ParseError::at(
            fields.path_of(key),
            format!(
                "{key} must be a string or an array of content parts, found {}",
                json_kind(&other)
            ),
        )),
        None => Err(ParseError::at(
            fields.path_of(key),
            "missing required field",
        )),
    }
}

fn parse_parts(
    parts: Vec<Value>,
    path: &str,
    default_type: &str,
    private: &mut Extra,
) -> Result<Vec<Part>, ParseError> {
    // The role's default text type goes without saying.
    let parse = |value, path: JsonPath<'_>| {
        let (part, wire_type) = parse_part(value, path)?;
        Ok((part, wire_type.filter(|t| *t != default_type)))
    };
    parse_recorded_parts(parts, path, private, PART_TYPES, parse)
}

/// Parses one content part; for a text part, the second value is its wire type.
fn parse_part(value: Value, path: JsonPath<'_>) -> ParsedPart {
    let mut fields = Fields::new(value, path, "a content part object")?;
    let kind = fields.kind()?;
    match kind.as_str() {
        "input_text" | "output_text" => {
            let wire = if kind == "input_text" {
                "input_text"
            } else {
                "output_text"
            };
            Ok((fields.into_text_part("text")?, Some(wire)))
        }
        "refusal" => Ok((fields.into_text_part("refusal")?, Some("refusal"))),
        "input_image" | "input_file" => {
            let url_key = if kind == "input_image" {
                "image_url"
            } else {
                "file_data"
            };
            let Some(url) = fields.optional_str(url_key) else {
                return opaque_part(fields);
            };
            fields.take("type");
            let part = Part::Data {
                source: DataSource::Url { url },
                wire_type: Some(kind),
                extra: fields.rest(),
            };
            Ok((part, None))
        }
        _ => opaque_part(fields),
    }
}

/// Parses a Responses `tools` array.
pub fn parse_tools(value: &Value) -> Result<Vec<ToolSpec>, ParseError> {
    parse_array(value.clone(), "$", "an array of tools", parse_tool)
}

fn parse_tool(value: Value, path: JsonPath<'_>) -> Result<ToolSpec, ParseError> {
    let mut fields = Fields::new(value, path, "a tool object")?;
    let kind = fields.kind()?;
    if kind != "function" {
        // Hosted tools (web_search, file_search, mcp, custom grammars, …) are kept whole
        // (nothing was taken out of them).
        let value = fields.into_value();
        let name = value
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or(&kind)
            .to_string();
        return Ok(verbatim_tool(name, value, WIRE));
    }
    fields.take("type");
    declared_tool(fields, "parameters", origin_hints(WIRE))
}

/// Emits tools as a Responses `tools` array. Tools only another provider can run are left out.
pub fn emit_tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools::emit_tools(tools, WIRE, declared_tool_value)
}

/// A tool declared in full (not kept verbatim); `same` when it came from this format.
fn declared_tool_value(tool: &ToolSpec, same: bool) -> Value {
    let mut obj = Map::new();
    obj.insert("type".into(), json!("function"));
    insert_name_and_description(&mut obj, tool);
    if same {
        if !tool.hints.private.contains_key(NO_PARAMETERS) || !tool.parameters.is_null() {
            obj.insert("parameters".into(), tool.parameters.clone());
        }
    } else {
        obj.insert("parameters".into(), object_schema(&tool.parameters));
    }
    if native(&tool.hints, WIRE) {
        put_extra(&mut obj, &tool.extra);
    } else {
        let strict = tool.extra.get("strict").filter(|v| v.is_boolean()).cloned();
        obj.insert("strict".into(), strict.unwrap_or(Value::Bool(false)));
    }
    Value::Object(obj)
}

/// Parses a whole Responses request body: `model`, `instructions` (as a leading system
/// message), `input`, `tools`, and every other field kept in [`Request::extra`].
///
/// The body is cloned once; [`parse_request_owned`] parses a body it may consume.
pub fn parse_request(body: &Value) -> Result<Request, ParseError> {
    parse_request_owned(body.clone())
}

/// Parses a request body it takes ownership of: nothing is cloned. Otherwise the same as
/// [`parse_request`].
pub fn parse_request_owned(body: Value) -> Result<Request, ParseError> {
    parse_request_body(body, |fields| {
        let mut hints = origin_hints(WIRE);
        let mut messages = Vec::new();
        if let Some(instructions) = fields.optional_str("instructions") {
            messages.push(string_message(Message::system(instructions), INSTRUCTIONS));
        }
        match fields.take("input") {
            Some(input) => messages.extend(parse_input(input, "$.input")?),
            None => {
                hints.private.insert(INPUT_ABSENT.into(), Value::Bool(true));
            }
        }
        let tools = take_request_tools(fields, parse_tool)?;
        Ok((messages, tools, hints))
    })
}

/// Emits a whole Responses request body.
pub fn emit_request(request: &Request) -> Value {
    emit_request_body(request, WIRE, |obj| {
        let mut messages = request.messages.as_slice();
        if let Some((first, rest)) = messages.split_first() {
            let is_instructions =
                same_origin(&first.hints, WIRE) && private_flag(&first.hints, INSTRUCTIONS);
            if let (true, [Part::Text { text, .. }]) = (is_instructions, first.parts.as_slice()) {
                obj.insert("instructions".into(), json!(text));
                messages = rest;
            }
        }
        let input_absent =
            same_origin(&request.hints, WIRE) && private_flag(&request.hints, INPUT_ABSENT);
        match messages {
            [] if input_absent => {}
            [only]
                if same_origin(&only.hints, WIRE)
                    && private_flag(&only.hints, INPUT_STRING)
                    && only.role == Role::User
                    && matches!(only.parts.as_slice(), [Part::Text { extra, .. }] if extra.is_empty()) =>
            {
                obj.insert("input".into(), json!(only.text()));
            }
            _ => {
                obj.insert("input".into(), Value::Array(emit_messages(messages)));
            }
        }
        let tools = emit_tools(&request.tools);
        if !tools.is_empty() || (same_origin(&request.hints, WIRE) && !request.tools.is_empty()) {
            obj.insert("tools".into(), Value::Array(tools));
        }
    })
}

#[cfg(test)]
mod tests;
