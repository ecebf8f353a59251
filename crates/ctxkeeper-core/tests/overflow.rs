//! Overflow classification over real provider error bodies.
//!
//! Each file in `tests/fixtures/overflow/` holds one error answer as a provider sent it (its
//! `source` says where it was published), the HTTP status, and what `classify` must say:
//! `{"overflow": false}` for errors that must not trigger an emergency compaction, or the
//! provider and the numbers the answer states. Adding a case is adding a file.

use std::fs;
use std::path::{Path, PathBuf};

use ctxkeeper_core::overflow::{Overflow, classify};
use serde_json::Value;

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/overflow");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
}

/// The body as the provider sent it: fixtures store JSON bodies as JSON and plain-text bodies
/// as a string.
fn body_text(body: &Value) -> String {
    match body {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Compares one expected field; absent in `expect` means "not checked".
fn check_field(name: &str, expect: &Value, actual: Option<u64>, errors: &mut Vec<String>) {
    if let Some(wanted) = expect.get(name) {
        let wanted = wanted.as_u64();
        if wanted != actual {
            errors.push(format!("{name}: expected {wanted:?}, got {actual:?}"));
        }
    }
}

fn check(path: &Path) -> Result<(), String> {
    let text = fs::read_to_string(path).map_err(|e| e.to_string())?;
    let case: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if case
        .get("source")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err("fixture has no source note".into());
    }
    let status = case["status"].as_u64().ok_or("fixture has no status")? as u16;
    let body = body_text(&case["body"]);
    let expect = &case["expect"];
    let wanted = expect["overflow"]
        .as_bool()
        .ok_or("expect.overflow missing")?;
    let got: Option<Overflow> = classify(status, &body);
    match (wanted, got) {
        (false, None) => Ok(()),
        (false, Some(o)) => Err(format!("classified as an overflow: {o:?}")),
        (true, None) => Err("not classified as an overflow".into()),
        (true, Some(o)) => {
            let mut errors = Vec::new();
            if let Some(provider) = expect.get("provider").and_then(Value::as_str)
                && provider != o.provider.as_str()
            {
                errors.push(format!(
                    "provider: expected {provider}, got {}",
                    o.provider.as_str()
                ));
            }
            check_field("limit", expect, o.limit, &mut errors);
            check_field("requested", expect, o.requested, &mut errors);
            check_field("input", expect, o.input, &mut errors);
            check_field("output", expect, o.output, &mut errors);
            check_field("over_by", expect, o.over_by, &mut errors);
            check_field("excess", expect, o.excess(), &mut errors);
            check_field(
                "max_input_tokens",
                expect,
                o.max_input_tokens(),
                &mut errors,
            );
            if errors.is_empty() {
                Ok(())
            } else {
                Err(errors.join("; "))
            }
        }
    }
}

#[test]
fn every_fixture_classifies_as_expected() {
    let files = fixtures();
    assert!(
        files.len() >= 30,
        "expected the overflow fixtures, found {}",
        files.len()
    );
    let failures: Vec<String> = files
        .iter()
        .filter_map(|path| {
            check(path).err().map(|e| {
                format!(
                    "{}: {e}",
                    path.file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
                )
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn fixtures_cover_every_provider_and_both_verdicts() {
    let mut providers = std::collections::BTreeSet::new();
    let mut negatives = 0;
    for path in fixtures() {
        let case: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap_or_default())
            .unwrap_or(Value::Null);
        if case["expect"]["overflow"] == Value::Bool(false) {
            negatives += 1;
        }
        if let Some(provider) = case["expect"]["provider"].as_str() {
            providers.insert(provider.to_string());
        }
    }
    for wanted in [
        "openai",
        "anthropic",
        "gemini",
        "vllm",
        "ollama",
        "llama_cpp",
        "mistral",
        "deepseek",
        "openrouter",
    ] {
        assert!(providers.contains(wanted), "no fixture for {wanted}");
    }
    assert!(negatives >= 8, "only {negatives} negative fixtures");
}

#[test]
fn status_codes_that_are_never_overflows() {
    let body = r#"{"error":{"message":"This model's maximum context length is 4097 tokens. However, your messages resulted in 4294 tokens.","code":"context_length_exceeded"}}"#;
    assert!(classify(400, body).is_some());
    for status in [401, 403, 404, 429] {
        assert!(classify(status, body).is_none(), "status {status}");
    }
}

#[test]
fn classification_is_fast_enough_for_every_error() {
    // A large echo of the request must not make the check expensive: only a bounded prefix is
    // read.
    let big = format!(
        r#"{{"error":{{"message":"prompt is too long: 300000 tokens > 200000 maximum","echo":"{}"}}}}"#,
        "a".repeat(4 << 20)
    );
    let start = std::time::Instant::now();
    let _ = classify(400, &big);
    assert!(start.elapsed() < std::time::Duration::from_millis(500));
}
