//! 003 CowAgent: its rows of the seed-conformance table.

use serde_json::json;

use super::common::*;

pub fn rows(table: &mut Table) {
    // ---- 003 CowAgent -----------------------------------------------------------------------
    let seed = |section| ("003 CowAgent", section, "cowagent");
    // Configuration by nature: whether `serve` keeps the long-term memory the trimmed turns'
    // summaries go to (`replay --workspace` always does, below).
    table.row(
        seed("Turn Trimming"),
        "configuration: serve keeps long-term memory for the daily memory file",
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
    // Retention in action: two stored sessions, last updated 31 and 29 days ago (their
    // timestamps and files set back); `sessions gc --policy cowagent` removes the first only.
    let scratch = tempfile::tempdir().expect("temp dir");
    let file = trace(scratch.path(), "chat.json", coding_session(1, 2));
    let store_dir = scratch.path().join("store");
    let store = format!("file://{}", store_dir.display());
    for (session, days) in [("old", 31), ("recent", 29)] {
        replay(
            &file,
            "cowagent",
            128_000,
            scratch.path(),
            &["--store", &store, "--session", session],
        );
        age_session(&store_dir, session, days);
    }
    run(&[
        "sessions", "--store", &store, "--json", "gc", "--policy", "cowagent",
    ]);
    let listed = ok(run(&["sessions", "--store", &store, "--json", "list"]));
    let left: Vec<&str> = ["old", "recent"]
        .into_iter()
        .filter(|s| listed.contains(&format!("\"session\": \"{s}\"")))
        .collect();
    table.row(
        seed("Session Persistence"),
        "sessions last updated 31 and 29 days ago, after sessions gc --policy cowagent: the sessions left",
        "recent",
        left.join(", "),
    );

    // Tool-result truncation in action: before each decision loop, results of earlier turns
    // over 20,000 characters keep their beginning and end with a notice; a shorter one and
    // the current turn's results are untouched.
    let scratch = tempfile::tempdir().expect("temp dir");
    let log = |word: &str, lines: usize| -> String {
        (0..lines)
            .map(|j| format!("{word} line {j:05}: step ok, value {}\n", j * 7))
            .collect()
    };
    let (old_big, old_small, current) = (log("build", 900), log("lint", 450), log("test", 900));
    assert!(
        old_big.len() > 28_000 && old_small.len() < 20_000,
        "{}",
        old_big.len()
    );
    let mut messages = vec![
        json!({"role": "system", "content": "You are a helpful assistant."}),
        json!({"role": "user", "content": "Build and lint the project."}),
    ];
    messages.extend(round(
        "b1",
        "bash",
        json!({"command": "make"}),
        old_big.clone(),
    ));
    messages.extend(round(
        "l1",
        "bash",
        json!({"command": "make lint"}),
        old_small.clone(),
    ));
    messages.push(json!({"role": "assistant", "content": "Built and linted."}));
    messages.push(json!({"role": "user", "content": "Now run the tests."}));
    messages.extend(round(
        "t1",
        "bash",
        json!({"command": "make test"}),
        current.clone(),
    ));
    messages.push(json!({"role": "assistant", "content": "All tests pass."}));
    let file = trace(scratch.path(), "long-results.json", messages);
    replay(&file, "cowagent", 128_000, scratch.path(), &[]);
    let last: serde_json::Value =
        serde_json::from_str(&last_request(&scratch.path().join("req"))).expect("JSON request");
    let result = |id: &str| -> String {
        messages_of(&last)
            .iter()
            .find(|m| m["tool_call_id"] == id)
            .and_then(|m| m["content"].as_str().map(String::from))
            .unwrap_or_default()
    };
    let cut = result("b1");
    let head_and_tail = common_prefix(&cut, &old_big) >= 1_000
        && common_suffix(&cut, &old_big) >= 1_000
        && cut.chars().count() <= 20_500
        && cut.len() < old_big.len();
    let state = |text: String, original: &str| if text == original { "whole" } else { "cut" };
    table.row(
        seed("Tool Result Truncation"),
        "an earlier turn's results of 34,000 and 16,500 chars, the current turn's of 33,100: what the next call sends",
        "earlier 34,000: head and tail within 20,000 chars; earlier 16,500: whole; current: whole",
        format!(
            "earlier 34,000: {}; earlier 16,500: {}; current: {}",
            if head_and_tail {
                "head and tail within 20,000 chars".to_string()
            } else {
                format!(
                    "{} chars, head {} / tail {}",
                    cut.chars().count(),
                    common_prefix(&cut, &old_big),
                    common_suffix(&cut, &old_big)
                )
            },
            state(result("l1"), &old_small),
            state(result("t1"), &current)
        ),
    );

    // Overflow emergency handling in action: eight short turns, then a turn whose user text
    // (30,000 chars) and tool result (32,200 chars) do not fit a 12,000-token window with the
    // rest. The aggressive trim: at most 5 turns, user text and tool results at 10,000 chars.
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    for i in 0..8 {
        messages
            .push(json!({"role": "user", "content": format!("Question {i}: what is {i} cubed?")}));
        messages
            .push(json!({"role": "assistant", "content": format!("{i} cubed is {}.", i * i * i)}));
    }
    let paste: String = (0..1_870).map(|j| format!("note {j:04} here, ")).collect();
    messages.push(
        json!({"role": "user", "content": format!("Check these notes against the log: {paste}")}),
    );
    messages.extend(round(
        "o1",
        "bash",
        json!({"command": "cat app.log"}),
        log("app", 900),
    ));
    messages.push(json!({"role": "assistant", "content": "The notes match the log."}));
    let file = trace(scratch.path(), "overflow.json", messages);
    let report = replay(&file, "cowagent", 12_000, scratch.path(), &[]);
    let last: serde_json::Value =
        serde_json::from_str(&last_request(&scratch.path().join("req"))).expect("JSON request");
    let sent = messages_of(&last);
    let longest = |role: &str| {
        sent.iter()
            .filter(|m| m["role"] == role)
            .filter_map(|m| m["content"].as_str().map(|t| t.chars().count()))
            .max()
            .unwrap_or(0)
    };
    let turns = sent.iter().filter(|m| m["role"] == "user").count();
    let (user, tool) = (longest("user"), longest("tool"));
    table.row(
        seed("Overflow Emergency Handling"),
        "a last turn of 30,000 chars of user text and a 32,200-char result over a 12,000-token window: the request sent",
        "within the window; at most 5 turns; user text and result at about 10,000 chars",
        if report["peak_input_tokens"].as_u64().unwrap_or(u64::MAX) <= 12_000
            && turns <= 5
            && (9_000..=10_500).contains(&user)
            && (9_000..=10_500).contains(&tool)
        {
            "within the window; at most 5 turns; user text and result at about 10,000 chars".to_string()
        } else {
            format!(
                "peak {} tokens; {turns} turns; longest user text {user}, result {tool} chars",
                report["peak_input_tokens"]
            )
        },
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

/// Sets a stored session of a `file://` store `days` back: every `*_ms` time in its files
/// and the files' modification times.
fn age_session(store: &std::path::Path, session: &str, days: u64) {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    fn age(value: &mut serde_json::Value, ms: i64) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    if key.ends_with("_ms") && v.is_i64() {
                        *v = ms.into();
                    } else {
                        age(v, ms);
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| age(v, ms)),
            _ => {}
        }
    }
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86_400);
    let ms = then
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64;
    let mut files = Vec::new();
    walk(store, &mut files);
    for path in files {
        let ours = path.components().any(|c| {
            let c = c.as_os_str().to_string_lossy();
            c == session || c == format!("{session}.log.jsonl")
        });
        if !ours {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let aged: Vec<String> = text
            .lines()
            .map(
                |line| match serde_json::from_str::<serde_json::Value>(line) {
                    Ok(mut value) => {
                        age(&mut value, ms);
                        value.to_string()
                    }
                    Err(_) => line.to_string(),
                },
            )
            .collect();
        let mut aged = aged.join("\n");
        if text.ends_with('\n') {
            aged.push('\n');
        }
        if !text.is_empty() {
            std::fs::write(&path, aged).expect("age a session file");
        }
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(then))
            .expect("set a session file's time");
    }
}
