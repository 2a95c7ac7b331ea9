//! A counting allocator for the tests that hold a bound against what decoding really allocates: it records,
//! per thread, the peak of bytes allocated while a closure runs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

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
        grew(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.set(LIVE.get().saturating_sub(layout.size()));
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Counted as a new block beside the old one, as a moving realloc holds both for a moment.
        grew(new_size);
        LIVE.set(LIVE.get().saturating_sub(layout.size()));
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most bytes `f` had allocated at once on this thread, beyond what was live before it (what it returns
/// included).
pub(crate) fn peak_of<T>(f: impl FnOnce() -> T) -> usize {
    let before = LIVE.get();
    PEAK.set(before);
    let value = f();
    let peak = PEAK.get() - before;
    drop(value);
    peak
}
