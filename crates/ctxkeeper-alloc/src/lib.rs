//! The allocator of the `ctxkeeper` binary, and the call that gives its freed memory back.
//!
//! The binary allocates with mimalloc ([`Allocator`]): the gateway allocates and frees many
//! small buffers per request, and glibc's malloc and free took about a quarter of `serve`'s
//! CPU under closed-loop load. mimalloc returns the pages a burst of work freed to the OS
//! only after a delay (1 s) *and* only once it is used again: a gateway that goes quiet
//! after a load keeps the load's peak resident, however many sessions idled out. `serve`
//! therefore calls [`return_freed_memory`] every few seconds, which purges what was freed
//! (measured in bench/RESULTS.md, "The gateway under abuse").
//!
//! ```
//! // Cheap when there is nothing to give back; safe to call from any thread.
//! ctxkeeper_alloc::return_freed_memory();
//! ```

pub mod counting;

/// The global allocator type the binary installs (`#[global_allocator]`).
pub use mimalloc::MiMalloc as Allocator;

/// Returns the memory mimalloc holds freed to the OS now, instead of after its next use:
/// collects the calling thread's heap and purges the pages every thread freed.
pub fn return_freed_memory() {
    // SAFETY: `mi_collect` takes a flag, no pointers, and is documented thread-safe; it only
    // releases pages no allocation uses.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

/// For a runtime's `on_thread_park` hook: when a worker thread goes idle, and its heap was
/// last collected a second or more ago, returns what that thread's heap holds freed (each
/// thread's heap keeps its own freed pages; [`return_freed_memory`] from one thread does not
/// reach the others'). At most once a second per thread, so a busy worker pays nothing
/// measurable.
pub fn return_freed_memory_when_idle() {
    use std::cell::Cell;
    use std::time::{Duration, Instant};
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    let due = LAST.with(|last| {
        let due = last
            .get()
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1));
        if due {
            last.set(Some(now));
        }
        due
    });
    if due {
        return_freed_memory();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn collecting_after_freeing_keeps_the_heap_usable() {
        let buffers: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 64 * 1024]).collect();
        drop(buffers);
        super::return_freed_memory();
        let again = vec![7u8; 1 << 20];
        assert_eq!(again.iter().map(|&b| u64::from(b)).sum::<u64>(), 7 << 20);
    }
}
