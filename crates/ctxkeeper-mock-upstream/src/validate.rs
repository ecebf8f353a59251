//! Request validation, written from the providers' documented rules and captured errors.
//!
//! This is deliberately independent of `ctxkeeper_core::model::check`: the mock is a second
//! opinion on what ctxkeeper emits, so it must not share the code it is judging. Each function
//! checks what the real API rejects before it looks at the window (required fields, roles,
//! tool-call pairing) and answers with that API's exact 400.

use serde_json::{Map, Value};

use crate::errors::ApiError;

/// OpenAI Chat Completions: `model`, a non-empty `messages` array of known roles, and every
/// assistant `tool_calls` answered by `tool` messages right after it (and no `tool` message
/// that answers nothing).
pub(crate) fn chat(body: &Map<String, Value>) -> Result<(), ApiError> {
    if !body.get("model").is_some_and(Value::is_string) {
        return Err(ApiError::openai_400(
            "you must provide a model parameter",
            None,
            None,
        ));
    }
    let messages = openai_array(body, "messages")?;
    // Ids of the last assistant `tool_calls` still waiting for a `tool` answer.
    let mut pending: Option<Vec<String>> = None;
    for (index, message) in messages.iter().enumerate() {
        let role = openai_role(
            message,
            &format!("messages[{index}]"),
            CHAT_ROLES,
            CHAT_ROLES_TEXT,
        )?;
        if role == "tool" {
            let id = message.get("tool_call_id").and_then(Value::as_str);
            let answered = match (&mut pending, id) {
                (Some(ids), Some(id)) => ids
                    .iter()
                    .position(|pending| pending == id)
                    .map(|at| ids.remove(at))
                    .is_some(),
                _ => false,
            };
            if !answered {
                return Err(ApiError::openai_400(
                    "Invalid parameter: messages with role 'tool' must be a response to a \
                     preceeding message with 'tool_calls'.",
                    Some(&format!("messages.[{index}].role")),
                    None,
                ));
            }
            continue;
        }
        unanswered_calls(pending.take(), index)?;
        if role == "assistant" {
            let ids: Vec<String> = message
                .get("tool_calls")
                .and_then(Value::as_array)
                .map(|calls| {
                    calls
                        .iter()
                        .filter_map(|call| call.get("id").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            if !ids.is_empty() {
                pending = Some(ids);
            }
        }
    }
    unanswered_calls(pending, messages.len())
}

const CHAT_ROLES: &[&str] = &[
    "system",
    "assistant",
    "user",
    "function",
    "tool",
    "developer",
];
const CHAT_ROLES_TEXT: &str = "'system', 'assistant', 'user', 'function', 'tool', and 'developer'";

fn unanswered_calls(pending: Option<Vec<String>>, index: usize) -> Result<(), ApiError> {
    match pending {
        Some(ids) if !ids.is_empty() => Err(ApiError::openai_400(
            format!(
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. The following tool_call_ids did not have \
                 response messages: {}",
                ids.join(", ")
            ),
            Some(&format!("messages.[{index}].role")),
            None,
        )),
        _ => Ok(()),
    }
}

/// Whether a Responses request asks for server-side compaction: its last input item is
/// `{"type": "compaction_trigger"}`.
pub(crate) fn asks_compaction(body: &Map<String, Value>) -> bool {
    body.get("input")
        .and_then(Value::as_array)
        .and_then(|items| items.last())
        .and_then(|item| item.get("type"))
        .and_then(Value::as_str)
        == Some(COMPACTION_TRIGGER)
}

const COMPACTION_TRIGGER: &str = "compaction_trigger";

/// OpenAI Responses: `model`, input items of known roles, every `function_call_output`
/// answering an earlier `function_call` and every `function_call` answered. A
/// `previous_response_id` is refused as unknown: the mock stores no responses. Server-side
/// compaction items (`compaction_trigger`, only as the last item, and `compaction`) are
/// accepted only when `native_compaction` is on; otherwise refused as an OpenAI-compatible
/// server without them refuses an unknown item type.
pub(crate) fn responses(
    body: &Map<String, Value>,
    native_compaction: bool,
) -> Result<(), ApiError> {
    if !body.get("model").is_some_and(Value::is_string) {
        return Err(ApiError::openai_400(
            "Missing required parameter: 'model'.",
            Some("model"),
            Some("missing_required_parameter"),
        ));
    }
    if let Some(previous) = body.get("previous_response_id").and_then(Value::as_str) {
        return Err(ApiError::openai_400(
            format!("Previous response with id '{previous}' not found."),
            Some("previous_response_id"),
            Some("previous_response_not_found"),
        ));
    }
    let items = match body.get("input") {
        None | Some(Value::String(_)) => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ApiError::openai_400(
                format!(
                    "Invalid type for 'input': expected one of a string or array of input items, but got {} instead.",
                    json_type(other)
                ),
                Some("input"),
                Some("invalid_type"),
            ));
        }
    };
    let mut calls: Vec<&str> = Vec::new();
    let mut answered: Vec<&str> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let kind = item.get("type").and_then(Value::as_str);
        match kind {
            Some("function_call") => {
                if let Some(id) = item.get("call_id").and_then(Value::as_str) {
                    calls.push(id);
                }
            }
            Some("function_call_output") => {
                let id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if !calls.contains(&id) {
                    return Err(ApiError::openai_400(
                        format!("No tool call found for function call output with call_id {id}."),
                        Some("input"),
                        None,
                    ));
                }
                answered.push(id);
            }
            Some(kind @ (COMPACTION_TRIGGER | "compaction")) => {
                if !native_compaction {
                    return Err(ApiError::openai_400(
                        format!(
                            "Invalid value: '{kind}'. Supported values are: 'message', 'function_call', 'function_call_output', 'reasoning', 'custom_tool_call' and 'custom_tool_call_output'."
                        ),
                        Some(&format!("input[{index}].type")),
                        Some("invalid_value"),
                    ));
                }
                if kind == COMPACTION_TRIGGER && index + 1 != items.len() {
                    return Err(ApiError::openai_400(
                        "The 'compaction_trigger' item must be the final input item.",
                        Some(&format!("input[{index}]")),
                        None,
                    ));
                }
            }
            None | Some("message") => {
                openai_role(
                    item,
                    &format!("input[{index}]"),
                    RESPONSES_ROLES,
                    RESPONSES_ROLES_TEXT,
                )?;
            }
            Some(_) => {}
        }
    }
    match calls.iter().find(|id| !answered.contains(id)) {
        Some(id) => Err(ApiError::openai_400(
            format!("No tool output found for function call {id}."),
            Some("input"),
            None,
        )),
        None => Ok(()),
    }
}

const RESPONSES_ROLES: &[&str] = &["assistant", "system", "developer", "user"];
const RESPONSES_ROLES_TEXT: &str = "'assistant', 'system', 'developer', and 'user'";

/// Anthropic Messages: `model`, `max_tokens`, a non-empty `messages` array that starts with a
/// user message, roles `user`/`assistant` only, and every `tool_use` answered by a
/// `tool_result` in the very next message (and no `tool_result` without its `tool_use`).
/// Validates a Messages body; `inline_system` allows `system` messages inside `messages` (the
/// mid-conversation system beta), which then take no part in the tool-pairing rules.
pub(crate) fn anthropic(body: &Map<String, Value>, inline_system: bool) -> Result<(), ApiError> {
    for field in ["model", "max_tokens", "messages"] {
        if body.get(field).is_none_or(Value::is_null) {
            return Err(ApiError::anthropic_400(format!("{field}: Field required")));
        }
    }
    if !body.get("max_tokens").is_some_and(Value::is_u64) {
        return Err(ApiError::anthropic_400(
            "max_tokens: Input should be a valid integer",
        ));
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err(ApiError::anthropic_400(
            "messages: Input should be a valid list",
        ));
    };
    if messages.is_empty() {
        return Err(ApiError::anthropic_400(
            "messages: at least one message is required",
        ));
    }
    let mut previous_uses: Vec<&str> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let role = match message.get("role") {
            None => {
                return Err(ApiError::anthropic_400(format!(
                    "messages.{index}.role: Field required"
                )));
            }
            Some(Value::String(role)) if role == "user" || role == "assistant" => role.as_str(),
            Some(Value::String(role)) if role == "system" && inline_system && index > 0 => {
                continue;
            }
            Some(_) => {
                return Err(ApiError::anthropic_400(format!(
                    "messages.{index}.role: Input should be 'user' or 'assistant'"
                )));
            }
        };
        if index == 0 && role != "user" {
            return Err(ApiError::anthropic_400(
                "messages: first message must use the \"user\" role",
            ));
        }
        let blocks = message.get("content").and_then(Value::as_array);
        let blocks_of = |kind: &'static str| {
            blocks
                .into_iter()
                .flatten()
                .enumerate()
                .filter(move |(_, block)| block.get("type").and_then(Value::as_str) == Some(kind))
        };
        let results: Vec<(usize, &str)> = blocks_of("tool_result")
            .map(|(at, block)| {
                (
                    at,
                    block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                )
            })
            .collect();
        if let Some(missing) = missing_results(&previous_uses, &results) {
            return Err(ApiError::anthropic_400(format!(
                "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately \
                 after: {missing}. Each `tool_use` block must have a corresponding `tool_result` \
                 block in the next message.",
                index - 1
            )));
        }
        if let Some((at, id)) = results.iter().find(|(_, id)| !previous_uses.contains(id)) {
            return Err(ApiError::anthropic_400(format!(
                "messages.{index}.content.{at}: unexpected `tool_use_id` found in `tool_result` \
                 blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block \
                 in the previous message."
            )));
        }
        previous_uses = blocks_of("tool_use")
            .filter_map(|(_, block)| block.get("id").and_then(Value::as_str))
            .collect();
    }
    match missing_results(&previous_uses, &[]) {
        Some(missing) => Err(ApiError::anthropic_400(format!(
            "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately \
             after: {missing}. Each `tool_use` block must have a corresponding `tool_result` \
             block in the next message.",
            messages.len() - 1
        ))),
        None => Ok(()),
    }
}

/// The `tool_use` ids of the previous message that `results` leave unanswered, comma-joined.
fn missing_results(uses: &[&str], results: &[(usize, &str)]) -> Option<String> {
    let missing: Vec<&str> = uses
        .iter()
        .copied()
        .filter(|id| !results.iter().any(|(_, answered)| answered == id))
        .collect();
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// A required, non-empty array field of an OpenAI body.
fn openai_array<'a>(body: &'a Map<String, Value>, field: &str) -> Result<&'a Vec<Value>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Err(ApiError::openai_400(
            format!("Missing required parameter: '{field}'."),
            Some(field),
            Some("missing_required_parameter"),
        )),
        Some(Value::Array(items)) if items.is_empty() => Err(ApiError::openai_400(
            format!(
                "Invalid '{field}': empty array. Expected an array with minimum length 1, but got an empty array instead."
            ),
            Some(field),
            Some("empty_array"),
        )),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(ApiError::openai_400(
            format!(
                "Invalid type for '{field}': expected an array of objects, but got {} instead.",
                json_type(other)
            ),
            Some(field),
            Some("invalid_type"),
        )),
    }
}

/// The role of an OpenAI message or input item, which must be one of `allowed`.
fn openai_role<'a>(
    item: &'a Value,
    at: &str,
    allowed: &[&str],
    allowed_text: &str,
) -> Result<&'a str, ApiError> {
    if !item.is_object() {
        return Err(ApiError::openai_400(
            format!(
                "Invalid type for '{at}': expected an object, but got {} instead.",
                json_type(item)
            ),
            Some(at),
            Some("invalid_type"),
        ));
    }
    let param = format!("{at}.role");
    match item.get("role") {
        None | Some(Value::Null) => Err(ApiError::openai_400(
            format!("Missing required parameter: '{param}'."),
            Some(&param),
            Some("missing_required_parameter"),
        )),
        Some(Value::String(role)) if allowed.contains(&role.as_str()) => Ok(role),
        Some(other) => {
            let shown = other
                .as_str()
                .map_or_else(|| other.to_string(), str::to_owned);
            Err(ApiError::openai_400(
                format!("Invalid value: '{shown}'. Supported values are: {allowed_text}."),
                Some(&param),
                Some("invalid_value"),
            ))
        }
    }
}

/// How OpenAI names a JSON type in its "Invalid type" messages.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(number) if number.is_f64() => "a decimal",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(result: Result<(), ApiError>) -> String {
        let error = result.expect_err("a 400");
        let body = &error.body;
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn chat_accepts_answered_parallel_calls() {
        let body = object(json!({"model": "gpt-4o", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "b", "content": "2"},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "user", "content": "go on"}]}));
        assert_eq!(chat(&body), Ok(()));
    }

    #[test]
    fn chat_names_the_unanswered_ids_and_where() {
        let body = object(json!({"model": "gpt-4o", "messages": [
            {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "user", "content": "?"}]}));
        let error = chat(&body).expect_err("unanswered b");
        assert_eq!(error.body["error"]["param"], "messages.[2].role");
        assert!(message(Err(error)).ends_with("did not have response messages: b"));
    }

    #[test]
    fn chat_rejects_a_tool_message_for_an_unknown_call() {
        let body = object(json!({"model": "m", "messages": [
            {"role": "assistant", "tool_calls": [{"id": "a"}]},
            {"role": "tool", "tool_call_id": "zzz", "content": "1"}]}));
        assert!(message(chat(&body)).contains("must be a response to a preceeding message"));
    }

    #[test]
    fn chat_rejects_unknown_roles_and_missing_fields() {
        let unknown =
            object(json!({"model": "m", "messages": [{"role": "narrator", "content": ""}]}));
        assert!(message(chat(&unknown)).starts_with("Invalid value: 'narrator'."));
        assert_eq!(
            message(chat(&object(json!({"messages": []})))),
            "you must provide a model parameter"
        );
        assert_eq!(
            message(chat(&object(json!({"model": "m"})))),
            "Missing required parameter: 'messages'."
        );
    }

    #[test]
    fn responses_pairs_calls_with_outputs() {
        let ok = object(json!({"model": "m", "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "x"}]}));
        assert_eq!(responses(&ok, false), Ok(()));
        let orphan = object(json!({"model": "m", "input": [
            {"type": "function_call_output", "call_id": "c9", "output": "x"}]}));
        assert_eq!(
            message(responses(&orphan, false)),
            "No tool call found for function call output with call_id c9."
        );
        let unanswered = object(json!({"model": "m", "input": [
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]}));
        assert_eq!(
            message(responses(&unanswered, false)),
            "No tool output found for function call c1."
        );
    }

    #[test]
    fn compaction_items_need_native_compaction() {
        let trigger = object(json!({"model": "m", "input": [
            {"role": "user", "content": "hi"},
            {"type": "compaction_trigger"}]}));
        assert!(asks_compaction(&trigger));
        assert_eq!(responses(&trigger, true), Ok(()));
        assert_eq!(
            message(responses(&trigger, false)),
            "Invalid value: 'compaction_trigger'. Supported values are: 'message', 'function_call', 'function_call_output', 'reasoning', 'custom_tool_call' and 'custom_tool_call_output'."
        );
        let early = object(json!({"model": "m", "input": [
            {"type": "compaction_trigger"},
            {"role": "user", "content": "hi"}]}));
        assert!(!asks_compaction(&early));
        assert_eq!(
            message(responses(&early, true)),
            "The 'compaction_trigger' item must be the final input item."
        );
        let item = object(json!({"model": "m", "input": [
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "x"},
            {"role": "user", "content": "go on"}]}));
        assert_eq!(responses(&item, true), Ok(()));
        assert!(responses(&item, false).is_err());
    }

    fn anthropic_message(body: Value) -> String {
        let error = anthropic(&object(body), false).expect_err("a 400");
        assert_eq!(error.body["type"], "error");
        assert_eq!(error.body["error"]["type"], "invalid_request_error");
        error.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn anthropic_requires_its_fields_and_a_user_first() {
        assert_eq!(
            anthropic_message(
                json!({"model": "claude", "messages": [{"role": "user", "content": "x"}]})
            ),
            "max_tokens: Field required"
        );
        assert_eq!(
            anthropic_message(
                json!({"model": "c", "max_tokens": 5, "messages": [{"role": "assistant", "content": "x"}]})
            ),
            "messages: first message must use the \"user\" role"
        );
        assert_eq!(
            anthropic_message(
                json!({"model": "c", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})
            ),
            "messages.0.role: Input should be 'user' or 'assistant'"
        );
    }

    #[test]
    fn anthropic_tool_use_needs_a_result_in_the_next_message() {
        let body = json!({"model": "c", "max_tokens": 5, "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "text", "text": "no result"}]}]});
        assert_eq!(
            anthropic_message(body),
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: \
             toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
        );
    }

    #[test]
    fn anthropic_tool_result_needs_its_tool_use() {
        let body = json!({"model": "c", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}]}]});
        assert!(anthropic_message(body).starts_with(
            "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x."
        ));
        let ok = json!({"model": "c", "max_tokens": 5, "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "1"}]}]});
        assert_eq!(anthropic(&object(ok), false), Ok(()));
    }

    #[test]
    fn anthropic_system_messages_need_the_mid_conversation_beta() {
        let body = object(json!({"model": "c", "max_tokens": 5, "messages": [
            {"role": "user", "content": "x"},
            {"role": "system", "content": "agent list"},
            {"role": "assistant", "content": "ok"}]}));
        assert_eq!(anthropic(&body, true), Ok(()));
        let error = anthropic(&body, false).expect_err("without the beta");
        assert_eq!(
            error.body["error"]["message"],
            "messages.1.role: Input should be 'user' or 'assistant'"
        );
    }
}
