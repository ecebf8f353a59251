//! What a SQLite store gives back once it goes quiet: its pool closes the connections (and
//! with them `sqlx`'s threads) unused for the idle timeout, and the group commit's writer
//! thread calls the idle hook once after its last group.

use std::sync::mpsc;
use std::sync::{Mutex, Once};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use super::SqlStore;
use super::open::{SQLITE_IDLE_TIMEOUT, sqlite_in_memory, sqlite_url};
use super::writer_thread::{IDLE_AFTER, next_save};
use crate::session::SessionStore;
use crate::state::{AgentState, SessionKey};

/// The threads the idle hook was called on, in order (every test of this binary shares the
/// hook: each test counts only its own threads).
static IDLE_CALLS: Mutex<Vec<(ThreadId, Option<String>)>> = Mutex::new(Vec::new());

fn record_idle_call() {
    let thread = std::thread::current();
    let call = (thread.id(), thread.name().map(str::to_string));
    IDLE_CALLS.lock().expect("not poisoned").push(call);
}

fn record_idle_calls() {
    static SET: Once = Once::new();
    SET.call_once(|| assert!(crate::on_thread_idle(record_idle_call)));
}

fn idle_calls(on: impl Fn(&(ThreadId, Option<String>)) -> bool) -> usize {
    IDLE_CALLS
        .lock()
        .expect("not poisoned")
        .iter()
        .filter(|call| on(call))
        .count()
}

/// Waits until `done` holds; false after a minute (a generous bound for a loaded machine,
/// never a speed assertion).
async fn eventually(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

#[test]
fn only_an_in_memory_database_keeps_its_idle_connections() {
    let in_memory = |url: &str| sqlite_url(url).map(|(sqlx_url, _)| sqlite_in_memory(&sqlx_url));
    for url in [
        "sqlite://:memory:",
        "sqlite://:memory:?cache=shared",
        "sqlite:///tmp/s.db?mode=memory&cache=shared",
    ] {
        assert_eq!(in_memory(url).ok(), Some(true), "{url}");
    }
    for url in ["sqlite:///tmp/s.db", "sqlite:///tmp/s.db?mode=ro"] {
        assert_eq!(in_memory(url).ok(), Some(false), "{url}");
    }
}

#[tokio::test]
async fn a_database_files_pool_closes_the_connections_left_idle()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let store = SqlStore::connect(&url).await?;
    assert_eq!(
        store.pool.options().get_idle_timeout(),
        Some(SQLITE_IDLE_TIMEOUT)
    );
    // The same store with a short timeout: used, then left alone, its pool empties (a closed
    // connection's thread ends: sqlx's worker returns on `Shutdown`), and the next use opens
    // a connection again.
    let store = SqlStore::connect_closing_idle(&url, Duration::from_millis(300)).await?;
    let key = SessionKey::simple("idle")?;
    store.save(&key, &AgentState::new(), None).await?;
    assert!(store.load(&key).await?.is_some());
    assert!(store.pool.size() > 0);
    assert!(
        eventually(|| store.pool.size() == 0).await,
        "{} connections still open",
        store.pool.size()
    );
    assert!(store.load(&key).await?.is_some());
    Ok(())
}

#[test]
fn the_writer_calls_the_idle_hook_once_each_time_it_goes_quiet() {
    record_idle_calls();
    let (queue, pending) = mpsc::channel::<u32>();
    let (done, received) = mpsc::channel();
    let writer = std::thread::spawn(move || {
        let mut worked = false;
        while let Some(save) = next_save(&pending, &mut worked) {
            done.send(save).expect("the test waits");
        }
    });
    let on_writer = |id: ThreadId| move |call: &(ThreadId, Option<String>)| call.0 == id;
    let id = writer.thread().id();
    let wait_for = |calls: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while idle_calls(on_writer(id)) < calls {
            assert!(Instant::now() < deadline, "the hook was not called");
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // Before any work, waiting is not going quiet.
    std::thread::sleep(IDLE_AFTER + Duration::from_millis(300));
    assert_eq!(idle_calls(on_writer(id)), 0);

    queue.send(1).expect("the writer runs");
    assert_eq!(received.recv().ok(), Some(1));
    wait_for(1);
    // Once per quiet spell, not again while it lasts.
    std::thread::sleep(IDLE_AFTER * 2 + Duration::from_millis(300));
    assert_eq!(idle_calls(on_writer(id)), 1);

    queue.send(2).expect("the writer runs");
    queue.send(3).expect("the writer runs");
    assert_eq!(received.iter().take(2).collect::<Vec<_>>(), [2, 3]);
    wait_for(2);
    drop(queue);
    writer.join().expect("the writer ends with its queue");
    assert_eq!(idle_calls(on_writer(id)), 2);
}

#[tokio::test]
async fn a_stores_writer_thread_calls_the_idle_hook_after_its_commits()
-> Result<(), Box<dyn std::error::Error>> {
    record_idle_calls();
    let on_writer =
        |call: &(ThreadId, Option<String>)| call.1.as_deref() == Some("ctxkeeper-sqlite-writer");
    let dir = tempfile::tempdir()?;
    let store =
        SqlStore::connect(&format!("sqlite://{}", dir.path().join("s.db").display())).await?;
    let before = idle_calls(on_writer);
    store
        .save(&SessionKey::simple("quiet")?, &AgentState::new(), None)
        .await?;
    assert!(eventually(|| idle_calls(on_writer) > before).await);
    Ok(())
}
