//! Latency of the console's pages for a session of 1,000 requests.
//!
//! Builds the session the way the gateway does (1,000 tool-calling steps through
//! `Sessions::step` on the embedded SQLite store and a workspace archive, under the default
//! policy in an 8k window, so it compacts and archives along the way), serves
//! `ctxkeeper ui`'s console over that store on a loopback port, and times every page over HTTP
//! (sequential requests, after warm-up). Prints a markdown table of p50 / p99 / max per page;
//! the bar is p99 under 50 ms. Run: `cargo bench -p ctxkeeper-gateway --bench console`
//! (`--profile dev` reuses the test build).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ctxkeeper_core::engine::presets;
use ctxkeeper_core::model::Message;
use ctxkeeper_core::tokens::Profiles;
use ctxkeeper_gateway::sessions::{Incoming, Sessions};
use ctxkeeper_gateway::tenancy::TenantRule;
use ctxkeeper_gateway::ui::{Access, Console};
use ctxkeeper_store::SessionKey;

const REQUESTS: usize = 1_000;
const TIMED: usize = 200;
const WARMUP: usize = 20;
const TOKEN: &str = "bench-admin-token";

fn output(step: usize) -> String {
    let words = [
        "invoice", "total", "round", "cents", "amount", "ledger", "tax", "line", "sum", "value",
        "customer", "order", "price", "discount", "currency", "balance",
    ];
    let mut out = format!("step {step}: ");
    let mut i = step;
    while out.len() < 1_200 {
        out.push_str(words[i % words.len()]);
        out.push(' ');
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store_url = format!("sqlite://{}", dir.path().join("sessions.db").display());
    let store = ctxkeeper_store::open_store(&store_url).await.unwrap();
    let archive = ctxkeeper_store::open_archive(dir.path().join("workspace").to_str().unwrap())
        .await
        .unwrap();
    let profiles = Profiles::from_toml_str(
        "[models.\"bench-8k\"]\ncontext_window = 8192\nmax_output = 1024\ntokenizer = \"o200k_base\"\n",
    )
    .unwrap();
    let sessions = Sessions::new(
        store.clone(),
        archive.clone(),
        presets::preset("default").expect("the default preset"),
        profiles,
        16,
    );
    let key = SessionKey::simple("bench-1000").unwrap();
    let mut messages = vec![
        Message::system("You are a coding agent."),
        Message::user("Find where invoice totals are rounded and fix it."),
    ];
    let built = Instant::now();
    for step in 0..REQUESTS {
        let incoming = Incoming::new(Some("bench-8k".into()), messages.clone(), &[]);
        sessions.step(&key, &incoming, &[]).await.unwrap();
        let id = format!("call_{step}");
        let mut result = output(step);
        if step == REQUESTS / 3 {
            // One rare word, far back in the archive.
            result.push_str(" zyxwvut");
        }
        messages.push(Message::tool_call(
            &id,
            "read_file",
            "{\"path\":\"src/lib.rs\"}",
        ));
        messages.push(Message::tool_result(&id, result));
    }
    eprintln!(
        "built a session of {REQUESTS} requests in {:.1} s",
        built.elapsed().as_secs_f64()
    );

    let bus = ctxkeeper_store::open_event_bus(&store_url).await.unwrap();
    let access = Access::new(
        Some(TOKEN.into()),
        TenantRule::default(),
        [127, 0, 0, 1].into(),
    );
    let log_store = store.clone();
    let console = Console::standalone(store, archive.clone(), bus, access);
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(console.serve(listener, std::future::pending()));
    let client = reqwest::Client::new();
    let base = format!("http://{addr}/ui/t/default");
    let session = format!("{base}/sessions/bench-1000");
    let page = client
        .get(&session)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    if let Some(meta) = page.split("<p class=\"meta\">").nth(1) {
        eprintln!("{}", &meta[..meta.find("</p>").unwrap_or(0)]);
    }
    let points = page.matches(r#"<circle class="point""#).count();
    assert_eq!(points, REQUESTS, "one point per request");
    let compactions = page
        .split("Compactions (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or("?")
        .to_string();
    let listed = archive.list(&key.archive_scope()).await.unwrap();
    eprintln!("{} archived items, {compactions} compactions", listed.len());
    let reference = listed
        .iter()
        .find(|entry| entry.reference.as_str().contains("tool_result-"))
        .or(listed.first())
        .expect("an archived item")
        .reference
        .clone();
    let encoded: String = reference
        .as_str()
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let pages = [
        ("sessions list", format!("{base}/sessions")),
        ("session (chart, compactions)", session.clone()),
        ("session, compactions page 2", format!("{session}?page=2")),
        ("archived item", format!("{session}/archive?ref={encoded}")),
        (
            "search, a word of every output",
            format!("{session}/search?q=discount"),
        ),
        (
            "search, a word of one output",
            format!("{session}/search?q=zyxwvut"),
        ),
        ("totals", format!("{base}/totals")),
    ];
    println!(
        "Session of {REQUESTS} requests ({compactions} compactions, {} messages logged); {TIMED} sequential requests per page after {WARMUP} warm-up.\n",
        messages.len() - 2
    );
    println!("| page | bytes | p50 ms | p99 ms | max ms |\n| --- | ---: | ---: | ---: | ---: |");
    for (name, url) in pages {
        let mut times = Vec::with_capacity(TIMED);
        let mut bytes = 0;
        for i in 0..(WARMUP + TIMED) {
            let started = Instant::now();
            let answer = client.get(&url).bearer_auth(TOKEN).send().await.unwrap();
            assert_eq!(answer.status(), 200, "{url}");
            bytes = answer.bytes().await.unwrap().len();
            if i >= WARMUP {
                times.push(started.elapsed());
            }
        }
        times.sort();
        println!(
            "| {name} | {bytes} | {} | {} | {} |",
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99)),
            ms(*times.last().unwrap())
        );
    }
    // Where a search's time goes: the store's full-text search of the log alone.
    println!();
    println!(
        "| the session log's full-text search alone (store) | p50 ms | p99 ms |\n| --- | ---: | ---: |"
    );
    for word in ["discount", "zyxwvut"] {
        let mut times = Vec::with_capacity(TIMED);
        for i in 0..(WARMUP + TIMED) {
            let mut query = ctxkeeper_store::SearchQuery::session(key.clone(), word);
            query.limit = 25;
            let started = Instant::now();
            log_store.search(&query).await.unwrap();
            if i >= WARMUP {
                times.push(started.elapsed());
            }
        }
        times.sort();
        println!(
            "| {word} | {} | {} |",
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99))
        );
    }
}
