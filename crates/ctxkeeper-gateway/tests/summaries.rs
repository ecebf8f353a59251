//! Summaries written on the request's own upstream: the summary call repeats the last
//! forwarded request (so the provider's prompt cache serves it), its answer becomes the
//! session's summary, and a summarizer that fails never fails the agent's request.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{client, filler, summarizing};

use ctxkeeper_gateway::summarize::{SUMMARY_REQUEST_MARK, SummarizerChoice};
use ctxkeeper_mock_upstream::{MockConfig, RecordedRequest};
use serde_json::{Value, json};

const KEY: &str = "sk-ant-summaries-0123456789";

/// An Anthropic conversation of `turns` user/assistant exchanges with long assistant texts:
/// nothing for a tool-output stage to clear, so compaction must summarize.
fn conversation(turns: usize) -> Value {
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(json!({"role": "user", "content": format!("Step {i}: keep going with the invoice fix.")}));
        messages.push(json!({"role": "assistant", "content": filler(i, 1_800)}));
    }
    messages.push(json!({"role": "user", "content": "Continue."}));
    json!({
        "model": "sum-model",
        "max_tokens": 256,
        "system": [{"type": "text", "text": "You are a careful agent.", "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    })
}

async fn send(gw: &common::Running, body: &Value) -> reqwest::Response {
    client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

fn is_summary_call(body: &Value) -> bool {
    body.to_string().contains(SUMMARY_REQUEST_MARK)
}

/// The body of the agent's newest request among `requests` (a summary call is not one).
fn last_agent_request(requests: &[RecordedRequest]) -> String {
    requests
        .iter()
        .rev()
        .find(|r| !is_summary_call(&r.body))
        .unwrap()
        .body
        .to_string()
}

#[tokio::test]
async fn the_summary_call_reads_the_conversation_from_the_prompt_cache() {
    let (upstream, _dir, cfg) = summarizing(MockConfig::default()).await;
    assert_eq!(cfg.summarizer.name(), "upstream", "the default of serve");
    let gw = common::start(cfg).await;
    for turns in 1..14 {
        let response = send(&gw, &conversation(turns)).await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    }
    let requests = upstream.requests();
    let summary_calls: Vec<_> = requests
        .iter()
        .filter(|r| is_summary_call(&r.body))
        .collect();
    assert!(!summary_calls.is_empty(), "the window forced a summary");
    for call in &summary_calls {
        assert_eq!(call.status, 200);
        // The caller's own credentials, the request's model.
        assert_eq!(call.header("x-api-key"), Some(KEY));
        assert_eq!(call.body["model"], "sum-model");
        let share = call.cached_tokens as f64 / call.input_tokens as f64;
        assert!(
            share >= 0.85,
            "{} of {} input tokens cached",
            call.cached_tokens,
            call.input_tokens
        );
    }
    // The model's summary is what the session carries on.
    let agent_calls: Vec<_> = requests
        .iter()
        .filter(|r| !is_summary_call(&r.body))
        .collect();
    let last = agent_calls.last().unwrap().body.to_string();
    assert!(last.contains("mock summary of the"), "{last}");
    assert!(!last.contains(SUMMARY_REQUEST_MARK));
}

#[tokio::test]
async fn a_summarizer_that_times_out_never_fails_the_agents_request() {
    // Every answer takes 150 ms; the summary call has 50.
    let (upstream, _dir, mut cfg) = summarizing(MockConfig {
        delay: Duration::from_millis(150),
        ..Default::default()
    })
    .await;
    cfg.summary_timeout = Duration::from_millis(50);
    let gw = common::start(cfg).await;
    for turns in 1..14 {
        let response = send(&gw, &conversation(turns)).await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    }
    let requests = upstream.requests();
    let last = last_agent_request(&requests);
    // The summary call timed out (the mock drops a request whose client left before it
    // answered, so it is not among the recorded ones); the extractive summary stood in.
    assert!(last.contains("without a language model"), "{last}");
    assert!(!last.contains("mock summary of the"));
}

#[tokio::test]
async fn a_fixed_summarizer_makes_no_upstream_call() {
    let (upstream, _dir, mut cfg) = summarizing(MockConfig::default()).await;
    cfg.summarizer = SummarizerChoice::parse("extractive", None, None).unwrap();
    let gw = common::start(cfg).await;
    for turns in 1..14 {
        let response = send(&gw, &conversation(turns)).await;
        assert_eq!(response.status(), 200);
    }
    assert!(!upstream.requests().iter().any(|r| is_summary_call(&r.body)));
}

#[tokio::test]
async fn a_request_the_provider_manages_is_forwarded_untouched() {
    let (upstream, _dir, cfg) = summarizing(MockConfig::default()).await;
    let gw = common::start(cfg).await;
    // Far over the 6,000-token window the gateway would manage: the provider's own context
    // management (and its compaction blocks) decide instead.
    let mut body = conversation(13);
    body["context_management"] = json!({"edits": [{"type": "compact_20260112"}]});
    let mut messages = body["messages"].as_array().unwrap().clone();
    messages.insert(
        1,
        json!({"role": "assistant", "content": [{"type": "compaction", "content": "earlier work, compacted by the provider"}]}),
    );
    body["messages"] = Value::Array(messages);
    let response = send(&gw, &body).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let forwarded = upstream.requests().last().unwrap().body.clone();
    assert_eq!(forwarded, body);
}

/// A summarizing gateway, preparing at `prepare_at`, in front of a mock whose summary answers
/// take 400 ms (its other answers are immediate). The directory holds the gateway's store.
async fn behind_a_slow_summarizer(
    prepare_at: Option<f64>,
) -> (
    ctxkeeper_mock_upstream::MockServer,
    tempfile::TempDir,
    common::Running,
) {
    let (upstream, dir, mut cfg) = summarizing(MockConfig {
        summary_delay: Duration::from_millis(400),
        ..Default::default()
    })
    .await;
    cfg.prepare_summaries_at = prepare_at;
    let gw = common::start(cfg).await;
    (upstream, dir, gw)
}

/// Runs the conversation [`behind_a_slow_summarizer`], waiting after each request until any summary being prepared has arrived.
/// Returns the latency of every request that compacted, and the summary calls' cached shares.
async fn crossing_latencies(prepare_at: Option<f64>) -> (Vec<Duration>, Vec<f64>, u64) {
    let (upstream, _dir, gw) = behind_a_slow_summarizer(prepare_at).await;
    let prepared = || {
        gw.gateway
            .metrics
            .summaries_prepared
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let mut crossing = Vec::new();
    for turns in 1..14 {
        let started = std::time::Instant::now();
        let response = send(&gw, &conversation(turns)).await;
        let elapsed = started.elapsed();
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        if common::compacted(&response) {
            crossing.push(elapsed);
        }
        // A preparation started by this step has answered (and been handed back) before the
        // next request: what an agent's own think time gives it in practice.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while (upstream
            .requests()
            .iter()
            .filter(|r| is_summary_call(&r.body))
            .count() as u64)
            < prepared()
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let shares = upstream
        .requests()
        .iter()
        .filter(|r| is_summary_call(&r.body))
        .map(|r| r.cached_tokens as f64 / r.input_tokens as f64)
        .collect();
    (crossing, shares, prepared())
}

#[tokio::test]
async fn a_summary_prepared_in_the_background_spares_the_crossing_request_the_wait() {
    let (crossing, shares, prepared) = crossing_latencies(Some(0.75)).await;
    assert!(prepared > 0, "the context passed the soft threshold");
    assert!(!crossing.is_empty(), "the window forced a compaction");
    for latency in &crossing {
        assert!(
            *latency < Duration::from_millis(400),
            "a crossing request waited for a summary: {crossing:?}, {prepared} prepared"
        );
    }
    assert!(shares.iter().all(|share| *share >= 0.85), "{shares:?}");
    // Without preparation the crossing request waits for the summary call.
    let (crossing, _, prepared) = crossing_latencies(None).await;
    assert_eq!(prepared, 0);
    assert!(!crossing.is_empty());
    assert!(
        crossing.iter().any(|l| *l >= Duration::from_millis(400)),
        "{crossing:?}"
    );
}

/// An agent without think time: the request that crosses the trigger arrives while the
/// summary prepared for it is still being written. It waits for that summary (within the
/// summary wait) instead of asking the upstream for the same summary a second time.
#[tokio::test]
async fn a_crossing_request_waits_for_the_summary_being_prepared_instead_of_asking_again() {
    let (upstream, _dir, gw) = behind_a_slow_summarizer(Some(0.75)).await;
    let mut compacted = 0;
    for turns in 1..14 {
        let response = send(&gw, &conversation(turns)).await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        if common::compacted(&response) {
            compacted += 1;
            let forwarded = last_agent_request(&upstream.requests());
            assert!(
                forwarded.contains("mock summary of the"),
                "the crossing request applied the prepared model summary: {forwarded}"
            );
        }
    }
    assert!(compacted > 0, "the window forced a compaction");
    // Let any preparation still out finish, so the mock records it.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let prepared = gw
        .gateway
        .metrics
        .summaries_prepared
        .load(std::sync::atomic::Ordering::Relaxed);
    let summary_calls = upstream
        .requests()
        .iter()
        .filter(|r| is_summary_call(&r.body))
        .count() as u64;
    assert!(prepared > 0);
    assert_eq!(
        summary_calls, prepared,
        "every summary call was a preparation: no crossing request asked again"
    );
}

#[tokio::test]
async fn a_summarizer_outage_of_any_kind_never_fails_the_agents_request() {
    for status in [401, 500, 529] {
        let (upstream, _dir, cfg) = summarizing(MockConfig {
            summary_status: Some(status),
            ..Default::default()
        })
        .await;
        let gw = common::start(cfg).await;
        for turns in 1..14 {
            let response = send(&gw, &conversation(turns)).await;
            assert_eq!(
                response.status(),
                200,
                "summary calls failing with {status}"
            );
        }
        let requests = upstream.requests();
        let failed: Vec<u16> = requests
            .iter()
            .filter(|r| is_summary_call(&r.body))
            .map(|r| r.status)
            .collect();
        assert!(!failed.is_empty() && failed.iter().all(|s| *s == status));
        let last = last_agent_request(&requests);
        assert!(
            last.contains("without a language model"),
            "{status}: {last}"
        );
    }
}

/// [`conversation`] offering Claude Code's `Bash` tool; `choice` is the `tool_choice` type:
/// under `auto` the model's answer calls the tool (the agent goes on), under `none` it is
/// text (the agent's turn ends).
fn agent_conversation(turns: usize, choice: &str, stream: bool) -> Value {
    let mut body = conversation(turns);
    body["tools"] = json!([{
        "name": "Bash",
        "description": "Runs a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }]);
    body["tool_choice"] = json!({"type": choice});
    body["stream"] = json!(stream);
    body
}

#[tokio::test]
async fn no_summary_is_prepared_after_an_answer_that_ends_the_agents_turn() {
    for stream in [false, true] {
        for choice in ["auto", "none"] {
            let (_upstream, _dir, mut cfg) = summarizing(MockConfig::default()).await;
            cfg.prepare_summaries_at = Some(0.5);
            let gw = common::start(cfg).await;
            let metrics = &gw.gateway.metrics;
            let count = |counter: &std::sync::atomic::AtomicU64| {
                counter.load(std::sync::atomic::Ordering::Relaxed)
            };
            for turns in 1..10 {
                let response = send(&gw, &agent_conversation(turns, choice, stream)).await;
                assert_eq!(response.status(), 200);
                let body = response.text().await.unwrap();
                let called = body.contains("tool_use");
                assert_eq!(
                    called,
                    choice == "auto",
                    "{choice}, stream {stream}: {body}"
                );
            }
            let (prepared, skipped) = (
                count(&metrics.summaries_prepared),
                count(&metrics.preparations_skipped),
            );
            if choice == "auto" {
                assert!(
                    prepared > 0,
                    "stream {stream}: the agent went on; a summary is prepared"
                );
                assert_eq!(skipped, 0, "stream {stream}");
            } else {
                assert_eq!(prepared, 0, "stream {stream}: every answer ended the turn");
                assert!(
                    skipped > 0,
                    "stream {stream}: the skipped preparations are counted"
                );
            }
        }
    }
}

/// A request whose client leaves while its summary is being written upstream (the handler's
/// future is dropped mid-summary) leaves nothing of that caller in the shared warm session: the
/// next request of the same session, from another caller of the same tenant, is summarized
/// on its own credentials, never on the departed caller's.
#[tokio::test]
async fn a_cancelled_request_leaves_no_summarizer_or_credential_in_the_warm_session() {
    let (upstream, _dir, mut cfg) = summarizing(MockConfig {
        summary_delay: Duration::from_millis(2_500),
        ..Default::default()
    })
    .await;
    // Summaries written inline, in the request that needs them, and never timed out here.
    cfg.prepare_summaries_at = None;
    cfg.summary_timeout = Duration::from_secs(30);
    // One tenant, two callers with their own keys (a team sharing a session).
    cfg.tenants = ctxkeeper_gateway::tenancy::TenantRule::default().trust_header(true);
    let gw = common::start(cfg).await;
    let send_as = |key: &'static str, body: Value, timeout: Duration| {
        let request = client()
            .post(gw.url("/v1/messages"))
            .header("x-api-key", key)
            .header("x-ctxkeeper-tenant", "team")
            .header("anthropic-version", "2023-06-01")
            .timeout(timeout)
            .json(&body);
        async move { request.send().await }
    };
    const FIRST: &str = "sk-ant-first-caller-0000000001";
    const SECOND: &str = "sk-ant-second-caller-000000002";

    // The first caller grows the conversation until a step has to summarize: that step waits
    // on the slow summary, and its client gives up and disconnects.
    let mut cancelled_at = None;
    for turns in 1..14 {
        match send_as(FIRST, conversation(turns), Duration::from_millis(1_200)).await {
            Ok(response) => assert_eq!(response.status(), 200),
            Err(e) if e.is_timeout() => {
                cancelled_at = Some(turns);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let turns = cancelled_at.expect("a step had to summarize, and its client left during it");
    // The summary call never answered the departed request.
    assert!(
        !upstream.requests().iter().any(|r| is_summary_call(&r.body)),
        "the first caller's summary call was cut off with its request"
    );

    // The second caller sends the same step, then the next one.
    for step in [turns, turns + 1] {
        let response = send_as(SECOND, conversation(step), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    }
    let summary_calls: Vec<_> = upstream
        .requests()
        .into_iter()
        .filter(|r| is_summary_call(&r.body))
        .collect();
    assert!(
        !summary_calls.is_empty(),
        "the second caller's step summarized"
    );
    for call in &summary_calls {
        assert_eq!(
            call.header("x-api-key"),
            Some(SECOND),
            "a summary after the cancellation went out on the departed caller's key"
        );
    }
    let agent_calls: Vec<_> = upstream
        .requests()
        .into_iter()
        .filter(|r| !is_summary_call(&r.body))
        .collect();
    let last = agent_calls.last().unwrap();
    assert_eq!(last.header("x-api-key"), Some(SECOND));
    assert!(last.body.to_string().contains("mock summary of the"));
}
