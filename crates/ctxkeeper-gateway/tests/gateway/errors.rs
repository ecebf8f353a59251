//! Bad requests and failing upstreams, each answered in the client's own error shape.

use super::*;
use crate::common::error_message;

#[tokio::test]
async fn bodies_over_the_limit_get_413_in_the_clients_error_shape() {
    let (upstream, _dir, mut cfg) = mock_and_config(128_000).await;
    cfg.body_limit = 4096;
    let gw = start(cfg).await;
    let big = json!({"model": "gpt-4o", "max_tokens": 10, "messages": [{"role": "user", "content": "x".repeat(8000)}]});
    let openai = post(&gw.url("/v1/chat/completions"), None, &big).await;
    assert_eq!(openai.status(), 413);
    let body: Value = openai.json().await.unwrap();
    assert_eq!(body["error"]["code"], "request_too_large");
    let anthropic = post(&gw.url("/v1/messages"), None, &big).await;
    assert_eq!(anthropic.status(), 413);
    let body: Value = anthropic.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "request_too_large");
    // Without a content-length (chunked upload) the limit holds too.
    let chunks = futures_util::stream::iter(
        (0..4).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 2048]))),
    );
    let chunked = client()
        .post(gw.url("/v1/chat/completions"))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(chunked.status(), 413);
    assert!(
        upstream.requests().is_empty(),
        "nothing oversized went upstream"
    );
}

#[tokio::test]
async fn malformed_requests_get_400_in_the_clients_error_shape() {
    let (upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("/v1/chat/completions", b"{\"model\": \"gpt-4o\", \"messages\": [".to_vec(), "malformed JSON"),
        ("/v1/messages", b"not json".to_vec(), "malformed JSON"),
        (
            "/v1/chat/completions",
            serde_json::to_vec(&json!({"model": "gpt-4o", "messages": [{"role": "narrator", "content": "hi"}]})).unwrap(),
            "role",
        ),
        (
            "/v1/chat/completions",
            serde_json::to_vec(&json!({"model": "gpt-4o", "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "user", "content": "where is the result?"}]})).unwrap(),
            "pairing",
        ),
        (
            "/v1/messages",
            serde_json::to_vec(&json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "orphan"}]}]})).unwrap(),
            "pairing",
        ),
    ];
    for (path, body, needle) in cases {
        let response = client()
            .post(gw.url(path))
            .header("authorization", KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{path} {needle}");
        let body: Value = response.json().await.unwrap();
        if path == "/v1/messages" {
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], "invalid_request_error");
            assert!(
                body["error"]["message"].as_str().unwrap().contains(needle),
                "{body}"
            );
        } else {
            assert_eq!(body["error"]["type"], "invalid_request_error");
            assert!(
                body["error"]["message"].as_str().unwrap().contains(needle),
                "{body}"
            );
        }
    }
    assert!(
        upstream.requests().is_empty(),
        "nothing malformed went upstream"
    );
}

#[tokio::test]
async fn hostile_session_and_tenant_ids_are_refused_never_used_as_paths() {
    let (upstream, dir, mut cfg) = mock_and_config(128_000).await;
    cfg.store_url = format!("file://{}", dir.path().join("store").display());
    let gw = start(cfg).await;
    for (name, value) in [
        ("x-ctxkeeper-session", "../../x"),
        ("x-ctxkeeper-session", "a/b"),
        ("x-ctxkeeper-tenant", "../etc"),
        ("x-ctxkeeper-tenant", "a/b"),
    ] {
        let response = client()
            .post(gw.url("/v1/chat/completions"))
            .header("authorization", KEY)
            .header(name, value)
            .json(&json!({"model": "gpt-4o", "messages": chat_history(1, 50)}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{name}: {value}");
        let (body, message) = error_message(response).await;
        assert!(message.contains("must be"), "{body}");
    }
    assert!(upstream.requests().is_empty());
    assert!(!dir.path().parent().unwrap().join("x").exists());
    let events = client()
        .get(gw.url("/v1/sessions/..%2F..%2Fx/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 400);
}

#[tokio::test]
async fn a_slow_upstream_answers_504_in_the_clients_error_shape() {
    let upstream = mock_with(ctxkeeper_mock_upstream::MockConfig {
        delay: Duration::from_secs(3),
        ..Default::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir, &upstream.anthropic_base_url());
    cfg.upstream_timeout = Duration::from_millis(300);
    let gw = start(cfg).await;
    let response = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "sk-ant")
        .json(&json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 504);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "timeout_error");
}

#[tokio::test]
async fn an_unreachable_upstream_answers_502_naming_the_url_and_the_cause() {
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let gw = start(config(
        &dir,
        &format!("http://user:pw-SECRET@127.0.0.1:{port}"),
    ))
    .await;
    let response = client()
        .post(gw.url("/v1/chat/completions?api-key=q-SECRET"))
        .header("authorization", KEY)
        .json(&json!({"model": "gpt-4o", "messages": chat_history(1, 50)}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    let (_body, message) = error_message(response).await;
    assert!(
        message.contains(&format!("http://127.0.0.1:{port}/v1/chat/completions")),
        "{message}"
    );
    assert!(message.contains("connection refused"), "{message}");
    assert!(!message.contains("SECRET"), "{message}");
}
