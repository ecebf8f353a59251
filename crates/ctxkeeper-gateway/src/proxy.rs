//! The model endpoints: `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages`
//! and the `GET /v1/models` pass-through.
//!
//! Per request: read the body (bounded), parse it with the endpoint's [`Wire`], refuse what a
//! provider would refuse (malformed JSON, unknown roles, broken tool pairs) in the provider's
//! own error shape, find the session, bring its context up to the client's messages and
//! prepare ([`Sessions::step`]), forward, and read `usage` from the answer. When nothing was
//! compacted the client's own bytes are forwarded. A context-overflow answer
//! ([`overflow::classify`]) is recovered by compacting harder and retrying, within the
//! policy's bound, before anything reaches the client. Streams included: a non-2xx status
//! decides at once; a 2xx stream is held back until its first content event, because the
//! Responses API reports an overflow met after opening the stream as an `error` event
//! ([`StreamHead`]). Any other upstream answer is passed through with its status and body.
//!
//! The client's credentials (`Authorization`, `x-api-key`) and provider headers
//! (`anthropic-version`, `anthropic-beta`, `OpenAI-Organization`, …) go upstream untouched;
//! hop-by-hop headers, `content-length`, `accept-encoding` (the gateway reads the answer) and
//! the gateway's own `x-ctxkeeper-*` headers do not. No header is ever logged.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use ctxkeeper_core::formats::Wire;
use ctxkeeper_core::model::{CheckRules, Message, Request as WireRequest, check};
use ctxkeeper_core::overflow;
use ctxkeeper_store::SessionKey;
use futures_util::StreamExt;
use serde_json::Value;

use crate::Gateway;
use crate::compaction_items;
use crate::early::EarlyRequest;
use crate::error::{ApiError, Flavor};
use crate::identity;
use crate::limits::BodyPermit;
use crate::metrics::Metrics;
use crate::sessions::events::GatewayEvent;
use crate::sessions::{Incoming, Ticket};
use crate::streaming::{Opening, SseUsage, StreamHead, input_tokens};
use crate::summarize::UpstreamRoute;

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

    fn wire(self) -> Wire {
        match self {
            Endpoint::ChatCompletions => Wire::OpenAiChat,
            Endpoint::Responses => Wire::Responses,
            Endpoint::Messages => Wire::Anthropic,
        }
    }

    fn flavor(self) -> Flavor {
        match self {
            Endpoint::Messages => Flavor::Anthropic,
            _ => Flavor::OpenAi,
        }
    }

    fn upstream_url(self, gateway: &Gateway, query: Option<&str>) -> String {
        let config = &gateway.config;
        let mut url = match self {
            Endpoint::ChatCompletions => join(&config.upstream, "/chat/completions"),
            Endpoint::Responses => join(&config.upstream, "/responses"),
            Endpoint::Messages => join(&config.anthropic_upstream, "/v1/messages"),
        };
        if let Some(query) = query {
            url.push('?');
            url.push_str(query);
        }
        url
    }
}

fn join(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
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
    let mut upstream = Duration::ZERO;
    let response = match proxy(&gw, endpoint, req, &mut upstream).await {
        Ok(response) => response,
        Err(error) => {
            tracing::info!(endpoint = endpoint.name(), %error, "request refused");
            error.into_response()
        }
    };
    let status = response.status().as_u16();
    gw.metrics.request(endpoint.name(), status);
    gw.metrics
        .gateway_overhead(started.elapsed().saturating_sub(upstream));
    tracing::debug!(
        endpoint = endpoint.name(),
        status,
        total_us = started.elapsed().as_micros() as u64,
        upstream_us = upstream.as_micros() as u64,
        "request done"
    );
    response
}

/// Whether a request's `context_management` hands the context to the provider: an
/// Anthropic edit that clears tool uses or compacts (Claude Code sends
/// `clear_thinking_20251015` on every call, which leaves the conversation alone), or an OpenAI
/// Responses compaction setting (`compact_threshold`).
fn provider_manages_context(management: &Value) -> bool {
    let compacts = |item: &Value| {
        item.get("compact_threshold").is_some()
            || item
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|kind| !kind.starts_with("clear_thinking"))
    };
    match management {
        Value::Object(object) => match object.get("edits") {
            Some(Value::Array(edits)) => edits.iter().any(compacts),
            _ => object.contains_key("compact_threshold"),
        },
        Value::Array(items) => items.iter().any(compacts),
        _ => false,
    }
}

/// Above this share of the window used, a session keeps its last forwarded body for the
/// summary call (see [`crate::summarize`]): below the lowest trigger the economic rule
/// places (30 % of the window), and below the share a summary is prepared at.
const FORWARDED_KEPT_ABOVE_PCT: f64 = 20.0;

/// What the gateway reports on a managed answer.
#[derive(Debug, Clone)]
struct Report {
    session: String,
    budget_used_pct: f64,
    compacted: bool,
    input_tokens: u64,
}

impl Report {
    fn apply(&self, headers: &mut HeaderMap) {
        let pairs = [
            ("x-ctxkeeper-session", self.session.clone()),
            (
                "x-ctxkeeper-budget-used",
                format!("{:.2}", self.budget_used_pct),
            ),
            ("x-ctxkeeper-compacted", self.compacted.to_string()),
            ("x-ctxkeeper-input-tokens", self.input_tokens.to_string()),
        ];
        for (name, value) in pairs {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        }
    }
}

/// A managed request: its session and what is needed to emit it again after a recovery.
struct Managed {
    key: SessionKey,
    wire: Wire,
    incoming: Incoming,
    /// The request without its messages (model, tools, every other field).
    template: WireRequest,
    /// The session step this request forwards, committed once the upstream accepted it.
    ticket: Ticket,
}

async fn proxy(
    gw: &Arc<Gateway>,
    endpoint: Endpoint,
    req: Request<Body>,
    upstream_time: &mut Duration,
) -> Result<Response, ApiError> {
    let flavor = endpoint.flavor();
    let wire = endpoint.wire();
    let (parts, body) = req.into_parts();
    // A session named by a header may have resent the messages of its previous request:
    // those are not parsed again (`crate::resent`). The body's elements are found and hashed
    // while it arrives.
    let mut scan = resent_scan(gw, endpoint, &parts.headers);
    let headers = forward_headers(&parts.headers);
    let url = endpoint.upstream_url(gw, parts.uri.query());
    // A large body of a session answered here before most likely goes on as it came: its
    // upload starts now, its last byte held until that is decided (`crate::early`).
    let mut early = scan
        .as_ref()
        .and_then(|(key, _, _)| early_request(gw, key, &parts.headers, &headers, &url));
    let (mut bytes, _permit) = read_body(
        gw,
        body,
        &parts.headers,
        flavor,
        scan.as_mut().map(|(_, scanner, _)| scanner),
        early.as_mut(),
    )
    .await?;
    // The client's own bytes: only a request forwarding exactly these completes the upload.
    let client_bytes = bytes.clone();
    let mut resent = scan.and_then(|(key, scanner, grouping)| {
        crate::resent::Reading::start(&gw.resent, key, scanner, grouping)
    });
    let bytes_len = bytes.len();
    let skeleton = resent.as_ref().and_then(|reading| reading.skeleton(&bytes));
    let mut from_skeleton = skeleton.is_some();
    let mut value: Value = match skeleton {
        Some(value) => value,
        None => parse_json(&bytes, flavor)?,
    };
    // Responses server-side compaction, answered here when the upstream cannot
    // (`compaction_items`): the gateway's own items go upstream as the text they stand for,
    // and a trigger it answers never reaches the upstream.
    let gateway_compacts = endpoint == Endpoint::Responses
        && gw
            .config
            .responses_compaction
            .gateway_answers(&gw.config.upstream);
    let mut client_compaction = false;
    // The client's body rewritten before it goes upstream: not a record for the next request.
    let mut rewritten = false;
    if gateway_compacts {
        let mut expanded = compaction_items::expand_own_items(&mut value);
        client_compaction = compaction_items::take_trigger(&mut value);
        if from_skeleton && (expanded > 0 || client_compaction) {
            // The body sent on is rewritten from the whole request, not from its new part.
            resent = None;
            from_skeleton = false;
            value = parse_json(&bytes, flavor)?;
            expanded = compaction_items::expand_own_items(&mut value);
            client_compaction = compaction_items::take_trigger(&mut value);
        }
        if expanded > 0 || client_compaction {
            rewritten = true;
            bytes = Bytes::from(serde_json::to_vec(&value).unwrap_or_default());
        }
    }
    let stream = value.get("stream").and_then(Value::as_bool) == Some(true);
    // Responses continuing a stored response: the upstream holds the history, so there is no
    // context here to manage; forward as it is.
    let unmanaged = (endpoint == Endpoint::Responses
        && value
            .get("previous_response_id")
            .is_some_and(|v| !v.is_null()))
        // The client asked the provider to manage the context (Anthropic context editing and
        // compaction, OpenAI Responses server-side compaction): managing it here too would
        // compact one context twice and rewrite what the provider's compaction items stand
        // for. Forwarded untouched.
        || value
            .get("context_management")
            .is_some_and(provider_manages_context)
        // The provider compacts this context itself (Responses `compaction_trigger`).
        || (endpoint == Endpoint::Responses
            && !gateway_compacts
            && compaction_items::has_trigger(&value));
    let mut request = match parse_request(wire, flavor, value) {
        Ok(mut request) if from_skeleton => {
            let spliced = resent
                .as_mut()
                .and_then(|reading| reading.splice(&mut request.messages));
            match spliced {
                Some(reused) => {
                    Metrics::add(&gw.metrics.resent_messages_reused, reused as u64);
                    request
                }
                None => {
                    resent = None;
                    parse_request(wire, flavor, parse_json(&bytes, flavor)?)?
                }
            }
        }
        Ok(request) => request,
        // The full body gives the error its exact position.
        Err(_) if from_skeleton => {
            resent = None;
            parse_request(wire, flavor, parse_json(&bytes, flavor)?)?
        }
        Err(error) => return Err(error),
    };
    let repairs = gw
        .config
        .repair
        .then(|| crate::repair::repair_history(&mut request.messages))
        .flatten();
    let pairing = CheckRules {
        internal_markers: false,
        ..CheckRules::openai()
    };
    if let Some(violation) = check(&request.messages, &pairing)
        .into_iter()
        .find(|v| v.kind.is_tool_pairing())
    {
        return Err(ApiError::invalid_request(
            flavor,
            format!("invalid tool call pairing: {violation}"),
        )
        .with_param("messages"));
    }
    let bad_id = |e: ctxkeeper_store::StoreError| ApiError::invalid_request(flavor, e.to_string());
    let tenant = gw
        .config
        .tenants
        .resolve(&parts.headers)
        .map_err(|e| ApiError::tenant(flavor, e))?;
    let header_session = identity::session_header(&parts.headers).map_err(bad_id)?;
    let pin_latest_user = identity::pin_header(&parts.headers)
        .map_err(|message| ApiError::invalid_request(flavor, message))?;

    if unmanaged || request.messages.is_empty() {
        let report = header_session.map(|session| Report {
            session,
            budget_used_pct: 0.0,
            compacted: false,
            input_tokens: 0,
        });
        let early = EarlyRequest::taken_for(early, &bytes, &client_bytes);
        return forward(
            gw,
            flavor,
            &url,
            headers,
            bytes,
            early,
            stream,
            None,
            report,
            upstream_time,
        )
        .await;
    }

    let WireRequest {
        model,
        messages,
        tools,
        extra,
        hints,
    } = request;
    // The client's own session header, else the agent harness's, else the conversation's.
    let session = header_session
        .or_else(|| identity::harness_session(&parts.headers))
        .unwrap_or_else(|| identity::derived_session(model.as_deref(), &messages));
    let key = SessionKey::new(tenant, SessionKey::DEFAULT, SessionKey::DEFAULT, session)
        .map_err(bad_id)?;
    // Summaries written upstream go there as this caller, with this request's headers.
    let route = gw.sessions.summarizes_upstream().then(|| {
        Arc::new(UpstreamRoute {
            client: gw.client.clone(),
            url: url.clone(),
            headers: headers.clone(),
            wire,
            model: model.clone(),
            tools: tools.clone(),
            timeout: gw.config.summary_timeout,
        })
    });
    let hashes = match resent
        .as_mut()
        .and_then(|reading| reading.known_fingerprints())
    {
        Some(known) if repairs.is_none() => {
            let (lead, end) = (known.lead, known.lead + known.fingerprints.len());
            let mut hashes = gw
                .fingerprints
                .fingerprints(key.tenant(), &messages[..lead]);
            hashes.extend(known.fingerprints);
            hashes.extend(gw.fingerprints.fingerprints(key.tenant(), &messages[end..]));
            hashes
        }
        _ => gw.fingerprints.fingerprints(key.tenant(), &messages),
    };
    // The client's own bytes go upstream only when nothing was repaired or added to them.
    let forwards_verbatim = repairs.is_none() && gw.config.context_providers.is_empty();
    let incoming = Incoming::fingerprinted(model.clone(), messages, hashes, &tools)
        .with_requested_output(requested_output(&extra))
        .with_pin_latest_user(pin_latest_user)
        .with_route(route)
        .with_repairs(repairs)
        .with_forwards_verbatim(forwards_verbatim);
    let mut step = gw
        .sessions
        .begin(&key, &incoming, &tools)
        .await
        .map_err(|e| ApiError::internal(flavor, format!("session {key}: {e}")))?;
    let key = step.key.clone();
    let mut managed = Managed {
        key,
        wire,
        incoming,
        template: WireRequest {
            model,
            messages: Vec::new(),
            tools,
            extra,
            hints,
        },
        ticket: step.ticket,
    };
    let report = Report {
        session: managed.key.session().to_string(),
        budget_used_pct: step.prepared.budget_used_pct,
        compacted: step.prepared.compacted,
        input_tokens: step.prepared.input_tokens,
    };
    // Request-time context goes after the stable prefix (`[gateway] context_providers`).
    let added = crate::assembly::complete(
        &gw.config.context_providers,
        gw.sessions.memory(),
        &managed.key,
        &mut step.prepared,
    )
    .await;
    let body = if step.verbatim && !added && managed.incoming.repairs.is_none() {
        bytes
    } else {
        emit(&mut managed, step.prepared.messages)
    };
    if client_compaction {
        return answer_compaction(gw, &managed, body, stream, report, flavor).await;
    }
    // Kept (shared, not copied) for the next summary call's cached prefix once the context
    // nears its trigger; below that no compaction is near.
    if gw.sessions.summarizes_upstream() && report.budget_used_pct >= FORWARDED_KEPT_ABOVE_PCT {
        managed.incoming.forwarded = Some(body.clone());
    }
    let forwarded_as_sent = crate::early::same_buffer(&body, &client_bytes);
    let early = EarlyRequest::taken_for(early, &body, &client_bytes);
    let response = forward(
        gw,
        flavor,
        &url,
        headers,
        body,
        early,
        stream,
        Some(&mut managed),
        Some(report),
        upstream_time,
    )
    .await;
    // This request's messages are what the session's next request most likely resends.
    let mut freed = Vec::new();
    if let Some(reading) = resent
        && !rewritten
        && managed.incoming.repairs.is_none()
        && let Some(mut record) = reading.record(
            std::mem::take(&mut managed.incoming.messages),
            std::mem::take(&mut managed.incoming.hashes),
            bytes_len,
        )
    {
        record.forwarded_as_sent = forwarded_as_sent;
        freed = gw.resent.put(reading.key, record);
    }
    // Freeing a long history's messages takes a while: not on the way to the client.
    let freeing: usize = freed
        .iter()
        .map(|record| record.messages.len())
        .sum::<usize>()
        + managed.incoming.messages.len();
    if freeing >= FREE_APART_FROM {
        tokio::task::spawn_blocking(move || drop((managed, freed)));
    }
    response
}

/// The early upload of a request's body (`crate::early`), when the body is announced at
/// `[gateway] forward_early_from_bytes` or more (and within the body limit) and the session's
/// previous request was answered here and went upstream as its client sent it, so that this
/// one most likely does too (a session that compacted sends its managed context instead).
fn early_request(
    gw: &Gateway,
    key: &crate::resent::PrefixKey,
    client_headers: &HeaderMap,
    headers: &HeaderMap,
    url: &str,
) -> Option<EarlyRequest> {
    let from = gw.config.forward_early_from;
    let announced = client_headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())?;
    if from == 0
        || announced < from
        || announced > gw.config.body_limit
        || !gw.resent.continues_as_sent(key)
    {
        return None;
    }
    Some(EarlyRequest::open(
        &gw.client,
        url,
        headers.clone(),
        announced,
        Arc::clone(&gw.metrics),
    ))
}

/// The scanner that looks for a body's resent prefix while it arrives, with the key of the
/// session's kept record and how the wire's elements form messages: for a request whose
/// session a header names, on the endpoints that carry a history (the `messages` of Chat
/// Completions and Anthropic Messages, the `input` items of Responses), when the gateway
/// keeps prefixes at all.
fn resent_scan(
    gw: &Gateway,
    endpoint: Endpoint,
    headers: &HeaderMap,
) -> Option<(
    crate::resent::PrefixKey,
    crate::resent::ElementScanner,
    crate::resent::Grouping,
)> {
    use crate::resent::Grouping;
    let (field, grouping): (&[u8], Grouping) = match endpoint {
        Endpoint::ChatCompletions | Endpoint::Messages => (b"messages", Grouping::OnePerElement),
        Endpoint::Responses => (b"input", Grouping::ResponsesItems),
    };
    if gw.config.resent_prefix_bytes == 0 {
        return None;
    }
    let tenant = gw.config.tenants.resolve(headers).ok()?;
    let session = identity::session_header(headers)
        .ok()
        .flatten()
        .or_else(|| identity::harness_session(headers))?;
    let key = (tenant, session, endpoint.name());
    Some((key, crate::resent::ElementScanner::new(field), grouping))
}

fn parse_json(bytes: &[u8], flavor: Flavor) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid_request(flavor, format!("malformed JSON body: {e}")))
}

fn parse_request(wire: Wire, flavor: Flavor, value: Value) -> Result<WireRequest, ApiError> {
    wire.parse_request_owned(value).map_err(|e| {
        let param = match &e.position {
            ctxkeeper_core::Position::Path { path, .. } => {
                path.trim_start_matches("$.").to_string()
            }
            _ => String::new(),
        };
        let error = ApiError::invalid_request(flavor, format!("invalid request: {e}"));
        if param.is_empty() {
            error
        } else {
            error.with_param(param)
        }
    })
}

/// Requests with at least this many messages are freed on a blocking thread once answered.
const FREE_APART_FROM: usize = 256;

/// Emits the request with the managed `messages` in place of the client's, carrying the
/// client's current cache hints.
fn emit(managed: &mut Managed, mut messages: Vec<Message>) -> Bytes {
    identity::carry_cache_hints(
        &managed.incoming.messages,
        &managed.incoming.hashes,
        &mut messages,
    );
    let template = &mut managed.template;
    template.messages = messages;
    let value = managed.wire.emit_request(template);
    template.messages = Vec::new();
    // A Value always serializes.
    Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
}

/// The output budget a request asks for, in whichever field its API names it.
fn requested_output(extra: &serde_json::Map<String, Value>) -> Option<u64> {
    ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|field| extra.get(*field).and_then(Value::as_u64))
}

/// Reads the body, refusing more than the body limit (before reading, when the client
/// announced the length), more than the gateway may hold in flight (503), and a client that
/// takes longer than the body timeout to send it (408). The permit holds the body's bytes
/// against the in-flight cap until the request is done.
async fn read_body(
    gw: &Gateway,
    body: Body,
    headers: &HeaderMap,
    flavor: Flavor,
    mut scanner: Option<&mut crate::resent::ElementScanner>,
    mut early: Option<&mut EarlyRequest>,
) -> Result<(Bytes, BodyPermit), ApiError> {
    let limit = gw.config.body_limit;
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large(flavor, limit));
    }
    let overloaded = || {
        ApiError::overloaded(
            flavor,
            "the gateway is holding as many request bytes as it may (max_inflight_bytes); \
             retry shortly",
        )
    };
    let announced = announced.map(|n| n as usize);
    let mut permit = gw
        .inflight
        .admit(announced.unwrap_or(0))
        .ok_or_else(overloaded)?;
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buffer = Vec::with_capacity(announced.unwrap_or(8192));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::invalid_request(flavor, format!("could not read the request body: {e}"))
            })?;
            if buffer.len() + chunk.len() > limit {
                return Err(ApiError::too_large(flavor, limit));
            }
            let beyond = (buffer.len() + chunk.len()).saturating_sub(announced.unwrap_or(0));
            let already = buffer.len().saturating_sub(announced.unwrap_or(0));
            if !gw.inflight.grow(&mut permit, beyond - already) {
                return Err(overloaded());
            }
            buffer.extend_from_slice(&chunk);
            if let Some(early) = early.as_deref_mut() {
                early.feed(&chunk);
            }
            if let Some(scanner) = scanner.as_deref_mut() {
                scanner.feed(&buffer);
            }
        }
        Ok(Bytes::from(buffer))
    };
    match tokio::time::timeout(gw.config.body_timeout, read).await {
        Ok(bytes) => Ok((bytes?, permit)),
        Err(_) => {
            Metrics::add(&gw.metrics.client_timeouts, 1);
            Err(ApiError::new(
                flavor,
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                format!(
                    "the request body did not arrive within {} s (body_timeout_secs)",
                    gw.config.body_timeout.as_secs()
                ),
            ))
        }
    }
}

/// Headers that describe one connection, not the message, and never cross a proxy.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The client's headers as sent upstream.
fn forward_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let n = name.as_str();
        if is_hop_by_hop(name)
            || n == "host"
            || n == "content-length"
            || n == "accept-encoding"
            || n.starts_with("x-ctxkeeper-")
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    if !out.contains_key(header::CONTENT_TYPE) {
        out.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    out
}

/// The upstream's headers as returned to the client.
fn response_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len() + 4);
    for (name, value) in headers {
        if is_hop_by_hop(name) || name == header::CONTENT_LENGTH {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

fn upstream_failure(flavor: Flavor, err: &reqwest::Error) -> ApiError {
    if err.is_timeout() {
        ApiError::timeout(flavor, "the upstream did not answer in time")
    } else if err.is_connect() {
        ApiError::bad_gateway(flavor, "the upstream could not be reached")
    } else {
        ApiError::bad_gateway(flavor, format!("the upstream failed: {err}"))
    }
}

/// The most bytes of a stream's opening held back while waiting for its first content event.
/// Preambles are a few hundred bytes; past this the stream is released as it is.
const MAX_HELD: usize = 256 * 1024;

type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// An upstream answer, read far enough to know whether it failed.
enum Answer {
    /// A plain body, read whole.
    Whole {
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
    },
    /// A 2xx stream: the opening bytes held back, and the rest still to come. `error` holds
    /// the data of an error event that came before any content.
    Stream {
        status: StatusCode,
        headers: HeaderMap,
        held: Vec<Bytes>,
        rest: ByteStream,
        error: Option<String>,
    },
}

impl Answer {
    /// What to classify, and the status to classify it with, when the answer is an error.
    fn failure(&self) -> Option<(u16, String)> {
        match self {
            Answer::Whole { status, body, .. } if !status.is_success() => {
                Some((status.as_u16(), String::from_utf8_lossy(body).into_owned()))
            }
            // The status (200) says nothing: the stream reported the error in an event.
            Answer::Stream {
                error: Some(error), ..
            } => Some((0, error.clone())),
            _ => None,
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            Answer::Whole { status, .. } | Answer::Stream { status, .. } => *status,
        }
    }
}

/// Reads the upstream's answer: a streamed 2xx until its first content event or an error
/// event (nothing reaches the client meanwhile), anything else whole.
async fn read_answer(
    response: reqwest::Response,
    stream: bool,
    flavor: Flavor,
) -> Result<Answer, ApiError> {
    let status = response.status();
    let headers = response_headers(response.headers());
    if !(stream && status.is_success()) {
        let body = response
            .bytes()
            .await
            .map_err(|e| upstream_failure(flavor, &e))?;
        return Ok(Answer::Whole {
            status,
            headers,
            body,
        });
    }
    let mut rest: ByteStream = Box::pin(response.bytes_stream());
    let mut head = StreamHead::default();
    let mut held = Vec::new();
    let mut held_bytes = 0;
    let mut error = None;
    while let Some(chunk) = rest.next().await {
        // Nothing was sent to the client yet, so a broken stream is still a clean error.
        let chunk = chunk.map_err(|e| upstream_failure(flavor, &e))?;
        let decided = head.feed(&chunk);
        held_bytes += chunk.len();
        held.push(chunk);
        match decided {
            Some(Opening::Error(data)) => {
                error = Some(data);
                break;
            }
            Some(Opening::Content) => break,
            None if held_bytes > MAX_HELD => break,
            None => {}
        }
    }
    Ok(Answer::Stream {
        status,
        headers,
        held,
        rest,
        error,
    })
}

/// Sends the request upstream, recovers from context overflows, and builds the answer.
#[allow(clippy::too_many_arguments)]
async fn forward(
    gw: &Arc<Gateway>,
    flavor: Flavor,
    url: &str,
    headers: HeaderMap,
    mut body: Bytes,
    mut early: Option<EarlyRequest>,
    stream: bool,
    mut managed: Option<&mut Managed>,
    mut report: Option<Report>,
    upstream_time: &mut Duration,
) -> Result<Response, ApiError> {
    let mut attempt = 0u32;
    loop {
        let sent_at = Instant::now();
        let released = match early.take() {
            Some(early) => early.release().await,
            None => None,
        };
        let sent = match released {
            Some(Ok(response)) => Ok(response),
            Some(Err(err)) if err.is_connect() || err.is_timeout() => Err(err),
            // The early upload failed on its way (or never completed): the whole body is
            // here, so it goes again.
            _ => {
                gw.client
                    .post(url)
                    .headers(headers.clone())
                    .body(body.clone())
                    .send()
                    .await
            }
        };
        let answer = match sent {
            Ok(response) => read_answer(response, stream, flavor).await,
            Err(err) => Err(upstream_failure(flavor, &err)),
        };
        let elapsed = sent_at.elapsed();
        *upstream_time += elapsed;
        gw.metrics.upstream_latency(elapsed);
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => {
                if let Some(managed) = managed.as_deref() {
                    gw.sessions.abandon(&managed.key, managed.ticket).await;
                }
                return Err(error);
            }
        };
        let Some((status_code, failure)) = answer.failure() else {
            if let Some(managed) = managed.as_deref() {
                commit(gw, managed).await;
            }
            return Ok(deliver(gw, answer, managed.as_deref(), report.as_ref()).await);
        };
        if let Some(managed) = managed.as_deref_mut()
            && let Some(found) = overflow::classify(status_code, &failure)
        {
            attempt += 1;
            match gw
                .sessions
                .recover(
                    &managed.key,
                    &managed.incoming,
                    &managed.template.tools,
                    &found,
                    attempt,
                    &mut managed.ticket,
                )
                .await
            {
                Ok(mut prepared) => {
                    crate::assembly::complete(
                        &gw.config.context_providers,
                        gw.sessions.memory(),
                        &managed.key,
                        &mut prepared,
                    )
                    .await;
                    tracing::info!(
                        session = %managed.key,
                        attempt,
                        tokens = prepared.input_tokens,
                        "context overflow: compacted, retrying"
                    );
                    if let Some(report) = report.as_mut() {
                        report.compacted = true;
                        report.input_tokens = prepared.input_tokens;
                        report.budget_used_pct = prepared.budget_used_pct;
                    }
                    body = emit(managed, prepared.messages);
                    continue;
                }
                Err(err) => {
                    tracing::warn!(session = %managed.key, attempt, %err, "overflow recovery gave up");
                    gw.sessions.announce(
                        &managed.key,
                        &GatewayEvent::OverflowUnrecovered {
                            attempt,
                            error: err.to_string(),
                        },
                    );
                }
            }
        }
        if let Some(managed) = managed.as_deref() {
            // The model never answered this step: nothing of it is stored or logged.
            gw.sessions.abandon(&managed.key, managed.ticket).await;
            gw.sessions.announce(
                &managed.key,
                &GatewayEvent::UpstreamError {
                    status: answer.status().as_u16(),
                },
            );
        }
        // Any other error goes to the client exactly as the upstream sent it.
        return Ok(deliver(gw, answer, None, report.as_ref()).await);
    }
}

/// Commits the step of a request the upstream accepted. The model's answer is delivered
/// even when the store fails here: the client resends its history, so the next step
/// commits these messages too.
async fn commit(gw: &Gateway, managed: &Managed) {
    if let Err(err) = gw
        .sessions
        .commit(
            &managed.key,
            &managed.incoming,
            &managed.template.tools,
            managed.ticket,
        )
        .await
    {
        gw.metrics.commit_failed();
        tracing::warn!(session = %managed.key, %err, "could not commit the session step; the next request carries its messages");
    }
}

/// Answers a Responses `compaction_trigger` in the provider's shape: the session is compacted
/// (its summary written upstream on the request it would have forwarded, `body`) and the
/// answer holds exactly one compaction item standing for the history.
async fn answer_compaction(
    gw: &Arc<Gateway>,
    managed: &Managed,
    body: Bytes,
    stream: bool,
    mut report: Report,
    flavor: Flavor,
) -> Result<Response, ApiError> {
    let text = match gw
        .sessions
        .compact_for_client(&managed.key, managed.ticket, &managed.incoming, Some(body))
        .await
    {
        Ok(text) => text,
        Err(err) => {
            gw.sessions.abandon(&managed.key, managed.ticket).await;
            return Err(ApiError::internal(
                flavor,
                format!("session {}: could not compact: {err}", managed.key),
            ));
        }
    };
    commit(gw, managed).await;
    report.compacted = true;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let answer = compaction_items::CompactionAnswer {
        id: format!(
            "{:016x}",
            xxhash_rust::xxh3::xxh3_64(format!("{}/{}", managed.key, now.as_nanos()).as_bytes())
        ),
        model: managed.incoming.model.clone().unwrap_or_default(),
        output_tokens: text.len() as u64 / 4,
        text,
        input_tokens: report.input_tokens,
        created_at: now.as_secs(),
    };
    let mut response = if stream {
        let mut response = Response::new(Body::from(answer.events().concat()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response
    } else {
        axum::Json(answer.body()).into_response()
    };
    report.apply(response.headers_mut());
    Ok(response)
}

/// Builds the client's response from an upstream answer; for a managed session, the usage it
/// reports is fed back (at once for a plain body, at the end of a stream).
async fn deliver(
    gw: &Arc<Gateway>,
    answer: Answer,
    managed: Option<&Managed>,
    report: Option<&Report>,
) -> Response {
    match answer {
        Answer::Whole {
            status,
            headers,
            body,
        } => {
            if status.is_success()
                && let Some(managed) = managed
                && let Ok(value) = serde_json::from_slice::<Value>(&body)
                && let Some(tokens) = input_tokens(&value)
            {
                gw.sessions.observe_usage(&managed.key, tokens).await;
            }
            answer_response(status, headers, body, report)
        }
        Answer::Stream {
            status,
            headers,
            held,
            rest,
            ..
        } => {
            let key = managed.map(|m| m.key.clone());
            stream_answer(gw.clone(), status, headers, held, rest, key, report)
        }
    }
}

fn answer_response(
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    report: Option<&Report>,
) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    if let Some(report) = report {
        report.apply(response.headers_mut());
    }
    response
}

/// Streams the upstream's answer to the client unchanged (the held-back opening first, then
/// the rest as it arrives), reading its usage on the way.
fn stream_answer(
    gw: Arc<Gateway>,
    status: StatusCode,
    headers: HeaderMap,
    held: Vec<Bytes>,
    rest: ByteStream,
    key: Option<SessionKey>,
    report: Option<&Report>,
) -> Response {
    let upstream = futures_util::stream::iter(held.into_iter().map(Ok)).chain(rest);
    let upstream = Box::pin(upstream);
    let finish = key.map(|key| (gw, key));
    let body = futures_util::stream::unfold(
        (upstream, SseUsage::default(), finish),
        |(mut upstream, mut usage, mut finish)| async move {
            match upstream.next().await {
                Some(Ok(chunk)) => {
                    usage.feed(&chunk);
                    Some((Ok::<Bytes, io::Error>(chunk), (upstream, usage, finish)))
                }
                Some(Err(err)) => {
                    // The client sees the stream break off, as it would without the gateway.
                    finish = None;
                    Some((Err(io::Error::other(err)), (upstream, usage, finish)))
                }
                None => {
                    if let (Some((gw, key)), Some(tokens)) = (finish.take(), usage.input_tokens()) {
                        gw.sessions.observe_usage(&key, tokens).await;
                    }
                    None
                }
            }
        },
    );
    let mut out = Response::new(Body::from_stream(body));
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    if let Some(report) = report {
        report.apply(out.headers_mut());
    }
    out
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
    let path = req.uri().path();
    let rest = path.strip_prefix("/v1").unwrap_or(path);
    let mut url = if anthropic {
        join(&gw.config.anthropic_upstream, path)
    } else {
        join(&gw.config.upstream, rest)
    };
    if let Some(query) = req.uri().query() {
        url.push('?');
        url.push_str(query);
    }
    let headers = forward_headers(req.headers());
    let sent = gw.client.get(&url).headers(headers).send().await;
    let response = match sent {
        Ok(response) => {
            let status = response.status();
            let headers = response_headers(response.headers());
            match response.bytes().await {
                Ok(body) => answer_response(status, headers, body, None),
                Err(err) => upstream_failure(flavor, &err).into_response(),
            }
        }
        Err(err) => upstream_failure(flavor, &err).into_response(),
    };
    gw.metrics.upstream_latency(started.elapsed());
    gw.metrics.request("models", response.status().as_u16());
    response
}

/// `POST /v1/messages/count_tokens`: Anthropic's token counter, passed through unchanged
/// (nothing is managed: the client asks about the request it would send).
pub async fn count_tokens(State(gw): State<Arc<Gateway>>, req: Request<Body>) -> Response {
    let started = Instant::now();
    let flavor = Flavor::Anthropic;
    let (parts, body) = req.into_parts();
    let response = match read_body(&gw, body, &parts.headers, flavor, None, None).await {
        Ok((bytes, _permit)) => {
            let mut url = join(&gw.config.anthropic_upstream, "/v1/messages/count_tokens");
            if let Some(query) = parts.uri.query() {
                url.push('?');
                url.push_str(query);
            }
            let sent = gw
                .client
                .post(&url)
                .headers(forward_headers(&parts.headers))
                .body(bytes)
                .send()
                .await;
            match sent {
                Ok(response) => {
                    let status = response.status();
                    let headers = response_headers(response.headers());
                    match response.bytes().await {
                        Ok(body) => answer_response(status, headers, body, None),
                        Err(err) => upstream_failure(flavor, &err).into_response(),
                    }
                }
                Err(err) => upstream_failure(flavor, &err).into_response(),
            }
        }
        Err(error) => error.into_response(),
    };
    gw.metrics.upstream_latency(started.elapsed());
    gw.metrics
        .request("count_tokens", response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_compacting_context_management_hands_the_context_to_the_provider() {
        // What Claude Code sends on every call: thinking blocks only.
        let thinking =
            serde_json::json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]});
        assert!(!provider_manages_context(&thinking));
        let tools = serde_json::json!({"edits": [{"type": "clear_tool_uses_20250919"}]});
        assert!(provider_manages_context(&tools));
        let compact = serde_json::json!({"edits": [{"type": "compact_20260112"}]});
        assert!(provider_manages_context(&compact));
        let responses = serde_json::json!([{"type": "compaction", "compact_threshold": 200000}]);
        assert!(provider_manages_context(&responses));
        assert!(!provider_manages_context(&serde_json::json!(null)));
    }

    use super::*;

    #[test]
    fn credentials_and_provider_headers_go_upstream_but_not_hop_by_hop_ones() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer sk-1"),
            ("x-api-key", "sk-ant-1"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "tools-2024"),
            ("openai-organization", "org-1"),
            ("connection", "keep-alive"),
            ("content-length", "12"),
            ("host", "localhost"),
            ("x-ctxkeeper-session", "s1"),
            ("accept-encoding", "gzip"),
        ] {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let out = forward_headers(&headers);
        for kept in [
            "authorization",
            "x-api-key",
            "anthropic-version",
            "anthropic-beta",
            "openai-organization",
        ] {
            assert_eq!(out.get(kept), headers.get(kept), "{kept}");
        }
        for dropped in [
            "connection",
            "content-length",
            "host",
            "x-ctxkeeper-session",
            "accept-encoding",
        ] {
            assert!(!out.contains_key(dropped), "{dropped}");
        }
        assert_eq!(out.get("content-type").unwrap(), "application/json");
    }
}
