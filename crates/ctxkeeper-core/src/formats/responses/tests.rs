use super::*;

/// Parses `items` as a list of input items and checks that emit gives them back.
fn round_trips(cases: &[Value]) {
    let parse = |items: &Value| parse_items(&items.as_array().cloned().unwrap_or_default());
    super::super::common::assert_round_trips(parse, emit_messages, cases);
}

#[test]
fn items_round_trip() {
    let cases = [
        json!([{"role": "user", "content": "hi"}]),
        json!([{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]}]),
        json!([{"type": "message", "role": "user", "id": "msg_1", "status": "completed", "content": [
            {"type": "input_text", "text": "see"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "high"},
            {"type": "input_image", "file_id": "file-1"},
            {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
            {"type": "output_text", "text": "odd but kept"}
        ]}]),
        json!([
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}], "content": null, "encrypted_content": "gAAA=="},
            {"type": "message", "role": "assistant", "id": "msg_2", "content": [
                {"type": "output_text", "text": "calling", "annotations": []},
                {"type": "refusal", "refusal": "partly"}
            ]},
            {"role": "assistant", "content": "untyped"},
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}", "status": "completed"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"a\":1}"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"type": "function_call_output", "call_id": "c2", "output": [
                {"type": "input_text", "text": "img"},
                {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"}
            ]},
            {"type": "custom_tool_call", "call_id": "c3", "name": "patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c3", "output": "done"},
            {"type": "item_reference", "id": "msg_0"},
            {"type": "computer_call_output", "call_id": "cc", "output": {"type": "computer_screenshot"}}
        ]),
    ];
    round_trips(&cases);
}

/// Found by the `wire_responses` fuzz target: an image in an assistant message item of
/// this format came back as a marker text.
#[test]
fn media_in_an_assistant_item_round_trips() {
    round_trips(&[json!([
        {"type": "message", "role": "assistant", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AA=="},
            {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}
        ]}
    ])]);
    // Converted from another format, media in an assistant message is still a marker.
    let mut message = Message::new(
        Role::Assistant,
        vec![Part::Data {
            source: DataSource::Url {
                url: "https://x/y.png".into(),
            },
            wire_type: Some("image_url".into()),
            extra: Extra::new(),
        }],
    );
    message.hints = origin_hints(Wire::OpenAiChat);
    let items = emit_messages(&[message]);
    assert_eq!(items[0]["content"][0]["type"], "output_text", "{items:?}");
}

#[test]
fn consecutive_assistant_side_items_form_one_message() {
    let items = vec![
        json!({"type": "reasoning", "summary": [], "encrypted_content": "x"}),
        json!({"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"}),
        json!({"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"}),
        json!({"type": "function_call_output", "call_id": "a", "output": "1"}),
        json!({"type": "function_call_output", "call_id": "b", "output": "2"}),
    ];
    let messages = parse_items(&items).expect("valid");
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::Assistant, Role::Tool, Role::Tool]);
    assert_eq!(messages[0].tool_calls().count(), 2);
}

#[test]
fn an_edited_turn_falls_back_to_canonical_items() {
    let items = vec![
        json!({"type": "reasoning", "summary": [], "encrypted_content": "x"}),
        json!({"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"}),
    ];
    let mut messages = parse_items(&items).expect("valid");
    messages[0].parts.insert(1, Part::text("note"));
    let out = emit_messages(&messages);
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], items[0]);
    assert_eq!(
        out[1]["content"][0],
        json!({"type": "output_text", "text": "note"})
    );
    assert_eq!(out[2], items[1]);
}

#[test]
fn requests_round_trip() {
    let cases = [
        json!({"model": "gpt-5", "instructions": "be brief", "input": "hi", "store": false}),
        json!({"model": "gpt-5", "previous_response_id": "resp_1", "instructions": null}),
        json!({"input": [{"role": "user", "content": "x"}], "tools": [
            {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true},
            {"type": "web_search"},
            {"type": "custom", "name": "patch", "format": {"type": "text"}}
        ]}),
    ];
    for body in cases {
        let request = parse_request(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(emit_request(&request), body);
    }
}

#[test]
fn malformed_items_report_their_path() {
    let cases = [
        (
            json!([{"role": "narrator", "content": "x"}]),
            "$[0].role",
            "unknown role",
        ),
        (
            json!([{"role": "tool", "content": "x"}]),
            "$[0].role",
            "function_call_output",
        ),
        (json!([{"content": "x"}]), "$[0].role", "missing"),
        (
            json!([{"role": "user", "content": 4}]),
            "$[0].content",
            "found a number",
        ),
        (
            json!([{"type": "function_call", "call_id": "a", "name": "f"}]),
            "$[0].arguments",
            "missing",
        ),
        (
            json!([{"type": "function_call_output", "call_id": "a", "output": 1}]),
            "$[0].output",
            "found a number",
        ),
        (json!([{"type": 7}]), "$[0].type", "expected a string"),
        (
            json!([{"role": "user", "content": [{"type": "input_text"}]}]),
            "$[0].content[0].text",
            "missing",
        ),
        (json!(5), "$", "expected a string or an array"),
    ];
    super::super::common::assert_path_errors(parse_messages, &cases);
}

#[test]
fn foreign_messages_become_valid_items() {
    let mut thinking = Message::new(
        Role::Assistant,
        vec![
            Part::Reasoning {
                text: Some("t".into()),
                signature: Some("s".into()),
                encrypted: None,
                redacted: false,
                extra: Extra::new(),
            },
            Part::text("ok"),
            Part::tool_call("a", "f", "{}"),
        ],
    );
    thinking.hints.origin = Some("anthropic".into());
    let mut results = Message::new(
        Role::User,
        vec![Part::tool_result("a", "1"), Part::text("next")],
    );
    results.hints.origin = Some("anthropic".into());
    let out = emit_messages(&[thinking, results]);
    assert_eq!(
        Value::Array(out),
        json!([
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "a"},
            {"type": "function_call_output", "call_id": "a", "output": "1"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "next"}]}
        ])
    );
}
