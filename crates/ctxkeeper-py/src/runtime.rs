//! The async runtime the library's futures run on, shared by every manager of the process.
//!
//! The facade is async (archives and stores do IO); Python calls are blocking. Each call
//! runs its future to completion on the calling thread with the GIL released
//! (`Python::detach`), so other Python threads run meanwhile. One worker thread drives what
//! the stores spawn in the background (connection pools, the SQLite writer's indexing).

use std::future::Future;
use std::sync::OnceLock;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors;

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

fn runtime() -> PyResult<&'static Runtime> {
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ctxkeeper")
            .enable_all()
            .build()
            .map_err(|err| format!("cannot start the async runtime: {err}"))
    });
    runtime
        .as_ref()
        .map_err(|message| errors::raise(errors::Kind::Base, message.clone(), &[]))
}

/// Runs `work` (which blocks on futures with [`block_on`]) with the GIL released.
pub fn detached<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: FnOnce(&Runtime) -> T + Send,
    T: Send,
{
    let runtime = runtime()?;
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
