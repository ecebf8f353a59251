//! The session store conformance suite: every backend runs every check here.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ctxkeeper_core::model::{DataSource, Message, Part, Role};
use ctxkeeper_store::{
    AgentState, HistoryPage, Retention, SearchQuery, SessionFilter, SessionKey, SessionStore,
    StoreError,
};
use serde_json::json;

use super::unique;

/// Runs the whole suite against one store.
pub async fn run_all(store: Arc<dyn SessionStore>) {
    let name = store.backend();
    round_trip(&*store).await;
    cas_conflict(&*store).await;
    save_and_append(&*store).await;
    concurrent_appends(Arc::clone(&store)).await;
    history_paging(&*store).await;
    tenant_isolation(&*store).await;
    list_and_delete(&*store).await;
    tenants_listing(&*store).await;
    search_ranking(&*store).await;
    retention(&*store).await;
    unicode_and_large_messages(&*store).await;
    hostile_identifiers(&*store).await;
    eprintln!("{name}: session store conformance passed");
}

fn key(tenant: &str, session: &str) -> SessionKey {
    SessionKey::new(tenant, "alice", "bot", session).unwrap()
}

/// A state with every kind of part and every field set.
pub fn rich_state() -> AgentState {
    let mut state = AgentState::new();
    let mut with_extra = Message::assistant("done");
    with_extra.extra.insert("refusal".into(), json!(null));
    state.context = vec![
        Message::system("You are helpful."),
        Message::user("find flight AB123"),
        Message::new(
            Role::Assistant,
            vec![
                Part::Reasoning {
                    text: Some("think".into()),
                    signature: Some("c2ln".into()),
                    encrypted: None,
                    redacted: false,
                    extra: Default::default(),
                },
                Part::tool_call("call_1", "search", r#"{"q":"AB123"}"#),
            ],
        ),
        Message::tool_result("call_1", "AB123 departs 10:00"),
        Message::new(
            Role::User,
            vec![Part::Data {
                source: DataSource::Archived {
                    sha256: "ab".repeat(32),
                    media_type: "image/png".into(),
                },
                wire_type: Some("image_url".into()),
                extra: Default::default(),
            }],
        ),
        Message::new(
            Role::User,
            vec![Part::Opaque {
                value: json!({"type": "x", "k": [1, 2]}),
            }],
        ),
        with_extra,
    ];
    state.summary = Some(json!({"task_overview": "book a flight", "next_steps": ["pay"]}));
    state.engine = json!({"compactions": 2, "ledger": [1, 2, 3]});
    state
        .extensions
        .insert("plan".into(), json!({"mode": "plan", "file": "plans/a.md"}));
    state
        .extensions
        .insert("tasks".into(), json!([{"id": 1, "status": "open"}]));
    state
        .extensions
        .insert("permissions".into(), json!({"allow": ["read_file"]}));
    state
}

pub async fn round_trip(store: &dyn SessionStore) {
    let k = key(&unique("rt"), "s1");
    assert!(store.load(&k).await.unwrap().is_none());
    let state = rich_state();
    let v1 = store.save(&k, &state, None).await.unwrap();
    assert_eq!(v1, 1);
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.version, 1);
    assert_eq!(loaded.state, state);
    let mut next = loaded.state.clone();
    next.context.push(Message::user("and a hotel"));
    let v2 = store.save(&k, &next, Some(v1)).await.unwrap();
    assert_eq!(v2, 2);
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.state), (2, next));
}

pub async fn cas_conflict(store: &dyn SessionStore) {
    let k = key(&unique("cas"), "s1");
    // Saving against a version that does not exist.
    match store.save(&k, &AgentState::new(), Some(3)).await {
        Err(StoreError::Conflict {
            expected: Some(3),
            actual: None,
        }) => {}
        other => panic!("expected a conflict, got {other:?}"),
    }
    let v1 = store.save(&k, &AgentState::new(), None).await.unwrap();
    // A second creator loses.
    match store.save(&k, &AgentState::new(), None).await {
        Err(StoreError::Conflict {
            expected: None,
            actual: Some(1),
        }) => {}
        other => panic!("expected a conflict, got {other:?}"),
    }
    // Two writers load v1; the first save wins, the stale one gets a conflict.
    let mut a = store.load(&k).await.unwrap().unwrap().state;
    let mut b = a.clone();
    a.extensions.insert("writer".into(), json!("a"));
    b.extensions.insert("writer".into(), json!("b"));
    let v2 = store.save(&k, &a, Some(v1)).await.unwrap();
    match store.save(&k, &b, Some(v1)).await {
        Err(StoreError::Conflict {
            expected: Some(1),
            actual: Some(2),
        }) => {}
        other => panic!("expected a conflict, got {other:?}"),
    }
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.version, v2);
    assert_eq!(loaded.state.extensions["writer"], json!("a"));

    // Concurrent savers from the same version: exactly one wins.
    let store_ref = store;
    let k_ref = &k;
    let results = futures_join_all((0..6).map(|i| async move {
        let mut s = AgentState::new();
        s.extensions.insert("racer".into(), json!(i));
        store_ref.save(k_ref, &s, Some(v2)).await
    }))
    .await;
    let wins = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(wins, 1, "{results:?}");
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(StoreError::is_conflict)
    );
}

/// A save with its log entries: both land, or (on a lost swap) neither.
pub async fn save_and_append(store: &dyn SessionStore) {
    let k = key(&unique("sa"), "s1");
    let first = [
        Message::user("book a flight"),
        Message::assistant("to where?"),
    ];
    let state = rich_state();
    let committed = store
        .save_and_append(&k, &state, None, &first)
        .await
        .unwrap();
    assert_eq!(committed.version, 1);
    let appended = committed.appended.expect("two messages were appended");
    assert_eq!((appended.first_seq, appended.last_seq), (1, 2));
    assert_eq!(store.load(&k).await.unwrap().unwrap().state, state);

    // A stale version: no state, no log entries.
    let stale = store
        .save_and_append(&k, &AgentState::new(), None, &[Message::user("lost")])
        .await;
    assert!(
        matches!(stale, Err(ref err) if err.is_conflict()),
        "{stale:?}"
    );
    // Nothing to log: only the state moves.
    let quiet = store
        .save_and_append(&k, &AgentState::new(), Some(1), &[])
        .await
        .unwrap();
    assert_eq!((quiet.version, quiet.appended), (2, None));

    // Racers from one version: one wins, and the log holds exactly its messages.
    let store_ref = store;
    let k_ref = &k;
    let results = futures_join_all((0..4).map(|i| async move {
        let said = [Message::user(format!("racer {i}"))];
        store_ref
            .save_and_append(k_ref, &AgentState::new(), Some(2), &said)
            .await
            .map(|c| (i, c))
    }))
    .await;
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let (winner, committed) = winners[0];
    assert_eq!(committed.version, 3);
    let texts: Vec<String> = store
        .history(&k, HistoryPage::last(10))
        .await
        .unwrap()
        .iter()
        .map(|entry| entry.message.text())
        .collect();
    assert_eq!(
        texts,
        ["book a flight", "to where?", &format!("racer {winner}")],
        "{} logged a message of a losing save",
        store.backend()
    );
}

/// Polls a set of futures concurrently on the current task (no spawning, so borrowed stores
/// work).
async fn futures_join_all<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|v| v.expect("every future finished"))
        .collect()
}

pub async fn concurrent_appends(store: Arc<dyn SessionStore>) {
    let k = key(&unique("conc"), "s1");
    let (tasks, rounds) = (8, 20);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = Arc::clone(&store);
        let k = k.clone();
        handles.push(tokio::spawn(async move {
            for r in 0..rounds {
                let batch = [
                    Message::user(format!("task {t} round {r} a")),
                    Message::assistant(format!("task {t} round {r} b")),
                ];
                let outcome = store.append(&k, &batch).await.unwrap();
                assert_eq!(outcome.last_seq, outcome.first_seq + 1);
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    let total = tasks * rounds * 2;
    let entries = store
        .history(&k, HistoryPage::last(total + 10))
        .await
        .unwrap();
    assert_eq!(entries.len(), total);
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=total as u64).collect::<Vec<_>>());
    let texts: BTreeSet<String> = entries.iter().map(|e| e.message.text()).collect();
    assert_eq!(texts.len(), total);
    // Each batch stays contiguous and in order.
    for pair in entries.chunks(2) {
        assert!(pair[0].message.text().ends_with(" a") && pair[1].message.text().ends_with(" b"));
        assert_eq!(
            pair[0].message.text().trim_end_matches(" a"),
            pair[1].message.text().trim_end_matches(" b")
        );
    }
    let info = store
        .list(&SessionFilter::tenant(k.tenant()))
        .await
        .unwrap();
    assert_eq!(info[0].log_len, total as u64);
}

pub async fn history_paging(store: &dyn SessionStore) {
    let k = key(&unique("hist"), "s1");
    assert!(
        store
            .history(&k, HistoryPage::last(5))
            .await
            .unwrap()
            .is_empty()
    );
    for i in 1..=25 {
        store
            .append(&k, &[Message::user(format!("message {i}"))])
            .await
            .unwrap();
    }
    let seqs =
        |entries: Vec<ctxkeeper_store::LogEntry>| entries.iter().map(|e| e.seq).collect::<Vec<_>>();
    let page = store.history(&k, HistoryPage::last(10)).await.unwrap();
    assert_eq!(page[0].message.text(), "message 16");
    assert_eq!(seqs(page), (16..=25).collect::<Vec<_>>());
    assert_eq!(
        seqs(
            store
                .history(&k, HistoryPage::before(10, 16))
                .await
                .unwrap()
        ),
        (6..=15).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(store.history(&k, HistoryPage::before(10, 6)).await.unwrap()),
        (1..=5).collect::<Vec<_>>()
    );
    assert!(
        store
            .history(&k, HistoryPage::before(10, 1))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .history(&k, HistoryPage::last(0))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn tenant_isolation(store: &dyn SessionStore) {
    let (ta, tb) = (unique("tenant-a"), unique("tenant-b"));
    let (a, b) = (key(&ta, "shared-id"), key(&tb, "shared-id"));
    let mut sa = AgentState::new();
    sa.extensions.insert("owner".into(), json!("a"));
    store.save(&a, &sa, None).await.unwrap();
    store
        .append(&a, &[Message::user("alpha secret zeppelin")])
        .await
        .unwrap();
    // Tenant B has nothing yet, although the rest of the key is identical.
    assert!(store.load(&b).await.unwrap().is_none());
    assert!(
        store
            .history(&b, HistoryPage::last(10))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list(&SessionFilter::tenant(&tb))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .search(&SearchQuery::tenant(&tb, "zeppelin"))
            .await
            .unwrap()
            .is_empty()
    );
    // B saves as a new session (no conflict with A's version).
    let mut sb = AgentState::new();
    sb.extensions.insert("owner".into(), json!("b"));
    assert_eq!(store.save(&b, &sb, None).await.unwrap(), 1);
    store
        .append(&b, &[Message::user("bravo public dirigible")])
        .await
        .unwrap();
    assert_eq!(
        store.load(&a).await.unwrap().unwrap().state.extensions["owner"],
        json!("a")
    );
    assert_eq!(
        store.load(&b).await.unwrap().unwrap().state.extensions["owner"],
        json!("b")
    );
    let hits = store
        .search(&SearchQuery::tenant(&ta, "zeppelin dirigible"))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].key, a);
    // Deleting in A leaves B whole; purging A's tenant leaves B.
    assert!(store.delete(&a).await.unwrap());
    assert!(store.load(&b).await.unwrap().is_some());
    store.append(&a, &[Message::user("again")]).await.unwrap();
    assert_eq!(store.purge_before(Some(&ta), i64::MAX).await.unwrap(), 1);
    assert_eq!(
        store
            .history(&b, HistoryPage::last(10))
            .await
            .unwrap()
            .len(),
        1
    );
}

pub async fn list_and_delete(store: &dyn SessionStore) {
    let t = unique("list");
    let k1 = SessionKey::new(&t, "alice", "bot", "s1").unwrap();
    let k2 = SessionKey::new(&t, "alice", "other-bot", "s2").unwrap();
    let k3 = SessionKey::new(&t, "bob", "bot", "s3").unwrap();
    store.save(&k1, &AgentState::new(), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    store
        .append(&k2, &[Message::user("x"), Message::user("y")])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    store.save(&k3, &AgentState::new(), None).await.unwrap();
    store.append(&k3, &[Message::user("z")]).await.unwrap();

    let all = store.list(&SessionFilter::tenant(&t)).await.unwrap();
    let keys: Vec<_> = all.iter().map(|i| i.key.clone()).collect();
    assert_eq!(
        keys,
        vec![k3.clone(), k2.clone(), k1.clone()],
        "newest first"
    );
    let by_key = |k: &SessionKey| all.iter().find(|i| &i.key == k).unwrap().clone();
    assert_eq!((by_key(&k1).version, by_key(&k1).log_len), (Some(1), 0));
    assert_eq!((by_key(&k2).version, by_key(&k2).log_len), (None, 2));
    assert_eq!((by_key(&k3).version, by_key(&k3).log_len), (Some(1), 1));
    assert!(by_key(&k3).updated_at_ms >= by_key(&k3).created_at_ms);

    let alice = SessionFilter {
        tenant: t.clone(),
        user: Some("alice".into()),
        agent: None,
    };
    assert_eq!(store.list(&alice).await.unwrap().len(), 2);
    let alice_bot = SessionFilter {
        agent: Some("bot".into()),
        ..alice
    };
    assert_eq!(store.list(&alice_bot).await.unwrap().len(), 1);

    assert!(store.delete(&k2).await.unwrap());
    assert!(!store.delete(&k2).await.unwrap());
    assert!(
        store
            .history(&k2, HistoryPage::last(10))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.delete(&k1).await.unwrap());
    assert!(store.load(&k1).await.unwrap().is_none());
    assert_eq!(
        store.list(&SessionFilter::tenant(&t)).await.unwrap().len(),
        1
    );
    // A deleted session starts over.
    assert_eq!(store.save(&k1, &AgentState::new(), None).await.unwrap(), 1);
}

/// Every tenant with sessions is listed once, with as many sessions as `list` shows and the
/// newest update among them; a tenant whose sessions are all gone is not. The store may be
/// shared with other runs, so only this test's tenants are checked exactly.
pub async fn tenants_listing(store: &dyn SessionStore) {
    let (older, newer) = (unique("tenants-older"), unique("tenants-newer"));
    let older_keys = [
        SessionKey::new(&older, "alice", "bot", "s1").expect("key"),
        // Log only, no state: still a session.
        SessionKey::new(&older, "bob", "other-bot", "s2").expect("key"),
    ];
    store
        .save(&older_keys[0], &AgentState::new(), None)
        .await
        .expect("save");
    store
        .append(&older_keys[1], &[Message::user("x")])
        .await
        .expect("append");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let newer_key = SessionKey::new(&newer, "alice", "bot", "s1").expect("key");
    store
        .save(&newer_key, &AgentState::new(), None)
        .await
        .expect("save");
    // The default tenant too (a backend may store it apart, as the file store does).
    let default_key = SessionKey::simple(unique("tenants-default")).expect("key");
    store
        .append(&default_key, &[Message::user("y")])
        .await
        .expect("append");

    let listed = store.tenants().await.expect("tenants");
    let position = |tenant: &str| {
        let at: Vec<usize> = listed
            .iter()
            .enumerate()
            .filter(|(_, t)| t.tenant == tenant)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(at.len(), 1, "{tenant} listed once: {listed:?}");
        at[0]
    };
    for tenant in [&older, &newer] {
        let info = &listed[position(tenant)];
        let sessions = store
            .list(&SessionFilter::tenant(tenant.as_str()))
            .await
            .expect("list");
        assert_eq!(info.sessions, sessions.len() as u64, "{info:?}");
        let newest = sessions.iter().map(|s| s.updated_at_ms).max();
        assert_eq!(Some(info.updated_at_ms), newest, "{info:?}");
    }
    assert_eq!(listed[position(&older)].sessions, 2);
    assert_eq!(listed[position(&newer)].sessions, 1);
    assert!(
        position(&newer) < position(&older),
        "most recently updated first: {listed:?}"
    );
    assert!(listed[position(SessionKey::DEFAULT)].sessions >= 1);
    assert!(
        listed
            .windows(2)
            .all(|pair| pair[0].updated_at_ms >= pair[1].updated_at_ms),
        "{listed:?}"
    );

    // A tenant whose last session goes is no longer listed; the others stay as they were.
    assert!(store.delete(&newer_key).await.expect("delete"));
    assert!(store.delete(&default_key).await.expect("delete"));
    let listed = store.tenants().await.expect("tenants");
    assert!(listed.iter().all(|t| t.tenant != newer), "{listed:?}");
    let older_info = listed.iter().find(|t| t.tenant == older);
    assert_eq!(older_info.map(|t| t.sessions), Some(2), "{listed:?}");
    assert_eq!(
        store
            .purge_before(Some(&older), i64::MAX)
            .await
            .expect("purge"),
        2
    );
    let listed = store.tenants().await.expect("tenants");
    assert!(listed.iter().all(|t| t.tenant != older), "{listed:?}");
}

pub async fn search_ranking(store: &dyn SessionStore) {
    let t = unique("search");
    let s1 = key(&t, "s1");
    let s2 = key(&t, "s2");
    let filler = [
        "the weather today is mild with light winds",
        "please summarise the meeting notes from monday",
        "compile the project and run every test",
        "the invoice total was forwarded to accounting",
        "restart the database server after the upgrade",
        "schedule a review with the design team",
    ];
    for text in filler {
        store.append(&s1, &[Message::user(text)]).await.unwrap();
    }
    store
        .append(&s1, &[Message::user("a quokka was seen near the river")])
        .await
        .unwrap();
    store
        .append(
            &s1,
            &[Message::assistant(
                "the quokka sanctuary expands; sanctuary staff counted each quokka",
            )],
        )
        .await
        .unwrap();
    store
        .append(
            &s2,
            &[Message::tool_result("call_9", "found quokka footprints")],
        )
        .await
        .unwrap();
    store
        .append(&s2, &[Message::user("nothing relevant here at all")])
        .await
        .unwrap();

    let hits = store
        .search(&SearchQuery::tenant(&t, "Quokka sanctuary"))
        .await
        .unwrap();
    assert_eq!(hits.len(), 3, "{hits:?}");
    assert_eq!(
        (hits[0].key.clone(), hits[0].seq),
        (s1.clone(), 8),
        "{hits:?}"
    );
    assert!(
        hits.windows(2).all(|w| w[0].score >= w[1].score),
        "{hits:?}"
    );
    assert!(
        hits.iter().any(|h| h.key == s2 && h.seq == 1),
        "every hit names its session"
    );
    assert!(hits[0].snippet.to_lowercase().contains("quokka"));

    let within = store
        .search(&SearchQuery::session(s2.clone(), "quokka"))
        .await
        .unwrap();
    assert_eq!(within.len(), 1);
    assert_eq!(within[0].key, s2);

    let mut limited = SearchQuery::tenant(&t, "quokka");
    limited.limit = 2;
    assert_eq!(store.search(&limited).await.unwrap().len(), 2);
    assert!(
        store
            .search(&SearchQuery::tenant(&t, "platypus"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store.search(&SearchQuery::tenant(&t, "  !! ")).await,
        Err(StoreError::InvalidInput(_))
    ));
    // Query syntax of the engines is not interpreted.
    let odd = store
        .search(&SearchQuery::tenant(&t, "quokka\" OR * -- ' | & NEAR("))
        .await
        .unwrap();
    assert_eq!(odd.len(), 3);

    // A compound word (an id, a path) matches only whole: MARKER-3 is not MARKER-30, nor a
    // `marker` beside some `3`.
    let s3 = key(&t, "s3");
    for text in [
        "planted MARKER-3 in the config",
        "planted MARKER-30 in the log",
        "planted MARKER-4 after 3 retries",
    ] {
        store.append(&s3, &[Message::user(text)]).await.unwrap();
    }
    let markers = store
        .search(&SearchQuery::session(s3.clone(), "MARKER-3"))
        .await
        .unwrap();
    assert_eq!(markers.len(), 1, "{markers:?}");
    assert_eq!(markers[0].seq, 1, "{markers:?}");
}

pub async fn retention(store: &dyn SessionStore) {
    let t = unique("retention");
    let old = key(&t, "old");
    let fresh = key(&t, "fresh");
    store.save(&old, &AgentState::new(), None).await.unwrap();
    store
        .append(&old, &[Message::user("old news")])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let cutoff = now_ms();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    store.save(&fresh, &AgentState::new(), None).await.unwrap();
    // The default policy (30 days) keeps both.
    assert_eq!(
        store.cleanup(Some(&t), Retention::default()).await.unwrap(),
        0
    );
    assert_eq!(store.purge_before(Some(&t), cutoff).await.unwrap(), 1);
    assert!(store.load(&old).await.unwrap().is_none());
    assert!(
        store
            .history(&old, HistoryPage::last(5))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.load(&fresh).await.unwrap().is_some());
    let listed: Vec<_> = store
        .list(&SessionFilter::tenant(&t))
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.key)
        .collect();
    assert_eq!(listed, vec![fresh]);
    assert!(Retention::default().max_age == Duration::from_secs(30 * 86_400));
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

pub async fn unicode_and_large_messages(store: &dyn SessionStore) {
    let k = key(&unique("unicode"), "s1");
    let text = "Grüße aus Zürich — 東京タワー 🚀 مرحبا e\u{301} \u{0} tab\there \"quoted\" \\back";
    let big: String = "0123456789abcdef🚀".repeat(10 * 1024 * 1024 / 20);
    assert!(big.len() >= 10_000_000);
    let mut state = AgentState::new();
    state.context = vec![
        Message::user(text),
        Message::tool_result("big", big.clone()),
    ];
    store.save(&k, &state, None).await.unwrap();
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.state, state);
    store.append(&k, &state.context).await.unwrap();
    let entries = store.history(&k, HistoryPage::last(2)).await.unwrap();
    assert_eq!(entries[0].message.text(), text);
    assert_eq!(entries[1].message.text(), big);
    let hits = store
        .search(&SearchQuery::session(k.clone(), "zürich"))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].seq, 1);
}

pub async fn hostile_identifiers(store: &dyn SessionStore) {
    for id in [
        "../../etc/passwd",
        "/abs",
        "a\\b",
        "a\0b",
        "..",
        "",
        "a b",
        "x/../y",
        "C:\\x",
    ] {
        assert!(
            matches!(SessionKey::simple(id), Err(StoreError::InvalidInput(_))),
            "{id:?}"
        );
        let filter = SessionFilter::tenant(id);
        assert!(
            matches!(store.list(&filter).await, Err(StoreError::InvalidInput(_))),
            "{id:?}"
        );
        assert!(
            matches!(
                store.search(&SearchQuery::tenant(id, "word")).await,
                Err(StoreError::InvalidInput(_))
            ),
            "{id:?}"
        );
        let purged = store.purge_before(Some(id), i64::MAX).await;
        assert!(
            matches!(purged, Ok(0) | Err(StoreError::InvalidInput(_))),
            "{id:?}: {purged:?}"
        );
    }
    // Unusual but legal ids stay distinct from their look-alikes.
    let t = unique("odd");
    let ids = ["a:b", "a_b", "a@b", "a+b", "a=b", "a.b", "A:B"];
    for (i, id) in ids.iter().enumerate() {
        let k = SessionKey::new(&t, *id, *id, *id).unwrap();
        let mut s = AgentState::new();
        s.extensions.insert("i".into(), json!(i));
        store.save(&k, &s, None).await.unwrap();
    }
    for (i, id) in ids.iter().enumerate() {
        let k = SessionKey::new(&t, *id, *id, *id).unwrap();
        assert_eq!(
            store.load(&k).await.unwrap().unwrap().state.extensions["i"],
            json!(i),
            "{id}"
        );
    }
    assert_eq!(
        store.list(&SessionFilter::tenant(&t)).await.unwrap().len(),
        ids.len()
    );
    // A session's search finds its own log, not a look-alike's.
    for id in ids {
        let k = SessionKey::new(&t, id, id, id).unwrap();
        let said = format!("lookalike {id}");
        store.append(&k, &[Message::user(said)]).await.unwrap();
    }
    for id in ids {
        let k = SessionKey::new(&t, id, id, id).unwrap();
        let hits = store
            .search(&SearchQuery::session(k.clone(), "lookalike"))
            .await
            .unwrap();
        assert_eq!(hits.len(), 1, "{id}: {hits:?}");
        assert_eq!(hits[0].key, k);
    }
    let long = "x".repeat(ctxkeeper_store::state::MAX_IDENTIFIER_LEN);
    let k = SessionKey::new(&long, &long, &long, &long).unwrap();
    store.save(&k, &AgentState::new(), None).await.unwrap();
    assert!(store.load(&k).await.unwrap().is_some());
    store
        .append(&k, &[Message::user("lookalike")])
        .await
        .unwrap();
    let hits = store
        .search(&SearchQuery::session(k.clone(), "lookalike"))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    store.delete(&k).await.unwrap();
}
