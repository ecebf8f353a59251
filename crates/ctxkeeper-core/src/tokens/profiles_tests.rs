//! Tests of the model table: name lookup, the built-in table's validity, TOML overrides.

use super::*;

fn check(name: &str, expected: &str) {
    let profiles = Profiles::builtin();
    assert_eq!(profiles.lookup(name).name, expected, "lookup({name:?})");
}

#[test]
fn exact_names() {
    check("gpt-4o", "gpt-4o");
    check("GPT-4o-mini", "gpt-4o-mini");
    check("o3", "o3");
    check("claude-opus-4-1", "claude-opus-4-1");
}

#[test]
fn dated_and_tagged_names_find_their_family() {
    check("gpt-4o-2024-08-06", "gpt-4o");
    check("gpt-4o-mini-2024-07-18", "gpt-4o-mini");
    check("gpt-4.1-mini-2025-04-14", "gpt-4.1-mini");
    check("o1-2024-12-17", "o1");
    check("o3-mini-2025-01-31", "o3-mini");
    check("gpt-5-2025-08-07", "gpt-5");
    check("gpt-4-0613", "gpt-4");
    check("gpt-3.5-turbo-0125", "gpt-3.5-turbo");
    check("claude-sonnet-4-20250514", "claude-sonnet-4");
    check("claude-sonnet-4-5-20250929", "claude-sonnet-4-5");
    check("claude-3-5-sonnet-20241022", "claude-3-5-sonnet");
    check("claude-3-7-sonnet-20250219", "claude-3-7-sonnet");
    check("claude-haiku-4-5-20251001", "claude-haiku-4-5");
    check("claude-sonnet-4@20250514", "claude-sonnet-4");
    check("gemini-2.5-pro-preview-06-05", "gemini-2.5-pro");
    check("gemini-2.5-flash-lite", "gemini-2.5-flash-lite");
    check("qwen3:8b", "qwen3");
    check("qwen3-coder-480b-a35b-instruct", "qwen3-coder");
    check("llama-3.3-70b-versatile", "llama-3.3");
    check("mistral-large-2411", "mistral-large");
    check("ministral-8b-latest", "ministral");
    check("codestral-2501", "codestral");
}

#[test]
fn provider_prefixes_and_dotted_versions() {
    check("openai/gpt-4o", "gpt-4o");
    check("anthropic/claude-sonnet-4.5", "claude-sonnet-4-5");
    check("anthropic/claude-3.5-sonnet", "claude-3-5-sonnet");
    check("anthropic/claude-opus-4.1", "claude-opus-4-1");
    check(
        "us.anthropic.claude-3-7-sonnet-20250219-v1:0",
        "claude-3-7-sonnet",
    );
    check("models/gemini-2.0-flash", "gemini-2.0-flash");
    check("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1");
    check(
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        "llama-4-maverick",
    );
    check("Qwen/Qwen2.5-72B-Instruct", "qwen2.5");
    check("deepseek-ai/DeepSeek-R1", "deepseek-r1");
    check("openrouter/anthropic/claude-opus-4", "claude-opus-4");
}

#[test]
fn prefixes_stop_at_separators_and_unknown_names_get_the_default() {
    check("gpt-4.5-preview", "gpt-4.5-preview");
    check("gpt-4-turbo-2024-04-09", "gpt-4-turbo");
    check("gpt-4o1", DEFAULT_NAME);
    check("gpt-4.7", DEFAULT_NAME);
    check("totally-unknown-model", DEFAULT_NAME);
    check("", DEFAULT_NAME);
    let profiles = Profiles::builtin();
    let fallback = profiles.lookup("nope");
    assert_eq!(fallback.tokenizer, TokenizerKind::O200kBase);
    assert_eq!(fallback.context_window, 128_000);
    assert_eq!(profiles.resolve("nope").1, MatchKind::Default);
    assert_eq!(profiles.resolve("gpt-4o-2024-08-06").1, MatchKind::Prefix);
    assert_eq!(profiles.resolve("GPT-4O").1, MatchKind::Exact);
}

#[test]
fn the_table_covers_every_family_and_is_valid() {
    let profiles = Profiles::builtin();
    for name in [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano",
        "o1",
        "o3",
        "o4-mini",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5-nano",
        "gpt-4-turbo",
        "gpt-4",
        "gpt-3.5-turbo",
        "claude-3-5-sonnet",
        "claude-3-7-sonnet",
        "claude-sonnet-4",
        "claude-sonnet-4-5",
        "claude-opus-4",
        "claude-opus-4-1",
        "claude-3-5-haiku",
        "claude-haiku-4-5",
        "gemini-1.5-pro",
        "gemini-1.5-flash",
        "gemini-2.0-flash",
        "gemini-2.5-pro",
        "gemini-2.5-flash",
        "llama-3.1",
        "llama-3.3",
        "llama-4-scout",
        "llama-4-maverick",
        "qwen2.5",
        "qwen3",
        "qwen3-coder",
        "deepseek-chat",
        "deepseek-v3",
        "deepseek-reasoner",
        "deepseek-r1",
        "mistral-large",
        "mistral-small",
        "codestral",
        "ministral",
    ] {
        assert!(profiles.get(name).is_some(), "{name} missing");
    }
    for name in profiles.names() {
        let profile = profiles.lookup(name);
        assert_eq!(profile.validate(), Ok(()), "{name}");
        assert_eq!(profile.name, name);
    }
    assert_eq!(
        profiles.get("gpt-4").map(|p| p.tokenizer),
        Some(TokenizerKind::Cl100kBase)
    );
    assert!(matches!(
        profiles.get("claude-sonnet-4").map(|p| p.tokenizer),
        Some(TokenizerKind::Estimate { .. })
    ));
}

#[test]
fn toml_overrides_merge_over_the_builtins() {
    let profiles = Profiles::from_toml_str(
        r#"
        [models."gpt-4o"]
        context_window = 64000
        max_output = 4000

        [models."Claude-Sonnet-4-5"]
        ratio = 1.3
        image = { rule = "flat", tokens = 1500 }
        tools_overhead = 300

        [models."my-gpt"]
        base = "gpt-4"
        context_window = 32768
        tokenizer = "o200k_base"

        [models."local-qwen"]
        base = "qwen3"
        tokenizer = "estimate"

        [models.default]
        context_window = 32000
        max_output = 4096
        "#,
    );
    let profiles = match profiles {
        Ok(profiles) => profiles,
        Err(err) => panic!("{err}"),
    };
    let gpt = profiles.lookup("gpt-4o-2024-08-06");
    assert_eq!((gpt.context_window, gpt.max_output), (64_000, 4_000));
    assert_eq!(
        gpt.tokenizer,
        TokenizerKind::O200kBase,
        "untouched fields stay"
    );
    let claude = profiles.lookup("claude-sonnet-4-5-20250929");
    assert_eq!(claude.tokenizer, TokenizerKind::Estimate { ratio: 1.3 });
    assert_eq!(claude.image, ImageRule::Flat { tokens: 1500 });
    assert_eq!(claude.tools_overhead, 300);
    assert_eq!(claude.context_window, 200_000);
    let mine = profiles.lookup("my-gpt");
    assert_eq!(
        (mine.context_window, mine.tokenizer),
        (32_768, TokenizerKind::O200kBase)
    );
    assert_eq!(mine.max_output, 8_192, "from the base");
    assert_eq!(
        profiles.lookup("local-qwen").tokenizer,
        TokenizerKind::Estimate { ratio: 1.05 },
        "the base's ratio is kept"
    );
    assert_eq!(profiles.lookup("unknown").context_window, 32_000);
    assert_eq!(
        profiles.lookup("gpt-4").context_window,
        8_192,
        "other entries untouched"
    );
}

#[test]
fn a_new_name_inherits_from_its_prefix_match() {
    let profiles = Profiles::from_toml_str(
        "[models.\"claude-sonnet-4-5-1m\"]\ncontext_window = 1000000\nmax_output = 64000",
    );
    let profiles = profiles.unwrap_or_else(|err| panic!("{err}"));
    let profile = profiles.lookup("claude-sonnet-4-5-1m");
    assert_eq!(profile.context_window, 1_000_000);
    assert_eq!(profile.tools_overhead, 346);
    assert_eq!(profile.name, "claude-sonnet-4-5-1m");
}

fn error(toml: &str) -> String {
    match Profiles::from_toml_str(toml) {
        Ok(_) => panic!("accepted: {toml}"),
        Err(err) => err.to_string(),
    }
}

/// Regression: `context_window = 54000` alone for a model whose built-in output limit is
/// 64,000 refused to start ("max_output (64000) is larger than context_window (54000)").
#[test]
fn a_window_below_the_builtin_output_limit_clamps_the_output_limit() {
    let builtin = Profiles::builtin().lookup("claude-sonnet-4-5");
    assert!(
        builtin.max_output > 54_000,
        "the case needs a large output limit"
    );
    let profiles =
        Profiles::from_toml_str("[models.\"claude-sonnet-4-5\"]\ncontext_window = 54000")
            .expect("a window alone is valid");
    let profile = profiles.lookup("claude-sonnet-4-5");
    assert_eq!(
        (profile.context_window, profile.max_output),
        (54_000, 54_000)
    );
    // A window above the output limit leaves the limit alone.
    let profiles =
        Profiles::from_toml_str("[models.\"claude-sonnet-4-5\"]\ncontext_window = 150000")
            .expect("valid");
    let profile = profiles.lookup("claude-sonnet-4-5");
    assert_eq!(profile.max_output, builtin.max_output);
    // Through `base` too.
    let profiles = Profiles::from_toml_str(
        "[models.small]\nbase = \"claude-sonnet-4-5\"\ncontext_window = 8000",
    )
    .expect("valid");
    assert_eq!(profiles.lookup("small").max_output, 8_000);
}

#[test]
fn bad_overrides_are_rejected_with_clear_messages() {
    // Each bad entry, and what its message must say.
    let cases: [(&str, &[&str]); 13] = [
        (
            "[models.\"gpt-4o\"]\ncontext_windw = 1",
            &["unknown field `context_windw`", "line 2"],
        ),
        (
            "[model.\"gpt-4o\"]\ncontext_window = 1",
            &["unknown field `model`"],
        ),
        ("[models.x]\ncontext_window = \"big\"", &["invalid type"]),
        (
            "[models.x]\ntokenizer = \"gpt2\"",
            &["unknown variant `gpt2`"],
        ),
        (
            "[models.x]\nimage = { rule = \"flat\", tokens = 1, extra = 2 }",
            &["extra"],
        ),
        (
            "[models.x]\ncontext_window = 0",
            &["context_window must be greater than 0", "[models.\"x\"]"],
        ),
        (
            "[models.x]\nmax_output = 999999999",
            &["larger than context_window"],
        ),
        // An explicit contradiction stays an error.
        (
            "[models.x]\ncontext_window = 1000\nmax_output = 1001",
            &["max_output (1001) is larger than context_window (1000)"],
        ),
        (
            "[models.\"gpt-4o\"]\nratio = 1.2",
            &["add tokenizer = \"estimate\""],
        ),
        (
            "[models.x]\ntokenizer = \"o200k_base\"\nratio = 1.2",
            &["ratio only applies"],
        ),
        (
            "[models.x]\ntokenizer = \"estimate\"\nratio = -1.0",
            &["ratio must be"],
        ),
        (
            "[models.x]\nbase = \"no-such-model\"",
            &["base model \"no-such-model\" is not in the table"],
        ),
        (
            "[models.x]\nimage = { rule = \"pixel_area\", pixels_per_token = 0, max_tokens = 5 }",
            &["pixels_per_token"],
        ),
    ];
    for (toml, expected) in cases {
        let message = error(toml);
        for fragment in expected {
            assert!(message.contains(fragment), "{toml:?}: {message}");
        }
    }
}

#[test]
fn a_failed_merge_leaves_the_table_unchanged() {
    let mut profiles = Profiles::builtin();
    let before = profiles.clone();
    let result = profiles.merge_toml_str(
        "[models.\"gpt-4o\"]\ncontext_window = 1000\n[models.bad]\ncontext_window = 0",
    );
    assert!(result.is_err());
    assert_eq!(profiles, before);
}

#[test]
fn empty_toml_is_the_builtin_table() {
    assert_eq!(Profiles::from_toml_str(""), Ok(Profiles::builtin()));
    assert_eq!(Profiles::from_toml_str("[models]"), Ok(Profiles::builtin()));
}

#[test]
fn a_minor_version_newer_than_the_table_takes_the_newest_listed_minor() {
    // Newer than every listed minor: the newest one listed, not the bare family.
    check("claude-opus-4-8", "claude-opus-4-6");
    check("claude-opus-4-8-20261101", "claude-opus-4-6");
    check("claude-sonnet-4-7", "claude-sonnet-4-6");
    // Between listed minors: the newest one at or below it.
    check("claude-opus-4-3", "claude-opus-4-1");
    // A date right after the family is no minor version.
    check("claude-opus-4-20250514", "claude-opus-4");
}

#[test]
fn beta_windows_are_read_from_any_position_and_the_largest_wins() {
    assert_eq!(beta_window("context-1m-2025-08-07"), Some(1_000_000));
    assert_eq!(
        beta_window(" Context-1M-2025-08-07 , other"),
        Some(1_000_000)
    );
    assert_eq!(
        beta_window("context-500k-2026-01-01,context-1m-2025-08-07"),
        Some(1_000_000)
    );
    assert_eq!(beta_window("context-management-2025-06-27"), None);
    assert_eq!(beta_window(""), None);
}
