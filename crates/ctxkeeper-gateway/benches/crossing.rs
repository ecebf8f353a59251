//! Latency of the request that crosses the compaction trigger, against a quiet request's,
//! with and without the summary prepared in the background.
//!
//! A gateway (embedded SQLite store, workspace archive, summaries written on the request's own
//! upstream) runs in this process in front of the mock upstream, whose ordinary answers are
//! immediate and whose summary answers take 300 ms, as a model writing a summary would.
//! Sessions of 13 Anthropic turns (long assistant texts: only a summary shrinks them) cross
//! a 6,000-token window's trigger; between requests the client waits until any summary being
//! prepared has arrived (an agent's own think time). Every request is timed end to end over
//! loopback HTTP; the mock's own answer time (well under a millisecond) is included. Prints a
//! markdown table of p50 / p99 for quiet and crossing requests under both settings. Run:
//! `cargo bench -p ctxkeeper-gateway --bench crossing` (`--profile dev` reuses the test build).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ctxkeeper_core::tokens::Profiles;
use ctxkeeper_gateway::GatewayConfig;
use ctxkeeper_gateway::summarize::SUMMARY_REQUEST_MARK;
use serde_json::{Value, json};

#[path = "../tests/common/mod.rs"]
mod common;
use common::filler;

const SESSIONS: usize = 30;
const TURNS: usize = 13;
const SUMMARY_DELAY: Duration = Duration::from_millis(300);

fn conversation(session: usize, turns: usize) -> Value {
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(json!({"role": "user", "content": format!("Session {session}, step {i}: keep going with the invoice fix.")}));
        messages.push(json!({"role": "assistant", "content": filler(session * 131 + i, 1_800)}));
    }
    messages.push(json!({"role": "user", "content": "Continue."}));
    json!({
        "model": "bench-model",
        "max_tokens": 256,
        "system": [{"type": "text", "text": "You are a careful agent.", "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// Quiet and crossing request latencies over every session, preparing at `prepare_at`.
async fn measure(prepare_at: Option<f64>) -> (Vec<Duration>, Vec<Duration>) {
    let mock = ctxkeeper_mock_upstream::spawn(ctxkeeper_mock_upstream::MockConfig {
        window: 60_000,
        summary_delay: SUMMARY_DELAY,
        record: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = GatewayConfig::new(dir.path());
    config.upstream = format!("{}/v1", mock.anthropic_base_url());
    config.anthropic_upstream = mock.anthropic_base_url();
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.profiles = Profiles::from_toml_str(
        "[models.\"bench-model\"]\ncontext_window = 6000\ntokenizer = \"o200k_base\"\n",
    )
    .unwrap();
    config.policy = config
        .policy
        .with_overrides("stages = [{ kind = \"summarize\" }]")
        .unwrap();
    config.prepare_summaries_at = prepare_at;
    let running = common::start(config).await;
    let gateway = running.gateway.clone();
    let url = running.url("/v1/messages");
    let client = reqwest::Client::new();
    let summaries = || {
        mock.requests()
            .iter()
            .filter(|r| r.body.to_string().contains(SUMMARY_REQUEST_MARK))
            .count() as u64
    };
    let (mut quiet, mut crossing) = (Vec::new(), Vec::new());
    for session in 0..SESSIONS {
        for turns in 1..=TURNS {
            let body = conversation(session, turns);
            let prepared_before = gateway.metrics.summaries_prepared.load(Ordering::Relaxed);
            let started = Instant::now();
            let response = client
                .post(&url)
                .header("x-api-key", "sk-ant-bench")
                .header("anthropic-version", "2023-06-01")
                .header("x-ctxkeeper-session", format!("crossing-{session}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            let compacted = common::compacted(&response);
            assert_eq!(response.status(), 200);
            let _ = response.bytes().await.unwrap();
            let elapsed = started.elapsed();
            if compacted {
                crossing.push(elapsed);
            } else {
                quiet.push(elapsed);
            }
            // The agent's think time: a summary whose preparation this step's answer started
            // arrives before its next call. Counted from the summaries the mock had answered
            // when this answer arrived (a crossing request's own summary is among them; a
            // preparation takes the summary delay, so it is not).
            let answered = summaries();
            tokio::time::sleep(Duration::from_millis(20)).await;
            if gateway.metrics.summaries_prepared.load(Ordering::Relaxed) > prepared_before {
                let deadline = Instant::now() + Duration::from_secs(10);
                while summaries() <= answered && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    running.stop().await;
    quiet.sort();
    crossing.sort();
    (quiet, crossing)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "| summary | requests | quiet p50 ms | quiet p99 ms | crossing requests | crossing p50 ms | crossing p99 ms | crossing p50 / quiet p50 |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (label, prepare_at) in [
        (
            "prepared in the background (0.75 of the trigger)",
            Some(0.75),
        ),
        ("written when the trigger fires", None),
    ] {
        let (quiet, crossing) = measure(prepare_at).await;
        let ratio = percentile(&crossing, 0.5).as_secs_f64()
            / percentile(&quiet, 0.5).as_secs_f64().max(1e-9);
        println!(
            "| {label} | {} | {} | {} | {} | {} | {} | {ratio:.2} |",
            quiet.len() + crossing.len(),
            ms(percentile(&quiet, 0.5)),
            ms(percentile(&quiet, 0.99)),
            crossing.len(),
            ms(percentile(&crossing, 0.5)),
            ms(percentile(&crossing, 0.99)),
        );
    }
}
