//! Message contents in the GenAI conventions' JSON shape (`gen_ai.input.messages`): only
//! when the operator opted in (`capture_content`), since they hold whatever the user and the
//! tools said. The messages are the ones the gateway sent upstream, after compaction; a
//! compaction's summary is text like any other.
//!
//! ```
//! use ctxkeeper_core::model::{Message, Part};
//! use ctxkeeper_gateway::telemetry::content::input_messages;
//!
//! let messages = vec![
//!     Message::user("Read main.rs"),
//!     Message::tool_call("c1", "read", r#"{"path":"main.rs"}"#),
//!     Message::tool_result("c1", "fn main() {}"),
//! ];
//! let json: serde_json::Value = serde_json::from_str(&input_messages(&messages)).unwrap();
//! assert_eq!(json[0]["parts"][0]["content"], "Read main.rs");
//! assert_eq!(json[1]["parts"][0]["arguments"]["path"], "main.rs");
//! assert_eq!(json[2]["parts"][0]["type"], "tool_call_response");
//! ```

use ctxkeeper_core::model::{DataSource, Message, Part};
use serde_json::{Value, json};

/// The messages as a `gen_ai.input.messages` JSON array.
pub fn input_messages(messages: &[Message]) -> String {
    let array: Vec<Value> = messages
        .iter()
        .map(|message| {
            let parts: Vec<Value> = message.parts.iter().map(part).collect();
            json!({"role": message.role.as_str(), "parts": parts})
        })
        .collect();
    Value::Array(array).to_string()
}

fn part(part: &Part) -> Value {
    match part {
        Part::Text { text, .. } => json!({"type": "text", "content": text}),
        Part::ToolCall {
            id,
            name,
            arguments,
            ..
        } => {
            // Arguments are the model's JSON text; kept as text when they do not parse.
            let arguments = serde_json::from_str::<Value>(arguments)
                .unwrap_or_else(|_| Value::String(arguments.clone()));
            json!({"type": "tool_call", "id": id, "name": name, "arguments": arguments})
        }
        Part::ToolResult {
            call_id, content, ..
        } => {
            let text: Vec<&str> = content
                .iter()
                .filter_map(|part| match part {
                    Part::Text { text, .. } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            json!({"type": "tool_call_response", "id": call_id, "response": text.join("\n")})
        }
        Part::Reasoning { text, .. } => {
            json!({"type": "reasoning", "content": text.as_deref().unwrap_or("")})
        }
        // Binary data is named, never copied into a span.
        Part::Data { source, .. } => match source {
            DataSource::Url { url } => json!({"type": "uri", "uri": url}),
            DataSource::Base64 { media_type, .. } | DataSource::Archived { media_type, .. } => {
                json!({"type": "blob", "mime_type": media_type})
            }
        },
        Part::Opaque { .. } => json!({"type": "opaque"}),
    }
}
