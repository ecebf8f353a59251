//! Every tool against a real SQLite store, a local workspace and memory files, called directly
//! and through rmcp's in-process client; every hostile input must come back as a tool error.

use std::sync::Arc;

use ctxkeeper::core::engine::{PolicyConfig, Stage, presets};
use ctxkeeper::core::model::{Message, Part, Role};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::llm::ExtractiveSummarizer;
use ctxkeeper::store::archive::Offloader;
use ctxkeeper::store::memory::{LongTermMemory, MemoryScope};
use ctxkeeper::store::{AgentState, LocalWorkspace, SessionKey, SessionStore, open_store};
use ctxkeeper_mcp::{ContextServer, Options, Services};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

/// A multi-byte, multi-line tool output larger than one page.
fn big_output() -> String {
    let mut text = String::new();
    for i in 0..1500 {
        text.push_str(&format!(
            "line {i}: résumé ✓ naïve 日本語 value={}\n",
            i * 7
        ));
    }
    text.push_str("the marker ZEBRAFISH-42 appears once\n");
    text
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<dyn SessionStore>,
    archive: Arc<dyn Offloader>,
    memory: Arc<LongTermMemory>,
    output: String,
    output_ref: String,
}

fn tool_call(id: &str, name: &str) -> Message {
    Message::new(
        Role::Assistant,
        vec![Part::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: "{\"path\":\"src/lib.rs\"}".into(),
            extra: Default::default(),
        }],
    )
}

fn tool_result(id: &str, text: &str) -> Message {
    Message::new(
        Role::Tool,
        vec![Part::ToolResult {
            call_id: id.into(),
            content: vec![Part::text(text)],
            is_error: false,
            extra: Default::default(),
        }],
    )
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("sessions.db").display());
    let store = open_store(&url).await.expect("store");
    let archive: Arc<dyn Offloader> =
        Arc::new(LocalWorkspace::new(dir.path().join("workspace")).expect("workspace"));
    let memory = Arc::new(LongTermMemory::new(dir.path().join("workspace")).expect("memory"));
    let output = big_output();

    // s1: a session whose big tool output was archived and replaced by a placeholder.
    let key = SessionKey::simple("s1").expect("key");
    let output_ref = archive
        .offload_tool_result(&key.archive_scope(), "call_1", &output)
        .await
        .expect("offload")
        .0;
    let mut log = vec![
        Message::system("You are a coding agent."),
        Message::user("find the marker in the data file"),
        tool_call("call_1", "read_file"),
        tool_result("call_1", &output),
    ];
    for i in 0..26 {
        log.push(Message::user(format!("step {i}: keep going with the plan")));
        log.push(Message::assistant(format!(
            "done with step {i}, found nothing new"
        )));
    }
    store.append(&key, &log).await.expect("append");
    let mut state = AgentState::new();
    state.context = log.clone();
    state.context[3] = tool_result(
        "call_1",
        &format!("[tool output cleared; the full output is archived at {output_ref}]"),
    );
    store.save(&key, &state, None).await.expect("save");

    // s2: another session of the same tenant.
    let s2 = SessionKey::simple("s2").expect("key");
    store
        .append(&s2, &[Message::user("the invoice for s2 is overdue")])
        .await
        .expect("append");

    // Another tenant with the same session id and a secret in its log and archive.
    let other = SessionKey::new("acme", "default", "default", "s1").expect("key");
    store
        .append(&other, &[Message::user("SECRETWORD of acme")])
        .await
        .expect("append");
    archive
        .offload_tool_result(
            &other.archive_scope(),
            "secret",
            "SECRETWORD in the archive",
        )
        .await
        .expect("offload");

    let default_scope = MemoryScope::new("default", "default").expect("scope");
    memory
        .append_memory(
            &default_scope,
            "# Facts\n\nThe deploy key rotates every Tuesday.",
        )
        .await
        .expect("memory");
    let acme_scope = MemoryScope::new("acme", "default").expect("scope");
    memory
        .append_memory(&acme_scope, "acme rotates SECRETWORD monthly")
        .await
        .expect("memory");

    Fixture {
        _dir: dir,
        store,
        archive,
        memory,
        output,
        output_ref,
    }
}

fn server(f: &Fixture, tenant: &str, session: Option<&str>, window: u64) -> ContextServer {
    server_with(f, tenant, session, window, "default")
}

fn server_with(
    f: &Fixture,
    tenant: &str,
    session: Option<&str>,
    window: u64,
    policy: &str,
) -> ContextServer {
    server_with_policy(
        f,
        tenant,
        session,
        window,
        presets::preset(policy).expect("preset"),
    )
}

fn server_with_policy(
    f: &Fixture,
    tenant: &str,
    session: Option<&str>,
    window: u64,
    policy: PolicyConfig,
) -> ContextServer {
    ContextServer::new(
        Services {
            store: f.store.clone(),
            archive: f.archive.clone(),
            memory: Some(f.memory.clone()),
            summarizer: Arc::new(ExtractiveSummarizer::default()),
            tool_calls: None,
        },
        Options {
            tenant: tenant.into(),
            session: session.map(str::to_string),
            policy,
            model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
            window,
        },
    )
    .expect("server")
}

/// The structured result of a successful call.
fn ok(result: CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "expected success: {result:?}");
    result.structured_content.expect("structured content")
}

/// The message of a failed call.
fn err(result: CallToolResult) -> String {
    assert_eq!(
        result.is_error,
        Some(true),
        "expected a tool error: {result:?}"
    );
    assert!(result.structured_content.is_none(), "{result:?}");
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .expect("error text")
}

const TOOLS: [&str; 10] = [
    "session_list",
    "session_history",
    "session_search",
    "context_read",
    "context_grep",
    "context_list",
    "memory_search",
    "memory_get",
    "context_stats",
    "compact",
];

#[tokio::test]
async fn every_tool_is_offered() {
    let f = fixture().await;
    let mut names = server(&f, "default", None, 128_000).tool_names();
    names.sort();
    let mut expected: Vec<String> = TOOLS.iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(names, expected);
}

#[tokio::test]
async fn session_list_shows_only_the_tenant_and_the_confined_session() {
    let f = fixture().await;
    let all = ok(server(&f, "default", None, 128_000)
        .call("session_list", json!({}))
        .await);
    let mut names: Vec<&str> = all["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(|s| s["session"].as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["s1", "s2"]);
    let s1 = all["sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|x| x["session"] == "s1"))
        .expect("s1");
    assert_eq!(s1["log_entries"], 56);

    let confined = ok(server(&f, "default", Some("s2"), 128_000)
        .call("session_list", json!({}))
        .await);
    assert_eq!(confined["total"], 1);
    assert_eq!(confined["sessions"][0]["session"], "s2");

    let acme = ok(server(&f, "acme", None, 128_000)
        .call("session_list", json!({}))
        .await);
    assert_eq!(acme["total"], 1);
}

#[tokio::test]
async fn session_history_pages_backwards_by_sequence() {
    let f = fixture().await;
    let server = server(&f, "default", Some("s1"), 128_000);
    let page = ok(server.call("session_history", json!({"last": 10})).await);
    let seqs: Vec<u64> = page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert_eq!(seqs, (47..=56).collect::<Vec<u64>>());
    assert_eq!(page["next_before_seq"], 47);

    let older = ok(server
        .call(
            "session_history",
            json!({"last": 3, "before_seq": 5, "max_chars": 100}),
        )
        .await);
    let entries = older["entries"].as_array().expect("entries");
    let seqs: Vec<u64> = entries.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, [2, 3, 4]);
    // The tool output (seq 4) is cut to max_chars and says so.
    assert_eq!(entries[2]["truncated"], true);
    assert_eq!(
        entries[2]["text"].as_str().map(|t| t.chars().count()),
        Some(100)
    );
    assert!(
        entries[1]["text"]
            .as_str()
            .is_some_and(|t| t.contains("[tool call read_file id=call_1]"))
    );
    assert_eq!(older["next_before_seq"], 2);
}

#[tokio::test]
async fn session_search_finds_compacted_tool_output_and_stays_in_the_tenant() {
    let f = fixture().await;
    let all = server(&f, "default", None, 128_000);
    let found = ok(all
        .call("session_search", json!({"query": "ZEBRAFISH"}))
        .await);
    let hits = found["hits"].as_array().expect("hits");
    assert_eq!(hits.len(), 1, "{found}");
    assert_eq!(hits[0]["session"], "s1");
    assert_eq!(hits[0]["seq"], 4);
    assert!(
        hits[0]["snippet"]
            .as_str()
            .is_some_and(|s| s.contains("ZEBRAFISH"))
    );

    // Across the tenant without a session, never into another tenant.
    let invoice = ok(all
        .call("session_search", json!({"query": "invoice"}))
        .await);
    assert_eq!(invoice["hits"][0]["session"], "s2");
    let secret = ok(all
        .call("session_search", json!({"query": "SECRETWORD"}))
        .await);
    assert_eq!(secret["hits"], json!([]));

    // Confined to s1, s2's words are not found and asking for s2 is refused.
    let s1 = server(&f, "default", Some("s1"), 128_000);
    let none = ok(s1.call("session_search", json!({"query": "invoice"})).await);
    assert_eq!(none["hits"], json!([]));
    let refused = err(s1
        .call(
            "session_search",
            json!({"query": "invoice", "session": "s2"}),
        )
        .await);
    assert!(refused.contains("outside this server's scope"), "{refused}");
}

#[tokio::test]
async fn context_read_pages_an_archived_output_back_byte_for_byte() {
    let f = fixture().await;
    let server = server(&f, "default", Some("s1"), 128_000);
    let mut offset = 0u64;
    let mut read = String::new();
    let mut pages = 0;
    loop {
        let page = ok(server
            .call(
                "context_read",
                json!({"reference": f.output_ref, "offset": offset, "limit": 7001}),
            )
            .await);
        assert_eq!(page["total_bytes"], f.output.len() as u64);
        read.push_str(page["content"].as_str().expect("content"));
        pages += 1;
        match page["next_offset"].as_u64() {
            Some(next) => {
                assert_eq!(page["complete"], false);
                offset = next;
            }
            None => break,
        }
        assert!(pages < 100, "paging must end");
    }
    assert!(pages > 2);
    assert_eq!(read, f.output);

    // Pasted with the placeholder's closing bracket and without a configured session.
    let unconfined = self::server(&f, "default", None, 128_000);
    let page = ok(unconfined
        .call(
            "context_read",
            json!({"reference": format!("{}]", f.output_ref), "limit": 20}),
        )
        .await);
    assert_eq!(page["content"], f.output[..20]);
}

#[tokio::test]
async fn hostile_references_never_return_content() {
    let f = fixture().await;
    let confined = server(&f, "default", Some("s1"), 128_000);
    let unconfined = server(&f, "default", None, 128_000);
    let hostile = [
        "../sessions/s1/tool_result-call_1.txt",
        "sessions/../../etc/passwd",
        "sessions/s1/../../../etc/passwd",
        "/etc/passwd",
        "file:///etc/passwd",
        "sessions/s1/tool_result-call_1.txt\0",
        "sessions\\s1\\tool_result-call_1.txt",
        "tenants/acme/sessions/s1/tool_result-secret.txt",
        "sessions/s1/tool_result-secret.txt",
        "sessions/s2/tool_result-call_1.txt",
        "sessions/s1/.context.lock",
        "",
    ];
    for server in [&confined, &unconfined] {
        for reference in hostile {
            let message = err(server
                .call("context_read", json!({"reference": reference}))
                .await);
            assert!(
                message.starts_with("invalid:") || message.starts_with("not found:"),
                "{reference:?}: {message}"
            );
            assert!(!message.contains("SECRETWORD"), "{message}");
        }
    }
    // Another session's reference from a confined server reads as not found.
    let other = err(confined
        .call(
            "context_read",
            json!({"reference": "sessions/s2/tool_result-call_1.txt"}),
        )
        .await);
    assert!(other.starts_with("not found:"), "{other}");
    // A session argument that is itself hostile is refused.
    let bad_session = err(unconfined
        .call(
            "context_read",
            json!({"reference": f.output_ref, "session": "../acme"}),
        )
        .await);
    assert!(bad_session.starts_with("invalid:"), "{bad_session}");
    // The other tenant reads its own item, never ours.
    let acme = server(&f, "acme", None, 128_000);
    let theirs = ok(acme
        .call(
            "context_read",
            json!({"reference": "sessions/s1/tool_result-secret.txt"}),
        )
        .await);
    assert_eq!(theirs["content"], "SECRETWORD in the archive");
    assert!(
        err(acme
            .call("context_read", json!({"reference": f.output_ref}))
            .await)
        .starts_with("not found:")
    );
}

#[tokio::test]
async fn context_grep_reports_line_numbers_and_refuses_bad_patterns() {
    let f = fixture().await;
    let server = server(&f, "default", Some("s1"), 128_000);
    let found = ok(server
        .call("context_grep", json!({"pattern": "ZEBRA\\w+-\\d+"}))
        .await);
    let hits = found["hits"].as_array().expect("hits");
    assert_eq!(hits.len(), 1, "{found}");
    assert_eq!(hits[0]["reference"], f.output_ref);
    assert_eq!(hits[0]["line"], 1501);
    assert_eq!(found["more"], false);

    let limited = ok(server
        .call(
            "context_grep",
            json!({"pattern": "RÉSUMÉ", "ignore_case": true, "limit": 5}),
        )
        .await);
    assert_eq!(limited["hits"].as_array().map(Vec::len), Some(5));
    assert_eq!(limited["more"], true);
    assert_eq!(limited["hits"][2]["line"], 3);

    let invalid = err(server
        .call("context_grep", json!({"pattern": "(unclosed"}))
        .await);
    assert!(invalid.contains("invalid regular expression"), "{invalid}");
    let huge = err(server
        .call("context_grep", json!({"pattern": "a".repeat(1 << 20)}))
        .await);
    assert!(huge.contains("limit"), "{huge}");
    let blowup = err(server
        .call("context_grep", json!({"pattern": "(\\w{100}){100}"}))
        .await);
    assert!(blowup.contains("invalid regular expression"), "{blowup}");
    // No session given to a server that serves several.
    let unconfined = self::server(&f, "default", None, 128_000);
    let which = err(unconfined
        .call("context_grep", json!({"pattern": "x"}))
        .await);
    assert!(which.contains("pass `session`"), "{which}");
}

#[tokio::test]
async fn context_list_globs_inside_the_archive_only() {
    let f = fixture().await;
    let server = server(&f, "default", Some("s1"), 128_000);
    let all = ok(server.call("context_list", json!({})).await);
    assert_eq!(all["count"], 1);
    assert_eq!(all["items"][0]["reference"], f.output_ref);
    assert_eq!(all["items"][0]["bytes"], f.output.len() as u64);
    let some = ok(server
        .call("context_list", json!({"pattern": "tool_result-*"}))
        .await);
    assert_eq!(some["count"], 1);
    let none = ok(server
        .call("context_list", json!({"pattern": "*.jsonl"}))
        .await);
    assert_eq!(none["count"], 0);
    for bad in ["../*", "/etc/*", "sessions/../../*", "a\0b", "**\\*"] {
        let message = err(server.call("context_list", json!({"pattern": bad})).await);
        assert!(message.starts_with("invalid:"), "{bad:?}: {message}");
    }
    let broken = err(server
        .call("context_list", json!({"pattern": "[z-a"}))
        .await);
    assert!(broken.starts_with("invalid:"), "{broken}");
}

#[tokio::test]
async fn memory_tools_read_the_tenants_memory_only() {
    let f = fixture().await;
    let server = server(&f, "default", None, 128_000);
    let found = ok(server
        .call("memory_search", json!({"query": "deploy key"}))
        .await);
    assert_eq!(found["hits"][0]["path"], "MEMORY.md");
    let secret = ok(server
        .call("memory_search", json!({"query": "SECRETWORD"}))
        .await);
    assert_eq!(secret["hits"], json!([]));
    let file = ok(server
        .call(
            "memory_get",
            json!({"path": "MEMORY.md", "from_line": 3, "lines": 1}),
        )
        .await);
    assert_eq!(file["text"], "The deploy key rotates every Tuesday.");
    for bad in [
        "../MEMORY.md",
        "/etc/passwd",
        "memory/../../x.md",
        "tenants/acme/MEMORY.md",
    ] {
        let message = err(server.call("memory_get", json!({"path": bad})).await);
        assert!(message.starts_with("invalid:"), "{bad:?}: {message}");
    }
    let missing = err(server
        .call("memory_get", json!({"path": "memory/2020-01-01.md"}))
        .await);
    assert!(missing.starts_with("not found:"), "{missing}");
    let huge = err(server
        .call("memory_search", json!({"query": "x ".repeat(1 << 19)}))
        .await);
    assert!(huge.contains("limit"), "{huge}");
}

/// Finding 6 of the hardening review: links planted in the workspace were followed —
/// `memory_get` and `memory_search` read the file behind a linked `MEMORY.md`, `context_list`
/// listed the directory behind a linked session, and a link into another tenant's archive
/// passed the containment check. Every such call must now be a tool error naming the link.
#[tokio::test]
async fn planted_links_are_tool_errors_never_content() {
    let f = fixture().await;
    let workspace = f._dir.path().join("workspace");
    let outside = f._dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
    let link = |target: &std::path::Path, at: &str| {
        let at = workspace.join(at);
        let _ = std::fs::remove_file(&at);
        std::os::unix::fs::symlink(target, at).expect("symlink");
    };
    link(&outside.join("passwd"), "MEMORY.md");
    link(&outside, "sessions/etc");
    link(
        &outside.join("passwd"),
        "sessions/s1/tool_result-passwd.txt",
    );
    link(
        &workspace.join("tenants/acme/sessions/s1/tool_result-secret.txt"),
        "sessions/s1/tool_result-acme.txt",
    );
    let server = server(&f, "default", None, 128_000);
    let refused = |message: String, what: &str| {
        assert!(
            message.starts_with("forbidden:") && message.contains("symbolic link"),
            "{what}: {message}"
        );
        assert!(!message.contains("root:x") && !message.contains("SECRETWORD"));
    };

    refused(
        err(server
            .call("memory_get", json!({"path": "MEMORY.md"}))
            .await),
        "memory_get",
    );
    refused(
        err(server.call("memory_search", json!({"query": "root"})).await),
        "memory_search",
    );
    refused(
        err(server.call("context_list", json!({"session": "etc"})).await),
        "context_list of a linked session",
    );
    refused(
        err(server
            .call("context_grep", json!({"pattern": "root", "session": "etc"}))
            .await),
        "context_grep of a linked session",
    );
    for reference in [
        "sessions/s1/tool_result-passwd.txt",
        "sessions/s1/tool_result-acme.txt",
        "sessions/etc/passwd",
    ] {
        refused(
            err(server
                .call("context_read", json!({"reference": reference}))
                .await),
            reference,
        );
    }
    // The session's own listing and grep pass over the linked items without reading them.
    let listed = ok(server.call("context_list", json!({"session": "s1"})).await);
    assert_eq!(listed["count"], 1, "{listed}");
    assert_eq!(listed["items"][0]["reference"], f.output_ref);
    let grep = ok(server
        .call(
            "context_grep",
            json!({"pattern": "root:x|SECRETWORD", "session": "s1"}),
        )
        .await);
    assert_eq!(grep["hits"], json!([]));
}

#[tokio::test]
async fn context_stats_counts_the_saved_context() {
    let f = fixture().await;
    let server = server(&f, "default", Some("s1"), 8_000);
    let stats = ok(server.call("context_stats", json!({})).await);
    assert_eq!(stats["messages"], 56);
    assert_eq!(stats["messages_by_role"]["user"], 27);
    assert_eq!(stats["messages_by_role"]["assistant"], 27);
    assert_eq!(stats["tool_calls"], 1);
    assert_eq!(stats["tool_results"], 1);
    assert_eq!(stats["log_entries"], 56);
    assert_eq!(stats["archived_items"], 1);
    assert_eq!(stats["summary_present"], false);
    assert_eq!(stats["window_tokens"], 8_000);
    let tokens = stats["context_tokens"].as_u64().expect("tokens");
    assert!(tokens > 300 && tokens < 8_000, "{tokens}");
    let pct = stats["budget_used_pct"].as_f64().expect("pct");
    assert!((pct - tokens as f64 * 100.0 / 8_000.0).abs() < 0.1, "{pct}");
}

#[tokio::test]
async fn compact_shrinks_the_stored_context_and_archives_what_left() {
    let f = fixture().await;
    let server = server(&f, "default", Some("s1"), 2_000);
    let before = ok(server.call("context_stats", json!({})).await);
    let report = ok(server
        .call(
            "compact",
            json!({"focus": "keep the marker search and the plan", "force": true}),
        )
        .await);
    assert_eq!(report["compacted"], true, "{report}");
    let tokens_before = report["tokens_before"].as_u64().expect("before");
    let tokens_after = report["tokens_after"].as_u64().expect("after");
    assert_eq!(
        tokens_before,
        before["context_tokens"].as_u64().expect("tokens")
    );
    assert!(tokens_after < tokens_before, "{report}");
    assert!(!report["archived"].as_array().expect("archived").is_empty());

    // Saved with compare-and-swap: the stored state is the compacted one, one version on.
    let after = ok(server.call("context_stats", json!({})).await);
    assert_eq!(after["context_tokens"], tokens_after);
    assert_eq!(
        after["state_version"].as_u64(),
        before["state_version"].as_u64().map(|v| v + 1)
    );
    assert_eq!(report["state_version"], after["state_version"]);
    assert_eq!(after["summary_present"], true);
    assert!(after["archived_items"].as_u64() > before["archived_items"].as_u64());

    // Whatever the compaction archived reads back.
    for reference in report["archived"].as_array().expect("archived") {
        let page = ok(server
            .call("context_read", json!({"reference": reference}))
            .await);
        assert!(page["total_bytes"].as_u64() > Some(0), "{reference}");
    }
    // The log is untouched: the compacted output is still searchable.
    let found = ok(server
        .call("session_search", json!({"query": "ZEBRAFISH"}))
        .await);
    assert_eq!(found["hits"].as_array().map(Vec::len), Some(1));

    let oversized = err(server
        .call("compact", json!({"focus": "x".repeat(100_000)}))
        .await);
    assert!(oversized.contains("limit"), "{oversized}");
    let unknown = err(self::server(&f, "default", None, 2_000)
        .call("compact", json!({"session": "nope"}))
        .await);
    assert!(unknown.starts_with("not found:"), "{unknown}");
}

/// `compact` under a seed preset writes that seed's archive files, and the retrieval tools
/// list and read them: ReMe's `<chat_id>_<g>.json` (a JSON array of the group's messages),
/// Agentrail's `messages.compactions/<id>.jsonl`.
#[tokio::test]
async fn compact_under_seed_presets_writes_their_archive_files() {
    // ReMe compresses only past 20,000 tokens of compressible messages: the fixture's few
    // hundred leave it alone, as the seed would.
    let f = fixture().await;
    let untouched = ok(
        server_with(&f, "default", Some("s1"), 8_000, "reme-compress")
            .call("compact", json!({"force": true}))
            .await,
    );
    assert_eq!(untouched["compacted"], false, "{untouched}");
    // The reason names the policy and what it waits for, not only that nothing happened.
    let reason = untouched["reason_not_compacted"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("nothing to compact: the context is "),
        "{reason}"
    );
    assert!(reason.contains("policy `reme-compress`"), "{reason}");
    assert!(reason.contains("summarize"), "{reason}");
    for (policy, suffix) in [("reme-compress", "_1.json"), ("agentrail", ".jsonl")] {
        let f = fixture().await;
        let mut config = presets::preset(policy).expect("preset");
        // The threshold lowered (a one-key override) so the fixture compresses.
        for stage in &mut config.stages {
            if let Stage::Summarize { min_tokens, .. } = stage {
                *min_tokens = None;
            }
        }
        let server = server_with_policy(&f, "default", Some("s1"), 8_000, config);
        let report = ok(server.call("compact", json!({"force": true})).await);
        assert_eq!(report["compacted"], true, "{policy}: {report}");
        let archived: Vec<String> = report["archived"]
            .as_array()
            .expect("archived")
            .iter()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect();
        let seed_file = archived
            .iter()
            .find(|r| r.ends_with(suffix))
            .unwrap_or_else(|| panic!("{policy}: no *{suffix} in {archived:?}"));
        if policy == "agentrail" {
            assert!(
                seed_file.starts_with("sessions/s1/messages.compactions/"),
                "{seed_file}"
            );
        }
        let page = ok(server
            .call("context_read", json!({"reference": seed_file}))
            .await);
        let content = page["content"].as_str().expect("content").to_string();
        let messages: Vec<Message> = if suffix == ".jsonl" {
            content
                .lines()
                .map(|l| serde_json::from_str(l).expect("a message per line"))
                .collect()
        } else {
            serde_json::from_str(&content).expect("a JSON array of messages")
        };
        assert!(
            messages
                .iter()
                .any(|m| m.text().contains("keep going with the plan")),
            "{policy}: the originals are in {seed_file}"
        );
        let listed = ok(server.call("context_list", json!({})).await).to_string();
        assert!(listed.contains(seed_file.as_str()), "{policy}: {listed}");
    }
}

/// Issue 33, item 9: as AgentScope's `compress_context()`, `compact` below the policy's
/// trigger leaves the context alone and says so; `force: true` compacts anyway.
#[tokio::test]
async fn compact_below_the_trigger_does_nothing_unless_forced() {
    let f = fixture().await;
    // The fixture's context (under 1,000 tokens) is below the default policy's trigger at
    // 2,000 tokens of window, and forced, that policy does compact it.
    let server = server(&f, "default", Some("s1"), 2_000);
    let before = ok(server.call("context_stats", json!({})).await);
    let report = ok(server.call("compact", json!({})).await);
    assert_eq!(report["compacted"], false, "{report}");
    let reason = report["reason_not_compacted"].as_str().unwrap_or_default();
    assert!(reason.starts_with("below the trigger"), "{reason}");
    assert!(reason.contains("force: true"), "{reason}");
    assert_eq!(report["tokens_after"], report["tokens_before"]);
    let unchanged = ok(server.call("context_stats", json!({})).await);
    assert_eq!(unchanged["state_version"], before["state_version"]);

    let forced = ok(server.call("compact", json!({"force": true})).await);
    assert_eq!(forced["compacted"], true, "{forced}");
    assert!(forced["tokens_after"].as_u64() < forced["tokens_before"].as_u64());
    let after = ok(server.call("context_stats", json!({})).await);
    assert_eq!(
        after["state_version"].as_u64(),
        before["state_version"].as_u64().map(|v| v + 1)
    );
}

/// `compact` takes a one-off policy override, as an object or a TOML string, merged into the
/// server's policy for that compaction only (its trigger included); a bad one is a tool
/// error naming the field.
#[tokio::test]
async fn compact_takes_a_one_off_config_for_that_compaction_only() {
    for config in [
        json!({"trigger_tokens": 200}),
        json!("trigger_tokens = 200"),
    ] {
        let f = fixture().await;
        let server = server(&f, "default", Some("s1"), 2_000);
        let report = ok(server.call("compact", json!({"config": config})).await);
        assert_eq!(report["compacted"], true, "{config}: {report}");
        assert!(report["tokens_after"].as_u64() < report["tokens_before"].as_u64());
        // The override was for that call only: the server's own trigger is far away again.
        let next = ok(server.call("compact", json!({})).await);
        assert_eq!(next["compacted"], false, "{next}");
        let reason = next["reason_not_compacted"].as_str().unwrap_or_default();
        assert!(reason.starts_with("below the trigger"), "{reason}");
    }
    let f = fixture().await;
    let server = server(&f, "default", Some("s1"), 128_000);
    let out_of_range = err(server
        .call("compact", json!({"config": {"trigger_ratio": 1.5}}))
        .await);
    assert!(out_of_range.contains("trigger_ratio"), "{out_of_range}");
    let unknown = err(server
        .call(
            "compact",
            json!({"config": {"overflow": {"max_atempts": 3}}}),
        )
        .await);
    assert!(unknown.contains("max_atempts"), "{unknown}");
    let not_a_policy = err(server.call("compact", json!({"config": 7})).await);
    assert!(not_a_policy.contains("config"), "{not_a_policy}");
}

#[tokio::test]
async fn malformed_calls_are_tool_errors() {
    let f = fixture().await;
    let server = server(&f, "default", None, 128_000);
    let unknown = err(server.call("rm_rf", json!({})).await);
    assert!(unknown.contains("no tool named"), "{unknown}");
    let missing = err(server.call("context_read", json!({})).await);
    assert!(missing.contains("reference"), "{missing}");
    let typo = err(server
        .call("session_search", json!({"query": "x", "sesion": "s1"}))
        .await);
    assert!(typo.contains("sesion"), "{typo}");
    let not_object = err(server.call("session_list", json!([1, 2])).await);
    assert!(not_object.contains("JSON object"), "{not_object}");
    let huge = err(server
        .call("session_search", json!({"query": "word ".repeat(200_000)}))
        .await);
    assert!(huge.contains("limit"), "{huge}");
    let words = err(server.call("session_search", json!({"query": "!!!"})).await);
    assert!(words.starts_with("invalid:"), "{words}");
}

#[tokio::test]
async fn bad_server_scopes_are_refused_at_start() {
    let f = fixture().await;
    let services = Services {
        store: f.store.clone(),
        archive: f.archive.clone(),
        memory: None,
        summarizer: Arc::new(ExtractiveSummarizer::default()),
        tool_calls: None,
    };
    let options = |tenant: &str, session: Option<&str>| Options {
        tenant: tenant.into(),
        session: session.map(str::to_string),
        policy: presets::preset("default").expect("preset"),
        model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
        window: 1_000,
    };
    assert!(ContextServer::new(services.clone(), options("../x", None)).is_err());
    assert!(ContextServer::new(services.clone(), options("default", Some("a/b"))).is_err());
    let no_memory = ContextServer::new(services, options("default", None)).expect("server");
    let message = err(no_memory
        .call("memory_search", json!({"query": "deploy"}))
        .await);
    assert!(message.contains("not configured"), "{message}");
}

#[tokio::test]
async fn the_rmcp_client_sees_schemas_results_and_tool_errors() -> anyhow_free::Result {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;

    let f = fixture().await;
    let server = server(&f, "default", Some("s1"), 128_000);
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let running = tokio::spawn(async move {
        if let Ok(service) = server.serve(server_io).await {
            let _ = service.waiting().await;
        }
    });
    let client = ().serve(client_io).await?;
    let tools = client.list_all_tools().await?;
    assert_eq!(tools.len(), TOOLS.len());
    for tool in &tools {
        assert_eq!(
            tool.input_schema.get("type"),
            Some(&json!("object")),
            "{}",
            tool.name
        );
        assert!(
            tool.description.as_deref().is_some_and(|d| d.len() > 60),
            "{} needs a description a model can use",
            tool.name
        );
    }
    let read = tools
        .iter()
        .find(|t| t.name == "context_read")
        .expect("context_read");
    assert_eq!(read.input_schema["required"], json!(["reference"]));
    assert!(read.input_schema["properties"]["offset"]["description"].is_string());

    let arguments = |value: Value| value.as_object().cloned().expect("object");
    let page = client
        .call_tool(
            CallToolRequestParams::new("context_read")
                .with_arguments(arguments(json!({"reference": f.output_ref, "limit": 20}))),
        )
        .await?;
    assert_eq!(page.is_error, Some(false));
    assert_eq!(
        page.structured_content
            .as_ref()
            .map(|v| v["content"].clone()),
        // 20 bytes end on a character boundary of the fixture's multi-byte text.
        Some(json!(f.output[..20]))
    );
    let hostile = client.call_tool(hostile_read()).await?;
    assert_eq!(hostile.is_error, Some(true));
    client.cancel().await?;
    running.abort();
    Ok(())
}

/// `context_read` of a reference that climbs out of the archive.
fn hostile_read() -> rmcp::model::CallToolRequestParams {
    let arguments = json!({"reference": "../../etc/passwd"});
    rmcp::model::CallToolRequestParams::new("context_read")
        .with_arguments(arguments.as_object().cloned().expect("object"))
}

#[path = "tools/observed.rs"]
mod observed;

/// `Box<dyn Error>` results without pulling in anyhow.
mod anyhow_free {
    pub type Result = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;
}
