//! [`OpenAiSummarizer`]: OpenAI Chat Completions and every server that speaks it.
//!
//! The base URL is configurable, so the same summarizer works against OpenAI, Azure-style
//! proxies, vLLM, Ollama (`http://localhost:11434/v1`), llama.cpp's `llama-server`, DeepSeek,
//! OpenRouter and LiteLLM; the API key is optional for local servers.
//!
//! The summary is requested with `response_format: json_schema` (strict) first. When the
//! server refuses that (DeepSeek: "This response_format type is unavailable now", Groq: "value
//! is not one of the allowed values ['text','json_object']"), it falls back to a forced
//! `record_summary` tool call; when that is refused too ("does not support tools", "Thinking
//! mode does not support this tool_choice"), to a JSON object written as plain text. The mode
//! that works is remembered for later calls. A server that wants `max_completion_tokens`
//! instead of `max_tokens`, or refuses a `temperature`, gets the request adjusted once.
//!
//! ```no_run
//! # async fn example() -> Result<(), ctxkeeper_llm::LlmError> {
//! use ctxkeeper_llm::{OpenAiConfig, OpenAiSummarizer, Resilient, Summarizer};
//!
//! let mut config = OpenAiConfig::new("http://127.0.0.1:8000/v1", "Qwen/Qwen3-8B");
//! config.options.context_window = Some(32_768); // vLLM --max-model-len
//! let summarizer = Resilient::new(OpenAiSummarizer::new(config)?);
//! assert_eq!(summarizer.name(), "openai:Qwen/Qwen3-8B");
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde_json::{Map, Value, json};

use crate::error::LlmError;
use crate::http::secret_header;
use crate::options::{Secret, SummarizerOptions};
use crate::prompt::{SUMMARY_TOOL, TOOL_DESCRIPTION};
use crate::structured::{
    Backend, BackendCore, CallError, OutputMode, StructuredCall, backend_summarizer, extract_json,
    finish_body,
};

/// Which field carries the output budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenField {
    /// `max_tokens`: understood by every compatible server.
    MaxTokens,
    /// `max_completion_tokens`: required by OpenAI's reasoning models.
    MaxCompletionTokens,
}

/// Configuration of an [`OpenAiSummarizer`].
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL up to and including the version (`https://api.openai.com/v1`); requests go to
    /// `{base_url}/chat/completions`.
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<Secret>,
    /// The output-budget field tried first; switched automatically when the server asks.
    pub token_field: TokenField,
    /// Extra request fields merged into every request without overriding the summarizer's own
    /// (for example Ollama's `{"options": {"num_ctx": 32768}}`).
    pub extra_body: Map<String, Value>,
    pub options: SummarizerOptions,
}

impl OpenAiConfig {
    /// A configuration for `model` at `base_url`, without a key, with default options.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            token_field: TokenField::MaxTokens,
            extra_body: Map::new(),
            options: SummarizerOptions::default(),
        }
    }

    /// Sets the API key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> OpenAiConfig {
        self.api_key = Some(Secret::new(key));
        self
    }
}

/// The structured-output modes, best first.
const LADDER: &[OutputMode] = &[
    OutputMode::JsonSchema,
    OutputMode::ForcedTool,
    OutputMode::Text,
];

/// A summarizer backed by an OpenAI-compatible Chat Completions endpoint.
#[derive(Debug)]
pub struct OpenAiSummarizer {
    config: OpenAiConfig,
    core: BackendCore,
    use_completion_tokens: AtomicBool,
    drop_temperature: AtomicBool,
}

impl OpenAiSummarizer {
    /// Builds the summarizer (and its HTTP client). Fails only on an unusable configuration.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiSummarizer, LlmError> {
        Ok(OpenAiSummarizer {
            core: BackendCore::new(
                "openai",
                &config.model,
                LADDER,
                &config.options,
                &config.base_url,
                "chat/completions",
            )?,
            use_completion_tokens: AtomicBool::new(
                config.token_field == TokenField::MaxCompletionTokens,
            ),
            drop_temperature: AtomicBool::new(false),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The request body common to every mode.
    fn base_body(&self, messages: Value, max_tokens: u32) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.config.model));
        body.insert("messages".into(), messages);
        let field = if self.use_completion_tokens.load(Ordering::Relaxed) {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body.insert(field.into(), json!(max_tokens));
        let temperature = (self.config.options.temperature)
            .filter(|_| !self.drop_temperature.load(Ordering::Relaxed));
        finish_body(body, temperature, &self.config.extra_body)
    }
}

/// Whether a 4xx body refuses the way `mode` asks for structure.
fn refuses(mode: Option<OutputMode>, lower: &str) -> bool {
    match mode {
        Some(OutputMode::JsonSchema) => {
            lower.contains("response_format")
                || lower.contains("json_schema")
                || lower.contains("structured output")
        }
        Some(OutputMode::ForcedTool | OutputMode::AutoTool) => {
            lower.contains("tool_choice")
                || lower.contains("tools")
                || lower.contains("tool call")
                || lower.contains("function call")
                || lower.contains("function_call")
        }
        Some(OutputMode::Text) | None => false,
    }
}

/// Reads the summary object out of a Chat Completions answer.
fn read_structured(answer: &Value) -> Result<Value, CallError> {
    let choice = answer
        .pointer("/choices/0")
        .ok_or_else(|| CallError::Invalid("the answer has no choices".into()))?;
    let message = &choice["message"];
    let cut_off = choice["finish_reason"].as_str() == Some("length");
    let cut_off_problem =
        || "the answer was cut off by the output limit; write a shorter summary".to_string();
    if let Some(refusal) = message["refusal"].as_str().filter(|r| !r.is_empty()) {
        return Err(CallError::Invalid(format!("the model refused: {refusal}")));
    }
    if let Some(calls) = message["tool_calls"].as_array().filter(|c| !c.is_empty()) {
        let call = calls
            .iter()
            .find(|c| c.pointer("/function/name").and_then(Value::as_str) == Some(SUMMARY_TOOL))
            .unwrap_or(&calls[0]);
        let arguments = match call.pointer("/function/arguments") {
            Some(Value::String(text)) => text.clone(),
            Some(object @ Value::Object(_)) => return Ok(object.clone()),
            _ => String::new(),
        };
        return serde_json::from_str(&arguments).map_err(|e| {
            CallError::Invalid(if cut_off {
                cut_off_problem()
            } else {
                format!("the tool call arguments are not valid JSON ({e})")
            })
        });
    }
    let text = content_text(&message["content"]);
    extract_json(&text)
        .map_err(|problem| CallError::Invalid(if cut_off { cut_off_problem() } else { problem }))
}

/// The text of a message `content` (a string or a list of text parts).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

#[async_trait]
impl Backend for OpenAiSummarizer {
    fn core(&self) -> &BackendCore {
        &self.core
    }

    fn headers(&self) -> Result<HeaderMap, LlmError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.config.api_key {
            headers.insert(
                AUTHORIZATION,
                secret_header(&format!("Bearer {}", key.expose()))?,
            );
        }
        Ok(headers)
    }

    fn refuses(&self, mode: Option<OutputMode>, lower: &str) -> bool {
        refuses(mode, lower)
    }

    /// Adjusts a refused parameter and asks for the same call again, when the error names one
    /// this summarizer can change.
    fn adjust(&self, status: u16, body: &str) -> Option<CallError> {
        // An overflow names `max_tokens` too; it is never a parameter to adjust.
        if !matches!(status, 400 | 422)
            || ctxkeeper_core::overflow::classify(status, body).is_some()
        {
            return None;
        }
        let lower = body.to_ascii_lowercase();
        let uses_completion = self.use_completion_tokens.load(Ordering::Relaxed);
        let names_field = if uses_completion {
            lower.contains("max_completion_tokens") && !lower.contains("is too large")
        } else {
            lower.contains("max_tokens") && lower.contains("max_completion_tokens")
        };
        if names_field
            && (lower.contains("unsupported")
                || lower.contains("not supported")
                || lower.contains("instead")
                || lower.contains("extra inputs")
                || lower.contains("unrecognized"))
        {
            self.use_completion_tokens
                .store(!uses_completion, Ordering::Relaxed);
            return Some(CallError::Adjusted);
        }
        if self.config.options.temperature.is_some()
            && !self.drop_temperature.load(Ordering::Relaxed)
            && lower.contains("temperature")
            && (lower.contains("unsupported")
                || lower.contains("not supported")
                || lower.contains("only the default"))
        {
            self.drop_temperature.store(true, Ordering::Relaxed);
            return Some(CallError::Adjusted);
        }
        None
    }

    async fn structured(&self, call: StructuredCall<'_>) -> Result<Value, CallError> {
        let messages = json!([
            {"role": "system", "content": call.system},
            {"role": "user", "content": call.user},
        ]);
        let mut body = self.base_body(messages, call.max_tokens);
        let json_schema = call.schema.json_schema();
        match call.mode {
            OutputMode::JsonSchema => {
                body.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": {"name": "summary", "schema": json_schema, "strict": true}}),
                );
            }
            OutputMode::ForcedTool | OutputMode::AutoTool => {
                body.insert(
                    "tools".into(),
                    json!([{"type": "function", "function": {"name": SUMMARY_TOOL, "description": TOOL_DESCRIPTION.trim(), "parameters": json_schema}}]),
                );
                let choice = if call.mode == OutputMode::ForcedTool {
                    json!({"type": "function", "function": {"name": SUMMARY_TOOL}})
                } else {
                    json!("auto")
                };
                body.insert("tool_choice".into(), choice);
            }
            OutputMode::Text => {}
        }
        let answer = self.send(body, Some(call.mode)).await?;
        read_structured(&answer)
    }

    async fn text(&self, user: &str, max_tokens: u32) -> Result<String, CallError> {
        let body = self.base_body(json!([{"role": "user", "content": user}]), max_tokens);
        let answer = self.send(body, None).await?;
        Ok(content_text(
            answer
                .pointer("/choices/0/message/content")
                .unwrap_or(&Value::Null),
        ))
    }
}

backend_summarizer!(OpenAiSummarizer);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_from_content_tool_calls_and_refusals() {
        let content = json!({"choices": [{"message": {"content": "{\"a\": \"b\"}"}, "finish_reason": "stop"}]});
        assert_eq!(read_structured(&content).ok(), Some(json!({"a": "b"})));
        let tool = json!({"choices": [{"message": {"content": null, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "record_summary", "arguments": "{\"a\":1}"}}]}}]});
        assert_eq!(read_structured(&tool).ok(), Some(json!({"a": 1})));
        let refusal = json!({"choices": [{"message": {"content": null, "refusal": "I can't help with that."}}]});
        assert!(
            matches!(read_structured(&refusal), Err(CallError::Invalid(p)) if p.contains("refused"))
        );
        let cut = json!({"choices": [{"message": {"content": "{\"a\": \"b"}, "finish_reason": "length"}]});
        assert!(
            matches!(read_structured(&cut), Err(CallError::Invalid(p)) if p.contains("cut off"))
        );
        assert!(matches!(
            read_structured(&json!({})),
            Err(CallError::Invalid(_))
        ));
    }

    #[test]
    fn refusals_are_recognised_per_mode() {
        assert!(refuses(
            Some(OutputMode::JsonSchema),
            "this response_format type is unavailable now"
        ));
        assert!(refuses(
            Some(OutputMode::ForcedTool),
            "thinking mode does not support this tool_choice"
        ));
        assert!(refuses(
            Some(OutputMode::ForcedTool),
            "registry.ollama.ai/library/deepseek-r1:7b does not support tools"
        ));
        assert!(!refuses(Some(OutputMode::Text), "anything"));
        assert!(!refuses(Some(OutputMode::JsonSchema), "invalid api key"));
    }

    #[test]
    fn debug_output_hides_the_key() {
        let config =
            OpenAiConfig::new("http://127.0.0.1:9/v1", "m").with_api_key("sk-secret-value");
        assert!(!format!("{config:?}").contains("sk-secret-value"));
    }
}
