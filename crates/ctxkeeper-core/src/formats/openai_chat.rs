//! Wire adapter (signatures fixed; implementation in progress).

use serde_json::Value;

use crate::ParseError;
use crate::model::{Message, Request, ToolSpec};

/// Parses a list of messages (the `messages` / `input` array) into the neutral model.
pub fn parse_messages(value: &Value) -> Result<Vec<Message>, ParseError> {
    let _ = value;
    Err(ParseError::at("$", "not implemented"))
}

/// Emits neutral messages as this format's message list.
pub fn emit_messages(messages: &[Message]) -> Vec<Value> {
    let _ = messages;
    Vec::new()
}

/// Parses this format's `tools` array.
pub fn parse_tools(value: &Value) -> Result<Vec<ToolSpec>, ParseError> {
    let _ = value;
    Ok(Vec::new())
}

/// Emits tools in this format.
pub fn emit_tools(tools: &[ToolSpec]) -> Vec<Value> {
    let _ = tools;
    Vec::new()
}

/// Parses a whole request body.
pub fn parse_request(body: &Value) -> Result<Request, ParseError> {
    let _ = body;
    Err(ParseError::at("$", "not implemented"))
}

/// Emits a whole request body.
pub fn emit_request(request: &Request) -> Value {
    let _ = request;
    Value::Null
}
