//! Behaviour of the engine and of every preset, as their documents describe it.

use super::fill::FILL_OPEN;
use super::*;
use crate::model::{CheckRules, check};
use crate::summary::SummarySchema;
use crate::tokens::Profiles;

fn model() -> TokenModel {
    TokenModel::for_model("gpt-4o", &Profiles::builtin())
}

fn engine(name: &str) -> Engine {
    Engine::new(presets::preset(name).unwrap_or_default(), model())
}

/// Runs a plan as a host would: every archive item gets `ref-N`, every summary request an
/// extractive-looking stand-in naming how many messages it covered.
fn execute(
    engine: &Engine,
    state: &mut ContextState,
    plan: Plan,
) -> (Vec<Event>, Vec<ArchiveItem>, Vec<SummaryRequest>) {
    let archive = plan.archive.clone();
    let requests = plan.summaries.clone();
    let refs = (0..archive.len())
        .map(|i| format!("sessions/s/ref-{i}"))
        .collect();
    let summaries = requests
        .iter()
        .map(|r| {
            let mut summary = Summary::empty(&r.schema, "test");
            if let Some(field) = r.schema.fields.first() {
                summary.set(
                    &field.name,
                    format!("covered {} messages", r.messages.len()),
                );
            }
            summary
        })
        .collect();
    let events = engine.apply(state, plan, PlanOutcome { refs, summaries });
    (events, archive, requests)
}

fn round(state: &mut ContextState, id: &str, tool: &str, output: &str) {
    state.push(Message::tool_call(id, tool, "{\"q\":\"x\"}"));
    state.push(Message::tool_result(id, output));
}

/// A system prompt, one user ask, and `rounds` tool rounds with outputs of about `words` words.
/// The budget of a window of `window` tokens, `fixed_tokens` of them outside the context.
fn budget(window: u64, fixed_tokens: u64) -> Budget {
    Budget {
        window,
        fixed_tokens,
    }
}

/// The plan of a compaction the engine triggers for `reason`.
fn planned(
    engine: &Engine,
    state: &mut ContextState,
    budget: &Budget,
    reason: CompactionReason,
) -> Plan {
    assert_eq!(engine.triggered(state, budget, None), Some(reason));
    plan_now(engine, state, budget)
}

/// The plan of the compaction the engine makes now.
fn plan_now(engine: &Engine, state: &mut ContextState, budget: &Budget) -> Plan {
    engine
        .plan(state, budget, &PlanRequest::default())
        .expect("a plan")
}

/// The default policy with summarizing as its only stage, ten tool rounds, the budget of a
/// 2,500-token window and the compaction the engine plans for them.
fn summarized_rounds() -> (Engine, ContextState, Budget, Plan) {
    let mut config = presets::preset("default").unwrap_or_default();
    config.stages = vec![super::presets::summarize_stage()];
    let engine = Engine::new(config, model());
    let mut state = agent_session(10, 300);
    let budget = budget(2_500, 0);
    let plan = plan_now(&engine, &mut state, &budget);
    (engine, state, budget, plan)
}

/// An overflow recovery down to `target` tokens.
fn overflow_to(target: u64) -> PlanRequest {
    PlanRequest {
        force: Some(CompactionReason::Overflow),
        target_tokens: Some(target),
        ..PlanRequest::default()
    }
}

fn agent_session(rounds: usize, words: usize) -> ContextState {
    let mut state = ContextState::default();
    state.push(Message::system("You are a careful agent."));
    state.push(Message::user("Please investigate the failing build."));
    for i in 0..rounds {
        round(
            &mut state,
            &format!("call_{i}"),
            "shell",
            &format!("output {i}: {}", "word ".repeat(words)),
        );
    }
    state
}

fn assert_valid(state: &ContextState) {
    let violations = check(&state.to_messages(), &CheckRules::history());
    assert!(violations.is_empty(), "{violations:?}");
    for message in state.messages() {
        assert!(
            !message.text().contains(FILL_OPEN),
            "unfilled placeholder: {message:?}"
        );
    }
}

/// How many of the last API rounds are exactly as they were in `original`.
fn verbatim_tail_rounds(before: &[Message], after: &[Message]) -> usize {
    let rounds = crate::model::api_rounds(before);
    rounds
        .iter()
        .rev()
        .take_while(|r| {
            let slice = &before[r.start..r.end];
            after.windows(slice.len()).any(|w| w == slice)
        })
        .count()
}

fn stages_of(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .find_map(|e| match e {
            Event::ContextCompactionEnd { stages, .. } => Some(stages.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn below_the_trigger_nothing_is_planned() {
    let engine = engine("default");
    let mut state = agent_session(3, 20);
    let budget = budget(100_000, 500);
    assert_eq!(engine.triggered(&mut state, &budget, None), None);
    assert!(
        engine
            .plan(&mut state, &budget, &PlanRequest::default())
            .is_none()
    );
}

#[test]
fn default_masks_old_outputs_first_and_keeps_the_recent_rounds_verbatim() {
    // With a shallow target, clearing old outputs is enough and nothing is summarized.
    let mut config = presets::preset("default").unwrap_or_default();
    config.target_ratio = 0.45;
    config.accounting = Accounting::Exact;
    let engine = Engine::new(config, model());
    let mut state = agent_session(12, 300);
    let before = state.to_messages();
    let budget = budget(4_000, 0);
    let plan = engine.plan(&mut state, &budget, &PlanRequest::default());
    let Some(plan) = plan else {
        panic!("expected a plan")
    };
    assert_eq!(plan.stages.first().map(String::as_str), Some("mask"));
    let (events, archive, _) = execute(&engine, &mut state, plan);
    assert_valid(&state);
    let kept = verbatim_tail_rounds(&before, &state.to_messages());
    assert!(
        kept >= engine.config().keep_recent_rounds && kept >= 2,
        "{kept}"
    );
    // Every cleared output is archived whole and its placeholder names the reference.
    let ArchiveItem::ToolResult { call_id, content } = &archive[0] else {
        panic!("{archive:?}")
    };
    assert_eq!(call_id, "call_0");
    assert_eq!(content, &before[3].text());
    assert_eq!(stages_of(&events), vec!["mask".to_string()]);
    let placeholder = state.entries[3].message.text();
    assert!(placeholder.starts_with(CLEARED_PREFIX), "{placeholder}");
    assert!(placeholder.contains("sessions/s/ref-0"), "{placeholder}");
    assert!(
        matches!(events.last(), Some(Event::ContextCompactionEnd { tokens_after, tokens_before, .. }) if tokens_after < tokens_before)
    );
}

#[test]
fn summarizing_keeps_instructions_first_the_current_ask_and_pairs_intact() {
    let (engine, mut state, budget, plan) = summarized_rounds();
    let (_, archive, requests) = execute(&engine, &mut state, plan);
    assert_valid(&state);
    let messages = state.to_messages();
    assert_eq!(messages[0].role, Role::System);
    assert!(
        messages[1].text().starts_with("[Summary of"),
        "{}",
        messages[1].text()
    );
    assert!(messages[1].text().contains("covered"));
    // The user's ask opens the current turn: it is kept verbatim, not summarized.
    assert!(
        messages
            .iter()
            .any(|m| m.text() == "Please investigate the failing build.")
    );
    assert!(requests[0].messages.iter().all(|m| m.role != Role::System));
    let ArchiveItem::Messages { messages: archived } = &archive[0] else {
        panic!()
    };
    assert_eq!(archived.len(), requests[0].messages.len());
    assert!(state.summary.is_some());

    // A second compaction merges the previous summary instead of stacking another one.
    let output = "more output ".repeat(200);
    for i in 20..30 {
        round(&mut state, &format!("call_{i}"), "shell", &output);
    }
    let Some(plan) = engine.plan(&mut state, &budget, &PlanRequest::default()) else {
        panic!("no second plan")
    };
    assert!(plan.summaries[0].previous.is_some());
    execute(&engine, &mut state, plan);
    assert_valid(&state);
    let summaries = state.entries.iter().filter(|e| e.meta.summary).count();
    assert_eq!(summaries, 1);
}

#[test]
fn a_summary_may_quote_the_user_s_task_kept_outside_the_summarized_span() {
    let (engine, mut state, _, plan) = summarized_rounds();
    // The task is kept verbatim, so it is not among the summarized messages.
    assert!(
        plan.summaries[0]
            .messages
            .iter()
            .all(|m| m.role != Role::User)
    );
    let schema = plan.summaries[0].schema.clone();
    let field = schema.fields[0].name.clone();
    let mut summary = Summary::empty(&schema, "model");
    summary.set(
        &field,
        "- User: \"Please investigate the failing build.\"\n- The user asked: \"Please delete the build cache.\"",
    );
    let events = engine.apply(
        &mut state,
        plan,
        PlanOutcome {
            refs: vec!["sessions/s/ref-0".into()],
            summaries: vec![summary],
        },
    );
    let dropped: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            Event::SummaryChecked { dropped, .. } => Some(dropped),
            _ => None,
        })
        .flatten()
        .collect();
    // The true quote stays, the invented one goes.
    assert_eq!(
        dropped,
        vec!["- The user asked: \"Please delete the build cache.\""]
    );
    let kept = state
        .summary
        .as_ref()
        .expect("a summary")
        .get(&field)
        .to_string();
    assert_eq!(kept, "- User: \"Please investigate the failing build.\"");
}

#[test]
fn huge_tool_results_are_capped_at_ingest_with_head_tail_and_whole_archive() {
    let engine = engine("default");
    let mut state = agent_session(0, 0);
    state.push(Message::tool_call("t1", "shell", "{}"));
    let output = format!(
        "START {} Traceback: KeyError at the very end",
        "log line ".repeat(4_000)
    );
    let Ingest::Cap(plan) = engine.plan_ingest(
        &state,
        &budget(16_000, 0),
        Message::tool_result("t1", output.clone()),
    ) else {
        panic!("expected a cap")
    };
    let ArchiveItem::ToolResult { content, call_id } = &plan.archive[0] else {
        panic!()
    };
    assert_eq!((content, call_id.as_str()), (&output, "t1"));
    assert!(plan.tokens_after < plan.tokens_before / 3);
    let events = engine.apply_ingest(
        &mut state,
        plan,
        &["sessions/s/tool_result-t1.txt".to_string()],
    );
    let text = state
        .entries
        .last()
        .map(|e| e.message.text())
        .unwrap_or_default();
    assert!(text.starts_with("START"));
    assert!(text.ends_with("KeyError at the very end"));
    assert!(text.contains("archived at sessions/s/tool_result-t1.txt"));
    assert!(matches!(&events[0], Event::ToolResultTruncated { call_id, .. } if call_id == "t1"));
    // Small results pass through untouched.
    assert!(matches!(
        engine.plan_ingest(
            &state,
            &Budget {
                window: 16_000,
                fixed_tokens: 0
            },
            Message::tool_result("t1", "ok")
        ),
        Ingest::Ready(_)
    ));
}

#[test]
fn a_usage_report_anchors_the_trigger_on_the_providers_count() {
    // Without a report the estimate fires early on purpose (it may be low); anchored on the
    // provider's count, the trigger applies at its own level.
    let engine = engine("default");
    let mut state = agent_session(40, 120);
    let exact = state.clone().sync_tokens(engine.model());
    // A window whose trigger lies 5 % above the context: past the unanchored firing level.
    let ratio = engine
        .config()
        .trigger_ratio
        .expect("default has a ratio trigger");
    let budget = budget((exact as f64 / (ratio * 0.95)) as u64, 0);
    let trigger = engine.trigger_tokens(&budget).expect("a trigger");
    assert!(exact < trigger, "{exact} vs {trigger}");
    assert!(
        engine
            .triggered(&mut state.clone(), &budget, None)
            .is_some(),
        "unanchored, the estimate fires early"
    );
    let len = state.entries.len();
    state.anchor_usage(len, exact);
    assert!(state.anchored());
    assert_eq!(state.approx_tokens(), exact);
    assert_eq!(engine.triggered(&mut state, &budget, None), None);
    // One more round is estimated on its own; the anchor stands for the rest.
    round(&mut state, "late", "read", &"word ".repeat(50));
    let approx = state.approx_tokens();
    let real = state.clone().sync_tokens(engine.model());
    assert!(approx >= real && approx - real < 40, "{approx} vs {real}");
    // A report past the end of the context is refused; a rewrite forgets the anchor.
    let mut other = state.clone();
    other.anchor_usage(other.entries.len() + 5, 1);
    assert_eq!(other.approx_tokens(), approx);
    let entries = state.entries[2..].to_vec();
    state.replace_entries(entries);
    assert!(!state.anchored());
}

#[test]
fn overflow_recovery_gets_under_the_stated_limit_and_terminates() {
    let engine = engine("default");
    let mut state = agent_session(30, 300);
    let budget = budget(8_000, 200);
    let mut attempts = 0;
    let mut limit = engine.request_tokens(&mut state, &budget);
    while engine.request_tokens(&mut state, &budget) > 4_000 {
        attempts += 1;
        assert!(
            attempts <= engine.config().overflow.max_attempts,
            "recovery did not terminate"
        );
        limit = (limit as f64 * engine.config().overflow.shrink_factor) as u64;
        let request = overflow_to(limit);
        let Some(plan) = engine.plan(&mut state, &budget, &request) else {
            panic!("nothing left to do")
        };
        execute(&engine, &mut state, plan);
        assert_valid(&state);
    }
}

#[test]
fn plan_is_a_dry_run() {
    let engine = engine("default");
    let mut state = agent_session(12, 300);
    let before = state.to_messages();
    let budget = budget(3_000, 0);
    let plan = engine.plan(&mut state, &budget, &PlanRequest::default());
    assert!(plan.is_some_and(
        |p| p.estimated_tokens_after < p.tokens_before && !p.draft_messages().is_empty()
    ));
    assert_eq!(state.to_messages(), before);
}

#[test]
fn memory_placement_and_empty_schema_do_not_break_apply() {
    let mut config = presets::preset("default").unwrap_or_default();
    config.summary.schema = SummarySchema { fields: Vec::new() };
    let engine = Engine::new(config, model());
    let mut state = agent_session(12, 150);
    let budget = budget(2_000, 0);
    let plan = plan_now(&engine, &mut state, &budget);
    // The host lost the summaries: apply still succeeds and marks the summary degraded.
    let refs = (0..plan.archive.len()).map(|i| format!("r{i}")).collect();
    let events = engine.apply(
        &mut state,
        plan,
        PlanOutcome {
            refs,
            summaries: Vec::new(),
        },
    );
    assert_valid(&state);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::ContextCompactionEnd { .. }))
    );
}

/// A recovery under a target nothing can meet used to clear everything down to the system
/// prompt: the task and the output just produced were gone. It keeps both now.
#[test]
fn overflow_never_clears_the_newest_round_or_the_latest_request() {
    for name in ["default", "cowagent", "agentscope", "harness", "reme-auto"] {
        let engine = engine(name);
        // About 20,000 tokens against a window of 8,000.
        let mut state = agent_session(30, 600);
        state.push(Message::user("Now fix the flaky test too."));
        round(&mut state, "last", "shell", &"tail ".repeat(300));
        let before = state.to_messages();
        let budget = budget(8_000, 0);
        let request = overflow_to(50);
        let Some(plan) = engine.plan(&mut state, &budget, &request) else {
            panic!("{name}: no plan")
        };
        execute(&engine, &mut state, plan);
        assert_valid(&state);
        let after = state.to_messages();
        assert_eq!(
            &after[after.len() - 2..],
            &before[before.len() - 2..],
            "{name}: the newest round is kept"
        );
        assert!(
            after
                .iter()
                .any(|m| m.text() == "Now fix the flaky test too."),
            "{name}: the latest request is kept"
        );
    }
}

/// The hysteresis caps the target; without it the target keeps nine tenths of the trigger.
#[test]
fn the_target_is_capped_by_the_hysteresis() {
    let budget = budget(100_000, 0);
    let mut config = presets::preset("cowagent").unwrap_or_default();
    assert_eq!(
        Engine::new(config.clone(), model()).target_tokens(&budget),
        45_000
    );
    config.hysteresis = Some(0.6);
    let engine = Engine::new(config, model());
    assert_eq!(engine.target_tokens(&budget), 30_000);
    assert_eq!(engine.hysteresis_level(&budget), Some(30_000));
    assert!(PolicyConfig::from_toml_str("hysteresis = 1.5").is_err());
}

/// Agentrail caps old results on every step; a result capped by one plan and cleared by a later
/// one must name the archive item of the first plan, not the marker it had while planned.
#[test]
fn references_reused_by_later_plans_are_the_archived_ones() {
    let engine = engine("agentrail");
    let mut state = agent_session(12, 2_000);
    let budget = budget(200_000, 0);
    let Some(plan) = engine.plan(&mut state, &budget, &PlanRequest::default()) else {
        panic!("agentrail caps old results before every call")
    };
    execute(&engine, &mut state, plan);
    for entry in &state.entries {
        for (_, reference) in &entry.meta.result_refs {
            assert!(
                reference.starts_with("sessions/s/ref-"),
                "kept {reference:?} for a later stage"
            );
        }
    }
}

fn with_cost_rule(name: &str) -> Engine {
    let mut config = presets::preset(name).unwrap_or_default();
    config.cost = Some(CostRule::default());
    Engine::new(config, model())
}

/// A state whose growth per step is `growth` and whose last compaction left `after` tokens.
fn growing_state(growth: u64, after: u64) -> ContextState {
    let mut state = agent_session(2, 20);
    for step in 0..6 {
        state.observe_step(10_000 + step * growth);
    }
    state.set_last_compaction_after(after);
    state
}

#[test]
fn the_economic_trigger_follows_growth_and_rewrite_cost() {
    let engine = with_cost_rule("default");
    let budget = budget(100_000, 2_000);
    let configured = engine
        .trigger_tokens(&budget)
        .expect("default has a trigger");
    // Slow growth: a cycle to the fixed trigger would carry a large context for many steps
    // to save one rewrite; shorter cycles bill less.
    let (slow, economics) = engine
        .active_trigger(&growing_state(200, 20_000), &budget)
        .expect("a trigger");
    let economics = economics.expect("growth known: the cost rule places the trigger");
    assert!(slow < configured, "{slow} vs {configured}");
    assert_eq!(economics.trigger, slow);
    assert_eq!(economics.expected_after, 20_000);
    assert!(economics.stable_prefix >= 2_000);
    // Fast growth: frequent compactions would each rewrite the context; the cycle widens up
    // to the configured trigger, never past it (above it lies the summary call's reserve).
    let (fast, _) = engine
        .active_trigger(&growing_state(20_000, 20_000), &budget)
        .expect("a trigger");
    assert_eq!(fast, configured);
    assert!(fast <= hold_ceiling(budget.window));
    // A configured trigger below the economic floor binds: the operator's bound comes first.
    let low = Engine::new(
        engine
            .config()
            .with_overrides("trigger_ratio = 0.2")
            .expect("valid"),
        model(),
    );
    let (bound, _) = low
        .active_trigger(&growing_state(200, 5_000), &budget)
        .expect("a trigger");
    assert_eq!(bound, 20_000);
    // Whatever it picks, the chosen level bills no more per step than the fixed one.
    for growth in [50, 200, 1_000, 3_000, 9_000] {
        for after in [5_000, 20_000, 60_000] {
            let (_, economics) = engine
                .active_trigger(&growing_state(growth, after), &budget)
                .expect("a trigger");
            let e = economics.expect("cost rule active");
            assert!(
                e.billed_per_step <= e.billed_per_step_configured + 1e-9,
                "growth {growth}, after {after}: {e:?}"
            );
            assert!(e.trigger >= budget.window * 3 / 10);
        }
    }
    // Until the growth is known, the fixed trigger applies.
    let fresh = agent_session(2, 20);
    assert_eq!(
        engine.active_trigger(&fresh, &budget),
        Some((configured, None))
    );
}

#[test]
fn a_cost_rule_compaction_reports_its_arithmetic() {
    let engine = with_cost_rule("default");
    let budget = budget(12_000, 0);
    let mut state = ContextState::default();
    state.push(Message::system("You are a careful agent."));
    state.push(Message::user("Please investigate the failing build."));
    let mut compactions = Vec::new();
    let log = "log line ".repeat(60);
    for i in 0..80 {
        round(&mut state, &format!("c{i}"), "read", &log);
        if let Some(plan) = engine.plan(&mut state, &budget, &PlanRequest::default()) {
            let (events, _, _) = execute(&engine, &mut state, plan);
            for event in events {
                if let Event::ContextCompactionEnd {
                    tokens_before,
                    economics,
                    ..
                } = event
                {
                    compactions.push((tokens_before, economics));
                }
            }
        }
        assert!(state.sync_tokens(engine.model()) <= budget.window);
    }
    assert!(compactions.len() >= 2, "{compactions:?}");
    let with_arithmetic: Vec<_> = compactions.iter().filter_map(|(_, e)| *e).collect();
    assert!(!with_arithmetic.is_empty(), "{compactions:?}");
    for (before, economics) in &compactions {
        if let Some(e) = economics {
            // Fired at its own trigger (the estimate fires within a few percent of it).
            assert!(*before * 100 >= e.trigger * 90, "{before} vs {e:?}");
            assert!(e.growth_per_step > 0 && e.cycle_tokens > 0);
        }
    }
    let config = PolicyConfig::from_toml_str("[cost]\ncache_read = 0.0\n").expect_err("bad");
    assert!(config.0.contains("cost.cache_read"), "{config}");
}

/// `seq 1 N`: numbers one per line, about two bytes per token where prose has about four.
fn numbers_one_per_line(n: usize) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

#[test]
fn dense_tool_output_never_outgrows_the_window_under_the_default_estimate() {
    // Under estimated accounting nothing is counted exactly until a compaction: the estimate
    // alone must fire the trigger before the real size passes the window, however dense the
    // output. A bytes-per-token estimate let three such rounds reach 13,175 real tokens in a
    // 12,000-token window without compacting.
    let engine = engine("default");
    assert_eq!(engine.config().accounting, Accounting::Estimate);
    let exact = model();
    let budget = budget(12_000, 300);
    let mut state = ContextState::default();
    state.push(Message::system("You are a careful agent."));
    state.push(Message::user(
        "Count the lines of every log and report the totals.",
    ));
    let mut compactions = 0;
    for i in 0..12 {
        round(
            &mut state,
            &format!("call_{i}"),
            "shell",
            &numbers_one_per_line(1_422),
        );
        if let Some(plan) = engine.plan(&mut state, &budget, &PlanRequest::default()) {
            execute(&engine, &mut state, plan);
            compactions += 1;
        }
        assert_valid(&state);
        let real: u64 = state
            .to_messages()
            .iter()
            .map(|m| u64::from(exact.message_tokens(m)))
            .sum::<u64>()
            + budget.fixed_tokens;
        assert!(
            real <= budget.window,
            "round {i}: {real} real tokens in a {}-token window after {compactions} compactions",
            budget.window
        );
    }
    assert!(compactions >= 2, "{compactions}");
}

#[test]
fn the_estimate_follows_the_density_of_each_message() {
    // One session ratio learned on prose must not carry over to numbers.
    let exact = model();
    let mut state = ContextState::default();
    for i in 0..30 {
        state.push(Message::user(format!(
            "message {i}: the build failed again after the dependency upgrade, please look"
        )));
    }
    state.sync_tokens(&exact);
    state.push(Message::tool_result("call_n", numbers_one_per_line(1_422)));
    let estimated = state.estimate_entry(state.entries.last().expect("pushed"));
    let real = u64::from(exact.message_tokens(&state.entries.last().expect("pushed").message));
    assert!(
        estimated >= real && estimated <= real * 2,
        "estimated {estimated}, real {real}"
    );
}

/// The operator's summary instructions are read from `[summary]`, reach every summary
/// request, and an oversized text is refused with the field's name.
#[test]
fn summary_instructions_are_read_bounded_and_passed_on() {
    let config =
        PolicyConfig::from_toml_str("[summary]\ninstructions = \"Keep every ticket number.\"\n")
            .unwrap_or_default();
    assert_eq!(
        config.summary.instructions.as_deref(),
        Some("Keep every ticket number.")
    );
    let request = Engine::new(config, model()).summary_request(
        vec![Message::user("Hi.")],
        None,
        CompactionReason::Manual,
        None,
    );
    assert_eq!(
        request.instructions.as_deref(),
        Some("Keep every ticket number.")
    );
    let long = format!("[summary]\ninstructions = \"{}\"\n", "x".repeat(4_001));
    let error = PolicyConfig::from_toml_str(&long)
        .err()
        .map(|e| e.to_string());
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("summary.instructions")),
        "{error:?}"
    );
}

/// A capped output keeps, between its head and tail, the lines that carry most: the failing
/// assertion in the middle of a long log survives the cut, the repeated noise does not, and
/// the marker still counts what was omitted and names where the whole output is.
#[test]
fn a_ranked_preview_keeps_the_middle_lines_that_name_errors() {
    let mut log = String::new();
    for i in 0..400 {
        log.push_str(&format!("collecting item {i} ... ok\n"));
        if i == 200 {
            log.push_str("FAILED tests/test_money.py::test_round - AssertionError: 2.67 != 2.68\n");
        }
    }
    let preview = stages::ranked_preview(&log, 1_000, 500, "archive://x");
    assert!(
        preview.contains("AssertionError: 2.67 != 2.68"),
        "{preview}"
    );
    assert!(preview.starts_with("collecting item 0 ... ok"));
    assert!(preview.trim_end().ends_with("collecting item 399 ... ok"));
    assert!(preview.contains("characters omitted; the whole output is archived at archive://x"));
    // Within the room of the plain head + tail preview (markers aside).
    let plain = stages::head_tail_preview(&log, 1_000, 500, "archive://x");
    assert!(!plain.contains("AssertionError"));
    assert!(preview.chars().count() <= plain.chars().count() + 200);
    // The count of omitted characters and the kept characters add up to the whole.
    let omitted: usize = preview
        .split("[… ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the marker counts the omitted characters");
    let head = 1_000 - 350;
    let tail = 500 - 175;
    let kept = "FAILED tests/test_money.py::test_round - AssertionError: 2.67 != 2.68".len();
    assert_eq!(omitted + head + tail + kept, log.chars().count());
    // A text with nothing salient in its middle gets the plain preview.
    let noise = "a b c d e f g\n".repeat(500);
    assert_eq!(
        stages::ranked_preview(&noise, 1_000, 500, "archive://y"),
        stages::head_tail_preview(&noise, 1_000, 500, "archive://y")
    );
}

/// When the tool schemas and the leading instructions nearly fill the window, a tool output
/// that would fit 40 % of the whole window cannot fit beside them: it is capped against the
/// room they leave, with a preview small enough to fit that room. Where they leave most of
/// the window, the cap is the usual 40 % of it.
#[test]
fn an_output_is_capped_to_the_room_a_nearly_full_fixed_prompt_leaves() {
    let engine = engine("default");
    let mut state = ContextState::default();
    state.push(Message::system("You are an agent. ".repeat(300)));
    state.push(Message::user("Run the tests."));
    state.push(Message::tool_call("t1", "shell", "{}"));
    // Numbers one per line: about 3,000 tokens, under 40 % of a 10,000-token window.
    let output: String = (0..1_500).map(|n| format!("{n}\n")).collect();
    let tight = budget(10_000, 6_000);
    let Ingest::Cap(plan) =
        engine.plan_ingest(&state, &tight, Message::tool_result("t1", output.clone()))
    else {
        panic!("a 3,000-token output beside a fixed prompt of about 7,000 tokens must be capped")
    };
    let room = tight.window - tight.fixed_tokens - state.leading_system_tokens();
    assert!(
        plan.tokens_after <= room / 2,
        "the preview fits the room: {} tokens of {room}",
        plan.tokens_after
    );
    let roomy = budget(10_000, 0);
    assert!(matches!(
        engine.plan_ingest(&state, &roomy, Message::tool_result("t1", output)),
        Ingest::Ready(_)
    ));
}

/// Runs plans as a store would archive them: messages append to one context file, each item
/// named by the lines it took (`context.jsonl#La-Lb`), whole outputs get a file of their own.
struct LineArchive {
    lines: usize,
    files: usize,
}

impl LineArchive {
    fn execute(&mut self, engine: &Engine, state: &mut ContextState, plan: Plan) {
        let refs = plan
            .archive
            .iter()
            .map(|item| match item.messages() {
                Some(messages) => {
                    let first = self.lines + 1;
                    self.lines += messages.len();
                    format!("sessions/s/context.jsonl#L{first}-L{}", self.lines)
                }
                None => {
                    self.files += 1;
                    format!("sessions/s/tool_result-{}.txt", self.files)
                }
            })
            .collect();
        let summaries = plan
            .summaries
            .iter()
            .map(|r| Summary::empty(&r.schema, "test"))
            .collect();
        engine.apply(state, plan, PlanOutcome { refs, summaries });
    }
}

#[test]
fn a_summary_that_merges_earlier_ones_names_every_range_it_stands_for() {
    let engine = engine("agentscope");
    let budget = budget(16_000, 0);
    let mut state = agent_session(0, 0);
    let mut archive = LineArchive { lines: 0, files: 0 };
    let mut merges = 0;
    let words = "word ".repeat(300);
    for batch in 0..40 {
        for i in 0..6 {
            let output = format!("output {batch}.{i}: {words}");
            round(&mut state, &format!("call_{batch}_{i}"), "shell", &output);
        }
        let Some(plan) = engine.plan(&mut state, &budget, &PlanRequest::default()) else {
            continue;
        };
        let merging = state.entries.iter().any(|e| e.meta.summary);
        archive.execute(&engine, &mut state, plan);
        let Some(summary) = state.entries.iter().find(|e| e.meta.summary) else {
            continue;
        };
        merges += usize::from(merging);
        let text = summary.message.text();
        // Every summarized message went to the archive, so the summary's range starts at
        // its first line however many summaries it has merged.
        assert!(
            text.contains(&format!(
                "{} messages were offloaded to sessions/s/context.jsonl#L1-L",
                summary.meta.summarized
            )),
            "{text}"
        );
        assert_eq!(
            summary.meta.archived,
            [format!("sessions/s/context.jsonl#L1-L{}", archive.lines)],
            "{text}"
        );
    }
    assert!(
        merges >= 3,
        "only {merges} compactions merged an earlier summary"
    );
}

#[test]
fn a_merged_summary_lists_the_newest_archive_files_and_counts_the_rest() {
    let mut entry = Entry::new(Message::user(
        "[Summary of 9 earlier messages; the originals are archived at c/6.jsonl]",
    ));
    entry.meta.summarized = 9;
    entry.meta.archived = (1..=6).map(|i| format!("c/{i}.jsonl")).collect();
    name_every_summarized_range(&mut entry);
    assert_eq!(
        entry.message.text(),
        "[Summary of 9 earlier messages; the originals are archived at c/3.jsonl, c/4.jsonl, \
         c/5.jsonl, c/6.jsonl (and 2 earlier archives)]"
    );
    assert_eq!(
        entry.meta.archived.len(),
        6,
        "every reference is kept in the entry"
    );
}

#[test]
fn a_replaced_newest_message_keeps_what_the_steps_taught_a_rewrite_forgets_it() {
    let mut state = agent_session(3, 50);
    state.observe_step(1_000);
    state.observe_step(1_400);
    assert_eq!(state.step_growth(), Some(400));
    state.pop_newest();
    assert_eq!(state.trigger_memory().last_step_tokens, Some(1_400));
    assert_eq!(state.step_growth(), Some(400));
    // The growth keeps learning across the replacement.
    state.observe_step(1_800);
    assert_eq!(state.step_growth(), Some(400));
    let entries = state.entries.clone();
    state.replace_entries(entries);
    assert_eq!(state.trigger_memory().last_step_tokens, None);
}

mod seed_documents;
mod seed_presets;
