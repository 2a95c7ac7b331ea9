//! One compactor per tenant at a time: a lease in the tenant's prefix, kept as a sequence of numbered objects
//! `<tenant>/compactor-lock/<generation>` (20 digits), each created once with a create-only PUT
//! (`If-None-Match: *` on S3, a hard link on a filesystem bucket) and never overwritten.
//!
//! Why a lock in the bucket rather than sharding tenants over a ring: compactors need nothing else from a ring
//! (they serve no requests), the bucket is the one thing every compactor already shares, and a lock stays
//! right when compactors come and go, where a ring hands a tenant to its new owner while the old one may still
//! be compacting it.
//!
//! Why numbered objects rather than one object updated in place: the holder must prove it still owns the lock
//! when it renews or releases it, or a compactor whose lease ran out (a long merge, a paused VM) would extend
//! or delete its successor's lease. One object would need a conditional overwrite (`If-Match` on an ETag) and a
//! conditional delete; `object_store`'s filesystem store implements neither, S3 compatible stores differ in
//! both, and s3s-fs, which the tests run, has no conditional delete. A create-only PUT is what every backend
//! has, so the lock uses only that, a listing and deletes:
//! - the lock is the object with the highest generation; its body names the holder and when the lease ends;
//! - taking it (free, released, run out, or the holder's own after a restart) and renewing it are the same
//!   step: create generation `top + 1`. Only one compactor can create it; a holder whose lease was taken
//!   over finds it exists and knows it lost the lock, without writing anything;
//! - after a create the holder lists the generations: one higher than its own means it lost (its number was
//!   free again only because the successor has since moved past it and deleted it), and it deletes only its
//!   own object;
//! - a compactor deletes a generation only while a higher one is in the listing it just made. So the highest
//!   generation never disappears, and a number is only ever re-created below the highest, where it holds
//!   nothing;
//! - releasing creates `top + 1` with a lease that ended at the epoch (free to take at once) instead of
//!   deleting the lock: an empty sequence would let a compactor that lapsed long ago start again from a low
//!   number above nothing.
//!
//! The lock saves work; correctness does not depend on it. Two compactors that both compact a group (a lease
//! taken over from a holder that was only slow, or an older compactor during a rolling upgrade that still uses
//! `compactor.lock`) upload two blocks with the same sources; the next pass marks the one with the larger ULID
//! as superseded (`planner::superseded`), and a querier merging both meanwhile returns each sample once. So the
//! lease can be short and be taken over once it runs out: a compactor that died holding it delays its tenants
//! by one lease at most.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use heddle_bucket::{Bucket, BucketError};
use heddle_model::TenantId;
use serde::{Deserialize, Serialize};

/// The folder of the lock's generations inside the tenant's prefix.
pub const LOCK_DIR: &str = "compactor-lock";

/// How often `acquire` looks again when the generation it read vanished meanwhile (a holder moved on).
const ACQUIRE_ATTEMPTS: usize = 3;

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct LockBody {
    holder: String,
    /// Unix milliseconds after which another compactor may take the lock; 0 once released.
    expires_at_ms: i64,
}

/// The object name of `generation`: zero-padded, so names sort as numbers do.
fn object_name(generation: u64) -> String {
    format!("{LOCK_DIR}/{generation:020}")
}

/// A tenant's lock, held until [`TenantLock::release`] or until a renewal finds it lost.
#[derive(Debug)]
pub(crate) struct TenantLock {
    bucket: Bucket,
    tenant: TenantId,
    holder: String,
    lease_ms: i64,
    /// The generation this holder created last.
    generation: AtomicU64,
}

impl TenantLock {
    /// Takes the tenant's lock for `holder` (a name stable across restarts, so a compactor that restarts
    /// takes its own lock back at once), or `None` while another holder's lease runs (or another compactor
    /// took it at the same moment).
    pub(crate) async fn acquire(
        bucket: &Bucket,
        tenant: &TenantId,
        holder: &str,
        lease_ms: i64,
        now_ms: i64,
    ) -> Result<Option<Self>, BucketError> {
        for _ in 0..ACQUIRE_ATTEMPTS {
            let generations = list_generations(bucket, tenant).await?;
            let next = match generations.last() {
                None => 1,
                Some(&top) => match bucket.get_tenant_object(tenant, &object_name(top)).await? {
                    // Moved past and cleaned up since the listing: look again.
                    None => continue,
                    Some(bytes) => {
                        match serde_json::from_slice::<LockBody>(&bytes) {
                            Ok(b) if b.holder != holder && b.expires_at_ms > now_ms => {
                                tracing::debug!(tenant = %tenant, holder = %b.holder, "tenant locked by another compactor");
                                return Ok(None);
                            }
                            Ok(b) if b.expires_at_ms > 0 && b.holder != holder => {
                                tracing::info!(tenant = %tenant, holder = %b.holder, "taking over the tenant's lock: its lease ran out");
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(tenant = %tenant, generation = top, error = %e, "taking over an unreadable tenant lock")
                            }
                        }
                        top + 1
                    }
                },
            };
            let lock = Self {
                bucket: bucket.clone(),
                tenant: tenant.clone(),
                holder: holder.to_owned(),
                lease_ms,
                generation: AtomicU64::new(0),
            };
            return Ok(lock.advance(next, lock.body(now_ms)).await?.then_some(lock));
        }
        Ok(None)
    }

    fn body(&self, now_ms: i64) -> LockBody {
        LockBody {
            holder: self.holder.clone(),
            expires_at_ms: now_ms.saturating_add(self.lease_ms),
        }
    }

    /// Creates generation `next` with `body` and checks that it is the highest; on success it is this holder's
    /// generation and every lower one is deleted. `false` when another compactor created `next` first or a
    /// higher generation exists (then this holder's own `next` is deleted again, nothing else).
    async fn advance(&self, next: u64, body: LockBody) -> Result<bool, BucketError> {
        let name = object_name(next);
        let bytes = Bytes::from(serde_json::to_vec(&body).expect("lock serializes"));
        if !self.bucket.create_tenant_object(&self.tenant, &name, bytes).await? {
            // A create retried after a lost answer finds its own first attempt: the same body is ours.
            let existing = self.bucket.get_tenant_object(&self.tenant, &name).await?;
            let ours = existing.is_some_and(|b| serde_json::from_slice::<LockBody>(&b).is_ok_and(|b| b == body));
            if !ours {
                return Ok(false);
            }
        }
        let generations = list_generations(&self.bucket, &self.tenant).await?;
        let top = generations.last().copied().unwrap_or(next).max(next);
        if top > next {
            // `next` was free only because a successor had moved past it: the lock is the successor's.
            tracing::info!(tenant = %self.tenant, generation = next, newer = top, "the tenant's lock moved on without us");
            self.bucket.delete_tenant_object(&self.tenant, &name).await?;
            return Ok(false);
        }
        self.generation.store(next, Ordering::Release);
        for older in generations.into_iter().filter(|g| *g < next) {
            self.bucket
                .delete_tenant_object(&self.tenant, &object_name(older))
                .await?;
        }
        Ok(true)
    }

    /// Extends the lease from `now_ms`; `false` when the lock is no longer this holder's (its lease ran out and
    /// another compactor took it over): then nothing of the successor's was written or deleted.
    pub(crate) async fn renew(&self, now_ms: i64) -> Result<bool, BucketError> {
        let next = self.generation.load(Ordering::Acquire) + 1;
        self.advance(next, self.body(now_ms)).await
    }

    /// Frees the lock for the next compactor, if it is still ours (after a takeover it is not, and the
    /// successor's stays as it is).
    pub(crate) async fn release(&self) -> Result<(), BucketError> {
        let next = self.generation.load(Ordering::Acquire) + 1;
        let released = LockBody {
            holder: self.holder.clone(),
            expires_at_ms: 0,
        };
        if !self.advance(next, released).await? {
            tracing::info!(tenant = %self.tenant, "the tenant's lock was taken over; left to its new holder");
        }
        Ok(())
    }

    /// The tenant this lock is of.
    pub(crate) fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The generation this holder created last (tests).
    #[cfg(test)]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// The tenant's lock generations, ascending; names that are not generations are ignored.
async fn list_generations(bucket: &Bucket, tenant: &TenantId) -> Result<Vec<u64>, BucketError> {
    let mut generations: Vec<u64> = bucket
        .list_tenant_dir(tenant, LOCK_DIR)
        .await?
        .iter()
        .filter(|n| n.len() == 20)
        .filter_map(|n| n.parse().ok())
        .collect();
    generations.sort_unstable();
    Ok(generations)
}

#[cfg(test)]
mod tests;
