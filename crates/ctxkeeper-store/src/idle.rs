//! What a store's own threads do when they go quiet: the process's idle hook.
//!
//! A store that runs a thread of its own (SQLite's group-commit writer) leaves memory behind
//! in it: an allocator that keeps a heap per thread (mimalloc, the `ctxkeeper` binary's)
//! returns what a thread freed only when that thread collects its heap, and a thread that
//! waits for work collects nothing. The binary sets a hook that collects
//! (`ctxkeeper_alloc::return_freed_memory`); the store's threads call it once each time they
//! go idle after work. Without a hook nothing is called.

use std::sync::OnceLock;

static HOOK: OnceLock<fn()> = OnceLock::new();

/// Sets the function the store's own threads call, on themselves, once each time they go
/// idle after work (the SQLite writer: a second after its last group commit). Once per
/// process: `false` (and nothing changed) when a hook is already set.
///
/// ```
/// fn collect() {}
/// ctxkeeper_store::on_thread_idle(collect);
/// assert!(!ctxkeeper_store::on_thread_idle(collect));
/// ```
pub fn on_thread_idle(hook: fn()) -> bool {
    HOOK.set(hook).is_ok()
}

/// Calls the hook, if one is set, on the calling thread.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn thread_idle() {
    if let Some(hook) = HOOK.get() {
        hook();
    }
}
