//! Search text: what of a message is indexed, how text splits into terms, the ranking used by
//! the backends without a full-text engine, and snippets.

use ctxkeeper_core::model::{Message, Part};

/// The most text of one message a full-text index holds. PostgreSQL refuses tsvectors over
/// 1 MB and MariaDB packets are 16 MB by default; the message itself is always kept whole.
#[cfg_attr(not(feature = "sql"), allow(dead_code))]
pub(crate) const MAX_INDEXED_BYTES: usize = 256 * 1024;

/// The searchable text of a message: its readable text plus tool-call names and arguments.
pub(crate) fn message_search_text(message: &Message) -> String {
    let mut out = message.text();
    for part in &message.parts {
        if let Part::ToolCall {
            name, arguments, ..
        } = part
        {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(name);
            out.push(' ');
            out.push_str(arguments);
        }
    }
    out
}

/// The indexed body: the search text capped at [`MAX_INDEXED_BYTES`] on a character boundary,
/// without NUL characters (PostgreSQL text cannot hold them).
#[cfg_attr(not(feature = "sql"), allow(dead_code))]
pub(crate) fn indexed_body(message: &Message) -> String {
    let mut text = message_search_text(message);
    if text.len() > MAX_INDEXED_BYTES {
        let mut cut = MAX_INDEXED_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    if text.contains('\0') {
        text = text.replace('\0', " ");
    }
    text
}

/// Lowercased alphanumeric terms of a text, in order.
pub(crate) fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The distinct query terms of a search text, in order of first appearance.
pub(crate) fn query_terms(query: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for term in terms(query) {
        if !out.contains(&term) {
            out.push(term);
        }
    }
    out
}

/// BM25 ranking over an in-memory candidate set, for the backends without a full-text engine.
#[derive(Debug)]
pub(crate) struct Ranker {
    terms: Vec<String>,
    docs: Vec<(Vec<u32>, usize)>,
}

impl Ranker {
    pub(crate) fn new(terms: Vec<String>) -> Ranker {
        Ranker {
            terms,
            docs: Vec::new(),
        }
    }

    /// Adds a document; returns its index when it matches at least one term.
    pub(crate) fn add(&mut self, text: &str) -> Option<usize> {
        let mut counts = vec![0u32; self.terms.len()];
        let mut len = 0usize;
        for term in terms(text) {
            len += 1;
            if let Some(i) = self.terms.iter().position(|t| *t == term) {
                counts[i] += 1;
            }
        }
        let matched = counts.iter().any(|&c| c > 0);
        self.docs.push((counts, len));
        matched.then(|| self.docs.len() - 1)
    }

    /// The score of document `index` (higher is better).
    pub(crate) fn score(&self, index: usize) -> f64 {
        let n = self.docs.len() as f64;
        let avg_len = (self.docs.iter().map(|d| d.1).sum::<usize>() as f64 / n.max(1.0)).max(1.0);
        let Some((counts, len)) = self.docs.get(index) else {
            return 0.0;
        };
        let (k1, b) = (1.2, 0.75);
        let mut score = 0.0;
        for (i, &tf) in counts.iter().enumerate() {
            if tf == 0 {
                continue;
            }
            let df = self.docs.iter().filter(|d| d.0[i] > 0).count() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            let tf = f64::from(tf);
            score += idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * *len as f64 / avg_len));
        }
        score
    }
}

/// About `width` bytes of `text` around the first occurrence of a query term.
pub(crate) fn snippet(text: &str, query_terms: &[String], width: usize) -> String {
    let lower = text.to_lowercase();
    // Lowercasing can change byte lengths; only use a position that is valid in both.
    let at = query_terms
        .iter()
        .filter_map(|t| lower.find(t.as_str()))
        .min()
        .filter(|&p| p < text.len() && text.is_char_boundary(p))
        .unwrap_or(0);
    let mut start = at.saturating_sub(width / 3);
    while start > 0 && !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + width).min(text.len());
    while end < text.len() && !text.is_char_boundary(end) {
        end += 1;
    }
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(&text[start..end].replace('\n', " "));
    if end < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_matching_terms_rank_higher() {
        let mut ranker = Ranker::new(query_terms("parcel delayed"));
        let one = ranker.add("the parcel arrived").unwrap_or(usize::MAX);
        let both = ranker.add("the parcel is delayed").unwrap_or(usize::MAX);
        assert!(ranker.add("nothing here").is_none());
        assert!(ranker.score(both) > ranker.score(one));
    }

    #[test]
    fn snippets_stay_on_char_boundaries() {
        let text = "ééééé needle ééééé";
        let s = snippet(text, &["needle".to_string()], 8);
        assert!(s.contains("needle") || s.contains("nee"));
    }
}
