//! The gateway with `/mcp` mounted, as `ctxkeeper serve` runs it, against clients that open
//! connections and then stall: every connection, on every route and both HTTP versions, is
//! closed within the configured deadlines.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxkeeper_gateway::GatewayConfig;
use ctxkeeper_gateway::router::Server;
use ctxkeeper_mcp::{ServerConfig, Services, TenantEndpoint, TenantRefusal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DEADLINE: Duration = Duration::from_secs(1);
const ADMIN: &str = "admin-token-0123456789";

async fn serve(dir: &std::path::Path) -> SocketAddr {
    let mut config = GatewayConfig::new(dir);
    config.store_url = "memory://".into();
    config.upstream = "http://127.0.0.1:9/v1".into();
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.header_timeout = DEADLINE;
    config.body_timeout = DEADLINE;
    config.admin_token = Some(ADMIN.into());
    let server = Server::bind(config).await.unwrap();
    let gateway = server.gateway().clone();
    let services = Services::over_store(
        gateway.sessions.store().clone(),
        gateway.sessions.archive().clone(),
        &gateway.config.workspace,
    )
    .await
    .unwrap();
    // The default tenant, policy and model, in an 8,000-token window.
    let options = ServerConfig {
        window: Some(8_000),
        ..ServerConfig::new("memory://", dir)
    }
    .options()
    .unwrap();
    let rule = gateway.config.tenants.clone();
    let resolve = Arc::new(move |headers: &axum::http::HeaderMap| {
        rule.resolve(headers)
            .map_err(|e| TenantRefusal::forbidden(e.to_string()))
    });
    let endpoint = TenantEndpoint::new(services, options, &[], resolve).unwrap();
    let server = server.merge(endpoint.router());
    let addr = server.local_addr();
    tokio::spawn(server.run(std::future::pending()));
    addr
}

/// What each stalled client sends before it goes quiet.
fn stalls() -> Vec<(&'static str, Vec<u8>)> {
    let send = |method: &str, path: &str, extra: &str| {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{extra}Content-Length: 1000\r\n\r\n{{\"a\":"
        )
        .into_bytes()
    };
    let post = |path: &str, extra: &str| send("POST", path, extra);
    vec![
        ("nothing at all", Vec::new()),
        ("half an HTTP/2 preface", b"PRI * HTTP/2.0\r\n".to_vec()),
        (
            "an HTTP/2 preface, then silence",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        ),
        ("half a request line", b"POST /mcp HTT".to_vec()),
        ("/mcp without a key", post("/mcp", "")),
        (
            "/mcp with a key",
            post("/mcp", "Authorization: Bearer sk-stall-0123456789\r\n"),
        ),
        ("/ui/login", post("/ui/login", "")),
        (
            "PATCH policy without a token",
            send("PATCH", "/admin/sessions/s1/policy", ""),
        ),
        (
            "PATCH policy with the admin token",
            send(
                "PATCH",
                "/admin/sessions/s1/policy",
                &format!("Authorization: Bearer {ADMIN}\r\n"),
            ),
        ),
        ("a model call", post("/v1/chat/completions", "")),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_on_every_route_are_closed_within_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let addr = serve(dir.path()).await;
    const PER_ROUTE: usize = 60;
    let mut clients = Vec::new();
    for (what, bytes) in stalls() {
        for _ in 0..PER_ROUTE {
            let bytes = bytes.clone();
            clients.push(tokio::spawn(async move {
                let started = Instant::now();
                let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                stream.write_all(&bytes).await.unwrap();
                let mut answer = Vec::new();
                // The bound tells "closed by a deadline" from "held open", not how soon: the
                // server's clock starts when it accepts, and with 600 connections opened at
                // once on a loaded machine that can be seconds after the client's connect
                // returned (a client that sends nothing cannot hurry a handshake the kernel
                // finishes late). Without the deadlines these connections never close.
                let closed = tokio::time::timeout(
                    DEADLINE * 2 + Duration::from_secs(15),
                    stream.read_to_end(&mut answer),
                )
                .await;
                (what, closed.is_ok(), started.elapsed(), answer)
            }));
        }
    }
    let mut open = Vec::new();
    for client in clients {
        let (what, closed, elapsed, answer) = client.await.unwrap();
        if !closed {
            open.push((what, elapsed));
        }
        if what == "PATCH policy without a token" {
            // Refused before its body: a server that waited for the body would have answered
            // its deadline (408) instead. (How soon is the benchmark's business: under load
            // the answer may take longer than the deadline itself.)
            let answer = String::from_utf8_lossy(&answer);
            assert!(
                answer.starts_with("HTTP/1.1 401"),
                "{what}: {answer} after {elapsed:?}"
            );
        }
    }
    assert!(open.is_empty(), "still open past the deadline: {open:?}");
}
