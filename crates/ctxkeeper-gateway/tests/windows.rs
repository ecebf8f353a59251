//! The window a request asks for decides when the gateway compacts. Claude Code's default
//! model (`claude-opus-4-8`, newer than the model table) sent with the `context-1m` beta has
//! 1,000,000 tokens: a 190k-token session is forwarded as it came. The same session without
//! the beta has the newest listed Opus 4 window (200k, of which the 64k output budget is
//! spent first) and is compacted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{client, config, filler, mock, start};
use serde_json::{Value, json};

const BETAS: &str = "claude-code-20250219,context-1m-2025-08-07,interleaved-thinking-2025-05-14";

/// A Claude Code-shaped Anthropic request: `rounds` file reads of about 2,500 tokens each.
fn claude_code_body(rounds: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": [
        {"type": "text", "text": "Refactor the invoice module and keep every test green."}
    ]})];
    for i in 0..rounds {
        let id = format!("toolu_{i:04}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "Read",
             "input": {"file_path": format!("/repo/src/invoice_{i}.rs")}}
        ]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": filler(i, 12_000)}
        ]}));
    }
    json!({
        "model": "claude-opus-4-8",
        "max_tokens": 64000,
        "thinking": {"type": "adaptive"},
        "system": [{"type": "text", "text": "You are Claude Code, an interactive CLI tool."}],
        "messages": messages,
    })
}

/// Sends `body` as Claude Code would (with `betas` when given) and returns whether the gateway
/// reports a compaction, and what the upstream received.
async fn forwarded(betas: Option<&str>, session: &str, body: &Value) -> (bool, Value) {
    let upstream = mock(1_100_000).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(config(&dir, &upstream.anthropic_base_url())).await;
    let mut request = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "sk-ant-windows-0123456789")
        .header("anthropic-version", "2023-06-01")
        .header("x-ctxkeeper-session", session)
        .json(body);
    if let Some(betas) = betas {
        request = request.header("anthropic-beta", betas);
    }
    let response = request.send().await.unwrap();
    let compacted = response
        .headers()
        .get("x-ctxkeeper-compacted")
        .and_then(|v| v.to_str().ok())
        == Some("true");
    assert!(
        response.status().is_success(),
        "{}",
        response.text().await.unwrap()
    );
    let forwarded = upstream.requests().last().cloned().expect("forwarded").body;
    (compacted, forwarded)
}

#[tokio::test]
async fn the_1m_beta_gives_claude_code_s_default_model_its_real_window() {
    let body = claude_code_body(110);
    let sent = body["messages"].to_string().len();
    let (compacted, with_beta) = forwarded(Some(BETAS), "windows-beta", &body).await;
    assert!(!compacted, "a 1M window holds the session whole");
    assert_eq!(
        with_beta["messages"], body["messages"],
        "forwarded as the agent sent it"
    );
    let (compacted, without) = forwarded(None, "windows-plain", &body).await;
    let kept = without["messages"].to_string().len();
    assert!(
        compacted && kept < sent / 2,
        "without the beta the 200k window (64k of it for output) must compact: {kept} of {sent} bytes"
    );
}
