//! `file://DIR`: sessions as JSON files in the `004` workspace layout.
//!
//! ```text
//! DIR/                                   the default tenant and user
//!   agents/<agentId>/context/<sessionId>/state.json     versioned state, replaced atomically
//!   agents/<agentId>/context/<sessionId>/key.json       the session's full key
//!   agents/<agentId>/sessions/<sessionId>.log.jsonl     the append-only session log
//!   users/<userId>/agents/…                             other users, same layout
//!   tenants/<tenantId>/…                                other tenants, same layout
//! ```
//!
//! Every path segment goes through [`sanitize_segment`]. A save takes an exclusive file lock
//! on the session, checks the version, writes `state.json` through a temporary file, fsync and
//! rename; an append takes the same lock and appends fsync'd lines. A crash leaves the old or
//! the new state and at worst a torn last log line, which readers skip and the next append cuts
//! off. Single host only: several processes may share the directory, several machines may not.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ctxkeeper_store::{file_store::FileStore, AgentState, SessionKey, SessionStore};
//!
//! let dir = tempfile::tempdir()?;
//! let store = FileStore::open(dir.path().to_str().unwrap()).await?;
//! let key = SessionKey::new("default", "default", "bot", "s1")?;
//! store.save(&key, &AgentState::new(), None).await?;
//! assert!(dir.path().join("agents/bot/context/s1/state.json").exists());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::StoreError;
use crate::archive::sanitize_segment;
use crate::fsutil::{self, blocking};
use crate::session::{
    AppendOutcome, HistoryPage, LogEntry, SearchHit, SearchQuery, SearchScope, SessionFilter,
    SessionInfo, SessionStore, Versioned, check_messages, entry_json, parse_entry, rank_entries,
};
use crate::state::{AgentState, SessionKey};
use crate::time::now_ms;

/// The JSON-file session store.
#[derive(Debug, Clone)]
pub struct FileStore {
    root: PathBuf,
}

#[derive(Serialize, Deserialize)]
struct KeyFile {
    key: SessionKey,
    created_at_ms: i64,
}

#[derive(Deserialize)]
struct StateFile<'a> {
    version: u64,
    #[serde(borrow)]
    state: &'a RawValue,
}

impl FileStore {
    /// Opens (and creates) the store directory: `file://DIR` or a plain path.
    pub async fn open(url_or_path: &str) -> Result<FileStore, StoreError> {
        let path = url_or_path.strip_prefix("file://").unwrap_or(url_or_path);
        if path.is_empty() {
            return Err(StoreError::InvalidInput(
                "file store needs a directory".to_string(),
            ));
        }
        let root = PathBuf::from(path);
        let created = root.clone();
        blocking(move || Ok(fs::create_dir_all(&created)?)).await?;
        Ok(FileStore { root })
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

fn tenant_base(root: &Path, tenant: &str) -> PathBuf {
    if tenant == SessionKey::DEFAULT {
        root.to_path_buf()
    } else {
        root.join("tenants").join(sanitize_segment(tenant))
    }
}

fn user_base(tenant_base: &Path, user: &str) -> PathBuf {
    if user == SessionKey::DEFAULT {
        tenant_base.to_path_buf()
    } else {
        tenant_base.join("users").join(sanitize_segment(user))
    }
}

struct Paths {
    context_dir: PathBuf,
    state: PathBuf,
    key: PathBuf,
    lock: PathBuf,
    log: PathBuf,
}

fn paths(root: &Path, key: &SessionKey) -> Paths {
    let agent_dir = user_base(&tenant_base(root, key.tenant()), key.user())
        .join("agents")
        .join(sanitize_segment(key.agent()));
    let session = sanitize_segment(key.session());
    let context_dir = agent_dir.join("context").join(&session);
    Paths {
        state: context_dir.join("state.json"),
        key: context_dir.join("key.json"),
        lock: context_dir.join(".lock"),
        log: agent_dir
            .join("sessions")
            .join(format!("{session}.log.jsonl")),
        context_dir,
    }
}

/// Writes `key.json` the first time a session is touched.
fn ensure_key_file(p: &Paths, key: &SessionKey) -> Result<(), StoreError> {
    if p.key.exists() {
        return Ok(());
    }
    let body = serde_json::to_vec(&KeyFile {
        key: key.clone(),
        created_at_ms: now_ms(),
    })
    .map_err(|err| StoreError::backend("file", err))?;
    fsutil::create_new_durable(&p.key, &body)?;
    Ok(())
}

/// The version at the head of `state.json`, reading only its first bytes.
fn stored_version(path: &Path) -> Result<Option<u64>, StoreError> {
    use std::io::Read;
    let mut file = match fs::File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    let mut head = [0u8; 64];
    let n = file.read(&mut head)?;
    let head = std::str::from_utf8(&head[..n]).unwrap_or_default();
    head.strip_prefix("{\"version\":")
        .and_then(|rest| rest.split(',').next())
        .and_then(|v| v.parse().ok())
        .map(Some)
        .ok_or_else(|| StoreError::Corrupt(format!("{}: no version header", path.display())))
}

fn mtime_ms(path: &Path) -> Option<i64> {
    let modified = fs::metadata(path).ok()?.modified().ok()?;
    Some(modified.duration_since(UNIX_EPOCH).ok()?.as_millis() as i64)
}

/// The last complete log entry's sequence number (0 for no log).
fn last_seq(log: &Path) -> Result<u64, StoreError> {
    match fsutil::tail_lines(log, 1, |_| true) {
        Ok(lines) => match lines.first() {
            Some(line) => Ok(parse_entry(line)?.seq),
            None => Ok(0),
        },
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(err) => Err(err.into()),
    }
}

fn read_log(log: &Path) -> Result<Vec<LogEntry>, StoreError> {
    let Some(bytes) = fsutil::read_optional(log)? else {
        return Ok(Vec::new());
    };
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(i) => &bytes[..=i],
        None => &[][..],
    };
    complete
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(parse_entry)
        .collect()
}

/// Every session directory (`…/context/<s>/key.json`) under a tenant base.
fn sessions_under(tenant_base: &Path) -> Result<Vec<(SessionKey, Paths, i64)>, StoreError> {
    let mut user_bases = vec![tenant_base.to_path_buf()];
    if let Ok(users) = fs::read_dir(tenant_base.join("users")) {
        for user in users.flatten() {
            user_bases.push(user.path());
        }
    }
    let mut out = Vec::new();
    for base in user_bases {
        let Ok(agents) = fs::read_dir(base.join("agents")) else {
            continue;
        };
        for agent in agents.flatten() {
            let Ok(contexts) = fs::read_dir(agent.path().join("context")) else {
                continue;
            };
            for context in contexts.flatten() {
                let Some(bytes) = fsutil::read_optional(&context.path().join("key.json"))? else {
                    continue;
                };
                let Ok(file) = serde_json::from_slice::<KeyFile>(&bytes) else {
                    continue;
                };
                let p = paths(tenant_base_root(tenant_base, &file.key), &file.key);
                out.push((file.key, p, file.created_at_ms));
            }
        }
    }
    Ok(out)
}

/// Recovers the store root from a tenant base, so paths are rebuilt from the key itself.
fn tenant_base_root<'a>(tenant_base: &'a Path, key: &SessionKey) -> &'a Path {
    if key.tenant() == SessionKey::DEFAULT {
        tenant_base
    } else {
        tenant_base
            .parent()
            .and_then(Path::parent)
            .unwrap_or(tenant_base)
    }
}

fn info(key: SessionKey, p: &Paths, created_at_ms: i64) -> Result<SessionInfo, StoreError> {
    let updated = [mtime_ms(&p.state), mtime_ms(&p.log), Some(created_at_ms)]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(created_at_ms);
    Ok(SessionInfo {
        version: stored_version(&p.state)?,
        log_len: last_seq(&p.log)?,
        created_at_ms,
        updated_at_ms: updated,
        key,
    })
}

fn all_tenant_bases(root: &Path) -> Vec<PathBuf> {
    let mut bases = vec![root.to_path_buf()];
    if let Ok(tenants) = fs::read_dir(root.join("tenants")) {
        bases.extend(tenants.flatten().map(|t| t.path()));
    }
    bases
}

fn remove_session(p: &Paths) -> Result<bool, StoreError> {
    let _lock = fsutil::lock_file(&p.lock)?;
    let mut existed = false;
    match fs::remove_file(&p.log) {
        Ok(()) => existed = true,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err.into()),
    }
    for file in [&p.state, &p.key] {
        match fs::remove_file(file) {
            Ok(()) => existed = true,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err.into()),
        }
    }
    // The lock file goes last, with the directory; another process may still hold a handle to
    // it, which is harmless because the session no longer has state.
    let _ = fs::remove_file(&p.lock);
    let _ = fs::remove_dir(&p.context_dir);
    Ok(existed)
}

#[async_trait]
impl SessionStore for FileStore {
    fn backend(&self) -> &'static str {
        "file"
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<Versioned>, StoreError> {
        let p = paths(&self.root, key);
        blocking(move || {
            let Some(bytes) = fsutil::read_optional(&p.state)? else {
                return Ok(None);
            };
            let file: StateFile<'_> = serde_json::from_slice(&bytes)
                .map_err(|err| StoreError::Corrupt(format!("{}: {err}", p.state.display())))?;
            let state = AgentState::from_json(file.state.get())?;
            Ok(Some(Versioned {
                state,
                version: file.version,
            }))
        })
        .await
    }

    async fn save(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
    ) -> Result<u64, StoreError> {
        let p = paths(&self.root, key);
        let key = key.clone();
        let state_json = state.to_json()?;
        blocking(move || {
            let _lock = fsutil::lock_file(&p.lock)?;
            ensure_key_file(&p, &key)?;
            let actual = stored_version(&p.state)?;
            if actual != expected {
                return Err(StoreError::Conflict { expected, actual });
            }
            let version = actual.unwrap_or(0) + 1;
            // The version leads the file so `list` can read it without parsing the state.
            let body = format!(
                "{{\"version\":{version},\"saved_at_ms\":{},\"state\":{state_json}}}",
                now_ms()
            );
            fsutil::atomic_write(&p.state, body.as_bytes())?;
            Ok(version)
        })
        .await
    }

    async fn append(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<AppendOutcome, StoreError> {
        check_messages(messages)?;
        let p = paths(&self.root, key);
        let key = key.clone();
        let messages = messages.to_vec();
        blocking(move || {
            let _lock = fsutil::lock_file(&p.lock)?;
            ensure_key_file(&p, &key)?;
            let first_seq = last_seq(&p.log)? + 1;
            let now = now_ms();
            let mut lines = String::new();
            for (i, message) in messages.iter().enumerate() {
                lines.push_str(&entry_json(first_seq + i as u64, now, message)?);
                lines.push('\n');
            }
            fsutil::append_lines(&p.log, lines.as_bytes())?;
            Ok(AppendOutcome {
                first_seq,
                last_seq: first_seq + messages.len() as u64 - 1,
            })
        })
        .await
    }

    async fn list(&self, filter: &SessionFilter) -> Result<Vec<SessionInfo>, StoreError> {
        filter.validate()?;
        let base = tenant_base(&self.root, &filter.tenant);
        let filter = filter.clone();
        let mut out = blocking(move || {
            let mut out = Vec::new();
            for (key, p, created) in sessions_under(&base)? {
                if filter.matches(&key) {
                    out.push(info(key, &p, created)?);
                }
            }
            Ok(out)
        })
        .await?;
        out.sort_by(|a, b| {
            b.updated_at_ms
                .cmp(&a.updated_at_ms)
                .then_with(|| a.key.cmp(&b.key))
        });
        Ok(out)
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        let p = paths(&self.root, key);
        blocking(move || remove_session(&p)).await
    }

    async fn history(
        &self,
        key: &SessionKey,
        page: HistoryPage,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let p = paths(&self.root, key);
        blocking(move || {
            let before = page.before_seq.unwrap_or(u64::MAX);
            let lines = match fsutil::tail_lines(&p.log, page.last, |line| {
                parse_entry(line).is_ok_and(|e| e.seq < before)
            }) {
                Ok(lines) => lines,
                Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(err) => return Err(err.into()),
            };
            lines.iter().map(|line| parse_entry(line)).collect()
        })
        .await
    }

    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        let terms = query.terms()?;
        let root = self.root.clone();
        let query = query.clone();
        blocking(move || {
            let sessions = match &query.scope {
                SearchScope::Session(key) => vec![(key.clone(), paths(&root, key))],
                SearchScope::Tenant(tenant) => sessions_under(&tenant_base(&root, tenant))?
                    .into_iter()
                    .filter(|(key, _, _)| query.scope.contains(key))
                    .map(|(key, p, _)| (key, p))
                    .collect(),
            };
            let mut entries = Vec::new();
            for (key, p) in sessions {
                for entry in read_log(&p.log)? {
                    entries.push((key.clone(), entry));
                }
            }
            Ok(rank_entries(&terms, entries, query.limit))
        })
        .await
    }

    async fn purge_before(&self, tenant: Option<&str>, cutoff_ms: i64) -> Result<u64, StoreError> {
        crate::session::check_tenant(tenant)?;
        let root = self.root.clone();
        let bases = match tenant {
            Some(tenant) => vec![tenant_base(&root, tenant)],
            None => Vec::new(),
        };
        blocking(move || {
            let mut removed = 0;
            let bases = if bases.is_empty() {
                all_tenant_bases(&root)
            } else {
                bases
            };
            for base in bases {
                for (key, p, created) in sessions_under(&base)? {
                    if info(key, &p, created)?.updated_at_ms < cutoff_ms && remove_session(&p)? {
                        removed += 1;
                    }
                }
            }
            Ok(removed)
        })
        .await
    }
}
