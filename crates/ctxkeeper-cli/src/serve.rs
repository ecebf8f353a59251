//! `ctxkeeper serve`: the gateway, with the MCP server mounted at `/mcp` over the same store
//! and archive. Prints `listening on http://ADDR` on stdout once bound (the only line it prints
//! there) and logs to stderr.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use ctxkeeper::core::tokens::TokenModel;
use ctxkeeper_gateway::assembly::ContextProvider;
use ctxkeeper_gateway::config::{ConfigFile, GatewayConfig, policy_preset};
use ctxkeeper_gateway::router::Server;
use ctxkeeper_gateway::summarize::SummarizerChoice;
use ctxkeeper_gateway::tenancy::{TENANT_HEADER, TenantError, TenantRule};
use ctxkeeper_mcp::{Options, Services, TenantEndpoint, TenantRefusal, TenantResolver};

use crate::trace_input::InputError;

const MCP_HELP: &str = "\
MCP server at /mcp:
  `serve` also serves ctxkeeper's MCP retrieval tools (session_search, context_read, compact, …)
  over streamable HTTP at http://ADDR/mcp, over the gateway's own store and archive.

  Tenant: every /mcp request is served for the tenant the gateway would give a model call with
  the same headers: the tenant of a tenant token (x-ctxkeeper-tenant-token), else a hash of the
  API key (Authorization: Bearer … or x-api-key), else `default`; x-ctxkeeper-tenant only with
  --trust-tenant-header or alongside a token of that tenant. An MCP client sending the agent's
  headers sees exactly the agent's sessions; an MCP session keeps the tenant it was opened
  with. Pin one tenant with --mcp-tenant (then a header naming another tenant is refused with
  403) or turn the endpoint off with --no-mcp.

Tenants (see SECURITY.md):
  By default a request's tenant is who its credentials say: the API key's hash. Behind a proxy
  that authenticates clients and sets x-ctxkeeper-tenant itself, pass --trust-tenant-header.
  --tenant-token TENANT=TOKEN gives a client (or an operator) a token that scopes it to one
  tenant: sent as x-ctxkeeper-tenant-token on model calls, events and /mcp, or as the admin
  API's bearer token.

  Only loopback Host headers (localhost, 127.0.0.1, ::1) are accepted at /mcp unless
  --mcp-allow-host names more.";

/// Options of `ctxkeeper serve`.
#[derive(Debug, Args)]
#[command(after_help = MCP_HELP)]
pub struct ServeArgs {
    /// The address to listen on (port 0 picks a free port).
    #[arg(long, value_name = "ADDR", env = "CTXKEEPER_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,

    /// The OpenAI-compatible upstream, including its /v1 (default https://api.openai.com/v1).
    #[arg(long, value_name = "URL", env = "CTXKEEPER_UPSTREAM")]
    pub upstream: Option<String>,

    /// The Anthropic upstream, without /v1 (default https://api.anthropic.com).
    #[arg(long, value_name = "URL", env = "CTXKEEPER_ANTHROPIC_UPSTREAM")]
    pub anthropic_upstream: Option<String>,

    /// The session store: sqlite://PATH (default: sessions.db in the data directory),
    /// postgres://…, mysql://…, redis://…, file://DIR, memory://.
    #[arg(long, value_name = "URL", env = "CTXKEEPER_STORE")]
    pub store: Option<String>,

    /// The archive for compacted content: a directory (default: workspace/ in the data
    /// directory) or an archive URL (postgres://…, memory://; s3://…, gs://…, az://… in a
    /// binary built with `--features cloud`).
    #[arg(long, value_name = "DIR", env = "CTXKEEPER_WORKSPACE")]
    pub workspace: Option<String>,

    /// The context policy: default, none, agentscope, reme-compact, reme-compress, reme-auto,
    /// agentrail, cowagent, harness.
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,

    /// A TOML file: [gateway] settings, [models."NAME"] profiles, [policy] overrides.
    #[arg(long, value_name = "FILE", env = "CTXKEEPER_CONFIG")]
    pub config: Option<PathBuf>,

    /// Enables the admin API with this bearer token.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "CTXKEEPER_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,

    /// Honour x-ctxkeeper-tenant from every client. Only behind a proxy that authenticates
    /// clients and sets (or strips) that header itself.
    #[arg(long)]
    pub trust_tenant_header: bool,

    /// A tenant-scoped token, TENANT=TOKEN (repeatable): its bearer reaches only TENANT, on
    /// model calls (x-ctxkeeper-tenant-token), events, /mcp and the admin API.
    #[arg(
        long = "tenant-token",
        value_name = "TENANT=TOKEN",
        env = "CTXKEEPER_TENANT_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub tenant_tokens: Vec<String>,

    /// The largest request body accepted, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub body_limit: Option<usize>,

    /// Seconds allowed between two reads from the upstream (default 300).
    #[arg(long, value_name = "SECONDS")]
    pub upstream_timeout: Option<u64>,

    /// Seconds allowed for a whole upstream exchange, streamed answers included (default 1800).
    #[arg(long, value_name = "SECONDS")]
    pub upstream_deadline: Option<u64>,

    /// Seconds a client has to send a request's headers (default 10).
    #[arg(long, value_name = "SECONDS")]
    pub header_timeout: Option<u64>,

    /// Seconds a client has to send a request's body (default 60).
    #[arg(long, value_name = "SECONDS")]
    pub body_timeout: Option<u64>,

    /// Request body bytes held at once over all requests; past it requests get 503 with
    /// Retry-After (default 256 MiB).
    #[arg(long, value_name = "BYTES")]
    pub max_inflight_bytes: Option<usize>,

    /// Seconds a warm session may sit idle in memory before it is dropped; it reloads from the
    /// store (default 1800).
    #[arg(long, value_name = "SECONDS")]
    pub session_idle: Option<u64>,

    /// Consecutive requests of one session that may overflow the context window and be
    /// recovered; the next overflow is passed to the client (default 3).
    #[arg(long, value_name = "N")]
    pub max_consecutive_recoveries: Option<u32>,

    /// Long-term memory on: each tenant's MEMORY.md and memory/YYYY-MM-DD.md in the
    /// workspace directory receive the facts flushed before each compaction (default: on
    /// when the policy wants it, as cowagent and harness do).
    #[arg(long, conflicts_with = "no_memory")]
    pub memory: bool,

    /// Long-term memory off, whatever the policy wants.
    #[arg(long)]
    pub no_memory: bool,

    /// Request-time context added after the stable prefix of every managed request
    /// (repeatable or comma-separated): date, memory, budget. Default: none.
    #[arg(long = "context-provider", value_name = "NAME", value_delimiter = ',')]
    pub context_providers: Vec<String>,

    /// Repair broken tool-call pairs in client histories (a `history_repaired` event names
    /// each repair) instead of refusing the request with 400.
    #[arg(long)]
    pub repair: bool,

    /// Who writes compaction summaries: `upstream` (default: the request's own upstream and
    /// model, as the caller, on its prompt cache), `extractive` (no model), `openai` or
    /// `anthropic` (a fixed summarizer; key from CTXKEEPER_SUMMARIZER_API_KEY, else
    /// OPENAI_API_KEY / ANTHROPIC_API_KEY). A failed summary falls back to the extractive one.
    #[arg(long, value_name = "KIND")]
    pub summarizer: Option<String>,

    /// The summary model (with `upstream`: instead of the request's own model).
    #[arg(long, value_name = "MODEL")]
    pub summarizer_model: Option<String>,

    /// The base URL of an `openai` or `anthropic` summarizer.
    #[arg(long, value_name = "URL")]
    pub summarizer_url: Option<String>,

    /// Past this share of the compaction trigger, a model summary is prepared in the
    /// background so the request that crosses the trigger does not wait for it (default
    /// 0.75; 0 turns it off).
    #[arg(long, value_name = "SHARE")]
    pub prepare_summaries_at: Option<f64>,

    /// Who answers an OpenAI Responses `compaction_trigger` (Codex's server-side
    /// compaction): `auto` (default: OpenAI's own API when it is the upstream, else the
    /// gateway), `forward` (always the upstream) or `gateway` (always the gateway, which
    /// compacts the session and returns one compaction item).
    #[arg(long, value_name = "MODE")]
    pub responses_compaction: Option<String>,

    /// Do not mount the MCP server at /mcp.
    #[arg(long)]
    pub no_mcp: bool,

    /// Serve only this tenant at /mcp, whatever the request's API key (an x-ctxkeeper-tenant
    /// header naming another tenant is refused). Default: each request's own tenant.
    #[arg(long, value_name = "TENANT", conflicts_with = "no_mcp")]
    pub mcp_tenant: Option<String>,

    /// A Host header to accept at /mcp besides localhost, 127.0.0.1 and ::1 (repeatable);
    /// needed when MCP clients reach the gateway by another name.
    #[arg(
        long = "mcp-allow-host",
        value_name = "HOST",
        conflicts_with = "no_mcp"
    )]
    pub mcp_allow_hosts: Vec<String>,

    /// The model whose tokenizer and window the MCP tools `context_stats` and `compact`
    /// measure with.
    #[arg(long, default_value = "gpt-4o", value_name = "MODEL")]
    pub mcp_model: String,

    /// The context window in tokens for `context_stats` and `compact` (default: the model's).
    #[arg(long, value_name = "TOKENS")]
    pub mcp_window: Option<u64>,
}

/// Builds the configuration: defaults, then the file, then the options.
pub(crate) fn config(args: &ServeArgs) -> Result<GatewayConfig> {
    let mut config = GatewayConfig::new(GatewayConfig::default_data_dir());
    if let Some(path) = &args.config {
        config = ConfigFile::read(path)
            .and_then(|file| file.into_config(config))
            .map_err(|e| InputError::BadOption(e.to_string()))?;
    }
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(url) = &args.upstream {
        config.upstream.clone_from(url);
    }
    if let Some(url) = &args.anthropic_upstream {
        config.anthropic_upstream.clone_from(url);
    }
    if let Some(url) = &args.store {
        config.store_url.clone_from(url);
    }
    if let Some(dir) = &args.workspace {
        config.workspace.clone_from(dir);
    }
    if let Some(name) = &args.policy {
        // The file's [policy] overrides apply to whichever preset is chosen.
        let mut policy = policy_preset(name).map_err(|e| InputError::BadOption(e.to_string()))?;
        if let Some(path) = &args.config
            && let Some(overrides) = ConfigFile::read(path)
                .map_err(|e| InputError::BadOption(e.to_string()))?
                .policy
        {
            policy = policy
                .with_overrides(&overrides)
                .map_err(|e| InputError::BadOption(format!("[policy]: {e}")))?;
        }
        config.policy = policy;
    }
    if args.admin_token.is_some() {
        config.admin_token.clone_from(&args.admin_token);
    }
    if args.trust_tenant_header {
        config.tenants = config.tenants.clone().trust_header(true);
    }
    for pair in &args.tenant_tokens {
        let Some((tenant, token)) = pair.split_once('=') else {
            return Err(
                InputError::BadOption("--tenant-token takes TENANT=TOKEN".to_string()).into(),
            );
        };
        config.tenants = config
            .tenants
            .clone()
            .with_token(tenant.trim(), token)
            .map_err(|e| InputError::BadOption(format!("--tenant-token: {e}")))?;
    }
    if let Some(limit) = args.body_limit {
        config.body_limit = limit;
    }
    let secs = std::time::Duration::from_secs;
    if let Some(n) = args.upstream_timeout {
        config.upstream_timeout = secs(n);
    }
    if let Some(n) = args.upstream_deadline {
        config.upstream_deadline = secs(n);
    }
    if let Some(n) = args.header_timeout {
        config.header_timeout = secs(n);
    }
    if let Some(n) = args.body_timeout {
        config.body_timeout = secs(n);
    }
    if let Some(bytes) = args.max_inflight_bytes {
        config.max_inflight_bytes = bytes;
    }
    if let Some(n) = args.session_idle {
        config.session_idle = secs(n);
    }
    if let Some(n) = args.max_consecutive_recoveries {
        config.max_consecutive_recoveries = n;
    }
    if args.memory {
        config.memory = Some(true);
    }
    if args.no_memory {
        config.memory = Some(false);
    }
    if !args.context_providers.is_empty() {
        config.context_providers = ContextProvider::parse_list(&args.context_providers)
            .map_err(|e| InputError::BadOption(format!("--context-provider: {e}")))?;
    }
    if args.repair {
        config.repair = true;
    }
    if args.summarizer.is_some() || args.summarizer_model.is_some() || args.summarizer_url.is_some()
    {
        let kind = args.summarizer.as_deref().unwrap_or("upstream");
        config.summarizer = SummarizerChoice::parse(
            kind,
            args.summarizer_url.as_deref(),
            args.summarizer_model.as_deref(),
        )
        .map_err(|e| InputError::BadOption(format!("--summarizer: {e}")))?;
    }
    if let Some(share) = args.prepare_summaries_at {
        config.prepare_summaries_at = ctxkeeper_gateway::config::prepare_share(share)
            .map_err(|e| InputError::BadOption(format!("--prepare-summaries-at {e}")))?;
    }
    if let Some(mode) = &args.responses_compaction {
        config.responses_compaction =
            ctxkeeper_gateway::compaction_items::ResponsesCompaction::parse(mode)
                .map_err(|e| InputError::BadOption(format!("--responses-compaction: {e}")))?;
    }
    config
        .validate()
        .map_err(|e| InputError::BadOption(e.to_string()))?;
    if config.store_url.starts_with("sqlite://") {
        // SQLite creates the file, not its directory.
        if let Some(dir) = PathBuf::from(config.store_url.trim_start_matches("sqlite://")).parent()
        {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
    }
    Ok(config)
}

/// The settings of every tenant's MCP server (the tenant itself is replaced per request), or
/// `None` with `--no-mcp`. `compact` runs the gateway's own policy.
pub(crate) fn mcp_options(args: &ServeArgs, config: &GatewayConfig) -> Result<Option<Options>> {
    if args.no_mcp {
        return Ok(None);
    }
    let model = TokenModel::for_model(&args.mcp_model, &config.profiles);
    let window = args.mcp_window.unwrap_or(model.profile.context_window);
    let options = Options {
        tenant: args
            .mcp_tenant
            .clone()
            .unwrap_or_else(|| ctxkeeper_gateway::tenancy::DEFAULT_TENANT.to_string()),
        session: None,
        policy: config.policy.clone(),
        model,
        window,
    };
    if let Some(tenant) = &args.mcp_tenant {
        ctxkeeper::store::state::validate_identifier("tenant", tenant)
            .map_err(|e| InputError::BadOption(format!("--mcp-tenant: {e}")))?;
    }
    if window == 0 {
        return Err(InputError::BadOption("--mcp-window must be greater than 0".into()).into());
    }
    Ok(Some(options))
}

/// How /mcp picks a request's tenant: pinned by `--mcp-tenant`, else exactly as the gateway
/// picks the tenant of a model call, so an MCP client sending the agent's own headers reads
/// the agent's own sessions.
fn mcp_tenant_rule(pinned: Option<String>, rule: TenantRule) -> TenantResolver {
    match pinned {
        None => Arc::new(move |headers| {
            rule.resolve(headers).map_err(|e| match e {
                TenantError::Malformed(m) => TenantRefusal::bad_request(m),
                TenantError::Unauthorized(m) => TenantRefusal::unauthorized(m),
                TenantError::Forbidden(m) => TenantRefusal::forbidden(m),
            })
        }),
        Some(tenant) => Arc::new(move |headers| match headers.get(TENANT_HEADER) {
            // Refused rather than ignored: a client that names a tenant must not silently
            // read another one.
            Some(named) if named.as_bytes() != tenant.as_bytes() => Err(TenantRefusal::forbidden(
                "this gateway serves one tenant at /mcp (--mcp-tenant), and x-ctxkeeper-tenant \
                 names another",
            )),
            _ => Ok(tenant.clone()),
        }),
    }
}

/// Builds the MCP endpoint over the gateway's own store and archive handles; `None` (with a
/// warning) when the workspace's long-term memory directory cannot be opened.
pub(crate) async fn mcp_endpoint(
    args: &ServeArgs,
    options: Options,
    server: &Server,
) -> Result<Option<TenantEndpoint>> {
    let gateway = server.gateway();
    let services = match Services::over_store(
        gateway.sessions.store().clone(),
        gateway.sessions.archive().clone(),
        &gateway.config.workspace,
    )
    .await
    {
        // The MCP `compact` tool has no request of its own to summarize upstream on: a fixed
        // summarizer serves it too, else the extractive one.
        Ok(mut services) => {
            if let ctxkeeper_gateway::summarize::SummarizerChoice::Fixed(summarizer) =
                &gateway.config.summarizer
            {
                services.summarizer = summarizer.clone();
            }
            services
        }
        Err(e) => {
            tracing::warn!("MCP server not mounted at /mcp: {e}");
            return Ok(None);
        }
    };
    let resolve = mcp_tenant_rule(args.mcp_tenant.clone(), gateway.config.tenants.clone());
    let endpoint = TenantEndpoint::new(services, options, &args.mcp_allow_hosts, resolve)
        .map_err(|e| InputError::BadOption(e.to_string()))?;
    Ok(Some(endpoint))
}

/// Runs the command until ctrl-c or SIGTERM.
pub fn run(args: &ServeArgs) -> Result<()> {
    let config = config(args)?;
    let mcp_options = mcp_options(args, &config)?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let retention_days = config.policy.session.retention_days;
    runtime.block_on(async move {
        let mut server = Server::bind(config).await?;
        if let Some(days) = retention_days {
            sweep_retention(server.gateway().sessions.store().clone(), days);
        }
        let mcp = match mcp_options {
            Some(options) => mcp_endpoint(args, options, &server).await?,
            None => None,
        };
        if let Some(endpoint) = &mcp {
            server = server.merge(endpoint.router());
        }
        // The one stdout line: scripts and tests wait for it.
        println!("listening on http://{}", server.local_addr());
        use std::io::Write;
        std::io::stdout().flush().ok();
        tracing::info!(address = %server.local_addr(), "gateway listening");
        if mcp.is_some() {
            tracing::info!(
                url = %format!("http://{}/mcp", server.local_addr()),
                tenant = args.mcp_tenant.as_deref().unwrap_or("per request"),
                "MCP server mounted"
            );
        }
        let shutdown = async move {
            shutdown_signal().await;
            // Open MCP event streams would otherwise hold the graceful shutdown until their
            // clients hang up.
            if let Some(endpoint) = mcp {
                endpoint.shutdown();
            }
        };
        server.run(shutdown).await?;
        tracing::info!("gateway stopped");
        Ok(())
    })
}

/// Removes sessions of every tenant not updated for `days` days, at start and then hourly:
/// the policy's `[session] retention_days` (cowagent: "sessions older than 30 days are
/// automatically cleaned up"). A failed sweep is logged and retried at the next hour.
fn sweep_retention(store: std::sync::Arc<dyn ctxkeeper::store::SessionStore>, days: u32) {
    let retention = ctxkeeper::store::Retention {
        max_age: std::time::Duration::from_secs(u64::from(days) * 86_400),
    };
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(3_600));
        loop {
            every.tick().await;
            match store.cleanup(None, retention).await {
                Ok(removed) => tracing::info!(removed, days, "retention sweep"),
                Err(e) => tracing::warn!("retention sweep failed: {e}"),
            }
        }
    });
}

/// Completes on ctrl-c or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
