//! The SQL session stores — SQLite (the embedded default), PostgreSQL and MySQL/MariaDB — and
//! the archive inside them.
//!
//! One implementation serves the three databases through sqlx's `Any` driver with runtime
//! queries; a [`Dialect`] supplies what differs: the schema, upserts and full-text search
//! (SQLite FTS5 with bm25, PostgreSQL `tsvector` with `ts_rank`, MySQL/MariaDB `FULLTEXT` with
//! `MATCH … AGAINST`). The engine finds and pre-ranks candidates; a final BM25 pass over their
//! indexed text gives every backend the same ranking.
//!
//! - **Schema**: created and migrated on first use, under a lock (SQLite `BEGIN IMMEDIATE`,
//!   PostgreSQL advisory lock, MySQL `GET_LOCK`), recorded in `ctxkeeper_schema` — not in
//!   sqlx's `_sqlx_migrations`, which a host application may own in the same database.
//! - **State**: `ctxkeeper_sessions` holds one small row per session (version, log counter,
//!   times) and `ctxkeeper_states` the state itself, so appends never rewrite the state. A save
//!   is a conditional `UPDATE … WHERE version = expected` on the session row plus the state
//!   upsert in one transaction; a stale writer changes nothing and gets a conflict.
//! - **The log** is `ctxkeeper_log`, one row per message numbered by a counter on the session
//!   row that the append bumps first; the row lock (the write lock in SQLite) serializes
//!   concurrent appenders, so numbers never repeat or skip. The indexed text of a message is
//!   capped at 256 KiB; the message itself is stored whole.
//! - **Archive**: `ctxkeeper_archive_items` and `ctxkeeper_archive_context` hold offloaded
//!   content, so several hosts share archives through the database alone ([`SqlStore::archive`]).
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ctxkeeper_store::{sql::SqlStore, AgentState, SessionKey, SessionStore};
//!
//! let dir = tempfile::tempdir()?;
//! let url = format!("sqlite://{}", dir.path().join("sessions.db").display());
//! let store = SqlStore::connect(&url).await?;
//! let key = SessionKey::simple("s1")?;
//! let v1 = store.save(&key, &AgentState::new(), None).await?;
//! assert!(store.save(&key, &AgentState::new(), None).await.is_err());
//! assert_eq!(store.save(&key, &AgentState::new(), Some(v1)).await?, v1 + 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, AssertSqlSafe, Row};

use crate::blob::{BlobArchive, Blobs, CONTEXT_FILE, Loc, slice_lines};
use crate::session::{
    AppendOutcome, Committed, HistoryPage, LogEntry, SearchHit, SearchQuery, SearchScope, SessionFilter,
    SessionInfo, SessionStore, Versioned, check_messages, sort_hits,
};
use crate::state::{AgentState, SessionKey};
use crate::text::{Ranker, indexed_body, snippet};
use crate::time::now_ms;
use crate::{StoreError, redact};

/// Which SQL database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
    MySql,
}

impl Dialect {
    fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
        }
    }

    fn of_url(url: &str) -> Result<Dialect, StoreError> {
        let scheme = url
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase())
            .unwrap_or_default();
        match scheme.as_str() {
            "sqlite" => Ok(Dialect::Sqlite),
            "postgres" | "postgresql" => Ok(Dialect::Postgres),
            "mysql" | "mariadb" => Ok(Dialect::MySql),
            _ => Err(StoreError::InvalidInput(format!(
                "not a SQL store URL: {}",
                redact(url)
            ))),
        }
    }

    /// Rewrites `?` placeholders as `$1, $2…` for PostgreSQL.
    fn sql(self, text: &str) -> String {
        if self != Dialect::Postgres {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len() + 16);
        let mut n = 0;
        let mut in_string = false;
        for c in text.chars() {
            match c {
                '\'' => {
                    in_string = !in_string;
                    out.push(c);
                }
                '?' if !in_string => {
                    n += 1;
                    out.push('$');
                    out.push_str(&n.to_string());
                }
                _ => out.push(c),
            }
        }
        out
    }

    /// The statements of each schema version, in order.
    fn migrations(self) -> &'static [&'static [&'static str]] {
        match self {
            Dialect::Sqlite => &[SQLITE_V1, SQLITE_V2],
            Dialect::Postgres => &[POSTGRES_V1, POSTGRES_V2],
            Dialect::MySql => &[MYSQL_V1, MYSQL_V2],
        }
    }
}

const SQLITE_V1: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS ctxkeeper_sessions (tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL, version INTEGER, state TEXT, log_len INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY (tenant, user_id, agent, session))",
    "CREATE INDEX IF NOT EXISTS ctxkeeper_sessions_updated ON ctxkeeper_sessions (updated_at)",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_log (id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL, seq INTEGER NOT NULL, at INTEGER NOT NULL, message TEXT NOT NULL, body TEXT NOT NULL, UNIQUE (tenant, user_id, agent, session, seq))",
    "CREATE VIRTUAL TABLE IF NOT EXISTS ctxkeeper_log_fts USING fts5(body, content='ctxkeeper_log', content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS ctxkeeper_log_ai AFTER INSERT ON ctxkeeper_log BEGIN INSERT INTO ctxkeeper_log_fts(rowid, body) VALUES (new.id, new.body); END",
    "CREATE TRIGGER IF NOT EXISTS ctxkeeper_log_ad AFTER DELETE ON ctxkeeper_log BEGIN INSERT INTO ctxkeeper_log_fts(ctxkeeper_log_fts, rowid, body) VALUES ('delete', old.id, old.body); END",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_archive_items (tenant_dir TEXT NOT NULL, path TEXT NOT NULL, data BLOB NOT NULL, size INTEGER NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (tenant_dir, path))",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_archive_context (tenant_dir TEXT NOT NULL, session_dir TEXT NOT NULL, first_line INTEGER NOT NULL, last_line INTEGER NOT NULL, size INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (tenant_dir, session_dir, first_line))",
];

const POSTGRES_V1: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS ctxkeeper_sessions (tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL, version BIGINT, state TEXT, log_len BIGINT NOT NULL DEFAULT 0, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (tenant, user_id, agent, session))",
    "CREATE INDEX IF NOT EXISTS ctxkeeper_sessions_updated ON ctxkeeper_sessions (updated_at)",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_log (id BIGSERIAL PRIMARY KEY, tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL, seq BIGINT NOT NULL, at BIGINT NOT NULL, message TEXT NOT NULL, body TEXT NOT NULL, tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED, UNIQUE (tenant, user_id, agent, session, seq))",
    "CREATE INDEX IF NOT EXISTS ctxkeeper_log_tsv ON ctxkeeper_log USING GIN (tsv)",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_archive_items (tenant_dir TEXT NOT NULL, path TEXT NOT NULL, data BYTEA NOT NULL, size BIGINT NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (tenant_dir, path))",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_archive_context (tenant_dir TEXT NOT NULL, session_dir TEXT NOT NULL, first_line BIGINT NOT NULL, last_line BIGINT NOT NULL, size BIGINT NOT NULL, data BYTEA NOT NULL, PRIMARY KEY (tenant_dir, session_dir, first_line))",
];

const MYSQL_V1: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS ctxkeeper_sessions (tenant VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, user_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, agent VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, session VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, version BIGINT NULL, state LONGTEXT NULL, log_len BIGINT NOT NULL DEFAULT 0, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (tenant, user_id, agent, session), KEY ctxkeeper_sessions_updated (updated_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_log (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, tenant VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, user_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, agent VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, session VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, seq BIGINT NOT NULL, at BIGINT NOT NULL, message LONGTEXT NOT NULL, body MEDIUMTEXT NOT NULL, UNIQUE KEY ctxkeeper_log_seq (tenant, user_id, agent, session, seq), FULLTEXT KEY ctxkeeper_log_body (body)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_archive_items (tenant_dir VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, path VARCHAR(700) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, data LONGBLOB NOT NULL, size BIGINT NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (tenant_dir, path)) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_archive_context (tenant_dir VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, session_dir VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, first_line BIGINT NOT NULL, last_line BIGINT NOT NULL, size BIGINT NOT NULL, data LONGBLOB NOT NULL, PRIMARY KEY (tenant_dir, session_dir, first_line)) ENGINE=InnoDB",
];

// Version 2 moves the state out of the session row: an append updates the row's log counter,
// and SQLite rewrites a whole row (state included) on every update, which made appends cost
// O(state size).
const SQLITE_V2: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS ctxkeeper_states (tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL, state TEXT NOT NULL, PRIMARY KEY (tenant, user_id, agent, session))",
    "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state) SELECT tenant, user_id, agent, session, state FROM ctxkeeper_sessions WHERE state IS NOT NULL",
    "UPDATE ctxkeeper_sessions SET state = NULL WHERE state IS NOT NULL",
];

const POSTGRES_V2: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS ctxkeeper_states (tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL, state TEXT NOT NULL, PRIMARY KEY (tenant, user_id, agent, session))",
    "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state) SELECT tenant, user_id, agent, session, state FROM ctxkeeper_sessions WHERE state IS NOT NULL",
    "UPDATE ctxkeeper_sessions SET state = NULL WHERE state IS NOT NULL",
];

const MYSQL_V2: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS ctxkeeper_states (tenant VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, user_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, agent VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, session VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, state LONGTEXT NOT NULL, PRIMARY KEY (tenant, user_id, agent, session)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state) SELECT tenant, user_id, agent, session, state FROM ctxkeeper_sessions WHERE state IS NOT NULL",
    "UPDATE ctxkeeper_sessions SET state = NULL WHERE state IS NOT NULL",
];

/// Rows per multi-row INSERT when appending to the log.
const INSERT_BATCH: usize = 100;

/// A session store in SQLite, PostgreSQL or MySQL/MariaDB.
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    dialect: Dialect,
    /// SQLite has one writer at a time, and a connection that finds the write lock taken
    /// sleeps in SQLite's busy handler (1, 2, 5, … up to 100 ms per wait), which under
    /// concurrent appends turned millisecond commits into 50 ms medians and second-long tails.
    /// Writers of this process queue here instead, in order; other processes still meet
    /// `busy_timeout`.
    writers: Arc<tokio::sync::Mutex<()>>,
}

/// A write transaction, holding this process's SQLite writer slot until it ends.
struct WriteTx {
    tx: sqlx::Transaction<'static, sqlx::Any>,
    _writer: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl WriteTx {
    async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }

    async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }
}

/// Derefs to the connection, like the transaction it wraps: `&mut *tx` executes in it.
impl std::ops::Deref for WriteTx {
    type Target = sqlx::AnyConnection;

    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

impl SqlStore {
    /// Connects and migrates. `sqlite://PATH` creates the file (and its directory) if
    /// missing; `sqlite://` alone is refused (say where the database lives).
    pub async fn connect(url: &str) -> Result<SqlStore, StoreError> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::of_url(url)?;
        let (url, synchronous) = match dialect {
            Dialect::Sqlite => sqlite_url(url)?,
            _ => (url.to_string(), SqliteSync::Full),
        };
        let shown = redact(&url);
        let mut options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(10));
        options = match dialect {
            Dialect::Sqlite => options.max_connections(4).after_connect(move |conn, _| {
                Box::pin(async move {
                    use sqlx::Executor;
                    // Wait for the write lock instead of failing at once.
                    conn.execute("PRAGMA busy_timeout = 30000").await?;
                    conn.execute(synchronous.pragma()).await?;
                    Ok(())
                })
            }),
            _ => options.max_connections(8),
        };
        let pool = options.connect(&url).await.map_err(|err| {
            StoreError::backend(dialect.name(), format!("cannot connect to {shown}: {err}"))
        })?;
        let store = SqlStore {
            pool,
            dialect,
            writers: Arc::new(tokio::sync::Mutex::new(())),
        };
        if dialect == Dialect::Sqlite {
            store.enable_wal().await?;
        }
        store.migrate().await?;
        Ok(store)
    }

    /// The database this store talks to.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The archive (offloader) in the same database.
    pub fn archive(&self) -> SqlArchive {
        SqlArchive {
            inner: BlobArchive::new(SqlBlobs {
                store: self.clone(),
            }),
        }
    }

    fn err(&self, err: sqlx::Error) -> StoreError {
        StoreError::backend(self.dialect.name(), err)
    }

    fn q(&self, text: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(self.dialect.sql(text))
    }

    async fn begin(&self) -> Result<WriteTx, StoreError> {
        let (tx, writer) = match self.dialect {
            // Take the write lock up front so concurrent writers queue on busy_timeout rather
            // than fail when upgrading a read lock.
            Dialect::Sqlite => {
                let writer = Arc::clone(&self.writers).lock_owned().await;
                (self.pool.begin_with("BEGIN IMMEDIATE").await, Some(writer))
            }
            _ => (self.pool.begin().await, None),
        };
        Ok(WriteTx {
            tx: tx.map_err(|err| self.err(err))?,
            _writer: writer,
        })
    }

    async fn enable_wal(&self) -> Result<(), StoreError> {
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

    async fn migrate(&self) -> Result<(), StoreError> {
        use sqlx::Executor;
        let mut conn = self.pool.acquire().await.map_err(|err| self.err(err))?;
        let (lock, unlock) = match self.dialect {
            Dialect::Sqlite => ("BEGIN IMMEDIATE", "COMMIT"),
            Dialect::Postgres => ("BEGIN; SELECT pg_advisory_xact_lock(7263540021)", "COMMIT"),
            Dialect::MySql => (
                "DO GET_LOCK('ctxkeeper_schema', 60)",
                "DO RELEASE_LOCK('ctxkeeper_schema')",
            ),
        };
        conn.execute(lock).await.map_err(|err| self.err(err))?;
        let result = self.migrate_locked(&mut conn).await;
        let finish = if result.is_ok() || self.dialect == Dialect::MySql {
            unlock
        } else {
            "ROLLBACK"
        };
        let finished = conn.execute(finish).await.map_err(|err| self.err(err));
        result.and(finished.map(|_| ()))
    }

    async fn migrate_locked(&self, conn: &mut sqlx::AnyConnection) -> Result<(), StoreError> {
        use sqlx::Executor;
        conn.execute("CREATE TABLE IF NOT EXISTS ctxkeeper_schema (version BIGINT NOT NULL)")
            .await
            .map_err(|err| self.err(err))?;
        let current: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM ctxkeeper_schema")
            .fetch_one(&mut *conn)
            .await
            .map_err(|err| self.err(err))?;
        let current = current.unwrap_or(0);
        for (index, statements) in self.dialect.migrations().iter().enumerate() {
            let version = index as i64 + 1;
            if version <= current {
                continue;
            }
            for statement in *statements {
                conn.execute(*statement)
                    .await
                    .map_err(|err| self.err(err))?;
            }
            sqlx::query(self.q("INSERT INTO ctxkeeper_schema (version) VALUES (?)"))
                .bind(version)
                .execute(&mut *conn)
                .await
                .map_err(|err| self.err(err))?;
        }
        Ok(())
    }

    /// Commits `tx` when its writes succeeded, rolls it back (releasing the write lock at
    /// once, not when the pool next touches the connection) when they failed.
    async fn finish<T>(&self, tx: WriteTx, result: Result<T, StoreError>) -> Result<T, StoreError> {
        match result {
            Ok(value) => {
                tx.commit().await.map_err(|err| self.err(err))?;
                Ok(value)
            }
            Err(err) => {
                let _ = tx.rollback().await;
                Err(err)
            }
        }
    }

    /// The compare-and-swap save, inside `tx`: [`StoreError::Conflict`] when the stored
    /// version is not `expected`.
    async fn save_in(
        &self,
        tx: &mut WriteTx,
        key: &SessionKey,
        json: &str,
        expected: Option<u64>,
        now: i64,
    ) -> Result<u64, StoreError> {
        let expected_i = i64::try_from(expected.unwrap_or(0))
            .map_err(|_| StoreError::InvalidInput("version out of range".into()))?;
        let new_version = expected_i + 1;
        sqlx::query(self.q(self.upsert_touch()))
            .bind(key.tenant())
            .bind(key.user())
            .bind(key.agent())
            .bind(key.session())
            .bind(now)
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(|err| self.err(err))?;
        let updated = sqlx::query(self.q("UPDATE ctxkeeper_sessions SET version = ?, updated_at = ? WHERE tenant = ? AND user_id = ? AND agent = ? AND session = ? AND COALESCE(version, 0) = ?"))
            .bind(new_version).bind(now)
            .bind(key.tenant()).bind(key.user()).bind(key.agent()).bind(key.session())
            .bind(expected_i)
            .execute(&mut **tx)
            .await
            .map_err(|err| self.err(err))?;
        if updated.rows_affected() != 1 {
            let actual: Option<i64> = sqlx::query_scalar(self.q("SELECT version FROM ctxkeeper_sessions WHERE tenant = ? AND user_id = ? AND agent = ? AND session = ?"))
                .bind(key.tenant()).bind(key.user()).bind(key.agent()).bind(key.session())
                .fetch_optional(&mut **tx)
                .await
                .map_err(|err| self.err(err))?
                .flatten();
            return Err(StoreError::Conflict {
                expected,
                actual: actual.map(u64_of),
            });
        }
        // The session row is locked (or SQLite's write lock held) until commit, so the state
        // and its version change together.
        sqlx::query(self.q(self.upsert_state()))
            .bind(key.tenant())
            .bind(key.user())
            .bind(key.agent())
            .bind(key.session())
            .bind(json)
            .execute(&mut **tx)
            .await
            .map_err(|err| self.err(err))?;
        Ok(u64_of(new_version))
    }

    /// Appends serialized log rows (from [`log_rows`]), inside `tx`.
    async fn append_in(
        &self,
        tx: &mut WriteTx,
        key: &SessionKey,
        rows: &[(String, String)],
        now: i64,
    ) -> Result<AppendOutcome, StoreError> {
        let n = rows.len() as i64;
        sqlx::query(self.q(self.upsert_bump()))
            .bind(key.tenant())
            .bind(key.user())
            .bind(key.agent())
            .bind(key.session())
            .bind(n)
            .bind(now)
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(|err| self.err(err))?;
        let log_len: i64 = sqlx::query_scalar(self.q("SELECT log_len FROM ctxkeeper_sessions WHERE tenant = ? AND user_id = ? AND agent = ? AND session = ?"))
            .bind(key.tenant()).bind(key.user()).bind(key.agent()).bind(key.session())
            .fetch_one(&mut **tx)
            .await
            .map_err(|err| self.err(err))?;
        let first = log_len - n + 1;
        for (chunk_index, chunk) in rows.chunks(INSERT_BATCH).enumerate() {
            let values = vec!["(?, ?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
            let text = format!(
                "INSERT INTO ctxkeeper_log (tenant, user_id, agent, session, seq, at, message, body) VALUES {values}"
            );
            let sql = self.q(&text);
            let mut query = sqlx::query(sql);
            for (i, (json, body)) in chunk.iter().enumerate() {
                let seq = first + (chunk_index * INSERT_BATCH + i) as i64;
                query = query
                    .bind(key.tenant())
                    .bind(key.user())
                    .bind(key.agent())
                    .bind(key.session())
                    .bind(seq)
                    .bind(now)
                    .bind(json.as_str())
                    .bind(body.as_str());
            }
            query.execute(&mut **tx).await.map_err(|err| self.err(err))?;
        }
        Ok(AppendOutcome {
            first_seq: u64_of(first),
            last_seq: u64_of(log_len),
        })
    }

    fn upsert_touch(&self) -> &'static str {
        match self.dialect {
            Dialect::MySql => {
                "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE tenant = tenant"
            }
            _ => {
                "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, user_id, agent, session) DO NOTHING"
            }
        }
    }

    fn upsert_state(&self) -> &'static str {
        match self.dialect {
            Dialect::MySql => {
                "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state) VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE state = VALUES(state)"
            }
            _ => {
                "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state) VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, user_id, agent, session) DO UPDATE SET state = excluded.state"
            }
        }
    }

    fn upsert_bump(&self) -> &'static str {
        match self.dialect {
            Dialect::MySql => {
                "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, log_len, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE log_len = log_len + VALUES(log_len), updated_at = VALUES(updated_at)"
            }
            _ => {
                "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, log_len, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, user_id, agent, session) DO UPDATE SET log_len = ctxkeeper_sessions.log_len + excluded.log_len, updated_at = excluded.updated_at"
            }
        }
    }

    fn search_sql(&self, session_filter: bool) -> String {
        let key = if session_filter {
            " AND l.user_id = ? AND l.agent = ? AND l.session = ?"
        } else {
            ""
        };
        match self.dialect {
            Dialect::Sqlite => format!(
                "SELECT l.tenant, l.user_id, l.agent, l.session, l.seq, l.at, l.body, -bm25(ctxkeeper_log_fts) AS score FROM ctxkeeper_log_fts JOIN ctxkeeper_log l ON l.id = ctxkeeper_log_fts.rowid WHERE ctxkeeper_log_fts MATCH ? AND l.tenant = ?{key} ORDER BY score DESC, l.at DESC LIMIT ?"
            ),
            Dialect::Postgres => format!(
                "SELECT l.tenant, l.user_id, l.agent, l.session, l.seq, l.at, l.body, CAST(ts_rank(l.tsv, q) AS DOUBLE PRECISION) AS score FROM ctxkeeper_log l, to_tsquery('simple', ?) q WHERE l.tsv @@ q AND l.tenant = ?{key} ORDER BY score DESC, l.at DESC LIMIT ?"
            ),
            Dialect::MySql => format!(
                "SELECT l.tenant, l.user_id, l.agent, l.session, l.seq, l.at, l.body, MATCH (l.body) AGAINST (? IN NATURAL LANGUAGE MODE) AS score FROM ctxkeeper_log l WHERE MATCH (l.body) AGAINST (? IN NATURAL LANGUAGE MODE) AND l.tenant = ?{key} ORDER BY score DESC, l.at DESC LIMIT ?"
            ),
        }
    }

    /// The engine's query text for the terms: any term matches.
    fn fts_query(&self, terms: &[String]) -> String {
        match self.dialect {
            Dialect::Sqlite => terms
                .iter()
                .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
                .collect::<Vec<_>>()
                .join(" OR "),
            Dialect::Postgres => terms
                .iter()
                .map(|t| format!("'{}'", t.replace('\'', "''").replace('\\', "\\\\")))
                .collect::<Vec<_>>()
                .join(" | "),
            Dialect::MySql => terms.join(" "),
        }
    }
}

/// `sqlite://PATH` with the file created on demand (and its directory).
/// How SQLite commits reach the disk (`sqlite://PATH?synchronous=full|normal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SqliteSync {
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
    fn pragma(self) -> &'static str {
        match self {
            SqliteSync::Full => "PRAGMA synchronous = FULL",
            SqliteSync::Normal => "PRAGMA synchronous = NORMAL",
        }
    }
}

/// The sqlx URL for a `sqlite://` store URL (the file created if missing) and the commit mode
/// its `synchronous` parameter asks for.
fn sqlite_url(url: &str) -> Result<(String, SqliteSync), StoreError> {
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

fn key_of(row: &AnyRow) -> Result<SessionKey, StoreError> {
    let get = |i: usize| {
        row.try_get::<String, _>(i)
            .map_err(|err| StoreError::Corrupt(err.to_string()))
    };
    SessionKey::new(get(0)?, get(1)?, get(2)?, get(3)?)
}

/// Log rows as the log table stores them: the message's JSON and its indexed text.
fn log_rows(messages: &[Message]) -> Result<Vec<(String, String)>, StoreError> {
    messages
        .iter()
        .map(|message| {
            let json = serde_json::to_string(message).map_err(|err| {
                StoreError::InvalidInput(format!("message does not serialize: {err}"))
            })?;
            Ok((json, indexed_body(message)))
        })
        .collect()
}

fn u64_of(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

#[async_trait]
impl SessionStore for SqlStore {
    fn backend(&self) -> &'static str {
        self.dialect.name()
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<Versioned>, StoreError> {
        let row = sqlx::query(self.q("SELECT s.version, t.state FROM ctxkeeper_sessions s JOIN ctxkeeper_states t ON t.tenant = s.tenant AND t.user_id = s.user_id AND t.agent = s.agent AND t.session = s.session WHERE s.tenant = ? AND s.user_id = ? AND s.agent = ? AND s.session = ? AND s.version IS NOT NULL"))
            .bind(key.tenant())
            .bind(key.user())
            .bind(key.agent())
            .bind(key.session())
            .fetch_optional(&self.pool)
            .await
            .map_err(|err| self.err(err))?;
        let Some(row) = row else { return Ok(None) };
        let version: i64 = row.try_get(0).map_err(|err| self.err(err))?;
        let state: String = row.try_get(1).map_err(|err| self.err(err))?;
        Ok(Some(Versioned {
            state: AgentState::from_json(&state)?,
            version: u64_of(version),
        }))
    }

    async fn save(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
    ) -> Result<u64, StoreError> {
        let json = state.to_json()?;
        let now = now_ms();
        let mut tx = self.begin().await?;
        let saved = self.save_in(&mut tx, key, &json, expected, now).await;
        self.finish(tx, saved).await
    }

    async fn append(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<AppendOutcome, StoreError> {
        check_messages(messages)?;
        let rows = log_rows(messages)?;
        let now = now_ms();
        let mut tx = self.begin().await?;
        let appended = self.append_in(&mut tx, key, &rows, now).await;
        self.finish(tx, appended).await
    }

    fn commits_atomically(&self) -> bool {
        true
    }

    async fn save_and_append(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
        messages: &[Message],
    ) -> Result<Committed, StoreError> {
        // Serialize before the transaction: the writer slot is held for the writes only.
        let json = state.to_json()?;
        let rows = log_rows(messages)?;
        let now = now_ms();
        let mut tx = self.begin().await?;
        let committed = async {
            let version = self.save_in(&mut tx, key, &json, expected, now).await?;
            let appended = if rows.is_empty() {
                None
            } else {
                Some(self.append_in(&mut tx, key, &rows, now).await?)
            };
            Ok(Committed { version, appended })
        }
        .await;
        self.finish(tx, committed).await
    }

    async fn list(&self, filter: &SessionFilter) -> Result<Vec<SessionInfo>, StoreError> {
        filter.validate()?;
        let mut text = String::from(
            "SELECT tenant, user_id, agent, session, version, log_len, created_at, updated_at FROM ctxkeeper_sessions WHERE tenant = ?",
        );
        if filter.user.is_some() {
            text.push_str(" AND user_id = ?");
        }
        if filter.agent.is_some() {
            text.push_str(" AND agent = ?");
        }
        text.push_str(" ORDER BY updated_at DESC, user_id, agent, session");
        let sql = self.q(&text);
        let mut query = sqlx::query(sql).bind(filter.tenant.as_str());
        if let Some(user) = &filter.user {
            query = query.bind(user.as_str());
        }
        if let Some(agent) = &filter.agent {
            query = query.bind(agent.as_str());
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(|err| self.err(err))?;
        rows.iter()
            .map(|row| {
                let get = |i: usize| row.try_get::<i64, _>(i).map_err(|err| self.err(err));
                let version: Option<i64> = row.try_get(4).map_err(|err| self.err(err))?;
                Ok(SessionInfo {
                    key: key_of(row)?,
                    version: version.map(u64_of),
                    log_len: u64_of(get(5)?),
                    created_at_ms: get(6)?,
                    updated_at_ms: get(7)?,
                })
            })
            .collect()
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let mut removed = 0;
        for table in ["ctxkeeper_log", "ctxkeeper_states", "ctxkeeper_sessions"] {
            let text = format!(
                "DELETE FROM {table} WHERE tenant = ? AND user_id = ? AND agent = ? AND session = ?"
            );
            removed += sqlx::query(self.q(&text))
                .bind(key.tenant())
                .bind(key.user())
                .bind(key.agent())
                .bind(key.session())
                .execute(&mut *tx)
                .await
                .map_err(|err| self.err(err))?
                .rows_affected();
        }
        tx.commit().await.map_err(|err| self.err(err))?;
        Ok(removed > 0)
    }

    async fn history(
        &self,
        key: &SessionKey,
        page: HistoryPage,
    ) -> Result<Vec<LogEntry>, StoreError> {
        if page.last == 0 {
            return Ok(Vec::new());
        }
        let before = page
            .before_seq
            .map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let rows = sqlx::query(self.q("SELECT seq, at, message FROM ctxkeeper_log WHERE tenant = ? AND user_id = ? AND agent = ? AND session = ? AND seq < ? ORDER BY seq DESC LIMIT ?"))
            .bind(key.tenant()).bind(key.user()).bind(key.agent()).bind(key.session())
            .bind(before)
            .bind(i64::try_from(page.last).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(|err| self.err(err))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows.iter().rev() {
            let seq: i64 = row.try_get(0).map_err(|err| self.err(err))?;
            let at: i64 = row.try_get(1).map_err(|err| self.err(err))?;
            let message: String = row.try_get(2).map_err(|err| self.err(err))?;
            let message = serde_json::from_str(&message)
                .map_err(|err| StoreError::Corrupt(format!("log entry: {err}")))?;
            out.push(LogEntry {
                seq: u64_of(seq),
                at_ms: at,
                message,
            });
        }
        Ok(out)
    }

    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        let terms = query.terms()?;
        let session = match &query.scope {
            SearchScope::Session(key) => Some(key),
            SearchScope::Tenant(_) => None,
        };
        let text = self.search_sql(session.is_some());
        let sql = self.q(&text);
        let fts = self.fts_query(&terms);
        let mut q = sqlx::query(sql).bind(fts.as_str());
        if self.dialect == Dialect::MySql {
            q = q.bind(fts.as_str());
        }
        q = q.bind(query.scope.tenant());
        if let Some(key) = session {
            q = q.bind(key.user()).bind(key.agent()).bind(key.session());
        }
        // The engine finds and pre-ranks candidates; a final BM25 pass over them ranks all
        // backends alike (FTS5's bm25 flattens to ~0 for terms in over half of all rows).
        let candidates = query.limit.saturating_mul(4).max(50);
        q = q.bind(i64::try_from(candidates).unwrap_or(i64::MAX));
        let rows = q.fetch_all(&self.pool).await.map_err(|err| self.err(err))?;
        let mut ranker = Ranker::new(terms.clone());
        let mut hits = Vec::with_capacity(rows.len());
        let mut indexes = Vec::with_capacity(rows.len());
        for row in &rows {
            let seq: i64 = row.try_get(4).map_err(|err| self.err(err))?;
            let at: i64 = row.try_get(5).map_err(|err| self.err(err))?;
            let body: String = row.try_get(6).map_err(|err| self.err(err))?;
            indexes.push(ranker.add(&body));
            hits.push(SearchHit {
                key: key_of(row)?,
                seq: u64_of(seq),
                at_ms: at,
                score: 0.0,
                snippet: snippet(&body, &terms, 160),
            });
        }
        for (hit, index) in hits.iter_mut().zip(indexes) {
            hit.score = index.map_or(0.0, |i| ranker.score(i));
        }
        sort_hits(&mut hits);
        hits.truncate(query.limit);
        Ok(hits)
    }

    async fn purge_before(&self, tenant: Option<&str>, cutoff_ms: i64) -> Result<u64, StoreError> {
        crate::session::check_tenant(tenant)?;
        // Without a tenant, `1 = 1` makes the tenant condition true for every row.
        let tenant_any = tenant.is_none();
        let tenant = tenant.unwrap_or_default();
        let mut tx = self.begin().await?;
        for table in ["ctxkeeper_log", "ctxkeeper_states"] {
            let text = format!(
                "DELETE FROM {table} WHERE (tenant, user_id, agent, session) IN (SELECT tenant, user_id, agent, session FROM ctxkeeper_sessions WHERE updated_at < ? AND (tenant = ? OR 1 = ?))"
            );
            sqlx::query(self.q(&text))
                .bind(cutoff_ms)
                .bind(tenant)
                .bind(i64::from(tenant_any))
                .execute(&mut *tx)
                .await
                .map_err(|err| self.err(err))?;
        }
        let removed = sqlx::query(
            self.q("DELETE FROM ctxkeeper_sessions WHERE updated_at < ? AND (tenant = ? OR 1 = ?)"),
        )
        .bind(cutoff_ms)
        .bind(tenant)
        .bind(i64::from(tenant_any))
        .execute(&mut *tx)
        .await
        .map_err(|err| self.err(err))?
        .rows_affected();
        tx.commit().await.map_err(|err| self.err(err))?;
        Ok(removed)
    }
}

/// Archived items inside the SQL database: every host that reaches the database reads them.
#[derive(Debug)]
pub struct SqlArchive {
    inner: BlobArchive<SqlBlobs>,
}

#[derive(Debug)]
struct SqlBlobs {
    store: SqlStore,
}

impl SqlBlobs {
    fn insert_item_sql(&self) -> &'static str {
        match self.store.dialect {
            Dialect::MySql => {
                "INSERT IGNORE INTO ctxkeeper_archive_items (tenant_dir, path, data, size, created_at) VALUES (?, ?, ?, ?, ?)"
            }
            _ => {
                "INSERT INTO ctxkeeper_archive_items (tenant_dir, path, data, size, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_dir, path) DO NOTHING"
            }
        }
    }

    fn sum_sizes_sql(&self) -> &'static str {
        match self.store.dialect {
            Dialect::MySql => {
                "SELECT CAST(COALESCE(SUM(size), 0) AS SIGNED) FROM ctxkeeper_archive_context WHERE tenant_dir = ? AND session_dir = ?"
            }
            Dialect::Postgres => {
                "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM ctxkeeper_archive_context WHERE tenant_dir = ? AND session_dir = ?"
            }
            Dialect::Sqlite => {
                "SELECT COALESCE(SUM(size), 0) FROM ctxkeeper_archive_context WHERE tenant_dir = ? AND session_dir = ?"
            }
        }
    }
}

#[async_trait]
impl Blobs for SqlBlobs {
    async fn create(
        &self,
        tenant_dir: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let s = &self.store;
        let size = bytes.len() as i64;
        let result = sqlx::query(s.q(self.insert_item_sql()))
            .bind(tenant_dir)
            .bind(path)
            .bind(bytes)
            .bind(size)
            .bind(now_ms())
            .execute(&s.pool)
            .await
            .map_err(|err| s.err(err))?;
        Ok(result.rows_affected() == 1)
    }

    async fn get(&self, tenant_dir: &str, path: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let s = &self.store;
        sqlx::query_scalar(
            s.q("SELECT data FROM ctxkeeper_archive_items WHERE tenant_dir = ? AND path = ?"),
        )
        .bind(tenant_dir)
        .bind(path)
        .fetch_optional(&s.pool)
        .await
        .map_err(|err| s.err(err))
    }

    async fn list(&self, tenant_dir: &str, dir: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let s = &self.store;
        // A range instead of LIKE: `_` in sanitized names would be a LIKE wildcard.
        let (low, high) = (format!("{dir}/"), format!("{dir}0"));
        let rows = sqlx::query(s.q("SELECT path, size FROM ctxkeeper_archive_items WHERE tenant_dir = ? AND path >= ? AND path < ?"))
            .bind(tenant_dir)
            .bind(low.as_str())
            .bind(high.as_str())
            .fetch_all(&s.pool)
            .await
            .map_err(|err| s.err(err))?;
        let mut out = Vec::new();
        for row in rows {
            let path: String = row.try_get(0).map_err(|err| s.err(err))?;
            let size: i64 = row.try_get(1).map_err(|err| s.err(err))?;
            if let Some(name) = path.strip_prefix(&low)
                && !name.contains('/')
            {
                out.push((name.to_string(), u64_of(size)));
            }
        }
        let context: i64 = sqlx::query_scalar(s.q(self.sum_sizes_sql()))
            .bind(tenant_dir)
            .bind(dir)
            .fetch_one(&s.pool)
            .await
            .map_err(|err| s.err(err))?;
        if context > 0 {
            out.push((CONTEXT_FILE.to_string(), u64_of(context)));
        }
        Ok(out)
    }

    async fn append_context(
        &self,
        loc: &Loc,
        lines: Vec<u8>,
        count: u64,
    ) -> Result<(u64, u64), StoreError> {
        let s = &self.store;
        let dir = loc.session_dir();
        let size = lines.len() as i64;
        let count = count as i64;
        let mut last_err = None;
        for _ in 0..100 {
            let mut tx = s.begin().await?;
            let last: i64 = sqlx::query_scalar(s.q("SELECT COALESCE(MAX(last_line), 0) FROM ctxkeeper_archive_context WHERE tenant_dir = ? AND session_dir = ?"))
                .bind(loc.tenant_dir.as_str())
                .bind(dir.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(|err| s.err(err))?;
            let inserted = sqlx::query(s.q("INSERT INTO ctxkeeper_archive_context (tenant_dir, session_dir, first_line, last_line, size, data) VALUES (?, ?, ?, ?, ?, ?)"))
                .bind(loc.tenant_dir.as_str())
                .bind(dir.as_str())
                .bind(last + 1)
                .bind(last + count)
                .bind(size)
                .bind(lines.clone())
                .execute(&mut *tx)
                .await;
            match inserted {
                Ok(_) => {
                    tx.commit().await.map_err(|err| s.err(err))?;
                    return Ok((u64_of(last + 1), u64_of(last + count)));
                }
                // Another writer took these line numbers first: count again.
                Err(sqlx::Error::Database(err)) if err.is_unique_violation() => {
                    let _ = tx.rollback().await;
                    last_err = Some(err.to_string());
                }
                Err(err) => return Err(s.err(err)),
            }
        }
        Err(StoreError::backend(
            s.dialect.name(),
            format!(
                "context append kept conflicting: {}",
                last_err.unwrap_or_default()
            ),
        ))
    }

    async fn read_context(
        &self,
        loc: &Loc,
        lines: Option<(u64, u64)>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let s = &self.store;
        let dir = loc.session_dir();
        let (low, high) = lines.map_or((1, i64::MAX), |(a, b)| {
            (
                i64::try_from(a).unwrap_or(i64::MAX),
                i64::try_from(b).unwrap_or(i64::MAX),
            )
        });
        let rows = sqlx::query(s.q("SELECT first_line, data FROM ctxkeeper_archive_context WHERE tenant_dir = ? AND session_dir = ? AND last_line >= ? AND first_line <= ? ORDER BY first_line"))
            .bind(loc.tenant_dir.as_str())
            .bind(dir.as_str())
            .bind(low)
            .bind(high)
            .fetch_all(&s.pool)
            .await
            .map_err(|err| s.err(err))?;
        let Some(first_row) = rows.first() else {
            return Ok(None);
        };
        let base: i64 = first_row.try_get(0).map_err(|err| s.err(err))?;
        let mut all = Vec::new();
        for row in &rows {
            let data: Vec<u8> = row.try_get(1).map_err(|err| s.err(err))?;
            all.extend_from_slice(&data);
        }
        Ok(match lines {
            None => Some(all),
            Some((a, b)) => {
                let offset = u64_of(base) - 1;
                slice_lines(&all, a - offset, b - offset)
            }
        })
    }
}

crate::blob::delegate_offloader!(SqlArchive);

impl SqlArchive {
    /// The database the archive lives in.
    pub fn dialect(&self) -> Dialect {
        self.inner.blobs.store.dialect
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_take_a_commit_mode() {
        let url = |u: &str| sqlite_url(u).map_err(|e| e.to_string());
        assert_eq!(
            url("sqlite://:memory:"),
            Ok(("sqlite://:memory:?mode=rwc".to_string(), SqliteSync::Full))
        );
        assert_eq!(
            url("sqlite://:memory:?synchronous=NORMAL&cache=shared"),
            Ok((
                "sqlite://:memory:?cache=shared&mode=rwc".to_string(),
                SqliteSync::Normal
            ))
        );
        assert_eq!(
            url("sqlite://:memory:?mode=ro&synchronous=full").map(|(_, s)| s),
            Ok(SqliteSync::Full)
        );
        let bad = url("sqlite://:memory:?synchronous=off");
        assert!(
            bad.as_ref().is_err_and(|e| e.contains("expected full")),
            "{bad:?}"
        );
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn the_commit_mode_reaches_every_connection() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        for (query, expected) in [("", 2i64), ("?synchronous=normal", 1)] {
            let path = dir.path().join(format!("s{expected}.db"));
            let store = SqlStore::connect(&format!("sqlite://{}{query}", path.display())).await?;
            // SQLite reports FULL as 2 and NORMAL as 1.
            let mode: i64 = sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(&store.pool)
                .await?;
            assert_eq!(mode, expected, "{query}");
        }
        Ok(())
    }

    /// A database written by schema version 1 (state inside the session row) opens, migrates
    /// and keeps its state.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_version_1_database_migrates() -> Result<(), Box<dyn std::error::Error>> {
        use sqlx::Executor;
        sqlx::any::install_default_drivers();
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("v1.db").display());
        let pool = AnyPool::connect(&sqlite_url(&url)?.0).await?;
        pool.execute("CREATE TABLE ctxkeeper_schema (version BIGINT NOT NULL)")
            .await?;
        for statement in SQLITE_V1 {
            pool.execute(*statement).await?;
        }
        pool.execute("INSERT INTO ctxkeeper_schema (version) VALUES (1)")
            .await?;
        let mut state = AgentState::new();
        state
            .extensions
            .insert("plan".into(), serde_json::json!("v1"));
        sqlx::query("INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, version, state, log_len, created_at, updated_at) VALUES ('default', 'default', 'default', 'old', 3, ?, 0, 1, 1)")
            .bind(state.to_json()?)
            .execute(&pool)
            .await?;
        pool.close().await;

        let store = SqlStore::connect(&url).await?;
        let key = SessionKey::simple("old")?;
        let loaded = store.load(&key).await?.ok_or("state lost in migration")?;
        assert_eq!((loaded.version, loaded.state), (3, state));
        assert_eq!(store.save(&key, &AgentState::new(), Some(3)).await?, 4);
        Ok(())
    }

    #[test]
    fn postgres_placeholders_are_numbered_outside_strings() {
        assert_eq!(
            Dialect::Postgres.sql("SELECT '?' FROM t WHERE a = ? AND b = ?"),
            "SELECT '?' FROM t WHERE a = $1 AND b = $2"
        );
        assert_eq!(Dialect::MySql.sql("a = ?"), "a = ?");
    }
}
