//! The gateway against hostile or failing peers: a tenant is who the credentials say, a
//! model call that failed leaves nothing in the session, and nothing a client sends (half a
//! request, thousands of event subscriptions, a burst of large bodies) is held without bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{
    chat_history, client, config, error_message, mock_and_config, mock_and_gateway, post_chat,
    start,
};
use ctxkeeper_gateway::metrics::Metrics;
use ctxkeeper_gateway::tenancy::TenantRule;
use ctxkeeper_store::{SessionFilter, SessionKey};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: &str = "Bearer sk-hardening-0123456789";

/// An upstream that answers each chat call with the next status of `script` (then 200s),
/// with a provider-shaped error body for the failures.
async fn scripted_upstream(script: Vec<u16>) -> (String, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            let status = script.get(n).copied().unwrap_or(200);
            async move {
                let status = axum::http::StatusCode::from_u16(status).unwrap();
                if status.is_success() {
                    return (
                        status,
                        axum::Json(json!({
                            "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                            "model": "m",
                            "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "ok"}}]
                        })),
                    );
                }
                (
                    status,
                    axum::Json(
                        json!({"error": {"message": format!("upstream says {status}"),
                        "type": "server_error", "param": null, "code": null}}),
                    ),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), calls)
}

fn key_tenant() -> String {
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("authorization", KEY.parse().unwrap());
    TenantRule::default().resolve(&headers).unwrap()
}

async fn log_len(gw: &common::Running, tenant: &str, session: &str) -> usize {
    let key = SessionKey::new(tenant, "default", "default", session).unwrap();
    gw.log(&key, 1_000).await.len()
}

#[tokio::test]
async fn a_request_naming_another_tenant_writes_and_watches_nothing() {
    // Regression: `x-ctxkeeper-tenant` used to win over the API key, and the step was
    // committed before the upstream refused the key, so anyone could write into (and read
    // back through session_search) another tenant's session.
    let (upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let response = post_chat(
        &gw,
        &[
            ("authorization", "Bearer sk-invalid"),
            ("x-ctxkeeper-tenant", "acme"),
            ("x-ctxkeeper-session", "ticket-1"),
        ],
        &json!({"model": "gpt-4o", "messages": chat_history(1, 100)}),
    )
    .await;
    assert_eq!(response.status(), 403);
    let (body, message) = error_message(response).await;
    assert!(message.contains("--trust-tenant-header"), "{body}");
    assert!(upstream.requests().is_empty(), "nothing went upstream");
    let acme = gw
        .gateway
        .sessions
        .store()
        .list(&SessionFilter::tenant("acme"))
        .await
        .unwrap();
    assert!(acme.is_empty(), "nothing was stored for acme");

    let events = client()
        .get(gw.url("/v1/sessions/ticket-1/events"))
        .header("x-ctxkeeper-tenant", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(
        events.status(),
        403,
        "acme's events cannot be watched either"
    );
}

#[tokio::test]
async fn a_trusted_proxy_or_a_tenant_token_chooses_the_tenant() {
    let (upstream, _dir, mut cfg) = mock_and_config(128_000).await;
    cfg.tenants = TenantRule::default()
        .with_token("acme", "acme-token-123")
        .unwrap();
    let gw = start(cfg).await;
    let send = |token: &'static str| {
        client()
            .post(gw.url("/v1/chat/completions"))
            .header("authorization", KEY)
            .header("x-ctxkeeper-tenant-token", token)
            .header("x-ctxkeeper-session", "s1")
            .json(&json!({"model": "gpt-4o", "messages": chat_history(1, 100)}))
            .send()
    };
    assert_eq!(send("wrong-token-123").await.unwrap().status(), 401);
    assert_eq!(send("acme-token-123").await.unwrap().status(), 200);
    assert_eq!(log_len(&gw, "acme", "s1").await, chat_history(1, 100).len());
    assert_eq!(log_len(&gw, &key_tenant(), "s1").await, 0);

    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir, &upstream.anthropic_base_url());
    cfg.tenants = TenantRule::default().trust_header(true);
    let trusted = start(cfg).await;
    let response = post_chat(
        &trusted,
        &[
            ("authorization", KEY),
            ("x-ctxkeeper-tenant", "globex"),
            ("x-ctxkeeper-session", "s1"),
        ],
        &json!({"model": "gpt-4o", "messages": chat_history(1, 100)}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        log_len(&trusted, "globex", "s1").await,
        chat_history(1, 100).len()
    );
}

#[tokio::test]
async fn a_failed_model_call_leaves_nothing_in_the_session() {
    // Regression: in 30 of 30 upstream failures the step's messages were already logged and
    // the stored context had advanced, as if the model had answered.
    let (upstream, calls) = scripted_upstream(vec![500, 429, 401, 502]).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(config(&dir, &upstream)).await;
    let body = json!({"model": "gpt-4o", "messages": chat_history(2, 100)});
    let send = || {
        client()
            .post(gw.url("/v1/chat/completions"))
            .header("authorization", KEY)
            .header("x-ctxkeeper-session", "flaky")
            .json(&body)
            .send()
    };
    for expected in [500, 429, 401, 502] {
        let response = send().await.unwrap();
        assert_eq!(response.status(), expected);
        assert_eq!(log_len(&gw, &key_tenant(), "flaky").await, 0, "{expected}");
        let key = SessionKey::new(key_tenant(), "default", "default", "flaky").unwrap();
        assert!(
            gw.gateway
                .sessions
                .store()
                .load(&key)
                .await
                .unwrap()
                .is_none(),
            "no state saved after {expected}"
        );
    }
    // The retry that succeeds commits the step once, and a repeat adds nothing.
    for _ in 0..2 {
        let response = send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 6);
    assert_eq!(
        log_len(&gw, &key_tenant(), "flaky").await,
        chat_history(2, 100).len()
    );
    assert_eq!(Metrics::get(&gw.gateway.metrics.steps_abandoned), 4);
}

#[tokio::test]
async fn event_subscriptions_are_freed_when_their_clients_leave() {
    // Regression: every distinct session id subscribed at /v1/sessions/{id}/events left its
    // channel behind for good (25,000 ids: +805 MB).
    let (_upstream, _dir, gw) = mock_and_gateway(128_000).await;
    for i in 0..300 {
        let mut response = client()
            .get(gw.url(&format!("/v1/sessions/probe-{i}/events")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        // Reading nothing and dropping the response closes the stream.
        let _ = tokio::time::timeout(Duration::from_millis(1), response.chunk()).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while gw.gateway.sessions.event_channels() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(gw.gateway.sessions.event_channels(), 0);
    assert_eq!(Metrics::get(&gw.gateway.metrics.event_subscriptions), 0);
}

#[tokio::test]
async fn half_sent_requests_are_cut_off_in_bounded_time() {
    let (_upstream, _dir, mut cfg) = mock_and_config(128_000).await;
    cfg.header_timeout = Duration::from_millis(500);
    cfg.body_timeout = Duration::from_millis(500);
    let gw = start(cfg).await;

    // Headers never finished: the connection is closed.
    let started = Instant::now();
    let mut stalled = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    stalled
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let mut buffer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stalled.read_to_end(&mut buffer))
        .await
        .expect("the gateway closed the connection");
    assert!(read.is_ok());
    assert!(started.elapsed() < Duration::from_secs(5));

    // A body announced and never sent: 408 in the client's error shape.
    let mut slow = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    slow.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":",
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = slow.read(&mut chunk).await.unwrap_or(0);
            answer.extend_from_slice(&chunk[..n]);
            if n == 0 || answer.windows(4).any(|w| w == b"}}\r\n") || answer.ends_with(b"}}") {
                break;
            }
        }
    })
    .await
    .expect("the gateway answered the slow body");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body_timeout_secs"), "{text}");
    assert_eq!(Metrics::get(&gw.gateway.metrics.client_timeouts), 1);
}

#[tokio::test]
async fn bodies_over_the_in_flight_cap_get_503_with_retry_after() {
    let (_upstream, _dir, mut cfg) = mock_and_config(128_000).await;
    cfg.body_limit = 64 * 1024;
    cfg.max_inflight_bytes = 100 * 1024;
    cfg.body_timeout = Duration::from_secs(5);
    let gw = start(cfg).await;

    // One client holds 60 KB in flight by announcing it and sending it slowly.
    let mut holder = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    holder
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 61440\r\n\r\n{",
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Metrics::get(&gw.gateway.metrics.inflight_body_bytes) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        Metrics::get(&gw.gateway.metrics.inflight_body_bytes),
        61_440
    );
    let body = json!({"model": "gpt-4o", "messages": chat_history(6, 8_000)});
    assert!(serde_json::to_vec(&body).unwrap().len() > 41 * 1024);
    let refused = post_chat(&gw, &[("authorization", KEY)], &body).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let (error, message) = error_message(refused).await;
    assert!(message.contains("max_inflight_bytes"), "{error}");
    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Metrics::get(&gw.gateway.metrics.inflight_body_bytes) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let admitted = post_chat(&gw, &[("authorization", KEY)], &body).await;
    assert_eq!(admitted.status(), 200, "admitted once the holder left");
    assert_eq!(Metrics::get(&gw.gateway.metrics.inflight_body_bytes), 0);
}

#[tokio::test]
async fn a_policy_patch_with_nan_is_refused_with_the_fields_name() {
    // Regression: `trigger_ratio = nan` went through as "unset" and turned compaction off.
    let (_upstream, _dir, mut cfg) = mock_and_config(128_000).await;
    cfg.admin_token = Some("admin-secret-1".into());
    let gw = start(cfg).await;
    let chat = post_chat(
        &gw,
        &[("x-ctxkeeper-session", "patched")],
        &json!({"model": "gpt-4o", "messages": chat_history(1, 100)}),
    )
    .await;
    assert_eq!(
        chat.status(),
        401,
        "the mock wants a key; nothing is stored"
    );
    let chat = post_chat(
        &gw,
        &[("authorization", KEY), ("x-ctxkeeper-session", "patched")],
        &json!({"model": "gpt-4o", "messages": chat_history(1, 100)}),
    )
    .await;
    assert_eq!(chat.status(), 200);
    for bad in [
        "trigger_ratio = nan",
        "trigger_ratio = -0.5",
        "trigger_ratio = inf",
    ] {
        let answer = client()
            .patch(gw.url("/admin/sessions/patched/policy"))
            .header("authorization", "Bearer admin-secret-1")
            .header("x-ctxkeeper-tenant", key_tenant())
            .body(bad)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "{bad}");
        assert!(
            answer.text().await.unwrap().contains("trigger_ratio"),
            "{bad}"
        );
    }
}
