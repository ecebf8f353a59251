//! Frozen serialized states that every later version must keep reading. Never edit a fixture;
//! add a new one when the format changes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxkeeper_core::model::{Part, Role};
use ctxkeeper_store::{AgentState, SessionKey, open_store};
use serde_json::json;

const V1: &str = include_str!("fixtures/agent_state_v1.json");

#[test]
fn format_1_fixture_still_loads() {
    let state = AgentState::from_json(V1).unwrap();
    assert_eq!(state.format_version, 1);
    assert_eq!(state.context.len(), 6);
    assert_eq!(state.context[1].name.as_deref(), Some("alice"));
    assert!(matches!(&state.context[2].parts[1], Part::ToolCall { id, .. } if id == "call_1"));
    assert_eq!(state.context[3].role, Role::Tool);
    assert_eq!(
        state.summary.as_ref().unwrap()["task_overview"],
        json!("Rebook flight ABC123")
    );
    assert_eq!(state.engine["compactions"], json!(1));
    assert_eq!(state.extensions["tool_groups"], json!(["booking"]));
    assert_eq!(state.created_at_ms, 1_795_000_000_000);
    assert!(state.unknown.is_empty());
}

#[test]
fn format_1_fixture_survives_a_round_trip_unchanged() {
    let state = AgentState::from_json(V1).unwrap();
    let again = AgentState::from_json(&state.to_json().unwrap()).unwrap();
    assert_eq!(again, state);
    let written: serde_json::Value = serde_json::from_str(&state.to_json().unwrap()).unwrap();
    let frozen: serde_json::Value = serde_json::from_str(V1).unwrap();
    assert_eq!(
        written, frozen,
        "the writer must still produce format 1 byte-equivalently"
    );
}

#[tokio::test]
async fn a_fixture_saved_through_a_store_loads_back() {
    let store = open_store("memory://").await.unwrap();
    let key = SessionKey::simple("fixture").unwrap();
    let state = AgentState::from_json(V1).unwrap();
    store.save(&key, &state, None).await.unwrap();
    assert_eq!(store.load(&key).await.unwrap().unwrap().state, state);
}
