//! What a statement is about: its content words and subject (the key an update supersedes by),
//! and the hashes that recognise a statement seen before.

use super::*;

/// Words that name no subject.
const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "our", "my", "your", "their", "its", "this", "that", "these", "those", "is",
    "are", "was", "were", "be", "been", "will", "would", "should", "shall", "can", "could", "to",
    "of", "in", "on", "for", "with", "by", "at", "from", "as", "and", "or", "but", "not", "it",
    "we", "you", "i", "me", "us", "they", "please", "all", "any", "every", "so", "then", "new",
    "change", "no", "longer", "from", "on", "onward", "onwards", "again", "also", "just", "never",
    "always", "must", "do", "don't", "dont", "does", "use", "using", "keep", "make", "sure",
    "let's", "lets", "here", "there", "which", "what", "when", "where", "still", "only", "ok",
    "okay", "hi", "hey", "thanks", "note", "fyi", "move", "set", "switched", "rather", "decision",
    "scratch", "plan",
];

/// The words that say a statement replaces an earlier one: cues of an update, and no subject
/// either.
const UPDATE_WORDS: &[&str] = &[
    "now",
    "instead",
    "actually",
    "update",
    "updated",
    "correction",
    "changed",
    "switch",
    "moved",
    "moves",
    "resolved",
    "decided",
    "anymore",
];

/// Content words of a sentence: lowercase, stop words and values out, plurals folded.
pub fn content_words(sentence: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // A value (`Asia/Tokyo`, `EMP-20931`, `$4,000`) is judged whole, before it is split
    // into words: none of its pieces names a subject.
    for token in sentence.split_whitespace().filter(|token| !is_value(token)) {
        for raw in token.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '_')) {
            if raw.is_empty() || is_value(raw) {
                continue;
            }
            let lower = raw.to_lowercase();
            if lower.len() < 2
                || STOP_WORDS.contains(&lower.as_str())
                || UPDATE_WORDS.contains(&lower.as_str())
            {
                continue;
            }
            let word = singular(&lower);
            if !out.contains(&word) {
                out.push(word);
            }
        }
    }
    out
}

pub(super) fn singular(word: &str) -> String {
    if word.len() > 3 && word.ends_with('s') && !word.ends_with("ss") {
        word[..word.len() - 1].to_string()
    } else {
        word.to_string()
    }
}

/// The words naming what a sentence is about: those before its copula when it has one
/// ("the budget cap is …" → budget, cap), else all its content words.
pub fn subject_words(sentence: &str) -> Vec<String> {
    let lower = sentence.to_lowercase();
    if let Some((subject, _)) = copula_split(&lower) {
        let words = content_words(subject);
        if !words.is_empty() {
            return words;
        }
    }
    content_words(sentence)
}

/// What a goal is about: what follows its label ("Open question awaiting the user: enable
/// strict mode by default?" is about strict mode, not about questions), else its content words.
pub(super) fn goal_subject(sentence: &str) -> Vec<String> {
    if let Some((_, rest)) = sentence.split_once(':') {
        let words = content_words(rest);
        if !words.is_empty() {
            return words;
        }
    }
    content_words(sentence)
}

pub(super) fn has_update_cue(sentence: &str) -> bool {
    const PHRASES: &[&str] = &[
        "change of plan",
        "no longer",
        "from now on",
        "replace",
        "scratch that",
        "not anymore",
    ];
    let lower = sentence.to_lowercase();
    UPDATE_WORDS
        .iter()
        .chain(PHRASES)
        .any(|cue| contains_phrase(&lower, cue))
}

/// A stable hash of a statement (case and whitespace aside): two statements are the same
/// when their hashes are.
pub fn statement_hash(sentence: &str) -> u64 {
    fnv1a(fold(sentence).as_bytes())
}

/// FNV-1a, 64 bits: stable across builds and platforms, for hashes kept in a session's state.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Lowercase with whitespace collapsed: two statements are the same when this is.
/// Whether two texts are the same words, case and spacing aside (what [`fold`] makes equal),
/// without building either folded text.
pub(super) fn same_words(a: &str, b: &str) -> bool {
    let mut a = a.split_whitespace();
    let mut b = b.split_whitespace();
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(x), Some(y))
                if x.chars()
                    .flat_map(char::to_lowercase)
                    .eq(y.chars().flat_map(char::to_lowercase)) => {}
            _ => return false,
        }
    }
}

pub(super) fn fold(text: &str) -> String {
    text.split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}
