//! Findings of the second hardening round that are neither bounds nor deadlines: a stream cut
//! after its role chunk is an error (never an empty reply), and refusals carry no workspace
//! path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{client, config, mock_and_gateway, start};
use ctxkeeper_gateway::tenancy::TenantRule;
use ctxkeeper_store::SessionKey;
use serde_json::{Value, json};

const KEY: &str = "Bearer sk-findings-0123456789";

fn key_tenant() -> String {
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("authorization", KEY.parse().unwrap());
    TenantRule::default().resolve(&headers).unwrap()
}

/// An upstream that answers every chat call with a stream of its role chunk only, then ends
/// (`cut_abruptly`: breaks the connection instead of ending the body cleanly).
async fn role_chunk_then_cut(cut_abruptly: bool) -> String {
    use axum::body::Body;
    use futures_util::stream;
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || async move {
            let role = bytes::Bytes::from_static(
                b"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
            );
            let mut chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![Ok(role)];
            if cut_abruptly {
                chunks.push(Err(std::io::Error::other("connection reset")));
            }
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream::iter(chunks)))
                .unwrap()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A chat stream cut right after its role chunk: the client gets an error (never an empty
/// reply) and the step is not committed.
#[tokio::test]
async fn a_chat_stream_cut_after_its_role_chunk_is_an_error_and_commits_nothing() {
    for cut_abruptly in [false, true] {
        let upstream = role_chunk_then_cut(cut_abruptly).await;
        let dir = tempfile::tempdir().unwrap();
        let gw = start(config(&dir, &upstream)).await;
        let response = client()
            .post(gw.url("/v1/chat/completions"))
            .header("authorization", KEY)
            .header("x-ctxkeeper-session", "cut")
            .json(&json!({"model": "gpt-4o", "stream": true,
                          "messages": [{"role": "user", "content": "hello"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 502, "cut abruptly: {cut_abruptly}");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"]["message"].is_string(), "{body}");
        let key = SessionKey::new(key_tenant(), "default", "default", "cut").unwrap();
        let log = gw.log(&key, 100).await;
        assert!(log.is_empty(), "the cut step was committed: {log:?}");
    }
}

/// A symbolic link planted in the workspace where a session's archive goes is refused, and
/// the client's error names no path of the workspace.
#[tokio::test]
async fn a_refused_planted_link_answers_without_a_workspace_path() {
    let (_upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let workspace = gw.gateway.config.workspace_dir().unwrap();
    let sessions = workspace
        .join("tenants")
        .join(key_tenant())
        .join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), sessions.join("planted")).unwrap();
    let mut refused = None;
    for rounds in 1..=24 {
        let response = client()
            .post(gw.url("/v1/chat/completions"))
            .header("authorization", KEY)
            .header("x-ctxkeeper-session", "planted")
            .json(&json!({"model": common::SMALL_MODEL,
                          "messages": common::chat_history(rounds, 700),
                          "tools": common::tools()}))
            .send()
            .await
            .unwrap();
        if response.status() != 200 {
            refused = Some((response.status(), response.text().await.unwrap()));
            break;
        }
    }
    let (status, body) = refused.expect("the archive write into the planted link was refused");
    assert!(status.is_server_error(), "{status}");
    let shown = workspace.display().to_string();
    for leak in [
        shown.as_str(),
        "tenants/",
        "sessions/planted",
        "symbolic link",
    ] {
        assert!(!body.contains(leak), "{leak:?} in {body}");
    }
    assert!(
        std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none()
    );
}
