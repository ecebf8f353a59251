//! Typed events for everything the engine does, for hosts to log, meter or stream.

use serde::{Deserialize, Serialize};

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionReason {
    /// The request crossed the ratio or token trigger.
    Tokens,
    /// Too many messages.
    Messages,
    /// Too many turns.
    Turns,
    /// Reactive micro tier (reported usage crossed the micro threshold).
    ReactiveMicro,
    /// Reactive full tier.
    ReactiveFull,
    /// The provider said the context is too long.
    Overflow,
    /// The host or the agent asked.
    Manual,
    /// A stage that runs before every call (tool-result capping) had work to do.
    Maintenance,
}

impl CompactionReason {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionReason::Tokens => "tokens",
            CompactionReason::Messages => "messages",
            CompactionReason::Turns => "turns",
            CompactionReason::ReactiveMicro => "reactive_micro",
            CompactionReason::ReactiveFull => "reactive_full",
            CompactionReason::Overflow => "overflow",
            CompactionReason::Manual => "manual",
            CompactionReason::Maintenance => "maintenance",
        }
    }
}

/// The arithmetic of the economic trigger (see [`crate::engine::CostRule`]), in tokens and
/// uncached-token equivalents.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Economics {
    /// Mean growth of the request per step.
    pub growth_per_step: u64,
    /// The stable prefix a compaction does not rewrite (tool schemas, system prompt).
    pub stable_prefix: u64,
    /// Expected request size after a compaction (the last one's, else the policy's target).
    pub expected_after: u64,
    /// What one compaction costs: the rewritten context at the cache-write price plus the
    /// summary call.
    pub rewrite_cost: u64,
    /// The tokens a compaction cycle should span for the lowest billed input per step.
    pub cycle_tokens: u64,
    /// The fixed trigger the policy would have used.
    pub configured_trigger: u64,
    /// The trigger used.
    pub trigger: u64,
    /// Billed input per step (uncached-token equivalents) at the chosen trigger and at the
    /// configured one, over a steady cycle.
    pub billed_per_step: f64,
    pub billed_per_step_configured: f64,
}

/// Something the engine did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A compaction is about to run.
    ContextCompactionStart {
        reason: CompactionReason,
        strategy: String,
        tokens_before: u64,
        messages_before: usize,
    },
    /// A compaction finished.
    ContextCompactionEnd {
        reason: CompactionReason,
        strategy: String,
        /// The stages that changed something, in order.
        stages: Vec<String>,
        tokens_before: u64,
        tokens_after: u64,
        messages_before: usize,
        messages_after: usize,
        /// Archive references written by this compaction.
        archive_refs: Vec<String>,
        /// The summarizer failed and a lossy fallback was used.
        summary_degraded: bool,
        /// Steps the session can take before the next compaction at the growth per step seen
        /// so far (`None` until two steps were seen).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected_steps_until_next: Option<u64>,
        /// Why the token trigger was where it was, under a cost rule (`[policy.cost]`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        economics: Option<Economics>,
    },
    /// A compaction inside a request, under a policy that compacts proactively only at the
    /// start of a request (`compact_at_request_start`): Agentrail's reactive micro and full
    /// tiers, and the full compaction after a prompt-too-long error (`reason` `overflow`).
    /// Such a policy keeps `context_compaction_start` / `context_compaction_end` for its
    /// request-boundary compactions; this is its runtime's `compaction` event, with the
    /// runtime's field names (`messagesBefore`, `messagesAfter`, `tokensBefore`, …).
    #[serde(rename_all = "camelCase")]
    Compaction {
        reason: CompactionReason,
        strategy: String,
        /// The stages that changed something, in order.
        stages: Vec<String>,
        messages_before: usize,
        messages_after: usize,
        tokens_before: u64,
        tokens_after: u64,
        /// Archive references written by this compaction.
        archive_refs: Vec<String>,
        /// The summarizer failed and a lossy fallback was used.
        summary_degraded: bool,
    },
    /// A compaction was considered and not run.
    CompactionSkipped { reason: String, tokens: u64 },
    /// A tool result was cut to a preview at ingest.
    ToolResultTruncated {
        call_id: String,
        tokens_before: u64,
        tokens_after: u64,
        reference: String,
    },
    /// A summary was checked against the messages it summarized and some lines failed: quotes
    /// of the user that no user message holds were dropped, lines naming paths or identifiers
    /// the source never mentions were marked `[unverified]`.
    SummaryChecked {
        dropped: Vec<String>,
        unverified: Vec<String>,
        /// Standing orders the summary left out, added back verbatim.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        restored: Vec<String>,
    },
    /// Content was written to the archive.
    ContentOffloaded {
        reference: String,
        bytes: u64,
        kind: String,
    },
    /// A context-overflow error was handled by compacting harder.
    OverflowRecovered {
        attempt: u32,
        tokens_before: u64,
        tokens_after: u64,
        limit: Option<u64>,
    },
    /// Budget use before a model call.
    BudgetUsed { tokens: u64, window: u64, pct: f64 },
    /// The summarizer failed (`cause`, never holding a key); the extractive summary stood in,
    /// marked degraded.
    SummaryFailed { summarizer: String, cause: String },
    /// The window leaves room for fewer than two steps between compactions (the fixed
    /// prompt and what every compaction keeps nearly fill it): this compaction's summary was
    /// written extractively instead of by `summarizer`, so the session does not pay a model
    /// call on almost every step. Model summaries resume once a compaction leaves more room.
    SummaryDowngraded {
        summarizer: String,
        steps_between_compactions: u64,
    },
    /// A summary prepared ahead of the trigger, for the messages at log positions
    /// `first..=last`: `ready` when it arrived, `used` when a compaction applied it (what
    /// arrived after `last` stayed verbatim), `discarded` when the context it was written for
    /// had been compacted meanwhile, `failed` (with the `cause`) when the summarizer failed;
    /// the compaction then summarizes as usual.
    SummaryPrepared {
        first: u64,
        last: u64,
        messages: usize,
        outcome: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<String>,
    },
    /// Facts were written to long-term memory before a compaction (`path`), or nothing was
    /// worth keeping (`None`), or the write failed (`error`).
    MemoryFlushed {
        path: Option<String>,
        error: Option<String>,
    },
}

impl Event {
    /// The event's type name (`context_compaction_start`, …), as used for SSE event names.
    pub fn name(&self) -> &'static str {
        match self {
            Event::ContextCompactionStart { .. } => "context_compaction_start",
            Event::ContextCompactionEnd { .. } => "context_compaction_end",
            Event::Compaction { .. } => "compaction",
            Event::CompactionSkipped { .. } => "compaction_skipped",
            Event::ToolResultTruncated { .. } => "tool_result_truncated",
            Event::SummaryChecked { .. } => "summary_checked",
            Event::ContentOffloaded { .. } => "content_offloaded",
            Event::OverflowRecovered { .. } => "overflow_recovered",
            Event::BudgetUsed { .. } => "budget_used",
            Event::MemoryFlushed { .. } => "memory_flushed",
            Event::SummaryFailed { .. } => "summary_failed",
            Event::SummaryPrepared { .. } => "summary_prepared",
            Event::SummaryDowngraded { .. } => "summary_downgraded",
        }
    }
}
