//! The configuration file: `[gateway]` ([`GatewaySettings`]), `[models."NAME"]` (model
//! profiles) and `[policy]` (overrides of the chosen policy). Unknown sections and fields are
//! errors that name them.
//!
//! [`ConfigFile::resolve`] is the one place the layers meet: the file's `[gateway]` under the
//! settings given by the environment and the command line, applied to the defaults; then the
//! file's models; then its `[policy]` overrides, on top of whichever preset the merged
//! settings chose (so `--policy agentrail` with a file's `[policy]` runs agentrail with those
//! overrides), key by key at every depth ([`PolicyOverlay`]). A `[policy]` whose `name` is a
//! preset selects that preset when no other is chosen, so what `config show` prints reads back
//! as the same policy.

use std::path::Path;

use ctxkeeper_core::engine::PolicyOverlay;
use ctxkeeper_core::tokens::Profiles;

use super::{ConfigError, GatewayConfig, GatewaySettings};

/// A parsed configuration file: `[gateway]`, `[models."NAME"]` and `[policy]`.
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    pub gateway: GatewaySettings,
    /// The `[models]` table as TOML text (`[models."NAME"]` entries).
    pub models: Option<String>,
    /// The `[policy]` table as TOML text, applied on top of the chosen preset.
    pub policy: Option<String>,
}

impl ConfigFile {
    /// Parses the file's text; unknown sections and fields are errors.
    pub fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| ConfigError(e.to_string().trim().to_string()))?;
        let gateway = match table.remove("gateway") {
            Some(value) => value
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError(format!("[gateway]: {}", e.message())))?,
            None => GatewaySettings::default(),
        };
        let models = table.remove("models").map(|models| {
            let mut wrapper = toml::Table::new();
            wrapper.insert("models".into(), models);
            wrapper.to_string()
        });
        let policy = match table.remove("policy") {
            Some(toml::Value::Table(policy)) => Some(policy.to_string()),
            Some(_) => return Err(ConfigError("[policy] must be a table".into())),
            None => None,
        };
        if let Some(unknown) = table.keys().next() {
            return Err(ConfigError(format!(
                "unknown section {unknown:?} (expected [gateway], [models.\"NAME\"] or [policy])"
            )));
        }
        Ok(ConfigFile {
            gateway,
            models,
            policy,
        })
    }

    /// Reads and parses a file.
    pub fn read(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
        ConfigFile::parse(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))
    }

    /// Applies the file on top of `base`.
    pub fn into_config(self, base: GatewayConfig) -> Result<GatewayConfig, ConfigError> {
        self.resolve(GatewaySettings::default(), base)
    }

    /// The configuration of the file's `[gateway]` under `later` (the environment and the
    /// command line), its models and its `[policy]` overrides, over `base`.
    pub fn resolve(
        self,
        later: GatewaySettings,
        base: GatewayConfig,
    ) -> Result<GatewayConfig, ConfigError> {
        let settings = self.gateway.over(later);
        let chosen = settings.policy.clone();
        let mut config = settings.apply(base)?;
        if let Some(models) = &self.models {
            config.profiles = Profiles::from_toml_str(models)
                .map_err(|e| ConfigError(format!("[models]: {e}")))?;
        }
        if let Some(policy) = &self.policy {
            let overlay =
                PolicyOverlay::parse(policy).map_err(|e| ConfigError(format!("[policy]: {e}")))?;
            if let Some(named) = overlay.preset() {
                // `config show` prints the policy whole, `name` included: that file selects
                // its preset again. Beside another chosen preset it would be ambiguous.
                if let Some(chosen) = chosen.as_deref().filter(|chosen| *chosen != named) {
                    return Err(ConfigError(format!(
                        "[policy] name = {named:?} selects the {named} preset, but the policy \
                         chosen is {chosen:?} ([gateway] policy, CTXKEEPER_POLICY or --policy): \
                         keep one of them"
                    )));
                }
                config.policy_preset = named.to_string();
            }
            config.policy = overlay
                .apply(&config.policy)
                .map_err(|e| ConfigError(format!("[policy]: {e}")))?;
        }
        Ok(config)
    }
}
