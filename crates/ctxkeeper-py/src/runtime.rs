//! The shared async runtime (`ctxkeeper_embed::runtime`), entered with the GIL released.
//!
//! Each call runs its future to completion on the calling thread with the GIL released
//! (`Python::detach`), so other Python threads run meanwhile. A step (`ingest`, `prepare`)
//! is the exception: most do no IO and take microseconds, less than releasing and taking
//! back the GIL, so a step runs holding it and lets it go only once a future waits (see
//! [`Stepper`]).

use std::future::Future;
use std::task::{Context, Poll, Waker};

use ctxkeeper_embed::runtime::Block;
use pyo3::prelude::*;
use tokio::runtime::{EnterGuard, Runtime};

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

/// How a step waits for its futures: each is polled once holding the GIL (in the runtime's
/// context, so it may start IO); one that is not done then (it waits on a file, a store, a
/// summarizer model) is run to completion with the GIL released, as every other call is.
///
/// The runtime's context is entered once for the stepper's life, not for every future: a
/// step waits on two or three futures, and entering (a thread-local swap of the runtime's
/// handle, an atomic count each way) cost more than polling most of them.
pub struct Stepper<'py> {
    py: Python<'py>,
    runtime: &'static Runtime,
    _context: EnterGuard<'static>,
}

impl Stepper<'_> {
    pub fn new(py: Python<'_>) -> PyResult<Stepper<'_>> {
        let runtime = ctxkeeper_embed::runtime::runtime().map_err(|e| errors::embed(py, e))?;
        Ok(Stepper {
            py,
            runtime,
            _context: runtime.enter(),
        })
    }
}

impl Block for Stepper<'_> {
    fn block_on<F>(&self, future: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let mut future = std::pin::pin!(future);
        let polled = future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        match polled {
            Poll::Ready(output) => output,
            Poll::Pending => {
                let runtime = self.runtime;
                self.py.detach(|| runtime.block_on(future))
            }
        }
    }
}
