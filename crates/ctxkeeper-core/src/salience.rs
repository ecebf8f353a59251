//! Salient strings: the exact strings an agent carries from what it read into what it does
//! next, and how much a line of text carries of them.
//!
//! An agent's next action names identifiers (`parse_args`, `ValueError`, `mia_li_3668`),
//! paths (`src/cli.rs`, `README.md`), line numbers and codes (`657`, `8JX2WO`) that it read
//! earlier in tool output or in the user's words. Those strings, not the prose around them, are
//! what a shortened context must keep: a summary that says "the test failed" instead of
//! `AssertionError: test_round_half_even` has lost what the next call needs. The same
//! recogniser serves the recall probe of [`crate::fidelity`] and the line ranking of every
//! place the engine shortens text.
//!
//! A *token* is a maximal run of ASCII letters, digits and `_ . / : - ~` (a backslash escape
//! such as the `\n` of JSON text separates tokens); a token yields its *pieces*: itself, its
//! parts between colons (`src/a.py:120` gives `src/a.py` and `120`; `mod::func` gives
//! `mod` and `func`), the suffixes and prefixes of a path at each slash (`/repo/src/a.py`
//! gives `src/a.py`, `a.py`, `/repo/src`, …) and the segments of a dotted name
//! (`self.total_due` gives `total_due`). A piece is *salient* when it is
//!
//! - a **path**: a file name (`name.ext` with a known extension, alone or after directories),
//!   or directories that start at a root or hold a marked name (`/usr/bin`, `src/module_3`),
//!   not a closing HTML tag (`/div`) or a pair of words (`start/end`);
//! - an **identifier**: snake_case, camelCase or CamelCase with a lower-to-upper turn, a
//!   dotted name, letters mixed with digits (`utf8`, `HAT170`, `8JX2WO`), or a kebab-case
//!   word holding a digit or an underscore;
//! - a **number** of at least three digits (line numbers, amounts, codes), possibly joined by
//!   `-` or `.` (`2024-05-15`).
//!
//! Plain words (`error`, `Hello`, `README`) are not salient: they say too little to be
//! matched, and prose is full of them.
//!
//! ```
//! use ctxkeeper_core::salience::{Kind, salient_strings};
//!
//! let mut found = Vec::new();
//! salient_strings(
//!     "FAILED tests/test_money.py:42 - AssertionError: round_half_even(2.675) != 2.68",
//!     &mut |piece, kind| found.push((piece.to_string(), kind)),
//! );
//! assert!(found.contains(&("tests/test_money.py".to_string(), Kind::Path)));
//! assert!(found.contains(&("AssertionError".to_string(), Kind::Identifier)));
//! assert!(found.contains(&("round_half_even".to_string(), Kind::Identifier)));
//! assert!(found.contains(&("2.675".to_string(), Kind::Number)));
//! // Plain words are not salient.
//! assert!(!found.iter().any(|(p, _)| p == "FAILED"));
//! ```

use serde_json::Value;

/// What a salient piece is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Path,
    Identifier,
    Number,
}

/// Pieces shorter than this are never salient.
const MIN_LEN: usize = 3;
/// Pieces longer than this are data (hashes of long blobs, base64), not names.
const MAX_LEN: usize = 200;

fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b':' | b'-' | b'~')
}

/// Whether `b` continues an identifier: a match must not be bordered by one.
fn word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Calls `visit` with every salient piece of `text`, in order (a piece may repeat).
pub fn salient_strings(text: &str, visit: &mut dyn FnMut(&str, Kind)) {
    for token in tokens(text) {
        pieces(token, visit);
    }
}

/// The tokens of `text` (see the [module documentation](self)), trimmed of leading colons
/// and dashes and of trailing dots, colons, dashes and slashes.
pub fn tokens(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        loop {
            // Skip separators; a backslash escape (`\n`, `\t`, `\r`, `\"`) is one.
            while at < bytes.len() && !token_byte(bytes[at]) {
                if bytes[at] == b'\\'
                    && at + 1 < bytes.len()
                    && matches!(bytes[at + 1], b'n' | b't' | b'r')
                {
                    at += 1;
                }
                at += 1;
            }
            if at >= bytes.len() {
                return None;
            }
            let start = at;
            while at < bytes.len() && token_byte(bytes[at]) {
                at += 1;
            }
            // Token bytes are ASCII: both ends are char boundaries.
            let token = text[start..at]
                .trim_start_matches([':', '-'])
                .trim_end_matches(['.', ':', '-', '/']);
            if token.len() >= MIN_LEN {
                return Some(token);
            }
        }
    })
}

fn pieces(token: &str, visit: &mut dyn FnMut(&str, Kind)) {
    let mut emit = |piece: &str| {
        if let Some(kind) = classify(piece) {
            visit(piece, kind);
        }
    };
    let whole_is_part = !token.contains(':');
    if !whole_is_part {
        emit(token);
    }
    for part in token.split(':') {
        let part = part.trim_start_matches('-').trim_end_matches(['.', '-']);
        if part.len() < MIN_LEN {
            continue;
        }
        emit(part);
        if part.contains('/') {
            for (i, _) in part.match_indices('/') {
                let (before, after) = (&part[..i], &part[i + 1..]);
                if !after.is_empty() {
                    emit(after);
                }
                if !before.is_empty() {
                    emit(before);
                }
            }
        } else if part.contains('.') && part.split('.').all(|s| !s.is_empty()) {
            for segment in part.split('.') {
                emit(segment);
            }
        }
    }
}

/// What `piece` is, if it is salient (see the [module documentation](self)).
pub fn classify(piece: &str) -> Option<Kind> {
    let bytes = piece.as_bytes();
    if bytes.len() < MIN_LEN || bytes.len() > MAX_LEN {
        return None;
    }
    let letters = bytes.iter().filter(|b| b.is_ascii_alphabetic()).count();
    let digits = bytes.iter().filter(|b| b.is_ascii_digit()).count();
    if letters == 0 {
        // Numbers, possibly joined by `-` or `.`: line numbers, amounts, dates, versions.
        let joined = bytes
            .iter()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'.'));
        let ends = bytes.first().is_some_and(u8::is_ascii_digit)
            && bytes.last().is_some_and(u8::is_ascii_digit);
        return (joined && ends && digits >= 3).then_some(Kind::Number);
    }
    if piece.contains('/') {
        return is_path(piece).then_some(Kind::Path);
    }
    if piece.contains('.') {
        if bytes.len() < 4 || piece.split('.').any(str::is_empty) || piece.contains(':') {
            return None;
        }
        let extension = piece.rsplit('.').next().unwrap_or_default();
        return Some(if FILE_EXTENSIONS.contains(&extension) {
            Kind::Path
        } else {
            Kind::Identifier
        });
    }
    if piece.contains('-') {
        let marked = digits > 0 || piece.contains('_');
        return (marked && piece.split('-').all(|s| !s.is_empty())).then_some(Kind::Identifier);
    }
    if !bytes.iter().all(|b| word_byte(*b)) {
        return None;
    }
    if bytes[0].is_ascii_digit() {
        // Codes that start with a digit (`8JX2WO`): capitals, or long enough not to be
        // `100ms` or `10th`.
        let capital = bytes.iter().any(u8::is_ascii_uppercase);
        return (capital || bytes.len() >= 6).then_some(Kind::Identifier);
    }
    let underscore = piece.contains('_');
    let turn = bytes
        .windows(2)
        .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
    (underscore || turn || digits > 0).then_some(Kind::Identifier)
}

/// Whether a piece with a slash names a path: a file name at its end (`docs/a.md`), or two
/// or more segments of which one is marked as a name (`src/module_3`, `pdl-spec/docs`) or
/// that start at a root (`/usr/bin`, `./src`, `~/work`), or three or more segments. Not an
/// HTML closing tag (`/div`) or a pair of words (`start/end`, `YAML/JSON`).
fn is_path(piece: &str) -> bool {
    let segments: Vec<&str> = piece.split('/').filter(|s| !s.is_empty()).collect();
    let Some(last) = segments.last() else {
        return false;
    };
    let file = last
        .rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && FILE_EXTENSIONS.contains(&ext));
    if file {
        return true;
    }
    if segments.len() < 2 {
        return false;
    }
    let rooted = piece.starts_with(['/', '~', '.']);
    let marked = segments.iter().any(|s| {
        s.bytes()
            .any(|b| b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.'))
    });
    rooted || marked || segments.len() >= 3
}

/// Extensions that make a dotted name a file name rather than an attribute path.
const FILE_EXTENSIONS: [&str; 40] = [
    "py", "rs", "js", "ts", "tsx", "jsx", "json", "jsonl", "md", "txt", "toml", "yaml", "yml", "c",
    "h", "cc", "cpp", "hpp", "go", "java", "kt", "rb", "sh", "html", "css", "scss", "sql", "cfg",
    "ini", "lock", "xml", "csv", "log", "php", "swift", "cs", "vue", "proto", "ipynb", "rst",
];

/// Calls `visit` with the salient pieces of a tool call's `arguments`: the string values and
/// integers of its JSON (`"offset": 657` is a line number), or its text when it is not JSON.
pub fn salient_arguments(arguments: &str, visit: &mut dyn FnMut(&str, Kind)) {
    match serde_json::from_str::<Value>(arguments) {
        Ok(value) => visit_json(&value, visit),
        Err(_) => salient_strings(arguments, visit),
    }
}

fn visit_json(value: &Value, visit: &mut dyn FnMut(&str, Kind)) {
    match value {
        Value::String(text) => salient_strings(text, visit),
        Value::Number(number) => {
            if let Some(n) = number.as_u64() {
                let text = n.to_string();
                if let Some(kind) = classify(&text) {
                    visit(&text, kind);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| visit_json(v, visit)),
        Value::Object(fields) => fields.values().for_each(|v| visit_json(v, visit)),
        _ => {}
    }
}

/// Whether the occurrence of a piece at `start..end` of `haystack` stands on its own: not
/// preceded or followed by a letter, digit or underscore (a backslash escape before it, the
/// `\n` of JSON text, counts as a separator). `foo_bar` occurs in `x = foo_bar(1)` and in
/// `"a\nfoo_bar"`, not in `foo_bar_baz`.
pub fn stands_alone(haystack: &[u8], start: usize, end: usize) -> bool {
    let before = start == 0
        || !word_byte(haystack[start - 1])
        || (start >= 2
            && haystack[start - 2] == b'\\'
            && matches!(haystack[start - 1], b'n' | b't' | b'r'));
    let after = end >= haystack.len() || !word_byte(haystack[end]);
    before && after
}

/// 3 for error lines, 2 for lines with a path or an identifier, 1 for lines with a number of
/// two or more digits, 0 otherwise. One pass over the bytes.
pub fn score_line(line: &str) -> u8 {
    // One lowercase copy per line, then substring searches (std's, fast even unoptimised).
    let lower = line.to_ascii_lowercase();
    // A test run's tally ranks with the errors even when it counts none: where the tests
    // stand is as telling as what failed.
    if speaks_of_failure(&lower) {
        return 3;
    }
    let bytes = line.as_bytes();
    let mut digits_run = 0;
    let mut has_number = false;
    let mut has_path = false;
    let mut word_letters = false;
    let mut word_digits = false;
    let mut word_len = 0;
    let mut has_id = false;
    for (i, &b) in bytes.iter().enumerate() {
        if b.is_ascii_digit() {
            digits_run += 1;
            if digits_run >= 2 {
                has_number = true;
            }
        } else {
            digits_run = 0;
        }
        if b == b'/' || b == b'\\' {
            let prev = i
                .checked_sub(1)
                .and_then(|j| bytes.get(j))
                .copied()
                .unwrap_or(b' ');
            let next = bytes.get(i + 1).copied().unwrap_or(b' ');
            if (prev.is_ascii_alphanumeric() || prev == b'.' || prev == b' ' || prev == b'~')
                && (next.is_ascii_alphanumeric() || next == b'_' || next == b'.')
            {
                has_path = true;
            }
        }
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'#' {
            word_len += 1;
            word_letters |= b.is_ascii_alphabetic();
            word_digits |= b.is_ascii_digit();
        } else {
            if word_len >= 6 && word_letters && word_digits {
                has_id = true;
            }
            word_len = 0;
            word_letters = false;
            word_digits = false;
        }
    }
    if word_len >= 6 && word_letters && word_digits {
        has_id = true;
    }
    if has_path || has_id || lower.contains("_id") {
        2
    } else if has_number {
        1
    } else {
        0
    }
}

/// The words of a failure report.
const FAILURE_MARKERS: [&str; 10] = [
    "error",
    "exception",
    "failed",
    "failure",
    "traceback",
    "panic",
    "denied",
    "not found",
    "fatal",
    "invalid",
];

/// Whether a line names a failure word at all, a count of none included.
fn speaks_of_failure(lower: &str) -> bool {
    FAILURE_MARKERS.iter().any(|m| lower.contains(m))
}

/// Whether a line reports a failure (`error`, `exception`, `traceback`, `not found`, …);
/// `lower` is the line in ASCII lowercase. A failure word that counts none is no failure: a
/// passing test summary (`0 failed, 212 passed`, `test result: ok. 3 passed; 0 failed`,
/// `no errors`, `errors=0`, `failures: 0`) is not an error line, `1 failed, 211 passed` is.
pub fn is_error_line(lower: &str) -> bool {
    FAILURE_MARKERS.iter().any(|marker| {
        lower
            .match_indices(marker)
            .any(|(at, _)| !counts_none(lower, at, marker.len()))
    })
}

/// Whether the failure word at `at..at + len` of `lower` is counted as none: preceded by `0`,
/// `no` or `zero` (a word such as `tests` may stand between: `0 tests failed`), or followed by
/// `= 0` or `: 0` (`errors=0`, `failures: 0`).
fn counts_none(lower: &str, at: usize, len: usize) -> bool {
    let mut before = lower[..at].trim_end();
    // One plain word may stand between the count and the failure word.
    for _ in 0..2 {
        // After the last character that is not a letter or digit (it may be several bytes).
        let word_start = before
            .char_indices()
            .rev()
            .find(|(_, c)| !c.is_ascii_alphanumeric())
            .map_or(0, |(i, c)| i + c.len_utf8());
        let word = &before[word_start..];
        let stands_alone = word_start == 0 || !before[..word_start].ends_with(['.', '-', '_']);
        if stands_alone && matches!(word, "0" | "no" | "zero") {
            return true;
        }
        if word.is_empty() || !word.bytes().all(|b| b.is_ascii_alphabetic()) {
            break;
        }
        before = before[..word_start].trim_end();
    }
    // `errors=0`, `failures: 0`, `error_count: 0`.
    let after = lower[at + len..].trim_start_matches(|c: char| c.is_ascii_alphabetic() || c == '_');
    let after = after.trim_start();
    let Some(rest) = after.strip_prefix(['=', ':']) else {
        return false;
    };
    let rest = rest.trim_start();
    rest.strip_prefix('0')
        .is_some_and(|tail| !tail.starts_with(|c: char| c.is_ascii_digit() || c == '.'))
}

/// How much a line carries, for the places that keep some lines of a text and drop the
/// rest: 4 for a directive ("never", "always", "must", "do not"), else [`score_line`]
/// (errors, paths and identifiers, numbers).
pub fn line_rank(line: &str) -> u8 {
    let lower = line.to_ascii_lowercase();
    let directive = ["never ", "always ", " must ", "do not ", "don't "]
        .iter()
        .any(|cue| lower.contains(cue));
    if directive { 4 } else { score_line(line) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passing_tally_is_no_error_but_a_failing_one_is() {
        let passing = [
            "[run_tests] 0 failed, 212 passed",
            "test result: ok. 12 passed; 0 failed; 0 ignored",
            "All tests passed, no errors",
            "Ran 40 tests: errors=0 failures=0",
            "failures: 0, error_count: 0",
            "0 tests failed",
            "OK",
        ];
        for line in passing {
            assert!(!is_error_line(&line.to_ascii_lowercase()), "{line}");
        }
        let failing = [
            "[run_tests] 1 failed, 211 passed",
            "0 errors, 3 failed",
            "FAILED tests/test_invoice.py::test_round - AssertionError: 3 != 4",
            "error[E0308]: mismatched types",
            "errors=10",
            "v1.0 failed to start",
            "Permission denied",
        ];
        for line in failing {
            assert!(is_error_line(&line.to_ascii_lowercase()), "{line}");
        }
        // Still ranked with the errors: where the tests stand is telling.
        assert_eq!(score_line("0 failed, 212 passed"), 3);
    }

    fn salient(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        salient_strings(text, &mut |piece, _| {
            if !out.iter().any(|p| p == piece) {
                out.push(piece.to_string());
            }
        });
        out
    }

    #[test]
    fn a_failure_word_after_a_multibyte_character_is_read_safely() {
        // A numbered listing (`738→`) right before the word: the word starts after the arrow.
        assert!(is_error_line("[read] 738→error: missing field"));
        assert!(!is_error_line("[read] 738→ 0 failed"));
        assert!(is_error_line("→failed"));
    }

    #[test]
    fn identifiers_paths_and_numbers_but_not_prose() {
        let found = salient(
            "The method _generate_html_with_navigation in claude_code_log/renderer.py (line 657) calls getSessionNav and raises JSONDecodeError.",
        );
        for expected in [
            "_generate_html_with_navigation",
            "claude_code_log/renderer.py",
            "renderer.py",
            "claude_code_log",
            "657",
            "getSessionNav",
            "JSONDecodeError",
        ] {
            assert!(found.iter().any(|p| p == expected), "{expected}: {found:?}");
        }
        for prose in ["The", "method", "line", "calls", "raises", "and"] {
            assert!(!found.iter().any(|p| p == prose), "{prose}: {found:?}");
        }
        // Sentence punctuation, abbreviations, word pairs and closing tags are not names.
        assert!(
            salient(
                "It works, e.g. here. I/O and start/end, YAML/JSON; </title></div> 42 is small."
            )
            .is_empty()
        );
        let found = salient("ls /usr/bin src/module_3 pdl-spec/docs ./src");
        assert_eq!(
            found,
            vec![
                "/usr/bin",
                "src/module_3",
                "module_3",
                "pdl-spec/docs",
                "./src"
            ]
        );
    }

    #[test]
    fn codes_and_ids_of_a_customer_service_session() {
        let found = salient(
            "Reservation 8JX2WO for user mia_li_3668: flight HAT170 on 2024-05-15, $1,286 total, 100ms",
        );
        for expected in ["8JX2WO", "mia_li_3668", "HAT170", "2024-05-15", "286"] {
            assert!(found.iter().any(|p| p == expected), "{expected}: {found:?}");
        }
        assert!(!found.iter().any(|p| p == "100ms" || p == "Reservation"));
    }

    #[test]
    fn json_escapes_separate_tokens() {
        let found = salient(r#"{"output":"src/a.py:12\nparse_args() failed\tExit code: 1"}"#);
        assert!(found.contains(&"src/a.py".to_string()), "{found:?}");
        assert!(found.contains(&"parse_args".to_string()), "{found:?}");
        assert!(!found.iter().any(|p| p.starts_with("nparse")), "{found:?}");
    }

    #[test]
    fn arguments_give_string_values_and_line_numbers() {
        let mut found = Vec::new();
        salient_arguments(
            r#"{"file_path":"/Users/dain/claude_code_log/renderer.py","offset":657,"limit":20}"#,
            &mut |piece, kind| found.push((piece.to_string(), kind)),
        );
        assert!(found.contains(&("657".to_string(), Kind::Number)));
        assert!(found.contains(&("claude_code_log/renderer.py".to_string(), Kind::Path)));
        // Keys are not salient; two-digit numbers neither.
        assert!(!found.iter().any(|(p, _)| p == "file_path" || p == "20"));
    }

    #[test]
    fn a_piece_stands_alone_between_separators() {
        let hay = br#"x = foo_bar(1); foo_bar_baz; "a\nfoo_bar""#;
        let at: Vec<usize> = (0..hay.len() - 7)
            .filter(|&i| &hay[i..i + 7] == b"foo_bar")
            .collect();
        let alone: Vec<bool> = at.iter().map(|&i| stands_alone(hay, i, i + 7)).collect();
        assert_eq!(alone, vec![true, false, true]);
    }

    #[test]
    fn scoring_prefers_errors_then_paths_and_ids() {
        assert_eq!(score_line("Traceback (most recent call last):"), 3);
        assert_eq!(score_line("wrote /tmp/out.txt"), 2);
        assert_eq!(score_line("order #W4817420 shipped"), 2);
        assert_eq!(score_line("took 1234 ms"), 1);
        assert_eq!(score_line("all good"), 0);
        assert_eq!(line_rank("You must never push to main."), 4);
        assert_eq!(line_rank("Traceback (most recent call last):"), 3);
    }
}
