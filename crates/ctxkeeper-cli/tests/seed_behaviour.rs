//! Seed behaviours through the binary, each on a small trace shaped for it (issue 33): what
//! the seed document says the system does, observed in the requests `replay` emits and the
//! files it archives.

use std::path::{Path, PathBuf};
use std::process::Command;

use ctxkeeper_core::tokens::{Profiles, TokenModel};
use serde_json::{Value, json};

#[allow(dead_code)]
#[path = "seeds/common.rs"]
mod common;

use common::{dense, trace};

fn replay(trace: &Path, preset: &str, window: u64, scratch: &Path, extra: &[&str]) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ctxkeeper"));
    command
        .arg("replay")
        .arg(trace)
        .args([
            "--policy",
            preset,
            "--window",
            &window.to_string(),
            "--json",
        ])
        .arg("--workspace")
        .arg(scratch.join("ws"))
        .arg("--emit-requests")
        .arg(scratch.join("req"))
        .args(extra);
    report_of(&mut command)
}

/// Runs the binary (without the user's config file) and reads the JSON report it prints.
fn report_of(command: &mut Command) -> Value {
    let output = command
        .env_remove("CTXKEEPER_CONFIG")
        .output()
        .expect("the binary runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("a JSON report")
}

/// The emitted requests, oldest first, parsed.
fn requests(scratch: &Path) -> Vec<Value> {
    let dir = scratch.join("req");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("emitted requests")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(n)).expect("read request");
            serde_json::from_str(&text).expect("a JSON request")
        })
        .collect()
}

fn tokens(text: &str) -> u32 {
    TokenModel::for_model("gpt-4o", &Profiles::builtin()).text_tokens(text)
}

/// Item 2: AgentScope's `tool_result_limit` is 50,000 *tokens*. A result of about 65k
/// tokens in under 200,000 characters used to pass whole; a bigger one kept 200,000
/// characters (about 75k tokens). Both now keep the largest prefix within 50,000 tokens.
#[test]
fn agentscope_cuts_tool_results_at_50000_tokens() {
    for lines in [8_000, 14_000] {
        let scratch = tempfile::tempdir().expect("temp dir");
        let output = dense(lines, 0);
        let whole = tokens(&output);
        assert!(
            whole > 60_000,
            "the trace is shaped above the limit: {whole}"
        );
        let messages = vec![
            json!({"role": "system", "content": "You are a careful agent."}),
            json!({"role": "user", "content": "Dump the table."}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function",
                "function": {"name": "dump", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "call_0", "content": output}),
            json!({"role": "assistant", "content": "Done."}),
        ];
        let file = trace(scratch.path(), "big.json", messages);
        replay(&file, "agentscope", 400_000, scratch.path(), &[]);
        let last = requests(scratch.path()).pop().expect("a request");
        let result = last["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
            .and_then(|m| m["content"].as_str())
            .expect("the tool result is in the request")
            .to_string();
        let kept = tokens(&result);
        assert!(
            (45_000..=50_000).contains(&kept),
            "{lines} lines: {whole} tokens kept {kept}"
        );
        assert!(output.starts_with(result.split("\n\n[…").next().unwrap_or_default()));
        assert!(
            result.contains("tool_result-call_0.txt"),
            "{}",
            &result[result.len() - 300..]
        );
    }
}

/// A CowAgent session of 22 turns: the first runs the tests and finds a failure, the second
/// runs them again and they pass, the rest are small talk. Past 20 turns the oldest half is
/// trimmed, summarized to the daily memory file, and its facts flushed there first. Returns
/// today's memory file.
fn cowagent_memory_after_trimming(scratch: &Path) -> String {
    let call = |id: &str| {
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": id, "type": "function",
            "function": {"name": "run_tests", "arguments": "{\"path\": \"tests/\"}"}}]})
    };
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": "Fix the failing invoice test."}),
        call("call_1"),
        json!({"role": "tool", "tool_call_id": "call_1", "content":
            "FAILED tests/test_invoice.py::test_round - AssertionError: 3 != 4\n1 failed, 211 passed"}),
        json!({"role": "assistant", "content": "The rounding in invoice.py is off by one cent."}),
        json!({"role": "user", "content": "Run the tests again after the fix."}),
        call("call_2"),
        json!({"role": "tool", "tool_call_id": "call_2", "content": "0 failed, 212 passed"}),
        json!({"role": "assistant", "content": "All 212 tests pass now."}),
    ];
    for turn in 3..=22 {
        messages.push(
            json!({"role": "user", "content": format!("Note {turn}: keep the changelog current.")}),
        );
        messages.push(json!({"role": "assistant", "content": format!("Noted ({turn}).")}));
    }
    let file = trace(scratch, "cowagent.json", messages);
    let report = replay(&file, "cowagent", 128_000, scratch, &[]);
    assert!(report["compactions"].as_u64() > Some(0), "{report}");
    let dir = scratch.join("ws/memory");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("no memory directory {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let today = files.pop().expect("a daily memory file");
    std::fs::read_to_string(today).expect("read memory")
}

/// Issue 33, item 9: the memory flush filed a passing test run as an error ("Error:
/// [run_tests] 0 failed, 212 passed"). Only the run that failed is an error now.
#[test]
fn the_memory_flush_files_only_failures_as_errors() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let memory = cowagent_memory_after_trimming(scratch.path());
    let errors: Vec<&str> = memory
        .lines()
        .filter(|l| l.starts_with("- Error: "))
        .collect();
    assert!(
        errors
            .iter()
            .any(|l| l.contains("FAILED tests/test_invoice.py::test_round")),
        "the real failure is an error: {memory}"
    );
    assert!(
        !errors.iter().any(|l| l.contains("0 failed, 212 passed")),
        "a passing run is no error: {memory}"
    );
}

/// Issue 33, item 9: CowAgent's trimmed-turn summary went into the daily file as one long
/// bullet, its section headings flattened into it. It keeps its structure: a heading per
/// section, its lines as a list.
#[test]
fn cowagent_memory_keeps_the_trimmed_turns_summary_structured() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let memory = cowagent_memory_after_trimming(scratch.path());
    let at = memory
        .find("summary of turns compacted")
        .unwrap_or_else(|| panic!("no summary entry: {memory}"));
    let entry = &memory[at..];
    let entry = &entry[..entry[1..].find("\n## ").map_or(entry.len(), |end| end + 1)];
    let titles = ["Task overview", "Current state", "Next steps"];
    for title in titles {
        assert!(
            entry.lines().any(|l| l == format!("### {title}")),
            "{title:?} is a heading of its own: {entry}"
        );
    }
    for line in entry.lines().skip(1) {
        assert!(
            line.is_empty() || line.starts_with("### ") || line.starts_with("- "),
            "a line that is neither heading nor list item: {line:?}"
        );
        let named = titles.iter().filter(|t| line.contains(*t)).count();
        assert!(named <= 1, "headings flattened into one line: {line:?}");
    }
    assert!(entry.contains("Fix the failing invoice test"), "{entry}");
}

/// Every file under `dir`, recursively, as paths relative to it.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(relative) = path.strip_prefix(dir) {
                out.push(relative.to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// The text of a chat request's messages, one string each.
fn texts(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .map(|m| {
                    let role = m["role"].as_str().unwrap_or_default().to_string();
                    let content = match &m["content"] {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    (role, content)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// An agent's request of `rounds` tool rounds (each output about 300 tokens) and its final
/// answer.
fn agent_request(ask: &str, first: usize, rounds: usize) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": ask})];
    for i in first..first + rounds {
        let id = format!("call_{i}");
        messages.push(
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": id,
            "type": "function", "function": {"name": "read_file",
            "arguments": json!({"path": format!("src/module_{i}.rs")}).to_string()}}]}),
        );
        let output: String = (0..24)
            .map(|j| format!("src/module_{i}.rs:{j}: let total_{j} = round(amount_{j}, 2);\n"))
            .collect();
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
    }
    messages.push(json!({"role": "assistant", "content": format!("{ask}: done.")}));
    messages
}

/// Item 6 (Agentrail, layer 2): the request-boundary compaction runs when the user's next
/// request arrives, never inside the agent's tool loop. It used to fire on the call where
/// the request in progress crossed the trigger and summarize that request's own rounds.
#[test]
fn agentrail_compacts_at_the_start_of_the_next_request_not_inside_the_tool_loop() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let config = scratch.path().join("ctxkeeper.toml");
    std::fs::write(&config, "[policy]\ntrigger_tokens = 3000\n").expect("write config");
    let mut messages = vec![json!({"role": "system", "content": "You are a careful agent."})];
    messages.extend(agent_request("Fix the rounding in invoices", 0, 14));
    messages.extend(agent_request("Now fix the tax module", 14, 3));
    let file = trace(scratch.path(), "two-requests.json", messages);
    let report = replay(
        &file,
        "agentrail",
        200_000,
        scratch.path(),
        &["--config", config.to_str().expect("utf-8")],
    );
    assert!(report["compactions"].as_u64() >= Some(1), "{report}");
    let requests = requests(scratch.path());
    let first_summarized = requests
        .iter()
        .position(|r| {
            texts(r)
                .iter()
                .any(|(_, t)| t.starts_with("[Conversation summary:"))
        })
        .expect("a request-boundary compaction");
    let sent = texts(&requests[first_summarized]);
    // The compacted request is the first call of the second request: it ends with the
    // user's new ask, which stays verbatim after the summary.
    assert_eq!(
        sent.last(),
        Some(&("user".to_string(), "Now fix the tax module".to_string())),
        "{sent:?}"
    );
    assert_eq!(
        first_summarized, 15,
        "the 16th call opens the second request"
    );
    let session = files_under(&scratch.path().join("ws"));
    assert!(
        session
            .iter()
            .any(|p| p.to_string_lossy().contains("messages.compactions/")),
        "{session:?}"
    );
}

/// Item 6 (Agentrail, layer 1): a capped tool output is saved whole to
/// `tool-results/<toolCallId>.txt` in the session's folder (it went to
/// `tool_result-<id>.txt`), and the preview names that file. Tool-call ids are hostile
/// input: none becomes a path outside that folder.
#[test]
fn agentrail_saves_capped_outputs_to_tool_results_by_call_id_and_hostile_ids_stay_inside() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let long_id = "x".repeat(400);
    let ids = [
        "call_ok",
        "../../escaped",
        "/etc/passwd",
        "nul\u{0}byte",
        long_id.as_str(),
    ];
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful agent."}),
        json!({"role": "user", "content": "Dump the tables."}),
    ];
    for id in ids {
        messages.push(
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": id,
            "type": "function", "function": {"name": "dump", "arguments": "{}"}}]}),
        );
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": dense(3_000, 0)}));
    }
    messages.push(json!({"role": "assistant", "content": "Done."}));
    let file = trace(scratch.path(), "dumps.json", messages);
    replay(&file, "agentrail", 400_000, scratch.path(), &[]);

    let workspace = scratch.path().join("ws");
    let saved: Vec<PathBuf> = files_under(&workspace)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    assert_eq!(saved.len(), ids.len(), "{saved:?}");
    for path in &saved {
        let parts: Vec<String> = path
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            parts.len(),
            4,
            "sessions/<sid>/tool-results/<file>: {path:?}"
        );
        assert_eq!(
            (parts[0].as_str(), parts[2].as_str()),
            ("sessions", "tool-results")
        );
        assert!(
            !parts[3].starts_with('.') && parts[3].len() < 200,
            "{path:?}"
        );
    }
    assert!(
        saved
            .iter()
            .any(|p| p.ends_with("tool-results/call_ok.txt")),
        "{saved:?}"
    );
    // Nothing was written beside the workspace.
    let mut outside = files_under(scratch.path());
    outside.retain(|p| !p.starts_with("ws") && !p.starts_with("req"));
    assert_eq!(outside, vec![PathBuf::from("dumps.json")]);
    assert!(!Path::new("/etc/passwd.txt").exists());

    // Each preview in the context names the file its whole output was saved to.
    let last = requests(scratch.path()).pop().expect("a request");
    let previews: Vec<String> = texts(&last)
        .into_iter()
        .filter(|(role, _)| role == "tool")
        .map(|(_, text)| text)
        .collect();
    assert_eq!(previews.len(), ids.len());
    for path in &saved {
        let reference = path.to_string_lossy().into_owned();
        assert!(
            previews.iter().any(|p| p.contains(&reference)),
            "no preview names {reference}"
        );
    }
}

/// Item 6 (Agentrail, context window budget): a model the profile table does not know gets
/// Agentrail's `contextWindow` default of 200,000 tokens (it got the table's 128,000); other
/// presets keep the table's default, and a window the user gives still wins.
#[test]
fn agentrail_gives_an_unknown_model_a_200k_window_unless_the_user_sets_one() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let messages = vec![
        json!({"role": "user", "content": "hello"}),
        json!({"role": "assistant", "content": "hi"}),
    ];
    let file = trace(scratch.path(), "tiny.json", messages);
    let window = |policy: &str, extra: &[&str]| {
        let mut args = vec![
            "replay".to_string(),
            file.to_string_lossy().into_owned(),
            "--policy".into(),
            policy.into(),
            "--model".into(),
            "acme-llm-unlisted".into(),
            "--json".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let report = report_of(Command::new(env!("CARGO_BIN_EXE_ctxkeeper")).args(&args));
        report["window"].as_u64().expect("the window")
    };
    assert_eq!(window("agentrail", &[]), 200_000);
    assert_eq!(window("default", &[]), 128_000);
    assert_eq!(window("agentrail", &["--window", "64000"]), 64_000);
    let config = scratch.path().join("models.toml");
    std::fs::write(&config, "[models.default]\ncontext_window = 32000\n").expect("write");
    assert_eq!(
        window("agentrail", &["--config", config.to_str().expect("utf-8")]),
        32_000
    );
}
