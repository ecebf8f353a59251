use super::*;

#[test]
fn unknown_fields_are_rejected_with_their_name() {
    let err = PolicyConfig::from_toml_str("triger_ratio = 0.5")
        .err()
        .map(|e| e.0);
    assert!(err.is_some_and(|e| e.contains("triger_ratio")));
}

#[test]
fn seed_spellings_are_accepted() {
    let policy = PolicyConfig::from_toml_str(
        "triggerTokens = 80000\nminMessages = 20\ntrigger_ratio = 0.8\n[[stages]]\nkind = \"summarize\"\nkeepMessages = 10\n",
    )
    .unwrap_or_default();
    assert_eq!(policy.trigger_tokens, Some(80_000));
    assert_eq!(policy.min_messages, 20);
    assert!(matches!(
        policy.stages[0],
        Stage::Summarize {
            keep_messages: Some(10),
            ..
        }
    ));
}

#[test]
fn an_empty_override_changes_nothing() {
    for name in crate::engine::presets::NAMES {
        let policy = crate::engine::presets::preset(name).unwrap_or_default();
        let same = policy.with_overrides("").unwrap_or_default();
        assert_eq!(same, policy, "{name}");
    }
}

#[test]
fn ranges_are_validated() {
    assert!(PolicyConfig::from_toml_str("trigger_ratio = 0.0").is_err());
    assert!(PolicyConfig::from_toml_str("trigger_ratio = 0.5\ntarget_ratio = 0.6").is_err());
    assert!(PolicyConfig::from_toml_str("[overflow]\nmax_attempts = 0").is_err());
}
