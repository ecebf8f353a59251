//! Calibration of estimates from the usage the provider reports.
//!
//! Every response tells how many input tokens the provider actually counted. Comparing that with
//! our own count of the same request gives a correction factor; [`Calibration`] keeps a bounded,
//! smoothed factor and applies it to later counts. Exact OpenAI tokenizers need little (the
//! chat framing and tool rendering are approximations), estimated tokenizers (Claude, Gemini,
//! open-weight models) more; the hook works the same for all.
//!
//! The factor starts at 1. The first observations are averaged (so one early request does not
//! decide alone), later ones enter an exponential moving average with weight `smoothing`
//! (0.3 by default). Each observed ratio and the factor itself are clamped to
//! [[`MIN_FACTOR`], [`MAX_FACTOR`]] = [0.5, 2.0], so a broken report cannot run away with it.
//! Requests of fewer than [`MIN_OBSERVED_TOKENS`] estimated tokens are ignored: fixed
//! overheads dominate them.
//!
//! ```
//! use ctxkeeper_core::tokens::Calibration;
//!
//! let mut calibration = Calibration::new();
//! assert_eq!(calibration.adjust(1_000), 1_000);
//! // The provider counted 10 % more than we estimated, twice.
//! calibration.observe(10_000, 11_000);
//! calibration.observe(20_000, 22_000);
//! assert!((calibration.factor() - 1.1).abs() < 1e-9);
//! assert_eq!(calibration.adjust(1_000), 1_100);
//! ```

use serde_json::Value;

/// The smallest correction factor.
pub const MIN_FACTOR: f64 = 0.5;
/// The largest correction factor.
pub const MAX_FACTOR: f64 = 2.0;
/// The default weight of a new observation once the average has warmed up.
pub const DEFAULT_SMOOTHING: f64 = 0.3;
/// Requests estimated below this many tokens are not used for calibration.
pub const MIN_OBSERVED_TOKENS: u64 = 64;

/// A bounded, smoothed correction factor learned from provider-reported usage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    factor: f64,
    smoothing: f64,
    observations: u64,
}

impl Default for Calibration {
    fn default() -> Calibration {
        Calibration::new()
    }
}

impl Calibration {
    /// A calibration with factor 1 and the default smoothing.
    pub fn new() -> Calibration {
        Calibration::with_smoothing(DEFAULT_SMOOTHING)
    }

    /// A calibration whose warmed-up updates give a new observation weight `smoothing`
    /// (clamped to [0.01, 1]; 1 means "trust only the last observation").
    pub fn with_smoothing(smoothing: f64) -> Calibration {
        let smoothing = if smoothing.is_finite() {
            smoothing.clamp(0.01, 1.0)
        } else {
            DEFAULT_SMOOTHING
        };
        Calibration {
            factor: 1.0,
            smoothing,
            observations: 0,
        }
    }

    /// Learns from one request: `estimated` is our count of it (before calibration),
    /// `reported` the input tokens the provider reported for it (see
    /// [`reported_input_tokens`]). Returns the new factor. Requests estimated below
    /// [`MIN_OBSERVED_TOKENS`] and reports of zero are ignored.
    pub fn observe(&mut self, estimated: u64, reported: u64) -> f64 {
        if estimated < MIN_OBSERVED_TOKENS || reported == 0 {
            return self.factor;
        }
        let ratio = (reported as f64 / estimated as f64).clamp(MIN_FACTOR, MAX_FACTOR);
        self.observations += 1;
        // A plain average while there are few observations, then an exponential moving average.
        let weight = (1.0 / self.observations as f64).max(self.smoothing);
        self.factor = (self.factor * (1.0 - weight) + ratio * weight).clamp(MIN_FACTOR, MAX_FACTOR);
        self.factor
    }

    /// [`observe`](Self::observe) with the input tokens read from a provider's usage JSON;
    /// `None` (and nothing learned) when it holds no input count.
    pub fn observe_usage(&mut self, estimated: u64, usage: &Value) -> Option<f64> {
        reported_input_tokens(usage).map(|reported| self.observe(estimated, reported))
    }

    /// The current correction factor.
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// How many requests the factor was learned from.
    pub fn observations(&self) -> u64 {
        self.observations
    }

    /// A count corrected by the factor, rounded up.
    pub fn adjust(&self, count: u64) -> u64 {
        // Round up, but not for float noise (1000 × 1.1 is 1100.0000000000002). `as`
        // saturates; counts are far below 2^53, where f64 stays exact.
        (count as f64 * self.factor - 1e-6).ceil().max(0.0) as u64
    }

    /// Back to factor 1, forgetting every observation.
    pub fn reset(&mut self) {
        self.factor = 1.0;
        self.observations = 0;
    }
}

/// The total input tokens in a provider's usage report: a whole response body or just its
/// `usage` / `usageMetadata` object.
///
/// - OpenAI Chat Completions: `usage.prompt_tokens` (cached tokens are included);
/// - OpenAI Responses: `usage.input_tokens` (cached tokens are included);
/// - Anthropic: `usage.input_tokens + cache_creation_input_tokens + cache_read_input_tokens`
///   (Anthropic's `input_tokens` leaves out the cached part);
/// - Gemini: `usageMetadata.promptTokenCount`.
///
/// ```
/// use ctxkeeper_core::tokens::reported_input_tokens;
/// use serde_json::json;
///
/// let anthropic = json!({"usage": {"input_tokens": 50, "cache_read_input_tokens": 1000,
///                                  "cache_creation_input_tokens": 200, "output_tokens": 9}});
/// assert_eq!(reported_input_tokens(&anthropic), Some(1250));
/// assert_eq!(reported_input_tokens(&json!({"prompt_tokens": 12})), Some(12));
/// assert_eq!(reported_input_tokens(&json!({"output_tokens": 12})), None);
/// ```
pub fn reported_input_tokens(usage: &Value) -> Option<u64> {
    let usage = usage
        .get("usage")
        .or_else(|| usage.get("usageMetadata"))
        .unwrap_or(usage);
    let field = |name: &str| usage.get(name).and_then(Value::as_u64);
    if let Some(prompt) = field("prompt_tokens").or_else(|| field("promptTokenCount")) {
        return Some(prompt);
    }
    let input = field("input_tokens")?;
    let cached = field("cache_creation_input_tokens").unwrap_or(0)
        + field("cache_read_input_tokens").unwrap_or(0);
    Some(input + cached)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn starts_neutral() {
        let calibration = Calibration::new();
        assert_eq!(calibration.factor(), 1.0);
        assert_eq!(calibration.observations(), 0);
        assert_eq!(calibration.adjust(12_345), 12_345);
    }

    #[test]
    fn converges_to_a_steady_ratio() {
        let mut calibration = Calibration::new();
        for _ in 0..30 {
            calibration.observe(10_000, 12_000);
        }
        assert!(
            (calibration.factor() - 1.2).abs() < 1e-6,
            "{}",
            calibration.factor()
        );
        assert_eq!(calibration.adjust(1_000), 1_200);
    }

    #[test]
    fn smooths_noise_and_follows_a_change() {
        let mut calibration = Calibration::new();
        for i in 0..20 {
            let reported = if i % 2 == 0 { 10_500 } else { 9_500 };
            calibration.observe(10_000, reported);
        }
        assert!(
            (calibration.factor() - 1.0).abs() < 0.03,
            "{}",
            calibration.factor()
        );
        for _ in 0..20 {
            calibration.observe(10_000, 13_000);
        }
        assert!(
            (calibration.factor() - 1.3).abs() < 0.01,
            "{}",
            calibration.factor()
        );
    }

    #[test]
    fn is_bounded() {
        let mut calibration = Calibration::new();
        calibration.observe(1_000, 1_000_000);
        assert_eq!(calibration.factor(), MAX_FACTOR);
        let mut calibration = Calibration::new();
        for _ in 0..10 {
            calibration.observe(1_000_000, 1);
        }
        assert_eq!(calibration.factor(), MIN_FACTOR);
    }

    #[test]
    fn ignores_tiny_and_empty_observations() {
        let mut calibration = Calibration::new();
        calibration.observe(10, 30);
        calibration.observe(0, 30);
        calibration.observe(10_000, 0);
        assert_eq!((calibration.factor(), calibration.observations()), (1.0, 0));
    }

    #[test]
    fn smoothing_one_trusts_the_last_observation() {
        let mut calibration = Calibration::with_smoothing(1.0);
        calibration.observe(1_000, 1_500);
        calibration.observe(1_000, 800);
        assert!((calibration.factor() - 0.8).abs() < 1e-9);
        calibration.reset();
        assert_eq!(calibration, Calibration::with_smoothing(1.0));
        assert_eq!(Calibration::with_smoothing(f64::NAN), Calibration::new());
    }

    #[test]
    fn reads_every_providers_usage() {
        for (usage, expected) in [
            (
                json!({"usage": {"prompt_tokens": 120, "completion_tokens": 5}}),
                Some(120),
            ),
            (
                json!({"usage": {"input_tokens": 300, "input_tokens_details": {"cached_tokens": 200}}}),
                Some(300),
            ),
            (
                json!({"input_tokens": 10, "cache_creation_input_tokens": null, "cache_read_input_tokens": 90}),
                Some(100),
            ),
            (
                json!({"usageMetadata": {"promptTokenCount": 77, "candidatesTokenCount": 3}}),
                Some(77),
            ),
            (json!({"usage": {}}), None),
            (json!("nope"), None),
        ] {
            assert_eq!(reported_input_tokens(&usage), expected, "{usage}");
        }
        let mut calibration = Calibration::new();
        assert_eq!(
            calibration.observe_usage(1_000, &json!({"prompt_tokens": 1_100})),
            Some(1.1)
        );
        assert_eq!(calibration.observe_usage(1_000, &json!({})), None);
    }
}
