//! Renders bench/RESULTS.md from the results of every stage.
//!
//! The page opens with the machine and the versions, then a table of every target with a plain
//! verdict (a missed target says **MISSED** and why), then one section per benchmark. Sections
//! whose results are missing say which `bench/run` stage produces them.
//!
//! ```
//! use ctxkeeper_bench::{markdown::render, results::Results};
//!
//! let page = render(&Results::default(), "charts");
//! assert!(page.starts_with("# Benchmark results"));
//! assert!(page.contains("Not measured yet"));
//! ```

use std::fmt::Write as _;

pub use ctxkeeper_core::stats::thousands;

use crate::results::{Compaction, Engine, Gateway, Peer, Results, StepFigures, Target};

/// The targets of the engine-vs-peers comparison: how many times below each peer ctxkeeper's
/// p50 of steps that do not compact must be.
pub const AGENTSCOPE_FACTOR: f64 = 100.0;
pub const LANGCHAIN_MIDDLEWARE_FACTOR: f64 = 30.0;
/// The engine's own targets (harness-free `engine_step` bench), in microseconds.
pub const ENGINE_QUIET_P50_US: f64 = 5.0;
pub const ENGINE_QUIET_P99_US: f64 = 20.0;
pub const ENGINE_COMPACTING_MEAN_US: f64 = 500.0;
/// Store appends must not grow with the session: p99 at 10,000 messages within this factor of
/// the p99 at 100.
pub const STORE_APPEND_GROWTH: f64 = 2.0;

/// One row of the engine-vs-peers table.
#[derive(Debug, Clone)]
pub struct OverheadRow {
    pub system: String,
    pub setup: String,
    pub figures: StepFigures,
}

/// The rows of the engine-vs-peers comparison, ctxkeeper first.
pub fn overhead_rows(results: &Results) -> Vec<OverheadRow> {
    let mut rows = Vec::new();
    if let Some(engine) = &results.engine {
        for policy in ["default", "agentscope"] {
            if let Some(figures) = engine.replay.get(policy) {
                rows.push(OverheadRow {
                    system: format!("ctxkeeper `{policy}`"),
                    setup: "`replay --json`, engine time per step".into(),
                    figures: figures.clone(),
                });
            }
        }
    }
    if let Some(peer) = &results.agentscope {
        for (variant, setup) in [
            ("none", "no tool schemas (same input as ctxkeeper)"),
            (
                "inferred",
                "14 declared airline tools (as an agent runs it)",
            ),
        ] {
            if let Some(figures) = peer.variants.get(variant) {
                rows.push(OverheadRow {
                    system: format!("AgentScope {} `compress_context`", peer.version),
                    setup: setup.into(),
                    figures: figures.clone(),
                });
            }
        }
    }
    if let Some(peer) = &results.langchain {
        for (variant, name, setup) in [
            (
                "summarization-middleware",
                "SummarizationMiddleware",
                "trigger 0.8 × window, keep 20 messages",
            ),
            (
                "trim_messages",
                "trim_messages",
                "whole history, max_tokens = window",
            ),
        ] {
            if let Some(figures) = peer.variants.get(variant) {
                rows.push(OverheadRow {
                    system: format!("LangChain {} `{name}`", peer.version),
                    setup: setup.into(),
                    figures: figures.clone(),
                });
            }
        }
    }
    rows
}

/// Every target with its verdict, in the order of the sections.
pub fn targets(results: &Results) -> Vec<Target> {
    let mut out = Vec::new();
    let ours = results
        .engine
        .as_ref()
        .and_then(|e| e.replay.get("default"))
        .map(|f| f.quiet_p50_us);
    let ratio_target = |name: String, factor: f64, peer: Option<f64>| {
        let (ours, peer) = (ours?, peer?);
        let ratio = peer / ours.max(f64::MIN_POSITIVE);
        let met = ratio >= factor;
        Some(Target {
            name,
            target: format!("≥ {factor:.0}× below"),
            measured: format!("{} ({} vs {})", times(ratio), micros(ours), micros(peer)),
            met,
            why: (!met).then(|| {
                format!(
                    "the peer's step costs {}, so ctxkeeper would need ≤ {}",
                    micros(peer),
                    micros(peer / factor)
                )
            }),
        })
    };
    if let Some(peer) = &results.agentscope {
        for (variant, what) in [
            ("none", "same input, no tool schemas"),
            ("inferred", "with 14 declared tools"),
        ] {
            out.extend(ratio_target(
                format!("ctxkeeper `default` vs AgentScope, p50 of quiet steps ({what})"),
                AGENTSCOPE_FACTOR,
                peer.variants.get(variant).map(|f| f.quiet_p50_us),
            ));
        }
    }
    if let Some(peer) = &results.langchain {
        out.extend(ratio_target(
            "ctxkeeper `default` vs LangChain SummarizationMiddleware, p50 of quiet steps".into(),
            LANGCHAIN_MIDDLEWARE_FACTOR,
            peer.variants
                .get("summarization-middleware")
                .map(|f| f.quiet_p50_us),
        ));
    }
    if let Some(step) = results
        .engine
        .as_ref()
        .and_then(|e| e.engine_step.get("default"))
    {
        let limit = |name: &str, value: f64, max: f64| Target {
            name: format!("engine alone (`engine_step`, `default`): {name}"),
            target: format!("< {}", micros(max)),
            measured: micros(value),
            met: value < max,
            why: (value >= max).then(|| {
                "measured above the limit in this run (the engine table below has every run)"
                    .to_string()
            }),
        };
        out.push(limit(
            "p50 of quiet steps",
            step.quiet_p50_us,
            ENGINE_QUIET_P50_US,
        ));
        out.push(limit(
            "p99 of quiet steps",
            step.quiet_p99_us,
            ENGINE_QUIET_P99_US,
        ));
        out.push(limit(
            "mean of compacting steps",
            step.compacting_mean_us,
            ENGINE_COMPACTING_MEAN_US,
        ));
    }
    if let Some(stores) = &results.stores {
        let mut backends: Vec<&str> = stores.rows.iter().map(|r| r.backend.as_str()).collect();
        backends.dedup();
        for backend in backends {
            let p99 = |n: u64| {
                stores
                    .rows
                    .iter()
                    .find(|r| r.backend == backend && r.messages == n)
                    .map(|r| r.append_p99_us)
            };
            if let (Some(small), Some(large)) = (p99(100), p99(10_000)) {
                let growth = large / small.max(1.0);
                out.push(Target {
                    name: format!("store `{backend}`: append p99 at 10,000 messages ÷ at 100"),
                    target: format!("≤ {STORE_APPEND_GROWTH:.0}×"),
                    measured: times(growth),
                    met: growth <= STORE_APPEND_GROWTH,
                    why: None,
                });
            }
        }
    }
    if let Some(compaction) = &results.compaction {
        out.extend(default_policy_targets(compaction));
        out.extend(fidelity_targets(compaction));
    }
    for hook in [&results.gateway, &results.hardening].into_iter().flatten() {
        out.extend(hook.targets.iter().cloned());
    }
    out
}

/// Opens the hand-written sections of the page (measurements no `bench/run` stage makes);
/// the report keeps what lies between this line and [`KEPT_END`] when it rewrites the page.
pub const KEPT_BEGIN: &str = "<!-- Hand-written sections: `bench/run report` keeps everything from here to the end marker. -->";
/// Closes the hand-written sections.
pub const KEPT_END: &str = "<!-- End of the hand-written sections. -->";

const TIMINGS_HEADING: &str = "## How long `bench/run` took";

/// The whole page without hand-written sections. `charts` is the charts directory relative to
/// the page.
pub fn render(results: &Results, charts: &str) -> String {
    render_keeping(results, charts, "")
}

/// The whole page, with `kept` (hand-written sections, see [`hand_written`]) between the
/// measured sections and the timings of the run.
pub fn render_keeping(results: &Results, charts: &str, kept: &str) -> String {
    let mut page = String::new();
    page.push_str("# Benchmark results\n\n");
    page.push_str(
        "Generated by `bench/run` (see [README.md](README.md)) from the JSON files in \
         `bench/results/`; edit by hand only between the hand-written sections' markers \
         (the report keeps what lies there). Absolute times depend on the machine; every \
         ratio compares figures measured in the same run, on the same input.\n\n",
    );
    machine_section(&mut page, results);
    targets_section(&mut page, results);
    overhead_section(&mut page, results, charts);
    compaction_section(&mut page, results, charts);
    fidelity_section(&mut page, results);
    tokens_section(&mut page, results, charts);
    stores_section(&mut page, results, charts);
    memory_section(&mut page, results);
    gateway_section(&mut page, results);
    hardening_section(&mut page, results);
    page.push_str(KEPT_BEGIN);
    page.push_str("\n\n");
    let kept = kept.trim();
    if !kept.is_empty() {
        page.push_str(kept);
        page.push_str("\n\n");
    }
    page.push_str(KEPT_END);
    page.push_str("\n\n");
    timings_section(&mut page, results);
    page
}

/// The hand-written sections of an existing page: what lies between [`KEPT_BEGIN`] and
/// [`KEPT_END`], or, on a page written before those markers, every `## ` section whose
/// heading is none of `generated` (the headings the report writes), in the page's order.
pub fn hand_written(existing: &str, generated: &[&str]) -> String {
    if let Some((_, rest)) = existing.split_once(KEPT_BEGIN) {
        let inside = rest.split_once(KEPT_END).map_or(rest, |(inside, _)| inside);
        return inside.trim().to_string();
    }
    let mut kept = String::new();
    let mut keeping = false;
    let mut fenced = false;
    for line in existing.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with("## ") {
            keeping = !generated.contains(&line.trim_end());
            if keeping && !kept.is_empty() && !kept.ends_with("\n\n") {
                kept.push('\n');
            }
        }
        if keeping {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept.trim().to_string()
}

/// The `## ` headings of a page [`render`] wrote, and the timings' heading (written only when
/// there are timings): the sections [`hand_written`] leaves to the report.
pub fn generated_headings(page: &str) -> Vec<&str> {
    let mut headings: Vec<&str> = page
        .lines()
        .filter(|line| line.starts_with("## "))
        .map(str::trim_end)
        .collect();
    if !headings.contains(&TIMINGS_HEADING) {
        headings.push(TIMINGS_HEADING);
    }
    headings
}

fn missing(page: &mut String, stage: &str) {
    let _ = writeln!(page, "_Not measured yet: run `bench/run {stage}`._\n");
}

fn machine_section(page: &mut String, results: &Results) {
    page.push_str("## Machine and versions\n\n");
    let Some(m) = &results.machine else {
        missing(page, "report");
        return;
    };
    page.push_str("| | |\n| --- | --- |\n");
    let _ = writeln!(page, "| date (UTC) | {} |", m.date);
    let _ = writeln!(page, "| CPU | {} |", m.cpu);
    if let Some(cores) = m.cores {
        let _ = writeln!(page, "| cores | {cores} |");
    }
    if let Some(ram) = m.ram_gib {
        let _ = writeln!(page, "| RAM | {ram:.1} GiB |");
    }
    if let Some(kernel) = &m.kernel {
        let _ = writeln!(page, "| Linux | {kernel} |");
    }
    if let Some(rustc) = &m.rustc {
        let _ = writeln!(page, "| Rust | {rustc} (release profile) |");
    }
    if let Some(python) = &m.python {
        let _ = writeln!(page, "| Python (peers) | {python} |");
    }
    for (package, version) in &m.peers {
        let _ = writeln!(page, "| `{package}` | {version} |");
    }
    if let Some(busy) = busy_stages(results) {
        let _ = writeln!(
            page,
            "\n**The machine was busy during this run** (load average above its {} cores when \
             {busy} started): absolute times in those sections are inflated; ratios measured \
             side by side in one stage are less affected.",
            m.cores.unwrap_or(0)
        );
    }
    if let Some(t) = &results.timings
        && t.quick
    {
        page.push_str(
            "\n**This run used `--quick`** (fewer repetitions, 16k window only in the \
             compaction matrix): figures are noisier than a full run's.\n",
        );
    }
    page.push('\n');
}

/// The stages that started with a load average above the machine's core count.
pub fn busy_stages(results: &Results) -> Option<String> {
    let cores = f64::from(results.machine.as_ref()?.cores?);
    let busy: Vec<String> = results
        .timings
        .as_ref()?
        .stages
        .iter()
        .filter(|s| s.load_at_start.is_some_and(|l| l > cores))
        .map(|s| format!("`{}`", s.stage))
        .collect();
    (!busy.is_empty()).then(|| busy.join(", "))
}

fn targets_section(page: &mut String, results: &Results) {
    page.push_str("## Targets\n\n");
    let all = targets(results);
    if all.is_empty() {
        page.push_str("_No target measured yet._\n\n");
        return;
    }
    page.push_str("| target | goal | measured | verdict |\n| --- | --- | --- | --- |\n");
    for t in &all {
        let verdict = if t.met {
            // A met target may still name what it reports without holding.
            match &t.why {
                Some(why) => format!("met; {why}"),
                None => "met".to_string(),
            }
        } else {
            format!(
                "**MISSED**{}",
                t.why
                    .as_deref()
                    .map(|w| format!(": {w}"))
                    .unwrap_or_default()
            )
        };
        let _ = writeln!(
            page,
            "| {} | {} | {} | {verdict} |",
            t.name, t.target, t.measured
        );
    }
    let missed = all.iter().filter(|t| !t.met).count();
    let _ = writeln!(
        page,
        "\n{} of {} targets met{}.\n",
        all.len() - missed,
        all.len(),
        if missed > 0 {
            format!("; **{missed} missed** (see the verdicts above)")
        } else {
            String::new()
        }
    );
}

fn overhead_section(page: &mut String, results: &Results, charts: &str) {
    page.push_str("## Context-management overhead per step: ctxkeeper and the Python peers\n\n");
    let rows = overhead_rows(results);
    if rows.is_empty() {
        missing(page, "engine peers");
        return;
    }
    let window = results
        .engine
        .as_ref()
        .map(|e| e.window)
        .or(results.agentscope.as_ref().map(|p| p.window))
        .unwrap_or(16_000);
    let _ = writeln!(
        page,
        "The 200 tau-bench tasks concatenated into one session (5,109 messages, 2,454 model \
         calls), window {}. Every system gets the same messages in the same order and is timed \
         on the work it does before each model call; the peers' models are stubs that answer \
         instantly (drivers and exactly what they time: `bench/peers/*.py`). *Quiet* steps do \
         not compact; *compacting* steps summarize (ctxkeeper: archive writes and the \
         extractive summarizer excluded from engine time). Medians over runs.\n",
        thousands(window)
    );
    let base = rows
        .first()
        .filter(|r| r.system.contains("`default`"))
        .map(|r| r.figures.quiet_p50_us);
    page.push_str(
        "| system | setup | quiet p50 | quiet p99 | compacting steps | compacting mean | first / last 500 steps p50 | runs | quiet p50 ÷ ctxkeeper `default` |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for row in &rows {
        let f = &row.figures;
        let growth = match (f.first_500_p50_us, f.last_500_p50_us) {
            (Some(a), Some(b)) => format!("{} / {}", micros(a), micros(b)),
            _ => "–".into(),
        };
        let ratio = base
            .map(|b| times(f.quiet_p50_us / b.max(f64::MIN_POSITIVE)))
            .unwrap_or_else(|| "–".into());
        let _ = writeln!(
            page,
            "| {} | {} | {} | {} | {} | {} | {growth} | {} | {ratio} |",
            row.system,
            row.setup,
            micros(f.quiet_p50_us),
            micros(f.quiet_p99_us),
            f.compacting_steps,
            if f.compacting_steps > 0.0 {
                micros(f.compacting_mean_us)
            } else {
                "–".into()
            },
            f.run_count(),
        );
    }
    let _ = writeln!(
        page,
        "\n![Per-step overhead, log scale]({charts}/step_overhead.svg)\n"
    );
    if let Some(engine) = &results.engine {
        engine_step_note(page, engine);
    }
    peer_notes(
        page,
        results.agentscope.as_ref(),
        results.langchain.as_ref(),
    );
}

fn engine_step_note(page: &mut String, engine: &Engine) {
    if engine.engine_step.is_empty() {
        return;
    }
    page.push_str(
        "The engine alone, without the replay harness or the facade (`cargo bench -p \
         ctxkeeper-core --bench engine_step`: archive and summarizer replaced by instant \
         stand-ins):\n\n| policy | quiet steps | quiet p50 | quiet p99 | compacting steps | compacting mean |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (policy, f) in &engine.engine_step {
        let _ = writeln!(
            page,
            "| `{policy}` | {} | {} | {} | {} | {} |",
            f.quiet_steps,
            micros(f.quiet_p50_us),
            micros(f.quiet_p99_us),
            f.compacting_steps,
            micros(f.compacting_mean_us)
        );
    }
    page.push('\n');
}

fn peer_notes(page: &mut String, agentscope: Option<&Peer>, langchain: Option<&Peer>) {
    let mut notes = Vec::new();
    if let Some(peer) = agentscope
        && let (Some(none), Some(tools)) =
            (peer.variants.get("none"), peer.variants.get("inferred"))
    {
        notes.push(format!(
            "AgentScope re-assembles the model input and deep-copies every tool schema on every \
             step: declaring the session's 14 tools takes its quiet p50 from {} to {}. tau-bench \
             logs carry no tool declarations, so ctxkeeper's replay has none either; its step \
             cost does not depend on them (tool tokens are counted once per session).",
            micros(none.quiet_p50_us),
            micros(tools.quiet_p50_us)
        ));
    }
    if let Some(peer) = langchain
        && let Some(trim) = peer.variants.get("trim_messages")
        && let (Some(first), Some(last)) = (trim.first_500_p50_us, trim.last_500_p50_us)
    {
        notes.push(format!(
            "`trim_messages` is stateless: it walks the whole history at every call, so its \
             cost grows with the session ({} over the first 500 steps, {} over the last 500).",
            micros(first),
            micros(last)
        ));
    }
    for note in notes {
        let _ = writeln!(page, "- {note}");
    }
    page.push('\n');
}

fn compaction_section(page: &mut String, results: &Results, charts: &str) {
    page.push_str("## Compaction effectiveness: every preset × every shared trace\n\n");
    let Some(c) = &results.compaction else {
        missing(page, "compaction");
        return;
    };
    page.push_str(
        "Each cell is one `ctxkeeper replay --json` run against the unmanaged baseline on the \
         same trace and window. *Peak* and *cumulative* input tokens; *uncached* = input not \
         covered by the previous request as an exact prefix (what a provider's prompt cache \
         cannot serve); *stable prefix* = mean share of each step's input repeating the \
         previous request; *recent rounds kept* = the fewest most-recent API rounds sent \
         untouched at any step (capped at 5; ⚠ = fewer than the working set of 2 rounds at some \
         step: a lower token figure there was reached by cutting what the agent was working \
         on, so it does not count against the `default` policy, which always keeps 2). \
         *Violations* = provider-rule breaks in what was sent; *unrecoverable* = removed \
         content not found byte-for-byte in the archive; *engine p50 / p99* = the engine's own \
         time per model call (archive writes and the summarizer excluded).\n\n",
    );
    let _ = writeln!(
        page,
        "{} replays in {:.0} s ({} windows × {} traces × {} presets).\n",
        c.reports.len(),
        c.wall_s,
        c.windows.len(),
        c.reports.len() / (c.windows.len() * c.policies.len()).max(1),
        c.policies.len()
    );
    compaction_summary(page, c);
    default_vs_seeds(page, c);
    if let Some(series) = &results.series {
        let _ = writeln!(
            page,
            "![Input tokens per step]({charts}/input_tokens_per_step.svg)\n\n\
             Input tokens of every model call of `{}` ({} steps, window {}), unmanaged and \
             under every preset (log scale).\n",
            series.trace,
            series.baseline.len(),
            thousands(series.window)
        );
    }
    for &window in &c.windows {
        let _ = writeln!(
            page,
            "<details><summary>All figures at window {}</summary>\n",
            thousands(window)
        );
        page.push_str(
            "| trace | policy | peak | cumulative | × base | uncached | × base | stable prefix | compactions | recent rounds kept | violations | unrecoverable | engine p50 / p99 (µs) |\n\
             | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        let mut last = "";
        for cell in c.reports.iter().filter(|r| r.window == window) {
            let b = &cell.baseline;
            if cell.label != last {
                let _ = writeln!(
                    page,
                    "| {} | none (baseline) | {} | {} | 1.00 | {} | 1.00 | {:.3} | 0 | 5 | {} | 0 | – |",
                    cell.label,
                    thousands(b.peak_input_tokens),
                    thousands(b.cumulative_input_tokens),
                    thousands(b.cumulative_uncached_input_tokens),
                    b.stable_prefix_ratio,
                    b.violations
                );
                last = &cell.label;
            }
            let f = &cell.figures;
            let kept = f.min_recent_rounds_verbatim;
            let _ = writeln!(
                page,
                "| {} | {} | {} | {} | {:.2} | {} | {:.2} | {:.3} | {} | {}{} | {} | {} | {} |",
                cell.label,
                cell.policy,
                thousands(f.peak_input_tokens),
                thousands(f.cumulative_input_tokens),
                ratio(f.cumulative_input_tokens, b.cumulative_input_tokens),
                thousands(f.cumulative_uncached_input_tokens),
                ratio(
                    f.cumulative_uncached_input_tokens,
                    b.cumulative_uncached_input_tokens
                ),
                f.stable_prefix_ratio,
                f.compactions,
                kept,
                working_set_mark(kept),
                f.violations,
                f.unrecoverable_items,
                f.engine_time_us
                    .as_ref()
                    .map_or("–".to_string(), |e| format!(
                        "{:.1} / {:.1}",
                        e.p50_step, e.p99_step
                    )),
            );
        }
        page.push_str("\n</details>\n\n");
    }
}

/// The newest API rounds the `default` policy always sends untouched: a policy that keeps
/// fewer at some step cut the agent's working set.
pub const WORKING_SET_ROUNDS: u64 = 2;

/// The window at which the `default` policy is held to its bar.
pub const BAR_WINDOW: u64 = 16_000;

/// The concatenated tau-bench session (200 customers' conversations in one session) is a
/// scale test, not an agent's session: over 1,100 user messages, some 40,000 tokens of the
/// user's words, more than a 16k or 32k window holds. The share of those words shown and the
/// billed input of carrying the capsule's share of them are reported beside the bars, not
/// held to them (as in `crates/ctxkeeper/tests/preset_matrix.rs`).
pub fn is_scale_test(label: &str) -> bool {
    label.ends_with(" (concat)")
}

fn working_set_mark(kept: u64) -> &'static str {
    if kept < WORKING_SET_ROUNDS {
        " ⚠"
    } else {
        ""
    }
}

/// The `default` policy against each seed preset at [`BAR_WINDOW`], trace by trace: billed
/// input tokens (uncached + 0.1 × cached), and whether the preset kept the working set.
fn default_vs_seeds(page: &mut String, c: &Compaction) {
    if !c.windows.contains(&BAR_WINDOW) {
        return;
    }
    let seeds: Vec<&String> = c
        .policies
        .iter()
        .filter(|p| *p != "default" && *p != "none")
        .collect();
    let _ = writeln!(
        page,
        "**`default` against every seed preset at window {}**: billed input tokens (uncached + \
         0.1 × cached reads) of the preset ÷ those of `default` on the same trace (above 1: \
         `default` costs less; `=`: neither compacts; ⚠: the preset dropped the working set, \
         so its figure does not count).\n",
        thousands(BAR_WINDOW)
    );
    let _ = write!(page, "| trace | `default` billed |");
    for seed in &seeds {
        let _ = write!(page, " {seed} |");
    }
    page.push_str("\n| --- | ---: |");
    for _ in &seeds {
        page.push_str(" ---: |");
    }
    page.push('\n');
    let mut labels: Vec<&str> = Vec::new();
    for cell in c.reports.iter().filter(|r| r.window == BAR_WINDOW) {
        if !labels.contains(&cell.label.as_str()) {
            labels.push(&cell.label);
        }
    }
    for label in labels {
        let cell = |policy: &str| {
            c.reports
                .iter()
                .find(|r| r.window == BAR_WINDOW && r.label == label && r.policy == policy)
        };
        let Some(ours) = cell("default") else {
            continue;
        };
        let _ = write!(page, "| {label} | {} |", thousands(ours.figures.billed()));
        for seed in &seeds {
            match cell(seed) {
                Some(theirs) => {
                    let f = &theirs.figures;
                    let tie = f.compactions == 0
                        && ours.figures.compactions == 0
                        && f.billed() == ours.figures.billed();
                    if tie {
                        page.push_str(" = |");
                    } else {
                        let _ = write!(
                            page,
                            " {:.2}{} |",
                            ratio(f.billed(), ours.figures.billed()),
                            working_set_mark(f.min_recent_rounds_verbatim)
                        );
                    }
                }
                None => page.push_str(" – |"),
            }
        }
        page.push('\n');
    }
    page.push('\n');
}

/// The mean stable-prefix ratio `default` holds at [`BAR_WINDOW`]. Its economic trigger
/// compacts where billed input is lowest, which rewrites the prefix more often than a fixed
/// trigger (0.79 against 0.80): billed input is held directly, beside it.
pub const MEAN_STABLE_PREFIX: f64 = 0.75;

/// The `default` policy's bar at [`BAR_WINDOW`] as targets: the working set kept, a stable
/// prefix, and fewer billed input tokens than every seed preset that keeps the working set.
/// Uncached tokens alone are reported in the tables, not held: the economic trigger pays
/// more of them (more frequent, smaller rewrites) to bill less.
fn default_policy_targets(c: &Compaction) -> Vec<Target> {
    let ours: Vec<_> = c
        .reports
        .iter()
        .filter(|r| r.window == BAR_WINDOW && r.policy == "default")
        .collect();
    if ours.is_empty() {
        return Vec::new();
    }
    let window = thousands(BAR_WINDOW);
    let kept = ours
        .iter()
        .map(|r| r.figures.min_recent_rounds_verbatim)
        .min()
        .unwrap_or(0);
    let prefix = ours
        .iter()
        .map(|r| r.figures.stable_prefix_ratio)
        .sum::<f64>()
        / ours.len() as f64;
    let mut billed_losses = Vec::new();
    let mut billed_reported = Vec::new();
    let mut billed_compared = 0;
    for theirs in c.reports.iter().filter(|r| {
        r.window == BAR_WINDOW
            && r.policy != "default"
            && r.policy != "none"
            && r.figures.min_recent_rounds_verbatim >= WORKING_SET_ROUNDS
    }) {
        let Some(mine) = ours.iter().find(|r| r.label == theirs.label) else {
            continue;
        };
        let (a, b) = (mine.figures.billed(), theirs.figures.billed());
        let tie = a == b && mine.figures.compactions == 0 && theirs.figures.compactions == 0;
        if tie {
            continue;
        }
        if is_scale_test(&theirs.label) {
            if a >= b {
                billed_reported.push(format!("{} on {}", theirs.policy, theirs.label));
            }
            continue;
        }
        billed_compared += 1;
        if a >= b {
            billed_losses.push(format!("{} on {}", theirs.policy, theirs.label));
        }
    }
    vec![
        Target {
            name: format!("`default` at {window}: fewest recent rounds kept verbatim, every trace"),
            target: format!("≥ {WORKING_SET_ROUNDS}"),
            measured: kept.to_string(),
            met: kept >= WORKING_SET_ROUNDS,
            why: None,
        },
        Target {
            name: format!("`default` at {window}: stable prefix ratio, mean over the traces"),
            target: format!("≥ {MEAN_STABLE_PREFIX}"),
            measured: format!("{prefix:.3}"),
            met: prefix >= MEAN_STABLE_PREFIX,
            why: None,
        },
        Target {
            name: format!(
                "`default` at {window}: fewer billed input tokens (uncached + 0.1 × cached) than each seed preset that keeps the working set, trace by trace"
            ),
            target: "every comparison (the concatenated scale test reported)".into(),
            measured: format!(
                "{} of {billed_compared}",
                billed_compared - billed_losses.len()
            ),
            met: billed_losses.is_empty(),
            why: if !billed_losses.is_empty() {
                Some(format!("more than {}", billed_losses.join(", ")))
            } else if !billed_reported.is_empty() {
                Some(format!(
                    "reported, not held: more than {} (the cost of carrying the user's words; see \"Economic trigger\")",
                    billed_reported.join(", ")
                ))
            } else {
                None
            },
        },
    ]
}

/// Per window and preset: the totals over the traces that compacted at all, and the checks
/// that must be zero everywhere.
fn compaction_summary(page: &mut String, c: &Compaction) {
    page.push_str(
        "Summed over every trace (the traces that never reach a trigger equal the baseline), \
         against the unmanaged baseline:\n\n\
         | window | policy | cumulative × base | uncached × base | mean stable prefix | compactions | fewest recent rounds kept | violations | unrecoverable | overflowed steps |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for &window in &c.windows {
        for policy in &c.policies {
            let cells: Vec<_> = c
                .reports
                .iter()
                .filter(|r| r.window == window && &r.policy == policy)
                .collect();
            if cells.is_empty() {
                continue;
            }
            let sum = |f: &dyn Fn(&crate::results::CompactionCell) -> u64| -> u64 {
                cells.iter().map(|c| f(c)).sum()
            };
            let cumulative = sum(&|c| c.figures.cumulative_input_tokens);
            let cumulative_base = sum(&|c| c.baseline.cumulative_input_tokens);
            let uncached = sum(&|c| c.figures.cumulative_uncached_input_tokens);
            let uncached_base = sum(&|c| c.baseline.cumulative_uncached_input_tokens);
            let prefix = cells
                .iter()
                .map(|c| c.figures.stable_prefix_ratio)
                .sum::<f64>()
                / cells.len() as f64;
            let kept = cells
                .iter()
                .map(|c| c.figures.min_recent_rounds_verbatim)
                .min()
                .unwrap_or(0);
            let _ = writeln!(
                page,
                "| {} | {policy} | {:.2} | {:.2} | {prefix:.3} | {} | {kept}{} | {} | {} | {} |",
                thousands(window),
                ratio(cumulative, cumulative_base),
                ratio(uncached, uncached_base),
                sum(&|c| c.figures.compactions),
                working_set_mark(kept),
                sum(&|c| c.figures.violations),
                sum(&|c| c.figures.unrecoverable_items),
                sum(&|c| c.figures.overflowed_steps),
            );
        }
    }
    page.push('\n');
}

/// The windows of the fidelity table and of its bars.
pub const FIDELITY_WINDOWS: [u64; 2] = [16_000, 32_000];

fn share(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

/// What the model still knows after compaction: the fidelity probes of every cell at 16k and
/// 32k, beside what the input costs once cached.
fn fidelity_section(page: &mut String, results: &Results) {
    page.push_str("## Context fidelity: what the model still knows after compaction\n\n");
    let Some(c) = &results.compaction else {
        missing(page, "compaction");
        return;
    };
    page.push_str(
        "Measured by `ctxkeeper replay` at every step where the managed request differs from the \
         unmanaged one (*steps*), against the unmanaged request of that step: *instructions* = \
         mean share of the user's texts of at least 20 characters whose first 240 characters \
         (whitespace-normalised) appear verbatim in the request; *paths* = mean share of the file \
         paths named in tool-call arguments that appear anywhere in it; *plan* = share of those \
         steps (with a plan so far) whose request holds the latest `TodoWrite` / `update_plan` \
         arguments; *refs* = share of the archive references shown to the model (\"archived at \
         …\") that resolve in the archive, and how many were shown; *leaked* = requests that \
         carried an internal fill marker (each is also a violation); *billed* = uncached input + \
         0.1 × input read from the cache (the cache-read price of Anthropic and of OpenAI's GPT-5 \
         family), and its ratio to the unmanaged baseline. – : nothing to measure (no step \
         differed, or no plan was made).\n\n",
    );
    for window in FIDELITY_WINDOWS {
        if !c.windows.contains(&window) {
            continue;
        }
        let _ = writeln!(
            page,
            "<details><summary>Fidelity at window {}</summary>\n\n\
             | trace | policy | steps | instructions | paths | plan | refs (shown) | leaked | billed | × base |\n\
             | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            thousands(window)
        );
        for cell in c.reports.iter().filter(|r| r.window == window) {
            let f = &cell.figures;
            let _ = writeln!(
                page,
                "| {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {:.2} |",
                cell.label,
                cell.policy,
                thousands(f.fidelity_steps),
                share(f.user_instructions_kept),
                share(f.file_paths_kept),
                share(f.plan_kept),
                share(f.refs_resolving),
                thousands(f.refs_shown),
                f.leaked_markers,
                thousands(f.billed()),
                ratio(f.billed(), cell.baseline.billed()),
            );
        }
        page.push_str("\n</details>\n\n");
    }
    fidelity_summary(page, c);
}

/// Per window and preset: the worst trace on each probe and the billed input summed.
fn fidelity_summary(page: &mut String, c: &Compaction) {
    page.push_str(
        "Worst trace per probe (among the traces where the probe measured something), leaked markers and billed input summed over every trace:\n\n\
         | window | policy | instructions | paths | plan | refs | leaked | billed × base |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for window in FIDELITY_WINDOWS {
        if !c.windows.contains(&window) {
            continue;
        }
        for policy in &c.policies {
            let cells: Vec<_> = c
                .reports
                .iter()
                .filter(|r| r.window == window && &r.policy == policy)
                .collect();
            if cells.is_empty() {
                continue;
            }
            let worst = |f: &dyn Fn(&crate::results::ReplayFigures) -> Option<f64>| {
                cells
                    .iter()
                    .filter_map(|c| f(&c.figures))
                    .min_by(f64::total_cmp)
            };
            let billed: u64 = cells.iter().map(|c| c.figures.billed()).sum();
            let base: u64 = cells.iter().map(|c| c.baseline.billed()).sum();
            let _ = writeln!(
                page,
                "| {} | {policy} | {} | {} | {} | {} | {} | {:.2} |",
                thousands(window),
                share(worst(&|f| f.user_instructions_kept)),
                share(worst(&|f| f.file_paths_kept)),
                share(worst(&|f| f.plan_kept)),
                share(worst(&|f| f.refs_resolving)),
                cells.iter().map(|c| c.figures.leaked_markers).sum::<u64>(),
                ratio(billed, base),
            );
        }
    }
    page.push('\n');
}

/// The bars of issue "context fidelity" for `default`, and the matrix-wide leak bar.
fn fidelity_targets(c: &Compaction) -> Vec<Target> {
    let mut out = Vec::new();
    let probe = |window: u64,
                 name: &str,
                 bar: f64,
                 scale_exempt: bool,
                 value: &dyn Fn(&crate::results::ReplayFigures) -> Option<f64>|
     -> Option<Target> {
        let held = |label: &str| !(scale_exempt && is_scale_test(label));
        let cells: Vec<_> = c
            .reports
            .iter()
            .filter(|r| r.window == window && r.policy == "default")
            .collect();
        if cells.is_empty() {
            return None;
        }
        let reported: Vec<String> = cells
            .iter()
            .filter(|cell| !held(&cell.label))
            .filter_map(|cell| value(&cell.figures).map(|v| format!("{} {v:.2}", cell.label)))
            .collect();
        let cells: Vec<_> = cells.into_iter().filter(|c| held(&c.label)).collect();
        let below: Vec<String> = cells
            .iter()
            .filter_map(|cell| {
                value(&cell.figures)
                    .filter(|v| *v < bar)
                    .map(|v| format!("{} ({v:.2})", cell.label))
            })
            .collect();
        let worst = cells
            .iter()
            .filter_map(|cell| value(&cell.figures))
            .min_by(f64::total_cmp);
        let why = if !below.is_empty() {
            Some(format!("below on {}", below.join(", ")))
        } else if !reported.is_empty() {
            Some(format!(
                "reported, not held: {} (more of the user's words than the window holds)",
                reported.join(", ")
            ))
        } else {
            None
        };
        Some(Target {
            name: format!("`default` at {}: {name}, every trace", thousands(window)),
            target: format!("≥ {bar:.2}"),
            measured: share(worst),
            met: below.is_empty(),
            why,
        })
    };
    out.extend(probe(32_000, "user instructions kept", 0.95, true, &|f| {
        f.user_instructions_kept
    }));
    out.extend(probe(32_000, "file paths kept", 0.90, false, &|f| {
        f.file_paths_kept
    }));
    out.extend(probe(32_000, "plan kept", 1.0, false, &|f| f.plan_kept));
    out.extend(probe(32_000, "references resolving", 1.0, false, &|f| {
        f.refs_resolving
    }));
    out.extend(probe(16_000, "user instructions kept", 0.85, true, &|f| {
        f.user_instructions_kept
    }));
    out.extend(probe(16_000, "file paths kept", 0.90, false, &|f| {
        f.file_paths_kept
    }));
    out.extend(probe(16_000, "plan kept", 1.0, false, &|f| f.plan_kept));
    let leaked: u64 = c.reports.iter().map(|r| r.figures.leaked_markers).sum();
    out.push(Target {
        name: "every preset × every trace × every window: requests with a leaked internal marker"
            .into(),
        target: "0".into(),
        measured: thousands(leaked),
        met: leaked == 0,
        why: None,
    });
    out
}

fn tokens_section(page: &mut String, results: &Results, charts: &str) {
    page.push_str("## Token counting throughput\n\n");
    let Some(t) = &results.tokens else {
        missing(page, "tokens");
        return;
    };
    let _ = writeln!(
        page,
        "`cargo bench -p ctxkeeper-core --bench token_counting`: every string of the shared \
         traces ({} strings, {:.2} MB), criterion median. Method and cross-checks: \
         [token-counting.md](token-counting.md).\n",
        t.corpus_strings
            .map(thousands)
            .unwrap_or_else(|| "?".into()),
        t.corpus_mb.unwrap_or(0.0)
    );
    page.push_str("| benchmark | throughput |\n| --- | ---: |\n");
    for row in &t.throughput {
        let _ = writeln!(page, "| `{}` | {:.1} MB/s |", row.bench, row.mb_per_s);
    }
    if !t.first_load.is_empty() {
        page.push_str("\n| tokenizer | first load |\n| --- | ---: |\n");
        for l in &t.first_load {
            let _ = writeln!(
                page,
                "| {} {} | {:.1} ms |",
                l.implementation, l.encoding, l.ms
            );
        }
    }
    let _ = writeln!(
        page,
        "\n![Token counting throughput]({charts}/token_counting.svg)\n"
    );
}

fn stores_section(page: &mut String, results: &Results, charts: &str) {
    page.push_str("## Session stores: append and load latency by session size\n\n");
    let Some(s) = &results.stores else {
        missing(page, "stores");
        return;
    };
    page.push_str(
        "`cargo bench -p ctxkeeper-store --features postgres,mysql,redis --bench stores`, \
         services on the same host (`scripts/services`). Method: [stores.md](stores.md).\n\n\
         | backend | messages | append p50 (µs) | append p99 (µs) | load p50 (µs) | load p99 (µs) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in &s.rows {
        let _ = writeln!(
            page,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            r.backend,
            thousands(r.messages),
            r.append_p50_us,
            r.append_p99_us,
            r.load_p50_us,
            r.load_p99_us
        );
    }
    for note in &s.skipped {
        let _ = writeln!(
            page,
            "\n**{note}** (its figures are missing from this run)."
        );
    }
    let _ = writeln!(page, "\n![Store latency]({charts}/stores.svg)\n");
}

fn memory_section(page: &mut String, results: &Results) {
    page.push_str("## Memory\n\n");
    let Some(m) = &results.memory else {
        missing(page, "memory");
        return;
    };
    let _ = writeln!(
        page,
        "Peak resident set size (`/usr/bin/time -v`) of `ctxkeeper replay --concat --window {}` \
         on {} (the policy replay also replays the baseline, as the command does).\n\n\
         | policy | peak RSS | wall time |\n| --- | ---: | ---: |",
        m.window, m.trace
    );
    for r in &m.replay {
        let _ = writeln!(
            page,
            "| {} | {:.1} MiB | {} |",
            r.policy,
            r.peak_rss_mib,
            r.wall_s
                .map(|s| format!("{s:.1} s"))
                .unwrap_or_else(|| "–".into())
        );
    }
    page.push_str(
        "\nPeak RSS of `ctxkeeper serve` holding 1,000 sessions is measured by the gateway \
         benchmark (below).\n\n",
    );
}

fn gateway_section(page: &mut String, results: &Results) {
    page.push_str("## Gateway overhead\n\n");
    let Some(g) = &results.gateway else {
        page.push_str(
            "_Not measured yet: `bench/gateway.sh` does not exist yet; `bench/run gateway` \
             runs it once it does._\n\n",
        );
        return;
    };
    hook_tables(page, g);
}

fn hardening_section(page: &mut String, results: &Results) {
    page.push_str(
        "## The gateway under abuse: load, event-subscription churn, large histories\n\n",
    );
    match &results.hardening {
        Some(h) => hook_tables(page, h),
        None => missing(page, "hardening"),
    }
}

/// The tables and notes of a script's results, as it wrote them.
fn hook_tables(page: &mut String, g: &Gateway) {
    for table in &g.tables {
        if !table.caption.is_empty() {
            let _ = writeln!(page, "{}\n", table.caption);
        }
        let _ = writeln!(page, "| {} |", table.columns.join(" | "));
        let _ = writeln!(page, "|{}", " --- |".repeat(table.columns.len()));
        for row in &table.rows {
            let cells: Vec<String> = row
                .iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            let _ = writeln!(page, "| {} |", cells.join(" | "));
        }
        page.push('\n');
    }
    for note in &g.notes {
        let _ = writeln!(page, "- {note}");
    }
    page.push('\n');
}

fn timings_section(page: &mut String, results: &Results) {
    let Some(t) = &results.timings else {
        return;
    };
    page.push_str(TIMINGS_HEADING);
    page.push_str("\n\n| stage | wall time | load average at start |\n| --- | ---: | ---: |\n");
    let mut total = 0;
    for s in &t.stages {
        total += s.seconds;
        let load = s
            .load_at_start
            .map(|l| format!("{l:.2}"))
            .unwrap_or_else(|| "–".into());
        let _ = writeln!(page, "| {} | {} | {load} |", s.stage, duration(s.seconds));
    }
    let _ = writeln!(page, "| **total** | **{}** | |\n", duration(total));
}

/// A microsecond figure with sensible precision, switching to ms above 10,000 µs.
pub fn micros(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else if us >= 100.0 {
        format!("{us:.0} µs")
    } else if us >= 10.0 {
        format!("{us:.1} µs")
    } else {
        format!("{us:.2} µs")
    }
}

/// A ratio as "123×".
pub fn times(ratio: f64) -> String {
    if ratio >= 10.0 {
        format!("{ratio:.0}×")
    } else {
        format!("{ratio:.1}×")
    }
}

fn ratio(value: u64, base: u64) -> f64 {
    value as f64 / base.max(1) as f64
}

fn duration(seconds: u64) -> String {
    if seconds >= 60 {
        format!("{} min {:02} s", seconds / 60, seconds % 60)
    } else {
        format!("{seconds} s")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::results::{Engine, Peer, StageTime, Timings};

    fn figures(p50: f64) -> StepFigures {
        StepFigures {
            quiet_p50_us: p50,
            quiet_p99_us: p50 * 10.0,
            ..StepFigures::default()
        }
    }

    fn with_peers(ours: f64, agentscope: f64, middleware: f64) -> Results {
        Results {
            engine: Some(Engine {
                window: 16_000,
                trace: "tau".into(),
                replay: BTreeMap::from([("default".to_string(), figures(ours))]),
                engine_step: BTreeMap::new(),
            }),
            agentscope: Some(Peer {
                peer: "agentscope".into(),
                version: "2.0.10".into(),
                core_version: None,
                window: 16_000,
                steps: 2454,
                variants: BTreeMap::from([("none".to_string(), figures(agentscope))]),
            }),
            langchain: Some(Peer {
                peer: "langchain".into(),
                version: "1.4.7".into(),
                core_version: None,
                window: 16_000,
                steps: 2454,
                variants: BTreeMap::from([(
                    "summarization-middleware".to_string(),
                    figures(middleware),
                )]),
            }),
            ..Results::default()
        }
    }

    #[test]
    fn ratio_targets_are_met_at_or_above_the_factor() {
        // 200 µs / 2 µs = 100× (met); 59 µs / 2 µs = 29.5× (missed by a hair).
        let all = targets(&with_peers(2.0, 200.0, 59.0));
        assert_eq!(all.len(), 2);
        assert!(all[0].met, "{:?}", all[0]);
        assert_eq!(all[0].measured, "100× (2.00 µs vs 200 µs)");
        assert!(!all[1].met, "{:?}", all[1]);
        assert!(all[1].why.as_deref().unwrap_or("").contains("≤ 1.97 µs"));
    }

    /// A compaction matrix of one trace at 16k and 32k: `default` and one seed preset.
    fn matrix(default_32k_instructions: f64) -> Compaction {
        let cell = |policy: &str, window: u64, instructions: f64, leaked: u64| {
            serde_json::json!({
                "label": "codex/rollout.jsonl", "policy": policy, "window": window, "steps": 456,
                "peak_input_tokens": 14_000, "cumulative_input_tokens": 3_000_000,
                "cumulative_uncached_input_tokens": 300_000, "stable_prefix_ratio": 0.9,
                "compactions": 10, "violations": leaked, "min_recent_rounds_verbatim": 2,
                "billed_input_tokens": 570_000, "fidelity_steps": 400,
                "user_instructions_kept": instructions, "file_paths_kept": 1.0,
                "plan_kept": 1.0, "refs_shown": 12, "refs_resolving": 1.0,
                "leaked_markers": leaked,
                "baseline": {
                    "peak_input_tokens": 262_000, "cumulative_input_tokens": 60_000_000,
                    "cumulative_uncached_input_tokens": 262_000, "stable_prefix_ratio": 0.99,
                    "violations": 0
                }
            })
        };
        serde_json::from_value(serde_json::json!({
            "windows": [16_000, 32_000],
            "policies": ["default", "harness"],
            "reports": [
                cell("default", 16_000, 0.9, 0),
                cell("harness", 16_000, 0.1, 3),
                cell("default", 32_000, default_32k_instructions, 0),
                cell("harness", 32_000, 0.2, 0),
            ]
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_concatenated_scale_test_is_reported_beside_the_bars_not_held_to_them() {
        let mut c = matrix(0.97);
        // On the real trace `default` bills less than `harness` (570,000).
        for cell in &mut c.reports {
            if cell.policy == "default" {
                cell.figures.billed_input_tokens = Some(500_000);
            }
        }
        let mut scale: Vec<_> = c
            .reports
            .iter()
            .filter(|r| r.policy == "default" || r.window == BAR_WINDOW)
            .cloned()
            .collect();
        for cell in &mut scale {
            cell.label = "tau-bench/airline.json (concat)".into();
            if cell.policy == "default" {
                cell.figures.user_instructions_kept = Some(0.3);
                cell.figures.billed_input_tokens = Some(900_000);
            }
        }
        c.reports.extend(scale);
        let fidelity = fidelity_targets(&c);
        let words = fidelity
            .iter()
            .find(|t| t.name == "`default` at 32,000: user instructions kept, every trace")
            .unwrap_or_else(|| panic!("{fidelity:?}"));
        assert!(words.met, "{words:?}");
        assert!(
            words
                .why
                .as_deref()
                .is_some_and(|w| w.contains("tau-bench/airline.json (concat) 0.30")),
            "{words:?}"
        );
        let billed = default_policy_targets(&c)
            .into_iter()
            .find(|t| t.name.contains("billed"))
            .unwrap_or_else(|| panic!("no billed target"));
        assert!(billed.met && billed.measured == "1 of 1", "{billed:?}");
        assert!(
            billed
                .why
                .as_deref()
                .is_some_and(|w| w.contains("harness on tau-bench/airline.json (concat)")),
            "{billed:?}"
        );
        // The same loss on a real trace is held.
        let mut real = matrix(0.97);
        for cell in &mut real.reports {
            if cell.policy == "default" {
                cell.figures.billed_input_tokens = Some(900_000);
            }
        }
        let billed = default_policy_targets(&real)
            .into_iter()
            .find(|t| t.name.contains("billed"))
            .unwrap_or_else(|| panic!("no billed target"));
        assert!(!billed.met, "{billed:?}");
    }

    #[test]
    fn fidelity_bars_name_the_traces_that_miss_them() {
        let met = fidelity_targets(&matrix(0.97));
        let leaks = met.iter().find(|t| t.name.contains("leaked")).cloned();
        assert!(leaks.is_some_and(|t| !t.met && t.measured == "3"));
        assert!(
            met.iter()
                .filter(|t| !t.name.contains("leaked"))
                .all(|t| t.met),
            "{met:?}"
        );
        let missed = fidelity_targets(&matrix(0.80));
        let instructions = missed
            .iter()
            .find(|t| t.name == "`default` at 32,000: user instructions kept, every trace");
        assert!(instructions.is_some_and(|t| !t.met
            && t.measured == "0.80"
            && t.why.as_deref() == Some("below on codex/rollout.jsonl (0.80)")));
        let page = render(
            &Results {
                compaction: Some(matrix(0.97)),
                ..Results::default()
            },
            "charts",
        );
        assert!(page.contains("## Context fidelity"), "{page}");
        assert!(page.contains("| codex/rollout.jsonl | default | 400 | 0.97 | 1.00 | 1.00 | 1.00 (12) | 0 | 570,000 | 0.09 |"), "{page}");
    }

    #[test]
    fn a_missed_target_is_said_plainly_on_the_page() {
        let page = render(&with_peers(10.0, 200.0, 100.0), "charts");
        assert!(page.contains("**MISSED**"), "{page}");
        assert!(page.contains("0 of 2 targets met; **2 missed**"), "{page}");
        assert!(page.contains("![Per-step overhead, log scale](charts/step_overhead.svg)"));
    }

    #[test]
    fn overhead_rows_put_ctxkeeper_first_and_divide_by_it() {
        let results = with_peers(2.0, 400.0, 150.0);
        let rows = overhead_rows(&results);
        let systems: Vec<&str> = rows.iter().map(|r| r.system.as_str()).collect();
        assert_eq!(
            systems,
            [
                "ctxkeeper `default`",
                "AgentScope 2.0.10 `compress_context`",
                "LangChain 1.4.7 `SummarizationMiddleware`"
            ]
        );
        let page = render(&results, "charts");
        assert!(page.contains("| 200× |"), "{page}");
        assert!(page.contains("| 75× |"), "{page}");
    }

    #[test]
    fn stages_started_on_a_busy_machine_are_flagged() {
        use crate::results::{Machine, StageTime, Timings};
        let stage = |name: &str, load: f64| StageTime {
            stage: name.into(),
            seconds: 10,
            load_at_start: Some(load),
        };
        let mut results = Results {
            machine: Some(Machine {
                cores: Some(2),
                ..Machine::default()
            }),
            timings: Some(Timings {
                quick: false,
                stages: vec![stage("engine", 0.4), stage("peers", 2.0)],
            }),
            ..Results::default()
        };
        assert_eq!(busy_stages(&results), None);
        if let Some(t) = results.timings.as_mut() {
            t.stages.push(stage("tokens", 7.5));
        }
        assert_eq!(busy_stages(&results).as_deref(), Some("`tokens`"));
        let page = render(&results, "charts");
        assert!(
            page.contains("**The machine was busy during this run**"),
            "{page}"
        );
        assert!(page.contains("| tokens | 10 s | 7.50 |"), "{page}");
    }

    #[test]
    fn numbers_are_formatted_for_reading() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(micros(1.234), "1.23 µs");
        assert_eq!(micros(463.2), "463 µs");
        assert_eq!(micros(77_626.0), "77.6 ms");
        assert_eq!(times(349.6), "350×");
        assert_eq!(times(2.54), "2.5×");
        assert_eq!(duration(75), "1 min 15 s");
    }

    fn timed() -> Results {
        Results {
            timings: Some(Timings {
                quick: false,
                stages: vec![StageTime {
                    stage: "report".into(),
                    seconds: 3,
                    load_at_start: Some(0.5),
                }],
            }),
            ..Results::default()
        }
    }

    #[test]
    fn hand_written_sections_survive_a_rewrite() {
        let results = timed();
        let generated = render(&results, "charts");
        let headings = generated_headings(&generated);
        let console = "## Console\n\n| page | p99 ms |\n| --- | ---: |\n| search | 3.1 |\n\n\
                       ### Details\n\n```text\n## not a heading\n```";
        let page = render_keeping(&results, "charts", console);
        // Between the measured sections and the run's timings, and kept on every rewrite.
        let at = |text: &str| page.find(text).unwrap_or(usize::MAX);
        assert!(at("## Targets") < at("## Console"), "{page}");
        assert!(at("## Console") < at(TIMINGS_HEADING), "{page}");
        assert_eq!(hand_written(&page, &headings), console);
        assert_eq!(
            render_keeping(&results, "charts", &hand_written(&page, &headings)),
            page
        );
        // Nothing hand-written: the markers alone, and nothing comes back.
        assert_eq!(hand_written(&generated, &headings), "");

        // A page written before the markers: the sections the report does not write are
        // kept in their order (a heading inside a code block is text), its own are not.
        let generated_part = generated
            .split_once(KEPT_BEGIN)
            .map_or(generated.as_str(), |(before, _)| before);
        let old = format!(
            "{generated_part}{TIMINGS_HEADING}\n\n| stage | wall time |\n\n{console}\n## Seed conformance\n\n39 of 39 rows match.\n"
        );
        let kept = hand_written(&old, &headings);
        assert_eq!(
            kept,
            format!("{console}\n\n## Seed conformance\n\n39 of 39 rows match.")
        );
        let rewritten = render_keeping(&results, "charts", &kept);
        assert_eq!(rewritten.matches(TIMINGS_HEADING).count(), 1, "{rewritten}");
        assert_eq!(rewritten.matches("## Targets").count(), 1, "{rewritten}");
        assert!(
            rewritten.ends_with("| **total** | **3 s** | |\n\n"),
            "{rewritten}"
        );
    }
}
