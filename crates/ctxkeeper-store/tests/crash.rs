//! Crash safety and multi-process tests. The test binary re-runs itself as the child process
//! (`crash_child`, selected by environment variables), so no helper binary is needed.
//!
//! - A writer saving in a loop is SIGKILLed a few hundred times at random moments; after every
//!   kill the session loads and holds a complete state (the one before the interrupted save,
//!   or the one after it), never a torn one, and versions never go backwards.
//! - Two processes append to the same session at once; no message is lost or numbered twice.
//! - A writer stepping with `save_and_append` is killed the instant its new state appears on
//!   disk, before its log append: the committed state never lacks its log entries, and no
//!   temporary file survives the next open.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ctxkeeper_core::model::Message;
use ctxkeeper_store::{AgentState, HistoryPage, SessionKey, SessionStore, open_store};
use serde_json::json;

const CHILD_ENV: &str = "CTXKEEPER_CRASH_CHILD";

/// The child process: `save|URL|SESSION` saves then appends forever, `step|URL|SESSION`
/// commits the state and its log entry together forever, `append|URL|SESSION|TAG|COUNT`
/// appends COUNT messages and exits.
#[test]
#[ignore = "entry point of the child processes spawned by the crash tests"]
fn crash_child() {
    let Some(parts) = common::child_args(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = open_store(&parts[1]).await.unwrap();
        let key = SessionKey::simple(&parts[2]).unwrap();
        // Tells the parent that the next kill lands inside the work loop, not in start-up.
        println!("CHILD READY");
        match parts[0].as_str() {
            "save" => loop {
                let (n, version) = next_state(store.as_ref(), &key).await;
                store.save(&key, &state_for(n), version).await.unwrap();
                store
                    .append(&key, &[Message::user(format!("save {n}"))])
                    .await
                    .unwrap();
            },
            "step" => loop {
                let (n, version) = next_state(store.as_ref(), &key).await;
                store
                    .save_and_append(
                        &key,
                        &state_for(n),
                        version,
                        &[Message::user(format!("step {n}"))],
                    )
                    .await
                    .unwrap();
            },
            "append" => {
                let count: usize = parts[4].parse().unwrap();
                for i in 0..count {
                    store
                        .append(&key, &[Message::user(format!("{} {i}", parts[3]))])
                        .await
                        .unwrap();
                }
            }
            other => panic!("unknown child mode {other}"),
        }
    });
}

/// The number of the next state to save after the stored one, and the version to save over.
async fn next_state(store: &dyn SessionStore, key: &SessionKey) -> (u64, Option<u64>) {
    match store.load(key).await.unwrap() {
        Some(v) => (
            v.state.extensions["n"].as_u64().unwrap() + 1,
            Some(v.version),
        ),
        None => (1, None),
    }
}

/// State number `n`: every message names `n`, and its size varies up to ~256 KB so that kills
/// land inside writes.
fn state_for(n: u64) -> AgentState {
    let mut state = AgentState::new();
    let filler = "x".repeat(((n % 8) as usize + 1) * 8 * 1024);
    state.context = (0..4)
        .map(|i| Message::user(format!("state {n} message {i} {filler}")))
        .collect();
    state.extensions.insert("n".into(), json!(n));
    state
}

/// A state is whole when every message carries its number.
fn check_whole(state: &AgentState) -> u64 {
    let n = state.extensions["n"].as_u64().expect("n present");
    assert_eq!(state.context.len(), 4);
    for (i, m) in state.context.iter().enumerate() {
        assert!(
            m.text().starts_with(&format!("state {n} message {i} ")),
            "torn state {n}"
        );
    }
    n
}

fn spawn_child(spec: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "crash_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until the child has opened its store (it prints a marker line).
fn wait_ready(child: &mut Child) {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        if line.unwrap_or_default().contains("CHILD READY") {
            break;
        }
    }
    // Keep draining so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
}

/// A small deterministic pseudo-random sequence (no extra dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// Kills a writer in `mode` (`save` or `step`) `kills` times at random moments and checks the
/// session after every kill. In `step` mode every committed state must have its log entry.
/// Returns how many kills left a temporary file behind (file stores only).
async fn kill_loop(url: &str, kills: usize, mode: &str) -> usize {
    let session = common::unique("crash");
    let store = open_store(url).await.unwrap();
    let key = SessionKey::simple(&session).unwrap();
    let spec = format!("{mode}|{url}|{session}");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut rng = Lcg(seed);
    let (mut last_version, mut last_n, mut progressed) = (0u64, 0u64, 0usize);
    let file_root = url.strip_prefix("file://").map(std::path::PathBuf::from);
    let mut orphaning_kills = 0;
    let started = Instant::now();
    for round in 0..kills {
        let mut child = spawn_child(&spec);
        wait_ready(&mut child);
        // Die somewhere inside the save loop.
        std::thread::sleep(Duration::from_millis(rng.next(100)));
        child.kill().unwrap();
        child.wait().unwrap();
        // (The next child sweeps them when it opens the store.)
        if file_root
            .as_deref()
            .is_some_and(|root| !temp_files(root).is_empty())
        {
            orphaning_kills += 1;
        }
        if let Some(loaded) = store.load(&key).await.unwrap() {
            let n = check_whole(&loaded.state);
            assert!(
                loaded.version >= last_version,
                "round {round}: version went back"
            );
            assert!(n >= last_n, "round {round}: state went back");
            assert_eq!(loaded.version, n, "each save bumps the version once");
            if n > last_n {
                progressed += 1;
            }
            last_version = loaded.version;
            last_n = n;
        }
        // The log stays readable: entries parse and are numbered without gaps.
        let tail = store.history(&key, HistoryPage::last(3)).await.unwrap();
        assert!(
            tail.windows(2).all(|w| w[1].seq == w[0].seq + 1),
            "round {round}: {tail:?}"
        );
        if mode == "step" {
            let last = tail.last().map(|e| (e.seq, e.message.text()));
            let expected = (last_n > 0).then(|| (last_n, format!("step {last_n}")));
            assert_eq!(
                last, expected,
                "round {round}: the state's entry is the log's last"
            );
        }
    }
    let log = store
        .history(&key, HistoryPage::last(1_000_000))
        .await
        .unwrap();
    assert_eq!(
        log.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=log.len() as u64).collect::<Vec<_>>()
    );
    eprintln!(
        "{}: {kills} kills in {:.1}s, {last_n} saves survived, progress after {progressed} kills, {} log entries",
        store.backend(),
        started.elapsed().as_secs_f64(),
        log.len()
    );
    assert!(
        progressed > kills / 4,
        "the writer made too little progress to test anything"
    );
    orphaning_kills
}

/// [`kill_loop`] on a fresh SQLite database.
#[cfg(feature = "sqlite")]
async fn sqlite_kill_loop(kills: usize, mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("crash.db").display());
    kill_loop(&url, kills, mode).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_survives_sigkill_during_saves() {
    sqlite_kill_loop(200, "save").await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_survives_sigkill_during_steps() {
    sqlite_kill_loop(100, "step").await;
}

/// Every file under `dir` whose name marks it as a temporary file.
fn temp_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(temp_files(&path));
        } else if path.to_string_lossy().ends_with(".tmp") {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_files_survive_sigkill_during_saves() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let orphaning = kill_loop(&url, 150, "save").await + kill_loop(&url, 150, "step").await;
    // Kills inside a write leave temporary files; every open sweeps them.
    open_store(&url).await.unwrap();
    let left = temp_files(dir.path());
    eprintln!(
        "file: {orphaning} of 300 kills left a temporary file, {} left after the next open",
        left.len()
    );
    assert!(left.is_empty(), "{left:?}");
    // No temporary file was promoted to a state.
    let agent_dir = dir.path().join("agents/default/context");
    for session in std::fs::read_dir(agent_dir).unwrap().flatten() {
        for file in std::fs::read_dir(session.path()).unwrap().flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            let generation = name
                .strip_prefix("context-")
                .and_then(|rest| rest.strip_suffix(".jsonl"))
                .is_some_and(|n| n.parse::<u64>().is_ok());
            assert!(
                name == "state.json" || name == "key.json" || name == ".lock" || generation,
                "{name}"
            );
        }
    }
}

/// The version at the head of a `state.json`, read the way a poller can afford to: the first
/// bytes only. `None` while there is no state (or it cannot be read).
fn version_on_disk(state: &std::path::Path) -> Option<u64> {
    use std::io::Read;
    let mut head = [0u8; 40];
    let n = std::fs::File::open(state).ok()?.read(&mut head).ok()?;
    let text = std::str::from_utf8(&head[..n]).ok()?;
    text.strip_prefix("{\"version\":")?
        .split(',')
        .next()?
        .parse()
        .ok()
}

/// Finding 5 of the hardening review: a writer killed between the state save and the log
/// append left a state whose messages the log never received, and a retry was answered from
/// that state. Here the parent polls `state.json` and kills the writer the moment a new
/// version lands, which is before its log append. The store, reopened, must show every step
/// the state holds in the log exactly once, and no temporary file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_files_never_commit_a_state_without_its_log_entries() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let session = common::unique("between");
    let state_file = dir
        .path()
        .join("agents/default/context")
        .join(&session)
        .join("state.json");
    let log_file = dir
        .path()
        .join("agents/default/sessions")
        .join(format!("{session}.log.jsonl"));
    let key = SessionKey::simple(&session).unwrap();
    let rounds = 40;
    let mut caught_between = 0;
    for round in 0..rounds {
        let before = version_on_disk(&state_file).unwrap_or(0);
        let mut child = spawn_child(&format!("step|{url}|{session}"));
        wait_ready(&mut child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while version_on_disk(&state_file).unwrap_or(0) <= before {
            assert!(
                Instant::now() < deadline,
                "round {round}: the writer never committed"
            );
            std::hint::spin_loop();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // What the dead writer left: a state, and a log that may lag behind it.
        let logged = std::fs::read_to_string(&log_file)
            .map(|text| text.lines().count())
            .unwrap_or(0) as u64;
        let version = version_on_disk(&state_file).unwrap();
        if logged < version {
            caught_between += 1;
        }

        let store = open_store(&url).await.unwrap();
        let loaded = store.load(&key).await.unwrap().expect("a committed state");
        let n = check_whole(&loaded.state);
        assert_eq!(loaded.version, n, "round {round}");
        let log = store
            .history(&key, HistoryPage::last(1_000_000))
            .await
            .unwrap();
        let texts: Vec<String> = log.iter().map(|e| e.message.text()).collect();
        let expected: Vec<String> = (1..=n).map(|i| format!("step {i}")).collect();
        assert_eq!(
            texts, expected,
            "round {round}: the log must hold every committed step once"
        );
        assert_eq!(
            log.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=n).collect::<Vec<_>>()
        );
        let temps = temp_files(dir.path());
        assert!(temps.is_empty(), "round {round}: {temps:?}");
    }
    eprintln!(
        "file: {caught_between} of {rounds} kills landed between the state's commit and its log append"
    );
    assert!(
        caught_between > 0,
        "no kill landed between the two writes, so nothing was tested"
    );
}

async fn two_process_appends(url: &str) {
    let session = common::unique("two-procs");
    let count = 150;
    let mut a = spawn_child(&format!("append|{url}|{session}|alpha|{count}"));
    let mut b = spawn_child(&format!("append|{url}|{session}|bravo|{count}"));
    assert!(a.wait().unwrap().success(), "child alpha failed");
    assert!(b.wait().unwrap().success(), "child bravo failed");
    let store = open_store(url).await.unwrap();
    let key = SessionKey::simple(&session).unwrap();
    let log = store
        .history(&key, HistoryPage::last(10_000))
        .await
        .unwrap();
    assert_eq!(log.len(), 2 * count);
    assert_eq!(
        log.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=2 * count as u64).collect::<Vec<_>>()
    );
    for tag in ["alpha", "bravo"] {
        let mine: Vec<String> = log
            .iter()
            .map(|e| e.message.text())
            .filter(|t| t.starts_with(tag))
            .collect();
        let expected: Vec<String> = (0..count).map(|i| format!("{tag} {i}")).collect();
        assert_eq!(mine, expected, "{tag}: lost or reordered messages");
    }
    eprintln!(
        "{}: two processes appended {} messages, none lost",
        store.backend(),
        2 * count
    );
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_two_processes_append_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    two_process_appends(&format!("sqlite://{}", dir.path().join("two.db").display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_files_two_processes_append_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    two_process_appends(&format!("file://{}", dir.path().display())).await;
}

/// [`two_process_appends`] on a server store, when it answers (reported as SKIP outside CI
/// otherwise).
#[cfg(any(feature = "postgres", feature = "redis", feature = "mysql"))]
async fn two_process_appends_on(var: &str, backend: &str, default: &str) {
    let Some(url) = common::service_url(var, backend, default) else {
        return;
    };
    if common::answered(backend, open_store(&url).await).is_some() {
        two_process_appends(&url).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_processes_append_without_loss() {
    two_process_appends_on(common::POSTGRES_VAR, "postgres", common::POSTGRES_DEFAULT).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_two_processes_append_without_loss() {
    two_process_appends_on(common::REDIS_VAR, "redis", common::REDIS_DEFAULT).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_two_processes_append_without_loss() {
    two_process_appends_on(common::MYSQL_VAR, "mysql", common::MYSQL_DEFAULT).await;
}
