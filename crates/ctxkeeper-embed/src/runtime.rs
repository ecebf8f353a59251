//! The async runtime the library's futures run on, shared by every session of the process.
//!
//! The facade is async (archives and stores do IO); a face's calls are blocking (Python) or
//! run on a worker thread of the host (Node's thread pool). Each call runs its future to
//! completion on the calling thread ([`Runtime::block_on`]); one worker thread drives what
//! the stores spawn in the background (connection pools, the SQLite writer's indexing).

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::Runtime;

use crate::error::EmbedError;

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The process's runtime, started on first use.
pub fn runtime() -> Result<&'static Runtime, EmbedError> {
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
        .map_err(|message| EmbedError::Other(message.clone()))
}

/// How a session's step waits for its futures ([`crate::Session::take`],
/// [`crate::Session::prepare`]): on the runtime, or the face's own way (Python runs a step
/// holding the GIL and releases it only once a future waits on IO).
pub trait Block {
    /// Runs `future` to completion.
    fn block_on<F>(&self, future: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send;
}

impl Block for Runtime {
    fn block_on<F>(&self, future: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        Runtime::block_on(self, future)
    }
}
