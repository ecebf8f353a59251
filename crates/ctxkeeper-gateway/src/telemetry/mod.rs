//! OpenTelemetry traces of the gateway's model calls, in the GenAI semantic conventions
//! (open-telemetry/semantic-conventions-genai v0.1.0, the `gen_ai.*` set of
//! semantic-conventions v1.41.0 carried on; still of *development* stability), exported over
//! OTLP/HTTP with protobuf bodies.
//!
//! Off unless configured: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended), or `endpoint` in
//! `[gateway.telemetry]` ([`TelemetrySettings`](crate::config::TelemetrySettings)).
//! What is recorded ([`request`]): one `chat {model}` CLIENT span per upstream call, with the
//! provider's usage report ([`usage`]); one `compaction` INTERNAL span under it per compaction
//! the call's step announced, with the figures of the very event the session's subscribers
//! received. A client's `traceparent` / `tracestate` ([`context`]) is continued and passed
//! upstream with the gateway's span as the parent. An MCP tool call served at `/mcp` is one
//! `execute_tool {tool}` SERVER span ([`tool`]), in the caller's trace. Spans leave through a
//! bounded queue and one background task ([`export`]); recording never waits, and a collector
//! that is down costs a request nothing.
//!
//! The cache-stall alarm ([`CacheStallRule`]) watches each session's cache reads whether or
//! not spans are exported.
//!
//! ```
//! use ctxkeeper_gateway::telemetry::TelemetryConfig;
//!
//! let config = TelemetryConfig::from_endpoint("http://collector:4318").unwrap();
//! assert_eq!(config.traces_url, "http://collector:4318/v1/traces");
//! assert!(TelemetryConfig::from_endpoint("collector:4317").is_err());
//! ```

pub mod content;
pub mod context;
pub mod export;
pub mod request;
pub mod span;
pub mod tool;
pub mod usage;

use std::sync::Arc;
use std::time::Duration;

pub use context::{SpanId, TraceContext};
pub use export::Exporter;
pub use request::{RequestTrace, SummarySpan, SummaryTrace};
pub use span::{SpanKind, SpanRecord};
pub use tool::ToolCallSpan;
pub use usage::UsageReport;

/// Defaults of the batch span processor, as the OpenTelemetry SDKs name them
/// (`OTEL_BSP_*`), and of the export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`).
pub const DEFAULT_MAX_QUEUE: usize = 2048;
pub const DEFAULT_MAX_BATCH: usize = 512;
pub const DEFAULT_SCHEDULE_DELAY: Duration = Duration::from_secs(5);
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default `service.name`.
pub const DEFAULT_SERVICE_NAME: &str = "ctxkeeper";

/// Where spans go and how they are batched, once resolved from the settings.
#[derive(Clone, PartialEq)]
pub struct TelemetryConfig {
    /// The collector's traces URL (`…/v1/traces`).
    pub traces_url: String,
    /// Headers sent with every export (credentials of a hosted collector).
    pub headers: Vec<(String, String)>,
    pub service_name: String,
    /// More resource attributes (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<(String, String)>,
    /// Record the messages sent (`gen_ai.input.messages`): off unless opted in.
    pub capture_content: bool,
    /// Spans waiting for export at most; past it new spans are dropped (and counted).
    pub max_queue: usize,
    /// Spans per export request at most.
    pub max_batch: usize,
    /// How long a batch waits to fill before it is sent.
    pub schedule_delay: Duration,
    /// Time allowed for one export request.
    pub export_timeout: Duration,
}

impl std::fmt::Debug for TelemetryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are credentials: only their names are shown.
        let headers: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("TelemetryConfig")
            .field("traces_url", &self.traces_url)
            .field("headers", &headers)
            .field("service_name", &self.service_name)
            .field("resource", &self.resource)
            .field("capture_content", &self.capture_content)
            .field("max_queue", &self.max_queue)
            .field("max_batch", &self.max_batch)
            .field("schedule_delay", &self.schedule_delay)
            .field("export_timeout", &self.export_timeout)
            .finish()
    }
}

impl TelemetryConfig {
    /// Export to the traces URL `url`, used as it is, with the defaults.
    pub fn to(url: &str) -> TelemetryConfig {
        TelemetryConfig {
            traces_url: url.to_string(),
            headers: Vec::new(),
            service_name: DEFAULT_SERVICE_NAME.to_string(),
            resource: Vec::new(),
            capture_content: false,
            max_queue: DEFAULT_MAX_QUEUE,
            max_batch: DEFAULT_MAX_BATCH,
            schedule_delay: DEFAULT_SCHEDULE_DELAY,
            export_timeout: DEFAULT_EXPORT_TIMEOUT,
        }
    }

    /// Export to the collector at the base URL `endpoint` (`/v1/traces` is appended, as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` means).
    pub fn from_endpoint(endpoint: &str) -> Result<TelemetryConfig, String> {
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        check_url(&url)?;
        Ok(TelemetryConfig::to(&url))
    }
}

/// An http:// or https:// URL, or why not.
pub fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "{url:?} must be an http:// or https:// URL (spans are exported over OTLP/HTTP)"
        ));
    }
    Ok(())
}

/// `key=value,key=value` pairs as `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES`
/// give them (values percent-encoded); `what` names the setting in the error.
pub fn parse_pairs(items: &[String], what: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    for item in items.iter().flat_map(|item| item.split(',')) {
        if item.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("{what}: {item:?} is not KEY=VALUE"));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("{what}: {item:?} names no key"));
        }
        let value = percent_encoding::percent_decode_str(value.trim())
            .decode_utf8()
            .map_err(|_| format!("{what}: the value of {key:?} is not UTF-8 once decoded"))?;
        pairs.push((key.to_string(), value.into_owned()));
    }
    Ok(pairs)
}

/// The running exporter and what every request's trace needs of the configuration.
#[derive(Debug, Clone)]
pub struct Telemetry {
    exporter: Arc<Exporter>,
    capture_content: bool,
}

impl Telemetry {
    /// Starts exporting as `config` says; `None` outside a runtime (with a warning).
    pub fn start(
        config: &TelemetryConfig,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Option<Telemetry> {
        let Some(exporter) = Exporter::start(config, metrics) else {
            tracing::warn!("telemetry off: no async runtime to export spans from");
            return None;
        };
        tracing::info!(url = %config.traces_url, "exporting OpenTelemetry traces");
        Some(Telemetry {
            exporter: Arc::new(exporter),
            capture_content: config.capture_content,
        })
    }

    /// The trace of a request arriving with `headers` for `wire` at the upstream `url`.
    pub fn begin(
        &self,
        headers: &axum::http::HeaderMap,
        wire: ctxkeeper_core::formats::Wire,
        url: &str,
    ) -> Option<RequestTrace> {
        RequestTrace::begin(
            self.exporter.clone(),
            self.capture_content,
            headers,
            wire,
            url,
        )
    }

    /// Records the `execute_tool` span of an MCP tool call (unless its caller's trace is not
    /// sampled).
    pub fn tool_call(&self, call: &ToolCallSpan) {
        if let Some(span) = call.record() {
            self.exporter.record(span);
        }
    }
}

/// The cache-stall alarm: a session is stalled when, on `calls` consecutive calls, the
/// provider's prompt cache served less than half of the input and at least
/// `min_fresh_tokens` input tokens were not served from it: its prefix keeps changing, so
/// every call pays for nearly its whole input again. (Appending a large tool output to a cached
/// history is not a miss: the cache still serves most of the input.) Calls whose answer
/// reports no cache figures count neither way, so a provider without prompt caching never
/// raises it, and neither do calls below `min_fresh_tokens`; one call the cache served at
/// least half of ends the stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStallRule {
    /// Consecutive missing calls that raise the alarm (0 turns it off).
    pub calls: u32,
    pub min_fresh_tokens: u64,
}

impl Default for CacheStallRule {
    fn default() -> CacheStallRule {
        CacheStallRule {
            calls: 3,
            min_fresh_tokens: 4096,
        }
    }
}

/// A session's run of calls without cache reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStreak {
    /// Consecutive calls with many fresh tokens and no cache read.
    pub misses: u32,
    /// Fresh input tokens over those calls.
    pub fresh_tokens: u64,
}

/// What one call did to a session's streak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheVerdict {
    /// No alarm.
    Fine,
    /// This call made the session stalled: raise the alarm (event and metric) now.
    Stalled,
    /// The session was already stalled and still is.
    StillStalled,
}

impl CacheStallRule {
    /// Feeds one call's usage into `streak`.
    pub fn observe(&self, streak: &mut CacheStreak, report: &UsageReport) -> CacheVerdict {
        if self.calls == 0 {
            return CacheVerdict::Fine;
        }
        let (Some(read), Some(fresh)) = (report.cache_read_tokens, report.fresh_input_tokens())
        else {
            return CacheVerdict::Fine;
        };
        let input = report.input_tokens.unwrap_or(0);
        if read.saturating_mul(2) >= input {
            *streak = CacheStreak::default();
            return CacheVerdict::Fine;
        }
        if fresh < self.min_fresh_tokens {
            return if streak.misses >= self.calls {
                CacheVerdict::StillStalled
            } else {
                CacheVerdict::Fine
            };
        }
        streak.misses = streak.misses.saturating_add(1);
        streak.fresh_tokens = streak.fresh_tokens.saturating_add(fresh);
        match streak.misses.cmp(&self.calls) {
            std::cmp::Ordering::Less => CacheVerdict::Fine,
            std::cmp::Ordering::Equal => CacheVerdict::Stalled,
            std::cmp::Ordering::Greater => CacheVerdict::StillStalled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, read: Option<u64>) -> UsageReport {
        UsageReport {
            input_tokens: Some(input),
            cache_read_tokens: read,
            ..UsageReport::default()
        }
    }

    #[test]
    fn a_session_without_cache_reads_stalls_once_and_recovers_on_a_read() {
        let rule = CacheStallRule {
            calls: 3,
            min_fresh_tokens: 1000,
        };
        let mut streak = CacheStreak::default();
        let verdicts: Vec<_> = [
            usage(5000, Some(0)),
            usage(500, Some(0)), // small: counts neither way
            usage(6000, None),   // no cache report: counts neither way
            usage(5000, Some(0)),
            usage(5000, Some(0)), // the third miss
            usage(5000, Some(0)),
            usage(5000, Some(2500)), // the cache serves half: that ends it
            usage(5000, Some(3)),    // a few tokens of a broken prefix are still a miss
        ]
        .iter()
        .map(|report| rule.observe(&mut streak, report))
        .collect();
        use CacheVerdict::*;
        assert_eq!(
            verdicts,
            [Fine, Fine, Fine, Fine, Stalled, StillStalled, Fine, Fine]
        );
        assert_eq!(streak.misses, 1);
        let off = CacheStallRule {
            calls: 0,
            min_fresh_tokens: 0,
        };
        assert_eq!(off.observe(&mut streak, &usage(9000, Some(0))), Fine);
    }

    #[test]
    fn pairs_are_percent_decoded_and_bad_ones_named() {
        let pairs = parse_pairs(
            &["api-key=a%20b,x-team=core".into(), "tenant=t".into()],
            "headers",
        )
        .unwrap();
        assert_eq!(
            pairs,
            [
                ("api-key".to_string(), "a b".to_string()),
                ("x-team".into(), "core".into()),
                ("tenant".into(), "t".into())
            ]
        );
        let err = parse_pairs(&["novalue".into()], "OTEL_EXPORTER_OTLP_HEADERS").unwrap_err();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_HEADERS") && err.contains("KEY=VALUE"),
            "{err}"
        );
    }

    #[test]
    fn header_values_never_show_in_debug_output() {
        let mut config = TelemetryConfig::to("http://c/v1/traces");
        config.headers = vec![("authorization".into(), "Bearer secret-token".into())];
        let shown = format!("{config:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("secret-token"),
            "{shown}"
        );
    }
}
