//! A counting allocator for the tests that hold a bound, computed before decoding, against what decoding really
//! allocates: per thread, the peak of bytes live while a closure runs. A test binary installs it with
//! `#[global_allocator] static ALLOCATOR: PerThread<OVERHEAD> = PerThread;`, where `OVERHEAD` is what each block
//! is counted beyond its size (what glibc's malloc may take, for bounds of the memory a process really uses).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Forwards every call to [`System`] and counts this thread's live bytes, each block `OVERHEAD` beyond its size.
#[derive(Debug)]
pub struct PerThread<const OVERHEAD: usize>;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn grew(n: usize) {
    let live = LIVE.get() + n;
    LIVE.set(live);
    PEAK.set(PEAK.get().max(live));
}

fn shrank(n: usize) {
    LIVE.set(LIVE.get().saturating_sub(n));
}

// SAFETY: every call is forwarded to `System` unchanged; the counters only read the sizes.
#[allow(unsafe_code)]
unsafe impl<const OVERHEAD: usize> GlobalAlloc for PerThread<OVERHEAD> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() + OVERHEAD);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrank(layout.size() + OVERHEAD);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Counted as a new block beside the old one, as a moving realloc holds both for a moment.
        grew(new_size + OVERHEAD);
        shrank(layout.size() + OVERHEAD);
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// What `f` returns, and the most bytes it had allocated at once on this thread beyond what was live before it
/// (what it returns included). Meaningful only in a binary whose global allocator is a [`PerThread`].
pub fn peak_with<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.get();
    PEAK.set(before);
    let value = f();
    (value, PEAK.get() - before)
}

/// The most bytes `f` had allocated at once on this thread (see [`peak_with`]).
pub fn peak_of<T>(f: impl FnOnce() -> T) -> usize {
    peak_with(f).1
}
