//! Fitting a field's lines into its budget: merging with the previous summary, keeping the head,
//! the tail and the middle lines that carry most, and the small text helpers they share.

use super::*;

/// Merges the previous summary's lines (minus the extractive label) with the new ones,
/// dropping exact duplicates.
pub(super) fn merge(previous: &str, new_lines: &[String]) -> Vec<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    for line in previous
        .lines()
        .map(str::trim_end)
        .chain(new_lines.iter().map(|l| l.as_str()))
    {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed == EXTRACTIVE_LABEL || is_omission_marker(trimmed) {
            continue;
        }
        let bullet = trimmed.strip_prefix("- ").unwrap_or(trimmed);
        if seen.insert(bullet) {
            out.push(bullet.to_string());
        }
    }
    out
}

pub(super) fn is_omission_marker(line: &str) -> bool {
    line.starts_with("- [… ") && line.ends_with(" earlier lines omitted …]")
}

/// Bullet lines within `budget` characters: `head_fraction` of the budget for the oldest
/// lines, the rest for the newest, and a marker counting what was dropped in between.
pub(super) fn fit_lines(lines: &[String], budget: usize, head_fraction: f32) -> String {
    // A line may take at most half the field, so one long line (a pasted task) cannot crowd
    // out everything else, and is cut rather than dropped.
    // An archive reference is never cut: half a reference names nothing (the line is kept or
    // dropped whole).
    let longest = (budget / 2).max(80);
    let cuttable = |l: &String| l.len() > longest && !l.starts_with(ARCHIVED_LABEL);
    let cut_lines: Vec<String>;
    let lines = if lines.iter().any(cuttable) {
        cut_lines = lines
            .iter()
            .map(|l| {
                if cuttable(l) {
                    cut(l, longest)
                } else {
                    l.clone()
                }
            })
            .collect();
        &cut_lines[..]
    } else {
        lines
    };
    let cost = |line: &String| line.len() + 3;
    let total: usize = lines.iter().map(cost).sum();
    if total <= budget {
        return render_kept(lines, |_| true);
    }
    let head_budget = (budget as f32 * head_fraction) as usize;
    let mut used = 0;
    let mut head = 0;
    while head < lines.len() && used + cost(&lines[head]) <= head_budget {
        used += cost(&lines[head]);
        head += 1;
    }
    let marker_room = 40;
    // The newest lines take most of what is left; the rest goes to the lines in between that
    // carry the most (directives, errors, paths and identifiers), whatever their position, so
    // an omission marker never hides a rule the user set or the error being fought merely
    // because it sat in the middle.
    let tail_limit = used + (budget - used) * (100 - MIDDLE_SHARE_PERCENT) / 100;
    let mut tail_start = lines.len();
    while tail_start > head {
        let next = used + cost(&lines[tail_start - 1]);
        let newest = tail_start == lines.len();
        if next + marker_room > budget || (!newest && next > tail_limit) {
            break;
        }
        used = next;
        tail_start -= 1;
    }
    let mut ranked: Vec<usize> = (head..tail_start).collect();
    ranked.sort_by_key(|&i| {
        (
            std::cmp::Reverse(line_rank(&lines[i])),
            std::cmp::Reverse(i),
        )
    });
    let mut picked = vec![false; lines.len()];
    for i in ranked {
        if line_rank(&lines[i]) == 0 {
            break;
        }
        // Each pick may open one more gap: its marker is counted with it.
        if used + cost(&lines[i]) + 2 * marker_room <= budget {
            used += cost(&lines[i]) + marker_room;
            picked[i] = true;
        }
    }
    render_kept(lines, |i| i < head || i >= tail_start || picked[i])
}

/// The lines `keep` selects as bullets, in order, each run of the others counted by one
/// omission marker.
pub(super) fn render_kept(lines: &[String], keep: impl Fn(usize) -> bool) -> String {
    let mut out = String::new();
    let mut push = |line: &str| {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("- ");
        out.push_str(line);
    };
    let mut gap = 0;
    for (i, line) in lines.iter().enumerate() {
        if keep(i) {
            if gap > 0 {
                push(&format!("[… {gap} earlier lines omitted …]"));
                gap = 0;
            }
            push(line);
        } else {
            gap += 1;
        }
    }
    if gap > 0 {
        push(&format!("[… {gap} earlier lines omitted …]"));
    }
    out
}

/// Share of a field's room, after its oldest lines, kept for the ranked lines in between.
pub(super) const MIDDLE_SHARE_PERCENT: usize = 35;

/// Short rendering of tool-call arguments: the first two `key=value` pairs of a JSON object,
/// values cut to 40 characters; anything else cut to 60.
pub(super) fn short_args(arguments: &str) -> String {
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(arguments) {
        let pairs: Vec<String> = map
            .iter()
            .take(2)
            .map(|(k, v)| {
                let value = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                format!("{k}={}", cut(&collapse(&value), 40))
            })
            .collect();
        let mut text = pairs.join(", ");
        if map.len() > 2 {
            text.push_str(", …");
        }
        return text;
    }
    cut(&collapse(arguments), 60)
}

pub(super) fn first_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|l| !l.is_empty())
}

/// Whitespace runs collapsed to single spaces.
pub(super) fn collapse(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(4096));
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    if text.chars().count() <= max {
        return text.to_string();
    }
    let end = text
        .char_indices()
        .nth(max.saturating_sub(1))
        .map_or(text.len(), |(i, _)| i);
    format!("{}…", &text[..end])
}

/// Whether `needle` occurs in `haystack` starting at a word boundary.
pub(super) fn contains_word(haystack: &str, needle: &str) -> bool {
    let bytes = haystack.as_bytes();
    haystack
        .match_indices(needle)
        .any(|(i, _)| i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
}

pub(super) fn starts_with_ci(text: &str, prefix: &str) -> bool {
    text.len() >= prefix.len()
        && text.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}
