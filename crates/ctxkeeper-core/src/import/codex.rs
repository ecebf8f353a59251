//! Codex CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`).
//!
//! One entry per line, `{timestamp, type, payload}`. The file is one [`Session`]:
//!
//! | entry | imported as |
//! | --- | --- |
//! | `session_meta` | the session id (`payload.id`) and, when present, the model |
//! | `turn_context` (newer CLIs) | the model, if `session_meta` named none |
//! | `response_item` | the conversation: the payloads are OpenAI Responses items (`message`, `reasoning` with `encrypted_content`, `function_call`, `function_call_output`, `custom_tool_call`, …) and all of them go through the Responses adapter in one run, which groups them into messages |
//! | `response_item` of type `ghost_snapshot` | skipped and counted: an undo snapshot Codex never sends to the model |
//! | `event_msg` (`token_count`, `user_message`, `agent_message`, …) | skipped and counted per payload type: UI events that repeat the response items |
//! | `response_item` of a type the adapter does not know (`local_shell_call`, `web_search_call`, …) | kept as an opaque part, counted |
//! | `compacted` and unknown entry types | skipped and counted |
//!
//! Counted keys read `"codex: skipped event_msg/token_count (an event for the UI that repeats the response items; not sent to the model)"`. Rollouts from before the
//! envelope existed (items written bare, one per line, after a header line without `type`) are
//! read too. Encrypted reasoning is carried byte-for-byte by the adapter. The messages are
//! verbatim Responses items and keep the adapter's origin hint.

use serde_json::{Map, Value};

use super::{Session, Warnings, id_text, json_lines, line_object, opt_str, wire};
use crate::json_kind;
use crate::model::Message;
use crate::{ParseError, Position};

/// Item types the Responses adapter maps to model parts; it keeps any other item opaque.
const NATIVE_ITEM_TYPES: [&str; 6] = [
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
];

/// Whether an item of this type may appear bare on a line of a rollout written before the
/// envelope: the native types, and `local_shell_call`.
fn may_be_bare(kind: &str) -> bool {
    NATIVE_ITEM_TYPES.contains(&kind) || kind == "local_shell_call"
}

/// Imports a Codex CLI rollout as one session.
pub(super) fn import(text: &str, warnings: &mut Warnings) -> Result<Vec<Session>, ParseError> {
    let mut items: Vec<Value> = Vec::new();
    let mut item_lines: Vec<usize> = Vec::new();
    let mut id: Option<String> = None;
    let mut model: Option<String> = None;
    for (line_no, entry) in json_lines(text) {
        let mut entry = line_object(entry?, line_no)?;
        let at_line = |err: ParseError| err.on_line(line_no);
        let kind = opt_str(&entry, "type", "$")
            .map_err(at_line)?
            .map(str::to_string);
        match kind.as_deref() {
            Some(kind @ ("session_meta" | "turn_context")) => {
                let payload = payload(&mut entry).map_err(at_line)?;
                if kind == "session_meta" && id.is_none() {
                    id = id_text(payload.get("id"));
                }
                if model.is_none() {
                    model = opt_str(&payload, "model", "$.payload")
                        .map_err(at_line)?
                        .map(str::to_string);
                }
            }
            Some("response_item") => {
                let payload = payload(&mut entry).map_err(at_line)?;
                match opt_str(&payload, "type", "$.payload").map_err(at_line)? {
                    Some("ghost_snapshot") => {
                        warnings.add(
                            "codex: skipped response_item/ghost_snapshot (a snapshot of the work \
                             tree for undo; not sent to the model)",
                        );
                        continue;
                    }
                    Some(other) if !NATIVE_ITEM_TYPES.contains(&other) => {
                        warnings.add(format!("codex: kept response_item/{other} opaque"));
                    }
                    _ => {}
                }
                items.push(Value::Object(payload));
                item_lines.push(line_no);
            }
            Some("event_msg") => {
                let payload = payload(&mut entry).map_err(at_line)?;
                let event = opt_str(&payload, "type", "$.payload").map_err(at_line)?;
                warnings.add(format!(
                    "codex: skipped event_msg/{} (an event for the UI that repeats the response \
                     items; not sent to the model)",
                    event.unwrap_or("untyped")
                ));
            }
            Some(bare) if may_be_bare(bare) && !entry.contains_key("payload") => {
                items.push(Value::Object(entry));
                item_lines.push(line_no);
            }
            Some(other) => warnings.add(format!(
                "codex: skipped {other} (an entry kind this importer does not turn into messages)"
            )),
            None if entry.contains_key("record_type") => {
                warnings.add("codex: skipped record_type entry (a state record; not a message)");
            }
            None if id.is_none() && items.is_empty() && entry.contains_key("id") => {
                // The header line of a rollout written before the envelope.
                id = id_text(entry.get("id"));
            }
            None => warnings.add("codex: skipped entry without type (not a message)"),
        }
    }
    let messages = parse_items(&items, &item_lines)?;
    let id = id.unwrap_or_else(|| "0".to_string());
    Ok(vec![Session::new(id, model, messages)])
}

/// Takes an entry's `payload` object out of it.
fn payload(entry: &mut Map<String, Value>) -> Result<Map<String, Value>, ParseError> {
    match entry.remove("payload") {
        Some(Value::Object(payload)) => Ok(payload),
        Some(other) => Err(ParseError::at(
            "$.payload",
            format!("expected an object, found {}", json_kind(&other)),
        )),
        None => Err(ParseError::at("$", "missing `payload`")),
    }
}

/// Parses the items in one run; an error is placed on the line of the item that caused it.
fn parse_items(items: &[Value], lines: &[usize]) -> Result<Vec<Message>, ParseError> {
    let err = match wire::responses_items(items) {
        Ok(messages) => return Ok(messages),
        Err(err) => err,
    };
    // Only on failure: find the first item that does not parse on its own.
    for (item, &line_no) in items.iter().zip(lines) {
        if let Err(item_err) = wire::responses_items(std::slice::from_ref(item)) {
            return Err(at_payload(item_err).on_line(line_no));
        }
    }
    Err(err)
}

/// Rewrites a path into a one-item run (`$[0].content`) as a path into the line's entry
/// (`$.payload.content`).
fn at_payload(mut err: ParseError) -> ParseError {
    if let Position::Path { path, .. } = &mut err.position
        && let Some(rest) = path.strip_prefix("$[0]")
    {
        *path = format!("$.payload{rest}");
    }
    err
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::import::{TraceFormat, import};
    use crate::model::{Part, Role};

    fn line(kind: &str, payload: Value) -> String {
        json!({"timestamp": "2025-11-01T01:02:58.871Z", "type": kind, "payload": payload})
            .to_string()
    }

    fn item(payload: Value) -> String {
        line("response_item", payload)
    }

    fn rollout(lines: &[String]) -> String {
        lines.join("\n")
    }

    #[test]
    fn response_items_become_the_conversation_and_events_are_counted() {
        let text = rollout(&[
            line(
                "session_meta",
                json!({"id": "c617", "cwd": "/w", "cli_version": "0.34.0",
                                         "instructions": null}),
            ),
            item(json!({"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": "continue?"}]})),
            line(
                "event_msg",
                json!({"type": "user_message", "message": "continue?", "kind": "plain"}),
            ),
            line("event_msg", json!({"type": "token_count", "info": null})),
            item(json!({"type": "reasoning", "summary": [], "content": null,
                        "encrypted_content": "gAAAAABpBVxy"})),
            item(json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": "Scanning."}]})),
            line(
                "event_msg",
                json!({"type": "agent_message", "message": "Scanning."}),
            ),
            item(json!({"type": "function_call", "name": "shell",
                        "arguments": "{\"command\":[\"bash\",\"-lc\",\"ls\"]}", "call_id": "call_1"})),
            item(json!({"type": "function_call_output", "call_id": "call_1",
                        "output": "{\"output\":\"a.py\"}"})),
        ]);
        let trace = import(&text, TraceFormat::Codex).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.id, "c617");
        assert_eq!(session.model, None);
        let calls: usize = session
            .messages
            .iter()
            .map(|m| m.tool_calls().count())
            .sum();
        assert_eq!(calls, 1);
        let results: Vec<&str> = session
            .messages
            .iter()
            .flat_map(|m| m.tool_result_ids())
            .collect();
        assert_eq!(results, ["call_1"]);
        assert_eq!(session.messages[0].role, Role::User);
        let encrypted = session
            .messages
            .iter()
            .flat_map(|m| &m.parts)
            .find_map(|p| match p {
                Part::Reasoning { encrypted, .. } => encrypted.clone(),
                _ => None,
            });
        assert_eq!(encrypted.as_deref(), Some("gAAAAABpBVxy"));
        let w = &trace.warnings;
        assert_eq!(w.get("codex: skipped event_msg/token_count (an event for the UI that repeats the response items; not sent to the model)"), Some(&1));
        assert_eq!(w.get("codex: skipped event_msg/user_message (an event for the UI that repeats the response items; not sent to the model)"), Some(&1));
        assert_eq!(w.get("codex: skipped event_msg/agent_message (an event for the UI that repeats the response items; not sent to the model)"), Some(&1));
    }

    #[test]
    fn newer_entries_give_the_model_and_are_kept_or_counted() {
        let text = rollout(&[
            line("session_meta", json!({"id": "s", "cli_version": "0.50.0"})),
            line(
                "turn_context",
                json!({"cwd": "/w", "model": "gpt-5-codex", "effort": "high"}),
            ),
            line("turn_context", json!({"model": "gpt-5"})),
            item(json!({"type": "message", "role": "developer",
                        "content": [{"type": "input_text", "text": "rules"}]})),
            item(json!({"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": "patch it"}]})),
            item(json!({"type": "ghost_snapshot", "ghost_commit": {"id": "abc"}})),
            item(
                json!({"type": "custom_tool_call", "status": "completed", "call_id": "call_p",
                        "name": "apply_patch", "input": "*** Begin Patch"}),
            ),
            item(json!({"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done"})),
            item(json!({"type": "web_search_call", "status": "completed",
                        "action": {"type": "search", "query": "rust"}})),
            line("compacted", json!({"message": "summary"})),
            line("some_future_entry", json!({})),
        ]);
        let trace = import(&text, TraceFormat::Codex).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.model.as_deref(), Some("gpt-5-codex"));
        assert_eq!(session.messages[0].role, Role::Developer);
        let calls: Vec<String> = session
            .messages
            .iter()
            .flat_map(|m| m.tool_calls().map(|c| c.1.to_string()).collect::<Vec<_>>())
            .collect();
        assert_eq!(calls, ["apply_patch"]);
        let w = &trace.warnings;
        assert_eq!(
            w.get("codex: skipped response_item/ghost_snapshot (a snapshot of the work tree for undo; not sent to the model)"),
            Some(&1)
        );
        assert_eq!(
            w.get(
                "codex: skipped compacted (an entry kind this importer does not turn into messages)"
            ),
            Some(&1)
        );
        assert_eq!(
            w.get("codex: kept response_item/web_search_call opaque"),
            Some(&1)
        );
        let opaque = session.messages.iter().flat_map(|m| &m.parts);
        assert_eq!(
            opaque.filter(|p| matches!(p, Part::Opaque { .. })).count(),
            1
        );
        assert_eq!(w.get("codex: skipped some_future_entry (an entry kind this importer does not turn into messages)"), Some(&1));
    }

    #[test]
    fn rollouts_before_the_envelope() {
        let text = rollout(&[
            json!({"id": "old", "timestamp": "2025-05-01", "instructions": null}).to_string(),
            json!({"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "hi"}]})
            .to_string(),
            json!({"record_type": "state"}).to_string(),
            json!({"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": "hello"}]})
            .to_string(),
        ]);
        let trace = import(&text, TraceFormat::Codex).expect("imports");
        assert_eq!(trace.sessions[0].id, "old");
        assert_eq!(trace.sessions[0].messages.len(), 2);
        assert_eq!(
            trace
                .warnings
                .get("codex: skipped record_type entry (a state record; not a message)"),
            Some(&1)
        );
    }

    #[test]
    fn errors_carry_the_line_of_the_bad_item() {
        let good = item(json!({"type": "message", "role": "user",
                               "content": [{"type": "input_text", "text": "hi"}]}));
        for (bad, line) in [
            (
                format!("{good}\n{}", line("response_item", json!("text"))),
                2,
            ),
            (format!("{good}\n{}", line("event_msg", json!([]))), 2),
            (
                format!(
                    "{good}\n{}\n{good}",
                    item(json!({"type": "message", "role": "wizard",
                                                        "content": []}))
                ),
                2,
            ),
            (
                format!(
                    "{good}\n{good}\n{}",
                    item(json!({"type": "function_call", "name": 5}))
                ),
                3,
            ),
            (
                format!("{good}\n{{\"type\": \"response_item\", \"payload\": {{"),
                2,
            ),
            (format!("{good}\n{{\"type\": [1]}}"), 2),
        ] {
            let err = import(&bad, TraceFormat::Codex).expect_err("must fail");
            assert!(
                err.to_string().starts_with(&format!("line {line},")),
                "{bad}: {err}"
            );
        }
    }
}
