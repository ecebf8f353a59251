//! One typed, versioned record of a session that every face reads and writes: the gateway,
//! the MCP tools (`compact`), `replay --store` and a Rust host.
//!
//! A [`Snapshot`] is the managed context (entries with their bookkeeping, the running
//! summary, counters), what the serving host knows about its client ([`ClientRecord`]: the
//! fingerprints of the client messages ingested, the window it learned), and the host's
//! extension fields. It is stored as an [`AgentState`] whose `engine` field holds the record
//! `{"format": "ctxkeeper/2", …}`. [`Snapshot::decode`] also reads the shapes written before
//! there was one codec (the gateway's `ctxkeeper-gateway/1`, the engine state the MCP
//! `compact` tool wrote, and the bare context `replay --store` wrote), so a session any face
//! started can be continued by any other.
//!
//! A host may also append its own records at every step ([`Snapshot::journal`]: the gateway's
//! console timeline). They ride in the state's trail beside the client fingerprints, so a
//! step stores only the records it added, never the ones before.
//!
//! A face that changes the context without serving the client (MCP `compact`) keeps the
//! client record as it is, so the gateway still recognises the client's history on the next
//! request; a face that creates a session from a known conversation (`replay --store`) records
//! the fingerprints of its messages, so a gateway continuing it ingests only what is new.
//!
//! ```
//! use ctxkeeper::core::engine::ContextState;
//! use ctxkeeper::core::model::Message;
//! use ctxkeeper::snapshot::{ClientRecord, Snapshot};
//!
//! let messages = vec![Message::system("rules"), Message::user("task")];
//! let snapshot = Snapshot::new(ContextState::from_messages(messages.clone()))
//!     .with_client(ClientRecord::of_messages(&messages));
//! let stored = snapshot.encode();
//! let back = Snapshot::decode(stored).unwrap();
//! assert_eq!(back.context.to_messages(), messages);
//! assert_eq!(back.client.hashes.len(), 2);
//! ```

use std::collections::BTreeMap;

use ctxkeeper_core::engine::{ContextState, Entry, EntryMeta, TriggerMemory};
use ctxkeeper_core::model::{Message, Part};
use ctxkeeper_core::summary::Summary;
use ctxkeeper_store::{AgentState, Committed, ContextWrite, SessionKey, SessionStore, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use xxhash_rust::xxh3::xxh3_128;

/// The `engine` record's format this build writes: the entries' bookkeeping rides in
/// [`AgentState::context_meta`], and the client fingerprints (strings) and the host's
/// [`journal`](Snapshot::journal) records (any other value) in [`AgentState::trail`], so a
/// step that appended saves only what it appended (see [`ctxkeeper_store::generations`]).
pub const FORMAT: &str = "ctxkeeper/4";
/// The record before host journals: every trail value a fingerprint. Read as [`FORMAT`] is
/// (a build that knows only this one refuses a state with journal records as newer).
const FORMAT_V3: &str = "ctxkeeper/3";
/// The record before incremental saves: bookkeeping and fingerprints inside it.
const FORMAT_V2: &str = "ctxkeeper/2";
/// The gateway's record before the shared codec.
const GATEWAY_V1: &str = "ctxkeeper-gateway/1";

/// A session's state, as every face shares it (see the [module docs](self)).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The managed context: entries, summary, compaction count, messages appended.
    pub context: ContextState,
    /// What the host serving the conversation knows about its client.
    pub client: ClientRecord,
    /// Host fields compaction never touches (plan, tasks, policy overrides…). They are
    /// rewritten with every save: a record that grows with the steps belongs in `journal`.
    pub extensions: BTreeMap<String, Value>,
    /// Records a host appends beside the context as steps go (the gateway's console
    /// timeline), in order: JSON objects each named by its host, never read by the codec.
    /// They are stored in the current generation's trail like the client fingerprints, so
    /// a step that appended writes only its new records; a new generation carries whatever
    /// the host keeps here then (a host bounds its records before it writes one).
    pub journal: Vec<Value>,
    /// When the session was created (ms since the Unix epoch; 0: now, at the first save).
    pub created_at_ms: i64,
    /// Fields of the stored state this build does not know, kept verbatim.
    pub unknown: Map<String, Value>,
    /// Fields of the engine record this build does not know, kept verbatim.
    pub engine_unknown: Map<String, Value>,
    /// What the store holds of this snapshot's context, when it was read from a stored
    /// generation ([`load`] sets it): the base an incremental save continues.
    pub stored: Option<StoredShape>,
}

/// What a stored generation holds of a session (see [`Snapshot::stored`]), and the test of
/// whether a context still continues it, so only what follows needs saving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredShape {
    /// Context entries in the stored generation.
    pub entries: usize,
    /// Client fingerprints stored (strings of the state's trail).
    pub fingerprints: usize,
    /// Journal records stored (the other values of the state's trail).
    pub records: usize,
    /// The context's compaction count and appended-message count when it was stored.
    pub compactions: u32,
    pub appended: u64,
    /// The fingerprint of the newest stored entry's message (0 for none).
    pub newest: u128,
}

impl StoredShape {
    /// The shape of `context`, `fingerprints` and `records` once stored.
    pub fn of(context: &ContextState, fingerprints: usize, records: usize) -> StoredShape {
        StoredShape {
            entries: context.entries.len(),
            fingerprints,
            records,
            compactions: context.compactions,
            appended: context.appended,
            newest: context
                .entries
                .last()
                .map_or(0, |entry| message_hash(&entry.message)),
        }
    }

    /// Whether `context` is the stored one with messages appended, `client` the stored
    /// fingerprints with more appended (`stored_fingerprints` are the ones stored), and a
    /// journal of `records` the stored one with records appended (a host that only appends
    /// to its journal between saves). Anything that rewrites a context either compacts (the
    /// count moves), removes entries (the counts disagree with the messages appended) or
    /// replaces the newest one (its fingerprint changes); then the context goes out as a new
    /// generation.
    pub fn continued_by(
        &self,
        context: &ContextState,
        client: &[u128],
        stored_fingerprints: &[u128],
        records: usize,
    ) -> bool {
        let entries = context.entries.len();
        entries >= self.entries
            && records >= self.records
            && context.compactions == self.compactions
            && context.appended >= self.appended
            && context.appended - self.appended == (entries - self.entries) as u64
            && stored_fingerprints.len() == self.fingerprints
            && client.len() >= self.fingerprints
            && client[..self.fingerprints] == *stored_fingerprints
            && (self.entries == 0
                || message_hash(&context.entries[self.entries - 1].message) == self.newest)
    }
}

/// What the host serving a conversation keeps about its client, beside the context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientRecord {
    /// Fingerprints ([`message_hash`]) of the client messages ingested so far, in order.
    #[serde(default, with = "hex_hashes", skip_serializing_if = "Vec::is_empty")]
    pub hashes: Vec<u128>,
    /// The context is exactly the client's messages (nothing compacted or rewritten).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verbatim: bool,
    /// The window an upstream's overflow error taught, when smaller than the profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_window: Option<u64>,
}

impl ClientRecord {
    /// The record of a host that ingested exactly `messages`, verbatim.
    pub fn of_messages(messages: &[Message]) -> ClientRecord {
        let mut fingerprints = Fingerprinter::default();
        ClientRecord {
            hashes: messages.iter().map(|m| fingerprints.message(m)).collect(),
            verbatim: true,
            learned_window: None,
        }
    }
}

/// The engine record inside [`AgentState::engine`]: as written by this build, and as
/// `ctxkeeper/2` wrote it (with the bookkeeping and the fingerprints inside).
#[derive(Debug, Default, Serialize, Deserialize)]
struct EngineRecord {
    format: String,
    /// `ctxkeeper/2`: one per message of [`AgentState::context`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    meta: Vec<EntryMeta>,
    #[serde(default)]
    compactions: u32,
    #[serde(default)]
    appended: u64,
    #[serde(default)]
    client: ClientRecord,
    /// What the economic trigger learned (growth per step, the last compaction's size).
    #[serde(default, skip_serializing_if = "TriggerMemory::is_empty")]
    trigger: TriggerMemory,
    #[serde(flatten)]
    unknown: Map<String, Value>,
}

/// The gateway's record before the shared codec (`ctxkeeper-gateway/1`).
#[derive(Debug, Default, Deserialize)]
struct GatewayRecordV1 {
    #[serde(default)]
    meta: Vec<EntryMeta>,
    #[serde(default)]
    compactions: u32,
    #[serde(default)]
    appended: u64,
    #[serde(default)]
    client_hashes: Vec<String>,
    #[serde(default)]
    learned_window: Option<u64>,
    #[serde(default)]
    verbatim: bool,
}

/// A stored state that cannot be read back as a session, with the shape it was read as and
/// why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stored session ({shape}) unreadable: {cause}")]
pub struct SnapshotError {
    /// `ctxkeeper/2`, `ctxkeeper-gateway/1`, `engine state`, or `state`.
    pub shape: String,
    pub cause: String,
}

impl Snapshot {
    /// A snapshot of `context` with no client record.
    pub fn new(context: ContextState) -> Snapshot {
        Snapshot {
            context,
            ..Snapshot::default()
        }
    }

    /// Sets the client record.
    pub fn with_client(mut self, client: ClientRecord) -> Snapshot {
        self.client = client;
        self
    }

    /// Reads a stored state, whichever face wrote it.
    pub fn decode(state: AgentState) -> Result<Snapshot, SnapshotError> {
        let AgentState {
            context,
            context_meta,
            trail,
            summary,
            engine,
            extensions,
            created_at_ms,
            unknown,
            ..
        } = state;
        let mut journal = Vec::new();
        let summary = match summary {
            Some(value) => {
                Some(
                    serde_json::from_value::<Summary>(value).map_err(|e| SnapshotError {
                        shape: "state".into(),
                        cause: format!("summary: {e}"),
                    })?,
                )
            }
            None => None,
        };
        let format = engine
            .get("format")
            .and_then(Value::as_str)
            .map(str::to_string);
        let fail = |shape: &str, cause: String| SnapshotError {
            shape: shape.to_string(),
            cause,
        };
        let (mut context_state, client, engine_unknown) = match format.as_deref() {
            Some(shape @ (FORMAT | FORMAT_V3)) => {
                let mut record: EngineRecord =
                    serde_json::from_value(engine).map_err(|e| fail(shape, e.to_string()))?;
                let meta = context_meta
                    .into_iter()
                    .map(|value| match value {
                        Value::Null => Ok(EntryMeta::default()),
                        value => serde_json::from_value(value),
                    })
                    .collect::<Result<Vec<EntryMeta>, _>>()
                    .map_err(|e| fail(shape, format!("entry bookkeeping: {e}")))?;
                let mut hashes = Vec::with_capacity(trail.len());
                for value in trail {
                    match value {
                        Value::String(hex) => hashes.push(
                            u128::from_str_radix(&hex, 16)
                                .map_err(|_| fail(shape, format!("client fingerprint {hex:?}")))?,
                        ),
                        record if shape == FORMAT => journal.push(record),
                        other => {
                            return Err(fail(shape, format!("client fingerprint {other}")));
                        }
                    }
                }
                record.client.hashes = hashes;
                let mut state = with_meta(context, meta, record.compactions, record.appended);
                state.set_trigger_memory(record.trigger);
                let mut unknown = record.unknown;
                unknown.remove("format");
                (state, record.client, unknown)
            }
            Some(FORMAT_V2) => {
                let record: EngineRecord =
                    serde_json::from_value(engine).map_err(|e| fail(FORMAT_V2, e.to_string()))?;
                let state = with_meta(context, record.meta, record.compactions, record.appended);
                let mut unknown = record.unknown;
                unknown.remove("format");
                (state, record.client, unknown)
            }
            Some(GATEWAY_V1) => {
                let record: GatewayRecordV1 =
                    serde_json::from_value(engine).map_err(|e| fail(GATEWAY_V1, e.to_string()))?;
                let hashes = record
                    .client_hashes
                    .iter()
                    .map(|h| u128::from_str_radix(h, 16))
                    .collect::<Result<_, _>>()
                    .map_err(|e| fail(GATEWAY_V1, format!("client hash: {e}")))?;
                let state = with_meta(context, record.meta, record.compactions, record.appended);
                let client = ClientRecord {
                    hashes,
                    verbatim: record.verbatim,
                    learned_window: record.learned_window,
                };
                (state, client, Map::new())
            }
            Some(other) => {
                return Err(fail(
                    other,
                    format!("written by a newer build (this one reads {FORMAT})"),
                ));
            }
            // The engine state the MCP `compact` tool used to write: kept when it still
            // describes the saved messages, else the messages alone.
            None if engine.get("entries").is_some() => {
                match serde_json::from_value::<ContextState>(engine) {
                    Ok(saved) if saved.to_messages() == context => {
                        (saved, ClientRecord::default(), Map::new())
                    }
                    _ => (
                        ContextState::from_messages(context),
                        ClientRecord::default(),
                        Map::new(),
                    ),
                }
            }
            // A bare context (`replay --store`, a plain host).
            None => (
                ContextState::from_messages(context),
                ClientRecord::default(),
                Map::new(),
            ),
        };
        if summary.is_some() {
            context_state.summary = summary;
        }
        Ok(Snapshot {
            context: context_state,
            client,
            extensions,
            journal,
            created_at_ms,
            unknown,
            engine_unknown,
            stored: None,
        })
    }

    /// The state to store: the context's messages, its summary, and the engine record.
    pub fn encode(&self) -> AgentState {
        self.borrowed().encode()
    }

    /// The snapshot as borrowed parts.
    pub fn borrowed(&self) -> SnapshotRef<'_> {
        SnapshotRef {
            context: &self.context,
            client: &self.client,
            extensions: &self.extensions,
            journal: &self.journal,
            created_at_ms: self.created_at_ms,
            unknown: &self.unknown,
            engine_unknown: &self.engine_unknown,
        }
    }
}

/// A snapshot made of borrowed parts, for a host that keeps them apart (the gateway keeps the
/// context inside a running manager) and should not clone them to save.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotRef<'a> {
    pub context: &'a ContextState,
    pub client: &'a ClientRecord,
    pub extensions: &'a BTreeMap<String, Value>,
    pub journal: &'a [Value],
    pub created_at_ms: i64,
    pub unknown: &'a Map<String, Value>,
    pub engine_unknown: &'a Map<String, Value>,
}

impl SnapshotRef<'_> {
    /// The state to store (see [`Snapshot::encode`]).
    pub fn encode(&self) -> AgentState {
        self.encode_after(0, 0, 0)
    }

    /// The state to store and how the store writes it: only what follows `stored` (a generation
    /// the store holds that this context continues) as an append, else a whole new generation.
    pub fn encode_for(&self, stored: Option<StoredShape>) -> (AgentState, ContextWrite) {
        match stored {
            Some(shape) => (
                self.encode_after(shape.entries, shape.fingerprints, shape.records),
                ContextWrite::Append {
                    context: shape.entries,
                    trail: shape.fingerprints + shape.records,
                },
            ),
            None => (self.encode(), ContextWrite::Generation),
        }
    }

    /// The state to store after the first `entries` context entries, `fingerprints` client
    /// fingerprints and `records` journal records, which the store already holds: the head
    /// and what follows them, for
    /// [`ContextWrite::Append`](ctxkeeper_store::ContextWrite::Append) after
    /// `fingerprints + records` trail values. Costs O(what follows).
    pub fn encode_after(&self, entries: usize, fingerprints: usize, records: usize) -> AgentState {
        let record = EngineRecord {
            format: FORMAT.into(),
            meta: Vec::new(),
            compactions: self.context.compactions,
            appended: self.context.appended,
            client: ClientRecord {
                hashes: Vec::new(),
                verbatim: self.client.verbatim,
                learned_window: self.client.learned_window,
            },
            trigger: self.context.trigger_memory(),
            unknown: self.engine_unknown.clone(),
        };
        let new = self.context.entries.get(entries..).unwrap_or_default();
        let mut state = AgentState::new();
        state.context = new.iter().map(|entry| entry.message.clone()).collect();
        state.context_meta = new
            .iter()
            .map(|entry| {
                if entry.meta == EntryMeta::default() {
                    Value::Null
                } else {
                    serde_json::to_value(&entry.meta).unwrap_or(Value::Null)
                }
            })
            .collect();
        if state.context_meta.iter().all(Value::is_null) {
            state.context_meta.clear();
        }
        state.trail = self
            .client
            .hashes
            .get(fingerprints..)
            .unwrap_or_default()
            .iter()
            .map(|hash| Value::String(format!("{hash:032x}")))
            .chain(
                self.journal
                    .get(records..)
                    .unwrap_or_default()
                    .iter()
                    .cloned(),
            )
            .collect();
        state.summary = self
            .context
            .summary
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok());
        state.engine = serde_json::to_value(&record).unwrap_or(Value::Null);
        state.extensions = self.extensions.clone();
        state.unknown = self.unknown.clone();
        if self.created_at_ms > 0 {
            state.created_at_ms = self.created_at_ms;
        }
        state
    }
}

fn with_meta(
    messages: Vec<Message>,
    meta: Vec<EntryMeta>,
    compactions: u32,
    appended: u64,
) -> ContextState {
    let mut meta = meta.into_iter();
    let mut state = ContextState::default();
    state.entries = messages
        .into_iter()
        .map(|message| {
            let mut entry = Entry::new(message);
            entry.meta = meta.next().unwrap_or_default();
            entry
        })
        .collect();
    state.compactions = compactions;
    state.appended = appended.max(state.entries.len() as u64);
    state
}

/// Why loading or saving a snapshot failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PersistError {
    #[error("session store: {0}")]
    Store(#[from] StoreError),
    #[error("session {session} (version {version}): {error}")]
    Unreadable {
        session: String,
        version: u64,
        #[source]
        error: SnapshotError,
    },
}

/// Loads a session's snapshot and its version (`None`: never saved). A snapshot read from a
/// stored generation this build wrote knows its [`stored`](Snapshot::stored) shape.
pub async fn load(
    store: &dyn SessionStore,
    key: &SessionKey,
) -> Result<Option<(Snapshot, u64)>, PersistError> {
    let Some(versioned) = store.load(key).await? else {
        return Ok(None);
    };
    let version = versioned.version;
    let current = versioned.generation.is_some()
        && matches!(
            versioned.state.engine.get("format").and_then(Value::as_str),
            Some(FORMAT | FORMAT_V3)
        );
    let mut snapshot =
        Snapshot::decode(versioned.state).map_err(|error| PersistError::Unreadable {
            session: key.to_string(),
            version,
            error,
        })?;
    if current {
        snapshot.stored = Some(StoredShape::of(
            &snapshot.context,
            snapshot.client.hashes.len(),
            snapshot.journal.len(),
        ));
    }
    Ok(Some((snapshot, version)))
}

/// Saves a snapshot if the stored version is still `expected` (compare-and-swap) and appends
/// `log` to the session log, in one commit where the store can.
pub async fn save(
    store: &dyn SessionStore,
    key: &SessionKey,
    snapshot: &Snapshot,
    expected: Option<u64>,
    log: &[Message],
) -> Result<Committed, StoreError> {
    store
        .save_and_append(key, &snapshot.encode(), expected, log)
        .await
}

// ----- fingerprints -----------------------------------------------------------------------

/// The provider cache hint field.
pub const CACHE_CONTROL: &str = "cache_control";

/// The fingerprint of one client message: its neutral form (content, ids, wire hints) without
/// volatile cache hints ([`strip_volatile`]), so a message resent unchanged (or with its
/// `cache_control` marker moved elsewhere) has the same fingerprint and any edit changes it.
/// Fingerprints are stored with sessions: the same message must keep the same fingerprint
/// across versions.
pub fn message_hash(message: &Message) -> u128 {
    Fingerprinter::default().message(message)
}

/// Fingerprints many messages with one reusable serialization buffer: hashing the finished
/// bytes at once is several times faster than feeding the serializer's many small writes to a
/// streaming hasher, and gives the same value.
#[derive(Debug, Default)]
pub struct Fingerprinter {
    buffer: Vec<u8>,
}

impl Fingerprinter {
    /// The fingerprint of `message` (equal to [`message_hash`]).
    pub fn message(&mut self, message: &Message) -> u128 {
        xxh3_128(self.canonical_bytes(message))
    }

    /// The bytes a fingerprint is taken of: the message's JSON without volatile hints.
    pub fn canonical_bytes(&mut self, message: &Message) -> &[u8] {
        self.buffer.clear();
        if has_volatile(message) {
            let mut stable = message.clone();
            strip_volatile(&mut stable);
            // Serializing plain data into memory cannot fail.
            let _ = serde_json::to_writer(&mut self.buffer, &stable);
        } else {
            let _ = serde_json::to_writer(&mut self.buffer, message);
        }
        &self.buffer
    }
}

/// Removes what a client changes from call to call without changing the conversation:
/// provider cache hints (`cache_control`, which Claude Code moves to the newest block on
/// every call). Returns whether anything was removed.
pub fn strip_volatile(message: &mut Message) -> bool {
    let mut removed = false;
    for part in &mut message.parts {
        removed |= strip_part(part);
    }
    removed
}

fn strip_part(part: &mut Part) -> bool {
    match part {
        Part::Text { extra, .. }
        | Part::Data { extra, .. }
        | Part::ToolCall { extra, .. }
        | Part::Reasoning { extra, .. } => extra.remove(CACHE_CONTROL).is_some(),
        Part::ToolResult { extra, content, .. } => {
            let mut removed = extra.remove(CACHE_CONTROL).is_some();
            for inner in content {
                removed |= strip_part(inner);
            }
            removed
        }
        Part::Opaque { value } => strip_value(value),
    }
}

/// Removes cache hints from an opaque block and the blocks it contains.
fn strip_value(value: &mut Value) -> bool {
    let Some(object) = value.as_object_mut() else {
        return false;
    };
    let mut removed = object.remove(CACHE_CONTROL).is_some();
    if let Some(Value::Array(inner)) = object.get_mut("content") {
        for block in inner {
            removed |= strip_value(block);
        }
    }
    removed
}

/// Whether a message carries a volatile hint (cheap: no clone).
pub fn has_volatile(message: &Message) -> bool {
    fn value_has(value: &Value) -> bool {
        value.as_object().is_some_and(|object| {
            object.contains_key(CACHE_CONTROL)
                || object
                    .get("content")
                    .and_then(Value::as_array)
                    .is_some_and(|inner| inner.iter().any(value_has))
        })
    }
    fn part_has(part: &Part) -> bool {
        match part {
            Part::Text { extra, .. }
            | Part::Data { extra, .. }
            | Part::ToolCall { extra, .. }
            | Part::Reasoning { extra, .. } => extra.contains_key(CACHE_CONTROL),
            Part::ToolResult { extra, content, .. } => {
                extra.contains_key(CACHE_CONTROL) || content.iter().any(part_has)
            }
            Part::Opaque { value } => value_has(value),
        }
    }
    message.parts.iter().any(part_has)
}

/// Fingerprints as 32-digit hex strings (JSON has no 128-bit integers).
mod hex_hashes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(hashes: &[u128], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(hashes.iter().map(|h| format!("{h:032x}")))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u128>, D::Error> {
        let strings = Vec::<String>::deserialize(deserializer)?;
        strings
            .iter()
            .map(|s| u128::from_str_radix(s, 16).map_err(serde::de::Error::custom))
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conversation() -> Vec<Message> {
        vec![
            Message::system("rules"),
            Message::user("task"),
            Message::assistant("done"),
        ]
    }

    #[test]
    fn the_three_older_shapes_and_this_one_all_decode() {
        let messages = conversation();
        let hashes: Vec<String> = messages
            .iter()
            .map(|m| format!("{:032x}", message_hash(m)))
            .collect();

        // The gateway's record before the shared codec.
        let mut gateway = AgentState::new();
        gateway.context = messages.clone();
        gateway.engine = json!({"format": "ctxkeeper-gateway/1", "meta": [{}, {}, {}],
            "compactions": 2, "appended": 9, "client_hashes": hashes,
            "learned_window": 54000, "verbatim": false, "log_len": 9});
        let decoded = Snapshot::decode(gateway).unwrap();
        assert_eq!(decoded.context.compactions, 2);
        assert_eq!(decoded.client.hashes.len(), 3);
        assert_eq!(decoded.client.learned_window, Some(54000));

        // The engine state MCP `compact` wrote: the 500 "missing field `format`" shape.
        let mut mcp = AgentState::new();
        mcp.context = messages.clone();
        mcp.engine = serde_json::to_value(ContextState::from_messages(messages.clone())).unwrap();
        let decoded = Snapshot::decode(mcp).unwrap();
        assert_eq!(decoded.context.to_messages(), messages);
        assert!(decoded.client.hashes.is_empty());

        // A bare context (replay --store).
        let mut bare = AgentState::new();
        bare.context = messages.clone();
        let decoded = Snapshot::decode(bare).unwrap();
        assert_eq!(decoded.context.to_messages(), messages);

        // This build's, round trip with unknown fields kept.
        let mut snapshot = Snapshot::new(ContextState::from_messages(messages.clone()))
            .with_client(ClientRecord::of_messages(&messages));
        snapshot
            .engine_unknown
            .insert("future".into(), json!({"x": 1}));
        let mut stored = snapshot.encode();
        assert_eq!(stored.engine["format"], FORMAT);
        stored.unknown.insert("later_field".into(), json!(true));
        let back = Snapshot::decode(stored).unwrap();
        assert_eq!(back.client, snapshot.client);
        assert_eq!(back.engine_unknown["future"], json!({"x": 1}));
        assert_eq!(back.unknown["later_field"], json!(true));
        assert_eq!(back.encode().engine, snapshot.encode().engine);
    }

    #[test]
    fn the_record_before_incremental_saves_decodes() {
        let messages = conversation();
        let mut v2 = AgentState::new();
        v2.context = messages.clone();
        let hashes: Vec<String> = messages
            .iter()
            .map(|m| format!("{:032x}", message_hash(m)))
            .collect();
        v2.engine = json!({"format": "ctxkeeper/2", "meta": [{"pinned": true}, {}, {}],
            "compactions": 1, "appended": 3, "client": {"hashes": hashes, "verbatim": true}});
        let decoded = Snapshot::decode(v2).unwrap();
        assert!(decoded.context.entries[0].meta.pinned);
        assert_eq!(
            decoded.client.hashes,
            ClientRecord::of_messages(&messages).hashes
        );
        // Written again, the bookkeeping and fingerprints leave the engine record.
        let stored = decoded.encode();
        assert_eq!(stored.engine["format"], FORMAT);
        assert!(stored.engine.get("meta").is_none());
        assert_eq!((stored.context_meta.len(), stored.trail.len()), (3, 3));
        let back = Snapshot::decode(stored).unwrap();
        assert!(back.context.entries[0].meta.pinned);
        assert_eq!(back.client.hashes, decoded.client.hashes);
    }

    #[test]
    fn a_step_that_appended_encodes_only_what_it_appended() {
        let messages = conversation();
        let mut snapshot = Snapshot::new(ContextState::from_messages(messages.clone()))
            .with_client(ClientRecord::of_messages(&messages));
        snapshot.journal = vec![json!({"host_point": 1})];
        let stored = StoredShape::of(&snapshot.context, snapshot.client.hashes.len(), 1);
        let stored_hashes = snapshot.client.hashes.clone();
        let next = Message::user("and now?");
        snapshot.context.push(next.clone());
        snapshot.client.hashes.push(message_hash(&next));
        snapshot.journal.push(json!({"host_point": 2}));
        assert!(stored.continued_by(
            &snapshot.context,
            &snapshot.client.hashes,
            &stored_hashes,
            2
        ));
        let delta =
            snapshot
                .borrowed()
                .encode_after(stored.entries, stored.fingerprints, stored.records);
        assert_eq!(delta.context, vec![next]);
        assert_eq!(
            delta.trail,
            vec![
                json!(format!("{:032x}", snapshot.client.hashes[3])),
                json!({"host_point": 2})
            ]
        );
        // A journal shorter than the stored one was rewritten: not a continuation.
        assert!(!stored.continued_by(
            &snapshot.context,
            &snapshot.client.hashes,
            &stored_hashes,
            0
        ));
        // A replaced newest entry, a compaction or a changed history is not a continuation.
        let mut edited = snapshot.context.clone();
        let mut entries = std::mem::take(&mut edited.entries);
        entries.truncate(2);
        edited.replace_entries(entries);
        edited.push(Message::assistant("edited"));
        edited.push(Message::user("again"));
        assert!(!stored.continued_by(&edited, &snapshot.client.hashes, &stored_hashes, 2));
        let mut compacted = snapshot.context.clone();
        compacted.compactions += 1;
        assert!(!stored.continued_by(&compacted, &snapshot.client.hashes, &stored_hashes, 2));
        let mut other = snapshot.client.hashes.clone();
        other[0] ^= 1;
        assert!(!stored.continued_by(&snapshot.context, &other, &stored_hashes, 2));
    }

    #[test]
    fn journal_records_ride_in_the_trail_beside_the_fingerprints() {
        let messages = conversation();
        let mut snapshot = Snapshot::new(ContextState::from_messages(messages.clone()))
            .with_client(ClientRecord::of_messages(&messages));
        snapshot.journal = vec![json!({"host_point": [1, 2]}), json!({"host_note": "x"})];
        let stored = snapshot.encode();
        assert_eq!(stored.trail.len(), 5);
        let back = Snapshot::decode(stored).unwrap();
        assert_eq!(back.journal, snapshot.journal);
        assert_eq!(back.client.hashes, snapshot.client.hashes);
        // A `ctxkeeper/3` state holds fingerprints only, and still decodes.
        let mut v3 = snapshot.encode();
        v3.engine["format"] = json!("ctxkeeper/3");
        v3.trail.truncate(3);
        let back = Snapshot::decode(v3.clone()).unwrap();
        assert!(back.journal.is_empty());
        assert_eq!(back.client.hashes, snapshot.client.hashes);
        v3.trail.push(json!({"host_point": 1}));
        assert!(Snapshot::decode(v3).is_err());
    }

    #[test]
    fn an_unreadable_state_says_which_shape_and_why() {
        let mut state = AgentState::new();
        state.engine = json!({"format": "ctxkeeper/9"});
        let err = Snapshot::decode(state).unwrap_err();
        assert_eq!(err.shape, "ctxkeeper/9");
        assert!(err.cause.contains("newer"), "{err}");
        let mut state = AgentState::new();
        state.engine = json!({"format": "ctxkeeper-gateway/1", "client_hashes": ["zz"]});
        let err = Snapshot::decode(state).unwrap_err();
        assert!(err.to_string().contains("client hash"), "{err}");
    }

    #[test]
    fn fingerprints_ignore_cache_hints_in_nested_opaque_blocks() {
        let mut message = Message::user("x");
        message.parts.push(Part::Opaque {
            value: json!({"type": "search_result", "content": [
                {"type": "text", "text": "y", "cache_control": {"type": "ephemeral"}}]}),
        });
        let mut plain = Message::user("x");
        plain.parts.push(Part::Opaque {
            value: json!({"type": "search_result", "content": [{"type": "text", "text": "y"}]}),
        });
        assert!(has_volatile(&message) && !has_volatile(&plain));
        assert_eq!(message_hash(&message), message_hash(&plain));
    }
}
