//! The session capsule survives any number of consecutive compactions: each one changes it
//! only by what happened since the previous one, and what the user said stays visible to the
//! model, in the context or in the capsule, whatever was compacted away.

use std::collections::HashSet;

use ctxkeeper::core::capsule::Capsule;
use ctxkeeper::core::engine::{
    Budget, CompactionReason, ContextState, Engine, PlanOutcome, PlanRequest, presets,
};
use ctxkeeper::core::fidelity::normalize;
use ctxkeeper::core::model::{CheckRules, Message, Part, Role, check};
use ctxkeeper::core::summary::Summary;
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use proptest::prelude::*;

/// Something that happens between two compactions.
#[derive(Debug, Clone)]
enum Happening {
    /// The user writes (text id).
    Ask(u16),
    /// The harness sends boilerplate.
    Boilerplate,
    /// The agent calls a file tool on a path (tool index, path id), and it succeeds or fails.
    Call(u8, u8, bool),
    /// The agent updates its plan (version).
    Plan(u16),
}

fn happening() -> impl Strategy<Value = Happening> {
    prop_oneof![
        3 => any::<u16>().prop_map(Happening::Ask),
        1 => Just(Happening::Boilerplate),
        6 => (0u8..5, 0u8..12, any::<bool>()).prop_map(|(t, p, ok)| Happening::Call(t, p, ok)),
        1 => any::<u16>().prop_map(Happening::Plan),
    ]
}

fn ask_text(id: u16) -> String {
    format!("Request {id}: please make sure the exporter keeps field order stable")
}

fn path(id: u8) -> String {
    format!("src/module_{id}/lib.rs")
}

fn plan_arguments(version: u16) -> String {
    format!(r#"{{"plan":[{{"status":"in_progress","step":"Step {version}"}}]}}"#)
}

/// Appends the messages of one happening; returns the user text it adds, if any.
fn push(state: &mut ContextState, happening: &Happening, n: usize) {
    match happening {
        Happening::Ask(id) => state.push(Message::user(ask_text(*id))),
        Happening::Boilerplate => state.push(Message::user(
            "<system-reminder>\nThe user opened a file in the IDE.\n</system-reminder>",
        )),
        Happening::Call(tool, file, ok) => {
            let id = format!("call_{n}");
            let (name, arguments) = match tool {
                0 => ("Read", format!(r#"{{"file_path":"{}"}}"#, path(*file))),
                1 => (
                    "Edit",
                    format!(
                        r#"{{"file_path":"{}","old_string":"a","new_string":"b"}}"#,
                        path(*file)
                    ),
                ),
                2 => ("Bash", format!(r#"{{"command":"rm -f {}"}}"#, path(*file))),
                3 => (
                    "shell",
                    format!(
                        r#"{{"command":["bash","-lc","sed -n '1,40p' {}"]}}"#,
                        path(*file)
                    ),
                ),
                _ => (
                    "Write",
                    format!(r#"{{"file_path":"{}","content":"x"}}"#, path(*file)),
                ),
            };
            state.push(Message::assistant_with_calls(
                "",
                vec![Part::tool_call(&id, name, arguments)],
            ));
            let output = format!(
                "{} {}",
                if *ok { "ok" } else { "error: failed" },
                "word ".repeat(60)
            );
            let mut result = Message::tool_result(&id, output);
            if let Some(Part::ToolResult { is_error, .. }) = result.parts.first_mut() {
                *is_error = !ok;
            }
            state.push(result);
        }
        Happening::Plan(version) => {
            let id = format!("plan_{n}");
            state.push(Message::assistant_with_calls(
                "",
                vec![Part::tool_call(&id, "TodoWrite", plan_arguments(*version))],
            ));
            state.push(Message::tool_result(&id, "Todos updated"));
        }
    }
}

fn engine() -> Engine {
    let mut policy = presets::preset("default").expect("preset");
    // Compact deep every time, so that most of each batch leaves the context.
    policy.target_ratio = 0.01;
    Engine::new(
        policy,
        TokenModel::for_model("gpt-4o", &Profiles::builtin()),
    )
}

/// Runs one forced compaction as a host would: every item archived, every summary written.
fn compact(engine: &Engine, state: &mut ContextState, budget: &Budget, round: usize) -> bool {
    let request = PlanRequest {
        force: Some(CompactionReason::Manual),
        ..PlanRequest::default()
    };
    let Some(plan) = engine.plan(state, budget, &request) else {
        return false;
    };
    let refs = (0..plan.archive.len())
        .map(|i| format!("sessions/s/context-{round}-{i}.jsonl"))
        .collect();
    let summaries = plan
        .summaries
        .iter()
        .map(|r| Summary::empty(&r.schema, "test"))
        .collect();
    engine.apply(state, plan, PlanOutcome { refs, summaries });
    true
}

/// The paths and the plan the new messages touched.
fn touched(happenings: &[Happening]) -> (HashSet<String>, bool) {
    let mut paths = HashSet::new();
    let mut plan = false;
    for happening in happenings {
        match happening {
            Happening::Call(_, file, _) => {
                paths.insert(path(*file));
            }
            Happening::Plan(_) => plan = true,
            _ => {}
        }
    }
    (paths, plan)
}

fn assert_grows_only_by(before: &Capsule, after: &Capsule, batch: &[Happening]) {
    let (paths, plan) = touched(batch);
    for old in &before.instructions {
        let new = after
            .instructions
            .iter()
            .find(|i| i.log_index == old.log_index)
            .unwrap_or_else(|| panic!("instruction {} lost", old.log_index));
        assert_eq!(new.text, old.text, "an instruction's words changed");
        if old.reference.is_some() {
            assert_eq!(new.reference, old.reference, "a reference changed");
        }
    }
    for old in &before.files {
        let new = after
            .files
            .iter()
            .find(|f| f.path == old.path)
            .unwrap_or_else(|| panic!("file {} lost", old.path));
        if !paths.contains(&old.path) {
            assert_eq!(new, old, "a file no new call touched changed");
        }
    }
    if !plan {
        assert_eq!(
            after.plan, before.plan,
            "the plan changed without a plan call"
        );
    }
    assert!(after.boilerplate >= before.boilerplate);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn the_capsule_survives_consecutive_compactions(
        batches in prop::collection::vec(prop::collection::vec(happening(), 3..10), 3..9)
    ) {
        let engine = engine();
        let budget = Budget { window: 60_000, fixed_tokens: 0 };
        let mut state = ContextState::default();
        state.push(Message::system("You are a coding agent."));
        state.push(Message::user(ask_text(u16::MAX)));
        let mut asked: Vec<String> = vec![ask_text(u16::MAX)];
        let mut n = 0;
        let mut latest_plan: Option<String> = None;
        let mut compactions = 0;
        for (round, batch) in batches.iter().enumerate() {
            let before = state.capsule().cloned();
            for happening in batch {
                push(&mut state, happening, n);
                n += 1;
                match happening {
                    Happening::Ask(id) => asked.push(ask_text(*id)),
                    Happening::Plan(version) => latest_plan = Some(plan_arguments(*version)),
                    _ => {}
                }
            }
            if !compact(&engine, &mut state, &budget, round) {
                continue;
            }
            compactions += 1;
            let messages = state.to_messages();
            prop_assert!(check(&messages, &CheckRules::openai()).is_empty());
            let after = state.capsule().cloned();
            if let (Some(before), Some(after)) = (&before, &after) {
                assert_grows_only_by(before, after, batch);
            }
            // Everything the user said is visible: live, or in the capsule.
            let visible: String = messages
                .iter()
                .filter(|m| m.role == Role::User)
                .map(|m| normalize(&m.text()))
                .collect::<Vec<_>>()
                .join(" ");
            for text in &asked {
                prop_assert!(visible.contains(&normalize(text)), "lost: {text}");
            }
            let capsule_text: String = state
                .entries
                .iter()
                .filter(|e| e.meta.capsule.is_some())
                .map(|e| e.message.text())
                .collect();
            prop_assert!(!capsule_text.contains("system-reminder"), "boilerplate in the capsule");
            // The latest plan is visible verbatim.
            if let Some(plan) = &latest_plan {
                let all: String = messages
                    .iter()
                    .map(|m| format!("{} {}", m.text(), m.tool_calls().map(|c| c.2).collect::<String>()))
                    .collect();
                prop_assert!(all.contains(plan.as_str()), "plan lost");
            }
        }
        // The first request left the context at the first compaction: the capsule holds it.
        if compactions > 0 {
            let capsule = state.capsule();
            prop_assert!(capsule.is_some_and(|c| c.instructions.iter().any(|i| i.reference.is_some())));
        }
    }
}
