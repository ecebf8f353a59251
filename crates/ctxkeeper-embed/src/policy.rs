//! The policy a session runs (a preset, a config file or an object of overrides) and the
//! archive it writes to.

use std::path::Path;

use ctxkeeper_core::engine::{PolicyConfig, presets};
use ctxkeeper_core::tokens::Profiles;
use ctxkeeper_store::is_sql_url;
use serde_json::Value;

use crate::error::EmbedError;

/// `EmbedError::config`, under the name the rest of this module reads.
mod errors {
    pub use crate::error::EmbedError;

    pub fn config(message: impl Into<String>) -> EmbedError {
        EmbedError::config(message)
    }
}

/// A resolved policy and the model profiles that go with it (a config file may add some).
#[derive(Debug)]
pub struct Policy {
    pub config: PolicyConfig,
    pub profiles: Profiles,
}

/// What a caller names as its policy.
#[derive(Debug, Clone)]
pub enum PolicySpec {
    /// A preset name, or the path of a TOML configuration file (the file `ctxkeeper serve
    /// --config` reads: `[gateway] policy` names the preset, `[policy]` overrides it,
    /// `[models."NAME"]` adds model profiles).
    Named(String),
    /// `[policy]` overrides as a JSON object (`"preset"` names the base, `default`
    /// otherwise): `{"preset": "default", "trigger": {"ratio": 0.5}}`.
    Overrides(Value),
}

impl Default for PolicySpec {
    fn default() -> PolicySpec {
        PolicySpec::Named("default".into())
    }
}

/// Resolves a policy the caller named.
pub fn resolve_policy(policy: &PolicySpec) -> Result<Policy, EmbedError> {
    let text = match policy {
        PolicySpec::Overrides(value) => return from_overrides(value.clone()),
        PolicySpec::Named(text) => text,
    };
    if let Some(config) = presets::preset(text) {
        return Ok(Policy {
            config,
            profiles: Profiles::builtin(),
        });
    }
    let path = Path::new(text);
    if path.is_file() || text.ends_with(".toml") {
        return from_file(path);
    }
    Err(errors::config(format!(
        "unknown policy {text:?}: expected a preset ({}), the path of a TOML config file, or an object of overrides",
        presets::NAMES.join(", ")
    )))
}

fn preset(name: &str) -> Result<PolicyConfig, EmbedError> {
    presets::preset(name).ok_or_else(|| {
        errors::config(format!(
            "unknown preset {name:?} (available: {})",
            presets::NAMES.join(", ")
        ))
    })
}

fn from_overrides(value: Value) -> Result<Policy, EmbedError> {
    let Value::Object(mut fields) = value else {
        return Err(errors::config("policy overrides must be an object"));
    };
    let base = match fields.remove("preset") {
        Some(Value::String(name)) => preset(&name)?,
        Some(other) => {
            return Err(errors::config(format!(
                "policy.preset must be a preset name, not {other}"
            )));
        }
        None => preset("default")?,
    };
    if fields.is_empty() {
        return Ok(Policy {
            config: base,
            profiles: Profiles::builtin(),
        });
    }
    let table: toml::Table = serde_json::from_value(Value::Object(fields))
        .map_err(|e| errors::config(format!("policy overrides: {e} (TOML has no null)")))?;
    let config = base
        .with_overrides(&table.to_string())
        .map_err(|e| errors::config(format!("policy overrides: {e}")))?;
    Ok(Policy {
        config,
        profiles: Profiles::builtin(),
    })
}

fn from_file(path: &Path) -> Result<Policy, EmbedError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| errors::config(format!("cannot read the config file {shown}: {e}")))?;
    let bad = |message: String| errors::config(format!("{shown}: {message}"));
    let mut table: toml::Table =
        toml::from_str(&text).map_err(|e| bad(e.to_string().trim().to_string()))?;
    let name = match table.remove("gateway") {
        Some(toml::Value::Table(gateway)) => match gateway.get("policy") {
            Some(toml::Value::String(name)) => name.clone(),
            Some(_) => return Err(bad("[gateway] policy must be a preset name".into())),
            None => "default".to_string(),
        },
        Some(_) => return Err(bad("[gateway] must be a table".into())),
        None => "default".to_string(),
    };
    let profiles = match table.remove("models") {
        Some(models) => {
            let mut wrapper = toml::Table::new();
            wrapper.insert("models".into(), models);
            Profiles::from_toml_str(&wrapper.to_string()).map_err(|e| bad(e.to_string()))?
        }
        None => Profiles::builtin(),
    };
    let base = preset(&name).map_err(|_| {
        bad(format!(
            "unknown policy {name:?} in [gateway] (available: {})",
            presets::NAMES.join(", ")
        ))
    })?;
    let config = match table.remove("policy") {
        Some(toml::Value::Table(policy)) => base
            .with_overrides(&policy.to_string())
            .map_err(|e| bad(format!("[policy]: {e}")))?,
        Some(_) => return Err(bad("[policy] must be a table".into())),
        None => base,
    };
    if let Some(unknown) = table.keys().next() {
        return Err(bad(format!(
            "unknown section {unknown:?} (expected [gateway], [models.\"NAME\"] or [policy])"
        )));
    }
    Ok(Policy { config, profiles })
}

/// The archive a manager writes to: `workspace=` when given (a directory or an archive URL),
/// else the store's own database or directory, else an in-process archive.
pub fn archive_url(workspace: Option<&str>, store: Option<&str>) -> String {
    if let Some(workspace) = workspace {
        return workspace.to_string();
    }
    match store {
        Some(url) if is_sql_url(url) || url.starts_with("file://") || !url.contains("://") => {
            url.to_string()
        }
        _ => "memory://".to_string(),
    }
}
