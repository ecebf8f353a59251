//! Every archive (offloader) backend runs the shared offloader conformance suite.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use ctxkeeper_store::archive::{ArchiveScope, Offloader};
use ctxkeeper_store::{LocalWorkspace, open_archive};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_workspace_conformance() {
    let dir = tempfile::tempdir().unwrap();
    common::archive_suite::run_all(
        "workspace",
        Arc::new(LocalWorkspace::new(dir.path()).unwrap()),
    )
    .await;
}

#[tokio::test]
async fn local_workspace_uses_the_000_layout() {
    let dir = tempfile::tempdir().unwrap();
    let ws = LocalWorkspace::new(dir.path()).unwrap();
    let scope = ArchiveScope::session("s1");
    ws.offload_tool_result(&scope, "call_1", "out")
        .await
        .unwrap();
    ws.offload_tool_result(&scope, "call_1", "out 2")
        .await
        .unwrap();
    ws.offload_context(&scope, &[ctxkeeper_core::model::Message::user("hi")])
        .await
        .unwrap();
    let data = ws
        .put_data(&scope, b"png bytes", "image/png")
        .await
        .unwrap();
    let root = dir.path();
    assert!(root.join("sessions/s1/tool_result-call_1.txt").is_file());
    assert!(root.join("sessions/s1/tool_result-call_1(1).txt").is_file());
    assert_eq!(
        std::fs::read_to_string(root.join("sessions/s1/context.jsonl"))
            .unwrap()
            .lines()
            .count(),
        1
    );
    assert!(root.join(data.as_str()).is_file());
    let other = ArchiveScope {
        tenant: "acme".into(),
        session: "s1".into(),
    };
    ws.offload_tool_result(&other, "call_1", "acme")
        .await
        .unwrap();
    assert!(
        root.join("tenants/acme/sessions/s1/tool_result-call_1.txt")
            .is_file()
    );
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(root.join("sessions/s1"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn open_archive_takes_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let archive = open_archive(dir.path().to_str().unwrap()).await.unwrap();
    let r = archive
        .offload_tool_result(&ArchiveScope::session("s"), "c", "x")
        .await
        .unwrap();
    assert_eq!(r.as_str(), "sessions/s/tool_result-c.txt");
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_archive_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("archive.db").display());
    common::archive_suite::run_all("sqlite archive", open_archive(&url).await.unwrap()).await;
}

/// The archive suite on a SQL server's archive, when the server answers.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn server_archive_conformance(var: &str, backend: &str, default: &str) {
    let Some(url) = common::service_url(var, backend, default) else {
        return;
    };
    if let Some(archive) = common::answered(backend, open_archive(&url).await) {
        common::archive_suite::run_all(backend, archive).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_archive_conformance() {
    server_archive_conformance(
        common::POSTGRES_VAR,
        "postgres archive",
        common::POSTGRES_DEFAULT,
    )
    .await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_archive_conformance() {
    server_archive_conformance(common::MYSQL_VAR, "mysql archive", common::MYSQL_DEFAULT).await;
}

#[cfg(feature = "object-store")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn object_store_memory_conformance() {
    common::archive_suite::run_all(
        "object store (memory)",
        open_archive("memory://").await.unwrap(),
    )
    .await;
}

#[cfg(feature = "object-store")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn object_store_local_fs_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let archive = ctxkeeper_store::object_archive::ObjectArchive::local(dir.path()).unwrap();
    common::archive_suite::run_all("object store (local fs)", Arc::new(archive)).await;
}
