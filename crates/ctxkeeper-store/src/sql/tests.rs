//! The SQL stores' own tests: URLs and commit modes, the group commit, search indexing and
//! migrations of databases older builds wrote. The conformance suites are in `tests/`.

use std::time::Duration;

use super::group::group_shapes_sql;
use super::open::{SqliteSync, sqlite_file, sqlite_url};
use super::search::INDEX_BATCH;
use super::*;
use crate::generations::split;
use crate::session::{Commit, Committed, HistoryPage, SearchHit, SearchQuery, SessionStore};
use crate::state::AgentState;
use crate::time::now_ms;

#[test]
fn sqlite_urls_take_a_commit_mode() {
    let url = |u: &str| sqlite_url(u).map_err(|e| e.to_string());
    assert_eq!(
        url("sqlite://:memory:"),
        Ok(("sqlite://:memory:?mode=rwc".to_string(), SqliteSync::Full))
    );
    assert_eq!(
        url("sqlite://:memory:?synchronous=NORMAL&cache=shared"),
        Ok((
            "sqlite://:memory:?cache=shared&mode=rwc".to_string(),
            SqliteSync::Normal
        ))
    );
    assert_eq!(
        url("sqlite://:memory:?mode=ro&synchronous=full").map(|(_, s)| s),
        Ok(SqliteSync::Full)
    );
    let bad = url("sqlite://:memory:?synchronous=off");
    assert!(
        bad.as_ref().is_err_and(|e| e.contains("expected full")),
        "{bad:?}"
    );
}

#[test]
fn only_a_writable_database_file_gets_a_writer_thread() {
    let file = |url: &str| sqlite_url(url).map(|(sqlx_url, _)| sqlite_file(&sqlx_url));
    let dir = std::env::temp_dir();
    let path = dir.join("ctxkeeper-writer-thread.db");
    assert_eq!(
        file(&format!("sqlite://{}", path.display())).ok().flatten(),
        Some(path.clone())
    );
    assert_eq!(
        file(&format!("sqlite://{}?synchronous=normal", path.display()))
            .ok()
            .flatten(),
        Some(path.clone())
    );
    for url in [
        "sqlite://:memory:".to_string(),
        "sqlite://:memory:?cache=shared".to_string(),
        format!("sqlite://{}?mode=memory&cache=shared", path.display()),
        format!("sqlite://{}?mode=ro", path.display()),
    ] {
        assert_eq!(file(&url).ok().flatten(), None, "{url}");
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_commit_mode_reaches_every_connection() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    for (query, expected) in [("", 2i64), ("?synchronous=normal", 1)] {
        let path = dir.path().join(format!("s{expected}.db"));
        let store = SqlStore::connect(&format!("sqlite://{}{query}", path.display())).await?;
        // SQLite reports FULL as 2 and NORMAL as 1.
        let mode: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&store.pool)
            .await?;
        assert_eq!(mode, expected, "{query}");
        // Statement journals in memory (MEMORY is 2).
        let temp_store: i64 = sqlx::query_scalar("PRAGMA temp_store")
            .fetch_one(&store.pool)
            .await?;
        assert_eq!(temp_store, 2);
    }
    Ok(())
}

fn pending(session: &str, expected: Option<u64>, said: &[&str]) -> PendingCommit {
    let messages: Vec<Message> = said.iter().map(|text| Message::user(*text)).collect();
    let mut state = AgentState::new();
    state.context = messages.clone();
    PendingCommit {
        key: SessionKey::simple(session).expect("a valid session id"),
        split: split(&state).expect("a state serializes"),
        write: ContextWrite::Generation,
        expected,
        rows: log_rows(&messages).expect("messages serialize"),
    }
}

/// The group commits under test: the task on `sqlx`'s connection (in-memory databases)
/// and the writer thread (database files).
#[cfg(feature = "sqlite")]
#[derive(Debug, Clone, Copy)]
enum Via {
    Task,
    Thread,
}

#[cfg(feature = "sqlite")]
const EVERY_COMMITTER: [Via; 2] = [Via::Task, Via::Thread];

/// Commits `group` as one group through `via`, on the store's database at `path`.
#[cfg(feature = "sqlite")]
async fn commit_group_via(
    store: &SqlStore,
    path: &std::path::Path,
    via: Via,
    group: &[PendingCommit],
) -> Vec<Result<Committed, StoreError>> {
    match via {
        Via::Task => store.commit_group(None, group).await,
        Via::Thread => {
            let mut conn = rusqlite::Connection::open(path).expect("the database opens");
            writer_thread::commit_group(&mut conn, group, now_ms())
        }
    }
}

async fn logged(store: &SqlStore, session: &str) -> Vec<(u64, String)> {
    let key = SessionKey::simple(session).expect("a valid session id");
    let page = store
        .history(&key, HistoryPage::last(100))
        .await
        .expect("the log reads back");
    page.iter().map(|e| (e.seq, e.message.text())).collect()
}

async fn count(store: &SqlStore, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&store.pool)
        .await
        .expect("the count reads")
}

async fn unindexed(store: &SqlStore) -> i64 {
    count(store, "SELECT COUNT(*) FROM ctxkeeper_log").await
        - count(store, "SELECT COUNT(*) FROM ctxkeeper_log_fts").await
}

/// Logged messages reach the full-text index in batches, not one commit at a time, and
/// a search first indexes whatever is waiting, so it always finds every logged message.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_log_is_indexed_in_batches_and_before_every_search()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store =
        SqlStore::connect(&format!("sqlite://{}", dir.path().join("i.db").display())).await?;
    let key = SessionKey::simple("indexed")?;
    let first = store
        .save_and_append(&key, &AgentState::new(), None, &[Message::user("a wombat")])
        .await?;
    let hits = store
        .search(&SearchQuery::session(key.clone(), "wombat"))
        .await?;
    assert_eq!(hits.len(), 1);
    assert_eq!(unindexed(&store).await, 0);

    // A few more messages wait for their batch...
    let second = store
        .save_and_append(
            &key,
            &AgentState::new(),
            Some(first.version),
            &[Message::user("a numbat"), Message::assistant("noted")],
        )
        .await?;
    assert_eq!(unindexed(&store).await, 2);
    // ...and a search indexes them before it reads the index.
    let hits = store
        .search(&SearchQuery::session(key.clone(), "numbat"))
        .await?;
    assert_eq!(hits.iter().map(|h| h.seq).collect::<Vec<_>>(), [2]);
    assert_eq!(unindexed(&store).await, 0);

    // A batch's worth of messages is indexed by the group commit, with no search.
    let many: Vec<Message> = (0..INDEX_BATCH)
        .map(|i| Message::user(format!("message {i} about a bilby")))
        .collect();
    store
        .save_and_append(&key, &AgentState::new(), Some(second.version), &many)
        .await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while unindexed(&store).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the batch was not indexed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Deleting the session takes its entries out of the index, indexed or not yet.
    store
        .append(&key, &[Message::user("one more bilby")])
        .await?;
    assert_eq!(unindexed(&store).await, 1);
    assert!(store.delete(&key).await?);
    assert_eq!(
        count(&store, "SELECT COUNT(*) FROM ctxkeeper_log_fts").await,
        0
    );
    assert!(
        store
            .search(&SearchQuery::tenant("default", "bilby"))
            .await?
            .is_empty()
    );
    Ok(())
}

/// A SQLite database at `path` written by schema versions 1 to `version` (as an older
/// build left it), its URL and a pool on it.
#[cfg(feature = "sqlite")]
async fn database_at_version(
    path: &std::path::Path,
    version: usize,
) -> Result<(String, AnyPool), Box<dyn std::error::Error>> {
    use sqlx::Executor;
    sqlx::any::install_default_drivers();
    let url = format!("sqlite://{}", path.display());
    let pool = AnyPool::connect(&sqlite_url(&url)?.0).await?;
    pool.execute("CREATE TABLE ctxkeeper_schema (version BIGINT NOT NULL)")
        .await?;
    for (index, statements) in Dialect::Sqlite.migrations()[..version].iter().enumerate() {
        for statement in *statements {
            pool.execute(*statement).await?;
        }
        sqlx::query("INSERT INTO ctxkeeper_schema (version) VALUES (?)")
            .bind(index as i64 + 1)
            .execute(&pool)
            .await?;
    }
    Ok((url, pool))
}

/// The group commit reads its sessions through their primary keys among many stored ones
/// (a scan would cost every commit more as the database grows).
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_group_commit_finds_its_sessions_by_key() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store =
        SqlStore::connect(&format!("sqlite://{}", dir.path().join("k.db").display())).await?;
    for i in 0..300 {
        let key = SessionKey::simple(format!("stored-{i}"))?;
        store
            .save_and_append(&key, &AgentState::new(), None, &[Message::user("x")])
            .await?;
    }
    for keys in [1, 2, 32] {
        let plan = format!("EXPLAIN QUERY PLAN {}", group_shapes_sql(keys));
        let sessions = (0..keys)
            .map(|i| SessionKey::simple(format!("s{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut query = sqlx::query(AssertSqlSafe(plan));
        for key in &sessions {
            query = bind_key(query, key);
        }
        let rows = query.fetch_all(&store.pool).await?;
        let steps: Vec<String> = rows
            .iter()
            .map(|row| row.try_get::<String, _>(3))
            .collect::<Result<_, _>>()?;
        assert!(
            steps.iter().any(|step| step.starts_with("SEARCH s USING")),
            "{keys} keys: {steps:?}"
        );
        assert!(
            !steps.iter().any(|step| step.starts_with("SCAN s")),
            "{keys} keys: {steps:?}"
        );
    }
    Ok(())
}

/// A database indexed row by row (version 4) keeps its index and indexes what comes next
/// in batches.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_version_4_database_keeps_its_index_and_indexes_in_batches()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (url, pool) = database_at_version(&dir.path().join("v4.db"), 4).await?;
    for (seq, text) in [(1, "an echidna"), (2, "a platypus")] {
        let message = Message::user(text);
        sqlx::query("INSERT INTO ctxkeeper_log (tenant, user_id, agent, session, seq, at, message, body) VALUES ('default', 'default', 'default', 'old', ?, 1, ?, ?)")
                .bind(seq as i64)
                .bind(serde_json::to_string(&message)?)
                .bind(indexed_body(&message))
                .execute(&pool)
                .await?;
    }
    sqlx::query("INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, log_len, created_at, updated_at) VALUES ('default', 'default', 'default', 'old', 2, 1, 1)")
            .execute(&pool)
            .await?;
    pool.close().await;

    let store = SqlStore::connect(&url).await?;
    assert_eq!(
        count(&store, "SELECT MAX(version) FROM ctxkeeper_schema").await,
        5
    );
    assert_eq!(
        count(&store, "SELECT upto FROM ctxkeeper_log_indexed").await,
        2
    );
    assert_eq!(unindexed(&store).await, 0, "version 4 indexed its rows");
    let old = SessionKey::simple("old")?;
    store.append(&old, &[Message::user("a quoll")]).await?;
    assert_eq!(unindexed(&store).await, 1);
    let hits = store
        .search(&SearchQuery::session(old.clone(), "platypus quoll"))
        .await?;
    let mut seqs: Vec<u64> = hits.iter().map(|h| h.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, [2, 3]);
    assert!(store.delete(&old).await?);
    assert_eq!(
        count(&store, "SELECT COUNT(*) FROM ctxkeeper_log_fts").await,
        0
    );
    Ok(())
}

/// The group commit writes on a connection of its own, kept from one group to the next;
/// what pooled connections write in between (a deletion here) is what its next group
/// reads and judges against.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_group_commit_connection_sees_what_pooled_connections_wrote()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store =
        SqlStore::connect(&format!("sqlite://{}", dir.path().join("w.db").display())).await?;
    let key = SessionKey::simple("kept")?;
    let first = store
        .save_and_append(&key, &AgentState::new(), None, &[Message::user("one")])
        .await?;
    let second = store
        .save_and_append(
            &key,
            &AgentState::new(),
            Some(first.version),
            &[Message::user("two")],
        )
        .await?;
    assert_eq!(second.version, 2);
    assert!(store.delete(&key).await?, "the pool deletes the session");
    // A save still expecting version 2 finds the session gone.
    let stale = store
        .save_and_append(&key, &AgentState::new(), Some(2), &[Message::user("late")])
        .await;
    assert!(
        matches!(
            stale,
            Err(StoreError::Conflict {
                expected: Some(2),
                actual: None
            })
        ),
        "{stale:?}"
    );
    // A save that starts the session anew succeeds and numbers its log from 1.
    let fresh = store
        .save_and_append(&key, &AgentState::new(), None, &[Message::user("again")])
        .await?;
    assert_eq!(fresh.version, 1);
    assert_eq!(logged(&store, "kept").await, vec![(1, "again".to_string())]);
    Ok(())
}

/// One group, many sessions: every winner gets its state and numbered log entries, the
/// one stale save gets a conflict and leaves nothing behind.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_group_commit_settles_each_save_on_its_own() -> Result<(), Box<dyn std::error::Error>> {
    for via in EVERY_COMMITTER {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("g.db");
        let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await?;
        for session in ["a", "b", "stale"] {
            let key = SessionKey::simple(session)?;
            store
                .save_and_append(&key, &AgentState::new(), None, &[Message::user("hello")])
                .await?;
        }
        let group = [
            pending("a", Some(1), &["a1", "a2"]),
            pending("stale", Some(7), &["lost"]),
            pending("b", Some(1), &[]),
            pending("new", None, &["n1"]),
        ];
        let outcomes = commit_group_via(&store, &path, via, &group).await;
        let summary: Vec<_> = outcomes
            .iter()
            .map(|o| {
                o.as_ref()
                    .map(|c| (c.version, c.appended.map(|a| (a.first_seq, a.last_seq))))
                    .map_err(|e| e.to_string())
            })
            .collect();
        assert_eq!(
            summary,
            [
                Ok((2, Some((2, 3)))),
                Err("version conflict: expected 7, found 1".to_string()),
                Ok((2, None)),
                Ok((1, Some((1, 1)))),
            ]
        );
        assert_eq!(
            logged(&store, "a").await,
            [(1, "hello".into()), (2, "a1".into()), (3, "a2".into())]
        );
        assert_eq!(logged(&store, "stale").await, [(1, "hello".into())]);
        assert_eq!(logged(&store, "new").await, [(1, "n1".into())]);
        let a = store
            .load(&SessionKey::simple("a")?)
            .await?
            .ok_or("a has a state")?;
        assert_eq!((a.version, a.state.context.len()), (2, 2));
        let stale = store
            .load(&SessionKey::simple("stale")?)
            .await?
            .ok_or("stale has a state")?;
        assert_eq!((stale.version, stale.state.context.len()), (1, 0));
    }
    Ok(())
}

/// The statements for a whole group (not the one-save-at-a-time fallback) write first
/// saves, appends and new generations of distinct sessions, and judge a stale one.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_group_of_distinct_sessions_is_written_in_one_statement_per_table()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store =
        SqlStore::connect(&format!("sqlite://{}", dir.path().join("g.db").display())).await?;
    for session in ["grow", "compact", "stale"] {
        let mut state = AgentState::new();
        state.context = vec![Message::user("first")];
        state.trail = vec![serde_json::json!("f1")];
        store
            .save_and_append(
                &SessionKey::simple(session)?,
                &state,
                None,
                &[Message::user("first")],
            )
            .await?;
    }
    let mut grow = pending("grow", Some(1), &["second", "third"]);
    let mut delta = AgentState::new();
    delta.context = vec![Message::user("second"), Message::user("third")];
    delta.trail = vec![serde_json::json!("f2")];
    grow.split = split(&delta)?;
    grow.write = ContextWrite::Append {
        context: 1,
        trail: 1,
    };
    let group = [
        grow,
        pending("compact", Some(1), &["summary"]),
        pending("stale", Some(3), &["lost"]),
        pending("fresh", None, &["hello"]),
    ];
    let mut conn = store.pool.acquire().await?;
    let outcomes = store
        .group_batched(&mut conn, &group, now_ms())
        .await
        .map_err(|failure| failure.err)?;
    drop(conn);
    let summary: Vec<_> = outcomes
        .iter()
        .map(|o| {
            o.as_ref()
                .map(|c| (c.version, c.appended.map(|a| (a.first_seq, a.last_seq))))
                .map_err(|e| e.is_conflict())
        })
        .collect();
    assert_eq!(
        summary,
        [
            Ok((2, Some((2, 3)))),
            Ok((2, Some((2, 2)))),
            Err(true),
            Ok((1, Some((1, 1)))),
        ]
    );
    let grown = store
        .load(&SessionKey::simple("grow")?)
        .await?
        .ok_or("saved")?;
    assert_eq!(
        grown.state.context,
        vec![
            Message::user("first"),
            Message::user("second"),
            Message::user("third")
        ]
    );
    assert_eq!(
        grown.state.trail,
        vec![serde_json::json!("f1"), serde_json::json!("f2")]
    );
    let compacted = store
        .load(&SessionKey::simple("compact")?)
        .await?
        .ok_or("saved")?;
    assert_eq!(compacted.state.context, vec![Message::user("summary")]);
    assert_eq!(compacted.generation, Some(2));
    assert_eq!(logged(&store, "stale").await, [(1, "first".into())]);
    assert_eq!(logged(&store, "fresh").await, [(1, "hello".into())]);
    Ok(())
}

/// An error in the middle of one save (here its context insert meets a row planted
/// where it writes, after its swap already moved the version) undoes that save alone:
/// the saves before and after it in the group commit.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn an_error_inside_one_save_fails_only_that_save() -> Result<(), Box<dyn std::error::Error>> {
    for via in EVERY_COMMITTER {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("g.db");
        let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await?;
        for session in ["a", "bad", "b"] {
            let key = SessionKey::simple(session)?;
            let mut state = AgentState::new();
            state.context = vec![Message::user("first")];
            store
                .save_and_append(&key, &state, None, &[Message::user("first")])
                .await?;
        }
        sqlx::query("INSERT INTO ctxkeeper_context (tenant, user_id, agent, session, generation, idx, item) VALUES ('default', 'default', 'default', 'bad', 1, 1, '{}')")
                .execute(&store.pool)
                .await?;
        let append = |session: &str| {
            let mut commit = pending(session, Some(1), &["second"]);
            commit.write = ContextWrite::Append {
                context: 1,
                trail: 0,
            };
            commit
        };
        let outcomes = commit_group_via(
            &store,
            &path,
            via,
            &[append("a"), append("bad"), append("b")],
        )
        .await;
        assert_eq!(outcomes[0].as_ref().map(|c| c.version).ok(), Some(2));
        assert!(
            matches!(&outcomes[1], Err(err) if !err.is_conflict()),
            "{:?}",
            outcomes[1]
        );
        assert_eq!(outcomes[2].as_ref().map(|c| c.version).ok(), Some(2));
        for session in ["a", "b"] {
            assert_eq!(
                logged(&store, session).await,
                [(1, "first".into()), (2, "second".into())]
            );
            let loaded = store
                .load(&SessionKey::simple(session)?)
                .await?
                .ok_or("saved")?;
            assert_eq!(loaded.state.context.len(), 2);
        }
        assert_eq!(logged(&store, "bad").await, [(1, "first".into())]);
        let bad = store
            .load(&SessionKey::simple("bad")?)
            .await?
            .ok_or("saved")?;
        assert_eq!((bad.version, bad.state.context.len()), (1, 1));
    }
    Ok(())
}

/// Many sessions committing at once through the group commit, with stale saves of some
/// of them among them: every current save commits with its log entries, every stale one
/// fails alone and leaves nothing behind.
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_of_many_sessions_settle_each_on_its_own()
-> Result<(), Box<dyn std::error::Error>> {
    const SESSIONS: usize = 48;
    let dir = tempfile::tempdir()?;
    let store =
        SqlStore::connect(&format!("sqlite://{}", dir.path().join("g.db").display())).await?;
    let key = |i: usize| SessionKey::simple(format!("s{i}")).expect("a valid id");
    for i in 0..SESSIONS {
        store
            .save_and_append(&key(i), &AgentState::new(), None, &[Message::user("hello")])
            .await?;
    }
    let mut tasks = Vec::new();
    for i in 0..SESSIONS {
        for (expected, text) in [(1, "current"), (9, "stale")] {
            if text == "stale" && i % 4 != 0 {
                continue;
            }
            let store = store.clone();
            let key = key(i);
            tasks.push(tokio::spawn(async move {
                let mut state = AgentState::new();
                state.context = vec![Message::user(text)];
                let outcome = store
                    .save_and_append(&key, &state, Some(expected), &[Message::user(text)])
                    .await;
                (text, outcome)
            }));
        }
    }
    let (mut committed, mut conflicts) = (0, 0);
    for task in tasks {
        match task.await? {
            ("current", Ok(c)) => {
                assert_eq!(c.version, 2);
                committed += 1;
            }
            ("stale", Err(err)) if err.is_conflict() => conflicts += 1,
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!((committed, conflicts), (SESSIONS, SESSIONS / 4));
    for i in 0..SESSIONS {
        let page = store.history(&key(i), HistoryPage::last(10)).await?;
        let texts: Vec<_> = page.iter().map(|e| (e.seq, e.message.text())).collect();
        assert_eq!(texts, [(1, "hello".into()), (2, "current".into())]);
        let loaded = store.load(&key(i)).await?.ok_or("saved")?;
        assert_eq!(loaded.version, 2);
        assert_eq!(loaded.state.context, vec![Message::user("current")]);
    }
    Ok(())
}

/// Commits reach the database file while the store stays open: the write-ahead log is
/// checkpointed in the background after a group, not only once it holds 1,000 pages (the
/// group commit's connection leaves checkpoints to [`checkpoint_in_background`]).
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn commits_reach_the_database_file_in_the_background()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("g.db");
    let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await?;
    let key = SessionKey::simple("kept")?;
    let mut state = AgentState::new();
    state.context = vec![Message::user("in the file")];
    store
        .save_and_append(&key, &state, None, &[Message::user("in the file")])
        .await?;
    // A copy of the database file alone, without its log, holds what was committed once
    // a checkpoint has copied it there.
    let copy = dir.path().join("copy.db");
    let mut found = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = std::fs::remove_file(&copy);
        std::fs::copy(&path, &copy)?;
        let copied = SqlStore::connect(&format!("sqlite://{}", copy.display())).await?;
        found = copied.load(&key).await?;
        if found.is_some() {
            break;
        }
    }
    let found = found.ok_or("the save never reached the database file")?;
    assert_eq!(found.state.context, vec![Message::user("in the file")]);
    Ok(())
}

/// Under writes that never pause, the write-ahead log is still copied whole and started
/// over, so its file stays smaller than what was written (a checkpoint that only copies
/// beside a busy writer never catches up, and the log grows without bound).
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_stays_small_under_writes_that_never_pause()
-> Result<(), Box<dyn std::error::Error>> {
    const WRITERS: usize = 8;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("g.db");
    let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await?;
    let until = std::time::Instant::now() + Duration::from_millis(2_000);
    let text = "a long tool output line ".repeat(400);
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let (store, text) = (store.clone(), text.clone());
        tasks.push(tokio::spawn(async move {
            let key = SessionKey::simple(format!("w{writer}")).expect("a valid id");
            let (mut version, mut written) = (None, 0u64);
            while std::time::Instant::now() < until {
                let said = [Message::user(text.as_str())];
                let mut state = AgentState::new();
                state.context = said.to_vec();
                let write = match version {
                    None => ContextWrite::Generation,
                    Some(v) => ContextWrite::Append {
                        context: usize::try_from(v).expect("small"),
                        trail: 0,
                    },
                };
                let committed = store
                    .commit(
                        &key,
                        Commit {
                            state: &state,
                            write,
                            expected: version,
                            messages: &said,
                        },
                    )
                    .await?;
                version = Some(committed.version);
                // The message is written twice: in the context and in the log.
                written += 2 * text.len() as u64;
            }
            Ok::<u64, StoreError>(written)
        }));
    }
    let mut written = 0;
    for task in tasks {
        written += task.await??;
    }
    let log = std::fs::metadata(dir.path().join("g.db-wal"))?.len();
    assert!(
        written > 4 << 20,
        "the writes should have produced a large log: {written} bytes"
    );
    // A log never started over holds every page written: more than twice the text (the
    // pages' headers, the indexes). Started over every round, about half of it.
    assert!(
        log < written,
        "the write-ahead log grew to {log} bytes for {written} bytes written"
    );
    Ok(())
}

/// A session twice in one group: the second save sees the first (and loses against it
/// when it expected the same version).
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_session_twice_in_a_group_is_saved_in_order() -> Result<(), Box<dyn std::error::Error>> {
    for via in EVERY_COMMITTER {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("g.db");
        let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await?;
        let group = [
            pending("s", None, &["one"]),
            pending("s", Some(1), &["two"]),
            pending("s", Some(1), &["late"]),
        ];
        let outcomes = commit_group_via(&store, &path, via, &group).await;
        assert_eq!(outcomes[0].as_ref().map(|c| c.version).ok(), Some(1));
        assert_eq!(outcomes[1].as_ref().map(|c| c.version).ok(), Some(2));
        assert!(
            matches!(&outcomes[2], Err(err) if err.is_conflict()),
            "{:?}",
            outcomes[2]
        );
        assert_eq!(
            logged(&store, "s").await,
            [(1, "one".into()), (2, "two".into())]
        );
    }
    Ok(())
}

/// A database written by schema version 1 (state inside the session row) opens, migrates
/// and keeps its state.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_version_1_database_migrates() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (url, pool) = database_at_version(&dir.path().join("v1.db"), 1).await?;
    let mut state = AgentState::new();
    state
        .extensions
        .insert("plan".into(), serde_json::json!("v1"));
    sqlx::query("INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, version, state, log_len, created_at, updated_at) VALUES ('default', 'default', 'default', 'old', 3, ?, 0, 1, 1)")
            .bind(state.to_json()?)
            .execute(&pool)
            .await?;
    pool.close().await;

    let store = SqlStore::connect(&url).await?;
    let key = SessionKey::simple("old")?;
    let loaded = store.load(&key).await?.ok_or("state lost in migration")?;
    assert_eq!((loaded.version, loaded.state), (3, state));
    assert_eq!(store.save(&key, &AgentState::new(), Some(3)).await?, 4);
    Ok(())
}

/// A version 3 database (the full-text index without scopes) migrates to version 4: its
/// logged messages are indexed again with their tenant and session, searches stay inside
/// their scope, and new appends and deletes keep the index in step.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_version_3_database_migrates_its_search_index() -> Result<(), Box<dyn std::error::Error>>
{
    let dir = tempfile::tempdir()?;
    let (url, pool) = database_at_version(&dir.path().join("v3.db"), 3).await?;
    let logged = [
        ("a", 1, "the quokka crossed the road"),
        ("a", 2, "nothing to see"),
        ("b", 1, "another quokka, elsewhere"),
    ];
    for (session, seq, text) in logged {
        let message = Message::user(text);
        sqlx::query("INSERT INTO ctxkeeper_log (tenant, user_id, agent, session, seq, at, message, body) VALUES ('default', 'default', 'default', ?, ?, 1, ?, ?)")
                .bind(session)
                .bind(seq as i64)
                .bind(serde_json::to_string(&message)?)
                .bind(indexed_body(&message))
                .execute(&pool)
                .await?;
    }
    for (session, logged) in [("a", 2), ("b", 1)] {
        sqlx::query("INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, log_len, created_at, updated_at) VALUES ('default', 'default', 'default', ?, ?, 1, 1)")
                .bind(session)
                .bind(logged)
                .execute(&pool)
                .await?;
    }
    pool.close().await;

    let store = SqlStore::connect(&url).await?;
    let version: i64 = sqlx::query_scalar("SELECT MAX(version) FROM ctxkeeper_schema")
        .fetch_one(&store.pool)
        .await?;
    assert_eq!(version, 5);
    let (a, b) = (SessionKey::simple("a")?, SessionKey::simple("b")?);
    let found = |hits: Vec<SearchHit>| -> Vec<(String, u64)> {
        let mut found: Vec<_> = hits
            .into_iter()
            .map(|h| (h.key.session().to_string(), h.seq))
            .collect();
        found.sort();
        found
    };
    let in_a = store
        .search(&SearchQuery::session(a.clone(), "quokka"))
        .await?;
    assert_eq!(found(in_a), [("a".to_string(), 1)]);
    let in_tenant = store
        .search(&SearchQuery::tenant("default", "quokka"))
        .await?;
    assert_eq!(
        found(in_tenant),
        [("a".to_string(), 1), ("b".to_string(), 1)]
    );
    assert!(
        store
            .search(&SearchQuery::tenant("other", "quokka"))
            .await?
            .is_empty()
    );
    store.append(&b, &[Message::user("a third quokka")]).await?;
    let in_b = store
        .search(&SearchQuery::session(b.clone(), "quokka"))
        .await?;
    assert_eq!(found(in_b), [("b".to_string(), 1), ("b".to_string(), 2)]);
    assert!(store.delete(&b).await?);
    let in_tenant = store
        .search(&SearchQuery::tenant("default", "quokka"))
        .await?;
    assert_eq!(found(in_tenant), [("a".to_string(), 1)]);
    let indexed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ctxkeeper_log_fts")
        .fetch_one(&store.pool)
        .await?;
    assert_eq!(indexed, 2, "the deleted session's entries left the index");
    Ok(())
}

#[test]
fn postgres_placeholders_are_numbered_outside_strings() {
    assert_eq!(
        Dialect::Postgres.sql("SELECT '?' FROM t WHERE a = ? AND b = ?"),
        "SELECT '?' FROM t WHERE a = $1 AND b = $2"
    );
    assert_eq!(Dialect::MySql.sql("a = ?"), "a = ?");
}
