//! Seed conformance through the product: for each section of the five seed documents
//! (`../shared/seeds/`), the behaviour a preset must show, checked on the `ctxkeeper` binary
//! (`config show`, `replay`, `sessions`), never on the library alone: the documented value
//! against the value observed. Every row must match.
//!
//! Each row also names the command that shows the behaviour (the last `ctxkeeper` invocation
//! before the row was observed, with scratch paths cut to their file names), so a reader can
//! run it on a generated conversation of the same shape.
//!
//! With `CTXKEEPER_CONFORMANCE_OUT=FILE` the table is also written to FILE as Markdown (it is
//! the "Seed conformance" section of `bench/RESULTS.md`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::Digest as _;

/// The last command `run` executed, as a reader would type it.
static LAST_COMMAND: Mutex<String> = Mutex::new(String::new());

/// `args` as a command line: scratch paths become their file names (`images.json`, `ws`).
fn shown_command(args: &[&str]) -> String {
    let mut line = String::from("ctxkeeper");
    for arg in args {
        let path = Path::new(arg);
        let shown = if path.is_absolute() {
            path.file_name()
                .map_or_else(|| arg.to_string(), |n| n.to_string_lossy().into_owned())
        } else {
            arg.to_string()
        };
        line.push(' ');
        line.push_str(&shown);
    }
    line
}

fn run(args: &[&str]) -> Output {
    *LAST_COMMAND.lock().expect("not poisoned") = shown_command(args);
    Command::new(env!("CARGO_BIN_EXE_ctxkeeper"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

fn json_of(output: Output) -> Value {
    serde_json::from_str(&ok(output)).expect("stdout is JSON")
}

/// One row of the conformance table.
struct Row {
    seed: &'static str,
    section: &'static str,
    preset: &'static str,
    behaviour: &'static str,
    /// The command whose output (or files) shows the observed value.
    command: String,
    documented: String,
    observed: String,
}

#[derive(Default)]
struct Table {
    rows: Vec<Row>,
}

impl Table {
    fn row(
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

    fn markdown(&self) -> String {
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
fn policy(name: &str) -> toml::Table {
    let text = ok(run(&["config", "show", "--policy", name]));
    let mut table: toml::Table = toml::from_str(&text).expect("config show prints TOML");
    match table.remove("policy") {
        Some(toml::Value::Table(policy)) => policy,
        other => panic!("no [policy] in config show: {other:?}"),
    }
}

/// Whether `serve` under preset `name` keeps long-term memory: `[gateway] memory` when set,
/// else what `config show` says the policy decides.
fn serve_memory(name: &str) -> String {
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
fn at(table: &toml::Table, path: &str) -> String {
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
fn trace(dir: &Path, name: &str, messages: Vec<Value>) -> PathBuf {
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
fn coding_session(rounds: usize, lines: usize) -> Vec<Value> {
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
fn image_bytes(seed: u8) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend((0..2_000u32).map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed)));
    bytes
}

/// The one session directory a replay of a one-session trace archived into.
fn session_dir(workspace: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(workspace.join("sessions"))
        .expect("the workspace has sessions/")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.into_iter().next().expect("one session")
}

fn names_in(dir: &Path) -> BTreeSet<String> {
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
fn last_request(dir: &Path) -> String {
    let last = names_in(dir)
        .into_iter()
        .filter(|n| n.starts_with("step-"))
        .max()
        .expect("emitted requests");
    std::fs::read_to_string(dir.join(last)).expect("read request")
}

/// `replay TRACE --policy P --window W --workspace WS --emit-requests REQ --json [extra]`.
fn replay(trace: &Path, preset: &str, window: u64, scratch: &Path, extra: &[&str]) -> Value {
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

/// Every request a replay emitted, in step order.
fn requests(dir: &Path) -> Vec<Value> {
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
fn within(report: &Value, limit: u64) -> String {
    let compactions = report["compactions"].as_u64().unwrap_or(0);
    let peak = report["peak_input_tokens"].as_u64().unwrap_or(u64::MAX);
    match (compactions, peak <= limit) {
        (0, _) => format!("never compacted (peak {peak})"),
        (_, true) => format!("compacted; every request ≤ {limit}"),
        (_, false) => format!("compacted; a request of {peak}"),
    }
}

/// Characters `a` and `b` share at their start, counted up to the first difference.
fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// Characters `a` and `b` share at their end.
fn common_suffix(a: &str, b: &str) -> usize {
    a.chars()
        .rev()
        .zip(b.chars().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

fn today_memory(workspace: &Path) -> String {
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

#[test]
fn seed_conformance_table() {
    let mut table = Table::default();

    // ---- 000 AgentScope -------------------------------------------------------------------
    let seed = |section| ("000 AgentScope", section, "agentscope");
    let p = policy("agentscope");
    table.row(
        seed("Configure ContextConfig"),
        "trigger_ratio",
        "0.8",
        at(&p, "trigger_ratio"),
    );
    table.row(
        seed("Configure ContextConfig"),
        "reserve_ratio (kept recent share)",
        "0.1",
        at(&p, "stages.0.keep_ratio"),
    );
    table.row(
        seed("Truncate Tool Results"),
        "tool_result_limit (tokens)",
        "50000",
        at(&p, "ingest.tool_result.max_tokens"),
    );
    table.row(
        seed("Configure ContextConfig"),
        "images kept",
        "5",
        at(&p, "ingest.max_images"),
    );

    // Images: 8 arrive, the newest 5 stay, 3 go to data/<sha256>.png.
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut messages = vec![json!({"role": "system", "content": "Describe charts."})];
    let mut hashes = BTreeSet::new();
    for i in 0..8u8 {
        let bytes = image_bytes(i + 1);
        hashes.insert(hex::encode(sha2::Sha256::digest(&bytes)));
        let url = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&bytes)
        );
        messages.push(json!({"role": "user", "content": [
            {"type": "text", "text": format!("What does chart {i} show?")},
            {"type": "image_url", "image_url": {"url": url}}
        ]}));
        messages.push(json!({"role": "assistant", "content": format!("Chart {i} shows growth.")}));
    }
    let file = trace(scratch.path(), "images.json", messages);
    replay(&file, "agentscope", 128_000, scratch.path(), &[]);
    let last = last_request(&scratch.path().join("req"));
    let images_sent = last.matches("data:image/png;base64,").count();
    table.row(
        seed("Configure ContextConfig"),
        "images in the last request (8 sent)",
        5,
        images_sent,
    );
    let data = names_in(&scratch.path().join("ws/data"));
    let named_by_hash = data.iter().all(|name| {
        name.strip_suffix(".png")
            .is_some_and(|hash| hashes.contains(hash))
    });
    table.row(
        seed("Use LocalWorkspace"),
        "offloaded images as data/<sha256>.png",
        "3 files, named by content hash",
        format!(
            "{} files, {}",
            data.len(),
            if named_by_hash {
                "named by content hash"
            } else {
                "misnamed"
            }
        ),
    );
    let placeholder_names_file = data
        .iter()
        .all(|name| last.contains(&format!("data/{name}")));
    table.row(
        seed("Use LocalWorkspace"),
        "the context names each offloaded image's file",
        true,
        placeholder_names_file,
    );

    // Compression offloads to context.jsonl; an oversized result to tool_result-<id>.txt.
    let scratch = tempfile::tempdir().expect("temp dir");
    let file = trace(scratch.path(), "coding.json", coding_session(14, 60));
    replay(&file, "agentscope", 16_000, scratch.path(), &[]);
    let session = session_dir(&scratch.path().join("ws"));
    let lines = std::fs::read_to_string(session.join("context.jsonl"))
        .map(|t| {
            t.lines()
                .filter(|l| serde_json::from_str::<Value>(l).is_ok())
                .count()
        })
        .unwrap_or(0);
    table.row(
        seed("Use LocalWorkspace"),
        "compressed messages in sessions/<sid>/context.jsonl, one JSON message per line",
        true,
        lines > 0,
    );
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut messages = coding_session(1, 0);
    messages.truncate(3);
    let huge: String = (0..12_000)
        .map(|i| format!("row {i}: value {} status ok\n", i * 7))
        .collect();
    messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": huge}));
    messages.push(json!({"role": "assistant", "content": "Read it."}));
    let file = trace(scratch.path(), "huge.json", messages);
    replay(&file, "agentscope", 200_000, scratch.path(), &[]);
    let names = names_in(&session_dir(&scratch.path().join("ws")));
    table.row(
        seed("Use LocalWorkspace"),
        "truncated result in sessions/<sid>/tool_result-<id>.txt",
        "tool_result-call_0.txt",
        names
            .iter()
            .find(|n| n.starts_with("tool_result-"))
            .cloned()
            .unwrap_or_default(),
    );

    // The trigger in action: a session growing well past 80 % of a 16k window is compacted
    // before any request goes over that share.
    let scratch = tempfile::tempdir().expect("temp dir");
    let file = trace(scratch.path(), "growing.json", coding_session(60, 12));
    let report = replay(&file, "agentscope", 16_000, scratch.path(), &[]);
    table.row(
        seed("Configure ContextConfig"),
        "a tool loop growing to about 29,000 tokens in a 16k window: compacted, and no request over trigger_ratio × 16,000 tokens",
        "compacted; every request ≤ 12800",
        within(&report, 12_800),
    );

    // ---- 001 ReMe ---------------------------------------------------------------------------
    let seed = |section, preset| ("001 ReMe", section, preset);
    let p = policy("reme-compress");
    table.row(
        seed("Parameters", "reme-compress"),
        "max_total_tokens",
        "20000",
        at(&p, "trigger_tokens"),
    );
    table.row(
        seed("Parameters", "reme-compress"),
        "keep_recent_count (compression)",
        "2",
        at(&p, "stages.0.keep_messages"),
    );
    table.row(
        seed("Parameters", "reme-compress"),
        "grouped compression (group_token_threshold)",
        "on",
        if at(&p, "stages.0.group_token_threshold") == "unset" {
            "off"
        } else {
            "on"
        },
    );
    let p = policy("reme-auto");
    table.row(
        seed("Parameters", "reme-auto"),
        "compact_ratio_threshold",
        "0.75",
        at(&p, "stages.1.min_ratio"),
    );
    let p = policy("reme-compact");
    table.row(
        seed("Parameters", "reme-compact"),
        "max_tool_message_tokens",
        "2000",
        at(&p, "stages.0.min_result_tokens"),
    );

    let scratch = tempfile::tempdir().expect("temp dir");
    let file = trace(scratch.path(), "coding.json", coding_session(16, 80));
    let report = replay(&file, "reme-compress", 128_000, scratch.path(), &[]);
    assert!(report["compactions"].as_u64() >= Some(1), "{report}");
    let session = session_dir(&scratch.path().join("ws"));
    let groups: Vec<String> = names_in(&session)
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect();
    let well_named = !groups.is_empty()
        && groups.iter().all(|name| {
            let Some((chat_id, g)) = name.trim_end_matches(".json").rsplit_once('_') else {
                return false;
            };
            chat_id.len() == 36 && g.parse::<usize>().is_ok_and(|g| g >= 1)
        });
    table.row(
        seed("Parameters: store_dir, chat_id", "reme-compress"),
        "each group's originals in <chat_id>_<g>.json (chat_id a fresh UUID)",
        true,
        well_named,
    );
    let arrays = groups.iter().all(|name| {
        std::fs::read_to_string(session.join(name))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()))
    });
    table.row(
        seed("Parameters: store_dir, chat_id", "reme-compress"),
        "group file holds the group's messages (JSON array)",
        true,
        arrays,
    );
    let last = last_request(&scratch.path().join("req"));
    // The newest compaction's groups: one "[Part g/n]" message each, naming its own file (an
    // earlier compaction's group messages were compacted again; the first part also names the
    // files of the earlier summary it merged, so more files may be named than parts shown).
    let parts = last.matches("[Part ").count();
    let named = groups.iter().filter(|g| last.contains(g.as_str())).count();
    table.row(
        seed("Functionality: compress mode", "reme-compress"),
        "one [Part g/n] message per group, naming its file",
        true,
        parts >= 2 && named >= parts,
    );
    // The snapshot of an extractive summary says what happened: files, commands, errors,
    // decisions, not only its labels.
    let useful = [
        "src/billing/invoice.rs",
        "cargo test",
        "error: test invoice_",
        "Decision:",
        "Never touch the database schema",
    ]
    .iter()
    .filter(|fact| last.contains(*fact))
    .count();
    table.row(
        seed("Functionality: compress mode", "reme-compress"),
        "extractive state snapshot holds file, command, error, decision, constraint",
        "5 of 5",
        format!("{useful} of 5"),
    );

    // ---- 002 Agentrail ----------------------------------------------------------------------
    let seed = |section| ("002 Agentrail", section, "agentrail");
    let p = policy("agentrail");
    table.row(
        seed("Configuration"),
        "triggerTokens",
        "80000",
        at(&p, "trigger_tokens"),
    );
    table.row(
        seed("Configuration"),
        "minMessages",
        "20",
        at(&p, "min_messages"),
    );
    table.row(
        seed("Configuration"),
        "microTriggerPct / fullTriggerPct",
        "85 / 92",
        format!(
            "{} / {}",
            at(&p, "reactive.micro_trigger_pct"),
            at(&p, "reactive.full_trigger_pct")
        ),
    );
    table.row(
        seed("Configuration"),
        "preserveRecentApiRounds",
        "2",
        at(&p, "keep_recent_rounds"),
    );
    table.row(
        seed("Configuration"),
        "maxReactiveCompactionsPerRequest",
        "3",
        at(&p, "reactive.max_per_request"),
    );

    let scratch = tempfile::tempdir().expect("temp dir");
    let config = scratch.path().join("ctxkeeper.toml");
    // The layout under a lower trigger: the trace need not hold 80,000 tokens. The
    // compaction runs at the start of a request: the trace has a second one.
    std::fs::write(&config, "[policy]\ntrigger_tokens = 12000\n").expect("write config");
    let mut messages = coding_session(16, 60);
    messages.push(json!({"role": "user", "content": "Now add a regression test for it."}));
    messages.push(json!({"role": "assistant", "content": "Added tests/invoice_rounding.rs."}));
    let file = trace(scratch.path(), "coding.json", messages);
    replay(
        &file,
        "agentrail",
        200_000,
        scratch.path(),
        &["--config", config.to_str().expect("utf-8")],
    );
    let session = session_dir(&scratch.path().join("ws"));
    let archives: Vec<String> = names_in(&session.join("messages.compactions"))
        .into_iter()
        .filter(|n| n.ends_with(".jsonl"))
        .collect();
    let lines_are_messages = !archives.is_empty()
        && archives.iter().all(|name| {
            std::fs::read_to_string(session.join("messages.compactions").join(name)).is_ok_and(
                |t| {
                    t.lines().count() > 0
                        && t.lines().all(|l| serde_json::from_str::<Value>(l).is_ok())
                },
            )
        });
    table.row(
        seed("Request-Boundary Persisted Compaction"),
        "removed messages archived to messages.compactions/<id>.jsonl",
        true,
        lines_are_messages,
    );
    let last = last_request(&scratch.path().join("req"));
    table.row(
        seed("Request-Boundary Persisted Compaction"),
        "one summary message replaces them, naming the archive",
        true,
        archives
            .iter()
            .any(|a| last.contains(&format!("messages.compactions/{a}"))),
    );
    // The first request that carries the summary is the first call of the second request:
    // it ends with the user's new ask (the compaction ran as the request arrived).
    let summarized_first = names_in(&scratch.path().join("req"))
        .into_iter()
        .filter(|n| n.starts_with("step-"))
        .map(|n| std::fs::read_to_string(scratch.path().join("req").join(n)).expect("read request"))
        .find(|body| body.contains("[Conversation summary:"))
        .and_then(|body| serde_json::from_str::<Value>(&body).ok())
        .and_then(|body| body["messages"].as_array().and_then(|m| m.last().cloned()));
    table.row(
        seed("Request-Boundary Persisted Compaction"),
        "runs at request start: the compacted call ends with the new user request",
        true,
        summarized_first.is_some_and(|m| {
            m["role"] == "user" && m["content"] == "Now add a regression test for it."
        }),
    );
    table.row(
        seed("Context Window Budget"),
        "contextWindow default for a model the table does not know",
        "200000",
        at(&p, "unknown_model_window"),
    );
    table.row(
        seed("Context Providers"),
        "provider messages inserted before the session history",
        "before_history",
        at(&p, "provider_placement"),
    );

    // preserveRecentApiRounds in action: after every compaction of a long tool loop, the
    // newest API rounds are still there verbatim.
    let scratch = tempfile::tempdir().expect("temp dir");
    let file = trace(scratch.path(), "rounds.json", coding_session(60, 12));
    let report = replay(&file, "agentrail", 16_000, scratch.path(), &[]);
    let kept = report["min_recent_rounds_verbatim"].as_u64();
    table.row(
        seed("Configuration"),
        "after every compaction of a 60-round tool loop, the last API rounds kept verbatim (fewest seen)",
        "at least 2",
        match (report["compactions"].as_u64().unwrap_or(0), kept) {
            (0, _) => "no compaction".to_string(),
            (_, Some(k)) if k >= 2 => "at least 2".to_string(),
            (_, k) => format!("{k:?}"),
        },
    );

    // ---- 003 CowAgent -----------------------------------------------------------------------
    let seed = |section| ("003 CowAgent", section, "cowagent");
    let p = policy("cowagent");
    table.row(
        seed("Key Configuration"),
        "agent_max_context_tokens",
        "50000",
        at(&p, "trigger_tokens"),
    );
    table.row(
        seed("Key Configuration"),
        "agent_max_context_turns",
        "20",
        at(&p, "trigger_turns"),
    );
    table.row(
        seed("Tool Result Truncation"),
        "historical results cut above (chars)",
        "20000",
        at(&p, "stages.0.max_chars"),
    );
    table.row(
        seed("Overflow Emergency Handling"),
        "aggressive trim: turns kept / chars per result",
        "5 / 10000",
        format!(
            "{} / {}",
            at(&p, "overflow.stages.0.max_turns"),
            at(&p, "overflow.stages.1.max_chars")
        ),
    );
    table.row(
        seed("Session Persistence"),
        "sessions older than (days) removed",
        "30",
        at(&p, "session.retention_days"),
    );
    table.row(
        seed("Turn Trimming"),
        "serve: long-term memory for the daily memory file",
        "true",
        serve_memory("cowagent"),
    );

    let scratch = tempfile::tempdir().expect("temp dir");
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    for i in 0..26 {
        messages.push(json!({"role": "user", "content": format!("Question {i}: what is the status of order ORD-{i:04}?")}));
        messages.push(json!({"role": "assistant", "content": format!("Order ORD-{i:04} shipped on day {i}.")}));
    }
    let file = trace(scratch.path(), "turns.json", messages);
    let store = format!("sqlite://{}", scratch.path().join("sessions.db").display());
    replay(
        &file,
        "cowagent",
        128_000,
        scratch.path(),
        &["--store", &store, "--session", "cow"],
    );
    let memory = today_memory(&scratch.path().join("ws"));
    table.row(
        seed("Turn Trimming"),
        "trimmed turns summarized into memory/YYYY-MM-DD.md",
        true,
        memory.contains("ORD-0000"),
    );
    let last = last_request(&scratch.path().join("req"));
    table.row(
        seed("Turn Trimming"),
        "trimmed turns leave the context",
        true,
        !last.contains("ORD-0000"),
    );
    let restored = json_of(run(&[
        "sessions", "--store", &store, "--json", "restore", "cow", "--policy", "cowagent",
    ]));
    table.row(
        seed("Session Persistence"),
        "turns restored: max(3, 20 / 6)",
        3,
        restored["turns"].clone(),
    );
    let text_only = restored["messages"]
        .as_array()
        .is_some_and(|m| m.iter().all(|m| !m.to_string().contains("tool_call")));
    table.row(
        seed("Session Persistence"),
        "restored turns are text only",
        true,
        text_only,
    );
    let gc = json_of(run(&[
        "sessions", "--store", &store, "--json", "gc", "--policy", "cowagent",
    ]));
    table.row(
        seed("Session Persistence"),
        "sessions gc --policy cowagent age (days)",
        30,
        gc["older_than_secs"].as_u64().unwrap_or(0) / 86_400,
    );

    // agent_max_context_turns in action: a chat of 30 short turns never shows the model more
    // than 20 of them.
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut chat = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    for i in 0..30 {
        chat.push(
            json!({"role": "user", "content": format!("Question {i}: what is {i} squared?")}),
        );
        chat.push(json!({"role": "assistant", "content": format!("{i} squared is {}.", i * i)}));
    }
    let file = trace(scratch.path(), "chat.json", chat);
    replay(&file, "cowagent", 128_000, scratch.path(), &[]);
    let most_turns = requests(&scratch.path().join("req"))
        .iter()
        .map(|body| {
            body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == "user")
                .count()
        })
        .max()
        .unwrap_or(0);
    table.row(
        seed("Key Configuration"),
        "a chat of 30 turns: user turns in any request",
        "at most 20",
        if most_turns <= 20 {
            "at most 20".to_string()
        } else {
            most_turns.to_string()
        },
    );

    // agent_max_context_tokens in action: eight turns of tool rounds grow past 50,000 tokens
    // in a 128k window; with five turns or more the oldest half is dropped, so no request
    // goes over the budget. (A single turn in progress is never cut: its tool chain is the
    // current turn's, as in CowAgent.)
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut messages = coding_session(20, 12);
    messages.pop();
    for turn in 1..8 {
        messages.push(json!({"role": "assistant", "content": format!("Module {turn} is fixed.")}));
        messages.push(
            json!({"role": "user", "content": format!("Now fix module {turn} the same way.")}),
        );
        let mut next = coding_session(20, 12).split_off(2);
        next.pop();
        messages.extend(next);
    }
    messages.push(json!({"role": "assistant", "content": "All modules are fixed."}));
    let file = trace(scratch.path(), "turns-long.json", messages);
    let report = replay(&file, "cowagent", 128_000, scratch.path(), &[]);
    table.row(
        seed("Key Configuration"),
        "eight turns of tool rounds growing to about 80,000 tokens in a 128k window: compacted, and no request over 50,000 tokens",
        "compacted; every request ≤ 50000",
        within(&report, 50_000),
    );

    // ---- 004 HarnessAgent -------------------------------------------------------------------
    let seed = |section| ("004 HarnessAgent", section, "harness");
    let p = policy("harness");
    table.row(
        seed("Compaction"),
        "trigger (messages) / kept verbatim",
        "30 / 10",
        format!(
            "{} / {}",
            at(&p, "trigger_messages"),
            at(&p, "stages.1.keep_messages")
        ),
    );
    table.row(
        seed("Tool-result eviction"),
        "evict above (chars) / head and tail",
        "80000 / 2000",
        format!(
            "{} / {}",
            at(&p, "ingest.tool_result.max_chars"),
            at(&p, "ingest.tool_result.head_chars")
        ),
    );
    table.row(
        seed("Compaction"),
        "maxArgLength",
        "2000",
        at(&p, "stages.0.max_arg_length"),
    );

    let scratch = tempfile::tempdir().expect("temp dir");
    // Two user turns: the first (with the user's constraint) is compacted during the second.
    let mut messages = coding_session(9, 10);
    messages.push(json!({"role": "user", "content": "Now do the same for the tax module."}));
    messages.extend(coding_session(12, 10).into_iter().skip(2));
    let file = trace(scratch.path(), "coding.json", messages);
    replay(&file, "harness", 128_000, scratch.path(), &[]);
    let memory = today_memory(&scratch.path().join("ws"));
    let flushed = [
        ("decisions", "Decision:"),
        ("paths", "src/billing/invoice.rs"),
        ("errors", "Error:"),
        ("constraints", "Never touch the database schema"),
    ];
    let found: Vec<&str> = flushed
        .iter()
        .filter(|(_, needle)| memory.contains(needle))
        .map(|(what, _)| *what)
        .collect();
    table.row(
        seed("Coordination with Memory (flushBeforeCompact)"),
        "facts flushed to memory/ before compaction, extractive summarizer",
        "decisions, paths, errors, constraints",
        found.join(", "),
    );
    table.row(
        seed("Coordination with Memory (flushBeforeCompact)"),
        "flushBeforeCompact (default true); serve: long-term memory",
        "true / true",
        format!(
            "{} / {}",
            at(&p, "memory.flush_before_compact"),
            serve_memory("harness")
        ),
    );

    // The summary's SESSION INTENT names the user's request, also when the request itself stays
    // in the context (only tool rounds were summarized).
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut messages = coding_session(20, 3);
    messages.pop();
    messages.push(json!({"role": "assistant", "content": "Done."}));
    let file = trace(scratch.path(), "one-request.json", messages);
    replay(&file, "harness", 128_000, scratch.path(), &[]);
    let last = last_request(&scratch.path().join("req"));
    let last: Value = serde_json::from_str(&last).expect("the request is JSON");
    let intent = last["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .find_map(|text| text.split("## SESSION INTENT").nth(1))
        .map(|rest| rest.split("\n## ").next().unwrap_or_default().to_string())
        .unwrap_or_default();
    table.row(
        seed("Compaction"),
        "the summary's SESSION INTENT names the user's request (here kept in the context, only tool rounds summarized)",
        "names it",
        if intent.contains("Fix the failing invoice totals") {
            "names it"
        } else {
            "empty"
        },
    );

    // Eviction: a shell result over 80,000 characters becomes head + tail with a pointer to
    // the whole output in the workspace; a read_file result of the same size stays whole.
    let scratch = tempfile::tempdir().expect("temp dir");
    let big = |word: &str| -> String {
        (0..4_000)
            .map(|j| format!("{word} line {j:06} value {}\n", j * 7))
            .collect()
    };
    let messages = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": "Read the build log and the notes."}),
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "shell_1", "type": "function", "function": {"name": "execute", "arguments": "{\"command\":\"cat build.log\"}"}},
            {"id": "read_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"notes.txt\"}"}}
        ]}),
        json!({"role": "tool", "tool_call_id": "shell_1", "content": big("log")}),
        json!({"role": "tool", "tool_call_id": "read_1", "content": big("note")}),
        json!({"role": "assistant", "content": "Both read."}),
    ];
    let file = trace(scratch.path(), "big-outputs.json", messages);
    replay(&file, "harness", 200_000, scratch.path(), &[]);
    let last: Value = serde_json::from_str(&last_request(&scratch.path().join("req")))
        .expect("the request is JSON");
    let result = |id: &str| -> String {
        last["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["tool_call_id"] == id)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let shell = result("shell_1");
    let pointer_resolves = shell
        .split_whitespace()
        .find(|w| w.contains("tool_result-shell_1.txt"))
        .is_some_and(|reference| {
            scratch
                .path()
                .join("ws")
                .join(reference.trim_end_matches(['.', ',', ';']))
                .is_file()
        });
    let original = big("log");
    table.row(
        seed("Tool-result eviction"),
        "a 110,000-char shell result: head + tail kept, the whole output in the workspace at the reference it names",
        "head 2000 / tail 2000 / reference resolves",
        format!(
            "head {} / tail {} / reference {}",
            common_prefix(&shell, &original),
            common_suffix(&shell, &original),
            if pointer_resolves { "resolves" } else { "missing" }
        ),
    );
    table.row(
        seed("Tool-result eviction"),
        "read_file is excluded: a result of the same size stays whole",
        "whole",
        if result("read_1") == big("note") {
            "whole"
        } else {
            "cut"
        },
    );

    // triggerMessages / keepMessages in action: a tool loop compacts at the first step whose
    // conversation (the system prompt apart, as HarnessAgent keeps it apart) holds 30
    // messages, into the summary and at least the last 10 messages as they were, the cut moved
    // back to the call a kept result answers.
    let scratch = tempfile::tempdir().expect("temp dir");
    let messages = coding_session(20, 3);
    let file = trace(scratch.path(), "forty.json", messages.clone());
    replay(&file, "harness", 128_000, scratch.path(), &[]);
    let sent = requests(&scratch.path().join("req"));
    let count = |body: &Value| body["messages"].as_array().map_or(0, Vec::len);
    // Step i answers the i-th assistant message: its conversation is every message before
    // that one, the system prompt apart.
    let conversation_at = |step: usize| {
        messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m["role"] == "assistant")
            .nth(step)
            .map_or(0, |(at, _)| at - 1)
    };
    let first_compacted = (1..sent.len()).find(|&i| count(&sent[i]) < count(&sent[i - 1]));
    let first_at_30 = (0..sent.len()).find(|&i| conversation_at(i) >= 30);
    let observed = match first_compacted {
        None => "never compacted".to_string(),
        Some(i) => {
            let body = sent[i]["messages"].as_array().cloned().unwrap_or_default();
            // The trailing rounds equal to the conversation's own (by role and text), up to
            // the user's request the preset keeps in front of them.
            let text = |m: &Value| (m["role"].clone(), m["content"].clone());
            let original: Vec<(Value, Value)> = messages.iter().map(text).collect();
            let verbatim: Vec<&Value> = body
                .iter()
                .rev()
                .take_while(|m| m["role"] != "user" && original.contains(&text(m)))
                .collect();
            let starts_at_call = verbatim
                .last()
                .is_some_and(|m| m["role"] == "assistant" && m["tool_calls"].is_array());
            format!(
                "{}; {}",
                if Some(i) == first_at_30 {
                    "at 30".to_string()
                } else {
                    format!("at {}", conversation_at(i))
                },
                if verbatim.len() >= 10 && starts_at_call {
                    "the last 10 or more, from a call".to_string()
                } else {
                    format!("{} kept", verbatim.len())
                }
            )
        }
    };
    table.row(
        seed("Compaction"),
        "a 43-message tool loop: when it compacts (messages, the system prompt apart) / what stays verbatim",
        "at 30; the last 10 or more, from a call",
        observed,
    );

    let markdown = table.markdown();
    if let Some(path) = std::env::var_os("CTXKEEPER_CONFORMANCE_OUT") {
        std::fs::write(path, &markdown).expect("write the table");
    }
    eprintln!("{markdown}");
    let mismatched: Vec<String> = table
        .rows
        .iter()
        .filter(|r| r.documented != r.observed)
        .map(|r| {
            format!(
                "{} / {} / {}: documented {}, observed {}",
                r.seed, r.preset, r.behaviour, r.documented, r.observed
            )
        })
        .collect();
    assert!(mismatched.is_empty(), "{mismatched:#?}");
}
