//! Archive references in the summarized messages (`sessions/…/context.jsonl#L3-L9`, tool-result
//! files), collected so the summary names where each original went.

use super::*;

/// Archive references found in the messages, in first-seen order, without duplicates.
#[derive(Debug, Default)]
pub(super) struct References {
    seen: HashSet<String>,
    pub(super) found: Vec<String>,
}

impl References {
    /// Anchors of the reference layouts: AgentScope's workspace (`sessions/…`, `data/…`),
    /// Agentrail's (`tool-results/…`, `messages.compactions/…`), ReMe's store and memory files.
    const ANCHORS: [&'static str; 6] = [
        "sessions/",
        "data/",
        "tool-results/",
        "tool_results/",
        "messages.compactions/",
        "memory/",
    ];
    const MAX: usize = 64;

    pub(super) fn scan(&mut self, text: &str) {
        if self.found.len() >= Self::MAX || !text.contains('/') {
            return;
        }
        for anchor in Self::ANCHORS {
            for (at, _) in text.match_indices(anchor) {
                if self.found.len() >= Self::MAX {
                    return;
                }
                let bytes = text.as_bytes();
                let mut start = at;
                while start > 0 && !is_reference_boundary(bytes[start - 1]) {
                    start -= 1;
                }
                let mut end = at + anchor.len();
                while end < bytes.len() && !is_reference_boundary(bytes[end]) {
                    end += 1;
                }
                let candidate = text[start..end].trim_end_matches(['.', ',', ':', ';']);
                if is_reference(candidate, anchor) && self.seen.insert(candidate.to_string()) {
                    self.found.push(candidate.to_string());
                }
            }
        }
    }

    pub(super) fn into_lines(self) -> Vec<String> {
        self.found
            .into_iter()
            .map(|r| format!("{ARCHIVED_LABEL}{r}"))
            .collect()
    }
}

pub(super) fn is_reference_boundary(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b'"' | b'\''
                | b'`'
                | b'('
                | b')'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'{'
                | b'}'
                | b','
                | b'|'
        )
}

/// A path with a file extension that starts at an archive root (`sessions/…`, not
/// `.specify/memory/notes.md`, which is a project file), not too long; `data/` references must
/// name a SHA-256.
pub(super) fn is_reference(candidate: &str, anchor: &str) -> bool {
    if candidate.len() > 300 || candidate.contains("://") || !candidate.starts_with(anchor) {
        return false;
    }
    let Some(file) = candidate.rsplit('/').next() else {
        return false;
    };
    let has_extension = file
        .rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && (1..=8).contains(&ext.len()));
    if !has_extension {
        return false;
    }
    if anchor == "data/" {
        let stem = file.split('.').next().unwrap_or("");
        return stem.len() == 64 && stem.bytes().all(|b| b.is_ascii_hexdigit());
    }
    true
}
