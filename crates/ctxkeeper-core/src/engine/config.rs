//! Typed, documented configuration of every compaction mechanism, loadable from TOML.
//!
//! A policy is a budget (when to act and how far down to go) plus an ordered cascade of
//! stages, cheapest first. Parameter names follow the systems they come from; the camelCase
//! spellings of those systems are accepted as aliases (`triggerTokens`, `keepMessages`, …).
//!
//! ```
//! use ctxkeeper_core::engine::PolicyConfig;
//!
//! let policy = PolicyConfig::from_toml_str(r#"
//!     name = "mine"
//!     trigger_ratio = 0.7
//!     target_ratio = 0.4
//!
//!     [ingest.tool_result]
//!     max_tokens = 2000
//!
//!     [[stages]]
//!     kind = "mask"
//!     keep_rounds = 3
//!
//!     [[stages]]
//!     kind = "summarize"
//! "#).unwrap();
//! assert_eq!(policy.stages.len(), 2);
//! assert!(PolicyConfig::from_toml_str("trigger_ratio = 0.95").is_err());
//! ```

use serde::{Deserialize, Serialize};

use super::overlay::PolicyOverlay;
use crate::capsule::CapsuleConfig;
use crate::model::{Message, Role};
use crate::summary::SummarySchema;
use crate::tokens::profiles::DEFAULT_NAME;
use crate::tokens::{ModelProfile, Profiles};

/// A whole context policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// The policy's name in reports and events.
    pub name: String,
    /// Compaction starts when the request (instructions + summary + context + tool schemas)
    /// exceeds this share of the window. At most 0.9: the rest is reserved for the summary
    /// call itself. `None` disables the ratio trigger.
    pub trigger_ratio: Option<f64>,
    /// Compaction starts above this many tokens, whatever the window.
    #[serde(alias = "triggerTokens", alias = "max_total_tokens")]
    pub trigger_tokens: Option<u64>,
    /// Compaction starts above this many messages in the context.
    #[serde(alias = "triggerMessages")]
    pub trigger_messages: Option<usize>,
    /// Compaction starts above this many turns (`agent_max_context_turns`).
    #[serde(alias = "agent_max_context_turns")]
    pub trigger_turns: Option<usize>,
    /// The proactive triggers (tokens, messages, turns) never fire while the session history
    /// holds fewer messages (`minMessages`; instructions and, at a request start, the user's
    /// new message apart); the reactive tiers and the per-call stages are not held back.
    #[serde(alias = "minMessages")]
    pub min_messages: usize,
    /// Proactive compaction (the token, message and turn triggers) runs only at the start of
    /// a request, when the newest message is the user's own (not a tool result), never
    /// inside the agent's tool loop, where only the reactive tiers and overflow recovery
    /// compact (Agentrail's request-boundary compaction). Its events say which layer ran:
    /// `context_compaction_start` / `context_compaction_end` around a request-boundary (or
    /// manual) compaction only, one `compaction` event for a compaction inside a request,
    /// and `tool_result_truncated` per result the per-call stages cut.
    pub compact_at_request_start: bool,
    /// The context window assumed for a model the profile table does not know (Agentrail's
    /// `contextWindow` default: 200,000); `None` keeps the table's default profile (128,000).
    /// A window the user states (`--window`, `[models."NAME"]`, `[models.default]`) wins.
    pub unknown_model_window: Option<u64>,
    /// Where request-time context (the gateway's `context_providers`, the library's
    /// `ContextManager::add_provider`) goes: after the history (the default: the cached
    /// prefix holds) or before it, right after the leading instructions (Agentrail's context
    /// providers, prepended to the session history).
    pub provider_placement: ProviderPlacement,
    /// A compaction goes down to this share of the window (stages stop once below it).
    /// Also known as the reserve: what is kept verbatim after summarizing.
    #[serde(alias = "reserve_ratio")]
    pub target_ratio: f64,
    /// A compaction must remove at least this many tokens or it is not worth breaking the
    /// provider's prompt cache (Anthropic's `clear_at_least`).
    pub clear_at_least: u64,
    /// Hysteresis: a compaction brings the request to at most this share of the trigger, so
    /// that the next one is several steps away (`None`: nine tenths of the trigger). When what
    /// must stay (the tool schemas, the instructions, the capsule, the newest round) is above
    /// that level, the compaction keeps only the newest round and the trigger is held until
    /// the request nears the window: compacting again earlier would not get any lower.
    pub hysteresis: Option<f64>,
    /// The most recent API rounds never touched by any stage.
    #[serde(alias = "preserveRecentApiRounds")]
    pub keep_recent_rounds: usize,
    /// Work done on every message as it enters the context.
    pub ingest: IngestConfig,
    /// The cascade, cheapest first.
    pub stages: Vec<Stage>,
    /// Reactive tiers driven by the provider's reported usage.
    pub reactive: Option<ReactiveConfig>,
    /// Recovery when the provider says the context is too long.
    pub overflow: OverflowConfig,
    /// Summary schema, template and prompt.
    pub summary: SummaryConfig,
    /// Request-time budget notice shown to the agent.
    pub budget_notice: Option<BudgetNoticeConfig>,
    /// The session capsule (the user's words, the files touched, the plan, the open problem),
    /// pinned after the instructions and kept across compactions; `None` leaves it out.
    pub capsule: Option<CapsuleConfig>,
    /// Messages pinned as they arrive (never summarized, masked or trimmed); `[policy.pin]`.
    #[serde(default)]
    pub pin: PinRules,
    /// How the engine counts messages it has not counted yet.
    pub accounting: Accounting,
    /// Files of a seed system's archive layout, written beside ctxkeeper's own.
    #[serde(default)]
    pub archive: ArchiveLayout,
    /// How a stored session comes back after a restart, and how long it is kept.
    #[serde(default)]
    pub session: SessionPolicy,
    /// Long-term memory: whether a host that has it flushes facts to it before compacting
    /// (`[policy.memory]`).
    #[serde(default)]
    pub memory: MemoryPolicy,
    /// Compact when it pays on billed input rather than at a fixed share of the window
    /// (`[policy.cost]`; `None`: the token trigger is the fixed `trigger_ratio` /
    /// `trigger_tokens`).
    #[serde(default)]
    pub cost: Option<CostRule>,
}

/// How a stored session resumes, and how long an idle one is kept (CowAgent's session
/// persistence).
///
/// ```toml
/// [policy.session]
/// restore_recent_turns = 20   # restore max(3, 20 / 6) = 3 turns, text only
/// retention_days = 30         # sessions idle for 30 days are removed
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionPolicy {
    /// On resume, keep only the last `max(3, N / 6)` turns, each reduced to its user text
    /// and final reply (CowAgent: N = `agent_max_context_turns`, 20). `None` resumes the
    /// whole saved context.
    pub restore_recent_turns: Option<usize>,
    /// Sessions not updated for this many days are removed (CowAgent: 30): the default age
    /// of `ctxkeeper sessions gc --policy NAME`, and swept hourly by `ctxkeeper serve`.
    pub retention_days: Option<u32>,
}

/// Long-term memory (`MEMORY.md`, `memory/YYYY-MM-DD.md`) as the policy wants it from a host
/// that offers it (the gateway; the library attaches memory explicitly with
/// `ContextManager::with_memory`).
///
/// ```toml
/// [policy.memory]
/// flush_before_compact = true   # Harness's flushBeforeCompact
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryPolicy {
    /// Before a compaction summarizes, the durable facts of what it removes (decisions, file
    /// paths, errors, the user's stated constraints) go to today's daily memory file.
    #[serde(alias = "flushBeforeCompact")]
    pub flush_before_compact: bool,
}

impl PolicyConfig {
    /// The context window of a model whose profile `profiles` resolved to `profile`: the
    /// profile's own, except for a model the table does not know (the default profile, left
    /// as built in), which gets the policy's `unknown_model_window` when it sets one.
    ///
    /// ```
    /// use ctxkeeper_core::engine::presets;
    /// use ctxkeeper_core::tokens::Profiles;
    ///
    /// let profiles = Profiles::builtin();
    /// let agentrail = presets::lookup("agentrail").unwrap();
    /// let default = presets::lookup("default").unwrap();
    /// let unknown = profiles.lookup("my-own-model");
    /// assert_eq!(agentrail.window_for(&unknown, &profiles), 200_000);
    /// assert_eq!(default.window_for(&unknown, &profiles), 128_000);
    /// // A known model keeps its own window, and so does a default the user configured.
    /// assert_eq!(agentrail.window_for(&profiles.lookup("gpt-4o"), &profiles), 128_000);
    /// let configured = Profiles::from_toml_str("[models.default]\ncontext_window = 64000").unwrap();
    /// assert_eq!(agentrail.window_for(&configured.lookup("my-own-model"), &configured), 64_000);
    /// ```
    pub fn window_for(&self, profile: &ModelProfile, profiles: &Profiles) -> u64 {
        let unknown = profile.name == DEFAULT_NAME && !profiles.fallback_configured();
        match self.unknown_model_window {
            Some(window) if unknown => window,
            _ => profile.context_window,
        }
    }

    /// Whether the policy wants long-term memory: it flushes facts before compacting, or its
    /// summaries go to memory (`summary.placement = "memory"`), where they would otherwise be
    /// lost.
    pub fn wants_memory(&self) -> bool {
        self.memory.flush_before_compact || self.summary.placement == SummaryPlacement::Memory
    }
}

impl SessionPolicy {
    /// The turns a resume keeps under `restore_recent_turns = N`: `max(3, N / 6)`.
    pub fn restored_turns(&self) -> Option<usize> {
        self.restore_recent_turns.map(|n| (n / 6).max(3))
    }
}

/// Files a seed system writes to its archive, written beside ctxkeeper's own
/// (`context.jsonl`, `tool_result-<id>.txt`, `data/<sha256>.<ext>`) so that tools built for
/// that system find what they expect. The summary message then names the seed's file.
///
/// ```toml
/// [policy.archive]
/// group_files = true        # ReMe: <chat_id>_<g>.json per summarized group
/// compaction_files = true   # Agentrail: messages.compactions/<id>.jsonl per compaction
/// tool_results_dir = true   # Agentrail: tool-results/<toolCallId>.txt per capped output
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArchiveLayout {
    /// Each summarized group's original messages also go to `<chat_id>_<g>.json` (a JSON
    /// array; `g` counts from 1 as in the group's "Part g/n" message), with a fresh
    /// `chat_id` per compaction so no earlier group is overwritten (ReMe).
    pub group_files: bool,
    /// The messages a request-boundary compaction summarized also go to
    /// `messages.compactions/<id>.jsonl`, one message per line (Agentrail); compactions
    /// inside a turn (reactive tiers, overflow recovery) do not write one.
    pub compaction_files: bool,
    /// The whole output of a capped tool result goes to `tool-results/<toolCallId>.txt` in
    /// the session's folder (Agentrail's `compactToolResults`) instead of
    /// `tool_result-<toolCallId>.txt`; the id becomes a file name only through the archive's
    /// sanitizing, never a path outside that folder.
    pub tool_results_dir: bool,
}

/// The economic trigger: compact when the tokens a compaction sheds pay for the prompt cache it
/// breaks.
///
/// Every compaction rewrites what follows the stable prefix (tool schemas and system prompt),
/// and the provider bills that rewrite as a cache write; between compactions each step re-reads
/// the whole context at the cache-read price. Carrying `x` more tokens costs `x × cache_read`
/// per step, one compaction costs `rewrite` = (tokens after it − stable prefix) × `cache_write`
/// (+ the summary call), and the context grows `g` tokens per step, so the billed input per step
/// is lowest when each compaction cycle spans `sqrt(2 × rewrite × g / cache_read)` tokens (the
/// economic-order-quantity rule). The trigger is placed there, between `min_trigger_ratio` of the
/// window and the window's ceiling: a compaction that would not repay its rewrite is skipped
/// until it does (or the window forces it); a context that grows fast compacts earlier than a
/// fixed ratio would. Until the growth per step is known the fixed trigger applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CostRule {
    /// `false` turns the rule off (`[policy.cost] enabled = false`): the token trigger is the
    /// fixed one again.
    pub enabled: bool,
    /// Price of a cached input token, as a share of an uncached one (0.1 at Anthropic and
    /// OpenAI).
    pub cache_read: f64,
    /// Price of an input token written to the cache (1.25 at Anthropic for the 5-minute cache;
    /// 1.0 where writing is not billed extra).
    pub cache_write: f64,
    /// The trigger never goes below this share of the window.
    pub min_trigger_ratio: f64,
    /// What the summary call costs per token of the context it reads, in uncached-token
    /// equivalents: 0 for the extractive summarizer, about `cache_read` for a model summary
    /// built on the conversation's cached prefix.
    pub summary_call: f64,
}

impl Default for CostRule {
    fn default() -> CostRule {
        CostRule {
            enabled: true,
            cache_read: 0.1,
            cache_write: 1.25,
            min_trigger_ratio: 0.3,
            summary_call: 0.0,
        }
    }
}

impl CostRule {
    fn validate(&self) -> Result<(), ConfigError> {
        if !(self.cache_read > 0.0 && self.cache_read <= 1.0) {
            return Err(ConfigError(format!(
                "cost.cache_read must be in (0, 1], got {}",
                self.cache_read
            )));
        }
        if !(self.cache_write >= 0.0 && self.cache_write <= 10.0) {
            return Err(ConfigError(format!(
                "cost.cache_write must be in [0, 10], got {}",
                self.cache_write
            )));
        }
        if !(self.min_trigger_ratio > 0.0 && self.min_trigger_ratio <= 0.9) {
            return Err(ConfigError(format!(
                "cost.min_trigger_ratio must be in (0, 0.9], got {}",
                self.min_trigger_ratio
            )));
        }
        if !(self.summary_call >= 0.0 && self.summary_call <= 10.0) {
            return Err(ConfigError(format!(
                "cost.summary_call must be in [0, 10], got {}",
                self.summary_call
            )));
        }
        Ok(())
    }
}

/// How token counts are obtained for decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Accounting {
    /// Every message is counted with the model's tokenizer before a decision: decisions are
    /// exact, at the cost of tokenizing all new content when a trigger is near.
    #[default]
    Exact,
    /// New messages are estimated from their size at the session's own bytes-per-token ratio
    /// (learned from a sample counted exactly) plus a margin; triggers fire at 92 % of their
    /// level. Steps never wait on the tokenizer; the real size may exceed a trigger by the
    /// estimate's error (a few percent).
    Estimate,
}

impl Default for PolicyConfig {
    fn default() -> PolicyConfig {
        PolicyConfig {
            name: "custom".to_string(),
            trigger_ratio: Some(0.8),
            trigger_tokens: None,
            trigger_messages: None,
            trigger_turns: None,
            min_messages: 0,
            compact_at_request_start: false,
            unknown_model_window: None,
            provider_placement: ProviderPlacement::AfterHistory,
            target_ratio: 0.5,
            clear_at_least: 0,
            hysteresis: None,
            keep_recent_rounds: 2,
            ingest: IngestConfig::default(),
            stages: Vec::new(),
            reactive: None,
            overflow: OverflowConfig::default(),
            summary: SummaryConfig::default(),
            budget_notice: None,
            capsule: None,
            pin: PinRules::default(),
            cost: None,
            accounting: Accounting::Exact,
            archive: ArchiveLayout::default(),
            session: SessionPolicy::default(),
            memory: MemoryPolicy::default(),
        }
    }
}

/// Which arriving messages are pinned: kept verbatim through every compaction. Pinned
/// content counts as what must stay, so a rule that pins much can leave a recovery no room
/// (it then says so instead of dropping it).
///
/// ```toml
/// [policy.pin]
/// first_user_message = true          # the task as the user stated it
/// tools = ["read_spec"]              # the results of these tools
/// texts = ["IMPORTANT:"]             # any message containing one of these strings
/// roles = ["developer"]              # every message of these roles
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PinRules {
    /// The user's first request of the session (a user message that carries no tool result).
    pub first_user_message: bool,
    /// Every message of these roles.
    pub roles: Vec<Role>,
    /// The results of calls to these tools (by the name in the assistant's call).
    pub tools: Vec<String>,
    /// Any message whose text contains one of these strings (case-sensitive).
    pub texts: Vec<String>,
}

impl PinRules {
    /// Whether no rule is set.
    pub fn is_empty(&self) -> bool {
        !self.first_user_message
            && self.roles.is_empty()
            && self.tools.is_empty()
            && self.texts.is_empty()
    }

    /// Whether `message`, arriving after `earlier`, is pinned. `tool_name` names the call a
    /// tool result answers.
    pub fn pins<'m>(
        &self,
        message: &Message,
        mut earlier: impl Iterator<Item = &'m Message>,
        tool_name: impl Fn(&str) -> Option<String>,
    ) -> bool {
        if self.is_empty() {
            return false;
        }
        if self.roles.contains(&message.role) {
            return true;
        }
        if !self.tools.is_empty()
            && message
                .tool_result_ids()
                .any(|id| tool_name(id).is_some_and(|name| self.tools.contains(&name)))
        {
            return true;
        }
        if !self.texts.is_empty() {
            let text = message.text();
            if self.texts.iter().any(|t| text.contains(t.as_str())) {
                return true;
            }
        }
        self.first_user_message
            && message.role == Role::User
            && !message.has_tool_results()
            && !earlier.any(|m| m.role == Role::User && !m.has_tool_results())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.texts.iter().any(|t| t.trim().is_empty()) {
            return Err(ConfigError(
                "pin.texts: an empty pattern would pin every message".into(),
            ));
        }
        if self.tools.iter().any(|t| t.trim().is_empty()) {
            return Err(ConfigError("pin.tools: a tool name cannot be empty".into()));
        }
        Ok(())
    }
}

/// A configuration problem, with the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl PolicyConfig {
    /// Parses and validates a TOML policy.
    pub fn from_toml_str(text: &str) -> Result<PolicyConfig, ConfigError> {
        let config: PolicyConfig =
            toml::from_str(text).map_err(|err| ConfigError(err.to_string().trim().to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Applies a TOML fragment on top of this policy (a one-off override): the fragment's
    /// keys are set at every depth and every other key is kept; lists are replaced, and a
    /// `name` naming a preset starts from that preset ([`PolicyOverlay`]).
    pub fn with_overrides(&self, fragment: &str) -> Result<PolicyConfig, ConfigError> {
        PolicyOverlay::parse(fragment)?.apply(self)
    }

    /// Checks the ranges the mechanisms depend on. Every number is checked, NaN and
    /// infinities included (they fail every range), and the error names the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(ratio) = self.trigger_ratio
            && !(ratio > 0.0 && ratio <= 0.9)
        {
            return Err(ConfigError(format!(
                "trigger_ratio must be in (0, 0.9], got {ratio}: the rest of the window is reserved for the summary call"
            )));
        }
        if !(self.target_ratio >= 0.0 && self.target_ratio < 1.0) {
            return Err(ConfigError(format!(
                "target_ratio must be in [0, 1), got {}",
                self.target_ratio
            )));
        }
        if let Some(ratio) = self.trigger_ratio
            && self.target_ratio >= ratio
        {
            return Err(ConfigError(format!(
                "target_ratio ({}) must be below trigger_ratio ({ratio})",
                self.target_ratio
            )));
        }
        if let Some(reactive) = &self.reactive
            && !(reactive.micro_trigger_pct > 0.0
                && reactive.micro_trigger_pct < reactive.full_trigger_pct
                && reactive.full_trigger_pct <= 100.0)
        {
            return Err(ConfigError(format!(
                "reactive.micro_trigger_pct ({}) and reactive.full_trigger_pct ({}) must satisfy 0 < micro < full ≤ 100",
                reactive.micro_trigger_pct, reactive.full_trigger_pct
            )));
        }
        if self.unknown_model_window == Some(0) {
            return Err(ConfigError(
                "unknown_model_window must be greater than 0 (leave it out for the model table's default)".into(),
            ));
        }
        if let Some(ratio) = self.hysteresis
            && !(ratio > 0.0 && ratio < 1.0)
        {
            return Err(ConfigError(format!(
                "hysteresis must be in (0, 1), got {ratio}"
            )));
        }
        self.pin.validate()?;
        if let Some(cost) = &self.cost {
            cost.validate()?;
        }
        if self.session.retention_days == Some(0) {
            return Err(ConfigError(
                "session.retention_days must be at least 1 (leave it out to keep sessions)".into(),
            ));
        }
        if let Some(capsule) = &self.capsule {
            capsule.validate().map_err(ConfigError)?;
        }
        if let Some(instructions) = &self.summary.instructions {
            let chars = instructions.chars().count();
            if chars > MAX_SUMMARY_INSTRUCTIONS {
                return Err(ConfigError(format!(
                    "summary.instructions is {chars} characters; at most {MAX_SUMMARY_INSTRUCTIONS} are accepted (they go with every summary call)"
                )));
            }
        }
        if self.overflow.max_attempts == 0 {
            return Err(ConfigError(
                "overflow.max_attempts must be at least 1".into(),
            ));
        }
        let share = |field: &str, value: f64, range: Range| range.check(field, value);
        if let Some(cap) = &self.ingest.tool_result
            && let Some(value) = cap.max_window_share
        {
            share(
                "ingest.tool_result.max_window_share",
                value,
                Range::ABOVE_ZERO_TO_ONE,
            )?;
        }
        share(
            "overflow.shrink_factor",
            self.overflow.shrink_factor,
            Range::ABOVE_ZERO_BELOW_ONE,
        )?;
        if self.overflow.clear_from_attempt == 0 {
            return Err(ConfigError(
                "overflow.clear_from_attempt must be at least 1 (attempts count from 1)".into(),
            ));
        }
        if let Some(notice) = &self.budget_notice {
            share(
                "budget_notice.nudge_at",
                notice.nudge_at,
                Range::ABOVE_ZERO_TO_ONE,
            )?;
        }
        for (list, stages) in [
            ("stages", &self.stages),
            ("overflow.stages", &self.overflow.stages),
        ] {
            for (index, stage) in stages.iter().enumerate() {
                let field = |name: &str| format!("{list}[{index}] ({}).{name}", stage.kind());
                match stage {
                    Stage::TrimTurns { drop_fraction, .. } => {
                        share(&field("drop_fraction"), *drop_fraction, Range::ZERO_TO_ONE)?
                    }
                    Stage::Summarize {
                        keep_ratio,
                        min_ratio,
                        ..
                    } => {
                        if let Some(value) = keep_ratio {
                            share(&field("keep_ratio"), *value, Range::ZERO_BELOW_ONE)?;
                        }
                        if let Some(value) = min_ratio {
                            share(&field("min_ratio"), *value, Range::ZERO_TO_ONE)?;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// A range a share must lie in.
#[derive(Debug, Clone, Copy)]
struct Range {
    low: f64,
    low_inclusive: bool,
    high: f64,
    high_inclusive: bool,
}

impl Range {
    const ABOVE_ZERO_TO_ONE: Range = Range::new(0.0, false, 1.0, true);
    const ABOVE_ZERO_BELOW_ONE: Range = Range::new(0.0, false, 1.0, false);
    const ZERO_BELOW_ONE: Range = Range::new(0.0, true, 1.0, false);
    const ZERO_TO_ONE: Range = Range::new(0.0, true, 1.0, true);

    const fn new(low: f64, low_inclusive: bool, high: f64, high_inclusive: bool) -> Range {
        Range {
            low,
            low_inclusive,
            high,
            high_inclusive,
        }
    }

    /// NaN fails both comparisons, so it is refused like any value out of range.
    fn check(self, field: &str, value: f64) -> Result<(), ConfigError> {
        let above = if self.low_inclusive {
            value >= self.low
        } else {
            value > self.low
        };
        let below = if self.high_inclusive {
            value <= self.high
        } else {
            value < self.high
        };
        if above && below {
            return Ok(());
        }
        Err(ConfigError(format!(
            "{field} must be in {}{}, {}{}, got {value}",
            if self.low_inclusive { '[' } else { '(' },
            self.low,
            self.high,
            if self.high_inclusive { ']' } else { ')' },
        )))
    }
}

/// Work done as messages enter the context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngestConfig {
    /// Cap on a single tool result.
    pub tool_result: Option<ToolResultCap>,
    /// Keep at most this many images (and other data parts: audio, documents) in the
    /// context: when a message brings more, the oldest are stored as `data/<sha256>.<ext>`
    /// and a line naming that file takes their place (AgentScope: 5). Pinned messages keep
    /// theirs (and count).
    pub max_images: Option<usize>,
}

/// Cap on one tool result: a head + tail preview, a marker, and the whole output archived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolResultCap {
    /// Results above this many tokens are capped (`tool_result_limit`,
    /// `max_tool_message_tokens`).
    #[serde(alias = "tool_result_limit", alias = "max_tool_message_tokens")]
    pub max_tokens: Option<u64>,
    /// Results above this many characters are capped (HarnessAgent: 80,000).
    pub max_chars: Option<usize>,
    /// Results above this share of the context window are capped, whatever the window (of
    /// the room left beside the tool schemas and leading instructions, when those take more
    /// than half of the window).
    pub max_window_share: Option<f64>,
    /// The preview is the longest prefix that fits the token limit (`max_tokens`, or the
    /// window share when smaller) together with its marker, instead of `head_chars` +
    /// `tail_chars` (AgentScope: "keep the largest prefix that fits the limit", counted in
    /// tokens).
    pub fit_prefix: bool,
    /// Characters of the start kept in the preview.
    pub head_chars: usize,
    /// Characters of the end kept in the preview (errors and stack traces live there).
    pub tail_chars: usize,
    /// About a third of the head and tail's room goes to the lines between them that carry most
    /// (directives, errors, paths and identifiers), so the cut never hides a failing
    /// assertion in the middle of a log; off, the preview is head and tail only (the seeds').
    pub ranked_middle: bool,
    /// The last N results get `recent_multiplier` × the limits (Agentrail's larger cap).
    pub recent_results: usize,
    pub recent_multiplier: u32,
    /// Tools whose results are never capped (they page themselves or are tiny).
    pub exclude_tools: Vec<String>,
    /// Only results of earlier turns are capped (CowAgent); the current turn is left alone.
    pub historical_only: bool,
}

impl Default for ToolResultCap {
    fn default() -> ToolResultCap {
        ToolResultCap {
            max_tokens: Some(4_000),
            max_chars: None,
            max_window_share: None,
            fit_prefix: false,
            head_chars: 2_000,
            tail_chars: 2_000,
            ranked_middle: false,
            recent_results: 0,
            recent_multiplier: 1,
            exclude_tools: Vec::new(),
            historical_only: false,
        }
    }
}

/// One stage of the cascade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Stage {
    /// Truncate each tool-call argument (a JSON object's field) over `max_arg_length`
    /// characters in old rounds (HarnessAgent `TruncateArgsConfig`).
    TruncateArgs {
        #[serde(default = "default_max_arg_length", alias = "maxArgLength")]
        max_arg_length: usize,
        #[serde(default = "default_truncation_text", alias = "truncationText")]
        truncation_text: String,
    },
    /// Observation masking / tool-result clearing beyond the most recent rounds.
    Mask {
        /// Rounds (counted from the end) whose results stay verbatim.
        #[serde(default = "default_keep_rounds")]
        keep_rounds: usize,
        /// Results at or below this many tokens are left alone (masking them saves nothing).
        #[serde(default = "default_min_result_tokens")]
        min_result_tokens: u64,
        /// Tools whose results are never cleared.
        #[serde(default)]
        exclude_tools: Vec<String>,
        /// Clear the calls' arguments too.
        #[serde(default)]
        clear_inputs: bool,
        /// The most recent messages stay verbatim too, whatever the rounds (ReMe compact's
        /// `keep_recent_count` = 1: the output the model is about to read).
        #[serde(default, alias = "keep_recent_count")]
        keep_messages: usize,
        /// Characters of the start of a cleared output kept after the pointer (ReMe
        /// compact's preview); 0 keeps the pointer only.
        #[serde(default)]
        preview_chars: usize,
    },
    /// Cap old tool results to a head + tail preview (CowAgent's historical truncation and
    /// aggressive trim), archiving the whole output.
    CapResults {
        max_chars: usize,
        #[serde(default)]
        keep_rounds: usize,
        /// Leave the results of the current turn alone (CowAgent).
        #[serde(default)]
        historical_only: bool,
        /// Run before every model call, not only under pressure (Agentrail layer 1, CowAgent).
        #[serde(default)]
        always: bool,
        /// User texts over `max_chars` are cut to a head + tail too, the current one included
        /// (CowAgent's aggressive trim: "10K chars per tool result and user text").
        #[serde(default)]
        user_text: bool,
    },
    /// Drop the oldest `drop_fraction` of whole turns when there are more than `max_turns`,
    /// and at least down to `max_turns` (CowAgent; 0 trims to exactly `max_turns`); the
    /// dropped turns are summarized.
    TrimTurns {
        #[serde(alias = "agent_max_context_turns")]
        max_turns: usize,
        #[serde(default = "default_drop_fraction")]
        drop_fraction: f64,
    },
    /// Budget trimming (CowAgent): with fewer than `min_turns_for_drop` turns, keep per turn
    /// only the first user text and the last reply; otherwise drop the oldest half of turns.
    CompressTurns {
        #[serde(default = "default_min_turns_for_drop")]
        min_turns_for_drop: usize,
    },
    /// Summarize the compactable prefix into the structured summary.
    Summarize {
        /// Keep at least this many of the most recent tokens verbatim (`keepTokens`).
        #[serde(default, alias = "keepTokens")]
        keep_tokens: Option<u64>,
        /// Keep at least this many of the most recent messages verbatim (`keepMessages`,
        /// `keep_recent_count`).
        #[serde(default, alias = "keepMessages", alias = "keep_recent_count")]
        keep_messages: Option<usize>,
        /// Summarize in groups of at most this many tokens, one summary message per group
        /// (ReMe's `group_token_threshold`); `None` makes one summary.
        #[serde(default)]
        group_token_threshold: Option<u64>,
        /// Summarize only the oldest N rounds (Agentrail's micro compaction).
        #[serde(default)]
        oldest_rounds: Option<usize>,
        /// Keep at least this share of the window of recent messages (AgentScope's
        /// `reserve_ratio`, counted on the conversation only).
        #[serde(default)]
        keep_ratio: Option<f64>,
        /// Run only if the earlier stages left more than this share of the tokens the
        /// compaction started with (ReMe auto's `compact_ratio_threshold`).
        #[serde(default, alias = "compact_ratio_threshold")]
        min_ratio: Option<f64>,
        /// Run only if the messages it may summarize (after the instructions, before the
        /// `keep_messages` kept) come to more than this many tokens (ReMe compress's
        /// `max_total_tokens`, which "excludes keep_recent_count messages and system
        /// messages").
        #[serde(default)]
        min_tokens: Option<u64>,
    },
    /// Keep only the newest turns and the summary: the hard reset of last resort.
    Clear {
        #[serde(default = "default_clear_keep_turns")]
        keep_turns: usize,
    },
}

fn default_max_arg_length() -> usize {
    2_000
}
fn default_truncation_text() -> String {
    "... [truncated] ...".to_string()
}
fn default_keep_rounds() -> usize {
    3
}
fn default_min_result_tokens() -> u64 {
    100
}
fn default_drop_fraction() -> f64 {
    0.5
}
fn default_min_turns_for_drop() -> usize {
    5
}
fn default_clear_keep_turns() -> usize {
    1
}

impl Stage {
    /// True for stages that run before every model call, pressure or not.
    pub fn runs_always(&self) -> bool {
        matches!(self, Stage::CapResults { always: true, .. })
    }

    /// The stage's kind name.
    pub fn kind(&self) -> &'static str {
        match self {
            Stage::TruncateArgs { .. } => "truncate_args",
            Stage::Mask { .. } => "mask",
            Stage::CapResults { .. } => "cap_results",
            Stage::TrimTurns { .. } => "trim_turns",
            Stage::CompressTurns { .. } => "compress_turns",
            Stage::Summarize { .. } => "summarize",
            Stage::Clear { .. } => "clear",
        }
    }
}

/// Reactive tiers (Agentrail layer 3), driven by the previous call's reported input tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReactiveConfig {
    /// At or above this share of the window (percent), summarize the oldest rounds.
    #[serde(alias = "microTriggerPct")]
    pub micro_trigger_pct: f64,
    /// At or above this share, summarize everything compactable.
    #[serde(alias = "fullTriggerPct")]
    pub full_trigger_pct: f64,
    /// Rounds summarized by a micro compaction.
    #[serde(alias = "microBatchGroups")]
    pub micro_batch_groups: usize,
    /// At most this many reactive compactions per request.
    #[serde(alias = "maxReactiveCompactionsPerRequest")]
    pub max_per_request: u32,
}

impl Default for ReactiveConfig {
    fn default() -> ReactiveConfig {
        ReactiveConfig {
            micro_trigger_pct: 85.0,
            full_trigger_pct: 92.0,
            micro_batch_groups: 2,
            max_per_request: 3,
        }
    }
}

/// Recovery from a provider's context-overflow error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OverflowConfig {
    /// Retries after compacting harder; the recovery always stops after this many.
    pub max_attempts: u32,
    /// Each attempt targets this share of the previous attempt's size (or of the limit the
    /// provider stated).
    pub shrink_factor: f64,
    /// The stages of an emergency compaction; empty means the policy's own stages followed by
    /// a hard clear.
    pub stages: Vec<Stage>,
    /// The first attempt whose compaction may run `clear` stages. Before it, a recovery keeps
    /// what its other stages leave when that fits the limit (CowAgent: trim to 5 turns and cap
    /// the results, and clear only if that is still too long); when it does not fit, the
    /// clear runs at once rather than sending a request known to fail.
    pub clear_from_attempt: u32,
}

impl Default for OverflowConfig {
    fn default() -> OverflowConfig {
        OverflowConfig {
            max_attempts: 3,
            shrink_factor: 0.6,
            stages: Vec::new(),
            clear_from_attempt: 1,
        }
    }
}

/// The longest `[policy.summary] instructions` accepted, in characters: they ride along in
/// every summary call.
pub const MAX_SUMMARY_INSTRUCTIONS: usize = 4_000;

/// Where the summary goes and how it reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SummaryConfig {
    pub schema: SummarySchema,
    /// Instruction prompt for model summarizers (`compression_prompt`); `None` = built-in.
    pub compression_prompt: Option<String>,
    /// The operator's own instructions, added to whichever prompt a model summarizer uses
    /// ("always keep ticket numbers", "write the summary in German"); at most
    /// [`MAX_SUMMARY_INSTRUCTIONS`] characters. The extractive summarizer has no model and
    /// does not read them.
    pub instructions: Option<String>,
    /// Template of the summary message; `{summary}`, `{count}` and `{reference}` are filled.
    pub summary_template: String,
    /// Upper bound on the summary length.
    pub max_summary_tokens: u32,
    /// Merge the previous summary into the new one (incremental) instead of stacking.
    pub incremental: bool,
    /// Where the summary goes: into the context, or only to long-term memory (CowAgent).
    pub placement: SummaryPlacement,
}

/// Where request-time context goes in the messages sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderPlacement {
    /// Before the history, right after its leading instructions: for content that changes
    /// rarely (an identity header, a date, a memory index), as the prefix it starts is
    /// re-read from the provider's cache only while it stays the same.
    BeforeHistory,
    /// After the history: the whole history stays the cached prefix, whatever the context
    /// says this time.
    #[default]
    AfterHistory,
}

/// Where a summary is placed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryPlacement {
    /// A summary message replaces the compacted messages in the context.
    #[default]
    Context,
    /// The summary goes to long-term memory only; the context just loses the messages.
    Memory,
}

impl Default for SummaryConfig {
    fn default() -> SummaryConfig {
        SummaryConfig {
            schema: SummarySchema::default(),
            compression_prompt: None,
            instructions: None,
            summary_template: "[Summary of {count} earlier messages; the originals are archived at {reference}]\n\n{summary}".to_string(),
            max_summary_tokens: 1_200,
            incremental: true,
            placement: SummaryPlacement::Context,
        }
    }
}

/// A request-time notice that shows the agent its own budget and, past a threshold, nudges
/// it to save notes before compaction. It is appended after the history, never persisted,
/// so it does not disturb the cached prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetNoticeConfig {
    /// Show the notice at or above this share of the trigger (0.75 = 75 %).
    pub nudge_at: f64,
}

impl Default for BudgetNoticeConfig {
    fn default() -> BudgetNoticeConfig {
        BudgetNoticeConfig { nudge_at: 0.75 }
    }
}

#[cfg(test)]
mod tests;
