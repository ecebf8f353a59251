//! Engine overhead per step on a real trace, without archive IO or summarizer calls.
//!
//! Replays the 200 tau-bench tasks concatenated into one session through a policy, the way a
//! host runs the engine (ingest each message, plan before each model call, apply), with the
//! archive and the summarizer replaced by instant stand-ins so only the engine's own work is
//! timed. Prints p50/p99 of steps that do not compact and the mean of those that do.
//!
//! After every model call the bench reports the request's exact size back to the engine, as
//! a host passes on the provider's `usage` (`ContextManager::observe_usage`); `--no-usage`
//! leaves that out, and the engine then estimates the whole context from samples it counts.
//!
//! ```text
//! cargo bench -p ctxkeeper-core --bench engine_step -- [POLICY] [WINDOW] [RUNS] [--no-usage]
//! ```

use std::time::{Duration, Instant};

use ctxkeeper_core::engine::{
    ArchiveItem, Budget, ContextState, Engine, Ingest, PlanOutcome, PlanRequest, presets,
};
use ctxkeeper_core::import::{self, TraceFormat};
use ctxkeeper_core::model::Role;
use ctxkeeper_core::replay::percentile;
use ctxkeeper_core::summary::Summary;
use ctxkeeper_core::tokens::{Profiles, TokenCache, TokenModel};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let policy = args.first().cloned().unwrap_or_else(|| "default".into());
    let window: u64 = args.get(1).and_then(|w| w.parse().ok()).unwrap_or(16_000);
    let runs: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(3);

    let root = std::env::var("CTXKEEPER_TRACES")
        .unwrap_or_else(|_| format!("{}/../../../shared/data/traces", env!("CARGO_MANIFEST_DIR")));
    let path = format!("{root}/tau-bench/gpt-4o-airline.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("SKIP: engine_step bench: trace not found at {path}");
        return;
    };
    let Ok(trace) = import::import(&text, TraceFormat::TauBench) else {
        eprintln!("SKIP: engine_step bench: cannot import {path}");
        return;
    };
    let session = trace.concat();
    let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
    let Some(config) = presets::preset(&policy) else {
        eprintln!("unknown policy {policy}");
        return;
    };
    let engine = Engine::new(config, model.clone());
    // Load the tokenizer first: its one-time start-up is not a per-step cost.
    let _ = model.text_tokens("warm up");
    let budget = Budget {
        window,
        fixed_tokens: u64::from(model.tools_tokens(&session.tools)),
    };

    let mut quiet_p50 = Vec::new();
    let mut quiet_p99 = Vec::new();
    let mut busy_mean = Vec::new();
    let mut counts = (0usize, 0usize);
    // `--no-usage`: the host reports no provider usage, so the engine estimates the whole
    // context from samples it counts itself.
    let report_usage = !std::env::args().any(|a| a == "--no-usage");
    let mut provider = TokenCache::with_capacity(1 << 14);
    for _ in 0..runs {
        let mut state = ContextState::default();
        let mut quiet: Vec<f64> = Vec::new();
        let mut busy: Vec<f64> = Vec::new();
        let mut step = Duration::ZERO;
        for message in &session.messages {
            if message.role == Role::Assistant {
                let started = Instant::now();
                let plan = engine.plan(&mut state, &budget, &PlanRequest::default());
                step += started.elapsed();
                let compacted = plan.is_some();
                if let Some(plan) = plan {
                    let outcome = stand_in_outcome(&plan.archive, &plan.summaries);
                    let started = Instant::now();
                    engine.apply(&mut state, plan, outcome);
                    step += started.elapsed();
                }
                let micros = step.as_secs_f64() * 1e6;
                // The provider's side, untimed: it counts the request and reports the usage,
                // which anchors the engine's count as a host's `observe_usage` does.
                if report_usage {
                    let reported: u64 = state
                        .messages()
                        .map(|m| u64::from(provider.message_tokens(m, &model)))
                        .sum();
                    let len = state.entries.len();
                    state.anchor_usage(len, reported);
                }
                if std::env::var_os("ENGINE_STEP_CHECK").is_some() {
                    let real: u64 = state
                        .messages()
                        .map(|m| u64::from(model.message_tokens(m)))
                        .sum::<u64>()
                        + budget.fixed_tokens;
                    let approx = state.approx_tokens() + budget.fixed_tokens;
                    if real > engine.trigger_tokens(&budget).unwrap_or(u64::MAX) {
                        println!(
                            "over trigger: real {real} approx {approx} entries {} compacted {compacted}",
                            state.entries.len()
                        );
                    }
                }
                if compacted {
                    busy.push(micros)
                } else {
                    quiet.push(micros)
                }
                step = Duration::ZERO;
            }
            let started = Instant::now();
            let decision = engine.plan_ingest(&state, &budget, message.clone());
            step += started.elapsed();
            match decision {
                Ingest::Ready(message) => {
                    let started = Instant::now();
                    state.push(message);
                    step += started.elapsed();
                }
                Ingest::Cap(plan) => {
                    let refs: Vec<String> =
                        (0..plan.archive.len()).map(|i| format!("r{i}")).collect();
                    let started = Instant::now();
                    engine.apply_ingest(&mut state, plan, &refs);
                    step += started.elapsed();
                }
            }
        }
        counts = (quiet.len(), busy.len());
        quiet_p50.push(percentile(&quiet, 0.5));
        quiet_p99.push(percentile(&quiet, 0.99));
        busy_mean.push(if busy.is_empty() {
            0.0
        } else {
            busy.iter().sum::<f64>() / busy.len() as f64
        });
    }
    println!(
        "engine_step policy={policy} window={window} messages={} steps: {} quiet, {} compacting; \
         median of {runs} runs: quiet p50 {:.2} µs, quiet p99 {:.2} µs, compacting mean {:.1} µs",
        session.messages.len(),
        counts.0,
        counts.1,
        percentile(&quiet_p50, 0.5),
        percentile(&quiet_p99, 0.5),
        percentile(&busy_mean, 0.5),
    );
}

/// Instant archive references and a fixed-size summary per request.
fn stand_in_outcome(
    archive: &[ArchiveItem],
    summaries: &[ctxkeeper_core::summary::SummaryRequest],
) -> PlanOutcome {
    PlanOutcome {
        refs: (0..archive.len())
            .map(|i| format!("sessions/bench/item-{i}"))
            .collect(),
        summaries: summaries
            .iter()
            .map(|request| {
                let mut summary = Summary::empty(&request.schema, "bench");
                for field in &request.schema.fields {
                    summary.set(
                        &field.name,
                        "a summary sentence of moderate length ".repeat(8),
                    );
                }
                summary
            })
            .collect(),
    }
}
