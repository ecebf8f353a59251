//! The gateway end to end, in this process, in front of the mock upstream: prefix reuse, the
//! byte-stable forwarded prefix, divergence, overflow recovery, pass-through of upstream
//! errors, credentials, the admin API, limits and malformed input.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use common::{
    SMALL_MODEL, chat_history, client, config, filler, mock_and_config, mock_and_gateway,
    mock_with, post_chat, start, tools,
};
use ctxkeeper_gateway::metrics::Metrics;
use ctxkeeper_gateway::tenancy::TenantRule;
use ctxkeeper_store::{HistoryPage, SessionKey};
use futures_util::StreamExt;
use serde_json::{Value, json};

const KEY: &str = "Bearer sk-test-SECRET-0123456789";

async fn post(url: &str, session: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = client().post(url).header("authorization", KEY).json(body);
    if let Some(session) = session {
        request = request.header("x-ctxkeeper-session", session);
    }
    request.send().await.unwrap()
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn resent_history_is_ingested_once_and_forwarded_whole() {
    let (upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let url = gw.url("/v1/chat/completions");
    for rounds in [1, 2, 3] {
        let body =
            json!({"model": "gpt-4o", "messages": chat_history(rounds, 300), "tools": tools()});
        let response = post(&url, Some("prefix-1"), &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-ctxkeeper-session"), "prefix-1");
        assert_eq!(header(&response, "x-ctxkeeper-compacted"), "false");
        assert!(
            header(&response, "x-ctxkeeper-input-tokens")
                .parse::<u64>()
                .unwrap()
                > 0
        );
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["object"], "chat.completion");
    }
    let received = upstream.requests();
    assert_eq!(received.len(), 3);
    assert_eq!(
        received[2].body["messages"].as_array().unwrap().len(),
        chat_history(3, 300).len()
    );
    // The session log holds every client message exactly once.
    let tenant = ctxkeeper_gateway::tenancy::TenantRule::default()
        .resolve(&{
            let mut h = axum::http::HeaderMap::new();
            h.insert("authorization", KEY.parse().unwrap());
            h
        })
        .unwrap();
    let key = SessionKey::new(tenant, "default", "default", "prefix-1").unwrap();
    let log = gw.log(&key, 100).await;
    assert_eq!(log.len(), chat_history(3, 300).len());
}

#[tokio::test]
async fn sessions_are_derived_from_the_conversation_when_no_header_names_one() {
    let (_upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let url = gw.url("/v1/chat/completions");
    let first = post(
        &url,
        None,
        &json!({"model": "gpt-4o", "messages": chat_history(1, 100)}),
    )
    .await;
    let second = post(
        &url,
        None,
        &json!({"model": "gpt-4o", "messages": chat_history(2, 100)}),
    )
    .await;
    let session = header(&first, "x-ctxkeeper-session").to_string();
    assert!(session.starts_with("auto-"), "{session}");
    assert_eq!(header(&second, "x-ctxkeeper-session"), session);
}

/// A stand-in upstream that keeps the raw bytes of every request body.
async fn capturing_upstream() -> (String, Arc<Mutex<Vec<Bytes>>>) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: Bytes| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(body);
                // No usage: a made-up prompt_tokens would anchor the gateway's accounting to a
                // wrong figure (reported usage overrides its estimate), and this upstream does
                // not count tokens. Servers that report no usage exist, and the estimate serves.
                axum::Json(json!({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                 "finish_reason": "stop"}]
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), bodies)
}

#[derive(serde::Deserialize)]
struct RawMessages<'a> {
    #[serde(borrow)]
    messages: &'a serde_json::value::RawValue,
}

#[tokio::test]
async fn the_forwarded_prefix_is_byte_identical_between_compactions() {
    let (upstream, bodies) = capturing_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(config(&dir, &upstream)).await;
    let url = gw.url("/v1/chat/completions");
    let mut compacted = Vec::new();
    for rounds in 1..=24 {
        let body =
            json!({"model": SMALL_MODEL, "messages": chat_history(rounds, 700), "tools": tools()});
        let response = post(&url, Some("stable"), &body).await;
        assert_eq!(response.status(), 200);
        compacted.push(header(&response, "x-ctxkeeper-compacted") == "true");
    }
    assert!(
        compacted.iter().any(|c| *c),
        "a 4,000-token window must compact: {compacted:?}"
    );
    let bodies = bodies.lock().unwrap().clone();
    let mut checked_after_compaction = 0;
    for i in 1..bodies.len() {
        if compacted[i] {
            continue;
        }
        let before: RawMessages = serde_json::from_slice(&bodies[i - 1]).unwrap();
        let after: RawMessages = serde_json::from_slice(&bodies[i]).unwrap();
        let before = before.messages.get();
        let prefix = &before[..before.len() - 1];
        assert!(
            after.messages.get().starts_with(prefix),
            "request {i}: the previous request's messages are not a byte prefix"
        );
        if compacted[..i].iter().any(|c| *c) {
            checked_after_compaction += 1;
        }
    }
    assert!(
        checked_after_compaction > 0,
        "the prefix must also hold between compactions, not only before the first"
    );
}

#[tokio::test]
async fn an_edited_turn_is_followed_in_a_fork_of_its_own() {
    let (upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let url = gw.url("/v1/chat/completions");
    post(
        &url,
        Some("branchy"),
        &json!({"model": "gpt-4o", "messages": chat_history(2, 100)}),
    )
    .await;
    let mut edited = chat_history(3, 100);
    edited[1] = json!({"role": "user", "content": "Actually, fix the tax rounding instead."});
    let response = post(
        &url,
        Some("branchy"),
        &json!({"model": "gpt-4o", "messages": edited}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let fork = header(&response, "x-ctxkeeper-session").to_string();
    assert!(fork.starts_with("branchy+"), "{fork}");
    // The upstream got the client's edited history, not the stored one.
    let last = upstream.requests().pop().unwrap();
    assert_eq!(
        last.body["messages"][1]["content"],
        "Actually, fix the tax rounding instead."
    );
    // The edit continues in the same fork; the original session keeps its own log.
    edited.push(json!({"role": "assistant", "content": "Done."}));
    edited.push(json!({"role": "user", "content": "Thanks."}));
    let again = post(
        &url,
        Some("branchy"),
        &json!({"model": "gpt-4o", "messages": edited}),
    )
    .await;
    assert_eq!(header(&again, "x-ctxkeeper-session"), fork);
    let tenant = TenantRule::default()
        .resolve(&{
            let mut h = axum::http::HeaderMap::new();
            h.insert("authorization", KEY.parse().unwrap());
            h
        })
        .unwrap();
    let log = |session: String| {
        let store = gw.gateway.sessions.store().clone();
        let key = SessionKey::new(tenant.clone(), "default", "default", session).unwrap();
        async move {
            store
                .history(&key, HistoryPage::last(100))
                .await
                .unwrap()
                .len()
        }
    };
    assert_eq!(log("branchy".into()).await, chat_history(2, 100).len());
    assert_eq!(log(fork).await, edited.len());
    assert_eq!(
        Metrics::get(&gw.gateway.metrics.divergences),
        0,
        "nothing was rebuilt"
    );
}

#[tokio::test]
async fn a_context_overflow_is_compacted_and_retried_before_the_client_sees_it() {
    let (upstream, _dir, gw) = mock_and_gateway(3_000).await;
    let url = gw.url("/v1/chat/completions");
    // gpt-4o's profile says 128k, so only the upstream's error reveals the 3,000-token window.
    let body = json!({"model": "gpt-4o", "messages": chat_history(20, 1200), "tools": tools()});
    let response = post(&url, Some("overflow"), &body).await;
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
    assert_eq!(header(&response, "x-ctxkeeper-compacted"), "true");
    let statuses: Vec<u16> = upstream.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses.first(), Some(&400));
    assert_eq!(statuses.last(), Some(&200));
    assert!(
        gw.gateway
            .metrics
            .render()
            .contains("ctxkeeper_overflow_recoveries_total 1")
    );
    // The window is learned: the next, longer request is compacted before it is sent.
    let before = upstream.requests().len();
    let body = json!({"model": "gpt-4o", "messages": chat_history(22, 1200), "tools": tools()});
    let response = post(&url, Some("overflow"), &body).await;
    assert_eq!(response.status(), 200);
    let after: Vec<u16> = upstream.requests()[before..]
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(
        after,
        vec![200],
        "no second overflow once the window is known"
    );
}

#[tokio::test]
async fn a_streamed_anthropic_overflow_is_recovered_before_the_first_byte() {
    let (upstream, _dir, gw) = mock_and_gateway(3_000).await;
    let mut messages = vec![json!({"role": "user", "content": "Summarise the logs."})];
    for i in 0..12 {
        let id = format!("toolu_{i}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "read_log", "input": {"n": i}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": filler(i, 1200)}]}));
    }
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 128, "stream": true,
        "system": "You read logs.", "messages": messages,
        "tools": [{"name": "read_log", "description": "Read a log", "input_schema": {"type": "object"}}]});
    let response = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-ctxkeeper-compacted"), "true");
    let text = response.text().await.unwrap();
    assert!(text.contains("event: message_start"), "{text}");
    assert!(text.contains("event: message_stop"), "{text}");
    let last = upstream.requests().pop().unwrap();
    assert_eq!(last.status, 200);
    assert_eq!(last.header("anthropic-version"), Some("2023-06-01"));
}

/// An OpenAI Responses input of `rounds` tool rounds, each output `output_bytes` long.
fn responses_input(rounds: usize, output_bytes: usize) -> Vec<Value> {
    let mut input = vec![json!({"type": "message", "role": "user",
        "content": "Fix the rounding bug in invoice totals."})];
    for i in 0..rounds {
        let call = format!("call_{i}");
        input.push(
            json!({"type": "function_call", "call_id": call, "name": "read_file",
            "arguments": format!("{{\"path\":\"src/f{i}.rs\"}}")}),
        );
        input.push(json!({"type": "function_call_output", "call_id": call,
            "output": filler(i, output_bytes)}));
    }
    input
}

fn responses_tools() -> Value {
    json!([{"type": "function", "name": "read_file", "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}])
}

/// The events of one session as they arrive on `GET /v1/sessions/{id}/events`.
struct SessionEvents {
    stream: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Bytes>> + Send>>,
    buffer: String,
    seen: Vec<(String, Value)>,
}

impl SessionEvents {
    /// Subscribes (the subscription exists once this returns: the gateway subscribes before
    /// it answers the headers).
    async fn open(gw: &common::Running, session: &str) -> SessionEvents {
        let response = client()
            .get(gw.url(&format!("/v1/sessions/{session}/events")))
            .header("authorization", KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "content-type"), "text/event-stream");
        SessionEvents {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
            seen: Vec::new(),
        }
    }

    /// Reads events until one named `name` has arrived; fails the test (naming the events that
    /// did arrive) when none does within 10 s.
    async fn expect(&mut self, name: &str) {
        assert!(self.wait_for(name).await, "{:?}", self.names());
    }

    /// Reads events until one named `name` has arrived (10 s at most); returns whether it did.
    async fn wait_for(&mut self, name: &str) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !self.seen.iter().any(|(n, _)| n == name) {
            let Ok(Some(chunk)) = tokio::time::timeout_at(deadline, self.stream.next()).await
            else {
                return false;
            };
            self.buffer
                .push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            while let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let mut event_name = String::new();
                let mut data = String::new();
                for line in event.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event_name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim());
                    }
                }
                if !event_name.is_empty() {
                    self.seen.push((
                        event_name,
                        serde_json::from_str(&data).unwrap_or(Value::Null),
                    ));
                }
            }
        }
        true
    }

    fn named(&self, name: &str) -> Vec<&Value> {
        self.seen
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v)
            .collect()
    }

    fn names(&self) -> Vec<&str> {
        self.seen.iter().map(|(n, _)| n.as_str()).collect()
    }
}

#[tokio::test]
async fn a_streamed_responses_overflow_is_recovered_before_the_first_byte() {
    let (upstream, _dir, gw) = mock_and_gateway(3_000).await;
    let mut events = SessionEvents::open(&gw, "responses-overflow").await;
    // gpt-4o's profile says 128k: only the upstream's in-stream error reveals the window.
    let body = json!({"model": "gpt-4o", "stream": true, "instructions": "You fix bugs.",
        "input": responses_input(16, 1200), "tools": responses_tools()});
    let response = post(&gw.url("/v1/responses"), Some("responses-overflow"), &body).await;
    assert_eq!(response.status(), 200);
    let compacted = header(&response, "x-ctxkeeper-compacted").to_string();
    let text = response.text().await.unwrap();
    assert_eq!(compacted, "true");
    // The client sees exactly one stream, the retried one: never the failed one's events.
    assert_eq!(text.matches("event: response.created").count(), 1, "{text}");
    assert!(!text.contains("event: error"), "{text}");
    assert!(!text.contains("context_length_exceeded"), "{text}");
    assert!(text.contains("event: response.output_item.added"), "{text}");
    assert!(text.contains("event: response.completed"), "{text}");

    let received = upstream.requests();
    assert!(received.len() >= 2, "at least one retry");
    assert!(
        received.iter().all(|r| r.path == "/v1/responses"),
        "every attempt went to the Responses endpoint"
    );
    assert!(
        received[0].input_tokens + 64 > 3_000,
        "the first attempt overflowed the mock's window"
    );
    let last = received.last().unwrap();
    assert!(last.input_tokens + 64 <= 3_000, "the retry fits");
    assert_eq!(last.body["stream"], true);
    assert_eq!(last.header("authorization"), Some(KEY));
    assert!(
        gw.gateway
            .metrics
            .render()
            .contains("ctxkeeper_overflow_recoveries_total 1")
    );
    events.expect("overflow_recovered").await;
    let recovered = events.named("overflow_recovered")[0];
    assert_eq!(recovered["attempt"], 1);
    assert!(
        recovered["tokens_after"].as_u64().unwrap() < recovered["tokens_before"].as_u64().unwrap(),
        "{recovered}"
    );
}

#[tokio::test]
async fn compactions_and_overflow_recoveries_are_announced_on_the_event_stream() {
    let (upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let url = gw.url("/v1/chat/completions");

    // 1. A compaction the policy triggers: the small window fills after a few tool rounds.
    let mut events = SessionEvents::open(&gw, "events-compaction").await;
    let mut compacted_at = None;
    for rounds in 1..=24 {
        let body =
            json!({"model": SMALL_MODEL, "messages": chat_history(rounds, 700), "tools": tools()});
        let response = post(&url, Some("events-compaction"), &body).await;
        assert_eq!(response.status(), 200);
        if header(&response, "x-ctxkeeper-compacted") == "true" {
            compacted_at = Some(rounds);
            break;
        }
    }
    assert!(compacted_at.is_some(), "a 4,000-token window must compact");
    events.expect("context_compaction_end").await;
    let names = events.names();
    let start_at = names
        .iter()
        .position(|n| *n == "context_compaction_start")
        .expect("a start event");
    let end_at = names
        .iter()
        .position(|n| *n == "context_compaction_end")
        .unwrap();
    assert!(start_at < end_at, "start comes before end: {names:?}");
    let start = events.named("context_compaction_start")[0].clone();
    let end = events.named("context_compaction_end")[0].clone();
    assert_eq!(start["type"], "context_compaction_start");
    assert_eq!(start["reason"], end["reason"]);
    let (before, after) = (
        end["tokens_before"].as_u64().unwrap(),
        end["tokens_after"].as_u64().unwrap(),
    );
    assert_eq!(start["tokens_before"].as_u64(), Some(before));
    assert!(after > 0 && after < before, "{end}");
    assert!(
        end["messages_after"].as_u64().unwrap() < end["messages_before"].as_u64().unwrap(),
        "{end}"
    );
    assert!(events.named("overflow_recovered").is_empty());

    // 2. An overflow the upstream reports: compacted harder and announced as recovered.
    upstream.set_window(3_000);
    let mut events = SessionEvents::open(&gw, "events-overflow").await;
    let body = json!({"model": "gpt-4o", "messages": chat_history(20, 1200), "tools": tools()});
    let response = post(&url, Some("events-overflow"), &body).await;
    assert_eq!(response.status(), 200);
    events.expect("overflow_recovered").await;
    let recovered = events.named("overflow_recovered")[0];
    assert_eq!(recovered["attempt"], 1);
    assert_eq!(
        recovered["limit"].as_u64(),
        Some(3_000),
        "the stated window"
    );
    assert!(
        recovered["tokens_after"].as_u64().unwrap() < recovered["tokens_before"].as_u64().unwrap(),
        "{recovered}"
    );
    let overflow_end = events
        .named("context_compaction_end")
        .into_iter()
        .find(|e| e["reason"] == "overflow")
        .cloned();
    assert!(overflow_end.is_some(), "{:?}", events.names());
    assert!(events.named("overflow_unrecovered").is_empty());
}

/// Issue 33, item 6: under `agentrail` the event stream says which layer ran, as the seed's
/// host and runtime do: `context_compaction_start` / `_end` only around the request-boundary
/// compaction (when the user's next request arrives, never inside the tool loop), one
/// `tool_result_truncated` per result the per-call cap cuts, and one `compaction` event with
/// `messagesBefore` / `messagesAfter` for a compaction inside a request.
#[tokio::test]
async fn agentrail_announces_each_compaction_layer_with_its_own_events() {
    let (upstream, _dir, mut cfg) = mock_and_config(128_000).await;
    cfg.policy = ctxkeeper_core::engine::presets::preset("agentrail")
        .unwrap()
        .with_overrides("trigger_tokens = 3000")
        .unwrap();
    let gw = start(cfg).await;
    let url = gw.url("/v1/chat/completions");
    let session = "agentrail-layers";
    let mut events = SessionEvents::open(&gw, session).await;
    let send = |messages: &[Value]| {
        let body = json!({"model": "gpt-4o", "messages": messages});
        let url = url.clone();
        async move { post(&url, Some(session), &body).await }
    };

    // Inside the first request: far over the trigger, and nothing compacts.
    let mut history = chat_history(24, 700);
    for rounds in [12, 18, 24] {
        let body = json!({"model": "gpt-4o", "messages": chat_history(rounds, 700)});
        let response = post(&url, Some(session), &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            header(&response, "x-ctxkeeper-compacted"),
            "false",
            "{rounds} rounds"
        );
    }
    assert!(upstream.requests().last().unwrap().input_tokens > 3_000);

    // The user's next request: the request-boundary compaction, announced by start and end.
    history.push(json!({"role": "assistant", "content": "The rounding happens too early."}));
    history.push(json!({"role": "user", "content": "Now fix the tax module."}));
    let response = send(&history).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-ctxkeeper-compacted"), "true");
    events.expect("context_compaction_end").await;
    let start = events.named("context_compaction_start");
    assert_eq!(start.len(), 1, "{:?}", events.names());
    assert_eq!(start[0]["reason"], "tokens");

    // Layer 1: an older result over the per-call cap is cut before the next call; no
    // compaction is announced for it.
    let big = "log line: rounding differs by one cent\n".repeat(400);
    for (i, output) in [(100, big.as_str()), (101, "ok"), (102, "ok")] {
        let id = format!("call_{i}");
        history.push(
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": id,
            "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}),
        );
        history.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        let response = send(&history).await;
        assert_eq!(response.status(), 200);
    }
    events.expect("tool_result_truncated").await;
    let cut = events.named("tool_result_truncated");
    assert_eq!(cut[0]["call_id"], "call_100");
    assert!(
        cut[0]["reference"]
            .as_str()
            .unwrap()
            .contains("/tool-results/call_100.txt"),
        "{}",
        cut[0]
    );
    assert_eq!(
        events.named("context_compaction_start").len(),
        1,
        "{:?}",
        events.names()
    );

    // Inside a request, a prompt-too-long error: the runtime's `compaction` event.
    upstream.set_window(3_000);
    let other = "agentrail-overflow";
    let mut events = SessionEvents::open(&gw, other).await;
    let body = json!({"model": "gpt-4o", "messages": chat_history(20, 1200)});
    let response = post(&url, Some(other), &body).await;
    assert_eq!(response.status(), 200);
    events.expect("overflow_recovered").await;
    let names = events.names();
    assert!(
        !names.iter().any(|n| n.starts_with("context_compaction_")),
        "{names:?}"
    );
    let compaction = events.named("compaction");
    assert_eq!(compaction.len(), 1, "{names:?}");
    assert_eq!(compaction[0]["reason"], "overflow");
    let (before, after) = (
        compaction[0]["messagesBefore"].as_u64().unwrap(),
        compaction[0]["messagesAfter"].as_u64().unwrap(),
    );
    assert!(after < before, "{}", compaction[0]);
    gw.stop().await;
}

#[tokio::test]
async fn an_unrecoverable_overflow_gives_up_with_the_providers_own_error() {
    // Nothing fits: the window is smaller than the output budget the mock reserves (64), so
    // every attempt overflows however hard the context is compacted.
    let (upstream, _dir, gw) = mock_and_gateway(40).await;
    let huge = filler(1, 6_000);

    let mut events = SessionEvents::open(&gw, "give-up-chat").await;
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": huge}]});
    let response = post(&gw.url("/v1/chat/completions"), Some("give-up-chat"), &body).await;
    assert_eq!(response.status(), 400);
    assert_eq!(header(&response, "x-ctxkeeper-session"), "give-up-chat");
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "context_length_exceeded");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    events.expect("overflow_unrecovered").await;
    let gave_up = events.named("overflow_unrecovered")[0].clone();
    assert!(gave_up["attempt"].as_u64().unwrap() >= 1, "{gave_up}");
    // The engine sees that the user's request alone cannot fit and says so instead of
    // sending an emptied context.
    assert!(
        gave_up["error"].as_str().unwrap().contains("cannot fit"),
        "{gave_up}"
    );
    assert!(events.wait_for("upstream_error").await);
    assert_eq!(events.named("upstream_error")[0]["status"], 400);

    let mut events = SessionEvents::open(&gw, "give-up-anthropic").await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 32,
        "messages": [{"role": "user", "content": huge}]});
    let response = post(&gw.url("/v1/messages"), Some("give-up-anthropic"), &body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    // The last attempt's answer, as Anthropic words an overflow.
    let found = ctxkeeper_core::overflow::classify(400, &error.to_string()).expect("an overflow");
    assert_eq!(
        found.provider,
        ctxkeeper_core::overflow::Provider::Anthropic
    );
    assert!(events.wait_for("overflow_unrecovered").await);

    // Streamed Responses: the upstream's own stream, error event included, reaches the client.
    let mut events = SessionEvents::open(&gw, "give-up-responses").await;
    let body = json!({"model": "gpt-4o", "stream": true,
        "input": [{"type": "message", "role": "user", "content": huge}]});
    let response = post(&gw.url("/v1/responses"), Some("give-up-responses"), &body).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.starts_with("event: response.created"), "{text}");
    assert!(text.contains("event: error"), "{text}");
    assert!(text.contains("context_length_exceeded"), "{text}");
    assert!(events.wait_for("overflow_unrecovered").await);
    // The default policy allows 3 recovery attempts: at most 4 upstream calls per request.
    // Here the user's own request is larger than the window, so the engine knows before any
    // retry that nothing it may remove would make it fit: the first answer is final.
    let requests = upstream.requests();
    for path in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
        let attempts = requests.iter().filter(|r| r.path == path).count();
        assert!(
            (1..=4).contains(&attempts),
            "{path}: at most the policy's bound of recoveries: {attempts} upstream calls"
        );
    }
}

#[tokio::test]
async fn a_connected_event_subscriber_does_not_hold_the_graceful_shutdown() {
    let (_upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let mut events = SessionEvents::open(&gw, "watched").await;
    tokio::time::timeout(Duration::from_secs(10), gw.stop())
        .await
        .expect("the graceful shutdown waited forever on a connected subscriber");
    // The subscriber saw its stream end rather than hang.
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = events.stream.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the event stream ended");
}

#[tokio::test]
async fn other_upstream_errors_pass_through_with_status_and_body() {
    let (upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let body = json!({"model": "gpt-4o", "messages": chat_history(1, 50)});
    // No API key: the mock answers 401 like the real API.
    let direct = client()
        .post(format!("{}/chat/completions", upstream.openai_base_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    let direct_status = direct.status();
    let direct_body: Value = direct.json().await.unwrap();
    let through = post_chat(&gw, &[], &body).await;
    assert_eq!(direct_status, 401);
    assert_eq!(through.status(), direct_status);
    assert_eq!(through.json::<Value>().await.unwrap(), direct_body);
}

#[tokio::test]
async fn credentials_go_upstream_untouched_and_are_never_stored() {
    let (upstream, dir, mut cfg) = mock_and_config(3_000).await;
    cfg.store_url = format!("sqlite://{}", dir.path().join("sessions.db").display());
    let gw = start(cfg).await;
    let response = post_chat(
        &gw,
        &[("authorization", KEY), ("openai-organization", "org-test")],
        &json!({"model": "gpt-4o", "messages": chat_history(20, 1200)}),
    )
    .await;
    assert_eq!(response.status(), 200);
    for request in upstream.requests() {
        assert_eq!(request.header("authorization"), Some(KEY));
        assert_eq!(request.header("openai-organization"), Some("org-test"));
    }
    gw.stop().await;
    // Nothing written anywhere (store, archive, logs of compaction) holds the key.
    let mut files = vec![dir.path().to_path_buf()];
    let mut scanned = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            scanned += bytes.len();
            assert!(
                !bytes.windows(6).any(|w| w == b"SECRET"),
                "{} holds the API key",
                path.display()
            );
        }
    }
    assert!(scanned > 0, "the session was written somewhere");
}

#[tokio::test]
async fn health_metrics_and_models_answer() {
    let (_upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let health = client().get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    post(
        &gw.url("/v1/chat/completions"),
        None,
        &json!({"model": "gpt-4o", "messages": chat_history(1, 50)}),
    )
    .await;
    let models = client()
        .get(gw.url("/v1/models"))
        .header("authorization", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    let metrics = client()
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"ctxkeeper_requests_total{endpoint="chat_completions",status="200"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("ctxkeeper_gateway_overhead_seconds_count 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ctxkeeper_upstream_latency_seconds_bucket"),
        "{metrics}"
    );
}

#[path = "gateway/admin.rs"]
mod admin;

#[path = "gateway/errors.rs"]
mod errors;
