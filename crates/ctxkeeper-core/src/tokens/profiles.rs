//! Model profiles: context window, output limit, tokenizer, image rule and overheads of each
//! model, a built-in table of common models, name lookup, and TOML overrides.
//!
//! # Lookup
//!
//! [`Profiles::lookup`] lowercases the name and tries, in order:
//!
//! 1. the exact name (`gpt-4o`);
//! 2. the longest table name that is a prefix of it ending at a separator (`-`, `:`, `@`, `_`,
//!    `/`), so dated and tagged names find their family: `gpt-4o-2024-08-06` → `gpt-4o`,
//!    `claude-sonnet-4-20250514` → `claude-sonnet-4`, `qwen3:8b` → `qwen3`, but `gpt-4.5` does
//!    *not* fall back to `gpt-4`; a minor version newer than the table finds the newest listed
//!    minor version of its family, not the bare family (`claude-opus-4-8` → `claude-opus-4-6`,
//!    not `claude-opus-4`);
//! 3. both again without a provider prefix (`openai/gpt-4o`, `models/gemini-2.5-pro`,
//!    `meta-llama/Llama-3.3-70B-Instruct`, Bedrock's `us.anthropic.claude-…`), and for Claude
//!    with dots between digits turned into dashes (`claude-3.5-sonnet` → `claude-3-5-sonnet`);
//! 4. otherwise the default profile: `o200k_base`, a 128,000-token window, 16,384 output tokens
//!    and OpenAI's overheads (override it with a `[models.default]` table).
//!
//! The table is the fallback for what a request says itself: a request that asks for a
//! larger window (Anthropic's `context-1m-…` beta, see [`beta_window`]) gets that window,
//! never a narrower one.
//!
//! # Overrides
//!
//! ```
//! use ctxkeeper_core::tokens::{Profiles, TokenizerKind};
//!
//! let profiles = Profiles::from_toml_str(r#"
//!     [models."gpt-4o"]
//!     context_window = 64000          # a deployment with a smaller window
//!
//!     [models."my-llama"]
//!     base = "llama-3.3"              # start from a built-in profile
//!     context_window = 32768
//!     ratio = 1.1
//! "#).unwrap();
//! assert_eq!(profiles.lookup("gpt-4o-2024-08-06").context_window, 64_000);
//! assert_eq!(profiles.lookup("my-llama").tokenizer, TokenizerKind::Estimate { ratio: 1.1 });
//! assert!(Profiles::from_toml_str("[models.x]\ncontext_windw = 1").is_err());
//! ```
//!
//! An entry names a model: it starts from `base` if given, else from what the name looks up to
//! (the built-in entry, a prefix match, or the default), and replaces the fields it sets. Every
//! field is optional: `base`, `context_window`, `max_output` (when only `context_window` is
//! given, the inherited output limit is clamped to it), `tokenizer` (`"o200k_base"`,
//! `"cl100k_base"` or `"estimate"`), `ratio` (estimate only), `image` (an inline table with
//! `rule = "openai_tiles" | "openai_patches" | "pixel_area" | "flat"` and that rule's fields, see
//! [`ImageRule`]), `message_overhead`, `request_overhead`, `tool_overhead`, `tools_overhead`.
//! Unknown fields are errors.
//!
//! # Sources of the built-in figures
//!
//! Context windows, output limits and image rules are as the providers published them through
//! 2025 (table written 2026-11-22): OpenAI's model pages, its "Images and vision" guide and the
//! cookbook "How to count tokens with tiktoken" (3 tokens per message, 1 per name, 3 to prime
//! the reply); Anthropic's "Models overview", "Vision" (`w × h / 750`) and "Tool use" pages (the
//! tool-use system prompt: 346 tokens, 264 for Claude 3.5 Haiku); Google's Gemini model pages
//! and "Understand and count tokens" (258 tokens per image); the Llama 3.1, 3.3 and 4, Qwen2.5,
//! Qwen3 and Qwen3-Coder model cards; DeepSeek's "Models & Pricing"; Mistral's model overview.
//! Where a host sets its own limit (open-weight models) or nothing is published (output limits
//! of Mistral and Llama, per-message overheads outside OpenAI, tool overheads outside OpenAI
//! and Anthropic), the figure is a stated guess, marked below. The `ratio` of an estimated
//! tokenizer (its tokens per `o200k_base` token on English and code) is an approximation to be
//! corrected from reported usage by [`super::Calibration`].

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::exact::Encoding;
use super::image::ImageRule;

/// Which tokenizer a model uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TokenizerKind {
    /// OpenAI o200k_base (GPT-4o, GPT-4.1, o-series, GPT-5): exact.
    O200kBase,
    /// OpenAI cl100k_base (GPT-4, GPT-3.5): exact.
    Cl100kBase,
    /// No public tokenizer: the CJK-aware estimate, scaled by `ratio`.
    Estimate {
        /// The model's tokens per `o200k_base` token (Claude ≈ 1.2).
        ratio: f64,
    },
}

impl TokenizerKind {
    /// The exact encoding, if the tokenizer is one.
    pub fn encoding(self) -> Option<Encoding> {
        match self {
            TokenizerKind::O200kBase => Some(Encoding::O200kBase),
            TokenizerKind::Cl100kBase => Some(Encoding::Cl100kBase),
            TokenizerKind::Estimate { .. } => None,
        }
    }

    /// True for the exact OpenAI encodings.
    pub fn is_exact(self) -> bool {
        self.encoding().is_some()
    }

    /// The name used in TOML (`o200k_base`, `cl100k_base`, `estimate`).
    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::O200kBase => "o200k_base",
            TokenizerKind::Cl100kBase => "cl100k_base",
            TokenizerKind::Estimate { .. } => "estimate",
        }
    }
}

impl fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizerKind::Estimate { ratio } => write!(f, "estimate ×{ratio}"),
            exact => f.write_str(exact.name()),
        }
    }
}

/// Context window, output limit, tokenizer and counting rules of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelProfile {
    /// The table name (lowercase), or `default`.
    pub name: String,
    /// The whole context window in tokens (input and output together; for Gemini, whose limits
    /// are separate, the input limit).
    pub context_window: u64,
    /// The most tokens one reply may have.
    pub max_output: u64,
    /// How text is counted.
    pub tokenizer: TokenizerKind,
    /// How images are counted.
    pub image: ImageRule,
    /// Tokens every message costs besides its content (role markers, separators).
    pub message_overhead: u32,
    /// Tokens every request costs once (OpenAI: 3 to prime the assistant's reply).
    pub request_overhead: u32,
    /// Tokens every tool schema costs besides its JSON.
    pub tool_overhead: u32,
    /// Tokens a request with any tools costs once (Anthropic's tool-use system prompt: 346).
    pub tools_overhead: u32,
}

impl ModelProfile {
    /// A profile with OpenAI's per-message and per-tool overheads and GPT-4o's image rule, for
    /// building custom profiles in code; set the other fields as needed.
    pub fn new(
        name: impl Into<String>,
        context_window: u64,
        max_output: u64,
        tokenizer: TokenizerKind,
    ) -> ModelProfile {
        ModelProfile {
            name: name.into(),
            context_window,
            max_output,
            tokenizer,
            image: GPT4O_IMAGES,
            message_overhead: 3,
            request_overhead: 3,
            tool_overhead: 8,
            tools_overhead: 12,
        }
    }

    /// The profile used for names the table does not know: `o200k_base`, 128,000 tokens,
    /// 16,384 output tokens, OpenAI's overheads.
    pub fn fallback() -> ModelProfile {
        ModelProfile::new(DEFAULT_NAME, 128_000, 16_384, TokenizerKind::O200kBase)
    }

    fn validate(&self) -> Result<(), String> {
        if self.context_window == 0 {
            return Err("context_window must be greater than 0".into());
        }
        if self.max_output > self.context_window {
            return Err(format!(
                "max_output ({}) is larger than context_window ({})",
                self.max_output, self.context_window
            ));
        }
        if let TokenizerKind::Estimate { ratio } = self.tokenizer
            && !(ratio.is_finite() && ratio > 0.0 && ratio <= 10.0)
        {
            return Err(format!("ratio must be a number in (0, 10], not {ratio}"));
        }
        match self.image {
            ImageRule::OpenAiPatches { multiplier }
                if !(multiplier.is_finite() && multiplier > 0.0 && multiplier <= 100.0) =>
            {
                Err(format!(
                    "image multiplier must be a number in (0, 100], not {multiplier}"
                ))
            }
            ImageRule::PixelArea {
                pixels_per_token: 0,
                ..
            } => Err("image pixels_per_token must be greater than 0".into()),
            _ => Ok(()),
        }
    }
}

/// The name of the fallback profile, also the TOML key that overrides it.
pub const DEFAULT_NAME: &str = "default";

/// How a name was resolved by [`Profiles::resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    /// The name (after lowercasing) is in the table.
    Exact,
    /// A table name is a prefix of the name, possibly after removing a provider prefix or
    /// turning version dots into dashes.
    Prefix,
    /// Nothing matched: the default profile.
    Default,
}

/// A table of model profiles with name lookup. See the [module docs](self).
#[derive(Debug, Clone, PartialEq)]
pub struct Profiles {
    entries: BTreeMap<String, ModelProfile>,
    fallback: ModelProfile,
    /// The default profile was set by the user (`[models.default]`), not built in.
    fallback_configured: bool,
}

impl Default for Profiles {
    fn default() -> Profiles {
        Profiles::builtin()
    }
}

impl Profiles {
    /// The built-in table.
    pub fn builtin() -> Profiles {
        let mut entries = BTreeMap::new();
        for profile in builtin_profiles() {
            entries.insert(profile.name.clone(), profile);
        }
        Profiles {
            entries,
            fallback: ModelProfile::fallback(),
            fallback_configured: false,
        }
    }

    /// A table with no entries: every name resolves to the default profile.
    pub fn empty() -> Profiles {
        Profiles {
            entries: BTreeMap::new(),
            fallback: ModelProfile::fallback(),
            fallback_configured: false,
        }
    }

    /// The built-in table with the `[models."NAME"]` entries of a TOML document applied over it.
    pub fn from_toml_str(text: &str) -> Result<Profiles, ProfileError> {
        let mut profiles = Profiles::builtin();
        profiles.merge_toml_str(text)?;
        Ok(profiles)
    }

    /// Applies the `[models."NAME"]` entries of a TOML document over this table. On error the
    /// table is unchanged.
    pub fn merge_toml_str(&mut self, text: &str) -> Result<(), ProfileError> {
        let file: ProfilesFile =
            toml::from_str(text).map_err(|err| ProfileError::Toml(err.to_string()))?;
        let mut updated = self.clone();
        for (name, entry) in &file.models {
            updated.apply(name, entry)?;
        }
        *self = updated;
        Ok(())
    }

    /// Applies one override entry (as parsed from TOML, or built by a caller's own config).
    pub fn apply(&mut self, name: &str, entry: &ProfileOverride) -> Result<(), ProfileError> {
        let key = name.trim().to_ascii_lowercase();
        let invalid = |message: String| ProfileError::Invalid {
            model: name.to_string(),
            message,
        };
        if key.is_empty() {
            return Err(invalid("the model name is empty".into()));
        }
        let mut profile = match &entry.base {
            Some(base) => match self.resolve(base) {
                (_, MatchKind::Default) if base.trim().to_ascii_lowercase() != DEFAULT_NAME => {
                    return Err(invalid(format!("base model {base:?} is not in the table")));
                }
                (profile, _) => profile.clone(),
            },
            None if key == DEFAULT_NAME => self.fallback.clone(),
            None => self.resolve(&key).0.clone(),
        };
        profile.name = key.clone();
        entry.apply_to(&mut profile).map_err(invalid)?;
        profile.validate().map_err(invalid)?;
        if key == DEFAULT_NAME {
            self.fallback = profile;
            self.fallback_configured = true;
        } else {
            self.entries.insert(key, profile);
        }
        Ok(())
    }

    /// Adds or replaces a profile under its (lowercased) name.
    pub fn insert(&mut self, mut profile: ModelProfile) {
        profile.name = profile.name.trim().to_ascii_lowercase();
        if profile.name == DEFAULT_NAME {
            self.fallback = profile;
            self.fallback_configured = true;
        } else {
            self.entries.insert(profile.name.clone(), profile);
        }
    }

    /// The profile stored under exactly this (case-insensitive) name.
    pub fn get(&self, name: &str) -> Option<&ModelProfile> {
        self.entries.get(&name.trim().to_ascii_lowercase())
    }

    /// The default profile, used when nothing matches.
    pub fn fallback(&self) -> &ModelProfile {
        &self.fallback
    }

    /// Whether the default profile is the user's (`[models.default]`, or one inserted under
    /// that name) rather than the built-in one: its window is then a window the user chose.
    pub fn fallback_configured(&self) -> bool {
        self.fallback_configured
    }

    /// The table's names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The number of entries (the default profile not included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The profile for a model name (see the [module docs](self) for the rules); its `name` is
    /// the table name that matched, or `default`.
    pub fn lookup(&self, name: &str) -> ModelProfile {
        self.resolve(name).0.clone()
    }

    /// The profile for a model name and how it was found.
    pub fn resolve(&self, name: &str) -> (&ModelProfile, MatchKind) {
        let lower = name.trim().to_ascii_lowercase();
        if let Some(profile) = self.entries.get(&lower) {
            return (profile, MatchKind::Exact);
        }
        for candidate in candidates(&lower) {
            if let Some(profile) = self.entries.get(&candidate) {
                return (profile, MatchKind::Prefix);
            }
            if let Some(profile) = self.longest_prefix(&candidate) {
                return (profile, MatchKind::Prefix);
            }
        }
        (&self.fallback, MatchKind::Default)
    }

    fn longest_prefix(&self, name: &str) -> Option<&ModelProfile> {
        // Walk the prefixes of `name` that end at a separator, longest first.
        name.char_indices()
            .rev()
            .filter(|&(_, c)| is_separator(c))
            .find_map(|(at, _)| {
                let family = &name[..at];
                let profile = self.entries.get(family)?;
                Some(
                    self.newest_minor(family, &name[at + 1..])
                        .unwrap_or(profile),
                )
            })
    }

    /// A minor version newer than the table (`claude-opus-4-8` when the table stops at
    /// `claude-opus-4-6`): the newest listed minor version of the family up to it, which is
    /// closer to the new model than the bare family (`claude-opus-4`, an older generation).
    /// `rest` is what follows the family's separator; a date (`20250514`) is no minor version.
    fn newest_minor(&self, family: &str, rest: &str) -> Option<&ModelProfile> {
        let minor = rest.split(is_separator).next()?;
        if minor.is_empty() || minor.len() > 2 || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let newest: u32 = minor.parse().ok()?;
        (0..=newest)
            .rev()
            .find_map(|n| self.entries.get(&format!("{family}-{n}")))
    }
}

fn is_separator(c: char) -> bool {
    matches!(c, '-' | ':' | '@' | '_' | '/')
}

/// The context window an Anthropic request asks for through its `anthropic-beta` header (a
/// comma-separated list): `context-1m-…` (`context-1m-2025-08-07`) asks for 1,000,000 tokens.
/// A model that accepts the beta has that window whatever the table says of its family.
///
/// ```
/// use ctxkeeper_core::tokens::beta_window;
///
/// assert_eq!(beta_window("interleaved-thinking-2025-05-14,context-1m-2025-08-07"), Some(1_000_000));
/// assert_eq!(beta_window("fine-grained-tool-streaming-2025-05-14"), None);
/// ```
pub fn beta_window(betas: &str) -> Option<u64> {
    betas
        .split(',')
        .map(|beta| beta.trim().to_ascii_lowercase())
        .filter_map(|beta| {
            let rest = beta.strip_prefix("context-")?;
            let (size, _) = rest.split_once('-').unwrap_or((rest, ""));
            let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit())?);
            let n: u64 = digits.parse().ok()?;
            match unit {
                "m" => Some(n * 1_000_000),
                "k" => Some(n * 1_000),
                _ => None,
            }
        })
        .max()
}

/// The spellings of a lowercase name to try: itself, without a provider prefix, and with
/// version dots turned into dashes.
fn candidates(lower: &str) -> Vec<String> {
    let mut out = vec![lower.to_string()];
    let mut bare = lower.rsplit('/').next().unwrap_or(lower);
    // Bedrock: `us.anthropic.claude-…`, `anthropic.claude-…`.
    if let Some(at) = bare.find("anthropic.") {
        bare = &bare[at + "anthropic.".len()..];
    }
    if bare != lower {
        out.push(bare.to_string());
    }
    // Only Claude is commonly spelled both ways; for others a dot is part of the version
    // (`gpt-4.5` is not `gpt-4-5`, which would fall back to `gpt-4`).
    if bare.starts_with("claude") {
        let dashed = dots_between_digits_to_dashes(bare);
        if dashed != bare {
            out.push(dashed);
        }
    }
    out
}

fn dots_between_digits_to_dashes(name: &str) -> String {
    let bytes = name.as_bytes();
    name.char_indices()
        .map(|(at, c)| {
            let digit_before = at > 0 && bytes.get(at - 1).is_some_and(u8::is_ascii_digit);
            let digit_after = bytes.get(at + 1).is_some_and(u8::is_ascii_digit);
            if c == '.' && digit_before && digit_after {
                '-'
            } else {
                c
            }
        })
        .collect()
}

/// A problem with profile overrides.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The TOML does not parse, or has an unknown field or a value of the wrong type; the
    /// message gives the line and column.
    #[error("model profiles: {0}")]
    Toml(String),
    /// An entry parses but makes no sense (a zero window, an unknown base model, …).
    #[error("model profile [models.{model:?}]: {message}")]
    Invalid {
        /// The entry's name as written.
        model: String,
        /// What is wrong, in words a person can act on.
        message: String,
    },
}

/// A TOML document of profile overrides.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfilesFile {
    #[serde(default)]
    models: BTreeMap<String, ProfileOverride>,
}

/// The tokenizer names accepted in TOML.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerName {
    /// `o200k_base`.
    O200kBase,
    /// `cl100k_base`.
    Cl100kBase,
    /// The CJK-aware estimate (with `ratio`).
    Estimate,
}

/// One `[models."NAME"]` entry: every field optional, unknown fields rejected.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileOverride {
    /// Start from this model's profile instead of what the entry's own name looks up to.
    pub base: Option<String>,
    /// The whole context window in tokens.
    pub context_window: Option<u64>,
    /// The most tokens one reply may have.
    pub max_output: Option<u64>,
    /// The tokenizer.
    pub tokenizer: Option<TokenizerName>,
    /// The estimate's tokens per `o200k_base` token (only with the estimate).
    pub ratio: Option<f64>,
    /// The image rule.
    pub image: Option<ImageRule>,
    /// Tokens per message besides content.
    pub message_overhead: Option<u32>,
    /// Tokens per request.
    pub request_overhead: Option<u32>,
    /// Tokens per tool schema besides its JSON.
    pub tool_overhead: Option<u32>,
    /// Tokens once per request with tools.
    pub tools_overhead: Option<u32>,
}

impl ProfileOverride {
    fn apply_to(&self, profile: &mut ModelProfile) -> Result<(), String> {
        if let Some(value) = self.context_window {
            profile.context_window = value;
        }
        match self.max_output {
            Some(value) => profile.max_output = value,
            // A deployment with a smaller window than the model's (a local server, a proxy
            // with a limit) states only the window: the inherited output limit cannot exceed
            // it, so it shrinks to the window instead of making the entry invalid.
            None => profile.max_output = profile.max_output.min(profile.context_window),
        }
        let current_ratio = match profile.tokenizer {
            TokenizerKind::Estimate { ratio } => Some(ratio),
            _ => None,
        };
        profile.tokenizer = match (self.tokenizer, self.ratio) {
            (Some(TokenizerName::O200kBase | TokenizerName::Cl100kBase), Some(_)) => {
                return Err("ratio only applies to tokenizer = \"estimate\"".into());
            }
            (Some(TokenizerName::O200kBase), None) => TokenizerKind::O200kBase,
            (Some(TokenizerName::Cl100kBase), None) => TokenizerKind::Cl100kBase,
            (Some(TokenizerName::Estimate), ratio) => TokenizerKind::Estimate {
                ratio: ratio.or(current_ratio).unwrap_or(1.0),
            },
            (None, Some(ratio)) if current_ratio.is_some() => TokenizerKind::Estimate { ratio },
            (None, Some(_)) => {
                return Err(format!(
                    "ratio only applies to tokenizer = \"estimate\", and this model uses {}; \
                     add tokenizer = \"estimate\"",
                    profile.tokenizer.name()
                ));
            }
            (None, None) => profile.tokenizer,
        };
        if let Some(image) = self.image {
            profile.image = image;
        }
        let fields = [
            (self.message_overhead, &mut profile.message_overhead),
            (self.request_overhead, &mut profile.request_overhead),
            (self.tool_overhead, &mut profile.tool_overhead),
            (self.tools_overhead, &mut profile.tools_overhead),
        ];
        for (value, field) in fields {
            if let Some(value) = value {
                *field = value;
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The built-in table.

const GPT4O_IMAGES: ImageRule = tiles(85, 170);
const GPT4O_MINI_IMAGES: ImageRule = tiles(2833, 5667);
const O_SERIES_IMAGES: ImageRule = tiles(75, 150);
const GPT5_IMAGES: ImageRule = tiles(70, 140);
const CLAUDE_IMAGES: ImageRule = ImageRule::PixelArea {
    pixels_per_token: 750,
    max_tokens: 1_600,
};
const GEMINI_IMAGES: ImageRule = ImageRule::Flat { tokens: 258 };
/// Open-weight models: no single published rule; about what a 1-megapixel image costs under the
/// documented rules. A guess.
const GENERIC_IMAGES: ImageRule = ImageRule::Flat { tokens: 1_000 };

const fn tiles(base: u32, per_tile: u32) -> ImageRule {
    ImageRule::OpenAiTiles { base, per_tile }
}

fn patches(multiplier: f64) -> ImageRule {
    ImageRule::OpenAiPatches { multiplier }
}

fn openai(name: &str, window: u64, output: u64, o200k: bool, image: ImageRule) -> ModelProfile {
    let tokenizer = if o200k {
        TokenizerKind::O200kBase
    } else {
        TokenizerKind::Cl100kBase
    };
    ModelProfile {
        image,
        ..ModelProfile::new(name, window, output, tokenizer)
    }
}

/// Claude: estimate × 1.2 (Claude's tokenizer yields roughly 15–30 % more tokens than o200k on
/// English and code), the pixel-area image rule, the documented tool-use system prompt. The
/// message and request overheads are guesses.
fn claude(name: &str, output: u64, tools_overhead: u32) -> ModelProfile {
    ModelProfile {
        name: name.into(),
        context_window: 200_000,
        max_output: output,
        tokenizer: TokenizerKind::Estimate { ratio: 1.2 },
        image: CLAUDE_IMAGES,
        message_overhead: 3,
        request_overhead: 4,
        tool_overhead: 8,
        tools_overhead,
    }
}

/// Models without a public tokenizer binding here: the estimate × `ratio`, the open-weight
/// image guess. Overheads are guesses: chat templates cost a few tokens per message, and
/// open-weight templates render tools with a preamble of about a hundred tokens.
fn estimated(
    name: &str,
    window: u64,
    output: u64,
    ratio: f64,
    message_overhead: u32,
    tools_overhead: u32,
) -> ModelProfile {
    ModelProfile {
        name: name.into(),
        context_window: window,
        max_output: output,
        tokenizer: TokenizerKind::Estimate { ratio },
        image: GENERIC_IMAGES,
        message_overhead,
        request_overhead: 3,
        tool_overhead: 8,
        tools_overhead,
    }
}

fn gemini(name: &str, window: u64, output: u64) -> ModelProfile {
    // Gemini's 256k SentencePiece vocabulary is close to o200k on English.
    ModelProfile {
        image: GEMINI_IMAGES,
        ..estimated(name, window, output, 1.05, 3, 12)
    }
}

/// Meta's Llama: output limits are set by the host (8,192 is a common default — a guess).
fn llama(name: &str, window: u64, ratio: f64) -> ModelProfile {
    estimated(name, window, 8_192, ratio, 4, 100)
}

/// Qwen: ChatML costs ~5 tokens per message.
fn qwen(name: &str, window: u64, output: u64) -> ModelProfile {
    estimated(name, window, output, 1.05, 5, 100)
}

/// The DeepSeek API: a 128K window.
fn deepseek(name: &str, output: u64) -> ModelProfile {
    estimated(name, 128_000, output, 1.1, 3, 100)
}

/// Mistral: no output limit is published apart from the window (8,192 is a guess).
fn mistral(name: &str, window: u64, ratio: f64) -> ModelProfile {
    estimated(name, window, 8_192, ratio, 3, 50)
}

fn alias(name: &str, of: &ModelProfile) -> ModelProfile {
    ModelProfile {
        name: name.into(),
        ..of.clone()
    }
}

fn builtin_profiles() -> Vec<ModelProfile> {
    let mut table = vec![
        // OpenAI. Windows and output limits from the model pages; images from "Images and
        // vision" (tiles: 85 + 170 for GPT-4o/4.1/4.5, 2833 + 5667 for GPT-4o mini, 75 + 150 for
        // o1/o3, 70 + 140 for GPT-5; patches × 1.62 / 2.46 / 1.72 for 4.1 mini / nano, o4-mini).
        openai("gpt-4o", 128_000, 16_384, true, GPT4O_IMAGES),
        openai("chatgpt-4o-latest", 128_000, 16_384, true, GPT4O_IMAGES),
        openai("gpt-4o-mini", 128_000, 16_384, true, GPT4O_MINI_IMAGES),
        openai("gpt-4.1", 1_047_576, 32_768, true, GPT4O_IMAGES),
        openai("gpt-4.1-mini", 1_047_576, 32_768, true, patches(1.62)),
        openai("gpt-4.1-nano", 1_047_576, 32_768, true, patches(2.46)),
        openai("gpt-4.5-preview", 128_000, 16_384, true, GPT4O_IMAGES),
        openai("o1", 200_000, 100_000, true, O_SERIES_IMAGES),
        openai("o1-pro", 200_000, 100_000, true, O_SERIES_IMAGES),
        openai("o1-preview", 128_000, 32_768, true, O_SERIES_IMAGES),
        openai("o1-mini", 128_000, 65_536, true, O_SERIES_IMAGES),
        openai("o3", 200_000, 100_000, true, O_SERIES_IMAGES),
        openai("o3-pro", 200_000, 100_000, true, O_SERIES_IMAGES),
        openai("o3-mini", 200_000, 100_000, true, O_SERIES_IMAGES),
        openai("o4-mini", 200_000, 100_000, true, patches(1.72)),
        openai("gpt-5", 400_000, 128_000, true, GPT5_IMAGES),
        openai("gpt-5-mini", 400_000, 128_000, true, patches(1.62)),
        openai("gpt-5-nano", 400_000, 128_000, true, patches(2.46)),
        openai("gpt-5-chat-latest", 128_000, 16_384, true, GPT5_IMAGES),
        openai("gpt-5-pro", 400_000, 272_000, true, GPT5_IMAGES),
        openai("gpt-5.1", 400_000, 128_000, true, GPT5_IMAGES),
        openai("gpt-4-turbo", 128_000, 4_096, false, GPT4O_IMAGES),
        openai("gpt-4-turbo-preview", 128_000, 4_096, false, GPT4O_IMAGES),
        openai("gpt-4-1106-preview", 128_000, 4_096, false, GPT4O_IMAGES),
        openai("gpt-4-0125-preview", 128_000, 4_096, false, GPT4O_IMAGES),
        openai("gpt-4-vision-preview", 128_000, 4_096, false, GPT4O_IMAGES),
        openai("gpt-4", 8_192, 8_192, false, GPT4O_IMAGES),
        openai("gpt-4-32k", 32_768, 32_768, false, GPT4O_IMAGES),
        openai("gpt-3.5-turbo", 16_385, 4_096, false, GPT4O_IMAGES),
        openai("gpt-3.5-turbo-instruct", 4_096, 4_096, false, GPT4O_IMAGES),
        // Anthropic: 200k windows; output limits from "Models overview"; tool-use system prompt
        // 346 tokens (264 for Claude 3.5 Haiku).
        claude("claude-3-5-sonnet", 8_192, 346),
        claude("claude-3-7-sonnet", 64_000, 346),
        claude("claude-sonnet-4", 64_000, 346),
        claude("claude-sonnet-4-5", 64_000, 346),
        claude("claude-opus-4", 32_000, 346),
        claude("claude-opus-4-1", 32_000, 346),
        claude("claude-opus-4-5", 64_000, 346),
        claude("claude-opus-4-6", 128_000, 346),
        claude("claude-sonnet-4-6", 64_000, 346),
        claude("claude-3-5-haiku", 8_192, 264),
        claude("claude-haiku-4-5", 64_000, 346),
        claude("claude-3-opus", 4_096, 530),
        claude("claude-3-haiku", 4_096, 264),
        // Google: input limits (the output limit is separate).
        gemini("gemini-1.5-pro", 2_097_152, 8_192),
        gemini("gemini-1.5-flash", 1_048_576, 8_192),
        gemini("gemini-2.0-flash", 1_048_576, 8_192),
        gemini("gemini-2.0-flash-lite", 1_048_576, 8_192),
        gemini("gemini-2.5-pro", 1_048_576, 65_536),
        gemini("gemini-2.5-flash", 1_048_576, 65_536),
        gemini("gemini-2.5-flash-lite", 1_048_576, 65_536),
        // Meta: native windows from the model cards; output limits are set by the host (8,192
        // is a common default — a guess). Llama 3's 128k vocabulary extends cl100k, which
        // counts like o200k on English and code (+0.6 % on the shared traces).
        llama("llama-3.1", 131_072, 1.05),
        llama("llama-3.3", 131_072, 1.05),
        llama("llama-4-scout", 10_000_000, 1.0),
        llama("llama-4-maverick", 1_000_000, 1.0),
        // Qwen: ChatML costs ~5 tokens per message. Qwen2.5 and Qwen3 reach 131,072 tokens with
        // YaRN (32,768 natively); Qwen3-Coder has 262,144 natively.
        qwen("qwen2.5", 131_072, 8_192),
        qwen("qwen3", 131_072, 32_768),
        qwen("qwen3-coder", 262_144, 65_536),
        // DeepSeek API: 128K window; 8K output for chat, 64K for the reasoner.
        deepseek("deepseek-chat", 8_192),
        deepseek("deepseek-reasoner", 65_536),
        // Mistral: 128k windows (Codestral 256k); no output limit is published apart from the
        // window (8,192 is a guess). Mistral Large uses a 32k SentencePiece vocabulary, the
        // others the 131k Tekken one.
        mistral("mistral-large", 131_072, 1.2),
        mistral("mistral-small", 131_072, 1.1),
        mistral("codestral", 262_144, 1.1),
        mistral("ministral", 131_072, 1.1),
    ];
    // Other spellings of the same models.
    let aliases: [(&str, &str); 12] = [
        ("gpt-4.1-2025-04-14", "gpt-4.1"),
        ("claude-3-5-sonnet-latest", "claude-3-5-sonnet"),
        ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("llama3.1", "llama-3.1"),
        ("llama3.3", "llama-3.3"),
        ("llama4", "llama-4-scout"),
        ("qwen-2.5", "qwen2.5"),
        ("deepseek-v3", "deepseek-chat"),
        ("deepseek-r1", "deepseek-reasoner"),
        ("mistral-large-latest", "mistral-large"),
        ("mistral-small-latest", "mistral-small"),
    ];
    for (name, of) in aliases {
        if let Some(profile) = table.iter().find(|p| p.name == of).cloned() {
            table.push(alias(name, &profile));
        }
    }
    table
}

#[cfg(test)]
#[path = "profiles_tests.rs"]
mod tests;
