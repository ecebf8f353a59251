//! The HTTP client shared by the model-backed summarizers.
//!
//! TLS is rustls with the aws-lc provider. reqwest 0.13 uses a process-wide provider when one
//! was installed and otherwise builds its client with aws-lc itself, so nothing global is
//! installed here: a host that installs its own provider at start-up keeps it.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use serde_json::{Map, Value};

use crate::error::LlmError;
use crate::options::SummarizerOptions;
use crate::structured::{CallError, failure};

/// What an endpoint answered.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A 2xx answer with a JSON body.
    Success(Value),
    /// Any other status, with the raw body.
    Failure {
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
}

/// A JSON-over-HTTP client with the summarizer's timeouts.
#[derive(Debug, Clone)]
pub(crate) struct Http {
    client: reqwest::Client,
}

impl Http {
    pub(crate) fn new(options: &SummarizerOptions) -> Result<Http, LlmError> {
        let client = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.connect_timeout)
            .build()?;
        Ok(Http { client })
    }

    /// POSTs `body` as JSON and reads the answer.
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &Value,
    ) -> Result<Reply, LlmError> {
        let response = self
            .client
            .post(url)
            .headers(headers)
            .json(body)
            .send()
            .await?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = response.text().await?;
        if (200..300).contains(&status) {
            serde_json::from_str(&text)
                .map(Reply::Success)
                .map_err(|e| LlmError::Transport {
                    message: format!("the answer body is not JSON ({e})"),
                })
        } else {
            Ok(Reply::Failure {
                status,
                body: text,
                retry_after,
            })
        }
    }
}

/// Where a model-backed summarizer sends its calls: the checked URL and the client.
#[derive(Debug)]
pub(crate) struct Endpoint {
    url: String,
    http: Http,
}

impl Endpoint {
    /// The client for `options` calling `{base_url}/{path}`. Fails only on an unusable
    /// configuration (a client that cannot be built, a URL that does not parse).
    pub(crate) fn new(
        options: &SummarizerOptions,
        base_url: &str,
        path: &str,
    ) -> Result<Endpoint, LlmError> {
        let http = Http::new(options)?;
        let url = endpoint(base_url, path);
        reqwest::Url::parse(&url).map_err(|e| LlmError::Config {
            message: format!("invalid base URL {base_url:?}: {e}"),
        })?;
        Ok(Endpoint { url, http })
    }

    /// POSTs `body` with `headers` and reads the answer. A non-2xx answer is first offered to
    /// `adjust` (a refused parameter the summarizer can change before asking again), then
    /// mapped by [`failure`] with `is_refusal`.
    pub(crate) async fn send(
        &self,
        headers: Result<HeaderMap, LlmError>,
        body: Map<String, Value>,
        adjust: impl FnOnce(u16, &str) -> Option<CallError>,
        is_refusal: impl Fn(&str) -> bool,
    ) -> Result<Value, CallError> {
        let headers = headers.map_err(CallError::Fatal)?;
        match self
            .http
            .post(&self.url, headers, &Value::Object(body))
            .await
            .map_err(CallError::Fatal)?
        {
            Reply::Success(value) => Ok(value),
            Reply::Failure {
                status,
                body,
                retry_after,
            } => Err(adjust(status, &body)
                .unwrap_or_else(|| failure(status, body, retry_after, is_refusal))),
        }
    }
}

/// A header carrying the API key (`value`), marked sensitive so it is never logged.
pub(crate) fn secret_header(value: &str) -> Result<HeaderValue, LlmError> {
    let mut header = HeaderValue::from_str(value).map_err(|_| LlmError::Config {
        message: "the API key contains characters a header cannot carry".into(),
    })?;
    header.set_sensitive(true);
    Ok(header)
}

/// `base` joined with `path`, with exactly one slash between them.
pub(crate) fn endpoint(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_join_with_one_slash() {
        assert_eq!(
            endpoint("http://h/v1/", "/chat/completions"),
            "http://h/v1/chat/completions"
        );
        assert_eq!(endpoint("http://h/v1", "messages"), "http://h/v1/messages");
    }
}
