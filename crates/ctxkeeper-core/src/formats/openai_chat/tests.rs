use super::*;

#[test]
fn messages_round_trip() {
    let cases = [
        json!([{"role": "system", "content": "be brief"}]),
        json!([{"role": "developer", "content": [{"type": "text", "text": "rules"}]}]),
        json!([{"role": "user", "name": "ann", "content": "hi", "x-trace": 7}]),
        json!([{"role": "assistant"}]),
        json!([{"role": "assistant", "content": null, "tool_calls": []}]),
        json!([{"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "refusal": "no"}]),
        json!([{"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "custom", "custom": {"name": "g", "input": "raw text"}}
        ]}]),
        json!([{"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{}"}},
               {"role": "function", "name": "f", "content": "ok"}]),
        json!([{"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "1"}]}]),
        json!([{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}},
            {"type": "file", "file": {"file_id": "file-1"}},
            {"type": "video", "video": {"url": "v"}}
        ]}]),
    ];
    super::super::common::assert_round_trips(parse_messages, emit_messages, &cases);
}

#[test]
fn legacy_function_call_and_answer_share_an_id() {
    let input = json!([
        {"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "function", "name": "f", "content": "ok"}
    ]);
    let messages = parse_messages(&input).expect("valid");
    assert_eq!(messages[0].tool_calls().next().map(|c| c.0), Some("fc_f"));
    assert_eq!(messages[1].tool_result_ids().next(), Some("fc_f"));
}

#[test]
fn malformed_messages_report_their_path() {
    let cases = [
        (
            json!([{"role": "narrator", "content": "x"}]),
            "$[0].role",
            "unknown role \"narrator\"",
        ),
        (json!([{"content": "x"}]), "$[0].role", "missing"),
        (
            json!([{"role": "user", "content": 3}]),
            "$[0].content",
            "found a number",
        ),
        (
            json!([{"role": "assistant", "tool_calls": {}}]),
            "$[0].tool_calls",
            "expected an array",
        ),
        (
            json!([{"role": "tool", "content": "x"}]),
            "$[0].tool_call_id",
            "missing",
        ),
        (
            json!([{"role": "user", "content": [{"type": "text"}]}]),
            "$[0].content[0].text",
            "missing",
        ),
        (
            json!([{"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
            "function": {"name": "f", "arguments": {}}}]}]),
            "$[0].tool_calls[0].function.arguments",
            "expected a string",
        ),
        (json!({"role": "user"}), "$", "expected an array"),
    ];
    super::super::common::assert_path_errors(parse_messages, &cases);
}

#[test]
fn anthropic_style_results_become_tool_messages_and_images_follow() {
    let mut user = Message::new(
        Role::User,
        vec![
            Part::ToolResult {
                call_id: "a".into(),
                content: vec![
                    Part::text("see image"),
                    Part::Data {
                        source: DataSource::Base64 {
                            media_type: "image/png".into(),
                            data: "AAAA".into(),
                        },
                        wire_type: Some("image".into()),
                        extra: Extra::new(),
                    },
                ],
                is_error: false,
                extra: Extra::new(),
            },
            Part::tool_result("b", "two"),
            Part::text("go on"),
        ],
    );
    user.hints.origin = Some("anthropic".into());
    let out = emit_messages(&[user]);
    assert_eq!(out.len(), 4, "{out:?}");
    assert_eq!(out[0]["role"], "tool");
    assert_eq!(out[0]["tool_call_id"], "a");
    assert_eq!(out[1]["tool_call_id"], "b");
    assert_eq!(out[2]["role"], "user");
    assert_eq!(
        out[2]["content"][1]["image_url"]["url"],
        "data:image/png;base64,AAAA"
    );
    assert_eq!(out[3], json!({"role": "user", "content": "go on"}));
}

#[test]
fn a_legacy_function_call_beside_tool_calls_is_kept_as_sent() {
    // Found by the fuzzer: both on one message came back as two tool calls.
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
         "function_call": {"name": "g", "arguments": "{\"x\":1}"}},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    ]});
    let request = parse_request(&body).expect("parses");
    assert_eq!(request.messages[1].tool_calls().count(), 1);
    assert_eq!(emit_request(&request), body);
}

#[test]
fn a_part_keeps_a_field_named_like_another_parts_payload() {
    // Found by the fuzzer: an audio part's own `image_url` field was dropped on emit.
    let body = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}, "image_url": -1},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==", "detail": "low"}, "file": "x"}
    ]}]});
    let request = parse_request(&body).expect("parses");
    assert_eq!(emit_request(&request), body);
}

#[test]
fn tools_round_trip() {
    let input = json!([
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}},
        {"type": "function", "function": {"name": "g"}, "x": 1},
        {"type": "custom", "custom": {"name": "h", "format": {"type": "text"}}}
    ]);
    let tools = parse_tools(&input).expect("valid");
    assert_eq!(tools[2].name, "h");
    assert_eq!(Value::Array(emit_tools(&tools)), input);
}
