//! Claude Code session logs (`~/.claude/projects/<project>/<session>.jsonl`).
//!
//! One entry per line. `user` and `assistant` entries hold an Anthropic message in `message`,
//! parsed by the Anthropic adapter. The main conversation is one [`Session`] with the id of the
//! first `sessionId` (else `"0"`) and the model of its first assistant message (Claude Code's
//! `<synthetic>` placeholder for locally made messages does not count). The rules:
//!
//! - **Sub-agents are sessions of their own.** Entries marked `isSidechain` are the
//!   conversations of sub-agents (the `Task` / `Agent` tool): each becomes a [`Session`] with
//!   the id `<session>/agent-<agentId>` (Claude Code 2.x writes `agentId` on every entry and
//!   keeps each sub-agent in `<session>/subagents/agent-<agentId>.jsonl`, which may simply be
//!   appended to the main file), or `<session>/sidechain-<n>` for older logs, where the
//!   sub-agents sit inline in the main file and are told apart by following `parentUuid` from
//!   an entry without a parent. Its [`Session::parent`] names the conversation and the tool call
//!   that started it: the call the caller names for the sub-agent (Claude Code's
//!   `agent-<agentId>.meta.json` holds it as `toolUseId`; see [`super::import_claude_code`]),
//!   else the call whose result's `toolUseResult.agentId` names the sub-agent (only the main
//!   file has those), else the entry's `parentToolUseId`, else the first not yet linked
//!   `Task` / `Agent` call whose `prompt` is the sub-agent's first user message.
//! - **One API response, one message.** Claude Code writes each content block of a streamed
//!   response as its own entry, all with the same `message.id`. Consecutive assistant entries
//!   with the same id are merged into one assistant message, so the `tool_use` blocks of one
//!   response form one message, as the API returned them.
//! - **Results of one round, one message.** Consecutive user entries that hold only
//!   `tool_result` blocks are merged, as Claude Code sends them in one user message.
//! - **No duplicated content.** `toolUseResult` repeats the tool result in a tool-specific shape
//!   and is not imported; the `tool_result` block is the content the model saw.
//! - **What the model did not see is skipped and counted, with the reason**: `summary` entries
//!   (titles the UI shows for a branch), `system` entries (hook and status notices),
//!   `attachment`, `queue-operation`, `last-prompt` and other entry kinds this importer does
//!   not know (`file-history-snapshot`, …), under keys such as
//!   `"claude-code: skipped summary (a title the UI shows; not sent to the model)"`.
//! - **Envelope fields ride along.** `uuid`, `parentUuid`, `timestamp`, `requestId`, `isMeta`
//!   and any other entry field are kept in [`Message::extra`] (for a merged message, those of
//!   its first entry), except the per-session constants (`sessionId`, `cwd`, `version`,
//!   `gitBranch`, `userType`, `isSidechain`, `agentId`) and `toolUseResult`; messages carry the
//!   origin hint `claude-code`.
//!
//! Entries are read in file order; `parentUuid` links are followed only to group sidechains.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{ParentLink, Session, Warnings, json_lines, line_object, opt_str, wire};
use crate::ParseError;
use crate::json_kind;
use crate::model::{Message, Part, Role};

/// The origin hint of messages from this importer.
const ORIGIN: &str = "claude-code";

/// Entry fields not copied into `extra`: the message itself, the duplicated tool result, and
/// values that are the same on every line of a session (or of a sub-agent).
const NOT_COPIED: [&str; 10] = [
    "type",
    "message",
    "toolUseResult",
    "sessionId",
    "cwd",
    "version",
    "gitBranch",
    "userType",
    "isSidechain",
    "agentId",
];

/// The model name Claude Code gives messages it makes itself (API errors, interruptions).
const SYNTHETIC_MODEL: &str = "<synthetic>";

/// The tools that start a sub-agent (`Task` until Claude Code 2.0, `Agent` since).
const SUBAGENT_TOOLS: [&str; 2] = ["Task", "Agent"];

/// Why an entry kind that is not a conversation message is skipped.
fn skip_reason(kind: &str) -> &'static str {
    match kind {
        "summary" => "a title the UI shows; not sent to the model",
        "system" => "a hook or status notice; not sent to the model",
        "attachment" => {
            "context Claude Code attaches on its side; its text reaches the model inside other messages"
        }
        "queue-operation" | "last-prompt" => "Claude Code's own bookkeeping; not sent to the model",
        "file-history-snapshot" => "a snapshot of edited files for undo; not sent to the model",
        _ => "an entry kind this importer does not know; not a message",
    }
}

/// One conversation being rebuilt: the main one or a sub-agent's.
#[derive(Default)]
struct Conversation {
    id: String,
    model: Option<String>,
    messages: Vec<Message>,
    /// The API message id of the last message while it is an assistant message that a
    /// following entry of the same response may extend.
    open_response: Option<String>,
    /// A `parentToolUseId` written on one of its entries.
    parent_tool_use: Option<String>,
}

impl Conversation {
    /// Adds one `user` / `assistant` entry.
    fn push(
        &mut self,
        entry: &Map<String, Value>,
        mut message: Message,
        response_id: Option<&str>,
    ) {
        if message.role == Role::Assistant {
            if self.model.is_none() {
                self.model = entry
                    .get("message")
                    .and_then(|m| m.get("model"))
                    .and_then(Value::as_str)
                    .filter(|name| *name != SYNTHETIC_MODEL)
                    .map(str::to_string);
            }
            if response_id.is_some()
                && self.open_response.as_deref() == response_id
                && let Some(last) = self.messages.last_mut()
            {
                last.parts.append(&mut message.parts);
                return;
            }
            self.open_response = response_id.map(str::to_string);
        } else {
            self.open_response = None;
            if message.role == Role::User
                && message.is_only_tool_results()
                && let Some(last) = self.messages.last_mut()
                && last.role == Role::User
                && last.is_only_tool_results()
            {
                last.parts.append(&mut message.parts);
                return;
            }
        }
        for (key, value) in entry {
            if !NOT_COPIED.contains(&key.as_str()) {
                message
                    .extra
                    .entry(key.clone())
                    .or_insert_with(|| value.clone());
            }
        }
        message.hints.origin = Some(ORIGIN.to_string());
        self.messages.push(message);
    }

    /// The text of the first user message (a sub-agent's prompt).
    fn first_prompt(&self) -> Option<String> {
        self.messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(Message::text)
    }
}

/// Which conversation a sidechain entry belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SideKey {
    /// Claude Code 2.x: the entry's `agentId`.
    Agent(String),
    /// Older logs: the n-th chain of `parentUuid` links (1-based).
    Chain(usize),
}

/// Imports a Claude Code session log: the main conversation, then one session per sub-agent in
/// the order they first appear.
pub(super) fn import(text: &str, warnings: &mut Warnings) -> Result<Vec<Session>, ParseError> {
    import_linked(text, &HashMap::new(), warnings)
}

/// [`import`], with the tool call that started each sub-agent given by `agentId`.
pub(super) fn import_linked(
    text: &str,
    known_calls: &HashMap<String, String>,
    warnings: &mut Warnings,
) -> Result<Vec<Session>, ParseError> {
    let mut main = Conversation::default();
    let mut session_id: Option<String> = None;
    let mut sides: Vec<(SideKey, Conversation)> = Vec::new();
    let mut side_index: HashMap<SideKey, usize> = HashMap::new();
    // The sidechain each entry uuid belongs to (older logs follow these links).
    let mut chain_of_uuid: HashMap<String, usize> = HashMap::new();
    let mut chains = 0;
    // `agentId` → (index of the conversation holding the call: None for main, tool call id),
    // from the `toolUseResult` of the call's result.
    let mut agent_results: HashMap<String, (Option<usize>, String)> = HashMap::new();
    for (line_no, entry) in json_lines(text) {
        let entry = line_object(entry?, line_no)?;
        let at_line = |err: ParseError| err.on_line(line_no);
        let Some(kind) = opt_str(&entry, "type", "$").map_err(at_line)? else {
            warnings.add("claude-code: skipped entry without type (not a message)");
            continue;
        };
        if kind != "user" && kind != "assistant" {
            warnings.add(format!(
                "claude-code: skipped {kind} ({})",
                skip_reason(kind)
            ));
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
                    format!("expected a message object, found {}", json_kind(other)),
                )));
            }
            None => return Err(at_line(ParseError::at("$", "missing `message`"))),
        };
        let message = wire::anthropic_message(raw, "$.message").map_err(at_line)?;
        let response_id = raw.get("id").and_then(Value::as_str);
        let sidechain = entry.get("isSidechain") == Some(&Value::Bool(true));
        let side = if sidechain {
            let key = match opt_str(&entry, "agentId", "$").map_err(at_line)? {
                Some(agent) => SideKey::Agent(agent.to_string()),
                None => {
                    let parent = entry.get("parentUuid").and_then(Value::as_str);
                    match parent.and_then(|p| chain_of_uuid.get(p)) {
                        Some(&chain) => SideKey::Chain(chain),
                        None => {
                            chains += 1;
                            SideKey::Chain(chains)
                        }
                    }
                }
            };
            if let (SideKey::Chain(chain), Some(uuid)) =
                (&key, entry.get("uuid").and_then(Value::as_str))
            {
                chain_of_uuid.insert(uuid.to_string(), *chain);
            }
            let index = *side_index.entry(key.clone()).or_insert_with(|| {
                sides.push((key, Conversation::default()));
                sides.len() - 1
            });
            Some(index)
        } else {
            None
        };
        if let Some(agent) = entry
            .get("toolUseResult")
            .and_then(|r| r.get("agentId"))
            .and_then(Value::as_str)
            && let Some(call_id) = message.tool_result_ids().next()
        {
            agent_results.insert(agent.to_string(), (side, call_id.to_string()));
        }
        let conversation = match side {
            Some(index) => &mut sides[index].1,
            None => &mut main,
        };
        if conversation.parent_tool_use.is_none() {
            conversation.parent_tool_use = ["parentToolUseId", "parentToolUseID"]
                .iter()
                .find_map(|key| entry.get(*key).and_then(Value::as_str))
                .map(str::to_string);
        }
        conversation.push(&entry, message, response_id);
    }
    let main_id = session_id.unwrap_or_else(|| "0".to_string());
    main.id = main_id.clone();
    for (key, conversation) in &mut sides {
        conversation.id = match key {
            SideKey::Agent(agent) => format!("{main_id}/agent-{agent}"),
            SideKey::Chain(n) => format!("{main_id}/sidechain-{n}"),
        };
    }
    let links = link_parents(&main, &sides, &agent_results, known_calls);
    let mut sessions = Vec::with_capacity(sides.len() + 1);
    if !main.messages.is_empty() || sides.is_empty() {
        sessions.push(main.into_session(None));
    }
    for ((_, conversation), parent) in sides.into_iter().zip(links) {
        sessions.push(conversation.into_session(parent));
    }
    Ok(sessions)
}

impl Conversation {
    fn into_session(self, parent: Option<ParentLink>) -> Session {
        Session {
            id: self.id,
            model: self.model,
            messages: self.messages,
            tools: Vec::new(),
            parent,
        }
    }
}

/// The call that started each sub-agent, in the order of `sides`.
fn link_parents(
    main: &Conversation,
    sides: &[(SideKey, Conversation)],
    agent_results: &HashMap<String, (Option<usize>, String)>,
    known_calls: &HashMap<String, String>,
) -> Vec<Option<ParentLink>> {
    let id_of = |holder: Option<usize>| match holder {
        Some(index) => sides[index].1.id.clone(),
        None => main.id.clone(),
    };
    // Every sub-agent call, in order: (holder, call id, prompt).
    let mut calls: Vec<(Option<usize>, String, Option<String>)> = Vec::new();
    let holders = std::iter::once((None, main)).chain(
        sides
            .iter()
            .enumerate()
            .map(|(index, (_, c))| (Some(index), c)),
    );
    for (holder, conversation) in holders {
        for message in &conversation.messages {
            for part in &message.parts {
                if let Part::ToolCall {
                    id,
                    name,
                    arguments,
                    ..
                } = part
                    && SUBAGENT_TOOLS.contains(&name.as_str())
                {
                    let prompt = serde_json::from_str::<Value>(arguments)
                        .ok()
                        .and_then(|args| args.get("prompt")?.as_str().map(str::to_string));
                    calls.push((holder, id.clone(), prompt));
                }
            }
        }
    }
    let mut used = vec![false; calls.len()];
    let mut claim = |call_id: &str| {
        if let Some(n) = calls.iter().position(|(_, id, _)| id == call_id) {
            used[n] = true;
        }
    };
    let mut links: Vec<Option<ParentLink>> = vec![None; sides.len()];
    // Exact links first, so a prompt match never takes a call another sub-agent names.
    let holder_of = |call: &str| calls.iter().find(|(_, id, _)| id == call).map(|c| c.0);
    for (index, (key, conversation)) in sides.iter().enumerate() {
        let agent = match key {
            SideKey::Agent(agent) => Some(agent),
            SideKey::Chain(_) => None,
        };
        let exact = agent
            .and_then(|agent| known_calls.get(agent))
            .and_then(|call| Some((id_of(holder_of(call)?), call.clone())))
            .or_else(|| {
                agent
                    .and_then(|agent| agent_results.get(agent))
                    .map(|(holder, call)| (id_of(*holder), call.clone()))
            })
            .or_else(|| {
                let call = conversation.parent_tool_use.clone()?;
                let holder = calls.iter().find(|(_, id, _)| *id == call)?.0;
                Some((id_of(holder), call))
            });
        if let Some((session, call)) = exact {
            claim(&call);
            links[index] = Some(ParentLink {
                session,
                tool_call_id: Some(call),
            });
        }
    }
    for (index, (_, conversation)) in sides.iter().enumerate() {
        if links[index].is_some() {
            continue;
        }
        let prompt = conversation.first_prompt();
        let found = calls.iter().enumerate().position(|(n, (holder, _, p))| {
            !used[n] && *holder != Some(index) && p.is_some() && *p == prompt
        });
        links[index] = Some(match found {
            Some(n) => {
                used[n] = true;
                ParentLink {
                    session: id_of(calls[n].0),
                    tool_call_id: Some(calls[n].1.clone()),
                }
            }
            // A sub-agent whose call is not in this file still belongs to the session.
            None => ParentLink {
                session: main.id.clone(),
                tool_call_id: None,
            },
        });
    }
    links
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::{Value, json};

    use crate::import::{ParentLink, TraceFormat, import};
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
        assert_eq!(
            trace
                .warnings
                .get("claude-code: skipped summary (a title the UI shows; not sent to the model)"),
            Some(&1)
        );
        assert_eq!(
            trace.warnings.get(
                "claude-code: skipped system (a hook or status notice; not sent to the model)"
            ),
            Some(&1)
        );
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
    fn unknown_kinds_and_synthetic_models_are_not_imported() {
        let mut synthetic = assistant("a0", "msg_0", json!({"type": "text", "text": "API Error"}));
        synthetic["message"]["model"] = json!("<synthetic>");
        let text = lines(&[
            json!({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}),
            json!({"no_type": true}),
            user("u1", json!("hi")),
            synthetic,
            assistant("a1", "msg_1", json!({"type": "text", "text": "hello"})),
        ]);
        let trace = import(&text, TraceFormat::ClaudeCode).expect("imports");
        assert_eq!(trace.sessions.len(), 1);
        let session = &trace.sessions[0];
        assert_eq!(session.messages.len(), 3);
        assert_eq!(session.model.as_deref(), Some("claude-sonnet-4-20250514"));
        let w = &trace.warnings;
        assert_eq!(
            w.get("claude-code: skipped file-history-snapshot (a snapshot of edited files for undo; not sent to the model)"),
            Some(&1)
        );
        assert_eq!(
            w.get("claude-code: skipped entry without type (not a message)"),
            Some(&1)
        );
    }

    fn side(mut entry: Value, parent: Option<&str>, agent: Option<&str>) -> Value {
        entry["isSidechain"] = json!(true);
        entry["parentUuid"] = json!(parent);
        if let Some(agent) = agent {
            entry["agentId"] = json!(agent);
        }
        entry
    }

    fn task_call(uuid: &str, id: &str, call: &str, prompt: &str) -> Value {
        assistant(
            uuid,
            id,
            json!({"type": "tool_use", "id": call, "name": "Task",
                   "input": {"description": "d", "prompt": prompt, "subagent_type": "general-purpose"}}),
        )
    }

    /// Claude Code 1.x: two sub-agents inline in the main file, interleaved, told apart by
    /// their `parentUuid` chains and linked to their `Task` calls by prompt.
    #[test]
    fn inline_sidechains_become_sessions_linked_to_their_task_calls() {
        let text = lines(&[
            user("u1", json!("audit the repo")),
            task_call("a1", "msg_1", "toolu_A", "find TODOs"),
            task_call("a2", "msg_1", "toolu_B", "count lines"),
            side(user("s1", json!("count lines")), None, None),
            side(user("t1", json!("find TODOs")), None, None),
            side(
                assistant(
                    "s2",
                    "msg_s",
                    json!({"type": "text", "text": "1,234 lines"}),
                ),
                Some("s1"),
                None,
            ),
            side(
                assistant("t2", "msg_t", json!({"type": "text", "text": "3 TODOs"})),
                Some("t1"),
                None,
            ),
            user(
                "u2",
                json!([{"type": "tool_result", "tool_use_id": "toolu_A", "content": "3 TODOs"},
                       {"type": "tool_result", "tool_use_id": "toolu_B", "content": "1,234 lines"}]),
            ),
            assistant("a3", "msg_2", json!({"type": "text", "text": "Done."})),
        ]);
        let trace = import(&text, TraceFormat::ClaudeCode).expect("imports");
        let ids: Vec<&str> = trace.sessions.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["s-1", "s-1/sidechain-1", "s-1/sidechain-2"]);
        assert_eq!(trace.sessions[0].messages.len(), 4);
        assert_eq!(trace.sessions[0].parent, None);
        let count = &trace.sessions[1];
        assert_eq!(count.messages.len(), 2);
        assert_eq!(count.messages[1].text(), "1,234 lines");
        assert_eq!(
            count.parent,
            Some(ParentLink {
                session: "s-1".into(),
                tool_call_id: Some("toolu_B".into())
            })
        );
        let todos = &trace.sessions[2];
        assert_eq!(todos.messages[1].text(), "3 TODOs");
        assert_eq!(
            todos
                .parent
                .as_ref()
                .and_then(|p| p.tool_call_id.as_deref()),
            Some("toolu_A")
        );
        assert!(trace.warnings.is_empty(), "{:?}", trace.warnings);
    }

    /// Claude Code 2.x: sub-agent files (every entry `isSidechain` with an `agentId`) appended
    /// to the main file; the link comes from `toolUseResult.agentId`, also for a sub-agent
    /// started by another sub-agent.
    #[test]
    fn agent_files_become_sessions_linked_through_tool_use_results() {
        let mut result = user(
            "u2",
            json!([{"type": "tool_result", "tool_use_id": "toolu_A", "content": "done"}]),
        );
        result["toolUseResult"] =
            json!({"status": "completed", "agentId": "a111", "prompt": "other text"});
        let mut nested_result = side(
            user(
                "x3",
                json!([{"type": "tool_result", "tool_use_id": "toolu_N", "content": "ok"}]),
            ),
            Some("x2"),
            Some("a111"),
        );
        nested_result["toolUseResult"] = json!({"agentId": "a222"});
        let text = lines(&[
            user("u1", json!("go")),
            task_call("a1", "msg_1", "toolu_A", "step one"),
            result,
            side(user("x1", json!("step one")), None, Some("a111")),
            side(
                task_call("x2", "msg_x", "toolu_N", "inner"),
                Some("x1"),
                Some("a111"),
            ),
            nested_result,
            side(user("y1", json!("inner")), None, Some("a222")),
        ]);
        let trace = import(&text, TraceFormat::ClaudeCode).expect("imports");
        let ids: Vec<&str> = trace.sessions.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["s-1", "s-1/agent-a111", "s-1/agent-a222"]);
        assert_eq!(
            trace.sessions[1].parent,
            Some(ParentLink {
                session: "s-1".into(),
                tool_call_id: Some("toolu_A".into())
            })
        );
        assert_eq!(
            trace.sessions[2].parent,
            Some(ParentLink {
                session: "s-1/agent-a111".into(),
                tool_call_id: Some("toolu_N".into())
            })
        );
        assert!(
            trace.sessions[1].messages[0].extra.get("agentId").is_none(),
            "a per-agent constant is not copied"
        );
    }

    /// Nested sub-agents with the same prompt: only the calls the caller names (from
    /// Claude Code's `.meta.json` files) tell which call started which.
    #[test]
    fn named_calls_link_nested_sub_agents_with_the_same_prompt() {
        let mut first = user(
            "u2",
            json!([{"type": "tool_result", "tool_use_id": "toolu_A", "content": "done"}]),
        );
        first["toolUseResult"] = json!({"agentId": "a1"});
        let text = lines(&[
            user("u1", json!("go")),
            task_call("m1", "msg_1", "toolu_A", "same"),
            first,
            // Files in name order: the deeper agent's file comes first.
            side(user("z1", json!("same")), None, Some("a0")),
            side(user("x1", json!("same")), None, Some("a1")),
            side(
                task_call("x2", "msg_x", "toolu_B", "same"),
                Some("x1"),
                Some("a1"),
            ),
            side(
                user(
                    "x3",
                    json!([{"type": "tool_result", "tool_use_id": "toolu_B", "content": "ok"}]),
                ),
                Some("x2"),
                Some("a1"),
            ),
        ]);
        let known = HashMap::from([("a0".to_string(), "toolu_B".to_string())]);
        let mut warnings = crate::import::Warnings::default();
        let sessions = super::import_linked(&text, &known, &mut warnings).expect("imports");
        let parent = |id: &str| {
            sessions
                .iter()
                .find(|s| s.id == id)
                .and_then(|s| s.parent.clone())
                .and_then(|p| p.tool_call_id.map(|call| (p.session, call)))
        };
        assert_eq!(
            parent("s-1/agent-a0"),
            Some(("s-1/agent-a1".to_string(), "toolu_B".to_string()))
        );
        assert_eq!(
            parent("s-1/agent-a1"),
            Some(("s-1".to_string(), "toolu_A".to_string()))
        );
    }

    /// A sub-agent file read on its own: no main conversation, one session, whose parent is
    /// the session it names but no call.
    #[test]
    fn a_lone_agent_file_is_one_session() {
        let text = lines(&[
            side(user("x1", json!("step one")), None, Some("a111")),
            side(
                assistant("x2", "msg_x", json!({"type": "text", "text": "ok"})),
                Some("x1"),
                Some("a111"),
            ),
        ]);
        let trace = import(&text, TraceFormat::ClaudeCode).expect("imports");
        assert_eq!(trace.sessions.len(), 1);
        assert_eq!(trace.sessions[0].id, "s-1/agent-a111");
        assert_eq!(
            trace.sessions[0].parent,
            Some(ParentLink {
                session: "s-1".into(),
                tool_call_id: None
            })
        );
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
