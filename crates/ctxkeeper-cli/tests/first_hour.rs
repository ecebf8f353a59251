//! A new user's first hour with the `ctxkeeper` binary (issue #36): errors that name what
//! went wrong and what to do, and defaults that let a command run without reading its help.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

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
        .env_remove("RUST_LOG");
    command
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

#[test]
fn serve_accepts_a_host_name_to_listen_on() {
    let home = tempfile::tempdir().expect("temp dir");
    let (child, listening) = start(serve(home.path(), &["--listen", "localhost:0"]));
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
    let output = bin(home.path())
        .env("OPENAI_API_KEY", "sk-first-hour")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .args([
            "wrap",
            "--store",
            "memory://",
            "--upstream",
            "http://127.0.0.1:9/v1",
        ])
        .args(["sh", "--", "-c", "true"])
        .output()
        .expect("run wrap");
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
    let wrapped = bin(home.path())
        .env("OPENAI_API_KEY", key)
        .args([
            "wrap",
            "--store",
            "memory://",
            "--upstream",
            "http://127.0.0.1:9/v1",
        ])
        .args(["sh", "--", "-c", "true"])
        .output()
        .expect("run wrap");
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
