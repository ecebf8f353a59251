//! `ctxkeeper serve`: the gateway, with the MCP server mounted at `/mcp` over the same store
//! and archive. Prints `listening on http://ADDR` on stdout once bound (the only line it prints
//! there) and logs to stderr.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use ctxkeeper::core::tokens::TokenModel;
use ctxkeeper_gateway::config::{ConfigFile, GatewayConfig, GatewaySettings};
use ctxkeeper_gateway::error::GatewayError;
use ctxkeeper_gateway::router::Server;
use ctxkeeper_gateway::telemetry::span::unix_nano;
use ctxkeeper_gateway::telemetry::{Telemetry, ToolCallSpan};
use ctxkeeper_gateway::tenancy::{TENANT_HEADER, TenantError, TenantRule};
use ctxkeeper_mcp::{
    Options, Services, TenantEndpoint, TenantLimits, TenantRefusal, TenantResolver,
    ToolCallObserver, ToolCallRecord,
};

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
  --mcp-allow-host names more. /mcp keeps at most 1,024 tenants, --mcp-tenants-per-source per
  client address, 32 MCP sessions per tenant, and forgets what idles --mcp-idle-secs: made-up
  keys push out only their own client's tenants, never lock a real key out.";

/// Options of `ctxkeeper serve`.
#[derive(Debug, Args)]
#[command(after_help = MCP_HELP)]
pub struct ServeArgs {
    /// Every gateway setting, as an option and an environment variable (a configuration
    /// file's `[gateway]` table holds the same names).
    #[command(flatten)]
    pub settings: GatewaySettings,

    /// A TOML file: [gateway] settings, [models."NAME"] profiles, [policy] overrides.
    #[arg(long, value_name = "FILE", env = "CTXKEEPER_CONFIG")]
    pub config: Option<PathBuf>,

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

    /// Tenants one client address may hold at /mcp; its next new tenant (a new API key)
    /// forgets its least recently used one. Bounds what made-up keys can occupy.
    #[arg(
        long,
        default_value_t = 64,
        value_name = "N",
        conflicts_with = "no_mcp"
    )]
    pub mcp_tenants_per_source: usize,

    /// Seconds an /mcp tenant or MCP session may go without a request before it is forgotten.
    #[arg(
        long,
        default_value_t = 600,
        value_name = "SECS",
        conflicts_with = "no_mcp"
    )]
    pub mcp_idle_secs: u64,
}

/// Builds the configuration: defaults, then the file, then the environment and the options
/// (merged once, [`ConfigFile::resolve`]).
pub(crate) fn config(args: &ServeArgs) -> Result<GatewayConfig> {
    let file = match &args.config {
        Some(path) => ConfigFile::read(path).map_err(|e| InputError::BadOption(e.to_string()))?,
        None => ConfigFile::default(),
    };
    let config = file
        .resolve(
            args.settings.clone(),
            GatewayConfig::new(GatewayConfig::default_data_dir()),
        )
        .map_err(|e| InputError::BadOption(e.to_string()))?;
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
    let window = args
        .mcp_window
        .unwrap_or_else(|| config.policy.window_for(&model.profile, &config.profiles));
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
            if let Some(telemetry) = &gateway.telemetry {
                services.tool_calls = Some(Arc::new(ToolSpans(telemetry.clone())));
            }
            services
        }
        Err(e) => {
            tracing::warn!("MCP server not mounted at /mcp: {e}");
            return Ok(None);
        }
    };
    let resolve = mcp_tenant_rule(args.mcp_tenant.clone(), gateway.config.tenants.clone());
    let limits = TenantLimits {
        tenants_per_source: args.mcp_tenants_per_source.max(1),
        idle: std::time::Duration::from_secs(args.mcp_idle_secs.max(1)),
        ..TenantLimits::default()
    };
    let endpoint =
        TenantEndpoint::with_limits(services, options, &args.mcp_allow_hosts, resolve, limits)
            .map_err(|e| InputError::BadOption(e.to_string()))?;
    Ok(Some(endpoint))
}

/// Exports every `/mcp` tool call as an `execute_tool` span through the gateway's own exporter.
#[derive(Debug)]
struct ToolSpans(Telemetry);

impl ToolCallObserver for ToolSpans {
    fn tool_called(&self, call: &ToolCallRecord) {
        let start = unix_nano(call.started);
        self.0.tool_call(&ToolCallSpan {
            tool: &call.tool,
            conversation: call.session.as_deref(),
            request_id: &call.request_id,
            mcp_session: call.mcp_session.as_deref(),
            traceparent: call.traceparent.as_deref(),
            tracestate: call.tracestate.as_deref(),
            start_unix_nano: start,
            end_unix_nano: start
                .saturating_add(u64::try_from(call.duration.as_nanos()).unwrap_or(u64::MAX)),
            error: call.error.as_deref(),
        });
    }
}

/// Runs the command until ctrl-c or SIGTERM.
pub fn run(args: &ServeArgs) -> Result<()> {
    let config = config(args)?;
    let mcp_options = mcp_options(args, &config)?;
    crate::log_to_stderr("info");
    // The store's own threads (SQLite's writer) give their freed memory back when they go
    // idle, as the runtime's workers do when they park.
    ctxkeeper::store::on_thread_idle(ctxkeeper_alloc::return_freed_memory);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(ctxkeeper_alloc::return_freed_memory_when_idle)
        .build()
        .context("cannot start the async runtime")?;
    let retention_days = config.policy.session.retention_days;
    runtime.block_on(async move {
        let listen = config.listen;
        let mut server = Server::bind(config)
            .await
            .map_err(|err| explain_bind_error(err, listen))?;
        return_freed_memory_periodically();
        if let Some(days) = retention_days {
            let gateway = server.gateway();
            sweep_retention(
                gateway.sessions.store().clone(),
                local_workspace(&gateway.config.workspace),
                days,
            );
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
        print_banner(&server, mcp.is_some());
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

/// What a newcomer needs to check at a glance, on stderr (stdout keeps its one line): where
/// requests go, where sessions and archived content are kept, the policy, and the console.
/// URLs are redacted: a password in a store or upstream URL never reaches a terminal or log.
fn print_banner(server: &Server, mcp: bool) {
    let config = &server.gateway().config;
    let address = server.local_addr();
    let mut banner = format!(
        "ctxkeeper gateway on http://{address}\n\
         \x20 OpenAI upstream:    {}\n\
         \x20 Anthropic upstream: {}\n\
         \x20 store:              {}\n\
         \x20 archive:            {}\n\
         \x20 policy:             {}\n\
         \x20 console:            http://{address}/ui/\n",
        without_credentials(&config.upstream),
        without_credentials(&config.anthropic_upstream),
        without_credentials(&config.store_url),
        without_credentials(&config.workspace),
        config.policy.name,
    );
    if mcp {
        banner.push_str(&format!("  MCP:                http://{address}/mcp\n"));
    }
    eprint!("{banner}");
}

/// `url` without its userinfo (`user:password@`, or a bare token) and its query, which may
/// carry a password (`?password=…`); anything that is not a URL comes back as it is.
fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let rest = rest.split_once('?').map_or(rest, |(before, _)| before);
    let (authority, path) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

/// A bind failure names the address and what to do: "Address already in use" alone leaves a
/// newcomer guessing which address, and why.
fn explain_bind_error(err: GatewayError, listen: std::net::SocketAddr) -> anyhow::Error {
    match &err {
        GatewayError::Io(io) if io.kind() == std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "cannot listen on {listen}: the address is already in use (another process, perhaps \
             another `ctxkeeper serve`, holds it); stop it or pick another address with \
             --listen, e.g. --listen 127.0.0.1:0 for any free port"
        ),
        GatewayError::Io(io) => anyhow::anyhow!("cannot listen on {listen}: {io}"),
        _ => anyhow::Error::new(err),
    }
}

/// The gateway's workspace as a local directory (a path or `file://` URL), for the retention
/// sweep to remove the folders of the sessions it removes; `None` for any other archive.
fn local_workspace(workspace: &str) -> Option<ctxkeeper::store::LocalWorkspace> {
    let path = match workspace.split_once("://") {
        None => workspace,
        Some((scheme, path)) if scheme.eq_ignore_ascii_case("file") => path,
        Some(_) => return None,
    };
    match ctxkeeper::store::LocalWorkspace::new(path) {
        Ok(workspace) => Some(workspace),
        Err(e) => {
            tracing::warn!("the retention sweep leaves archive folders in {path}: {e}");
            None
        }
    }
}

/// Hands the memory freed since the last tick back to the OS, every 5 s: the allocator would
/// otherwise keep what a load freed (warm sessions idled out, large bodies answered) until it
/// is busy again (see `ctxkeeper_alloc`). A tick with nothing freed costs microseconds.
///
/// Each thread's heap keeps what other threads freed of it until that thread collects, and a
/// runtime worker collects when it parks: a worker asleep since the load ended (nothing
/// wakes it in an idle gateway) kept what the session sweep freed on another worker, 14.5 MB
/// of 110 MB sixty seconds after the hardening bench's load. Each tick therefore also wakes
/// the sleeping workers ([`wake_every_worker`]), which collect as they park again.
fn return_freed_memory_periodically() {
    tokio::spawn(async {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            ctxkeeper_alloc::return_freed_memory();
            wake_every_worker();
        }
    });
}

/// Wakes the runtime's parked workers: from a worker, a task spawned while another waits in
/// its queue wakes a sleeping worker to take it, and a woken worker that finds one more wakes
/// the next; each parks again once the empty tasks ran (the runtime's `on_thread_park` then
/// collects that worker's heap). One empty task per worker: a few microseconds per tick.
fn wake_every_worker() {
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    for _ in 0..workers {
        tokio::spawn(async {});
    }
}

/// Removes sessions of every tenant not updated for `days` days, with their folders in the
/// workspace, at start and then hourly: the policy's `[session] retention_days` (cowagent:
/// "sessions older than 30 days are automatically cleaned up"). A failed sweep is logged and
/// retried at the next hour.
fn sweep_retention(
    store: std::sync::Arc<dyn ctxkeeper::store::SessionStore>,
    workspace: Option<ctxkeeper::store::LocalWorkspace>,
    days: u32,
) {
    let retention = ctxkeeper::store::Retention {
        max_age: std::time::Duration::from_secs(u64::from(days) * 86_400),
    };
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(3_600));
        loop {
            every.tick().await;
            let swept = ctxkeeper::store::retention::expire_sessions(
                store.as_ref(),
                None,
                retention,
                workspace.as_ref(),
            )
            .await;
            match swept {
                Ok(expired) => tracing::info!(
                    removed = expired.sessions,
                    archives_removed = expired.archives,
                    days,
                    "retention sweep"
                ),
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::thread::ThreadId;
    use std::time::{Duration, Instant};

    /// How often each thread parked, for the test's runtime (the only one with this hook).
    static PARKS: Mutex<Option<HashMap<ThreadId, u64>>> = Mutex::new(None);

    fn parked() {
        let mut parks = PARKS.lock().expect("not poisoned");
        let parks = parks.get_or_insert_with(HashMap::new);
        *parks.entry(std::thread::current().id()).or_default() += 1;
    }

    fn parks() -> HashMap<ThreadId, u64> {
        PARKS
            .lock()
            .expect("not poisoned")
            .clone()
            .unwrap_or_default()
    }

    #[test]
    fn a_tick_wakes_every_sleeping_worker_to_park_again() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_park(parked)
            .build()
            .expect("a runtime");
        // Both workers start, find nothing to do and sleep.
        let deadline = Instant::now() + Duration::from_secs(60);
        while parks().len() < 2 {
            assert!(Instant::now() < deadline, "the workers never parked");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The tick comes from a timer, as `serve`'s does: the worker that holds the timer
        // runs it alone, and the other sleeps on (the wake-ups of the spawn from outside the
        // runtime are over before the timer fires).
        let tick = runtime.spawn(async {
            tokio::time::sleep(Duration::from_millis(600)).await;
            super::wake_every_worker();
        });
        std::thread::sleep(Duration::from_millis(300));
        let before = parks();
        runtime.block_on(tick).expect("the tick ran");
        // Each worker must park again (the park is where a worker collects its heap).
        let deadline = Instant::now() + Duration::from_secs(10);
        let every_worker_parked_again = || {
            let now = parks();
            before.iter().all(|(thread, count)| now[thread] > *count)
        };
        while !every_worker_parked_again() {
            assert!(
                Instant::now() < deadline,
                "a worker slept through: {before:?} then {:?}",
                parks()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
