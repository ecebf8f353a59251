//! Choosing a summarizer from command-line options.

use std::sync::Arc;

use anyhow::Result;
use ctxkeeper::llm::{ExtractiveSummarizer, Summarizer};

use crate::trace_input::InputError;

/// Builds the summarizer named `kind`.
pub fn build(kind: &str, url: Option<&str>, model: Option<&str>) -> Result<Arc<dyn Summarizer>> {
    let _ = (url, model);
    match kind {
        "extractive" => Ok(Arc::new(ExtractiveSummarizer::default())),
        other => Err(InputError::BadOption(format!(
            "unknown summarizer {other:?} (available: extractive, openai, anthropic)"
        ))
        .into()),
    }
}
