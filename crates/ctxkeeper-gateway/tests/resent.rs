//! The resent prefix (`ctxkeeper_gateway::resent`): a session named by a header has the
//! messages of its previous request reused instead of parsed again. Whatever it reuses, the
//! upstream must receive what a gateway parsing every body in full (`resent_prefix_bytes = 0`)
//! sends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{SMALL_MODEL, chat_history, client, config, filler, mock, start, tools};
use ctxkeeper_gateway::metrics::Metrics;
use serde_json::{Value, json};

/// Sends `bodies` in turn, as one session named by a header, to a fresh gateway that keeps
/// `resent_bytes` of parsed bodies (0: it parses every body in full) and returns the bodies
/// its upstream received, the statuses the client got and how many messages were reused.
async fn forwarded(
    path: &str,
    bodies: &[Value],
    resent_bytes: usize,
    window: u64,
) -> (Vec<Value>, Vec<u16>, u64) {
    let upstream = mock(window).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&dir, &upstream.anthropic_base_url());
    config.resent_prefix_bytes = resent_bytes;
    let gw = start(config).await;
    let mut statuses = Vec::new();
    for body in bodies {
        let response = client()
            .post(gw.url(path))
            .header("authorization", "Bearer sk-resent")
            .header("x-api-key", "sk-ant-resent")
            .header("anthropic-version", "2023-06-01")
            .header("x-ctxkeeper-session", "resent-1")
            .json(body)
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    let received = upstream
        .requests()
        .into_iter()
        .filter(|r| r.path == path)
        .map(|r| r.body)
        .collect();
    let reused = Metrics::get(&gw.gateway.metrics.resent_messages_reused);
    gw.stop().await;
    (received, statuses, reused)
}

/// The same conversation through a gateway that reuses its resent prefix and one that parses
/// every body: the upstream receives the same bodies.
async fn same_as_full_parse(path: &str, bodies: &[Value]) {
    same_as_full_parse_at(path, bodies, 4000).await;
}

/// [`same_as_full_parse`] against an upstream with a window of `window` tokens.
async fn same_as_full_parse_at(path: &str, bodies: &[Value], window: u64) {
    let (reused, reused_statuses, reused_messages) =
        forwarded(path, bodies, 64 << 20, window).await;
    let (full, full_statuses, full_reused) = forwarded(path, bodies, 0, window).await;
    assert!(reused_messages > 0, "the resent prefixes were reused");
    assert_eq!(
        full_reused, 0,
        "a gateway keeping nothing parses every body"
    );
    assert_eq!(reused_statuses, full_statuses);
    assert_eq!(reused.len(), full.len());
    for (i, (a, b)) in reused.iter().zip(&full).enumerate() {
        assert_eq!(a, b, "request {i} differs");
    }
}

#[tokio::test]
async fn a_growing_chat_conversation_is_forwarded_as_a_full_parse_forwards_it() {
    // Enough rounds on the small model that the default policy compacts in between: the
    // bodies after a compaction are the managed context, not the client's bytes.
    let bodies: Vec<Value> = (1..=14)
        .map(|rounds| {
            json!({"model": SMALL_MODEL, "messages": chat_history(rounds, 600), "tools": tools()})
        })
        .collect();
    same_as_full_parse("/v1/chat/completions", &bodies).await;
}

#[tokio::test]
async fn a_long_history_that_arrives_in_many_chunks_too() {
    // Megabyte bodies reach the gateway in many reads: the scanner resumes inside strings,
    // escapes and elements cut anywhere.
    let bodies: Vec<Value> = (1..=6)
        .map(
            |rounds| json!({"model": "gpt-4.1-mini", "messages": chat_history(rounds * 4, 40_000)}),
        )
        .collect();
    assert!(bodies.last().unwrap().to_string().len() > 900_000);
    same_as_full_parse_at("/v1/chat/completions", &bodies, 1_000_000).await;
}

#[tokio::test]
async fn an_anthropic_conversation_with_a_system_prompt_and_a_moving_cache_marker_too() {
    let body = |steps: usize| {
        let mut messages = vec![json!({"role": "user", "content": [
            {"type": "text", "text": "Fix the failing invoice test."}]})];
        for i in 0..steps {
            let id = format!("toolu_{i:04}");
            messages.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": format!("cat f{i}")}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": filler(i, 500)}]}));
        }
        // The marker moves to the newest message: the previous newest one changes bytes.
        let last = messages.last_mut().unwrap();
        last["content"].as_array_mut().unwrap().last_mut().unwrap()["cache_control"] =
            json!({"type": "ephemeral"});
        json!({
            "model": SMALL_MODEL,
            "max_tokens": 64,
            "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
            "messages": messages,
        })
    };
    let bodies: Vec<Value> = (1..=12).map(body).collect();
    same_as_full_parse("/v1/messages", &bodies).await;
}

#[tokio::test]
async fn an_edited_earlier_message_and_a_retried_turn_are_seen_as_a_full_parse_sees_them() {
    let mut bodies = Vec::new();
    let history = chat_history(4, 300);
    bodies.push(json!({"model": "gpt-4o", "messages": history}));
    // A retried newest turn: the last message replaced.
    let mut retried = history.clone();
    retried.last_mut().unwrap()["content"] = json!("a different result");
    bodies.push(json!({"model": "gpt-4o", "messages": retried.clone()}));
    // An earlier message edited: the history diverges in the middle.
    let mut edited = retried.clone();
    edited[1]["content"] = json!("Fix the rounding bug in invoice totals, in cents.");
    edited.push(json!({"role": "user", "content": "and add a test"}));
    bodies.push(json!({"model": "gpt-4o", "messages": edited}));
    // Back to the retried history.
    bodies.push(json!({"model": "gpt-4o", "messages": retried}));
    same_as_full_parse("/v1/chat/completions", &bodies).await;
}

#[tokio::test]
async fn an_error_after_a_resent_prefix_names_its_place_in_the_whole_body() {
    let upstream = mock(1_000_000).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(config(&dir, &upstream.anthropic_base_url())).await;
    let send = |body: String| {
        client()
            .post(gw.url("/v1/chat/completions"))
            .header("authorization", "Bearer sk-resent")
            .header("x-ctxkeeper-session", "resent-errors")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let mut messages = chat_history(3, 200);
    let ok = send(json!({"model": "gpt-4o", "messages": messages}).to_string())
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);

    // An unknown role in a new message: its index counts the resent messages too.
    let bad_index = messages.len();
    messages.push(json!({"role": "wizard", "content": "hi"}));
    let refused = send(json!({"model": "gpt-4o", "messages": messages}).to_string())
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    let param = error["error"]["param"].as_str().unwrap_or_default();
    assert!(
        param.contains(&format!("[{bad_index}]")),
        "param {param:?} should name message {bad_index}: {error}"
    );

    // Malformed JSON after the resent prefix: refused as malformed, nothing forwarded.
    messages.pop();
    let good = json!({"model": "gpt-4o", "messages": messages}).to_string();
    let truncated = format!(
        "{}, {{\"role\": \"user\", \"content\": ",
        &good[..good.len() - 2]
    );
    let refused = send(truncated).await.unwrap();
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("malformed JSON"),
        "{error}"
    );
    // A broken tool pair in a new message is refused as a full parse refuses it.
    let mut orphan = messages.clone();
    orphan.push(json!({"role": "tool", "tool_call_id": "call_nowhere", "content": "x"}));
    let refused = send(json!({"model": "gpt-4o", "messages": orphan}).to_string())
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let forwarded = upstream
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .count();
    assert_eq!(forwarded, 1, "only the valid request went upstream");
    // The session goes on after the refusals, from what it knew.
    let ok = send(good).await.unwrap();
    assert_eq!(ok.status(), 200);
    gw.stop().await;
}

/// A Codex-like Responses history: instructions, then rounds of reasoning, a tool call and its
/// output (reasoning and call form one assistant message), with an assistant message now and
/// then. With `prefill`, the history ends on an assistant message, which the next request's
/// first call joins: the reused prefix must then stop before that message.
fn responses_body(rounds: usize, prefill: bool) -> Value {
    let mut input = vec![json!({"role": "user", "content": [
        {"type": "input_text", "text": "Fix the rounding bug in src/invoice.rs."}]})];
    for i in 0..rounds {
        if i % 3 == 2 {
            input.push(json!({"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": format!("Step {i} done; next I read src/f{i}.rs.")}]}));
        }
        let id = format!("call_{i}");
        input.push(
            json!({"type": "reasoning", "id": format!("rs_{i}"), "summary": [],
            "encrypted_content": format!("gAAAA{}", filler(i + 7, 120))}),
        );
        input.push(
            json!({"type": "function_call", "call_id": id, "name": "shell",
            "arguments": format!("{{\"cmd\":\"cat src/f{i}.rs\"}}")}),
        );
        input
            .push(json!({"type": "function_call_output", "call_id": id, "output": filler(i, 700)}));
    }
    if prefill {
        input.push(json!({"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Let me look at the tests."}]}));
    }
    json!({"model": SMALL_MODEL, "instructions": "You are Codex, a coding agent.",
        "input": input, "store": false, "tools": [{"type": "function", "name": "shell",
        "parameters": {"type": "object"}}]})
}

#[tokio::test]
async fn a_responses_history_whose_items_group_into_messages_too() {
    let mut bodies: Vec<Value> = (1..=6)
        .map(|rounds| responses_body(rounds, false))
        .collect();
    // A history ending on an assistant message, then the same history with a call after it.
    bodies.push(responses_body(6, true));
    let mut joined = responses_body(6, true);
    let input = joined["input"].as_array_mut().unwrap();
    input.push(
        json!({"type": "function_call", "call_id": "call_x", "name": "shell",
        "arguments": "{\"cmd\":\"cargo test\"}"}),
    );
    input.push(json!({"type": "function_call_output", "call_id": "call_x", "output": "ok"}));
    bodies.push(joined);
    bodies.extend((7..=12).map(|rounds| responses_body(rounds, false)));
    same_as_full_parse("/v1/responses", &bodies).await;
}

#[tokio::test]
async fn a_responses_history_holding_the_gateways_own_compaction_item_is_read_in_full() {
    // The gateway answers compaction triggers here (the mock is no OpenAI): a history that
    // carries its item goes upstream as the item's text, whatever the prefix holds.
    let upstream = mock(4000).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(config(&dir, &upstream.anthropic_base_url())).await;
    let send = |body: Value| {
        client()
            .post(gw.url("/v1/responses"))
            .header("authorization", "Bearer sk-resent")
            .header("x-ctxkeeper-session", "resent-compaction")
            .json(&body)
            .send()
    };
    let mut body = responses_body(3, false);
    assert_eq!(send(body.clone()).await.unwrap().status(), 200);
    body["input"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "compaction_trigger"}));
    let answer: Value = send(body).await.unwrap().json().await.unwrap();
    let item = answer["output"][0].clone();
    assert_eq!(item["type"], "compaction", "{answer}");
    let mut carried = json!({"model": SMALL_MODEL, "input": [item,
        {"role": "user", "content": "Now run the tests."}]});
    for turn in 0..3 {
        let response = send(carried.clone()).await.unwrap();
        assert_eq!(response.status(), 200, "turn {turn}");
        let forwarded = upstream.requests().last().unwrap().body.to_string();
        assert!(
            !forwarded.contains("\"compaction\""),
            "turn {turn}: {forwarded}"
        );
        carried["input"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user",
            "content": format!("and step {turn}")}));
    }
    gw.stop().await;
}
