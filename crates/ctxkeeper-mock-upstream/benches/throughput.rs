//! Requests per second the mock answers over real HTTP, so a gateway benchmark can tell how
//! much of its own figure is the mock's.
//!
//! `cargo bench -p ctxkeeper-mock-upstream --bench throughput [-- REQUESTS]` drives a ~4 KB
//! chat request with tools (16 messages, the shape of an agent step) through a keep-alive
//! client with 32 requests in flight, with recording off and on, non-streamed and streamed.
//! Client and server share the machine, so the figures are a lower bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxkeeper_mock_upstream::{MockConfig, spawn};
use serde_json::{Value, json};

const IN_FLIGHT: usize = 32;

fn agent_step() -> Value {
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful coding agent. ".repeat(8)})];
    for step in 0..5 {
        messages
            .push(json!({"role": "user", "content": format!("step {step}: look at src/lib.rs")}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{step}"), "type": "function",
            "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/{step}.rs\"}}")}}]}));
        messages.push(
            json!({"role": "tool", "tool_call_id": format!("call_{step}"),
            "content": "fn main() { println!(\"hello\"); } // ".repeat(12)}),
        );
    }
    json!({"model": "gpt-4o", "messages": messages, "tools": [{"type": "function", "function": {
        "name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]})
}

async fn run(record: bool, stream: bool, requests: usize) -> (f64, Duration) {
    let mock = spawn(MockConfig {
        record,
        ..MockConfig::default()
    })
    .await
    .expect("bind");
    let url = format!("{}/chat/completions", mock.openai_base_url());
    let mut body = agent_step();
    body["stream"] = json!(stream);
    let body = Arc::new(serde_json::to_vec(&body).expect("serialize"));
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..IN_FLIGHT {
        let (client, url, body) = (client.clone(), url.clone(), Arc::clone(&body));
        let share = requests / IN_FLIGHT + usize::from(worker < requests % IN_FLIGHT);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(share);
            for _ in 0..share {
                let sent = Instant::now();
                let response = client
                    .post(&url)
                    .bearer_auth("bench")
                    .header("content-type", "application/json")
                    .body(body.as_ref().clone())
                    .send()
                    .await
                    .expect("answer");
                assert!(response.status().is_success());
                response.bytes().await.expect("body");
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::with_capacity(requests);
    for task in tasks {
        latencies.extend(task.await.expect("worker"));
    }
    let elapsed = started.elapsed();
    latencies.sort();
    mock.shutdown().await;
    (
        requests as f64 / elapsed.as_secs_f64(),
        latencies[latencies.len() / 2],
    )
}

#[tokio::main]
async fn main() {
    let requests: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(20_000);
    ctxkeeper_core::tokens::exact::warm_up();
    println!(
        "body {} bytes, {requests} requests, {IN_FLIGHT} in flight",
        serde_json::to_vec(&agent_step()).map_or(0, |b| b.len())
    );
    for (record, stream) in [(false, false), (true, false), (false, true)] {
        let (rate, p50) = run(record, stream, requests).await;
        println!(
            "record={record:<5} stream={stream:<5} {rate:>9.0} req/s  p50 {:>7.0} µs",
            p50.as_secs_f64() * 1e6
        );
    }
}
