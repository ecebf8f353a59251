//! Seed behaviours the presets once got wrong, each as its document states it.

use super::*;

/// ReMe auto: "If ratio is 0.76 (76%) and threshold is 0.75, compression will be applied":
/// the compaction that leaves more than 0.75 of the messages' tokens is followed by a
/// compression at once, not when the compacted messages later pass 20,000 tokens.
#[test]
fn reme_auto_compresses_right_after_a_compaction_that_leaves_over_three_quarters() {
    let engine = engine("reme-auto");
    let budget = budget(200_000, 0);
    // Results of about 1,500 tokens, one of 3,000: compaction offloads only that one.
    let mut state = agent_session(0, 0);
    let mut i = 0;
    while engine.triggered(&mut state, &budget, None).is_none() {
        let words = if i == 1 { 3_000 } else { 1_500 };
        round(
            &mut state,
            &format!("r{i}"),
            "shell",
            &"word ".repeat(words),
        );
        i += 1;
    }
    assert!(i > 8, "the loop passed 20,000 tokens after {i} rounds");
    let plan = engine
        .plan(&mut state, &budget, &PlanRequest::default())
        .expect("over the trigger");
    assert_eq!(
        plan.stages,
        vec!["mask".to_string(), "summarize".to_string()],
        "compacted only"
    );
    // At most 0.75 left: compacted, not compressed.
    let mut state = agent_session(0, 0);
    let mut i = 0;
    while engine.triggered(&mut state, &budget, None).is_none() {
        round(
            &mut state,
            &format!("r{i}"),
            "shell",
            &"word ".repeat(3_000),
        );
        i += 1;
    }
    let plan = engine
        .plan(&mut state, &budget, &PlanRequest::default())
        .expect("over the trigger");
    assert_eq!(plan.stages, vec!["mask".to_string()]);
}

/// A context with `pairs` questions answered at length, then (when `ask`) the user's new one.
fn answered(pairs: usize, ask: bool) -> ContextState {
    let mut state = ContextState::default();
    state.push(Message::system("You are a careful analyst."));
    for j in 0..pairs {
        state.push(Message::user(format!("Question {j}")));
        state.push(Message::assistant("figure ".repeat(600)));
    }
    if ask {
        state.push(Message::user(format!("Question {pairs}")));
    }
    state
}

/// Agentrail's minMessages counts the session history at the start of a request: not the
/// system prompt, not the new request itself.
#[test]
fn agentrail_min_messages_counts_the_history_before_the_new_request() {
    let engine = super::seed_presets::agentrail_with_trigger(1_000);
    let budget = budget(200_000, 0);
    // 18 messages of history: with the system prompt and the new ask, 20 in the context.
    let mut state = answered(9, true);
    assert_eq!(state.entries.len(), 20);
    assert_eq!(Engine::history_messages(&state), 18);
    assert_eq!(
        engine.triggered(&mut state, &budget, None),
        Some(CompactionReason::Maintenance)
    );
    let mut state = answered(10, true);
    assert_eq!(Engine::history_messages(&state), 20);
    assert_eq!(
        engine.triggered(&mut state, &budget, None),
        Some(CompactionReason::Tokens)
    );
    // HarnessAgent's message trigger is unchanged: 30 messages, the system prompt apart.
    let harness = self::engine("harness");
    let mut state = answered(14, true);
    assert_eq!(state.entries.len(), 30);
    assert_eq!(harness.triggered(&mut state, &budget, None), None);
    state.push(Message::assistant("An answer."));
    assert_eq!(
        harness.triggered(&mut state, &budget, None),
        Some(CompactionReason::Messages)
    );
}

/// HarnessAgent's maxArgLength bounds each argument: a `write_file` body beside its path
/// keeps its first 2,000 characters, and a call whose fields are each under the limit stays
/// whole however long the call.
#[test]
fn harness_truncates_each_argument_to_max_arg_length() {
    let engine = engine("harness");
    let mut state = ContextState::default();
    state.push(Message::user("write the files"));
    let long: String = (0..5_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let under = "u".repeat(1_990);
    for i in 0..16 {
        let body = if i == 3 { &under } else { &long };
        let args = serde_json::json!({ "path": format!("f{i}.txt"), "content": body }).to_string();
        state.push(Message::tool_call(format!("w{i}"), "write_file", args));
        state.push(Message::tool_result(format!("w{i}"), "written"));
    }
    let budget = budget(1_000_000, 0);
    let plan = engine
        .plan(&mut state, &budget, &PlanRequest::default())
        .expect("over 30 messages");
    let (_, _, requests) = execute(&engine, &mut state, plan);
    let contents: Vec<String> = requests[0]
        .messages
        .iter()
        .flat_map(|m| m.tool_calls().map(|(_, _, args)| args.to_string()))
        .map(|args| {
            let value: serde_json::Value = serde_json::from_str(&args).unwrap_or_default();
            value["content"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    assert!(contents.len() >= 4, "{}", contents.len());
    for (i, content) in contents.iter().enumerate() {
        if i == 3 {
            assert_eq!(content, &under, "a call with no argument over the limit");
        } else {
            assert!(
                content.starts_with(&long[..2_000])
                    && content[2_000..].starts_with("... [truncated] ..."),
                "call {i}: {content:.80}…{}",
                &content[content.len().min(1_990)..content.len().min(2_040)]
            );
        }
    }
}

/// Agentrail: a prompt-too-long (here the request over the window after the request's
/// reactive allowance is spent) is met by a full compaction: every round but the last
/// `preserveRecentApiRounds` = 2 summarized.
#[test]
fn agentrail_overflow_recovery_is_a_full_compaction() {
    let engine = engine("agentrail");
    let mut state = agent_session(31, 600);
    let budget = budget(20_000, 0);
    let before = state.to_messages();
    let request = PlanRequest {
        force: Some(CompactionReason::Overflow),
        target_tokens: Some(12_000),
        attempt: 1,
        ..PlanRequest::default()
    };
    let plan = engine
        .plan(&mut state, &budget, &request)
        .expect("a recovery");
    let (_, _, requests) = execute(&engine, &mut state, plan);
    assert_eq!(requests[0].reason, SummaryReason::Overflow);
    let after = state.to_messages();
    let rounds = crate::model::api_rounds(&after)
        .iter()
        .filter(|r| after[r.start..r.end].iter().any(|m| m.has_tool_results()))
        .count();
    assert_eq!(rounds, 2, "rounds left after the recovery");
    assert_eq!(verbatim_tail_rounds(&before, &after), 2);
    assert_valid(&state);
}
