//! Structured summaries: the schema, the request a summarizer answers, and the result.
//!
//! A summary replaces a compacted prefix of the conversation. It is structured (named fields,
//! by default the five of [`SummarySchema::default`]) so that it can be merged incrementally
//! with the previous summary, validated, and rendered into the context with a template.
//!
//! The summarizers themselves (a deterministic extractive one, OpenAI-compatible and
//! Anthropic ones) live in `ctxkeeper-llm`; this module holds only the data they exchange with
//! the engine.
//!
//! ```
//! use ctxkeeper_core::summary::{Summary, SummarySchema};
//!
//! let schema = SummarySchema::default();
//! let mut summary = Summary::empty(&schema, "extractive");
//! summary.set("task_overview", "Fix the rounding bug in invoices.");
//! let text = summary.render(&schema);
//! assert!(text.contains("Task overview"));
//! assert!(text.contains("Fix the rounding bug"));
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::model::Message;

/// One field of a structured summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryField {
    /// The JSON property name (`task_overview`).
    pub name: String,
    /// The heading shown when rendering (`Task overview`).
    pub title: String,
    /// What the summarizer should put there.
    pub description: String,
}

/// The fields a summary must fill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummarySchema {
    pub fields: Vec<SummaryField>,
}

impl Default for SummarySchema {
    /// The five fields of AgentScope's structured summary.
    fn default() -> SummarySchema {
        let field = |name: &str, title: &str, description: &str| SummaryField {
            name: name.to_string(),
            title: title.to_string(),
            description: description.to_string(),
        };
        SummarySchema {
            fields: vec![
                field(
                    "task_overview",
                    "Task overview",
                    "The user's goal and the constraints and instructions they stated, in their words where possible.",
                ),
                field(
                    "current_state",
                    "Current state",
                    "What has been done so far and where the work stands now: files changed, decisions taken, results obtained.",
                ),
                field(
                    "important_discoveries",
                    "Important discoveries",
                    "Facts learned from tools and the environment that later steps depend on: errors and their causes, values, paths, identifiers.",
                ),
                field(
                    "next_steps",
                    "Next steps",
                    "What remains to be done, in order.",
                ),
                field(
                    "context_to_preserve",
                    "Context to preserve",
                    "Anything else that must not be forgotten: user preferences, promises made, references to archived content.",
                ),
            ],
        }
    }
}

impl SummarySchema {
    /// The JSON Schema of a summary object, for structured-output requests.
    pub fn json_schema(&self) -> Value {
        let mut properties = Map::new();
        for field in &self.fields {
            properties.insert(
                field.name.clone(),
                json!({ "type": "string", "description": field.description }),
            );
        }
        let required: Vec<&str> = self.fields.iter().map(|f| f.name.as_str()).collect();
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
    }
}

/// Why a summary is requested (reported in events; summarizers may adapt their prompt).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryReason {
    /// The context crossed its trigger before a model call.
    Proactive,
    /// A reactive micro compaction of the oldest rounds.
    ReactiveMicro,
    /// A reactive full compaction.
    ReactiveFull,
    /// The provider answered that the context is too long.
    Overflow,
    /// The host or the agent asked for it.
    Manual,
}

/// What a summarizer is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRequest {
    /// The messages being compacted, oldest first.
    pub messages: Vec<Message>,
    /// The summary of what was compacted before, to be merged into the new one.
    pub previous: Option<Summary>,
    pub schema: SummarySchema,
    /// The instruction prompt (the seed's `compression_prompt`); `None` uses the default.
    pub prompt: Option<String>,
    /// Extra focus given by the agent or host for this compaction.
    pub focus: Option<String>,
    pub reason: SummaryReason,
    /// Upper bound on the summary's length, in tokens.
    pub max_output_tokens: u32,
}

/// A structured summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Field name → text, in schema order.
    pub fields: Map<String, Value>,
    /// Who produced it (`extractive`, `openai:gpt-4o-mini`, `fallback-truncation`, …).
    pub produced_by: String,
    /// True when the summarizer failed and this is a lossy fallback.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
}

impl Summary {
    /// A summary with every field of `schema` empty.
    pub fn empty(schema: &SummarySchema, produced_by: &str) -> Summary {
        let fields = schema
            .fields
            .iter()
            .map(|f| (f.name.clone(), Value::String(String::new())))
            .collect();
        Summary {
            fields,
            produced_by: produced_by.to_string(),
            degraded: false,
        }
    }

    /// Sets a field's text.
    pub fn set(&mut self, field: &str, text: impl Into<String>) {
        self.fields
            .insert(field.to_string(), Value::String(text.into()));
    }

    /// A field's text ("" when absent or not a string).
    pub fn get(&self, field: &str) -> &str {
        self.fields.get(field).and_then(Value::as_str).unwrap_or("")
    }

    /// Checks a summarizer's JSON answer against the schema: an object whose schema fields are
    /// strings. Missing fields are reported, not tolerated, so the caller can retry; unknown
    /// fields are ignored.
    pub fn from_json(
        value: &Value,
        schema: &SummarySchema,
        produced_by: &str,
    ) -> Result<Summary, String> {
        let Some(object) = value.as_object() else {
            return Err(format!(
                "summary must be a JSON object, got {}",
                type_name(value)
            ));
        };
        let mut summary = Summary::empty(schema, produced_by);
        let mut missing = Vec::new();
        for field in &schema.fields {
            match object.get(&field.name) {
                Some(Value::String(text)) => summary.set(&field.name, text.clone()),
                // Lists of strings are a common near-miss; accept them joined by lines.
                Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
                    let lines: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
                    summary.set(&field.name, lines.join("\n"));
                }
                Some(other) => {
                    return Err(format!(
                        "field {:?} must be a string, got {}",
                        field.name,
                        type_name(other)
                    ));
                }
                None => missing.push(field.name.as_str()),
            }
        }
        if missing.is_empty() {
            Ok(summary)
        } else {
            Err(format!(
                "summary is missing field(s): {}",
                missing.join(", ")
            ))
        }
    }

    /// Renders the summary as the text placed in the context: one titled section per non-empty
    /// field, in schema order.
    pub fn render(&self, schema: &SummarySchema) -> String {
        let mut out = String::new();
        for field in &schema.fields {
            let text = self.get(&field.name).trim();
            if text.is_empty() {
                continue;
            }
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str("## ");
            out.push_str(&field.title);
            out.push('\n');
            out.push_str(text);
        }
        out
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_schema_requires_every_field() {
        let schema = SummarySchema::default();
        let json = schema.json_schema();
        assert_eq!(json["required"].as_array().map(Vec::len), Some(5));
        assert_eq!(json["properties"]["next_steps"]["type"], "string");
    }

    #[test]
    fn from_json_validates_and_reports_missing_fields() {
        let schema = SummarySchema::default();
        let err = Summary::from_json(&json!({"task_overview": "x"}), &schema, "t").err();
        assert!(err.is_some_and(|e| e.contains("current_state")));
        let err = Summary::from_json(&json!({"task_overview": 3}), &schema, "t").err();
        assert!(err.is_some_and(|e| e.contains("must be a string")));
        assert!(Summary::from_json(&json!("text"), &schema, "t").is_err());
        let full: Map<String, Value> = schema
            .fields
            .iter()
            .map(|f| (f.name.clone(), json!(["a", "b"])))
            .collect();
        let summary = Summary::from_json(&Value::Object(full), &schema, "t").ok();
        assert_eq!(
            summary.map(|s| s.get("next_steps").to_string()),
            Some("a\nb".to_string())
        );
    }

    #[test]
    fn render_skips_empty_fields_and_keeps_schema_order() {
        let schema = SummarySchema::default();
        let mut summary = Summary::empty(&schema, "t");
        summary.set("next_steps", "ship it");
        summary.set("task_overview", "build it");
        let text = summary.render(&schema);
        assert_eq!(text, "## Task overview\nbuild it\n\n## Next steps\nship it");
    }
}
