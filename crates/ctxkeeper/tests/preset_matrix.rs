//! Every preset × every shared trace × windows of 8k, 16k and 32k tokens (tau-bench also
//! concatenated into one 5,109-message session): no request breaks a provider rule and
//! nothing removed from the context is lost.

use std::path::PathBuf;
use std::sync::Arc;

use ctxkeeper::core::engine::presets;
use ctxkeeper::core::import::{self, Session};
use ctxkeeper::core::model::CheckRules;
use ctxkeeper::core::replay::{ReplayOptions, replay};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::llm::ExtractiveSummarizer;
use ctxkeeper::replay::PolicyReplay;
use ctxkeeper::store::object_archive::ObjectArchive;

/// (name, sessions) for every shared trace, plus tau-bench concatenated.
fn traces() -> Vec<(String, Vec<Session>)> {
    let dir = std::env::var_os("CTXKEEPER_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/traces")
        });
    if !dir.is_dir() {
        eprintln!(
            "SKIP: preset matrix: shared traces not found at {}",
            dir.display()
        );
        return Vec::new();
    }
    let mut out = Vec::new();
    for sub in [
        "tau-bench",
        "swe-agent",
        "openhands",
        "claude-code",
        "codex",
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        for file in files
            .into_iter()
            .filter(|f| f.file_name().is_some_and(|n| n != "LICENSE"))
        {
            let text = std::fs::read_to_string(&file).expect("read trace");
            let format = import::detect(&text, &file.to_string_lossy()).expect("detected");
            let trace = import::import(&text, format).expect("imported");
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if sub == "tau-bench" {
                out.push((
                    format!("{name} (concatenated)"),
                    vec![trace.clone().concat()],
                ));
            }
            out.push((name, trace.sessions));
        }
    }
    out
}

fn run_window(window: u64) {
    let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
    let mut failures = Vec::new();
    for (trace, sessions) in traces() {
        for preset in presets::NAMES {
            let policy = presets::preset(preset).expect("preset");
            let archive = Arc::new(ObjectArchive::memory());
            let summarizer = Arc::new(ExtractiveSummarizer::default());
            let mut replayer =
                PolicyReplay::new(policy, window, archive, summarizer).expect("runtime");
            let options = ReplayOptions {
                window,
                rules: CheckRules::openai(),
            };
            let report = replay(&sessions, &model, &options, &mut replayer, &mut |_| {
                Ok::<(), String>(())
            })
            .expect("replay");
            replayer.finish().expect("verification");
            if report.violations != 0 || replayer.unrecoverable_items != 0 {
                failures.push(format!(
                    "{trace} / {preset} / {window}: {} violations, {} unrecoverable items",
                    report.violations, replayer.unrecoverable_items
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_preset_on_every_trace_at_8k() {
    run_window(8_000);
}

#[test]
fn every_preset_on_every_trace_at_16k() {
    run_window(16_000);
}

#[test]
fn every_preset_on_every_trace_at_32k() {
    run_window(32_000);
}
