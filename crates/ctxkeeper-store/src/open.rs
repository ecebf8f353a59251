//! Opening a store or an archive from the URL (or path) that names it: the scheme picks the
//! backend, and a backend whose cargo feature is off answers [`StoreError::NotImplemented`].

use std::sync::Arc;

#[cfg(any(
    not(feature = "sql"),
    not(feature = "redis"),
    not(feature = "object-store")
))]
use crate::redact;
use crate::{LocalWorkspace, Offloader, SessionStore, StoreError, file_store, memory_store};

/// Opens the session store a URL names, creating its schema or directory on first use.
///
/// | URL | backend |
/// | --- | --- |
/// | `memory://` | in-process, lost on exit (tests, demos) |
/// | `file://DIR` or a bare path | JSON files in the `004` workspace layout |
/// | `sqlite://PATH` | SQLite, WAL journal, FTS5 search — the embedded default |
/// | `redis://…`, `rediss://…`, `redis+cluster://h1,h2`, `redis+sentinel://h1,h2/master` | Redis |
/// | `postgres://…` / `postgresql://…` | PostgreSQL, tsvector search |
/// | `mysql://…` / `mariadb://…` | MySQL or MariaDB, FULLTEXT search |
///
/// A backend whose cargo feature is off answers [`StoreError::NotImplemented`].
pub async fn open_store(url: &str) -> Result<Arc<dyn SessionStore>, StoreError> {
    install_tls_provider();
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("memory") => Ok(Arc::new(memory_store::MemoryStore::new())),
        Some("file") | None => Ok(Arc::new(file_store::FileStore::open(url).await?)),
        Some("sqlite") | Some("postgres") | Some("postgresql") | Some("mysql")
        | Some("mariadb") => open_sql(url).await,
        Some(scheme) if scheme.starts_with("redis") => open_redis(url).await,
        Some(other) => Err(StoreError::InvalidInput(unknown_scheme(other))),
    }
}

/// The schemes [`open_store`] knows (any `redis…` scheme besides).
const STORE_SCHEMES: [&str; 8] = [
    "memory",
    "file",
    "sqlite",
    "postgres",
    "postgresql",
    "mysql",
    "mariadb",
    "redis",
];

/// Whether a store URL names a SQL database (SQLite, PostgreSQL, MySQL or MariaDB), whose archive
/// can live in the same database.
pub fn is_sql_url(url: &str) -> bool {
    [
        "sqlite://",
        "postgres://",
        "postgresql://",
        "mysql://",
        "mariadb://",
    ]
    .iter()
    .any(|scheme| url.starts_with(scheme))
}

/// Checks that a store URL names a backend [`open_store`] knows, without connecting: what
/// `config validate` can tell before `serve` opens it. A bare path is a file store.
///
/// ```
/// use ctxkeeper_store::check_store_url;
///
/// assert!(check_store_url("sqlite:///var/lib/ctxkeeper/sessions.db").is_ok());
/// let err = check_store_url("sqlte://sessions.db").unwrap_err().to_string();
/// assert!(err.contains("did you mean `sqlite://`"), "{err}");
/// ```
pub fn check_store_url(url: &str) -> Result<(), StoreError> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Ok(());
    };
    let scheme = scheme.to_ascii_lowercase();
    if STORE_SCHEMES.contains(&scheme.as_str()) || scheme.starts_with("redis") {
        return Ok(());
    }
    Err(StoreError::InvalidInput(unknown_scheme(&scheme)))
}

/// The error for an unknown scheme: the nearest known one when it is a likely typo, and the
/// list of what is known.
fn unknown_scheme(scheme: &str) -> String {
    let nearest = STORE_SCHEMES
        .iter()
        .map(|known| (strsim::damerau_levenshtein(scheme, known), *known))
        .min()
        .filter(|(distance, _)| *distance <= 2)
        .map(|(_, known)| format!(" (did you mean `{known}://`?)"))
        .unwrap_or_default();
    format!(
        "unknown store scheme `{scheme}://`{nearest}; known: sqlite://PATH, postgres://…, \
         mysql://… (or mariadb://…), redis://…, file://DIR (or a bare path), memory://"
    )
}

#[cfg(feature = "sql")]
async fn open_sql(url: &str) -> Result<Arc<dyn SessionStore>, StoreError> {
    Ok(Arc::new(crate::sql::SqlStore::connect(url).await?))
}

#[cfg(not(feature = "sql"))]
async fn open_sql(url: &str) -> Result<Arc<dyn SessionStore>, StoreError> {
    Err(StoreError::NotImplemented(format!(
        "{}: built without SQL features",
        redact(url)
    )))
}

#[cfg(feature = "redis")]
async fn open_redis(url: &str) -> Result<Arc<dyn SessionStore>, StoreError> {
    Ok(Arc::new(
        crate::redis_store::RedisStore::connect(url).await?,
    ))
}

#[cfg(not(feature = "redis"))]
async fn open_redis(url: &str) -> Result<Arc<dyn SessionStore>, StoreError> {
    Err(StoreError::NotImplemented(format!(
        "{}: built without the `redis` feature",
        redact(url)
    )))
}

/// Opens the archive (offloader) a URL or path names.
///
/// | URL | archive |
/// | --- | --- |
/// | a path or `file://DIR` | [`LocalWorkspace`] in that directory |
/// | `sqlite://…`, `postgres://…`, `mysql://…` | archived items in the SQL database |
/// | `memory://` | an in-memory object store (feature `object-store`) |
/// | `s3://bucket/prefix`, `gs://…`, `az://…` | object storage (feature `object-store-cloud`; credentials from the usual environment variables) |
pub async fn open_archive(url_or_path: &str) -> Result<Arc<dyn Offloader>, StoreError> {
    install_tls_provider();
    let scheme = url_or_path
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        None => Ok(Arc::new(LocalWorkspace::new(url_or_path)?)),
        Some("file") => {
            let path = url_or_path
                .split_once("://")
                .map(|(_, rest)| rest)
                .unwrap_or_default();
            Ok(Arc::new(LocalWorkspace::new(path)?))
        }
        Some("sqlite") | Some("postgres") | Some("postgresql") | Some("mysql")
        | Some("mariadb") => open_sql_archive(url_or_path).await,
        Some(_) => open_object_archive(url_or_path),
    }
}

#[cfg(feature = "sql")]
async fn open_sql_archive(url: &str) -> Result<Arc<dyn Offloader>, StoreError> {
    Ok(Arc::new(
        crate::sql::SqlStore::connect(url).await?.archive(),
    ))
}

#[cfg(not(feature = "sql"))]
async fn open_sql_archive(url: &str) -> Result<Arc<dyn Offloader>, StoreError> {
    Err(StoreError::NotImplemented(format!(
        "{}: built without SQL features",
        redact(url)
    )))
}

#[cfg(feature = "object-store")]
fn open_object_archive(url: &str) -> Result<Arc<dyn Offloader>, StoreError> {
    Ok(Arc::new(crate::object_archive::ObjectArchive::from_url(
        url,
    )?))
}

#[cfg(not(feature = "object-store"))]
fn open_object_archive(url: &str) -> Result<Arc<dyn Offloader>, StoreError> {
    Err(StoreError::NotImplemented(format!(
        "{}: built without the `object-store` feature",
        redact(url)
    )))
}

/// Makes aws-lc-rs the process's rustls provider unless one is installed already: with more
/// than one provider compiled in (another crate may bring `ring`), rustls refuses to pick one.
#[cfg(feature = "tls")]
pub fn install_tls_provider() {
    // An error only means a provider is installed already, which is what we want.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Without the `tls` feature there is no TLS provider to install.
#[cfg(not(feature = "tls"))]
pub fn install_tls_provider() {}
