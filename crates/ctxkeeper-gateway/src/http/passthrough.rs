//! Pass-through: the endpoints that manage nothing. `GET /v1/models` goes to the Anthropic
//! upstream for a client that speaks Anthropic, else to the OpenAI one;
//! `POST /v1/messages/count_tokens` goes to the Anthropic upstream (the client asks about the
//! request it would send, so nothing is managed). A model list that states windows teaches
//! them to the sessions ([`crate::sessions::Sessions::learn_model_list`]). The client's headers go as for a model call
//! ([`super::upstream::forward_headers`]); the answer comes back as the upstream sent it.

use axum::body::Body;
use axum::http::{HeaderMap, Request, Uri};
use axum::response::Response;

use super::RequestError;
use super::deliver;
use super::intake::read_body;
use super::upstream::{UpstreamError, forward_headers, join, response_headers, with_query};
use crate::Gateway;

/// Lists the models of the upstream the client speaks to.
pub(super) async fn models(
    gw: &Gateway,
    anthropic: bool,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, UpstreamError> {
    let path = uri.path();
    let rest = path.strip_prefix("/v1").unwrap_or(path);
    let url = if anthropic {
        join(&gw.config.anthropic_upstream, path)
    } else {
        join(&gw.config.upstream, rest)
    };
    let url = with_query(url, uri.query());
    let headers = forward_headers(headers);
    let response = gw.client.get(&url).headers(headers).send().await?;
    let status = response.status();
    let headers = response_headers(response.headers());
    let body = response.bytes().await?;
    // A list that states model windows (vLLM, OpenRouter, …) teaches the gateway the
    // windows of models its table does not know.
    if status.is_success()
        && let Ok(list) = serde_json::from_slice::<serde_json::Value>(&body)
    {
        let learned = gw.sessions.learn_model_list(&list);
        if learned > 0 {
            tracing::info!(
                models = learned,
                "learned model windows from the provider's model list"
            );
        }
    }
    Ok(deliver::whole(status, headers, body, None))
}

/// Counts a Messages request's tokens on the Anthropic upstream.
pub(super) async fn count_tokens(
    gw: &Gateway,
    req: Request<Body>,
) -> Result<Response, RequestError> {
    let (parts, body) = req.into_parts();
    let (bytes, _permit) = read_body(gw, body, &parts.headers, None, None).await?;
    let url = join(&gw.config.anthropic_upstream, "/v1/messages/count_tokens");
    let url = with_query(url, parts.uri.query());
    let sent = gw
        .client
        .post(&url)
        .headers(forward_headers(&parts.headers))
        .body(bytes)
        .send()
        .await
        .map_err(UpstreamError::from)?;
    Ok(whole(sent).await?)
}

/// The upstream's answer, read whole, as the client's response.
async fn whole(response: reqwest::Response) -> Result<Response, UpstreamError> {
    let status = response.status();
    let headers = response_headers(response.headers());
    let body = response.bytes().await?;
    Ok(deliver::whole(status, headers, body, None))
}
