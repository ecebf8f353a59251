//! Standing orders: what the user set for the rest of the session.
//!
//! Among the small talk of a long conversation, a few statements must hold until the session
//! ends: rules ("never reveal API keys"), constraints ("all times in America/Los_Angeles",
//! "the budget cap is $4,000"), stated facts ("the project codename is BLUEJAY"), preferences
//! ("code examples in Python, not JavaScript") and the goal state ("open question awaiting
//! the user: enable strict mode by default?"). Kept by position, they go the way of everything
//! old; the capsule keeps them verbatim, first, with the reference of their archived message.
//!
//! Recognition is by deterministic rules (the engine has no model), and by provenance: only
//! the text of user, system and developer messages is read, never tool output and never what
//! the assistant wrote. A statement is one sentence (or list item) of such a message.
//!
//! A later statement about the same subject supersedes the earlier one: same subject words
//! (what comes before "is" / "are" / ":"), or an update cue ("now", "instead", "actually",
//! "from now on", "correction", "resolved", …) naming most of an earlier statement's subject.
//! The earlier one is kept as *superseded* (with the log index of what replaced it) and is
//! never rendered as current.
//!
//! ```
//! use ctxkeeper_core::model::Role;
//! use ctxkeeper_core::orders::{OrderKind, StandingOrders};
//!
//! let mut orders = StandingOrders::default();
//! orders.read(Role::User, "Hi! Never reveal API keys or passwords. The budget cap is $4,000.", 3);
//! orders.read(Role::User, "Nice weather today.", 5);
//! orders.read(Role::User, "Update: the budget cap is now $6,500.", 9);
//! let current: Vec<&str> = orders.current().map(|o| o.text.as_str()).collect();
//! assert_eq!(current, ["Never reveal API keys or passwords.", "Update: the budget cap is now $6,500."]);
//! assert_eq!(orders.orders[0].kind, OrderKind::Rule);
//! assert_eq!(orders.orders[1].superseded_by, Some(9));
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::Role;

mod subjects;
use subjects::*;
pub use subjects::{content_words, fnv1a, statement_hash, subject_words};

/// What a standing order is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderKind {
    /// never / always / must / do not …
    Rule,
    /// caps, limits, deadlines, formats, units, time zones, budgets.
    Constraint,
    /// names, codes, identifiers, numbers the user gives.
    Fact,
    /// what the user prefers.
    Preference,
    /// what is being done, what awaits the user.
    Goal,
}

impl OrderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OrderKind::Rule => "rule",
            OrderKind::Constraint => "constraint",
            OrderKind::Fact => "fact",
            OrderKind::Preference => "preference",
            OrderKind::Goal => "goal",
        }
    }
}

/// One statement that must hold for the rest of the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandingOrder {
    pub kind: OrderKind,
    /// The sentence as written.
    pub text: String,
    /// Who said it: `user`, `system` or `developer`.
    pub source: String,
    /// Position of its message in the session log.
    pub log_index: u64,
    /// Where its message was archived when it left the context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The log index of the later statement that replaced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<u64>,
    /// Kept by an operator's decision (admin API): never superseded automatically, and
    /// listed before every other order when the capsule is short of room.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// Marked no longer current by an operator (admin API).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub withdrawn: bool,
    /// Subject words (lowercase, singular), what supersession compares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject: Vec<String>,
}

impl StandingOrder {
    pub fn is_current(&self) -> bool {
        self.superseded_by.is_none() && !self.withdrawn
    }
}

/// The most statements a session keeps (they travel in its saved state): past it the oldest
/// replaced or withdrawn one goes first, then the oldest fact, then the oldest of the rest;
/// a pinned one never. Their messages stay archived.
pub const MAX_ORDERS: usize = 512;

/// The standing orders of a session, in log order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StandingOrders {
    /// Shared, so a copy of the capsule (every compaction plans on one) copies no text; an
    /// edit copies only the order it changes.
    pub orders: Vec<Arc<StandingOrder>>,
}

impl StandingOrders {
    pub fn is_empty(&self) -> bool {
        self.orders.is_empty()
    }

    /// The orders still current, oldest first.
    pub fn current(&self) -> impl Iterator<Item = &StandingOrder> {
        self.orders
            .iter()
            .map(|o| o.as_ref())
            .filter(|o| o.is_current())
    }

    /// Reads the statements of one message. `role` decides whether it counts at all: only
    /// user, system and developer text carries standing orders.
    pub fn read(&mut self, role: Role, text: &str, log_index: u64) {
        self.read_where(role, text, log_index, |_| true);
    }

    /// [`StandingOrders::read`], of the sentences `keep` accepts.
    pub fn read_where(
        &mut self,
        role: Role,
        text: &str,
        log_index: u64,
        keep: impl Fn(&str) -> bool,
    ) {
        let source = match role {
            Role::User => "user",
            Role::System => "system",
            Role::Developer => "developer",
            Role::Assistant | Role::Tool => return,
        };
        for sentence in sentences(text) {
            let Some(kind) = classify(sentence) else {
                continue;
            };
            if !keep(sentence) {
                continue;
            }
            self.add(kind, sentence, source, log_index);
        }
    }

    fn add(&mut self, kind: OrderKind, sentence: &str, source: &str, log_index: u64) {
        // The same statement again: the earlier one stands (it still holds). Compared word by
        // word without folding either text: most orders differ in their first word, and a
        // session's orders are read on every compaction.
        if self
            .orders
            .iter()
            .any(|o| o.is_current() && same_words(&o.text, sentence))
        {
            return;
        }
        let subject = if kind == OrderKind::Goal {
            goal_subject(sentence)
        } else {
            subject_words(sentence)
        };
        let words = content_words(sentence);
        let update = has_update_cue(sentence);
        let mut best: Option<(usize, f64)> = None;
        for (at, order) in self.orders.iter().enumerate() {
            if !order.is_current() || order.pinned || order.subject.is_empty() {
                continue;
            }
            // A rule is replaced only by what says it changed; other kinds also by a new
            // value for the very same subject.
            let same_subject =
                !subject.is_empty() && order.subject == subject && kind != OrderKind::Rule;
            let shared = order.subject.iter().filter(|w| words.contains(w)).count();
            let score = shared as f64 / order.subject.len() as f64;
            let replaces = same_subject || (update && shared > 0 && score >= 0.5);
            if replaces && best.is_none_or(|(_, s)| score >= s) {
                best = Some((at, if same_subject { 2.0 } else { score }));
            }
        }
        if let Some((at, _)) = best {
            Arc::make_mut(&mut self.orders[at]).superseded_by = Some(log_index);
        }
        self.orders.push(Arc::new(StandingOrder {
            kind,
            text: sentence.to_string(),
            source: source.to_string(),
            log_index,
            reference: None,
            superseded_by: None,
            pinned: false,
            withdrawn: false,
            subject,
        }));
        if self.orders.len() > MAX_ORDERS {
            let unpinned = |o: &&StandingOrder| !o.pinned;
            let oldest = |pick: &dyn Fn(&StandingOrder) -> bool| {
                self.orders
                    .iter()
                    .position(|o| unpinned(&o.as_ref()) && pick(o))
            };
            if let Some(at) = oldest(&|o| !o.is_current())
                .or_else(|| oldest(&|o| o.kind == OrderKind::Fact))
                .or_else(|| oldest(&|_| true))
            {
                self.orders.remove(at);
            }
        }
    }

    /// An operator's edit of the order at `index` (its position in [`StandingOrders::orders`]):
    /// `pinned` pins or unpins it; `current: false` withdraws it, `current: true` makes it
    /// current again (whatever replaced it). Returns the edited order, or why not.
    pub fn edit(
        &mut self,
        index: usize,
        pinned: Option<bool>,
        current: Option<bool>,
    ) -> Result<&StandingOrder, String> {
        let count = self.orders.len();
        let order = self.orders.get_mut(index).ok_or_else(|| {
            format!("no standing order {index}: the session has {count} (numbered from 0)")
        })?;
        let order = Arc::make_mut(order);
        if let Some(pinned) = pinned {
            order.pinned = pinned;
        }
        match current {
            Some(false) => order.withdrawn = true,
            Some(true) => {
                order.withdrawn = false;
                order.superseded_by = None;
            }
            None => {}
        }
        Ok(order)
    }

    /// Records where the message at `log_index` was archived.
    pub fn note_archived(&mut self, log_index: u64, reference: &str) {
        for order in self
            .orders
            .iter_mut()
            .filter(|o| o.log_index == log_index && o.reference.is_none())
        {
            Arc::make_mut(order).reference = Some(reference.to_string());
        }
    }

    /// Replaces every reference `pending` selects by what `fill` makes of it.
    pub fn fill_references(
        &mut self,
        pending: &impl Fn(&str) -> bool,
        fill: &impl Fn(&str) -> String,
    ) {
        for order in &mut self.orders {
            if order.reference.as_deref().is_some_and(pending)
                && let Some(reference) = &mut Arc::make_mut(order).reference
            {
                *reference = fill(reference);
            }
        }
    }
}

// ---- sentences --------------------------------------------------------------------------

/// The sentences and list items of a text, each trimmed (bullets and numbering left out),
/// code blocks skipped. Verbatim slices of `text`.
pub fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_code = false;
    // A worked example quoted into the prompt (SWE-agent's demonstration) is another
    // session's transcript, not what this user asks.
    let mut in_demonstration = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_code = !in_code;
            continue;
        }
        let upper = trimmed.to_ascii_uppercase();
        if upper.starts_with("--- DEMONSTRATION") || upper.starts_with("--- END OF DEMONSTRATION") {
            in_demonstration = upper.starts_with("--- DEMONSTRATION");
            continue;
        }
        if in_code || in_demonstration || trimmed.is_empty() || looks_like_code(trimmed) {
            continue;
        }
        let item = strip_bullet(trimmed);
        let mut start = 0;
        let bytes = item.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if matches!(b, b'.' | b'!' | b'?' | b';') && i + 1 < bytes.len() && bytes[i + 1] == b' '
            {
                let next = item[i + 1..].trim_start().chars().next();
                let word_before = item[start..i]
                    .rsplit(|c: char| c.is_whitespace())
                    .next()
                    .unwrap_or("");
                let abbreviation = b == b'.'
                    && matches!(
                        word_before.to_ascii_lowercase().as_str(),
                        "e.g"
                            | "i.e"
                            | "mr"
                            | "mrs"
                            | "ms"
                            | "dr"
                            | "vs"
                            | "etc"
                            | "no"
                            | "st"
                            | "approx"
                    );
                if next.is_some_and(|c| c.is_uppercase() || c.is_ascii_digit() || c == '"')
                    && !abbreviation
                {
                    push_sentence(&item[start..=i], &mut out);
                    start = i + 1;
                }
            }
            i += 1;
        }
        push_sentence(&item[start..], &mut out);
    }
    out
}

/// A line of code or of a numbered listing (`1463: msg = 'The precision must be …'`): what a
/// file says, not what the user sets.
fn looks_like_code(line: &str) -> bool {
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && line[digits..].starts_with(':') {
        return true;
    }
    let quotes = line.matches(['\'', '"']).count();
    line.contains(" = ")
        || line.contains("==")
        || line.contains("()")
        || line.ends_with('{')
        || line.ends_with(';')
        || quotes >= 4
}

fn push_sentence<'a>(sentence: &'a str, out: &mut Vec<&'a str>) {
    let sentence = sentence.trim();
    if sentence.len() >= 8 && sentence.len() <= 500 {
        out.push(sentence);
    }
}

fn strip_bullet(line: &str) -> &str {
    let rest = line
        .strip_prefix("- ")
        .or_else(|| line.strip_prefix("* "))
        .or_else(|| line.strip_prefix("• "));
    if let Some(rest) = rest {
        return rest.trim_start();
    }
    // `1. ` / `2) `
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && digits < 3 {
        let rest = &line[digits..];
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return rest.trim_start();
        }
    }
    line
}

// ---- classification ---------------------------------------------------------------------

const GOAL_CUES: &[&str] = &[
    "open question",
    "awaiting",
    "waiting on",
    "waiting for",
    "pending decision",
    "the goal is",
    "our goal",
    "my goal",
    "the objective",
    "we are working on",
    "we're working on",
    "i'm working on",
    "i am working on",
    "the task is",
    "current task",
    "blocked on",
    "still to decide",
    "resolved:",
    "decided:",
    "decision:",
];

const RULE_CUES: &[&str] = &[
    "never",
    "always",
    "must",
    "mustn't",
    "do not",
    "don't",
    "dont",
    "shall not",
    "should never",
    "under no circumstances",
    "no matter what",
    "make sure",
    "ensure",
    "avoid",
    "forbidden",
    "not allowed",
    "prohibited",
    "only use",
    "use only",
    "is required",
    "are required",
];

const CONSTRAINT_CUES: &[&str] = &[
    "limit",
    "cap",
    "capped",
    "maximum",
    "max",
    "minimum",
    "at most",
    "at least",
    "no more than",
    "no longer than",
    "no later than",
    "deadline",
    "due",
    "budget",
    "time zone",
    "timezone",
    "utc",
    "format",
    "formatted",
    "units",
    "metric",
    "imperial",
    "currency",
    "quota",
    "within",
    "under",
];

const PREFERENCE_CUES: &[&str] = &[
    "prefer",
    "i'd rather",
    "i would rather",
    "rather than",
    "favorite",
    "favourite",
    "my preference",
];

/// A wish, which lasts only with a scope ("I'd like all replies in French").
const WISH_CUES: &[&str] = &[
    "i like",
    "i'd like",
    "i would like",
    "i want",
    "please use",
    "please write",
    "please answer",
    "please reply",
    "please keep",
    "instead of",
];

/// What makes a wish last beyond the request at hand: a time ("from now on") or a scope over
/// all later work ("in all documents"), not a quantity ("cancel all of my flights").
const SCOPE_CUES: &[&str] = &[
    "always",
    "from now on",
    "going forward",
    "in future",
    "in the future",
    "whenever",
    "by default",
    "for the rest",
    "every time",
    "each time",
    "in all",
    "for all",
    "in every",
    "for every",
    "in each",
    "all future",
];
const FACT_CUES: &[&str] = &[
    "codename",
    "code name",
    "is called",
    "are called",
    "named",
    "my name is",
    "call me",
    "id is",
    "number is",
    "account",
    "ticket",
    "order id",
    "reference is",
    "project",
    "located",
    "lives",
    "works at",
];

/// The kind of standing order `sentence` states, if it states one.
pub fn classify(sentence: &str) -> Option<OrderKind> {
    let lower = sentence.to_lowercase();
    let has = |cues: &[&str]| cues.iter().any(|cue| contains_phrase(&lower, cue));
    let values = value_count(sentence);
    let question = sentence.trim_end().ends_with('?');
    if has(GOAL_CUES) {
        return Some(OrderKind::Goal);
    }
    if question {
        // A question asks; it sets nothing (an open question is a goal, above).
        return None;
    }
    // What the speaker says about themselves ("I don't remember the ID", "I must have left
    // it", "I'd like to change my flight") is no order to the assistant: a rule is addressed
    // to it, a preference lasts (a preference verb, or a wish with a scope such as "all",
    // "always", "from now on").
    let about_self = speaks_of_self(&lower);
    if RULE_CUES.iter().any(|cue| addressed_rule(&lower, cue)) {
        return Some(OrderKind::Rule);
    }
    let copula = copula_split(&lower).is_some();
    if has(PREFERENCE_CUES)
        || (has(WISH_CUES) && has(SCOPE_CUES))
        || (lower.contains(", not ") && !copula && !about_self)
    {
        return Some(OrderKind::Preference);
    }
    if has(CONSTRAINT_CUES) && (values > 0 || has_zone(sentence) || lower.contains("format")) {
        return Some(OrderKind::Constraint);
    }
    if has_zone(sentence) {
        return Some(OrderKind::Constraint);
    }
    // A label and a number ("step 3: keep going") states nothing lasting: a fact needs a
    // verb ("the budget is $6,000") or a fact's own cue ("the ticket", "my name is").
    // A fact names its subject ("the staging host is …", "my employee ID is …"); what "it",
    // "this" or "we" is, hedged ("looks like", "seems", "likely"), is an observation.
    if !states_a_fact(&lower) {
        return None;
    }
    if values > 0 && (has_verbal_copula(&lower) || has(FACT_CUES)) {
        return Some(OrderKind::Fact);
    }
    // A name given as a value: "the on-call engineer this week is Aiko Sato".
    if names_someone(sentence) {
        return Some(OrderKind::Fact);
    }
    None
}

/// Whether a lowercased sentence could state a fact: its subject is no pronoun and it
/// hedges nothing.
fn states_a_fact(lower: &str) -> bool {
    const PRONOUNS: [&str; 14] = [
        "it", "this", "that", "there", "we", "i", "you", "they", "he", "she", "which", "what",
        "here", "these",
    ];
    const HEDGES: [&str; 12] = [
        "looks like",
        "seems",
        "likely",
        "suggests",
        "probably",
        "maybe",
        "perhaps",
        "i think",
        "i guess",
        "might",
        "appears",
        "not sure",
    ];
    let first = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .find(|w| !w.is_empty())
        .unwrap_or("");
    !PRONOUNS.contains(&first) && !HEDGES.iter().any(|h| contains_phrase(lower, h))
}

/// Whether what follows the sentence's verb is a proper name (two capitalised words, or one
/// after "is called" / "named"): people, teams, products the user names.
fn names_someone(sentence: &str) -> bool {
    // ASCII lowercase keeps byte offsets, so the split applies to the original text.
    let lower = sentence.to_ascii_lowercase();
    let Some((subject, value)) = verbal_copula_split(&lower) else {
        return false;
    };
    if subject.trim().is_empty() || subject.contains('?') {
        return false;
    }
    let value = &sentence[sentence.len() - value.len()..];
    let capitalised = value
        .split_whitespace()
        .map(|w| w.trim_end_matches(['.', ',', '!', ';']))
        .take_while(|w| {
            let mut chars = w.chars();
            chars.next().is_some_and(char::is_uppercase)
                && chars.all(|c| c.is_alphabetic() || c == '-' || c == '\'')
        })
        .count();
    capitalised >= 2
}

/// Whether a lowercased sentence is about its speaker ("I don't remember", "I must have",
/// "I'm sure there must be"): first person before any order cue, and no "you" addressed.
fn speaks_of_self(lower: &str) -> bool {
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '\u{2019}'))
        .filter(|w| !w.is_empty())
        .collect();
    // Fillers an order may open with: "please", "also", "and", "ok", "so".
    const FILLERS: [&str; 8] = ["please", "also", "and", "ok", "okay", "so", "yes", "sure"];
    let first = words.iter().find(|w| !FILLERS.contains(w));
    let first_person = first.is_some_and(|w| is_first_person(w) || matches!(*w, "me" | "my"));
    first_person && !words.contains(&"you")
}

/// Whether a lowercased word is the speaker as subject ("I", "I'm", "I'll", curly apostrophe
/// or none).
fn is_first_person(word: &str) -> bool {
    matches!(
        word.replace('\u{2019}', "'").as_str(),
        "i" | "i'm" | "i've" | "i'd" | "i'll" | "im" | "ive"
    )
}

/// Whether a rule cue occurs in `lower` as an order: opening the sentence or a clause, or
/// with a subject the order binds ("you must", "the tests must pass", "we never deploy on
/// Fridays"), not what the speaker says of themselves ("I don't remember", "I'll make sure")
/// or supposes ("there must be", "it must have been").
fn addressed_rule(lower: &str, cue: &str) -> bool {
    const ADVERBS: [&str; 9] = [
        "really",
        "also",
        "just",
        "still",
        "absolutely",
        "please",
        "then",
        "so",
        "definitely",
    ];
    if cue == "never" && lower.contains("never mind") {
        return false;
    }
    lower.match_indices(cue).any(|(at, _)| {
        // The clause the cue is in: a first-person subject there, with no "you" addressed,
        // speaks of the speaker ("I just want to make sure I save money").
        let clause_start = lower[..at].rfind([',', ';', ':']).map_or(0, |i| i + 1);
        let clause: Vec<&str> = lower[clause_start..at]
            .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '\u{2019}'))
            .filter(|w| !w.is_empty())
            .collect();
        let first_person = clause.iter().any(|w| is_first_person(w));
        if first_person && !clause.contains(&"you") {
            return false;
        }
        let before = lower[..at].chars().next_back();
        let after = &lower[at + cue.len()..];
        if before.is_some_and(char::is_alphanumeric)
            || after.chars().next().is_some_and(char::is_alphanumeric)
        {
            return false;
        }
        if after.trim_start().starts_with("have ") || after.starts_with("'ve") {
            return false;
        }
        let previous = lower[..at]
            .split(|c: char| c.is_whitespace())
            .rev()
            .filter(|w| !w.is_empty())
            .map(|w| {
                w.trim_matches(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '\u{2019}'))
            })
            .find(|w| !ADVERBS.contains(w));
        match previous {
            None | Some("") => true,
            Some(word) => {
                !is_first_person(word)
                    && !matches!(
                        word,
                        "there" | "it" | "that" | "which" | "this" | "he" | "she" | "they" | "who"
                    )
            }
        }
    })
}

/// Whether `phrase` occurs in `lower` at word boundaries.
fn contains_phrase(lower: &str, phrase: &str) -> bool {
    lower.match_indices(phrase).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + phrase.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric)
            && (phrase.ends_with(':') || !after.is_some_and(char::is_alphanumeric))
    })
}

/// An IANA time zone (`America/Los_Angeles`) or a UTC/GMT offset named in the text.
fn has_zone(sentence: &str) -> bool {
    sentence
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '(' | ')' | '.'))
        .any(|w| {
            let w = w.trim_end_matches([';', ':', '!', '?']);
            if let Some((area, city)) = w.split_once('/') {
                const AREAS: [&str; 8] = [
                    "Africa",
                    "America",
                    "Asia",
                    "Atlantic",
                    "Australia",
                    "Europe",
                    "Indian",
                    "Pacific",
                ];
                return AREAS.contains(&area)
                    && city.chars().next().is_some_and(char::is_uppercase);
            }
            w == "UTC" || w == "GMT" || w.starts_with("UTC+") || w.starts_with("UTC-")
        })
}

/// How many value-like tokens the sentence holds: numbers, amounts, identifiers
/// (`EMP-20931`, `staging-7.internal`), all-capital words, quoted or backticked strings.
fn value_count(sentence: &str) -> usize {
    let quoted = sentence.matches(['"', '`', '\u{201c}']).count() / 2;
    quoted
        + sentence
            .split(|c: char| c.is_whitespace() || matches!(c, ',' | '(' | ')'))
            .filter(|w| is_value(w))
            .count()
}

fn is_value(word: &str) -> bool {
    let w = word.trim_matches(|c: char| matches!(c, '.' | ';' | ':' | '!' | '?' | '\'' | '"'));
    if w.is_empty() {
        return false;
    }
    if w.bytes().any(|b| b.is_ascii_digit()) {
        return true;
    }
    if w.starts_with(['$', '€', '£']) {
        return true;
    }
    let letters = w.chars().filter(|c| c.is_alphabetic()).count();
    let upper = w.chars().filter(|c| c.is_uppercase()).count();
    // BLUEJAY, ACME (not "I" or "A").
    if letters >= 2 && upper == letters {
        return true;
    }
    // snake_case, kebab-case with a capital, paths, hosts, e-mails.
    (w.contains('_') || w.contains('@') || (w.contains('/') && w.len() > 2))
        || (w.contains('.')
            && !w.ends_with('.')
            && w.split('.').all(|p| !p.is_empty())
            && letters > 3)
}

/// The verbs that state a value: "the budget cap is now $6,500", "the deadline moves to …".
const VERBAL_COPULAS: [&str; 10] = [
    " is now ",
    " are now ",
    " is ",
    " are ",
    " was ",
    " will be ",
    " becomes ",
    " moves to ",
    " changed to ",
    " set to ",
];

/// Whether a lowercased sentence states something with a verb (not only a `label:`).
fn has_verbal_copula(lower: &str) -> bool {
    VERBAL_COPULAS.iter().any(|verb| lower.contains(verb))
}

/// `(subject, value)` around the first copula of a lowercased sentence (a verb, or a label's
/// colon).
fn copula_split(lower: &str) -> Option<(&str, &str)> {
    split_at_first(lower, VERBAL_COPULAS.iter().chain(&[": "]))
}

/// `(subject, value)` around the first verb of a lowercased sentence.
fn verbal_copula_split(lower: &str) -> Option<(&str, &str)> {
    split_at_first(lower, VERBAL_COPULAS.iter())
}

fn split_at_first<'a, 'c>(
    lower: &'a str,
    copulas: impl Iterator<Item = &'c &'static str>,
) -> Option<(&'a str, &'a str)> {
    copulas
        .filter_map(|c| lower.find(c).map(|at| (at, c.len())))
        .min_by_key(|(at, _)| *at)
        .map(|(at, len)| (&lower[..at], &lower[at + len..]))
}

#[cfg(test)]
mod tests;
