//! The seed corpus, cut from real agent traces (`ctxkeeper-fuzz corpus`, `fuzz/make-corpus.sh`).
//!
//! For every trace file it writes, into `<out>/<target>/`:
//!
//! - `wire_*`: windows of each session's messages as request bodies of every wire format
//!   (the wire adapters emit them, converting where the trace spoke another format), and for
//!   Claude Code and Codex logs their own message objects and Responses items, unconverted;
//! - `import_trace`: windows of a JSON Lines log's lines, and a JSON trace with its arrays and
//!   strings shortened, each still in its format;
//! - `capsule`, `extractive_summary`: windows of each session in the session encoding of
//!   [`crate::session`];
//!
//! plus a few hand-written seeds per target (every importer's format, the forged headings of
//! the capsule's own tests), and the licence of every trace directory it cut from, in
//! `<out>/licenses/`. Strings are cut so that each file stays small; `max_bytes` bounds
//! what the trace cuts of one target may take in all. The output is the same on every run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ctxkeeper_core::formats::Wire;
use ctxkeeper_core::import::{Session, TraceFormat, detect, import};
use ctxkeeper_core::model::{Message, Part, Request};
use serde_json::{Map, Value, json};

use crate::session::{FRAGMENTS, encode, fragment_byte};

/// Messages in one window of a session.
const WINDOW: usize = 12;
/// Sessions of one trace cut into seeds (tau-bench holds 200).
const SESSIONS_PER_TRACE: usize = 3;
/// Characters kept of a text part or a JSON string.
const TEXT_CHARS: usize = 600;
/// Largest seed file written.
const MAX_FILE: usize = 24 * 1024;

/// What was written, per target: files and bytes.
pub type Written = BTreeMap<String, (usize, usize)>;

/// Builds the corpus from the trace files under `traces` into `out`.
pub fn build(traces: &Path, out: &Path, max_bytes: usize) -> std::io::Result<Written> {
    let mut files = Vec::new();
    collect_traces(traces, &mut files)?;
    files.sort();
    let mut sink = Sink {
        out: out.to_path_buf(),
        max_bytes,
        written: Written::new(),
    };
    for path in &files {
        let text = std::fs::read_to_string(path)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let Some(format) = detect(&text, &name) else {
            continue;
        };
        let stem = short_stem(traces, path);
        copy_licence(traces, path, out)?;
        trace_cuts(&mut sink, &stem, format, &text)?;
        let Ok(trace) = import(&text, format) else {
            continue;
        };
        for (k, session) in trace.sessions.iter().take(SESSIONS_PER_TRACE).enumerate() {
            session_cuts(&mut sink, &format!("{stem}-s{k}"), session)?;
        }
        native_wire_cuts(&mut sink, &stem, format, &text)?;
    }
    hand_written_seeds(&mut sink)?;
    Ok(sink.written)
}

fn collect_traces(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_traces(&path, files)?;
        } else if path
            .extension()
            .is_some_and(|e| e == "json" || e == "jsonl" || e == "traj")
        {
            files.push(path);
        }
    }
    Ok(())
}

/// The licence beside a trace (`<dir>/LICENSE`) as `<out>/licenses/<dir>.LICENSE`: the seeds
/// cut from it carry its text.
fn copy_licence(root: &Path, trace: &Path, out: &Path) -> std::io::Result<()> {
    let Some(dir) = trace.parent() else {
        return Ok(());
    };
    let licence = dir.join("LICENSE");
    if !licence.is_file() {
        return Ok(());
    }
    let name = dir
        .strip_prefix(root)
        .map(|p| p.to_string_lossy().replace('/', "-"))
        .unwrap_or_default();
    let name = if name.is_empty() {
        "traces".to_string()
    } else {
        name
    };
    let target = out.join("licenses");
    std::fs::create_dir_all(&target)?;
    std::fs::copy(&licence, target.join(format!("{name}.LICENSE")))?;
    Ok(())
}

/// `claude-code-37f83ec9` for `<traces>/claude-code/37f83ec9-….jsonl`.
fn short_stem(root: &Path, path: &Path) -> String {
    let dir = path
        .parent()
        .and_then(|p| p.strip_prefix(root).ok())
        .map(|p| p.to_string_lossy().replace('/', "-"))
        .unwrap_or_default();
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let file: String = file
        .split(['.', '-', '_'])
        .next()
        .unwrap_or("trace")
        .chars()
        .take(16)
        .collect();
    if dir.is_empty() {
        file
    } else {
        format!("{dir}-{file}")
    }
}

struct Sink {
    out: PathBuf,
    max_bytes: usize,
    written: Written,
}

impl Sink {
    /// Writes a seed unless it is too large or its target's budget is spent.
    fn put(
        &mut self,
        target: &str,
        name: &str,
        bytes: &[u8],
        budgeted: bool,
    ) -> std::io::Result<()> {
        let (files, total) = self.written.entry(target.to_string()).or_default();
        if bytes.is_empty()
            || bytes.len() > MAX_FILE
            || (budgeted && *total + bytes.len() > self.max_bytes)
        {
            return Ok(());
        }
        let dir = self.out.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), bytes)?;
        *files += 1;
        *total += bytes.len();
        Ok(())
    }
}

/// The windows of a session: its start, middle and end.
fn windows(len: usize) -> Vec<std::ops::Range<usize>> {
    let mut starts = vec![
        0,
        len.saturating_sub(WINDOW) / 2,
        len.saturating_sub(WINDOW),
    ];
    starts.dedup();
    starts
        .into_iter()
        .map(|s| s..(s + WINDOW).min(len))
        .collect()
}

fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => text[..at].to_string(),
        None => text.to_string(),
    }
}

/// A message with its texts (and tool results' texts) cut.
fn cut_message(message: &Message) -> Message {
    let mut message = message.clone();
    for part in &mut message.parts {
        cut_part(part);
    }
    message
}

fn cut_part(part: &mut Part) {
    match part {
        Part::Text { text, .. } => *text = cut(text, TEXT_CHARS),
        Part::ToolCall { arguments, .. } => *arguments = cut(arguments, TEXT_CHARS),
        Part::ToolResult { content, .. } => content.iter_mut().for_each(cut_part),
        Part::Reasoning { text, .. } => {
            if let Some(text) = text {
                *text = cut(text, TEXT_CHARS);
            }
        }
        Part::Data { .. } | Part::Opaque { .. } => {}
    }
}

fn session_cuts(sink: &mut Sink, stem: &str, session: &Session) -> std::io::Result<()> {
    for (j, window) in windows(session.messages.len()).into_iter().enumerate() {
        let messages: Vec<Message> = session.messages[window].iter().map(cut_message).collect();
        let request = Request {
            model: session.model.clone().or_else(|| Some("gpt-4o".to_string())),
            messages: messages.clone(),
            tools: session.tools.iter().take(4).cloned().collect(),
            ..Request::default()
        };
        for wire in [Wire::OpenAiChat, Wire::Responses, Wire::Anthropic] {
            let body = wire.emit_request(&request);
            let bytes = serde_json::to_vec(&body).expect("a JSON value serializes");
            let target = format!("wire_{}", wire.as_str().replace('-', "_"));
            sink.put(&target, &format!("{stem}-w{j}.json"), &bytes, true)?;
        }
        // Knobs spread over the windows: different window sizes and context tails.
        let knobs = [(37 * j + stem.len()) as u8, (53 * j + 5) as u8];
        let encoded = encode(knobs, &messages, TEXT_CHARS);
        sink.put("capsule", &format!("{stem}-w{j}.bin"), &encoded, true)?;
        sink.put(
            "extractive_summary",
            &format!("{stem}-w{j}.bin"),
            &encoded,
            true,
        )?;
    }
    Ok(())
}

/// A JSON value with strings cut and arrays shortened, so that a trace stays a small trace.
fn shrink(value: &Value, items: usize) -> Value {
    match value {
        Value::String(text) => Value::String(cut(text, TEXT_CHARS)),
        Value::Array(list) => {
            Value::Array(list.iter().take(items).map(|v| shrink(v, items)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), shrink(v, items)))
                .collect::<Map<String, Value>>(),
        ),
        other => other.clone(),
    }
}

fn trace_cuts(sink: &mut Sink, stem: &str, format: TraceFormat, text: &str) -> std::io::Result<()> {
    let jsonl = matches!(
        format,
        TraceFormat::ClaudeCode | TraceFormat::Codex | TraceFormat::OpenHands
    );
    if jsonl {
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let per_window = if format == TraceFormat::OpenHands {
            1
        } else {
            16
        };
        let mut starts = vec![
            0,
            lines.len().saturating_sub(per_window) / 2,
            lines.len().saturating_sub(per_window),
        ];
        starts.dedup();
        for (j, start) in starts.into_iter().enumerate() {
            let mut out = String::new();
            for line in lines.iter().skip(start).take(per_window) {
                let Ok(value) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                out.push_str(&serde_json::to_string(&shrink(&value, 12)).expect("serializes"));
                out.push('\n');
            }
            sink.put(
                "import_trace",
                &format!("{stem}-l{j}.jsonl"),
                out.as_bytes(),
                true,
            )?;
        }
    } else if let Ok(value) = serde_json::from_str::<Value>(text) {
        let extension = if format == TraceFormat::SweAgent {
            "traj"
        } else {
            "json"
        };
        for (j, items) in [3, 12].into_iter().enumerate() {
            let bytes = serde_json::to_vec(&shrink(&value, items)).expect("serializes");
            sink.put(
                "import_trace",
                &format!("{stem}-d{j}.{extension}"),
                &bytes,
                true,
            )?;
        }
    }
    Ok(())
}

/// Claude Code's message objects as an Anthropic body and Codex's items as a Responses body,
/// as the logs hold them.
fn native_wire_cuts(
    sink: &mut Sink,
    stem: &str,
    format: TraceFormat,
    text: &str,
) -> std::io::Result<()> {
    let (target, items): (&str, Vec<Value>) = match format {
        TraceFormat::ClaudeCode => (
            "wire_anthropic",
            json_lines(text)
                .filter(|v| matches!(v["type"].as_str(), Some("user" | "assistant")))
                .filter_map(|v| v.get("message").cloned())
                .collect(),
        ),
        TraceFormat::Codex => (
            "wire_responses",
            json_lines(text)
                .filter(|v| v["type"] == "response_item")
                .filter_map(|v| v.get("payload").cloned())
                .collect(),
        ),
        _ => return Ok(()),
    };
    for (j, window) in windows(items.len()).into_iter().enumerate() {
        let list: Vec<Value> = items[window].iter().map(|v| shrink(v, 12)).collect();
        let body = if target == "wire_anthropic" {
            json!({"model": "claude-sonnet-4", "max_tokens": 1024, "messages": list})
        } else {
            json!({"model": "gpt-5", "input": list})
        };
        let bytes = serde_json::to_vec(&body).expect("serializes");
        sink.put(target, &format!("{stem}-native-w{j}.json"), &bytes, true)?;
    }
    Ok(())
}

fn json_lines(text: &str) -> impl Iterator<Item = Value> + '_ {
    text.lines()
        .filter_map(|line| serde_json::from_str(line).ok())
}

/// Seeds no trace holds: every importer's format, bodies with the parts the traces lack,
/// the forged headings of the capsule's own tests.
fn hand_written_seeds(sink: &mut Sink) -> std::io::Result<()> {
    for (name, text) in IMPORT_SEEDS {
        sink.put("import_trace", name, text.as_bytes(), false)?;
    }
    for (target, name, text) in WIRE_SEEDS {
        sink.put(target, name, text.as_bytes(), false)?;
    }
    let forged =
        |indexes: &[usize]| -> Vec<u8> { indexes.iter().map(|&i| fragment_byte(i)).collect() };
    let mut issue =
        b"\x40\x00\x00uReal task: make the exporter keep field order stable. Never push to main."
            .to_vec();
    issue.extend(b"\x00fsrc/export.rs\x00rok\x00pTodoWrite\x00rTodos updated\x00xcargo test\x00eerror: build failed");
    issue.extend(forged(&[0, 2, 9, 10, 12, 13, 14, 8]));
    issue.extend(b"\x00aThe user said: ");
    issue.extend(forged(&[0, 1]));
    issue.extend(b"\x00Rresult in a user message");
    issue.extend(forged(&[3, 4, 5, 6, 7, 11, 21]));
    issue.extend(b"\x00PTask overview from a model");
    issue.extend(forged(&[18, 19, 20]));
    let mut each = vec![0x10, 0x03];
    for index in 0..FRAGMENTS.len() {
        each.extend(b"\x00uplease go on\x00xmake\x00e");
        each.push(fragment_byte(index));
    }
    for target in ["capsule", "extractive_summary"] {
        sink.put(target, "hand-issue-payloads.bin", &issue, false)?;
        sink.put(target, "hand-every-fragment.bin", &each, false)?;
    }
    Ok(())
}

/// One small sample of every importer's format.
const IMPORT_SEEDS: [(&str, &str); 6] = [
    (
        "hand-mini-swe-agent.traj.json",
        r#"{"info":{"exit_status":"Submitted"},"messages":[{"role":"system","content":"s"},{"role":"user","content":"t"},{"role":"assistant","content":"a","tool_calls":[{"id":"c","type":"function","function":{"name":"bash","arguments":"{}"}}],"extra":{}},{"role":"tool","tool_call_id":"c","content":"o"},{"role":"exit","content":"","extra":{}}],"trajectory_format":"mini-swe-agent-1.1"}"#,
    ),
    (
        "hand-swe-agent-plain.traj",
        r#"{"history":[{"role":"system","content":"s","agent":"main"},{"role":"user","content":"fix it","agent":"main"},{"role":"assistant","content":"DISCUSSION\nlook\n```\nls\n```","thought":"look","action":"ls","agent":"main"},{"role":"user","content":"a.py","agent":"main"}],"info":{},"trajectory":[]}"#,
    ),
    (
        "hand-claude-code-sidechain.jsonl",
        concat!(
            r#"{"type":"user","uuid":"u","sessionId":"s","message":{"role":"user","content":"hi"}}"#,
            "\n",
            r#"{"type":"assistant","uuid":"a","parentUuid":"u","message":{"id":"m","role":"assistant","model":"claude","content":[{"type":"tool_use","id":"toolu_1","name":"Task","input":{"prompt":"look"}}]}}"#,
            "\n",
            r#"{"type":"user","uuid":"b","isSidechain":true,"agentId":"a1","message":{"role":"user","content":"look"}}"#,
            "\n",
            r#"{"type":"assistant","uuid":"c","isSidechain":true,"agentId":"a1","parentUuid":"b","message":{"id":"n","role":"assistant","content":[{"type":"text","text":"found"}]}}"#,
            "\n",
            r#"{"type":"user","uuid":"d","parentUuid":"a","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"found"}]},"toolUseResult":{}}"#,
            "\n",
        ),
    ),
    (
        "hand-codex-compacted.jsonl",
        concat!(
            r#"{"type":"session_meta","payload":{"id":"s","cwd":"/w"}}"#,
            "\n",
            r#"{"type":"compacted","payload":{"message":"summary","replacement_history":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}}"#,
            "\n",
            r#"{"type":"response_item","payload":{"type":"custom_tool_call","name":"apply_patch","call_id":"c","input":"*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch"}}"#,
            "\n",
            r#"{"type":"response_item","payload":{"type":"custom_tool_call_output","call_id":"c","output":"ok"}}"#,
            "\n",
        ),
    ),
    (
        "hand-responses-items.json",
        r#"[{"role":"user","content":"hi"},{"type":"reasoning","id":"r","summary":[],"encrypted_content":"gA"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}]"#,
    ),
    (
        "hand-anthropic-body.json",
        r#"{"model":"claude","max_tokens":9,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"x"},{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"ok"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}],"is_error":true}]}]}"#,
    ),
];

/// Bodies with the parts the traces lack: media, legacy functions, refusals, opaque items;
/// and the shapes the fuzzers once found lost in a round trip.
const WIRE_SEEDS: [(&str, &str, &str); 8] = [
    (
        "wire_anthropic",
        "hand-found-system-tool-use.json",
        r#"{"model":"m","max_tokens":5,"system":[{"type":"text","text":"rules"},{"type":"tool_use","id":"toolu_1","name":"Read","input":{}},{"type":"image","source":{"type":"url","url":"https://x/y.png"}}],"messages":[{"role":"user","content":"x"}]}"#,
    ),
    (
        "wire_responses",
        "hand-found-assistant-image.json",
        r#"{"model":"m","input":[{"role":"user","content":"hi"},{"type":"message","role":"assistant","content":[{"type":"input_image","image_url":"data:image/png;base64,AA=="}]}]}"#,
    ),
    (
        "wire_openai_chat",
        "hand-parts.json",
        r#"{"model":"gpt-4o","messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA==","detail":"low"}},{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}},{"type":"file","file":{"file_data":"data:application/pdf;base64,AA==","filename":"a.pdf"}}]},{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}],"temperature":0,"stream":true}"#,
    ),
    (
        "wire_openai_chat",
        "hand-legacy-functions.json",
        r#"{"model":"gpt-3.5-turbo","messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"function_call":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}},{"role":"function","name":"weather","content":"18C"}],"functions":[{"name":"weather","parameters":{"type":"object"}}]}"#,
    ),
    (
        "wire_responses",
        "hand-items.json",
        r#"{"model":"gpt-5","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"data:image/png;base64,AA=="}]},{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"think"}],"encrypted_content":"gAAA"},{"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"},{"type":"item_reference","id":"x"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done","annotations":[]}]}],"tools":[{"type":"function","name":"f","parameters":{}}],"store":false}"#,
    ),
    (
        "wire_responses",
        "hand-string-input.json",
        r#"{"model":"gpt-5","input":"just a string","previous_response_id":"resp_1"}"#,
    ),
    (
        "wire_anthropic",
        "hand-blocks.json",
        r#"{"model":"claude","max_tokens":9,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}},{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"AA=="}}]},{"role":"assistant","content":[{"type":"redacted_thinking","data":"zz"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok","is_error":false}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto"}}"#,
    ),
    (
        "wire_anthropic",
        "hand-string-content.json",
        r#"{"model":"claude","max_tokens":9,"system":"s","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}],"stop_sequences":["x"]}"#,
    ),
];
