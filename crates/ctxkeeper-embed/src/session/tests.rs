use serde_json::json;

use super::*;
use crate::runtime::runtime;

fn open(window: u64) -> Session<u32> {
    let rt = runtime().expect("runtime");
    let options = Options {
        window: Some(window),
        ..Options::default()
    };
    Session::open(rt, options).expect("a session opens")
}

fn take(session: &mut Session<u32>, messages: Value, seqs: Vec<u32>) -> Result<(), EmbedError> {
    let rt = runtime()?;
    match Batch::parse(session.wire(), messages, Some(seqs))? {
        Some(batch) => session.take(rt, batch),
        None => Ok(()),
    }
}

#[test]
fn a_step_that_only_appended_hands_back_the_callers_objects() {
    let rt = runtime().expect("runtime");
    let mut session = open(16_000);
    // One message taken with its caller's object `seq`: the step hands back that object alone.
    let mut step_hands_back = |message: Value, seq: u32| {
        take(&mut session, json!([message]), vec![seq]).expect("ingested");
        let step = session.prepare(rt, None).expect("prepared");
        assert!(
            matches!(step.emit, Emit::Append(ref pieces) if matches!(pieces[..], [Piece::Original(s)] if s == seq))
        );
        step.figures.changed
    };
    let changed = step_hands_back(json!({"role": "user", "content": "hi"}), 7);
    assert!(!changed);
    step_hands_back(json!({"role": "assistant", "content": "hello"}), 8);
    assert_eq!(session.emit_full().messages.len(), 2);
}

#[test]
fn responses_items_never_stand_for_the_callers_objects() {
    let list = json!([{"role": "user", "content": "hi"}]);
    let batch = Batch::parse(Wire::Responses, list, Some(vec![1u32]))
        .expect("parsed")
        .expect("not empty");
    assert!(batch.originals.is_none());
}

#[test]
fn refused_input_names_its_rule_and_ingests_nothing() {
    let mut session = open(16_000);
    let orphan = json!([
        {"role": "user", "content": "run it"},
        {"role": "tool", "tool_call_id": "call_1", "content": "out"}
    ]);
    match take(&mut session, orphan, vec![1, 2]) {
        Err(EmbedError::InvalidInput { index, kind, .. }) => {
            assert_eq!(index, Some(1));
            assert_eq!(kind, Some("tool_pairing"));
        }
        other => panic!("expected a tool-pairing refusal, got {other:?}"),
    }
    let hostile = json!([{"role": "assistant", "content": null, "tool_calls": [
        {"id": "../x", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]}]);
    match take(&mut session, hostile, vec![3]) {
        Err(err @ EmbedError::InvalidInput { .. }) => {
            assert_eq!(err.class(), crate::Class::InvalidInput);
            assert!(err.to_string().contains("path separator"), "{err}");
        }
        other => panic!("expected a hostile-id refusal, got {other:?}"),
    }
    assert_eq!(session.stats().ingested, 0);
    assert_eq!(session.stats().messages, 0);
}

#[test]
fn usage_reports_of_every_provider_are_read() {
    assert_eq!(input_tokens(&json!({"prompt_tokens": 50})).ok(), Some(50));
    let anthropic = json!({"usage": {"input_tokens": 10, "cache_read_input_tokens": 5}});
    assert_eq!(input_tokens(&anthropic).ok(), Some(15));
    assert!(input_tokens(&json!({"tokens": 1})).is_err());
}
