use std::collections::BTreeMap;

use super::compaction::BAR_WINDOW;
use super::*;
use crate::results::{Compaction, Engine, Peer, StageTime, Timings};

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
    bill_default(&mut c, 500_000);
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
    assert_why(words, "tau-bench/airline.json (concat) 0.30");
    let billed = billed_target(&c);
    assert!(billed.met && billed.measured == "1 of 1", "{billed:?}");
    assert_why(&billed, "harness on tau-bench/airline.json (concat)");
    // The same loss on a real trace is held.
    let mut real = matrix(0.97);
    bill_default(&mut real, 900_000);
    let billed = billed_target(&real);
    assert!(!billed.met, "{billed:?}");
}

/// Sets the input `default` is billed on every trace and window of `c`.
fn bill_default(c: &mut Compaction, tokens: u64) {
    for cell in &mut c.reports {
        if cell.policy == "default" {
            cell.figures.billed_input_tokens = Some(tokens);
        }
    }
}

/// The bar on the input `default` is billed.
fn billed_target(c: &Compaction) -> Target {
    default_policy_targets(c)
        .into_iter()
        .find(|t| t.name.contains("billed"))
        .unwrap_or_else(|| panic!("no billed target"))
}

/// Asserts that `target` says why with `text`.
fn assert_why(target: &Target, text: &str) {
    assert!(
        target.why.as_deref().is_some_and(|w| w.contains(text)),
        "{target:?}"
    );
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
