//! The budget notice (request-time, never stored, placed without breaking role order) and the
//! stop of compactions that repeat without progress.

#![allow(clippy::unwrap_used)] // a failed step in a test should panic with its location

use ctxkeeper::core::engine::{BudgetNoticeConfig, Event, PolicyConfig, presets};
use ctxkeeper::core::model::{CheckRules, Message, Part, Role, check};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::{ContextManager, Settings};

mod common;

use common::{in_memory, ingest_all};

fn manager(policy: PolicyConfig, window: u64) -> ContextManager {
    let settings = Settings {
        policy,
        model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
        window,
        fixed_tokens: 0,
    };
    in_memory(settings, "s1")
}

fn words(n: usize) -> String {
    (0..n)
        .map(|i| ["alpha", "beta", "gamma", "delta"][i % 4])
        .collect::<Vec<_>>()
        .join(" ")
}

fn with_notice() -> PolicyConfig {
    let mut policy = presets::preset("default").expect("preset");
    policy.budget_notice = Some(BudgetNoticeConfig { nudge_at: 0.75 });
    policy
}

#[tokio::test]
async fn the_notice_appears_past_its_threshold_only_in_the_request() {
    let mut context = manager(with_notice(), 8_000);
    ingest_all(
        &mut context,
        [
            Message::system("You are an agent."),
            Message::user("Look into it."),
        ],
    )
    .await;
    let quiet = context.prepare().await.unwrap();
    assert!(quiet.budget_notice.is_none(), "far below the threshold");

    // Cross 75 % of the trigger (whichever of 80-90 % of 8,000 the cost rule picks), not the
    // trigger itself, with one round of two parallel calls of about 2,700 tokens each (under
    // the 40 % ingest cap).
    context
        .ingest(Message::assistant_with_calls(
            "",
            vec![
                Part::tool_call("call_1", "read", "{}"),
                Part::tool_call("call_2", "read", "{}"),
            ],
        ))
        .await
        .unwrap();
    // Anthropic's shape: both results in one user message.
    context
        .ingest(Message::new(
            Role::User,
            vec![
                Part::tool_result("call_1", words(2_700)),
                Part::tool_result("call_2", words(2_700)),
            ],
        ))
        .await
        .unwrap();
    let prepared = context.prepare().await.unwrap();
    let notice = prepared.budget_notice.clone().expect("notice past 75 %");
    assert!(notice.contains("% of the context window"), "{notice}");

    // It rides inside the last tool result, so Anthropic's role alternation still holds.
    let last = prepared.messages.last().unwrap();
    assert!(last.has_tool_results());
    assert!(last.text().contains(&notice) || tool_result_text(last).contains(&notice));
    let violations = check(&prepared.messages, &CheckRules::anthropic());
    assert!(violations.is_empty(), "{violations:?}");
    assert!(check(&prepared.messages, &CheckRules::history()).is_empty());

    // Never stored: the managed context holds the tool result as it arrived.
    let stored = context.state().to_messages();
    assert!(!tool_result_text(stored.last().unwrap()).contains(&notice));
    // Only the newest message differs from what is stored: the cached prefix holds.
    assert_eq!(
        prepared.messages[..prepared.messages.len() - 1],
        stored[..stored.len() - 1]
    );
}

#[tokio::test]
async fn the_notice_joins_a_trailing_user_ask() {
    let mut context = manager(with_notice(), 4_000);
    context
        .ingest(Message::system("You are an agent."))
        .await
        .unwrap();
    context.ingest(Message::user(words(2_600))).await.unwrap();
    let prepared = context.prepare().await.unwrap();
    let notice = prepared.budget_notice.expect("notice");
    assert_eq!(prepared.messages.len(), 2, "no extra message");
    assert!(prepared.messages[1].text().ends_with(&notice));
}

#[tokio::test]
async fn compactions_that_cannot_get_under_the_trigger_are_stopped_and_reported() {
    // A system prompt larger than the trigger is pinned: no compaction can get under it.
    let mut context = manager(presets::preset("default").expect("preset"), 4_000);
    let mut events = context.subscribe();
    context.ingest(Message::system(words(3_400))).await.unwrap();
    let mut compactions = 0;
    for step in 0..12 {
        context
            .ingest(Message::user(format!("question {step} {}", words(120))))
            .await
            .unwrap();
        if context.prepare().await.unwrap().compacted {
            compactions += 1;
        }
        context
            .ingest(Message::assistant(format!("answer {step}")))
            .await
            .unwrap();
    }
    let mut stopped = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let Event::CompactionSkipped { reason, .. } = event {
            stopped.push(reason);
        }
    }
    assert!(!stopped.is_empty(), "the loop is reported");
    assert!(
        stopped[0].contains("still over the trigger"),
        "{}",
        stopped[0]
    );
    // Without the stop every step would compact again (12); the hold lets the context grow
    // by a twentieth of the window between attempts.
    assert!(compactions < 12, "{compactions} compactions in 12 steps");
}

fn tool_result_text(message: &Message) -> String {
    message
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::ToolResult { content, .. } => Some(
                content
                    .iter()
                    .filter_map(Part::as_text)
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}
