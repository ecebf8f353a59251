//! Input checks: the ids, roles and tool pairing of new messages, refused with the rule they
//! break before anything is ingested; and the stand-ins a step hands back for what it rewrote.

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
    let markers = CheckRules {
        internal_markers: true,
        ..CheckRules::history()
    };
    if let Some(found) = check(new, &markers)
        .into_iter()
        .find(|v| v.kind == ViolationKind::InternalMarker)
    {
        return Err(EmbedError::InvalidInput {
            message: format!("messages[{}]: {}", found.message, found.reason),
            path: Some(format!("messages[{}]", found.message)),
            index: Some(found.message),
            kind: Some("invalid_message"),
        });
    }
    // Pairing depends on roles, part kinds and ids only: it is checked on stand-ins that
    // carry just those, so no content is copied.
    let rules = CheckRules {
        internal_markers: false,
        ..CheckRules::history()
    };
    let tail = tail(state);
    let before: Vec<_> = check(&tail, &rules)
        .into_iter()
        .map(|v| (v.message, v.part, v.kind))
        .collect();
    let before_len = tail.len();
    let mut joined = tail;
    joined.extend(new.iter().map(stand_in));
    for violation in check(&joined, &rules) {
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

/// Stand-ins for the context's messages from its last assistant message on: what the pairing
/// of new messages depends on.
pub(super) fn tail(state: &ContextState) -> Vec<Message> {
    let start = state
        .entries
        .iter()
        .rposition(|e| e.message.role == Role::Assistant)
        .unwrap_or(state.entries.len());
    state.entries[start..]
        .iter()
        .map(|e| stand_in(&e.message))
        .collect()
}

/// A message reduced to what tool pairing looks at: its role, the kinds of its parts, the
/// ids of its calls and results.
pub(super) fn stand_in(message: &Message) -> Message {
    let parts = message
        .parts
        .iter()
        .map(|part| match part {
            Part::ToolCall { id, .. } => Part::ToolCall {
                id: id.clone(),
                name: String::new(),
                arguments: String::new(),
                extra: Default::default(),
            },
            Part::ToolResult {
                call_id, is_error, ..
            } => Part::ToolResult {
                call_id: call_id.clone(),
                content: Vec::new(),
                is_error: *is_error,
                extra: Default::default(),
            },
            _ => Part::text(""),
        })
        .collect();
    Message::new(message.role, parts)
}
