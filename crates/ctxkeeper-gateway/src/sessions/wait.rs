//! How long an agent's request waits for a summary written by a model: at most
//! [`Sessions::with_summary_wait`] (default [`DEFAULT_SUMMARY_WAIT`]). Past the bound the step
//! compacts with the extractive summary (marked degraded, like any failed summary) and answers
//! the agent, while the model's call runs to its end in the background, within the
//! summarizer's own timeout, where nothing waits for it. A summary prepared ahead of the
//! trigger ([`super::prepare`]) runs unbounded in the background; the step that compacts
//! while it is still out waits for it within the same bound.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
use ctxkeeper_core::summary::{Summary, SummaryRequest};
use ctxkeeper_llm::{EXTRACTIVE_PRODUCER, LlmError, Summarizer};

use super::Sessions;
use crate::metrics::Metrics;

/// The default bound on the time a request waits for a summary.
pub const DEFAULT_SUMMARY_WAIT: Duration = Duration::from_secs(5);

impl Sessions {
    /// Bounds the time a request waits for a model's summary (see the module documentation).
    pub fn with_summary_wait(mut self, wait: Duration) -> Sessions {
        self.summary_wait = wait;
        self
    }

    /// `summarizer` as a step waits for it: bounded, unless it is the extractive one (it
    /// answers in microseconds and cannot hang).
    pub(super) fn waited(&self, summarizer: Arc<dyn Summarizer>) -> Arc<dyn Summarizer> {
        if summarizer.name() == EXTRACTIVE_PRODUCER {
            return summarizer;
        }
        Arc::new(Bounded {
            inner: summarizer,
            wait: self.summary_wait,
            metrics: self.metrics.clone(),
        })
    }
}

/// A summarizer that answers within `wait` or gives up waiting (never cancelling the call).
#[derive(Debug)]
struct Bounded {
    inner: Arc<dyn Summarizer>,
    wait: Duration,
    metrics: Arc<Metrics>,
}

impl Bounded {
    /// Polls `call` in place for at most `wait`; past it, hands the call to a task of its own
    /// to finish. Polling in place (not spawning from the start) keeps the step's contract:
    /// an agent that drops its request while the summary is on the way drops the call and
    /// everything it holds (the caller's route and key) with it.
    async fn within<T: Send + 'static>(
        &self,
        what: &'static str,
        call: impl Future<Output = Result<T, LlmError>> + Send + 'static,
    ) -> Result<T, LlmError> {
        let mut call = Box::pin(call);
        match tokio::time::timeout(self.wait, &mut call).await {
            Ok(answer) => answer,
            Err(_) => {
                Metrics::add(&self.metrics.summaries_late, 1);
                let name = self.inner.name().to_string();
                let waited = self.wait;
                // The call goes on: it ends within the summarizer's own timeout.
                tokio::spawn(async move {
                    let outcome = match call.await {
                        Ok(_) => "answered",
                        Err(_) => "failed",
                    };
                    tracing::info!(summarizer = %name, ?waited, outcome, "late {what} call ended");
                });
                Err(LlmError::Transport {
                    message: format!(
                        "no {what} from {} within {:.1} s (the request's wait bound); the call \
                         goes on in the background",
                        self.inner.name(),
                        self.wait.as_secs_f64()
                    ),
                })
            }
        }
    }
}

#[async_trait]
impl Summarizer for Bounded {
    async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
        let inner = self.inner.clone();
        let request = request.clone();
        self.within("summary", async move { inner.summarize(&request).await })
            .await
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn extract_facts(
        &self,
        messages: &[Message],
        max_tokens: u32,
    ) -> Result<Option<String>, LlmError> {
        let inner = self.inner.clone();
        let messages = messages.to_vec();
        self.within("memory facts", async move {
            inner.extract_facts(&messages, max_tokens).await
        })
        .await
    }
}
