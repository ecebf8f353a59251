//! The Python face of ctxkeeper: the extension module `ctxkeeper_engine._native`, built by
//! maturin into one abi3 wheel (every CPython from 3.10 on) and published as the
//! distribution `ctxkeeper-engine` (the PyPI name `ctxkeeper` belongs to an unrelated
//! project). The package `ctxkeeper_engine` (in `python/`) re-exports it with the exception
//! classes and type stubs.
//!
//! Why: most agents are Python. The gateway serves agents that cannot be changed; for the
//! agent one writes, an import is simpler than a proxy and costs microseconds per step
//! instead of a network hop.
//!
//! # The API shape (shared by every language face)
//!
//! The faces over the library facade (`ctxkeeper::ContextManager`) keep one shape, so the
//! npm package and this one read alike: both bind `ctxkeeper_embed::Session`, which holds
//! everything but the conversions of this crate (Python objects, exceptions, the GIL). Messages cross the boundary as plain objects in the
//! caller's own wire shape (OpenAI Chat `messages`, Responses `input` items, Anthropic
//! `messages` with `system` apart), never as ctxkeeper types.
//!
//! | call | what it does |
//! | --- | --- |
//! | `ContextManager(policy, model=, window=, wire=, system=, tools=, store=, session=, tenant=, workspace=, summarizer=, on_event=)` | one session; `policy` is a preset name, a config file path or a dict of `[policy]` overrides; `store` a session store URL (`sqlite:///…`, `postgres://…`, …): the session is resumed when stored and saved at every step |
//! | `ingest(messages)` | appends messages; bad input (unknown role, broken tool pairing, a hostile id) raises `InvalidInputError` and changes nothing |
//! | `prepare(max_tokens=)` → `Prepared` | compacts when a trigger fires; `.messages`, `.system`, `.kwargs`, `.request(model=)`, `.input_tokens`, `.compacted`, `.changed` |
//! | `on_overflow(error)` → `Prepared` or none | the provider said the context is too long: compacts harder so the retry fits; none when `error` is not an overflow |
//! | `usage(report)` | the provider's usage report (or input tokens) for the last request: calibrates the count |
//! | `events()` / `on_event` | the engine's events as dicts (`type`: `context_compaction_end`, `tool_result_truncated`, …) |
//! | `search(query)`, `read(reference)`, `archived()` | what left the context, read back |
//! | `compact(focus=, overrides=)`, `count_tokens()`, `stats()`, `save()` | on demand |
//! | `Sessions(store, tenant=)`: `list()`, `history(id)`, `search(q)`, `delete(id)` | the stores and URLs of `ctxkeeper sessions` |
//!
//! Errors are exceptions of one hierarchy (`CtxkeeperError`: `InvalidInputError`,
//! `ConfigError`, `StoreError` (`ConflictError`, `ArchiveError`), `NotFoundError`,
//! `ContextOverflowError` (`NoRoomError`, `UnrecoverableError`)), each keeping its cause
//! (`__cause__`). Engine work runs with the GIL released; a step (`ingest`, `prepare`) holds it
//! until it waits on IO (most steps do none and take microseconds).
//!
//! ```python
//! from ctxkeeper_engine import ContextManager
//!
//! cm = ContextManager("default", model="gpt-4o", window=16_000)
//! cm.ingest([{"role": "user", "content": "Summarize the logs"}])
//! prepared = cm.prepare()
//! reply = client.chat.completions.create(model="gpt-4o", **prepared.kwargs)
//! cm.usage(reply.usage)
//! cm.ingest(reply.choices[0].message)
//! ```

mod errors;
mod manager;
mod plain;
mod runtime;
mod sessions;
mod settings;

use pyo3::prelude::*;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The presets `policy=` accepts by name.
#[pyfunction]
fn presets() -> Vec<&'static str> {
    ctxkeeper::core::engine::presets::NAMES.to_vec()
}

/// The version of the engine this module was built from.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<manager::PyContextManager>()?;
    m.add_class::<manager::Prepared>()?;
    m.add_class::<sessions::Sessions>()?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
