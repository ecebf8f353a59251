//! The resent prefix: agents send their whole history on every call, so most of a request's
//! bytes are, byte for byte, the messages of the session's previous request. Parsing and
//! fingerprinting those again is most of what a long conversation costs the gateway, so it
//! recognises them from their raw bytes first:
//!
//! 1. [`MessageSpans::scan`] finds the byte span of each element of the body's message array
//!    without building any JSON value (strings are skipped with `memchr`);
//! 2. each span is hashed (XXH3-128), and the hashes are compared with the ones kept for the
//!    session's previous request ([`ResentPrefixes`]);
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
        let mut scan = Scanner { body, at: 0 };
        scan.whitespace();
        scan.eat(b'{')?;
        let mut found = None;
        scan.whitespace();
        if scan.peek()? == b'}' {
            return None;
        }
        loop {
            scan.whitespace();
            let key = scan.string()?;
            let key = &body[key.start + 1..key.end - 1];
            if key.contains(&b'\\') {
                return None;
            }
            scan.whitespace();
            scan.eat(b':')?;
            scan.whitespace();
            if key == field {
                if found.is_some() {
                    return None;
                }
                found = Some(scan.array()?);
            } else {
                scan.value()?;
            }
            scan.whitespace();
            match scan.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
        found
    }

    /// The hash of each element's bytes.
    pub fn hashes(&self, body: &[u8]) -> Vec<u128> {
        self.elements
            .iter()
            .map(|span| xxhash_rust::xxh3::xxh3_128(&body[span.clone()]))
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

/// A cursor over JSON bytes that finds where values end without decoding them.
struct Scanner<'a> {
    body: &'a [u8],
    at: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.body.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    /// A string, from its opening quote; the span includes both quotes.
    fn string(&mut self) -> Option<Range<usize>> {
        let start = self.at;
        self.eat(b'"')?;
        loop {
            let offset = memchr::memchr2(b'"', b'\\', &self.body[self.at..])?;
            self.at += offset + 1;
            if self.body[self.at - 1] == b'"' {
                return Some(start..self.at);
            }
            // An escape: the next byte is escaped (`\"`, `\\`, `\u…`).
            self.next()?;
        }
    }

    /// Any value; returns its span.
    fn value(&mut self) -> Option<Range<usize>> {
        let start = self.at;
        match self.peek()? {
            b'"' => {
                self.string()?;
            }
            b'{' | b'[' => self.nested()?,
            _ => {
                while let Some(byte) = self.peek() {
                    if matches!(byte, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.at += 1;
                }
                if self.at == start {
                    return None;
                }
            }
        }
        Some(start..self.at)
    }

    /// An object or array, skipped by counting brackets outside strings.
    fn nested(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        self.at += 1;
                        return Some(());
                    }
                }
                _ => {}
            }
            self.at += 1;
        }
    }

    /// An array and the spans of its elements.
    fn array(&mut self) -> Option<MessageSpans> {
        let start = self.at;
        self.eat(b'[')?;
        let mut elements = Vec::new();
        self.whitespace();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(MessageSpans {
                array: start..self.at,
                elements,
            });
        }
        loop {
            self.whitespace();
            elements.push(self.value()?);
            self.whitespace();
            match self.next()? {
                b',' => continue,
                b']' => break,
                _ => return None,
            }
        }
        Some(MessageSpans {
            array: start..self.at,
            elements,
        })
    }
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
    /// Scans `body` for the `field` array and takes the session's kept record; `None` when the
    /// body does not scan ([`MessageSpans::scan`]).
    pub fn start(
        prefixes: &ResentPrefixes,
        key: PrefixKey,
        field: &[u8],
        body: &[u8],
    ) -> Option<Reading> {
        let spans = MessageSpans::scan(body, field)?;
        let hashes = spans.hashes(body);
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
    /// Bytes of request bodies whose messages are kept, over every session.
    pub const DEFAULT_BOUND: usize = 256 << 20;

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
