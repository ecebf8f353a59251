//! [`ExtractiveSummarizer`]: a summary assembled by rules, without a model.
//!
//! It is the embedded default: it needs no network, no key and no model, it is deterministic
//! (the same request always gives the same summary, byte for byte), and it is fast enough to
//! run at every compaction of a replay of thousands of steps: one linear pass over the
//! messages, no regular expressions, no allocation per character.
//!
//! It fills the default schema's fields from what the messages plainly say:
//!
//! - **task overview**: the first user requests (later ones briefly), starting from the first
//!   real one: harness boilerplate (command caveats, `<system-reminder>` blocks, Codex
//!   `<environment_context>`) is left out;
//! - **current state**: which tools were called how often, the last calls with short
//!   arguments, the last things the assistant said;
//! - **important discoveries**: from tool results, error lines first, then lines with paths,
//!   identifiers and numbers (JSON results are flattened to `key: value` lines first);
//! - **next steps**: the user's latest request and the plan lines of the last assistant
//!   message;
//! - **context to preserve**: instructions in the compacted part, the user's stated
//!   constraints ("must", "never", "do not", …), the compaction focus, and every archive
//!   reference (`sessions/<id>/tool_result-<call>.txt`, `data/<sha256>.<ext>`, …) so compacted
//!   content stays reachable.
//!
//! Each field is merged with the previous summary's (previous lines first, duplicates
//! dropped) and bounded by a share of `max_output_tokens` measured cheaply in characters;
//! what does not fit is dropped from the middle (task overview keeps its oldest lines, current
//! state and next steps their newest), except the middle lines that carry most (directives,
//! then errors, paths and identifiers) within a share of the room, each gap counted. The first field starts
//! with a label saying that this is an extractive summary made without a model. A custom schema
//! field gets the facts its name, title or description asks for (`goal`: the user's requests,
//! `blockers`: error lines, `decisions`, `files`, `constraints`, …); one no keyword names keeps
//! the previous summary's text.
//!
//! ```
//! use ctxkeeper_core::model::{Message, Part};
//! use ctxkeeper_core::summary::{SummaryReason, SummaryRequest, SummarySchema};
//! use ctxkeeper_llm::ExtractiveSummarizer;
//!
//! let request = SummaryRequest {
//!     messages: vec![
//!         Message::user("Find why invoice totals are off by one cent. Never touch the database."),
//!         Message::assistant_with_calls("", vec![Part::tool_call("c1", "grep", r#"{"pattern":"round("}"#)]),
//!         Message::tool_result("c1", "src/invoice.rs:42: let total = round(sum, 2);\nerror: 3 tests failed"),
//!         Message::assistant("The rounding happens before the tax. Next I will move it after."),
//!     ],
//!     previous: None,
//!     schema: SummarySchema::default(),
//!     prompt: None,
//!     focus: None,
//!     reason: SummaryReason::Proactive,
//!     max_output_tokens: 600,
//!     must_keep: Vec::new(),
//!     instructions: None,
//!     request_in_context: None,
//! };
//! let summary = ExtractiveSummarizer::new().summarize_now(&request);
//! assert_eq!(summary.produced_by, "extractive");
//! assert!(summary.get("task_overview").contains("without a language model"));
//! assert!(summary.get("important_discoveries").contains("src/invoice.rs:42"));
//! assert!(summary.get("context_to_preserve").contains("Never touch the database"));
//! ```

use std::collections::HashSet;

use async_trait::async_trait;
use ctxkeeper_core::artifacts::{FileAction, tool_call_events};
use ctxkeeper_core::capsule::strip_boilerplate;
use ctxkeeper_core::engine::CLEARED_PREFIX;
use ctxkeeper_core::model::{Message, Part, Role};
use ctxkeeper_core::salience::{is_error_line, line_rank, score_line};
use ctxkeeper_core::summary::{Summary, SummaryField, SummaryRequest};
use serde_json::Value;

use crate::error::LlmError;
use crate::fallback::char_budget;
use crate::summarizer::Summarizer;

mod fit;
use fit::*;

mod references;
use references::*;

/// `produced_by` of extractive summaries.
pub const EXTRACTIVE_PRODUCER: &str = "extractive";

/// The first line of every extractive summary.
pub const EXTRACTIVE_LABEL: &str = "[Extractive summary: assembled from the messages by rules, without a language model; details may be missing, and the full messages are archived.]";

/// The deterministic, model-free summarizer. See the [module documentation](self).
#[derive(Debug, Clone, Default)]
pub struct ExtractiveSummarizer {
    _private: (),
}

/// How a field is cut when it exceeds its share: the fraction of its budget spent on its
/// oldest lines (the rest goes to the newest).
#[derive(Debug, Clone, Copy)]
struct FieldRule {
    name: &'static str,
    /// Share of the whole character budget, in percent.
    share: usize,
    head_fraction: f32,
}

const RULES: [FieldRule; 5] = [
    FieldRule {
        name: "task_overview",
        share: 20,
        head_fraction: 1.0,
    },
    FieldRule {
        name: "current_state",
        share: 25,
        head_fraction: 0.0,
    },
    FieldRule {
        name: "important_discoveries",
        share: 30,
        head_fraction: 0.35,
    },
    FieldRule {
        name: "next_steps",
        share: 10,
        head_fraction: 0.0,
    },
    FieldRule {
        name: "context_to_preserve",
        share: 15,
        head_fraction: 0.5,
    },
];

/// Shares of the fields of the seed presets' schemas (ReMe: overall goal, key knowledge,
/// recent actions; HarnessAgent: session intent, summary, artifacts, next steps).
const SEED_RULES: [FieldRule; 6] = [
    FieldRule {
        name: "overall_goal",
        share: 25,
        head_fraction: 1.0,
    },
    FieldRule {
        name: "key_knowledge",
        share: 45,
        head_fraction: 0.35,
    },
    FieldRule {
        name: "recent_actions",
        share: 30,
        head_fraction: 0.0,
    },
    FieldRule {
        name: "session_intent",
        share: 20,
        head_fraction: 1.0,
    },
    FieldRule {
        name: "summary",
        share: 30,
        head_fraction: 0.0,
    },
    FieldRule {
        name: "artifacts",
        share: 30,
        head_fraction: 0.5,
    },
];

/// The rule of a field the extractive summarizer knows.
fn rule_for(name: &str) -> Option<&'static FieldRule> {
    RULES
        .iter()
        .chain(SEED_RULES.iter())
        .find(|r| r.name == name)
}

/// Opens the lines naming an archive reference.
const ARCHIVED_LABEL: &str = "Archived: ";

/// Longest line kept from any message.
const LINE_CHARS: usize = 200;
/// Lines taken from one tool result.
const LINES_PER_RESULT: usize = 3;
/// JSON tool results larger than this are scanned as text instead of parsed.
const MAX_JSON_RESULT: usize = 64 * 1024;

impl ExtractiveSummarizer {
    /// The summarizer.
    pub fn new() -> ExtractiveSummarizer {
        ExtractiveSummarizer::default()
    }

    /// Summarizes synchronously (the work is pure; [`Summarizer::summarize`] calls this).
    pub fn summarize_now(&self, request: &SummaryRequest) -> Summary {
        let facts = Facts::gather(request);
        let schema = &request.schema;
        let budget = char_budget(request.max_output_tokens);
        let known_share: usize = schema
            .fields
            .iter()
            .filter_map(|f| rule_for(&f.name).map(|r| r.share))
            .sum();
        let unknown = schema
            .fields
            .iter()
            .filter(|f| rule_for(&f.name).is_none())
            .count();
        // Unknown fields share what the known ones leave, at least a tenth each.
        let unknown_share = 100usize
            .saturating_sub(known_share)
            .checked_div(unknown)
            .map_or(0, |share| share.max(10));
        let total_share = (known_share + unknown_share * unknown).max(1);

        let mut summary = Summary::empty(schema, EXTRACTIVE_PRODUCER);
        for (position, field) in schema.fields.iter().enumerate() {
            let rule = rule_for(&field.name);
            let share = rule.map_or(unknown_share, |r| r.share);
            let head_fraction = rule.map_or(0.5, |r| r.head_fraction);
            let mut field_budget = budget * share / total_share;
            let label = position == 0;
            if label {
                field_budget = field_budget.saturating_sub(EXTRACTIVE_LABEL.len() + 1);
            }
            let previous = request
                .previous
                .as_ref()
                .map(|p| p.get(&field.name))
                .unwrap_or("");
            let new_lines = match rule {
                Some(_) => facts.lines_for(&field.name),
                None => facts.lines_for_custom(field),
            };
            let merged = merge(previous, &new_lines);
            let mut text = fit_lines(&merged, field_budget, head_fraction);
            if label {
                text = if text.is_empty() {
                    EXTRACTIVE_LABEL.to_string()
                } else {
                    format!("{EXTRACTIVE_LABEL}\n{text}")
                };
            }
            summary.set(&field.name, text);
        }
        summary
    }
}

#[async_trait]
impl Summarizer for ExtractiveSummarizer {
    async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
        Ok(self.summarize_now(request))
    }

    fn name(&self) -> &str {
        EXTRACTIVE_PRODUCER
    }

    /// Decisions, files touched, commands, errors and the user's stated constraints, one per
    /// line, within about `max_tokens` (the oldest facts kept first, an omission counted).
    async fn extract_facts(
        &self,
        messages: &[Message],
        max_tokens: u32,
    ) -> Result<Option<String>, LlmError> {
        let lines = Facts::durable(messages);
        if lines.is_empty() {
            return Ok(None);
        }
        let text = fit_lines(&lines, char_budget(max_tokens), 0.7);
        Ok((!text.trim().is_empty()).then_some(text))
    }
}

/// The lines extracted for each default field, oldest first.
#[derive(Debug, Default)]
struct Facts {
    task: Vec<String>,
    state: Vec<String>,
    discoveries: Vec<String>,
    next: Vec<String>,
    preserve: Vec<String>,
    /// Files the tool calls touched, one line each with the strongest action.
    files: Vec<String>,
    /// Shell commands run, oldest first.
    commands: Vec<String>,
    /// Error lines of tool results.
    errors: Vec<String>,
    /// What the assistant decided or concluded.
    decisions: Vec<String>,
    /// The user's stated constraints.
    constraints: Vec<String>,
    /// Archive references, as "Archived: …" lines.
    references: Vec<String>,
}

impl Facts {
    /// The lines of a field: the default schema's five, and the fields of the seed presets'
    /// schemas (ReMe's state snapshot, HarnessAgent's sections) built from the same facts.
    fn lines_for(&self, field: &str) -> Vec<String> {
        let join = |parts: &[&[String]]| parts.concat();
        match field {
            "task_overview" | "overall_goal" | "session_intent" => self.task.clone(),
            "current_state" => self.state.clone(),
            "important_discoveries" => self.discoveries.clone(),
            "next_steps" => self.next.clone(),
            "context_to_preserve" => self.preserve.clone(),
            // Facts, constraints and findings to remember.
            "key_knowledge" => join(&[
                &self.constraints,
                &self.decisions,
                &self.errors,
                &self.files,
                &self.discoveries,
                &self.references,
            ]),
            // What was just done and its results.
            "recent_actions" => join(&[&self.commands, &self.state, &self.next]),
            // What happened so far, decisions and results.
            "summary" => join(&[&self.decisions, &self.state, &self.errors]),
            // Files, commands, identifiers and other artifacts.
            "artifacts" => join(&[&self.files, &self.commands, &self.references]),
            _ => Vec::new(),
        }
    }

    /// The lines of a field of an operator's own schema (`[policy.summary]` fields such as
    /// `goal` or `blockers`): the facts its name, title and description ask for, by the first
    /// keyword they hold; nothing for a field no keyword names (it keeps the previous summary's
    /// text).
    fn lines_for_custom(&self, field: &SummaryField) -> Vec<String> {
        let asked = format!("{} {} {}", field.name, field.title, field.description)
            .to_lowercase()
            .replace(['_', '-'], " ");
        // A word's start is enough (`file` names `files_touched`, `rule` names `house_rules`).
        let names = |words: &[&str]| words.iter().any(|w| contains_word(&asked, w));
        let join = |parts: &[&[String]]| parts.concat();
        if names(&[
            "blocker", "blockers", "error", "errors", "problem", "problems", "issue", "issues",
            "failure", "failures", "bug", "bugs", "risk", "risks",
        ]) {
            self.errors.clone()
        } else if names(&[
            "goal",
            "goals",
            "intent",
            "task",
            "objective",
            "objectives",
            "request",
            "requests",
            "purpose",
            "ask",
        ]) {
            self.task.clone()
        } else if names(&[
            "next",
            "todo",
            "todos",
            "remaining",
            "plan",
            "pending",
            "follow",
        ]) {
            self.next.clone()
        } else if names(&[
            "decision",
            "decisions",
            "decided",
            "conclusion",
            "conclusions",
        ]) {
            self.decisions.clone()
        } else if names(&[
            "file",
            "files",
            "artifact",
            "artifacts",
            "path",
            "paths",
            "changes",
        ]) {
            join(&[&self.files, &self.references])
        } else if names(&["command", "commands", "tool", "tools", "action", "actions"]) {
            join(&[&self.commands, &self.state])
        } else if names(&[
            "constraint",
            "constraints",
            "rule",
            "rules",
            "preference",
            "preferences",
            "requirement",
            "requirements",
            "policy",
        ]) {
            join(&[&self.constraints, &self.preserve])
        } else if names(&["state", "status", "progress", "done", "history", "summary"]) {
            self.state.clone()
        } else if names(&[
            "knowledge",
            "discoveries",
            "finding",
            "findings",
            "fact",
            "facts",
            "learned",
            "insight",
            "insights",
            "details",
        ]) {
            self.discoveries.clone()
        } else if names(&["reference", "references", "archive", "archived", "sources"]) {
            self.references.clone()
        } else {
            Vec::new()
        }
    }

    fn gather(request: &SummaryRequest) -> Facts {
        let mut facts = Facts::default();
        let mut asks = 0;
        let mut latest_ask: Option<String> = None;
        // Tool names of the calls of the latest assistant message: results answer the closest
        // preceding assistant message (ids repeat across a session).
        let mut call_names: Vec<(String, String)> = Vec::new();
        let mut tool_counts: Vec<(String, usize)> = Vec::new();
        let mut recent_calls: Vec<String> = Vec::new();
        let mut said: Vec<String> = Vec::new();
        let mut last_assistant_text: Option<String> = None;
        let mut error_results = 0;
        let mut references = References::default();
        let mut commands: Vec<String> = Vec::new();
        let mut files: Vec<(String, FileAction)> = Vec::new();

        for message in &request.messages {
            match message.role {
                Role::System | Role::Developer => {
                    let text = message.text();
                    references.scan(&text);
                    if let Some(line) = first_line(&text) {
                        facts
                            .preserve
                            .push(format!("Instruction: {}", cut(line, LINE_CHARS)));
                    }
                }
                Role::User if message.starts_turn() => {
                    let raw = user_text(message);
                    references.scan(&raw);
                    // Harness boilerplate (command caveats, system reminders, environment
                    // context) is not what the user asked: the task starts at the first
                    // real request.
                    let text = strip_boilerplate(&raw);
                    let flat = collapse(&text);
                    if !flat.is_empty() {
                        asks += 1;
                        if asks <= 2 {
                            facts.task.push(format!("User: {}", cut(&flat, 600)));
                        } else {
                            facts
                                .task
                                .push(format!("Later request: {}", cut(&flat, LINE_CHARS)));
                        }
                        latest_ask = Some(flat);
                    }
                    for line in text.lines() {
                        if is_constraint(line) {
                            let line = format!("User constraint: {}", cut(line.trim(), LINE_CHARS));
                            facts.constraints.push(line.clone());
                            facts.preserve.push(line);
                        }
                    }
                    scan_results(
                        message,
                        &call_names,
                        &mut facts.discoveries,
                        &mut error_results,
                        &mut references,
                    );
                }
                Role::Assistant => {
                    call_names.clear();
                    let mut text = String::new();
                    for part in &message.parts {
                        match part {
                            Part::Text { text: t, .. } => {
                                if !text.is_empty() {
                                    text.push('\n');
                                }
                                text.push_str(t);
                            }
                            Part::ToolCall {
                                id,
                                name,
                                arguments,
                                ..
                            } => {
                                call_names.push((id.clone(), name.clone()));
                                match tool_counts.iter_mut().find(|(n, _)| n == name) {
                                    Some((_, count)) => *count += 1,
                                    None => tool_counts.push((name.clone(), 1)),
                                }
                                recent_calls.push(format!("{name}({})", short_args(arguments)));
                                if recent_calls.len() > 16 {
                                    recent_calls.drain(..8);
                                }
                                if let Some(command) = shell_command(arguments) {
                                    commands.push(format!(
                                        "Ran: {}",
                                        cut(&collapse(&command), LINE_CHARS)
                                    ));
                                }
                                for event in tool_call_events(name, arguments).files {
                                    note_file(&mut files, event.path, event.action);
                                }
                            }
                            _ => {}
                        }
                    }
                    references.scan(&text);
                    for line in text.lines().filter(|l| is_decision(l)) {
                        facts
                            .decisions
                            .push(format!("Decision: {}", cut(line.trim(), LINE_CHARS)));
                    }
                    let flat = collapse(&text);
                    if !flat.is_empty() {
                        said.push(cut(&flat, 300));
                        if said.len() > 8 {
                            said.drain(..4);
                        }
                        last_assistant_text = Some(text);
                    }
                }
                Role::Tool | Role::User => {
                    scan_results(
                        message,
                        &call_names,
                        &mut facts.discoveries,
                        &mut error_results,
                        &mut references,
                    );
                }
            }
        }

        // Current state: tools used, the last calls, the last words of the assistant.
        if !tool_counts.is_empty() {
            let total: usize = tool_counts.iter().map(|(_, c)| c).sum();
            let list: Vec<String> = tool_counts
                .iter()
                .map(|(n, c)| {
                    if *c > 1 {
                        format!("{n} ×{c}")
                    } else {
                        n.clone()
                    }
                })
                .collect();
            facts
                .state
                .push(format!("Tools called ({total} calls): {}", list.join(", ")));
        }
        if error_results > 0 {
            facts
                .state
                .push(format!("{error_results} tool results reported errors."));
        }
        for call in recent_calls.iter().rev().take(5).rev() {
            facts.state.push(format!("Called {call}"));
        }
        for text in said.iter().rev().take(2).rev() {
            facts.state.push(format!("Assistant: {text}"));
        }

        // Next steps: the latest request, then the plan lines of the last reply.
        if let Some(ask) = &latest_ask {
            facts
                .next
                .push(format!("Latest user request: {}", cut(ask, 300)));
        }
        if let Some(text) = &last_assistant_text {
            let plan: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| is_plan_line(l))
                .take(5)
                .collect();
            if plan.is_empty() {
                facts.next.push(format!(
                    "Last assistant message: {}",
                    cut(&collapse(text), 300)
                ));
            } else {
                facts
                    .next
                    .extend(plan.into_iter().map(|l| cut(l, LINE_CHARS)));
            }
        }

        if let Some(focus) = request
            .focus
            .as_deref()
            .map(str::trim)
            .filter(|f| !f.is_empty())
        {
            facts
                .preserve
                .insert(0, format!("Compaction focus: {}", cut(focus, LINE_CHARS)));
        }
        // Errors: the error lines among the results' telling lines.
        facts.errors = facts
            .discoveries
            .iter()
            .filter(|l| is_error_line(&l.to_ascii_lowercase()))
            .cloned()
            .collect();
        facts.files = files
            .into_iter()
            .map(|(path, action)| format!("File {}: {path}", action.as_str()))
            .collect();
        // The newest commands say most about the current state.
        let skip = commands.len().saturating_sub(12);
        facts.commands = commands.split_off(skip);
        facts.decisions = dedup(std::mem::take(&mut facts.decisions));
        facts.references = references.into_lines();
        facts.preserve.extend(facts.references.iter().cloned());
        // No request among the summarized messages: the goal is the one the user's request
        // still in the conversation states, named rather than left as a bare label.
        if facts.task.is_empty()
            && let Some(request) = request.request_in_context.as_deref()
        {
            let flat = collapse(&strip_boilerplate(request));
            if !flat.is_empty() {
                facts.task.push(format!(
                    "User (the request is still in the conversation): {}",
                    cut(&flat, 600)
                ));
            }
        }
        facts
    }

    /// The durable facts of `messages` for long-term memory: decisions, files touched,
    /// commands, errors and the user's stated constraints (see
    /// [`Summarizer::extract_facts`]); empty when the messages state none.
    fn durable(messages: &[Message]) -> Vec<String> {
        let request = SummaryRequest::new(messages.to_vec(), 0);
        let facts = Facts::gather(&request);
        let mut out = Vec::new();
        if let Some(task) = facts.task.first() {
            out.push(format!(
                "Task: {}",
                cut(task.trim_start_matches("User: "), LINE_CHARS)
            ));
        }
        out.extend(facts.constraints);
        out.extend(facts.decisions);
        out.extend(
            facts
                .files
                .into_iter()
                .filter(|f| !f.starts_with("File mentioned")),
        );
        out.extend(facts.errors.into_iter().map(|e| format!("Error: {e}")));
        let skip = facts.commands.len().saturating_sub(5);
        out.extend(facts.commands.into_iter().skip(skip));
        out.extend(facts.references);
        dedup(out)
    }
}

/// Text of a user message without its tool results.
fn user_text(message: &Message) -> String {
    let mut text = String::new();
    for part in &message.parts {
        if let Part::Text { text: t, .. } = part {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(t);
        }
    }
    text
}

/// Pulls the telling lines out of every tool result in `message`.
fn scan_results(
    message: &Message,
    call_names: &[(String, String)],
    out: &mut Vec<String>,
    error_results: &mut usize,
    references: &mut References,
) {
    for part in &message.parts {
        let Part::ToolResult {
            call_id,
            content,
            is_error,
            ..
        } = part
        else {
            continue;
        };
        let name = call_names
            .iter()
            .find(|(id, _)| id == call_id)
            .map_or("tool", |(_, n)| n.as_str());
        let mut text = String::new();
        for inner in content {
            if let Part::Text { text: t, .. } = inner {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(t);
            }
        }
        if *is_error {
            *error_results += 1;
        }
        references.scan(&text);
        for line in telling_lines(&text, *is_error) {
            out.push(format!("[{name}] {line}"));
        }
    }
}

/// The few most telling lines of a tool result: errors first, then lines with paths or
/// identifiers, then lines with numbers; ties keep their order.
fn telling_lines(text: &str, is_error: bool) -> Vec<String> {
    let trimmed = text.trim_start();
    if trimmed.starts_with(CLEARED_PREFIX) {
        // A placeholder of a cleared result tells nothing; its reference is kept under
        // "context to preserve".
        return Vec::new();
    }
    let mut candidates: Vec<(u8, usize, String)> = Vec::new();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && text.len() <= MAX_JSON_RESULT
        && let Ok(value) = serde_json::from_str::<Value>(trimmed)
    {
        let mut leaves = Vec::new();
        flatten(&value, "", &mut leaves, 0);
        for (order, line) in leaves.into_iter().enumerate() {
            let score = score_line(&line);
            if score > 0 {
                candidates.push((score, order, line));
            }
        }
    }
    if candidates.is_empty() {
        for (order, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.len() < 3 || !line.bytes().any(|b| b.is_ascii_alphanumeric()) {
                continue;
            }
            let mut score = score_line(line);
            if is_error && score == 0 {
                score = 1;
            }
            if score > 0 {
                candidates.push((score, order, cut(line, LINE_CHARS)));
            }
        }
    }
    // Best scores first, then original order; keep the few best, shown in original order.
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    candidates.truncate(LINES_PER_RESULT);
    candidates.sort_by_key(|c| c.1);
    candidates.into_iter().map(|(_, _, line)| line).collect()
}

/// `key: value` lines for the scalar leaves of a JSON value (at most 64, depth 6).
fn flatten(value: &Value, key: &str, out: &mut Vec<String>, depth: usize) {
    if out.len() >= 64 || depth > 6 {
        return;
    }
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                flatten(v, k, out, depth + 1);
            }
        }
        Value::Array(items) => {
            for item in items.iter().take(16) {
                flatten(item, key, out, depth + 1);
            }
        }
        Value::String(s) => out.push(cut(&format!("{key}: {s}"), LINE_CHARS)),
        Value::Number(n) => out.push(format!("{key}: {n}")),
        Value::Bool(b) => out.push(format!("{key}: {b}")),
        Value::Null => {}
    }
}

/// A user line that states a constraint or preference.
fn is_constraint(line: &str) -> bool {
    const MARKERS: [&str; 12] = [
        "must",
        "never",
        "always",
        "don't",
        "do not",
        "make sure",
        "only ",
        "prefer",
        "without",
        "should not",
        "shouldn't",
        "important",
    ];
    has_marker(line, 8, &MARKERS, contains_word)
}

/// A line of an assistant message that states a decision or a conclusion.
fn is_decision(line: &str) -> bool {
    const MARKERS: [&str; 14] = [
        "decided",
        "decision",
        "i chose",
        "we chose",
        "going with",
        "instead of",
        "root cause",
        "the cause",
        "the fix is",
        "the problem is",
        "the issue is",
        "conclusion",
        "will use",
        "switch to",
    ];
    has_marker(line, 12, &MARKERS, |lower, marker| lower.contains(marker))
}

/// Whether `line` (trimmed, at least `min_len` bytes) holds one of `markers` in lowercase,
/// as `found(lower, marker)` looks for it.
fn has_marker(
    line: &str,
    min_len: usize,
    markers: &[&str],
    found: impl Fn(&str, &str) -> bool,
) -> bool {
    let line = line.trim();
    if line.len() < min_len {
        return false;
    }
    let lower = line.to_ascii_lowercase();
    markers.iter().any(|m| found(&lower, m))
}

/// The command of a shell tool call: a `command`/`cmd`/`script` argument (a string, or a list
/// of words as Codex sends).
fn shell_command(arguments: &str) -> Option<String> {
    if !(arguments.contains("\"command\"")
        || arguments.contains("\"cmd\"")
        || arguments.contains("\"script\""))
    {
        return None;
    }
    let value: Value = serde_json::from_str(arguments).ok()?;
    let found = ["command", "cmd", "script"]
        .iter()
        .find_map(|key| value.get(*key))?;
    match found {
        Value::String(text) if !text.trim().is_empty() => Some(text.clone()),
        Value::Array(words) => {
            let words: Vec<&str> = words.iter().filter_map(Value::as_str).collect();
            // `["bash", "-lc", "script"]`: the script is what was run.
            match words.as_slice() {
                [shell, flag, script] if shell.ends_with("sh") && flag.starts_with('-') => {
                    Some((*script).to_string())
                }
                [] => None,
                _ => Some(words.join(" ")),
            }
        }
        _ => None,
    }
}

/// Records that a call touched `path`; a file keeps its strongest action (a change over a read
/// over a mention), in first-touched order.
fn note_file(files: &mut Vec<(String, FileAction)>, path: String, action: FileAction) {
    let rank = |a: FileAction| {
        if a.changes() {
            3
        } else if matches!(a, FileAction::Mentioned) {
            1
        } else {
            2
        }
    };
    if let Some((_, known)) = files.iter_mut().find(|(p, _)| *p == path) {
        if rank(action) > rank(*known) {
            *known = action;
        }
    } else if files.len() < 64 {
        files.push((path, action));
    }
}

/// The lines without repeats, first occurrence kept.
fn dedup(lines: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    lines
        .into_iter()
        .filter(|l| seen.insert(l.clone()))
        .collect()
}

/// A line of an assistant message that announces what comes next.
fn is_plan_line(line: &str) -> bool {
    const STARTS: [&str; 9] = [
        "next",
        "then",
        "i will",
        "i'll",
        "let me",
        "todo",
        "- [ ]",
        "plan",
        "remaining",
    ];
    if line.is_empty() {
        return false;
    }
    let bytes = line.as_bytes();
    let numbered =
        bytes.len() > 2 && bytes[0].is_ascii_digit() && (bytes[1] == b'.' || bytes[1] == b')');
    numbered || STARTS.iter().any(|s| starts_with_ci(line, s))
}

#[cfg(test)]
mod tests;
