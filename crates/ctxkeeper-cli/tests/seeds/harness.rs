//! 004 HarnessAgent: its rows of the seed-conformance table.

use serde_json::{Value, json};

use super::common::*;

pub fn rows(table: &mut Table) {
    // ---- 004 HarnessAgent -------------------------------------------------------------------
    let seed = |section| ("004 HarnessAgent", section, "harness");
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
    // Configuration by nature (the flush itself is the row above): the flag, and whether
    // `serve` keeps the long-term memory the flush writes to.
    let p = policy("harness");
    table.row(
        seed("Coordination with Memory (flushBeforeCompact)"),
        "configuration: flushBeforeCompact (default true); serve: long-term memory",
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
    let sized = |word: &str, lines: usize| -> String {
        (0..lines)
            .map(|j| format!("{word} line {j:06} value {}\n", j * 7))
            .collect()
    };
    let big = |word: &str| sized(word, 4_000);
    let messages = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": "Read the build log and the notes."}),
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "shell_1", "type": "function", "function": {"name": "execute", "arguments": "{\"command\":\"cat build.log\"}"}},
            {"id": "read_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"notes.txt\"}"}},
            {"id": "shell_2", "type": "function", "function": {"name": "execute", "arguments": "{\"command\":\"cat test.log\"}"}}
        ]}),
        json!({"role": "tool", "tool_call_id": "shell_1", "content": big("log")}),
        json!({"role": "tool", "tool_call_id": "read_1", "content": big("note")}),
        json!({"role": "tool", "tool_call_id": "shell_2", "content": sized("test", 2_700)}),
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

    let under = sized("test", 2_700);
    assert!((70_000..80_000).contains(&under.len()), "{}", under.len());
    table.row(
        seed("Tool-result eviction"),
        "a 75,000-char shell result, under the 80,000-char threshold, stays whole",
        "whole",
        if result("shell_2") == under {
            "whole".to_string()
        } else {
            format!("cut to {} chars", result("shell_2").len())
        },
    );

    // maxArgLength in action: twenty write_file calls with 5,800-character bodies. When the
    // loop compacts, the calls it summarizes are archived (sessions/<sid>/context.jsonl) with
    // each argument cut to its first 2,000 characters and the marker (the body beside its
    // path keeps 2,000, the path stays whole); the calls of the kept tail reach the model
    // verbatim.
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": "Write the twenty modules."}),
    ];
    let bodies: Vec<String> = (0..20)
        .map(|i| {
            json!({"path": format!("src/m{i}.rs"), "content": (0..200)
                .map(|j| format!("fn f{i}_{j}() {{ return {j}; }}\n"))
                .collect::<String>()})
            .to_string()
        })
        .collect();
    for (i, body) in bodies.iter().enumerate() {
        let id = format!("w{i}");
        messages.push(
            json!({"role": "assistant", "content": format!("Writing module {i}."),
            "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "write_file", "arguments": body}}]}),
        );
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "ok"}));
    }
    messages.push(json!({"role": "assistant", "content": "All written."}));
    let file = trace(scratch.path(), "write-files.json", messages);
    replay(&file, "harness", 128_000, scratch.path(), &[]);
    let marker = "... [truncated] ...";
    let archived =
        std::fs::read_to_string(session_dir(&scratch.path().join("ws")).join("context.jsonl"))
            .unwrap_or_default();
    // Characters of each archived call's body before the marker, and whether its path
    // stayed whole.
    let cut_at: Vec<(usize, bool)> = archived
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|part| {
            let args: Value = serde_json::from_str(part["arguments"].as_str()?).ok()?;
            let content = args["content"].as_str()?;
            let at = content.find(marker)?;
            let path_whole = args["path"].as_str().is_some_and(|p| !p.contains(marker));
            Some((content[..at].chars().count(), path_whole))
        })
        .collect();
    let last: Value = serde_json::from_str(&last_request(&scratch.path().join("req")))
        .expect("the request is JSON");
    let sent_calls: Vec<String> = messages_of(&last)
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["function"]["arguments"].as_str().map(String::from))
        .collect();
    let verbatim = sent_calls.iter().filter(|a| bodies.contains(a)).count();
    table.row(
        seed("Compaction"),
        "twenty write_file calls of 5,800 chars: summarized calls archived with each argument cut to maxArgLength 2,000 + marker; the kept tail's calls sent verbatim",
        "summarized: body cut to 2000, path whole; kept: all verbatim",
        format!(
            "summarized: {}; kept: {}",
            if cut_at.is_empty() {
                "none cut".to_string()
            } else if cut_at.iter().all(|&(n, path)| n == 2_000 && path) {
                "body cut to 2000, path whole".to_string()
            } else {
                format!("cut at {cut_at:?} (chars, path whole)")
            },
            if !sent_calls.is_empty() && verbatim == sent_calls.len() {
                "all verbatim".to_string()
            } else {
                format!("{verbatim} of {} verbatim", sent_calls.len())
            }
        ),
    );

    // triggerMessages / keepMessages in action: a tool loop compacts at the first step whose
    // conversation (the system prompt apart, as HarnessAgent keeps it apart) holds 30
    // messages, into the summary and at least the last 10 messages as they were, the cut moved
    // back to the call a kept result answers.
    let messages = coding_session(20, 3);
    let (_scratch, sent) = replay_requests("forty.json", messages.clone(), "harness", 128_000);
    let count = |body: &Value| body["messages"].as_array().map_or(0, Vec::len);
    // Step i answers the i-th assistant message: its conversation is every message before
    // that one, the system prompt apart.
    let conversation_at = |step: usize| nth_assistant(&messages, step).map_or(0, |at| at - 1);
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
}
