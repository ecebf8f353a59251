//! Pinning by policy rule (`[policy.pin]`): what a rule pins stays verbatim through every
//! compaction, and what it does not pin is compacted as usual.

#![allow(clippy::unwrap_used)] // a failed step in a test should panic with its location

use ctxkeeper::core::engine::{PinRules, PolicyConfig, presets};
use ctxkeeper::core::model::{Message, Role};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::{ContextManager, Settings};

mod common;

use common::{in_memory, ingest_all};

const TASK: &str = "Port the billing module to the new ledger API; never touch migrations/.";
const SPEC: &str = "SPEC v3: every ledger entry carries an idempotency key";
const WINDOW: u64 = 16_000;

fn manager(policy: PolicyConfig) -> ContextManager {
    let settings = Settings {
        policy,
        model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
        window: WINDOW,
        fixed_tokens: 0,
    };
    in_memory(settings, "pinned")
}

fn big(step: usize) -> String {
    format!("step {step} output: ") + &"lorem ipsum dolor sit amet ".repeat(300)
}

/// Runs a session of 40 tool rounds, the second of which reads the spec; returns how many
/// compactions ran and the final request.
async fn run(policy: PolicyConfig) -> (usize, Vec<Message>) {
    let mut context = manager(policy);
    context.ingest(Message::user(TASK)).await.unwrap();
    let mut compactions = 0;
    let mut last = Vec::new();
    for step in 0..40 {
        let prepared = context.prepare().await.unwrap();
        compactions += usize::from(prepared.compacted);
        last = prepared.messages;
        let id = format!("call_{step}");
        let (tool, output) = if step == 1 {
            ("read_spec", format!("{SPEC}. {}", big(step)))
        } else {
            ("bash", big(step))
        };
        ingest_all(
            &mut context,
            [
                Message::tool_call(&id, tool, "{}"),
                Message::tool_result(&id, output),
            ],
        )
        .await;
    }
    (compactions, last)
}

fn verbatim(messages: &[Message], role: Role, starts: &str) -> bool {
    messages
        .iter()
        .any(|m| m.role == role && m.text().starts_with(starts))
}

#[tokio::test]
async fn pinned_messages_survive_every_compaction_verbatim() {
    let mut policy = presets::preset("default").unwrap();
    policy.pin = PinRules {
        first_user_message: true,
        tools: vec!["read_spec".into()],
        ..PinRules::default()
    };
    let (compactions, last) = run(policy).await;
    assert!(compactions >= 3, "the session must compact: {compactions}");
    assert!(
        verbatim(&last, Role::User, TASK),
        "the task is kept as a message of its own"
    );
    let spec = last
        .iter()
        .find(|m| m.role == Role::Tool && m.text().starts_with(SPEC))
        .expect("the pinned tool result is still there");
    assert!(
        spec.text().len() > big(1).len(),
        "whole, not cut to a preview"
    );
}

#[tokio::test]
async fn without_a_rule_the_same_messages_are_compacted() {
    let (compactions, last) = run(presets::preset("default").unwrap()).await;
    assert!(compactions >= 3, "{compactions}");
    assert!(
        !last
            .iter()
            .any(|m| m.role == Role::Tool && m.text().starts_with(SPEC)),
        "the control run must lose the spec's verbatim output, or the test above proves nothing"
    );
}

#[test]
fn pin_rules_are_read_from_policy_toml_and_validated() {
    let policy = presets::preset("default").unwrap();
    let merged = policy
        .with_overrides("[pin]\ntexts = [\"IMPORTANT:\"]\nroles = [\"developer\"]\n")
        .unwrap();
    assert_eq!(merged.pin.texts, vec!["IMPORTANT:".to_string()]);
    assert_eq!(merged.pin.roles, vec![Role::Developer]);
    let err = policy
        .with_overrides("[pin]\ntexts = [\"  \"]\n")
        .unwrap_err();
    assert!(err.to_string().contains("pin.texts"), "{err}");
    let err = policy
        .with_overrides("[pin]\ntool = [\"x\"]\n")
        .unwrap_err();
    assert!(err.to_string().contains("tool"), "{err}");
}
