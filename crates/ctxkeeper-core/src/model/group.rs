//! Grouping a message list into API rounds and turns.
//!
//! - An **API round** is one model call's output and what answers it: an assistant message plus
//!   the tool-result messages that directly follow it. A round is the unit compaction never
//!   splits: cutting inside it would separate a tool call from its result.
//! - A **turn** starts at a user message that carries something other than tool results and
//!   runs to the next such message (user → assistant/tool chain → final reply).
//!
//! ```
//! use ctxkeeper_core::model::{api_rounds, turns, Message, Part};
//!
//! let history = vec![
//!     Message::system("rules"),
//!     Message::user("find my booking"),
//!     Message::tool_call("c1", "find", "{}"),
//!     Message::tool_result("c1", "ABC123"),
//!     Message::assistant("It is ABC123."),
//! ];
//! let rounds = api_rounds(&history);
//! assert_eq!(rounds.len(), 2);
//! assert_eq!((rounds[0].start, rounds[0].end), (2, 4));
//! assert_eq!(turns(&history).len(), 1);
//! ```

use std::ops::Range;

use super::message::{Message, Role};

/// An assistant message and the result messages that answer it: `messages[start..end]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRound {
    pub start: usize,
    pub end: usize,
}

impl ApiRound {
    /// The message index range of the round.
    pub fn range(&self) -> Range<usize> {
        self.start..self.end
    }
}

/// A turn: `messages[start..end]`, opened by a user message with real content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    pub start: usize,
    pub end: usize,
}

impl Turn {
    /// The message index range of the turn.
    pub fn range(&self) -> Range<usize> {
        self.start..self.end
    }
}

/// The API rounds of `messages`, in order. Messages outside any round (instructions, user
/// text) are not covered.
pub fn api_rounds<M: AsRef<Message>>(messages: &[M]) -> Vec<ApiRound> {
    let mut rounds = Vec::new();
    let mut index = 0;
    while index < messages.len() {
        if messages[index].as_ref().role != Role::Assistant {
            index += 1;
            continue;
        }
        let start = index;
        index += 1;
        while index < messages.len() && is_result_message(messages[index].as_ref()) {
            index += 1;
        }
        rounds.push(ApiRound { start, end: index });
    }
    rounds
}

/// The turns of `messages`, in order. Messages before the first turn (the instructions) are
/// not covered.
pub fn turns<M: AsRef<Message>>(messages: &[M]) -> Vec<Turn> {
    let starts: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.as_ref().starts_turn())
        .map(|(i, _)| i)
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(k, &start)| Turn {
            start,
            end: starts.get(k + 1).copied().unwrap_or(messages.len()),
        })
        .collect()
}

/// Indices `i` at which `messages[..i]` / `messages[i..]` can be split without separating a
/// tool call from its results: never inside an API round. Always includes 0 and `len`.
pub fn safe_split_points<M: AsRef<Message>>(messages: &[M]) -> Vec<usize> {
    let mut points = Vec::with_capacity(messages.len() + 1);
    for index in 0..=messages.len() {
        if index == messages.len() || !is_result_message(messages[index].as_ref()) {
            points.push(index);
        }
    }
    points
}

/// True when `index` is a safe split point (see [`safe_split_points`]).
pub fn is_safe_split<M: AsRef<Message>>(messages: &[M], index: usize) -> bool {
    index >= messages.len() || !is_result_message(messages[index].as_ref())
}

/// A message that answers tool calls (an OpenAI `tool` message, an Anthropic user message with
/// `tool_result` blocks, possibly followed by text). It belongs to the round before it.
pub(crate) fn is_result_message(message: &Message) -> bool {
    message.role == Role::Tool || (message.role == Role::User && message.has_tool_results())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;

    fn sample() -> Vec<Message> {
        vec![
            Message::system("rules"),           // 0
            Message::user("one"),               // 1
            Message::tool_call("a", "f", "{}"), // 2
            Message::tool_result("a", "r"),     // 3
            Message::tool_call("b", "f", "{}"), // 4
            Message::tool_result("b", "r"),     // 5
            Message::assistant("reply"),        // 6
            Message::user("two"),               // 7
            Message::assistant("reply 2"),      // 8
        ]
    }

    #[test]
    fn rounds_cover_assistant_and_results() {
        let rounds: Vec<_> = api_rounds(&sample()).iter().map(ApiRound::range).collect();
        assert_eq!(rounds, vec![2..4, 4..6, 6..7, 8..9]);
    }

    #[test]
    fn turns_start_at_user_text() {
        let turns: Vec<_> = turns(&sample()).iter().map(Turn::range).collect();
        assert_eq!(turns, vec![1..7, 7..9]);
    }

    #[test]
    fn splits_never_fall_between_a_call_and_its_result() {
        assert_eq!(safe_split_points(&sample()), vec![0, 1, 2, 4, 6, 7, 8, 9]);
        assert!(!is_safe_split(&sample(), 3));
    }
}
