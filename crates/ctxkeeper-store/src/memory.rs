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
//! survive. No symbolic link below the root is followed: a `MEMORY.md`, a `memory/` directory
//! or a daily file that is a link is refused with
//! [`StoreError::Forbidden`](crate::StoreError::Forbidden) by reads and appends, and passed
//! over (never read) when the daily files are listed.
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

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::StoreError;
use crate::archive::sanitize_segment;
use crate::fsutil::{Dir, Kind, Tree, blocking};
use crate::state::{SessionKey, validate_identifier};
use crate::text::{Ranker, query_terms, snippet};
use crate::time::{date_string, now_ms};

/// The long-term memory file.
pub const MEMORY_FILE: &str = "MEMORY.md";

/// Today's date (UTC) as the daily files name it: `YYYY-MM-DD`.
pub fn today() -> String {
    date_string(now_ms())
}

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
    tree: Tree,
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

/// The directory of a memory path relative to the scope's directory (`""` or `memory`) and
/// the file's name.
fn split_path(path: &str) -> (&str, &str) {
    match path.rsplit_once('/') {
        Some((dir, name)) => (dir, name),
        None => ("", path),
    }
}

/// The scope's subdirectory `sub` (`""` is the scope's own), or `None` when missing.
fn subdir(dir: Dir, sub: &str) -> Result<Option<Dir>, StoreError> {
    if sub.is_empty() {
        Ok(Some(dir))
    } else {
        dir.subdir(sub)
    }
}

/// Appends text as whole lines to `name` in `dir`, adding a newline first if the file does not
/// end with one (a hand edit), then fsyncs.
fn append_text(dir: &Dir, name: &str, text: &str) -> Result<(), StoreError> {
    let _lock = dir.lock(".memory.lock")?;
    let created = dir.stat(name)?.is_none();
    let mut file = dir.open_append(name)?;
    write_appended(&mut file, text)?;
    if created {
        dir.sync()?;
    }
    Ok(())
}

fn write_appended(file: &mut File, text: &str) -> Result<(), StoreError> {
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
        Ok(LongTermMemory {
            tree: Tree::open(root.as_ref())?,
        })
    }

    /// The scope's directory relative to the root.
    fn dir(&self, scope: &MemoryScope) -> String {
        let mut dir = Vec::new();
        if scope.tenant != SessionKey::DEFAULT {
            dir.push("tenants".to_string());
            dir.push(sanitize_segment(&scope.tenant));
        }
        if scope.user != SessionKey::DEFAULT {
            dir.push("users".to_string());
            dir.push(sanitize_segment(&scope.user));
        }
        dir.join("/")
    }

    /// Appends `text` to the memory file `path` (checked) of a scope.
    async fn append(&self, scope: &MemoryScope, path: &str, text: &str) -> Result<(), StoreError> {
        let (sub, name) = split_path(path);
        let rel = match sub {
            "" => self.dir(scope),
            sub => format!("{}/{sub}", self.dir(scope)),
        };
        let name = name.to_string();
        let text = text.to_string();
        let tree = self.tree.clone();
        blocking(move || append_text(&tree.create_dir(&rel)?, &name, &text)).await
    }

    /// The bytes of the memory file `path` (checked) of a scope, or `None`.
    fn read_file(tree: &Tree, rel: &str, path: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let (sub, name) = split_path(path);
        let Some(dir) = tree.dir(rel)? else {
            return Ok(None);
        };
        match subdir(dir, sub)? {
            Some(dir) => dir.read(name),
            None => Ok(None),
        }
    }

    /// Appends to `MEMORY.md`.
    pub async fn append_memory(
        &self,
        scope: &MemoryScope,
        text: &str,
    ) -> Result<String, StoreError> {
        self.append(scope, MEMORY_FILE, text).await?;
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
        self.append(scope, &name, text).await?;
        Ok(name)
    }

    /// The pre-compaction flush: appends the extracted facts to today's daily file as a
    /// timestamped list. Returns the file written, or `None` when there were no facts.
    pub async fn flush(
        &self,
        scope: &MemoryScope,
        facts: &[String],
    ) -> Result<Option<String>, StoreError> {
        self.flush_from(scope, None, facts).await
    }

    /// [`flush`](Self::flush) for a compaction of `session`, which the list's heading names
    /// (a scope's memory is shared by its sessions).
    pub async fn flush_from(
        &self,
        scope: &MemoryScope,
        session: Option<&str>,
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
        let of = session.map_or(String::new(), |s| {
            format!(
                " of session {}",
                ctxkeeper_core::untrusted::one_line(s, 200)
            )
        });
        let mut text = format!(
            "\n## {:02}:{:02} UTC — before compaction{of}\n",
            minutes / 60,
            minutes % 60
        );
        for fact in facts {
            text.push_str("- ");
            // A fact may quote tool output: one line, so it can never open a heading here.
            text.push_str(&ctxkeeper_core::untrusted::one_line(fact, usize::MAX));
            text.push('\n');
        }
        self.append_daily(scope, &date_string(now), &text)
            .await
            .map(Some)
    }

    /// Appends the summary of what a compaction removed from `session` to today's daily file
    /// (CowAgent writes its trimmed turns' summary there), keeping its structure: under a
    /// timestamped heading, each non-empty section as a sub-heading (`### Title`) and its
    /// lines as a Markdown list (a line that is already a list item stays one). A section's
    /// text may quote tool output, so none of its lines can open a heading. Returns the file
    /// written, or `None` when every section was empty.
    pub async fn record_summary(
        &self,
        scope: &MemoryScope,
        session: Option<&str>,
        sections: &[(String, String)],
    ) -> Result<Option<String>, StoreError> {
        use ctxkeeper_core::untrusted::{neutralise, one_line};
        let mut body = String::new();
        for (title, text) in sections {
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim_end)
                .filter(|line| !line.trim().is_empty())
                .collect();
            if lines.is_empty() {
                continue;
            }
            body.push_str(&format!("\n### {}\n", one_line(title, 200)));
            for line in lines {
                let item = line.trim_start();
                let is_item = ["- ", "* ", "+ "].iter().any(|b| item.starts_with(b))
                    || item.split_once(". ").is_some_and(|(n, _)| {
                        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
                    });
                if !is_item {
                    body.push_str("- ");
                }
                body.push_str(&neutralise(line));
                body.push('\n');
            }
        }
        if body.is_empty() {
            return Ok(None);
        }
        let now = now_ms();
        let minutes = now.div_euclid(60_000).rem_euclid(1_440);
        let from = session.map_or(String::new(), |s| {
            format!(" from session {}", one_line(s, 200))
        });
        let text = format!(
            "\n## {:02}:{:02} UTC — summary of turns compacted{from}\n{body}",
            minutes / 60,
            minutes % 60
        );
        self.append_daily(scope, &date_string(now), &text)
            .await
            .map(Some)
    }

    /// The memory files of a scope: `MEMORY.md` first, then daily files newest first.
    pub async fn files(&self, scope: &MemoryScope) -> Result<Vec<String>, StoreError> {
        let rel = self.dir(scope);
        let tree = self.tree.clone();
        blocking(move || {
            let mut out = Vec::new();
            let Some(dir) = tree.dir(&rel)? else {
                return Ok(out);
            };
            // Opened, not only looked at: a `MEMORY.md` that is a link is refused here.
            if dir.open_read(MEMORY_FILE)?.is_some() {
                out.push(MEMORY_FILE.to_string());
            }
            let mut daily: Vec<String> = match dir.subdir("memory")? {
                Some(memory) => memory
                    .entries()?
                    .into_iter()
                    .filter(|e| e.kind == Kind::File)
                    .map(|e| format!("memory/{}", e.name))
                    .filter(|p| check_path(p).is_ok())
                    .collect(),
                None => Vec::new(),
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
        let rel = self.dir(scope);
        let shown = path.to_string();
        let tree = self.tree.clone();
        blocking(move || {
            let bytes = Self::read_file(&tree, &rel, &shown)?
                .ok_or_else(|| StoreError::NotFound(format!("memory file {shown}")))?;
            let text = String::from_utf8(bytes).map_err(|_| {
                StoreError::Corrupt(format!("memory file {shown} is not UTF-8 text"))
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
        let rel = self.dir(scope);
        let tree = self.tree.clone();
        blocking(move || {
            let mut ranker = Ranker::new(terms.clone());
            let mut matched = Vec::new();
            for path in files {
                // A file removed since it was listed is skipped; a link is refused.
                let Some(bytes) = Self::read_file(&tree, &rel, &path)? else {
                    continue;
                };
                let text = String::from_utf8_lossy(&bytes);
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
