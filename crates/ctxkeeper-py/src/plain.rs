//! Chat message dicts of the plain shape, read straight into the message model.
//!
//! Converting a dict into a `serde_json::Value` only for the wire parser to take the value
//! apart again was about a third of a quiet step. The messages of an agent loop are nearly
//! all plain (a role, string or null `content`, `name`, `tool_call_id`, typed function
//! calls): [`chat_message`] reads such a dict into
//! [`Plain`](ctxkeeper::core::formats::openai_chat::Plain), which builds the message the
//! parser would. Anything else (another key, another type, a string Python cannot encode)
//! is `None`, and the caller converts and parses the dict as before, errors included.

use ctxkeeper::core::formats::openai_chat::{Plain, PlainCall, PlainContent};
use ctxkeeper::core::model::{Message, Role};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

/// `item` as a message, when it is a plain Chat message dict.
pub(crate) fn chat_message(item: &Bound<'_, PyAny>) -> Option<Message> {
    let dict = item.cast::<PyDict>().ok()?;
    let mut role = None;
    let mut content = PlainContent::Absent;
    let mut name = None;
    let mut tool_call_id = None;
    let mut tool_calls = None;
    for (key, value) in dict.iter() {
        match text(&key)? {
            "role" => role = Some(Role::parse(text(&value)?)?),
            "content" if value.is_none() => content = PlainContent::Null,
            "content" => content = PlainContent::Text(string(&value)?),
            "name" => name = Some(string(&value)?),
            "tool_call_id" => tool_call_id = Some(string(&value)?),
            "tool_calls" => tool_calls = Some(calls(&value)?),
            _ => return None,
        }
    }
    Plain {
        role: role?,
        content,
        name,
        tool_call_id,
        tool_calls,
    }
    .into_message()
}

/// The entries of a `tool_calls` list, when every one is a plain function call.
fn calls(value: &Bound<'_, PyAny>) -> Option<Vec<PlainCall>> {
    let list = value.cast::<PyList>().ok()?;
    let mut calls = Vec::with_capacity(list.len());
    for item in list.iter() {
        calls.push(call(&item)?);
    }
    Some(calls)
}

/// `{"id": str, "type": "function", "function": {"name": str, "arguments": str}}`, exactly.
fn call(item: &Bound<'_, PyAny>) -> Option<PlainCall> {
    let dict = item.cast::<PyDict>().ok()?;
    if dict.len() != 3 {
        return None;
    }
    let mut id = None;
    let mut typed = false;
    let mut function = None;
    for (key, value) in dict.iter() {
        match text(&key)? {
            "id" => id = Some(string(&value)?),
            "type" => typed = text(&value)? == "function",
            "function" => function = Some(value),
            _ => return None,
        }
    }
    let function = function?;
    let function = function.cast::<PyDict>().ok()?;
    if !typed || function.len() != 2 {
        return None;
    }
    // Interned keys: a `&str` key would be made into a new Python string (and hashed) on
    // every lookup.
    let py = item.py();
    let field =
        |key: &Bound<'_, PyString>| -> Option<String> { string(&function.get_item(key).ok()??) };
    Some(PlainCall {
        id: id?,
        name: field(pyo3::intern!(py, "name"))?,
        arguments: field(pyo3::intern!(py, "arguments"))?,
    })
}

/// A Python string's text, borrowed.
fn text<'a>(value: &'a Bound<'_, PyAny>) -> Option<&'a str> {
    value.cast::<PyString>().ok()?.to_str().ok()
}

fn string(value: &Bound<'_, PyAny>) -> Option<String> {
    text(value).map(str::to_owned)
}
