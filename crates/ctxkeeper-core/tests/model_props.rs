//! Property tests of the message-model invariants over generated agent histories.

use ctxkeeper_core::model::{CheckRules, Message, Part, Role, check, repair, safe_split_points};
use proptest::prelude::*;

/// Tool-call ids come from a tiny pool so that reuse, duplicates and orphans are common.
fn id() -> impl Strategy<Value = String> {
    prop_oneof![Just("a"), Just("b"), Just("c"), Just("")].prop_map(str::to_string)
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        3 => "[a-z ]{0,12}".prop_map(Message::user),
        2 => "[a-z ]{1,12}".prop_map(Message::assistant),
        3 => (prop::collection::vec((id(), "[{}a-z]{0,6}"), 1..4), "[a-z]{0,5}").prop_map(
            |(calls, text)| {
                let parts = calls
                    .into_iter()
                    .map(|(id, args)| Part::tool_call(id, "tool", args))
                    .collect();
                Message::assistant_with_calls(text, parts)
            }
        ),
        4 => (id(), "[a-z]{0,8}").prop_map(|(id, text)| Message::tool_result(id, text)),
        1 => (prop::collection::vec(id(), 1..3), "[a-z]{0,5}").prop_map(|(ids, text)| {
            // An Anthropic-style user message: results first, then text.
            let mut parts: Vec<Part> = ids.into_iter().map(|id| Part::tool_result(id, "r")).collect();
            if !text.is_empty() {
                parts.push(Part::text(text));
            }
            Message::new(Role::User, parts)
        }),
        1 => "[a-z]{1,6}".prop_map(Message::system),
        1 => Just(Message::new(Role::Assistant, vec![])),
    ]
}

fn history() -> impl Strategy<Value = Vec<Message>> {
    prop::collection::vec(message(), 0..24)
}

/// One turn of a well-formed agent history: user text, rounds of calls answered in any order
/// (ids reused across rounds, as real traces do), and a final reply.
fn well_formed_turn() -> impl Strategy<Value = Vec<Message>> {
    let round = (1usize..4, any::<u64>()).prop_map(|(calls, seed)| {
        let ids: Vec<String> = (0..calls).map(|k| format!("call_{k}")).collect();
        let assistant = Message::assistant_with_calls(
            "",
            ids.iter()
                .map(|id| Part::tool_call(id, "tool", "{}"))
                .collect(),
        );
        let mut order = ids.clone();
        order.rotate_left((seed as usize) % calls);
        let mut round = vec![assistant];
        round.extend(order.iter().map(|id| Message::tool_result(id, "ok")));
        round
    });
    (
        "[a-z]{1,8}",
        prop::collection::vec(round, 0..4),
        "[a-z]{1,8}",
    )
        .prop_map(|(ask, rounds, reply)| {
            let mut turn = vec![Message::user(ask)];
            turn.extend(rounds.into_iter().flatten());
            turn.push(Message::assistant(reply));
            turn
        })
}

fn well_formed() -> impl Strategy<Value = Vec<Message>> {
    prop::collection::vec(well_formed_turn(), 0..5).prop_map(|turns| {
        let mut history = vec![Message::system("rules")];
        history.extend(turns.into_iter().flatten());
        history
    })
}

fn rules() -> impl Strategy<Value = CheckRules> {
    prop_oneof![
        Just(CheckRules::openai()),
        Just(CheckRules::anthropic()),
        Just(CheckRules::history())
    ]
}

/// Every user-visible text of a history, in order (results and calls excluded).
fn plain_texts(history: &[Message]) -> Vec<String> {
    history
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| p.as_text().filter(|t| !t.is_empty()).map(str::to_string))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn repair_leaves_nothing_for_check_and_is_idempotent(mut history in history(), rules in rules()) {
        repair(&mut history, &rules);
        let violations = check(&history, &rules);
        prop_assert!(violations.is_empty(), "after repair: {:?}", violations);
        let once = history.clone();
        let second = repair(&mut history, &rules);
        prop_assert!(second.is_clean(), "second repair changed {:?}", second);
        prop_assert_eq!(history, once);
    }

    #[test]
    fn repair_keeps_every_plain_text_in_order(history in history()) {
        let before = plain_texts(&history);
        let mut repaired = history.clone();
        repair(&mut repaired, &CheckRules::openai());
        // Synthetic results add no text parts; results turned into text only under rules that
        // move parts, so under OpenAI rules the plain texts are exactly preserved.
        prop_assert_eq!(plain_texts(&repaired), before);
    }

    #[test]
    fn well_formed_histories_check_clean_and_repair_leaves_them_alone(history in well_formed()) {
        for rules in [CheckRules::openai(), CheckRules::history()] {
            let violations = check(&history, &rules);
            prop_assert!(violations.is_empty(), "{:?}", violations);
            let mut repaired = history.clone();
            prop_assert!(repair(&mut repaired, &rules).is_clean());
            prop_assert_eq!(&repaired, &history);
        }
    }

    #[test]
    fn splitting_at_safe_points_never_separates_calls_from_results(mut history in history()) {
        repair(&mut history, &CheckRules::openai());
        for point in safe_split_points(&history) {
            // The kept suffix starts with something other than an orphaned result.
            let suffix = &history[point..];
            let orphans = check(suffix, &CheckRules::history())
                .into_iter()
                .filter(|v| v.kind.is_tool_pairing())
                .count();
            prop_assert_eq!(orphans, 0, "split at {} leaves broken pairs", point);
        }
    }
}
