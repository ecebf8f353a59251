//! `ctxkeeper sessions`: inspect and maintain a session store.
//!
//! ```text
//! ctxkeeper sessions list                       sessions of the tenant, newest first
//! ctxkeeper sessions tenants                    every tenant holding sessions, how many, and
//!                                               when each was last written
//! ctxkeeper sessions show S                     what `/context` shows: messages, roles, tokens,
//!                                               summary, extensions, archived items
//! ctxkeeper sessions history S --last 5         the last entries of the session log
//! ctxkeeper sessions search "disk full"         ranked hits across the tenant (or --session S)
//! ctxkeeper sessions clear S                    removes the session's state and log
//! ctxkeeper sessions gc --older-than 30d        retention clean-up
//! ctxkeeper sessions gc --policy cowagent       … at the policy's retention (30 days)
//! ctxkeeper sessions restore S --policy cowagent
//!                                               what a resume after a restart brings back
//!                                               (CowAgent: the last 3 turns, text only);
//!                                               --save stores it as the session's context
//! ```
//!
//! Every command takes `--store URL` (or `CTXKEEPER_STORE`) and `--tenant T`. Without a store
//! the default is SQLite at `$XDG_DATA_HOME/ctxkeeper/sessions.db`, else
//! `$HOME/.local/share/ctxkeeper/sessions.db`, else `./.ctxkeeper/sessions.db`
//! ([`default_store_url`]). A session is named by its id; `--user` and `--agent` pick one when
//! the same id exists under several users or agents of the tenant.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use ctxkeeper_core::model::Role;
use ctxkeeper_core::stats::thousands;
use ctxkeeper_core::tokens::{Profiles, TokenModel};
use ctxkeeper_store::archive::{ArchiveEntry, Offloader};
use ctxkeeper_store::{
    HistoryPage, Retention, SearchQuery, SessionFilter, SessionInfo, SessionKey, SessionStore,
    StoreError, TenantInfo, format_timestamp, is_sql_url, open_archive, open_store,
};
use serde_json::json;

/// `ctxkeeper sessions …`
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// The session store: sqlite://PATH, file://DIR, postgres://…, mysql://…, redis://…,
    /// memory:// (default: SQLite in the user's data directory, see the docs).
    #[arg(long, global = true, value_name = "URL", env = "CTXKEEPER_STORE")]
    pub store: Option<String>,

    /// The tenant whose sessions are shown.
    #[arg(long, global = true, default_value = "default", value_name = "TENANT")]
    pub tenant: String,

    /// Only this user's sessions (and the user of a session named by id).
    #[arg(long, global = true, value_name = "USER")]
    pub user: Option<String>,

    /// Only this agent's sessions (and the agent of a session named by id).
    #[arg(long, global = true, value_name = "AGENT")]
    pub agent: Option<String>,

    /// Print JSON instead of the human report.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: SessionsCommand,
}

/// The `sessions` subcommands.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List the tenant's sessions, most recently updated first.
    List,
    /// List every tenant that holds sessions (the gateway files an agent's sessions under
    /// its API key's tenant, `key-…`), with the number of sessions, most recently updated
    /// first.
    Tenants,
    /// Context statistics of a session: message count, role distribution, tokens, summary,
    /// extensions and archived items.
    Show {
        /// The session id.
        session: String,
        /// The model whose tokenizer counts the context.
        #[arg(long, default_value = "gpt-4o", value_name = "MODEL")]
        model: String,
        /// Where archived items live (a workspace directory or an archive URL); default: the
        /// workspace `serve` and `wrap` archive into, and the store's own database for SQL
        /// stores.
        #[arg(long, value_name = "URL_OR_DIR")]
        archive: Option<String>,
    },
    /// The last entries of a session's log.
    History {
        /// The session id.
        session: String,
        /// How many entries.
        #[arg(long, default_value_t = 20, value_name = "N")]
        last: usize,
        /// Only entries before this sequence number (to page backwards).
        #[arg(long, value_name = "SEQ")]
        before: Option<u64>,
    },
    /// Full-text search over session logs; every hit names its session.
    Search {
        /// Words to look for.
        query: String,
        /// Search one session instead of the whole tenant.
        #[arg(long, value_name = "SESSION")]
        session: Option<String>,
        /// At most this many hits.
        #[arg(long, default_value_t = 20, value_name = "N")]
        limit: usize,
    },
    /// Remove a session's state and log.
    Clear {
        /// The session id.
        session: String,
    },
    /// What resuming a session after a restart brings back under a policy's
    /// `[session] restore_recent_turns` (cowagent: the last max(3, 20 / 6) = 3 turns, each
    /// its user text and final reply); `--save` stores that as the session's context.
    Restore {
        /// The session id.
        session: String,
        /// The policy whose restore strategy applies (a policy without one restores all).
        #[arg(long, default_value = "cowagent", value_name = "NAME")]
        policy: String,
        /// Save the restored context as the session's state (compare-and-swap; the log is
        /// kept whole).
        #[arg(long)]
        save: bool,
    },
    /// Remove sessions not updated for a while (retention clean-up).
    Gc {
        /// Age limit: a number with a unit, s, m, h or d (default: the policy's retention,
        /// else 30d).
        #[arg(long, value_name = "AGE")]
        older_than: Option<String>,
        /// Take the age limit from this policy's `[session] retention_days` (cowagent: 30).
        #[arg(long, value_name = "NAME", conflicts_with = "older_than")]
        policy: Option<String>,
        /// Clean every tenant, not only --tenant.
        #[arg(long)]
        all_tenants: bool,
        /// The workspace the sessions archived into: each removed session's folder there
        /// (`sessions/<id>/`) goes too (default: the workspace `serve` and `wrap` archive
        /// into, when the store is the default one too).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
}

/// The store used when none is given: SQLite under `$XDG_DATA_HOME/ctxkeeper/`, else
/// `$HOME/.local/share/ctxkeeper/`, else `./.ctxkeeper/`.
pub fn default_store_url() -> String {
    let path = ctxkeeper_gateway::config::GatewayConfig::default_data_dir().join("sessions.db");
    format!("sqlite://{}", path.display())
}

/// Runs the command on its own tokio runtime.
pub fn run(args: &SessionsArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut out = String::new();
    runtime.block_on(execute(args, &mut out))?;
    print!("{out}");
    Ok(())
}

/// Runs the command and writes its report to `out`.
async fn execute(args: &SessionsArgs, out: &mut String) -> Result<()> {
    let url = args.store.clone().unwrap_or_else(default_store_url);
    let store = open_store(&url).await.with_context(|| {
        format!(
            "cannot open the session store {}",
            ctxkeeper_store::redact(&url)
        )
    })?;
    match &args.command {
        SessionsCommand::List => list(args, &*store, out).await,
        SessionsCommand::Tenants => tenants(args, &*store, out).await,
        SessionsCommand::Show {
            session,
            model,
            archive,
        } => {
            let gateway_workspace = ctxkeeper_gateway::config::GatewayConfig::new(
                ctxkeeper_gateway::config::GatewayConfig::default_data_dir(),
            )
            .workspace;
            let archives = archives_to_read(archive.as_deref(), &url, &gateway_workspace);
            show(args, &*store, session, model, &archives, out).await
        }
        SessionsCommand::History {
            session,
            last,
            before,
        } => {
            let key = resolve(args, &*store, session).await?;
            let page = HistoryPage {
                last: *last,
                before_seq: *before,
            };
            let entries = store.history(&key, page).await?;
            if args.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&entries)?)?;
                return Ok(());
            }
            if entries.is_empty() {
                writeln!(out, "no log entries for {key}")?;
            }
            for entry in entries {
                let text = one_line(&entry.message.text(), 160);
                let calls: Vec<&str> = entry
                    .message
                    .tool_calls()
                    .map(|(_, name, _)| name)
                    .collect();
                let calls = if calls.is_empty() {
                    String::new()
                } else {
                    format!(" [calls {}]", calls.join(", "))
                };
                writeln!(
                    out,
                    "#{:<5} {}  {:<9} {text}{calls}",
                    entry.seq,
                    format_timestamp(entry.at_ms),
                    entry.message.role.as_str()
                )?;
            }
            Ok(())
        }
        SessionsCommand::Search {
            query,
            session,
            limit,
        } => {
            let mut search = match session {
                Some(session) => {
                    SearchQuery::session(resolve(args, &*store, session).await?, query.as_str())
                }
                None => SearchQuery::tenant(args.tenant.as_str(), query.as_str()),
            };
            search.limit = *limit;
            let hits = store.search(&search).await?;
            if args.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&hits)?)?;
                return Ok(());
            }
            if hits.is_empty() {
                writeln!(out, "no matches for {query:?} in tenant {}", args.tenant)?;
            }
            for hit in hits {
                writeln!(
                    out,
                    "{}  #{}  score {:.3}  {}",
                    hit.key.session(),
                    hit.seq,
                    hit.score,
                    one_line(&hit.snippet, 160)
                )?;
                if hit.key.user() != SessionKey::DEFAULT || hit.key.agent() != SessionKey::DEFAULT {
                    writeln!(
                        out,
                        "    (user {}, agent {})",
                        hit.key.user(),
                        hit.key.agent()
                    )?;
                }
            }
            Ok(())
        }
        SessionsCommand::Clear { session } => {
            let key = resolve(args, &*store, session).await?;
            let removed = store.delete(&key).await?;
            if args.json {
                writeln!(out, "{}", json!({"session": key, "removed": removed}))?;
            } else if removed {
                writeln!(out, "cleared {key}")?;
            } else {
                writeln!(out, "nothing to clear for {key}")?;
            }
            Ok(())
        }
        SessionsCommand::Restore {
            session,
            policy,
            save,
        } => restore(args, &*store, session, policy, *save, out).await,
        SessionsCommand::Gc {
            older_than,
            policy,
            all_tenants,
            workspace,
        } => {
            let older_than = match (older_than, policy) {
                (Some(age), _) => age.clone(),
                (None, Some(name)) => {
                    let days = named_policy(name)?.session.retention_days.ok_or_else(|| {
                        anyhow!("policy {name:?} sets no retention ([session] retention_days)")
                    })?;
                    format!("{days}d")
                }
                (None, None) => "30d".to_string(),
            };
            let older_than = &older_than;
            let retention = Retention {
                max_age: parse_age(older_than)?,
            };
            let tenant = (!all_tenants).then_some(args.tenant.as_str());
            let workspace = match gc_workspace(workspace.as_deref(), args.store.is_none()) {
                Some(dir) => Some(
                    ctxkeeper_store::LocalWorkspace::new(&dir)
                        .with_context(|| format!("cannot open the workspace {}", dir.display()))?,
                ),
                None => None,
            };
            let expired = ctxkeeper_store::retention::expire_sessions(
                &*store,
                tenant,
                retention,
                workspace.as_ref(),
            )
            .await?;
            let removed = expired.sessions;
            if args.json {
                writeln!(
                    out,
                    "{}",
                    json!({
                        "removed": removed,
                        "archives_removed": expired.archives,
                        "workspace": workspace.as_ref().map(|w| w.root().display().to_string()),
                        "older_than_secs": retention.max_age.as_secs(),
                    })
                )?;
            } else {
                let scope = tenant.map_or("all tenants".to_string(), |t| format!("tenant {t}"));
                writeln!(
                    out,
                    "removed {removed} session(s) of {scope} not updated for {older_than}"
                )?;
                if let Some(workspace) = &workspace {
                    writeln!(
                        out,
                        "removed {} archive folder(s) from {}",
                        expired.archives,
                        workspace.root().display()
                    )?;
                }
            }
            Ok(())
        }
    }
}

/// The workspace `sessions gc` cleans: the one given, else, for the default store, the
/// default workspace `serve` and `wrap` archive into beside it (when it exists). A store named
/// on the command line may have archived anywhere, so nothing is guessed for it.
fn gc_workspace(given: Option<&std::path::Path>, default_store: bool) -> Option<PathBuf> {
    if let Some(dir) = given {
        return Some(dir.to_path_buf());
    }
    if !default_store {
        return None;
    }
    let config = ctxkeeper_gateway::config::GatewayConfig::new(
        ctxkeeper_gateway::config::GatewayConfig::default_data_dir(),
    );
    let dir = PathBuf::from(config.workspace);
    dir.is_dir().then_some(dir)
}

/// A preset by name, with the list of names when it is unknown.
fn named_policy(name: &str) -> Result<ctxkeeper_core::engine::PolicyConfig> {
    Ok(ctxkeeper_core::engine::presets::lookup(name)?)
}

/// `sessions restore`: the context a resume brings back under the policy's restore strategy.
async fn restore(
    args: &SessionsArgs,
    store: &dyn SessionStore,
    session: &str,
    policy: &str,
    save: bool,
    out: &mut String,
) -> Result<()> {
    use ctxkeeper::snapshot::{self, Snapshot};
    use ctxkeeper_core::engine::ContextState;
    use ctxkeeper_store::restore::{RestoreStrategy, restore};

    let policy = named_policy(policy)?;
    let key = resolve(args, store, session).await?;
    let Some((loaded, version)) = snapshot::load(store, &key).await? else {
        bail!("no stored state for {key}");
    };
    let strategy = match policy.session.restore_recent_turns {
        Some(max_turns) => RestoreStrategy::RecentTurns { max_turns },
        None => RestoreStrategy::Full,
    };
    let before = loaded.context.entries.len();
    // CowAgent restores from its message store, what the user and the agent really said (the
    // last final reply included), not from a compacted context; a policy that restores all
    // brings back the saved context (HarnessAgent).
    let source = match policy.session.restored_turns() {
        Some(keep) => log_for_recent_turns(store, &key, keep).await?,
        None => loaded.context.to_messages(),
    };
    let messages = restore(&source, strategy);
    let turns = ctxkeeper_core::model::turns(&messages).len();
    let mut saved = None;
    if save {
        let mut context = ContextState::from_messages(messages.clone());
        for entry in &mut context.entries {
            entry.meta.log_index = None;
        }
        context.appended = loaded.context.appended;
        context.compactions = loaded.context.compactions;
        // The client record described the old context: a client resending its history
        // starts over from the restored one.
        let snapshot = Snapshot::new(context);
        saved = Some(
            snapshot::save(store, &key, &snapshot, Some(version), &[])
                .await
                .with_context(|| format!("cannot save the restored context of {key}"))?,
        );
    }
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "session": key,
                "policy": policy.name,
                "strategy": strategy,
                "messages_before": before,
                "messages_after": messages.len(),
                "turns": turns,
                "saved": saved.is_some(),
                "messages": messages,
            }))?
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "{key}: a resume under {} brings back {} of {before} messages ({turns} turns){}",
        policy.name,
        messages.len(),
        if saved.is_some() { "; saved" } else { "" }
    )?;
    for message in &messages {
        writeln!(
            out,
            "  {:<9} {}",
            message.role.as_str(),
            one_line(&message.text(), 140)
        )?;
    }
    Ok(())
}

/// Enough of the session's log for its last `keep` turns: its tail, read backwards in pages
/// until it holds more than `keep` turn starts (the oldest may be cut) or reaches the log's
/// start, behind the instructions the log opens with.
async fn log_for_recent_turns(
    store: &dyn SessionStore,
    key: &SessionKey,
    keep: usize,
) -> Result<Vec<ctxkeeper_core::model::Message>> {
    const PAGE: usize = 500;
    let mut tail: Vec<ctxkeeper_core::model::Message> = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .history(
                key,
                HistoryPage {
                    last: PAGE,
                    before_seq: before,
                },
            )
            .await
            .with_context(|| format!("cannot read the log of {key}"))?;
        let Some(first) = page.first() else {
            return Ok(tail);
        };
        let reached_start = first.seq <= 1 || page.len() < PAGE;
        before = Some(first.seq);
        tail.splice(0..0, page.into_iter().map(|entry| entry.message));
        if reached_start {
            return Ok(tail);
        }
        if ctxkeeper_core::model::turns(&tail).len() > keep {
            break;
        }
    }
    // The instructions (system or developer messages) the log opens with.
    let head = store
        .history(key, HistoryPage::before(PAGE, PAGE as u64 + 1))
        .await
        .with_context(|| format!("cannot read the log of {key}"))?;
    let mut messages: Vec<ctxkeeper_core::model::Message> = head
        .into_iter()
        .map(|entry| entry.message)
        .take_while(|message| message.role.is_instruction())
        .collect();
    messages.extend(tail);
    Ok(messages)
}

fn filter(args: &SessionsArgs) -> SessionFilter {
    SessionFilter {
        tenant: args.tenant.clone(),
        user: args.user.clone(),
        agent: args.agent.clone(),
    }
}

/// The full key of a session named by id: `--user`/`--agent` when given, otherwise the one
/// session of the tenant with that id (the default user and agent when there is none yet).
async fn resolve(
    args: &SessionsArgs,
    store: &dyn SessionStore,
    session: &str,
) -> Result<SessionKey> {
    if let (Some(user), Some(agent)) = (&args.user, &args.agent) {
        return Ok(SessionKey::new(
            args.tenant.as_str(),
            user.as_str(),
            agent.as_str(),
            session,
        )?);
    }
    let matches: Vec<SessionInfo> = store
        .list(&filter(args))
        .await?
        .into_iter()
        .filter(|info| info.key.session() == session)
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.key.clone()),
        [] => Ok(SessionKey::new(
            args.tenant.as_str(),
            args.user.as_deref().unwrap_or(SessionKey::DEFAULT),
            args.agent.as_deref().unwrap_or(SessionKey::DEFAULT),
            session,
        )?),
        several => {
            let names: Vec<String> = several.iter().map(|i| i.key.to_string()).collect();
            bail!(
                "session {session:?} exists more than once; pick one with --user and --agent: {}",
                names.join(", ")
            )
        }
    }
}

async fn list(args: &SessionsArgs, store: &dyn SessionStore, out: &mut String) -> Result<()> {
    let sessions = store.list(&filter(args)).await?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&sessions)?)?;
        return Ok(());
    }
    if sessions.is_empty() {
        writeln!(out, "no sessions in tenant {}", args.tenant)?;
        elsewhere(args, store, out).await?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<32} {:<12} {:<16} {:>8} {:>8}  updated",
        "session", "user", "agent", "version", "log"
    )?;
    for info in &sessions {
        writeln!(
            out,
            "{:<32} {:<12} {:<16} {:>8} {:>8}  {}",
            info.key.session(),
            info.key.user(),
            info.key.agent(),
            info.version.map_or("-".to_string(), |v| v.to_string()),
            info.log_len,
            format_timestamp(info.updated_at_ms)
        )?;
    }
    writeln!(out, "{} session(s)", sessions.len())?;
    Ok(())
}

/// Tenants named after an empty listing before the rest is left to `sessions tenants`.
const TENANTS_NAMED: usize = 10;

/// After an empty listing: the tenants that do hold sessions, the API key's first, and the
/// command that lists one of them. The gateway files sessions under the API key's tenant
/// (`key-…`), not `default`, so a newcomer's first `sessions list` is usually empty.
async fn elsewhere(args: &SessionsArgs, store: &dyn SessionStore, out: &mut String) -> Result<()> {
    let yours = crate::wrap::candidate_tenants();
    let mut held: Vec<TenantInfo> = match store.tenants().await {
        Ok(tenants) => tenants,
        // A store that cannot list its tenants: look where this environment's keys lead.
        Err(StoreError::NotImplemented(_)) => {
            let mut held = Vec::new();
            for tenant in &yours {
                let sessions = store.list(&SessionFilter::tenant(tenant.as_str())).await?;
                if let Some(newest) = sessions.iter().map(|s| s.updated_at_ms).max() {
                    held.push(TenantInfo {
                        tenant: tenant.clone(),
                        sessions: sessions.len() as u64,
                        updated_at_ms: newest,
                    });
                }
            }
            held
        }
        Err(err) => return Err(err).context("cannot list the store's tenants"),
    };
    held.retain(|t| t.tenant != args.tenant);
    if held.is_empty() {
        writeln!(
            out,
            "no tenant of this store holds sessions yet: {FIRST_SESSION}"
        )?;
        return Ok(());
    }
    // The API key's tenants first (stable: the rest stay most recently updated first).
    held.sort_by_key(|t| !yours.contains(&t.tenant));
    for info in held.iter().take(TENANTS_NAMED) {
        let whose = if yours.contains(&info.tenant) {
            " (your API key's)"
        } else {
            ""
        };
        writeln!(
            out,
            "tenant {}{whose} has {} session(s): pass --tenant {}",
            info.tenant, info.sessions, info.tenant
        )?;
    }
    if held.len() > TENANTS_NAMED {
        writeln!(
            out,
            "… and {} more tenant(s): ctxkeeper sessions tenants{}",
            held.len() - TENANTS_NAMED,
            store_option(args)
        )?;
    }
    writeln!(
        out,
        "list them with: ctxkeeper sessions list --tenant {}{}",
        held[0].tenant,
        store_option(args)
    )?;
    Ok(())
}

/// How a store gets its first session, for the messages about an empty one.
const FIRST_SESSION: &str = "run an agent through the gateway (`ctxkeeper wrap AGENT`) or keep \
     a replay (`ctxkeeper replay TRACE --store URL --session ID`)";

/// ` --store URL` (password redacted) when the store was given, for commands to copy.
fn store_option(args: &SessionsArgs) -> String {
    args.store
        .as_deref()
        .map(|url| format!(" --store {}", ctxkeeper_store::redact(url)))
        .unwrap_or_default()
}

/// `sessions tenants`: every tenant with sessions, most recently updated first.
async fn tenants(args: &SessionsArgs, store: &dyn SessionStore, out: &mut String) -> Result<()> {
    let tenants = store.tenants().await.with_context(|| {
        format!(
            "cannot list the tenants of the {} store; list one tenant's sessions with \
             `ctxkeeper sessions list --tenant T`",
            store.backend()
        )
    })?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&tenants)?)?;
        return Ok(());
    }
    if tenants.is_empty() {
        writeln!(out, "no sessions in this store: {FIRST_SESSION}")?;
        return Ok(());
    }
    let yours = crate::wrap::candidate_tenants();
    let width = tenants
        .iter()
        .map(|t| t.tenant.len())
        .max()
        .unwrap_or(0)
        .max("tenant".len());
    writeln!(out, "{:<width$} {:>8}  updated", "tenant", "sessions")?;
    for info in &tenants {
        let whose = if yours.contains(&info.tenant) {
            "  (your API key's)"
        } else {
            ""
        };
        writeln!(
            out,
            "{:<width$} {:>8}  {}{whose}",
            info.tenant,
            info.sessions,
            format_timestamp(info.updated_at_ms)
        )?;
    }
    writeln!(
        out,
        "{} tenant(s); list one's sessions with: ctxkeeper sessions list --tenant {}{}",
        tenants.len(),
        tenants[0].tenant,
        store_option(args)
    )?;
    Ok(())
}

/// The archives `sessions show` reads: the one given, else every place a session's content
/// may have gone: the directory `serve` and `wrap` archive into by default (when it exists)
/// and, for SQL stores, the store's own database (where `replay --store` archives). Reading
/// only the database said "archived none" for gateway sessions that did archive.
fn archives_to_read(given: Option<&str>, store_url: &str, gateway_workspace: &str) -> Vec<String> {
    if let Some(given) = given {
        return vec![given.to_owned()];
    }
    let mut archives = Vec::new();
    if std::path::Path::new(gateway_workspace).is_dir() {
        archives.push(gateway_workspace.to_owned());
    }
    if is_sql_url(store_url) {
        archives.push(store_url.to_owned());
    }
    archives
}

async fn show(
    args: &SessionsArgs,
    store: &dyn SessionStore,
    session: &str,
    model: &str,
    archives: &[String],
    out: &mut String,
) -> Result<()> {
    let key = resolve(args, store, session).await?;
    let info = store
        .list(&filter(args))
        .await?
        .into_iter()
        .find(|i| i.key == key);
    let Some(info) = info else {
        return Err(anyhow!("no session {session:?} in tenant {}", args.tenant));
    };
    let loaded = store.load(&key).await?;
    let context = loaded
        .as_ref()
        .map(|v| v.state.context.as_slice())
        .unwrap_or_default();
    let mut roles: BTreeMap<&'static str, usize> = BTreeMap::new();
    for message in context {
        *roles.entry(message.role.as_str()).or_default() += 1;
    }
    let characters: usize = context.iter().map(|m| m.text().chars().count()).sum();
    let token_model = TokenModel::for_model(model, &Profiles::builtin());
    let tokens = token_model.messages_tokens(context);
    let summary = loaded.as_ref().and_then(|v| v.state.summary.clone());
    let extensions: Vec<String> = loaded
        .as_ref()
        .map(|v| v.state.extensions.keys().cloned().collect())
        .unwrap_or_default();
    let mut archived: Option<Vec<ArchiveEntry>> = None;
    for url in archives {
        let archive: std::sync::Arc<dyn Offloader> = open_archive(url)
            .await
            .with_context(|| format!("cannot open the archive {}", ctxkeeper_store::redact(url)))?;
        let entries = archive.list(&key.archive_scope()).await?;
        archived.get_or_insert_with(Vec::new).extend(entries);
    }

    if args.json {
        let report = json!({
            "session": key,
            "version": info.version,
            "log_entries": info.log_len,
            "created_at_ms": info.created_at_ms,
            "updated_at_ms": info.updated_at_ms,
            "messages": context.len(),
            "roles": roles,
            "characters": characters,
            "tokens": tokens,
            "model": model,
            "summary_present": summary.is_some(),
            "summary": summary,
            "extensions": extensions,
            "archived": archived,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }

    writeln!(out, "session     {key}")?;
    match info.version {
        Some(version) => writeln!(
            out,
            "state       version {version}, updated {}",
            format_timestamp(info.updated_at_ms)
        )?,
        None => writeln!(
            out,
            "state       none saved (log only), updated {}",
            format_timestamp(info.updated_at_ms)
        )?,
    }
    writeln!(
        out,
        "messages    {} in context, {} in the session log",
        context.len(),
        info.log_len
    )?;
    let order = [
        Role::System,
        Role::Developer,
        Role::User,
        Role::Assistant,
        Role::Tool,
    ];
    let distribution: Vec<String> = order
        .iter()
        .filter_map(|role| {
            roles
                .get(role.as_str())
                .map(|n| format!("{} {n}", role.as_str()))
        })
        .collect();
    writeln!(
        out,
        "roles       {}",
        if distribution.is_empty() {
            "-".to_string()
        } else {
            distribution.join(", ")
        }
    )?;
    writeln!(
        out,
        "tokens      {} ({model}), {} characters",
        thousands(tokens),
        thousands(characters as u64)
    )?;
    match &summary {
        Some(serde_json::Value::Object(fields)) => {
            let names: Vec<&str> = fields.keys().map(String::as_str).collect();
            writeln!(out, "summary     present ({})", names.join(", "))?;
        }
        Some(_) => writeln!(out, "summary     present")?,
        None => writeln!(out, "summary     none")?,
    }
    writeln!(
        out,
        "extensions  {}",
        if extensions.is_empty() {
            "-".to_string()
        } else {
            extensions.join(", ")
        }
    )?;
    match archived {
        Some(entries) if entries.is_empty() => writeln!(out, "archived    none")?,
        Some(entries) => {
            let bytes: u64 = entries.iter().map(|e| e.bytes).sum();
            writeln!(
                out,
                "archived    {} item(s), {} bytes",
                entries.len(),
                thousands(bytes)
            )?;
            for entry in entries.iter().take(20) {
                writeln!(
                    out,
                    "            {}  ({} bytes)",
                    entry.reference,
                    thousands(entry.bytes)
                )?;
            }
            if entries.len() > 20 {
                writeln!(out, "            … and {} more", entries.len() - 20)?;
            }
        }
        None => writeln!(
            out,
            "archived    (no archive given: pass --archive DIR_OR_URL)"
        )?,
    }
    Ok(())
}

/// `30d`, `12h`, `90m`, `3600s` (a bare number is seconds).
fn parse_age(text: &str) -> Result<Duration> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .with_context(|| format!("bad age {text:?}: expected e.g. 30d"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        other => bail!("bad age unit {other:?} in {text:?}: use s, m, h or d"),
    };
    Ok(Duration::from_secs(n.saturating_mul(seconds)))
}

/// The text on one line, cut to about `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests;
