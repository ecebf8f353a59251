//! 002 Agentrail: its rows of the seed-conformance table.

use serde_json::{Value, json};

use super::common::*;

pub fn rows(table: &mut Table) {
    // ---- 002 Agentrail ----------------------------------------------------------------------
    let seed = |section| ("002 Agentrail", section, "agentrail");
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
    // contextWindow defaults to 200,000: a model the profile table does not know, no --window.
    let scratch = tempfile::tempdir().expect("temp dir");
    let file = trace(scratch.path(), "chat.json", coding_session(2, 3));
    let report = json_of(run(&[
        "replay",
        file.to_str().expect("utf-8"),
        "--policy",
        "agentrail",
        "--model",
        "acme-unknown-1",
        "--json",
    ]));
    table.row(
        seed("Context Window Budget"),
        "the window a replay gives a model the table does not know (no --window)",
        "200000",
        report["window"].clone(),
    );
    // Configuration by nature: providers are a library hook (`replay` has none to add).
    let p = policy("agentrail");
    table.row(
        seed("Context Providers"),
        "configuration: provider messages inserted before the session history",
        "before_history",
        at(&p, "provider_placement"),
    );

    // triggerTokens and minMessages in action: short asks, each answered at length (about
    // 7,000 tokens; dense text, about 12 tokens a line). At the start of each request the history is measured; the first request
    // whose history passes 80,000 tokens (24 messages) is compacted, not one before.
    let scratch = tempfile::tempdir().expect("temp dir");
    let chat = |answers: usize, lines: usize| -> Vec<Value> {
        let mut messages = vec![json!({"role": "system", "content": "You are a careful analyst."})];
        for j in 0..answers {
            messages
                .push(json!({"role": "user", "content": format!("Question {j}: list table {j}.")}));
            messages.push(json!({"role": "assistant", "content": dense(lines, j as u64)}));
        }
        messages
    };
    let history = |messages: &[Value], j: usize| -> u64 {
        let at = messages
            .iter()
            .position(|m| m["content"] == format!("Question {j}: list table {j}."))
            .unwrap_or(messages.len());
        messages[1..at].iter().map(message_tokens).sum()
    };
    // The question asked by the first request that carries a summary (`Question j: …`).
    let first_summarized_question = |dir: &std::path::Path| -> Option<usize> {
        let first = requests(&dir.join("req"))
            .iter()
            .map(messages_of)
            .find(|m| {
                m.iter().any(|m| {
                    m["content"]
                        .as_str()
                        .is_some_and(|t| t.contains("[Conversation summary:"))
                })
            })
            .and_then(|m| {
                m.last()
                    .and_then(|m| m["content"].as_str().map(String::from))
            });
        first
            .as_deref()
            .and_then(|t| t.strip_prefix("Question "))
            .and_then(|t| t.split(':').next())
            .and_then(|j| j.parse::<usize>().ok())
    };
    let messages = chat(16, 580);
    let file = trace(scratch.path(), "answers.json", messages.clone());
    replay(&file, "agentrail", 200_000, scratch.path(), &[]);
    let asked = first_summarized_question(scratch.path());
    table.row(
        seed("Configuration"),
        "triggerTokens: sixteen answers of about 7,000 tokens, where the first compaction happens",
        "at the first request whose history passes 80,000 tokens",
        match asked {
            None => "never compacted at a request start".to_string(),
            Some(j)
                if j > 0
                    && history(&messages, j - 1) <= 80_000
                    && history(&messages, j) > 80_000 =>
            {
                "at the first request whose history passes 80,000 tokens".to_string()
            }
            Some(j) => format!(
                "at request {j}, history {} tokens (the request before: {})",
                history(&messages, j),
                history(&messages, j.saturating_sub(1))
            ),
        },
    );
    let scratch = tempfile::tempdir().expect("temp dir");
    let messages = chat(9, 910);
    let file = trace(scratch.path(), "few-long-answers.json", messages.clone());
    let report = replay(&file, "agentrail", 200_000, scratch.path(), &[]);
    table.row(
        seed("Configuration"),
        "minMessages: nine answers of about 11,000 tokens (at the last request 16 messages of history, over 80,000 tokens)",
        "not compacted",
        match report["compactions"].as_u64() {
            Some(0) if history(&messages, 8) > 80_000 => "not compacted".to_string(),
            Some(0) => format!("not compacted, but the history is only {}", history(&messages, 8)),
            n => format!("{n:?} compactions"),
        },
    );

    // minMessages counts the session history, which holds neither the system prompt nor the
    // new request: eleven answers, all over 80,000 tokens of history from the ninth request
    // on; the request after 18 messages of history (20 with the system prompt and the new ask)
    // is not compacted, the one after 20 is.
    let scratch = tempfile::tempdir().expect("temp dir");
    let messages = chat(11, 910);
    let file = trace(scratch.path(), "eleven-answers.json", messages.clone());
    replay(&file, "agentrail", 200_000, scratch.path(), &[]);
    let asked = first_summarized_question(scratch.path());
    table.row(
        seed("Configuration"),
        "minMessages: eleven answers of about 11,000 tokens, the first compaction (at a request start)",
        "at the request after 20 messages of history (not the one after 18)",
        match asked {
            None => "never compacted at a request start".to_string(),
            Some(10) if history(&messages, 9) > 80_000 => {
                "at the request after 20 messages of history (not the one after 18)".to_string()
            }
            Some(j) => format!(
                "at the request after {} messages of history ({} tokens)",
                2 * j,
                history(&messages, j)
            ),
        },
    );

    // Reactive compaction in action: one request, a tool loop of rounds of about 850 tokens
    // in a 20,000-token window. After a call whose prompt used 85 % of the window or more
    // (but under 92 %), micro: the oldest 2 rounds summarized; at most 3 in the request, so
    // none after the third even when the prompt reaches 92 % or more.
    let loop_of = |rounds: usize, big_at: Option<usize>| -> Vec<Value> {
        let mut messages = vec![
            json!({"role": "system", "content": "You are a careful coding agent."}),
            json!({"role": "user", "content": "Fix the failing build."}),
        ];
        for i in 0..rounds {
            let lines = if Some(i) == big_at { 180 } else { 60 };
            let output: String = (0..lines)
                .map(|j| format!("{i} row {j} val {:x} {:x} {:x}\n", j * 7, j * 13, j * 31))
                .collect();
            messages.extend(round(
                &format!("c{i}"),
                "bash",
                json!({"command": format!("run {i}")}),
                output,
            ));
        }
        messages.push(json!({"role": "assistant", "content": "The build passes."}));
        messages
    };
    // (step, usage % of the call before it, rounds dropped, rounds left) for each step that
    // dropped rounds.
    let compactions = |sent: &[Value], window: u64| -> Vec<(usize, f64, usize, usize)> {
        (1..sent.len())
            .filter_map(|i| {
                let before = call_ids(&sent[i - 1]);
                let after = call_ids(&sent[i]);
                let dropped = before.iter().filter(|id| !after.contains(id)).count();
                let pct = request_tokens(&sent[i - 1]) as f64 * 100.0 / window as f64;
                (dropped > 0).then_some((i, pct, dropped, after.len()))
            })
            .collect()
    };
    let (_scratch, sent) = replay_requests("loop.json", loop_of(40, None), "agentrail", 20_000);
    let seen = compactions(&sent, 20_000);
    let reactive: Vec<_> = seen.iter().take_while(|c| c.1 < 100.0).take(3).collect();
    let micro = reactive.len() == 3
        && reactive
            .iter()
            .all(|c| (85.0..92.0).contains(&c.1) && c.2 == 2);
    // The highest prompt after the third, before any further compaction.
    let after_third = reactive.last().map_or(0.0, |third| {
        let next = seen
            .iter()
            .map(|c| c.0)
            .find(|&s| s > third.0)
            .unwrap_or(sent.len());
        sent[third.0..next]
            .iter()
            .map(|b| request_tokens(b) as f64 * 100.0 / 20_000.0)
            .fold(0.0, f64::max)
    });
    table.row(
        seed("Reactive Compaction"),
        "a 40-round tool loop in a 20,000-token window: the reactive compactions of the request (microTriggerPct 85, microBatchGroups 2, maxReactiveCompactionsPerRequest 3)",
        "3 micro, each after a call at 85–92 %, each the oldest 2 rounds; none after, with calls at 92 % or more",
        if micro && after_third >= 92.0 {
            "3 micro, each after a call at 85–92 %, each the oldest 2 rounds; none after, with calls at 92 % or more".to_string()
        } else {
            format!(
                "{:?}; highest call after the third {after_third:.1} %",
                seen.iter().map(|c| format!("step {} after {:.1} %: {} rounds dropped", c.0, c.1, c.2)).collect::<Vec<_>>()
            )
        },
    );
    // A prompt-too-long: in the same loop, after the request's 3 reactive compactions, the
    // first call that would pass the window is compacted in full (the product does before
    // sending what a provider's overflow error would make it do): the last 2 rounds stay.
    let overflowed = seen
        .iter()
        .find(|c| reactive.last().is_some_and(|third| c.0 > third.0));
    table.row(
        seed("Reactive Compaction"),
        "the same loop, after the 3 reactive compactions: the call that would pass the window (a prompt-too-long)",
        "full: every round but the last 2 summarized",
        match overflowed {
            Some(&(_, pct, _, 2)) if pct > 92.0 => {
                "full: every round but the last 2 summarized".to_string()
            }
            Some((step, pct, dropped, left)) => {
                format!("step {step} after {pct:.1} %: {dropped} rounds dropped, {left} left")
            }
            None => "never compacted after the third".to_string(),
        },
    );
    // fullTriggerPct 92: a tool output of about 2,500 tokens takes the call from under 85 %
    // to 92 % or more; the next call is compacted in full: every round but the last 2.
    let (_scratch, sent) = replay_requests("jump.json", loop_of(24, Some(20)), "agentrail", 20_000);
    let first = compactions(&sent, 20_000).into_iter().next();
    let jumped =
        first.is_some_and(|c| c.0 >= 2 && request_tokens(&sent[c.0 - 2]) * 100 < 85 * 20_000);
    table.row(
        seed("Reactive Compaction"),
        "a call jumping from under 85 % to 92 % or more of a 20,000-token window: the next call's compaction (fullTriggerPct 92, preserveRecentApiRounds 2)",
        "full: every round but the last 2 summarized",
        match first {
            Some((_, pct, _, 2)) if pct >= 92.0 && jumped => "full: every round but the last 2 summarized".to_string(),
            Some((step, pct, dropped, left)) => format!("step {step} after {pct:.1} % (jump: {jumped}): {dropped} rounds dropped, {left} left"),
            None => "never compacted".to_string(),
        },
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
