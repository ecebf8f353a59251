//! Conformance of incremental saves (`ctxkeeper_store::generations`): every backend that
//! saves incrementally runs every check here.

use ctxkeeper_core::model::Message;
use ctxkeeper_store::{
    AgentState, Commit, ContextWrite, HistoryPage, SessionKey, SessionStore, StoreError,
};
use serde_json::json;

use super::unique;

/// Runs every check against one store.
pub async fn run_all(store: &dyn SessionStore) {
    assert!(
        store.saves_incrementally(),
        "{} should save incrementally",
        store.backend()
    );
    append_only_steps(store).await;
    compaction_is_a_new_generation(store).await;
    stale_appends_change_nothing(store).await;
    old_generations_stay_until_retention(store).await;
    eprintln!("{}: generations conformance passed", store.backend());
}

fn key(tenant: &str, session: &str) -> SessionKey {
    SessionKey::new(tenant, "alice", "bot", session).expect("a valid key")
}

fn said(texts: &[&str]) -> Vec<Message> {
    texts.iter().map(|t| Message::user(*t)).collect()
}

fn texts(messages: &[Message]) -> Vec<String> {
    messages.iter().map(Message::text).collect()
}

/// The part of `state` after its first `context` messages and `trail` values: what an
/// incremental save passes.
fn tail(state: &AgentState, context: usize, trail: usize) -> AgentState {
    let mut delta = state.clone();
    delta.context = state.context[context..].to_vec();
    delta.context_meta = if state.context_meta.is_empty() {
        Vec::new()
    } else {
        state.context_meta[context..].to_vec()
    };
    delta.trail = state.trail[trail..].to_vec();
    delta
}

/// A first save writes generation 1; steps append their messages, bookkeeping and trail
/// values to it, and a load reads the whole generation back.
pub async fn append_only_steps(store: &dyn SessionStore) {
    let k = key(&unique("gen-append"), "s1");
    let mut state = AgentState::new();
    state.context = said(&["rules", "task"]);
    state.context_meta = vec![json!({"pinned": true}), json!({})];
    state.trail = vec![json!("h1"), json!("h2")];
    state.summary = Some(json!({"task": "t"}));
    let first = store
        .commit(&k, Commit::generation(&state, None, &state.context))
        .await
        .expect("a first generation");
    let loaded = store.load(&k).await.expect("load").expect("saved");
    assert_eq!(loaded.generation, Some(1), "{}", store.backend());
    assert_eq!(loaded.state, state);

    let mut version = first.version;
    for step in 0..3 {
        let (context, trail) = (state.context.len(), state.trail.len());
        let new = said(&[&format!("answer {step}"), &format!("question {step}")]);
        state.context.extend(new.iter().cloned());
        state
            .context_meta
            .extend([json!({"log_index": step}), json!({})]);
        state.trail.push(json!(format!("h{step}")));
        state.engine = json!({"step": step});
        let committed = store
            .commit(
                &k,
                Commit {
                    state: &tail(&state, context, trail),
                    write: ContextWrite::Append { context, trail },
                    expected: Some(version),
                    messages: &new,
                },
            )
            .await
            .expect("an append");
        assert_eq!(committed.version, version + 1);
        version = committed.version;
        let loaded = store.load(&k).await.expect("load").expect("saved");
        assert_eq!(loaded.generation, Some(1), "appends stay in generation 1");
        assert_eq!(loaded.version, version);
        assert_eq!(loaded.state, state, "{}: step {step}", store.backend());
    }
    // The generation holds each message once, in order.
    let generation = store.generation_context(&k, 1).await.expect("generation 1");
    assert_eq!(texts(&generation), texts(&state.context));
    // And the log has every message of every commit.
    let log = store
        .history(&k, HistoryPage::last(100))
        .await
        .expect("history");
    assert_eq!(log.len(), 8);
}

/// A compaction writes a new generation; a load reads it, and the next appends continue it.
pub async fn compaction_is_a_new_generation(store: &dyn SessionStore) {
    let k = key(&unique("gen-compact"), "s1");
    let mut state = AgentState::new();
    state.context = said(&["rules", "a", "b", "c"]);
    state.trail = vec![json!(1), json!(2), json!(3), json!(4)];
    let v1 = store
        .commit(&k, Commit::generation(&state, None, &[]))
        .await
        .expect("generation 1")
        .version;
    let mut compacted = AgentState::new();
    compacted.context = said(&["rules", "summary of a b c"]);
    compacted.context_meta = vec![json!({}), json!({"summary": true})];
    compacted.trail = state.trail.clone();
    let v2 = store
        .commit(&k, Commit::generation(&compacted, Some(v1), &[]))
        .await
        .expect("generation 2")
        .version;
    let loaded = store.load(&k).await.expect("load").expect("saved");
    assert_eq!(loaded.generation, Some(2), "{}", store.backend());
    assert_eq!(loaded.state, compacted);
    let mut next = compacted.clone();
    next.context.push(Message::user("d"));
    next.context_meta.push(json!({}));
    store
        .commit(
            &k,
            Commit {
                state: &tail(&next, 2, 4),
                write: ContextWrite::Append {
                    context: 2,
                    trail: 4,
                },
                expected: Some(v2),
                messages: &[],
            },
        )
        .await
        .expect("an append to generation 2");
    let loaded = store.load(&k).await.expect("load").expect("saved");
    assert_eq!((loaded.generation, loaded.state), (Some(2), next));
    // The replaced context is still there.
    let old = store.generation_context(&k, 1).await.expect("generation 1");
    assert_eq!(texts(&old), ["rules", "a", "b", "c"]);
}

/// An append from a stale version is a conflict, and one that does not continue the stored
/// generation is refused; neither changes the state, the generation or the log.
pub async fn stale_appends_change_nothing(store: &dyn SessionStore) {
    let k = key(&unique("gen-cas"), "s1");
    let mut state = AgentState::new();
    state.context = said(&["a", "b"]);
    let v1 = store
        .commit(&k, Commit::generation(&state, None, &state.context))
        .await
        .expect("generation 1")
        .version;
    let mut one = AgentState::new();
    one.context = said(&["c"]);
    // `state` written after the two messages of generation 1, against `expected`.
    fn append<'a>(
        state: &'a AgentState,
        expected: Option<u64>,
        messages: &'a [Message],
    ) -> Commit<'a> {
        let write = ContextWrite::Append {
            context: 2,
            trail: 0,
        };
        Commit {
            state,
            write,
            expected,
            messages,
        }
    }
    let v2 = store
        .commit(&k, append(&one, Some(v1), &one.context))
        .await
        .expect("an append")
        .version;
    // A writer that still holds v1 loses its swap.
    let stale = store
        .commit(&k, append(&one, Some(v1), &said(&["lost"])))
        .await;
    assert!(
        matches!(
            stale,
            Err(StoreError::Conflict {
                expected: Some(1),
                actual: Some(2)
            })
        ),
        "{}: {stale:?}",
        store.backend()
    );
    // Right version, wrong counts: refused.
    let skewed = store
        .commit(&k, append(&one, Some(v2), &said(&["lost too"])))
        .await;
    assert!(
        matches!(skewed, Err(StoreError::InvalidInput(_))),
        "{}: {skewed:?}",
        store.backend()
    );
    let loaded = store.load(&k).await.expect("load").expect("saved");
    assert_eq!(loaded.version, v2);
    assert_eq!(texts(&loaded.state.context), ["a", "b", "c"]);
    let log = store
        .history(&k, HistoryPage::last(10))
        .await
        .expect("history");
    assert_eq!(
        texts(&log.into_iter().map(|e| e.message).collect::<Vec<_>>()),
        ["a", "b", "c"]
    );
}

/// Old generations stay until the session goes: retention removes all of them with it.
pub async fn old_generations_stay_until_retention(store: &dyn SessionStore) {
    let t = unique("gen-retention");
    let k = key(&t, "s1");
    let mut version = None;
    for round in 0..3 {
        let mut state = AgentState::new();
        state.context = said(&[&format!("generation {}", round + 1)]);
        version = Some(
            store
                .commit(&k, Commit::generation(&state, version, &[]))
                .await
                .expect("a generation")
                .version,
        );
    }
    for generation in 1..=3 {
        let held = store
            .generation_context(&k, generation)
            .await
            .expect("a generation reads");
        assert_eq!(texts(&held), [format!("generation {generation}")]);
    }
    let removed = store
        .purge_before(Some(&t), i64::MAX)
        .await
        .expect("retention");
    assert_eq!(removed, 1);
    assert!(store.load(&k).await.expect("load").is_none());
    for generation in 1..=3 {
        assert!(
            store
                .generation_context(&k, generation)
                .await
                .expect("a generation reads")
                .is_empty(),
            "{}: generation {generation} outlived retention",
            store.backend()
        );
    }
}

/// A state that a build before generations stored whole (`write_whole` puts it there the
/// way that build did) loads as it is, with no generation; the next save writes generation 1
/// and appends continue from there.
pub async fn whole_state_records<F, Fut>(store: &dyn SessionStore, write_whole: F)
where
    F: FnOnce(SessionKey, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let k = SessionKey::new("default", "default", "bot", unique("legacy")).expect("a key");
    let mut state = AgentState::new();
    state.context = said(&["rules", "task", "answer"]);
    state.engine = json!({"format": "ctxkeeper/2", "meta": [{}, {}, {}]});
    write_whole(k.clone(), state.to_json().expect("a state serializes")).await;
    let loaded = store.load(&k).await.expect("load").expect("stored whole");
    assert_eq!(loaded.generation, None, "{}", store.backend());
    assert_eq!(loaded.state, state);
    // An append needs a generation.
    let refused = store
        .commit(
            &k,
            Commit {
                state: &AgentState::new(),
                write: ContextWrite::Append {
                    context: 3,
                    trail: 0,
                },
                expected: Some(loaded.version),
                messages: &[],
            },
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::InvalidInput(_))),
        "{refused:?}"
    );
    let mut next = loaded.state.clone();
    next.context.push(Message::user("more"));
    let v = store
        .commit(&k, Commit::generation(&next, Some(loaded.version), &[]))
        .await
        .expect("a first generation")
        .version;
    let loaded = store.load(&k).await.expect("load").expect("saved");
    assert_eq!((loaded.generation, loaded.version), (Some(1), v));
    assert_eq!(loaded.state, next);
    eprintln!("{}: whole-state records load", store.backend());
}
