//! Full-text search of the session log: SQLite FTS5 (indexed in batches, with the tenant and
//! session as scope tokens inside the index), PostgreSQL `tsvector`, MySQL/MariaDB
//! `FULLTEXT`. The engine finds and pre-ranks candidates; a final BM25 pass over their
//! indexed text ranks every backend alike.

use sqlx::Row;

use super::{Dialect, SqlStore, WriteTx, key_of, u64_of};
use crate::StoreError;
use crate::session::{SearchHit, SearchQuery, SearchScope, sort_hits};
use crate::text::{Ranker, snippet};

/// Indexes the log rows after `ctxkeeper_log_indexed`'s mark for search and moves the mark
/// (SQLite, inside a write transaction).
pub(super) const INDEX_LOG: [&str; 2] = [
    "INSERT INTO ctxkeeper_log_fts (rowid, body, scope) SELECT id, body, 't' || hex(tenant) || ' s' || hex(tenant || char(31) || user_id || char(31) || agent || char(31) || session) FROM ctxkeeper_log WHERE id > (SELECT upto FROM ctxkeeper_log_indexed) ORDER BY id",
    "UPDATE ctxkeeper_log_indexed SET upto = (SELECT COALESCE(MAX(id), 0) FROM ctxkeeper_log) WHERE upto < (SELECT COALESCE(MAX(id), 0) FROM ctxkeeper_log)",
];

/// Log rows waiting for the full-text index (SQLite) before a group commit indexes them.
pub(super) const INDEX_BATCH: u64 = 256;

/// The token SQLite's full-text index holds for a search scope (schema version 4): `t` + the
/// tenant's bytes in hex, or `s` + the hex of tenant, user, agent and session joined by
/// U+001F (which no identifier holds). Hex keeps each one token whatever characters the
/// identifiers use; the tokenizer folds SQL's upper-case `hex()` to these.
pub(super) fn scope_token(scope: &SearchScope) -> String {
    match scope {
        SearchScope::Tenant(tenant) => format!("t{}", hex::encode(tenant)),
        SearchScope::Session(key) => {
            let joined = [key.tenant(), key.user(), key.agent(), key.session()].join("\u{1f}");
            format!("s{}", hex::encode(joined))
        }
    }
}

impl SqlStore {
    /// Indexes the log rows the full-text index does not hold yet (SQLite), in a transaction
    /// of its own on `conn` (or a pooled connection).
    pub(super) async fn index_log(
        &self,
        conn: Option<&mut sqlx::AnyConnection>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_on(conn).await?;
        let indexed = self.index_log_in(&mut tx).await;
        self.finish(tx, indexed).await
    }

    /// Adds the rows after `ctxkeeper_log_indexed`'s mark to the full-text index and moves the
    /// mark to the last row, inside `tx` (SQLite).
    pub(super) async fn index_log_in(&self, tx: &mut WriteTx<'_>) -> Result<(), StoreError> {
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
    pub(super) async fn index_log_for_search(&self) -> Result<(), StoreError> {
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

    pub(super) fn search_sql(&self, session_filter: bool) -> String {
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
    pub(super) fn fts_query(&self, scope: &SearchScope, terms: &[String]) -> String {
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

    /// [`SessionStore::search`](crate::SessionStore::search): candidates from the database's
    /// full-text index, ranked again by BM25 over their indexed text.
    pub(super) async fn search_log(
        &self,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, StoreError> {
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
        let mut ranker = Ranker::for_query(&query.text);
        let mut hits = Vec::with_capacity(rows.len());
        let mut indexes = Vec::with_capacity(rows.len());
        for row in &rows {
            let seq: i64 = row.try_get(4).map_err(|err| self.err(err))?;
            let at: i64 = row.try_get(5).map_err(|err| self.err(err))?;
            let body: String = row.try_get(6).map_err(|err| self.err(err))?;
            // The engine matched any term; a compound word of the query must be there whole.
            if !ranker.holds_phrases(&body) {
                continue;
            }
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
}
