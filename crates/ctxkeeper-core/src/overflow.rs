//! Recognising "the context is too long" in a provider's error answer.
//!
//! When a request does not fit the model's window, every provider answers differently: OpenAI
//! and Azure OpenAI with `context_length_exceeded`, Anthropic with "prompt is too long", Gemini
//! with "The input token count (N) exceeds the maximum number of tokens allowed (M)", vLLM,
//! DeepSeek and OpenRouter with variants of OpenAI's sentence, llama.cpp's server with
//! `exceed_context_size_error`, Ollama with "prompt too long; exceeded max context length by N
//! tokens", Mistral with "too large for model with N maximum context length". [`classify`]
//! recognises all of them (plus the generic phrases "maximum context", "token limit" and "too
//! many tokens") and extracts the numbers the answer states, so the engine can compact hard and
//! retry with a target instead of guessing.
//!
//! It never mistakes a rate limit (429, "tokens per min"), an authentication error, a request
//! whose *output* budget alone is too large ("max_tokens is too large") or any other 400 for an
//! overflow: retrying those after compaction would only burn another request.
//!
//! The classifier is pure and cheap: one pass over (at most) the first 64 KiB of the body, no
//! regular expressions, no allocation beyond one lowercase copy of the error text.
//!
//! ```
//! use ctxkeeper_core::overflow::{classify, Provider};
//!
//! let body = r#"{"type":"error","error":{"type":"invalid_request_error",
//!     "message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#;
//! let overflow = classify(400, body).expect("an overflow");
//! assert_eq!(overflow.provider, Provider::Anthropic);
//! assert_eq!(overflow.limit, Some(200_000));
//! assert_eq!(overflow.requested, Some(208_310));
//! assert_eq!(overflow.excess(), Some(8_310));
//!
//! // A rate limit is not an overflow, whatever it says about tokens.
//! assert!(classify(429, r#"{"error":{"message":"Rate limit reached on tokens per min (TPM)"}}"#).is_none());
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who most likely produced the error, judged from its wording and shape. Several servers
/// copy OpenAI's sentence word for word (Azure OpenAI, Groq, many proxies); those are reported
/// as [`Provider::OpenAi`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI or an OpenAI-compatible server using its exact wording (Azure OpenAI included).
    OpenAi,
    Anthropic,
    Gemini,
    Vllm,
    Ollama,
    /// llama.cpp's `llama-server`.
    LlamaCpp,
    Mistral,
    DeepSeek,
    OpenRouter,
    /// AWS Bedrock.
    Bedrock,
    /// Only a generic phrase matched ("token limit", "too many tokens", …).
    Unknown,
}

impl Provider {
    /// The snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
            Provider::Vllm => "vllm",
            Provider::Ollama => "ollama",
            Provider::LlamaCpp => "llama_cpp",
            Provider::Mistral => "mistral",
            Provider::DeepSeek => "deepseek",
            Provider::OpenRouter => "openrouter",
            Provider::Bedrock => "bedrock",
            Provider::Unknown => "unknown",
        }
    }
}

/// A recognised context-overflow error and the numbers it stated.
///
/// Every number is what the provider said, in the provider's tokens; any of them may be
/// absent because many answers state only some (Ollama gives only the excess, OpenAI's
/// Responses API gives none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overflow {
    /// Best guess of the provider, from the wording.
    pub provider: Provider,
    /// The model's context window as stated ("maximum context length is 128000 tokens").
    pub limit: Option<u64>,
    /// The total the request asked for: input, plus the output budget when the provider counts
    /// it against the window ("you requested 5000 tokens (4000 in the messages, 1000 in the
    /// completion)").
    pub requested: Option<u64>,
    /// The input part of `requested`, when stated separately.
    pub input: Option<u64>,
    /// The output budget (`max_tokens`) part of `requested`, when stated separately.
    pub output: Option<u64>,
    /// By how much the request exceeded the window, when that is all the provider says
    /// (Ollama).
    pub over_by: Option<u64>,
}

impl Overflow {
    fn new(provider: Provider) -> Overflow {
        Overflow {
            provider,
            limit: None,
            requested: None,
            input: None,
            output: None,
            over_by: None,
        }
    }

    /// How many tokens too many the request was, from whatever the provider stated.
    pub fn excess(&self) -> Option<u64> {
        self.over_by.or_else(|| {
            let (requested, limit) = (self.requested?, self.limit?);
            Some(requested.saturating_sub(limit))
        })
    }

    /// The largest input that would have fitted next to the same output budget: the target
    /// an emergency compaction must reach. `None` when the window or the output budget is
    /// unknown; `Some(0)` means the output budget alone fills the window, so compaction cannot
    /// help and the output budget must shrink instead.
    pub fn max_input_tokens(&self) -> Option<u64> {
        let limit = self.limit?;
        Some(limit.saturating_sub(self.output.unwrap_or(0)))
    }
}

/// The longest prefix of a body that is inspected. Overflow messages are short; a huge body is
/// an echo of the request, and scanning it all would make a cheap check expensive.
const MAX_SCAN: usize = 64 * 1024;

/// Classifies an error answer: `Some` when it says the request does not fit the model's
/// context window. `status` is the HTTP status (0 when unknown, for example an error event in
/// a stream that began with 200); `body` is the raw response body, JSON or plain text.
pub fn classify(status: u16, body: &str) -> Option<Overflow> {
    // Rate limits, authentication, permission and routing errors are never overflows, even
    // when their text mentions tokens ("Request too large ... tokens per min").
    if matches!(status, 401 | 402 | 403 | 404 | 408 | 429) {
        return None;
    }
    let body = head(body, MAX_SCAN);
    let mut text = String::new();
    let mut numbers = JsonNumbers::default();
    match serde_json::from_str::<Value>(body) {
        Ok(value) => collect_text(&value, 0, &mut text, &mut numbers),
        Err(_) => text.push_str(body),
    }
    let text = text.to_ascii_lowercase();
    let t = text.as_str();

    if is_not_overflow(t) {
        return None;
    }
    let provider = recognise(t, &numbers)?;
    let mut overflow = Overflow::new(provider);
    extract_numbers(t, &numbers, &mut overflow);
    Some(overflow)
}

/// Phrases that mark an error as something else even when overflow-like words appear.
fn is_not_overflow(t: &str) -> bool {
    const NOT_OVERFLOW: &[&str] = &[
        // Rate limits and quotas, whatever the status code a proxy rewrote them to.
        "rate limit",
        "rate_limit",
        "ratelimit",
        "tokens per min",
        "tokens per day",
        "per minute",
        "quota",
        "resource_exhausted",
        // The output budget alone is too large: compaction cannot help.
        "max_tokens is too large",
        "max_completion_tokens is too large",
        "completion tokens, whereas you provided",
        "maximum allowed number of output tokens",
        "max_tokens must be less than",
        "max_output_tokens",
    ];
    NOT_OVERFLOW.iter().any(|phrase| t.contains(phrase))
}

/// Decides whether `t` reports an overflow, and whose wording it is.
fn recognise(t: &str, numbers: &JsonNumbers) -> Option<Provider> {
    // Specific wordings first: they also tell who answered.
    const SPECIFIC: &[(&str, Provider)] = &[
        ("exceed_context_size_error", Provider::LlamaCpp),
        ("exceeds the available context size", Provider::LlamaCpp),
        ("exceeded max context length by", Provider::Ollama),
        ("prompt too long; exceeded", Provider::Ollama),
        ("too large for model with", Provider::Mistral),
        ("input token count", Provider::Gemini),
        ("endpoint's maximum context length", Provider::OpenRouter),
        ("middle-out", Provider::OpenRouter),
        (
            "input length and `max_tokens` exceed context limit",
            Provider::Anthropic,
        ),
        ("exceed context limit", Provider::Anthropic),
        ("prompt is too long", Provider::Anthropic),
        ("input is too long for requested model", Provider::Bedrock),
        ("is longer than the model's context length", Provider::Vllm),
        ("context length is only", Provider::Vllm),
        ("context_length_exceeded", Provider::OpenAi),
        ("maximum context length is", Provider::OpenAi),
        ("exceeds the context window", Provider::OpenAi),
    ];
    // Generic phrases (HarnessAgent's list and common variants): an overflow, source unknown.
    const GENERIC: &[&str] = &[
        "maximum context",
        "context length exceeded",
        "context window exceeded",
        "context_window_exceeded",
        "exceeds the context",
        "exceed context window",
        "exceeds context window",
        "exceeds the maximum context",
        "token limit",
        "too many tokens",
        "prompt too long",
        "input too long",
    ];
    let mut provider = SPECIFIC
        .iter()
        .find(|(phrase, _)| t.contains(phrase))
        .map(|&(_, provider)| provider)
        .or_else(|| {
            GENERIC
                .iter()
                .any(|p| t.contains(p))
                .then_some(Provider::Unknown)
        })
        .or_else(|| numbers.n_ctx.map(|_| Provider::LlamaCpp))?;

    // OpenAI's sentence is shared: refine from the shape of the body. OpenRouter wraps any
    // upstream's wording, and it is OpenRouter that answered.
    if numbers.openrouter {
        provider = Provider::OpenRouter;
    } else if provider == Provider::OpenAi || provider == Provider::Unknown {
        if numbers.object_error || numbers.type_bad_request {
            // vLLM (and FastChat-style servers) answer `{"object": "error", ...}` or with the
            // Python exception name as the type.
            provider = Provider::Vllm;
        } else if provider == Provider::OpenAi
            && numbers.code_is_invalid_request
            && t.contains("maximum context length is")
        {
            // DeepSeek copies OpenAI's sentence but sets `code` to the error type.
            provider = Provider::DeepSeek;
        }
    }
    Some(provider)
}

/// Pulls the stated numbers out of the lowercased text.
fn extract_numbers(t: &str, json: &JsonNumbers, o: &mut Overflow) {
    // The window.
    o.limit = first_after(
        t,
        &[
            "maximum context length is",
            "context length is only",
            "maximum number of tokens allowed",
            "model's context length",
            "maximum context length:",
            "token limit:",
            "context window of",
            "must be <=",
        ],
    )
    .or_else(|| num_before(t, "maximum context length"))
    .or(json.n_ctx);

    // The total asked for.
    o.requested = first_after(
        t,
        &[
            "your messages resulted in",
            "for a total of at least",
            "you requested about",
            "you requested",
            "input token count",
            "prompt contains",
            "the input (",
            "input length (",
            "requested tokens (",
            "(requested:",
        ],
    )
    .or(json.n_prompt_tokens);

    // Input and output parts, in their various spellings.
    o.input = first_before(
        t,
        &[
            "in the messages",
            "of text input",
            "in your prompt",
            "input tokens",
        ],
    );
    o.output = first_before(
        t,
        &[
            "in the completion",
            "for the completion",
            "in the output",
            "output tokens",
        ],
    )
    .or_else(|| {
        first_after(
            t,
            &["input tokens plus", "'max_completion_tokens' is too large:"],
        )
    });
    // OpenAI counts function schemas separately: they are input too.
    if let (Some(input), Some(functions)) = (o.input, num_before(t, "in the functions")) {
        o.input = Some(input + functions);
    }

    // Anthropic: "prompt is too long: 208310 tokens > 200000 maximum" and the variant
    // "the prompt is too long: 267657, model maximum context length: 262143".
    if let Some(rest) = after(t, "prompt is too long:") {
        let values = numbers_in(rest, 2);
        if let Some(&requested) = values.first() {
            o.requested = Some(requested);
        }
        if o.limit.is_none() {
            o.limit = values.get(1).copied();
        }
    }
    // Anthropic: "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000".
    if let Some(rest) = after(t, "exceed context limit:")
        && let [input, output, limit] = numbers_in(rest, 3)[..]
    {
        o.input = Some(input);
        o.output = Some(output);
        o.limit = Some(limit);
        o.requested = Some(input + output);
    }
    // Text Generation Inference: "`inputs` tokens + `max_new_tokens` must be <= 32769. Given:
    // 32000 `inputs` tokens and 2000 `max_new_tokens`".
    if let Some(rest) = after(t, "given:")
        && let [input, output] = numbers_in(rest, 2)[..]
    {
        o.input = Some(input);
        o.output = Some(output);
    }
    // Ollama states only the excess.
    o.over_by = num_after(t, "exceeded max context length by");

    // Fill what follows from the rest.
    match (o.requested, o.input, o.output) {
        (None, Some(input), output) => o.requested = Some(input + output.unwrap_or(0)),
        (Some(requested), None, Some(output)) => o.input = requested.checked_sub(output),
        _ => {}
    }
    // A request that was *not* over the limit by the stated numbers means the numbers were
    // misread (an unrelated figure); never report a negative excess as data.
    if let (Some(requested), Some(limit)) = (o.requested, o.limit)
        && requested < limit
        && o.output.is_none()
        && o.over_by.is_none()
    {
        o.requested = None;
    }
}

/// The number after the first of `needles` that is followed by one.
fn first_after(t: &str, needles: &[&str]) -> Option<u64> {
    needles.iter().find_map(|needle| num_after(t, needle))
}

/// The number before the first of `needles` that is preceded by one.
fn first_before(t: &str, needles: &[&str]) -> Option<u64> {
    needles.iter().find_map(|needle| num_before(t, needle))
}

/// Structured facts gathered while walking a JSON body.
#[derive(Debug, Default)]
struct JsonNumbers {
    /// llama.cpp's `n_ctx` / `n_prompt_tokens` fields.
    n_ctx: Option<u64>,
    n_prompt_tokens: Option<u64>,
    /// `{"object": "error"}` (vLLM).
    object_error: bool,
    /// `"type": "BadRequestError"` (vLLM's newer bodies).
    type_bad_request: bool,
    /// `"code": "invalid_request_error"` (DeepSeek).
    code_is_invalid_request: bool,
    /// OpenRouter wraps upstream errors with `metadata.provider_name` / `metadata.raw`.
    openrouter: bool,
}

/// Appends every string of `value` to `out` (one per line), decoding strings that are
/// themselves JSON (proxies such as OpenRouter and LiteLLM nest the upstream body as a
/// string), and records the structured facts.
fn collect_text(value: &Value, depth: usize, out: &mut String, facts: &mut JsonNumbers) {
    if depth > 8 {
        return;
    }
    match value {
        Value::String(s) => {
            let trimmed = s.trim_start();
            if depth < 6
                && (trimmed.starts_with('{') || trimmed.starts_with('['))
                && let Ok(inner) = serde_json::from_str::<Value>(trimmed)
            {
                collect_text(&inner, depth + 1, out, facts);
                return;
            }
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(items) => {
            for item in items {
                collect_text(item, depth + 1, out, facts);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                match (key.as_str(), item) {
                    ("n_ctx", Value::Number(n)) => facts.n_ctx = n.as_u64(),
                    ("n_prompt_tokens", Value::Number(n)) => facts.n_prompt_tokens = n.as_u64(),
                    ("object", Value::String(s)) if s == "error" => facts.object_error = true,
                    ("type", Value::String(s)) if s == "BadRequestError" => {
                        facts.type_bad_request = true;
                    }
                    ("code", Value::String(s)) if s == "invalid_request_error" => {
                        facts.code_is_invalid_request = true;
                    }
                    ("provider_name", _) => facts.openrouter = true,
                    _ => {}
                }
                collect_text(item, depth + 1, out, facts);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The text after the first occurrence of `needle`.
fn after<'a>(t: &'a str, needle: &str) -> Option<&'a str> {
    t.find(needle).map(|at| &t[at + needle.len()..])
}

/// The number that follows `needle`, skipping a few separator characters (`: (="'` and
/// "about").
fn num_after(t: &str, needle: &str) -> Option<u64> {
    let rest = after(t, needle)?;
    let rest = rest.trim_start_matches([' ', ':', '(', '=', '"', '\'', '`']);
    let rest = rest.strip_prefix("about ").unwrap_or(rest);
    parse_leading_number(rest)
}

/// The number that ends just before `needle` (spaces allowed between them).
fn num_before(t: &str, needle: &str) -> Option<u64> {
    let at = t.find(needle)?;
    let before = t[..at].trim_end_matches([' ', '(']);
    let bytes = before.as_bytes();
    let mut start = bytes.len();
    while start > 0 && (bytes[start - 1].is_ascii_digit() || bytes[start - 1] == b',') {
        start -= 1;
    }
    let digits = before[start..].trim_start_matches(',');
    if digits.is_empty() {
        return None;
    }
    parse_leading_number(digits)
}

/// Parses a number at the start of `s`; thousands separators (`128,000`) are allowed.
fn parse_leading_number(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    let mut value: u64 = 0;
    let mut digits = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_digit() {
            value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            digits += 1;
        } else if b == b','
            && digits > 0
            && bytes.len() > i + 3
            && bytes[i + 1..i + 4].iter().all(u8::is_ascii_digit)
            && bytes.get(i + 4).is_none_or(|c| !c.is_ascii_digit())
        {
            // A thousands separator: exactly three digits follow.
        } else {
            break;
        }
        i += 1;
    }
    (digits > 0).then_some(value)
}

/// The first `n` numbers in `s`, stopping at the end of the sentence.
fn numbers_in(s: &str, n: usize) -> Vec<u64> {
    let sentence = s.split(['.', '\n']).next().unwrap_or(s);
    let bytes = sentence.as_bytes();
    let mut found = Vec::with_capacity(n);
    let mut i = 0;
    while i < bytes.len() && found.len() < n {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b',') {
                i += 1;
            }
            if let Some(value) = parse_leading_number(&sentence[start..i]) {
                found.push(value);
            }
        } else {
            i += 1;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_with_separators_and_stop_at_words() {
        assert_eq!(parse_leading_number("128,000 tokens"), Some(128_000));
        assert_eq!(parse_leading_number("4096, however"), Some(4096));
        assert_eq!(parse_leading_number("tokens"), None);
        assert_eq!(
            num_before("(3245 in the messages", "in the messages"),
            Some(3245)
        );
        assert_eq!(num_after("length is 8192 tokens", "length is"), Some(8192));
        assert_eq!(
            numbers_in(" 178959 + 64000 > 200000, decrease", 3),
            vec![178_959, 64_000, 200_000]
        );
    }

    #[test]
    fn huge_numbers_do_not_overflow() {
        assert_eq!(parse_leading_number("99999999999999999999999"), None);
    }

    #[test]
    fn plain_text_bodies_are_classified() {
        let o = classify(
            400,
            "This model's maximum context length is 4097 tokens. However, your messages resulted in 4294 tokens.",
        );
        assert_eq!(
            o.map(|o| (o.limit, o.requested)),
            Some((Some(4097), Some(4294)))
        );
    }

    #[test]
    fn an_unrelated_400_is_not_an_overflow() {
        assert!(
            classify(
                400,
                r#"{"error":{"message":"Invalid value for 'temperature'"}}"#
            )
            .is_none()
        );
        assert!(classify(400, "").is_none());
        assert!(classify(500, "internal error").is_none());
    }

    #[test]
    fn the_scan_is_bounded_and_cuts_on_a_char_boundary() {
        let body = format!("{}é prompt is too long", "x".repeat(MAX_SCAN - 1));
        assert!(classify(400, &body).is_none());
        assert_eq!(head("héllo", 2), "h");
    }
}
