//! The managed context: the messages the model will see, with the engine's bookkeeping.

use serde::{Deserialize, Serialize};

use crate::capsule::Capsule;
use crate::model::{Message, Role};
use crate::summary::Summary;
use crate::tokens::TokenModel;

/// Engine bookkeeping for one message of the context. It never reaches the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryMeta {
    /// Never summarized, masked or trimmed (system rules, the user's stated constraints).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// Position of the original message in the session log (0-based), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_index: Option<u64>,
    /// Archive references whose content this message stands in for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub archived: Vec<String>,
    /// Tool-call id → archive reference of the whole output, for results cut to a preview.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub result_refs: Vec<(String, String)>,
    /// True for messages the engine wrote (summaries, placeholders, reminders).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub synthetic: bool,
    /// True for the message that carries the running summary.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub summary: bool,
    /// On a summary message: how many original messages it stands for, those of the earlier
    /// summaries it merged included (0 where unknown, e.g. a context saved before it was kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub summarized: u64,
    /// Set on the session capsule's message: the data it was rendered from, which travels
    /// with it through every store (see [`crate::capsule`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capsule: Option<Box<Capsule>>,
    /// Placeholders in this message wait for archive references (between plan and apply).
    #[serde(skip)]
    pub pending_fill: bool,
}

impl EntryMeta {
    /// The archive reference of tool call `call_id`'s whole output, when it was cut before.
    pub fn result_ref(&self, call_id: &str) -> Option<&String> {
        self.result_refs
            .iter()
            .find(|(id, _)| id == call_id)
            .map(|(_, reference)| reference)
    }
}

/// One message of the context plus its bookkeeping and cached token count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub message: Message,
    #[serde(default)]
    pub meta: EntryMeta,
    /// Cached token count of `message` (per-message overhead included).
    #[serde(skip)]
    pub tokens: Option<u32>,
    /// A size estimate standing in for `tokens` while a compaction is planned.
    #[serde(skip)]
    pub estimated: Option<u32>,
}

impl Entry {
    /// An entry for a message, not yet counted.
    pub fn new(message: Message) -> Entry {
        Entry {
            message,
            meta: EntryMeta::default(),
            tokens: None,
            estimated: None,
        }
    }

    /// The message's token count, counted once.
    pub fn tokens(&mut self, model: &TokenModel) -> u32 {
        *self
            .tokens
            .get_or_insert_with(|| model.message_tokens(&self.message))
    }

    /// The count to plan with: exact when known, else the estimate when one was made, else
    /// counted now.
    pub fn planning_tokens(&mut self, model: &TokenModel) -> u32 {
        match (self.tokens, self.estimated) {
            (Some(count), _) | (None, Some(count)) => count,
            (None, None) => self.tokens(model),
        }
    }
}

/// The managed context of one session: what the model sees before request-time injections.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextState {
    /// Instructions and conversation, oldest first (a summary, when present, is one of them).
    pub entries: Vec<Entry>,
    /// The structured summary of everything compacted so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// Number of compactions applied.
    #[serde(default)]
    pub compactions: u32,
    /// Number of messages ever appended (the session log length).
    #[serde(default)]
    pub appended: u64,
    /// Exact tokens of `entries[..counted]`, kept current by [`ContextState::sync_tokens`].
    #[serde(skip)]
    total_tokens: u64,
    /// How many leading entries `total_tokens` covers.
    #[serde(skip)]
    counted: usize,
    /// Estimated tokens of `entries[counted..estimated]` (see [`ContextState::approx_tokens`]).
    #[serde(skip)]
    pending_estimate: u64,
    #[serde(skip)]
    estimated: usize,
    /// Weight ([`message_weight`]) and exact tokens of every entry counted so far: the
    /// session's own ratio, which calibrates the estimate to its model's tokenizer.
    #[serde(skip)]
    calibration_weight: u64,
    #[serde(skip)]
    calibration_tokens: u64,
    /// After a plan found nothing worth doing, token triggers stay quiet below this size.
    #[serde(skip)]
    hold_below: u64,
    /// Assistant messages appended so far, and that count when the hold began: a new API
    /// round slides the protected recent rounds, so a compaction may make progress again.
    #[serde(skip)]
    rounds_appended: u64,
    #[serde(skip)]
    hold_rounds: Option<u64>,
    /// The provider's count of the last request sent (see [`ContextState::anchor_usage`]).
    #[serde(skip)]
    anchor: Option<UsageAnchor>,
    /// Reactive compactions since the current turn's user message (Agentrail's
    /// `maxReactiveCompactionsPerRequest` bounds them).
    #[serde(default)]
    pub reactive_in_turn: u32,
    /// The request size at the last step, and the mean growth per step since (see
    /// [`ContextState::observe_step`]).
    ///
    /// Kept with the state (like the last compaction's size below): the economic trigger
    /// depends on them, and a session that moves to another gateway must compact as it
    /// would have on this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_step_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    step_growth: Option<u64>,
    /// The request size the last compaction left (drives the economic trigger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_compaction_after: Option<u64>,
}

/// What the economic trigger learned of a session: kept with the session's state, so that a
/// session moving to another gateway compacts as it would have on this one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerMemory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_step_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_growth: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_compaction_after: Option<u64>,
}

impl TriggerMemory {
    /// Nothing learned yet.
    pub fn is_empty(&self) -> bool {
        *self == TriggerMemory::default()
    }
}

/// What the provider reported for a request: the exact tokens of `entries[..len]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UsageAnchor {
    len: usize,
    tokens: u64,
}

impl ContextState {
    /// A context holding `messages`.
    pub fn from_messages(messages: impl IntoIterator<Item = Message>) -> ContextState {
        let mut state = ContextState::default();
        for message in messages {
            state.push(message);
        }
        state
    }

    /// Appends a message as it arrives.
    pub fn push(&mut self, message: Message) {
        let mut entry = Entry::new(message);
        entry.meta.log_index = Some(self.appended);
        self.appended += 1;
        if entry.message.role == Role::Assistant {
            self.rounds_appended += 1;
        }
        if entry.message.starts_turn() {
            self.reactive_in_turn = 0;
        }
        self.entries.push(entry);
    }

    /// The messages, in order.
    pub fn messages(&self) -> impl ExactSizeIterator<Item = &Message> {
        self.entries.iter().map(|e| &e.message)
    }

    /// A copy of the messages.
    pub fn to_messages(&self) -> Vec<Message> {
        self.messages().cloned().collect()
    }

    /// The session capsule, when the policy keeps one and a compaction has written it.
    pub fn capsule(&self) -> Option<&Capsule> {
        self.entries.iter().find_map(|e| e.meta.capsule.as_deref())
    }

    /// The session capsule's data, to change it (an operator's edit of the standing
    /// orders); its text is rendered again at the next compaction.
    pub fn capsule_mut(&mut self) -> Option<&mut Capsule> {
        self.entries
            .iter_mut()
            .find_map(|e| e.meta.capsule.as_deref_mut())
    }

    /// Counts the entries appended since the last call exactly and returns the total:
    /// O(new entries).
    pub fn sync_tokens(&mut self, model: &TokenModel) -> u64 {
        if self.counted > self.entries.len() {
            self.invalidate_totals();
        }
        for entry in &mut self.entries[self.counted..] {
            let fresh = entry.tokens.is_none();
            let tokens = u64::from(entry.tokens(model));
            if fresh {
                self.calibration_weight += message_weight(&entry.message);
                self.calibration_tokens += tokens;
            }
            self.total_tokens += tokens;
        }
        self.counted = self.entries.len();
        self.estimated = self.counted;
        self.pending_estimate = 0;
        self.total_tokens
    }

    /// The total with entries not yet counted exactly estimated from their size, at the
    /// session's own ratio of exact tokens to [`message_weight`] plus 10 %: O(new entries), no tokenizer call.
    /// Callers count exactly ([`ContextState::sync_tokens`]) when a decision is close.
    pub fn approx_tokens(&mut self) -> u64 {
        if let Some(anchor) = self.anchor
            && anchor.len <= self.entries.len()
        {
            // The provider counted everything up to the last request: only what arrived
            // since (typically one round) is estimated.
            let (weight, tokens) = (self.calibration_weight, self.calibration_tokens);
            return anchor.tokens
                + self.entries[anchor.len..]
                    .iter()
                    .map(|e| match e.tokens {
                        Some(exact) => u64::from(exact),
                        None => estimate_tokens(message_weight(&e.message), weight, tokens),
                    })
                    .sum::<u64>();
        }
        if self.estimated > self.entries.len() || self.counted > self.entries.len() {
            self.invalidate_totals();
        }
        let (weight, tokens) = (self.calibration_weight, self.calibration_tokens);
        for entry in &self.entries[self.estimated.max(self.counted)..] {
            self.pending_estimate += match entry.tokens {
                Some(exact) => u64::from(exact),
                None => estimate_tokens(message_weight(&entry.message), weight, tokens),
            };
        }
        self.estimated = self.entries.len();
        self.total_tokens + self.pending_estimate
    }

    /// Records what the provider reported for the last request: `tokens` is the exact size of
    /// `entries[..len]` (the request's input tokens minus what the request carried outside
    /// the context, such as tool schemas). From then on [`ContextState::approx_tokens`]
    /// estimates only the messages appended since, and the reported figure calibrates the
    /// ratio of exact tokens to weight of the session, without a tokenizer call. O(messages since the
    /// previous report).
    ///
    /// Ignored when `len` is past the end of the context; forgotten when the context is
    /// rewritten ([`ContextState::replace_entries`], [`ContextState::invalidate_totals`]).
    pub fn anchor_usage(&mut self, len: usize, tokens: u64) {
        if len > self.entries.len() {
            return;
        }
        let (from, before) = match self.anchor {
            Some(previous) if previous.len <= len && previous.tokens <= tokens => {
                (previous.len, previous.tokens)
            }
            _ => (0, 0),
        };
        let mut exact = 0u64;
        let mut unknown_weight = 0u64;
        for entry in &self.entries[from..len] {
            match entry.tokens {
                Some(count) => exact += u64::from(count),
                None => unknown_weight += message_weight(&entry.message),
            }
        }
        let unknown_tokens = (tokens - before).saturating_sub(exact);
        // A report that implies an implausible ratio (another request's usage, request-time
        // additions dominating a tiny delta) calibrates nothing.
        if unknown_weight >= 64 * WEIGHT_PER_TOKEN / 4 && unknown_tokens > 0 {
            let ratio = unknown_weight as f64 / unknown_tokens as f64;
            if PLAUSIBLE_WEIGHT_PER_TOKEN.contains(&ratio) {
                self.calibration_weight += unknown_weight;
                self.calibration_tokens += unknown_tokens;
            }
        }
        self.anchor = Some(UsageAnchor { len, tokens });
    }

    /// Whether the provider's count of the last request anchors the total (see
    /// [`ContextState::anchor_usage`]).
    pub fn anchored(&self) -> bool {
        self.anchor.is_some_and(|a| a.len <= self.entries.len())
    }

    /// Whether a token trigger may plan again at `tokens` (see [`ContextState::hold_retries`]).
    pub fn retry_allowed(&self, tokens: u64) -> bool {
        tokens >= self.hold_below
            || self
                .hold_rounds
                .is_some_and(|held| self.rounds_appended > held)
    }

    /// Keeps token triggers quiet until the context reaches `tokens + growth` or a new API
    /// round begins (the same compaction repeating without progress is a loop).
    pub fn hold_retries(&mut self, tokens: u64, growth: u64) {
        self.hold_below = tokens + growth.max(1);
        self.hold_rounds = Some(self.rounds_appended);
    }

    /// Keeps token triggers quiet until the context has grown to `tokens + growth`, however
    /// many rounds arrive: for compactions that keep ending over the trigger.
    pub fn hold_until_growth(&mut self, tokens: u64, growth: u64) {
        self.hold_below = tokens + growth.max(1);
        self.hold_rounds = None;
    }

    /// Keeps token triggers quiet until the context reaches `level`, however many rounds
    /// arrive: for a compaction that could not get below its hysteresis level.
    pub fn hold_until_level(&mut self, level: u64) {
        self.hold_below = level;
        self.hold_rounds = None;
    }

    /// Records the request size of a step. Growth between consecutive steps (a step that
    /// shrank was a compaction, and only resets the base) feeds a running mean.
    pub fn observe_step(&mut self, tokens: u64) {
        if let Some(last) = self.last_step_tokens
            && tokens > last
        {
            let sample = tokens - last;
            self.step_growth = Some(match self.step_growth {
                Some(mean) => (mean * 3 + sample) / 4,
                None => sample,
            });
        }
        self.last_step_tokens = Some(tokens);
    }

    /// What the economic trigger learned of this session (growth per step, the last
    /// compaction's size), for stores to keep with the state.
    pub fn trigger_memory(&self) -> TriggerMemory {
        TriggerMemory {
            last_step_tokens: self.last_step_tokens,
            step_growth: self.step_growth,
            last_compaction_after: self.last_compaction_after,
        }
    }

    /// Restores what [`ContextState::trigger_memory`] returned.
    pub fn set_trigger_memory(&mut self, memory: TriggerMemory) {
        self.last_step_tokens = memory.last_step_tokens;
        self.step_growth = memory.step_growth;
        self.last_compaction_after = memory.last_compaction_after;
    }

    /// The request size the last compaction left, if one ran since the state was loaded.
    pub fn last_compaction_after(&self) -> Option<u64> {
        self.last_compaction_after
    }

    /// Records the request size a compaction left.
    pub fn set_last_compaction_after(&mut self, tokens: u64) {
        self.last_compaction_after = Some(tokens);
    }

    /// Tokens of the leading system messages: the part of the context every compaction keeps
    /// byte for byte (estimated where not counted).
    pub fn leading_system_tokens(&self) -> u64 {
        self.entries
            .iter()
            .take_while(|entry| entry.message.role == crate::model::Role::System)
            .map(|entry| self.estimate_entry(entry))
            .sum()
    }

    /// The mean growth of the request per step seen so far.
    pub fn step_growth(&self) -> Option<u64> {
        self.step_growth
    }

    /// Whether token triggers are being held (see [`ContextState::hold_retries`]).
    pub fn holding(&self, tokens: u64) -> bool {
        !self.retry_allowed(tokens)
    }

    /// Forgets the running total after entries were rewritten (counts per entry survive where
    /// the entry did).
    pub fn invalidate_totals(&mut self) {
        self.anchor = None;
        self.total_tokens = 0;
        self.counted = 0;
        self.pending_estimate = 0;
        self.estimated = 0;
    }

    /// Removes the newest entry (a client replaced its newest message) and recounts lazily.
    /// Unlike a rewrite ([`ContextState::replace_entries`]), what the session learned of its
    /// steps stands: the last step's size, the growth per step, a hold on retries.
    pub fn pop_newest(&mut self) -> Option<Entry> {
        let entry = self.entries.pop()?;
        self.invalidate_totals();
        Some(entry)
    }

    /// Replaces all entries (after a compaction) and recounts lazily.
    pub fn replace_entries(&mut self, entries: Vec<Entry>) {
        self.entries = entries;
        self.hold_below = 0;
        self.hold_rounds = None;
        // The next step grows from the compacted size, not from the size before.
        self.last_step_tokens = None;
        self.invalidate_totals();
    }
}

impl ContextState {
    /// An entry's count if known, else its estimate at the session's ratio.
    pub fn estimate_entry(&self, entry: &Entry) -> u64 {
        match entry.tokens {
            Some(count) => u64::from(count),
            None => estimate_tokens(
                message_weight(&entry.message),
                self.calibration_weight,
                self.calibration_tokens,
            ),
        }
    }

    /// Counts exactly every `stride`-th entry not counted yet (by log position), so the
    /// ratio of exact tokens to weight stays calibrated without tokenizing everything.
    pub fn sample_exact(&mut self, model: &TokenModel, stride: u64) {
        let mut weight = 0;
        let mut tokens = 0;
        for entry in &mut self.entries {
            // The capsule is large and rewritten at most once per compaction: its size
            // estimate stands until the provider's next report counts it.
            if entry.tokens.is_none()
                && entry.meta.capsule.is_none()
                && entry.meta.log_index.is_none_or(|i| i % stride.max(1) == 0)
            {
                weight += message_weight(&entry.message);
                tokens += u64::from(entry.tokens(model));
            }
        }
        self.calibration_weight += weight;
        self.calibration_tokens += tokens;
        // The entries did not change: a usage anchor stays valid, only the running
        // estimates are recomputed at the new ratio.
        let anchor = self.anchor.take();
        self.invalidate_totals();
        self.anchor = anchor;
    }
}

/// Weight units per estimated token: [`message_weight`] keeps quarter-tokens, in integers.
const WEIGHT_PER_TOKEN: u64 = 4;

/// Weight per exact token that a provider's report may imply and still calibrate: the
/// estimate within a factor of about three of the truth either way. Anything else is another
/// request's usage, or request-time additions dominating a tiny delta.
const PLAUSIBLE_WEIGHT_PER_TOKEN: std::ops::RangeInclusive<f64> = 1.3..=12.0;

/// Estimated tokens of a message of `weight`, at the session's observed ratio (`seen_weight`
/// per `seen_tokens`) plus a 10 % margin or, before anything was counted, at the
/// content-aware estimate itself (an o200k count; the trigger's own margin covers the rest),
/// plus a per-message framing allowance.
fn estimate_tokens(weight: u64, seen_weight: u64, seen_tokens: u64) -> u64 {
    let estimate = if seen_weight >= 500 * WEIGHT_PER_TOKEN && seen_tokens > 0 {
        weight * seen_tokens * 11 / (seen_weight * 10)
    } else {
        weight / WEIGHT_PER_TOKEN
    };
    // Small messages carry proportionally more framing (role, ids) than the sampled average.
    estimate + 12
}

/// A message's size for estimating its tokens without a tokenizer: the content-aware o200k
/// estimate of its readable content ([`crate::tokens::estimate::estimate_o200k`], about
/// 240 MB/s), in quarter-tokens. Bytes would not do: one session's bytes-per-token ratio
/// (prose, about 4) badly underestimates denser output, such as numbers one per line or
/// hashes (about 2), so a round of such output could overflow the window before the
/// estimate reached the trigger.
pub fn message_weight(message: &Message) -> u64 {
    let tokens: f64 = message.parts.iter().map(part_tokens).sum();
    (tokens * WEIGHT_PER_TOKEN as f64).ceil() as u64
}

fn part_tokens(part: &crate::model::Part) -> f64 {
    use crate::model::Part;
    use crate::tokens::estimate::estimate_o200k;
    // The framing of a call or result (its type, the id's field name): a few tokens.
    const FRAMING: f64 = 4.0;
    match part {
        Part::Text { text, .. } => estimate_o200k(text),
        Part::ToolCall {
            id,
            name,
            arguments,
            ..
        } => estimate_o200k(id) + estimate_o200k(name) + estimate_o200k(arguments) + FRAMING,
        Part::ToolResult {
            call_id, content, ..
        } => content.iter().map(part_tokens).sum::<f64>() + estimate_o200k(call_id) + FRAMING,
        Part::Reasoning { text, .. } => text.as_deref().map_or(FRAMING, estimate_o200k),
        // Images are billed by size, not content: a generous flat figure keeps the estimate
        // safe (what 6,000 bytes of prose would be).
        Part::Data { .. } => 1_715.0,
        Part::Opaque { value } => estimate_o200k(&value.to_string()),
    }
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::Profiles;

    #[test]
    fn token_total_is_incremental_and_survives_rewrites() {
        let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
        let mut state = ContextState::from_messages([Message::user("hello there")]);
        let first = state.sync_tokens(&model);
        state.push(Message::assistant("general kenobi"));
        let second = state.sync_tokens(&model);
        assert_eq!(
            second - first,
            u64::from(model.message_tokens(&Message::assistant("general kenobi")))
        );
        let entries = state.entries[1..].to_vec();
        state.replace_entries(entries);
        assert_eq!(state.sync_tokens(&model), second - first);
        assert_eq!(state.entries[0].meta.log_index, Some(1));
    }

    #[test]
    fn the_estimate_tracks_the_session_ratio_without_counting() {
        let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
        let mut state = ContextState::default();
        for i in 0..40 {
            state.push(Message::user(format!(
                "message number {i} with some ordinary english words in it"
            )));
        }
        let exact = state.sync_tokens(&model);
        for i in 0..40 {
            state.push(Message::assistant(format!(
                "reply number {i} with some ordinary english words in it"
            )));
        }
        let approx = state.approx_tokens();
        assert!(
            state.entries[40..].iter().all(|e| e.tokens.is_none()),
            "approx must not count"
        );
        let exact_all = state.sync_tokens(&model);
        let error = approx as f64 / exact_all as f64;
        // Conservative by design (a margin and a framing allowance), never below the truth.
        assert!(
            (1.0..1.6).contains(&error),
            "estimate {approx} vs exact {exact_all}"
        );
        assert!(exact < exact_all);
    }
}
