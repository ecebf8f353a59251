//! The JSON files `bench/run` writes into `bench/results/`, one per stage, read back as types.
//!
//! Every file is optional: a stage that has not run yet leaves its section of the report
//! saying so. A file that exists but does not parse is an error naming the file.
//!
//! ```no_run
//! let results = ctxkeeper_bench::results::Results::load("bench/results".as_ref())?;
//! if let Some(engine) = &results.engine {
//!     println!("window {}", engine.window);
//! }
//! # Ok::<(), anyhow::Error>(())
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::series::Series;

/// The machine and the versions the figures were taken with.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Machine {
    pub date: String,
    pub cpu: String,
    pub cores: Option<u32>,
    pub ram_gib: Option<f64>,
    pub kernel: Option<String>,
    pub rustc: Option<String>,
    pub python: Option<String>,
    #[serde(default)]
    pub peers: BTreeMap<String, String>,
}

/// Wall time of each `bench/run` stage.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Timings {
    #[serde(default)]
    pub quick: bool,
    pub stages: Vec<StageTime>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct StageTime {
    pub stage: String,
    pub seconds: u64,
    /// The 1-minute load average when the stage started.
    #[serde(default)]
    pub load_at_start: Option<f64>,
}

/// Per-step figures of one system, in microseconds.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StepFigures {
    pub quiet_p50_us: f64,
    pub quiet_p99_us: f64,
    #[serde(default)]
    pub compacting_mean_us: f64,
    #[serde(default, alias = "compactions")]
    pub compacting_steps: f64,
    #[serde(default)]
    pub quiet_steps: f64,
    #[serde(default)]
    pub first_500_p50_us: Option<f64>,
    #[serde(default)]
    pub last_500_p50_us: Option<f64>,
    #[serde(default)]
    pub runs: serde_json::Value,
    #[serde(default)]
    pub tool_schemas: Option<u32>,
}

impl StepFigures {
    /// How many runs the medians were taken over.
    pub fn run_count(&self) -> usize {
        match &self.runs {
            serde_json::Value::Array(runs) => runs.len(),
            serde_json::Value::Number(n) => n.as_u64().unwrap_or(1) as usize,
            _ => 1,
        }
    }
}

/// ctxkeeper's own per-step overhead (`engine.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct Engine {
    pub window: u64,
    pub trace: String,
    /// From `ctxkeeper replay --json`, by policy.
    pub replay: BTreeMap<String, StepFigures>,
    /// From the harness-free `engine_step` bench, by policy.
    #[serde(default)]
    pub engine_step: BTreeMap<String, StepFigures>,
}

/// One Python peer (`peer-*.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct Peer {
    pub peer: String,
    pub version: String,
    #[serde(default)]
    pub core_version: Option<String>,
    pub window: u64,
    pub steps: u64,
    pub variants: BTreeMap<String, StepFigures>,
}

/// One `ctxkeeper replay --json` report (the fields the report uses).
#[derive(Debug, Clone, Deserialize)]
pub struct ReplayFigures {
    pub peak_input_tokens: u64,
    pub cumulative_input_tokens: u64,
    pub cumulative_uncached_input_tokens: u64,
    pub stable_prefix_ratio: f64,
    #[serde(default)]
    pub compactions: u64,
    pub violations: u64,
    #[serde(default)]
    pub unrecoverable_items: u64,
    #[serde(default)]
    pub min_recent_rounds_verbatim: u64,
    #[serde(default)]
    pub overflowed_steps: u64,
    /// The engine's own time per step (absent from the baseline).
    #[serde(default)]
    pub engine_time_us: Option<EngineTime>,
    /// Uncached input plus a tenth of the cached input (absent from older reports).
    #[serde(default)]
    pub billed_input_tokens: Option<u64>,
    /// The fidelity probes (see `ctxkeeper_core::fidelity`), over the steps whose managed
    /// request differs from the unmanaged one.
    #[serde(default)]
    pub fidelity_steps: u64,
    #[serde(default)]
    pub user_instructions_kept: Option<f64>,
    #[serde(default)]
    pub file_paths_kept: Option<f64>,
    #[serde(default)]
    pub plan_kept: Option<f64>,
    #[serde(default)]
    pub refs_shown: u64,
    #[serde(default)]
    pub refs_resolving: Option<f64>,
    #[serde(default)]
    pub leaked_markers: u64,
}

impl ReplayFigures {
    /// Billed input tokens, computed from the cumulative and uncached figures for reports
    /// written before the field existed.
    pub fn billed(&self) -> u64 {
        self.billed_input_tokens.unwrap_or_else(|| {
            let uncached = self
                .cumulative_uncached_input_tokens
                .min(self.cumulative_input_tokens);
            uncached + (self.cumulative_input_tokens - uncached).div_ceil(10)
        })
    }
}

/// `engine_time_us` of a replay report: the engine's own time per model call.
#[derive(Debug, Clone, Deserialize)]
pub struct EngineTime {
    pub p50_step: f64,
    pub p99_step: f64,
}

/// A replay of one trace under one preset at one window.
#[derive(Debug, Clone, Deserialize)]
pub struct CompactionCell {
    pub label: String,
    pub policy: String,
    pub window: u64,
    pub steps: u64,
    #[serde(flatten)]
    pub figures: ReplayFigures,
    pub baseline: ReplayFigures,
}

/// The compaction matrix (`compaction.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct Compaction {
    pub windows: Vec<u64>,
    pub policies: Vec<String>,
    #[serde(default)]
    pub wall_s: f64,
    pub reports: Vec<CompactionCell>,
}

impl Compaction {
    /// The reports of `policy` at `window`, one per trace.
    pub fn cells(&self, window: u64, policy: &str) -> Vec<&CompactionCell> {
        self.reports
            .iter()
            .filter(|r| r.window == window && r.policy == policy)
            .collect()
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Throughput {
    pub bench: String,
    pub mb_per_s: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FirstLoad {
    pub encoding: String,
    pub implementation: String,
    pub ms: f64,
}

/// Token counting throughput (`token_counting.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct TokenCounting {
    pub corpus_strings: Option<u64>,
    pub corpus_mb: Option<f64>,
    #[serde(default)]
    pub first_load: Vec<FirstLoad>,
    pub throughput: Vec<Throughput>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct StoreRow {
    pub backend: String,
    pub messages: u64,
    pub append_p50_us: f64,
    pub append_p99_us: f64,
    pub load_p50_us: f64,
    pub load_p99_us: f64,
}

/// Session store latency (`stores.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct Stores {
    pub rows: Vec<StoreRow>,
    #[serde(default)]
    pub skipped: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct MemoryRow {
    pub policy: String,
    pub peak_rss_mib: f64,
    pub wall_s: Option<f64>,
}

/// Peak resident memory (`memory.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct Memory {
    pub window: u64,
    pub trace: String,
    pub replay: Vec<MemoryRow>,
}

/// A table in the gateway hook's results.
#[derive(Debug, Clone, Deserialize)]
pub struct Table {
    #[serde(default)]
    pub caption: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
}

/// A target and whether it was met.
#[derive(Debug, Clone, Deserialize)]
pub struct Target {
    pub name: String,
    pub target: String,
    pub measured: String,
    pub met: bool,
    #[serde(default)]
    pub why: Option<String>,
}

/// What `bench/gateway.sh` writes (`gateway.json`); see bench/README.md.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Gateway {
    #[serde(default)]
    pub tables: Vec<Table>,
    #[serde(default)]
    pub targets: Vec<Target>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Everything found in a results directory.
#[derive(Debug, Clone, Default)]
pub struct Results {
    pub machine: Option<Machine>,
    pub timings: Option<Timings>,
    pub engine: Option<Engine>,
    pub agentscope: Option<Peer>,
    pub langchain: Option<Peer>,
    pub compaction: Option<Compaction>,
    pub series: Option<Series>,
    pub tokens: Option<TokenCounting>,
    pub stores: Option<Stores>,
    pub memory: Option<Memory>,
    pub gateway: Option<Gateway>,
    /// What `bench/hardening.sh` writes (`hardening.json`), in the gateway hook's shape.
    pub hardening: Option<Gateway>,
}

impl Results {
    /// Reads every known file of `dir`; missing files stay `None`.
    pub fn load(dir: &Path) -> Result<Results> {
        Ok(Results {
            machine: read(dir, "machine.json")?,
            timings: read(dir, "timings.json")?,
            engine: read(dir, "engine.json")?,
            agentscope: read(dir, "peer-agentscope.json")?,
            langchain: read(dir, "peer-langchain.json")?,
            compaction: read(dir, "compaction.json")?,
            series: read(dir, "series.json")?,
            tokens: read(dir, "token_counting.json")?,
            stores: read(dir, "stores.json")?,
            memory: read(dir, "memory.json")?,
            gateway: read(dir, "gateway.json")?,
            hardening: read(dir, "hardening.json")?,
        })
    }
}

fn read<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<Option<T>> {
    let path = dir.join(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .with_context(|| format!("{}: unexpected content", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_are_none_and_present_ones_parse() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("memory.json"),
            r#"{"window": 16000, "trace": "tau", "replay": [{"policy": "none", "peak_rss_mib": 41.5, "wall_s": 3.2}]}"#,
        )
        .expect("write");
        let results = Results::load(dir.path()).expect("loads");
        assert!(results.engine.is_none() && results.gateway.is_none());
        let memory = results.memory.expect("memory.json is read");
        assert_eq!(memory.replay[0].policy, "none");
        assert_eq!(memory.replay[0].peak_rss_mib, 41.5);
    }

    #[test]
    fn a_malformed_file_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("stores.json"), r#"{"rows": "not a list"}"#).expect("write");
        let err = Results::load(dir.path()).expect_err("must fail");
        assert!(format!("{err:#}").contains("stores.json"), "{err:#}");
    }
}
