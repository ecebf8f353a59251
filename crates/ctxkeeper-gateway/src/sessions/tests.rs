use super::*;
use ctxkeeper_core::engine::presets;

use ctxkeeper_store::{AgentState, HistoryPage};

async fn sessions(store: Arc<dyn SessionStore>, dir: &std::path::Path) -> Sessions {
    sessions_with(store, dir, Profiles::builtin()).await
}

/// Sessions under the default policy, with their archive in `dir`.
async fn sessions_with(
    store: Arc<dyn SessionStore>,
    dir: &std::path::Path,
    profiles: Profiles,
) -> Sessions {
    let archive = ctxkeeper_store::open_archive(dir.to_str().unwrap())
        .await
        .unwrap();
    Sessions::new(
        store,
        archive,
        presets::preset("default").unwrap(),
        profiles,
        16,
    )
}

/// A memory store, sessions over it with the archive in a temporary directory that lives as
/// long as the returned one, and the key of session `id`.
async fn memory_session(
    id: &str,
) -> (
    tempfile::TempDir,
    Arc<dyn SessionStore>,
    Sessions,
    SessionKey,
) {
    let dir = tempfile::tempdir().unwrap();
    let store = ctxkeeper_store::open_store("memory://").await.unwrap();
    let sessions = sessions(store.clone(), dir.path()).await;
    (dir, store, sessions, SessionKey::simple(id).unwrap())
}

/// The names of the events that arrive on `events` until none comes for 200 ms.
async fn event_names(events: &mut Subscription) -> Vec<String> {
    let mut names = Vec::new();
    while let Some(event) = events.next_within(Duration::from_millis(200)).await {
        names.push(event.name);
    }
    names
}

/// `conversation(2)` with its task reworded, and the session such an early edit forks into
/// from session "s".
fn early_edit() -> (Incoming, SessionKey) {
    let mut edited = conversation(2);
    edited[1] = Message::user("a different task");
    let edited = incoming(edited);
    let fork = SessionKey::simple(identity::fork_session("s", &edited.hashes[..2])).unwrap();
    (edited, fork)
}

/// Implements `SessionStore` for a test store that stands in front of a real one (its field
/// `inner`): the methods given are its own, loads, listings, removals and searches pass
/// straight through.
macro_rules! store_in_front {
    ($store:ty, $backend:literal, { $($own:tt)* }) => {
        #[async_trait::async_trait]
        impl SessionStore for $store {
            fn backend(&self) -> &'static str {
                $backend
            }
            async fn load(
                &self,
                key: &SessionKey,
            ) -> Result<Option<ctxkeeper_store::Versioned>, StoreError> {
                self.inner.load(key).await
            }
            $($own)*
            async fn list(
                &self,
                filter: &ctxkeeper_store::SessionFilter,
            ) -> Result<Vec<ctxkeeper_store::SessionInfo>, StoreError> {
                self.inner.list(filter).await
            }
            async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
                self.inner.delete(key).await
            }
            async fn history(
                &self,
                key: &SessionKey,
                page: HistoryPage,
            ) -> Result<Vec<ctxkeeper_store::LogEntry>, StoreError> {
                self.inner.history(key, page).await
            }
            async fn search(
                &self,
                query: &ctxkeeper_store::SearchQuery,
            ) -> Result<Vec<ctxkeeper_store::SearchHit>, StoreError> {
                self.inner.search(query).await
            }
            async fn purge_before(
                &self,
                tenant: Option<&str>,
                cutoff_ms: i64,
            ) -> Result<u64, StoreError> {
                self.inner.purge_before(tenant, cutoff_ms).await
            }
        }
    };
}

fn conversation(rounds: usize) -> Vec<Message> {
    let mut messages = vec![Message::system("be brief"), Message::user("work")];
    for i in 0..rounds {
        let id = format!("c{i}");
        messages.push(Message::tool_call(&id, "read", "{}"));
        messages.push(Message::tool_result(&id, format!("output {i} ").repeat(20)));
    }
    messages
}

#[tokio::test]
async fn only_new_messages_reach_the_log() {
    let (_dir, store, sessions, key) = memory_session("s").await;
    for rounds in [1, 2, 3] {
        let step = sessions.step(&key, &step_of(rounds), &[]).await.unwrap();
        assert!(step.verbatim && !step.diverged);
    }
    let log = store
        .history(&key, ctxkeeper_store::HistoryPage::last(100))
        .await
        .unwrap();
    assert_eq!(log.len(), conversation(3).len(), "each message logged once");
}

/// A store that records how each save wrote the context: (write, messages, fingerprints).
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn SessionStore>,
    writes: std::sync::Mutex<Vec<(ctxkeeper_store::ContextWrite, usize, usize)>>,
}

store_in_front!(Recording, "recording", {
    async fn save(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
    ) -> Result<u64, StoreError> {
        self.inner.save(key, state, expected).await
    }
    async fn append_checked(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<ctxkeeper_store::AppendOutcome, StoreError> {
        self.inner.append(key, messages).await
    }
    fn commits_atomically(&self) -> bool {
        true
    }
    fn saves_incrementally(&self) -> bool {
        true
    }
    async fn commit(
        &self,
        key: &SessionKey,
        commit: ctxkeeper_store::Commit<'_>,
    ) -> Result<ctxkeeper_store::Committed, StoreError> {
        self.writes.lock().expect("not poisoned").push((
            commit.write,
            commit.state.context.len(),
            commit.state.trail.len(),
        ));
        self.inner.commit(key, commit).await
    }
});

#[tokio::test]
async fn a_step_that_only_appended_saves_only_what_it_appended() {
    use ctxkeeper_store::ContextWrite;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let inner = ctxkeeper_store::open_store("memory://")
        .await
        .expect("a memory store");
    let recording = Arc::new(Recording {
        inner: inner.clone(),
        writes: std::sync::Mutex::new(Vec::new()),
    });
    let sessions = sessions(recording.clone(), dir.path()).await;
    let key = SessionKey::simple("s").expect("a key");
    for rounds in [1, 2, 3] {
        sessions
            .step(&key, &step_of(rounds), &[])
            .await
            .expect("a step");
    }
    // A second gateway loads the session and goes on from the stored generation.
    let dir2 = tempfile::tempdir().expect("a temporary directory");
    let second = self::sessions(recording.clone(), dir2.path()).await;
    let incoming = step_of(4);
    second.step(&key, &incoming, &[]).await.expect("a step");
    let writes = recording.writes.lock().expect("not poisoned").clone();
    assert_eq!(writes.len(), 4, "{writes:?}");
    // The trail holds the client fingerprints and one console timeline point per step.
    assert_eq!(writes[0], (ContextWrite::Generation, 4, 5));
    for (i, write) in writes[1..].iter().enumerate() {
        let stored = 4 + 2 * i;
        assert_eq!(
            *write,
            (
                ContextWrite::Append {
                    context: stored,
                    trail: stored + 1 + i
                },
                2,
                3
            ),
            "step {} wrote more than its two new messages and its point",
            i + 2
        );
    }
    let loaded = inner.load(&key).await.expect("load").expect("saved");
    assert_eq!(loaded.state.context, conversation(4));
    // The timeline survives in the store: four points, read by another process.
    let timeline =
        crate::sessions::timeline::Timeline::read(&loaded.state.extensions, &loaded.state.trail);
    assert_eq!((timeline.steps.len(), timeline.totals.requests), (4, 4));
    assert_eq!(loaded.generation, Some(1));
}

#[tokio::test]
async fn reading_stats_keeps_a_warm_session_calibrated() {
    let (_dir, _store, sessions, key) = memory_session("s").await;
    sessions.step(&key, &step_of(3), &[]).await.unwrap();
    // The provider's count, far from any estimate of these few messages.
    sessions.observe_usage(&key, 54_321).await;
    for _ in 0..2 {
        let stats = sessions.stats(&key).await.unwrap().unwrap();
        assert_eq!(
            stats.approx_tokens, 54_321,
            "the reported usage anchors the count"
        );
    }
    // A second process moving the session on is seen: the stats follow the store.
    let other = sessions.store().clone();
    let dir2 = tempfile::tempdir().unwrap();
    let second = self::sessions(other, dir2.path()).await;
    let longer = step_of(4);
    second.step(&key, &longer, &[]).await.unwrap();
    let stats = sessions.stats(&key).await.unwrap().unwrap();
    assert_eq!(stats.client_messages, conversation(4).len());
    assert_ne!(stats.approx_tokens, 54_321);
}

#[tokio::test]
async fn idle_warm_sessions_are_evicted_by_time_and_reload_from_the_store() {
    let (_dir, _store, sessions, key) = memory_session("idle").await;
    let sessions = sessions.with_idle_ttl(Duration::from_millis(30));
    sessions.step(&key, &step_of(1), &[]).await.unwrap();
    assert_eq!(sessions.warm_sessions(), 1);
    assert_eq!(sessions.evict_idle(), 0, "not idle yet");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(sessions.evict_idle(), 1);
    assert_eq!(sessions.warm_sessions(), 0);
    let step = sessions.step(&key, &step_of(2), &[]).await.unwrap();
    assert!(
        !step.diverged,
        "the reloaded session continues where it was"
    );
}

#[tokio::test]
async fn an_uncommitted_step_is_never_evicted_and_an_abandoned_one_is_forgotten() {
    let (_dir, store, sessions, key) = memory_session("held").await;
    let sessions = sessions.with_idle_ttl(Duration::ZERO);
    let step = sessions.begin(&key, &step_of(1), &[]).await.unwrap();
    assert_eq!(
        sessions.evict_idle(),
        0,
        "a step waits to commit from this slot"
    );
    sessions.abandon(&key, step.ticket).await;
    assert!(store.load(&key).await.unwrap().is_none(), "nothing stored");
    assert!(log_of(&store, &key).await.is_empty(), "nothing logged");
    let step = sessions.begin(&key, &step_of(1), &[]).await.unwrap();
    commit(&sessions, &key, 1, step.ticket).await;
    assert_eq!(log_of(&store, &key).await.len(), step_of(1).messages.len());
}

#[tokio::test]
async fn a_superseded_step_commits_nothing_and_the_newer_one_logs_both() {
    let (_dir, store, sessions, key) = memory_session("overlap").await;
    let first = sessions.begin(&key, &step_of(1), &[]).await.unwrap();
    let second = sessions.begin(&key, &step_of(2), &[]).await.unwrap();
    commit(&sessions, &key, 1, first.ticket).await;
    assert!(log_of(&store, &key).await.is_empty());
    commit(&sessions, &key, 2, second.ticket).await;
    assert_eq!(log_of(&store, &key).await.len(), step_of(2).messages.len());
}

#[tokio::test]
async fn an_early_edit_forks_and_leaves_the_stored_session_alone() {
    // Regression: two conversations that start alike shared one session, and every
    // request of either rewrote it (10,300 log entries for 200 requests).
    let (_dir, store, sessions, key) = memory_session("s").await;
    sessions.step(&key, &step_of(2), &[]).await.unwrap();
    let (edited, fork) = early_edit();
    let mut events = sessions.subscribe(&fork);
    let step = sessions.step(&key, &edited, &[]).await.unwrap();
    assert_eq!(step.key, fork);
    assert!(!step.diverged, "a fork is not a rebuild");
    assert_eq!(
        log_of(&store, &key).await,
        conversation(2),
        "the parent is untouched"
    );
    assert_eq!(log_of(&store, &fork).await, edited.messages);
    let names = event_names(&mut events).await;
    assert!(names.iter().any(|n| n == "session_forked"), "{names:?}");

    // Both conversations go on, each in its own session, each logged once.
    let mut longer = edited.messages.clone();
    longer.push(Message::assistant("done"));
    let again = sessions.step(&key, &incoming(longer), &[]).await.unwrap();
    assert_eq!(again.key, fork, "the same fork again");
    let mut original = conversation(2);
    original.push(Message::assistant("also done"));
    let parent = sessions
        .step(&key, &incoming(original.clone()), &[])
        .await
        .unwrap();
    assert_eq!(parent.key, key);
    assert_eq!(log_of(&store, &key).await, original);
    assert_eq!(log_of(&store, &fork).await.len(), edited.messages.len() + 1);
    assert_eq!(
        sessions
            .metrics
            .divergences
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[tokio::test]
async fn a_replaced_newest_message_keeps_the_session_and_its_compaction() {
    let (_dir, store, sessions, key) = memory_session("s").await;
    let mut messages = conversation(2);
    messages.push(Message::user("first wording"));
    sessions
        .step(&key, &incoming(messages.clone()), &[])
        .await
        .unwrap();
    let mut events = sessions.subscribe(&key);
    *messages.last_mut().unwrap() = Message::user("second wording");
    let step = sessions
        .step(&key, &incoming(messages.clone()), &[])
        .await
        .unwrap();
    assert_eq!(step.key, key);
    assert!(!step.diverged);
    let sent: Vec<_> = step.prepared.messages.iter().collect();
    assert_eq!(sent.last().unwrap(), &&Message::user("second wording"));
    assert_eq!(
        sent.len(),
        messages.len(),
        "the first wording is gone from the context"
    );
    let log = log_of(&store, &key).await;
    assert_eq!(
        log.len(),
        messages.len() + 1,
        "both wordings are logged, once each"
    );
    let names = event_names(&mut events).await;
    assert!(
        names.iter().any(|n| n == "newest_message_replaced"),
        "{names:?}"
    );
}

/// A store that fails or delays on demand, in front of a real one.
#[derive(Debug)]
struct Flaky {
    inner: Arc<dyn SessionStore>,
    /// Appends still to fail.
    failing_appends: std::sync::atomic::AtomicUsize,
    /// Saves still to answer with a (fake) lost compare-and-swap.
    conflicting_saves: std::sync::atomic::AtomicUsize,
    /// Every append waits this long first.
    append_delay: Duration,
    /// Passes the inner store's atomic save-and-append through (else the store is one
    /// that saves, then appends).
    atomic: bool,
}

impl Flaky {
    fn new(inner: Arc<dyn SessionStore>) -> Flaky {
        Flaky {
            inner,
            failing_appends: 0.into(),
            conflicting_saves: 0.into(),
            append_delay: Duration::ZERO,
            atomic: false,
        }
    }

    /// A (fake) lost compare-and-swap while `conflicting_saves` says so.
    fn lose_a_swap(&self, expected: Option<u64>) -> Result<(), StoreError> {
        if Flaky::take(&self.conflicting_saves) {
            return Err(StoreError::Conflict {
                expected,
                actual: None,
            });
        }
        Ok(())
    }

    fn take(counter: &std::sync::atomic::AtomicUsize) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        counter
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

store_in_front!(Flaky, "flaky", {
    async fn save(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
    ) -> Result<u64, StoreError> {
        self.lose_a_swap(expected)?;
        self.inner.save(key, state, expected).await
    }
    async fn append_checked(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<ctxkeeper_store::AppendOutcome, StoreError> {
        tokio::time::sleep(self.append_delay).await;
        if Flaky::take(&self.failing_appends) {
            return Err(StoreError::Backend {
                backend: "flaky",
                message: "injected".into(),
                cause: None,
            });
        }
        self.inner.append(key, messages).await
    }
    fn commits_atomically(&self) -> bool {
        self.atomic && self.inner.commits_atomically()
    }
    async fn save_and_append(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
        messages: &[Message],
    ) -> Result<ctxkeeper_store::Committed, StoreError> {
        if !self.atomic {
            let version = self.save(key, state, expected).await?;
            let appended = match messages {
                [] => None,
                _ => Some(self.append(key, messages).await?),
            };
            return Ok(ctxkeeper_store::Committed { version, appended });
        }
        self.lose_a_swap(expected)?;
        self.inner
            .save_and_append(key, state, expected, messages)
            .await
    }
});

async fn log_of(store: &Arc<dyn SessionStore>, key: &SessionKey) -> Vec<Message> {
    store
        .history(key, HistoryPage::last(1000))
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.message)
        .collect()
}

/// Commits the step begun for `step_of(rounds)` under `ticket`.
async fn commit(sessions: &Sessions, key: &SessionKey, rounds: usize, ticket: Ticket) {
    sessions
        .commit(key, &step_of(rounds), &[], ticket)
        .await
        .unwrap();
}

fn step_of(rounds: usize) -> Incoming {
    incoming(conversation(rounds))
}

/// A request of the client's `messages` to gpt-4o.
fn incoming(messages: Vec<Message>) -> Incoming {
    Incoming::new(Some("gpt-4o".into()), messages, &[])
}

#[tokio::test]
async fn an_atomic_store_gets_each_step_in_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = ctxkeeper_store::open_store("memory://").await.unwrap();
    let mut atomic = Flaky::new(store.clone());
    atomic.atomic = true;
    // A separate append would fail: the steps must not need one.
    atomic
        .failing_appends
        .store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
    // And one lost swap, which is redone without logging its messages twice.
    atomic
        .conflicting_saves
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let sessions = sessions(Arc::new(atomic), dir.path()).await;
    let key = SessionKey::simple("s").unwrap();
    for rounds in [1, 2, 3] {
        sessions.step(&key, &step_of(rounds), &[]).await.unwrap();
        assert_eq!(log_of(&store, &key).await, conversation(rounds));
    }
    let engine = store.load(&key).await.unwrap().unwrap().state.engine;
    assert_eq!(engine["format"], ctxkeeper::snapshot::FORMAT);
    assert!(
        engine.get("pending_log").is_none(),
        "nothing is ever owed to the log: {engine}"
    );
}

#[tokio::test]
async fn a_step_that_lost_its_swap_announces_only_what_it_committed() {
    let dir = tempfile::tempdir().unwrap();
    let store = ctxkeeper_store::open_store("memory://").await.unwrap();
    let flaky = Arc::new(Flaky::new(store.clone()));
    let sessions = sessions(flaky.clone(), dir.path()).await;
    let key = SessionKey::simple("s").unwrap();
    sessions.step(&key, &step_of(2), &[]).await.unwrap();
    let (edited, fork) = early_edit();
    let mut events = sessions.subscribe(&fork);
    flaky
        .conflicting_saves
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let step = sessions.step(&key, &edited, &[]).await.unwrap();
    assert_eq!(step.key, fork);
    let names = event_names(&mut events).await;
    assert_eq!(
        names.iter().filter(|n| *n == "session_forked").count(),
        1,
        "the step ran twice and committed once: {names:?}"
    );
    assert_eq!(
        sessions
            .metrics
            .session_forks
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test]
async fn a_second_process_continues_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = ctxkeeper_store::open_store("memory://").await.unwrap();
    let first = sessions(store.clone(), dir.path()).await;
    let second = sessions(store.clone(), dir.path()).await;
    let key = SessionKey::simple("s").unwrap();
    first.step(&key, &step_of(1), &[]).await.unwrap();
    let step = second.step(&key, &step_of(2), &[]).await.unwrap();
    assert!(!step.diverged, "the stored prefix was recognised");
    // The first process's cache is stale now: its save conflicts, it reloads, no loss.
    first.step(&key, &step_of(3), &[]).await.unwrap();
    let log = store
        .history(&key, ctxkeeper_store::HistoryPage::last(100))
        .await
        .unwrap();
    assert_eq!(log.len(), conversation(3).len());
}

#[tokio::test]
async fn a_host_that_forwards_verbatim_steps_itself_gets_the_context_only_when_it_changed() {
    let profiles = Profiles::from_toml_str(
        r#"
        [models."tiny"]
        context_window = 4000
        max_output = 256
        tokenizer = "o200k_base"
        "#,
    )
    .unwrap();
    let open = async |dir: &std::path::Path| {
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        sessions_with(store, dir, profiles.clone()).await
    };
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let forwarding = open(a.path()).await;
    let copying = open(b.path()).await;
    let key = SessionKey::simple("s").unwrap();
    let (mut verbatim, mut rewritten) = (0, 0);
    for rounds in 1..=40 {
        let incoming = Incoming::new(Some("tiny".into()), conversation(rounds), &[]);
        let fast = forwarding
            .step(&key, &incoming.clone().with_forwards_verbatim(true), &[])
            .await
            .unwrap();
        let slow = copying.step(&key, &incoming, &[]).await.unwrap();
        assert_eq!(fast.verbatim, slow.verbatim, "round {rounds}");
        assert_eq!(fast.prepared.input_tokens, slow.prepared.input_tokens);
        assert_eq!(fast.prepared.compacted, slow.prepared.compacted);
        if fast.verbatim {
            // The host forwards the client's body: what the copying host would send is
            // exactly the client's messages, so nothing is lost by not copying them out.
            assert!(fast.prepared.messages.is_empty());
            assert_eq!(slow.prepared.messages, incoming.messages);
            verbatim += 1;
        } else {
            assert_eq!(fast.prepared.messages, slow.prepared.messages);
            assert_ne!(fast.prepared.messages, incoming.messages);
            rewritten += 1;
        }
    }
    assert!(verbatim > 0 && rewritten > 0, "{verbatim} / {rewritten}");
}

/// A mock upstream whose summary answers never come in time, and a gateway in front of it
/// that summarizes on the request's own upstream (nothing prepared ahead): a request that
/// crosses the trigger waits in its summary call.
mod cancelled {
    use std::time::Duration;

    use ctxkeeper_mock_upstream::{MockConfig, MockServer};
    use serde_json::{Value, json};

    use super::*;
    use crate::summarize::UpstreamRoute;

    const SECRET: &str = "sk-ant-cancelled-caller-0123456789";

    async fn slow_summaries() -> MockServer {
        ctxkeeper_mock_upstream::spawn(MockConfig {
            window: 60_000,
            summary_delay: Duration::from_secs(120),
            ..MockConfig::default()
        })
        .await
        .unwrap()
    }

    fn profiles() -> Profiles {
        Profiles::from_toml_str(
            "[models.\"sum-model\"]\ncontext_window = 6000\ntokenizer = \"o200k_base\"\n",
        )
        .unwrap()
    }

    fn policy() -> PolicyConfig {
        presets::preset("default")
            .unwrap()
            .with_overrides("stages = [{ kind = \"summarize\" }]")
            .unwrap()
    }

    /// `turns` exchanges with long assistant texts: only a summary shrinks them.
    fn anthropic_body(turns: usize) -> Value {
        let mut messages = Vec::new();
        for i in 0..turns {
            messages.push(json!({"role": "user", "content": format!("Step {i}: go on.")}));
            messages
                .push(json!({"role": "assistant", "content": format!("work {i} ").repeat(300)}));
        }
        messages.push(json!({"role": "user", "content": "Continue."}));
        json!({"model": "sum-model", "max_tokens": 256, "messages": messages})
    }

    /// Returns once the mock holds a request it has not answered for half a second: with
    /// immediate answers only a summary call waits (for two minutes).
    async fn summary_in_flight(mock: &MockServer) {
        let handle = mock.handle();
        let mut waiting_since = None;
        loop {
            if handle.received() > handle.requests().len() as u64 {
                let since = *waiting_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= Duration::from_millis(500) {
                    return;
                }
            } else {
                waiting_since = None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What the warm session's manager summarizes with when a step names no summarizer, once
    /// no request holds the session.
    async fn resting_summarizer(sessions: &Sessions, key: &SessionKey) -> String {
        let cell = sessions.slot(key);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(slot) = cell.try_lock() {
                let live = slot.live.as_ref().expect("the session is warm");
                return live.manager.summarizer().name().to_string();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the cancelled request still holds its session"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_client_that_disconnects_during_the_summary_leaves_nothing_of_it_in_the_session() {
        let mock = slow_summaries().await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = crate::GatewayConfig::new(dir.path());
        config.anthropic_upstream = mock.anthropic_base_url();
        config.store_url = "memory://".into();
        config.profiles = profiles();
        config.policy = policy();
        config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        config.prepare_summaries_at = None;
        assert_eq!(config.summarizer.name(), "upstream");
        let server = crate::router::Server::bind(config).await.unwrap();
        let url = format!("http://{}/v1/messages", server.local_addr());
        let gateway = server.gateway().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::new();
        let mut cancelled = None;
        for turns in 1..20 {
            let request = client
                .post(&url)
                .header("x-api-key", SECRET)
                .header("anthropic-version", "2023-06-01")
                .header("x-ctxkeeper-session", "cancelled")
                .json(&anthropic_body(turns))
                .send();
            let mut request = tokio::spawn(request);
            tokio::select! {
                answer = &mut request => {
                    assert_eq!(answer.unwrap().unwrap().status(), 200);
                }
                () = summary_in_flight(&mock) => {
                    // The client gives up while the gateway awaits the summary.
                    request.abort();
                    cancelled = Some(turns);
                    break;
                }
            }
        }
        assert!(cancelled.is_some(), "the window forced a summary");
        let key = gateway
            .sessions
            .slots
            .lock()
            .unwrap()
            .map
            .keys()
            .find(|key| key.session() == "cancelled")
            .cloned()
            .unwrap();
        assert_eq!(
            resting_summarizer(&gateway.sessions, &key).await,
            "extractive",
            "the cancelled caller's upstream summarizer (and its key) stayed in the session"
        );
        let _ = stop.send(());
        serving.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_step_dropped_during_its_summary_keeps_no_reference_to_the_callers_route() {
        let mock = slow_summaries().await;
        let dir = tempfile::tempdir().unwrap();
        let store = ctxkeeper_store::open_store("memory://").await.unwrap();
        let archive = ctxkeeper_store::open_archive(dir.path().to_str().unwrap())
            .await
            .unwrap();
        let sessions = Sessions::new(store, archive, policy(), profiles(), 16)
            .with_summarizer_choice(crate::summarize::SummarizerChoice::Upstream { model: None })
            .with_summary_preparation(None);
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("x-api-key", SECRET.parse().unwrap());
        headers.insert("anthropic-version", "2023-06-01".parse().unwrap());
        headers.insert("content-type", "application/json".parse().unwrap());
        let route = Arc::new(UpstreamRoute {
            client: reqwest::Client::new(),
            url: format!("{}/v1/messages", mock.anthropic_base_url()),
            headers,
            wire: ctxkeeper_core::formats::Wire::Anthropic,
            model: Some("sum-model".into()),
            tools: Vec::new(),
            timeout: Duration::from_secs(300),
            trace: None,
        });
        let key = SessionKey::simple("dropped").unwrap();
        let mut dropped = false;
        for turns in 1..20 {
            let request = ctxkeeper_core::formats::Wire::Anthropic
                .parse_request_owned(anthropic_body(turns))
                .unwrap();
            let incoming =
                Incoming::new(request.model, request.messages, &[]).with_route(Some(route.clone()));
            let step = sessions.step(&key, &incoming, &[]);
            tokio::select! {
                done = step => { done.unwrap(); }
                () = summary_in_flight(&mock) => {
                    dropped = true;
                    break;
                }
            }
        }
        assert!(dropped, "the window forced a summary");
        assert_eq!(resting_summarizer(&sessions, &key).await, "extractive");
        assert_eq!(
            Arc::strong_count(&route),
            1,
            "something of the dropped step still holds the caller's route (and its key)"
        );
    }
}

/// Codex CLI's own compaction, as it goes over the wire: the history so far plus its
/// checkpoint prompt, then a history restarted from the user's messages and its summary.
mod client_compaction;
