//! SWE-agent `.traj` files.
//!
//! A `.traj` is one JSON object; its `history` is the message list the model saw, in OpenAI
//! chat shape, and becomes one [`Session`]. Two variants exist and both parse through the chat
//! adapter:
//!
//! - **plain**: no native tool calls; the agent's command is text in the assistant message and
//!   its observation arrives as the next *user* message. The messages stay as they are: the
//!   model really saw observations as user turns. The demonstration prepended to the prompt is
//!   a user message marked `is_demo` and is kept too, for the same reason.
//! - **function calling**: assistant `tool_calls` and role `tool` results. SWE-agent writes the
//!   answered ids as a list, `tool_call_ids`; each id becomes one tool result (a list of one,
//!   the usual case, gives exactly the chat message it stands for).
//!
//! SWE-agent's own fields on a message (`agent`, `thought`, `action`, `message_type`,
//! `is_demo`, …) are kept in [`Message::extra`](crate::model::Message::extra), with the origin
//! hint `swe-agent`. The model is `replay_config.agent.model.name` when it names a real model
//! (not one of SWE-agent's pseudo-models such as `replay`); the session id is the problem
//! statement id when the file has one. `trajectory` (per-step copies of the same exchange) and
//! `info` (the submission) are not conversation and are not imported; a file without `history`
//! is rebuilt from `trajectory` steps, with a counted warning.

use serde_json::{Map, Value};

use super::{Session, Warnings, id_text, parse_document, wire};
use crate::ParseError;
use crate::json_kind;
use crate::model::{Message, Part, Role};

/// The origin hint of messages from this importer.
const ORIGIN: &str = "swe-agent";

/// SWE-agent model names that do not name a language model.
const PSEUDO_MODELS: [&str; 4] = ["replay", "human", "human_thought", "instant_empty_submit"];

/// Imports a `.traj` file as one session.
pub(super) fn import(text: &str, warnings: &mut Warnings) -> Result<Vec<Session>, ParseError> {
    let doc = parse_document(text)?;
    let traj = super::object_at(&doc, "$", "a SWE-agent trajectory object")?;
    let replay_config = replay_config(traj);
    let messages = match super::opt_array(traj, "history", "$", "messages")? {
        Some(history) => history
            .iter()
            .enumerate()
            .map(|(index, message)| history_message(message, &format!("$.history[{index}]")))
            .collect::<Result<Vec<_>, _>>()?,
        None => {
            warnings.add("swe-agent: no history, rebuilt from trajectory");
            from_trajectory(traj)?
        }
    };
    let model = replay_config
        .as_ref()
        .and_then(|config| config.pointer("/agent/model/name"))
        .and_then(Value::as_str)
        .filter(|name| !PSEUDO_MODELS.contains(name))
        .map(str::to_string);
    let id = replay_config
        .as_ref()
        .and_then(|config| id_text(config.pointer("/problem_statement/id")))
        .unwrap_or_else(|| "0".to_string());
    Ok(vec![Session::new(id, model, messages)])
}

/// `replay_config`, which newer files store as an object and older ones as a JSON string.
fn replay_config(traj: &Map<String, Value>) -> Option<Value> {
    match traj.get("replay_config")? {
        Value::String(text) => serde_json::from_str(text).ok(),
        value @ Value::Object(_) => Some(value.clone()),
        _ => None,
    }
}

/// One `history` entry as the message it stands for.
fn history_message(value: &Value, path: &str) -> Result<Message, ParseError> {
    let map = super::object_at(value, path, "a message object")?;
    let ids = match map.get("tool_call_ids") {
        None | Some(Value::Null) => None,
        Some(Value::Array(ids)) => Some(
            ids.iter()
                .enumerate()
                .map(|(n, id)| {
                    id.as_str().map(str::to_string).ok_or_else(|| {
                        ParseError::at(
                            format!("{path}.tool_call_ids[{n}]"),
                            format!("expected a string, found {}", json_kind(id)),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(other) => {
            return Err(ParseError::at(
                format!("{path}.tool_call_ids"),
                format!("expected an array of ids, found {}", json_kind(other)),
            ));
        }
    };
    let mut message = match ids {
        // A tool message answering a list of calls: rewrite it into the chat shape, which
        // answers one call, and add a result per further id.
        Some(ids) if !ids.is_empty() && !map.contains_key("tool_call_id") => {
            let mut chat = map.clone();
            chat.remove("tool_call_ids");
            chat.insert("tool_call_id".to_string(), Value::String(ids[0].clone()));
            let mut message = wire::chat_message(&Value::Object(chat), path)?;
            let content = tool_result_content(&message);
            for id in &ids[1..] {
                message.parts.push(Part::ToolResult {
                    call_id: id.clone(),
                    content: content.clone(),
                    is_error: false,
                    extra: Map::new(),
                });
            }
            message
        }
        _ => wire::chat_message(value, path)?,
    };
    message.hints.origin = Some(ORIGIN.to_string());
    Ok(message)
}

/// The content of the first tool result of `message`.
fn tool_result_content(message: &Message) -> Vec<Part> {
    message
        .parts
        .iter()
        .find_map(|part| match part {
            Part::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Rebuilds a plain conversation from `trajectory` steps (`response`, `observation`) when a
/// file has no `history`.
fn from_trajectory(traj: &Map<String, Value>) -> Result<Vec<Message>, ParseError> {
    let steps = super::opt_array(traj, "trajectory", "$", "steps")?
        .ok_or_else(|| ParseError::at("$", "missing `history` and `trajectory`"))?;
    let mut messages = Vec::with_capacity(steps.len() * 2);
    for (index, step) in steps.iter().enumerate() {
        let path = format!("$.trajectory[{index}]");
        let step = super::object_at(step, &path, "a step object")?;
        let response = super::opt_str(step, "response", &path)?;
        let action = super::opt_str(step, "action", &path)?;
        let observation = super::opt_str(step, "observation", &path)?;
        if let Some(text) = response.or(action) {
            let mut message = Message::new(Role::Assistant, vec![Part::text(text)]);
            for key in ["thought", "action"] {
                if let Some(value) = step.get(key) {
                    message.extra.insert(key.to_string(), value.clone());
                }
            }
            message.hints.origin = Some(ORIGIN.to_string());
            messages.push(message);
        }
        if let Some(text) = observation {
            let mut message = Message::user(text);
            message.hints.origin = Some(ORIGIN.to_string());
            messages.push(message);
        }
    }
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::import::{TraceFormat, import};
    use crate::model::Role;

    #[test]
    fn plain_history_keeps_observations_as_user_messages() {
        let text = json!({
            "environment": "swe_main",
            "trajectory": [],
            "history": [
                {"role": "system", "content": "SETTING", "agent": "primary"},
                {"role": "user", "content": "demo", "agent": "primary", "is_demo": true},
                {"role": "user", "content": "issue", "agent": "primary"},
                {"role": "assistant", "content": "I'll look\n```\nls\n```", "thought": "I'll look",
                 "action": "ls\n", "agent": "primary"},
                {"role": "user", "content": "a.py", "agent": "primary"}
            ],
            "info": {"exit_status": "submitted"}
        })
        .to_string();
        let trace = import(&text, TraceFormat::SweAgent).expect("imports");
        assert_eq!(trace.sessions.len(), 1);
        let session = &trace.sessions[0];
        assert_eq!(session.id, "0");
        assert_eq!(session.model, None);
        let roles: Vec<Role> = session.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::User,
                Role::Assistant,
                Role::User
            ]
        );
        assert_eq!(session.messages[1].extra.get("is_demo"), Some(&json!(true)));
        assert_eq!(
            session.messages[3].extra.get("action"),
            Some(&json!("ls\n"))
        );
        assert_eq!(
            session.messages[3].extra.get("thought"),
            Some(&json!("I'll look"))
        );
        assert_eq!(
            session.messages[3].hints.origin.as_deref(),
            Some("swe-agent")
        );
        assert!(trace.warnings.is_empty());
    }

    #[test]
    fn function_calling_history_answers_each_listed_id() {
        let text = json!({
            "history": [
                {"role": "system", "content": "SETTING", "agent": "main", "message_type": "system_prompt"},
                {"role": "assistant", "content": "two things", "agent": "main", "message_type": "action",
                 "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
                    {"id": "call_b", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"pwd\"}"}}
                 ]},
                {"role": "tool", "content": "out", "agent": "main", "message_type": "observation",
                 "tool_call_ids": ["call_a", "call_b"]},
                {"role": "assistant", "content": "one", "tool_calls": [
                    {"id": "call_c", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]},
                {"role": "tool", "content": "done", "tool_call_ids": ["call_c"]}
            ],
            "replay_config": {"agent": {"model": {"name": "gpt-4o"}},
                              "problem_statement": {"id": "marshmallow-1867"}},
            "info": {}
        })
        .to_string();
        let trace = import(&text, TraceFormat::SweAgent).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.id, "marshmallow-1867");
        assert_eq!(session.model.as_deref(), Some("gpt-4o"));
        assert_eq!(session.messages[1].tool_calls().count(), 2);
        let ids: Vec<&str> = session.messages[2].tool_result_ids().collect();
        assert_eq!(ids, ["call_a", "call_b"]);
        assert!(session.messages[2].extra.get("tool_call_ids").is_none());
        assert_eq!(
            session.messages[2].extra.get("message_type"),
            Some(&json!("observation"))
        );
        assert_eq!(
            session.messages[4].tool_result_ids().collect::<Vec<_>>(),
            ["call_c"]
        );
        assert_eq!(session.messages[4].text(), "done");
    }

    #[test]
    fn pseudo_models_and_string_configs() {
        let config = json!({"agent": {"model": {"name": "replay"}}}).to_string();
        let text = json!({"history": [], "info": {}, "replay_config": config}).to_string();
        let trace = import(&text, TraceFormat::SweAgent).expect("imports");
        assert_eq!(trace.sessions[0].model, None);
        let config = json!({"agent": {"model": {"name": "claude-3-5-sonnet"}}}).to_string();
        let text = json!({"history": [], "info": {}, "replay_config": config}).to_string();
        let trace = import(&text, TraceFormat::SweAgent).expect("imports");
        assert_eq!(
            trace.sessions[0].model.as_deref(),
            Some("claude-3-5-sonnet")
        );
    }

    #[test]
    fn missing_history_is_rebuilt_from_trajectory() {
        let text = json!({"trajectory": [
            {"response": "let me look", "thought": "look", "action": "ls", "observation": "a.py"},
            {"response": "submit", "action": "submit", "observation": null}
        ]})
        .to_string();
        let trace = import(&text, TraceFormat::SweAgent).expect("imports");
        let roles: Vec<Role> = trace.sessions[0].messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::Assistant, Role::User, Role::Assistant]);
        assert_eq!(
            trace
                .warnings
                .get("swe-agent: no history, rebuilt from trajectory"),
            Some(&1)
        );
    }

    #[test]
    fn malformed_files_are_errors() {
        for text in [
            "[]",
            r#"{"history": {}}"#,
            r#"{"history": [1]}"#,
            r#"{"history": [{"role": "tool", "content": "x", "tool_call_ids": "a"}]}"#,
            r#"{"history": [{"role": "tool", "content": "x", "tool_call_ids": [1]}]}"#,
            r#"{"history": [{"role": "wizard", "content": "x"}]}"#,
            r#"{"info": {}}"#,
            r#"{"trajectory": [{"response": 3}]}"#,
        ] {
            assert!(import(text, TraceFormat::SweAgent).is_err(), "{text}");
        }
    }
}
