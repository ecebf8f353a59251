//! A deterministic stand-in for the OpenAI and Anthropic APIs, for tests and benchmarks.
//!
//! No real model is reachable in tests, so this server behaves like the real providers
//! everywhere except in what it says: the same endpoints (`/v1/chat/completions`,
//! `/v1/responses`, `/v1/messages`, `/v1/models`), the same JSON and server-sent-event shapes,
//! the same 400s for broken tool-call pairing, the same 401 without a key, and the same
//! context-overflow errors when a request does not fit the configured window. Its answers are
//! deterministic:
//!
//! - with tools declared (and `tool_choice` not "none"): one call to the first tool (or the one
//!   `tool_choice` names), arguments `{"step": <tool results in the request>}`, id `call_<n>` /
//!   `toolu_<n>`, unique per request;
//! - otherwise the text `mock reply <n>`, `n` being the number of messages in the request;
//! - with a [`Script`] configured, requests from a known agent's loop (Claude Code, Codex CLI,
//!   mini-swe-agent, or an agent framework's loop declaring Codex's shell tools) are answered
//!   by the script instead: shell commands with large outputs in
//!   that agent's own tool schema, then a final answer (see [`Script`]), so a test can drive
//!   the real agents.
//!
//! Usage is reported in each provider's shape, with a simulated prompt cache: the cached
//! tokens are those of the longest prefix (tool schemas, then whole messages) that an earlier
//! accepted request with the same model and key already sent. Input tokens are counted with
//! ctxkeeper-core's model profiles (exact o200k/cl100k for OpenAI models); the validation is
//! written here, independently of ctxkeeper-core's own checks, so the mock is a second opinion
//! on what ctxkeeper emits.
//!
//! A request is over the window when its input plus its output budget (the `max_tokens` it
//! states, else [`MockConfig::max_output_tokens`]) exceeds the window: Anthropic's rule, which
//! answers `input length and max_tokens exceed context limit: I + M > W` when the input alone
//! fits. A streamed Responses
//! request then gets a 200 stream that carries the error as an `error` event, as the real API
//! does; every other request gets the provider's 400.
//!
//! ```
//! use ctxkeeper_mock_upstream::{MockConfig, spawn};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let mock = spawn(MockConfig { window: 8192, ..MockConfig::default() }).await?;
//! assert!(mock.openai_base_url().ends_with("/v1"));
//! // Point a client (or the gateway) at mock.openai_base_url() / mock.anthropic_base_url(),
//! // then look at what arrived:
//! assert!(mock.requests().is_empty());
//! mock.shutdown().await;
//! # Ok::<(), std::io::Error>(())
//! # }).unwrap();
//! ```
//!
//! Out of process, the `ctxkeeper-mock-upstream` binary serves the same router and adds the
//! control endpoints `GET /mock/requests`, `POST /mock/reset` and `POST /mock/config`
//! (`{"window": N}`, `{"script": {"steps": N, "output_bytes": B}}`), which the in-process
//! router serves too.

mod errors;
mod reply;
mod script;
mod server;
mod state;
mod validate;
mod wire;

use std::net::SocketAddr;
use std::time::Duration;

pub use script::{Script, command as script_command, marker as script_marker};
pub use state::{MockHandle, RECORD_CAPACITY, RecordedRequest};

/// How the mock behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockConfig {
    /// The context window every request is checked against, in tokens.
    pub window: u64,
    /// How long to wait before answering (0 for overhead benchmarks).
    pub delay: Duration,
    /// Whether to keep the last [`RECORD_CAPACITY`] requests for [`MockServer::requests`].
    pub record: bool,
    /// The output budget reserved in the window when a request states none.
    pub max_output_tokens: u64,
    /// A scripted agent run to answer known agents' loops with (`None`: the plain answers).
    pub script: Option<Script>,
    /// How long a summary request (a gateway's summary instruction) waits before its answer,
    /// on top of `delay`: a model writing a summary is slower than one answering a step.
    pub summary_delay: Duration,
    /// Server-side compaction as OpenAI's Responses API does it: a request whose last input
    /// item is `{"type": "compaction_trigger"}` is answered with exactly one `compaction`
    /// item, and `compaction` items are accepted in input. Off: both are refused with
    /// OpenAI's "Invalid value" error, as an OpenAI-compatible server without them does.
    pub native_compaction: bool,
    /// Answer every summary request with this error status (401, 500, 529…) in the
    /// provider's words: a summarizer outage while the agent's own requests succeed.
    pub summary_status: Option<u16>,
    /// The OpenAI-shaped model list states each model's window (`max_model_len`, as vLLM
    /// does), and lists a local model the model table does not know (`local-model`).
    pub list_windows: bool,
}

impl Default for MockConfig {
    fn default() -> MockConfig {
        MockConfig {
            window: 128_000,
            delay: Duration::ZERO,
            record: true,
            max_output_tokens: 64,
            script: None,
            summary_delay: Duration::ZERO,
            native_compaction: false,
            summary_status: None,
            list_windows: false,
        }
    }
}

/// The router and a handle on its state, to serve the mock on a listener of your own.
pub fn router(config: MockConfig) -> (axum::Router, MockHandle) {
    let handle = MockHandle {
        shared: std::sync::Arc::new(state::Shared::new(&config)),
    };
    (server::build(handle.clone()), handle)
}

/// A mock running on a local port, in this process.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    handle: MockHandle,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

/// Starts a mock on `127.0.0.1` on a free port.
pub async fn spawn(config: MockConfig) -> std::io::Result<MockServer> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    serve_on(listener, config)
}

/// Starts a mock on a listener you bound.
pub fn serve_on(
    listener: tokio::net::TcpListener,
    config: MockConfig,
) -> std::io::Result<MockServer> {
    let addr = listener.local_addr()?;
    let (router, handle) = router(config);
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                // Either an explicit shutdown or the MockServer being dropped ends the server.
                let _ = stopped.await;
            })
            .await
    });
    Ok(MockServer {
        addr,
        handle,
        shutdown: Some(shutdown),
        task: Some(task),
    })
}

impl MockServer {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL an OpenAI client takes: `http://ADDR/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The base URL an Anthropic client takes: `http://ADDR`.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Everything received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.handle.requests()
    }

    /// Changes the context window for later requests.
    pub fn set_window(&self, tokens: u64) {
        self.handle.set_window(tokens);
    }

    /// A handle on the server's state that outlives borrows of the server.
    pub fn handle(&self) -> MockHandle {
        self.handle.clone()
    }

    /// Stops accepting connections and waits for open ones to finish.
    pub async fn shutdown(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take()
            && let Ok(Err(error)) = task.await
        {
            tracing::warn!(%error, "mock upstream stopped with an error");
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}
