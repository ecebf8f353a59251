//! Claude Code session logs (`~/.claude/projects/<project>/<session>.jsonl`).
//!
//! One entry per line. `user` and `assistant` entries hold an Anthropic message in `message`,
//! parsed by the Anthropic adapter; the whole file is one [`Session`] with the id of the first
//! `sessionId` (else `"0"`) and the model of the first assistant message (Claude Code's
//! `<synthetic>` placeholder for locally made messages does not count). The rules:
//!
//! - **One API response, one message.** Claude Code writes each content block of a streamed
//!   response as its own entry, all with the same `message.id`. Consecutive assistant entries
//!   with the same id are merged into one assistant message, so the `tool_use` blocks of one
//!   response form one message, as the API returned them.
//! - **Results of one round, one message.** Consecutive user entries that hold only
//!   `tool_result` blocks are merged, as Claude Code sends them in one user message.
//! - **No duplicated content.** `toolUseResult` repeats the tool result in a tool-specific shape
//!   and is not imported; the `tool_result` block is the content the model saw.
//! - **What the model did not see is skipped and counted**: `summary` entries (titles the UI
//!   shows for a branch), `system` entries (hook and status notices), sidechain entries
//!   (`isSidechain`: a sub-agent's own conversation) and entry kinds this importer does not
//!   know (`file-history-snapshot`, …), under keys such as `"claude-code: skipped summary"`.
//! - **Envelope fields ride along.** `uuid`, `parentUuid`, `timestamp`, `requestId`, `isMeta`
//!   and any other entry field are kept in [`Message::extra`] (for a merged message, those of
//!   its first entry), except the per-session constants (`sessionId`, `cwd`, `version`,
//!   `gitBranch`, `userType`) and `toolUseResult`; messages carry the origin hint
//!   `claude-code`.
//!
//! Entries are read in file order; `parentUuid` links are kept but not followed.

use serde_json::Value;

use super::{Session, Warnings, json_lines, kind_of, line_object, opt_str, wire};
use crate::ParseError;
use crate::model::{Message, Role};

/// The origin hint of messages from this importer.
const ORIGIN: &str = "claude-code";

/// Entry fields not copied into `extra`: the message itself, the duplicated tool result, and
/// values that are the same on every line of a session.
const NOT_COPIED: [&str; 9] = [
    "type",
    "message",
    "toolUseResult",
    "sessionId",
    "cwd",
    "version",
    "gitBranch",
    "userType",
    "isSidechain",
];

/// The model name Claude Code gives messages it makes itself (API errors, interruptions).
const SYNTHETIC_MODEL: &str = "<synthetic>";

/// Imports a Claude Code session log as one session.
pub(super) fn import(text: &str, warnings: &mut Warnings) -> Result<Vec<Session>, ParseError> {
    let mut messages: Vec<Message> = Vec::new();
    let mut session_id: Option<String> = None;
    let mut model: Option<String> = None;
    // The API message id of the last message while it is an assistant message that a following
    // entry of the same response may extend.
    let mut open_response: Option<String> = None;
    for (line_no, entry) in json_lines(text) {
        let entry = line_object(entry?, line_no)?;
        let at_line = |err: ParseError| err.on_line(line_no);
        let Some(kind) = opt_str(&entry, "type", "$").map_err(at_line)? else {
            warnings.add("claude-code: skipped entry without type");
            continue;
        };
        if entry.get("isSidechain") == Some(&Value::Bool(true)) {
            warnings.add("claude-code: skipped sidechain entry");
            continue;
        }
        if kind != "user" && kind != "assistant" {
            warnings.add(format!("claude-code: skipped {kind}"));
            continue;
        }
        if session_id.is_none() {
            session_id = opt_str(&entry, "sessionId", "$")
                .map_err(at_line)?
                .map(str::to_string);
        }
        let raw = match entry.get("message") {
            Some(raw @ Value::Object(_)) => raw,
            Some(other) => {
                return Err(at_line(ParseError::at(
                    "$.message",
                    format!("expected a message object, found {}", kind_of(other)),
                )));
            }
            None => return Err(at_line(ParseError::at("$", "missing `message`"))),
        };
        let mut message = wire::anthropic_message(raw, "$.message").map_err(at_line)?;
        let response_id = raw.get("id").and_then(Value::as_str);
        if message.role == Role::Assistant {
            if model.is_none() {
                model = raw
                    .get("model")
                    .and_then(Value::as_str)
                    .filter(|name| *name != SYNTHETIC_MODEL)
                    .map(str::to_string);
            }
            if response_id.is_some()
                && open_response.as_deref() == response_id
                && let Some(last) = messages.last_mut()
            {
                last.parts.append(&mut message.parts);
                continue;
            }
            open_response = response_id.map(str::to_string);
        } else {
            open_response = None;
            if message.role == Role::User
                && message.is_only_tool_results()
                && let Some(last) = messages.last_mut()
                && last.role == Role::User
                && last.is_only_tool_results()
            {
                last.parts.append(&mut message.parts);
                continue;
            }
        }
        for (key, value) in &entry {
            if !NOT_COPIED.contains(&key.as_str()) {
                message
                    .extra
                    .entry(key.clone())
                    .or_insert_with(|| value.clone());
            }
        }
        message.hints.origin = Some(ORIGIN.to_string());
        messages.push(message);
    }
    let id = session_id.unwrap_or_else(|| "0".to_string());
    Ok(vec![Session {
        id,
        model,
        messages,
        tools: Vec::new(),
    }])
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::import::{TraceFormat, import};
    use crate::model::{Part, Role};

    fn lines(entries: &[Value]) -> String {
        entries
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn assistant(uuid: &str, id: &str, block: Value) -> Value {
        json!({"parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/w",
               "sessionId": "s-1", "version": "1.0.51", "type": "assistant", "uuid": uuid,
               "requestId": "req_1", "timestamp": "t",
               "message": {"id": id, "type": "message", "role": "assistant",
                           "model": "claude-sonnet-4-20250514", "content": [block],
                           "stop_reason": null, "usage": {"input_tokens": 4, "output_tokens": 5}}})
    }

    fn user(uuid: &str, content: Value) -> Value {
        json!({"parentUuid": "p", "isSidechain": false, "sessionId": "s-1", "type": "user",
               "uuid": uuid, "timestamp": "t", "message": {"role": "user", "content": content}})
    }

    #[test]
    fn split_responses_merge_and_duplicates_are_dropped() {
        let mut result = user(
            "u3",
            json!([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "diff --git"}]),
        );
        result["toolUseResult"] = json!({"stdout": "diff --git", "stderr": ""});
        let text = lines(&[
            json!({"type": "summary", "summary": "A title", "leafUuid": "x"}),
            user("u1", json!("Explain the diff")),
            assistant(
                "a1",
                "msg_1",
                json!({"type": "thinking", "thinking": "hm", "signature": "sig"}),
            ),
            assistant("a2", "msg_1", json!({"type": "text", "text": "I'll look."})),
            json!({"type": "system", "content": "Running hook", "level": "info", "uuid": "s1",
                   "sessionId": "s-1"}),
            assistant(
                "a3",
                "msg_1",
                json!({"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                            "input": {"command": "git diff"}}),
            ),
            result,
            assistant(
                "a4",
                "msg_2",
                json!({"type": "text", "text": "It adds a link."}),
            ),
        ]);
        let trace = import(&text, TraceFormat::ClaudeCode).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.id, "s-1");
        assert_eq!(session.model.as_deref(), Some("claude-sonnet-4-20250514"));
        let roles: Vec<Role> = session.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::User, Role::Assistant, Role::User, Role::Assistant]
        );
        let response = &session.messages[1];
        assert_eq!(response.parts.len(), 3);
        assert!(
            matches!(&response.parts[0], Part::Reasoning { signature: Some(s), .. } if s == "sig")
        );
        assert_eq!(response.tool_calls().count(), 1);
        assert_eq!(response.extra.get("uuid"), Some(&json!("a1")));
        assert_eq!(response.hints.origin.as_deref(), Some("claude-code"));
        let answer = &session.messages[2];
        assert_eq!(answer.tool_result_ids().collect::<Vec<_>>(), ["toolu_1"]);
        assert_eq!(answer.text(), "diff --git", "the result is not duplicated");
        assert!(answer.extra.get("toolUseResult").is_none());
        assert!(answer.extra.get("sessionId").is_none());
        assert_eq!(trace.warnings.get("claude-code: skipped summary"), Some(&1));
        assert_eq!(trace.warnings.get("claude-code: skipped system"), Some(&1));
    }

    #[test]
    fn parallel_results_merge_into_one_user_message() {
        let text = lines(&[
            user("u1", json!("two reads")),
            assistant(
                "a1",
                "msg_1",
                json!({"type": "tool_use", "id": "t1", "name": "Read", "input": {}}),
            ),
            assistant(
                "a2",
                "msg_1",
                json!({"type": "tool_use", "id": "t2", "name": "Read", "input": {}}),
            ),
            user(
                "u2",
                json!([{"type": "tool_result", "tool_use_id": "t1", "content": "one"}]),
            ),
            user(
                "u3",
                json!([{"type": "tool_result", "tool_use_id": "t2", "content": "two"}]),
            ),
            user("u4", json!("thanks")),
        ]);
        let trace = import(&text, TraceFormat::ClaudeCode).expect("imports");
        let messages = &trace.sessions[0].messages;
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[1].tool_calls().count(), 2);
        assert_eq!(
            messages[2].tool_result_ids().collect::<Vec<_>>(),
            ["t1", "t2"]
        );
        assert_eq!(messages[3].text(), "thanks");
    }

    #[test]
    fn same_id_after_a_user_message_starts_a_new_message() {
        let text = lines(&[
            assistant(
                "a1",
                "msg_1",
                json!({"type": "tool_use", "id": "t1", "name": "Read", "input": {}}),
            ),
            user(
                "u1",
                json!([{"type": "tool_result", "tool_use_id": "t1", "content": "one"}]),
            ),
            assistant("a2", "msg_1", json!({"type": "text", "text": "more"})),
        ]);
        let trace = import(&text, TraceFormat::ClaudeCode).expect("imports");
        assert_eq!(trace.sessions[0].messages.len(), 3);
    }

    #[test]
    fn sidechains_unknown_kinds_and_synthetic_models_are_not_imported() {
        let mut side = user("u0", json!("sub-agent prompt"));
        side["isSidechain"] = json!(true);
        let mut synthetic = assistant("a0", "msg_0", json!({"type": "text", "text": "API Error"}));
        synthetic["message"]["model"] = json!("<synthetic>");
        let text = lines(&[
            json!({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}),
            json!({"no_type": true}),
            side,
            user("u1", json!("hi")),
            synthetic,
            assistant("a1", "msg_1", json!({"type": "text", "text": "hello"})),
        ]);
        let trace = import(&text, TraceFormat::ClaudeCode).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.messages.len(), 3);
        assert_eq!(session.model.as_deref(), Some("claude-sonnet-4-20250514"));
        let w = &trace.warnings;
        assert_eq!(
            w.get("claude-code: skipped file-history-snapshot"),
            Some(&1)
        );
        assert_eq!(w.get("claude-code: skipped entry without type"), Some(&1));
        assert_eq!(w.get("claude-code: skipped sidechain entry"), Some(&1));
    }

    #[test]
    fn errors_carry_the_line() {
        let good = user("u1", json!("hi")).to_string();
        for (bad, line) in [
            (format!("{good}\n{{\"type\": \"user\"}}"), 2),
            (
                format!("{good}\n{{\"type\": \"user\", \"message\": \"hi\"}}"),
                2,
            ),
            (format!("{good}\n\n{{\"type\": 3}}"), 3),
            (format!("{good}\n[]"), 2),
            (
                format!(
                    "{good}\n{{\"type\": \"user\", \"message\": {{\"role\": \"user\", \"content\": 5}}}}"
                ),
                2,
            ),
            (
                format!(
                    "{good}\n{{\"type\": \"assistant\", \"message\": {{\"role\": \"narrator\", \"content\": \"x\"}}}}"
                ),
                2,
            ),
            (format!("{good}\n{{\"type\": \"user\", \"mess"), 2),
        ] {
            let err = import(&bad, TraceFormat::ClaudeCode).expect_err("must fail");
            assert!(
                err.to_string().starts_with(&format!("line {line},")),
                "{bad}: {err}"
            );
        }
    }
}
