//! The gateway's errors: starting and running it ([`GatewayError`]), and the errors it answers
//! a client itself ([`ApiError`]), rendered in the error shape of the API the client speaks.
//!
//! An OpenAI client expects `{"error": {"message", "type", "param", "code"}}`, an Anthropic
//! client `{"type": "error", "error": {"type", "message"}}`; official SDKs parse these shapes
//! into their own exception types, so an error in the wrong shape would surface as an opaque
//! decoding failure. An [`ApiError`] carries no shape: what went wrong ([`Kind`], status,
//! message, the offending field) and why ([`std::error::Error::source`]). It takes the
//! client's shape only when it is rendered ([`ApiError::body`], [`ApiError::render`]): for a
//! model call in [`crate::http::endpoint`], for the gateway's own endpoints (admin API,
//! session events) in OpenAI's shape ([`IntoResponse`]). Errors of the upstream itself are
//! passed through unchanged, never built here.
//!
//! ```
//! use axum::http::StatusCode;
//! use ctxkeeper_gateway::error::{ApiError, Flavor};
//!
//! let error = ApiError::invalid_request("messages: missing");
//! assert_eq!(error.status, StatusCode::BAD_REQUEST);
//! assert_eq!(error.body(Flavor::Anthropic)["error"]["type"], "invalid_request_error");
//! assert_eq!(error.body(Flavor::OpenAi)["error"]["message"], "messages: missing");
//! ```

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Errors starting or running the gateway.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// An invalid setting.
    #[error("configuration: {0}")]
    Config(String),
    /// The session store, the archive or long-term memory could not be opened.
    #[error("store: {what}: {source}")]
    Store {
        /// What was being opened (a redacted store URL, `archive DIR`, …).
        what: String,
        #[source]
        source: ctxkeeper_store::StoreError,
    },
    /// The HTTP client could not be built.
    #[error("configuration: HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// Binding or serving failed.
    #[error("server: {0}")]
    Io(#[source] std::io::Error),
}

/// Which provider's error shape a client expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// OpenAI (Chat Completions, Responses, models) and the gateway's own endpoints.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

/// What kind of error the gateway answers, whatever shape it is rendered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request the gateway (or the provider) would refuse as it is.
    InvalidRequest,
    /// A body over the gateway's limit.
    TooLarge,
    /// The upstream did not answer in time.
    Timeout,
    /// A failure of the gateway or of the upstream's transport.
    Api,
    /// Missing or wrong credentials.
    Authentication,
    /// Credentials that do not allow what was asked.
    Permission,
    /// The gateway sheds load for a moment.
    Overloaded,
    /// Something that does not exist.
    NotFound,
}

impl Kind {
    /// The machine-readable `type` a client of `flavor` expects.
    pub fn name(self, flavor: Flavor) -> &'static str {
        match (self, flavor) {
            (Kind::InvalidRequest, _) | (Kind::TooLarge, Flavor::OpenAi) => "invalid_request_error",
            (Kind::TooLarge, Flavor::Anthropic) => "request_too_large",
            (Kind::Timeout, Flavor::OpenAi) => "timeout",
            (Kind::Timeout, Flavor::Anthropic) => "timeout_error",
            (Kind::Api, _) => "api_error",
            (Kind::Authentication, _) => "authentication_error",
            (Kind::Permission, _) => "permission_error",
            (Kind::Overloaded, Flavor::OpenAi) => "server_error",
            (Kind::Overloaded, Flavor::Anthropic) => "overloaded_error",
            (Kind::NotFound, _) => "not_found_error",
        }
    }
}

/// An error the gateway answers on its own.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: Kind,
    /// OpenAI's `code` (`request_too_large`, …), if any.
    pub code: Option<&'static str>,
    /// The offending request field (OpenAI's `param`), if known.
    pub param: Option<String>,
    pub message: String,
    /// The error the message was made from, for logs (never shown to the client beyond the
    /// message).
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl ApiError {
    /// An error of `status` and `kind`.
    pub fn new(status: StatusCode, kind: Kind, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            code: None,
            param: None,
            message: message.into(),
            source: None,
        }
    }

    /// An error whose message is `cause`'s, keeping `cause` as its source.
    pub fn caused_by(
        status: StatusCode,
        kind: Kind,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> ApiError {
        ApiError::new(status, kind, cause.to_string()).with_source(cause)
    }

    /// Keeps `cause` as the error's source.
    pub fn with_source(
        mut self,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> ApiError {
        self.source = Some(Arc::new(cause));
        self
    }

    /// A malformed request (400).
    pub fn invalid_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, Kind::InvalidRequest, message)
    }

    /// A body over the configured limit (413).
    pub fn too_large(limit: usize) -> ApiError {
        let mut error = ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            Kind::TooLarge,
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
    pub fn timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::GATEWAY_TIMEOUT, Kind::Timeout, message)
    }

    /// The upstream could not be reached or broke off (502).
    pub fn bad_gateway(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_GATEWAY, Kind::Api, message)
    }

    /// A failure inside the gateway (500): store or archive unavailable.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, Kind::Api, message)
    }

    /// Missing or wrong credentials (401).
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, Kind::Authentication, message)
    }

    /// Credentials that do not allow what was asked (403).
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, Kind::Permission, message)
    }

    /// The gateway is over its load limit right now (503 with `Retry-After`).
    pub fn overloaded(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, Kind::Overloaded, message)
    }

    /// Something that does not exist (404).
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, Kind::NotFound, message)
    }

    /// Names the offending request field.
    pub fn with_param(mut self, param: impl Into<String>) -> ApiError {
        self.param = Some(param.into());
        self
    }

    /// The JSON body in the shape a client of `flavor` expects.
    pub fn body(&self, flavor: Flavor) -> Value {
        let kind = self.kind.name(flavor);
        match flavor {
            Flavor::OpenAi => json!({
                "error": {
                    "message": self.message,
                    "type": kind,
                    "param": self.param,
                    "code": self.code,
                }
            }),
            Flavor::Anthropic => json!({
                "type": "error",
                "error": {"type": kind, "message": self.message},
            }),
        }
    }

    /// The response a client of `flavor` gets.
    pub fn render(&self, flavor: Flavor) -> Response {
        let body = self.body(flavor).to_string();
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

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.kind.name(Flavor::OpenAi),
            self.message
        )
    }
}

impl std::error::Error for ApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

/// A request refused by the tenant rule, with the status its cause calls for.
impl From<crate::tenancy::TenantError> for ApiError {
    fn from(err: crate::tenancy::TenantError) -> ApiError {
        use crate::tenancy::TenantError;
        let (status, kind) = match &err {
            TenantError::Malformed(_) => (StatusCode::BAD_REQUEST, Kind::InvalidRequest),
            TenantError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, Kind::Authentication),
            TenantError::Forbidden(_) => (StatusCode::FORBIDDEN, Kind::Permission),
        };
        ApiError::caused_by(status, kind, err)
    }
}

/// The gateway's own endpoints (admin API, session events) answer in OpenAI's shape.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.render(Flavor::OpenAi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_shape_has_message_type_param_and_code() {
        let body = ApiError::too_large(10).body(Flavor::OpenAi);
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
        let body = ApiError::timeout("slow").body(Flavor::Anthropic);
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "timeout_error");
        assert_eq!(body["error"]["message"], "slow");
    }

    #[test]
    fn the_cause_stays_the_source() {
        let cause = std::io::Error::other("disk gone");
        let error = ApiError::caused_by(StatusCode::INTERNAL_SERVER_ERROR, Kind::Api, cause);
        assert_eq!(error.message, "disk gone");
        let source = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("disk gone"));
    }
}
