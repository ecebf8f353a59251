//! The gateway's configuration: where it listens, where it forwards, where sessions and
//! archives live, and the context policy it applies.
//!
//! [`GatewayConfig`] is what the gateway runs with, built in code ([`GatewayConfig::new`]) or
//! resolved from settings: [`GatewaySettings`] declares every setting once (the `[gateway]`
//! table of a file, the options and environment variables of `ctxkeeper serve`, what
//! `ctxkeeper config show` prints), and [`ConfigFile::resolve`] merges file ← environment ←
//! flags once and applies them, with the file's `[models."NAME"]` profiles and `[policy]`
//! overrides.
//!
//! ```
//! use ctxkeeper_gateway::config::{ConfigFile, GatewayConfig, GatewaySettings};
//!
//! let file = ConfigFile::parse(r#"
//!     [gateway]
//!     upstream = "http://127.0.0.1:9000/v1"
//!     policy = "default"
//!
//!     [models."mock-8k"]
//!     context_window = 8192
//!     max_output = 1024
//!     tokenizer = "o200k_base"
//!
//!     [policy]
//!     keep_recent_rounds = 4
//! "#).unwrap();
//! let flags = GatewaySettings { body_limit: Some(1 << 20), ..GatewaySettings::default() };
//! let config = file.resolve(flags, GatewayConfig::new("/tmp/ctxkeeper")).unwrap();
//! assert_eq!(config.upstream, "http://127.0.0.1:9000/v1");
//! assert_eq!(config.body_limit, 1 << 20);
//! assert_eq!(config.policy.keep_recent_rounds, 4);
//! assert_eq!(config.profiles.lookup("mock-8k").context_window, 8192);
//! ```

mod file;
mod settings;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ctxkeeper_core::engine::{PolicyConfig, presets};
use ctxkeeper_core::tokens::Profiles;

use crate::assembly::ContextProvider;
use crate::compaction_items::ResponsesCompaction;
use crate::summarize::SummarizerChoice;
use crate::tenancy::TenantRule;
pub use file::ConfigFile;
pub use settings::{GatewaySettings, TelemetrySettings};

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
/// The default OpenAI-compatible upstream (with its `/v1`).
pub const DEFAULT_UPSTREAM: &str = "https://api.openai.com/v1";
/// The default Anthropic upstream (without `/v1`).
pub const DEFAULT_ANTHROPIC_UPSTREAM: &str = "https://api.anthropic.com";
/// The default request body limit: 32 MiB (images inline as base64 make bodies large).
pub const DEFAULT_BODY_LIMIT: usize = 32 * 1024 * 1024;
/// The default cap on what requests in flight hold, counted at what handling a body costs
/// (up to 8× its size, see `limits`): 1 GiB, four fresh bodies at the default limit at once,
/// or a hundred of the few-MiB bodies agents usually send.
pub const DEFAULT_MAX_INFLIGHT_BYTES: usize = 32 * DEFAULT_BODY_LIMIT;

/// Everything the gateway needs, loaded once at start-up and passed down.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    /// OpenAI-compatible base URL including `/v1` (`https://api.openai.com/v1`).
    pub upstream: String,
    /// Anthropic base URL without `/v1` (`https://api.anthropic.com`).
    pub anthropic_upstream: String,
    /// The session store URL (`sqlite://…`, `postgres://…`, `redis://…`, `memory://`, …).
    pub store_url: String,
    /// The archive: a directory (a [`LocalWorkspace`](ctxkeeper_store::LocalWorkspace)) or an
    /// archive URL (`s3://…`, `postgres://…`, `memory://`).
    pub workspace: String,
    /// The policy applied to every session (per-session overrides come on top).
    pub policy: PolicyConfig,
    /// The preset `policy` started from, before a file's `[policy]` overrides (what
    /// `config show` compares the policy with to mark the overridden values).
    pub policy_preset: String,
    /// Model profiles: context window, tokenizer.
    pub profiles: Profiles,
    /// The bearer token of the admin API; `None` disables it.
    pub admin_token: Option<String>,
    /// The largest request body accepted, in bytes.
    pub body_limit: usize,
    /// Time allowed to connect to the upstream.
    pub connect_timeout: Duration,
    /// Time allowed between two reads from the upstream (first byte included).
    pub upstream_timeout: Duration,
    /// Time allowed for a whole upstream exchange, streamed answers included.
    pub upstream_deadline: Duration,
    /// Time a client has to send a request's headers.
    pub header_timeout: Duration,
    /// Time a client has to send a request's whole body.
    pub body_timeout: Duration,
    /// Request body bytes the gateway holds at once, over every request; past it new
    /// requests are refused with 503 and `Retry-After` (a parsed body costs several times
    /// its size, so this bounds memory under a burst of large requests).
    pub max_inflight_bytes: usize,
    /// A warm session idle this long is dropped from memory (it reloads from the store).
    pub session_idle: Duration,
    /// Consecutive requests of a session that may overflow and be recovered; the next
    /// overflow goes to the client (a circuit breaker against recovery loops).
    pub max_consecutive_recoveries: u32,
    /// Sessions kept warm in memory before idle ones are dropped (they reload from the store).
    pub session_cache: usize,
    /// Bytes of request bodies whose parsed messages are kept, over every session, so that a
    /// session's next request parses only what it adds ([`crate::resent`]); 0 parses every
    /// body in full.
    pub resent_prefix_bytes: usize,
    /// Request bodies of at least this many bytes, of a session the gateway knows, are sent
    /// upstream while they arrive, their last byte held until the gateway decides
    /// ([`crate::early`]); 0 reads every body whole first.
    pub forward_early_from: usize,
    /// Who chooses a request's tenant: the API key, tenant tokens, and whether
    /// `x-ctxkeeper-tenant` is trusted.
    pub tenants: TenantRule,
    /// Long-term memory (`MEMORY.md`, `memory/YYYY-MM-DD.md` in the workspace directory, per
    /// tenant): `Some(true)` on, `Some(false)` off, `None` as the policy wants it
    /// ([`PolicyConfig::wants_memory`]).
    pub memory: Option<bool>,
    /// Request-time context added after the stable prefix of every managed request (none by
    /// default): [`crate::assembly`].
    pub context_providers: Vec<ContextProvider>,
    /// Repair broken tool-call pairs in client histories instead of refusing them (an event
    /// names each repair): [`crate::repair`].
    pub repair: bool,
    /// Who writes compaction summaries: the request's own upstream (the default), the
    /// extractive summarizer, or a configured model ([`crate::summarize`]).
    pub summarizer: SummarizerChoice,
    /// Time allowed for one summary call; past it the extractive summary stands in.
    pub summary_timeout: Duration,
    /// Time an agent's request waits for a model's summary; past it the extractive summary
    /// stands in while the model's call finishes in the background.
    pub summary_wait: Duration,
    /// Past this share of the trigger a model summary is prepared in the background, so the
    /// request that crosses the trigger does not wait for it (`None`: never).
    pub prepare_summaries_at: Option<f64>,
    /// Who answers an OpenAI Responses `compaction_trigger`: the upstream when it is OpenAI
    /// (`auto`), always the upstream, or always the gateway
    /// ([`crate::compaction_items`]).
    pub responses_compaction: ResponsesCompaction,
    /// OpenTelemetry traces of the model calls (`None`: not exported): [`crate::telemetry`].
    pub telemetry: Option<crate::telemetry::TelemetryConfig>,
    /// When a session's prompt cache counts as stalled (the `cache_stalled` event).
    pub cache_stall: crate::telemetry::CacheStallRule,
}

impl GatewayConfig {
    /// Defaults with sessions and archives under `data_dir` (`sessions.db`, `workspace/`).
    pub fn new(data_dir: impl AsRef<Path>) -> GatewayConfig {
        let data_dir = data_dir.as_ref();
        GatewayConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            upstream: DEFAULT_UPSTREAM.to_string(),
            anthropic_upstream: DEFAULT_ANTHROPIC_UPSTREAM.to_string(),
            store_url: format!("sqlite://{}", data_dir.join("sessions.db").display()),
            workspace: data_dir.join("workspace").display().to_string(),
            policy: presets::preset("default").unwrap_or_default(),
            policy_preset: "default".to_string(),
            profiles: Profiles::builtin(),
            admin_token: None,
            body_limit: DEFAULT_BODY_LIMIT,
            connect_timeout: Duration::from_secs(10),
            upstream_timeout: Duration::from_secs(300),
            upstream_deadline: Duration::from_secs(30 * 60),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            session_idle: Duration::from_secs(30 * 60),
            max_consecutive_recoveries: crate::sessions::DEFAULT_MAX_CONSECUTIVE_RECOVERIES,
            session_cache: 10_000,
            resent_prefix_bytes: crate::resent::ResentPrefixes::DEFAULT_BOUND,
            forward_early_from: crate::early::DEFAULT_FROM_BYTES,
            tenants: TenantRule::default(),
            memory: None,
            context_providers: Vec::new(),
            repair: false,
            summarizer: SummarizerChoice::Upstream { model: None },
            summary_timeout: Duration::from_secs(120),
            summary_wait: crate::sessions::DEFAULT_SUMMARY_WAIT,
            prepare_summaries_at: Some(crate::sessions::DEFAULT_PREPARE_AT),
            responses_compaction: ResponsesCompaction::Auto,
            telemetry: None,
            cache_stall: crate::telemetry::CacheStallRule::default(),
        }
    }

    /// Whether sessions get long-term memory: as configured, else as the policy wants.
    pub fn memory_enabled(&self) -> bool {
        self.memory.unwrap_or_else(|| self.policy.wants_memory())
    }

    /// The directory long-term memory lives in: the workspace when it is a directory (a
    /// path or `file://PATH`); `None` for an archive URL (`postgres://…`, `s3://…`).
    pub fn workspace_dir(&self) -> Option<PathBuf> {
        match self.workspace.split_once("://") {
            None => Some(PathBuf::from(&self.workspace)),
            Some((scheme, path)) if scheme.eq_ignore_ascii_case("file") => {
                Some(PathBuf::from(path))
            }
            Some(_) => None,
        }
    }

    /// The data directory used when none is given: `$XDG_DATA_HOME/ctxkeeper`, else
    /// `$HOME/.local/share/ctxkeeper`, else `./.ctxkeeper` (the same place as `sessions`).
    pub fn default_data_dir() -> PathBuf {
        std::env::var_os("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".local/share"))
            })
            .map(|base| base.join("ctxkeeper"))
            .unwrap_or_else(|| PathBuf::from(".ctxkeeper"))
    }

    /// Checks the settings that would otherwise fail on the first request.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, url) in [
            ("upstream", &self.upstream),
            ("anthropic_upstream", &self.anthropic_upstream),
        ] {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| ConfigError(format!("{name} {url:?} is not a URL: {e}")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(ConfigError(format!(
                    "{name} {url:?} must be an http:// or https:// URL"
                )));
            }
        }
        if self.body_limit == 0 {
            return Err(ConfigError("body_limit must be greater than 0".into()));
        }
        if self.max_inflight_bytes < self.body_limit {
            return Err(ConfigError(format!(
                "max_inflight_bytes ({}) must be at least body_limit ({}): a request of the \
                 largest allowed size could never be admitted",
                self.max_inflight_bytes, self.body_limit
            )));
        }
        for (name, value) in [
            ("connect_timeout_secs", self.connect_timeout),
            ("upstream_timeout_secs", self.upstream_timeout),
            ("upstream_deadline_secs", self.upstream_deadline),
            ("header_timeout_secs", self.header_timeout),
            ("body_timeout_secs", self.body_timeout),
            ("session_idle_secs", self.session_idle),
        ] {
            if value.is_zero() {
                return Err(ConfigError(format!("{name} must be greater than 0")));
            }
        }
        if self.upstream_deadline < self.upstream_timeout {
            return Err(ConfigError(
                "upstream_deadline_secs must not be shorter than upstream_timeout_secs".into(),
            ));
        }
        if self.memory == Some(true) && self.workspace_dir().is_none() {
            return Err(ConfigError(format!(
                "memory = true needs a workspace directory (long-term memory is files), not \
                 the archive URL {:?}",
                ctxkeeper_store::redact(&self.workspace)
            )));
        }
        if self.context_providers.contains(&ContextProvider::Memory)
            && !(self.memory_enabled() && self.workspace_dir().is_some())
        {
            return Err(ConfigError(
                "context provider \"memory\" lists long-term memory, which is off (turn it on \
                 with --memory or [gateway] memory = true, or choose a policy that wants it)"
                    .into(),
            ));
        }
        if self.admin_token.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError("admin_token must not be empty".into()));
        }
        self.policy
            .validate()
            .map_err(|e| ConfigError(format!("policy: {e}")))
    }
}

/// A configuration problem, naming the setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// A listen address from `HOST:PORT`: an IP address as it is, a host name such as
/// `localhost` resolved to one address (IPv4 preferred: `localhost` clients mostly try
/// 127.0.0.1 first). One rule for `--listen`, `CTXKEEPER_LISTEN` and a file's `listen`; the
/// error says what to give instead.
pub fn listen_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let expected =
        "give HOST:PORT, e.g. 127.0.0.1:8787 or localhost:8787 (port 0 picks a free port)";
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("{text:?} names no port: {expected}"));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{text:?}: {port:?} is not a port number (0 to 65535): {expected}"))?;
    if host.is_empty() {
        return Err(format!("{text:?} names no host: {expected}"));
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve the host name {host:?} ({e}): {expected}"))?
        .collect();
    addrs
        .iter()
        .find(|addr| addr.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("the host name {host:?} resolves to no address: {expected}"))
}

/// The share of the trigger a summary is prepared at, from a setting in [0, 1): `None` for
/// 0 (preparation off). The error completes a sentence naming the setting.
pub fn prepare_share(share: f64) -> Result<Option<f64>, String> {
    if !(0.0..1.0).contains(&share) {
        return Err(format!(
            "must be in [0, 1) (a share of the trigger; 0 turns preparation off), got {share}"
        ));
    }
    Ok((share > 0.0).then_some(share))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_sections_and_fields_are_refused() {
        let err = ConfigFile::parse("[gatway]\nlisten = \"127.0.0.1:1\"").unwrap_err();
        assert!(err.0.contains("gatway"), "{err}");
        let err = ConfigFile::parse("[gateway]\nlisen = \"127.0.0.1:1\"").unwrap_err();
        assert!(err.0.contains("lisen"), "{err}");
    }

    #[test]
    fn a_files_listen_address_may_name_a_host() {
        let listen = |text: &str| {
            ConfigFile::parse(&format!("[gateway]\nlisten = \"{text}\""))
                .map(|file| file.gateway.listen)
        };
        assert_eq!(
            listen("localhost:8787").expect("resolves"),
            Some(SocketAddr::from(([127, 0, 0, 1], 8787)))
        );
        assert_eq!(
            listen("[::1]:9").expect("an address"),
            Some("[::1]:9".parse().expect("address"))
        );
        for (text, says) in [
            ("localhost", "names no port"),
            ("localhost:http", "not a port number"),
            (":8787", "names no host"),
            ("no-such-host.invalid:8787", "cannot resolve the host name"),
        ] {
            let err = listen(text).expect_err(text);
            assert!(
                err.0.contains("listen") && err.0.contains(says) && err.0.contains("HOST:PORT"),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn bad_policy_overrides_name_the_field() {
        let file = ConfigFile::parse("[policy]\ntrigger_ratio = 0.99").unwrap();
        let err = file.into_config(GatewayConfig::new("/tmp/x")).unwrap_err();
        assert!(err.0.contains("trigger_ratio"), "{err}");
    }

    #[test]
    fn summaries_are_prepared_at_a_share_of_the_trigger() {
        let at = |text: &str| {
            ConfigFile::parse(text)
                .expect("parses")
                .into_config(GatewayConfig::new("/tmp/x"))
        };
        let default = at("").expect("valid");
        assert_eq!(default.prepare_summaries_at, Some(0.75));
        let off = at("[gateway]\nprepare_summaries_at = 0").expect("valid");
        assert_eq!(off.prepare_summaries_at, None);
        let err = at("[gateway]\nprepare_summaries_at = 1.0").expect_err("out of range");
        assert!(
            err.0.contains("prepare_summaries_at must be in [0, 1)"),
            "{err}"
        );
    }

    #[test]
    fn the_summarizer_is_chosen_in_the_file() {
        let config = GatewayConfig::new("/tmp/x");
        assert_eq!(config.summarizer.name(), "upstream");
        let file =
            ConfigFile::parse("[gateway]\nsummarizer = \"upstream\"\nsummarizer_model = \"small\"")
                .expect("valid");
        let config = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect("valid");
        assert_eq!(config.summarizer.name(), "upstream:small");
        let file = ConfigFile::parse("[gateway]\nsummarizer = \"extractive\"").expect("valid");
        let config = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect("valid");
        assert_eq!(config.summarizer.name(), "extractive");
        let file = ConfigFile::parse("[gateway]\nsummarizer = \"gpt\"").expect("parses");
        let err = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect_err("unknown summarizer");
        assert!(err.0.contains("summarizer"), "{err}");
    }

    #[test]
    fn memory_follows_the_policy_unless_the_file_says_otherwise() {
        let config = GatewayConfig::new("/tmp/x");
        assert!(
            !config.memory_enabled(),
            "the default policy does not ask for memory"
        );
        let file = ConfigFile::parse("[gateway]\npolicy = \"harness\"").expect("valid");
        let config = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect("valid");
        assert!(config.memory_enabled(), "harness flushes before compacting");
        let file =
            ConfigFile::parse("[gateway]\npolicy = \"cowagent\"\nmemory = false").expect("valid");
        let config = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect("valid");
        assert!(!config.memory_enabled());
        let file =
            ConfigFile::parse("[policy.memory]\nflush_before_compact = true").expect("valid");
        let config = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect("valid");
        assert!(config.memory_enabled(), "a policy key turns it on too");
    }

    #[test]
    fn memory_needs_a_directory_and_the_memory_provider_needs_memory() {
        let mut config = GatewayConfig::new("/tmp/x");
        config.workspace = "postgres://u:secret@db/ctx".into();
        config.memory = Some(true);
        let err = config.validate().expect_err("memory in a database archive");
        assert!(
            err.0.contains("memory = true") && !err.0.contains("secret"),
            "{err}"
        );
        config.memory = None;
        assert!(
            config.validate().is_ok(),
            "as the policy wants: off without a directory"
        );
        let mut config = GatewayConfig::new("/tmp/x");
        config.context_providers = vec![ContextProvider::Memory];
        let err = config
            .validate()
            .expect_err("memory provider without memory");
        assert!(err.0.contains("\"memory\""), "{err}");
        config.memory = Some(true);
        assert!(config.validate().is_ok());
        assert_eq!(
            GatewayConfig::new("/tmp/x").workspace_dir(),
            Some(PathBuf::from("/tmp/x/workspace"))
        );
    }

    #[test]
    fn providers_and_repair_are_read_from_the_file() {
        let file = ConfigFile::parse(
            "[gateway]\ncontext_providers = [\"date\", \"budget\"]\nrepair = true",
        )
        .expect("valid");
        let config = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect("valid");
        assert_eq!(
            config.context_providers,
            vec![ContextProvider::Date, ContextProvider::Budget]
        );
        assert!(config.repair);
        let file =
            ConfigFile::parse("[gateway]\ncontext_providers = [\"weather\"]").expect("parses");
        let err = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect_err("unknown provider");
        assert!(
            err.0.contains("context_providers") && err.0.contains("weather"),
            "{err}"
        );
    }

    #[test]
    fn telemetry_is_off_unless_an_endpoint_is_given() {
        assert!(GatewayConfig::new("/tmp/x").telemetry.is_none());
        let file =
            ConfigFile::parse("[gateway.telemetry]\nservice_name = \"gw\"\ncache_stall_calls = 5")
                .expect("valid");
        let config = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect("valid");
        assert!(config.telemetry.is_none(), "no endpoint, no export");
        assert_eq!(config.cache_stall.calls, 5, "the alarm needs no export");
        let file = ConfigFile::parse(
            "[gateway.telemetry]\nendpoint = \"http://collector:4318/\"\n\
             headers = { authorization = \"Bearer k%2F1\" }\nservice_name = \"gw\"\n\
             resource_attributes = { \"deployment.environment\" = \"prod\" }\n\
             schedule_delay_ms = 100\ncapture_content = true",
        )
        .expect("valid");
        let config = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect("valid");
        let telemetry = config.telemetry.expect("on");
        assert_eq!(telemetry.traces_url, "http://collector:4318/v1/traces");
        assert_eq!(
            telemetry.headers,
            [("authorization".to_string(), "Bearer k/1".to_string())]
        );
        assert_eq!(telemetry.service_name, "gw");
        assert_eq!(
            telemetry.resource,
            [("deployment.environment".to_string(), "prod".to_string())]
        );
        assert_eq!(telemetry.schedule_delay, Duration::from_millis(100));
        assert!(telemetry.capture_content);
        let file = ConfigFile::parse(
            "[gateway.telemetry]\nendpoint = \"http://a:4318\"\n\
             traces_endpoint = \"http://b:4318/custom/path\"",
        )
        .expect("valid");
        let config = file
            .into_config(GatewayConfig::new("/tmp/x"))
            .expect("valid");
        assert_eq!(
            config.telemetry.expect("on").traces_url,
            "http://b:4318/custom/path",
            "the traces endpoint is used as it is, and wins"
        );
    }

    #[test]
    fn bad_telemetry_settings_are_named() {
        let at = |text: &str| {
            ConfigFile::parse(text).and_then(|file| file.into_config(GatewayConfig::new("/tmp/x")))
        };
        for (text, says) in [
            (
                "[gateway.telemetry]\nendpont = \"http://c:4318\"",
                "endpont",
            ),
            (
                "[gateway.telemetry]\nendpoint = \"collector:4318\"",
                "telemetry.endpoint",
            ),
            (
                "[gateway.telemetry]\nendpoint = \"http://c:4317\"\nprotocol = \"grpc\"",
                "http/protobuf",
            ),
            (
                "[gateway.telemetry]\nendpoint = \"http://c:4318\"\nheaders = [\"novalue\"]",
                "KEY=VALUE",
            ),
            (
                "[gateway.telemetry]\nendpoint = \"http://c:4318\"\nmax_queue_size = 0",
                "max_queue_size",
            ),
        ] {
            let err = at(text).expect_err(text);
            assert!(err.0.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn validation_rejects_non_http_upstreams() {
        let mut config = GatewayConfig::new("/tmp/x");
        config.upstream = "ftp://example.invalid".into();
        assert!(config.validate().is_err());
        config.upstream = "http://127.0.0.1:1/v1".into();
        assert!(config.validate().is_ok());
    }
}
