//! `ctxkeeper replay`: run a trace through a context policy, step by step, and report.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use ctxkeeper::core::engine::{PolicyConfig, presets};
use ctxkeeper::core::formats::Wire;
use ctxkeeper::core::model::{CheckRules, Request, Role};
use ctxkeeper::core::replay::{ReplayOptions, ReplayReport, StepView, Unmanaged, replay};
use ctxkeeper::llm::Summarizer;
use ctxkeeper::store::LocalWorkspace;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::TraceArgs;
use crate::trace_input::{self, InputError, LoadedTrace};
use ctxkeeper_core::stats::thousands;

/// Arguments of `ctxkeeper replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub trace: TraceArgs,

    /// The context window in tokens (default: the model's).
    #[arg(long, value_name = "TOKENS")]
    pub window: Option<u64>,

    /// The context policy: `none` (the unmanaged baseline), `default`, or a seed system's
    /// preset (agentscope, reme-compact, reme-compress, reme-auto, agentrail, cowagent,
    /// harness). A `[policy]` table in --config overrides its settings.
    #[arg(long, default_value = "none", value_name = "POLICY")]
    pub policy: String,

    /// The summarizer for policies that summarize: `extractive` needs no model.
    #[arg(long, default_value = "extractive", value_name = "KIND")]
    pub summarizer: String,

    /// Base URL of the summarizer's OpenAI-compatible or Anthropic endpoint.
    #[arg(long, value_name = "URL")]
    pub summarizer_url: Option<String>,

    /// Model the summarizer calls.
    #[arg(long, value_name = "MODEL")]
    pub summarizer_model: Option<String>,

    /// Where archived content goes (default: a temporary directory removed afterwards).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,

    /// Write every step's request body to DIR/step-00001.json, … in the `--wire` format.
    #[arg(long, value_name = "DIR")]
    pub emit_requests: Option<PathBuf>,

    /// Wire format of emitted requests.
    #[arg(long, default_value = "openai-chat", value_name = "WIRE")]
    pub wire: String,

    /// Persist the replayed session in this session store (sqlite://PATH, postgres://…,
    /// mysql://…, redis://…, file://DIR, memory://): its full log and its final context.
    #[arg(long, value_name = "URL", requires = "session")]
    pub store: Option<String>,

    /// The session id to store the replay under (a multi-session trace without --concat gets
    /// ID-0001, ID-0002, …).
    #[arg(long, value_name = "ID", requires = "store")]
    pub session: Option<String>,

    /// The tenant to store the session in.
    #[arg(long, default_value = "default", value_name = "TENANT")]
    pub tenant: String,
}

/// Runs the command.
pub fn run(args: &ReplayArgs) -> Result<()> {
    let wire: Wire = args.wire.parse().map_err(InputError::BadOption)?;
    let loaded = trace_input::load(&args.trace)?;
    let policy = resolve_policy(&args.policy, loaded.policy_overrides.as_deref())?;
    let window = args.window.unwrap_or(loaded.tokens.profile.context_window);
    if window == 0 {
        bail!(InputError::BadOption(
            "--window must be greater than 0".into()
        ));
    }
    // The provider-neutral rules (tool pairing first of all) on what is sent; the wire
    // adapter performs each format's structural conversions (merging roles, moving the system
    // prompt) when it emits.
    let rules = CheckRules::openai();
    if let Some(dir) = &args.emit_requests {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }

    // The keys a stored replay is saved under, checked before the replay runs; its archive
    // goes under the same tenant and session ids, where `mcp` and `sessions show` look.
    let stored_keys = match (&args.store, &args.session) {
        (Some(_), Some(id)) => Some(stored_keys(id, &args.tenant, loaded.sessions.len())?),
        _ => None,
    };

    let options = ReplayOptions { window, rules };
    let total_steps = loaded
        .sessions
        .iter()
        .flat_map(|s| &s.messages)
        .filter(|m| m.role == Role::Assistant)
        .count() as u64;
    let progress = progress_bar(total_steps);
    // The last context sent in each session: what a stored session resumes from.
    let mut final_contexts: std::collections::HashMap<
        String,
        Vec<ctxkeeper::core::model::Message>,
    > = std::collections::HashMap::new();
    let keep_contexts = args.store.is_some();
    let mut observer = |step: &StepView<'_>| -> Result<(), String> {
        progress.inc(1);
        if let Some(dir) = &args.emit_requests {
            write_request(dir, wire, &loaded.model, step).map_err(|e| format!("{e:#}"))?;
        }
        if keep_contexts {
            final_contexts.insert(step.session.id.clone(), step.request.to_vec());
        }
        Ok(())
    };

    let (report, extra) = if policy.name == "none" && policy.stages.is_empty() {
        let report = replay(
            &loaded.sessions,
            &loaded.tokens,
            &options,
            &mut Unmanaged::default(),
            &mut observer,
        )
        .map_err(anyhow::Error::msg)?;
        (report, None)
    } else {
        let temp;
        let workspace_dir: &Path = match &args.workspace {
            Some(dir) => dir,
            None => {
                temp = tempfile::tempdir().context("cannot create a temporary workspace")?;
                temp.path()
            }
        };
        let offloader =
            Arc::new(LocalWorkspace::new(workspace_dir).with_context(|| {
                format!("cannot open the workspace {}", workspace_dir.display())
            })?);
        let summarizer = make_summarizer(args)?;
        let mut engine =
            ctxkeeper::replay::PolicyReplay::new(policy, window, offloader, summarizer)?;
        if let Some(keys) = &stored_keys {
            engine = engine.archive_under(keys.iter().map(|k| k.archive_scope()).collect());
        }
        let report = replay(
            &loaded.sessions,
            &loaded.tokens,
            &options,
            &mut engine,
            &mut observer,
        )
        .map_err(anyhow::Error::msg)?;
        engine.finish().map_err(anyhow::Error::msg)?;
        let baseline = replay(
            &loaded.sessions,
            &loaded.tokens,
            &options,
            &mut Unmanaged::default(),
            &mut |_| Ok::<(), String>(()),
        )
        .map_err(anyhow::Error::msg)?;
        (
            report,
            Some((
                engine.unrecoverable_items,
                engine.degraded_summaries,
                baseline,
            )),
        )
    };
    progress.finish_and_clear();
    if let (Some(url), Some(keys)) = (&args.store, &stored_keys) {
        persist(url, keys, &loaded, &final_contexts)?;
    }

    if args.trace.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report_json(&loaded, &report, wire, extra.as_ref()))?
        );
    } else {
        print!("{}", render(&loaded, &report, extra.as_ref()));
    }
    Ok(())
}

/// The keys the trace's sessions are stored under: `ID`, or `ID-0001`, `ID-0002`, … for a
/// multi-session trace, in the default user and agent of `tenant`.
fn stored_keys(
    id: &str,
    tenant: &str,
    sessions: usize,
) -> Result<Vec<ctxkeeper::store::SessionKey>> {
    use ctxkeeper::store::SessionKey;
    (0..sessions.max(1))
        .map(|index| {
            let name = if sessions > 1 {
                format!("{id}-{:04}", index + 1)
            } else {
                id.to_string()
            };
            SessionKey::new(
                tenant,
                SessionKey::DEFAULT,
                SessionKey::DEFAULT,
                name.as_str(),
            )
            .map_err(|e| InputError::BadOption(format!("--session/--tenant: {e}")).into())
        })
        .collect()
}

/// Stores every replayed session: its whole log (append-only) and the final context as the
/// saved state, so `ctxkeeper sessions …` and a later run can pick it up.
fn persist(
    url: &str,
    keys: &[ctxkeeper::store::SessionKey],
    loaded: &LoadedTrace,
    final_contexts: &std::collections::HashMap<String, Vec<ctxkeeper::core::model::Message>>,
) -> Result<()> {
    use ctxkeeper::store::{AgentState, open_store};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = open_store(url)
            .await
            .with_context(|| format!("cannot open the store {url}"))?;
        for (session, key) in loaded.sessions.iter().zip(keys) {
            let name = key.session();
            for chunk in session.messages.chunks(500) {
                store
                    .append(key, chunk)
                    .await
                    .with_context(|| format!("cannot append to {name}"))?;
            }
            let mut state = AgentState::new();
            state.context = final_contexts
                .get(&session.id)
                .cloned()
                .unwrap_or_else(|| session.messages.clone());
            let expected = store.load(key).await?.map(|v| v.version);
            store
                .save(key, &state, expected)
                .await
                .with_context(|| format!("cannot save {name}"))?;
        }
        Ok(())
    })
}

/// The named preset with the config file's `[policy]` overrides applied.
fn resolve_policy(name: &str, overrides: Option<&str>) -> Result<PolicyConfig> {
    let base = presets::preset(name).ok_or_else(|| {
        InputError::BadOption(format!(
            "unknown policy {name:?} (available: {})",
            presets::NAMES.join(", ")
        ))
    })?;
    match overrides {
        Some(fragment) => Ok(base
            .with_overrides(fragment)
            .map_err(|e| InputError::BadOption(format!("[policy] in the config file: {e}")))?),
        None => Ok(base),
    }
}

fn make_summarizer(args: &ReplayArgs) -> Result<Arc<dyn Summarizer>> {
    crate::summarizers::build(
        &args.summarizer,
        args.summarizer_url.as_deref(),
        args.summarizer_model.as_deref(),
    )
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

fn figures(report: &ReplayReport) -> serde_json::Value {
    serde_json::to_value(report).unwrap_or_default()
}

fn report_json(
    loaded: &LoadedTrace,
    report: &ReplayReport,
    wire: Wire,
    extra: Option<&(usize, usize, ReplayReport)>,
) -> serde_json::Value {
    let mut body = json!({
        "trace": loaded.path.display().to_string(),
        "format": loaded.format.as_str(),
        "model": loaded.model,
        "wire": wire.as_str(),
    });
    if let (Some(object), serde_json::Value::Object(fields)) =
        (body.as_object_mut(), figures(report))
    {
        object.extend(fields);
        let (unrecoverable, degraded, baseline) = match extra {
            Some((u, d, b)) => (*u, *d, figures(b)),
            None => (0, 0, figures(report)),
        };
        object.insert("unrecoverable_items".into(), json!(unrecoverable));
        object.insert("degraded_summaries".into(), json!(degraded));
        object.insert("baseline".into(), baseline);
    }
    body
}

fn render(
    loaded: &LoadedTrace,
    report: &ReplayReport,
    extra: Option<&(usize, usize, ReplayReport)>,
) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{}  ({}, model {}, window {} tokens, policy {})\n",
        loaded.path.display(),
        loaded.format.as_str(),
        loaded.model,
        thousands(report.window),
        report.policy
    ));
    let baseline = extra.map(|(_, _, b)| b);
    let vs = |value: u64, base: Option<u64>| match base {
        Some(base) if base > 0 => format!(
            "{}  ({:.0}% of unmanaged)",
            thousands(value),
            value as f64 * 100.0 / base as f64
        ),
        _ => thousands(value),
    };
    let mut rows = vec![
        ("sessions", thousands(report.sessions as u64)),
        ("messages", thousands(report.messages as u64)),
        ("model calls (steps)", thousands(report.steps as u64)),
        (
            "peak input tokens",
            vs(
                report.peak_input_tokens,
                baseline.map(|b| b.peak_input_tokens),
            ),
        ),
        (
            "cumulative input tokens",
            vs(
                report.cumulative_input_tokens,
                baseline.map(|b| b.cumulative_input_tokens),
            ),
        ),
        (
            "uncached input tokens",
            vs(
                report.cumulative_uncached_input_tokens,
                baseline.map(|b| b.cumulative_uncached_input_tokens),
            ),
        ),
        (
            "stable prefix ratio",
            format!("{:.3}", report.stable_prefix_ratio),
        ),
        (
            "steps over the window",
            format!(
                "{} ({:.1}%)",
                thousands(report.overflowed_steps as u64),
                pct(report.overflowed_steps, report.steps)
            ),
        ),
        (
            "provider-rule violations",
            thousands(report.violations as u64),
        ),
    ];
    if let Some((unrecoverable, degraded, _)) = extra {
        rows.push(("compactions", thousands(report.compactions as u64)));
        rows.push((
            "overflow recoveries",
            thousands(report.overflow_recoveries as u64),
        ));
        rows.push((
            "archived",
            format!("{} bytes", thousands(report.archived_bytes)),
        ));
        rows.push(("unrecoverable items", thousands(*unrecoverable as u64)));
        rows.push(("degraded summaries", thousands(*degraded as u64)));
        rows.push((
            "recent rounds verbatim (min)",
            report.min_recent_rounds_verbatim.to_string(),
        ));
    }
    rows.push((
        "engine time per step",
        format!(
            "p50 {:.1} µs, p99 {:.1} µs (total {:.1} ms)",
            report.engine_time_us.p50_step,
            report.engine_time_us.p99_step,
            report.engine_time_us.total / 1000.0
        ),
    ));
    for (label, value) in rows {
        out.push_str(&format!("  {label:<30}{value}\n"));
    }
    if let Some(base) = baseline {
        out.push_str(&sparkline(
            "unmanaged",
            &base.input_tokens_per_step,
            report.window,
        ));
    }
    out.push_str(&sparkline(
        &report.policy,
        &report.input_tokens_per_step,
        report.window,
    ));
    out
}

fn pct(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// A one-line chart of input tokens per step, scaled to the larger of the peak and the window.
fn sparkline(label: &str, values: &[u64], window: u64) -> String {
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
        "  {:<30}{line}  (max {}, window {})\n",
        format!("input tokens/step, {label}"),
        thousands(values.iter().copied().max().unwrap_or(0)),
        thousands(window)
    )
}
