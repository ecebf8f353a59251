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
use ctxkeeper_core::engine::{PolicyConfig, presets};
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
            // What `serve` would refuse only when it opens the store, said now.
            ctxkeeper::store::check_store_url(&config.store_url).map_err(|err| {
                InputError::BadOption(format!("store {}: {err}", redact(&config.store_url)))
            })?;
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
    let mut gateway = Value::try_from(GatewaySettings::effective(config))
        .map_err(|e| InputError::BadOption(format!("cannot render the settings: {e}")))?;
    // `[gateway.telemetry]` comes after the comments about `[gateway]`'s own keys.
    let telemetry = gateway
        .as_table_mut()
        .and_then(|table| table.remove("telemetry"));
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
    let preset = presets::preset(&config.policy_preset);
    let origin = format!(
        "# [policy]: the {} preset; a value marked \"# override\" comes from the config file's [policy] (the preset's value follows it)\n",
        config.policy_preset
    );
    let policy = match &preset {
        Some(preset) => mark_overrides(&section("policy", policy)?, &config.policy, preset),
        None => section("policy", policy)?,
    };
    // Unset, long-term memory follows the policy: said as a comment, so the output read back
    // under another policy follows that one.
    let memory = match config.memory {
        Some(_) => String::new(),
        None => format!(
            "# memory: {}, as the policy wants ([policy.memory]; set memory = true or false to decide)\n",
            if config.memory_enabled() { "on" } else { "off" }
        ),
    };
    let telemetry = match telemetry {
        Some(table) => {
            let mut gateway = toml::Table::new();
            gateway.insert("telemetry".into(), table);
            let headers = match &config.telemetry {
                Some(telemetry) if !telemetry.headers.is_empty() => "set",
                _ => "none",
            };
            format!(
                "\n{}# telemetry headers: {headers}\n",
                section("gateway", Value::Table(gateway))?
            )
        }
        None => String::new(),
    };
    Ok(format!(
        "{}{memory}{secrets}{telemetry}\n{origin}{policy}\n{}",
        section("gateway", gateway)?,
        section("models", Value::Table(models))?
    ))
}

/// The rendered `[policy]` section with every value that differs from the preset's marked
/// `# override (preset: VALUE)`; a list that differs is marked on each of its lines or
/// table headers.
fn mark_overrides(rendered: &str, policy: &PolicyConfig, preset: &PolicyConfig) -> String {
    let (Ok(effective), Ok(original)) =
        (serde_json::to_value(policy), serde_json::to_value(preset))
    else {
        return rendered.to_string();
    };
    let mut out = String::with_capacity(rendered.len());
    // The table the lines being read belong to, as a dotted path below `policy`.
    let mut table = String::new();
    // Inside a multi-line string, the delimiter that closes it.
    let mut open: Option<&str> = None;
    for line in rendered.lines() {
        if let Some(delimiter) = open {
            if line.contains(delimiter) {
                open = None;
            }
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let trimmed = line.trim();
        let mut mark = None;
        let mut multiline = false;
        if let Some(header) = trimmed
            .strip_prefix("[[")
            .and_then(|h| h.strip_suffix("]]"))
        {
            table = header
                .trim_start_matches("policy")
                .trim_start_matches('.')
                .to_string();
            mark = differs(&effective, &original, &table);
        } else if let Some(header) = trimmed.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            table = header
                .trim_start_matches("policy")
                .trim_start_matches('.')
                .to_string();
        } else if let Some((key, value)) = trimmed.split_once(" = ") {
            for delimiter in ["\"\"\"", "'''"] {
                if value.starts_with(delimiter) && !value[3..].contains(delimiter) {
                    open = Some(delimiter);
                    multiline = true;
                }
            }
            let key = key.trim().trim_matches('"');
            let path = if table.is_empty() {
                key.to_string()
            } else {
                format!("{table}.{key}")
            };
            // A key of an element of a list of tables: the list is marked on its header.
            if !array_element(&effective, &table) {
                mark = differs(&effective, &original, &path);
            }
        }
        match mark {
            // A comment after `"""` would be part of the string: it goes above instead.
            Some(was) if multiline => {
                out.push_str(&format!("# override (preset: {was})\n{line}\n"));
            }
            Some(was) => out.push_str(&format!("{line}  # override (preset: {was})\n")),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The value at a dotted path of a serialised policy.
fn lookup<'v>(value: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    path.split('.')
        .filter(|key| !key.is_empty())
        .try_fold(value, |value, key| value.get(key))
}

/// Whether `table` is a list (its lines are the elements of a list of tables).
fn array_element(effective: &serde_json::Value, table: &str) -> bool {
    !table.is_empty() && lookup(effective, table).is_some_and(serde_json::Value::is_array)
}

/// The preset's value at `path`, as TOML text, when the policy's differs from it.
fn differs(
    effective: &serde_json::Value,
    original: &serde_json::Value,
    path: &str,
) -> Option<String> {
    let now = lookup(effective, path).filter(|v| !v.is_null());
    let was = lookup(original, path).filter(|v| !v.is_null());
    if now == was {
        return None;
    }
    Some(match was {
        None => "unset".to_string(),
        Some(serde_json::Value::Array(items)) => format!("{} entries", items.len()),
        Some(serde_json::Value::Object(_)) => "a table".to_string(),
        Some(value) => {
            let text =
                toml::Value::try_from(value).map_or_else(|_| value.to_string(), |v| v.to_string());
            // A template or prompt is named, not repeated.
            match text.char_indices().nth(60) {
                Some((cut, _)) if !text.contains('\n') => format!("{}…", &text[..cut]),
                _ if text.contains('\n') => "a multi-line text".to_string(),
                _ => text,
            }
        }
    })
}
