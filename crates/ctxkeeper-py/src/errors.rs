//! Rust errors as the Python exceptions of `ctxkeeper_engine.errors`.
//!
//! The hierarchy is defined in Python (it needs multiple inheritance: an
//! `InvalidInputError` is also a `ValueError`, a `NotFoundError` a `LookupError`), and every
//! exception keeps its cause: each `source()` of the Rust error becomes the `__cause__` of
//! the one above it, mapped to its own class.

use std::error::Error as StdError;

use ctxkeeper_embed::EmbedError;
use ctxkeeper_store::StoreError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

/// The exception classes: the shared hierarchy of every face.
pub use ctxkeeper_embed::Class as Kind;

fn class<'py>(py: Python<'py>, kind: Kind) -> PyResult<Bound<'py, PyType>> {
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
    CLASSES[kind as usize]
        .import(py, "ctxkeeper_engine.errors", kind.name())
        .cloned()
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
    let class = class(py, kind)?;
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

/// A store error, with its class and its cause chain.
pub fn store(err: &StoreError) -> PyErr {
    let kind = Kind::of_store(err);
    chained(kind, err)
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
            Some(store) => Kind::of_store(store),
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

/// An error of the shared session layer, as its exception (with its cause chain).
pub fn embed(py: Python<'_>, err: EmbedError) -> PyErr {
    let text = err.to_string();
    match err {
        EmbedError::InvalidInput {
            message,
            path,
            index,
            kind,
        } => raise(
            Kind::InvalidInput,
            message,
            &[
                ("path", path.map_or(Attr::None, Attr::Str)),
                ("index", index.map_or(Attr::None, |i| Attr::Int(i as u64))),
                ("kind", kind.map_or(Attr::None, |k| Attr::Str(k.into()))),
            ],
        ),
        EmbedError::Config(message) => config(message),
        EmbedError::Open { source, .. } => {
            let top = raise(Kind::Store, text, &[]);
            top.set_cause(py, Some(store(&source)));
            top
        }
        EmbedError::Store(err) => store(&err),
        EmbedError::Manager(err) => manager(&err),
        EmbedError::Ingest { index, source } => {
            let top = manager(&source);
            let note = format!("messages[{index}] and later were not ingested");
            let _ = top.value(py).call_method1("add_note", (note,));
            top
        }
        EmbedError::Other(message) => raise(Kind::Base, message, &[]),
    }
}
