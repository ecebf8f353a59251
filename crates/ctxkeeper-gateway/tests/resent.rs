//! The resent prefix (`ctxkeeper_gateway::resent`): a session named by a header has the
//! messages of its previous request reused instead of parsed again. Whatever it reuses, the
//! upstream must receive what a gateway parsing every body in full (`resent_prefix_bytes = 0`)
//! sends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    SMALL_MODEL, anthropic_tool_loop, chat_history, client, error_message, filler, mock_and_config,
    mock_and_gateway, start, tools,
};
use ctxkeeper_gateway::metrics::Metrics;
use serde_json::{Value, json};

/// How a test gateway reads bodies: the parsed bodies it keeps (0: it parses every body in
/// full) and the size from which it forwards a body while it arrives (0: never).
#[derive(Debug, Clone, Copy)]
struct Reading {
    resent_bytes: usize,
    early_from: usize,
}

/// Keeps parsed bodies, forwards none early (large ones do not come up in these tests).
const REUSING: Reading = Reading {
    resent_bytes: 64 << 20,
    early_from: 0,
};
/// Parses every body in full: what the others must match.
const FULL_PARSE: Reading = Reading {
    resent_bytes: 0,
    early_from: 0,
};
/// Keeps parsed bodies and forwards every body of a known session while it arrives.
const EARLY: Reading = Reading {
    resent_bytes: 64 << 20,
    early_from: 1,
};

/// What a gateway did with a conversation.
struct Forwarded {
    /// The bodies its upstream received (and answered).
    received: Vec<Value>,
    /// The statuses the client got.
    statuses: Vec<u16>,
    reused: u64,
    early: u64,
    cut: u64,
}

/// Sends `bodies` in turn, as one session named by a header, to a fresh gateway reading as
/// `reading` says.
async fn forwarded(path: &str, bodies: &[Value], reading: Reading, window: u64) -> Forwarded {
    let (upstream, _dir, mut config) = mock_and_config(window).await;
    config.resent_prefix_bytes = reading.resent_bytes;
    config.forward_early_from = reading.early_from;
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
    let metrics = &gw.gateway.metrics;
    let forwarded = Forwarded {
        received,
        statuses,
        reused: Metrics::get(&metrics.resent_messages_reused),
        early: Metrics::get(&metrics.bodies_forwarded_early),
        cut: Metrics::get(&metrics.early_forwards_cut),
    };
    gw.stop().await;
    forwarded
}

/// The same conversation through a gateway that reuses its resent prefix, one that also
/// forwards every body while it arrives, and one that parses every body: the upstream
/// receives the same bodies (an early upload the gateway cut is never received).
async fn same_as_full_parse(path: &str, bodies: &[Value]) -> Forwarded {
    same_as_full_parse_at(path, bodies, 4000).await
}

/// [`same_as_full_parse`] against an upstream with a window of `window` tokens; returns what
/// the early-forwarding gateway did.
async fn same_as_full_parse_at(path: &str, bodies: &[Value], window: u64) -> Forwarded {
    let full = forwarded(path, bodies, FULL_PARSE, window).await;
    assert_eq!(
        full.reused, 0,
        "a gateway keeping nothing parses every body"
    );
    assert_eq!(full.early, 0);
    let reusing = forwarded(path, bodies, REUSING, window).await;
    let early = forwarded(path, bodies, EARLY, window).await;
    assert!(reusing.reused > 0, "the resent prefixes were reused");
    assert!(early.early > 0, "bodies were forwarded while they arrived");
    for (name, other) in [("reusing", &reusing), ("early", &early)] {
        assert_eq!(other.statuses, full.statuses, "{name}");
        assert_eq!(other.received.len(), full.received.len(), "{name}");
        for (i, (a, b)) in other.received.iter().zip(&full.received).enumerate() {
            assert_eq!(a, b, "{name}: request {i} differs");
        }
    }
    early
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
    let early = same_as_full_parse("/v1/chat/completions", &bodies).await;
    // Once compacted, the session sends its managed context, never the client's bytes again:
    // only the request that compacted first had its upload started, and cut.
    assert_eq!(
        early.cut, 1,
        "only the first compacting request's upload was started and cut"
    );
    assert!(early.cut < early.early, "the others went on as they came");
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
        // The marker moves to the newest message: the previous newest one changes bytes.
        let messages = anthropic_tool_loop(steps, 500, |i| format!("cat f{i}"));
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
    errors_after_a_resent_prefix(0).await;
}

#[tokio::test]
async fn a_refused_request_whose_upload_started_early_never_reaches_the_upstream() {
    errors_after_a_resent_prefix(1).await;
}

/// Refusals of requests that continue a known session (forwarded while they arrive from
/// `early_from` bytes on, 0: never): each names its place in the whole body, none reaches the
/// upstream, and the session goes on.
async fn errors_after_a_resent_prefix(early_from: usize) {
    let (upstream, _dir, mut config) = mock_and_config(1_000_000).await;
    config.forward_early_from = early_from;
    let gw = start(config).await;
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
    let first = json!({"model": "gpt-4o", "messages": messages}).to_string();
    let ok = send(first.clone()).await.unwrap();
    assert_eq!(ok.status(), 200);
    // A refused request leaves its session unknown to the next one (its kept prefix is
    // spent): with early uploads on, a valid request before each refusal makes every refusal
    // one whose upload started.
    let rewarm = || async {
        if early_from > 0 {
            assert_eq!(send(first.clone()).await.unwrap().status(), 200);
        }
    };

    // An unknown role in a new message: its index counts the resent messages too.
    let bad_index = messages.len();
    messages.push(json!({"role": "wizard", "content": "hi"}));
    rewarm().await;
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
    rewarm().await;
    let refused = send(truncated).await.unwrap();
    assert_eq!(refused.status(), 400);
    let (error, message) = error_message(refused).await;
    assert!(message.contains("malformed JSON"), "{error}");
    // A broken tool pair in a new message is refused as a full parse refuses it.
    let mut orphan = messages.clone();
    orphan.push(json!({"role": "tool", "tool_call_id": "call_nowhere", "content": "x"}));
    rewarm().await;
    let refused = send(json!({"model": "gpt-4o", "messages": orphan}).to_string())
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let forwarded = upstream
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .count();
    let valid = if early_from > 0 { 4 } else { 1 };
    assert_eq!(forwarded, valid, "only the valid requests went upstream");
    // The session goes on after the refusals, from what it knew.
    let ok = send(good).await.unwrap();
    assert_eq!(ok.status(), 200);
    let metrics = &gw.gateway.metrics;
    if early_from > 0 {
        // The three refused requests started their uploads and had them cut; valid ones
        // whose uploads started went on.
        assert_eq!(Metrics::get(&metrics.early_forwards_cut), 3);
        assert!(Metrics::get(&metrics.bodies_forwarded_early) > 3);
    } else {
        assert_eq!(Metrics::get(&metrics.bodies_forwarded_early), 0);
    }
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
    let (upstream, _dir, gw) = mock_and_gateway(4000).await;
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
