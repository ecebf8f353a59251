//! mini-swe-agent trajectories (`*.traj.json`).
//!
//! One JSON object: `messages` (the conversation, OpenAI chat messages), `info` (cost, exit
//! status, submission, the run's configuration) and `trajectory_format`. The versions
//! documented by mini-swe-agent, all read here:
//!
//! - **`mini-swe-agent-1`** (mini-swe-agent 1.x): `{role, content}` messages only. The
//!   command is a ```` ```bash ```` block in the assistant's text and its output comes back as
//!   the next *user* message (`Observation: …`), as the model saw it.
//! - **`mini-swe-agent-1.1`** (2.x): every message carries an `extra` object (the parsed
//!   actions, the raw response, cost, timestamps) and the run ends with a message of role
//!   `exit` (`extra.exit_status`, `extra.submission`). With a text-based model the command is
//!   a ```` ```mswea_bash_command ```` block and observations are user messages; with a
//!   tool-calling model (the 2.x default) the assistant calls the `bash` tool and observations
//!   are role `tool` messages.
//!
//! Files without `trajectory_format` that have the same shape (an `info.mini_version`) are read
//! the same way. The messages parse through the chat adapter; fields the chat format does not
//! know (`extra`, litellm's `provider_specific_fields`, …) stay in [`Message::extra`] and the
//! messages carry the origin hint `mini-swe-agent`, so they are not sent to a provider. The
//! `exit` message is not conversation: it is skipped and counted. The model is
//! `info.config.model.model_name` without litellm's provider prefix (`openai/gpt-4o` →
//! `gpt-4o`); the session id is `info.instance_id` when there is one, else `"0"`.
//!
//! ```
//! use ctxkeeper_core::import::{detect, import, TraceFormat};
//!
//! let text = r#"{"trajectory_format": "mini-swe-agent-1.1",
//!   "info": {"exit_status": "Submitted", "config": {"model": {"model_name": "openai/gpt-4o"}}},
//!   "messages": [
//!     {"role": "system", "content": "You are a helpful assistant."},
//!     {"role": "user", "content": "Fix the bug."},
//!     {"role": "assistant", "content": "Done.", "tool_calls": [{"id": "call_1", "type": "function",
//!       "function": {"name": "bash", "arguments": "{\"command\": \"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\"}"}}]},
//!     {"role": "tool", "tool_call_id": "call_1", "content": "ok", "extra": {"returncode": 0}},
//!     {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}}
//!   ]}"#;
//! assert_eq!(detect(text, "run.traj.json"), Some(TraceFormat::MiniSweAgent));
//! let trace = import(text, TraceFormat::MiniSweAgent).unwrap();
//! assert_eq!(trace.sessions[0].model.as_deref(), Some("gpt-4o"));
//! assert_eq!(trace.sessions[0].messages.len(), 4);
//! ```

use serde_json::Value;

use super::{Session, Warnings, id_text, parse_document, wire};
use crate::ParseError;
use crate::json_kind;

/// The origin hint of messages from this importer.
const ORIGIN: &str = "mini-swe-agent";

/// The role of the message that records how the run ended.
const EXIT_ROLE: &str = "exit";

/// Imports a trajectory as one session.
pub(super) fn import(text: &str, warnings: &mut Warnings) -> Result<Vec<Session>, ParseError> {
    let doc = parse_document(text)?;
    let traj = super::object_at(&doc, "$", "a mini-swe-agent trajectory object")?;
    match traj.get("trajectory_format") {
        None | Some(Value::String(_)) => {}
        Some(other) => {
            return Err(ParseError::at(
                "$.trajectory_format",
                format!("expected a string, found {}", json_kind(other)),
            ));
        }
    }
    let items = super::opt_array(traj, "messages", "$", "messages")?
        .ok_or_else(|| ParseError::at("$.messages", "missing required field"))?;
    let mut messages = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        if item.get("role").and_then(Value::as_str) == Some(EXIT_ROLE) {
            warnings.add(
                "mini-swe-agent: skipped the exit message (how the run ended; not sent to the model)",
            );
            continue;
        }
        let mut message = wire::chat_message(item, &format!("$.messages[{index}]"))?;
        message.hints.origin = Some(ORIGIN.to_string());
        messages.push(message);
    }
    let info = traj.get("info");
    let model = info
        .and_then(|info| info.pointer("/config/model/model_name"))
        .and_then(Value::as_str)
        .map(|name| name.rsplit('/').next().unwrap_or(name).to_string())
        .filter(|name| !name.is_empty());
    let id = info
        .and_then(|info| id_text(info.get("instance_id")))
        .unwrap_or_else(|| "0".to_string());
    Ok(vec![Session::new(id, model, messages)])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::import::{TraceFormat, detect, import};
    use crate::model::Role;

    /// A 1.x trajectory (`mini-swe-agent-1`): text actions, observations as user messages.
    fn v1() -> String {
        json!({
            "info": {"exit_status": "Submitted", "submission": "diff", "mini_version": "1.9.0",
                     "model_stats": {"instance_cost": 0.01, "api_calls": 2},
                     "config": {"model": {"model_name": "anthropic/claude-sonnet-4-20250514"}}},
            "messages": [
                {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
                {"role": "user", "content": "Please solve this issue: add a flag"},
                {"role": "assistant", "content": "THOUGHT: look first.\n\n```bash\nls\n```"},
                {"role": "user", "content": "<returncode>0</returncode>\n<output>\nsetup.py\n</output>"},
                {"role": "assistant", "content": "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
                {"role": "user", "content": "diff"}
            ],
            "trajectory_format": "mini-swe-agent-1"
        })
        .to_string()
    }

    #[test]
    fn version_1_text_actions_stay_as_the_model_saw_them() {
        let text = v1();
        assert_eq!(
            detect(&text, "x.traj.json"),
            Some(TraceFormat::MiniSweAgent)
        );
        let trace = import(&text, TraceFormat::MiniSweAgent).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.model.as_deref(), Some("claude-sonnet-4-20250514"));
        let roles: Vec<Role> = session.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::User,
                Role::Assistant,
                Role::User
            ]
        );
        assert!(session.messages[2].text().contains("```bash\nls\n```"));
        assert!(trace.warnings.is_empty());
    }

    #[test]
    fn version_1_1_text_based_skips_the_exit_message() {
        let text = json!({
            "trajectory_format": "mini-swe-agent-1.1",
            "info": {"exit_status": "LimitsExceeded", "instance_id": "django__django-11099"},
            "messages": [
                {"role": "system", "content": "sys", "extra": {}},
                {"role": "user", "content": "task", "extra": {}},
                {"role": "assistant", "content": "```mswea_bash_command\nls\n```",
                 "extra": {"actions": [{"command": "ls"}], "cost": 0.001}},
                {"role": "user", "content": "<returncode>0</returncode>", "extra": {"returncode": 0}},
                {"role": "exit", "content": "", "extra": {"exit_status": "LimitsExceeded", "submission": ""}}
            ]
        })
        .to_string();
        let trace = import(&text, TraceFormat::MiniSweAgent).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.id, "django__django-11099");
        assert_eq!(session.model, None);
        assert_eq!(session.messages.len(), 4);
        assert_eq!(
            session.messages[2].extra.get("extra"),
            Some(&json!({"actions": [{"command": "ls"}], "cost": 0.001})),
            "mini-swe-agent's own fields ride along"
        );
        assert_eq!(
            session.messages[2].hints.origin.as_deref(),
            Some("mini-swe-agent")
        );
        assert_eq!(trace.warnings.values().sum::<usize>(), 1);
        assert!(
            trace
                .warnings
                .keys()
                .all(|k| k.contains("exit message") && k.contains("not sent to the model"))
        );
    }

    /// The trajectory mini-swe-agent 2.4.6 wrote for a real headless run (tool calls).
    #[test]
    fn a_real_tool_calling_trajectory_imports() {
        let text =
            include_str!("../../../../tests/python/fixtures/agents/mini-swe-agent-2.4.6.traj.json");
        assert_eq!(
            detect(text, "last_mini_run.traj.json"),
            Some(TraceFormat::MiniSweAgent)
        );
        let trace = import(text, TraceFormat::MiniSweAgent).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.model.as_deref(), Some("gpt-4o"));
        assert_eq!(
            session.messages.len(),
            8,
            "system, task, 3 calls, 3 results"
        );
        let calls: Vec<(&str, &str, &str)> = session
            .messages
            .iter()
            .flat_map(|m| m.tool_calls())
            .collect();
        assert_eq!(calls.len(), 3);
        assert!(calls.iter().all(|(_, name, _)| *name == "bash"));
        let results: Vec<&str> = session
            .messages
            .iter()
            .flat_map(|m| m.tool_result_ids())
            .collect();
        assert_eq!(
            results,
            calls.iter().map(|(id, _, _)| *id).collect::<Vec<_>>()
        );
    }

    #[test]
    fn bad_input_names_its_position() {
        for (text, expect) in [
            (
                r#"{"trajectory_format": "mini-swe-agent-1", "messages": 3}"#,
                "$.messages",
            ),
            (
                r#"{"trajectory_format": 1, "messages": []}"#,
                "$.trajectory_format",
            ),
            (r#"{"trajectory_format": "mini-swe-agent-1"}"#, "$.messages"),
            (
                r#"{"trajectory_format": "mini-swe-agent-1", "messages": [{"role": "narrator", "content": "x"}]}"#,
                "$.messages[0].role",
            ),
            (r#"[1]"#, "$"),
        ] {
            let err = import(text, TraceFormat::MiniSweAgent).expect_err(text);
            assert!(err.to_string().contains(expect), "{text}: {err}");
        }
    }
}
