//! 001 ReMe: its rows of the seed-conformance table.

use std::ops::RangeInclusive;

use serde_json::{Value, json};

use super::common::*;

pub fn rows(table: &mut Table) {
    // ---- 001 ReMe ---------------------------------------------------------------------------
    let seed = |section, preset| ("001 ReMe", section, preset);
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

    // A tool loop of dense outputs: `sizes[i]` lines (about 12 tokens a line) in round i.
    let tool_loop = |system: &str, sizes: &[usize]| -> Vec<Value> {
        let mut messages = vec![
            json!({"role": "system", "content": system}),
            json!({"role": "user", "content": "Audit the ledger tables."}),
        ];
        for (i, &lines) in sizes.iter().enumerate() {
            messages.extend(round(
                &format!("c{i}"),
                "bash",
                json!({"command": format!("dump table {i}")}),
                dense(lines, i as u64 + 1),
            ));
        }
        messages.push(json!({"role": "assistant", "content": "The audit is done."}));
        messages
    };
    let output_of = |messages: &[Value], id: &str| -> String {
        messages
            .iter()
            .find(|m| m["tool_call_id"] == id)
            .and_then(|m| m["content"].as_str().map(String::from))
            .unwrap_or_default()
    };

    // max_tool_message_tokens in action (compact): results of about 1,500 and 3,000 tokens
    // alternate; past 20,000 tokens each older one over 2,000 tokens is stored whole in the
    // session's folder and replaced by a pointer and a preview; the others and the newest
    // message stay as they were.
    let scratch = tempfile::tempdir().expect("temp dir");
    let sizes: Vec<usize> = (0..12)
        .map(|i| if i % 2 == 0 { 125 } else { 250 })
        .collect();
    let messages = tool_loop("You are a careful auditor.", &sizes);
    let file = trace(scratch.path(), "ledger.json", messages.clone());
    replay(&file, "reme-compact", 128_000, scratch.path(), &[]);
    let session = session_dir(&scratch.path().join("ws"));
    // The first call sent after the compaction: a result there differs from the original.
    let ids = |body: &Value| call_ids(body);
    let sent = requests(&scratch.path().join("req"))
        .into_iter()
        .find(|body| {
            ids(body)
                .iter()
                .any(|id| output_of(&messages_of(body), id) != output_of(&messages, id))
        })
        .map(|body| messages_of(&body))
        .unwrap_or_default();
    let present: Vec<String> = sent
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str().map(String::from))
        .collect();
    let (mut offloaded, mut big, mut small_whole, mut small) = (0, 0, 0, 0);
    let (older, newest) = present.split_at(present.len().saturating_sub(1));
    for id in older {
        let id = id.as_str();
        let (original, shown) = (output_of(&messages, id), output_of(&sent, id));
        if tokens(&original) > 2_000 {
            big += 1;
            let stored = names_in(&session)
                .into_iter()
                .filter(|n| n.contains(id) && shown.contains(n.as_str()))
                .any(|n| std::fs::read_to_string(session.join(n)).is_ok_and(|t| t == original));
            let preview = original.chars().take(200).collect::<String>();
            if stored && shown.contains(&preview) && shown.len() < original.len() / 2 {
                offloaded += 1;
            }
        } else {
            small += 1;
            small_whole += usize::from(shown == original);
        }
    }
    let newest_whole = newest
        .first()
        .is_some_and(|id| output_of(&sent, id) == output_of(&messages, id));
    assert!(
        big >= 4 && small >= 4,
        "the trace is shaped: {big} big, {small} small"
    );
    table.row(
        seed("Parameters: max_tool_message_tokens", "reme-compact"),
        "tool results of about 1,500 and 3,000 tokens alternating, at the first compaction (past 20,000 tokens): the older ones over 2,000 tokens / under it / the newest (keep_recent_count 1)",
        "stored whole, a pointer and a preview left / whole / whole",
        format!(
            "{} / {} / {}",
            if offloaded == big {
                "stored whole, a pointer and a preview left".to_string()
            } else {
                format!("{offloaded} of {big} stored with a pointer and a preview")
            },
            if small_whole == small {
                "whole".to_string()
            } else {
                format!("{small_whole} of {small} whole")
            },
            if newest_whole { "whole" } else { "replaced" }
        ),
    );

    // max_total_tokens and keep_recent_count in action (compress): a 6,000-token system
    // prompt, then rounds of about 2,500 tokens. The compressible messages (neither the
    // system prompt nor the last 2) are measured: the first compression comes at the first
    // call where they pass 20,000 tokens, though the whole context passed it a round
    // earlier; the last 2 messages stay as they were.
    let system = format!(
        "You are a careful auditor. Reference tables:\n{}",
        dense(500, 99)
    );
    let messages = tool_loop(&system, &[210; 12]);
    let (_scratch, sent) = replay_requests(
        "ledger-system.json",
        messages.clone(),
        "reme-compress",
        128_000,
    );
    // The context of call k: every message before the k-th assistant message.
    let context_of = |k: usize| -> Vec<Value> {
        let at = nth_assistant(&messages, k).unwrap_or(messages.len());
        messages[..at].to_vec()
    };
    let compressible = |k: usize| -> u64 {
        let context = context_of(k);
        let end = context.len().saturating_sub(2).max(1);
        context[1..end].iter().map(message_tokens).sum()
    };
    let whole = |k: usize| -> u64 { context_of(k).iter().map(message_tokens).sum() };
    let first = sent.iter().position(|b| b.to_string().contains("[Part "));
    table.row(
        seed("Parameters: max_total_tokens", "reme-compress"),
        "a 6,000-token system prompt and rounds of about 2,500 tokens: the first compression",
        "at the first call whose compressible messages pass 20,000 tokens (the whole context passed it earlier)",
        match first {
            None => "never compressed".to_string(),
            Some(k) if k > 0 && compressible(k - 1) <= 20_000 && compressible(k) > 20_000 && whole(k - 1) > 20_000 => {
                "at the first call whose compressible messages pass 20,000 tokens (the whole context passed it earlier)".to_string()
            }
            Some(k) => format!(
                "at call {k}: compressible {} (before: {}), whole context {} (before: {})",
                compressible(k),
                compressible(k.saturating_sub(1)),
                whole(k),
                whole(k.saturating_sub(1))
            ),
        },
    );
    // The longest run of messages ending the compressed call as they end its context.
    let kept = first.map_or(0, |k| {
        let (body, context) = (messages_of(&sent[k]), context_of(k));
        (0..=body.len().min(context.len()))
            .take_while(|&n| body[body.len() - n..] == context[context.len() - n..])
            .last()
            .unwrap_or(0)
    });
    let user_kept = first.is_some_and(|k| {
        messages_of(&sent[k])
            .iter()
            .any(|m| m["role"] == "user" && m["content"] == "Audit the ledger tables.")
    });
    table.row(
        seed("Parameters: keep_recent_count", "reme-compress"),
        "that compression: how many of the context's newest messages are sent as they were; the user's request (the product keeps it beside the summary)",
        "the last 2; the user's request kept",
        format!(
            "the last {kept}; the user's request {}",
            if user_kept { "kept" } else { "compressed" }
        ),
    );

    // compact_ratio_threshold in action (auto): results of about 1,500 and 3,000 tokens
    // alternating, so the first compaction leaves about half the tokens (the ratio is the
    // product's own: the first compacted call under reme-compact against the same context
    // whole). At most 0.75: reme-auto compacts and does not compress.
    let changed = |sent: &[Value], messages: &[Value]| -> Option<usize> {
        sent.iter().position(|body| {
            body.to_string().contains("[Part ")
                || call_ids(body)
                    .iter()
                    .any(|id| output_of(&messages_of(body), id) != output_of(messages, id))
        })
    };
    let sizes: Vec<usize> = (0..12)
        .map(|i| if i % 2 == 0 { 125 } else { 250 })
        .collect();
    let messages = tool_loop("You are a careful auditor.", &sizes);
    // What the first compaction under reme-compact leaves of the context it compacted.
    let compact_ratio = |name: &str, messages: &[Value]| -> f64 {
        let (_scratch, sent) = replay_requests(name, messages.to_vec(), "reme-compact", 128_000);
        changed(&sent, messages).map_or(1.0, |k| {
            let at = nth_assistant(messages, k).unwrap_or(messages.len());
            let whole = json!({"model": "gpt-4o", "messages": messages[..at].to_vec()});
            request_tokens(&sent[k]) as f64 / request_tokens(&whole) as f64
        })
    };
    // A trace whose ratio under reme-compact falls in `shaped`, replayed under reme-auto: the
    // ratio, the scratch directory (its workspace) and the requests sent.
    let auto_replay = |name: &str, messages: &[Value], shaped: RangeInclusive<f64>| {
        let ratio = compact_ratio(name, messages);
        assert!(
            shaped.contains(&ratio),
            "the trace is shaped: ratio {ratio}"
        );
        let (scratch, sent) = replay_requests(name, messages.to_vec(), "reme-auto", 128_000);
        (ratio, scratch, sent)
    };
    let (ratio, _scratch, sent) = auto_replay("mixed.json", &messages, 0.3..=0.7);
    table.row(
        seed("Parameters: compact_ratio_threshold", "reme-auto"),
        "a tool loop whose compaction leaves about half the tokens (≤ 0.75; measured under reme-compact): reme-auto's first compaction",
        "compacted, not compressed",
        match changed(&sent, &messages) {
            None => "never compacted".to_string(),
            Some(k) if sent[k].to_string().contains("[Part ") => format!("compressed (ratio {ratio:.2})"),
            Some(_) => "compacted, not compressed".to_string(),
        },
    );

    // The other side: results of about 1,500 tokens, one of 3,000, so the first compaction
    // offloads only that one and leaves more than 0.75 of the tokens: reme-auto compresses at
    // that same call ("ratio 0.76 → compression will be applied"), the compaction kept (the
    // big result stored whole in the session's folder).
    let sizes: Vec<usize> = (0..16).map(|i| if i == 1 { 250 } else { 125 }).collect();
    let messages = tool_loop("You are a careful auditor.", &sizes);
    let (ratio, scratch, sent) = auto_replay("over.json", &messages, 0.76..=0.95);
    let session = session_dir(&scratch.path().join("ws"));
    let big = output_of(&messages, "c1");
    let stored = names_in(&session).into_iter().any(|n| {
        n.ends_with(".txt") && std::fs::read_to_string(session.join(n)).is_ok_and(|t| t == big)
    });
    table.row(
        seed("Parameters: compact_ratio_threshold", "reme-auto"),
        "a tool loop whose compaction leaves more than 0.75 of the tokens (measured under reme-compact): reme-auto's first compaction",
        "compacted and compressed at the same call",
        match changed(&sent, &messages) {
            None => "never compacted".to_string(),
            Some(k) if sent[k].to_string().contains("[Part ") && stored => {
                "compacted and compressed at the same call".to_string()
            }
            Some(k) if sent[k].to_string().contains("[Part ") => {
                "compressed, the compaction not kept".to_string()
            }
            Some(_) => format!("compacted, not compressed (ratio {ratio:.2})"),
        },
    );
}
