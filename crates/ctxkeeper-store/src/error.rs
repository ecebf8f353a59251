//! The store layer's error: what every backend answers, whatever failed underneath.

use std::fmt;
use std::sync::Arc;

/// Errors of the store layer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The item, session or reference does not exist (or belongs to another tenant).
    #[error("not found: {0}")]
    NotFound(String),
    /// A compare-and-swap lost: someone else saved a newer version first.
    #[error(
        "version conflict: expected {}, found {}",
        version_or_none(*expected),
        version_or_none(*actual)
    )]
    Conflict {
        expected: Option<u64>,
        actual: Option<u64>,
    },
    /// An identifier, reference or pattern that is not acceptable.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A path inside a store or workspace directory that ctxkeeper refuses to use: a symbolic
    /// link (links there are never followed), or not the kind of file the store writes.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The backend does not support the operation.
    #[error("not implemented: {0}")]
    NotImplemented(String),
    /// The backend failed (IO, network, database). `cause` is the backend's own error when
    /// there is one (shared, so the error stays cheap to clone); it is the error's `source()`.
    #[error("{backend}: {message}")]
    Backend {
        backend: &'static str,
        message: String,
        #[source]
        cause: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// Stored data that cannot be decoded (a torn or foreign record, or a format written by a
    /// newer version).
    #[error("corrupt data: {0}")]
    Corrupt(String),
}

fn version_or_none(version: Option<u64>) -> String {
    version.map_or("none".to_string(), |v| v.to_string())
}

impl From<std::io::Error> for StoreError {
    fn from(err: std::io::Error) -> StoreError {
        if err.kind() == std::io::ErrorKind::NotFound {
            StoreError::NotFound(err.to_string())
        } else {
            StoreError::Backend {
                backend: "filesystem",
                message: err.to_string(),
                cause: Some(Arc::new(err)),
            }
        }
    }
}

impl StoreError {
    /// A backend failure described by a message of its own.
    pub(crate) fn backend(backend: &'static str, err: impl fmt::Display) -> StoreError {
        StoreError::Backend {
            backend,
            message: err.to_string(),
            cause: None,
        }
    }

    /// A backend failure caused by the backend's own error, kept as the source.
    pub(crate) fn backend_caused(
        backend: &'static str,
        err: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Backend {
            backend,
            message: err.to_string(),
            cause: Some(Arc::new(err)),
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
