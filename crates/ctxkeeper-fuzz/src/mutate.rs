//! The stable runner's mutations: byte edits, splices, dictionary tokens, and edits of the
//! JSON structure (a value replaced, an array element duplicated, a key dropped, a subtree
//! grafted from another input) for the targets that read JSON or JSON Lines.
//!
//! Everything is driven by [`Rng`], a small seeded generator: the same seed and corpus give
//! the same inputs, so a run can be repeated.

use serde_json::{Map, Value};

use crate::session::FRAGMENTS;

/// SplitMix64: tiny, fast, and good enough to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len()))
    }
}

/// Bytes worth writing over another: boundaries, JSON punctuation, line breaks.
const INTERESTING: [u8; 16] = [
    0, 0xFF, 0x7F, 0x80, b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'\n', b'\r', b'#', b'`',
];

/// Strings a JSON-aware mutation puts in place of a value.
const STRINGS: [&str; 10] = [
    "",
    " ",
    "user",
    "assistant",
    "tool",
    "{}",
    "{\"command\":\"ls\"}",
    "\u{0}",
    "é\u{2028}𝄞",
    "\u{1}ref:0\u{1}",
];

/// Mutates `input` in place: one to four edits stacked. `other` is another corpus input to
/// splice from; `dictionary` the target's tokens; `json` whether structure-aware edits apply.
pub fn mutate(
    rng: &mut Rng,
    input: &mut Vec<u8>,
    other: &[u8],
    dictionary: &[&[u8]],
    json: bool,
    max_len: usize,
) {
    let edits = 1 + rng.below(4);
    for _ in 0..edits {
        if json && rng.one_in(2) && mutate_json(rng, input, other, dictionary) {
            continue;
        }
        mutate_bytes(rng, input, other, dictionary);
    }
    input.truncate(max_len);
}

/// One byte-level edit.
pub fn mutate_bytes(rng: &mut Rng, input: &mut Vec<u8>, other: &[u8], dictionary: &[&[u8]]) {
    let len = input.len();
    match rng.below(10) {
        0 if len > 0 => {
            let at = rng.below(len);
            input[at] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let at = rng.below(len);
            input[at] = INTERESTING[rng.below(INTERESTING.len())];
        }
        2 => {
            let at = rng.below(len + 1);
            let byte = rng.next_u64() as u8;
            input.insert(at, byte);
        }
        3 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            input.drain(at..at + n);
        }
        4 if len > 0 => {
            // Copy a range of the input somewhere else in it.
            let from = rng.below(len);
            let n = 1 + rng.below((len - from).min(256));
            let piece = input[from..from + n].to_vec();
            let at = rng.below(len + 1);
            input.splice(at..at, piece);
        }
        5 if !other.is_empty() => {
            // Splice: a head of this input, a tail of the other.
            let cut = rng.below(len + 1);
            let from = rng.below(other.len());
            input.truncate(cut);
            input.extend_from_slice(&other[from..]);
        }
        6 if !other.is_empty() => {
            let from = rng.below(other.len());
            let n = 1 + rng.below((other.len() - from).min(512));
            let at = rng.below(len + 1);
            input.splice(at..at, other[from..from + n].iter().copied());
        }
        7 if len > 0 => {
            input.truncate(rng.below(len));
        }
        _ => {
            if let Some(token) = rng.pick(dictionary) {
                let at = rng.below(len + 1);
                input.splice(at..at, token.iter().copied());
            }
        }
    }
}

/// One edit of the JSON structure, on the whole input or, for JSON Lines, on one line (or
/// the lines themselves). False when the input is not JSON.
pub fn mutate_json(rng: &mut Rng, input: &mut Vec<u8>, other: &[u8], dictionary: &[&[u8]]) -> bool {
    let donor = parse_any(other);
    if let Ok(mut value) = serde_json::from_slice::<Value>(input) {
        edit_value(rng, &mut value, donor.as_ref(), dictionary);
        *input = serde_json::to_vec(&value).expect("a JSON value serializes");
        return true;
    }
    let Ok(text) = std::str::from_utf8(input) else {
        return false;
    };
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let parsed: Vec<usize> = (0..lines.len())
        .filter(|&i| serde_json::from_str::<Value>(&lines[i]).is_ok())
        .collect();
    if parsed.is_empty() {
        return false;
    }
    match rng.below(5) {
        0 => {
            let at = parsed[rng.below(parsed.len())];
            let line = lines[at].clone();
            lines.insert(rng.below(lines.len() + 1), line);
        }
        1 if lines.len() > 1 => {
            lines.remove(rng.below(lines.len()));
        }
        2 if lines.len() > 1 => {
            let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
            lines.swap(a, b);
        }
        _ => {
            let at = parsed[rng.below(parsed.len())];
            let mut value: Value =
                serde_json::from_str(&lines[at]).expect("the line parsed a moment ago");
            edit_value(rng, &mut value, donor.as_ref(), dictionary);
            lines[at] = serde_json::to_string(&value).expect("a JSON value serializes");
        }
    }
    *input = lines.join("\n").into_bytes();
    true
}

/// The input as JSON, or its first JSON line.
fn parse_any(bytes: &[u8]) -> Option<Value> {
    serde_json::from_slice(bytes).ok().or_else(|| {
        std::str::from_utf8(bytes)
            .ok()?
            .lines()
            .find_map(|line| serde_json::from_str(line).ok())
    })
}

/// Every node of `value` in pre-order, `value` first: the order [`nth_node_mut`] counts in.
fn nodes(value: &Value) -> impl Iterator<Item = &Value> {
    let mut stack = vec![value];
    std::iter::from_fn(move || {
        let node = stack.pop()?;
        match node {
            Value::Array(items) => stack.extend(items.iter().rev()),
            Value::Object(map) => stack.extend(map.values().rev()),
            _ => {}
        }
        Some(node)
    })
}

/// The `n`th node in pre-order.
fn nth_node_mut<'a>(value: &'a mut Value, n: &mut usize) -> Option<&'a mut Value> {
    if *n == 0 {
        return Some(value);
    }
    *n -= 1;
    match value {
        Value::Array(items) => items.iter_mut().find_map(|item| nth_node_mut(item, n)),
        Value::Object(map) => map.values_mut().find_map(|item| nth_node_mut(item, n)),
        _ => None,
    }
}

/// A random node of `value`, cloned.
fn random_node(rng: &mut Rng, value: &Value) -> Value {
    let n = rng.below(nodes(value).count());
    nodes(value).nth(n).cloned().unwrap_or(Value::Null)
}

/// A key of the dictionary (its tokens that look like `"key":`), or a made-up one.
fn random_key(rng: &mut Rng, dictionary: &[&[u8]]) -> String {
    let keys: Vec<&str> = dictionary
        .iter()
        .filter_map(|t| std::str::from_utf8(t).ok())
        .filter_map(|t| t.strip_prefix('"')?.split_once("\":").map(|(k, _)| k))
        .collect();
    rng.pick(&keys)
        .map_or_else(|| "x".to_string(), |k| (*k).to_string())
}

fn random_scalar(rng: &mut Rng) -> Value {
    match rng.below(9) {
        0 => Value::Null,
        1 => Value::Bool(rng.one_in(2)),
        2 => Value::from(rng.next_u64() as i64),
        3 => Value::from(-1),
        4 => Value::from(0.5),
        5 => Value::Array(Vec::new()),
        6 => Value::Object(Map::new()),
        7 => Value::from(FRAGMENTS[rng.below(FRAGMENTS.len())]),
        _ => Value::from(STRINGS[rng.below(STRINGS.len())]),
    }
}

/// One structural edit at a random node.
fn edit_value(rng: &mut Rng, root: &mut Value, donor: Option<&Value>, dictionary: &[&[u8]]) {
    let graft = match donor {
        Some(donor) if rng.one_in(2) => random_node(rng, donor),
        _ => random_node(rng, root),
    };
    let mut n = rng.below(nodes(root).count());
    let Some(node) = nth_node_mut(root, &mut n) else {
        return;
    };
    match (rng.below(6), node) {
        (0, node) => *node = random_scalar(rng),
        (1, node) => *node = graft,
        (2, Value::Array(items)) if !items.is_empty() => {
            let at = rng.below(items.len());
            if rng.one_in(2) {
                let copy = items[at].clone();
                items.insert(at, copy);
            } else {
                items.remove(at);
            }
        }
        (2, Value::Array(items)) => items.push(graft),
        (3, Value::Object(map)) if !map.is_empty() && rng.one_in(2) => {
            let at = rng.below(map.len());
            if let Some(key) = map.keys().nth(at).cloned() {
                map.shift_remove(&key);
            }
        }
        (3, Value::Object(map)) => {
            let value = if rng.one_in(2) {
                graft
            } else {
                random_scalar(rng)
            };
            map.insert(random_key(rng, dictionary), value);
        }
        (4, Value::String(text)) => {
            let bounds: Vec<usize> = text
                .char_indices()
                .map(|(i, _)| i)
                .chain([text.len()])
                .collect();
            let at = bounds[rng.below(bounds.len())];
            if rng.one_in(3) {
                text.truncate(at);
            } else {
                text.insert_str(at, FRAGMENTS[rng.below(FRAGMENTS.len())]);
            }
        }
        (_, node) => {
            // Wrap the value: where a string was, an array of it, or an object holding it.
            let inner = std::mem::take(node);
            *node = if rng.one_in(2) {
                Value::Array(vec![inner])
            } else {
                let mut map = Map::new();
                map.insert(random_key(rng, dictionary), inner);
                Value::Object(map)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_makes_the_same_inputs() {
        let seed_input = br#"{"messages":[{"role":"user","content":"hi"}]}"#.to_vec();
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..50)
                .map(|_| {
                    let mut input = seed_input.clone();
                    mutate(&mut rng, &mut input, b"[1,2]", &[b"\"role\":"], true, 4096);
                    input
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn json_edits_keep_the_input_json() {
        let mut rng = Rng::new(1);
        for _ in 0..500 {
            let mut input = br#"{"a":[1,{"b":"text"}],"c":null}"#.to_vec();
            assert!(mutate_json(
                &mut rng,
                &mut input,
                b"{\"d\":[true]}",
                &[b"\"k\":"]
            ));
            serde_json::from_slice::<Value>(&input).expect("still JSON");
        }
    }

    #[test]
    fn json_lines_edits_touch_lines() {
        let mut rng = Rng::new(3);
        let mut input = b"{\"a\":1}\n{\"b\":2}".to_vec();
        assert!(mutate_json(&mut rng, &mut input, b"", &[]));
        assert!(!mutate_json(&mut rng, &mut b"not json".to_vec(), b"", &[]));
    }
}
