//! SQLite's group commit on a thread of its own, calling SQLite in process.
//!
//! Through `sqlx`, every statement is a round trip to the connection's own thread: the
//! committing task wakes that thread, which wakes the task again when it is done, and on a
//! busy machine each wake-up waits for a core. Under 32 concurrent sessions a group of about
//! 13 saves spent 2.2 ms in its two round trips of which SQLite itself used about half, and
//! the writer was the one thing every request waited for. Here one thread owns a connection
//! to the database file (`rusqlite`, the same bundled SQLite as `sqlx`'s), receives the
//! saves, and runs each group start to end with no hand-over: `BEGIN IMMEDIATE`, each save in
//! a savepoint (its compare-and-swap judged on what it reads, so a lost swap or a failed
//! statement fails that save alone and a session saved twice in a group sees its first
//! save), `COMMIT`; statements are prepared once and kept.
//!
//! The thread takes this process's writer slot ([`SqlStore`]'s `writers`) for each group, as
//! every other write does, tells the background checkpoint after each group, and indexes the
//! log for search in batches ([`INDEX_BATCH`]) like the `sqlx` group commit it replaces for
//! databases in a file. An in-memory database, which only `sqlx`'s pool sees, and a
//! read-only one (whose saves must fail) keep that one.
//!
//! A thread that owns memory of its own must give it back when it goes quiet: once no save has
//! arrived for [`IDLE_AFTER`] after a group, the thread calls the process's idle hook
//! ([`crate::on_thread_idle`]; the `ctxkeeper` binary's returns what the thread's allocator
//! heap holds freed), once, and then waits for the next save.
//!
//! ```text
//! sessions' saves ──queue──▶ writer thread: BEGIN IMMEDIATE
//!                                           SAVEPOINT · read · judge · write · RELEASE  (each save)
//!                                           COMMIT ──▶ replies, checkpoint signal
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use rusqlite::{Connection, ToSql, params, params_from_iter};
use tokio::sync::oneshot;

use super::PendingCommit;
use super::group::{
    Found, MAX_GROUP, ROW_OF_EIGHT, ROW_OF_SEVEN, SESSION_UPSERT, STATE_UPSERT, Win, found_from,
    group_shapes_sql, judge_group,
};
use super::open::SqliteSync;
use super::save::{CONTEXT_INSERT, LOG_INSERT};
use super::search::{INDEX_BATCH, INDEX_LOG};
use crate::time::now_ms;
use crate::{Committed, SessionKey, StoreError};

type Reply = oneshot::Sender<Result<Committed, StoreError>>;

/// The queue to the writer thread. The thread ends when the last clone is dropped.
#[derive(Debug, Clone)]
pub(super) struct WriterThread {
    queue: mpsc::Sender<(PendingCommit, Reply)>,
}

/// What the thread shares with its store.
pub(super) struct Shared {
    /// This process's SQLite writer slot.
    pub writers: Arc<tokio::sync::Mutex<()>>,
    /// Log rows not yet in the full-text index.
    pub unindexed: Arc<AtomicU64>,
    /// Told after each group (the background checkpoint).
    pub wal_grew: tokio::sync::mpsc::Sender<()>,
}

fn backend(err: rusqlite::Error) -> StoreError {
    StoreError::backend_caused("sqlite", err)
}

impl WriterThread {
    /// Opens the writer's connection to the database at `path` (already created and migrated)
    /// with the store's settings, and starts the thread.
    pub(super) fn start(
        path: PathBuf,
        synchronous: SqliteSync,
        shared: Shared,
    ) -> Result<WriterThread, StoreError> {
        let conn = Connection::open(&path).map_err(backend)?;
        conn.execute_batch(&format!(
            "PRAGMA busy_timeout = 30000; {}; PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 0;",
            synchronous.pragma()
        ))
        .map_err(backend)?;
        // Unbounded: a send never blocks the committing task.
        let (queue, pending) = mpsc::channel();
        std::thread::Builder::new()
            .name("ctxkeeper-sqlite-writer".into())
            .spawn(move || run(conn, pending, shared))
            .map_err(StoreError::from)?;
        Ok(WriterThread { queue })
    }

    pub(super) async fn commit(&self, commit: PendingCommit) -> Result<Committed, StoreError> {
        let (reply, outcome) = oneshot::channel();
        let stopped = || StoreError::backend("sqlite", "the SQLite writer thread has stopped");
        self.queue.send((commit, reply)).map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }
}

/// How long the writer waits for the next save after a group before it counts as idle and
/// calls the idle hook ([`crate::on_thread_idle`]). Under load the next save comes sooner and
/// nothing is called.
pub(super) const IDLE_AFTER: Duration = Duration::from_secs(1);

/// The next save to commit: waits at most [`IDLE_AFTER`] after work, then calls the idle
/// hook once and waits for as long as it takes. `None` once the queue is closed.
pub(super) fn next_save<T>(pending: &mpsc::Receiver<T>, worked: &mut bool) -> Option<T> {
    if *worked {
        match pending.recv_timeout(IDLE_AFTER) {
            Ok(next) => return Some(next),
            Err(RecvTimeoutError::Disconnected) => return None,
            Err(RecvTimeoutError::Timeout) => {
                *worked = false;
                crate::idle::thread_idle();
            }
        }
    }
    let next = pending.recv().ok()?;
    *worked = true;
    Some(next)
}

/// The thread: a group is every save waiting when the previous group ended (at most
/// [`MAX_GROUP`]).
fn run(mut conn: Connection, pending: mpsc::Receiver<(PendingCommit, Reply)>, shared: Shared) {
    conn.set_prepared_statement_cache_capacity(64);
    let mut group = Vec::with_capacity(MAX_GROUP);
    let mut worked = false;
    while let Some(first) = next_save(&pending, &mut worked) {
        group.push(first);
        while group.len() < MAX_GROUP
            && let Ok(next) = pending.try_recv()
        {
            group.push(next);
        }
        let (commits, replies): (Vec<_>, Vec<_>) = group.drain(..).unzip();
        let outcomes = {
            let _writer = shared.writers.blocking_lock();
            commit_group(&mut conn, &commits, now_ms())
        };
        let logged: usize = commits
            .iter()
            .zip(&outcomes)
            .filter(|(_, outcome)| outcome.is_ok())
            .map(|(commit, _)| commit.rows.len())
            .sum();
        shared.unindexed.fetch_add(logged as u64, Ordering::Relaxed);
        // Full: a round is already due.
        let _ = shared.wal_grew.try_send(());
        for (reply, outcome) in replies.into_iter().zip(outcomes) {
            // A caller that gave up waiting is gone; its save stands either way.
            let _ = reply.send(outcome);
        }
        // After the replies: the saves waiting meanwhile form the next group.
        if shared.unindexed.load(Ordering::Relaxed) >= INDEX_BATCH {
            let _writer = shared.writers.blocking_lock();
            if let Err(err) = index_log(&mut conn, &shared.unindexed) {
                tracing::warn!(%err, "indexing the session log for search failed; the next search retries");
            }
        }
    }
}

/// One transaction for the group, one savepoint per save. A failed `BEGIN` or `COMMIT`
/// fails every save (nothing of the group was written).
pub(super) fn commit_group(
    conn: &mut Connection,
    group: &[PendingCommit],
    now: i64,
) -> Vec<Result<Committed, StoreError>> {
    let fail = |err: StoreError| group.iter().map(|_| Err(err.clone())).collect();
    let mut tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(err) => return fail(backend(err)),
    };
    let mut outcomes = Vec::with_capacity(group.len());
    for commit in group {
        let saved = match tx.savepoint() {
            Ok(savepoint) => {
                let saved = save(&savepoint, commit, now);
                match &saved {
                    // A savepoint dropped unreleased is rolled back.
                    Ok(_) => savepoint.commit().map_err(backend).and(saved),
                    Err(_) => saved,
                }
            }
            Err(err) => Err(backend(err)),
        };
        outcomes.push(saved);
    }
    match tx.commit() {
        Ok(()) => outcomes,
        Err(err) => fail(backend(err)),
    }
}

/// One save inside its savepoint: reads the session, judges the swap, writes what it won.
fn save(conn: &Connection, commit: &PendingCommit, now: i64) -> Result<Committed, StoreError> {
    let found = read_found(conn, &commit.key)?;
    let found: HashMap<SessionKey, Found> = found
        .map(|found| (commit.key.clone(), found))
        .into_iter()
        .collect();
    let (mut outcomes, wins) = judge_group(std::slice::from_ref(commit), &found);
    if let Some(win) = wins.first() {
        write(conn, win, now).map_err(backend)?;
    }
    outcomes
        .pop()
        .unwrap_or_else(|| Err(StoreError::backend("sqlite", "a save was not judged")))
}

/// The stored version, log length and generation shape of `key` (`None`: nothing stored).
fn read_found(conn: &Connection, key: &SessionKey) -> Result<Option<Found>, StoreError> {
    let mut statement = conn.prepare_cached(&group_shapes_sql(1)).map_err(backend)?;
    let mut rows = statement
        .query(params![
            key.tenant(),
            key.user(),
            key.agent(),
            key.session()
        ])
        .map_err(backend)?;
    let Some(row) = rows.next().map_err(backend)? else {
        return Ok(None);
    };
    let get = |i: usize| row.get::<_, Option<i64>>(i).map_err(backend);
    let has_state: Option<String> = row.get(9).map_err(backend)?;
    let shape = match has_state {
        Some(_) => Some([get(6)?, get(7)?, get(8)?]),
        None => None,
    };
    Ok(Some(found_from(get(4)?, get(5)?, shape)))
}

/// The statements of the `sqlx` group commit's script, one row each.
static SESSION_ROW: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} VALUES {ROW_OF_EIGHT}{}",
        SESSION_UPSERT.0, SESSION_UPSERT.1
    )
});
static CONTEXT_ROW: LazyLock<String> =
    LazyLock::new(|| format!("{CONTEXT_INSERT} VALUES {ROW_OF_SEVEN}"));
static STATE_ROW: LazyLock<String> =
    LazyLock::new(|| format!("{} VALUES {ROW_OF_EIGHT}{}", STATE_UPSERT.0, STATE_UPSERT.1));
static LOG_ROW: LazyLock<String> = LazyLock::new(|| format!("{LOG_INSERT} VALUES {ROW_OF_EIGHT}"));

/// Executes `sql` (prepared once per connection) with `key`'s four columns, then `rest`.
fn execute_keyed(
    conn: &Connection,
    sql: &str,
    key: &SessionKey,
    rest: &[&dyn ToSql],
) -> rusqlite::Result<()> {
    let (tenant, user, agent, session) = (key.tenant(), key.user(), key.agent(), key.session());
    let columns: [&dyn ToSql; 4] = [&tenant, &user, &agent, &session];
    conn.prepare_cached(sql)?
        .execute(params_from_iter(columns.iter().chain(rest)))?;
    Ok(())
}

/// A winner's session row, context items, head and log rows.
fn write(conn: &Connection, win: &Win<'_>, now: i64) -> rusqlite::Result<()> {
    let key = &win.commit.key;
    execute_keyed(
        conn,
        &SESSION_ROW,
        key,
        &[&win.version, &win.log_len, &now, &now],
    )?;
    for (i, item) in win.commit.split.items.iter().enumerate() {
        let idx = (win.first_item + i as u64) as i64;
        execute_keyed(conn, &CONTEXT_ROW, key, &[&win.generation, &idx, item])?;
    }
    let (context, trail) = (win.after.context as i64, win.after.trail as i64);
    let head = &win.commit.split.head;
    execute_keyed(
        conn,
        &STATE_ROW,
        key,
        &[head, &win.generation, &context, &trail],
    )?;
    let first = win.log_len - win.commit.rows.len() as i64 + 1;
    for (i, (json, body)) in win.commit.rows.iter().enumerate() {
        let seq = first + i as i64;
        execute_keyed(conn, &LOG_ROW, key, &[&seq, &now, json, body])?;
    }
    Ok(())
}

/// Adds the log rows after `ctxkeeper_log_indexed`'s mark to the full-text index and moves
/// the mark (the statements of [`super::SqlStore::index_log_in`]).
fn index_log(conn: &mut Connection, unindexed: &AtomicU64) -> Result<(), StoreError> {
    // The writer slot is held: no row is logged meanwhile.
    unindexed.store(0, Ordering::Relaxed);
    let indexed = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .and_then(|tx| {
            for statement in INDEX_LOG {
                tx.execute(statement, [])?;
            }
            tx.commit()
        });
    indexed.map_err(|err| {
        unindexed.fetch_add(INDEX_BATCH, Ordering::Relaxed);
        backend(err)
    })
}
