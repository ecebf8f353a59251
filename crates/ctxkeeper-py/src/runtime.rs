//! The shared async runtime (`ctxkeeper_embed::runtime`), entered with the GIL released.
//!
//! Each call runs its future to completion on the calling thread with the GIL released
//! (`Python::detach`), so other Python threads run meanwhile.

use std::future::Future;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors;

/// Runs `work` (which blocks on futures with [`block_on`]) with the GIL released.
pub fn detached<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: FnOnce(&Runtime) -> T + Send,
    T: Send,
{
    let runtime = ctxkeeper_embed::runtime::runtime().map_err(|e| errors::embed(py, e))?;
    Ok(py.detach(|| work(runtime)))
}

/// Runs one future to completion on the calling thread, with the GIL released.
pub fn block_on<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    detached(py, |runtime| runtime.block_on(future))
}
