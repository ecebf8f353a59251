//! ctxkeeper-llm: the summarizers of the compaction cascade.
//!
//! When cheaper stages (clearing old tool results, truncation) are not enough, the engine
//! replaces a prefix of the conversation by a structured [`Summary`]. This crate makes those
//! summaries:
//!
//! - [`ExtractiveSummarizer`]: deterministic, no model, no network: the embedded default,
//!   labelled as such in its output;
//! - [`OpenAiSummarizer`]: Chat Completions at any base URL (OpenAI, vLLM, Ollama, llama.cpp,
//!   DeepSeek, OpenRouter, …), structured output by JSON schema, forced tool call or JSON in
//!   text, falling back when the server refuses one;
//! - [`AnthropicSummarizer`]: the Messages API, structured output by forced tool use, falling
//!   back to `tool_choice: auto` and to JSON in text;
//! - [`Resilient`]: wraps any of them with bounded retries of transient errors; once they
//!   are spent the error reaches the host, which puts the extractive summary (marked
//!   `degraded`) in its place ([`Resilient::summarize_reported`] does so itself). A turn never
//!   fails for a summary: [`fallback_truncation`], a lossy summary that keeps the previous
//!   summary and says that the messages are archived, is the last resort if even the
//!   extractive summary cannot be made.
//!
//! Model-backed summarizers validate every answer against the schema and ask again (at most
//! `max_retries` times) saying what was wrong; they make the summarization request fit the
//! summarizer model's window by chunking huge prefixes ([`fit`]), each chunk summarized
//! incrementally over the previous chunk's summary. Prompts are files under `prompts/`
//! ([`prompt`]); the conversation is always sent as untrusted data, never as instructions.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_core::summary::{SummaryReason, SummaryRequest, SummarySchema};
//! use ctxkeeper_llm::{ExtractiveSummarizer, Resilient, Summarizer};
//!
//! let summarizer = Resilient::new(ExtractiveSummarizer::new());
//! let request = SummaryRequest {
//!     messages: vec![Message::user("Book a table for two at 8pm."), Message::assistant("Booked: confirmation R-20931.")],
//!     previous: None,
//!     schema: SummarySchema::default(),
//!     prompt: None,
//!     focus: None,
//!     reason: SummaryReason::Proactive,
//!     max_output_tokens: 500,
//!     must_keep: Vec::new(),
//!     instructions: None,
//!     request_in_context: None,
//! };
//! let summary = summarizer.summarize(&request).await.unwrap();
//! let text = summary.render(&request.schema);
//! assert!(text.contains("without a language model"));
//! assert!(text.contains("Book a table for two"));
//! # });
//! ```
//!
//! This crate depends on `ctxkeeper-core` only; it knows nothing of sessions, stores or the
//! gateway. HTTP goes through one `reqwest` client per summarizer, with timeouts, rustls TLS
//! and no logging of keys ([`Secret`] prints as `***`).

pub mod anthropic;
pub mod error;
pub mod extractive;
pub mod fallback;
pub mod fit;
mod http;
pub mod openai;
pub mod options;
pub mod prompt;
pub mod resilient;
pub mod structured;
pub mod summarizer;

pub use anthropic::{AnthropicConfig, AnthropicSummarizer};
pub use ctxkeeper_core::summary::{Summary, SummaryReason, SummaryRequest, SummarySchema};
pub use error::LlmError;
pub use extractive::{EXTRACTIVE_LABEL, EXTRACTIVE_PRODUCER, ExtractiveSummarizer};
pub use fallback::{FALLBACK_PRODUCER, fallback_truncation};
pub use openai::{OpenAiConfig, OpenAiSummarizer, TokenField};
pub use options::{Secret, SummarizerOptions};
pub use resilient::{Resilient, RetryPolicy, SummaryOutcome};
pub use structured::{OutputMode, extract_json, parse_memory_answer};
pub use summarizer::Summarizer;
