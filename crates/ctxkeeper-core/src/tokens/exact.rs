//! Exact token counts for OpenAI's public encodings, `o200k_base` and `cl100k_base`.
//!
//! The counts come from the `bpe-openai` crate, which encodes exactly like OpenAI's tiktoken
//! (the `token_agreement` test checks this against `tiktoken-rs` on every string of the shared
//! traces) and was chosen over `tiktoken-rs` after measuring both here (`bench/token-counting.md`):
//!
//! - it is faster: ~1.5× on o200k and ~2.5× on cl100k on the traces' text;
//! - it loads faster the first time (o200k ≈ 60 ms against ≈ 160 ms);
//! - it can stop counting at a limit ([`Encoding::count_up_to`]), so "does this fit?" costs
//!   O(limit), not O(text).
//!
//! The price is binary size: its precomputed tables are compiled in, about 35 MB for o200k and
//! 15 MB for cl100k in a release binary (tiktoken-rs: about 9 MB for both). A server binary can
//! afford it; the speed and the early exit matter more on the per-step path.
//!
//! Each encoding is built once per process, on first use, and shared: `bpe-openai` keeps it in a
//! `static` that is initialised exactly once, and this module only hands out that reference —
//! nothing here builds a tokenizer per call. Call [`warm_up`] at start-up to pay the first-load
//! cost before the first request instead of during it.
//!
//! Text is always encoded as *ordinary* text: special-token markers such as `<|endoftext|>`
//! inside user content are counted as the characters they are made of (7 tokens for
//! `<|endoftext|>` in both encodings), exactly as tiktoken's `encode_ordinary` does and as a chat
//! API must treat what a user sends (user text cannot inject control tokens). They never panic
//! and never count as one control token.
//!
//! ```
//! use ctxkeeper_core::tokens::exact::Encoding;
//!
//! assert_eq!(Encoding::O200kBase.count("hello world"), 2);
//! assert_eq!(Encoding::Cl100kBase.count("<|endoftext|>"), 7);
//! // Stops early: at most ~limit tokens of work however long the text is.
//! assert_eq!(Encoding::O200kBase.count_up_to(&"word ".repeat(10_000), 100), None);
//! assert_eq!(Encoding::O200kBase.count_up_to("hello world", 100), Some(2));
//! ```

use bpe_openai::Tokenizer;

/// One of OpenAI's public byte-pair encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `o200k_base`: GPT-4o, GPT-4.1, GPT-4.5, GPT-5 and the o-series reasoning models.
    O200kBase,
    /// `cl100k_base`: GPT-4, GPT-4 Turbo and GPT-3.5 Turbo.
    Cl100kBase,
}

impl Encoding {
    /// Both encodings.
    pub const ALL: [Encoding; 2] = [Encoding::O200kBase, Encoding::Cl100kBase];

    /// The encoding's tiktoken name (`o200k_base`, `cl100k_base`).
    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }

    /// The shared tokenizer, built on first use.
    fn tokenizer(self) -> &'static Tokenizer {
        match self {
            Encoding::O200kBase => bpe_openai::o200k_base(),
            Encoding::Cl100kBase => bpe_openai::cl100k_base(),
        }
    }

    /// The number of tokens of `text`, encoded as ordinary text.
    ///
    /// Saturates at `u32::MAX` (a text of more than ~16 GB).
    pub fn count(self, text: &str) -> u32 {
        if text.is_empty() {
            return 0;
        }
        saturate(self.tokenizer().count(text))
    }

    /// The number of tokens of `text` if it is at most `limit`, else `None`.
    ///
    /// Counting stops shortly after the limit is passed, so asking whether a large text fits a
    /// small budget costs about as much as counting `limit` tokens.
    pub fn count_up_to(self, text: &str, limit: u32) -> Option<u32> {
        if text.is_empty() {
            return Some(0);
        }
        let tokenizer = self.tokenizer();
        // Neither encoding normalises its input, so this borrows `text` unchanged.
        let normalized = tokenizer.normalize(text);
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        tokenizer.count_till_limit(&normalized, limit).map(saturate)
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Builds both encodings now, so that the first real count does not pay their load time
/// (tens of milliseconds each). Calling it again costs nothing.
pub fn warm_up() {
    for encoding in Encoding::ALL {
        let _ = encoding.tokenizer();
    }
}

fn saturate(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_known_strings_in_both_encodings() {
        for (text, o200k, cl100k) in [
            ("", 0, 0),
            ("hello world", 2, 2),
            ("tiktoken is great!", 6, 6),
            ("人工智能正在改变我们的生活方式。", 8, 14),
        ] {
            assert_eq!(Encoding::O200kBase.count(text), o200k, "o200k {text:?}");
            assert_eq!(Encoding::Cl100kBase.count(text), cl100k, "cl100k {text:?}");
        }
    }

    #[test]
    fn special_token_markers_are_ordinary_text() {
        for encoding in Encoding::ALL {
            assert_eq!(encoding.count("<|endoftext|>"), 7, "{encoding}");
            assert!(encoding.count("<|im_start|>user<|im_end|><|endofprompt|>") > 3);
        }
    }

    #[test]
    fn count_up_to_agrees_with_count_below_the_limit_and_stops_above_it() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(50);
        for encoding in Encoding::ALL {
            let full = encoding.count(&text);
            assert_eq!(encoding.count_up_to(&text, full), Some(full));
            assert_eq!(encoding.count_up_to(&text, full + 1), Some(full));
            assert_eq!(encoding.count_up_to(&text, full - 1), None);
            assert_eq!(encoding.count_up_to(&text, 0), None);
            assert_eq!(encoding.count_up_to("", 0), Some(0));
        }
    }

    #[test]
    fn hostile_inputs_do_not_panic() {
        let long_spaces = " ".repeat(100_000);
        let mixed = "\u{0}\u{FEFF}\r\n\t é\u{301} 🎉 \u{10FFFF}";
        for encoding in Encoding::ALL {
            assert!(encoding.count(&long_spaces) > 0);
            assert!(encoding.count(mixed) > 0);
            assert!(encoding.count_up_to(&long_spaces, 5).is_none());
        }
    }
}
