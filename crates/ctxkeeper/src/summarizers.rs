//! Choosing a summarizer by name, for every face (`replay`, `serve`, `mcp`).
//!
//! `extractive` needs no model. `openai` talks to any OpenAI-compatible Chat Completions
//! server (OpenAI, vLLM, Ollama, llama.cpp: the URL is the base URL up to and including `/v1`);
//! `anthropic` to the Messages API. Keys come from the environment
//! (`CTXKEEPER_SUMMARIZER_API_KEY`, else `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`), never from a
//! command line or a configuration file, so they stay out of shell history. Model summarizers
//! retry within a bound; the [`crate::ContextManager`] falls back to a degraded extractive
//! summary when they still fail, so a summary never fails a turn.
//!
//! ```
//! let summarizer = ctxkeeper::summarizers::build("extractive", None, None).unwrap();
//! assert_eq!(summarizer.name(), "extractive");
//! assert!(ctxkeeper::summarizers::build("gpt", None, None).is_err());
//! ```

use std::sync::Arc;

use ctxkeeper_llm::{
    AnthropicConfig, AnthropicSummarizer, ExtractiveSummarizer, OpenAiConfig, OpenAiSummarizer,
    Resilient, Summarizer,
};

const OPENAI_DEFAULT_URL: &str = "https://api.openai.com/v1";
const OPENAI_DEFAULT_MODEL: &str = "gpt-4o-mini";
const ANTHROPIC_DEFAULT_MODEL: &str = "claude-haiku-4-5";

/// The summarizer names [`build`] knows.
pub const KINDS: [&str; 3] = ["extractive", "openai", "anthropic"];

/// Builds the summarizer named `kind`; the error says what was wrong.
pub fn build(
    kind: &str,
    url: Option<&str>,
    model: Option<&str>,
) -> Result<Arc<dyn Summarizer>, String> {
    let key = |provider_var: &str| {
        std::env::var("CTXKEEPER_SUMMARIZER_API_KEY")
            .or_else(|_| std::env::var(provider_var))
            .ok()
            .filter(|k| !k.is_empty())
    };
    let bad = |e: ctxkeeper_llm::LlmError| format!("summarizer: {e}");
    match kind {
        "extractive" => {
            if url.is_some() || model.is_some() {
                return Err(
                    "a summarizer URL or model needs the openai or anthropic summarizer".into(),
                );
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
        other => Err(format!(
            "unknown summarizer {other:?} (available: extractive, openai, anthropic)"
        )),
    }
}
