//! Crash safety and multi-process tests. The test binary re-runs itself as the child process
//! (`crash_child`, selected by environment variables), so no helper binary is needed.
//!
//! - A writer saving in a loop is SIGKILLed a few hundred times at random moments; after every
//!   kill the session loads and holds a complete state (the one before the interrupted save,
//!   or the one after it), never a torn one, and versions never go backwards.
//! - Two processes append to the same session at once; no message is lost or numbered twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ctxkeeper_core::model::Message;
use ctxkeeper_store::{AgentState, HistoryPage, SessionKey, open_store};
use serde_json::json;

const CHILD_ENV: &str = "CTXKEEPER_CRASH_CHILD";

/// The child process: `save|URL|SESSION` saves forever, `append|URL|SESSION|TAG|COUNT` appends
/// COUNT messages and exits.
#[test]
#[ignore = "entry point of the child processes spawned by the crash tests"]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = open_store(parts[1]).await.unwrap();
        let key = SessionKey::simple(parts[2]).unwrap();
        // Tells the parent that the next kill lands inside the work loop, not in start-up.
        println!("CHILD READY");
        match parts[0] {
            "save" => loop {
                let loaded = store.load(&key).await.unwrap();
                let (n, version) = match &loaded {
                    Some(v) => (
                        v.state.extensions["n"].as_u64().unwrap() + 1,
                        Some(v.version),
                    ),
                    None => (1, None),
                };
                store.save(&key, &state_for(n), version).await.unwrap();
                store
                    .append(&key, &[Message::user(format!("save {n}"))])
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

async fn kill_loop(url: &str, kills: usize) {
    let session = common::unique("crash");
    let store = open_store(url).await.unwrap();
    let key = SessionKey::simple(&session).unwrap();
    let spec = format!("save|{url}|{session}");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut rng = Lcg(seed);
    let (mut last_version, mut last_n, mut progressed) = (0u64, 0u64, 0usize);
    let started = Instant::now();
    for round in 0..kills {
        let mut child = spawn_child(&spec);
        wait_ready(&mut child);
        // Die somewhere inside the save loop.
        std::thread::sleep(Duration::from_millis(rng.next(100)));
        child.kill().unwrap();
        child.wait().unwrap();
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
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_survives_sigkill_during_saves() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("crash.db").display());
    kill_loop(&url, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_files_survive_sigkill_during_saves() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    kill_loop(&url, 200).await;
    // No temporary file was promoted to a state; stray ones are only ever hidden names.
    let agent_dir = dir.path().join("agents/default/context");
    for session in std::fs::read_dir(agent_dir).unwrap().flatten() {
        for file in std::fs::read_dir(session.path()).unwrap().flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            assert!(
                name == "state.json" || name == "key.json" || name.starts_with('.'),
                "{name}"
            );
        }
    }
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

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_processes_append_without_loss() {
    let Some(url) = common::service_url(common::POSTGRES_VAR, "postgres", common::POSTGRES_DEFAULT)
    else {
        return;
    };
    if let Err(err) = open_store(&url).await {
        return common::unreachable("postgres", &err.to_string());
    }
    two_process_appends(&url).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_two_processes_append_without_loss() {
    let Some(url) = common::service_url(common::REDIS_VAR, "redis", common::REDIS_DEFAULT) else {
        return;
    };
    if let Err(err) = open_store(&url).await {
        return common::unreachable("redis", &err.to_string());
    }
    two_process_appends(&url).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_two_processes_append_without_loss() {
    let Some(url) = common::service_url(common::MYSQL_VAR, "mysql", common::MYSQL_DEFAULT) else {
        return;
    };
    if let Err(err) = open_store(&url).await {
        return common::unreachable("mysql", &err.to_string());
    }
    two_process_appends(&url).await;
}
