//! End-to-end tests of the `ctxkeeper` binary: every shared trace through `inspect` and
//! `replay`, emitted requests checked against the providers' rules, and bad input.

use std::path::{Path, PathBuf};
use std::process::Output;

use ctxkeeper_core::formats::Wire;
use ctxkeeper_core::import::{self};
use ctxkeeper_core::model::{CheckRules, check};
use ctxkeeper_core::stats::thousands;
use serde_json::Value;

mod common;

use common::{assert_success, bin, json_of, replay, run, stdout_of};

#[path = "../../ctxkeeper-core/tests/support/traces.rs"]
mod traces;

use traces::{HARNESSES, harness_files, traces_dir};

/// Every trace file of the shared set.
fn traces() -> Vec<PathBuf> {
    let Some(dir) = traces_dir() else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = HARNESSES
        .iter()
        .flat_map(|harness| harness_files(&dir, harness))
        .collect();
    files.sort();
    assert!(
        files.len() >= 6,
        "expected the six shared traces, found {files:?}"
    );
    files
}

#[test]
fn inspect_and_baseline_replay_succeed_on_every_trace() {
    for trace in traces() {
        let path = trace.to_str().expect("utf-8 path");
        let inspect = json_of(&run(&["inspect", path, "--json"]));
        assert!(
            inspect["stats"]["messages"].as_u64().unwrap_or(0) > 0,
            "{path}"
        );
        let report = json_of(&replay(
            &trace,
            &["--policy", "none", "--json", "--window", "16000"],
        ));
        for field in [
            "trace",
            "format",
            "model",
            "window",
            "policy",
            "steps",
            "peak_input_tokens",
            "cumulative_input_tokens",
            "overflowed_steps",
            "violations",
        ] {
            assert!(!report[field].is_null(), "{path}: missing {field}");
        }
        for field in ["total", "p50_step", "p99_step"] {
            assert!(
                report["engine_time_us"][field].is_number(),
                "{path}: engine_time_us.{field}"
            );
        }
        assert_eq!(report["violations"], 0, "{path}");
        assert!(report["steps"].as_u64().unwrap_or(0) > 0, "{path}");
    }
}

/// Pairing violations of every emitted step, after parsing the request back in its own
/// format and checking it with that provider's rules.
fn emitted_pairing_violations(dir: &Path, wire: Wire) -> usize {
    let rules = match wire {
        Wire::Anthropic => CheckRules::anthropic(),
        _ => CheckRules::openai(),
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("emit dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for (index, file) in files.iter().enumerate() {
        assert_eq!(
            file.file_name().and_then(|n| n.to_str()),
            Some(format!("step-{:05}.json", index + 1).as_str()),
            "steps are numbered in order"
        );
    }
    let mut violations = 0;
    for file in files {
        let body: Value =
            serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("json");
        assert!(
            body["model"].is_string(),
            "{}: the model is named",
            file.display()
        );
        let request = wire
            .parse_request(&body)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        violations += check(&request.messages, &rules)
            .iter()
            .filter(|v| v.kind.is_tool_pairing())
            .count();
    }
    violations
}

#[test]
fn emitted_requests_add_no_tool_pairing_violation_to_any_trace() {
    for trace in traces() {
        let path = trace.to_str().expect("utf-8 path");
        // What the source itself breaks: emitted requests may inherit it, never add to it.
        let text = std::fs::read_to_string(&trace).expect("read trace");
        let format = import::detect(&text, path).expect("detected");
        let source = import::import(&text, format).expect("imported");
        let source_violations: usize = source
            .sessions
            .iter()
            .map(|s| {
                check(&s.messages, &CheckRules::history())
                    .iter()
                    .filter(|v| v.kind.is_tool_pairing())
                    .count()
            })
            .sum();
        for wire in [Wire::OpenAiChat, Wire::Anthropic] {
            let dir = tempfile::tempdir().expect("temp dir");
            let out = dir.path().join("requests");
            let output = replay(
                &trace,
                &[
                    "--json",
                    "--emit-requests",
                    out.to_str().expect("utf-8"),
                    "--wire",
                    wire.as_str(),
                ],
            );
            let report = json_of(&output);
            let emitted = emitted_pairing_violations(&out, wire);
            assert!(
                emitted <= source_violations,
                "{path} as {}: {emitted} pairing violations emitted, source has {source_violations}",
                wire.as_str()
            );
            assert_eq!(
                emitted,
                0,
                "{path} as {}: the shared traces are clean",
                wire.as_str()
            );
            assert_eq!(report["violations"], 0);
        }
    }
}

#[test]
fn tau_bench_concatenates_into_one_long_session() {
    let Some(dir) = traces_dir() else { return };
    let path = dir.join("tau-bench/gpt-4o-airline.json");
    let report = json_of(&replay(&path, &["--concat", "--json", "--window", "16000"]));
    assert_eq!(report["sessions"], 1);
    assert_eq!(report["messages"], 5_109);
    assert_eq!(report["steps"], 2_454);
    assert!(
        report["overflowed_steps"].as_u64().unwrap_or(0) > 2_000,
        "most steps overflow 16k unmanaged"
    );
}

#[test]
fn the_demo_trace_replays_under_every_policy() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo-trace.json");
    let demo = demo.to_str().expect("utf-8");
    for policy in ctxkeeper_core::engine::presets::NAMES {
        let report = json_of(&replay(
            Path::new(demo),
            &["--policy", policy, "--window", "16000", "--json"],
        ));
        assert_eq!(report["policy"], policy);
        assert_eq!(report["violations"], 0, "{policy}");
        assert_eq!(report["unrecoverable_items"], 0, "{policy}");
    }
    // The human report reads well too.
    let output = replay(
        Path::new(demo),
        &["--policy", "default", "--window", "16000"],
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success());
    assert!(
        text.contains("peak input tokens") && text.contains("% of unmanaged"),
        "{text}"
    );
}

/// A bad-input case: the file's content and what the one-line error must mention.
fn assert_input_error(name: &str, content: &[u8], extra_args: &[&str], expect: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join(name);
    std::fs::write(&file, content).expect("write");
    let path = file.to_str().expect("utf-8");
    for command in ["inspect", "replay"] {
        let mut args = vec![command, path];
        args.extend_from_slice(extra_args);
        let output = run(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name} {command}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{name} {command}: one line, got {stderr:?}");
        assert!(
            lines[0].starts_with("error: ") && lines[0].contains(path),
            "{name}: {stderr}"
        );
        for needle in expect {
            assert!(
                lines[0].contains(needle),
                "{name} {command}: {needle:?} missing in {stderr}"
            );
        }
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    }
}

#[test]
fn malformed_input_is_a_one_line_error_with_file_and_position() {
    assert_input_error(
        "truncated.json",
        br#"[{"task_id": 1, "traj": [{"role": "user", "content": "hi"#,
        &[],
        &["line 1"],
    );
    assert_input_error(
        "wrong-type.json",
        br#"{"model": "gpt-4o", "messages": [{"role": "user", "content": 42}]}"#,
        &["--format", "openai-chat"],
        &["messages[0].content"],
    );
    assert_input_error(
        "unknown-role.json",
        br#"{"model": "gpt-4o", "messages": [{"role": "narrator", "content": "x"}]}"#,
        &["--format", "openai-chat"],
        &["narrator"],
    );
    assert_input_error(
        "binary.json",
        &[0xff, 0xfe, 0x00, 0x41],
        &[],
        &["UTF-8", "byte 0"],
    );
    assert_input_error("empty.json", b"", &[], &["format"]);
}

#[test]
fn a_50_mb_single_line_is_handled_without_a_crash() {
    // A valid 50 MB one-line request, then the same line cut short.
    let big = "x".repeat(50 * 1024 * 1024);
    let body = format!(
        r#"{{"model":"gpt-4o","messages":[{{"role":"user","content":"{big}"}},{{"role":"assistant","content":"ok"}}]}}"#
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let whole = dir.path().join("big.json");
    std::fs::write(&whole, &body).expect("write");
    let report = json_of(&replay(&whole, &["--json", "--format", "openai-chat"]));
    assert_eq!(report["steps"], 1);
    assert!(report["peak_input_tokens"].as_u64().unwrap_or(0) > 1_000_000);
    assert_input_error(
        "big-cut.json",
        &body.as_bytes()[..body.len() - 40],
        &["--format", "openai-chat"],
        &["line 1"],
    );
}

#[test]
fn unknown_options_are_usage_errors() {
    let output = replay(Path::new("x.json"), &["--policy", "nonsense"]);
    assert_eq!(output.status.code(), Some(2));
    let output = run(&["frobnicate"]);
    assert_eq!(output.status.code(), Some(2));
    let output = run(&["inspect", "x.json", "--format", "nonsense"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("nonsense"));
}

/// A scratch directory, the URL of a SQLite store in it, and a workspace folder in it.
fn scratch_store() -> (tempfile::TempDir, String, PathBuf) {
    let scratch = tempfile::tempdir().expect("temp dir");
    let store = format!("sqlite://{}", scratch.path().join("sessions.db").display());
    let workspace = scratch.path().join("workspace");
    (scratch, store, workspace)
}

/// The JSON report of `replay TRACE --policy default --window 8000` into session "s1" of
/// `store` (in `tenant`, else the default one), archiving under `workspace`.
fn replay_s1(trace: &Path, store: &str, tenant: Option<&str>, workspace: &Path) -> Value {
    let mut args = vec![
        "--policy", "default", "--window", "8000", "--json", "--store", store,
    ];
    if let Some(tenant) = tenant {
        args.extend(["--tenant", tenant]);
    }
    args.extend(["--session", "s1", "--workspace"]);
    args.push(workspace.to_str().expect("utf-8"));
    json_of(&replay(trace, &args))
}

#[test]
fn a_replayed_trace_leaves_a_real_session_behind() {
    let Some(dir) = traces_dir() else { return };
    let trace = dir.join("swe-agent/marshmallow-code__marshmallow-1867.function_calling.traj");
    let (_scratch, store, workspace) = scratch_store();
    let report = replay_s1(&trace, &store, None, &workspace);
    assert_eq!(report["unrecoverable_items"], 0);

    let show = run(&["sessions", "show", "s1", "--store", &store]);
    let text = stdout_of(&show);
    assert!(text.contains("s1") && text.contains("assistant"), "{text}");

    // A word that appears only in a tool output of the trace.
    let search = run(&[
        "sessions",
        "search",
        "TimeDelta",
        "--store",
        &store,
        "--json",
    ]);
    let hits = stdout_of(&search);
    assert!(hits.contains("s1"), "every hit names its session: {hits}");

    let history = run(&[
        "sessions", "history", "s1", "--last", "5", "--store", &store, "--json",
    ]);
    let entries = json_of(&history);
    let count = entries
        .as_array()
        .map(Vec::len)
        .or_else(|| entries["entries"].as_array().map(Vec::len));
    assert_eq!(count, Some(5), "{entries}");
}

#[test]
fn a_stored_replay_archives_under_its_tenant_and_session() {
    let Some(dir) = traces_dir() else { return };
    let trace = dir.join("swe-agent/marshmallow-code__marshmallow-1867.function_calling.traj");
    let (_scratch, store, workspace) = scratch_store();
    let output = replay(
        &trace,
        &[
            "--policy",
            "default",
            "--window",
            "4000",
            "--store",
            &store,
            "--tenant",
            "acme",
            "--session",
            "stored-1",
            "--workspace",
            workspace.to_str().expect("utf-8"),
        ],
    );
    assert_success(&output);
    // Where `mcp --tenant acme --session stored-1` reads, and nowhere else.
    let archived = workspace.join("tenants/acme/sessions/stored-1");
    let items: Vec<_> = std::fs::read_dir(&archived)
        .expect("the archive of the stored session")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("tool_result-"))
        .collect();
    assert!(
        !items.is_empty(),
        "nothing archived in {}",
        archived.display()
    );
    assert!(!workspace.join("sessions").exists());

    // A bad tenant is refused before anything runs.
    let output = replay(
        &trace,
        &[
            "--policy",
            "default",
            "--store",
            &store,
            "--tenant",
            "../x",
            "--session",
            "s",
        ],
    );
    assert_eq!(output.status.code(), Some(2));
}

/// `sessions show ID --json` of a stored session.
fn stored_session(store: &str, id: &str) -> Value {
    json_of(&run(&["sessions", "show", id, "--store", store, "--json"]))
}

/// A bare OpenAI chat request with the given turns, as a trace file.
fn chat_trace(dir: &Path, name: &str, turns: &[(&str, &str)]) -> PathBuf {
    let messages: Vec<Value> = turns
        .iter()
        .map(|(role, content)| serde_json::json!({"role": role, "content": content}))
        .collect();
    let path = dir.join(name);
    std::fs::write(
        &path,
        serde_json::json!({"model": "gpt-4o", "messages": messages}).to_string(),
    )
    .expect("write trace");
    path
}

/// Finding 7 of the hardening review: a second identical `replay --store` appended the whole
/// log again (920 entries became 1,840). A re-run must leave the same log and state; a grown
/// trace appends only what is new; another conversation under the same id is refused with
/// nothing written.
#[test]
fn a_stored_replay_is_idempotent_and_refuses_another_conversation() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo-trace.json");
    let demo = demo.to_str().expect("utf-8");
    let scratch = tempfile::tempdir().expect("temp dir");
    let stores = [
        format!("sqlite://{}", scratch.path().join("sessions.db").display()),
        format!("file://{}", scratch.path().join("files").display()),
    ];
    for store in &stores {
        let stored_replay = |trace: &str, session: &str| {
            replay(
                Path::new(trace),
                &[
                    "--policy",
                    "default",
                    "--window",
                    "16000",
                    "--store",
                    store,
                    "--session",
                    session,
                ],
            )
        };
        for run_number in 1..=2 {
            let output = stored_replay(demo, "demo");
            assert!(
                output.status.success(),
                "{store} run {run_number}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let shown = stored_session(store, "demo");
            assert_eq!(
                shown["log_entries"], 105,
                "{store} run {run_number}: {shown}"
            );
            // The second run changed nothing, so it saved nothing.
            assert_eq!(shown["version"], 1, "{store} run {run_number}: {shown}");
        }

        // A trace that grew by one exchange appends that exchange only.
        let short = chat_trace(
            scratch.path(),
            "short.json",
            &[("user", "where is my parcel?"), ("assistant", "in Lyon")],
        );
        let long = chat_trace(
            scratch.path(),
            "long.json",
            &[
                ("user", "where is my parcel?"),
                ("assistant", "in Lyon"),
                ("user", "and when does it arrive?"),
                ("assistant", "on Tuesday"),
            ],
        );
        for (trace, entries) in [(&short, 2), (&long, 4), (&long, 4)] {
            let output = stored_replay(trace.to_str().expect("utf-8"), "grown");
            assert_success(&output);
            assert_eq!(stored_session(store, "grown")["log_entries"], entries);
        }

        // Another conversation under an existing id: refused, and the stored log is intact.
        let output = stored_replay(short.to_str().expect("utf-8"), "demo");
        assert_eq!(output.status.code(), Some(2), "{store}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("different conversation"), "{stderr}");
        assert_eq!(stored_session(store, "demo")["log_entries"], 105);
    }
}

/// One tau-bench task run: a lookup whose `rounds` tool outputs of `output_bytes` each fill
/// the window, then a final reply.
fn tau_task(task_id: u32, rounds: usize, output_bytes: usize) -> serde_json::Value {
    use serde_json::json;
    let mut traj = vec![
        json!({"role": "system", "content": "You are a retail support agent."}),
        json!({"role": "user", "content": format!("Task {task_id}: find my late orders.")}),
    ];
    for round in 0..rounds {
        let id = format!("call_{task_id}_{round}");
        traj.push(json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": id, "type": "function",
            "function": {"name": "get_order_details", "arguments": format!("{{\"order_id\": \"#W{round}\"}}")},
        }]}));
        let output: String = (0..)
            .map(|line| {
                format!(
                    "order #W{round} line {line}: item {} shipped late\n",
                    line * 7
                )
            })
            .take_while({
                let mut total = 0;
                move |l: &String| {
                    total += l.len();
                    total <= output_bytes
                }
            })
            .collect();
        traj.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
    }
    traj.push(json!({"role": "assistant", "content": format!("Task {task_id}: done.")}));
    json!({"task_id": task_id, "trial": 0, "reward": 1.0, "info": {}, "traj": traj})
}

/// Issue 33, item 9: a multi-session replay (tau-bench without --concat) reported the last
/// session's archived bytes (0 here) while the workspace held the others'. It reports the sum
/// over its sessions, in JSON and in text.
#[test]
fn a_multi_session_replay_reports_the_bytes_every_session_archived() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, tasks: Vec<serde_json::Value>| {
        let path = scratch.path().join(name);
        std::fs::write(&path, serde_json::Value::Array(tasks).to_string()).expect("write trace");
        path
    };
    let busy = tau_task(1, 8, 12_000);
    let quiet = tau_task(2, 0, 0);
    let both = write("both.json", vec![busy.clone(), quiet.clone()]);
    let busy_only = write("busy.json", vec![busy]);
    let quiet_only = write("quiet.json", vec![quiet]);
    let archived = |trace: &Path, json: bool| {
        let workspace = tempfile::tempdir().expect("temp dir");
        let mut args = vec![
            "replay",
            trace.to_str().expect("utf-8"),
            "--format",
            "tau-bench",
            "--policy",
            "default",
            "--window",
            "8000",
            "--workspace",
            workspace.path().to_str().expect("utf-8"),
        ];
        if json {
            args.push("--json");
        }
        run(&args)
    };
    let bytes = |trace: &Path| {
        json_of(&archived(trace, true))["archived_bytes"]
            .as_u64()
            .expect("archived_bytes")
    };
    let (busy_bytes, quiet_bytes) = (bytes(&busy_only), bytes(&quiet_only));
    assert!(busy_bytes > 0, "the busy task archives");
    assert_eq!(quiet_bytes, 0, "the quiet task archives nothing");
    let report = json_of(&archived(&both, true));
    assert_eq!(report["sessions"], 2, "{report}");
    assert_eq!(
        report["archived_bytes"],
        busy_bytes + quiet_bytes,
        "{report}"
    );

    let text = archived(&both, false);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("archived "))
        .unwrap_or_else(|| panic!("no archived line: {text}"));
    assert!(
        line.ends_with(&format!(" {} bytes", thousands(busy_bytes))),
        "{line}"
    );
}

/// Issue 33, item 9: `replay --store` stored the last request's messages, not the engine's
/// context, so the session had no summary; `serve` stores it. Reopened with `sessions show`,
/// a replayed session that was summarized has its summary.
#[test]
fn a_stored_replay_keeps_its_summary() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo-trace.json");
    let scratch = tempfile::tempdir().expect("temp dir");
    let store = format!("sqlite://{}", scratch.path().join("sessions.db").display());
    let report = json_of(&replay(
        &demo,
        &[
            "--policy",
            "default",
            "--window",
            "16000",
            "--json",
            "--store",
            &store,
            "--session",
            "demo",
        ],
    ));
    assert!(report["compactions"].as_u64() > Some(0), "{report}");
    let shown = stored_session(&store, "demo");
    assert_eq!(shown["summary_present"], true, "{shown}");
    let fields = shown["summary"]["fields"]
        .as_object()
        .or_else(|| shown["summary"].as_object())
        .expect("summary fields");
    assert!(
        fields
            .values()
            .any(|v| v.as_str().is_some_and(|t| !t.is_empty())),
        "{shown}"
    );
}

/// Issue 33, item 9: `sessions restore` (CowAgent's resume after a restart) took its turns
/// from the saved context, which never holds the last final reply. It reads the session's
/// log: the last three turns, each the user's text and the final reply, the last one
/// included.
#[test]
fn sessions_restore_takes_the_turns_from_the_log() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let store = format!("sqlite://{}", scratch.path().join("sessions.db").display());
    let mut turns: Vec<(String, String)> = Vec::new();
    for turn in 1..=5 {
        turns.push((
            "user".into(),
            format!("question {turn}: where is parcel P{turn}?"),
        ));
        turns.push((
            "assistant".into(),
            format!("final reply {turn}: P{turn} is in Lyon."),
        ));
    }
    let turns: Vec<(&str, &str)> = turns
        .iter()
        .map(|(role, text)| (role.as_str(), text.as_str()))
        .collect();
    let trace = chat_trace(scratch.path(), "parcels.json", &turns);
    json_of(&replay(
        &trace,
        &[
            "--policy",
            "cowagent",
            "--json",
            "--store",
            &store,
            "--session",
            "parcels",
        ],
    ));
    let restored = json_of(&run(&[
        "sessions", "restore", "parcels", "--policy", "cowagent", "--store", &store, "--json",
    ]));
    let texts: Vec<String> = restored["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(texts.len(), 6, "three turns of two messages: {restored}");
    assert!(texts[0].contains("question 3"), "{}", texts[0]);
    assert!(texts[5].contains("final reply 5"), "{}", texts[5]);
    assert_eq!(restored["turns"], 3);
}

/// Issue 33, item 9: `sessions gc` left each removed session's folder in the workspace (and
/// took no `--workspace`). It removes the folder of every session it removes, and nothing
/// else: not another tenant's folder, not what a link planted inside points to.
#[test]
fn sessions_gc_removes_the_workspace_folders_of_the_sessions_it_removes() {
    let (scratch, store, workspace) = scratch_store();
    let trace = scratch.path().join("busy.json");
    std::fs::write(
        &trace,
        serde_json::json!({"model": "gpt-4o", "messages": tau_task(1, 8, 12_000)["traj"]})
            .to_string(),
    )
    .expect("write trace");
    for tenant in ["default", "acme"] {
        replay_s1(&trace, &store, Some(tenant), &workspace);
    }
    let ours = workspace.join("sessions/s1");
    let theirs = workspace.join("tenants/acme/sessions/s1");
    assert!(ours.is_dir() && theirs.is_dir());
    // A link planted in the session's folder: removed as a link, its target untouched.
    let outside = scratch.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    std::fs::write(outside.join("keep.txt"), "not the store's").expect("write");
    std::os::unix::fs::symlink(&outside, ours.join("planted")).expect("symlink");
    std::thread::sleep(std::time::Duration::from_millis(20));

    let gc = json_of(&run(&[
        "sessions",
        "gc",
        "--older-than",
        "0s",
        "--store",
        &store,
        "--workspace",
        workspace.to_str().expect("utf-8"),
        "--json",
    ]));
    assert_eq!(gc["removed"], 1, "{gc}");
    assert_eq!(gc["archives_removed"], 1, "{gc}");
    assert!(!ours.exists(), "the removed session's folder is gone");
    assert!(theirs.is_dir(), "another tenant's session and folder stay");
    assert!(
        outside.join("keep.txt").is_file(),
        "a link's target is never removed"
    );
    assert!(workspace.join("sessions").is_dir());
}

/// Issue 33, item 9: README promises that the extractive summary stands in when a model
/// summarizer fails; the context got `[summary unavailable: …]` with raw lines instead. With
/// an unreachable summarizer the requests carry the extractive summary, and the report counts
/// the degraded summaries.
#[test]
fn a_failing_model_summarizer_is_replaced_by_the_extractive_summary() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo-trace.json");
    let scratch = tempfile::tempdir().expect("temp dir");
    let requests = scratch.path().join("req");
    let output = bin()
        .args([
            "replay",
            demo.to_str().expect("utf-8"),
            "--policy",
            "default",
            "--window",
            "16000",
            "--json",
            "--summarizer",
            "openai",
            // Nothing listens on the discard port: every call fails at once.
            "--summarizer-url",
            "http://127.0.0.1:9/v1",
            "--emit-requests",
            requests.to_str().expect("utf-8"),
        ])
        .env("CTXKEEPER_SUMMARIZER_API_KEY", "sk-test")
        .output()
        .expect("the binary runs");
    let report = json_of(&output);
    assert!(report["compactions"].as_u64() > Some(0), "{report}");
    let mut bodies = Vec::new();
    for entry in std::fs::read_dir(&requests)
        .expect("emitted requests")
        .flatten()
    {
        bodies.push(std::fs::read_to_string(entry.path()).expect("read request"));
    }
    let all = bodies.join("\n");
    assert!(
        !all.contains("summary unavailable"),
        "the truncation fallback was used"
    );
    assert!(
        all.contains("[Extractive summary:"),
        "no extractive summary stood in"
    );
    assert_eq!(report["summary_lines_unverified"], 0, "{report}");
    // The fallback is counted: every stand-in summary is marked degraded.
    assert!(report["degraded_summaries"].as_u64() > Some(0), "{report}");
}

#[path = "cli/config.rs"]
mod config;
