//! Reading `usage` out of upstream answers, streamed or not, and whether they call a tool.
//!
//! A streamed answer is forwarded to the client byte for byte as it arrives; [`SseUsage`] only
//! watches the bytes go by. It splits them into server-sent events (`\n\n` or `\r\n\r\n`
//! separated, `data:` lines joined) and keeps the input tokens of the last event that reports
//! usage: OpenAI Chat's final chunk (`usage.prompt_tokens`, with `stream_options.include_usage`),
//! Responses' `response.completed` (`response.usage.input_tokens`), Anthropic's
//! `message_start` (`message.usage.input_tokens` plus the cache-read and cache-write tokens).
//! Re-encoding parsed events would risk changing what the client sees, so the gateway parses a
//! copy instead of a transformed stream.
//!
//! [`StreamHead`] reads the opening events of a streamed answer to decide whether it can go to
//! the client: the Responses API answers a request that does not fit the window with HTTP 200
//! and then an `error` (or `response.failed`) event, so the status alone does not tell. The
//! gateway holds the bytes back until the first event that carries content, or the first error.
//!
//! ```
//! use ctxkeeper_gateway::streaming::SseUsage;
//!
//! let mut usage = SseUsage::default();
//! usage.feed(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":");
//! usage.feed(b"{\"input_tokens\":120,\"cache_read_input_tokens\":30}}}\n\n");
//! assert_eq!(usage.input_tokens(), Some(150));
//! ```

use serde_json::Value;

use crate::telemetry::UsageReport;
use crate::telemetry::usage::event_may_report;

/// The input tokens an answer body reports, if any.
pub fn input_tokens(body: &Value) -> Option<u64> {
    let usage = body
        .get("usage")
        .filter(|u| u.is_object())
        .or_else(|| body.get("response").and_then(|r| r.get("usage")))
        .or_else(|| body.get("message").and_then(|m| m.get("usage")))?;
    if let Some(prompt) = usage.get("prompt_tokens").and_then(Value::as_u64) {
        // OpenAI Chat: prompt_tokens already includes cached tokens.
        return Some(prompt);
    }
    let input = usage.get("input_tokens").and_then(Value::as_u64)?;
    // Anthropic reports cached parts apart from input_tokens; Responses includes them in
    // input_tokens and has no such fields, so adding them is right for both.
    let cached = ["cache_read_input_tokens", "cache_creation_input_tokens"]
        .iter()
        .filter_map(|field| usage.get(*field).and_then(Value::as_u64))
        .sum::<u64>();
    Some(input + cached)
}

/// Splits a server-sent-event byte stream into events, whatever the chunking.
#[derive(Debug, Default)]
pub struct SseSplitter {
    /// Bytes of the event being received.
    pending: Vec<u8>,
}

/// The most bytes one event may buffer; larger events (a huge tool-call delta) are skipped,
/// since usage, preamble and error events are small.
const MAX_EVENT: usize = 1 << 20;

impl SseSplitter {
    /// Feeds the next chunk and calls `each` with the raw bytes of every event it completes
    /// (without the blank line that ends it).
    pub fn feed(&mut self, chunk: &[u8], mut each: impl FnMut(&[u8])) {
        let mut rest = chunk;
        while let Some(end) = find_event_end(&self.pending, rest) {
            let (head, tail) = rest.split_at(end.consumed);
            self.pending.extend_from_slice(head);
            let event = std::mem::take(&mut self.pending);
            each(&event[..event.len() - end.separator]);
            rest = tail;
        }
        if self.pending.len() + rest.len() <= MAX_EVENT {
            self.pending.extend_from_slice(rest);
        } else {
            self.pending.clear();
        }
    }
}

/// The `event:` name and the joined `data:` lines of one raw event; `None` when it is not
/// UTF-8.
pub fn parse_event(raw: &[u8]) -> Option<(Option<String>, String)> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut name = None;
    let mut data = String::new();
    for line in text.lines() {
        if let Some(value) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        } else if let Some(value) = line.strip_prefix("event:") {
            name = Some(value.trim().to_string());
        }
    }
    Some((name, data))
}

/// Watches a server-sent-event byte stream for `usage`, and for a call of a client tool
/// ([`calls_tools`]). See the [module docs](self).
#[derive(Debug, Default)]
pub struct SseUsage {
    splitter: SseSplitter,
    input_tokens: Option<u64>,
    called_tools: bool,
    report: UsageReport,
}

impl SseUsage {
    /// Feeds the next chunk of the stream.
    pub fn feed(&mut self, chunk: &[u8]) {
        let mut found = self.input_tokens;
        let mut called = self.called_tools;
        let report = &mut self.report;
        self.splitter.feed(chunk, |raw| {
            // Cheap filter first: most events are content deltas without usage.
            if event_may_report(raw)
                && let Some((_, data)) = parse_event(raw)
                && let Ok(value) = serde_json::from_str::<Value>(&data)
            {
                if let Some(tokens) = input_tokens(&value).filter(|tokens| *tokens > 0) {
                    found = Some(tokens);
                }
                report.merge(&value);
            }
            called = called || event_calls_tools(raw);
        });
        self.input_tokens = found;
        self.called_tools = called;
    }

    /// Everything the events so far reported about usage and how the answer ended.
    pub fn report(&self) -> &UsageReport {
        &self.report
    }

    /// The input tokens of the last event that reported them.
    pub fn input_tokens(&self) -> Option<u64> {
        self.input_tokens
    }

    /// Whether an event so far called a client tool.
    pub fn called_tools(&self) -> bool {
        self.called_tools
    }
}

/// The output items of the Responses API that a client runs (server-side tools such as web
/// search run within the answer and end in a message).
const CLIENT_CALL_ITEMS: [&str; 6] = [
    "function_call",
    "custom_tool_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "computer_call",
];

/// Whether an answer calls a tool the client runs, so the agent's turn goes on: an Anthropic
/// `tool_use` block (whole, streamed block start, or the `tool_use` stop reason), an OpenAI
/// Chat `tool_calls` (message, delta, or finish reason), a Responses call item (in `output`,
/// or a streamed `item`). Reads a whole answer body or one streamed event's data alike.
///
/// ```
/// use ctxkeeper_gateway::streaming::calls_tools;
/// use serde_json::json;
/// assert!(calls_tools(&json!({"content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]})));
/// assert!(calls_tools(&json!({"type": "response.output_item.added", "item": {"type": "function_call"}})));
/// assert!(!calls_tools(&json!({"choices": [{"message": {"content": "Done."}, "finish_reason": "stop"}]})));
/// ```
pub fn calls_tools(value: &Value) -> bool {
    let is_tool_use = |block: &Value| type_of(block) == Some("tool_use");
    let is_call_item =
        |item: &Value| type_of(item).is_some_and(|kind| CLIENT_CALL_ITEMS.contains(&kind));
    let any_in = |array: Option<&Value>, test: &dyn Fn(&Value) -> bool| {
        array
            .and_then(Value::as_array)
            .is_some_and(|items| items.iter().any(test))
    };
    // Anthropic: a whole message, a streamed block's start, the stop reason.
    let anthropic = any_in(value.get("content"), &is_tool_use)
        || value.get("content_block").is_some_and(is_tool_use)
        || [
            value.get("stop_reason"),
            value.pointer("/delta/stop_reason"),
        ]
        .into_iter()
        .flatten()
        .any(|reason| reason == "tool_use");
    // OpenAI Chat: a whole message or a streamed delta, or the finish reason.
    let chat = any_in(value.get("choices"), &|choice: &Value| {
        choice
            .get("finish_reason")
            .is_some_and(|r| r == "tool_calls")
            || ["message", "delta"].iter().any(|field| {
                choice
                    .get(*field)
                    .and_then(|m| m.get("tool_calls"))
                    .and_then(Value::as_array)
                    .is_some_and(|calls| !calls.is_empty())
            })
    });
    // Responses: a whole response's output (or the completed event's), a streamed item.
    let responses = any_in(value.get("output"), &is_call_item)
        || any_in(value.pointer("/response/output"), &is_call_item)
        || value.get("item").is_some_and(is_call_item);
    anthropic || chat || responses
}

/// An object's `type`.
fn type_of(value: &Value) -> Option<&str> {
    value.get("type").and_then(Value::as_str)
}

/// Whether one raw streamed event calls a client tool ([`calls_tools`]).
fn event_calls_tools(raw: &[u8]) -> bool {
    // Cheap filter first: only events naming a tool call are parsed.
    let names_call = |needle: &[u8]| raw.windows(needle.len()).any(|w| w == needle);
    if !(names_call(b"tool_use") || names_call(b"tool_calls") || names_call(b"_call")) {
        return false;
    }
    parse_event(raw)
        .and_then(|(_, data)| serde_json::from_str::<Value>(&data).ok())
        .is_some_and(|value| calls_tools(&value))
}

/// What the opening events of a streamed answer decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opening {
    /// An event carrying content (or anything the gateway does not know to be a preamble):
    /// the answer is going well and may be released to the client.
    Content,
    /// An error event came before any content; its data, to classify.
    Error(String),
}

/// Reads the opening events of a streamed answer until one decides it. See the
/// [module docs](self).
///
/// ```
/// use ctxkeeper_gateway::streaming::{Opening, StreamHead};
///
/// let mut head = StreamHead::default();
/// assert_eq!(head.feed(b"event: response.created\ndata: {\"type\":\"response.created\"}\n\n"), None);
/// let error = b"event: error\ndata: {\"type\":\"error\",\"code\":\"context_length_exceeded\"}\n\n";
/// assert!(matches!(head.feed(error), Some(Opening::Error(_))));
/// ```
#[derive(Debug, Default)]
pub struct StreamHead {
    splitter: SseSplitter,
    decided: Option<Opening>,
    /// Events seen so far (a preamble, when nothing is decided yet).
    events: usize,
}

impl StreamHead {
    /// Feeds the next chunk; returns the decision once an event makes it (and again on every
    /// later call).
    pub fn feed(&mut self, chunk: &[u8]) -> Option<Opening> {
        if self.decided.is_none() {
            let mut decided = None;
            let mut events = 0;
            self.splitter.feed(chunk, |raw| {
                if decided.is_none() {
                    events += 1;
                    decided = opening_event(raw);
                }
            });
            self.events += events;
            self.decided = decided;
        }
        self.decided.clone()
    }

    /// Whether any event arrived (with nothing decided: only preamble events, the opening of
    /// an answer whose content never came).
    pub fn opened(&self) -> bool {
        self.events > 0
    }
}

/// Events that open a stream before any content: Responses' `response.created`,
/// `response.in_progress` and `response.queued`, Anthropic's `message_start` and `ping`.
const PREAMBLE: &[&str] = &[
    "response.created",
    "response.in_progress",
    "response.queued",
    "message_start",
    "ping",
];

/// `None` for a preamble event (keep waiting), else what the event decides.
fn opening_event(raw: &[u8]) -> Option<Opening> {
    let Some((name, data)) = parse_event(raw) else {
        return Some(Opening::Content);
    };
    if name.is_none() && data.is_empty() {
        // A comment (`: keep-alive`) or an empty event.
        return None;
    }
    let value = serde_json::from_str::<Value>(&data).ok();
    let kind = value
        .as_ref()
        .and_then(|v| v.get("type"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .or(name);
    let is_error = matches!(kind.as_deref(), Some("error" | "response.failed"))
        // OpenAI-compatible chat servers put a bare `{"error": {...}}` chunk in the stream.
        || value
            .as_ref()
            .is_some_and(|v| v.get("error").is_some_and(Value::is_object) && v.get("choices").is_none());
    if is_error {
        return Some(Opening::Error(data));
    }
    if value.as_ref().is_some_and(role_only_chunk) {
        return None;
    }
    match kind.as_deref() {
        Some(kind) if PREAMBLE.contains(&kind) => None,
        _ => Some(Opening::Content),
    }
}

/// Chat Completions' opening chunk, which names the role and carries nothing yet
/// (`{"choices":[{"delta":{"role":"assistant","content":""},"finish_reason":null}]}`): a
/// stream cut right after it is a failed answer, not an empty one.
fn role_only_chunk(chunk: &Value) -> bool {
    let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
        return false;
    };
    let empty = |value: &Value| match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    };
    !choices.is_empty()
        && choices.iter().all(|choice| {
            choice.get("finish_reason").is_none_or(Value::is_null)
                && choice
                    .get("delta")
                    .and_then(Value::as_object)
                    .is_some_and(|delta| {
                        delta
                            .iter()
                            .all(|(field, value)| field == "role" || empty(value))
                    })
        })
}

struct EventEnd {
    /// Bytes of the new chunk up to and including the separator.
    consumed: usize,
    /// Length of the separator.
    separator: usize,
}

/// Finds the end of the event being received in `pending` + `chunk`: a blank line.
fn find_event_end(pending: &[u8], chunk: &[u8]) -> Option<EventEnd> {
    // A separator may straddle the boundary: look at up to 3 pending bytes too.
    let carry = pending.len().min(3);
    let mut window = Vec::with_capacity(carry + chunk.len().min(4));
    window.extend_from_slice(&pending[pending.len() - carry..]);
    for (i, byte) in chunk.iter().enumerate() {
        if *byte != b'\n' {
            continue;
        }
        // Bytes before this newline, from the carry and the chunk.
        let before = |n: usize| -> Option<u8> {
            if n <= i {
                Some(chunk[i - n])
            } else {
                let back = n - i;
                (back <= carry).then(|| window[carry - back])
            }
        };
        if before(1) == Some(b'\n') {
            return Some(EventEnd {
                consumed: i + 1,
                separator: 2,
            });
        }
        if before(1) == Some(b'\r') && before(2) == Some(b'\n') && before(3) == Some(b'\r') {
            return Some(EventEnd {
                consumed: i + 1,
                separator: 4,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fed_in_pieces(stream: &str, piece: usize) -> Option<u64> {
        let mut usage = SseUsage::default();
        for chunk in stream.as_bytes().chunks(piece) {
            usage.feed(chunk);
        }
        usage.input_tokens()
    }

    #[test]
    fn usage_is_found_in_every_provider_stream_whatever_the_chunking() {
        let openai = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n\
                      data: {\"choices\":[],\"usage\":{\"prompt_tokens\":42,\"completion_tokens\":2}}\n\n\
                      data: [DONE]\n\n";
        let responses = "event: response.created\r\ndata: {\"type\":\"response.created\"}\r\n\r\n\
                         event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":77}}}\r\n\r\n";
        let anthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_creation_input_tokens\":5}}}\n\n\
                         event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\n\n";
        for piece in [1, 2, 3, 7, 1000] {
            assert_eq!(fed_in_pieces(openai, piece), Some(42), "piece {piece}");
            assert_eq!(fed_in_pieces(responses, piece), Some(77), "piece {piece}");
            assert_eq!(fed_in_pieces(anthropic, piece), Some(15), "piece {piece}");
        }
    }

    fn opening(stream: &str, piece: usize) -> Option<Opening> {
        let mut head = StreamHead::default();
        let mut decided = None;
        for chunk in stream.as_bytes().chunks(piece) {
            decided = head.feed(chunk);
        }
        decided
    }

    #[test]
    fn the_opening_of_a_stream_is_held_until_content_or_an_error() {
        let overflow = "event: response.created\ndata: {\"type\":\"response.created\"}\n\n\
                        event: response.in_progress\ndata: {\"type\":\"response.in_progress\"}\n\n\
                        event: error\ndata: {\"type\":\"error\",\"error\":{\"code\":\"context_length_exceeded\"}}\n\n";
        let failed = "event: response.created\ndata: {\"type\":\"response.created\"}\n\n\
                      event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"context_length_exceeded\"}}}\n\n";
        let content = "event: response.created\ndata: {\"type\":\"response.created\"}\n\n\
                       event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\"}\n\n";
        let anthropic = ": keep-alive\n\nevent: message_start\ndata: {\"type\":\"message_start\"}\n\n\
                         event: ping\ndata: {\"type\":\"ping\"}\n\n\
                         event: content_block_start\ndata: {\"type\":\"content_block_start\"}\n\n";
        // Chat's opening chunk names the role only: a preamble, decided by what follows it.
        let chat_role =
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        let chat =
            format!("{chat_role}data: {{\"choices\":[{{\"delta\":{{\"content\":\"Hi\"}}}}]}}\n\n");
        let chat_cut_error = format!(
            "{chat_role}{}",
            "data: {\"error\":{\"message\":\"upstream failed\"}}\n\n"
        );
        let chat_error =
            "data: {\"error\":{\"message\":\"maximum context length is 10 tokens\"}}\n\n";
        for piece in [1, 5, 1000] {
            let Some(Opening::Error(data)) = opening(overflow, piece) else {
                panic!("piece {piece}: the error event decides");
            };
            assert!(data.contains("context_length_exceeded"));
            assert!(ctxkeeper_core::overflow::classify(0, &data).is_some());
            assert!(matches!(opening(failed, piece), Some(Opening::Error(_))));
            assert!(matches!(
                opening(chat_error, piece),
                Some(Opening::Error(_))
            ));
            assert_eq!(opening(content, piece), Some(Opening::Content));
            assert_eq!(opening(anthropic, piece), Some(Opening::Content));
            assert_eq!(opening(&chat, piece), Some(Opening::Content));
            assert!(matches!(
                opening(&chat_cut_error, piece),
                Some(Opening::Error(_))
            ));
            assert_eq!(
                opening(chat_role, piece),
                None,
                "piece {piece}: the role alone decides nothing"
            );
        }
        // Only the preamble so far: undecided.
        assert_eq!(
            opening(
                "event: response.created\ndata: {\"type\":\"response.created\"}\n\n",
                7
            ),
            None
        );
    }

    #[test]
    fn bodies_report_usage_in_each_shape() {
        assert_eq!(
            input_tokens(&json!({"usage": {"prompt_tokens": 9}})),
            Some(9)
        );
        assert_eq!(
            input_tokens(&json!({"usage": {"input_tokens": 9, "cache_read_input_tokens": 1}})),
            Some(10)
        );
        assert_eq!(input_tokens(&json!({"id": "x"})), None);
    }
}
