//! ctxkeeper-store: where sessions and archived context live.
//!
//! - [`archive`]: the [`Offloader`] contract — content leaves the context
//!   only after it is durably written here, and comes back through read / grep / glob / list.
//!   Implementations: [`LocalWorkspace`] (the `000` directory layout), an object-store archive
//!   (feature `object-store`) and an archive inside the SQL stores.
//! - [`session`]: the [`SessionStore`] contract — versioned agent state with compare-and-swap,
//!   an append-only session log, list / history / search and retention clean-up — with
//!   backends selected by URL through [`open_store`]: `memory://`, `file://DIR`,
//!   `sqlite://PATH` (the embedded default), `redis://…`, `postgres://…`, `mysql://…`.
//! - [`state`]: the persisted [`AgentState`] and the [`SessionKey`] that names it.
//! - [`generations`]: how every backend stores a state — a head and context generations, so
//!   a step that only appended writes O(new messages) ([`ContextWrite`]).
//! - [`restore`]: what of a stored state goes back into the context on the next call.
//! - [`memory`]: long-term memory files (`MEMORY.md`, `memory/YYYY-MM-DD.md`).
//! - [`events`]: session events across replicas ([`EventBus`], opened from the store's URL
//!   by [`open_event_bus`]): Redis pub/sub, PostgreSQL `LISTEN`/`NOTIFY`, or in-process.
//!
//! Cargo features: `sqlite` (default), `postgres`, `mysql`, `redis`, `object-store`
//! (in-memory and local file system), `object-store-cloud` (S3, GCS, Azure), `tls` (rustls for
//! `sslmode=…` and `rediss://`). Every backend runs the same conformance suites
//! (`tests/common/`); the server backends read their URLs from `CTXKEEPER_TEST_POSTGRES_URL`,
//! `CTXKEEPER_TEST_MYSQL_URL` and `CTXKEEPER_TEST_REDIS_URL` and print `SKIP` when unset.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_store::{open_store, AgentState, SessionKey};
//!
//! let store = open_store("memory://").await?;
//! let key = SessionKey::new("acme", "alice", "support-bot", "s1")?;
//! let mut state = AgentState::new();
//! state.context.push(Message::user("where is my parcel?"));
//! let version = store.save(&key, &state, None).await?;
//! store.append(&key, &state.context).await?;
//! let loaded = store.load(&key).await?.expect("saved above");
//! assert_eq!((loaded.version, loaded.state.context.len()), (version, 1));
//! # Ok::<(), ctxkeeper_store::StoreError>(())
//! # }).unwrap();
//! ```

pub mod archive;
mod blob;
pub mod events;
pub mod file_store;
mod fsutil;
pub mod generations;
pub mod memory;
pub mod memory_store;
#[cfg(feature = "object-store")]
pub mod object_archive;
#[cfg(feature = "redis")]
pub mod redis_store;
pub mod restore;
pub mod session;
#[cfg(feature = "sql")]
pub mod sql;
pub mod state;
mod text;
mod time;
pub mod workspace;

use std::fmt;
use std::sync::Arc;

pub use archive::{ArchiveRef, ArchiveScope, Offloader};
pub use events::{EventBus, open_event_bus};
pub use generations::ContextWrite;
pub use session::{
    AppendOutcome, Committed, HistoryPage, LogEntry, Retention, SearchHit, SearchQuery,
    SearchScope, SessionFilter, SessionInfo, SessionStore, Versioned,
};
pub use state::{AgentState, SessionKey};
pub use workspace::LocalWorkspace;

/// Errors of the store layer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StoreError {
    /// The item, session or reference does not exist (or belongs to another tenant).
    NotFound(String),
    /// A compare-and-swap lost: someone else saved a newer version first.
    Conflict {
        expected: Option<u64>,
        actual: Option<u64>,
    },
    /// An identifier, reference or pattern that is not acceptable.
    InvalidInput(String),
    /// A path inside a store or workspace directory that ctxkeeper refuses to use: a symbolic
    /// link (links there are never followed), or not the kind of file the store writes.
    Forbidden(String),
    /// The backend does not support the operation.
    NotImplemented(String),
    /// The backend failed (IO, network, database).
    Backend {
        backend: &'static str,
        message: String,
    },
    /// Stored data that cannot be decoded (a torn or foreign record, or a format written by a
    /// newer version).
    Corrupt(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound(what) => write!(f, "not found: {what}"),
            StoreError::Conflict { expected, actual } => write!(
                f,
                "version conflict: expected {}, found {}",
                expected.map_or("none".to_string(), |v| v.to_string()),
                actual.map_or("none".to_string(), |v| v.to_string())
            ),
            StoreError::InvalidInput(message) => write!(f, "invalid input: {message}"),
            StoreError::Forbidden(message) => write!(f, "forbidden: {message}"),
            StoreError::NotImplemented(what) => write!(f, "not implemented: {what}"),
            StoreError::Backend { backend, message } => write!(f, "{backend}: {message}"),
            StoreError::Corrupt(message) => write!(f, "corrupt data: {message}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<std::io::Error> for StoreError {
    fn from(err: std::io::Error) -> StoreError {
        if err.kind() == std::io::ErrorKind::NotFound {
            StoreError::NotFound(err.to_string())
        } else {
            StoreError::Backend {
                backend: "filesystem",
                message: err.to_string(),
            }
        }
    }
}

impl StoreError {
    pub(crate) fn backend(backend: &'static str, err: impl fmt::Display) -> StoreError {
        StoreError::Backend {
            backend,
            message: err.to_string(),
        }
    }

    /// True for a lost compare-and-swap.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }

    /// True for a missing item or session.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound(_))
    }

    /// True for a path refused because it is a link or not the store's own kind of file.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, StoreError::Forbidden(_))
    }
}

/// Opens the session store a URL names, creating its schema or directory on first use.
///
/// | URL | backend |
/// | --- | --- |
/// | `memory://` | in-process, lost on exit (tests, demos) |
/// | `file://DIR` or a bare path | JSON files in the `004` workspace layout |
/// | `sqlite://PATH` | SQLite, WAL journal, FTS5 search — the embedded default |
/// | `redis://…`, `rediss://…`, `redis+cluster://h1,h2`, `redis+sentinel://h1,h2/master` | Redis |
/// | `postgres://…` / `postgresql://…` | PostgreSQL, tsvector search |
/// | `mysql://…` / `mariadb://…` | MySQL or MariaDB, FULLTEXT search |
///
/// A backend whose cargo feature is off answers [`StoreError::NotImplemented`].
pub async fn open_store(url: &str) -> Result<Arc<dyn SessionStore>, StoreError> {
    install_tls_provider();
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("memory") => Ok(Arc::new(memory_store::MemoryStore::new())),
        Some("file") | None => Ok(Arc::new(file_store::FileStore::open(url).await?)),
        Some("sqlite") | Some("postgres") | Some("postgresql") | Some("mysql")
        | Some("mariadb") => open_sql(url).await,
        Some(scheme) if scheme.starts_with("redis") => open_redis(url).await,
        Some(other) => Err(StoreError::InvalidInput(format!(
            "unknown store scheme `{other}://`"
        ))),
    }
}

#[cfg(feature = "sql")]
async fn open_sql(url: &str) -> Result<Arc<dyn SessionStore>, StoreError> {
    Ok(Arc::new(sql::SqlStore::connect(url).await?))
}

#[cfg(not(feature = "sql"))]
async fn open_sql(url: &str) -> Result<Arc<dyn SessionStore>, StoreError> {
    Err(StoreError::NotImplemented(format!(
        "{}: built without SQL features",
        redact(url)
    )))
}

#[cfg(feature = "redis")]
async fn open_redis(url: &str) -> Result<Arc<dyn SessionStore>, StoreError> {
    Ok(Arc::new(redis_store::RedisStore::connect(url).await?))
}

#[cfg(not(feature = "redis"))]
async fn open_redis(url: &str) -> Result<Arc<dyn SessionStore>, StoreError> {
    Err(StoreError::NotImplemented(format!(
        "{}: built without the `redis` feature",
        redact(url)
    )))
}

/// Opens the archive (offloader) a URL or path names.
///
/// | URL | archive |
/// | --- | --- |
/// | a path or `file://DIR` | [`LocalWorkspace`] in that directory |
/// | `sqlite://…`, `postgres://…`, `mysql://…` | archived items in the SQL database |
/// | `memory://` | an in-memory object store (feature `object-store`) |
/// | `s3://bucket/prefix`, `gs://…`, `az://…` | object storage (feature `object-store-cloud`; credentials from the usual environment variables) |
pub async fn open_archive(url_or_path: &str) -> Result<Arc<dyn Offloader>, StoreError> {
    install_tls_provider();
    let scheme = url_or_path
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        None => Ok(Arc::new(LocalWorkspace::new(url_or_path)?)),
        Some("file") => {
            let path = url_or_path
                .split_once("://")
                .map(|(_, rest)| rest)
                .unwrap_or_default();
            Ok(Arc::new(LocalWorkspace::new(path)?))
        }
        Some("sqlite") | Some("postgres") | Some("postgresql") | Some("mysql")
        | Some("mariadb") => open_sql_archive(url_or_path).await,
        Some(_) => open_object_archive(url_or_path),
    }
}

#[cfg(feature = "sql")]
async fn open_sql_archive(url: &str) -> Result<Arc<dyn Offloader>, StoreError> {
    Ok(Arc::new(sql::SqlStore::connect(url).await?.archive()))
}

#[cfg(not(feature = "sql"))]
async fn open_sql_archive(url: &str) -> Result<Arc<dyn Offloader>, StoreError> {
    Err(StoreError::NotImplemented(format!(
        "{}: built without SQL features",
        redact(url)
    )))
}

#[cfg(feature = "object-store")]
fn open_object_archive(url: &str) -> Result<Arc<dyn Offloader>, StoreError> {
    Ok(Arc::new(object_archive::ObjectArchive::from_url(url)?))
}

#[cfg(not(feature = "object-store"))]
fn open_object_archive(url: &str) -> Result<Arc<dyn Offloader>, StoreError> {
    Err(StoreError::NotImplemented(format!(
        "{}: built without the `object-store` feature",
        redact(url)
    )))
}

/// Makes aws-lc-rs the process's rustls provider unless one is installed already: with more
/// than one provider compiled in (another crate may bring `ring`), rustls refuses to pick one.
#[cfg(feature = "tls")]
pub fn install_tls_provider() {
    // An error only means a provider is installed already, which is what we want.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Without the `tls` feature there is no TLS provider to install.
#[cfg(not(feature = "tls"))]
pub fn install_tls_provider() {}

/// A Unix time in milliseconds as `YYYY-MM-DD HH:MM:SS UTC`, for reports.
pub fn format_timestamp(ms: i64) -> String {
    let seconds = ms.div_euclid(1000).rem_euclid(86_400);
    format!(
        "{} {:02}:{:02}:{:02} UTC",
        time::date_string(ms),
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// A URL with its password replaced, for error messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            if userinfo.contains(':') {
                format!("{scheme}://{user}:***@{host}{path}")
            } else {
                url.to_string()
            }
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("/tmp/x"), "/tmp/x");
    }

    #[test]
    fn timestamps_format_in_utc() {
        assert_eq!(
            format_timestamp(1_795_000_000_000),
            "2026-11-18 11:06:40 UTC"
        );
    }
}
