//! The wire parsers: a request body in one provider format.
//!
//! What [`ctxkeeper_core::formats`] promises, for any body its parser accepts:
//!
//! - emitting the parsed request gives back an equal JSON value (unknown fields included),
//!   and so does emitting it after a serde round trip of the neutral model (a stored
//!   session);
//! - what it emits parses again, with the same messages;
//! - emitted into another format, it is a request that format parses, and emitting that
//!   again gives the same JSON (what is emitted is itself lossless);
//! - `repair` under the provider's rules leaves nothing for `check` and is idempotent.

use ctxkeeper_core::formats::Wire;
use ctxkeeper_core::model::{CheckRules, Request};
use serde_json::Value;

use super::{assert_repair_settles, first_difference};

/// Keys and values of the three formats.
pub const DICTIONARY: &[&[u8]] = &[
    br#""role":"#,
    br#""content":"#,
    br#""user""#,
    br#""assistant""#,
    br#""tool""#,
    br#""system""#,
    br#""developer""#,
    br#""function""#,
    br#""tool_calls":"#,
    br#""tool_call_id":"#,
    br#""arguments":"#,
    br#""name":"#,
    br#""type":"#,
    br#""text""#,
    br#""text":"#,
    br#""image_url""#,
    br#""image_url":{"url":"data:image/png;base64,AA=="}"#,
    br#""input_audio""#,
    br#""refusal""#,
    br#""file""#,
    br#""tool_use""#,
    br#""tool_result""#,
    br#""tool_use_id":"#,
    br#""is_error":true"#,
    br#""thinking""#,
    br#""signature":"#,
    br#""redacted_thinking""#,
    br#""data":"#,
    br#""input":"#,
    br#""input":{}"#,
    br#""function_call""#,
    br#""function_call_output""#,
    br#""call_id":"#,
    br#""output":"#,
    br#""reasoning""#,
    br#""encrypted_content":"#,
    br#""summary":[]"#,
    br#""input_text""#,
    br#""output_text""#,
    br#""message""#,
    br#""custom_tool_call""#,
    br#""item_reference""#,
    br#""cache_control":{"type":"ephemeral"}"#,
    br#""source":{"type":"base64","media_type":"image/png","data":"AA=="}"#,
    br#""document""#,
    br#""image""#,
    br#""max_tokens":"#,
    br#""model":"#,
    br#""messages":"#,
    br#""tools":"#,
    br#""instructions":"#,
    br#""previous_response_id":"#,
    br#""stream":true"#,
    br#""parameters":"#,
    br#""input_schema":"#,
    br#""tool_choice":"#,
    br#""function_call":"#,
    b"null",
    b"true",
    b"false",
    b"[]",
    b"{}",
    br#""""#,
    b"0",
    b"-1",
    b"1e308",
    b"0.5",
    br#""\u0000""#,
    br#""\ud800""#,
    "\"é\"".as_bytes(),
    b",",
    b":",
    b"[",
    b"]",
    b"{",
    b"}",
];

/// An OpenAI Chat Completions body.
pub fn openai_chat(data: &[u8]) {
    round_trip(Wire::OpenAiChat, data);
}

/// An OpenAI Responses body.
pub fn responses(data: &[u8]) {
    round_trip(Wire::Responses, data);
}

/// An Anthropic Messages body.
pub fn anthropic(data: &[u8]) {
    round_trip(Wire::Anthropic, data);
}

fn rules_for(wire: Wire) -> CheckRules {
    match wire {
        Wire::Anthropic => CheckRules::anthropic(),
        Wire::OpenAiChat | Wire::Responses => CheckRules::openai(),
    }
}

fn round_trip(wire: Wire, data: &[u8]) {
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(request) = wire.parse_request(&body) else {
        return;
    };
    let name = wire.as_str();
    let emitted = wire.emit_request(&request);
    if let Some(difference) = first_difference(&emitted, &body) {
        panic!("{name}: emit(parse(body)) != body at {difference}");
    }
    let stored: Request = serde_json::from_value(
        serde_json::to_value(&request).expect("the neutral model serializes"),
    )
    .expect("the neutral model deserializes");
    if let Some(difference) = first_difference(&wire.emit_request(&stored), &body) {
        panic!(
            "{name}: emit after a serde round trip of the neutral model differs at {difference}"
        );
    }
    let reparsed = wire
        .parse_request(&emitted)
        .unwrap_or_else(|err| panic!("{name}: the emitted body does not parse: {err}"));
    assert_eq!(
        reparsed.messages, request.messages,
        "{name}: re-parsed messages differ"
    );
    for other in [Wire::OpenAiChat, Wire::Responses, Wire::Anthropic] {
        if other == wire {
            continue;
        }
        let label = format!("{name} -> {}", other.as_str());
        let converted = other.emit_request(&request);
        let parsed = other.parse_request(&converted).unwrap_or_else(|err| {
            panic!("{label}: the converted body does not parse: {err}\n{converted}")
        });
        if let Some(difference) = first_difference(&other.emit_request(&parsed), &converted) {
            panic!("{label}: the converted body does not emit back equal, at {difference}");
        }
    }
    assert_repair_settles(&request.messages, rules_for(wire), name);
}
