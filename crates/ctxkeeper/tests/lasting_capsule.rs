//! The capsule's lasting first message stays cached across compactions: on a long chat whose
//! user's words outlive many compactions, the same session bills less input with the lasting
//! part than with the capsule written anew at every compaction, and tells the model the same.

use std::sync::Arc;

use ctxkeeper::core::engine::presets;
use ctxkeeper::core::import::Session;
use ctxkeeper::core::model::{CheckRules, Message};
use ctxkeeper::core::replay::{ReplayOptions, ReplayReport, replay};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::llm::ExtractiveSummarizer;
use ctxkeeper::replay::PolicyReplay;
use ctxkeeper::store::object_archive::ObjectArchive;

/// A chat of `turns` user messages: a long brief, a few standing orders, small talk, each
/// answered at some length.
fn chat(turns: usize) -> Session {
    const ORDERS: [&str; 5] = [
        "Never book a red-eye flight.",
        "All times are in Europe/Lisbon.",
        "The travel budget cap is 4,000 euros.",
        "The trip codename is KESTREL.",
        "Always prefer trains to flights under 600 km.",
    ];
    let brief = format!(
        "We are planning a three-week trip through Portugal and Spain for a family of four. {}",
        "The children like museums, beaches and long lunches; the parents like walking tours. "
            .repeat(25)
    );
    let mut messages = vec![
        Message::system("You are a helpful planning assistant."),
        Message::user(brief),
    ];
    for turn in 1..turns {
        let said = match ORDERS.get(turn / 7).filter(|_| turn % 7 == 0) {
            Some(order) => order.to_string(),
            None => format!("Turn {turn}: a little more about who arrives when."),
        };
        messages.push(Message::user(said));
        messages.push(Message::assistant(format!(
            "Noted for turn {turn}. {}",
            "I have updated the itinerary and the notes accordingly. ".repeat(30)
        )));
    }
    Session {
        id: "lasting".into(),
        messages,
        ..Session::default()
    }
}

fn run(session: &Session, lasting: bool) -> ReplayReport {
    let mut policy = presets::preset("default").expect("default");
    if let Some(capsule) = policy.capsule.as_mut() {
        capsule.lasting_part = lasting;
    }
    let window = 8_000;
    let mut replayer = PolicyReplay::new(
        policy,
        window,
        Arc::new(ObjectArchive::memory()),
        Arc::new(ExtractiveSummarizer::default()),
    )
    .expect("runtime");
    let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
    let options = ReplayOptions {
        window,
        rules: CheckRules::openai(),
    };
    let report = replay(
        std::slice::from_ref(session),
        &model,
        &options,
        &mut replayer,
        &mut |step| {
            if std::env::var_os("SHOW").is_some() && step.number % 10 == 0 {
                for m in step.request.iter().take(3) {
                    eprintln!("{} {:?}: {:.200}", step.number, m.role, m.text());
                }
            }
            Ok::<(), String>(())
        },
    )
    .expect("replay");
    replayer.finish().expect("nothing removed is lost");
    report
}

#[test]
fn the_lasting_part_bills_less_and_keeps_the_same() {
    let session = chat(64);
    let on = run(&session, true);
    let off = run(&session, false);
    assert!(on.compactions >= 5, "{} compactions", on.compactions);
    assert_eq!(on.violations + off.violations, 0);
    assert_eq!(on.leaked_markers + off.leaked_markers, 0);
    assert!(
        on.billed_input_tokens < off.billed_input_tokens,
        "billed with the lasting part {} against {} without",
        on.billed_input_tokens,
        off.billed_input_tokens
    );
    assert!(
        on.cumulative_uncached_input_tokens < off.cumulative_uncached_input_tokens,
        "uncached {} against {}",
        on.cumulative_uncached_input_tokens,
        off.cumulative_uncached_input_tokens
    );
    // The model is told as much: the user's words and standing orders kept alike.
    assert!(on.user_instructions_kept >= off.user_instructions_kept);
    assert!(on.standing_orders_kept >= off.standing_orders_kept);
    eprintln!(
        "billed {} vs {}, uncached {} vs {}, {} compactions, words {:?} vs {:?}, orders {:?} vs {:?}",
        on.billed_input_tokens,
        off.billed_input_tokens,
        on.cumulative_uncached_input_tokens,
        off.cumulative_uncached_input_tokens,
        on.compactions,
        on.user_instructions_kept,
        off.user_instructions_kept,
        on.standing_orders_kept,
        off.standing_orders_kept
    );
}
