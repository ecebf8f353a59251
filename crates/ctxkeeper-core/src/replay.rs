//! Replays a recorded conversation the way the agent lived it, and measures every model call.
//!
//! Every assistant message of a session is one model call whose input is everything before it
//! (plus the tool schemas). A [`StepPolicy`] decides what is actually sent at each step; the
//! unmanaged baseline ([`Unmanaged`]) sends the whole history. When a request exceeds the
//! window, the replay answers like a provider would — a context-overflow error — and lets the
//! policy recover within its bound; a step that still does not fit is counted as overflowed.
//!
//! The report gives the figures a context policy is judged by: peak and cumulative input
//! tokens, what they cost once a provider's prompt cache serves the repeated prefix
//! (`billed_input_tokens`), overflowed steps, provider-rule violations in what was sent, the
//! stable prefix, the recent rounds kept verbatim, the engine's own time per step, and what
//! the managed requests still tell the model ([`crate::fidelity`]: user instructions, file
//! paths, the plan, resolving references, leaked markers, and next-action recall: the share
//! of the identifiers, paths and numbers the agent's real next action reused that the request
//! still carries), measured at every step where the managed request differs from the whole
//! history.
//!
//! ```
//! use ctxkeeper_core::import::Session;
//! use ctxkeeper_core::model::{CheckRules, Message};
//! use ctxkeeper_core::replay::{replay, ReplayOptions, Unmanaged};
//! use ctxkeeper_core::tokens::{Profiles, TokenModel};
//!
//! let session = Session {
//!     id: "demo".into(),
//!     messages: vec![Message::user("hi"), Message::assistant("hello"), Message::user("bye"), Message::assistant("ciao")],
//!     ..Session::default()
//! };
//! let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
//! let options = ReplayOptions { window: 1_000, rules: CheckRules::openai() };
//! let report = replay(&[session], &model, &options, &mut Unmanaged::default(), &mut |_| Ok::<(), String>(())).unwrap();
//! assert_eq!(report.steps, 2);
//! assert!(report.cumulative_input_tokens > report.peak_input_tokens);
//! // The second call repeats the first call's input as its prefix: that part is cacheable.
//! assert!(report.cumulative_uncached_input_tokens < report.cumulative_input_tokens);
//! ```

use std::borrow::Cow;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::fidelity::Probe;
use crate::import::Session;
use crate::model::{CheckRules, Message, Role, ViolationKind, check};
use crate::tokens::{TokenLedger, TokenModel};

/// What a policy sends for one model call.
#[derive(Debug, Clone)]
pub struct StepRequest<'h> {
    pub messages: Cow<'h, [Message]>,
    /// Tokens of each message of `messages` (per-message overhead included).
    pub message_tokens: Vec<u32>,
    /// Tokens of the tool schemas and request overhead.
    pub fixed_tokens: u64,
    /// Time the engine itself spent preparing this request (no IO, no summarizer).
    pub engine_time: Duration,
    /// Whether a compaction ran while preparing.
    pub compacted: bool,
}

impl StepRequest<'_> {
    /// Total input tokens of the request.
    pub fn input_tokens(&self) -> u64 {
        self.fixed_tokens
            + self
                .message_tokens
                .iter()
                .map(|&t| u64::from(t))
                .sum::<u64>()
    }
}

/// Decides what is sent to the model at each step.
pub trait StepPolicy {
    /// The policy's name in reports.
    fn name(&self) -> &str;

    /// Called when a new session starts.
    fn start_session(&mut self, session: &Session, model: &TokenModel) -> Result<(), String>;

    /// The request for the next model call, given everything the agent has seen so far.
    fn prepare<'h>(&mut self, history: &'h [Message]) -> Result<StepRequest<'h>, String>;

    /// The provider rejected a request of `tokens` as too long (`attempt` starts at 1). Return
    /// a smaller request, or `None` to give up.
    fn recover_overflow(
        &mut self,
        attempt: u32,
        tokens: u64,
        window: u64,
    ) -> Result<Option<StepRequest<'static>>, String> {
        let _ = (attempt, tokens, window);
        Ok(None)
    }

    /// The provider accepted the last request and reported `input_tokens` for it, as a real
    /// provider's `usage` does.
    fn observe_usage(&mut self, input_tokens: u64) {
        let _ = input_tokens;
    }

    /// Compactions run so far.
    fn compactions(&self) -> usize {
        0
    }

    /// Bytes written to the archive so far.
    fn archived_bytes(&self) -> u64 {
        0
    }

    /// Whether `reference`, shown to the model in a request, can be read back from the
    /// archive; `None` when the policy has no archive to ask.
    fn resolve_reference(&mut self, reference: &str) -> Option<bool> {
        let _ = reference;
        None
    }
}

/// The unmanaged baseline: every step sends the whole history.
#[derive(Debug, Default, Clone)]
pub struct Unmanaged {
    ledger: TokenLedger,
    model: Option<TokenModel>,
    tools_tokens: u64,
}

impl StepPolicy for Unmanaged {
    fn name(&self) -> &str {
        "none"
    }

    fn start_session(&mut self, session: &Session, model: &TokenModel) -> Result<(), String> {
        self.ledger = TokenLedger::new();
        self.tools_tokens = u64::from(model.tools_tokens(&session.tools));
        self.model = Some(model.clone());
        Ok(())
    }

    fn prepare<'h>(&mut self, history: &'h [Message]) -> Result<StepRequest<'h>, String> {
        let started = Instant::now();
        if let Some(model) = &self.model {
            self.ledger.sync(history, model);
        }
        let engine_time = started.elapsed();
        Ok(StepRequest {
            messages: Cow::Borrowed(history),
            message_tokens: self.ledger.counts()[..history.len().min(self.ledger.len())].to_vec(),
            fixed_tokens: self.tools_tokens,
            engine_time,
            compacted: false,
        })
    }
}

/// Replay settings.
#[derive(Debug, Clone, Copy)]
pub struct ReplayOptions {
    /// The context window in tokens; a step whose input exceeds it overflows.
    pub window: u64,
    /// The provider rules each sent request is checked against.
    pub rules: CheckRules,
}

/// One model call, as handed to the step observer.
#[derive(Debug)]
pub struct StepView<'a> {
    /// 1-based step number across the whole replay.
    pub number: usize,
    pub session: &'a Session,
    /// The messages sent at this step.
    pub request: &'a [Message],
    pub input_tokens: u64,
    /// The violations found in `request`.
    pub violations: usize,
}

/// Percentiles of per-step engine time, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TimeSummary {
    pub p50: f64,
    pub p99: f64,
}

/// Engine time: the work the policy and the accounting do per step, excluding checking and
/// emitting requests (which only the replay tool does), archive writes and summarizer calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EngineTime {
    pub total: f64,
    pub p50_step: f64,
    pub p99_step: f64,
    /// The first and last 500 steps, to show whether the cost grows with history.
    pub first_500: TimeSummary,
    pub last_500: TimeSummary,
    /// Steps without a compaction, and the mean of those with one.
    pub p50_quiet_step: f64,
    pub p99_quiet_step: f64,
    pub mean_compacting_step: f64,
}

/// What a replay measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplayReport {
    pub policy: String,
    pub window: u64,
    pub sessions: usize,
    pub messages: usize,
    pub steps: usize,
    pub peak_input_tokens: u64,
    pub cumulative_input_tokens: u64,
    /// Sum over steps of the input not covered by the previous request as an exact prefix.
    pub cumulative_uncached_input_tokens: u64,
    /// Mean over steps of the share of input tokens repeating the previous request's prefix.
    pub stable_prefix_ratio: f64,
    /// Steps that still exceeded the window after overflow recovery.
    pub overflowed_steps: usize,
    /// Overflow errors the policy recovered from.
    pub overflow_recoveries: usize,
    pub violations: usize,
    pub compactions: usize,
    pub archived_bytes: u64,
    /// The fewest most-recent API rounds kept untouched at any step (capped at 5; a step with
    /// fewer rounds counts as 5 when all of them are kept).
    pub min_recent_rounds_verbatim: usize,
    /// What the input costs after caching, in uncached-token equivalents: uncached input plus
    /// a tenth of the input read from the cache (the price ratio of Anthropic's and OpenAI's
    /// GPT-5 cache reads).
    pub billed_input_tokens: u64,
    /// Steps whose request differed from the whole history: the steps the fidelity figures
    /// below are measured on.
    pub fidelity_steps: usize,
    /// Mean over those steps of the share of user texts kept (see [`crate::fidelity`]);
    /// `None` when no step had one.
    pub user_instructions_kept: Option<f64>,
    /// Mean over those steps of the share of file paths named in tool calls still shown.
    pub file_paths_kept: Option<f64>,
    /// Mean over those steps (with a standing order of the user current) of the share of
    /// those orders the request shows verbatim (see [`crate::fidelity`]).
    pub standing_orders_kept: Option<f64>,
    /// Share of those steps (with a plan in the history) whose request holds the latest plan.
    pub plan_kept: Option<f64>,
    /// Archive references shown in those requests (counted per step), and the share that
    /// resolve in the archive (`None` when none was shown or the policy has no archive).
    pub refs_shown: usize,
    pub refs_resolving: Option<f64>,
    /// Requests that carried an engine fill marker (each is also a violation).
    pub leaked_markers: usize,
    /// Next-action recall over those steps ([`crate::fidelity::NextActionRecall`]): the
    /// salient strings the agent's real next action used that the history carried outside
    /// its system messages (counted per step), and the share the requests carried, pooled
    /// over the steps; the same for the long-range ones (only messages older than the last
    /// [`crate::fidelity::RECENT_MESSAGES`] carried them). `None` when no step had one; the
    /// whole history carries all of them.
    pub next_action_strings: usize,
    pub next_action_recall: Option<f64>,
    pub next_action_long_range_strings: usize,
    pub next_action_long_range_recall: Option<f64>,
    /// The long-range strings the requests lost most often, with the number of steps that
    /// lost each (at most [`LOST_STRINGS_SHOWN`], most often first): what to look at when the
    /// long-range recall is low.
    pub next_action_lost: Vec<(String, usize)>,
    pub engine_time_us: EngineTime,
    /// Input tokens of every step, in order (for charts).
    #[serde(skip)]
    pub input_tokens_per_step: Vec<u64>,
}

/// How many of the most often lost strings [`ReplayReport::next_action_lost`] lists.
pub const LOST_STRINGS_SHOWN: usize = 30;

/// The cap of [`ReplayReport::min_recent_rounds_verbatim`].
pub const VERBATIM_ROUNDS_CAP: usize = 5;

/// Replays `sessions` one after another under `policy`, calling `observer` for every step.
/// The observer may stop the replay by returning an error, which is passed back.
pub fn replay<E: From<String>>(
    sessions: &[Session],
    model: &TokenModel,
    options: &ReplayOptions,
    policy: &mut dyn StepPolicy,
    observer: &mut dyn FnMut(&StepView<'_>) -> Result<(), E>,
) -> Result<ReplayReport, E> {
    let mut report = ReplayReport {
        policy: policy.name().to_string(),
        window: options.window,
        sessions: sessions.len(),
        min_recent_rounds_verbatim: VERBATIM_ROUNDS_CAP,
        ..ReplayReport::default()
    };
    let mut step_times: Vec<(Duration, bool)> = Vec::new();
    let mut stable_ratios = 0.0f64;
    let mut previous: Option<Cow<'_, [Message]>> = None;
    let mut fidelity = FidelityTotals::default();

    for session in sessions {
        report.messages += session.messages.len();
        policy.start_session(session, model)?;
        let mut round_starts: Vec<usize> = Vec::new();
        let mut probe = Probe::default();

        for (index, message) in session.messages.iter().enumerate() {
            if message.role == Role::Assistant {
                let history = &session.messages[..index];
                let mut request = policy.prepare(history)?;
                let mut engine_time = request.engine_time;
                let mut compacted = request.compacted;
                let mut attempt = 0;
                while request.input_tokens() > options.window {
                    attempt += 1;
                    match policy.recover_overflow(
                        attempt,
                        request.input_tokens(),
                        options.window,
                    )? {
                        Some(smaller) => {
                            report.overflow_recoveries += 1;
                            engine_time += smaller.engine_time;
                            compacted = true;
                            request = smaller;
                        }
                        None => break,
                    }
                }
                step_times.push((engine_time, compacted));

                let input_tokens = request.input_tokens();
                if input_tokens <= options.window {
                    policy.observe_usage(input_tokens);
                }
                let stable = stable_prefix_tokens(previous.as_deref(), &request);
                stable_ratios += stable as f64 / input_tokens.max(1) as f64;
                report.cumulative_uncached_input_tokens += input_tokens - stable.min(input_tokens);
                let verbatim = recent_rounds_verbatim(history, &round_starts, &request.messages);
                report.min_recent_rounds_verbatim = report.min_recent_rounds_verbatim.min(verbatim);

                let found = check(&request.messages, &options.rules);
                if found
                    .iter()
                    .any(|v| v.kind == ViolationKind::InternalMarker)
                {
                    report.leaked_markers += 1;
                }
                let violations = found.len();
                if differs(history, &request.messages) {
                    probe.observe(history);
                    fidelity.add(&probe.measure(&request.messages, Some(message)), policy);
                }
                report.steps += 1;
                report.peak_input_tokens = report.peak_input_tokens.max(input_tokens);
                report.cumulative_input_tokens += input_tokens;
                report.violations += violations;
                if input_tokens > options.window {
                    report.overflowed_steps += 1;
                }
                report.input_tokens_per_step.push(input_tokens);
                observer(&StepView {
                    number: report.steps,
                    session,
                    request: &request.messages,
                    input_tokens,
                    violations,
                })?;
                previous = Some(request.messages);
                round_starts.push(index);
            }
        }
    }

    report.stable_prefix_ratio = if report.steps == 0 {
        0.0
    } else {
        stable_ratios / report.steps as f64
    };
    report.compactions = policy.compactions();
    report.archived_bytes = policy.archived_bytes();
    report.engine_time_us = summarize_times(&step_times);
    report.billed_input_tokens = billed_input_tokens(
        report.cumulative_input_tokens,
        report.cumulative_uncached_input_tokens,
    );
    fidelity.finish(&mut report);
    Ok(report)
}

/// Uncached input plus a tenth of the cached input: what a provider that charges a tenth for
/// cache reads bills, in uncached-token equivalents.
pub fn billed_input_tokens(cumulative: u64, uncached: u64) -> u64 {
    let uncached = uncached.min(cumulative);
    uncached + (cumulative - uncached).div_ceil(10)
}

/// Whether the request is anything but the whole history, as it is.
fn differs(history: &[Message], request: &[Message]) -> bool {
    history.len() != request.len()
        || !history
            .iter()
            .zip(request)
            .all(|(a, b)| std::ptr::eq(a, b) || a == b)
}

/// The fidelity figures summed over the steps measured.
#[derive(Debug, Default)]
struct FidelityTotals {
    steps: usize,
    user_share: f64,
    user_steps: usize,
    path_share: f64,
    path_steps: usize,
    orders_share: f64,
    orders_steps: usize,
    plan_kept: usize,
    plan_steps: usize,
    refs_shown: usize,
    refs_resolved: usize,
    refs_checked: usize,
    next_strings: usize,
    next_kept: usize,
    next_long: usize,
    next_long_kept: usize,
    lost: std::collections::HashMap<String, usize>,
}

impl FidelityTotals {
    fn add(&mut self, step: &crate::fidelity::StepProbe, policy: &mut dyn StepPolicy) {
        self.steps += 1;
        if step.user_texts > 0 {
            self.user_steps += 1;
            self.user_share += step.user_texts_kept as f64 / step.user_texts as f64;
        }
        if step.paths > 0 {
            self.path_steps += 1;
            self.path_share += step.paths_kept as f64 / step.paths as f64;
        }
        if step.orders > 0 {
            self.orders_steps += 1;
            self.orders_share += step.orders_kept as f64 / step.orders as f64;
        }
        if let Some(kept) = step.plan_kept {
            self.plan_steps += 1;
            self.plan_kept += usize::from(kept);
        }
        self.next_strings += step.next_action.strings;
        self.next_kept += step.next_action.kept;
        self.next_long += step.next_action.long_range;
        self.next_long_kept += step.next_action.long_range_kept;
        for string in &step.next_action.lost_long_range {
            *self.lost.entry(string.clone()).or_default() += 1;
        }
        self.refs_shown += step.references.len();
        for reference in &step.references {
            if let Some(resolves) = policy.resolve_reference(reference) {
                self.refs_checked += 1;
                self.refs_resolved += usize::from(resolves);
            }
        }
    }

    fn finish(&self, report: &mut ReplayReport) {
        let share = |sum: f64, n: usize| (n > 0).then(|| sum / n as f64);
        report.fidelity_steps = self.steps;
        report.user_instructions_kept = share(self.user_share, self.user_steps);
        report.file_paths_kept = share(self.path_share, self.path_steps);
        report.standing_orders_kept = share(self.orders_share, self.orders_steps);
        report.plan_kept = share(self.plan_kept as f64, self.plan_steps);
        report.refs_shown = self.refs_shown;
        report.refs_resolving = share(self.refs_resolved as f64, self.refs_checked);
        report.next_action_strings = self.next_strings;
        report.next_action_recall = share(self.next_kept as f64, self.next_strings);
        report.next_action_long_range_strings = self.next_long;
        report.next_action_long_range_recall = share(self.next_long_kept as f64, self.next_long);
        let mut lost: Vec<(String, usize)> =
            self.lost.iter().map(|(s, n)| (s.clone(), *n)).collect();
        lost.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        lost.truncate(LOST_STRINGS_SHOWN);
        report.next_action_lost = lost;
    }
}

/// Tokens of `request` that repeat `previous` as an exact prefix (the fixed part — tool
/// schemas — counts as stable when there is a previous request).
fn stable_prefix_tokens(previous: Option<&[Message]>, request: &StepRequest<'_>) -> u64 {
    let Some(previous) = previous else { return 0 };
    let mut tokens = request.fixed_tokens;
    for (index, (a, b)) in previous.iter().zip(request.messages.iter()).enumerate() {
        // The same memory is the same message: histories do not change during a replay.
        if !std::ptr::eq(a, b) && a != b {
            break;
        }
        tokens += u64::from(request.message_tokens.get(index).copied().unwrap_or(0));
    }
    tokens
}

/// How many of the most recent API rounds of `history` appear unchanged at the end of
/// `request`, up to [`VERBATIM_ROUNDS_CAP`].
fn recent_rounds_verbatim(
    history: &[Message],
    round_starts: &[usize],
    request: &[Message],
) -> usize {
    let mut end = history.len();
    for (kept, &start) in round_starts
        .iter()
        .rev()
        .take(VERBATIM_ROUNDS_CAP)
        .enumerate()
    {
        let round = &history[start..end];
        let tail = history.len() - start;
        if request.len() < tail
            || request[request.len() - tail..request.len() - (history.len() - end)] != *round
        {
            return kept;
        }
        end = start;
    }
    VERBATIM_ROUNDS_CAP
}

fn summarize_times(times: &[(Duration, bool)]) -> EngineTime {
    let micros: Vec<f64> = times.iter().map(|(d, _)| d.as_secs_f64() * 1e6).collect();
    let quiet: Vec<f64> = times
        .iter()
        .filter(|(_, c)| !c)
        .map(|(d, _)| d.as_secs_f64() * 1e6)
        .collect();
    let busy: Vec<f64> = times
        .iter()
        .filter(|(_, c)| *c)
        .map(|(d, _)| d.as_secs_f64() * 1e6)
        .collect();
    let head = &micros[..micros.len().min(500)];
    let tail = &micros[micros.len().saturating_sub(500)..];
    EngineTime {
        total: micros.iter().sum(),
        p50_step: percentile(&micros, 0.50),
        p99_step: percentile(&micros, 0.99),
        first_500: TimeSummary {
            p50: percentile(head, 0.50),
            p99: percentile(head, 0.99),
        },
        last_500: TimeSummary {
            p50: percentile(tail, 0.50),
            p99: percentile(tail, 0.99),
        },
        p50_quiet_step: percentile(&quiet, 0.50),
        p99_quiet_step: percentile(&quiet, 0.99),
        mean_compacting_step: if busy.is_empty() {
            0.0
        } else {
            busy.iter().sum::<f64>() / busy.len() as f64
        },
    }
}

/// The `q` quantile (nearest rank) of `values`; 0 for an empty slice.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::Profiles;

    fn session(messages: Vec<Message>) -> Session {
        Session {
            id: "s".into(),
            messages,
            ..Session::default()
        }
    }

    fn run(sessions: &[Session], window: u64) -> ReplayReport {
        let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
        let options = ReplayOptions {
            window,
            rules: CheckRules::openai(),
        };
        replay::<String>(
            sessions,
            &model,
            &options,
            &mut Unmanaged::default(),
            &mut |_| Ok(()),
        )
        .unwrap_or_default()
    }

    #[test]
    fn every_assistant_message_is_one_step_over_the_prefix_before_it() {
        let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
        let messages = vec![
            Message::system("be brief"),
            Message::user("what is 2+2"),
            Message::tool_call("c", "calc", "{\"e\":\"2+2\"}"),
            Message::tool_result("c", "4"),
            Message::assistant("4"),
        ];
        let expected: Vec<u64> = [2usize, 4]
            .iter()
            .map(|&n| {
                messages[..n]
                    .iter()
                    .map(|m| u64::from(model.message_tokens(m)))
                    .sum()
            })
            .collect();
        let report = run(&[session(messages)], 10_000);
        assert_eq!(report.steps, 2);
        assert_eq!(report.input_tokens_per_step, expected);
        assert_eq!(report.peak_input_tokens, expected[1]);
        assert_eq!(report.cumulative_input_tokens, expected[0] + expected[1]);
        // The second call repeats the first as its prefix: only the new part is uncached.
        assert_eq!(report.cumulative_uncached_input_tokens, expected[1]);
        assert_eq!(report.violations, 0);
        assert_eq!(report.overflowed_steps, 0);
        assert_eq!(report.min_recent_rounds_verbatim, VERBATIM_ROUNDS_CAP);
    }

    #[test]
    fn steps_over_the_window_are_counted_and_broken_pairs_reported() {
        let messages = vec![
            Message::user("x ".repeat(400)),
            Message::tool_result("ghost", "orphan"),
            Message::assistant("a"),
        ];
        let report = run(&[session(messages)], 50);
        assert_eq!(report.overflowed_steps, 1);
        assert_eq!(report.violations, 1);
    }

    #[test]
    fn sessions_are_replayed_independently() {
        let one = session(vec![Message::user("a"), Message::assistant("b")]);
        let report = run(&[one.clone(), one], 1_000);
        assert_eq!(report.steps, 2);
        assert_eq!(
            report.input_tokens_per_step[0],
            report.input_tokens_per_step[1]
        );
        assert_eq!(report.sessions, 2);
    }

    #[test]
    fn rounds_missing_from_the_tail_are_not_verbatim() {
        let history = vec![
            Message::user("u"),
            Message::tool_call("a", "f", "{}"),
            Message::tool_result("a", "1"),
            Message::tool_call("b", "f", "{}"),
            Message::tool_result("b", "2"),
        ];
        let starts = [1, 3];
        assert_eq!(
            recent_rounds_verbatim(&history, &starts, &history),
            VERBATIM_ROUNDS_CAP
        );
        let mut edited = history.clone();
        edited[2] = Message::tool_result("a", "cleared");
        assert_eq!(recent_rounds_verbatim(&history, &starts, &edited), 1);
        assert_eq!(recent_rounds_verbatim(&history, &starts, &history[3..]), 1);
    }

    #[test]
    fn percentile_uses_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), 50.0);
        assert_eq!(percentile(&values, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
