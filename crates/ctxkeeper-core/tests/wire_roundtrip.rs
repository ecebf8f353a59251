//! The wire adapters over hand-written fixtures and the shared real traces:
//!
//! - every fixture in `tests/fixtures/wire/<format>/` parses and emits back to the same JSON;
//! - every fixture emitted into each other format gives a request that parses in that format and
//!   passes `check` with that provider's rules, with every tool-call id carried over;
//! - malformed input fails with an error that names the JSON path;
//! - the real traces in `../shared/data/traces` round-trip message by message.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use ctxkeeper_core::formats::{Wire, anthropic, openai_chat, responses};
use ctxkeeper_core::model::{CheckRules, Message, Part, Role, check};
use ctxkeeper_core::{ParseError, Position};
use serde_json::{Value, json};

const WIRES: [Wire; 3] = [Wire::OpenAiChat, Wire::Anthropic, Wire::Responses];

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The fixtures of one format, by file name.
fn fixtures(wire: Wire) -> Vec<(String, Value)> {
    let dir = crate_dir().join("tests/fixtures/wire").join(wire.as_str());
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 4,
        "{}: expected at least 4 fixtures",
        dir.display()
    );
    paths
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(&path).expect("readable fixture");
            let value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (
                format!(
                    "{}/{}",
                    wire.as_str(),
                    path.file_name().expect("valid").to_string_lossy()
                ),
                value,
            )
        })
        .collect()
}

fn rules_for(wire: Wire) -> CheckRules {
    match wire {
        Wire::Anthropic => CheckRules::anthropic(),
        Wire::OpenAiChat | Wire::Responses => CheckRules::openai(),
    }
}

/// The tool-call ids of a conversation, as the target format would spell them.
fn call_ids(messages: &[Message], target: Wire) -> BTreeSet<String> {
    messages
        .iter()
        .flat_map(|m| {
            m.tool_calls()
                .map(|(id, _, _)| id.to_string())
                .collect::<Vec<_>>()
        })
        .map(|id| {
            if target == Wire::Anthropic {
                anthropic::sanitize_tool_id(&id)
            } else {
                id
            }
        })
        .collect()
}

#[test]
fn every_fixture_round_trips_exactly() {
    let mut count = 0;
    for wire in WIRES {
        for (name, body) in fixtures(wire) {
            let request = wire
                .parse_request(&body)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let back = wire.emit_request(&request);
            assert_eq!(back, body, "{name}: emit(parse(x)) != x");
            // The neutral model alone is enough: a request that went through serde (a stored
            // session) emits the same JSON.
            let stored: ctxkeeper_core::model::Request =
                serde_json::from_value(serde_json::to_value(&request).expect("serialize"))
                    .expect("deserialize");
            assert_eq!(
                wire.emit_request(&stored),
                body,
                "{name}: after a serde round trip"
            );
            count += 1;
        }
    }
    assert!(count >= 12, "only {count} fixtures");
}

#[test]
fn every_fixture_converts_to_a_valid_request_of_the_other_formats() {
    for source in WIRES {
        for (name, body) in fixtures(source) {
            let request = source
                .parse_request(&body)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                check(&request.messages, &rules_for(source)),
                vec![],
                "{name}: the fixture itself must be a valid conversation"
            );
            for target in WIRES.into_iter().filter(|t| *t != source) {
                let label = format!("{name} -> {}", target.as_str());
                let emitted = target.emit_request(&request);
                let reparsed = target.parse_request(&emitted).unwrap_or_else(|e| {
                    panic!("{label}: emitted request does not parse: {e}\n{emitted:#}")
                });
                let violations = check(&reparsed.messages, &rules_for(target));
                assert!(
                    violations.is_empty(),
                    "{label}: {}\n{emitted:#}",
                    violations
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                );
                assert_eq!(
                    call_ids(&reparsed.messages, target),
                    call_ids(&request.messages, target),
                    "{label}: tool-call ids"
                );
                assert_target_shape(target, &emitted, &label);
                // What we emit is itself a lossless request of the target format.
                assert_eq!(target.emit_request(&reparsed), emitted, "{label}: re-emit");
            }
        }
    }
}

/// Provider rules `check` does not model: where media may appear, empty blocks, required fields.
fn assert_target_shape(target: Wire, body: &Value, label: &str) {
    let messages = match target {
        Wire::Responses => body["input"].as_array().cloned().unwrap_or_default(),
        _ => body["messages"]
            .as_array()
            .cloned()
            .expect("messages array"),
    };
    match target {
        Wire::Anthropic => {
            assert!(
                body["max_tokens"].is_u64(),
                "{label}: max_tokens is required"
            );
            if messages
                .iter()
                .any(|m| m.to_string().contains("\"tool_use\""))
            {
                assert!(
                    body["tools"].as_array().is_some_and(|t| !t.is_empty()),
                    "{label}: tools"
                );
            }
            for message in &messages {
                let role = message["role"].as_str().unwrap_or_default();
                assert!(
                    role == "user" || role == "assistant",
                    "{label}: role {role}"
                );
                let Some(blocks) = message["content"].as_array() else {
                    continue;
                };
                assert!(!blocks.is_empty(), "{label}: empty content");
                for block in blocks {
                    if block["type"] == "text" {
                        let text = block["text"].as_str().unwrap_or_default();
                        assert!(!text.trim().is_empty(), "{label}: empty text block");
                    }
                    if block["type"] == "tool_use" {
                        assert!(
                            block["input"].is_object(),
                            "{label}: input must be an object"
                        );
                    }
                    if role == "assistant" {
                        assert!(
                            block["type"] != "image",
                            "{label}: image in assistant message"
                        );
                    }
                }
            }
        }
        Wire::OpenAiChat => {
            for message in &messages {
                let role = message["role"].as_str().unwrap_or_default();
                let Some(parts) = message["content"].as_array() else {
                    continue;
                };
                for part in parts {
                    let kind = part["type"].as_str().unwrap_or_default();
                    match role {
                        "user" => {}
                        "assistant" => assert!(
                            kind == "text" || kind == "refusal",
                            "{label}: {kind} in an assistant message"
                        ),
                        _ => assert_eq!(kind, "text", "{label}: {kind} in a {role} message"),
                    }
                }
            }
        }
        Wire::Responses => {
            for item in &messages {
                if item["type"] == "reasoning" {
                    assert!(
                        item["encrypted_content"].is_string(),
                        "{label}: foreign reasoning"
                    );
                }
                if item["role"] == "assistant" {
                    for part in item["content"].as_array().into_iter().flatten() {
                        let kind = part["type"].as_str().unwrap_or_default();
                        assert!(
                            kind == "output_text" || kind == "refusal",
                            "{label}: {kind}"
                        );
                    }
                }
            }
            for tool in body["tools"].as_array().into_iter().flatten() {
                if tool["type"] == "function" {
                    assert!(
                        tool["strict"].is_boolean(),
                        "{label}: strict must be explicit"
                    );
                }
            }
        }
    }
}

/// A check on a converted request.
type Expectation = fn(&Value);

/// The conversions the module docs promise, checked on the fixtures where they apply.
#[test]
fn conversions_carry_media_reasoning_and_arguments_as_documented() {
    let cases: [(&str, Wire, Expectation); 8] = [
        (
            "openai-chat/media-and-odd-calls.json",
            Wire::Responses,
            |out| {
                // Custom (free-form) tools stay custom between the two OpenAI formats.
                let items = out["input"].as_array().expect("items");
                let call = items
                    .iter()
                    .find(|i| i["call_id"] == "call_patch" && i["name"].is_string());
                assert_eq!(call.expect("call")["type"], "custom_tool_call");
                assert_eq!(
                    call.expect("call")["input"],
                    "*** Begin Patch\n*** End Patch"
                );
                let output = items
                    .iter()
                    .find(|i| i["call_id"] == "call_patch" && i.get("output").is_some());
                assert_eq!(output.expect("output")["type"], "custom_tool_call_output");
                let tools = out["tools"].as_array().expect("tools");
                assert!(tools.contains(&json!({"type": "custom", "name": "apply_patch", "description": "Apply a patch", "format": {"type": "text"}})));
            },
        ),
        ("responses/unknown-items.json", Wire::OpenAiChat, |out| {
            let messages = out["messages"].as_array().expect("messages");
            let call = messages
                .iter()
                .find_map(|m| m["tool_calls"].as_array())
                .expect("calls");
            assert_eq!(call[0]["type"], "custom");
            assert_eq!(call[0]["custom"]["name"], "apply_patch");
            assert_eq!(out["tools"][0]["type"], "custom");
            assert_eq!(out["tools"][0]["custom"]["name"], "apply_patch");
        }),
        (
            "anthropic/tool-result-images.json",
            Wire::OpenAiChat,
            |out| {
                // The screenshot leaves the tool message and follows it in a user message.
                let messages = out["messages"].as_array().expect("messages");
                let tool = messages
                    .iter()
                    .find(|m| m["tool_call_id"] == "toolu_shot")
                    .expect("tool");
                assert!(!tool.to_string().contains("image_url"));
                let next = messages
                    .iter()
                    .skip_while(|m| m["role"] != "tool")
                    .find(|m| m["role"] == "user");
                let next = next.expect("user message after the tool messages");
                assert!(next.to_string().contains("data:image/png;base64,iVBOR"));
            },
        ),
        (
            "openai-chat/developer-and-parts.json",
            Wire::Anthropic,
            |out| {
                assert_eq!(
                    out["system"],
                    json!([{"type": "text", "text": "Answer in French."}, {"type": "text", "text": "Be concise."}])
                );
                let image = &out["messages"][0]["content"][2];
                assert_eq!(image["source"]["type"], "base64");
                assert_eq!(image["source"]["media_type"], "image/png");
                assert_eq!(
                    out["messages"][0]["content"][1]["source"],
                    json!({"type": "url", "url": "https://example.com/cat.png"})
                );
            },
        ),
        (
            "openai-chat/media-and-odd-calls.json",
            Wire::Anthropic,
            |out| {
                let calls = &out["messages"][1]["content"];
                assert_eq!(calls[1]["input"], json!({"input": "not valid json {"}));
                assert_eq!(calls[3]["input"], json!({}));
                assert_eq!(out["messages"][0]["content"][2]["type"], "document");
            },
        ),
        (
            "anthropic/thinking-signatures.json",
            Wire::Responses,
            |out| {
                assert!(
                    !out.to_string().contains("reasoning"),
                    "Anthropic thinking cannot go to OpenAI"
                );
            },
        ),
        ("responses/codex-style-turn.json", Wire::Anthropic, |out| {
            assert!(
                !out.to_string().contains("gAAAA"),
                "encrypted reasoning cannot go to Anthropic"
            );
            assert_eq!(out["system"][0]["text"], "You are Codex, a coding agent.");
            assert_eq!(out["messages"][0]["role"], "user");
            assert_eq!(
                out["messages"][0]["content"].as_array().map(Vec::len),
                Some(2)
            );
        }),
        ("anthropic/parallel-tool-use.json", Wire::Responses, |out| {
            assert_eq!(out["max_output_tokens"], 2048);
            assert_eq!(out["tools"][0]["strict"], false);
            let kinds: Vec<&str> = out["input"]
                .as_array()
                .expect("valid")
                .iter()
                .map(|i| i["type"].as_str().unwrap_or(""))
                .collect();
            assert_eq!(
                kinds,
                [
                    "message", // the system prompt, as a system message item
                    "message",
                    "message",
                    "function_call",
                    "function_call",
                    "function_call_output",
                    "function_call_output",
                    "message",
                    "message"
                ]
            );
        }),
    ];
    for (name, target, expect) in cases {
        let (wire, file) = name.split_once('/').expect("format/file");
        let source: Wire = wire.parse().expect("wire");
        let body = fixtures(source)
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v);
        let body = body.unwrap_or_else(|| panic!("no fixture {file}"));
        let request = source.parse_request(&body).expect("parses");
        expect(&target.emit_request(&request));
    }
}

#[test]
fn malformed_input_is_an_error_with_a_path() {
    let cases: &[(Wire, Value, &str, &str)] = &[
        (
            Wire::OpenAiChat,
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "narrator", "content": "b"}]}),
            "$.messages[1].role",
            "unknown role \"narrator\"",
        ),
        (
            Wire::OpenAiChat,
            json!({"messages": [{"role": "user", "content": 42}]}),
            "$.messages[0].content",
            "found a number",
        ),
        (
            Wire::OpenAiChat,
            json!({"messages": [{"role": "assistant", "tool_calls": "call"}]}),
            "$.messages[0].tool_calls",
            "expected an array",
        ),
        (
            Wire::OpenAiChat,
            json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "a", "type": "function"}]}]}),
            "$.messages[0].tool_calls[0].function",
            "missing",
        ),
        (
            Wire::OpenAiChat,
            json!({"messages": [{"role": "tool", "tool_call_id": 5, "content": "x"}]}),
            "$.messages[0].tool_call_id",
            "expected a string",
        ),
        (
            Wire::OpenAiChat,
            json!({"model": "m"}),
            "$.messages",
            "missing",
        ),
        (
            Wire::OpenAiChat,
            json!({"messages": {}}),
            "$.messages",
            "expected an array",
        ),
        (
            Wire::OpenAiChat,
            json!({"messages": [], "tools": [{"type": "function", "function": {"description": "no name"}}]}),
            "$.tools[0].function.name",
            "missing",
        ),
        (
            Wire::OpenAiChat,
            json!([]),
            "$",
            "expected a request object",
        ),
        (
            Wire::Anthropic,
            json!({"messages": [{"role": "developer", "content": "x"}]}),
            "$.messages[0].role",
            "not allowed",
        ),
        (
            Wire::Anthropic,
            json!({"system": 3, "messages": []}),
            "$.system",
            "string or an array",
        ),
        (
            Wire::Anthropic,
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}),
            "$.messages[0].content[0].tool_use_id",
            "missing",
        ),
        (
            Wire::Anthropic,
            json!({"messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": 1}]}]}),
            "$.messages[0].content[0].thinking",
            "expected a string",
        ),
        (
            Wire::Anthropic,
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text"}]}]}]}),
            "$.messages[0].content[0].content[0].text",
            "missing",
        ),
        (
            Wire::Anthropic,
            json!({"messages": [], "tools": [{"input_schema": {}}]}),
            "$.tools[0].name",
            "missing",
        ),
        (
            Wire::Responses,
            json!({"input": [{"type": "function_call_output", "output": "x"}]}),
            "$.input[0].call_id",
            "missing",
        ),
        (
            Wire::Responses,
            json!({"input": [{"role": "user", "content": "a"}, {"role": "critic", "content": "b"}]}),
            "$.input[1].role",
            "unknown role \"critic\"",
        ),
        (
            Wire::Responses,
            json!({"input": {"role": "user"}}),
            "$.input",
            "expected a string or an array",
        ),
        (
            Wire::Responses,
            json!({"input": [{"type": "reasoning", "summary": []}, {"type": "function_call", "call_id": "c", "name": 1, "arguments": "{}"}]}),
            "$.input[1].name",
            "expected a string",
        ),
        (
            Wire::Responses,
            json!({"input": [], "tools": [{"name": "f"}]}),
            "$.tools[0].type",
            "missing",
        ),
    ];
    for (wire, body, path, needle) in cases {
        let err: ParseError = wire.parse_request(body).expect_err("must fail");
        assert_eq!(
            err.position,
            Position::Path {
                line: None,
                path: path.to_string()
            },
            "{} {body}: {err}",
            wire.as_str()
        );
        assert!(
            err.message.contains(needle),
            "{err} does not mention {needle:?}"
        );
    }
}

/// Every value of a document replaced, one at a time, by each JSON type.
fn mutations(value: &Value) -> Vec<Value> {
    let replacements = [json!(null), json!(7), json!("s"), json!([]), json!({})];
    let mut out = Vec::new();
    for replacement in &replacements {
        if replacement != value {
            out.push(replacement.clone());
        }
    }
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                for mutated in mutations(item) {
                    let mut copy = items.clone();
                    copy[i] = mutated;
                    out.push(Value::Array(copy));
                }
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                for mutated in mutations(item) {
                    let mut copy = map.clone();
                    copy.insert(key.clone(), mutated);
                    out.push(Value::Object(copy));
                }
                let mut without = map.clone();
                without.shift_remove(key);
                out.push(Value::Object(without));
            }
        }
        _ => {}
    }
    out
}

/// Damaged input either fails with a path error or, when it still parses, round-trips exactly:
/// whatever the adapters accept, they give back unchanged. Never a panic.
#[test]
fn damaged_fixtures_fail_cleanly_or_round_trip() {
    let (mut accepted, mut rejected) = (0, 0);
    for wire in WIRES {
        for (name, body) in fixtures(wire) {
            for mutated in mutations(&body) {
                match wire.parse_request(&mutated) {
                    Ok(request) => {
                        assert_eq!(wire.emit_request(&request), mutated, "{name}: {mutated}");
                        for target in WIRES {
                            // Conversions of odd input must not panic either.
                            let _ = target.emit_request(&request);
                        }
                        accepted += 1;
                    }
                    Err(err) => {
                        assert!(
                            matches!(&err.position, Position::Path { path, .. } if path.starts_with('$')),
                            "{name}: {err}"
                        );
                        assert!(!err.message.is_empty());
                        rejected += 1;
                    }
                }
            }
        }
    }
    eprintln!("damaged fixtures: {accepted} accepted and round-tripped, {rejected} rejected");
    assert!(
        accepted > 1000 && rejected > 100,
        "accepted {accepted}, rejected {rejected}"
    );
}

#[test]
fn hostile_tool_ids_survive_as_valid_anthropic_ids() {
    let messages = vec![
        Message::user("go"),
        Message::tool_call("../../etc/passwd", "read", "{}"),
        Message::tool_result("../../etc/passwd", "denied"),
    ];
    let out = anthropic::emit_messages(&messages);
    let id = out[1]["content"][0]["id"].as_str().expect("id");
    assert_eq!(out[2]["content"][0]["tool_use_id"], id);
    assert!(
        id.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
        "{id}"
    );
    let back = anthropic::parse_messages(&Value::Array(out)).expect("parses");
    assert_eq!(check(&back, &CheckRules::anthropic()), vec![]);
}

// ---------------------------------------------------------------------------------------------
// Real traces

/// The shared traces directory, or `None` (with a loud SKIP line) when it is not there.
fn traces(sub: &str) -> Option<PathBuf> {
    let dir = crate_dir().join("../../../shared/data/traces").join(sub);
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "SKIP: real traces not found at {} — trace round trips NOT run",
            dir.display()
        );
        None
    }
}

fn jsonl_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("trace dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    files.sort();
    files
}

#[test]
fn tau_bench_trajectories_round_trip_through_openai_chat() {
    let Some(dir) = traces("tau-bench") else {
        return;
    };
    let text = fs::read_to_string(dir.join("gpt-4o-airline.json")).expect("tau-bench trace");
    let tasks: Value = serde_json::from_str(&text).expect("json");
    let mut messages_seen = 0;
    for (i, task) in tasks.as_array().expect("array of tasks").iter().enumerate() {
        let traj = &task["traj"];
        let messages =
            openai_chat::parse_messages(traj).unwrap_or_else(|e| panic!("task {i}: {e}"));
        messages_seen += messages.len();
        assert_eq!(
            &Value::Array(openai_chat::emit_messages(&messages)),
            traj,
            "task {i}"
        );
        // A clean source stays clean in the other formats.
        if check(&messages, &CheckRules::openai()).is_empty() {
            for target in [Wire::Anthropic, Wire::Responses] {
                let request = ctxkeeper_core::model::Request {
                    messages: messages.clone(),
                    ..Default::default()
                };
                let reparsed = target
                    .parse_request(&target.emit_request(&request))
                    .expect("reparse");
                assert_eq!(
                    check(&reparsed.messages, &rules_for(target)),
                    vec![],
                    "task {i} -> {}",
                    target.as_str()
                );
            }
        }
    }
    assert_eq!(messages_seen, 5308);

    // All 200 tasks concatenated: one 5,308-message session whose system prompts now sit in the
    // middle of the conversation. Anthropic has a single `system`, so the later ones become user
    // text and the request stays valid.
    let all: Vec<Value> = tasks
        .as_array()
        .expect("tasks")
        .iter()
        .flat_map(|t| t["traj"].as_array().cloned().unwrap_or_default())
        .collect();
    let messages = openai_chat::parse_messages(&Value::Array(all)).expect("concatenated trace");
    let request = ctxkeeper_core::model::Request {
        messages,
        ..Default::default()
    };
    let emitted = Wire::Anthropic.emit_request(&request);
    let reparsed = Wire::Anthropic.parse_request(&emitted).expect("reparse");
    assert_eq!(check(&reparsed.messages, &CheckRules::anthropic()), vec![]);
    assert_eq!(
        call_ids(&reparsed.messages, Wire::Anthropic),
        call_ids(&request.messages, Wire::Anthropic)
    );
}

#[test]
fn claude_code_messages_round_trip_through_anthropic() {
    let Some(dir) = traces("claude-code") else {
        return;
    };
    let mut seen = 0;
    for file in jsonl_files(&dir) {
        let text = fs::read_to_string(&file).expect("trace");
        for (line_no, line) in text.lines().enumerate() {
            let entry: Value = serde_json::from_str(line).expect("json line");
            if !matches!(entry["type"].as_str(), Some("user" | "assistant")) {
                continue;
            }
            let Some(message) = entry.get("message") else {
                continue;
            };
            let parsed = anthropic::parse_message(message, "$.message")
                .unwrap_or_else(|e| panic!("{}:{}: {e}", file.display(), line_no + 1));
            assert_eq!(
                anthropic::emit_message(&parsed),
                vec![message.clone()],
                "{}:{}",
                file.display(),
                line_no + 1
            );
            seen += 1;
        }
    }
    assert!(seen > 0, "no Claude Code messages found");
}

#[test]
fn codex_response_items_round_trip_through_responses() {
    let Some(dir) = traces("codex") else { return };
    for file in jsonl_files(&dir) {
        let text = fs::read_to_string(&file).expect("trace");
        let mut items = Vec::new();
        for (line_no, line) in text.lines().enumerate() {
            let entry: Value = serde_json::from_str(line).expect("json line");
            if entry["type"] != "response_item" {
                continue;
            }
            let payload = &entry["payload"];
            let message = responses::parse_message(payload, "$.payload")
                .unwrap_or_else(|e| panic!("{}:{}: {e}", file.display(), line_no + 1));
            assert_eq!(
                responses::emit_message(&message),
                vec![payload.clone()],
                "line {}",
                line_no + 1
            );
            items.push(payload.clone());
        }
        assert!(!items.is_empty(), "{}: no response items", file.display());
        // The whole rollout at once: items group into turns and come back unchanged.
        let messages = responses::parse_items(&items).expect("items parse");
        assert!(
            messages.len() < items.len(),
            "assistant-side items are grouped"
        );
        assert!(messages.iter().any(|m| m.role == Role::Tool));
        assert_eq!(responses::emit_messages(&messages), items);
        // Encrypted reasoning is carried, never counted as readable text.
        let encrypted = messages
            .iter()
            .flat_map(|m| &m.parts)
            .filter(|p| {
                matches!(
                    p,
                    Part::Reasoning {
                        encrypted: Some(_),
                        ..
                    }
                )
            })
            .count();
        assert!(encrypted > 0);
    }
}
