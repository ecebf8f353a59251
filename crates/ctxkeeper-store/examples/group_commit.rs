//! Saves per second of a SQLite store under concurrent sessions (the group commit's load):
//! `cargo run --release -p ctxkeeper-store --example group_commit -- [sqlite://PATH] [SECONDS]`.
//!
//! 32 tasks each grow two sessions of their own, one step at a time: two new messages in the
//! context and the log, one trail value, the head rewritten (what the gateway commits per
//! request). Prints saves per second and the writer's mean time per save.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ctxkeeper_core::model::Message;
use ctxkeeper_store::{AgentState, Commit, ContextWrite, SessionKey, open_store};

const TASKS: usize = 32;
const SESSIONS_PER_TASK: usize = 2;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "sqlite:///tmp/ctxkeeper-group-commit.db".into());
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    if let Some(path) = url.strip_prefix("sqlite://") {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }
    let store = open_store(&url).await.unwrap();
    let saves = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let store = Arc::clone(&store);
        let saves = Arc::clone(&saves);
        tasks.push(tokio::spawn(async move {
            let mut sessions: Vec<(SessionKey, Option<u64>, usize)> = (0..SESSIONS_PER_TASK)
                .map(|s| {
                    let key = SessionKey::new("bench", "user", "agent", format!("s{task}-{s}"))
                        .unwrap();
                    (key, None, 0)
                })
                .collect();
            let mut turn = 0usize;
            while Instant::now() < until {
                let (key, version, steps) = &mut sessions[turn % SESSIONS_PER_TASK];
                turn += 1;
                let said = [
                    Message::user(format!("step {steps}: what is the status of booking ABC{steps:03} and the Denver connection?")),
                    Message::assistant(format!("step {steps}: booking ABC{steps:03} is confirmed; the connection leaves on time.")),
                ];
                let mut state = AgentState::new();
                state.context = said.to_vec();
                state.trail = vec![serde_json::json!({"fingerprint": format!("{steps:016x}")})];
                let write = match version {
                    None => ContextWrite::Generation,
                    Some(_) => ContextWrite::Append {
                        context: *steps * 2,
                        trail: *steps,
                    },
                };
                let committed = store
                    .commit(key, Commit { state: &state, write, expected: *version, messages: &said })
                    .await
                    .unwrap();
                *version = Some(committed.version);
                *steps += 1;
                saves.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let total = saves.load(Ordering::Relaxed);
    println!(
        "{total} saves in {seconds} s: {:.0} saves/s, {:.0} µs per save",
        total as f64 / seconds as f64,
        seconds as f64 * 1e6 / total as f64
    );
}
