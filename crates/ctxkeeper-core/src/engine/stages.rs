//! The cascade's stages, each a pure rewrite of a draft of the context.
//!
//! Every stage keeps the invariants: instructions and pinned entries are never removed or
//! rewritten, the most recent `keep_recent_rounds` API rounds are never touched, cuts fall only
//! on safe split points (an assistant message and its results move together), and whatever
//! leaves the context is listed for archiving first.

use std::collections::HashSet;

use serde_json::Value;

use super::config::{Stage, SummaryPlacement};
use super::state::{ContextState, Entry};
use super::{
    ArchiveItem, Budget, CompactionReason, Engine, Plan, PlanRequest, join_text, ref_marker,
    summary_marker,
};
use crate::capsule::{CAPSULE_TITLE, Capsule};
use crate::model::{Message, Part, Role, api_rounds, is_safe_split, turns};
use crate::salience::{line_rank, salient_strings};
use crate::summary::Summary;
use crate::tokens::TokenModel;

mod previews;
mod summarize;

use previews::*;
pub(super) use previews::{head_tail_preview, ranked_preview};

/// Steps a compaction leaves room for before the next one is due, when it can: compactions
/// are then at least this many steps plus one apart.
const ROOM_STEPS: u64 = 2;

/// Text that opens every placeholder of a cleared tool result.
pub const CLEARED_PREFIX: &str = "[tool result cleared from context";

impl AsRef<Message> for Entry {
    fn as_ref(&self) -> &Message {
        &self.message
    }
}

/// A context being rewritten by the stages of one plan.
pub(super) struct Draft<'a> {
    engine: &'a Engine,
    /// The overflow recovery attempt (0: not stated).
    attempt: u32,
    entries: Vec<Entry>,
    previous_summary: Option<Summary>,
    fixed_tokens: u64,
    target: u64,
    reason: CompactionReason,
    focus: Option<String>,
    archive: Vec<ArchiveItem>,
    summaries: Vec<crate::summary::SummaryRequest>,
    summary_spans: Vec<Option<super::LogSpan>>,
    /// Where a prepared summary ends (see [`PlanRequest::summarize_through`]).
    summarize_through: Option<u64>,
    stages: Vec<String>,
    messages_before: usize,
    window: u64,
    /// Message tokens before any stage ran, counted as the stages count them: the base of a
    /// `min_ratio` (ReMe's "tokens after compaction divided by original tokens").
    tokens_at_start: u64,
    /// The session capsule this plan updates (when the policy keeps one): it has read every
    /// message before any stage rewrote one.
    capsule: Option<Capsule>,
    /// Tokens set aside for the capsule's message when deciding how much recent context fits.
    capsule_reserve: u64,
    /// Recent rounds kept verbatim, when fewer than the policy's must do (see
    /// [`Draft::squeezed_rounds`]).
    keep_rounds_override: Option<usize>,
    /// The tool results `cap_results` cut, for the events of a plan that announces each
    /// result rather than a compaction (see [`super::Engine::apply`]).
    cut_results: Vec<super::CutResult>,
}

impl<'a> Draft<'a> {
    pub(super) fn new(
        engine: &'a Engine,
        state: &mut ContextState,
        budget: &Budget,
        target: u64,
        reason: CompactionReason,
        request: &PlanRequest,
    ) -> Draft<'a> {
        let estimate_only = engine.config.accounting == super::Accounting::Estimate;
        let mut entries = state.entries.clone();
        if estimate_only {
            // Unknown counts become estimates in the draft: planning never waits on the
            // tokenizer. Rewritten entries are counted exactly (they are small).
            for entry in &mut entries {
                if entry.tokens.is_none() {
                    entry.estimated = Some(state.estimate_entry(entry) as u32);
                }
            }
        }
        // The capsule's data moves out of the draft's copy of its message (no second copy);
        // `place_capsule` puts it back, updated.
        let capsule = engine.config.capsule.as_ref().map(|_| {
            let mut capsule = entries
                .iter_mut()
                .find_map(|e| e.meta.capsule.take())
                .map(|boxed| *boxed)
                .unwrap_or_default();
            capsule.absorb(&entries);
            capsule
        });
        let capsule_reserve = match (&capsule, &engine.config.capsule) {
            // At most this much: everything it read, as if all of it left the context.
            (Some(capsule), Some(config)) => {
                capsule.size_bound(config, budget.window) as u64 * 10 / 35
            }
            _ => 0,
        };
        let growth = state.step_growth();
        let mut draft = Draft {
            attempt: request.attempt,
            keep_rounds_override: None,
            cut_results: Vec::new(),
            capsule,
            capsule_reserve,
            window: budget.window,
            tokens_at_start: 0,
            engine,
            entries,
            previous_summary: state.summary.clone(),
            fixed_tokens: budget.fixed_tokens,
            target,
            reason,
            focus: request.focus.clone(),
            archive: Vec::new(),
            summaries: Vec::new(),
            summary_spans: Vec::new(),
            summarize_through: request.summarize_through,
            stages: Vec::new(),
            messages_before: state.entries.len(),
        };
        draft.keep_rounds_override = draft.squeezed_rounds(budget, growth);
        draft.tokens_at_start = draft.total() - draft.fixed_tokens;
        draft
    }

    /// Under a policy with hysteresis: when what must stay after a compaction (tool schemas,
    /// instructions, the capsule, a summary and the recent rounds the policy keeps) leaves
    /// room for fewer than [`ROOM_STEPS`] more steps below the window, only the newest round is
    /// kept verbatim. Keeping more would make the next compaction come a step or two later,
    /// again and again (Claude Code at a 54k window with 29k of tools and system prompt).
    fn squeezed_rounds(&mut self, budget: &Budget, growth: Option<u64>) -> Option<usize> {
        self.engine.hysteresis_level(budget)?;
        let keep = self.engine.config.keep_recent_rounds;
        let rounds = api_rounds(&self.entries);
        if keep <= 1 || rounds.len() < keep {
            return None;
        }
        let model = &self.engine.model;
        let start = self
            .entries
            .iter()
            .position(|e| !e.message.role.is_instruction())
            .unwrap_or(self.entries.len());
        let tail_from = |from: usize, entries: &mut [Entry]| -> u64 {
            entries[from..]
                .iter_mut()
                .map(|e| u64::from(e.planning_tokens(model)))
                .sum()
        };
        let instructions = tail_from(0, &mut self.entries) - tail_from(start, &mut self.entries);
        let kept = tail_from(rounds[rounds.len() - keep].start, &mut self.entries);
        let newest = tail_from(rounds[rounds.len() - 1].start, &mut self.entries);
        let floor = self.fixed_tokens
            + instructions
            + self.capsule_reserve
            + u64::from(self.engine.config.summary.max_summary_tokens)
            + 64;
        let growth = growth.unwrap_or(newest);
        let ceiling = super::hold_ceiling(self.window);
        (floor + kept + ROOM_STEPS * growth > ceiling).then_some(1)
    }

    fn model(&self) -> &TokenModel {
        &self.engine.model
    }

    /// Request tokens of the draft as it stands.
    fn total(&mut self) -> u64 {
        let model = &self.engine.model;
        self.entries
            .iter_mut()
            .map(|e| u64::from(e.planning_tokens(model)))
            .sum::<u64>()
            + self.fixed_tokens
    }

    fn over_target(&mut self) -> bool {
        let target = self.target;
        self.total() > target
    }

    /// Runs the stages the reason calls for.
    pub(super) fn run(&mut self) {
        let config = &self.engine.config;
        let reactive = config.reactive.clone().unwrap_or_default();
        let full = Stage::Summarize {
            keep_tokens: Some(0),
            keep_messages: None,
            group_token_threshold: None,
            oldest_rounds: None,
            keep_ratio: None,
            min_ratio: None,
            min_tokens: None,
        };
        let stages: Vec<Stage> = match self.reason {
            CompactionReason::ReactiveMicro => vec![Stage::Summarize {
                keep_tokens: None,
                keep_messages: None,
                group_token_threshold: None,
                oldest_rounds: Some(reactive.micro_batch_groups),
                keep_ratio: None,
                min_ratio: None,
                min_tokens: None,
            }],
            CompactionReason::ReactiveFull => vec![full],
            CompactionReason::Overflow => {
                let mut stages = if config.overflow.stages.is_empty() {
                    // With reactive tiers, a prompt-too-long is met by the full tier
                    // (Agentrail: "full ... after a prompt-too-long error").
                    let mut stages = match config.reactive {
                        Some(_) => vec![full],
                        None => config.stages.clone(),
                    };
                    stages.push(Stage::Clear { keep_turns: 1 });
                    stages
                } else {
                    config.overflow.stages.clone()
                };
                if self.attempt > 0 && self.attempt < config.overflow.clear_from_attempt {
                    stages.retain(|stage| !matches!(stage, Stage::Clear { .. }));
                }
                stages
            }
            CompactionReason::Maintenance => config
                .stages
                .iter()
                .filter(|s| s.runs_always())
                .cloned()
                .collect(),
            _ => config.stages.clone(),
        };
        let forced_stage = matches!(
            self.reason,
            CompactionReason::ReactiveMicro | CompactionReason::ReactiveFull
        );
        for stage in stages {
            let own_trigger = matches!(stage, Stage::TrimTurns { .. }) || stage.runs_always();
            if !forced_stage && !own_trigger && !self.over_target() {
                continue;
            }
            if self.apply(&stage) {
                self.stages.push(stage.kind().to_string());
            }
        }
    }

    fn apply(&mut self, stage: &Stage) -> bool {
        match stage {
            Stage::TruncateArgs {
                max_arg_length,
                truncation_text,
            } => self.truncate_args(*max_arg_length, truncation_text),
            Stage::Mask {
                keep_rounds,
                min_result_tokens,
                exclude_tools,
                clear_inputs,
                keep_messages,
                preview_chars,
            } => self.mask(
                *keep_rounds,
                *min_result_tokens,
                exclude_tools,
                *clear_inputs,
                (*keep_messages, *preview_chars),
            ),
            Stage::CapResults {
                max_chars,
                keep_rounds,
                historical_only,
                user_text,
                ..
            } => {
                let results = self.cap_results(*max_chars, *keep_rounds, *historical_only);
                let texts = *user_text && self.cap_user_texts(*max_chars);
                results || texts
            }
            Stage::TrimTurns {
                max_turns,
                drop_fraction,
            } => {
                let count = turns(&self.entries).len();
                if count <= *max_turns {
                    return false;
                }
                // The oldest `drop_fraction` of the turns, and at least what brings the count
                // down to `max_turns` (a fraction of 0 trims to exactly `max_turns`).
                let fraction = (count as f64 * drop_fraction).floor() as usize;
                let drop = fraction.max(count - *max_turns).max(1);
                self.drop_turns(drop)
            }
            Stage::CompressTurns { min_turns_for_drop } => {
                let count = turns(&self.entries).len();
                if count < *min_turns_for_drop {
                    self.compress_turns()
                } else {
                    self.drop_turns(count / 2)
                }
            }
            Stage::Summarize {
                keep_tokens,
                keep_messages,
                group_token_threshold,
                oldest_rounds,
                keep_ratio,
                min_ratio,
                min_tokens,
            } => {
                if let Some(ratio) = min_ratio {
                    let now = (self.total() - self.fixed_tokens) as f64;
                    if now <= ratio * self.tokens_at_start as f64 {
                        return false;
                    }
                }
                if let Some(floor) = min_tokens
                    && self.compressible_tokens(keep_messages.unwrap_or(0)) <= *floor
                {
                    return false;
                }
                let keep_tokens =
                    keep_tokens.or(keep_ratio.map(|r| (r * self.window as f64) as u64));
                self.summarize(
                    keep_tokens,
                    *keep_messages,
                    *group_token_threshold,
                    *oldest_rounds,
                )
            }
            Stage::Clear { keep_turns } => self.clear(*keep_turns),
        }
    }

    /// Tokens of the messages a summary may take: after the instructions, before the last
    /// `keep` messages, instructions further down left out (ReMe's compression threshold).
    fn compressible_tokens(&mut self, keep: usize) -> u64 {
        let start = self.conversation_start();
        let end = self.entries.len().saturating_sub(keep).max(start);
        let model = &self.engine.model;
        self.entries[start..end]
            .iter_mut()
            .filter(|e| !e.message.role.is_instruction())
            .map(|e| u64::from(e.planning_tokens(model)))
            .sum()
    }

    /// Index of the first entry after the leading instructions.
    fn conversation_start(&self) -> usize {
        self.entries
            .iter()
            .position(|e| !e.message.role.is_instruction())
            .unwrap_or(self.entries.len())
    }

    /// Index from which entries are never touched: the start of the `keep`-th API round from
    /// the end (messages after the last round, such as the current user message, included).
    fn protected_start(&self, keep: usize) -> usize {
        let keep = keep.max(
            self.keep_rounds_override
                .unwrap_or(self.engine.config.keep_recent_rounds),
        );
        let rounds = api_rounds(&self.entries);
        if keep == 0 {
            return rounds.last().map_or(self.conversation_start(), |r| r.end);
        }
        if rounds.len() <= keep {
            return rounds.first().map_or(self.entries.len(), |r| r.start);
        }
        rounds[rounds.len() - keep].start
    }

    /// Index of the user message that opened the current turn, if any.
    fn current_turn_start(&self) -> Option<usize> {
        self.entries.iter().rposition(|e| e.message.starts_turn())
    }

    fn push_archive(&mut self, item: ArchiveItem) -> String {
        let marker = ref_marker(self.archive.len());
        self.archive.push(item);
        marker
    }

    /// Tells the capsule where the messages at `logs` were archived as they left.
    fn note_archived(&mut self, logs: &[u64], marker: &str) {
        if let Some(capsule) = &mut self.capsule {
            for &log in logs {
                capsule.note_archived(log, marker);
            }
        }
    }

    /// Renders the capsule for the context the stages left and puts its message right after
    /// the instructions. An unchanged text keeps the old message (and the cached prefix).
    fn place_capsule(&mut self) {
        let (Some(capsule), Some(config)) =
            (self.capsule.take(), self.engine.config.capsule.as_ref())
        else {
            return;
        };
        let mut live: Vec<u64> = self
            .entries
            .iter()
            .filter(|e| !e.meta.synthetic)
            .filter_map(|e| e.meta.log_index)
            .collect();
        live.sort_unstable();
        // The working set takes at most a quarter of the room left below the ceiling (the old
        // capsule still counted): it is elastic, the only section left out of the reserve. A
        // recovery from an overflow has the limit it must get under as its ceiling.
        let ceiling = match self.reason {
            CompactionReason::Overflow => self.target.min(super::hold_ceiling(self.window)),
            _ => super::hold_ceiling(self.window),
        };
        let room = ceiling.saturating_sub(self.total());
        let working_set_chars = (room as f64 / 4.0 * 3.5) as usize;
        // The salient strings the model can read in the context itself: the working set
        // does not spend its room repeating them.
        let mut visible: HashSet<String> = HashSet::new();
        for entry in self.entries.iter().filter(|e| !is_capsule_entry(e)) {
            visit_readable_text(&entry.message, &mut |text| {
                salient_strings(text, &mut |piece, _| {
                    if !visible.contains(piece) {
                        visible.insert(piece.to_string());
                    }
                });
            });
        }
        let mut capsule = capsule;
        // The capsule's old messages leave; the first comes back as it was when its text is
        // unchanged (the provider's cache keeps reading it).
        let mut old: Vec<Entry> = Vec::new();
        while let Some(index) = self.entries.iter().position(is_capsule_entry) {
            old.push(self.entries.remove(index));
        }
        let previous_first = old.first().and_then(|e| e.message.parts.first()?.as_text());
        let (first, second) = capsule.render_parts(
            config,
            self.window,
            &live,
            working_set_chars,
            &|name| visible.contains(name),
            previous_first,
        );
        if first.is_empty() {
            return;
        }
        let start = self.conversation_start();
        let mut old = old.into_iter();
        let reuse = |text: &str, old: Option<Entry>| match old {
            Some(mut old) if old.message.parts.first().and_then(Part::as_text) == Some(text) => {
                old.meta.pending_fill = true;
                old
            }
            _ => {
                let mut entry = Entry::new(Message::user(text.to_string()));
                entry.estimated = Some(text_tokens_estimate(&entry.message.text()) as u32);
                entry.meta.synthetic = true;
                entry.meta.pinned = true;
                entry.meta.pending_fill = true;
                entry
            }
        };
        let mut entry = reuse(&first, old.next());
        entry.meta.capsule = Some(Box::new(capsule));
        self.entries.insert(start, entry);
        if !second.is_empty() {
            let entry = reuse(&second, old.next());
            self.entries.insert(start + 1, entry);
        }
    }

    // ---- stages -------------------------------------------------------------------------

    fn truncate_args(&mut self, max_len: usize, truncation_text: &str) -> bool {
        // The tail a later summary keeps verbatim stays verbatim here too: truncation is the
        // summary's pre-pass (HarnessAgent's TruncateArgsConfig), and a kept `write_file`
        // call must keep its body.
        let kept_by_summary = self
            .engine
            .config
            .stages
            .iter()
            .filter_map(|stage| match stage {
                Stage::Summarize {
                    keep_messages: Some(keep),
                    ..
                } => Some(self.entries.len().saturating_sub(*keep)),
                _ => None,
            })
            .min();
        let protect = kept_by_summary.map_or(self.protected_start(0), |start| {
            start.min(self.protected_start(0))
        });
        let mut changed = false;
        for index in self.conversation_start()..protect {
            let entry = &self.entries[index];
            if entry.meta.pinned || entry.message.role != Role::Assistant {
                continue;
            }
            let long = entry
                .message
                .tool_calls()
                .any(|(_, _, args)| has_long_argument(args, max_len));
            if !long {
                continue;
            }
            let original = entry.message.clone();
            let marker = self.push_archive(ArchiveItem::Messages {
                messages: vec![original],
            });
            let notice = format!("{truncation_text} (full arguments archived at {marker})");
            let entry = &mut self.entries[index];
            for part in &mut entry.message.parts {
                if let Part::ToolCall { arguments, .. } = part
                    && has_long_argument(arguments, max_len)
                {
                    *arguments = truncate_arguments(arguments, max_len, &notice);
                }
            }
            mark_rewritten(entry, &marker);
            changed = true;
        }
        changed
    }

    fn mask(
        &mut self,
        keep_rounds: usize,
        min_tokens: u64,
        exclude: &[String],
        clear_inputs: bool,
        (keep_messages, preview_chars): (usize, usize),
    ) -> bool {
        let protect = self
            .protected_start(keep_rounds)
            .min(self.entries.len().saturating_sub(keep_messages));
        let mut changed = false;
        let mut last_calls: Vec<(String, String)> = Vec::new();
        let mut last_assistant: Option<usize> = None;
        for index in self.conversation_start()..protect {
            let message = &self.entries[index].message;
            if message.role == Role::Assistant {
                last_calls = message
                    .tool_calls()
                    .map(|(id, name, _)| (id.to_string(), name.to_string()))
                    .collect();
                last_assistant = Some(index);
                continue;
            }
            if self.entries[index].meta.pinned || !message.has_tool_results() {
                continue;
            }
            let mut cleared_calls = Vec::new();
            for part_index in 0..self.entries[index].message.parts.len() {
                let Some((call_id, content)) =
                    self.entries[index].message.parts[part_index].as_tool_result()
                else {
                    continue;
                };
                if content
                    .first()
                    .and_then(Part::as_text)
                    .is_some_and(|t| t.starts_with(CLEARED_PREFIX))
                {
                    continue;
                }
                let text = join_text(content).into_owned();
                let name = last_calls
                    .iter()
                    .find(|(id, _)| id == call_id)
                    .map(|(_, n)| n.clone());
                if name
                    .as_deref()
                    .is_some_and(|n| exclude.iter().any(|x| x == n))
                {
                    continue;
                }
                // The entry's count stands for its result (one result per tool message is
                // the rule); no re-count of large outputs.
                let tokens = match self.entries[index].tokens.or(self.entries[index].estimated) {
                    Some(count) if self.entries[index].message.parts.len() == 1 => u64::from(count),
                    _ => text.len() as u64 / 4,
                };
                if tokens <= min_tokens {
                    continue;
                }
                let call_id = call_id.to_string();
                let preview = (preview_chars > 0).then(|| {
                    let cut = text
                        .char_indices()
                        .nth(preview_chars)
                        .map_or(text.len(), |(i, _)| i);
                    text[..cut].to_string()
                });
                let has_media = content.iter().any(|p| !matches!(p, Part::Text { .. }));
                let reference = match self.entries[index].meta.result_ref(&call_id) {
                    // Capped at ingest: the whole output is archived already.
                    Some(existing) => existing.clone(),
                    None if has_media => {
                        let part = self.entries[index].message.parts[part_index].clone();
                        self.push_archive(ArchiveItem::Messages {
                            messages: vec![Message::new(Role::Tool, vec![part])],
                        })
                    }
                    None => self.push_archive(ArchiveItem::ToolResult {
                        call_id: call_id.clone(),
                        content: text,
                    }),
                };
                let mut placeholder = format!(
                    "{CLEARED_PREFIX}: {} output of {tokens} tokens; the full output is archived at {reference}]",
                    name.as_deref().unwrap_or("tool")
                );
                if let Some(preview) = preview {
                    placeholder.push_str(&format!("\nPreview:\n{preview}…"));
                }
                let entry = &mut self.entries[index];
                if let Part::ToolResult { content, .. } = &mut entry.message.parts[part_index] {
                    *content = vec![Part::text(placeholder)];
                }
                mark_rewritten(entry, &reference);
                cleared_calls.push(call_id);
                changed = true;
            }
            if clear_inputs
                && !cleared_calls.is_empty()
                && let Some(assistant) = last_assistant
            {
                changed |= self.clear_call_inputs(assistant, &cleared_calls);
            }
        }
        changed
    }

    fn clear_call_inputs(&mut self, assistant: usize, calls: &[String]) -> bool {
        let original = self.entries[assistant].message.clone();
        let needs = original
            .tool_calls()
            .any(|(id, _, args)| calls.iter().any(|c| c == id) && args.len() > 2);
        if !needs {
            return false;
        }
        let marker = self.push_archive(ArchiveItem::Messages {
            messages: vec![original],
        });
        let entry = &mut self.entries[assistant];
        for part in &mut entry.message.parts {
            if let Part::ToolCall { id, arguments, .. } = part
                && calls.iter().any(|c| c == id)
            {
                *arguments =
                    serde_json::json!({ "_cleared": format!("arguments archived at {marker}") })
                        .to_string();
            }
        }
        mark_rewritten(entry, &marker);
        true
    }

    fn cap_results(&mut self, max_chars: usize, keep_rounds: usize, historical_only: bool) -> bool {
        let mut protect = self.protected_start(keep_rounds);
        if historical_only && let Some(turn) = self.current_turn_start() {
            protect = protect.min(turn);
        }
        let mut changed = false;
        for index in self.conversation_start()..protect {
            if self.entries[index].meta.pinned || !self.entries[index].message.has_tool_results() {
                continue;
            }
            for part_index in 0..self.entries[index].message.parts.len() {
                let Some((call_id, content)) =
                    self.entries[index].message.parts[part_index].as_tool_result()
                else {
                    continue;
                };
                let text = join_text(content).into_owned();
                if text.chars().count() <= max_chars
                    || text.starts_with(CLEARED_PREFIX)
                    || is_own_preview(&text, max_chars)
                {
                    continue;
                }
                let call_id = call_id.to_string();
                let reference = match self.entries[index].meta.result_ref(&call_id) {
                    Some(existing) => existing.clone(),
                    None => self.push_archive(ArchiveItem::ToolResult {
                        call_id: call_id.clone(),
                        content: text.clone(),
                    }),
                };
                let preview = head_tail_preview(&text, max_chars / 2, max_chars / 2, &reference);
                if self.engine.config.compact_at_request_start {
                    // Only such a policy announces each cut result (the others announce
                    // the compaction): the counts are taken only for its events.
                    self.cut_results.push(super::CutResult {
                        call_id: call_id.clone(),
                        reference: reference.clone(),
                        tokens_before: u64::from(self.model().text_tokens(&text)),
                        tokens_after: u64::from(self.model().text_tokens(&preview)),
                    });
                }
                let entry = &mut self.entries[index];
                if let Part::ToolResult { content, .. } = &mut entry.message.parts[part_index] {
                    *content = vec![Part::text(preview)];
                }
                entry.meta.result_refs.push((call_id, reference.clone()));
                mark_rewritten(entry, &reference);
                changed = true;
            }
        }
        changed
    }

    /// Cuts user texts over `max_chars` to a head + tail, archiving the message whole
    /// (CowAgent's aggressive trim). The current request is cut too: a user text alone can
    /// overflow the window.
    fn cap_user_texts(&mut self, max_chars: usize) -> bool {
        let mut changed = false;
        for index in self.conversation_start()..self.entries.len() {
            let message = &self.entries[index].message;
            if self.entries[index].meta.pinned
                || message.role != Role::User
                || message.has_tool_results()
                || !message.parts.iter().any(|p| {
                    p.as_text().is_some_and(|t| {
                        t.chars().count() > max_chars && !is_own_preview(t, max_chars)
                    })
                })
            {
                continue;
            }
            let reference = self.push_archive(ArchiveItem::Messages {
                messages: vec![message.clone()],
            });
            let entry = &mut self.entries[index];
            for part in &mut entry.message.parts {
                if let Part::Text { text, .. } = part
                    && text.chars().count() > max_chars
                {
                    *text = head_tail_preview(text, max_chars / 2, max_chars / 2, &reference);
                }
            }
            mark_rewritten(entry, &reference);
            changed = true;
        }
        changed
    }

    /// Removes the oldest `count` turns, archives them and summarizes them.
    fn drop_turns(&mut self, count: usize) -> bool {
        let all = turns(&self.entries);
        if all.len() <= 1 || count == 0 {
            return false;
        }
        let count = count.min(all.len() - 1);
        let start = all[0].start.max(self.conversation_start());
        let end = all[count].start.min(self.protected_start(0));
        self.summarize_range(start, end, None)
    }

    /// Keeps per turn only the first user text and the last reply (all but the current turn).
    fn compress_turns(&mut self) -> bool {
        let all = turns(&self.entries);
        let protect = self.protected_start(0);
        let mut removed: Vec<usize> = Vec::new();
        for turn in all.iter().take(all.len().saturating_sub(1)) {
            let end = turn.end.min(protect);
            if end <= turn.start + 1 {
                continue;
            }
            let reply = (turn.start + 1..end).rev().find(|&i| {
                let m = &self.entries[i].message;
                m.role == Role::Assistant && !m.has_tool_calls() && !m.parts.is_empty()
            });
            for index in turn.start + 1..end {
                if Some(index) != reply
                    && !self.entries[index].meta.pinned
                    && !self.entries[index].meta.summary
                {
                    removed.push(index);
                }
            }
        }
        if removed.is_empty() {
            return false;
        }
        let messages: Vec<Message> = removed
            .iter()
            .map(|&i| self.entries[i].message.clone())
            .collect();
        let logs: Vec<u64> = removed
            .iter()
            .filter_map(|&i| self.entries[i].meta.log_index)
            .collect();
        let marker = self.push_archive(ArchiveItem::Messages { messages });
        self.note_archived(&logs, &marker);
        let mut keep = vec![true; self.entries.len()];
        for &index in &removed {
            keep[index] = false;
        }
        let mut index = 0;
        self.entries.retain(|_| {
            let k = keep[index];
            index += 1;
            k
        });
        // The first kept message of the compressed span names where the chains went.
        if let Some(entry) = self.entries.iter_mut().find(|e| e.message.starts_turn()) {
            entry.meta.archived.push(marker);
            entry.meta.pending_fill = true;
        }
        true
    }

    /// Keeps only the newest `keep_turns` turns (or less, down to the newest round), archiving
    /// the rest without a summary call: the hard bound of overflow recovery. It never removes
    /// the newest round, the user's latest request or pinned messages (the capsule): without
    /// them the model could not go on, so a context that still does not fit is reported as
    /// such by the caller rather than emptied.
    fn clear(&mut self, keep_turns: usize) -> bool {
        let start = self.conversation_start();
        let mut changed = false;
        // Ever harder cuts, each computed on the context the previous one left.
        for hardness in 0..3 {
            if !self.over_target() {
                break;
            }
            let all = turns(&self.entries);
            let rounds = api_rounds(&self.entries);
            let newest_round = rounds.last().map_or(self.entries.len(), |r| r.start);
            let cut = match hardness {
                0 => all
                    .len()
                    .checked_sub(keep_turns.max(1))
                    .and_then(|k| all.get(k))
                    .map(|t| t.start),
                1 => Some(self.protected_start(1)),
                _ => Some(newest_round),
            };
            let Some(mut cut) = cut else { continue };
            cut = cut.min(newest_round).min(self.entries.len());
            while cut > start && !is_safe_split(&self.entries, cut) {
                cut -= 1;
            }
            if cut <= start {
                continue;
            }
            let latest_request = self.current_turn_start();
            let stays = |index: usize, entry: &Entry| {
                entry.meta.summary || entry.meta.pinned || Some(index) == latest_request
            };
            let removed: Vec<Message> = self.entries[start..cut]
                .iter()
                .enumerate()
                .filter(|(offset, e)| !stays(start + offset, e))
                .map(|(_, e)| e.message.clone())
                .collect();
            if removed.is_empty() {
                continue;
            }
            let count = removed.len();
            let logs: Vec<u64> = self.entries[start..cut]
                .iter()
                .enumerate()
                .filter(|(offset, e)| !stays(start + offset, e))
                .filter_map(|(_, e)| e.meta.log_index)
                .collect();
            let marker = self.push_archive(ArchiveItem::Messages { messages: removed });
            self.note_archived(&logs, &marker);
            let mut notice = Entry::new(Message::user(format!(
                "[{count} earlier messages were removed to fit the context window; they are archived at {marker}]"
            )));
            notice.meta.synthetic = true;
            notice.meta.archived.push(marker);
            notice.meta.pending_fill = true;
            // Summary and pinned messages first, then the notice, then the user's latest
            // request if it was in the cut span, so it reads as the request it is.
            let mut rebuilt: Vec<Entry> = self.entries[..start].to_vec();
            let mut request = None;
            for (offset, entry) in self.entries[start..cut].iter().enumerate() {
                if Some(start + offset) == latest_request {
                    request = Some(entry.clone());
                } else if stays(start + offset, entry) {
                    rebuilt.push(entry.clone());
                }
            }
            rebuilt.push(notice);
            rebuilt.extend(request);
            rebuilt.extend(self.entries[cut..].iter().cloned());
            self.entries = rebuilt;
            changed = true;
        }
        changed
    }

    pub(super) fn finish(mut self, tokens_before: u64) -> Plan {
        self.place_capsule();
        let estimated_tokens_after = self.total();
        Plan {
            reason: self.reason,
            strategy: self.engine.config.name.clone(),
            stages: std::mem::take(&mut self.stages),
            tokens_before,
            estimated_tokens_after,
            messages_before: self.messages_before,
            messages_after: self.entries.len(),
            archive: std::mem::take(&mut self.archive),
            summaries: std::mem::take(&mut self.summaries),
            summary_spans: std::mem::take(&mut self.summary_spans),
            economics: None,
            cut_results: std::mem::take(&mut self.cut_results),
            draft: std::mem::take(&mut self.entries),
            fixed_tokens: self.fixed_tokens,
            window: self.window,
        }
    }
}

/// The capsule's message: pinned, written by the engine, and opening with the capsule's title
/// (its data is moved out of the draft's copy while a plan runs).
pub(super) fn is_capsule_entry(entry: &Entry) -> bool {
    entry.meta.capsule.is_some()
        || (entry.meta.pinned
            && entry.meta.synthetic
            && entry
                .message
                .parts
                .first()
                .and_then(Part::as_text)
                .is_some_and(|t| t.starts_with(CAPSULE_TITLE)))
}

/// Tokens of a text estimated from its length (3.5 bytes per token, a little over), for
/// messages the engine writes while planning.
fn text_tokens_estimate(text: &str) -> u64 {
    text.len() as u64 * 10 / 35 + 16
}

/// Marks an entry as rewritten: its placeholders wait for `reference`, its count is stale.
fn mark_rewritten(entry: &mut Entry, reference: &str) {
    entry.tokens = None;
    entry.estimated = None;
    entry.meta.pending_fill = true;
    if !entry.meta.archived.iter().any(|r| r == reference) {
        entry.meta.archived.push(reference.to_string());
    }
}

/// Calls `visit` with every piece of text the model reads in `message`: text, readable
/// reasoning, tool-call arguments and tool results.
fn visit_readable_text(message: &Message, visit: &mut dyn FnMut(&str)) {
    fn visit_part(part: &Part, visit: &mut dyn FnMut(&str)) {
        match part {
            Part::Text { text, .. }
            | Part::Reasoning {
                text: Some(text), ..
            } => visit(text),
            Part::ToolCall { arguments, .. } => visit(arguments),
            Part::ToolResult { content, .. } => {
                for inner in content {
                    visit_part(inner, visit);
                }
            }
            _ => {}
        }
    }
    for each in &message.parts {
        visit_part(each, visit);
    }
}
