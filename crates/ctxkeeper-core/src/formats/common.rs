//! Helpers shared by the three wire adapters.
//!
//! Parsing walks a JSON object with [`Fields`]: known fields are taken out one by one, every
//! error carries the JSON path of the offending value, and whatever remains becomes the `extra`
//! map that emit writes back. A known field whose value has an unexpected but harmless type
//! (`"name": null`, `"tool_calls": []`) is simply left in that map, which keeps the round trip
//! exact without a special case per field.
//!
//! Emitting into a format other than the one a message came from uses the conversion helpers
//! below: data URLs, media kinds, placeholders for content the target cannot carry, and the
//! portable subset of request options.

use std::fmt;

use serde_json::{Map, Value, json};

use super::Wire;
use crate::ParseError;
use crate::json_kind;
use crate::model::{DataSource, Extra, Message, Part, Request, ToolSpec, WireHints};

/// `path.key`.
pub(crate) fn key_path(path: &str, key: &str) -> String {
    format!("{path}.{key}")
}

/// Where a value sits in the document, for errors: a path written out, or an element of an
/// array given by the array's path and its index. An element's path is formatted only when an
/// error needs it, so parsing a long array builds no string per element.
#[derive(Debug, Clone, Copy)]
pub(crate) enum JsonPath<'a> {
    /// A path written out (`$.messages[3].function_call`).
    At(&'a str),
    /// `array[index]`.
    Index(&'a str, usize),
}

impl JsonPath<'_> {
    /// The path of a field of the value: `path.key`.
    pub(crate) fn key(self, key: &str) -> String {
        match self {
            JsonPath::At(path) => key_path(path, key),
            JsonPath::Index(array, index) => format!("{array}[{index}].{key}"),
        }
    }
}

impl fmt::Display for JsonPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonPath::At(path) => f.write_str(path),
            JsonPath::Index(array, index) => write!(f, "{array}[{index}]"),
        }
    }
}

/// The elements of an array, or an error naming what was expected.
pub(crate) fn expect_array(value: Value, path: &str, what: &str) -> Result<Vec<Value>, ParseError> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(ParseError::at(
            path,
            format!("expected {what}, found {}", json_kind(&other)),
        )),
    }
}

/// Each item of the JSON array at `path` (`what` names what it must be), parsed by `parse`.
pub(crate) fn parse_array<T>(
    value: Value,
    path: &str,
    what: &str,
    parse: impl Fn(Value, JsonPath<'_>) -> Result<T, ParseError>,
) -> Result<Vec<T>, ParseError> {
    parse_each(expect_array(value, path, what)?, path, parse)
}

/// Each of `items`, the elements of the array at `path`, parsed by `parse`.
pub(crate) fn parse_each<T>(
    items: Vec<Value>,
    path: &str,
    parse: impl Fn(Value, JsonPath<'_>) -> Result<T, ParseError>,
) -> Result<Vec<T>, ParseError> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| parse(item, JsonPath::Index(path, i)))
        .collect()
}

/// The fields of one JSON object being parsed. Known fields are taken out; the rest is the
/// object's `extra` map, in its original order.
///
/// It owns the object (nothing is cloned) and borrows its path, which is only written out for
/// an error.
pub(crate) struct Fields<'p> {
    map: Map<String, Value>,
    path: JsonPath<'p>,
}

impl<'p> Fields<'p> {
    /// Starts parsing `value`, which must be an object (`what` names it in the error).
    pub(crate) fn new(
        value: Value,
        path: JsonPath<'p>,
        what: &str,
    ) -> Result<Fields<'p>, ParseError> {
        match value {
            Value::Object(map) => Ok(Fields { map, path }),
            other => Err(ParseError::at(
                path.to_string(),
                format!("expected {what}, found {}", json_kind(&other)),
            )),
        }
    }

    /// The path of the object itself.
    pub(crate) fn path(&self) -> JsonPath<'p> {
        self.path
    }

    /// The path of one of its fields.
    pub(crate) fn path_of(&self, key: &str) -> String {
        self.path.key(key)
    }

    /// A field, without taking it.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    /// Takes a field out, whatever its type.
    pub(crate) fn take(&mut self, key: &str) -> Option<Value> {
        self.map.shift_remove(key)
    }

    /// Takes a required string field.
    pub(crate) fn required_str(&mut self, key: &str) -> Result<String, ParseError> {
        match self.map.shift_remove(key) {
            Some(Value::String(text)) => Ok(text),
            Some(other) => Err(ParseError::at(
                self.path_of(key),
                format!("expected a string, found {}", json_kind(&other)),
            )),
            None => Err(ParseError::at(self.path_of(key), "missing required field")),
        }
    }

    /// Takes a field out only if `accept` says its value is understood; otherwise it stays in
    /// the extra map.
    fn take_if(&mut self, key: &str, accept: impl FnOnce(&Value) -> bool) -> Option<Value> {
        if self.map.get(key).is_some_and(accept) {
            self.map.shift_remove(key)
        } else {
            None
        }
    }

    /// Takes a field only if it is a string; any other value stays in the extra map.
    pub(crate) fn optional_str(&mut self, key: &str) -> Option<String> {
        match self.take_if(key, Value::is_string) {
            Some(Value::String(text)) => Some(text),
            _ => None,
        }
    }

    /// Takes an object field out only if `accept` says its contents are understood; otherwise
    /// (another type, or an object `accept` rejects) it stays in the extra map.
    pub(crate) fn take_object_if(
        &mut self,
        key: &str,
        accept: impl FnOnce(&Map<String, Value>) -> bool,
    ) -> Option<Map<String, Value>> {
        let accept = |value: &Value| value.as_object().is_some_and(accept);
        match self.take_if(key, accept) {
            Some(Value::Object(inner)) => Some(inner),
            _ => None,
        }
    }

    /// Takes an array field out only if it holds something. An empty list (or a value of
    /// another type) has nothing to parse: it stays in the extra map, to be written back
    /// verbatim.
    pub(crate) fn take_nonempty_array(&mut self, key: &str) -> Option<Vec<Value>> {
        let accept = |value: &Value| value.as_array().is_some_and(|items| !items.is_empty());
        match self.take_if(key, accept) {
            Some(Value::Array(items)) => Some(items),
            _ => None,
        }
    }

    /// The `type` discriminator of a part or item: a required string, returned without being
    /// taken so that the caller decides whether the rest of the object is understood.
    pub(crate) fn kind(&self) -> Result<String, ParseError> {
        match self.map.get("type") {
            Some(Value::String(kind)) => Ok(kind.clone()),
            Some(other) => Err(ParseError::at(
                self.path_of("type"),
                format!("expected a string, found {}", json_kind(other)),
            )),
            None => Err(ParseError::at(
                self.path_of("type"),
                "missing required field",
            )),
        }
    }

    /// The remaining fields.
    pub(crate) fn rest(self) -> Extra {
        self.map
    }

    /// A text part: `type` is taken out, the text is the required string `key`, and the
    /// remaining fields are the part's `extra`.
    pub(crate) fn into_text_part(mut self, key: &str) -> Result<Part, ParseError> {
        self.take("type");
        let text = self.required_str(key)?;
        Ok(Part::Text {
            text,
            extra: self.rest(),
        })
    }

    /// The whole object back, for a value kept opaque. Only valid while nothing has been taken
    /// out: [`Fields::take`] keeps the order of the other fields, but the taken ones are gone.
    pub(crate) fn into_value(self) -> Value {
        Value::Object(self.map)
    }
}

/// A parsed part, with a string its format records about it in the message's private hints
/// (such as its wire type) when there is one.
pub(crate) type ParsedPart = Result<(Part, Option<&'static str>), ParseError>;

/// Parses each element of the content array at `path` with `parse`, recording the string it
/// returns beside a part as `private[key][index]`.
pub(crate) fn parse_recorded_parts(
    items: Vec<Value>,
    path: &str,
    private: &mut Extra,
    key: &str,
    parse: impl Fn(Value, JsonPath<'_>) -> ParsedPart,
) -> Result<Vec<Part>, ParseError> {
    let mut parts = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let (part, record) = parse(item, JsonPath::Index(path, i))?;
        if let Some(record) = record {
            record_at(private, key, i, record);
        }
        parts.push(part);
    }
    Ok(parts)
}

/// A part kept whole, with no wire type to record. Only valid while nothing has been taken out
/// of `fields` (see [`Fields::into_value`]).
pub(crate) fn opaque_part(fields: Fields<'_>) -> ParsedPart {
    Ok((
        Part::Opaque {
            value: fields.into_value(),
        },
        None,
    ))
}

/// True when `map[key]` is a string.
pub(crate) fn has_string(map: &Map<String, Value>, key: &str) -> bool {
    matches!(map.get(key), Some(Value::String(_)))
}

/// Takes out `map[key]`, a string the caller has checked with [`has_string`].
pub(crate) fn take_string(map: &mut Map<String, Value>, key: &str) -> String {
    match map.shift_remove(key) {
        Some(Value::String(text)) => text,
        _ => String::new(),
    }
}

/// Moves the extra fields that the object does not already have into it, in order (the owned
/// form of [`put_extra`]).
pub(crate) fn move_extra(object: &mut Map<String, Value>, extra: Extra) {
    if object.is_empty() {
        *object = extra;
        return;
    }
    for (key, value) in extra {
        object.entry(key).or_insert(value);
    }
}

/// Inserts the extra fields that the object does not already have: a field the model knows
/// always wins over a stale copy in `extra`.
pub(crate) fn put_extra(object: &mut Map<String, Value>, extra: &Extra) {
    for (key, value) in extra {
        if !object.contains_key(key) {
            object.insert(key.clone(), value.clone());
        }
    }
}

/// The object as a value, with the extra fields it does not already have added when `keep_extra`
/// (see [`put_extra`]).
pub(crate) fn object_with_extra(
    mut object: Map<String, Value>,
    extra: &Extra,
    keep_extra: bool,
) -> Value {
    if keep_extra {
        put_extra(&mut object, extra);
    }
    Value::Object(object)
}

/// True when the hints say the value was parsed from `wire`: its format-private hints apply.
pub(crate) fn same_origin(hints: &WireHints, wire: Wire) -> bool {
    hints.origin.as_deref() == Some(wire.as_str())
}

/// True when the value's `extra` fields may be written into `wire`: it came from that format or
/// was built by the engine itself (no origin). Extras of another format are never copied, since
/// providers reject fields they do not know.
pub(crate) fn native(hints: &WireHints, wire: Wire) -> bool {
    hints.origin.is_none() || same_origin(hints, wire)
}

/// A string stored in the private hints.
pub(crate) fn private_str<'a>(hints: &'a WireHints, key: &str) -> Option<&'a str> {
    hints.private.get(key).and_then(Value::as_str)
}

/// True when a boolean flag is set in the private hints.
pub(crate) fn private_flag(hints: &WireHints, key: &str) -> bool {
    hints
        .private
        .get(key)
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// A per-part string stored as `private[key][index]`.
pub(crate) fn private_at<'a>(hints: &'a WireHints, key: &str, index: usize) -> Option<&'a str> {
    hints.private.get(key)?.get(index.to_string())?.as_str()
}

/// Records `private[key][index] = value`.
pub(crate) fn record_at(private: &mut Extra, key: &str, index: usize, value: &str) {
    let entry = private
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(map) = entry {
        map.insert(index.to_string(), Value::String(value.to_string()));
    }
}

/// Fresh hints naming `wire` as the origin.
pub(crate) fn origin_hints(wire: Wire) -> WireHints {
    WireHints {
        origin: Some(wire.as_str().to_string()),
        ..WireHints::default()
    }
}

/// Splits a `data:<media type>;base64,<data>` URL.
pub(crate) fn split_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?;
    Some((media_type, data))
}

/// Builds a `data:` URL.
pub(crate) fn data_url(media_type: &str, data: &str) -> String {
    format!("data:{media_type};base64,{data}")
}

/// What a binary part holds, which decides the block it becomes in another format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataKind {
    Image,
    Audio,
    File,
}

impl DataKind {
    fn as_str(self) -> &'static str {
        match self {
            DataKind::Image => "image",
            DataKind::Audio => "audio",
            DataKind::File => "file",
        }
    }
}

/// The media type of a source, when it is known.
pub(crate) fn media_type(source: &DataSource) -> Option<&str> {
    match source {
        DataSource::Base64 { media_type, .. } | DataSource::Archived { media_type, .. } => {
            Some(media_type)
        }
        DataSource::Url { url } => split_data_url(url).map(|(media_type, _)| media_type),
    }
}

/// The kind of a data part, from its wire type or else its media type.
pub(crate) fn data_kind(wire_type: Option<&str>, source: &DataSource) -> DataKind {
    match wire_type {
        Some("image_url" | "input_image" | "image") => DataKind::Image,
        Some("input_audio") => DataKind::Audio,
        Some("file" | "input_file" | "document") => DataKind::File,
        _ => match media_type(source) {
            Some(mt) if mt.starts_with("image/") => DataKind::Image,
            Some(mt) if mt.starts_with("audio/") => DataKind::Audio,
            _ => DataKind::File,
        },
    }
}

/// The source as a URL: the URL itself, or a `data:` URL built from inline base64. `None` for
/// archived data, which has no bytes in the message.
pub(crate) fn source_url(source: &DataSource) -> Option<String> {
    match source {
        DataSource::Url { url } => Some(url.clone()),
        DataSource::Base64 { media_type, data } => Some(data_url(media_type, data)),
        DataSource::Archived { .. } => None,
    }
}

/// The source as inline base64 (media type, data), when it is inline.
pub(crate) fn source_base64(source: &DataSource) -> Option<(String, String)> {
    match source {
        DataSource::Base64 { media_type, data } => Some((media_type.clone(), data.clone())),
        DataSource::Url { url } => {
            split_data_url(url).map(|(mt, data)| (mt.to_string(), data.to_string()))
        }
        DataSource::Archived { .. } => None,
    }
}

/// The text standing in for a binary part that `target` cannot carry in this position. It names
/// what was there (and the archive reference, when there is one) so the model knows content was
/// left out.
pub(crate) fn omitted_data(kind: DataKind, source: &DataSource, target: Wire) -> String {
    let what = match source {
        DataSource::Archived { sha256, media_type } => {
            format!("{} archived as data/{sha256} ({media_type})", kind.as_str())
        }
        other => match media_type(other) {
            Some(mt) => format!("{} ({mt})", kind.as_str()),
            None => kind.as_str().to_string(),
        },
    };
    format!(
        "[{what} omitted: not supported here by {}]",
        target.as_str()
    )
}

/// A file name for a data part: the one the client gave, or `file` plus an extension guessed
/// from the media type.
pub(crate) fn file_name(given: Option<&str>, source: &DataSource) -> String {
    if let Some(name) = given {
        return name.to_string();
    }
    let ext = media_type(source)
        .and_then(|mt| mt.split('/').nth(1))
        .unwrap_or("bin");
    format!("file.{ext}")
}

/// The file name or title a data part carried in its own format, if any.
pub(crate) fn data_file_name(extra: &Extra) -> Option<&str> {
    extra
        .get("filename")
        .or_else(|| extra.get("file").and_then(|f| f.get("filename")))
        .or_else(|| extra.get("title"))
        .and_then(Value::as_str)
}

/// The image `detail` a data part carried (OpenAI Chat keeps it inside `image_url`, Responses
/// beside it), if any.
pub(crate) fn data_detail(extra: &Extra) -> Option<&str> {
    extra
        .get("detail")
        .or_else(|| extra.get("image_url").and_then(|inner| inner.get("detail")))
        .and_then(Value::as_str)
}

/// Whether a reasoning part may be sent to `target` when it came from another format.
///
/// - OpenAI Chat Completions has no reasoning input: all reasoning is dropped.
/// - Responses accepts only its own reasoning items (an `encrypted_content` blob that only
///   OpenAI can read); readable thinking from elsewhere is dropped.
/// - Anthropic accepts `thinking` only with its signature and `redacted_thinking` only with its
///   data; reasoning without a signature and OpenAI's encrypted reasoning are dropped.
pub(crate) fn reasoning_portable(part: &Part, target: Wire) -> bool {
    let Part::Reasoning {
        text,
        signature,
        encrypted,
        redacted,
        ..
    } = part
    else {
        return false;
    };
    match target {
        Wire::OpenAiChat => false,
        Wire::Responses => encrypted.is_some() && !redacted,
        Wire::Anthropic => {
            (*redacted && encrypted.is_some())
                || (!redacted && encrypted.is_none() && text.is_some() && signature.is_some())
        }
    }
}

/// Private hint key of OpenAI Chat messages: per-tool-call wire type when not `function`.
pub(crate) const CHAT_CALL_TYPES: &str = "call_types";

/// True when the tool call at `index` of `message` is a custom (free-form text input) call of
/// one of the OpenAI formats: a Chat `{"type": "custom"}` call or a Responses `custom_tool_call`
/// (which keeps its `type` in the part's `extra`). Both OpenAI formats can carry such calls, so
/// the kind survives a conversion between them.
pub(crate) fn is_custom_call(message: &Message, index: usize) -> bool {
    if same_origin(&message.hints, Wire::OpenAiChat) {
        return private_at(&message.hints, CHAT_CALL_TYPES, index) == Some("custom");
    }
    if same_origin(&message.hints, Wire::Responses) {
        return matches!(
            message.parts.get(index),
            Some(Part::ToolCall { extra, .. })
                if extra.get("type").and_then(Value::as_str) == Some("custom_tool_call")
        );
    }
    false
}

/// A custom tool declaration of one OpenAI format rewritten for the other: Chat nests the
/// declaration under `custom`, Responses writes it flat. `None` for any other tool.
pub(crate) fn convert_custom_tool(verbatim: &Value, from: Wire, to: Wire) -> Option<Value> {
    if verbatim.get("type").and_then(Value::as_str) != Some("custom") {
        return None;
    }
    match (from, to) {
        (Wire::OpenAiChat, Wire::Responses) => {
            let mut flat = Map::new();
            flat.insert("type".into(), json!("custom"));
            put_extra(&mut flat, verbatim.get("custom")?.as_object()?);
            Some(Value::Object(flat))
        }
        (Wire::Responses, Wire::OpenAiChat) => {
            let mut inner = verbatim.as_object()?.clone();
            inner.shift_remove("type");
            Some(json!({"type": "custom", "custom": inner}))
        }
        _ => None,
    }
}

/// Parses a request body: its `model`, then what `parse` takes out of it (the messages, the tools
/// and the request's hints); the remaining fields are the request's `extra`.
pub(crate) fn parse_request_body(
    body: Value,
    parse: impl FnOnce(&mut Fields<'_>) -> Result<(Vec<Message>, Vec<ToolSpec>, WireHints), ParseError>,
) -> Result<Request, ParseError> {
    let mut fields = Fields::new(body, JsonPath::At("$"), "a request object")?;
    let model = fields.optional_str("model");
    let (messages, tools, hints) = parse(&mut fields)?;
    Ok(Request {
        model,
        messages,
        tools,
        extra: fields.rest(),
        hints,
    })
}

/// Writes a request body into `target`: its `model`, then what `write` adds (the messages and
/// tools), then the request options [`portable_request_extra`] keeps.
pub(crate) fn emit_request_body(
    request: &Request,
    target: Wire,
    write: impl FnOnce(&mut Map<String, Value>),
) -> Value {
    let mut obj = Map::new();
    if let Some(model) = &request.model {
        obj.insert("model".into(), json!(model));
    }
    write(&mut obj);
    put_extra(&mut obj, &portable_request_extra(request, target));
    Value::Object(obj)
}

/// The number of leading instruction (system/developer) messages.
pub(crate) fn leading_instructions(messages: &[Message]) -> usize {
    messages
        .iter()
        .take_while(|m| m.role.is_instruction())
        .count()
}

/// The maximum output tokens written into an Anthropic request converted from a format where
/// the field is optional, since Anthropic requires `max_tokens`.
pub(crate) const DEFAULT_ANTHROPIC_MAX_TOKENS: u64 = 4096;

/// Which tool the model must call, in neutral form.
enum ToolChoice {
    Auto,
    None,
    Required,
    Named(String),
}

fn read_tool_choice(value: &Value, from: Wire) -> Option<ToolChoice> {
    if let Some(name) = value.as_str() {
        return match name {
            "auto" => Some(ToolChoice::Auto),
            "none" => Some(ToolChoice::None),
            "required" => Some(ToolChoice::Required),
            _ => None,
        };
    }
    let kind = value.get("type")?.as_str()?;
    match (from, kind) {
        (Wire::Anthropic, "auto") => Some(ToolChoice::Auto),
        (Wire::Anthropic, "none") => Some(ToolChoice::None),
        (Wire::Anthropic, "any") => Some(ToolChoice::Required),
        (Wire::Anthropic, "tool") | (Wire::Responses, "function") => {
            Some(ToolChoice::Named(value.get("name")?.as_str()?.to_string()))
        }
        (Wire::OpenAiChat, "function") => Some(ToolChoice::Named(
            value.get("function")?.get("name")?.as_str()?.to_string(),
        )),
        _ => None,
    }
}

fn write_tool_choice(choice: ToolChoice, to: Wire) -> Value {
    match (to, choice) {
        (Wire::Anthropic, ToolChoice::Auto) => json!({"type": "auto"}),
        (Wire::Anthropic, ToolChoice::None) => json!({"type": "none"}),
        (Wire::Anthropic, ToolChoice::Required) => json!({"type": "any"}),
        (Wire::Anthropic, ToolChoice::Named(name)) => json!({"type": "tool", "name": name}),
        (_, ToolChoice::Auto) => json!("auto"),
        (_, ToolChoice::None) => json!("none"),
        (_, ToolChoice::Required) => json!("required"),
        (Wire::OpenAiChat, ToolChoice::Named(name)) => {
            json!({"type": "function", "function": {"name": name}})
        }
        (Wire::Responses, ToolChoice::Named(name)) => json!({"type": "function", "name": name}),
    }
}

/// The request options written into `target`.
///
/// A request parsed from `target` (or built without an origin) keeps all its extra fields. A
/// request from another format keeps only the options every format shares, renamed as the target
/// spells them: `temperature`, `top_p`, `stream`, the output-token limit (`max_completion_tokens`
/// / `max_tokens` / `max_output_tokens`; Anthropic requires it, so
/// [`DEFAULT_ANTHROPIC_MAX_TOKENS`] fills it in when absent), stop sequences (`stop` /
/// `stop_sequences`; Responses has none) and `tool_choice`. Everything else is specific to the
/// source provider and is left out rather than sent to a provider that would reject it.
pub(crate) fn portable_request_extra(request: &Request, target: Wire) -> Extra {
    if native(&request.hints, target) {
        return request.extra.clone();
    }
    let from = request
        .hints
        .origin
        .as_deref()
        .and_then(|o| o.parse::<Wire>().ok());
    let extra = &request.extra;
    let mut out = Extra::new();
    for key in ["temperature", "top_p", "stream"] {
        if let Some(value) = extra.get(key) {
            out.insert(key.to_string(), value.clone());
        }
    }
    let max_tokens = ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|key| extra.get(*key).filter(|v| v.is_u64()).cloned());
    let max_key = match target {
        Wire::OpenAiChat => "max_completion_tokens",
        Wire::Responses => "max_output_tokens",
        Wire::Anthropic => "max_tokens",
    };
    match max_tokens {
        Some(value) => {
            out.insert(max_key.to_string(), value);
        }
        None if target == Wire::Anthropic => {
            out.insert(max_key.to_string(), json!(DEFAULT_ANTHROPIC_MAX_TOKENS));
        }
        None => {}
    }
    let stops: Option<Vec<Value>> = match extra.get("stop").or_else(|| extra.get("stop_sequences"))
    {
        Some(Value::String(stop)) => Some(vec![Value::String(stop.clone())]),
        Some(Value::Array(stops)) => Some(stops.clone()),
        _ => None,
    };
    match (stops, target) {
        (Some(stops), Wire::OpenAiChat) => {
            out.insert("stop".to_string(), Value::Array(stops));
        }
        (Some(stops), Wire::Anthropic) => {
            out.insert("stop_sequences".to_string(), Value::Array(stops));
        }
        _ => {}
    }
    if let (Some(choice), Some(from)) = (extra.get("tool_choice"), from)
        && let Some(choice) = read_tool_choice(choice, from)
    {
        out.insert("tool_choice".to_string(), write_tool_choice(choice, target));
    }
    out
}

/// Test helper: each of `cases`, a list of messages, parses and emits back unchanged.
#[cfg(test)]
pub(crate) fn assert_round_trips(
    parse: impl Fn(&Value) -> Result<Vec<Message>, ParseError>,
    emit: fn(&[Message]) -> Vec<Value>,
    cases: &[Value],
) {
    for input in cases {
        let messages = parse(input).unwrap_or_else(|e| panic!("{e}: {input}"));
        assert_eq!(Value::Array(emit(&messages)), *input);
    }
}

/// Test helper: every input fails to parse with an error at exactly `path` whose message
/// contains `needle`.
#[cfg(test)]
pub(crate) fn assert_path_errors(
    parse: fn(&Value) -> Result<Vec<Message>, ParseError>,
    cases: &[(Value, &str, &str)],
) {
    for (input, path, needle) in cases {
        let err = parse(input).expect_err("must fail");
        assert_eq!(
            err.position,
            crate::Position::Path {
                line: None,
                path: (*path).into()
            },
            "{input}"
        );
        assert!(
            err.message.contains(needle),
            "{} does not contain {needle}",
            err.message
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_split_and_join() {
        let cases = [
            ("data:image/png;base64,AAAA", Some(("image/png", "AAAA"))),
            ("data:text/plain,hello", None),
            ("https://example.com/a.png", None),
        ];
        for (url, expected) in cases {
            assert_eq!(split_data_url(url), expected, "{url}");
        }
        assert_eq!(data_url("image/gif", "R0lG"), "data:image/gif;base64,R0lG");
    }

    #[test]
    fn data_kind_prefers_wire_type_then_media_type() {
        let png = DataSource::Base64 {
            media_type: "image/png".into(),
            data: "x".into(),
        };
        let pdf = DataSource::Url {
            url: "data:application/pdf;base64,x".into(),
        };
        assert_eq!(data_kind(Some("input_audio"), &png), DataKind::Audio);
        assert_eq!(data_kind(None, &png), DataKind::Image);
        assert_eq!(data_kind(None, &pdf), DataKind::File);
        assert_eq!(data_kind(Some("image_url"), &pdf), DataKind::Image);
    }

    #[test]
    fn foreign_request_options_are_renamed_or_dropped() {
        let mut request = Request {
            hints: origin_hints(Wire::OpenAiChat),
            ..Request::default()
        };
        let extra = json!({
            "temperature": 0.2,
            "max_completion_tokens": 100,
            "stop": "END",
            "logprobs": true,
            "tool_choice": {"type": "function", "function": {"name": "f"}}
        });
        if let Value::Object(map) = extra {
            request.extra = map;
        }
        let out = Value::Object(portable_request_extra(&request, Wire::Anthropic));
        assert_eq!(
            out,
            json!({
                "temperature": 0.2,
                "max_tokens": 100,
                "stop_sequences": ["END"],
                "tool_choice": {"type": "tool", "name": "f"}
            })
        );
        let same = Value::Object(portable_request_extra(&request, Wire::OpenAiChat));
        assert_eq!(same.get("logprobs"), Some(&json!(true)));
    }
}
