//! OpenAI Chat Completions: `chat.completion` and the `chat.completion.chunk` stream.

use bytes::Bytes;
use serde_json::{Value, json};

use super::data_event;
use crate::reply::{Answer, Api, Reply, argument_pieces, text_pieces};

const FINGERPRINT: &str = "fp_mock";

fn usage(reply: &Reply) -> Value {
    let usage = reply.usage;
    json!({
        "prompt_tokens": usage.input,
        "completion_tokens": usage.output,
        "total_tokens": usage.total(),
        "prompt_tokens_details": {"cached_tokens": usage.cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0
        }
    })
}

fn finish_reason(reply: &Reply) -> &'static str {
    match reply.answer {
        Answer::Text(_) | Answer::Compaction { .. } => "stop",
        Answer::ToolCall { .. } => "tool_calls",
    }
}

fn id(reply: &Reply) -> String {
    format!("chatcmpl-mock{}", reply.number)
}

/// The non-streaming answer.
pub(crate) fn body(reply: &Reply) -> Value {
    let message = match &reply.answer {
        Answer::Text(text)
        | Answer::Compaction {
            encrypted_content: text,
        } => json!({
            "role": "assistant", "content": text, "refusal": null, "annotations": []
        }),
        Answer::ToolCall { name, arguments } => json!({
            "role": "assistant",
            "content": null,
            "refusal": null,
            "annotations": [],
            "tool_calls": [{
                "id": reply.call_id(Api::Chat),
                "type": "function",
                "function": {"name": name, "arguments": arguments}
            }]
        }),
    };
    json!({
        "id": id(reply),
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(reply)
        }],
        "usage": usage(reply),
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT
    })
}

/// The streamed answer: a role delta, content or tool-call deltas, the finish chunk, a usage
/// chunk (only with `stream_options.include_usage`, which also puts `"usage": null` on every
/// other chunk) and `[DONE]`.
pub(crate) fn events(reply: &Reply, include_usage: bool) -> Vec<Bytes> {
    let id = id(reply);
    let chunk = |choices: Value, usage: Option<Value>| {
        let mut chunk = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": reply.created,
            "model": reply.model,
            "service_tier": "default",
            "system_fingerprint": FINGERPRINT,
            "choices": choices,
        });
        if include_usage {
            chunk["usage"] = usage.unwrap_or(Value::Null);
        }
        data_event(&chunk)
    };
    let delta = |delta: Value, finish: Option<&str>| json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]);
    let mut events = Vec::new();
    match &reply.answer {
        Answer::Text(text)
        | Answer::Compaction {
            encrypted_content: text,
        } => {
            events.push(chunk(
                delta(
                    json!({"role": "assistant", "content": "", "refusal": null}),
                    None,
                ),
                None,
            ));
            for piece in text_pieces(text) {
                events.push(chunk(delta(json!({"content": piece}), None), None));
            }
        }
        Answer::ToolCall { name, arguments } => {
            events.push(chunk(
                delta(
                    json!({"role": "assistant", "content": null, "refusal": null}),
                    None,
                ),
                None,
            ));
            events.push(chunk(
                delta(
                    json!({"tool_calls": [{
                        "index": 0,
                        "id": reply.call_id(Api::Chat),
                        "type": "function",
                        "function": {"name": name, "arguments": ""}
                    }]}),
                    None,
                ),
                None,
            ));
            for piece in argument_pieces(arguments) {
                events.push(chunk(
                    delta(
                        json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                        None,
                    ),
                    None,
                ));
            }
        }
    }
    events.push(chunk(delta(json!({}), Some(finish_reason(reply))), None));
    if include_usage {
        events.push(chunk(json!([]), Some(usage(reply))));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}
