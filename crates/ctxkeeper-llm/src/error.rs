//! Errors of the summarizers.

use std::time::Duration;

use ctxkeeper_core::overflow::Overflow;

/// Why a summarizer could not produce a summary.
///
/// [`LlmError::is_transient`] tells whether the same request may succeed later (the
/// [`crate::Resilient`] wrapper retries those); the others need a change first (a key, a
/// configuration, a smaller request).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The request did not complete: connection refused or reset, TLS failure, a body that
    /// could not be read. The message never contains the API key.
    #[error("request failed: {message}")]
    Transport { message: String },
    /// No complete answer within the configured timeout.
    #[error("request timed out")]
    Timeout,
    /// The provider answered with an error status that no fallback handles. `body` is cut to a
    /// few kilobytes; `retry_after` comes from the `Retry-After` header when present.
    #[error("provider answered HTTP {status}{}", colon_then(body))]
    Status {
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
    /// The summarization request itself did not fit the summarizer model's window, even after
    /// shrinking it within bounds.
    #[error(
        "the summarization request does not fit the summarizer model's window{}",
        overflow.limit.map(|limit| format!(" ({limit} tokens)")).unwrap_or_default()
    )]
    Overflow { overflow: Overflow },
    /// Every answer failed validation against the summary schema, `attempts` times.
    #[error("no valid summary after {attempts} attempt(s): {problem}")]
    InvalidOutput { attempts: u32, problem: String },
    /// The summarizer is misconfigured (a base URL that does not parse, a header that cannot
    /// be sent).
    #[error("summarizer configuration: {message}")]
    Config { message: String },
}

/// `": body"`, or nothing for an empty body.
fn colon_then(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(": {body}")
    }
}

impl LlmError {
    /// True when retrying the same request later may succeed: timeouts, transport failures,
    /// 408, 409, 425, 429 and 5xx statuses (Anthropic's 529 "overloaded" included).
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::Transport { .. } | LlmError::Timeout => true,
            LlmError::Status { status, .. } => {
                matches!(status, 408 | 409 | 425 | 429) || (500..=599).contains(status)
            }
            LlmError::Overflow { .. }
            | LlmError::InvalidOutput { .. }
            | LlmError::Config { .. } => false,
        }
    }

    /// How long the provider asked to wait before retrying, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl From<reqwest::Error> for LlmError {
    fn from(err: reqwest::Error) -> LlmError {
        if err.is_timeout() {
            return LlmError::Timeout;
        }
        if err.is_builder() {
            return LlmError::Config {
                message: describe(&err),
            };
        }
        LlmError::Transport {
            message: describe(&err),
        }
    }
}

/// The error and its causes on one line. reqwest's messages name the URL but never the
/// request headers, so the API key cannot appear here.
fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors_are_the_retryable_ones() {
        let status = |status| LlmError::Status {
            status,
            body: String::new(),
            retry_after: None,
        };
        assert!(LlmError::Timeout.is_transient());
        assert!(status(429).is_transient());
        assert!(status(529).is_transient());
        assert!(status(503).is_transient());
        assert!(!status(400).is_transient());
        assert!(!status(401).is_transient());
        assert!(
            !LlmError::InvalidOutput {
                attempts: 3,
                problem: "x".into()
            }
            .is_transient()
        );
    }

    #[test]
    fn display_is_one_readable_line() {
        let err = LlmError::Status {
            status: 503,
            body: "overloaded".into(),
            retry_after: None,
        };
        assert_eq!(err.to_string(), "provider answered HTTP 503: overloaded");
        let err = LlmError::InvalidOutput {
            attempts: 3,
            problem: "missing field".into(),
        };
        assert_eq!(
            err.to_string(),
            "no valid summary after 3 attempt(s): missing field"
        );
    }
}
