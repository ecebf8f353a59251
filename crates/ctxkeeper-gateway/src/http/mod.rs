//! The model endpoints, as a request walks through them. Each stage is a module, and
//! [`proxy`] (below) is the whole walk:
//!
//! 1. [`endpoint`]: the routes, and the one place an error is rendered in the caller's
//!    provider shape (OpenAI or Anthropic); everything below returns errors without a shape;
//! 2. [`intake`]: the body, read within the body limit, the in-flight byte cap and the body
//!    timeout; meanwhile a large body of a known session starts upstream
//!    ([`crate::early`]) and its elements are hashed for the resent prefix ([`crate::resent`]);
//! 3. [`interpret`]: the body parsed once (only its new part when the session's previous
//!    request is resent), the gateway's own Responses compaction items expanded, repaired
//!    when configured, refused when a provider would refuse it (malformed JSON, unknown roles,
//!    broken tool pairs), and sorted into *unmanaged* (the provider or the client manages the
//!    context: forwarded as it came) and *managed*;
//! 4. [`managed`]: tenant, session and fingerprints, the session step
//!    ([`crate::sessions::Sessions::begin`]), the body to send (the client's own bytes when
//!    nothing changed), overflow recovery, and the step's commit once the upstream accepted;
//! 5. [`upstream`]: one [`upstream::Upstream`] value (where the request goes, with which
//!    headers, whether it streams, its early upload) sends each attempt and reads the answer
//!    far enough to know whether it failed;
//! 6. [`deliver`]: the answer to the client (whole, or streamed as it arrives), with the
//!    usage it reports fed back to the session; a Responses compaction answered here;
//! 7. [`passthrough`]: `GET /v1/models` and `POST /v1/messages/count_tokens`, which manage
//!    nothing.
//!
//! The client's credentials (`Authorization`, `x-api-key`) and provider headers
//! (`anthropic-version`, `anthropic-beta`, `OpenAI-Organization`, …) go upstream untouched;
//! hop-by-hop headers, `content-length`, `accept-encoding` (the gateway reads the answer) and
//! the gateway's own `x-ctxkeeper-*` headers do not. No header is ever logged.

mod deliver;
pub mod endpoint;
mod intake;
mod interpret;
mod managed;
mod passthrough;
pub mod upstream;

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;

use crate::Gateway;
use crate::error::ApiError;
use deliver::Report;
pub use endpoint::Endpoint;
pub use intake::IntakeError;
pub use interpret::InterpretError;
pub use managed::ManagedError;
pub use upstream::{Upstream, UpstreamError};

/// Why a model request was answered by the gateway itself, by the stage that refused it.
/// Each keeps its cause ([`std::error::Error::source`]).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Intake(#[from] IntakeError),
    #[error(transparent)]
    Interpret(#[from] InterpretError),
    #[error(transparent)]
    Managed(#[from] ManagedError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

impl RequestError {
    /// What the client is told, before it takes the client's shape; the error stays its
    /// source.
    pub fn into_api(self) -> ApiError {
        match self {
            RequestError::Intake(error) => error.into_api(),
            RequestError::Interpret(error) => error.into_api(),
            RequestError::Managed(error) => error.into_api(),
            RequestError::Upstream(error) => error.into_api(),
        }
    }
}

/// One model request, from the client's body to the answer it gets.
pub(crate) async fn proxy(
    gw: &Arc<Gateway>,
    endpoint: Endpoint,
    req: Request<Body>,
    upstream: &mut Upstream,
) -> Result<Response, RequestError> {
    let (parts, body) = req.into_parts();
    let received = intake::receive(gw, endpoint, &parts.headers, body, upstream).await?;
    let request = interpret::interpret(gw, endpoint, &parts.headers, received)?;
    upstream.stream = request.stream;
    if let Some(trace) = upstream.trace.as_mut() {
        trace.model.clone_from(&request.request.model);
        trace.stream = request.stream;
        trace.conversation.clone_from(&request.header_session);
    }
    if request.managed() {
        return managed::run(gw, &parts.headers, request, upstream).await;
    }
    // Unmanaged: forwarded as it came, answered as the upstream answers.
    let report = request.header_session.clone().map(Report::unmanaged);
    let answer = upstream.send(gw, request.body.clone()).await?;
    let trace = upstream.trace.take();
    Ok(deliver::answer(gw, answer, None, report.as_ref(), trace).await)
}
