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
mod tests {
    use super::*;
    use ctxkeeper_core::formats::Wire;
    use serde_json::{Value, json};

    fn spans_of(body: &str) -> Option<MessageSpans> {
        MessageSpans::scan(body.as_bytes(), b"messages")
    }

    /// Each element's span, parsed, is the element serde_json finds.
    fn elements_agree(body: &str) {
        let spans = spans_of(body).unwrap_or_else(|| panic!("no spans in {body}"));
        let value: Value = serde_json::from_str(body).unwrap();
        let expected = value["messages"].as_array().unwrap();
        assert_eq!(spans.elements.len(), expected.len(), "{body}");
        for (span, element) in spans.elements.iter().zip(expected) {
            let parsed: Value = serde_json::from_slice(&body.as_bytes()[span.clone()]).unwrap();
            assert_eq!(&parsed, element);
        }
    }

    #[test]
    fn elements_are_found_through_strings_escapes_and_nesting() {
        elements_agree(r#"{"messages":[]}"#);
        elements_agree(r#" { "model" : "m" , "messages" : [ 1 , "two" , null , true ] } "#);
        elements_agree(
            r#"{"tools":[{"a":"]}"}],"messages":[{"role":"user","content":"say \"hi\" \\ [{"},{"role":"assistant","content":[{"type":"text","text":"}]"}],"x":{"y":[1,2,{"z":"\\"}]}}],"n":-1.5e3}"#,
        );
        elements_agree(
            &json!({"messages": [{"role": "user", "content": "é ☃ \u{1F600} \n\t"}]}).to_string(),
        );
    }

    #[test]
    fn unusual_bodies_are_left_to_the_full_parse() {
        // Not an object, no array, the key twice, an escaped key, broken separators.
        for body in [
            r#"[1]"#,
            r#"{}"#,
            r#"{"model":"m"}"#,
            r#"{"messages":{"role":"user"}}"#,
            r#"{"messages":[],"messages":[]}"#,
            r#"{"mess\u0061ges":[1],"messages":[2]}"#,
            r#"{"messages":[1 2]}"#,
            r#"{"messages":[1,]"#,
            r#"{"messages":["unterminated]}"#,
            r#"{"messages":[{"a":1}}]}"#,
        ] {
            assert_eq!(spans_of(body), None, "{body}");
        }
    }

    /// Fed in pieces of any size, the scanner finds what it finds in the whole body.
    fn pieces_agree(body: &str) {
        let body = body.as_bytes();
        let whole = {
            let mut scanner = ElementScanner::new(b"messages");
            scanner.feed(body);
            scanner.finish()
        };
        for piece in [1, 2, 3, 5, 7, 16, 64] {
            let mut scanner = ElementScanner::new(b"messages");
            let mut end = 0;
            while end < body.len() {
                end = (end + piece).min(body.len());
                scanner.feed(&body[..end]);
            }
            assert_eq!(
                scanner.finish(),
                whole,
                "pieces of {piece} bytes of {}",
                String::from_utf8_lossy(body)
            );
        }
        if let Some((spans, hashes)) = whole {
            assert_eq!(spans.hashes(body), hashes);
        }
    }

    #[test]
    fn a_body_fed_in_pieces_scans_as_the_whole_body() {
        let bodies = [
            r#"{"messages":[]}"#.to_string(),
            r#" { "model" : "m" , "messages" : [ 1 , "two" , null , true, -1.5e3 ] , "n": 12345 } "#
                .to_string(),
            r#"{"tools":[{"a":"]}"}],"messages":[{"role":"user","content":"say \"hi\" \\ [{"},{"role":"assistant","content":[{"type":"text","text":"}]"}],"x":{"y":[1,2,{"z":"\\"}]}}],"n":-1.5e3}"#
                .to_string(),
            json!({"messages": [{"role": "user", "content": "é ☃ \u{1F600} \n\t \"q\""}], "stream": true})
                .to_string(),
            // Left to the full parse, in pieces as whole.
            r#"{"messages":[],"messages":[]}"#.to_string(),
            r#"{"mess\u0061ges":[1],"messages":[2]}"#.to_string(),
            r#"{"messages":[1 2]}"#.to_string(),
            r#"{"messages":[1,]}"#.to_string(),
            r#"{"messages":["unterminated]}"#.to_string(),
            r#"{"model":"m"}"#.to_string(),
        ];
        for body in &bodies {
            pieces_agree(body);
        }
    }

    /// The messages the gateway reads from `new` after `old`: the reused prefix from `old`'s
    /// record, the rest parsed from the skeleton; and how many were reused.
    fn read_after(
        wire: Wire,
        grouping: Grouping,
        old: &Value,
        new: &Value,
    ) -> (Vec<Message>, usize) {
        let field: &[u8] = if wire == Wire::Responses {
            b"input"
        } else {
            b"messages"
        };
        let prefixes = ResentPrefixes::default();
        let key: PrefixKey = ("tenant".into(), "session".into(), "test");
        let scan = |body: &[u8]| {
            let mut scanner = ElementScanner::new(field);
            scanner.feed(body);
            scanner
        };
        let old_bytes = old.to_string().into_bytes();
        let reading = Reading::start(&prefixes, key.clone(), scan(&old_bytes), grouping).unwrap();
        let messages = wire.parse_request_owned(old.clone()).unwrap().messages;
        let fingerprints = (0..messages.len() as u128).collect();
        let record = reading
            .record(messages, fingerprints, old_bytes.len())
            .unwrap();
        prefixes.put(key.clone(), record);
        let new_bytes = new.to_string().into_bytes();
        let mut reading = Reading::start(&prefixes, key, scan(&new_bytes), grouping).unwrap();
        match reading.skeleton(&new_bytes) {
            Some(skeleton) => {
                let mut request = wire.parse_request_owned(skeleton).unwrap();
                let reused = reading.splice(&mut request.messages).unwrap();
                (request.messages, reused)
            }
            None => (wire.parse_request_owned(new.clone()).unwrap().messages, 0),
        }
    }

    fn responses(input: &[Value]) -> Value {
        json!({"model": "m", "instructions": "Be brief.", "input": input})
    }

    #[test]
    fn responses_items_are_reused_only_where_the_messages_they_form_are_the_same() {
        let user = |text: &str| json!({"role": "user", "content": text});
        let said = |text: &str| {
            json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]})
        };
        let reasoning =
            |n: usize| json!({"type": "reasoning", "id": format!("rs_{n}"), "summary": []});
        let call = |n: usize| {
            json!({"type": "function_call", "call_id": format!("c{n}"),
            "name": "ls", "arguments": "{}"})
        };
        let output = |n: usize| json!({"type": "function_call_output", "call_id": format!("c{n}"), "output": "a.rs"});
        let base = vec![user("list the files"), reasoning(1), call(1), output(1)];
        let cases: Vec<(&str, Vec<Value>, Vec<Value>)> = vec![
            (
                "a round appended",
                base.clone(),
                [base.clone(), vec![reasoning(2), call(2), output(2)]].concat(),
            ),
            // The new call joins the assistant message the old history ended on.
            (
                "a call after a closing assistant message",
                [base.clone(), vec![said("checking")]].concat(),
                [base.clone(), vec![said("checking"), call(2), output(2)]].concat(),
            ),
            // The new item differs where a user message was, and joins the message before.
            (
                "a call where a user message was",
                [base.clone(), vec![said("done"), user("thanks")]].concat(),
                [base.clone(), vec![said("done"), call(3), output(3)]].concat(),
            ),
            ("the same history again", base.clone(), base.clone()),
        ];
        for (name, old, new) in cases {
            let (read, reused) = read_after(
                Wire::Responses,
                Grouping::ResponsesItems,
                &responses(&old),
                &responses(&new),
            );
            let full = Wire::Responses
                .parse_request_owned(responses(&new))
                .unwrap()
                .messages;
            assert_eq!(read, full, "{name}");
            assert!(reused > 0, "{name}: something was reused");
        }
    }

    #[test]
    fn chat_messages_are_reused_up_to_the_first_edit() {
        let old = json!({"messages": [{"role": "system", "content": "s"},
            {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]});
        let new = json!({"messages": [{"role": "system", "content": "s"},
            {"role": "user", "content": "a"}, {"role": "assistant", "content": "B"},
            {"role": "user", "content": "c"}]});
        let (read, reused) = read_after(Wire::OpenAiChat, Grouping::OnePerElement, &old, &new);
        assert_eq!(
            read,
            Wire::OpenAiChat.parse_request_owned(new).unwrap().messages
        );
        assert_eq!(reused, 2);
    }

    #[test]
    fn the_skeleton_parses_to_the_body_without_the_prefix() {
        let body = json!({
            "model": "m",
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "stream": true
        })
        .to_string();
        let spans = spans_of(&body).unwrap();
        for from in 0..=3 {
            let skeleton: Value =
                serde_json::from_slice(&spans.skeleton(body.as_bytes(), from)).unwrap();
            let mut expected: Value = serde_json::from_str(&body).unwrap();
            let messages = expected["messages"].as_array_mut().unwrap();
            messages.drain(..from);
            assert_eq!(skeleton, expected, "from {from}");
        }
    }

    #[test]
    fn hashes_tell_an_edited_element_from_a_resent_one() {
        let first =
            r#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}"#;
        let second = r#"{"messages":[{"role":"user","content":"a"}, {"role":"assistant","content":"B"},{"role":"user","content":"c"}]}"#;
        let a = spans_of(first).unwrap().hashes(first.as_bytes());
        let b = spans_of(second).unwrap().hashes(second.as_bytes());
        let record = KnownPrefix {
            element_hashes: a,
            cuts: vec![Some(0), Some(1), Some(2)],
            lead: 0,
            messages: Vec::new(),
            fingerprints: Vec::new(),
            bytes: 0,
            forwarded_as_sent: false,
        };
        assert_eq!(record.common(&b), 1);
    }

    fn record(bytes: usize, lead: usize, elements: usize) -> KnownPrefix {
        KnownPrefix {
            element_hashes: (0..elements as u128).collect(),
            cuts: (0..=elements).map(Some).collect(),
            lead,
            messages: (0..lead + elements)
                .map(|i| Message::user(format!("m{i}")))
                .collect(),
            fingerprints: (0..(lead + elements) as u128).collect(),
            bytes,
            forwarded_as_sent: false,
        }
    }

    #[test]
    fn a_prefix_drops_the_lead_and_what_follows() {
        let (messages, fingerprints) = record(0, 1, 4).into_prefix(2);
        assert_eq!(messages, vec![Message::user("m1"), Message::user("m2")]);
        assert_eq!(fingerprints, vec![1, 2]);
    }

    #[test]
    fn the_bound_evicts_the_least_recently_kept() {
        let prefixes = ResentPrefixes::new(100);
        let key = |s: &str| (String::from("t"), s.to_string(), "chat");
        assert!(prefixes.put(key("a"), record(40, 0, 1)).is_empty());
        assert!(prefixes.put(key("b"), record(40, 0, 1)).is_empty());
        // Taking and putting back makes `a` the most recent.
        let a = prefixes.take(&key("a")).unwrap();
        assert!(prefixes.put(key("a"), a).is_empty());
        let freed = prefixes.put(key("c"), record(40, 0, 1));
        assert_eq!(freed.len(), 1);
        assert!(prefixes.take(&key("b")).is_none(), "b was the oldest");
        assert!(prefixes.take(&key("a")).is_some());
        assert_eq!(prefixes.kept_bytes(), 40);
        // A record over the whole bound is not kept.
        assert_eq!(prefixes.put(key("d"), record(101, 0, 1)).len(), 1);
        assert!(prefixes.take(&key("d")).is_none());
    }

    #[test]
    fn records_idle_past_the_session_idle_time_are_taken_out() {
        let prefixes = ResentPrefixes::new(1000);
        let key = |s: &str| (String::from("t"), s.to_string(), "chat");
        prefixes.put(key("old"), record(40, 0, 1));
        std::thread::sleep(Duration::from_millis(30));
        let between = Instant::now();
        prefixes.put(key("new"), record(30, 0, 1));
        let idle = Duration::from_millis(20);
        // Nothing is idle yet as of when the first was kept.
        assert!(prefixes.take_idle(idle, between - idle).is_empty());
        let freed = prefixes.take_idle(idle, between + Duration::from_millis(10));
        assert_eq!(freed.iter().map(|r| r.bytes).collect::<Vec<_>>(), vec![40]);
        assert_eq!(prefixes.kept_bytes(), 30);
        assert!(prefixes.take(&key("old")).is_none());
        // Put back, a record counts as kept anew.
        let new = prefixes.take(&key("new")).unwrap();
        prefixes.put(key("new"), new);
        assert!(prefixes.take_idle(idle, Instant::now()).is_empty());
        assert_eq!(prefixes.take_idle(idle, Instant::now() + idle).len(), 1);
        assert_eq!(prefixes.kept_bytes(), 0);
    }
}
