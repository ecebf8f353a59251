//! [`Resilient`]: a model summarizer with bounded retries.
//!
//! It retries transient failures (timeouts, connection errors, 429 and 5xx answers) a bounded
//! number of times with exponential backoff (honouring `Retry-After` up to a cap). Schema
//! failures are not retried again here: the wrapped summarizer has already spent its own
//! bounded repair attempts on them. When every attempt failed, [`Summarizer::summarize`]
//! returns the last error, so the host knows: the context manager puts the extractive summary
//! in its place (marked degraded) and reports a `summary_failed` event naming the cause.
//! [`Resilient::summarize_reported`] never fails: it stands the degraded extractive summary
//! in itself and reports the failure beside it.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_core::summary::{SummaryReason, SummaryRequest, SummarySchema};
//! use ctxkeeper_llm::{ExtractiveSummarizer, Resilient, Summarizer};
//!
//! let summarizer = Resilient::new(ExtractiveSummarizer::new());
//! let request = SummaryRequest {
//!     messages: vec![Message::user("Rename the crate.")],
//!     previous: None,
//!     schema: SummarySchema::default(),
//!     prompt: None,
//!     focus: None,
//!     reason: SummaryReason::Manual,
//!     max_output_tokens: 400,
//!     must_keep: Vec::new(),
//!     instructions: None,
//!     request_in_context: None,
//! };
//! let outcome = summarizer.summarize_reported(&request).await;
//! assert!(outcome.failure.is_none());
//! assert_eq!(outcome.attempts, 1);
//! assert!(!outcome.summary.degraded);
//! # });
//! ```

use std::time::Duration;

use async_trait::async_trait;
use ctxkeeper_core::summary::{Summary, SummaryRequest};

use crate::error::LlmError;
use crate::extractive::ExtractiveSummarizer;
use crate::fallback::fallback_truncation;
use crate::summarizer::Summarizer;

/// How [`Resilient`] retries.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Calls of the wrapped summarizer at most, the first one included (at least 1).
    pub max_attempts: u32,
    /// Wait before the second call; doubled before each further one.
    pub initial_backoff: Duration,
    /// Upper bound of any wait, `Retry-After` included.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
        }
    }
}

/// What happened while summarizing: the summary (the degraded extractive summary when every
/// attempt failed), how many calls were made, and the last failure.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryOutcome {
    pub summary: Summary,
    /// Calls of the wrapped summarizer.
    pub attempts: u32,
    /// The error that made the summary fall back (`summary.degraded` is then true), or `None`.
    pub failure: Option<LlmError>,
}

/// Wraps a summarizer with bounded retries of transient failures. This is the form the
/// engine uses.
#[derive(Debug, Clone)]
pub struct Resilient<S> {
    inner: S,
    policy: RetryPolicy,
}

impl<S: Summarizer> Resilient<S> {
    /// Wraps `inner` with the default [`RetryPolicy`] (3 attempts, 0.5 s then 1 s backoff).
    pub fn new(inner: S) -> Resilient<S> {
        Resilient {
            inner,
            policy: RetryPolicy::default(),
        }
    }

    /// Wraps `inner` with `policy`.
    pub fn with_policy(inner: S, policy: RetryPolicy) -> Resilient<S> {
        Resilient { inner, policy }
    }

    /// The wrapped summarizer.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The retry policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Summarizes, retrying transient failures, and reports what happened. Never fails: when
    /// every attempt failed, the extractive summary of the request stands in, marked degraded.
    pub async fn summarize_reported(&self, request: &SummaryRequest) -> SummaryOutcome {
        let (result, attempts) = self.attempt(request).await;
        match result {
            Ok(summary) => SummaryOutcome {
                summary,
                attempts,
                failure: None,
            },
            Err(error) => SummaryOutcome {
                summary: extractive_stand_in(request).await,
                attempts,
                failure: Some(error),
            },
        }
    }

    /// Calls the wrapped summarizer until it succeeds, fails for good, or the attempts run
    /// out; returns the outcome and the number of calls made.
    async fn attempt(&self, request: &SummaryRequest) -> (Result<Summary, LlmError>, u32) {
        let max_attempts = self.policy.max_attempts.max(1);
        let mut backoff = self.policy.initial_backoff;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let error = match self.inner.summarize(request).await {
                Ok(summary) => return (Ok(summary), attempts),
                Err(error) => error,
            };
            if !error.is_transient() || attempts >= max_attempts {
                return (Err(error), attempts);
            }
            let wait = error
                .retry_after()
                .unwrap_or(backoff)
                .min(self.policy.max_backoff);
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            backoff = backoff.saturating_mul(2).min(self.policy.max_backoff);
        }
    }
}

/// The extractive summary of `request`, marked degraded: what stands in for a model summary
/// that could not be had (the truncation fallback only if even that fails).
async fn extractive_stand_in(request: &SummaryRequest) -> Summary {
    let mut summary = match ExtractiveSummarizer::default().summarize(request).await {
        Ok(summary) => summary,
        Err(_) => fallback_truncation(request),
    };
    summary.degraded = true;
    summary
}

#[async_trait]
impl<S: Summarizer> Summarizer for Resilient<S> {
    /// A summary from the wrapped summarizer, or its last error once the retries are spent:
    /// the caller decides what stands in (the context manager: the extractive summary, with
    /// a `summary_failed` event).
    async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
        self.attempt(request).await.0
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    /// Facts from the wrapped summarizer; a failure counts as "no facts" (the flush is
    /// optional and must never fail a compaction).
    async fn extract_facts(
        &self,
        messages: &[ctxkeeper_core::model::Message],
        max_tokens: u32,
    ) -> Result<Option<String>, LlmError> {
        Ok(self
            .inner()
            .extract_facts(messages, max_tokens)
            .await
            .unwrap_or(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    use ctxkeeper_core::model::Message;
    use ctxkeeper_core::summary::SummarySchema;

    #[derive(Debug)]
    struct Failing {
        calls: AtomicU32,
        error: LlmError,
        succeed_on: Option<u32>,
    }

    impl Failing {
        /// Fails with `error` on every call but the `succeed_on`th.
        fn new(error: LlmError, succeed_on: Option<u32>) -> Failing {
            Failing {
                calls: AtomicU32::new(0),
                error,
                succeed_on,
            }
        }
    }

    #[async_trait]
    impl Summarizer for Failing {
        async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
            let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            if Some(call) == self.succeed_on {
                return Ok(Summary::empty(&request.schema, "test"));
            }
            Err(self.error.clone())
        }

        fn name(&self) -> &str {
            "failing"
        }
    }

    fn request() -> SummaryRequest {
        SummaryRequest::new(vec![Message::user("hello")], 200)
    }

    fn quick() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
        }
    }

    #[tokio::test]
    async fn transient_errors_are_retried_then_fall_back() {
        let inner = Failing::new(LlmError::Timeout, None);
        let resilient = Resilient::with_policy(inner, quick());
        let outcome = resilient.summarize_reported(&request()).await;
        assert_eq!(outcome.attempts, 3);
        assert_eq!(resilient.inner().calls.load(Ordering::SeqCst), 3);
        assert!(outcome.summary.degraded);
        assert_eq!(outcome.failure, Some(LlmError::Timeout));
    }

    #[tokio::test]
    async fn permanent_errors_fall_back_at_once() {
        let error = LlmError::Status {
            status: 401,
            body: "bad key".into(),
            retry_after: None,
        };
        let inner = Failing::new(error, None);
        let resilient = Resilient::with_policy(inner, quick());
        let outcome = resilient.summarize_reported(&request()).await;
        assert_eq!(outcome.attempts, 1);
        assert!(outcome.summary.degraded);
    }

    #[tokio::test]
    async fn a_later_success_is_returned() {
        let inner = Failing::new(LlmError::Timeout, Some(2));
        let resilient = Resilient::with_policy(inner, quick());
        let outcome = resilient.summarize_reported(&request()).await;
        assert_eq!(outcome.attempts, 2);
        assert!(outcome.failure.is_none());
        assert!(!outcome.summary.degraded);
    }

    /// Once the retries are spent the host gets the error (and stands in the extractive
    /// summary itself, reporting the failure); `summarize_reported` stands it in directly.
    #[tokio::test]
    async fn spent_retries_reach_the_host_as_the_last_error() {
        let inner = Failing::new(LlmError::Timeout, None);
        let resilient = Resilient::with_policy(inner, quick());
        assert_eq!(
            resilient.summarize(&request()).await,
            Err(LlmError::Timeout)
        );
        assert_eq!(resilient.inner().calls.load(Ordering::SeqCst), 3);
        let outcome = resilient.summarize_reported(&request()).await;
        assert_eq!(outcome.summary.produced_by, "extractive");
        assert!(outcome.summary.degraded);
        let rendered = outcome.summary.render(&SummarySchema::default());
        assert!(rendered.contains("hello"), "{rendered}");
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_is_capped_and_honours_retry_after() {
        let error = LlmError::Status {
            status: 429,
            body: String::new(),
            retry_after: Some(Duration::from_secs(3600)),
        };
        let inner = Failing::new(error, None);
        let policy = RetryPolicy {
            max_attempts: 2,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(2),
        };
        let resilient = Resilient::with_policy(inner, policy);
        let start = tokio::time::Instant::now();
        let outcome = resilient.summarize_reported(&request()).await;
        assert_eq!(outcome.attempts, 2);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }
}
