//! OpenAI Responses server-side compaction, for clients whose upstream cannot do it.
//!
//! A Codex-style client asks the provider to compact by ending a `/v1/responses` request's
//! input with `{"type": "compaction_trigger"}`; the provider answers with exactly one
//! `{"type": "compaction", "encrypted_content": …}` item, which the client sends back in
//! place of its history from then on. When the upstream is OpenAI itself the gateway forwards
//! both untouched and leaves that request's context to the provider
//! ([`ResponsesCompaction::Forward`]). An OpenAI-compatible server refuses both item types,
//! so in front of one ([`ResponsesCompaction::Gateway`]) the gateway answers the trigger
//! itself: it compacts the session (its summarizer, its archive, its capsule) and returns one
//! compaction item whose content is the compacted history's text, encoded; and where one of
//! its own items comes back in a later request, it puts that text in its place before the
//! request goes upstream. Items it did not write are left as they are.
//!
//! ```
//! use ctxkeeper_gateway::compaction_items::{decode, encode, expand_own_items};
//! let content = encode("Summary of the earlier conversation.");
//! assert_eq!(decode(&content).as_deref(), Some("Summary of the earlier conversation."));
//! let mut body = serde_json::json!({"input": [
//!     {"type": "compaction", "id": "cmp_1", "encrypted_content": content},
//!     {"role": "user", "content": "go on"}]});
//! assert_eq!(expand_own_items(&mut body), 1);
//! assert_eq!(body["input"][0]["role"], "user");
//! ```

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde_json::{Map, Value, json};

/// Who answers a Responses `compaction_trigger`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResponsesCompaction {
    /// The upstream when it is OpenAI's own API, else the gateway.
    #[default]
    Auto,
    /// Always the upstream: requests carrying the trigger are forwarded untouched.
    Forward,
    /// Always the gateway.
    Gateway,
}

impl ResponsesCompaction {
    /// `auto`, `forward` or `gateway`.
    pub fn parse(name: &str) -> Result<ResponsesCompaction, String> {
        match name {
            "auto" => Ok(ResponsesCompaction::Auto),
            "forward" => Ok(ResponsesCompaction::Forward),
            "gateway" => Ok(ResponsesCompaction::Gateway),
            other => Err(format!(
                "unknown responses_compaction `{other}`; expected auto, forward or gateway"
            )),
        }
    }

    /// The name [`ResponsesCompaction::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            ResponsesCompaction::Auto => "auto",
            ResponsesCompaction::Forward => "forward",
            ResponsesCompaction::Gateway => "gateway",
        }
    }

    /// Whether the gateway answers compaction triggers in front of `upstream` (the OpenAI base
    /// URL): under `auto`, unless the upstream is OpenAI's API or Azure OpenAI.
    pub fn gateway_answers(self, upstream: &str) -> bool {
        match self {
            ResponsesCompaction::Forward => false,
            ResponsesCompaction::Gateway => true,
            ResponsesCompaction::Auto => {
                let host = reqwest::Url::parse(upstream)
                    .ok()
                    .and_then(|url| url.host_str().map(str::to_ascii_lowercase));
                !host.is_some_and(|host| {
                    host == "api.openai.com"
                        || host.ends_with(".openai.azure.com")
                        || host.ends_with(".cognitiveservices.azure.com")
                })
            }
        }
    }
}

/// Opens the content of every compaction item the gateway wrote.
const OWN_PREFIX: &str = "ctxkeeper.v1.";
const TRIGGER: &str = "compaction_trigger";
const COMPACTION: &str = "compaction";

/// The content of a compaction item standing for `text`.
pub fn encode(text: &str) -> String {
    format!("{OWN_PREFIX}{}", URL_SAFE_NO_PAD.encode(text.as_bytes()))
}

/// The text an item [`encode`] wrote stands for; `None` for anyone else's content.
pub fn decode(content: &str) -> Option<String> {
    let encoded = content.strip_prefix(OWN_PREFIX)?;
    let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok()
}

fn input_items(body: &mut Value) -> Option<&mut Vec<Value>> {
    body.get_mut("input").and_then(Value::as_array_mut)
}

fn item_type(item: &Value) -> Option<&str> {
    item.get("type").and_then(Value::as_str)
}

/// Whether the request's input ends with a compaction trigger.
pub fn has_trigger(body: &Value) -> bool {
    body.get("input")
        .and_then(Value::as_array)
        .and_then(|items| items.last())
        .and_then(item_type)
        == Some(TRIGGER)
}

/// Removes a trailing compaction trigger; whether there was one.
pub fn take_trigger(body: &mut Value) -> bool {
    if !has_trigger(body) {
        return false;
    }
    input_items(body).and_then(Vec::pop).is_some()
}

/// Puts the text of each compaction item the gateway wrote in its place, as a user message;
/// returns how many it replaced. The same item always becomes the same message, so the
/// session recognises the history it opens on every request.
pub fn expand_own_items(body: &mut Value) -> usize {
    let Some(items) = input_items(body) else {
        return 0;
    };
    let mut replaced = 0;
    for item in items.iter_mut() {
        if item_type(item) != Some(COMPACTION) {
            continue;
        }
        let Some(text) = item
            .get("encrypted_content")
            .and_then(Value::as_str)
            .and_then(decode)
        else {
            continue;
        };
        *item = json!({
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}]
        });
        replaced += 1;
    }
    replaced
}

/// What the gateway answers a compaction trigger with.
#[derive(Debug, Clone)]
pub struct CompactionAnswer {
    /// Names the response and its item (unique per answer).
    pub id: String,
    pub model: String,
    /// The compacted history's text.
    pub text: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub created_at: u64,
}

impl CompactionAnswer {
    fn item(&self) -> Value {
        json!({
            "id": format!("cmp_{}", self.id),
            "type": COMPACTION,
            "encrypted_content": encode(&self.text)
        })
    }

    fn response(&self, completed: bool) -> Value {
        json!({
            "id": format!("resp_{}", self.id),
            "object": "response",
            "created_at": self.created_at,
            "status": if completed { "completed" } else { "in_progress" },
            "error": null,
            "incomplete_details": null,
            "model": self.model,
            "output": if completed { json!([self.item()]) } else { json!([]) },
            "usage": if completed {
                json!({
                    "input_tokens": self.input_tokens,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": self.output_tokens,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": self.input_tokens + self.output_tokens
                })
            } else {
                Value::Null
            }
        })
    }

    /// The whole answer (a request without `stream`).
    pub fn body(&self) -> Value {
        self.response(true)
    }

    /// The streamed answer, as the Responses API streams a compaction: `response.created`,
    /// `response.in_progress`, the item added, `response.compaction.compacting`, the item
    /// done, `response.completed`.
    pub fn events(&self) -> Vec<Bytes> {
        let events = [
            (
                "response.created",
                json!({"response": self.response(false)}),
            ),
            (
                "response.in_progress",
                json!({"response": self.response(false)}),
            ),
            (
                "response.output_item.added",
                json!({"output_index": 0, "item": self.item()}),
            ),
            (
                "response.compaction.compacting",
                json!({"item_id": format!("cmp_{}", self.id), "output_index": 0}),
            ),
            (
                "response.output_item.done",
                json!({"output_index": 0, "item": self.item()}),
            ),
            (
                "response.completed",
                json!({"response": self.response(true)}),
            ),
        ];
        events
            .into_iter()
            .enumerate()
            .map(|(sequence, (kind, data))| {
                let mut event = Map::new();
                event.insert("type".into(), json!(kind));
                if let Value::Object(fields) = data {
                    event.extend(fields);
                }
                event.insert("sequence_number".into(), json!(sequence));
                Bytes::from(format!("event: {kind}\ndata: {}\n\n", Value::Object(event)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_forwards_to_openai_only() {
        let auto = ResponsesCompaction::Auto;
        assert!(!auto.gateway_answers("https://api.openai.com/v1"));
        assert!(!auto.gateway_answers("https://res.openai.azure.com/openai/v1"));
        assert!(auto.gateway_answers("http://127.0.0.1:8000/v1"));
        assert!(auto.gateway_answers("https://openrouter.ai/api/v1"));
        assert!(!ResponsesCompaction::Forward.gateway_answers("http://127.0.0.1:8000/v1"));
        assert!(ResponsesCompaction::Gateway.gateway_answers("https://api.openai.com/v1"));
        assert!(ResponsesCompaction::parse("sometimes").is_err());
    }

    #[test]
    fn only_a_trailing_trigger_is_taken() {
        let mut body = json!({"input": [{"role": "user", "content": "x"}, {"type": TRIGGER}]});
        assert!(take_trigger(&mut body));
        assert_eq!(body["input"].as_array().map(Vec::len), Some(1));
        assert!(!take_trigger(&mut body));
        let mut early = json!({"input": [{"type": TRIGGER}, {"role": "user", "content": "x"}]});
        assert!(!take_trigger(&mut early));
        assert!(!take_trigger(&mut json!({"input": "text"})));
    }

    #[test]
    fn foreign_compaction_items_stay() {
        let mut body = json!({"input": [
            {"type": COMPACTION, "id": "cmp_x", "encrypted_content": "gAAAAB-provider-bytes"},
            {"type": COMPACTION, "id": "cmp_y", "encrypted_content": encode("ours: naïve ✓")}]});
        assert_eq!(expand_own_items(&mut body), 1);
        assert_eq!(body["input"][0]["type"], COMPACTION);
        assert_eq!(body["input"][1]["content"][0]["text"], "ours: naïve ✓");
        assert_eq!(decode("ctxkeeper.v1.!!!"), None);
    }

    #[test]
    fn the_answer_holds_exactly_one_compaction_item() {
        let answer = CompactionAnswer {
            id: "abc".into(),
            model: "m".into(),
            text: "summary".into(),
            input_tokens: 10,
            output_tokens: 2,
            created_at: 1,
        };
        let body = answer.body();
        let output = body["output"].as_array().expect("output");
        assert_eq!(output.len(), 1);
        assert_eq!(output[0]["type"], COMPACTION);
        let events = answer.events();
        let done: Vec<&Bytes> = events
            .iter()
            .filter(|e| e.starts_with(b"event: response.output_item.done"))
            .collect();
        assert_eq!(done.len(), 1);
        assert!(
            events
                .last()
                .is_some_and(|e| e.starts_with(b"event: response.completed"))
        );
    }
}
