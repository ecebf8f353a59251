//! The state tools: `stats` (the session's context as stored, its summary and archive) and
//! `compact` (a compaction now, forced or with a one-off configuration).

use super::*;

/// The session's context as stored, whichever face wrote it ([`Snapshot::decode`]); an
/// unreadable state is a tool error that names the session, the version and the cause.
pub(super) fn context_state(
    state: &ctxkeeper::store::AgentState,
    key: &ctxkeeper::store::SessionKey,
    version: u64,
) -> Result<ContextState, ToolError> {
    Snapshot::decode(state.clone())
        .map(|snapshot| snapshot.context)
        .map_err(|err| ToolError::unavailable(format!("session {key} (version {version}): {err}")))
}

/// True when the context carries a summary: recorded by the engine, saved with the state, or
/// visible as a message in the policy's summary format.
pub(super) fn summary_present(
    backend: &Backend,
    state: &ctxkeeper::store::AgentState,
    context: &ContextState,
) -> bool {
    if state.summary.is_some() || context.summary.is_some() {
        return true;
    }
    if context.entries.iter().any(|e| e.meta.summary) {
        return true;
    }
    let template = &backend.options.policy.summary.summary_template;
    let prefix = template.split('{').next().unwrap_or_default();
    !prefix.is_empty() && state.context.iter().any(|m| m.text().starts_with(prefix))
}

pub(super) async fn context_stats(
    backend: &Backend,
    args: Result<StatsArgs, ToolError>,
) -> ToolResult {
    let args = args?;
    let session = backend.session(args.session.as_deref())?;
    let key = backend.stored_key(&session).await?;
    let info = backend
        .services
        .store
        .list(&backend.filter())
        .await?
        .into_iter()
        .find(|i| i.key == key);
    let loaded = backend.services.store.load(&key).await?;
    let archived = backend
        .services
        .archive
        .list(&backend.archive_scope(&session))
        .await?;
    let model = &backend.options.model;
    let window = backend.options.window;
    let (messages, tokens, roles, calls, results, summary, version) = match &loaded {
        Some(versioned) => {
            let state = &versioned.state;
            let context = context_state(state, &key, versioned.version)?;
            let mut roles: BTreeMap<&'static str, usize> = BTreeMap::new();
            let (mut calls, mut results) = (0usize, 0usize);
            for message in &state.context {
                *roles.entry(message.role.as_str()).or_default() += 1;
                for part in &message.parts {
                    match part {
                        Part::ToolCall { .. } => calls += 1,
                        Part::ToolResult { .. } => results += 1,
                        _ => {}
                    }
                }
            }
            (
                state.context.len(),
                model.messages_tokens(&state.context),
                roles,
                calls,
                results,
                summary_present(backend, state, &context),
                Some(versioned.version),
            )
        }
        None => (0, 0, BTreeMap::new(), 0, 0, false, None),
    };
    let used_pct = (tokens as f64 * 1000.0 / window as f64).round() / 10.0;
    Ok(json!({
        "session": session,
        "state_saved": loaded.is_some(),
        "state_version": version,
        "model": model.profile.name,
        "window_tokens": window,
        "context_tokens": tokens,
        "budget_used_pct": used_pct,
        "summary_present": summary,
        "messages": messages,
        "messages_by_role": roles,
        "tool_calls": calls,
        "tool_results": results,
        "log_entries": info.map(|i| i.log_len),
        "archived_items": archived.len(),
        "archived_bytes": archived.iter().map(|e| e.bytes).sum::<u64>(),
    }))
}

pub(super) async fn compact(backend: &Backend, args: Result<CompactArgs, ToolError>) -> ToolResult {
    let args = args?;
    if let Some(focus) = &args.focus {
        check_len("focus", focus, MAX_FOCUS_BYTES)?;
    }
    let session = backend.session(args.session.as_deref())?;
    let key = backend.stored_key(&session).await?;
    let Some(loaded) = backend.services.store.load(&key).await? else {
        return Err(ToolError::not_found(format!(
            "session {session:?} has a log but no saved context to compact"
        )));
    };
    let mut snapshot = Snapshot::decode(loaded.state).map_err(|err| {
        ToolError::unavailable(format!("session {key} (version {}): {err}", loaded.version))
    })?;
    let policy = match &args.config {
        Some(config) => one_off_policy(&backend.options.policy, config)?,
        None => backend.options.policy.clone(),
    };
    let model = backend.options.model.clone();
    let before = snapshot.context.to_messages();
    let tokens_before = model.messages_tokens(&before);
    let messages_before = before.len();
    if !args.force
        && let Some(below) = below_trigger(&policy, &model, backend.options.window, &snapshot)
    {
        return Ok(json!({
            "session": session,
            "compacted": false,
            "reason_not_compacted": below,
            "tokens_before": tokens_before,
            "tokens_after": tokens_before,
            "messages_before": messages_before,
            "messages_after": messages_before,
            "stages": [],
            "archived": [],
            "state_version": loaded.version,
        }));
    }
    let settings = ctxkeeper::Settings {
        policy: policy.clone(),
        model: model.clone(),
        window: backend.options.window,
        fixed_tokens: 0,
    };
    let mut manager = ContextManager::with_scope(
        settings,
        key.archive_scope(),
        backend.services.archive.clone(),
        backend.services.summarizer.clone(),
    );
    if let Some(memory) = &backend.services.memory {
        manager = manager.with_memory(memory.clone(), MemoryScope::of(&key));
    }
    manager.restore(std::mem::take(&mut snapshot.context));
    let mut events = manager.subscribe();
    let changed = manager
        .compact(None, args.focus.clone())
        .await
        .map_err(|err| ToolError::unavailable(format!("compaction failed: {err}")))?;
    let mut stages = Vec::new();
    let mut archived = Vec::new();
    let mut skipped = None;
    while let Ok(event) = events.try_recv() {
        match event {
            Event::ContextCompactionEnd {
                stages: done,
                archive_refs,
                ..
            } => {
                stages.extend(done);
                archived.extend(archive_refs);
            }
            Event::CompactionSkipped { reason, .. } => skipped = Some(reason),
            _ => {}
        }
    }
    let mut version = loaded.version;
    snapshot.context = manager.state().clone();
    if changed {
        // The client record stays: a gateway serving this session still recognises the
        // client's history on its next request. The context is no longer the client's
        // messages as sent.
        snapshot.client.verbatim = false;
        version = backend
            .services
            .store
            .save(&key, &snapshot.encode(), Some(loaded.version))
            .await?;
    }
    let after = snapshot.context.to_messages();
    let tokens_after = model.messages_tokens(&after);
    Ok(json!({
        "session": session,
        "compacted": changed,
        "reason_not_compacted": if changed { None } else { Some(skipped.unwrap_or_else(|| nothing_to_compact(&policy, &after, tokens_after))) },
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "messages_before": messages_before,
        "messages_after": after.len(),
        "stages": stages,
        "archived": archived,
        "state_version": version,
    }))
}

/// The server's policy with a one-off `config` laid over it (an object, or a TOML fragment as
/// a string), merged key by key as `--config` is; a mistake is a tool error naming the field.
pub(super) fn one_off_policy(
    base: &PolicyConfig,
    config: &Value,
) -> Result<PolicyConfig, ToolError> {
    let invalid = |message: String| ToolError::invalid(format!("config: {message}"));
    let overlay = match config {
        Value::String(fragment) => {
            check_len("config", fragment, MAX_CONFIG_BYTES)?;
            PolicyOverlay::parse(fragment).map_err(|e| invalid(e.0))?
        }
        Value::Object(_) => {
            check_len("config", &config.to_string(), MAX_CONFIG_BYTES)?;
            let table = toml::Table::try_from(config)
                .map_err(|e| invalid(format!("not a policy fragment (no nulls): {e}")))?;
            PolicyOverlay::from_table(table).map_err(|e| invalid(e.0))?
        }
        other => {
            return Err(invalid(format!(
                "expected an object or a TOML string, got {}",
                ctxkeeper::core::json_kind(other)
            )));
        }
    };
    overlay.apply(base).map_err(|e| invalid(e.0))
}

/// Why a compaction that was not forced does nothing, or `None` when a trigger of `policy`
/// fires on the stored context: its token level (the one active now, which a cost rule may
/// place below the configured one), its message count or its turn count.
pub(super) fn below_trigger(
    policy: &PolicyConfig,
    model: &ctxkeeper::core::tokens::TokenModel,
    window: u64,
    snapshot: &Snapshot,
) -> Option<String> {
    let engine = Engine::new(policy.clone(), model.clone());
    let budget = Budget {
        window,
        fixed_tokens: 0,
    };
    let mut context = snapshot.context.clone();
    let messages = context.entries.len();
    let tokens = engine.request_tokens(&mut context, &budget);
    let token_trigger = engine
        .active_trigger(&context, &budget)
        .map(|(trigger, _)| trigger);
    // `min_messages` counts the session history, as the engine does.
    if Engine::history_messages(&context) >= policy.min_messages {
        let turns = turns(&context.entries).len();
        let fires = token_trigger.is_some_and(|trigger| tokens >= trigger)
            || policy.trigger_messages.is_some_and(|max| messages > max)
            || policy.trigger_turns.is_some_and(|max| turns > max);
        if fires {
            return None;
        }
    }
    let mut levels = Vec::new();
    if let Some(trigger) = token_trigger {
        levels.push(format!("{trigger} tokens"));
    }
    if let Some(max) = policy.trigger_messages {
        levels.push(format!("more than {max} messages"));
    }
    if let Some(max) = policy.trigger_turns {
        levels.push(format!("more than {max} turns"));
    }
    let triggers = if levels.is_empty() {
        "it has no trigger".to_string()
    } else {
        format!("it compacts at {}", levels.join(" or "))
    };
    Some(format!(
        "below the trigger: the context is {tokens} tokens in {messages} messages and \
         policy `{}` {triggers}; pass `force: true` to compact anyway",
        policy.name
    ))
}

/// Why a requested compaction changed nothing, in words the caller can act on: which part of
/// the context the policy never touches, and what its stages wait for.
pub(super) fn nothing_to_compact(
    policy: &PolicyConfig,
    messages: &[Message],
    tokens: u64,
) -> String {
    let rounds = api_rounds(messages).len();
    let keep = policy.keep_recent_rounds;
    let name = &policy.name;
    let mut why = format!(
        "nothing to compact: the context is {tokens} tokens in {} messages",
        messages.len()
    );
    if rounds <= keep {
        why.push_str(&format!(
            ", and its {rounds} API rounds (an assistant message with the tool results answering \
             it) are all among the newest {keep} that policy `{name}` keeps verbatim \
             (keep_recent_rounds)"
        ));
    } else {
        let stages: Vec<&str> = policy.stages.iter().map(Stage::kind).collect();
        let kept = match keep {
            0 => format!("keeps none of its {rounds} API rounds verbatim"),
            _ => format!("keeps the newest {keep} of its {rounds} API rounds verbatim"),
        };
        why.push_str(&format!(
            "; policy `{name}` {kept}, and none of its stages ({}) found anything older to \
             shorten (a stage may wait for its own threshold, such as a summarize stage's \
             min_tokens)",
            stages.join(", ")
        ));
    }
    why.push_str("; instructions and the session capsule are never compacted");
    why
}
