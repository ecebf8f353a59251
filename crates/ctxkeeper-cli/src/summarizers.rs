//! Choosing a summarizer from command-line options.
//!
//! `extractive` (the default) needs no model. `openai` talks to any OpenAI-compatible Chat
//! Completions server (OpenAI, vLLM, Ollama, llama.cpp: `--summarizer-url` is the base URL up to
//! and including `/v1`); `anthropic` to the Messages API. Keys come from the environment
//! (`CTXKEEPER_SUMMARIZER_API_KEY`, else `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`), never from
//! the command line, so they stay out of shell history. Model summarizers retry within a bound
//! and, on final failure, fall back to marked lossy truncation: a replay never fails on them.

use std::sync::Arc;

use anyhow::Result;
use ctxkeeper::llm::{
    AnthropicConfig, AnthropicSummarizer, ExtractiveSummarizer, OpenAiConfig, OpenAiSummarizer,
    Resilient, Summarizer,
};

use crate::trace_input::InputError;

const OPENAI_DEFAULT_URL: &str = "https://api.openai.com/v1";
const OPENAI_DEFAULT_MODEL: &str = "gpt-4o-mini";
const ANTHROPIC_DEFAULT_MODEL: &str = "claude-haiku-4-5";

/// Builds the summarizer named `kind`.
pub fn build(kind: &str, url: Option<&str>, model: Option<&str>) -> Result<Arc<dyn Summarizer>> {
    let key = |provider_var: &str| {
        std::env::var("CTXKEEPER_SUMMARIZER_API_KEY")
            .or_else(|_| std::env::var(provider_var))
            .ok()
            .filter(|k| !k.is_empty())
    };
    let bad = |e: ctxkeeper::llm::LlmError| InputError::BadOption(format!("summarizer: {e}"));
    match kind {
        "extractive" => {
            if url.is_some() || model.is_some() {
                return Err(InputError::BadOption(
                    "--summarizer-url and --summarizer-model need --summarizer openai or anthropic"
                        .into(),
                )
                .into());
            }
            Ok(Arc::new(ExtractiveSummarizer::default()))
        }
        "openai" => {
            let mut config = OpenAiConfig::new(
                url.unwrap_or(OPENAI_DEFAULT_URL),
                model.unwrap_or(OPENAI_DEFAULT_MODEL),
            );
            if let Some(key) = key("OPENAI_API_KEY") {
                config = config.with_api_key(key);
            }
            let summarizer = OpenAiSummarizer::new(config).map_err(bad)?;
            Ok(Arc::new(Resilient::new(summarizer)))
        }
        "anthropic" => {
            let mut config = AnthropicConfig::new(model.unwrap_or(ANTHROPIC_DEFAULT_MODEL));
            if let Some(url) = url {
                config = config.with_base_url(url);
            }
            if let Some(key) = key("ANTHROPIC_API_KEY") {
                config = config.with_api_key(key);
            }
            let summarizer = AnthropicSummarizer::new(config).map_err(bad)?;
            Ok(Arc::new(Resilient::new(summarizer)))
        }
        other => Err(InputError::BadOption(format!(
            "unknown summarizer {other:?} (available: extractive, openai, anthropic)"
        ))
        .into()),
    }
}
