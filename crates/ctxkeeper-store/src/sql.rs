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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, AssertSqlSafe, Row};

use crate::blob::{BlobArchive, Blobs, CONTEXT_FILE, Loc, slice_lines};
use crate::generations::{ContextWrite, Shape, Split, assemble, messages_of, next_shape, split};
use crate::session::{
    AppendOutcome, Committed, HistoryPage, LogEntry, SearchHit, SearchQuery, SearchScope,
    SessionFilter, SessionInfo, SessionStore, Versioned, check_messages, sort_hits,
};
use crate::state::{AgentState, SessionKey};
use crate::text::{Ranker, indexed_body, snippet};
use crate::time::now_ms;
use crate::{StoreError, redact};

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

    /// The statements of each schema version, in order.
    fn migrations(self) -> &'static [&'static [&'static str]] {
        match self {
            Dialect::Sqlite => &[SQLITE_V1, SQLITE_V2, SQLITE_V3, SQLITE_V4, SQLITE_V5],
            Dialect::Postgres => &[
                POSTGRES_V1,
                POSTGRES_V2,
                POSTGRES_V3,
                POSTGRES_V4,
                POSTGRES_V5,
            ],
            Dialect::MySql => &[MYSQL_V1, MYSQL_V2, MYSQL_V3, MYSQL_V4, MYSQL_V5],
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

// Version 3 stores the context in generations (see `crate::generations`): the state row keeps
// the head and the shape of the current generation, `ctxkeeper_context` the items of every
// generation. Rows written before keep `generation` NULL and their whole state, and load as
// they are.
const SQLITE_V3: &[&str] = &[
    "ALTER TABLE ctxkeeper_states ADD COLUMN generation INTEGER",
    "ALTER TABLE ctxkeeper_states ADD COLUMN context_len INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE ctxkeeper_states ADD COLUMN trail_len INTEGER NOT NULL DEFAULT 0",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_context (tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL, generation INTEGER NOT NULL, idx INTEGER NOT NULL, item TEXT NOT NULL, PRIMARY KEY (tenant, user_id, agent, session, generation, idx))",
];

const POSTGRES_V3: &[&str] = &[
    "ALTER TABLE ctxkeeper_states ADD COLUMN IF NOT EXISTS generation BIGINT",
    "ALTER TABLE ctxkeeper_states ADD COLUMN IF NOT EXISTS context_len BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE ctxkeeper_states ADD COLUMN IF NOT EXISTS trail_len BIGINT NOT NULL DEFAULT 0",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_context (tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL, generation BIGINT NOT NULL, idx BIGINT NOT NULL, item TEXT NOT NULL, PRIMARY KEY (tenant, user_id, agent, session, generation, idx))",
];

const MYSQL_V3: &[&str] = &[
    "ALTER TABLE ctxkeeper_states ADD COLUMN generation BIGINT NULL, ADD COLUMN context_len BIGINT NOT NULL DEFAULT 0, ADD COLUMN trail_len BIGINT NOT NULL DEFAULT 0",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_context (tenant VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, user_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, agent VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, session VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, generation BIGINT NOT NULL, idx BIGINT NOT NULL, item LONGTEXT NOT NULL, PRIMARY KEY (tenant, user_id, agent, session, generation, idx)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
];

// Version 4 (SQLite) indexes where each log entry belongs beside its text: the full-text
// table gets a `scope` column holding two tokens, the tenant's and the session's
// ([`scope_token`]), so a search is restricted by tenant or session inside the index
// (`scope : "s…" AND body : (…)`) and ranks only that scope's matches. The table is
// contentless (the text lives in `ctxkeeper_log` already) and deletes by rowid. Existing rows
// are indexed again here; versions 1–3 stay as they were written (a new database runs them
// too).
const SQLITE_V4: &[&str] = &[
    "DROP TRIGGER IF EXISTS ctxkeeper_log_ai",
    "DROP TRIGGER IF EXISTS ctxkeeper_log_ad",
    "DROP TABLE IF EXISTS ctxkeeper_log_fts",
    "CREATE VIRTUAL TABLE ctxkeeper_log_fts USING fts5(body, scope, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 2')",
    "INSERT INTO ctxkeeper_log_fts (rowid, body, scope) SELECT id, body, 't' || hex(tenant) || ' s' || hex(tenant || char(31) || user_id || char(31) || agent || char(31) || session) FROM ctxkeeper_log",
    "CREATE TRIGGER ctxkeeper_log_ai AFTER INSERT ON ctxkeeper_log BEGIN INSERT INTO ctxkeeper_log_fts (rowid, body, scope) VALUES (new.id, new.body, 't' || hex(new.tenant) || ' s' || hex(new.tenant || char(31) || new.user_id || char(31) || new.agent || char(31) || new.session)); END",
    "CREATE TRIGGER ctxkeeper_log_ad AFTER DELETE ON ctxkeeper_log BEGIN DELETE FROM ctxkeeper_log_fts WHERE rowid = old.id; END",
];

// Version 4 changes nothing in PostgreSQL, whose planner already combines the GIN index with
// the log's unique key (tenant, user, agent, session, seq) and so reads a session's rows
// only, nor in MySQL/MariaDB, whose `FULLTEXT` search reads the whole index and then filters
// by scope.
const POSTGRES_V4: &[&str] = &[];
const MYSQL_V4: &[&str] = &[];

// Version 5 (SQLite) indexes the log in batches instead of row by row: an insert trigger
// wrote a new full-text segment in every commit (a third of the pages a step wrote), now
// `ctxkeeper_log_indexed` says up to which log row the index holds, and rows after it are
// indexed together ([`SqlStore::index_log_in`]) once enough are waiting, and always before a
// search reads the index. Rowids are never reused (AUTOINCREMENT), so every row up to the
// mark is in the index unless it was deleted; the delete trigger only touches those.
const SQLITE_V5: &[&str] = &[
    "DROP TRIGGER IF EXISTS ctxkeeper_log_ai",
    "DROP TRIGGER IF EXISTS ctxkeeper_log_ad",
    "CREATE TABLE IF NOT EXISTS ctxkeeper_log_indexed (upto INTEGER NOT NULL)",
    "DELETE FROM ctxkeeper_log_indexed",
    "INSERT INTO ctxkeeper_log_indexed (upto) SELECT COALESCE(MAX(id), 0) FROM ctxkeeper_log",
    "CREATE TRIGGER ctxkeeper_log_ad AFTER DELETE ON ctxkeeper_log WHEN old.id <= (SELECT upto FROM ctxkeeper_log_indexed) BEGIN DELETE FROM ctxkeeper_log_fts WHERE rowid = old.id; END",
];

// Version 5 changes nothing in PostgreSQL (the generated `tsvector` column is indexed with
// its row) nor in MySQL/MariaDB (InnoDB batches its full-text index itself).
const POSTGRES_V5: &[&str] = &[];
const MYSQL_V5: &[&str] = &[];

/// Indexes the log rows after `ctxkeeper_log_indexed`'s mark for search and moves the mark
/// (SQLite, inside a write transaction).
const INDEX_LOG: [&str; 2] = [
    "INSERT INTO ctxkeeper_log_fts (rowid, body, scope) SELECT id, body, 't' || hex(tenant) || ' s' || hex(tenant || char(31) || user_id || char(31) || agent || char(31) || session) FROM ctxkeeper_log WHERE id > (SELECT upto FROM ctxkeeper_log_indexed) ORDER BY id",
    "UPDATE ctxkeeper_log_indexed SET upto = (SELECT COALESCE(MAX(id), 0) FROM ctxkeeper_log) WHERE upto < (SELECT COALESCE(MAX(id), 0) FROM ctxkeeper_log)",
];

/// Log rows waiting for the full-text index (SQLite) before a group commit indexes them.
const INDEX_BATCH: u64 = 256;

/// The token SQLite's full-text index holds for a search scope (schema version 4): `t` + the
/// tenant's bytes in hex, or `s` + the hex of tenant, user, agent and session joined by
/// U+001F (which no identifier holds). Hex keeps each one token whatever characters the
/// identifiers use; the tokenizer folds SQL's upper-case `hex()` to these.
fn scope_token(scope: &SearchScope) -> String {
    match scope {
        SearchScope::Tenant(tenant) => format!("t{}", hex::encode(tenant)),
        SearchScope::Session(key) => {
            let joined = [key.tenant(), key.user(), key.agent(), key.session()].join("\u{1f}");
            format!("s{}", hex::encode(joined))
        }
    }
}

/// The head of a multi-row insert of log rows (per save and in a group's script).
const LOG_INSERT: &str =
    "INSERT INTO ctxkeeper_log (tenant, user_id, agent, session, seq, at, message, body)";

/// The head of a multi-row insert of context items (per save and in a group's script).
const CONTEXT_INSERT: &str =
    "INSERT INTO ctxkeeper_context (tenant, user_id, agent, session, generation, idx, item)";

/// The head and tail of a multi-row upsert of session rows (a group's writes).
const SESSION_UPSERT: (&str, &str) = (
    "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, version, log_len, created_at, updated_at)",
    " ON CONFLICT (tenant, user_id, agent, session) DO UPDATE SET version = excluded.version, log_len = excluded.log_len, updated_at = excluded.updated_at",
);

/// The head and tail of a multi-row upsert of state heads (a group's writes).
const STATE_UPSERT: (&str, &str) = (
    "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state, generation, context_len, trail_len)",
    " ON CONFLICT (tenant, user_id, agent, session) DO UPDATE SET state = excluded.state, generation = excluded.generation, context_len = excluded.context_len, trail_len = excluded.trail_len",
);

/// One row's placeholders for [`SESSION_UPSERT`], [`STATE_UPSERT`] and [`LOG_INSERT`].
const ROW_OF_EIGHT: &str = "(?, ?, ?, ?, ?, ?, ?, ?)";

/// One row's placeholders for [`CONTEXT_INSERT`].
const ROW_OF_SEVEN: &str = "(?, ?, ?, ?, ?, ?, ?)";

/// Rows per multi-row INSERT when appending to the log.
const INSERT_BATCH: usize = 100;

/// The query reading the stored version, log length and generation shape of `keys` sessions
/// (SQLite's group commit; the keys are bound in order). The bundled SQLite finds each
/// session through its primary key (a test holds it to that: older SQLite releases scan the
/// whole table for a row-value `IN (VALUES …)` of several keys).
fn group_shapes_sql(keys: usize) -> String {
    let values = vec!["(?, ?, ?, ?)"; keys].join(", ");
    format!(
        "SELECT s.tenant, s.user_id, s.agent, s.session, s.version, s.log_len, t.generation, t.context_len, t.trail_len, t.tenant FROM ctxkeeper_sessions s LEFT JOIN ctxkeeper_states t ON t.tenant = s.tenant AND t.user_id = s.user_id AND t.agent = s.agent AND t.session = s.session WHERE (s.tenant, s.user_id, s.agent, s.session) IN (VALUES {values})"
    )
}

/// What a group commit reads of a stored session: its version, its log length and the shape
/// of its current generation (`None` when it stores no state).
type Found = (Option<u64>, i64, Option<Shape>);

/// [`Found`] from [`group_shapes_sql`]'s columns: the version, the log length and, when the
/// session stores a state, its generation, context length and trail length.
fn found_from(
    version: Option<i64>,
    log_len: Option<i64>,
    shape: Option<[Option<i64>; 3]>,
) -> Found {
    let shape = shape.map(|[generation, context, trail]| Shape {
        generation: generation.map_or(0, u64_of),
        context: context.map_or(0, u64_of),
        trail: trail.map_or(0, u64_of),
    });
    (version.map(u64_of), log_len.unwrap_or(0), shape)
}

/// A group commit that failed as a whole (see [`SqlStore::group_batched`]).
#[derive(Debug)]
struct GroupFailure {
    err: StoreError,
    /// The connection may still be inside the failed transaction: close it.
    close: bool,
}

/// A save of a group that won its compare-and-swap, and what it writes.
struct Win<'a> {
    commit: &'a PendingCommit,
    version: i64,
    log_len: i64,
    generation: i64,
    first_item: u64,
    after: Shape,
}

/// Judges each save of a group against what its session stores (`found`, by key; a key
/// missing there stores nothing): a lost swap or an append that does not continue its
/// generation fails that save; the others win, with the versions, log sequence numbers and
/// item positions they write.
fn judge_group<'a>(
    group: &'a [PendingCommit],
    found: &HashMap<SessionKey, Found>,
) -> (Vec<Result<Committed, StoreError>>, Vec<Win<'a>>) {
    let mut wins = Vec::with_capacity(group.len());
    let mut outcomes = Vec::with_capacity(group.len());
    for commit in group {
        let (actual, log_len, before) = found.get(&commit.key).copied().unwrap_or_default();
        if actual != commit.expected {
            outcomes.push(Err(StoreError::Conflict {
                expected: commit.expected,
                actual,
            }));
            continue;
        }
        let judged = next_shape(before, commit.write, &commit.split).and_then(|(after, fresh)| {
            let version = i64::try_from(commit.expected.unwrap_or(0))
                .map_err(|_| StoreError::InvalidInput("version out of range".into()))?
                + 1;
            let generation = i64::try_from(after.generation)
                .map_err(|_| StoreError::InvalidInput("generation out of range".into()))?;
            let first_item = match (fresh, before) {
                (false, Some(shape)) => shape.context + shape.trail,
                _ => 0,
            };
            Ok((after, version, generation, first_item))
        });
        match judged {
            Ok((after, version, generation, first_item)) => {
                let log_len = log_len + commit.rows.len() as i64;
                outcomes.push(Ok(Committed {
                    version: u64_of(version),
                    appended: (!commit.rows.is_empty()).then(|| AppendOutcome {
                        first_seq: u64_of(log_len - commit.rows.len() as i64 + 1),
                        last_seq: u64_of(log_len),
                    }),
                }));
                wins.push(Win {
                    commit,
                    version,
                    log_len,
                    generation,
                    first_item,
                    after,
                });
            }
            Err(err) => outcomes.push(Err(err)),
        }
    }
    (outcomes, wins)
}

/// A value bound to a placeholder of a [`GroupScript`].
enum Bind<'a> {
    /// The four columns of a session key.
    Key(&'a SessionKey),
    Int(i64),
    Text(&'a str),
}

/// SQL text and its values in placeholder order.
struct GroupScript<'a> {
    text: String,
    binds: Vec<Bind<'a>>,
}

/// The statements writing a group's winners, as one script ending in `COMMIT`: their
/// session rows (version, log length, time), context items, heads and generation shapes,
/// and log rows numbered up to each one's new log length, with multi-row statements of at
/// most [`INSERT_BATCH`] rows.
fn group_writes<'a>(wins: &[Win<'a>], now: i64) -> GroupScript<'a> {
    let mut script = GroupScript {
        text: String::new(),
        binds: Vec::new(),
    };
    let mut statement = |head: &str, row: &str, tail: &str, rows: usize| {
        let values = vec![row; rows].join(", ");
        script
            .text
            .push_str(&format!("{head} VALUES {values}{tail}; "));
    };
    for chunk in wins.chunks(INSERT_BATCH) {
        statement(
            SESSION_UPSERT.0,
            ROW_OF_EIGHT,
            SESSION_UPSERT.1,
            chunk.len(),
        );
    }
    let items: Vec<(&SessionKey, i64, i64, &str)> = wins
        .iter()
        .flat_map(|win| {
            let key = &win.commit.key;
            let (generation, first) = (win.generation, win.first_item);
            (win.commit.split.items.iter().enumerate())
                .map(move |(i, item)| (key, generation, (first + i as u64) as i64, item.as_str()))
        })
        .collect();
    for chunk in items.chunks(INSERT_BATCH) {
        statement(CONTEXT_INSERT, ROW_OF_SEVEN, "", chunk.len());
    }
    for chunk in wins.chunks(INSERT_BATCH) {
        statement(STATE_UPSERT.0, ROW_OF_EIGHT, STATE_UPSERT.1, chunk.len());
    }
    let logged: Vec<(&SessionKey, i64, &(String, String))> = wins
        .iter()
        .flat_map(|win| {
            let first = win.log_len - win.commit.rows.len() as i64 + 1;
            (win.commit.rows.iter().enumerate())
                .map(move |(i, row)| (&win.commit.key, first + i as i64, row))
        })
        .collect();
    for chunk in logged.chunks(INSERT_BATCH) {
        statement(LOG_INSERT, ROW_OF_EIGHT, "", chunk.len());
    }
    script.text.push_str("COMMIT");
    // The values, in the order of the statements above.
    for win in wins {
        script.binds.extend([
            Bind::Key(&win.commit.key),
            Bind::Int(win.version),
            Bind::Int(win.log_len),
            Bind::Int(now),
            Bind::Int(now),
        ]);
    }
    for (key, generation, idx, item) in items {
        script.binds.extend([
            Bind::Key(key),
            Bind::Int(generation),
            Bind::Int(idx),
            Bind::Text(item),
        ]);
    }
    for win in wins {
        script.binds.extend([
            Bind::Key(&win.commit.key),
            Bind::Text(win.commit.split.head.as_str()),
            Bind::Int(win.generation),
            Bind::Int(win.after.context as i64),
            Bind::Int(win.after.trail as i64),
        ]);
    }
    for (key, seq, (json, body)) in logged {
        script.binds.extend([
            Bind::Key(key),
            Bind::Int(seq),
            Bind::Int(now),
            Bind::Text(json.as_str()),
            Bind::Text(body.as_str()),
        ]);
    }
    script
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

/// Who commits a SQLite store's saves in groups: its writer thread for a database file,
/// a task on `sqlx`'s connection for an in-memory one.
#[derive(Debug, Clone)]
enum Committer {
    Task(GroupCommit),
    #[cfg(feature = "sqlite")]
    Thread(writer_thread::WriterThread),
}

impl Committer {
    async fn commit(&self, commit: PendingCommit) -> Result<Committed, StoreError> {
        match self {
            Committer::Task(group) => group.commit(commit).await,
            #[cfg(feature = "sqlite")]
            Committer::Thread(thread) => thread.commit(commit).await,
        }
    }
}

/// The most saves one group commit carries.
const MAX_GROUP: usize = 64;

/// Group commit for SQLite's single writer: saves that arrive while a transaction runs wait
/// and then share the next one, so their write-lock hand-over, their `COMMIT` and the sync
/// of the write-ahead log are paid once per group instead of once per save. Under one
/// writer the sessions' saves queue anyway; grouping is what lets the queue drain as fast as
/// it fills. A lone save waits for nothing: it is a group of one.
#[derive(Debug, Clone)]
struct GroupCommit {
    queue: tokio::sync::mpsc::UnboundedSender<(
        PendingCommit,
        tokio::sync::oneshot::Sender<Result<Committed, StoreError>>,
    )>,
}

impl GroupCommit {
    /// Starts the committing task for `store` (which must not itself group: the task would
    /// hold its own queue open and never end). The task ends when the last store clone that
    /// holds the queue is dropped.
    fn start(store: SqlStore) -> GroupCommit {
        let (queue, mut pending) = tokio::sync::mpsc::unbounded_channel::<(
            PendingCommit,
            tokio::sync::oneshot::Sender<Result<Committed, StoreError>>,
        )>();
        tokio::spawn(async move {
            let mut group = Vec::with_capacity(MAX_GROUP);
            // The connection every group writes on, taken from the pool for the first group
            // and again after a group failed as a whole (its connection may be broken).
            let mut writer: Option<sqlx::pool::PoolConnection<sqlx::Any>> = None;
            // Told after each group; ends with this task, when the sender is dropped.
            let (wal_grew, grown) = tokio::sync::mpsc::channel(1);
            tokio::spawn(checkpoint_in_background(store.clone(), grown));
            while pending.recv_many(&mut group, MAX_GROUP).await > 0 {
                let (commits, replies): (Vec<_>, Vec<_>) = group.drain(..).unzip();
                if writer.is_none() {
                    writer = store.writer_connection().await;
                }
                let outcomes = store.commit_group(writer.as_deref_mut(), &commits).await;
                if outcomes.iter().all(Result::is_err)
                    && let Some(failed) = writer.take()
                {
                    // It may still be inside the failed transaction: never back to the pool.
                    let _ = failed.close().await;
                }
                // Full: a round is already due.
                let _ = wal_grew.try_send(());
                for (reply, outcome) in replies.into_iter().zip(outcomes) {
                    // A caller that gave up waiting is gone; its save stands either way.
                    let _ = reply.send(outcome);
                }
                // After the replies: the saves waiting meanwhile form the next group.
                if store.unindexed.load(std::sync::atomic::Ordering::Relaxed) >= INDEX_BATCH
                    && let Err(err) = store.index_log(writer.as_deref_mut()).await
                {
                    tracing::warn!(%err, "indexing the session log for search failed; the next search retries");
                }
            }
        });
        GroupCommit { queue }
    }

    async fn commit(&self, commit: PendingCommit) -> Result<Committed, StoreError> {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        let stopped = || StoreError::backend("sqlite", "the group commit task has stopped");
        self.queue.send((commit, reply)).map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }
}

/// How often, at most, the write-ahead log is checkpointed while groups commit.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// Copies the write-ahead log into the database file while the group commit goes on
/// writing. SQLite's own checkpoint runs inside the commit that crosses 1,000 pages of log,
/// and that commit, and every save queued behind it, waited for the page copies and a sync
/// of the database file: an eighth of the writer's time under load. Here the bulk is copied
/// on a connection of the pool beside the writer (`PASSIVE` never blocks it); then, with
/// this process's writers held off, what they wrote meanwhile (a few pages), so the log is
/// copied whole and the next write starts it over from its beginning: without that last
/// step a log that is always being written to is never restarted and grows without bound.
/// Runs after a group committed (`grown` says so), at most every [`CHECKPOINT_EVERY`]; ends
/// with the group commit.
async fn checkpoint_in_background(store: SqlStore, mut grown: tokio::sync::mpsc::Receiver<()>) {
    while grown.recv().await.is_some() {
        // The connection is taken before the writers are held off, so they never wait for
        // the pool.
        let copied = match store.pool.acquire().await {
            Ok(mut conn) => {
                let checkpoint = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)");
                match checkpoint.execute(&mut *conn).await {
                    Ok(_) => {
                        let _writers = store.writers.lock().await;
                        sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                            .execute(&mut *conn)
                            .await
                    }
                    Err(err) => Err(err),
                }
            }
            Err(err) => Err(err),
        };
        if let Err(err) = copied {
            tracing::warn!(%err, "checkpointing the SQLite write-ahead log failed; the next round retries");
        }
        tokio::time::sleep(CHECKPOINT_EVERY).await;
    }
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
    /// Connects and migrates. `sqlite://PATH` creates the file (and its directory) if
    /// missing; `sqlite://` alone is refused (say where the database lives).
    pub async fn connect(url: &str) -> Result<SqlStore, StoreError> {
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
        let pool = options.connect(&url).await.map_err(|err| {
            StoreError::backend(dialect.name(), format!("cannot connect to {shown}: {err}"))
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
    fn committer(
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

    /// A connection for the group commit to write on, which leaves checkpoints to
    /// [`checkpoint_in_background`]; `None` when the pool has none to give (each group then
    /// takes one, and tries again for its own the next time).
    async fn writer_connection(&self) -> Option<sqlx::pool::PoolConnection<sqlx::Any>> {
        use sqlx::Executor;
        let mut conn = self.pool.acquire().await.ok()?;
        match conn.execute("PRAGMA wal_autocheckpoint = 0").await {
            Ok(_) => Some(conn),
            Err(err) => {
                tracing::warn!(%err, "the SQLite group commit's connection refused its settings");
                None
            }
        }
    }

    /// Indexes the log rows the full-text index does not hold yet (SQLite), in a transaction
    /// of its own on `conn` (or a pooled connection).
    async fn index_log(&self, conn: Option<&mut sqlx::AnyConnection>) -> Result<(), StoreError> {
        let mut tx = self.begin_on(conn).await?;
        let indexed = self.index_log_in(&mut tx).await;
        self.finish(tx, indexed).await
    }

    /// Adds the rows after `ctxkeeper_log_indexed`'s mark to the full-text index and moves the
    /// mark to the last row, inside `tx` (SQLite).
    async fn index_log_in(&self, tx: &mut WriteTx<'_>) -> Result<(), StoreError> {
        // This transaction holds the process's write lock: no row is logged meanwhile.
        self.unindexed
            .store(0, std::sync::atomic::Ordering::Relaxed);
        for statement in INDEX_LOG {
            self.execute_in(tx, statement).await.inspect_err(|_| {
                self.unindexed
                    .fetch_add(INDEX_BATCH, std::sync::atomic::Ordering::Relaxed);
            })?;
        }
        Ok(())
    }

    /// Before a search (SQLite): indexes what the log holds beyond the index, if anything.
    async fn index_log_for_search(&self) -> Result<(), StoreError> {
        let behind: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM ctxkeeper_log_indexed WHERE upto < (SELECT COALESCE(MAX(id), 0) FROM ctxkeeper_log)",
        )
        .fetch_optional(&self.pool)
        .await
        .map_err(|err| self.err(err))?;
        if behind.is_some() {
            self.index_log(None).await?;
        }
        Ok(())
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

    /// The compare-and-swap of a save, inside `tx`: moves the session row to the next
    /// version and counts `logged` more log entries, or answers [`StoreError::Conflict`]
    /// having changed nothing (so a group commit can go on with its other saves).
    async fn cas_in(
        &self,
        tx: &mut WriteTx<'_>,
        key: &SessionKey,
        expected: Option<u64>,
        logged: usize,
        now: i64,
    ) -> Result<u64, StoreError> {
        let expected_i = i64::try_from(expected.unwrap_or(0))
            .map_err(|_| StoreError::InvalidInput("version out of range".into()))?;
        let new_version = expected_i + 1;
        if expected.is_none() {
            // A first save may find no row yet. With a version expected, a missing row is a
            // conflict anyway, and this insert is skipped.
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
        }
        let updated = sqlx::query(self.q("UPDATE ctxkeeper_sessions SET version = ?, updated_at = ?, log_len = log_len + ? WHERE tenant = ? AND user_id = ? AND agent = ? AND session = ? AND COALESCE(version, 0) = ?"))
            .bind(new_version).bind(now).bind(logged as i64)
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
        Ok(u64_of(new_version))
    }

    /// The stored version and the shape of the current generation (`None` when no state
    /// row exists; generation 0 for a row written whole, before generations).
    async fn shape_in(
        &self,
        tx: &mut WriteTx<'_>,
        key: &SessionKey,
    ) -> Result<(Option<u64>, Option<Shape>), StoreError> {
        let row = sqlx::query(self.q("SELECT s.version, t.generation, t.context_len, t.trail_len, t.tenant FROM ctxkeeper_sessions s LEFT JOIN ctxkeeper_states t ON t.tenant = s.tenant AND t.user_id = s.user_id AND t.agent = s.agent AND t.session = s.session WHERE s.tenant = ? AND s.user_id = ? AND s.agent = ? AND s.session = ?"))
            .bind(key.tenant()).bind(key.user()).bind(key.agent()).bind(key.session())
            .fetch_optional(&mut **tx)
            .await
            .map_err(|err| self.err(err))?;
        let Some(row) = row else {
            return Ok((None, None));
        };
        let version: Option<i64> = row.try_get(0).map_err(|err| self.err(err))?;
        let has_state: Option<String> = row.try_get(4).map_err(|err| self.err(err))?;
        if has_state.is_none() {
            return Ok((version.map(u64_of), None));
        }
        let generation: Option<i64> = row.try_get(1).map_err(|err| self.err(err))?;
        let context: i64 = row.try_get(2).map_err(|err| self.err(err))?;
        let trail: i64 = row.try_get(3).map_err(|err| self.err(err))?;
        Ok((
            version.map(u64_of),
            Some(Shape {
                generation: generation.map_or(0, u64_of),
                context: u64_of(context),
                trail: u64_of(trail),
            }),
        ))
    }

    /// Writes the state of a session whose row [`cas_in`](Self::cas_in) just moved: its
    /// head and the shape of its generation, and the new items of that generation. The row
    /// is locked (SQLite: the write lock is held) until commit, so the state and its version
    /// change together.
    async fn state_in(
        &self,
        tx: &mut WriteTx<'_>,
        key: &SessionKey,
        split: &Split,
        before: Option<Shape>,
        after: Shape,
        fresh: bool,
    ) -> Result<(), StoreError> {
        let first = if fresh {
            0
        } else {
            before.map_or(0, |s| s.context + s.trail)
        };
        let generation = i64::try_from(after.generation)
            .map_err(|_| StoreError::InvalidInput("generation out of range".into()))?;
        for (n, chunk) in split.items.chunks(INSERT_BATCH).enumerate() {
            let values = vec!["(?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
            let text = format!("{CONTEXT_INSERT} VALUES {values}");
            let mut query = sqlx::query(self.q(&text));
            for (i, item) in chunk.iter().enumerate() {
                let idx = first + (n * INSERT_BATCH + i) as u64;
                query = bind_key(query, key)
                    .bind(generation)
                    .bind(idx as i64)
                    .bind(item.as_str());
            }
            query
                .execute(&mut **tx)
                .await
                .map_err(|err| self.err(err))?;
        }
        sqlx::query(self.q(self.upsert_state()))
            .bind(key.tenant())
            .bind(key.user())
            .bind(key.agent())
            .bind(key.session())
            .bind(split.head.as_str())
            .bind(generation)
            .bind(after.context as i64)
            .bind(after.trail as i64)
            .execute(&mut **tx)
            .await
            .map_err(|err| self.err(err))?;
        Ok(())
    }

    /// Inserts serialized log rows (from [`log_rows`]) whose count the session row's
    /// `log_len` already includes: they take the numbers up to it.
    async fn log_in(
        &self,
        tx: &mut WriteTx<'_>,
        key: &SessionKey,
        rows: &[(String, String)],
        now: i64,
    ) -> Result<AppendOutcome, StoreError> {
        let n = rows.len() as i64;
        let log_len: i64 = sqlx::query_scalar(self.q("SELECT log_len FROM ctxkeeper_sessions WHERE tenant = ? AND user_id = ? AND agent = ? AND session = ?"))
            .bind(key.tenant()).bind(key.user()).bind(key.agent()).bind(key.session())
            .fetch_one(&mut **tx)
            .await
            .map_err(|err| self.err(err))?;
        let first = log_len - n + 1;
        let numbered: Vec<_> = (first..)
            .zip(rows)
            .map(|(seq, row)| (key, seq, row))
            .collect();
        self.insert_log(tx, &numbered, now).await?;
        Ok(AppendOutcome {
            first_seq: u64_of(first),
            last_seq: u64_of(log_len),
        })
    }

    /// Inserts numbered log rows (of one session or several), [`INSERT_BATCH`] per statement.
    async fn insert_log(
        &self,
        tx: &mut WriteTx<'_>,
        rows: &[(&SessionKey, i64, &(String, String))],
        now: i64,
    ) -> Result<(), StoreError> {
        for chunk in rows.chunks(INSERT_BATCH) {
            let values = vec!["(?, ?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
            let text = format!("{LOG_INSERT} VALUES {values}");
            let mut query = sqlx::query(self.q(&text));
            for (key, seq, (json, body)) in chunk {
                query = bind_key(query, key)
                    .bind(*seq)
                    .bind(now)
                    .bind(json.as_str())
                    .bind(body.as_str());
            }
            query
                .execute(&mut **tx)
                .await
                .map_err(|err| self.err(err))?;
        }
        if self.dialect == Dialect::Sqlite {
            self.unindexed
                .fetch_add(rows.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    /// A save and its log entries, inside `tx`. A conflict, or an append that does not
    /// continue the stored generation, changes nothing.
    async fn save_and_append_in(
        &self,
        tx: &mut WriteTx<'_>,
        commit: &PendingCommit,
        now: i64,
    ) -> Result<Committed, StoreError> {
        // Judged before anything is written. Without a lock the row may still move on; then
        // the swap below fails, and a swap that succeeds proves the shape read is current.
        let (actual, before) = self.shape_in(tx, &commit.key).await?;
        if actual != commit.expected {
            return Err(StoreError::Conflict {
                expected: commit.expected,
                actual,
            });
        }
        let (after, fresh) = next_shape(before, commit.write, &commit.split)?;
        let version = self
            .cas_in(tx, &commit.key, commit.expected, commit.rows.len(), now)
            .await?;
        self.state_in(tx, &commit.key, &commit.split, before, after, fresh)
            .await?;
        let appended = if commit.rows.is_empty() {
            None
        } else {
            Some(self.log_in(tx, &commit.key, &commit.rows, now).await?)
        };
        Ok(Committed { version, appended })
    }

    /// Commits a group of saves in one SQLite transaction: one write lock and one sync of
    /// the write-ahead log for all of them. Saves of distinct sessions go in a few statements
    /// for the whole group, sent in two round trips ([`group_batched`](Self::group_batched)).
    /// When a session appears twice (its second save must see the first), or one of those
    /// statements fails (then that transaction is rolled back and a new one begun), the saves
    /// run one after the other, each in its own savepoint: a lost compare-and-swap or any
    /// other error of one save fails only that save, undone. Only a failure of the transaction itself (its begin, a
    /// savepoint, its commit) fails the group, and then nothing of it is committed.
    ///
    /// `conn` is the connection to write on: the group commit's own, whose page cache stays
    /// valid from one group to the next (the pool hands its idle connections out in turn, and
    /// one that another connection wrote after drops its cache and reads the pages again);
    /// `None` takes one from the pool.
    async fn commit_group(
        &self,
        mut conn: Option<&mut sqlx::AnyConnection>,
        group: &[PendingCommit],
    ) -> Vec<Result<Committed, StoreError>> {
        let now = now_ms();
        let fail = |err: StoreError| group.iter().map(|_| Err(err.clone())).collect();
        let distinct = group
            .iter()
            .map(|commit| &commit.key)
            .collect::<std::collections::HashSet<_>>()
            .len()
            == group.len();
        if distinct {
            let batched = match conn.as_deref_mut() {
                Some(conn) => self.group_batched(conn, group, now).await,
                None => match self.pool.acquire().await {
                    Ok(mut pooled) => {
                        let batched = self.group_batched(&mut pooled, group, now).await;
                        if matches!(batched, Err(GroupFailure { close: true, .. })) {
                            let _ = pooled.close().await;
                        }
                        batched
                    }
                    Err(err) => Err(GroupFailure {
                        err: self.err(err),
                        close: false,
                    }),
                },
            };
            match batched {
                Ok(outcomes) => return outcomes,
                // The connection may still be inside the failed transaction: the group fails,
                // and the group commit closes the connection.
                Err(GroupFailure { err, close: true }) => return fail(err),
                // Which save failed is not known: each goes again on its own.
                Err(_) => {}
            }
        }
        let mut tx = match self.begin_on(conn).await {
            Ok(tx) => tx,
            Err(err) => return fail(err),
        };
        let outcomes = self.group_in(&mut tx, group, now).await;
        match self.finish(tx, outcomes).await {
            Ok(outcomes) => outcomes,
            Err(err) => fail(err),
        }
    }

    /// The saves of a group one after the other, inside `tx` (a session saved twice in a
    /// group sees its first save), each in a savepoint: a save that fails is rolled back to
    /// it and the others go on.
    async fn group_in(
        &self,
        tx: &mut WriteTx<'_>,
        group: &[PendingCommit],
        now: i64,
    ) -> Result<Vec<Result<Committed, StoreError>>, StoreError> {
        let mut outcomes = Vec::with_capacity(group.len());
        for commit in group {
            self.execute_in(tx, "SAVEPOINT ctxkeeper_save").await?;
            let outcome = self.save_and_append_in(tx, commit, now).await;
            if outcome.is_err() {
                self.execute_in(tx, "ROLLBACK TO ctxkeeper_save").await?;
            }
            self.execute_in(tx, "RELEASE ctxkeeper_save").await?;
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// Runs one statement without parameters inside `tx`.
    async fn execute_in(&self, tx: &mut WriteTx<'_>, text: &'static str) -> Result<(), StoreError> {
        sqlx::query(text)
            .execute(&mut **tx)
            .await
            .map_err(|err| self.err(err))?;
        Ok(())
    }

    /// Saves of distinct sessions in one transaction and two round trips to SQLite's
    /// connection thread: `BEGIN IMMEDIATE` with the query reading every save's stored
    /// version, log length and generation shape; then the swaps and appends judged here (the
    /// write lock is held, so what was read stays current until the commit), and the
    /// winners' session rows, context items, heads and log rows written with multi-row
    /// statements sent as one script that ends in `COMMIT`. A round trip wakes the
    /// connection's thread and then this task, and on a busy machine each wake-up waits for
    /// a core: seven round trips per group before, two now, which raised the saves per
    /// second of 32 concurrent sessions by a fifth (`examples/group_commit.rs`).
    ///
    /// The transaction is SQLite's own, not an `sqlx` one (which would cost a round trip for
    /// its `BEGIN` and one for its `COMMIT`): on any error it is rolled back here. A lost
    /// swap or an append that does not continue its generation fails its save alone, having
    /// written nothing; an `Err` means a statement failed and nothing of the group was
    /// written (`close` then says whether the connection may still be in a transaction and
    /// must not be used again).
    async fn group_batched(
        &self,
        conn: &mut sqlx::AnyConnection,
        group: &[PendingCommit],
        now: i64,
    ) -> Result<Vec<Result<Committed, StoreError>>, GroupFailure> {
        let _writer = Arc::clone(&self.writers).lock_owned().await;
        let fail = |err: sqlx::Error| GroupFailure {
            err: self.err(err),
            close: false,
        };
        let mut found: HashMap<SessionKey, Found> = HashMap::with_capacity(group.len());
        let mut began = false;
        for chunk in group.chunks(INSERT_BATCH) {
            let text = if began {
                group_shapes_sql(chunk.len())
            } else {
                format!("BEGIN IMMEDIATE; {}", group_shapes_sql(chunk.len()))
            };
            let mut query = sqlx::query(AssertSqlSafe(text));
            for commit in chunk {
                query = bind_key(query, &commit.key);
            }
            let rows = match query.fetch_all(&mut *conn).await {
                Ok(rows) => rows,
                Err(err) => return Err(self.rollback_raw(conn, fail(err)).await),
            };
            began = true;
            for row in &rows {
                match self.found_of(row) {
                    Ok((key, found_row)) => {
                        found.insert(key, found_row);
                    }
                    Err(err) => {
                        let failure = GroupFailure { err, close: false };
                        return Err(self.rollback_raw(conn, failure).await);
                    }
                }
            }
        }
        let (outcomes, wins) = judge_group(group, &found);
        let script = group_writes(&wins, now);
        let mut query = sqlx::query(AssertSqlSafe(script.text));
        for bind in script.binds {
            query = match bind {
                Bind::Key(key) => bind_key(query, key),
                Bind::Int(value) => query.bind(value),
                Bind::Text(text) => query.bind(text),
            };
        }
        if let Err(err) = query.execute(&mut *conn).await {
            return Err(self.rollback_raw(conn, fail(err)).await);
        }
        let logged: usize = wins.iter().map(|win| win.commit.rows.len()).sum();
        self.unindexed
            .fetch_add(logged as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(outcomes)
    }

    /// Rolls back a transaction begun with a raw `BEGIN` after `failure`. SQLite may have
    /// rolled it back itself (after an I/O error, a full disk), which the `ROLLBACK` then
    /// reports; any other failure of the `ROLLBACK` leaves the connection's state unknown,
    /// and the failure says to close it.
    async fn rollback_raw(
        &self,
        conn: &mut sqlx::AnyConnection,
        mut failure: GroupFailure,
    ) -> GroupFailure {
        use sqlx::Executor;
        if let Err(err) = conn.execute("ROLLBACK").await
            && !err.to_string().contains("no transaction is active")
        {
            failure.close = true;
        }
        failure
    }

    /// A row of [`group_shapes_sql`]: the session's key, stored version, log length and
    /// generation shape (`None` when no state is stored).
    fn found_of(&self, row: &AnyRow) -> Result<(SessionKey, Found), StoreError> {
        let get = |i: usize| -> Result<Option<i64>, StoreError> {
            row.try_get(i).map_err(|err| self.err(err))
        };
        let has_state: Option<String> = row.try_get(9).map_err(|err| self.err(err))?;
        let shape = match has_state {
            Some(_) => Some([get(6)?, get(7)?, get(8)?]),
            None => None,
        };
        Ok((key_of(row)?, found_from(get(4)?, get(5)?, shape)))
    }

    /// The items of one generation in order, the first `limit` of them when given.
    async fn items(
        &self,
        key: &SessionKey,
        generation: i64,
        limit: Option<i64>,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(self.q("SELECT item FROM ctxkeeper_context WHERE tenant = ? AND user_id = ? AND agent = ? AND session = ? AND generation = ? AND idx < ? ORDER BY idx"))
            .bind(key.tenant())
            .bind(key.user())
            .bind(key.agent())
            .bind(key.session())
            .bind(generation)
            .bind(limit.unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(|err| self.err(err))?;
        rows.iter()
            .map(|row| row.try_get::<String, _>(0).map_err(|err| self.err(err)))
            .collect()
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
                "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state, generation, context_len, trail_len) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE state = VALUES(state), generation = VALUES(generation), context_len = VALUES(context_len), trail_len = VALUES(trail_len)"
            }
            _ => {
                "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state, generation, context_len, trail_len) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, user_id, agent, session) DO UPDATE SET state = excluded.state, generation = excluded.generation, context_len = excluded.context_len, trail_len = excluded.trail_len"
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
            // The index is the outer loop (`CROSS JOIN` fixes the order): left to itself the
            // planner walks the session's rows and runs the full-text query once per row.
            // The scope column weighs nothing in the ranking.
            Dialect::Sqlite => format!(
                "SELECT l.tenant, l.user_id, l.agent, l.session, l.seq, l.at, l.body, -bm25(ctxkeeper_log_fts, 1.0, 0.0) AS score FROM ctxkeeper_log_fts CROSS JOIN ctxkeeper_log l ON l.id = ctxkeeper_log_fts.rowid WHERE ctxkeeper_log_fts MATCH ? AND l.tenant = ?{key} ORDER BY score DESC, l.at DESC LIMIT ?"
            ),
            Dialect::Postgres => format!(
                "SELECT l.tenant, l.user_id, l.agent, l.session, l.seq, l.at, l.body, CAST(ts_rank(l.tsv, q) AS DOUBLE PRECISION) AS score FROM ctxkeeper_log l, to_tsquery('simple', ?) q WHERE l.tsv @@ q AND l.tenant = ?{key} ORDER BY score DESC, l.at DESC LIMIT ?"
            ),
            Dialect::MySql => format!(
                "SELECT l.tenant, l.user_id, l.agent, l.session, l.seq, l.at, l.body, MATCH (l.body) AGAINST (? IN NATURAL LANGUAGE MODE) AS score FROM ctxkeeper_log l WHERE MATCH (l.body) AGAINST (? IN NATURAL LANGUAGE MODE) AND l.tenant = ?{key} ORDER BY score DESC, l.at DESC LIMIT ?"
            ),
        }
    }

    /// The engine's query text for the terms: any term matches (on SQLite, inside the
    /// query's scope).
    fn fts_query(&self, scope: &SearchScope, terms: &[String]) -> String {
        match self.dialect {
            Dialect::Sqlite => {
                let any = terms
                    .iter()
                    .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
                    .collect::<Vec<_>>()
                    .join(" OR ");
                format!("scope : \"{}\" AND body : ({any})", scope_token(scope))
            }
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

/// The database file a writer thread may write, from a sqlx `sqlite://` URL
/// ([`sqlite_url`]'s): `None` for an in-memory database (which only `sqlx`'s pool sees) and
/// for one opened read-only (`mode=ro`, whose saves must fail as they do through `sqlx`).
fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite://")?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let writable_file = path != ":memory:"
        && !path.is_empty()
        && !query
            .split('&')
            .any(|param| param == "mode=memory" || param == "mode=ro");
    writable_file.then(|| std::path::PathBuf::from(path))
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
        let row = sqlx::query(self.q("SELECT s.version, t.state, t.generation, t.context_len + t.trail_len FROM ctxkeeper_sessions s JOIN ctxkeeper_states t ON t.tenant = s.tenant AND t.user_id = s.user_id AND t.agent = s.agent AND t.session = s.session WHERE s.tenant = ? AND s.user_id = ? AND s.agent = ? AND s.session = ? AND s.version IS NOT NULL"))
            .bind(key.tenant())
            .bind(key.user())
            .bind(key.agent())
            .bind(key.session())
            .fetch_optional(&self.pool)
            .await
            .map_err(|err| self.err(err))?;
        let Some(row) = row else { return Ok(None) };
        let version: i64 = row.try_get(0).map_err(|err| self.err(err))?;
        let head: String = row.try_get(1).map_err(|err| self.err(err))?;
        let generation: Option<i64> = row.try_get(2).map_err(|err| self.err(err))?;
        let items: i64 = row.try_get(3).map_err(|err| self.err(err))?;
        let Some(generation) = generation else {
            // A state written whole, before generations.
            return Ok(Some(Versioned {
                state: AgentState::from_json(&head)?,
                version: u64_of(version),
                generation: None,
            }));
        };
        // Read in the same snapshot as the head would be ideal; rows of a generation are only
        // ever added after the shape that counts them, so the first `items` are the state's.
        let items = self.items(key, generation, Some(items)).await?;
        Ok(Some(Versioned {
            state: assemble(&head, &items)?,
            version: u64_of(version),
            generation: Some(u64_of(generation)),
        }))
    }

    async fn save(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
    ) -> Result<u64, StoreError> {
        Ok(self
            .commit(key, state, ContextWrite::Generation, expected, &[])
            .await?
            .version)
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
        let appended = async {
            sqlx::query(self.q(self.upsert_bump()))
                .bind(key.tenant())
                .bind(key.user())
                .bind(key.agent())
                .bind(key.session())
                .bind(rows.len() as i64)
                .bind(now)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(|err| self.err(err))?;
            self.log_in(&mut tx, key, &rows, now).await
        }
        .await;
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
        self.commit(key, state, ContextWrite::Generation, expected, messages)
            .await
    }

    fn saves_incrementally(&self) -> bool {
        true
    }

    async fn commit(
        &self,
        key: &SessionKey,
        state: &AgentState,
        write: ContextWrite,
        expected: Option<u64>,
        messages: &[Message],
    ) -> Result<Committed, StoreError> {
        // Serialized before the transaction: the write lock is held for the writes only.
        let commit = PendingCommit {
            key: key.clone(),
            split: split(state)?,
            write,
            expected,
            rows: log_rows(messages)?,
        };
        if let Some(group) = &self.group {
            return group.commit(commit).await;
        }
        let mut tx = self.begin().await?;
        let committed = self.save_and_append_in(&mut tx, &commit, now_ms()).await;
        self.finish(tx, committed).await
    }

    async fn generation_context(
        &self,
        key: &SessionKey,
        generation: u64,
    ) -> Result<Vec<Message>, StoreError> {
        let generation = i64::try_from(generation)
            .map_err(|_| StoreError::InvalidInput("generation out of range".into()))?;
        messages_of(&self.items(key, generation, None).await?)
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
        for table in [
            "ctxkeeper_log",
            "ctxkeeper_context",
            "ctxkeeper_states",
            "ctxkeeper_sessions",
        ] {
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
        if self.dialect == Dialect::Sqlite {
            self.index_log_for_search().await?;
        }
        let session = match &query.scope {
            SearchScope::Session(key) => Some(key),
            SearchScope::Tenant(_) => None,
        };
        let text = self.search_sql(session.is_some());
        let sql = self.q(&text);
        let fts = self.fts_query(&query.scope, &terms);
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
        for table in ["ctxkeeper_log", "ctxkeeper_context", "ctxkeeper_states"] {
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

    #[test]
    fn only_a_writable_database_file_gets_a_writer_thread() {
        let file = |url: &str| sqlite_url(url).map(|(sqlx_url, _)| sqlite_file(&sqlx_url));
        let dir = std::env::temp_dir();
        let path = dir.join("ctxkeeper-writer-thread.db");
        assert_eq!(
            file(&format!("sqlite://{}", path.display())).ok().flatten(),
            Some(path.clone())
        );
        assert_eq!(
            file(&format!("sqlite://{}?synchronous=normal", path.display()))
                .ok()
                .flatten(),
            Some(path.clone())
        );
        for url in [
            "sqlite://:memory:".to_string(),
            "sqlite://:memory:?cache=shared".to_string(),
            format!("sqlite://{}?mode=memory&cache=shared", path.display()),
            format!("sqlite://{}?mode=ro", path.display()),
        ] {
            assert_eq!(file(&url).ok().flatten(), None, "{url}");
        }
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
            // Statement journals in memory (MEMORY is 2).
            let temp_store: i64 = sqlx::query_scalar("PRAGMA temp_store")
                .fetch_one(&store.pool)
                .await?;
            assert_eq!(temp_store, 2);
        }
        Ok(())
    }

    fn pending(session: &str, expected: Option<u64>, said: &[&str]) -> PendingCommit {
        let messages: Vec<Message> = said.iter().map(|text| Message::user(*text)).collect();
        let mut state = AgentState::new();
        state.context = messages.clone();
        PendingCommit {
            key: SessionKey::simple(session).expect("a valid session id"),
            split: split(&state).expect("a state serializes"),
            write: ContextWrite::Generation,
            expected,
            rows: log_rows(&messages).expect("messages serialize"),
        }
    }

    /// The group commits under test: the task on `sqlx`'s connection (in-memory databases)
    /// and the writer thread (database files).
    #[cfg(feature = "sqlite")]
    #[derive(Debug, Clone, Copy)]
    enum Via {
        Task,
        Thread,
    }

    #[cfg(feature = "sqlite")]
    const EVERY_COMMITTER: [Via; 2] = [Via::Task, Via::Thread];

    /// Commits `group` as one group through `via`, on the store's database at `path`.
    #[cfg(feature = "sqlite")]
    async fn commit_group_via(
        store: &SqlStore,
        path: &std::path::Path,
        via: Via,
        group: &[PendingCommit],
    ) -> Vec<Result<Committed, StoreError>> {
        match via {
            Via::Task => store.commit_group(None, group).await,
            Via::Thread => {
                let mut conn = rusqlite::Connection::open(path).expect("the database opens");
                writer_thread::commit_group(&mut conn, group, now_ms())
            }
        }
    }

    async fn logged(store: &SqlStore, session: &str) -> Vec<(u64, String)> {
        let key = SessionKey::simple(session).expect("a valid session id");
        let page = store
            .history(&key, HistoryPage::last(100))
            .await
            .expect("the log reads back");
        page.iter().map(|e| (e.seq, e.message.text())).collect()
    }

    async fn count(store: &SqlStore, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&store.pool)
            .await
            .expect("the count reads")
    }

    async fn unindexed(store: &SqlStore) -> i64 {
        count(store, "SELECT COUNT(*) FROM ctxkeeper_log").await
            - count(store, "SELECT COUNT(*) FROM ctxkeeper_log_fts").await
    }

    /// Logged messages reach the full-text index in batches, not one commit at a time, and
    /// a search first indexes whatever is waiting, so it always finds every logged message.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn the_log_is_indexed_in_batches_and_before_every_search()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let store =
            SqlStore::connect(&format!("sqlite://{}", dir.path().join("i.db").display())).await?;
        let key = SessionKey::simple("indexed")?;
        let first = store
            .save_and_append(&key, &AgentState::new(), None, &[Message::user("a wombat")])
            .await?;
        let hits = store
            .search(&SearchQuery::session(key.clone(), "wombat"))
            .await?;
        assert_eq!(hits.len(), 1);
        assert_eq!(unindexed(&store).await, 0);

        // A few more messages wait for their batch...
        let second = store
            .save_and_append(
                &key,
                &AgentState::new(),
                Some(first.version),
                &[Message::user("a numbat"), Message::assistant("noted")],
            )
            .await?;
        assert_eq!(unindexed(&store).await, 2);
        // ...and a search indexes them before it reads the index.
        let hits = store
            .search(&SearchQuery::session(key.clone(), "numbat"))
            .await?;
        assert_eq!(hits.iter().map(|h| h.seq).collect::<Vec<_>>(), [2]);
        assert_eq!(unindexed(&store).await, 0);

        // A batch's worth of messages is indexed by the group commit, with no search.
        let many: Vec<Message> = (0..INDEX_BATCH)
            .map(|i| Message::user(format!("message {i} about a bilby")))
            .collect();
        store
            .save_and_append(&key, &AgentState::new(), Some(second.version), &many)
            .await?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while unindexed(&store).await > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the batch was not indexed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // Deleting the session takes its entries out of the index, indexed or not yet.
        store
            .append(&key, &[Message::user("one more bilby")])
            .await?;
        assert_eq!(unindexed(&store).await, 1);
        assert!(store.delete(&key).await?);
        assert_eq!(
            count(&store, "SELECT COUNT(*) FROM ctxkeeper_log_fts").await,
            0
        );
        assert!(
            store
                .search(&SearchQuery::tenant("default", "bilby"))
                .await?
                .is_empty()
        );
        Ok(())
    }

    /// A SQLite database at `path` written by schema versions 1 to `version` (as an older
    /// build left it), its URL and a pool on it.
    #[cfg(feature = "sqlite")]
    async fn database_at_version(
        path: &std::path::Path,
        version: usize,
    ) -> Result<(String, AnyPool), Box<dyn std::error::Error>> {
        use sqlx::Executor;
        sqlx::any::install_default_drivers();
        let url = format!("sqlite://{}", path.display());
        let pool = AnyPool::connect(&sqlite_url(&url)?.0).await?;
        pool.execute("CREATE TABLE ctxkeeper_schema (version BIGINT NOT NULL)")
            .await?;
        for (index, statements) in Dialect::Sqlite.migrations()[..version].iter().enumerate() {
            for statement in *statements {
                pool.execute(*statement).await?;
            }
            sqlx::query("INSERT INTO ctxkeeper_schema (version) VALUES (?)")
                .bind(index as i64 + 1)
                .execute(&pool)
                .await?;
        }
        Ok((url, pool))
    }

    /// The group commit reads its sessions through their primary keys among many stored ones
    /// (a scan would cost every commit more as the database grows).
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn the_group_commit_finds_its_sessions_by_key() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let store =
            SqlStore::connect(&format!("sqlite://{}", dir.path().join("k.db").display())).await?;
        for i in 0..300 {
            let key = SessionKey::simple(format!("stored-{i}"))?;
            store
                .save_and_append(&key, &AgentState::new(), None, &[Message::user("x")])
                .await?;
        }
        for keys in [1, 2, 32] {
            let plan = format!("EXPLAIN QUERY PLAN {}", group_shapes_sql(keys));
            let sessions = (0..keys)
                .map(|i| SessionKey::simple(format!("s{i}")))
                .collect::<Result<Vec<_>, _>>()?;
            let mut query = sqlx::query(AssertSqlSafe(plan));
            for key in &sessions {
                query = bind_key(query, key);
            }
            let rows = query.fetch_all(&store.pool).await?;
            let steps: Vec<String> = rows
                .iter()
                .map(|row| row.try_get::<String, _>(3))
                .collect::<Result<_, _>>()?;
            assert!(
                steps.iter().any(|step| step.starts_with("SEARCH s USING")),
                "{keys} keys: {steps:?}"
            );
            assert!(
                !steps.iter().any(|step| step.starts_with("SCAN s")),
                "{keys} keys: {steps:?}"
            );
        }
        Ok(())
    }

    /// A database indexed row by row (version 4) keeps its index and indexes what comes next
    /// in batches.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_version_4_database_keeps_its_index_and_indexes_in_batches()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let (url, pool) = database_at_version(&dir.path().join("v4.db"), 4).await?;
        for (seq, text) in [(1, "an echidna"), (2, "a platypus")] {
            let message = Message::user(text);
            sqlx::query("INSERT INTO ctxkeeper_log (tenant, user_id, agent, session, seq, at, message, body) VALUES ('default', 'default', 'default', 'old', ?, 1, ?, ?)")
                .bind(seq as i64)
                .bind(serde_json::to_string(&message)?)
                .bind(indexed_body(&message))
                .execute(&pool)
                .await?;
        }
        sqlx::query("INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, log_len, created_at, updated_at) VALUES ('default', 'default', 'default', 'old', 2, 1, 1)")
            .execute(&pool)
            .await?;
        pool.close().await;

        let store = SqlStore::connect(&url).await?;
        assert_eq!(
            count(&store, "SELECT MAX(version) FROM ctxkeeper_schema").await,
            5
        );
        assert_eq!(
            count(&store, "SELECT upto FROM ctxkeeper_log_indexed").await,
            2
        );
        assert_eq!(unindexed(&store).await, 0, "version 4 indexed its rows");
        let old = SessionKey::simple("old")?;
        store.append(&old, &[Message::user("a quoll")]).await?;
        assert_eq!(unindexed(&store).await, 1);
        let hits = store
            .search(&SearchQuery::session(old.clone(), "platypus quoll"))
            .await?;
        let mut seqs: Vec<u64> = hits.iter().map(|h| h.seq).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, [2, 3]);
        assert!(store.delete(&old).await?);
        assert_eq!(
            count(&store, "SELECT COUNT(*) FROM ctxkeeper_log_fts").await,
            0
        );
        Ok(())
    }

    /// The group commit writes on a connection of its own, kept from one group to the next;
    /// what pooled connections write in between (a deletion here) is what its next group
    /// reads and judges against.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn the_group_commit_connection_sees_what_pooled_connections_wrote()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let store =
            SqlStore::connect(&format!("sqlite://{}", dir.path().join("w.db").display())).await?;
        let key = SessionKey::simple("kept")?;
        let first = store
            .save_and_append(&key, &AgentState::new(), None, &[Message::user("one")])
            .await?;
        let second = store
            .save_and_append(
                &key,
                &AgentState::new(),
                Some(first.version),
                &[Message::user("two")],
            )
            .await?;
        assert_eq!(second.version, 2);
        assert!(store.delete(&key).await?, "the pool deletes the session");
        // A save still expecting version 2 finds the session gone.
        let stale = store
            .save_and_append(&key, &AgentState::new(), Some(2), &[Message::user("late")])
            .await;
        assert!(
            matches!(
                stale,
                Err(StoreError::Conflict {
                    expected: Some(2),
                    actual: None
                })
            ),
            "{stale:?}"
        );
        // A save that starts the session anew succeeds and numbers its log from 1.
        let fresh = store
            .save_and_append(&key, &AgentState::new(), None, &[Message::user("again")])
            .await?;
        assert_eq!(fresh.version, 1);
        assert_eq!(logged(&store, "kept").await, vec![(1, "again".to_string())]);
        Ok(())
    }

    /// One group, many sessions: every winner gets its state and numbered log entries, the
    /// one stale save gets a conflict and leaves nothing behind.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_group_commit_settles_each_save_on_its_own() -> Result<(), Box<dyn std::error::Error>>
    {
        for via in EVERY_COMMITTER {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("g.db");
            let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await?;
            for session in ["a", "b", "stale"] {
                let key = SessionKey::simple(session)?;
                store
                    .save_and_append(&key, &AgentState::new(), None, &[Message::user("hello")])
                    .await?;
            }
            let group = [
                pending("a", Some(1), &["a1", "a2"]),
                pending("stale", Some(7), &["lost"]),
                pending("b", Some(1), &[]),
                pending("new", None, &["n1"]),
            ];
            let outcomes = commit_group_via(&store, &path, via, &group).await;
            let summary: Vec<_> = outcomes
                .iter()
                .map(|o| {
                    o.as_ref()
                        .map(|c| (c.version, c.appended.map(|a| (a.first_seq, a.last_seq))))
                        .map_err(|e| e.to_string())
                })
                .collect();
            assert_eq!(
                summary,
                [
                    Ok((2, Some((2, 3)))),
                    Err("version conflict: expected 7, found 1".to_string()),
                    Ok((2, None)),
                    Ok((1, Some((1, 1)))),
                ]
            );
            assert_eq!(
                logged(&store, "a").await,
                [(1, "hello".into()), (2, "a1".into()), (3, "a2".into())]
            );
            assert_eq!(logged(&store, "stale").await, [(1, "hello".into())]);
            assert_eq!(logged(&store, "new").await, [(1, "n1".into())]);
            let a = store
                .load(&SessionKey::simple("a")?)
                .await?
                .ok_or("a has a state")?;
            assert_eq!((a.version, a.state.context.len()), (2, 2));
            let stale = store
                .load(&SessionKey::simple("stale")?)
                .await?
                .ok_or("stale has a state")?;
            assert_eq!((stale.version, stale.state.context.len()), (1, 0));
        }
        Ok(())
    }

    /// The statements for a whole group (not the one-save-at-a-time fallback) write first
    /// saves, appends and new generations of distinct sessions, and judge a stale one.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_group_of_distinct_sessions_is_written_in_one_statement_per_table()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let store =
            SqlStore::connect(&format!("sqlite://{}", dir.path().join("g.db").display())).await?;
        for session in ["grow", "compact", "stale"] {
            let mut state = AgentState::new();
            state.context = vec![Message::user("first")];
            state.trail = vec![serde_json::json!("f1")];
            store
                .save_and_append(
                    &SessionKey::simple(session)?,
                    &state,
                    None,
                    &[Message::user("first")],
                )
                .await?;
        }
        let mut grow = pending("grow", Some(1), &["second", "third"]);
        let mut delta = AgentState::new();
        delta.context = vec![Message::user("second"), Message::user("third")];
        delta.trail = vec![serde_json::json!("f2")];
        grow.split = split(&delta)?;
        grow.write = ContextWrite::Append {
            context: 1,
            trail: 1,
        };
        let group = [
            grow,
            pending("compact", Some(1), &["summary"]),
            pending("stale", Some(3), &["lost"]),
            pending("fresh", None, &["hello"]),
        ];
        let mut conn = store.pool.acquire().await?;
        let outcomes = store
            .group_batched(&mut conn, &group, now_ms())
            .await
            .map_err(|failure| failure.err)?;
        drop(conn);
        let summary: Vec<_> = outcomes
            .iter()
            .map(|o| {
                o.as_ref()
                    .map(|c| (c.version, c.appended.map(|a| (a.first_seq, a.last_seq))))
                    .map_err(|e| e.is_conflict())
            })
            .collect();
        assert_eq!(
            summary,
            [
                Ok((2, Some((2, 3)))),
                Ok((2, Some((2, 2)))),
                Err(true),
                Ok((1, Some((1, 1)))),
            ]
        );
        let grown = store
            .load(&SessionKey::simple("grow")?)
            .await?
            .ok_or("saved")?;
        assert_eq!(
            grown.state.context,
            vec![
                Message::user("first"),
                Message::user("second"),
                Message::user("third")
            ]
        );
        assert_eq!(
            grown.state.trail,
            vec![serde_json::json!("f1"), serde_json::json!("f2")]
        );
        let compacted = store
            .load(&SessionKey::simple("compact")?)
            .await?
            .ok_or("saved")?;
        assert_eq!(compacted.state.context, vec![Message::user("summary")]);
        assert_eq!(compacted.generation, Some(2));
        assert_eq!(logged(&store, "stale").await, [(1, "first".into())]);
        assert_eq!(logged(&store, "fresh").await, [(1, "hello".into())]);
        Ok(())
    }

    /// An error in the middle of one save (here its context insert meets a row planted
    /// where it writes, after its swap already moved the version) undoes that save alone:
    /// the saves before and after it in the group commit.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn an_error_inside_one_save_fails_only_that_save()
    -> Result<(), Box<dyn std::error::Error>> {
        for via in EVERY_COMMITTER {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("g.db");
            let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await?;
            for session in ["a", "bad", "b"] {
                let key = SessionKey::simple(session)?;
                let mut state = AgentState::new();
                state.context = vec![Message::user("first")];
                store
                    .save_and_append(&key, &state, None, &[Message::user("first")])
                    .await?;
            }
            sqlx::query("INSERT INTO ctxkeeper_context (tenant, user_id, agent, session, generation, idx, item) VALUES ('default', 'default', 'default', 'bad', 1, 1, '{}')")
                .execute(&store.pool)
                .await?;
            let append = |session: &str| {
                let mut commit = pending(session, Some(1), &["second"]);
                commit.write = ContextWrite::Append {
                    context: 1,
                    trail: 0,
                };
                commit
            };
            let outcomes = commit_group_via(
                &store,
                &path,
                via,
                &[append("a"), append("bad"), append("b")],
            )
            .await;
            assert_eq!(outcomes[0].as_ref().map(|c| c.version).ok(), Some(2));
            assert!(
                matches!(&outcomes[1], Err(err) if !err.is_conflict()),
                "{:?}",
                outcomes[1]
            );
            assert_eq!(outcomes[2].as_ref().map(|c| c.version).ok(), Some(2));
            for session in ["a", "b"] {
                assert_eq!(
                    logged(&store, session).await,
                    [(1, "first".into()), (2, "second".into())]
                );
                let loaded = store
                    .load(&SessionKey::simple(session)?)
                    .await?
                    .ok_or("saved")?;
                assert_eq!(loaded.state.context.len(), 2);
            }
            assert_eq!(logged(&store, "bad").await, [(1, "first".into())]);
            let bad = store
                .load(&SessionKey::simple("bad")?)
                .await?
                .ok_or("saved")?;
            assert_eq!((bad.version, bad.state.context.len()), (1, 1));
        }
        Ok(())
    }

    /// Many sessions committing at once through the group commit, with stale saves of some
    /// of them among them: every current save commits with its log entries, every stale one
    /// fails alone and leaves nothing behind.
    #[cfg(feature = "sqlite")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commits_of_many_sessions_settle_each_on_its_own()
    -> Result<(), Box<dyn std::error::Error>> {
        const SESSIONS: usize = 48;
        let dir = tempfile::tempdir()?;
        let store =
            SqlStore::connect(&format!("sqlite://{}", dir.path().join("g.db").display())).await?;
        let key = |i: usize| SessionKey::simple(format!("s{i}")).expect("a valid id");
        for i in 0..SESSIONS {
            store
                .save_and_append(&key(i), &AgentState::new(), None, &[Message::user("hello")])
                .await?;
        }
        let mut tasks = Vec::new();
        for i in 0..SESSIONS {
            for (expected, text) in [(1, "current"), (9, "stale")] {
                if text == "stale" && i % 4 != 0 {
                    continue;
                }
                let store = store.clone();
                let key = key(i);
                tasks.push(tokio::spawn(async move {
                    let mut state = AgentState::new();
                    state.context = vec![Message::user(text)];
                    let outcome = store
                        .save_and_append(&key, &state, Some(expected), &[Message::user(text)])
                        .await;
                    (text, outcome)
                }));
            }
        }
        let (mut committed, mut conflicts) = (0, 0);
        for task in tasks {
            match task.await? {
                ("current", Ok(c)) => {
                    assert_eq!(c.version, 2);
                    committed += 1;
                }
                ("stale", Err(err)) if err.is_conflict() => conflicts += 1,
                other => panic!("unexpected outcome {other:?}"),
            }
        }
        assert_eq!((committed, conflicts), (SESSIONS, SESSIONS / 4));
        for i in 0..SESSIONS {
            let page = store.history(&key(i), HistoryPage::last(10)).await?;
            let texts: Vec<_> = page.iter().map(|e| (e.seq, e.message.text())).collect();
            assert_eq!(texts, [(1, "hello".into()), (2, "current".into())]);
            let loaded = store.load(&key(i)).await?.ok_or("saved")?;
            assert_eq!(loaded.version, 2);
            assert_eq!(loaded.state.context, vec![Message::user("current")]);
        }
        Ok(())
    }

    /// Commits reach the database file while the store stays open: the write-ahead log is
    /// checkpointed in the background after a group, not only once it holds 1,000 pages (the
    /// group commit's connection leaves checkpoints to [`checkpoint_in_background`]).
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn commits_reach_the_database_file_in_the_background()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("g.db");
        let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await?;
        let key = SessionKey::simple("kept")?;
        let mut state = AgentState::new();
        state.context = vec![Message::user("in the file")];
        store
            .save_and_append(&key, &state, None, &[Message::user("in the file")])
            .await?;
        // A copy of the database file alone, without its log, holds what was committed once
        // a checkpoint has copied it there.
        let copy = dir.path().join("copy.db");
        let mut found = None;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = std::fs::remove_file(&copy);
            std::fs::copy(&path, &copy)?;
            let copied = SqlStore::connect(&format!("sqlite://{}", copy.display())).await?;
            found = copied.load(&key).await?;
            if found.is_some() {
                break;
            }
        }
        let found = found.ok_or("the save never reached the database file")?;
        assert_eq!(found.state.context, vec![Message::user("in the file")]);
        Ok(())
    }

    /// Under writes that never pause, the write-ahead log is still copied whole and started
    /// over, so its file stays smaller than what was written (a checkpoint that only copies
    /// beside a busy writer never catches up, and the log grows without bound).
    #[cfg(feature = "sqlite")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_stays_small_under_writes_that_never_pause()
    -> Result<(), Box<dyn std::error::Error>> {
        const WRITERS: usize = 8;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("g.db");
        let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await?;
        let until = std::time::Instant::now() + Duration::from_millis(2_000);
        let text = "a long tool output line ".repeat(400);
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let (store, text) = (store.clone(), text.clone());
            tasks.push(tokio::spawn(async move {
                let key = SessionKey::simple(format!("w{writer}")).expect("a valid id");
                let (mut version, mut written) = (None, 0u64);
                while std::time::Instant::now() < until {
                    let said = [Message::user(text.as_str())];
                    let mut state = AgentState::new();
                    state.context = said.to_vec();
                    let write = match version {
                        None => ContextWrite::Generation,
                        Some(v) => ContextWrite::Append {
                            context: usize::try_from(v).expect("small"),
                            trail: 0,
                        },
                    };
                    let committed = store.commit(&key, &state, write, version, &said).await?;
                    version = Some(committed.version);
                    // The message is written twice: in the context and in the log.
                    written += 2 * text.len() as u64;
                }
                Ok::<u64, StoreError>(written)
            }));
        }
        let mut written = 0;
        for task in tasks {
            written += task.await??;
        }
        let log = std::fs::metadata(dir.path().join("g.db-wal"))?.len();
        assert!(
            written > 4 << 20,
            "the writes should have produced a large log: {written} bytes"
        );
        // A log never started over holds every page written: more than twice the text (the
        // pages' headers, the indexes). Started over every round, about half of it.
        assert!(
            log < written,
            "the write-ahead log grew to {log} bytes for {written} bytes written"
        );
        Ok(())
    }

    /// A session twice in one group: the second save sees the first (and loses against it
    /// when it expected the same version).
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_session_twice_in_a_group_is_saved_in_order() -> Result<(), Box<dyn std::error::Error>>
    {
        for via in EVERY_COMMITTER {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("g.db");
            let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await?;
            let group = [
                pending("s", None, &["one"]),
                pending("s", Some(1), &["two"]),
                pending("s", Some(1), &["late"]),
            ];
            let outcomes = commit_group_via(&store, &path, via, &group).await;
            assert_eq!(outcomes[0].as_ref().map(|c| c.version).ok(), Some(1));
            assert_eq!(outcomes[1].as_ref().map(|c| c.version).ok(), Some(2));
            assert!(
                matches!(&outcomes[2], Err(err) if err.is_conflict()),
                "{:?}",
                outcomes[2]
            );
            assert_eq!(
                logged(&store, "s").await,
                [(1, "one".into()), (2, "two".into())]
            );
        }
        Ok(())
    }

    /// A database written by schema version 1 (state inside the session row) opens, migrates
    /// and keeps its state.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_version_1_database_migrates() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let (url, pool) = database_at_version(&dir.path().join("v1.db"), 1).await?;
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

    /// A version 3 database (the full-text index without scopes) migrates to version 4: its
    /// logged messages are indexed again with their tenant and session, searches stay inside
    /// their scope, and new appends and deletes keep the index in step.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_version_3_database_migrates_its_search_index()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let (url, pool) = database_at_version(&dir.path().join("v3.db"), 3).await?;
        let logged = [
            ("a", 1, "the quokka crossed the road"),
            ("a", 2, "nothing to see"),
            ("b", 1, "another quokka, elsewhere"),
        ];
        for (session, seq, text) in logged {
            let message = Message::user(text);
            sqlx::query("INSERT INTO ctxkeeper_log (tenant, user_id, agent, session, seq, at, message, body) VALUES ('default', 'default', 'default', ?, ?, 1, ?, ?)")
                .bind(session)
                .bind(seq as i64)
                .bind(serde_json::to_string(&message)?)
                .bind(indexed_body(&message))
                .execute(&pool)
                .await?;
        }
        for (session, logged) in [("a", 2), ("b", 1)] {
            sqlx::query("INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, log_len, created_at, updated_at) VALUES ('default', 'default', 'default', ?, ?, 1, 1)")
                .bind(session)
                .bind(logged)
                .execute(&pool)
                .await?;
        }
        pool.close().await;

        let store = SqlStore::connect(&url).await?;
        let version: i64 = sqlx::query_scalar("SELECT MAX(version) FROM ctxkeeper_schema")
            .fetch_one(&store.pool)
            .await?;
        assert_eq!(version, 5);
        let (a, b) = (SessionKey::simple("a")?, SessionKey::simple("b")?);
        let found = |hits: Vec<SearchHit>| -> Vec<(String, u64)> {
            let mut found: Vec<_> = hits
                .into_iter()
                .map(|h| (h.key.session().to_string(), h.seq))
                .collect();
            found.sort();
            found
        };
        let in_a = store
            .search(&SearchQuery::session(a.clone(), "quokka"))
            .await?;
        assert_eq!(found(in_a), [("a".to_string(), 1)]);
        let in_tenant = store
            .search(&SearchQuery::tenant("default", "quokka"))
            .await?;
        assert_eq!(
            found(in_tenant),
            [("a".to_string(), 1), ("b".to_string(), 1)]
        );
        assert!(
            store
                .search(&SearchQuery::tenant("other", "quokka"))
                .await?
                .is_empty()
        );
        store.append(&b, &[Message::user("a third quokka")]).await?;
        let in_b = store
            .search(&SearchQuery::session(b.clone(), "quokka"))
            .await?;
        assert_eq!(found(in_b), [("b".to_string(), 1), ("b".to_string(), 2)]);
        assert!(store.delete(&b).await?);
        let in_tenant = store
            .search(&SearchQuery::tenant("default", "quokka"))
            .await?;
        assert_eq!(found(in_tenant), [("a".to_string(), 1)]);
        let indexed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ctxkeeper_log_fts")
            .fetch_one(&store.pool)
            .await?;
        assert_eq!(indexed, 2, "the deleted session's entries left the index");
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
