//! One session's managed context in the caller's wire shape: what every language face
//! binds (Python's `ContextManager`, the npm package's `ContextManager`).
//!
//! A [`Session`] owns a `ctxkeeper::ContextManager`, its configuration (to rebuild it when the
//! output budget changes), the events it emitted, its store (resumed on open, committed at
//! every step as the gateway commits) and the bookkeeping that lets a step hand back only
//! what it appended. It knows nothing of the face: messages come in as JSON values, and the
//! caller's own objects (a Python dict, a handle of a JavaScript object) ride along as an
//! opaque `O`, handed back in [`Emit::Append`] while the engine keeps the message as given.
//!
//! ```no_run
//! use ctxkeeper_embed::{Batch, Options, Session, runtime::runtime};
//! use serde_json::json;
//!
//! let rt = runtime()?;
//! let mut session: Session<()> = Session::open(rt, Options::default())?;
//! let batch = Batch::parse(session.wire(), json!([{"role": "user", "content": "Hi"}]), None)?;
//! if let Some(batch) = batch {
//!     session.take(rt, batch)?;
//! }
//! let step = session.prepare(rt, None)?;
//! assert!(step.figures.input_tokens > 0);
//! # Ok::<(), ctxkeeper_embed::EmbedError>(())
//! ```

use std::collections::VecDeque;
use std::sync::Arc;

use ctxkeeper::core::engine::{ContextState, Event, PolicyConfig};
use ctxkeeper::core::formats::Wire;
use ctxkeeper::core::model::{
    CheckRules, INTERNAL_MARKER, Message, Part, Role, check, find_internal_marker,
};
use ctxkeeper::core::overflow::Overflow;
use ctxkeeper::core::tokens::TokenModel;
use ctxkeeper::llm::Summarizer;
use ctxkeeper::snapshot::{self, ClientRecord, Snapshot, SnapshotRef, StoredShape};
use ctxkeeper::store::archive::{ArchiveScope, Offloader};
use ctxkeeper::store::{Commit, SessionKey, SessionStore, StoreError};
use ctxkeeper::{ContextManager, Settings};
use serde::Serialize;
use serde_json::Value;
use tokio::runtime::Runtime;
use tokio::sync::broadcast;

use crate::archive::Archive;
use crate::error::EmbedError;
use crate::policy::{self, PolicySpec};
use crate::runtime::Block;
use crate::wire;

mod checks;
pub use checks::validate;

/// Events kept for [`Session::take_events`] before the oldest are dropped (a caller that
/// never reads them must not grow without bound).
const EVENT_QUEUE: usize = 4096;
/// The longest tool-call id accepted.
const MAX_ID_BYTES: usize = 256;

/// What a session is opened with: the constructor arguments of every face.
#[derive(Debug, Clone)]
pub struct Options {
    /// A preset, a config file, or overrides.
    pub policy: PolicySpec,
    /// The model (its tokenizer and, without `window`, its window).
    pub model: String,
    /// The model's context window in tokens; the policy's profile of `model` when none.
    pub window: Option<u64>,
    /// The caller's wire shape.
    pub wire: Wire,
    /// The instruction field (Anthropic `system`, Responses `instructions`, Chat: a string).
    pub system: Option<Value>,
    /// The tools of every request, in the wire shape (their schemas count as fixed tokens).
    pub tools: Option<Value>,
    /// Tokens every request carries outside the messages and tools.
    pub fixed_tokens: u64,
    /// A session store URL: the session is resumed when stored and saved at every step.
    pub store: Option<String>,
    /// The session id (a fresh UUID with a store, `session` without).
    pub session: Option<String>,
    /// The tenant, user and agent of the session's key.
    pub tenant: String,
    pub user: Option<String>,
    pub agent: Option<String>,
    /// The archive: a directory or an archive URL; the store's own when none.
    pub workspace: Option<String>,
    /// `extractive`, `openai` or `anthropic`, with the model server's URL and model.
    pub summarizer: String,
    pub summarizer_url: Option<String>,
    pub summarizer_model: Option<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            policy: PolicySpec::default(),
            model: "gpt-4o".into(),
            window: None,
            wire: Wire::OpenAiChat,
            system: None,
            tools: None,
            fixed_tokens: 0,
            store: None,
            session: None,
            tenant: "default".into(),
            user: None,
            agent: None,
            workspace: None,
            summarizer: "extractive".into(),
            summarizer_url: None,
            summarizer_model: None,
        }
    }
}

/// A wire shape by name (`openai-chat`, `responses`, `anthropic`).
pub fn parse_wire(name: &str) -> Result<Wire, EmbedError> {
    name.parse().map_err(EmbedError::config)
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

/// One session's managed context (see the module documentation). `O` is the face's handle
/// of a caller's message object.
pub struct Session<O> {
    manager: ContextManager,
    wire: Wire,
    /// The manager's tools in its wire shape (for a face's `request()`); none when not given.
    tools: Option<Vec<Value>>,
    events: broadcast::Receiver<Event>,
    queue: VecDeque<Event>,
    dropped_events: u64,
    config: Config,
    /// The output budget (`max_tokens`) the current manager reserves in the window.
    output: Option<u64>,
    /// Something rewrote the context since the last request (see `Figures::changed`).
    dirty: bool,
    /// Input tokens of the last request handed out, and the overflow attempts since.
    last_tokens: Option<u64>,
    overflow_attempts: u32,
    persist: Option<Persist>,
    /// Messages ever ingested (the session log's length).
    ingested: u64,
    cursor: Cursor,
    /// The caller's objects of the messages ingested verbatim since the last request, by
    /// log position (Chat and Anthropic, whose messages map one to one).
    fresh: Vec<(u64, O)>,
}

impl<O> std::fmt::Debug for Session<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("wire", &self.wire.as_str())
            .field("session", &self.config.scope.session)
            .finish_non_exhaustive()
    }
}

/// What the face's copy of the last request stands for: the face keeps the request's
/// converted messages, and a step that only appended converts only what it appended.
struct Cursor {
    /// The context entries the face's list stands for.
    covered: usize,
    /// False after a request that carried a budget notice (or a conversion that failed).
    valid: bool,
}

impl Default for Cursor {
    /// The request of an empty context: no messages.
    fn default() -> Cursor {
        Cursor {
            covered: 0,
            valid: true,
        }
    }
}

/// How the face's copy of the last request becomes the next request.
#[derive(Debug)]
pub enum Emit<O> {
    /// The whole request, emitted from the context.
    Full(wire::Emitted),
    /// The entries appended since: the caller's own objects when every one went in
    /// verbatim, else their emission.
    Append(Vec<Piece<O>>),
}

/// One element of an appended request.
#[derive(Debug)]
pub enum Piece<O> {
    /// The caller's own object, as given.
    Original(O),
    /// The emission of a message the engine rewrote.
    Emitted(Value),
}

/// What a step hands back: the messages to convert, the figures, and whether the store
/// took the step (a face converts the messages first, then reports a store error).
#[derive(Debug)]
pub struct Step<O> {
    pub emit: Emit<O>,
    pub figures: Figures,
    pub committed: Result<(), StoreError>,
}

/// The figures of a step.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Estimated input tokens of the request (context + fixed tokens).
    pub input_tokens: u64,
    /// Whether a compaction ran for this request.
    pub compacted: bool,
    /// Whether the messages differ from the previous request plus the messages ingested
    /// since, as they were given.
    pub changed: bool,
    /// Share of the window the request uses, in percent.
    pub budget_used_pct: f64,
    /// The budget notice added to the last message, if the policy asks for one.
    pub budget_notice: Option<String>,
    /// The window the request was budgeted to (the model's, less `max_tokens`).
    pub window: u64,
}

/// Figures of the managed context (`stats()` of every face).
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub messages: usize,
    pub ingested: u64,
    pub compactions: u64,
    pub archived_bytes: u64,
    pub window: u64,
    pub fixed_tokens: u64,
    pub policy: String,
    pub model: String,
    pub dropped_events: u64,
    pub engine_seconds: f64,
    pub summary: Option<String>,
}

/// The session's key: tenant, session id, and with a store its user and agent and whether
/// it was saved.
#[derive(Debug, Clone, Serialize)]
pub struct SessionInfo {
    pub tenant: String,
    pub session: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored: Option<bool>,
}

/// Messages parsed from the caller's objects, with those objects when they map one to one.
#[derive(Debug)]
pub struct Batch<O> {
    messages: Vec<Message>,
    originals: Option<Vec<O>>,
}

impl<O> Batch<O> {
    /// Parses the caller's messages (a JSON array in the wire shape) into a batch; none when
    /// the list is empty. `originals` are the caller's objects, one per element: kept when
    /// the wire maps them one to one onto the engine's messages (Chat, Anthropic), so a step
    /// that keeps them as given hands them back.
    pub fn parse(
        wire: Wire,
        list: Value,
        originals: Option<Vec<O>>,
    ) -> Result<Option<Batch<O>>, EmbedError> {
        let given = match &list {
            Value::Array(items) => items.len(),
            _ => return Err(EmbedError::invalid("messages must be a list of messages")),
        };
        let parsed =
            wire::parse_messages(wire, list).map_err(|e| EmbedError::parse("messages", &e))?;
        if parsed.is_empty() {
            return Ok(None);
        }
        // Chat and Anthropic messages map one to one onto the engine's: while one stays as
        // given, the caller's object is what the next request carries.
        let originals = originals.filter(|objects| {
            wire != Wire::Responses && objects.len() == parsed.len() && given == parsed.len()
        });
        Ok(Some(Batch {
            messages: parsed,
            originals,
        }))
    }

    /// A batch of messages a face read from the caller's objects itself (one message per
    /// object, exactly what [`Batch::parse`] gives for their JSON); none when there are none.
    pub fn from_messages(
        wire: Wire,
        messages: Vec<Message>,
        originals: Option<Vec<O>>,
    ) -> Option<Batch<O>> {
        if messages.is_empty() {
            return None;
        }
        let originals =
            originals.filter(|objects| wire != Wire::Responses && objects.len() == messages.len());
        Some(Batch {
            messages,
            originals,
        })
    }
}

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

/// Opens the archive and the store of `options` and loads the stored session.
async fn open_backends(
    options: &Options,
    key: &SessionKey,
) -> Result<
    (
        Arc<dyn Offloader>,
        Option<Arc<dyn SessionStore>>,
        Option<(Snapshot, u64)>,
    ),
    EmbedError,
> {
    let opening = |what: &'static str, url: &str| {
        let url = ctxkeeper::store::redact(url);
        move |source: StoreError| EmbedError::Open { what, url, source }
    };
    let archive_url = policy::archive_url(options.workspace.as_deref(), options.store.as_deref());
    let offloader = ctxkeeper::store::open_archive(&archive_url)
        .await
        .map_err(opening("archive", &archive_url))?;
    let store = match &options.store {
        Some(url) => Some(
            ctxkeeper::store::open_store(url)
                .await
                .map_err(opening("store", url))?,
        ),
        None => None,
    };
    let loaded = match &store {
        Some(store) => snapshot::load(store.as_ref(), key)
            .await
            .map_err(|e| match e {
                snapshot::PersistError::Store(err) => opening("store", "")(err),
                other => opening("store", "")(StoreError::InvalidInput(other.to_string())),
            })?,
        None => None,
    };
    Ok((offloader, store, loaded))
}

impl<O: Send> Session<O> {
    /// Opens a session: resolves the policy, opens the archive and the store, resumes the
    /// stored session (or ingests `system` into a new one).
    pub fn open(rt: &Runtime, options: Options) -> Result<Session<O>, EmbedError> {
        let wire = options.wire;
        let policy = policy::resolve_policy(&options.policy)?;
        let token_model = TokenModel::for_model(&options.model, &policy.profiles);
        let window = options.window.unwrap_or_else(|| {
            policy
                .config
                .window_for(&token_model.profile, &policy.profiles)
        });
        if window == 0 {
            return Err(EmbedError::config("window must be greater than 0"));
        }
        let system_messages = match &options.system {
            Some(system) if !system.is_null() => wire::parse_system(wire, system.clone())
                .map_err(|e| EmbedError::parse("system", &e))?,
            _ => Vec::new(),
        };
        let (tool_specs, tools) = match &options.tools {
            Some(tools) if !tools.is_null() => {
                let specs =
                    wire::parse_tools(wire, tools).map_err(|e| EmbedError::parse("tools", &e))?;
                let emitted = wire::emit_tools(wire, &specs);
                (specs, Some(emitted))
            }
            _ => (Vec::new(), None),
        };
        let summarizer = ctxkeeper::summarizers::build(
            &options.summarizer,
            options.summarizer_url.as_deref(),
            options.summarizer_model.as_deref(),
        )
        .map_err(EmbedError::config)?;
        let fixed_tokens = options.fixed_tokens + u64::from(token_model.tools_tokens(&tool_specs));
        let session_id = match (&options.session, &options.store) {
            (Some(id), _) => id.clone(),
            (None, Some(_)) => uuid::Uuid::new_v4().to_string(),
            (None, None) => "session".to_string(),
        };
        let key = SessionKey::new(
            options.tenant.as_str(),
            options.user.as_deref().unwrap_or(SessionKey::DEFAULT),
            options.agent.as_deref().unwrap_or(SessionKey::DEFAULT),
            session_id.as_str(),
        )
        .map_err(|e| EmbedError::invalid(format!("session key: {e}")))?;
        let (offloader, store, loaded) = rt.block_on(open_backends(&options, &key))?;
        let config = Config {
            policy: policy.config,
            model: token_model,
            model_name: options.model.clone(),
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
        let mut manager = Session::<O>::build(&config, settings);
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
        let mut session = Session {
            manager,
            wire,
            tools,
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
            cursor: Cursor::default(),
            fresh: Vec::new(),
        };
        if !system_messages.is_empty() && ingested == 0 {
            rt.block_on(session.ingest(system_messages, None))
                .map_err(|(_, e)| EmbedError::Manager(e))?;
        }
        session.drain();
        Ok(session)
    }

    /// The wire shape the session speaks.
    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// The tools given at open, in the wire shape.
    pub fn tools(&self) -> Option<&[Value]> {
        self.tools.as_deref()
    }

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
        let mut manager = Session::<O>::build(&self.config, self.settings());
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

    /// The events emitted since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<Event> {
        self.drain();
        self.queue.drain(..).collect()
    }

    /// Ingests parsed, checked messages; returns how many were ingested before an error.
    async fn ingest(
        &mut self,
        messages: Vec<Message>,
        originals: Option<Vec<O>>,
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
            if let Some(persist) = &mut self.persist {
                persist
                    .rest
                    .client
                    .hashes
                    .push(snapshot::message_hash(&message));
                persist.pending.push(message.clone());
            }
            // Ingest rewrites only tool results (cut to a preview past the cap) and images
            // (moved to the archive): the manager says whether it cut one.
            let as_given = self
                .manager
                .ingest_as_given(message)
                .await
                .map_err(|e| (index, e))?;
            self.ingested += 1;
            // The context holds the message as given, or the caller's copy is no longer the
            // context.
            let state = self.manager.state();
            let verbatim = !has_data && state.entries.len() == before + 1 && as_given;
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

    /// Checks a batch against the context and ingests it. Bad input is refused whole
    /// (`InvalidInput`, nothing ingested); an engine failure on `messages[index]` leaves the
    /// ones before it ingested (`Ingest`).
    pub fn take(&mut self, rt: &impl Block, batch: Batch<O>) -> Result<(), EmbedError> {
        let outcome = validate(self.manager.state(), &batch.messages).and_then(|()| {
            rt.block_on(self.ingest(batch.messages, batch.originals))
                .map_err(|(index, source)| EmbedError::Ingest { index, source })
        });
        self.drain();
        outcome
    }

    /// A step: compact when a trigger fires, save, and say how the request's messages
    /// follow from the last one's. `max_tokens` is the output budget the request will ask
    /// for: the context is budgeted to the window less that (as the gateway does).
    pub fn prepare(
        &mut self,
        rt: &impl Block,
        max_tokens: Option<u64>,
    ) -> Result<Step<O>, EmbedError> {
        self.reserve_output(max_tokens);
        let compactions = self.manager.state().compactions;
        let prepared = match rt.block_on(self.manager.prepare_counted()) {
            Ok(prepared) => prepared,
            Err(err) => {
                self.drain();
                return Err(err.into());
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
        let emit = self.plan_emit(changed, notice);
        self.drain();
        let figures = Figures {
            input_tokens: prepared.input_tokens,
            compacted: prepared.compacted,
            changed,
            budget_used_pct: prepared.budget_used_pct,
            budget_notice: prepared.budget_notice,
            window: input_window(self.config.window, self.output),
        };
        Ok(Step {
            emit,
            figures,
            committed,
        })
    }

    /// Overflow recovery: compacts down to what the provider stated (`stated`, from
    /// `ctxkeeper::core::overflow::classify`) or was told (`tokens`, `limit`). `attempt`
    /// counts from 1 (by default, the overflows since the last `prepare` or `usage`).
    pub fn recover(
        &mut self,
        rt: &Runtime,
        stated: Option<&Overflow>,
        tokens: Option<u64>,
        limit: Option<u64>,
        attempt: Option<u32>,
    ) -> Result<Step<O>, EmbedError> {
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
                return Err(err.into());
            }
        };
        self.dirty = prepared.budget_notice.is_some();
        self.last_tokens = Some(prepared.input_tokens);
        let committed = rt.block_on(self.commit());
        self.cursor.covered = self.manager.state().entries.len();
        self.cursor.valid = prepared.budget_notice.is_none();
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
        Ok(Step {
            emit: Emit::Full(wire::emit(self.wire, prepared.messages)),
            figures,
            committed,
        })
    }

    /// Records the provider's count of the last request's input tokens.
    pub fn observe_usage(&mut self, input_tokens: u64) {
        self.manager.observe_usage(input_tokens);
        self.overflow_attempts = 0;
        self.drain();
    }

    /// Compacts now (optionally under a one-off policy override, a TOML fragment, and with
    /// focus instructions for the summary) and saves. Returns whether anything changed.
    pub fn compact(
        &mut self,
        rt: &Runtime,
        focus: Option<String>,
        overrides: Option<String>,
    ) -> Result<bool, EmbedError> {
        let result = rt.block_on(self.manager.compact(overrides.as_deref(), focus));
        if matches!(result, Ok(true)) {
            self.dirty = true;
        }
        let committed = rt.block_on(self.commit());
        self.drain();
        let changed = result?;
        committed?;
        Ok(changed)
    }

    /// The face's copy of the last request could not be made: the next one is emitted whole.
    pub fn invalidate_request(&mut self) {
        self.cursor.valid = false;
    }

    /// The archive of this session (searched and read without the session's lock).
    pub fn archive(&self) -> Archive {
        Archive::new(self.config.offloader.clone(), self.config.scope.clone())
    }

    /// Exact tokens of the current context plus the fixed tokens (tool schemas): what the
    /// next request weighs under the model's tokenizer.
    pub fn count_tokens(&self) -> u64 {
        let model = &self.config.model;
        let tokens: u64 = self
            .manager
            .state()
            .entries
            .iter()
            // The engine's cached count where it has one: a call costs the messages it never
            // counted, not the whole context.
            .map(|e| u64::from(e.tokens.unwrap_or_else(|| model.message_tokens(&e.message))))
            .sum();
        tokens + self.config.fixed_tokens
    }

    /// Saves the session now (a session with a store also saves at every `prepare`).
    pub fn save(&mut self, rt: &Runtime) -> Result<(), EmbedError> {
        rt.block_on(self.commit()).map_err(EmbedError::from)
    }

    /// Figures of the managed context: messages, compactions, archived bytes, the summary.
    pub fn stats(&self) -> Stats {
        let state = self.manager.state();
        Stats {
            messages: state.entries.len(),
            ingested: self.ingested,
            compactions: u64::from(state.compactions),
            archived_bytes: self.manager.archived_bytes(),
            window: input_window(self.config.window, self.output),
            fixed_tokens: self.config.fixed_tokens,
            policy: self.config.policy.name.clone(),
            model: self.config.model_name.clone(),
            dropped_events: self.dropped_events,
            engine_seconds: self.manager.clock().engine.as_secs_f64(),
            summary: state
                .summary
                .as_ref()
                .map(|s| s.render(&self.config.policy.summary.schema)),
        }
    }

    /// The session's key.
    pub fn info(&self) -> SessionInfo {
        let persist = self.persist.as_ref();
        SessionInfo {
            tenant: self.config.scope.tenant.to_string(),
            session: self.config.scope.session.to_string(),
            user: persist.map(|p| p.key.user().to_string()),
            agent: persist.map(|p| p.key.agent().to_string()),
            stored: persist.map(|p| p.version.is_some()),
        }
    }

    /// The request's messages emitted whole from the context, bypassing the cursor `prepare`
    /// keeps (for tests of a face's copy of the request).
    pub fn emit_full(&self) -> wire::Emitted {
        wire::emit(self.wire, self.manager.request_messages(None))
    }

    /// A one-line description for a face's `repr`.
    pub fn describe(&self) -> String {
        format!(
            "ContextManager(policy={:?}, model={:?}, window={}, wire={:?}, session={:?}, messages={})",
            self.config.policy.name,
            self.config.model_name,
            self.config.window,
            self.wire.as_str(),
            self.config.scope.session,
            self.manager.state().entries.len()
        )
    }

    /// The request's messages: only the appended entries when nothing before them changed
    /// and the wire emits them apart from what precedes (see [`separable`]), else all.
    fn plan_emit(&mut self, changed: bool, notice: Option<&str>) -> Emit<O> {
        let wire = self.wire;
        let entries = &self.manager.state().entries;
        let covered = self.cursor.covered;
        // Taken for the plan and given back emptied: its room is reused by the next step.
        let mut fresh = std::mem::take(&mut self.fresh);
        let continues = !changed && self.cursor.valid && entries.len() >= covered;
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
                    .drain(..)
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
        self.cursor.covered = entries.len();
        self.cursor.valid = notice.is_none();
        fresh.clear();
        self.fresh = fresh;
        plan
    }

    /// Saves the context and the log entries owed, when the session has a store.
    pub async fn commit(&mut self) -> Result<(), ctxkeeper::store::StoreError> {
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
        let (state, write) = parts.encode_for(append);
        let committed = persist
            .store
            .commit(
                &persist.key,
                Commit {
                    state: &state,
                    write,
                    expected: persist.version,
                    messages: &persist.pending,
                },
            )
            .await?;
        persist.version = Some(committed.version);
        persist.shape = Some(now);
        persist.stored_hashes = client.hashes.len();
        persist.pending.clear();
        Ok(())
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
/// `emit_full` and tests/python/test_py_engine.py hold the cache to the whole emission.
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
pub fn input_window(window: u64, output: Option<u64>) -> u64 {
    window - output.unwrap_or(0).min(window / 4 * 3)
}

/// The input tokens a usage report states, whichever provider wrote it: OpenAI Chat
/// `prompt_tokens`, Responses `input_tokens`, Anthropic `input_tokens` plus its cache reads
/// and writes (Anthropic reports those apart; all of them are the request's input).
pub fn input_tokens(usage: &Value) -> Result<u64, EmbedError> {
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
    Err(EmbedError::invalid(
        "usage: expected a token count or a usage report with prompt_tokens or input_tokens",
    ))
}

#[cfg(test)]
mod tests;
