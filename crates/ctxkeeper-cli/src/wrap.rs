//! `ctxkeeper wrap <agent> -- <agent args>`: run an unmodified agent with its model calls going
//! through the gateway.
//!
//! The agent is started as a child process with its base URL pointed at a gateway: the one
//! `--gateway URL` names, or one started here in-process for the child's lifetime with the
//! same defaults and options as `ctxkeeper serve` (SQLite store and local workspace in the
//! data directory, so `ctxkeeper sessions …` finds the run afterwards), on a free loopback
//! port. The child's exit code is this command's exit code (128 + N when a signal ended it).
//!
//! How each agent is pointed at the gateway (found out by running them; see the README):
//!
//! | agent | detected from | what is set |
//! | --- | --- | --- |
//! | Claude Code | `claude` | `ANTHROPIC_BASE_URL=http://ADDR` |
//! | Codex CLI | `codex` | `-c model_provider=ctxkeeper -c model_providers.ctxkeeper={…base_url="http://ADDR/v1", env_key="OPENAI_API_KEY", wire_api="responses"}` before its arguments (Codex ignores `OPENAI_BASE_URL`; a custom provider also skips its WebSocket attempts) |
//! | mini-swe-agent | `mini`, `mini-swe-agent` | `OPENAI_BASE_URL`, `OPENAI_API_BASE`, `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_BASE` (litellm reads these) |
//! | anything else | – | the same four variables, for the official OpenAI and Anthropic SDKs |
//!
//! `--agent` overrides the detection (for a renamed binary or a wrapper script).
//!
//! At the end `wrap` says where the run's sessions went: the tenant (the gateway files a
//! request under a hash of its API key, `key-…`, so the tenant is worked out here from the
//! agent's key the same way), the sessions written, the command that shows them and the
//! console page. With `--gateway` the sessions are learned from that gateway's admin API
//! when this environment has its admin token (`CTXKEEPER_ADMIN_TOKEN` or `--admin-token`):
//! the tenant's sessions before and after the run, compared. Without the token the note
//! gives the command that lists them instead.
//!
//! ```text
//! ctxkeeper wrap claude -- -p "fix the failing test" --output-format json
//! ctxkeeper wrap --gateway http://127.0.0.1:8787 codex -- exec "summarise this repo"
//! ctxkeeper wrap --upstream http://localhost:11434/v1 python -- my_agent.py
//! ```

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use ctxkeeper_gateway::router::Server;
use ctxkeeper_gateway::tenancy::{DEFAULT_TENANT, TenantRule};
use ctxkeeper_store::{SessionFilter, SessionStore};

use crate::serve::{self, ServeArgs};
use crate::trace_input::InputError;

/// Options of `ctxkeeper wrap`.
#[derive(Debug, Args)]
pub struct WrapArgs {
    /// The agent program to run (looked up on PATH): claude, codex, mini, or any program that
    /// uses the OpenAI or Anthropic SDK.
    #[arg(value_name = "AGENT")]
    pub program: OsString,

    /// Arguments passed to the agent unchanged (after `--`).
    #[arg(last = true, value_name = "AGENT ARGS")]
    pub agent_args: Vec<OsString>,

    /// Use this running gateway (http://HOST:PORT) instead of starting one.
    #[arg(long, value_name = "URL", env = "CTXKEEPER_GATEWAY")]
    pub gateway: Option<String>,

    /// How to point the agent at the gateway (default: from the program's name).
    #[arg(long, value_enum, value_name = "KIND")]
    pub agent: Option<AgentKind>,

    /// Print only errors from the started gateway (default: warnings and the gateway's
    /// address).
    #[arg(long, short)]
    pub quiet: bool,

    /// Options of the gateway started here. With --gateway only --admin-token (or
    /// CTXKEEPER_ADMIN_TOKEN) is used: to ask that gateway's admin API which sessions the run
    /// wrote.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// The agents `wrap` knows how to point at a gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentKind {
    /// Claude Code (`claude`): `ANTHROPIC_BASE_URL`.
    Claude,
    /// Codex CLI (`codex`): a `ctxkeeper` model provider given with `-c`.
    Codex,
    /// mini-swe-agent (`mini`) and other litellm programs: the OpenAI and Anthropic base URLs.
    Mini,
    /// Any program using the official OpenAI or Anthropic SDKs: their base URL variables.
    Generic,
}

impl AgentKind {
    /// The kind a program name stands for.
    pub fn detect(program: &Path) -> AgentKind {
        let name = program
            .file_stem()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        match name.as_str() {
            "claude" | "claude-code" => AgentKind::Claude,
            "codex" => AgentKind::Codex,
            "mini" | "mini-swe-agent" | "mini-extra" => AgentKind::Mini,
            _ => AgentKind::Generic,
        }
    }
}

/// What to run: the environment to add and the arguments to put before the user's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub env: Vec<(&'static str, String)>,
    pub leading_args: Vec<String>,
}

/// How `kind` is pointed at the gateway whose root URL is `root` (no trailing slash, no /v1).
pub fn launch(kind: AgentKind, root: &str) -> Launch {
    let openai = format!("{root}/v1");
    let sdk_env = || {
        vec![
            ("OPENAI_BASE_URL", openai.clone()),
            ("OPENAI_API_BASE", openai.clone()),
            ("ANTHROPIC_BASE_URL", root.to_string()),
            ("ANTHROPIC_API_BASE", root.to_string()),
        ]
    };
    match kind {
        AgentKind::Claude => Launch {
            env: vec![("ANTHROPIC_BASE_URL", root.to_string())],
            leading_args: Vec::new(),
        },
        AgentKind::Codex => Launch {
            env: Vec::new(),
            leading_args: vec![
                "-c".into(),
                "model_provider=ctxkeeper".into(),
                "-c".into(),
                format!(
                    "model_providers.ctxkeeper={{name=\"ctxkeeper\",base_url=\"{openai}\",\
                     env_key=\"OPENAI_API_KEY\",wire_api=\"responses\"}}"
                ),
            ],
        },
        AgentKind::Mini | AgentKind::Generic => Launch {
            env: sdk_env(),
            leading_args: Vec::new(),
        },
    }
}

/// The root URL of a gateway given as `http(s)://HOST[:PORT][/][v1]`.
pub fn gateway_root(url: &str) -> Result<String, InputError> {
    let bad = |why: &str| InputError::BadOption(format!("--gateway {url:?}: {why}"));
    let parsed = url::Url::parse(url)
        .map_err(|e| bad(&format!("expected an http:// or https:// URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("expected an http:// or https:// URL"));
    }
    if parsed.host_str().is_none() {
        return Err(bad("the URL names no host"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("the URL must not have a query or fragment"));
    }
    let text = parsed.as_str().trim_end_matches('/');
    let root = text.strip_suffix("/v1").unwrap_or(text);
    Ok(root.to_string())
}

/// Runs the command: the child's exit code, or an error before it could start.
pub fn run(args: &WrapArgs) -> Result<ExitCode> {
    let program = Path::new(&args.program);
    let kind = args.agent.unwrap_or_else(|| AgentKind::detect(program));
    let given_root = args.gateway.as_deref().map(gateway_root).transpose()?;
    let config = match &given_root {
        Some(_) => None,
        None => {
            let mut config = serve::config(&args.serve)?;
            if args.serve.settings.listen.is_none() {
                config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            }
            Some(config)
        }
    };
    let filter = if args.quiet { "error" } else { "warn" };
    crate::log_to_stderr(filter);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let Some(config) = config else {
            let root = given_root.unwrap_or_default();
            return run_through(args, kind, &root).await;
        };
        let mcp_options = serve::mcp_options(&args.serve, &config)?;
        let store = config.store_url.clone();
        let mut server = Server::bind(config).await?;
        let mcp = match mcp_options {
            Some(options) => serve::mcp_endpoint(&args.serve, options, &server).await?,
            None => None,
        };
        if let Some(endpoint) = &mcp {
            server = server.merge(endpoint.router());
        }
        let root = format!("http://{}", server.local_addr());
        let store_handle = server.gateway().sessions.store().clone();
        let started_ms = now_ms();
        if !args.quiet {
            eprintln!("ctxkeeper: gateway at {root} (sessions in {store})");
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let gateway = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        let outcome = run_child(args, kind, &root).await;
        if !args.quiet {
            eprint!(
                "{}",
                where_sessions_are(store_handle.as_ref(), &store, &root, started_ms).await
            );
        }
        if let Some(endpoint) = mcp {
            endpoint.shutdown();
        }
        let _ = stop.send(());
        match gateway.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "the gateway stopped with an error"),
            Err(error) => tracing::warn!(%error, "the gateway task failed"),
        }
        outcome
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

/// The variables an agent takes its API key from.
const KEY_VARS: [&str; 3] = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
];

/// The tenant of each API key in the environment (the gateway names a tenant after a hash
/// of the key), with the variable that holds the key.
fn key_tenants() -> Vec<(String, &'static str)> {
    let rule = TenantRule::default();
    KEY_VARS
        .iter()
        .filter_map(|var| {
            let key = std::env::var(var).ok().filter(|key| !key.is_empty())?;
            Some((key_tenant(&rule, &key)?, *var))
        })
        .collect()
}

/// The tenants the agent's requests land in: the one of each API key in the environment,
/// and `default` for keyless calls.
pub(crate) fn candidate_tenants() -> Vec<String> {
    let mut tenants: Vec<String> = key_tenants().into_iter().map(|(t, _)| t).collect();
    tenants.push(DEFAULT_TENANT.to_owned());
    tenants.dedup();
    tenants
}

/// The tenant the agent most likely writes to, and why: the tenant of the key its kind reads
/// first (Claude Code the Anthropic variables, the others OpenAI's), else `default`.
fn agent_tenant(kind: AgentKind) -> (String, String) {
    let mut keys = key_tenants();
    if kind == AgentKind::Claude {
        keys.sort_by_key(|(_, var)| !var.starts_with("ANTHROPIC"));
    }
    match keys.into_iter().next() {
        Some((tenant, var)) => (
            tenant,
            format!("the tenant of {var}: the gateway names it after a hash of the API key"),
        ),
        None => (
            DEFAULT_TENANT.to_owned(),
            "no API key in the environment: calls without one go to the default tenant".into(),
        ),
    }
}

/// `wrap --gateway URL`: runs the agent against that gateway, then says where its sessions
/// went (see the module docs).
async fn run_through(args: &WrapArgs, kind: AgentKind, root: &str) -> Result<ExitCode> {
    if args.quiet {
        return run_child(args, kind, root).await;
    }
    let tenants = candidate_tenants();
    // The tenants' sessions before the run, and the API to ask again after it.
    let asked = match AdminApi::new(root, args.serve.settings.admin_token.as_deref()) {
        Ok(api) => api.snapshot(&tenants).await.map(|before| (api, before)),
        Err(why) => Err(why),
    };
    let outcome = run_child(args, kind, root).await;
    // An agent that could not start wrote nothing: its error says what to do.
    if outcome.is_ok() {
        let written = match &asked {
            Ok((api, before)) => api
                .snapshot(&tenants)
                .await
                .map(|after| written_between(before, &after)),
            Err(why) => Err(why.clone()),
        };
        eprint!("{}", gateway_note(root, &agent_tenant(kind), written));
    }
    outcome
}

/// What the admin API lists of one session: its version, log length and last update.
type Listed = (Option<u64>, u64, i64);

/// The sessions of several tenants, by (tenant, session id).
type Snapshot = std::collections::BTreeMap<(String, String), Listed>;

/// A running gateway's admin API, asked with the admin token this environment holds.
struct AdminApi {
    client: reqwest::Client,
    root: String,
    token: String,
}

impl AdminApi {
    /// The API of the gateway at `root`, or why it cannot be asked: without a token the
    /// admin API answers nothing.
    fn new(root: &str, token: Option<&str>) -> Result<AdminApi, String> {
        let token = token.filter(|t| !t.is_empty()).ok_or_else(|| {
            "wrap has no admin token for the gateway's admin API (set CTXKEEPER_ADMIN_TOKEN or \
             pass --admin-token with the gateway's token to have them named here)"
                .to_string()
        })?;
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(5))
            .build()
            .map_err(|e| format!("cannot set up an HTTP client for the admin API: {e}"))?;
        Ok(AdminApi {
            client,
            root: root.to_owned(),
            token: token.to_owned(),
        })
    }

    /// The sessions of `tenants`; the error says why they could not be listed.
    async fn snapshot(&self, tenants: &[String]) -> Result<Snapshot, String> {
        let mut snapshot = Snapshot::new();
        for tenant in tenants {
            for (id, listed) in self.sessions(tenant).await? {
                snapshot.insert((tenant.clone(), id), listed);
            }
        }
        Ok(snapshot)
    }

    /// `GET /admin/sessions` for one tenant.
    async fn sessions(&self, tenant: &str) -> Result<Vec<(String, Listed)>, String> {
        let url = format!("{}/admin/sessions", self.root);
        let answer = self
            .client
            .get(&url)
            .bearer_auth(&self.token)
            .header(ctxkeeper_gateway::tenancy::TENANT_HEADER, tenant)
            .send()
            .await
            .map_err(|e| format!("cannot reach {url} ({e}); is the gateway still running?"))?;
        let status = answer.status();
        let body: serde_json::Value = answer.json().await.unwrap_or_default();
        if !status.is_success() {
            return Err(match status.as_u16() {
                401 => "the gateway refused the admin token (401 Unauthorized): give wrap the \
                        gateway's own (CTXKEEPER_ADMIN_TOKEN or --admin-token)"
                    .to_string(),
                403 => "the gateway's admin API is off (403 Forbidden): start the gateway with \
                        --admin-token and give wrap the same token"
                    .to_string(),
                _ => format!(
                    "{url} answered {status} ({}); see the gateway's log",
                    body["error"]["message"]
                        .as_str()
                        .unwrap_or("no reason given")
                ),
            });
        }
        let Some(sessions) = body["sessions"].as_array() else {
            return Err(format!(
                "{url} answered without a session list; is {} a ctxkeeper gateway?",
                self.root
            ));
        };
        Ok(sessions
            .iter()
            .filter_map(|s| {
                let id = s["id"].as_str()?.to_owned();
                let listed = (
                    s["version"].as_u64(),
                    s["log_len"].as_u64().unwrap_or(0),
                    s["updated_at_ms"].as_i64().unwrap_or(0),
                );
                Some((id, listed))
            })
            .collect())
    }
}

/// The sessions new or changed between two snapshots, most recently updated first.
fn written_between(before: &Snapshot, after: &Snapshot) -> Vec<(String, String)> {
    let mut written: Vec<(&(String, String), i64)> = after
        .iter()
        .filter(|(key, listed)| before.get(*key) != Some(*listed))
        .map(|(key, listed)| (key, listed.2))
        .collect();
    written.sort_by_key(|(_, updated)| std::cmp::Reverse(*updated));
    written.into_iter().map(|(key, _)| key.clone()).collect()
}

/// The closing note of `wrap --gateway`: the agent's tenant and why, the sessions the run
/// wrote (or why they could not be listed, and the command that lists them), and the
/// console page of the tenant.
fn gateway_note(
    root: &str,
    (tenant, why): &(String, String),
    written: Result<Vec<(String, String)>, String>,
) -> String {
    let mut note = format!("ctxkeeper: the agent's calls went through the gateway at {root}\n");
    note.push_str(&format!("  tenant {tenant} ({why})\n"));
    let store_hint = "add --store URL when the gateway's store is not the default one";
    let mut console_tenant = tenant.clone();
    match written {
        Ok(written) if written.is_empty() => note.push_str(&format!(
            "  no session written: the agent made no model call through the gateway, or it \
             failed (see the agent's output); earlier ones: ctxkeeper sessions list --tenant \
             {tenant} ({store_hint})\n"
        )),
        Ok(written) => {
            if let Some((first, _)) = written.first() {
                console_tenant = first.clone();
            }
            for (written_tenant, id) in &written {
                note.push_str(&format!(
                    "  session {id} (tenant {written_tenant}): ctxkeeper sessions show {id} \
                     --tenant {written_tenant} ({store_hint})\n"
                ));
            }
        }
        Err(why) => note.push_str(&format!(
            "  its sessions are not named here: {why}\n  list them with: ctxkeeper sessions \
             list --tenant {tenant} ({store_hint})\n"
        )),
    }
    note.push_str(&format!(
        "  console: {root}/ui/t/{console_tenant}/sessions\n"
    ));
    note
}

/// The tenant the gateway gives a request carrying `key`, by the gateway's own rule.
fn key_tenant(rule: &TenantRule, key: &str) -> Option<String> {
    // The header map's type comes from the rule's signature: this crate does not name the
    // HTTP crates' types, so it is inferred from a first (empty) call.
    let mut headers = Default::default();
    rule.resolve(&headers).ok()?;
    headers.insert("authorization", format!("Bearer {key}").parse().ok()?);
    rule.resolve(&headers).ok()
}

/// The closing note of a `wrap` run: which tenant and sessions the agent wrote, and the
/// commands and console page to inspect them (newcomers otherwise look in tenant `default`
/// while their sessions sit under `key-…`).
async fn where_sessions_are(
    store: &dyn SessionStore,
    store_url: &str,
    root: &str,
    since_ms: i64,
) -> String {
    let tenants = candidate_tenants();
    let mut note = String::from("ctxkeeper: the gateway has stopped.\n");
    let store_option = format!(" --store {}", ctxkeeper_store::redact(store_url));
    let mut wrote_any = false;
    for tenant in &tenants {
        let Ok(sessions) = store.list(&SessionFilter::tenant(tenant.as_str())).await else {
            continue;
        };
        for session in sessions.iter().filter(|s| s.updated_at_ms >= since_ms) {
            wrote_any = true;
            note.push_str(&format!(
                "  session {} (tenant {tenant}): ctxkeeper sessions show {} --tenant {tenant}{store_option}\n",
                session.key.session(),
                session.key.session(),
            ));
        }
    }
    if !wrote_any {
        let tenant = tenants.first().map_or("default", String::as_str);
        note.push_str(&format!(
            "  no session written; the agent's tenant is {tenant}: ctxkeeper sessions list --tenant {tenant}{store_option}\n"
        ));
    }
    note.push_str(&format!(
        "  console (while a gateway runs): {root}/ui/, or `ctxkeeper ui{store_option}`\n"
    ));
    note
}

/// Starts the agent, waits for it (passing termination signals on) and turns its status into
/// an exit code.
async fn run_child(args: &WrapArgs, kind: AgentKind, root: &str) -> Result<ExitCode> {
    let launch = launch(kind, root);
    if kind == AgentKind::Codex && std::env::var_os("OPENAI_API_KEY").is_none_or(|k| k.is_empty()) {
        // A ChatGPT sign-in does not reach an OpenAI-compatible endpoint: through the gateway
        // Codex sends the API key from OPENAI_API_KEY, and stops at once without one.
        eprintln!(
            "ctxkeeper: OPENAI_API_KEY is not set; Codex needs it to call the API through the gateway"
        );
    }
    let mut command = tokio::process::Command::new(&args.program);
    command
        .args(&launch.leading_args)
        .args(&args.agent_args)
        .envs(launch.env.iter().map(|(k, v)| (*k, v)));
    let mut child = command.spawn().map_err(|error| {
        let program = Path::new(&args.program).display().to_string();
        if error.kind() == std::io::ErrorKind::NotFound {
            InputError::BadOption(format!(
                "cannot run {program:?}: not found on PATH{}",
                install_hint(kind)
            ))
        } else {
            InputError::BadOption(format!("cannot run {program:?}: {error}"))
        }
    })?;
    let status = wait_passing_signals(&mut child).await?;
    Ok(exit_code(status))
}

fn install_hint(kind: AgentKind) -> &'static str {
    match kind {
        AgentKind::Claude => " (install it with `npm install -g @anthropic-ai/claude-code`)",
        AgentKind::Codex => " (install it with `npm install -g @openai/codex`)",
        AgentKind::Mini => " (install it with `pip install mini-swe-agent`)",
        AgentKind::Generic => "",
    }
}

/// Waits for the child. Ctrl-C reaches the whole foreground process group, so the child has
/// it already and decides; SIGTERM and SIGHUP, sent to this process alone, are passed on.
#[cfg(unix)]
async fn wait_passing_signals(
    child: &mut tokio::process::Child,
) -> Result<std::process::ExitStatus> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    use tokio::signal::unix::{SignalKind, signal};

    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    loop {
        let forward = tokio::select! {
            status = child.wait() => return Ok(status?),
            _ = interrupt.recv() => None,
            _ = terminate.recv() => Some(Signal::SIGTERM),
            _ = hangup.recv() => Some(Signal::SIGHUP),
        };
        if let (Some(signal), Some(pid)) = (forward, pid) {
            // The child may have exited in between; then there is nothing to tell.
            let _ = kill(pid, signal);
        }
    }
}

#[cfg(not(unix))]
async fn wait_passing_signals(
    child: &mut tokio::process::Child,
) -> Result<std::process::ExitStatus> {
    Ok(child.wait().await?)
}

/// The child's exit code, or 128 + the signal that ended it (the shells' convention).
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return ExitCode::from(u8::try_from(128 + signal).unwrap_or(255));
        }
    }
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_are_told_apart_by_their_program_name() {
        for (program, kind) in [
            ("claude", AgentKind::Claude),
            ("/usr/local/bin/claude", AgentKind::Claude),
            ("codex", AgentKind::Codex),
            ("node_modules/.bin/codex", AgentKind::Codex),
            ("mini", AgentKind::Mini),
            ("mini-swe-agent", AgentKind::Mini),
            ("python3", AgentKind::Generic),
            ("./my-agent.sh", AgentKind::Generic),
        ] {
            assert_eq!(AgentKind::detect(Path::new(program)), kind, "{program}");
        }
    }

    #[test]
    fn each_agent_gets_its_own_settings() {
        let root = "http://127.0.0.1:4000";
        let claude = launch(AgentKind::Claude, root);
        assert_eq!(claude.env, [("ANTHROPIC_BASE_URL", root.to_string())]);
        assert!(claude.leading_args.is_empty());
        let codex = launch(AgentKind::Codex, root);
        assert!(codex.env.is_empty());
        assert_eq!(codex.leading_args[..2], ["-c", "model_provider=ctxkeeper"]);
        assert_eq!(
            codex.leading_args[3],
            "model_providers.ctxkeeper={name=\"ctxkeeper\",base_url=\"http://127.0.0.1:4000/v1\",\
             env_key=\"OPENAI_API_KEY\",wire_api=\"responses\"}"
        );
        let mini = launch(AgentKind::Mini, root);
        assert!(
            mini.env
                .contains(&("OPENAI_BASE_URL", format!("{root}/v1")))
        );
        assert!(mini.env.contains(&("ANTHROPIC_BASE_URL", root.to_string())));
        assert_eq!(launch(AgentKind::Generic, root), mini);
    }

    #[test]
    fn the_sessions_a_run_wrote_are_those_new_or_changed() {
        let key = |tenant: &str, id: &str| (tenant.to_string(), id.to_string());
        let before = Snapshot::from([
            (key("key-1", "grown"), (Some(1), 2, 10)),
            (key("key-1", "untouched"), (Some(3), 4, 20)),
        ]);
        let mut after = before.clone();
        after.insert(key("key-1", "grown"), (Some(2), 4, 30));
        after.insert(key("default", "new"), (None, 1, 40));
        assert_eq!(
            written_between(&before, &after),
            [key("default", "new"), key("key-1", "grown")],
            "newest first"
        );
        assert!(written_between(&after, &after).is_empty());
        let note = gateway_note(
            "http://gw:8787",
            &("key-1".into(), "why".into()),
            Ok(vec![key("key-2", "s1")]),
        );
        assert!(
            note.contains("session s1 (tenant key-2): ctxkeeper sessions show s1 --tenant key-2"),
            "{note}"
        );
        assert!(
            note.contains("console: http://gw:8787/ui/t/key-2/sessions"),
            "the console opens where the session went: {note}"
        );
    }

    #[test]
    fn gateway_urls_are_checked_and_reduced_to_their_root() {
        for (url, root) in [
            ("http://127.0.0.1:8787", "http://127.0.0.1:8787"),
            ("http://127.0.0.1:8787/", "http://127.0.0.1:8787"),
            ("http://127.0.0.1:8787/v1", "http://127.0.0.1:8787"),
            ("https://gw.example/v1/", "https://gw.example"),
            ("http://gw.example/team-a", "http://gw.example/team-a"),
        ] {
            assert_eq!(gateway_root(url).expect(url), root, "{url}");
        }
        for (url, why) in [
            ("127.0.0.1:8787", "http:// or https://"),
            ("ftp://x", "http:// or https://"),
            ("http://x/?a=1", "query"),
            ("not a url", "http:// or https://"),
        ] {
            let error = gateway_root(url).expect_err(url).to_string();
            assert!(error.contains(why), "{url}: {error}");
        }
    }
}
