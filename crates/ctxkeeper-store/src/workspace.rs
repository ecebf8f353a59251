//! [`LocalWorkspace`]: the archive in a local directory, in the `000` layout.
//!
//! ```text
//! ROOT/                                  the default tenant
//!   data/{sha256}.{ext}                  binary data by content hash
//!   sessions/{session}/context.jsonl     offloaded messages, one JSON message per line
//!   sessions/{session}/tool_result-{id}.txt, tool_result-{id}(1).txt, …
//!   tenants/{tenant}/…                   every other tenant, same layout
//! ```
//!
//! Whole files are written to a temporary file, fsync'd and then linked or renamed into place,
//! so a reader or a crash sees a complete item or none; temporary files a killed writer left
//! behind are swept when the workspace is opened. `context.jsonl` grows by fsync'd appends
//! under a file lock (never read-then-rewrite); its line count is cached per file, so an
//! offload costs O(offloaded messages).
//!
//! No symbolic link below the root is ever followed, for reads, listings, greps and writes
//! alike: a session directory, an item or a tenant directory that is a link is refused with
//! [`StoreError::Forbidden`](crate::StoreError::Forbidden) (listings pass over linked items),
//! so a link planted in the workspace can reach neither the rest of the file system nor
//! another tenant's directory.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_store::archive::{ArchiveScope, Offloader};
//! use ctxkeeper_store::LocalWorkspace;
//!
//! let dir = tempfile::tempdir()?;
//! let workspace = LocalWorkspace::new(dir.path())?;
//! let scope = ArchiveScope::session("s1");
//! let first = workspace.offload_context(&scope, &[Message::user("a"), Message::user("b")]).await?;
//! let second = workspace.offload_context(&scope, &[Message::user("c")]).await?;
//! assert_eq!(first.as_str(), "sessions/s1/context.jsonl#L1-L2");
//! assert_eq!(second.as_str(), "sessions/s1/context.jsonl#L3-L3");
//!
//! let output = workspace.offload_tool_result(&scope, "call_7", "full output").await?;
//! let again = workspace.offload_tool_result(&scope, "call_7", "another output").await?;
//! assert_eq!(output.as_str(), "sessions/s1/tool_result-call_7.txt");
//! assert_eq!(again.as_str(), "sessions/s1/tool_result-call_7(1).txt");
//! assert_eq!(workspace.read_all(&scope, &output).await?, b"full output");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::StoreError;
use crate::archive::ArchiveScope;
use crate::blob::{BlobArchive, Blobs, CONTEXT_FILE, Loc, count_lines, slice_lines};
use crate::fsutil::{Kind, Tree, blocking};

/// The archive in a local directory.
#[derive(Debug)]
pub struct LocalWorkspace {
    inner: BlobArchive<FsBlobs>,
}

impl LocalWorkspace {
    /// A workspace rooted at `root` (created if missing). Temporary files that killed writers
    /// left behind are removed here.
    pub fn new(root: impl AsRef<Path>) -> Result<LocalWorkspace, StoreError> {
        let tree = Tree::open(root.as_ref())?;
        tree.sweep_temp_files()?;
        Ok(LocalWorkspace {
            inner: BlobArchive::new(FsBlobs {
                tree,
                line_counts: Arc::new(Mutex::new(HashMap::new())),
            }),
        })
    }

    /// The workspace directory.
    pub fn root(&self) -> &Path {
        self.inner.blobs.tree.root()
    }

    /// The directory holding a tenant's archive (the root for the default tenant).
    pub fn tenant_dir(&self, tenant: &str) -> Result<PathBuf, StoreError> {
        let loc = Loc::of(&ArchiveScope {
            tenant: tenant.to_string(),
            session: "x".to_string(),
        })?;
        Ok(self.root().join(loc.tenant_dir))
    }

    /// Removes everything archived for a session: its directory `sessions/<session>/` under
    /// its tenant's directory (content stored once for every session, `data/<sha256>.<ext>`,
    /// stays). The session id is hostile input: it becomes one sanitized path segment, and
    /// the walk from the root follows no link, so nothing outside the session's own
    /// directory is ever removed. Returns whether there was one.
    pub async fn remove_session(&self, scope: &ArchiveScope) -> Result<bool, StoreError> {
        let loc = Loc::of(scope)?;
        let sessions = join(&loc.tenant_dir, "sessions");
        let context_key = join(&loc.tenant_dir, &loc.session_dir());
        let blobs = &self.inner.blobs;
        let tree = blobs.tree.clone();
        let removed = blocking(move || match tree.dir(&sessions)? {
            Some(dir) => dir.remove_tree(&loc.session),
            None => Ok(false),
        })
        .await?;
        // A session archived again under the same id starts a new context file.
        if let Ok(mut counts) = blobs.line_counts.lock() {
            counts.remove(&context_key);
        }
        Ok(removed)
    }
}

#[derive(Debug)]
struct FsBlobs {
    tree: Tree,
    /// Per context file: (byte length, line count) at the last append, so the next append
    /// need not count lines again unless another process changed the file.
    line_counts: Arc<Mutex<HashMap<String, (u64, u64)>>>,
}

/// `tenant_dir/path` split into its directory and its file name.
fn locate(tenant_dir: &str, path: &str) -> (String, String) {
    let full: Vec<&str> = tenant_dir
        .split('/')
        .chain(path.split('/'))
        .filter(|s| !s.is_empty())
        .collect();
    match full.split_last() {
        Some((name, dir)) => (dir.join("/"), (*name).to_string()),
        None => (String::new(), String::new()),
    }
}

fn join(tenant_dir: &str, dir: &str) -> String {
    if tenant_dir.is_empty() {
        dir.to_string()
    } else {
        format!("{tenant_dir}/{dir}")
    }
}

#[async_trait]
impl Blobs for FsBlobs {
    async fn create(
        &self,
        tenant_dir: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let (dir, name) = locate(tenant_dir, path);
        let tree = self.tree.clone();
        blocking(move || tree.create_dir(&dir)?.create_new(&name, &bytes)).await
    }

    async fn get(&self, tenant_dir: &str, path: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let (dir, name) = locate(tenant_dir, path);
        let tree = self.tree.clone();
        blocking(move || match tree.dir(&dir)? {
            Some(dir) => dir.read(&name),
            None => Ok(None),
        })
        .await
    }

    async fn list(&self, tenant_dir: &str, dir: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let rel = join(tenant_dir, dir);
        let tree = self.tree.clone();
        blocking(move || {
            let Some(dir) = tree.dir(&rel)? else {
                return Ok(Vec::new());
            };
            // Links are passed over, never followed: reading one by its reference is refused.
            Ok(dir
                .entries()?
                .into_iter()
                .filter(|e| e.kind == Kind::File && !e.name.starts_with('.'))
                .map(|e| (e.name, e.len))
                .collect())
        })
        .await
    }

    async fn append_context(
        &self,
        loc: &Loc,
        lines: Vec<u8>,
        count: u64,
    ) -> Result<(u64, u64), StoreError> {
        let rel = join(&loc.tenant_dir, &loc.session_dir());
        let tree = self.tree.clone();
        let counts = Arc::clone(&self.line_counts);
        blocking(move || {
            let dir = tree.create_dir(&rel)?;
            let _lock = dir.lock(".context.lock")?;
            let len = dir.stat(CONTEXT_FILE)?.map_or(0, |meta| meta.len);
            let cached = counts.lock().ok().and_then(|m| m.get(&rel).copied());
            let existing = match cached {
                Some((cached_len, lines)) if cached_len == len => lines,
                // First append in this process, or another process wrote: count once.
                _ => dir
                    .read(CONTEXT_FILE)?
                    .map_or(0, |bytes| count_lines(&bytes)),
            };
            let new_len = dir.append_lines(CONTEXT_FILE, &lines)?;
            if let Ok(mut map) = counts.lock() {
                if map.len() > 10_000 {
                    map.clear();
                }
                map.insert(rel, (new_len, existing + count));
            }
            Ok((existing + 1, existing + count))
        })
        .await
    }

    async fn read_context(
        &self,
        loc: &Loc,
        lines: Option<(u64, u64)>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let rel = join(&loc.tenant_dir, &loc.session_dir());
        let tree = self.tree.clone();
        blocking(move || {
            let Some(dir) = tree.dir(&rel)? else {
                return Ok(None);
            };
            let Some(bytes) = dir.read(CONTEXT_FILE)? else {
                return Ok(None);
            };
            // A torn tail (crash mid-append) is not part of the archive.
            let complete = match bytes.iter().rposition(|&b| b == b'\n') {
                Some(i) => &bytes[..=i],
                None => &[][..],
            };
            Ok(match lines {
                None => Some(complete.to_vec()),
                Some((first, last)) => slice_lines(complete, first, last),
            })
        })
        .await
    }
}

crate::blob::delegate_offloader!(LocalWorkspace);
