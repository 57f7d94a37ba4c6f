//! A global allocator that counts the heap in use and its peak, for the benches and examples
//! that report memory. A user installs it with
//! `#[global_allocator] static ALLOCATOR: common::heap::Counting = common::heap::Counting;`.

// The allocator is the only unsafe code: it forwards to the system allocator.
#![allow(unsafe_code, dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes in use and their peak.
pub struct Counting;

/// Bytes allocated and not yet freed.
pub static IN_USE: AtomicUsize = AtomicUsize::new(0);
/// The most bytes in use at once since it was last reset.
pub static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Allocations not yet freed.
pub static LIVE: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    LIVE.fetch_add(1, Ordering::Relaxed);
    let now = IN_USE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counters
// are only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            grew(layout.size());
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            grew(layout.size());
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(pointer, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            grew(new_size);
            IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_sub(1, Ordering::Relaxed);
        }
        moved
    }
}

/// Runs `f` and returns its result with the most heap it held at once beyond what was in use
/// before.
pub fn peak_heap<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = IN_USE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let value = f();
    (value, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

/// Bytes in use now.
pub fn in_use() -> usize {
    IN_USE.load(Ordering::Relaxed)
}

/// Allocations not yet freed (each costs malloc a header and rounding beyond its bytes).
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}
