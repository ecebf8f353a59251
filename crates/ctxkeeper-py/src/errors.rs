//! Rust errors as the Python exceptions of `ctxkeeper_engine.errors`.
//!
//! The hierarchy is defined in Python (it needs multiple inheritance: an
//! `InvalidInputError` is also a `ValueError`, a `NotFoundError` a `LookupError`), and every
//! exception keeps its cause: each `source()` of the Rust error becomes the `__cause__` of
//! the one above it, mapped to its own class.

use std::error::Error as StdError;

use ctxkeeper_core::ParseError;
use ctxkeeper_store::StoreError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

/// The exception classes, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Base,
    InvalidInput,
    Config,
    Store,
    Conflict,
    NotFound,
    Archive,
    NoRoom,
    Unrecoverable,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Base => "CtxkeeperError",
            Kind::InvalidInput => "InvalidInputError",
            Kind::Config => "ConfigError",
            Kind::Store => "StoreError",
            Kind::Conflict => "ConflictError",
            Kind::NotFound => "NotFoundError",
            Kind::Archive => "ArchiveError",
            Kind::NoRoom => "NoRoomError",
            Kind::Unrecoverable => "UnrecoverableError",
        }
    }

    fn class<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyType>> {
        static CLASSES: [PyOnceLock<Py<PyType>>; 9] = [
            PyOnceLock::new(),
            PyOnceLock::new(),
            PyOnceLock::new(),
            PyOnceLock::new(),
            PyOnceLock::new(),
            PyOnceLock::new(),
            PyOnceLock::new(),
            PyOnceLock::new(),
            PyOnceLock::new(),
        ];
        CLASSES[self as usize]
            .import(py, "ctxkeeper_engine.errors", self.name())
            .cloned()
    }
}

/// An exception of class `kind` with `message` and keyword attributes (`path=…`, `index=…`).
pub fn raise(kind: Kind, message: impl Into<String>, attrs: &[(&str, Attr)]) -> PyErr {
    let message = message.into();
    Python::attach(|py| match build(py, kind, &message, attrs) {
        Ok(err) => err,
        Err(err) => err,
    })
}

/// A keyword attribute of an exception.
#[derive(Debug, Clone)]
pub enum Attr {
    Str(String),
    Int(u64),
    None,
}

fn build(py: Python<'_>, kind: Kind, message: &str, attrs: &[(&str, Attr)]) -> PyResult<PyErr> {
    let class = kind.class(py)?;
    let kwargs = PyDict::new(py);
    for (name, value) in attrs {
        match value {
            Attr::Str(text) => kwargs.set_item(*name, text)?,
            Attr::Int(number) => kwargs.set_item(*name, number)?,
            Attr::None => kwargs.set_item(*name, py.None())?,
        }
    }
    let instance = class.call((message,), Some(&kwargs))?;
    Ok(PyErr::from_value(instance))
}

/// A parse error of the caller's input (`what`: `messages`, `tools`, `system`).
pub fn parse(what: &str, err: &ParseError) -> PyErr {
    let path = err.position.to_string();
    let path = path.strip_prefix("at ").unwrap_or(&path).to_string();
    let shown = path.replacen('$', what, 1);
    raise(
        Kind::InvalidInput,
        format!("{shown}: {}", err.message),
        &[("path", Attr::Str(shown.clone()))],
    )
}

/// A store error, with its class and its cause chain.
pub fn store(err: &StoreError) -> PyErr {
    let kind = store_kind(err);
    chained(kind, err)
}

fn store_kind(err: &StoreError) -> Kind {
    if err.is_conflict() {
        Kind::Conflict
    } else if err.is_not_found() {
        Kind::NotFound
    } else if matches!(err, StoreError::InvalidInput(_)) || err.is_forbidden() {
        Kind::InvalidInput
    } else {
        Kind::Store
    }
}

/// An error of the context manager.
pub fn manager(err: &ctxkeeper::Error) -> PyErr {
    use ctxkeeper::Error;
    match err {
        Error::Archive(store) => {
            let top = raise(Kind::Archive, err.to_string(), &[]);
            Python::attach(|py| top.set_cause(py, Some(self::store(store))));
            top
        }
        Error::Config(_) => raise(Kind::Config, err.to_string(), &[]),
        Error::Unrecoverable { attempts, tokens } => raise(
            Kind::Unrecoverable,
            err.to_string(),
            &[
                ("attempts", Attr::Int(u64::from(*attempts))),
                ("tokens", Attr::Int(*tokens)),
            ],
        ),
        Error::NoRoom { needed, limit } => raise(
            Kind::NoRoom,
            err.to_string(),
            &[("needed", Attr::Int(*needed)), ("limit", Attr::Int(*limit))],
        ),
        other => chained(Kind::Base, other),
    }
}

/// `err` as `kind`, each of its sources the `__cause__` of the one before (as a store error
/// when it is one, else the base class).
pub fn chained(kind: Kind, err: &(dyn StdError + 'static)) -> PyErr {
    let top = raise(kind, err.to_string(), &[]);
    if let Some(source) = err.source() {
        let kind = match source.downcast_ref::<StoreError>() {
            Some(store) => store_kind(store),
            None => Kind::Base,
        };
        let cause = chained(kind, source);
        Python::attach(|py| top.set_cause(py, Some(cause)));
    }
    top
}

/// A refused option or configuration.
pub fn config(message: impl Into<String>) -> PyErr {
    raise(Kind::Config, message, &[])
}

/// Refused input.
pub fn invalid(message: impl Into<String>) -> PyErr {
    raise(Kind::InvalidInput, message, &[])
}
