//! Long-term memory of the gateway's sessions: every session's [`ContextManager`] gets the
//! memory of its tenant (`MEMORY.md` and `memory/YYYY-MM-DD.md` under the workspace,
//! `tenants/<tenant>/…` for every tenant but the default one, the layout of
//! [`ctxkeeper_store::memory`]), so the durable facts of what a compaction removes are
//! flushed to today's daily file first, and a policy whose summaries go to memory (CowAgent)
//! writes them there. The MCP tools `memory_search` / `memory_get` that `ctxkeeper serve`
//! mounts at `/mcp` read the same files for the same tenant; no session reaches another
//! tenant's (the scope comes from the session key, whose tenant the credentials chose).

use std::sync::Arc;

use async_trait::async_trait;
use ctxkeeper::ContextManager;
use ctxkeeper_core::model::Message;
use ctxkeeper_core::summary::{Summary, SummaryRequest};
use ctxkeeper_llm::{ExtractiveSummarizer, LlmError, Summarizer};
use ctxkeeper_store::SessionKey;
use ctxkeeper_store::memory::{LongTermMemory, MemoryScope};

use super::Sessions;

impl Sessions {
    /// Gives every session the long-term memory rooted at `memory`, scoped to its tenant.
    pub fn with_memory(mut self, memory: Arc<LongTermMemory>) -> Sessions {
        self.memory = Some(memory);
        self
    }

    /// The long-term memory sessions flush to, if any.
    pub fn memory(&self) -> Option<&Arc<LongTermMemory>> {
        self.memory.as_ref()
    }

    /// `manager` with its session's memory attached (unchanged when memory is off).
    pub(super) fn attach_memory(
        &self,
        key: &SessionKey,
        manager: ContextManager,
    ) -> ContextManager {
        match &self.memory {
            Some(memory) => manager.with_memory(memory.clone(), MemoryScope::of(key)),
            None => manager,
        }
    }

    /// A summarizer that writes summaries on the caller's upstream finds no facts of its own
    /// (it only summarizes); with memory on, the extractive rules find them instead.
    pub(super) fn with_fact_finder(&self, summarizer: Arc<dyn Summarizer>) -> Arc<dyn Summarizer> {
        if self.memory.is_none() {
            return summarizer;
        }
        Arc::new(ExtractiveFacts { inner: summarizer })
    }
}

/// Summaries from `inner`; memory facts from `inner`, else from the extractive rules.
#[derive(Debug)]
struct ExtractiveFacts {
    inner: Arc<dyn Summarizer>,
}

#[async_trait]
impl Summarizer for ExtractiveFacts {
    async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
        self.inner.summarize(request).await
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn extract_facts(
        &self,
        messages: &[Message],
        max_tokens: u32,
    ) -> Result<Option<String>, LlmError> {
        match self.inner.extract_facts(messages, max_tokens).await {
            Ok(Some(facts)) => Ok(Some(facts)),
            // No facts (or a failed call): the extractive rules cost no call and cannot fail.
            _ => {
                ExtractiveSummarizer::default()
                    .extract_facts(messages, max_tokens)
                    .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A summarizer that finds no facts, as the upstream one.
    #[derive(Debug)]
    struct NoFacts;

    #[async_trait]
    impl Summarizer for NoFacts {
        async fn summarize(&self, _: &SummaryRequest) -> Result<Summary, LlmError> {
            Err(LlmError::Timeout)
        }

        fn name(&self) -> &str {
            "no-facts"
        }
    }

    #[tokio::test]
    async fn facts_come_from_the_extractive_rules_when_the_summarizer_has_none() {
        let messages = vec![
            Message::user("Fix the totals. You must not change the public API."),
            Message::tool_call("c1", "read_file", r#"{"path":"src/invoice.rs"}"#),
            Message::tool_result("c1", "fn total() -> u32 { 1 }"),
        ];
        let wrapped = ExtractiveFacts {
            inner: Arc::new(NoFacts),
        };
        assert_eq!(wrapped.name(), "no-facts");
        let facts = wrapped
            .extract_facts(&messages, 600)
            .await
            .expect("no error")
            .expect("facts");
        assert!(facts.contains("src/invoice.rs"), "{facts}");
        assert!(facts.contains("must not change the public API"), "{facts}");
        assert_eq!(NoFacts.extract_facts(&messages, 600).await.ok(), Some(None));
    }
}
