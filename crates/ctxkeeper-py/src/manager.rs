//! `ContextManager`: one session's managed context, in the caller's wire shape.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use ctxkeeper::core::engine::{ContextState, Event, PolicyConfig};
use ctxkeeper::core::formats::Wire;
use ctxkeeper::core::model::{CheckRules, Message, Part, Role, ViolationKind, check};
use ctxkeeper::core::overflow;
use ctxkeeper::core::tokens::TokenModel;
use ctxkeeper::llm::Summarizer;
use ctxkeeper::snapshot::{self, ClientRecord, Snapshot, SnapshotRef, StoredShape};
use ctxkeeper::store::archive::{ArchiveScope, Offloader};
use ctxkeeper::store::{ArchiveRef, ContextWrite, SessionKey, SessionStore};
use ctxkeeper::{ContextManager, Settings};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::errors::{self, Attr, Kind};
use crate::runtime;
use crate::settings;
use crate::wire;

/// Events kept for `events()` before the oldest are dropped (a caller that never reads them
/// must not grow without bound).
const EVENT_QUEUE: usize = 4096;
/// The longest tool-call id accepted.
const MAX_ID_BYTES: usize = 256;

/// One session's managed context (see the module documentation of the crate).
#[pyclass(module = "ctxkeeper_engine._native", name = "ContextManager", frozen)]
pub struct PyContextManager {
    inner: Mutex<Inner>,
    wire: Wire,
    on_event: Option<Py<PyAny>>,
    /// The manager's tools in its wire shape, for `Prepared.request()`.
    tools: Option<Py<PyList>>,
}

impl std::fmt::Debug for PyContextManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextManager")
            .field("wire", &self.wire.as_str())
            .finish_non_exhaustive()
    }
}

/// What building a manager needs, kept to rebuild it when the window changes.
struct Config {
    policy: PolicyConfig,
    model: TokenModel,
    model_name: String,
    window: u64,
    fixed_tokens: u64,
    scope: ArchiveScope,
    offloader: Arc<dyn Offloader>,
    summarizer: Arc<dyn Summarizer>,
}

struct Inner {
    manager: ContextManager,
    events: broadcast::Receiver<Event>,
    queue: VecDeque<Event>,
    dropped_events: u64,
    config: Config,
    /// The output budget (`max_tokens`) the current manager reserves in the window.
    output: Option<u64>,
    /// Something rewrote the context since the last request (see `Prepared.changed`).
    dirty: bool,
    /// Input tokens of the last request handed out, and the overflow attempts since.
    last_tokens: Option<u64>,
    overflow_attempts: u32,
    persist: Option<Persist>,
    /// Messages ever ingested (the session log's length).
    ingested: u64,
    cache: Cache,
    /// The caller's objects of the messages ingested verbatim since the last request, by
    /// log position (Chat and Anthropic, whose messages map one to one).
    fresh: Vec<(u64, Py<PyAny>)>,
}

/// The messages of the last request, as the Python objects handed out: a step that only
/// appended converts only what it appended.
struct Cache {
    list: Vec<Py<PyAny>>,
    system: Option<Py<PyAny>>,
    /// The context entries `list` stands for.
    covered: usize,
    /// False after a request that carried a budget notice (or a conversion that failed).
    valid: bool,
}

impl Default for Cache {
    /// The request of an empty context: no messages.
    fn default() -> Cache {
        Cache {
            list: Vec::new(),
            system: None,
            covered: 0,
            valid: true,
        }
    }
}

/// How the cache becomes the next request.
enum Emit {
    /// The whole request, emitted from the context.
    Full(wire::Emitted),
    /// The entries appended since: the caller's own objects when every one went in
    /// verbatim, else their emission.
    Append(Vec<Piece>),
}

/// One element of an appended request.
enum Piece {
    Original(Py<PyAny>),
    Emitted(Value),
}

/// What a step hands back to Python: the messages to convert, the figures, and whether the
/// store took the step.
type Step = (Emit, Figures, Result<(), ctxkeeper::store::StoreError>);

/// A session kept in a store: its key, the stored version, what the store holds of it, and
/// the log entries owed.
struct Persist {
    store: Arc<dyn SessionStore>,
    key: SessionKey,
    version: Option<u64>,
    shape: Option<StoredShape>,
    /// The snapshot's fields other than the context (kept as loaded, so a session another
    /// face wrote keeps what it wrote).
    rest: Snapshot,
    /// Client fingerprints stored so far.
    stored_hashes: usize,
    pending: Vec<Message>,
}

impl Inner {
    fn settings(&self) -> Settings {
        Settings {
            policy: self.config.policy.clone(),
            model: self.config.model.clone(),
            window: input_window(self.config.window, self.output),
            fixed_tokens: self.config.fixed_tokens,
        }
    }

    fn build(config: &Config, settings: Settings) -> ContextManager {
        ContextManager::with_scope(
            settings,
            config.scope.clone(),
            config.offloader.clone(),
            config.summarizer.clone(),
        )
    }

    /// Rebuilds the manager around the same context for another output budget.
    fn reserve_output(&mut self, output: Option<u64>) {
        let output = output.filter(|t| *t > 0);
        if input_window(self.config.window, output) == input_window(self.config.window, self.output)
        {
            self.output = output;
            return;
        }
        self.drain();
        self.output = output;
        let state = self.manager.state().clone();
        let preparations = self.manager.take_preparations();
        let mut manager = Inner::build(&self.config, self.settings());
        manager.restore(state);
        manager.restore_preparations(preparations);
        self.events = manager.subscribe();
        self.manager = manager;
    }

    /// Moves the events the manager emitted into the queue.
    fn drain(&mut self) {
        loop {
            match self.events.try_recv() {
                Ok(event) => {
                    if self.queue.len() == EVENT_QUEUE {
                        self.queue.pop_front();
                        self.dropped_events += 1;
                    }
                    self.queue.push_back(event);
                }
                Err(broadcast::error::TryRecvError::Lagged(lost)) => self.dropped_events += lost,
                Err(_) => break,
            }
        }
    }

    /// Ingests parsed, checked messages; returns how many were ingested before an error.
    async fn ingest(
        &mut self,
        messages: Vec<Message>,
        originals: Option<Vec<Py<PyAny>>>,
    ) -> Result<(), (usize, ctxkeeper::Error)> {
        let mut originals = originals.map(Vec::into_iter);
        for (index, message) in messages.into_iter().enumerate() {
            let original = originals.as_mut().and_then(Iterator::next);
            let before = self.manager.state().entries.len();
            let has_data = message.parts.iter().any(|part| match part {
                Part::Data { .. } => true,
                Part::ToolResult { content, .. } => {
                    content.iter().any(|p| matches!(p, Part::Data { .. }))
                }
                _ => false,
            });
            // Ingest rewrites only tool results (cut to a preview past the cap) and images
            // (moved to the archive); those are compared with what the caller gave.
            let copy = message.has_tool_results().then(|| message.clone());
            if let Some(persist) = &mut self.persist {
                persist
                    .rest
                    .client
                    .hashes
                    .push(snapshot::message_hash(&message));
                persist.pending.push(message.clone());
            }
            self.manager.ingest(message).await.map_err(|e| (index, e))?;
            self.ingested += 1;
            // The context holds the message as given, or the caller's copy is no longer the
            // context.
            let state = self.manager.state();
            let verbatim = !has_data
                && state.entries.len() == before + 1
                && copy.is_none_or(|copy| state.entries.last().is_some_and(|e| e.message == copy));
            if !verbatim {
                self.dirty = true;
            }
            // The caller's own object stands for the message until the next request.
            if let (true, Some(original), Some(log_index)) = (
                verbatim,
                original,
                state.entries.last().and_then(|e| e.meta.log_index),
            ) {
                self.fresh.push((log_index, original));
            }
        }
        Ok(())
    }

    /// Checks a batch against the context and ingests it.
    fn take(&mut self, rt: &tokio::runtime::Runtime, batch: Batch) -> Result<(), Refusal> {
        validate(self.manager.state(), &batch.messages)?;
        rt.block_on(self.ingest(batch.messages, batch.originals))
            .map_err(|(index, err)| Refusal::Failed(index, err))
    }

    /// Saves the context and the log entries owed, when the manager has a store.
    async fn commit(&mut self) -> Result<(), ctxkeeper::store::StoreError> {
        let Some(persist) = &mut self.persist else {
            return Ok(());
        };
        let context = self.manager.state();
        let client = &persist.rest.client;
        let journal = persist.rest.journal.len();
        let now = StoredShape::of(context, client.hashes.len(), journal);
        if persist.pending.is_empty() && persist.shape == Some(now) {
            return Ok(());
        }
        let stored = &client.hashes[..persist.stored_hashes.min(client.hashes.len())];
        let append = persist.shape.filter(|shape| {
            persist.store.saves_incrementally()
                && shape.continued_by(context, &client.hashes, stored, journal)
        });
        let parts = SnapshotRef {
            context,
            client,
            extensions: &persist.rest.extensions,
            journal: &persist.rest.journal,
            created_at_ms: persist.rest.created_at_ms,
            unknown: &persist.rest.unknown,
            engine_unknown: &persist.rest.engine_unknown,
        };
        let (state, write) = match append {
            Some(shape) => (
                parts.encode_after(shape.entries, shape.fingerprints, shape.records),
                ContextWrite::Append {
                    context: shape.entries,
                    trail: shape.fingerprints + shape.records,
                },
            ),
            None => (parts.encode(), ContextWrite::Generation),
        };
        let committed = persist
            .store
            .commit(
                &persist.key,
                &state,
                write,
                persist.version,
                &persist.pending,
            )
            .await?;
        persist.version = Some(committed.version);
        persist.shape = Some(now);
        persist.stored_hashes = client.hashes.len();
        persist.pending.clear();
        Ok(())
    }

    /// A step: compact when a trigger fires, save, and say how the request's messages
    /// follow from the last one's.
    fn prepare(
        &mut self,
        rt: &tokio::runtime::Runtime,
        wire: Wire,
        max_tokens: Option<u64>,
    ) -> Result<Step, ctxkeeper::Error> {
        self.reserve_output(max_tokens);
        let compactions = self.manager.state().compactions;
        let prepared = match rt.block_on(self.manager.prepare_counted()) {
            Ok(prepared) => prepared,
            Err(err) => {
                self.drain();
                return Err(err);
            }
        };
        let notice = prepared.budget_notice.as_deref();
        let changed = self.dirty
            || prepared.compacted
            || self.manager.state().compactions != compactions
            || notice.is_some();
        // A notice rides on this request only: the next one differs from it again.
        self.dirty = notice.is_some();
        self.last_tokens = Some(prepared.input_tokens);
        self.overflow_attempts = 0;
        let committed = rt.block_on(self.commit());
        let plan = self.plan_emit(wire, changed, notice);
        self.drain();
        let figures = Figures {
            input_tokens: prepared.input_tokens,
            compacted: prepared.compacted,
            changed,
            budget_used_pct: prepared.budget_used_pct,
            budget_notice: prepared.budget_notice,
            window: input_window(self.config.window, self.output),
        };
        Ok((plan, figures, committed))
    }

    /// Overflow recovery: compacts down to what the provider stated (or was told).
    fn recover(
        &mut self,
        rt: &tokio::runtime::Runtime,
        wire: Wire,
        stated: Option<&overflow::Overflow>,
        tokens: Option<u64>,
        limit: Option<u64>,
        attempt: Option<u32>,
    ) -> Result<Step, ctxkeeper::Error> {
        self.overflow_attempts += 1;
        let attempt = attempt.unwrap_or(self.overflow_attempts);
        let limit = limit.or_else(|| stated.and_then(|o| o.max_input_tokens()).filter(|l| *l > 0));
        // The provider's count of the request it refused: what the engine's count of the
        // last request is anchored to (an estimate may have been well below it).
        let counted = stated.and_then(|o| {
            o.input
                .or_else(|| o.requested.map(|r| r.saturating_sub(o.output.unwrap_or(0))))
        });
        if let Some(counted) = counted {
            self.manager.observe_usage(counted);
        }
        let failed = tokens
            .or(counted)
            .or(self.last_tokens)
            .or(limit.map(|l| l + 1))
            .unwrap_or(u64::MAX / 2);
        let result = rt.block_on(self.manager.handle_overflow(attempt, failed, limit));
        let prepared = match result {
            Ok(prepared) => prepared,
            Err(err) => {
                self.drain();
                return Err(err);
            }
        };
        self.dirty = prepared.budget_notice.is_some();
        self.last_tokens = Some(prepared.input_tokens);
        let committed = rt.block_on(self.commit());
        self.cache.covered = self.manager.state().entries.len();
        self.cache.valid = prepared.budget_notice.is_none();
        self.fresh.clear();
        self.drain();
        let figures = Figures {
            input_tokens: prepared.input_tokens,
            compacted: true,
            changed: true,
            budget_used_pct: prepared.budget_used_pct,
            budget_notice: prepared.budget_notice,
            window: input_window(self.config.window, self.output),
        };
        Ok((
            Emit::Full(wire::emit(wire, prepared.messages)),
            figures,
            committed,
        ))
    }

    /// The request's messages: only the appended entries when nothing before them changed
    /// and the wire emits them apart from what precedes (see [`separable`]), else all.
    fn plan_emit(&mut self, wire: Wire, changed: bool, notice: Option<&str>) -> Emit {
        let entries = &self.manager.state().entries;
        let covered = self.cache.covered;
        let fresh = std::mem::take(&mut self.fresh);
        let continues = !changed && self.cache.valid && entries.len() >= covered;
        let suffix = &entries[covered.min(entries.len())..];
        // Every appended entry is a message the caller gave, as given: its own objects are
        // the request's new elements (from the very first request on, when all of them are).
        let own = continues
            && !suffix.is_empty()
            && suffix.len() == fresh.len()
            && suffix
                .iter()
                .zip(&fresh)
                .all(|(entry, (index, _))| entry.meta.log_index == Some(*index))
            && (covered == 0 || separable(wire, entries, covered));
        let plan = if own {
            Emit::Append(
                fresh
                    .into_iter()
                    .map(|(_, object)| Piece::Original(object))
                    .collect(),
            )
        } else if continues && suffix.is_empty() {
            Emit::Append(Vec::new())
        } else if continues && covered > 0 && separable(wire, entries, covered) {
            let messages = suffix.iter().map(|e| e.message.clone()).collect();
            Emit::Append(
                wire::emit(wire, messages)
                    .messages
                    .into_iter()
                    .map(Piece::Emitted)
                    .collect(),
            )
        } else {
            Emit::Full(wire::emit(wire, self.manager.request_messages(notice)))
        };
        self.cache.covered = entries.len();
        self.cache.valid = notice.is_none();
        plan
    }
}

/// Whether `wire` emits `entries[at..]` exactly as the end of the whole list's emission,
/// so a request can be extended by the emission of what was appended: true when the
/// appended part starts with an assistant message and both messages at the seam came from
/// this wire. What carries over from one message to the next in an emission is reset at an
/// assistant message or needs a message from another format: Chat's media returned by tool
/// results wait for the next non-result message (an assistant one flushes them where the
/// end of the list does), Anthropic merges a converted message into its neighbour of the
/// same role (never two of its own), Responses tracks the custom calls of the latest
/// assistant turn; the instruction field and a continuation line concern only the start.
/// `_emit_full` and tests/python/test_py_engine.py hold the cache to the whole emission.
fn separable(wire: Wire, entries: &[ctxkeeper::core::engine::Entry], at: usize) -> bool {
    let native = |index: usize| {
        entries
            .get(index)
            .is_some_and(|e| e.message.hints.origin.as_deref() == Some(wire.as_str()))
    };
    at >= 1
        && entries
            .get(at)
            .is_some_and(|e| e.message.role == Role::Assistant)
        && native(at)
        && native(at - 1)
        && entries[..at]
            .iter()
            .any(|e| !e.message.role.is_instruction())
}

/// The tokens the context may take when the request asks for `output` tokens of answer
/// (the gateway's rule: providers count both against the window; the output budget is
/// capped at three quarters of the window).
fn input_window(window: u64, output: Option<u64>) -> u64 {
    window - output.unwrap_or(0).min(window / 4 * 3)
}

/// A tool-call id is a name, never a path: ids the providers issue are short runs of
/// letters, digits, `_`, `-` (some add `.` or `:`). Anything with a path separator, a `..`,
/// a control character, or over 256 bytes is refused.
fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("is empty".into());
    }
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "is {} bytes long (at most {MAX_ID_BYTES})",
            id.len()
        ));
    }
    if id.contains('/') || id.contains('\\') || id.contains("..") {
        return Err("contains a path separator or `..`".into());
    }
    if id.chars().any(char::is_control) {
        return Err("contains a control character".into());
    }
    Ok(())
}

/// Why new messages were not (all) ingested, turned into a Python exception once the GIL
/// is held.
#[derive(Debug)]
enum Refusal {
    /// Bad input: nothing was ingested.
    Invalid {
        message: String,
        path: String,
        index: Option<usize>,
        kind: &'static str,
    },
    /// The engine failed on `messages[index]` (an archive write): the ones before it stay.
    Failed(usize, ctxkeeper::Error),
}

impl Refusal {
    fn into_err(self, py: Python<'_>) -> PyErr {
        match self {
            Refusal::Invalid {
                message,
                path,
                index,
                kind,
            } => errors::raise(
                Kind::InvalidInput,
                message,
                &[
                    ("path", Attr::Str(path)),
                    ("index", index.map_or(Attr::None, |i| Attr::Int(i as u64))),
                    ("kind", Attr::Str(kind.into())),
                ],
            ),
            Refusal::Failed(index, err) => {
                let top = errors::manager(&err);
                let note = format!("messages[{index}] and later were not ingested");
                let _ = top.value(py).call_method1("add_note", (note,));
                top
            }
        }
    }
}

/// Messages parsed from the caller's objects, with those objects when they map one to one.
struct Batch {
    messages: Vec<Message>,
    originals: Option<Vec<Py<PyAny>>>,
}

/// Refuses hostile ids and tool pairing the new messages would break, given the tail of the
/// context they follow.
fn validate(state: &ContextState, new: &[Message]) -> Result<(), Refusal> {
    for (index, message) in new.iter().enumerate() {
        for part in &message.parts {
            let (what, id) = match part {
                Part::ToolCall { id, .. } => ("tool call id", id),
                Part::ToolResult { call_id, .. } => ("tool result's call id", call_id),
                _ => continue,
            };
            if let Err(reason) = check_id(id) {
                return Err(Refusal::Invalid {
                    message: format!("messages[{index}]: the {what} {:?} {reason}", clip(id, 80)),
                    path: format!("messages[{index}]"),
                    index: Some(index),
                    kind: "hostile_id",
                });
            }
        }
    }
    // An engine fill marker in the new messages would be taken for an archive reference.
    let markers = CheckRules {
        internal_markers: true,
        ..CheckRules::history()
    };
    if let Some(found) = check(new, &markers)
        .into_iter()
        .find(|v| v.kind == ViolationKind::InternalMarker)
    {
        return Err(Refusal::Invalid {
            message: format!("messages[{}]: {}", found.message, found.reason),
            path: format!("messages[{}]", found.message),
            index: Some(found.message),
            kind: "invalid_message",
        });
    }
    // Pairing depends on roles, part kinds and ids only: it is checked on stand-ins that
    // carry just those, so no content is copied.
    let rules = CheckRules {
        internal_markers: false,
        ..CheckRules::history()
    };
    let tail = tail(state);
    let before: Vec<_> = check(&tail, &rules)
        .into_iter()
        .map(|v| (v.message, v.part, v.kind))
        .collect();
    let before_len = tail.len();
    let mut joined = tail;
    joined.extend(new.iter().map(stand_in));
    for violation in check(&joined, &rules) {
        if before.contains(&(violation.message, violation.part, violation.kind)) {
            continue;
        }
        let (position, index) = match violation.message.checked_sub(before_len) {
            Some(index) => (format!("messages[{index}]"), Some(index)),
            // A call of the context that the new messages leave unanswered.
            None => ("the context's last assistant message".to_string(), None),
        };
        let kind = if violation.kind.is_tool_pairing() {
            "tool_pairing"
        } else {
            "invalid_message"
        };
        return Err(Refusal::Invalid {
            message: format!("{position}: {}", violation.reason),
            path: position,
            index,
            kind,
        });
    }
    Ok(())
}

fn clip(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// Stand-ins for the context's messages from its last assistant message on: what the pairing
/// of new messages depends on.
fn tail(state: &ContextState) -> Vec<Message> {
    let start = state
        .entries
        .iter()
        .rposition(|e| e.message.role == Role::Assistant)
        .unwrap_or(state.entries.len());
    state.entries[start..]
        .iter()
        .map(|e| stand_in(&e.message))
        .collect()
}

/// A message reduced to what tool pairing looks at: its role, the kinds of its parts, the
/// ids of its calls and results.
fn stand_in(message: &Message) -> Message {
    let parts = message
        .parts
        .iter()
        .map(|part| match part {
            Part::ToolCall { id, .. } => Part::ToolCall {
                id: id.clone(),
                name: String::new(),
                arguments: String::new(),
                extra: Default::default(),
            },
            Part::ToolResult {
                call_id, is_error, ..
            } => Part::ToolResult {
                call_id: call_id.clone(),
                content: Vec::new(),
                is_error: *is_error,
                extra: Default::default(),
            },
            _ => Part::text(""),
        })
        .collect();
    Message::new(message.role, parts)
}

/// A Python object as a JSON value: dicts, lists, strings, numbers, booleans, None; an
/// object with `model_dump()` (the pydantic types of the openai and anthropic SDKs) as what
/// it dumps.
fn to_value(item: &Bound<'_, PyAny>) -> PyResult<Value> {
    json_value(&dumped(item.clone())?, 0)
}

/// An SDK object (anything with pydantic's `model_dump`) as the dict it dumps to; anything
/// else as it is.
fn dumped(item: Bound<'_, PyAny>) -> PyResult<Bound<'_, PyAny>> {
    if item.is_instance_of::<PyDict>() || !item.hasattr("model_dump")? {
        return Ok(item);
    }
    let kwargs = PyDict::new(item.py());
    kwargs.set_item("mode", "json")?;
    kwargs.set_item("exclude_none", true)?;
    item.call_method("model_dump", (), Some(&kwargs))
}

/// Nesting past this depth is refused (a cyclic or hostile structure).
const MAX_DEPTH: usize = 128;

/// A Python value as JSON, walked directly (the hot path of every ingest).
fn json_value(item: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(errors::invalid(format!(
            "message nests deeper than {MAX_DEPTH} levels"
        )));
    }
    if let Ok(text) = item.cast::<PyString>() {
        return Ok(Value::String(text.to_str()?.to_owned()));
    }
    if let Ok(dict) = item.cast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(dict.len());
        for (key, value) in dict.iter() {
            let key = match key.cast::<PyString>() {
                Ok(key) => key.to_str()?.to_owned(),
                Err(_) => {
                    return Err(errors::invalid(format!(
                        "dict keys must be strings, found {}",
                        key.get_type().name()?
                    )));
                }
            };
            map.insert(key, json_value(&value, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(list) = item.cast::<PyList>() {
        let mut out = Vec::with_capacity(list.len());
        for value in list.iter() {
            out.push(json_value(&value, depth + 1)?);
        }
        return Ok(Value::Array(out));
    }
    if item.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(flag) = item.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if item.is_instance_of::<PyInt>() {
        if let Ok(number) = item.extract::<i64>() {
            return Ok(Value::from(number));
        }
        if let Ok(number) = item.extract::<u64>() {
            return Ok(Value::from(number));
        }
        return Err(errors::invalid("an integer outside the 64-bit range"));
    }
    if let Ok(number) = item.cast::<PyFloat>() {
        return serde_json::Number::from_f64(number.value())
            .map(Value::Number)
            .ok_or_else(|| errors::invalid("NaN and infinity are not JSON"));
    }
    if let Ok(tuple) = item.cast::<PyTuple>() {
        let mut out = Vec::with_capacity(tuple.len());
        for value in tuple.iter() {
            out.push(json_value(&value, depth + 1)?);
        }
        return Ok(Value::Array(out));
    }
    if item.hasattr("model_dump")? {
        return to_value(item);
    }
    Err(errors::invalid(format!(
        "not JSON data: a {} value",
        item.get_type().name()?
    )))
}

/// `messages` as a JSON array (a single message dict is a list of one), and the objects the
/// caller passed (dicts as given; an SDK object as the dict it dumps to).
fn message_list(messages: &Bound<'_, PyAny>) -> PyResult<(Value, Vec<Py<PyAny>>)> {
    let mut list = Vec::new();
    let mut objects = Vec::new();
    let mut add = |item: Bound<'_, PyAny>| -> PyResult<()> {
        let item = dumped(item)?;
        list.push(json_value(&item, 0)?);
        objects.push(item.unbind());
        Ok(())
    };
    if let Ok(items) = messages.cast::<PyList>() {
        for item in items.iter() {
            add(item)?;
        }
    } else if let Ok(items) = messages.cast::<PyTuple>() {
        for item in items.iter() {
            add(item)?;
        }
    } else if messages.is_instance_of::<PyDict>() || messages.hasattr("model_dump")? {
        add(messages.clone())?;
    } else if messages.is_instance_of::<PyString>() {
        return Err(errors::invalid(
            "messages must be a list of message dicts, not a string",
        ));
    } else {
        for item in messages.try_iter()? {
            add(item?)?;
        }
    }
    Ok((Value::Array(list), objects))
}

/// Applies a step's plan to the cache.
fn fill(py: Python<'_>, cache: &mut Cache, plan: Emit) -> PyResult<()> {
    match plan {
        Emit::Full(emitted) => {
            cache.list.clear();
            cache.system = None;
            for message in &emitted.messages {
                cache.list.push(py_json(py, message)?.unbind());
            }
            if let Some(system) = &emitted.system {
                cache.system = Some(py_json(py, system)?.unbind());
            }
        }
        Emit::Append(pieces) => {
            for piece in pieces {
                cache.list.push(match piece {
                    Piece::Original(object) => object,
                    Piece::Emitted(value) => py_json(py, &value)?.unbind(),
                });
            }
        }
    }
    Ok(())
}

/// A JSON value as the Python object `json.loads` would give, built directly (the hot path
/// of every request's messages).
fn py_json<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Number(number) => {
            if let Some(int) = number.as_i64() {
                int.into_pyobject(py)?.into_any()
            } else if let Some(int) = number.as_u64() {
                int.into_pyobject(py)?.into_any()
            } else {
                number
                    .as_f64()
                    .unwrap_or(f64::NAN)
                    .into_pyobject(py)?
                    .into_any()
            }
        }
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(py_json(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(PyString::new(py, key), py_json(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

fn py_value<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, value).map_err(|e| errors::raise(Kind::Base, e.to_string(), &[]))
}

impl PyContextManager {
    /// The manager's state, locked. A thread that has to wait releases the GIL meanwhile, so
    /// a caller holding the lock (engine work runs detached) can always take it back.
    fn lock(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Inner>> {
        let guard = match self.inner.try_lock() {
            Ok(guard) => Ok(guard),
            Err(std::sync::TryLockError::WouldBlock) => self.inner.lock_py_attached(py),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Err(poisoned),
        };
        guard
            .map_err(|_| errors::raise(Kind::Base, "the manager is unusable: a call panicked", &[]))
    }

    /// Hands the queued events to the `on_event` callback, if there is one. A callback that
    /// raises is reported through `sys.unraisablehook`; the step it observed stands.
    fn dispatch(&self, py: Python<'_>) -> PyResult<()> {
        let Some(callback) = &self.on_event else {
            return Ok(());
        };
        let events: Vec<Event> = self.lock(py)?.queue.drain(..).collect();
        for event in events {
            let value = py_value(py, &event)?;
            if let Err(err) = callback.call1(py, (value,)) {
                err.write_unraisable(py, Some(callback.bind(py)));
            }
        }
        Ok(())
    }

    /// The `Prepared` of a step: its messages from the cache the plan updates.
    fn prepared(
        &self,
        py: Python<'_>,
        cache: &mut Cache,
        plan: Emit,
        figures: Figures,
    ) -> PyResult<Prepared> {
        if let Err(err) = fill(py, cache, plan) {
            // Half converted: the next request is emitted whole.
            cache.valid = false;
            return Err(err);
        }
        let messages = PyList::new(py, cache.list.iter().map(|m| m.bind(py)))?;
        Ok(Prepared {
            wire: self.wire,
            messages: messages.unbind(),
            system: cache.system.as_ref().map(|s| s.clone_ref(py)),
            tools: self.tools.as_ref().map(|t| t.clone_ref(py)),
            figures,
        })
    }
}

#[derive(Debug, Clone)]
struct Figures {
    input_tokens: u64,
    compacted: bool,
    changed: bool,
    budget_used_pct: f64,
    budget_notice: Option<String>,
    window: u64,
}

#[pymethods]
impl PyContextManager {
    #[new]
    #[pyo3(signature = (
        policy = None, *, model = "gpt-4o", window = None, wire = "openai-chat", system = None,
        tools = None, fixed_tokens = 0, store = None, session = None, tenant = "default",
        user = None, agent = None, workspace = None, summarizer = "extractive",
        summarizer_url = None, summarizer_model = None, on_event = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        policy: Option<&Bound<'_, PyAny>>,
        model: &str,
        window: Option<u64>,
        wire: &str,
        system: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        fixed_tokens: u64,
        store: Option<String>,
        session: Option<String>,
        tenant: &str,
        user: Option<String>,
        agent: Option<String>,
        workspace: Option<String>,
        summarizer: &str,
        summarizer_url: Option<String>,
        summarizer_model: Option<String>,
        on_event: Option<Py<PyAny>>,
    ) -> PyResult<PyContextManager> {
        let wire: Wire = wire.parse().map_err(errors::config)?;
        let policy = match policy {
            Some(policy) => settings::resolve_policy(policy)?,
            None => settings::resolve_policy(PyString::new(py, "default").as_any())?,
        };
        let token_model = TokenModel::for_model(model, &policy.profiles);
        let window = window.unwrap_or_else(|| {
            policy
                .config
                .window_for(&token_model.profile, &policy.profiles)
        });
        if window == 0 {
            return Err(errors::config("window must be greater than 0"));
        }
        if let Some(callback) = &on_event
            && !callback.bind(py).is_callable()
        {
            return Err(errors::config("on_event must be callable"));
        }
        let system_messages = match system {
            Some(system) if !system.is_none() => wire::parse_system(wire, to_value(system)?)
                .map_err(|e| errors::parse("system", &e))?,
            _ => Vec::new(),
        };
        let (tool_specs, tools_py) = match tools {
            Some(tools) if !tools.is_none() => {
                let value = to_value(tools)?;
                let specs =
                    wire::parse_tools(wire, &value).map_err(|e| errors::parse("tools", &e))?;
                let emitted = Value::Array(wire::emit_tools(wire, &specs));
                let list = py_value(py, &emitted)?.cast_into::<PyList>()?.unbind();
                (specs, Some(list))
            }
            _ => (Vec::new(), None),
        };
        let summarizer = ctxkeeper::summarizers::build(
            summarizer,
            summarizer_url.as_deref(),
            summarizer_model.as_deref(),
        )
        .map_err(errors::config)?;
        let fixed_tokens = fixed_tokens + u64::from(token_model.tools_tokens(&tool_specs));
        let session_id = match (&session, &store) {
            (Some(id), _) => id.clone(),
            (None, Some(_)) => uuid::Uuid::new_v4().to_string(),
            (None, None) => "session".to_string(),
        };
        let key = SessionKey::new(
            tenant,
            user.as_deref().unwrap_or(SessionKey::DEFAULT),
            agent.as_deref().unwrap_or(SessionKey::DEFAULT),
            session_id.as_str(),
        )
        .map_err(|e| errors::invalid(format!("session key: {e}")))?;
        let archive_url = settings::archive_url(workspace.as_deref(), store.as_deref());
        let model_name = model.to_string();
        let opened = runtime::block_on(py, async {
            let offloader = ctxkeeper::store::open_archive(&archive_url)
                .await
                .map_err(|e| ("archive", archive_url.clone(), e))?;
            let store = match &store {
                Some(url) => Some(
                    ctxkeeper::store::open_store(url)
                        .await
                        .map_err(|e| ("store", url.clone(), e))?,
                ),
                None => None,
            };
            let loaded = match &store {
                Some(store) => snapshot::load(store.as_ref(), &key)
                    .await
                    .map_err(|e| match e {
                        snapshot::PersistError::Store(err) => ("store", String::new(), err),
                        other => (
                            "store",
                            String::new(),
                            ctxkeeper::store::StoreError::InvalidInput(other.to_string()),
                        ),
                    })?,
                None => None,
            };
            Ok::<_, (&str, String, ctxkeeper::store::StoreError)>((offloader, store, loaded))
        })?;
        let (offloader, store, loaded) = opened.map_err(|(what, url, err)| {
            let top = errors::raise(
                Kind::Store,
                format!(
                    "cannot open the {what} {}: {err}",
                    ctxkeeper::store::redact(&url)
                ),
                &[],
            );
            top.set_cause(py, Some(errors::store(&err)));
            top
        })?;
        let config = Config {
            policy: policy.config,
            model: token_model,
            model_name,
            window,
            fixed_tokens,
            scope: key.archive_scope(),
            offloader,
            summarizer,
        };
        let settings = Settings {
            policy: config.policy.clone(),
            model: config.model.clone(),
            window,
            fixed_tokens,
        };
        let mut manager = Inner::build(&config, settings);
        let events = manager.subscribe();
        let mut ingested = 0;
        let persist = match store {
            Some(store) => {
                let (mut rest, version) = match loaded {
                    Some((snapshot, version)) => (snapshot, Some(version)),
                    None => (Snapshot::new(ContextState::default()), None),
                };
                let shape = rest.stored;
                let context = std::mem::take(&mut rest.context);
                if version.is_some() {
                    ingested = context.appended;
                    manager.resume(context);
                }
                if version.is_none() {
                    rest.client = ClientRecord::default();
                }
                let stored_hashes = rest.client.hashes.len();
                Some(Persist {
                    store,
                    key,
                    version,
                    // A resume that left messages out is a new generation.
                    shape: shape.filter(|s| {
                        s.continued_by(
                            manager.state(),
                            &rest.client.hashes,
                            &rest.client.hashes,
                            rest.journal.len(),
                        )
                    }),
                    rest,
                    stored_hashes,
                    pending: Vec::new(),
                })
            }
            None => None,
        };
        let mut inner = Inner {
            manager,
            events,
            queue: VecDeque::new(),
            dropped_events: 0,
            config,
            output: None,
            dirty: false,
            last_tokens: None,
            overflow_attempts: 0,
            persist,
            ingested,
            cache: Cache::default(),
            fresh: Vec::new(),
        };
        if !system_messages.is_empty() && ingested == 0 {
            let outcome = runtime::block_on(py, inner.ingest(system_messages, None))?;
            outcome.map_err(|(_, e)| errors::manager(&e))?;
        }
        inner.drain();
        Ok(PyContextManager {
            inner: Mutex::new(inner),
            wire,
            on_event,
            tools: tools_py,
        })
    }

    /// Appends messages (a list of dicts in the manager's wire shape, or one dict). Bad
    /// input raises `InvalidInputError` and ingests nothing.
    fn ingest(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some(batch) = self.batch(messages)? else {
            return Ok(());
        };
        let mut guard = self.lock(py)?;
        let inner = &mut *guard;
        let outcome = runtime::detached(py, |rt| {
            let outcome = inner.take(rt, batch);
            inner.drain();
            outcome
        })?;
        drop(guard);
        outcome.map_err(|refusal| refusal.into_err(py))?;
        self.dispatch(py)
    }

    /// Compacts when a trigger fires and returns the request's messages. `messages`, when
    /// given, are ingested first (one call per step: `cm.prepare(new_messages)`).
    /// `max_tokens` is the output budget the request will ask for: the context is budgeted
    /// to the window less that (as the gateway does).
    #[pyo3(signature = (messages = None, *, max_tokens = None))]
    fn prepare(
        &self,
        py: Python<'_>,
        messages: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<u64>,
    ) -> PyResult<Prepared> {
        let batch = match messages {
            Some(messages) if !messages.is_none() => self.batch(messages)?,
            _ => None,
        };
        let wire = self.wire;
        let mut guard = self.lock(py)?;
        let inner = &mut *guard;
        let outcome = runtime::detached(py, |rt| {
            if let Some(batch) = batch
                && let Err(refusal) = inner.take(rt, batch)
            {
                inner.drain();
                return Err(refusal);
            }
            Ok(inner.prepare(rt, wire, max_tokens))
        })?;
        let result = match outcome {
            Ok(Ok((plan, figures, committed))) => {
                let prepared = self.prepared(py, &mut inner.cache, plan, figures);
                committed.map_err(|e| errors::store(&e)).and(prepared)
            }
            Ok(Err(err)) => Err(errors::manager(&err)),
            Err(refusal) => Err(refusal.into_err(py)),
        };
        drop(guard);
        self.dispatch(py)?;
        result
    }

    /// Handles a provider's context-overflow error: compacts harder so the retry fits, and
    /// returns the smaller request; `None` when `error` is not a context-overflow error.
    /// `error` is the error body (str, bytes, dict) or the SDK's exception; `tokens` and
    /// `limit` override what it states; `attempt` counts from 1 (by default, the overflows
    /// since the last `prepare` or `usage`).
    #[pyo3(signature = (error = None, *, status = None, tokens = None, limit = None, attempt = None))]
    fn on_overflow(
        &self,
        py: Python<'_>,
        error: Option<&Bound<'_, PyAny>>,
        status: Option<u16>,
        tokens: Option<u64>,
        limit: Option<u64>,
        attempt: Option<u32>,
    ) -> PyResult<Option<Prepared>> {
        let stated = match error {
            Some(error) if !error.is_none() => {
                let (status, body) = error_text(error, status)?;
                match overflow::classify(status, &body) {
                    Some(found) => Some(found),
                    None => return Ok(None),
                }
            }
            _ => None,
        };
        let wire = self.wire;
        let mut guard = self.lock(py)?;
        let inner = &mut *guard;
        let outcome = runtime::detached(py, |rt| {
            inner.recover(rt, wire, stated.as_ref(), tokens, limit, attempt)
        })?;
        let result = match outcome {
            Ok((plan, figures, committed)) => {
                let prepared = self.prepared(py, &mut inner.cache, plan, figures);
                committed.map_err(|e| errors::store(&e)).and(prepared)
            }
            Err(err) => Err(errors::manager(&err)),
        };
        drop(guard);
        self.dispatch(py)?;
        result.map(Some)
    }

    /// Records the provider's usage report for the last request: an int (input tokens), or
    /// the `usage` of an OpenAI Chat, Responses or Anthropic answer (dict or SDK object).
    /// Returns the input tokens it read.
    fn usage(&self, py: Python<'_>, report: &Bound<'_, PyAny>) -> PyResult<u64> {
        let input = if let Ok(tokens) = report.extract::<u64>() {
            tokens
        } else {
            input_tokens(&to_value(report)?)?
        };
        let mut inner = self.lock(py)?;
        inner.manager.observe_usage(input);
        inner.overflow_attempts = 0;
        inner.drain();
        drop(inner);
        self.dispatch(py)?;
        Ok(input)
    }

    /// Compacts now (optionally under a one-off policy override, a TOML fragment, and with
    /// focus instructions for the summary). Returns whether anything changed.
    #[pyo3(signature = (*, focus = None, overrides = None))]
    fn compact(
        &self,
        py: Python<'_>,
        focus: Option<String>,
        overrides: Option<String>,
    ) -> PyResult<bool> {
        let mut guard = self.lock(py)?;
        let inner = &mut *guard;
        let (result, committed) = runtime::detached(py, |rt| {
            let result = rt.block_on(inner.manager.compact(overrides.as_deref(), focus));
            if matches!(result, Ok(true)) {
                inner.dirty = true;
            }
            let committed = rt.block_on(inner.commit());
            inner.drain();
            (result, committed)
        })?;
        drop(guard);
        self.dispatch(py)?;
        let changed = result.map_err(|e| errors::manager(&e))?;
        committed.map_err(|e| errors::store(&e))?;
        Ok(changed)
    }

    /// The events emitted since the last call, oldest first, as dicts (`type` names the
    /// event). With an `on_event` callback they go to the callback instead.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let events: Vec<Event> = self.lock(py)?.queue.drain(..).collect();
        let list = PyList::empty(py);
        for event in &events {
            list.append(py_value(py, event)?)?;
        }
        Ok(list.try_iter()?.into_any())
    }

    /// Lines of this session's archived content that contain `query` (case-insensitive; a
    /// regular expression with `regex=True`), as dicts `{reference, line, text}` (`text`
    /// cut to 400 characters around the match).
    #[pyo3(signature = (query, *, regex = false, limit = 50))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        regex: bool,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        if query.is_empty() {
            return Err(errors::invalid("query is empty"));
        }
        let pattern = if regex {
            query.to_string()
        } else {
            regex::escape(query)
        };
        let pattern = regex::RegexBuilder::new(&pattern)
            .case_insensitive(true)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| errors::invalid(format!("invalid regular expression: {e}")))?;
        let (offloader, scope) = self.archive(py)?;
        let found = runtime::block_on(py, async {
            offloader
                .grep(&scope, &pattern, limit.clamp(1, 10_000))
                .await
        })?;
        let mut hits = found.map_err(|e| errors::store(&e))?;
        for hit in &mut hits {
            hit.text = excerpt(&hit.text, &pattern, 400);
        }
        py_value(py, &hits)
    }

    /// The whole text of an archived item (a reference from an event, a placeholder or
    /// `search`), or at most `limit` bytes of it from `offset`.
    #[pyo3(signature = (reference, *, offset = 0, limit = None))]
    fn read(
        &self,
        py: Python<'_>,
        reference: String,
        offset: u64,
        limit: Option<u64>,
    ) -> PyResult<String> {
        let (offloader, scope) = self.archive(py)?;
        let reference = ArchiveRef(reference);
        let text = runtime::block_on(py, async {
            match (offset, limit) {
                (0, None) => offloader
                    .read_all(&scope, &reference)
                    .await
                    .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
                (offset, limit) => offloader
                    .read(&scope, &reference, offset, limit.unwrap_or(u64::MAX / 2))
                    .await
                    .map(|page| page.content),
            }
        })?;
        text.map_err(|e| errors::store(&e))
    }

    /// This session's archived items, as dicts `{reference, bytes}`.
    fn archived<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (offloader, scope) = self.archive(py)?;
        let items = runtime::block_on(py, async { offloader.list(&scope).await })?
            .map_err(|e| errors::store(&e))?;
        py_value(py, &items)
    }

    /// Exact tokens of the current context plus the fixed tokens (tool schemas): what the
    /// next request weighs under the model's tokenizer.
    fn count_tokens(&self, py: Python<'_>) -> PyResult<u64> {
        let guard = self.lock(py)?;
        let inner = &*guard;
        let model = &inner.config.model;
        let tokens: u64 = runtime::detached(py, |_| {
            inner
                .manager
                .state()
                .entries
                .iter()
                // The engine's cached count where it has one: a call costs the messages it
                // never counted, not the whole context.
                .map(|e| u64::from(e.tokens.unwrap_or_else(|| model.message_tokens(&e.message))))
                .sum()
        })?;
        Ok(tokens + inner.config.fixed_tokens)
    }

    /// Saves the session now (a manager with a store also saves at every `prepare`).
    fn save(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = self.lock(py)?;
        let inner = &mut *guard;
        let committed = runtime::detached(py, |rt| rt.block_on(inner.commit()))?;
        committed.map_err(|e| errors::store(&e))
    }

    /// Figures of the managed context: messages, compactions, archived bytes, the summary.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = self.lock(py)?;
        let state = inner.manager.state();
        let dict = PyDict::new(py);
        dict.set_item("messages", state.entries.len())?;
        dict.set_item("ingested", inner.ingested)?;
        dict.set_item("compactions", state.compactions)?;
        dict.set_item("archived_bytes", inner.manager.archived_bytes())?;
        dict.set_item("window", input_window(inner.config.window, inner.output))?;
        dict.set_item("fixed_tokens", inner.config.fixed_tokens)?;
        dict.set_item("policy", &inner.config.policy.name)?;
        dict.set_item("model", &inner.config.model_name)?;
        dict.set_item("dropped_events", inner.dropped_events)?;
        dict.set_item("engine_seconds", inner.manager.clock().engine.as_secs_f64())?;
        dict.set_item(
            "summary",
            state
                .summary
                .as_ref()
                .map(|s| s.render(&inner.config.policy.summary.schema)),
        )?;
        Ok(dict)
    }

    /// The session's key: tenant, session id, and with a store its user and agent and
    /// whether it was saved.
    #[getter]
    fn session<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = self.lock(py)?;
        let dict = PyDict::new(py);
        dict.set_item("tenant", &inner.config.scope.tenant)?;
        dict.set_item("session", &inner.config.scope.session)?;
        if let Some(persist) = &inner.persist {
            dict.set_item("user", persist.key.user())?;
            dict.set_item("agent", persist.key.agent())?;
            dict.set_item("stored", persist.version.is_some())?;
        }
        Ok(dict)
    }

    /// The wire shape: `openai-chat`, `responses` or `anthropic`.
    #[getter]
    fn wire(&self) -> &'static str {
        self.wire.as_str()
    }

    /// The request's messages emitted whole from the context, bypassing the cache
    /// `prepare` keeps (for tests of that cache).
    fn _emit_full<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.lock(py)?;
        let emitted = wire::emit(self.wire, inner.manager.request_messages(None));
        py_value(py, &emitted.messages)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let inner = self.lock(py)?;
        Ok(format!(
            "ContextManager(policy={:?}, model={:?}, window={}, wire={:?}, session={:?}, messages={})",
            inner.config.policy.name,
            inner.config.model_name,
            inner.config.window,
            self.wire.as_str(),
            inner.config.scope.session,
            inner.manager.state().entries.len()
        ))
    }
}

impl PyContextManager {
    /// Converts and parses the caller's messages (with the GIL: they are Python objects).
    fn batch(&self, messages: &Bound<'_, PyAny>) -> PyResult<Option<Batch>> {
        let (list, objects) = message_list(messages)?;
        let parsed =
            wire::parse_messages(self.wire, list).map_err(|e| errors::parse("messages", &e))?;
        if parsed.is_empty() {
            return Ok(None);
        }
        // Chat and Anthropic messages map one to one onto the engine's: while one stays as
        // given, the caller's object is what the next request carries.
        let originals =
            (self.wire != Wire::Responses && objects.len() == parsed.len()).then_some(objects);
        Ok(Some(Batch {
            messages: parsed,
            originals,
        }))
    }

    fn archive(&self, py: Python<'_>) -> PyResult<(Arc<dyn Offloader>, ArchiveScope)> {
        let inner = self.lock(py)?;
        Ok((inner.config.offloader.clone(), inner.config.scope.clone()))
    }
}

/// At most `width` characters of `line`, around the first match (archived messages are one
/// JSON object per line and can be very long).
fn excerpt(line: &str, pattern: &regex::Regex, width: usize) -> String {
    let chars = line.chars().count();
    if chars <= width {
        return line.to_string();
    }
    let at = pattern
        .find(line)
        .map_or(0, |m| line[..m.start()].chars().count());
    let start = at.saturating_sub(width / 4).min(chars - width);
    let body: String = line.chars().skip(start).take(width).collect();
    let head = if start > 0 { "…" } else { "" };
    let tail = if start + width < chars { "…" } else { "" };
    format!("{head}{body}{tail}")
}

/// The status and body text of a provider error: a string or bytes (the body), a dict (the
/// parsed body), or an SDK exception (`status_code` and `body` / `response.text` / `str()`).
fn error_text(error: &Bound<'_, PyAny>, status: Option<u16>) -> PyResult<(u16, String)> {
    if let Ok(text) = error.extract::<String>() {
        return Ok((status.unwrap_or(400), text));
    }
    if let Ok(bytes) = error.extract::<Vec<u8>>() {
        return Ok((
            status.unwrap_or(400),
            String::from_utf8_lossy(&bytes).into_owned(),
        ));
    }
    if error.is_instance_of::<PyDict>() {
        let value = to_value(error)?;
        return Ok((status.unwrap_or(400), value.to_string()));
    }
    let status = status
        .or_else(|| {
            error
                .getattr("status_code")
                .ok()
                .and_then(|s| s.extract().ok())
        })
        .unwrap_or(400);
    if let Ok(body) = error.getattr("body")
        && !body.is_none()
    {
        if let Ok(text) = body.extract::<String>() {
            return Ok((status, text));
        }
        if let Ok(value) = to_value(&body) {
            return Ok((status, value.to_string()));
        }
    }
    if let Ok(response) = error.getattr("response")
        && let Ok(text) = response.getattr("text")
        && let Ok(text) = text.extract::<String>()
    {
        return Ok((status, text));
    }
    Ok((status, error.str()?.to_string()))
}

/// The input tokens a usage report states, whichever provider wrote it: OpenAI Chat
/// `prompt_tokens`, Responses `input_tokens`, Anthropic `input_tokens` plus its cache reads
/// and writes (Anthropic reports those apart; all of them are the request's input).
fn input_tokens(usage: &Value) -> PyResult<u64> {
    let usage = usage.get("usage").unwrap_or(usage);
    let field = |name: &str| usage.get(name).and_then(Value::as_u64);
    if let Some(prompt) = field("prompt_tokens") {
        return Ok(prompt);
    }
    if let Some(input) = field("input_tokens") {
        let cached = field("cache_read_input_tokens").unwrap_or(0)
            + field("cache_creation_input_tokens").unwrap_or(0);
        return Ok(input + cached);
    }
    Err(errors::invalid(
        "usage: expected an int or a usage report with prompt_tokens or input_tokens",
    ))
}

/// What `prepare` and `on_overflow` return: the request's messages in the manager's wire
/// shape and what the step did.
#[pyclass(module = "ctxkeeper_engine._native", name = "Prepared", frozen)]
#[derive(Debug)]
pub struct Prepared {
    wire: Wire,
    messages: Py<PyList>,
    system: Option<Py<PyAny>>,
    tools: Option<Py<PyList>>,
    figures: Figures,
}

#[pymethods]
impl Prepared {
    /// The messages to send (Responses: the `input` items), as dicts.
    #[getter]
    fn messages(&self, py: Python<'_>) -> Py<PyList> {
        self.messages.clone_ref(py)
    }

    /// The instruction field (Anthropic `system`, Responses `instructions`), or None.
    #[getter]
    fn system(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.system.as_ref().map(|s| s.clone_ref(py))
    }

    /// The request fields to splat into the client call: `messages` (Responses: `input`)
    /// and the instruction field when there is one.
    #[getter]
    fn kwargs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let fields = wire::fields(self.wire);
        let dict = PyDict::new(py);
        if let (Some(name), Some(system)) = (fields.system, &self.system) {
            dict.set_item(name, system.bind(py))?;
        }
        dict.set_item(fields.messages, self.messages.bind(py))?;
        Ok(dict)
    }

    /// A whole request body: `model`, the conversation fields, the manager's `tools` (in
    /// its wire shape) and any other fields given.
    #[pyo3(signature = (model = None, **fields))]
    fn request<'py>(
        &self,
        py: Python<'py>,
        model: Option<&str>,
        fields: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let body = PyDict::new(py);
        if let Some(model) = model {
            body.set_item("model", model)?;
        }
        body.update(self.kwargs(py)?.as_mapping())?;
        if let Some(tools) = &self.tools {
            body.set_item("tools", tools.bind(py).as_sequence().to_list()?)?;
        }
        if let Some(fields) = fields {
            body.update(fields.as_mapping())?;
        }
        Ok(body)
    }

    /// Estimated input tokens of the request (context + fixed tokens).
    #[getter]
    fn input_tokens(&self) -> u64 {
        self.figures.input_tokens
    }

    /// Whether a compaction ran for this request.
    #[getter]
    fn compacted(&self) -> bool {
        self.figures.compacted
    }

    /// Whether these messages differ from the previous request plus the messages ingested
    /// since, as they were given. When False, a caller that keeps its own list may send it.
    #[getter]
    fn changed(&self) -> bool {
        self.figures.changed
    }

    /// Share of the window the request uses, in percent.
    #[getter]
    fn budget_used_pct(&self) -> f64 {
        self.figures.budget_used_pct
    }

    /// The budget notice added to the last message, if the policy asks for one.
    #[getter]
    fn budget_notice(&self) -> Option<String> {
        self.figures.budget_notice.clone()
    }

    /// The window the request was budgeted to (the model's, less `max_tokens`).
    #[getter]
    fn window(&self) -> u64 {
        self.figures.window
    }

    /// The wire shape of the messages.
    #[getter]
    fn wire(&self) -> &'static str {
        self.wire.as_str()
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.messages.bind(py).len()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Prepared(messages={}, input_tokens={}, compacted={}, changed={})",
            self.messages.bind(py).len(),
            self.figures.input_tokens,
            if self.figures.compacted {
                "True"
            } else {
                "False"
            },
            if self.figures.changed {
                "True"
            } else {
                "False"
            },
        )
    }
}
