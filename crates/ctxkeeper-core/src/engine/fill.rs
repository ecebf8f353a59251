//! Fill markers: where an archive reference or a summary goes once the host has them.
//!
//! A plan is made before anything is archived, so the placeholders it writes carry markers
//! (`\u{1}ref:N\u{1}`, `\u{1}summary:N\u{1}`) that [`Engine::apply`](super::Engine::apply)
//! replaces with the references the offloader returned. A marker can land in many places: the
//! text of a placeholder, tool-call arguments (where JSON writing escapes it as
//! `\u0001ref:N\u0001`), messages that a later stage of the same plan archives or hands to the
//! summarizer, and from there the summary itself. Every one of them is filled here; a marker
//! that cannot be filled makes the engine refuse the plan, because a marker that reaches a
//! request is a reference the model cannot follow (`check` reports it as a violation).

use crate::model::{Message, Part, part_has_internal_marker};

/// Opens and closes a marker. Control characters cannot occur in the placeholder templates,
/// so a fill never hits user content.
pub(super) const FILL_OPEN: char = '\u{1}';
/// The same character as JSON writes it inside a string.
const FILL_OPEN_ESCAPED: &str = "\\u0001";

/// Written where a reference is missing (the host archived fewer items than planned).
pub const NOT_ARCHIVED: &str = "(not archived)";

pub(super) fn ref_marker(index: usize) -> String {
    format!("{FILL_OPEN}ref:{index}{FILL_OPEN}")
}

pub(super) fn summary_marker(index: usize) -> String {
    format!("{FILL_OPEN}summary:{index}{FILL_OPEN}")
}

/// Replaces every marker in `message` (text, tool results, tool-call arguments, readable
/// reasoning) by its value: `refs[i]` for `ref:i`, `summaries[i]` for `summary:i`. References
/// beyond `refs` become [`NOT_ARCHIVED`]; summaries beyond `summaries` become empty.
pub fn fill_references(message: &mut Message, refs: &[String], summaries: &[String]) {
    for part in &mut message.parts {
        fill_part(part, refs, summaries);
    }
}

/// Whether a marker is left anywhere in `message`.
pub fn has_marker(message: &Message) -> bool {
    message.parts.iter().any(part_has_internal_marker)
}

fn fill_part(part: &mut Part, refs: &[String], summaries: &[String]) {
    match part {
        Part::Text { text, .. }
        | Part::Reasoning {
            text: Some(text), ..
        } if may_hold_marker(text) => {
            *text = fill_text(text, refs, summaries, false);
        }
        Part::ToolResult { content, .. } => {
            for inner in content {
                fill_part(inner, refs, summaries);
            }
        }
        // Arguments are JSON text: values go in JSON-escaped.
        Part::ToolCall { arguments, .. } if may_hold_marker(arguments) => {
            *arguments = fill_text(arguments, refs, summaries, true);
        }
        _ => {}
    }
}

fn may_hold_marker(text: &str) -> bool {
    text.contains(FILL_OPEN) || text.contains(FILL_OPEN_ESCAPED)
}

/// `text` with every marker, raw or JSON-escaped, replaced by its value (JSON-escaped when
/// `json` is set: the text is JSON, and a value must not break its strings).
pub fn fill_text(text: &str, refs: &[String], summaries: &[String], json: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let raw = rest.find(FILL_OPEN).map(|at| (at, FILL_OPEN.len_utf8()));
        let escaped = rest
            .find(FILL_OPEN_ESCAPED)
            .map(|at| (at, FILL_OPEN_ESCAPED.len()));
        let (start, width) = match (raw, escaped) {
            (Some(a), Some(b)) => {
                if a.0 <= b.0 {
                    a
                } else {
                    b
                }
            }
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => break,
        };
        let closing = if width == 1 {
            FILL_OPEN.to_string()
        } else {
            FILL_OPEN_ESCAPED.to_string()
        };
        let after = &rest[start + width..];
        let Some(end) = after.find(&closing) else {
            break;
        };
        let key = &after[..end];
        let value = if let Some(index) = key.strip_prefix("ref:") {
            index
                .parse::<usize>()
                .ok()
                .map(|i| refs.get(i).map_or(NOT_ARCHIVED, String::as_str).to_string())
        } else if let Some(index) = key.strip_prefix("summary:") {
            index
                .parse::<usize>()
                .ok()
                .map(|i| summaries.get(i).cloned().unwrap_or_default())
        } else {
            None
        };
        match value {
            Some(value) => {
                out.push_str(&rest[..start]);
                if json {
                    out.push_str(&json_escaped(&value));
                } else {
                    out.push_str(&value);
                }
                rest = &after[end + closing.len()..];
            }
            None => {
                // Not a marker (a lone control character in real content): keep it.
                out.push_str(&rest[..start + width]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `value` as it appears inside a JSON string.
fn json_escaped(value: &str) -> String {
    let quoted = serde_json::to_string(value).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or(&quoted)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs() -> Vec<String> {
        vec![
            "sessions/s/a.txt".into(),
            "sessions/s/\"quoted\".txt".into(),
        ]
    }

    #[test]
    fn raw_and_escaped_markers_are_filled() {
        let text = format!("see {} and {}", ref_marker(0), summary_marker(0));
        assert_eq!(
            fill_text(&text, &refs(), &["S".into()], false),
            "see sessions/s/a.txt and S"
        );
        // What serde writes for a marker inside a JSON string.
        let arguments =
            serde_json::json!({ "x": format!("cut (archived at {})", ref_marker(1)) }).to_string();
        assert!(arguments.contains("\\u0001ref:1\\u0001"));
        let filled = fill_text(&arguments, &refs(), &[], true);
        let value: serde_json::Value = serde_json::from_str(&filled).unwrap_or_default();
        assert_eq!(value["x"], "cut (archived at sessions/s/\"quoted\".txt)");
    }

    #[test]
    fn missing_references_are_named_and_lone_control_characters_kept() {
        assert_eq!(fill_text(&ref_marker(7), &refs(), &[], false), NOT_ARCHIVED);
        assert_eq!(fill_text("a\u{1}b", &refs(), &[], false), "a\u{1}b");
        assert_eq!(
            fill_text("\u{1}other\u{1}x", &refs(), &[], false),
            "\u{1}other\u{1}x"
        );
    }

    #[test]
    fn every_place_in_a_message_is_filled() {
        let mut message = Message::new(
            crate::model::Role::Tool,
            vec![Part::tool_result(
                "c",
                format!("[cleared; {}]", ref_marker(0)),
            )],
        );
        fill_references(&mut message, &refs(), &[]);
        assert!(!has_marker(&message));
        assert!(message.text().contains("sessions/s/a.txt"));
    }
}
