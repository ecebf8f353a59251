//! Errors the gateway answers itself, in the error shape of the API the client speaks.
//!
//! An OpenAI client expects `{"error": {"message", "type", "param", "code"}}`, an Anthropic
//! client `{"type": "error", "error": {"type", "message"}}`; official SDKs parse these shapes
//! into their own exception types, so an error in the wrong shape would surface as an opaque
//! decoding failure. Errors of the upstream itself are passed through unchanged, never built
//! here.
//!
//! ```
//! use axum::http::StatusCode;
//! use ctxkeeper_gateway::error::{ApiError, Flavor};
//!
//! let error = ApiError::invalid_request(Flavor::Anthropic, "messages: missing");
//! assert_eq!(error.status, StatusCode::BAD_REQUEST);
//! assert_eq!(error.body()["error"]["type"], "invalid_request_error");
//! ```

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Which provider's error shape a client expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// OpenAI (Chat Completions, Responses, models) and the gateway's own endpoints.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

/// An error the gateway answers on its own.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub flavor: Flavor,
    pub status: StatusCode,
    /// The machine-readable kind (`invalid_request_error`, `timeout_error`, …).
    pub kind: &'static str,
    /// OpenAI's `code` (`request_too_large`, …), if any.
    pub code: Option<&'static str>,
    /// The offending request field (OpenAI's `param`), if known.
    pub param: Option<String>,
    pub message: String,
}

impl ApiError {
    /// An error of `status` and `kind`.
    pub fn new(
        flavor: Flavor,
        status: StatusCode,
        kind: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            flavor,
            status,
            kind,
            code: None,
            param: None,
            message: message.into(),
        }
    }

    /// A malformed request (400).
    pub fn invalid_request(flavor: Flavor, message: impl Into<String>) -> ApiError {
        ApiError::new(
            flavor,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            message,
        )
    }

    /// A body over the configured limit (413).
    pub fn too_large(flavor: Flavor, limit: usize) -> ApiError {
        let kind = match flavor {
            Flavor::OpenAi => "invalid_request_error",
            Flavor::Anthropic => "request_too_large",
        };
        let mut error = ApiError::new(
            flavor,
            StatusCode::PAYLOAD_TOO_LARGE,
            kind,
            format!(
                "request body is larger than the gateway's limit of {limit} bytes: raise the \
                 limit with `ctxkeeper serve --body-limit BYTES` (or `body_limit` in [gateway]), \
                 or let the agent compact its own history"
            ),
        );
        error.code = Some("request_too_large");
        error
    }

    /// The upstream did not answer in time (504).
    pub fn timeout(flavor: Flavor, message: impl Into<String>) -> ApiError {
        let kind = match flavor {
            Flavor::OpenAi => "timeout",
            Flavor::Anthropic => "timeout_error",
        };
        ApiError::new(flavor, StatusCode::GATEWAY_TIMEOUT, kind, message)
    }

    /// The upstream could not be reached or broke off (502).
    pub fn bad_gateway(flavor: Flavor, message: impl Into<String>) -> ApiError {
        ApiError::new(flavor, StatusCode::BAD_GATEWAY, "api_error", message)
    }

    /// A failure inside the gateway (500): store or archive unavailable.
    pub fn internal(flavor: Flavor, message: impl Into<String>) -> ApiError {
        ApiError::new(
            flavor,
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            message,
        )
    }

    /// Missing or wrong credentials (401).
    pub fn unauthorized(flavor: Flavor, message: impl Into<String>) -> ApiError {
        ApiError::new(
            flavor,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            message,
        )
    }

    /// Credentials that do not allow what was asked (403).
    pub fn forbidden(flavor: Flavor, message: impl Into<String>) -> ApiError {
        ApiError::new(flavor, StatusCode::FORBIDDEN, "permission_error", message)
    }

    /// The gateway is over its load limit right now (503 with `Retry-After`).
    pub fn overloaded(flavor: Flavor, message: impl Into<String>) -> ApiError {
        let kind = match flavor {
            Flavor::OpenAi => "server_error",
            Flavor::Anthropic => "overloaded_error",
        };
        ApiError::new(flavor, StatusCode::SERVICE_UNAVAILABLE, kind, message)
    }

    /// A request refused by the tenant rule, with the status its cause calls for.
    pub fn tenant(flavor: Flavor, err: crate::identity::TenantError) -> ApiError {
        use crate::identity::TenantError;
        match err {
            TenantError::Malformed(m) => ApiError::invalid_request(flavor, m),
            TenantError::Unauthorized(m) => ApiError::unauthorized(flavor, m),
            TenantError::Forbidden(m) => ApiError::forbidden(flavor, m),
        }
    }

    /// Something that does not exist (404).
    pub fn not_found(flavor: Flavor, message: impl Into<String>) -> ApiError {
        ApiError::new(flavor, StatusCode::NOT_FOUND, "not_found_error", message)
    }

    /// Names the offending request field.
    pub fn with_param(mut self, param: impl Into<String>) -> ApiError {
        self.param = Some(param.into());
        self
    }

    /// The JSON body in the client's provider shape.
    pub fn body(&self) -> Value {
        match self.flavor {
            Flavor::OpenAi => json!({
                "error": {
                    "message": self.message,
                    "type": self.kind,
                    "param": self.param,
                    "code": self.code,
                }
            }),
            Flavor::Anthropic => json!({
                "type": "error",
                "error": {"type": self.kind, "message": self.message},
            }),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.kind,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        let mut response = (self.status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // Load is shed for a moment only: clients (and SDK retry loops) come back soon.
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_shape_has_message_type_param_and_code() {
        let body = ApiError::too_large(Flavor::OpenAi, 10).body();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["code"], "request_too_large");
        assert!(body["error"]["param"].is_null());
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("10 bytes"))
        );
    }

    #[test]
    fn anthropic_shape_is_typed_error() {
        let body = ApiError::timeout(Flavor::Anthropic, "slow").body();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "timeout_error");
        assert_eq!(body["error"]["message"], "slow");
    }
}
