//! Cache hints: the client's current prompt-cache markers on the managed context.
//!
//! A client such as Claude Code moves its `cache_control` marker to the newest block on every
//! call, and Anthropic refuses more than four markers; the session's stored copies keep the
//! markers they arrived with. So before a managed context goes upstream every message loses
//! its hints, and each client message still in the context verbatim gets the client's current
//! ones back ([`carry_cache_hints`]). Fingerprints ignore these hints
//! ([`ctxkeeper::snapshot::strip_volatile`]), so a moved marker is not an edited history.
//!
//! ```
//! use ctxkeeper_core::model::{Message, Part};
//! use ctxkeeper_gateway::cache_hints::carry_cache_hints;
//! use ctxkeeper_gateway::identity::{has_volatile, message_hash};
//!
//! let mut marked = Message::user("task");
//! if let Part::Text { extra, .. } = &mut marked.parts[0] {
//!     extra.insert("cache_control".into(), serde_json::json!({"type": "ephemeral"}));
//! }
//! let client = vec![marked];
//! let hashes: Vec<u128> = client.iter().map(message_hash).collect();
//! let mut managed = vec![Message::user("task")];
//! carry_cache_hints(&client, &hashes, &mut managed);
//! assert!(has_volatile(&managed[0]));
//! ```

use ctxkeeper::snapshot::{CACHE_CONTROL, Fingerprinter, has_volatile, strip_volatile};
use ctxkeeper_core::model::{Message, Part};
use serde_json::Value;

/// Puts the client's cache hints on the managed context that replaces its messages. Stored
/// copies keep the hints they arrived with, and a client such as Claude Code moves its
/// marker to the newest block on every call, so the managed messages would otherwise carry
/// stale markers (Anthropic refuses more than four). Every managed message loses its hints;
/// each client message that carries hints and is still in the context verbatim gets them
/// back; a marker on the client's last message that has no verbatim copy (its output was
/// capped at ingest) goes on the last managed message, where the client meant "cache up to
/// here". `client_hashes` are the fingerprints of `client`.
pub fn carry_cache_hints(client: &[Message], client_hashes: &[u128], managed: &mut [Message]) {
    let marked: Vec<usize> = (0..client.len())
        .filter(|&i| has_volatile(&client[i]))
        .collect();
    for message in managed.iter_mut() {
        if has_volatile(message) {
            strip_volatile(message);
        }
    }
    if marked.is_empty() || managed.is_empty() {
        return;
    }
    let leading = client
        .iter()
        .take_while(|m| m.role.is_instruction())
        .count();
    let mut fingerprints = Fingerprinter::default();
    // Instructions are matched from the front, conversation from the back: hints sit on the
    // system prompt and on the newest messages, so each search stops after a few messages.
    let mut front = 0;
    for &i in marked.iter().filter(|&&i| i < leading) {
        if let Some(j) = (front..managed.len()).find(|&j| {
            managed[j].role.is_instruction()
                && fingerprints.message(&managed[j]) == client_hashes[i]
        }) {
            copy_hints(&client[i], &mut managed[j]);
            front = j + 1;
        }
    }
    let mut back = managed.len();
    for &i in marked.iter().rev().filter(|&&i| i >= leading) {
        let found = (front..back)
            .rev()
            .find(|&j| fingerprints.message(&managed[j]) == client_hashes[i]);
        match found {
            Some(j) => {
                copy_hints(&client[i], &mut managed[j]);
                back = j;
            }
            None if i + 1 == client.len() && back == managed.len() => {
                if let (Some(hint), Some(last)) = (last_hint(&client[i]), managed.last_mut()) {
                    mark_last_part(last, hint);
                }
            }
            None => {}
        }
    }
}

/// Copies the hints of `from` onto `to`, which equals it without hints.
fn copy_hints(from: &Message, to: &mut Message) {
    for (source, target) in from.parts.iter().zip(to.parts.iter_mut()) {
        copy_part_hints(source, target);
    }
}

fn copy_part_hints(source: &Part, target: &mut Part) {
    if let (
        Part::ToolResult {
            content: from_content,
            ..
        },
        Part::ToolResult {
            content: to_content,
            ..
        },
    ) = (source, &mut *target)
    {
        for (a, b) in from_content.iter().zip(to_content.iter_mut()) {
            copy_part_hints(a, b);
        }
    }
    if let (Part::Opaque { value: from }, Part::Opaque { value: to }) = (source, &mut *target) {
        // Opaque parts are carried whole: the client's form is the current one.
        *to = from.clone();
        return;
    }
    if let (Some(from), Some(to)) = (part_extra(source), part_extra_mut(target))
        && let Some(hint) = from.get(CACHE_CONTROL)
    {
        to.insert(CACHE_CONTROL.into(), hint.clone());
    }
}

fn part_extra(part: &Part) -> Option<&serde_json::Map<String, Value>> {
    match part {
        Part::Text { extra, .. }
        | Part::Data { extra, .. }
        | Part::ToolCall { extra, .. }
        | Part::ToolResult { extra, .. }
        | Part::Reasoning { extra, .. } => Some(extra),
        Part::Opaque { .. } => None,
    }
}

fn part_extra_mut(part: &mut Part) -> Option<&mut serde_json::Map<String, Value>> {
    match part {
        Part::Text { extra, .. }
        | Part::Data { extra, .. }
        | Part::ToolCall { extra, .. }
        | Part::ToolResult { extra, .. } => Some(extra),
        // Thinking blocks take no cache marker.
        Part::Reasoning { .. } | Part::Opaque { .. } => None,
    }
}

/// The last cache hint of a message's blocks.
fn last_hint(message: &Message) -> Option<Value> {
    message
        .parts
        .iter()
        .rev()
        .find_map(|part| part_extra(part)?.get(CACHE_CONTROL).cloned())
}

fn mark_last_part(message: &mut Message, hint: Value) {
    if let Some(extra) = message.parts.last_mut().and_then(part_extra_mut) {
        extra.insert(CACHE_CONTROL.into(), hint);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ctxkeeper::snapshot::message_hash;

    pub(crate) fn marked(text: &str) -> Message {
        let mut message = Message::user(text);
        if let Part::Text { extra, .. } = &mut message.parts[0] {
            extra.insert(
                CACHE_CONTROL.into(),
                serde_json::json!({"type": "ephemeral"}),
            );
        }
        message
    }

    #[test]
    fn the_clients_current_cache_markers_replace_stale_ones() {
        let system = {
            let mut m = Message::system("rules");
            if let Part::Text { extra, .. } = &mut m.parts[0] {
                extra.insert(
                    CACHE_CONTROL.into(),
                    serde_json::json!({"type": "ephemeral"}),
                );
            }
            m
        };
        // The stored context: the marker still on the message that was newest last call,
        // and a summary standing in for compacted messages.
        let mut managed = vec![
            system.clone(),
            Message::user("[summary]"),
            marked("step 1"),
            Message::user("step 2"),
        ];
        let client = vec![
            system,
            Message::user("task"),
            Message::user("step 1"),
            marked("step 2"),
        ];
        let hashes: Vec<u128> = client.iter().map(message_hash).collect();
        carry_cache_hints(&client, &hashes, &mut managed);
        let marked_at: Vec<usize> = (0..managed.len())
            .filter(|&i| has_volatile(&managed[i]))
            .collect();
        assert_eq!(
            marked_at,
            vec![0, 3],
            "system and newest keep theirs, the stale one goes"
        );

        // The newest message was capped at ingest: its marker lands on the last message.
        let mut capped = vec![Message::user("step 1"), Message::user("step 2 [capped]")];
        carry_cache_hints(&client, &hashes, &mut capped);
        assert!(!has_volatile(&capped[0]) && has_volatile(&capped[1]));
    }
}
