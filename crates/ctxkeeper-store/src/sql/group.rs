//! SQLite's group commit: saves that arrive while a transaction runs share the next one,
//! so many sessions' saves cost one write lock and one sync of the write-ahead log. A
//! group of distinct sessions is judged on one read and written with one multi-row
//! statement per table; otherwise each save runs in a savepoint of its own. The committer
//! is a task on `sqlx`'s connection (in-memory databases) or the writer thread
//! (`writer_thread`, database files); the write-ahead log is checkpointed in the
//! background after groups.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::save::{CONTEXT_INSERT, INSERT_BATCH, LOG_INSERT};
use super::search::INDEX_BATCH;
#[cfg(feature = "sqlite")]
use super::writer_thread;
use super::{PendingCommit, SqlStore, WriteTx, bind_key, key_of, u64_of};
use crate::StoreError;
use crate::generations::{Shape, next_shape};
use crate::session::{AppendOutcome, Committed};
use crate::state::SessionKey;
use crate::time::now_ms;

/// The head and tail of a multi-row upsert of session rows (a group's writes).
pub(super) const SESSION_UPSERT: (&str, &str) = (
    "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, version, log_len, created_at, updated_at)",
    " ON CONFLICT (tenant, user_id, agent, session) DO UPDATE SET version = excluded.version, log_len = excluded.log_len, updated_at = excluded.updated_at",
);

/// The head and tail of a multi-row upsert of state heads (a group's writes).
pub(super) const STATE_UPSERT: (&str, &str) = (
    "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state, generation, context_len, trail_len)",
    " ON CONFLICT (tenant, user_id, agent, session) DO UPDATE SET state = excluded.state, generation = excluded.generation, context_len = excluded.context_len, trail_len = excluded.trail_len",
);

/// One row's placeholders for [`SESSION_UPSERT`], [`STATE_UPSERT`] and [`LOG_INSERT`].
pub(super) const ROW_OF_EIGHT: &str = "(?, ?, ?, ?, ?, ?, ?, ?)";

/// One row's placeholders for [`CONTEXT_INSERT`].
pub(super) const ROW_OF_SEVEN: &str = "(?, ?, ?, ?, ?, ?, ?)";

/// The query reading the stored version, log length and generation shape of `keys` sessions
/// (SQLite's group commit; the keys are bound in order). The bundled SQLite finds each
/// session through its primary key (a test holds it to that: older SQLite releases scan the
/// whole table for a row-value `IN (VALUES …)` of several keys).
pub(super) fn group_shapes_sql(keys: usize) -> String {
    let values = vec!["(?, ?, ?, ?)"; keys].join(", ");
    format!(
        "SELECT s.tenant, s.user_id, s.agent, s.session, s.version, s.log_len, t.generation, t.context_len, t.trail_len, t.tenant FROM ctxkeeper_sessions s LEFT JOIN ctxkeeper_states t ON t.tenant = s.tenant AND t.user_id = s.user_id AND t.agent = s.agent AND t.session = s.session WHERE (s.tenant, s.user_id, s.agent, s.session) IN (VALUES {values})"
    )
}

/// What a group commit reads of a stored session: its version, its log length and the shape
/// of its current generation (`None` when it stores no state).
pub(super) type Found = (Option<u64>, i64, Option<Shape>);

/// [`Found`] from [`group_shapes_sql`]'s columns: the version, the log length and, when the
/// session stores a state, its generation, context length and trail length.
pub(super) fn found_from(
    version: Option<i64>,
    log_len: Option<i64>,
    shape: Option<[Option<i64>; 3]>,
) -> Found {
    let shape = shape.map(|[generation, context, trail]| Shape {
        generation: generation.map_or(0, u64_of),
        context: context.map_or(0, u64_of),
        trail: trail.map_or(0, u64_of),
    });
    (version.map(u64_of), log_len.unwrap_or(0), shape)
}

/// A group commit that failed as a whole (see [`SqlStore::group_batched`]).
#[derive(Debug)]
pub(super) struct GroupFailure {
    pub(super) err: StoreError,
    /// The connection may still be inside the failed transaction: close it.
    pub(super) close: bool,
}

/// A save of a group that won its compare-and-swap, and what it writes.
pub(super) struct Win<'a> {
    pub(super) commit: &'a PendingCommit,
    pub(super) version: i64,
    pub(super) log_len: i64,
    pub(super) generation: i64,
    pub(super) first_item: u64,
    pub(super) after: Shape,
}

/// Judges each save of a group against what its session stores (`found`, by key; a key
/// missing there stores nothing): a lost swap or an append that does not continue its
/// generation fails that save; the others win, with the versions, log sequence numbers and
/// item positions they write.
pub(super) fn judge_group<'a>(
    group: &'a [PendingCommit],
    found: &HashMap<SessionKey, Found>,
) -> (Vec<Result<Committed, StoreError>>, Vec<Win<'a>>) {
    let mut wins = Vec::with_capacity(group.len());
    let mut outcomes = Vec::with_capacity(group.len());
    for commit in group {
        let (actual, log_len, before) = found.get(&commit.key).copied().unwrap_or_default();
        if actual != commit.expected {
            outcomes.push(Err(StoreError::Conflict {
                expected: commit.expected,
                actual,
            }));
            continue;
        }
        let judged = next_shape(before, commit.write, &commit.split).and_then(|(after, fresh)| {
            let version = i64::try_from(commit.expected.unwrap_or(0))
                .map_err(|_| StoreError::InvalidInput("version out of range".into()))?
                + 1;
            let generation = i64::try_from(after.generation)
                .map_err(|_| StoreError::InvalidInput("generation out of range".into()))?;
            let first_item = match (fresh, before) {
                (false, Some(shape)) => shape.context + shape.trail,
                _ => 0,
            };
            Ok((after, version, generation, first_item))
        });
        match judged {
            Ok((after, version, generation, first_item)) => {
                let log_len = log_len + commit.rows.len() as i64;
                outcomes.push(Ok(Committed {
                    version: u64_of(version),
                    appended: (!commit.rows.is_empty()).then(|| AppendOutcome {
                        first_seq: u64_of(log_len - commit.rows.len() as i64 + 1),
                        last_seq: u64_of(log_len),
                    }),
                }));
                wins.push(Win {
                    commit,
                    version,
                    log_len,
                    generation,
                    first_item,
                    after,
                });
            }
            Err(err) => outcomes.push(Err(err)),
        }
    }
    (outcomes, wins)
}

/// A value bound to a placeholder of a [`GroupScript`].
pub(super) enum Bind<'a> {
    /// The four columns of a session key.
    Key(&'a SessionKey),
    Int(i64),
    Text(&'a str),
}

/// SQL text and its values in placeholder order.
pub(super) struct GroupScript<'a> {
    text: String,
    binds: Vec<Bind<'a>>,
}

/// The statements writing a group's winners, as one script ending in `COMMIT`: their
/// session rows (version, log length, time), context items, heads and generation shapes,
/// and log rows numbered up to each one's new log length, with multi-row statements of at
/// most [`INSERT_BATCH`] rows.
pub(super) fn group_writes<'a>(wins: &[Win<'a>], now: i64) -> GroupScript<'a> {
    let mut script = GroupScript {
        text: String::new(),
        binds: Vec::new(),
    };
    let mut statement = |head: &str, row: &str, tail: &str, rows: usize| {
        let values = vec![row; rows].join(", ");
        script
            .text
            .push_str(&format!("{head} VALUES {values}{tail}; "));
    };
    for chunk in wins.chunks(INSERT_BATCH) {
        statement(
            SESSION_UPSERT.0,
            ROW_OF_EIGHT,
            SESSION_UPSERT.1,
            chunk.len(),
        );
    }
    let items: Vec<(&SessionKey, i64, i64, &str)> = wins
        .iter()
        .flat_map(|win| {
            let key = &win.commit.key;
            let (generation, first) = (win.generation, win.first_item);
            (win.commit.split.items.iter().enumerate())
                .map(move |(i, item)| (key, generation, (first + i as u64) as i64, item.as_str()))
        })
        .collect();
    for chunk in items.chunks(INSERT_BATCH) {
        statement(CONTEXT_INSERT, ROW_OF_SEVEN, "", chunk.len());
    }
    for chunk in wins.chunks(INSERT_BATCH) {
        statement(STATE_UPSERT.0, ROW_OF_EIGHT, STATE_UPSERT.1, chunk.len());
    }
    let logged: Vec<(&SessionKey, i64, &(String, String))> = wins
        .iter()
        .flat_map(|win| {
            let first = win.log_len - win.commit.rows.len() as i64 + 1;
            (win.commit.rows.iter().enumerate())
                .map(move |(i, row)| (&win.commit.key, first + i as i64, row))
        })
        .collect();
    for chunk in logged.chunks(INSERT_BATCH) {
        statement(LOG_INSERT, ROW_OF_EIGHT, "", chunk.len());
    }
    script.text.push_str("COMMIT");
    // The values, in the order of the statements above.
    for win in wins {
        script.binds.extend([
            Bind::Key(&win.commit.key),
            Bind::Int(win.version),
            Bind::Int(win.log_len),
            Bind::Int(now),
            Bind::Int(now),
        ]);
    }
    for (key, generation, idx, item) in items {
        script.binds.extend([
            Bind::Key(key),
            Bind::Int(generation),
            Bind::Int(idx),
            Bind::Text(item),
        ]);
    }
    for win in wins {
        script.binds.extend([
            Bind::Key(&win.commit.key),
            Bind::Text(win.commit.split.head.as_str()),
            Bind::Int(win.generation),
            Bind::Int(win.after.context as i64),
            Bind::Int(win.after.trail as i64),
        ]);
    }
    for (key, seq, (json, body)) in logged {
        script.binds.extend([
            Bind::Key(key),
            Bind::Int(seq),
            Bind::Int(now),
            Bind::Text(json.as_str()),
            Bind::Text(body.as_str()),
        ]);
    }
    script
}

/// Who commits a SQLite store's saves in groups: its writer thread for a database file,
/// a task on `sqlx`'s connection for an in-memory one.
#[derive(Debug, Clone)]
pub(super) enum Committer {
    Task(GroupCommit),
    #[cfg(feature = "sqlite")]
    Thread(writer_thread::WriterThread),
}

impl Committer {
    pub(super) async fn commit(&self, commit: PendingCommit) -> Result<Committed, StoreError> {
        match self {
            Committer::Task(group) => group.commit(commit).await,
            #[cfg(feature = "sqlite")]
            Committer::Thread(thread) => thread.commit(commit).await,
        }
    }
}

/// The most saves one group commit carries.
pub(super) const MAX_GROUP: usize = 64;

/// Group commit for SQLite's single writer: saves that arrive while a transaction runs wait
/// and then share the next one, so their write-lock hand-over, their `COMMIT` and the sync
/// of the write-ahead log are paid once per group instead of once per save. Under one
/// writer the sessions' saves queue anyway; grouping is what lets the queue drain as fast as
/// it fills. A lone save waits for nothing: it is a group of one.
#[derive(Debug, Clone)]
pub(super) struct GroupCommit {
    queue: tokio::sync::mpsc::UnboundedSender<(
        PendingCommit,
        tokio::sync::oneshot::Sender<Result<Committed, StoreError>>,
    )>,
}

impl GroupCommit {
    /// Starts the committing task for `store` (which must not itself group: the task would
    /// hold its own queue open and never end). The task ends when the last store clone that
    /// holds the queue is dropped.
    pub(super) fn start(store: SqlStore) -> GroupCommit {
        let (queue, mut pending) = tokio::sync::mpsc::unbounded_channel::<(
            PendingCommit,
            tokio::sync::oneshot::Sender<Result<Committed, StoreError>>,
        )>();
        tokio::spawn(async move {
            let mut group = Vec::with_capacity(MAX_GROUP);
            // The connection every group writes on, taken from the pool for the first group
            // and again after a group failed as a whole (its connection may be broken).
            let mut writer: Option<sqlx::pool::PoolConnection<sqlx::Any>> = None;
            // Told after each group; ends with this task, when the sender is dropped.
            let (wal_grew, grown) = tokio::sync::mpsc::channel(1);
            tokio::spawn(checkpoint_in_background(store.clone(), grown));
            while pending.recv_many(&mut group, MAX_GROUP).await > 0 {
                let (commits, replies): (Vec<_>, Vec<_>) = group.drain(..).unzip();
                if writer.is_none() {
                    writer = store.writer_connection().await;
                }
                let outcomes = store.commit_group(writer.as_deref_mut(), &commits).await;
                if outcomes.iter().all(Result::is_err)
                    && let Some(failed) = writer.take()
                {
                    // It may still be inside the failed transaction: never back to the pool.
                    let _ = failed.close().await;
                }
                // Full: a round is already due.
                let _ = wal_grew.try_send(());
                for (reply, outcome) in replies.into_iter().zip(outcomes) {
                    // A caller that gave up waiting is gone; its save stands either way.
                    let _ = reply.send(outcome);
                }
                // After the replies: the saves waiting meanwhile form the next group.
                if store.unindexed.load(std::sync::atomic::Ordering::Relaxed) >= INDEX_BATCH
                    && let Err(err) = store.index_log(writer.as_deref_mut()).await
                {
                    tracing::warn!(%err, "indexing the session log for search failed; the next search retries");
                }
            }
        });
        GroupCommit { queue }
    }

    pub(super) async fn commit(&self, commit: PendingCommit) -> Result<Committed, StoreError> {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        let stopped = || StoreError::backend("sqlite", "the group commit task has stopped");
        self.queue.send((commit, reply)).map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }
}

/// How often, at most, the write-ahead log is checkpointed while groups commit.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// Copies the write-ahead log into the database file while the group commit goes on
/// writing. SQLite's own checkpoint runs inside the commit that crosses 1,000 pages of log,
/// and that commit, and every save queued behind it, waited for the page copies and a sync
/// of the database file: an eighth of the writer's time under load. Here the bulk is copied
/// on a connection of the pool beside the writer (`PASSIVE` never blocks it); then, with
/// this process's writers held off, what they wrote meanwhile (a few pages), so the log is
/// copied whole and the next write starts it over from its beginning: without that last
/// step a log that is always being written to is never restarted and grows without bound.
/// Runs after a group committed (`grown` says so), at most every [`CHECKPOINT_EVERY`]; ends
/// with the group commit.
pub(super) async fn checkpoint_in_background(
    store: SqlStore,
    mut grown: tokio::sync::mpsc::Receiver<()>,
) {
    while grown.recv().await.is_some() {
        // The connection is taken before the writers are held off, so they never wait for
        // the pool.
        let copied = match store.pool.acquire().await {
            Ok(mut conn) => {
                let checkpoint = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)");
                match checkpoint.execute(&mut *conn).await {
                    Ok(_) => {
                        let _writers = store.writers.lock().await;
                        sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                            .execute(&mut *conn)
                            .await
                    }
                    Err(err) => Err(err),
                }
            }
            Err(err) => Err(err),
        };
        if let Err(err) = copied {
            tracing::warn!(%err, "checkpointing the SQLite write-ahead log failed; the next round retries");
        }
        tokio::time::sleep(CHECKPOINT_EVERY).await;
    }
}

impl SqlStore {
    /// A connection for the group commit to write on, which leaves checkpoints to
    /// [`checkpoint_in_background`]; `None` when the pool has none to give (each group then
    /// takes one, and tries again for its own the next time).
    pub(super) async fn writer_connection(&self) -> Option<sqlx::pool::PoolConnection<sqlx::Any>> {
        use sqlx::Executor;
        let mut conn = self.pool.acquire().await.ok()?;
        match conn.execute("PRAGMA wal_autocheckpoint = 0").await {
            Ok(_) => Some(conn),
            Err(err) => {
                tracing::warn!(%err, "the SQLite group commit's connection refused its settings");
                None
            }
        }
    }

    /// Commits a group of saves in one SQLite transaction: one write lock and one sync of
    /// the write-ahead log for all of them. Saves of distinct sessions go in a few statements
    /// for the whole group, sent in two round trips ([`group_batched`](Self::group_batched)).
    /// When a session appears twice (its second save must see the first), or one of those
    /// statements fails (then that transaction is rolled back and a new one begun), the saves
    /// run one after the other, each in its own savepoint: a lost compare-and-swap or any
    /// other error of one save fails only that save, undone. Only a failure of the transaction itself (its begin, a
    /// savepoint, its commit) fails the group, and then nothing of it is committed.
    ///
    /// `conn` is the connection to write on: the group commit's own, whose page cache stays
    /// valid from one group to the next (the pool hands its idle connections out in turn, and
    /// one that another connection wrote after drops its cache and reads the pages again);
    /// `None` takes one from the pool.
    pub(super) async fn commit_group(
        &self,
        mut conn: Option<&mut sqlx::AnyConnection>,
        group: &[PendingCommit],
    ) -> Vec<Result<Committed, StoreError>> {
        let now = now_ms();
        let fail = |err: StoreError| group.iter().map(|_| Err(err.clone())).collect();
        let distinct = group
            .iter()
            .map(|commit| &commit.key)
            .collect::<std::collections::HashSet<_>>()
            .len()
            == group.len();
        if distinct {
            let batched = match conn.as_deref_mut() {
                Some(conn) => self.group_batched(conn, group, now).await,
                None => match self.pool.acquire().await {
                    Ok(mut pooled) => {
                        let batched = self.group_batched(&mut pooled, group, now).await;
                        if matches!(batched, Err(GroupFailure { close: true, .. })) {
                            let _ = pooled.close().await;
                        }
                        batched
                    }
                    Err(err) => Err(GroupFailure {
                        err: self.err(err),
                        close: false,
                    }),
                },
            };
            match batched {
                Ok(outcomes) => return outcomes,
                // The connection may still be inside the failed transaction: the group fails,
                // and the group commit closes the connection.
                Err(GroupFailure { err, close: true }) => return fail(err),
                // Which save failed is not known: each goes again on its own.
                Err(_) => {}
            }
        }
        let mut tx = match self.begin_on(conn).await {
            Ok(tx) => tx,
            Err(err) => return fail(err),
        };
        let outcomes = self.group_in(&mut tx, group, now).await;
        match self.finish(tx, outcomes).await {
            Ok(outcomes) => outcomes,
            Err(err) => fail(err),
        }
    }

    /// The saves of a group one after the other, inside `tx` (a session saved twice in a
    /// group sees its first save), each in a savepoint: a save that fails is rolled back to
    /// it and the others go on.
    pub(super) async fn group_in(
        &self,
        tx: &mut WriteTx<'_>,
        group: &[PendingCommit],
        now: i64,
    ) -> Result<Vec<Result<Committed, StoreError>>, StoreError> {
        let mut outcomes = Vec::with_capacity(group.len());
        for commit in group {
            self.execute_in(tx, "SAVEPOINT ctxkeeper_save").await?;
            let outcome = self.save_and_append_in(tx, commit, now).await;
            if outcome.is_err() {
                self.execute_in(tx, "ROLLBACK TO ctxkeeper_save").await?;
            }
            self.execute_in(tx, "RELEASE ctxkeeper_save").await?;
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// Saves of distinct sessions in one transaction and two round trips to SQLite's
    /// connection thread: `BEGIN IMMEDIATE` with the query reading every save's stored
    /// version, log length and generation shape; then the swaps and appends judged here (the
    /// write lock is held, so what was read stays current until the commit), and the
    /// winners' session rows, context items, heads and log rows written with multi-row
    /// statements sent as one script that ends in `COMMIT`. A round trip wakes the
    /// connection's thread and then this task, and on a busy machine each wake-up waits for
    /// a core: seven round trips per group before, two now, which raised the saves per
    /// second of 32 concurrent sessions by a fifth (`examples/group_commit.rs`).
    ///
    /// The transaction is SQLite's own, not an `sqlx` one (which would cost a round trip for
    /// its `BEGIN` and one for its `COMMIT`): on any error it is rolled back here. A lost
    /// swap or an append that does not continue its generation fails its save alone, having
    /// written nothing; an `Err` means a statement failed and nothing of the group was
    /// written (`close` then says whether the connection may still be in a transaction and
    /// must not be used again).
    pub(super) async fn group_batched(
        &self,
        conn: &mut sqlx::AnyConnection,
        group: &[PendingCommit],
        now: i64,
    ) -> Result<Vec<Result<Committed, StoreError>>, GroupFailure> {
        let _writer = Arc::clone(&self.writers).lock_owned().await;
        let fail = |err: sqlx::Error| GroupFailure {
            err: self.err(err),
            close: false,
        };
        let mut found: HashMap<SessionKey, Found> = HashMap::with_capacity(group.len());
        let mut began = false;
        for chunk in group.chunks(INSERT_BATCH) {
            let text = if began {
                group_shapes_sql(chunk.len())
            } else {
                format!("BEGIN IMMEDIATE; {}", group_shapes_sql(chunk.len()))
            };
            let mut query = sqlx::query(AssertSqlSafe(text));
            for commit in chunk {
                query = bind_key(query, &commit.key);
            }
            let rows = match query.fetch_all(&mut *conn).await {
                Ok(rows) => rows,
                Err(err) => return Err(self.rollback_raw(conn, fail(err)).await),
            };
            began = true;
            for row in &rows {
                match self.found_of(row) {
                    Ok((key, found_row)) => {
                        found.insert(key, found_row);
                    }
                    Err(err) => {
                        let failure = GroupFailure { err, close: false };
                        return Err(self.rollback_raw(conn, failure).await);
                    }
                }
            }
        }
        let (outcomes, wins) = judge_group(group, &found);
        let script = group_writes(&wins, now);
        let mut query = sqlx::query(AssertSqlSafe(script.text));
        for bind in script.binds {
            query = match bind {
                Bind::Key(key) => bind_key(query, key),
                Bind::Int(value) => query.bind(value),
                Bind::Text(text) => query.bind(text),
            };
        }
        if let Err(err) = query.execute(&mut *conn).await {
            return Err(self.rollback_raw(conn, fail(err)).await);
        }
        let logged: usize = wins.iter().map(|win| win.commit.rows.len()).sum();
        self.unindexed
            .fetch_add(logged as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(outcomes)
    }

    /// Rolls back a transaction begun with a raw `BEGIN` after `failure`. SQLite may have
    /// rolled it back itself (after an I/O error, a full disk), which the `ROLLBACK` then
    /// reports; any other failure of the `ROLLBACK` leaves the connection's state unknown,
    /// and the failure says to close it.
    pub(super) async fn rollback_raw(
        &self,
        conn: &mut sqlx::AnyConnection,
        mut failure: GroupFailure,
    ) -> GroupFailure {
        use sqlx::Executor;
        if let Err(err) = conn.execute("ROLLBACK").await
            && !err.to_string().contains("no transaction is active")
        {
            failure.close = true;
        }
        failure
    }

    /// A row of [`group_shapes_sql`]: the session's key, stored version, log length and
    /// generation shape (`None` when no state is stored).
    pub(super) fn found_of(&self, row: &AnyRow) -> Result<(SessionKey, Found), StoreError> {
        let get = |i: usize| -> Result<Option<i64>, StoreError> {
            row.try_get(i).map_err(|err| self.err(err))
        };
        let has_state: Option<String> = row.try_get(9).map_err(|err| self.err(err))?;
        let shape = match has_state {
            Some(_) => Some([get(6)?, get(7)?, get(8)?]),
            None => None,
        };
        Ok((key_of(row)?, found_from(get(4)?, get(5)?, shape)))
    }
}
