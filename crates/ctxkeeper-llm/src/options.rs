//! Settings shared by the model-backed summarizers.

use std::fmt;
use std::time::Duration;

/// An API key. Its `Debug` and `Display` print `***`, so a key never reaches a log through a
/// configuration dump.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a key.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The key itself, for building the request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// How a model-backed summarizer calls its model and bounds its work.
#[derive(Debug, Clone, PartialEq)]
pub struct SummarizerOptions {
    /// Whole-request timeout of one HTTP call.
    pub timeout: Duration,
    /// Timeout of establishing the connection.
    pub connect_timeout: Duration,
    /// Extra attempts after an answer that does not validate against the schema, each telling
    /// the model what was wrong (default 2, so at most 3 answers per chunk).
    pub max_retries: u32,
    /// The summarizer model's context window. `None` takes it from the model profile table
    /// (`ctxkeeper_core::tokens`); set it for local servers whose window is a launch option
    /// (vLLM `--max-model-len`, llama.cpp `-c`, Ollama `num_ctx`).
    pub context_window: Option<u32>,
    /// Largest transcript per call, in tokens (ReMe's `group_token_threshold`). `None` uses all
    /// the room the window leaves.
    pub chunk_tokens: Option<u32>,
    /// Most calls one summarization may make for a huge prefix; older chunks beyond it are
    /// dropped (and counted in the summary).
    pub max_chunks: usize,
    /// Tool-call arguments longer than this are cut in the transcript (HarnessAgent's
    /// `maxArgLength`).
    pub max_arg_chars: usize,
    /// Sampling temperature; `None` leaves the provider's default (some reasoning models refuse
    /// any other value).
    pub temperature: Option<f32>,
}

impl Default for SummarizerOptions {
    fn default() -> SummarizerOptions {
        SummarizerOptions {
            timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            max_retries: 2,
            context_window: None,
            chunk_tokens: None,
            max_chunks: 16,
            max_arg_chars: 2_000,
            temperature: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let key = Secret::new("sk-very-secret");
        assert_eq!(format!("{key:?}"), "Secret(***)");
        assert_eq!(key.to_string(), "***");
        assert_eq!(key.expose(), "sk-very-secret");
    }
}
