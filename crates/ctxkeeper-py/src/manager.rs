//! `ContextManager`: one session's managed context, in the caller's wire shape.
//!
//! The session itself is `ctxkeeper_embed::Session` (shared with the npm package); this
//! module converts Python objects to and from JSON values (plain Chat message dicts are read
//! straight into the message model, see `crate::plain`), keeps the Python objects of the
//! last request (so a step that only appended converts only what it appended, and hands the
//! caller's own dicts back), runs engine work with the GIL released (a step: once it waits
//! on IO, see `runtime::Stepper`) and raises the exceptions of `ctxkeeper_engine.errors`.

use std::sync::{Mutex, MutexGuard};

use ctxkeeper::core::engine::Event;
use ctxkeeper::core::formats::Wire;
use ctxkeeper::core::model::Message;
use ctxkeeper::core::overflow;
use ctxkeeper_embed::{Archive, Batch, Emit, Figures, Options, Piece, Session, wire};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;

use crate::errors::{self, Kind};
use crate::plain;
use crate::runtime;
use crate::settings;

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

/// The session and the Python objects of its last request.
struct Inner {
    session: Session<Py<PyAny>>,
    cache: Cache,
}

/// The messages of the last request, as the Python objects handed out.
#[derive(Default)]
struct Cache {
    /// A list of them that is never handed out: each request's list is a copy of it (one
    /// call that takes every reference in C, where building a new list here took two calls
    /// of the stable ABI per message).
    list: Option<Py<PyList>>,
    system: Option<Py<PyAny>>,
}

impl Cache {
    /// The request's messages: a new list (the caller may keep or change it).
    fn messages<'py>(&self, py: Python<'py>) -> Bound<'py, PyList> {
        match &self.list {
            Some(list) => {
                let list = list.bind(py);
                list.get_slice(0, list.len())
            }
            None => PyList::empty(py),
        }
    }
}

/// Applies a step's plan to the cache.
fn fill(py: Python<'_>, cache: &mut Cache, plan: Emit<Py<PyAny>>) -> PyResult<()> {
    match plan {
        Emit::Full(emitted) => {
            let list = PyList::empty(py);
            cache.list = Some(list.clone().unbind());
            cache.system = None;
            for message in &emitted.messages {
                list.append(py_json(py, message)?)?;
            }
            if let Some(system) = &emitted.system {
                cache.system = Some(py_json(py, system)?.unbind());
            }
        }
        Emit::Append(pieces) => {
            let list = cache
                .list
                .get_or_insert_with(|| PyList::empty(py).unbind())
                .bind(py);
            for piece in pieces {
                match piece {
                    Piece::Original(object) => list.append(object)?,
                    Piece::Emitted(value) => list.append(py_json(py, &value)?)?,
                }
            }
        }
    }
    Ok(())
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
        let events: Vec<Event> = self.lock(py)?.session.take_events();
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
        inner: &mut Inner,
        plan: Emit<Py<PyAny>>,
        figures: Figures,
    ) -> PyResult<Prepared> {
        if let Err(err) = fill(py, &mut inner.cache, plan) {
            // Half converted: the next request is emitted whole.
            inner.session.invalidate_request();
            return Err(err);
        }
        let cache = &inner.cache;
        let messages = cache.messages(py);
        Ok(Prepared {
            wire: self.wire,
            messages: messages.unbind(),
            system: cache.system.as_ref().map(|s| s.clone_ref(py)),
            tools: self.tools.as_ref().map(|t| t.clone_ref(py)),
            figures,
        })
    }

    /// Reads the caller's messages into a batch (with the GIL: they are Python objects):
    /// plain Chat dicts straight into the message model, anything else converted to JSON
    /// and parsed.
    fn batch(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Batch<Py<PyAny>>>> {
        let (given, objects) = message_list(messages, self.wire)?;
        match given {
            Given::Messages(parsed) => Ok(Batch::from_messages(self.wire, parsed, Some(objects))),
            Given::Json(list) => {
                Batch::parse(self.wire, list, Some(objects)).map_err(|e| errors::embed(py, e))
            }
        }
    }

    fn archive(&self, py: Python<'_>) -> PyResult<Archive> {
        Ok(self.lock(py)?.session.archive())
    }
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
        let wire = ctxkeeper_embed::parse_wire(wire).map_err(|e| errors::embed(py, e))?;
        let policy = match policy {
            Some(policy) => settings::policy_spec(policy)?,
            None => ctxkeeper_embed::PolicySpec::default(),
        };
        if let Some(callback) = &on_event
            && !callback.bind(py).is_callable()
        {
            return Err(errors::config("on_event must be callable"));
        }
        let value = |item: Option<&Bound<'_, PyAny>>| -> PyResult<Option<Value>> {
            match item {
                Some(item) if !item.is_none() => Ok(Some(to_value(item)?)),
                _ => Ok(None),
            }
        };
        let options = Options {
            policy,
            model: model.to_string(),
            window,
            wire,
            system: value(system)?,
            tools: value(tools)?,
            fixed_tokens,
            store,
            session,
            tenant: tenant.to_string(),
            user,
            agent,
            workspace,
            summarizer: summarizer.to_string(),
            summarizer_url,
            summarizer_model,
        };
        let opened = runtime::detached(py, |rt| Session::open(rt, options))?;
        let session = opened.map_err(|e| errors::embed(py, e))?;
        let tools = match session.tools() {
            Some(tools) => Some(
                py_json(py, &Value::Array(tools.to_vec()))?
                    .cast_into::<PyList>()?
                    .unbind(),
            ),
            None => None,
        };
        Ok(PyContextManager {
            inner: Mutex::new(Inner {
                session,
                cache: Cache::default(),
            }),
            wire,
            on_event,
            tools,
        })
    }

    /// Appends messages (a list of dicts in the manager's wire shape, or one dict). Bad
    /// input raises `InvalidInputError` and ingests nothing.
    fn ingest(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some(batch) = self.batch(py, messages)? else {
            return Ok(());
        };
        let mut guard = self.lock(py)?;
        let inner = &mut *guard;
        let outcome = inner.session.take(&runtime::Stepper::new(py)?, batch);
        drop(guard);
        outcome.map_err(|e| errors::embed(py, e))?;
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
            Some(messages) if !messages.is_none() => self.batch(py, messages)?,
            _ => None,
        };
        let mut guard = self.lock(py)?;
        let inner = &mut *guard;
        let stepper = runtime::Stepper::new(py)?;
        let outcome = match batch {
            Some(batch) => inner.session.take(&stepper, batch),
            None => Ok(()),
        }
        .and_then(|()| inner.session.prepare(&stepper, max_tokens));
        drop(stepper);
        let result = match outcome {
            Ok(step) => {
                let prepared = self.prepared(py, inner, step.emit, step.figures);
                step.committed.map_err(|e| errors::store(&e)).and(prepared)
            }
            Err(err) => Err(errors::embed(py, err)),
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
        let mut guard = self.lock(py)?;
        let inner = &mut *guard;
        let outcome = runtime::detached(py, |rt| {
            inner
                .session
                .recover(rt, stated.as_ref(), tokens, limit, attempt)
        })?;
        let result = match outcome {
            Ok(step) => {
                let prepared = self.prepared(py, inner, step.emit, step.figures);
                step.committed.map_err(|e| errors::store(&e)).and(prepared)
            }
            Err(err) => Err(errors::embed(py, err)),
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
            ctxkeeper_embed::input_tokens(&to_value(report)?).map_err(|e| errors::embed(py, e))?
        };
        self.lock(py)?.session.observe_usage(input);
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
        let result = runtime::detached(py, |rt| inner.session.compact(rt, focus, overrides))?;
        drop(guard);
        self.dispatch(py)?;
        result.map_err(|e| errors::embed(py, e))
    }

    /// The events emitted since the last call, oldest first, as dicts (`type` names the
    /// event). With an `on_event` callback they go to the callback instead.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let events: Vec<Event> = self.lock(py)?.session.take_events();
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
        let archive = self.archive(py)?;
        let hits = runtime::block_on(py, archive.search(query, regex, limit))?
            .map_err(|e| errors::embed(py, e))?;
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
        let archive = self.archive(py)?;
        runtime::block_on(py, archive.read(reference, offset, limit))?
            .map_err(|e| errors::embed(py, e))
    }

    /// This session's archived items, as dicts `{reference, bytes}`.
    fn archived<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let archive = self.archive(py)?;
        let items = runtime::block_on(py, archive.list())?.map_err(|e| errors::embed(py, e))?;
        py_value(py, &items)
    }

    /// Exact tokens of the current context plus the fixed tokens (tool schemas): what the
    /// next request weighs under the model's tokenizer.
    fn count_tokens(&self, py: Python<'_>) -> PyResult<u64> {
        let guard = self.lock(py)?;
        let inner = &*guard;
        runtime::detached(py, |_| inner.session.count_tokens())
    }

    /// Saves the session now (a manager with a store also saves at every `prepare`).
    fn save(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = self.lock(py)?;
        let inner = &mut *guard;
        let saved = runtime::detached(py, |rt| inner.session.save(rt))?;
        saved.map_err(|e| errors::embed(py, e))
    }

    /// Figures of the managed context: messages, compactions, archived bytes, the summary.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = self.lock(py)?.session.stats();
        Ok(py_value(py, &stats)?.cast_into::<PyDict>()?)
    }

    /// The session's key: tenant, session id, and with a store its user and agent and
    /// whether it was saved.
    #[getter]
    fn session<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let info = self.lock(py)?.session.info();
        Ok(py_value(py, &info)?.cast_into::<PyDict>()?)
    }

    /// The wire shape: `openai-chat`, `responses` or `anthropic`.
    #[getter]
    fn wire(&self) -> &'static str {
        self.wire.as_str()
    }

    /// The request's messages emitted whole from the context, bypassing the cache
    /// `prepare` keeps (for tests of that cache).
    fn _emit_full<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let emitted: wire::Emitted = self.lock(py)?.session.emit_full();
        py_value(py, &emitted.messages)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.lock(py)?.session.describe())
    }
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

/// A Python value as JSON, walked directly (the path of every message that is not a plain
/// Chat message, and of everything else the caller hands in).
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

/// The caller's messages, read.
enum Given {
    /// Every one a plain Chat message ([`plain::chat_message`]), read into the model.
    Messages(Vec<Message>),
    /// A JSON array to parse.
    Json(Value),
}

/// `messages` read (a single message dict is a list of one), and the objects the caller
/// passed (dicts as given; an SDK object as the dict it dumps to). Under Chat, plain message
/// dicts are read straight into the model; from the first one that is not, every message is
/// converted to JSON instead and parsed, so what bad input raises is what it always raised.
fn message_list(messages: &Bound<'_, PyAny>, wire: Wire) -> PyResult<(Given, Vec<Py<PyAny>>)> {
    let py = messages.py();
    let mut read = (wire == Wire::OpenAiChat).then(Vec::new);
    let mut list = Vec::new();
    let mut objects: Vec<Py<PyAny>> = Vec::new();
    let mut add = |item: Bound<'_, PyAny>| -> PyResult<()> {
        let item = dumped(item)?;
        if let Some(done) = &mut read {
            if let Some(message) = plain::chat_message(&item) {
                done.push(message);
                objects.push(item.unbind());
                return Ok(());
            }
            read = None;
            for object in &objects {
                list.push(json_value(object.bind(py), 0)?);
            }
        }
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
    let given = match read {
        Some(messages) => Given::Messages(messages),
        None => Given::Json(Value::Array(list)),
    };
    Ok((given, objects))
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
