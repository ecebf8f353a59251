//! Restore strategies: what of a stored [`AgentState`](crate::AgentState) goes back into the
//! context when a session resumes.
//!
//! - [`RestoreStrategy::Full`]: the whole saved context (HarnessAgent, `004`).
//! - [`RestoreStrategy::RecentTurns`]: CowAgent's strategy (`003`): the last
//!   `max(3, max_turns / 6)` turns, each reduced to its user text and the agent's final reply
//!   — tool-call chains and reasoning are dropped, so the restored context is always a valid
//!   alternation of user and assistant text. Instructions before the first turn (system or
//!   developer messages) are kept.
//!
//! ```
//! use ctxkeeper_core::model::{Message, Part};
//! use ctxkeeper_store::restore::{restore, RestoreStrategy};
//!
//! let mut context = Vec::new();
//! for i in 0..10 {
//!     context.push(Message::user(format!("question {i}")));
//!     context.push(Message::tool_call(format!("c{i}"), "search", "{}"));
//!     context.push(Message::tool_result(format!("c{i}"), "result"));
//!     context.push(Message::assistant(format!("answer {i}")));
//! }
//! let restored = restore(&context, RestoreStrategy::RecentTurns { max_turns: 20 });
//! // max(3, 20 / 6) = 3 turns, two messages each.
//! assert_eq!(restored.len(), 6);
//! assert_eq!(restored[0].text(), "question 7");
//! assert_eq!(restored[5].text(), "answer 9");
//! ```

use ctxkeeper_core::model::{Message, Part, Role, turns};
use serde::{Deserialize, Serialize};

/// How a stored context is restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "strategy", rename_all = "snake_case")]
pub enum RestoreStrategy {
    /// Everything that was saved.
    Full,
    /// The last `max(3, max_turns / 6)` turns, user text and final reply only.
    RecentTurns { max_turns: usize },
}

impl RestoreStrategy {
    /// CowAgent's default (`agent_max_context_turns` = 20).
    pub const COWAGENT: RestoreStrategy = RestoreStrategy::RecentTurns { max_turns: 20 };
}

/// The messages to put back into the context.
pub fn restore(context: &[Message], strategy: RestoreStrategy) -> Vec<Message> {
    match strategy {
        RestoreStrategy::Full => context.to_vec(),
        RestoreStrategy::RecentTurns { max_turns } => recent_turns(context, (max_turns / 6).max(3)),
    }
}

fn recent_turns(context: &[Message], keep: usize) -> Vec<Message> {
    let all = turns(context);
    let first_turn = all.first().map_or(context.len(), |t| t.start);
    let mut out: Vec<Message> = context[..first_turn]
        .iter()
        .filter(|m| m.role.is_instruction())
        .cloned()
        .collect();
    for turn in all.iter().skip(all.len().saturating_sub(keep)) {
        let messages = &context[turn.range()];
        let Some(user) = messages.first().and_then(|m| text_only(m, Role::User)) else {
            continue;
        };
        out.push(user);
        // The final reply: the last assistant message of the turn that has text.
        if let Some(reply) = messages
            .iter()
            .rev()
            .filter(|m| m.role == Role::Assistant)
            .find_map(|m| text_only(m, Role::Assistant))
        {
            out.push(reply);
        }
    }
    out
}

/// A copy of the message with only its text parts, or `None` when it has no text.
fn text_only(message: &Message, role: Role) -> Option<Message> {
    let parts: Vec<Part> = message
        .parts
        .iter()
        .filter(|p| matches!(p, Part::Text { text, .. } if !text.trim().is_empty()))
        .cloned()
        .collect();
    if parts.is_empty() {
        return None;
    }
    let mut copy = Message::new(role, parts);
    copy.name = message.name.clone();
    Some(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(i: usize) -> Vec<Message> {
        vec![
            Message::user(format!("q{i}")),
            Message::assistant_with_calls("thinking aloud", vec![Part::tool_call("c", "f", "{}")]),
            Message::tool_result("c", "r"),
            Message::assistant(format!("a{i}")),
        ]
    }

    #[test]
    fn keeps_max_of_three_and_a_sixth() {
        let context: Vec<Message> = std::iter::once(Message::system("rules"))
            .chain((0..40).flat_map(turn))
            .collect();
        let restored = restore(&context, RestoreStrategy::RecentTurns { max_turns: 30 });
        // max(3, 30 / 6) = 5 turns + the system prompt.
        assert_eq!(restored.len(), 11);
        assert_eq!(restored[0].role, Role::System);
        assert_eq!(restored[1].text(), "q35");
        assert_eq!(restored[10].text(), "a39");
        assert!(
            restored
                .iter()
                .all(|m| !m.has_tool_calls() && !m.has_tool_results())
        );
        assert_eq!(
            restore(&context, RestoreStrategy::RecentTurns { max_turns: 6 }).len(),
            7
        );
    }

    #[test]
    fn a_turn_without_a_final_text_keeps_its_user_text() {
        let context = vec![
            Message::user("q"),
            Message::tool_call("c", "f", "{}"),
            Message::tool_result("c", "r"),
        ];
        let restored = restore(&context, RestoreStrategy::COWAGENT);
        assert_eq!(restored, vec![Message::user("q")]);
        assert_eq!(restore(&context, RestoreStrategy::Full), context);
    }
}
