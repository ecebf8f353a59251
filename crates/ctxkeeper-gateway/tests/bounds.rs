//! What a client can make the gateway hold, bounded: the peer address reaches the handlers
//! (per-source bounds), stalled connections are closed within the configured deadline on every
//! route, idle sessions are swept, and a hung summarizer never holds the agent past its bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use common::{config, mock, mock_and_config, summarizing};
use ctxkeeper_gateway::Gateway;
use ctxkeeper_gateway::metrics::Metrics;
use ctxkeeper_gateway::router::Server;
use ctxkeeper_gateway::summarize::SUMMARY_REQUEST_MARK;

#[tokio::test]
async fn handlers_see_the_peer_address() {
    let upstream = mock(128_000).await;
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::open(config(&dir, &upstream.anthropic_base_url()))
        .await
        .unwrap();
    let peer = axum::Router::new().route(
        "/peer",
        axum::routing::get(
            |ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() },
        ),
    );
    let server = Server::bind_gateway(gateway, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
        .merge(peer);
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let answer = reqwest::get(format!("http://{addr}/peer"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(answer.starts_with("127.0.0.1:"), "{answer}");
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// An Anthropic conversation of `turns` exchanges with long assistant texts (compaction must
/// summarize).
fn conversation(turns: usize) -> serde_json::Value {
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(serde_json::json!({"role": "user", "content": format!("Step {i}: keep going with the invoice fix.")}));
        messages
            .push(serde_json::json!({"role": "assistant", "content": common::filler(i, 1_800)}));
    }
    messages.push(serde_json::json!({"role": "user", "content": "Continue."}));
    serde_json::json!({
        "model": "sum-model",
        "max_tokens": 256,
        "system": "You are a careful agent.",
        "messages": messages,
    })
}

/// With a summarizer that hangs, every request (the one crossing the trigger included, with
/// and without a preparation still out) answers within the wait bound, on the extractive
/// summary.
#[tokio::test]
async fn a_hung_summarizer_holds_no_request_past_the_wait_bound() {
    for prepare_at in [None, Some(0.5)] {
        let (upstream, _dir, mut cfg) = summarizing(ctxkeeper_mock_upstream::MockConfig {
            summary_delay: Duration::from_secs(60),
            ..Default::default()
        })
        .await;
        cfg.summary_timeout = Duration::from_secs(30);
        cfg.summary_wait = Duration::from_millis(300);
        cfg.prepare_summaries_at = prepare_at;
        let gw = common::start(cfg).await;
        let mut compacted = 0;
        for turns in 1..14 {
            let started = Instant::now();
            let response = common::client()
                .post(gw.url("/v1/messages"))
                .header("x-api-key", "sk-ant-hung-0123456789")
                .header("anthropic-version", "2023-06-01")
                .timeout(Duration::from_secs(15))
                .json(&conversation(turns))
                .send()
                .await
                .expect("answered before the client gave up");
            let elapsed = started.elapsed();
            assert_eq!(response.status(), 200);
            if response
                .headers()
                .get("x-ctxkeeper-compacted")
                .is_some_and(|v| v == "true")
            {
                compacted += 1;
            }
            assert!(
                elapsed < Duration::from_secs(3),
                "step {turns} waited {elapsed:?} (prepare at {prepare_at:?})"
            );
        }
        assert!(compacted > 0, "the window forced a compaction");
        assert!(Metrics::get(&gw.gateway.metrics.summaries_late) > 0);
        let last = upstream
            .requests()
            .into_iter()
            .rev()
            .find(|r| !r.body.to_string().contains(SUMMARY_REQUEST_MARK))
            .unwrap()
            .body
            .to_string();
        assert!(last.contains("without a language model"), "{last}");
    }
}

/// A warm session idle past `--session-idle` leaves memory on the server's own clock, with no
/// new session arriving to trigger a sweep.
#[tokio::test]
async fn idle_sessions_are_swept_without_new_traffic() {
    let (_upstream, _dir, mut cfg) = mock_and_config(128_000).await;
    cfg.session_idle = Duration::from_millis(300);
    let gw = common::start(cfg).await;
    for session in ["idle-a", "idle-b", "idle-c"] {
        let response = common::client()
            .post(gw.url("/v1/chat/completions"))
            .header("authorization", "Bearer sk-idle-0123456789")
            .header("x-ctxkeeper-session", session)
            .json(&serde_json::json!({
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": format!("hello from {session}")}],
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    assert_eq!(gw.gateway.sessions.warm_sessions(), 3);
    let deadline = Instant::now() + Duration::from_secs(3);
    while gw.gateway.sessions.warm_sessions() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(gw.gateway.sessions.warm_sessions(), 0);
    assert_eq!(Metrics::get(&gw.gateway.metrics.warm_sessions), 0);
    assert!(Metrics::get(&gw.gateway.metrics.sessions_evicted) >= 3);
}
