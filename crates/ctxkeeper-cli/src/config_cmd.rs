//! `ctxkeeper config show|validate`: the settings `serve` would run with.
//!
//! Both subcommands take exactly the options of `serve` (and read `CTXKEEPER_CONFIG` and the
//! other environment variables the same way), resolve them through the same function, and
//! so answer "what would the gateway do with this file and these flags?" without starting it.
//!
//! ```text
//! $ ctxkeeper config validate --config ctxkeeper.toml
//! ok: ctxkeeper.toml (policy default, store sqlite://…/sessions.db)
//! $ ctxkeeper config show --config ctxkeeper.toml --policy agentrail
//! [gateway]
//! listen = "127.0.0.1:8787"
//! …
//! ```
//!
//! Secrets never print: whether an admin token or tenant tokens are set is said in a comment,
//! and store or archive URLs have their passwords redacted.

use anyhow::Result;
use clap::{Args, Subcommand};
use ctxkeeper::store::redact;
use ctxkeeper_gateway::config::GatewayConfig;

use crate::serve::{self, ServeArgs};
use crate::trace_input::InputError;

#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective settings (defaults, then the file, then the flags) as TOML.
    Show(Box<ServeArgs>),
    /// Check the file and flags as `serve` would; exit 2 with the offending field on error.
    Validate(Box<ServeArgs>),
}

pub fn run(args: &ConfigArgs) -> Result<()> {
    match &args.command {
        ConfigCommand::Show(serve_args) => {
            let config = serve::config(serve_args)?;
            print!("{}", render(&config)?);
            Ok(())
        }
        ConfigCommand::Validate(serve_args) => {
            let config = serve::config(serve_args)?;
            let source = serve_args
                .config
                .as_ref()
                .map_or_else(|| "defaults".to_string(), |p| p.display().to_string());
            println!(
                "ok: {source} (policy {}, store {}, {} model profiles)",
                config.policy.name,
                redact(&config.store_url),
                config.profiles.len()
            );
            Ok(())
        }
    }
}

/// The effective settings as a TOML document with `[gateway]`, `[policy]` and `[models]`.
fn render(config: &GatewayConfig) -> Result<String> {
    use toml::Value;
    let mut gateway = toml::Table::new();
    let mut put = |key: &str, value: Value| {
        gateway.insert(key.to_string(), value);
    };
    let seconds =
        |d: std::time::Duration| Value::Integer(d.as_secs().try_into().unwrap_or(i64::MAX));
    let count = |n: usize| Value::Integer(n.try_into().unwrap_or(i64::MAX));
    put("listen", Value::String(config.listen.to_string()));
    put("upstream", Value::String(config.upstream.clone()));
    put(
        "anthropic_upstream",
        Value::String(config.anthropic_upstream.clone()),
    );
    put("store", Value::String(redact(&config.store_url)));
    put("workspace", Value::String(redact(&config.workspace)));
    put(
        "trust_tenant_header",
        Value::Boolean(config.tenants.trusts_header()),
    );
    put("body_limit", count(config.body_limit));
    put("max_inflight_bytes", count(config.max_inflight_bytes));
    put("connect_timeout_secs", seconds(config.connect_timeout));
    put("upstream_timeout_secs", seconds(config.upstream_timeout));
    put("upstream_deadline_secs", seconds(config.upstream_deadline));
    put("header_timeout_secs", seconds(config.header_timeout));
    put("body_timeout_secs", seconds(config.body_timeout));
    put("session_idle_secs", seconds(config.session_idle));
    put("session_cache", count(config.session_cache));
    put("resent_prefix_bytes", count(config.resent_prefix_bytes));
    put("forward_early_from_bytes", count(config.forward_early_from));
    // The effective value: the policy's wish resolved.
    put(
        "memory",
        Value::Boolean(config.memory_enabled() && config.workspace_dir().is_some()),
    );
    put(
        "context_providers",
        Value::Array(
            config
                .context_providers
                .iter()
                .map(|p| Value::String(p.name().to_string()))
                .collect(),
        ),
    );
    put("repair", Value::Boolean(config.repair));
    put(
        "max_consecutive_recoveries",
        Value::Integer(config.max_consecutive_recoveries.into()),
    );
    // `upstream[:MODEL]`, `extractive`, `openai:MODEL`, `anthropic:MODEL`.
    let summarizer = config.summarizer.name();
    let (kind, model) = summarizer
        .split_once(':')
        .map_or((summarizer.as_str(), None), |(k, m)| (k, Some(m)));
    put("summarizer", Value::String(kind.to_string()));
    if let Some(model) = model {
        put("summarizer_model", Value::String(model.to_string()));
    }
    put("summary_timeout_secs", seconds(config.summary_timeout));
    put(
        "prepare_summaries_at",
        Value::Float(config.prepare_summaries_at.unwrap_or(0.0)),
    );
    put(
        "responses_compaction",
        Value::String(config.responses_compaction.name().to_string()),
    );

    let policy = Value::try_from(&config.policy)
        .map_err(|e| InputError::BadOption(format!("cannot render the policy: {e}")))?;
    let mut models = toml::Table::new();
    for name in config.profiles.names() {
        let Some(profile) = config.profiles.get(name) else {
            continue;
        };
        let mut table = toml::Table::new();
        table.insert(
            "context_window".into(),
            Value::Integer(profile.context_window.try_into().unwrap_or(i64::MAX)),
        );
        table.insert(
            "max_output".into(),
            Value::Integer(profile.max_output.try_into().unwrap_or(i64::MAX)),
        );
        models.insert(name.to_string(), Value::Table(table));
    }
    // One table per section, in reading order (a single table would sort them by name).
    let section = |name: &str, value: Value| -> Result<String> {
        let mut document = toml::Table::new();
        document.insert(name.to_string(), value);
        Ok(toml::to_string(&document)?)
    };
    // Secrets are only said to exist, as comments, so the output can be fed back as a file
    // without turning "set" into a token.
    let secrets = format!(
        "# admin_token: {}\n# tenant_tokens: {}\n",
        if config.admin_token.is_some() {
            "set"
        } else {
            "not set (admin API off)"
        },
        if config.tenants.has_tokens() {
            "set"
        } else {
            "none"
        },
    );
    Ok(format!(
        "{}{secrets}\n{}\n{}",
        section("gateway", Value::Table(gateway))?,
        section("policy", policy)?,
        section("models", Value::Table(models))?
    ))
}
