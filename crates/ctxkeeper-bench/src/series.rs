//! Input tokens per model call, for the unmanaged baseline and each preset, on one trace.
//!
//! The replay is the one `ctxkeeper replay` runs (same importer, token model, provider rules,
//! local archive and extractive summarizer), but the per-step series it keeps in memory is
//! returned rather than reduced to totals.
//!
//! ```no_run
//! use ctxkeeper_bench::series::{SeriesRequest, compute_series};
//!
//! let series = compute_series(&SeriesRequest {
//!     trace: "../shared/data/traces/claude-code/session.jsonl".into(),
//!     window: 16_000,
//!     concat: false,
//!     policies: vec!["default".into()],
//! })?;
//! assert_eq!(series.baseline.len(), series.policies[0].input_tokens.len());
//! # Ok::<(), anyhow::Error>(())
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow};
use ctxkeeper::llm::ExtractiveSummarizer;
use ctxkeeper::replay::PolicyReplay;
use ctxkeeper::store::LocalWorkspace;
use ctxkeeper_core::engine::presets;
use ctxkeeper_core::import;
use ctxkeeper_core::model::CheckRules;
use ctxkeeper_core::replay::{ReplayOptions, Unmanaged, replay};
use ctxkeeper_core::tokens::{Profiles, TokenModel};
use serde::{Deserialize, Serialize};

/// The model assumed when the trace names none (as the CLI does).
const DEFAULT_MODEL: &str = "gpt-4o";

/// What to replay.
#[derive(Debug, Clone)]
pub struct SeriesRequest {
    pub trace: PathBuf,
    pub window: u64,
    /// Join a multi-session trace into one session (`replay --concat`).
    pub concat: bool,
    /// Presets to replay; empty means every preset.
    pub policies: Vec<String>,
}

/// Input tokens of every step under one policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicySeries {
    pub policy: String,
    pub input_tokens: Vec<u64>,
    pub compactions: usize,
}

/// The per-step series of one trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// The trace's file name.
    pub trace: String,
    pub model: String,
    pub window: u64,
    pub baseline: Vec<u64>,
    pub policies: Vec<PolicySeries>,
}

/// Replays the trace unmanaged and under every requested preset.
pub fn compute_series(request: &SeriesRequest) -> Result<Series> {
    let path = &request.trace;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let format = import::detect(&text, &name)
        .with_context(|| format!("{}: cannot tell the trace format", path.display()))?;
    let trace = import::import(&text, format).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let sessions = if request.concat {
        vec![trace.concat()]
    } else {
        trace.sessions
    };
    let model = sessions
        .iter()
        .find_map(|s| s.model.clone())
        .unwrap_or_else(|| DEFAULT_MODEL.to_string());
    let tokens = TokenModel::for_model(&model, &Profiles::builtin());
    let options = ReplayOptions {
        window: request.window,
        rules: CheckRules::openai(),
    };
    let baseline = replay(
        &sessions,
        &tokens,
        &options,
        &mut Unmanaged::default(),
        &mut |_| Ok::<(), String>(()),
    )
    .map_err(|e| anyhow!("baseline replay: {e}"))?;

    let names: Vec<String> = if request.policies.is_empty() {
        presets::NAMES
            .iter()
            .filter(|n| **n != "none")
            .map(|n| n.to_string())
            .collect()
    } else {
        request.policies.clone()
    };
    let mut policies = Vec::new();
    for policy in names {
        let config = presets::lookup(&policy)?;
        let workspace = tempfile::tempdir().context("cannot create a scratch archive")?;
        let offloader = Arc::new(LocalWorkspace::new(workspace.path())?);
        let summarizer = Arc::new(ExtractiveSummarizer::default());
        let mut engine = PolicyReplay::new(config, request.window, offloader, summarizer)?;
        let report = replay(&sessions, &tokens, &options, &mut engine, &mut |_| {
            Ok::<(), String>(())
        })
        .map_err(|e| anyhow!("replay under {policy}: {e}"))?;
        engine
            .finish()
            .map_err(|e| anyhow!("replay under {policy}: {e}"))?;
        policies.push(PolicySeries {
            policy,
            input_tokens: report.input_tokens_per_step,
            compactions: report.compactions,
        });
    }
    Ok(Series {
        trace: name,
        model,
        window: request.window,
        baseline: baseline.input_tokens_per_step,
        policies,
    })
}

/// Computes the series and prints it as JSON on stdout.
pub fn run_series(request: &SeriesRequest) -> Result<()> {
    let series = compute_series(request)?;
    println!("{}", serde_json::to_string(&series)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo_request(policies: &[&str]) -> SeriesRequest {
        SeriesRequest {
            trace: PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../examples/demo-trace.json"
            )),
            window: 8_000,
            concat: false,
            policies: policies.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn every_policy_has_one_value_per_step_and_stays_below_the_unmanaged_peak() {
        let series = compute_series(&demo_request(&["default"])).expect("demo trace replays");
        assert_eq!(series.policies.len(), 1);
        let managed = &series.policies[0];
        assert_eq!(managed.input_tokens.len(), series.baseline.len());
        assert!(!series.baseline.is_empty());
        let peak = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
        // The demo trace outgrows an 8k window unmanaged; the default policy compacts.
        assert!(peak(&series.baseline) > 8_000);
        assert!(managed.compactions >= 1);
        assert!(peak(&managed.input_tokens) < peak(&series.baseline));
    }

    #[test]
    fn an_unknown_policy_is_named_in_the_error() {
        let err = compute_series(&demo_request(&["no-such-policy"])).expect_err("must fail");
        assert!(format!("{err:#}").contains("no-such-policy"), "{err:#}");
    }
}
