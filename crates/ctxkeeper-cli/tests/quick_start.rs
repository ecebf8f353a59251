//! README.md's quick start shows the report its first command prints. This test runs that
//! command and holds the README's block to its output, line by line, so the block cannot go
//! stale: only the engine-time line, which measures this machine, is compared by its shape.
//! After a change to the engine, regenerate the block with the command the README names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

/// The fenced block that follows `marker` in `text`.
fn block_after<'a>(text: &'a str, marker: &str) -> &'a str {
    let at = text
        .find(marker)
        .expect("the README's quick start names its report");
    let rest = &text[at..];
    let open = rest.find("```\n").expect("a fenced block follows") + 4;
    let close = rest[open..].find("```").expect("the block closes") + open;
    &rest[open..close]
}

/// A line as compared: the engine-time line keeps its label only.
fn comparable(line: &str) -> String {
    let line = line.trim_end();
    if line.trim_start().starts_with("engine time per step") {
        return "engine time per step …".to_string();
    }
    line.to_string()
}

#[test]
fn the_readme_quick_start_report_is_what_the_command_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let shown = block_after(&readme, "The first command prints this report");
    let output = Command::new(env!("CARGO_BIN_EXE_ctxkeeper"))
        .current_dir(&root)
        .args([
            "replay",
            "examples/demo-trace.json",
            "--window",
            "16000",
            "--policy",
            "default",
        ])
        .env_remove("CTXKEEPER_CONFIG")
        .output()
        .expect("run replay");
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout).expect("utf-8 report");
    let shown: Vec<String> = shown.lines().map(comparable).collect();
    let printed: Vec<String> = printed.lines().map(comparable).collect();
    assert_eq!(
        shown, printed,
        "README.md's quick-start block is stale: replace it with what \
         `ctxkeeper replay examples/demo-trace.json --window 16000 --policy default` prints"
    );
}
