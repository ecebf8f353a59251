//! The targets, by what they read. Each asserts what the code it drives promises in its
//! documentation, and nothing more.

pub mod capsule;
pub mod import;
pub mod summary;
pub mod wire;

use ctxkeeper_core::model::{CheckRules, Message, check, repair};

/// `repair` promises a history `check` finds nothing wrong with, and that running it again
/// changes nothing. Internal fill markers are left out: they are the engine's own, reported
/// so a leak is seen, and no repair can know what they stood for.
pub(crate) fn assert_repair_settles(messages: &[Message], rules: CheckRules, label: &str) {
    let rules = CheckRules {
        internal_markers: false,
        ..rules
    };
    let mut repaired = messages.to_vec();
    repair(&mut repaired, &rules);
    let left = check(&repaired, &rules);
    assert!(
        left.is_empty(),
        "{label}: check after repair: {}",
        left.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    );
    let before = repaired.clone();
    let again = repair(&mut repaired, &rules);
    assert!(
        again.is_clean(),
        "{label}: a second repair changed {again:?}"
    );
    assert_eq!(
        repaired, before,
        "{label}: a second repair changed the messages"
    );
}

/// Where two JSON values first differ: the path and both sides there (`None` when equal).
/// A failing round trip names the field instead of printing two whole bodies.
pub(crate) fn first_difference(
    left: &serde_json::Value,
    right: &serde_json::Value,
) -> Option<String> {
    use serde_json::Value;
    fn walk(path: &str, left: &Value, right: &Value) -> Option<String> {
        match (left, right) {
            (Value::Object(a), Value::Object(b)) => {
                for (key, value) in a {
                    let here = format!("{path}.{key}");
                    match b.get(key) {
                        Some(other) => {
                            if let Some(found) = walk(&here, value, other) {
                                return Some(found);
                            }
                        }
                        None => return Some(format!("{here}: {value} on the left only")),
                    }
                }
                b.iter()
                    .find(|(key, _)| !a.contains_key(*key))
                    .map(|(key, value)| format!("{path}.{key}: {value} on the right only"))
            }
            (Value::Array(a), Value::Array(b)) => {
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    if let Some(found) = walk(&format!("{path}[{i}]"), x, y) {
                        return Some(found);
                    }
                }
                (a.len() != b.len()).then(|| {
                    format!(
                        "{path}: {} items on the left, {} on the right",
                        a.len(),
                        b.len()
                    )
                })
            }
            _ => (left != right).then(|| format!("{path}: {left} != {right}")),
        }
    }
    walk("$", left, right)
}
