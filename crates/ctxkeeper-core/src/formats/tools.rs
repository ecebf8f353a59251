//! Tool declarations shared by the three wire adapters: parsing a declared tool or keeping an
//! unknown kind whole, and writing either back into a format.

use serde_json::{Map, Value, json};

use super::Wire;
use super::common::{
    Fields, JsonPath, convert_custom_tool, origin_hints, parse_each, put_extra, same_origin,
};
use crate::ParseError;
use crate::model::{Extra, ToolSpec, WireHints};

/// A parameter schema every provider accepts for a tool from another format: an object schema
/// (`type: "object"` added when missing; an empty object schema when there was none).
pub(crate) fn object_schema(parameters: &Value) -> Value {
    match parameters {
        Value::Object(schema) if schema.contains_key("type") => parameters.clone(),
        Value::Object(schema) => {
            let mut out = Map::new();
            out.insert("type".into(), json!("object"));
            put_extra(&mut out, schema);
            Value::Object(out)
        }
        _ => json!({"type": "object", "properties": {}}),
    }
}

/// Tool hint: a tool the model has no slot for (a hosted, server or custom tool), kept whole
/// and written back only where it can run (see [`emit_verbatim_tool`]).
const VERBATIM_TOOL: &str = "verbatim";
/// Tool hint: the tool declaration had no parameter schema.
pub(crate) const NO_PARAMETERS: &str = "no_parameters";

/// A tool of `wire` kept whole as `value` (see [`VERBATIM_TOOL`]), known by `name`.
pub(crate) fn verbatim_tool(name: String, value: Value, wire: Wire) -> ToolSpec {
    let mut hints = origin_hints(wire);
    hints.private.insert(VERBATIM_TOOL.into(), value);
    ToolSpec {
        name,
        description: None,
        parameters: Value::Null,
        extra: Extra::new(),
        hints,
    }
}

/// A tool declaration: the required `name`, an optional `description` and the parameter schema
/// under `schema_key` (its absence recorded as [`NO_PARAMETERS`]); the remaining fields are the
/// tool's `extra`.
pub(crate) fn declared_tool(
    mut fields: Fields<'_>,
    schema_key: &str,
    mut hints: WireHints,
) -> Result<ToolSpec, ParseError> {
    let name = fields.required_str("name")?;
    let description = fields.optional_str("description");
    let parameters = match fields.take(schema_key) {
        Some(parameters) => parameters,
        None => {
            hints
                .private
                .insert(NO_PARAMETERS.into(), Value::Bool(true));
            Value::Null
        }
    };
    Ok(ToolSpec {
        name,
        description,
        parameters,
        extra: fields.rest(),
        hints,
    })
}

/// The `tools` field of a request body, each tool parsed by `parse_tool`. An empty list
/// declares nothing: it stays in `extra` verbatim.
pub(crate) fn take_request_tools(
    fields: &mut Fields<'_>,
    parse_tool: impl Fn(Value, JsonPath<'_>) -> Result<ToolSpec, ParseError>,
) -> Result<Vec<ToolSpec>, ParseError> {
    match fields.take_nonempty_array("tools") {
        Some(items) => parse_each(items, "$.tools", parse_tool),
        None => Ok(Vec::new()),
    }
}

/// A tool kept verbatim (see [`VERBATIM_TOOL`]), written into `target`: as it came when it came
/// from `target`, converted when it is a custom tool of the other OpenAI format, and left out
/// (`None`) otherwise, since only its own provider can run it.
fn emit_verbatim_tool(verbatim: &Value, hints: &WireHints, target: Wire) -> Option<Value> {
    if same_origin(hints, target) {
        return Some(verbatim.clone());
    }
    let from = [Wire::OpenAiChat, Wire::Responses]
        .into_iter()
        .find(|wire| same_origin(hints, *wire))?;
    convert_custom_tool(verbatim, from, target)
}

/// Tools written into `target`: a tool kept verbatim as [`emit_verbatim_tool`] decides, a
/// declared one by `declared`, told whether the tool came from `target`.
pub(crate) fn emit_tools<T: std::borrow::Borrow<ToolSpec>>(
    tools: &[T],
    target: Wire,
    declared: impl Fn(&ToolSpec, bool) -> Value,
) -> Vec<Value> {
    let emit = |tool: &ToolSpec| match tool.hints.private.get(VERBATIM_TOOL) {
        Some(verbatim) => emit_verbatim_tool(verbatim, &tool.hints, target),
        None => Some(declared(tool, same_origin(&tool.hints, target))),
    };
    tools
        .iter()
        .filter_map(|tool| emit(tool.borrow()))
        .collect()
}

/// Writes a tool's `name` and, when it has one, its `description` into `obj`.
pub(crate) fn insert_name_and_description(obj: &mut Map<String, Value>, tool: &ToolSpec) {
    obj.insert("name".into(), json!(tool.name));
    if let Some(description) = &tool.description {
        obj.insert("description".into(), json!(description));
    }
}
