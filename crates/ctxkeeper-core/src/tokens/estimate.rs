//! A fast, CJK-aware token estimate for models whose tokenizer is not public.
//!
//! The estimate approximates an `o200k_base` count from a single pass over the text's bytes;
//! [`estimate`] multiplies it by a per-model `ratio` (a Claude tokenizer, for example, yields
//! more tokens than o200k for the same text). It never allocates, and runs at about 240 MB/s on
//! the shared traces, ten times the exact o200k count (`bench/token-counting.md`); an ASCII
//! text of 32 bytes or more is counted 64 bytes at a time, about twice as fast again, to the
//! same tally.
//!
//! # How it counts
//!
//! | what | tokens |
//! | --- | --- |
//! | an ASCII word piece: a run of letters, split where a lowercase letter is followed by an uppercase one (as the o200k pre-tokenizer splits `camelCase`) | 0.8 |
//! | a group of up to three ASCII digits (o200k never merges more than three) | 1.6 |
//! | an ASCII punctuation or symbol character | 0.6 |
//! | a run of ASCII whitespace | 0.25 |
//! | a newline (on top of its whitespace run) | 0.8 |
//! | a byte of a base64-like run: ≥ 64 bytes of upper- and lowercase letters and digits (and `+ / = - _`), instead of the rows above | 0.67 |
//! | a CJK character: Han ideograph, kana, hangul, CJK punctuation, full-width form | 0.8 |
//! | a Cyrillic character | 0.25 |
//! | another character of 2 UTF-8 bytes (Latin accents, Greek, Hebrew, Arabic, …) | 0.4 |
//! | another character of 3 UTF-8 bytes (Indic, Thai, symbols, …) | 0.5 |
//! | another character of 4 UTF-8 bytes (emoji, mathematical letters, …) | 1.5 |
//!
//! The result is rounded up, and a non-empty text is at least one token.
//!
//! # Calibration and error
//!
//! The ASCII weights are a least-squares fit against exact `o200k_base` counts of every string
//! value of the shared traces (37,769 strings, 6.1 MB: tau-bench, SWE-agent, OpenHands, Claude
//! Code and Codex logs; mostly English prose, JSON, shell output and code), the base64 weight a
//! fit on the 104 encrypted reasoning blobs among them (0.42 MB, 1.48 bytes per token).
//! Measured error against o200k, 2026-11-22:
//!
//! - readable text (blobs left out): −0.5 % over the whole corpus, between −1.3 % and +6.0 %
//!   per trace file; per string of at least 200 bytes: median +0.2 %, 5th percentile −8.8 %,
//!   95th +10.4 %;
//! - the base64 blobs: −0.9 % (5th / 95th percentile −2.2 % / +0.5 %);
//! - the plain "4 bytes per token" rule, for comparison: −6 % on readable text, −33 % / +33 %
//!   at the 5th / 95th percentile, and −63 % on the blobs.
//!
//! The non-ASCII weights come from short texts (measured o200k tokens per character: Chinese
//! 0.63, Japanese 0.79, Korean 0.71, Russian 0.24, Greek 0.42, Arabic 0.35, Hebrew 0.33, Hindi
//! 0.31, Thai 0.36, emoji 1.5) and round up, because older and non-OpenAI tokenizers split these
//! scripts into more tokens (cl100k: about 1.1 per CJK character). Expect ±30 % on such text;
//! the provider-reported usage corrects the rest (see [`super::Calibration`]).
//!
//! ```
//! use ctxkeeper_core::tokens::estimate::{estimate, estimate_o200k};
//!
//! assert_eq!(estimate_o200k(""), 0.0);
//! let english = estimate_o200k("The quick brown fox jumps over the lazy dog.");
//! assert!((8.0..=12.0).contains(&english)); // o200k: 10
//! let chinese = estimate_o200k("人工智能正在改变我们的生活方式。");
//! assert!((10.0..=16.0).contains(&chinese)); // o200k: 8, cl100k: 14
//! // A model whose tokenizer yields ~20 % more tokens than o200k:
//! assert_eq!(estimate("The quick brown fox jumps over the lazy dog.", 1.2), (english * 1.2).ceil() as u32);
//! ```

/// Tokens per ASCII word piece.
pub const WORD_PIECE: f64 = 0.8;
/// Tokens per group of up to three ASCII digits.
pub const DIGIT_GROUP: f64 = 1.6;
/// Tokens per ASCII punctuation or symbol character.
pub const PUNCTUATION: f64 = 0.6;
/// Tokens per run of ASCII whitespace.
pub const WHITESPACE_RUN: f64 = 0.25;
/// Tokens per newline, on top of its whitespace run.
pub const NEWLINE: f64 = 0.8;
/// Tokens per byte of a base64-like run: at least [`DENSE_MIN_BYTES`] of letters of both
/// cases and digits (with `+ / = - _`), as in base64 data, keys and hashes.
pub const DENSE_BYTE: f64 = 0.67;
/// The shortest run counted per byte with [`DENSE_BYTE`].
pub const DENSE_MIN_BYTES: u64 = 64;
/// Tokens per CJK character (Han, kana, hangul, CJK punctuation, full-width forms).
pub const CJK_CHAR: f64 = 0.8;
/// Tokens per Cyrillic character (U+0400–U+04FF).
pub const CYRILLIC_CHAR: f64 = 0.25;
/// Tokens per other 2-byte character (Latin accents, Greek, Hebrew, Arabic, …).
pub const OTHER_2_BYTE_CHAR: f64 = 0.4;
/// Tokens per other 3-byte character (Indic scripts, Thai, symbols, …).
pub const OTHER_3_BYTE_CHAR: f64 = 0.5;
/// Tokens per 4-byte character (emoji, mathematical alphanumerics, …).
pub const OTHER_4_BYTE_CHAR: f64 = 1.5;

/// The estimated token count of `text` for a model whose tokenizer yields `ratio` times as many
/// tokens as `o200k_base`, rounded up; at least 1 for a non-empty text. A `ratio` that is not a
/// positive finite number counts as 1.
pub fn estimate(text: &str, ratio: f64) -> u32 {
    if text.is_empty() {
        return 0;
    }
    let ratio = if ratio.is_finite() && ratio > 0.0 {
        ratio
    } else {
        1.0
    };
    let tokens = (estimate_o200k(text) * ratio).ceil();
    // `as` saturates for floats; a non-empty text is at least one token.
    (tokens as u32).max(1)
}

/// The estimated `o200k_base` token count of `text`, unrounded.
pub fn estimate_o200k(text: &str) -> f64 {
    let tally = Tally::of(text);
    tally.word_pieces as f64 * WORD_PIECE
        + tally.digit_groups as f64 * DIGIT_GROUP
        + tally.punctuation as f64 * PUNCTUATION
        + tally.whitespace_runs as f64 * WHITESPACE_RUN
        + tally.newlines as f64 * NEWLINE
        + tally.dense_bytes as f64 * DENSE_BYTE
        + tally.cjk as f64 * CJK_CHAR
        + tally.cyrillic as f64 * CYRILLIC_CHAR
        + tally.other_2 as f64 * OTHER_2_BYTE_CHAR
        + tally.other_3 as f64 * OTHER_3_BYTE_CHAR
        + tally.other_4 as f64 * OTHER_4_BYTE_CHAR
}

/// What the estimate counts in a text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tally {
    word_pieces: u64,
    digit_groups: u64,
    punctuation: u64,
    whitespace_runs: u64,
    newlines: u64,
    /// Bytes of base64-like runs, counted per byte instead of by pieces.
    dense_bytes: u64,
    cjk: u64,
    cyrillic: u64,
    other_2: u64,
    other_3: u64,
    other_4: u64,
}

/// The class of the previous byte, for run detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prev {
    Lower,
    Upper,
    Digit,
    Space,
    Other,
}

/// A maximal run of base64-alphabet bytes (`A–Z a–z 0–9 + / = - _`) being scanned. Its pieces
/// are only added to the tally when the run ends, so that a long run of mixed-case letters and
/// digits — base64, a key, a hash — can be counted per byte instead: o200k splits such text
/// into far more tokens than its word pieces suggest (1.5 bytes per token on the traces'
/// encrypted blobs).
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    bytes: u64,
    word_pieces: u64,
    digit_groups: u64,
    punctuation: u64,
    upper: bool,
    lower: bool,
    digit: bool,
}

impl Run {
    /// Long and mixed enough to be counted per byte ([`DENSE_BYTE`]) instead of by its pieces.
    fn is_dense(&self) -> bool {
        self.bytes >= DENSE_MIN_BYTES && self.upper && self.lower && self.digit
    }

    fn flush(&mut self, tally: &mut Tally) {
        if self.is_dense() {
            tally.dense_bytes += self.bytes;
        } else {
            tally.word_pieces += self.word_pieces;
            tally.digit_groups += self.digit_groups;
            tally.punctuation += self.punctuation;
        }
        *self = Run::default();
    }
}

impl Tally {
    fn of(text: &str) -> Tally {
        if text.len() >= BLOCK_MIN && text.is_ascii() {
            return Tally::of_ascii(text.as_bytes());
        }
        Tally::of_scalar(text)
    }

    /// The byte-at-a-time count: any text.
    fn of_scalar(text: &str) -> Tally {
        let bytes = text.as_bytes();
        let mut tally = Tally::default();
        let mut run = Run::default();
        let mut prev = Prev::Other;
        let mut digit_run: u64 = 0;
        let mut i = 0;
        while let Some(&byte) = bytes.get(i) {
            if byte.is_ascii_digit() {
                digit_run += 1;
            } else if digit_run > 0 {
                run.digit_groups += digit_run.div_ceil(3);
                digit_run = 0;
            }
            let in_run =
                byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'/' | b'=' | b'-' | b'_');
            if in_run {
                run.bytes += 1;
            } else {
                run.flush(&mut tally);
            }
            if byte < 0x80 {
                prev = match byte {
                    // The bytes that follow one of the same class change nothing but the
                    // lengths of the runs: they are skipped in one go.
                    b'a'..=b'z' => {
                        if !matches!(prev, Prev::Lower | Prev::Upper) {
                            run.word_pieces += 1;
                        }
                        run.lower = true;
                        let more = stretch(bytes, i, |b| b.is_ascii_lowercase());
                        run.bytes += more as u64;
                        i += more;
                        Prev::Lower
                    }
                    b'A'..=b'Z' => {
                        if !matches!(prev, Prev::Upper) {
                            run.word_pieces += 1;
                        }
                        run.upper = true;
                        let more = stretch(bytes, i, |b| b.is_ascii_uppercase());
                        run.bytes += more as u64;
                        i += more;
                        Prev::Upper
                    }
                    b'0'..=b'9' => {
                        run.digit = true;
                        let more = stretch(bytes, i, |b| b.is_ascii_digit());
                        run.bytes += more as u64;
                        digit_run += more as u64;
                        i += more;
                        Prev::Digit
                    }
                    b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => {
                        if prev != Prev::Space {
                            tally.whitespace_runs += 1;
                        }
                        let more = stretch(bytes, i, |b| {
                            matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
                        });
                        let newlines = bytes[i..=i + more].iter().filter(|b| **b == b'\n');
                        tally.newlines += newlines.count() as u64;
                        i += more;
                        Prev::Space
                    }
                    _ if in_run => {
                        run.punctuation += 1;
                        Prev::Other
                    }
                    _ => {
                        tally.punctuation += 1;
                        Prev::Other
                    }
                };
                i += 1;
                continue;
            }
            // A UTF-8 lead byte (the input is a `str`, so it is valid UTF-8).
            let width = match byte {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            let code = decode(bytes, i, width);
            if is_cjk(code) {
                tally.cjk += 1;
            } else if (0x0400..=0x04FF).contains(&code) {
                tally.cyrillic += 1;
            } else {
                match width {
                    2 => tally.other_2 += 1,
                    3 => tally.other_3 += 1,
                    _ => tally.other_4 += 1,
                }
            }
            prev = Prev::Other;
            i += width;
        }
        if digit_run > 0 {
            run.digit_groups += digit_run.div_ceil(3);
        }
        run.flush(&mut tally);
        tally
    }
}

/// Texts shorter than this are counted byte by byte (a block's setup costs more).
const BLOCK_MIN: usize = 32;

/// One in every byte of a word.
const ONES: u64 = 0x0101_0101_0101_0101;
/// The high bit of every byte of a word.
const HIGH: u64 = ONES * 0x80;
/// The low seven bits of every byte of a word.
const LOW7: u64 = ONES * 0x7F;

/// The high bit of every byte of `word` (ASCII bytes only) that is at least `low`
/// (`1 ..= 0x80`): a byte and `0x80 - low` add up to at most `0xFF`, so nothing carries.
fn at_least(word: u64, low: u8) -> u64 {
    word.wrapping_add(ONES * u64::from(0x80 - low)) & HIGH
}

/// The high bit of every byte of `word` (ASCII bytes only) in `low ..= high`.
fn within(word: u64, low: u8, high: u8) -> u64 {
    at_least(word, low) & !at_least(word, high + 1)
}

/// The high bit of every byte of `word` equal to `byte` (exact: nothing carries between bytes).
fn equal(word: u64, byte: u8) -> u64 {
    let diff = word ^ (ONES * u64::from(byte));
    !(((diff & LOW7).wrapping_add(LOW7)) | diff) & HIGH
}

/// The high bits of a word's bytes gathered into its low eight bits (byte `i` to bit `i`):
/// each product term lands on its own bit, so nothing carries into the top byte.
fn gather(high_bits: u64) -> u64 {
    (high_bits >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56
}

/// Which bytes of a 64-byte block are of each class the estimate tells apart, one bit a byte.
#[derive(Debug, Clone, Copy, Default)]
struct Classes {
    lower: u64,
    upper: u64,
    digit: u64,
    space: u64,
    newline: u64,
    /// `+ / = - _`: punctuation inside a base64-like run.
    run_punctuation: u64,
}

impl Classes {
    fn of(block: &[u8; 64]) -> Classes {
        let mut classes = Classes::default();
        for (index, chunk) in block.chunks_exact(8).enumerate() {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(chunk);
            let word = u64::from_le_bytes(bytes);
            let shift = 8 * index;
            let space = (within(word, 0x09, 0x0D) & !equal(word, 0x0B)) | equal(word, b' ');
            let run_punctuation = equal(word, b'+')
                | equal(word, b'/')
                | equal(word, b'=')
                | equal(word, b'-')
                | equal(word, b'_');
            classes.lower |= gather(within(word, b'a', b'z')) << shift;
            classes.upper |= gather(within(word, b'A', b'Z')) << shift;
            classes.digit |= gather(within(word, b'0', b'9')) << shift;
            classes.space |= gather(space) << shift;
            classes.newline |= gather(equal(word, b'\n')) << shift;
            classes.run_punctuation |= gather(run_punctuation) << shift;
        }
        classes
    }
}

impl Run {
    /// A whole base64-like run counted byte by byte (for the rare run long enough to be counted
    /// per byte instead): `run` holds only run bytes, and the byte before it (if any) is not one.
    fn of(run: &[u8]) -> Run {
        let mut tally = Run {
            bytes: run.len() as u64,
            ..Run::default()
        };
        let mut digits = 0u64;
        let mut previous = 0u8;
        for &byte in run {
            if byte.is_ascii_digit() {
                digits += 1;
                tally.digit = true;
            } else if digits > 0 {
                tally.digit_groups += digits.div_ceil(3);
                digits = 0;
            }
            if byte.is_ascii_lowercase() {
                tally.lower = true;
                if !previous.is_ascii_alphabetic() {
                    tally.word_pieces += 1;
                }
            } else if byte.is_ascii_uppercase() {
                tally.upper = true;
                if !previous.is_ascii_uppercase() {
                    tally.word_pieces += 1;
                }
            } else if !byte.is_ascii_digit() {
                tally.punctuation += 1;
            }
            previous = byte;
        }
        tally.digit_groups += digits.div_ceil(3);
        tally
    }
}

impl Tally {
    /// [`Tally::of_scalar`] for an ASCII text, 64 bytes at a time: the classes of a block's
    /// bytes are found eight at a time in a `u64` and gathered into one bit a byte, and the
    /// runs and their starts are counted on those bits. Only digit runs (groups of three) and
    /// base64-like runs of at least [`DENSE_MIN_BYTES`] are walked one by one.
    fn of_ascii(bytes: &[u8]) -> Tally {
        let mut tally = Tally::default();
        // What the previous block ended with.
        let (mut letter, mut upper, mut space, mut digit) = (false, false, false, false);
        // The digit run and the base64-like run still open at the previous block's end.
        let mut digits = 0u64;
        let mut run_start: Option<usize> = None;
        let mut base = 0;
        while base < bytes.len() {
            let length = (bytes.len() - base).min(64);
            let c = match bytes[base..].first_chunk::<64>() {
                Some(block) => Classes::of(block),
                None => {
                    let mut block = [0u8; 64];
                    block[..length].copy_from_slice(&bytes[base..]);
                    Classes::of(&block)
                }
            };
            let valid = if length == 64 {
                !0
            } else {
                (1u64 << length) - 1
            };
            let letters = c.lower | c.upper;
            let carry = |flag: bool| u64::from(flag);
            tally.word_pieces +=
                u64::from((c.lower & !((letters << 1) | carry(letter))).count_ones());
            tally.word_pieces +=
                u64::from((c.upper & !((c.upper << 1) | carry(upper))).count_ones());
            tally.whitespace_runs +=
                u64::from((c.space & !((c.space << 1) | carry(space))).count_ones());
            tally.newlines += u64::from(c.newline.count_ones());
            let run = letters | c.digit | c.run_punctuation;
            // Punctuation inside runs is counted here too, and taken back from a dense run.
            tally.punctuation += u64::from((valid & !(run | c.space)).count_ones());
            tally.punctuation += u64::from(c.run_punctuation.count_ones());
            // Digit runs: groups of up to three (padding bytes are no digits, so every run
            // ends inside the text's last block).
            let mut open = c.digit;
            if digit {
                let end = (!c.digit).trailing_zeros() as usize;
                digits += end as u64;
                if end < 64 {
                    tally.digit_groups += digits.div_ceil(3);
                    digits = 0;
                    open &= !0u64 << end;
                } else {
                    open = 0;
                }
            }
            while open != 0 {
                let start = open.trailing_zeros() as usize;
                let len = (!(open >> start)).trailing_zeros() as usize;
                if start + len == 64 {
                    digits = len as u64;
                    break;
                }
                tally.digit_groups += (len as u64).div_ceil(3);
                open &= !0u64 << (start + len);
            }
            // A base64-like run of 64 bytes or more began before this block: it ends here at
            // the first byte that is not a run byte (padding is none).
            let not_run = !run;
            if let Some(start) = run_start
                && not_run != 0
            {
                let end = base + not_run.trailing_zeros() as usize;
                tally.take_dense(&bytes[start..end]);
                run_start = None;
            }
            if run >> 63 == 1 && run_start.is_none() {
                run_start = Some(match not_run {
                    0 => base,
                    _ => base + 64 - not_run.leading_zeros() as usize,
                });
            }
            letter = letters >> 63 == 1;
            upper = c.upper >> 63 == 1;
            space = c.space >> 63 == 1;
            digit = c.digit >> 63 == 1;
            base += 64;
        }
        tally.digit_groups += digits.div_ceil(3);
        if let Some(start) = run_start {
            tally.take_dense(&bytes[start..]);
        }
        tally
    }

    /// Counts `run` (a whole base64-like run, already counted by its pieces) per byte
    /// instead when it is long and mixed enough (see [`Run::flush`]).
    fn take_dense(&mut self, run: &[u8]) {
        if (run.len() as u64) < DENSE_MIN_BYTES {
            return;
        }
        let own = Run::of(run);
        if own.is_dense() {
            self.word_pieces -= own.word_pieces;
            self.digit_groups -= own.digit_groups;
            self.punctuation -= own.punctuation;
            self.dense_bytes += run.len() as u64;
        }
    }
}

/// How many bytes after `bytes[at]` are of `class`.
fn stretch(bytes: &[u8], at: usize, class: impl Fn(u8) -> bool) -> usize {
    bytes[at + 1..].iter().take_while(|b| class(**b)).count()
}

/// The code point of the `width`-byte UTF-8 sequence at `bytes[at..]`.
fn decode(bytes: &[u8], at: usize, width: usize) -> u32 {
    let lead = bytes.get(at).copied().unwrap_or(0);
    let mut code = u32::from(lead) & (0x7F >> width);
    for offset in 1..width {
        code = (code << 6) | (u32::from(bytes.get(at + offset).copied().unwrap_or(0)) & 0x3F);
    }
    code
}

/// Han ideographs (with extensions and compatibility forms), kana, hangul, bopomofo, CJK
/// radicals and punctuation, and full-width forms.
fn is_cjk(code: u32) -> bool {
    matches!(code,
        0x1100..=0x11FF          // Hangul Jamo
        | 0x2E80..=0x2FDF        // CJK radicals, Kangxi radicals
        | 0x3000..=0x30FF        // CJK symbols and punctuation, hiragana, katakana
        | 0x3100..=0x31FF        // bopomofo, hangul compatibility jamo, kanbun, …
        | 0x3400..=0x4DBF        // CJK extension A
        | 0x4E00..=0x9FFF        // CJK unified ideographs
        | 0xA960..=0xA97F        // Hangul Jamo extended A
        | 0xAC00..=0xD7AF        // Hangul syllables
        | 0xF900..=0xFAFF        // CJK compatibility ideographs
        | 0xFF00..=0xFFEF        // half-width and full-width forms
        | 0x20000..=0x3FFFF      // CJK extensions B and later
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(text: &str) -> Tally {
        Tally::of(text)
    }

    #[test]
    fn splits_words_digits_and_camel_case_like_o200k() {
        let t = tally("getUserName 12345 HTTPServer");
        assert_eq!(t.word_pieces, 4, "get, User, Name, HTTPServer");
        assert_eq!(t.digit_groups, 2, "123, 45");
        assert_eq!(t.whitespace_runs, 2);
        let t = tally("a,b;\n\n  c");
        assert_eq!(
            (t.word_pieces, t.punctuation, t.whitespace_runs, t.newlines),
            (3, 2, 1, 2)
        );
    }

    #[test]
    fn classifies_non_ascii_by_script_and_width() {
        let t = tally("中文かなカナ한글。Ａ");
        assert_eq!(t.cjk, 10);
        let t = tally("é Ж א"); // 2-byte characters
        assert_eq!((t.other_2, t.cyrillic, t.cjk), (2, 1, 0));
        let t = tally("क ✓"); // 3-byte, not CJK
        assert_eq!(t.other_3, 2);
        let t = tally("🎉𠀀"); // emoji (4 bytes) and CJK extension B (4 bytes)
        assert_eq!((t.other_4, t.cjk), (1, 1));
    }

    #[test]
    fn long_base64_runs_count_per_byte() {
        let blob = "gAAAAABo3Kx9Qm2ZrT0vW8yP1aL4nE7uC6iS5dF3hJ2kB9xV0zN8mQ1wR4tY7uI6oP5aS3dF2gH1jK0lZ9xC8vB7nM";
        let t = tally(blob);
        assert_eq!(
            (t.dense_bytes, t.word_pieces, t.digit_groups),
            (blob.len() as u64, 0, 0)
        );
        // Short, single-case or hex runs are words, not blobs.
        assert_eq!(tally("getReservationDetails2").dense_bytes, 0);
        assert_eq!(tally(&"deadbeef0123".repeat(10)).dense_bytes, 0);
        // A blob inside other text is still found, and its neighbours counted as usual.
        let t = tally(&format!("data:image/png;base64,{blob} ok"));
        assert_eq!(t.dense_bytes, blob.len() as u64);
        assert_eq!(
            (t.word_pieces, t.punctuation),
            (5, 4),
            "data image png base64 ok; : / ; ,"
        );
    }

    #[test]
    fn estimate_is_close_to_o200k_on_sample_texts() {
        // (text, exact o200k_base count)
        let samples = [
            ("The quick brown fox jumps over the lazy dog.", 10),
            ("fn main() {\n    println!(\"Hello, world!\");\n}\n", 12),
            (
                "{\"name\": \"get_reservation_details\", \"arguments\": {\"reservation_id\": \"8JX2WO\"}}",
                23,
            ),
            (
                "人工智能正在改变我们的生活方式。在过去的十年里，深度学习技术取得了巨大的进步。",
                25,
            ),
            (
                "Москва является столицей России и крупнейшим городом страны.",
                12,
            ),
        ];
        for (text, exact) in samples {
            let estimated = estimate(text, 1.0);
            let error = (f64::from(estimated) - f64::from(exact)) / f64::from(exact);
            assert!(
                error.abs() <= 0.5,
                "{text:?}: estimated {estimated}, exact {exact}"
            );
        }
    }

    #[test]
    fn ratio_scales_and_bad_ratios_fall_back_to_one() {
        let text = "some ordinary English text for the estimate";
        let base = estimate(text, 1.0);
        assert!(estimate(text, 2.0) >= 2 * base - 1);
        assert_eq!(estimate(text, f64::NAN), base);
        assert_eq!(estimate(text, -3.0), base);
        assert_eq!(estimate("", 5.0), 0);
        assert_eq!(estimate(".", 0.01), 1);
    }

    #[test]
    fn the_block_count_agrees_with_the_byte_count() {
        // Texts of every shape the two counts split differently: runs of each class across
        // block boundaries, digit runs of every length, base64-like runs of 64 bytes or more
        // (dense or not) starting and ending anywhere, punctuation and control bytes.
        let pieces = [
            "a",
            "Z",
            "7",
            "0123",
            "camelCaseWord",
            "HTTPServer",
            " ",
            "\t",
            "\n",
            "\r\n",
            "\x0b",
            "\x0c",
            "\x01",
            "\x7f",
            "+",
            "/",
            "=",
            "-",
            "_",
            ",",
            "\"",
            "{",
            ":",
            "aGVsbG8gd29ybGQgdGhpcyBpcyBhIGJhc2U2NCBzdHJpbmcgd2l0aCBtb3JlIHRoYW4gNjQgYnl0ZXM",
            "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz",
            "0123456789012345678901234567890123456789012345678901234567890123456789",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..4_000 {
            let mut text = String::new();
            let count = next() % 60;
            for _ in 0..count {
                text.push_str(pieces[(next() % pieces.len() as u64) as usize]);
            }
            assert!(text.is_ascii());
            assert_eq!(Tally::of(&text), Tally::of_scalar(&text), "{text:?}");
        }
    }
}
