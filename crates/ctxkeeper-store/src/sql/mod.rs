//! The SQL session stores — SQLite (the embedded default), PostgreSQL and MySQL/MariaDB — and
//! the archive inside them.
//!
//! One implementation serves the three databases through sqlx's `Any` driver with runtime
//! queries; a [`Dialect`] supplies what differs: the schema, upserts and full-text search
//! (SQLite FTS5 with bm25, PostgreSQL `tsvector` with `ts_rank`, MySQL/MariaDB `FULLTEXT` with
//! `MATCH … AGAINST`). The engine finds and pre-ranks candidates; a final BM25 pass over their
//! indexed text gives every backend the same ranking. SQLite's index holds each entry's tenant
//! and session as tokens beside its text, so a search is confined to its scope inside the
//! index; PostgreSQL combines its index with the log's key (tenant, user, agent, session, seq).
//!
//! - **Schema**: created and migrated on first use, under a lock (SQLite `BEGIN IMMEDIATE`,
//!   PostgreSQL advisory lock, MySQL `GET_LOCK`), recorded in `ctxkeeper_schema` — not in
//!   sqlx's `_sqlx_migrations`, which a host application may own in the same database.
//! - **State**: `ctxkeeper_sessions` holds one small row per session (version, log counter,
//!   times), `ctxkeeper_states` the head of the state and the shape of its current generation,
//!   and `ctxkeeper_context` the items of every generation (see [`crate::generations`]), so
//!   appends never rewrite the state and a step writes only the items it added. A save
//!   is a conditional `UPDATE … WHERE version = expected` on the session row plus the state
//!   upsert in one transaction; a stale writer changes nothing and gets a conflict.
//! - **The log** is `ctxkeeper_log`, one row per message numbered by a counter on the session
//!   row that the append bumps first; the row lock (the write lock in SQLite) serializes
//!   concurrent appenders, so numbers never repeat or skip. The indexed text of a message is
//!   capped at 256 KiB; the message itself is stored whole.
//! - **Atomic save with log entries** ([`SessionStore::save_and_append`]): the swap, the
//!   state and the log rows in one transaction. On SQLite these go through a group commit:
//!   saves that arrive while a transaction runs share the next one, written with one
//!   multi-row statement per table, so many sessions' saves cost one write lock and one sync
//!   of the write-ahead log.
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
//!
//! The module splits by concern: `open` connects and sets SQLite up, `schema` creates and
//! migrates the tables, `save` is one save's transaction, `group` (with `writer_thread`)
//! SQLite's group commit, `search` the full-text index and its queries, `store` the rest of
//! the [`SessionStore`] contract and `archive` the offloader inside the database.

use std::sync::Arc;

use ctxkeeper_core::model::Message;
use sqlx::any::AnyRow;
use sqlx::{AnyPool, AssertSqlSafe, Row};

use crate::generations::{ContextWrite, Split};
use crate::state::SessionKey;
use crate::text::indexed_body;
use crate::{StoreError, redact};

pub use archive::SqlArchive;
use group::Committer;

mod archive;
mod group;
#[cfg(all(test, feature = "sqlite"))]
mod idle_tests;
mod open;
mod save;
mod schema;
mod search;
mod store;
#[cfg(test)]
mod tests;
#[cfg(feature = "sqlite")]
mod writer_thread;

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
}

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
    /// SQLite only: the group commit that [`SessionStore::save_and_append`] goes through.
    group: Option<Committer>,
    /// SQLite only: log rows this process wrote since it last indexed them (a hint for when
    /// to index; `ctxkeeper_log_indexed` is what says which rows are in the index).
    unindexed: Arc<std::sync::atomic::AtomicU64>,
}

/// A save with its log entries, serialized and waiting for its transaction.
#[derive(Debug)]
struct PendingCommit {
    key: SessionKey,
    split: Split,
    write: ContextWrite,
    expected: Option<u64>,
    rows: Vec<(String, String)>,
}

/// A write transaction, holding this process's SQLite writer slot until it ends: on a
/// pooled connection (`'static`), or on the group commit's own connection.
struct WriteTx<'c> {
    tx: sqlx::Transaction<'c, sqlx::Any>,
    _writer: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl WriteTx<'_> {
    async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }

    async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }
}

/// Derefs to the connection, like the transaction it wraps: `&mut *tx` executes in it.
impl std::ops::Deref for WriteTx<'_> {
    type Target = sqlx::AnyConnection;

    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

impl SqlStore {
    /// The database this store talks to.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn err(&self, err: sqlx::Error) -> StoreError {
        StoreError::backend_caused(self.dialect.name(), err)
    }

    fn q(&self, text: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(self.dialect.sql(text))
    }

    async fn begin(&self) -> Result<WriteTx<'static>, StoreError> {
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

    /// Begins a write transaction on `conn` (the group commit's own connection), or on a
    /// pooled one when `None`.
    async fn begin_on<'c>(
        &self,
        conn: Option<&'c mut sqlx::AnyConnection>,
    ) -> Result<WriteTx<'c>, StoreError> {
        let Some(conn) = conn else {
            return self.begin().await;
        };
        let writer = Arc::clone(&self.writers).lock_owned().await;
        let tx = sqlx::Connection::begin_with(conn, "BEGIN IMMEDIATE")
            .await
            .map_err(|err| self.err(err))?;
        Ok(WriteTx {
            tx,
            _writer: Some(writer),
        })
    }

    /// Commits `tx` when its writes succeeded, rolls it back (releasing the write lock at
    /// once, not when the pool next touches the connection) when they failed.
    async fn finish<T>(
        &self,
        tx: WriteTx<'_>,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
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

    /// Runs one statement without parameters inside `tx`.
    async fn execute_in(&self, tx: &mut WriteTx<'_>, text: &'static str) -> Result<(), StoreError> {
        sqlx::query(text)
            .execute(&mut **tx)
            .await
            .map_err(|err| self.err(err))?;
        Ok(())
    }
}

fn key_of(row: &AnyRow) -> Result<SessionKey, StoreError> {
    let get = |i: usize| {
        row.try_get::<String, _>(i)
            .map_err(|err| StoreError::Corrupt(err.to_string()))
    };
    SessionKey::new(get(0)?, get(1)?, get(2)?, get(3)?)
}

/// Binds a session key's four columns, in schema order.
fn bind_key<'q>(
    query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    key: &'q SessionKey,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    query
        .bind(key.tenant())
        .bind(key.user())
        .bind(key.agent())
        .bind(key.session())
}

/// Log rows as the log table stores them: the message's JSON and its indexed text.
fn log_rows(messages: &[Message]) -> Result<Vec<(String, String)>, StoreError> {
    messages
        .iter()
        .map(|message| {
            let json = crate::generations::json_exact(message).map_err(|err| {
                StoreError::InvalidInput(format!("message does not serialize: {err}"))
            })?;
            Ok((json, indexed_body(message)))
        })
        .collect()
}

fn u64_of(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
