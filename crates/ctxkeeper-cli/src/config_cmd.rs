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
use ctxkeeper_gateway::config::{GatewayConfig, GatewaySettings};

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

/// The effective settings as a TOML document with `[gateway]` (the same
/// [`GatewaySettings`] a file's `[gateway]` is read into), `[policy]` and `[models]`.
fn render(config: &GatewayConfig) -> Result<String> {
    use toml::Value;
    let gateway = Value::try_from(GatewaySettings::effective(config))
        .map_err(|e| InputError::BadOption(format!("cannot render the settings: {e}")))?;
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
        section("gateway", gateway)?,
        section("policy", policy)?,
        section("models", Value::Table(models))?
    ))
}
