//! Long-term memory: `MEMORY.md` plus daily files `memory/YYYY-MM-DD.md` in a workspace
//! directory, one set per tenant and user (never a shared default namespace across users).
//!
//! ```text
//! ROOT/MEMORY.md, ROOT/memory/2026-11-22.md                 default tenant, default user
//! ROOT/users/<user>/MEMORY.md, …/memory/…                   other users
//! ROOT/tenants/<tenant>/[users/<user>/]MEMORY.md, …         other tenants
//! ```
//!
//! [`LongTermMemory::flush`] is the pre-compaction hook: the facts a summarizer extracted from
//! the prefix about to be compacted are appended to today's daily file (nothing is written when
//! it found none). [`memory_search`](LongTermMemory::memory_search) ranks paragraphs by BM25 over
//! all memory files; [`memory_get`](LongTermMemory::memory_get) reads a file or a line range.
//! Appends are fsync'd under a file lock and never rewrite what is there, so hand edits
//! survive.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ctxkeeper_store::memory::{LongTermMemory, MemoryScope};
//!
//! let dir = tempfile::tempdir()?;
//! let memory = LongTermMemory::new(dir.path())?;
//! let alice = MemoryScope::new("acme", "alice")?;
//! memory.append_memory(&alice, "Alice prefers aisle seats.").await?;
//! memory.flush(&alice, &["Booking ABC123 is for 3 June.".to_string()]).await?;
//! let hits = memory.memory_search(&alice, "booking june", 5).await?;
//! assert!(hits[0].path.starts_with("memory/"));
//! let bob = MemoryScope::new("acme", "bob")?;
//! assert!(memory.memory_search(&bob, "booking", 5).await?.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::StoreError;
use crate::archive::sanitize_segment;
use crate::fsutil::{self, blocking};
use crate::state::{SessionKey, validate_identifier};
use crate::text::{Ranker, query_terms, snippet};
use crate::time::{date_string, now_ms};

/// The long-term memory file.
pub const MEMORY_FILE: &str = "MEMORY.md";

/// Whose memory: a tenant and a user.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemoryScope {
    tenant: String,
    user: String,
}

impl MemoryScope {
    pub fn new(
        tenant: impl Into<String>,
        user: impl Into<String>,
    ) -> Result<MemoryScope, StoreError> {
        let scope = MemoryScope {
            tenant: tenant.into(),
            user: user.into(),
        };
        validate_identifier("tenant", &scope.tenant)?;
        validate_identifier("user", &scope.user)?;
        Ok(scope)
    }

    /// The memory of a session's tenant and user.
    pub fn of(key: &SessionKey) -> MemoryScope {
        MemoryScope {
            tenant: key.tenant().to_string(),
            user: key.user().to_string(),
        }
    }
}

/// A ranked paragraph of a memory file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryHit {
    /// `MEMORY.md` or `memory/YYYY-MM-DD.md`.
    pub path: String,
    /// 1-based first line of the paragraph.
    pub line: u64,
    pub score: f64,
    pub snippet: String,
}

/// Text read from a memory file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryText {
    pub path: String,
    /// 1-based number of the first returned line.
    pub from_line: u64,
    pub text: String,
    pub total_lines: u64,
}

/// Long-term memory files in a workspace directory.
#[derive(Debug, Clone)]
pub struct LongTermMemory {
    root: PathBuf,
}

/// Checks a memory path: `MEMORY.md` or `memory/YYYY-MM-DD.md`.
fn check_path(path: &str) -> Result<(), StoreError> {
    if path == MEMORY_FILE {
        return Ok(());
    }
    let ok = path
        .strip_prefix("memory/")
        .and_then(|rest| rest.strip_suffix(".md"))
        .is_some_and(is_date);
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidInput(format!(
            "not a memory file: {:?}",
            path.chars().take(80).collect::<String>()
        )))
    }
}

fn is_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// Appends text as whole lines, adding a newline first if the file does not end with one (a
/// hand edit), then fsyncs.
fn append_text(path: &Path, text: &str) -> Result<(), StoreError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let _lock = fsutil::lock_file(&path.with_file_name(".memory.lock"))?;
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let len = file.metadata()?.len();
    let mut out = String::new();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            out.push('\n');
        }
    }
    out.push_str(text);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    file.write_all(out.as_bytes())?;
    file.sync_data()?;
    Ok(())
}

impl LongTermMemory {
    /// Memory rooted at `root` (created if missing).
    pub fn new(root: impl AsRef<Path>) -> Result<LongTermMemory, StoreError> {
        fs::create_dir_all(root.as_ref())?;
        Ok(LongTermMemory {
            root: root.as_ref().to_path_buf(),
        })
    }

    fn dir(&self, scope: &MemoryScope) -> PathBuf {
        let mut dir = self.root.clone();
        if scope.tenant != SessionKey::DEFAULT {
            dir = dir.join("tenants").join(sanitize_segment(&scope.tenant));
        }
        if scope.user != SessionKey::DEFAULT {
            dir = dir.join("users").join(sanitize_segment(&scope.user));
        }
        dir
    }

    /// Appends to `MEMORY.md`.
    pub async fn append_memory(
        &self,
        scope: &MemoryScope,
        text: &str,
    ) -> Result<String, StoreError> {
        let path = self.dir(scope).join(MEMORY_FILE);
        let text = text.to_string();
        blocking(move || append_text(&path, &text)).await?;
        Ok(MEMORY_FILE.to_string())
    }

    /// Appends to the daily file of `date` (`YYYY-MM-DD`, UTC).
    pub async fn append_daily(
        &self,
        scope: &MemoryScope,
        date: &str,
        text: &str,
    ) -> Result<String, StoreError> {
        let name = format!("memory/{date}.md");
        check_path(&name)?;
        let path = self.dir(scope).join(&name);
        let text = text.to_string();
        blocking(move || append_text(&path, &text)).await?;
        Ok(name)
    }

    /// The pre-compaction flush: appends the extracted facts to today's daily file as a
    /// timestamped list. Returns the file written, or `None` when there were no facts.
    pub async fn flush(
        &self,
        scope: &MemoryScope,
        facts: &[String],
    ) -> Result<Option<String>, StoreError> {
        let facts: Vec<&str> = facts
            .iter()
            .map(|f| f.trim())
            .filter(|f| !f.is_empty())
            .collect();
        if facts.is_empty() {
            return Ok(None);
        }
        let now = now_ms();
        let minutes = now.div_euclid(60_000).rem_euclid(1_440);
        let mut text = format!(
            "\n## {:02}:{:02} UTC — before compaction\n",
            minutes / 60,
            minutes % 60
        );
        for fact in facts {
            text.push_str("- ");
            text.push_str(&fact.replace('\n', " "));
            text.push('\n');
        }
        self.append_daily(scope, &date_string(now), &text)
            .await
            .map(Some)
    }

    /// The memory files of a scope: `MEMORY.md` first, then daily files newest first.
    pub async fn files(&self, scope: &MemoryScope) -> Result<Vec<String>, StoreError> {
        let dir = self.dir(scope);
        blocking(move || {
            let mut out = Vec::new();
            if dir.join(MEMORY_FILE).is_file() {
                out.push(MEMORY_FILE.to_string());
            }
            let mut daily: Vec<String> = match fs::read_dir(dir.join("memory")) {
                Ok(entries) => entries
                    .flatten()
                    .filter_map(|e| e.file_name().to_str().map(|n| format!("memory/{n}")))
                    .filter(|p| check_path(p).is_ok())
                    .collect(),
                Err(_) => Vec::new(),
            };
            daily.sort_by(|a, b| b.cmp(a));
            out.extend(daily);
            Ok(out)
        })
        .await
    }

    /// Reads a memory file, or `lines` lines of it from `from_line` (1-based).
    pub async fn memory_get(
        &self,
        scope: &MemoryScope,
        path: &str,
        from_line: Option<u64>,
        lines: Option<u64>,
    ) -> Result<MemoryText, StoreError> {
        check_path(path)?;
        let full = self.dir(scope).join(path);
        let shown = path.to_string();
        blocking(move || {
            let text = fs::read_to_string(&full).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    StoreError::NotFound(format!("memory file {shown}"))
                }
                _ => e.into(),
            })?;
            let all: Vec<&str> = text.lines().collect();
            let from = from_line.unwrap_or(1).max(1);
            let take = lines.unwrap_or(u64::MAX);
            let selected: Vec<&str> = all
                .iter()
                .skip((from - 1) as usize)
                .take(take.min(all.len() as u64) as usize)
                .copied()
                .collect();
            Ok(MemoryText {
                path: shown,
                from_line: from,
                text: selected.join("\n"),
                total_lines: all.len() as u64,
            })
        })
        .await
    }

    /// Paragraphs of the scope's memory files ranked against a keyword query, best first.
    pub async fn memory_search(
        &self,
        scope: &MemoryScope,
        query: &str,
        limit: usize,
    ) -> Result<Vec<MemoryHit>, StoreError> {
        let terms = query_terms(query);
        if terms.is_empty() {
            return Err(StoreError::InvalidInput(
                "memory search query has no words".into(),
            ));
        }
        let files = self.files(scope).await?;
        let dir = self.dir(scope);
        blocking(move || {
            let mut ranker = Ranker::new(terms.clone());
            let mut matched = Vec::new();
            for path in files {
                let Ok(text) = fs::read_to_string(dir.join(&path)) else {
                    continue;
                };
                for (line, paragraph) in paragraphs(&text) {
                    if let Some(index) = ranker.add(&paragraph) {
                        matched.push((index, path.clone(), line, paragraph));
                    }
                }
            }
            let mut hits: Vec<MemoryHit> = matched
                .into_iter()
                .map(|(index, path, line, paragraph)| MemoryHit {
                    score: ranker.score(index),
                    snippet: snippet(&paragraph, &terms, 240),
                    path,
                    line,
                })
                .collect();
            // Ties go to the newer file (daily files sort newest first by name).
            hits.sort_by(|a, b| {
                b.score
                    .total_cmp(&a.score)
                    .then_with(|| b.path.cmp(&a.path))
                    .then_with(|| a.line.cmp(&b.line))
            });
            hits.truncate(limit);
            Ok(hits)
        })
        .await
    }
}

/// Blank-line separated paragraphs with their 1-based first line.
fn paragraphs(text: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut current: Option<(u64, String)> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            if let Some(p) = current.take() {
                out.push(p);
            }
            continue;
        }
        match &mut current {
            Some((_, text)) => {
                text.push('\n');
                text.push_str(line);
            }
            None => current = Some((i as u64 + 1, line.to_string())),
        }
    }
    out.extend(current);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_paths_are_checked() {
        assert!(check_path("MEMORY.md").is_ok());
        assert!(check_path("memory/2026-11-22.md").is_ok());
        for bad in [
            "../MEMORY.md",
            "memory/../../x.md",
            "memory/2026-1-22.md",
            "/etc/passwd",
            "memory/x.md",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paragraphs_carry_their_first_line() {
        let p = paragraphs("# Title\n\nfirst para\ncontinues\n\n\nsecond\n");
        assert_eq!(
            p,
            vec![
                (1, "# Title".into()),
                (3, "first para\ncontinues".into()),
                (7, "second".into())
            ]
        );
    }
}
