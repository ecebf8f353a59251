//! The shared real traces (`../shared/data/traces`, or `$CTXKEEPER_TRACES`): where they are and
//! which files they hold, for the tests and benchmarks of every crate that reads them (each
//! includes this file with `#[path]`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The agent harnesses the shared traces come from, one directory each.
pub const HARNESSES: [&str; 5] = [
    "tau-bench",
    "swe-agent",
    "openhands",
    "claude-code",
    "codex",
];

/// Where the shared traces are when `$CTXKEEPER_TRACES` does not say: beside the repository.
pub fn default_traces_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/traces")
}

/// Where the shared traces are, or `None` (after a loud notice) when they are absent.
pub fn traces_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("CTXKEEPER_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(default_traces_dir);
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("SKIP: shared traces not found at {}", dir.display());
        None
    }
}

/// Every trace file (`.json`, `.jsonl`, `.traj`) under `dir`, at any depth, sorted; a
/// directory that cannot be read is passed over.
pub fn trace_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.flatten().map(|entry| entry.path()) {
            if path.is_dir() {
                pending.push(path);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("json" | "jsonl" | "traj")
            ) {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The files of one harness's directory (its `LICENSE` left out), sorted.
pub fn harness_files(dir: &Path, harness: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(harness))
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    files.retain(|path| path.file_name().is_some_and(|n| n != "LICENSE"));
    files.sort();
    files
}
