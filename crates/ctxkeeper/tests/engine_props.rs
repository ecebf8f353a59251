//! Property tests of the whole engine over generated agent histories and random policies:
//! every request sent passes the provider rules, the request never exceeds the token trigger
//! when the content that must stay (instructions, the current ask, the recent rounds) fits
//! under it, and everything removed from the context is recoverable from the archive.
//!
//! Histories are generated from a seed (so a failure shrinks to a small, replayable case):
//! turns of a user ask followed by tool-calling rounds whose outputs vary from a line to a
//! few pages, parallel calls, error results and hostile tool-call ids (`../../x`).

use std::sync::Arc;

use ctxkeeper::core::engine::{Accounting, Budget, Engine, PolicyConfig, Stage, presets};
use ctxkeeper::core::import::Session;
use ctxkeeper::core::model::{CheckRules, Message, Part, Role, api_rounds, check};
use ctxkeeper::core::replay::{ReplayOptions, replay};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::llm::ExtractiveSummarizer;
use ctxkeeper::replay::PolicyReplay;
use ctxkeeper::store::object_archive::ObjectArchive;
use proptest::prelude::*;

mod common;

use common::Rng;

const WORDS: &[&str] = &[
    "the",
    "order",
    "flight",
    "refund",
    "status",
    "error",
    "file",
    "line",
    "function",
    "test",
    "passed",
    "failed",
    "user",
    "booking",
    "reservation",
    "update",
    "config",
    "value",
    "return",
    "None",
    "import",
    "def",
    "class",
    "self",
    "path",
    "src",
    "lib",
    "42",
    "2024-05-01",
    "ok",
    "traceback",
    "KeyError",
    "assert",
    "cabin",
    "economy",
    "baggage",
    "payment",
    "gift_card",
];

/// `base` plus up to `spread - 1` random words.
fn words(rng: &mut Rng, base: u64, spread: u64) -> String {
    let count = base + rng.below(spread);
    let mut out = String::with_capacity(count as usize * 7);
    for i in 0..count {
        if i > 0 {
            out.push(if i.is_multiple_of(12) { '\n' } else { ' ' });
        }
        out.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    out
}

/// Generation limits, relative to the window so that what must stay always fits.
#[derive(Debug, Clone)]
struct Shape {
    seed: u64,
    turns: u64,
    max_rounds: u64,
    /// Largest tool output, in words (about 1.3 tokens each).
    max_output_words: u64,
}

fn history(shape: &Shape) -> Vec<Message> {
    let mut rng = Rng(shape.seed);
    let mut messages = vec![Message::system(format!(
        "You are a careful agent. {}",
        words(&mut rng, 40, 120)
    ))];
    let mut call = 0u64;
    for _ in 0..shape.turns {
        messages.push(Message::user(words(&mut rng, 5, 60)));
        for _ in 0..rng.below(shape.max_rounds + 1) {
            let parallel = 1 + rng.below(2);
            let mut calls = Vec::new();
            let mut results = Vec::new();
            for _ in 0..parallel {
                call += 1;
                // Hostile ids must stay ids: never a path outside the archive.
                let id = match rng.below(10) {
                    0 => format!("../../x{call}"),
                    1 => format!("/etc/passwd{call}"),
                    _ => format!("call_{call}"),
                };
                let arguments = format!("{{\"query\": \"{}\"}}", words(&mut rng, 2, 20));
                calls.push(Part::tool_call(&id, "lookup", arguments));
                let output_words = match rng.below(4) {
                    0 => 3 + rng.below(20),
                    _ => 20 + rng.below(shape.max_output_words),
                };
                let mut result = Message::tool_result(&id, words(&mut rng, output_words, 1));
                if rng.below(8) == 0
                    && let Some(Part::ToolResult { is_error, .. }) = result.parts.first_mut()
                {
                    *is_error = true;
                }
                results.push(result);
            }
            messages.push(Message::assistant_with_calls(words(&mut rng, 0, 15), calls));
            messages.extend(results);
        }
        messages.push(Message::assistant(words(&mut rng, 5, 80)));
    }
    messages
}

/// A seed preset with its main knobs moved at random.
fn policy(
    preset: &str,
    trigger: f64,
    target: f64,
    keep_rounds: usize,
    exact: bool,
) -> PolicyConfig {
    let mut policy = presets::preset(preset).expect("preset exists");
    if policy.trigger_ratio.is_some() {
        policy.trigger_ratio = Some(trigger);
        policy.target_ratio = target.min(trigger * 0.8);
    }
    policy.keep_recent_rounds = keep_rounds.min(policy.keep_recent_rounds.max(1));
    policy.accounting = if exact {
        Accounting::Exact
    } else {
        Accounting::Estimate
    };
    policy
}

fn shapes() -> impl Strategy<Value = Shape> {
    (any::<u64>(), 2u64..40, 0u64..4, 50u64..900).prop_map(
        |(seed, turns, max_rounds, max_output_words)| Shape {
            seed,
            turns,
            max_rounds,
            max_output_words,
        },
    )
}

fn configs() -> impl Strategy<Value = (&'static str, f64, f64, usize, bool, u64)> {
    (
        prop::sample::select(&presets::NAMES[1..]),
        0.5f64..0.9,
        0.1f64..0.5,
        0usize..4,
        any::<bool>(),
        prop::sample::select(&[8_000u64, 16_000, 32_000][..]),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn requests_are_valid_bounded_and_lossless(
        shape in shapes(),
        (preset, trigger, target, keep_rounds, exact, window) in configs(),
    ) {
        let messages = history(&shape);
        prop_assert_eq!(check(&messages, &CheckRules::history()).len(), 0);
        let policy = policy(preset, trigger, target, keep_rounds, exact);
        let keep_rounds = policy.keep_recent_rounds;
        let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
        let budget = Budget { window, fixed_tokens: 0 };
        // The bound holds for cascades that can remove any old message (summarize, clear,
        // trim); a cascade that only replaces large tool outputs (ReMe compact) lets small
        // messages pile up past the trigger by design.
        let can_shrink_anything = policy.stages.iter().any(|stage| {
            matches!(stage, Stage::Summarize { .. } | Stage::Clear { .. } | Stage::TrimTurns { .. })
        });
        let trigger_tokens = Engine::new(policy.clone(), model.clone())
            .trigger_tokens(&budget)
            .filter(|_| can_shrink_anything);

        let session = Session { id: "generated".into(), messages, ..Session::default() };
        let archive = Arc::new(ObjectArchive::memory());
        let summarizer = Arc::new(ExtractiveSummarizer::default());
        let mut replayer = PolicyReplay::new(policy, window, archive, summarizer).expect("runtime");
        let options = ReplayOptions { window, rules: CheckRules::openai() };
        let mut largest_request_over_trigger = None;
        let report = replay(&[session], &model, &options, &mut replayer, &mut |step| {
            // What must stay in this request: the instructions, the capsule, the current ask
            // and the rounds since it (the working set). When they fit in half the trigger,
            // the request stays bounded: below the trigger, or, after a compaction that could
            // not get below its hysteresis level, held (so as not to break the prompt cache
            // again for nothing) at most up to the hold ceiling, 98 % of the window.
            let pinned = pinned_tokens(step.request, keep_rounds, &model);
            let hold_ceiling = window - window / 50;
            if let Some(trigger) = trigger_tokens
                && step.input_tokens > trigger.max(hold_ceiling)
                && pinned * 2 <= trigger
            {
                largest_request_over_trigger = Some((step.number, step.input_tokens, pinned));
            }
            Ok::<(), String>(())
        })
        .expect("replay");
        replayer.finish().expect("verification");
        prop_assert_eq!(report.violations, 0, "provider-rule violations");
        prop_assert_eq!(replayer.unrecoverable_items, 0, "content lost");
        prop_assert!(
            largest_request_over_trigger.is_none(),
            "request over the trigger {:?} and the hold ceiling while the pinned content fits: (step, tokens, pinned) = {:?}",
            trigger_tokens,
            largest_request_over_trigger
        );
    }
}

/// Tokens of the system messages plus everything from the last user ask or the start of the
/// `keep_rounds`-th most recent API round on, whichever is earlier.
fn pinned_tokens(request: &[Message], keep_rounds: usize, model: &TokenModel) -> u64 {
    let mut last_ask = request
        .iter()
        .rposition(|m| m.role == Role::User && !m.has_tool_results())
        .unwrap_or(request.len());
    let rounds = api_rounds(request);
    if keep_rounds > 0
        && let Some(round) = rounds.len().checked_sub(keep_rounds).map(|i| rounds[i])
    {
        last_ask = last_ask.min(round.start);
    }
    request
        .iter()
        .enumerate()
        // The session capsule stays by design (the user's words, files, plan): it is pinned.
        .filter(|(i, m)| {
            m.role == Role::System || *i >= last_ask || m.text().starts_with("[Session capsule:")
        })
        .map(|(_, m)| u64::from(model.message_tokens(m)))
        .sum()
}
