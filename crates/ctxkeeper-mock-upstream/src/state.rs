//! What the server shares between requests: the live settings, the recorded requests and the
//! prompt-cache simulation.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ctxkeeper_core::model::Request;
use ctxkeeper_core::tokens::{Profiles, TokenModel, message_hash};
use serde::{Deserialize, Serialize};

use crate::MockConfig;
use crate::script::Script;

/// How many requests the recorder keeps; older ones are dropped first.
pub const RECORD_CAPACITY: usize = 10_000;

/// How many prefix hashes the cache simulation remembers before it forgets everything (a
/// provider's cache expires too; this only bounds memory in long benchmarks).
const PREFIX_CAPACITY: usize = 1_000_000;

/// How many memoised message counts are kept before they are forgotten (bounds memory only).
const COUNT_CAPACITY: usize = 1_000_000;

/// How many model names' token models are kept.
const MODEL_CAPACITY: usize = 1_000;

/// One request as the mock received it, with the status it answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// `GET`, `POST`, ….
    pub method: String,
    /// The path without the query string, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Every header as received (names lowercase), in order.
    pub headers: Vec<(String, String)>,
    /// The JSON body; a body that is not JSON is kept as a string, an empty one as `null`.
    pub body: serde_json::Value,
    /// The HTTP status the mock answered with.
    pub status: u16,
    /// The input tokens the mock counted (0 when it rejected the request before counting).
    pub input_tokens: u64,
    /// The part of `input_tokens` its simulated prompt cache served (0 for a refused request).
    #[serde(default)]
    pub cached_tokens: u64,
}

impl RecordedRequest {
    /// The value of a header (case-insensitive name), if it was sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// Settings accepted by `POST /mock/config`; absent fields stay as they are.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigPatch {
    pub window: Option<u64>,
    pub delay_ms: Option<u64>,
    pub record: Option<bool>,
    pub max_output_tokens: Option<u64>,
    pub summary_delay_ms: Option<u64>,
    pub native_compaction: Option<bool>,
    /// 0 answers summary requests normally again.
    pub summary_status: Option<u16>,
    /// A script to follow from now on; `{"steps": 0, …}` turns scripting off.
    pub script: Option<Script>,
}

/// A cheap, cloneable handle on a running mock's state: read what it received, change its
/// window, reset it. [`crate::MockServer`] hands one out; [`crate::router`] returns one.
#[derive(Debug, Clone)]
pub struct MockHandle {
    pub(crate) shared: Arc<Shared>,
}

impl MockHandle {
    /// Everything received since start (or the last reset), oldest first; at most the last
    /// 10,000 requests, none when recording is off.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.recorded).iter().cloned().collect()
    }

    /// How many requests arrived since start, answered or not (a reset leaves the count):
    /// a request waiting out a `delay` or a `summary_delay` is counted here before it is
    /// among [`MockHandle::requests`].
    pub fn received(&self) -> u64 {
        self.shared.sequence.load(Ordering::Relaxed)
    }

    /// Changes the context window every later request is checked against.
    pub fn set_window(&self, tokens: u64) {
        self.shared.window.store(tokens, Ordering::Relaxed);
    }

    /// The context window requests are checked against.
    pub fn window(&self) -> u64 {
        self.shared.window.load(Ordering::Relaxed)
    }

    /// Forgets the recorded requests, the prompt cache and the script's progress.
    pub fn reset(&self) {
        lock(&self.shared.recorded).clear();
        lock(&self.shared.prefixes).clear();
        lock(&self.shared.script_progress).clear();
    }

    pub(crate) fn apply(&self, patch: &ConfigPatch) {
        let shared = &self.shared;
        if let Some(window) = patch.window {
            shared.window.store(window, Ordering::Relaxed);
        }
        if let Some(delay) = patch.delay_ms {
            shared.delay_ms.store(delay, Ordering::Relaxed);
        }
        if let Some(record) = patch.record {
            shared.record.store(record, Ordering::Relaxed);
        }
        if let Some(max) = patch.max_output_tokens {
            shared.max_output_tokens.store(max, Ordering::Relaxed);
        }
        if let Some(delay) = patch.summary_delay_ms {
            shared.summary_delay_ms.store(delay, Ordering::Relaxed);
        }
        if let Some(native) = patch.native_compaction {
            shared.native_compaction.store(native, Ordering::Relaxed);
        }
        if let Some(status) = patch.summary_status {
            shared.summary_status.store(status, Ordering::Relaxed);
        }
        if let Some(script) = patch.script {
            *lock(&shared.script) = (script.steps > 0).then_some(script);
            lock(&shared.script_progress).clear();
        }
    }

    /// The scripted run the mock follows, if any.
    pub fn script(&self) -> Option<Script> {
        *lock(&self.shared.script)
    }
}

/// The state behind a [`MockHandle`].
#[derive(Debug)]
pub(crate) struct Shared {
    window: AtomicU64,
    delay_ms: AtomicU64,
    summary_delay_ms: AtomicU64,
    native_compaction: AtomicBool,
    /// 0: summary requests are answered.
    summary_status: AtomicU16,
    record: AtomicBool,
    max_output_tokens: AtomicU64,
    script: Mutex<Option<Script>>,
    /// The last scripted step handed to each caller (API and key).
    script_progress: Mutex<HashMap<String, u32>>,
    /// Numbers ids (`call_<n>`, `msg_mock<n>`) so that every answer's ids are unique.
    sequence: AtomicU64,
    recorded: Mutex<VecDeque<RecordedRequest>>,
    prefixes: Mutex<HashSet<u64>>,
    /// Memoised token counts by (profile, message or tool-list hash).
    counts: Mutex<HashMap<u64, u32>>,
    models: Mutex<HashMap<String, Arc<TokenModel>>>,
    profiles: Profiles,
    list_windows: bool,
}

impl Shared {
    pub fn new(config: &MockConfig) -> Shared {
        Shared {
            window: AtomicU64::new(config.window),
            delay_ms: AtomicU64::new(u64::try_from(config.delay.as_millis()).unwrap_or(u64::MAX)),
            summary_delay_ms: AtomicU64::new(
                u64::try_from(config.summary_delay.as_millis()).unwrap_or(u64::MAX),
            ),
            native_compaction: AtomicBool::new(config.native_compaction),
            summary_status: AtomicU16::new(config.summary_status.unwrap_or(0)),
            record: AtomicBool::new(config.record),
            max_output_tokens: AtomicU64::new(config.max_output_tokens),
            script: Mutex::new(config.script),
            script_progress: Mutex::new(HashMap::new()),
            sequence: AtomicU64::new(0),
            recorded: Mutex::new(VecDeque::new()),
            prefixes: Mutex::new(HashSet::new()),
            counts: Mutex::new(HashMap::new()),
            models: Mutex::new(HashMap::new()),
            profiles: Profiles::builtin(),
            list_windows: config.list_windows,
        }
    }

    pub fn window(&self) -> u64 {
        self.window.load(Ordering::Relaxed)
    }

    pub fn delay(&self) -> Duration {
        Duration::from_millis(self.delay_ms.load(Ordering::Relaxed))
    }

    pub fn summary_delay(&self) -> Duration {
        Duration::from_millis(self.summary_delay_ms.load(Ordering::Relaxed))
    }

    /// The status summary requests fail with, if they do.
    pub fn summary_status(&self) -> Option<u16> {
        Some(self.summary_status.load(Ordering::Relaxed)).filter(|s| *s != 0)
    }

    /// Whether the model list states windows ([`crate::MockConfig::list_windows`]).
    pub fn list_windows(&self) -> bool {
        self.list_windows
    }

    pub fn native_compaction(&self) -> bool {
        self.native_compaction.load(Ordering::Relaxed)
    }

    pub fn recording(&self) -> bool {
        self.record.load(Ordering::Relaxed)
    }

    pub fn max_output_tokens(&self) -> u64 {
        self.max_output_tokens.load(Ordering::Relaxed)
    }

    pub fn script(&self) -> Option<Script> {
        *lock(&self.script)
    }

    /// The last scripted step handed to `caller` (0 before the first).
    pub fn script_progress(&self, caller: &str) -> u32 {
        lock(&self.script_progress)
            .get(caller)
            .copied()
            .unwrap_or(0)
    }

    /// Records that `step` was handed to `caller`.
    pub fn advance_script(&self, caller: &str, step: u32) {
        let mut progress = lock(&self.script_progress);
        let entry = progress.entry(caller.to_owned()).or_insert(0);
        *entry = (*entry).max(step);
    }

    pub fn next_id(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn record(&self, request: RecordedRequest) {
        let mut recorded = lock(&self.recorded);
        if recorded.len() >= RECORD_CAPACITY {
            recorded.pop_front();
        }
        recorded.push_back(request);
    }

    /// The token model of a model name (the built-in profiles: exact o200k/cl100k for OpenAI
    /// models, the calibrated estimate for the others), looked up once per name.
    pub fn token_model(&self, model: &str) -> Arc<TokenModel> {
        let mut models = lock(&self.models);
        if let Some(found) = models.get(model) {
            return Arc::clone(found);
        }
        if models.len() >= MODEL_CAPACITY {
            models.clear();
        }
        let found = Arc::new(TokenModel::for_model(model, &self.profiles));
        models.insert(model.to_owned(), Arc::clone(&found));
        found
    }

    /// Counts a request and simulates the provider's prompt cache: the cached tokens are those
    /// of the longest prefix (tool schemas, then whole messages) that an earlier successful
    /// request with the same model and key already sent. Call [`Self::remember`] with the
    /// returned prefixes once the request is accepted.
    ///
    /// Counts are memoised per message (by content hash and profile): an agent resends its
    /// whole history every step, and counting it again would dominate the mock's cost.
    pub fn count(&self, request: &Request, model: &TokenModel, cache_key: &str) -> Counted {
        let profile = model.profile.name.as_str();
        let tools = serde_json::to_string(&request.tools).unwrap_or_default();
        let tools_key = hash_of(&(profile, "tools", &tools));
        let hashes: Vec<u64> = request.messages.iter().map(message_hash).collect();
        let keys: Vec<u64> = hashes
            .iter()
            .map(|hash| hash_of(&(profile, hash)))
            .collect();
        let (known_tools, mut counts) = {
            let known = lock(&self.counts);
            let counts: Vec<Option<u32>> = keys.iter().map(|key| known.get(key).copied()).collect();
            (known.get(&tools_key).copied(), counts)
        };
        // Count what is new outside the lock.
        let mut fresh = Vec::new();
        let tools_tokens = known_tools.unwrap_or_else(|| {
            let tokens = model.tools_tokens(&request.tools);
            fresh.push((tools_key, tokens));
            tokens
        });
        for ((count, message), key) in counts.iter_mut().zip(&request.messages).zip(&keys) {
            if count.is_none() {
                let tokens = model.message_tokens(message);
                fresh.push((*key, tokens));
                *count = Some(tokens);
            }
        }
        if !fresh.is_empty() {
            let mut known = lock(&self.counts);
            if known.len() + fresh.len() > COUNT_CAPACITY {
                known.clear();
            }
            known.extend(fresh);
        }

        let mut prefix = hash_of(&(cache_key, profile, &tools));
        let mut total = u64::from(tools_tokens) + u64::from(model.profile.request_overhead);
        let mut prefixes = Vec::with_capacity(hashes.len() + 1);
        prefixes.push((prefix, total));
        for (hash, count) in hashes.iter().zip(counts) {
            prefix = hash_of(&(prefix, hash));
            total += u64::from(count.unwrap_or_default());
            prefixes.push((prefix, total));
        }
        let cached = {
            let seen = lock(&self.prefixes);
            prefixes
                .iter()
                .rev()
                .find(|(hash, _)| seen.contains(hash))
                .map_or(0, |&(_, tokens)| tokens)
        };
        Counted {
            input: total,
            cached,
            prefixes: prefixes.into_iter().map(|(hash, _)| hash).collect(),
        }
    }

    /// Makes an accepted request's prefixes available to later requests.
    pub fn remember(&self, prefixes: &[u64]) {
        let mut seen = lock(&self.prefixes);
        if seen.len() + prefixes.len() > PREFIX_CAPACITY {
            seen.clear();
        }
        seen.extend(prefixes.iter().copied());
    }
}

/// A request's input tokens and how many of them the simulated cache served.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counted {
    pub input: u64,
    pub cached: u64,
    pub prefixes: Vec<u64>,
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the recorder and the
/// cache stay usable; a test reading them should not fail for an unrelated panic).
fn hash_of(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
