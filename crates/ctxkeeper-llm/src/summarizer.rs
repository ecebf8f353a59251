//! The [`Summarizer`] trait.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use ctxkeeper_core::summary::{Summary, SummaryRequest};

use crate::error::LlmError;

/// Turns a compacted prefix of a conversation (plus the previous summary) into a structured
/// [`Summary`].
///
/// Implementations: [`crate::ExtractiveSummarizer`] (deterministic, no model),
/// [`crate::OpenAiSummarizer`] (Chat Completions and compatible servers),
/// [`crate::AnthropicSummarizer`] (Messages API). Wrap any of them in [`crate::Resilient`] to
/// get a summarizer that never fails: the engine must not lose a turn because a summary could
/// not be made.
#[async_trait]
pub trait Summarizer: Send + Sync + fmt::Debug {
    /// Summarizes `request.messages`, merging `request.previous` into the result.
    ///
    /// Errors are reported, not hidden: a transport failure, a provider error or answers that
    /// never validate against the schema come back as [`LlmError`].
    async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError>;

    /// A short name for reports and events (`extractive`, `openai:gpt-4o-mini`, …).
    fn name(&self) -> &str;
}

#[async_trait]
impl<S: Summarizer + ?Sized> Summarizer for Box<S> {
    async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
        (**self).summarize(request).await
    }

    fn name(&self) -> &str {
        (**self).name()
    }
}

#[async_trait]
impl<S: Summarizer + ?Sized> Summarizer for Arc<S> {
    async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
        (**self).summarize(request).await
    }

    fn name(&self) -> &str {
        (**self).name()
    }
}
