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
//! Only identical bytes are reused, and every element maps to one message on its own (Chat
//! Completions and Anthropic Messages), so the outcome is the full parse's. Anything unusual
//! (a key with escapes, a repeated `messages` key, a skeleton that fails to parse) takes the
//! full parse instead, which also gives the exact error.
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

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;

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

/// One request's body read for its resent prefix: its elements' hashes and, when the first of
/// them are the session's previous request's, that request's record.
#[derive(Debug)]
pub struct Reading {
    pub key: PrefixKey,
    spans: MessageSpans,
    hashes: Vec<u128>,
    /// The kept record and how many leading elements of this body it holds.
    known: Option<(usize, KnownPrefix)>,
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
    ) -> Option<Reading> {
        let (spans, hashes) = scanner.finish()?;
        let known = prefixes.take(&key).and_then(|record| {
            let common = record.common(&hashes);
            (common > 0).then_some((common, record))
        });
        Some(Reading {
            key,
            spans,
            hashes,
            known,
            spliced: None,
        })
    }

    /// The body without its known prefix, parsed; `None` when no prefix is known or that
    /// body is not JSON (the full body then gives the error).
    pub fn skeleton(&self, body: &[u8]) -> Option<serde_json::Value> {
        let (common, _) = self.known.as_ref()?;
        serde_json::from_slice(&self.spans.skeleton(body, *common)).ok()
    }

    /// Puts the known prefix's messages back in front of `messages`, parsed from the
    /// [`Self::skeleton`]; returns how many were put back, `None` when they do not line up
    /// (the body is then parsed in full).
    pub fn splice(&mut self, messages: &mut Vec<Message>) -> Option<usize> {
        let (common, record) = self.known.take()?;
        let new = self.hashes.len() - common;
        let lead = messages.len().checked_sub(new)?;
        let (prefix, fingerprints) = record.into_prefix(common);
        if prefix.len() != common {
            return None;
        }
        messages.splice(lead..lead, prefix);
        self.spliced = Some(Spliced { lead, fingerprints });
        Some(common)
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
        let lead = messages.len().checked_sub(self.hashes.len())?;
        (fingerprints.len() == messages.len()).then(|| KnownPrefix {
            element_hashes: self.hashes.clone(),
            lead,
            messages,
            fingerprints,
            bytes,
        })
    }
}

/// Which conversation a kept prefix belongs to: tenant, session id and endpoint (the same
/// bytes are different messages on another wire).
pub type PrefixKey = (String, String, &'static str);

/// What a request's messages were, kept for the session's next request.
#[derive(Debug)]
pub struct KnownPrefix {
    /// The hash of each element of the message array.
    pub element_hashes: Vec<u128>,
    /// Messages that come before the array's (the Anthropic top-level `system`).
    pub lead: usize,
    /// Every message of the request: `lead` ones, then one per element.
    pub messages: Vec<Message>,
    /// The fingerprint of each message.
    pub fingerprints: Vec<u128>,
    /// The body's size, what the record is counted as against the bound.
    pub bytes: usize,
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

    /// The messages and fingerprints of the first `elements` elements.
    pub fn into_prefix(mut self, elements: usize) -> (Vec<Message>, Vec<u128>) {
        let end = self.lead + elements;
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
    bytes: usize,
    clock: u64,
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

    /// Takes the session's record, if one is kept.
    pub fn take(&self, key: &PrefixKey) -> Option<KnownPrefix> {
        let mut kept = self.inner.lock().ok()?;
        let (_, record) = kept.records.remove(key)?;
        kept.bytes -= record.bytes;
        Some(record)
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
        kept.clock += 1;
        let stamp = kept.clock;
        kept.bytes += record.bytes;
        if let Some((_, old)) = kept.records.insert(key, (stamp, record)) {
            kept.bytes -= old.bytes;
            freed.push(old);
        }
        while kept.bytes > self.bound {
            let Some(oldest) = kept
                .records
                .iter()
                .min_by_key(|(_, (stamp, _))| *stamp)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some((_, old)) = kept.records.remove(&oldest) {
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
            lead: 0,
            messages: Vec::new(),
            fingerprints: Vec::new(),
            bytes: 0,
        };
        assert_eq!(record.common(&b), 1);
    }

    fn record(bytes: usize, lead: usize, elements: usize) -> KnownPrefix {
        KnownPrefix {
            element_hashes: (0..elements as u128).collect(),
            lead,
            messages: (0..lead + elements)
                .map(|i| Message::user(format!("m{i}")))
                .collect(),
            fingerprints: (0..(lead + elements) as u128).collect(),
            bytes,
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
}
