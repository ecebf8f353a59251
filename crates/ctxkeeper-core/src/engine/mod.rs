//! The compaction engine: a pure planner and applier over a [`ContextState`].
//!
//! The engine never does IO. Compaction happens in three steps so that content leaves the
//! context only after it is durably archived, and so that a dry run is just the first step:
//!
//! 1. [`Engine::plan`] decides what a compaction would do — which stages run, what must be
//!    archived, which summaries must be written, the estimated size afterwards — without
//!    touching the state (this is the dry run);
//! 2. the host archives every [`ArchiveItem`] through its offloader and asks its summarizer for
//!    every [`SummaryRequest`] (both may be async and fail; nothing has changed yet);
//! 3. [`Engine::apply`] swaps the planned context in, filling placeholders with the archive
//!    references the offloader returned, and returns the events.
//!
//! Tool results are capped the same way when they enter the context ([`Engine::plan_ingest`],
//! [`Engine::apply_ingest`]).
//!
//! ```
//! use ctxkeeper_core::engine::{Budget, Engine, PlanOutcome, presets};
//! use ctxkeeper_core::engine::ContextState;
//! use ctxkeeper_core::model::{Message, Part};
//! use ctxkeeper_core::tokens::{Profiles, TokenModel};
//!
//! let engine = Engine::new(presets::preset("default").unwrap(), TokenModel::for_model("gpt-4o", &Profiles::builtin()));
//! let mut state = ContextState::default();
//! state.push(Message::system("You are terse."));
//! state.push(Message::user("Read the log."));
//! for i in 0..12 {
//!     let id = format!("c{i}");
//!     state.push(Message::assistant_with_calls("", vec![Part::tool_call(&id, "read", "{}")]));
//!     state.push(Message::tool_result(&id, "log line with some words ".repeat(60)));
//! }
//! let budget = Budget { window: 4_000, fixed_tokens: 0 };
//! let plan = engine.plan(&mut state, &budget, &Default::default()).expect("over the trigger");
//! // Archive every item somewhere durable, then apply with the references it returned.
//! let refs = (0..plan.archive.len()).map(|i| format!("sessions/s/item-{i}")).collect();
//! let summaries = plan.summaries.iter().map(|_| ctxkeeper_core::summary::Summary::empty(&Default::default(), "test")).collect();
//! let events = engine.apply(&mut state, plan, PlanOutcome { refs, summaries });
//! assert!(state.sync_tokens(engine.model()) < 3_200);
//! assert!(!events.is_empty());
//! ```

mod archive_item;
mod config;
mod events;
mod fill;
mod images;
mod ingest;
mod overlay;
pub mod presets;
mod stages;
mod state;

pub use archive_item::ArchiveItem;
pub use config::{
    Accounting, ArchiveLayout, BudgetNoticeConfig, ConfigError, CostRule, IngestConfig,
    MemoryPolicy, OverflowConfig, PinRules, PolicyConfig, ProviderPlacement, ReactiveConfig,
    SessionPolicy, Stage, SummaryConfig, SummaryPlacement, ToolResultCap,
};
pub use events::{CompactionReason, Economics, Event};
pub use fill::{NOT_ARCHIVED, fill_references, fill_text, has_marker};
pub use images::{ImageOffload, image_placeholder};
pub use overlay::PolicyOverlay;
pub use stages::CLEARED_PREFIX;
pub use state::{ContextState, Entry, EntryMeta, TriggerMemory};

use serde::{Deserialize, Serialize};

use crate::model::{Message, Part, Role, turns};
use crate::summary::{Summary, SummaryReason, SummaryRequest, check_summary};
use crate::tokens::TokenModel;
use fill::{FILL_OPEN, ref_marker, summary_marker};

/// What a request costs beyond the managed context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    /// The model's context window in tokens.
    pub window: u64,
    /// Tokens the request carries outside the context: tool schemas, request overhead.
    pub fixed_tokens: u64,
}

/// Options of one planning call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanRequest {
    /// Force a compaction for this reason even when no trigger fires.
    pub force: Option<CompactionReason>,
    /// Input tokens the provider reported for the previous call (drives reactive tiers).
    pub reported_usage: Option<u64>,
    /// Compact down to at most this many tokens (overflow recovery).
    pub target_tokens: Option<u64>,
    /// Focus instructions for the summarizer.
    pub focus: Option<String>,
    /// The overflow recovery attempt this plan serves (from 1); 0 when not stated, which lets
    /// every stage run. Gates `clear` stages (see [`OverflowConfig::clear_from_attempt`]).
    pub attempt: u32,
    /// A summary prepared ahead of the trigger covers the messages up to this log index: a
    /// summarizing stage ends its span there when the span would reach past it, so the
    /// prepared summary applies to exactly the messages it read and everything appended since
    /// stays verbatim (see [`Plan::summary_spans`]).
    pub summarize_through: Option<u64>,
}

/// The log positions of the messages one summary request covers (first, last, how many).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSpan {
    pub first: u64,
    pub last: u64,
    pub count: usize,
}

/// A planned compaction: what would change, and what the host must do first.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub reason: CompactionReason,
    /// The policy's name.
    pub strategy: String,
    /// Stages that changed something, in order.
    pub stages: Vec<String>,
    pub tokens_before: u64,
    pub estimated_tokens_after: u64,
    pub messages_before: usize,
    pub messages_after: usize,
    /// Archive these, in order, and pass the references to [`Engine::apply`].
    pub archive: Vec<ArchiveItem>,
    /// Summarize these, in order, and pass the summaries to [`Engine::apply`].
    pub summaries: Vec<SummaryRequest>,
    /// For each summary request, the log positions of the messages it covers, when every one
    /// of them has one: what a summary prepared ahead of time is matched against.
    pub summary_spans: Vec<Option<LogSpan>>,
    /// The economic trigger's arithmetic when a cost rule placed the trigger.
    pub economics: Option<Economics>,
    /// The tool results the plan cuts to a preview, under a policy that announces each one
    /// (`compact_at_request_start`).
    cut_results: Vec<CutResult>,
    draft: Vec<Entry>,
    fixed_tokens: u64,
    window: u64,
}

impl Plan {
    /// The context the plan would leave, with placeholders still unfilled (for previews).
    pub fn draft_messages(&self) -> Vec<Message> {
        self.draft.iter().map(|e| e.message.clone()).collect()
    }

    /// Estimated tokens removed.
    pub fn estimated_savings(&self) -> u64 {
        self.tokens_before
            .saturating_sub(self.estimated_tokens_after)
    }

    /// Fills the archive references into the summary requests once the items are archived,
    /// so the summarizer reads (and may quote) real references, never markers.
    pub fn fill_summary_requests(&mut self, refs: &[String]) {
        for request in &mut self.summaries {
            for message in &mut request.messages {
                fill_references(message, refs, &[]);
            }
        }
    }
}

/// A tool result a plan cuts to a preview: its call, where its whole output is (an archive
/// marker until the plan is applied), and its size before and after.
#[derive(Debug, Clone, PartialEq)]
struct CutResult {
    call_id: String,
    reference: String,
    tokens_before: u64,
    tokens_after: u64,
}

/// What the host obtained while executing a plan: one reference per archive item and one
/// summary per summary request, in plan order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanOutcome {
    pub refs: Vec<String>,
    pub summaries: Vec<Summary>,
}

/// A message entering the context, possibly with a tool result to cap first.
#[derive(Debug, Clone, PartialEq)]
pub enum Ingest {
    /// Nothing to cap: push the message as it is.
    Ready(Message),
    /// Archive these whole outputs, then call [`Engine::apply_ingest`].
    Cap(IngestPlan),
}

/// A capped message waiting for its archive references.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestPlan {
    pub archive: Vec<ArchiveItem>,
    /// Tokens of the message before and after capping.
    pub tokens_before: u64,
    pub tokens_after: u64,
    message: Message,
}

/// The compaction engine for one policy and one model.
#[derive(Debug, Clone)]
pub struct Engine {
    config: PolicyConfig,
    model: TokenModel,
}

impl Engine {
    /// An engine running `config` with `model`'s token accounting.
    pub fn new(config: PolicyConfig, model: TokenModel) -> Engine {
        Engine { config, model }
    }

    /// The policy.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// The token model.
    pub fn model(&self) -> &TokenModel {
        &self.model
    }

    /// Tokens the request would carry now, counted exactly: O(messages appended since the
    /// last count).
    pub fn request_tokens(&self, state: &mut ContextState, budget: &Budget) -> u64 {
        state.sync_tokens(&self.model) + budget.fixed_tokens
    }

    /// Tokens of the request under the policy's accounting: exact, or estimated for messages
    /// not counted yet after calibrating on a sample.
    pub fn accounted_tokens(&self, state: &mut ContextState, budget: &Budget) -> u64 {
        match self.config.accounting {
            Accounting::Exact => self.request_tokens(state, budget),
            // A provider report anchors the total; without one, a sample counted exactly
            // keeps the estimate calibrated.
            Accounting::Estimate if state.anchored() => self.approx_request_tokens(state, budget),
            Accounting::Estimate => {
                state.sample_exact(&self.model, 8);
                self.approx_request_tokens(state, budget)
            }
        }
    }

    /// Tokens the request would carry now, estimated for messages not yet counted: no
    /// tokenizer call, for budget displays.
    pub fn approx_request_tokens(&self, state: &mut ContextState, budget: &Budget) -> u64 {
        state.approx_tokens() + budget.fixed_tokens
    }

    /// The token level above which the policy compacts, if it has a token trigger.
    pub fn trigger_tokens(&self, budget: &Budget) -> Option<u64> {
        let ratio = self
            .config
            .trigger_ratio
            .map(|r| (r * budget.window as f64) as u64);
        match (ratio, self.config.trigger_tokens) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The token level a compaction aims for: the policy's target, at most its hysteresis
    /// share of the trigger.
    pub fn target_tokens(&self, budget: &Budget) -> u64 {
        let target = (self.config.target_ratio * budget.window as f64) as u64;
        match self.trigger_tokens(budget) {
            Some(trigger) => {
                let share = self.config.hysteresis.unwrap_or(0.9);
                target.min((trigger as f64 * share) as u64)
            }
            None => target,
        }
    }

    /// The hysteresis level: below it after a compaction, the next one is several steps away.
    pub fn hysteresis_level(&self, budget: &Budget) -> Option<u64> {
        let share = self.config.hysteresis?;
        self.trigger_tokens(budget)
            .map(|trigger| (trigger as f64 * share) as u64)
    }

    /// The token level the trigger fires at now: the fixed trigger, or under a cost rule
    /// (`[policy.cost]`, see [`CostRule`]) the economic one, with its arithmetic. `None` when
    /// the policy has no token trigger.
    pub fn active_trigger(
        &self,
        state: &ContextState,
        budget: &Budget,
    ) -> Option<(u64, Option<Economics>)> {
        let configured = self.trigger_tokens(budget)?;
        let rule = self.config.cost.as_ref().filter(|rule| rule.enabled);
        let (Some(rule), Some(growth)) = (rule, state.step_growth()) else {
            return Some((configured, None));
        };
        if growth == 0 || budget.window == 0 {
            return Some((configured, None));
        }
        let stable = budget.fixed_tokens + state.leading_system_tokens();
        let after = state
            .last_compaction_after()
            .unwrap_or_else(|| {
                let guess = (budget.window as f64 * FIRST_AFTER_RATIO) as u64;
                self.target_tokens(budget).max(guess)
            })
            .max(stable);
        let rewrite =
            (after - stable) as f64 * rule.cache_write + configured as f64 * rule.summary_call;
        // Never fewer than a few steps apart, whatever the prices: a compaction that keeps
        // only what must stay costs the agent its working context, not just tokens.
        let cycle = (2.0 * rewrite * growth as f64 / rule.cache_read)
            .sqrt()
            .max((MIN_STEPS_BETWEEN_COMPACTIONS * growth) as f64);
        // Never later than the configured trigger: what lies above it is the summary call's
        // reserve (and a configured trigger is the operator's bound).
        let ceiling = hold_ceiling(budget.window).min(configured);
        let floor = ((budget.window as f64 * rule.min_trigger_ratio) as u64).min(ceiling);
        let trigger = (after + cycle as u64).clamp(floor, ceiling);
        // Over a steady cycle from `after` to `level`: the mean context re-read at the
        // cache-read price, plus one rewrite per cycle of `level - after` tokens.
        let per_step = |level: u64| {
            let span = level.saturating_sub(after).max(growth) as f64;
            (level + after) as f64 / 2.0 * rule.cache_read + rewrite * growth as f64 / span
        };
        Some((
            trigger,
            Some(Economics {
                growth_per_step: growth,
                stable_prefix: stable,
                expected_after: after,
                rewrite_cost: rewrite as u64,
                cycle_tokens: cycle as u64,
                configured_trigger: configured,
                trigger,
                billed_per_step: per_step(trigger),
                billed_per_step_configured: per_step(configured),
            }),
        ))
    }

    /// Whether the next step may fire the token trigger at `trigger`: the context as the last
    /// step measured it (or as it is now, if larger) plus the mean growth per step reaches the
    /// lowest level that trigger fires at. For a host that writes a compaction's summary ahead
    /// of it: a step's growth can jump from below any fixed share of the trigger to past it.
    pub fn next_step_may_fire(
        &self,
        state: &mut ContextState,
        budget: &Budget,
        trigger: u64,
    ) -> bool {
        let now = self.approx_request_tokens(state, budget);
        let measured = state
            .trigger_memory()
            .last_step_tokens
            .unwrap_or(0)
            .max(now);
        let growth = state.step_growth().unwrap_or(0);
        (measured + growth) * 100 >= trigger * FIRES_AT_PCT_ESTIMATED
    }

    /// Which trigger fires now, if any. Cheap: O(new messages) unless a turn trigger is set.
    pub fn triggered(
        &self,
        state: &mut ContextState,
        budget: &Budget,
        reported_usage: Option<u64>,
    ) -> Option<CompactionReason> {
        // At a request boundary, the request-boundary compaction comes before the in-loop
        // tiers (the seed compacts the session as the request arrives).
        if self.config.compact_at_request_start
            && let Some(reason) = self.proactive_trigger(state, budget)
        {
            return Some(reason);
        }
        if let (Some(reactive), Some(used)) = (&self.config.reactive, reported_usage)
            && state.reactive_in_turn < reactive.max_per_request
        {
            let pct = used as f64 * 100.0 / budget.window.max(1) as f64;
            if pct >= reactive.full_trigger_pct {
                return Some(CompactionReason::ReactiveFull);
            }
            if pct >= reactive.micro_trigger_pct {
                return Some(CompactionReason::ReactiveMicro);
            }
        }
        if !self.config.compact_at_request_start
            && let Some(reason) = self.proactive_trigger(state, budget)
        {
            return Some(reason);
        }
        if self.config.stages.iter().any(Stage::runs_always) {
            return Some(CompactionReason::Maintenance);
        }
        None
    }

    /// Whether the context is at the start of a request: its newest message is the user's
    /// own words, not a tool result (the agent has not answered it yet).
    pub fn at_request_start(state: &ContextState) -> bool {
        state
            .entries
            .iter()
            .rev()
            .find(|e| !e.meta.synthetic)
            .is_some_and(|e| e.message.starts_turn() && !e.message.has_tool_results())
    }

    /// The messages `min_messages` counts: the session's history, which holds neither the
    /// instructions nor the capsule, nor at the start of a request the user's new message
    /// (Agentrail compacts "the accumulated history" as the request arrives).
    pub fn history_messages(state: &ContextState) -> usize {
        let history = state
            .entries
            .iter()
            .filter(|e| !e.message.role.is_instruction() && !stages::is_capsule_entry(e))
            .count();
        history.saturating_sub(usize::from(Engine::at_request_start(state)))
    }

    /// The token, message or turn trigger that fires now, if the policy lets one fire here:
    /// never below `min_messages`, and under `compact_at_request_start` only at the start of
    /// a request, so the agent's tool loop is never compacted but by the reactive tiers.
    fn proactive_trigger(
        &self,
        state: &mut ContextState,
        budget: &Budget,
    ) -> Option<CompactionReason> {
        if (self.config.min_messages > 0
            && Engine::history_messages(state) < self.config.min_messages)
            || (self.config.compact_at_request_start && !Engine::at_request_start(state))
        {
            return None;
        }
        if let Some((trigger, _)) = self.active_trigger(state, budget) {
            // The estimate (exact counts where known, the session's own bytes-per-token ratio
            // plus a margin elsewhere) decides; under estimated accounting exact counting
            // happens while compacting, so a step that does not compact never runs the
            // tokenizer. Anchored on the provider's
            // report of the last request, only the newest messages are estimated, so firing
            // at 98 % covers their error; otherwise firing at 92 % keeps the real size under
            // the trigger even when the estimate of the whole context is a little low.
            let approx = state.approx_tokens() + budget.fixed_tokens;
            let fires = match self.config.accounting {
                Accounting::Estimate if state.anchored() => {
                    approx * 100 >= trigger * FIRES_AT_PCT_ANCHORED
                }
                Accounting::Estimate => approx * 100 >= trigger * FIRES_AT_PCT_ESTIMATED,
                // The estimate only spares the tokenizer on steps far below the trigger:
                // before anything was counted it assumes prose, and output denser than
                // prose (numbers one per line, hex, base64) carries up to twice the tokens
                // it predicts, so exact counting starts at half the trigger.
                Accounting::Exact => {
                    approx * 2 >= trigger && self.request_tokens(state, budget) > trigger
                }
            };
            if fires && state.retry_allowed(approx) {
                return Some(CompactionReason::Tokens);
            }
        }
        if self
            .config
            .trigger_messages
            .is_some_and(|m| state.entries.len() > m)
        {
            return Some(CompactionReason::Messages);
        }
        if let Some(max_turns) = self.config.trigger_turns
            && turns(&state.entries).len() > max_turns
        {
            return Some(CompactionReason::Turns);
        }
        None
    }

    /// Plans a compaction if a trigger fires (or `request.force` is set); `None` when there is
    /// nothing worth doing.
    ///
    /// Planning is a step of the session, not a dry run: the context's entries are left as
    /// they are, but `state` learns from it in three ways, which the next plan depends on:
    ///
    /// - the step's request size ([`ContextState::observe_step`]), from which the growth per
    ///   step (and the economic trigger) is computed;
    /// - when nothing is worth doing, a hold on token triggers until the context grows by a
    ///   twentieth of the window or a new API round begins ([`ContextState::hold_retries`]),
    ///   so a compaction that cannot make progress does not repeat on every step;
    /// - the token counts it takes, cached per entry.
    ///
    /// A host that wants to know what a step would do without making one plans on a copy of
    /// the state (as `ContextManager::plan` and `ContextManager::summary_to_prepare` do).
    pub fn plan(
        &self,
        state: &mut ContextState,
        budget: &Budget,
        request: &PlanRequest,
    ) -> Option<Plan> {
        // Every step passes here: its size teaches the growth per step. Under exact
        // accounting the size is the exact count (new entries only), so that what a plan
        // decides never depends on a provider's report that only one host saw.
        let size = match self.config.accounting {
            Accounting::Exact => self.request_tokens(state, budget),
            Accounting::Estimate => state.approx_tokens() + budget.fixed_tokens,
        };
        state.observe_step(size);
        let reason = match request.force {
            Some(reason) => reason,
            None => self.triggered(state, budget, request.reported_usage)?,
        };
        let tokens_before = self.accounted_tokens(state, budget);
        let mut target = self.target_tokens(budget);
        let economics = match reason {
            CompactionReason::Tokens => self.active_trigger(state, budget).and_then(|(_, e)| e),
            _ => None,
        };
        if let Some(economics) = &economics {
            // An economic trigger below the fixed one still compacts to below itself.
            let share = self.config.hysteresis.unwrap_or(0.9);
            target = target.min((economics.trigger as f64 * share) as u64);
        }
        if let Some(limit) = request.target_tokens {
            target = match reason {
                // A recovery compacts to what the stated limit allows, never deeper than the
                // policy would: a target below what must stay (tool schemas, instructions,
                // the newest round) would only fall through to clearing everything.
                CompactionReason::Overflow => target.max(limit),
                _ => target.min(limit),
            };
        }
        let mut draft = stages::Draft::new(self, state, budget, target, reason, request);
        draft.run();
        let mut plan = draft.finish(tokens_before);
        plan.economics = economics;
        let must_shrink = tokens_before > budget.window
            || matches!(
                reason,
                CompactionReason::Overflow
                    | CompactionReason::Manual
                    | CompactionReason::ReactiveMicro
                    | CompactionReason::ReactiveFull
            );
        if plan.stages.is_empty()
            || (!must_shrink && plan.estimated_savings() < self.config.clear_at_least.max(1))
        {
            // Nothing worth doing: do not plan again until the context grows noticeably (the
            // same compaction repeating without progress is a loop).
            state.hold_retries(tokens_before, budget.window / 20);
            return None;
        }
        Some(plan)
    }

    /// Swaps the planned context in. `outcome` must hold one reference per archive item and
    /// one summary per summary request, in plan order; a missing summary is replaced by an
    /// empty degraded one, a missing reference by a note that the item was not archived.
    pub fn apply(&self, state: &mut ContextState, plan: Plan, outcome: PlanOutcome) -> Vec<Event> {
        let Plan {
            reason,
            strategy,
            stages,
            tokens_before,
            messages_before,
            archive,
            summaries: requests,
            mut draft,
            fixed_tokens,
            window,
            economics,
            cut_results,
            ..
        } = plan;
        let refs: Vec<String> = (0..archive.len())
            .map(|i| {
                outcome
                    .refs
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| NOT_ARCHIVED.to_string())
            })
            .collect();
        let mut degraded = false;
        let mut summaries: Vec<Summary> = (0..requests.len())
            .map(|i| match outcome.summaries.get(i) {
                Some(summary) => {
                    degraded |= summary.degraded;
                    summary.clone()
                }
                None => {
                    degraded = true;
                    let mut empty = Summary::empty(&self.config.summary.schema, "missing");
                    empty.degraded = true;
                    empty
                }
            })
            .collect();
        // Every summary is checked against what it summarized before it is used, its quotes
        // of the user against every user message of the session.
        let session_users = if requests.is_empty() {
            Vec::new()
        } else {
            session_user_texts(state, &draft)
        };
        let mut checks = Vec::new();
        for (summary, request) in summaries.iter_mut().zip(&requests) {
            // The request still has this plan's markers where the host saw references: those
            // references are known without reading the messages again.
            let check = check_summary(summary, request, &refs, &session_users);
            if !check.is_clean() {
                checks.push(Event::SummaryChecked {
                    dropped: check.dropped,
                    unverified: check.unverified,
                    restored: check.restored,
                });
            }
        }
        // A summary may quote placeholders of the messages it covers: their markers are
        // filled too.
        let rendered: Vec<String> = summaries
            .iter()
            .map(|s| fill_text(&s.render(&self.config.summary.schema), &refs, &[], false))
            .collect();

        // Only the messages the stages wrote can hold a marker; every other one is as it was
        // when an earlier apply (or the agent) made it.
        let mut leak = None;
        for (index, entry) in draft.iter_mut().enumerate() {
            if !entry.meta.pending_fill {
                continue;
            }
            fill_references(&mut entry.message, &refs, &rendered);
            if has_marker(&entry.message) {
                leak = leak.or(Some(index));
            }
            // The references kept for later stages too: a marker left there would name another
            // plan's item (or nothing) the next time a stage reuses it.
            for reference in entry
                .meta
                .archived
                .iter_mut()
                .chain(entry.meta.result_refs.iter_mut().map(|(_, r)| r))
                .filter(|r| r.contains(FILL_OPEN))
            {
                *reference = fill_text(reference, &refs, &rendered, false);
            }
            if entry.meta.summarized > 0 && entry.meta.archived.len() > 1 {
                name_every_summarized_range(entry);
            }
            if let Some(capsule) = &mut entry.meta.capsule {
                capsule.fill_references(
                    |reference| reference.contains(FILL_OPEN),
                    |reference| fill_text(reference, &refs, &[], false),
                );
            }
            entry.meta.pending_fill = false;
            entry.estimated = None;
            // Exact accounting counts what the engine wrote now, so estimates never drift on
            // the summary, which stays in the context for many steps. Under estimates it is
            // left to the next provider report, which counts it exactly for free.
            entry.tokens = match self.config.accounting {
                Accounting::Exact => Some(self.model.message_tokens(&entry.message)),
                Accounting::Estimate => None,
            };
        }
        if let Some(leak) = leak {
            // Never reached by the stages as written; if a marker survives anyway, the plan is
            // refused rather than sending a reference the model cannot follow. The archive
            // already holds the content, so nothing is lost; the context stays as it was.
            state.hold_retries(tokens_before, 1);
            return vec![Event::CompactionSkipped {
                reason: format!(
                    "plan refused: message {leak} would carry an unfilled archive marker"
                ),
                tokens: tokens_before,
            }];
        }
        if let Some(last) = summaries.last() {
            state.summary = Some(last.clone());
        }
        state.replace_entries(draft);
        state.compactions += 1;
        if matches!(
            reason,
            CompactionReason::ReactiveMicro | CompactionReason::ReactiveFull
        ) {
            state.reactive_in_turn += 1;
        }
        let tokens_after = self.accounted_tokens(
            state,
            &Budget {
                window: 0,
                fixed_tokens,
            },
        );
        let messages_after = state.entries.len();
        state.set_last_compaction_after(tokens_after);
        let expected_steps_until_next =
            self.hold_after_compaction(state, tokens_after, window, fixed_tokens);

        if self.config.compact_at_request_start {
            match reason {
                // Layer 1, the routine cap before every call: no compaction to announce,
                // each result cut says so.
                CompactionReason::Maintenance => {
                    return cut_results
                        .into_iter()
                        .map(|cut| Event::ToolResultTruncated {
                            call_id: cut.call_id,
                            tokens_before: cut.tokens_before,
                            tokens_after: cut.tokens_after,
                            reference: fill_text(&cut.reference, &refs, &[], false),
                        })
                        .collect();
                }
                // Inside the request: the runtime's `compaction` event, never the
                // request-boundary start and end.
                CompactionReason::ReactiveMicro
                | CompactionReason::ReactiveFull
                | CompactionReason::Overflow => {
                    let mut events = offloaded_events(&archive, &refs);
                    events.extend(checks);
                    events.push(Event::Compaction {
                        reason,
                        strategy,
                        stages,
                        messages_before,
                        messages_after,
                        tokens_before,
                        tokens_after,
                        archive_refs: refs,
                        summary_degraded: degraded,
                    });
                    return events;
                }
                _ => {}
            }
        }
        let mut events = Vec::with_capacity(archive.len() + checks.len() + 2);
        events.push(Event::ContextCompactionStart {
            reason,
            strategy: strategy.clone(),
            tokens_before,
            messages_before,
        });
        events.extend(offloaded_events(&archive, &refs));
        events.extend(checks);
        events.push(Event::ContextCompactionEnd {
            reason,
            strategy,
            stages,
            tokens_before,
            tokens_after,
            messages_before,
            messages_after,
            archive_refs: refs,
            summary_degraded: degraded,
            expected_steps_until_next,
            economics,
        });
        events
    }

    /// After a compaction that could not get below the hysteresis level (what must stay is
    /// above it), holds the trigger until the request nears the window: compacting again
    /// sooner would not get lower, only break the cache again. Returns the steps expected
    /// until the next compaction at the growth per step seen so far.
    fn hold_after_compaction(
        &self,
        state: &mut ContextState,
        tokens_after: u64,
        window: u64,
        fixed_tokens: u64,
    ) -> Option<u64> {
        let budget = Budget {
            window,
            fixed_tokens,
        };
        let (next, held) = self.next_compaction_level(state, &budget, tokens_after)?;
        if held {
            state.hold_until_level(next);
        }
        let growth = state.step_growth().filter(|g| *g > 0)?;
        Some(next.saturating_sub(tokens_after) / growth)
    }

    /// The level the next compaction fires at after one that left `tokens_after`: the
    /// trigger, or the hold ceiling when the compaction could not get under the hysteresis
    /// level (then `true`).
    fn next_compaction_level(
        &self,
        state: &ContextState,
        budget: &Budget,
        tokens_after: u64,
    ) -> Option<(u64, bool)> {
        let (trigger, _) = self.active_trigger(state, budget)?;
        let ceiling = hold_ceiling(budget.window);
        let held = budget.window > 0
            && ceiling > trigger
            && self
                .hysteresis_level(budget)
                .is_some_and(|level| tokens_after > level);
        Some(if held {
            (ceiling, true)
        } else {
            (trigger, false)
        })
    }

    /// Steps, at the growth per step seen so far, between what the last compaction left and
    /// the level the next one fires at: how often this session compacts. `None` before a
    /// compaction, or before two steps were seen. Under 2 the fixed prompt (instructions,
    /// tools) and what every compaction keeps nearly fill the window, and the session
    /// compacts on almost every step whatever the summary says.
    pub fn steps_between_compactions(&self, state: &ContextState, budget: &Budget) -> Option<u64> {
        let after = state.last_compaction_after()?;
        let (next, _) = self.next_compaction_level(state, budget, after)?;
        let growth = state.step_growth().filter(|g| *g > 0)?;
        Some(next.saturating_sub(after) / growth)
    }

    /// A summary request for `messages` under this policy.
    fn summary_request(
        &self,
        messages: Vec<Message>,
        previous: Option<Summary>,
        reason: CompactionReason,
        focus: Option<String>,
    ) -> SummaryRequest {
        SummaryRequest {
            messages,
            previous: if self.config.summary.incremental {
                previous
            } else {
                None
            },
            schema: self.config.summary.schema.clone(),
            prompt: self.config.summary.compression_prompt.clone(),
            focus,
            reason: match reason {
                CompactionReason::ReactiveMicro => SummaryReason::ReactiveMicro,
                CompactionReason::ReactiveFull => SummaryReason::ReactiveFull,
                CompactionReason::Overflow => SummaryReason::Overflow,
                CompactionReason::Manual => SummaryReason::Manual,
                _ => SummaryReason::Proactive,
            },
            max_output_tokens: self.config.summary.max_summary_tokens,
            must_keep: Vec::new(),
            instructions: self.config.summary.instructions.clone(),
            request_in_context: None,
        }
    }
}

impl Engine {
    /// Whether the policy's `[pin]` rules pin `message`, arriving at the end of `state`.
    pub fn pins(&self, state: &ContextState, message: &Message) -> bool {
        self.config.pin.pins(message, state.messages(), |call_id| {
            tool_name_for(state, call_id)
        })
    }
}

/// One `content_offloaded` event per archived item of a plan.
fn offloaded_events(archive: &[ArchiveItem], refs: &[String]) -> Vec<Event> {
    archive
        .iter()
        .zip(refs)
        .map(|(item, reference)| Event::ContentOffloaded {
            reference: reference.clone(),
            bytes: item.bytes(),
            kind: match item {
                ArchiveItem::ToolResult { .. } => "tool_result".to_string(),
                _ => "messages".to_string(),
            },
        })
        .collect()
}

/// The fewest steps of growth an economic trigger leaves between two compactions.
const MIN_STEPS_BETWEEN_COMPACTIONS: u64 = 4;

/// Before a compaction has shown what stays after one (the capsule, the rounds kept
/// verbatim), the economic trigger assumes at least this share of the window does. A small
/// verbatim reserve (`target_ratio`) is not what a compaction leaves: taken as the guess, it
/// makes the first compaction look cheap and fire early (a 13-step SWE-agent session at 16k
/// billed 26 % more with `target_ratio = 0.05` until this bound).
const FIRST_AFTER_RATIO: f64 = 0.1;

/// The share of a token trigger (in %) at which an estimated total fires it when the
/// provider's count of the last request anchors the total: only the newest messages are
/// estimated, so 98 % covers their error.
const FIRES_AT_PCT_ANCHORED: u64 = 98;

/// The same share when nothing anchors the total: firing at 92 % keeps the real size under
/// the trigger even when the estimate of the whole context is a little low.
const FIRES_AT_PCT_ESTIMATED: u64 = 92;

/// How far a held context may grow: the window less a margin for the estimate's error.
pub(super) fn hold_ceiling(window: u64) -> u64 {
    window - window / 50
}

/// The name of the tool a result answers, from the closest assistant message of the context.
fn tool_name_for(state: &ContextState, call_id: &str) -> Option<String> {
    state
        .entries
        .iter()
        .rev()
        .find(|e| e.message.role == Role::Assistant)
        .and_then(|e| {
            e.message
                .tool_calls()
                .find(|(id, _, _)| *id == call_id)
                .map(|(_, n, _)| n.to_string())
        })
}

/// The user texts the model could have read when it wrote a summary: those of the context
/// before and after the compaction (the engine's own messages aside) and the session capsule's
/// text, which shows the user's words and standing orders of the messages archived earlier.
/// Bounded by the window, never by the session's length: a long session's words that the
/// capsule only counts were seen by no model, and a quote of them proves nothing.
fn session_user_texts<'a>(state: &'a ContextState, draft: &'a [Entry]) -> Vec<&'a str> {
    let mut texts: Vec<&str> = state
        .entries
        .iter()
        .chain(draft)
        .filter(|e| {
            e.message.role == Role::User && (!e.meta.synthetic || stages::is_capsule_entry(e))
        })
        .flat_map(|e| &e.message.parts)
        .filter_map(|part| match part {
            Part::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    texts.sort_unstable();
    texts.dedup();
    texts
}

/// All text of a list of parts, joined by newlines.
/// How many archive references other than line ranges a merged summary's header names (the
/// newest); older ones are counted there and stay findable through the archive's search.
const HEADER_REFERENCES: usize = 4;

/// How many such references a summary keeps in its bookkeeping.
const KEPT_REFERENCES: usize = 64;

/// A summary that merged earlier summaries names every archived range it stands for, not only
/// the newest: line ranges of one archive file become one range (`…/context.jsonl#L1-L195`),
/// other references (one file per compaction) are listed oldest first, the newest
/// [`HEADER_REFERENCES`] of them, with a count of the rest.
fn name_every_summarized_range(entry: &mut Entry) {
    let Some(newest) = entry.meta.archived.last().cloned() else {
        return;
    };
    let (ranges, mut others): (Vec<String>, Vec<String>) =
        crate::capsule::merge_line_ranges(entry.meta.archived.iter().map(String::as_str))
            .into_iter()
            .partition(|reference| reference.contains("#L"));
    others.drain(..others.len().saturating_sub(KEPT_REFERENCES));
    let unnamed = others.len().saturating_sub(HEADER_REFERENCES);
    let mut shown: Vec<&str> = ranges.iter().map(String::as_str).collect();
    shown.extend(others[unnamed..].iter().map(String::as_str));
    let mut named = shown.join(", ");
    if unnamed > 0 {
        named.push_str(&format!(" (and {unnamed} earlier archives)"));
    }
    entry.meta.archived = ranges.into_iter().chain(others).collect();
    if named == newest {
        return;
    }
    for part in &mut entry.message.parts {
        if let Part::Text { text, .. } = part
            && text.contains(&newest)
        {
            *text = text.replacen(&newest, &named, 1);
            return;
        }
    }
}

fn join_text(parts: &[Part]) -> std::borrow::Cow<'_, str> {
    crate::model::parts_text(parts)
}

#[cfg(test)]
mod tests;
