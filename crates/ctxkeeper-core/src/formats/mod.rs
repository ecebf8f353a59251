//! Lossless wire-format adapters.
//!
//! Each adapter parses its format's JSON into the neutral [`crate::model`] and emits it back.
//! Parsing then emitting gives back the same JSON (unknown fields included); emitting a
//! conversation that came from another format produces a valid request of this format.
//!
//! How a message is written depends on where it came from ([`WireHints::origin`]):
//!
//! - **from this format**: its format-private hints (content shape, item boundaries, part wire
//!   types) and its `extra` fields rebuild the exact JSON it was parsed from;
//! - **built by the engine** (no origin): written in the format's canonical shape, `extra`
//!   fields included;
//! - **from another format**: converted to the canonical shape of this format, following the
//!   rules each adapter documents (tool results placed where the provider wants them, media
//!   converted or replaced by a marker text, reasoning kept only where the provider can verify
//!   it). The other format's `extra` fields are left out, since providers reject fields they do
//!   not know; of the request options only the portable ones are carried over (sampling,
//!   streaming, output-token limit, stop sequences, tool choice).
//!
//! A round trip gives back an equal [`serde_json::Value`], not necessarily the same bytes: keys
//! of a message or part object may come back in another order. Values carried whole (schemas,
//! tool inputs, unknown fields) keep their key order.
//!
//! [`WireHints::origin`]: crate::model::WireHints::origin

pub mod anthropic;
mod common;
pub mod openai_chat;
pub mod responses;
mod tools;

use serde_json::Value;

use crate::ParseError;
use crate::model::Request;

/// A provider wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wire {
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    OpenAiChat,
    /// OpenAI Responses (`/v1/responses`) input items.
    Responses,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
}

impl Wire {
    /// The name used on the command line and in hints (`openai-chat`, `responses`, `anthropic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Wire::OpenAiChat => "openai-chat",
            Wire::Responses => "responses",
            Wire::Anthropic => "anthropic",
        }
    }

    /// Parses a whole request body of this format. The body is cloned once; a caller that no
    /// longer needs it uses [`Wire::parse_request_owned`].
    pub fn parse_request(self, body: &Value) -> Result<Request, ParseError> {
        self.parse_request_owned(body.clone())
    }

    /// Parses a request body it takes ownership of: nothing is cloned. Otherwise the same as
    /// [`Wire::parse_request`].
    pub fn parse_request_owned(self, body: Value) -> Result<Request, ParseError> {
        match self {
            Wire::OpenAiChat => openai_chat::parse_request_owned(body),
            Wire::Responses => responses::parse_request_owned(body),
            Wire::Anthropic => anthropic::parse_request_owned(body),
        }
    }

    /// Emits a whole request body of this format.
    pub fn emit_request(self, request: &Request) -> Value {
        match self {
            Wire::OpenAiChat => openai_chat::emit_request(request),
            Wire::Responses => responses::emit_request(request),
            Wire::Anthropic => anthropic::emit_request(request),
        }
    }
}

impl std::str::FromStr for Wire {
    type Err = String;

    fn from_str(s: &str) -> Result<Wire, String> {
        match s {
            "openai-chat" | "openai" | "chat" => Ok(Wire::OpenAiChat),
            "responses" | "openai-responses" => Ok(Wire::Responses),
            "anthropic" | "messages" => Ok(Wire::Anthropic),
            other => Err(format!(
                "unknown wire format {other:?} (expected openai-chat, responses or anthropic)"
            )),
        }
    }
}
