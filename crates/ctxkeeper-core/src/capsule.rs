//! The session capsule: what the model must still know after any number of compactions.
//!
//! Summaries forget. What users of every agent report losing after a compaction is always the
//! same short list: what the user actually said, which files the agent touched, the plan, and
//! the error it was fighting. The capsule keeps exactly those, outside any summary, in one
//! pinned message placed right after the instructions:
//!
//! - **the user's own words**: every user-authored text that left the context, verbatim,
//!   oldest first. Harness boilerplate (Claude Code's local-command caveats, `<command-…>`
//!   tags and `<system-reminder>` blocks, Codex `<environment_context>` repeats) is
//!   recognised and kept out; it stays archived with its messages, and the newest
//!   environment context is kept. Past a budget (by default 15 % of the window) the oldest are
//!   shortened to a head and the reference of their archive; none is ever dropped silently;
//! - **the artifact trail**: every file the tool calls read, listed, searched, created,
//!   modified or deleted, with the last thing done to it ([`crate::artifacts`]), and the
//!   working directory;
//! - **the live plan**: the latest `TodoWrite` / `update_plan` / task-list call, verbatim;
//! - **the open problem**: the last failing command or test, with the head and tail of its
//!   error, until the same command succeeds;
//! - **the working set**: the lines of the agent's own earlier calls and notes naming what it
//!   kept using, most used first, then the other names still in use
//!   ([`crate::working_set`]), in whatever room the context has left;
//!
//! followed (in the summary message) by the narrative: the structured summary.
//!
//! The capsule is maintained incrementally: at each compaction it reads only the messages
//! added since the previous one ([`Capsule::absorb`]), before any stage rewrites them, and it
//! is re-rendered only when what it shows changed, so the cached prefix survives between
//! compactions. It is plain data in the session state and survives restarts.
//!
//! ```
//! use ctxkeeper_core::capsule::{Capsule, CapsuleConfig};
//! use ctxkeeper_core::engine::Entry;
//! use ctxkeeper_core::model::{Message, Part};
//!
//! let mut entries = vec![
//!     Entry::new(Message::user("Add a --verbose flag to the CLI, and never change the config format.")),
//!     Entry::new(Message::assistant_with_calls("", vec![Part::tool_call("c1", "Edit", r#"{"file_path":"src/cli.rs","old_string":"a","new_string":"b"}"#)])),
//!     Entry::new(Message::tool_result("c1", "ok")),
//! ];
//! for (i, entry) in entries.iter_mut().enumerate() { entry.meta.log_index = Some(i as u64); }
//! let mut capsule = Capsule::default();
//! capsule.absorb(&entries);
//! capsule.note_archived(0, "sessions/s/context.jsonl#L1-L3");
//! // Nothing of it is in the context any more: the capsule shows all of it.
//! let text = capsule.render(&CapsuleConfig::default(), 32_000, &[]);
//! assert!(text.contains("Add a --verbose flag to the CLI, and never change the config format."));
//! assert!(text.contains("modified: src/cli.rs"));
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::artifacts::{FileAction, tool_call_events};
use crate::engine::Entry;
use crate::fidelity::PLAN_TOOLS;
use crate::model::{Message, Part, Role};
use crate::orders::{self, OrderKind, StandingOrder, StandingOrders};
use crate::salience::salient_strings;
use crate::untrusted::{is_heading_like, one_line, push_fenced};
use crate::working_set::WorkingSet;

mod boilerplate;
mod render;

use boilerplate::*;
pub use boilerplate::{is_boilerplate, strip_boilerplate};
pub(crate) use render::merge_line_ranges;
use render::*;

/// How the capsule's message opens.
pub const CAPSULE_TITLE: &str = "[Session capsule:";

/// The heading of the user's words: the one section only user-role text fills.
pub const USER_WORDS_HEADING: &str = "## The user's own words (earlier messages, oldest first)";

/// The heading of the user's words that left the context since the capsule's first message
/// was written (in its second message).
pub const USER_WORDS_SINCE_HEADING: &str =
    "## The user's newer words (since the part above, oldest first)";

/// The heading of the standing orders set since the capsule's first message was written.
pub const ORDERS_SINCE_HEADING: &str = "## Standing orders set since the part above (still in force, verbatim; they replace earlier statements on the same subject)";

/// How the capsule's first message goes on after its title.
const TITLE_REST: &str = " what this session must not forget, kept across compactions. The full earlier messages are archived at the references given.]";

/// The heading of the standing orders, the capsule's first section.
pub const ORDERS_HEADING: &str = "## Standing orders (set earlier in this session, still in force, verbatim; a later statement on a subject replaces an earlier one)";

/// Share of the window the system messages sent during a session may take in the capsule.
const SYSTEM_NOTES_RATIO: f64 = 0.05;

/// Distinct system messages sent during a session that the capsule keeps (the oldest go first;
/// they stay archived with their messages).
const MAX_SYSTEM_NOTES: usize = 64;

/// A stable hash of a text (FNV-1a, the same in every build: it is stored in the state).
fn text_hash(text: &str) -> u64 {
    orders::fnv1a(text.as_bytes())
}

/// How the capsule's sections open: a line of the user's own text that reads like one is
/// escaped, so that even the user's words cannot open a second section of the capsule.
const SECTION_PREFIXES: [&str; 10] = [
    "## Standing orders",
    "## The user's newer words",
    "## Instructions sent during the session",
    "## The user's own words",
    "## Environment",
    "## Files (last action)",
    "## Plan (",
    "## Open problem",
    "## Working set",
    CAPSULE_TITLE,
];

/// `text` with every line that would open a capsule section escaped (a backslash before it);
/// borrowed when there is none. For user-role text, kept verbatim otherwise.
fn guard_sections(text: &str) -> std::borrow::Cow<'_, str> {
    // Any number of `#`, then a section's title (or the capsule's own title).
    let opens = |line: &str| {
        let title = line.trim_start().trim_start_matches('#').trim_start();
        is_heading_like(line)
            && SECTION_PREFIXES
                .iter()
                .any(|p| title.starts_with(p.trim_start_matches('#').trim_start()))
    };
    if !text.lines().any(opens) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        if opens(line) {
            out.push('\\');
        }
        out.push_str(line);
    }
    std::borrow::Cow::Owned(out)
}

/// How the capsule is built; `[capsule]` in a policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CapsuleConfig {
    /// Share of the window the user's own words may take; past it the oldest are shortened.
    pub instruction_budget_ratio: f64,
    /// Characters kept of a shortened instruction.
    pub head_chars: usize,
    /// At most this many files are listed (the most recently touched); the rest are counted.
    pub max_files: usize,
    /// Characters of a failing command's error kept from its start and from its end.
    pub error_head_chars: usize,
    pub error_tail_chars: usize,
    /// A plan longer than this is cut in the middle.
    pub max_plan_chars: usize,
    /// Whether the capsule shows the standing orders (rules, constraints, facts, preferences
    /// and the goal state the user set), first, outside the user's words' budget.
    pub standing_orders: bool,
    /// Share of the window the standing orders may take that the user's words no longer show
    /// (their message shortened or counted); past it the oldest are counted with their
    /// references.
    pub orders_budget_ratio: f64,
    /// Share of the window the working set may take: the lines of the agent's own earlier
    /// calls and notes that name what it is still using ([`crate::working_set`]); 0 turns it
    /// off.
    pub working_set_budget_ratio: f64,
    /// Whether the capsule's lasting sections (standing orders, the user's words, system
    /// notes, environment) stay in a first message that later compactions leave as it was,
    /// writing what came since into a second one: the provider's prompt cache keeps reading
    /// the first at a tenth of the price instead of billing it anew at every compaction.
    pub lasting_part: bool,
}

impl Default for CapsuleConfig {
    fn default() -> CapsuleConfig {
        CapsuleConfig {
            // Past this the oldest words shorten to a head and their reference; the standing
            // orders they carry keep their own section, and past their own budget may take
            // all of this room (down to the newest message's head) before one is left out:
            // that is what lets a tiny window (the canary suite's 832 tokens) keep them at 0.10.
            instruction_budget_ratio: 0.10,
            head_chars: 300,
            max_files: 400,
            error_head_chars: 500,
            error_tail_chars: 700,
            max_plan_chars: 4_000,
            standing_orders: true,
            orders_budget_ratio: 0.40,
            // The names the agent keeps using are what its next action needs from older
            // history; 0.055 of the window keeps 0.85 of them on the Codex rollout at 32k
            // (0.70 at 0.02), and the lasting part pays for most of it (bench/RESULTS.md,
            // "The capsule's defaults").
            working_set_budget_ratio: 0.055,
            lasting_part: true,
        }
    }
}

impl CapsuleConfig {
    /// The characters the user's words may take.
    pub fn words_budget_chars(&self, window: u64) -> usize {
        (self.instruction_budget_ratio * window as f64 * CHARS_PER_TOKEN) as usize
    }

    /// The characters the standing orders the user's words no longer show may take.
    pub fn orders_budget_chars(&self, window: u64) -> usize {
        (self.orders_budget_ratio * window as f64 * CHARS_PER_TOKEN) as usize
    }

    /// The characters the working set may take.
    pub fn working_set_budget_chars(&self, window: u64) -> usize {
        (self.working_set_budget_ratio * window as f64 * CHARS_PER_TOKEN) as usize
    }

    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.instruction_budget_ratio > 0.0 && self.instruction_budget_ratio < 1.0) {
            return Err(format!(
                "capsule.instruction_budget_ratio must be in (0, 1), got {}",
                self.instruction_budget_ratio
            ));
        }
        if !(self.orders_budget_ratio > 0.0 && self.orders_budget_ratio < 1.0) {
            return Err(format!(
                "capsule.orders_budget_ratio must be in (0, 1), got {}",
                self.orders_budget_ratio
            ));
        }
        if !(self.working_set_budget_ratio >= 0.0 && self.working_set_budget_ratio < 1.0) {
            return Err(format!(
                "capsule.working_set_budget_ratio must be in [0, 1), got {}",
                self.working_set_budget_ratio
            ));
        }
        if self.head_chars < 20 {
            return Err("capsule.head_chars must be at least 20".into());
        }
        Ok(())
    }
}

/// The user's messages kept at most one by one in the capsule's data; past it the oldest
/// archived ones are folded into [`FoldedWords`].
pub const MAX_WORDS: usize = 1_024;

/// The user's oldest messages, folded into a count and their archive references.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldedWords {
    pub count: usize,
    /// Merged line ranges per archive file (`…/context.jsonl#L1-L900`), and other references.
    pub references: Vec<String>,
}

impl FoldedWords {
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// One text the user wrote, as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instruction {
    pub text: String,
    /// Position of its message in the session log.
    pub log_index: u64,
    /// Where its message was archived when it left the context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// A file and what was done to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub path: String,
    /// The last action that changed the file, or failing that the last one at all.
    pub action: FileAction,
    /// When it was last touched (log index of the call), for ordering and the file cap.
    pub touched: u64,
}

/// The latest plan call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRecord {
    pub tool: String,
    pub arguments: String,
    pub log_index: u64,
}

/// The last failing command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The call as `tool(arguments)`, or the shell command.
    pub command: String,
    /// Head and tail of its output.
    pub error: String,
    pub log_index: u64,
    /// The call's tool name and arguments as written, to recognise the same call succeeding.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    call: String,
}

/// A call whose result has not been read yet: its id, and its tool name and arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct PendingCall {
    id: String,
    name: String,
    arguments: String,
}

impl PendingCall {
    /// The key that recognises the same call again (name and arguments as written).
    fn key(&self) -> String {
        format!("{}\n{}", self.name, self.arguments)
    }
}

/// The capsule's data. See the [module documentation](self).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Capsule {
    /// Shared, not copied, between the copies of the context a plan makes: a long session's
    /// words are the bulk of the capsule.
    pub instructions: Vec<Arc<Instruction>>,
    /// The newest environment context block the harness sent (Codex `<environment_context>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    pub files: Vec<FileRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<Problem>,
    /// Harness messages kept out of the user's words (they stay archived with their span).
    pub boilerplate: usize,
    /// Log index of the last message read; `None` before the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub absorbed_through: Option<u64>,
    /// The calls of the last assistant message read, whose results may come in the next pass.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pending: Vec<PendingCall>,
    /// The file an editor without paths (SWE-agent `edit`) works on.
    #[serde(skip_serializing_if = "Option::is_none")]
    open_file: Option<String>,
    /// What the user (or a system or developer message) set for the rest of the session.
    #[serde(skip_serializing_if = "StandingOrders::is_empty")]
    pub orders: StandingOrders,
    /// System and developer messages sent after the conversation began (Claude Code's
    /// mid-conversation notices, a concatenated session's later instructions): kept like
    /// instructions, each distinct text once (its newest copy).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system_notes: Vec<Arc<Instruction>>,
    /// Log index of the newest environment context block.
    #[serde(skip_serializing_if = "Option::is_none")]
    environment_index: Option<u64>,
    /// Whether a user or assistant message was read: system and developer messages before
    /// it are the leading instructions, which the context always keeps.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    conversation_started: bool,
    /// Hashes of the leading instructions' texts and of their standing orders: repeats of
    /// them later in the session add nothing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    leading: Vec<u64>,
    /// The oldest of the user's messages past [`MAX_WORDS`], archived and only counted from
    /// then on: what a compaction reads of the user's words stays bounded however long the
    /// session (no window shows thousands of messages, even as heads).
    #[serde(skip_serializing_if = "FoldedWords::is_empty")]
    pub folded_words: FoldedWords,
    /// The names the agent's own calls and notes were using, and their lines.
    #[serde(skip_serializing_if = "WorkingSet::is_empty")]
    pub working_set: WorkingSet,
    /// What the capsule's first message covers while later compactions leave it as it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lasting: Option<LastingPart>,
}

/// The capsule's first message as last written in full ([`Capsule::render_parts`]): what it
/// shows, so that a later compaction can keep it byte for byte and write only what came
/// since into the second message. Rewritten when it no longer holds (an order it lists was
/// replaced, a message it shows came back into the context, the environment changed) or when
/// what came since outgrows [`LASTING_REWRITE_SHARE`] of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LastingPart {
    /// Log indexes of the user's and system messages it shows or counts, ascending.
    pub covered: Vec<u64>,
    /// Current standing orders of those messages when it was written.
    pub orders_current: usize,
    /// The user's messages folded into a count when it was written.
    pub folded: usize,
    /// Hash of the environment and working directory it shows.
    pub environment: u64,
}

/// What came since the lasting part may take this share of it before the part is rewritten.
pub const LASTING_REWRITE_SHARE: f64 = 0.3;

/// The lasting part and what came since may be this many times a fresh lasting part before
/// the part is rewritten (a fresh one shortens the oldest words to fit the budget).
pub const LASTING_GROWTH: f64 = 1.2;

/// How the capsule's second message opens (it continues the first).
pub const CAPSULE_CONTINUED_TITLE: &str = "[Session capsule: continued. What came since the part above, and what the agent is working with now.]";

impl Capsule {
    /// Reads the entries not read yet (log index past [`Capsule::absorbed_through`]), oldest
    /// first. Entries the engine wrote (no log index) are skipped. O(new entries).
    pub fn absorb(&mut self, entries: &[Entry]) {
        for entry in entries {
            let Some(index) = entry.meta.log_index else {
                continue;
            };
            if entry.meta.synthetic || self.absorbed_through.is_some_and(|done| index <= done) {
                continue;
            }
            self.read(&entry.message, index);
            self.absorbed_through = Some(index);
        }
    }

    /// Records where the message at `log_index` was archived when it left the context.
    pub fn note_archived(&mut self, log_index: u64, reference: &str) {
        // Instructions are in log order: a binary search finds the one (if any).
        if let Ok(at) = self
            .instructions
            .binary_search_by_key(&log_index, |i| i.log_index)
            && self.instructions[at].reference.is_none()
        {
            Arc::make_mut(&mut self.instructions[at]).reference = Some(reference.to_string());
        }
        self.orders.note_archived(log_index, reference);
        if let Some(note) = self
            .system_notes
            .iter_mut()
            .find(|n| n.log_index == log_index && n.reference.is_none())
        {
            Arc::make_mut(note).reference = Some(reference.to_string());
        }
    }

    /// Replaces every reference `pending` selects by what `fill` makes of it (the engine fills
    /// its markers this way once the archive answered).
    pub fn fill_references(
        &mut self,
        pending: impl Fn(&str) -> bool,
        fill: impl Fn(&str) -> String,
    ) {
        self.orders.fill_references(&pending, &fill);
        for instruction in self.instructions.iter_mut().chain(&mut self.system_notes) {
            if instruction.reference.as_deref().is_some_and(&pending) {
                let instruction = Arc::make_mut(instruction);
                if let Some(reference) = &mut instruction.reference {
                    *reference = fill(reference);
                }
            }
        }
    }

    fn read(&mut self, message: &Message, index: u64) {
        match message.role {
            Role::System | Role::Developer => {
                let text = message.text();
                if let Some(dir) = working_directory_in(&text) {
                    self.working_directory = Some(dir);
                }
                self.read_instructions(message.role, &text, index);
            }
            Role::Assistant => {
                self.conversation_started = true;
                self.working_set.read(message, index);
                self.pending.clear();
                for (id, name, arguments) in message.tool_calls() {
                    self.read_call(name, arguments, index);
                    self.pending.push(PendingCall {
                        id: id.to_string(),
                        name: name.to_string(),
                        arguments: arguments.to_string(),
                    });
                }
            }
            Role::User | Role::Tool => {
                self.conversation_started |= message.role == Role::User;
                for part in &message.parts {
                    match part {
                        Part::Text { text, .. } if message.role == Role::User => {
                            self.read_user_text(text, index);
                        }
                        Part::ToolResult {
                            call_id,
                            content,
                            is_error,
                            ..
                        } => self.read_result(call_id, content, *is_error, index),
                        _ => {}
                    }
                }
            }
        }
    }

    /// A system or developer message: the leading ones are remembered (the context keeps
    /// them); a later one is kept like an instruction, and its standing orders are read.
    fn read_instructions(&mut self, role: Role, text: &str, index: u64) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let hash = text_hash(text);
        if !self.conversation_started {
            let mut add = |h: u64| {
                if let Err(at) = self.leading.binary_search(&h) {
                    self.leading.insert(at, h);
                }
            };
            add(hash);
            for sentence in orders::sentences(text) {
                if orders::classify(sentence).is_some() {
                    add(orders::statement_hash(sentence));
                }
            }
            return;
        }
        if self.leading.binary_search(&hash).is_ok() {
            // The leading instructions again (a concatenated session): still in the context.
            return;
        }
        let leading = &self.leading;
        self.orders.read_where(role, text, index, |sentence| {
            leading
                .binary_search(&orders::statement_hash(sentence))
                .is_err()
        });
        self.system_notes.retain(|note| note.text != text);
        if self.system_notes.len() >= MAX_SYSTEM_NOTES {
            self.system_notes.remove(0);
        }
        self.system_notes.push(Arc::new(Instruction {
            text: text.to_string(),
            log_index: index,
            reference: None,
        }));
    }

    fn read_user_text(&mut self, text: &str, index: u64) {
        let words = strip_boilerplate(text);
        if let Some(environment) = environment_block(text) {
            if let Some(dir) = working_directory_in(environment) {
                self.working_directory = Some(dir);
            }
            self.environment = Some(environment.to_string());
            self.environment_index = Some(index);
        }
        if words.trim().is_empty() {
            if !text.trim().is_empty() {
                self.boilerplate += 1;
            }
            return;
        }
        if words.len() != text.len() {
            self.boilerplate += 1;
        }
        // Only the user's own words (harness elements left out) carry standing orders.
        self.orders.read(Role::User, &words, index);
        // Several text parts of one message stay one instruction.
        if let Some(last) = self.instructions.last_mut()
            && last.log_index == index
        {
            let last = Arc::make_mut(last);
            last.text.push('\n');
            last.text.push_str(words.trim());
            return;
        }
        self.instructions.push(Arc::new(Instruction {
            text: words.trim().to_string(),
            log_index: index,
            reference: None,
        }));
        if self.instructions.len() > MAX_WORDS {
            self.fold_oldest_words();
        }
    }

    /// Folds the oldest archived messages of the user's words (down to three quarters of
    /// [`MAX_WORDS`]) into [`Capsule::folded_words`]; one not archived yet stops the fold.
    fn fold_oldest_words(&mut self) {
        let excess = self.instructions.len() - MAX_WORDS * 3 / 4;
        let archived = self
            .instructions
            .iter()
            .take(excess)
            .take_while(|i| i.reference.is_some())
            .count();
        if archived == 0 {
            return;
        }
        let folded: Vec<Arc<Instruction>> = self.instructions.drain(..archived).collect();
        self.folded_words.count += folded.len();
        let references = merge_line_ranges(
            self.folded_words
                .references
                .iter()
                .map(String::as_str)
                .chain(folded.iter().filter_map(|i| i.reference.as_deref())),
        );
        self.folded_words.references = references;
    }

    fn read_call(&mut self, name: &str, arguments: &str, index: u64) {
        if PLAN_TOOLS.contains(&name) {
            self.plan = Some(PlanRecord {
                tool: name.to_string(),
                arguments: arguments.to_string(),
                log_index: index,
            });
            return;
        }
        let events = tool_call_events(name, arguments);
        if let Some(dir) = events.working_directory {
            self.working_directory = Some(dir);
        }
        for event in events.files {
            if event.action == FileAction::Read {
                self.open_file = Some(event.path.clone());
            }
            self.record_file(event.path, event.action, index);
        }
        if events.edits_open_file
            && let Some(path) = self.open_file.clone()
        {
            self.record_file(path, FileAction::Modified, index);
        }
    }

    fn record_file(&mut self, path: String, action: FileAction, index: u64) {
        match self.files.iter_mut().find(|f| f.path == path) {
            Some(record) => {
                // A change is remembered over later reads; a write of a known file modifies it.
                let action = match action {
                    FileAction::Written => FileAction::Modified,
                    other => other,
                };
                if action.changes() || !record.action.changes() {
                    // Mentioning a file says less than reading or listing it.
                    if !(action == FileAction::Mentioned && record.action != FileAction::Mentioned)
                    {
                        record.action = action;
                    }
                }
                record.touched = index;
            }
            None => {
                let action = match action {
                    FileAction::Written => FileAction::Created,
                    other => other,
                };
                self.files.push(FileRecord {
                    path,
                    action,
                    touched: index,
                });
            }
        }
    }

    fn read_result(&mut self, call_id: &str, content: &[Part], is_error: bool, index: u64) {
        let Some(call) = self.pending.iter().find(|c| c.id == call_id) else {
            return;
        };
        // Most results are one text part: read it in place.
        let joined: String;
        let text = match content {
            [Part::Text { text, .. }] => text.as_str(),
            _ => {
                joined = Message::new(Role::Tool, content.to_vec()).text();
                &joined
            }
        };
        self.working_set.read_result(text, index);
        if is_error || failed(text) {
            self.problem = Some(Problem {
                command: describe_call(&call.name, &call.arguments),
                error: head_tail(text, 500, 700),
                log_index: index,
                call: call.key(),
            });
        } else if self.problem.as_ref().is_some_and(|p| p.call == call.key()) {
            // The same call succeeded since: the problem is solved.
            self.problem = None;
        }
    }
}

/// How a call is named in the open problem: the shell command itself, else `tool(arguments)`.
fn describe_call(name: &str, arguments: &str) -> String {
    if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(arguments) {
        match object.get("command").or_else(|| object.get("cmd")) {
            Some(Value::String(command)) => return command.clone(),
            Some(Value::Array(words)) => {
                let words: Vec<&str> = words.iter().filter_map(Value::as_str).collect();
                // `bash -lc SCRIPT`: the script is the command.
                if words.len() == 3 && words[1].starts_with('-') && words[1].contains('c') {
                    return words[2].to_string();
                }
                return words.join(" ");
            }
            _ => {}
        }
    }
    format!("{name}({})", cut_middle(arguments, 300))
}

/// Whether a tool output reports a failure: a non-zero exit code (Codex's `exit_code`
/// metadata, "Exit code: N", "exited with code N"), a sandbox refusal, or a Python traceback.
fn failed(text: &str) -> bool {
    if let Some(at) = text.rfind("\"exit_code\":") {
        let digits: String = text[at + 12..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        return digits.parse::<i64>().is_ok_and(|code| code != 0);
    }
    let head = &text[..floor_char_boundary(text, 400)];
    let tail = &text[floor_char_boundary(text, text.len().saturating_sub(400))..];
    let starts = |prefix: &str| {
        head.len() >= prefix.len()
            && head.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
    };
    starts("failed in sandbox")
        || starts("traceback (most recent call last)")
        || starts("error:")
        || [head, tail]
            .iter()
            .any(|t| exit_code_after(t, "xit code: ") || exit_code_after(t, "xited with code "))
}

/// Whether `phrase` ("xit code: ", the capital or small E before it left out) is followed
/// by a non-zero number in `text`.
fn exit_code_after(text: &str, phrase: &str) -> bool {
    text.match_indices(phrase).any(|(at, _)| {
        let digits: String = text[at + phrase.len()..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse::<i64>().is_ok_and(|code| code != 0)
    })
}

/// The largest char boundary of `text` at or below `at`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The first `head` and last `tail` characters of `text`, with a note of what was cut.
fn head_tail(text: &str, head: usize, tail: usize) -> String {
    let chars = text.chars().count();
    if chars <= head + tail {
        return text.to_string();
    }
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(chars - tail)
        .map_or(text.len(), |(i, _)| i);
    format!(
        "{}\n[… {} characters …]\n{}",
        &text[..head_end],
        chars - head - tail,
        &text[tail_start..]
    )
}

fn cut_middle(text: &str, max: usize) -> String {
    head_tail(text, max / 2, max / 2)
}

#[cfg(test)]
mod tests;
