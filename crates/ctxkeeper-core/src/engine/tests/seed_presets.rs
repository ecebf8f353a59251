//! The seed presets (AgentScope, ReMe, Agentrail, CowAgent, Harness) behaving as their
//! documents say: each preset's stages, archive layouts and events.

use super::*;

#[test]
fn agentscope_keeps_a_tenth_of_the_window_of_recent_conversation() {
    let engine = engine("agentscope");
    let mut state = agent_session(20, 150);
    let budget = budget(4_000, 300);
    let plan = planned(&engine, &mut state, &budget, CompactionReason::Tokens);
    execute(&engine, &mut state, plan);
    assert_valid(&state);
    let model = model();
    let summary_at = state
        .entries
        .iter()
        .position(|e| e.meta.summary)
        .unwrap_or(0);
    let kept: u64 = state.entries[summary_at + 1..]
        .iter()
        .map(|e| u64::from(model.message_tokens(&e.message)))
        .sum();
    assert!(kept >= 400, "kept {kept} tokens, reserve is 400");
    let text = state.entries[summary_at].message.text();
    assert!(text.contains("offloaded to sessions/s/ref-0"), "{text}");
}

#[test]
fn reme_compact_replaces_only_big_tool_messages_by_a_pointer() {
    let engine = engine("reme-compact");
    let mut state = agent_session(0, 0);
    round(&mut state, "small", "ls", "a b c");
    round(&mut state, "big", "cat", &"token ".repeat(9_000));
    for i in 0..30 {
        round(&mut state, &format!("r{i}"), "ls", &"word ".repeat(700));
    }
    state.push(Message::assistant("done"));
    let budget = budget(200_000, 0);
    let plan = planned(&engine, &mut state, &budget, CompactionReason::Tokens);
    assert!(
        plan.summaries.is_empty(),
        "compact mode never calls a model"
    );
    let (_, archive, _) = execute(&engine, &mut state, plan);
    assert_valid(&state);
    assert_eq!(state.entries[3].message.text(), "a b c");
    assert!(state.entries[5].message.text().starts_with(CLEARED_PREFIX));
    assert!(
        archive
            .iter()
            .all(|a| matches!(a, ArchiveItem::ToolResult { content, .. } if content.len() > 2_000))
    );
}

#[test]
fn reme_compress_summarizes_into_a_state_snapshot_and_keeps_two_messages() {
    let engine = engine("reme-compress");
    let mut state = agent_session(40, 700);
    let last_two: Vec<Message> = state.to_messages()[state.entries.len() - 2..].to_vec();
    let budget = budget(200_000, 0);
    let plan = plan_now(&engine, &mut state, &budget);
    let (_, _, requests) = execute(&engine, &mut state, plan);
    let names = field_names(&requests[0].schema);
    assert_eq!(names, ["overall_goal", "key_knowledge", "recent_actions"]);
    assert!(requests[0].previous.is_none());
    let messages = state.to_messages();
    assert_eq!(&messages[messages.len() - 2..], &last_two[..]);
    assert_valid(&state);
}

#[test]
fn reme_auto_compresses_only_when_compaction_saved_too_little() {
    let engine = engine("reme-auto");
    let budget = budget(200_000, 0);
    // Big tool outputs: compaction alone removes most tokens, no summary call.
    let mut state = agent_session(12, 3_000);
    let plan = plan_now(&engine, &mut state, &budget);
    assert_eq!(plan.stages, vec!["mask".to_string()]);
    // Many small outputs: compaction finds nothing big, so the prefix is compressed.
    let mut state = agent_session(120, 180);
    let plan = plan_now(&engine, &mut state, &budget);
    assert_eq!(plan.stages, vec!["summarize".to_string()]);
}

#[test]
fn agentrail_reactive_micro_summarizes_only_the_oldest_rounds() {
    let engine = engine("agentrail");
    let mut state = agent_session(10, 300);
    let budget = budget(10_000, 0);
    assert_eq!(
        engine.triggered(&mut state, &budget, Some(8_600)),
        Some(CompactionReason::ReactiveMicro)
    );
    assert_eq!(
        engine.triggered(&mut state, &budget, Some(9_300)),
        Some(CompactionReason::ReactiveFull)
    );
    let request = PlanRequest {
        reported_usage: Some(8_600),
        ..PlanRequest::default()
    };
    let Some(plan) = engine.plan(&mut state, &budget, &request) else {
        panic!()
    };
    let (_, _, requests) = execute(&engine, &mut state, plan);
    // The two oldest rounds: their assistant calls and results (the user's ask stays).
    assert_eq!(requests[0].messages.len(), 4);
    assert_eq!(requests[0].reason, SummaryReason::ReactiveMicro);
    assert_valid(&state);
}

#[test]
fn agentrail_allows_at_most_three_reactive_compactions_per_request() {
    let engine = engine("agentrail");
    let mut state = agent_session(30, 300);
    let budget = budget(10_000, 0);
    let request = PlanRequest {
        reported_usage: Some(8_600),
        ..PlanRequest::default()
    };
    for _ in 0..3 {
        let Some(plan) = engine.plan(&mut state, &budget, &request) else {
            panic!("a reactive micro compaction within the bound")
        };
        assert_eq!(plan.reason, CompactionReason::ReactiveMicro);
        execute(&engine, &mut state, plan);
    }
    // The fourth in the same request is refused, however high the usage (only the
    // per-call result cap, `Maintenance`, still runs).
    assert_eq!(
        engine.triggered(&mut state, &budget, Some(9_900)),
        Some(CompactionReason::Maintenance)
    );
    // A new user request starts a new allowance.
    state.push(Message::user("Now fix it."));
    assert_eq!(
        engine.triggered(&mut state, &budget, Some(8_600)),
        Some(CompactionReason::ReactiveMicro)
    );
}

#[test]
fn cowagent_drops_the_oldest_half_of_turns_into_memory() {
    let engine = engine("cowagent");
    let mut state = ContextState::default();
    state.push(Message::system("rules"));
    for t in 0..22 {
        state.push(Message::user(format!("question {t}")));
        round(&mut state, &format!("c{t}"), "search", "result");
        state.push(Message::assistant(format!("answer {t}")));
    }
    let budget = budget(128_000, 0);
    let plan = planned(&engine, &mut state, &budget, CompactionReason::Turns);
    let (_, _, requests) = execute(&engine, &mut state, plan);
    assert_eq!(
        requests.len(),
        1,
        "the dropped turns are summarized (into memory)"
    );
    let texts: Vec<String> = state.messages().map(Message::text).collect();
    assert!(
        !texts.iter().any(|t| t.starts_with("[Summary")),
        "memory placement adds no summary message"
    );
    assert_eq!(texts[1], "question 11");
    assert_valid(&state);
}

#[test]
fn cowagent_cuts_historical_results_head_and_tail_but_not_the_current_turn() {
    let engine = engine("cowagent");
    let mut state = ContextState::default();
    state.push(Message::user("first"));
    headed_result(&mut state, "old", "x");
    state.push(Message::assistant("ok"));
    state.push(Message::user("second"));
    headed_result(&mut state, "new", "y");
    let budget = budget(128_000, 0);
    let plan = plan_now(&engine, &mut state, &budget);
    assert_eq!(plan.reason, CompactionReason::Maintenance);
    execute(&engine, &mut state, plan);
    let old = state.entries[2].message.text();
    assert!(
        old.starts_with("HEAD") && old.ends_with("TAIL") && old.len() < 21_000,
        "{}",
        old.len()
    );
    assert!(state.entries[6].message.text().len() > 30_000);
}

#[test]
fn harness_truncates_arguments_and_keeps_the_last_ten_messages() {
    let engine = engine("harness");
    let mut state = ContextState::default();
    state.push(Message::user("write the files"));
    let body = "z".repeat(5_000);
    for i in 0..16 {
        let args = serde_json::json!({ "path": format!("f{i}.txt"), "content": body }).to_string();
        state.push(Message::tool_call(format!("w{i}"), "write_file", args));
        state.push(Message::tool_result(format!("w{i}"), "written"));
    }
    let budget = budget(1_000_000, 0);
    let plan = planned(&engine, &mut state, &budget, CompactionReason::Messages);
    assert_eq!(
        plan.stages,
        vec!["truncate_args".to_string(), "summarize".to_string()]
    );
    let (_, _, requests) = execute(&engine, &mut state, plan);
    let names = field_names(&requests[0].schema);
    assert_eq!(
        names,
        ["session_intent", "summary", "artifacts", "next_steps"]
    );
    assert_valid(&state);
    assert!(state.entries.len() <= 1 + 1 + 10);
    // Truncated arguments stay valid JSON objects, and the calls the summary keeps verbatim
    // keep their bodies whole (truncation only pre-passes what the summary replaces).
    let mut kept_calls = 0;
    for message in state.messages() {
        for (_, _, args) in message.tool_calls() {
            assert!(serde_json::from_str::<serde_json::Value>(args).is_ok_and(|v| v.is_object()));
            assert!(
                args.contains(&body),
                "a kept call was truncated: {args:.120}"
            );
            kept_calls += 1;
        }
    }
    assert_eq!(
        kept_calls, 5,
        "the last ten messages hold five write_file rounds"
    );
}

#[test]
fn harness_evicts_huge_results_except_from_excluded_tools() {
    let engine = engine("harness");
    let mut state = ContextState::default();
    state.push(Message::user("go"));
    state.push(Message::assistant_with_calls(
        "",
        vec![
            Part::tool_call("r", "read_file", "{}"),
            Part::tool_call("s", "execute", "{}"),
        ],
    ));
    let big = "q".repeat(90_000);
    assert!(matches!(
        engine.plan_ingest(
            &state,
            &Budget {
                window: 128_000,
                fixed_tokens: 0
            },
            Message::tool_result("r", big.clone())
        ),
        Ingest::Ready(_)
    ));
    let Ingest::Cap(plan) =
        engine.plan_ingest(&state, &budget(128_000, 0), Message::tool_result("s", big))
    else {
        panic!()
    };
    engine.apply_ingest(&mut state, plan, &["x".to_string()]);
    assert!(
        state
            .entries
            .last()
            .is_some_and(|e| e.message.text().len() < 4_500)
    );
}

#[test]
fn seed_layouts_mark_their_archive_items() {
    let budget = budget(200_000, 0);
    // ReMe: every group of the compression is a group item, numbered from 1.
    let mut state = agent_session(40, 700);
    let plan = engine("reme-compress")
        .plan(&mut state, &budget, &PlanRequest::default())
        .expect("over 20,000 tokens");
    let groups: Vec<(usize, usize)> = plan
        .archive
        .iter()
        .filter_map(|item| match item {
            ArchiveItem::Group { index, total, .. } => Some((*index, *total)),
            _ => None,
        })
        .collect();
    assert!(groups.len() >= 2, "{groups:?}");
    assert!(
        groups
            .iter()
            .enumerate()
            .all(|(i, (index, total))| *index == i + 1 && *total == groups.len())
    );
    assert!(
        plan.draft_messages()
            .iter()
            .any(|m| m.text().starts_with("[Part 1/"))
    );
    // Agentrail: a request-boundary compaction is a compaction item, a reactive one is not.
    let policy = presets::preset("agentrail")
        .unwrap_or_default()
        .with_overrides("trigger_tokens = 5000")
        .unwrap_or_default();
    let agentrail = Engine::new(policy, model());
    let mut state = agent_session(30, 300);
    // The request-boundary compaction runs as the next request arrives.
    state.push(Message::user("Now fix it."));
    let plan = agentrail
        .plan(&mut state, &budget, &PlanRequest::default())
        .expect("over the trigger");
    assert!(
        plan.archive
            .iter()
            .any(|i| matches!(i, ArchiveItem::Compaction { .. }))
    );
    let reactive = PlanRequest {
        force: Some(CompactionReason::ReactiveMicro),
        ..PlanRequest::default()
    };
    let mut state = agent_session(30, 300);
    let plan = agentrail
        .plan(&mut state, &budget, &reactive)
        .expect("a micro compaction");
    assert!(
        !plan
            .archive
            .iter()
            .any(|i| matches!(i, ArchiveItem::Compaction { .. }))
    );
}

/// Issue 33, item 3: ReMe compact keeps the newest message (`keep_recent_count` = 1, the
/// output the model is about to read) and a preview of what it offloads.
#[test]
fn reme_compact_keeps_the_newest_output_and_a_preview_of_the_others() {
    let engine = engine("reme-compact");
    let mut state = agent_session(0, 0);
    let tokens = "token ".repeat(2_500);
    for i in 0..12 {
        let output = format!("FILE{i} {tokens}");
        round(&mut state, &format!("r{i}"), "cat", &output);
    }
    let newest = state.entries.len() - 1;
    let budget = budget(200_000, 0);
    let Some(plan) = engine.plan(&mut state, &budget, &PlanRequest::default()) else {
        panic!("above 20,000 tokens")
    };
    execute(&engine, &mut state, plan);
    assert_valid(&state);
    assert!(
        state.entries[newest]
            .message
            .text()
            .starts_with("FILE11 token")
    );
    let older = state.entries[3].message.text();
    assert!(older.starts_with(CLEARED_PREFIX), "{older}");
    assert!(older.contains("Preview:\nFILE0 token"), "{older}");
}

/// Issue 33, item 4: ReMe compress measures its 20,000 tokens on the messages it may
/// compress (not the system prompt, not the last two), and a round above the group threshold
/// is a group of its own.
#[test]
fn reme_compress_threshold_and_oversized_groups() {
    let engine = engine("reme-compress");
    let budget = budget(200_000, 0);
    // 16k compressible tokens beside a 10k system prompt: over 20k in all, but not compressed.
    let mut state = ContextState::default();
    state.push(Message::system("rules ".repeat(10_000)));
    state.push(Message::user("Please investigate the failing build."));
    let words = "word ".repeat(2_000);
    for i in 0..8 {
        round(&mut state, &format!("c{i}"), "shell", &words);
    }
    assert!(
        engine
            .plan(&mut state, &budget, &PlanRequest::default())
            .is_none_or(|plan| plan.summaries.is_empty()),
        "compressed below 20,000 compressible tokens"
    );
    // Small rounds, one oversized round, small rounds: the big round is its own group.
    let mut state = agent_session(6, 700);
    round(&mut state, "big", "cat", &"token ".repeat(14_000));
    for i in 0..6 {
        round(&mut state, &format!("s{i}"), "ls", &"word ".repeat(700));
    }
    let Some(plan) = engine.plan(&mut state, &budget, &PlanRequest::default()) else {
        panic!("above the threshold")
    };
    let groups: Vec<Vec<String>> = plan
        .summaries
        .iter()
        .map(|r| {
            r.messages
                .iter()
                .flat_map(|m| m.tool_result_ids().map(String::from).collect::<Vec<_>>())
                .collect()
        })
        .collect();
    assert!(
        groups.iter().any(|g| g == &["big".to_string()]),
        "{groups:?}"
    );
}

/// Issue 33, item 5: CowAgent's aggressive trim caps user text at 10,000 characters, and its
/// historical truncation does not cut its own preview again on a later step.
#[test]
fn cowagent_caps_user_text_on_overflow_and_never_recuts_a_preview() {
    let engine = engine("cowagent");
    let mut state = ContextState::default();
    state.push(Message::user(format!("START {} END", "q".repeat(30_000))));
    let budget = budget(9_000, 0);
    let request = overflow_to(8_000);
    let Some(plan) = engine.plan(&mut state, &budget, &request) else {
        panic!("an overflow must do something")
    };
    execute(&engine, &mut state, plan);
    let text = state.entries[0].message.text();
    assert!(text.chars().count() < 10_700, "{}", text.chars().count());
    assert!(text.starts_with("START") && text.ends_with("END"));

    let mut state = ContextState::default();
    state.push(Message::user("first"));
    headed_result(&mut state, "old", "x");
    state.push(Message::assistant("ok"));
    state.push(Message::user("second"));
    let budget = self::budget(128_000, 0);
    let Some(plan) = engine.plan(&mut state, &budget, &PlanRequest::default()) else {
        panic!("the historical cap runs")
    };
    execute(&engine, &mut state, plan);
    let cut = state.entries[2].message.text();
    assert!(cut.contains("characters omitted"), "{cut}");
    state.push(Message::assistant("noted"));
    state.push(Message::user("third"));
    if let Some(plan) = engine.plan(&mut state, &budget, &PlanRequest::default()) {
        execute(&engine, &mut state, plan);
    }
    assert_eq!(
        state.entries[2].message.text(),
        cut,
        "the preview was cut again"
    );
}

pub(super) fn agentrail_with_trigger(tokens: u64) -> Engine {
    let policy = presets::preset("agentrail")
        .unwrap_or_default()
        .with_overrides(&format!("trigger_tokens = {tokens}"))
        .unwrap_or_default();
    Engine::new(policy, model())
}

/// The names of a summary schema's fields, in order.
fn field_names(schema: &SummarySchema) -> Vec<&str> {
    schema.fields.iter().map(|f| f.name.as_str()).collect()
}

/// A shell round whose output is 30,000 `fill` characters between `HEAD` and `TAIL`.
fn headed_result(state: &mut ContextState, id: &str, fill: &str) {
    let output = format!("HEAD {} TAIL", fill.repeat(30_000));
    round(state, id, "shell", &output);
}

/// The events of one compaction open with its start and close with its end.
fn assert_compaction_bracketed(names: &[&str]) {
    assert_eq!(
        names.first(),
        Some(&"context_compaction_start"),
        "{names:?}"
    );
    assert_eq!(names.last(), Some(&"context_compaction_end"), "{names:?}");
}

fn event_names(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(Event::name).collect()
}

/// Issue 33, item 6: Agentrail's request-boundary compaction runs as the next request arrives,
/// never inside the agent's tool loop (it used to fire on a call of the request in progress
/// and summarize that request's own rounds).
#[test]
fn agentrail_compacts_the_session_at_the_start_of_a_request_never_inside_the_tool_loop() {
    let engine = agentrail_with_trigger(5_000);
    let budget = budget(200_000, 0);
    // Far over the trigger, in the middle of the tool loop: nothing is summarized.
    let mut state = agent_session(30, 300);
    assert!(engine.request_tokens(&mut state, &budget) > 5_000);
    let inside = engine.plan(&mut state, &budget, &PlanRequest::default());
    assert!(
        inside.as_ref().is_none_or(|p| p.summaries.is_empty()),
        "compacted inside the request: {:?}",
        inside.map(|p| (p.reason, p.stages))
    );
    // The agent answers; the user's next request opens a boundary, where the old history is
    // summarized.
    state.push(Message::assistant("The build fails on a rounding error."));
    state.push(Message::user("Now fix the tax module."));
    let plan = engine
        .plan(&mut state, &budget, &PlanRequest::default())
        .expect("over the trigger at the request boundary");
    assert_eq!(plan.reason, CompactionReason::Tokens);
    let (events, archive, _) = execute(&engine, &mut state, plan);
    assert!(
        archive
            .iter()
            .any(|i| matches!(i, ArchiveItem::Compaction { .. }))
    );
    let names = event_names(&events);
    assert_compaction_bracketed(&names);
    assert!(!names.contains(&"compaction"), "{names:?}");
    // The new request is whole and last; the summary stands for the earlier one.
    let messages = state.to_messages();
    assert_eq!(
        messages.last().map(Message::text).as_deref(),
        Some("Now fix the tax module.")
    );
    assert!(
        messages
            .iter()
            .any(|m| m.text().starts_with("[Conversation summary:"))
    );
    assert_valid(&state);
}

/// Issue 33, item 6: Agentrail announces each layer with its own events: the per-call result
/// cap says which results it cut (no compaction start or end), a compaction inside a request
/// is the runtime's `compaction` event with `messagesBefore` / `messagesAfter`, and only a
/// request-boundary compaction has `context_compaction_start` / `_end`.
#[test]
fn agentrail_announces_each_layer_with_its_own_events() {
    let engine = engine("agentrail");
    let budget = budget(10_000, 0);
    // Layer 1: an old result over 6,000 characters, cut before the next call.
    let mut state = agent_session(3, 20);
    round(
        &mut state,
        "call_big",
        "shell",
        &"log line 42\n".repeat(1_000),
    );
    round(&mut state, "call_x", "shell", "ok");
    round(&mut state, "call_y", "shell", "ok");
    let plan = engine
        .plan(&mut state, &budget, &PlanRequest::default())
        .expect("the old result is over the cap");
    assert_eq!(plan.reason, CompactionReason::Maintenance);
    let (events, _, _) = execute(&engine, &mut state, plan);
    assert_eq!(event_names(&events), vec!["tool_result_truncated"]);
    let Event::ToolResultTruncated {
        call_id,
        reference,
        tokens_before,
        tokens_after,
    } = &events[0]
    else {
        panic!("{events:?}")
    };
    assert_eq!(call_id, "call_big");
    assert_eq!(reference, "sessions/s/ref-0");
    assert!(tokens_after < tokens_before, "{events:?}");

    // Layer 3: a reactive micro compaction inside the request.
    let mut state = agent_session(10, 300);
    let request = PlanRequest {
        reported_usage: Some(8_600),
        ..PlanRequest::default()
    };
    let plan = engine
        .plan(&mut state, &budget, &request)
        .expect("over the micro tier");
    let (events, _, _) = execute(&engine, &mut state, plan);
    let names = event_names(&events);
    assert_eq!(names.last(), Some(&"compaction"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("context_compaction_")),
        "{names:?}"
    );
    let json = serde_json::to_value(events.last()).unwrap_or_default();
    assert_eq!(json["type"], "compaction");
    assert_eq!(json["reason"], "reactive_micro");
    assert_eq!(json["messagesBefore"], 22);
    assert_eq!(
        json["messagesAfter"].as_u64(),
        Some(state.entries.len() as u64)
    );
    assert!(json["messagesAfter"].as_u64() < json["messagesBefore"].as_u64());

    // Other presets keep their events: an overflow recovery is a compaction start and end.
    let default = self::engine("default");
    let mut state = agent_session(10, 300);
    let overflow = overflow_to(2_000);
    let plan = default
        .plan(&mut state, &budget, &overflow)
        .expect("a recovery");
    let (events, _, _) = execute(&default, &mut state, plan);
    let names = event_names(&events);
    assert_compaction_bracketed(&names);
}

fn image_message(seed: u8) -> Message {
    Message::new(
        Role::User,
        vec![
            Part::text(format!("chart {seed}")),
            Part::Data {
                source: crate::model::DataSource::Base64 {
                    media_type: "image/png".into(),
                    data: format!("aW1hZ2U{seed}"),
                },
                wire_type: None,
                extra: Default::default(),
            },
        ],
    )
}

#[test]
fn max_images_plans_the_oldest_unpinned_images_and_apply_names_their_files() {
    let engine = engine("agentscope");
    let mut state = ContextState::default();
    for seed in 0..7 {
        state.push(image_message(seed));
        state.push(Message::assistant("seen"));
    }
    // A pinned image stays and counts.
    state.entries[0].meta.pinned = true;
    let plan = engine.plan_images(&state);
    assert_eq!(
        plan.iter().map(|i| i.entry).collect::<Vec<_>>(),
        vec![2, 4],
        "7 images, at most 5: the oldest two that are not pinned"
    );
    let refs = vec![
        ("data/a.png".to_string(), 10),
        ("data/b.png".to_string(), 12),
    ];
    let events = engine.apply_images(&mut state, &plan, &refs);
    assert_eq!(events.len(), 2);
    assert!(
        state.entries[2].message.text().contains("data/a.png")
            && state.entries[4].message.text().contains("data/b.png")
    );
    assert!(engine.plan_images(&state).is_empty());
    // A policy without the limit plans nothing.
    assert!(self::engine("harness").plan_images(&state).is_empty());
}
