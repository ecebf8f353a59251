//! Named policies: every seed system with the defaults its documentation states, `none`, and
//! ctxkeeper's own `default`.
//!
//! | preset | reproduces |
//! | --- | --- |
//! | `agentscope` | AgentScope `ContextConfig`: trigger 0.8 × window, keep 0.1 × window of recent conversation, 5-field structured summary, tool results over 50,000 tokens cut to a prefix at ingest, at most 5 images (older ones stored as `data/<sha256>.<ext>`) |
//! | `reme-compact` | ReMe `MessageOffloadOp` compact: above 20,000 tokens, tool messages over 2,000 tokens (but the newest message) become a pointer to their archived file and a 400-character preview |
//! | `reme-compress` | ReMe compress: above 20,000 tokens, older messages summarized in groups of at most 8,000 tokens into state snapshots ("Part g/n"), each group's originals in `<chat_id>_<g>.json`, the last 2 kept |
//! | `reme-auto` | ReMe auto: above 20,000 tokens compact, then compress when the compacted messages still hold more than 75 % of the original's tokens |
//! | `agentrail` | Agentrail: tool results over 1,500 tokens previewed (the last 2 get 4×) with the whole output in `tool-results/<toolCallId>.txt`; at the start of a request only, a summary at 80,000 tokens and ≥ 20 messages archived to `messages.compactions/<id>.jsonl`; inside a request, reactive micro at 85 % / full at 92 % (`compaction` events); last 2 rounds kept; 200,000-token window for an unknown model; context providers before the history |
//! | `cowagent` | CowAgent: 50,000-token budget, 20 turns; historical tool results over 20,000 characters cut head + tail; oldest half of turns dropped and summarized into memory; per-turn compression under 5 turns; overflow: 10,000-character trim to 5 turns, then clear; a resumed session keeps its last 3 turns, text only; sessions idle 30 days removed |
//! | `harness` | AgentScope Java HarnessAgent: summarize at 30 messages keeping the last 10, SESSION INTENT / SUMMARY / ARTIFACTS / NEXT STEPS, tool results over 80,000 characters evicted with 2,000-character head and tail, each argument over 2,000 characters truncated, overflow: compact everything and retry once |
//! | `none` | nothing: the unmanaged baseline |
//! | `default` | ctxkeeper: compact at 90 % of the window (counted on the provider's reported usage), cap outputs over 40 % of the window at ingest, mask old tool outputs, then summarize deep (to 10 % of the window), keeping the last 2 rounds verbatim, so the cached prefix stays stable between few compactions; the session capsule (the user's words, the files touched, the plan, the open problem) pinned across compactions; hysteresis at 60 % of the trigger |
//!
//! The presets fix the seeds' documented bugs (see `SEED-NOTES.md`): the whole output is
//! archived (not only the remainder), the kept tail is counted on the conversation only (not
//! on the system prompt and tools), tool pairs are protected across messages, a failed
//! summary never replaces the prefix with nothing.

use super::config::MemoryPolicy;
use super::config::{
    Accounting, ArchiveLayout, CostRule, IngestConfig, OverflowConfig, PolicyConfig,
    ProviderPlacement, ReactiveConfig, SessionPolicy, Stage, SummaryConfig, SummaryPlacement,
    ToolResultCap,
};
use crate::capsule::CapsuleConfig;
use crate::summary::{SummaryField, SummarySchema};

/// Every preset name, in report order.
pub const NAMES: [&str; 9] = [
    "none",
    "default",
    "agentscope",
    "reme-compact",
    "reme-compress",
    "reme-auto",
    "agentrail",
    "cowagent",
    "harness",
];

/// A policy name that is no preset; its message lists every preset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {name:?} (available: {})", NAMES.join(", "))]
pub struct UnknownPreset {
    pub name: String,
}

/// The preset called `name`, or an error listing the presets: what every face (the gateway's
/// settings, `replay`, `sessions`, the MCP server, the benchmarks) says about a policy name.
///
/// ```
/// use ctxkeeper_core::engine::presets;
///
/// assert_eq!(presets::lookup("agentscope").unwrap().name, "agentscope");
/// let error = presets::lookup("agentscop").unwrap_err().to_string();
/// assert!(error.contains("\"agentscop\"") && error.contains("agentscope, reme-compact"));
/// ```
pub fn lookup(name: &str) -> Result<PolicyConfig, UnknownPreset> {
    preset(name).ok_or_else(|| UnknownPreset {
        name: name.to_string(),
    })
}

/// The preset called `name`, or `None`.
pub fn preset(name: &str) -> Option<PolicyConfig> {
    Some(match name {
        "none" => none(),
        "default" => default(),
        "agentscope" => agentscope(),
        "reme-compact" => reme(Mode::Compact),
        "reme-compress" => reme(Mode::Compress),
        "reme-auto" => reme(Mode::Auto),
        "agentrail" => agentrail(),
        "cowagent" => cowagent(),
        "harness" => harness(),
        _ => return None,
    })
}

/// A summarize stage with none of its own limits: the policy's summary settings decide.
pub(crate) fn summarize_stage() -> Stage {
    Stage::Summarize {
        keep_tokens: None,
        keep_messages: None,
        group_token_threshold: None,
        oldest_rounds: None,
        keep_ratio: None,
        min_ratio: None,
        min_tokens: None,
    }
}

fn none() -> PolicyConfig {
    PolicyConfig {
        name: "none".into(),
        trigger_ratio: None,
        ..PolicyConfig::default()
    }
}

/// ctxkeeper's own policy.
///
/// - A tool output larger than 40 % of the window is cut at ingest to a head + tail preview
///   (the whole output archived): such an output would crowd out everything else. Smaller
///   outputs stay verbatim while they are recent.
/// - When the request crosses 90 % of the window (the rest is the summary call's reserve),
///   old tool outputs are cleared first
///   (observation masking: the cheapest large saving), keeping the last 2 rounds verbatim;
///   if that is not enough, the prefix is summarized incrementally (at most 400 tokens: the
///   capsule carries the user's words and the files, so the narrative can be short).
/// - A compaction goes far below the trigger (to 10 % of the window, plus the rounds that
///   must stay verbatim): every compaction rewrites whatever follows the system prompt, so
///   few deep compactions cost less uncached input than many shallow ones, and between them
///   the prefix stays byte-stable and the provider's prompt cache keeps hitting. (Measured on
///   the shared traces at 16k: 2 rounds, 10 % and 600 summary tokens cut uncached input by
///   8–18 % against 3 rounds, 20 % and 1,200; see bench/RESULTS.md.)
/// - The session capsule keeps what summaries lose (the user's words verbatim, the artifact
///   trail, the plan, the open problem), within 15 % of the window for the words. Measured on
///   the shared traces at 16k and 32k: the user's texts kept went from 0.24–0.49 to 1.00, the
///   file paths from 0.22–0.66 to 1.00, the plan from 0.06–0.10 to 1.00, for 2–15 % more
///   billed input tokens (bench/RESULTS.md).
/// - Hysteresis at 60 % of the trigger: when tool schemas and a long system prompt leave
///   little room (Claude Code at a 54k window), a compaction keeps only the newest round and
///   the trigger waits until the request nears the window, so compactions stay at least three
///   steps apart instead of happening on nearly every step.
/// - The count behind the trigger is the provider's own: the input tokens it reported for the
///   last request (`observe_usage`), plus an estimate of the messages added since, at the
///   session's bytes-per-token ratio calibrated from the same reports. A step that does not
///   compact never waits on the tokenizer, and the trigger binds at its own level. (Without
///   usage reports the whole context is estimated and the trigger fires at 92 % of its
///   level.) Against a trigger at 80 %, this cut uncached input tokens by 0.4–7 % per shared
///   trace at 16k, and a session that peaks just under the window (SWE-agent pydicom) now
///   finishes without a compaction.
/// - The economic trigger (`[policy.cost]`, [`CostRule`]) places the token trigger where the
///   billed input per step is lowest (cache reads of what stays against the cache write a
///   compaction causes, at the growth per step observed), between 30 % of the window and the
///   90 % ceiling. On the shared traces it cut `default`'s billed input by 3.5 % (Claude Code)
///   and 9 % (Codex) at 16k, 34 % and 29 % at 32k, 19 % and 44 % at 200k, with the user's
///   words and file paths kept (bench/RESULTS.md, "Economic trigger").
///   `[policy.cost] enabled = false` restores the fixed trigger. The growth it reads comes
///   from the provider's usage reports, which only the gateway replica that served a step
///   sees: a session moving between replicas may compact a step earlier or later than on
///   one replica (never twice, never losing a message).
fn default() -> PolicyConfig {
    PolicyConfig {
        name: "default".into(),
        trigger_ratio: Some(0.9),
        target_ratio: 0.05,
        hysteresis: Some(0.6),
        keep_recent_rounds: 2,
        ingest: IngestConfig {
            // Only an output that would crowd out everything else is cut as it arrives (the
            // newest round stays verbatim otherwise); older outputs are cleared by `mask`.
            tool_result: Some(ToolResultCap {
                max_tokens: None,
                max_window_share: Some(0.4),
                head_chars: 4_000,
                tail_chars: 2_000,
                ranked_middle: true,
                ..ToolResultCap::default()
            }),
            max_images: Some(5),
        },
        stages: vec![
            Stage::Mask {
                keep_rounds: 2,
                min_result_tokens: 60,
                exclude_tools: Vec::new(),
                clear_inputs: false,
                keep_messages: 0,
                preview_chars: 0,
            },
            Stage::TruncateArgs {
                max_arg_length: 2_000,
                truncation_text: "… [truncated]".into(),
            },
            summarize_stage(),
        ],
        summary: SummaryConfig {
            max_summary_tokens: 400,
            ..SummaryConfig::default()
        },
        capsule: Some(CapsuleConfig::default()),
        accounting: Accounting::Estimate,
        cost: Some(CostRule::default()),
        ..PolicyConfig::default()
    }
}

fn agentscope() -> PolicyConfig {
    PolicyConfig {
        name: "agentscope".into(),
        trigger_ratio: Some(0.8),
        target_ratio: 0.1,
        keep_recent_rounds: 0,
        ingest: IngestConfig {
            // "Keep the largest prefix that fits the limit": a prefix only, no tail, and the
            // limit is `tool_result_limit` = 50,000 tokens (not characters).
            tool_result: Some(ToolResultCap {
                max_tokens: Some(50_000),
                fit_prefix: true,
                head_chars: 0,
                tail_chars: 0,
                ..ToolResultCap::default()
            }),
            max_images: Some(5),
        },
        stages: vec![Stage::Summarize {
            keep_tokens: None,
            keep_messages: None,
            group_token_threshold: None,
            oldest_rounds: None,
            keep_ratio: Some(0.1),
            min_ratio: None,
            min_tokens: None,
        }],
        summary: SummaryConfig {
            summary_template: "<system-reminder>The earlier conversation was compressed. {count} messages were offloaded to {reference}; read them back with your file tools if you need a detail.</system-reminder>\n\n{summary}".into(),
            ..SummaryConfig::default()
        },
        overflow: OverflowConfig { max_attempts: 1, ..OverflowConfig::default() },
        ..PolicyConfig::default()
    }
}

/// The characters of an offloaded tool output the ReMe presets' compaction keeps as its
/// preview (the document gives no size: about 100 tokens, enough to recognise the output).
pub const REME_PREVIEW_CHARS: usize = 400;

/// The group size of the ReMe presets' compression.
pub const REME_GROUP_TOKENS: u64 = 8_000;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Compact,
    Compress,
    Auto,
}

fn reme(mode: Mode) -> PolicyConfig {
    // "Only a preview is kept in context with a reference to the stored file", and the last
    // `keep_recent_count` = 1 message stays as it is.
    let compact = Stage::Mask {
        keep_rounds: 0,
        min_result_tokens: 2_000,
        exclude_tools: Vec::new(),
        clear_inputs: false,
        keep_messages: 1,
        preview_chars: REME_PREVIEW_CHARS,
    };
    // Grouped as ReMe's `group_token_threshold` allows (the document gives no default):
    // 8,000 tokens makes two or three groups of a 20,000-token history, each its own
    // snapshot, instead of one summary that must squeeze everything.
    let compress = |min_ratio: Option<f64>, min_tokens: Option<u64>| Stage::Summarize {
        keep_tokens: None,
        keep_messages: Some(2),
        group_token_threshold: Some(REME_GROUP_TOKENS),
        oldest_rounds: None,
        keep_ratio: None,
        min_ratio,
        min_tokens,
    };
    let (name, stages) = match mode {
        Mode::Compact => ("reme-compact", vec![compact]),
        // "For compression mode: excludes keep_recent_count messages and system messages."
        Mode::Compress => ("reme-compress", vec![compress(None, Some(20_000))]),
        // Once the 20,000-token trigger fired, the ratio alone decides: "If ratio is 0.76 and
        // threshold is 0.75, compression will be applied" (on the compacted result: the seed
        // threw the compaction away).
        Mode::Auto => ("reme-auto", vec![compact, compress(Some(0.75), None)]),
    };
    let field = SummaryField::new;
    PolicyConfig {
        name: name.into(),
        trigger_ratio: None,
        trigger_tokens: Some(20_000),
        target_ratio: 0.0,
        keep_recent_rounds: 0,
        stages,
        summary: SummaryConfig {
            schema: SummarySchema {
                fields: vec![
                    field("overall_goal", "Overall goal", "The user's overall goal."),
                    field(
                        "key_knowledge",
                        "Key knowledge",
                        "Facts, constraints and findings to remember.",
                    ),
                    field(
                        "recent_actions",
                        "Recent actions",
                        "What was just done and its results.",
                    ),
                ],
            },
            summary_template: "{summary}\n\n(The original messages are stored in {reference}.)"
                .into(),
            incremental: false,
            ..SummaryConfig::default()
        },
        archive: ArchiveLayout {
            group_files: mode != Mode::Compact,
            ..ArchiveLayout::default()
        },
        ..PolicyConfig::default()
    }
}

/// Agentrail's three layers, as its document describes them.
///
/// - Layer 1, before every model call: tool results over 1,500 tokens are cut to a preview
///   naming `tool-results/<toolCallId>.txt`, where the whole output is (the newest results
///   get the larger cap at ingest); a `tool_result_truncated` event per result.
/// - Layer 2, at the start of a request only (the user's new message, never inside the tool
///   loop): over 80,000 tokens and 20 messages of history, the old history is summarized into
///   one message and archived to `messages.compactions/<id>.jsonl`, announced by
///   `context_compaction_start` / `context_compaction_end`.
/// - Layer 3, inside a request: reactive micro (85 % of the window reported) and full (92 %,
///   or once on a prompt-too-long error) compactions, at most 3 per request, each announced
///   by one `compaction` event with `messagesBefore` / `messagesAfter`.
///
/// A model the profile table does not know gets a 200,000-token window (`contextWindow`'s
/// default), and request-time context providers go before the history.
fn agentrail() -> PolicyConfig {
    PolicyConfig {
        name: "agentrail".into(),
        trigger_ratio: None,
        trigger_tokens: Some(80_000),
        min_messages: 20,
        compact_at_request_start: true,
        unknown_model_window: Some(200_000),
        provider_placement: ProviderPlacement::BeforeHistory,
        target_ratio: 0.0,
        keep_recent_rounds: 2,
        ingest: IngestConfig {
            // The newest results get the larger cap; older ones are cut to 1,500 tokens below.
            tool_result: Some(ToolResultCap {
                max_tokens: Some(6_000),
                head_chars: 8_000,
                tail_chars: 2_000,
                ..ToolResultCap::default()
            }),
            max_images: None,
        },
        stages: vec![
            Stage::CapResults { max_chars: 6_000, keep_rounds: 2, historical_only: false, always: true, user_text: false },
            summarize_stage(),
        ],
        reactive: Some(ReactiveConfig::default()),
        summary: SummaryConfig {
            summary_template: "[Conversation summary: {count} earlier messages, archived at {reference}]\n\n{summary}".into(),
            ..SummaryConfig::default()
        },
        overflow: OverflowConfig { max_attempts: 1, ..OverflowConfig::default() },
        archive: ArchiveLayout {
            group_files: false,
            compaction_files: true,
            tool_results_dir: true,
        },
        ..PolicyConfig::default()
    }
}

fn cowagent() -> PolicyConfig {
    PolicyConfig {
        name: "cowagent".into(),
        trigger_ratio: None,
        trigger_tokens: Some(50_000),
        trigger_turns: Some(20),
        // "Still over budget" means over the window's usable part or the 50,000 budget.
        target_ratio: 0.85,
        keep_recent_rounds: 0,
        stages: vec![
            Stage::CapResults {
                max_chars: 20_000,
                keep_rounds: 0,
                historical_only: true,
                always: true,
                user_text: false,
            },
            Stage::TrimTurns {
                max_turns: 20,
                drop_fraction: 0.5,
            },
            Stage::CompressTurns {
                min_turns_for_drop: 5,
            },
        ],
        summary: SummaryConfig {
            placement: SummaryPlacement::Memory,
            ..SummaryConfig::default()
        },
        overflow: OverflowConfig {
            max_attempts: 2,
            shrink_factor: 0.6,
            stages: vec![
                // At most 5 turns (a fraction of 1.0 here emptied the context to one turn).
                Stage::TrimTurns {
                    max_turns: 5,
                    drop_fraction: 0.0,
                },
                Stage::CapResults {
                    max_chars: 10_000,
                    keep_rounds: 0,
                    historical_only: false,
                    always: false,
                    user_text: true,
                },
                Stage::Clear { keep_turns: 1 },
            ],
            // "Still too long" after the trim to 5 turns: only then is the context cleared.
            clear_from_attempt: 2,
        },
        // "Restores the most recent max(3, max_context_turns / 6) turns", text only;
        // "sessions older than 30 days are automatically cleaned up".
        session: SessionPolicy {
            restore_recent_turns: Some(20),
            retention_days: Some(30),
        },
        // Trimmed turns are summarized "to the daily memory file"; what a compaction removes
        // can still be found "via memory search".
        memory: MemoryPolicy {
            flush_before_compact: true,
        },
        ..PolicyConfig::default()
    }
}

fn harness() -> PolicyConfig {
    let field = SummaryField::new;
    PolicyConfig {
        name: "harness".into(),
        trigger_ratio: None,
        trigger_messages: Some(30),
        target_ratio: 0.0,
        keep_recent_rounds: 0,
        ingest: IngestConfig {
            tool_result: Some(ToolResultCap {
                max_tokens: None,
                max_chars: Some(80_000),
                head_chars: 2_000,
                tail_chars: 2_000,
                exclude_tools: [
                    "read_file",
                    "write_file",
                    "edit_file",
                    "grep_files",
                    "glob_files",
                    "list_files",
                    "memory_search",
                    "memory_get",
                    "session_search",
                ]
                .map(String::from)
                .to_vec(),
                ..ToolResultCap::default()
            }),
            max_images: None,
        },
        stages: vec![
            Stage::TruncateArgs {
                max_arg_length: 2_000,
                truncation_text: "... [truncated] ...".into(),
            },
            Stage::Summarize {
                keep_tokens: None,
                keep_messages: Some(10),
                group_token_threshold: None,
                oldest_rounds: None,
                keep_ratio: None,
                min_ratio: None,
                min_tokens: None,
            },
        ],
        summary: SummaryConfig {
            schema: SummarySchema {
                fields: vec![
                    field(
                        "session_intent",
                        "SESSION INTENT",
                        "What the user wants from this session.",
                    ),
                    field(
                        "summary",
                        "SUMMARY",
                        "What happened so far, decisions and results.",
                    ),
                    field(
                        "artifacts",
                        "ARTIFACTS",
                        "Files, commands, identifiers and other artifacts produced or used.",
                    ),
                    field("next_steps", "NEXT STEPS", "What remains to be done."),
                ],
            },
            summary_template:
                "{summary}\n\n(Compacted {count} messages; originals offloaded to {reference}.)"
                    .into(),
            ..SummaryConfig::default()
        },
        overflow: OverflowConfig {
            max_attempts: 1,
            ..OverflowConfig::default()
        },
        // CompactionConfig.flushBeforeCompact defaults to true.
        memory: MemoryPolicy {
            flush_before_compact: true,
        },
        ..PolicyConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid_and_named_after_itself() {
        for name in NAMES {
            let config = preset(name).unwrap_or_default();
            assert_eq!(config.name, name);
            if let Err(err) = config.validate() {
                panic!("{name}: {err}");
            }
        }
        assert!(preset("nonsense").is_none());
    }

    #[test]
    fn the_seeds_with_long_term_memory_want_it() {
        for name in NAMES {
            let wanted = preset(name).is_some_and(|p| p.wants_memory());
            assert_eq!(wanted, matches!(name, "cowagent" | "harness"), "{name}");
        }
    }
}
