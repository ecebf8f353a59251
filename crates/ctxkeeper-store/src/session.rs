//! The session store contract: versioned agent state, an append-only session log, and the
//! queries over them.
//!
//! - **State** is saved with compare-and-swap: [`SessionStore::save`] takes the version the
//!   caller loaded (`None` for a new session) and fails with [`StoreError::Conflict`] when
//!   someone saved in between. Nothing is ever overwritten silently.
//! - **The log** is everything the session saw, in order, never compacted:
//!   [`SessionStore::append`] costs O(appended messages) and numbers entries `1, 2, 3…`
//!   without gaps even under concurrent appenders.
//! - **Queries**: [`list`](SessionStore::list), [`history`](SessionStore::history) (last N,
//!   paged backwards), [`search`](SessionStore::search) (full-text, ranked; every hit names its
//!   session) — always inside one tenant. [`tenants`](SessionStore::tenants) is the one view
//!   across tenants: which hold sessions, how many, and when each was last written (an
//!   operator's view; the gateway shows it to the admin only).
//! - **Retention**: [`purge_before`](SessionStore::purge_before) removes sessions untouched since
//!   a cut-off; [`Retention`] turns an age (default 30 days) into that cut-off.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_store::{open_store, AgentState, SearchQuery, SessionKey, StoreError};
//!
//! let store = open_store("memory://").await?;
//! let key = SessionKey::simple("s1")?;
//! let v1 = store.save(&key, &AgentState::new(), None).await?;
//! // A second writer that also thinks the session is new loses.
//! let stale = store.save(&key, &AgentState::new(), None).await;
//! assert!(matches!(stale, Err(StoreError::Conflict { .. })));
//! store.save(&key, &AgentState::new(), Some(v1)).await?;
//!
//! store.append(&key, &[Message::user("the invoice is overdue")]).await?;
//! let hits = store.search(&SearchQuery::tenant("default", "invoice")).await?;
//! assert_eq!(hits[0].key, key);
//! # Ok::<(), StoreError>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
use serde::{Deserialize, Serialize};

use crate::StoreError;
use crate::generations::ContextWrite;
use crate::state::{AgentState, SessionKey, validate_identifier};

/// A loaded state and the version to pass back to [`SessionStore::save`].
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned {
    pub state: AgentState,
    pub version: u64,
    /// The generation the state was read from, `None` for a record written whole (by a
    /// store without generations, or before they existed): only a state read from a
    /// generation can be continued with [`ContextWrite::Append`].
    pub generation: Option<u64>,
}

/// Where an append landed: the log sequence numbers of the first and last appended entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendOutcome {
    pub first_seq: u64,
    pub last_seq: u64,
}

/// What [`SessionStore::save_and_append`] committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    /// The state's new version.
    pub version: u64,
    /// Where the log entries landed; `None` when there were none to append.
    pub appended: Option<AppendOutcome>,
}

/// What one [`SessionStore::commit`] writes: the state, how its context is written, the
/// version it must replace (compare-and-swap, as [`SessionStore::save`]) and the messages it
/// appends to the session log. Bundled so that every store and wrapper takes them alike.
#[derive(Debug, Clone, Copy)]
pub struct Commit<'a> {
    pub state: &'a AgentState,
    pub write: ContextWrite,
    /// The stored version being replaced, `None` when no state is saved yet.
    pub expected: Option<u64>,
    pub messages: &'a [Message],
}

impl<'a> Commit<'a> {
    /// `state` written as a whole new generation, with `messages` appended to the log.
    pub fn generation(
        state: &'a AgentState,
        expected: Option<u64>,
        messages: &'a [Message],
    ) -> Commit<'a> {
        Commit {
            state,
            write: ContextWrite::Generation,
            expected,
            messages,
        }
    }
}

/// One entry of a session log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    /// 1-based position in the session log.
    pub seq: u64,
    /// When it was appended (ms since the Unix epoch).
    pub at_ms: i64,
    pub message: Message,
}

/// What [`SessionStore::list`] reports about one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub key: SessionKey,
    /// The saved state's version, `None` if only the log was written.
    pub version: Option<u64>,
    /// Number of log entries.
    pub log_len: u64,
    pub created_at_ms: i64,
    /// Last save or append.
    pub updated_at_ms: i64,
}

/// What [`SessionStore::tenants`] reports about one tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantInfo {
    pub tenant: String,
    /// Its sessions: as many as [`SessionStore::list`] returns for the tenant.
    pub sessions: u64,
    /// The newest last save or append among its sessions (ms since the Unix epoch).
    pub updated_at_ms: i64,
}

/// Which sessions [`SessionStore::list`] returns: one tenant, optionally one user and agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFilter {
    pub tenant: String,
    pub user: Option<String>,
    pub agent: Option<String>,
}

impl SessionFilter {
    /// All sessions of a tenant.
    pub fn tenant(tenant: impl Into<String>) -> SessionFilter {
        SessionFilter {
            tenant: tenant.into(),
            user: None,
            agent: None,
        }
    }

    /// Checks the identifiers.
    pub fn validate(&self) -> Result<(), StoreError> {
        validate_identifier("tenant", &self.tenant)?;
        if let Some(user) = &self.user {
            validate_identifier("user", user)?;
        }
        if let Some(agent) = &self.agent {
            validate_identifier("agent", agent)?;
        }
        Ok(())
    }

    /// True when `key` passes the filter.
    pub fn matches(&self, key: &SessionKey) -> bool {
        key.tenant() == self.tenant
            && self.user.as_deref().is_none_or(|u| u == key.user())
            && self.agent.as_deref().is_none_or(|a| a == key.agent())
    }
}

/// A page of history: the `last` entries before `before_seq` (or the end), oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPage {
    pub last: usize,
    pub before_seq: Option<u64>,
}

impl HistoryPage {
    /// The last `n` entries.
    pub fn last(n: usize) -> HistoryPage {
        HistoryPage {
            last: n,
            before_seq: None,
        }
    }

    /// The page before the given one: pass the `seq` of the oldest entry already seen.
    pub fn before(n: usize, seq: u64) -> HistoryPage {
        HistoryPage {
            last: n,
            before_seq: Some(seq),
        }
    }
}

/// Where a search looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchScope {
    /// Every session of a tenant.
    Tenant(String),
    /// One session.
    Session(SessionKey),
}

impl SearchScope {
    pub fn tenant(&self) -> &str {
        match self {
            SearchScope::Tenant(tenant) => tenant,
            SearchScope::Session(key) => key.tenant(),
        }
    }

    /// True when `key` lies inside the scope.
    pub fn contains(&self, key: &SessionKey) -> bool {
        match self {
            SearchScope::Tenant(tenant) => key.tenant() == tenant,
            SearchScope::Session(session) => session == key,
        }
    }
}

/// A full-text search over session logs. Terms are words (letters and digits); a log entry
/// matches when it holds any term, and entries holding more of the terms, more often, rank
/// first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    pub scope: SearchScope,
    pub text: String,
    pub limit: usize,
}

impl SearchQuery {
    /// The default number of hits.
    pub const DEFAULT_LIMIT: usize = 20;

    /// A search across a tenant's sessions.
    pub fn tenant(tenant: impl Into<String>, text: impl Into<String>) -> SearchQuery {
        SearchQuery {
            scope: SearchScope::Tenant(tenant.into()),
            text: text.into(),
            limit: Self::DEFAULT_LIMIT,
        }
    }

    /// A search inside one session.
    pub fn session(key: SessionKey, text: impl Into<String>) -> SearchQuery {
        SearchQuery {
            scope: SearchScope::Session(key),
            text: text.into(),
            limit: Self::DEFAULT_LIMIT,
        }
    }

    /// The query's terms, or an error for a query without any.
    pub(crate) fn terms(&self) -> Result<Vec<String>, StoreError> {
        validate_identifier("tenant", self.scope.tenant())?;
        let terms = crate::text::query_terms(&self.text);
        if terms.is_empty() {
            return Err(StoreError::InvalidInput(
                "search query has no words".to_string(),
            ));
        }
        Ok(terms)
    }
}

/// One search result: the session and log entry it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    pub key: SessionKey,
    pub seq: u64,
    pub at_ms: i64,
    /// Backend-specific relevance; higher is better. Compare only within one result list.
    pub score: f64,
    pub snippet: String,
}

/// How long sessions are kept after their last save or append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    pub max_age: Duration,
}

impl Default for Retention {
    /// 30 days, as in `003`.
    fn default() -> Retention {
        Retention {
            max_age: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

impl Retention {
    /// The cut-off for [`SessionStore::purge_before`] at time `now_ms`.
    pub fn cutoff_ms(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(i64::try_from(self.max_age.as_millis()).unwrap_or(i64::MAX))
    }
}

/// Persistent sessions: versioned state plus an append-only log, keyed by [`SessionKey`].
///
/// Every backend runs the same conformance suite (`tests/common/store_suite.rs`).
#[async_trait]
pub trait SessionStore: Send + Sync + fmt::Debug {
    /// A short backend name (`sqlite`, `redis`, …) for messages and reports.
    fn backend(&self) -> &'static str;

    /// The saved state and its version, or `None` if none was saved.
    async fn load(&self, key: &SessionKey) -> Result<Option<Versioned>, StoreError>;

    /// Saves `state` if the stored version is still `expected` (`None`: no state saved yet),
    /// and returns the new version. Otherwise fails with [`StoreError::Conflict`].
    ///
    /// A store that [`saves_incrementally`](Self::saves_incrementally) gets this from its
    /// [`commit`](Self::commit): a whole generation with no log entries. Any other store
    /// implements it.
    async fn save(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
    ) -> Result<u64, StoreError> {
        if !self.saves_incrementally() {
            // The default `commit` comes back here: refuse rather than recurse.
            return Err(StoreError::NotImplemented(format!(
                "{}: save",
                self.backend()
            )));
        }
        let commit = Commit::generation(state, expected, &[]);
        Ok(self.commit(key, commit).await?.version)
    }

    /// Appends messages to the session log, creating the session if needed. An append of no
    /// messages is refused.
    async fn append(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<AppendOutcome, StoreError> {
        check_messages(messages)?;
        self.append_checked(key, messages).await
    }

    /// What a store implements for [`append`](Self::append), which has checked `messages`
    /// (at least one).
    async fn append_checked(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<AppendOutcome, StoreError>;

    /// Whether [`save_and_append`](Self::save_and_append) commits the state and the log
    /// entries in one atomic write. When it does not, a crash between the two can leave a
    /// state saved without its log entries; a caller that needs the log complete then tracks
    /// what is owed itself (the gateway's sessions do).
    fn commits_atomically(&self) -> bool {
        false
    }

    /// Saves `state` if the stored version is still `expected` (as [`save`](Self::save)) and
    /// appends `messages` to the session log. On a conflict nothing is appended. One atomic
    /// write where [`commits_atomically`](Self::commits_atomically) says so, and one round
    /// trip instead of two; otherwise the save, then the append. A store that
    /// [`saves_incrementally`](Self::saves_incrementally) has its own write path in
    /// [`commit`](Self::commit), so this is a whole generation written through it.
    async fn save_and_append(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
        messages: &[Message],
    ) -> Result<Committed, StoreError> {
        if self.saves_incrementally() {
            return self
                .commit(key, Commit::generation(state, expected, messages))
                .await;
        }
        let version = self.save(key, state, expected).await?;
        let appended = if messages.is_empty() {
            None
        } else {
            Some(self.append(key, messages).await?)
        };
        Ok(Committed { version, appended })
    }

    /// Whether [`commit`](Self::commit) stores the context in generations and so accepts
    /// [`ContextWrite::Append`] (every built-in store does). A store that says so implements
    /// `commit`: the default [`save_and_append`](Self::save_and_append) then goes through it.
    fn saves_incrementally(&self) -> bool {
        false
    }

    /// Saves `state` (compare-and-swap on `expected`, as [`save`](Self::save)) with `messages`
    /// appended to the log, as one commit where [`commits_atomically`](Self::commits_atomically)
    /// says so. `write` says how the context is written (see [`crate::generations`]): a whole
    /// new generation, or — where [`saves_incrementally`](Self::saves_incrementally) — only the
    /// messages and trail values that follow the stored generation's, which `state` then
    /// holds alone. A store without generations saves whole states and refuses appends.
    async fn commit(&self, key: &SessionKey, commit: Commit<'_>) -> Result<Committed, StoreError> {
        match commit.write {
            ContextWrite::Generation => {
                let Commit {
                    state,
                    expected,
                    messages,
                    ..
                } = commit;
                self.save_and_append(key, state, expected, messages).await
            }
            ContextWrite::Append { .. } => Err(StoreError::NotImplemented(format!(
                "{}: incremental saves",
                self.backend()
            ))),
        }
    }

    /// The messages of one of a session's context generations (empty when it has none, or
    /// retention removed it): what the context held before a compaction replaced it.
    async fn generation_context(
        &self,
        key: &SessionKey,
        generation: u64,
    ) -> Result<Vec<Message>, StoreError> {
        let _ = (key, generation);
        Err(StoreError::NotImplemented(format!(
            "{}: context generations",
            self.backend()
        )))
    }

    /// The sessions passing the filter, most recently updated first.
    async fn list(&self, filter: &SessionFilter) -> Result<Vec<SessionInfo>, StoreError>;

    /// Every tenant holding at least one session, with its number of sessions and the newest
    /// update among them, most recently updated first (ties by name). The one query across
    /// tenants: callers that serve several tenants show it to an operator only.
    async fn tenants(&self) -> Result<Vec<TenantInfo>, StoreError> {
        Err(StoreError::NotImplemented(format!(
            "{}: listing tenants",
            self.backend()
        )))
    }

    /// Removes a session's state and log; false if there was nothing.
    async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError>;

    /// A page of the session log, oldest first (empty for an unknown session).
    async fn history(
        &self,
        key: &SessionKey,
        page: HistoryPage,
    ) -> Result<Vec<LogEntry>, StoreError>;

    /// The whole session log, oldest first, read in pages of a thousand entries.
    async fn whole_log(&self, key: &SessionKey) -> Result<Vec<LogEntry>, StoreError> {
        const PAGE: usize = 1_000;
        let mut pages = Vec::new();
        let mut before = None;
        loop {
            let page = self
                .history(
                    key,
                    HistoryPage {
                        last: PAGE,
                        before_seq: before,
                    },
                )
                .await?;
            let Some(first) = page.first() else { break };
            let more = first.seq > 1 && page.len() == PAGE;
            before = Some(first.seq);
            pages.push(page);
            if !more {
                break;
            }
        }
        Ok(pages.into_iter().rev().flatten().collect())
    }

    /// Ranked full-text search over session logs, best first.
    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError>;

    /// Removes every session last updated before `cutoff_ms` — of one tenant, or of all
    /// tenants when `tenant` is `None` — and returns how many.
    async fn purge_before(&self, tenant: Option<&str>, cutoff_ms: i64) -> Result<u64, StoreError>;

    /// Retention clean-up: removes sessions older than the policy's age.
    async fn cleanup(&self, tenant: Option<&str>, retention: Retention) -> Result<u64, StoreError> {
        check_tenant(tenant)?;
        self.purge_before(tenant, retention.cutoff_ms(crate::time::now_ms()))
            .await
    }
}

/// Counts sessions per tenant from each session's tenant and last update, in the order
/// [`SessionStore::tenants`] promises.
pub(crate) fn tally<'a>(sessions: impl IntoIterator<Item = (&'a str, i64)>) -> Vec<TenantInfo> {
    let mut by_tenant: std::collections::BTreeMap<&str, (u64, i64)> = Default::default();
    for (tenant, updated_at_ms) in sessions {
        let entry = by_tenant.entry(tenant).or_insert((0, i64::MIN));
        entry.0 += 1;
        entry.1 = entry.1.max(updated_at_ms);
    }
    let mut tenants: Vec<TenantInfo> = by_tenant
        .into_iter()
        .map(|(tenant, (sessions, updated_at_ms))| TenantInfo {
            tenant: tenant.to_string(),
            sessions,
            updated_at_ms,
        })
        .collect();
    sort_tenants(&mut tenants);
    tenants
}

/// Orders sessions as [`SessionStore::list`] returns them: most recently updated first, ties
/// by key.
pub(crate) fn sort_sessions(sessions: &mut [SessionInfo]) {
    sessions.sort_by(|a, b| {
        b.updated_at_ms
            .cmp(&a.updated_at_ms)
            .then_with(|| a.key.cmp(&b.key))
    });
}

/// Most recently updated first, ties by name.
pub(crate) fn sort_tenants(tenants: &mut [TenantInfo]) {
    tenants.sort_by(|a, b| {
        b.updated_at_ms
            .cmp(&a.updated_at_ms)
            .then_with(|| a.tenant.cmp(&b.tenant))
    });
}

/// Validates the optional tenant of a purge.
pub(crate) fn check_tenant(tenant: Option<&str>) -> Result<(), StoreError> {
    match tenant {
        Some(tenant) => validate_identifier("tenant", tenant),
        None => Ok(()),
    }
}

/// Refuses an empty append (it would have no sequence numbers to report).
pub(crate) fn check_messages(messages: &[Message]) -> Result<(), StoreError> {
    if messages.is_empty() {
        return Err(StoreError::InvalidInput(
            "append of no messages".to_string(),
        ));
    }
    Ok(())
}

/// Serializes one log entry line: `{"seq":…,"at_ms":…,"message":…}`.
pub(crate) fn entry_json(seq: u64, at_ms: i64, message: &Message) -> Result<String, StoreError> {
    let message = serde_json::to_string(message)
        .map_err(|err| StoreError::InvalidInput(format!("message does not serialize: {err}")))?;
    Ok(format!(
        "{{\"seq\":{seq},\"at_ms\":{at_ms},\"message\":{message}}}"
    ))
}

/// Parses a log entry line written by [`entry_json`].
pub(crate) fn parse_entry(text: &[u8]) -> Result<LogEntry, StoreError> {
    serde_json::from_slice(text).map_err(|err| StoreError::Corrupt(format!("log entry: {err}")))
}

/// Ranks log entries in memory (for backends without a full-text engine).
pub(crate) fn rank_entries(
    query: &SearchQuery,
    terms: &[String],
    entries: impl IntoIterator<Item = (SessionKey, LogEntry)>,
) -> Vec<SearchHit> {
    let limit = query.limit;
    let mut ranker = crate::text::Ranker::for_query(&query.text);
    let mut matched = Vec::new();
    for (key, entry) in entries {
        let text = crate::text::message_search_text(&entry.message);
        if let Some(index) = ranker.add(&text) {
            matched.push((index, key, entry.seq, entry.at_ms, text));
        }
    }
    let mut hits: Vec<SearchHit> = matched
        .into_iter()
        .map(|(index, key, seq, at_ms, text)| SearchHit {
            key,
            seq,
            at_ms,
            score: ranker.score(index),
            snippet: crate::text::snippet(&text, terms, 160),
        })
        .collect();
    sort_hits(&mut hits);
    hits.truncate(limit);
    hits
}

/// Best first; ties broken by newest entry so results are deterministic.
pub(crate) fn sort_hits(hits: &mut [SearchHit]) {
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| b.at_ms.cmp(&a.at_ms))
            .then_with(|| a.key.cmp(&b.key))
            .then_with(|| b.seq.cmp(&a.seq))
    });
}
