//! Chat messages from the neutral model: a message's own JSON rebuilt from its hints, engine
//! messages in the canonical shape, other formats' messages converted (see the module docs).

use super::*;

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
pub(super) struct PendingMedia {
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

pub(super) fn emit_into(message: &Message, out: &mut Vec<Value>, pending: &mut PendingMedia) {
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
pub(super) fn tool_message(
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
pub(super) fn all_dropped(parts: &[(usize, &Part)], role: Role, native: bool) -> bool {
    parts.iter().all(|(_, part)| {
        !matches!(part, Part::ToolCall { .. }) && foreign_part_value(part, role, native).is_none()
    })
}

pub(super) fn kind_word(kind: DataKind) -> &'static str {
    match kind {
        DataKind::Image => "The image",
        DataKind::Audio => "The audio",
        DataKind::File => "The file",
    }
}

/// A system, developer, user or assistant message from the given parts (indices are positions
/// in `message.parts`, used to look up per-part hints).
pub(super) fn content_message(
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
    object_with_extra(obj, &message.extra, native)
}

pub(super) fn tool_call_value(
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
    object_with_extra(obj, extra, native)
}

pub(super) fn content_value(
    message: &Message,
    role: Role,
    parts: &[(usize, &Part)],
    same: bool,
    native: bool,
) -> Option<Value> {
    content_value_with_calls(message, role, parts, false, same, native)
}

/// The `content` value (`None` when the key is absent).
pub(super) fn content_value_with_calls(
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

pub(super) fn is_plain_text(value: &Value) -> bool {
    value.as_object().is_some_and(|o| {
        o.len() == 2
            && o.get("type") == Some(&json!("text"))
            && o.get("text").is_some_and(Value::is_string)
    })
}

/// A part of a message parsed from this format, rebuilt exactly.
pub(super) fn same_part_value(message: &Message, index: usize, part: &Part) -> Option<Value> {
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
pub(super) fn foreign_part_value(part: &Part, role: Role, native: bool) -> Option<Value> {
    match part {
        Part::Text { text, extra } => {
            let mut obj = Map::new();
            obj.insert("type".into(), json!("text"));
            obj.insert("text".into(), json!(text));
            Some(object_with_extra(obj, extra, native))
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
pub(super) fn data_part(
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
