//! Token accounting (signatures fixed; implementation in progress).

use crate::model::{Message, Part, ToolSpec};

/// Which tokenizer a model uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TokenizerKind {
    /// OpenAI o200k_base (GPT-4o, GPT-4.1, o-series, GPT-5): exact.
    O200kBase,
    /// OpenAI cl100k_base (GPT-4, GPT-3.5): exact.
    Cl100kBase,
    /// No public tokenizer: the CJK-aware estimate, scaled by `ratio`.
    Estimate { ratio: f64 },
}

/// Context window, output limit and tokenizer of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelProfile {
    pub name: String,
    pub context_window: u64,
    pub max_output: u64,
    pub tokenizer: TokenizerKind,
}

/// The table of model profiles (placeholder until the full table lands).
#[derive(Debug, Clone, Default)]
pub struct Profiles;

impl Profiles {
    /// The built-in profiles.
    pub fn builtin() -> Profiles {
        Profiles
    }

    /// Built-ins overridden by a TOML document.
    pub fn from_toml_str(text: &str) -> Result<Profiles, String> {
        let _ = text;
        Ok(Profiles)
    }
}

/// Counts tokens of messages, parts and tool schemas for one model profile.
#[derive(Debug, Clone)]
pub struct TokenModel {
    pub profile: ModelProfile,
}

impl TokenModel {
    /// The token model for a profile.
    pub fn new(profile: ModelProfile) -> TokenModel {
        TokenModel { profile }
    }

    /// The token model of a named model.
    pub fn for_model(name: &str, profiles: &Profiles) -> TokenModel {
        let _ = profiles;
        TokenModel::new(ModelProfile {
            name: name.to_string(),
            context_window: 128_000,
            max_output: 16_384,
            tokenizer: TokenizerKind::O200kBase,
        })
    }

    /// Tokens of a plain text.
    pub fn text_tokens(&self, text: &str) -> u32 {
        (text.len() / 4) as u32
    }

    /// Tokens of one part (without per-message overhead).
    pub fn part_tokens(&self, part: &Part) -> u32 {
        let _ = part;
        0
    }

    /// Tokens of one message, per-message overhead included.
    pub fn message_tokens(&self, message: &Message) -> u32 {
        message
            .parts
            .iter()
            .map(|p| self.part_tokens(p))
            .sum::<u32>()
            + 4
    }

    /// Tokens of the tool schemas sent with a request.
    pub fn tools_tokens(&self, tools: &[ToolSpec]) -> u32 {
        let _ = tools;
        0
    }
}

/// Per-message counts of a growing history, cached so that a whole-history count after
/// appending k messages costs O(k).
#[derive(Debug, Clone, Default)]
pub struct TokenLedger {
    counts: Vec<u32>,
    prefix: Vec<u64>,
}

impl TokenLedger {
    /// An empty ledger.
    pub fn new() -> TokenLedger {
        TokenLedger::default()
    }

    /// Counts the messages of `history` not yet counted (those past `self.len()`).
    pub fn sync(&mut self, history: &[Message], model: &TokenModel) {
        for message in &history[self.counts.len().min(history.len())..] {
            let count = model.message_tokens(message);
            let before = self.prefix.last().copied().unwrap_or(0);
            self.counts.push(count);
            self.prefix.push(before + u64::from(count));
        }
    }

    /// Number of messages counted.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// True when nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Tokens of message `index`.
    pub fn get(&self, index: usize) -> u32 {
        self.counts[index]
    }

    /// Tokens of the first `n` messages.
    pub fn prefix_total(&self, n: usize) -> u64 {
        if n == 0 { 0 } else { self.prefix[n - 1] }
    }
}
