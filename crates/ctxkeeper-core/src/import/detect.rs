//! Telling a trace's format from its content.
//!
//! Detection reads as little as it can. JSON Lines formats are recognised by their first
//! complete line (or the next few, when the first is an unknown entry kind); a JSON document
//! is read once as a *sketch*: a tree of at most a few levels, a few array items and short
//! string prefixes, built while the parser skips everything else, so a 50 MB file costs one
//! tokenizing pass and almost no memory before the real import. The file name only breaks
//! ties (a `history` object in a `.traj` file is SWE-agent). A document that does not parse
//! at all (truncated, say) is recognised by the key names in its first 64 KB, so that the
//! import can then report the exact syntax error.
//!
//! ```
//! use ctxkeeper_core::import::{detect, TraceFormat};
//!
//! let codex = r#"{"timestamp":"2025-11-01T01:02:58Z","type":"session_meta","payload":{"id":"c6"}}"#;
//! assert_eq!(detect(codex, "rollout.jsonl"), Some(TraceFormat::Codex));
//! let chat = r#"[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]"#;
//! assert_eq!(detect(chat, "request.json"), Some(TraceFormat::OpenAiChat));
//! assert_eq!(detect("hello", "notes.txt"), None);
//! ```

use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::TraceFormat;

/// Levels of nesting a sketch keeps; deeper values become `null`.
const MAX_DEPTH: usize = 6;
/// Array items a sketch keeps per array.
const MAX_ITEMS: usize = 8;
/// Keys a sketch keeps per object.
const MAX_KEYS: usize = 64;
/// Characters a sketch keeps per string.
const MAX_STRING: usize = 80;
/// Lines of a JSON Lines file looked at before giving up.
const PROBE_LINES: usize = 16;
/// Bytes searched for key names when the content does not parse.
const SNIFF_BYTES: usize = 64 * 1024;

/// Codex rollout envelope types.
const CODEX_TYPES: [&str; 5] = [
    "session_meta",
    "response_item",
    "event_msg",
    "turn_context",
    "compacted",
];
/// Keys of a Claude Code entry envelope.
const CLAUDE_KEYS: [&str; 5] = ["sessionId", "parentUuid", "leafUuid", "uuid", "messageId"];
/// Keys of an OpenHands run besides `history`.
const OPENHANDS_KEYS: [&str; 6] = [
    "instance_id",
    "instruction",
    "issue",
    "metadata",
    "git_patch",
    "test_result",
];
/// Keys of a SWE-agent trajectory besides `history`.
const SWE_AGENT_KEYS: [&str; 4] = ["trajectory", "info", "environment", "replay_config"];
/// OpenAI Responses item types.
const RESPONSES_ITEM_TYPES: [&str; 12] = [
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "item_reference",
];
/// Content part types only OpenAI Responses uses.
const RESPONSES_PART_TYPES: [&str; 5] = [
    "input_text",
    "output_text",
    "input_image",
    "input_file",
    "refusal",
];
/// Content block types only Anthropic uses.
const ANTHROPIC_BLOCK_TYPES: [&str; 7] = [
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "document",
    "server_tool_use",
    "web_search_tool_result",
];

/// Detects the format of a trace from its content (and, as a tie-breaker, its file name).
///
/// Returns `None` when the content matches no known format.
pub fn detect(text: &str, file_name: &str) -> Option<TraceFormat> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .peekable();
    let first = lines.next()?;
    if first.starts_with('{') {
        if let Ok(entry) = sketch(first) {
            if let Some(format) = detect_entry(&entry) {
                return Some(format);
            }
            if lines.peek().is_none() {
                // The whole document is on one line.
                return detect_document(&entry, file_name);
            }
            return lines
                .take(PROBE_LINES)
                .find_map(|line| detect_entry(&sketch(line).ok()?));
        }
    } else if !first.starts_with('[') {
        return None;
    }
    match sketch(text) {
        Ok(doc) => detect_document(&doc, file_name),
        // Not one document: a JSON Lines file whose first line is broken, or a truncated
        // document.
        Err(_) => lines
            .take(PROBE_LINES)
            .find_map(|line| detect_entry(&sketch(line).ok()?))
            .or_else(|| sniff(text, file_name)),
    }
}

/// Recognises one entry of a JSON Lines format.
fn detect_entry(entry: &Value) -> Option<TraceFormat> {
    let map = entry.as_object()?;
    let entry_type = map.get("type").and_then(Value::as_str);
    if map.contains_key("payload")
        && (entry_type.is_some_and(|t| CODEX_TYPES.contains(&t)) || map.contains_key("timestamp"))
    {
        return Some(TraceFormat::Codex);
    }
    if entry_type.is_some() && CLAUDE_KEYS.iter().any(|key| map.contains_key(*key)) {
        return Some(TraceFormat::ClaudeCode);
    }
    if map.get("history").is_some_and(Value::is_array)
        && !map.contains_key("trajectory")
        && OPENHANDS_KEYS.iter().any(|key| map.contains_key(*key))
    {
        return Some(TraceFormat::OpenHands);
    }
    None
}

/// Recognises a whole JSON document from its sketch.
fn detect_document(doc: &Value, file_name: &str) -> Option<TraceFormat> {
    match doc {
        Value::Array(items) => {
            let first = items.first()?.as_object()?;
            if first.contains_key("traj") {
                return Some(TraceFormat::TauBench);
            }
            classify_messages(items, None)
        }
        Value::Object(map) => {
            if is_mini_swe_agent(map) {
                return Some(TraceFormat::MiniSweAgent);
            }
            if map.contains_key("history") || map.contains_key("trajectory") {
                let swe_agent = SWE_AGENT_KEYS.iter().any(|key| map.contains_key(*key))
                    || is_traj_file(file_name);
                return swe_agent.then_some(TraceFormat::SweAgent);
            }
            if let Some(messages) = map.get("messages").and_then(Value::as_array) {
                return classify_messages(messages, Some(map)).or(Some(TraceFormat::OpenAiChat));
            }
            if map.contains_key("input") {
                return Some(TraceFormat::Responses);
            }
            None
        }
        _ => None,
    }
}

/// A mini-swe-agent trajectory: `messages` with a `trajectory_format` of mini-swe-agent's, or
/// (files written without one) an `info.mini_version`.
fn is_mini_swe_agent(map: &Map<String, Value>) -> bool {
    map.get("messages").is_some_and(Value::is_array)
        && (map
            .get("trajectory_format")
            .and_then(Value::as_str)
            .is_some_and(|f| f.starts_with("mini-swe-agent"))
            || map
                .get("info")
                .is_some_and(|info| info.get("mini_version").is_some()))
}

/// Decides between the three wire formats from sketched messages (and the request body they
/// came from, if any). Plain `{role, content: "text"}` messages fit all three; they count as
/// OpenAI chat, whose parse reads them the same.
fn classify_messages(items: &[Value], body: Option<&Map<String, Value>>) -> Option<TraceFormat> {
    let mut chat = 0;
    let mut anthropic = 0;
    let mut responses = 0;
    let mut any_message = false;
    for item in items.iter().filter_map(Value::as_object) {
        let role = item.get("role").and_then(Value::as_str);
        any_message |= role.is_some();
        match item.get("type").and_then(Value::as_str) {
            Some(t) if RESPONSES_ITEM_TYPES.contains(&t) => responses += 1,
            _ => {}
        }
        if matches!(role, Some("system" | "developer" | "tool" | "function"))
            || ["tool_calls", "tool_call_id", "function_call"]
                .iter()
                .any(|k| item.contains_key(*k))
        {
            chat += 1;
        }
        for part in item
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match part.get("type").and_then(Value::as_str) {
                Some(t) if RESPONSES_PART_TYPES.contains(&t) => responses += 1,
                Some(t) if ANTHROPIC_BLOCK_TYPES.contains(&t) => anthropic += 1,
                Some("image") if part.get("source").is_some() => anthropic += 1,
                Some("image_url" | "input_audio") => chat += 1,
                _ => {}
            }
        }
    }
    if let Some(body) = body {
        if body.contains_key("system") {
            anthropic += 1;
        }
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if model.starts_with("claude") {
            anthropic += 1;
        }
        for tool in body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if tool.get("input_schema").is_some() {
                anthropic += 1;
            } else if tool.get("function").is_some() {
                chat += 1;
            }
        }
    }
    if responses > 0 && responses >= chat.max(anthropic) {
        Some(TraceFormat::Responses)
    } else if anthropic > chat {
        Some(TraceFormat::Anthropic)
    } else if chat > 0 || any_message {
        Some(TraceFormat::OpenAiChat)
    } else {
        None
    }
}

/// Looks for tell-tale key names in the start of content that does not parse.
fn sniff(text: &str, file_name: &str) -> Option<TraceFormat> {
    let mut end = text.len().min(SNIFF_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    let has = |needle: &str| head.contains(needle);
    if has("\"traj\"") && has("\"task_id\"") {
        Some(TraceFormat::TauBench)
    } else if has("\"response_item\"") || has("\"session_meta\"") {
        Some(TraceFormat::Codex)
    } else if has("\"parentUuid\"") || has("\"leafUuid\"") {
        Some(TraceFormat::ClaudeCode)
    } else if has("\"mini_version\"") || has("\"mini-swe-agent-") {
        Some(TraceFormat::MiniSweAgent)
    } else if has("\"trajectory\"") || is_traj_file(file_name) {
        Some(TraceFormat::SweAgent)
    } else if has("\"history\"") && (has("\"instruction\"") || has("\"instance_id\"")) {
        Some(TraceFormat::OpenHands)
    } else {
        None
    }
}

fn is_traj_file(file_name: &str) -> bool {
    file_name.ends_with(".traj")
}

/// Parses `text` into a bounded sketch (see the module docs).
fn sketch(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Sketch { depth: MAX_DEPTH }.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// The sketching visitor: keeps `depth` more levels.
#[derive(Debug, Clone, Copy)]
struct Sketch {
    depth: usize,
}

impl Sketch {
    fn inner(self) -> Option<Sketch> {
        self.depth.checked_sub(1).map(|depth| Sketch { depth })
    }
}

impl<'de> DeserializeSeed<'de> for Sketch {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Sketch {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.chars().take(MAX_STRING).collect()))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        if let Some(inner) = self.inner() {
            while items.len() < MAX_ITEMS {
                match seq.next_element_seed(inner)? {
                    Some(item) => items.push(item),
                    None => return Ok(Value::Array(items)),
                }
            }
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.len() >= MAX_KEYS {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = match self.inner() {
                Some(inner) => map.next_value_seed(inner)?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                    Value::Null
                }
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, file_name: &str, expect: Option<TraceFormat>) {
        assert_eq!(detect(text, file_name), expect, "{text}");
    }

    #[test]
    fn json_lines_formats_by_first_line() {
        check(
            "{\"timestamp\":\"t\",\"type\":\"session_meta\",\"payload\":{\"id\":\"x\"}}\n{}",
            "a.jsonl",
            Some(TraceFormat::Codex),
        );
        check(
            "{\"timestamp\":\"t\",\"type\":\"some_future_kind\",\"payload\":{}}\n",
            "a.jsonl",
            Some(TraceFormat::Codex),
        );
        check(
            "{\"type\":\"summary\",\"summary\":\"s\",\"leafUuid\":\"u\"}\n{\"type\":\"user\"}",
            "a.jsonl",
            Some(TraceFormat::ClaudeCode),
        );
        check(
            "{\"issue\":{},\"instruction\":\"fix\",\"history\":[{\"action\":\"message\"}]}\n",
            "output.jsonl",
            Some(TraceFormat::OpenHands),
        );
    }

    #[test]
    fn a_later_line_decides_when_the_first_is_unknown() {
        let text =
            "{\"kind\":\"header\"}\n{\"type\":\"user\",\"uuid\":\"u\",\"sessionId\":\"s\"}\n";
        check(text, "a.jsonl", Some(TraceFormat::ClaudeCode));
        check("{\"kind\":\"header\"}\n{\"other\":1}\n", "a.jsonl", None);
    }

    #[test]
    fn documents_by_shape() {
        check(
            "[\n {\"task_id\": 0,\n  \"traj\": []}\n]",
            "x.json",
            Some(TraceFormat::TauBench),
        );
        check(
            "{\n \"environment\": \"swe_main\",\n \"trajectory\": [],\n \"history\": []\n}",
            "x.json",
            Some(TraceFormat::SweAgent),
        );
        check(
            "{\n \"history\": []\n}",
            "run.traj",
            Some(TraceFormat::SweAgent),
        );
        check("{\n \"history\": []\n}", "run.json", None);
        check(
            r#"{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}"#,
            "body.json",
            Some(TraceFormat::OpenAiChat),
        );
        check(
            r#"{"model": "x", "system": "s", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}"#,
            "body.json",
            Some(TraceFormat::Anthropic),
        );
        check(
            r#"{"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]}"#,
            "body.json",
            Some(TraceFormat::Anthropic),
        );
        check(
            r#"{"model": "o3", "input": "hi"}"#,
            "body.json",
            Some(TraceFormat::Responses),
        );
        check(
            r#"[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]"#,
            "items.json",
            Some(TraceFormat::Responses),
        );
        check(
            r#"[{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": []}]"#,
            "chat.json",
            Some(TraceFormat::OpenAiChat),
        );
        check("[]", "x.json", None);
        check("[1, 2]", "x.json", None);
        check("42", "x.json", None);
    }

    #[test]
    fn one_line_documents() {
        check(
            r#"[{"task_id": 1, "traj": []}]"#,
            "x.json",
            Some(TraceFormat::TauBench),
        );
        check(
            r#"{"trajectory": [], "history": [], "info": {}}"#,
            "x",
            Some(TraceFormat::SweAgent),
        );
    }

    #[test]
    fn truncated_documents_are_sniffed() {
        check(
            "[\n {\"task_id\": 0, \"traj\": [{\"role\": \"us",
            "x.json",
            Some(TraceFormat::TauBench),
        );
        check(
            "{\n \"trajectory\": [{\"action\": ",
            "x.json",
            Some(TraceFormat::SweAgent),
        );
        check("{\n \"history\": [", "x.traj", Some(TraceFormat::SweAgent));
        check("{\n \"something\": [", "x.json", None);
        check(
            "{\"type\":\"response_item\",\"payload\":{\"type\":\"mess\n{\"type\":",
            "x.jsonl",
            Some(TraceFormat::Codex),
        );
    }

    #[test]
    fn sketch_is_bounded() {
        let long = "x".repeat(10_000);
        let items: Vec<String> = (0..100).map(|i| format!("{{\"k\":{i}}}")).collect();
        let text = format!("{{\"s\":\"{long}\",\"a\":[{}]}}", items.join(","));
        let value = sketch(&text).expect("valid JSON");
        assert_eq!(
            value["s"].as_str().map(|s| s.chars().count()),
            Some(MAX_STRING)
        );
        assert_eq!(value["a"].as_array().map(Vec::len), Some(MAX_ITEMS));
        let deep = format!("{}1{}", "[".repeat(20), "]".repeat(20));
        assert!(sketch(&deep).is_ok());
        assert!(sketch("[1, 2").is_err());
        assert!(sketch("[1] x").is_err());
    }

    #[test]
    fn blank_and_non_json_text_is_unknown() {
        check("", "x", None);
        check("\n  \n", "x", None);
        check("hello world", "x.jsonl", None);
        check(
            "\u{feff}[{\"task_id\": 1, \"traj\": []}]",
            "x",
            Some(TraceFormat::TauBench),
        );
    }
}
