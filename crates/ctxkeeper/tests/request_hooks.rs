//! Request-time hooks of the library facade (Agentrail's context providers and transform
//! contexts): a provider's messages go where the policy places request-time context (before
//! the history under `agentrail`, after it otherwise), a transform rewrites what is sent, and
//! neither changes the context the manager keeps.

#![allow(clippy::unwrap_used)] // a failed step in a test should panic with its location

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ctxkeeper::core::engine::presets;
use ctxkeeper::core::model::{Message, Part, Role};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::{ContextManager, Settings};

mod common;

use common::{in_memory, ingest_all};

fn manager(preset: &str) -> ContextManager {
    let settings = Settings {
        policy: presets::preset(preset).unwrap(),
        model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
        window: 128_000,
        fixed_tokens: 0,
    };
    in_memory(settings, "hooks")
}

/// The texts of the request `context` prepares after [`conversation`].
async fn texts_sent_after_conversation(context: &mut ContextManager) -> Vec<String> {
    conversation(context).await;
    let sent = context.prepare().await.unwrap().messages;
    sent.iter().map(Message::text).collect()
}

async fn conversation(context: &mut ContextManager) {
    ingest_all(
        context,
        [
            Message::system("You are a careful agent."),
            Message::user("Fix the invoice totals."),
            Message::assistant("Reading the code."),
            Message::user("The key is sk-live-SECRET."),
        ],
    )
    .await;
}

fn identity(_: &[Message]) -> Vec<Message> {
    vec![Message::user("Tenant: acme / User: ana")]
}

/// Agentrail's providers are prepended to the session history: right after the
/// instructions, before the conversation. Other presets keep them after the history, where
/// the whole history stays the cached prefix.
#[tokio::test]
async fn providers_go_where_the_policy_places_request_time_context() {
    let mut agentrail = manager("agentrail");
    agentrail.add_provider(identity);
    assert_eq!(
        texts_sent_after_conversation(&mut agentrail).await,
        [
            "You are a careful agent.",
            "Tenant: acme / User: ana",
            "Fix the invoice totals.",
            "Reading the code.",
            "The key is sk-live-SECRET.",
        ]
    );

    let mut default = manager("default");
    default.add_provider(identity);
    conversation(&mut default).await;
    let sent = default.prepare().await.unwrap().messages;
    assert_eq!(sent.len(), 5);
    assert_eq!(sent[4].text(), "Tenant: acme / User: ana");

    // Never stored: the context holds the conversation only, and the next request carries
    // a fresh provider message.
    assert_eq!(agentrail.state().entries.len(), 4);
    let again = agentrail.prepare().await.unwrap().messages;
    assert_eq!(
        again
            .iter()
            .filter(|m| m.text() == "Tenant: acme / User: ana")
            .count(),
        1
    );
}

/// Transforms see the messages before they are sent and may rewrite them, left to right;
/// providers then run against what the transforms left (the seed's order). The managed
/// context keeps what the agent really said.
#[tokio::test]
async fn transforms_rewrite_what_is_sent_before_the_providers_run() {
    let mut context = manager("agentrail");
    context.add_transform(|history: Vec<Message>| {
        history
            .into_iter()
            .map(|m| {
                if m.text().contains("sk-live-") {
                    Message::new(m.role, vec![Part::text("The key is [redacted].")])
                } else {
                    m
                }
            })
            .collect()
    });
    context.add_transform(|mut history: Vec<Message>| {
        history.retain(|m| m.role != Role::Assistant);
        history
    });
    let provider_saw = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&provider_saw);
    context.add_provider(move |history: &[Message]| {
        seen.store(history.len(), Ordering::SeqCst);
        assert!(history.iter().all(|m| !m.text().contains("SECRET")));
        vec![Message::user("Date: 2026-01-05")]
    });
    assert_eq!(
        texts_sent_after_conversation(&mut context).await,
        [
            "You are a careful agent.",
            "Date: 2026-01-05",
            "Fix the invoice totals.",
            "The key is [redacted].",
        ]
    );
    assert_eq!(
        provider_saw.load(Ordering::SeqCst),
        3,
        "after both transforms"
    );
    let kept: Vec<String> = context.state().messages().map(Message::text).collect();
    assert!(
        kept.iter().any(|t| t.contains("sk-live-SECRET")),
        "{kept:?}"
    );
    assert!(kept.iter().any(|t| t == "Reading the code."), "{kept:?}");
}
