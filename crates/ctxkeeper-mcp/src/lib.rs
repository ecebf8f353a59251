//! ctxkeeper-mcp: the MCP server that lets an agent pull back what compaction moved out of its
//! context.
//!
//! When ctxkeeper compacts a session, old tool outputs and prefixes of the conversation leave
//! the context and land in the archive; the placeholder left behind names an archive
//! reference (`sessions/s1/tool_result-call_7.txt`). The session log keeps every message ever
//! seen, uncompacted. This crate exposes both to the agent as MCP tools:
//!
//! | tool | what it does |
//! | --- | --- |
//! | `session_list` | the tenant's stored sessions |
//! | `session_history` | the last N messages of a session log, paged backwards by sequence |
//! | `session_search` | ranked full-text search over session logs, with snippets |
//! | `context_read` | an archived item by the reference a placeholder shows, paged |
//! | `context_grep` | a regular expression over a session's archive, with line numbers |
//! | `context_list` | a session's archived items, optionally filtered by a glob |
//! | `memory_search`, `memory_get` | long-term memory (`MEMORY.md`, daily files) |
//! | `context_stats` | budget used against the window, summary, message and tool counts |
//! | `compact` | compacts the stored session now, with optional focus instructions |
//!
//! Every tool is confined to one tenant and, when the server is started for one session, to
//! that session. References and globs never reach outside the archive. Bad input — a hostile
//! path, another tenant's reference, an oversized query, an invalid regular expression — comes
//! back as a tool error (`isError: true`) with a message a model can act on, never as content
//! and never as a protocol failure.
//!
//! The server runs over stdio ([`serve_stdio`]) or streamable HTTP ([`router`] to mount it in
//! an axum application, [`serve_http`] standalone). A host that serves several tenants on one
//! endpoint (the gateway's `/mcp`) mounts a [`TenantEndpoint`] instead, which picks the tenant
//! of every request by the host's rule. HTTP accepts only loopback `Host` headers unless more
//! hosts are allowed explicitly.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use ctxkeeper::core::model::Message;
//! use ctxkeeper::store::{open_store, AgentState, SessionKey};
//! use ctxkeeper_mcp::{ContextServer, ServerConfig};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store_url = format!("sqlite://{}", dir.path().join("sessions.db").display());
//! let store = open_store(&store_url).await.unwrap();
//! let key = SessionKey::simple("s1").unwrap();
//! store.append(&key, &[Message::user("the invoice is overdue")]).await.unwrap();
//!
//! let mut config = ServerConfig::new(&store_url, dir.path().join("workspace"));
//! config.session = Some("s1".to_string());
//! let server: ContextServer = config.open().await.unwrap();
//! let found = server.call("session_search", serde_json::json!({"query": "invoice"})).await;
//! assert_eq!(found.is_error, Some(false));
//! let refused = server.call("session_history", serde_json::json!({"session": "s2"})).await;
//! assert_eq!(refused.is_error, Some(true));
//! # });
//! ```

pub mod observe;
mod server;
mod tenants;
mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use ctxkeeper::core::engine::{PolicyConfig, presets};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::llm::{ExtractiveSummarizer, Summarizer};
use ctxkeeper::store::archive::Offloader;
use ctxkeeper::store::memory::LongTermMemory;
use ctxkeeper::store::state::validate_identifier;
use ctxkeeper::store::{SessionStore, open_archive, open_store, redact};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};

pub use observe::{ToolCallObserver, ToolCallRecord};
pub use server::ContextServer;
pub use tenants::{MAX_TENANTS, TenantEndpoint, TenantLimits, TenantRefusal, TenantResolver};

/// Where the server's data lives and what it is allowed to see.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The session store URL (`sqlite://PATH`, `postgres://…`, `file://DIR`, …).
    pub store: String,
    /// The archive: a workspace directory (or an archive URL `open_archive` accepts).
    pub workspace: PathBuf,
    /// The one tenant every tool works in.
    pub tenant: String,
    /// When set, every tool is confined to this session.
    pub session: Option<String>,
    /// Long-term memory root (default: the workspace directory).
    pub memory_dir: Option<PathBuf>,
    /// The policy `compact` runs (a preset name).
    pub policy: String,
    /// The model whose tokenizer and window budgets are measured with.
    pub model: String,
    /// The context window in tokens (default: the model's).
    pub window: Option<u64>,
    /// The summarizer `compact` uses (default: the extractive one).
    pub summarizer: Option<Arc<dyn Summarizer>>,
}

impl ServerConfig {
    /// A configuration for the default tenant, all sessions, the `default` policy and gpt-4o.
    pub fn new(store: impl Into<String>, workspace: impl Into<PathBuf>) -> ServerConfig {
        ServerConfig {
            store: store.into(),
            workspace: workspace.into(),
            tenant: ctxkeeper::store::SessionKey::DEFAULT.to_string(),
            session: None,
            memory_dir: None,
            policy: "default".to_string(),
            model: "gpt-4o".to_string(),
            window: None,
            summarizer: None,
        }
    }

    /// Opens the store, the archive and memory, and builds the server.
    pub async fn open(&self) -> Result<ContextServer, SetupError> {
        let options = self.options()?;
        let store = open_store(&self.store).await.map_err(|e| {
            SetupError::caused(format!("cannot open the store {}", redact(&self.store)), e)
        })?;
        let workspace = self.workspace.to_string_lossy().into_owned();
        let archive = open_archive(&workspace)
            .await
            .map_err(|e| SetupError::caused(format!("cannot open the workspace {workspace}"), e))?;
        let memory_root = self
            .memory_dir
            .clone()
            .unwrap_or_else(|| self.workspace.clone());
        let memory = LongTermMemory::new(&memory_root).map_err(|e| {
            SetupError::caused(
                format!("cannot open the memory directory {}", memory_root.display()),
                e,
            )
        })?;
        ContextServer::new(
            Services {
                store,
                archive,
                memory: Some(Arc::new(memory)),
                summarizer: self
                    .summarizer
                    .clone()
                    .unwrap_or_else(|| Arc::new(ExtractiveSummarizer::default())),
                tool_calls: None,
            },
            options,
        )
    }

    /// The scope and budget settings, validated.
    pub fn options(&self) -> Result<Options, SetupError> {
        let policy = presets::lookup(&self.policy).map_err(|e| SetupError::new(e.to_string()))?;
        let profiles = Profiles::builtin();
        let model = TokenModel::for_model(&self.model, &profiles);
        let window = self
            .window
            .unwrap_or_else(|| policy.window_for(&model.profile, &profiles));
        let options = Options {
            tenant: self.tenant.clone(),
            session: self.session.clone(),
            policy,
            model,
            window,
        };
        options.validate()?;
        Ok(options)
    }
}

/// The backends the tools read and write.
#[derive(Debug, Clone)]
pub struct Services {
    pub store: Arc<dyn SessionStore>,
    pub archive: Arc<dyn Offloader>,
    /// `None` makes the memory tools answer that memory is not configured.
    pub memory: Option<Arc<LongTermMemory>>,
    /// The summarizer `compact` uses.
    pub summarizer: Arc<dyn Summarizer>,
    /// Told of every answered tool call (the host's tracing), when set.
    pub tool_calls: Option<Arc<dyn ToolCallObserver>>,
}

impl Services {
    /// The backends of a host that already holds the session store and the archive (the
    /// gateway): the same store and archive handles, long-term memory in the workspace
    /// directory when `workspace` is one, and the extractive summarizer. Sharing the handles
    /// matters for a `memory://` archive, which lives only inside the handle that created it.
    pub async fn over_store(
        store: Arc<dyn SessionStore>,
        archive: Arc<dyn Offloader>,
        workspace: &str,
    ) -> Result<Services, SetupError> {
        let scheme = workspace
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        let directory = match scheme.as_deref() {
            None => Some(PathBuf::from(workspace)),
            Some("file") => workspace
                .split_once("://")
                .map(|(_, path)| PathBuf::from(path)),
            Some(_) => None,
        };
        let memory = match directory {
            Some(dir) => Some(Arc::new(LongTermMemory::new(&dir).map_err(|e| {
                SetupError::caused(
                    format!("cannot open the memory directory {}", dir.display()),
                    e,
                )
            })?)),
            None => None,
        };
        Ok(Services {
            store,
            archive,
            memory,
            summarizer: Arc::new(ExtractiveSummarizer::default()),
            tool_calls: None,
        })
    }
}

/// Scope and budget settings of a server.
#[derive(Debug, Clone)]
pub struct Options {
    pub tenant: String,
    pub session: Option<String>,
    pub policy: PolicyConfig,
    pub model: TokenModel,
    pub window: u64,
}

impl Options {
    pub(crate) fn validate(&self) -> Result<(), SetupError> {
        validate_identifier("tenant", &self.tenant).map_err(|e| SetupError::new(e.to_string()))?;
        if let Some(session) = &self.session {
            validate_identifier("session", session).map_err(|e| SetupError::new(e.to_string()))?;
        }
        if self.window == 0 {
            return Err(SetupError::new("the window must be greater than 0"));
        }
        Ok(())
    }
}

/// The server could not start: a bad option or an unreachable backend. `source()` is the
/// backend's own error when there is one.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct SetupError {
    message: String,
    #[source]
    cause: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl SetupError {
    /// A setup problem of its own (a bad option).
    pub fn new(message: impl Into<String>) -> SetupError {
        SetupError {
            message: message.into(),
            cause: None,
        }
    }

    /// `context: cause`, keeping the cause as the error's source.
    pub fn caused(
        context: impl std::fmt::Display,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> SetupError {
        SetupError {
            message: format!("{context}: {cause}"),
            cause: Some(Box::new(cause)),
        }
    }
}

/// Serves MCP over stdin/stdout until the client disconnects. Stdout carries only protocol
/// messages; nothing in this crate prints to it.
pub async fn serve_stdio(server: ContextServer) -> Result<(), SetupError> {
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| SetupError::caused("MCP handshake over stdio failed", e))?;
    running
        .waiting()
        .await
        .map_err(|e| SetupError::caused("MCP stdio session ended abnormally", e))?;
    Ok(())
}

/// The streamable HTTP service (a tower service) for `server`. `allowed_hosts` extends the
/// `Host` headers accepted beyond the loopback defaults (`localhost`, `127.0.0.1`, `::1`);
/// rmcp refuses others to stop DNS-rebinding attacks on a locally running server.
pub fn http_service(
    server: ContextServer,
    allowed_hosts: &[String],
) -> StreamableHttpService<ContextServer, LocalSessionManager> {
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        http_config(allowed_hosts),
    )
}

/// rmcp's defaults (loopback `Host` headers only) plus `allowed_hosts`.
pub(crate) fn http_config(allowed_hosts: &[String]) -> StreamableHttpServerConfig {
    let mut config = StreamableHttpServerConfig::default();
    config.allowed_hosts.extend(allowed_hosts.iter().cloned());
    config
}

/// An axum router serving MCP at `/mcp`; merge it into a larger application.
pub fn router(server: ContextServer, allowed_hosts: &[String]) -> axum::Router {
    axum::Router::new().route_service("/mcp", http_service(server, allowed_hosts))
}

/// Serves MCP over streamable HTTP on a bound listener (at `/mcp`) until ctrl-c.
pub async fn serve_http(
    server: ContextServer,
    listener: tokio::net::TcpListener,
    allowed_hosts: &[String],
) -> Result<(), SetupError> {
    let config = http_config(allowed_hosts);
    let sessions = config.cancellation_token.clone();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let app = axum::Router::new().route_service("/mcp", service);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            // Without a signal handler the server simply runs until killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            // A graceful shutdown waits for open connections; ending the MCP sessions closes
            // their event streams, which clients would otherwise keep open indefinitely.
            sessions.cancel();
        })
        .await
        .map_err(|e| SetupError::caused("HTTP server failed", e))
}
