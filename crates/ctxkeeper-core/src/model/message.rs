//! The provider-neutral message: a role plus an ordered list of parts.
//!
//! Every wire format (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages) parses into
//! this model and emits from it. Fields a format carries that the model has no slot for are kept
//! in `extra` maps so that parse → emit gives back the same JSON; format-specific presentation
//! details (a content string versus a list of parts) live in [`WireHints`].
//!
//! ```
//! use ctxkeeper_core::model::{Message, Role};
//!
//! let call = Message::tool_call("call_1", "search", r#"{"q":"rust"}"#);
//! let result = Message::tool_result("call_1", "3 hits");
//! assert_eq!(call.tool_calls().count(), 1);
//! assert_eq!(result.role, Role::Tool);
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Unknown or format-specific JSON fields carried through unchanged.
pub type Extra = Map<String, Value>;

/// Who speaks a message.
///
/// `Developer` is OpenAI's newer name for system-level instructions; it is kept distinct so that
/// a round trip gives back the role the client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

impl Role {
    /// The lowercase wire name (`"system"`, `"developer"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses a wire role name; `None` for anything unknown.
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "system" => Role::System,
            "developer" => Role::Developer,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return None,
        })
    }

    /// System and developer messages carry instructions rather than conversation.
    pub fn is_instruction(self) -> bool {
        matches!(self, Role::System | Role::Developer)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the bytes of an image or other binary part live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DataSource {
    /// A URL (http(s) or a `data:` URL) as the client sent it.
    Url { url: String },
    /// Inline base64 payload with its media type.
    Base64 { media_type: String, data: String },
    /// Content-addressed reference into an archive (`data/{sha256}.{ext}`).
    Archived { sha256: String, media_type: String },
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Plain text.
    Text {
        text: String,
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// An image (or other binary data such as audio or a document).
    Data {
        source: DataSource,
        /// The format's own name for the part kind (`image_url`, `image`, `input_audio`, …).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wire_type: Option<String>,
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// A request by the assistant to run a tool.
    ToolCall {
        id: String,
        name: String,
        /// The arguments exactly as the model produced them (a JSON text, possibly invalid).
        arguments: String,
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// The answer to a tool call.
    ToolResult {
        call_id: String,
        content: Vec<Part>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// Model reasoning: readable thinking text, an opaque signature, or encrypted content.
    /// Signatures and encrypted blobs are carried byte-for-byte and never counted as text.
    Reasoning {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted: Option<String>,
        /// Anthropic `redacted_thinking`: the content is only the encrypted `data`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        redacted: bool,
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// A part of a kind the model does not know, kept verbatim so it survives a round trip.
    Opaque { value: Value },
}

impl Part {
    /// Calls `visit` with every string a model reads in this part: text, a tool call's name
    /// and arguments, a result's content, readable reasoning.
    pub fn visit_strings(&self, visit: &mut dyn FnMut(&str)) {
        match self {
            Part::Text { text, .. } => visit(text),
            Part::ToolCall {
                name, arguments, ..
            } => {
                visit(name);
                visit(arguments);
            }
            Part::ToolResult { content, .. } => {
                for inner in content {
                    inner.visit_strings(visit);
                }
            }
            Part::Reasoning {
                text: Some(text), ..
            } => visit(text),
            _ => {}
        }
    }

    /// A text part.
    pub fn text(text: impl Into<String>) -> Part {
        Part::Text {
            text: text.into(),
            extra: Extra::new(),
        }
    }

    /// A tool call part.
    pub fn tool_call(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Part {
        Part::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            extra: Extra::new(),
        }
    }

    /// A tool result part holding text.
    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Part {
        Part::ToolResult {
            call_id: call_id.into(),
            content: vec![Part::text(text)],
            is_error: false,
            extra: Extra::new(),
        }
    }

    /// The text of a text part.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Part::Text { text, .. } => Some(text),
            _ => None,
        }
    }

    /// The call id and content of a tool result part.
    pub fn as_tool_result(&self) -> Option<(&str, &[Part])> {
        match self {
            Part::ToolResult {
                call_id, content, ..
            } => Some((call_id, content)),
            _ => None,
        }
    }

    /// A short name of the part kind, used in reports (`text`, `image`, `tool_call`, …).
    pub fn kind(&self) -> PartKind {
        match self {
            Part::Text { .. } => PartKind::Text,
            Part::Data { .. } => PartKind::Data,
            Part::ToolCall { .. } => PartKind::ToolCall,
            Part::ToolResult { .. } => PartKind::ToolResult,
            Part::Reasoning { .. } => PartKind::Reasoning,
            Part::Opaque { .. } => PartKind::Opaque,
        }
    }
}

/// The kind of a [`Part`], for statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartKind {
    Text,
    Data,
    ToolCall,
    ToolResult,
    Reasoning,
    Opaque,
}

impl PartKind {
    /// All kinds, in report order.
    pub const ALL: [PartKind; 6] = [
        PartKind::Text,
        PartKind::Data,
        PartKind::ToolCall,
        PartKind::ToolResult,
        PartKind::Reasoning,
        PartKind::Opaque,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            PartKind::Text => "text",
            PartKind::Data => "data",
            PartKind::ToolCall => "tool_call",
            PartKind::ToolResult => "tool_result",
            PartKind::Reasoning => "reasoning",
            PartKind::Opaque => "opaque",
        }
    }
}

/// How the message's content was written on the wire, so emit can write it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContentForm {
    /// No particular form recorded: emit the format's canonical form.
    #[default]
    Canonical,
    /// `"content": "text"`.
    String,
    /// `"content": [ {...}, ... ]`.
    Parts,
    /// `"content": null`.
    Null,
    /// The `content` key was absent.
    Absent,
}

/// Presentation details of the format a message was parsed from. They only matter when the
/// message is emitted back into the same format; other formats ignore them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WireHints {
    /// Which wire format produced this message (`openai-chat`, `anthropic`, `responses`, or an
    /// importer name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    #[serde(default, skip_serializing_if = "is_canonical")]
    pub content_form: ContentForm,
    /// Per-item extras for formats whose one message maps to several wire items (Responses),
    /// or any other format-private data an adapter needs to rebuild the exact JSON.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub private: Extra,
}

fn is_canonical(form: &ContentForm) -> bool {
    *form == ContentForm::Canonical
}

impl WireHints {
    /// True when no hint is recorded.
    pub fn is_empty(&self) -> bool {
        self.origin.is_none()
            && self.content_form == ContentForm::Canonical
            && self.private.is_empty()
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub parts: Vec<Part>,
    /// Optional participant name (OpenAI `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Unknown message-level fields, emitted back unchanged.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Extra,
    #[serde(default, skip_serializing_if = "WireHints::is_empty")]
    pub hints: WireHints,
}

impl Message {
    /// A message with the given role and parts and nothing else.
    pub fn new(role: Role, parts: Vec<Part>) -> Message {
        Message {
            role,
            parts,
            name: None,
            extra: Extra::new(),
            hints: WireHints::default(),
        }
    }

    /// A system message with one text part.
    pub fn system(text: impl Into<String>) -> Message {
        Message::new(Role::System, vec![Part::text(text)])
    }

    /// A user message with one text part.
    pub fn user(text: impl Into<String>) -> Message {
        Message::new(Role::User, vec![Part::text(text)])
    }

    /// An assistant message with one text part.
    pub fn assistant(text: impl Into<String>) -> Message {
        Message::new(Role::Assistant, vec![Part::text(text)])
    }

    /// An assistant message with optional text followed by tool calls.
    pub fn assistant_with_calls(text: impl Into<String>, calls: Vec<Part>) -> Message {
        let text = text.into();
        let mut parts = Vec::with_capacity(calls.len() + 1);
        if !text.is_empty() {
            parts.push(Part::text(text));
        }
        parts.extend(calls);
        Message::new(Role::Assistant, parts)
    }

    /// An assistant message that makes one tool call and says nothing else.
    pub fn tool_call(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Message {
        Message::new(Role::Assistant, vec![Part::tool_call(id, name, arguments)])
    }

    /// A tool message answering `call_id` with text.
    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Message {
        Message::new(Role::Tool, vec![Part::tool_result(call_id, text)])
    }

    /// The tool calls in this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.parts.iter().filter_map(|p| match p {
            Part::ToolCall {
                id,
                name,
                arguments,
                ..
            } => Some((id.as_str(), name.as_str(), arguments.as_str())),
            _ => None,
        })
    }

    /// The call ids answered by tool results in this message, in order.
    pub fn tool_result_ids(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
    }

    /// True if any part is a tool call.
    pub fn has_tool_calls(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::ToolCall { .. }))
    }

    /// True if any part is a tool result.
    pub fn has_tool_results(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::ToolResult { .. }))
    }

    /// True if every part is a tool result (an OpenAI `tool` message, or an Anthropic user
    /// message that only answers tool calls).
    pub fn is_only_tool_results(&self) -> bool {
        !self.parts.is_empty()
            && self
                .parts
                .iter()
                .all(|p| matches!(p, Part::ToolResult { .. }))
    }

    /// A user message that starts a turn: it carries something other than tool results.
    pub fn starts_turn(&self) -> bool {
        self.role == Role::User
            && self
                .parts
                .iter()
                .any(|p| !matches!(p, Part::ToolResult { .. }))
    }

    /// All readable text of the message joined by newlines (text parts, tool-result text and
    /// readable reasoning); tool-call arguments are not included.
    pub fn text(&self) -> String {
        parts_text(&self.parts).into_owned()
    }
}

/// The readable text of `parts` as [`Message::text`] joins it; borrowed when it is the text
/// of a single text part (a tool result's usual content), so reading it copies nothing.
pub fn parts_text(parts: &[Part]) -> std::borrow::Cow<'_, str> {
    if let [Part::Text { text, .. }] = parts {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::new();
    for part in parts {
        push_text(part, &mut out);
    }
    std::borrow::Cow::Owned(out)
}

impl AsRef<Message> for Message {
    fn as_ref(&self) -> &Message {
        self
    }
}

fn push_text(part: &Part, out: &mut String) {
    match part {
        Part::Text { text, .. }
        | Part::Reasoning {
            text: Some(text), ..
        } => {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(text);
        }
        Part::ToolResult { content, .. } => {
            for inner in content {
                push_text(inner, out);
            }
        }
        _ => {}
    }
}

/// A tool the model may call: name, description and JSON Schema of its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    #[serde(default)]
    pub parameters: Value,
    /// Unknown fields (for example `strict`, `cache_control`, or a hosted tool's own shape).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Extra,
    #[serde(default, skip_serializing_if = "WireHints::is_empty")]
    pub hints: WireHints,
}

/// A whole model request in neutral form: the model name, the messages (instructions first),
/// the tools, and every other request field kept verbatim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Request {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Request fields the model has no slot for (`temperature`, `stream`, `max_tokens`, …).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Extra,
    #[serde(default, skip_serializing_if = "WireHints::is_empty")]
    pub hints: WireHints,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_through_names() {
        for role in [
            Role::System,
            Role::Developer,
            Role::User,
            Role::Assistant,
            Role::Tool,
        ] {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("narrator"), None);
    }

    #[test]
    fn a_user_message_of_only_tool_results_does_not_start_a_turn() {
        let mut answer = Message::tool_result("a", "ok");
        answer.role = Role::User;
        assert!(!answer.starts_turn());
        assert!(Message::user("hi").starts_turn());
    }

    #[test]
    fn text_collects_tool_result_text_but_not_arguments() {
        let msg = Message::new(
            Role::Assistant,
            vec![
                Part::text("a"),
                Part::tool_call("1", "f", "{\"x\":\"secret\"}"),
            ],
        );
        assert_eq!(msg.text(), "a");
        assert_eq!(Message::tool_result("1", "out").text(), "out");
    }
}
