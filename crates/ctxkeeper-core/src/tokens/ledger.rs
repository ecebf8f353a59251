//! Per-message count caches, so that a per-step budget check costs O(new messages), not
//! O(history).
//!
//! - [`TokenLedger`] is for a caller that owns a growing history (the engine, a replay): it
//!   keeps the count of every message and running prefix sums, so after appending k messages a
//!   whole-history total costs k message counts, and the tokens of any range cost O(1).
//! - [`TokenCache`] is for a caller that receives the whole history on every call (the
//!   gateway): it remembers counts by a 64-bit hash of each message's content, so messages seen
//!   before cost a hash, not a tokenization.
//!
//! Both store raw counts; apply a [`Calibration`](super::Calibration) to the totals.
//!
//! ```
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_core::tokens::{Profiles, TokenCache, TokenLedger, TokenModel};
//!
//! let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
//! let mut history = vec![Message::user("hi"), Message::assistant("hello")];
//!
//! let mut ledger = TokenLedger::new();
//! assert_eq!(ledger.sync(&history, &model), 2);
//! history.push(Message::user("how are you?"));
//! assert_eq!(ledger.sync(&history, &model), 1); // only the new message is counted
//! assert_eq!(ledger.total(), model.messages_tokens(&history));
//!
//! let mut cache = TokenCache::new();
//! assert_eq!(cache.messages_tokens(&history, &model), ledger.total());
//! assert_eq!(cache.messages_tokens(&history, &model), ledger.total());
//! assert_eq!((cache.misses(), cache.hits()), (3, 3));
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use xxhash_rust::xxh3::Xxh3 as ContentHasher;

use super::count::TokenModel;
use super::profiles::ModelProfile;
use crate::model::{DataSource, Message, Part, Request, ToolSpec};

/// Per-message counts of a growing history, cached so that a whole-history count after
/// appending k messages costs O(k).
///
/// The ledger trusts that counted messages do not change: it only counts messages past
/// [`len`](Self::len). When a history is cut or rewritten (by compaction, say), call
/// [`truncate`](Self::truncate) at the first changed index; a history shorter than the ledger
/// truncates it automatically.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenLedger {
    counts: Vec<u32>,
    /// `prefix[i]` = tokens of messages `0..=i`.
    prefix: Vec<u64>,
}

impl TokenLedger {
    /// An empty ledger.
    pub fn new() -> TokenLedger {
        TokenLedger::default()
    }

    /// Counts the messages of `history` not yet counted (those past `self.len()`) and returns
    /// how many it counted. A `history` shorter than the ledger truncates it first.
    pub fn sync(&mut self, history: &[Message], model: &TokenModel) -> usize {
        if history.len() < self.counts.len() {
            self.truncate(history.len());
        }
        let new = history.get(self.counts.len()..).unwrap_or_default();
        for message in new {
            self.push(model.message_tokens(message));
        }
        new.len()
    }

    /// Appends the count of one more message.
    pub fn push(&mut self, count: u32) {
        let before = self.total();
        self.counts.push(count);
        self.prefix.push(before + u64::from(count));
    }

    /// Forgets the counts of messages `n..`.
    pub fn truncate(&mut self, n: usize) {
        self.counts.truncate(n);
        self.prefix.truncate(n);
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Number of messages counted.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// True when nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Tokens of message `index`; 0 past the end (see [`counts`](Self::counts) for checked
    /// access).
    pub fn get(&self, index: usize) -> u32 {
        self.counts.get(index).copied().unwrap_or(0)
    }

    /// The count of every message, in order.
    pub fn counts(&self) -> &[u32] {
        &self.counts
    }

    /// Tokens of the first `n` messages (all of them when `n` is past the end).
    pub fn prefix_total(&self, n: usize) -> u64 {
        match n.min(self.prefix.len()) {
            0 => 0,
            n => self.prefix.get(n - 1).copied().unwrap_or(0),
        }
    }

    /// Tokens of every counted message.
    pub fn total(&self) -> u64 {
        self.prefix.last().copied().unwrap_or(0)
    }

    /// Tokens of messages `start..end` (clamped to what is counted).
    pub fn range_total(&self, start: usize, end: usize) -> u64 {
        self.prefix_total(end)
            .saturating_sub(self.prefix_total(start))
    }

    /// The smallest index `i` such that messages `i..` fit in `budget` tokens (`len()` when not
    /// even the last message fits). A binary search over the prefix sums: O(log n).
    pub fn suffix_start_within(&self, budget: u64) -> usize {
        let total = self.total();
        // The suffix from `i` holds `total - prefix_total(i)` tokens, which shrinks as `i`
        // grows: find the first `i` where it fits.
        let (mut low, mut high) = (0, self.counts.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if total - self.prefix_total(mid) <= budget {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        low
    }
}

/// The 64-bit content hash [`TokenCache`] keys messages by: everything that can change a
/// message's count (role, name, every part with its extra fields), none of the wire hints.
///
/// It uses XXH3 (a resent 3 MB history is hashed on every request: SipHash made that a
/// few milliseconds), through `Hash`, so it is stable within one build — enough for an
/// in-memory cache, not meant to be stored. Two different messages share a hash with
/// probability ~2⁻⁶⁴.
pub fn message_hash(message: &Message) -> u64 {
    let mut hasher = ContentHasher::new();
    message.role.hash(&mut hasher);
    message.name.hash(&mut hasher);
    message.extra.hash(&mut hasher);
    message.parts.len().hash(&mut hasher);
    for part in &message.parts {
        hash_part(part, &mut hasher);
    }
    hasher.finish()
}

fn hash_part(part: &Part, hasher: &mut ContentHasher) {
    part.kind().hash(hasher);
    match part {
        Part::Text { text, extra } => {
            text.hash(hasher);
            extra.hash(hasher);
        }
        Part::Data {
            source,
            wire_type,
            extra,
        } => {
            match source {
                DataSource::Url { url } => (0u8, url).hash(hasher),
                DataSource::Base64 { media_type, data } => (1u8, media_type, data).hash(hasher),
                DataSource::Archived { sha256, media_type } => {
                    (2u8, sha256, media_type).hash(hasher)
                }
            }
            wire_type.hash(hasher);
            extra.hash(hasher);
        }
        Part::ToolCall {
            id,
            name,
            arguments,
            extra,
        } => {
            (id, name, arguments).hash(hasher);
            extra.hash(hasher);
        }
        Part::ToolResult {
            call_id,
            content,
            is_error,
            extra,
        } => {
            (call_id, is_error).hash(hasher);
            extra.hash(hasher);
            content.len().hash(hasher);
            for inner in content {
                hash_part(inner, hasher);
            }
        }
        Part::Reasoning {
            text,
            signature,
            encrypted,
            redacted,
            extra,
        } => {
            (text, signature, encrypted, redacted).hash(hasher);
            extra.hash(hasher);
        }
        Part::Opaque { value } => value.hash(hasher),
    }
}

fn tools_hash(tools: &[ToolSpec]) -> u64 {
    let mut hasher = ContentHasher::new();
    tools.len().hash(&mut hasher);
    for tool in tools {
        (&tool.name, &tool.description, &tool.parameters, &tool.extra).hash(&mut hasher);
    }
    hasher.finish()
}

/// Keys are already hashes: use them as they are.
#[derive(Debug, Default, Clone, Copy)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

type HashMapU64 = HashMap<u64, u32, BuildHasherDefault<IdentityHasher>>;

/// Message counts remembered by content hash, for callers that receive the whole history on
/// every call.
///
/// Counting a history of N + k messages after one of N costs k message counts and N + k
/// hashes. The cache holds counts for one model profile: passing a model with a different
/// profile empties it. It is bounded: when the newer of its two generations fills up, the older
/// one is dropped, so entries used recently survive and memory stays below `capacity` entries.
#[derive(Debug, Clone)]
pub struct TokenCache {
    profile: Option<ModelProfile>,
    current: HashMapU64,
    previous: HashMapU64,
    capacity: usize,
    tools: Option<(u64, u32)>,
    hits: u64,
    misses: u64,
}

impl Default for TokenCache {
    fn default() -> TokenCache {
        TokenCache::new()
    }
}

impl TokenCache {
    /// The default bound: 131,072 messages (about 3 MB).
    pub const DEFAULT_CAPACITY: usize = 1 << 17;

    /// An empty cache of [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY).
    pub fn new() -> TokenCache {
        TokenCache::with_capacity(TokenCache::DEFAULT_CAPACITY)
    }

    /// An empty cache holding at most about `capacity` message counts (at least 2).
    pub fn with_capacity(capacity: usize) -> TokenCache {
        TokenCache {
            profile: None,
            current: HashMapU64::default(),
            previous: HashMapU64::default(),
            capacity: capacity.max(2),
            tools: None,
            hits: 0,
            misses: 0,
        }
    }

    /// Tokens of one message, from the cache when this content was counted before.
    pub fn message_tokens(&mut self, message: &Message, model: &TokenModel) -> u32 {
        self.check_profile(model);
        let key = message_hash(message);
        if let Some(&count) = self.current.get(&key) {
            self.hits += 1;
            return count;
        }
        let count = match self.previous.remove(&key) {
            Some(count) => {
                self.hits += 1;
                count
            }
            None => {
                self.misses += 1;
                model.message_tokens(message)
            }
        };
        if self.current.len() >= self.capacity / 2 {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, count);
        count
    }

    /// Tokens of a list of messages.
    pub fn messages_tokens(&mut self, messages: &[Message], model: &TokenModel) -> u64 {
        messages
            .iter()
            .map(|m| u64::from(self.message_tokens(m, model)))
            .sum()
    }

    /// Tokens of a tool list; the last list's count is remembered, since a session sends the
    /// same tools on every call.
    pub fn tools_tokens(&mut self, tools: &[ToolSpec], model: &TokenModel) -> u32 {
        self.check_profile(model);
        let key = tools_hash(tools);
        match self.tools {
            Some((cached, count)) if cached == key => count,
            _ => {
                let count = model.tools_tokens(tools);
                self.tools = Some((key, count));
                count
            }
        }
    }

    /// Tokens of a whole request, as [`TokenModel::request_tokens`] counts them.
    pub fn request_tokens(&mut self, request: &Request, model: &TokenModel) -> u64 {
        self.messages_tokens(&request.messages, model)
            + u64::from(self.tools_tokens(&request.tools, model))
            + u64::from(model.profile.request_overhead)
    }

    /// Messages found in the cache.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Messages that had to be counted.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Counts currently held.
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every count (the hit and miss tallies are kept).
    pub fn clear(&mut self) {
        self.current.clear();
        self.previous.clear();
        self.tools = None;
    }

    fn check_profile(&mut self, model: &TokenModel) {
        if self.profile.as_ref() != Some(&model.profile) {
            self.clear();
            self.profile = Some(model.profile.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::Profiles;

    fn model(name: &str) -> TokenModel {
        TokenModel::for_model(name, &Profiles::builtin())
    }

    fn history(n: usize) -> Vec<Message> {
        (0..n)
            .map(|i| match i % 3 {
                0 => Message::user(format!("question number {i}")),
                1 => Message::tool_call(format!("c{i}"), "search", format!("{{\"q\":{i}}}")),
                _ => Message::tool_result(format!("c{}", i - 1), format!("result {i} ").repeat(i)),
            })
            .collect()
    }

    #[test]
    fn ledger_counts_only_new_messages() {
        let model = model("gpt-4o");
        let messages = history(30);
        let mut ledger = TokenLedger::new();
        assert!(ledger.is_empty());
        assert_eq!(ledger.sync(&messages[..20], &model), 20);
        assert_eq!(ledger.sync(&messages[..20], &model), 0);
        assert_eq!(ledger.sync(&messages, &model), 10);
        assert_eq!(ledger.len(), 30);
        assert_eq!(ledger.total(), model.messages_tokens(&messages));
        for n in [0, 1, 17, 30] {
            assert_eq!(
                ledger.prefix_total(n),
                model.messages_tokens(&messages[..n])
            );
        }
        assert_eq!(ledger.prefix_total(99), ledger.total());
        assert_eq!(ledger.get(4), model.message_tokens(&messages[4]));
        assert_eq!(ledger.get(99), 0);
        assert_eq!(
            ledger.range_total(5, 9),
            model.messages_tokens(&messages[5..9])
        );
        assert_eq!(ledger.range_total(9, 5), 0);
    }

    #[test]
    fn ledger_follows_a_cut_history() {
        let model = model("gpt-4o");
        let mut messages = history(10);
        let mut ledger = TokenLedger::new();
        ledger.sync(&messages, &model);
        messages.truncate(4);
        assert_eq!(ledger.sync(&messages, &model), 0);
        assert_eq!(ledger.len(), 4);
        messages[3] = Message::user("rewritten");
        ledger.truncate(3);
        assert_eq!(ledger.sync(&messages, &model), 1);
        assert_eq!(ledger.total(), model.messages_tokens(&messages));
        ledger.clear();
        assert_eq!((ledger.len(), ledger.total()), (0, 0));
    }

    #[test]
    fn suffix_start_within_finds_the_longest_fitting_suffix() {
        let mut ledger = TokenLedger::new();
        for count in [10, 20, 30, 40] {
            ledger.push(count);
        }
        assert_eq!(ledger.suffix_start_within(100), 0);
        assert_eq!(ledger.suffix_start_within(99), 1);
        assert_eq!(ledger.suffix_start_within(70), 2);
        assert_eq!(ledger.suffix_start_within(40), 3);
        assert_eq!(ledger.suffix_start_within(39), 4);
        assert_eq!(TokenLedger::new().suffix_start_within(0), 0);
    }

    #[test]
    fn cache_counts_a_grown_history_with_k_message_counts() {
        let model = model("gpt-4o");
        let (n, k) = (40, 7);
        let messages = history(n + k);
        let mut cache = TokenCache::new();
        let first = cache.messages_tokens(&messages[..n], &model);
        assert_eq!(first, model.messages_tokens(&messages[..n]));
        assert_eq!(cache.misses(), n as u64);
        let second = cache.messages_tokens(&messages, &model);
        assert_eq!(second, model.messages_tokens(&messages));
        assert_eq!(
            cache.misses(),
            (n + k) as u64,
            "only the k new messages were counted"
        );
        assert_eq!(cache.hits(), n as u64);
    }

    #[test]
    fn cache_keys_on_content_not_position() {
        let model = model("gpt-4o");
        let mut cache = TokenCache::new();
        let a = Message::user("same words");
        cache.message_tokens(&a, &model);
        cache.message_tokens(&a.clone(), &model);
        assert_eq!((cache.misses(), cache.hits()), (1, 1));
        let mut named = a.clone();
        named.name = Some("alice".into());
        assert_ne!(message_hash(&a), message_hash(&named));
        let mut hinted = a.clone();
        hinted.hints.origin = Some("anthropic".into());
        assert_eq!(
            message_hash(&a),
            message_hash(&hinted),
            "wire hints do not change the count"
        );
        let nested = Message::tool_result("x", "a");
        let other = Message::tool_result("x", "b");
        assert_ne!(message_hash(&nested), message_hash(&other));
    }

    #[test]
    fn cache_resets_for_another_profile() {
        let mut cache = TokenCache::new();
        let message = Message::user("人工智能正在改变我们的生活方式。");
        let gpt4o = cache.message_tokens(&message, &model("gpt-4o"));
        let gpt4 = cache.message_tokens(&message, &model("gpt-4"));
        assert_eq!(gpt4o, model("gpt-4o").message_tokens(&message));
        assert_eq!(gpt4, model("gpt-4").message_tokens(&message));
        assert_ne!(gpt4o, gpt4);
        assert_eq!(cache.misses(), 2);
    }

    #[test]
    fn cache_stays_bounded_and_keeps_recent_entries() {
        let model = model("gpt-4o");
        let mut cache = TokenCache::with_capacity(8);
        let messages = history(50);
        cache.messages_tokens(&messages, &model);
        assert!(cache.len() <= 8, "{}", cache.len());
        let before = cache.misses();
        cache.message_tokens(&messages[49], &model);
        assert_eq!(
            cache.misses(),
            before,
            "the most recent message is still cached"
        );
    }

    #[test]
    fn cache_counts_requests_like_the_model() {
        let model = model("claude-sonnet-4");
        let request = Request {
            messages: history(9),
            tools: vec![ToolSpec {
                name: "search".into(),
                description: Some("Search the web".into()),
                parameters: serde_json::json!({"type": "object"}),
                extra: Default::default(),
                hints: Default::default(),
            }],
            ..Request::default()
        };
        let mut cache = TokenCache::new();
        assert_eq!(
            cache.request_tokens(&request, &model),
            model.request_tokens(&request)
        );
        assert_eq!(
            cache.request_tokens(&request, &model),
            model.request_tokens(&request)
        );
        cache.clear();
        assert!(cache.is_empty());
    }
}
