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
use proptest::test_runner::FileFailurePersistence;

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
            state.push(Message::tool_call(&id, name, arguments));
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
            state.push(Message::tool_call(
                &id,
                "TodoWrite",
                plan_arguments(*version),
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

/// Runs the batches through the engine, compacting after each; checks every invariant.
/// Returns, per batch, whether a compaction ran after it.
fn run(batches: &[Vec<Happening>]) -> Result<Vec<bool>, TestCaseError> {
    let engine = engine();
    let budget = Budget {
        window: 60_000,
        fixed_tokens: 0,
    };
    let mut state = ContextState::default();
    state.push(Message::system("You are a coding agent."));
    state.push(Message::user(ask_text(u16::MAX)));
    let mut asked: Vec<String> = vec![ask_text(u16::MAX)];
    let mut n = 0;
    let mut latest_plan: Option<String> = None;
    let mut compactions = 0;
    let mut since: Vec<Happening> = Vec::new();
    let mut ran = Vec::new();
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
        // The capsule reads new messages only when a compaction runs: a batch after which
        // none ran is read by the next one that does, together with its own.
        since.extend(batch.iter().cloned());
        let compacted = compact(&engine, &mut state, &budget, round);
        ran.push(compacted);
        if !compacted {
            continue;
        }
        compactions += 1;
        let messages = state.to_messages();
        prop_assert!(check(&messages, &CheckRules::openai()).is_empty());
        let after = state.capsule().cloned();
        if let (Some(before), Some(after)) = (&before, &after) {
            assert_grows_only_by(before, after, &since);
        }
        since.clear();
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
        prop_assert!(
            !capsule_text.contains("system-reminder"),
            "boilerplate in the capsule"
        );
        // The latest plan is visible verbatim.
        if let Some(plan) = &latest_plan {
            let all: String = messages
                .iter()
                .map(|m| {
                    format!(
                        "{} {}",
                        m.text(),
                        m.tool_calls().map(|c| c.2).collect::<String>()
                    )
                })
                .collect();
            prop_assert!(all.contains(plan.as_str()), "plan lost");
        }
    }
    // Every request of the user that left the context is in the capsule with the reference
    // of its archive.
    if compactions > 0 {
        let live: HashSet<u64> = state
            .entries
            .iter()
            .filter_map(|e| e.meta.log_index)
            .collect();
        let capsule = state.capsule();
        for instruction in capsule.iter().flat_map(|c| &c.instructions) {
            prop_assert!(
                live.contains(&instruction.log_index) || instruction.reference.is_some(),
                "request at {} left without a reference",
                instruction.log_index
            );
        }
        // The session's first request, archived or live, is never lost.
        prop_assert!(
            live.contains(&1)
                || capsule.is_some_and(|c| c
                    .instructions
                    .iter()
                    .any(|i| i.log_index == 1 && i.reference.is_some()))
        );
    }
    Ok(ran)
}

proptest! {
    // A failing case is written beside this file (a test file has no lib.rs for proptest to
    // find); a case worth keeping becomes an explicit test below.
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/capsule_props.proptest-regressions",
        ))),
        .. ProptestConfig::default()
    })]

    #[test]
    fn the_capsule_survives_consecutive_compactions(
        batches in prop::collection::vec(prop::collection::vec(happening(), 3..10), 3..9)
    ) {
        run(&batches)?;
    }
}

/// Found by the property: the third batch re-issues the plan but its compaction has nothing to
/// do (every message is recent), so the capsule reads that plan call at the fourth batch's
/// compaction, whose own batch has no plan call. The capsule is right (the newest plan call
/// moved from log index 16 to 19); the property has to judge a compaction by everything
/// since the previous compaction that ran, not by the last batch alone.
#[test]
fn a_plan_call_in_a_batch_without_a_compaction_counts_at_the_next() {
    use Happening::{Ask, Call, Plan};
    let batches = vec![
        vec![Call(0, 0, false), Plan(0), Call(0, 4, false)],
        vec![
            Call(1, 0, false),
            Call(1, 0, false),
            Call(0, 0, false),
            Call(1, 0, false),
            Plan(0),
        ],
        vec![Ask(0), Plan(0), Ask(0)],
        vec![Ask(0), Ask(0), Ask(18429)],
    ];
    let ran = run(&batches).expect("invariants hold");
    // The plan's first batch does not compact and the last one does. Since the capsule
    // quotes the plan in a fence (a larger capsule), the third batch compacts as well, so
    // this input no longer isolates the original ordering; the invariants above still
    // judge every compaction by everything since the previous one.
    assert!(!ran[0] && ran[3], "{ran:?}");
}
