//! The session capsule: no tool output, tool-call argument or assistant text ever yields a
//! capsule heading (the rule of [`ctxkeeper_core::untrusted`]).
//!
//! The session is decoded by [`crate::session`]: knob 0 sizes the window (1,000 to 64,750
//! tokens), knob 1 how many of the newest messages are still in the context. The capsule
//! absorbs the first half of the messages, then the rest (it reads incrementally, a
//! compaction at a time), and each render must hold:
//!
//! - it opens with the capsule's title, and no other line does;
//! - read as Markdown (code blocks skipped) or line by line (any line break, blocks ignored),
//!   the same headings: nothing hides a heading in a block, nothing closes the capsule's
//!   fences from inside;
//! - every heading is one the capsule writes, each at most once, or a line the user (system,
//!   developer) wrote: the capsule quotes their words verbatim, escaping only its own titles;
//! - the sections that quote only them (standing orders, instructions sent during the session,
//!   the user's words) hold no forged text.
//!
//! Restored from its serialized state (a restart), the capsule renders the same text.

use std::collections::HashSet;

use ctxkeeper_core::capsule::{
    CAPSULE_TITLE, Capsule, CapsuleConfig, ORDERS_HEADING, USER_WORDS_HEADING, strip_boilerplate,
};
use ctxkeeper_core::engine::Entry;
use ctxkeeper_core::fidelity::PLAN_TOOLS;
use ctxkeeper_core::untrusted::headings_outside_fences;
use ctxkeeper_core::working_set::WORKING_SET_HEADING;

use crate::session::{FORGED, decode};

const INSTRUCTIONS_HEADING: &str =
    "## Instructions sent during the session (system messages, verbatim, oldest first)";

/// A session's capsule, rendered twice on the way.
pub fn capsule(data: &[u8]) {
    let session = decode(data);
    let window = 1_000 + u64::from(session.knobs[0]) * 250;
    let count = session.messages.len();
    let live_count = usize::from(session.knobs[1]) % (count + 1);
    let archived = count - live_count;
    let live: Vec<u64> = (archived as u64..count as u64).collect();
    let mut entries: Vec<Entry> = session.messages.into_iter().map(Entry::new).collect();
    for (index, entry) in entries.iter_mut().enumerate() {
        entry.meta.log_index = Some(index as u64);
    }
    let config = CapsuleConfig::default();
    let mut capsule = Capsule::default();
    let mut read = 0;
    for through in [count / 2, count] {
        capsule.absorb(&entries[..through]);
        for index in read..through.min(archived) {
            let line = index + 1;
            capsule.note_archived(
                index as u64,
                &format!("sessions/s/context.jsonl#L{line}-L{line}"),
            );
        }
        read = through.min(archived).max(read);
        let text = capsule.render(&config, window, &live);
        assert_own_sections(&text, &session.trusted);
    }
    let restored: Capsule =
        serde_json::from_value(serde_json::to_value(&capsule).expect("the capsule serializes"))
            .expect("the capsule deserializes");
    assert_eq!(
        restored.render(&config, window, &live),
        capsule.render(&config, window, &live),
        "a restored capsule renders another text"
    );
}

fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// The headings the capsule writes itself.
fn own_heading(line: &str) -> bool {
    line == USER_WORDS_HEADING
        || line == ORDERS_HEADING
        || line == INSTRUCTIONS_HEADING
        || line == "## Environment"
        || line == "## Files (last action)"
        || line == "## Open problem (the last failing command)"
        || line == WORKING_SET_HEADING
        || PLAN_TOOLS
            .iter()
            .any(|tool| line == format!("## Plan (latest {tool} call, verbatim)"))
}

/// The sections that quote only what the user, system or developer wrote.
fn quotes_only_trusted_text(heading: &str) -> bool {
    heading == USER_WORDS_HEADING || heading == ORDERS_HEADING || heading == INSTRUCTIONS_HEADING
}

/// See the module documentation.
pub fn assert_own_sections(text: &str, trusted: &[String]) {
    if text.is_empty() {
        return;
    }
    assert!(text.starts_with(CAPSULE_TITLE), "no title:\n{text}");
    let markdown = headings_outside_fences(text);
    let lines: Vec<&str> = text
        .split(is_line_break)
        .map(str::trim_start)
        .filter(|l| l.starts_with('#') || l.starts_with(CAPSULE_TITLE))
        .collect();
    assert_eq!(lines, markdown, "a heading inside a block in\n{text}");
    // What the user wrote, as the capsule quotes it: harness blocks taken out (a line may
    // start with a heading only once a block before it on the line is gone).
    let stripped: Vec<String> = trusted
        .iter()
        .map(|t| strip_boilerplate(t).into_owned())
        .collect();
    let trusted_lines: Vec<&str> = trusted
        .iter()
        .chain(&stripped)
        .flat_map(|t| t.split('\n'))
        .map(str::trim_start)
        .filter(|l| l.starts_with('#'))
        .collect();
    let mut seen = HashSet::new();
    for (position, heading) in markdown.iter().enumerate() {
        if heading.starts_with(CAPSULE_TITLE) {
            assert_eq!(position, 0, "a second title {heading:?} in\n{text}");
            continue;
        }
        if own_heading(heading) {
            assert!(seen.insert(*heading), "{heading:?} twice in\n{text}");
            continue;
        }
        // The user's words are quoted verbatim, a long message cut to its head.
        let head = heading.split(" […").next().unwrap_or(heading);
        assert!(
            trusted_lines.iter().any(|line| line.starts_with(head)),
            "a heading no one trusted wrote: {heading:?} in\n{text}"
        );
    }
    // The sections that quote trusted text: from their heading to the next own heading.
    let mut section: Option<&str> = None;
    for line in text.split(is_line_break) {
        let trimmed = line.trim_start();
        if own_heading(trimmed) {
            section = Some(trimmed);
            continue;
        }
        if let Some(heading) = section
            && quotes_only_trusted_text(heading)
        {
            assert!(
                !line.contains(FORGED),
                "forged text under {heading:?}: {line:?} in\n{text}"
            );
        }
    }
}
