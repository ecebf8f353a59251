//! OpenHands resolver and evaluation output.
//!
//! The file is JSON Lines with one run per line; a run's `history` is a list of events, each
//! either an *action* (`"action": "run"`, …) or an *observation* (`"observation": "run"`, …).
//! Older files write an event's fields flat on the event; newer ones nest them under `args`
//! (actions) and `extras` (observations) beside `id`, `source`, `cause` and `timestamp`; the
//! oldest wrote `history` as `[action, observation]` pairs. All three read the same way. Each
//! line becomes one [`Session`], with the id `instance_id`, else `owner/repo#number` of the
//! issue, else `line-<n>`.
//!
//! The mapping to messages:
//!
//! | event | message |
//! | --- | --- |
//! | `message` action from the user (`source: "user"`, or, without `source`, before the agent acted) | user text |
//! | `message` action from the agent | assistant text |
//! | an action answered by an observation (`run`, `run_ipython`, `browse`, `edit`, `read`, `think`, …) | assistant message: the `thought` as text, then a tool call `oh-<event index>` named after the action, its arguments the action's own fields as a JSON object |
//! | its observation | a `tool` message answering that call with the observation's `content` (`error` observations flagged as errors) |
//! | `finish`, `reject` | assistant text (`final_thought`, else `thought`, else `content`) |
//! | `system` action (newer files) | system message; its `tools` become the session's tools |
//! | an action that nothing answered | assistant text (its thought, if any) with `action` and `arguments` kept in `extra`; counted |
//! | an observation that answers no action (an `error` from the environment, say) | user text; counted |
//! | `change_agent_state`, `recall`, `condensation` actions; `agent_state_changed`, `null` observations | skipped; counted |
//!
//! An observation answers the action its `cause` names; without a `cause`, the latest
//! unanswered action of the same type, else the unanswered action right before it. Every
//! event field not mapped above (`id`, `timestamp`, `source`, `is_confirmed`, `exit_code`,
//! `extras`, …) is kept in [`Message::extra`], and the messages carry the origin hint
//! `openhands`. If no user message results, the run's `instruction` opens the session as one.
//! The model is `metadata.llm_config.model` when present, else the first model a
//! `tool_call_metadata` response names.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::{Session, Warnings, id_text, json_lines, line_object, unique_id, wire};
use crate::ParseError;
use crate::json_kind;
use crate::model::{DataSource, Extra, Message, Part, Role, ToolSpec};

/// The origin hint of messages from this importer.
const ORIGIN: &str = "openhands";

/// Top-level event keys that are bookkeeping, not an action's own fields (flat events).
const ENVELOPE_KEYS: [&str; 9] = [
    "id",
    "timestamp",
    "source",
    "message",
    "cause",
    "tool_call_metadata",
    "llm_metrics",
    "timeout",
    "args",
];

/// Action fields that describe how the action was run rather than what it asks for; they go
/// to `extra`, not into the tool-call arguments.
const NON_ARGUMENT_KEYS: [&str; 12] = [
    "thought",
    "reasoning_content",
    "is_confirmed",
    "confirmation_state",
    "action_risk",
    "security_risk",
    "keep_prompt",
    "kernel_init_code",
    "blocking",
    "hidden",
    "impl_source",
    "wait_for_response",
];

/// Actions that are never tool calls: they are messages in their own right.
const TEXT_ACTIONS: [&str; 4] = ["message", "system", "finish", "reject"];
/// Actions that are agent-loop bookkeeping, not conversation.
const SKIPPED_ACTIONS: [&str; 4] = ["change_agent_state", "recall", "condensation", "null"];
/// Observations that are agent-loop bookkeeping, not conversation.
const SKIPPED_OBSERVATIONS: [&str; 2] = ["agent_state_changed", "null"];

/// Imports every run of an OpenHands output file.
pub(super) fn import(text: &str, warnings: &mut Warnings) -> Result<Vec<Session>, ParseError> {
    let mut sessions = Vec::new();
    let mut seen = HashSet::new();
    for (line_no, entry) in json_lines(text) {
        let run = line_object(entry?, line_no)?;
        let session = import_run(&run, line_no, warnings).map_err(|err| err.on_line(line_no))?;
        let id = unique_id(&mut seen, session.id.clone());
        sessions.push(Session { id, ..session });
    }
    Ok(sessions)
}

/// What an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind<'a> {
    Action(&'a str),
    Observation(&'a str),
    Other,
}

/// One event of a run's history.
#[derive(Debug)]
struct Event<'a> {
    path: String,
    map: &'a Map<String, Value>,
    kind: Kind<'a>,
}

impl Event<'_> {
    /// The action's own fields: `args` in newer files, the event minus its envelope in older.
    fn args(&self) -> Map<String, Value> {
        match self.map.get("args") {
            Some(Value::Object(args)) => args.clone(),
            _ => self
                .map
                .iter()
                .filter(|(key, _)| {
                    key.as_str() != "action" && !ENVELOPE_KEYS.contains(&key.as_str())
                })
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        }
    }

    /// The event fields outside the action's own fields.
    fn envelope(&self) -> Extra {
        let nested = matches!(self.map.get("args"), Some(Value::Object(_)));
        self.map
            .iter()
            .filter(|(key, _)| {
                let key = key.as_str();
                key != "action" && key != "args" && (nested || ENVELOPE_KEYS.contains(&key))
            })
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()
    }
}

fn import_run(
    run: &Map<String, Value>,
    line_no: usize,
    warnings: &mut Warnings,
) -> Result<Session, ParseError> {
    let history = super::opt_array(run, "history", "$", "events")?
        .ok_or_else(|| ParseError::at("$", "missing `history`"))?;
    let events = flatten(history)?;
    let answers = pair(&events);
    let mut messages = Vec::with_capacity(events.len());
    let mut tools = Vec::new();
    let mut agent_acted = false;
    for (index, event) in events.iter().enumerate() {
        match event.kind {
            Kind::Action(name) if SKIPPED_ACTIONS.contains(&name) => {
                warnings.add(format!(
                    "openhands: skipped action/{name} (agent bookkeeping; not sent to the model)"
                ));
            }
            Kind::Action(name) if TEXT_ACTIONS.contains(&name) => {
                let message = text_action(event, name, agent_acted, &mut tools)?;
                match message {
                    Some(message) => messages.push(message),
                    None => warnings.add(format!(
                        "openhands: skipped empty {name} action (no text to send)"
                    )),
                }
            }
            Kind::Action(name) => {
                agent_acted = true;
                let answered = answers[index].is_some();
                if !answered {
                    warnings.add(format!("openhands: action without observation: {name}"));
                }
                messages.extend(tool_action(event, name, index, answered));
            }
            Kind::Observation(name) => match answers[index] {
                Some(action) => messages.push(observation(event, name, &format!("oh-{action}"))?),
                None if SKIPPED_OBSERVATIONS.contains(&name) => {
                    warnings.add(format!(
                        "openhands: skipped observation/{name} (agent bookkeeping; not sent to \
                         the model)"
                    ));
                }
                None => {
                    warnings.add(format!(
                        "openhands: observation without action kept as user message: {name}"
                    ));
                    let mut message = Message::user(content_of(event)?);
                    message.extra = without(event.map, &["content"]);
                    message.hints.origin = Some(ORIGIN.to_string());
                    messages.push(message);
                }
            },
            Kind::Other => warnings
                .add("openhands: skipped event without action or observation (not a message)"),
        }
    }
    if !messages.iter().any(|m| m.role == Role::User)
        && let Some(Value::String(instruction)) = run.get("instruction")
    {
        let mut message = Message::user(instruction.clone());
        message
            .extra
            .insert("from".to_string(), Value::String("instruction".to_string()));
        message.hints.origin = Some(ORIGIN.to_string());
        let at = messages
            .iter()
            .take_while(|m| m.role.is_instruction())
            .count();
        messages.insert(at, message);
    }
    let id = id_text(run.get("instance_id"))
        .or_else(|| issue_id(run.get("issue")))
        .unwrap_or_else(|| format!("line-{line_no}"));
    Ok(Session {
        id,
        model: model_of(run, &events),
        messages,
        tools,
        parent: None,
    })
}

/// Lists the events in order, unpacking the oldest `[action, observation]` pairs.
fn flatten(history: &[Value]) -> Result<Vec<Event<'_>>, ParseError> {
    let mut events = Vec::with_capacity(history.len());
    for (index, item) in history.iter().enumerate() {
        let path = format!("$.history[{index}]");
        match item {
            Value::Object(map) => events.push(event(map, path)?),
            Value::Array(pair) => {
                for (n, inner) in pair.iter().enumerate() {
                    let path = format!("{path}[{n}]");
                    let map = super::object_at(inner, &path, "an event")?;
                    events.push(event(map, path)?);
                }
            }
            other => {
                return Err(ParseError::at(
                    path,
                    format!("expected an event object, found {}", json_kind(other)),
                ));
            }
        }
    }
    Ok(events)
}

fn event(map: &Map<String, Value>, path: String) -> Result<Event<'_>, ParseError> {
    let kind = match (
        super::opt_str(map, "action", &path)?,
        super::opt_str(map, "observation", &path)?,
    ) {
        (Some(action), _) => Kind::Action(action),
        (None, Some(observation)) => Kind::Observation(observation),
        (None, None) => Kind::Other,
    };
    Ok(Event { path, map, kind })
}

/// For every event, the index of the event it pairs with: an action's observation, an
/// observation's action.
fn pair(events: &[Event<'_>]) -> Vec<Option<usize>> {
    let mut answers = vec![None; events.len()];
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut open: Vec<usize> = Vec::new();
    for (index, event) in events.iter().enumerate() {
        match event.kind {
            Kind::Action(name) => {
                if let Some(id) = id_text(event.map.get("id")) {
                    by_id.insert(id, index);
                }
                if !TEXT_ACTIONS.contains(&name) && !SKIPPED_ACTIONS.contains(&name) {
                    open.push(index);
                }
            }
            Kind::Observation(name) => {
                let target = match id_text(event.map.get("cause")) {
                    Some(cause) => by_id.get(&cause).copied().filter(|a| open.contains(a)),
                    None => open
                        .iter()
                        .rev()
                        .copied()
                        .find(|&a| events[a].kind == Kind::Action(name))
                        .or_else(|| open.last().copied().filter(|&a| a + 1 == index)),
                };
                if let Some(action) = target {
                    open.retain(|&a| a != action);
                    answers[action] = Some(index);
                    answers[index] = Some(action);
                }
            }
            Kind::Other => {}
        }
    }
    answers
}

/// A `message`, `system`, `finish` or `reject` action as a message; `None` if it says nothing.
fn text_action(
    event: &Event<'_>,
    name: &str,
    agent_acted: bool,
    tools: &mut Vec<ToolSpec>,
) -> Result<Option<Message>, ParseError> {
    let mut args = event.args();
    let args_path = if event.map.contains_key("args") {
        format!("{}.args", event.path)
    } else {
        event.path.clone()
    };
    let role = match name {
        "system" => Role::System,
        "message" => match super::opt_str(event.map, "source", &event.path)? {
            Some("agent") => Role::Assistant,
            Some(_) => Role::User,
            None if agent_acted => Role::Assistant,
            None => Role::User,
        },
        _ => Role::Assistant,
    };
    let text_keys: &[&str] = match name {
        "finish" | "reject" => &["final_thought", "thought", "content"],
        _ => &["content"],
    };
    let mut text = String::new();
    for key in text_keys {
        if let Some(found) = super::opt_str(&args, key, &args_path)?.filter(|t| !t.is_empty()) {
            text = found.to_string();
            args.shift_remove(*key);
            break;
        }
    }
    let mut parts = Vec::new();
    if !text.is_empty() {
        parts.push(Part::text(text));
    }
    for key in ["image_urls", "images_urls"] {
        if let Some(Value::Array(urls)) = args.get(key) {
            let images: Vec<Part> = urls.iter().filter_map(Value::as_str).map(image).collect();
            if images.len() == urls.len() {
                parts.extend(images);
                args.shift_remove(key);
            }
        }
    }
    if name == "system"
        && let Some(value) = args.get("tools")
    {
        tools.extend(wire::chat_tools(value).map_err(|err| ParseError {
            message: format!("{} (in the system action's tools)", err.message),
            ..err
        })?);
        args.shift_remove("tools");
    }
    if parts.is_empty() {
        return Ok(None);
    }
    let mut message = Message::new(role, parts);
    message.extra = event.envelope();
    if name != "message" {
        message
            .extra
            .insert("action".to_string(), Value::String(name.to_string()));
    }
    message.extra.extend(args);
    message.hints.origin = Some(ORIGIN.to_string());
    Ok(Some(message))
}

/// A tool-like action: its thought, then the call. When nothing answered it, the thought alone
/// with the action kept in `extra`, or nothing if there is no thought: a call without a result
/// or an empty assistant message would make an invalid request.
fn tool_action(event: &Event<'_>, name: &str, index: usize, answered: bool) -> Option<Message> {
    let args = event.args();
    let mut parts = Vec::new();
    if let Some(Value::String(thought)) = args.get("thought").or_else(|| event.map.get("thought"))
        && !thought.is_empty()
    {
        parts.push(Part::text(thought.clone()));
    }
    let mut extra = event.envelope();
    let mut arguments = Map::new();
    for (key, value) in args {
        if key == "thought" {
            continue;
        }
        if NON_ARGUMENT_KEYS.contains(&key.as_str()) {
            extra.insert(key, value);
        } else {
            arguments.insert(key, value);
        }
    }
    let arguments = Value::Object(arguments);
    if answered {
        parts.push(Part::tool_call(
            format!("oh-{index}"),
            name,
            arguments.to_string(),
        ));
    } else if parts.is_empty() {
        return None;
    } else {
        extra.insert("action".to_string(), Value::String(name.to_string()));
        extra.insert("arguments".to_string(), arguments);
    }
    let mut message = Message::new(Role::Assistant, parts);
    message.extra = extra;
    message.hints.origin = Some(ORIGIN.to_string());
    Some(message)
}

/// An observation answering the call `call_id`.
fn observation(event: &Event<'_>, name: &str, call_id: &str) -> Result<Message, ParseError> {
    let content = content_of(event)?;
    let part = Part::ToolResult {
        call_id: call_id.to_string(),
        content: vec![Part::text(content)],
        is_error: name == "error",
        extra: Extra::new(),
    };
    let mut message = Message::new(Role::Tool, vec![part]);
    message.extra = without(event.map, &["content"]);
    message.hints.origin = Some(ORIGIN.to_string());
    Ok(message)
}

/// An observation's `content` text (empty when absent).
fn content_of(event: &Event<'_>) -> Result<String, ParseError> {
    Ok(super::opt_str(event.map, "content", &event.path)?
        .unwrap_or_default()
        .to_string())
}

fn image(url: &str) -> Part {
    Part::Data {
        source: DataSource::Url {
            url: url.to_string(),
        },
        wire_type: Some("image_url".to_string()),
        extra: Extra::new(),
    }
}

/// A copy of `map` without `keys`.
fn without(map: &Map<String, Value>, keys: &[&str]) -> Extra {
    map.iter()
        .filter(|(key, _)| !keys.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// `owner/repo#number` of a resolver run's issue.
fn issue_id(issue: Option<&Value>) -> Option<String> {
    let issue = issue?;
    let owner = issue.get("owner")?.as_str()?;
    let repo = issue.get("repo")?.as_str()?;
    let number = id_text(issue.get("number"))?;
    Some(format!("{owner}/{repo}#{number}"))
}

fn model_of(run: &Map<String, Value>, events: &[Event<'_>]) -> Option<String> {
    let configured = run
        .get("metadata")
        .and_then(|m| m.pointer("/llm_config/model"))
        .and_then(Value::as_str)
        .map(str::to_string);
    configured.or_else(|| {
        events.iter().find_map(|event| {
            event
                .map
                .get("tool_call_metadata")?
                .pointer("/model_response/model")?
                .as_str()
                .map(str::to_string)
        })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::import::{TraceFormat, import};
    use crate::model::{Part, Role};

    fn run_line(run: serde_json::Value) -> String {
        run.to_string()
    }

    #[test]
    fn flat_events_map_to_calls_and_results() {
        let text = run_line(json!({
            "issue": {"owner": "neubig", "repo": "pr-viewer", "number": 5},
            "instruction": "Please fix",
            "history": [
                {"content": "Please fix", "images_urls": null, "wait_for_response": false,
                 "action": "message", "action_risk": null},
                {"command": "touch LICENSE", "thought": "Creating it.", "keep_prompt": true,
                 "action": "run", "is_confirmed": "confirmed", "action_risk": null},
                {"content": "ok", "command_id": -1, "command": "touch LICENSE", "exit_code": 0,
                 "observation": "run"},
                {"code": "print(1)", "thought": "", "action": "run_ipython",
                 "kernel_init_code": "from agentskills import *"},
                {"content": "1", "code": "print(1)", "observation": "run_ipython"},
                {"outputs": {}, "thought": "Done.", "action": "finish"}
            ]
        }));
        let trace = import(&text, TraceFormat::OpenHands).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.id, "neubig/pr-viewer#5");
        let roles: Vec<Role> = session.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Assistant,
                Role::Tool,
                Role::Assistant
            ]
        );
        let run = &session.messages[1];
        assert_eq!(run.text(), "Creating it.");
        assert_eq!(
            run.tool_calls().collect::<Vec<_>>(),
            [("oh-1", "run", r#"{"command":"touch LICENSE"}"#)]
        );
        assert_eq!(run.extra.get("is_confirmed"), Some(&json!("confirmed")));
        assert_eq!(run.extra.get("keep_prompt"), Some(&json!(true)));
        let result = &session.messages[2];
        assert_eq!(result.tool_result_ids().collect::<Vec<_>>(), ["oh-1"]);
        assert_eq!(result.text(), "ok");
        assert_eq!(result.extra.get("exit_code"), Some(&json!(0)));
        assert_eq!(
            session.messages[3].parts.len(),
            1,
            "an empty thought adds no text"
        );
        assert_eq!(
            session.messages[3].tool_calls().next(),
            Some(("oh-3", "run_ipython", r#"{"code":"print(1)"}"#))
        );
        assert_eq!(session.messages[5].text(), "Done.");
        assert_eq!(
            session.messages[5].extra.get("action"),
            Some(&json!("finish"))
        );
        assert!(trace.warnings.is_empty(), "{:?}", trace.warnings);
    }

    #[test]
    fn nested_events_pair_by_cause_and_skip_bookkeeping() {
        let text = run_line(json!({
            "instance_id": "django__django-1",
            "metadata": {"llm_config": {"model": "claude-3-5-sonnet"}},
            "instruction": "fix it",
            "history": [
                {"id": 0, "source": "agent", "action": "system",
                 "args": {"content": "You are OpenHands.", "tools": [
                    {"type": "function", "function": {"name": "execute_bash", "parameters": {"type": "object"}}}]}},
                {"id": 1, "source": "user", "action": "message", "message": "fix it",
                 "args": {"content": "fix it", "image_urls": ["https://x/y.png"], "wait_for_response": false}},
                {"id": 2, "source": "user", "action": "recall", "args": {"query": "fix it"}},
                {"id": 3, "source": "environment", "observation": "agent_state_changed",
                 "content": "", "extras": {"agent_state": "running"}},
                {"id": 4, "source": "agent", "action": "run", "message": "Running ls",
                 "args": {"command": "ls", "thought": "Look around.", "blocking": false, "is_input": false}},
                {"id": 5, "source": "agent", "action": "browse", "args": {"url": "https://a", "thought": "Read docs."}},
                {"id": 6, "source": "agent", "observation": "run", "cause": 4, "content": "a.py",
                 "extras": {"command": "ls", "metadata": {"exit_code": 0}}},
                {"id": 7, "source": "agent", "observation": "error", "cause": 99, "content": "boom"},
                {"id": 8, "source": "agent", "action": "message", "args": {"content": "Done!"}},
                {"id": 9, "source": "agent", "action": "future_thing", "args": {}},
                {"id": 10, "source": "agent", "observation": "future_thing", "cause": 9, "content": "ok"},
                {"id": 11, "timestamp": "t"}
            ]
        }));
        let trace = import(&text, TraceFormat::OpenHands).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.id, "django__django-1");
        assert_eq!(session.model.as_deref(), Some("claude-3-5-sonnet"));
        assert_eq!(session.tools.len(), 1);
        assert_eq!(session.tools[0].name, "execute_bash");
        let roles: Vec<Role> = session.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant, // run, answered by cause 4
                Role::Assistant, // browse, never answered: text
                Role::Tool,
                Role::User, // error observation whose cause is unknown
                Role::Assistant,
                Role::Assistant,
                Role::Tool,
            ]
        );
        assert!(matches!(session.messages[1].parts[1], Part::Data { .. }));
        let run = &session.messages[2];
        assert_eq!(run.text(), "Look around.");
        assert_eq!(
            run.tool_calls().collect::<Vec<_>>(),
            [("oh-4", "run", r#"{"command":"ls","is_input":false}"#)]
        );
        assert_eq!(run.extra.get("blocking"), Some(&json!(false)));
        assert_eq!(run.extra.get("message"), Some(&json!("Running ls")));
        let browse = &session.messages[3];
        assert!(!browse.has_tool_calls());
        assert_eq!(browse.text(), "Read docs.");
        assert_eq!(
            browse.extra.get("arguments"),
            Some(&json!({"url": "https://a"}))
        );
        assert_eq!(browse.extra.get("action"), Some(&json!("browse")));
        assert_eq!(
            session.messages[4].tool_result_ids().collect::<Vec<_>>(),
            ["oh-4"]
        );
        assert_eq!(session.messages[6].text(), "Done!");
        assert_eq!(
            session.messages[7].tool_calls().next().map(|c| c.1),
            Some("future_thing")
        );
        let w = &trace.warnings;
        assert_eq!(
            w.get("openhands: skipped action/recall (agent bookkeeping; not sent to the model)"),
            Some(&1)
        );
        assert_eq!(
            w.get("openhands: skipped observation/agent_state_changed (agent bookkeeping; not sent to the model)"),
            Some(&1)
        );
        assert_eq!(
            w.get("openhands: action without observation: browse"),
            Some(&1)
        );
        assert_eq!(
            w.get("openhands: observation without action kept as user message: error"),
            Some(&1)
        );
        assert_eq!(
            w.get("openhands: skipped event without action or observation (not a message)"),
            Some(&1)
        );
    }

    #[test]
    fn pair_lists_and_the_instruction_fallback() {
        let text = run_line(json!({
            "instance_id": 7,
            "instruction": "do the task",
            "history": [
                [{"action": "run", "command": "ls", "thought": "look"},
                 {"observation": "run", "content": "x"}],
                [{"action": "finish", "thought": ""}, {"observation": "null", "content": ""}]
            ]
        }));
        let trace = import(&text, TraceFormat::OpenHands).expect("imports");
        let session = &trace.sessions[0];
        assert_eq!(session.id, "7");
        let roles: Vec<Role> = session.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool]);
        assert_eq!(session.messages[0].text(), "do the task");
        assert_eq!(
            trace
                .warnings
                .get("openhands: skipped empty finish action (no text to send)"),
            Some(&1)
        );
        assert_eq!(
            trace.warnings.get(
                "openhands: skipped observation/null (agent bookkeeping; not sent to the model)"
            ),
            Some(&1)
        );
    }

    #[test]
    fn one_session_per_line_with_unique_ids() {
        let line = run_line(json!({"history": []}));
        let text = format!("{line}\n\n{line}\n");
        let trace = import(&text, TraceFormat::OpenHands).expect("imports");
        let ids: Vec<&str> = trace.sessions.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["line-1", "line-3"]);
    }

    #[test]
    fn errors_carry_the_line() {
        let good = run_line(json!({"history": []}));
        for (bad, line) in [
            (format!("{good}\n{{\"history\": 3}}"), 2),
            (format!("{good}\n{good}\n[1]"), 3),
            (r#"{"history": [1]}"#.to_string(), 1),
            (format!("{good}\n{{\"history\": [{{\"action\": 5}}]}}"), 2),
            (
                r#"{"history": [{"observation": "run", "content": 3}]}"#.to_string(),
                1,
            ),
            (format!("{good}\n{{\"history\": [\n"), 2),
            (r#"{"issue": {}}"#.to_string(), 1),
        ] {
            let err = import(&bad, TraceFormat::OpenHands).expect_err("must fail");
            assert!(
                err.to_string().starts_with(&format!("line {line},")),
                "{bad}: {err}"
            );
        }
    }
}
