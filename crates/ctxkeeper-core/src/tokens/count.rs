//! Counting parts, messages, tool schemas and whole requests for one model profile.
//!
//! What each piece costs:
//!
//! - **text**: the profile's tokenizer (exact for OpenAI encodings, else the estimate);
//! - **images and other data**: the profile's [`ImageRule`](super::ImageRule), with the size
//!   read from inline image headers when possible, else the rule's default size; OpenAI's
//!   `"detail": "low"` is honoured (looked up in the part's `extra`, at the top or under
//!   `image_url`). Audio and documents are counted like an image of unknown size;
//! - **tool calls**: name + arguments + [`TOOL_CALL_OVERHEAD`];
//! - **tool results**: their inner parts + [`TOOL_RESULT_OVERHEAD`];
//! - **reasoning**: the readable text through the tokenizer; each signature or encrypted blob
//!   costs a fixed [`REASONING_BLOB_TOKENS`], never its length as text. Blobs are opaque
//!   ciphertext whose size says nothing reliable about what the provider bills for it, and
//!   providers drop the reasoning of earlier turns from the prompt; counting base64 as text
//!   would inflate a Codex rollout several-fold. The provider's reported usage corrects what
//!   remains (see [`super::Calibration`]);
//! - **opaque parts**: the tokens of their JSON text;
//! - **messages**: their parts + the profile's `message_overhead` (+ the name and 1 token when
//!   a participant name is set);
//! - **tool schemas**: the JSON of `{name, description, parameters}` + the profile's
//!   `tool_overhead` each, + `tools_overhead` once when there are any (OpenAI renders schemas
//!   more compactly than JSON, so this errs on the high side);
//! - **requests**: messages + tool schemas + the profile's `request_overhead`.
//!
//! ```
//! use ctxkeeper_core::model::{Message, Part, Request};
//! use ctxkeeper_core::tokens::{Profiles, TokenModel};
//!
//! let model = TokenModel::for_model("gpt-4o-2024-08-06", &Profiles::builtin());
//! assert_eq!(model.text_tokens("hello world"), 2);
//! // 2 text tokens + 3 per message (OpenAI's chat format).
//! assert_eq!(model.message_tokens(&Message::user("hello world")), 5);
//!
//! let request = Request {
//!     messages: vec![
//!         Message::system("be brief"),
//!         Message::tool_call("c1", "search", r#"{"q":"rust"}"#),
//!         Message::tool_result("c1", "3 hits"),
//!     ],
//!     ..Request::default()
//! };
//! let breakdown = model.request_breakdown(&request);
//! assert_eq!(breakdown.total(), model.request_tokens(&request));
//! assert!(breakdown.tool_call > 0 && breakdown.tool_result > 0);
//! ```

use serde::Serialize;
use serde_json::Value;

use super::estimate::estimate;
use super::exact::Encoding;
use super::image::image_size;
use super::profiles::{ModelProfile, Profiles, TokenizerKind};
use crate::model::{DataSource, Extra, Message, Part, PartKind, Request, ToolSpec};

/// Tokens a tool call costs besides its name and arguments (framing and id; an approximation).
pub const TOOL_CALL_OVERHEAD: u32 = 3;
/// Tokens a tool result costs besides its content (framing and call id; an approximation).
pub const TOOL_RESULT_OVERHEAD: u32 = 2;
/// Tokens counted for each reasoning signature or encrypted reasoning blob.
pub const REASONING_BLOB_TOKENS: u32 = 8;
/// Tokens a participant name costs besides its text (OpenAI's chat format: 1).
pub const NAME_OVERHEAD: u32 = 1;

/// Counts tokens of messages, parts and tool schemas for one model profile.
///
/// Counting holds no state and no cache; put a [`TokenLedger`](super::TokenLedger) or a
/// [`TokenCache`](super::TokenCache) in front of it to count a growing history cheaply.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenModel {
    /// The model's profile.
    pub profile: ModelProfile,
}

impl TokenModel {
    /// The token model for a profile.
    pub fn new(profile: ModelProfile) -> TokenModel {
        TokenModel { profile }
    }

    /// The token model of a named model, looked up in `profiles` (dated names, provider
    /// prefixes and unknown names are handled as [`Profiles::lookup`] describes).
    pub fn for_model(name: &str, profiles: &Profiles) -> TokenModel {
        TokenModel::new(profiles.lookup(name))
    }

    /// Tokens of a plain text.
    pub fn text_tokens(&self, text: &str) -> u32 {
        match self.profile.tokenizer {
            TokenizerKind::O200kBase => Encoding::O200kBase.count(text),
            TokenizerKind::Cl100kBase => Encoding::Cl100kBase.count(text),
            TokenizerKind::Estimate { ratio } => estimate(text, ratio),
        }
    }

    /// Tokens of a plain text if they are at most `limit`, else `None`. With an exact
    /// tokenizer this stops counting soon after the limit, so checking a large text against a
    /// small budget is cheap.
    pub fn text_tokens_up_to(&self, text: &str, limit: u32) -> Option<u32> {
        match self.profile.tokenizer.encoding() {
            Some(encoding) => encoding.count_up_to(text, limit),
            None => Some(self.text_tokens(text)).filter(|&count| count <= limit),
        }
    }

    /// Tokens of one part (without per-message overhead).
    pub fn part_tokens(&self, part: &Part) -> u32 {
        match part {
            Part::Text { text, .. } => self.text_tokens(text),
            Part::Data { source, extra, .. } => self.data_tokens(source, extra),
            Part::ToolCall {
                name, arguments, ..
            } => self
                .text_tokens(name)
                .saturating_add(self.text_tokens(arguments))
                .saturating_add(TOOL_CALL_OVERHEAD),
            Part::ToolResult { content, .. } => {
                content.iter().fold(TOOL_RESULT_OVERHEAD, |sum, inner| {
                    sum.saturating_add(self.part_tokens(inner))
                })
            }
            Part::Reasoning {
                text,
                signature,
                encrypted,
                ..
            } => {
                let readable = text.as_deref().map_or(0, |text| self.text_tokens(text));
                let blobs = u32::from(signature.is_some()) + u32::from(encrypted.is_some());
                readable.saturating_add(blobs * REASONING_BLOB_TOKENS)
            }
            Part::Opaque { value } => self.json_tokens(value),
        }
    }

    /// Tokens of an image (or other data part) under the profile's image rule.
    pub fn data_tokens(&self, source: &DataSource, extra: &Extra) -> u32 {
        self.profile
            .image
            .tokens(image_size(source), is_low_detail(extra))
    }

    /// Tokens of one message, per-message overhead included.
    pub fn message_tokens(&self, message: &Message) -> u32 {
        message
            .parts
            .iter()
            .fold(self.message_fixed_tokens(message), |sum, part| {
                sum.saturating_add(self.part_tokens(part))
            })
    }

    /// Tokens of a list of messages (no request overhead, no tools).
    pub fn messages_tokens(&self, messages: &[Message]) -> u64 {
        messages
            .iter()
            .map(|m| u64::from(self.message_tokens(m)))
            .sum()
    }

    /// Tokens of one tool schema, its overhead included.
    pub fn tool_tokens(&self, tool: &ToolSpec) -> u32 {
        let mut schema = serde_json::Map::new();
        schema.insert("name".into(), Value::String(tool.name.clone()));
        if let Some(description) = &tool.description {
            schema.insert("description".into(), Value::String(description.clone()));
        }
        if !tool.parameters.is_null() {
            schema.insert("parameters".into(), tool.parameters.clone());
        }
        self.json_tokens(&Value::Object(schema))
            .saturating_add(self.profile.tool_overhead)
    }

    /// Tokens of the tool schemas sent with a request (zero for none).
    pub fn tools_tokens(&self, tools: &[ToolSpec]) -> u32 {
        if tools.is_empty() {
            return 0;
        }
        tools.iter().fold(self.profile.tools_overhead, |sum, tool| {
            sum.saturating_add(self.tool_tokens(tool))
        })
    }

    /// Tokens of a whole request: its messages, its tool schemas and the request overhead.
    pub fn request_tokens(&self, request: &Request) -> u64 {
        self.messages_tokens(&request.messages)
            + u64::from(self.tools_tokens(&request.tools))
            + u64::from(self.profile.request_overhead)
    }

    /// Where a message's tokens go, by part kind; its total equals
    /// [`message_tokens`](Self::message_tokens).
    pub fn message_breakdown(&self, message: &Message) -> Breakdown {
        let mut breakdown = Breakdown {
            overhead: u64::from(self.message_fixed_tokens(message)),
            ..Breakdown::default()
        };
        for part in &message.parts {
            *breakdown.slot(part.kind()) += u64::from(self.part_tokens(part));
        }
        breakdown
    }

    /// Where a request's tokens go; its total equals [`request_tokens`](Self::request_tokens).
    pub fn request_breakdown(&self, request: &Request) -> Breakdown {
        let mut breakdown = Breakdown {
            overhead: u64::from(self.profile.request_overhead),
            tools: u64::from(self.tools_tokens(&request.tools)),
            ..Breakdown::default()
        };
        for message in &request.messages {
            breakdown += self.message_breakdown(message);
        }
        breakdown
    }

    /// The per-message overhead plus the participant name.
    fn message_fixed_tokens(&self, message: &Message) -> u32 {
        let name = message.name.as_deref().map_or(0, |name| {
            self.text_tokens(name).saturating_add(NAME_OVERHEAD)
        });
        self.profile.message_overhead.saturating_add(name)
    }

    fn json_tokens(&self, value: &Value) -> u32 {
        // Serialising a `Value` cannot fail: its keys are strings.
        self.text_tokens(&serde_json::to_string(value).unwrap_or_default())
    }
}

/// OpenAI's `"detail": "low"`, at the top of the part's extra fields (Responses) or under
/// `image_url` (Chat Completions).
fn is_low_detail(extra: &Extra) -> bool {
    let detail = extra
        .get("detail")
        .or_else(|| extra.get("image_url").and_then(|url| url.get("detail")));
    detail.and_then(Value::as_str) == Some("low")
}

/// Tokens by what they were spent on: part kinds, overheads and tool schemas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Breakdown {
    /// Text parts.
    pub text: u64,
    /// Images and other data.
    pub data: u64,
    /// Tool calls (name, arguments, framing).
    pub tool_call: u64,
    /// Tool results (everything inside them, images included).
    pub tool_result: u64,
    /// Reasoning (readable text and the fixed cost of blobs).
    pub reasoning: u64,
    /// Opaque parts.
    pub opaque: u64,
    /// Per-message and per-request overheads, participant names included.
    pub overhead: u64,
    /// Tool schemas.
    pub tools: u64,
}

impl Breakdown {
    /// The sum of every field.
    pub fn total(&self) -> u64 {
        self.text
            + self.data
            + self.tool_call
            + self.tool_result
            + self.reasoning
            + self.opaque
            + self.overhead
            + self.tools
    }

    /// The tokens of one part kind.
    pub fn get(&self, kind: PartKind) -> u64 {
        match kind {
            PartKind::Text => self.text,
            PartKind::Data => self.data,
            PartKind::ToolCall => self.tool_call,
            PartKind::ToolResult => self.tool_result,
            PartKind::Reasoning => self.reasoning,
            PartKind::Opaque => self.opaque,
        }
    }

    /// Each part kind with its tokens, in [`PartKind::ALL`] order.
    pub fn by_kind(&self) -> [(PartKind, u64); 6] {
        PartKind::ALL.map(|kind| (kind, self.get(kind)))
    }

    fn slot(&mut self, kind: PartKind) -> &mut u64 {
        match kind {
            PartKind::Text => &mut self.text,
            PartKind::Data => &mut self.data,
            PartKind::ToolCall => &mut self.tool_call,
            PartKind::ToolResult => &mut self.tool_result,
            PartKind::Reasoning => &mut self.reasoning,
            PartKind::Opaque => &mut self.opaque,
        }
    }
}

impl std::ops::AddAssign for Breakdown {
    fn add_assign(&mut self, other: Breakdown) {
        self.text += other.text;
        self.data += other.data;
        self.tool_call += other.tool_call;
        self.tool_result += other.tool_result;
        self.reasoning += other.reasoning;
        self.opaque += other.opaque;
        self.overhead += other.overhead;
        self.tools += other.tools;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::Role;
    use crate::tokens::ImageRule;

    fn model(name: &str) -> TokenModel {
        TokenModel::for_model(name, &Profiles::builtin())
    }

    fn extra(value: Value) -> Extra {
        match value {
            Value::Object(map) => map,
            _ => Extra::new(),
        }
    }

    #[test]
    fn text_uses_the_profiles_tokenizer() {
        let text = "人工智能正在改变我们的生活方式。";
        assert_eq!(model("gpt-4o").text_tokens(text), 8);
        assert_eq!(model("gpt-4").text_tokens(text), 14);
        let claude = model("claude-sonnet-4").text_tokens(text);
        assert!((8..=20).contains(&claude), "{claude}");
        assert_eq!(model("gpt-4o").text_tokens(""), 0);
    }

    #[test]
    fn messages_follow_openais_chat_format() {
        // The OpenAI cookbook's example: 3 per message + 1 per name + 3 to prime the reply.
        let gpt = model("gpt-4o");
        let mut named = Message::user("New synergies will help drive top-line growth.");
        named.name = Some("example_user".into());
        let plain = Message::system("You are a helpful assistant.");
        let text = gpt.text_tokens("New synergies will help drive top-line growth.");
        let name = gpt.text_tokens("example_user");
        assert_eq!(gpt.message_tokens(&named), 3 + text + name + 1);
        let request = Request {
            messages: vec![plain.clone(), named.clone()],
            ..Request::default()
        };
        assert_eq!(
            gpt.request_tokens(&request),
            u64::from(gpt.message_tokens(&plain) + gpt.message_tokens(&named)) + 3
        );
    }

    #[test]
    fn tool_calls_and_results_count_their_content_and_framing() {
        let gpt = model("gpt-4o");
        let call = Part::tool_call("call_1", "get_weather", r#"{"city":"Paris"}"#);
        let expected = gpt.text_tokens("get_weather") + gpt.text_tokens(r#"{"city":"Paris"}"#) + 3;
        assert_eq!(gpt.part_tokens(&call), expected);
        let result = Part::tool_result("call_1", "sunny, 21 °C");
        assert_eq!(
            gpt.part_tokens(&result),
            gpt.text_tokens("sunny, 21 °C") + 2
        );
    }

    #[test]
    fn encrypted_reasoning_is_never_counted_as_text() {
        let gpt = model("gpt-5");
        let blob = "gAAAAABo".repeat(5_000);
        let hidden = Part::Reasoning {
            text: None,
            signature: None,
            encrypted: Some(blob.clone()),
            redacted: false,
            extra: Extra::new(),
        };
        assert_eq!(gpt.part_tokens(&hidden), REASONING_BLOB_TOKENS);
        let readable = Part::Reasoning {
            text: Some("Let me check the file first.".into()),
            signature: Some(blob),
            encrypted: None,
            redacted: false,
            extra: Extra::new(),
        };
        assert_eq!(
            gpt.part_tokens(&readable),
            gpt.text_tokens("Let me check the file first.") + REASONING_BLOB_TOKENS
        );
    }

    #[test]
    fn images_follow_the_profiles_rule() {
        let url = DataSource::Url {
            url: "https://example.com/cat.png".into(),
        };
        let image = |extra: Extra| Part::Data {
            source: url.clone(),
            wire_type: None,
            extra,
        };
        assert_eq!(model("gpt-4o").part_tokens(&image(Extra::new())), 765);
        let low = extra(json!({"image_url": {"detail": "low"}}));
        assert_eq!(model("gpt-4o").part_tokens(&image(low)), 85);
        let low = extra(json!({"detail": "low"}));
        assert_eq!(model("gpt-4o").part_tokens(&image(low)), 85);
        assert_eq!(
            model("claude-sonnet-4").part_tokens(&image(Extra::new())),
            1_399
        );
        assert_eq!(
            model("gemini-2.5-pro").part_tokens(&image(Extra::new())),
            258
        );
        let archived = DataSource::Archived {
            sha256: "ab".into(),
            media_type: "image/png".into(),
        };
        let part = Part::Data {
            source: archived,
            wire_type: None,
            extra: Extra::new(),
        };
        assert_eq!(
            model("gpt-4o").part_tokens(&part),
            ImageRule::OpenAiTiles {
                base: 85,
                per_tile: 170
            }
            .default_tokens()
        );
    }

    #[test]
    fn opaque_parts_count_their_json() {
        let gpt = model("gpt-4o");
        let value = json!({"type": "web_search_call", "status": "completed"});
        let text = serde_json::to_string(&value).unwrap_or_default();
        assert_eq!(
            gpt.part_tokens(&Part::Opaque { value }),
            gpt.text_tokens(&text)
        );
    }

    #[test]
    fn tool_schemas_count_their_json_and_overheads() {
        let gpt = model("gpt-4o");
        let tool = ToolSpec {
            name: "get_weather".into(),
            description: Some("Current weather of a city".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            extra: Extra::new(),
            hints: Default::default(),
        };
        let json = r#"{"name":"get_weather","description":"Current weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}"#;
        assert_eq!(gpt.tool_tokens(&tool), gpt.text_tokens(json) + 8);
        assert_eq!(
            gpt.tools_tokens(std::slice::from_ref(&tool)),
            gpt.text_tokens(json) + 8 + 12
        );
        assert_eq!(gpt.tools_tokens(&[]), 0);
        let claude = model("claude-sonnet-4-5");
        assert!(claude.tools_tokens(std::slice::from_ref(&tool)) > 346);
    }

    #[test]
    fn breakdowns_add_up_to_the_totals() {
        let gpt = model("gpt-4o");
        let mut assistant = Message::new(
            Role::Assistant,
            vec![
                Part::Reasoning {
                    text: Some("thinking".into()),
                    signature: Some("sig".into()),
                    encrypted: None,
                    redacted: false,
                    extra: Extra::new(),
                },
                Part::text("I'll look."),
                Part::tool_call("c", "ls", "{}"),
                Part::Opaque {
                    value: json!({"x": 1}),
                },
            ],
        );
        assistant.name = Some("bot".into());
        let request = Request {
            messages: vec![
                Message::system("rules"),
                assistant,
                Message::tool_result("c", "a b c"),
            ],
            tools: vec![ToolSpec {
                name: "ls".into(),
                description: None,
                parameters: Value::Null,
                extra: Extra::new(),
                hints: Default::default(),
            }],
            ..Request::default()
        };
        for message in &request.messages {
            assert_eq!(
                gpt.message_breakdown(message).total(),
                u64::from(gpt.message_tokens(message))
            );
        }
        let breakdown = gpt.request_breakdown(&request);
        assert_eq!(breakdown.total(), gpt.request_tokens(&request));
        assert!(
            breakdown
                .by_kind()
                .iter()
                .all(|&(kind, tokens)| tokens == breakdown.get(kind))
        );
        assert_eq!(breakdown.data, 0);
        assert!(breakdown.reasoning > 0 && breakdown.opaque > 0 && breakdown.tools > 0);
    }

    #[test]
    fn text_tokens_up_to_stops_at_the_limit() {
        for name in ["gpt-4o", "gpt-4", "claude-sonnet-4"] {
            let model = model(name);
            let text = "lorem ipsum dolor sit amet ".repeat(100);
            let full = model.text_tokens(&text);
            assert_eq!(model.text_tokens_up_to(&text, full), Some(full), "{name}");
            assert_eq!(model.text_tokens_up_to(&text, full - 1), None, "{name}");
        }
    }
}
