//! Summaries prepared ahead of the trigger, so the request that crosses it does not wait for a
//! summarizer.
//!
//! Once the context passes a soft threshold below the trigger (or the next step may fire it),
//! the host asks
//! [`ContextManager::summary_to_prepare`](crate::ContextManager::summary_to_prepare) for the
//! summary the next compaction would need, runs it off the session's lock
//! ([`SummaryPreparation::run`]) and hands the result back
//! ([`ContextManager::accept_prepared`](crate::ContextManager::accept_prepared)). When the
//! trigger fires, the compaction summarizes exactly the messages the prepared summary read
//! (their log positions are its [`LogSpan`]) and keeps everything appended since verbatim; a
//! summary prepared for a context that was compacted meanwhile is discarded, never applied
//! over messages it did not read.
//!
//! ```
//! # use std::sync::Arc;
//! # use ctxkeeper::{ContextManager, Settings};
//! # use ctxkeeper::core::engine::presets;
//! # use ctxkeeper::core::model::Message;
//! # use ctxkeeper::core::tokens::{Profiles, TokenModel};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! # let dir = tempfile::tempdir().unwrap();
//! # let settings = Settings {
//! #     policy: presets::preset("default").unwrap(),
//! #     model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
//! #     window: 4_000,
//! #     fixed_tokens: 0,
//! # };
//! # let offloader = Arc::new(ctxkeeper::store::LocalWorkspace::new(dir.path()).unwrap());
//! # let summarizer = Arc::new(ctxkeeper::llm::ExtractiveSummarizer::default());
//! let mut context = ContextManager::new(settings, "s", offloader, summarizer);
//! for i in 0..40 {
//!     context.ingest(Message::user(format!("step {i}: {}", "words ".repeat(40)))).await.unwrap();
//!     context.ingest(Message::assistant(format!("done {i}"))).await.unwrap();
//!     if let Some(preparation) = context.summary_to_prepare(0.7) {
//!         // A host runs this on a task of its own.
//!         let prepared = preparation.run().await;
//!         context.accept_prepared(prepared);
//!     }
//!     context.prepare().await.unwrap();
//! }
//! # });
//! ```

use std::sync::Arc;
use std::time::Instant;

use ctxkeeper_core::engine::{CompactionReason, Event, LogSpan, PlanRequest};
use ctxkeeper_core::summary::{Summary, SummaryRequest};
use ctxkeeper_llm::Summarizer;

use crate::ContextManager;

/// What a preparation's request says in place of archive references: the dry run that built
/// it archived nothing, so no reference exists yet (and no internal marker may leave).
const NOT_YET_ARCHIVED: &str = "the archive (written when this context is compacted)";

/// A summary to write ahead of the trigger: the request the next compaction would make, for
/// the context as it is now.
pub struct SummaryPreparation {
    pub(crate) compactions: u32,
    pub(crate) span: LogSpan,
    pub(crate) request: SummaryRequest,
    pub(crate) summarizer: Arc<dyn Summarizer>,
}

impl std::fmt::Debug for SummaryPreparation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummaryPreparation")
            .field("compactions", &self.compactions)
            .field("span", &self.span)
            .field("summarizer", &self.summarizer.name())
            .finish()
    }
}

/// The outcome of a [`SummaryPreparation`], for
/// [`ContextManager::accept_prepared`](crate::ContextManager::accept_prepared).
#[derive(Debug, Clone)]
pub struct PreparedSummary {
    pub(crate) compactions: u32,
    pub(crate) span: LogSpan,
    /// The summary, or why the summarizer failed.
    pub(crate) summary: Result<Summary, String>,
}

impl PreparedSummary {
    /// The log positions of the messages the summary read.
    pub fn span(&self) -> LogSpan {
        self.span
    }

    /// Whether the summarizer answered.
    pub fn is_ready(&self) -> bool {
        self.summary.is_ok()
    }
}

/// What a manager prepared or is preparing, moved to a rebuilt manager (see
/// [`ContextManager::take_preparations`](crate::ContextManager::take_preparations)).
#[derive(Debug, Default)]
pub struct Preparations {
    pub(crate) prepared: Option<PreparedSummary>,
    pub(crate) preparing: Option<u32>,
}

impl SummaryPreparation {
    pub(crate) fn new(
        compactions: u32,
        span: LogSpan,
        mut request: SummaryRequest,
        archive_items: usize,
        summarizer: Arc<dyn Summarizer>,
    ) -> SummaryPreparation {
        let refs = vec![NOT_YET_ARCHIVED.to_string(); archive_items];
        for message in &mut request.messages {
            ctxkeeper_core::engine::fill_references(message, &refs, &[]);
        }
        SummaryPreparation {
            compactions,
            span,
            request,
            summarizer,
        }
    }

    /// The log positions of the messages it summarizes.
    pub fn span(&self) -> LogSpan {
        self.span
    }

    /// Writes the summary (the summarizer's own timeout and retries apply).
    pub async fn run(self) -> PreparedSummary {
        let summary = self
            .summarizer
            .summarize(&self.request)
            .await
            .map_err(|err| err.to_string());
        PreparedSummary {
            compactions: self.compactions,
            span: self.span,
            summary,
        }
    }
}

/// The event reporting a prepared summary's `outcome`.
pub(crate) fn prepared_event(span: LogSpan, outcome: &str, cause: Option<String>) -> Event {
    Event::SummaryPrepared {
        first: span.first,
        last: span.last,
        messages: span.count,
        outcome: outcome.to_string(),
        cause,
    }
}

/// The manager's side: what to prepare, and taking a prepared summary back.
impl ContextManager {
    /// The summary the next compaction would ask for, to write ahead of time: `Some` once the
    /// request passes `soft_ratio` of the active token trigger, or earlier when the next step
    /// may fire it (the last step's size plus the growth per step reaches the level the
    /// trigger fires at: a step can jump past the whole margin), when the compaction would
    /// summarize (one request, over messages of the log) and nothing is prepared or being
    /// prepared for this context yet. Run it off the session's lock and hand the result to
    /// [`ContextManager::accept_prepared`]. It summarizes with the manager's own summarizer.
    pub fn summary_to_prepare(&mut self, soft_ratio: f64) -> Option<SummaryPreparation> {
        let summarizer = Arc::clone(&self.summarizer);
        self.summary_to_prepare_with(soft_ratio, summarizer)
    }

    /// [`Self::summary_to_prepare`], to be written by `summarizer`: the preparation holds it
    /// until it has run, the manager never does.
    pub fn summary_to_prepare_with(
        &mut self,
        soft_ratio: f64,
        summarizer: Arc<dyn Summarizer>,
    ) -> Option<SummaryPreparation> {
        let compactions = self.state.compactions;
        if self.preparing == Some(compactions)
            || self
                .prepared
                .as_ref()
                .is_some_and(|p| p.compactions == compactions)
        {
            return None;
        }
        let budget = self.budget();
        let (trigger, _) = self.engine.active_trigger(&self.state, &budget)?;
        let tokens = self.engine.approx_request_tokens(&mut self.state, &budget);
        let near = tokens as f64 >= trigger as f64 * soft_ratio
            || self
                .engine
                .next_step_may_fire(&mut self.state, &budget, trigger);
        if !near || tokens >= trigger {
            return None;
        }
        // A tight window summarizes extractively: nothing to prepare.
        if self.tight_window(summarizer.as_ref()).is_some() {
            return None;
        }
        // The dry run works on a copy: planning teaches the state the growth per step, which
        // only the step's own plan may do.
        let mut draft = self.state.clone();
        let request = PlanRequest {
            force: Some(CompactionReason::Tokens),
            ..PlanRequest::default()
        };
        let started = Instant::now();
        let plan = self.engine.plan(&mut draft, &budget, &request);
        self.clock.engine += started.elapsed();
        let mut plan = plan?;
        if plan.summaries.len() != 1 {
            return None;
        }
        let span = plan.summary_spans.first().copied().flatten()?;
        let request = plan.summaries.pop()?;
        self.preparing = Some(compactions);
        Some(SummaryPreparation::new(
            compactions,
            span,
            request,
            plan.archive.len(),
            summarizer,
        ))
    }

    /// Keeps a prepared summary for the next compaction, unless the context was compacted
    /// since it was asked for (then it is discarded). Emits `summary_prepared`.
    pub fn accept_prepared(&mut self, prepared: PreparedSummary) {
        if self.preparing == Some(prepared.compactions) {
            self.preparing = None;
        }
        let (outcome, cause) = match &prepared.summary {
            Err(cause) => ("failed", Some(cause.clone())),
            Ok(_) if !self.still_applies(&prepared) => ("discarded", None),
            Ok(_) => ("ready", None),
        };
        self.emit(vec![prepared_event(prepared.span, outcome, cause)]);
        if outcome == "ready" {
            self.prepared = Some(prepared);
        }
    }

    /// Whether `prepared` was written for the context as it is: no compaction since, and the
    /// newest message it read still in place.
    pub(crate) fn still_applies(&self, prepared: &PreparedSummary) -> bool {
        prepared.compactions == self.state.compactions
            && self
                .state
                .entries
                .iter()
                .any(|e| e.meta.log_index == Some(prepared.span.last))
    }

    /// Moves out what this manager prepared or is preparing, for a host that rebuilds the
    /// manager around the same context (new settings, a replaced newest message): hand it to
    /// the new one with [`ContextManager::restore_preparations`].
    pub fn take_preparations(&mut self) -> Preparations {
        Preparations {
            prepared: self.prepared.take(),
            preparing: self.preparing.take(),
        }
    }

    /// Takes over what [`ContextManager::take_preparations`] moved out, keeping a prepared
    /// summary only while it still applies to this context.
    pub fn restore_preparations(&mut self, preparations: Preparations) {
        self.preparing = preparations.preparing;
        self.prepared = preparations
            .prepared
            .filter(|prepared| self.still_applies(prepared));
    }

    /// Whether a summary is being prepared for the context as it is.
    pub fn preparing_summary(&self) -> bool {
        self.preparing == Some(self.state.compactions)
    }

    /// The span of a ready prepared summary for the context as it is.
    pub(crate) fn prepared_span(&self) -> Option<ctxkeeper_core::engine::LogSpan> {
        self.prepared
            .as_ref()
            .filter(|p| p.compactions == self.state.compactions && p.summary.is_ok())
            .map(|p| p.span)
    }

    /// The prepared summary, when it was written for exactly the messages of `span`.
    pub(crate) fn take_prepared(
        &mut self,
        span: Option<ctxkeeper_core::engine::LogSpan>,
    ) -> Option<ctxkeeper_core::summary::Summary> {
        let span = span?;
        if self.prepared_span() != Some(span) {
            return None;
        }
        let prepared = self.prepared.take()?;
        self.emit(vec![prepared_event(span, "used", None)]);
        prepared.summary.ok()
    }
}
