//! Replays a recorded conversation the way the agent lived it, and measures every model call.
//!
//! Every assistant message of a session is one model call whose input is everything before it
//! (plus the tool schemas). A [`StepPolicy`] decides what is actually sent at each step; the
//! unmanaged baseline ([`Unmanaged`]) sends the whole prefix. The report gives the figures a
//! context policy is judged by: peak and cumulative input tokens, steps that overflow the
//! window, provider-rule violations in what was sent, and the engine's own time per step.
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
//! let report = replay(&[session], &model, &options, &mut Unmanaged, &mut |_| Ok(())).unwrap();
//! assert_eq!(report.steps, 2);
//! assert!(report.cumulative_input_tokens > report.peak_input_tokens);
//! ```

use std::borrow::Cow;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::import::Session;
use crate::model::{CheckRules, Message, check};
use crate::tokens::{TokenLedger, TokenModel};

/// Decides what is sent to the model at each step.
pub trait StepPolicy {
    /// The policy's name in reports.
    fn name(&self) -> &str;

    /// Called when a new session starts.
    fn start_session(&mut self, session: &Session) {
        let _ = session;
    }

    /// The messages to send, given everything the agent has seen so far.
    fn prepare<'h>(&mut self, history: &'h [Message]) -> Cow<'h, [Message]>;
}

/// The unmanaged baseline: every step sends the whole history.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unmanaged;

impl StepPolicy for Unmanaged {
    fn name(&self) -> &str {
        "none"
    }

    fn prepare<'h>(&mut self, history: &'h [Message]) -> Cow<'h, [Message]> {
        Cow::Borrowed(history)
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
/// emitting requests (which only the replay tool does).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EngineTime {
    pub total: f64,
    pub p50_step: f64,
    pub p99_step: f64,
    /// The first and last 500 steps, to show whether the cost grows with history.
    pub first_500: TimeSummary,
    pub last_500: TimeSummary,
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
    pub overflowed_steps: usize,
    pub violations: usize,
    pub engine_time_us: EngineTime,
    /// Input tokens of every step, in order (for charts).
    #[serde(skip)]
    pub input_tokens_per_step: Vec<u64>,
}

/// Replays `sessions` one after another under `policy`, calling `observer` for every step.
/// The observer may stop the replay by returning an error, which is passed back.
pub fn replay<E>(
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
        ..ReplayReport::default()
    };
    let mut step_times: Vec<Duration> = Vec::new();

    for session in sessions {
        report.messages += session.messages.len();
        policy.start_session(session);
        let tools_tokens = u64::from(model.tools_tokens(&session.tools));
        let mut ledger = TokenLedger::new();

        for (index, message) in session.messages.iter().enumerate() {
            if message.role != crate::model::Role::Assistant {
                continue;
            }
            let history = &session.messages[..index];

            let started = Instant::now();
            let request = policy.prepare(history);
            let input_tokens = match &request {
                Cow::Borrowed(sent) if sent.len() == history.len() => {
                    ledger.sync(history, model);
                    ledger.prefix_total(history.len())
                }
                other => other.iter().map(|m| u64::from(model.message_tokens(m))).sum(),
            } + tools_tokens;
            step_times.push(started.elapsed());

            let violations = check(&request, &options.rules).len();
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
                request: &request,
                input_tokens,
                violations,
            })?;
        }
    }

    report.engine_time_us = summarize_times(&step_times);
    Ok(report)
}

fn summarize_times(times: &[Duration]) -> EngineTime {
    let micros: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    let head = &micros[..micros.len().min(500)];
    let tail = &micros[micros.len().saturating_sub(500)..];
    EngineTime {
        total: micros.iter().sum(),
        p50_step: percentile(&micros, 0.50),
        p99_step: percentile(&micros, 0.99),
        first_500: TimeSummary { p50: percentile(head, 0.50), p99: percentile(head, 0.99) },
        last_500: TimeSummary { p50: percentile(tail, 0.50), p99: percentile(tail, 0.99) },
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
    use crate::model::Part;
    use crate::tokens::Profiles;

    fn session(messages: Vec<Message>) -> Session {
        Session { id: "s".into(), messages, ..Session::default() }
    }

    fn run(sessions: &[Session], window: u64) -> ReplayReport {
        let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
        let options = ReplayOptions { window, rules: CheckRules::openai() };
        replay::<()>(sessions, &model, &options, &mut Unmanaged, &mut |_| Ok(()))
            .unwrap_or_default()
    }

    #[test]
    fn every_assistant_message_is_one_step_over_the_prefix_before_it() {
        let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
        let messages = vec![
            Message::system("be brief"),
            Message::user("what is 2+2"),
            Message::assistant_with_calls("", vec![Part::tool_call("c", "calc", "{\"e\":\"2+2\"}")]),
            Message::tool_result("c", "4"),
            Message::assistant("4"),
        ];
        let expected: Vec<u64> = [2usize, 4]
            .iter()
            .map(|&n| messages[..n].iter().map(|m| u64::from(model.message_tokens(m))).sum())
            .collect();
        let report = run(&[session(messages)], 10_000);
        assert_eq!(report.steps, 2);
        assert_eq!(report.input_tokens_per_step, expected);
        assert_eq!(report.peak_input_tokens, expected[1]);
        assert_eq!(report.cumulative_input_tokens, expected[0] + expected[1]);
        assert_eq!(report.violations, 0);
        assert_eq!(report.overflowed_steps, 0);
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
        assert_eq!(report.input_tokens_per_step[0], report.input_tokens_per_step[1]);
        assert_eq!(report.sessions, 2);
    }

    #[test]
    fn percentile_uses_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), 50.0);
        assert_eq!(percentile(&values, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
