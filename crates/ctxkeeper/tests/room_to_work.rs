//! Compaction and overflow recovery leave the agent room to work: compactions are spaced by
//! the hysteresis even when a large fixed prompt leaves little room, and a recovery keeps the
//! newest round and the user's latest request, or says it cannot instead of sending an
//! emptied conversation.

#![allow(clippy::unwrap_used)] // a failed step in a test should panic with its location

use ctxkeeper::core::engine::{Event, presets};
use ctxkeeper::core::model::{CheckRules, Message, check};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::{ContextManager, Error, Settings};

mod common;

use common::{in_memory, ingest_all};

fn model() -> TokenModel {
    TokenModel::for_model("gpt-4o", &Profiles::builtin())
}

fn manager(window: u64, fixed_tokens: u64) -> ContextManager {
    let settings = Settings {
        policy: presets::preset("default").unwrap(),
        model: model(),
        window,
        fixed_tokens,
    };
    in_memory(settings, "s1")
}

/// A tool output of about `tokens` tokens (varied words, so it tokenizes like prose).
fn output(step: usize, tokens: usize) -> String {
    let chunk = "alpha beta gamma delta epsilon zeta eta theta iota kappa ".repeat(10);
    let per_chunk = model().text_tokens(&chunk) as usize;
    format!(
        "output of step {step}: {}",
        chunk.repeat(tokens / per_chunk)
    )
}

fn round(step: usize, tokens: usize) -> (Message, Message) {
    let id = format!("call_{step}");
    (
        Message::tool_call(
            &id,
            "Read",
            format!(r#"{{"file_path":"src/module_{step}.rs"}}"#),
        ),
        Message::tool_result(&id, output(step, tokens)),
    )
}

/// Claude Code at a 54k window: 29k of system prompt and tools, about 7.5k more per step.
/// Before, the context after a compaction sat at ~82 % of the window and 8 of 11 requests
/// compacted; now no two compactions are fewer than 3 steps apart, and every request fits.
#[tokio::test]
async fn a_large_fixed_prompt_does_not_make_every_step_compact() {
    let window = 54_000;
    let mut context = manager(window, 29_000);
    let mut events = context.subscribe();
    context
        .ingest(Message::user(
            "Refactor the module loader so that every module is read once; keep the public API.",
        ))
        .await
        .unwrap();
    let output_tokens = 7_400; // plus the call: about 7.5k per step
    let mut compaction_steps = Vec::new();
    let mut expected_steps = Vec::new();
    for step in 0..30 {
        let prepared = context.prepare().await.unwrap();
        assert!(
            prepared.input_tokens <= window,
            "step {step}: {} tokens over the window",
            prepared.input_tokens
        );
        assert!(check(&prepared.messages, &CheckRules::openai()).is_empty());
        if prepared.compacted {
            compaction_steps.push(step);
        }
        while let Ok(event) = events.try_recv() {
            if let Event::ContextCompactionEnd {
                expected_steps_until_next,
                ..
            } = event
            {
                expected_steps.push(expected_steps_until_next);
            }
        }
        // The provider counts what the request carried, exactly.
        let exact = model().messages_tokens(&prepared.messages) + 29_000;
        context.observe_usage(exact);
        let (call, result) = round(step, output_tokens);
        context.ingest(call).await.unwrap();
        context.ingest(result).await.unwrap();
    }
    assert!(compaction_steps.len() >= 5, "{compaction_steps:?}");
    for pair in compaction_steps.windows(2) {
        assert!(
            pair[1] - pair[0] >= 3,
            "compactions at steps {compaction_steps:?}: two fewer than 3 steps apart"
        );
    }
    // Once the growth per step is known, every compaction says when the next one comes.
    assert!(
        expected_steps
            .iter()
            .skip(1)
            .all(|s| s.is_some_and(|n| n >= 2)),
        "{expected_steps:?}"
    );
}

/// A recovery keeps the newest round (the output the model has not seen yet) and the user's
/// latest request, and compacts only as far as the limit requires.
#[tokio::test]
async fn a_recovery_keeps_the_newest_round_and_the_latest_request() {
    let mut context = manager(200_000, 2_000);
    ingest_all(
        &mut context,
        [
            Message::system("You are a coding agent."),
            Message::user("Find why the build is slow."),
        ],
    )
    .await;
    for step in 0..20 {
        let (call, result) = round(step, 3_000);
        context.ingest(call).await.unwrap();
        context.ingest(result).await.unwrap();
    }
    let latest = "Now also make the tests run in parallel.";
    context.ingest(Message::user(latest)).await.unwrap();
    let (call, result) = round(99, 3_000);
    context.ingest(call.clone()).await.unwrap();
    context.ingest(result.clone()).await.unwrap();

    // The provider says the limit is 40k (a smaller deployment than the profile's window).
    let failed = context.prepare().await.unwrap().input_tokens;
    let recovered = context
        .handle_overflow(1, failed, Some(40_000))
        .await
        .unwrap();
    let messages = &recovered.messages;
    assert!(
        recovered.input_tokens <= 40_000,
        "{}",
        recovered.input_tokens
    );
    assert!(
        messages.iter().any(|m| m.text() == latest),
        "latest request kept"
    );
    let tail = &messages[messages.len() - 2..];
    assert_eq!(tail, &[call, result], "the newest round is kept verbatim");
    assert!(check(messages, &CheckRules::openai()).is_empty());
    // Not emptied: old outputs were cleared (their placeholders name their archive), but the
    // calls, the task and the rounds are there.
    assert!(messages.len() > 40, "{} messages", messages.len());
    assert!(
        messages[1].text().contains("Find why the build is slow."),
        "the task is still there: {}",
        messages[1].text()
    );
}

/// A task and one round whose output is about 6,000 tokens; returns the size that failed.
async fn task_with_a_large_output() -> (ContextManager, u64) {
    let mut context = manager(200_000, 0);
    context
        .ingest(Message::user("Summarize the log."))
        .await
        .unwrap();
    let (call, result) = round(1, 6_000);
    context.ingest(call).await.unwrap();
    context.ingest(result).await.unwrap();
    let failed = context.prepare().await.unwrap().input_tokens;
    (context, failed)
}

/// When the newest round alone does not fit beside what every request carries (a tight window,
/// a huge output), the recovery cuts that round's output to a preview naming where the whole
/// output is archived, and keeps the user's request: the agent goes on. Where even that cannot
/// fit, the recovery says so instead of sending a conversation without the task or the output
/// just produced.
#[tokio::test]
async fn a_recovery_cuts_the_newest_output_to_a_preview_or_says_it_cannot_fit() {
    let (mut context, failed) = task_with_a_large_output().await;
    let recovered = context
        .handle_overflow(1, failed, Some(2_000))
        .await
        .expect("the newest output is cut to fit");
    assert!(
        recovered.input_tokens <= 2_000,
        "{}",
        recovered.input_tokens
    );
    let texts: Vec<String> = recovered.messages.iter().map(Message::text).collect();
    assert!(texts.iter().any(|t| t == "Summarize the log."), "{texts:?}");
    let cut = texts.last().expect("the newest round stays");
    assert!(cut.starts_with("output of step 1"), "{cut}");
    assert!(cut.contains("the whole output is archived at"), "{cut}");

    let (mut context, failed) = task_with_a_large_output().await;
    let before = context.state().to_messages();
    match context.handle_overflow(1, failed, Some(60)).await {
        Err(Error::NoRoom { needed, limit }) => {
            assert_eq!(limit, 60);
            assert!(needed > limit);
        }
        other => panic!("expected NoRoom, got {other:?}"),
    }
    assert_eq!(context.state().to_messages(), before, "nothing was removed");
}

/// CowAgent's overflow recovery as its document describes it: trim to at most 5 turns (and cap
/// long results), and clear the context only if that is still too long.
#[tokio::test]
async fn cowagent_recovery_keeps_five_turns_when_they_fit_and_clears_only_when_they_do_not() {
    async fn session(turns: usize, window: u64) -> ContextManager {
        let settings = Settings {
            policy: presets::preset("cowagent").unwrap(),
            model: model(),
            window,
            fixed_tokens: 0,
        };
        let mut context = in_memory(settings, "cow");
        for turn in 0..turns {
            let output = output(turn, 450);
            for message in [
                Message::user(format!("question {turn}: {output}")),
                Message::assistant(format!("answer {turn}: {output}")),
            ] {
                context.ingest(message).await.unwrap();
            }
        }
        context
    }
    // The recovered request fits `limit` and holds the newest `turns` turns.
    let assert_recovered =
        |recovered: &ctxkeeper::Prepared, limit: u64, turns: usize, why: &str| {
            assert!(
                recovered.input_tokens <= limit,
                "{}",
                recovered.input_tokens
            );
            let questions = recovered
                .messages
                .iter()
                .filter(|m| m.text().starts_with("question "))
                .count();
            assert_eq!(questions, turns, "{why}");
        };

    // Five turns (about 4k tokens) fit a 7k limit: kept, not cleared to one.
    let mut context = session(12, 100_000).await;
    let failed = context.prepare().await.unwrap().input_tokens;
    let recovered = context
        .handle_overflow(1, failed, Some(7_000))
        .await
        .unwrap();
    assert_recovered(&recovered, 7_000, 5, "the newest five turns stay");

    // In a 3k window five turns cannot fit: the clear runs in the same attempt, instead of
    // sending a request known to fail.
    let mut context = session(12, 3_000).await;
    let recovered = context
        .handle_overflow(1, failed, Some(3_000))
        .await
        .unwrap();
    assert_recovered(&recovered, 3_000, 1, "only the newest turn is left");
}
