//! The providers' error answers, word for word.
//!
//! OpenAI wraps every error as `{"error": {"message", "type", "param", "code"}}`; Anthropic as
//! `{"type": "error", "error": {"type", "message"}, "request_id"}`. The messages below are the
//! ones the real APIs send (copied from captured answers, typos included: OpenAI really writes
//! "preceeding"), so that a client's error handling meets what it will meet in production.

use axum::http::StatusCode;
use serde_json::{Value, json};

/// Which provider's error shape an answer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    OpenAi,
    Anthropic,
}

/// An error answer: a status and a JSON body in one provider's shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub body: Value,
}

impl ApiError {
    /// An OpenAI error (`type` is always `invalid_request_error` for the 400s and 401s we send).
    pub fn openai(
        status: StatusCode,
        message: String,
        param: Option<&str>,
        code: Option<&str>,
    ) -> ApiError {
        ApiError {
            status,
            body: json!({
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": param,
                    "code": code,
                }
            }),
        }
    }

    /// An OpenAI 400 with `type: invalid_request_error`.
    pub fn openai_400(
        message: impl Into<String>,
        param: Option<&str>,
        code: Option<&str>,
    ) -> ApiError {
        ApiError::openai(StatusCode::BAD_REQUEST, message.into(), param, code)
    }

    /// An Anthropic error of the given `error.type`.
    pub fn anthropic(status: StatusCode, kind: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: json!({
                "type": "error",
                "error": {"type": kind, "message": message.into()},
            }),
        }
    }

    /// An Anthropic 400 `invalid_request_error`.
    pub fn anthropic_400(message: impl Into<String>) -> ApiError {
        ApiError::anthropic(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// The answer to a request without credentials.
    pub fn unauthorized(flavor: Flavor) -> ApiError {
        match flavor {
            Flavor::OpenAi => ApiError::openai(
                StatusCode::UNAUTHORIZED,
                "You didn't provide an API key. You need to provide your API key in an \
                 Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or \
                 as the password field (with blank username) if you're accessing the API from your \
                 browser and are prompted for a username. You can obtain an API key from \
                 https://platform.openai.com/account/api-keys."
                    .to_owned(),
                None,
                None,
            ),
            Flavor::Anthropic => ApiError::anthropic(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "x-api-key header is required",
            ),
        }
    }

    /// A provider failure with `status`, worded as the provider words it: a rejected key
    /// (401), an overloaded service (529 at Anthropic) or a server error (any other status).
    pub fn failure(flavor: Flavor, status: StatusCode) -> ApiError {
        match (flavor, status.as_u16()) {
            (Flavor::OpenAi, 401) => ApiError::openai(
                status,
                "Incorrect API key provided. You can find your API key at                  https://platform.openai.com/account/api-keys."
                    .to_owned(),
                None,
                Some("invalid_api_key"),
            ),
            (Flavor::OpenAi, _) => ApiError {
                status,
                body: json!({"error": {
                    "message": "The server had an error while processing your request. Sorry about that!",
                    "type": "server_error", "param": null, "code": null}}),
            },
            (Flavor::Anthropic, 401) => {
                ApiError::anthropic(status, "authentication_error", "invalid x-api-key")
            }
            (Flavor::Anthropic, 529) => ApiError::anthropic(status, "overloaded_error", "Overloaded"),
            (Flavor::Anthropic, _) => ApiError::anthropic(status, "api_error", "Internal server error"),
        }
    }

    /// The answer to a body that is not JSON.
    pub fn malformed_json(flavor: Flavor, detail: &str) -> ApiError {
        match flavor {
            Flavor::OpenAi => ApiError::openai_400(
                "We could not parse the JSON body of your request. (HINT: This likely means you \
                 aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, \
                 but what was sent was not valid JSON. If you have trouble figuring out how to fix \
                 this, please contact us through our help center at help.openai.com.)",
                None,
                None,
            ),
            Flavor::Anthropic => ApiError::anthropic_400(format!(
                "There was an error parsing the body of your request: {detail}"
            )),
        }
    }

    /// The answer to an unknown path or method.
    pub fn not_found(flavor: Flavor, method: &str, path: &str) -> ApiError {
        match flavor {
            Flavor::OpenAi => ApiError::openai(
                StatusCode::NOT_FOUND,
                format!("Invalid URL ({method} {path})"),
                None,
                None,
            ),
            Flavor::Anthropic => {
                ApiError::anthropic(StatusCode::NOT_FOUND, "not_found_error", "Not Found")
            }
        }
    }

    /// Adds Anthropic's `request_id` (its errors carry one; OpenAI's do not).
    pub fn with_request_id(mut self, request_id: &str) -> ApiError {
        if let Some(object) = self.body.as_object_mut()
            && object.get("type").and_then(Value::as_str) == Some("error")
        {
            object.insert("request_id".into(), Value::String(request_id.to_owned()));
        }
        self
    }
}
