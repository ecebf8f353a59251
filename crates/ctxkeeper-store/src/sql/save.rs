//! One save's transaction, as PostgreSQL and MySQL/MariaDB (and SQLite outside its group
//! commit) write it: the compare-and-swap on the session row, the state head and the new
//! items of its generation, then the log rows numbered by the counter the swap bumped. A
//! stale writer changes nothing and gets a conflict; so does an append that does not
//! continue the stored generation.

use sqlx::Row;

use super::{Dialect, PendingCommit, SqlStore, WriteTx, bind_key, u64_of};
use crate::StoreError;
use crate::generations::{Shape, Split, next_shape};
use crate::session::{AppendOutcome, Committed};
use crate::state::SessionKey;

/// The head of a multi-row insert of log rows (per save and in a group's script).
pub(super) const LOG_INSERT: &str =
    "INSERT INTO ctxkeeper_log (tenant, user_id, agent, session, seq, at, message, body)";

/// The head of a multi-row insert of context items (per save and in a group's script).
pub(super) const CONTEXT_INSERT: &str =
    "INSERT INTO ctxkeeper_context (tenant, user_id, agent, session, generation, idx, item)";

/// Rows per multi-row INSERT when appending to the log.
pub(super) const INSERT_BATCH: usize = 100;

impl SqlStore {
    /// The compare-and-swap of a save, inside `tx`: moves the session row to the next
    /// version and counts `logged` more log entries, or answers [`StoreError::Conflict`]
    /// having changed nothing (so a group commit can go on with its other saves).
    pub(super) async fn cas_in(
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
    pub(super) async fn shape_in(
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
    pub(super) async fn state_in(
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
    pub(super) async fn log_in(
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
    pub(super) async fn insert_log(
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
    pub(super) async fn save_and_append_in(
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

    pub(super) fn upsert_touch(&self) -> &'static str {
        match self.dialect {
            Dialect::MySql => {
                "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE tenant = tenant"
            }
            _ => {
                "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, user_id, agent, session) DO NOTHING"
            }
        }
    }

    pub(super) fn upsert_state(&self) -> &'static str {
        match self.dialect {
            Dialect::MySql => {
                "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state, generation, context_len, trail_len) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE state = VALUES(state), generation = VALUES(generation), context_len = VALUES(context_len), trail_len = VALUES(trail_len)"
            }
            _ => {
                "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state, generation, context_len, trail_len) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, user_id, agent, session) DO UPDATE SET state = excluded.state, generation = excluded.generation, context_len = excluded.context_len, trail_len = excluded.trail_len"
            }
        }
    }

    pub(super) fn upsert_bump(&self) -> &'static str {
        match self.dialect {
            Dialect::MySql => {
                "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, log_len, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE log_len = log_len + VALUES(log_len), updated_at = VALUES(updated_at)"
            }
            _ => {
                "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, log_len, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, user_id, agent, session) DO UPDATE SET log_len = ctxkeeper_sessions.log_len + excluded.log_len, updated_at = excluded.updated_at"
            }
        }
    }
}
