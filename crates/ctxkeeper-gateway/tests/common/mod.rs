//! Shared harness: a gateway in this process in front of the mock upstream (or any router).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ctxkeeper_core::tokens::Profiles;
use ctxkeeper_gateway::metrics::Metrics;
use ctxkeeper_gateway::router::Server;
use ctxkeeper_gateway::sessions::Sessions;
use ctxkeeper_gateway::{Gateway, GatewayConfig};
use ctxkeeper_mock_upstream::{MockConfig, MockServer};
use ctxkeeper_store::archive::Offloader;
use ctxkeeper_store::{HistoryPage, LogEntry, SessionKey, SessionStore};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::oneshot;

/// A small model whose window makes the default policy compact after a few tool rounds.
pub const SMALL_MODEL: &str = "mock-small";

pub fn profiles() -> Profiles {
    Profiles::from_toml_str(
        r#"
        [models."mock-small"]
        context_window = 4000
        max_output = 256
        tokenizer = "o200k_base"
        "#,
    )
    .unwrap()
}

/// A running gateway.
pub struct Running {
    pub addr: SocketAddr,
    pub gateway: Arc<Gateway>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The newest `last` entries of a session's log in the gateway's store.
    pub async fn log(&self, key: &SessionKey, last: usize) -> Vec<LogEntry> {
        self.gateway
            .sessions
            .store()
            .history(key, HistoryPage::last(last))
            .await
            .unwrap()
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The configuration tests start from: upstreams at `upstream` (an `http://ADDR`).
pub fn config(dir: &TempDir, upstream: &str) -> GatewayConfig {
    let mut config = GatewayConfig::new(dir.path());
    config.upstream = format!("{upstream}/v1");
    config.anthropic_upstream = upstream.to_string();
    config.store_url = "memory://".into();
    config.profiles = profiles();
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.upstream_timeout = Duration::from_secs(20);
    // Summary calls would be among the mock's recorded requests; tests/summaries.rs covers
    // them, the others count only the agent's requests.
    config.summarizer =
        ctxkeeper_gateway::summarize::SummarizerChoice::parse("extractive", None, None).unwrap();
    config
}

/// Starts a gateway with its own store and archive.
pub async fn start(config: GatewayConfig) -> Running {
    let gateway = Gateway::open(config).await.unwrap();
    run(gateway).await
}

/// Starts a gateway over a given store and archive (several gateways may share them).
pub async fn start_shared(
    config: GatewayConfig,
    store: Arc<dyn SessionStore>,
    archive: Arc<dyn Offloader>,
) -> Running {
    let metrics = Arc::new(Metrics::default());
    let sessions = Sessions::for_gateway(store, archive, &config).with_metrics(metrics.clone());
    let gateway = Gateway::with_sessions(config, sessions, metrics).unwrap();
    run(gateway).await
}

async fn run(gateway: Arc<Gateway>) -> Running {
    let server = Server::bind_gateway(gateway.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = server.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .run(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Running {
        addr,
        gateway,
        stop: Some(stop),
        task: Some(task),
    }
}

/// A mock upstream with the given window.
pub async fn mock(window: u64) -> MockServer {
    ctxkeeper_mock_upstream::spawn(MockConfig {
        window,
        ..MockConfig::default()
    })
    .await
    .unwrap()
}

/// A mock upstream with the given window, a directory for the gateway's files and the
/// test configuration pointing at both.
pub async fn mock_and_config(window: u64) -> (MockServer, TempDir, GatewayConfig) {
    let upstream = mock(window).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir, &upstream.anthropic_base_url());
    (upstream, dir, config)
}

/// A gateway in the test configuration in front of a mock upstream with the given window.
pub async fn mock_and_gateway(window: u64) -> (MockServer, TempDir, Running) {
    let (upstream, dir, config) = mock_and_config(window).await;
    (upstream, dir, start(config).await)
}

/// The test configuration with the summarizer `serve` uses by default (the request's own
/// upstream), a 6,000-token model `sum-model` and a policy that only summarizes.
pub fn summarizing_config(dir: &TempDir, upstream: &str) -> GatewayConfig {
    let mut cfg = config(dir, upstream);
    // What `serve` does by default (the shared test configuration pins extractive).
    cfg.summarizer = GatewayConfig::new(dir.path()).summarizer;
    cfg.profiles = Profiles::from_toml_str(
        "[models.\"sum-model\"]\ncontext_window = 6000\ntokenizer = \"o200k_base\"\n",
    )
    .unwrap();
    cfg.policy = cfg
        .policy
        .with_overrides("stages = [{ kind = \"summarize\" }]")
        .unwrap();
    cfg
}

/// A mock upstream with a 60,000-token window (otherwise as `mock` says) and the summarizing
/// configuration in front of it.
pub async fn summarizing(mock: MockConfig) -> (MockServer, TempDir, GatewayConfig) {
    let upstream = mock_with(MockConfig {
        window: 60_000,
        ..mock
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = summarizing_config(&dir, &upstream.anthropic_base_url());
    (upstream, dir, cfg)
}

/// A mock upstream with the given configuration.
pub async fn mock_with(config: MockConfig) -> MockServer {
    ctxkeeper_mock_upstream::spawn(config).await.unwrap()
}

/// A Chat Completions request to the gateway with these headers.
pub async fn post_chat(gw: &Running, headers: &[(&str, &str)], body: &Value) -> reqwest::Response {
    let mut request = client().post(gw.url("/v1/chat/completions")).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Sends `history` as a `gpt-4o` Chat Completions request with these headers, and asserts
/// that the gateway answered it.
pub async fn send_chat(gw: &Running, headers: &[(&str, &str)], history: &[Value]) {
    let response = post_chat(
        gw,
        headers,
        &json!({"model": "gpt-4o", "messages": history}),
    )
    .await;
    assert!(
        response.status().is_success(),
        "{}",
        response.text().await.unwrap()
    );
}

/// Sends `request` and reads its answer's JSON body.
pub async fn json_of<T: serde::de::DeserializeOwned>(request: reqwest::RequestBuilder) -> T {
    request.send().await.unwrap().json().await.unwrap()
}

/// The JSON body of an error answer and its `error.message`.
pub async fn error_message(response: reqwest::Response) -> (Value, String) {
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap().to_string();
    (body, message)
}

/// Whether the gateway says it compacted the context for this answer.
pub fn compacted(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get("x-ctxkeeper-compacted")
        .is_some_and(|v| v == "true")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// An OpenAI chat conversation of `rounds` tool rounds, each result `result_bytes` long.
pub fn chat_history(rounds: usize, result_bytes: usize) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": "Fix the rounding bug in invoice totals."}),
    ];
    for i in 0..rounds {
        let id = format!("call_{i}");
        messages.push(json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/f{i}.rs\"}}")}}]
        }));
        messages
            .push(json!({"role": "tool", "tool_call_id": id, "content": filler(i, result_bytes)}));
    }
    messages
}

/// An Anthropic tool loop as Claude Code sends it on call `steps`: the user's task, then
/// `steps` Bash calls (`command` of the step) each answered by `output_bytes` of output, with
/// a cache marker on the last block of the newest message only (it moves every call).
pub fn anthropic_tool_loop(
    steps: usize,
    output_bytes: usize,
    command: impl Fn(usize) -> String,
) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": [
        {"type": "text", "text": "Fix the failing invoice test."}]})];
    for i in 0..steps {
        let id = format!("toolu_{i:04}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": command(i)}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": filler(i, output_bytes)}]}));
    }
    let last = messages.last_mut().unwrap();
    let blocks = last["content"].as_array_mut().unwrap();
    blocks.last_mut().unwrap()["cache_control"] = json!({"type": "ephemeral"});
    messages
}

/// Deterministic, varied text (so compression and token counts behave like real output).
pub fn filler(seed: usize, bytes: usize) -> String {
    let words = [
        "invoice", "total", "round", "cents", "amount", "ledger", "tax", "line", "sum", "value",
        "customer", "order", "price", "discount", "currency", "balance",
    ];
    let mut out = String::with_capacity(bytes + 16);
    let mut i = seed;
    while out.len() < bytes {
        out.push_str(words[i % words.len()]);
        out.push_str(if i.is_multiple_of(11) { ".\n" } else { " " });
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    out.truncate(bytes);
    out
}

/// Every file under `dir` whose name satisfies `keep`.
pub fn files_under(dir: &Path, keep: &dyn Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path, keep));
        } else if path.file_name().and_then(|n| n.to_str()).is_some_and(keep) {
            out.push(path);
        }
    }
    out
}

/// A name no other run of the tests uses (for stores shared across runs, such as a database).
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

pub fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "read_file", "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}])
}
