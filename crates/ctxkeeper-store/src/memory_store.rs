//! `memory://`: an in-process session store, lost on exit. For tests and demos, and the
//! reference the other backends are checked against.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use ctxkeeper_core::model::Message;

use crate::StoreError;
use crate::generations::{Shape, assemble, messages_of, next_shape, split};
use crate::session::{
    AppendOutcome, Commit, Committed, HistoryPage, LogEntry, SearchQuery, SessionFilter,
    SessionInfo, SessionStore, TenantInfo, Versioned, rank_entries, sort_sessions, tally,
};
use crate::state::SessionKey;
use crate::time::now_ms;

#[derive(Debug, Default)]
struct Session {
    /// The version and the head of the saved state (see [`crate::generations`]).
    state: Option<(u64, String)>,
    shape: Shape,
    /// Every generation's items, kept until the session goes.
    generations: BTreeMap<u64, Vec<String>>,
    log: Vec<LogEntry>,
    created_at_ms: i64,
    updated_at_ms: i64,
}

/// The in-memory session store.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<BTreeMap<SessionKey, Session>>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut BTreeMap<SessionKey, Session>) -> T,
    ) -> Result<T, StoreError> {
        let mut guard = self
            .sessions
            .lock()
            .map_err(|_| StoreError::backend("memory", "lock poisoned by a panicked writer"))?;
        Ok(f(&mut guard))
    }
}

fn touch<'a>(
    sessions: &'a mut BTreeMap<SessionKey, Session>,
    key: &SessionKey,
    now: i64,
) -> &'a mut Session {
    let session = sessions.entry(key.clone()).or_insert_with(|| Session {
        created_at_ms: now,
        ..Session::default()
    });
    session.updated_at_ms = now;
    session
}

/// Appends to a session's log; `None` when `messages` is empty.
fn push_log(session: &mut Session, messages: &[Message], now: i64) -> Option<AppendOutcome> {
    let first_seq = session.log.len() as u64 + 1;
    for message in messages {
        let seq = session.log.len() as u64 + 1;
        session.log.push(LogEntry {
            seq,
            at_ms: now,
            message: message.clone(),
        });
    }
    (!messages.is_empty()).then_some(AppendOutcome {
        first_seq,
        last_seq: session.log.len() as u64,
    })
}

#[async_trait]
impl SessionStore for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<Versioned>, StoreError> {
        let stored = self.with(|sessions| {
            sessions.get(key).and_then(|s| {
                let (version, head) = s.state.as_ref()?;
                let items = s
                    .generations
                    .get(&s.shape.generation)
                    .cloned()
                    .unwrap_or_default();
                Some((*version, head.clone(), items, s.shape.generation))
            })
        })?;
        let Some((version, head, items, generation)) = stored else {
            return Ok(None);
        };
        Ok(Some(Versioned {
            state: assemble(&head, &items)?,
            version,
            generation: Some(generation),
        }))
    }

    async fn append_checked(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<AppendOutcome, StoreError> {
        self.with(|sessions| {
            let now = now_ms();
            push_log(touch(sessions, key, now), messages, now)
        })?
        .ok_or_else(|| StoreError::InvalidInput("append of no messages".into()))
    }

    fn commits_atomically(&self) -> bool {
        true
    }

    fn saves_incrementally(&self) -> bool {
        true
    }

    async fn commit(&self, key: &SessionKey, commit: Commit<'_>) -> Result<Committed, StoreError> {
        // Serialized as the durable backends store it: an unserializable state fails here too.
        let split = split(commit.state)?;
        // Both under one lock: nobody sees the state without its log entries.
        self.with(|sessions| {
            let current = sessions.get(key).filter(|s| s.state.is_some());
            let actual = current.and_then(|s| s.state.as_ref()).map(|(v, _)| *v);
            if actual != commit.expected {
                return Err(StoreError::Conflict {
                    expected: commit.expected,
                    actual,
                });
            }
            let (shape, fresh) = next_shape(current.map(|s| s.shape), commit.write, &split)?;
            let version = actual.unwrap_or(0) + 1;
            let now = now_ms();
            let session = touch(sessions, key, now);
            session.state = Some((version, split.head));
            session.shape = shape;
            let items = session.generations.entry(shape.generation).or_default();
            if fresh {
                items.clear();
            }
            items.extend(split.items);
            let appended = push_log(session, commit.messages, now);
            Ok(Committed { version, appended })
        })?
    }

    async fn generation_context(
        &self,
        key: &SessionKey,
        generation: u64,
    ) -> Result<Vec<Message>, StoreError> {
        let items = self.with(|sessions| {
            sessions
                .get(key)
                .and_then(|s| s.generations.get(&generation).cloned())
                .unwrap_or_default()
        })?;
        messages_of(&items)
    }

    async fn list(&self, filter: &SessionFilter) -> Result<Vec<SessionInfo>, StoreError> {
        filter.validate()?;
        let mut out = self.with(|sessions| {
            sessions
                .iter()
                .filter(|(key, _)| filter.matches(key))
                .map(|(key, s)| SessionInfo {
                    key: key.clone(),
                    version: s.state.as_ref().map(|(v, _)| *v),
                    log_len: s.log.len() as u64,
                    created_at_ms: s.created_at_ms,
                    updated_at_ms: s.updated_at_ms,
                })
                .collect::<Vec<_>>()
        })?;
        sort_sessions(&mut out);
        Ok(out)
    }

    async fn tenants(&self) -> Result<Vec<TenantInfo>, StoreError> {
        self.with(|sessions| {
            tally(
                sessions
                    .iter()
                    .map(|(key, s)| (key.tenant(), s.updated_at_ms)),
            )
        })
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        self.with(|sessions| sessions.remove(key).is_some())
    }

    async fn history(
        &self,
        key: &SessionKey,
        page: HistoryPage,
    ) -> Result<Vec<LogEntry>, StoreError> {
        self.with(|sessions| {
            let Some(session) = sessions.get(key) else {
                return Vec::new();
            };
            let end = page.before_seq.map_or(session.log.len(), |before| {
                (before.saturating_sub(1) as usize).min(session.log.len())
            });
            let start = end.saturating_sub(page.last);
            session.log[start..end].to_vec()
        })
    }

    async fn search(&self, query: &SearchQuery) -> Result<Vec<crate::SearchHit>, StoreError> {
        let terms = query.terms()?;
        let entries = self.with(|sessions| {
            sessions
                .iter()
                .filter(|(key, _)| query.scope.contains(key))
                .flat_map(|(key, s)| s.log.iter().map(move |e| (key.clone(), e.clone())))
                .collect::<Vec<_>>()
        })?;
        Ok(rank_entries(query, &terms, entries))
    }

    async fn purge_before(&self, tenant: Option<&str>, cutoff_ms: i64) -> Result<u64, StoreError> {
        crate::session::check_tenant(tenant)?;
        self.with(|sessions| {
            let before = sessions.len();
            sessions.retain(|key, s| {
                s.updated_at_ms >= cutoff_ms || tenant.is_some_and(|t| t != key.tenant())
            });
            (before - sessions.len()) as u64
        })
    }
}
