//! `check`: every invariant a provider enforces on a message list, reported with its position.
//!
//! The rules follow what the providers reject with a 400:
//! - every tool call is answered exactly once, by a result that follows its assistant message
//!   before any other content (OpenAI: "an assistant message with `tool_calls` must be followed
//!   by tool messages responding to each `tool_call_id`"; Anthropic: "`tool_use` ids were found
//!   without `tool_result` blocks immediately after");
//! - a tool result answers a call of the closest preceding assistant message (ids may repeat
//!   across a session, so matching is by round, never by id alone);
//! - provider-specific rules, chosen by [`CheckRules`]: instructions only at the start, strict
//!   role alternation, tool arguments that are JSON objects, no empty messages;
//! - no internal fill marker of the engine (`\u{1}ref:N\u{1}`, raw or JSON-escaped) anywhere: a
//!   marker that reaches a request is a reference the model cannot follow.
//!
//! ```
//! use ctxkeeper_core::model::{check, CheckRules, Message, Part, ViolationKind};
//!
//! let history = vec![
//!     Message::user("book a flight"),
//!     Message::tool_call("c1", "search", "{}"),
//!     Message::user("are you there?"),
//! ];
//! let violations = check(&history, &CheckRules::openai());
//! assert_eq!(violations.len(), 1);
//! assert_eq!(violations[0].kind, ViolationKind::MissingToolResult);
//! assert_eq!(violations[0].message, 1);
//! ```

use std::fmt;

use super::message::{Message, Part, Role};

/// Which provider rules to enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckRules {
    /// A trailing assistant message may have calls without results (a stored history that waits
    /// for tool execution). A request sent to a provider must not.
    pub allow_pending_tail: bool,
    /// System/developer messages may only open the conversation (Anthropic has one `system`).
    pub instructions_only_at_start: bool,
    /// User and assistant must alternate (after tool results are folded into user messages).
    pub alternating_roles: bool,
    /// The first non-instruction message must be a user message.
    pub first_message_user: bool,
    /// Tool-call arguments must be the text of a JSON object.
    pub arguments_must_be_objects: bool,
    /// Messages without parts are allowed.
    pub allow_empty_messages: bool,
    /// Internal fill markers in the text are reported (every preset does; a caller that asks
    /// only about tool pairing spares the pass over every text).
    pub internal_markers: bool,
}

impl CheckRules {
    /// What the OpenAI APIs (Chat Completions, Responses) enforce on a request.
    pub const fn openai() -> CheckRules {
        CheckRules {
            allow_pending_tail: false,
            instructions_only_at_start: false,
            alternating_roles: false,
            first_message_user: false,
            arguments_must_be_objects: false,
            allow_empty_messages: true,
            internal_markers: true,
        }
    }

    /// What the Anthropic Messages API enforces on a request.
    pub const fn anthropic() -> CheckRules {
        CheckRules {
            allow_pending_tail: false,
            instructions_only_at_start: true,
            alternating_roles: true,
            first_message_user: true,
            arguments_must_be_objects: true,
            allow_empty_messages: false,
            internal_markers: true,
        }
    }

    /// Only the rules every provider shares, for a stored history that may end in pending calls.
    pub const fn history() -> CheckRules {
        CheckRules {
            allow_pending_tail: true,
            ..CheckRules::openai()
        }
    }
}

impl Default for CheckRules {
    fn default() -> CheckRules {
        CheckRules::openai()
    }
}

/// The kind of an invariant violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    /// A tool result with no matching call in the closest preceding assistant message.
    OrphanToolResult,
    /// A tool call that is never answered before other content follows.
    MissingToolResult,
    /// A second result for a call that was already answered.
    DuplicateToolResult,
    /// Two calls with the same id in one assistant message.
    DuplicateToolCallId,
    /// A call with an empty id, which no result can answer.
    EmptyToolCallId,
    /// A tool call outside an assistant message.
    ToolCallOutsideAssistant,
    /// A tool result inside an assistant message.
    ToolResultInAssistant,
    /// A system/developer message after the conversation started.
    MisplacedInstruction,
    /// Two consecutive messages of the same side.
    ConsecutiveSameRole,
    /// The conversation does not open with a user message.
    FirstMessageNotUser,
    /// A message without any part.
    EmptyMessage,
    /// Tool-call arguments that are not a JSON object.
    InvalidToolArguments,
    /// An engine fill marker (`\u{1}ref:N\u{1}`) that was never replaced by its reference.
    InternalMarker,
}

impl ViolationKind {
    /// True for the kinds that break call/result pairing.
    pub fn is_tool_pairing(self) -> bool {
        matches!(
            self,
            ViolationKind::OrphanToolResult
                | ViolationKind::MissingToolResult
                | ViolationKind::DuplicateToolResult
                | ViolationKind::DuplicateToolCallId
                | ViolationKind::EmptyToolCallId
                | ViolationKind::ToolCallOutsideAssistant
                | ViolationKind::ToolResultInAssistant
        )
    }

    /// The snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::OrphanToolResult => "orphan_tool_result",
            ViolationKind::MissingToolResult => "missing_tool_result",
            ViolationKind::DuplicateToolResult => "duplicate_tool_result",
            ViolationKind::DuplicateToolCallId => "duplicate_tool_call_id",
            ViolationKind::EmptyToolCallId => "empty_tool_call_id",
            ViolationKind::ToolCallOutsideAssistant => "tool_call_outside_assistant",
            ViolationKind::ToolResultInAssistant => "tool_result_in_assistant",
            ViolationKind::MisplacedInstruction => "misplaced_instruction",
            ViolationKind::ConsecutiveSameRole => "consecutive_same_role",
            ViolationKind::FirstMessageNotUser => "first_message_not_user",
            ViolationKind::EmptyMessage => "empty_message",
            ViolationKind::InvalidToolArguments => "invalid_tool_arguments",
            ViolationKind::InternalMarker => "internal_marker",
        }
    }
}

/// One broken invariant: where it is and why it is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Index of the offending message.
    pub message: usize,
    /// Index of the offending part within the message, when one part is to blame.
    pub part: Option<usize>,
    pub kind: ViolationKind,
    pub reason: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.part {
            Some(part) => write!(f, "message {} part {}: ", self.message, part)?,
            None => write!(f, "message {}: ", self.message)?,
        }
        write!(f, "{} ({})", self.reason, self.kind.as_str())
    }
}

/// A call of the open round: where it is and whether a result answered it.
struct OpenCall<'a> {
    id: &'a str,
    message: usize,
    part: usize,
    answered: bool,
}

/// Reports every violation of `rules` in `messages`, in message order.
pub fn check<M: AsRef<Message>>(messages: &[M], rules: &CheckRules) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut open: Vec<OpenCall<'_>> = Vec::new();
    // Once content other than results follows an assistant message, its round is closed:
    // later results for it are orphans.
    let mut round_accepts_results = false;
    let mut seen_conversation = false;
    let mut previous_side: Option<Role> = None;

    for (index, message) in messages.iter().enumerate() {
        let message = message.as_ref();
        for (part_index, part) in message.parts.iter().enumerate() {
            if rules.internal_markers && part_has_internal_marker(part) {
                out.push(violation(
                    index,
                    Some(part_index),
                    ViolationKind::InternalMarker,
                    INTERNAL_MARKER,
                ));
            }
        }
        if message.parts.is_empty() && !rules.allow_empty_messages {
            out.push(violation(
                index,
                None,
                ViolationKind::EmptyMessage,
                "message has no content",
            ));
        }

        if message.role.is_instruction() {
            // Instructions are content too: they close the open round.
            close_round(&mut open, &mut out);
            round_accepts_results = false;
            if seen_conversation && rules.instructions_only_at_start {
                out.push(violation(
                    index,
                    None,
                    ViolationKind::MisplacedInstruction,
                    format!("{} message after the conversation started", message.role),
                ));
            }
            continue;
        }

        if !seen_conversation && rules.first_message_user && message.role == Role::Assistant {
            out.push(violation(
                index,
                None,
                ViolationKind::FirstMessageNotUser,
                "the conversation must open with a user message",
            ));
        }
        seen_conversation = true;

        // Tool messages fold into the user side for alternation purposes.
        let side = if message.role == Role::Assistant {
            Role::Assistant
        } else {
            Role::User
        };
        if rules.alternating_roles && previous_side == Some(side) {
            out.push(violation(
                index,
                None,
                ViolationKind::ConsecutiveSameRole,
                format!("two consecutive {} messages", side),
            ));
        }
        previous_side = Some(side);

        if message.role == Role::Assistant {
            close_round(&mut open, &mut out);
            round_accepts_results = true;
            for (part_index, part) in message.parts.iter().enumerate() {
                match part {
                    Part::ToolCall { id, arguments, .. } => {
                        if id.is_empty() {
                            out.push(violation(
                                index,
                                Some(part_index),
                                ViolationKind::EmptyToolCallId,
                                "tool call has an empty id",
                            ));
                        } else if open.iter().any(|c| c.id == id) {
                            out.push(violation(
                                index,
                                Some(part_index),
                                ViolationKind::DuplicateToolCallId,
                                format!("tool call id {id:?} repeats within one message"),
                            ));
                        } else {
                            open.push(OpenCall {
                                id,
                                message: index,
                                part: part_index,
                                answered: false,
                            });
                        }
                        if rules.arguments_must_be_objects && !is_json_object(arguments) {
                            out.push(violation(
                                index,
                                Some(part_index),
                                ViolationKind::InvalidToolArguments,
                                format!("arguments of tool call {id:?} are not a JSON object"),
                            ));
                        }
                    }
                    Part::ToolResult { call_id, .. } => out.push(violation(
                        index,
                        Some(part_index),
                        ViolationKind::ToolResultInAssistant,
                        format!("tool result for {call_id:?} inside an assistant message"),
                    )),
                    _ => {}
                }
            }
            continue;
        }

        // A user or tool message: results first, then anything else closes the round.
        for (part_index, part) in message.parts.iter().enumerate() {
            match part {
                Part::ToolResult { call_id, .. } => {
                    if !round_accepts_results {
                        out.push(violation(
                            index,
                            Some(part_index),
                            ViolationKind::OrphanToolResult,
                            format!(
                                "tool result for {call_id:?} does not directly follow the assistant message that made the call"
                            ),
                        ));
                        continue;
                    }
                    let pending = open.iter().position(|c| c.id == call_id && !c.answered);
                    match pending {
                        Some(position) => open[position].answered = true,
                        None if open.iter().any(|c| c.id == call_id) => out.push(violation(
                            index,
                            Some(part_index),
                            ViolationKind::DuplicateToolResult,
                            format!("second result for tool call {call_id:?}"),
                        )),
                        None => out.push(violation(
                            index,
                            Some(part_index),
                            ViolationKind::OrphanToolResult,
                            format!(
                                "tool result for {call_id:?} has no matching call in the preceding assistant message"
                            ),
                        )),
                    }
                }
                Part::ToolCall { id, .. } => out.push(violation(
                    index,
                    Some(part_index),
                    ViolationKind::ToolCallOutsideAssistant,
                    format!("tool call {id:?} in a {} message", message.role),
                )),
                _ => {
                    close_round(&mut open, &mut out);
                    round_accepts_results = false;
                }
            }
        }
    }

    if !rules.allow_pending_tail {
        close_round(&mut open, &mut out);
    }
    out.sort_by_key(|v| (v.message, v.part));
    out
}

/// Reports the unanswered calls of the open round and empties it.
fn close_round(open: &mut Vec<OpenCall<'_>>, out: &mut Vec<Violation>) {
    for call in open.drain(..) {
        if !call.answered {
            out.push(violation(
                call.message,
                Some(call.part),
                ViolationKind::MissingToolResult,
                format!("tool call {:?} is never answered", call.id),
            ));
        }
    }
}

fn violation(
    message: usize,
    part: Option<usize>,
    kind: ViolationKind,
    reason: impl Into<String>,
) -> Violation {
    Violation {
        message,
        part,
        kind,
        reason: reason.into(),
    }
}

/// The reason given for an [`ViolationKind::InternalMarker`].
pub const INTERNAL_MARKER: &str =
    "an internal fill marker was never replaced by its archive reference";

/// The first part (message index, part index) holding an engine fill marker: the first
/// [`ViolationKind::InternalMarker`] that [`check`] would report, without the other rules.
pub fn find_internal_marker(messages: &[Message]) -> Option<(usize, usize)> {
    messages.iter().enumerate().find_map(|(index, message)| {
        message
            .parts
            .iter()
            .position(part_has_internal_marker)
            .map(|part| (index, part))
    })
}

/// Whether `text` holds one of the engine's fill markers (`\u{1}ref:N\u{1}`,
/// `\u{1}summary:N\u{1}`), raw or JSON-escaped (`\\u0001ref:` inside tool-call arguments).
/// Other control characters (terminal escapes in tool output) are not markers.
pub fn has_internal_marker(text: &str) -> bool {
    const RAW: char = '\u{1}';
    const ESCAPED: [&str; 2] = ["\\u0001ref:", "\\u0001summary:"];
    let raw = text.contains(RAW)
        && text.match_indices(RAW).any(|(at, _)| {
            let rest = &text[at + RAW.len_utf8()..];
            rest.starts_with("ref:") || rest.starts_with("summary:")
        });
    raw || (text.contains("\\u0001") && ESCAPED.iter().any(|m| text.contains(m)))
}

/// Whether a fill marker is left anywhere in `part` (see [`has_internal_marker`]).
pub(crate) fn part_has_internal_marker(part: &Part) -> bool {
    match part {
        Part::Text { text, .. } => has_internal_marker(text),
        Part::ToolCall { arguments, .. } => has_internal_marker(arguments),
        Part::ToolResult { content, .. } => content.iter().any(part_has_internal_marker),
        Part::Reasoning { text, .. } => text.as_deref().is_some_and(has_internal_marker),
        Part::Data { .. } | Part::Opaque { .. } => false,
    }
}

fn is_json_object(text: &str) -> bool {
    let trimmed = text.trim_start();
    trimmed.starts_with('{')
        && serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;

    fn call(id: &str) -> Part {
        Part::tool_call(id, "lookup", "{}")
    }

    fn kinds(messages: &[Message], rules: CheckRules) -> Vec<(usize, ViolationKind)> {
        check(messages, &rules)
            .into_iter()
            .map(|v| (v.message, v.kind))
            .collect()
    }

    #[test]
    fn a_well_formed_round_has_no_violation() {
        let history = vec![
            Message::system("rules"),
            Message::user("hi"),
            Message::assistant_with_calls("", vec![call("a"), call("b")]),
            Message::tool_result("a", "1"),
            Message::tool_result("b", "2"),
            Message::assistant("done"),
        ];
        assert_eq!(kinds(&history, CheckRules::openai()), vec![]);
    }

    #[test]
    fn results_answer_the_closest_round_even_when_ids_repeat() {
        let history = vec![
            Message::user("hi"),
            Message::assistant_with_calls("", vec![call("a")]),
            Message::tool_result("a", "1"),
            Message::assistant_with_calls("", vec![call("a")]),
            Message::tool_result("a", "2"),
        ];
        assert_eq!(kinds(&history, CheckRules::openai()), vec![]);
    }

    #[test]
    fn orphan_result_is_reported_at_its_position() {
        let history = vec![Message::user("hi"), Message::tool_result("zzz", "1")];
        assert_eq!(
            kinds(&history, CheckRules::openai()),
            vec![(1, ViolationKind::OrphanToolResult)]
        );
    }

    #[test]
    fn result_after_intervening_text_is_an_orphan_and_the_call_is_missing() {
        let history = vec![
            Message::user("hi"),
            Message::assistant_with_calls("", vec![call("a")]),
            Message::user("hello?"),
            Message::tool_result("a", "late"),
        ];
        assert_eq!(
            kinds(&history, CheckRules::openai()),
            vec![
                (1, ViolationKind::MissingToolResult),
                (3, ViolationKind::OrphanToolResult)
            ]
        );
    }

    #[test]
    fn pending_tail_is_allowed_only_for_histories() {
        let history = vec![
            Message::user("hi"),
            Message::assistant_with_calls("", vec![call("a")]),
        ];
        assert_eq!(kinds(&history, CheckRules::history()), vec![]);
        assert_eq!(
            kinds(&history, CheckRules::openai()),
            vec![(1, ViolationKind::MissingToolResult)]
        );
    }

    #[test]
    fn duplicates_are_reported() {
        let history = vec![
            Message::user("hi"),
            Message::assistant_with_calls("", vec![call("a"), call("a")]),
            Message::tool_result("a", "1"),
            Message::tool_result("a", "2"),
        ];
        assert_eq!(
            kinds(&history, CheckRules::openai()),
            vec![
                (1, ViolationKind::DuplicateToolCallId),
                (3, ViolationKind::DuplicateToolResult)
            ]
        );
    }

    #[test]
    fn anthropic_rules_add_placement_alternation_and_argument_checks() {
        let history = vec![
            Message::system("rules"),
            Message::assistant("I start"),
            Message::user("hi"),
            Message::user("again"),
            Message::system("late rules"),
            Message::tool_call("a", "f", "not json"),
            Message::tool_result("a", "ok"),
            Message::new(Role::Assistant, vec![]),
        ];
        assert_eq!(
            kinds(&history, CheckRules::anthropic()),
            vec![
                (1, ViolationKind::FirstMessageNotUser),
                (3, ViolationKind::ConsecutiveSameRole),
                (4, ViolationKind::MisplacedInstruction),
                (5, ViolationKind::InvalidToolArguments),
                (7, ViolationKind::EmptyMessage),
            ]
        );
        assert_eq!(kinds(&history, CheckRules::openai()), vec![]);
    }

    #[test]
    fn fill_markers_are_violations_in_text_results_and_escaped_arguments() {
        let history = vec![
            Message::user("see \u{1}ref:0\u{1}"),
            Message::tool_call("a", "f", r#"{"x":"cut (archived at \u0001ref:3\u0001)"}"#),
            Message::tool_result("a", "[cleared; archived at \u{1}ref:1\u{1}]"),
            // A terminal escape in real output is not a marker.
            Message::user("\u{1b}[1mbold\u{1b}[22m and \u{1} alone"),
        ];
        assert_eq!(
            kinds(&history, CheckRules::openai()),
            vec![
                (0, ViolationKind::InternalMarker),
                (1, ViolationKind::InternalMarker),
                (2, ViolationKind::InternalMarker)
            ]
        );
        assert!(!has_internal_marker("ref:1 and summary:2"));
        // A caller that asks only about tool pairing skips the markers, nothing else.
        let pairing = CheckRules {
            internal_markers: false,
            ..CheckRules::openai()
        };
        assert!(kinds(&history, pairing).is_empty());
        let mut orphaned = history.clone();
        orphaned.push(Message::tool_result("b", "\u{1}ref:2\u{1}"));
        assert_eq!(
            kinds(&orphaned, pairing),
            vec![(4, ViolationKind::OrphanToolResult)]
        );
    }

    #[test]
    fn violations_display_position_and_reason() {
        let history = vec![Message::user("hi"), Message::tool_result("x", "1")];
        let text = check(&history, &CheckRules::openai())[0].to_string();
        assert!(
            text.starts_with("message 1 part 0: tool result for \"x\""),
            "{text}"
        );
        assert!(text.ends_with("(orphan_tool_result)"), "{text}");
    }
}
