//! `repair`: a deterministic, idempotent fix for everything [`check`](super::check) reports.
//!
//! Repair never adds wall-clock data or randomness, so repairing the same history twice gives
//! byte-identical output and a provider's prompt cache survives. What it does, by rule:
//! - a result answers the closest preceding assistant message; results that arrive late (after
//!   other content) are moved up to directly follow their call; results with no call there are
//!   dropped; second results for the same call are dropped;
//! - a call without a result gets a synthetic error result saying it was interrupted;
//! - repeated call ids within one message are renamed (`id#2`) and matched to repeated results
//!   in order; empty ids get a positional id;
//! - tool calls outside assistant messages and results inside them become text;
//! - under provider rules that need it: late instructions become user messages, a conversation
//!   opening with the assistant gets a placeholder user message, adjacent same-side messages are
//!   merged, empty messages are dropped, and non-object tool arguments are wrapped as
//!   `{"input": "<original text>"}`.
//!
//! ```
//! use ctxkeeper_core::model::{check, repair, CheckRules, Message, Part};
//!
//! let mut history = vec![
//!     Message::user("hi"),
//!     Message::tool_call("a", "f", "{}"),
//!     Message::tool_result("ghost", "orphan"),
//! ];
//! let report = repair(&mut history, &CheckRules::openai());
//! assert_eq!(report.dropped_orphan_results, 1);
//! assert_eq!(report.synthesized_results, 1);
//! assert!(check(&history, &CheckRules::openai()).is_empty());
//! assert!(repair(&mut history, &CheckRules::openai()).is_clean());
//! ```

use super::check::CheckRules;
use super::message::{Extra, Message, Part, Role};

/// The text of a synthetic result for a call whose result was never recorded.
pub const INTERRUPTED_RESULT_TEXT: &str =
    "[interrupted: this tool call produced no result; it may not have run]";

/// The text of the user message inserted when a conversation opens with the assistant.
pub const OPENING_PLACEHOLDER_TEXT: &str = "[earlier conversation omitted]";

/// What [`repair`] changed, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    pub dropped_orphan_results: usize,
    pub dropped_duplicate_results: usize,
    pub moved_results: usize,
    pub synthesized_results: usize,
    pub renamed_call_ids: usize,
    pub misplaced_parts_as_text: usize,
    pub instructions_as_user: usize,
    pub inserted_opening: usize,
    pub merged_messages: usize,
    pub dropped_empty_messages: usize,
    pub wrapped_arguments: usize,
}

impl RepairReport {
    /// True when repair changed nothing.
    pub fn is_clean(&self) -> bool {
        *self == RepairReport::default()
    }
}

/// Repairs `messages` in place so that `check(messages, rules)` is empty, and reports what it
/// changed. Running it again changes nothing.
pub fn repair(messages: &mut Vec<Message>, rules: &CheckRules) -> RepairReport {
    let mut report = RepairReport::default();
    let allow_pending_tail = rules.allow_pending_tail;
    misplaced_parts_to_text(messages, &mut report);
    if rules.instructions_only_at_start {
        late_instructions_to_user(messages, &mut report);
    }
    if rules.arguments_must_be_objects {
        wrap_non_object_arguments(messages, &mut report);
    }
    if !rules.allow_empty_messages {
        drop_empty(messages, &mut report);
    }
    pair_calls_and_results(messages, allow_pending_tail, &mut report);
    if rules.first_message_user {
        ensure_user_opening(messages, &mut report);
    }
    if rules.alternating_roles {
        merge_same_side(messages, &mut report);
    }
    report
}

/// Wraps tool arguments that are not a JSON object as `{"input": "<text>"}` (`{}` when blank),
/// as providers that take arguments as an object require.
pub fn object_arguments(arguments: &str) -> Option<String> {
    if arguments.trim().is_empty() {
        return Some("{}".to_string());
    }
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(value) if value.is_object() => None,
        _ => Some(serde_json::json!({ "input": arguments }).to_string()),
    }
}

fn misplaced_parts_to_text(messages: &mut [Message], report: &mut RepairReport) {
    for message in messages.iter_mut() {
        let is_assistant = message.role == Role::Assistant;
        for part in message.parts.iter_mut() {
            let text = match &*part {
                Part::ToolCall {
                    name, arguments, ..
                } if !is_assistant => {
                    format!("[tool call {name} {arguments}]")
                }
                Part::ToolResult { call_id, .. } if is_assistant => {
                    let body = Message::new(Role::Tool, vec![part.clone()]).text();
                    format!("[tool result for {call_id}] {body}")
                }
                _ => continue,
            };
            *part = Part::text(text);
            report.misplaced_parts_as_text += 1;
        }
    }
}

fn late_instructions_to_user(messages: &mut [Message], report: &mut RepairReport) {
    let mut started = false;
    for message in messages.iter_mut() {
        if message.role.is_instruction() {
            if started {
                message.role = Role::User;
                report.instructions_as_user += 1;
            }
        } else {
            started = true;
        }
    }
}

fn wrap_non_object_arguments(messages: &mut [Message], report: &mut RepairReport) {
    for message in messages.iter_mut().filter(|m| m.role == Role::Assistant) {
        for part in message.parts.iter_mut() {
            if let Part::ToolCall { arguments, .. } = part
                && let Some(wrapped) = object_arguments(arguments)
            {
                *arguments = wrapped;
                report.wrapped_arguments += 1;
            }
        }
    }
}

fn drop_empty(messages: &mut Vec<Message>, report: &mut RepairReport) {
    let before = messages.len();
    messages.retain(|m| !m.parts.is_empty());
    report.dropped_empty_messages += before - messages.len();
}

/// One call of an assistant message: its id on the wire before and after renaming.
struct CallSlot {
    original: String,
    id: String,
    answered: bool,
}

fn pair_calls_and_results(
    messages: &mut Vec<Message>,
    allow_pending_tail: bool,
    report: &mut RepairReport,
) {
    let input = std::mem::take(messages);
    let mut out: Vec<Message> = Vec::with_capacity(input.len());
    let mut iter = input.into_iter().peekable();

    // Results before the first assistant message answer nothing.
    while let Some(message) = iter.next_if(|m| m.role != Role::Assistant) {
        push_without_results(&mut out, message, |_| report.dropped_orphan_results += 1);
    }

    while let Some(mut assistant) = iter.next() {
        let mut slots = unique_call_slots(&mut assistant, out.len(), report);
        let mut zone: Vec<Message> = Vec::new();
        while let Some(message) = iter.next_if(|m| m.role != Role::Assistant) {
            zone.push(message);
        }
        out.push(assistant);

        // The last assistant message of a stored history may still wait for its tools.
        let pending_tail = allow_pending_tail
            && iter.peek().is_none()
            && zone.iter().all(Message::is_only_tool_results);
        if zone_is_valid(&zone, &slots, pending_tail) {
            out.extend(zone);
            continue;
        }

        // Rebuild: leading result messages (filtered), then late results, then synthetic
        // results, then the zone's other content.
        let mut leading = true;
        let mut late_results: Vec<Part> = Vec::new();
        let mut rest: Vec<Message> = Vec::new();
        for mut message in zone {
            let is_leading_result = leading && message.is_only_tool_results();
            leading = is_leading_result;
            let mut kept = Vec::with_capacity(message.parts.len());
            for part in std::mem::take(&mut message.parts) {
                let Part::ToolResult {
                    call_id,
                    content,
                    is_error,
                    extra,
                } = part
                else {
                    kept.push(part);
                    continue;
                };
                let slot = slots
                    .iter_mut()
                    .find(|s| s.original == call_id && !s.answered);
                let Some(slot) = slot else {
                    if slots.iter().any(|s| s.original == call_id) {
                        report.dropped_duplicate_results += 1;
                    } else {
                        report.dropped_orphan_results += 1;
                    }
                    continue;
                };
                slot.answered = true;
                let part = Part::ToolResult {
                    call_id: slot.id.clone(),
                    content,
                    is_error,
                    extra,
                };
                if is_leading_result {
                    kept.push(part);
                } else {
                    report.moved_results += 1;
                    late_results.push(part);
                }
            }
            if kept.is_empty() {
                continue;
            }
            message.parts = kept;
            if is_leading_result {
                out.push(message);
            } else {
                rest.push(message);
            }
        }
        for part in late_results {
            out.push(Message::new(Role::Tool, vec![part]));
        }
        for slot in slots.iter().filter(|s| !s.answered && !pending_tail) {
            report.synthesized_results += 1;
            out.push(Message::new(
                Role::Tool,
                vec![Part::ToolResult {
                    call_id: slot.id.clone(),
                    content: vec![Part::text(INTERRUPTED_RESULT_TEXT)],
                    is_error: true,
                    extra: Extra::new(),
                }],
            ));
        }
        slots.clear();
        out.extend(rest);
    }
    *messages = out;
}

/// Collects the calls of an assistant message, renaming empty and repeated ids so each is
/// unique within the message.
fn unique_call_slots(
    assistant: &mut Message,
    position: usize,
    report: &mut RepairReport,
) -> Vec<CallSlot> {
    let mut slots: Vec<CallSlot> = Vec::new();
    for (part_index, part) in assistant.parts.iter_mut().enumerate() {
        let Part::ToolCall { id, .. } = part else {
            continue;
        };
        let original = id.clone();
        let unique = if id.is_empty() || slots.iter().any(|s| s.id == *id) {
            let base = if id.is_empty() {
                format!("call_{position}_{part_index}")
            } else {
                id.clone()
            };
            let mut n = 2;
            let mut candidate = if id.is_empty() {
                base.clone()
            } else {
                format!("{base}#{n}")
            };
            while slots.iter().any(|s| s.id == candidate) {
                n += 1;
                candidate = format!("{base}#{n}");
            }
            report.renamed_call_ids += 1;
            *id = candidate.clone();
            candidate
        } else {
            id.clone()
        };
        slots.push(CallSlot {
            original,
            id: unique,
            answered: false,
        });
    }
    slots
}

/// A zone is valid when its results come first, each answers a distinct call, and every call
/// is answered.
fn zone_is_valid(zone: &[Message], slots: &[CallSlot], pending_tail: bool) -> bool {
    let mut answered = vec![false; slots.len()];
    let mut in_results = true;
    for message in zone {
        for part in &message.parts {
            match part {
                Part::ToolResult { call_id, .. } => {
                    if !in_results {
                        return false;
                    }
                    match slots
                        .iter()
                        .enumerate()
                        .find(|(i, s)| s.id == *call_id && !answered[*i])
                    {
                        Some((i, _)) => answered[i] = true,
                        None => return false,
                    }
                }
                _ => in_results = false,
            }
        }
    }
    pending_tail || answered.iter().all(|a| *a)
}

fn push_without_results(
    out: &mut Vec<Message>,
    mut message: Message,
    mut on_drop: impl FnMut(&Part),
) {
    if !message.has_tool_results() {
        out.push(message);
        return;
    }
    message.parts.retain(|p| {
        let keep = !matches!(p, Part::ToolResult { .. });
        if !keep {
            on_drop(p);
        }
        keep
    });
    if !message.parts.is_empty() {
        out.push(message);
    }
}

fn ensure_user_opening(messages: &mut Vec<Message>, report: &mut RepairReport) {
    let first = messages.iter().position(|m| !m.role.is_instruction());
    if let Some(index) = first
        && messages[index].role == Role::Assistant
    {
        messages.insert(index, Message::user(OPENING_PLACEHOLDER_TEXT));
        report.inserted_opening += 1;
    }
}

fn merge_same_side(messages: &mut Vec<Message>, report: &mut RepairReport) {
    let input = std::mem::take(messages);
    let mut out: Vec<Message> = Vec::with_capacity(input.len());
    for message in input {
        let side = side_of(&message);
        match out.last_mut() {
            Some(previous) if side.is_some() && side_of(previous) == side => {
                if previous.role == Role::Tool {
                    previous.role = Role::User;
                }
                previous.parts.extend(message.parts);
                report.merged_messages += 1;
            }
            _ => out.push(message),
        }
    }
    *messages = out;
}

/// The side a message speaks for under strict alternation; instructions take no side.
fn side_of(message: &Message) -> Option<Role> {
    match message.role {
        Role::System | Role::Developer => None,
        Role::Assistant => Some(Role::Assistant),
        Role::User | Role::Tool => Some(Role::User),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::check::check;

    fn call(id: &str) -> Part {
        Part::tool_call(id, "f", "{}")
    }

    fn repaired(mut history: Vec<Message>, rules: CheckRules) -> (Vec<Message>, RepairReport) {
        let report = repair(&mut history, &rules);
        assert!(
            check(&history, &rules).is_empty(),
            "{:?}",
            check(&history, &rules)
        );
        let again = history.clone();
        assert!(
            repair(&mut history, &rules).is_clean(),
            "repair is not idempotent"
        );
        assert_eq!(history, again);
        (history, report)
    }

    #[test]
    fn valid_history_is_left_untouched() {
        let history = vec![
            Message::user("hi"),
            Message::assistant_with_calls("", vec![call("a")]),
            Message::tool_result("a", "ok"),
            Message::assistant("done"),
        ];
        let (out, report) = repaired(history.clone(), CheckRules::openai());
        assert!(report.is_clean());
        assert_eq!(out, history);
    }

    #[test]
    fn late_result_moves_up_before_intervening_text() {
        let history = vec![
            Message::user("hi"),
            Message::assistant_with_calls("", vec![call("a")]),
            Message::user("still there?"),
            Message::tool_result("a", "late"),
        ];
        let (out, report) = repaired(history, CheckRules::openai());
        assert_eq!(report.moved_results, 1);
        assert_eq!(out[2].text(), "late");
        assert_eq!(out[3].text(), "still there?");
    }

    #[test]
    fn missing_result_is_synthesized_as_an_interrupted_error() {
        let history = vec![
            Message::user("hi"),
            Message::assistant_with_calls("", vec![call("a")]),
        ];
        let (out, report) = repaired(history, CheckRules::openai());
        assert_eq!(report.synthesized_results, 1);
        assert_eq!(out[2].text(), INTERRUPTED_RESULT_TEXT);
        assert!(
            matches!(&out[2].parts[0], Part::ToolResult { is_error: true, call_id, .. } if call_id == "a")
        );
    }

    #[test]
    fn repeated_ids_in_one_message_are_renamed_and_matched_in_order() {
        let history = vec![
            Message::user("hi"),
            Message::assistant_with_calls("", vec![call("a"), call("a")]),
            Message::tool_result("a", "first"),
            Message::tool_result("a", "second"),
        ];
        let (out, report) = repaired(history, CheckRules::openai());
        assert_eq!(report.renamed_call_ids, 1);
        assert_eq!(out[3].tool_result_ids().collect::<Vec<_>>(), vec!["a#2"]);
        assert_eq!(out[3].text(), "second");
    }

    #[test]
    fn orphans_and_duplicates_are_dropped() {
        let history = vec![
            Message::tool_result("early", "x"),
            Message::user("hi"),
            Message::assistant_with_calls("", vec![call("a")]),
            Message::tool_result("a", "1"),
            Message::tool_result("a", "2"),
            Message::tool_result("b", "3"),
        ];
        let (out, report) = repaired(history, CheckRules::openai());
        assert_eq!(report.dropped_orphan_results, 2);
        assert_eq!(report.dropped_duplicate_results, 1);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn anthropic_rules_merge_results_and_fix_placement() {
        let history = vec![
            Message::system("rules"),
            Message::assistant("hello"),
            Message::user("hi"),
            Message::system("late"),
            Message::assistant_with_calls("", vec![call("a"), Part::tool_call("b", "g", "oops")]),
            Message::tool_result("a", "1"),
            Message::tool_result("b", "2"),
            Message::new(Role::Assistant, vec![]),
        ];
        let (out, report) = repaired(history, CheckRules::anthropic());
        assert_eq!(report.inserted_opening, 1);
        assert_eq!(report.instructions_as_user, 1);
        assert_eq!(report.wrapped_arguments, 1);
        assert_eq!(report.dropped_empty_messages, 1);
        assert_eq!(out.last().map(|m| m.tool_result_ids().count()), Some(2));
        assert_eq!(out.last().map(|m| m.role), Some(Role::User));
    }
}
