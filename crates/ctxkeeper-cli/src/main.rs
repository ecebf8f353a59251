//! `ctxkeeper`: the command-line face of the context engine.
//!
//! The binary is glue: it reads files, parses arguments and prints reports; every decision is
//! made by the library crates.

mod config_cmd;
mod inspect;
mod mcp;
mod replay;
mod serve;
mod sessions;
mod summarizers;
mod trace_input;
mod ui;
mod wrap;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::trace_input::InputError;

/// mimalloc instead of the system allocator (why, and how `serve` gets its freed memory back:
/// `ctxkeeper_alloc`).
#[global_allocator]
static ALLOCATOR: ctxkeeper_alloc::Allocator = ctxkeeper_alloc::Allocator;

/// ctxkeeper keeps long-running LLM agents inside their context window: it compacts history
/// cheapest-first, archives whatever leaves the context, and reports what every model call
/// costs.
#[derive(Debug, Parser)]
#[command(name = "ctxkeeper", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Summarise a trace: messages by role, tool calls, tokens by role and part kind, the
    /// largest items and every provider-rule violation.
    Inspect(inspect::InspectArgs),
    /// Replay a trace as the agent lived it (one model call per assistant message) and report
    /// tokens, window overflows, violations and engine time.
    Replay(replay::ReplayArgs),
    /// Inspect and maintain stored sessions: list, tenants, show, history, search, clear, gc,
    /// restore.
    Sessions(sessions::SessionsArgs),
    /// Serve the retrieval tools over MCP (stdio, or streamable HTTP with --listen) so an
    /// agent can search and read back what was compacted away.
    Mcp(mcp::McpArgs),
    /// Run the gateway: OpenAI- and Anthropic-compatible endpoints in front of any upstream
    /// that keep every agent's context inside its window.
    Serve(Box<serve::ServeArgs>),
    /// Run an unmodified agent (claude, codex, mini, or any OpenAI/Anthropic SDK program)
    /// through the gateway: a running one (--gateway) or one started for the agent's
    /// lifetime. Exits with the agent's exit code.
    Wrap(Box<wrap::WrapArgs>),
    /// Show or validate the settings `serve` would run with (file, environment and flags).
    Config(config_cmd::ConfigArgs),
    /// Serve the web console (sessions, compactions, archived content, totals) over a store
    /// and its archive, without a gateway.
    Ui(ui::UiArgs),
}

/// Options shared by commands that read a trace.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The trace file: tau-bench JSON, SWE-agent .traj, OpenHands output, Claude Code or Codex
    /// JSONL, or a bare OpenAI / Anthropic / Responses request body.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,

    /// The trace format; `auto` detects it from the content.
    #[arg(long, default_value = "auto", value_name = "FORMAT")]
    pub format: String,

    /// Join all sessions of the trace into one (the 200 tau-bench tasks become one long
    /// session).
    #[arg(long)]
    pub concat: bool,

    /// The model whose tokenizer and window apply (default: the trace's own model, else
    /// gpt-4o).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,

    /// A TOML file: `[models."NAME"]` tables override or add model profiles; a `[policy]`
    /// table overrides the chosen policy's settings.
    #[arg(long, value_name = "FILE", env = "CTXKEEPER_CONFIG")]
    pub config: Option<PathBuf>,

    /// Print one JSON object to stdout instead of the human report.
    #[arg(long)]
    pub json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Inspect(args) => inspect::run(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Sessions(args) => sessions::run(&args),
        Command::Mcp(args) => mcp::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Config(args) => config_cmd::run(&args),
        Command::Ui(args) => ui::run(&args),
        Command::Wrap(args) => match wrap::run(&args) {
            Ok(code) => return code,
            Err(err) => Err(err),
        },
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line, so scripts and people see the file and position at once.
            let code = match err.downcast_ref::<InputError>() {
                Some(_) => 2,
                None => 1,
            };
            eprintln!("error: {}", error_line(&err));
            ExitCode::from(code)
        }
    }
}

/// The error and its causes on one line, outermost first. A cause whose text the message
/// already quotes is not repeated: library errors name their cause in their own message and
/// also keep it as `source()`.
pub(crate) fn error_line(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    one_line(&text)
}

/// Logs to stderr at `default` (a `tracing` filter) unless `RUST_LOG` says otherwise.
fn log_to_stderr(default: &str) {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .init();
}

/// Collapses a multi-line message into one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod error_line_tests {
    use super::error_line;

    /// Names its cause in its message and keeps it as the source, as library errors do.
    #[derive(Debug)]
    struct Quoting(std::io::Error);

    impl std::fmt::Display for Quoting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot open the store x.db: {}", self.0)
        }
    }

    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_the_message_already_quotes_is_printed_once() {
        let io = std::io::Error::other("disk on fire");
        let err = anyhow::Error::new(Quoting(io)).context("serve failed");
        assert_eq!(
            error_line(&err),
            "serve failed: cannot open the store x.db: disk on fire"
        );
    }

    #[test]
    fn a_cause_the_message_does_not_quote_is_added() {
        let err = anyhow::anyhow!("disk on fire").context("cannot open\n  the store");
        assert_eq!(error_line(&err), "cannot open the store: disk on fire");
    }
}
