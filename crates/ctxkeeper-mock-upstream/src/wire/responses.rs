//! OpenAI Responses: the `response` object and its event stream.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::named_event;
use crate::reply::{Answer, Api, Reply, argument_pieces, text_pieces};

fn usage(reply: &Reply) -> Value {
    let usage = reply.usage;
    json!({
        "input_tokens": usage.input,
        "input_tokens_details": {"cached_tokens": usage.cached},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total()
    })
}

fn item_id(reply: &Reply) -> String {
    match reply.answer {
        Answer::Text(_) => format!("msg_mock{}", reply.number),
        Answer::ToolCall { .. } => format!("fc_mock{}", reply.number),
        Answer::Compaction { .. } => format!("cmp_mock{}", reply.number),
    }
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The output item, in progress (empty) or completed.
fn item(reply: &Reply, completed: bool) -> Value {
    let status = if completed {
        "completed"
    } else {
        "in_progress"
    };
    match &reply.answer {
        Answer::Text(text) => json!({
            "id": item_id(reply),
            "type": "message",
            "status": status,
            "content": if completed { json!([output_text(text)]) } else { json!([]) },
            "role": "assistant"
        }),
        Answer::ToolCall { name, arguments } => json!({
            "id": item_id(reply),
            "type": "function_call",
            "status": status,
            "arguments": if completed { arguments.as_str() } else { "" },
            "call_id": reply.call_id(Api::Responses),
            "name": name
        }),
        // The item arrives whole: `output_item.added` already carries the opaque content.
        Answer::Compaction { encrypted_content } => json!({
            "id": item_id(reply),
            "type": "compaction",
            "encrypted_content": encrypted_content
        }),
    }
}

/// The `response` object; `completed` decides its status, output and usage.
fn response(reply: &Reply, request: &Map<String, Value>, completed: bool) -> Value {
    let echo = |field: &str, default: Value| request.get(field).cloned().unwrap_or(default);
    json!({
        "id": format!("resp_mock{}", reply.number),
        "object": "response",
        "created_at": reply.created,
        "status": if completed { "completed" } else { "in_progress" },
        "background": false,
        "completed_at": if completed { json!(reply.created) } else { Value::Null },
        "error": null,
        "incomplete_details": null,
        "instructions": echo("instructions", Value::Null),
        "max_output_tokens": echo("max_output_tokens", Value::Null),
        "max_tool_calls": null,
        "model": reply.model,
        "output": if completed { json!([item(reply, true)]) } else { json!([]) },
        "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
        "previous_response_id": null,
        "prompt_cache_key": echo("prompt_cache_key", Value::Null),
        "reasoning": {"effort": null, "summary": null},
        "safety_identifier": null,
        "service_tier": "default",
        "store": echo("store", json!(true)),
        "temperature": echo("temperature", json!(1.0)),
        "text": echo("text", json!({"format": {"type": "text"}, "verbosity": "medium"})),
        "tool_choice": echo("tool_choice", json!("auto")),
        "tools": echo("tools", json!([])),
        "top_logprobs": 0,
        "top_p": echo("top_p", json!(1.0)),
        "truncation": echo("truncation", json!("disabled")),
        "usage": if completed { usage(reply) } else { Value::Null },
        "user": null,
        "metadata": echo("metadata", json!({}))
    })
}

/// The non-streaming answer.
pub(crate) fn body(reply: &Reply, request: &Map<String, Value>) -> Value {
    response(reply, request, true)
}

/// Numbers the events of one stream (`sequence_number` starts at 0).
struct Sequence {
    next: u64,
    events: Vec<Bytes>,
}

impl Sequence {
    /// A stream opened as the API opens every one: `response.created`, then
    /// `response.in_progress`.
    fn opened(reply: &Reply, request: &Map<String, Value>) -> Sequence {
        let mut stream = Sequence {
            next: 0,
            events: Vec::new(),
        };
        stream.push(
            "response.created",
            json!({"response": response(reply, request, false)}),
        );
        stream.push(
            "response.in_progress",
            json!({"response": response(reply, request, false)}),
        );
        stream
    }

    /// Adds an event: `type` first, then `data`'s fields, then `sequence_number`, as the API
    /// orders them.
    fn push(&mut self, kind: &str, data: Value) {
        let mut event = Map::new();
        event.insert("type".into(), json!(kind));
        if let Value::Object(fields) = data {
            event.extend(fields);
        }
        event.insert("sequence_number".into(), json!(self.next));
        self.next += 1;
        self.events.push(named_event(kind, &Value::Object(event)));
    }
}

/// The streamed answer: `response.created`, `response.in_progress`, the output item's events
/// (text: `output_item.added`, `content_part.added`, `output_text.delta`…, `output_text.done`,
/// `content_part.done`, `output_item.done`; call: `output_item.added`,
/// `function_call_arguments.delta`…, `function_call_arguments.done`, `output_item.done`) and
/// `response.completed` with the usage.
pub(crate) fn events(reply: &Reply, request: &Map<String, Value>) -> Vec<Bytes> {
    let mut stream = Sequence::opened(reply, request);
    let id = item_id(reply);
    stream.push(
        "response.output_item.added",
        json!({"output_index": 0, "item": item(reply, false)}),
    );
    match &reply.answer {
        Answer::Text(text) => {
            let at = json!({"item_id": id, "output_index": 0, "content_index": 0});
            let with = |extra: Value| {
                let mut data = at.clone();
                if let (Some(data), Some(extra)) = (data.as_object_mut(), extra.as_object()) {
                    data.extend(extra.clone());
                }
                data
            };
            stream.push(
                "response.content_part.added",
                with(json!({"part": output_text("")})),
            );
            for piece in text_pieces(text) {
                stream.push(
                    "response.output_text.delta",
                    with(json!({"delta": piece, "logprobs": []})),
                );
            }
            stream.push(
                "response.output_text.done",
                with(json!({"text": text, "logprobs": []})),
            );
            stream.push(
                "response.content_part.done",
                with(json!({"part": output_text(text)})),
            );
        }
        Answer::ToolCall { arguments, .. } => {
            for piece in argument_pieces(arguments) {
                stream.push(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": 0, "delta": piece}),
                );
            }
            stream.push(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": 0, "arguments": arguments}),
            );
        }
        Answer::Compaction { .. } => stream.push(
            "response.compaction.compacting",
            json!({"item_id": id, "output_index": 0}),
        ),
    }
    stream.push(
        "response.output_item.done",
        json!({"output_index": 0, "item": item(reply, true)}),
    );
    stream.push(
        "response.completed",
        json!({"response": response(reply, request, true)}),
    );
    stream.events
}

/// A context overflow met while streaming: the Responses API has already answered 200 and
/// opened the stream, so it reports the overflow as an `error` event after
/// `response.created` and `response.in_progress` (as captured from the real API).
pub(crate) fn overflow_events(
    reply: &Reply,
    request: &Map<String, Value>,
    error: &Value,
) -> Vec<Bytes> {
    let mut stream = Sequence::opened(reply, request);
    stream.push("error", json!({"error": error}));
    stream.events
}
