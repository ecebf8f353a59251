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

/// The compound words of a search text (`MARKER-3`, `src/lib.rs`, `user_id`): words of
/// several terms, each as its term sequence. A document matches only where each one occurs
/// whole, so `MARKER-3` finds neither `MARKER-30` nor a `marker` near some `3`.
pub(crate) fn query_phrases(query: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for word in query.split_whitespace() {
        let phrase = terms(word);
        if phrase.len() > 1 && !out.contains(&phrase) {
            out.push(phrase);
        }
    }
    out
}

/// BM25 ranking over a candidate set: the whole ranking for the backends without a
/// full-text engine, and the final filter and order for those with one (which match any
/// term; compound words are checked here).
#[derive(Debug)]
pub(crate) struct Ranker {
    terms: Vec<String>,
    phrases: Vec<Vec<String>>,
    docs: Vec<(Vec<u32>, usize)>,
}

impl Ranker {
    pub(crate) fn new(terms: Vec<String>) -> Ranker {
        Ranker {
            terms,
            phrases: Vec::new(),
            docs: Vec::new(),
        }
    }

    /// The ranker of a search text: its terms, and its compound words as phrases every match
    /// must hold ([`query_phrases`]).
    pub(crate) fn for_query(query: &str) -> Ranker {
        Ranker {
            terms: query_terms(query),
            phrases: query_phrases(query),
            docs: Vec::new(),
        }
    }

    /// Adds a document; returns its index when it matches at least one term and holds every
    /// phrase.
    pub(crate) fn add(&mut self, text: &str) -> Option<usize> {
        let mut counts = vec![0u32; self.terms.len()];
        let words = terms(text);
        for term in &words {
            if let Some(i) = self.terms.iter().position(|t| t == term) {
                counts[i] += 1;
            }
        }
        let matched = self.holds_phrases_of(&words) && counts.iter().any(|&c| c > 0);
        self.docs.push((counts, words.len()));
        matched.then(|| self.docs.len() - 1)
    }

    /// Whether `text` holds every compound word of the query whole. A full-text engine's
    /// candidates are held to this; its other matches stand (a stemmed `running` for `run`).
    pub(crate) fn holds_phrases(&self, text: &str) -> bool {
        self.phrases.is_empty() || self.holds_phrases_of(&terms(text))
    }

    fn holds_phrases_of(&self, words: &[String]) -> bool {
        self.phrases.iter().all(|phrase| {
            words
                .windows(phrase.len())
                .any(|run| run == phrase.as_slice())
        })
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
    fn a_compound_word_matches_only_whole() {
        let mut ranker = Ranker::for_query("MARKER-3");
        assert!(ranker.add("found MARKER-3 in the log").is_some());
        assert!(ranker.add("found marker-3 in the log").is_some());
        assert!(ranker.add("found MARKER-30 in the log").is_none());
        assert!(ranker.add("MARKER-4 and 3 other markers").is_none());
        // Plain words still match any of them.
        let mut ranker = Ranker::for_query("parcel src/lib.rs");
        assert!(ranker.add("edited src/lib.rs today").is_some());
        assert!(ranker.add("the parcel arrived").is_none());
    }

    #[test]
    fn snippets_stay_on_char_boundaries() {
        let text = "ééééé needle ééééé";
        let s = snippet(text, &["needle".to_string()], 8);
        assert!(s.contains("needle") || s.contains("nee"));
    }
}
