//! What every seed's rows share: running the binary, the table, generated conversations.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::{Value, json};

/// The last command `run` executed, as a reader would type it.
pub static LAST_COMMAND: Mutex<String> = Mutex::new(String::new());

/// `args` as a command line: scratch paths become their file names (`images.json`, `ws`,
/// `sqlite://sessions.db`).
pub fn shown_command(args: &[&str]) -> String {
    let mut line = String::from("ctxkeeper");
    for arg in args {
        // A store URL on a scratch path (`sqlite:///tmp/…/sessions.db`) keeps its scheme.
        let (scheme, rest) = ["sqlite://", "file://"]
            .into_iter()
            .find_map(|s| arg.strip_prefix(s).map(|rest| (s, rest)))
            .unwrap_or(("", arg));
        let path = Path::new(rest);
        let shown = if path.is_absolute() {
            path.file_name().map_or_else(
                || arg.to_string(),
                |n| format!("{scheme}{}", n.to_string_lossy()),
            )
        } else {
            arg.to_string()
        };
        line.push(' ');
        line.push_str(&shown);
    }
    line
}

pub fn run(args: &[&str]) -> Output {
    *LAST_COMMAND.lock().expect("not poisoned") = shown_command(args);
    Command::new(env!("CARGO_BIN_EXE_ctxkeeper"))
        .args(args)
        .output()
        .expect("the binary runs")
}

pub fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

pub fn json_of(output: Output) -> Value {
    serde_json::from_str(&ok(output)).expect("stdout is JSON")
}

/// One row of the conformance table.
pub struct Row {
    pub seed: &'static str,
    pub section: &'static str,
    pub preset: &'static str,
    pub behaviour: &'static str,
    /// The command whose output (or files) shows the observed value.
    pub command: String,
    pub documented: String,
    pub observed: String,
}

#[derive(Default)]
pub struct Table {
    pub rows: Vec<Row>,
}

impl Table {
    pub fn row(
        &mut self,
        (seed, section, preset): (&'static str, &'static str, &'static str),
        behaviour: &'static str,
        documented: impl ToString,
        observed: impl ToString,
    ) {
        self.rows.push(Row {
            seed,
            section,
            preset,
            behaviour,
            command: LAST_COMMAND.lock().expect("not poisoned").clone(),
            documented: documented.to_string(),
            observed: observed.to_string(),
        });
    }

    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| seed | section | preset | behaviour | shown by | documented | observed | |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for r in &self.rows {
            let mark = if r.documented == r.observed {
                "✓"
            } else {
                "✗"
            };
            // `<sid>` and the like are placeholders, not HTML.
            let cell = |text: &str| text.replace('<', "&lt;").replace('>', "&gt;");
            out.push_str(&format!(
                "| {} | {} | `{}` | {} | `{}` | {} | {} | {mark} |\n",
                r.seed,
                r.section,
                r.preset,
                cell(r.behaviour),
                r.command.replace('|', "\\|"),
                cell(&r.documented),
                cell(&r.observed)
            ));
        }
        out
    }
}

/// `config show --policy NAME`, parsed.
pub fn policy(name: &str) -> toml::Table {
    let text = ok(run(&["config", "show", "--policy", name]));
    let mut table: toml::Table = toml::from_str(&text).expect("config show prints TOML");
    match table.remove("policy") {
        Some(toml::Value::Table(policy)) => policy,
        other => panic!("no [policy] in config show: {other:?}"),
    }
}

/// Whether `serve` under preset `name` keeps long-term memory: `[gateway] memory` when set,
/// else what `config show` says the policy decides.
pub fn serve_memory(name: &str) -> String {
    let text = ok(run(&["config", "show", "--policy", name]));
    if let Some(line) = text.lines().find(|l| l.starts_with("memory = ")) {
        return line.trim_start_matches("memory = ").to_string();
    }
    match text.lines().find_map(|l| l.strip_prefix("# memory: ")) {
        Some(rest) if rest.starts_with("on") => "true".into(),
        Some(_) => "false".into(),
        None => "unset".into(),
    }
}

/// The value at a dotted path of a TOML table (`stages.1.keep_messages`), as text.
pub fn at(table: &toml::Table, path: &str) -> String {
    let mut value = toml::Value::Table(table.clone());
    for key in path.split('.') {
        value = match (value, key.parse::<usize>()) {
            (toml::Value::Array(items), Ok(i)) => {
                items.get(i).cloned().unwrap_or(toml::Value::Boolean(false))
            }
            (toml::Value::Table(t), _) => match t.get(key) {
                Some(v) => v.clone(),
                None => return "unset".to_string(),
            },
            _ => return "unset".to_string(),
        };
    }
    match value {
        toml::Value::String(s) => s,
        toml::Value::Float(f) => format!("{f}"),
        other => other.to_string(),
    }
}

/// A bare OpenAI chat request as a trace file.
pub fn trace(dir: &Path, name: &str, messages: Vec<Value>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        json!({"model": "gpt-4o", "messages": messages}).to_string(),
    )
    .expect("write trace");
    path
}

/// A coding session: the user's task with a stated constraint, then `rounds` rounds of a
/// shell call whose output (about `lines` lines) names files and ends with an error, each
/// announced by a decision of the assistant.
pub fn coding_session(rounds: usize, lines: usize) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": "Fix the failing invoice totals in src/billing/invoice.rs. Never touch the database schema."}),
    ];
    for i in 0..rounds {
        let id = format!("call_{i}");
        messages.push(json!({
            "role": "assistant",
            "content": format!("Step {i}: I decided to check module {i} instead of the schema."),
            "tool_calls": [{"id": id, "type": "function", "function": {
                "name": "bash",
                "arguments": json!({"command": format!("cat src/billing/part_{i}.rs && cargo test invoice_{i}")}).to_string()
            }}]
        }));
        let mut output = String::new();
        for j in 0..lines {
            output.push_str(&format!(
                "src/billing/part_{i}.rs:{j}: let subtotal_{j} = round(amount_{j} * rate_{i}, 2); // value {}\n",
                i * 1000 + j
            ));
        }
        output.push_str(&format!(
            "error: test invoice_{i} failed: expected 10.01, got 10.00 at src/billing/invoice.rs:42\n"
        ));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
    }
    messages.push(json!({"role": "assistant", "content": "The rounding now happens after the tax; all invoice tests pass."}));
    messages
}

/// A PNG-looking payload, distinct per `seed`.
pub fn image_bytes(seed: u8) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend((0..2_000u32).map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed)));
    bytes
}

/// The one session directory a replay of a one-session trace archived into.
pub fn session_dir(workspace: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(workspace.join("sessions"))
        .expect("the workspace has sessions/")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.into_iter().next().expect("one session")
}

pub fn names_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The body of the last request a replay emitted.
pub fn last_request(dir: &Path) -> String {
    let last = names_in(dir)
        .into_iter()
        .filter(|n| n.starts_with("step-"))
        .max()
        .expect("emitted requests");
    std::fs::read_to_string(dir.join(last)).expect("read request")
}

/// `replay TRACE --policy P --window W --workspace WS --emit-requests REQ --json [extra]`.
pub fn replay(trace: &Path, preset: &str, window: u64, scratch: &Path, extra: &[&str]) -> Value {
    let mut args: Vec<String> = [
        "replay",
        trace.to_str().expect("utf-8"),
        "--policy",
        preset,
        "--window",
        &window.to_string(),
        "--json",
        "--workspace",
        scratch.join("ws").to_str().expect("utf-8"),
        "--emit-requests",
        scratch.join("req").to_str().expect("utf-8"),
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let report = json_of(run(&refs));
    assert_eq!(report["unrecoverable_items"], 0, "{report}");
    report
}

/// Replays `messages`, written as the trace `name`, under `preset` with a `window`-token
/// window in a fresh scratch directory: the directory (its `ws` is the workspace) and every
/// request the replay emitted, in step order.
pub fn replay_requests(
    name: &str,
    messages: Vec<Value>,
    preset: &str,
    window: u64,
) -> (tempfile::TempDir, Vec<Value>) {
    let scratch = tempfile::tempdir().expect("temp dir");
    let file = trace(scratch.path(), name, messages);
    replay(&file, preset, window, scratch.path(), &[]);
    let sent = requests(&scratch.path().join("req"));
    (scratch, sent)
}

/// Where the `k`-th assistant message of `messages` stands, if there are that many.
pub fn nth_assistant(messages: &[Value], k: usize) -> Option<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m["role"] == "assistant")
        .nth(k)
        .map(|(at, _)| at)
}

/// Every request a replay emitted, in step order.
pub fn requests(dir: &Path) -> Vec<Value> {
    names_in(dir)
        .into_iter()
        .filter(|n| n.starts_with("step-"))
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(n)).expect("read request");
            serde_json::from_str(&text).expect("the request is JSON")
        })
        .collect()
}

/// `compacted; every request ≤ LIMIT` when the replay compacted and its largest request
/// stayed within `limit` tokens, else what happened instead.
pub fn within(report: &Value, limit: u64) -> String {
    let compactions = report["compactions"].as_u64().unwrap_or(0);
    let peak = report["peak_input_tokens"].as_u64().unwrap_or(u64::MAX);
    match (compactions, peak <= limit) {
        (0, _) => format!("never compacted (peak {peak})"),
        (_, true) => format!("compacted; every request ≤ {limit}"),
        (_, false) => format!("compacted; a request of {peak}"),
    }
}

/// Characters `a` and `b` share at their start, counted up to the first difference.
pub fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// Characters `a` and `b` share at their end.
pub fn common_suffix(a: &str, b: &str) -> usize {
    a.chars()
        .rev()
        .zip(b.chars().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

pub fn today_memory(workspace: &Path) -> String {
    let dir = workspace.join("memory");
    let files = names_in(&dir);
    let file = files
        .iter()
        .next_back()
        .unwrap_or_else(|| panic!("no daily memory file in {}", dir.display()));
    assert!(
        file.len() == "YYYY-MM-DD.md".len() && file.ends_with(".md"),
        "{file}"
    );
    std::fs::read_to_string(dir.join(file)).expect("read memory")
}

/// Tokens of `text` as the product counts them for gpt-4o.
pub fn tokens(text: &str) -> u64 {
    u64::from(
        ctxkeeper_core::tokens::TokenModel::for_model(
            "gpt-4o",
            &ctxkeeper_core::tokens::Profiles::builtin(),
        )
        .text_tokens(text),
    )
}

/// Tokens of a chat message's text: its content and its tool calls' arguments.
pub fn message_tokens(message: &Value) -> u64 {
    let mut total = message["content"].as_str().map_or(0, tokens);
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        total += call["function"]["arguments"].as_str().map_or(0, tokens);
    }
    total
}

/// Text dense in tokens (hex words: about 2.5 characters a token), `n` lines, distinct per
/// `salt`.
pub fn dense(lines: usize, salt: u64) -> String {
    (0..lines)
        .map(|i| {
            let x = (i as u64 + salt * 1_000_003).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            format!(
                "{:x} {:x} {:x}\n",
                x >> 40,
                (x >> 20) & 0xfffff,
                x & 0xfffff
            )
        })
        .collect()
}

/// The messages of a chat request.
pub fn messages_of(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// One assistant tool call and its result.
pub fn round(id: &str, tool: &str, arguments: Value, output: String) -> [Value; 2] {
    [
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": id, "type": "function",
            "function": {"name": tool, "arguments": arguments.to_string()}}]}),
        json!({"role": "tool", "tool_call_id": id, "content": output}),
    ]
}

/// Tokens of an emitted chat request as the product counts them (`inspect` counts the same).
pub fn request_tokens(body: &Value) -> u64 {
    let request =
        ctxkeeper_core::formats::openai_chat::parse_request(body).expect("a chat request");
    ctxkeeper_core::tokens::TokenModel::for_model(
        "gpt-4o",
        &ctxkeeper_core::tokens::Profiles::builtin(),
    )
    .request_tokens(&request)
}

/// The tool-call ids of a chat request's assistant messages, in order.
pub fn call_ids(body: &Value) -> Vec<String> {
    messages_of(body)
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["id"].as_str().map(String::from))
        .collect()
}
