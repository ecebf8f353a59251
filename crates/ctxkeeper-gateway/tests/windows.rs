//! The window a request asks for decides when the gateway compacts. Claude Code's default
//! model (`claude-opus-4-8`, newer than the model table) sent with the `context-1m` beta has
//! 1,000,000 tokens: a 190k-token session is forwarded as it came. The same session without
//! the beta has the newest listed Opus 4 window (200k, of which the 64k output budget is
//! spent first) and is compacted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{client, config, filler, mock_and_gateway, mock_with, start};
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
    let (upstream, _dir, gw) = mock_and_gateway(1_100_000).await;
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

/// A model the table does not know, on an OpenAI-compatible server whose model list states
/// each model's window (vLLM's `max_model_len`): once a client listed the models through the
/// gateway, the session gets the listed window and is compacted before it overflows; without
/// the list, the table's default window lets the same request reach the server and be refused.
#[tokio::test]
async fn the_window_a_providers_model_list_states_is_used_for_an_unknown_model() {
    let key = "sk-windows-listed-0123456789";
    let body = json!({
        "model": "local-model",
        "messages": [
            {"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": format!("Summarize these notes. {}", filler(1, 16_000))},
            {"role": "assistant", "content": filler(2, 12_000)},
            {"role": "user", "content": "Now list what is still open."},
        ],
    });
    let mut refused = Vec::new();
    for list_first in [false, true] {
        let upstream = mock_with(ctxkeeper_mock_upstream::MockConfig {
            window: 5_000,
            list_windows: true,
            ..Default::default()
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let gw = start(config(&dir, &upstream.anthropic_base_url())).await;
        if list_first {
            let listed = client()
                .get(gw.url("/v1/models"))
                .bearer_auth(key)
                .send()
                .await
                .unwrap();
            assert_eq!(listed.status(), 200);
            let listed: Value = listed.json().await.unwrap();
            assert!(
                listed["data"].to_string().contains("max_model_len"),
                "{listed}"
            );
        }
        let answer = client()
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth(key)
            .header("x-ctxkeeper-session", "listed")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
        refused.push(
            upstream
                .requests()
                .iter()
                .filter(|r| r.path.ends_with("/chat/completions") && r.status == 400)
                .count(),
        );
    }
    assert!(
        refused[0] > 0,
        "without the list the request overflows first: {refused:?}"
    );
    assert_eq!(
        refused[1], 0,
        "with the listed window it is compacted before it is sent"
    );
}
