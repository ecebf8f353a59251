//! The binary against what real agents write and need: `inspect` and `replay` over a Claude Code
//! 2.1 session with sub-agents and a mini-swe-agent trajectory (both captured from real runs,
//! in `tests/python/fixtures/agents/`), and `wrap`'s settings and exit codes.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;

use common::{json_of, run};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/fixtures/agents")
}

const CLAUDE_SESSION: &str = "91d59ea3-f193-446d-956c-539c99f0e549";

fn claude_session_file() -> String {
    fixtures()
        .join("claude-code-2.1.197-session")
        .join(format!("{CLAUDE_SESSION}.jsonl"))
        .display()
        .to_string()
}

/// Claude Code 2.1 keeps each sub-agent in `<session>/subagents/agent-<id>.jsonl`, with the
/// call that started it in `agent-<id>.meta.json`: `inspect` on the session file reads them
/// all, one session each, linked to that call.
#[test]
fn a_claude_code_session_reads_with_its_sub_agents() {
    let report = json_of(&run(&["inspect", &claude_session_file(), "--json"]));
    assert_eq!(report["format"], "claude-code");
    let sessions = report["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 6, "the main conversation and 5 sub-agents");
    assert_eq!(sessions[0]["id"], CLAUDE_SESSION);
    assert_eq!(sessions[0]["parent"], Value::Null);
    let subagents = fixtures()
        .join("claude-code-2.1.197-session")
        .join(CLAUDE_SESSION)
        .join("subagents");
    for session in &sessions[1..] {
        let id = session["id"].as_str().expect("id");
        let agent = id
            .strip_prefix(&format!("{CLAUDE_SESSION}/agent-"))
            .expect("a sub-agent id");
        let meta: Value = serde_json::from_str(
            &std::fs::read_to_string(subagents.join(format!("agent-{agent}.meta.json")))
                .expect("meta file"),
        )
        .expect("meta JSON");
        assert_eq!(
            session["parent"]["tool_call_id"], meta["toolUseId"],
            "{id} is linked to the call its meta file names"
        );
        assert!(session["messages"].as_u64().unwrap_or(0) >= 2, "{id}");
    }
    // The human report lists the tree and says what it skipped and why.
    let text = run(&["inspect", &claude_session_file()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("main conversation"), "{text}");
    assert!(text.contains("sub-agent of"), "{text}");
    assert!(
        text.contains("claude-code: skipped attachment (context Claude Code attaches"),
        "{text}"
    );
}

#[test]
fn a_claude_code_session_with_sub_agents_replays() {
    let report = json_of(&run(&[
        "replay",
        &claude_session_file(),
        "--json",
        "--window",
        "16000",
    ]));
    assert_eq!(report["format"], "claude-code");
    assert!(report["steps"].as_u64().unwrap_or(0) >= 18, "{report}");
    assert_eq!(report["unrecoverable_items"], 0);
}

#[test]
fn a_mini_swe_agent_trajectory_inspects_and_replays() {
    let file = fixtures()
        .join("mini-swe-agent-2.4.6.traj.json")
        .display()
        .to_string();
    let report = json_of(&run(&["inspect", &file, "--json"]));
    assert_eq!(report["format"], "mini-swe-agent");
    assert_eq!(report["model"], "gpt-4o");
    let warnings = report["import_warnings"].as_object().expect("warnings");
    assert_eq!(warnings.len(), 1);
    assert!(warnings.keys().all(|k| k.contains("exit message")));
    let replay = json_of(&run(&["replay", &file, "--json"]));
    assert_eq!(replay["format"], "mini-swe-agent");
    assert_eq!(replay["steps"], 3);
}

fn wrap(args: &[&str]) -> Output {
    let mut full = vec!["wrap", "--gateway", "http://127.0.0.1:9/v1"];
    full.extend_from_slice(args);
    run(&full)
}

#[test]
fn wrap_exits_with_the_agents_exit_code() {
    for code in [0, 1, 7, 42] {
        let done = wrap(&["sh", "--", "-c", &format!("exit {code}")]);
        assert_eq!(done.status.code(), Some(code), "exit {code}");
    }
    // A signal ends the child: 128 + its number, as shells report it.
    let done = wrap(&["sh", "--", "-c", "kill -TERM $$"]);
    assert_eq!(done.status.code(), Some(128 + 15));
}

#[test]
fn wrap_points_each_agent_at_the_gateway() {
    let done = wrap(&[
        "sh",
        "--",
        "-c",
        "echo $OPENAI_BASE_URL $ANTHROPIC_BASE_URL $OPENAI_API_BASE",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&done.stdout).trim(),
        "http://127.0.0.1:9/v1 http://127.0.0.1:9 http://127.0.0.1:9/v1"
    );
    let done = wrap(&["--agent", "codex", "echo", "--", "exec", "hi"]);
    assert_eq!(
        String::from_utf8_lossy(&done.stdout).trim(),
        "-c model_provider=ctxkeeper -c model_providers.ctxkeeper={name=\"ctxkeeper\",\
         base_url=\"http://127.0.0.1:9/v1\",env_key=\"OPENAI_API_KEY\",wire_api=\"responses\"} \
         exec hi"
    );
}

#[test]
fn wrap_reports_bad_input_clearly() {
    let done = wrap(&["surely-not-an-installed-agent", "--", "-p", "x"]);
    assert_eq!(done.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(stderr.contains("not found on PATH"), "{stderr}");
    let done = run(&["wrap", "--gateway", "ftp://x", "sh", "--", "-c", "true"]);
    assert_eq!(done.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&done.stderr).contains("http:// or https://"),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
}
