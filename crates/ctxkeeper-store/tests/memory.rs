//! Long-term memory files: layout, isolation, flush, search and get.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxkeeper_store::StoreError;
use ctxkeeper_store::memory::{LongTermMemory, MEMORY_FILE, MemoryScope};

#[tokio::test]
async fn memory_files_rank_isolate_and_survive_hand_edits() {
    let dir = tempfile::tempdir().unwrap();
    let memory = LongTermMemory::new(dir.path()).unwrap();
    let default = MemoryScope::new("default", "default").unwrap();
    memory
        .append_memory(&default, "# Memory\n\nThe user's name is Dana.")
        .await
        .unwrap();
    assert!(dir.path().join(MEMORY_FILE).is_file());
    // A hand edit without a final newline is kept whole.
    std::fs::write(
        dir.path().join(MEMORY_FILE),
        "# Memory\n\nThe user's name is Dana.\nHand edit",
    )
    .unwrap();
    memory
        .append_memory(&default, "Dana's dog is called Pixel.")
        .await
        .unwrap();
    let text = std::fs::read_to_string(dir.path().join(MEMORY_FILE)).unwrap();
    assert!(text.contains("Hand edit\nDana's dog"));

    memory
        .append_daily(&default, "2026-11-20", "Deployed release 4.2 to staging.")
        .await
        .unwrap();
    memory
        .append_daily(
            &default,
            "2026-11-21",
            "Release 4.2 rolled back: staging database full.\n\nUnrelated note.",
        )
        .await
        .unwrap();
    assert!(dir.path().join("memory/2026-11-21.md").is_file());
    assert_eq!(memory.flush(&default, &[]).await.unwrap(), None);
    let flushed = memory
        .flush(&default, &["Release 4.3 fixes the staging database".into()])
        .await
        .unwrap()
        .unwrap();
    assert!(flushed.starts_with("memory/") && flushed.ends_with(".md"));

    let files = memory.files(&default).await.unwrap();
    assert_eq!(files[0], MEMORY_FILE);
    assert!(files.contains(&"memory/2026-11-20.md".to_string()));

    let hits = memory
        .memory_search(&default, "staging database", 10)
        .await
        .unwrap();
    assert!(hits.len() >= 2);
    assert!(hits[0].snippet.to_lowercase().contains("database"));
    assert!(hits.iter().all(|h| h.path != MEMORY_FILE));
    let dog = memory.memory_search(&default, "pixel", 10).await.unwrap();
    assert_eq!(
        (dog[0].path.as_str(), dog[0].line),
        (MEMORY_FILE, 3),
        "the paragraph starts at line 3"
    );

    let got = memory
        .memory_get(&default, "memory/2026-11-21.md", Some(3), Some(1))
        .await
        .unwrap();
    assert_eq!((got.text.as_str(), got.total_lines), ("Unrelated note.", 3));
    assert!(matches!(
        memory
            .memory_get(&default, "../secrets.md", None, None)
            .await,
        Err(StoreError::InvalidInput(_))
    ));
    assert!(matches!(
        memory
            .memory_get(&default, "memory/2020-01-01.md", None, None)
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Other users and tenants see none of it.
    for (tenant, user) in [("default", "bob"), ("acme", "default"), ("acme", "bob")] {
        let other = MemoryScope::new(tenant, user).unwrap();
        assert!(
            memory
                .memory_search(&other, "dana staging pixel", 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(memory.files(&other).await.unwrap().is_empty());
    }
    let bob = MemoryScope::new("acme", "bob").unwrap();
    memory.append_memory(&bob, "Bob likes tea.").await.unwrap();
    assert!(
        dir.path()
            .join("tenants/acme/users/bob/MEMORY.md")
            .is_file()
    );
    assert!(MemoryScope::new("../x", "y").is_err());
    assert!(matches!(
        memory.memory_search(&default, "?!", 3).await,
        Err(StoreError::InvalidInput(_))
    ));
}
