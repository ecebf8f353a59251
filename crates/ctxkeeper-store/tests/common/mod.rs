//! Shared test support: the conformance suites every backend runs, and service discovery for
//! the backends that need a real server.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod archive_suite;
pub mod generations_suite;
pub mod store_suite;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A prefix unique to this test run (process, time and counter), so parallel runs against a
/// shared database never see each other's data.
pub fn unique(name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{name}-{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// True under CI, where a missing service is a failure, not a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The URL of a real service for `backend`, from `var`. Outside CI an unset variable means
/// SKIP (printed loudly; the caller returns). Under CI the documented local default is used.
pub fn service_url(var: &str, backend: &str, ci_default: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if in_ci() => Some(ci_default.to_string()),
        _ => {
            loud(&format!(
                "SKIP: {backend} conformance: {var} is not set (e.g. {ci_default})"
            ));
            None
        }
    }
}

/// Reports an unreachable service: SKIP outside CI, a failure under CI.
pub fn unreachable(backend: &str, reason: &str) {
    if in_ci() {
        panic!("{backend} service unreachable under CI: {reason}");
    }
    loud(&format!(
        "SKIP: {backend} conformance: service unreachable: {reason}"
    ));
}

/// The service `opened`, or `None` when it did not answer (reported by [`unreachable`]).
pub fn answered<T, E: std::fmt::Display>(backend: &str, opened: Result<T, E>) -> Option<T> {
    match opened {
        Ok(service) => Some(service),
        Err(err) => {
            unreachable(backend, &err.to_string());
            None
        }
    }
}

/// The `|`-separated arguments `var` hands a test spawned as a child process; `None` when
/// the test runs as itself.
pub fn child_args(var: &str) -> Option<Vec<String>> {
    let spec = std::env::var(var).ok()?;
    Some(spec.split('|').map(str::to_string).collect())
}

/// Writes to the process's stderr directly: the test harness captures `eprintln!` of passing
/// tests, and a skip must never pass unnoticed.
pub fn loud(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

pub const POSTGRES_VAR: &str = "CTXKEEPER_TEST_POSTGRES_URL";
pub const POSTGRES_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/test";
pub const MYSQL_VAR: &str = "CTXKEEPER_TEST_MYSQL_URL";
pub const MYSQL_DEFAULT: &str = "mysql://root@127.0.0.1:3306/test";
pub const REDIS_VAR: &str = "CTXKEEPER_TEST_REDIS_URL";
pub const REDIS_DEFAULT: &str = "redis://127.0.0.1:6379";
