//! `ctxkeeper-bench-load`: an HTTP load generator for the gateway benchmark (bench/gateway.sh).
//!
//! ```text
//! # open loop: 500 requests per second for 10 s, after 1 s of unrecorded warm-up
//! ctxkeeper-bench-load --url http://127.0.0.1:8080/v1 --rate 500 --duration 10 --warmup 1
//! # closed loop: 32 connections, each sending its next request when the last one answered
//! ctxkeeper-bench-load --url http://127.0.0.1:8080/v1 --connections 32 --duration 10
//! # one request for each of 1,000 sessions, then stop
//! ctxkeeper-bench-load --url http://127.0.0.1:8080/v1 --connections 16 --requests 1000 \
//!     --sessions 1000 --session-prefix hold
//! # a large resent history: every request's body padded to about 8 MB
//! ctxkeeper-bench-load --url http://127.0.0.1:8080/v1 --connections 2 --requests 20 \
//!     --pad-bytes 8000000
//! # 25,000 distinct session event streams opened and closed, 64 at a time
//! ctxkeeper-bench-load --url http://127.0.0.1:8080/v1 --sse-churn 25000 --connections 64
//! ```
//!
//! Every request is the same 20-message OpenAI chat completion (about 4 KB of JSON) sent to
//! `URL/chat/completions` with an `x-ctxkeeper-session` header; request `i` uses session
//! `PREFIX-(i mod SESSIONS)`. With `--grow` each session's conversation instead gains an
//! exchange per request (`--exchanges-per-conversation N` restarts it under a new id after N).
//! In open-loop mode requests leave on a fixed schedule whatever the
//! server does, so a slow server meets a growing queue instead of a politely waiting client
//! (no coordinated omission). Latency is measured from the moment a request leaves to the end of
//! its response body. The result is one JSON object on stdout: request counts, errors, achieved
//! rate, the latency distribution in milliseconds and, on Linux, the CPU the whole machine
//! spent per request while the recorded load ran (`machine_cpu_us_per_request`, every process:
//! this generator, the server, its upstream, its database). A throughput share taken on a
//! saturated machine moves with the machine's speed; the CPU per request mostly does not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::time::MissedTickBehavior;

/// Open- or closed-loop HTTP load against an OpenAI-compatible endpoint.
#[derive(Debug, Parser)]
#[command(about)]
struct Args {
    /// Base URL including /v1; requests go to URL/chat/completions.
    #[arg(long)]
    url: String,
    /// Requests per second (open loop). Without it, the closed loop of --connections runs.
    #[arg(long)]
    rate: Option<f64>,
    /// Concurrent connections of the closed loop.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Seconds of recorded load.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of unrecorded load before the recorded part (warms connections and caches).
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// Closed loop only: stop after this many requests instead of after --duration.
    #[arg(long)]
    requests: Option<u64>,
    /// Distinct session ids cycled through.
    #[arg(long, default_value_t = 300)]
    sessions: u64,
    /// Prefix of the session ids.
    #[arg(long, default_value = "bench")]
    session_prefix: String,
    /// Model name put in the request body.
    #[arg(long, default_value = "gpt-4o-mini")]
    model: String,
    /// Bearer token sent in `authorization` (the mock accepts any; a proxy may check it).
    #[arg(long, default_value = "sk-bench")]
    api_key: String,
    /// Seconds before a request counts as an error.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Each session's conversation grows: its n-th request carries the 20 base messages plus n
    /// earlier (assistant, user) exchanges, so every request brings two new messages, as an
    /// agent's does. Without it every request repeats the same 20 messages.
    #[arg(long)]
    grow: bool,
    /// With --grow: a conversation ends after this many exchanges and its slot starts a new
    /// one under a new session id (`PREFIX-SLOT.GENERATION`), so request sizes stay in the same
    /// range however fast the server is (0: conversations grow for the whole run).
    #[arg(long, default_value_t = 0)]
    exchanges_per_conversation: u64,
    /// Pads the conversation with earlier tool-free turns until its body has about this many
    /// bytes (a long agent history resent whole).
    #[arg(long, default_value_t = 0)]
    pad_bytes: usize,
    /// Instead of model calls: opens and closes this many event streams
    /// (`GET URL-without-/v1/v1/sessions/ID/events`, one distinct id each), --connections at a
    /// time, waiting for each stream's headers before dropping it.
    #[arg(long)]
    sse_churn: Option<u64>,
}

/// What every request does and where its outcome goes.
#[derive(Debug)]
struct Target {
    client: reqwest::Client,
    url: String,
    body: bytes::Bytes,
    /// The model name, for the bodies built per request under `--grow`.
    model: String,
    grow: bool,
    exchanges_per_conversation: u64,
    sessions: u64,
    prefix: String,
    authorization: String,
}

#[derive(Debug, Default)]
struct Tally {
    latencies_us: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("cannot start the tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(report) => println!("{report}"),
        Err(err) => {
            eprintln!("ctxkeeper-bench-load: {err:#}");
            std::process::exit(1);
        }
    }
}

async fn run(args: Args) -> Result<Value> {
    if args.sessions == 0 {
        bail!("--sessions must be at least 1");
    }
    if args.duration.is_nan() || args.duration <= 0.0 {
        bail!("--duration must be positive");
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs_f64(args.timeout))
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .build()
        .context("cannot build the HTTP client")?;
    if let Some(n) = args.sse_churn {
        return sse_churn(&args, client, n).await;
    }
    let mut body = request_body(&args.model, 0);
    pad(&mut body, args.pad_bytes);
    let target = Arc::new(Target {
        client,
        url: format!("{}/chat/completions", args.url.trim_end_matches('/')),
        body: bytes::Bytes::from(body.to_string()),
        model: args.model.clone(),
        grow: args.grow,
        exchanges_per_conversation: args.exchanges_per_conversation,
        sessions: args.sessions,
        prefix: args.session_prefix.clone(),
        authorization: format!("Bearer {}", args.api_key),
    });
    // One request first: a wrong URL or a refusing server fails loudly, not as 100% errors.
    let probe = target.send(0).await;
    if let Err(err) = probe {
        bail!("the first request to {} failed: {err}", target.url);
    }
    match args.rate {
        Some(rate) => open_loop(&args, target, rate).await,
        None => closed_loop(&args, target).await,
    }
}

impl Target {
    /// The session id of request `i` and how many exchanges its conversation has reached.
    fn conversation(&self, i: u64) -> (String, u64) {
        let slot = i % self.sessions;
        let turn = i / self.sessions;
        match self.exchanges_per_conversation {
            0 => (format!("{}-{slot}", self.prefix), turn),
            per => (format!("{}-{slot}.{}", self.prefix, turn / per), turn % per),
        }
    }

    /// Sends request `i` and reads the whole answer; returns the latency in microseconds.
    async fn send(&self, i: u64) -> Result<u64, String> {
        let (session, exchanges) = self.conversation(i);
        let body = if self.grow {
            // Built before the clock starts: the client's own work is not latency.
            bytes::Bytes::from(request_body(&self.model, exchanges).to_string())
        } else {
            self.body.clone()
        };
        let start = Instant::now();
        let response = self
            .client
            .post(&self.url)
            .header("authorization", &self.authorization)
            .header("content-type", "application/json")
            .header("x-ctxkeeper-session", session)
            .body(body)
            .send()
            .await
            .map_err(|err| format!("{err:#}"))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|err| format!("{err:#}"))?;
        let elapsed = start.elapsed();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(format!(
                "HTTP {status}: {}",
                text.chars().take(300).collect::<String>()
            ));
        }
        Ok(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
    }
}

impl Tally {
    fn record(&mut self, outcome: Result<u64, String>) {
        match outcome {
            Ok(us) => self.latencies_us.push(us),
            Err(err) => {
                self.errors += 1;
                self.first_error.get_or_insert(err);
            }
        }
    }

    /// The workers' tallies added up (the first error of the first worker that had one).
    async fn gather(workers: Vec<tokio::task::JoinHandle<Tally>>) -> Result<Tally> {
        let mut total = Tally::default();
        for worker in workers {
            let tally = worker.await.context("a worker task panicked")?;
            total.latencies_us.extend(tally.latencies_us);
            total.errors += tally.errors;
            if total.first_error.is_none() {
                total.first_error = tally.first_error;
            }
        }
        Ok(total)
    }
}

async fn open_loop(args: &Args, target: Arc<Target>, rate: f64) -> Result<Value> {
    if rate.is_nan() || rate <= 0.0 {
        bail!("--rate must be positive");
    }
    let period = Duration::from_secs_f64(1.0 / rate);
    let warmup = (args.warmup * rate).round() as u64;
    let recorded = (args.duration * rate).round().max(1.0) as u64;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut ticker = tokio::time::interval(period);
    // Burst: a late tick is followed by catch-up ticks, so the average rate holds.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(usize::try_from(recorded).unwrap_or(0));
    let mut start = Instant::now();
    let mut cpu = MachineCpu::read();
    for i in 0..warmup + recorded {
        ticker.tick().await;
        if i == warmup {
            start = Instant::now();
            cpu = MachineCpu::read();
        }
        let target = Arc::clone(&target);
        let tally = (i >= warmup).then(|| Arc::clone(&tally));
        tasks.push(tokio::spawn(async move {
            let outcome = target.send(i).await;
            if let Some(tally) = tally {
                tally.lock().await.record(outcome);
            }
        }));
    }
    let send_window = start.elapsed().as_secs_f64();
    for task in tasks {
        task.await.context("a request task panicked")?;
    }
    let wall = start.elapsed().as_secs_f64();
    let tally = std::mem::take(&mut *tally.lock().await);
    Ok(report(
        json!({"mode": "open", "rate_target": rate, "send_window_s": round3(send_window)}),
        tally,
        recorded,
        wall,
        cpu,
    ))
}

async fn closed_loop(args: &Args, target: Arc<Target>) -> Result<Value> {
    let connections = args.connections.max(1);
    let warmup_end = Instant::now() + Duration::from_secs_f64(args.warmup);
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let limit = args.requests;
    // The warm-up runs the same loop, unrecorded, so every connection is open when timing starts.
    if args.warmup > 0.0 {
        let mut warm = Vec::new();
        for _ in 0..connections {
            let target = Arc::clone(&target);
            let next = Arc::clone(&next);
            warm.push(tokio::spawn(async move {
                while Instant::now() < warmup_end {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let _ = target.send(i).await;
                }
            }));
        }
        for task in warm {
            task.await.context("a warm-up task panicked")?;
        }
        // Growing conversations continue where the warm-up left them (restarting would
        // resend shorter histories); otherwise request numbering starts over.
        if !args.grow {
            next.store(0, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let start = Instant::now();
    let cpu = MachineCpu::read();
    let end = start + Duration::from_secs_f64(args.duration);
    let mut workers = Vec::new();
    for _ in 0..connections {
        let target = Arc::clone(&target);
        let next = Arc::clone(&next);
        workers.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            loop {
                if limit.is_none() && Instant::now() >= end {
                    break;
                }
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if limit.is_some_and(|limit| i >= limit) {
                    break;
                }
                tally.record(target.send(i).await);
            }
            tally
        }));
    }
    let total = Tally::gather(workers).await?;
    let wall = start.elapsed().as_secs_f64();
    let sent = total.latencies_us.len() as u64 + total.errors;
    Ok(report(
        json!({"mode": "closed", "connections": connections}),
        total,
        sent,
        wall,
        cpu,
    ))
}

/// The result object: `head`'s fields, then counts, rates, latency percentiles and what the
/// machine's CPU did since `cpu` was read.
fn report(head: Value, mut tally: Tally, sent: u64, wall_s: f64, cpu: Option<MachineCpu>) -> Value {
    tally.latencies_us.sort_unstable();
    let ok = tally.latencies_us.len() as u64;
    let ms = |q: f64| percentile(&tally.latencies_us, q).map(|us| round3(us as f64 / 1000.0));
    let mean = (ok > 0)
        .then(|| round3(tally.latencies_us.iter().sum::<u64>() as f64 / ok as f64 / 1000.0));
    let mut out = head;
    let fields = json!({
        "sent": sent,
        "ok": ok,
        "errors": tally.errors,
        "first_error": tally.first_error,
        "wall_s": round3(wall_s),
        "achieved_rate": round3(if wall_s > 0.0 { ok as f64 / wall_s } else { 0.0 }),
        "p50_ms": ms(0.50),
        "p90_ms": ms(0.90),
        "p99_ms": ms(0.99),
        "max_ms": ms(1.0),
        "mean_ms": mean,
    });
    let busy = cpu.and_then(|from| from.busy_cores_until(MachineCpu::read()?));
    let cpu_fields = json!({
        "machine_busy_cores": busy.map(round3),
        "machine_cpu_us_per_request": busy
            .filter(|_| ok > 0)
            .map(|cores| (cores * wall_s * 1e6 / ok as f64).round()),
    });
    for fields in [fields, cpu_fields] {
        if let (Some(out), Value::Object(fields)) = (out.as_object_mut(), fields) {
            out.extend(fields);
        }
    }
    out
}

/// The machine's CPU time counters (`/proc/stat`'s `cpu` line, in clock ticks): how busy
/// every core was, whichever process kept it busy.
#[derive(Debug, Clone, Copy, PartialEq)]
struct MachineCpu {
    busy: u64,
    total: u64,
    cores: usize,
}

impl MachineCpu {
    /// `None` where `/proc/stat` is not there to read (not Linux).
    fn read() -> Option<MachineCpu> {
        MachineCpu::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// Parses `/proc/stat`: the aggregate `cpu` line (user nice system idle iowait irq
    /// softirq steal …; idle and iowait are the time no task ran) and one `cpuN` line per core.
    fn parse(stat: &str) -> Option<MachineCpu> {
        let mut lines = stat.lines();
        let aggregate = lines.next()?.strip_prefix("cpu ")?;
        let ticks: Vec<u64> = aggregate
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // guest and guest_nice (9th and 10th) are already counted in user and nice.
        let total: u64 = ticks.iter().take(8).sum();
        let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
        let cores = lines
            .take_while(|line| line.starts_with("cpu"))
            .filter(|line| line.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count();
        (cores > 0).then_some(MachineCpu {
            busy: total - idle,
            total,
            cores,
        })
    }

    /// How many cores were busy on average from `self` to `later`.
    fn busy_cores_until(self, later: MachineCpu) -> Option<f64> {
        let total = later.total.checked_sub(self.total).filter(|t| *t > 0)?;
        let busy = later.busy.checked_sub(self.busy)?;
        Some(busy as f64 / total as f64 * self.cores as f64)
    }
}

/// Nearest-rank percentile of sorted values (`q` in 0..=1).
fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Inserts earlier turns after the system prompt until the body reaches `bytes`.
fn pad(body: &mut Value, bytes: usize) {
    let size = body.to_string().len();
    if bytes <= size {
        return;
    }
    let turn = "An earlier turn of a long session: the agent read a file and reported what it \
                found, line by line, with the paths and the numbers it saw. ";
    let per_message = turn.len() * 40;
    let count = (bytes - size).div_ceil(per_message + 40);
    if let Some(messages) = body["messages"].as_array_mut() {
        let filler: Vec<Value> = (0..count)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                json!({"role": role, "content": format!("{i}: {}", turn.repeat(40))})
            })
            .collect();
        messages.splice(1..1, filler);
    }
}

/// Opens and closes `n` event streams of distinct sessions, `--connections` at a time.
async fn sse_churn(args: &Args, client: reqwest::Client, n: u64) -> Result<Value> {
    let base = args
        .url
        .trim_end_matches('/')
        .trim_end_matches("/v1")
        .to_string();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..args.connections.max(1) {
        let (client, base, next) = (client.clone(), base.clone(), Arc::clone(&next));
        let (prefix, authorization) = (
            args.session_prefix.clone(),
            format!("Bearer {}", args.api_key),
        );
        workers.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let started = Instant::now();
                let outcome = client
                    .get(format!("{base}/v1/sessions/{prefix}-watch-{i}/events"))
                    .header("authorization", &authorization)
                    .send()
                    .await
                    .map_err(|err| format!("{err:#}"))
                    .and_then(|response| {
                        if response.status().is_success() {
                            // Dropping the response closes the stream.
                            Ok(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX))
                        } else {
                            Err(format!("HTTP {}", response.status()))
                        }
                    });
                tally.record(outcome);
            }
            tally
        }));
    }
    let total = Tally::gather(workers).await?;
    let wall = start.elapsed().as_secs_f64();
    Ok(report(json!({"mode": "sse_churn"}), total, n, wall, None))
}

/// A 20-message conversation of about 4 KB: a system prompt, then alternating user and
/// assistant turns of plausible length, followed by `exchanges` later (assistant, user) pairs.
/// No tools, so any proxy forwards it unchanged.
fn request_body(model: &str, exchanges: u64) -> Value {
    let mut messages = vec![json!({
        "role": "system",
        "content": "You are a careful assistant for an airline's customer service team. Answer \
                    briefly, cite the booking reference, and never change a reservation without \
                    an explicit confirmation from the customer.",
    })];
    for turn in 1..20 {
        let (role, content) = if turn % 2 == 1 {
            (
                "user",
                format!(
                    "Turn {turn}: I would like to check the status of booking ABC{turn:03} and \
                     whether the connecting flight through Denver still leaves on time; my \
                     earlier question about the baggage allowance is still open too."
                ),
            )
        } else {
            (
                "assistant",
                format!(
                    "Turn {turn}: booking ABC{turn:03} is confirmed. The Denver connection is \
                     scheduled on time, boarding 40 minutes before departure. Your fare \
                     includes one checked bag of up to 23 kg and one personal item."
                ),
            )
        };
        messages.push(json!({"role": role, "content": content}));
    }
    for n in 1..=exchanges {
        messages.push(json!({
            "role": "assistant",
            "content": format!("Reply {n}: the booking is unchanged and the flight is on time."),
        }));
        messages.push(json!({
            "role": "user",
            "content": format!("Follow-up {n}: please also confirm the seat assignment."),
        }));
    }
    json!({"model": model, "messages": messages, "max_tokens": 16})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_brings_the_body_to_the_asked_size_and_keeps_it_valid() {
        let mut body = request_body("gpt-4o-mini", 0);
        pad(&mut body, 1_000_000);
        let size = body.to_string().len();
        assert!(
            (1_000_000..=1_010_000).contains(&size),
            "body is {size} bytes"
        );
        let messages = body["messages"].as_array().expect("messages");
        assert_eq!(messages[0]["role"], "system");
        assert!(
            messages
                .iter()
                .skip(1)
                .all(|m| m["role"] == "user" || m["role"] == "assistant")
        );
    }

    #[test]
    fn machine_cpu_counts_busy_cores_from_proc_stat() {
        let before = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 1 2 3\n";
        // 200 ticks later: 150 busy (user 120, system 30), 50 idle.
        let after = "cpu  220 0 80 840 60 0 0 0 0 0\ncpu0 110 0 40 420 30 0 0 0 0 0\ncpu1 110 0 40 420 30 0 0 0 0 0\nintr 1 2 3\n";
        let (before, after) = (
            MachineCpu::parse(before).expect("parses"),
            MachineCpu::parse(after).expect("parses"),
        );
        assert_eq!(before.cores, 2);
        assert_eq!(before.busy_cores_until(after), Some(1.5));
        // Counters that did not move tell nothing.
        assert_eq!(before.busy_cores_until(before), None);
        assert_eq!(MachineCpu::parse("intr 1 2 3\n"), None);
    }

    #[test]
    fn request_body_has_20_messages_of_about_4_kb() {
        let body = request_body("gpt-4o-mini", 0);
        let messages = body["messages"].as_array().map(Vec::len);
        assert_eq!(messages, Some(20));
        let size = body.to_string().len();
        assert!((3_500..=5_000).contains(&size), "body is {size} bytes");
    }

    fn grow_target(sessions: u64, exchanges_per_conversation: u64) -> Target {
        Target {
            client: reqwest::Client::new(),
            url: String::new(),
            body: bytes::Bytes::new(),
            model: "m".into(),
            grow: true,
            exchanges_per_conversation,
            sessions,
            prefix: "g".into(),
            authorization: String::new(),
        }
    }

    #[test]
    fn conversations_restart_under_a_new_id_after_their_exchanges() {
        let cycling = grow_target(4, 3);
        let seen: Vec<(String, u64)> = [1, 5, 9, 13, 17].map(|i| cycling.conversation(i)).into();
        let expect = [
            ("g-1.0", 0),
            ("g-1.0", 1),
            ("g-1.0", 2),
            ("g-1.1", 0),
            ("g-1.1", 1),
        ];
        assert_eq!(seen, expect.map(|(id, n)| (id.to_string(), n)));
        let endless = grow_target(4, 0);
        assert_eq!(endless.conversation(401), ("g-1".to_string(), 100));
    }

    #[test]
    fn a_growing_conversation_extends_the_previous_request() {
        let first = request_body("m", 1);
        let second = request_body("m", 2);
        let (Some(first), Some(second)) =
            (first["messages"].as_array(), second["messages"].as_array())
        else {
            panic!("messages are arrays")
        };
        assert_eq!((first.len(), second.len()), (22, 24));
        assert_eq!(&second[..22], &first[..]);
        assert_eq!(second[22]["role"], "assistant");
        assert_eq!(second[23]["role"], "user");
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.50), Some(50));
        assert_eq!(percentile(&values, 0.99), Some(99));
        assert_eq!(percentile(&values, 1.0), Some(100));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn report_counts_errors_and_rates() {
        let mut tally = Tally::default();
        tally.record(Ok(1_000));
        tally.record(Ok(3_000));
        tally.record(Err("HTTP 500".into()));
        let out = report(json!({"mode": "open"}), tally, 3, 2.0, None);
        assert_eq!(out["mode"], "open");
        assert_eq!(out["ok"], 2);
        assert_eq!(out["errors"], 1);
        assert_eq!(out["first_error"], "HTTP 500");
        assert_eq!(out["achieved_rate"], 1.0);
        assert_eq!(out["p50_ms"], 1.0);
        assert_eq!(out["max_ms"], 3.0);
    }
}
