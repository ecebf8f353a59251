//! An allocator that counts: the binary's allocator ([`crate::Allocator`]), with the bytes
//! live now and the most live since the last [`reset_peak`]. For test binaries that measure
//! what a piece of work costs in memory (install it with `#[global_allocator]` there); the
//! counters are process-wide.
//!
//! ```
//! use ctxkeeper_alloc::counting;
//!
//! counting::reset_peak();
//! let before = counting::live();
//! // Without `Counting` installed as the global allocator nothing is counted.
//! assert!(counting::peak() >= before);
//! ```

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::Allocator;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The counting allocator.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counting;

/// Bytes allocated and not yet freed.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// The most bytes live at once since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new peak from what is live now.
pub fn reset_peak() {
    PEAK.store(live(), Ordering::Relaxed);
}

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every call goes to mimalloc unchanged (the same pointer, layout and size); the
// counters only observe what it returned.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        let ptr = unsafe { Allocator.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        let ptr = unsafe { Allocator.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's pointer and layout, passed on.
        unsafe { Allocator.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's pointer, layout and size, passed on.
        let moved = unsafe { Allocator.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        moved
    }
}
