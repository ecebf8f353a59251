//! Choosing a summarizer from command-line options (see [`ctxkeeper::summarizers`]).

use std::sync::Arc;

use anyhow::Result;
use ctxkeeper::llm::Summarizer;

use crate::trace_input::InputError;

/// Builds the summarizer named `kind`.
pub fn build(kind: &str, url: Option<&str>, model: Option<&str>) -> Result<Arc<dyn Summarizer>> {
    ctxkeeper::summarizers::build(kind, url, model).map_err(|e| InputError::BadOption(e).into())
}
