//! Partial policy overrides through the binary: a `--config` file that sets one key of a
//! preset's sub-table changes that key and nothing else in `config show` (issue 33, item 1: a
//! partial `[policy.overflow]` used to empty cowagent's emergency stages, a partial
//! `[policy.ingest.tool_result]` dropped agentscope's image limit), and what `config show`
//! prints reads back as the same policy.

use std::path::Path;
use std::process::{Command, Output};

/// Every preset, as the engine lists them: a new one is covered without editing this file.
const PRESETS: [&str; 9] = ctxkeeper_core::engine::presets::NAMES;

fn ctxkeeper(args: &[&str], config: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ctxkeeper"));
    command
        .args(args)
        .env_remove("CTXKEEPER_CONFIG")
        .env_remove("CTXKEEPER_POLICY");
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command.output().expect("the binary runs")
}

fn show(preset: Option<&str>, config: Option<&Path>) -> Result<String, String> {
    let mut args = vec!["config", "show"];
    if let Some(preset) = preset {
        args.extend(["--policy", preset]);
    }
    let output = ctxkeeper(&args, config);
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// A different valid-looking value for a scalar, or `None` for text (names, enums, templates).
fn changed(value: &toml::Value) -> Option<toml::Value> {
    match value {
        toml::Value::Integer(n) => Some(toml::Value::Integer(n + 1)),
        toml::Value::Float(f) => Some(toml::Value::Float((f * 0.9 * 1000.0).round() / 1000.0)),
        toml::Value::Boolean(b) => Some(toml::Value::Boolean(!b)),
        _ => None,
    }
}

/// Every sub-table of `[policy]` (dotted paths below it), lists of tables left out.
fn sub_tables(table: &toml::Table, path: &str, out: &mut Vec<(String, toml::Table)>) {
    for (key, value) in table {
        if let toml::Value::Table(inner) = value {
            let path = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            out.push((path.clone(), inner.clone()));
            sub_tables(inner, &path, out);
        }
    }
}

/// The lines of `a` and `b` that differ (both outputs have the same number of lines when
/// one value changes in place).
fn differing_lines(a: &str, b: &str) -> Vec<(String, String)> {
    // Comments are not settings (the memory line says what the policy decides).
    let settings = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    };
    let (a, b) = (settings(a), settings(b));
    if a.len() != b.len() {
        return vec![(format!("{} lines", a.len()), format!("{} lines", b.len()))];
    }
    a.iter()
        .zip(&b)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| (x.to_string(), y.to_string()))
        .collect()
}

#[test]
fn one_key_overridden_in_any_sub_table_of_any_preset_changes_that_line_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("one-key-override.toml");
    let mut checked = 0;
    for preset in PRESETS {
        let plain = show(Some(preset), None).unwrap_or_else(|e| panic!("{preset}: {e}"));
        let parsed: toml::Table = toml::from_str(&plain).expect("config show prints TOML");
        let Some(toml::Value::Table(policy)) = parsed.get("policy") else {
            panic!("{preset}: no [policy]");
        };
        let mut tables = Vec::new();
        sub_tables(policy, "", &mut tables);
        for (path, table) in tables {
            // Each scalar key of the sub-table in turn, until one takes a changed value that
            // validates (a ratio may sit at its bound).
            // A table with no scalar key (`none`'s empty `[policy.ingest]`) has nothing to
            // override in place.
            if table.values().all(|value| changed(value).is_none()) {
                continue;
            }
            let mut done = false;
            for (key, value) in &table {
                let Some(new) = changed(value) else { continue };
                std::fs::write(&file, format!("[policy.{path}]\n{key} = {new}\n"))
                    .expect("write the override");
                let Ok(overridden) = show(Some(preset), Some(&file)) else {
                    continue;
                };
                let lines = differing_lines(&plain, &overridden);
                assert_eq!(
                    lines.len(),
                    1,
                    "{preset} [policy.{path}] {key} = {new}: {lines:#?}"
                );
                let (before, after) = &lines[0];
                assert!(
                    before.starts_with(&format!("{key} = "))
                        && after.starts_with(&format!("{key} = {new}"))
                        && after.contains("# override (preset: "),
                    "{preset} {path}.{key}: {before:?} -> {after:?}"
                );
                done = true;
                checked += 1;
                break;
            }
            assert!(
                done,
                "{preset}: no key of [policy.{path}] could be overridden"
            );
        }
    }
    assert!(checked >= 9 * 6, "only {checked} sub-tables checked");
}

/// The issue's own examples, read back through the binary.
#[test]
fn a_partial_table_keeps_the_rest_of_the_preset() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("partial.toml");
    for (preset, fragment, kept) in [
        (
            "agentscope",
            "[policy.ingest.tool_result]\nmax_tokens = 8000\n",
            &["max_images = 5"][..],
        ),
        (
            "cowagent",
            "[policy.overflow]\nmax_attempts = 3\n",
            &["max_turns = 5", "max_chars = 10000", "kind = \"clear\""][..],
        ),
        (
            "cowagent",
            "[policy.session]\nretention_days = 7\n",
            &["restore_recent_turns = 20"][..],
        ),
        (
            "agentscope",
            "[policy.summary]\nmax_summary_tokens = 900\n",
            &["<system-reminder>The earlier conversation was compressed."][..],
        ),
    ] {
        std::fs::write(&file, fragment).expect("write the override");
        let shown = show(Some(preset), Some(&file)).unwrap_or_else(|e| panic!("{preset}: {e}"));
        for text in kept {
            assert!(shown.contains(text), "{preset} {fragment:?} lost {text:?}");
        }
    }
}

/// `config show --policy P` saved as a file reads back as P without naming it again: its
/// `[policy] name = "P"` selects the preset (it used to relabel `default`).
#[test]
fn config_show_output_round_trips_through_its_policy_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("shown.toml");
    for preset in PRESETS {
        let shown = show(Some(preset), None).unwrap_or_else(|e| panic!("{preset}: {e}"));
        std::fs::write(&file, &shown).expect("write the file");
        let again = show(None, Some(&file)).unwrap_or_else(|e| panic!("{preset}: {e}"));
        assert_eq!(differing_lines(&shown, &again), vec![], "{preset}");
    }
    // Beside a different --policy the name is ambiguous: refused, naming both.
    std::fs::write(&file, "[policy]\nname = \"cowagent\"\n").expect("write the file");
    let error = show(Some("agentrail"), Some(&file))
        .err()
        .unwrap_or_default();
    assert!(
        error.contains("cowagent") && error.contains("agentrail"),
        "{error}"
    );
    // A name that is no preset relabels the chosen one.
    std::fs::write(&file, "[policy]\nname = \"mine\"\n").expect("write the file");
    let shown = show(Some("harness"), Some(&file)).unwrap_or_default();
    assert!(
        shown.contains("name = \"mine\"  # override (preset: \"harness\")"),
        "{shown}"
    );
    assert!(shown.contains("SESSION INTENT"), "{shown}");
}
