//! `ctxkeeper-mock-upstream`: the mock OpenAI/Anthropic API as a process, for end-to-end tests
//! and benchmarks.
//!
//! ```text
//! ctxkeeper-mock-upstream --listen 127.0.0.1:0 --window 8192 [--delay-ms 0] [--no-record]
//!                         [--script-steps N --script-output-bytes B]
//! ```
//!
//! Once bound it prints exactly one line on stdout, `listening on http://127.0.0.1:PORT`, so a
//! test harness can start it on port 0 and read the port back. Logs go to stderr
//! (`RUST_LOG=debug` logs every request).

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ctxkeeper_mock_upstream::{MockConfig, router};

/// A deterministic mock of the OpenAI and Anthropic APIs.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Context window requests are checked against, in tokens.
    #[arg(long, default_value_t = 128_000)]
    window: u64,
    /// Milliseconds to wait before each answer.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Milliseconds a summary request waits before its answer, on top of `--delay-ms`.
    #[arg(long, default_value_t = 0)]
    summary_delay_ms: u64,
    /// Answer `compaction_trigger` with one `compaction` item, as OpenAI's Responses API
    /// does (without it both item types are refused, as by an OpenAI-compatible server).
    #[arg(long)]
    native_compaction: bool,
    /// Answer every summary request with this error status (401, 500, 529…).
    #[arg(long, value_name = "STATUS")]
    summary_status: Option<u16>,
    /// State each model's window in the OpenAI model list (`max_model_len`, as vLLM does),
    /// with a `local-model` the model table does not know.
    #[arg(long)]
    list_windows: bool,
    /// Output budget reserved in the window when a request states none.
    #[arg(long, default_value_t = 64)]
    max_output_tokens: u64,
    /// Do not keep received requests (for benchmarks).
    #[arg(long)]
    no_record: bool,
    /// Drive real agents (Claude Code, Codex CLI, mini-swe-agent) and agent frameworks' loops
    /// (a `shell_command`, `exec_command` or `shell` tool): answer them with N shell commands
    /// in their own tool schema, then a final answer.
    #[arg(long, value_name = "N")]
    script_steps: Option<u32>,
    /// How many bytes each scripted command prints.
    #[arg(
        long,
        value_name = "B",
        default_value_t = 20_000,
        requires = "script_steps"
    )]
    script_output_bytes: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let config = MockConfig {
        window: args.window,
        delay: Duration::from_millis(args.delay_ms),
        record: !args.no_record,
        max_output_tokens: args.max_output_tokens,
        summary_delay: Duration::from_millis(args.summary_delay_ms),
        native_compaction: args.native_compaction,
        summary_status: args.summary_status,
        list_windows: args.list_windows,
        script: args.script_steps.filter(|steps| *steps > 0).map(|steps| {
            ctxkeeper_mock_upstream::Script {
                steps,
                output_bytes: args.script_output_bytes,
            }
        }),
    };
    // Load the tokenizers now, not during the first request.
    ctxkeeper_core::tokens::exact::warm_up();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let (router, _handle) = router(config.clone());
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on http://{addr}")?;
        stdout.flush()?;
    }
    tracing::info!(%addr, window = config.window, record = config.record, "mock upstream ready");
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("server error")?;
    Ok(())
}

/// Ctrl-C or SIGTERM (what a test harness sends on teardown).
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
