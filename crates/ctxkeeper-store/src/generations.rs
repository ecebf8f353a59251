//! Sessions stored in generations, so a step costs O(what it added).
//!
//! A stored state is a small **head** (the [`AgentState`] without its context: summary,
//! engine record, extensions, times) and the **items** of its current *generation*: one per
//! context message (with its bookkeeping from [`AgentState::context_meta`]) and one per
//! [`AgentState::trail`] value, in the order they were written. A step that only appended
//! writes the head and its new items ([`ContextWrite::Append`]); a compaction, which rewrites
//! the context, writes a new generation ([`ContextWrite::Generation`]); a load reads the head
//! and the current generation. Older generations stay where they are until the session is
//! deleted or retention removes it, so nothing a compaction replaced is lost
//! ([`SessionStore::generation_context`](crate::SessionStore::generation_context) reads them).
//!
//! Records written before generations existed (the whole state in one record) still load;
//! the first save after such a load writes a generation.

use ctxkeeper_core::model::Message;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::StoreError;
use crate::state::AgentState;

/// How a save writes the state's context (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextWrite {
    /// The state's whole context and trail, as a new generation.
    Generation,
    /// The stored current generation already holds `context` messages and `trail` values,
    /// and the state passed holds only what follows them: they are appended. The store
    /// checks the counts and refuses an append that does not continue its generation.
    Append { context: usize, trail: usize },
}

/// What a store keeps about a session's current generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Shape {
    /// 0: no generation written yet (nothing saved, or a record from before generations).
    pub generation: u64,
    pub context: u64,
    pub trail: u64,
}

/// A state serialized for a write: its head and its items.
#[derive(Debug, Clone)]
pub(crate) struct Split {
    pub head: String,
    pub items: Vec<String>,
    pub context: u64,
    pub trail: u64,
}

/// The head of a state as it is stored: every field but the context, its bookkeeping and the
/// trail (the field names are [`AgentState`]'s, so the head parses as a state).
#[derive(Serialize)]
struct HeadRef<'a> {
    format_version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: &'a Option<Value>,
    engine: &'a Value,
    extensions: &'a std::collections::BTreeMap<String, Value>,
    created_at_ms: i64,
    updated_at_ms: i64,
    #[serde(flatten)]
    unknown: &'a Map<String, Value>,
}

#[derive(Serialize)]
struct ContextItem<'a> {
    m: &'a Message,
    #[serde(skip_serializing_if = "Option::is_none")]
    x: Option<&'a Value>,
}

#[derive(Serialize)]
struct TrailItem<'a> {
    t: &'a Value,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(default)]
    m: Option<Message>,
    #[serde(default, borrow)]
    x: Option<&'a RawValue>,
    #[serde(default)]
    t: Option<Value>,
}

/// `value` as JSON in a string of exactly its length: measured first, then written. A
/// growing buffer would hold up to twice the text (its capacity doubles), and a large
/// request's messages are all serialized at once for its save.
pub(crate) fn json_exact<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    struct Length(usize);
    impl std::io::Write for Length {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut length = Length(0);
    serde_json::to_writer(&mut length, value)?;
    let mut out = Vec::with_capacity(length.0);
    serde_json::to_writer(&mut out, value)?;
    // serde_json writes UTF-8 only.
    String::from_utf8(out).map_err(|err| {
        serde_json::Error::io(std::io::Error::new(std::io::ErrorKind::InvalidData, err))
    })
}

fn unserializable(what: &str, err: serde_json::Error) -> StoreError {
    StoreError::InvalidInput(format!("{what} does not serialize: {err}"))
}

/// Serializes a state into its head and the items of its context and trail.
pub(crate) fn split(state: &AgentState) -> Result<Split, StoreError> {
    if !state.context_meta.is_empty() && state.context_meta.len() != state.context.len() {
        return Err(StoreError::InvalidInput(format!(
            "context_meta has {} values for {} messages (one per message, or none)",
            state.context_meta.len(),
            state.context.len()
        )));
    }
    let head = serde_json::to_string(&HeadRef {
        format_version: state.format_version,
        summary: &state.summary,
        engine: &state.engine,
        extensions: &state.extensions,
        created_at_ms: state.created_at_ms,
        updated_at_ms: state.updated_at_ms,
        unknown: &state.unknown,
    })
    .map_err(|e| unserializable("state", e))?;
    let mut items = Vec::with_capacity(state.context.len() + state.trail.len());
    for (i, message) in state.context.iter().enumerate() {
        let item = ContextItem {
            m: message,
            x: state.context_meta.get(i),
        };
        items.push(json_exact(&item).map_err(|e| unserializable("message", e))?);
    }
    for value in &state.trail {
        items.push(
            serde_json::to_string(&TrailItem { t: value })
                .map_err(|e| unserializable("trail value", e))?,
        );
    }
    Ok(Split {
        head,
        items,
        context: state.context.len() as u64,
        trail: state.trail.len() as u64,
    })
}

/// Reads a stored state back: the head, then the current generation's items in order.
pub(crate) fn assemble<I, B>(head: &str, items: I) -> Result<AgentState, StoreError>
where
    I: IntoIterator<Item = B>,
    B: AsRef<[u8]>,
{
    let mut state = AgentState::from_json(head)?;
    let mut meta = Vec::new();
    let mut any_meta = false;
    for item in items {
        let item: Item<'_> = serde_json::from_slice(item.as_ref())
            .map_err(|e| StoreError::Corrupt(format!("context item: {e}")))?;
        match (item.m, item.t) {
            (Some(message), None) => {
                let value = match item.x {
                    Some(raw) => {
                        any_meta = true;
                        serde_json::from_str(raw.get())
                            .map_err(|e| StoreError::Corrupt(format!("context item: {e}")))?
                    }
                    None => Value::Null,
                };
                state.context.push(message);
                meta.push(value);
            }
            (None, Some(value)) => state.trail.push(value),
            _ => {
                return Err(StoreError::Corrupt(
                    "context item is neither a message nor a trail value".into(),
                ));
            }
        }
    }
    if any_meta {
        state.context_meta = meta;
    }
    Ok(state)
}

/// The shape after a write of `split` over `current` (`None`: no record, or a record from
/// before generations), and whether the write starts a new generation.
pub(crate) fn next_shape(
    current: Option<Shape>,
    write: ContextWrite,
    split: &Split,
) -> Result<(Shape, bool), StoreError> {
    match write {
        ContextWrite::Generation => Ok((
            Shape {
                generation: current.map_or(0, |s| s.generation) + 1,
                context: split.context,
                trail: split.trail,
            },
            true,
        )),
        ContextWrite::Append { context, trail } => match current {
            Some(shape)
                if shape.generation > 0
                    && shape.context == context as u64
                    && shape.trail == trail as u64 =>
            {
                Ok((
                    Shape {
                        generation: shape.generation,
                        context: shape.context + split.context,
                        trail: shape.trail + split.trail,
                    },
                    false,
                ))
            }
            Some(shape) if shape.generation > 0 => Err(StoreError::InvalidInput(format!(
                "an append after {context} messages and {trail} trail values does not continue \
                 generation {} ({} messages, {} trail values)",
                shape.generation, shape.context, shape.trail
            ))),
            _ => Err(StoreError::InvalidInput(
                "an append needs a stored generation; save a whole generation first".into(),
            )),
        },
    }
}

/// The messages among a generation's items.
pub(crate) fn messages_of<I, B>(items: I) -> Result<Vec<Message>, StoreError>
where
    I: IntoIterator<Item = B>,
    B: AsRef<[u8]>,
{
    let mut out = Vec::new();
    for item in items {
        let item: Item<'_> = serde_json::from_slice(item.as_ref())
            .map_err(|e| StoreError::Corrupt(format!("context item: {e}")))?;
        if let Some(message) = item.m {
            out.push(message);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_split_state_assembles_back() -> Result<(), StoreError> {
        let mut state = AgentState::new();
        state.context = vec![Message::user("a"), Message::assistant("b")];
        state.context_meta = vec![json!({"pinned": true}), Value::Null];
        state.trail = vec![json!("00ff"), json!("01ee")];
        state.summary = Some(json!({"task": "x"}));
        state.unknown.insert("later".into(), json!(1));
        let split = split(&state)?;
        assert!(!split.head.contains("\"a\""), "{}", split.head);
        assert_eq!(assemble(&split.head, &split.items)?, state);
        Ok(())
    }

    #[test]
    fn appends_must_continue_the_generation() {
        let empty = Split {
            head: String::new(),
            items: Vec::new(),
            context: 2,
            trail: 1,
        };
        let shape = Shape {
            generation: 3,
            context: 5,
            trail: 4,
        };
        let append = ContextWrite::Append {
            context: 5,
            trail: 4,
        };
        assert_eq!(
            next_shape(Some(shape), append, &empty).ok(),
            Some((
                Shape {
                    generation: 3,
                    context: 7,
                    trail: 5
                },
                false
            ))
        );
        let stale = ContextWrite::Append {
            context: 4,
            trail: 4,
        };
        assert!(next_shape(Some(shape), stale, &empty).is_err());
        assert!(next_shape(None, append, &empty).is_err());
        let (next, fresh) =
            next_shape(Some(shape), ContextWrite::Generation, &empty).expect("a generation");
        assert!(fresh && next.generation == 4 && next.context == 2);
    }

    #[test]
    fn mismatched_bookkeeping_is_refused() {
        let mut state = AgentState::new();
        state.context = vec![Message::user("a")];
        state.context_meta = vec![Value::Null, Value::Null];
        assert!(matches!(split(&state), Err(StoreError::InvalidInput(_))));
    }
}
