//! Filesystem containment: links planted in a workspace, a memory directory or a JSON-file
//! store are never followed — not for reads, listings, greps, appends or writes, not out of
//! the directory and not into another tenant's — and temporary files of killed writers are
//! swept when a store is opened. Each test plants what an attacker with write access to the
//! directory could, and checks both the error and that nothing outside was read or written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use ctxkeeper_core::model::Message;
use ctxkeeper_store::archive::{ArchiveRef, ArchiveScope, Offloader};
use ctxkeeper_store::memory::{LongTermMemory, MemoryScope};
use ctxkeeper_store::{
    AgentState, HistoryPage, LocalWorkspace, SearchQuery, SessionFilter, SessionKey, StoreError,
    open_store,
};
use tempfile::TempDir;

/// A directory outside every store, holding a secret file.
fn outside(root: &Path) -> std::path::PathBuf {
    let outside = root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("passwd"), "root:x:0:0:SECRET\n").unwrap();
    outside
}

/// A workspace in a fresh directory beside [`outside`]: the directory (kept while it lives),
/// the secret directory, the workspace and its root.
fn workspace_beside_a_secret() -> (TempDir, PathBuf, LocalWorkspace, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let secret_dir = outside(dir.path());
    let ws = LocalWorkspace::new(dir.path().join("ws")).unwrap();
    let root = ws.root().to_path_buf();
    (dir, secret_dir, ws, root)
}

fn assert_forbidden<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    match result {
        Err(StoreError::Forbidden(message)) => assert!(
            message.contains("symbolic link"),
            "{what}: the error names the link: {message}"
        ),
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

fn acme(session: &str) -> ArchiveScope {
    ArchiveScope {
        tenant: "acme".into(),
        session: session.into(),
    }
}

#[tokio::test]
async fn a_linked_item_is_refused_even_inside_the_workspace() {
    let (_dir, secret_dir, ws, root) = workspace_beside_a_secret();
    let scope = ArchiveScope::session("s1");
    ws.offload_tool_result(&scope, "a", "mine").await.unwrap();
    // Another tenant's archived item: inside the workspace root, outside this tenant.
    let theirs = ws
        .offload_tool_result(&acme("s1"), "secret", "ACME SECRET")
        .await
        .unwrap();
    symlink(
        ws.tenant_dir("acme").unwrap().join(theirs.as_str()),
        root.join("sessions/s1/tool_result-other-tenant.txt"),
    )
    .unwrap();
    symlink(
        secret_dir.join("passwd"),
        root.join("sessions/s1/tool_result-passwd.txt"),
    )
    .unwrap();

    for name in ["tool_result-other-tenant.txt", "tool_result-passwd.txt"] {
        let reference = ArchiveRef(format!("sessions/s1/{name}"));
        assert_forbidden(ws.read_all(&scope, &reference).await, name);
        assert_forbidden(ws.read(&scope, &reference, 0, 100).await, name);
    }
    // Listings, globs and greps pass over the links without reading them.
    let listed: Vec<String> = ws
        .list(&scope)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.reference.0)
        .collect();
    assert_eq!(listed, vec!["sessions/s1/tool_result-a.txt"]);
    assert_eq!(ws.glob(&scope, "*other*").await.unwrap(), vec![]);
    let grep = ws
        .grep(&scope, &regex::Regex::new("SECRET").unwrap(), 10)
        .await
        .unwrap();
    assert!(grep.is_empty(), "{grep:?}");
}

#[tokio::test]
async fn a_linked_session_directory_is_refused_for_lists_reads_and_writes() {
    let (_dir, secret_dir, ws, root) = workspace_beside_a_secret();
    std::fs::create_dir_all(root.join("sessions")).unwrap();
    // `context_list` used to list the directory a session link points at (`/etc`).
    symlink(&secret_dir, root.join("sessions/etc")).unwrap();
    // And another tenant's session directory, inside the workspace.
    ws.offload_tool_result(&acme("s1"), "secret", "ACME SECRET")
        .await
        .unwrap();
    let theirs = ws.tenant_dir("acme").unwrap().join("sessions/s1");
    symlink(&theirs, root.join("sessions/theirs")).unwrap();

    let any_line = regex::Regex::new(".").unwrap();
    for session in ["etc", "theirs"] {
        let scope = ArchiveScope::session(session);
        assert_forbidden(ws.list(&scope).await, "list");
        assert_forbidden(ws.glob(&scope, "*").await, "glob");
        assert_forbidden(ws.grep(&scope, &any_line, 10).await, "grep");
        assert_forbidden(
            ws.read_all(&scope, &ArchiveRef(format!("sessions/{session}/passwd")))
                .await,
            "read",
        );
        // Archive writes never follow the link: nothing lands outside or in acme's archive.
        assert_forbidden(
            ws.offload_tool_result(&scope, "planted", "written through a link")
                .await,
            "offload_tool_result",
        );
        assert_forbidden(
            ws.offload_context(&scope, &[Message::user("through a link")])
                .await,
            "offload_context",
        );
    }
    let mut outside_now: Vec<String> = std::fs::read_dir(&secret_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    outside_now.sort();
    assert_eq!(outside_now, vec!["passwd"]);
    let theirs_now: Vec<String> = std::fs::read_dir(&theirs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(theirs_now, vec!["tool_result-secret.txt"]);
}

#[tokio::test]
async fn linked_tenant_and_data_directories_are_refused() {
    let (_dir, secret_dir, ws, root) = workspace_beside_a_secret();
    std::fs::create_dir_all(root.join("tenants")).unwrap();
    symlink(&secret_dir, ws.tenant_dir("evil").unwrap()).unwrap();
    symlink(&secret_dir, root.join("data")).unwrap();
    let evil = ArchiveScope {
        tenant: "evil".into(),
        session: "s1".into(),
    };
    assert_forbidden(ws.list(&evil).await, "list in a linked tenant");
    assert_forbidden(
        ws.put_data(&ArchiveScope::session("s1"), b"png", "image/png")
            .await,
        "put_data into a linked data directory",
    );
    assert_forbidden(
        ws.read_all(
            &ArchiveScope::session("s1"),
            &ArchiveRef("data/passwd".into()),
        )
        .await,
        "read from a linked data directory",
    );
    assert_eq!(std::fs::read_dir(&secret_dir).unwrap().count(), 1);
}

#[tokio::test]
async fn memory_never_reads_or_writes_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let secret_dir = outside(dir.path());
    let root = dir.path().join("ws");
    let memory = LongTermMemory::new(&root).unwrap();
    let scope = MemoryScope::new("default", "default").unwrap();
    symlink(secret_dir.join("passwd"), root.join("MEMORY.md")).unwrap();

    // `memory_get` and `memory_search` used to read the linked file.
    assert_forbidden(
        memory.memory_get(&scope, "MEMORY.md", None, None).await,
        "memory_get",
    );
    assert_forbidden(memory.memory_search(&scope, "root", 5).await, "search");
    assert_forbidden(memory.files(&scope).await, "files");
    assert_forbidden(
        memory
            .append_memory(&scope, "appended through a link")
            .await,
        "append",
    );
    assert_eq!(
        std::fs::read_to_string(secret_dir.join("passwd")).unwrap(),
        "root:x:0:0:SECRET\n"
    );

    // A linked `memory/` directory, and a linked daily file in a real one.
    let acme = MemoryScope::new("acme", "default").unwrap();
    memory
        .append_memory(&acme, "acme's own fact")
        .await
        .unwrap();
    let acme_dir = root.join("tenants/acme");
    symlink(&secret_dir, acme_dir.join("memory")).unwrap();
    assert_forbidden(memory.files(&acme).await, "files with a linked memory dir");
    assert_forbidden(
        memory
            .memory_get(&acme, "memory/2026-01-01.md", None, None)
            .await,
        "memory_get in a linked memory dir",
    );
    assert_forbidden(
        memory.append_daily(&acme, "2026-01-01", "x").await,
        "append_daily into a linked memory dir",
    );
    std::fs::remove_file(acme_dir.join("memory")).unwrap();
    memory
        .append_daily(&acme, "2026-01-02", "a real daily note")
        .await
        .unwrap();
    symlink(
        secret_dir.join("passwd"),
        acme_dir.join("memory/2026-01-01.md"),
    )
    .unwrap();
    assert_eq!(
        memory.files(&acme).await.unwrap(),
        vec!["MEMORY.md", "memory/2026-01-02.md"],
        "listings pass over the linked daily file"
    );
    assert!(
        memory
            .memory_search(&acme, "root", 5)
            .await
            .unwrap()
            .is_empty()
    );
    assert_forbidden(
        memory
            .memory_get(&acme, "memory/2026-01-01.md", None, None)
            .await,
        "memory_get of a linked daily file",
    );
}

#[tokio::test]
async fn the_file_store_never_follows_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let secret_dir = outside(dir.path());
    let root = dir.path().join("store");
    let store = open_store(&format!("file://{}", root.display()))
        .await
        .unwrap();
    let mine = SessionKey::new("acme", "default", "bot", "s1").unwrap();
    store
        .save_and_append(
            &mine,
            &AgentState::new(),
            None,
            &[Message::user("acme SECRET")],
        )
        .await
        .unwrap();

    // Another tenant links its session directory to acme's, and its agent directory outside.
    let evil = SessionKey::new("evil", "default", "bot", "s1").unwrap();
    let evil_agent = root.join("tenants/evil/agents/bot");
    std::fs::create_dir_all(evil_agent.join("context")).unwrap();
    symlink(
        root.join("tenants/acme/agents/bot/context/s1"),
        evil_agent.join("context/s1"),
    )
    .unwrap();
    symlink(
        root.join("tenants/acme/agents/bot/sessions"),
        evil_agent.join("sessions"),
    )
    .unwrap();
    assert_forbidden(store.load(&evil).await, "load through a link");
    assert_forbidden(
        store.history(&evil, HistoryPage::last(10)).await,
        "history through a link",
    );
    assert_forbidden(
        store.save(&evil, &AgentState::new(), Some(1)).await,
        "save through a link",
    );
    assert_forbidden(
        store.append(&evil, &[Message::user("planted")]).await,
        "append through a link",
    );
    // Listings and searches of the tenant pass over the links.
    assert!(
        store
            .list(&SessionFilter::tenant("evil"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .search(&SearchQuery::tenant("evil", "secret"))
            .await
            .unwrap()
            .is_empty()
    );
    // Acme's session is untouched.
    let log = store.history(&mine, HistoryPage::last(10)).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(store.load(&mine).await.unwrap().unwrap().version, 1);

    // A whole tenant directory linked outside the store: nothing is written there.
    let other = SessionKey::new("other", "default", "bot", "s1").unwrap();
    symlink(&secret_dir, root.join("tenants/other")).unwrap();
    assert_forbidden(
        store.save(&other, &AgentState::new(), None).await,
        "save into a linked tenant",
    );
    assert_eq!(std::fs::read_dir(&secret_dir).unwrap().count(), 1);
    // Retention across all tenants still runs, passing over the link.
    assert_eq!(store.purge_before(None, 0).await.unwrap(), 0);
}

/// A temporary file a killed writer left behind, named as the store names them, with a
/// process id that cannot be running.
fn plant_orphan(dir: &Path, name: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!(".{name}.4294967295.0.tmp"));
    std::fs::write(&path, "half-written").unwrap();
    path
}

#[tokio::test]
async fn orphaned_temp_files_are_swept_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    // Workspace: an orphan beside a tool result, and one in another tenant's data directory.
    let ws_root = dir.path().join("ws");
    let orphans = [
        plant_orphan(&ws_root.join("sessions/s1"), "tool_result-x.txt"),
        plant_orphan(&ws_root.join("tenants/acme/data"), "abc.png"),
    ];
    let live = ws_root.join(format!(".in-flight.{}.0.tmp", std::process::id()));
    std::fs::write(&live, "a write of this process").unwrap();
    LocalWorkspace::new(&ws_root).unwrap();
    for orphan in &orphans {
        assert!(!orphan.exists(), "{} survived", orphan.display());
    }
    assert!(
        live.exists(),
        "a live writer's temporary file is left alone"
    );

    // JSON-file store: an orphaned state and key beside a session.
    let store_root = dir.path().join("store");
    let context = store_root.join("agents/bot/context/s1");
    let orphans = [
        plant_orphan(&context, "state.json"),
        plant_orphan(&context, "key.json"),
    ];
    open_store(&format!("file://{}", store_root.display()))
        .await
        .unwrap();
    for orphan in &orphans {
        assert!(!orphan.exists(), "{} survived", orphan.display());
    }
}
