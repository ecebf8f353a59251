//! `ctxkeeper ui`: the web console over a session store and its archive, without a gateway
//! (for replays written with `replay --store`, and for operators on another host). The same
//! pages as `/ui` of `ctxkeeper serve`; live updates arrive when the store's event bus spans
//! processes (Redis, PostgreSQL). Prints `listening on http://ADDR` on stdout once bound.

use anyhow::{Context, Result};
use clap::Args;
use ctxkeeper_gateway::config::GatewayConfig;
use ctxkeeper_gateway::tenancy::TenantRule;
use ctxkeeper_gateway::ui::{Access, Console};

use crate::trace_input::InputError;

/// Options of `ctxkeeper ui`.
#[derive(Debug, Args)]
pub struct UiArgs {
    /// The session store: sqlite://PATH, postgres://…, mysql://…, redis://…, file://DIR
    /// (default: the one `serve` and `wrap` use, SQLite in the user's data directory).
    #[arg(long, value_name = "URL", env = "CTXKEEPER_STORE")]
    pub store: Option<String>,

    /// The archive the sessions' compacted content went to: a directory or an archive URL
    /// (default: the one `serve` and `wrap` use, in the user's data directory).
    #[arg(long, value_name = "DIR", env = "CTXKEEPER_WORKSPACE")]
    pub workspace: Option<String>,

    /// The address to listen on, HOST:PORT; a host name such as localhost is resolved (port 0
    /// picks a free port). Without a token the console answers only on a loopback address.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8788",
        value_parser = ctxkeeper_gateway::config::listen_address
    )]
    pub listen: std::net::SocketAddr,

    /// The admin token: reaches every tenant.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "CTXKEEPER_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,

    /// A tenant-scoped token, TENANT=TOKEN (repeatable): reaches only TENANT.
    #[arg(
        long = "tenant-token",
        value_name = "TENANT=TOKEN",
        env = "CTXKEEPER_TENANT_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub tenant_tokens: Vec<String>,
}

fn access(args: &UiArgs) -> Result<Access> {
    if args.admin_token.as_deref().is_some_and(str::is_empty) {
        return Err(InputError::BadOption("--admin-token must not be empty".into()).into());
    }
    let mut tenants = TenantRule::default();
    for pair in &args.tenant_tokens {
        let Some((tenant, token)) = pair.split_once('=') else {
            return Err(
                InputError::BadOption("--tenant-token takes TENANT=TOKEN".to_string()).into(),
            );
        };
        tenants = tenants
            .with_token(tenant.trim(), token)
            .map_err(|e| InputError::BadOption(format!("--tenant-token: {e}")))?;
    }
    Ok(Access::new(
        args.admin_token.clone(),
        tenants,
        args.listen.ip(),
    ))
}

pub fn run(args: &UiArgs) -> Result<()> {
    let access = access(args)?;
    crate::log_to_stderr("info");
    if access.admin_token.is_none() && !access.tenants.has_tokens() && !access.loopback {
        tracing::warn!(
            "no --admin-token or --tenant-token and not on a loopback address: every page \
             will answer 403"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // The same defaults as `serve`, so the console shows what a plain `serve` or `wrap` wrote.
    let defaults = GatewayConfig::new(GatewayConfig::default_data_dir());
    let store_url = args.store.clone().unwrap_or(defaults.store_url);
    let workspace = args.workspace.clone().unwrap_or(defaults.workspace);
    runtime.block_on(async move {
        let redacted = ctxkeeper_store::redact(&store_url);
        let store = ctxkeeper_store::open_store(&store_url)
            .await
            .with_context(|| format!("store {redacted}"))?;
        let archive = ctxkeeper_store::open_archive(&workspace)
            .await
            .with_context(|| format!("archive {workspace}"))?;
        let bus = ctxkeeper_store::open_event_bus(&store_url)
            .await
            .with_context(|| format!("events of {redacted}"))?;
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let address = listener.local_addr()?;
        // The one stdout line: scripts and tests wait for it.
        println!("listening on http://{address}");
        use std::io::Write;
        std::io::stdout().flush().ok();
        tracing::info!(url = %format!("http://{address}/ui/"), "console listening");
        Console::standalone(store, archive, bus, access)
            .serve(listener, crate::serve::shutdown_signal())
            .await
            .context("console server")?;
        Ok(())
    })
}
