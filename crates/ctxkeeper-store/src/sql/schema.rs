//! The tables and their migrations: each dialect's statements per schema version, run in
//! order on first use under a lock (SQLite `BEGIN IMMEDIATE`, PostgreSQL advisory lock, MySQL
//! `GET_LOCK`) and recorded in `ctxkeeper_schema`, not in sqlx's `_sqlx_migrations`, which a
//! host application may own in the same database.

use super::{Dialect, SqlStore};
use crate::StoreError;

impl Dialect {
    /// The statements of each schema version, in order.
    pub(super) fn migrations(self) -> &'static [&'static [&'static str]] {
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

impl SqlStore {
    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
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

    pub(super) async fn migrate_locked(
        &self,
        conn: &mut sqlx::AnyConnection,
    ) -> Result<(), StoreError> {
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
}
