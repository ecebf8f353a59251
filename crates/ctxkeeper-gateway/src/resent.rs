//! The resent prefix: agents send their whole history on every call, so most of a request's
//! bytes are, byte for byte, the messages of the session's previous request. Parsing and
//! fingerprinting those again is most of what a long conversation costs the gateway, so it
//! recognises them from their raw bytes first:
//!
//! 1. an [`ElementScanner`] finds the byte span of each element of the body's message array
//!    without building any JSON value (strings are skipped with `memchr`), while the body
//!    arrives: it is fed after every chunk and resumes where it stopped;
//! 2. each span is hashed (XXH3-128) as soon as it is complete, and the hashes are compared
//!    with the ones kept for the session's previous request ([`ResentPrefixes`]);
//! 3. the body is parsed with only the elements after the common prefix
//!    ([`MessageSpans::skeleton`]), and the kept messages and fingerprints of the prefix are
//!    put back in front of them.
//!
//! Only identical bytes are reused, and only up to a message boundary the new elements
//! cannot move: in Chat Completions and Anthropic Messages every element is one message on
//! its own; in Responses a run of assistant-side items forms one message ([`Grouping`]), so
//! the reuse ends where the kept request's messages started and one element before the first
//! new one. The outcome is the full parse's. Anything unusual (a key with escapes, a repeated
//! `messages` key, a skeleton that fails to parse) takes the full parse instead, which also
//! gives the exact error.
//!
//! ```
//! use ctxkeeper_gateway::resent::MessageSpans;
//!
//! let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}, {"role":"assistant","content":"yo"}]}"#;
//! let spans = MessageSpans::scan(body, b"messages").unwrap();
//! assert_eq!(spans.elements.len(), 2);
//! assert_eq!(&body[spans.elements[1].clone()], br#"{"role":"assistant","content":"yo"}"#);
//! // Keeping only the second message:
//! assert_eq!(
//!     spans.skeleton(body, 1),
//!     br#"{"model":"m","messages":[{"role":"assistant","content":"yo"}]}"#.to_vec()
//! );
//! ```

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ctxkeeper_core::model::Message;

/// The byte spans of a request body's message array and of each of its elements (without
/// the whitespace around them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageSpans {
    /// From the array's `[` to its `]`, both included.
    pub array: Range<usize>,
    pub elements: Vec<Range<usize>>,
}

impl MessageSpans {
    /// Finds the top-level `field` array of the JSON object `body`. `None` when the body is
    /// not an object holding that array exactly once, when a top-level key has an escape (its
    /// name could be `field` once decoded) or when the bytes do not scan as JSON. The scan
    /// does not validate the elements' insides: the caller parses whatever it does not
    /// already know.
    pub fn scan(body: &[u8], field: &[u8]) -> Option<MessageSpans> {
        let mut scanner = ElementScanner::new(field);
        scanner.feed(body);
        scanner.finish().map(|(spans, _)| spans)
    }

    /// The hash of each element's bytes.
    pub fn hashes(&self, body: &[u8]) -> Vec<u128> {
        self.elements
            .iter()
            .map(|span| element_hash(&body[span.clone()]))
            .collect()
    }

    /// `body` with its message array holding only the elements from `from` on.
    pub fn skeleton(&self, body: &[u8], from: usize) -> Vec<u8> {
        let kept = self.elements.get(from..).unwrap_or_default();
        let kept_bytes: usize = kept.iter().map(|span| span.len() + 1).sum();
        let mut out = Vec::with_capacity(body.len() - self.array.len() + kept_bytes + 2);
        out.extend_from_slice(&body[..self.array.start + 1]);
        for (i, span) in kept.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&body[span.clone()]);
        }
        out.extend_from_slice(&body[self.array.end - 1..]);
        out
    }
}

fn element_hash(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}

/// Finds the elements of a body's `field` array while the body arrives, hashing each one as
/// soon as its last byte is there: fed the body read so far after every chunk, it resumes
/// where it stopped, so by the time the last chunk is in only that chunk is left to scan.
///
/// ```
/// use ctxkeeper_gateway::resent::ElementScanner;
///
/// let body = br#"{"messages":[{"role":"user","content":"a \"quoted\" word"},{"role":"assistant","content":"b"}]}"#;
/// let mut scanner = ElementScanner::new(b"messages");
/// // The body in two pieces, cut inside a string.
/// scanner.feed(&body[..30]);
/// scanner.feed(body);
/// let (spans, hashes) = scanner.finish().unwrap();
/// assert_eq!(spans.elements.len(), 2);
/// assert_eq!(hashes.len(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct ElementScanner {
    field: Vec<u8>,
    /// Bytes of the body scanned so far.
    at: usize,
    state: State,
    /// Where the key being read, or the element being skipped, starts.
    start: usize,
    value: ValueSkip,
    array: Option<Range<usize>>,
    /// Whether the value being read is the `field` array.
    in_field: bool,
    elements: Vec<Range<usize>>,
    hashes: Vec<u128>,
}

/// Where the scanner is in the body's top-level object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the object's `{`.
    Start,
    /// After `{`: the first key, or `}`.
    FirstKey,
    /// After `,`: a key.
    Key,
    /// Inside a key's quotes.
    InKey,
    /// After a key: `:`.
    Colon,
    /// After `:`: the value.
    Value,
    /// Skipping a value that is not the array.
    Skip,
    /// After the array's `[`: the first element, or `]`.
    FirstElement,
    /// After `,` in the array: an element.
    Element,
    /// Inside an element.
    InElement,
    /// After an element: `,` or `]`.
    AfterElement,
    /// After a value: `,` or `}`.
    AfterValue,
    /// The object is closed.
    Done,
    /// Not a body this scanner reads.
    Failed,
}

/// Skips one JSON value without decoding it: strings are crossed with `memchr`, brackets
/// counted outside them (their pairing is left to the parser).
#[derive(Debug, Clone, Copy, Default)]
struct ValueSkip {
    started: bool,
    scalar: bool,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl ValueSkip {
    /// Advances over `body` from `*at`; the value's end once it is there, `None` when more
    /// bytes are needed, `Err` when the bytes cannot start a value.
    fn advance(&mut self, body: &[u8], at: &mut usize) -> Result<Option<usize>, ()> {
        loop {
            let Some(&byte) = body.get(*at) else {
                return Ok(None);
            };
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    *at += 1;
                    continue;
                }
                let Some(offset) = memchr::memchr2(b'"', b'\\', &body[*at..]) else {
                    *at = body.len();
                    return Ok(None);
                };
                *at += offset + 1;
                if body[*at - 1] == b'\\' {
                    self.escaped = true;
                } else {
                    self.in_string = false;
                    if self.depth == 0 {
                        return Ok(Some(*at));
                    }
                }
                continue;
            }
            if self.scalar {
                if matches!(byte, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                    return Ok(Some(*at));
                }
                *at += 1;
                continue;
            }
            if !self.started {
                self.started = true;
                match byte {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth = 1,
                    b',' | b'}' | b']' | b':' => return Err(()),
                    _ => {
                        self.scalar = true;
                        continue;
                    }
                }
                *at += 1;
                continue;
            }
            match byte {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        *at += 1;
                        return Ok(Some(*at));
                    }
                }
                _ => {}
            }
            *at += 1;
        }
    }
}

impl ElementScanner {
    pub fn new(field: &[u8]) -> ElementScanner {
        ElementScanner {
            field: field.to_vec(),
            at: 0,
            state: State::Start,
            start: 0,
            value: ValueSkip::default(),
            array: None,
            in_field: false,
            elements: Vec::new(),
            hashes: Vec::new(),
        }
    }

    /// Scans what `body` (the body read so far: the previous call's bytes and more) adds.
    pub fn feed(&mut self, body: &[u8]) {
        while self.at < body.len() {
            if self.step(body).is_err() {
                self.state = State::Failed;
            }
            if matches!(self.state, State::Done | State::Failed) {
                return;
            }
        }
    }

    /// The array's spans and the hash of each element, once the whole object was fed; `None`
    /// when the body did not scan (see [`MessageSpans::scan`]).
    pub fn finish(self) -> Option<(MessageSpans, Vec<u128>)> {
        if self.state != State::Done {
            return None;
        }
        let array = self.array?;
        Some((
            MessageSpans {
                array,
                elements: self.elements,
            },
            self.hashes,
        ))
    }

    /// One move of the object's state machine, from `self.at` (which is inside `body`).
    fn step(&mut self, body: &[u8]) -> Result<(), ()> {
        let byte = body[self.at];
        let space = matches!(byte, b' ' | b'\n' | b'\r' | b'\t');
        let waits_for_token = !matches!(
            self.state,
            State::InKey | State::Skip | State::InElement | State::Done | State::Failed
        );
        if space && waits_for_token {
            self.at += 1;
            return Ok(());
        }
        match self.state {
            State::Start => {
                expect(byte, b'{')?;
                self.at += 1;
                self.state = State::FirstKey;
            }
            State::FirstKey | State::Key => {
                // An empty object holds no array.
                expect(byte, b'"')?;
                self.start = self.at;
                self.at += 1;
                self.state = State::InKey;
            }
            State::InKey => {
                let offset = memchr::memchr2(b'"', b'\\', &body[self.at..]).ok_or(());
                let Ok(offset) = offset else {
                    self.at = body.len();
                    return Ok(());
                };
                self.at += offset + 1;
                // A key with an escape could decode to the field's name: not read here.
                expect(body[self.at - 1], b'"')?;
                self.in_field = body[self.start + 1..self.at - 1] == self.field[..];
                self.state = State::Colon;
            }
            State::Colon => {
                expect(byte, b':')?;
                self.at += 1;
                self.state = State::Value;
            }
            State::Value => {
                if self.in_field {
                    // The field twice: which one a parser keeps is not this scanner's call.
                    if self.array.is_some() {
                        return Err(());
                    }
                    expect(byte, b'[')?;
                    self.array = Some(self.at..self.at);
                    self.at += 1;
                    self.state = State::FirstElement;
                } else {
                    self.value = ValueSkip::default();
                    self.state = State::Skip;
                }
            }
            State::Skip => {
                if self.value.advance(body, &mut self.at)?.is_some() {
                    self.state = State::AfterValue;
                }
            }
            State::FirstElement if byte == b']' => self.close_array(),
            State::FirstElement | State::Element => {
                self.start = self.at;
                self.value = ValueSkip::default();
                self.state = State::InElement;
            }
            State::InElement => {
                if let Some(end) = self.value.advance(body, &mut self.at)? {
                    self.hashes.push(element_hash(&body[self.start..end]));
                    self.elements.push(self.start..end);
                    self.state = State::AfterElement;
                }
            }
            State::AfterElement => {
                match byte {
                    b',' => self.state = State::Element,
                    b']' => {
                        self.close_array();
                        return Ok(());
                    }
                    _ => return Err(()),
                }
                self.at += 1;
            }
            State::AfterValue => {
                self.state = match byte {
                    b',' => State::Key,
                    b'}' => State::Done,
                    _ => return Err(()),
                };
                self.at += 1;
            }
            // Whatever follows the object is the parser's to refuse.
            State::Done | State::Failed => self.at = body.len(),
        }
        Ok(())
    }

    fn close_array(&mut self) {
        self.at += 1;
        if let Some(array) = &mut self.array {
            array.end = self.at;
        }
        self.state = State::AfterValue;
    }
}

fn expect(byte: u8, wanted: u8) -> Result<(), ()> {
    if byte == wanted { Ok(()) } else { Err(()) }
}

/// How the elements of a wire's message array form messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// Each element is one message (Chat Completions `messages`, Anthropic `messages`).
    OnePerElement,
    /// A run of assistant-side items (reasoning, output text, tool calls) forms one message
    /// (Responses `input`).
    ResponsesItems,
}

impl Grouping {
    /// How many elements `message` stands for.
    pub fn elements_in(self, message: &Message) -> usize {
        match self {
            Grouping::OnePerElement => 1,
            Grouping::ResponsesItems => ctxkeeper_core::formats::responses::input_items_in(message),
        }
    }

    /// Whether an element can join the message of the element before it. Then a new element
    /// right after the reused ones may continue the last reused message, so the reuse stops
    /// one element earlier.
    pub fn joins(self) -> bool {
        self == Grouping::ResponsesItems
    }
}

/// One request's body read for its resent prefix: its elements' hashes and, when the first of
/// them are the session's previous request's, that request's record.
#[derive(Debug)]
pub struct Reading {
    pub key: PrefixKey,
    spans: MessageSpans,
    hashes: Vec<u128>,
    grouping: Grouping,
    /// The kept record, how many leading elements of this body it holds and how many
    /// messages those elements are.
    known: Option<(usize, usize, KnownPrefix)>,
    /// What [`Self::splice`] put back: the fingerprints of the prefix's messages.
    spliced: Option<Spliced>,
}

/// The prefix put back in front of a request's new messages.
#[derive(Debug)]
pub struct Spliced {
    /// Where the prefix starts among the request's messages.
    pub lead: usize,
    pub fingerprints: Vec<u128>,
}

impl Reading {
    /// The reading of a body `scanner` was fed in full, with the session's kept record;
    /// `None` when the body did not scan ([`MessageSpans::scan`]).
    pub fn start(
        prefixes: &ResentPrefixes,
        key: PrefixKey,
        scanner: ElementScanner,
        grouping: Grouping,
    ) -> Option<Reading> {
        let (spans, hashes) = scanner.finish()?;
        let known = prefixes.take(&key).and_then(|record| {
            let mut common = record.common(&hashes);
            if grouping.joins() && common < hashes.len() {
                common -= 1;
            }
            let (elements, messages) = record.cut(common)?;
            Some((elements, messages, record))
        });
        Some(Reading {
            key,
            spans,
            hashes,
            grouping,
            known,
            spliced: None,
        })
    }

    /// Bytes of the body's leading elements the session's kept record already holds (they
    /// are not parsed again); 0 when none is known.
    pub fn known_bytes(&self) -> usize {
        self.known.as_ref().map_or(0, |(elements, ..)| {
            self.spans.elements[..*elements]
                .iter()
                .map(|span| span.len())
                .sum()
        })
    }

    /// The body without its known prefix, parsed; `None` when no prefix is known or that
    /// body is not JSON (the full body then gives the error).
    pub fn skeleton(&self, body: &[u8]) -> Option<serde_json::Value> {
        let (elements, ..) = self.known.as_ref()?;
        serde_json::from_slice(&self.spans.skeleton(body, *elements)).ok()
    }

    /// Puts the known prefix's messages back in front of the messages parsed from the
    /// [`Self::skeleton`] (after the lead ones, such as a top-level system prompt); returns
    /// how many were put back, `None` when they do not line up (the body is then parsed in
    /// full).
    pub fn splice(&mut self, messages: &mut Vec<Message>) -> Option<usize> {
        let (elements, count, record) = self.known.take()?;
        let lead = lead_of(messages, self.hashes.len() - elements, self.grouping)?;
        let (prefix, fingerprints) = record.into_prefix(count);
        if prefix.len() != count {
            return None;
        }
        messages.splice(lead..lead, prefix);
        self.spliced = Some(Spliced { lead, fingerprints });
        Some(count)
    }

    /// The fingerprints [`Self::splice`] put back, once.
    pub fn known_fingerprints(&mut self) -> Option<Spliced> {
        self.spliced.take()
    }

    /// The record of this request for the session's next one: `messages` are the request's
    /// (as parsed, unrepaired) and `fingerprints` theirs.
    pub fn record(
        &self,
        messages: Vec<Message>,
        fingerprints: Vec<u128>,
        bytes: usize,
    ) -> Option<KnownPrefix> {
        let lead = lead_of(&messages, self.hashes.len(), self.grouping)?;
        if fingerprints.len() != messages.len() {
            return None;
        }
        // A cut is possible where a message starts.
        let mut cuts = vec![None; self.hashes.len() + 1];
        let mut at = 0;
        cuts[0] = Some(0);
        for (i, message) in messages[lead..].iter().enumerate() {
            at += self.grouping.elements_in(message);
            *cuts.get_mut(at)? = Some(i + 1);
        }
        Some(KnownPrefix {
            element_hashes: self.hashes.clone(),
            cuts,
            lead,
            messages,
            fingerprints,
            bytes,
            forwarded_as_sent: false,
        })
    }
}

/// How many of `messages` come before those of the last `elements` elements of the array
/// (a top-level system prompt or instructions); `None` when the messages do not end on
/// exactly that many elements.
fn lead_of(messages: &[Message], elements: usize, grouping: Grouping) -> Option<usize> {
    let mut counted = 0;
    let mut lead = messages.len();
    while counted < elements {
        lead = lead.checked_sub(1)?;
        counted += grouping.elements_in(&messages[lead]);
    }
    (counted == elements).then_some(lead)
}

/// Which conversation a kept prefix belongs to: tenant, session id and endpoint (the same
/// bytes are different messages on another wire).
pub type PrefixKey = (String, String, &'static str);

/// What a request's messages were, kept for the session's next request.
#[derive(Debug)]
pub struct KnownPrefix {
    /// The hash of each element of the message array.
    pub element_hashes: Vec<u128>,
    /// For each number of leading elements, how many messages they are, when they end a
    /// message (`None` inside a run of elements forming one message).
    pub cuts: Vec<Option<usize>>,
    /// Messages that come before the array's (a top-level system prompt or instructions).
    pub lead: usize,
    /// Every message of the request: `lead` ones, then those of the elements.
    pub messages: Vec<Message>,
    /// The fingerprint of each message.
    pub fingerprints: Vec<u128>,
    /// The body's size, what the record is counted as against the bound.
    pub bytes: usize,
    /// The request went upstream as the client sent it (nothing compacted or rewritten): the
    /// next one most likely does too ([`ResentPrefixes::continues_as_sent`]).
    pub forwarded_as_sent: bool,
}

impl KnownPrefix {
    /// How many leading elements of `hashes` this record holds, as they are.
    pub fn common(&self, hashes: &[u128]) -> usize {
        self.element_hashes
            .iter()
            .zip(hashes)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// The longest prefix of at most `elements` elements that ends a message, as (elements,
    /// messages); `None` when there is none.
    pub fn cut(&self, elements: usize) -> Option<(usize, usize)> {
        (1..=elements.min(self.cuts.len().saturating_sub(1)))
            .rev()
            .find_map(|at| self.cuts[at].map(|messages| (at, messages)))
    }

    /// The first `count` messages of the array, with their fingerprints.
    pub fn into_prefix(mut self, count: usize) -> (Vec<Message>, Vec<u128>) {
        let end = self.lead + count;
        self.messages.truncate(end);
        self.messages.drain(..self.lead);
        self.fingerprints.truncate(end);
        self.fingerprints.drain(..self.lead);
        (self.messages, self.fingerprints)
    }
}

/// The kept prefixes of recent sessions, bounded in bytes: the least recently used go first.
/// A request takes its session's record and puts the new one back once answered, so two
/// concurrent requests of one session never share one (the second parses in full).
#[derive(Debug)]
pub struct ResentPrefixes {
    bound: usize,
    inner: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    records: HashMap<PrefixKey, (u64, KnownPrefix)>,
    /// The records' keys by the time they were kept, oldest first, with that time.
    order: BTreeMap<u64, (PrefixKey, Instant)>,
    bytes: usize,
    clock: u64,
}

impl Kept {
    fn remove(&mut self, key: &PrefixKey) -> Option<KnownPrefix> {
        let (stamp, record) = self.records.remove(key)?;
        self.order.remove(&stamp);
        self.bytes -= record.bytes;
        Some(record)
    }
}

impl Default for ResentPrefixes {
    fn default() -> Self {
        ResentPrefixes::new(ResentPrefixes::DEFAULT_BOUND)
    }
}

impl ResentPrefixes {
    /// Bytes of request bodies whose messages are kept, over every session. The parsed
    /// messages take about as much memory as their JSON (more for many tiny messages): 128 MiB
    /// keeps some 30 sessions of a 1M-token window, or hundreds of smaller ones.
    pub const DEFAULT_BOUND: usize = 128 << 20;

    pub fn new(bound: usize) -> ResentPrefixes {
        ResentPrefixes {
            bound,
            inner: Mutex::new(Kept::default()),
        }
    }

    /// Whether the session's previous request was answered here and went upstream as its
    /// client sent it: then the next one most likely does too. A session that compacted
    /// sends its managed context instead, request after request.
    pub fn continues_as_sent(&self, key: &PrefixKey) -> bool {
        self.inner.lock().is_ok_and(|kept| {
            kept.records
                .get(key)
                .is_some_and(|(_, record)| record.forwarded_as_sent)
        })
    }

    /// Takes the session's record, if one is kept.
    pub fn take(&self, key: &PrefixKey) -> Option<KnownPrefix> {
        self.inner.lock().ok()?.remove(key)
    }

    /// Keeps `record` for the session's next request; returns what it displaced (for the
    /// caller to free off the request path).
    pub fn put(&self, key: PrefixKey, record: KnownPrefix) -> Vec<KnownPrefix> {
        let mut freed = Vec::new();
        if record.bytes > self.bound {
            freed.push(record);
            return freed;
        }
        let Ok(mut kept) = self.inner.lock() else {
            return freed;
        };
        freed.extend(kept.remove(&key));
        kept.clock += 1;
        let stamp = kept.clock;
        kept.bytes += record.bytes;
        kept.order.insert(stamp, (key.clone(), Instant::now()));
        kept.records.insert(key, (stamp, record));
        while kept.bytes > self.bound {
            let Some((_, (oldest, _))) = kept.order.pop_first() else {
                break;
            };
            if let Some((_, old)) = kept.records.remove(&oldest) {
                kept.bytes -= old.bytes;
                freed.push(old);
            }
        }
        freed
    }

    /// Takes out the records kept longer than `idle` before `now` (their sessions sent
    /// nothing since; a warm session idle that long is dropped too): the bound caps what
    /// the records hold under load, this returns it once the load is over. Returns them for
    /// the caller to free.
    pub fn take_idle(&self, idle: Duration, now: Instant) -> Vec<KnownPrefix> {
        let mut freed = Vec::new();
        let Ok(mut kept) = self.inner.lock() else {
            return freed;
        };
        // Kept in stamp order, so the times are ascending too: stop at the first fresh one.
        while let Some(entry) = kept.order.first_entry() {
            if now.saturating_duration_since(entry.get().1) < idle {
                break;
            }
            let (key, _) = entry.remove();
            if let Some((_, old)) = kept.records.remove(&key) {
                kept.bytes -= old.bytes;
                freed.push(old);
            }
        }
        freed
    }

    /// Bytes of the records kept now.
    pub fn kept_bytes(&self) -> usize {
        self.inner.lock().map_or(0, |kept| kept.bytes)
    }
}

#[cfg(test)]
mod tests;
