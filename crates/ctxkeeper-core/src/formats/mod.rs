//! Lossless wire-format adapters.
//!
//! Each adapter parses its format's JSON into the neutral [`crate::model`] and emits it back.
//! Parsing then emitting gives back the same JSON (unknown fields included); emitting a
//! conversation that came from another format produces a valid request of this format.

pub mod anthropic;
pub mod openai_chat;
pub mod responses;

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

    /// Parses a whole request body of this format.
    pub fn parse_request(self, body: &Value) -> Result<Request, ParseError> {
        match self {
            Wire::OpenAiChat => openai_chat::parse_request(body),
            Wire::Responses => responses::parse_request(body),
            Wire::Anthropic => anthropic::parse_request(body),
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
