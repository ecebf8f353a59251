//! `config show` and `config validate`: files, flags and secrets, and one file for replay and
//! serve.

use super::*;

/// `config validate --config FILE`, without the user's own config file.
fn validate(file: &Path) -> Output {
    bin()
        .args(["config", "validate", "--config"])
        .arg(file)
        .env_remove("CTXKEEPER_CONFIG")
        .output()
        .expect("config test")
}

#[test]
fn config_show_resolves_file_and_flags_without_printing_secrets_and_round_trips() {
    let dir = tempfile::tempdir().expect("config test");
    let file = dir.path().join("ctxkeeper.toml");
    std::fs::write(
        &file,
        "[gateway]\nlisten = \"127.0.0.1:9911\"\nadmin_token = \"adm-s3cret\"\n\
         [policy]\ntrigger_ratio = 0.65\n[models.\"my-model\"]\ncontext_window = 54000\n",
    )
    .expect("config test");
    let output = bin()
        .args(["config", "show", "--config"])
        .arg(&file)
        .args(["--store", "postgres://app:pg-s3cret@db.internal/ctx"])
        .env_remove("CTXKEEPER_CONFIG")
        .output()
        .expect("config test");
    assert!(output.status.success(), "{output:?}");
    let shown = String::from_utf8(output.stdout).expect("config test");
    assert!(!shown.contains("s3cret"), "a secret was printed:\n{shown}");
    assert!(shown.contains("# admin_token: set"), "{shown}");
    let parsed: toml::Table = toml::from_str(&shown).expect("config test");
    assert_eq!(parsed["gateway"]["listen"].as_str(), Some("127.0.0.1:9911"));
    assert_eq!(
        parsed["gateway"]["store"].as_str(),
        Some("postgres://app:***@db.internal/ctx"),
        "the flag wins over the file and its password is redacted"
    );
    assert_eq!(parsed["policy"]["trigger_ratio"].as_float(), Some(0.65));
    assert_eq!(
        parsed["models"]["my-model"]["context_window"].as_integer(),
        Some(54_000)
    );

    // What `show` prints is a valid configuration file itself.
    let shown_file = dir.path().join("shown.toml");
    std::fs::write(&shown_file, &shown).expect("config test");
    let output = validate(&shown_file);
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("ok: "));
}

#[test]
fn config_validate_names_the_offending_field() {
    let dir = tempfile::tempdir().expect("config test");
    for (text, expected) in [
        ("[policy]\ntrigger_ratio = 1.5\n", "trigger_ratio"),
        (
            "[gateway]\nlisten = \"127.0.0.1:1\"\nbodylimit = 5\n",
            "bodylimit",
        ),
        ("[policy\n", "ctxkeeper.toml"),
    ] {
        let file = dir.path().join("ctxkeeper.toml");
        std::fs::write(&file, text).expect("config test");
        let output = validate(&file);
        assert_eq!(output.status.code(), Some(2), "{text}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
}

#[test]
fn config_validate_refuses_a_store_serve_could_not_open() {
    let dir = tempfile::tempdir().expect("config test");
    let file = dir.path().join("ctxkeeper.toml");
    std::fs::write(&file, "[gateway]\nstore = \"sqlte:///tmp/sessions.db\"\n")
        .expect("config test");
    let output = validate(&file);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("sqlte://") && stderr.contains("did you mean `sqlite://`"),
        "{stderr}"
    );
}

#[test]
fn one_config_file_serves_replay_and_serve() {
    // Regression: replay's own parser refused the `[gateway]` section that `serve` needs, so
    // one CTXKEEPER_CONFIG could not serve both commands.
    let Some(dir) = traces_dir() else {
        return;
    };
    let trace = dir.join("swe-agent/pydicom__pydicom-1458.traj");
    let trace = trace.to_str().expect("utf-8 path");
    let tmp = tempfile::tempdir().expect("temp dir");
    let replay_with = |policy: &str| {
        let file = tmp.path().join("ctxkeeper.toml");
        std::fs::write(
            &file,
            format!("[gateway]\nlisten = \"127.0.0.1:9912\"\n[policy]\n{policy}\n"),
        )
        .expect("write config");
        json_of(&replay(
            Path::new(trace),
            &[
                "--policy",
                "default",
                "--window",
                "16000",
                "--json",
                "--config",
                file.to_str().expect("utf-8 path"),
            ],
        ))
    };
    let usual = replay_with("keep_recent_rounds = 2");
    // The fixed trigger at 90 % of the window, where this session barely compacts.
    let late = replay_with("trigger_ratio = 0.9\n[policy.cost]\nenabled = false");
    assert!(
        late["compactions"].as_u64() < usual["compactions"].as_u64(),
        "the file's [policy] applies: {} vs {} compactions",
        late["compactions"],
        usual["compactions"]
    );
    // A typo in [gateway] is still an error for every command.
    let file = tmp.path().join("typo.toml");
    std::fs::write(&file, "[gateway]\nlisen = \"127.0.0.1:1\"\n").expect("write config");
    let output = replay(
        Path::new(trace),
        &["--config", file.to_str().expect("utf-8 path")],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("lisen"));
}
