//! The archive in an object store (`object_store` crate): in-memory, local file system, S3,
//! GCS or Azure — for multi-host deployments without a shared disk.
//!
//! Items are objects under `PREFIX/[tenants/<tenant>/]sessions/<session>/…` and
//! `PREFIX/[tenants/<tenant>/]data/…`, named exactly like the workspace layout. Objects cannot
//! be appended to, so a session's `context.jsonl` is stored as chunks,
//! `sessions/<session>/context.jsonl.d/<first line>.jsonl`, each created with a conditional
//! put (`PutMode::Create`): two writers can never claim the same line numbers. Reading
//! `context.jsonl` (whole or a line range) stitches the chunks back together, and listings show
//! it as one item.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ctxkeeper_store::archive::{ArchiveScope, Offloader};
//! use ctxkeeper_store::object_archive::ObjectArchive;
//!
//! let archive = ObjectArchive::memory();
//! let scope = ArchiveScope::session("s1");
//! let r = archive.offload_tool_result(&scope, "call_1", "output").await?;
//! assert_eq!(archive.read_all(&scope, &r).await?, b"output");
//! # Ok::<(), ctxkeeper_store::StoreError>(())
//! # }).unwrap();
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::blob::{BlobArchive, Blobs, CONTEXT_FILE, Loc, count_lines, slice_lines};
use crate::{StoreError, redact};

const CHUNK_DIR: &str = "context.jsonl.d";

/// An archive over any [`ObjectStore`].
#[derive(Debug)]
pub struct ObjectArchive {
    inner: BlobArchive<ObjectBlobs>,
}

#[derive(Debug)]
struct ObjectBlobs {
    store: Arc<dyn ObjectStore>,
    prefix: String,
}

fn err(e: object_store::Error) -> StoreError {
    match e {
        object_store::Error::NotFound { path, .. } => StoreError::NotFound(path),
        other => StoreError::backend_caused("object store", other),
    }
}

impl ObjectArchive {
    /// An archive in `store` under `prefix` (may be empty).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> ObjectArchive {
        let prefix = prefix.trim_matches('/').to_string();
        ObjectArchive {
            inner: BlobArchive::new(ObjectBlobs { store, prefix }),
        }
    }

    /// An in-memory object store (tests, single-process demos).
    pub fn memory() -> ObjectArchive {
        ObjectArchive::new(Arc::new(object_store::memory::InMemory::new()), "")
    }

    /// The local file system under `dir` (created if missing), through `object_store`'s
    /// `LocalFileSystem`, which follows symbolic links: for tests and directories nobody else
    /// writes to. A workspace others can write into belongs in [`LocalWorkspace`], which
    /// never follows one (and which [`open_archive`] picks for paths and `file://` URLs).
    ///
    /// [`LocalWorkspace`]: crate::LocalWorkspace
    /// [`open_archive`]: crate::open_archive
    pub fn local(dir: impl AsRef<std::path::Path>) -> Result<ObjectArchive, StoreError> {
        std::fs::create_dir_all(dir.as_ref())?;
        let fs =
            object_store::local::LocalFileSystem::new_with_prefix(dir.as_ref()).map_err(err)?;
        Ok(ObjectArchive::new(Arc::new(fs), ""))
    }

    /// `memory://`, `file:///dir`, or a cloud URL (`s3://bucket/prefix`, `gs://…`,
    /// `az://…`; needs the `object-store-cloud` feature). Cloud credentials and options come
    /// from the environment variables the `object_store` builders read (`AWS_*`,
    /// `GOOGLE_*`, `AZURE_*`).
    pub fn from_url(url: &str) -> Result<ObjectArchive, StoreError> {
        if url == "memory://" || url == "memory:///" {
            return Ok(ObjectArchive::memory());
        }
        if let Some(dir) = url.strip_prefix("file://") {
            return ObjectArchive::local(dir);
        }
        let parsed = url::Url::parse(url)
            .map_err(|e| StoreError::InvalidInput(format!("archive URL {}: {e}", redact(url))))?;
        let options = std::env::vars().map(|(k, v)| (k.to_ascii_lowercase(), v));
        let (store, path) =
            object_store::parse_url_opts(&parsed, options).map_err(|e| match e {
                object_store::Error::Generic { source, .. }
                    if source.to_string().contains("not enabled") =>
                {
                    StoreError::NotImplemented(format!(
                        "{}: {source} (build with the `object-store-cloud` feature of ctxkeeper-store, `--features cloud` for the ctxkeeper binary)",
                        redact(url)
                    ))
                }
                other => err(other),
            })?;
        Ok(ObjectArchive::new(Arc::from(store), path.as_ref()))
    }
}

impl ObjectBlobs {
    fn path(&self, tenant_dir: &str, path: &str) -> Path {
        let joined: Vec<&str> = [self.prefix.as_str(), tenant_dir, path]
            .into_iter()
            .flat_map(|p| p.split('/'))
            .filter(|s| !s.is_empty())
            .collect();
        Path::from(joined.join("/"))
    }

    fn chunk_dir(&self, loc: &Loc) -> Path {
        self.path(
            &loc.tenant_dir,
            &format!("{}/{CHUNK_DIR}", loc.session_dir()),
        )
    }

    /// Every object under `dir`, at any depth.
    async fn objects_under(&self, dir: &Path) -> Result<Vec<ObjectMeta>, StoreError> {
        self.store.list(Some(dir)).try_collect().await.map_err(err)
    }

    /// The session's context chunks: (first line, path, size), in line order.
    async fn chunks(&self, loc: &Loc) -> Result<Vec<(u64, Path, u64)>, StoreError> {
        let metas = self.objects_under(&self.chunk_dir(loc)).await?;
        let mut out: Vec<(u64, Path, u64)> = metas
            .into_iter()
            .filter_map(|meta| {
                let first = meta
                    .location
                    .filename()?
                    .strip_suffix(".jsonl")?
                    .parse()
                    .ok()?;
                Some((first, meta.location, meta.size))
            })
            .collect();
        out.sort_by_key(|c| c.0);
        Ok(out)
    }

    async fn get_path(&self, path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
        match self.store.get(path).await {
            Ok(result) => Ok(Some(result.bytes().await.map_err(err)?.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// Creates an object unless it exists. Stores without conditional puts fall back to a
    /// check-then-put, which is only safe with one writer per session.
    async fn create_path(&self, path: &Path, bytes: Vec<u8>) -> Result<bool, StoreError> {
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(path, PutPayload::from(bytes.clone()), options)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(object_store::Error::NotImplemented { .. }) => {
                if self.store.head(path).await.is_ok() {
                    return Ok(false);
                }
                self.store
                    .put(path, PutPayload::from(bytes))
                    .await
                    .map_err(err)?;
                Ok(true)
            }
            Err(e) => Err(err(e)),
        }
    }
}

#[async_trait]
impl Blobs for ObjectBlobs {
    async fn create(
        &self,
        tenant_dir: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<bool, StoreError> {
        self.create_path(&self.path(tenant_dir, path), bytes).await
    }

    async fn get(&self, tenant_dir: &str, path: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get_path(&self.path(tenant_dir, path)).await
    }

    async fn list(&self, tenant_dir: &str, dir: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let listing = self
            .store
            .list_with_delimiter(Some(&self.path(tenant_dir, dir)))
            .await
            .map_err(err)?;
        let mut out: Vec<(String, u64)> = listing
            .objects
            .into_iter()
            .filter_map(|meta| Some((meta.location.filename()?.to_string(), meta.size)))
            .collect();
        if listing
            .common_prefixes
            .iter()
            .any(|p| p.filename() == Some(CHUNK_DIR))
        {
            let loc_dir = self.path(tenant_dir, &format!("{dir}/{CHUNK_DIR}"));
            let metas = self.objects_under(&loc_dir).await?;
            out.push((CONTEXT_FILE.to_string(), metas.iter().map(|m| m.size).sum()));
        }
        Ok(out)
    }

    async fn append_context(
        &self,
        loc: &Loc,
        lines: Vec<u8>,
        count: u64,
    ) -> Result<(u64, u64), StoreError> {
        for _ in 0..1000 {
            let chunks = self.chunks(loc).await?;
            let next = match chunks.last() {
                Some((first, path, _)) => {
                    let bytes = self.get_path(path).await?.unwrap_or_default();
                    first + count_lines(&bytes)
                }
                None => 1,
            };
            let path = self.path(
                &loc.tenant_dir,
                &format!("{}/{CHUNK_DIR}/{next:012}.jsonl", loc.session_dir()),
            );
            if self.create_path(&path, lines.clone()).await? {
                return Ok((next, next + count - 1));
            }
            // Another writer claimed these lines first: look again.
        }
        Err(StoreError::backend(
            "object store",
            "context append kept conflicting",
        ))
    }

    async fn read_context(
        &self,
        loc: &Loc,
        lines: Option<(u64, u64)>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let chunks = self.chunks(loc).await?;
        if chunks.is_empty() {
            return Ok(None);
        }
        let (low, high) = lines.unwrap_or((1, u64::MAX));
        // The chunk holding `low` is the last one starting at or before it.
        let start = chunks.iter().rposition(|c| c.0 <= low).unwrap_or(0);
        let mut all = Vec::new();
        let base = chunks[start].0;
        for (first, path, _) in &chunks[start..] {
            if *first > high {
                break;
            }
            all.extend(self.get_path(path).await?.unwrap_or_default());
        }
        Ok(match lines {
            None => Some(all),
            Some((a, b)) => slice_lines(&all, a - base + 1, b - base + 1),
        })
    }
}

crate::blob::delegate_offloader!(ObjectArchive);
