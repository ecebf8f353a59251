//! Summaries written by the model the agent is already talking to, on its prompt cache.
//!
//! With `summarizer = "upstream"` (the default of `ctxkeeper serve`), a compaction's summary
//! is asked of the request's own upstream, as the caller (its own credentials, taken from the
//! request that triggered the compaction and never stored) and with the request's model unless
//! a cheaper `summarizer_model` is configured.
//!
//! **On the cache.** The summary request is the conversation's last forwarded request, byte
//! for byte (same system prompt, same tools, same messages), plus one closing instruction
//! ([`ctxkeeper_llm::prompt::in_context_instruction`]): a provider that caches prompt
//! prefixes serves almost all of it from its cache, at a tenth of the price, where a
//! separate summarization prompt would be billed in full. When no forwarded request is known
//! yet (the first step after a restart), the request is built from the messages to summarize
//! with the caller's model (and its tools only when the messages hold tool calls, which
//! Anthropic requires).
//!
//! **Its shape.** The answer must be the summary: a summary request that keeps tools (for the
//! cached prefix, which starts with them, or for tool blocks) says `tool_choice: none`, one
//! without tools says nothing of tool choice, and no summary request carries a thinking
//! budget (`thinking` is removed; `max_tokens` is the summary's own bound). On Anthropic a
//! changed `tool_choice` or thinking setting costs the cached *messages* (tools and system
//! stay cached): the price of an answer that is never a tool call nor 32k tokens of thinking.
//!
//! A failure (an error status, a timeout, an answer that is not the summary object) is
//! returned as an [`LlmError`]; the session's [`ctxkeeper::ContextManager`] then stands in the
//! extractive summary, marked degraded, and reports the cause: the agent's request never fails
//! because of its summary.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::http::HeaderMap;
use bytes::Bytes;
use ctxkeeper_core::formats::Wire;
use ctxkeeper_core::model::{Part, Request as WireRequest, ToolSpec};
use ctxkeeper_core::summary::{Summary, SummaryRequest};
use ctxkeeper_llm::prompt::in_context_instruction;
use ctxkeeper_llm::{LlmError, Summarizer, extract_json};
use serde_json::{Map, Value, json};

use crate::telemetry::{SummaryTrace, UsageReport};

/// The opening words of the closing instruction; the mock upstream answers requests ending
/// with them like a model that follows the instruction.
pub const SUMMARY_REQUEST_MARK: &str = "[ctxkeeper summary request]";

/// Who writes the gateway's summaries.
#[derive(Clone)]
pub enum SummarizerChoice {
    /// The request's own upstream, as the caller; `model` replaces the request's model.
    Upstream { model: Option<String> },
    /// A fixed summarizer (`extractive`, or a configured OpenAI / Anthropic one).
    Fixed(Arc<dyn Summarizer>),
}

impl fmt::Debug for SummarizerChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl SummarizerChoice {
    /// The choice named `kind` (`upstream`, `extractive`, `openai`, `anthropic`).
    pub fn parse(
        kind: &str,
        url: Option<&str>,
        model: Option<&str>,
    ) -> Result<SummarizerChoice, String> {
        match kind {
            "upstream" => {
                if url.is_some() {
                    return Err("the upstream summarizer uses the request's own upstream: a summarizer URL needs the openai or anthropic summarizer".into());
                }
                Ok(SummarizerChoice::Upstream {
                    model: model.map(str::to_owned),
                })
            }
            other => ctxkeeper::summarizers::build(other, url, model)
                .map(SummarizerChoice::Fixed)
                .map_err(|e| format!("{e} (or upstream)")),
        }
    }

    /// `upstream`, `upstream:MODEL` or the fixed summarizer's name.
    pub fn name(&self) -> String {
        match self {
            SummarizerChoice::Upstream { model: None } => "upstream".into(),
            SummarizerChoice::Upstream { model: Some(m) } => format!("upstream:{m}"),
            SummarizerChoice::Fixed(summarizer) => summarizer.name().to_string(),
        }
    }
}

/// How one request reaches its upstream, for a summary call made on its behalf.
#[derive(Clone)]
pub struct UpstreamRoute {
    pub client: reqwest::Client,
    /// The endpoint the request is forwarded to.
    pub url: String,
    /// The headers forwarded with it (the caller's credentials among them).
    pub headers: HeaderMap,
    pub wire: Wire,
    pub model: Option<String>,
    pub tools: Vec<ToolSpec>,
    /// Time allowed for the summary call.
    pub timeout: Duration,
    /// The trace a summary call's span joins, when traces are exported.
    pub trace: Option<SummaryTrace>,
}

impl fmt::Debug for UpstreamRoute {
    // Never prints the headers: they hold the caller's key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamRoute")
            .field("url", &self.url)
            .field("wire", &self.wire)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// A summarizer that asks the request's own upstream (see the module documentation).
#[derive(Debug)]
pub struct UpstreamSummarizer {
    route: Arc<UpstreamRoute>,
    /// The body of the conversation's last forwarded request, when known.
    prefix: Option<Bytes>,
    model: Option<String>,
    name: String,
}

impl UpstreamSummarizer {
    pub fn new(
        route: Arc<UpstreamRoute>,
        prefix: Option<Bytes>,
        model: Option<String>,
    ) -> UpstreamSummarizer {
        let shown = model
            .as_deref()
            .or(route.model.as_deref())
            .unwrap_or("model");
        let name = format!("upstream:{shown}");
        UpstreamSummarizer {
            route,
            prefix,
            model,
            name,
        }
    }

    /// The summary request's body: the last forwarded request (else one built from the
    /// messages to summarize) with the closing instruction appended.
    pub fn body(&self, request: &SummaryRequest) -> Map<String, Value> {
        self.body_over(request, self.prefix.as_ref())
    }

    fn body_over(&self, request: &SummaryRequest, prefix: Option<&Bytes>) -> Map<String, Value> {
        let wire = self.route.wire;
        let mut body = prefix
            .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(bytes).ok())
            .unwrap_or_else(|| {
                // Built from the messages, the request declares tools only where the API
                // needs them: Anthropic refuses tool blocks in a request without tools.
                let calls = request.messages.iter().any(|m| {
                    m.has_tool_results()
                        || m.parts.iter().any(|p| matches!(p, Part::ToolCall { .. }))
                });
                let built = WireRequest {
                    model: self.route.model.clone(),
                    messages: request.messages.clone(),
                    tools: if calls {
                        self.route.tools.clone()
                    } else {
                        Vec::new()
                    },
                    ..WireRequest::default()
                };
                match wire.emit_request(&built) {
                    Value::Object(body) => body,
                    _ => Map::new(),
                }
            });
        let last = request
            .messages
            .last()
            .map(|m| m.text())
            .unwrap_or_default();
        let instruction = in_context_instruction(
            &request.schema,
            request.messages.len(),
            &last,
            request.guidance().as_deref(),
            request.max_output_tokens,
        );
        append_instruction(wire, &mut body, instruction);
        if let Some(model) = &self.model {
            body.insert("model".into(), json!(model));
        }
        body.insert("stream".into(), Value::Bool(false));
        body.remove("stream_options");
        // No thinking budget: the summary is written, not reasoned out at the agent's length.
        body.remove("thinking");
        limit_output(wire, &mut body, u64::from(request.max_output_tokens));
        no_tool_calls(wire, &mut body);
        body
    }
}

#[async_trait]
impl Summarizer for UpstreamSummarizer {
    async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
        match self.call(request, self.prefix.as_ref()).await {
            // The conversation near its window plus the summary's output can exceed the
            // window: ask again with only the messages to summarize.
            Err(LlmError::Status { status, body, .. })
                if self.prefix.is_some()
                    && ctxkeeper_core::overflow::classify(status, &body).is_some() =>
            {
                self.call(request, None).await
            }
            other => other,
        }
    }

    fn name(&self) -> &str {
        &self.name
    }
}

impl UpstreamSummarizer {
    /// One summary call, traced as a span of its own when the request is traced.
    async fn call(
        &self,
        request: &SummaryRequest,
        prefix: Option<&Bytes>,
    ) -> Result<Summary, LlmError> {
        let body = self.body_over(request, prefix);
        let mut headers = self.route.headers.clone();
        let span = self.route.trace.as_ref().map(SummaryTrace::begin);
        if let Some(span) = &span {
            span.propagate(&mut headers);
        }
        let mut seen = Seen::default();
        let summary = self.exchange(request, &body, headers, &mut seen).await;
        if let Some(span) = span {
            let model = body.get("model").and_then(Value::as_str);
            let error = summary.as_ref().err().map(|error| match error {
                LlmError::Timeout => "timeout",
                LlmError::Status { .. } => "status",
                LlmError::InvalidOutput { .. } => "invalid_output",
                _ => "transport",
            });
            span.end(model, seen.report.as_ref(), seen.status, error);
        }
        summary
    }

    async fn exchange(
        &self,
        request: &SummaryRequest,
        body: &Map<String, Value>,
        headers: HeaderMap,
        seen: &mut Seen,
    ) -> Result<Summary, LlmError> {
        let answer = self
            .route
            .client
            .post(&self.route.url)
            .headers(headers)
            .timeout(self.route.timeout)
            .json(body)
            .send()
            .await
            .map_err(transport)?;
        let status = answer.status().as_u16();
        seen.status = Some(status);
        let bytes = answer.bytes().await.map_err(transport)?;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&bytes);
            return Err(LlmError::Status {
                status,
                body: text.chars().take(2_000).collect(),
                retry_after: None,
            });
        }
        let answer: Value =
            serde_json::from_slice(&bytes).map_err(|e| LlmError::InvalidOutput {
                attempts: 1,
                problem: format!("the answer is not JSON: {e}"),
            })?;
        seen.report = Some(UsageReport::from_body(&answer));
        let (input, cached) = usage(self.route.wire, &answer);
        tracing::info!(
            summarizer = %self.name,
            input_tokens = input,
            cached_tokens = cached,
            "summary written on the upstream"
        );
        let text = answer_text(self.route.wire, &answer);
        let value = extract_json(&text).map_err(|problem| LlmError::InvalidOutput {
            attempts: 1,
            problem,
        })?;
        Summary::from_json(&value, &request.schema, &self.name).map_err(|problem| {
            LlmError::InvalidOutput {
                attempts: 1,
                problem,
            }
        })
    }
}

/// What a summary call saw of its answer, for its span.
#[derive(Debug, Default)]
struct Seen {
    status: Option<u16>,
    report: Option<UsageReport>,
}

fn transport(err: reqwest::Error) -> LlmError {
    if err.is_timeout() {
        LlmError::Timeout
    } else {
        // reqwest's message names the URL, never the headers.
        LlmError::Transport {
            message: err.to_string(),
        }
    }
}

/// Appends the instruction as the newest user turn: a new message, or, where the API wants
/// roles to alternate (Anthropic) and the last message is the user's, a last text block.
fn append_instruction(wire: Wire, body: &mut Map<String, Value>, instruction: String) {
    match wire {
        Wire::Anthropic => {
            let messages = body
                .entry("messages")
                .or_insert_with(|| Value::Array(Vec::new()));
            let Value::Array(messages) = messages else {
                return;
            };
            let block = json!({"type": "text", "text": instruction});
            match messages.last_mut() {
                Some(last) if last["role"] == "user" => {
                    let content = last["content"].take();
                    last["content"] = match content {
                        Value::String(text) => json!([{"type": "text", "text": text}, block]),
                        Value::Array(mut blocks) => {
                            blocks.push(block);
                            Value::Array(blocks)
                        }
                        _ => json!([block]),
                    };
                }
                _ => messages.push(json!({"role": "user", "content": [block]})),
            }
        }
        Wire::Responses => {
            let input = body
                .entry("input")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::String(text) = input {
                *input = json!([{"role": "user", "content": text.clone()}]);
            }
            if let Value::Array(items) = input {
                items.push(json!({"role": "user", "content": instruction}));
            }
        }
        Wire::OpenAiChat => {
            if let Value::Array(messages) = body
                .entry("messages")
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                messages.push(json!({"role": "user", "content": instruction}));
            }
        }
    }
}

/// Caps the answer at `tokens`, in the field the API names.
fn limit_output(wire: Wire, body: &mut Map<String, Value>, tokens: u64) {
    match wire {
        Wire::Anthropic => {
            body.insert("max_tokens".into(), json!(tokens));
        }
        Wire::Responses => {
            body.insert("max_output_tokens".into(), json!(tokens));
        }
        Wire::OpenAiChat => {
            let field = if body.contains_key("max_completion_tokens") {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            body.insert(field.into(), json!(tokens));
        }
    }
}

/// The answer must be the summary, never a tool call: a request that keeps its tools (the
/// cached prefix starts with them, or its messages hold tool blocks) says `tool_choice: none`;
/// one without tools says nothing of tool choice.
fn no_tool_calls(wire: Wire, body: &mut Map<String, Value>) {
    let has_tools = body
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| !tools.is_empty());
    if !has_tools {
        body.remove("tools");
        body.remove("tool_choice");
        body.remove("parallel_tool_calls");
        return;
    }
    let none = match wire {
        Wire::Anthropic => json!({"type": "none"}),
        Wire::OpenAiChat | Wire::Responses => json!("none"),
    };
    body.insert("tool_choice".into(), none);
    body.remove("parallel_tool_calls");
}

/// The answer's text.
fn answer_text(wire: Wire, answer: &Value) -> String {
    let joined = |blocks: Option<&Vec<Value>>, kind: &str| {
        blocks
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == kind)
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("")
    };
    match wire {
        Wire::Anthropic => joined(answer["content"].as_array(), "text"),
        Wire::OpenAiChat => answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        Wire::Responses => answer["output"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| item["type"] == "message")
            .map(|item| joined(item["content"].as_array(), "output_text"))
            .collect::<Vec<_>>()
            .join(""),
    }
}

/// Input tokens of the summary call and how many the provider's cache served.
pub fn usage(wire: Wire, answer: &Value) -> (u64, u64) {
    let usage = &answer["usage"];
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    match wire {
        Wire::Anthropic => {
            let read = n(&usage["cache_read_input_tokens"]);
            let written = n(&usage["cache_creation_input_tokens"]);
            (n(&usage["input_tokens"]) + read + written, read)
        }
        Wire::OpenAiChat => (
            n(&usage["prompt_tokens"]),
            n(&usage["prompt_tokens_details"]["cached_tokens"]),
        ),
        Wire::Responses => (
            n(&usage["input_tokens"]),
            n(&usage["input_tokens_details"]["cached_tokens"]),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxkeeper_core::model::Message;

    fn route(wire: Wire) -> Arc<UpstreamRoute> {
        Arc::new(UpstreamRoute {
            client: reqwest::Client::new(),
            url: "http://127.0.0.1:9/v1/messages".into(),
            headers: HeaderMap::new(),
            wire,
            model: Some("claude-x".into()),
            tools: Vec::new(),
            timeout: Duration::from_secs(1),
            trace: None,
        })
    }

    fn request() -> SummaryRequest {
        SummaryRequest::new(
            vec![
                Message::user("Fix the parser."),
                Message::assistant("Reading src/parse.rs now."),
            ],
            700,
        )
    }

    #[test]
    fn the_summary_request_extends_the_forwarded_request_byte_for_byte() {
        let forwarded = json!({
            "model": "claude-x", "max_tokens": 32000, "stream": true,
            "system": [{"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "messages": [
                {"role": "user", "content": "Fix the parser."},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
            ]
        });
        let prefix = Bytes::from(serde_json::to_vec(&forwarded).expect("json"));
        let summarizer = UpstreamSummarizer::new(route(Wire::Anthropic), Some(prefix), None);
        let body = summarizer.body(&request());
        assert_eq!(body["system"], forwarded["system"]);
        assert_eq!(body["tools"], forwarded["tools"]);
        assert_eq!(body["messages"][0], forwarded["messages"][0]);
        assert_eq!(body["messages"][1], forwarded["messages"][1]);
        // Roles keep alternating: the instruction is the last block of the user's turn.
        let last = body["messages"][2]["content"].as_array().expect("blocks");
        assert_eq!(last[0], forwarded["messages"][2]["content"][0]);
        let instruction = last[1]["text"].as_str().expect("text");
        assert!(instruction.starts_with(SUMMARY_REQUEST_MARK));
        assert!(instruction.contains("message 2"), "{instruction}");
        assert!(instruction.contains("Reading src/parse.rs now."));
        assert_eq!(body["stream"], false);
        assert_eq!(body["max_tokens"], 700);
        assert_eq!(body["tool_choice"], json!({"type": "none"}));
    }

    #[test]
    fn a_summary_request_never_invites_a_tool_call_nor_a_thinking_budget() {
        // Claude Code's shape: tools, no tool_choice, a 32k thinking budget.
        let forwarded = json!({
            "model": "claude-x", "max_tokens": 64000,
            "thinking": {"type": "enabled", "budget_tokens": 32000},
            "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "Fix the parser."}]
        });
        let prefix = Bytes::from(serde_json::to_vec(&forwarded).expect("json"));
        let summarizer = UpstreamSummarizer::new(route(Wire::Anthropic), Some(prefix), None);
        let body = summarizer.body(&request());
        // The tools stay for the cache; the model may not call them.
        assert_eq!(body["tools"], forwarded["tools"]);
        assert_eq!(body["tool_choice"], json!({"type": "none"}));
        assert!(!body.contains_key("thinking"));
        assert_eq!(body["max_tokens"], 700);
        // OpenAI's shape with parallel calls and a forced tool.
        let forwarded = json!({
            "model": "gpt-x", "tool_choice": "required", "parallel_tool_calls": true,
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": {}}}],
            "messages": [{"role": "user", "content": "Fix the parser."}]
        });
        let prefix = Bytes::from(serde_json::to_vec(&forwarded).expect("json"));
        let summarizer = UpstreamSummarizer::new(route(Wire::OpenAiChat), Some(prefix), None);
        let body = summarizer.body(&request());
        assert_eq!(body["tool_choice"], "none");
        assert!(!body.contains_key("parallel_tool_calls"));
        // Built from messages without tool blocks: no tools, no tool choice.
        let mut tooled = route(Wire::Anthropic).as_ref().clone();
        tooled.tools = vec![ToolSpec {
            name: "bash".into(),
            description: None,
            parameters: json!({"type": "object"}),
            extra: Default::default(),
            hints: Default::default(),
        }];
        let summarizer = UpstreamSummarizer::new(Arc::new(tooled.clone()), None, None);
        let body = summarizer.body(&request());
        assert!(!body.contains_key("tools"), "{body:?}");
        assert!(!body.contains_key("tool_choice"));
        // With tool blocks among them the tools are declared, and not to be called.
        let mut with_calls = request();
        with_calls
            .messages
            .push(Message::tool_call("t1", "bash", "{}"));
        with_calls.messages.push(Message::tool_result("t1", "ok"));
        let summarizer = UpstreamSummarizer::new(Arc::new(tooled), None, None);
        let body = summarizer.body(&with_calls);
        assert_eq!(body["tools"].as_array().map(Vec::len), Some(1));
        assert_eq!(body["tool_choice"], json!({"type": "none"}));
    }

    #[test]
    fn without_a_forwarded_request_the_messages_are_sent_in_the_callers_shape() {
        let summarizer =
            UpstreamSummarizer::new(route(Wire::OpenAiChat), None, Some("gpt-small".into()));
        let body = summarizer.body(&request());
        let messages = body["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0]["content"], "Fix the parser.");
        assert_eq!(body["model"], "gpt-small");
        assert_eq!(summarizer.name(), "upstream:gpt-small");
        assert_eq!(body["max_tokens"], 700);
    }

    #[test]
    fn answers_are_read_in_each_shape() {
        let chat = json!({"choices": [{"message": {"content": "{\"a\": \"b\"}"}}], "usage": {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 90}}});
        assert_eq!(answer_text(Wire::OpenAiChat, &chat), "{\"a\": \"b\"}");
        assert_eq!(usage(Wire::OpenAiChat, &chat), (100, 90));
        let anthropic = json!({"content": [{"type": "text", "text": "{}"}], "usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 0}});
        assert_eq!(answer_text(Wire::Anthropic, &anthropic), "{}");
        assert_eq!(usage(Wire::Anthropic, &anthropic), (100, 90));
        let responses = json!({"output": [{"type": "reasoning"}, {"type": "message", "content": [{"type": "output_text", "text": "{}"}]}]});
        assert_eq!(answer_text(Wire::Responses, &responses), "{}");
        assert!(SummarizerChoice::parse("upstream", Some("http://x"), None).is_err());
        assert!(SummarizerChoice::parse("nope", None, None).is_err());
        assert_eq!(
            SummarizerChoice::parse("upstream", None, Some("m"))
                .expect("valid")
                .name(),
            "upstream:m"
        );
    }
}
