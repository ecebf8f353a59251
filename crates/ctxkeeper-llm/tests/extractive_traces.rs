//! The extractive summarizer on the shared real traces (`../shared/data/traces`, or
//! `$CTXKEEPER_TRACES`; a missing directory is reported as SKIP, never as a pass).
//!
//! Each trace is compacted the way a long session is: the messages are summarized in slices,
//! each summary incremental over the previous one. Checked at every step: the same input gives
//! the same summary, the summary stays within its budget, it is labelled as extractive, and
//! the facts of the first slice (the original task) survive to the end. The whole replay must
//! also be cheap, since the extractive summarizer runs inside replays of thousands of steps.

use std::time::{Duration, Instant};

use ctxkeeper_core::import::{detect, import};
use ctxkeeper_core::model::Message;
use ctxkeeper_core::summary::{Summary, SummaryRequest, SummarySchema};
use ctxkeeper_llm::{EXTRACTIVE_LABEL, ExtractiveSummarizer};

#[path = "../../ctxkeeper-core/tests/support/traces.rs"]
mod traces;

use traces::{trace_files, traces_dir};

/// Every trace file as one concatenated session.
fn sessions() -> Vec<(String, Vec<Message>)> {
    let Some(dir) = traces_dir() else {
        return Vec::new();
    };
    let files = trace_files(&dir);
    let mut out = Vec::new();
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&path).expect("readable trace");
        let Some(format) = detect(&text, &name) else {
            continue;
        };
        let Ok(trace) = import(&text, format) else {
            continue;
        };
        out.push((name, trace.concat().messages));
    }
    out
}

fn request(
    messages: &[Message],
    previous: Option<Summary>,
    max_output_tokens: u32,
) -> SummaryRequest {
    SummaryRequest {
        previous,
        ..SummaryRequest::new(messages.to_vec(), max_output_tokens)
    }
}

fn size(summary: &Summary) -> usize {
    SummarySchema::default()
        .fields
        .iter()
        .map(|f| summary.get(&f.name).len())
        .sum()
}

#[test]
fn incremental_summaries_of_real_traces_are_deterministic_bounded_and_keep_the_task() {
    let sessions = sessions();
    if sessions.is_empty() {
        return;
    }
    let summarizer = ExtractiveSummarizer::new();
    let max_output_tokens = 800;
    let bound = max_output_tokens as usize * 3 + EXTRACTIVE_LABEL.len() + 64;
    for (name, messages) in &sessions {
        let mut previous: Option<Summary> = None;
        let mut first_task: Option<String> = None;
        for slice in messages.chunks(40) {
            let req = request(slice, previous.clone(), max_output_tokens);
            let summary = summarizer.summarize_now(&req);
            assert_eq!(
                summary,
                summarizer.summarize_now(&req),
                "{name}: deterministic"
            );
            assert_eq!(summary.produced_by, "extractive");
            assert!(!summary.degraded);
            assert!(
                summary.get("task_overview").starts_with(EXTRACTIVE_LABEL),
                "{name}: labelled"
            );
            assert!(
                size(&summary) <= bound,
                "{name}: {} > {bound}",
                size(&summary)
            );
            if first_task.is_none() {
                first_task = summary
                    .get("task_overview")
                    .lines()
                    .nth(1)
                    .map(str::to_string);
            }
            previous = Some(summary);
        }
        if let (Some(task), Some(last)) = (first_task, previous) {
            // Long lines may be cut shorter later, never dropped: their beginning survives.
            let start: String = task.trim_start_matches("- ").chars().take(60).collect();
            assert!(
                last.get("task_overview").contains(&start),
                "{name}: the first task survives: {start:?}"
            );
        }
    }
}

#[test]
fn the_extractive_summarizer_is_cheap_on_the_largest_session() {
    let sessions = sessions();
    let Some((name, messages)) = sessions.iter().max_by_key(|(_, m)| m.len()) else {
        return;
    };
    let summarizer = ExtractiveSummarizer::new();
    // One summary of the whole session, and a replay that compacts every 50 messages.
    let started = Instant::now();
    let whole = summarizer.summarize_now(&request(messages, None, 2_000));
    let once = started.elapsed();
    let started = Instant::now();
    let mut previous = None;
    for slice in messages.chunks(50) {
        previous = Some(summarizer.summarize_now(&request(slice, previous, 2_000)));
    }
    let replay = started.elapsed();
    eprintln!(
        "{name}: {} messages, one summary {once:?}, {} incremental summaries {replay:?}",
        messages.len(),
        messages.len().div_ceil(50)
    );
    assert!(!whole.get("current_state").is_empty());
    // Generous bounds for an unoptimised build on a loaded 2-core machine.
    assert!(once < Duration::from_secs(2), "{once:?}");
    assert!(replay < Duration::from_secs(4), "{replay:?}");
}
