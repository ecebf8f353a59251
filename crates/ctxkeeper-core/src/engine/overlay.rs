//! Partial policies: a TOML fragment laid over a policy key by key, at every depth.
//!
//! A `--config` file's `[policy]`, the admin API's policy PATCH and the one-off overrides of a
//! manual compaction all say only what they change. A [`PolicyOverlay`] keeps exactly the keys
//! it was given; [`PolicyOverlay::apply`] sets those keys on the policy and leaves every other
//! one as it was, in sub-tables too: `[ingest.tool_result] max_tokens = 8000` under
//! `agentscope` changes that limit and keeps the 5-image limit and the prefix-only preview.
//!
//! - A table merges into the table it names, key by key. A table the policy leaves unset
//!   (`reactive`, `cost`, `ingest.tool_result` in some presets) is switched on with its
//!   defaults under the keys given.
//! - A list (`stages`, `overflow.stages`, `summary.schema.fields`, `pin.tools`, …) replaces
//!   the list: a cascade is read in order, and half of one is no cascade.
//! - `name` naming a preset selects that preset as the base (the policy `config show` prints
//!   reads back as itself); any other name only relabels the policy.
//! - The seed systems' spellings (`triggerTokens`, `tool_result_limit`, …) set the same key
//!   as the canonical one; giving both is an error.
//!
//! ```
//! use ctxkeeper_core::engine::{presets, PolicyOverlay};
//!
//! let overlay = PolicyOverlay::parse("[ingest.tool_result]\nmax_tokens = 8000").unwrap();
//! let policy = overlay.apply(&presets::lookup("agentscope").unwrap()).unwrap();
//! let cap = policy.ingest.tool_result.as_ref().unwrap();
//! assert_eq!(cap.max_tokens, Some(8_000));
//! assert_eq!(cap.tail_chars, 0); // the preset's, kept
//! assert_eq!(policy.ingest.max_images, Some(5)); // the preset's, kept
//!
//! let error = PolicyOverlay::parse("[overflow]\nmax_atempts = 3").unwrap()
//!     .apply(&presets::lookup("cowagent").unwrap()).unwrap_err();
//! assert!(error.0.contains("overflow") && error.0.contains("max_atempts"), "{error}");
//! ```

use serde_json::Value;

use super::config::{ConfigError, PolicyConfig};
use super::presets;

/// The seed systems' spellings of policy keys, by the table they sit in (`""` for the top
/// level): `(table, alias, key)`. The stages' own spellings need no entry here, since a list
/// of stages is replaced whole and read by serde, which knows them.
const ALIASES: &[(&str, &str, &str)] = &[
    ("", "triggerTokens", "trigger_tokens"),
    ("", "max_total_tokens", "trigger_tokens"),
    ("", "triggerMessages", "trigger_messages"),
    ("", "agent_max_context_turns", "trigger_turns"),
    ("", "minMessages", "min_messages"),
    ("", "reserve_ratio", "target_ratio"),
    ("", "preserveRecentApiRounds", "keep_recent_rounds"),
    ("memory", "flushBeforeCompact", "flush_before_compact"),
    ("ingest.tool_result", "tool_result_limit", "max_tokens"),
    (
        "ingest.tool_result",
        "max_tool_message_tokens",
        "max_tokens",
    ),
    ("reactive", "microTriggerPct", "micro_trigger_pct"),
    ("reactive", "fullTriggerPct", "full_trigger_pct"),
    ("reactive", "microBatchGroups", "micro_batch_groups"),
    (
        "reactive",
        "maxReactiveCompactionsPerRequest",
        "max_per_request",
    ),
];

/// A partial policy: the keys a fragment sets, spelled canonically. See the
/// [module documentation](self).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyOverlay {
    table: toml::Table,
}

impl PolicyOverlay {
    /// Parses a TOML fragment (the inside of a `[policy]` table). Non-finite numbers and an
    /// alias given beside its key are refused, naming the field.
    pub fn parse(fragment: &str) -> Result<PolicyOverlay, ConfigError> {
        let table: toml::Table = toml::from_str(fragment)
            .map_err(|err| ConfigError(err.to_string().trim().to_string()))?;
        PolicyOverlay::from_table(table)
    }

    /// The overlay of an already parsed table.
    pub fn from_table(table: toml::Table) -> Result<PolicyOverlay, ConfigError> {
        Ok(PolicyOverlay {
            table: canonical(table, "")?,
        })
    }

    /// Whether the overlay sets nothing.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The overlay as TOML text (what [`PolicyOverlay::parse`] reads back as itself).
    pub fn to_toml_string(&self) -> String {
        self.table.to_string()
    }

    /// The preset the overlay's `name` selects, when it names one.
    pub fn preset(&self) -> Option<&str> {
        self.table
            .get("name")
            .and_then(toml::Value::as_str)
            .filter(|name| presets::NAMES.contains(name))
    }

    /// Lays `later` over this overlay, key by key at every depth (lists replaced): two
    /// successive PATCHes keep what the first set unless the second sets it again.
    pub fn merge(&mut self, later: &PolicyOverlay) {
        merge_toml(&mut self.table, &later.table);
    }

    /// The keys the overlay sets, as dotted paths (`ingest.tool_result.max_tokens`); a list
    /// is one key.
    pub fn paths(&self) -> Vec<String> {
        let mut paths = Vec::new();
        leaf_paths(&self.table, "", &mut paths);
        paths
    }

    /// `base` with the overlay's keys set, validated. When the overlay's `name` names another
    /// preset, that preset is the base instead.
    pub fn apply(&self, base: &PolicyConfig) -> Result<PolicyConfig, ConfigError> {
        let selected;
        let base = match self.preset() {
            Some(name) if name != base.name => {
                selected = presets::lookup(name).map_err(|e| ConfigError(e.to_string()))?;
                &selected
            }
            _ => base,
        };
        // Merged as JSON, not TOML: TOML has no null, so an option the base leaves unset
        // (`trigger_ratio = None`) would vanish and come back as its default.
        let mut merged = serde_json::to_value(base).map_err(|e| ConfigError(e.to_string()))?;
        let patch = serde_json::to_value(&self.table).map_err(|e| ConfigError(e.to_string()))?;
        merge_json(&mut merged, patch);
        let policy: PolicyConfig = serde_path_to_error::deserialize(merged).map_err(|err| {
            let path = err.path().to_string();
            let inner = err.into_inner();
            if path == "." || path.is_empty() {
                ConfigError(inner.to_string())
            } else {
                ConfigError(format!("{path}: {inner}"))
            }
        })?;
        policy.validate()?;
        Ok(policy)
    }
}

/// The table with every alias renamed to its key (and every number checked finite).
fn canonical(table: toml::Table, path: &str) -> Result<toml::Table, ConfigError> {
    let mut out = toml::Table::new();
    for (key, value) in table {
        let field = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        // JSON has no NaN or infinity: serde_json would turn `trigger_ratio = nan` into
        // null, an unset option, which silently switches the ratio trigger off.
        check_finite(&field, &value)?;
        let name = ALIASES
            .iter()
            .find(|(table, alias, _)| *table == path && *alias == key)
            .map_or(key.as_str(), |(_, _, name)| name)
            .to_string();
        if out.contains_key(&name) {
            let at = |k: &str| {
                if path.is_empty() {
                    k.to_string()
                } else {
                    format!("{path}.{k}")
                }
            };
            return Err(ConfigError(format!(
                "{} is given twice ({key} is another spelling of it)",
                at(&name)
            )));
        }
        let value = match value {
            toml::Value::Table(inner) => {
                let inner_path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                toml::Value::Table(canonical(inner, &inner_path)?)
            }
            other => other,
        };
        out.insert(name, value);
    }
    Ok(out)
}

fn merge_toml(base: &mut toml::Table, patch: &toml::Table) {
    for (key, value) in patch {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(patch)) => {
                merge_toml(inner, patch)
            }
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

fn merge_json(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                match base.get_mut(&key) {
                    Some(slot @ Value::Object(_)) if value.is_object() => merge_json(slot, value),
                    _ => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, patch) => *base = patch,
    }
}

fn leaf_paths(table: &toml::Table, path: &str, out: &mut Vec<String>) {
    for (key, value) in table {
        let field = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match value {
            toml::Value::Table(inner) => leaf_paths(inner, &field, out),
            _ => out.push(field),
        }
    }
}

/// Refuses NaN and infinities anywhere in an override's value, naming the field.
fn check_finite(path: &str, value: &toml::Value) -> Result<(), ConfigError> {
    match value {
        toml::Value::Float(number) if !number.is_finite() => Err(ConfigError(format!(
            "{path} must be a finite number, got {number}"
        ))),
        toml::Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| check_finite(&format!("{path}[{i}]"), item)),
        toml::Value::Table(table) => table
            .iter()
            .try_for_each(|(key, item)| check_finite(&format!("{path}.{key}"), item)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::presets::{NAMES, preset};

    fn json(policy: &PolicyConfig) -> Value {
        serde_json::to_value(policy).unwrap_or_default()
    }

    /// Every leaf of `a` that differs from `b`, as dotted paths (lists compared whole).
    fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                    let field = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    differences(
                        a.get(key).unwrap_or(&Value::Null),
                        b.get(key).unwrap_or(&Value::Null),
                        &field,
                        out,
                    );
                }
            }
            (a, b) if a != b => out.push(path.to_string()),
            _ => {}
        }
    }

    /// Item 1 of issue 33: one key set in any sub-table of any preset changes that key only
    /// (a partial `[policy.overflow]` used to empty cowagent's emergency stages).
    #[test]
    fn one_key_in_a_sub_table_changes_that_key_only() {
        let cases = [
            (
                "[ingest.tool_result]\nmax_tokens = 1234",
                "ingest.tool_result.max_tokens",
            ),
            ("[ingest]\nmax_images = 2", "ingest.max_images"),
            ("[overflow]\nmax_attempts = 3", "overflow.max_attempts"),
            ("[session]\nretention_days = 9", "session.retention_days"),
            (
                "[summary]\nmax_summary_tokens = 321",
                "summary.max_summary_tokens",
            ),
            (
                "[memory]\nflush_before_compact = true",
                "memory.flush_before_compact",
            ),
            ("[archive]\ngroup_files = true", "archive.group_files"),
            ("[pin]\nfirst_user_message = true", "pin.first_user_message"),
        ];
        for name in NAMES {
            let base = preset(name).unwrap_or_default();
            let base_json = json(&base);
            for (fragment, key) in cases {
                // A table the preset leaves unset comes on whole (tested below).
                let parent = key.rsplit_once('.').map_or("", |(p, _)| p);
                let table = parent.split('.').try_fold(&base_json, |v, k| v.get(k));
                if table.is_none_or(Value::is_null) {
                    continue;
                }
                let patched = PolicyOverlay::parse(fragment)
                    .and_then(|o| o.apply(&base))
                    .unwrap_or_else(|e| panic!("{name} {fragment:?}: {e}"));
                let mut changed = Vec::new();
                differences(&json(&patched), &json(&base), "", &mut changed);
                changed.retain(|path| path != key);
                assert!(
                    changed.is_empty(),
                    "{name} {fragment:?} also changed {changed:?}"
                );
            }
        }
    }

    #[test]
    fn the_issue_examples_keep_the_rest_of_their_table() {
        let agentscope = preset("agentscope").unwrap_or_default();
        let patched = agentscope
            .with_overrides("[ingest.tool_result]\nmax_tokens = 9000")
            .unwrap_or_default();
        assert_eq!(patched.ingest.max_images, Some(5));
        let patched = agentscope
            .with_overrides("[summary]\nmax_summary_tokens = 500")
            .unwrap_or_default();
        assert_eq!(
            patched.summary.summary_template,
            agentscope.summary.summary_template
        );
        let cowagent = preset("cowagent").unwrap_or_default();
        let patched = cowagent
            .with_overrides("[overflow]\nmax_attempts = 3")
            .unwrap_or_default();
        assert_eq!(patched.overflow.stages, cowagent.overflow.stages);
        assert_eq!(patched.overflow.max_attempts, 3);
        let patched = cowagent
            .with_overrides("[session]\nretention_days = 7")
            .unwrap_or_default();
        assert_eq!(patched.session.restore_recent_turns, Some(20));
    }

    #[test]
    fn lists_replace_and_unset_tables_come_on_with_their_defaults() {
        let cowagent = preset("cowagent").unwrap_or_default();
        let patched = cowagent
            .with_overrides("[[overflow.stages]]\nkind = \"clear\"")
            .unwrap_or_default();
        assert_eq!(patched.overflow.stages.len(), 1);
        let patched = cowagent
            .with_overrides("[reactive]\nmax_per_request = 1")
            .unwrap_or_default();
        let reactive = patched.reactive.unwrap_or_default();
        assert_eq!(reactive.max_per_request, 1);
        assert_eq!(reactive.full_trigger_pct, 92.0);
    }

    #[test]
    fn seed_spellings_set_the_same_key_at_any_depth() {
        let agentscope = preset("agentscope").unwrap_or_default();
        let patched = agentscope
            .with_overrides("[ingest.tool_result]\ntool_result_limit = 777")
            .unwrap_or_default();
        assert_eq!(
            patched.ingest.tool_result.and_then(|c| c.max_tokens),
            Some(777)
        );
        let patched = agentscope
            .with_overrides("triggerTokens = 5000")
            .unwrap_or_default();
        assert_eq!(patched.trigger_tokens, Some(5_000));
        let twice = agentscope
            .with_overrides("triggerTokens = 5000\ntrigger_tokens = 6000")
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert!(twice.contains("trigger_tokens"), "{twice}");
    }

    /// Every alias the config types declare outside the stages is in [`ALIASES`]: a spelling
    /// missing there would sit beside its key and be refused as a duplicate.
    #[test]
    fn every_struct_alias_is_known() {
        let source = include_str!("config.rs");
        let structs = source
            .split("pub enum Stage")
            .next()
            .unwrap_or_default()
            .to_string()
            + source
                .split("pub struct ReactiveConfig")
                .nth(1)
                .unwrap_or_default();
        for piece in structs.split("alias = \"").skip(1) {
            let alias = piece.split('"').next().unwrap_or_default();
            assert!(
                ALIASES.iter().any(|(_, a, _)| *a == alias),
                "alias {alias:?} is missing from ALIASES"
            );
        }
    }

    #[test]
    fn a_preset_name_selects_the_preset_and_other_names_relabel() {
        let default = preset("default").unwrap_or_default();
        let cowagent = default
            .with_overrides("name = \"cowagent\"")
            .unwrap_or_default();
        assert_eq!(cowagent, preset("cowagent").unwrap_or_default());
        let mine = default
            .with_overrides("name = \"mine\"")
            .unwrap_or_default();
        assert_eq!(mine.name, "mine");
        assert_eq!(mine.stages, default.stages);
    }

    /// What `config show` prints as `[policy]` reads back as the same policy, whatever the
    /// policy it starts from.
    #[test]
    fn a_whole_policy_reads_back_as_itself() {
        for name in NAMES {
            let policy = preset(name).unwrap_or_default();
            let text = toml::to_string(&policy).unwrap_or_default();
            for start in ["default", "none", name] {
                let back = preset(start)
                    .unwrap_or_default()
                    .with_overrides(&text)
                    .unwrap_or_else(|e| panic!("{name} over {start}: {e}"));
                assert_eq!(back, policy, "{name} over {start}");
            }
        }
    }

    #[test]
    fn successive_overlays_merge() {
        let mut first = PolicyOverlay::parse("[overflow]\nmax_attempts = 3").unwrap_or_default();
        let second = PolicyOverlay::parse("[overflow]\nshrink_factor = 0.5").unwrap_or_default();
        first.merge(&second);
        assert_eq!(
            first.paths(),
            ["overflow.max_attempts", "overflow.shrink_factor"]
        );
    }

    #[test]
    fn overrides_replace_top_level_keys() {
        let base = PolicyConfig::default();
        let patched = base
            .with_overrides("target_ratio = 0.1\nkeep_recent_rounds = 1")
            .unwrap_or_default();
        assert_eq!(patched.target_ratio, 0.1);
        assert_eq!(patched.keep_recent_rounds, 1);
        assert_eq!(patched.trigger_ratio, base.trigger_ratio);
        assert!(base.with_overrides("trigger_ratio = 2.0").is_err());
    }

    /// Finding 7 of the hardening review: a PATCH with `trigger_ratio = nan` was merged as
    /// JSON, where NaN becomes null, and silently switched the ratio trigger off.
    #[test]
    fn non_finite_and_out_of_range_overrides_are_refused_with_the_field() {
        let base = PolicyConfig::default();
        for (fragment, field) in [
            ("trigger_ratio = nan", "trigger_ratio"),
            ("trigger_ratio = inf", "trigger_ratio"),
            ("trigger_ratio = -0.5", "trigger_ratio"),
            ("target_ratio = nan", "target_ratio"),
            ("target_ratio = -inf", "target_ratio"),
            ("target_ratio = -0.1", "target_ratio"),
            (
                "[ingest.tool_result]\nmax_window_share = nan",
                "max_window_share",
            ),
            (
                "[ingest.tool_result]\nmax_window_share = 1.5",
                "max_window_share",
            ),
            ("[overflow]\nshrink_factor = 1.0", "overflow.shrink_factor"),
            ("[overflow]\nshrink_factor = -inf", "overflow.shrink_factor"),
            ("[budget_notice]\nnudge_at = 0.0", "budget_notice.nudge_at"),
            (
                "[reactive]\nmicro_trigger_pct = -5.0",
                "reactive.micro_trigger_pct",
            ),
            (
                "[reactive]\nfull_trigger_pct = nan",
                "reactive.full_trigger_pct",
            ),
            (
                "[[stages]]\nkind = \"trim_turns\"\nmax_turns = 4\ndrop_fraction = -0.1",
                "stages[0] (trim_turns).drop_fraction",
            ),
            (
                "[[stages]]\nkind = \"summarize\"\nkeep_ratio = nan",
                "stages[0].keep_ratio",
            ),
            (
                "[[stages]]\nkind = \"summarize\"\nmin_ratio = 1.5",
                "stages[0] (summarize).min_ratio",
            ),
        ] {
            let err = base
                .with_overrides(fragment)
                .err()
                .map(|e| e.0)
                .unwrap_or_else(|| format!("{fragment:?} was accepted"));
            assert!(err.contains(field), "{fragment:?}: {err}");
            // A whole policy file is held to the same ranges.
            assert!(
                PolicyConfig::from_toml_str(fragment).is_err(),
                "{fragment:?} passed as a file"
            );
        }
        // The nearest valid values pass.
        for fragment in [
            "trigger_ratio = 0.9\ntarget_ratio = 0.0",
            "[overflow]\nshrink_factor = 0.99",
            "[[stages]]\nkind = \"trim_turns\"\nmax_turns = 4\ndrop_fraction = 1.0",
            "trigger_ratio = 0.5\ntarget_ratio = 0.2",
        ] {
            assert!(base.with_overrides(fragment).is_ok(), "{fragment:?}");
        }
    }
}
