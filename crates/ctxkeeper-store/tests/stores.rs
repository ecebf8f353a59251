//! Every session store backend runs the shared conformance suite. Backends that need a server
//! read its URL from an environment variable and report `SKIP` loudly when it is absent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use ctxkeeper_store::{SessionStore, open_store};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_conformance() {
    common::store_suite::run_all(open_store("memory://").await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    common::store_suite::run_all(open_store(&url).await.unwrap()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}",
        dir.path().join("nested/sessions.db").display()
    );
    common::store_suite::run_all(open_store(&url).await.unwrap()).await;
}

/// Opens a server-backed store, or reports SKIP (outside CI) and returns `None`.
#[allow(dead_code)]
async fn server_store(var: &str, backend: &str, default: &str) -> Option<Arc<dyn SessionStore>> {
    let url = common::service_url(var, backend, default)?;
    match tokio::time::timeout(Duration::from_secs(20), open_store(&url)).await {
        Ok(Ok(store)) => Some(store),
        Ok(Err(err)) => {
            common::unreachable(backend, &err.to_string());
            None
        }
        Err(_) => {
            common::unreachable(backend, "no answer within 20 s");
            None
        }
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_conformance() {
    if let Some(store) =
        server_store(common::POSTGRES_VAR, "postgres", common::POSTGRES_DEFAULT).await
    {
        common::store_suite::run_all(store).await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_conformance() {
    if let Some(store) = server_store(common::MYSQL_VAR, "mysql", common::MYSQL_DEFAULT).await {
        common::store_suite::run_all(store).await;
    }
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_conformance() {
    if let Some(store) = server_store(common::REDIS_VAR, "redis", common::REDIS_DEFAULT).await {
        common::store_suite::run_all(store).await;
    }
}

#[tokio::test]
async fn unknown_schemes_are_refused() {
    assert!(open_store("ftp://x").await.is_err());
}
