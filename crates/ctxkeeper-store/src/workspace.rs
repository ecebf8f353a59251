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
//! so a reader or a crash sees a complete item or none. `context.jsonl` grows by fsync'd
//! appends under a file lock (never read-then-rewrite); its line count is cached per file, so
//! an offload costs O(offloaded messages).
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
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::StoreError;
use crate::archive::ArchiveScope;
use crate::blob::{BlobArchive, Blobs, CONTEXT_FILE, Loc, count_lines, slice_lines};
use crate::fsutil::{self, blocking};

/// The archive in a local directory.
#[derive(Debug)]
pub struct LocalWorkspace {
    inner: BlobArchive<FsBlobs>,
}

impl LocalWorkspace {
    /// A workspace rooted at `root` (created if missing).
    pub fn new(root: impl AsRef<Path>) -> Result<LocalWorkspace, StoreError> {
        let root = root.as_ref();
        fs::create_dir_all(root)?;
        let root = fs::canonicalize(root)?;
        Ok(LocalWorkspace {
            inner: BlobArchive::new(FsBlobs {
                root,
                line_counts: Arc::new(Mutex::new(HashMap::new())),
            }),
        })
    }

    /// The workspace directory.
    pub fn root(&self) -> &Path {
        &self.inner.blobs.root
    }

    /// The directory holding a tenant's archive (the root for the default tenant).
    pub fn tenant_dir(&self, tenant: &str) -> Result<PathBuf, StoreError> {
        let loc = Loc::of(&ArchiveScope {
            tenant: tenant.to_string(),
            session: "x".to_string(),
        })?;
        Ok(self.root().join(loc.tenant_dir))
    }
}

#[derive(Debug)]
struct FsBlobs {
    root: PathBuf,
    /// Per context file: (byte length, line count) at the last append, so the next append
    /// need not count lines again unless another process changed the file.
    line_counts: Arc<Mutex<HashMap<PathBuf, (u64, u64)>>>,
}

impl FsBlobs {
    fn path(&self, tenant_dir: &str, path: &str) -> PathBuf {
        let mut full = self.root.clone();
        for segment in tenant_dir
            .split('/')
            .chain(path.split('/'))
            .filter(|s| !s.is_empty())
        {
            full.push(segment);
        }
        full
    }
}

/// Refuses a path that resolves outside the root (a symlink planted in the workspace).
fn check_inside(root: &Path, path: &Path) -> Result<(), StoreError> {
    match fs::canonicalize(path) {
        Ok(real) if real.starts_with(root) => Ok(()),
        Ok(_) => Err(StoreError::NotFound(format!(
            "{} leaves the workspace",
            path.display()
        ))),
        Err(err) => Err(err.into()),
    }
}

fn read_inside(root: &Path, path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match check_inside(root, path) {
        Ok(()) => Ok(fsutil::read_optional(path)?),
        Err(StoreError::NotFound(_)) if !path.exists() => Ok(None),
        Err(err) => Err(err),
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
        let full = self.path(tenant_dir, path);
        blocking(move || Ok(fsutil::create_new_durable(&full, &bytes)?)).await
    }

    async fn get(&self, tenant_dir: &str, path: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let full = self.path(tenant_dir, path);
        let root = self.root.clone();
        blocking(move || read_inside(&root, &full)).await
    }

    async fn list(&self, tenant_dir: &str, dir: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let full = self.path(tenant_dir, dir);
        blocking(move || {
            let entries = match fs::read_dir(&full) {
                Ok(entries) => entries,
                Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(err) => return Err(err.into()),
            };
            let mut out = Vec::new();
            for entry in entries.flatten() {
                let Ok(meta) = entry.metadata() else { continue };
                let name = entry.file_name().to_string_lossy().into_owned();
                if meta.is_file() && !name.starts_with('.') {
                    out.push((name, meta.len()));
                }
            }
            Ok(out)
        })
        .await
    }

    async fn append_context(
        &self,
        loc: &Loc,
        lines: Vec<u8>,
        count: u64,
    ) -> Result<(u64, u64), StoreError> {
        let dir = self.path(&loc.tenant_dir, &loc.session_dir());
        let counts = Arc::clone(&self.line_counts);
        blocking(move || {
            let file = dir.join(CONTEXT_FILE);
            let _lock = fsutil::lock_file(&dir.join(".context.lock"))?;
            let len = match fs::metadata(&file) {
                Ok(meta) => meta.len(),
                Err(err) if err.kind() == io::ErrorKind::NotFound => 0,
                Err(err) => return Err(err.into()),
            };
            let cached = counts.lock().ok().and_then(|m| m.get(&file).copied());
            let existing = match cached {
                Some((cached_len, lines)) if cached_len == len => lines,
                // First append in this process, or another process wrote: count once.
                _ => fsutil::read_optional(&file)?.map_or(0, |bytes| count_lines(&bytes)),
            };
            let new_len = fsutil::append_lines(&file, &lines)?;
            if let Ok(mut map) = counts.lock() {
                if map.len() > 10_000 {
                    map.clear();
                }
                map.insert(file, (new_len, existing + count));
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
        let file = self.path(
            &loc.tenant_dir,
            &format!("{}/{CONTEXT_FILE}", loc.session_dir()),
        );
        let root = self.root.clone();
        blocking(move || {
            let Some(bytes) = read_inside(&root, &file)? else {
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
