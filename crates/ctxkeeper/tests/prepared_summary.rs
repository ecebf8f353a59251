//! Summaries prepared ahead of the trigger: the compaction that crosses it applies the
//! prepared summary to exactly the messages it read, without a summarizer call, and keeps
//! what arrived since verbatim; a summary prepared for a context compacted meanwhile is
//! discarded; a failed preparation leaves the compaction to summarize as usual.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use ctxkeeper::core::engine::{Event, presets};
use ctxkeeper::core::model::Message;
use ctxkeeper::core::summary::{Summary, SummaryRequest};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::llm::{ExtractiveSummarizer, LlmError, Summarizer};
use ctxkeeper::store::LocalWorkspace;
use ctxkeeper::{ContextManager, Settings};
use tokio::sync::broadcast::Receiver;

/// Extractive summaries, counted; the first `fail_first` calls fail.
#[derive(Debug, Default)]
struct Counting {
    calls: AtomicUsize,
    fail_first: usize,
}

#[async_trait]
impl Summarizer for Counting {
    async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if call < self.fail_first {
            return Err(LlmError::Status {
                status: 503,
                body: "overloaded".into(),
                retry_after: None,
            });
        }
        ExtractiveSummarizer::default().summarize(request).await
    }

    fn name(&self) -> &str {
        "counting"
    }
}

fn manager(summarizer: Arc<Counting>, dir: &tempfile::TempDir) -> ContextManager {
    let policy = presets::preset("default").expect("preset");
    manager_with(summarizer, dir, policy, 0)
}

/// A manager at a 4,000-token window under `policy`, with `fixed_tokens` of tool schemas.
fn manager_with(
    summarizer: Arc<Counting>,
    dir: &tempfile::TempDir,
    policy: ctxkeeper::core::engine::PolicyConfig,
    fixed_tokens: u64,
) -> ContextManager {
    let settings = Settings {
        policy,
        model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
        window: 4_000,
        fixed_tokens,
    };
    let archive = Arc::new(LocalWorkspace::new(dir.path()).expect("workspace"));
    ContextManager::new(settings, "s1", archive, summarizer)
}

/// A default manager over a counting summarizer, with its archive in a temporary directory
/// that lives as long as the returned one, and its events.
fn counted_manager() -> (
    tempfile::TempDir,
    Arc<Counting>,
    ContextManager,
    Receiver<Event>,
) {
    let dir = tempfile::tempdir().expect("dir");
    let summarizer = Arc::new(Counting::default());
    let context = manager(summarizer.clone(), &dir);
    let events = context.subscribe();
    (dir, summarizer, context, events)
}

/// One exchange of plain text (nothing for masking to clear: only a summary shrinks it).
async fn exchange(context: &mut ContextManager, i: usize) {
    ingest_exchange(
        context,
        format!(
            "Request {i}: look at module_{i}.rs and report. {}",
            "Some words about it. ".repeat(12)
        ),
        format!(
            "Report {i}: module_{i}.rs is fine. {}",
            "Details of the report. ".repeat(12)
        ),
    )
    .await;
}

/// The user's `request` and the assistant's `report`.
async fn ingest_exchange(context: &mut ContextManager, request: String, report: String) {
    for message in [Message::user(request), Message::assistant(report)] {
        context.ingest(message).await.expect("ingest");
    }
}

fn prepared_outcomes(events: &mut Receiver<Event>) -> Vec<String> {
    let mut outcomes = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let Event::SummaryPrepared { outcome, .. } = event {
            outcomes.push(outcome);
        }
    }
    outcomes
}

#[tokio::test]
async fn the_crossing_compaction_uses_the_prepared_summary_and_keeps_later_messages() {
    let (_dir, summarizer, mut context, mut events) = counted_manager();
    let mut prepared_span = None;
    let mut calls_after_preparation = 0;
    for i in 0..60 {
        exchange(&mut context, i).await;
        if prepared_span.is_none()
            && let Some(preparation) = context.summary_to_prepare(0.6)
        {
            assert!(context.preparing_summary());
            let prepared = preparation.run().await;
            assert!(prepared.is_ready());
            prepared_span = Some(prepared.span());
            context.accept_prepared(prepared);
            calls_after_preparation = summarizer.calls.load(Ordering::SeqCst);
        }
        let before = context.state().compactions;
        context.prepare().await.expect("prepare");
        if context.state().compactions > before {
            break;
        }
    }
    let span = prepared_span.expect("the context passed the soft threshold");
    assert_eq!(context.state().compactions, 1, "the trigger fired");
    assert_eq!(
        summarizer.calls.load(Ordering::SeqCst),
        calls_after_preparation,
        "the crossing compaction called no summarizer"
    );
    assert_eq!(prepared_outcomes(&mut events), ["ready", "used"]);
    // Nothing the prepared summary did not read was summarized: every message logged after
    // its span is still in the context, verbatim.
    let logged_after: Vec<u64> = context
        .state()
        .entries
        .iter()
        .filter_map(|e| e.meta.log_index)
        .filter(|&i| i > span.last)
        .collect();
    let expected: Vec<u64> = (span.last + 1..context.state().appended).collect();
    assert_eq!(logged_after, expected);
    assert!(
        context
            .state()
            .entries
            .iter()
            .filter_map(|e| e.meta.log_index)
            .all(|i| i > span.last || i < span.first),
        "the summarized span left the context"
    );
    assert!(context.state().summary.is_some());
}

/// A step can jump from below any fixed share of the trigger to past the level it fires at:
/// the preparation starts on the step before, from the growth per step, not from a share the
/// context never reaches before it compacts. Run in a gateway's order: the step, then the
/// preparation (as its answer arrives), then the next step.
#[tokio::test]
async fn the_step_before_a_jump_past_the_trigger_prepares_the_summary() {
    let (_dir, summarizer, mut context, mut events) = counted_manager();
    let (mut prepared_at, mut compacted_at) = (None, None);
    for i in 0..60 {
        exchange(&mut context, i).await;
        let before = context.state().compactions;
        context.prepare().await.expect("prepare");
        if context.state().compactions > before {
            compacted_at = Some(i);
            break;
        }
        // A share of 0.99 is never reached: the trigger fires at 92 % of its level.
        if let Some(preparation) = context.summary_to_prepare(0.99) {
            prepared_at = Some(i);
            context.accept_prepared(preparation.run().await);
        }
    }
    let compacted_at = compacted_at.expect("the trigger fired");
    assert_eq!(
        prepared_at,
        Some(compacted_at - 1),
        "prepared on the step before the crossing"
    );
    assert_eq!(prepared_outcomes(&mut events), ["ready", "used"]);
    assert_eq!(
        summarizer.calls.load(Ordering::SeqCst),
        1,
        "the crossing compaction applied the prepared summary"
    );
}

#[tokio::test]
async fn a_summary_prepared_before_another_compaction_is_discarded() {
    let (_dir, summarizer, mut context, mut events) = counted_manager();
    let mut preparation = None;
    for i in 0..60 {
        exchange(&mut context, i).await;
        preparation = context.summary_to_prepare(0.6);
        if preparation.is_some() {
            break;
        }
    }
    let preparation = preparation.expect("the context passed the soft threshold");
    // Asked for once per context: a second call while it runs hands out nothing.
    assert!(context.summary_to_prepare(0.6).is_none());
    assert!(context.compact(None, None).await.expect("compact"));
    context.accept_prepared(preparation.run().await);
    assert_eq!(prepared_outcomes(&mut events), ["discarded"]);
    // The next compaction summarizes for itself.
    for i in 100..106 {
        exchange(&mut context, i).await;
    }
    let calls = summarizer.calls.load(Ordering::SeqCst);
    assert!(context.compact(None, None).await.expect("compact"));
    assert!(summarizer.calls.load(Ordering::SeqCst) > calls);
}

#[tokio::test]
async fn a_failed_preparation_leaves_the_compaction_to_summarize() {
    let dir = tempfile::tempdir().expect("dir");
    let summarizer = Arc::new(Counting {
        fail_first: 1,
        ..Counting::default()
    });
    let mut context = manager(summarizer.clone(), &dir);
    let mut events = context.subscribe();
    let mut prepared = false;
    for i in 0..60 {
        exchange(&mut context, i).await;
        if !prepared && let Some(preparation) = context.summary_to_prepare(0.6) {
            context.accept_prepared(preparation.run().await);
            prepared = true;
        }
        let before = context.state().compactions;
        context.prepare().await.expect("prepare");
        if context.state().compactions > before {
            break;
        }
    }
    assert!(prepared);
    assert_eq!(context.state().compactions, 1);
    assert_eq!(prepared_outcomes(&mut events), ["failed"]);
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 2);
    let summary = context.state().summary.as_ref().expect("summary");
    assert!(
        !summary.degraded,
        "the compaction's own summary call succeeded"
    );
}

/// A window the fixed prompt (instructions, tool schemas) nearly fills compacts on almost
/// every step: a model summary each time would be one more upstream call per agent call. Once
/// compactions leave room for fewer than `TIGHT_WINDOW_STEPS` steps, they summarize
/// extractively and say so, and nothing is prepared ahead; a roomy window keeps its model.
#[tokio::test]
async fn a_tight_window_does_not_pay_a_model_summary_on_every_step() {
    for (fixed_tokens, tight) in [(2_400, true), (0, false)] {
        let dir = tempfile::tempdir().expect("dir");
        let summarizer = Arc::new(Counting::default());
        let policy = presets::preset("default")
            .expect("preset")
            .with_overrides("stages = [{ kind = \"summarize\" }]")
            .expect("overrides");
        let mut context = manager_with(summarizer.clone(), &dir, policy, fixed_tokens);
        let mut events = context.subscribe();
        let (mut compactions, mut downgraded, mut prepared) = (0, 0, 0);
        for i in 0..40 {
            ingest_exchange(
                &mut context,
                format!("Request {i}: {}", "Words about it. ".repeat(45)),
                format!("Report {i}: {}", "Details of it. ".repeat(45)),
            )
            .await;
            if context.summary_to_prepare(0.5).is_some() {
                prepared += 1;
            }
            context.prepare().await.expect("prepare");
            while let Ok(event) = events.try_recv() {
                match event {
                    Event::ContextCompactionEnd { .. } => compactions += 1,
                    Event::SummaryDowngraded { .. } => downgraded += 1,
                    _ => {}
                }
            }
        }
        let calls = summarizer.calls.load(Ordering::SeqCst);
        let seen = format!(
            "fixed {fixed_tokens}: {compactions} compactions, {calls} model summaries, {downgraded} downgraded, {prepared} prepared"
        );
        if tight {
            assert!(compactions >= 15, "{seen}");
            assert!(downgraded > 0, "{seen}");
            assert!(calls * 4 <= compactions, "{seen}");
            assert!(
                prepared <= 1,
                "nothing prepared once the window is known tight: {seen}"
            );
        } else {
            assert!(compactions >= 3, "{seen}");
            assert_eq!(downgraded, 0, "{seen}");
            assert!(calls > 0, "{seen}");
        }
        println!("{seen}");
    }
}
