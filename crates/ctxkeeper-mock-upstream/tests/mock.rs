//! The mock over real HTTP: overflow errors that ctxkeeper-core recognises, the providers'
//! 400s and 401s, the event order of every stream, the simulated prompt cache and the control
//! endpoints.

use ctxkeeper_core::overflow::{Provider, classify};
use ctxkeeper_mock_upstream::{MockConfig, MockServer, spawn};
use serde_json::{Value, json};

/// A mock and a client for it.
struct Mock {
    server: MockServer,
    client: reqwest::Client,
}

/// A mock with a small window and a client for it.
async fn mock(window: u64) -> Mock {
    mock_with(MockConfig {
        window,
        ..MockConfig::default()
    })
    .await
}

/// A mock with `config` and a client for it.
async fn mock_with(config: MockConfig) -> Mock {
    let server = spawn(config).await.expect("the mock binds a local port");
    Mock {
        server,
        client: reqwest::Client::new(),
    }
}

/// The status the mock answers `request` with.
async fn status_of(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.expect("answer").status().as_u16()
}

/// The JSON the mock answers `request` with.
async fn json_answer(request: reqwest::RequestBuilder) -> Value {
    request
        .send()
        .await
        .expect("answer")
        .json()
        .await
        .expect("json")
}

#[derive(Debug, Clone, Copy)]
enum Api {
    Chat,
    Responses,
    Anthropic,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Responses => "/v1/responses",
            Api::Anthropic => "/v1/messages",
        }
    }
}

impl Mock {
    /// Posts `body` with a key (`None`: without one) and returns the status and the raw body.
    async fn post(&self, api: Api, key: Option<&str>, body: &Value) -> (u16, String) {
        let url = format!("http://{}{}", self.server.addr(), api.path());
        let mut request = self.client.post(url).json(body);
        if let Some(key) = key {
            request = match api {
                Api::Chat | Api::Responses => request.bearer_auth(key),
                Api::Anthropic => request
                    .header("x-api-key", key)
                    .header("anthropic-version", "2023-06-01"),
            };
        }
        let response = request.send().await.expect("the mock answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("a body"))
    }

    /// Posts `body` with a key and returns the status and the raw body.
    async fn keyed(&self, api: Api, body: &Value) -> (u16, String) {
        self.post(api, Some("k"), body).await
    }

    /// Posts `body` with a key, checks that the answer has `status`, and returns its raw body.
    async fn answered(&self, api: Api, body: &Value, status: u16) -> String {
        let (answered, text) = self.keyed(api, body).await;
        assert_eq!(answered, status, "{text}");
        text
    }
}

fn parse(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|error| panic!("not JSON ({error}): {body}"))
}

/// The `(event name, data)` pairs of an SSE body (`None` when a block has no `event:` line).
fn sse(body: &str) -> Vec<(Option<String>, String)> {
    body.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = Some(value.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data.push_str(value);
                }
            }
            (name, data)
        })
        .collect()
}

fn long_text(words: usize) -> String {
    "lorem ipsum dolor ".repeat(words / 3 + 1)
}

fn chat_body(text: &str) -> Value {
    json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]})
}

fn anthropic_body(text: &str, max_tokens: u64) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}]})
}

/// `body` asking for a streamed answer.
fn streaming(mut body: Value) -> Value {
    body["stream"] = json!(true);
    body
}

fn responses_body(text: &str) -> Value {
    json!({"model": "gpt-4o", "input": [{"role": "user", "content": text}]})
}

/// Checks that the answer is classified as `provider`'s overflow stating the window and the
/// tokens requested.
fn assert_overflow_of(status: u16, body: &str, provider: Provider, (limit, requested): (u64, u64)) {
    let overflow = classify(status, body).expect("classified as an overflow");
    assert_eq!(overflow.provider, provider);
    assert_eq!(overflow.limit, Some(limit));
    assert_eq!(overflow.requested, Some(requested));
}

// ---- overflow ----------------------------------------------------------------------------

#[tokio::test]
async fn chat_overflow_is_classified_with_the_limit_and_the_input() {
    let mock = mock(512).await;
    let (status, body) = mock.keyed(Api::Chat, &chat_body(&long_text(2000))).await;
    assert_eq!(status, 400);
    let error = parse(&body);
    assert_eq!(error["error"]["code"], "context_length_exceeded");
    assert_eq!(error["error"]["param"], "messages");
    let counted = mock.server.requests()[0].input_tokens;
    assert_eq!(
        error["error"]["message"],
        format!(
            "This model's maximum context length is 512 tokens. However, your messages resulted in {counted} tokens. \
             Please reduce the length of the messages."
        )
    );
    assert_overflow_of(status, &body, Provider::OpenAi, (512, counted));
}

#[tokio::test]
async fn chat_overflow_with_a_stated_output_budget_names_both_parts() {
    let mock = mock(1000).await;
    let mut body = chat_body("short question");
    body["max_completion_tokens"] = json!(995);
    let (status, answer) = mock.keyed(Api::Chat, &body).await;
    assert_eq!(status, 400, "{answer}");
    let overflow = classify(status, &answer).expect("an overflow");
    let input = mock.server.requests()[0].input_tokens;
    assert_eq!(overflow.limit, Some(1000));
    assert_eq!(overflow.input, Some(input));
    assert_eq!(overflow.output, Some(995));
    assert_eq!(overflow.max_input_tokens(), Some(5));
}

#[tokio::test]
async fn anthropic_overflow_is_classified_with_the_limit() {
    let mock = mock(512).await;
    let (status, body) = mock
        .keyed(Api::Anthropic, &anthropic_body(&long_text(2000), 100))
        .await;
    assert_eq!(status, 400);
    let counted = mock.server.requests()[0].input_tokens;
    let error = parse(&body);
    assert_eq!(error["type"], "error");
    assert_eq!(
        error["error"]["message"],
        format!("prompt is too long: {counted} tokens > 512 maximum")
    );
    assert_overflow_of(status, &body, Provider::Anthropic, (512, counted));
}

#[tokio::test]
async fn anthropic_input_plus_max_tokens_over_the_window_names_both() {
    let mock = mock(512).await;
    let (status, body) = mock
        .keyed(Api::Anthropic, &anthropic_body("hello", 510))
        .await;
    assert_eq!(status, 400, "{body}");
    let input = mock.server.requests()[0].input_tokens;
    let overflow = classify(status, &body).expect("an overflow");
    assert_eq!(
        (overflow.limit, overflow.input, overflow.output),
        (Some(512), Some(input), Some(510))
    );
}

#[tokio::test]
async fn responses_overflow_is_a_400_and_a_stream_error_event() {
    let mock = mock(512).await;
    let (status, body) = mock
        .keyed(Api::Responses, &responses_body(&long_text(2000)))
        .await;
    assert_eq!(status, 400);
    assert_eq!(parse(&body)["error"]["code"], "context_length_exceeded");
    let overflow = classify(status, &body).expect("an overflow");
    assert_eq!(overflow.provider, Provider::OpenAi);
    // The real Responses API states no numbers; the window is known from the model instead.
    assert_eq!(overflow.limit, None);

    let streamed = streaming(responses_body(&long_text(2000)));
    let (status, body) = mock.keyed(Api::Responses, &streamed).await;
    assert_eq!(
        status, 200,
        "the stream is already open when the overflow is found"
    );
    let events = sse(&body);
    let names: Vec<_> = events
        .iter()
        .map(|(name, _)| name.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(names, ["response.created", "response.in_progress", "error"]);
    let error = &events[2].1;
    assert_eq!(parse(error)["sequence_number"], 2);
    assert!(
        classify(0, error).is_some(),
        "an in-stream error event is an overflow too: {error}"
    );
}

#[tokio::test]
async fn fitting_requests_pass_and_set_window_moves_the_limit() {
    let mock = mock(128_000).await;
    let body = chat_body(&long_text(600));
    assert_eq!(mock.keyed(Api::Chat, &body).await.0, 200);
    mock.server.set_window(100);
    assert_eq!(mock.keyed(Api::Chat, &body).await.0, 400);
    mock.server.set_window(100_000);
    assert_eq!(mock.keyed(Api::Chat, &body).await.0, 200);
}

// ---- validation and authentication -------------------------------------------------------

#[tokio::test]
async fn openai_tool_pairing_errors_are_the_real_ones() {
    let mock = mock(128_000).await;
    let unanswered = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_sVab", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "user", "content": "and?"}]});
    let body = mock.answered(Api::Chat, &unanswered, 400).await;
    let error = parse(&body);
    assert_eq!(
        error["error"]["message"],
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each \
         'tool_call_id'. The following tool_call_ids did not have response messages: call_sVab"
    );
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(
        classify(400, &body).is_none(),
        "a pairing error is not an overflow"
    );

    let orphan = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_1", "content": "out"}]});
    let body = mock.answered(Api::Chat, &orphan, 400).await;
    assert_eq!(parse(&body)["error"]["param"], "messages.[1].role");
}

#[tokio::test]
async fn anthropic_tool_pairing_errors_are_the_real_ones() {
    let mock = mock(128_000).await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01N8", "name": "ls", "input": {}}]},
        {"role": "user", "content": "and?"}]});
    let answer = mock.answered(Api::Anthropic, &body, 400).await;
    let error = parse(&answer);
    assert_eq!(
        error["error"]["message"],
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01N8. \
         Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    );
    assert!(
        error["request_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("req_"))
    );
    assert!(classify(400, &answer).is_none());
}

#[tokio::test]
async fn malformed_and_incomplete_bodies_get_400s() {
    let mock = mock(128_000).await;
    let url = format!("{}/chat/completions", mock.server.openai_base_url());
    let response = mock
        .client
        .post(url)
        .bearer_auth("k")
        .body("{not json")
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status().as_u16(), 400);
    let error: Value = response.json().await.expect("json");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("We could not parse the JSON body"))
    );

    let (status, body) = mock
        .keyed(Api::Anthropic, &json!({"model": "claude", "messages": []}))
        .await;
    assert_eq!(
        (status, parse(&body)["error"]["message"].clone()),
        (400, json!("max_tokens: Field required"))
    );
    let (status, body) = mock
        .keyed(
            Api::Chat,
            &json!({"messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(
        (status, parse(&body)["error"]["message"].clone()),
        (400, json!("you must provide a model parameter"))
    );
    let recorded = mock.server.requests();
    assert_eq!(
        recorded[0].body,
        json!("{not json"),
        "a body that is not JSON is recorded as text"
    );
    assert!(recorded.iter().all(|request| request.status == 400));
}

#[tokio::test]
async fn a_request_without_a_key_gets_the_providers_401() {
    let mock = mock(128_000).await;
    let (status, body) = mock.post(Api::Chat, None, &chat_body("hi")).await;
    assert_eq!(status, 401);
    assert!(
        parse(&body)["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("You didn't provide an API key"))
    );
    let (status, body) = mock.post(Api::Responses, None, &responses_body("hi")).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = mock
        .post(Api::Anthropic, None, &anthropic_body("hi", 10))
        .await;
    assert_eq!(status, 401);
    assert_eq!(parse(&body)["error"]["type"], "authentication_error");
    // Anthropic also takes a bearer token.
    let url = format!("{}/v1/messages", mock.server.anthropic_base_url());
    assert_eq!(
        status_of(
            mock.client
                .post(url)
                .bearer_auth("k")
                .json(&anthropic_body("hi", 10))
        )
        .await,
        200
    );
}

#[tokio::test]
async fn the_clients_key_and_headers_are_recorded_untouched() {
    let mock = mock(128_000).await;
    mock.post(Api::Chat, Some("sk-client-key-123"), &chat_body("hi"))
        .await;
    mock.post(
        Api::Anthropic,
        Some("sk-ant-xyz"),
        &anthropic_body("hi", 10),
    )
    .await;
    let recorded = mock.server.requests();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[0].path, "/v1/chat/completions");
    assert_eq!(
        recorded[0].header("authorization"),
        Some("Bearer sk-client-key-123")
    );
    assert_eq!(recorded[1].header("x-api-key"), Some("sk-ant-xyz"));
    assert_eq!(recorded[1].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(recorded[1].body, anthropic_body("hi", 10));
    assert!(
        recorded
            .iter()
            .all(|request| request.status == 200 && request.input_tokens > 0)
    );
}

// ---- answers and streams -----------------------------------------------------------------

#[tokio::test]
async fn answers_are_deterministic_text_or_one_tool_call() {
    let mock = mock(128_000).await;
    let (_, body) = mock.keyed(Api::Chat, &chat_body("hi")).await;
    let answer = parse(&body);
    assert_eq!(answer["choices"][0]["message"]["content"], "mock reply 1");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        answer["usage"]["total_tokens"],
        answer["usage"]["prompt_tokens"].as_u64().unwrap_or(0) + 4
    );

    let with_tools = json!({"model": "claude-sonnet-4-5", "max_tokens": 100,
        "tools": [{"name": "read_file", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "data"}]}]});
    let body = mock.answered(Api::Anthropic, &with_tools, 200).await;
    let answer = parse(&body);
    assert_eq!(answer["stop_reason"], "tool_use");
    let block = &answer["content"][0];
    assert_eq!(
        (&block["type"], &block["name"], &block["input"]),
        (&json!("tool_use"), &json!("read_file"), &json!({"step": 1}))
    );
    assert!(
        block["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("toolu_"))
    );
}

fn names(events: &[(Option<String>, String)]) -> Vec<String> {
    events
        .iter()
        .map(|(name, _)| name.clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn chat_stream_order_text_and_tool_call() {
    let mock = mock(128_000).await;
    let mut body = streaming(chat_body("hi"));
    body["stream_options"] = json!({"include_usage": true});
    let text = mock.answered(Api::Chat, &body, 200).await;
    let events = sse(&text);
    assert_eq!(events.last().map(|(_, data)| data.as_str()), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, data)| parse(data))
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "mock reply 1");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert!(
        usage["usage"]["prompt_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c["usage"].is_null() && c["object"] == "chat.completion.chunk")
    );

    body["tools"] = json!([{"type": "function", "function": {"name": "grep", "parameters": {}}}]);
    body["stream_options"] = json!({"include_usage": false});
    let (_, text) = mock.keyed(Api::Chat, &body).await;
    let events = sse(&text);
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, data)| parse(data))
        .collect();
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "no usage key without include_usage"
    );
    let first_call = &chunks[1]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(
        (
            &first_call["index"],
            &first_call["type"],
            &first_call["function"]["name"]
        ),
        (&json!(0), &json!("function"), &json!("grep"))
    );
    assert!(
        first_call["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("call_"))
    );
    let arguments: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(arguments, r#"{"step":0}"#);
    assert!(chunks.len() > 4, "arguments arrive in several pieces");
    assert_eq!(
        chunks[chunks.len() - 1]["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[tokio::test]
async fn anthropic_stream_order_text_and_tool_use() {
    let mock = mock(128_000).await;
    let mut body = streaming(anthropic_body("hi", 100));
    let events = sse(&mock.answered(Api::Anthropic, &body, 200).await);
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &events {
        assert_eq!(
            parse(data)["type"].as_str(),
            name.as_deref(),
            "the data's type matches the event name"
        );
    }
    let delta = parse(&events[7].1);
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 4);

    body["tools"] = json!([{"name": "ls", "input_schema": {"type": "object"}}]);
    let (_, text) = mock.keyed(Api::Anthropic, &body).await;
    let events = sse(&text);
    let start = parse(&events[1].1);
    assert_eq!(start["content_block"]["type"], "tool_use");
    assert_eq!(start["content_block"]["input"], json!({}));
    let partial: String = events
        .iter()
        .filter(|(name, _)| name.as_deref() == Some("content_block_delta"))
        .map(|(_, data)| {
            let delta = parse(data);
            assert_eq!(delta["delta"]["type"], "input_json_delta");
            delta["delta"]["partial_json"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(partial, r#"{"step":0}"#);
    let message_delta = events
        .iter()
        .find(|(name, _)| name.as_deref() == Some("message_delta"))
        .map(|(_, data)| parse(data));
    assert_eq!(
        message_delta.map(|d| d["delta"]["stop_reason"].clone()),
        Some(json!("tool_use"))
    );
}

#[tokio::test]
async fn responses_stream_order_text_and_function_call() {
    let mock = mock(128_000).await;
    let mut body = streaming(responses_body("hi"));
    let events = sse(&mock.answered(Api::Responses, &body, 200).await);
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    for (number, (name, data)) in events.iter().enumerate() {
        let data = parse(data);
        assert_eq!(data["type"].as_str(), name.as_deref());
        assert_eq!(data["sequence_number"], number);
    }
    let completed = parse(&events[10].1);
    assert_eq!(completed["response"]["status"], "completed");
    assert_eq!(
        completed["response"]["output"][0]["content"][0]["text"],
        "mock reply 1"
    );
    assert!(
        completed["response"]["usage"]["input_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );

    body["tools"] = json!([{"type": "function", "name": "search", "parameters": {}}]);
    let (_, text) = mock.keyed(Api::Responses, &body).await;
    let events = sse(&text);
    let names = names(&events);
    assert_eq!(names[2], "response.output_item.added");
    assert!(
        names[3..names.len() - 3]
            .iter()
            .all(|n| n == "response.function_call_arguments.delta")
    );
    assert_eq!(
        names[names.len() - 3..],
        [
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let added = parse(&events[2].1);
    assert_eq!(
        (&added["item"]["type"], &added["item"]["name"]),
        (&json!("function_call"), &json!("search"))
    );
    let done = parse(&events[events.len() - 3].1);
    assert_eq!(done["arguments"], r#"{"step":0}"#);
}

#[tokio::test]
async fn responses_non_streaming_answers_with_a_function_call_item() {
    let mock = mock(128_000).await;
    let body = json!({"model": "gpt-4o", "tools": [{"type": "function", "name": "search", "parameters": {}}],
        "input": [
            {"role": "user", "content": "find"},
            {"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "nothing"}]});
    let text = mock.answered(Api::Responses, &body, 200).await;
    let answer = parse(&text);
    assert_eq!(answer["object"], "response");
    let item = &answer["output"][0];
    assert_eq!(
        (&item["type"], &item["arguments"]),
        (&json!("function_call"), &json!(r#"{"step":1}"#))
    );
    assert_eq!(
        answer["usage"]["total_tokens"],
        answer["usage"]["input_tokens"].as_u64().unwrap_or(0)
            + answer["usage"]["output_tokens"].as_u64().unwrap_or(0)
    );
}

// ---- prompt cache ------------------------------------------------------------------------

#[tokio::test]
async fn a_repeated_prefix_is_reported_as_cached() {
    let mock = mock(128_000).await;
    let first = json!({"model": "gpt-4o", "messages": [
        {"role": "system", "content": long_text(300)},
        {"role": "user", "content": "question one"}]});
    let (_, text) = mock.keyed(Api::Chat, &first).await;
    let first_usage = parse(&text)["usage"].clone();
    assert_eq!(first_usage["prompt_tokens_details"]["cached_tokens"], 0);
    let first_input = first_usage["prompt_tokens"].as_u64().unwrap_or(0);

    let mut second = first.clone();
    if let Some(messages) = second["messages"].as_array_mut() {
        messages.push(json!({"role": "assistant", "content": "mock reply 2"}));
        messages.push(json!({"role": "user", "content": "question two"}));
    }
    let (_, text) = mock.keyed(Api::Chat, &second).await;
    let usage = parse(&text)["usage"].clone();
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"], first_input,
        "the first request is the cached prefix"
    );
    assert!(usage["prompt_tokens"].as_u64().unwrap_or(0) > first_input);

    // Another key shares nothing; a changed system prompt breaks the prefix.
    let (_, text) = mock.post(Api::Chat, Some("other-key"), &second).await;
    assert_eq!(
        parse(&text)["usage"]["prompt_tokens_details"]["cached_tokens"],
        0
    );
    let mut changed = second.clone();
    changed["messages"][0]["content"] = json!("a different system prompt");
    let (_, text) = mock.keyed(Api::Chat, &changed).await;
    let cached = parse(&text)["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert!(
        cached.is_some_and(|c| c < 10),
        "only the empty-tools head can match: {cached:?}"
    );
}

#[tokio::test]
async fn anthropic_reports_cache_reads_outside_input_tokens() {
    let mock = mock(128_000).await;
    let first = json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "system": long_text(300),
        "messages": [{"role": "user", "content": "one"}]});
    let (_, text) = mock.keyed(Api::Anthropic, &first).await;
    let total_first = parse(&text)["usage"]["input_tokens"].as_u64().unwrap_or(0);
    let (_, text) = mock.keyed(Api::Anthropic, &first).await;
    let usage = parse(&text)["usage"].clone();
    assert_eq!(
        usage["cache_read_input_tokens"], total_first,
        "an identical request is served whole from the cache"
    );
    assert_eq!(usage["input_tokens"], 0);
    assert_eq!(
        mock.server.requests()[1].input_tokens,
        total_first,
        "the recorder keeps the full input"
    );
}

// ---- control endpoints -------------------------------------------------------------------

#[tokio::test]
async fn control_endpoints_read_reset_and_configure() {
    let mock = mock(128_000).await;
    let base = format!("http://{}", mock.server.addr());
    mock.keyed(Api::Chat, &chat_body("hi")).await;
    let recorded = json_answer(mock.client.get(format!("{base}/mock/requests"))).await;
    assert_eq!(recorded[0]["path"], "/v1/chat/completions");
    assert_eq!(recorded[0]["status"], 200);

    let config = json_answer(
        mock.client
            .post(format!("{base}/mock/config"))
            .json(&json!({"window": 10})),
    )
    .await;
    assert_eq!(config["window"], 10);
    assert_eq!(mock.keyed(Api::Chat, &chat_body("hi")).await.0, 400);
    assert_eq!(
        status_of(
            mock.client
                .post(format!("{base}/mock/config"))
                .json(&json!({"windw": 10}))
        )
        .await,
        400
    );

    mock.client
        .post(format!("{base}/mock/reset"))
        .send()
        .await
        .expect("answer");
    assert!(mock.server.requests().is_empty());
}

#[tokio::test]
async fn models_and_unknown_paths_answer_in_the_callers_dialect() {
    let mock = mock(128_000).await;
    let openai = json_answer(
        mock.client
            .get(format!("{}/models", mock.server.openai_base_url()))
            .bearer_auth("k"),
    )
    .await;
    assert_eq!(openai["object"], "list");
    assert_eq!(openai["data"][0]["object"], "model");
    let anthropic = json_answer(
        mock.client
            .get(format!("{}/v1/models", mock.server.anthropic_base_url()))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01"),
    )
    .await;
    assert_eq!(anthropic["data"][0]["type"], "model");
    assert_eq!(
        status_of(
            mock.client
                .get(format!("{}/nothing", mock.server.openai_base_url()))
        )
        .await,
        404
    );
}

#[tokio::test]
async fn recording_can_be_off() {
    let mock = mock_with(MockConfig {
        record: false,
        ..MockConfig::default()
    })
    .await;
    assert_eq!(mock.keyed(Api::Chat, &chat_body("hi")).await.0, 200);
    assert!(mock.server.requests().is_empty());
    mock.server.shutdown().await;
}

#[tokio::test]
async fn delay_holds_the_answer_back() {
    let mock = mock_with(MockConfig {
        delay: std::time::Duration::from_millis(150),
        ..MockConfig::default()
    })
    .await;
    let started = std::time::Instant::now();
    assert_eq!(mock.keyed(Api::Chat, &chat_body("hi")).await.0, 200);
    assert!(started.elapsed() >= std::time::Duration::from_millis(150));
}

// ---- scripted agent runs -----------------------------------------------------------------

/// A scripted run set through `/mock/config`, as mini-swe-agent 2.x sees it: `bash` calls with
/// a marker and a large output, a refused (too large) request does not count as a step, and
/// after the last step the submit command.
#[tokio::test]
async fn a_script_drives_an_agent_loop_step_by_step() {
    let mock = mock(2_000).await;
    let base = format!("http://{}", mock.server.addr());
    let config = json_answer(
        mock.client
            .post(format!("{base}/mock/config"))
            .json(&json!({"script": {"steps": 2, "output_bytes": 50}})),
    )
    .await;
    assert_eq!(config["script"], json!({"steps": 2, "output_bytes": 50}));
    let tools = json!([{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]);
    let call_of = |answer: &str| -> String {
        let body: Value = serde_json::from_str(answer).expect("json");
        let call = &body["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "bash");
        let arguments: Value =
            serde_json::from_str(call["arguments"].as_str().unwrap_or_default()).expect("args");
        arguments["command"].as_str().unwrap_or_default().to_owned()
    };
    let first =
        json!({"model": "gpt-4o", "tools": tools, "messages": [{"role": "user", "content": "go"}]});
    let answer = mock.answered(Api::Chat, &first, 200).await;
    let command = call_of(&answer);
    assert_eq!(command, ctxkeeper_mock_upstream::script_command(1, 50));
    // Too large for the window: refused, and step 2 is not handed out.
    let huge = json!({"model": "gpt-4o", "tools": tools, "messages": [
        {"role": "user", "content": "go"},
        {"role": "tool", "tool_call_id": "c", "content": format!("ctxkstep1out {}", "1 ".repeat(3_000))}]});
    assert_eq!(mock.keyed(Api::Chat, &huge).await.0, 400);
    // The compacted retry (the marker gone) still gets step 2, then the submit command.
    let compacted = json!({"model": "gpt-4o", "tools": tools, "messages": [
        {"role": "user", "content": "go"}, {"role": "user", "content": "(summary)"}]});
    let (_, answer) = mock.keyed(Api::Chat, &compacted).await;
    assert!(call_of(&answer).starts_with("echo ctxkstep2out;"));
    let (_, answer) = mock.keyed(Api::Chat, &compacted).await;
    assert_eq!(
        call_of(&answer),
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    );
    // Another caller starts from the beginning.
    let (_, answer) = mock.post(Api::Chat, Some("other"), &first).await;
    assert!(call_of(&answer).starts_with("echo ctxkstep1out;"));
}
