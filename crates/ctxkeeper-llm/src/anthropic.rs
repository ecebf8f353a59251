//! [`AnthropicSummarizer`]: the Anthropic Messages API.
//!
//! The summary is requested as a forced `record_summary` tool call whose `input_schema` is the
//! summary schema. When the API refuses forced tool use (for example "Thinking may not be
//! enabled when tool_choice forces tool use." when a proxy or `extra_body` turns extended
//! thinking on, or a compatible server that does not implement `tool_choice`), it falls back to
//! `tool_choice: auto` with the prompt asking for the tool, then to a JSON object written as
//! text. The mode that works is remembered.
//!
//! ```no_run
//! # async fn example() -> Result<(), ctxkeeper_llm::LlmError> {
//! use ctxkeeper_llm::{AnthropicConfig, AnthropicSummarizer, Summarizer};
//!
//! let config = AnthropicConfig::new("claude-haiku-4-5").with_api_key("sk-ant-…");
//! let summarizer = AnthropicSummarizer::new(config)?;
//! assert_eq!(summarizer.name(), "anthropic:claude-haiku-4-5");
//! # Ok(()) }
//! ```

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use crate::error::LlmError;
use crate::http::secret_header;
use crate::options::{Secret, SummarizerOptions};
use crate::prompt::{SUMMARY_TOOL, TOOL_DESCRIPTION};
use crate::structured::{
    Backend, BackendCore, CallError, OutputMode, StructuredCall, backend_summarizer, extract_json,
    finish_body,
};

/// The API version header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Configuration of an [`AnthropicSummarizer`].
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// Base URL up to and including the version (`https://api.anthropic.com/v1`); requests go
    /// to `{base_url}/messages`.
    pub base_url: String,
    pub model: String,
    /// Sent as `x-api-key` when set.
    pub api_key: Option<Secret>,
    /// Extra request fields merged into every request without overriding the summarizer's own.
    pub extra_body: Map<String, Value>,
    pub options: SummarizerOptions,
}

impl AnthropicConfig {
    /// A configuration for `model` at Anthropic's public endpoint, without a key.
    pub fn new(model: impl Into<String>) -> AnthropicConfig {
        AnthropicConfig {
            base_url: "https://api.anthropic.com/v1".into(),
            model: model.into(),
            api_key: None,
            extra_body: Map::new(),
            options: SummarizerOptions::default(),
        }
    }

    /// Sets the API key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> AnthropicConfig {
        self.api_key = Some(Secret::new(key));
        self
    }

    /// Sets the base URL (a proxy or a compatible server).
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> AnthropicConfig {
        self.base_url = base_url.into();
        self
    }
}

/// The structured-output modes, best first.
const LADDER: &[OutputMode] = &[
    OutputMode::ForcedTool,
    OutputMode::AutoTool,
    OutputMode::Text,
];

/// A summarizer backed by the Anthropic Messages API.
#[derive(Debug)]
pub struct AnthropicSummarizer {
    config: AnthropicConfig,
    core: BackendCore,
}

impl AnthropicSummarizer {
    /// Builds the summarizer (and its HTTP client). Fails only on an unusable configuration.
    pub fn new(config: AnthropicConfig) -> Result<AnthropicSummarizer, LlmError> {
        Ok(AnthropicSummarizer {
            core: BackendCore::new(
                "anthropic",
                &config.model,
                LADDER,
                &config.options,
                &config.base_url,
                "messages",
            )?,
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    fn base_body(&self, system: Option<&str>, user: &str, max_tokens: u32) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.config.model));
        body.insert("max_tokens".into(), json!(max_tokens));
        if let Some(system) = system {
            body.insert("system".into(), json!(system));
        }
        body.insert(
            "messages".into(),
            json!([{"role": "user", "content": user}]),
        );
        finish_body(
            body,
            self.config.options.temperature,
            &self.config.extra_body,
        )
    }
}

/// Whether a 4xx body refuses the way `mode` asks for structure.
fn refuses(mode: Option<OutputMode>, lower: &str) -> bool {
    match mode {
        Some(OutputMode::ForcedTool) => {
            lower.contains("tool_choice") || lower.contains("tool use") || lower.contains("tools")
        }
        Some(OutputMode::AutoTool) => lower.contains("tool"),
        Some(OutputMode::JsonSchema | OutputMode::Text) | None => false,
    }
}

/// Reads the summary object out of a Messages answer: the `record_summary` tool input, or a
/// JSON object in the text blocks.
fn read_structured(answer: &Value) -> Result<Value, CallError> {
    let blocks = answer["content"]
        .as_array()
        .ok_or_else(|| CallError::Invalid("the answer has no content".into()))?;
    let tool_use = blocks
        .iter()
        .find(|b| b["type"] == "tool_use" && b["name"] == SUMMARY_TOOL);
    if let Some(block) = tool_use {
        return match &block["input"] {
            Value::Object(_) => Ok(block["input"].clone()),
            // Some compatible servers send the input as a JSON string.
            Value::String(text) => extract_json(text).map_err(CallError::Invalid),
            _ => Err(CallError::Invalid(
                "the tool input is not a JSON object".into(),
            )),
        };
    }
    let text = text_of(blocks);
    let cut_off = answer["stop_reason"] == "max_tokens";
    extract_json(&text).map_err(|problem| {
        CallError::Invalid(if cut_off {
            "the answer was cut off by the output limit; write a shorter summary".into()
        } else {
            problem
        })
    })
}

fn text_of(blocks: &[Value]) -> String {
    blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

#[async_trait]
impl Backend for AnthropicSummarizer {
    fn core(&self) -> &BackendCore {
        &self.core
    }

    fn headers(&self) -> Result<HeaderMap, LlmError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if let Some(key) = &self.config.api_key {
            headers.insert(
                HeaderName::from_static("x-api-key"),
                secret_header(key.expose())?,
            );
        }
        Ok(headers)
    }

    fn refuses(&self, mode: Option<OutputMode>, lower: &str) -> bool {
        refuses(mode, lower)
    }

    async fn structured(&self, call: StructuredCall<'_>) -> Result<Value, CallError> {
        let mut body = self.base_body(Some(call.system), call.user, call.max_tokens);
        if matches!(call.mode, OutputMode::ForcedTool | OutputMode::AutoTool) {
            body.insert(
                "tools".into(),
                json!([{"name": SUMMARY_TOOL, "description": TOOL_DESCRIPTION.trim(), "input_schema": call.schema.json_schema()}]),
            );
            let choice = if call.mode == OutputMode::ForcedTool {
                json!({"type": "tool", "name": SUMMARY_TOOL})
            } else {
                json!({"type": "auto"})
            };
            body.insert("tool_choice".into(), choice);
        }
        let answer = self.send(body, Some(call.mode)).await?;
        read_structured(&answer)
    }

    async fn text(&self, user: &str, max_tokens: u32) -> Result<String, CallError> {
        let body = self.base_body(None, user, max_tokens);
        let answer = self.send(body, None).await?;
        Ok(answer["content"]
            .as_array()
            .map(|blocks| text_of(blocks))
            .unwrap_or_default())
    }
}

backend_summarizer!(AnthropicSummarizer);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_from_tool_use_and_text() {
        let tool = json!({"content": [{"type": "tool_use", "id": "t1", "name": "record_summary", "input": {"a": "b"}}], "stop_reason": "tool_use"});
        assert_eq!(read_structured(&tool).ok(), Some(json!({"a": "b"})));
        let text = json!({"content": [{"type": "text", "text": "Sure: {\"a\": 1}"}], "stop_reason": "end_turn"});
        assert_eq!(read_structured(&text).ok(), Some(json!({"a": 1})));
        let cut =
            json!({"content": [{"type": "text", "text": "{\"a\": "}], "stop_reason": "max_tokens"});
        assert!(
            matches!(read_structured(&cut), Err(CallError::Invalid(p)) if p.contains("cut off"))
        );
    }

    #[test]
    fn forced_tool_refusals_are_recognised() {
        assert!(refuses(
            Some(OutputMode::ForcedTool),
            "thinking may not be enabled when tool_choice forces tool use."
        ));
        assert!(!refuses(
            Some(OutputMode::ForcedTool),
            "messages: roles must alternate"
        ));
        assert!(!refuses(Some(OutputMode::Text), "tool_choice"));
    }
}
