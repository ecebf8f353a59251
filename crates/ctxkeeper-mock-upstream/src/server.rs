//! The HTTP surface: the provider endpoints, the `/mock/*` control endpoints and the request
//! pipeline every provider endpoint runs (authenticate, parse, validate, count, check the
//! window, answer, record).

use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use ctxkeeper_core::formats::Wire;
use ctxkeeper_core::tokens::Encoding;
use serde_json::{Map, Value, json};

use crate::errors::{ApiError, Flavor};
use crate::reply::{self, Api, Reply, Usage};
use crate::state::{ConfigPatch, Counted, MockHandle, RecordedRequest, Shared};
use crate::wire;

/// Agent requests with long histories and inline images are large; the real APIs accept tens
/// of megabytes, so the mock must not refuse what they would take.
const BODY_LIMIT: usize = 256 * 1024 * 1024;

pub(crate) fn build(handle: MockHandle) -> Router {
    Router::new()
        .route("/v1/chat/completions", provider(Api::Chat))
        .route("/v1/responses", provider(Api::Responses))
        .route("/v1/messages", provider(Api::Anthropic))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/models", get(models))
        .route("/mock/requests", get(recorded))
        .route("/mock/reset", post(reset))
        .route("/mock/config", post(configure))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(handle)
}

/// The endpoint of one provider API: every request runs [`serve`].
fn provider(api: Api) -> MethodRouter<MockHandle> {
    post(
        move |State(handle): State<MockHandle>, uri: Uri, headers: HeaderMap, body: Bytes| async move {
            serve(api, &handle, &uri, &headers, body).await
        },
    )
}

/// What one provider request produced, for the answer and the recorder.
struct Outcome {
    response: Response,
    status: StatusCode,
    input_tokens: u64,
    cached_tokens: u64,
    /// The request was a summary instruction (answered after the summary delay).
    summary: bool,
}

impl Outcome {
    fn error(error: ApiError, number: u64, flavor: Flavor) -> Outcome {
        let request_id = format!("req_mock{number}");
        let error = error.with_request_id(&request_id);
        let status = error.status;
        Outcome {
            response: json_response(status, &error.body, flavor, &request_id),
            status,
            input_tokens: 0,
            cached_tokens: 0,
            summary: false,
        }
    }
}

async fn serve(
    api: Api,
    handle: &MockHandle,
    uri: &Uri,
    headers: &HeaderMap,
    bytes: Bytes,
) -> Response {
    let shared = &handle.shared;
    let number = shared.next_id();
    let parsed = serde_json::from_slice::<Value>(&bytes);
    let outcome = answer(api, shared, headers, parsed.as_ref(), number);
    let mut delay = shared.delay();
    if outcome.summary {
        delay += shared.summary_delay();
    }
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    tracing::debug!(
        path = uri.path(),
        status = outcome.status.as_u16(),
        input_tokens = outcome.input_tokens,
        "answered"
    );
    if shared.recording() {
        let body = match parsed {
            Ok(value) => value,
            Err(_) if bytes.is_empty() => Value::Null,
            Err(_) => Value::String(String::from_utf8_lossy(&bytes).into_owned()),
        };
        shared.record(RecordedRequest {
            method: Method::POST.to_string(),
            path: uri.path().to_owned(),
            headers: header_list(headers),
            body,
            status: outcome.status.as_u16(),
            input_tokens: outcome.input_tokens,
            cached_tokens: outcome.cached_tokens,
        });
    }
    outcome.response
}

fn answer(
    api: Api,
    shared: &Shared,
    headers: &HeaderMap,
    parsed: Result<&Value, &serde_json::Error>,
    number: u64,
) -> Outcome {
    let flavor = flavor_of(api);
    let Some(key) = api_key(headers, flavor) else {
        return Outcome::error(ApiError::unauthorized(flavor), number, flavor);
    };
    let (value, body) = match parsed {
        Ok(value @ Value::Object(body)) => (value, body),
        Ok(_) => {
            return Outcome::error(
                ApiError::malformed_json(flavor, "expected an object"),
                number,
                flavor,
            );
        }
        Err(error) => {
            return Outcome::error(
                ApiError::malformed_json(flavor, &error.to_string()),
                number,
                flavor,
            );
        }
    };
    let valid = match api {
        Api::Chat => crate::validate::chat(body),
        Api::Responses => crate::validate::responses(body, shared.native_compaction()),
        Api::Anthropic => crate::validate::anthropic(body, inline_system_allowed(headers)),
    };
    if let Err(error) = valid {
        return Outcome::error(error, number, flavor);
    }
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let counted = count(api, shared, value, model, key);
    let stated = output_budget(api, body);
    let window = shared.window();
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let progress_key = format!("{api:?}/{key}");
    // A summary request is answered as a model that follows it, never as a script step.
    let summarizing = reply::summary_answer(api, body).is_some();
    if summarizing && let Some(status) = shared.summary_status() {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut outcome = Outcome::error(ApiError::failure(flavor, status), number, flavor);
        outcome.summary = true;
        return outcome;
    }
    // So is an agent's own compaction prompt (Codex's checkpoint, Claude Code's compact).
    let client_compacting = reply::client_summary(api, body).is_some();
    let scripted = shared
        .script()
        .filter(|_| !summarizing && !client_compacting)
        .and_then(|script| {
            crate::script::answer(&script, api, body, shared.script_progress(&progress_key))
        });
    let (answer, scripted_step) = match scripted {
        _ if api == Api::Responses && crate::validate::asks_compaction(body) => (
            reply::Answer::Compaction {
                encrypted_content: format!("mock-compaction-{number}-{}", counted.input),
            },
            None,
        ),
        Some((answer, step)) => (answer, Some(step)),
        None => (reply::answer(api, body), None),
    };
    let output = reply::output_tokens(&answer);
    let reply = Reply {
        usage: Usage {
            input: counted.input,
            cached: counted.cached,
            output,
        },
        answer,
        number,
        model: model.to_owned(),
        created,
    };
    let request_id = format!("req_mock{number}");

    if counted.input + stated.unwrap_or_else(|| shared.max_output_tokens()) > window {
        let error = overflow(api, window, counted.input, stated);
        if api == Api::Responses && stream {
            let events = wire::responses::overflow_events(&reply, body, &error.body["error"]);
            return Outcome {
                response: sse_response(events, &request_id, flavor),
                status: StatusCode::OK,
                input_tokens: counted.input,
                cached_tokens: 0,
                summary: summarizing,
            };
        }
        let mut outcome = Outcome::error(error, number, flavor);
        outcome.input_tokens = counted.input;
        outcome.summary = summarizing;
        return outcome;
    }
    shared.remember(&counted.prefixes);
    if let Some(step) = scripted_step {
        shared.advance_script(&progress_key, step);
    }

    let response = match (api, stream) {
        (Api::Chat, false) => json_response(
            StatusCode::OK,
            &wire::chat::body(&reply),
            flavor,
            &request_id,
        ),
        (Api::Chat, true) => {
            let include_usage = body
                .get("stream_options")
                .and_then(|options| options.get("include_usage"))
                .and_then(Value::as_bool)
                == Some(true);
            sse_response(
                wire::chat::events(&reply, include_usage),
                &request_id,
                flavor,
            )
        }
        (Api::Responses, false) => json_response(
            StatusCode::OK,
            &wire::responses::body(&reply, body),
            flavor,
            &request_id,
        ),
        (Api::Responses, true) => {
            sse_response(wire::responses::events(&reply, body), &request_id, flavor)
        }
        (Api::Anthropic, false) => json_response(
            StatusCode::OK,
            &wire::anthropic::body(&reply),
            flavor,
            &request_id,
        ),
        (Api::Anthropic, true) => {
            sse_response(wire::anthropic::events(&reply), &request_id, flavor)
        }
    };
    Outcome {
        response,
        status: StatusCode::OK,
        input_tokens: counted.input,
        cached_tokens: counted.cached,
        summary: summarizing,
    }
}

/// Anthropic accepts `system` messages inside `messages` under the beta Claude Code sends with
/// its default model (`anthropic-beta: …,mid-conversation-system-2026-04-07,…`).
fn inline_system_allowed(headers: &HeaderMap) -> bool {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|beta| beta.trim().starts_with("mid-conversation-system"))
}

fn flavor_of(api: Api) -> Flavor {
    match api {
        Api::Chat | Api::Responses => Flavor::OpenAi,
        Api::Anthropic => Flavor::Anthropic,
    }
}

/// The caller's key: `Authorization: Bearer …` for OpenAI; `x-api-key` (or a bearer token) for
/// Anthropic. Any non-empty key is accepted.
fn api_key(headers: &HeaderMap, flavor: Flavor) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    let key = match flavor {
        Flavor::OpenAi => bearer,
        Flavor::Anthropic => headers
            .get("x-api-key")
            .and_then(|value| value.to_str().ok())
            .or(bearer),
    };
    key.filter(|key| !key.is_empty())
}

/// Counts the request's input tokens with ctxkeeper-core's model profiles and runs the cache
/// simulation. A body the core adapters cannot read is counted as o200k tokens of its JSON.
fn count(api: Api, shared: &Shared, body: &Value, model: &str, key: &str) -> Counted {
    let wire = match api {
        Api::Chat => Wire::OpenAiChat,
        Api::Responses => Wire::Responses,
        Api::Anthropic => Wire::Anthropic,
    };
    match wire.parse_request(body) {
        Ok(request) => shared.count(&request, &shared.token_model(model), key),
        Err(_) => Counted {
            input: u64::from(Encoding::O200kBase.count(&body.to_string())),
            ..Counted::default()
        },
    }
}

/// The output budget the request states (`max_completion_tokens`/`max_tokens`,
/// `max_output_tokens`, Anthropic's required `max_tokens`).
fn output_budget(api: Api, body: &Map<String, Value>) -> Option<u64> {
    let field = |name: &str| body.get(name).and_then(Value::as_u64);
    match api {
        Api::Chat => field("max_completion_tokens").or_else(|| field("max_tokens")),
        Api::Responses => field("max_output_tokens"),
        Api::Anthropic => field("max_tokens"),
    }
}

/// The provider's context-overflow answer, worded as each real API words it.
fn overflow(api: Api, window: u64, input: u64, stated: Option<u64>) -> ApiError {
    match (api, stated) {
        (Api::Chat, Some(output)) => ApiError::openai_400(
            format!(
                "This model's maximum context length is {window} tokens. However, you requested {} \
                 tokens ({input} in the messages, {output} in the completion). Please reduce the \
                 length of the messages or completion.",
                input + output
            ),
            Some("messages"),
            Some("context_length_exceeded"),
        ),
        (Api::Chat, None) => ApiError::openai_400(
            format!(
                "This model's maximum context length is {window} tokens. However, your messages \
                 resulted in {input} tokens. Please reduce the length of the messages."
            ),
            Some("messages"),
            Some("context_length_exceeded"),
        ),
        (Api::Responses, _) => ApiError::openai_400(
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
            Some("input"),
            Some("context_length_exceeded"),
        ),
        // Anthropic requires `max_tokens`, so a stated output budget is always there.
        (Api::Anthropic, Some(output)) if input <= window => ApiError::anthropic_400(format!(
            "input length and `max_tokens` exceed context limit: {input} + {output} > {window}, \
             decrease input length or `max_tokens` and try again"
        )),
        (Api::Anthropic, _) => ApiError::anthropic_400(format!(
            "prompt is too long: {input} tokens > {window} maximum"
        )),
    }
}

fn json_response(status: StatusCode, body: &Value, flavor: Flavor, request_id: &str) -> Response {
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    add_request_id(&mut response, flavor, request_id);
    response
}

fn sse_response(events: Vec<Bytes>, request_id: &str, flavor: Flavor) -> Response {
    // One body chunk per event, so clients meet real chunk boundaries.
    let stream =
        futures_util::stream::iter(events.into_iter().map(Ok::<_, std::convert::Infallible>));
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    add_request_id(&mut response, flavor, request_id);
    response
}

fn add_request_id(response: &mut Response, flavor: Flavor, request_id: &str) {
    let name = match flavor {
        Flavor::OpenAi => "x-request-id",
        Flavor::Anthropic => "request-id",
    };
    if let Ok(value) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert(name, value);
    }
}

fn header_list(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// Anthropic's SDK sends `anthropic-version` (and usually `x-api-key`); anything else is
/// answered like OpenAI.
fn flavor_of_headers(headers: &HeaderMap) -> Flavor {
    if headers.contains_key("anthropic-version") || headers.contains_key("x-api-key") {
        Flavor::Anthropic
    } else {
        Flavor::OpenAi
    }
}

/// `GET /v1/models`, in the list shape of the API the caller speaks.
async fn models(State(handle): State<MockHandle>, headers: HeaderMap) -> Response {
    let flavor = flavor_of_headers(&headers);
    let number = handle.shared.next_id();
    if api_key(&headers, flavor).is_none() {
        return Outcome::error(ApiError::unauthorized(flavor), number, flavor).response;
    }
    let request_id = format!("req_mock{number}");
    let body = match flavor {
        Flavor::OpenAi => {
            let listed = handle.shared.list_windows();
            let ids: &[&str] = if listed {
                &[
                    "gpt-4o",
                    "gpt-4o-mini",
                    "gpt-4.1",
                    "gpt-5",
                    "o3",
                    "local-model",
                ]
            } else {
                &["gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-5", "o3"]
            };
            let window = handle.shared.window();
            let data: Vec<Value> = ids
                .iter()
                .map(|id| {
                    let mut model = json!({"id": id, "object": "model", "created": 1_715_367_049, "owned_by": "system"});
                    if listed {
                        model["max_model_len"] = json!(window);
                    }
                    model
                })
                .collect();
            json!({"object": "list", "data": data})
        }
        Flavor::Anthropic => {
            let ids = ["claude-sonnet-4-6", "claude-opus-4-6", "claude-haiku-4-5"];
            let data: Vec<Value> = ids
                .iter()
                .map(|id| json!({"type": "model", "id": id, "display_name": id, "created_at": "2025-01-01T00:00:00Z"}))
                .collect();
            json!({"data": data, "has_more": false, "first_id": ids[0], "last_id": ids[ids.len() - 1]})
        }
    };
    json_response(StatusCode::OK, &body, flavor, &request_id)
}

/// `POST /v1/messages/count_tokens`: the input tokens the mock would count for a Messages
/// request (`max_tokens` is not required here, as in the real API).
async fn count_tokens(
    State(handle): State<MockHandle>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let shared = &handle.shared;
    let number = shared.next_id();
    let flavor = Flavor::Anthropic;
    let Some(key) = api_key(&headers, flavor) else {
        return Outcome::error(ApiError::unauthorized(flavor), number, flavor).response;
    };
    let mut body = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(body)) => body,
        Ok(_) => {
            return Outcome::error(
                ApiError::malformed_json(flavor, "expected an object"),
                number,
                flavor,
            )
            .response;
        }
        Err(error) => {
            return Outcome::error(
                ApiError::malformed_json(flavor, &error.to_string()),
                number,
                flavor,
            )
            .response;
        }
    };
    body.entry("max_tokens").or_insert(json!(1));
    if let Err(error) = crate::validate::anthropic(&body, inline_system_allowed(&headers)) {
        return Outcome::error(error, number, flavor).response;
    }
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    // Counting must not warm the simulated cache, so the prefixes are not remembered.
    let counted = count(Api::Anthropic, shared, &Value::Object(body), &model, key);
    json_response(
        StatusCode::OK,
        &json!({"input_tokens": counted.input}),
        flavor,
        &format!("req_mock{number}"),
    )
}

async fn not_found(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let flavor = flavor_of_headers(&headers);
    let error = ApiError::not_found(flavor, method.as_str(), uri.path());
    json_response(error.status, &error.body, flavor, "req_mock0")
}

async fn recorded(State(handle): State<MockHandle>) -> Response {
    axum::Json(handle.requests()).into_response()
}

async fn reset(State(handle): State<MockHandle>) -> Response {
    handle.reset();
    axum::Json(json!({"reset": true})).into_response()
}

async fn configure(State(handle): State<MockHandle>, bytes: Bytes) -> Response {
    match serde_json::from_slice::<ConfigPatch>(&bytes) {
        Ok(patch) => {
            handle.apply(&patch);
            let shared = &handle.shared;
            axum::Json(json!({
                "window": shared.window(),
                "delay_ms": u64::try_from(shared.delay().as_millis()).unwrap_or(u64::MAX),
                "record": shared.recording(),
                "max_output_tokens": shared.max_output_tokens(),
                "summary_delay_ms": u64::try_from(shared.summary_delay().as_millis()).unwrap_or(u64::MAX),
                "native_compaction": shared.native_compaction(),
                "summary_status": shared.summary_status(),
                "script": shared.script(),
            }))
            .into_response()
        }
        Err(error) => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": format!("invalid mock config: {error}; expected {{\"window\": N, \"delay_ms\": N, \"record\": bool, \"max_output_tokens\": N, \"summary_delay_ms\": N, \"native_compaction\": bool, \"summary_status\": N, \"script\": {{\"steps\": N, \"output_bytes\": N}}}}")})),
        )
            .into_response(),
    }
}
