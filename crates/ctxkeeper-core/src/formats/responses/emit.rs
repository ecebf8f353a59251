//! Responses input items from the neutral model: a message's own items rebuilt from its hints,
//! engine messages in the canonical shape, other formats' messages converted (see the module docs).

use super::*;

/// Emits neutral messages as Responses input items.
///
/// Messages parsed from this format come back as exactly the items they were parsed from;
/// others are converted as the module documentation describes.
pub fn emit_messages(messages: &[Message]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    // Ids of the custom calls of the latest assistant turn: their outputs must be
    // `custom_tool_call_output` items.
    let mut custom_calls: Vec<String> = Vec::new();
    for message in messages {
        if message.role == Role::Assistant {
            custom_calls = custom_call_ids(message);
        }
        emit_into(message, &custom_calls, &mut out);
    }
    out
}

pub(super) fn custom_call_ids(message: &Message) -> Vec<String> {
    message
        .parts
        .iter()
        .enumerate()
        .filter_map(|(index, part)| match part {
            Part::ToolCall { id, .. } if is_custom_call(message, index) => Some(id.clone()),
            _ => None,
        })
        .collect()
}

/// Emits one message as the items it stands for (an assistant turn may give several).
pub fn emit_message(message: &Message) -> Vec<Value> {
    emit_messages(std::slice::from_ref(message))
}

pub(super) fn emit_into(message: &Message, custom_calls: &[String], out: &mut Vec<Value>) {
    let same = same_origin(&message.hints, WIRE);
    let native = native(&message.hints, WIRE);
    if same {
        if let Some(items) = layout_items(message) {
            out.extend(items);
            return;
        }
        if private_str(&message.hints, ITEM_TYPE) == Some("opaque")
            && let [Part::Opaque { value }] = message.parts.as_slice()
        {
            out.push(value.clone());
            return;
        }
    }
    match message.role {
        Role::Assistant => {
            let mut pending: Vec<&Part> = Vec::new();
            for (index, part) in message.parts.iter().enumerate() {
                match part {
                    Part::Text { .. } | Part::Data { .. } => pending.push(part),
                    Part::Opaque { value } if native => {
                        flush_assistant(&mut pending, native, out);
                        out.push(value.clone());
                    }
                    Part::ToolCall { .. } => {
                        flush_assistant(&mut pending, native, out);
                        let kind = if is_custom_call(message, index) {
                            "custom_tool_call"
                        } else {
                            "function_call"
                        };
                        out.push(call_item(part, kind, native));
                    }
                    Part::Reasoning { .. } if same || reasoning_portable(part, WIRE) => {
                        flush_assistant(&mut pending, native, out);
                        out.push(reasoning_item(part, same, native));
                    }
                    _ => {}
                }
            }
            flush_assistant(&mut pending, native, out);
        }
        Role::User | Role::System | Role::Developer | Role::Tool => {
            if same && !message.has_tool_results() && message.role != Role::Tool {
                let parts: Vec<&Part> = message.parts.iter().collect();
                out.push(same_message_item(
                    message.role,
                    &parts,
                    message.hints.content_form,
                    private_flag(&message.hints, UNTYPED),
                    &message.extra,
                    message.hints.private.get(PART_TYPES),
                ));
                return;
            }
            let role = if message.role == Role::Tool {
                Role::User
            } else {
                message.role
            };
            let mut pending: Vec<&Part> = Vec::new();
            for part in &message.parts {
                if let Part::ToolResult { .. } = part {
                    flush_message(role, &mut pending, native, out);
                    out.push(output_item(message, part, same, native, custom_calls));
                } else {
                    pending.push(part);
                }
            }
            flush_message(role, &mut pending, native, out);
        }
    }
}

/// The items of an assistant message parsed from this format, rebuilt from its item layout;
/// `None` when the parts no longer match the layout (then the message is emitted canonically).
pub(super) fn layout_items(message: &Message) -> Option<Vec<Value>> {
    let layout = message.hints.private.get(ITEMS)?.as_array()?;
    let mut items = Vec::with_capacity(layout.len());
    let mut cursor = 0;
    for entry in layout {
        match entry {
            Value::String(kind) => {
                let part = message.parts.get(cursor)?;
                cursor += 1;
                items.push(match (kind.as_str(), part) {
                    ("function_call" | "custom_tool_call", Part::ToolCall { .. }) => {
                        call_item(part, kind, true)
                    }
                    ("reasoning", Part::Reasoning { .. }) => reasoning_item(part, true, true),
                    ("opaque", Part::Opaque { value }) => value.clone(),
                    _ => return None,
                });
            }
            Value::Object(spec) => {
                let count = usize::try_from(spec.get("message")?.as_u64()?).ok()?;
                let parts = message.parts.get(cursor..cursor.checked_add(count)?)?;
                cursor += count;
                if !parts.iter().all(|p| {
                    matches!(
                        p,
                        Part::Text { .. } | Part::Data { .. } | Part::Opaque { .. }
                    )
                }) {
                    return None;
                }
                let refs: Vec<&Part> = parts.iter().collect();
                let form = if spec.get("form").and_then(Value::as_str) == Some("string") {
                    ContentForm::String
                } else {
                    ContentForm::Parts
                };
                let untyped = spec.get(UNTYPED).and_then(Value::as_bool).unwrap_or(false);
                let extra = match spec.get("extra") {
                    Some(Value::Object(extra)) => extra.clone(),
                    _ => Extra::new(),
                };
                items.push(same_message_item(
                    Role::Assistant,
                    &refs,
                    form,
                    untyped,
                    &extra,
                    spec.get(PART_TYPES),
                ));
            }
            _ => return None,
        }
    }
    (cursor == message.parts.len()).then_some(items)
}

/// A message item parsed from this format, rebuilt exactly.
pub(super) fn same_message_item(
    role: Role,
    parts: &[&Part],
    form: ContentForm,
    untyped: bool,
    extra: &Extra,
    part_types: Option<&Value>,
) -> Value {
    let part_type = |i: usize| {
        part_types
            .and_then(|t| t.get(i.to_string()))
            .and_then(Value::as_str)
    };
    let mut obj = Map::new();
    if !untyped {
        obj.insert("type".into(), json!("message"));
    }
    obj.insert("role".into(), json!(role.as_str()));
    let content = same_content(form, parts, part_type, role, default_text_type(role));
    obj.insert("content".into(), content);
    put_extra(&mut obj, extra);
    Value::Object(obj)
}

/// Content (of a message item or a tool output) parsed from this format, rebuilt exactly: the
/// string it was (a lone text part without extra fields or a recorded wire type), else its
/// parts, each written as its recorded wire type (`part_type` by index) or `default_type`.
fn same_content<'a, P: std::borrow::Borrow<Part>>(
    form: ContentForm,
    parts: &[P],
    part_type: impl Fn(usize) -> Option<&'a str>,
    role: Role,
    default_type: &'a str,
) -> Value {
    if form == ContentForm::String
        && let [only] = parts
        && let Part::Text { text, extra } = only.borrow()
        && extra.is_empty()
        && part_type(0).is_none()
    {
        return json!(text);
    }
    let parts = parts.iter().enumerate().filter_map(|(i, part)| {
        let wire = part_type(i).unwrap_or(default_type);
        content_part(part.borrow(), wire, role, true)
    });
    Value::Array(parts.collect())
}

/// One content part. `text_type` is the wire type of a text part; `keep_extra` writes the part's
/// own extra fields. `None` when the part has no place in a message.
pub(super) fn content_part(
    part: &Part,
    text_type: &str,
    role: Role,
    keep_extra: bool,
) -> Option<Value> {
    let mut obj = Map::new();
    let extra = match part {
        Part::Text { text, extra } => {
            obj.insert("type".into(), json!(text_type));
            let key = if text_type == "refusal" {
                "refusal"
            } else {
                "text"
            };
            obj.insert(key.into(), json!(text));
            extra
        }
        Part::Data {
            source,
            wire_type,
            extra,
        } => {
            let kind = data_kind(wire_type.as_deref(), source);
            let marker = || {
                let mut obj = Map::new();
                obj.insert("type".into(), json!(default_text_type(role)));
                obj.insert("text".into(), json!(omitted_data(kind, source, WIRE)));
                Some(Value::Object(obj))
            };
            // Media in an assistant message is rejected by OpenAI: converted, it becomes a
            // marker; a part that came this way is written back as it came.
            if role == Role::Assistant && !keep_extra {
                return marker();
            }
            match (kind, source) {
                (DataKind::Image, _) => {
                    let Some(url) = source_url(source) else {
                        return marker();
                    };
                    obj.insert("type".into(), json!("input_image"));
                    obj.insert("image_url".into(), json!(url));
                    if !(keep_extra && wire_type.as_deref() == Some("input_image")) {
                        obj.insert("detail".into(), json!(data_detail(extra).unwrap_or("auto")));
                    }
                }
                (DataKind::File, DataSource::Url { url })
                    if keep_extra && wire_type.as_deref() == Some("input_file") =>
                {
                    obj.insert("type".into(), json!("input_file"));
                    obj.insert("file_data".into(), json!(url));
                }
                (DataKind::File, DataSource::Url { url })
                    if url.starts_with("http://") || url.starts_with("https://") =>
                {
                    obj.insert("type".into(), json!("input_file"));
                    obj.insert("file_url".into(), json!(url));
                }
                (DataKind::File, _) => {
                    let Some((media_type, data)) = source_base64(source) else {
                        return marker();
                    };
                    obj.insert("type".into(), json!("input_file"));
                    obj.insert(
                        "filename".into(),
                        json!(file_name(data_file_name(extra), source)),
                    );
                    obj.insert(
                        "file_data".into(),
                        json!(super::super::common::data_url(&media_type, &data)),
                    );
                }
                (DataKind::Audio, _) => return marker(),
            }
            extra
        }
        Part::Opaque { value } => return keep_extra.then(|| value.clone()),
        Part::ToolCall { .. } | Part::ToolResult { .. } | Part::Reasoning { .. } => return None,
    };
    Some(object_with_extra(obj, extra, keep_extra))
}

/// Writes the pending assistant content as one assistant message item.
pub(super) fn flush_assistant(pending: &mut Vec<&Part>, native: bool, out: &mut Vec<Value>) {
    flush_message(Role::Assistant, pending, native, out);
}

/// Writes the pending content as one message item of `role` (nothing when there is none).
pub(super) fn flush_message(
    role: Role,
    pending: &mut Vec<&Part>,
    native: bool,
    out: &mut Vec<Value>,
) {
    if pending.is_empty() {
        return;
    }
    let content: Vec<Value> = pending
        .drain(..)
        .filter_map(|part| content_part(part, default_text_type(role), role, native))
        .collect();
    if !content.is_empty() {
        out.push(json!({"type": "message", "role": role.as_str(), "content": content}));
    }
}

/// A `function_call` or `custom_tool_call` item.
pub(super) fn call_item(part: &Part, kind: &str, keep_extra: bool) -> Value {
    let Part::ToolCall {
        id,
        name,
        arguments,
        extra,
    } = part
    else {
        return Value::Null;
    };
    let args_key = if kind == "custom_tool_call" {
        "input"
    } else {
        "arguments"
    };
    let mut obj = Map::new();
    obj.insert("type".into(), json!(kind));
    obj.insert("name".into(), json!(name));
    obj.insert(args_key.into(), json!(arguments));
    obj.insert("call_id".into(), json!(id));
    object_with_extra(obj, extra, keep_extra)
}

/// A `reasoning` item: its own `summary`/`content`/`id` when it was parsed from this format
/// (`exact`), a summary built from readable text otherwise, and the encrypted content
/// byte-for-byte.
pub(super) fn reasoning_item(part: &Part, exact: bool, keep_extra: bool) -> Value {
    let Part::Reasoning {
        text,
        encrypted,
        extra,
        ..
    } = part
    else {
        return Value::Null;
    };
    let mut obj = Map::new();
    obj.insert("type".into(), json!("reasoning"));
    if keep_extra {
        put_extra(&mut obj, extra);
    }
    if !exact && !obj.contains_key("summary") {
        let summary = match text {
            Some(text) => json!([{"type": "summary_text", "text": text}]),
            None => json!([]),
        };
        obj.insert("summary".into(), summary);
    }
    if let Some(encrypted) = encrypted {
        obj.insert("encrypted_content".into(), json!(encrypted));
    }
    Value::Object(obj)
}

/// A `function_call_output` (or `custom_tool_call_output`) item.
pub(super) fn output_item(
    message: &Message,
    part: &Part,
    same: bool,
    native: bool,
    custom_calls: &[String],
) -> Value {
    let Part::ToolResult {
        call_id,
        content,
        extra,
        ..
    } = part
    else {
        return Value::Null;
    };
    let same = same && message.role == Role::Tool;
    let kind = if same {
        private_str(&message.hints, ITEM_TYPE).unwrap_or("function_call_output")
    } else if custom_calls.iter().any(|id| id == call_id) {
        "custom_tool_call_output"
    } else {
        "function_call_output"
    };
    let mut obj = Map::new();
    obj.insert("type".into(), json!(kind));
    obj.insert("call_id".into(), json!(call_id));
    let output = if same {
        let part_type = |i| private_at(&message.hints, PART_TYPES, i);
        let form = message.hints.content_form;
        same_content(form, content, part_type, Role::User, "input_text")
    } else {
        let parts: Vec<Value> = content
            .iter()
            .filter_map(|p| content_part(p, "input_text", Role::User, native))
            .collect();
        match parts.as_slice() {
            [] => json!(""),
            [single]
                if single.as_object().is_some_and(|o| {
                    o.len() == 2 && o.get("type") == Some(&json!("input_text"))
                }) =>
            {
                single.get("text").cloned().unwrap_or_default()
            }
            _ => Value::Array(parts),
        }
    };
    obj.insert("output".into(), output);
    object_with_extra(obj, extra, native)
}
