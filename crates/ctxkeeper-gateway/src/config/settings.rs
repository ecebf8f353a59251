//! [`GatewaySettings`]: every setting of the gateway, declared once, every one optional.
//!
//! The same struct is the `[gateway]` table of a configuration file (serde), the options of
//! `ctxkeeper serve` with their environment variables (clap: `--body-limit` or
//! `CTXKEEPER_BODY_LIMIT`), and what `ctxkeeper config show` prints
//! ([`GatewaySettings::effective`]). The layers are merged once, each over the one before,
//! file ← environment ← flags ([`GatewaySettings::over`]; clap itself prefers a flag to its
//! environment variable), and the result is applied to the defaults in one place
//! ([`GatewaySettings::apply`]), which names the setting in every error.
//!
//! ```
//! use ctxkeeper_gateway::config::{GatewayConfig, GatewaySettings};
//!
//! let file: GatewaySettings = toml::from_str("body_limit = 1000\nrepair = true").unwrap();
//! let flags = GatewaySettings { body_limit: Some(2000), ..GatewaySettings::default() };
//! let settings = file.over(flags);
//! let config = settings.apply(GatewayConfig::new("/tmp/ctxkeeper")).unwrap();
//! assert_eq!(config.body_limit, 2000, "the flag wins over the file");
//! assert!(config.repair, "what the flags leave unsaid comes from the file");
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use ctxkeeper_core::engine::presets;
use serde::{Deserialize, Deserializer, Serialize};

use super::{ConfigError, GatewayConfig, listen_address, prepare_share};
use crate::assembly::ContextProvider;
use crate::compaction_items::ResponsesCompaction;
use crate::summarize::SummarizerChoice;
use crate::telemetry::{TelemetryConfig, check_url, parse_pairs};

/// Every setting of the gateway; `None` leaves it to the layer below (in the end, to
/// [`GatewayConfig::new`]'s defaults).
#[derive(Debug, Clone, Default, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySettings {
    /// The address to listen on, HOST:PORT; a host name such as localhost is resolved (port 0
    /// picks a free port; default 127.0.0.1:8787).
    #[arg(long, value_name = "ADDR", env = "CTXKEEPER_LISTEN", value_parser = listen_address)]
    #[serde(default, deserialize_with = "listen_setting")]
    pub listen: Option<SocketAddr>,

    /// The OpenAI-compatible upstream, including its /v1 (default https://api.openai.com/v1).
    #[arg(long, value_name = "URL", env = "CTXKEEPER_UPSTREAM")]
    pub upstream: Option<String>,

    /// The Anthropic upstream, without /v1 (default https://api.anthropic.com).
    #[arg(long, value_name = "URL", env = "CTXKEEPER_ANTHROPIC_UPSTREAM")]
    pub anthropic_upstream: Option<String>,

    /// The session store: sqlite://PATH (default: sessions.db in the data directory),
    /// postgres://…, mysql://…, redis://…, file://DIR, memory://.
    #[arg(long, value_name = "URL", env = "CTXKEEPER_STORE")]
    pub store: Option<String>,

    /// The archive for compacted content: a directory (default: workspace/ in the data
    /// directory) or an archive URL (postgres://…, memory://; s3://…, gs://…, az://… in a
    /// binary built with `--features cloud`).
    #[arg(long, value_name = "DIR", env = "CTXKEEPER_WORKSPACE")]
    pub workspace: Option<String>,

    /// The context policy: default, none, agentscope, reme-compact, reme-compress, reme-auto,
    /// agentrail, cowagent, harness.
    #[arg(long, value_name = "NAME", env = "CTXKEEPER_POLICY")]
    pub policy: Option<String>,

    /// Enables the admin API with this bearer token.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "CTXKEEPER_ADMIN_TOKEN",
        hide_env_values = true
    )]
    #[serde(default, skip_serializing)]
    pub admin_token: Option<String>,

    /// Honour x-ctxkeeper-tenant from every client. Only behind a proxy that authenticates
    /// clients and sets (or strips) that header itself.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new(),
          env = "CTXKEEPER_TRUST_TENANT_HEADER")]
    pub trust_tenant_header: Option<bool>,

    /// A tenant-scoped token, TENANT=TOKEN (repeatable): its bearer reaches only TENANT, on
    /// model calls (x-ctxkeeper-tenant-token), events, /mcp and the admin API. In a file, a
    /// table `tenant_tokens = { TENANT = "TOKEN" }`.
    #[arg(
        long = "tenant-token",
        value_name = "TENANT=TOKEN",
        env = "CTXKEEPER_TENANT_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    #[serde(default, skip_serializing, deserialize_with = "token_table")]
    pub tenant_tokens: Option<Vec<String>>,

    /// The largest request body accepted, in bytes (default 32 MiB).
    #[arg(long, value_name = "BYTES", env = "CTXKEEPER_BODY_LIMIT")]
    pub body_limit: Option<usize>,

    /// Request body bytes held at once over all requests; past it requests get 503 with
    /// Retry-After (default 1 GiB).
    #[arg(long, value_name = "BYTES", env = "CTXKEEPER_MAX_INFLIGHT_BYTES")]
    pub max_inflight_bytes: Option<usize>,

    /// Seconds allowed to connect to the upstream (default 10).
    #[arg(
        long = "connect-timeout",
        value_name = "SECONDS",
        env = "CTXKEEPER_CONNECT_TIMEOUT"
    )]
    pub connect_timeout_secs: Option<u64>,

    /// Seconds allowed between two reads from the upstream (default 300).
    #[arg(
        long = "upstream-timeout",
        value_name = "SECONDS",
        env = "CTXKEEPER_UPSTREAM_TIMEOUT"
    )]
    pub upstream_timeout_secs: Option<u64>,

    /// Seconds allowed for a whole upstream exchange, streamed answers included (default 1800).
    #[arg(
        long = "upstream-deadline",
        value_name = "SECONDS",
        env = "CTXKEEPER_UPSTREAM_DEADLINE"
    )]
    pub upstream_deadline_secs: Option<u64>,

    /// Seconds a client has to send a request's headers (default 10).
    #[arg(
        long = "header-timeout",
        value_name = "SECONDS",
        env = "CTXKEEPER_HEADER_TIMEOUT"
    )]
    pub header_timeout_secs: Option<u64>,

    /// Seconds a client has to send a request's body (default 60).
    #[arg(
        long = "body-timeout",
        value_name = "SECONDS",
        env = "CTXKEEPER_BODY_TIMEOUT"
    )]
    pub body_timeout_secs: Option<u64>,

    /// Seconds a warm session may sit idle in memory before it is dropped; it reloads from the
    /// store (default 1800).
    #[arg(
        long = "session-idle",
        value_name = "SECONDS",
        env = "CTXKEEPER_SESSION_IDLE"
    )]
    pub session_idle_secs: Option<u64>,

    /// Sessions kept warm in memory before idle ones are dropped (default 10000).
    #[arg(long, value_name = "N", env = "CTXKEEPER_SESSION_CACHE")]
    pub session_cache: Option<usize>,

    /// Bytes of request bodies whose parsed messages are kept, so that a session's next
    /// request parses only what it adds (default 128 MiB; 0 parses every body in full).
    #[arg(long, value_name = "BYTES", env = "CTXKEEPER_RESENT_PREFIX_BYTES")]
    pub resent_prefix_bytes: Option<usize>,

    /// Bodies of a known session from this size on go upstream while they arrive, their last
    /// byte held until the gateway decides (default 256 KiB; 0 reads every body whole first).
    #[arg(
        long = "forward-early-from",
        value_name = "BYTES",
        env = "CTXKEEPER_FORWARD_EARLY_FROM"
    )]
    pub forward_early_from_bytes: Option<usize>,

    /// Long-term memory: each tenant's MEMORY.md and memory/YYYY-MM-DD.md in the workspace
    /// directory receive the facts flushed before each compaction (default: on when the
    /// policy wants it, as cowagent and harness do). `--memory=false` or `--no-memory` turns
    /// it off whatever the policy wants.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new(),
          env = "CTXKEEPER_MEMORY", conflicts_with = "no_memory")]
    pub memory: Option<bool>,

    /// Long-term memory off, whatever the policy wants (`memory = false`).
    #[arg(long)]
    #[serde(skip)]
    pub no_memory: bool,

    /// Request-time context added after the stable prefix of every managed request
    /// (repeatable or comma-separated): date, memory, budget. Default: none.
    #[arg(
        long = "context-provider",
        value_name = "NAME",
        value_delimiter = ',',
        env = "CTXKEEPER_CONTEXT_PROVIDERS"
    )]
    pub context_providers: Option<Vec<String>>,

    /// Repair broken tool-call pairs in client histories (a `history_repaired` event names
    /// each repair) instead of refusing the request with 400.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new(),
          env = "CTXKEEPER_REPAIR")]
    pub repair: Option<bool>,

    /// Consecutive requests of one session that may overflow the context window and be
    /// recovered; the next overflow is passed to the client (default 3).
    #[arg(long, value_name = "N", env = "CTXKEEPER_MAX_CONSECUTIVE_RECOVERIES")]
    pub max_consecutive_recoveries: Option<u32>,

    /// Who writes compaction summaries: `upstream` (default: the request's own upstream and
    /// model, as the caller, on its prompt cache), `extractive` (no model), `openai` or
    /// `anthropic` (a fixed summarizer; key from CTXKEEPER_SUMMARIZER_API_KEY, else
    /// OPENAI_API_KEY / ANTHROPIC_API_KEY). A failed summary falls back to the extractive one.
    #[arg(long, value_name = "KIND", env = "CTXKEEPER_SUMMARIZER")]
    pub summarizer: Option<String>,

    /// The summary model (with `upstream`: instead of the request's own model).
    #[arg(long, value_name = "MODEL", env = "CTXKEEPER_SUMMARIZER_MODEL")]
    pub summarizer_model: Option<String>,

    /// The base URL of an `openai` or `anthropic` summarizer.
    #[arg(long, value_name = "URL", env = "CTXKEEPER_SUMMARIZER_URL")]
    pub summarizer_url: Option<String>,

    /// Seconds allowed for one summary call; past it the extractive summary stands in
    /// (default 120).
    #[arg(
        long = "summary-timeout",
        value_name = "SECONDS",
        env = "CTXKEEPER_SUMMARY_TIMEOUT"
    )]
    pub summary_timeout_secs: Option<u64>,

    /// Seconds an agent's request waits for a model's summary; past it the extractive summary
    /// stands in and the model's call finishes in the background (default 5).
    #[arg(
        long = "summary-wait",
        value_name = "SECONDS",
        env = "CTXKEEPER_SUMMARY_WAIT"
    )]
    pub summary_wait_secs: Option<u64>,

    /// Past this share of the compaction trigger, a model summary is prepared in the
    /// background so the request that crosses the trigger does not wait for it (default
    /// 0.75; 0 turns it off).
    #[arg(long, value_name = "SHARE", env = "CTXKEEPER_PREPARE_SUMMARIES_AT")]
    pub prepare_summaries_at: Option<f64>,

    /// Who answers an OpenAI Responses `compaction_trigger` (Codex's server-side
    /// compaction): `auto` (default: OpenAI's own API when it is the upstream, else the
    /// gateway), `forward` (always the upstream) or `gateway` (always the gateway, which
    /// compacts the session and returns one compaction item).
    #[arg(long, value_name = "MODE", env = "CTXKEEPER_RESPONSES_COMPACTION")]
    pub responses_compaction: Option<String>,

    /// OpenTelemetry traces (`[gateway.telemetry]` in a file).
    #[command(flatten)]
    #[serde(default, skip_serializing_if = "TelemetrySettings::is_empty")]
    pub telemetry: TelemetrySettings,
}

/// `[gateway.telemetry]`: OpenTelemetry traces of the model calls, exported over OTLP/HTTP
/// (protobuf), and the cache-stall alarm. Export is off unless an endpoint is given; the
/// standard `OTEL_*` variables set what their names say.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    /// The OTLP collector's base URL; spans go to its /v1/traces (OTLP/HTTP, protobuf).
    /// Default: no export.
    #[arg(
        long = "otlp-endpoint",
        value_name = "URL",
        env = "OTEL_EXPORTER_OTLP_ENDPOINT"
    )]
    pub endpoint: Option<String>,

    /// The collector's traces URL, used as it is (wins over --otlp-endpoint).
    #[arg(
        long = "otlp-traces-endpoint",
        value_name = "URL",
        env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )]
    pub traces_endpoint: Option<String>,

    /// Headers sent with every export, KEY=VALUE (repeatable or comma-separated, values
    /// percent-encoded). In a file, a table `headers = { KEY = "VALUE" }`.
    #[arg(
        long = "otlp-header",
        value_name = "KEY=VALUE",
        env = "OTEL_EXPORTER_OTLP_HEADERS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    #[serde(default, skip_serializing, deserialize_with = "pairs")]
    pub headers: Option<Vec<String>>,

    /// The OTLP protocol: only http/protobuf is spoken (default).
    #[arg(
        long = "otlp-protocol",
        value_name = "PROTOCOL",
        env = "OTEL_EXPORTER_OTLP_PROTOCOL"
    )]
    pub protocol: Option<String>,

    /// The `service.name` of the spans (default ctxkeeper).
    #[arg(
        long = "otel-service-name",
        value_name = "NAME",
        env = "OTEL_SERVICE_NAME"
    )]
    pub service_name: Option<String>,

    /// More resource attributes, KEY=VALUE (comma-separated). In a file, a table.
    #[arg(
        long = "otel-resource-attributes",
        value_name = "KEY=VALUE",
        env = "OTEL_RESOURCE_ATTRIBUTES",
        value_delimiter = ','
    )]
    #[serde(default, deserialize_with = "pairs")]
    pub resource_attributes: Option<Vec<String>>,

    /// Record the messages sent in the spans (`gen_ai.input.messages`): true, or
    /// SPAN_ONLY / SPAN_AND_EVENT; default false (no message content leaves the gateway).
    #[arg(
        long = "otel-capture-content",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = capture_mode,
        env = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    )]
    pub capture_content: Option<bool>,

    /// Spans waiting for export at most; past it new spans are dropped and counted in
    /// ctxkeeper_spans_dropped_total (default 2048).
    #[arg(
        long = "otel-max-queue",
        value_name = "SPANS",
        env = "OTEL_BSP_MAX_QUEUE_SIZE"
    )]
    pub max_queue_size: Option<usize>,

    /// Spans per export request at most (default 512).
    #[arg(
        long = "otel-max-batch",
        value_name = "SPANS",
        env = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
    )]
    pub max_export_batch_size: Option<usize>,

    /// Milliseconds a batch waits to fill before it is exported (default 5000).
    #[arg(
        long = "otel-schedule-delay",
        value_name = "MS",
        env = "OTEL_BSP_SCHEDULE_DELAY"
    )]
    pub schedule_delay_ms: Option<u64>,

    /// Milliseconds allowed for one export request (default 10000).
    #[arg(
        long = "otlp-timeout",
        value_name = "MS",
        env = "OTEL_EXPORTER_OTLP_TIMEOUT"
    )]
    pub export_timeout_ms: Option<u64>,

    /// Consecutive calls of a session whose prompt cache served less than half the input
    /// (each sending at least --cache-stall-min-fresh-tokens uncached input tokens) that raise
    /// a cache_stalled event (default 3; 0 turns the alarm off).
    #[arg(
        long = "cache-stall-calls",
        value_name = "N",
        env = "CTXKEEPER_CACHE_STALL_CALLS"
    )]
    pub cache_stall_calls: Option<u32>,

    /// Uncached input tokens a call must send to count towards a cache stall (default 4096).
    #[arg(
        long = "cache-stall-min-fresh-tokens",
        value_name = "TOKENS",
        env = "CTXKEEPER_CACHE_STALL_MIN_FRESH_TOKENS"
    )]
    pub cache_stall_min_fresh_tokens: Option<u64>,
}

/// Whether message contents are captured, from a boolean or the content-capture modes of the
/// OpenTelemetry GenAI instrumentations (`SPAN_ONLY`, `SPAN_AND_EVENT` capture on spans;
/// `EVENT_ONLY`, `NO_CONTENT` do not).
fn capture_mode(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "span_only" | "span_and_event" => Ok(true),
        "false" | "0" | "no" | "off" | "" | "event_only" | "no_content" => Ok(false),
        other => Err(format!(
            "{other:?} is not a capture mode: give true, false, SPAN_ONLY, SPAN_AND_EVENT, \
             EVENT_ONLY or NO_CONTENT"
        )),
    }
}

/// `KEY=VALUE` pairs from a file: a table `{ KEY = "VALUE" }` or a list of `"KEY=VALUE"`.
fn pairs<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Table(std::collections::BTreeMap<String, String>),
        List(Vec<String>),
    }
    Ok(Option::<Form>::deserialize(de)?.map(|form| match form {
        Form::Table(table) => table
            .into_iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect(),
        Form::List(list) => list,
    }))
}

/// Every telemetry field, for the one merge ([`TelemetrySettings::over`]).
macro_rules! each_telemetry_setting {
    ($m:ident) => {
        $m!(
            endpoint,
            traces_endpoint,
            headers,
            protocol,
            service_name,
            resource_attributes,
            capture_content,
            max_queue_size,
            max_export_batch_size,
            schedule_delay_ms,
            export_timeout_ms,
            cache_stall_calls,
            cache_stall_min_fresh_tokens
        )
    };
}

impl TelemetrySettings {
    fn is_empty(&self) -> bool {
        *self == TelemetrySettings::default()
    }

    /// `later` over `self`: each setting `later` gives replaces this one's.
    pub fn over(mut self, mut later: TelemetrySettings) -> TelemetrySettings {
        macro_rules! merge {
            ($($field:ident),*) => {
                $( self.$field = later.$field.take().or(self.$field.take()); )*
            };
        }
        each_telemetry_setting!(merge);
        self
    }

    /// Applies the settings given to `base` (its telemetry and cache-stall rule); an error
    /// names the setting.
    pub fn apply(&self, base: &mut GatewayConfig) -> Result<(), ConfigError> {
        let setting = |name: &str, e: String| ConfigError(format!("telemetry.{name}: {e}"));
        if let Some(protocol) = self.protocol.as_deref().map(str::trim)
            && !protocol.is_empty()
            && protocol != "http/protobuf"
        {
            return Err(setting(
                "protocol",
                format!(
                    "{protocol:?} is not spoken: the gateway exports OTLP over HTTP with \
                     protobuf bodies (http/protobuf); point it at the collector's HTTP port \
                     (4318)"
                ),
            ));
        }
        fn endpoint(text: &str) -> Option<&str> {
            Some(text.trim()).filter(|text| !text.is_empty())
        }
        if let Some(url) = self.traces_endpoint.as_deref().and_then(endpoint) {
            check_url(url).map_err(|e| setting("traces_endpoint", e))?;
            base.telemetry = Some(TelemetryConfig::to(url));
        } else if let Some(url) = self.endpoint.as_deref().and_then(endpoint) {
            base.telemetry =
                Some(TelemetryConfig::from_endpoint(url).map_err(|e| setting("endpoint", e))?);
        }
        if let Some(config) = base.telemetry.as_mut() {
            if let Some(headers) = &self.headers {
                config.headers =
                    parse_pairs(headers, "headers").map_err(|e| setting("headers", e))?;
            }
            if let Some(name) = self.service_name.as_ref().filter(|n| !n.trim().is_empty()) {
                config.service_name = name.trim().to_string();
            }
            if let Some(attributes) = &self.resource_attributes {
                config.resource = parse_pairs(attributes, "resource_attributes")
                    .map_err(|e| ConfigError(format!("telemetry.{e}")))?;
            }
            if let Some(capture) = self.capture_content {
                config.capture_content = capture;
            }
            if let Some(size) = self.max_queue_size {
                if size == 0 {
                    return Err(setting("max_queue_size", "must be greater than 0".into()));
                }
                config.max_queue = size;
            }
            if let Some(size) = self.max_export_batch_size {
                if size == 0 {
                    return Err(setting(
                        "max_export_batch_size",
                        "must be greater than 0".into(),
                    ));
                }
                config.max_batch = size;
            }
            if let Some(ms) = self.schedule_delay_ms {
                config.schedule_delay = Duration::from_millis(ms);
            }
            if let Some(ms) = self.export_timeout_ms {
                if ms == 0 {
                    return Err(setting(
                        "export_timeout_ms",
                        "must be greater than 0".into(),
                    ));
                }
                config.export_timeout = Duration::from_millis(ms);
            }
        }
        if let Some(calls) = self.cache_stall_calls {
            base.cache_stall.calls = calls;
        }
        if let Some(tokens) = self.cache_stall_min_fresh_tokens {
            base.cache_stall.min_fresh_tokens = tokens;
        }
        Ok(())
    }

    /// The settings `config` runs with (credentials left out).
    pub fn effective(config: &GatewayConfig) -> TelemetrySettings {
        let millis = |d: Duration| Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut settings = TelemetrySettings {
            cache_stall_calls: Some(config.cache_stall.calls),
            cache_stall_min_fresh_tokens: Some(config.cache_stall.min_fresh_tokens),
            ..TelemetrySettings::default()
        };
        if let Some(telemetry) = &config.telemetry {
            settings.traces_endpoint = Some(telemetry.traces_url.clone());
            settings.service_name = Some(telemetry.service_name.clone());
            settings.resource_attributes = Some(
                telemetry
                    .resource
                    .iter()
                    .map(|(key, value)| format!("{key}={value}"))
                    .collect(),
            );
            settings.capture_content = Some(telemetry.capture_content);
            settings.max_queue_size = Some(telemetry.max_queue);
            settings.max_export_batch_size = Some(telemetry.max_batch);
            settings.schedule_delay_ms = millis(telemetry.schedule_delay);
            settings.export_timeout_ms = millis(telemetry.export_timeout);
        }
        settings
    }
}

/// A file's `listen`, a host name resolved as `--listen` resolves it ([`listen_address`]).
fn listen_setting<'de, D: Deserializer<'de>>(de: D) -> Result<Option<SocketAddr>, D::Error> {
    Option::<String>::deserialize(de)?
        .map(|text| {
            listen_address(&text).map_err(|e| serde::de::Error::custom(format!("listen: {e}")))
        })
        .transpose()
}

/// A file's `tenant_tokens = { TENANT = "TOKEN" }`, as the `TENANT=TOKEN` pairs the flags give.
fn token_table<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Vec<String>>, D::Error> {
    let table = Option::<std::collections::BTreeMap<String, String>>::deserialize(de)?;
    Ok(table.map(|table| {
        table
            .into_iter()
            .map(|(tenant, token)| format!("{tenant}={token}"))
            .collect()
    }))
}

/// Every field, for the one merge ([`GatewaySettings::over`]).
macro_rules! each_setting {
    ($m:ident) => {
        $m!(
            listen,
            upstream,
            anthropic_upstream,
            store,
            workspace,
            policy,
            admin_token,
            trust_tenant_header,
            tenant_tokens,
            body_limit,
            max_inflight_bytes,
            connect_timeout_secs,
            upstream_timeout_secs,
            upstream_deadline_secs,
            header_timeout_secs,
            body_timeout_secs,
            session_idle_secs,
            session_cache,
            resent_prefix_bytes,
            forward_early_from_bytes,
            memory,
            context_providers,
            repair,
            max_consecutive_recoveries,
            summarizer,
            summarizer_model,
            summarizer_url,
            summary_timeout_secs,
            summary_wait_secs,
            prepare_summaries_at,
            responses_compaction
        )
    };
}

impl GatewaySettings {
    /// `later` over `self`: each setting `later` gives replaces this one's.
    pub fn over(self, later: GatewaySettings) -> GatewaySettings {
        let (mut early, mut later) = (self.normalized(), later.normalized());
        macro_rules! merge {
            ($($field:ident),*) => {
                $( early.$field = later.$field.take().or(early.$field.take()); )*
            };
        }
        each_setting!(merge);
        early.telemetry = early.telemetry.over(later.telemetry);
        early
    }

    /// `--no-memory` spelled as the setting it is.
    fn normalized(mut self) -> GatewaySettings {
        if std::mem::take(&mut self.no_memory) {
            self.memory = Some(false);
        }
        self
    }

    /// Applies every setting given to `base`; an error names the setting.
    pub fn apply(&self, mut base: GatewayConfig) -> Result<GatewayConfig, ConfigError> {
        let this = self.clone().normalized();
        let secs = Duration::from_secs;
        let setting = |name: &str, e: String| ConfigError(format!("{name}: {e}"));
        macro_rules! set {
            ($field:ident => $target:ident $(, $map:expr)?) => {
                if let Some(value) = this.$field.clone() {
                    base.$target = set!(@map value $(, $map)?);
                }
            };
            (@map $value:ident) => { $value };
            (@map $value:ident, $map:expr) => { $map($value) };
        }
        set!(listen => listen);
        set!(upstream => upstream);
        set!(anthropic_upstream => anthropic_upstream);
        set!(store => store_url);
        set!(workspace => workspace);
        if let Some(name) = &this.policy {
            base.policy = presets::lookup(name).map_err(|e| ConfigError(e.to_string()))?;
            base.policy_preset = name.clone();
        }
        set!(admin_token => admin_token, Some);
        set!(body_limit => body_limit);
        set!(max_inflight_bytes => max_inflight_bytes);
        set!(connect_timeout_secs => connect_timeout, secs);
        set!(upstream_timeout_secs => upstream_timeout, secs);
        set!(upstream_deadline_secs => upstream_deadline, secs);
        set!(header_timeout_secs => header_timeout, secs);
        set!(body_timeout_secs => body_timeout, secs);
        set!(session_idle_secs => session_idle, secs);
        set!(session_cache => session_cache);
        set!(resent_prefix_bytes => resent_prefix_bytes);
        set!(forward_early_from_bytes => forward_early_from);
        set!(max_consecutive_recoveries => max_consecutive_recoveries);
        set!(memory => memory, Some);
        set!(repair => repair);
        set!(summary_timeout_secs => summary_timeout, secs);
        set!(summary_wait_secs => summary_wait, secs);
        if let Some(trust) = this.trust_tenant_header {
            base.tenants = base.tenants.trust_header(trust);
        }
        for pair in this.tenant_tokens.iter().flatten() {
            let Some((tenant, token)) = pair.split_once('=') else {
                return Err(ConfigError(
                    "tenant_tokens: each token is given as TENANT=TOKEN".into(),
                ));
            };
            base.tenants = base
                .tenants
                .with_token(tenant.trim(), token)
                .map_err(|e| setting("tenant_tokens", e.to_string()))?;
        }
        if let Some(names) = &this.context_providers {
            base.context_providers =
                ContextProvider::parse_list(names).map_err(|e| setting("context_providers", e))?;
        }
        if this.summarizer.is_some()
            || this.summarizer_model.is_some()
            || this.summarizer_url.is_some()
        {
            let kind = this.summarizer.as_deref().unwrap_or("upstream");
            base.summarizer = SummarizerChoice::parse(
                kind,
                this.summarizer_url.as_deref(),
                this.summarizer_model.as_deref(),
            )
            .map_err(|e| setting("summarizer", e))?;
        }
        if let Some(share) = this.prepare_summaries_at {
            base.prepare_summaries_at = prepare_share(share)
                .map_err(|e| ConfigError(format!("prepare_summaries_at {e}")))?;
        }
        if let Some(mode) = &this.responses_compaction {
            base.responses_compaction =
                ResponsesCompaction::parse(mode).map_err(|e| setting("responses_compaction", e))?;
        }
        this.telemetry.apply(&mut base)?;
        Ok(base)
    }

    /// The settings `config` runs with, every one given (what `ctxkeeper config show`
    /// prints): secrets are left out (they are never serialized), the policy is left to the
    /// `[policy]` table that shows it whole, and memory is the effective choice.
    pub fn effective(config: &GatewayConfig) -> GatewaySettings {
        let secs = |d: Duration| Some(d.as_secs());
        // `upstream[:MODEL]`, `extractive`, `openai:MODEL`, `anthropic:MODEL`.
        let summarizer = config.summarizer.name();
        let (kind, model) = summarizer
            .split_once(':')
            .map_or((summarizer.as_str(), None), |(k, m)| (k, Some(m)));
        GatewaySettings {
            listen: Some(config.listen),
            upstream: Some(config.upstream.clone()),
            anthropic_upstream: Some(config.anthropic_upstream.clone()),
            store: Some(ctxkeeper_store::redact(&config.store_url)),
            workspace: Some(ctxkeeper_store::redact(&config.workspace)),
            policy: None,
            admin_token: None,
            trust_tenant_header: Some(config.tenants.trusts_header()),
            tenant_tokens: None,
            body_limit: Some(config.body_limit),
            max_inflight_bytes: Some(config.max_inflight_bytes),
            connect_timeout_secs: secs(config.connect_timeout),
            upstream_timeout_secs: secs(config.upstream_timeout),
            upstream_deadline_secs: secs(config.upstream_deadline),
            header_timeout_secs: secs(config.header_timeout),
            body_timeout_secs: secs(config.body_timeout),
            session_idle_secs: secs(config.session_idle),
            session_cache: Some(config.session_cache),
            resent_prefix_bytes: Some(config.resent_prefix_bytes),
            forward_early_from_bytes: Some(config.forward_early_from),
            // As set: unset follows the policy (`[policy.memory]`), so the output read back
            // under another policy follows that one, and a policy override does not show
            // here as a second changed line.
            memory: config.memory,
            no_memory: false,
            context_providers: Some(
                config
                    .context_providers
                    .iter()
                    .map(|p| p.name().to_string())
                    .collect(),
            ),
            repair: Some(config.repair),
            max_consecutive_recoveries: Some(config.max_consecutive_recoveries),
            summarizer: Some(kind.to_string()),
            summarizer_model: model.map(str::to_string),
            summarizer_url: None,
            summary_timeout_secs: secs(config.summary_timeout),
            summary_wait_secs: secs(config.summary_wait),
            prepare_summaries_at: Some(config.prepare_summaries_at.unwrap_or(0.0)),
            responses_compaction: Some(config.responses_compaction.name().to_string()),
            telemetry: TelemetrySettings::effective(config),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_layer_overrides_only_what_it_gives() {
        let file: GatewaySettings =
            toml::from_str("body_limit = 10\nsession_cache = 5\nmemory = true").unwrap();
        let flags = GatewaySettings {
            body_limit: Some(20),
            no_memory: true,
            ..GatewaySettings::default()
        };
        let merged = file.over(flags);
        assert_eq!(merged.body_limit, Some(20));
        assert_eq!(merged.session_cache, Some(5));
        assert_eq!(merged.memory, Some(false), "--no-memory is memory = false");
    }

    #[test]
    fn what_show_prints_reads_back_as_the_same_settings() {
        let mut config = GatewayConfig::new("/tmp/x");
        config.repair = true;
        config.body_limit = 1234;
        let shown = GatewaySettings::effective(&config);
        let text = toml::to_string(&shown).unwrap();
        let read: GatewaySettings = toml::from_str(&text).unwrap();
        assert_eq!(read, shown);
        let again = read.apply(GatewayConfig::new("/tmp/x")).unwrap();
        assert_eq!(GatewaySettings::effective(&again), shown);
    }

    #[test]
    fn telemetry_shown_reads_back_without_its_headers() {
        let file: GatewaySettings = toml::from_str(
            "[telemetry]\nendpoint = \"http://c:4318\"\nheaders = { api-key = \"secret-1\" }\n\
             resource_attributes = [\"team=core\"]\ncache_stall_min_fresh_tokens = 100",
        )
        .unwrap();
        let config = file.apply(GatewayConfig::new("/tmp/x")).unwrap();
        let shown = GatewaySettings::effective(&config);
        let text = toml::to_string(&shown).unwrap();
        assert!(!text.contains("secret-1"), "{text}");
        let read: GatewaySettings = toml::from_str(&text).unwrap();
        assert_eq!(read, shown);
        let again = read.apply(GatewayConfig::new("/tmp/x")).unwrap();
        assert_eq!(GatewaySettings::effective(&again), shown);
        assert_eq!(again.cache_stall.min_fresh_tokens, 100);
        assert_eq!(
            again.telemetry.map(|t| t.resource),
            Some(vec![("team".to_string(), "core".to_string())])
        );
    }

    #[test]
    fn tokens_come_as_a_table_in_a_file_and_are_never_printed() {
        let file: GatewaySettings =
            toml::from_str("tenant_tokens = { acme = \"acme-token-1\" }").unwrap();
        assert_eq!(
            file.tenant_tokens,
            Some(vec!["acme=acme-token-1".to_string()])
        );
        let config = file.apply(GatewayConfig::new("/tmp/x")).unwrap();
        assert_eq!(config.tenants.token_tenant("acme-token-1"), Some("acme"));
        let text = toml::to_string(&file).unwrap();
        assert!(!text.contains("acme-token-1"), "{text}");
        let bad = GatewaySettings {
            tenant_tokens: Some(vec!["no-equals".into()]),
            ..GatewaySettings::default()
        };
        let err = bad.apply(GatewayConfig::new("/tmp/x")).unwrap_err();
        assert!(err.0.contains("TENANT=TOKEN"), "{err}");
    }

    #[test]
    fn an_unknown_policy_lists_the_presets() {
        let settings = GatewaySettings {
            policy: Some("agentscop".into()),
            ..GatewaySettings::default()
        };
        let err = settings.apply(GatewayConfig::new("/tmp/x")).unwrap_err();
        assert!(
            err.0.contains("agentscop") && err.0.contains("cowagent"),
            "{err}"
        );
    }
}
