use super::*;

const PROMPT: &str = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that will resume the task.";
const SUMMARY: &str = "Another language model started to solve this problem and produced a summary of its thinking process. Here is the summary produced by the other language model:\nThe parser fix in src/parse.rs is half done; the tests are untouched.";
const TASK: &str = "Fix the parser in src/parse.rs. Never touch the files under tests/.";

/// A memory store and sessions over it whose model's window is small, with the archive in a
/// temporary directory that lives as long as the returned one.
async fn small_window_sessions() -> (tempfile::TempDir, Arc<dyn SessionStore>, Sessions) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ctxkeeper_store::open_store("memory://")
        .await
        .expect("store");
    let profiles = Profiles::from_toml_str(
        "[models.\"codex-small\"]\ncontext_window = 4000\ntokenizer = \"o200k_base\"\n",
    )
    .expect("profiles");
    let sessions = sessions_with(store.clone(), dir.path(), profiles).await;
    (dir, store, sessions)
}

fn opening() -> Vec<Message> {
    vec![
        Message::system("You are Codex, a coding agent."),
        Message::user("<environment_context>\n  <cwd>/srv/app</cwd>\n</environment_context>"),
        Message::user(TASK),
    ]
}

fn rounds(messages: &mut Vec<Message>, from: usize, to: usize) {
    for i in from..to {
        let id = format!("call_{i}");
        messages.push(Message::tool_call(
            &id,
            "exec_command",
            r#"{"cmd":"cat src/parse.rs"}"#,
        ));
        messages.push(Message::tool_result(
            &id,
            format!("line {i} of the parser\n").repeat(60),
        ));
    }
}

fn incoming(messages: &[Message]) -> Incoming {
    Incoming::new(Some("codex-small".into()), messages.to_vec(), &[])
}

/// The capsule of the session's warm context.
async fn capsule(
    sessions: &Sessions,
    key: &SessionKey,
) -> Option<ctxkeeper_core::capsule::Capsule> {
    let cell = sessions.slot(key);
    let slot = cell.lock().await;
    slot.state_ref()
        .and_then(ctxkeeper_core::engine::ContextState::capsule)
        .cloned()
}

fn counter(value: &std::sync::atomic::AtomicU64) -> u64 {
    value.load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test]
async fn a_restarted_history_with_the_clients_summary_continues_the_session() {
    let (_dir, store, sessions) = small_window_sessions().await;
    let key = SessionKey::simple("codex-1").expect("key");
    let mut history = opening();
    for end in 1..=8 {
        rounds(&mut history, end - 1, end);
        let step = sessions
            .step(&key, &incoming(&history), &[])
            .await
            .expect("step");
        assert_eq!(step.key, key);
    }
    let capsule_before = capsule(&sessions, &key).await;
    assert!(
        capsule_before.is_some(),
        "the gateway compacted before the client did"
    );

    // The checkpoint call: the whole history and the prompt, as a user message.
    history.push(Message::user(PROMPT));
    let step = sessions
        .step(&key, &incoming(&history), &[])
        .await
        .expect("checkpoint");
    assert_eq!(step.key, key);

    // The restarted history: the instructions, the user's messages, the summary; then work.
    let mut restarted = opening();
    restarted.push(Message::user(SUMMARY));
    rounds(&mut restarted, 100, 101);
    let mut events = sessions.subscribe(&key);
    let step = sessions
        .step(&key, &incoming(&restarted), &[])
        .await
        .expect("restart");
    assert_eq!(step.key, key, "no fork: the same conversation goes on");
    assert!(!step.diverged);
    assert_eq!(counter(&sessions.metrics.session_forks), 0);
    assert_eq!(counter(&sessions.metrics.divergences), 0);
    assert_eq!(counter(&sessions.metrics.client_compactions), 1);
    let sent: Vec<String> = step.prepared.messages.iter().map(Message::text).collect();
    assert!(
        sent.iter()
            .any(|text| text.starts_with("Another language model")),
        "the client's summary goes upstream"
    );
    assert!(
        !sent.iter().any(|text| text.contains("CONTEXT CHECKPOINT")),
        "the old history, prompt included, is gone from the context"
    );
    let capsule_after = capsule(&sessions, &key).await;
    assert_eq!(capsule_after, capsule_before, "the capsule is carried over");
    let names = event_names(&mut events).await;
    assert!(
        names.iter().any(|n| n == "client_compaction_continued"),
        "{names:?}"
    );

    // The log holds each message once: the prompt as the client sent it, and after it only
    // what the restarted history added (the summary and the new round).
    let log = log_of(&store, &key).await;
    assert_eq!(log.iter().filter(|m| m.text() == PROMPT).count(), 1);
    assert_eq!(log.iter().filter(|m| m.text() == SUMMARY).count(), 1);
    assert_eq!(
        log.iter().filter(|m| m.text() == TASK).count(),
        1,
        "shared messages are not logged again"
    );

    // The restarted history goes on in the same session, as any conversation does.
    rounds(&mut restarted, 101, 103);
    let step = sessions
        .step(&key, &incoming(&restarted), &[])
        .await
        .expect("after");
    assert_eq!(step.key, key);
    assert_eq!(counter(&sessions.metrics.client_compactions), 1);
    assert_eq!(counter(&sessions.metrics.session_forks), 0);
}

#[tokio::test]
async fn the_harness_prompt_and_summary_never_become_the_users_words() {
    let (_dir, _store, sessions) = small_window_sessions().await;
    let key = SessionKey::simple("codex-2").expect("key");
    let mut history = opening();
    history.push(Message::user(PROMPT));
    history.push(Message::assistant("The parser fix is half done."));
    history.push(Message::user(SUMMARY));
    rounds(&mut history, 0, 12);
    sessions
        .step(&key, &incoming(&history), &[])
        .await
        .expect("step");
    let cell = sessions.slot(&key);
    let slot = cell.lock().await;
    let capsule = slot
        .state_ref()
        .and_then(|state| state.entries.iter().find(|e| e.meta.capsule.is_some()))
        .map(|entry| entry.message.text())
        .expect("the session compacted and wrote its capsule");
    assert!(
        capsule.contains("Never touch the files under tests/"),
        "{capsule}"
    );
    assert!(!capsule.contains("CONTEXT CHECKPOINT"), "{capsule}");
    assert!(!capsule.contains("Another language model"), "{capsule}");
}
