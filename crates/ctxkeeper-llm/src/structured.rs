//! The summarization loop shared by the model-backed summarizers.
//!
//! A provider-specific backend (one per API) knows how to ask for a structured answer in each
//! [`OutputMode`] and how to read the answer back; this module does everything else, the same
//! way for every provider:
//!
//! 1. measure the request against the summarizer model's window and cut the messages into
//!    chunks that fit ([`crate::fit`]), summarizing chunk after chunk, each incremental over
//!    the previous chunk's summary;
//! 2. ask in the backend's preferred mode; when the provider refuses that mode (a 400 about
//!    `response_format` or `tool_choice`), step down the backend's ladder and remember the mode
//!    that works, so later calls skip the refusal;
//! 3. validate every answer with [`Summary::from_json`]; on a schema error, ask again with the
//!    error spelled out, at most `max_retries` times;
//! 4. when the provider says the summarization request itself is too long, shrink the chunks
//!    and retry (twice at most), then give up with [`LlmError::Overflow`].
//!
//! Every loop is bounded: mode changes by the ladder's length, repairs by `max_retries`,
//! parameter adjustments by two, shrinks by two.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
use ctxkeeper_core::overflow::{self, Overflow};
use ctxkeeper_core::summary::{Summary, SummaryRequest, SummarySchema};
use ctxkeeper_core::tokens::{Profiles, TokenModel};
use reqwest::header::HeaderMap;
use serde_json::{Map, Value};

use crate::error::LlmError;
use crate::fit::{Chunk, plan_chunks};
use crate::http::Endpoint;
use crate::options::SummarizerOptions;
use crate::prompt::{
    ANSWER_JSON_SCHEMA, ANSWER_TEXT, ANSWER_TOOL, COMPRESSION_USER, MEMORY_FLUSH, REPAIR,
    SUMMARY_TOOL, compression_system, compression_user, field_keys, fill, neutralise_tags,
};

/// How a structured answer is requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputMode {
    /// OpenAI `response_format: {type: json_schema, json_schema: {name, schema, strict}}`.
    JsonSchema,
    /// A tool whose parameters are the schema, and a `tool_choice` that forces it.
    ForcedTool,
    /// The same tool, with `tool_choice` left to the model (`auto`), and a prompt asking for it.
    AutoTool,
    /// No constraint: the prompt asks for a JSON object as plain text, which is then extracted
    /// from the answer.
    Text,
}

impl OutputMode {
    /// The snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputMode::JsonSchema => "json_schema",
            OutputMode::ForcedTool => "forced_tool",
            OutputMode::AutoTool => "auto_tool",
            OutputMode::Text => "text",
        }
    }
}

/// What went wrong with one call, as far as the loop is concerned.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The provider refused the way the answer was requested: try the next mode.
    Refused(LlmError),
    /// The provider refused a parameter that the backend has now adjusted (for example
    /// `max_tokens` → `max_completion_tokens`): call again in the same mode.
    Adjusted,
    /// The answer holds no usable JSON object; the text says why, for the repair prompt.
    Invalid(String),
    /// The summarization request does not fit the model's window.
    Overflow(Overflow),
    /// Anything else: reported to the caller as is.
    Fatal(LlmError),
}

/// What every model-backed summarizer keeps besides its configuration: the name its
/// summaries are `produced_by` (`openai:gpt-4o-mini`), the summarizer model's token model,
/// the ladder of output modes with the one that last worked, its options and the endpoint it
/// calls.
#[derive(Debug)]
pub(crate) struct BackendCore {
    name: String,
    token_model: TokenModel,
    /// The modes to try, best first.
    ladder: &'static [OutputMode],
    /// Index into the ladder of the mode that last worked (or was not yet refused).
    mode: AtomicUsize,
    options: SummarizerOptions,
    endpoint: Endpoint,
}

impl BackendCore {
    /// The core of a summarizer of `provider` calling `model` at `{base_url}/{path}` with
    /// `options`, trying `ladder` best first. Fails only on an unusable configuration.
    pub(crate) fn new(
        provider: &str,
        model: &str,
        ladder: &'static [OutputMode],
        options: &SummarizerOptions,
        base_url: &str,
        path: &str,
    ) -> Result<BackendCore, LlmError> {
        Ok(BackendCore {
            name: format!("{provider}:{model}"),
            token_model: TokenModel::for_model(model, &Profiles::builtin()),
            ladder,
            mode: AtomicUsize::new(0),
            options: options.clone(),
            endpoint: Endpoint::new(options, base_url, path)?,
        })
    }

    /// `produced_by` of the summaries (`openai:gpt-4o-mini`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The structured-output mode the next call will use (it moves down after refusals).
    pub(crate) fn output_mode(&self) -> OutputMode {
        self.ladder[self.mode_index().min(self.ladder.len() - 1)]
    }

    fn mode_index(&self) -> usize {
        self.mode.load(Ordering::Relaxed)
    }

    /// Remembers a new working mode; a mode once refused is never tried again.
    fn set_mode_index(&self, index: usize) {
        self.mode.fetch_max(index, Ordering::Relaxed);
    }
}

/// One structured call: the prompts, the mode to ask in, the schema the answer follows and
/// the answer's token limit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StructuredCall<'a> {
    pub system: &'a str,
    pub user: &'a str,
    pub mode: OutputMode,
    pub schema: &'a SummarySchema,
    pub max_tokens: u32,
}

/// One provider's way of asking for and reading a structured answer.
#[async_trait]
pub(crate) trait Backend: Send + Sync {
    /// The name, the token model and the mode ladder.
    fn core(&self) -> &BackendCore;
    /// The options (a copy of the configuration's).
    fn options(&self) -> &SummarizerOptions {
        &self.core().options
    }
    /// One structured call; `Ok` carries the JSON object the model produced.
    async fn structured(&self, call: StructuredCall<'_>) -> Result<Value, CallError>;
    /// One plain-text call with a single user message.
    async fn text(&self, user: &str, max_tokens: u32) -> Result<String, CallError>;
    /// The headers of every call (the API key).
    fn headers(&self) -> Result<HeaderMap, LlmError>;
    /// Whether a 4xx body (lowercased) refuses the way `mode` asks for structure.
    fn refuses(&self, mode: Option<OutputMode>, lower: &str) -> bool;

    /// Adjusts a refused parameter the backend can change, for the same call to be asked
    /// again ([`CallError::Adjusted`]); `None` by default.
    fn adjust(&self, _status: u16, _body: &str) -> Option<CallError> {
        None
    }

    /// Sends `body` asking in `mode` (`None`: plain text) and reads the JSON answer.
    async fn send(
        &self,
        body: Map<String, Value>,
        mode: Option<OutputMode>,
    ) -> Result<Value, CallError> {
        self.core()
            .endpoint
            .send(
                self.headers(),
                body,
                |status, body| self.adjust(status, body),
                |lower| self.refuses(mode, lower),
            )
            .await
    }
}

/// Completes a request body with the sampling `temperature` (when set) and the configured
/// `extra_body` fields the summarizer did not set itself.
pub(crate) fn finish_body(
    mut body: Map<String, Value>,
    temperature: Option<f32>,
    extra_body: &Map<String, Value>,
) -> Map<String, Value> {
    if let Some(temperature) = temperature {
        body.insert("temperature".into(), serde_json::json!(temperature));
    }
    for (key, value) in extra_body {
        body.entry(key.clone()).or_insert_with(|| value.clone());
    }
    body
}

/// The public face every [`Backend`] shares: the inherent `output_mode` and `flush_memory`
/// methods and the [`Summarizer`](crate::Summarizer) impl. A macro because a blanket
/// `impl<B: Backend> Summarizer for B` would overlap the other summarizers' impls.
macro_rules! backend_summarizer {
    ($backend:ty) => {
        impl $backend {
            /// The structured-output mode the next call will use (it moves down after refusals).
            pub fn output_mode(&self) -> $crate::structured::OutputMode {
                $crate::structured::Backend::core(self).output_mode()
            }

            /// The memory flush before a compaction: the durable facts in `messages`, one per
            /// line, or `None` when the model answers that nothing is worth keeping.
            pub async fn flush_memory(
                &self,
                messages: &[ctxkeeper_core::model::Message],
                max_tokens: u32,
            ) -> Result<Option<String>, $crate::LlmError> {
                $crate::structured::flush_memory(self, messages, max_tokens).await
            }
        }

        #[async_trait::async_trait]
        impl $crate::Summarizer for $backend {
            async fn summarize(
                &self,
                request: &ctxkeeper_core::summary::SummaryRequest,
            ) -> Result<ctxkeeper_core::summary::Summary, $crate::LlmError> {
                $crate::structured::summarize(self, request).await
            }

            async fn extract_facts(
                &self,
                messages: &[ctxkeeper_core::model::Message],
                max_tokens: u32,
            ) -> Result<Option<String>, $crate::LlmError> {
                self.flush_memory(messages, max_tokens).await
            }

            fn name(&self) -> &str {
                $crate::structured::Backend::core(self).name()
            }
        }
    };
}
pub(crate) use backend_summarizer;

/// How often the chunk size may be reduced after the provider reported an overflow.
const MAX_SHRINKS: u32 = 2;
/// How often a refused parameter may be adjusted within one chunk.
const MAX_ADJUSTMENTS: u32 = 2;

/// Token sizes of one summarization: the answer budget and the transcript budget per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizes {
    pub window: u32,
    pub max_tokens: u32,
    pub transcript: u32,
}

/// Works out the sizes of the calls for `request`: the window minus the answer, the system
/// prompt, the previous summary (or a summary of `max_tokens`, which later chunks carry), the
/// fixed template text and a 5 % margin for tokenizer differences.
pub(crate) fn sizes(
    backend: &(impl Backend + ?Sized),
    request: &SummaryRequest,
    system: &str,
) -> Result<Sizes, LlmError> {
    let options = backend.options();
    let model = &backend.core().token_model;
    let window = options
        .context_window
        .unwrap_or_else(|| u32::try_from(model.profile.context_window).unwrap_or(u32::MAX));
    let max_tokens = request.max_output_tokens.clamp(64, (window / 4).max(64));
    let previous = request
        .previous
        .as_ref()
        .map(|p| model.text_tokens(&p.render(&request.schema)))
        .unwrap_or(0)
        .max(max_tokens);
    let fixed = model.text_tokens(system)
        + model.text_tokens(COMPRESSION_USER)
        + model.text_tokens(ANSWER_TEXT)
        + model.text_tokens(REPAIR)
        + 256;
    let margin = window / 20;
    let transcript = window
        .saturating_sub(max_tokens)
        .saturating_sub(previous)
        .saturating_sub(fixed)
        .saturating_sub(margin);
    let transcript = options
        .chunk_tokens
        .map_or(transcript, |c| c.min(transcript));
    if transcript < 128 {
        return Err(LlmError::Config {
            message: format!(
                "the summarizer's window ({window} tokens) leaves no room for the conversation \
                 after the {max_tokens}-token answer, the prompt and the previous summary"
            ),
        });
    }
    Ok(Sizes {
        window,
        max_tokens,
        transcript,
    })
}

/// Summarizes `request` with `backend`: chunked, validated, repaired, bounded.
pub(crate) async fn summarize(
    backend: &(impl Backend + ?Sized),
    request: &SummaryRequest,
) -> Result<Summary, LlmError> {
    let schema = &request.schema;
    let options = backend.options();
    let max_output = request.max_output_tokens;
    let system = compression_system(schema, request.prompt.as_deref(), max_output);
    let mut sizes = sizes(backend, request, &system)?;
    let model = &backend.core().token_model;
    let count = |text: &str| model.text_tokens(text);

    let messages = &request.messages;
    let mut previous = request.previous.clone();
    let mut plan = plan_chunks(
        messages,
        0,
        sizes.transcript,
        options.max_chunks,
        options.max_arg_chars,
        &count,
    );
    let mut dropped = plan.dropped_messages;
    let mut queue: VecDeque<Chunk> = plan.chunks.drain(..).collect();
    let mut shrinks = 0;
    let mut summarized = 0;
    let mut calls_left = options.max_chunks.max(1);
    while let Some(chunk) = queue.pop_front() {
        match summarize_chunk(
            backend,
            request,
            &system,
            previous.as_ref(),
            &chunk,
            sizes.max_tokens,
        )
        .await
        {
            Ok(summary) => {
                previous = Some(summary);
                summarized += 1;
                calls_left = calls_left.saturating_sub(1);
            }
            Err(CallError::Overflow(overflow)) if shrinks < MAX_SHRINKS => {
                shrinks += 1;
                // Shrink by what the provider said was too much, or by 40 % when it did not say.
                let factor = match (overflow.limit, overflow.requested) {
                    (Some(limit), Some(requested)) if requested > 0 => {
                        (limit as f64 / requested as f64) * 0.9
                    }
                    _ => 0.6,
                };
                // Relative to what was actually sent: the failed chunk may have been smaller
                // than the budget.
                let sent = sizes.transcript.min(count(&chunk.text));
                sizes.transcript = ((f64::from(sent) * factor.clamp(0.3, 0.8)) as u32).max(64);
                let rest = &messages[chunk.first..];
                let mut replanned = plan_chunks(
                    rest,
                    chunk.first,
                    sizes.transcript,
                    calls_left.max(1),
                    options.max_arg_chars,
                    &count,
                );
                dropped += replanned.dropped_messages;
                queue = replanned.chunks.drain(..).collect();
            }
            Err(CallError::Overflow(overflow)) => return Err(LlmError::Overflow { overflow }),
            Err(CallError::Fatal(error) | CallError::Refused(error)) => return Err(error),
            Err(CallError::Invalid(problem)) => {
                return Err(LlmError::InvalidOutput {
                    attempts: options.max_retries + 1,
                    problem,
                });
            }
            Err(CallError::Adjusted) => {
                return Err(LlmError::Config {
                    message: "the provider kept refusing request parameters".into(),
                });
            }
        }
    }

    if summarized == 0 {
        // Nothing was sent: the previous summary stands as it was.
        return Ok(previous.unwrap_or_else(|| Summary::empty(schema, backend.core().name())));
    }
    let mut summary = previous.unwrap_or_else(|| Summary::empty(schema, backend.core().name()));
    summary.produced_by = backend.core().name().to_string();
    summary.degraded = false;
    if dropped > 0 {
        note_dropped(&mut summary, schema, dropped);
    }
    Ok(summary)
}

/// Records in the summary that the oldest messages were left out.
fn note_dropped(summary: &mut Summary, schema: &SummarySchema, dropped: usize) {
    let field = schema
        .fields
        .iter()
        .find(|f| f.name == "context_to_preserve")
        .or(schema.fields.last())
        .map(|f| f.name.clone());
    if let Some(field) = field {
        let mut text = summary.get(&field).trim_end().to_string();
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!(
            "[{dropped} older messages were not summarized to stay within the summarizer's limits; they are in the archive]"
        ));
        summary.set(&field, text);
    }
}

/// Summarizes one chunk: mode ladder, validation, bounded repairs.
async fn summarize_chunk(
    backend: &(impl Backend + ?Sized),
    request: &SummaryRequest,
    system: &str,
    previous: Option<&Summary>,
    chunk: &Chunk,
    max_tokens: u32,
) -> Result<Summary, CallError> {
    let schema = &request.schema;
    let ladder = backend.core().ladder;
    let max_retries = backend.options().max_retries;
    let previous_text = previous.map(|p| p.render(schema));
    let keys = field_keys(schema);
    let mut problem: Option<String> = None;
    let mut answers = 0;
    let mut adjustments = 0;
    // The operator's instructions, the focus and the standing orders; no text of theirs
    // may close the prompt's delimiters.
    let focus = request.guidance().map(|text| neutralise_tags(&text));
    loop {
        let index = backend
            .core()
            .mode_index()
            .min(ladder.len().saturating_sub(1));
        let Some(&mode) = ladder.get(index) else {
            return Err(CallError::Fatal(LlmError::Config {
                message: "no output mode configured".into(),
            }));
        };
        let answer_format = match mode {
            OutputMode::JsonSchema => ANSWER_JSON_SCHEMA.to_string(),
            OutputMode::ForcedTool | OutputMode::AutoTool => {
                fill(ANSWER_TOOL, &[("tool", SUMMARY_TOOL)])
            }
            OutputMode::Text => fill(ANSWER_TEXT, &[("keys", &keys)]),
        };
        let mut user = compression_user(
            previous_text.as_deref(),
            &chunk.text,
            chunk.messages,
            focus.as_deref(),
            &answer_format,
        );
        if let Some(problem) = &problem {
            user.push_str(&fill(REPAIR, &[("problem", problem)]));
        }
        let call = StructuredCall {
            system,
            user: &user,
            mode,
            schema,
            max_tokens,
        };
        match backend.structured(call).await {
            Ok(value) => {
                let value = unwrap_wrapper(value, schema);
                match Summary::from_json(&value, schema, backend.core().name()) {
                    Ok(summary) => return Ok(summary),
                    Err(reason) => problem = Some(reason),
                }
            }
            Err(CallError::Invalid(reason)) => problem = Some(reason),
            Err(CallError::Refused(error)) => {
                if index + 1 < ladder.len() {
                    backend.core().set_mode_index(index + 1);
                    continue;
                }
                return Err(CallError::Fatal(error));
            }
            Err(CallError::Adjusted) => {
                adjustments += 1;
                if adjustments > MAX_ADJUSTMENTS {
                    return Err(CallError::Adjusted);
                }
                continue;
            }
            Err(other) => return Err(other),
        }
        answers += 1;
        if answers > max_retries {
            return Err(CallError::Fatal(LlmError::InvalidOutput {
                attempts: answers,
                problem: problem.unwrap_or_default(),
            }));
        }
    }
}

/// Some models wrap the object (`{"summary": {...}}`); unwrap a single-key wrapper whose
/// value holds the schema's first field.
fn unwrap_wrapper(value: Value, schema: &SummarySchema) -> Value {
    let Some(first) = schema.fields.first() else {
        return value;
    };
    match &value {
        Value::Object(map) if map.len() == 1 && !map.contains_key(&first.name) => {
            match map.values().next() {
                Some(inner @ Value::Object(fields)) if fields.contains_key(&first.name) => {
                    inner.clone()
                }
                _ => value,
            }
        }
        _ => value,
    }
}

/// Extracts the JSON object from a model's text answer: reasoning in `<think>` tags is
/// skipped, a fenced code block is preferred, otherwise the outermost braces are taken.
pub fn extract_json(text: &str) -> Result<Value, String> {
    let mut text = text;
    if let Some(end) = text.find("</think>") {
        text = &text[end + "</think>".len()..];
    }
    let candidate = fenced_block(text).unwrap_or(text);
    let Some(start) = candidate.find('{') else {
        return Err(if text.trim().is_empty() {
            "the answer was empty".to_string()
        } else {
            "the answer contains no JSON object".to_string()
        });
    };
    // Up to the last closing brace; a cut-off object runs to the end and fails to parse with
    // a message that says so.
    let end = candidate
        .rfind('}')
        .filter(|&end| end > start)
        .map_or(candidate.len(), |end| end + 1);
    serde_json::from_str(&candidate[start..end])
        .map_err(|e| format!("the answer is not valid JSON ({e})"))
}

/// The body of the first fenced code block (```json … ```), if any.
fn fenced_block(text: &str) -> Option<&str> {
    let open = text.find("```")?;
    let after = &text[open + 3..];
    let body_start = after.find('\n').map_or(0, |i| i + 1);
    let body = &after[body_start..];
    let close = body.find("```")?;
    Some(&body[..close])
}

/// Maps a non-2xx answer to a [`CallError`]: an overflow when the body says so, a refusal when
/// `is_refusal` recognises the body as refusing the requested mode, otherwise a status error.
pub(crate) fn failure(
    status: u16,
    body: String,
    retry_after: Option<std::time::Duration>,
    is_refusal: impl Fn(&str) -> bool,
) -> CallError {
    if let Some(overflow) = overflow::classify(status, &body) {
        return CallError::Overflow(overflow);
    }
    let lower = body.to_ascii_lowercase();
    let error = LlmError::Status {
        status,
        body: cut(&body, 2_000),
        retry_after,
    };
    if matches!(status, 400 | 404 | 405 | 415 | 422 | 501) && is_refusal(&lower) {
        CallError::Refused(error)
    } else {
        CallError::Fatal(error)
    }
}

/// `text` cut to at most `max` bytes at a character boundary.
pub(crate) fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Reads a memory-flush answer: `None` for "NONE" (in any case, with or without trailing
/// punctuation) or an empty answer, else the facts, trimmed.
pub fn parse_memory_answer(answer: &str) -> Option<String> {
    let trimmed = answer.trim();
    let bare = trimmed
        .trim_matches(|c: char| c == '.' || c == '"' || c == '`' || c == '*')
        .trim();
    if bare.is_empty() || bare.eq_ignore_ascii_case("none") {
        None
    } else {
        Some(trimmed.to_string())
    }
}

/// Asks the model for the durable facts in `messages` (the memory flush before compaction),
/// chunk by chunk within the window. `None` when the model found nothing worth keeping.
pub(crate) async fn flush_memory(
    backend: &(impl Backend + ?Sized),
    messages: &[Message],
    max_tokens: u32,
) -> Result<Option<String>, LlmError> {
    let options = backend.options();
    let model = &backend.core().token_model;
    let window = options
        .context_window
        .unwrap_or_else(|| u32::try_from(model.profile.context_window).unwrap_or(u32::MAX));
    let max_tokens = max_tokens.clamp(64, (window / 4).max(64));
    let budget = window
        .saturating_sub(max_tokens)
        .saturating_sub(model.text_tokens(MEMORY_FLUSH) + 128)
        .saturating_sub(window / 20);
    let budget = options
        .chunk_tokens
        .map_or(budget, |c| c.min(budget))
        .max(128);
    let count = |text: &str| model.text_tokens(text);
    let plan = plan_chunks(
        messages,
        0,
        budget,
        options.max_chunks,
        options.max_arg_chars,
        &count,
    );
    let mut facts = Vec::new();
    for chunk in &plan.chunks {
        let prompt = fill(MEMORY_FLUSH, &[("conversation", &chunk.text)]);
        match backend.text(&prompt, max_tokens).await {
            Ok(answer) => facts.extend(parse_memory_answer(&answer)),
            Err(CallError::Overflow(overflow)) => return Err(LlmError::Overflow { overflow }),
            Err(CallError::Fatal(error) | CallError::Refused(error)) => return Err(error),
            Err(CallError::Invalid(problem)) => {
                return Err(LlmError::InvalidOutput {
                    attempts: 1,
                    problem,
                });
            }
            Err(CallError::Adjusted) => match backend.text(&prompt, max_tokens).await {
                Ok(answer) => facts.extend(parse_memory_answer(&answer)),
                Err(CallError::Fatal(error) | CallError::Refused(error)) => return Err(error),
                Err(_) => {
                    return Err(LlmError::Config {
                        message: "the provider refused the memory-flush request".into(),
                    });
                }
            },
        }
    }
    Ok((!facts.is_empty()).then(|| facts.join("\n")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_found_in_fences_prose_and_after_thinking() {
        assert_eq!(extract_json("{\"a\":\"b\"}"), Ok(json!({"a": "b"})));
        assert_eq!(
            extract_json("Here:\n```json\n{\"a\": \"b\"}\n```\nDone {x}"),
            Ok(json!({"a": "b"}))
        );
        assert_eq!(
            extract_json("<think>{not this}</think>\nSure! {\"a\": 1}"),
            Ok(json!({"a": 1}))
        );
        assert!(extract_json("no json here").is_err_and(|e| e.contains("no JSON object")));
        assert!(extract_json("").is_err_and(|e| e.contains("empty")));
        assert!(extract_json("{\"a\": ").is_err());
        assert!(extract_json("} {").is_err_and(|e| e.contains("not valid JSON")));
        assert!(extract_json("{\"a\": \"b").is_err_and(|e| e.contains("EOF")));
    }

    #[test]
    fn single_key_wrappers_are_unwrapped() {
        let schema = SummarySchema::default();
        let inner = json!({"task_overview": "t"});
        assert_eq!(
            unwrap_wrapper(json!({"summary": inner.clone()}), &schema),
            inner
        );
        assert_eq!(unwrap_wrapper(inner.clone(), &schema), inner);
    }

    #[test]
    fn memory_answers_of_none_mean_nothing() {
        for none in ["NONE", "none.", " None ", "**NONE**", ""] {
            assert_eq!(parse_memory_answer(none), None, "{none:?}");
        }
        assert_eq!(
            parse_memory_answer("- prefers tabs\n"),
            Some("- prefers tabs".into())
        );
    }

    #[test]
    fn failures_split_into_overflow_refusal_and_status() {
        let overflow = r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            failure(400, overflow.into(), None, |_| true),
            CallError::Overflow(_)
        ));
        let refusal = r#"{"error":{"message":"This response_format type is unavailable now"}}"#;
        assert!(matches!(
            failure(400, refusal.into(), None, |b| b.contains("response_format")),
            CallError::Refused(_)
        ));
        assert!(matches!(
            failure(500, refusal.into(), None, |b| b.contains("response_format")),
            CallError::Fatal(_)
        ));
        assert!(matches!(
            failure(401, "bad key".into(), None, |_| true),
            CallError::Fatal(_)
        ));
    }
}
