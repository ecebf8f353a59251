//! Making a summarization request fit the summarizer model's window.
//!
//! The messages being compacted can be larger than the summarizer's own window (that is often
//! why they are being compacted). [`plan_chunks`] renders each message once, measures it, and
//! cuts the list into chunks that each fit `budget` tokens, at API-round boundaries when it can
//! (so a tool call and its result are summarized together). The summarizer then summarizes
//! chunk after chunk, each call incremental over the previous chunk's summary, so nothing is
//! skipped. A single message larger than a chunk is cut in its middle with a marker (its full
//! text is in the archive). When more than `max_chunks` chunks would be needed, the oldest are
//! dropped and counted, so the cost stays bounded; the previous summary still covers what came
//! before them.
//!
//! ```
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_llm::fit::plan_chunks;
//!
//! let messages: Vec<Message> = (0..10).map(|i| Message::user(format!("{i}: {}", "word ".repeat(50)))).collect();
//! let count = |text: &str| (text.len() / 4) as u32;
//! let plan = plan_chunks(&messages, 0, 200, 16, 2_000, &count);
//! assert!(plan.chunks.len() > 1);
//! assert_eq!(plan.dropped_messages, 0);
//! assert_eq!(plan.chunks.iter().map(|c| c.messages).sum::<usize>(), 10);
//! assert!(plan.chunks.iter().all(|c| count(&c.text) <= 200));
//! ```

use ctxkeeper_core::model::{Message, safe_split_points};

use crate::prompt::{cut_middle, render_message};

/// A run of consecutive messages rendered as one transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The transcript text (message blocks separated by blank lines).
    pub text: String,
    /// Index of the chunk's first message in the request.
    pub first: usize,
    /// Number of messages in the chunk.
    pub messages: usize,
}

/// The chunks of one summarization, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub chunks: Vec<Chunk>,
    /// Oldest messages left out because more than `max_chunks` chunks would have been needed.
    pub dropped_messages: usize,
    /// Messages whose text was cut because it alone exceeded a chunk.
    pub cut_messages: usize,
}

/// Tokens counted for the blank line between two blocks.
const SEPARATOR_TOKENS: u32 = 1;

/// Splits `messages` into transcript chunks of at most `budget` tokens each, as measured by
/// `count`; `first_index` is the position of `messages[0]` in the whole request (it numbers
/// the transcript blocks and [`Chunk::first`]). Linear in the size of the messages: each
/// message is rendered and counted once (a few times more only when it must be cut).
pub fn plan_chunks(
    messages: &[Message],
    first_index: usize,
    budget: u32,
    max_chunks: usize,
    max_arg_chars: usize,
    count: &dyn Fn(&str) -> u32,
) -> Plan {
    let budget = budget.max(16);
    let mut cut_messages = 0;
    let blocks: Vec<(String, u32)> = messages
        .iter()
        .enumerate()
        .map(|(index, message)| {
            let text = render_message(message, first_index + index, max_arg_chars);
            let tokens = count(&text);
            if tokens <= budget {
                return (text, tokens);
            }
            cut_messages += 1;
            shrink(text, tokens, budget, count)
        })
        .collect();

    let mut safe = vec![false; messages.len() + 1];
    for point in safe_split_points(messages) {
        if let Some(slot) = safe.get_mut(point) {
            *slot = true;
        }
    }

    // Greedy packing; when a block does not fit, close the chunk at the last safe split point
    // inside it (so a round stays whole), or right here when the chunk has none.
    let mut bounds: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    let mut tokens: u32 = 0;
    let mut index = 0;
    while index < blocks.len() {
        let add = blocks[index].1 + if index > start { SEPARATOR_TOKENS } else { 0 };
        if index > start && tokens.saturating_add(add) > budget {
            let cut = (start + 1..index).rev().find(|&i| safe[i]).unwrap_or(index);
            bounds.push((start, cut));
            start = cut;
            tokens = 0;
            index = cut;
            continue;
        }
        tokens = tokens.saturating_add(add);
        index += 1;
    }
    if start < blocks.len() {
        bounds.push((start, blocks.len()));
    }

    let max_chunks = max_chunks.max(1);
    let mut dropped_messages = 0;
    if bounds.len() > max_chunks {
        let excess = bounds.len() - max_chunks;
        dropped_messages = bounds[..excess].iter().map(|(s, e)| e - s).sum();
        bounds.drain(..excess);
    }

    let chunks = bounds
        .into_iter()
        .map(|(start, end)| {
            let size: usize = blocks[start..end].iter().map(|(t, _)| t.len() + 2).sum();
            let mut text = String::with_capacity(size);
            for (text_block, _) in &blocks[start..end] {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(text_block);
            }
            Chunk {
                text,
                first: first_index + start,
                messages: end - start,
            }
        })
        .collect();
    Plan {
        chunks,
        dropped_messages,
        cut_messages,
    }
}

/// Cuts a block that alone exceeds the budget until it fits (at most a few passes).
fn shrink(
    mut text: String,
    mut tokens: u32,
    budget: u32,
    count: &dyn Fn(&str) -> u32,
) -> (String, u32) {
    for _ in 0..4 {
        if tokens <= budget {
            break;
        }
        let chars = text.chars().count() as u64;
        let target = (chars * u64::from(budget) * 9 / (10 * u64::from(tokens.max(1)))) as usize;
        text = cut_middle(&text, target.max(40));
        tokens = count(&text);
    }
    (text, tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(text: &str) -> u32 {
        (text.len() / 4) as u32
    }

    #[test]
    fn one_chunk_when_everything_fits() {
        let messages = vec![Message::user("a"), Message::assistant("b")];
        let plan = plan_chunks(&messages, 0, 1_000, 8, 100, &count);
        assert_eq!(plan.chunks.len(), 1);
        assert_eq!(plan.chunks[0].text, "[#0 user]\na\n\n[#1 assistant]\nb");
    }

    #[test]
    fn chunks_do_not_separate_a_call_from_its_result_when_avoidable() {
        let mut messages = Vec::new();
        for i in 0..20 {
            let id = format!("c{i}");
            messages.push(Message::tool_call(&id, "read", "{}"));
            messages.push(Message::tool_result(&id, "x".repeat(100)));
        }
        let plan = plan_chunks(&messages, 0, 150, 64, 100, &count);
        assert!(plan.chunks.len() > 2);
        for chunk in &plan.chunks {
            assert_eq!(
                chunk.first % 2,
                0,
                "a chunk starts at a call, never at its result"
            );
            assert!(count(&chunk.text) <= 150);
        }
    }

    #[test]
    fn huge_messages_are_cut_and_counted() {
        let messages = vec![Message::user("y".repeat(100_000))];
        let plan = plan_chunks(&messages, 0, 500, 8, 100, &count);
        assert_eq!(plan.cut_messages, 1);
        assert!(count(&plan.chunks[0].text) <= 500);
        assert!(plan.chunks[0].text.contains("characters omitted"));
    }

    #[test]
    fn beyond_max_chunks_the_oldest_are_dropped() {
        let messages: Vec<Message> = (0..50)
            .map(|i| Message::user(format!("{i} {}", "z".repeat(400))))
            .collect();
        let plan = plan_chunks(&messages, 0, 120, 3, 100, &count);
        assert_eq!(plan.chunks.len(), 3);
        assert_eq!(
            plan.dropped_messages + plan.chunks.iter().map(|c| c.messages).sum::<usize>(),
            50
        );
        assert_eq!(plan.chunks.last().map(|c| c.first + c.messages), Some(50));
    }
}
