//! `ctxkeeper replay`: run a trace through a context policy, step by step, and report.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use ctxkeeper_core::formats::Wire;
use ctxkeeper_core::model::{CheckRules, Request};
use ctxkeeper_core::replay::{ReplayOptions, ReplayReport, StepPolicy, StepView, Unmanaged, replay};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::TraceArgs;
use crate::inspect::thousands;
use crate::trace_input::{self, InputError, LoadedTrace};

/// Arguments of `ctxkeeper replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub trace: TraceArgs,

    /// The context window in tokens (default: the model's).
    #[arg(long, value_name = "TOKENS")]
    pub window: Option<u64>,

    /// The context policy: `none` sends the whole history every step (the unmanaged
    /// baseline).
    #[arg(long, default_value = "none", value_name = "POLICY")]
    pub policy: String,

    /// Write every step's request body to DIR/step-00001.json, … in the `--wire` format.
    #[arg(long, value_name = "DIR")]
    pub emit_requests: Option<PathBuf>,

    /// Wire format of emitted requests and of the rules each request is checked against.
    #[arg(long, default_value = "openai-chat", value_name = "WIRE")]
    pub wire: String,
}

/// Runs the command.
pub fn run(args: &ReplayArgs) -> Result<()> {
    let wire: Wire = args.wire.parse().map_err(InputError::BadOption)?;
    let mut policy: Box<dyn StepPolicy> = match args.policy.as_str() {
        "none" => Box::new(Unmanaged),
        other => {
            return Err(InputError::BadOption(format!(
                "unknown policy {other:?} (available: none)"
            ))
            .into());
        }
    };
    let loaded = trace_input::load(&args.trace)?;
    let window = args.window.unwrap_or(loaded.tokens.profile.context_window);
    if window == 0 {
        bail!(InputError::BadOption("--window must be greater than 0".into()));
    }
    let rules = match wire {
        Wire::Anthropic => CheckRules::anthropic(),
        Wire::OpenAiChat | Wire::Responses => CheckRules::openai(),
    };
    if let Some(dir) = &args.emit_requests {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }

    let total_steps: u64 = loaded
        .sessions
        .iter()
        .flat_map(|s| &s.messages)
        .filter(|m| m.role == ctxkeeper_core::model::Role::Assistant)
        .count() as u64;
    let progress = progress_bar(total_steps);
    let options = ReplayOptions { window, rules };
    let mut observer = |step: &StepView<'_>| -> Result<()> {
        progress.inc(1);
        if let Some(dir) = &args.emit_requests {
            write_request(dir, wire, &loaded.model, step)?;
        }
        Ok(())
    };
    let report = replay(&loaded.sessions, &loaded.tokens, &options, policy.as_mut(), &mut observer)?;
    progress.finish_and_clear();

    if args.trace.json {
        println!("{}", serde_json::to_string_pretty(&report_json(&loaded, &report, wire))?);
    } else {
        print!("{}", render(&loaded, &report));
    }
    Ok(())
}

fn progress_bar(total: u64) -> ProgressBar {
    // indicatif draws only when stderr is a terminal, so pipes and CI stay clean.
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} replaying [{bar:40}] {pos}/{len} steps ({per_sec}, eta {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn write_request(dir: &Path, wire: Wire, model: &str, step: &StepView<'_>) -> Result<()> {
    let request = Request {
        model: Some(model.to_string()),
        messages: step.request.to_vec(),
        tools: step.session.tools.clone(),
        ..Request::default()
    };
    let body = wire.emit_request(&request);
    let path = dir.join(format!("step-{:05}.json", step.number));
    let text = serde_json::to_vec_pretty(&body)?;
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn report_json(loaded: &LoadedTrace, report: &ReplayReport, wire: Wire) -> serde_json::Value {
    let mut body = json!({
        "trace": loaded.path.display().to_string(),
        "format": loaded.format.as_str(),
        "model": loaded.model,
        "wire": wire.as_str(),
    });
    if let (Some(object), Ok(serde_json::Value::Object(fields))) =
        (body.as_object_mut(), serde_json::to_value(report))
    {
        object.extend(fields);
    }
    body
}

fn render(loaded: &LoadedTrace, report: &ReplayReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{}  ({}, model {}, window {} tokens, policy {})\n",
        loaded.path.display(),
        loaded.format.as_str(),
        loaded.model,
        thousands(report.window),
        report.policy
    ));
    let rows = [
        ("sessions", thousands(report.sessions as u64)),
        ("messages", thousands(report.messages as u64)),
        ("model calls (steps)", thousands(report.steps as u64)),
        ("peak input tokens", thousands(report.peak_input_tokens)),
        ("cumulative input tokens", thousands(report.cumulative_input_tokens)),
        (
            "steps over the window",
            format!(
                "{} ({:.1}%)",
                thousands(report.overflowed_steps as u64),
                pct(report.overflowed_steps, report.steps)
            ),
        ),
        ("provider-rule violations", thousands(report.violations as u64)),
        (
            "engine time per step",
            format!(
                "p50 {:.1} µs, p99 {:.1} µs (total {:.1} ms)",
                report.engine_time_us.p50_step,
                report.engine_time_us.p99_step,
                report.engine_time_us.total / 1000.0
            ),
        ),
    ];
    for (label, value) in rows {
        out.push_str(&format!("  {label:<26}{value}\n"));
    }
    out.push_str(&sparkline(&report.input_tokens_per_step, report.window));
    out
}

fn pct(part: usize, whole: usize) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 }
}

/// A one-line chart of input tokens per step, scaled to the window (`│` marks the window).
fn sparkline(values: &[u64], window: u64) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if values.is_empty() {
        return String::new();
    }
    let width = 60.min(values.len());
    let top = values.iter().copied().max().unwrap_or(0).max(window).max(1);
    let mut line = String::new();
    for column in 0..width {
        let from = column * values.len() / width;
        let to = ((column + 1) * values.len() / width).max(from + 1);
        let peak = values[from..to].iter().copied().max().unwrap_or(0);
        let level = (peak as f64 / top as f64 * 7.0).round() as usize;
        line.push(BARS[level.min(7)]);
    }
    format!(
        "  input tokens per step     {line}  (max {}, window {})\n",
        thousands(values.iter().copied().max().unwrap_or(0)),
        thousands(window)
    )
}
