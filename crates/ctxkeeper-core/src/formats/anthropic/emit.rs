//! Anthropic messages and the system field from the neutral model: a message's own blocks rebuilt
//! from its hints, engine messages in the canonical shape, other formats' messages converted
//! (see the module docs).

use super::*;

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
pub(super) fn system_field_len(messages: &[Message]) -> usize {
    let leading = leading_instructions(messages);
    messages[..leading]
        .iter()
        .position(is_inline_system)
        .unwrap_or(leading)
}

/// True when the message is a `system` message parsed from inside `messages`.
pub(super) fn is_inline_system(message: &Message) -> bool {
    same_origin(&message.hints, WIRE) && private_flag(&message.hints, INLINE_SYSTEM)
}

/// A message on its way out: its wire role and content, and whether it came from another
/// format (only such messages are merged, so a parsed conversation round-trips unchanged).
pub(super) struct Out {
    role: Role,
    content: OutContent,
    extra: Extra,
    foreign: bool,
}

pub(super) enum OutContent {
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
pub(super) fn results_first(blocks: &mut Vec<Value>) {
    let (mut results, others): (Vec<Value>, Vec<Value>) = std::mem::take(blocks)
        .into_iter()
        .partition(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"));
    results.extend(others);
    *blocks = results;
}

pub(super) fn is_plain_text(value: &Value) -> bool {
    value.as_object().is_some_and(|o| {
        o.len() == 2
            && o.get("type").and_then(Value::as_str) == Some("text")
            && o.get("text").is_some_and(Value::is_string)
    })
}

pub(super) fn text_block(text: &str, extra: &Extra, keep_extra: bool) -> Value {
    let mut obj = Map::new();
    obj.insert("type".into(), json!("text"));
    obj.insert("text".into(), json!(text));
    object_with_extra(obj, extra, keep_extra)
}

/// Converts one message; `None` when nothing of it can be sent.
pub(super) fn convert(message: &Message) -> Option<Out> {
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
pub(super) fn same_block(message: &Message, index: usize, part: &Part) -> Value {
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

pub(super) fn block_type_for(kind: DataKind) -> &'static str {
    match kind {
        DataKind::Image => "image",
        DataKind::Audio | DataKind::File => "document",
    }
}

pub(super) fn tool_use_block(
    id: String,
    name: &str,
    input: Value,
    extra: &Extra,
    keep_extra: bool,
) -> Value {
    let mut obj = Map::new();
    obj.insert("type".into(), json!("tool_use"));
    obj.insert("id".into(), json!(id));
    obj.insert("name".into(), json!(name));
    obj.insert("input".into(), input);
    object_with_extra(obj, extra, keep_extra)
}

pub(super) fn reasoning_block(part: &Part, keep_extra: bool) -> Value {
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
    object_with_extra(obj, extra, keep_extra)
}

/// The `input` object for tool-call arguments.
///
/// Text that parses as a JSON object is used as is; empty text becomes `{}`. For a call parsed
/// from this format (`exact`), any JSON value is written back as it was. Anything else is
/// wrapped as `{"input": "<the text>"}`: Anthropic requires an object, and the model still
/// sees exactly what was sent.
pub(super) fn input_value(arguments: &str, exact: bool) -> Value {
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
pub(super) fn foreign_block(part: &Part, role: Role, native: bool) -> Option<Value> {
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
            Some(object_with_extra(obj, extra, native))
        }
        Part::Reasoning { .. } if role == Role::Assistant && reasoning_portable(part, WIRE) => {
            Some(reasoning_block(part, native))
        }
        Part::Opaque { value } if native => Some(value.clone()),
        _ => None,
    }
}

/// An `image` or `document` block for media from another format, when Anthropic can take it.
pub(super) fn media_block(kind: DataKind, source: &DataSource) -> Option<Value> {
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
