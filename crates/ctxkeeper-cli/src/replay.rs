//! `ctxkeeper replay`: run a trace through a context policy, step by step, and report.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use ctxkeeper::core::engine::{ConfigError, PolicyConfig, PolicyOverlay, presets};
use ctxkeeper::core::formats::Wire;
use ctxkeeper::core::model::{CheckRules, Request, Role};
use ctxkeeper::core::replay::{ReplayOptions, ReplayReport, StepView, Unmanaged, replay};
use ctxkeeper::llm::Summarizer;
use ctxkeeper::store::LocalWorkspace;
use ctxkeeper::store::memory::LongTermMemory;
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

    /// The context window in tokens (default: the model's; for a model the table does not
    /// know, the policy's `unknown_model_window` when it sets one).
    #[arg(long, value_name = "TOKENS")]
    pub window: Option<u64>,

    /// The context policy: `none` (the unmanaged baseline), `default`, or a seed system's
    /// preset (agentscope, reme-compact, reme-compress, reme-auto, agentrail, cowagent,
    /// harness); default `none`. A `[policy]` table in --config overrides its settings key by
    /// key (its `name`, when a preset's, selects that preset).
    #[arg(long, value_name = "POLICY")]
    pub policy: Option<String>,

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
    /// Long-term memory lives there too, as in the seeds' workspaces: `MEMORY.md` and
    /// `memory/YYYY-MM-DD.md` receive the facts flushed before each compaction and the
    /// summaries of policies that keep them in memory (cowagent).
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
    let policy = resolve_policy(args.policy.as_deref(), loaded.policy_overrides.as_deref())?;
    let window = args
        .window
        .unwrap_or_else(|| policy.window_for(&loaded.tokens.profile, &loaded.profiles));
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
            write_request(dir, wire, &loaded.model, step).map_err(|e| crate::error_line(&e))?;
        }
        if keep_contexts {
            final_contexts.insert(step.session.id.clone(), step.request.to_vec());
        }
        Ok(())
    };

    // What each managed session ended with (its summary included): what a stored session
    // resumes from, as `serve` stores it.
    let mut final_states = Vec::new();
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
        let memory = Arc::new(LongTermMemory::new(workspace_dir).with_context(|| {
            format!(
                "cannot open long-term memory in {}",
                workspace_dir.display()
            )
        })?);
        let mut engine =
            ctxkeeper::replay::PolicyReplay::new(policy, window, offloader, summarizer)?
                .with_memory(memory);
        if let Some(keys) = &stored_keys {
            engine = engine
                .archive_under(keys.iter().map(|k| k.archive_scope()).collect())
                .keep_final_states();
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
        final_states = engine.take_final_states();
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
            Some(EngineFigures {
                unrecoverable_items: engine.unrecoverable_items,
                degraded_summaries: engine.degraded_summaries,
                summary_lines_dropped: engine.summary_lines_dropped,
                summary_lines_unverified: engine.summary_lines_unverified,
                baseline,
            }),
        )
    };
    progress.finish_and_clear();
    if let (Some(url), Some(keys)) = (&args.store, &stored_keys) {
        persist(url, keys, &loaded, &final_contexts, final_states)?;
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
/// saved state, so `ctxkeeper sessions …` and a later run can pick it up. Under a managed
/// policy the state is the engine's own context (`final_states`, one per session in trace
/// order), so its running summary and its entries' bookkeeping are stored as `serve` stores
/// them; unmanaged, it is the last request sent (`final_contexts`).
///
/// Atomic per session: the state and all its log entries go in one
/// [`save_and_append`](ctxkeeper::store::SessionStore::save_and_append), which every backend
/// commits at once, so a failed run leaves a session whole or absent, never half-written.
/// Idempotent: a session whose stored log already holds the trace's messages gets only the
/// messages it lacks (none for the same trace) and is not saved again when its context is
/// unchanged, so a second identical run leaves the same log. A stored log that is not a prefix
/// of the trace is a different conversation: the run is refused before anything is written.
fn persist(
    url: &str,
    keys: &[ctxkeeper::store::SessionKey],
    loaded: &LoadedTrace,
    final_contexts: &std::collections::HashMap<String, Vec<ctxkeeper::core::model::Message>>,
    final_states: Vec<ctxkeeper::core::engine::ContextState>,
) -> Result<()> {
    use ctxkeeper::core::engine::ContextState;
    use ctxkeeper::snapshot::{ClientRecord, Snapshot};
    use ctxkeeper::store::open_store;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = open_store(url)
            .await
            .with_context(|| format!("cannot open the store {}", ctxkeeper::store::redact(url)))?;
        if !store.commits_atomically() {
            bail!(
                "the {} store cannot commit a session atomically; replay --store needs one that can",
                store.backend()
            );
        }
        // Every session is checked before any is written, so a refused run writes nothing.
        let mut writes = Vec::new();
        let mut final_states = final_states.into_iter();
        for (session, key) in loaded.sessions.iter().zip(keys) {
            let final_state = final_states.next();
            let name = key.session();
            let logged = store.whole_log(key)
                .await
                .with_context(|| format!("cannot read the log of {name}"))?;
            let is_prefix = logged.len() <= session.messages.len()
                && logged
                    .iter()
                    .zip(&session.messages)
                    .all(|(entry, message)| entry.message == *message);
            if !is_prefix {
                bail!(InputError::BadOption(format!(
                    "--session {name}: the store already holds a different conversation under this id ({} log entries); choose another id or remove it with `ctxkeeper sessions clear`",
                    logged.len()
                )));
            }
            // Stored through the shared codec, with the fingerprints of the conversation's
            // messages, so a gateway (or any face) continuing the session ingests only what
            // is new.
            // A session without a model call was never prepared: its messages are its context.
            let mut managed = match (final_contexts.get(&session.id), final_state) {
                (Some(_), Some(state)) => state,
                (Some(context), None) => ContextState::from_messages(context.clone()),
                (None, _) => ContextState::from_messages(session.messages.clone()),
            };
            let mut client = ClientRecord::of_messages(&session.messages);
            client.verbatim = managed.to_messages() == session.messages;
            managed.appended = session.messages.len() as u64;
            let state = Snapshot::new(managed).with_client(client).encode();
            let current = store.load(key).await?;
            let new_messages = &session.messages[logged.len()..];
            let unchanged = current
                .as_ref()
                .is_some_and(|stored| stored.state.context == state.context);
            if new_messages.is_empty() && unchanged {
                continue;
            }
            writes.push((key, state, current.map(|v| v.version), new_messages));
        }
        for (key, state, expected, new_messages) in writes {
            store
                .save_and_append(key, &state, expected, new_messages)
                .await
                .with_context(|| format!("cannot store {}", key.session()))?;
        }
        Ok(())
    })
}

/// The named preset (`none` when none is named) with the config file's `[policy]` overrides
/// applied; a `[policy]` whose `name` is a preset selects it, as `serve` reads the file.
fn resolve_policy(name: Option<&str>, overrides: Option<&str>) -> Result<PolicyConfig> {
    let bad = |e: ConfigError| InputError::BadOption(format!("[policy] in the config file: {e}"));
    let overlay = overrides
        .map(PolicyOverlay::parse)
        .transpose()
        .map_err(bad)?;
    let named = overlay.as_ref().and_then(PolicyOverlay::preset);
    if let (Some(name), Some(named)) = (name, named)
        && name != named
    {
        return Err(InputError::BadOption(format!(
            "[policy] name = {named:?} in the config file selects the {named} preset, but --policy is {name:?}: keep one of them"
        ))
        .into());
    }
    let base = presets::lookup(name.or(named).unwrap_or("none"))
        .map_err(|e| InputError::BadOption(e.to_string()))?;
    match overlay {
        Some(overlay) => Ok(overlay.apply(&base).map_err(bad)?),
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

/// What only a replay under a real policy measures, and the unmanaged baseline beside it.
struct EngineFigures {
    unrecoverable_items: usize,
    degraded_summaries: usize,
    summary_lines_dropped: usize,
    summary_lines_unverified: usize,
    baseline: ReplayReport,
}

fn report_json(
    loaded: &LoadedTrace,
    report: &ReplayReport,
    wire: Wire,
    extra: Option<&EngineFigures>,
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
        let counts = |f: fn(&EngineFigures) -> usize| extra.map_or(0, f);
        object.insert(
            "unrecoverable_items".into(),
            json!(counts(|e| e.unrecoverable_items)),
        );
        object.insert(
            "degraded_summaries".into(),
            json!(counts(|e| e.degraded_summaries)),
        );
        object.insert(
            "summary_lines_dropped".into(),
            json!(counts(|e| e.summary_lines_dropped)),
        );
        object.insert(
            "summary_lines_unverified".into(),
            json!(counts(|e| e.summary_lines_unverified)),
        );
        let baseline = extra.map_or_else(|| figures(report), |e| figures(&e.baseline));
        object.insert("baseline".into(), baseline);
    }
    body
}

fn render(loaded: &LoadedTrace, report: &ReplayReport, extra: Option<&EngineFigures>) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{}  ({}, model {}, window {} tokens, policy {})\n",
        loaded.path.display(),
        loaded.format.as_str(),
        loaded.model,
        thousands(report.window),
        report.policy
    ));
    let baseline = extra.map(|e| &e.baseline);
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
            "billed input tokens",
            vs(
                report.billed_input_tokens,
                baseline.map(|b| b.billed_input_tokens),
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
    if let Some(engine) = extra {
        rows.push(("compactions", thousands(report.compactions as u64)));
        rows.push((
            "overflow recoveries",
            thousands(report.overflow_recoveries as u64),
        ));
        rows.push((
            "archived",
            format!("{} bytes", thousands(report.archived_bytes)),
        ));
        rows.push((
            "unrecoverable items",
            thousands(engine.unrecoverable_items as u64),
        ));
        rows.push((
            "degraded summaries",
            thousands(engine.degraded_summaries as u64),
        ));
        rows.push((
            "summary lines failing check",
            format!(
                "{} dropped, {} marked unverified",
                thousands(engine.summary_lines_dropped as u64),
                thousands(engine.summary_lines_unverified as u64)
            ),
        ));
        rows.push((
            "recent rounds verbatim (min)",
            report.min_recent_rounds_verbatim.to_string(),
        ));
        rows.extend(fidelity_rows(report));
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

/// The fidelity probes, over the steps whose request differs from the whole history.
fn fidelity_rows(report: &ReplayReport) -> Vec<(&'static str, String)> {
    let share = |value: Option<f64>| value.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"));
    vec![
        (
            "steps with a managed request",
            thousands(report.fidelity_steps as u64),
        ),
        (
            "user instructions kept",
            share(report.user_instructions_kept),
        ),
        ("file paths kept", share(report.file_paths_kept)),
        ("standing orders kept", share(report.standing_orders_kept)),
        ("plan kept", share(report.plan_kept)),
        (
            "next-action recall",
            format!(
                "{} of {} strings; long-range {} of {}",
                share(report.next_action_recall),
                thousands(report.next_action_strings as u64),
                share(report.next_action_long_range_recall),
                thousands(report.next_action_long_range_strings as u64)
            ),
        ),
        (
            "long-range strings lost most",
            if report.next_action_lost.is_empty() {
                "none".to_string()
            } else {
                report
                    .next_action_lost
                    .iter()
                    .take(8)
                    .map(|(string, steps)| format!("{string} ({steps})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ),
        (
            "references resolving",
            format!(
                "{} ({} shown)",
                share(report.refs_resolving),
                thousands(report.refs_shown as u64)
            ),
        ),
        (
            "leaked internal markers",
            format!(
                "{} of {} requests",
                thousands(report.leaked_markers as u64),
                thousands(report.steps as u64)
            ),
        ),
    ]
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
