//! The model routes, and the one place an error of a model call is rendered in the caller's
//! provider shape ([`Flavor`]): OpenAI's for Chat Completions, Responses and an OpenAI
//! client's model list, Anthropic's for Messages, token counting and an Anthropic client's
//! model list. Every stage below returns errors without a shape ([`RequestError`],
//! [`UpstreamError`]); they are rendered here, once, and counted in the metrics with the
//! request.
//!
//! | route | |
//! | --- | --- |
//! | `POST /v1/chat/completions` | managed, OpenAI Chat Completions |
//! | `POST /v1/responses` | managed, OpenAI Responses |
//! | `POST /v1/messages` | managed, Anthropic Messages |
//! | `POST /v1/messages/count_tokens` | passed through ([`super::passthrough`]) |
//! | `GET /v1/models`, `GET /v1/models/{id}` | passed through |

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::Request;
use axum::response::Response;
use axum::routing::{get, post};
use ctxkeeper_core::formats::Wire;

use super::upstream::{Upstream, UpstreamError};
use super::{RequestError, passthrough, proxy};
use crate::Gateway;
use crate::error::Flavor;

/// The model endpoints the gateway manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions,
    Responses,
    Messages,
}

impl Endpoint {
    /// The metrics label.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat_completions",
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
        }
    }

    /// The wire format of the endpoint's requests.
    pub fn wire(self) -> Wire {
        match self {
            Endpoint::ChatCompletions => Wire::OpenAiChat,
            Endpoint::Responses => Wire::Responses,
            Endpoint::Messages => Wire::Anthropic,
        }
    }

    /// The error shape the endpoint's clients expect.
    fn flavor(self) -> Flavor {
        match self {
            Endpoint::Messages => Flavor::Anthropic,
            _ => Flavor::OpenAi,
        }
    }
}

/// The model routes.
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(models))
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(State(gw): State<Arc<Gateway>>, req: Request<Body>) -> Response {
    handle(gw, Endpoint::ChatCompletions, req).await
}

/// `POST /v1/responses`.
pub async fn responses(State(gw): State<Arc<Gateway>>, req: Request<Body>) -> Response {
    handle(gw, Endpoint::Responses, req).await
}

/// `POST /v1/messages`.
pub async fn messages(State(gw): State<Arc<Gateway>>, req: Request<Body>) -> Response {
    handle(gw, Endpoint::Messages, req).await
}

/// Runs one request and records its metrics.
async fn handle(gw: Arc<Gateway>, endpoint: Endpoint, req: Request<Body>) -> Response {
    let started = Instant::now();
    let mut upstream = Upstream::new(&gw, endpoint, req.uri().query(), req.headers());
    let response = match proxy(&gw, endpoint, req, &mut upstream).await {
        Ok(response) => response,
        Err(error) => {
            tracing::info!(endpoint = endpoint.name(), %error, "request refused");
            render(endpoint.flavor(), error)
        }
    };
    let status = response.status().as_u16();
    gw.metrics.request(endpoint.name(), status);
    gw.metrics
        .gateway_overhead(started.elapsed().saturating_sub(upstream.spent));
    tracing::debug!(
        endpoint = endpoint.name(),
        status,
        total_us = started.elapsed().as_micros() as u64,
        upstream_us = upstream.spent.as_micros() as u64,
        "request done"
    );
    response
}

/// An error of a model call, in the shape its client expects.
fn render(flavor: Flavor, error: RequestError) -> Response {
    error.into_api().render(flavor)
}

/// `GET /v1/models` and `GET /v1/models/{id}`: passed through to the Anthropic upstream when
/// the client speaks Anthropic (`x-api-key` or `anthropic-version`), else to the OpenAI one.
pub async fn models(State(gw): State<Arc<Gateway>>, req: Request<Body>) -> Response {
    let started = Instant::now();
    let anthropic =
        req.headers().contains_key("anthropic-version") || req.headers().contains_key("x-api-key");
    let flavor = if anthropic {
        Flavor::Anthropic
    } else {
        Flavor::OpenAi
    };
    let (parts, _) = req.into_parts();
    let response = passthrough::models(&gw, anthropic, &parts.uri, &parts.headers)
        .await
        .unwrap_or_else(|error| render_upstream(flavor, error));
    gw.metrics.upstream_latency(started.elapsed());
    gw.metrics.request("models", response.status().as_u16());
    response
}

/// `POST /v1/messages/count_tokens`: Anthropic's token counter, passed through unchanged
/// (nothing is managed: the client asks about the request it would send).
pub async fn count_tokens(State(gw): State<Arc<Gateway>>, req: Request<Body>) -> Response {
    let started = Instant::now();
    let response = match passthrough::count_tokens(&gw, req).await {
        Ok(response) => response,
        Err(error) => render(Flavor::Anthropic, error),
    };
    gw.metrics.upstream_latency(started.elapsed());
    gw.metrics
        .request("count_tokens", response.status().as_u16());
    response
}

fn render_upstream(flavor: Flavor, error: UpstreamError) -> Response {
    render(flavor, RequestError::Upstream(error))
}
