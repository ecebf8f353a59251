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

use crate::results::{Engine, Gateway, Peer, Results, StepFigures, Target};

mod compaction;

pub use compaction::is_scale_test;
use compaction::{compaction_section, default_policy_targets, fidelity_section, fidelity_targets};

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
        let function = "compress_context";
        peer_rows(
            &mut rows,
            "AgentScope",
            peer,
            &[
                (
                    "none",
                    function,
                    "no tool schemas (same input as ctxkeeper)",
                ),
                (
                    "inferred",
                    function,
                    "14 declared airline tools (as an agent runs it)",
                ),
            ],
        );
    }
    if let Some(peer) = &results.langchain {
        peer_rows(
            &mut rows,
            "LangChain",
            peer,
            &[
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
            ],
        );
    }
    rows
}

/// A row per measured variant of a peer: (its key in the results, the function it ran, its
/// setup).
fn peer_rows(
    rows: &mut Vec<OverheadRow>,
    label: &str,
    peer: &Peer,
    variants: &[(&str, &str, &str)],
) {
    for (variant, function, setup) in variants {
        if let Some(figures) = peer.variants.get(*variant) {
            rows.push(OverheadRow {
                system: format!("{label} {} `{function}`", peer.version),
                setup: (*setup).into(),
                figures: figures.clone(),
            });
        }
    }
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

/// Opens a section with its `heading`: the part of the results it reports, else a note naming
/// the `bench/run` stage that measures it.
fn section<'a, T>(
    page: &mut String,
    heading: &str,
    part: &'a Option<T>,
    stage: &str,
) -> Option<&'a T> {
    let _ = writeln!(page, "{heading}\n");
    if part.is_none() {
        missing(page, stage);
    }
    part.as_ref()
}

fn machine_section(page: &mut String, results: &Results) {
    let Some(m) = section(page, "## Machine and versions", &results.machine, "report") else {
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

fn tokens_section(page: &mut String, results: &Results, charts: &str) {
    let Some(t) = section(
        page,
        "## Token counting throughput",
        &results.tokens,
        "tokens",
    ) else {
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
    let Some(s) = section(
        page,
        "## Session stores: append and load latency by session size",
        &results.stores,
        "stores",
    ) else {
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
    let Some(m) = section(page, "## Memory", &results.memory, "memory") else {
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
mod tests;
