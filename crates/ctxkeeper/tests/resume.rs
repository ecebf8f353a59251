//! Resuming a stored session after a restart (`ContextManager::resume`): the policy's
//! `[session] restore_recent_turns` (CowAgent) brings back the last max(3, N / 6) turns, text
//! only; other policies resume the whole saved context.

use std::sync::Arc;

use ctxkeeper::core::engine::{ContextState, presets};
use ctxkeeper::core::model::{Message, Role};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::llm::ExtractiveSummarizer;
use ctxkeeper::store::LocalWorkspace;
use ctxkeeper::{ContextManager, Settings};

fn saved_session() -> ContextState {
    let mut messages = vec![Message::system("You are a support agent.")];
    for i in 0..10 {
        let id = format!("c{i}");
        messages.push(Message::user(format!("question {i}")));
        messages.push(Message::tool_call(&id, "lookup", "{}"));
        messages.push(Message::tool_result(&id, format!("record {i}")));
        messages.push(Message::assistant(format!("answer {i}")));
    }
    ContextState::from_messages(messages)
}

fn manager(policy: &str, dir: &std::path::Path) -> ContextManager {
    let settings = Settings {
        policy: presets::preset(policy).expect("preset"),
        model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
        window: 128_000,
        fixed_tokens: 0,
    };
    ContextManager::new(
        settings,
        "s1",
        Arc::new(LocalWorkspace::new(dir).expect("workspace")),
        Arc::new(ExtractiveSummarizer::default()),
    )
}

#[tokio::test]
async fn cowagent_resumes_the_last_three_turns_text_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let saved = saved_session();
    let appended = saved.appended;
    let mut context = manager("cowagent", dir.path());
    let dropped = context.resume(saved);
    let messages = context.state().to_messages();
    // The instructions, then max(3, 20 / 6) = 3 turns of user text and final reply.
    assert_eq!(messages.len(), 7);
    assert_eq!(dropped, 41 - 7);
    assert_eq!(messages[0].role, Role::System);
    assert_eq!(messages[1].text(), "question 7");
    assert_eq!(messages[6].text(), "answer 9");
    assert!(
        messages
            .iter()
            .all(|m| !m.has_tool_calls() && !m.has_tool_results())
    );
    // The session log goes on where it was.
    assert_eq!(context.state().appended, appended);
    context
        .ingest(Message::user("question 10"))
        .await
        .expect("ingest");
    assert_eq!(
        context
            .state()
            .entries
            .last()
            .and_then(|e| e.meta.log_index),
        Some(appended)
    );
}

#[tokio::test]
async fn other_policies_resume_everything() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut context = manager("default", dir.path());
    assert_eq!(context.resume(saved_session()), 0);
    assert_eq!(context.state().entries.len(), 41);
}
