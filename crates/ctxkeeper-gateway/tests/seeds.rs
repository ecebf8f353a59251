//! Seed behaviours through the gateway, which runs every session through the library's
//! `ContextManager`: AgentScope's image limit (the newest 5 images reach the upstream, the
//! older ones wait in `data/<sha256>.<ext>`) and ReMe's group files (`<chat_id>_<g>.json`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{chat_history, files_under, mock_and_config, start};
use ctxkeeper_mock_upstream::MockServer;
use serde_json::{Value, json};
use tempfile::TempDir;

const KEY: &str = "Bearer sk-seeds-0123456789";

/// The body of the last request the mock upstream received.
fn last_request(upstream: &ctxkeeper_mock_upstream::MockServer) -> String {
    upstream
        .requests()
        .last()
        .cloned()
        .expect("a request")
        .body
        .to_string()
}

async fn send(gw: &common::Running, history: &[Value]) {
    let headers = [("authorization", KEY), ("x-ctxkeeper-session", "seeds")];
    common::send_chat(gw, &headers, history).await;
}

/// A gateway running the seed system's `preset`, its upstream, and its workspace.
async fn seeded(preset: &str) -> (MockServer, TempDir, common::Running, PathBuf) {
    let (upstream, dir, mut cfg) = mock_and_config(128_000).await;
    cfg.policy = ctxkeeper_core::engine::presets::preset(preset).unwrap();
    let workspace = PathBuf::from(&cfg.workspace);
    (upstream, dir, start(cfg).await, workspace)
}

#[tokio::test]
async fn agentscope_keeps_five_images_and_stores_the_rest_by_hash() {
    let (upstream, _dir, gw, workspace) = seeded("agentscope").await;
    let mut history = vec![json!({"role": "system", "content": "Describe charts."})];
    for i in 0..8u8 {
        // Valid base64 (2,000 characters of its alphabet), distinct per image.
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let payload: String = (0..2_000usize)
            .map(|k| ALPHABET[(k * (usize::from(i) + 7) + usize::from(i)) % ALPHABET.len()] as char)
            .collect();
        let url = format!("data:image/png;base64,{payload}");
        history.push(json!({"role": "user", "content": [
            {"type": "text", "text": format!("chart {i}?")},
            {"type": "image_url", "image_url": {"url": url}}
        ]}));
        send(&gw, &history).await;
        history.push(json!({"role": "assistant", "content": format!("chart {i} rises")}));
    }
    let last = last_request(&upstream);
    assert_eq!(last.matches("data:image/png;base64,").count(), 5);
    let stored = files_under(&workspace, &|name| name.ends_with(".png"));
    assert_eq!(stored.len(), 3, "{stored:?}");
    for path in &stored {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap();
        assert!(
            last.contains(&format!("data/{name}")),
            "{name} is named in the context"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn reme_compress_writes_group_files_through_the_gateway() {
    let (upstream, _dir, gw, workspace) = seeded("reme-compress").await;
    // About 30,000 tokens: over ReMe's 20,000, in groups of at most 8,000.
    let history = chat_history(22, 8_000);
    send(&gw, &history).await;
    let groups = files_under(&workspace, &|name| {
        name.ends_with(".json") && name.rsplit_once('_').is_some()
    });
    assert!(groups.len() >= 2, "{groups:?}");
    let last = last_request(&upstream);
    assert!(last.contains("[Part 1/"), "one message per group");
    for group in &groups {
        let messages: Value =
            serde_json::from_str(&std::fs::read_to_string(group).unwrap()).unwrap();
        assert!(messages.as_array().is_some_and(|a| !a.is_empty()));
        let name = group.file_name().and_then(|n| n.to_str()).unwrap();
        assert!(last.contains(name), "{name} named in the context");
    }
    gw.stop().await;
}
