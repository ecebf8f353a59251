//! Shortening one text in place: head + tail previews of tool results, salience-ranked
//! previews that keep the lines carrying most, and tool-call arguments cut to a length.

use super::*;

/// Whether `text` is already a head + tail preview cut to `max_chars` (its marker and the
/// archive path it names make it a little longer): cutting it again would only cut the
/// marker, and say that as many characters were omitted.
pub(super) fn is_own_preview(text: &str, max_chars: usize) -> bool {
    text.contains(" characters omitted; the whole output is archived at ")
        && text.chars().count() <= max_chars + PREVIEW_MARKER_SLACK
}

/// Room for the marker of a preview and the archive path it names.
pub(super) const PREVIEW_MARKER_SLACK: usize = 600;

/// A head + tail preview of `text` with a marker naming where the whole output is.
pub(in crate::engine) fn head_tail_preview(
    text: &str,
    head_chars: usize,
    tail_chars: usize,
    reference: &str,
) -> String {
    let chars = text.chars().count();
    if chars <= head_chars + tail_chars {
        return text.to_string();
    }
    let head_end = byte_at(text, head_chars);
    let tail_start = byte_at(text, chars - tail_chars);
    format!(
        "{}\n\n[… {} characters omitted; the whole output is archived at {reference} …]\n\n{}",
        &text[..head_end],
        chars - head_chars - tail_chars,
        &text[tail_start..]
    )
}

/// The byte offset of character `index` of `text` (its length past the end).
pub(super) fn byte_at(text: &str, index: usize) -> usize {
    text.char_indices()
        .nth(index)
        .map_or(text.len(), |(at, _)| at)
}

/// Share of a ranked preview's room that goes to the lines of the omitted middle.
pub(super) const MIDDLE_SHARE: f64 = 0.35;

/// A kept middle line longer than this is cut.
pub(super) const MIDDLE_LINE_CHARS: usize = 240;

/// Like [`head_tail_preview`] within the same room, but the part between head and tail is
/// not dropped blind: [`MIDDLE_SHARE`] of the room keeps the middle lines that carry most
/// ([`line_rank`]: directives, then errors, then paths and identifiers), in their order,
/// each line once. A failing assertion in the middle of a long test log, or the one line
/// naming the file to fix, survives the cut; repeated and plain lines do not.
pub(in crate::engine) fn ranked_preview(
    text: &str,
    head_chars: usize,
    tail_chars: usize,
    reference: &str,
) -> String {
    let chars = text.chars().count();
    if chars <= head_chars + tail_chars {
        return text.to_string();
    }
    let (full_head, full_tail) = (head_chars, tail_chars);
    let middle_room = ((head_chars + tail_chars) as f64 * MIDDLE_SHARE) as usize;
    let head_chars = head_chars - (head_chars as f64 * MIDDLE_SHARE) as usize;
    let tail_chars = tail_chars - (tail_chars as f64 * MIDDLE_SHARE) as usize;
    let head_end = byte_at(text, head_chars);
    let tail_start = byte_at(text, chars - tail_chars);
    let middle = &text[head_end..tail_start];
    // Whole lines only: the first and last pieces continue the head's and the tail's lines.
    let lines: Vec<&str> = middle.lines().collect();
    let inner = lines.len().saturating_sub(1).max(1);
    let mut ranked: Vec<(u8, usize)> = lines
        .iter()
        .enumerate()
        .take(inner)
        .skip(1)
        .map(|(i, line)| (line_rank(line), i))
        .filter(|(rank, _)| *rank >= 2)
        .collect();
    ranked.sort_by_key(|&(rank, i)| (std::cmp::Reverse(rank), i));
    let mut picked: Vec<usize> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut room = middle_room;
    for (_, i) in ranked {
        let line = lines[i].trim_end();
        let cost = line.chars().count().min(MIDDLE_LINE_CHARS) + 1;
        if cost > room || !seen.insert(line.trim()) {
            continue;
        }
        room -= cost;
        picked.push(i);
    }
    if picked.is_empty() {
        return head_tail_preview(text, full_head, full_tail, reference);
    }
    picked.sort_unstable();
    let mut kept = String::new();
    let mut kept_chars = 0;
    for i in &picked {
        let line = lines[*i].trim_end();
        let end = byte_at(line, MIDDLE_LINE_CHARS);
        kept_chars += line[..end].chars().count();
        kept.push_str(&line[..end]);
        kept.push('\n');
    }
    format!(
        "{}\n\n[… {} characters omitted; the whole output is archived at {reference} …]\n\
         [{} lines of the omitted part that name errors, rules, paths or identifiers:]\n{kept}\
         [… end of the kept lines …]\n\n{}",
        &text[..head_end],
        chars - head_chars - tail_chars - kept_chars,
        picked.len(),
        &text[tail_start..]
    )
}

/// Whether any argument of a call is over `max_len` characters: each field of a JSON
/// object is measured on its own (HarnessAgent's `maxArgLength` is per argument, such as a
/// `write_file` body), other arguments as a whole.
pub(super) fn has_long_argument(arguments: &str, max_len: usize) -> bool {
    // No field can be longer than the whole.
    if arguments.len() <= max_len {
        return false;
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(object)) => object.values().any(|v| has_long_string(v, max_len)),
        _ => arguments.chars().count() > max_len,
    }
}

fn has_long_string(value: &Value, max_len: usize) -> bool {
    match value {
        Value::String(text) => text.len() > max_len && text.chars().count() > max_len,
        Value::Array(items) => items.iter().any(|v| has_long_string(v, max_len)),
        Value::Object(object) => object.values().any(|v| has_long_string(v, max_len)),
        _ => false,
    }
}

/// Cuts each argument over `max_len` characters to its first `max_len` and the notice.
/// Arguments that are a JSON object keep their structure (long string values are cut), so
/// they stay valid JSON.
pub(super) fn truncate_arguments(arguments: &str, max_len: usize, notice: &str) -> String {
    if let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(arguments) {
        for value in object.values_mut() {
            truncate_value(value, max_len, notice);
        }
        return Value::Object(object).to_string();
    }
    let cut = byte_at(arguments, max_len);
    serde_json::json!({ "_truncated": format!("{}{notice}", &arguments[..cut]) }).to_string()
}

pub(super) fn truncate_value(value: &mut Value, max_len: usize, notice: &str) {
    match value {
        Value::String(text) if text.len() > max_len && text.chars().count() > max_len => {
            let cut = byte_at(text, max_len);
            *text = format!("{}{notice}", &text[..cut]);
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| truncate_value(v, max_len, notice)),
        Value::Object(object) => object
            .values_mut()
            .for_each(|v| truncate_value(v, max_len, notice)),
        _ => {}
    }
}
