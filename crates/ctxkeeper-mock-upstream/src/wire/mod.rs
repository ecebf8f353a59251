//! Each API's answer, whole (JSON) or streamed (server-sent events), in its exact wire shape.
//!
//! The shapes follow the official SDKs' types (`openai.types.chat.ChatCompletion[Chunk]`,
//! `openai.types.responses.Response*Event`, `anthropic.types.Raw*Event`), so the SDKs'
//! stream accumulators rebuild the same final object from the events as from the JSON answer.

pub(crate) mod anthropic;
pub(crate) mod chat;
pub(crate) mod responses;

use bytes::Bytes;
use serde_json::Value;

/// A `data:`-only event (OpenAI Chat Completions).
pub(crate) fn data_event(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// An event with a name (Anthropic, OpenAI Responses).
pub(crate) fn named_event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}
