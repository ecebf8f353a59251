//! Running the `ctxkeeper` binary from the end-to-end tests.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ctxkeeper"))
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

/// `ctxkeeper replay TRACE` with the other arguments given.
pub fn replay(trace: &Path, args: &[&str]) -> Output {
    bin()
        .arg("replay")
        .arg(trace)
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Fails the test, showing the run's stderr, unless the run succeeded.
pub fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The stdout of a run that must succeed, as text.
pub fn stdout_of(output: &Output) -> String {
    assert_success(output);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The one JSON object a run that must succeed printed.
pub fn json_of(output: &Output) -> Value {
    assert_success(output);
    serde_json::from_slice(&output.stdout).expect("stdout is one JSON object")
}
