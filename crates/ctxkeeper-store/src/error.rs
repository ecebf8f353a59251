//! The store layer's error: what every backend answers, whatever failed underneath.

use std::fmt;

/// Errors of the store layer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StoreError {
    /// The item, session or reference does not exist (or belongs to another tenant).
    NotFound(String),
    /// A compare-and-swap lost: someone else saved a newer version first.
    Conflict {
        expected: Option<u64>,
        actual: Option<u64>,
    },
    /// An identifier, reference or pattern that is not acceptable.
    InvalidInput(String),
    /// A path inside a store or workspace directory that ctxkeeper refuses to use: a symbolic
    /// link (links there are never followed), or not the kind of file the store writes.
    Forbidden(String),
    /// The backend does not support the operation.
    NotImplemented(String),
    /// The backend failed (IO, network, database).
    Backend {
        backend: &'static str,
        message: String,
    },
    /// Stored data that cannot be decoded (a torn or foreign record, or a format written by a
    /// newer version).
    Corrupt(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound(what) => write!(f, "not found: {what}"),
            StoreError::Conflict { expected, actual } => write!(
                f,
                "version conflict: expected {}, found {}",
                expected.map_or("none".to_string(), |v| v.to_string()),
                actual.map_or("none".to_string(), |v| v.to_string())
            ),
            StoreError::InvalidInput(message) => write!(f, "invalid input: {message}"),
            StoreError::Forbidden(message) => write!(f, "forbidden: {message}"),
            StoreError::NotImplemented(what) => write!(f, "not implemented: {what}"),
            StoreError::Backend { backend, message } => write!(f, "{backend}: {message}"),
            StoreError::Corrupt(message) => write!(f, "corrupt data: {message}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<std::io::Error> for StoreError {
    fn from(err: std::io::Error) -> StoreError {
        if err.kind() == std::io::ErrorKind::NotFound {
            StoreError::NotFound(err.to_string())
        } else {
            StoreError::Backend {
                backend: "filesystem",
                message: err.to_string(),
            }
        }
    }
}

impl StoreError {
    pub(crate) fn backend(backend: &'static str, err: impl fmt::Display) -> StoreError {
        StoreError::Backend {
            backend,
            message: err.to_string(),
        }
    }

    /// True for a lost compare-and-swap.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }

    /// True for a missing item or session.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound(_))
    }

    /// True for a path refused because it is a link or not the store's own kind of file.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, StoreError::Forbidden(_))
    }
}
