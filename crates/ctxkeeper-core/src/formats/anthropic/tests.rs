use super::emit::input_value;
use super::*;

/// Parses `input` as a message list and checks that emit gives it back.
fn round_trip(input: Value) {
    super::super::common::assert_round_trips(parse_messages, emit_messages, &[input]);
}

#[test]
fn messages_round_trip() {
    let cases = [
        json!([{"role": "user", "content": "hi"}]),
        json!([{"role": "user", "content": []}]),
        json!([{"role": "user", "content": [
            {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
            {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}, "title": "t"}
        ]}]),
        json!([{"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig=="},
            {"type": "redacted_thinking", "data": "blob"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"b": 1, "a": [1.5, "x"]}},
            {"type": "tool_use", "id": "t2", "name": "g", "input": {}}
        ], "id": "msg_1", "usage": {"input_tokens": 3}}]),
        json!([{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": false},
            {"type": "tool_result", "tool_use_id": "t2", "is_error": true},
            {"type": "tool_result", "tool_use_id": "t3", "content": [
                {"type": "text", "text": "chart"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}}
            ]},
            {"type": "tool_result", "tool_use_id": "t4", "content": []},
            {"type": "text", "text": "continue"}
        ]}]),
        json!([{"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}]}]),
    ];
    super::super::common::assert_round_trips(parse_messages, emit_messages, &cases);
}

#[test]
fn system_messages_inside_messages_stay_in_place() {
    round_trip(json!([{"role": "system", "content": "first"}, {"role": "user", "content": "x"}]));
    let body = json!({"model": "m", "max_tokens": 5,
    "system": [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "system", "content": "Available agent types: ..."},
        {"role": "system", "content": [{"type": "text", "text": "more"}]},
        {"role": "assistant", "content": "ok"}
    ]});
    let request = parse_request(&body).expect("valid");
    let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::System,
            Role::System,
            Role::Assistant
        ]
    );
    assert_eq!(emit_request(&request), body);
    // Without a top-level system field, a leading inline one is not hoisted into it.
    let body = json!({"model": "m", "max_tokens": 5,
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]});
    let request = parse_request(&body).expect("valid");
    assert_eq!(emit_request(&request), body);
}

/// Claude Code 2.1.197 with its default model puts the agent list in a `system` message
/// after the first user message (beta `mid-conversation-system-2026-04-07`).
#[test]
fn claude_code_request_with_a_mid_conversation_system_message_round_trips() {
    let body: Value = serde_json::from_str(include_str!(
        "../../../../../tests/python/fixtures/agents/claude-code-2.1.197-request-3.json"
    ))
    .expect("fixture is JSON");
    assert_eq!(body["messages"][1]["role"], "system");
    let request = parse_request(&body).expect("Claude Code's request parses");
    assert_eq!(emit_request(&request), body);
}

#[test]
fn requests_round_trip_with_both_system_shapes() {
    for system in [
        json!("rules"),
        json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}]),
        json!([]),
    ] {
        let body = json!({"model": "m", "max_tokens": 5, "system": system,
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
                      {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]});
        let request = parse_request(&body).expect("valid");
        assert!(is_system_field(&request.messages[0]));
        assert_eq!(emit_request(&request), body);
    }
}

/// Found by the `wire_anthropic` fuzz target: a `system` array holding a block other than
/// text (a `tool_use`, an image) was read as a message's part and left out when emitted.
#[test]
fn system_blocks_other_than_text_round_trip() {
    let system = json!([
        {"type": "text", "text": "rules"},
        {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
        {"type": "thinking", "thinking": "t", "signature": "s"}
    ]);
    let body = json!({"model": "m", "max_tokens": 5, "system": system,
        "messages": [{"role": "user", "content": "x"}]});
    let request = parse_request(&body).expect("valid");
    assert_eq!(request.messages[0].text(), "rules");
    assert_eq!(request.messages[0].tool_calls().count(), 0);
    assert_eq!(emit_request(&request), body);
    // A text block is still read as one: a malformed one is still an error.
    let broken = json!({"model": "m", "max_tokens": 5, "system": [{"type": "text"}],
        "messages": [{"role": "user", "content": "x"}]});
    assert!(parse_request(&broken).is_err());
}

#[test]
fn foreign_tool_messages_merge_into_one_user_message() {
    let messages = vec![
        Message::system("rules"),
        Message::user("go"),
        Message::assistant_with_calls(
            "",
            vec![
                Part::tool_call("a", "f", "{\"x\":1}"),
                Part::tool_call("b/../c", "g", "not json"),
            ],
        ),
        Message::tool_result("a", "1"),
        Message::tool_result("b/../c", "2"),
        Message::user("thanks"),
        Message::system("late rules"),
    ];
    let out = emit_messages(&messages);
    let safe = sanitize_tool_id("b/../c");
    assert_eq!(
        Value::Array(out),
        json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {"x": 1}},
                {"type": "tool_use", "id": safe, "name": "g", "input": {"input": "not json"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                {"type": "tool_result", "tool_use_id": safe, "content": "2"},
                {"type": "text", "text": "thanks"},
                {"type": "text", "text": "late rules"}
            ]}
        ])
    );
    assert_eq!(emit_system(&messages), Some(json!("rules")));
}

#[test]
fn sanitized_ids_are_valid_and_distinct() {
    let cases = [
        "toolu_01",
        "call-2",
        "../../etc/passwd",
        "a.b",
        "a/b",
        "",
        "fc_x",
    ];
    let mut seen = std::collections::HashSet::new();
    for id in cases {
        let safe = sanitize_tool_id(id);
        assert!(
            !safe.is_empty()
                && safe
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{safe}"
        );
        assert!(seen.insert(safe), "{id} collides");
    }
    assert_eq!(sanitize_tool_id("toolu_01"), "toolu_01");
}

#[test]
fn malformed_messages_report_their_path() {
    let cases = [
        (
            json!([{"role": "developer", "content": "x"}]),
            "$[0].role",
            "not allowed",
        ),
        (
            json!([{"role": "narrator", "content": "x"}]),
            "$[0].role",
            "unknown role",
        ),
        (json!([{"role": "user"}]), "$[0].content", "missing"),
        (
            json!([{"role": "user", "content": 1}]),
            "$[0].content",
            "found a number",
        ),
        (
            json!([{"role": "user", "content": [{"text": "x"}]}]),
            "$[0].content[0].type",
            "missing",
        ),
        (
            json!([{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f"}]}]),
            "$[0].content[0].input",
            "missing",
        ),
        (
            json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": 5}]}]),
            "$[0].content[0].content",
            "found a number",
        ),
    ];
    super::super::common::assert_path_errors(parse_messages, &cases);
}

#[test]
fn arguments_become_objects() {
    let cases = [
        ("{\"a\":1}", json!({"a": 1})),
        ("", json!({})),
        ("[1]", json!({"input": "[1]"})),
        ("{broken", json!({"input": "{broken"})),
    ];
    for (arguments, expected) in cases {
        assert_eq!(input_value(arguments, false), expected, "{arguments}");
    }
}
