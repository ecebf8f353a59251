//! Structured summaries: the schema, the request a summarizer answers, and the result.
//!
//! A summary replaces a compacted prefix of the conversation. It is structured (named fields,
//! by default the five of [`SummarySchema::default`]) so that it can be merged incrementally
//! with the previous summary, validated, and rendered into the context with a template.
//!
//! The summarizers themselves (a deterministic extractive one, OpenAI-compatible and
//! Anthropic ones) live in `ctxkeeper-llm`; this module holds only the data they exchange with
//! the engine.
//!
//! ```
//! use ctxkeeper_core::summary::{Summary, SummarySchema};
//!
//! let schema = SummarySchema::default();
//! let mut summary = Summary::empty(&schema, "extractive");
//! summary.set("task_overview", "Fix the rounding bug in invoices.");
//! let text = summary.render(&schema);
//! assert!(text.contains("Task overview"));
//! assert!(text.contains("Fix the rounding bug"));
//! ```

use aho_corasick::AhoCorasick;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::artifacts::is_path_word;
use crate::json_kind;
use crate::model::{Message, Part, Role};
use crate::untrusted::one_line;

/// One field of a structured summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryField {
    /// The JSON property name (`task_overview`).
    pub name: String,
    /// The heading shown when rendering (`Task overview`).
    pub title: String,
    /// What the summarizer should put there.
    pub description: String,
}

impl SummaryField {
    /// A field named `name`, headed `title`, that the summarizer fills as `description` says.
    pub fn new(name: &str, title: &str, description: &str) -> SummaryField {
        SummaryField {
            name: name.to_string(),
            title: title.to_string(),
            description: description.to_string(),
        }
    }
}

/// The fields a summary must fill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummarySchema {
    pub fields: Vec<SummaryField>,
}

impl Default for SummarySchema {
    /// The five fields of AgentScope's structured summary.
    fn default() -> SummarySchema {
        let field = SummaryField::new;
        SummarySchema {
            fields: vec![
                field(
                    "task_overview",
                    "Task overview",
                    "The user's goal and the constraints and instructions they stated, in their words where possible.",
                ),
                field(
                    "current_state",
                    "Current state",
                    "What has been done so far and where the work stands now: files changed, decisions taken, results obtained.",
                ),
                field(
                    "important_discoveries",
                    "Important discoveries",
                    "Facts learned from tools and the environment that later steps depend on: errors and their causes, values, paths, identifiers.",
                ),
                field(
                    "next_steps",
                    "Next steps",
                    "What remains to be done, in order.",
                ),
                field(
                    "context_to_preserve",
                    "Context to preserve",
                    "Anything else that must not be forgotten: user preferences, promises made, references to archived content.",
                ),
            ],
        }
    }
}

impl SummarySchema {
    /// The JSON Schema of a summary object, for structured-output requests.
    pub fn json_schema(&self) -> Value {
        let mut properties = Map::new();
        for field in &self.fields {
            properties.insert(
                field.name.clone(),
                json!({ "type": "string", "description": field.description }),
            );
        }
        let required: Vec<&str> = self.fields.iter().map(|f| f.name.as_str()).collect();
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
    }
}

/// Why a summary is requested (reported in events; summarizers may adapt their prompt).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryReason {
    /// The context crossed its trigger before a model call.
    Proactive,
    /// A reactive micro compaction of the oldest rounds.
    ReactiveMicro,
    /// A reactive full compaction.
    ReactiveFull,
    /// The provider answered that the context is too long.
    Overflow,
    /// The host or the agent asked for it.
    Manual,
}

/// What a summarizer is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRequest {
    /// The messages being compacted, oldest first.
    pub messages: Vec<Message>,
    /// The summary of what was compacted before, to be merged into the new one.
    pub previous: Option<Summary>,
    pub schema: SummarySchema,
    /// The instruction prompt (the seed's `compression_prompt`); `None` uses the default.
    pub prompt: Option<String>,
    /// Extra focus given by the agent or host for this compaction.
    pub focus: Option<String>,
    pub reason: SummaryReason,
    /// Upper bound on the summary's length, in tokens.
    pub max_output_tokens: u32,
    /// Statements the summary must carry verbatim: the standing orders (rules, constraints,
    /// facts, preferences, the goal) the user set in the summarized messages. A model
    /// summarizer is told so; [`check_summary`] restores any it left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub must_keep: Vec<String>,
    /// The operator's own instructions (`[policy.summary] instructions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The user's latest request when it stays in the context after this compaction (so it is
    /// not among `messages`): the summary's goal field names it instead of staying empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_in_context: Option<String>,
}

impl SummaryRequest {
    /// A proactive request to summarize `messages` in the default schema, with nothing
    /// summarized before and no prompt, focus, orders or instructions; the other fields are
    /// set with struct update syntax.
    pub fn new(messages: Vec<Message>, max_output_tokens: u32) -> SummaryRequest {
        SummaryRequest {
            messages,
            previous: None,
            schema: SummarySchema::default(),
            prompt: None,
            focus: None,
            reason: SummaryReason::Proactive,
            max_output_tokens,
            must_keep: Vec::new(),
            instructions: None,
            request_in_context: None,
        }
    }

    /// What a model summarizer is told beyond its prompt, in one text: the operator's
    /// instructions, the compaction's focus, and the standing orders it must keep word for
    /// word. `None` when there is none of them.
    pub fn guidance(&self) -> Option<String> {
        let mut parts: Vec<String> = Vec::new();
        if let Some(instructions) = self.instructions.as_deref().map(str::trim)
            && !instructions.is_empty()
        {
            parts.push(format!(
                "The operator's instructions for every summary: {instructions}"
            ));
        }
        if let Some(focus) = self.focus.as_deref().map(str::trim)
            && !focus.is_empty()
        {
            parts.push(focus.to_string());
        }
        if let Some(request) = self.request_in_context.as_deref().map(str::trim)
            && !request.is_empty()
        {
            parts.push(format!(
                "The user's current request stays in the conversation after this summary; state the session's goal with it in mind: {}",
                one_line(request, 1_000)
            ));
        }
        if !self.must_keep.is_empty() {
            let mut orders = String::from(
                "The user set these standing orders in the messages above; keep each one, word for word, in the summary:",
            );
            for statement in &self.must_keep {
                orders.push_str("\n- ");
                orders.push_str(&one_line(statement, 1_000));
            }
            parts.push(orders);
        }
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }
}

/// A structured summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Field name → text, in schema order.
    pub fields: Map<String, Value>,
    /// Who produced it (`extractive`, `openai:gpt-4o-mini`, `fallback-truncation`, …).
    pub produced_by: String,
    /// True when the summarizer failed and this is a lossy fallback.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
}

impl Summary {
    /// A summary with every field of `schema` empty.
    pub fn empty(schema: &SummarySchema, produced_by: &str) -> Summary {
        let fields = schema
            .fields
            .iter()
            .map(|f| (f.name.clone(), Value::String(String::new())))
            .collect();
        Summary {
            fields,
            produced_by: produced_by.to_string(),
            degraded: false,
        }
    }

    /// Sets a field's text.
    pub fn set(&mut self, field: &str, text: impl Into<String>) {
        self.fields
            .insert(field.to_string(), Value::String(text.into()));
    }

    /// A field's text ("" when absent or not a string).
    pub fn get(&self, field: &str) -> &str {
        self.fields.get(field).and_then(Value::as_str).unwrap_or("")
    }

    /// Checks a summarizer's JSON answer against the schema: an object whose schema fields are
    /// strings. Missing fields are reported, not tolerated, so the caller can retry; unknown
    /// fields are ignored.
    pub fn from_json(
        value: &Value,
        schema: &SummarySchema,
        produced_by: &str,
    ) -> Result<Summary, String> {
        let Some(object) = value.as_object() else {
            return Err(format!(
                "summary must be a JSON object, got {}",
                json_kind(value)
            ));
        };
        let mut summary = Summary::empty(schema, produced_by);
        let mut missing = Vec::new();
        for field in &schema.fields {
            match object.get(&field.name) {
                Some(Value::String(text)) => summary.set(&field.name, text.clone()),
                // Lists of strings are a common near-miss; accept them joined by lines.
                Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
                    let lines: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
                    summary.set(&field.name, lines.join("\n"));
                }
                Some(other) => {
                    return Err(format!(
                        "field {:?} must be a string, got {}",
                        field.name,
                        json_kind(other)
                    ));
                }
                None => missing.push(field.name.as_str()),
            }
        }
        if missing.is_empty() {
            Ok(summary)
        } else {
            Err(format!(
                "summary is missing field(s): {}",
                missing.join(", ")
            ))
        }
    }

    /// Renders the summary as the text placed in the context: one titled section per non-empty
    /// field, in schema order.
    pub fn render(&self, schema: &SummarySchema) -> String {
        let mut out = String::new();
        for field in &schema.fields {
            let text = self.get(&field.name).trim();
            if text.is_empty() {
                continue;
            }
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str("## ");
            out.push_str(&field.title);
            out.push('\n');
            // A field quotes what the messages said (tool output included) or what a model
            // wrote: its lines never open a section of their own.
            out.push_str(&crate::untrusted::neutralise(text));
        }
        out
    }
}

/// What checking a summary against its source found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryCheck {
    /// Lines quoting the user with words no user message of the source holds: dropped.
    pub dropped: Vec<String>,
    /// Lines naming a path or identifier the source never mentions: kept, marked
    /// `[unverified]`.
    pub unverified: Vec<String>,
    /// Standing orders (`SummaryRequest::must_keep`) the summary left out: added back
    /// verbatim.
    pub restored: Vec<String>,
}

impl SummaryCheck {
    /// Whether every line passed.
    pub fn is_clean(&self) -> bool {
        self.dropped.is_empty() && self.unverified.is_empty() && self.restored.is_empty()
    }
}

/// How a standing order the summary left out is written back into it.
pub const RESTORED_ORDER_PREFIX: &str = "Standing order of the user (verbatim): ";

/// Adds back, verbatim, every statement of `must_keep` the summary does not carry (case and
/// whitespace aside), into its field for constraints or context if it has one, else its
/// last field. Returns what was added.
fn restore_must_keep(summary: &mut Summary, must_keep: &[String]) -> Vec<String> {
    if must_keep.is_empty() || summary.fields.is_empty() {
        return Vec::new();
    }
    let mut carried = String::new();
    for value in summary.fields.values() {
        if let Some(text) = value.as_str() {
            push_folded(&mut carried, text);
            carried.push('\n');
        }
    }
    let mut missing = Vec::new();
    for statement in must_keep {
        let mut folded = String::new();
        push_folded(&mut folded, statement);
        if !folded.trim().is_empty() && !carried.contains(folded.trim()) {
            missing.push(statement.clone());
        }
    }
    if missing.is_empty() {
        return missing;
    }
    let names: Vec<String> = summary.fields.keys().cloned().collect();
    let target = names
        .iter()
        .find(|n| {
            let n = n.to_lowercase();
            n.contains("constraint") || n.contains("preserve") || n.contains("context")
        })
        .or(names.last())
        .cloned()
        .unwrap_or_default();
    let mut text = summary.get(&target).to_string();
    for statement in &missing {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("- ");
        text.push_str(RESTORED_ORDER_PREFIX);
        text.push_str(&one_line(statement, 1_000));
    }
    summary.set(&target, text);
    missing
}

/// The mark put in front of a line whose paths or identifiers were not found in the source.
pub const UNVERIFIED_MARK: &str = "[unverified] ";

/// Checks `summary` against what it summarized (`request`: its messages and the previous
/// summary, which was checked when it was made) and fixes it in place:
///
/// - a line that quotes the user ("User: …", "the user asked: \"…\"", "User constraint: …")
///   must quote words a user message holds (whitespace and case aside), or it is dropped: a
///   summary must never hand the agent an instruction the user did not give. The user's
///   messages are those of the source and `session_users`, the texts of every other user
///   message of the session (the task the user gave first usually stays outside the
///   summarized span, and a summary rightly quotes it). A quote that opens on one line and
///   closes on a later one is checked as a whole, and kept or dropped as a whole;
/// - every path (`src/app.py`), backquoted term (`` `parse_args` ``) and identifier
///   (`snake_case`, `CamelCase`, `a::b`) a line names must occur somewhere in the source, or
///   the line is marked [`UNVERIFIED_MARK`].
///
/// One pass over the source for all the terms (Aho-Corasick), so checking costs about as much
/// as reading the summarized messages once.
pub fn check_summary(
    summary: &mut Summary,
    request: &SummaryRequest,
    also_known: &[String],
    session_users: &[&str],
) -> SummaryCheck {
    let mut check = SummaryCheck::default();
    let previous = request.previous.as_ref();
    let field_names: Vec<String> = summary.fields.keys().cloned().collect();
    let mut lines: Vec<(String, Vec<String>)> = Vec::new();
    for name in &field_names {
        for line in summary.get(name).lines() {
            let mut terms = Vec::new();
            named_terms(line, &mut terms);
            lines.push((line.to_string(), terms));
        }
    }
    // The user's words, normalised, only when a line quotes the user.
    let mut user_words = String::new();
    if lines
        .iter()
        .any(|(line, _)| quoted_user_words(line).is_some())
    {
        for message in &request.messages {
            if message.role == Role::User {
                for part in &message.parts {
                    if let Part::Text { text, .. } = part {
                        push_folded(&mut user_words, text);
                        user_words.push('\n');
                    }
                }
            }
        }
        if let Some(previous) = previous {
            for value in previous.fields.values() {
                if let Some(text) = value.as_str() {
                    push_folded(&mut user_words, text);
                    user_words.push('\n');
                }
            }
        }
        if let Some(focus) = &request.focus {
            push_folded(&mut user_words, focus);
            user_words.push('\n');
        }
        for text in session_users {
            push_folded(&mut user_words, text);
            user_words.push('\n');
        }
    }
    // Every term a line names, except those the caller knows (the archive references the
    // compaction itself wrote), looked up in one pass over the source.
    let mut needles: Vec<&str> = lines
        .iter()
        .flat_map(|(_, terms)| terms.iter().map(String::as_str))
        .filter(|term| !also_known.iter().any(|known| known == term))
        .collect();
    needles.sort_unstable();
    needles.dedup();
    let mut found = vec![false; needles.len()];
    if !needles.is_empty()
        && let Ok(automaton) = AhoCorasick::new(&needles)
    {
        let mut visit = |text: &str| {
            for hit in automaton.find_overlapping_iter(text) {
                found[hit.pattern().as_usize()] = true;
            }
        };
        for message in &request.messages {
            for part in &message.parts {
                part.visit_strings(&mut visit);
            }
        }
        if let Some(previous) = previous {
            for value in previous.fields.values() {
                if let Some(text) = value.as_str() {
                    visit(text);
                }
            }
        }
        if let Some(focus) = &request.focus {
            visit(focus);
        }
    }
    let known = |term: &str| {
        also_known.iter().any(|k| k == term)
            || needles.binary_search(&term).is_ok_and(|index| found[index])
    };

    // The lines in field order, each with the terms found above.
    let mut lines = lines.iter();
    for name in &field_names {
        let count = summary.get(name).lines().count();
        let field: Vec<&(String, Vec<String>)> = lines.by_ref().take(count).collect();
        let mut kept: Vec<String> = Vec::with_capacity(count);
        let mut changed = false;
        let mut at = 0;
        // Lines before this one continue a quote already checked.
        let mut continued = 0;
        while at < field.len() {
            let (line, terms) = field[at];
            at += 1;
            if at > continued
                && let Some(quote) = quoted_user_words(line)
            {
                // A quote left open runs on to the line that closes it.
                let mut whole = quote.text;
                let mut end = at;
                if let Some(close) = quote.open {
                    let closing = field[at..]
                        .iter()
                        .take(MAX_QUOTE_LINES)
                        .position(|(l, _)| l.contains(close));
                    if let Some(offset) = closing {
                        for (next, _) in &field[at..=at + offset] {
                            whole.push(' ');
                            whole.push_str(next.split(close).next().unwrap_or(""));
                        }
                        end = at + offset + 1;
                    }
                }
                let whole = elided(&whole);
                if whole.chars().count() >= MIN_QUOTE_CHARS && !user_words.contains(&fold(whole)) {
                    check
                        .dropped
                        .extend(field[at - 1..end].iter().map(|(l, _)| l.clone()));
                    changed = true;
                    at = end;
                    continue;
                }
                continued = end;
            }
            if !line.starts_with(UNVERIFIED_MARK) && terms.iter().any(|t| !known(t)) {
                check.unverified.push(line.clone());
                kept.push(format!("{UNVERIFIED_MARK}{line}"));
                changed = true;
            } else {
                kept.push(line.clone());
            }
        }
        if changed {
            summary.set(name, kept.join("\n"));
        }
    }
    check.restored = restore_must_keep(summary, &request.must_keep);
    check
}

/// Lowercase with runs of whitespace as one space, for matching quotes.
fn fold(text: &str) -> String {
    let mut out = String::new();
    push_folded(&mut out, text);
    out.trim().to_string()
}

fn push_folded(out: &mut String, text: &str) {
    let mut space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            space = true;
            continue;
        }
        if space && !out.is_empty() && !out.ends_with(' ') {
            out.push(' ');
        }
        space = false;
        out.extend(c.to_lowercase());
    }
}

/// A quote running over more lines than this is not followed past its first line.
const MAX_QUOTE_LINES: usize = 40;
/// A quote shorter than this proves nothing and is not checked.
const MIN_QUOTE_CHARS: usize = 12;

/// What a summary line quotes of the user.
struct Quote {
    /// The quoted words on this line.
    text: String,
    /// The closing quotation mark, when the quote does not close on this line.
    open: Option<char>,
}

/// The part of a quote before an elision ("…" or "..."), trimmed.
fn elided(quote: &str) -> &str {
    let end = [quote.find('…'), quote.find("...")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(quote.len());
    quote[..end].trim()
}

/// The closing mark of an opening quotation mark.
fn closing_mark(c: char) -> Option<char> {
    match c {
        '"' => Some('"'),
        '“' => Some('”'),
        _ => None,
    }
}

/// The user's words a summary line quotes, if it quotes any: the text after the extractive
/// labels ("User: …", "User constraint: …", "Later request: …", "Latest user request: …"),
/// without the quotation marks around it, or the quoted part of "the user
/// said/asked/wrote/requested … \"…\"". An elision ("…", "...") ends the quote; a quote
/// shorter than 12 characters proves nothing and is not checked.
fn quoted_user_words(line: &str) -> Option<Quote> {
    let quote = quote_on_line(line)?;
    (quote.open.is_some() || elided(&quote.text).chars().count() >= MIN_QUOTE_CHARS)
        .then_some(quote)
}

fn quote_on_line(line: &str) -> Option<Quote> {
    const LABELS: [&str; 4] = [
        "User: ",
        "User constraint: ",
        "Later request: ",
        "Latest user request: ",
    ];
    let bare = line.trim_start().trim_start_matches(['-', '*', ' ']);
    if let Some(rest) = LABELS.iter().find_map(|l| bare.strip_prefix(l)) {
        let rest = rest.trim();
        let Some(close) = rest.chars().next().and_then(closing_mark) else {
            return Some(Quote {
                text: rest.to_string(),
                open: None,
            });
        };
        let inner = &rest[rest.chars().next().map_or(0, char::len_utf8)..];
        return Some(quote_until(inner, close));
    }
    {
        let lower = bare.to_ascii_lowercase();
        const VERBS: [&str; 7] = [
            "user said",
            "user asked",
            "user wrote",
            "user requested",
            "user instructed",
            "user stated",
            "user's words",
        ];
        let at = VERBS
            .iter()
            .find_map(|v| lower.find(v).map(|i| i + v.len()))?;
        let rest = &bare[at..];
        let (open, close) = rest
            .char_indices()
            .find_map(|(i, c)| closing_mark(c).map(|close| (i + c.len_utf8(), close)))?;
        Some(quote_until(&rest[open..], close))
    }
}

/// The quote that starts `inner`: up to its closing mark, or open to the following lines.
fn quote_until(inner: &str, close: char) -> Quote {
    match inner.find(close) {
        Some(end) => Quote {
            text: inner[..end].to_string(),
            open: None,
        },
        None => Quote {
            text: inner.to_string(),
            open: Some(close),
        },
    }
}

/// The paths, backquoted terms and identifiers a line names.
fn named_terms(line: &str, out: &mut Vec<String>) {
    // `…` spans first.
    let mut rest = line;
    while let Some(open) = rest.find('`') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('`') else { break };
        let term = after[..close].trim();
        if term.len() >= 3 && term.len() <= 200 && !term.contains('\n') {
            out.push(term.to_string());
        }
        rest = &after[close + 1..];
    }
    for word in line.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                ',' | ';' | '(' | ')' | '[' | ']' | '"' | '`' | '“' | '”' | '='
            )
    }) {
        let word = word.trim_matches(|c: char| matches!(c, '.' | ':' | '\'' | '!' | '?' | '*'));
        if word.len() < 4 || word.len() > 200 || word.contains('…') || word.contains("://") {
            continue;
        }
        if looks_like_identifier(word) || (is_path_word(word) && word.contains('/')) {
            out.push(word.to_string());
        }
    }
}

/// `snake_case_name`, `CamelCaseName`, `mixedCase`, `a::b`: names code uses, which a summary
/// cannot know unless the source showed them.
fn looks_like_identifier(word: &str) -> bool {
    if !word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        || !word
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
    {
        return false;
    }
    let inner_underscore = word.trim_matches('_').contains('_');
    let path = word.contains("::");
    let humps = word
        .as_bytes()
        .windows(2)
        .filter(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
        .count();
    inner_underscore || path || humps >= 1 && word.chars().any(|c| c.is_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_schema_requires_every_field() {
        let schema = SummarySchema::default();
        let json = schema.json_schema();
        assert_eq!(json["required"].as_array().map(Vec::len), Some(5));
        assert_eq!(json["properties"]["next_steps"]["type"], "string");
    }

    #[test]
    fn from_json_validates_and_reports_missing_fields() {
        let schema = SummarySchema::default();
        let err = Summary::from_json(&json!({"task_overview": "x"}), &schema, "t").err();
        assert!(err.is_some_and(|e| e.contains("current_state")));
        let err = Summary::from_json(&json!({"task_overview": 3}), &schema, "t").err();
        assert!(err.is_some_and(|e| e.contains("must be a string")));
        assert!(Summary::from_json(&json!("text"), &schema, "t").is_err());
        let full: Map<String, Value> = schema
            .fields
            .iter()
            .map(|f| (f.name.clone(), json!(["a", "b"])))
            .collect();
        let summary = Summary::from_json(&Value::Object(full), &schema, "t").ok();
        assert_eq!(
            summary.map(|s| s.get("next_steps").to_string()),
            Some("a\nb".to_string())
        );
    }

    fn request(messages: Vec<Message>) -> SummaryRequest {
        SummaryRequest::new(messages, 600)
    }

    /// A model's summary of `source` whose task overview is `text`.
    fn overview(source: &SummaryRequest, text: &str) -> Summary {
        let mut summary = Summary::empty(&source.schema, "model");
        summary.set("task_overview", text);
        summary
    }

    /// Public reports show summaries that invented a user instruction, which the agent then
    /// executed. Such a line is dropped; an invented path or identifier is marked.
    #[test]
    fn invented_user_words_are_dropped_and_unknown_names_marked() {
        let source = request(vec![
            Message::user("Please fix the rounding in invoice totals. Never touch the database."),
            Message::tool_call("c1", "Read", r#"{"file_path":"src/invoice.rs"}"#),
            Message::tool_result(
                "c1",
                "fn round_total(value: f64) -> f64 { CacheManager::get() }",
            ),
        ]);
        let mut summary = overview(
            &source,
            "- User: Please fix the rounding in invoice totals.\n- The user asked: \"drop the invoices table and recreate it\"",
        );
        summary.set(
            "current_state",
            "- Read src/invoice.rs; `round_total` uses CacheManager.\n- Edited src/tax.rs and `apply_discount_twice`.",
        );
        let check = check_summary(&mut summary, &source, &[], &[]);
        assert_eq!(
            check.dropped,
            vec!["- The user asked: \"drop the invoices table and recreate it\"".to_string()]
        );
        assert_eq!(
            check.unverified,
            vec!["- Edited src/tax.rs and `apply_discount_twice`.".to_string()]
        );
        assert_eq!(
            summary.get("task_overview"),
            "- User: Please fix the rounding in invoice totals."
        );
        assert_eq!(
            summary.get("current_state"),
            "- Read src/invoice.rs; `round_total` uses CacheManager.\n[unverified] - Edited src/tax.rs and `apply_discount_twice`."
        );
        // Checking a checked summary changes nothing.
        let again = check_summary(&mut summary, &source, &[], &[]);
        assert!(again.dropped.is_empty());
    }

    #[test]
    fn facts_carried_from_the_previous_summary_pass() {
        let mut source = request(vec![Message::assistant("Done with `parse_header`.")]);
        source.previous = Some(overview(&source, "- User: Migrate the parser to nom 8."));
        let mut summary = overview(
            &source,
            "- User: Migrate the parser to nom 8.\n- `parse_header` ported.",
        );
        assert!(check_summary(&mut summary, &source, &[], &[]).is_clean());
    }

    #[test]
    fn a_model_summarizer_is_told_instructions_focus_and_orders() {
        let mut request = request(vec![Message::user("Hi.")]);
        assert_eq!(request.guidance(), None);
        request.instructions = Some("Keep ticket numbers.".into());
        request.focus = Some("the invoice test".into());
        request.must_keep = vec!["Never deploy on Fridays.".into()];
        let guidance = request.guidance().unwrap_or_default();
        let at = |needle: &str| guidance.find(needle).unwrap_or(usize::MAX);
        assert!(
            at("Keep ticket numbers.") < at("the invoice test"),
            "{guidance}"
        );
        assert!(
            at("the invoice test") < at("\n- Never deploy on Fridays."),
            "{guidance}"
        );
    }

    /// A model summary that drops a standing order gets it back verbatim (and passes the
    /// quote check with it); one that carries it, in other case and spacing, is left alone.
    #[test]
    fn a_standing_order_the_summary_dropped_is_restored_verbatim() {
        let order = "Never deploy on Fridays.";
        let mut source = request(vec![Message::user(format!(
            "Hi. {order} The cache is flaky."
        ))]);
        source.must_keep = vec![order.to_string()];
        let mut summary = overview(&source, "- Investigating the flaky cache.");
        let check = check_summary(&mut summary, &source, &[], &[]);
        assert_eq!(check.restored, [order]);
        let all: String = summary
            .fields
            .values()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            all.contains(&format!("{RESTORED_ORDER_PREFIX}{order}")),
            "{all}"
        );
        // Checked again (the next compaction reads it as the previous summary): nothing to add.
        assert!(check_summary(&mut summary, &source, &[], &[]).is_clean());

        let mut kept = overview(&source, "- Rule:  never deploy on   FRIDAYS.");
        assert!(
            check_summary(&mut kept, &source, &[], &[])
                .restored
                .is_empty()
        );
    }

    #[test]
    fn quotes_are_read_against_every_user_message_of_the_session() {
        // The task stays outside the summarized span: only tool rounds are summarized.
        let source = request(vec![
            Message::assistant("Reading the ledger."),
            Message::tool_result("c1", "ledger ok"),
        ]);
        let task = "Fix the rounding bug in invoice totals.\nKeep the public API unchanged.";
        let mut summary = overview(
            &source,
            "- User: \"Fix the rounding bug in invoice totals.\"\n- The user asked: \"Fix the rounding bug in invoice totals.\n  Keep the public API unchanged.\"\n- Progress so far.",
        );
        let check = check_summary(&mut summary, &source, &[], &[task]);
        assert!(check.is_clean(), "{check:?}");
        // Without the session's user messages the same quotes are dropped (both lines of the
        // multi-line one), which is what happened to every model-written summary before.
        let check = check_summary(&mut summary, &source, &[], &[]);
        assert_eq!(check.dropped.len(), 3, "{check:?}");
        assert_eq!(summary.get("task_overview"), "- Progress so far.");
    }

    #[test]
    fn a_multi_line_quote_is_checked_as_a_whole() {
        let source = request(vec![Message::tool_result("c1", "ok")]);
        let task = "Migrate the parser to nom 8.\nThen delete the old lexer.";
        // Each line alone is the start or the end of the user's words; together they add an
        // instruction the user never gave.
        let mut summary = overview(
            &source,
            "- The user said: \"Migrate the parser to nom 8.\nThen delete the old lexer and the tests.\"\n- Parser half done.",
        );
        let check = check_summary(&mut summary, &source, &[], &[task]);
        assert_eq!(
            check.dropped,
            vec![
                "- The user said: \"Migrate the parser to nom 8.".to_string(),
                "Then delete the old lexer and the tests.\"".to_string()
            ]
        );
        assert_eq!(summary.get("task_overview"), "- Parser half done.");
        // The true quote over two lines, elided at the end, passes.
        summary.set(
            "task_overview",
            "- The user said: \"Migrate the parser to nom 8.\nThen delete the old...\"",
        );
        assert!(check_summary(&mut summary, &source, &[], &[task]).is_clean());
    }

    #[test]
    fn render_skips_empty_fields_and_keeps_schema_order() {
        let schema = SummarySchema::default();
        let mut summary = Summary::empty(&schema, "t");
        summary.set("next_steps", "ship it");
        summary.set("task_overview", "build it");
        let text = summary.render(&schema);
        assert_eq!(text, "## Task overview\nbuild it\n\n## Next steps\nship it");
    }
}
