//! Chat messages of the plain shape, built straight into the message model.
//!
//! A face that holds messages as its host language's objects (the Python wheel) would
//! otherwise write each one out as a `serde_json::Value` only for the parser to take that
//! apart again. Most messages of an agent loop are plain: a role, string (or null) content,
//! a name, a `tool_call_id`, typed function calls, and nothing else. [`Plain::into_message`]
//! builds the very [`Message`] that parsing such a message's JSON gives, and declines
//! (`None`) every message whose parse would keep something in `extra` or a private hint, or
//! fail: the face then parses the JSON as before, errors included.

use super::WIRE;
use crate::formats::common::origin_hints;
use crate::model::{ContentForm, Extra, Message, Part, Role};

/// The `content` of a plain message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PlainContent {
    /// No `content` key.
    #[default]
    Absent,
    /// `"content": null`.
    Null,
    /// `"content": "text"`.
    Text(String),
}

/// One entry of `tool_calls` of exactly this shape:
/// `{"id": …, "type": "function", "function": {"name": …, "arguments": …}}`, every value a
/// string, no other key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A Chat message with no key but these (each of the type given): `role` (a role
/// [`Role::parse`] knows), `content` (a string, null or absent), `name` (a string),
/// `tool_call_id` (a string), `tool_calls` (a list of [`PlainCall`]s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plain {
    pub role: Role,
    pub content: PlainContent,
    pub name: Option<String>,
    pub tool_call_id: Option<String>,
    pub tool_calls: Option<Vec<PlainCall>>,
}

impl Plain {
    /// The message [`super::parse_message`] gives for this message's JSON; `None` when that
    /// parse would fail, or keep a field in `extra` (a `tool_call_id` outside a tool message,
    /// `tool_calls` outside an assistant message or empty): the caller parses the JSON instead.
    pub fn into_message(self) -> Option<Message> {
        let Plain {
            role,
            content,
            name,
            tool_call_id,
            tool_calls,
        } = self;
        let (form, content) = match content {
            PlainContent::Absent => (ContentForm::Absent, Vec::new()),
            PlainContent::Null => (ContentForm::Null, Vec::new()),
            PlainContent::Text(text) => (ContentForm::String, vec![Part::text(text)]),
        };
        let parts = match role {
            Role::Tool => {
                if tool_calls.is_some() {
                    return None;
                }
                vec![Part::ToolResult {
                    call_id: tool_call_id?,
                    content,
                    is_error: false,
                    extra: Extra::new(),
                }]
            }
            Role::Assistant => {
                if tool_call_id.is_some() {
                    return None;
                }
                let mut parts = content;
                if let Some(calls) = tool_calls {
                    if calls.is_empty() {
                        return None;
                    }
                    parts.reserve(calls.len());
                    parts.extend(calls.into_iter().map(|call| Part::ToolCall {
                        id: call.id,
                        name: call.name,
                        arguments: call.arguments,
                        extra: Extra::new(),
                    }));
                }
                parts
            }
            Role::System | Role::Developer | Role::User => {
                if tool_call_id.is_some() || tool_calls.is_some() {
                    return None;
                }
                content
            }
        };
        let mut message = Message::new(role, parts);
        message.name = name;
        message.hints = origin_hints(WIRE);
        message.hints.content_form = form;
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::formats::openai_chat::parse_message;

    /// What a face reads out of a message object: the same rules the Python wheel applies
    /// to a dict (any other key or type declines).
    fn plain_of(value: &Value) -> Option<Plain> {
        let mut role = None;
        let mut plain = Plain {
            role: Role::User,
            content: PlainContent::Absent,
            name: None,
            tool_call_id: None,
            tool_calls: None,
        };
        for (key, value) in value.as_object()? {
            match key.as_str() {
                "role" => role = Some(Role::parse(value.as_str()?)?),
                "content" if value.is_null() => plain.content = PlainContent::Null,
                "content" => plain.content = PlainContent::Text(value.as_str()?.to_owned()),
                "name" => plain.name = Some(value.as_str()?.to_owned()),
                "tool_call_id" => plain.tool_call_id = Some(value.as_str()?.to_owned()),
                "tool_calls" => {
                    let calls: Option<Vec<PlainCall>> =
                        value.as_array()?.iter().map(call_of).collect();
                    plain.tool_calls = Some(calls?);
                }
                _ => return None,
            }
        }
        plain.role = role?;
        Some(plain)
    }

    fn call_of(value: &Value) -> Option<PlainCall> {
        let call = value.as_object()?;
        let function = call.get("function")?.as_object()?;
        if call.len() != 3 || call.get("type")?.as_str()? != "function" || function.len() != 2 {
            return None;
        }
        Some(PlainCall {
            id: call.get("id")?.as_str()?.to_owned(),
            name: function.get("name")?.as_str()?.to_owned(),
            arguments: function.get("arguments")?.as_str()?.to_owned(),
        })
    }

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "get_user", "arguments": "{\"id\": 1}"}})
    }

    #[test]
    fn plain_messages_are_what_parsing_their_json_gives() {
        let built = [
            json!({"role": "user", "content": "hi"}),
            json!({"content": "héllo 中文 🎉 Ж", "role": "user", "name": "ann"}),
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "developer", "content": null}),
            json!({"role": "user", "content": ""}),
            json!({"role": "assistant"}),
            json!({"role": "assistant", "content": "sure"}),
            json!({"role": "assistant", "content": null, "tool_calls": [call("c1")]}),
            json!({"role": "assistant", "tool_calls": [call("c1"), call("c2")], "content": "two"}),
            json!({"role": "assistant", "tool_calls": [call("c1")]}),
            json!({"role": "tool", "tool_call_id": "c1", "name": "get_user", "content": "18C"}),
            json!({"role": "tool", "tool_call_id": "c1", "content": null}),
            json!({"role": "tool", "tool_call_id": "c1"}),
            // Checked later by the session, not by the parse: both paths let it through.
            json!({"role": "tool", "tool_call_id": "../../x", "content": "x"}),
        ];
        for value in built {
            let plain = plain_of(&value).unwrap_or_else(|| panic!("not plain: {value}"));
            let message = plain
                .into_message()
                .unwrap_or_else(|| panic!("declined: {value}"));
            let parsed = parse_message(&value, "$").expect("parses");
            assert_eq!(message, parsed, "{value}");
            assert!(message.extra.is_empty() && message.hints.private.is_empty());
        }
    }

    #[test]
    fn messages_whose_parse_keeps_more_are_declined() {
        // Read as plain, but their parse fails or keeps a field in `extra`.
        let declined = [
            json!({"role": "tool", "content": "no id"}),
            json!({"role": "user", "content": "x", "tool_call_id": "c1"}),
            json!({"role": "assistant", "content": "x", "tool_call_id": "c1"}),
            json!({"role": "tool", "tool_call_id": "c1", "tool_calls": [call("c2")]}),
            json!({"role": "user", "tool_calls": [call("c1")]}),
            json!({"role": "assistant", "content": null, "tool_calls": []}),
        ];
        for value in declined {
            let plain = plain_of(&value).unwrap_or_else(|| panic!("not plain: {value}"));
            assert_eq!(plain.into_message(), None, "{value}");
            if let Ok(message) = parse_message(&value, "$") {
                assert!(!message.extra.is_empty(), "{value}");
            }
        }
        // Not plain at all: another key, another type, another call shape, another role.
        let other = [
            json!({"role": "user", "content": [{"type": "text", "text": "x"}]}),
            json!({"role": "user", "content": "x", "x-trace": 7}),
            json!({"role": "user", "content": "x", "name": null}),
            json!({"role": "assistant", "content": null, "tool_calls": null}),
            json!({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
            json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "f", "input": "x"}}]}),
            json!({"role": "function", "name": "f", "content": "ok"}),
            json!({"role": "wizard", "content": "x"}),
        ];
        for value in other {
            assert_eq!(plain_of(&value), None, "{value}");
        }
    }
}
