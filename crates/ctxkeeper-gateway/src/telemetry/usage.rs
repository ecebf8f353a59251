//! What an upstream answer reports about itself, normalized across the three wire formats for
//! the inference span: token usage (input tokens *including* cache reads and writes, as the
//! GenAI conventions ask; Anthropic reports them apart), the finish reasons, the response's
//! model and id. A whole body is read at once ([`UsageReport::from_body`]); a stream event by
//! event ([`UsageReport::merge`]), later events completing earlier ones (Anthropic's
//! `message_start` carries the input, its `message_delta` the output and stop reason).
//!
//! ```
//! use ctxkeeper_gateway::telemetry::UsageReport;
//! use serde_json::json;
//!
//! let report = UsageReport::from_body(&json!({
//!     "id": "msg_1", "type": "message", "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
//!     "usage": {"input_tokens": 20, "cache_read_input_tokens": 1000,
//!               "cache_creation_input_tokens": 100, "output_tokens": 7}
//! }));
//! assert_eq!(report.input_tokens, Some(1120));
//! assert_eq!(report.cache_read_tokens, Some(1000));
//! assert_eq!(report.cache_write_tokens, Some(100));
//! assert_eq!(report.finish_reasons, ["end_turn"]);
//! ```

use serde_json::Value;

/// The usage and outcome an answer reports; `None` for what it did not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageReport {
    /// Every input token, cache reads and writes included.
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// Input tokens served from the provider's prompt cache.
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to the provider's prompt cache.
    pub cache_write_tokens: Option<u64>,
    pub finish_reasons: Vec<String>,
    pub response_model: Option<String>,
    pub response_id: Option<String>,
}

impl UsageReport {
    /// The report of a whole answer body.
    pub fn from_body(body: &Value) -> UsageReport {
        let mut report = UsageReport::default();
        report.merge(body);
        report
    }

    /// The fresh input tokens: those the provider's cache did not serve.
    pub fn fresh_input_tokens(&self) -> Option<u64> {
        let input = self.input_tokens?;
        Some(input.saturating_sub(self.cache_read_tokens.unwrap_or(0)))
    }

    /// Completes the report with one streamed event's data (or a whole body).
    pub fn merge(&mut self, value: &Value) {
        let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
        // Responses events wrap the response; Anthropic's `message_start` wraps the message.
        let target = match (value.get("response"), value.get("message")) {
            (Some(response), _) if response.is_object() => response,
            (_, Some(message)) if message.is_object() && kind == "message_start" => message,
            _ => value,
        };
        let anthropic = matches!(kind, "message" | "message_start" | "message_delta")
            || target.get("type").and_then(Value::as_str) == Some("message");
        if let Some(usage) = target.get("usage").filter(|u| u.is_object()) {
            self.merge_usage(usage, anthropic);
        }
        if let Some(model) = target.get("model").and_then(Value::as_str) {
            self.response_model = Some(model.to_string());
        }
        if let Some(id) = target.get("id").and_then(Value::as_str) {
            self.response_id = Some(id.to_string());
        }
        self.merge_finish(value, target);
    }

    fn merge_usage(&mut self, usage: &Value, anthropic: bool) {
        let field = |path: &str| usage.pointer(path).and_then(Value::as_u64);
        if let Some(output) = field("/completion_tokens").or_else(|| field("/output_tokens")) {
            self.output_tokens = Some(output);
        }
        if let Some(prompt) = field("/prompt_tokens") {
            // OpenAI Chat: the prompt tokens include the cached ones.
            self.input_tokens = Some(prompt);
            self.cache_read_tokens = field("/prompt_tokens_details/cached_tokens");
            self.cache_write_tokens = field("/prompt_tokens_details/cache_write_tokens");
            return;
        }
        let Some(input) = field("/input_tokens") else {
            return;
        };
        let read = field("/cache_read_input_tokens");
        let write = field("/cache_creation_input_tokens");
        if anthropic || read.is_some() || write.is_some() {
            // Anthropic counts cached tokens apart from `input_tokens`; a later event that
            // repeats `input_tokens` alone keeps the cache counts seen before.
            self.cache_read_tokens = read.or(self.cache_read_tokens);
            self.cache_write_tokens = write.or(self.cache_write_tokens);
            let cached = self.cache_read_tokens.unwrap_or(0) + self.cache_write_tokens.unwrap_or(0);
            self.input_tokens = Some(input + cached);
        } else {
            // Responses: `input_tokens` includes the cached ones.
            self.input_tokens = Some(input);
            self.cache_read_tokens = field("/input_tokens_details/cached_tokens");
            self.cache_write_tokens = field("/input_tokens_details/cache_write_tokens");
        }
    }

    fn merge_finish(&mut self, value: &Value, target: &Value) {
        let mut reasons: Vec<String> = Vec::new();
        if let Some(choices) = value.get("choices").and_then(Value::as_array) {
            reasons.extend(
                choices
                    .iter()
                    .filter_map(|c| c.get("finish_reason").and_then(Value::as_str))
                    .map(str::to_string),
            );
        }
        let stop = [
            target.get("stop_reason"),
            value.pointer("/delta/stop_reason"),
        ]
        .into_iter()
        .flatten()
        .find_map(Value::as_str);
        reasons.extend(stop.map(str::to_string));
        if target.get("object").and_then(Value::as_str) == Some("response")
            || value.get("response").is_some_and(Value::is_object)
        {
            let incomplete = target
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str);
            let status = target.get("status").and_then(Value::as_str);
            reasons.extend(incomplete.or(status).map(str::to_string));
        }
        if !reasons.is_empty() {
            self.finish_reasons = reasons;
        }
    }
}

/// Whether one raw streamed event may carry usage or an outcome: a cheap filter before
/// parsing (most events are content deltas, and a Chat delta names `finish_reason` as null).
pub fn event_may_report(raw: &[u8]) -> bool {
    let has = |needle: &[u8]| raw.windows(needle.len()).any(|w| w == needle);
    has(b"usage")
        || has(b"stop_reason\":\"")
        || (has(b"finish_reason") && !has(b"finish_reason\":null"))
        || has(b"response.completed")
        || has(b"response.incomplete")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_bodies_and_streams_report_usage_and_finish() {
        let body = json!({
            "id": "chatcmpl-1", "model": "gpt-4o-2024",
            "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1500, "completion_tokens": 9,
                      "prompt_tokens_details": {"cached_tokens": 1024}}
        });
        let report = UsageReport::from_body(&body);
        assert_eq!(report.input_tokens, Some(1500));
        assert_eq!(report.cache_read_tokens, Some(1024));
        assert_eq!(report.fresh_input_tokens(), Some(476));
        assert_eq!(report.output_tokens, Some(9));
        assert_eq!(report.finish_reasons, ["stop"]);
        assert_eq!(report.response_model.as_deref(), Some("gpt-4o-2024"));
        let mut streamed = UsageReport::default();
        streamed.merge(&json!({"id": "c", "model": "m", "choices": [{"delta": {}, "finish_reason": "tool_calls"}]}));
        streamed.merge(&json!({"id": "c", "model": "m", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2}}));
        assert_eq!(
            streamed.finish_reasons,
            ["tool_calls"],
            "an empty choices list keeps the reason"
        );
        assert_eq!(
            (streamed.input_tokens, streamed.output_tokens),
            (Some(10), Some(2))
        );
        assert_eq!(streamed.cache_read_tokens, None, "not reported is not zero");
    }

    #[test]
    fn anthropic_streams_complete_the_start_with_the_delta() {
        let mut report = UsageReport::default();
        report.merge(
            &json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "model": "claude", "usage": {"input_tokens": 5, "cache_read_input_tokens": 2000,
            "cache_creation_input_tokens": 0, "output_tokens": 1}}}),
        );
        report.merge(
            &json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 40}}),
        );
        assert_eq!(report.input_tokens, Some(2005));
        assert_eq!(report.cache_read_tokens, Some(2000));
        assert_eq!(report.output_tokens, Some(40));
        assert_eq!(report.finish_reasons, ["tool_use"]);
        assert_eq!(report.response_id.as_deref(), Some("msg_1"));
        // A delta repeating the input alone keeps the cache counts.
        report.merge(
            &json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
            "usage": {"input_tokens": 5, "output_tokens": 41}}),
        );
        assert_eq!(report.input_tokens, Some(2005));
    }

    #[test]
    fn responses_report_status_and_cached_tokens() {
        let completed = json!({"type": "response.completed", "response": {"id": "resp_1",
            "object": "response", "model": "gpt-5", "status": "completed",
            "usage": {"input_tokens": 3000, "output_tokens": 12,
                      "input_tokens_details": {"cached_tokens": 2048}}}});
        let report = UsageReport::from_body(&completed);
        assert_eq!(report.input_tokens, Some(3000));
        assert_eq!(report.cache_read_tokens, Some(2048));
        assert_eq!(report.finish_reasons, ["completed"]);
        let cut = json!({"object": "response", "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"}, "usage": {"input_tokens": 1, "output_tokens": 2}});
        assert_eq!(
            UsageReport::from_body(&cut).finish_reasons,
            ["max_output_tokens"]
        );
    }

    #[test]
    fn the_event_filter_skips_content_deltas() {
        assert!(!event_may_report(
            br#"data: {"choices":[{"delta":{"content":"x"},"finish_reason":null}]}"#
        ));
        assert!(event_may_report(
            br#"data: {"choices":[{"delta":{},"finish_reason":"stop"}]}"#
        ));
        assert!(event_may_report(
            br#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#
        ));
        assert!(!event_may_report(
            br#"data: {"type":"content_block_delta","delta":{"text":"x"}}"#
        ));
    }
}
