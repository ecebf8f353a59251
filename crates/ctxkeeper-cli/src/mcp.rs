//! `ctxkeeper mcp`: the MCP server over stdio, or over streamable HTTP with `--listen`.
//!
//! Over stdio, stdout carries only protocol messages and everything this command reports goes
//! to stderr. Over HTTP, the one stdout line is `listening on http://ADDR/mcp`, printed once the
//! port is bound (`--listen 127.0.0.1:0` picks a free port).

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;
use ctxkeeper_mcp::ServerConfig;

use crate::trace_input::InputError;

/// Arguments of `ctxkeeper mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The session store to read (sqlite://PATH, postgres://…, mysql://…, redis://…,
    /// file://DIR).
    #[arg(long, value_name = "URL", env = "CTXKEEPER_STORE")]
    pub store: String,

    /// The workspace holding the archive (the directory `replay --workspace` wrote).
    #[arg(long, value_name = "DIR")]
    pub workspace: PathBuf,

    /// The only tenant the tools may see.
    #[arg(long, default_value = "default", value_name = "TENANT")]
    pub tenant: String,

    /// Confine every tool to this session (a `session` argument naming another is refused).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,

    /// Long-term memory directory (MEMORY.md, memory/*.md); default: the workspace.
    #[arg(long, value_name = "DIR")]
    pub memory_dir: Option<PathBuf>,

    /// The policy the `compact` tool runs.
    #[arg(long, default_value = "default", value_name = "POLICY")]
    pub policy: String,

    /// The model whose tokenizer and window budgets are measured with.
    #[arg(long, default_value = "gpt-4o", value_name = "MODEL")]
    pub model: String,

    /// The context window in tokens (default: the model's).
    #[arg(long, value_name = "TOKENS")]
    pub window: Option<u64>,

    /// Who writes the `compact` tool's summaries: `extractive` (default, no model), `openai`
    /// or `anthropic` (key from CTXKEEPER_SUMMARIZER_API_KEY, else OPENAI_API_KEY /
    /// ANTHROPIC_API_KEY). A failed summary falls back to the extractive one.
    #[arg(long, default_value = "extractive", value_name = "KIND")]
    pub summarizer: String,

    /// The summary model of an `openai` or `anthropic` summarizer.
    #[arg(long, value_name = "MODEL")]
    pub summarizer_model: Option<String>,

    /// The base URL of an `openai` or `anthropic` summarizer.
    #[arg(long, value_name = "URL")]
    pub summarizer_url: Option<String>,

    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// A Host header to accept over HTTP besides localhost, 127.0.0.1 and ::1 (repeatable);
    /// needed when clients reach the server by another name.
    #[arg(long = "allow-host", value_name = "HOST", requires = "listen")]
    pub allow_hosts: Vec<String>,
}

/// Runs the command.
pub fn run(args: &McpArgs) -> Result<()> {
    let config = ServerConfig {
        store: args.store.clone(),
        workspace: args.workspace.clone(),
        tenant: args.tenant.clone(),
        session: args.session.clone(),
        memory_dir: args.memory_dir.clone(),
        policy: args.policy.clone(),
        model: args.model.clone(),
        window: args.window,
        summarizer: Some(crate::summarizers::build(
            &args.summarizer,
            args.summarizer_url.as_deref(),
            args.summarizer_model.as_deref(),
        )?),
    };
    // Bad options are input errors (exit code 2), found before any backend is opened.
    config
        .options()
        .map_err(|e| InputError::BadOption(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let server = config.open().await?;
        match &args.listen {
            None => {
                eprintln!(
                    "ctxkeeper mcp: serving tenant {:?}{} over stdio",
                    args.tenant,
                    session_note(args)
                );
                ctxkeeper_mcp::serve_stdio(server).await?;
            }
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr.as_str())
                    .await
                    .map_err(|e| InputError::BadOption(format!("--listen {addr}: {e}")))?;
                let bound = listener
                    .local_addr()
                    .with_context(|| format!("--listen {addr}"))?;
                eprintln!(
                    "ctxkeeper mcp: serving tenant {:?}{} over streamable HTTP",
                    args.tenant,
                    session_note(args)
                );
                // Over HTTP stdout carries no protocol: the ready line goes there, where
                // scripts and the other servers' users look for it.
                println!("listening on http://{bound}/mcp");
                std::io::Write::flush(&mut std::io::stdout()).context("stdout")?;
                ctxkeeper_mcp::serve_http(server, listener, &args.allow_hosts).await?;
            }
        }
        Ok(())
    })
}

fn session_note(args: &McpArgs) -> String {
    match &args.session {
        Some(session) => format!(", session {session:?}"),
        None => String::new(),
    }
}
