//! Anthropic Messages: the `message` object and its event stream.

use bytes::Bytes;
use serde_json::{Value, json};

use super::named_event;
use crate::reply::{Answer, Api, Reply, argument_pieces, text_pieces};

/// Anthropic's usage: `input_tokens` leaves out what the cache served, which is reported as
/// `cache_read_input_tokens` (the mock simulates reads only, never cache writes).
fn usage(reply: &Reply, output: u64) -> Value {
    let usage = reply.usage;
    json!({
        "input_tokens": usage.input - usage.cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached,
        "output_tokens": output,
        "service_tier": "standard"
    })
}

fn stop_reason(reply: &Reply) -> &'static str {
    match reply.answer {
        Answer::Text(_) | Answer::Compaction { .. } => "end_turn",
        Answer::ToolCall { .. } => "tool_use",
    }
}

fn message(reply: &Reply, content: Value, stop_reason: Option<&str>, output: u64) -> Value {
    json!({
        "id": format!("msg_mock{}", reply.number),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": usage(reply, output)
    })
}

fn tool_input(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| json!({}))
}

/// The non-streaming answer.
pub(crate) fn body(reply: &Reply) -> Value {
    let content = match &reply.answer {
        Answer::Text(text)
        | Answer::Compaction {
            encrypted_content: text,
        } => json!([{"type": "text", "text": text}]),
        Answer::ToolCall { name, arguments } => json!([{
            "type": "tool_use",
            "id": reply.call_id(Api::Anthropic),
            "name": name,
            "input": tool_input(arguments)
        }]),
    };
    message(reply, content, Some(stop_reason(reply)), reply.usage.output)
}

/// The streamed answer: `message_start`, `content_block_start`, `ping`, the deltas
/// (`text_delta` or `input_json_delta`), `content_block_stop`, `message_delta` with the stop
/// reason and usage, `message_stop`.
pub(crate) fn events(reply: &Reply) -> Vec<Bytes> {
    let mut events = vec![named_event(
        "message_start",
        &json!({"type": "message_start", "message": message(reply, json!([]), None, 1)}),
    )];
    let (block, deltas): (Value, Vec<Value>) = match &reply.answer {
        Answer::Text(text)
        | Answer::Compaction {
            encrypted_content: text,
        } => (
            json!({"type": "text", "text": ""}),
            text_pieces(text)
                .into_iter()
                .map(|piece| json!({"type": "text_delta", "text": piece}))
                .collect(),
        ),
        Answer::ToolCall { name, arguments } => (
            json!({"type": "tool_use", "id": reply.call_id(Api::Anthropic), "name": name, "input": {}}),
            // Anthropic opens every tool input with an empty fragment.
            std::iter::once("")
                .chain(argument_pieces(arguments))
                .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
                .collect(),
        ),
    };
    events.push(named_event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0, "content_block": block}),
    ));
    events.push(named_event("ping", &json!({"type": "ping"})));
    for delta in deltas {
        events.push(named_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ));
    }
    events.push(named_event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": 0}),
    ));
    let mut final_usage = usage(reply, reply.usage.output);
    if let Some(object) = final_usage.as_object_mut() {
        object.remove("service_tier");
    }
    events.push(named_event(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(reply), "stop_sequence": null},
            "usage": final_usage
        }),
    ));
    events.push(named_event(
        "message_stop",
        &json!({"type": "message_stop"}),
    ));
    events
}
