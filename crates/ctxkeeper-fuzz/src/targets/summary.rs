//! The extractive summary: no text it quotes ever yields a heading of the rendered summary.
//!
//! The session is decoded by [`crate::session`] (`P` chunks are the previous summary, which
//! a model may have written); knob 0 sizes the summary (50 to 5,150 output tokens), the low
//! bit of knob 1 picks the default schema or an operator's own (fields the extractive
//! summarizer fills by what their names ask for, and one it knows nothing of). The summary
//! is checked against its messages (`check_summary`, as the engine does) and rendered; read
//! line by line (any line break), its headings are exactly its non-empty fields' titles, in
//! schema order, and read as Markdown no other heading appears.

use ctxkeeper_core::capsule::CAPSULE_TITLE;
use ctxkeeper_core::model::Role;
use ctxkeeper_core::summary::{
    Summary, SummaryField, SummaryRequest, SummarySchema, check_summary,
};
use ctxkeeper_core::untrusted::headings_outside_fences;
use ctxkeeper_llm::ExtractiveSummarizer;

use crate::session::decode;

/// An operator's schema: fields the extractive summarizer fills by keyword, and one it does
/// not know (it keeps the previous summary's text there).
fn custom_schema() -> SummarySchema {
    let field = SummaryField::new;
    SummarySchema {
        fields: vec![
            field("goal", "Goal", "What the user asked for."),
            field("blockers", "Blockers", "Errors still in the way."),
            field("files", "Files", "Files read or changed."),
            field("decisions", "Decisions", "What was decided."),
            field("mood", "Mood", "Anything else."),
        ],
    }
}

/// A session summarized without a model.
pub fn extractive_summary(data: &[u8]) {
    let session = decode(data);
    let schema = if session.knobs[1] & 1 == 0 {
        SummarySchema::default()
    } else {
        custom_schema()
    };
    let previous = session.previous_summary.as_deref().map(|text| {
        let mut previous = Summary::empty(&schema, "openai:gpt-4o-mini");
        // A model's summary: every field may say anything.
        for field in &schema.fields {
            previous.set(&field.name, text);
        }
        previous
    });
    let users: Vec<String> = session
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.text())
        .collect();
    let request = SummaryRequest {
        previous,
        schema: schema.clone(),
        must_keep: session.trusted.iter().take(4).cloned().collect(),
        ..SummaryRequest::new(session.messages, 50 + u32::from(session.knobs[0]) * 20)
    };
    let mut summary = ExtractiveSummarizer::new().summarize_now(&request);
    assert_schema_sections(&summary.render(&schema), &summary, &schema);
    let users: Vec<&str> = users.iter().map(String::as_str).collect();
    check_summary(&mut summary, &request, &[], &users);
    assert_schema_sections(&summary.render(&schema), &summary, &schema);
}

fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// See the module documentation.
pub fn assert_schema_sections(text: &str, summary: &Summary, schema: &SummarySchema) {
    let expected: Vec<String> = schema
        .fields
        .iter()
        .filter(|f| !summary.get(&f.name).trim().is_empty())
        .map(|f| format!("## {}", f.title))
        .collect();
    let lines: Vec<&str> = text
        .split(is_line_break)
        .map(str::trim_start)
        .filter(|l| l.starts_with('#') || l.starts_with(CAPSULE_TITLE))
        .collect();
    assert_eq!(
        lines, expected,
        "the summary's headings, line by line, in\n{text}"
    );
    for heading in headings_outside_fences(text) {
        assert!(
            expected.iter().any(|e| e == heading),
            "a heading no field opened: {heading:?} in\n{text}"
        );
    }
}
