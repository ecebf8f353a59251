//! Repairing client histories (`[gateway] repair = true`, `--repair`): an agent that sends a
//! broken tool-call pair (a call without its result, a result without its call, a result
//! after the round closed, duplicates) gets it fixed by [`ctxkeeper_core::model::repair`]
//! instead of a 400, and the session's events gain one `history_repaired` event that names
//! each repair with its count. Off by default: a broken pair usually means a broken agent,
//! and the error says so.
//!
//! The repair is deterministic and adds no wall-clock data, so the same broken history
//! repairs to the same bytes on every request and the prompt cache holds.
//!
//! ```
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_gateway::repair::repair_history;
//!
//! let mut history = vec![
//!     Message::user("list files"),
//!     Message::tool_call("c1", "ls", "{}"),
//!     Message::user("never mind"),
//! ];
//! let repairs = repair_history(&mut history).expect("the call had no result");
//! assert_eq!(repairs.get("synthesized_results"), Some(&1));
//! assert!(repair_history(&mut history).is_none(), "repaired once, clean after");
//! ```

use std::collections::BTreeMap;

use ctxkeeper_core::model::{CheckRules, Message, RepairReport, repair};

use crate::sessions::Incoming;

impl Incoming {
    /// Names the repairs made to the request's history, announced with its step.
    pub fn with_repairs(mut self, repairs: Option<BTreeMap<String, usize>>) -> Incoming {
        self.repairs = repairs;
        self
    }
}

/// Repairs what the gateway would refuse (the rules of the OpenAI APIs, which every face
/// checks); returns each kind of repair made with its count, or `None` when the history
/// was already valid.
pub fn repair_history(messages: &mut Vec<Message>) -> Option<BTreeMap<String, usize>> {
    let report = repair(messages, &CheckRules::openai());
    let named = named(&report);
    (!named.is_empty()).then_some(named)
}

/// The repairs of a report by name, without the kinds that did not happen.
fn named(report: &RepairReport) -> BTreeMap<String, usize> {
    let RepairReport {
        dropped_orphan_results,
        dropped_duplicate_results,
        moved_results,
        synthesized_results,
        renamed_call_ids,
        misplaced_parts_as_text,
        instructions_as_user,
        inserted_opening,
        merged_messages,
        dropped_empty_messages,
        wrapped_arguments,
    } = *report;
    [
        ("dropped_orphan_results", dropped_orphan_results),
        ("dropped_duplicate_results", dropped_duplicate_results),
        ("moved_results", moved_results),
        ("synthesized_results", synthesized_results),
        ("renamed_call_ids", renamed_call_ids),
        ("misplaced_parts_as_text", misplaced_parts_as_text),
        ("instructions_as_user", instructions_as_user),
        ("inserted_opening", inserted_opening),
        ("merged_messages", merged_messages),
        ("dropped_empty_messages", dropped_empty_messages),
        ("wrapped_arguments", wrapped_arguments),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(name, n)| (name.to_string(), n))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxkeeper_core::model::check;

    #[test]
    fn an_orphan_result_is_dropped_and_named() {
        let mut history = vec![
            Message::user("hi"),
            Message::tool_result("ghost", "output of a call nobody made"),
            Message::assistant("hello"),
        ];
        let repairs = repair_history(&mut history).expect("repaired");
        assert_eq!(
            repairs,
            BTreeMap::from([("dropped_orphan_results".to_string(), 1)])
        );
        assert!(check(&history, &CheckRules::openai()).is_empty());
    }

    #[test]
    fn a_valid_history_is_left_alone() {
        let mut history = vec![
            Message::user("list"),
            Message::tool_call("c1", "ls", "{}"),
            Message::tool_result("c1", "a b"),
            Message::assistant("two files"),
        ];
        let before = history.clone();
        assert_eq!(repair_history(&mut history), None);
        assert_eq!(history, before);
    }
}
