//! Importers for real agent logs.
//!
//! Each importer turns one log format into [`Session`]s of neutral [`Message`]s, reusing the
//! wire adapters in [`crate::formats`] for every message that is already in a wire shape:
//!
//! | format | file | sessions | built on |
//! | --- | --- | --- | --- |
//! | [`TraceFormat::TauBench`] | JSON array of tasks | one per task | OpenAI chat messages |
//! | [`TraceFormat::SweAgent`] | `.traj` JSON object | one | OpenAI chat messages |
//! | [`TraceFormat::MiniSweAgent`] | `.traj.json` JSON object (`trajectory_format` `mini-swe-agent-1`, `-1.1`) | one | OpenAI chat messages |
//! | [`TraceFormat::OpenHands`] | JSON Lines, one run per line | one per line | synthesised from events |
//! | [`TraceFormat::ClaudeCode`] | JSON Lines, one entry per line | one, plus one per sub-agent ([`Session::parent`]) | Anthropic messages |
//! | [`TraceFormat::Codex`] | JSON Lines rollout | one | OpenAI Responses items |
//! | [`TraceFormat::OpenAiChat`], [`TraceFormat::Anthropic`], [`TraceFormat::Responses`] | a bare request body or message array | one | the adapter itself |
//!
//! The rules every importer keeps:
//!
//! - **Nothing crashes.** Malformed input (truncated JSON, wrong types, unknown roles) is a
//!   [`ParseError`] with its position: line and column for JSON syntax, a JSON path otherwise,
//!   placed on its 1-based line for JSON Lines files.
//! - **Newer or unknown entries are kept or counted, never fatal.** Entries an importer does not
//!   turn into messages (Codex `event_msg` duplicates, Claude Code `summary` lines, OpenHands
//!   state changes, mini-swe-agent's `exit` message, …) are counted in [`Trace::warnings`]
//!   under a key that says what and, where the importer knows it, why, such as
//!   `"claude-code: skipped summary (a title the UI shows; not sent to the model)"`.
//! - **Ids are kept as they are.** Tool-call ids repeat across a session (tau-bench reuses
//!   them); importers never rename them.
//! - **Trace metadata rides in `extra`.** Fields a log stores beside the wire message (SWE-agent
//!   `thought`/`action`, Claude Code `uuid`/`timestamp`, OpenHands event fields) are kept in
//!   [`Message::extra`], and such messages carry the importer's name in
//!   [`WireHints::origin`](crate::model::WireHints::origin), so an emitter that honours extras
//!   only for its own origin does not send them to a provider. Messages that are verbatim wire
//!   messages (tau-bench, Codex) keep the adapter's origin.
//!
//! ```
//! use ctxkeeper_core::import::{detect, import, TraceFormat};
//!
//! let text = r#"[{"task_id": 7, "trial": 0, "reward": 1.0, "info": {}, "traj": [
//!     {"role": "system", "content": "You are an airline agent."},
//!     {"role": "user", "content": "Cancel my booking."}
//! ]}]"#;
//! let format = detect(text, "gpt-4o-airline.json").unwrap();
//! assert_eq!(format, TraceFormat::TauBench);
//! let trace = import(text, format).unwrap();
//! assert_eq!(trace.sessions[0].id, "task-7-trial-0");
//! assert_eq!(trace.sessions[0].messages.len(), 2);
//! ```

mod claude_code;
mod codex;
mod detect;
mod mini_swe_agent;
mod openhands;
mod swe_agent;
mod tau_bench;
mod wire;

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::ParseError;
use crate::json_kind;
use crate::model::{Message, ToolSpec};

pub use detect::detect;

/// A trace file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// tau-bench `historical_trajectories/*.json`: an array of tasks, each with a `traj` of
    /// OpenAI chat messages.
    TauBench,
    /// SWE-agent `.traj` (both the plain-text and the function-calling `history`).
    SweAgent,
    /// mini-swe-agent `.traj.json` (`trajectory_format` `mini-swe-agent-1` and `-1.1`).
    MiniSweAgent,
    /// OpenHands resolver output (JSON Lines with an event `history`).
    OpenHands,
    /// Claude Code session JSONL.
    ClaudeCode,
    /// Codex CLI rollout JSONL.
    Codex,
    /// A bare OpenAI Chat Completions request body or message array.
    OpenAiChat,
    /// A bare Anthropic Messages request body.
    Anthropic,
    /// A bare OpenAI Responses request body or input-item array.
    Responses,
}

impl TraceFormat {
    /// All formats, in the order auto-detection tries them.
    pub const ALL: [TraceFormat; 9] = [
        TraceFormat::TauBench,
        TraceFormat::SweAgent,
        TraceFormat::MiniSweAgent,
        TraceFormat::OpenHands,
        TraceFormat::ClaudeCode,
        TraceFormat::Codex,
        TraceFormat::OpenAiChat,
        TraceFormat::Anthropic,
        TraceFormat::Responses,
    ];

    /// Command-line name (`tau-bench`, `swe-agent`, `mini-swe-agent`, `openhands`,
    /// `claude-code`, `codex`, `openai-chat`, `anthropic`, `responses`).
    pub fn as_str(self) -> &'static str {
        match self {
            TraceFormat::TauBench => "tau-bench",
            TraceFormat::SweAgent => "swe-agent",
            TraceFormat::MiniSweAgent => "mini-swe-agent",
            TraceFormat::OpenHands => "openhands",
            TraceFormat::ClaudeCode => "claude-code",
            TraceFormat::Codex => "codex",
            TraceFormat::OpenAiChat => "openai-chat",
            TraceFormat::Anthropic => "anthropic",
            TraceFormat::Responses => "responses",
        }
    }
}

impl std::fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TraceFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<TraceFormat, String> {
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = TraceFormat::ALL.iter().map(|f| f.as_str()).collect();
                format!(
                    "unknown trace format {s:?} (expected auto or one of {})",
                    names.join(", ")
                )
            })
    }
}

/// One conversation of a trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Session {
    /// An id from the trace (task id, session id) or the position in the file.
    pub id: String,
    pub model: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    /// For a sub-agent's conversation: the conversation and the tool call that started it.
    pub parent: Option<ParentLink>,
}

impl Session {
    /// A session of a trace that names no tools and no parent conversation.
    pub fn new(id: String, model: Option<String>, messages: Vec<Message>) -> Session {
        Session {
            id,
            model,
            messages,
            tools: Vec::new(),
            parent: None,
        }
    }
}

/// Where a sub-agent's conversation came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentLink {
    /// The id of the session that started it (a [`Session::id`] of the same trace).
    pub session: String,
    /// The id of the tool call (Claude Code's `Task` / `Agent`) that started it, when the trace
    /// says which one.
    pub tool_call_id: Option<String>,
}

/// A parsed trace: one or more sessions.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub format: TraceFormat,
    pub sessions: Vec<Session>,
    /// Entries the importer kept opaque or skipped, counted by kind
    /// with the reason (`"codex: skipped event_msg/token_count (an event for the UI …)"`).
    pub warnings: BTreeMap<String, usize>,
}

/// Imports a trace of a known format.
///
/// Errors carry the position of the first problem; see the [module docs](self) for what is
/// skipped (and counted in [`Trace::warnings`]) rather than rejected.
pub fn import(text: &str, format: TraceFormat) -> Result<Trace, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut warnings = Warnings::default();
    let sessions = match format {
        TraceFormat::TauBench => tau_bench::import(text)?,
        TraceFormat::SweAgent => swe_agent::import(text, &mut warnings)?,
        TraceFormat::MiniSweAgent => mini_swe_agent::import(text, &mut warnings)?,
        TraceFormat::OpenHands => openhands::import(text, &mut warnings)?,
        TraceFormat::ClaudeCode => claude_code::import(text, &mut warnings)?,
        TraceFormat::Codex => codex::import(text, &mut warnings)?,
        TraceFormat::OpenAiChat | TraceFormat::Anthropic | TraceFormat::Responses => {
            vec![wire::import_bare(text, format)?]
        }
    };
    Ok(Trace {
        format,
        sessions,
        warnings: warnings.counts,
    })
}

/// Imports a Claude Code session together with its sub-agents.
///
/// `text` is the session file followed by the sub-agent files Claude Code 2.x keeps beside it
/// (`<session>/subagents/agent-<agentId>.jsonl`); `subagent_calls` maps an `agentId` to the
/// tool call that started that sub-agent, as its `agent-<agentId>.meta.json` states it
/// (`toolUseId`). Those links are exact where the log alone leaves nested sub-agents with the
/// same prompt ambiguous; without them this is [`import`] with [`TraceFormat::ClaudeCode`].
pub fn import_claude_code(
    text: &str,
    subagent_calls: &HashMap<String, String>,
) -> Result<Trace, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut warnings = Warnings::default();
    let sessions = claude_code::import_linked(text, subagent_calls, &mut warnings)?;
    Ok(Trace {
        format: TraceFormat::ClaudeCode,
        sessions,
        warnings: warnings.counts,
    })
}

impl Trace {
    /// Joins every session into one, in order (the tau-bench scale test). A system message
    /// identical to the first session's is dropped: it would repeat the same instructions.
    ///
    /// "Identical" means an instruction message (system or developer) of the same role whose
    /// [`Message::text`] equals that of the first session's first instruction message. The
    /// joined session has the id `"concat"`, the first model any session names, and the union
    /// of the sessions' tools by name, in first-seen order.
    pub fn concat(self) -> Session {
        let mut out = Session {
            id: "concat".to_string(),
            ..Session::default()
        };
        let first_instruction = self
            .sessions
            .first()
            .and_then(|s| s.messages.iter().find(|m| m.role.is_instruction()))
            .map(|m| (m.role, m.text()));
        let mut tool_names = HashSet::new();
        for (index, session) in self.sessions.into_iter().enumerate() {
            if out.model.is_none() {
                out.model = session.model;
            }
            for tool in session.tools {
                if tool_names.insert(tool.name.clone()) {
                    out.tools.push(tool);
                }
            }
            out.messages.reserve(session.messages.len());
            for message in session.messages {
                let repeated = index > 0
                    && first_instruction.as_ref().is_some_and(|(role, text)| {
                        message.role == *role && message.text() == *text
                    });
                if !repeated {
                    out.messages.push(message);
                }
            }
        }
        out
    }
}

/// Counts of entries an importer skipped or kept opaque, by kind.
#[derive(Debug, Default)]
struct Warnings {
    counts: BTreeMap<String, usize>,
}

impl Warnings {
    /// Counts one occurrence of `key`.
    fn add(&mut self, key: impl Into<String>) {
        *self.counts.entry(key.into()).or_insert(0) += 1;
    }
}

/// Parses a whole JSON document; syntax errors carry their line and column.
fn parse_document(text: &str) -> Result<Value, ParseError> {
    serde_json::from_str(text).map_err(|err| ParseError::from_json(&err))
}

/// The non-blank lines of a JSON Lines text with their 1-based line numbers, each parsed on
/// demand so that only one entry is held as a tree at a time.
fn json_lines(text: &str) -> impl Iterator<Item = (usize, Result<Value, ParseError>)> + '_ {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            let line_no = index + 1;
            let value = serde_json::from_str::<Value>(line)
                .map_err(|err| ParseError::from_json(&err).on_line(line_no));
            (line_no, value)
        })
}

/// The entry of a JSON Lines file as an object, or an error on its line.
fn line_object(value: Value, line_no: usize) -> Result<Map<String, Value>, ParseError> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ParseError::at(
            "$",
            format!(
                "expected a JSON object per line, found {}",
                json_kind(&other)
            ),
        )
        .on_line(line_no)),
    }
}

/// An optional string field: absent or null is `None`, any other non-string is an error.
fn opt_str<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, ParseError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ParseError::at(
            format!("{path}.{key}"),
            format!("expected a string, found {}", json_kind(other)),
        )),
    }
}

/// `value` (at `path`) as an object; the error says what it should have been (`a task object`).
fn object_at<'a>(
    value: &'a Value,
    path: &str,
    what: &str,
) -> Result<&'a Map<String, Value>, ParseError> {
    value
        .as_object()
        .ok_or_else(|| ParseError::at(path, format!("expected {what}, found {}", json_kind(value))))
}

/// An optional array field: absent is `None`, anything but an array is an error that names what
/// its items should be (`messages`, `events`).
fn opt_array<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    path: &str,
    items: &str,
) -> Result<Option<&'a Vec<Value>>, ParseError> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::Array(array)) => Ok(Some(array)),
        Some(other) => Err(ParseError::at(
            format!("{path}.{key}"),
            format!("expected an array of {items}, found {}", json_kind(other)),
        )),
    }
}

/// An id-like field (a string or a number) as text.
fn id_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Makes session ids unique within a trace by suffixing repeats with `#2`, `#3`, ….
fn unique_id(seen: &mut HashSet<String>, id: String) -> String {
    if seen.insert(id.clone()) {
        return id;
    }
    let mut n = 2;
    loop {
        let candidate = format!("{id}#{n}");
        if seen.insert(candidate.clone()) {
            return candidate;
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::Role;

    fn session(id: &str, model: Option<&str>, messages: Vec<Message>, tools: &[&str]) -> Session {
        Session {
            id: id.to_string(),
            model: model.map(str::to_string),
            messages,
            tools: tools
                .iter()
                .map(|name| ToolSpec {
                    name: name.to_string(),
                    description: None,
                    parameters: Value::Null,
                    extra: Map::new(),
                    hints: Default::default(),
                })
                .collect(),
            parent: None,
        }
    }

    #[test]
    fn concat_drops_repeated_system_prompts_only() {
        let trace = Trace {
            format: TraceFormat::TauBench,
            sessions: vec![
                session(
                    "a",
                    None,
                    vec![Message::system("rules"), Message::user("1")],
                    &["f"],
                ),
                session(
                    "b",
                    Some("gpt-4o"),
                    vec![Message::system("rules"), Message::user("2")],
                    &["g", "f"],
                ),
                session(
                    "c",
                    Some("o3"),
                    vec![Message::system("other"), Message::user("3")],
                    &[],
                ),
            ],
            warnings: BTreeMap::new(),
        };
        let joined = trace.concat();
        assert_eq!(joined.id, "concat");
        assert_eq!(joined.model.as_deref(), Some("gpt-4o"));
        let texts: Vec<String> = joined.messages.iter().map(Message::text).collect();
        assert_eq!(texts, ["rules", "1", "2", "other", "3"]);
        assert_eq!(joined.messages[0].role, Role::System);
        let tools: Vec<&str> = joined.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(tools, ["f", "g"]);
    }

    #[test]
    fn concat_of_nothing_is_an_empty_session() {
        let trace = Trace {
            format: TraceFormat::Codex,
            sessions: Vec::new(),
            warnings: BTreeMap::new(),
        };
        let joined = trace.concat();
        assert_eq!(joined.id, "concat");
        assert!(joined.messages.is_empty());
    }

    #[test]
    fn unique_ids_get_suffixes() {
        let mut seen = HashSet::new();
        assert_eq!(unique_id(&mut seen, "x".into()), "x");
        assert_eq!(unique_id(&mut seen, "x".into()), "x#2");
        assert_eq!(unique_id(&mut seen, "x".into()), "x#3");
    }

    #[test]
    fn json_lines_errors_carry_the_line() {
        let text = "{\"a\":1}\n\n{\"b\":\n";
        let results: Vec<_> = json_lines(text).collect();
        assert_eq!(results.len(), 2);
        assert_eq!(results[1].0, 3);
        let err = results[1].1.clone().expect_err("must fail");
        assert!(err.to_string().starts_with("line 3, column"), "{err}");
    }

    /// One small, valid sample per format, with tool calls, results and entry kinds the
    /// importers skip.
    const SAMPLES: [(TraceFormat, &str); 9] = [
        (
            TraceFormat::MiniSweAgent,
            r#"{"info":{"exit_status":"Submitted"},"messages":[{"role":"system","content":"s"},{"role":"user","content":"t"},{"role":"assistant","content":"a","tool_calls":[{"id":"c","type":"function","function":{"name":"bash","arguments":"{}"}}],"extra":{}},{"role":"tool","tool_call_id":"c","content":"o"},{"role":"exit","content":"","extra":{}}],"trajectory_format":"mini-swe-agent-1.1"}"#,
        ),
        (
            TraceFormat::TauBench,
            r#"[{"task_id":1,"trial":0,"traj":[{"role":"system","content":"p"},{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","name":"f","content":"ok"}]}]"#,
        ),
        (
            TraceFormat::SweAgent,
            r#"{"history":[{"role":"system","content":"s","agent":"main"},{"role":"assistant","content":"t","thought":"t","action":"ls","tool_calls":[{"id":"c","type":"function","function":{"name":"bash","arguments":"{}"}}]},{"role":"tool","content":"o","tool_call_ids":["c"]}],"info":{},"replay_config":"{\"agent\":{\"model\":{\"name\":\"gpt-4o\"}}}"}"#,
        ),
        (
            TraceFormat::OpenHands,
            concat!(
                r#"{"instruction":"fix","history":[{"action":"message","content":"fix"},{"action":"run","command":"ls","thought":"t"},{"observation":"run","content":"a"},{"id":4,"source":"agent","action":"browse","args":{"url":"u"}},{"observation":"error","cause":4,"content":"e"},{"action":"finish","thought":"done"}]}"#,
                "\n",
                r#"{"history":[[{"action":"run","command":"x"},{"observation":"run","content":"y"}]]}"#,
            ),
        ),
        (
            TraceFormat::ClaudeCode,
            concat!(
                r#"{"type":"summary","summary":"s","leafUuid":"l"}"#,
                "\n",
                r#"{"type":"user","uuid":"u","sessionId":"s","message":{"role":"user","content":"hi"}}"#,
                "\n",
                r#"{"type":"assistant","uuid":"a","message":{"id":"m","role":"assistant","model":"claude","content":[{"type":"thinking","thinking":"t","signature":"s"}]}}"#,
                "\n",
                r#"{"type":"assistant","uuid":"b","message":{"id":"m","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}"#,
                "\n",
                r#"{"type":"user","uuid":"c","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]},"toolUseResult":{}}"#,
                "\n",
                r#"{"type":"system","content":"hook"}"#,
            ),
        ),
        (
            TraceFormat::Codex,
            concat!(
                r#"{"type":"session_meta","payload":{"id":"s"}}"#,
                "\n",
                r#"{"type":"turn_context","payload":{"model":"gpt-5"}}"#,
                "\n",
                r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}"#,
                "\n",
                r#"{"type":"response_item","payload":{"type":"reasoning","summary":[],"encrypted_content":"gA"}}"#,
                "\n",
                r#"{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{}","call_id":"c"}}"#,
                "\n",
                r#"{"type":"event_msg","payload":{"type":"token_count"}}"#,
                "\n",
                r#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"c","output":"o"}}"#,
            ),
        ),
        (
            TraceFormat::OpenAiChat,
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}"#,
        ),
        (
            TraceFormat::Anthropic,
            r#"{"model":"claude","max_tokens":9,"system":"s","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]}"#,
        ),
        (
            TraceFormat::Responses,
            r#"[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}]"#,
        ),
    ];

    #[test]
    fn samples_import_and_are_detected() {
        for (format, text) in SAMPLES {
            assert_eq!(detect(text, "sample"), Some(format), "{text}");
            let trace = import(text, format).unwrap_or_else(|err| panic!("{format}: {err}"));
            assert!(!trace.sessions.is_empty(), "{format}");
        }
    }

    /// Applies one edit at a char boundary chosen by `at`: cut there, insert `ch`, or delete
    /// the char there.
    fn mangle(text: &str, at: prop::sample::Index, ch: char, mode: u8) -> String {
        let bounds: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .chain([text.len()])
            .collect();
        let pos = bounds[at.index(bounds.len())];
        let mut out = text.to_string();
        match mode {
            0 => out.truncate(pos),
            1 => out.insert(pos, ch),
            _ => {
                if pos < out.len() {
                    out.remove(pos);
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn mangled_input_never_panics(
            sample in 0..SAMPLES.len(),
            edits in prop::collection::vec(
                (any::<prop::sample::Index>(), prop::sample::select(vec!['{', '}', '[', ']', '"', ',', ':', '1', 'n', '\\', '\n', 'é']), 0u8..3),
                1..4,
            ),
        ) {
            let mut text = SAMPLES[sample].1.to_string();
            for (at, ch, mode) in edits {
                text = mangle(&text, at, ch, mode);
            }
            let _ = detect(&text, "sample.traj");
            for format in TraceFormat::ALL {
                let _ = import(&text, format);
            }
        }
    }

    #[test]
    fn format_names_round_trip() {
        for format in TraceFormat::ALL {
            assert_eq!(format.as_str().parse::<TraceFormat>(), Ok(format));
        }
        assert!("nope".parse::<TraceFormat>().is_err());
    }
}
