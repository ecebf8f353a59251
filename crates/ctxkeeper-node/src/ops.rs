//! The operations of a session, as JSON in and JSON out: everything the addon does, without
//! N-API (so `cargo test` runs it).
//!
//! Every call answers an envelope, `{"ok": value}` or `{"error": {...}}`: the package's
//! loader (`packages/ctxkeeper-node/index.js`) turns an error into an instance of its error
//! class (`InvalidInputError`, `StoreError`, …) with the fields named here (`path`, `index`,
//! `kind`, the figures of an overflow error, and `cause`, the next error of the chain).
//! Values cross as JSON text: `JSON.parse` and `JSON.stringify` are the fastest way in and
//! out of V8, and they keep integers exact.
//!
//! ```
//! use ctxkeeper_node::ops::{Handle, call};
//! use serde_json::json;
//!
//! let handle = Handle::default();
//! let opened = call(&handle, "open", json!({"window": 16000}));
//! assert!(opened.get("ok").is_some());
//! let ingested = call(&handle, "ingest", json!({"messages": [{"role": "narrator", "content": "hi"}]}));
//! assert_eq!(ingested["error"]["class"], "InvalidInputError");
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ctxkeeper::core::overflow;
use ctxkeeper_embed::{
    Batch, EmbedError, Emit, Figures, Options, Piece, PolicySpec, Session, parse_wire,
    runtime::runtime,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The caller's handle of a message object it gave (its position in the loader's table).
pub type Seq = u32;

/// One session, opened by the `open` operation; shared with the worker threads that run
/// the asynchronous operations.
#[derive(Debug, Clone, Default)]
pub struct Handle {
    session: Arc<Mutex<Option<Session<Seq>>>>,
    /// The session can do no IO: no store, an in-process archive, the extractive summarizer.
    io_free: Arc<AtomicBool>,
}

impl Handle {
    fn lock(&self) -> Result<MutexGuard<'_, Option<Session<Seq>>>, EmbedError> {
        self.session
            .lock()
            .map_err(|_| EmbedError::Other("the manager is unusable: a call panicked".into()))
    }

    /// Whether `op` must run on a worker thread: `open`, and the operations that touch a
    /// store, an archive or a summarizer model unless the session can do no IO (then a step
    /// costs no hop to the thread pool and back).
    pub fn needs_worker(&self, op: &str) -> bool {
        op == "open" || (is_async(op) && !self.io_free.load(Ordering::Relaxed))
    }
}

/// Runs operation `op` with its arguments and answers its envelope.
pub fn call(handle: &Handle, op: &str, args: Value) -> Value {
    match run(handle, op, args) {
        Ok(value) => json!({ "ok": value }),
        Err(err) => json!({ "error": error_value(&err) }),
    }
}

/// The operations that touch a store or an archive (the loader awaits them on a worker
/// thread); the others answer at once.
pub fn is_async(op: &str) -> bool {
    matches!(
        op,
        "open"
            | "ingest"
            | "prepare"
            | "onOverflow"
            | "compact"
            | "search"
            | "read"
            | "archived"
            | "save"
    )
}

/// The constructor's options, in the package's camelCase.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct OpenArgs {
    policy: Option<Value>,
    model: Option<String>,
    window: Option<u64>,
    wire: Option<String>,
    system: Option<Value>,
    tools: Option<Value>,
    fixed_tokens: u64,
    store: Option<String>,
    session: Option<String>,
    tenant: Option<String>,
    user: Option<String>,
    agent: Option<String>,
    workspace: Option<String>,
    summarizer: Option<String>,
    summarizer_url: Option<String>,
    summarizer_model: Option<String>,
}

fn args<T: for<'de> Deserialize<'de>>(op: &str, value: Value) -> Result<T, EmbedError> {
    let value = if value.is_null() { json!({}) } else { value };
    serde_json::from_value(value).map_err(|e| EmbedError::config(format!("{op}: {e}")))
}

fn open(handle: &Handle, value: Value) -> Result<Value, EmbedError> {
    let given: OpenArgs = args("options", value)?;
    let defaults = Options::default();
    let policy = match given.policy {
        None | Some(Value::Null) => PolicySpec::default(),
        Some(Value::String(name)) => PolicySpec::Named(name),
        Some(overrides @ Value::Object(_)) => PolicySpec::Overrides(overrides),
        Some(other) => {
            return Err(EmbedError::config(format!(
                "policy must be a preset name, a config file path or an object of overrides, not {other}"
            )));
        }
    };
    let wire = match &given.wire {
        Some(name) => parse_wire(name)?,
        None => defaults.wire,
    };
    let options = Options {
        policy,
        model: given.model.unwrap_or(defaults.model),
        window: given.window,
        wire,
        system: given.system,
        tools: given.tools,
        fixed_tokens: given.fixed_tokens,
        store: given.store,
        session: given.session,
        tenant: given.tenant.unwrap_or(defaults.tenant),
        user: given.user,
        agent: given.agent,
        workspace: given.workspace,
        summarizer: given.summarizer.unwrap_or(defaults.summarizer),
        summarizer_url: given.summarizer_url,
        summarizer_model: given.summarizer_model,
    };
    let io_free = options.store.is_none()
        && options.summarizer == "extractive"
        && ctxkeeper_embed::policy::archive_url(options.workspace.as_deref(), None) == "memory://";
    let session = Session::open(runtime()?, options)?;
    let answer = json!({
        "wire": session.wire().as_str(),
        "tools": session.tools(),
        "session": session.info(),
        "ioFree": io_free,
    });
    *handle.lock()? = Some(session);
    handle.io_free.store(io_free, Ordering::Relaxed);
    Ok(answer)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct MessagesArgs {
    messages: Option<Value>,
    /// The loader's handles of `messages`, one per element.
    seqs: Option<Vec<Seq>>,
    max_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct OverflowArgs {
    /// The error's status and body text; none: recover without a provider's statement.
    status: Option<u16>,
    body: Option<String>,
    tokens: Option<u64>,
    limit: Option<u64>,
    attempt: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct CompactArgs {
    focus: Option<String>,
    overrides: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    regex: bool,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    50
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReadArgs {
    reference: String,
    #[serde(default)]
    offset: u64,
    limit: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageArgs {
    report: Value,
}

fn run(handle: &Handle, op: &str, value: Value) -> Result<Value, EmbedError> {
    if op == "open" {
        return open(handle, value);
    }
    let rt = runtime()?;
    let mut guard = handle.lock()?;
    let session = guard
        .as_mut()
        .ok_or_else(|| EmbedError::Other("the session is not open".into()))?;
    match op {
        "ingest" => {
            let given: MessagesArgs = args(op, value)?;
            if let Some(batch) = batch(session, given.messages, given.seqs)? {
                session.take(rt, batch)?;
            }
            Ok(Value::Null)
        }
        "prepare" => {
            let given: MessagesArgs = args(op, value)?;
            if let Some(batch) = batch(session, given.messages, given.seqs)? {
                session.take(rt, batch)?;
            }
            let step = session.prepare(rt, given.max_tokens)?;
            answer(session, step)
        }
        "onOverflow" => {
            let given: OverflowArgs = args(op, value)?;
            let stated = match given.body {
                Some(body) => match overflow::classify(given.status.unwrap_or(400), &body) {
                    Some(found) => Some(found),
                    None => return Ok(Value::Null),
                },
                None => None,
            };
            let step = session.recover(
                rt,
                stated.as_ref(),
                given.tokens,
                given.limit,
                given.attempt,
            )?;
            answer(session, step)
        }
        "usage" => {
            let given: UsageArgs = args(op, value)?;
            let input = match given.report.as_u64() {
                Some(tokens) => tokens,
                None => ctxkeeper_embed::input_tokens(&given.report)?,
            };
            session.observe_usage(input);
            Ok(json!(input))
        }
        "compact" => {
            let given: CompactArgs = args(op, value)?;
            Ok(json!(session.compact(rt, given.focus, given.overrides)?))
        }
        "events" => Ok(to_value(&session.take_events())?),
        "search" => {
            let given: SearchArgs = args(op, value)?;
            let archive = session.archive();
            drop(guard);
            let hits = rt.block_on(archive.search(&given.query, given.regex, given.limit))?;
            to_value(&hits)
        }
        "read" => {
            let given: ReadArgs = args(op, value)?;
            let archive = session.archive();
            drop(guard);
            let text = rt.block_on(archive.read(given.reference, given.offset, given.limit))?;
            Ok(Value::String(text))
        }
        "archived" => {
            let archive = session.archive();
            drop(guard);
            to_value(&rt.block_on(archive.list())?)
        }
        "countTokens" => Ok(json!(session.count_tokens())),
        "save" => {
            session.save(rt)?;
            Ok(Value::Null)
        }
        "stats" => Ok(camel(to_value(&session.stats())?)),
        "session" => to_value(&session.info()),
        "emitFull" => to_value(&session.emit_full().messages),
        other => Err(EmbedError::invalid(format!("unknown operation {other:?}"))),
    }
}

/// The caller's messages as a batch: a list in the session's wire shape (one message
/// object is a list of one), with the loader's handles of its elements.
fn batch(
    session: &Session<Seq>,
    messages: Option<Value>,
    seqs: Option<Vec<Seq>>,
) -> Result<Option<Batch<Seq>>, EmbedError> {
    let list = match messages {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(list)) => Value::Array(list),
        Some(message @ Value::Object(_)) => Value::Array(vec![message]),
        Some(Value::String(_)) => {
            return Err(EmbedError::invalid(
                "messages must be an array of message objects, not a string",
            ));
        }
        Some(other) => {
            return Err(EmbedError::invalid(format!(
                "messages must be an array of message objects, not {other}"
            )));
        }
    };
    Batch::parse(session.wire(), list, seqs)
}

/// A step's answer: its request, or the store's error (and then the loader's copy of the
/// request is stale: the next one is emitted whole).
fn answer(
    session: &mut Session<Seq>,
    step: ctxkeeper_embed::Step<Seq>,
) -> Result<Value, EmbedError> {
    if let Err(err) = step.committed {
        session.invalidate_request();
        return Err(err.into());
    }
    Ok(request(step.emit, &step.figures))
}

/// A step's request for the loader: `full` replaces its copy of the last request, `append`
/// extends it; a number among the messages is the handle of the caller's own object.
fn request(emit: Emit<Seq>, figures: &Figures) -> Value {
    let figures = figures_value(figures);
    match emit {
        Emit::Full(emitted) => json!({
            "kind": "full",
            "messages": emitted.messages,
            "system": emitted.system,
            "figures": figures,
        }),
        Emit::Append(pieces) => {
            let messages: Vec<Value> = pieces
                .into_iter()
                .map(|piece| match piece {
                    Piece::Original(seq) => json!(seq),
                    Piece::Emitted(value) => value,
                })
                .collect();
            json!({"kind": "append", "messages": messages, "figures": figures})
        }
    }
}

fn figures_value(figures: &Figures) -> Value {
    json!({
        "inputTokens": figures.input_tokens,
        "compacted": figures.compacted,
        "changed": figures.changed,
        "budgetUsedPct": figures.budget_used_pct,
        "budgetNotice": figures.budget_notice,
        "window": figures.window,
    })
}

fn to_value(value: &impl serde::Serialize) -> Result<Value, EmbedError> {
    serde_json::to_value(value).map_err(|e| EmbedError::Other(e.to_string()))
}

/// An object's keys in camelCase (`archived_bytes` → `archivedBytes`).
fn camel(value: Value) -> Value {
    let Value::Object(map) = value else {
        return value;
    };
    let mut out = Map::with_capacity(map.len());
    for (key, item) in map {
        let mut name = String::with_capacity(key.len());
        let mut upper = false;
        for c in key.chars() {
            if c == '_' {
                upper = true;
            } else if upper {
                name.extend(c.to_uppercase());
                upper = false;
            } else {
                name.push(c);
            }
        }
        out.insert(name, item);
    }
    Value::Object(out)
}

/// An error as the loader builds its error object: class, message, the fields of its class,
/// and the next error of its chain as `cause`.
fn error_value(err: &EmbedError) -> Value {
    let mut fields = Map::new();
    fields.insert("class".into(), json!(err.class().name()));
    fields.insert("message".into(), json!(err.to_string()));
    if let EmbedError::InvalidInput {
        path, index, kind, ..
    } = err
    {
        fields.insert("path".into(), json!(path));
        fields.insert("index".into(), json!(index));
        fields.insert("kind".into(), json!(kind));
    }
    for (name, figure) in err.figures() {
        fields.insert(name.into(), json!(figure));
    }
    let source = match err {
        // The manager's own error is the message; its sources are the chain.
        EmbedError::Manager(inner) => std::error::Error::source(inner),
        EmbedError::Ingest { source, .. } => Some(source as &(dyn std::error::Error + 'static)),
        other => std::error::Error::source(other),
    };
    if let Some(source) = source {
        fields.insert("cause".into(), chain(source));
    }
    Value::Object(fields)
}

fn chain(err: &(dyn std::error::Error + 'static)) -> Value {
    let class = match err.downcast_ref::<ctxkeeper::store::StoreError>() {
        Some(store) => ctxkeeper_embed::Class::of_store(store),
        None => match err.downcast_ref::<ctxkeeper::Error>() {
            Some(manager) => ctxkeeper_embed::Class::of_manager(manager),
            None => ctxkeeper_embed::Class::Base,
        },
    };
    let mut fields = Map::new();
    fields.insert("class".into(), json!(class.name()));
    fields.insert("message".into(), json!(err.to_string()));
    if let Some(source) = err.source() {
        fields.insert("cause".into(), chain(source));
    }
    Value::Object(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(value: Value) -> Value {
        match value.get("ok") {
            Some(ok) => ok.clone(),
            None => panic!("expected ok, got {value}"),
        }
    }

    #[test]
    fn a_round_trip_hands_back_the_callers_objects_by_handle() {
        let handle = Handle::default();
        ok(call(&handle, "open", json!({"window": 16000})));
        let prepared = ok(call(
            &handle,
            "prepare",
            json!({"messages": [{"role": "user", "content": "hello"}], "seqs": [7]}),
        ));
        assert_eq!(prepared["kind"], "append");
        assert_eq!(prepared["messages"], json!([7]));
        assert!(prepared["figures"]["inputTokens"].as_u64().unwrap_or(0) > 0);
    }

    #[test]
    fn bad_input_is_a_typed_error_and_ingests_nothing() {
        let handle = Handle::default();
        ok(call(&handle, "open", json!({"window": 16000})));
        let refused = call(
            &handle,
            "ingest",
            json!({"messages": [
                {"role": "user", "content": "run it"},
                {"role": "tool", "tool_call_id": "call_1", "content": "out"}
            ]}),
        );
        assert_eq!(refused["error"]["class"], "InvalidInputError");
        assert_eq!(refused["error"]["kind"], "tool_pairing");
        assert_eq!(refused["error"]["index"], 1);
        assert_eq!(ok(call(&handle, "stats", Value::Null))["ingested"], 0);
    }

    #[test]
    fn unknown_options_are_config_errors_naming_the_option() {
        let handle = Handle::default();
        let refused = call(&handle, "open", json!({"windw": 16000}));
        assert_eq!(refused["error"]["class"], "ConfigError");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("windw"), "{message}");
    }

    #[test]
    fn only_a_session_that_does_no_io_runs_steps_on_the_callers_thread() {
        let memory = Handle::default();
        assert_eq!(ok(call(&memory, "open", json!({})))["ioFree"], true);
        assert!(!memory.needs_worker("prepare"));
        assert!(memory.needs_worker("open"));
        let dir = std::env::temp_dir().join(format!("ctxk-node-ops-{}", std::process::id()));
        let workspace = Handle::default();
        let opened = ok(call(
            &workspace,
            "open",
            json!({"workspace": dir.to_string_lossy()}),
        ));
        assert_eq!(opened["ioFree"], false);
        assert!(workspace.needs_worker("prepare"));
        assert!(!workspace.needs_worker("stats"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_call_before_open_is_an_error() {
        let refused = call(&Handle::default(), "stats", Value::Null);
        assert_eq!(refused["error"]["class"], "CtxkeeperError");
    }
}
