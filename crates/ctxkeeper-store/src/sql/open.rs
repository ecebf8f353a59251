//! Opening a SQL store: the URL's dialect, the pool and its per-connection settings, SQLite's
//! write-ahead log and commit mode (`?synchronous=full|normal`), the migrations, and the
//! group commit a SQLite store writes through (a thread of its own for a database file).

use std::sync::Arc;
use std::time::Duration;

use sqlx::any::AnyPoolOptions;

use super::group::{Committer, GroupCommit, checkpoint_in_background};
use super::search::INDEX_BATCH;
#[cfg(feature = "sqlite")]
use super::writer_thread;
use super::{Dialect, SqlStore};
use crate::{StoreError, redact};

/// How long a pooled SQLite connection to a database file stays open unused. Each connection
/// runs on a thread of its own (`sqlx`'s), and a thread keeps the memory it allocated and
/// others freed until it is busy again; a closed connection's thread ends and hands that
/// memory back. A busy store uses its connections in turn and keeps them; an idle one opens
/// a connection again (about a millisecond) for its next request. The pool's reaper looks at
/// this period, so an idle connection is closed between one and two periods after its last
/// use.
pub(super) const SQLITE_IDLE_TIMEOUT: Duration = Duration::from_secs(15);

impl SqlStore {
    /// Connects and migrates. `sqlite://PATH` creates the file (and its directory) if
    /// missing; `sqlite://` alone is refused (say where the database lives).
    pub async fn connect(url: &str) -> Result<SqlStore, StoreError> {
        Self::connect_closing_idle(url, SQLITE_IDLE_TIMEOUT).await
    }

    /// [`connect`](Self::connect), with a SQLite database file's pooled connections closed
    /// once unused for `idle_timeout` (the tests' shorter one).
    pub(super) async fn connect_closing_idle(
        url: &str,
        idle_timeout: Duration,
    ) -> Result<SqlStore, StoreError> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::of_url(url)?;
        let (url, synchronous) = match dialect {
            Dialect::Sqlite => sqlite_url(url)?,
            _ => (url.to_string(), SqliteSync::Full),
        };
        let file = (dialect == Dialect::Sqlite)
            .then(|| sqlite_file(&url))
            .flatten();
        let shown = redact(&url);
        let mut options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(10));
        // An in-memory database lives only while a connection to it is open: its pool keeps
        // `sqlx`'s defaults.
        if dialect == Dialect::Sqlite && !sqlite_in_memory(&url) {
            options = options.idle_timeout(idle_timeout);
        }
        options = match dialect {
            // A connection to a local file needs no liveness check before each use (a round
            // trip to its thread, on every group commit and load).
            Dialect::Sqlite => options
                .max_connections(4)
                .test_before_acquire(false)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        use sqlx::Executor;
                        // Wait for the write lock instead of failing at once.
                        conn.execute("PRAGMA busy_timeout = 30000").await?;
                        conn.execute(synchronous.pragma()).await?;
                        // A multi-row upsert inside a transaction keeps its undo in a
                        // statement journal, which spilled to a temporary file on every
                        // group commit (a third of the bytes written under load).
                        conn.execute("PRAGMA temp_store = MEMORY").await?;
                        Ok(())
                    })
                }),
            _ => options.max_connections(8),
        };
        let pool = options
            .connect(&url)
            .await
            .map_err(|err| StoreError::Backend {
                backend: dialect.name(),
                message: format!("cannot connect to {shown}: {err}"),
                cause: Some(std::sync::Arc::new(err)),
            })?;
        let mut store = SqlStore {
            pool,
            dialect,
            writers: Arc::new(tokio::sync::Mutex::new(())),
            group: None,
            // Rows another process left unindexed are indexed at the first group commit.
            unindexed: Arc::new(std::sync::atomic::AtomicU64::new(INDEX_BATCH)),
        };
        if dialect == Dialect::Sqlite {
            store.enable_wal().await?;
        }
        store.migrate().await?;
        if dialect == Dialect::Sqlite {
            store.group = Some(store.committer(file, synchronous)?);
        }
        Ok(store)
    }

    /// The group commit of a SQLite store: on a thread of its own for a database file
    /// (`file`), on `sqlx`'s connection for an in-memory database (which the thread's own
    /// connection would not see).
    pub(super) fn committer(
        &self,
        file: Option<std::path::PathBuf>,
        synchronous: SqliteSync,
    ) -> Result<Committer, StoreError> {
        #[cfg(feature = "sqlite")]
        if let Some(file) = file {
            let (wal_grew, grown) = tokio::sync::mpsc::channel(1);
            let thread = writer_thread::WriterThread::start(
                file,
                synchronous,
                writer_thread::Shared {
                    writers: Arc::clone(&self.writers),
                    unindexed: Arc::clone(&self.unindexed),
                    wal_grew,
                },
            )?;
            // Ends when the thread does (it holds the signal's sender).
            tokio::spawn(checkpoint_in_background(self.clone(), grown));
            return Ok(Committer::Thread(thread));
        }
        let _ = (file, synchronous);
        Ok(Committer::Task(GroupCommit::start(self.clone())))
    }

    pub(super) async fn enable_wal(&self) -> Result<(), StoreError> {
        for attempt in 0..50 {
            let mode: Result<String, sqlx::Error> = sqlx::query_scalar("PRAGMA journal_mode = WAL")
                .fetch_one(&self.pool)
                .await;
            match mode {
                Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
                Ok(mode) => {
                    return Err(StoreError::backend(
                        "sqlite",
                        format!("journal mode stays {mode}"),
                    ));
                }
                // Switching needs an exclusive lock that busy_timeout does not wait for.
                Err(_) if attempt < 49 => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(err) => return Err(self.err(err)),
            }
        }
        Ok(())
    }
}

/// How SQLite commits reach the disk (`sqlite://PATH?synchronous=full|normal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SqliteSync {
    /// The default: every commit is fsync'd before it returns, so a commit survives a power
    /// loss. Costs a disk flush per write (a few milliseconds on common disks).
    Full,
    /// WAL commits are written to the OS but flushed only at checkpoints: a commit survives a
    /// crash of the process (the database stays consistent after a power loss, but the last
    /// commits before it may be lost). Many times the write throughput; for gateways whose
    /// clients resend their history anyway.
    Normal,
}

impl SqliteSync {
    pub(super) fn pragma(self) -> &'static str {
        match self {
            SqliteSync::Full => "PRAGMA synchronous = FULL",
            SqliteSync::Normal => "PRAGMA synchronous = NORMAL",
        }
    }
}

/// The sqlx URL for a `sqlite://` store URL (the file created if missing) and the commit mode
/// its `synchronous` parameter asks for.
pub(super) fn sqlite_url(url: &str) -> Result<(String, SqliteSync), StoreError> {
    let rest = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    if path.is_empty() {
        return Err(StoreError::InvalidInput(
            "sqlite:// needs a database path".to_string(),
        ));
    }
    if path != ":memory:"
        && let Some(parent) = std::path::Path::new(path).parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    let mut synchronous = SqliteSync::Full;
    let mut params: Vec<&str> = Vec::new();
    for param in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match param.split_once('=') {
            Some(("synchronous", value)) => {
                synchronous = match value.to_ascii_lowercase().as_str() {
                    "full" => SqliteSync::Full,
                    "normal" => SqliteSync::Normal,
                    _ => {
                        return Err(StoreError::InvalidInput(format!(
                            "sqlite synchronous={value:?}: expected full (the default) or normal"
                        )));
                    }
                }
            }
            _ => params.push(param),
        }
    }
    if !params.iter().any(|p| p.starts_with("mode=")) {
        params.push("mode=rwc");
    }
    Ok((format!("sqlite://{path}?{}", params.join("&")), synchronous))
}

/// Whether a sqlx `sqlite://` URL ([`sqlite_url`]'s) names an in-memory database, which
/// lives only as long as a connection to it.
pub(super) fn sqlite_in_memory(url: &str) -> bool {
    let rest = url.strip_prefix("sqlite://").unwrap_or(url);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    path == ":memory:" || path.is_empty() || query.split('&').any(|param| param == "mode=memory")
}

/// The database file a writer thread may write, from a sqlx `sqlite://` URL
/// ([`sqlite_url`]'s): `None` for an in-memory database (which only `sqlx`'s pool sees) and
/// for one opened read-only (`mode=ro`, whose saves must fail as they do through `sqlx`).
pub(super) fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite://")?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let writable_file = path != ":memory:"
        && !path.is_empty()
        && !query
            .split('&')
            .any(|param| param == "mode=memory" || param == "mode=ro");
    writable_file.then(|| std::path::PathBuf::from(path))
}
