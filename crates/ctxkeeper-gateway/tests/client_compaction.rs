//! OpenAI Responses server-side compaction through the gateway: in front of an
//! OpenAI-compatible upstream that refuses compaction items, a `compaction_trigger` is
//! answered by the gateway with exactly one compaction item, and that item, sent back, reaches
//! the upstream as the text it stands for; in front of a provider that compacts itself, both
//! are forwarded untouched.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{client, config, error_message, filler, mock_with};
use ctxkeeper_gateway::compaction_items::{ResponsesCompaction, decode};
use ctxkeeper_mock_upstream::{MockConfig, MockServer};
use serde_json::{Value, json};

const KEY: &str = "Bearer sk-compaction-0123456789";

fn history(rounds: usize) -> Vec<Value> {
    let mut input = vec![
        json!({"role": "user", "content": "Fix the rounding bug in src/invoice.rs; keep the public API."}),
    ];
    for i in 0..rounds {
        let id = format!("call_{i}");
        input.push(
            json!({"type": "function_call", "call_id": id, "name": "shell",
            "arguments": format!("{{\"cmd\":\"cat src/f{i}.rs\"}}")}),
        );
        input.push(
            json!({"type": "function_call_output", "call_id": id, "output": filler(i, 1_500)}),
        );
    }
    input
}

async fn upstream(native: bool) -> MockServer {
    mock_with(ctxkeeper_mock_upstream::MockConfig {
        native_compaction: native,
        ..MockConfig::default()
    })
    .await
}

async fn send(gw: &common::Running, body: &Value) -> reqwest::Response {
    client()
        .post(gw.url("/v1/responses"))
        .header("authorization", KEY)
        .header("x-ctxkeeper-session", "codex-like")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_gateway_answers_a_trigger_its_upstream_cannot() {
    let mock = upstream(false).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, &mock.anthropic_base_url());
    assert_eq!(cfg.responses_compaction, ResponsesCompaction::Auto);
    let gw = common::start(cfg).await;
    let mut input = history(6);
    let response = send(&gw, &json!({"model": "gpt-4o", "input": input.clone()})).await;
    assert_eq!(response.status(), 200);
    input.push(json!({"type": "compaction_trigger"}));
    let forwarded_before = mock.requests().len();

    let response = send(&gw, &json!({"model": "gpt-4o", "input": input})).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers().get("x-ctxkeeper-compacted").unwrap(),
        "true"
    );
    let body: Value = response.json().await.unwrap();
    let output = body["output"].as_array().unwrap();
    assert_eq!(output.len(), 1, "{body}");
    assert_eq!(output[0]["type"], "compaction");
    let content = output[0]["encrypted_content"].as_str().unwrap();
    let text = decode(content).expect("the gateway's own item");
    // The user's words and the files the agent touched survive in what the item stands for.
    assert!(text.contains("keep the public API"), "{text}");
    assert!(text.contains("src/f5.rs"), "{text}");
    // Nothing went upstream for it (the extractive summarizer writes the summary).
    assert_eq!(mock.requests().len(), forwarded_before);

    // The client carries on from the item; the upstream reads its text, never the item.
    let next = json!({"model": "gpt-4o", "input": [
        {"role": "user", "content": "Fix the rounding bug in src/invoice.rs; keep the public API."},
        output[0].clone(),
        {"role": "user", "content": "Now run the tests."}]});
    let response = send(&gw, &next).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let forwarded = mock.requests().last().unwrap().body.to_string();
    assert!(!forwarded.contains("\"compaction\""), "{forwarded}");
    assert!(forwarded.contains("src/f5.rs"));

    // Streamed, the answer is the Responses event stream with the one item.
    let mut input = history(7);
    input.push(json!({"type": "compaction_trigger"}));
    let response = send(
        &gw,
        &json!({"model": "gpt-4o", "input": input, "stream": true}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    let text = response.text().await.unwrap();
    let items: Vec<Value> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str::<Value>(data).unwrap())
        .filter(|event| event["type"] == "response.output_item.done")
        .map(|event| event["item"].clone())
        .collect();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["type"], "compaction");
    assert!(text.contains("response.completed"));
}

#[tokio::test]
async fn a_trigger_for_a_provider_that_compacts_is_forwarded_untouched() {
    let mock = upstream(true).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir, &mock.anthropic_base_url());
    cfg.responses_compaction = ResponsesCompaction::Forward;
    let gw = common::start(cfg).await;
    let mut input = history(6);
    input.push(json!({"type": "compaction_trigger"}));
    let request = json!({"model": "gpt-4o", "input": input});
    let response = send(&gw, &request).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let output = body["output"].as_array().unwrap();
    assert_eq!(output.len(), 1);
    assert!(
        output[0]["encrypted_content"]
            .as_str()
            .unwrap()
            .starts_with("mock-compaction-")
    );
    assert_eq!(mock.requests().last().unwrap().body, request);
}

#[tokio::test]
async fn without_the_gateway_the_compatible_upstream_refuses_the_trigger() {
    // What the gateway spares its clients: the same request straight to the upstream.
    let mock = upstream(false).await;
    let mut input = history(2);
    input.push(json!({"type": "compaction_trigger"}));
    let response = client()
        .post(format!("{}/responses", mock.openai_base_url()))
        .header("authorization", KEY)
        .json(&json!({"model": "gpt-4o", "input": input}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let (body, message) = error_message(response).await;
    assert!(
        message.starts_with("Invalid value: 'compaction_trigger'"),
        "{body}"
    );
}
