//! How the gateway follows real agents' conversations: one stable session per conversation
//! whatever per-call annotations the agent moves around, conversations that start alike kept
//! apart, the output budget a request asks for kept free, and overflow recovery that
//! converges (and stops) instead of looping.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{
    anthropic_tool_loop, client, config, filler, json_of, mock_and_config, mock_and_gateway,
    post_chat,
};
use ctxkeeper_core::tokens::Profiles;
use ctxkeeper_gateway::metrics::Metrics;
use ctxkeeper_gateway::tenancy::TenantRule;
use ctxkeeper_store::{HistoryPage, SessionFilter};
use serde_json::{Value, json};

const KEY: &str = "sk-ant-conversations-0123456789";

fn tenant() -> String {
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("x-api-key", KEY.parse().unwrap());
    TenantRule::default().resolve(&headers).unwrap()
}

/// An Anthropic conversation as Claude Code sends it on call `steps`: fixed cache markers on
/// the system blocks, and one on the last block of the newest message only (it moves every
/// call).
fn claude_code_body(steps: usize, output_bytes: usize, max_tokens: u64) -> Value {
    let messages = anthropic_tool_loop(steps, output_bytes, |i| format!("cat src/f{i}.rs"));
    json!({
        "model": "cc-model",
        "max_tokens": max_tokens,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1"},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
        "messages": messages,
    })
}

fn markers(body: &Value) -> usize {
    body.to_string().matches("\"cache_control\"").count()
}

async fn send_messages(
    gw: &common::Running,
    body: &Value,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// A gateway whose model has a 20,000-token window, over a mock upstream of the same
/// window, as `edit` configures it: the upstream and the state directory live as long as
/// the caller keeps them.
async fn compacting_gateway(
    edit: impl FnOnce(&mut ctxkeeper_gateway::GatewayConfig),
) -> (
    ctxkeeper_mock_upstream::MockServer,
    tempfile::TempDir,
    common::Running,
) {
    let (upstream, dir, mut cfg) = mock_and_config(20_000).await;
    cfg.profiles = profile(20_000);
    edit(&mut cfg);
    let gw = common::start(cfg).await;
    (upstream, dir, gw)
}

fn profile(window: u64) -> Profiles {
    Profiles::from_toml_str(&format!(
        "[models.\"cc-model\"]\ncontext_window = {window}\ntokenizer = \"o200k_base\"\n"
    ))
    .unwrap()
}

#[tokio::test]
async fn claude_codes_moving_cache_marker_keeps_one_session_and_at_most_its_own_markers() {
    // Regression: the moving marker changed the fingerprint of the previous newest message,
    // so every request "diverged" and rebuilt the context, and the first request derived a
    // session of its own.
    let (upstream, _dir, mut cfg) = mock_and_config(4_000).await;
    cfg.profiles = profile(4_000);
    let gw = common::start(cfg).await;
    let mut sessions = Vec::new();
    for step in 0..14 {
        let response = send_messages(&gw, &claude_code_body(step, 4_000, 512), &[]).await;
        assert_eq!(
            response.status(),
            200,
            "step {step}: {}",
            response.text().await.unwrap()
        );
        sessions.push(
            response.headers()["x-ctxkeeper-session"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    sessions.dedup();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(Metrics::get(&gw.gateway.metrics.divergences), 0);
    assert!(
        Metrics::get(&gw.gateway.metrics.compactions) > 0,
        "the window forced compaction"
    );
    assert_eq!(Metrics::get(&gw.gateway.metrics.overflow_recoveries), 0);
    for request in upstream.requests() {
        assert!(
            markers(&request.body) <= 2,
            "{} markers",
            markers(&request.body)
        );
    }
    // The compacted requests still carry the client's newest marker on its newest block.
    let last = upstream.requests().pop().unwrap();
    let newest = last.body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(newest.to_string().contains("cache_control"), "{newest}");
    // Each message is logged once.
    let listed = gw
        .gateway
        .sessions
        .store()
        .list(&SessionFilter::tenant(tenant()))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    let log = gw.log(&listed[0].key, 1_000).await;
    let shown: Vec<String> = log
        .iter()
        .map(|e| {
            serde_json::to_string(&e.message)
                .unwrap()
                .chars()
                .take(90)
                .collect()
        })
        .collect();
    // The system prompt, the task, 13 rounds.
    assert_eq!(log.len(), 2 + 2 * 13, "{shown:#?}");
}

#[tokio::test]
async fn harness_session_headers_name_the_session_and_a_side_request_forks() {
    let (_upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let header = [(
        "x-claude-code-session-id",
        "3f0c1b2a-aaaa-4bbb-8ccc-0123456789ab",
    )];
    for step in 0..3 {
        let response = send_messages(&gw, &claude_code_body(step, 200, 1_024), &header).await;
        assert_eq!(
            response.headers()["x-ctxkeeper-session"],
            "cc-3f0c1b2a-aaaa-4bbb-8ccc-0123456789ab"
        );
    }
    // The title request shares the harness session id but is another conversation.
    let title = json!({"model": "cc-model", "max_tokens": 512,
        "system": [{"type": "text", "text": "Write a 5-word title."}],
        "messages": [{"role": "user", "content": "Fix the failing invoice test."}]});
    let response = send_messages(&gw, &title, &header).await;
    let forked = response.headers()["x-ctxkeeper-session"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        forked.starts_with("cc-3f0c1b2a-aaaa-4bbb-8ccc-0123456789ab+"),
        "{forked}"
    );
    let response = send_messages(&gw, &claude_code_body(3, 200, 1_024), &header).await;
    assert_eq!(
        response.headers()["x-ctxkeeper-session"],
        "cc-3f0c1b2a-aaaa-4bbb-8ccc-0123456789ab",
        "the main loop continues where it was"
    );
    assert_eq!(Metrics::get(&gw.gateway.metrics.divergences), 0);
    assert_eq!(Metrics::get(&gw.gateway.metrics.session_forks), 1);
}

#[tokio::test]
async fn two_interleaved_conversations_with_identical_starts_log_only_their_own_messages() {
    // Regression: 200 requests of 2 interleaved conversations produced 15,506 log entries.
    let (_upstream, _dir, gw) = mock_and_gateway(128_000).await;
    let start = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": "Fix the rounding bug."}),
    ];
    let mut conversations = [start.clone(), start];
    let mut sessions = [String::new(), String::new()];
    for round in 0..50 {
        for (c, messages) in conversations.iter_mut().enumerate() {
            if round > 0 {
                messages.push(
                    json!({"role": "assistant", "content": format!("agent {c}, reply {round}")}),
                );
                messages.push(
                    json!({"role": "user", "content": format!("agent {c}, next step {round}")}),
                );
            }
            let response = post_chat(
                &gw,
                &[("authorization", &format!("Bearer {KEY}"))],
                &json!({"model": "gpt-4o", "messages": messages}),
            )
            .await;
            assert_eq!(response.status(), 200);
            sessions[c] = response.headers()["x-ctxkeeper-session"]
                .to_str()
                .unwrap()
                .to_string();
        }
    }
    assert_ne!(sessions[0], sessions[1]);
    let mut logged = 0;
    let store = gw.gateway.sessions.store();
    for listed in store
        .list(&SessionFilter::tenant(tenant_of_bearer()))
        .await
        .unwrap()
    {
        logged += store
            .history(&listed.key, HistoryPage::last(10_000))
            .await
            .unwrap()
            .len();
    }
    let expected: usize = conversations.iter().map(Vec::len).sum();
    assert_eq!(logged, expected, "each conversation's messages, once");
    assert_eq!(Metrics::get(&gw.gateway.metrics.divergences), 0);
}

fn tenant_of_bearer() -> String {
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {KEY}").parse().unwrap());
    TenantRule::default().resolve(&headers).unwrap()
}

#[tokio::test]
async fn the_requested_max_tokens_is_kept_free_in_the_window() {
    // Regression: Claude Code sends max_tokens 32000; the context was budgeted to the whole
    // window, so input + max_tokens went over it and the provider refused every ~20 steps.
    let (upstream, _dir, mut cfg) = mock_and_config(20_000).await;
    cfg.profiles = profile(20_000);
    let gw = common::start(cfg).await;
    for step in 0..30 {
        let response = send_messages(&gw, &claude_code_body(step, 1_500, 8_000), &[]).await;
        assert_eq!(response.status(), 200, "step {step}");
    }
    assert_eq!(
        Metrics::get(&gw.gateway.metrics.overflow_recoveries),
        0,
        "no request went over input + max_tokens"
    );
    for request in upstream.requests() {
        assert_eq!(request.status, 200);
        assert!(
            request.input_tokens + 8_000 <= 20_000,
            "input {}",
            request.input_tokens
        );
    }
}

/// An upstream that answers every chat call with OpenAI's overflow error, and counts calls.
async fn always_overflowing() -> (String, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            seen.fetch_add(1, Ordering::SeqCst);
            async {
                (
                    axum::http::StatusCode::BAD_REQUEST,
                    axum::Json(json!({"error": {
                        "message": "Your input exceeds the context window of this model.",
                        "type": "invalid_request_error", "param": "input",
                        "code": "context_length_exceeded"}})),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), calls)
}

#[tokio::test]
async fn a_session_that_keeps_overflowing_gets_the_providers_error_instead_of_a_loop() {
    let (upstream, calls) = always_overflowing().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = common::start(config(&dir, &upstream)).await;
    let mut messages = vec![json!({"role": "user", "content": "Summarize the logs."})];
    let mut per_request = Vec::new();
    for i in 0..6 {
        // The history grows, the newest round stays small: there is always something to
        // compact, so only the circuit breaker can stop the recoveries.
        messages.push(json!({"role": "assistant", "content": filler(i, 4_000)}));
        messages.push(json!({"role": "user", "content": "Go on."}));
        messages.push(json!({"role": "assistant", "content": format!("part {i} read")}));
        messages.push(json!({"role": "user", "content": "Go on."}));
        let before = calls.load(Ordering::SeqCst);
        let response = post_chat(
            &gw,
            &[
                ("authorization", &format!("Bearer {KEY}")),
                ("x-ctxkeeper-session", "looping"),
            ],
            &json!({"model": "gpt-4o", "messages": messages}),
        )
        .await;
        assert_eq!(response.status(), 400);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "context_length_exceeded");
        per_request.push(calls.load(Ordering::SeqCst) - before);
    }
    // The first request recovers (and fails again); each failure shrinks the learned window
    // until nothing more can be cut, and from the fourth request on the circuit breaker
    // sends the error straight back without even trying.
    assert!(per_request[0] > 1, "{per_request:?}");
    assert!(per_request[3..].iter().all(|&n| n == 1), "{per_request:?}");
    assert_eq!(Metrics::get(&gw.gateway.metrics.recoveries_refused), 3);
    assert!(Metrics::get(&gw.gateway.metrics.repeated_overflows) >= 3);
}

#[tokio::test]
async fn a_responses_overflow_without_a_stated_window_is_learned_once() {
    // Regression: OpenAI's Responses overflow error states no number; the gateway learned
    // nothing and a Codex run overflowed and recovered on nearly every request.
    let (upstream, _dir, gw) = mock_and_gateway(3_000).await;
    let mut input = vec![
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the build."}]}),
    ];
    let tools = json!([{"type": "function", "name": "exec_command", "description": "run",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]);
    for i in 0..24 {
        let id = format!("call_{i}");
        input.push(
            json!({"type": "function_call", "call_id": id, "name": "exec_command",
            "arguments": format!("{{\"cmd\":\"cat f{i}\"}}")}),
        );
        input.push(
            json!({"type": "function_call_output", "call_id": id, "output": filler(i, 1_200)}),
        );
        let response = client()
            .post(gw.url("/v1/responses"))
            .header("authorization", format!("Bearer {KEY}"))
            .header("session-id", "019a0000-0000-7000-8000-00000000c0de")
            .json(&json!({"model": "gpt-5", "input": input, "tools": tools, "store": false}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "request {i}");
    }
    let seen: Vec<(u16, u64)> = upstream
        .requests()
        .iter()
        .map(|r| (r.status, r.input_tokens))
        .collect();
    let recoveries = Metrics::get(&gw.gateway.metrics.overflow_recoveries);
    assert!(
        (1..=2).contains(&recoveries),
        "{recoveries} recoveries over 24 requests: {seen:?}"
    );
    assert_eq!(Metrics::get(&gw.gateway.metrics.recoveries_refused), 0);
}

/// A Claude Code-like conversation of `steps` tool rounds whose task is stated first and a
/// later instruction opens the current turn (so the task is an old message, compactable).
fn pinned_body(steps: usize) -> Value {
    let mut body = claude_code_body(0, 0, 1_000);
    let messages = body["messages"].as_array_mut().unwrap();
    messages.clear();
    messages.push(json!({"role": "user", "content": PINNED_TASK}));
    for i in 0..steps {
        if i == 3 {
            messages.push(json!({"role": "assistant", "content": "Done with the first part."}));
            messages.push(json!({"role": "user", "content": "Now also update the changelog."}));
        }
        let id = format!("toolu_{i:04}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": format!("cat src/f{i}.rs")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": filler(i, 6_000)}]}));
    }
    body
}

const PINNED_TASK: &str = "Fix the failing invoice test without touching the migrations.";

/// Whether the request carries the task word for word as a text of its own (consecutive
/// user messages are merged into one Anthropic message, each its own text block), not only
/// quoted inside the capsule.
fn task_as_own_message(body: &Value) -> bool {
    body["messages"].as_array().unwrap().iter().any(|m| {
        m["role"] == "user"
            && (m["content"] == PINNED_TASK
                || m["content"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(|b| b["text"] == PINNED_TASK)))
    })
}

#[tokio::test]
async fn the_pin_header_keeps_the_newest_user_message_through_every_compaction() {
    for pin in [true, false] {
        let (upstream, _dir, gw) = compacting_gateway(|_| {}).await;
        let headers: &[(&str, &str)] = if pin {
            &[
                ("x-ctxkeeper-session", "pinned"),
                ("x-ctxkeeper-pin", "latest"),
            ]
        } else {
            &[("x-ctxkeeper-session", "pinned")]
        };
        for step in 1..=40 {
            let response = send_messages(&gw, &pinned_body(step), headers).await;
            assert_eq!(response.status(), 200, "step {step}");
        }
        let compacted = Metrics::get(&gw.gateway.metrics.compactions);
        assert!(compacted >= 1, "the session must compact: {compacted}");
        let last = upstream.requests().last().unwrap().body.clone();
        assert_eq!(
            task_as_own_message(&last),
            pin,
            "pinned: {pin}; the task as its own message in the last request"
        );
    }

    // A misspelt value is refused, not ignored.
    let (_upstream, _dir, gw) = mock_and_gateway(20_000).await;
    let response = send_messages(&gw, &pinned_body(1), &[("x-ctxkeeper-pin", "lastest")]).await;
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("x-ctxkeeper-pin"));
}

/// `x-ctxkeeper-focus` reaches the summarizer of the compactions its requests cause (the
/// extractive summary opens with it); without the header no summary names a focus. An
/// oversized focus is refused with the header's name, not silently cut.
#[tokio::test]
async fn the_focus_header_steers_the_summaries_of_its_requests() {
    const FOCUS: &str = "the invoice rounding in src/f2.rs";
    for focused in [true, false] {
        let (upstream, _dir, gw) = compacting_gateway(|_| {}).await;
        let headers: &[(&str, &str)] = if focused {
            &[
                ("x-ctxkeeper-session", "focused"),
                ("x-ctxkeeper-focus", FOCUS),
            ]
        } else {
            &[("x-ctxkeeper-session", "focused")]
        };
        for step in 1..=40 {
            let response = send_messages(&gw, &pinned_body(step), headers).await;
            assert_eq!(response.status(), 200, "step {step}");
        }
        assert!(Metrics::get(&gw.gateway.metrics.compactions) >= 1);
        let named = upstream.requests().iter().any(|r| {
            r.body
                .to_string()
                .contains(&format!("Compaction focus: {FOCUS}"))
        });
        assert_eq!(named, focused, "focus header sent: {focused}");
    }

    let (_upstream, _dir, gw) = mock_and_gateway(20_000).await;
    let long = "x".repeat(ctxkeeper_gateway::identity::MAX_FOCUS_BYTES + 1);
    let response = send_messages(&gw, &pinned_body(1), &[("x-ctxkeeper-focus", &long)]).await;
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("x-ctxkeeper-focus"));
}

/// The standing orders a session's capsule read are listed through the admin API, and an
/// operator can pin, withdraw and reinstate one; the edit is saved with the session. A
/// position the session does not have, a body that changes nothing and an unknown session
/// are refused with the reason.
#[tokio::test]
async fn standing_orders_are_listed_and_edited_through_the_admin_api() {
    let (_upstream, _dir, gw) =
        compacting_gateway(|cfg| cfg.admin_token = Some("admin-secret".into())).await;
    let body = |steps: usize| {
        let mut body = pinned_body(steps);
        body["messages"][0]["content"] = json!(format!(
            "{PINNED_TASK} Never push to main. The release codename is KESTREL."
        ));
        body
    };
    for step in 1..=40 {
        let response = send_messages(&gw, &body(step), &[("x-ctxkeeper-session", "orders")]).await;
        assert_eq!(response.status(), 200, "step {step}");
    }
    assert!(Metrics::get(&gw.gateway.metrics.compactions) >= 1);
    let http = reqwest::Client::new();
    let admin = |method: reqwest::Method, path: &str| {
        http.request(method, gw.url(path))
            .header("authorization", "Bearer admin-secret")
            .header("x-ctxkeeper-tenant", tenant())
    };
    let listed: Value = json_of(admin(reqwest::Method::GET, "/admin/sessions/orders/orders")).await;
    let orders = listed["orders"]
        .as_array()
        .unwrap_or_else(|| panic!("orders listed: {listed}"));
    let rule = orders
        .iter()
        .position(|o| o["text"] == "Never push to main.")
        .unwrap_or_else(|| panic!("the rule is listed: {listed}"));
    assert_eq!(orders[rule]["kind"], "rule");
    assert_eq!(orders[rule]["current"], true);
    assert!(
        orders
            .iter()
            .any(|o| o["text"] == "The release codename is KESTREL." && o["kind"] == "fact"),
        "{listed}"
    );

    let path = format!("/admin/sessions/orders/orders/{rule}");
    for (edit, field, value) in [
        (json!({"pinned": true}), "pinned", true),
        (json!({"current": false}), "current", false),
        (json!({"current": true}), "current", true),
    ] {
        let answer = admin(reqwest::Method::PATCH, &path)
            .json(&edit)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{edit}");
        let edited: Value = answer.json().await.unwrap();
        assert_eq!(edited["order"][field], value, "{edit}: {edited}");
        // Saved: a fresh read shows it.
        let again: Value =
            json_of(admin(reqwest::Method::GET, "/admin/sessions/orders/orders")).await;
        assert_eq!(again["orders"][rule][field], value, "{edit}: {again}");
    }

    let beyond = admin(reqwest::Method::PATCH, "/admin/sessions/orders/orders/999")
        .json(&json!({"pinned": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(beyond.status(), 404);
    assert!(
        beyond
            .text()
            .await
            .unwrap()
            .contains("no standing order 999")
    );
    let nothing = admin(reqwest::Method::PATCH, &path)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(nothing.status(), 400);
    let unknown_field = admin(reqwest::Method::PATCH, &path)
        .json(&json!({"colour": "red"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown_field.status(), 400);
    let unknown = admin(reqwest::Method::GET, "/admin/sessions/nobody/orders")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
}
