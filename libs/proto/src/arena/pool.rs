//! A pool of request arenas.

use bumpalo::Bump;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A pool of [`Bump`] arenas reused across requests. Cheap to clone (the clones share one pool).
///
/// An arena comes back [`reset`](Bump::reset) (its largest chunk kept, everything else freed) when its
/// [`PooledArena`] drops. It is dropped instead when the pool already holds `max_pooled` arenas, when the
/// capacity it would keep exceeds `max_retained_bytes`, or when keeping it would take the idle arenas
/// together past twice `max_retained_bytes`: one huge request must not pin its memory for ever, and a burst
/// of large requests leaves at most two large arenas behind, not `max_pooled` of them.
#[derive(Clone)]
pub struct ArenaPool {
    inner: Arc<Inner>,
}

struct Inner {
    free: Mutex<Vec<Bump>>,
    max_pooled: usize,
    max_retained_bytes: usize,
    retained_bytes: AtomicUsize,
    dropped: AtomicU64,
}

impl ArenaPool {
    /// A pool keeping at most `max_pooled` idle arenas of at most `max_retained_bytes` capacity each.
    pub fn new(max_pooled: usize, max_retained_bytes: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                free: Mutex::new(Vec::with_capacity(max_pooled)),
                max_pooled,
                max_retained_bytes,
                retained_bytes: AtomicUsize::new(0),
                dropped: AtomicU64::new(0),
            }),
        }
    }

    /// An empty arena: a pooled one if any is idle, else a new one.
    pub fn get(&self) -> PooledArena {
        let bump = self.inner.lock().pop();
        let bump = match bump {
            Some(bump) => {
                self.inner
                    .retained_bytes
                    .fetch_sub(bump.allocated_bytes(), Ordering::Relaxed);
                bump
            }
            None => Bump::new(),
        };
        PooledArena {
            bump,
            pool: Arc::clone(&self.inner),
        }
    }

    /// Total capacity held by the idle arenas in the pool.
    pub fn retained_bytes(&self) -> usize {
        self.inner.retained_bytes.load(Ordering::Relaxed)
    }

    /// How many arenas were dropped on return, because the pool was full, they had grown past
    /// `max_retained_bytes`, or the idle arenas already held twice that.
    pub fn arenas_dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }

    /// How many idle arenas the pool holds.
    pub fn idle(&self) -> usize {
        self.inner.lock().len()
    }
}

impl Default for ArenaPool {
    /// 64 idle arenas of up to 4 MiB each, 8 MiB in all. A Prometheus batch (2,000 samples by default)
    /// decodes in well under 1 MiB; bigger requests get a fresh arena that is freed afterwards.
    fn default() -> Self {
        Self::new(64, 4 << 20)
    }
}

impl fmt::Debug for ArenaPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArenaPool")
            .field("idle", &self.idle())
            .field("max_pooled", &self.inner.max_pooled)
            .field("max_retained_bytes", &self.inner.max_retained_bytes)
            .field("retained_bytes", &self.retained_bytes())
            .field("arenas_dropped", &self.arenas_dropped())
            .finish()
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Bump>> {
        // The vector stays consistent even if a holder panicked: every operation on it is a single push/pop.
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn put_back(&self, mut bump: Bump) {
        bump.reset();
        let capacity = bump.allocated_bytes();
        if capacity > self.max_retained_bytes {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut free = self.lock();
        let total_budget = self.max_retained_bytes.saturating_mul(2);
        let retained = self.retained_bytes.load(Ordering::Relaxed);
        if free.len() >= self.max_pooled || retained.saturating_add(capacity) > total_budget {
            drop(free);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        free.push(bump);
        self.retained_bytes.fetch_add(capacity, Ordering::Relaxed);
    }
}

/// An arena on loan from an [`ArenaPool`]; derefs to [`Bump`]. Returned to the pool when dropped.
///
/// Everything allocated in it borrows it, so the borrow checker rejects any use after the drop.
pub struct PooledArena {
    bump: Bump,
    pool: Arc<Inner>,
}

impl Deref for PooledArena {
    type Target = Bump;

    fn deref(&self) -> &Bump {
        &self.bump
    }
}

impl DerefMut for PooledArena {
    fn deref_mut(&mut self) -> &mut Bump {
        &mut self.bump
    }
}

impl Drop for PooledArena {
    fn drop(&mut self) {
        // An empty Bump owns no chunk, so the swap allocates nothing.
        let bump = std::mem::replace(&mut self.bump, Bump::new());
        self.pool.put_back(bump);
    }
}

impl fmt::Debug for PooledArena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledArena")
            .field("allocated_bytes", &self.allocated_bytes())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn pool_and_arena_cross_threads() {
        assert_send_sync::<ArenaPool>();
        fn assert_send<T: Send>() {}
        assert_send::<PooledArena>();
    }

    #[test]
    fn arenas_are_reset_and_reused() {
        let pool = ArenaPool::new(4, 1 << 20);
        {
            let arena = pool.get();
            arena.alloc_slice_fill_copy(1000, 1u8);
            assert!(arena.allocated_bytes() >= 1000);
        }
        assert_eq!(pool.idle(), 1);
        assert!(pool.retained_bytes() >= 1000);
        let mut arena = pool.get();
        assert_eq!(pool.idle(), 0);
        assert_eq!(pool.retained_bytes(), 0);
        // Reset: nothing allocated in the reused arena's chunks.
        assert_eq!(arena.iter_allocated_chunks().map(|c| c.len()).sum::<usize>(), 0);
        drop(arena);
        assert_eq!(pool.arenas_dropped(), 0);
    }

    #[test]
    fn idle_arenas_together_stay_within_twice_the_cap() {
        let pool = ArenaPool::new(64, 1 << 20);
        let held: Vec<PooledArena> = (0..8)
            .map(|_| {
                let arena = pool.get();
                arena.alloc_slice_fill_copy(600 << 10, 0u8);
                arena
            })
            .collect();
        drop(held);
        assert!(pool.retained_bytes() <= 2 << 20, "{}", pool.retained_bytes());
        assert!(pool.idle() >= 1 && pool.idle() < 8, "{}", pool.idle());
        assert_eq!(pool.arenas_dropped() as usize + pool.idle(), 8);
        let small = ArenaPool::new(64, 1 << 20);
        let many: Vec<PooledArena> = (0..32)
            .map(|_| {
                let arena = small.get();
                arena.alloc_slice_fill_copy(1000, 0u8);
                arena
            })
            .collect();
        drop(many);
        assert_eq!(small.idle(), 32, "small arenas all fit the budget");
    }

    #[test]
    fn oversized_arenas_are_dropped() {
        let pool = ArenaPool::new(4, 64 << 10);
        {
            let arena = pool.get();
            arena.alloc_slice_fill_copy(1 << 20, 0u8);
        }
        assert_eq!(pool.arenas_dropped(), 1);
        assert_eq!(pool.idle(), 0);
        assert_eq!(pool.retained_bytes(), 0);
    }

    #[test]
    fn pool_size_is_capped() {
        let pool = ArenaPool::new(2, 1 << 20);
        let arenas: Vec<_> = (0..3).map(|_| pool.get()).collect();
        drop(arenas);
        assert_eq!(pool.idle(), 2);
        assert_eq!(pool.arenas_dropped(), 1);
    }
}
