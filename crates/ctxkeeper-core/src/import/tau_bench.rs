//! tau-bench `historical_trajectories/*.json`.
//!
//! The file is a JSON array of task runs `{task_id, trial, reward, info, traj}`; each `traj` is
//! an OpenAI chat message list, parsed by the chat adapter unchanged. One run is one
//! [`Session`] with the id `task-<task_id>-trial-<trial>` (made unique if a pair repeats).
//! The file names neither the model nor the tools, so both stay empty (the caller supplies a
//! default model). `reward` and `info` describe the evaluation, not the conversation, and are
//! not imported.
//!
//! Tool-call ids repeat across (and within) tasks; they are kept as they are.

use std::collections::HashSet;

use super::{Session, id_text, parse_document, unique_id, wire};
use crate::ParseError;
use crate::json_kind;

/// Imports every task run of a tau-bench trajectory file.
pub(super) fn import(text: &str) -> Result<Vec<Session>, ParseError> {
    let doc = parse_document(text)?;
    let tasks = doc.as_array().ok_or_else(|| {
        ParseError::at(
            "$",
            format!(
                "expected an array of tau-bench tasks, found {}",
                json_kind(&doc)
            ),
        )
    })?;
    let mut seen = HashSet::new();
    let mut sessions = Vec::with_capacity(tasks.len());
    for (index, task) in tasks.iter().enumerate() {
        let path = format!("$[{index}]");
        let task = super::object_at(task, &path, "a task object")?;
        let traj = super::opt_array(task, "traj", &path, "messages")?
            .ok_or_else(|| ParseError::at(&path, "missing `traj`"))?;
        let messages = traj
            .iter()
            .enumerate()
            .map(|(n, message)| wire::chat_message(message, &format!("{path}.traj[{n}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let id = match (id_text(task.get("task_id")), id_text(task.get("trial"))) {
            (Some(task_id), Some(trial)) => format!("task-{task_id}-trial-{trial}"),
            (Some(task_id), None) => format!("task-{task_id}"),
            (None, _) => format!("run-{index}"),
        };
        sessions.push(Session::new(unique_id(&mut seen, id), None, messages));
    }
    Ok(sessions)
}

#[cfg(test)]
mod tests {
    use crate::import::{TraceFormat, import};
    use crate::model::Role;
    use crate::{ParseError, Position};

    fn path_of(err: &ParseError) -> String {
        match &err.position {
            Position::Path { path, .. } => path.clone(),
            other => panic!("expected a path position, got {other}"),
        }
    }

    #[test]
    fn one_session_per_task_with_chat_messages() {
        let text = r#"[
          {"task_id": 3, "trial": 1, "reward": 0.0, "info": {}, "traj": [
            {"role": "system", "content": "policy"},
            {"role": "user", "content": "hi"},
            {"content": null, "role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
              "function": {"name": "get_user", "arguments": "{\"id\":\"u1\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_user", "content": "{}"},
            {"role": "assistant", "content": "done"}
          ]},
          {"task_id": 3, "trial": 1, "traj": []},
          {"traj": [{"role": "user", "content": "x"}]}
        ]"#;
        let trace = import(text, TraceFormat::TauBench).expect("must import");
        let ids: Vec<&str> = trace.sessions.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["task-3-trial-1", "task-3-trial-1#2", "run-2"]);
        let first = &trace.sessions[0];
        assert_eq!(first.model, None);
        assert_eq!(first.messages.len(), 5);
        assert_eq!(first.messages[2].tool_calls().count(), 1);
        assert_eq!(first.messages[3].role, Role::Tool);
        assert_eq!(
            first.messages[3].tool_result_ids().collect::<Vec<_>>(),
            ["call_1"]
        );
        assert!(trace.warnings.is_empty());
    }

    #[test]
    fn reused_call_ids_are_kept() {
        let text = r#"[{"task_id": 0, "trial": 0, "traj": [
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "1"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "2"}
        ]}]"#;
        let trace = import(text, TraceFormat::TauBench).expect("must import");
        let messages = &trace.sessions[0].messages;
        assert_eq!(messages[0].tool_calls().next().map(|c| c.0), Some("c"));
        assert_eq!(messages[2].tool_calls().next().map(|c| c.0), Some("c"));
    }

    #[test]
    fn bad_shapes_are_errors_with_paths() {
        let err = import(r#"{"traj": []}"#, TraceFormat::TauBench).expect_err("must fail");
        assert_eq!(path_of(&err), "$");
        let err = import(r#"[1]"#, TraceFormat::TauBench).expect_err("must fail");
        assert_eq!(path_of(&err), "$[0]");
        let err = import(r#"[{"task_id": 1}]"#, TraceFormat::TauBench).expect_err("must fail");
        assert_eq!(path_of(&err), "$[0]");
        let err = import(r#"[{"traj": {"role": "user"}}]"#, TraceFormat::TauBench)
            .expect_err("must fail");
        assert_eq!(path_of(&err), "$[0].traj");
        let err = import(
            r#"[{"traj": [{"role": "narrator", "content": "x"}]}]"#,
            TraceFormat::TauBench,
        )
        .expect_err("must fail");
        assert!(path_of(&err).starts_with("$[0].traj[0]"), "{err}");
    }

    #[test]
    fn truncated_json_reports_line_and_column() {
        let err = import("[\n {\"task_id\": 1,\n", TraceFormat::TauBench).expect_err("must fail");
        assert!(
            matches!(err.position, Position::LineColumn { line: 3, .. }),
            "{err}"
        );
    }
}
