//! 000 AgentScope: its rows of the seed-conformance table.

use std::collections::BTreeSet;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::Digest as _;

use super::common::*;

pub fn rows(table: &mut Table) {
    // ---- 000 AgentScope -------------------------------------------------------------------
    let seed = |section| ("000 AgentScope", section, "agentscope");
    // Images: 8 arrive, the newest 5 stay, 3 go to data/<sha256>.png.
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut messages = vec![json!({"role": "system", "content": "Describe charts."})];
    let mut hashes = BTreeSet::new();
    for i in 0..8u8 {
        let bytes = image_bytes(i + 1);
        hashes.insert(hex::encode(sha2::Sha256::digest(&bytes)));
        let url = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&bytes)
        );
        messages.push(json!({"role": "user", "content": [
            {"type": "text", "text": format!("What does chart {i} show?")},
            {"type": "image_url", "image_url": {"url": url}}
        ]}));
        messages.push(json!({"role": "assistant", "content": format!("Chart {i} shows growth.")}));
    }
    let file = trace(scratch.path(), "images.json", messages);
    replay(&file, "agentscope", 128_000, scratch.path(), &[]);
    let last = last_request(&scratch.path().join("req"));
    let images_sent = last.matches("data:image/png;base64,").count();
    table.row(
        seed("Configure ContextConfig"),
        "images in the last request (8 sent)",
        5,
        images_sent,
    );
    let data = names_in(&scratch.path().join("ws/data"));
    let named_by_hash = data.iter().all(|name| {
        name.strip_suffix(".png")
            .is_some_and(|hash| hashes.contains(hash))
    });
    table.row(
        seed("Use LocalWorkspace"),
        "offloaded images as data/<sha256>.png",
        "3 files, named by content hash",
        format!(
            "{} files, {}",
            data.len(),
            if named_by_hash {
                "named by content hash"
            } else {
                "misnamed"
            }
        ),
    );
    let placeholder_names_file = data
        .iter()
        .all(|name| last.contains(&format!("data/{name}")));
    table.row(
        seed("Use LocalWorkspace"),
        "the context names each offloaded image's file",
        true,
        placeholder_names_file,
    );

    // Compression offloads to context.jsonl; an oversized result to tool_result-<id>.txt.
    let scratch = tempfile::tempdir().expect("temp dir");
    let file = trace(scratch.path(), "coding.json", coding_session(14, 60));
    replay(&file, "agentscope", 16_000, scratch.path(), &[]);
    let session = session_dir(&scratch.path().join("ws"));
    let lines = std::fs::read_to_string(session.join("context.jsonl"))
        .map(|t| {
            t.lines()
                .filter(|l| serde_json::from_str::<Value>(l).is_ok())
                .count()
        })
        .unwrap_or(0);
    table.row(
        seed("Use LocalWorkspace"),
        "compressed messages in sessions/<sid>/context.jsonl, one JSON message per line",
        true,
        lines > 0,
    );
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut messages = coding_session(1, 0);
    messages.truncate(3);
    let huge: String = (0..12_000)
        .map(|i| format!("row {i}: value {} status ok\n", i * 7))
        .collect();
    messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": huge.clone()}));
    messages.push(json!({"role": "assistant", "content": "Read it."}));
    let file = trace(scratch.path(), "huge.json", messages);
    replay(&file, "agentscope", 200_000, scratch.path(), &[]);
    // tool_result_limit is 50,000 tokens: the result (about 140,000 tokens, 370,000
    // characters) keeps its largest prefix within that many tokens.
    let sent = requests(&scratch.path().join("req"));
    let result = sent
        .last()
        .map(messages_of)
        .unwrap_or_default()
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str().map(String::from))
        .unwrap_or_default();
    let prefix: String = result
        .chars()
        .zip(huge.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a)
        .collect();
    let kept = tokens(&prefix);
    table.row(
        seed("Truncate Tool Results"),
        "a tool result of about 140,000 tokens: the prefix kept (tool_result_limit 50,000 tokens)",
        "a prefix of 45,000 to 50,000 tokens",
        if (45_000..=50_000).contains(&kept) {
            "a prefix of 45,000 to 50,000 tokens".to_string()
        } else {
            format!("a prefix of {kept} tokens (of {})", tokens(&huge))
        },
    );
    let names = names_in(&session_dir(&scratch.path().join("ws")));
    table.row(
        seed("Use LocalWorkspace"),
        "truncated result in sessions/<sid>/tool_result-<id>.txt",
        "tool_result-call_0.txt",
        names
            .iter()
            .find(|n| n.starts_with("tool_result-"))
            .cloned()
            .unwrap_or_default(),
    );

    // The trigger in action: a session growing well past 80 % of a 16k window is compacted
    // before any request goes over that share.
    let scratch = tempfile::tempdir().expect("temp dir");
    let file = trace(scratch.path(), "growing.json", coding_session(60, 12));
    let report = replay(&file, "agentscope", 16_000, scratch.path(), &[]);
    table.row(
        seed("Configure ContextConfig"),
        "a tool loop growing to about 29,000 tokens in a 16k window: compacted, and no request over trigger_ratio × 16,000 tokens",
        "compacted; every request ≤ 12800",
        within(&report, 12_800),
    );
    // reserve_ratio in action: the first compaction keeps the newest messages until they
    // reach 0.1 × 16,000 tokens (a call and its result stay together), the rest is summarized.
    let sent = requests(&scratch.path().join("req"));
    let compressed = sent.iter().map(messages_of).find_map(|messages| {
        let at = messages.iter().position(|m| {
            m["content"]
                .as_str()
                .is_some_and(|t| t.contains("The earlier conversation was compressed"))
        })?;
        Some(messages[at + 1..].to_vec())
    });
    let round_tokens = coding_session(60, 12)[2..4]
        .iter()
        .map(message_tokens)
        .sum::<u64>();
    table.row(
        seed("Configure ContextConfig"),
        "reserve_ratio: what the first compaction of that loop keeps after the summary",
        "reserve_ratio × 16,000 = 1,600 tokens reached, by less than one round",
        match compressed {
            None => "never compressed".to_string(),
            Some(tail) => {
                let kept: u64 = tail.iter().map(message_tokens).sum();
                if (1_600..1_600 + round_tokens).contains(&kept) {
                    "reserve_ratio × 16,000 = 1,600 tokens reached, by less than one round"
                        .to_string()
                } else {
                    format!(
                        "{kept} tokens in {} messages (a round is {round_tokens})",
                        tail.len()
                    )
                }
            }
        },
    );
}
