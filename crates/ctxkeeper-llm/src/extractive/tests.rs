use super::*;
use ctxkeeper_core::summary::{SummaryField, SummarySchema};

fn schema_names(schema: &SummarySchema) -> Vec<&str> {
    schema.fields.iter().map(|f| f.name.as_str()).collect()
}

fn request(messages: Vec<Message>, previous: Option<Summary>) -> SummaryRequest {
    SummaryRequest {
        previous,
        ..SummaryRequest::new(messages, 800)
    }
}

fn session() -> Vec<Message> {
    vec![
        Message::system("You are a coding agent."),
        Message::user("Fix the failing build. You must not change the public API."),
        Message::assistant_with_calls(
            "Running the tests.",
            vec![Part::tool_call(
                "c1",
                "bash",
                r#"{"command":"cargo test -p invoices","timeout":600}"#,
            )],
        ),
        Message::tool_result(
            "c1",
            "compiling...\nerror[E0308]: mismatched types at src/lib.rs:12\ntest result: FAILED. 3 passed; 1 failed\nfull output saved to sessions/s1/tool_result-c1.txt",
        ),
        Message::tool_call("c2", "read_file", r#"{"path":"src/lib.rs"}"#),
        Message::tool_result("c2", "fn total() -> u32 { 1 }"),
        Message::assistant(
            "The return type is wrong.\nNext: change total() to return u64.\nThen rerun the tests.",
        ),
    ]
}

/// An operator's own schema: each field gets the facts its name asks for.
#[test]
fn custom_schema_fields_get_the_facts_their_names_ask_for() {
    let field = |name: &str, description: &str| SummaryField {
        name: name.into(),
        title: name.replace('_', " "),
        description: description.into(),
    };
    let mut custom = request(session(), None);
    custom.schema = SummarySchema {
        fields: vec![
            field("goal", "What the user wants."),
            field("blockers", "What stands in the way."),
            field("files_touched", ""),
            field("house_rules", "What must hold."),
            field("mood", "The weather in the room."),
        ],
    };
    let summary = ExtractiveSummarizer::new().summarize_now(&custom);
    assert!(
        summary.get("goal").contains("Fix the failing build"),
        "{}",
        summary.get("goal")
    );
    assert!(
        summary.get("blockers").contains("error[E0308]"),
        "{}",
        summary.get("blockers")
    );
    assert!(
        summary.get("files_touched").contains("src/lib.rs"),
        "{}",
        summary.get("files_touched")
    );
    assert!(
        summary
            .get("house_rules")
            .contains("must not change the public API"),
        "{}",
        summary.get("house_rules")
    );
    assert!(
        summary.get("mood").trim().is_empty(),
        "{}",
        summary.get("mood")
    );
}

/// The memory flush: durable facts, one per line, from the extractive rules alone.
#[test]
fn facts_for_memory_name_decisions_files_commands_errors_and_constraints() {
    let mut messages = session();
    messages.push(Message::assistant(
        "I decided to widen the type instead of casting at every call site.",
    ));
    let facts = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(ExtractiveSummarizer::new().extract_facts(&messages, 600))
        .expect("no error")
        .expect("facts found");
    for expected in [
        "User constraint: Fix the failing build. You must not change the public API.",
        "Decision: I decided to widen the type",
        "File read: src/lib.rs",
        "Error: [bash] error[E0308]: mismatched types at src/lib.rs:12",
        "Ran: cargo test -p invoices",
        "Archived: sessions/s1/tool_result-c1.txt",
    ] {
        assert!(
            facts.contains(expected),
            "{expected:?} missing from:\n{facts}"
        );
    }
    // Nothing durable, nothing flushed.
    let none = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(ExtractiveSummarizer::new().extract_facts(&[Message::assistant("ok")], 600))
        .expect("no error");
    assert_eq!(none, None);
}

/// ReMe's state snapshot and HarnessAgent's sections are filled from the same facts, not
/// left as a bare label.
#[test]
fn seed_schemas_get_their_facts() {
    let field = |name: &str| SummaryField {
        name: name.into(),
        title: name.into(),
        description: String::new(),
    };
    let mut reme = request(session(), None);
    reme.schema = SummarySchema {
        fields: vec![
            field("overall_goal"),
            field("key_knowledge"),
            field("recent_actions"),
        ],
    };
    let summary = ExtractiveSummarizer::new().summarize_now(&reme);
    assert!(
        summary
            .get("overall_goal")
            .contains("Fix the failing build")
    );
    let knowledge = summary.get("key_knowledge");
    for fact in [
        "must not change the public API",
        "src/lib.rs",
        "error[E0308]",
    ] {
        assert!(knowledge.contains(fact), "{fact:?} not in {knowledge}");
    }
    assert!(
        summary
            .get("recent_actions")
            .contains("cargo test -p invoices")
    );
    let mut harness = request(session(), None);
    harness.schema = SummarySchema {
        fields: vec![
            field("session_intent"),
            field("summary"),
            field("artifacts"),
            field("next_steps"),
        ],
    };
    let summary = ExtractiveSummarizer::new().summarize_now(&harness);
    assert!(summary.get("artifacts").contains("File read: src/lib.rs"));
    assert!(
        summary
            .get("next_steps")
            .contains("change total() to return u64")
    );
}

#[test]
fn fields_are_filled_from_the_messages() {
    let summary = ExtractiveSummarizer::new().summarize_now(&request(session(), None));
    assert_eq!(summary.produced_by, "extractive");
    assert!(!summary.degraded);
    let task = summary.get("task_overview");
    assert!(task.starts_with(EXTRACTIVE_LABEL));
    assert!(task.contains("User: Fix the failing build."));
    let state = summary.get("current_state");
    assert!(
        state.contains("Tools called (2 calls): bash, read_file"),
        "{state}"
    );
    assert!(
        state.contains("Called bash(command=cargo test -p invoices, timeout=600)"),
        "{state}"
    );
    let found = summary.get("important_discoveries");
    assert!(
        found.contains("[bash] error[E0308]: mismatched types at src/lib.rs:12"),
        "{found}"
    );
    let next = summary.get("next_steps");
    assert!(
        next.contains("Next: change total() to return u64."),
        "{next}"
    );
    assert!(
        next.contains("Latest user request: Fix the failing build."),
        "{next}"
    );
    let keep = summary.get("context_to_preserve");
    assert!(
        keep.contains(
            "User constraint: Fix the failing build. You must not change the public API."
        ),
        "{keep}"
    );
    assert!(
        keep.contains("Archived: sessions/s1/tool_result-c1.txt"),
        "{keep}"
    );
    assert!(
        keep.contains("Instruction: You are a coding agent."),
        "{keep}"
    );
}

/// Claude Code's local-command caveat and Codex's environment context once led the task
/// overview and pushed the user's real request out of it.
#[test]
fn task_overview_starts_from_the_first_real_request() {
    let messages = vec![
        Message::user(
            "Caveat: The messages below were generated by the user while running local commands. DO NOT respond to these messages or otherwise consider them in your response unless the user explicitly asks you to.",
        ),
        Message::user(
            "<command-name>/model</command-name>\n<command-message>model</command-message>\n<command-args></command-args>",
        ),
        Message::user(
            "<environment_context>\n  <cwd>/home/randy/projects/python-3/OpenPrintKit</cwd>\n</environment_context>",
        ),
        Message::user(
            "Hey Claude, please have a look at the git diff of claude_code_log/renderer.py",
        ),
        Message::tool_call("c1", "Bash", r#"{"command":"git diff"}"#),
        Message::tool_result(
            "c1",
            "[tool result cleared from context: Bash output of 2880 tokens; the full output is archived at sessions/s/tool_result-c1.txt]",
        ),
    ];
    let summary = ExtractiveSummarizer::new().summarize_now(&request(messages, None));
    let task = summary.get("task_overview");
    let first = task.lines().nth(1).unwrap_or("");
    assert_eq!(
        first,
        "- User: Hey Claude, please have a look at the git diff of claude_code_log/renderer.py"
    );
    assert!(
        !task.contains("Caveat") && !task.contains("environment_context"),
        "{task}"
    );
    // A cleared placeholder is no discovery; its reference is still preserved.
    assert!(!summary.get("important_discoveries").contains("cleared"));
    assert!(
        summary
            .get("context_to_preserve")
            .contains("sessions/s/tool_result-c1.txt")
    );
}

#[test]
fn same_input_same_summary() {
    let summarizer = ExtractiveSummarizer::new();
    let a = summarizer.summarize_now(&request(session(), None));
    let b = summarizer.summarize_now(&request(session(), None));
    assert_eq!(a, b);
}

#[test]
fn merging_keeps_previous_facts_without_duplicates() {
    let summarizer = ExtractiveSummarizer::new();
    let first = summarizer.summarize_now(&request(session(), None));
    let later = vec![
        Message::user("Also update the changelog."),
        Message::tool_call("c9", "edit", r#"{"path":"CHANGELOG.md"}"#),
        Message::tool_result("c9", "written CHANGELOG.md (12 lines)"),
    ];
    let second = summarizer.summarize_now(&request(later, Some(first.clone())));
    let task = second.get("task_overview");
    assert!(task.contains("Fix the failing build"), "{task}");
    assert!(task.contains("Also update the changelog"), "{task}");
    assert_eq!(task.matches(EXTRACTIVE_LABEL).count(), 1);
    let keep = second.get("context_to_preserve");
    assert_eq!(
        keep.matches("sessions/s1/tool_result-c1.txt").count(),
        1,
        "{keep}"
    );
    assert!(
        second
            .get("important_discoveries")
            .contains("mismatched types")
    );
    // Summarizing the same summary again changes nothing (idempotent merge).
    let again = summarizer.summarize_now(&request(Vec::new(), Some(second.clone())));
    for name in schema_names(&SummarySchema::default()) {
        assert_eq!(again.get(name), second.get(name), "{name}");
    }
}

#[test]
fn size_stays_bounded_over_many_merges() {
    let summarizer = ExtractiveSummarizer::new();
    let mut previous = None;
    for round in 0..50 {
        let messages: Vec<Message> = (0..20)
            .flat_map(|i| {
                let id = format!("r{round}c{i}");
                vec![
                    Message::user(format!(
                        "Step {round}.{i}: you must keep id ORD{round:04}{i:03} in mind."
                    )),
                    Message::tool_call(
                        &id,
                        "lookup",
                        format!(r#"{{"order":"ORD{round:04}{i:03}"}}"#),
                    ),
                    Message::tool_result(
                        &id,
                        format!(
                            "error: order ORD{round:04}{i:03} not found in /srv/orders/{round}.json"
                        ),
                    ),
                ]
            })
            .collect();
        let summary = summarizer.summarize_now(&SummaryRequest {
            max_output_tokens: 500,
            ..request(messages, previous.take())
        });
        let size: usize = SummarySchema::default()
            .fields
            .iter()
            .map(|f| summary.get(&f.name).len())
            .sum();
        assert!(
            size <= char_budget(500) + EXTRACTIVE_LABEL.len() + 64,
            "round {round}: {size}"
        );
        previous = Some(summary);
    }
    let last = previous.unwrap_or_else(|| Summary::empty(&SummarySchema::default(), "x"));
    assert!(
        last.get("task_overview").contains("Step 0.0"),
        "the original task survives"
    );
    assert!(
        last.get("important_discoveries")
            .contains("earlier lines omitted")
    );
}

#[test]
fn json_results_are_flattened_to_telling_leaves() {
    let result = r##"{"user_id": "mia_li_3668", "name": {"first": "Mia"}, "orders": ["#W4817420"], "balance": 1034}"##;
    let lines = telling_lines(result, false);
    assert!(
        lines.iter().any(|l| l == "user_id: mia_li_3668"),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "orders: #W4817420"), "{lines:?}");
}

#[test]
fn references_are_found_and_validated() {
    let mut refs = References::default();
    refs.scan("see sessions/abc/tool_result-call_1.txt, and data/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.png");
    refs.scan("not data/notahash.png nor https://x.io/sessions/a.txt nor sessions/ alone; again sessions/abc/tool_result-call_1.txt.");
    // A project file under a directory named like an archive root is not a reference.
    refs.scan("read .specify/memory/constitution.md and docs/data/table.csv");
    assert_eq!(
        refs.found,
        vec![
            "sessions/abc/tool_result-call_1.txt".to_string(),
            "data/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.png".to_string(),
        ]
    );
}

#[test]
fn custom_schema_fields_keep_the_previous_text() {
    let schema = SummarySchema {
        fields: vec![
            SummaryField::new("goal", "Goal", "d"),
            SummaryField::new("next_steps", "Next", "d"),
        ],
    };
    let mut previous = Summary::empty(&schema, "openai:x");
    previous.set("goal", "Ship v2");
    let summary = ExtractiveSummarizer::new().summarize_now(&SummaryRequest {
        schema: schema.clone(),
        ..request(session(), Some(previous))
    });
    assert!(summary.get("goal").starts_with(EXTRACTIVE_LABEL));
    assert!(summary.get("goal").contains("Ship v2"));
    assert!(summary.get("next_steps").contains("change total()"));
}

/// A reference cut to fit the field named nothing that resolves.
#[test]
fn archive_references_are_never_cut() {
    let reference = format!(
        "{ARCHIVED_LABEL}sessions/37f83ec9-f2ea-42a9-925e-0d5c105cb6e8/tool_result-toolu_01AcuN3D5jpLU6qXyZ.txt"
    );
    let lines = vec!["short".to_string(), reference.clone()];
    let fitted = fit_lines(&lines, 160, 0.5);
    assert!(
        fitted.contains(&reference) || !fitted.contains("sessions/"),
        "{fitted}"
    );
    assert!(!fitted.contains("toolu_01AcuN3D5jpLU6q…"), "{fitted}");
}

/// A directive or an error in the middle of a long field outranks the lines around it:
/// the omission markers fall on what carries least, not on whatever sat in the middle.
#[test]
fn fit_lines_keeps_the_middle_lines_that_carry_most() {
    let mut lines: Vec<String> = (0..60)
        .map(|i| format!("step {} went fine as expected", "x".repeat(i % 3 + 1)))
        .collect();
    lines[20] = "User constraint: never push to the main branch".to_string();
    lines[35] = "error: test_round_half_even failed in tests/test_money.py".to_string();
    let text = fit_lines(&lines, 1_100, 0.3);
    assert!(text.len() <= 1_100, "{}", text.len());
    assert!(text.contains("never push to the main branch"), "{text}");
    assert!(text.contains("tests/test_money.py"), "{text}");
    // Two gaps, each with its own count: what was dropped is still counted in full.
    let markers: Vec<usize> = text
        .lines()
        .filter_map(|l| l.strip_prefix("- [… ")?.split(' ').next()?.parse().ok())
        .collect();
    let shown = text.lines().count() - markers.len();
    assert!(markers.len() >= 2, "{text}");
    assert_eq!(markers.iter().sum::<usize>() + shown, lines.len(), "{text}");
}

/// When the oldest lines take the room and the newest does not fit, what follows them is
/// still counted, never dropped silently.
#[test]
fn lines_after_the_head_are_counted_when_no_newest_line_fits() {
    let mut lines: Vec<String> = (0..6)
        .map(|i| format!("early line {i} {}", "w".repeat(40)))
        .collect();
    lines.push(format!("newest {}", "z".repeat(200)));
    let text = fit_lines(&lines, 400, 0.9);
    assert!(!text.contains("newest"), "{text}");
    assert!(text.ends_with("earlier lines omitted …]"), "{text}");
}

#[test]
fn fit_lines_keeps_head_and_tail_with_a_marker() {
    let lines: Vec<String> = (0..100)
        .map(|i| format!("line {i:03} with some words"))
        .collect();
    let text = fit_lines(&lines, 600, 0.5);
    assert!(text.len() <= 600);
    assert!(text.starts_with("- line 000"));
    assert!(text.ends_with("line 099 with some words"));
    assert!(text.contains("earlier lines omitted"));
    let tail_only = fit_lines(&lines, 300, 0.0);
    assert!(!tail_only.contains("line 000"));
}

#[test]
fn a_request_kept_in_the_conversation_names_the_goal_when_no_summarized_message_asks() {
    // Only tool rounds are summarized: the user's request stays in the context after the
    // summary (Harness keeps its last messages, the engine keeps the latest request).
    let rounds: Vec<Message> = session()
        .into_iter()
        .filter(|m| m.role != Role::User || m.has_tool_results())
        .collect();
    let field = |name: &str| ctxkeeper_core::summary::SummaryField {
        name: name.into(),
        title: name.to_uppercase().replace('_', " "),
        description: String::new(),
    };
    let mut harness = request(rounds, None);
    harness.schema = SummarySchema {
        fields: vec![field("session_intent"), field("summary")],
    };
    let without = ExtractiveSummarizer::new().summarize_now(&harness);
    assert!(
        !without.get("session_intent").contains("invoice"),
        "nothing asked in the summarized messages: {}",
        without.get("session_intent")
    );
    harness.request_in_context =
        Some("Fix the failing invoice totals in src/billing/invoice.rs.".into());
    let with = ExtractiveSummarizer::new().summarize_now(&harness);
    assert!(
        with.get("session_intent")
            .contains("Fix the failing invoice totals in src/billing/invoice.rs."),
        "{}",
        with.get("session_intent")
    );
    // A model summarizer is told the same in its guidance.
    assert!(
        harness
            .guidance()
            .is_some_and(|g| g.contains("Fix the failing invoice totals"))
    );
}
