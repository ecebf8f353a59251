//! 003 CowAgent: its rows of the seed-conformance table.

use serde_json::json;

use super::common::*;

pub fn rows(table: &mut Table) {
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
}
