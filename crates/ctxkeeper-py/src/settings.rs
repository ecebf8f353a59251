//! `policy=` of the constructor as the shared layer's [`PolicySpec`].

use ctxkeeper_embed::PolicySpec;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use serde_json::Value;

use crate::errors;

/// A preset name, the path of a TOML configuration file (a `str` or any path-like), or a
/// dict of `[policy]` overrides (`"preset"` names the base).
pub fn policy_spec(policy: &Bound<'_, PyAny>) -> PyResult<PolicySpec> {
    if let Ok(dict) = policy.cast::<PyDict>() {
        let value: Value = pythonize::depythonize(dict.as_any())
            .map_err(|e| errors::config(format!("policy dict: {e}")))?;
        return Ok(PolicySpec::Overrides(value));
    }
    if let Ok(text) = policy.cast::<PyString>() {
        return Ok(PolicySpec::Named(text.to_str()?.to_string()));
    }
    if policy.hasattr("__fspath__")? {
        return Ok(PolicySpec::Named(
            policy.call_method0("__fspath__")?.extract::<String>()?,
        ));
    }
    Err(errors::config(format!(
        "policy must be a preset name, a config file path or a dict, not {}",
        policy.get_type().name()?
    )))
}
