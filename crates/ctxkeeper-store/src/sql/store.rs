//! [`SqlStore`] as a [`SessionStore`]: loads, saves (through `save` or the group commit),
//! appends, lists, history, deletes and retention; search is in `search`.

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
use sqlx::Row;

use super::{PendingCommit, SqlStore, key_of, log_rows, u64_of};
use crate::StoreError;
use crate::generations::{assemble, messages_of, split};
use crate::session::{
    AppendOutcome, Commit, Committed, HistoryPage, LogEntry, SearchHit, SearchQuery, SessionFilter,
    SessionInfo, SessionStore, TenantInfo, Versioned, sort_tenants,
};
use crate::state::{AgentState, SessionKey};
use crate::time::now_ms;

impl SqlStore {
    /// The items of one generation in order, the first `limit` of them when given.
    pub(super) async fn items(
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

    async fn append_checked(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<AppendOutcome, StoreError> {
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

    fn saves_incrementally(&self) -> bool {
        true
    }

    async fn commit(&self, key: &SessionKey, commit: Commit<'_>) -> Result<Committed, StoreError> {
        // Serialized before the transaction: the write lock is held for the writes only.
        let pending = PendingCommit {
            key: key.clone(),
            split: split(commit.state)?,
            write: commit.write,
            expected: commit.expected,
            rows: log_rows(commit.messages)?,
        };
        if let Some(group) = &self.group {
            return group.commit(pending).await;
        }
        let mut tx = self.begin().await?;
        let committed = self.save_and_append_in(&mut tx, &pending, now_ms()).await;
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

    async fn tenants(&self) -> Result<Vec<TenantInfo>, StoreError> {
        // One pass over the session rows' primary key (tenant first): no log or state is read.
        let rows =
            sqlx::query(self.q(
                "SELECT tenant, COUNT(*), MAX(updated_at) FROM ctxkeeper_sessions GROUP BY tenant",
            ))
            .fetch_all(&self.pool)
            .await
            .map_err(|err| self.err(err))?;
        let mut tenants = rows
            .iter()
            .map(|row| {
                Ok(TenantInfo {
                    tenant: row.try_get(0).map_err(|err| self.err(err))?,
                    sessions: u64_of(row.try_get(1).map_err(|err| self.err(err))?),
                    updated_at_ms: row.try_get(2).map_err(|err| self.err(err))?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        sort_tenants(&mut tenants);
        Ok(tenants)
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
        self.search_log(query).await
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
