//! 002 Agentrail: its rows of the seed-conformance table.

use serde_json::{Value, json};

use super::common::*;

pub fn rows(table: &mut Table) {
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
}
