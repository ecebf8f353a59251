//! A new user's first hour with the `ctxkeeper` binary (issue #36): errors that name what
//! went wrong and what to do, and defaults that let a command run without reading its help.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use sha2::{Digest, Sha256};

fn bin(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ctxkeeper"));
    // Keep default data directories inside the test's temp dir.
    command
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("CTXKEEPER_CONFIG")
        .env_remove("CTXKEEPER_LISTEN")
        .env_remove("CTXKEEPER_STORE")
        .env_remove("CTXKEEPER_WORKSPACE")
        .env_remove("CTXKEEPER_ADMIN_TOKEN")
        .env_remove("CTXKEEPER_GATEWAY")
        .env_remove("CTXKEEPER_TEST_AGENT")
        .env_remove("RUST_LOG");
    command
}

/// `wrap` around `sh -c true`, over an in-memory store and an upstream nothing listens on.
fn wrap_true(command: &mut Command) -> Output {
    command
        .args([
            "wrap",
            "--store",
            "memory://",
            "--upstream",
            "http://127.0.0.1:9/v1",
        ])
        .args(["sh", "--", "-c", "true"])
        .output()
        .expect("run wrap")
}

/// `bin` without API keys in the environment.
fn keyless(home: &Path) -> Command {
    let mut command = bin(home);
    command
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN");
    command
}

/// The tenant the gateway gives requests carrying `key`.
fn key_tenant(key: &str) -> String {
    format!("key-{}", &hex::encode(Sha256::digest(key.as_bytes()))[..16])
}

/// `serve` over an in-memory store, with `extra` options.
fn serve(home: &Path, extra: &[&str]) -> Command {
    let mut command = bin(home);
    command.args(["serve", "--store", "memory://", "--workspace"]);
    command.arg(home.join("workspace"));
    command.args(["--upstream", "http://127.0.0.1:9/v1"]);
    command.args(extra);
    command
}

/// Starts `command` and waits for its `listening on …` line; `None` if it exited first.
fn start(mut command: Command) -> (Child, Option<String>) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ctxkeeper");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read");
    let listening = line
        .strip_prefix("listening on ")
        .map(|l| l.trim().to_owned());
    (child, listening)
}

fn stop(mut child: Child) -> Output {
    child.kill().ok();
    child.wait_with_output().expect("wait")
}

#[test]
fn serve_names_an_address_in_use_and_what_to_do() {
    let home = tempfile::tempdir().expect("temp dir");
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = held.local_addr().expect("address").to_string();
    let output = serve(home.path(), &["--listen", &address])
        .output()
        .expect("run serve");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&address), "{stderr}");
    assert!(stderr.contains("already in use"), "{stderr}");
    assert!(stderr.contains("--listen"), "{stderr}");
}

/// Starts `serve`, checks it listened on 127.0.0.1 (a host name resolved), and stops it.
fn listens_on_loopback(command: Command) {
    let (child, listening) = start(command);
    let output = stop(child);
    let listening = listening.unwrap_or_else(|| {
        panic!(
            "serve did not start: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(listening.starts_with("http://127.0.0.1:"), "{listening}");
}

#[test]
fn serve_accepts_a_host_name_to_listen_on() {
    let home = tempfile::tempdir().expect("temp dir");
    listens_on_loopback(serve(home.path(), &["--listen", "localhost:0"]));
}

#[test]
fn serve_starts_with_a_banner_of_upstreams_store_policy_and_console_without_secrets() {
    let home = tempfile::tempdir().expect("temp dir");
    let (child, listening) = start(serve(
        home.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--anthropic-upstream",
            "http://user:pw-SECRET@127.0.0.1:9",
            "--policy",
            "cowagent",
        ],
    ));
    // The banner follows the stdout line; give it a moment before stopping the server.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let output = stop(child);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let listening = listening.unwrap_or_else(|| panic!("serve did not start: {stderr}"));
    for expected in [
        "OpenAI upstream:    http://127.0.0.1:9/v1",
        "Anthropic upstream: http://127.0.0.1:9",
        "store:              memory://",
        "policy:             cowagent",
        &format!("console:            {listening}/ui/"),
    ] {
        assert!(stderr.contains(expected), "{expected:?} in {stderr}");
    }
    assert!(!stderr.contains("SECRET"), "{stderr}");
}

#[test]
fn ui_runs_without_options_over_the_default_store_and_workspace() {
    let home = tempfile::tempdir().expect("temp dir");
    let mut command = bin(home.path());
    command
        .env_remove("CTXKEEPER_STORE")
        .env_remove("CTXKEEPER_WORKSPACE")
        .args(["ui", "--listen", "127.0.0.1:0"]);
    let (child, listening) = start(command);
    let output = stop(child);
    assert!(
        listening.is_some(),
        "ui did not start: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn wrap_ends_by_saying_where_the_agents_sessions_are() {
    let home = tempfile::tempdir().expect("temp dir");
    let output = wrap_true(
        bin(home.path())
            .env("OPENAI_API_KEY", "sk-first-hour")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_AUTH_TOKEN"),
    );
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("ctxkeeper sessions list --tenant key-"),
        "{stderr}"
    );
    assert!(stderr.contains("/ui/"), "{stderr}");
    assert!(!stderr.contains("sk-first-hour"), "{stderr}");
}

#[test]
fn an_empty_tenant_points_at_the_api_keys_tenant_that_holds_sessions() {
    let home = tempfile::tempdir().expect("temp dir");
    let key = "sk-first-hour-list";
    // `wrap` names the tenant the gateway gives this key.
    let wrapped = wrap_true(bin(home.path()).env("OPENAI_API_KEY", key));
    let stderr = String::from_utf8_lossy(&wrapped.stderr);
    let tenant = stderr
        .split_whitespace()
        .find(|word| word.starts_with("key-"))
        .unwrap_or_else(|| panic!("no key tenant in {stderr}"))
        .trim_end_matches(':')
        .to_owned();
    let store = format!("sqlite://{}", home.path().join("s.db").display());
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo-trace.json");
    let replayed = bin(home.path())
        .args(["replay", demo.to_str().expect("utf-8"), "--store", &store])
        .args(["--session", "demo", "--tenant", &tenant])
        .output()
        .expect("run replay");
    assert!(
        replayed.status.success(),
        "{}",
        String::from_utf8_lossy(&replayed.stderr)
    );
    let listed = bin(home.path())
        .env("OPENAI_API_KEY", key)
        .args(["sessions", "list", "--store", &store])
        .output()
        .expect("run sessions list");
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(stdout.contains("no sessions in tenant default"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "tenant {tenant} (your API key's) has 1 session(s): pass --tenant {tenant}"
        )),
        "{stdout}"
    );
}

/// Stores a one-exchange conversation as session `session` of `tenant` (a replay of a bare
/// request body).
fn keep_session(home: &Path, store: &str, tenant: &str, session: &str) {
    let trace = home.join(format!("{tenant}-{session}.json"));
    let body = serde_json::json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "fix the rounding bug"},
        {"role": "assistant", "content": "fixed"},
    ]});
    std::fs::write(&trace, body.to_string()).expect("write the trace");
    let kept = keyless(home)
        .arg("replay")
        .arg(&trace)
        .args(["--store", store, "--tenant", tenant, "--session", session])
        .output()
        .expect("run replay");
    assert!(
        kept.status.success(),
        "{}",
        String::from_utf8_lossy(&kept.stderr)
    );
}

#[test]
fn sessions_tenants_lists_every_tenant_and_an_empty_list_names_them() {
    let home = tempfile::tempdir().expect("temp dir");
    let store = format!("sqlite://{}", home.path().join("s.db").display());
    keep_session(home.path(), &store, "acme", "a1");
    keep_session(home.path(), &store, "acme", "a2");
    keep_session(home.path(), &store, "globex", "g1");

    let listed = keyless(home.path())
        .args(["sessions", "tenants", "--store", &store])
        .output()
        .expect("run sessions tenants");
    assert!(listed.status.success());
    let stdout = String::from_utf8_lossy(&listed.stdout);
    let row = |tenant: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(&format!("{tenant} ")))
            .unwrap_or_else(|| panic!("no row for {tenant}: {stdout}"))
            .split_whitespace()
            .nth(1)
            .expect("a count")
            .to_owned()
    };
    assert_eq!(
        (row("acme"), row("globex")),
        ("2".into(), "1".into()),
        "{stdout}"
    );
    let first = stdout.lines().nth(1).unwrap_or_default();
    assert!(first.starts_with("globex "), "most recent first: {stdout}");
    assert!(
        stdout.contains("2 tenant(s); list one's sessions with: ctxkeeper sessions list --tenant globex --store sqlite://"),
        "{stdout}"
    );

    let json = keyless(home.path())
        .args(["sessions", "tenants", "--json", "--store", &store])
        .output()
        .expect("run sessions tenants --json");
    let tenants: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let counts: Vec<(String, u64)> = tenants
        .as_array()
        .expect("an array")
        .iter()
        .map(|t| {
            (
                t["tenant"].as_str().expect("tenant").to_owned(),
                t["sessions"].as_u64().expect("sessions"),
            )
        })
        .collect();
    assert_eq!(counts, [("globex".into(), 1), ("acme".into(), 2)]);
    assert!(tenants[0]["updated_at_ms"].as_i64().is_some());

    // `default` is empty: the list names the tenants that hold sessions and the command.
    let empty = keyless(home.path())
        .args(["sessions", "list", "--store", &store])
        .output()
        .expect("run sessions list");
    assert!(empty.status.success());
    let stdout = String::from_utf8_lossy(&empty.stdout);
    for expected in [
        "no sessions in tenant default",
        "tenant globex has 1 session(s): pass --tenant globex",
        "tenant acme has 2 session(s): pass --tenant acme",
        "list them with: ctxkeeper sessions list --tenant globex --store sqlite://",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in {stdout}");
    }

    // An empty store says how sessions get there.
    let nothing = keyless(home.path())
        .args(["sessions", "tenants", "--store", "memory://"])
        .output()
        .expect("run sessions tenants");
    let stdout = String::from_utf8_lossy(&nothing.stdout);
    assert!(
        stdout.contains("no sessions in this store") && stdout.contains("ctxkeeper wrap"),
        "{stdout}"
    );
}

#[test]
fn serve_resolves_a_host_name_in_the_config_files_listen() {
    let home = tempfile::tempdir().expect("temp dir");
    let config = home.path().join("ctxkeeper.toml");
    std::fs::write(
        &config,
        "[gateway]\nlisten = \"localhost:0\"\nstore = \"memory://\"\nupstream = \"http://127.0.0.1:9/v1\"\n",
    )
    .expect("write the config");
    let mut command = bin(home.path());
    command
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .arg("--workspace")
        .arg(home.path().join("workspace"));
    listens_on_loopback(command);

    // A name that does not resolve is refused, naming the setting and what to give.
    std::fs::write(
        &config,
        "[gateway]\nlisten = \"no-such-host.invalid:8787\"\n",
    )
    .expect("write the config");
    let refused = bin(home.path())
        .args(["config", "validate", "--config"])
        .arg(&config)
        .output()
        .expect("run config validate");
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("listen")
            && stderr.contains("no-such-host.invalid")
            && stderr.contains("HOST:PORT"),
        "{stderr}"
    );
}

/// An OpenAI-compatible upstream that answers every request with one short completion.
fn fake_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
    let address = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || answer_completion(&mut stream));
        }
    });
    format!("http://{address}/v1")
}

/// Reads one request (headers, then its body) and answers it with a chat completion.
fn answer_completion(stream: &mut TcpStream) {
    let mut request = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        let Ok(read) = stream.read(&mut buffer) else {
            return;
        };
        if read == 0 {
            return;
        }
        request.extend_from_slice(&buffer[..read]);
        if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    let chunked = head.contains("transfer-encoding: chunked");
    loop {
        let body = &request[head_end..];
        let complete = if chunked {
            body.ends_with(b"0\r\n\r\n")
        } else {
            body.len() >= length
        };
        if complete {
            break;
        }
        let Ok(read) = stream.read(&mut buffer) else {
            return;
        };
        if read == 0 {
            break;
        }
        request.extend_from_slice(&buffer[..read]);
    }
    let body = serde_json::json!({
        "id": "chatcmpl-first-hour", "object": "chat.completion", "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "fixed"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
    })
    .to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Not a check of its own: the agent `wrap` runs in
/// `wrap_through_a_running_gateway_names_the_tenant_and_the_sessions_it_wrote` (this test
/// binary started again with `CTXKEEPER_TEST_AGENT` naming the session): one chat call to
/// the base URL `wrap` gives it, with the API key of its environment.
#[test]
fn agent_making_one_chat_call() {
    let Ok(session) = std::env::var("CTXKEEPER_TEST_AGENT") else {
        return;
    };
    let base = std::env::var("OPENAI_BASE_URL").expect("wrap sets OPENAI_BASE_URL");
    let key = std::env::var("OPENAI_API_KEY").expect("an API key");
    let host = base
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/v1"))
        .unwrap_or_else(|| panic!("an http://HOST:PORT/v1 base URL: {base}"));
    let body = serde_json::json!({"model": "gpt-4o", "messages": [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "fix the rounding bug in currency.py"},
    ]})
    .to_string();
    let mut stream = TcpStream::connect(host).expect("connect to the gateway");
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {key}\r\n\
         x-ctxkeeper-session: {session}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn wrap_through_a_running_gateway_names_the_tenant_and_the_sessions_it_wrote() {
    const KEY: &str = "sk-first-hour-gateway";
    const ADMIN: &str = "admin-first-hour-1";
    let home = tempfile::tempdir().expect("temp dir");
    let upstream = fake_upstream();
    let mut serve = bin(home.path());
    serve
        .args(["serve", "--store", "memory://", "--listen", "127.0.0.1:0"])
        .args([
            "--upstream",
            &upstream,
            "--admin-token",
            ADMIN,
            "--workspace",
        ])
        .arg(home.path().join("workspace"));
    let (gateway, listening) = start(serve);
    let Some(url) = listening else {
        let output = stop(gateway);
        panic!(
            "serve did not start: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let tenant = key_tenant(KEY);
    let agent = std::env::current_exe().expect("this test binary");
    let wrap = |session: &str, admin: Option<&str>| {
        let mut command = keyless(home.path());
        command
            .env("OPENAI_API_KEY", KEY)
            .env("CTXKEEPER_TEST_AGENT", session)
            .args(["wrap", "--gateway", &url, "--agent", "generic"])
            .arg(&agent)
            .args([
                "--",
                "agent_making_one_chat_call",
                "--exact",
                "--test-threads=1",
            ]);
        if let Some(admin) = admin {
            command.env("CTXKEEPER_ADMIN_TOKEN", admin);
        }
        command.output().expect("run wrap")
    };

    // With the gateway's admin token: the tenant, the session written and the console page.
    let named = wrap("wrap-gateway-1", Some(ADMIN));
    let stderr = String::from_utf8_lossy(&named.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&named.stdout).into_owned();
    assert!(named.status.success(), "{stderr}\n{stdout}");
    for expected in [
        format!("ctxkeeper: the agent's calls went through the gateway at {url}"),
        format!("tenant {tenant} (the tenant of OPENAI_API_KEY"),
        format!(
            "session wrap-gateway-1 (tenant {tenant}): ctxkeeper sessions show wrap-gateway-1 --tenant {tenant}"
        ),
        format!("console: {url}/ui/t/{tenant}/sessions"),
    ] {
        assert!(stderr.contains(&expected), "{expected:?} in {stderr}");
    }
    assert_eq!(stderr.matches("  session ").count(), 1, "{stderr}");

    // Without it: the tenant, the command that lists its sessions, and what would name them.
    let unnamed = wrap("wrap-gateway-2", None);
    let stderr = String::from_utf8_lossy(&unnamed.stderr).into_owned();
    assert!(unnamed.status.success(), "{stderr}");
    for expected in [
        format!("tenant {tenant} (the tenant of OPENAI_API_KEY"),
        "CTXKEEPER_ADMIN_TOKEN".to_string(),
        format!("list them with: ctxkeeper sessions list --tenant {tenant}"),
        format!("console: {url}/ui/t/{tenant}/sessions"),
    ] {
        assert!(stderr.contains(&expected), "{expected:?} in {stderr}");
    }

    // A wrong token: the gateway's refusal, and what to do.
    let refused = wrap("wrap-gateway-3", Some("not-the-admin-token"));
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(
        stderr.contains("401") && stderr.contains("refused the admin token"),
        "{stderr}"
    );
    let output = stop(gateway);
    let printed = [&named, &unnamed, &refused, &output].map(|run| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        )
    });
    for secret in [KEY, ADMIN] {
        for text in &printed {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
    }
}
