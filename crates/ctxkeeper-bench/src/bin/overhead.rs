//! `ctxkeeper-bench-overhead`: what a session's state costs the gateway as its conversation
//! grows — the latency it adds to a request, and the bytes its store is handed per step.
//!
//! ```text
//! ctxkeeper-bench-overhead --store sqlite:///tmp/overhead.db
//! ctxkeeper-bench-overhead --store postgres://postgres@127.0.0.1:5432/test
//! ```
//!
//! One conversation grows to `--messages` messages (each about `--message-bytes` bytes of
//! text, ~800 tokens: 1,000 messages are ~800k tokens), two messages per step, against a
//! zero-delay mock upstream and a 1M-window model (`gpt-4.1-mini`), far from the window (the
//! default policy's cost rule may still compact where that makes the billed input cheaper;
//! `--fixed-trigger` turns it off, so that nothing compacts).
//! Every step sends the same body to the mock directly and through a gateway (both
//! in-process, over loopback HTTP); the added latency is the difference. The gateway's store
//! is wrapped to count the bytes of the state (or of the part of it a step appended) and of
//! the log entries every save hands it. The result is one JSON object on stdout: per
//! reported conversation size, the p50 of the added latency, the p50 of the time spent in the
//! store's commit (part of the added latency: the gateway commits before it answers) and the
//! mean, median and largest bytes per step over the `--window` steps before that size (a step that compacted, if the
//! policy's trigger fires, writes a whole new generation).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context as _, Result};
use async_trait::async_trait;
use clap::Parser;
use ctxkeeper_core::model::Message;
use ctxkeeper_gateway::metrics::Metrics;
use ctxkeeper_gateway::sessions::Sessions;
use ctxkeeper_gateway::{Gateway, GatewayConfig, Server};
use ctxkeeper_mock_upstream::MockConfig;
use ctxkeeper_store::{
    AgentState, AppendOutcome, Commit, Committed, HistoryPage, LogEntry, SearchHit, SearchQuery,
    SessionFilter, SessionInfo, SessionKey, SessionStore, StoreError, TenantInfo, Versioned,
};
use serde_json::{Value, json};

/// The allocator `ctxkeeper serve` runs with (the CLI's): the gateway measured here allocates
/// as the one that ships does, and the mock beside it alike.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(about)]
struct Args {
    /// The gateway's session store (`sqlite://PATH`, `postgres://…`, any store URL).
    #[arg(long)]
    store: String,
    /// Messages the conversation grows to.
    #[arg(long, default_value_t = 1000)]
    messages: usize,
    /// Bytes of text per message.
    #[arg(long, default_value_t = 3200)]
    message_bytes: usize,
    /// Conversation sizes (in messages) to report at.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "50,100,200,400,600,800,1000"
    )]
    at: Vec<usize>,
    /// Steps before each reported size that its figures are taken over.
    #[arg(long, default_value_t = 10)]
    window: usize,
    /// The model named in the requests (its profile sets the window).
    #[arg(long, default_value = "gpt-4.1-mini")]
    model: String,
    /// Instead of measuring: serves the mock and the gateway for this many seconds, printing
    /// `mock http://ADDR` and `gateway http://ADDR`, for a load generator to compare them.
    #[arg(long)]
    serve_for: Option<f64>,
    /// Hides the store's generations from the gateway, so every step saves the whole state
    /// (each a new generation): the cost incremental saves remove, for comparison.
    #[arg(long)]
    whole_states: bool,
    /// Compacts only at the policy's fixed trigger (`[policy.cost] enabled = false`): on the
    /// 1M-window model nothing compacts then, so every step carries the whole conversation
    /// (the worst case for the gateway's state).
    #[arg(long)]
    fixed_trigger: bool,
    /// The gateway's `[gateway] forward_early_from_bytes` (bodies from this size on are sent
    /// upstream while they arrive; 0: every body is read whole first). Default: the gateway's.
    #[arg(long)]
    forward_early_from: Option<usize>,
}

/// A store that counts what it is handed to write.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn SessionStore>,
    bytes: AtomicU64,
    saves: AtomicU64,
    /// Microseconds spent in the inner store's commits and saves.
    store_us: AtomicU64,
    /// Off when serving a load generator: counting serializes what a save is handed again.
    enabled: bool,
    /// Claims no incremental saves (`--whole-states`).
    whole: bool,
}

impl Counting {
    fn count(&self, state: &AgentState, messages: &[Message]) {
        if !self.enabled {
            return;
        }
        let state = serde_json::to_string(state).map_or(0, |s| s.len());
        let log: usize = messages
            .iter()
            .map(|m| serde_json::to_string(m).map_or(0, |s| s.len()))
            .sum();
        self.bytes
            .fetch_add((state + log) as u64, Ordering::Relaxed);
        self.saves.fetch_add(1, Ordering::Relaxed);
    }

    /// Awaits one of the inner store's writes, adding its time to `store_us`.
    async fn timed<T>(&self, write: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let written = write.await;
        self.store_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        written
    }
}

#[async_trait]
impl SessionStore for Counting {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn load(&self, key: &SessionKey) -> Result<Option<Versioned>, StoreError> {
        self.inner.load(key).await
    }
    async fn save(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
    ) -> Result<u64, StoreError> {
        self.count(state, &[]);
        self.inner.save(key, state, expected).await
    }
    async fn append_checked(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<AppendOutcome, StoreError> {
        self.inner.append(key, messages).await
    }
    fn commits_atomically(&self) -> bool {
        self.inner.commits_atomically()
    }
    async fn save_and_append(
        &self,
        key: &SessionKey,
        state: &AgentState,
        expected: Option<u64>,
        messages: &[Message],
    ) -> Result<Committed, StoreError> {
        self.count(state, messages);
        self.timed(self.inner.save_and_append(key, state, expected, messages))
            .await
    }
    fn saves_incrementally(&self) -> bool {
        !self.whole && self.inner.saves_incrementally()
    }
    async fn commit(&self, key: &SessionKey, commit: Commit<'_>) -> Result<Committed, StoreError> {
        self.count(commit.state, commit.messages);
        self.timed(self.inner.commit(key, commit)).await
    }
    async fn generation_context(
        &self,
        key: &SessionKey,
        generation: u64,
    ) -> Result<Vec<Message>, StoreError> {
        self.inner.generation_context(key, generation).await
    }
    async fn list(&self, filter: &SessionFilter) -> Result<Vec<SessionInfo>, StoreError> {
        self.inner.list(filter).await
    }
    async fn tenants(&self) -> Result<Vec<TenantInfo>, StoreError> {
        self.inner.tenants().await
    }
    async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        self.inner.delete(key).await
    }
    async fn history(
        &self,
        key: &SessionKey,
        page: HistoryPage,
    ) -> Result<Vec<LogEntry>, StoreError> {
        self.inner.history(key, page).await
    }
    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        self.inner.search(query).await
    }
    async fn purge_before(&self, tenant: Option<&str>, cutoff_ms: i64) -> Result<u64, StoreError> {
        self.inner.purge_before(tenant, cutoff_ms).await
    }
}

/// Message `i` of the conversation: `bytes` of varied words (not one repeated token).
fn message(i: usize, bytes: usize) -> Value {
    const WORDS: [&str; 16] = [
        "the",
        "build",
        "failed",
        "because",
        "config",
        "parser",
        "rejects",
        "gateway",
        "section",
        "while",
        "tests",
        "expect",
        "error",
        "path",
        "src/lib.rs",
        "retry",
    ];
    let mut text = format!("step {i}:");
    let mut n = i as u64;
    while text.len() < bytes {
        n = n
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push(' ');
        text.push_str(WORDS[(n >> 60) as usize]);
    }
    let role = if i.is_multiple_of(2) {
        "user"
    } else {
        "assistant"
    };
    json!({"role": role, "content": text})
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

async fn post(client: &reqwest::Client, url: &str, session: &str, body: &str) -> Result<f64> {
    let start = Instant::now();
    let response = client
        .post(url)
        .header("authorization", "Bearer sk-bench")
        .header("content-type", "application/json")
        .header("x-ctxkeeper-session", session)
        .body(body.to_string())
        .send()
        .await?;
    let status = response.status();
    let text = response.bytes().await?;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    if !status.is_success() {
        anyhow::bail!("{url}: HTTP {status}: {}", String::from_utf8_lossy(&text));
    }
    Ok(ms)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = Args::parse();
    let mock = ctxkeeper_mock_upstream::spawn(MockConfig {
        window: 1_100_000,
        record: false,
        ..MockConfig::default()
    })
    .await
    .context("mock upstream")?;
    let dir = tempfile::tempdir()?;
    let mut config = GatewayConfig::new(dir.path());
    config.upstream = mock.openai_base_url();
    config.store_url = args.store.clone();
    if let Some(bytes) = args.forward_early_from {
        config.forward_early_from = bytes;
    }
    if args.fixed_trigger
        && let Some(rule) = config.policy.cost.as_mut()
    {
        rule.enabled = false;
    }
    let inner = ctxkeeper_store::open_store(&args.store)
        .await
        .with_context(|| format!("store {}", ctxkeeper_store::redact(&args.store)))?;
    let store = Arc::new(Counting {
        inner,
        bytes: AtomicU64::new(0),
        saves: AtomicU64::new(0),
        store_us: AtomicU64::new(0),
        enabled: args.serve_for.is_none(),
        whole: args.whole_states,
    });
    let archive = ctxkeeper_store::open_archive(&dir.path().join("archive").display().to_string())
        .await
        .context("archive")?;
    let metrics = Arc::new(Metrics::default());
    let sessions =
        Sessions::for_gateway(store.clone(), archive, &config).with_metrics(metrics.clone());
    let gateway = Gateway::with_sessions(config, sessions, metrics)?;
    let server = Server::bind_gateway(gateway, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let gateway_url = format!("http://{}/v1/chat/completions", server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    if let Some(seconds) = args.serve_for {
        println!("mock http://{}", mock.addr());
        println!(
            "gateway http://{}",
            gateway_url
                .trim_start_matches("http://")
                .trim_end_matches("/v1/chat/completions")
        );
        tokio::time::sleep(std::time::Duration::from_secs_f64(seconds)).await;
        let _ = stop.send(());
        let _ = serving.await;
        return Ok(());
    }
    let direct_url = format!("{}/chat/completions", mock.openai_base_url());
    let client = reqwest::Client::new();
    let session = format!("overhead-{}-{}", store.backend(), std::process::id());

    // (messages, direct ms, gateway ms, bytes handed to the store, ms in the store)
    let mut steps: Vec<(usize, f64, f64, u64, f64)> = Vec::new();
    let mut messages = vec![json!({"role": "system", "content": "You are a coding agent."})];
    let started = Instant::now();
    while messages.len() < args.messages {
        messages.push(message(messages.len(), args.message_bytes));
        messages.push(message(messages.len(), args.message_bytes));
        let body = json!({"model": args.model, "max_tokens": 16, "messages": messages}).to_string();
        let direct = post(&client, &direct_url, &session, &body).await?;
        let before = store.bytes.load(Ordering::Relaxed);
        let store_before = store.store_us.load(Ordering::Relaxed);
        let proxied = post(&client, &gateway_url, &session, &body).await?;
        let written = store.bytes.load(Ordering::Relaxed) - before;
        let in_store = (store.store_us.load(Ordering::Relaxed) - store_before) as f64 / 1000.0;
        steps.push((messages.len(), direct, proxied, written, in_store));
    }
    let mut rows = Vec::new();
    for &at in &args.at {
        let window: Vec<_> = steps
            .iter()
            .filter(|(n, ..)| *n <= at)
            .rev()
            .take(args.window)
            .collect();
        if window.is_empty() {
            continue;
        }
        let mut added: Vec<f64> = window.iter().map(|(_, d, g, ..)| g - d).collect();
        added.sort_by(f64::total_cmp);
        let mut direct: Vec<f64> = window.iter().map(|(_, d, ..)| *d).collect();
        direct.sort_by(f64::total_cmp);
        let mut proxied: Vec<f64> = window.iter().map(|(_, _, g, ..)| *g).collect();
        proxied.sort_by(f64::total_cmp);
        let bytes = window.iter().map(|(.., b, _)| *b).sum::<u64>() / window.len() as u64;
        let mut in_store: Vec<f64> = window.iter().map(|(.., ms)| *ms).collect();
        in_store.sort_by(f64::total_cmp);
        // A step that compacted writes a whole new generation: the median shows what a
        // step that only appended writes, the maximum such a step.
        let mut step_bytes: Vec<f64> = window.iter().map(|(.., b, _)| *b as f64).collect();
        step_bytes.sort_by(f64::total_cmp);
        let body_bytes =
            serde_json::to_string(&messages[..at.min(messages.len())]).map_or(0, |s| s.len());
        rows.push(json!({
            "messages": at,
            "body_bytes": body_bytes,
            "added_p50_ms": percentile(&added, 50.0),
            "direct_p50_ms": percentile(&direct, 50.0),
            "gateway_p50_ms": percentile(&proxied, 50.0),
            "store_p50_ms": percentile(&in_store, 50.0),
            "bytes_per_step": bytes,
            "bytes_p50_per_step": percentile(&step_bytes, 50.0),
            "bytes_max_per_step": percentile(&step_bytes, 100.0),
        }));
    }
    let _ = stop.send(());
    let _ = serving.await;
    let out = json!({
        "store": store.backend(),
        "whole_states": args.whole_states,
        "fixed_trigger": args.fixed_trigger,
        "model": args.model,
        "messages": args.messages,
        "message_bytes": args.message_bytes,
        "window_steps": args.window,
        "steps": steps.len(),
        "saves": store.saves.load(Ordering::Relaxed),
        "seconds": started.elapsed().as_secs_f64(),
        "rows": rows,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
