//! Reading a trace file: bytes from disk, format detection, import, optional concatenation.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use ctxkeeper_core::ParseError;
use ctxkeeper_core::import::{self, Session, Trace, TraceFormat};
use ctxkeeper_core::tokens::{Profiles, TokenModel};
use ctxkeeper_gateway::config::ConfigFile;

use crate::TraceArgs;

/// The model assumed when neither the trace nor `--model` names one.
pub const DEFAULT_MODEL: &str = "gpt-4o";

/// A problem with the user's input: exit code 2.
#[derive(Debug)]
pub enum InputError {
    /// The file could not be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not UTF-8 text.
    NotUtf8 { path: PathBuf, valid_up_to: usize },
    /// The format could not be detected.
    UnknownFormat { path: PathBuf },
    /// A `--format` or `--wire` value that is not known.
    BadOption(String),
    /// The content does not parse.
    Parse {
        path: PathBuf,
        format: TraceFormat,
        error: ParseError,
    },
    /// The configuration file is invalid.
    Config { path: PathBuf, message: String },
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Read { path, source } => write!(f, "{}: {source}", path.display()),
            InputError::NotUtf8 { path, valid_up_to } => {
                write!(
                    f,
                    "{}: byte {valid_up_to}: not valid UTF-8 text",
                    path.display()
                )
            }
            InputError::UnknownFormat { path } => write!(
                f,
                "{}: cannot tell the trace format from its content; pass --format (one of {})",
                path.display(),
                TraceFormat::ALL
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            InputError::BadOption(message) => f.write_str(message),
            InputError::Parse {
                path,
                format,
                error,
            } => {
                write!(
                    f,
                    "{}: {error} (reading it as {})",
                    path.display(),
                    format.as_str()
                )
            }
            InputError::Config { path, message } => write!(f, "{}: {message}", path.display()),
        }
    }
}

impl std::error::Error for InputError {}

/// A trace read from disk, ready to inspect or replay.
#[derive(Debug)]
pub struct LoadedTrace {
    pub path: PathBuf,
    pub format: TraceFormat,
    pub sessions: Vec<Session>,
    pub warnings: std::collections::BTreeMap<String, usize>,
    pub model: String,
    pub tokens: TokenModel,
    /// The model table `tokens` was looked up in (the built-in one with the config file's
    /// `[models]`).
    pub profiles: Profiles,
    /// The config file's `[policy]` table, as TOML text.
    pub policy_overrides: Option<String>,
}

/// Reads, detects, imports and (with `--concat`) joins the trace named by `args`.
pub fn load(args: &TraceArgs) -> Result<LoadedTrace, InputError> {
    let path = args.trace.clone();
    // Options first: a typo should not wait for a large file to be read.
    let requested: Option<TraceFormat> = match args.format.as_str() {
        "auto" => None,
        other => Some(other.parse().map_err(InputError::BadOption)?),
    };
    let mut text = read_text(&path)?;
    let format = match requested {
        Some(format) => format,
        None => import::detect(&text, &file_name(&path))
            .ok_or_else(|| InputError::UnknownFormat { path: path.clone() })?,
    };
    let mut skipped_files = 0;
    let mut subagent_calls = HashMap::new();
    if format == TraceFormat::ClaudeCode {
        for file in claude_code_subagent_files(&path, &mut skipped_files)? {
            // The sub-agent files are JSON Lines of the same entries: joined to the main file
            // they import as one trace, one session per sub-agent.
            let more = read_text(&file)?;
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&more);
            if let Some((agent, call)) = subagent_call(&file) {
                subagent_calls.insert(agent, call);
            }
        }
    }
    let imported = if format == TraceFormat::ClaudeCode {
        import::import_claude_code(&text, &subagent_calls)
    } else {
        import::import(&text, format)
    };
    let Trace {
        sessions,
        mut warnings,
        ..
    } = imported.map_err(|error| InputError::Parse {
        path: path.clone(),
        format,
        error,
    })?;
    if skipped_files > 0 {
        warnings.insert(
            "claude-code: skipped subagents/agent-acompact-*.jsonl files (Claude Code's own \
             compaction calls, which repeat the main conversation)"
                .to_string(),
            skipped_files,
        );
    }
    let sessions = if args.concat {
        vec![
            Trace {
                format,
                sessions,
                warnings: warnings.clone(),
            }
            .concat(),
        ]
    } else {
        sessions
    };
    let (profiles, policy_overrides) = load_config(args.config.as_deref())?;
    let model = args
        .model
        .clone()
        .or_else(|| sessions.iter().find_map(|s| s.model.clone()))
        .unwrap_or_else(|| DEFAULT_MODEL.to_string());
    let tokens = TokenModel::for_model(&model, &profiles);
    Ok(LoadedTrace {
        path,
        format,
        sessions,
        warnings,
        model,
        tokens,
        profiles,
        policy_overrides,
    })
}

/// Reads the configuration file with the same parser as `serve` (one `CTXKEEPER_CONFIG` serves
/// every command): `[models."NAME"]` profile overrides and a `[policy]` table apply here; a
/// `[gateway]` section is checked but only `serve` uses it.
fn load_config(config: Option<&Path>) -> Result<(Profiles, Option<String>), InputError> {
    let Some(path) = config else {
        return Ok((Profiles::builtin(), None));
    };
    let text = read_text(path)?;
    let bad = |message: String| InputError::Config {
        path: path.to_path_buf(),
        message,
    };
    let file = ConfigFile::parse(&text).map_err(|e| bad(e.to_string()))?;
    let profiles = match &file.models {
        Some(models) => Profiles::from_toml_str(models).map_err(|e| bad(e.to_string()))?,
        None => Profiles::builtin(),
    };
    Ok((profiles, file.policy))
}

/// The sub-agent transcripts Claude Code 2.x keeps beside a session file
/// (`<session>.jsonl` → `<session>/subagents/agent-<id>.jsonl`), in name order. Its own
/// compaction calls (`agent-acompact-*`) repeat the main conversation and are counted in
/// `skipped` instead.
fn claude_code_subagent_files(
    session_file: &Path,
    skipped: &mut usize,
) -> Result<Vec<PathBuf>, InputError> {
    let dir = session_file.with_extension("").join("subagents");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| InputError::Read {
            path: dir.clone(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("agent-") && name.ends_with(".jsonl")) {
            continue;
        }
        if name.starts_with("agent-acompact-") {
            *skipped += 1;
            continue;
        }
        files.push(entry.path());
    }
    files.sort();
    Ok(files)
}

/// The sub-agent id of `agent-<id>.jsonl` and the tool call that started it, from the
/// `toolUseId` of the `agent-<id>.meta.json` beside it (absent or unreadable: no link).
fn subagent_call(file: &Path) -> Option<(String, String)> {
    let stem = file.file_stem()?.to_str()?;
    let agent = stem.strip_prefix("agent-")?;
    let meta = std::fs::read_to_string(file.with_file_name(format!("{stem}.meta.json"))).ok()?;
    let meta: serde_json::Value = serde_json::from_str(&meta).ok()?;
    let call = meta.get("toolUseId")?.as_str()?;
    Some((agent.to_string(), call.to_string()))
}

fn read_text(path: &Path) -> Result<String, InputError> {
    let bytes = std::fs::read(path).map_err(|source| InputError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|err| InputError::NotUtf8 {
        path: path.to_path_buf(),
        valid_up_to: err.utf8_error().valid_up_to(),
    })
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
