//! Fidelity probes: what a managed request still tells the model, measured against the
//! unmanaged request of the same step.
//!
//! A context policy saves tokens by leaving things out. These probes measure what it must not
//! leave out, at every step where the managed request differs from the whole history:
//!
//! - **user instructions kept**: the share of user-role texts of at least
//!   [`USER_TEXT_MIN_CHARS`] characters whose first [`USER_TEXT_PREFIX_CHARS`] characters,
//!   whitespace-normalised, appear verbatim somewhere in the request;
//! - **file paths kept**: the share of file paths named in tool-call arguments (as
//!   [`crate::artifacts`] reads them) that appear anywhere in the request;
//! - **plan kept**: whether the arguments of the latest plan call (`TodoWrite`, `update_plan`,
//!   …), whitespace-normalised, appear in the request;
//! - **references shown**: every archive reference the request shows after the engine's
//!   phrases ("archived at …", "offloaded to …", "stored in …", "Archived: …"), for the caller
//!   to resolve against its archive;
//! - **standing orders kept**: the share of the user's standing orders still current
//!   ([`crate::orders`]: rules, constraints, facts, preferences, the goal state, each
//!   whitespace-normalised) that appear verbatim somewhere in the request;
//! - **leaked marker**: whether an engine fill marker reached the request
//!   ([`crate::model::has_internal_marker`]);
//! - **next-action recall**: of the salient strings ([`crate::salience`]: identifiers, paths,
//!   line numbers and codes) the real agent used in its next action (the text and tool-call
//!   arguments of the assistant message the request was answered with) that the whole history
//!   carried outside its system and developer messages, how many the request still carries,
//!   standing alone (`foo_bar` is not found in `foo_bar_baz`); and the same for the
//!   *long-range* ones, which only messages older than the last [`RECENT_MESSAGES`] carried.
//!   The whole history carries every one of them by construction.
//!
//! [`Probe`] reads the history incrementally (each message once) and measures a request in one
//! pass over its text (Aho-Corasick over every needle), so probing a replay of thousands of
//! steps stays cheap.
//!
//! ```
//! use ctxkeeper_core::fidelity::Probe;
//! use ctxkeeper_core::model::{Message, Part};
//!
//! let history = vec![
//!     Message::user("Please fix the rounding bug in invoice.py, and never touch the database."),
//!     Message::tool_call("c1", "Read", r#"{"file_path":"src/invoice.py"}"#),
//!     Message::tool_result("c1", "def total(): ..."),
//! ];
//! let mut probe = Probe::default();
//! probe.observe(&history);
//! // A request that kept the user's words but lost the call that named the file.
//! let managed = vec![history[0].clone(), Message::user("[earlier messages summarized]")];
//! // The agent's next action opens the file it read before.
//! let next = Message::tool_call("c2", "Edit", r#"{"file_path":"src/invoice.py"}"#);
//! let step = probe.measure(&managed, Some(&next));
//! assert_eq!((step.user_texts, step.user_texts_kept), (1, 1));
//! assert_eq!((step.paths, step.paths_kept), (1, 0));
//! assert!(!step.leaked_marker);
//! // `src/invoice.py` and `invoice.py`: the history names both; the request kept the user's
//! // `invoice.py` and lost the call's `src/invoice.py`.
//! assert_eq!((step.next_action.strings, step.next_action.kept), (2, 1));
//! ```

use std::collections::{HashMap, HashSet};

use aho_corasick::{AhoCorasick, AhoCorasickKind};

use crate::artifacts::tool_call_events;
use crate::model::{Message, Part, Role, has_internal_marker};
use crate::orders::StandingOrders;
use crate::salience::{salient_arguments, salient_strings, stands_alone};

/// Messages at the end of the history that count as recent for next-action recall: a string
/// only older messages carried is long-range.
pub const RECENT_MESSAGES: usize = 6;

/// User texts shorter than this are not counted ("yes", "ok, continue").
pub const USER_TEXT_MIN_CHARS: usize = 20;
/// How much of a user text must appear verbatim for it to count as kept.
pub const USER_TEXT_PREFIX_CHARS: usize = 240;

/// Names of the tools that record an agent's plan or todo list.
pub const PLAN_TOOLS: [&str; 6] = [
    "TodoWrite",
    "update_plan",
    "todo_write",
    "todowrite",
    "write_todos",
    "task_tracker",
];

/// Phrases after which the engine's placeholders and summaries name an archive reference.
const REFERENCE_PHRASES: [&str; 4] = ["archived at ", "offloaded to ", "stored in ", "Archived: "];

/// What the probes measured on one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepProbe {
    /// Distinct user texts of the history, and how many the request kept.
    pub user_texts: usize,
    pub user_texts_kept: usize,
    /// Distinct file paths named in the history's tool calls, and how many the request shows.
    pub paths: usize,
    pub paths_kept: usize,
    /// Whether the latest plan is in the request (`None`: the history has no plan yet).
    pub plan_kept: Option<bool>,
    /// Standing orders of the user still current, and how many the request shows verbatim.
    pub orders: usize,
    pub orders_kept: usize,
    /// Archive references the request shows, distinct, in order.
    pub references: Vec<String>,
    /// Whether an engine fill marker reached the request.
    pub leaked_marker: bool,
    /// Next-action recall (zero counts when no next action was given).
    pub next_action: NextActionRecall,
}

/// What a request kept of the salient strings the agent's next action used (see the
/// [module documentation](self)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NextActionRecall {
    /// Distinct salient strings of the next action that the history carried, and how many of
    /// them the request carries.
    pub strings: usize,
    pub kept: usize,
    /// Those only messages older than the last [`RECENT_MESSAGES`] carried, and how many of
    /// them the request carries.
    pub long_range: usize,
    pub long_range_kept: usize,
    /// The long-range strings the request lost, in the order the next action names them.
    pub lost_long_range: Vec<String>,
}

/// The probes' view of one session's history, built incrementally.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// Messages of the history read so far.
    seen: usize,
    user_texts: Vec<String>,
    known_texts: HashSet<String>,
    paths: Vec<String>,
    known_paths: HashSet<String>,
    /// The latest plan call's arguments, whitespace-normalised.
    plan: Option<String>,
    /// The user's standing orders, read as the capsule reads them.
    orders: StandingOrders,
    /// The current ones, whitespace-normalised, as of `orders.orders.len()` statements.
    current_orders: (usize, Vec<String>),
    /// Salient strings of the history outside its system and developer messages, each with
    /// the position of the last message that carries it.
    salient: HashMap<String, usize>,
    /// The automaton over the needles, kept while they stay the same: texts and paths are
    /// only ever appended, so their counts and the plan name the set. Building it took most
    /// of a long replay's time when it was rebuilt at every step.
    automaton: Option<(NeedleSet, AhoCorasick)>,
}

/// Which needles an automaton was built over (see [`Probe::automaton`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct NeedleSet {
    texts: usize,
    paths: usize,
    plan: Option<String>,
    /// Statements read into the standing orders (each one adds or supersedes).
    orders: usize,
}

impl Probe {
    /// Reads the messages of `history` not read yet (the history only grows within a session;
    /// a shorter one starts over).
    pub fn observe(&mut self, history: &[Message]) {
        if history.len() < self.seen {
            *self = Probe::default();
        }
        for (position, message) in history.iter().enumerate().skip(self.seen) {
            self.read(message);
            self.read_salient(message, position);
        }
        self.seen = history.len();
    }

    fn read_salient(&mut self, message: &Message, position: usize) {
        if message.role.is_instruction() {
            return;
        }
        let salient = &mut self.salient;
        let mut note = |piece: &str, _| match salient.get_mut(piece) {
            Some(last) => *last = position,
            None => {
                salient.insert(piece.to_string(), position);
            }
        };
        for part in &message.parts {
            match part {
                Part::ToolCall { arguments, .. } => salient_arguments(arguments, &mut note),
                other => other.visit_strings(&mut |text| salient_strings(text, &mut note)),
            }
        }
    }

    /// The distinct salient strings `next` uses (its text and tool-call arguments) that the
    /// history read so far carried, each with whether it is long-range.
    fn next_action_strings(&self, next: &Message) -> Vec<(String, bool)> {
        let recent_from = self.seen.saturating_sub(RECENT_MESSAGES);
        let mut out: Vec<(String, bool)> = Vec::new();
        let mut known: HashSet<String> = HashSet::new();
        let mut consider = |piece: &str, _| {
            if let Some(&last) = self.salient.get(piece)
                && known.insert(piece.to_string())
            {
                out.push((piece.to_string(), last < recent_from));
            }
        };
        for part in &next.parts {
            match part {
                Part::Text { text, .. } => salient_strings(text, &mut consider),
                Part::ToolCall { arguments, .. } => salient_arguments(arguments, &mut consider),
                _ => {}
            }
        }
        out
    }

    fn read(&mut self, message: &Message) {
        if message.role == Role::User {
            for part in &message.parts {
                if let Part::Text { text, .. } = part {
                    self.orders.read(Role::User, text, self.seen as u64);
                    if let Some(prefix) = user_text_prefix(text)
                        && self.known_texts.insert(prefix.clone())
                    {
                        self.user_texts.push(prefix);
                    }
                }
            }
        }
        for (_, name, arguments) in message.tool_calls() {
            if PLAN_TOOLS.contains(&name) {
                self.plan = Some(normalize(arguments));
                continue;
            }
            for event in tool_call_events(name, arguments).files {
                if self.known_paths.insert(event.path.clone()) {
                    self.paths.push(event.path);
                }
            }
        }
    }

    /// Measures `request` against the history read so far; `next` is the assistant message
    /// the request was answered with, for next-action recall.
    pub fn measure(&mut self, request: &[Message], next: Option<&Message>) -> StepProbe {
        let mut haystack = String::new();
        let mut leaked_marker = false;
        let mut references = Vec::new();
        let mut seen_references = HashSet::new();
        for message in request {
            for part in &message.parts {
                part.visit_strings(&mut |text| {
                    leaked_marker |= has_internal_marker(text);
                    if REFERENCE_PHRASES.iter().any(|p| text.contains(p)) {
                        for reference in shown_references(text) {
                            if seen_references.insert(reference.clone()) {
                                references.push(reference);
                            }
                        }
                    }
                    push_normalized(&mut haystack, text);
                    haystack.push(' ');
                });
            }
        }

        let statements = self.orders.orders.len();
        if self.current_orders.0 != statements {
            self.current_orders = (
                statements,
                self.orders.current().map(|o| normalize(&o.text)).collect(),
            );
        }
        let set = NeedleSet {
            texts: self.user_texts.len(),
            paths: self.paths.len(),
            plan: self.plan.clone(),
            orders: statements,
        };
        let orders = self.current_orders.1.len();
        let needles = set.texts + set.paths + usize::from(set.plan.is_some()) + orders;
        if self
            .automaton
            .as_ref()
            .is_none_or(|(built, _)| *built != set)
        {
            let mut patterns: Vec<&str> = Vec::with_capacity(needles);
            patterns.extend(self.user_texts.iter().map(String::as_str));
            patterns.extend(self.paths.iter().map(String::as_str));
            patterns.extend(self.plan.as_deref());
            patterns.extend(self.current_orders.1.iter().map(String::as_str));
            // Rebuilt whenever the user writes again: the plain NFA builds fastest, and the
            // haystack (one request) is small enough that its slower search does not matter.
            self.automaton = AhoCorasick::builder()
                .kind(Some(AhoCorasickKind::NoncontiguousNFA))
                .build(&patterns)
                .ok()
                .map(|automaton| (set, automaton));
        }
        let mut found = vec![false; needles];
        if needles > 0
            && let Some((_, automaton)) = &self.automaton
        {
            let mut missing = needles;
            for hit in automaton.find_overlapping_iter(&haystack) {
                let index = hit.pattern().as_usize();
                if !found[index] {
                    found[index] = true;
                    missing -= 1;
                    if missing == 0 {
                        break;
                    }
                }
            }
        }
        let next_action = next.map_or_else(NextActionRecall::default, |next| {
            self.next_action_recall(next, &haystack)
        });
        let texts = self.user_texts.len();
        let paths = self.paths.len();
        let orders_from = needles - orders;
        StepProbe {
            orders,
            orders_kept: found[orders_from..].iter().filter(|f| **f).count(),
            next_action,
            user_texts: texts,
            user_texts_kept: found[..texts].iter().filter(|f| **f).count(),
            paths,
            paths_kept: found[texts..texts + paths].iter().filter(|f| **f).count(),
            plan_kept: self.plan.as_ref().map(|_| found[texts + paths]),
            references,
            leaked_marker,
        }
    }
}

impl Probe {
    fn next_action_recall(&self, next: &Message, haystack: &str) -> NextActionRecall {
        let strings = self.next_action_strings(next);
        let mut recall = NextActionRecall {
            strings: strings.len(),
            long_range: strings.iter().filter(|(_, long)| *long).count(),
            ..NextActionRecall::default()
        };
        if strings.is_empty() {
            return recall;
        }
        let mut found = vec![false; strings.len()];
        if let Ok(automaton) = AhoCorasick::builder()
            .kind(Some(AhoCorasickKind::NoncontiguousNFA))
            .build(strings.iter().map(|(s, _)| s.as_str()))
        {
            let bytes = haystack.as_bytes();
            let mut missing = strings.len();
            for hit in automaton.find_overlapping_iter(haystack) {
                let index = hit.pattern().as_usize();
                if !found[index] && stands_alone(bytes, hit.start(), hit.end()) {
                    found[index] = true;
                    missing -= 1;
                    if missing == 0 {
                        break;
                    }
                }
            }
        }
        for ((string, long), kept) in strings.into_iter().zip(found) {
            recall.kept += usize::from(kept);
            if long {
                recall.long_range_kept += usize::from(kept);
                if !kept {
                    recall.lost_long_range.push(string);
                }
            }
        }
        recall
    }
}

/// The whitespace-normalised first [`USER_TEXT_PREFIX_CHARS`] characters of a user text of at
/// least [`USER_TEXT_MIN_CHARS`] characters.
fn user_text_prefix(text: &str) -> Option<String> {
    let normalized = normalize(text);
    if normalized.chars().count() < USER_TEXT_MIN_CHARS {
        return None;
    }
    Some(normalized.chars().take(USER_TEXT_PREFIX_CHARS).collect())
}

/// Runs of whitespace become one space; leading and trailing whitespace goes.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_normalized(&mut out, text);
    out.truncate(out.trim_end().len());
    out
}

fn push_normalized(out: &mut String, text: &str) {
    let mut pending_space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            pending_space = true;
        } else {
            if pending_space && !out.is_empty() && !out.ends_with(' ') {
                out.push(' ');
            }
            pending_space = false;
            out.push(c);
        }
    }
}

/// The references `text` shows after the engine's phrases: the word that follows, without
/// closing punctuation. Words that cannot be a reference (no `/`, no marker, not the
/// "(not archived)" note) are prose and skipped.
pub fn shown_references(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for phrase in REFERENCE_PHRASES {
        for (at, _) in text.match_indices(phrase) {
            let rest = &text[at + phrase.len()..];
            let end = rest
                .find(|c: char| c.is_whitespace() || matches!(c, ']' | ')' | ';' | ',' | '"' | '…'))
                .unwrap_or(rest.len());
            let mut word = rest[..end].trim_end_matches(['.', ':']);
            if word.starts_with('(') {
                // "(not archived)": a reference that was never written.
                word = "(not archived)";
            }
            let plausible = word.contains('/') || word.contains('\u{1}') || word.starts_with('(');
            if plausible && !word.is_empty() {
                out.push(word.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_automaton_follows_the_history_as_it_grows() {
        let first = Message::user("Please fix the rounding bug in invoice.py today.");
        let second = Message::user("Also keep the database schema exactly as it is now.");
        let mut probe = Probe::default();
        probe.observe(std::slice::from_ref(&first));
        let step = probe.measure(&[first.clone(), second.clone()], None);
        assert_eq!((step.user_texts, step.user_texts_kept), (1, 1));
        // A new user text after a measurement: the next one must look for it too.
        probe.observe(&[first.clone(), second.clone()]);
        let step = probe.measure(std::slice::from_ref(&second), None);
        assert_eq!((step.user_texts, step.user_texts_kept), (2, 1));
        let step = probe.measure(&[first, second], None);
        assert_eq!((step.user_texts, step.user_texts_kept), (2, 2));
    }

    #[test]
    fn standing_orders_are_probed_as_current_only() {
        let history = vec![
            Message::user("Hi there. Never push to main. The budget cap is $4,000."),
            Message::assistant("Noted."),
            Message::user("Update: the budget cap is now $6,500."),
        ];
        let mut probe = Probe::default();
        probe.observe(&history);
        // Two current orders (the rule, the new cap); the old cap is no longer one.
        let kept = probe.measure(
            &[Message::user(
                "- Never push to main.\n- Update: the budget cap is now $6,500.",
            )],
            None,
        );
        assert_eq!((kept.orders, kept.orders_kept), (2, 2));
        let stale = probe.measure(
            &[Message::user(
                "Never   push to main. The budget cap is $4,000.",
            )],
            None,
        );
        assert_eq!((stale.orders, stale.orders_kept), (2, 1));
    }

    #[test]
    fn user_texts_are_counted_once_and_matched_whitespace_normalised() {
        let long = format!("Please {}", "refactor the parser ".repeat(30));
        let history = vec![
            Message::user(long.clone()),
            Message::user("ok"),
            Message::user(long.clone()),
        ];
        let mut probe = Probe::default();
        probe.observe(&history);
        // The capsule may re-wrap lines: only the first 240 characters must match, normalised.
        let rewrapped = long.replace(' ', "\n  ");
        let kept = probe.measure(&[Message::user(format!("User said:\n{rewrapped}"))], None);
        assert_eq!((kept.user_texts, kept.user_texts_kept), (1, 1));
        let cut = probe.measure(&[Message::user(long[..100].to_string())], None);
        assert_eq!(cut.user_texts_kept, 0);
    }

    #[test]
    fn paths_plan_and_references() {
        let plan = r#"{"plan":[{"status":"in_progress","step":"Add printers"}]}"#;
        let history = vec![
            Message::user("go"),
            Message::assistant_with_calls(
                "",
                vec![
                    Part::tool_call(
                        "a",
                        "shell",
                        r#"{"command":["bash","-lc","sed -n '1,9p' opk/cli.py"]}"#,
                    ),
                    Part::tool_call("b", "update_plan", plan),
                ],
            ),
        ];
        let mut probe = Probe::default();
        probe.observe(&history);
        let request = vec![Message::user(format!(
            "Files read: opk/cli.py\nPlan:\n{plan}\n[cleared; the full output is archived at sessions/s/tool_result-a.txt]\nArchived: \u{1}ref:0\u{1}"
        ))];
        let step = probe.measure(&request, None);
        assert_eq!((step.paths, step.paths_kept), (1, 1));
        assert_eq!(step.plan_kept, Some(true));
        assert_eq!(
            step.references,
            vec![
                "sessions/s/tool_result-a.txt".to_string(),
                "\u{1}ref:0\u{1}".to_string()
            ]
        );
        assert!(step.leaked_marker);
        let without = probe.measure(&[Message::user("nothing")], None);
        assert_eq!(without.plan_kept, Some(false));
        assert_eq!(without.paths_kept, 0);
    }

    #[test]
    fn next_action_recall_counts_what_the_agent_reuses_and_splits_off_the_long_range() {
        let mut history = vec![
            Message::system("You are an agent. Use parse_args carefully."),
            Message::user("The CLI crashes on --verbose."),
            Message::tool_call("g", "Bash", r#"{"command":"grep -n verbose src/cli.py"}"#),
            Message::tool_result(
                "g",
                "src/cli.py:120:    def build_parser(self):\n121: VERBOSE_FLAG = 2",
            ),
        ];
        for n in 0..6 {
            history.push(Message::user(format!("filler {n}")));
        }
        history.push(Message::tool_result("x", "recent: helper_fn"));
        let mut probe = Probe::default();
        probe.observe(&history);
        let next = Message::assistant_with_calls(
            "I will edit build_parser at line 120 and call helper_fn, parse_args and brand_new_name.",
            vec![Part::tool_call(
                "e",
                "Edit",
                r#"{"file_path":"src/cli.py","offset":120}"#,
            )],
        );
        // Unmanaged: everything is there.
        let whole = probe.measure(&history, Some(&next));
        // build_parser, 120, helper_fn, src/cli.py, cli.py (parse_args is only in the
        // system prompt; brand_new_name nowhere).
        assert_eq!(whole.next_action.strings, 5);
        assert_eq!(whole.next_action.kept, 5);
        // All but helper_fn (in the last message) are long-range.
        assert_eq!(whole.next_action.long_range, 4);
        assert_eq!(whole.next_action.long_range_kept, 4);
        // A request that lost the grep but names `build_parser_v2` and `cli.pyc`: neither
        // counts, they do not stand alone.
        let mut managed = vec![
            history[0].clone(),
            Message::user("[summary: build_parser_v2 in cli.pyc]"),
        ];
        managed.extend_from_slice(&history[4..]);
        let step = probe.measure(&managed, Some(&next));
        assert_eq!((step.next_action.strings, step.next_action.kept), (5, 1));
        assert_eq!(step.next_action.long_range_kept, 0);
        assert_eq!(
            step.next_action.lost_long_range,
            vec!["build_parser", "120", "src/cli.py", "cli.py"]
        );
    }

    #[test]
    fn prose_after_a_phrase_is_not_a_reference() {
        assert!(shown_references("the value is stored in memory, then").is_empty());
        assert_eq!(
            shown_references("[archived at (not archived)]"),
            vec!["(not archived)".to_string()]
        );
    }
}
