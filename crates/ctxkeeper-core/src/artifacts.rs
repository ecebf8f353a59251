//! What an agent's tool calls did to files: read, listed, searched, created, modified, deleted.
//!
//! Agents name files in their tool calls in a handful of shapes, and this module reads them
//! all into [`FileEvent`]s:
//!
//! - **path arguments**: Claude Code `Read` / `Edit` / `MultiEdit` / `Write` / `NotebookEdit`
//!   (`file_path`, `notebook_path`), `Grep` / `Glob` / `LS` (`path`), SWE-agent's `open` /
//!   `create` (`path`, `filename`), the `str_replace_editor` of SWE-agent and OpenHands
//!   (`command` + `path`);
//! - **patches**: Codex `apply_patch` (`*** Add File:`, `*** Update File:`, `*** Delete File:`,
//!   `*** Move to:`), given as a command array, a shell heredoc or a tool of its own;
//! - **shell commands**: Codex `shell` (`["bash", "-lc", script]`), Claude Code `Bash`,
//!   OpenHands `run`, SWE-agent `bash`: the script is split into simple commands (quotes,
//!   escapes, `&&` / `||` / `;` / `|`, redirections and heredocs understood) and each is read by
//!   its command name — `cat` / `head` / `sed -n` read, `sed -i` modifies, `>` writes, `>>`
//!   appends, `touch` creates, `rm` / `git rm` delete, `mv` / `git mv` move, `cp` copies, `cd`
//!   changes the working directory; any other argument that looks like a path is *mentioned*;
//! - **Python editor calls**: OpenHands `run_ipython` code calling `open_file(...)`,
//!   `create_file(...)`, `edit_file_by_replace(...)`, ….
//!
//! It is pure text processing (no file system access): a path is what the agent wrote, relative
//! or absolute, and is never resolved or opened.
//!
//! ```
//! use ctxkeeper_core::artifacts::{FileAction, tool_call_events};
//!
//! let events = tool_call_events("shell", r#"{"command":["bash","-lc","sed -n '1,80p' src/app.py && rm -f old.txt && make > build.log"]}"#);
//! let summary: Vec<(&str, FileAction)> = events.files.iter().map(|e| (e.path.as_str(), e.action)).collect();
//! assert_eq!(summary, vec![("src/app.py", FileAction::Read), ("old.txt", FileAction::Deleted), ("build.log", FileAction::Written)]);
//!
//! let edit = tool_call_events("Edit", r#"{"file_path":"/repo/lib.rs","old_string":"a","new_string":"b"}"#);
//! assert_eq!(edit.files[0].action, FileAction::Modified);
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a tool call did to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileAction {
    /// Named without a recognised operation (an argument of an unknown command).
    Mentioned,
    /// A directory listed.
    Listed,
    /// Searched (grep, find).
    Searched,
    /// Read.
    Read,
    /// Written whole (`Write`, `>`, `tee`): created when it did not exist, else overwritten.
    Written,
    /// Created (a patch's `Add File`, `touch`, a move's destination).
    Created,
    /// Changed in place (an edit, `sed -i`, `>>`, a patch's `Update File`).
    Modified,
    /// Removed (or moved away).
    Deleted,
}

impl FileAction {
    /// The word used in the capsule and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            FileAction::Mentioned => "mentioned",
            FileAction::Listed => "listed",
            FileAction::Searched => "searched",
            FileAction::Read => "read",
            FileAction::Written => "written",
            FileAction::Created => "created",
            FileAction::Modified => "modified",
            FileAction::Deleted => "deleted",
        }
    }

    /// True for actions that change the file.
    pub fn changes(self) -> bool {
        matches!(
            self,
            FileAction::Written | FileAction::Created | FileAction::Modified | FileAction::Deleted
        )
    }
}

/// One file a tool call touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEvent {
    pub path: String,
    pub action: FileAction,
}

/// What one tool call tells about files and the working directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallEvents {
    /// Files touched, in the order the call touched them.
    pub files: Vec<FileEvent>,
    /// The working directory the call ran in or moved to (`workdir`, `cd DIR`), if stated.
    pub working_directory: Option<String>,
    /// The call edits "the open file" of a stateful editor (SWE-agent `edit` / `insert`),
    /// whose path the call does not repeat.
    pub edits_open_file: bool,
}

impl CallEvents {
    fn push(&mut self, path: &str, action: FileAction) {
        let path = clean_path(path);
        if !path.is_empty() {
            self.files.push(FileEvent {
                path: path.to_string(),
                action,
            });
        }
    }
}

/// Reads one tool call: its name and its arguments as the model wrote them (JSON, or the raw
/// text of a custom tool such as Codex's `apply_patch`).
pub fn tool_call_events(name: &str, arguments: &str) -> CallEvents {
    let mut out = CallEvents::default();
    // Most calls of most agents name no file (`get_user_details`, `search_flights`): their
    // arguments are not even parsed.
    let lower = name.to_ascii_lowercase();
    if lower != "apply_patch"
        && named_tool_action(&lower).is_none()
        && !RELEVANT_KEYS.iter().any(|k| arguments.contains(k))
    {
        return out;
    }
    let parsed = serde_json::from_str::<Value>(arguments).ok();
    match (&lower[..], &parsed) {
        ("apply_patch", Some(Value::Object(object))) => {
            if let Some(patch) = ["input", "patch"]
                .iter()
                .find_map(|k| object.get(*k).and_then(Value::as_str))
            {
                patch_events(patch, &mut out);
            }
        }
        ("apply_patch", _) => patch_events(arguments, &mut out),
        (_, Some(Value::Object(object))) => object_events(&lower, object, &mut out),
        _ => {}
    }
    out
}

/// Reads the arguments object of a call named `name` (lowercase).
fn object_events(name: &str, object: &serde_json::Map<String, Value>, out: &mut CallEvents) {
    if let Some(dir) = ["workdir", "cwd", "working_dir", "working_directory"]
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
        .filter(|d| looks_like_dir(d))
    {
        out.working_directory = Some(dir.to_string());
    }
    let path_value = PATH_KEYS
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
        .filter(|p| is_path_value(p));

    // Editors with a `command` sub-operation (str_replace_editor, OpenHands' file editor).
    if let (Some(Value::String(command)), Some(path)) = (object.get("command"), path_value)
        && let Some(action) = editor_command_action(command)
    {
        out.push(path, action);
        return;
    }
    if let Some(action) = named_tool_action(name) {
        match path_value {
            Some(path) => out.push(path, action),
            None if matches!(name, "edit" | "insert") => out.edits_open_file = true,
            None => {}
        }
        // Claude Code MultiEdit/Edit carry no other paths; a search also names its glob.
        return;
    }
    // Shell commands: a string, or an array such as Codex's ["bash", "-lc", "script"].
    match object.get("command").or_else(|| object.get("cmd")) {
        Some(Value::String(script)) => shell_events(script, out),
        Some(Value::Array(words)) => {
            let words: Vec<String> = words
                .iter()
                .filter_map(|w| w.as_str().map(str::to_string))
                .collect();
            argv_events(&words, out);
        }
        _ => {}
    }
    if let Some(Value::String(code)) = object.get("code") {
        python_events(code, out);
    }
    if let Some(path) = path_value
        && !out.files.iter().any(|f| f.path == clean_path(path))
    {
        out.push(path, FileAction::Mentioned);
    }
}

/// Fragments of the argument keys this module reads: arguments without any are skipped.
const RELEVANT_KEYS: [&str; 9] = [
    "path",
    "file",
    "Path",
    "command",
    "cmd",
    "code",
    "workdir",
    "cwd",
    "working_dir",
];

/// Argument keys that hold one file path.
const PATH_KEYS: [&str; 9] = [
    "file_path",
    "filePath",
    "notebook_path",
    "path",
    "filename",
    "file_name",
    "file",
    "target_file",
    "absolute_path",
];

/// The action of a tool known by its name alone (lowercase).
fn named_tool_action(name: &str) -> Option<FileAction> {
    Some(match name {
        "read" | "notebookread" | "read_file" | "open" | "view" | "file_read" | "cat" => {
            FileAction::Read
        }
        "edit" | "multiedit" | "notebookedit" | "edit_file" | "insert" | "str_replace"
        | "replace" | "file_edit" => FileAction::Modified,
        "write" | "write_file" | "file_write" => FileAction::Written,
        "create" | "create_file" => FileAction::Created,
        "ls" | "list_dir" | "list_directory" | "list_files" | "glob" => FileAction::Listed,
        "grep" | "search" | "search_file" | "search_dir" | "find_file" | "grep_search" => {
            FileAction::Searched
        }
        "delete_file" | "remove_file" => FileAction::Deleted,
        _ => return None,
    })
}

/// The sub-commands of `str_replace_editor`-style tools.
fn editor_command_action(command: &str) -> Option<FileAction> {
    Some(match command {
        "view" | "read" => FileAction::Read,
        "create" => FileAction::Created,
        "str_replace" | "insert" | "undo_edit" | "edit" | "write" | "append" => {
            FileAction::Modified
        }
        "delete" => FileAction::Deleted,
        _ => return None,
    })
}

/// Reads a Codex patch (`*** Begin Patch` … `*** End Patch`).
pub fn patch_events(patch: &str, out: &mut CallEvents) {
    let mut updating: Option<String> = None;
    for line in patch.lines() {
        let line = line.trim_end();
        if let Some(path) = line.strip_prefix("*** Add File: ") {
            out.push(path, FileAction::Created);
            updating = None;
        } else if let Some(path) = line.strip_prefix("*** Update File: ") {
            out.push(path, FileAction::Modified);
            updating = Some(path.to_string());
        } else if let Some(path) = line.strip_prefix("*** Delete File: ") {
            out.push(path, FileAction::Deleted);
            updating = None;
        } else if let Some(path) = line.strip_prefix("*** Move to: ") {
            if let Some(from) = updating.take() {
                out.push(&from, FileAction::Deleted);
            }
            out.push(path, FileAction::Created);
        }
    }
}

/// Reads an argv: `bash -lc SCRIPT`, `apply_patch PATCH`, or one simple command.
fn argv_events(words: &[String], out: &mut CallEvents) {
    let Some(first) = words.first() else { return };
    let program = basename(first);
    if matches!(program, "bash" | "sh" | "zsh" | "dash")
        && let Some(flag) = words
            .iter()
            .position(|w| w.starts_with('-') && w.contains('c'))
        && let Some(script) = words.get(flag + 1)
    {
        shell_events(script, out);
        return;
    }
    if program == "apply_patch" || program == "applypatch" {
        for word in &words[1..] {
            patch_events(word, out);
        }
        return;
    }
    command_events(
        &SimpleCommand {
            words: words.to_vec(),
            ..SimpleCommand::default()
        },
        out,
    );
}

/// Reads a shell script.
pub fn shell_events(script: &str, out: &mut CallEvents) {
    for command in parse_shell(script) {
        command_events(&command, out);
    }
}

/// One simple command of a shell script: its words, redirections and heredoc bodies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SimpleCommand {
    words: Vec<String>,
    redirects: Vec<(Redirect, String)>,
    heredocs: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redirect {
    /// `>`, `2>`, `&>`: the file is (over)written.
    Out,
    /// `>>`: appended to.
    Append,
    /// `<`: read.
    In,
}

/// The word [`parse_shell`] is reading and what it completes.
#[derive(Debug, Default)]
struct Pending {
    word: String,
    in_word: bool,
    /// Set after a redirection operator: the next word is its target.
    redirect: Option<Redirect>,
    /// Set after `<<`: the next word is a heredoc delimiter.
    heredoc: bool,
    /// The delimiters of the heredocs whose bodies start on the next line, and whether their
    /// lines' leading tabs are stripped (`<<-`).
    heredoc_delimiters: Vec<(String, bool)>,
    /// Whether the latest heredoc operator was `<<-`.
    strip_tabs: bool,
}

impl Pending {
    /// Ends the word being read, if any: a heredoc delimiter, a redirection's target, or a
    /// word of `current`.
    fn finish_word(&mut self, current: &mut SimpleCommand) {
        if !self.in_word {
            return;
        }
        let text = std::mem::take(&mut self.word);
        self.in_word = false;
        if self.heredoc {
            self.heredoc = false;
            self.heredoc_delimiters.push((text, self.strip_tabs));
        } else if let Some(kind) = self.redirect.take() {
            current.redirects.push((kind, text));
        } else {
            current.words.push(text);
        }
    }
}

/// Splits a shell script into simple commands. Quotes, backslash escapes, comments, the
/// control operators (`&&`, `||`, `;`, `|`, `&`, newlines, parentheses), redirections and
/// heredocs are understood; substitutions (`$(…)`, backquotes) stay inside their word.
fn parse_shell(script: &str) -> Vec<SimpleCommand> {
    let chars: Vec<char> = script.chars().collect();
    let mut commands = Vec::new();
    let mut current = SimpleCommand::default();
    let mut pending = Pending::default();
    let mut i = 0;

    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => {
                pending.in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    pending.word.push(chars[i]);
                    i += 1;
                }
                i += 1;
            }
            '"' => {
                pending.in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\'
                        && i + 1 < chars.len()
                        && matches!(chars[i + 1], '"' | '\\' | '$' | '`')
                    {
                        i += 1;
                    }
                    pending.word.push(chars[i]);
                    i += 1;
                }
                i += 1;
            }
            '\\' => {
                if i + 1 < chars.len() {
                    if chars[i + 1] != '\n' {
                        pending.in_word = true;
                        pending.word.push(chars[i + 1]);
                    }
                    i += 2;
                } else {
                    i += 1;
                }
            }
            '#' if !pending.in_word => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ' ' | '\t' | '\r' => {
                pending.finish_word(&mut current);
                i += 1;
            }
            '\n' | ';' | '&' | '|' | '(' | ')' => {
                // `&>` and `>&` are redirections, not control operators.
                if c == '&' && chars.get(i + 1) == Some(&'>') {
                    pending.finish_word(&mut current);
                    pending.redirect = Some(Redirect::Out);
                    i += 2;
                    continue;
                }
                pending.finish_word(&mut current);
                pending.redirect = None;
                if c == '\n' && !pending.heredoc_delimiters.is_empty() {
                    // The heredoc bodies start on the next line.
                    i += 1;
                    for (delimiter, strip) in std::mem::take(&mut pending.heredoc_delimiters) {
                        let mut body = String::new();
                        while i < chars.len() {
                            let end = chars[i..]
                                .iter()
                                .position(|&ch| ch == '\n')
                                .map_or(chars.len(), |p| i + p);
                            let line: String = chars[i..end].iter().collect();
                            i = if end < chars.len() { end + 1 } else { end };
                            let compared = if strip {
                                line.trim_start_matches('\t')
                            } else {
                                &line
                            };
                            if compared.trim_end() == delimiter {
                                break;
                            }
                            body.push_str(&line);
                            body.push('\n');
                        }
                        current.heredocs.push(body);
                    }
                    push_command(&mut commands, &mut current);
                    continue;
                }
                push_command(&mut commands, &mut current);
                i += 1;
            }
            '>' | '<' => {
                // A word of digits right before is a file descriptor (`2>`).
                let fd_word = pending.in_word
                    && !pending.word.is_empty()
                    && pending.word.chars().all(|d| d.is_ascii_digit());
                if fd_word {
                    pending.word.clear();
                    pending.in_word = false;
                } else {
                    pending.finish_word(&mut current);
                }
                if c == '<' && chars.get(i + 1) == Some(&'<') {
                    if chars.get(i + 2) == Some(&'<') {
                        // A here-string: its word is text, not a file.
                        pending.redirect = None;
                        i += 3;
                        skip_word(&chars, &mut i);
                        continue;
                    }
                    i += 2;
                    pending.strip_tabs = chars.get(i) == Some(&'-');
                    if pending.strip_tabs {
                        i += 1;
                    }
                    pending.heredoc = true;
                    continue;
                }
                let kind = if c == '<' {
                    Redirect::In
                } else if chars.get(i + 1) == Some(&'>') {
                    i += 1;
                    Redirect::Append
                } else {
                    Redirect::Out
                };
                i += 1;
                if chars.get(i) == Some(&'&') {
                    // `2>&1`: a descriptor, not a file.
                    i += 1;
                    skip_word(&chars, &mut i);
                    continue;
                }
                if chars.get(i) == Some(&'|') {
                    i += 1;
                }
                pending.redirect = Some(kind);
            }
            _ => {
                pending.in_word = true;
                pending.word.push(c);
                i += 1;
            }
        }
    }
    pending.finish_word(&mut current);
    push_command(&mut commands, &mut current);
    commands
}

fn skip_word(chars: &[char], i: &mut usize) {
    while *i < chars.len() && chars[*i].is_whitespace() {
        *i += 1;
    }
    while *i < chars.len() && !chars[*i].is_whitespace() && !matches!(chars[*i], ';' | '&' | '|') {
        *i += 1;
    }
}

fn push_command(commands: &mut Vec<SimpleCommand>, current: &mut SimpleCommand) {
    let command = std::mem::take(current);
    if !command.words.is_empty() || !command.redirects.is_empty() {
        commands.push(command);
    }
}

/// Reads one simple command by its program name.
fn command_events(command: &SimpleCommand, out: &mut CallEvents) {
    let mut words: &[String] = &command.words;
    // Environment assignments and wrappers that run the real command.
    while let Some(first) = words.first() {
        let is_assignment = first.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if is_assignment
            || matches!(
                first.as_str(),
                "sudo" | "env" | "time" | "nohup" | "command" | "exec" | "xargs" | "timeout"
            )
        {
            words = &words[1..];
            // `timeout 30 cmd`: skip the duration too.
            if let Some(next) = words.first()
                && next.chars().next().is_some_and(|c| c.is_ascii_digit())
                && !is_assignment
            {
                words = &words[1..];
            }
        } else {
            break;
        }
    }
    for (kind, target) in &command.redirects {
        if target.starts_with("/dev/") || !is_file_operand(target) {
            continue;
        }
        out.push(
            target,
            match kind {
                Redirect::Out => FileAction::Written,
                Redirect::Append => FileAction::Modified,
                Redirect::In => FileAction::Read,
            },
        );
    }
    let Some(first) = words.first() else { return };
    let program = basename(first);
    let args = &words[1..];
    let operands = || operands(args);
    match program {
        "bash" | "sh" | "zsh" | "dash" => {
            if let Some(flag) = args
                .iter()
                .position(|w| w.starts_with('-') && w.contains('c'))
            {
                if let Some(script) = args.get(flag + 1) {
                    shell_events(script, out);
                }
            } else {
                for path in operands() {
                    out.push(path, FileAction::Mentioned);
                }
            }
        }
        "apply_patch" | "applypatch" => {
            for body in args.iter().chain(&command.heredocs) {
                patch_events(body, out);
            }
        }
        "cd" | "pushd" => {
            // Only an absolute directory says where the agent is; `cd test` says so only
            // relative to a directory the call does not name.
            if let Some(dir) = operands()
                .next()
                .filter(|d| looks_like_dir(d) && (d.starts_with('/') || d.starts_with('~')))
            {
                out.working_directory = Some(dir.to_string());
            }
        }
        "cat" | "head" | "tail" | "less" | "more" | "nl" | "bat" | "wc" | "diff" | "cmp"
        | "file" | "stat" | "md5sum" | "sha256sum" | "jq" | "hexdump" | "xxd" | "strings"
        | "source" | "." => {
            for path in operands().filter(|p| is_file_operand(p)) {
                out.push(path, FileAction::Read);
            }
        }
        "sed" | "perl" => {
            let in_place = args.iter().any(|a| {
                a == "-i"
                    || a.starts_with("-i.")
                    || a == "--in-place"
                    || a.starts_with("--in-place=")
                    || (a.starts_with('-')
                        && !a.starts_with("--")
                        && a.contains('i')
                        && program == "perl")
            });
            // The script is the first operand unless given with -e / -f.
            let has_script_option = args
                .iter()
                .any(|a| a == "-e" || a == "-f" || a == "--expression");
            let skip = usize::from(!has_script_option);
            let action = if in_place {
                FileAction::Modified
            } else {
                FileAction::Read
            };
            for path in operands().skip(skip).filter(|p| is_file_operand(p)) {
                out.push(path, action);
            }
        }
        "grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" => {
            let has_pattern_option = args
                .iter()
                .any(|a| a == "-e" || a == "-f" || a == "--regexp");
            // `rg --files DIR` lists files: every operand is a path, none is a pattern.
            let lists_files = program == "rg" && args.iter().any(|a| a == "--files");
            let skip = usize::from(!(has_pattern_option || lists_files));
            for path in operands().skip(skip).filter(|p| is_path_word(p)) {
                out.push(path, FileAction::Searched);
            }
        }
        "find" | "fd" => {
            for path in args
                .iter()
                .take_while(|a| !a.starts_with('-'))
                .filter(|p| is_path_word(p))
            {
                out.push(path, FileAction::Searched);
            }
        }
        "ls" | "tree" | "du" | "exa" | "eza" => {
            for path in operands().filter(|p| is_path_word(p)) {
                out.push(path, FileAction::Listed);
            }
        }
        "touch" => {
            for path in operands().filter(|p| is_file_operand(p)) {
                out.push(path, FileAction::Created);
            }
        }
        "mkdir" => {
            for path in operands().filter(|p| is_file_operand(p)) {
                out.push(path, FileAction::Created);
            }
        }
        "tee" => {
            let append = args.iter().any(|a| a == "-a" || a == "--append");
            for path in operands().filter(|p| is_path_word(p) && !p.starts_with("/dev/")) {
                out.push(
                    path,
                    if append {
                        FileAction::Modified
                    } else {
                        FileAction::Written
                    },
                );
            }
        }
        "rm" | "rmdir" | "unlink" | "shred" => {
            for path in operands().filter(|p| is_file_operand(p)) {
                out.push(path, FileAction::Deleted);
            }
        }
        "mv" | "cp" | "ln" | "install" | "rsync" => {
            let paths: Vec<&str> = operands().filter(|p| is_file_operand(p)).collect();
            if let Some((destination, sources)) = paths.split_last() {
                for source in sources {
                    out.push(
                        source,
                        if program == "mv" {
                            FileAction::Deleted
                        } else {
                            FileAction::Read
                        },
                    );
                }
                if !sources.is_empty() {
                    out.push(destination, FileAction::Created);
                }
            }
        }
        "git" => git_events(args, out),
        "python" | "python3" | "node" | "ruby" | "go" | "cargo" | "npm" | "npx" | "uv"
        | "pytest" | "make" => {
            // Running code: paths it names are used, not read or changed by the shell itself.
            for path in operands().filter(|p| is_path_word(p)) {
                out.push(path, FileAction::Mentioned);
            }
        }
        _ => {
            for path in operands().filter(|p| is_path_word(p)) {
                out.push(path, FileAction::Mentioned);
            }
        }
    }
}

/// `git mv a b`, `git rm a`, `git checkout -- a`, `git diff a`, …
fn git_events(args: &[String], out: &mut CallEvents) {
    // Skip global options such as `-C dir`.
    let mut index = 0;
    while let Some(arg) = args.get(index) {
        if arg == "-C" || arg == "-c" {
            index += 2;
        } else if arg.starts_with('-') {
            index += 1;
        } else {
            break;
        }
    }
    let Some(sub) = args.get(index) else { return };
    let rest = &args[index + 1..];
    let strict: Vec<&str> = operands(rest).filter(|p| is_path_word(p)).collect();
    let files: Vec<&str> = operands(rest).filter(|p| is_file_operand(p)).collect();
    let paths = if matches!(sub.as_str(), "mv" | "rm") {
        files
    } else {
        strict
    };
    match sub.as_str() {
        "mv" => {
            if let Some((destination, sources)) = paths.split_last() {
                for source in sources {
                    out.push(source, FileAction::Deleted);
                }
                if !sources.is_empty() {
                    out.push(destination, FileAction::Created);
                }
            }
        }
        "rm" => paths.iter().for_each(|p| out.push(p, FileAction::Deleted)),
        "checkout" | "restore" => paths.iter().for_each(|p| out.push(p, FileAction::Modified)),
        "diff" | "show" | "log" | "blame" => {
            paths.iter().for_each(|p| out.push(p, FileAction::Read))
        }
        // A commit message or a branch name is not a file.
        "commit" | "tag" | "branch" | "switch" | "push" | "pull" | "fetch" | "merge" | "rebase"
        | "stash" | "remote" | "config" | "reset" | "init" | "clone" => {}
        _ => paths
            .iter()
            .for_each(|p| out.push(p, FileAction::Mentioned)),
    }
}

/// The non-option arguments of a command (after `--`, everything is an operand). Options that
/// take a value in the next word are not known in general, so only `-n 5`-style numeric values
/// and `=`-joined values are recognised; a misread value is at worst a mentioned path.
fn operands(args: &[String]) -> impl Iterator<Item = &str> {
    let mut after_dashes = false;
    args.iter().filter_map(move |arg| {
        if after_dashes {
            return Some(arg.as_str());
        }
        if arg == "--" {
            after_dashes = true;
            return None;
        }
        if arg.starts_with('-') && arg.len() > 1 {
            return None;
        }
        Some(arg.as_str())
    })
}

/// Calls of the OpenHands / SWE-agent Python editor API in `code`.
fn python_events(code: &str, out: &mut CallEvents) {
    const CALLS: [(&str, FileAction); 9] = [
        ("open_file(", FileAction::Read),
        ("create_file(", FileAction::Created),
        ("edit_file_by_replace(", FileAction::Modified),
        ("edit_file(", FileAction::Modified),
        ("append_file(", FileAction::Modified),
        ("insert_content_at_line(", FileAction::Modified),
        ("search_file(", FileAction::Searched),
        ("find_file(", FileAction::Searched),
        ("open(", FileAction::Read),
    ];
    for (call, action) in CALLS {
        for (at, _) in code.match_indices(call) {
            // `reopen(` or `x.open(` are other functions.
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
                continue;
            }
            let rest = code[at + call.len()..].trim_start();
            let Some(quote) = rest.chars().next().filter(|c| *c == '\'' || *c == '"') else {
                continue;
            };
            let rest = &rest[1..];
            if let Some(end) = rest.find(quote) {
                let path = &rest[..end];
                if is_path_value(path) {
                    // `open(path, "w")` writes.
                    let mode_write = call == "open("
                        && rest[end + 1..]
                            .trim_start()
                            .strip_prefix(',')
                            .map(str::trim_start)
                            .is_some_and(|m| {
                                m.starts_with("'w")
                                    || m.starts_with("\"w")
                                    || m.starts_with("'a")
                                    || m.starts_with("\"a")
                            });
                    out.push(
                        path,
                        if mode_write {
                            FileAction::Written
                        } else {
                            action
                        },
                    );
                }
            }
        }
    }
}

/// The last component of a program path (`/usr/bin/sed` → `sed`).
fn basename(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// A path as written, without surrounding quotes, trailing separators of prose or `./`.
fn clean_path(path: &str) -> &str {
    let path = path
        .trim()
        .trim_matches(|c| c == '"' || c == '\'' || c == '`');
    let path = path.trim_end_matches([',', ';', ':']);
    path.strip_prefix("./")
        .filter(|p| !p.is_empty())
        .unwrap_or(path)
}

/// A value given under a path key: any single-line text without spaces at the ends, not a
/// glob or a URL.
fn is_path_value(value: &str) -> bool {
    let value = value.trim();
    !value.is_empty()
        && value.len() <= 400
        && !value.contains(['\n', '\r', '*', '?'])
        && !value.contains("://")
        && !value.chars().any(char::is_control)
}

/// A directory argument (`workdir`, `cd DIR`).
fn looks_like_dir(value: &str) -> bool {
    is_path_value(value) && !value.contains(char::is_whitespace) && value != "-"
}

/// Whether a word in a position where a command expects a file (`touch NAME`, `rm NAME`, `>
/// NAME`) can be one: a name without shell syntax, options or URLs.
fn is_file_operand(word: &str) -> bool {
    let word = clean_path(word);
    is_path_word(word)
        || (!word.is_empty()
            && word.len() <= 400
            && !word.starts_with('-')
            && word.chars().any(char::is_alphabetic)
            && word.chars().all(|c| {
                c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | '~' | '+' | '@' | '%')
            }))
}

/// Whether a shell word names a file: it has a `/` between word characters, or ends in a short
/// alphabetic extension (`README.md`, `src/app.py`, `/etc/hosts`), and is not an option, a URL,
/// a glob, a variable, an assignment or a number.
pub fn is_path_word(word: &str) -> bool {
    let word = clean_path(word);
    if word.is_empty()
        || word.len() > 400
        || word.starts_with('-')
        || word.contains("://")
        || word.contains(|c: char| {
            c.is_whitespace()
                || c.is_control()
                || matches!(
                    c,
                    '*' | '?'
                        | '['
                        | ']'
                        | '{'
                        | '}'
                        | '$'
                        | '`'
                        | '='
                        | '<'
                        | '>'
                        | '|'
                        | '\''
                        | '"'
                        | '('
                        | ')'
                        | ','
                )
        })
        || !word.chars().any(|c| c.is_alphabetic())
    {
        return false;
    }
    if word.contains('/') {
        // `a/b`, `/etc/hosts`, `src/`: a slash next to a name character; `s/x/y/g` (a sed
        // script) has three or more slashes with single letters around and is not a path.
        let sed_like = word.starts_with("s/") && word.matches('/').count() >= 3;
        return !sed_like
            && word
                .split('/')
                .any(|component| component.chars().any(|c| c.is_alphanumeric()));
    }
    let Some((stem, extension)) = word.rsplit_once('.') else {
        return false;
    };
    !stem.is_empty()
        && stem.chars().any(|c| c.is_alphanumeric())
        && (1..=8).contains(&extension.len())
        && extension.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && extension.chars().all(|c| c.is_ascii_alphanumeric())
        // Version numbers and decimals (`v1.2`, `3.x`) are not files.
        && !stem.chars().all(|c| c.is_ascii_digit() || c == '.' || c == 'v')
}

#[cfg(test)]
mod tests;
