//! Summaries prepared ahead of the trigger, so the request that crosses it does not wait for a
//! summarizer.
//!
//! Once the context passes a soft threshold below the trigger, the host asks
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

use ctxkeeper_core::engine::{Event, LogSpan};
use ctxkeeper_core::summary::{Summary, SummaryRequest};
use ctxkeeper_llm::Summarizer;

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
