//! The caller's wire shape: parsing what Python hands in, emitting what it gets back.
//!
//! A manager speaks one shape for its whole life (`wire=` at construction): the messages it
//! ingests and the messages it returns are plain dicts of that shape, so a caller never
//! converts. The shapes' instruction fields live outside the message list (Anthropic's
//! `system`, Responses' `instructions`); they are given once as `system=` and come back in
//! [`Emitted::system`].

use ctxkeeper_core::ParseError;
use ctxkeeper_core::formats::{Wire, anthropic, openai_chat, responses};
use ctxkeeper_core::model::{Message, Request, ToolSpec};
use serde_json::{Value, json};

/// The request fields that hold the conversation in each shape.
#[derive(Debug, Clone, Copy)]
pub struct Fields {
    /// `messages` or `input`.
    pub messages: &'static str,
    /// `system`, `instructions`, or none (chat keeps instructions in its message list).
    pub system: Option<&'static str>,
}

/// The fields of `wire`.
pub fn fields(wire: Wire) -> Fields {
    match wire {
        Wire::OpenAiChat => Fields {
            messages: "messages",
            system: None,
        },
        Wire::Responses => Fields {
            messages: "input",
            system: Some("instructions"),
        },
        Wire::Anthropic => Fields {
            messages: "messages",
            system: Some("system"),
        },
    }
}

/// Parses a list of wire messages (Responses: input items) into neutral messages. The
/// list is consumed (parsed as the message field of a request body, which clones nothing);
/// errors name the position in the list (`$[2].role`).
pub fn parse_messages(wire: Wire, list: Value) -> Result<Vec<Message>, ParseError> {
    let field = fields(wire).messages;
    let mut body = serde_json::Map::new();
    body.insert(field.into(), list);
    let prefix = format!("$.{field}");
    wire.parse_request_owned(Value::Object(body))
        .map(|request| request.messages)
        .map_err(|mut err| {
            if let ctxkeeper_core::Position::Path { path, .. } = &mut err.position
                && let Some(rest) = path.strip_prefix(&prefix)
            {
                *path = format!("${rest}");
            }
            err
        })
}

/// Parses the instruction field of `wire` (`system=` of the constructor) into the leading
/// messages it stands for. Chat has no such field: a string becomes a system message.
pub fn parse_system(wire: Wire, system: Value) -> Result<Vec<Message>, ParseError> {
    let body = match wire {
        Wire::OpenAiChat => match system {
            Value::String(text) => json!({"messages": [{"role": "system", "content": text}]}),
            other => json!({"messages": [{"role": "system", "content": other}]}),
        },
        Wire::Anthropic => json!({"system": system, "messages": []}),
        Wire::Responses => json!({"instructions": system, "input": []}),
    };
    let request = wire.parse_request_owned(body)?;
    Ok(request.messages)
}

/// Parses a `tools` list of `wire`.
pub fn parse_tools(wire: Wire, tools: &Value) -> Result<Vec<ToolSpec>, ParseError> {
    match wire {
        Wire::OpenAiChat => openai_chat::parse_tools(tools),
        Wire::Anthropic => anthropic::parse_tools(tools),
        Wire::Responses => responses::parse_tools(tools),
    }
}

/// What a request carries of the context, in the wire shape.
#[derive(Debug, Clone, Default)]
pub struct Emitted {
    /// The message list (`messages`, or Responses `input` items).
    pub messages: Vec<Value>,
    /// The instruction field, when the shape has one and the context starts with it.
    pub system: Option<Value>,
}

/// Emits `messages` as `wire` writes a request of them (the same adapter `ctxkeeper replay
/// --emit-requests` and the gateway use), split into the message list and the instruction
/// field.
pub fn emit(wire: Wire, messages: Vec<Message>) -> Emitted {
    let request = Request {
        messages,
        ..Request::default()
    };
    let body = wire.emit_request(&request);
    split(wire, body)
}

fn split(wire: Wire, body: Value) -> Emitted {
    let Value::Object(mut body) = body else {
        return Emitted::default();
    };
    let fields = fields(wire);
    let messages = match body.remove(fields.messages) {
        Some(Value::Array(list)) => list,
        // Responses writes a lone user text as `input: "…"`; as a list it is one message.
        Some(Value::String(text)) => vec![json!({"role": "user", "content": text})],
        _ => Vec::new(),
    };
    let system = fields.system.and_then(|name| body.remove(name));
    Emitted { messages, system }
}

/// The wire's `tools` list for `tools` (empty: none).
pub fn emit_tools(wire: Wire, tools: &[ToolSpec]) -> Vec<Value> {
    match wire {
        Wire::OpenAiChat => openai_chat::emit_tools(tools),
        Wire::Anthropic => anthropic::emit_tools(tools),
        Wire::Responses => responses::emit_tools(tools),
    }
}
