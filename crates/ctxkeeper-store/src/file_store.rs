//! `file://DIR`: sessions as JSON files in the `004` workspace layout.
//!
//! ```text
//! DIR/                                   the default tenant and user
//!   agents/<agentId>/context/<sessionId>/state.json     versioned state head, replaced atomically
//!   agents/<agentId>/context/<sessionId>/context-G.jsonl the items of context generation G
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
//! off. Temporary files of killed writers are swept when the store is opened. Single host
//! only: several processes may share the directory, several machines may not.
//!
//! **Generations** ([`crate::generations`]): a save writes its new context items to the
//! generation's file first, then renames `state.json`, whose head records how many bytes of
//! that file are committed; readers read only those, and the next writer cuts off whatever
//! an interrupted one left beyond them.
//!
//! **A state and its log entries commit together** ([`SessionStore::save_and_append`], so
//! [`commits_atomically`](SessionStore::commits_atomically) holds): the entries travel inside
//! the new `state.json` as a journal (`"log_through": N` in its head, the entries in
//! `"log_owed"`), so the one rename that commits the state commits them too. They are then
//! appended to the log. A writer killed between the rename and the append leaves the journal
//! ahead of the log; whoever touches the session next — a save, an append, a history, a
//! search or a listing — appends the missing entries first (under the session lock, with the
//! sequence numbers and times they were committed with), so a committed state is never seen
//! without its log entries and no entry is written twice.
//!
//! No symbolic link below `DIR` is followed: a session, agent, user or tenant directory, a
//! state or a log that is a link is refused with [`StoreError::Forbidden`]; listings, searches
//! and retention pass over links without following them.
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

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::StoreError;
use crate::archive::sanitize_segment;
use crate::fsutil::{self, Dir, Kind, Tree, blocking};
use crate::generations::{Shape, assemble, messages_of, next_shape, split};
use crate::session::{
    AppendOutcome, Commit, Committed, HistoryPage, LogEntry, SearchHit, SearchQuery, SearchScope,
    SessionFilter, SessionInfo, SessionStore, TenantInfo, Versioned, entry_json, parse_entry,
    rank_entries, sort_sessions, tally,
};
use crate::state::{AgentState, SessionKey};
use crate::time::now_ms;

const STATE_FILE: &str = "state.json";
const KEY_FILE: &str = "key.json";
const LOCK_FILE: &str = ".lock";

/// The JSON-file session store.
#[derive(Debug, Clone)]
pub struct FileStore {
    tree: Tree,
}

#[derive(Serialize, Deserialize)]
struct KeyFile {
    key: SessionKey,
    created_at_ms: i64,
}

#[derive(Deserialize)]
struct StateFile<'a> {
    version: u64,
    /// The current generation; absent in a state written whole, before generations.
    #[serde(default)]
    context: Option<FileShape>,
    #[serde(borrow)]
    state: &'a RawValue,
}

/// The current generation of a `state.json`: its file holds the committed items in its
/// first `bytes` bytes (a writer killed before its rename may have left more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct FileShape {
    generation: u64,
    context_len: u64,
    trail_len: u64,
    bytes: u64,
}

impl FileShape {
    fn shape(self) -> Shape {
        Shape {
            generation: self.generation,
            context: self.context_len,
            trail: self.trail_len,
        }
    }
}

/// The file of a context generation, beside `state.json`.
fn generation_file(generation: u64) -> String {
    format!("context-{generation}.jsonl")
}

/// The committed items of a generation: the complete lines of its file's first `bytes` bytes
/// (all of it for `None`).
fn read_items(dir: &Dir, generation: u64, bytes: Option<u64>) -> Result<Vec<Vec<u8>>, StoreError> {
    let Some(mut data) = dir.read(&generation_file(generation))? else {
        return Ok(Vec::new());
    };
    if let Some(bytes) = bytes {
        data.truncate(usize::try_from(bytes).unwrap_or(usize::MAX));
    }
    let complete = match data.iter().rposition(|&b| b == b'\n') {
        Some(i) => &data[..=i],
        None => &[][..],
    };
    Ok(complete
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// Writes items into a generation's file after its first `keep` bytes (cutting whatever an
/// interrupted writer left beyond them) and syncs it; returns the file's new length.
fn write_items(dir: &Dir, generation: u64, keep: u64, items: &[String]) -> Result<u64, StoreError> {
    let name = generation_file(generation);
    let created = dir.stat(&name)?.is_none();
    let mut file = dir.open_append(&name)?;
    file.set_len(keep)?;
    let mut lines = items.join("\n");
    lines.push('\n');
    let len = fsutil::append_lines(&mut file, lines.as_bytes())?;
    if created {
        dir.sync()?;
    }
    Ok(len)
}

/// The log entries journaled in a `state.json`.
#[derive(Deserialize)]
struct Journal<'a> {
    #[serde(borrow, default)]
    log_owed: Vec<&'a RawValue>,
}

impl FileStore {
    /// Opens (and creates) the store directory: `file://DIR` or a plain path. Temporary files
    /// that killed writers left behind are removed here.
    pub async fn open(url_or_path: &str) -> Result<FileStore, StoreError> {
        let path = url_or_path.strip_prefix("file://").unwrap_or(url_or_path);
        if path.is_empty() {
            return Err(StoreError::InvalidInput(
                "file store needs a directory".to_string(),
            ));
        }
        let root = PathBuf::from(path);
        let tree = blocking(move || {
            let tree = Tree::open(&root)?;
            tree.sweep_temp_files()?;
            Ok(tree)
        })
        .await?;
        Ok(FileStore { tree })
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        self.tree.root()
    }
}

/// A relative path of segments.
fn rel(segments: &[&str]) -> String {
    segments
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("/")
}

fn tenant_base(tenant: &str) -> String {
    if tenant == SessionKey::DEFAULT {
        String::new()
    } else {
        rel(&["tenants", &sanitize_segment(tenant)])
    }
}

fn user_base(tenant_base: &str, user: &str) -> String {
    if user == SessionKey::DEFAULT {
        tenant_base.to_string()
    } else {
        rel(&[tenant_base, "users", &sanitize_segment(user)])
    }
}

/// Where one session's files live, relative to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Paths {
    /// `…/agents/<a>/context/<s>`: `state.json`, `key.json`, `.lock`.
    context_dir: String,
    /// `…/agents/<a>/sessions`.
    log_dir: String,
    /// `<s>.log.jsonl`.
    log_name: String,
}

fn paths(key: &SessionKey) -> Paths {
    let agent_dir = rel(&[
        &user_base(&tenant_base(key.tenant()), key.user()),
        "agents",
        &sanitize_segment(key.agent()),
    ]);
    let session = sanitize_segment(key.session());
    Paths {
        context_dir: rel(&[&agent_dir, "context", &session]),
        log_dir: rel(&[&agent_dir, "sessions"]),
        log_name: format!("{session}.log.jsonl"),
    }
}

/// A session's directories, opened for one operation.
struct Session {
    /// `None` when nothing was ever saved or appended.
    context: Option<Dir>,
    /// `None` when nothing was ever appended.
    log: Option<Dir>,
    paths: Paths,
}

impl Session {
    /// Opens what exists of a session's directories.
    fn open(tree: &Tree, paths: Paths) -> Result<Session, StoreError> {
        Ok(Session {
            context: tree.dir(&paths.context_dir)?,
            log: tree.dir(&paths.log_dir)?,
            paths,
        })
    }

    /// Opens a session's directories, creating them, and takes its lock.
    fn create_locked(
        tree: &Tree,
        paths: Paths,
        key: &SessionKey,
    ) -> Result<(Session, std::fs::File), StoreError> {
        let context = tree.create_dir(&paths.context_dir)?;
        let lock = context.lock(LOCK_FILE)?;
        ensure_key_file(&context, key)?;
        let log = tree.create_dir(&paths.log_dir)?;
        Ok((
            Session {
                context: Some(context),
                log: Some(log),
                paths,
            },
            lock,
        ))
    }

    /// The head of `state.json`, if there is one.
    fn head(&self) -> Result<Option<Head>, StoreError> {
        match &self.context {
            Some(dir) => read_head(dir),
            None => Ok(None),
        }
    }

    /// The current generation of the stored state: `None` without a state, `Some(None)` for
    /// a state written whole.
    fn shape(&self) -> Result<Option<Option<FileShape>>, StoreError> {
        let Some(dir) = &self.context else {
            return Ok(None);
        };
        let Some(bytes) = dir.read(STATE_FILE)? else {
            return Ok(None);
        };
        let file: StateFile<'_> = serde_json::from_slice(&bytes)
            .map_err(|err| StoreError::Corrupt(format!("{}: {err}", self.shown_state())))?;
        Ok(Some(file.context))
    }

    /// The last complete log entry's sequence number (0 for no log).
    fn last_seq(&self) -> Result<u64, StoreError> {
        let Some(dir) = &self.log else {
            return Ok(0);
        };
        let Some(mut file) = dir.open_read(&self.paths.log_name)? else {
            return Ok(0);
        };
        let lines = fsutil::tail_lines(&mut file, 1, |_| true)?;
        match lines.first() {
            Some(line) => Ok(parse_entry(line)?.seq),
            None => Ok(0),
        }
    }

    /// Appends whatever the last commit journaled but the log never received; returns the log
    /// length. The caller holds the session lock.
    fn settle(&self) -> Result<u64, StoreError> {
        let last = self.last_seq()?;
        let Some(through) = self.head()?.and_then(|head| head.log_through) else {
            return Ok(last);
        };
        if through <= last {
            return Ok(last);
        }
        let (Some(context), Some(log)) = (&self.context, &self.log) else {
            return Err(StoreError::Corrupt(format!(
                "{}: a journal without its directories",
                self.paths.context_dir
            )));
        };
        let bytes = context
            .read(STATE_FILE)?
            .ok_or_else(|| StoreError::Corrupt(format!("{}: vanished", self.shown_state())))?;
        let journal: Journal<'_> = serde_json::from_slice(&bytes)
            .map_err(|err| StoreError::Corrupt(format!("{}: {err}", self.shown_state())))?;
        let mut lines = String::new();
        let mut next = last + 1;
        for raw in journal.log_owed {
            let entry = parse_entry(raw.get().as_bytes())?;
            if entry.seq <= last {
                continue;
            }
            if entry.seq != next {
                return Err(StoreError::Corrupt(format!(
                    "{}: the log ends at {last} but the journal continues at {}",
                    self.shown_state(),
                    entry.seq
                )));
            }
            lines.push_str(raw.get());
            lines.push('\n');
            next += 1;
        }
        if next - 1 != through {
            return Err(StoreError::Corrupt(format!(
                "{}: the journal promises entries up to {through} but holds up to {}",
                self.shown_state(),
                next - 1
            )));
        }
        log.append_lines(&self.paths.log_name, lines.as_bytes())?;
        Ok(through)
    }

    /// [`settle`](Self::settle) for readers, who do not hold the lock: a look at the head
    /// first, and the lock only when the log is behind (after a writer was killed between its
    /// two writes, or while a writer is between them — then the lock waits for it).
    fn settle_for_read(&self, tree: &Tree) -> Result<(), StoreError> {
        let Some(through) = self.head()?.and_then(|head| head.log_through) else {
            return Ok(());
        };
        if through <= self.last_seq()? {
            return Ok(());
        }
        let Some(context) = &self.context else {
            return Ok(());
        };
        let _lock = context.lock(LOCK_FILE)?;
        // The log directory may not exist yet when a first commit was cut short.
        let session = Session {
            context: tree.dir(&self.paths.context_dir)?,
            log: Some(tree.create_dir(&self.paths.log_dir)?),
            paths: self.paths.clone(),
        };
        session.settle().map(|_| ())
    }

    fn shown_state(&self) -> String {
        format!("{}/{STATE_FILE}", self.paths.context_dir)
    }

    fn read_log(&self) -> Result<Vec<LogEntry>, StoreError> {
        let Some(dir) = &self.log else {
            return Ok(Vec::new());
        };
        let Some(bytes) = dir.read(&self.paths.log_name)? else {
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
}

/// Writes `key.json` the first time a session is touched.
fn ensure_key_file(context: &Dir, key: &SessionKey) -> Result<(), StoreError> {
    if context.stat(KEY_FILE)?.is_some() {
        return Ok(());
    }
    let body = serde_json::to_vec(&KeyFile {
        key: key.clone(),
        created_at_ms: now_ms(),
    })
    .map_err(|err| StoreError::backend_caused("file", err))?;
    context.create_new(KEY_FILE, &body)?;
    Ok(())
}

/// The head of a `state.json`: `{"version":N,` optionally followed by `"log_through":M,`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    version: u64,
    log_through: Option<u64>,
}

/// Reads only the first bytes of `state.json`.
fn read_head(dir: &Dir) -> Result<Option<Head>, StoreError> {
    use std::io::Read;
    let Some(file) = dir.open_read(STATE_FILE)? else {
        return Ok(None);
    };
    let mut head = Vec::with_capacity(96);
    file.take(96).read_to_end(&mut head)?;
    let text = std::str::from_utf8(&head).unwrap_or_default();
    parse_head(text)
        .map(Some)
        .ok_or_else(|| StoreError::Corrupt(format!("{}: no version header", STATE_FILE)))
}

fn parse_head(text: &str) -> Option<Head> {
    let rest = text.strip_prefix("{\"version\":")?;
    let (version, rest) = rest.split_once(',')?;
    let log_through = match rest.strip_prefix("\"log_through\":") {
        Some(rest) => Some(rest.split_once(',')?.0.parse().ok()?),
        None => None,
    };
    Some(Head {
        version: version.parse().ok()?,
        log_through,
    })
}

/// Every session of a tenant base: directories that hold a `key.json` naming a session whose
/// own paths lead back to that directory. Links are passed over, never followed.
fn sessions_under(tree: &Tree, tenant_base: &str) -> Result<Vec<(SessionKey, i64)>, StoreError> {
    let Some(base) = tree.dir(tenant_base)? else {
        return Ok(Vec::new());
    };
    let mut user_bases = vec![tenant_base.to_string()];
    if let Some(users) = base.subdir("users").or_else(skip_link)? {
        for user in users.entries()? {
            if user.kind == Kind::Dir {
                user_bases.push(rel(&[tenant_base, "users", &user.name]));
            }
        }
    }
    let mut out = Vec::new();
    for user_base in user_bases {
        let Some(agents) = tree.dir(&rel(&[&user_base, "agents"])).or_else(skip_link)? else {
            continue;
        };
        for agent in agents.entries()? {
            if agent.kind != Kind::Dir {
                continue;
            }
            let contexts_rel = rel(&[&user_base, "agents", &agent.name, "context"]);
            let Some(contexts) = tree.dir(&contexts_rel).or_else(skip_link)? else {
                continue;
            };
            for context in contexts.entries()? {
                if context.kind != Kind::Dir {
                    continue;
                }
                let Some(dir) = contexts.subdir(&context.name).or_else(skip_link)? else {
                    continue;
                };
                let Some(bytes) = dir.read(KEY_FILE).or_else(skip_link)? else {
                    continue;
                };
                let Ok(file) = serde_json::from_slice::<KeyFile>(&bytes) else {
                    continue;
                };
                // A key file copied into another session's directory names another session.
                if paths(&file.key).context_dir != rel(&[&contexts_rel, &context.name]) {
                    continue;
                }
                out.push((file.key, file.created_at_ms));
            }
        }
    }
    Ok(out)
}

/// Enumerations pass over links (and what is not a file or directory) as if absent.
fn skip_link<T>(err: StoreError) -> Result<Option<T>, StoreError> {
    match err {
        StoreError::Forbidden(_) => Ok(None),
        other => Err(other),
    }
}

fn info(tree: &Tree, key: SessionKey, created_at_ms: i64) -> Result<SessionInfo, StoreError> {
    let session = Session::open(tree, paths(&key))?;
    session.settle_for_read(tree)?;
    let session = Session::open(tree, paths(&key))?;
    let state_meta = match &session.context {
        Some(dir) => dir.stat(STATE_FILE)?,
        None => None,
    };
    let log_meta = match &session.log {
        Some(dir) => dir.stat(&session.paths.log_name)?,
        None => None,
    };
    let updated = [
        state_meta.map(|m| m.modified_ms),
        log_meta.map(|m| m.modified_ms),
        Some(created_at_ms),
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(created_at_ms);
    Ok(SessionInfo {
        version: session.head()?.map(|head| head.version),
        log_len: session.last_seq()?,
        created_at_ms,
        updated_at_ms: updated,
        key,
    })
}

fn all_tenant_bases(tree: &Tree) -> Result<Vec<String>, StoreError> {
    let mut bases = vec![String::new()];
    if let Some(tenants) = tree.dir("tenants").or_else(skip_link)? {
        for tenant in tenants.entries()? {
            if tenant.kind == Kind::Dir {
                bases.push(rel(&["tenants", &tenant.name]));
            }
        }
    }
    Ok(bases)
}

fn remove_session(tree: &Tree, paths: &Paths) -> Result<bool, StoreError> {
    let Some(context) = tree.dir(&paths.context_dir)? else {
        // No state and no key: at most a log written without them.
        return match tree.dir(&paths.log_dir)? {
            Some(log) => log.remove_file(&paths.log_name),
            None => Ok(false),
        };
    };
    let _lock = context.lock(LOCK_FILE)?;
    // The state (and its journal) goes first: a crash part-way leaves a log without a state,
    // never a journal promising entries of a log that is gone.
    let mut existed = context.remove_file(STATE_FILE)?;
    if let Some(log) = tree.dir(&paths.log_dir)? {
        existed |= log.remove_file(&paths.log_name)?;
    }
    existed |= context.remove_file(KEY_FILE)?;
    for entry in context.entries()? {
        if entry.kind == Kind::File
            && entry.name.starts_with("context-")
            && entry.name.ends_with(".jsonl")
        {
            context.remove_file(&entry.name)?;
        }
    }
    // The lock file goes last, with the directory; another process may still hold a handle to
    // it, which is harmless because the session no longer has state.
    context.remove_file(LOCK_FILE)?;
    if let Some((parent, name)) = paths.context_dir.rsplit_once('/')
        && let Some(parent) = tree.dir(parent)?
    {
        parent.remove_dir(name)?;
    }
    Ok(existed)
}

/// The `state.json` body: the version leads the file so `list` can read it without parsing
/// the state, then the journal's end, the state, and the journaled log entries.
fn state_body(
    version: u64,
    state_json: &str,
    owed: &[String],
    first_seq: u64,
    shape: Option<FileShape>,
) -> String {
    let saved_at = now_ms();
    let context = shape
        .and_then(|shape| serde_json::to_string(&shape).ok())
        .map(|shape| format!("\"context\":{shape},"))
        .unwrap_or_default();
    if owed.is_empty() {
        return format!(
            "{{\"version\":{version},\"saved_at_ms\":{saved_at},{context}\"state\":{state_json}}}"
        );
    }
    let through = first_seq + owed.len() as u64 - 1;
    format!(
        "{{\"version\":{version},\"log_through\":{through},\"saved_at_ms\":{saved_at},{context}\"state\":{state_json},\"log_owed\":[{}]}}",
        owed.join(",")
    )
}

#[async_trait]
impl SessionStore for FileStore {
    fn backend(&self) -> &'static str {
        "file"
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<Versioned>, StoreError> {
        let tree = self.tree.clone();
        let p = paths(key);
        blocking(move || {
            let Some(dir) = tree.dir(&p.context_dir)? else {
                return Ok(None);
            };
            let Some(bytes) = dir.read(STATE_FILE)? else {
                return Ok(None);
            };
            let file: StateFile<'_> = serde_json::from_slice(&bytes).map_err(|err| {
                StoreError::Corrupt(format!("{}/{STATE_FILE}: {err}", p.context_dir))
            })?;
            let Some(shape) = file.context else {
                // A state written whole, before generations.
                return Ok(Some(Versioned {
                    state: AgentState::from_json(file.state.get())?,
                    version: file.version,
                    generation: None,
                }));
            };
            let items = read_items(&dir, shape.generation, Some(shape.bytes))?;
            Ok(Some(Versioned {
                state: assemble(file.state.get(), &items)?,
                version: file.version,
                generation: Some(shape.generation),
            }))
        })
        .await
    }

    async fn append_checked(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<AppendOutcome, StoreError> {
        let tree = self.tree.clone();
        let key = key.clone();
        let messages = messages.to_vec();
        blocking(move || {
            let (session, _lock) = Session::create_locked(&tree, paths(&key), &key)?;
            let first_seq = session.settle()? + 1;
            let now = now_ms();
            let mut lines = String::new();
            for (i, message) in messages.iter().enumerate() {
                lines.push_str(&entry_json(first_seq + i as u64, now, message)?);
                lines.push('\n');
            }
            if let Some(log) = &session.log {
                log.append_lines(&session.paths.log_name, lines.as_bytes())?;
            }
            Ok(AppendOutcome {
                first_seq,
                last_seq: first_seq + messages.len() as u64 - 1,
            })
        })
        .await
    }

    fn commits_atomically(&self) -> bool {
        true
    }

    fn saves_incrementally(&self) -> bool {
        true
    }

    async fn commit(&self, key: &SessionKey, commit: Commit<'_>) -> Result<Committed, StoreError> {
        let tree = self.tree.clone();
        let key = key.clone();
        let (write, expected) = (commit.write, commit.expected);
        let split = split(commit.state)?;
        let messages = commit.messages.to_vec();
        blocking(move || {
            let (session, _lock) = Session::create_locked(&tree, paths(&key), &key)?;
            let last = session.settle()?;
            let actual = session.head()?.map(|head| head.version);
            if actual != expected {
                return Err(StoreError::Conflict { expected, actual });
            }
            let Some(context) = &session.context else {
                return Err(StoreError::backend("file", "session directory missing"));
            };
            let before = match actual {
                Some(_) => session.shape()?,
                None => None,
            };
            let (after, fresh) = next_shape(
                before.map(|b| b.map_or(Shape::default(), FileShape::shape)),
                write,
                &split,
            )?;
            let keep = match (fresh, before) {
                (false, Some(Some(shape))) => shape.bytes,
                _ => 0,
            };
            // The items first, beyond what the current state counts: until the rename below
            // commits, readers and the next writer ignore them.
            let bytes = if split.items.is_empty() && fresh {
                0
            } else if split.items.is_empty() {
                keep
            } else {
                write_items(context, after.generation, keep, &split.items)?
            };
            let shape = FileShape {
                generation: after.generation,
                context_len: after.context,
                trail_len: after.trail,
                bytes,
            };
            let version = actual.unwrap_or(0) + 1;
            let now = now_ms();
            let first_seq = last + 1;
            let owed = messages
                .iter()
                .enumerate()
                .map(|(i, message)| entry_json(first_seq + i as u64, now, message))
                .collect::<Result<Vec<_>, _>>()?;
            let body = state_body(version, &split.head, &owed, first_seq, Some(shape));
            // The commit: the state, its generation's length and its journaled log entries
            // in one rename.
            context.replace(STATE_FILE, body.as_bytes())?;
            if owed.is_empty() {
                return Ok(Committed {
                    version,
                    appended: None,
                });
            }
            // Committed already. Should this append fail (or the process die first), the
            // next reader or writer of the session appends the journaled entries instead, so
            // the error changes nothing the caller could act on.
            if let Some(log) = &session.log {
                let mut lines = owed.join("\n");
                lines.push('\n');
                let _ = log.append_lines(&session.paths.log_name, lines.as_bytes());
            }
            Ok(Committed {
                version,
                appended: Some(AppendOutcome {
                    first_seq,
                    last_seq: first_seq + owed.len() as u64 - 1,
                }),
            })
        })
        .await
    }

    async fn generation_context(
        &self,
        key: &SessionKey,
        generation: u64,
    ) -> Result<Vec<Message>, StoreError> {
        let tree = self.tree.clone();
        let p = paths(key);
        blocking(move || {
            let session = Session::open(&tree, p)?;
            let Some(dir) = &session.context else {
                return Ok(Vec::new());
            };
            // The current generation's file may hold uncommitted items past its length.
            let bytes = session
                .shape()?
                .flatten()
                .filter(|shape| shape.generation == generation)
                .map(|shape| shape.bytes);
            messages_of(&read_items(dir, generation, bytes)?)
        })
        .await
    }

    async fn list(&self, filter: &SessionFilter) -> Result<Vec<SessionInfo>, StoreError> {
        filter.validate()?;
        let base = tenant_base(&filter.tenant);
        let filter = filter.clone();
        let tree = self.tree.clone();
        let mut out = blocking(move || {
            let mut out = Vec::new();
            for (key, created) in sessions_under(&tree, &base)? {
                if filter.matches(&key) {
                    out.push(info(&tree, key, created)?);
                }
            }
            Ok(out)
        })
        .await?;
        sort_sessions(&mut out);
        Ok(out)
    }

    async fn tenants(&self) -> Result<Vec<TenantInfo>, StoreError> {
        let tree = self.tree.clone();
        blocking(move || {
            // Each session's time as `list` reports it (its files' times, journal settled).
            let mut sessions = Vec::new();
            for base in all_tenant_bases(&tree)? {
                for (key, created) in sessions_under(&tree, &base)? {
                    let info = info(&tree, key, created)?;
                    sessions.push((info.key, info.updated_at_ms));
                }
            }
            Ok(tally(
                sessions
                    .iter()
                    .map(|(key, updated)| (key.tenant(), *updated)),
            ))
        })
        .await
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        let tree = self.tree.clone();
        let p = paths(key);
        blocking(move || remove_session(&tree, &p)).await
    }

    async fn history(
        &self,
        key: &SessionKey,
        page: HistoryPage,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let tree = self.tree.clone();
        let p = paths(key);
        blocking(move || {
            Session::open(&tree, p.clone())?.settle_for_read(&tree)?;
            let session = Session::open(&tree, p)?;
            let Some(dir) = &session.log else {
                return Ok(Vec::new());
            };
            let Some(mut file) = dir.open_read(&session.paths.log_name)? else {
                return Ok(Vec::new());
            };
            let before = page.before_seq.unwrap_or(u64::MAX);
            let lines = fsutil::tail_lines(&mut file, page.last, |line| {
                parse_entry(line).is_ok_and(|e| e.seq < before)
            })?;
            lines.iter().map(|line| parse_entry(line)).collect()
        })
        .await
    }

    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        let terms = query.terms()?;
        let tree = self.tree.clone();
        let query = query.clone();
        blocking(move || {
            let keys: Vec<SessionKey> = match &query.scope {
                SearchScope::Session(key) => vec![key.clone()],
                SearchScope::Tenant(tenant) => sessions_under(&tree, &tenant_base(tenant))?
                    .into_iter()
                    .map(|(key, _)| key)
                    .filter(|key| query.scope.contains(key))
                    .collect(),
            };
            let mut entries = Vec::new();
            for key in keys {
                let p = paths(&key);
                Session::open(&tree, p.clone())?.settle_for_read(&tree)?;
                for entry in Session::open(&tree, p)?.read_log()? {
                    entries.push((key.clone(), entry));
                }
            }
            Ok(rank_entries(&query, &terms, entries))
        })
        .await
    }

    async fn purge_before(&self, tenant: Option<&str>, cutoff_ms: i64) -> Result<u64, StoreError> {
        crate::session::check_tenant(tenant)?;
        let tree = self.tree.clone();
        let bases = tenant.map(|tenant| vec![tenant_base(tenant)]);
        blocking(move || {
            let mut removed = 0;
            let bases = match bases {
                Some(bases) => bases,
                None => all_tenant_bases(&tree)?,
            };
            for base in bases {
                for (key, created) in sessions_under(&tree, &base)? {
                    let p = paths(&key);
                    if info(&tree, key, created)?.updated_at_ms < cutoff_ms
                        && remove_session(&tree, &p)?
                    {
                        removed += 1;
                    }
                }
            }
            Ok(removed)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_carry_the_version_and_the_journal_end() {
        assert_eq!(
            parse_head("{\"version\":7,\"saved_at_ms\":1,\"state\":{}}"),
            Some(Head {
                version: 7,
                log_through: None
            })
        );
        assert_eq!(
            parse_head("{\"version\":8,\"log_through\":42,\"saved_at_ms\":1"),
            Some(Head {
                version: 8,
                log_through: Some(42)
            })
        );
        let body = state_body(
            3,
            "{}",
            &["{\"seq\":5}".into(), "{\"seq\":6}".into()],
            5,
            None,
        );
        assert_eq!(
            parse_head(&body),
            Some(Head {
                version: 3,
                log_through: Some(6)
            })
        );
        for bad in ["", "{\"state\":{}}", "{\"version\":x,", "{\"version\":1"] {
            assert_eq!(parse_head(bad), None, "{bad}");
        }
    }
}
