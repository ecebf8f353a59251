//! Append and load latency of every session store backend at 100, 1,000 and 10,000 messages.
//!
//! Individual operations are timed (500 appends after 50 warm-up appends, 20 loads) on a
//! session of exactly that size to report p50 and p99, printed as a markdown table (and written
//! to `$CTXKEEPER_BENCH_OUT` when set). Criterion's means are added with
//! `CTXKEEPER_BENCH_CRITERION=1`. Server
//! backends run when their URL is in `CTXKEEPER_TEST_POSTGRES_URL`, `CTXKEEPER_TEST_MYSQL_URL`
//! or `CTXKEEPER_TEST_REDIS_URL`; otherwise a note says they were skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ctxkeeper_core::model::Message;
use ctxkeeper_store::{AgentState, SessionKey, SessionStore, open_store};
use tokio::runtime::Runtime;

const SIZES: [usize; 3] = [100, 1_000, 10_000];
/// Appends timed per backend and size (after 50 untimed): p99 is the 5th slowest.
const TIMED_APPENDS: usize = 500;
/// Loads timed per backend and size.
const TIMED_LOADS: usize = 20;

struct Backend {
    name: &'static str,
    store: Arc<dyn SessionStore>,
    _dir: Option<tempfile::TempDir>,
}

fn message(i: usize) -> Message {
    if i.is_multiple_of(2) {
        Message::user(format!(
            "message {i}: please look up the order status for customer {}",
            i * 7
        ))
    } else {
        Message::assistant(format!(
            "message {i}: order {} shipped yesterday and arrives on Friday",
            i * 13
        ))
    }
}

fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("bench-{}-{}", std::process::id(), nanos % 1_000_000_000)
}

fn backends(rt: &Runtime) -> Vec<Backend> {
    let mut out = Vec::new();
    out.push(Backend {
        name: "memory",
        store: rt.block_on(open_store("memory://")).unwrap(),
        _dir: None,
    });
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    out.push(Backend {
        name: "file",
        store: rt.block_on(open_store(&url)).unwrap(),
        _dir: Some(dir),
    });
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    out.push(Backend {
        name: "sqlite",
        store: rt.block_on(open_store(&url)).unwrap(),
        _dir: Some(dir),
    });
    for (name, var) in [
        ("postgres", "CTXKEEPER_TEST_POSTGRES_URL"),
        ("mysql", "CTXKEEPER_TEST_MYSQL_URL"),
        ("redis", "CTXKEEPER_TEST_REDIS_URL"),
    ] {
        match std::env::var(var) {
            Ok(url) => match rt.block_on(open_store(&url)) {
                Ok(store) => out.push(Backend {
                    name,
                    store,
                    _dir: None,
                }),
                Err(err) => eprintln!("note: {name} skipped: {err}"),
            },
            Err(_) => eprintln!("note: {name} skipped: {var} is not set"),
        }
    }
    out
}

/// A session whose log holds `n` messages, and a state whose context holds `n` messages.
fn prepare(rt: &Runtime, store: &dyn SessionStore, tenant: &str, n: usize) -> SessionKey {
    let key = SessionKey::new(tenant, "bench", "bench", format!("s{n}")).unwrap();
    let all: Vec<Message> = (0..n).map(message).collect();
    rt.block_on(async {
        for chunk in all.chunks(500) {
            store.append(&key, chunk).await.unwrap();
        }
        let mut state = AgentState::new();
        state.context = all.clone();
        store.save(&key, &state, None).await.unwrap();
    });
    key
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn micros(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn bench_stores(c: &mut Criterion) {
    let rt = Runtime::new().unwrap();
    let tenant = run_id();
    let mut rows = Vec::new();
    for backend in backends(&rt) {
        let store = &*backend.store;
        for n in SIZES {
            // Criterion's means are optional (CTXKEEPER_BENCH_CRITERION=1): the table below,
            // which bench/RESULTS.md reports, comes from the percentile pass.
            if std::env::var_os("CTXKEEPER_BENCH_CRITERION").is_some() {
                let key = prepare(&rt, store, &tenant, n);
                let mut group = c.benchmark_group(format!("store/{}", backend.name));
                group
                    .sample_size(10)
                    .warm_up_time(Duration::from_millis(300))
                    .measurement_time(Duration::from_secs(1));
                group.bench_with_input(BenchmarkId::new("append", n), &n, |b, _| {
                    b.iter(|| rt.block_on(store.append(&key, &[message(n)])).unwrap());
                });
                group.bench_with_input(BenchmarkId::new("load", n), &n, |b, _| {
                    b.iter(|| rt.block_on(store.load(&key)).unwrap());
                });
                group.finish();
            }

            // Percentiles on a fresh session of exactly n messages.
            let fresh = prepare(&rt, store, &format!("{tenant}-p"), n);
            for i in 0..50 {
                rt.block_on(store.append(&fresh, &[message(n + i)]))
                    .unwrap();
            }
            let mut appends: Vec<Duration> = (50..50 + TIMED_APPENDS)
                .map(|i| {
                    let started = Instant::now();
                    rt.block_on(store.append(&fresh, &[message(n + i)]))
                        .unwrap();
                    started.elapsed()
                })
                .collect();
            let mut loads: Vec<Duration> = (0..TIMED_LOADS)
                .map(|_| {
                    let started = Instant::now();
                    rt.block_on(store.load(&fresh)).unwrap();
                    started.elapsed()
                })
                .collect();
            rows.push((
                backend.name,
                n,
                percentile(&mut appends, 0.5),
                percentile(&mut appends, 0.99),
                percentile(&mut loads, 0.5),
                percentile(&mut loads, 0.99),
            ));
        }
        // Leave nothing behind in shared servers.
        rt.block_on(store.purge_before(Some(&tenant), i64::MAX))
            .unwrap();
        rt.block_on(store.purge_before(Some(&format!("{tenant}-p")), i64::MAX))
            .unwrap();
    }
    let mut table = String::from(
        "| backend | messages | append p50 (µs) | append p99 (µs) | load p50 (µs) | load p99 (µs) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (name, n, a50, a99, l50, l99) in &rows {
        table.push_str(&format!(
            "| {name} | {n} | {} | {} | {} | {} |\n",
            micros(*a50),
            micros(*a99),
            micros(*l50),
            micros(*l99)
        ));
    }
    let mut ratios = String::from("\nappend p99 at 10,000 / at 100:");
    for name in rows
        .iter()
        .map(|r| r.0)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let p99 = |n: usize| {
            rows.iter()
                .find(|r| r.0 == name && r.1 == n)
                .map(|r| r.3.as_secs_f64())
        };
        if let (Some(small), Some(large)) = (p99(100), p99(10_000)) {
            ratios.push_str(&format!(" {name} {:.2}×;", large / small));
        }
    }
    println!("\n{table}{ratios}");
    if let Ok(path) = std::env::var("CTXKEEPER_BENCH_OUT") {
        std::fs::write(path, format!("{table}{ratios}\n")).unwrap();
    }
}

criterion_group!(benches, bench_stores);
criterion_main!(benches);
