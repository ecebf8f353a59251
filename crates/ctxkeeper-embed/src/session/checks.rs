//! Input checks: the ids, roles and tool pairing of new messages, refused with the rule they
//! break before anything is ingested.

use super::*;

/// A tool-call id is a name, never a path: ids the providers issue are short runs of
/// letters, digits, `_`, `-` (some add `.` or `:`). Anything with a path separator, a `..`,
/// a control character, or over 256 bytes is refused.
pub(super) fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("is empty".into());
    }
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "is {} bytes long (at most {MAX_ID_BYTES})",
            id.len()
        ));
    }
    if id.contains('/') || id.contains('\\') || id.contains("..") {
        return Err("contains a path separator or `..`".into());
    }
    if id.chars().any(char::is_control) {
        return Err("contains a control character".into());
    }
    Ok(())
}

/// Refuses hostile ids and tool pairing the new messages would break, given the tail of the
/// context they follow.
pub fn validate(state: &ContextState, new: &[Message]) -> Result<(), EmbedError> {
    for (index, message) in new.iter().enumerate() {
        for part in &message.parts {
            let (what, id) = match part {
                Part::ToolCall { id, .. } => ("tool call id", id),
                Part::ToolResult { call_id, .. } => ("tool result's call id", call_id),
                _ => continue,
            };
            if let Err(reason) = check_id(id) {
                return Err(EmbedError::InvalidInput {
                    message: format!("messages[{index}]: the {what} {:?} {reason}", clip(id, 80)),
                    path: Some(format!("messages[{index}]")),
                    index: Some(index),
                    kind: Some("hostile_id"),
                });
            }
        }
    }
    // An engine fill marker in the new messages would be taken for an archive reference.
    if let Some((index, _)) = find_internal_marker(new) {
        return Err(EmbedError::InvalidInput {
            message: format!("messages[{index}]: {INTERNAL_MARKER}"),
            path: Some(format!("messages[{index}]")),
            index: Some(index),
            kind: Some("invalid_message"),
        });
    }
    // Pairing depends on roles, part kinds and ids only: the tail and the new messages are
    // checked in place, so nothing is copied.
    let rules = CheckRules {
        internal_markers: false,
        ..CheckRules::history()
    };
    let mut joined: Vec<&Message> = tail(state).collect();
    let before_len = joined.len();
    joined.extend(new);
    let violations = check(&joined, &rules);
    if violations.is_empty() {
        return Ok(());
    }
    // What the tail breaks on its own is the context's, not the new messages' (checked only
    // when the joined list breaks something: the common step pays for one pass).
    let before: Vec<_> = check(&joined[..before_len], &rules)
        .into_iter()
        .map(|v| (v.message, v.part, v.kind))
        .collect();
    for violation in violations {
        if before.contains(&(violation.message, violation.part, violation.kind)) {
            continue;
        }
        let (position, index) = match violation.message.checked_sub(before_len) {
            Some(index) => (format!("messages[{index}]"), Some(index)),
            // A call of the context that the new messages leave unanswered.
            None => ("the context's last assistant message".to_string(), None),
        };
        let kind = if violation.kind.is_tool_pairing() {
            "tool_pairing"
        } else {
            "invalid_message"
        };
        return Err(EmbedError::InvalidInput {
            message: format!("{position}: {}", violation.reason),
            path: Some(position),
            index,
            kind: Some(kind),
        });
    }
    Ok(())
}

pub(super) fn clip(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// The context's messages from its last assistant message on: what the pairing of new
/// messages depends on.
pub(super) fn tail(state: &ContextState) -> impl Iterator<Item = &Message> {
    let start = state
        .entries
        .iter()
        .rposition(|e| e.message.role == Role::Assistant)
        .unwrap_or(state.entries.len());
    state.entries[start..].iter().map(|e| &e.message)
}
