use super::*;

fn events(name: &str, arguments: &str) -> Vec<(String, FileAction)> {
    tool_call_events(name, arguments)
        .files
        .into_iter()
        .map(|e| (e.path, e.action))
        .collect()
}

fn check(name: &str, arguments: &str, expected: &[(&str, FileAction)]) {
    let got = events(name, arguments);
    let expected: Vec<(String, FileAction)> =
        expected.iter().map(|(p, a)| (p.to_string(), *a)).collect();
    assert_eq!(got, expected, "{name} {arguments}");
}

use FileAction::*;

// Claude Code tool calls, as they appear in the shared claude-code trace.
#[test]
fn claude_code_file_tools() {
    check(
        "Read",
        r#"{"file_path":"/Users/dain/workspace/claude-code-log/claude_code_log/renderer.py","offset":657,"limit":200}"#,
        &[(
            "/Users/dain/workspace/claude-code-log/claude_code_log/renderer.py",
            Read,
        )],
    );
    check(
        "MultiEdit",
        r#"{"file_path":"/Users/dain/workspace/claude-code-log/claude_code_log/renderer.py","edits":[{"old_string":"def _get_enhanced_session_navigation(","new_string":""}]}"#,
        &[(
            "/Users/dain/workspace/claude-code-log/claude_code_log/renderer.py",
            Modified,
        )],
    );
    check(
        "Write",
        r#"{"file_path":"/Users/dain/workspace/claude-code-log/test/test_combined_transcript_link.py","content":"\"\"\"Tests for combined transcript link\"\"\"\n"}"#,
        &[(
            "/Users/dain/workspace/claude-code-log/test/test_combined_transcript_link.py",
            Written,
        )],
    );
    check(
        "Edit",
        r#"{"replace_all":true,"file_path":"/Users/dain/workspace/claude-code-log/test/test_combined_transcript_link.py","old_string":"a","new_string":"b"}"#,
        &[(
            "/Users/dain/workspace/claude-code-log/test/test_combined_transcript_link.py",
            Modified,
        )],
    );
    check(
        "NotebookEdit",
        r#"{"notebook_path":"/work/analysis.ipynb","cell_number":3,"new_source":"x = 1"}"#,
        &[("/work/analysis.ipynb", Modified)],
    );
    check(
        "Grep",
        r#"{"pattern":"CacheManager\\(","path":"test","output_mode":"content","-n":true,"head_limit":5}"#,
        &[("test", Searched)],
    );
    check(
        "LS",
        r#"{"path":"/Users/dain/workspace/claude-code-log"}"#,
        &[("/Users/dain/workspace/claude-code-log", Listed)],
    );
}

#[test]
fn claude_code_bash() {
    check(
        "Bash",
        r#"{"command":"git diff claude_code_log/renderer.py","description":"Show git diff for renderer.py file"}"#,
        &[("claude_code_log/renderer.py", Read)],
    );
    check(
        "Bash",
        r#"{"command":"ruff format claude_code_log/renderer.py","description":"Format the renderer.py file"}"#,
        &[("claude_code_log/renderer.py", Mentioned)],
    );
    check(
        "Bash",
        r#"{"command":"uv run pytest test/test_combined_transcript_link.py -v","description":"Run the new tests"}"#,
        &[("test/test_combined_transcript_link.py", Mentioned)],
    );
    check(
        "Bash",
        r#"{"command":"find . -name \"renderer.py\" -exec grep -n \"def generate_html\" {} \\;","description":"Find"}"#,
        &[],
    );
    let cd = tool_call_events(
        "Bash",
        r#"{"command":"cd test && uv run python -c \"\nimport sys\nsys.path.insert(0, '..')\n\"","description":"x"}"#,
    );
    assert_eq!(cd.working_directory, None, "relative to what?");
    assert!(cd.files.is_empty(), "{:?}", cd.files);
    let absolute = tool_call_events(
        "Bash",
        r#"{"command":"cd /Users/dain/workspace/claude-code-log && uv run pytest"}"#,
    );
    assert_eq!(
        absolute.working_directory.as_deref(),
        Some("/Users/dain/workspace/claude-code-log")
    );
}

// Codex shell calls and patches, as in the shared codex rollout.
#[test]
fn codex_shell_and_apply_patch() {
    check(
        "shell",
        r#"{"command":["bash","-lc","sed -n '1,200p' README.md"]}"#,
        &[("README.md", Read)],
    );
    check(
        "shell",
        r#"{"command":["bash","-lc","ls -la opk && rg --files opk | sed -n '1,200p'"]}"#,
        &[],
    );
    check(
        "shell",
        r#"{"command":["bash","-lc","nl -ba opk/ui/main_window.py | sed -n '1,120p'"],"workdir":"/home/randy/projects/python-3/OpenPrintKit"}"#,
        &[("opk/ui/main_window.py", Read)],
    );
    let patch = r#"{"command":["apply_patch","*** Begin Patch\n*** Update File: opk/cli/__main__.py\n@@\n from __future__ import annotations\n-import argparse\n+import argparse, sys\n*** Add File: docs/system_notes.md\n+# Notes\n*** Delete File: old.txt\n*** End Patch\n"]}"#;
    check(
        "shell",
        patch,
        &[
            ("opk/cli/__main__.py", Modified),
            ("docs/system_notes.md", Created),
            ("old.txt", Deleted),
        ],
    );
    assert_eq!(
        tool_call_events("shell", r#"{"command":["bash","-lc","ls"],"workdir":"/home/randy/projects/python-3/OpenPrintKit"}"#)
            .working_directory
            .as_deref(),
        Some("/home/randy/projects/python-3/OpenPrintKit")
    );
    // A patch in a heredoc, and the custom-tool form.
    check(
        "shell",
        r#"{"command":["bash","-lc","apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a/b.py\n*** Move to: a/c.py\n@@\n-x\n+y\n*** End Patch\nEOF"]}"#,
        &[
            ("a/b.py", Modified),
            ("a/b.py", Deleted),
            ("a/c.py", Created),
        ],
    );
    check(
        "apply_patch",
        "*** Begin Patch\n*** Add File: tests/test_new.py\n+def test(): pass\n*** End Patch",
        &[("tests/test_new.py", Created)],
    );
    check(
        "shell",
        r#"{"command":["bash","-lc","git add -A && git commit -m \"feat: add opk rules subcommand and docs/notes.md\""]}"#,
        &[],
    );
}

#[test]
fn generic_bash_writes_moves_and_deletes() {
    check(
        "bash",
        r#"{"command":"sed -i 's/old/new/g' src/lib.rs && echo done >> CHANGELOG.md 2>&1"}"#,
        &[("src/lib.rs", Modified), ("CHANGELOG.md", Modified)],
    );
    check(
        "bash",
        r#"{"command":"cat > notes/todo.txt <<EOF\nfirst line with a/fake/path.txt\nEOF\ntouch build/.stamp; rm -rf dist/ tmp.log"}"#,
        &[
            ("notes/todo.txt", Written),
            ("build/.stamp", Created),
            ("dist/", Deleted),
            ("tmp.log", Deleted),
        ],
    );
    check(
        "bash",
        r#"{"command":"git mv src/old.rs src/new.rs && git rm -q legacy.py"}"#,
        &[
            ("src/old.rs", Deleted),
            ("src/new.rs", Created),
            ("legacy.py", Deleted),
        ],
    );
    check(
        "bash",
        r#"{"command":"grep -rn 'fn main' src/ tests/ | head -5 > /dev/null"}"#,
        &[("src/", Searched), ("tests/", Searched)],
    );
}

// SWE-agent and OpenHands editors, as in the shared traces.
#[test]
fn swe_agent_and_openhands_editors() {
    check(
        "open",
        r#"{"path":"src/marshmallow/fields.py", "line_number":1474}"#,
        &[("src/marshmallow/fields.py", Read)],
    );
    check(
        "create",
        r#"{"filename":"reproduce.py"}"#,
        &[("reproduce.py", Created)],
    );
    assert!(tool_call_events("edit", r#"{"search":"a","replace":"b"}"#).edits_open_file);
    check(
        "bash",
        r#"{"command":"rm reproduce.py"}"#,
        &[("reproduce.py", Deleted)],
    );
    check(
        "run",
        r#"{"command":"touch LICENSE"}"#,
        &[("LICENSE", Created)],
    );
    check(
        "run_ipython",
        r#"{"code":"edit_file_by_replace(\n'/workspace/src/App.tsx',\nto_replace=\"\"\"\nimport React from 'react'\n\"\"\")"}"#,
        &[("/workspace/src/App.tsx", Modified)],
    );
    check(
        "run_ipython",
        r#"{"code":"open_file('/workspace/src/PullRequestViewer.tsx')"}"#,
        &[("/workspace/src/PullRequestViewer.tsx", Read)],
    );
    check(
        "str_replace_editor",
        r#"{"command":"create","path":"/testbed/reproduce.py","file_text":"print(1)"}"#,
        &[("/testbed/reproduce.py", Created)],
    );
    check(
        "str_replace_editor",
        r#"{"command":"view","path":"/testbed/src/marshmallow/fields.py"}"#,
        &[("/testbed/src/marshmallow/fields.py", Read)],
    );
}

#[test]
fn path_words() {
    for yes in [
        "README.md",
        "src/app.py",
        "/etc/hosts",
        "opk/",
        "a/b",
        "~/x.txt",
        ".github/workflows/ci.yml",
    ] {
        assert!(is_path_word(yes), "{yes}");
    }
    for no in [
        "-v",
        "1.5",
        "v1.2",
        "http://x.io/a",
        "*.py",
        "$HOME/x",
        "s/old/new/g",
        "2>&1",
        "a=b",
        "1/2",
        "hello",
    ] {
        assert!(!is_path_word(no), "{no}");
    }
}

#[test]
fn hostile_input_never_panics() {
    for text in [
        "", "{", "\"", "'", "\\", "<<", "<<'E", "a <<E\nb", ">", "2>", "&>", "(((", "bash -c",
        "$(", "`",
    ] {
        let args = serde_json::json!({ "command": text }).to_string();
        let _ = tool_call_events("bash", &args);
        let _ = tool_call_events("apply_patch", text);
        let args = serde_json::json!({ "code": text }).to_string();
        let _ = tool_call_events("run_ipython", &args);
    }
}
