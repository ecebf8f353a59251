//! The lossy fallback used when no summary could be made.
//!
//! A failed summarization must not kill the agent's turn, and it must not silently lose what
//! was compacted either. [`fallback_truncation`] keeps the previous summary, adds a head and
//! tail excerpt of the compacted messages, and says plainly that the summary is missing and
//! where the full messages are: the engine archives every compacted message before it leaves
//! the context, so the marker's promise holds.
//!
//! ```
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_core::summary::{SummaryReason, SummaryRequest, SummarySchema};
//! use ctxkeeper_llm::fallback_truncation;
//!
//! let request = SummaryRequest {
//!     messages: vec![Message::user("Fix the invoice rounding."), Message::assistant("On it.")],
//!     previous: None,
//!     schema: SummarySchema::default(),
//!     prompt: None,
//!     focus: None,
//!     reason: SummaryReason::Overflow,
//!     max_output_tokens: 500,
//!     must_keep: Vec::new(),
//!     instructions: None,
//!     request_in_context: None,
//! };
//! let summary = fallback_truncation(&request);
//! assert!(summary.degraded);
//! assert_eq!(summary.produced_by, "fallback-truncation");
//! assert!(summary.get("current_state").contains("[summary unavailable: 2 messages truncated; the full messages are archived]"));
//! ```

use ctxkeeper_core::summary::{Summary, SummaryRequest, SummarySchema};

use crate::prompt::{cut_middle, render_message};

/// `produced_by` of a fallback summary.
pub const FALLBACK_PRODUCER: &str = "fallback-truncation";

/// Characters allowed per output token when a summary is bounded by a cheap character count
/// instead of a tokenizer. Three is conservative for prose and code alike, so a text within the
/// budget stays within the token bound.
pub(crate) const CHARS_PER_TOKEN: usize = 3;

/// The character budget of a summary of at most `max_output_tokens` tokens.
pub(crate) fn char_budget(max_output_tokens: u32) -> usize {
    (max_output_tokens.max(64) as usize) * CHARS_PER_TOKEN
}

/// The field that receives the excerpt: `current_state` when the schema has it, else the last
/// field.
pub(crate) fn state_field(schema: &SummarySchema) -> Option<&str> {
    schema
        .fields
        .iter()
        .find(|f| f.name == "current_state")
        .or(schema.fields.last())
        .map(|f| f.name.as_str())
}

/// A summary made without a summarizer: the previous summary, a marker naming how many
/// messages were truncated, and a head/tail excerpt of them, within the request's output
/// budget. Marked `degraded`, produced by `fallback-truncation`.
pub fn fallback_truncation(request: &SummaryRequest) -> Summary {
    let schema = &request.schema;
    let mut summary = Summary::empty(schema, FALLBACK_PRODUCER);
    summary.degraded = true;
    if let Some(previous) = &request.previous {
        for field in &schema.fields {
            let text = previous.get(&field.name);
            if !text.is_empty() {
                summary.set(&field.name, text);
            }
        }
    }

    let budget = char_budget(request.max_output_tokens);
    let used: usize = schema
        .fields
        .iter()
        .map(|f| summary.get(&f.name).len())
        .sum();
    // The marker and some excerpt always get room, even when the previous summary is long.
    let room = budget.saturating_sub(used).max(budget / 3);
    let marker = format!(
        "[summary unavailable: {} messages truncated; the full messages are archived]",
        request.messages.len()
    );
    let excerpt = head_tail_excerpt(request, room.saturating_sub(marker.len() + 2));

    let field = state_field(schema).unwrap_or("summary").to_string();
    let mut text = summary.get(&field).trim_end().to_string();
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    text.push_str(&marker);
    if !excerpt.is_empty() {
        text.push('\n');
        text.push_str(&excerpt);
    }
    summary.set(&field, text);
    summary
}

/// The first and last messages, each cut short, within `room` characters: a third for the
/// head (how the work began), two thirds for the tail (where it stands).
fn head_tail_excerpt(request: &SummaryRequest, room: usize) -> String {
    const PER_MESSAGE: usize = 300;
    let messages = &request.messages;
    if messages.is_empty() || room < 80 {
        return String::new();
    }
    let render = |index: usize| {
        let text = render_message(&messages[index], index, 120);
        cut_middle(&text, PER_MESSAGE)
    };
    let head_room = room / 3;
    let mut head = Vec::new();
    let mut used = 0;
    let mut next = 0;
    while next < messages.len() {
        let block = render(next);
        if used + block.len() > head_room {
            break;
        }
        used += block.len() + 1;
        head.push(block);
        next += 1;
    }
    let mut tail = Vec::new();
    let mut last = messages.len();
    while last > next {
        let block = render(last - 1);
        if used + block.len() > room {
            break;
        }
        used += block.len() + 1;
        tail.push(block);
        last -= 1;
    }
    tail.reverse();
    let omitted = last - next;
    let mut out = head.join("\n");
    if omitted > 0 {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("[… {omitted} messages omitted …]"));
    }
    for block in tail {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&block);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxkeeper_core::model::Message;

    fn request(
        messages: Vec<Message>,
        previous: Option<Summary>,
        max_output_tokens: u32,
    ) -> SummaryRequest {
        SummaryRequest {
            previous,
            ..SummaryRequest::new(messages, max_output_tokens)
        }
    }

    #[test]
    fn keeps_the_previous_summary_and_marks_the_loss() {
        let schema = SummarySchema::default();
        let mut previous = Summary::empty(&schema, "openai:x");
        previous.set("task_overview", "Ship the release.");
        previous.set("current_state", "Tests pass.");
        let messages: Vec<Message> = (0..100)
            .map(|i| Message::user(format!("message {i} {}", "x".repeat(200))))
            .collect();
        let summary = fallback_truncation(&request(messages, Some(previous), 400));
        assert!(summary.degraded);
        assert_eq!(summary.get("task_overview"), "Ship the release.");
        let state = summary.get("current_state");
        assert!(state.starts_with("Tests pass.\n\n[summary unavailable: 100 messages truncated"));
        assert!(state.contains("[#0 user]"), "the head is kept");
        assert!(state.contains("[#99 user]"), "the tail is kept");
        assert!(state.contains("messages omitted"));
        let total: usize = schema
            .fields
            .iter()
            .map(|f| summary.get(&f.name).len())
            .sum();
        assert!(total <= char_budget(400) + 200, "bounded: {total}");
    }

    #[test]
    fn an_empty_request_still_says_what_happened() {
        let summary = fallback_truncation(&request(Vec::new(), None, 100));
        assert_eq!(
            summary.get("current_state"),
            "[summary unavailable: 0 messages truncated; the full messages are archived]"
        );
    }
}
