//! What the mock answers: a deterministic function of the request.
//!
//! - When the request declares tools and `tool_choice` is not "none", the answer is one call
//!   to the first declared tool (or the one `tool_choice` names) with arguments
//!   `{"step": <tool results in the request>}`.
//! - Otherwise it is the text `mock reply <n>`, `n` being the number of messages (input items)
//!   in the request.

use ctxkeeper_core::tokens::Encoding;
use serde_json::{Map, Value};

/// The three APIs the mock serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Chat,
    Responses,
    Anthropic,
}

/// The content of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Text(String),
    ToolCall {
        name: String,
        arguments: String,
    },
    /// Server-side compaction (Responses only): one opaque `compaction` item.
    Compaction {
        encrypted_content: String,
    },
}

/// An accepted request's answer and what it costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    pub answer: Answer,
    /// Makes this answer's ids unique (`call_<n>`, `toolu_<n>`, `msg_mock<n>`, …).
    pub number: u64,
    pub model: String,
    pub usage: Usage,
    /// Unix seconds, for `created` / `created_at`.
    pub created: u64,
}

/// Token usage, in the neutral form every wire format is written from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// All input tokens, cached ones included.
    pub input: u64,
    /// The part of `input` served by the (simulated) prompt cache.
    pub cached: u64,
    pub output: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input + self.output
    }
}

impl Reply {
    /// The tool call id in the API's style.
    pub fn call_id(&self, api: Api) -> String {
        match api {
            Api::Anthropic => format!("toolu_{}", self.number),
            Api::Chat | Api::Responses => format!("call_{}", self.number),
        }
    }
}

/// The opening of a gateway's summary instruction: a model asked this answers with the
/// summary object whatever tools the request declares.
const SUMMARY_REQUEST: &str = "[ctxkeeper summary request]";

/// Decides the answer to an accepted request body.
pub(crate) fn answer(api: Api, body: &Map<String, Value>) -> Answer {
    if let Some(summary) = summary_answer(api, body).or_else(|| client_summary(api, body)) {
        return Answer::Text(summary);
    }
    if let Some(name) = chosen_tool(api, body) {
        let step = tool_results(api, body);
        return Answer::ToolCall {
            name,
            arguments: format!("{{\"step\":{step}}}"),
        };
    }
    Answer::Text(format!("mock reply {}", conversation_length(api, body)))
}

/// The output tokens of an answer (o200k, like every mock count of our own text).
pub(crate) fn output_tokens(answer: &Answer) -> u64 {
    let tokens = match answer {
        Answer::Text(text) => Encoding::O200kBase.count(text),
        // What a server-side compaction writes is opaque; its size is the summary's.
        Answer::Compaction { encrypted_content } => Encoding::O200kBase.count(encrypted_content),
        // Name + arguments + the framing a real model emits around a call.
        Answer::ToolCall { name, arguments } => {
            Encoding::O200kBase.count(name) + Encoding::O200kBase.count(arguments) + 3
        }
    };
    u64::from(tokens)
}

/// The tool to call, if the request allows calling one.
fn chosen_tool(api: Api, body: &Map<String, Value>) -> Option<String> {
    let choice = body.get("tool_choice");
    let choice_type =
        choice.and_then(|c| c.as_str().or_else(|| c.get("type").and_then(Value::as_str)));
    if choice_type == Some("none") {
        return None;
    }
    // A choice that names one tool: Chat `{"type":"function","function":{"name"}}`, Responses
    // `{"type":"function","name"}`, Anthropic `{"type":"tool","name"}`.
    let named = choice.and_then(|c| {
        c.get("name")
            .or_else(|| c.get("function").and_then(|f| f.get("name")))
            .and_then(Value::as_str)
    });
    if let Some(name) = named {
        return Some(name.to_owned());
    }
    let tools = body.get("tools").and_then(Value::as_array)?;
    tools.iter().find_map(|tool| {
        let name = match api {
            Api::Chat => tool.get("function").and_then(|f| f.get("name")),
            // Built-in tools (web_search, file_search, …) cannot be called by the client.
            Api::Responses => tool
                .get("name")
                .filter(|_| tool.get("type").and_then(Value::as_str) == Some("function")),
            Api::Anthropic => tool.get("name"),
        };
        name.and_then(Value::as_str).map(str::to_owned)
    })
}

/// The answer to an agent's own compaction prompt in the request's last user turn (Codex
/// CLI's "CONTEXT CHECKPOINT COMPACTION", Claude Code's compact): a text summary, as a model
/// following the prompt writes, never a tool call or a script step.
pub(crate) fn client_summary(api: Api, body: &Map<String, Value>) -> Option<String> {
    let text = last_text(api, body)?;
    ctxkeeper_core::harness::is_client_compaction_prompt(&text).then(|| {
        format!(
            "Mock checkpoint summary of the {} messages above: the commands given so far ran; run the next one.",
            conversation_length(api, body)
        )
    })
}

/// The text of the request's last input item or message.
fn last_text(api: Api, body: &Map<String, Value>) -> Option<String> {
    let field = if api == Api::Responses {
        "input"
    } else {
        "messages"
    };
    let last = items(body, field).last()?;
    match &last["content"] {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// The answer to a summary instruction in the request's last user turn: a JSON object with
/// the keys it names (`Its keys are exactly "a", "b" and "c"`), each saying what it covered.
pub(crate) fn summary_answer(api: Api, body: &Map<String, Value>) -> Option<String> {
    let text = last_text(api, body)?;
    let at = text.find(SUMMARY_REQUEST)?;
    let instruction = &text[at..];
    let keys_at = instruction.find("Its keys are exactly ")?;
    let list = &instruction[keys_at..];
    let list = &list[..list.find(';').unwrap_or(list.len())];
    let keys: Vec<&str> = list.split('"').skip(1).step_by(2).collect();
    let messages = conversation_length(api, body);
    let object: Map<String, Value> = keys
        .iter()
        .map(|key| {
            (
                (*key).to_owned(),
                Value::String(format!(
                    "mock summary of the {messages} messages above ({key})"
                )),
            )
        })
        .collect();
    Some(Value::Object(object).to_string())
}

/// How many tool results the request carries.
fn tool_results(api: Api, body: &Map<String, Value>) -> usize {
    match api {
        Api::Chat => items(body, "messages")
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
            .count(),
        Api::Responses => items(body, "input")
            .filter(|i| i.get("type").and_then(Value::as_str) == Some("function_call_output"))
            .count(),
        Api::Anthropic => items(body, "messages")
            .filter_map(|m| m.get("content").and_then(Value::as_array))
            .flatten()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .count(),
    }
}

/// How many messages (input items) the request carries.
fn conversation_length(api: Api, body: &Map<String, Value>) -> usize {
    match api {
        Api::Chat | Api::Anthropic => items(body, "messages").count(),
        Api::Responses => match body.get("input") {
            Some(Value::String(_)) => 1,
            _ => items(body, "input").count(),
        },
    }
}

fn items<'a>(body: &'a Map<String, Value>, field: &str) -> impl Iterator<Item = &'a Value> {
    body.get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Splits a text into the pieces a model would stream: words with their leading space.
pub(crate) fn text_pieces(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for (at, c) in text.char_indices() {
        if c == ' ' && at > start {
            pieces.push(&text[start..at]);
            start = at;
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// Splits tool-call arguments into short fragments, like a model streams them (never inside a
/// UTF-8 character).
pub(crate) fn argument_pieces(arguments: &str) -> Vec<&str> {
    const PIECE: usize = 4;
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < arguments.len() {
        let mut end = (start + PIECE).min(arguments.len());
        while !arguments.is_char_boundary(end) {
            end += 1;
        }
        pieces.push(&arguments[start..end]);
        start = end;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn text_counts_messages() {
        let body = object(
            json!({"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]}),
        );
        assert_eq!(
            answer(Api::Chat, &body),
            Answer::Text("mock reply 3".into())
        );
        let body = object(json!({"input": "hello"}));
        assert_eq!(
            answer(Api::Responses, &body),
            Answer::Text("mock reply 1".into())
        );
    }

    #[test]
    fn calls_the_first_tool_with_the_step() {
        let body = object(json!({
            "tools": [{"type": "function", "function": {"name": "read"}}, {"type": "function", "function": {"name": "b"}}],
            "messages": [{"role": "user"}, {"role": "assistant"}, {"role": "tool"}, {"role": "tool"}]}));
        assert_eq!(
            answer(Api::Chat, &body),
            Answer::ToolCall {
                name: "read".into(),
                arguments: r#"{"step":2}"#.into()
            }
        );
    }

    #[test]
    fn tool_choice_none_or_named_is_obeyed() {
        let tools = json!([{"name": "a", "input_schema": {}}, {"name": "b", "input_schema": {}}]);
        let none =
            object(json!({"tools": tools, "tool_choice": {"type": "none"}, "messages": [{}]}));
        assert_eq!(
            answer(Api::Anthropic, &none),
            Answer::Text("mock reply 1".into())
        );
        let named = object(
            json!({"tools": tools, "tool_choice": {"type": "tool", "name": "b"}, "messages": [
            {"role": "user", "content": [{"type": "tool_result"}, {"type": "tool_result"}, {"type": "text"}]}]}),
        );
        assert_eq!(
            answer(Api::Anthropic, &named),
            Answer::ToolCall {
                name: "b".into(),
                arguments: r#"{"step":2}"#.into()
            }
        );
    }

    #[test]
    fn responses_skips_built_in_tools() {
        let body = object(
            json!({"tools": [{"type": "web_search"}, {"type": "function", "name": "f"}], "input": "x"}),
        );
        assert!(
            matches!(answer(Api::Responses, &body), Answer::ToolCall { name, .. } if name == "f")
        );
    }

    #[test]
    fn pieces_rejoin_to_the_whole() {
        assert_eq!(text_pieces("mock reply 12"), ["mock", " reply", " 12"]);
        let arguments = r#"{"step":12,"é":"ü"}"#;
        let pieces = argument_pieces(arguments);
        assert!(pieces.len() > 3);
        assert_eq!(pieces.concat(), arguments);
    }
}
