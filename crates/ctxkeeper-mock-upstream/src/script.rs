//! The scripted agent run: make a real, unmodified agent run `steps` shell commands with
//! large outputs, then finish.
//!
//! With a [`Script`] configured, the mock answers like a model driving the agent that calls it,
//! in that agent's own tool schema:
//!
//! | request | a step | the end |
//! | --- | --- | --- |
//! | Anthropic with a `Bash` tool (Claude Code) | `Bash {"command", "description"}` | the text `All done.` |
//! | Responses with `exec_command` (Codex CLI ≥ 0.1xx), `shell_command` or `shell` | that tool with `{"cmd"}`, `{"command"}` or `{"command": ["bash", "-lc", …]}` | the text `All done.` |
//! | Chat with a `bash` tool (mini-swe-agent 2.x) | `bash {"command"}` | `bash` with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` |
//! | Chat without tools (mini-swe-agent text mode) | a ```` ```mswea_bash_command ```` (or ```` ```bash ````) block | the same submit command in a block |
//! | Chat or Anthropic with `exec_command`, `shell_command` or `shell` (an agent framework's loop: LangChain, the OpenAI Agents SDK, AgentScope) | that tool, as for Codex | the text `All done.` |
//! | any API with OpenClaw's `exec` tool (a chat assistant: one step a user turn) | `exec {"command"}` for the user's message, the text `Step k done.` once its result follows it | the text `All done.` |
//!
//! OpenClaw's own compaction (its summarizer's request, without tools) is not a step: it gets
//! the mock's ordinary answer.
//!
//! Step `k` runs `echo ctxkstep<k>out; seq 1 <n>`: a marker line first (every agent keeps the
//! head of a long output), then about [`Script::output_bytes`] bytes; the markers are what a
//! test searches the gateway's log for. The next step is one past the higher of the highest
//! marker in the request and the last step the mock handed to the same caller (API and key):
//! like a model that remembers where it was, the script does not start over when a gateway
//! compacted the earlier steps out of the request. A step counts as handed out only when its
//! answer is sent (not when the request was refused as too large). Requests the script does
//! not recognise (a title request without tools, say) get the mock's ordinary answer, and an
//! agent's own compaction prompt (Codex's "CONTEXT CHECKPOINT COMPACTION", Claude Code's
//! compact) gets a text summary, as a model that follows it writes.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::reply::{Answer, Api};

/// The marker's text before and after the step number.
const MARKER_PREFIX: &str = "ctxkstep";
const MARKER_SUFFIX: &str = "out";

/// The command mini-swe-agent treats as "done".
const SUBMIT: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

/// A scripted run: `steps` tool calls, each printing about `output_bytes` bytes, then the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// How many commands to run before finishing.
    pub steps: u32,
    /// Roughly how many bytes each command prints.
    pub output_bytes: u64,
}

/// The marker step `step` prints (and a test searches for).
pub fn marker(step: u32) -> String {
    format!("{MARKER_PREFIX}{step}{MARKER_SUFFIX}")
}

/// The shell command of step `step`: its marker, then `seq 1 n` for about `bytes` bytes.
pub fn command(step: u32, bytes: u64) -> String {
    format!("echo {}; seq 1 {}", marker(step), seq_count(bytes))
}

/// The `n` for which `seq 1 n` prints at least `bytes` bytes.
fn seq_count(bytes: u64) -> u64 {
    let mut printed: u64 = 0;
    let mut n: u64 = 0;
    while printed < bytes {
        n += 1;
        printed += u64::from(n.checked_ilog10().unwrap_or(0)) + 2;
    }
    n.max(1)
}

/// The scripted answer and the step it hands out, or `None` when the request is not one of a
/// known agent's loop. `handed_out` is the last step already given to this caller.
pub(crate) fn answer(
    script: &Script,
    api: Api,
    body: &Map<String, Value>,
    handed_out: u32,
) -> Option<(Answer, u32)> {
    if is_openclaw_summarizer(api, body) {
        return None;
    }
    let next = highest_marker(api, body).unwrap_or(0).max(handed_out) + 1;
    // OpenClaw runs one step a user turn: once the step's result follows the user's message
    // the turn ends with a text, and the step handed out stays the last one.
    if next <= script.steps && is_openclaw(api, body) && turn_has_tool_result(api, body) {
        let done = next - 1;
        return Some((Answer::Text(format!("Step {done} done.")), done));
    }
    answer_step(script, api, body, next).map(|answer| (answer, next))
}

/// Whether the request is OpenClaw's: its shell tool is `exec` (Codex's is `exec_command`).
fn is_openclaw(api: Api, body: &Map<String, Value>) -> bool {
    let tools = tool_names(api, body);
    tools.iter().any(|t| t == "exec") && !tools.iter().any(|t| t == "exec_command")
}

/// Whether a tool result follows the request's last message from the user (OpenClaw's own
/// context notes, user messages it adds after a tool result, do not count as the user's).
fn turn_has_tool_result(api: Api, body: &Map<String, Value>) -> bool {
    let field = if api == Api::Responses {
        "input"
    } else {
        "messages"
    };
    let items = body.get(field).and_then(Value::as_array);
    for item in items.into_iter().flatten().rev() {
        let role = item.get("role").and_then(Value::as_str);
        let blocks = item.get("content").and_then(Value::as_array);
        let tool_result = match api {
            Api::Chat => role == Some("tool"),
            Api::Responses => {
                item.get("type").and_then(Value::as_str) == Some("function_call_output")
            }
            Api::Anthropic => blocks.is_some_and(|blocks| {
                blocks
                    .iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            }),
        };
        if tool_result {
            return true;
        }
        if role == Some("user") && !is_openclaw_note(item) {
            return false;
        }
    }
    false
}

/// Whether the request is OpenClaw's compaction summarizer (its instructions open so).
fn is_openclaw_summarizer(api: Api, body: &Map<String, Value>) -> bool {
    const OPENING: &str = "You are a context summarization assistant.";
    let system = match api {
        Api::Anthropic => body.get("system").cloned(),
        Api::Responses => body.get("instructions").cloned(),
        Api::Chat => None,
    };
    let first = body
        .get(if api == Api::Responses {
            "input"
        } else {
            "messages"
        })
        .and_then(Value::as_array)
        .and_then(|items| items.first())
        .filter(|m| {
            matches!(
                m.get("role").and_then(Value::as_str),
                Some("system" | "developer")
            )
        })
        .cloned();
    [system, first].into_iter().flatten().any(|value| {
        let text = value.get("content").unwrap_or(&value);
        let text = match text {
            Value::String(text) => text.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect(),
            _ => String::new(),
        };
        text.trim_start().starts_with(OPENING)
    })
}

/// Whether a user message is one of OpenClaw's own context notes.
fn is_openclaw_note(message: &Value) -> bool {
    let text = match message.get("content") {
        Some(Value::String(text)) => text.as_str(),
        Some(Value::Array(blocks)) => blocks
            .first()
            .and_then(|b| b.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default(),
        _ => "",
    };
    text.trim_start()
        .starts_with("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>")
}

fn answer_step(script: &Script, api: Api, body: &Map<String, Value>, next: u32) -> Option<Answer> {
    let finished = next > script.steps;
    let cmd = command(next, script.output_bytes);
    let tools = tool_names(api, body);
    let has = |name: &str| tools.iter().any(|t| t == name);
    let call = |name: &str, arguments: Value| {
        Some(Answer::ToolCall {
            name: name.to_owned(),
            arguments: arguments.to_string(),
        })
    };
    match api {
        Api::Anthropic if has("Bash") => {
            if finished {
                Some(Answer::Text("All done.".into()))
            } else {
                call(
                    "Bash",
                    json!({"command": cmd, "description": format!("Step {next}")}),
                )
            }
        }
        Api::Chat if has("bash") => {
            let command = if finished { SUBMIT.to_owned() } else { cmd };
            call("bash", json!({"command": command}))
        }
        // OpenClaw's shell tool, in any API (one step a user turn: see `answer`).
        _ if is_openclaw(api, body) => {
            if finished {
                Some(Answer::Text("All done.".into()))
            } else {
                call("exec", json!({"command": cmd}))
            }
        }
        // Codex's tools, in any API: an agent framework's loop (LangChain, the OpenAI Agents
        // SDK, AgentScope) declaring one of them runs the steps and stops on the text.
        _ if has("exec_command") || has("shell_command") || has("shell") => {
            if finished {
                Some(Answer::Text("All done.".into()))
            } else if has("exec_command") {
                call("exec_command", json!({"cmd": cmd}))
            } else if has("shell_command") {
                call("shell_command", json!({"command": cmd}))
            } else {
                call("shell", json!({"command": ["bash", "-lc", cmd]}))
            }
        }
        Api::Chat if tools.is_empty() => {
            let command = if finished { SUBMIT.to_owned() } else { cmd };
            // mini-swe-agent 2.x's text mode asks for its own fence; 1.x for a bash block.
            let fence = if body
                .get("messages")
                .is_some_and(|m| m.to_string().contains("mswea_bash_command"))
            {
                "mswea_bash_command"
            } else {
                "bash"
            };
            Some(Answer::Text(format!(
                "THOUGHT: step {next}.\n\n```{fence}\n{command}\n```"
            )))
        }
        _ => None,
    }
}

/// The names of the function tools a request declares.
fn tool_names(api: Api, body: &Map<String, Value>) -> Vec<String> {
    let tools = body.get("tools").and_then(Value::as_array);
    tools
        .into_iter()
        .flatten()
        .filter_map(|tool| {
            let name = match api {
                Api::Chat => tool.get("function").and_then(|f| f.get("name")),
                Api::Responses | Api::Anthropic => tool.get("name"),
            };
            name.and_then(Value::as_str).map(str::to_owned)
        })
        .collect()
}

/// The highest step marker in the conversation, if any.
fn highest_marker(api: Api, body: &Map<String, Value>) -> Option<u32> {
    let field = match api {
        Api::Responses => "input",
        Api::Chat | Api::Anthropic => "messages",
    };
    let text = body.get(field)?.to_string();
    let mut highest = None;
    let mut rest = text.as_str();
    while let Some(at) = rest.find(MARKER_PREFIX) {
        rest = &rest[at + MARKER_PREFIX.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0
            && rest[digits..].starts_with(MARKER_SUFFIX)
            && let Ok(step) = rest[..digits].parse::<u32>()
        {
            highest = highest.max(Some(step));
        }
    }
    highest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    const SCRIPT: Script = Script {
        steps: 2,
        output_bytes: 100,
    };

    fn step(api: Api, body: &Map<String, Value>, handed_out: u32) -> Option<Answer> {
        answer(&SCRIPT, api, body, handed_out).map(|(answer, _)| answer)
    }

    #[test]
    fn a_compacted_request_continues_where_the_caller_was() {
        let tools = json!([{"name": "Bash", "input_schema": {}}]);
        let compacted =
            object(json!({"tools": tools, "messages": [{"role": "user", "content": "summary"}]}));
        let (answer, step) = answer(&SCRIPT, Api::Anthropic, &compacted, 1).expect("scripted");
        assert_eq!(step, 2);
        assert!(
            matches!(answer, Answer::ToolCall { arguments, .. } if arguments.contains("ctxkstep2out"))
        );
        assert_eq!(
            super::answer(&SCRIPT, Api::Anthropic, &compacted, 2).map(|(a, _)| a),
            Some(Answer::Text("All done.".into()))
        );
    }

    fn arguments(answer: Option<Answer>) -> (String, Value) {
        match answer {
            Some(Answer::ToolCall { name, arguments }) => (
                name,
                serde_json::from_str(&arguments).expect("JSON arguments"),
            ),
            other => panic!("expected a call, got {other:?}"),
        }
    }

    #[test]
    fn seq_prints_at_least_the_bytes_asked_for() {
        let printed = |n: u64| (1..=n).map(|i| i.to_string().len() as u64 + 1).sum::<u64>();
        for bytes in [1, 10, 11, 100, 5_000, 40_000] {
            let n = seq_count(bytes);
            assert!(
                printed(n) >= bytes && printed(n - 1) < bytes,
                "{bytes}: {n}"
            );
        }
    }

    #[test]
    fn claude_code_runs_bash_until_the_last_marker_then_answers() {
        let tools =
            json!([{"name": "Agent", "input_schema": {}}, {"name": "Bash", "input_schema": {}}]);
        let first =
            object(json!({"tools": tools, "messages": [{"role": "user", "content": "go"}]}));
        let (name, args) = arguments(step(Api::Anthropic, &first, 0));
        assert_eq!(name, "Bash");
        assert!(
            args["command"]
                .as_str()
                .is_some_and(|c| c.starts_with("echo ctxkstep1out; seq 1 ")),
            "{args}"
        );
        // A compacted history that only kept the newest result still continues from it.
        let later = object(json!({"tools": tools, "messages": [
            {"role": "user", "content": "summary of steps before"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ctxkstep1out\n1\n2"}]}]}));
        let (_, args) = arguments(step(Api::Anthropic, &later, 0));
        assert!(
            args["command"]
                .as_str()
                .is_some_and(|c| c.starts_with("echo ctxkstep2out")),
            "{args}"
        );
        let done = object(json!({"tools": tools, "messages": [
            {"role": "user", "content": "ctxkstep2out ctxkstep1out"}]}));
        assert_eq!(
            step(Api::Anthropic, &done, 0),
            Some(Answer::Text("All done.".into()))
        );
        // Without the agent's tool it is not the agent's loop.
        let title = object(json!({"messages": [{"role": "user", "content": "title?"}]}));
        assert_eq!(step(Api::Anthropic, &title, 0), None);
    }

    #[test]
    fn codex_gets_its_own_exec_tool() {
        for (tool, key) in [
            ("exec_command", "cmd"),
            ("shell_command", "command"),
            ("shell", "command"),
        ] {
            let body = object(json!({"tools": [{"type": "function", "name": tool}], "input": []}));
            let (name, args) = arguments(step(Api::Responses, &body, 0));
            assert_eq!(name, tool);
            let text = args[key].to_string();
            assert!(text.contains("ctxkstep1out"), "{tool}: {args}");
        }
    }

    #[test]
    fn a_framework_loop_gets_codex_tools_in_chat_and_anthropic_then_the_end() {
        let chat = json!([{"type": "function", "function": {"name": "shell_command"}}]);
        let body = object(json!({"tools": chat, "messages": [{"role": "user", "content": "go"}]}));
        let (name, args) = arguments(step(Api::Chat, &body, 0));
        assert_eq!(name, "shell_command");
        assert!(
            args["command"].to_string().contains("ctxkstep1out"),
            "{args}"
        );
        let done = object(json!({"tools": chat, "messages": [
            {"role": "tool", "tool_call_id": "c", "content": "ctxkstep2out"}]}));
        assert_eq!(
            step(Api::Chat, &done, 0),
            Some(Answer::Text("All done.".into()))
        );
        let anthropic = object(
            json!({"tools": [{"name": "exec_command", "input_schema": {}}],
            "messages": [{"role": "user", "content": "go"}]}),
        );
        let (name, args) = arguments(step(Api::Anthropic, &anthropic, 0));
        assert_eq!(name, "exec_command");
        assert!(args["cmd"].to_string().contains("ctxkstep1out"), "{args}");
    }

    #[test]
    fn openclaw_runs_one_exec_step_a_user_turn() {
        let tools = json!([{"type": "function", "function": {"name": "read"}},
            {"type": "function", "function": {"name": "exec"}}]);
        let turn = object(json!({"tools": tools, "messages": [
            {"role": "system", "content": "You are a personal assistant running inside OpenClaw."},
            {"role": "user", "content": "go"}]}));
        let (first, handed) = answer(&SCRIPT, Api::Chat, &turn, 0).expect("scripted");
        assert_eq!(handed, 1);
        let (name, args) = arguments(Some(first));
        assert_eq!(name, "exec");
        assert!(
            args["command"].to_string().contains("ctxkstep1out"),
            "{args}"
        );
        // The step's result ends the turn; the step handed out stays step 1.
        let result = object(json!({"tools": tools, "messages": [
            {"role": "user", "content": "go"},
            {"role": "tool", "tool_call_id": "c", "content": "ctxkstep1out"}]}));
        assert_eq!(
            answer(&SCRIPT, Api::Chat, &result, 1),
            Some((Answer::Text("Step 1 done.".into()), 1))
        );
        // So does OpenClaw's own context note after the result.
        let noted = object(json!({"tools": tools, "messages": [
            {"role": "user", "content": "go"},
            {"role": "tool", "tool_call_id": "c", "content": "ctxkstep1out"},
            {"role": "user", "content": [{"type": "text",
                "text": "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\nActive exec sessions: none"}]}]}));
        assert_eq!(
            answer(&SCRIPT, Api::Chat, &noted, 1),
            Some((Answer::Text("Step 1 done.".into()), 1))
        );
        // The next user turn runs the next step, even when its history lost the marker.
        let next = object(json!({"tools": tools, "messages": [
            {"role": "user", "content": "summary"}, {"role": "user", "content": "go on"}]}));
        let (name, args) = arguments(step_after(&next, 1));
        assert_eq!(name, "exec");
        assert!(
            args["command"].to_string().contains("ctxkstep2out"),
            "{args}"
        );
        // After the last step's result, and at every turn after it: the end.
        let last = object(json!({"tools": tools, "messages": [
            {"role": "tool", "tool_call_id": "c", "content": "ctxkstep2out"}]}));
        assert_eq!(step_after(&last, 2), Some(Answer::Text("All done.".into())));
        assert_eq!(step_after(&next, 2), Some(Answer::Text("All done.".into())));
        // OpenClaw's summarizer (no tools) is not a step, nor mini-swe-agent's text mode.
        let summarizer = object(json!({"messages": [
            {"role": "system", "content": "You are a context summarization assistant. Your task is to read a conversation"},
            {"role": "user", "content": "<conversation>ctxkstep1out</conversation>"}]}));
        assert_eq!(answer(&SCRIPT, Api::Chat, &summarizer, 1), None);
        // Codex declares exec_command: not OpenClaw.
        let codex = json!([{"type": "function", "name": "exec_command"}, {"type": "function", "name": "exec"}]);
        let body = object(json!({"tools": codex, "input": []}));
        assert_eq!(arguments(step(Api::Responses, &body, 0)).0, "exec_command");
    }

    fn step_after(body: &Map<String, Value>, handed_out: u32) -> Option<Answer> {
        step(Api::Chat, body, handed_out)
    }

    #[test]
    fn mini_swe_agent_submits_with_its_command() {
        let tools = json!([{"type": "function", "function": {"name": "bash"}}]);
        let body = object(json!({"tools": tools, "messages": [
            {"role": "tool", "tool_call_id": "c", "content": "ctxkstep2out"}]}));
        let (_, args) = arguments(step(Api::Chat, &body, 0));
        assert_eq!(args["command"], SUBMIT);
        let text_mode = object(json!({"messages": [
            {"role": "user", "content": "reply in a ```mswea_bash_command block"}]}));
        let Some(Answer::Text(text)) = step(Api::Chat, &text_mode, 0) else {
            panic!("text mode answers in text");
        };
        assert!(
            text.contains("```mswea_bash_command\necho ctxkstep1out"),
            "{text}"
        );
    }

    #[test]
    fn markers_are_read_exactly() {
        let body = object(
            json!({"messages": [{"content": "ctxkstep12out ctxkstep3out ctxkstepXout ctxkstep99"}]}),
        );
        assert_eq!(highest_marker(Api::Chat, &body), Some(12));
        assert_eq!(
            highest_marker(Api::Chat, &object(json!({"messages": []}))),
            None
        );
    }
}
