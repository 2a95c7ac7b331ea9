//! A counting allocator for the tests: per thread, the peak of bytes allocated while a closure runs, so that
//! a bound computed before decoding or translating can be checked against what really happened. Each block
//! counts [`ALLOCATION_OVERHEAD`] beyond its size, as glibc's malloc may take it: the bounds are of the
//! memory a process really uses.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use super::measure::ALLOCATION_OVERHEAD;

struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn grew(n: usize) {
    let live = LIVE.get() + n;
    LIVE.set(live);
    PEAK.set(PEAK.get().max(live));
}

// SAFETY: every call is forwarded to `System` unchanged; the counters only read the sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() + ALLOCATION_OVERHEAD);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.set(LIVE.get().saturating_sub(layout.size() + ALLOCATION_OVERHEAD));
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Counted as a new block beside the old one, as a moving realloc holds both for a moment.
        grew(new_size + ALLOCATION_OVERHEAD);
        LIVE.set(LIVE.get().saturating_sub(layout.size() + ALLOCATION_OVERHEAD));
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What `f` returns, and the most bytes it had allocated at once on this thread beyond what was live
/// before it.
pub(crate) fn peak_with<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.get();
    PEAK.set(before);
    let value = f();
    (value, PEAK.get() - before)
}

/// The most bytes `f` had allocated at once on this thread, beyond what was live before it.
pub(crate) fn peak_of<T>(f: impl FnOnce() -> T) -> usize {
    peak_with(f).1
}
