//! Imports every shared real trace (`../shared/data/traces`, or `$CTXKEEPER_TRACES`) and pins
//! what comes out: the detected format, sessions, messages, roles, tool calls and results,
//! warnings, and the `check` violations of each session as imported — the baseline that shows
//! later that requests emitted from these sessions add no violation the source did not have.
//!
//! The expected message, role and tool counts were measured independently of this crate, with
//! a short Python script over the raw files that applies the documented mapping (tau-bench and
//! SWE-agent: one message per history entry; OpenHands: message/finish actions are text, every
//! other action a call answered by the following observation; Claude Code: consecutive
//! assistant entries with the same `message.id` merged, summary/system entries skipped; Codex:
//! consecutive assistant-side Responses items — reasoning, assistant message, `*_call` — form
//! one assistant message, every `*_output` one tool message).
//! Violation counts are what `check(&messages, &CheckRules::openai())` reports on the imported
//! sessions; they pin the baseline rather than being measured independently.
//!
//! The second half feeds truncated and oversized input to every importer and asserts that each
//! returns a value or an error, never a panic.

use std::collections::BTreeMap;

use ctxkeeper_core::Position;
use ctxkeeper_core::import::{Session, TraceFormat, detect, import};
use ctxkeeper_core::model::{CheckRules, Message, Role, check};

#[path = "support/traces.rs"]
mod traces;

use traces::traces_dir;

fn read(relative: &str) -> Option<(String, String)> {
    let path = traces_dir()?.join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some((text, name))
}

/// What one trace file must import to.
struct Expect {
    file: &'static str,
    format: TraceFormat,
    sessions: usize,
    messages: usize,
    /// Messages per role: system, developer, user, assistant, tool.
    roles: [usize; 5],
    tool_calls: usize,
    tool_results: usize,
    warnings: &'static [(&'static str, usize)],
    /// Sessions with `check` violations (openai rules) and how many; every other session has
    /// none.
    violations: &'static [(&'static str, usize)],
}

fn role_counts(sessions: &[Session]) -> [usize; 5] {
    let mut counts = [0; 5];
    for message in sessions.iter().flat_map(|s| &s.messages) {
        let slot = match message.role {
            Role::System => 0,
            Role::Developer => 1,
            Role::User => 2,
            Role::Assistant => 3,
            Role::Tool => 4,
        };
        counts[slot] += 1;
    }
    counts
}

fn count(sessions: &[Session], per_message: impl Fn(&Message) -> usize) -> usize {
    sessions
        .iter()
        .flat_map(|s| &s.messages)
        .map(per_message)
        .sum()
}

/// Imports `expect.file` and compares it with `expect`; returns the sessions for more checks.
fn check_trace(expect: &Expect) -> Option<Vec<Session>> {
    let (text, name) = read(expect.file)?;
    assert_eq!(
        detect(&text, &name),
        Some(expect.format),
        "detect {}",
        expect.file
    );
    let trace =
        import(&text, expect.format).unwrap_or_else(|err| panic!("import {}: {err}", expect.file));
    assert_eq!(trace.format, expect.format);
    let sessions = trace.sessions;
    let messages = count(&sessions, |_| 1);
    let tool_calls = count(&sessions, |m| m.tool_calls().count());
    let tool_results = count(&sessions, |m| m.tool_result_ids().count());
    let warnings: BTreeMap<String, usize> = expect
        .warnings
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    let violations: BTreeMap<String, usize> = sessions
        .iter()
        .map(|s| {
            (
                s.id.clone(),
                check(&s.messages, &CheckRules::openai()).len(),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    let expected_violations: BTreeMap<String, usize> = expect
        .violations
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    println!(
        "{}: {} sessions, {messages} messages, {tool_calls} tool calls, {tool_results} results, \
         roles {:?}, warnings {:?}, violations {violations:?}",
        expect.file,
        sessions.len(),
        role_counts(&sessions),
        trace.warnings,
    );
    assert_eq!(
        sessions.len(),
        expect.sessions,
        "sessions of {}",
        expect.file
    );
    assert_eq!(messages, expect.messages, "messages of {}", expect.file);
    assert_eq!(
        role_counts(&sessions),
        expect.roles,
        "roles of {}",
        expect.file
    );
    assert_eq!(
        tool_calls, expect.tool_calls,
        "tool calls of {}",
        expect.file
    );
    assert_eq!(
        tool_results, expect.tool_results,
        "tool results of {}",
        expect.file
    );
    assert_eq!(trace.warnings, warnings, "warnings of {}", expect.file);
    assert_eq!(
        violations, expected_violations,
        "check violations of {}",
        expect.file
    );
    Some(sessions)
}

const TAU_BENCH: Expect = Expect {
    file: "tau-bench/gpt-4o-airline.json",
    format: TraceFormat::TauBench,
    sessions: 200,
    messages: 5_308,
    roles: [200, 0, 1_490, 2_454, 1_164],
    tool_calls: 1_164,
    tool_results: 1_164,
    warnings: &[],
    violations: &[],
};

const SWE_AGENT_PLAIN: Expect = Expect {
    file: "swe-agent/pydicom__pydicom-1458.traj",
    format: TraceFormat::SweAgent,
    sessions: 1,
    messages: 26,
    roles: [1, 0, 13, 12, 0],
    tool_calls: 0,
    tool_results: 0,
    warnings: &[],
    violations: &[],
};

const SWE_AGENT_FUNCTION_CALLING: Expect = Expect {
    file: "swe-agent/marshmallow-code__marshmallow-1867.function_calling.traj",
    format: TraceFormat::SweAgent,
    sessions: 1,
    messages: 28,
    roles: [1, 0, 1, 13, 13],
    tool_calls: 13,
    tool_results: 13,
    warnings: &[],
    violations: &[],
};

const OPENHANDS: Expect = Expect {
    file: "openhands/resolver-output.jsonl",
    format: TraceFormat::OpenHands,
    sessions: 2,
    messages: 52,
    roles: [0, 0, 2, 26, 24],
    tool_calls: 24,
    tool_results: 24,
    warnings: &[],
    violations: &[],
};

const CLAUDE_CODE: Expect = Expect {
    file: "claude-code/37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl",
    format: TraceFormat::ClaudeCode,
    sessions: 1,
    messages: 214,
    roles: [0, 0, 109, 105, 0],
    tool_calls: 101,
    tool_results: 101,
    warnings: &[
        (
            "claude-code: skipped summary (a title the UI shows; not sent to the model)",
            6,
        ),
        (
            "claude-code: skipped system (a hook or status notice; not sent to the model)",
            54,
        ),
    ],
    violations: &[],
};

const CODEX: Expect = Expect {
    file: "codex/rollout-2025-10-31T19-02-58-c61729d4-da6d-46a4-9a29-ec2c614e5e23.jsonl",
    format: TraceFormat::Codex,
    sessions: 1,
    messages: 920,
    roles: [0, 0, 64, 456, 400],
    tool_calls: 400,
    tool_results: 400,
    warnings: &[
        (
            "codex: skipped event_msg/agent_message (an event for the UI that repeats the response items; not sent to the model)",
            62,
        ),
        (
            "codex: skipped event_msg/token_count (an event for the UI that repeats the response items; not sent to the model)",
            456,
        ),
        (
            "codex: skipped event_msg/user_message (an event for the UI that repeats the response items; not sent to the model)",
            63,
        ),
    ],
    violations: &[],
};

const ALL: [&Expect; 6] = [
    &TAU_BENCH,
    &SWE_AGENT_PLAIN,
    &SWE_AGENT_FUNCTION_CALLING,
    &OPENHANDS,
    &CLAUDE_CODE,
    &CODEX,
];

#[test]
fn tau_bench_imports_200_tasks() {
    let Some(sessions) = check_trace(&TAU_BENCH) else {
        return;
    };
    assert_eq!(sessions[0].id, "task-0-trial-0");
    assert!(
        sessions
            .iter()
            .all(|s| s.model.is_none() && s.tools.is_empty())
    );
    let ids: std::collections::HashSet<&str> = sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), 200, "session ids are unique");
}

#[test]
fn tau_bench_concatenates_to_one_session_without_repeated_system_prompts() {
    let Some((text, _)) = read(TAU_BENCH.file) else {
        return;
    };
    let trace = import(&text, TraceFormat::TauBench).expect("tau-bench imports");
    let joined = trace.concat();
    assert_eq!(joined.id, "concat");
    // 5,308 messages less the 199 system prompts that repeat the first task's (all 200 are
    // identical, as measured with Python).
    assert_eq!(joined.messages.len(), 5_109);
    assert_eq!(
        joined
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .count(),
        1
    );
    assert_eq!(
        joined
            .messages
            .iter()
            .map(|m| m.tool_calls().count())
            .sum::<usize>(),
        1_164
    );
    // Joining sessions that each pass `check` keeps the whole passing: every task ends with an
    // assistant reply or a user turn, never with a pending call.
    assert!(check(&joined.messages, &CheckRules::openai()).is_empty());
}

#[test]
fn swe_agent_plain_keeps_observations_as_user_messages() {
    let Some(sessions) = check_trace(&SWE_AGENT_PLAIN) else {
        return;
    };
    let messages = &sessions[0].messages;
    assert_eq!(
        messages[1].extra.get("is_demo"),
        Some(&serde_json::json!(true))
    );
    assert!(messages[3].extra.contains_key("action"));
    assert!(messages[3].extra.contains_key("thought"));
}

#[test]
fn swe_agent_function_calling_answers_tool_call_ids() {
    let Some(sessions) = check_trace(&SWE_AGENT_FUNCTION_CALLING) else {
        return;
    };
    let session = &sessions[0];
    assert_eq!(session.id, "marshmallow-code__marshmallow-1867");
    // The file replays a recorded run: its configured model is SWE-agent's `replay`.
    assert_eq!(session.model, None);
}

#[test]
fn openhands_imports_one_session_per_run() {
    let Some(sessions) = check_trace(&OPENHANDS) else {
        return;
    };
    let ids: Vec<&str> = sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["neubig/pr-viewer#5", "neubig/pr-viewer#1"]);
    let lengths: Vec<usize> = sessions.iter().map(|s| s.messages.len()).collect();
    assert_eq!(lengths, [8, 44]);
    assert_eq!(
        sessions[0].messages[1].tool_calls().next().map(|c| c.0),
        Some("oh-1")
    );
}

#[test]
fn claude_code_merges_split_responses() {
    let Some(sessions) = check_trace(&CLAUDE_CODE) else {
        return;
    };
    let session = &sessions[0];
    assert_eq!(session.id, "37f83ec9-f2ea-42a9-925e-0d5c105cb6e8");
    assert_eq!(session.model.as_deref(), Some("claude-sonnet-4-20250514"));
}

#[test]
fn codex_imports_response_items() {
    let Some(sessions) = check_trace(&CODEX) else {
        return;
    };
    let session = &sessions[0];
    assert_eq!(session.id, "c61729d4-da6d-46a4-9a29-ec2c614e5e23");
    // Codex CLI 0.34 writes no model into the rollout.
    assert_eq!(session.model, None);
}

/// Char-boundary offsets spread over `text`: every one of the first bytes, then `steps` more
/// evenly spaced, then the last few.
fn cut_points(text: &str, steps: usize) -> Vec<usize> {
    let len = text.len();
    let mut cuts: Vec<usize> = (0..64.min(len)).collect();
    cuts.extend((1..steps).map(|i| i * len / steps));
    cuts.extend(len.saturating_sub(8)..len);
    cuts.retain(|&cut| text.is_char_boundary(cut));
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

#[test]
fn truncated_real_traces_never_panic() {
    for expect in ALL {
        let Some((text, name)) = read(expect.file) else {
            return;
        };
        // Large files get fewer cuts: each import parses the whole prefix.
        let steps = if text.len() > 1_000_000 { 24 } else { 96 };
        let mut errors = 0;
        for cut in cut_points(&text, steps) {
            let prefix = &text[..cut];
            let detected = detect(prefix, &name);
            let result = import(prefix, expect.format);
            if let Some(other) = detected.filter(|f| *f != expect.format) {
                let _ = import(prefix, other);
            }
            errors += usize::from(result.is_err());
        }
        // A document cut short is always an error; a JSON Lines file cut between lines is not.
        assert!(errors > 0, "{}: no truncation was rejected", expect.file);
    }
}

#[test]
fn every_format_reads_every_trace_without_panicking() {
    for expect in ALL {
        let Some((text, _)) = read(expect.file) else {
            return;
        };
        for format in TraceFormat::ALL {
            let _ = import(&text, format);
        }
    }
}

#[test]
fn a_50_mb_single_line_imports_or_fails_on_line_one() {
    let big = "x".repeat(50 * 1024 * 1024);
    let line = format!(
        r#"{{"type":"user","sessionId":"s","uuid":"u","message":{{"role":"user","content":"{big}"}}}}"#
    );
    assert_eq!(detect(&line, "big.jsonl"), Some(TraceFormat::ClaudeCode));
    let trace = import(&line, TraceFormat::ClaudeCode).expect("a long line is fine");
    assert_eq!(trace.sessions[0].messages[0].text().len(), big.len());
    let cut = &line[..line.len() - 3];
    let err = import(cut, TraceFormat::ClaudeCode).expect_err("a cut line is not");
    assert!(
        matches!(err.position, Position::LineColumn { line: 1, .. }),
        "{err}"
    );
    let doc = format!(r#"[{{"task_id": 1, "traj": [{{"role": "user", "content": "{big}"}}]}}]"#);
    assert_eq!(detect(&doc, "x.json"), Some(TraceFormat::TauBench));
    let err = import(&doc[..doc.len() - 1], TraceFormat::TauBench).expect_err("cut document");
    assert!(
        matches!(err.position, Position::LineColumn { line: 1, .. }),
        "{err}"
    );
}

#[test]
fn hostile_ids_are_kept_verbatim() {
    let text = r#"[{"task_id": "../../etc/passwd", "trial": 0, "traj": [
        {"role": "assistant", "content": null, "tool_calls": [{"id": "../../etc/passwd",
         "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "../../etc/passwd", "content": "x"}
    ]}]"#;
    let trace = import(text, TraceFormat::TauBench).expect("imports");
    let session = &trace.sessions[0];
    assert_eq!(session.id, "task-../../etc/passwd-trial-0");
    assert_eq!(
        session.messages[1].tool_result_ids().next(),
        Some("../../etc/passwd")
    );
}
