//! 000 AgentScope: its rows of the seed-conformance table.

use std::collections::BTreeSet;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::Digest as _;

use super::common::*;

pub fn rows(table: &mut Table) {
    // ---- 000 AgentScope -------------------------------------------------------------------
    let seed = |section| ("000 AgentScope", section, "agentscope");
    let p = policy("agentscope");
    table.row(
        seed("Configure ContextConfig"),
        "trigger_ratio",
        "0.8",
        at(&p, "trigger_ratio"),
    );
    table.row(
        seed("Configure ContextConfig"),
        "reserve_ratio (kept recent share)",
        "0.1",
        at(&p, "stages.0.keep_ratio"),
    );
    table.row(
        seed("Truncate Tool Results"),
        "tool_result_limit (tokens)",
        "50000",
        at(&p, "ingest.tool_result.max_tokens"),
    );
    table.row(
        seed("Configure ContextConfig"),
        "images kept",
        "5",
        at(&p, "ingest.max_images"),
    );

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
    messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": huge}));
    messages.push(json!({"role": "assistant", "content": "Read it."}));
    let file = trace(scratch.path(), "huge.json", messages);
    replay(&file, "agentscope", 200_000, scratch.path(), &[]);
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
}
