//! What a large request body costs the gateway in memory, counted by this test binary's own
//! allocator: the bytes allocated at the peak of the request and those still held after it,
//! as multiples of the body's size.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::{chat_history, client, config, start};
use ctxkeeper_alloc::counting::{self, Counting};
use ctxkeeper_gateway::limits::{BODY_BYTE_COST, PARSED_BYTE_COST};
use ctxkeeper_gateway::metrics::Metrics;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// An upstream that reads each request body chunk by chunk, keeping none of it, and answers
/// one short chat completion: the upstream's own cost stays out of the count.
async fn draining_upstream() -> String {
    use futures_util::StreamExt;
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|body: axum::body::Body| async move {
            let mut stream = body.into_data_stream();
            while let Some(chunk) = stream.next().await {
                chunk.unwrap();
            }
            axum::Json(json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "big",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
            }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// What one request cost: the peak and what stayed, in bytes above what was live before it.
#[derive(Debug, Clone, Copy)]
struct Cost {
    peak: usize,
    kept: usize,
}

async fn send(url: &str, body: Bytes, session: Option<&str>) -> Cost {
    counting::reset_peak();
    let before = counting::live();
    let mut request = client()
        .post(url)
        .header("authorization", "Bearer sk-body-memory-0123456789")
        .header("content-type", "application/json");
    if let Some(session) = session {
        request = request.header("x-ctxkeeper-session", session);
    }
    let answer = request.body(body).send().await.unwrap();
    assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
    answer.bytes().await.unwrap();
    // Whatever the request hands to other tasks to free has had its turn.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let after = counting::live();
    Cost {
        peak: counting::peak().saturating_sub(before),
        kept: after.saturating_sub(before),
    }
}

/// A chat request of about `bytes`, as an agent's long history is: many tool rounds.
fn large_body(bytes: usize) -> Bytes {
    let rounds = bytes / 20_000;
    let body = json!({"model": "big", "messages": chat_history(rounds, 20_000)});
    Bytes::from(serde_json::to_vec(&body).unwrap())
}

/// A chat request of about `bytes` that is one tool output.
fn one_output_body(bytes: usize) -> Bytes {
    let body = json!({"model": "big", "messages": chat_history(1, bytes)});
    Bytes::from(serde_json::to_vec(&body).unwrap())
}

fn multiple(bytes: usize, of: usize) -> f64 {
    bytes as f64 / of as f64
}

fn big_model_profiles() -> ctxkeeper_core::tokens::Profiles {
    ctxkeeper_core::tokens::Profiles::from_toml_str(
        r#"
        [models."big"]
        context_window = 100000000
        max_output = 1000
        tokenizer = "o200k_base"
        "#,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_costs_at_most_what_the_in_flight_cap_charges_for_it() {
    // Regression: a fresh 8 MiB history peaked at 8.5× its size (the body held through the
    // commit beside the step's saved copies, those serialized into doubling buffers) while
    // the in-flight cap counted 1×; 6.3× now, and the cap counts 8×.
    let upstream = draining_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir, &upstream);
    cfg.store_url = format!("sqlite://{}", dir.path().join("sessions.db").display());
    cfg.profiles = big_model_profiles();
    let gw = start(cfg).await;
    let url = gw.url("/v1/chat/completions");
    // Warm up: the runtime, the connection pool, the store.
    send(&url, large_body(100_000), None).await;

    let body = large_body(8 << 20);
    let size = body.len();
    // What the cap charges a body parsed in full.
    let charged = BODY_BYTE_COST + PARSED_BYTE_COST;
    for (what, session) in [("derived", None), ("named", Some("big-named"))] {
        let cost = send(&url, body.clone(), session).await;
        let (peak, kept) = (multiple(cost.peak, size), multiple(cost.kept, size));
        // Kept afterwards (printed, not judged: what is freed apart may still be on its
        // way): the warm session's context, and for a named session the record its next
        // request most likely resends (both bounded, SECURITY.md).
        eprintln!("{what} session: peak {peak:.2}x, kept {kept:.2}x");
        assert!(
            cost.peak <= charged * size,
            "{what} session: peak {peak:.2}× the body, charged {charged}×"
        );
    }
    // The same history resent: its known prefix is not parsed again.
    let resent = send(&url, body.clone(), Some("big-named")).await;
    let peak = multiple(resent.peak, size);
    eprintln!("named session, resent: peak {peak:.2}x");
    assert!(
        resent.peak <= BODY_BYTE_COST * size,
        "a resent history peaked at {peak:.2}× its size, charged {BODY_BYTE_COST}×"
    );
    // One tool output of the same size.
    let output = one_output_body(8 << 20);
    let cost = send(&url, output.clone(), Some("big-output")).await;
    let (peak, kept) = (
        multiple(cost.peak, output.len()),
        multiple(cost.kept, output.len()),
    );
    eprintln!("one tool output: peak {peak:.2}x, kept {kept:.2}x");
    assert!(
        cost.peak <= charged * output.len(),
        "one tool output: peak {peak:.2}× the body, charged {charged}×"
    );
    drop(output);
    drop(body);
    gw.stop().await;
}

/// An upstream that holds every chat call until `release` is notified, counting the calls
/// it holds.
async fn holding_upstream(release: Arc<tokio::sync::Notify>, held: Arc<AtomicUsize>) -> String {
    use futures_util::StreamExt;
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: axum::body::Body| {
            let (release, held) = (release.clone(), held.clone());
            async move {
                let mut stream = body.into_data_stream();
                while let Some(chunk) = stream.next().await {
                    chunk.unwrap();
                }
                let waiting = release.notified();
                held.fetch_add(1, Ordering::SeqCst);
                waiting.await;
                axum::Json(json!({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                    "model": "big", "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "ok"}}]
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_bodies_beyond_what_the_cap_can_hold_parsed_get_503() {
    // Regression: the cap counted received bytes only, so four 1 MiB bodies under a 20 MiB
    // cap were all parsed at once (each costing several times its size).
    let release = Arc::new(tokio::sync::Notify::new());
    let held = Arc::new(AtomicUsize::new(0));
    let upstream = holding_upstream(release.clone(), held.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir, &upstream);
    cfg.profiles = big_model_profiles();
    cfg.body_limit = 2 << 20;
    cfg.max_inflight_bytes = 20 << 20;
    let gw = start(cfg).await;
    let url = gw.url("/v1/chat/completions");
    let body = large_body(1 << 20);
    let cost = body.len() * (BODY_BYTE_COST + PARSED_BYTE_COST);
    let fit = (20 << 20) / cost;
    assert_eq!(fit, 2, "the cap holds two of these bodies parsed");

    let requests: Vec<_> = (0..4)
        .map(|i| {
            let request = client()
                .post(&url)
                .header("authorization", "Bearer sk-body-memory-0123456789")
                .header("content-type", "application/json")
                .header("x-ctxkeeper-session", format!("parallel-{i}"))
                .body(body.clone());
            tokio::spawn(async move { request.send().await.unwrap().status().as_u16() })
        })
        .collect();
    // The refused ones answer at once; the admitted ones wait at the upstream.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while held.load(Ordering::SeqCst) + requests.iter().filter(|r| r.is_finished()).count() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "the requests did not settle"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        held.load(Ordering::SeqCst),
        fit,
        "admitted: what the cap holds"
    );
    let charged = Metrics::get(&gw.gateway.metrics.inflight_body_bytes) as usize;
    assert_eq!(charged, fit * cost);
    release.notify_waiters();
    let mut statuses = Vec::new();
    for request in requests {
        statuses.push(request.await.unwrap());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, vec![200, 200, 503, 503]);
    assert_eq!(Metrics::get(&gw.gateway.metrics.inflight_body_bytes), 0);
    gw.stop().await;
}
