//! What an agent harness writes into the user's turn when it compacts its own history.
//!
//! Codex CLI and Claude Code compact on their own, in the conversation itself: they send the
//! model one more user message asking for a summary (the **compaction prompt**), then restart
//! the conversation from what they keep plus one user message carrying that summary (the
//! **client summary**). Neither is the user's words: the capsule leaves both out of them and
//! out of the standing orders, and the gateway reads a client summary as the continuation of
//! the session it compacted, not as another conversation.
//!
//! ```
//! use ctxkeeper_core::harness::{is_client_compaction_prompt, is_client_summary};
//! assert!(is_client_compaction_prompt(
//!     "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary …"
//! ));
//! assert!(is_client_summary(
//!     "Another language model started to solve this problem and produced a summary of its \
//!      thinking process. …\nThe parser is fixed; tests remain."
//! ));
//! assert!(!is_client_summary("Summarize the conversation so far, please."));
//! ```

/// How the compaction prompts begin, or what they say near their start (Claude Code's may
/// come after a line or two of its own instructions).
const COMPACTION_PROMPTS: [&str; 2] = [
    // Codex CLI (`templates/compact/prompt.md`).
    "You are performing a CONTEXT CHECKPOINT COMPACTION.",
    // Claude Code (`/compact` and its auto-compact).
    "Your task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests and your previous actions.",
];

/// How far into a text a compaction prompt's words are looked for.
const PROMPT_WINDOW: usize = 1_000;

/// How the client summaries begin.
const SUMMARY_PREFIXES: [&str; 2] = [
    // Codex CLI (`templates/compact/summary_prefix.md`).
    "Another language model started to solve this problem and produced a summary of its thinking process.",
    // Claude Code.
    "This session is being continued from a previous conversation",
];

/// Whether a user text is a harness asking the model to summarize the conversation so far.
pub fn is_client_compaction_prompt(text: &str) -> bool {
    let start = text.trim_start();
    let mut end = start.len().min(PROMPT_WINDOW);
    while !start.is_char_boundary(end) {
        end -= 1;
    }
    let head = &start[..end];
    COMPACTION_PROMPTS
        .iter()
        .any(|prompt| head.contains(prompt))
}

/// Whether a user text is the summary a harness put in place of the history it compacted.
pub fn is_client_summary(text: &str) -> bool {
    let start = text.trim_start();
    SUMMARY_PREFIXES
        .iter()
        .any(|prefix| start.starts_with(prefix))
}

/// Whether a user text is either: harness text about its own compaction, never the user's.
pub fn is_client_compaction_text(text: &str) -> bool {
    is_client_summary(text) || is_client_compaction_prompt(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_codes_prompt_is_found_after_its_preamble() {
        let prompt = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests and your previous actions.\nThis summary should be thorough…";
        assert!(is_client_compaction_prompt(prompt));
        assert!(is_client_compaction_text(prompt));
        assert!(!is_client_summary(prompt));
    }

    #[test]
    fn the_users_own_request_for_a_summary_is_the_users() {
        for text in [
            "Please create a detailed summary of the conversation so far.",
            "Quote this back to me: You are performing a CONTEXT CHECKPOINT",
            "",
        ] {
            assert!(!is_client_compaction_text(text), "{text}");
        }
        // Deep inside a long message the words are a quote, not the harness's prompt.
        let quoted = format!(
            "{}You are performing a CONTEXT CHECKPOINT COMPACTION.",
            "é".repeat(600)
        );
        assert!(!is_client_compaction_prompt(&quoted));
    }
}
