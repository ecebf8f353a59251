//! What the gateway adds to and repairs in a client's history: long-term memory flushed before
//! compaction (CowAgent's and Harness's `MEMORY.md` + `memory/YYYY-MM-DD.md`, per tenant),
//! request-time context providers placed after the stable prefix, and the opt-in repair of
//! broken tool-call pairs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{client, config, files_under, filler, mock, mock_and_config, mock_and_gateway, start};
use ctxkeeper_gateway::GatewayConfig;
use ctxkeeper_gateway::assembly::ContextProvider;
use ctxkeeper_store::SessionKey;
use ctxkeeper_store::memory::{LongTermMemory, MemoryScope, today};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

const KEY_A: &str = "Bearer sk-tenant-a-0123456789";
const KEY_B: &str = "Bearer sk-tenant-b-0123456789";

/// The tenant the gateway gives a request with this `authorization`.
fn tenant_of(gw: &common::Running, authorization: &str) -> String {
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        HeaderValue::from_str(authorization).unwrap(),
    );
    gw.gateway.config.tenants.resolve(&headers).unwrap()
}

/// Says "hello" on the Anthropic face as tenant A; the body the upstream then received.
async fn anthropic_hello(
    gw: &common::Running,
    upstream: &ctxkeeper_mock_upstream::MockServer,
) -> String {
    let response = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "sk-ant-tenant-a-0123456789")
        .header("anthropic-version", "2023-06-01")
        .json(
            &json!({"model": "claude-sonnet-4", "max_tokens": 100, "messages": [
            {"role": "user", "content": "hello"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    upstream.requests().last().unwrap().body.to_string()
}

/// Every file under `dir` (recursively) named `name`.
fn named(dir: &Path, name: &str) -> Vec<PathBuf> {
    files_under(dir, &|file| file == name)
}

async fn post(
    gw: &common::Running,
    authorization: &str,
    session: &str,
    body: &Value,
) -> reqwest::Response {
    client()
        .post(gw.url("/v1/chat/completions"))
        .header("authorization", authorization)
        .header("x-ctxkeeper-session", session)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn send(gw: &common::Running, authorization: &str, session: &str, history: &[Value]) {
    let headers = [
        ("authorization", authorization),
        ("x-ctxkeeper-session", session),
    ];
    common::send_chat(gw, &headers, history).await;
}

/// A coding session of `rounds` tool rounds in two user turns: the first states a constraint
/// (and is what a compaction during the second removes).
fn coding_session(rounds: usize) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content":
            "Fix the rounding bug in invoice totals. You must not change the public API."}),
    ];
    for i in 0..rounds {
        if i == rounds / 2 {
            messages
                .push(json!({"role": "user", "content": "Now do the same for the tax module."}));
        }
        let id = format!("call_{i}");
        messages.push(json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "read_file",
                    "arguments": format!("{{\"path\":\"src/billing/part{i}.rs\"}}")}}]
        }));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": filler(i, 400)}));
    }
    messages
}

/// The harness preset (compacts past 30 messages, keeps 10), memory as the policy wants it.
fn harness(dir: &tempfile::TempDir, upstream: &str) -> GatewayConfig {
    let mut cfg = config(dir, upstream);
    cfg.policy = ctxkeeper_core::engine::presets::preset("harness").unwrap();
    cfg
}

#[tokio::test]
async fn harness_flushes_facts_to_the_tenants_daily_memory_file_before_compacting() {
    let upstream = mock(128_000).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = harness(&dir, &upstream.anthropic_base_url());
    cfg.context_providers = vec![ContextProvider::Memory];
    let workspace = PathBuf::from(&cfg.workspace);
    assert!(cfg.memory_enabled(), "harness flushes before it compacts");
    let gw = start(cfg).await;
    let mut history = coding_session(20);
    send(&gw, KEY_A, "mem-1", &history).await;
    let compacted = upstream.requests().last().unwrap().body.clone();
    assert!(
        compacted["messages"].as_array().unwrap().len() < history.len(),
        "42 messages are over harness's 30: the request was compacted"
    );

    // Today's daily file of tenant A holds the facts of what the compaction removed: the
    // files read and the user's constraint, as the extractive summarizer found them.
    let tenant_a = tenant_of(&gw, KEY_A);
    let daily = named(&workspace, &format!("{}.md", today()));
    assert_eq!(daily.len(), 1, "{daily:?}");
    let expected = workspace
        .join("tenants")
        .join(ctxkeeper_store::archive::sanitize_segment(&tenant_a))
        .join("memory");
    assert_eq!(daily[0].parent(), Some(expected.as_path()));
    let text = std::fs::read_to_string(&daily[0]).unwrap();
    assert!(
        text.contains("before compaction of session mem-1"),
        "{text}"
    );
    assert!(text.contains("src/billing/part0.rs"), "{text}");
    assert!(text.contains("must not change the public API"), "{text}");

    // memory_search reads it for tenant A and finds nothing for tenant B.
    let memory = LongTermMemory::new(&workspace).unwrap();
    let scope_a = MemoryScope::new(tenant_a, SessionKey::DEFAULT).unwrap();
    let hits = memory
        .memory_search(&scope_a, "billing part0", 5)
        .await
        .unwrap();
    assert!(
        hits.first()
            .is_some_and(|h| h.path == format!("memory/{}.md", today())),
        "{hits:?}"
    );
    let scope_b = MemoryScope::new(tenant_of(&gw, KEY_B), SessionKey::DEFAULT).unwrap();
    assert!(
        memory
            .memory_search(&scope_b, "billing part0", 5)
            .await
            .unwrap()
            .is_empty()
    );

    // The memory provider names the file on the next request, after the client's messages.
    history.push(json!({"role": "assistant", "content": "Found it in part3."}));
    history.push(json!({"role": "user", "content": "Go on."}));
    send(&gw, KEY_A, "mem-1", &history).await;
    let last = upstream.requests().last().unwrap().body.clone();
    let messages = last["messages"].as_array().unwrap();
    let provided = messages.last().unwrap()["content"].to_string();
    assert!(
        provided.contains(&format!("memory/{}.md", today())) && provided.contains("memory_search"),
        "{provided}"
    );
    assert_eq!(
        messages[messages.len() - 2]["content"],
        "Go on.",
        "the client's last message stays right before the provided context"
    );
    gw.stop().await;
}

#[tokio::test]
async fn facts_are_flushed_when_summaries_are_written_upstream_too() {
    let upstream = mock(128_000).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = harness(&dir, &upstream.anthropic_base_url());
    cfg.summarizer =
        ctxkeeper_gateway::summarize::SummarizerChoice::parse("upstream", None, None).unwrap();
    let workspace = PathBuf::from(&cfg.workspace);
    let gw = start(cfg).await;
    send(&gw, KEY_A, "mem-upstream", &coding_session(20)).await;
    let daily = named(&workspace, &format!("{}.md", today()));
    assert_eq!(daily.len(), 1, "{daily:?}");
    let text = std::fs::read_to_string(&daily[0]).unwrap();
    assert!(text.contains("src/billing/part0.rs"), "{text}");
    gw.stop().await;
}

/// CowAgent: turns trimmed past `agent_max_context_turns` are summarized "to the daily memory
/// file", not into the context (here 4 turns instead of 20, to keep the test small).
#[tokio::test]
async fn cowagent_writes_the_trimmed_turns_summaries_to_the_daily_memory_file() {
    let (upstream, _dir, mut cfg) = mock_and_config(128_000).await;
    cfg.policy = ctxkeeper_core::engine::presets::preset("cowagent").unwrap();
    cfg.policy.trigger_turns = Some(4);
    for stage in &mut cfg.policy.stages {
        if let ctxkeeper_core::engine::Stage::TrimTurns { max_turns, .. } = stage {
            *max_turns = 4;
        }
    }
    let workspace = PathBuf::from(&cfg.workspace);
    let gw = start(cfg).await;
    let mut history = vec![json!({"role": "system", "content": "You book travel."})];
    for turn in 0..6 {
        history.push(json!({"role": "user", "content":
            format!("Turn {turn}: book flight BA{turn}00 to Lisbon for the conference.")}));
        history.push(json!({"role": "assistant", "content": format!("Booked BA{turn}00.")}));
    }
    history.push(json!({"role": "user", "content": "Now the hotel."}));
    send(&gw, KEY_A, "cow", &history).await;
    let sent = upstream.requests().last().unwrap().body.to_string();
    assert!(
        !sent.contains("BA000"),
        "the oldest turn was trimmed: {sent}"
    );
    let daily = named(&workspace, &format!("{}.md", today()));
    assert_eq!(daily.len(), 1, "{daily:?}");
    let text = std::fs::read_to_string(&daily[0]).unwrap();
    assert!(
        text.contains("BA000"),
        "the trimmed turn is in memory: {text}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn memory_is_off_when_the_policy_does_not_want_it_or_the_config_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(config(&dir, "http://127.0.0.1:9")).await;
    assert!(
        gw.gateway.sessions.memory().is_none(),
        "the default policy does not want memory"
    );
    gw.stop().await;
    for memory in [Some(false), None] {
        let upstream = mock(128_000).await;
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = harness(&dir, &upstream.anthropic_base_url());
        if memory.is_none() {
            // The policy key turns it off as the gateway key does.
            cfg.policy.memory.flush_before_compact = false;
        }
        cfg.memory = memory;
        let policy = format!("{memory:?}");
        let workspace = PathBuf::from(&cfg.workspace);
        let gw = start(cfg).await;
        assert!(gw.gateway.sessions.memory().is_none(), "{policy}");
        send(&gw, KEY_A, "no-memory", &coding_session(20)).await;
        let context = named(&workspace, "context.jsonl");
        assert!(!context.is_empty(), "{policy}: the compaction archived");
        let daily = named(&workspace, &format!("{}.md", today()));
        assert!(daily.is_empty(), "{policy}: {daily:?}");
        gw.stop().await;
    }
}

/// The provided context is the last message, so everything before it (tool schemas, system
/// prompt, every client message) is the prefix the provider caches: the mock serves the whole
/// previous history from its cache on the next request, though the budget line changed.
#[tokio::test]
async fn providers_sit_after_the_stable_prefix_so_the_prompt_cache_keeps_hitting() {
    let (upstream, _dir, mut cfg) = mock_and_config(128_000).await;
    cfg.context_providers = vec![ContextProvider::Date, ContextProvider::Budget];
    let gw = start(cfg).await;
    let mut history = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": filler(1, 3_000)}),
    ];
    let mut provided = Vec::new();
    for turn in 0..4 {
        send(&gw, KEY_A, "providers", &history).await;
        let sent = upstream.requests().last().unwrap().clone();
        let messages = sent.body["messages"].as_array().unwrap().clone();
        assert_eq!(messages.len(), history.len() + 1, "turn {turn}");
        assert_eq!(&messages[..history.len()], &history[..], "turn {turn}");
        let text = messages[history.len()]["content"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            text.contains(&format!("Today's date: {} (UTC).", today())),
            "{text}"
        );
        provided.push((text, sent.input_tokens, sent.cached_tokens));
        history.push(json!({"role": "assistant", "content": format!("step {turn} done")}));
        history.push(json!({"role": "user", "content": filler(turn + 2, 3_000)}));
    }
    assert_ne!(
        provided[0].0, provided[3].0,
        "the budget line follows the context"
    );
    for pair in provided.windows(2) {
        let (previous_text, previous_input, _) = &pair[0];
        let (_, _, cached) = &pair[1];
        // Only the previous request's provided message (a few dozen tokens) is not cached.
        let provided_tokens = previous_text.len() as u64 / 3 + 8;
        assert!(
            *cached + provided_tokens >= *previous_input,
            "cached {cached} of a previous request of {previous_input}"
        );
    }

    // The Anthropic face gets it as well, with its roles still alternating (the mock refuses
    // two user messages in a row).
    let sent = anthropic_hello(&gw, &upstream).await;
    assert!(sent.contains("Today's date:"), "{sent}");
    gw.stop().await;
}

/// Issue 33, item 6: under `agentrail` the context providers are prepended to the session
/// history, as Agentrail's are: the date goes right after the instructions, before the
/// conversation (it was appended after the last message). It changes once a day, so the
/// prefix stays cached; the budget line, which changes every request, still follows the
/// history.
#[tokio::test]
async fn agentrail_prepends_the_providers_to_the_history_and_keeps_the_prefix_cached() {
    let (upstream, _dir, mut cfg) = mock_and_config(128_000).await;
    cfg.policy = ctxkeeper_core::engine::presets::preset("agentrail").unwrap();
    cfg.context_providers = vec![ContextProvider::Date, ContextProvider::Budget];
    let gw = start(cfg).await;
    let date_line = format!("Today's date: {} (UTC).", today());
    let mut history = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": filler(1, 3_000)}),
    ];
    let mut sent_sizes = Vec::new();
    for turn in 0..3 {
        send(&gw, KEY_A, "prepended", &history).await;
        let sent = upstream.requests().last().unwrap().clone();
        let messages = sent.body["messages"].as_array().unwrap().clone();
        assert_eq!(messages.len(), history.len() + 2, "turn {turn}");
        assert_eq!(messages[0], history[0], "the instructions stay first");
        let prepended = messages[1]["content"].as_str().unwrap();
        assert!(prepended.contains(&date_line), "{prepended}");
        assert!(!prepended.contains("Context budget"), "{prepended}");
        assert_eq!(
            &messages[2..history.len() + 1],
            &history[1..],
            "turn {turn}"
        );
        let appended = messages[history.len() + 1]["content"].as_str().unwrap();
        assert!(appended.contains("Context budget"), "{appended}");
        sent_sizes.push((sent.input_tokens, sent.cached_tokens));
        history.push(json!({"role": "assistant", "content": format!("step {turn} done")}));
        history.push(json!({"role": "user", "content": filler(turn + 2, 3_000)}));
    }
    for pair in sent_sizes.windows(2) {
        let ((previous_input, _), (_, cached)) = (pair[0], pair[1]);
        // Only the previous request's budget line (a few dozen tokens) is not cached.
        assert!(
            cached + 40 >= previous_input,
            "cached {cached} of a previous request of {previous_input}"
        );
    }

    // The Anthropic face gets it before the conversation too, its roles still alternating
    // (the mock refuses two user messages in a row).
    let sent = anthropic_hello(&gw, &upstream).await;
    let (date_at, hello_at) = (sent.find("Today's date:"), sent.find("hello"));
    assert!(date_at.is_some() && date_at < hello_at, "{sent}");
    gw.stop().await;
}

#[tokio::test]
async fn no_context_is_added_by_default() {
    let (upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let history = vec![json!({"role": "user", "content": "hi"})];
    send(&gw, KEY_A, "plain", &history).await;
    let sent = upstream.requests().last().unwrap().body.clone();
    assert_eq!(sent["messages"], json!(history));
    gw.stop().await;
}

/// A tool result whose call the client lost, and a call whose result it never sent.
fn broken_history() -> Vec<Value> {
    vec![
        json!({"role": "user", "content": "List the files, then read the readme."}),
        json!({"role": "tool", "tool_call_id": "call_ghost", "content": "a.txt b.txt"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
            "type": "function", "function": {"name": "read_file",
            "arguments": "{\"path\":\"README.md\"}"}}]}),
        json!({"role": "user", "content": "Never mind, summarize instead."}),
    ]
}

#[tokio::test]
async fn broken_tool_pairs_are_refused_unless_repair_is_on() {
    let (upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let body = json!({"model": "gpt-4o", "messages": broken_history()});
    let response = post(&gw, KEY_A, "broken", &body).await;
    assert_eq!(response.status(), 400);
    let error = response.text().await.unwrap();
    assert!(error.contains("invalid tool call pairing"), "{error}");
    assert!(
        upstream.requests().is_empty(),
        "nothing reached the upstream"
    );
    gw.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir, &upstream.anthropic_base_url());
    cfg.repair = true;
    let gw = start(cfg).await;
    let key = SessionKey::new(
        tenant_of(&gw, KEY_A),
        SessionKey::DEFAULT,
        SessionKey::DEFAULT,
        "broken",
    )
    .unwrap();
    let mut events = gw.gateway.sessions.subscribe(&key);
    let response = post(&gw, KEY_A, "broken", &body).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    // The mock checks tool pairs on its own: it accepted the repaired history.
    let sent = upstream.requests().last().unwrap().clone();
    assert_eq!(sent.status, 200);
    let text = sent.body.to_string();
    assert!(
        !text.contains("call_ghost"),
        "the orphan result is gone: {text}"
    );
    assert!(text.contains("call_1"), "the call stays, answered: {text}");
    let mut repaired = None;
    while let Some(event) = events.next_within(Duration::from_secs(5)).await {
        if event.name == "history_repaired" {
            repaired = Some(event.data);
            break;
        }
    }
    let repaired = repaired.expect("a history_repaired event");
    assert_eq!(
        repaired["repairs"]["dropped_orphan_results"], 1,
        "{repaired}"
    );
    assert_eq!(repaired["repairs"]["synthesized_results"], 1, "{repaired}");

    // The same broken history repairs to the same bytes: the next step is recognised as a
    // continuation, and its prefix is served from the cache.
    let mut longer = broken_history();
    longer.push(json!({"role": "assistant", "content": "Two files."}));
    longer.push(json!({"role": "user", "content": "Thanks."}));
    let response = post(
        &gw,
        KEY_A,
        "broken",
        &json!({"model": "gpt-4o", "messages": longer}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let next = upstream.requests().last().unwrap().clone();
    assert!(next.cached_tokens > 0, "{next:?}");
    gw.stop().await;
}
