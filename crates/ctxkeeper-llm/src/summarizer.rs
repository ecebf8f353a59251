//! The [`Summarizer`] trait.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
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

    /// The durable facts worth keeping in long-term memory from `messages` that are about to
    /// be compacted, or `None` when there are none (the pre-compaction memory flush). The
    /// default finds none: only model-backed summarizers can judge what is durable.
    async fn extract_facts(
        &self,
        messages: &[Message],
        max_tokens: u32,
    ) -> Result<Option<String>, LlmError> {
        let _ = (messages, max_tokens);
        Ok(None)
    }
}

/// A boxed or shared summarizer is one: every call goes to the summarizer it points to.
macro_rules! summarizer_behind {
    ($($pointer:ident),*) => {$(
        #[async_trait]
        impl<S: Summarizer + ?Sized> Summarizer for $pointer<S> {
            async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
                (**self).summarize(request).await
            }

            fn name(&self) -> &str {
                (**self).name()
            }

            async fn extract_facts(
                &self,
                messages: &[Message],
                max_tokens: u32,
            ) -> Result<Option<String>, LlmError> {
                (**self).extract_facts(messages, max_tokens).await
            }
        }
    )*};
}

summarizer_behind!(Box, Arc);
