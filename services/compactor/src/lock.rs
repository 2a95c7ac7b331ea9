//! One compactor per tenant at a time: a lease object in the tenant's prefix, `<tenant>/compactor.lock`,
//! created with a conditional PUT (`If-None-Match: *` on S3, an exclusive create on a filesystem bucket).
//!
//! Why a lock in the bucket rather than sharding tenants over a ring: compactors need nothing else from a ring
//! (they serve no requests), the bucket is the one thing every compactor already shares, and a lock stays
//! right when compactors come and go, where a ring hands a tenant to its new owner while the old one may still
//! be compacting it.
//!
//! The lock saves work; correctness does not depend on it. Two compactors that both compact a group (a lease
//! taken over from a holder that was only slow) upload two blocks with the same sources; the next pass marks
//! the one with the larger ULID as superseded (`planner::superseded`), and a querier merging both meanwhile
//! returns each sample once. So the lease can be short and be taken over once it runs out: a compactor that
//! died holding it delays its tenants by one lease at most.

use bytes::Bytes;
use heddle_bucket::{Bucket, BucketError};
use heddle_model::TenantId;
use serde::{Deserialize, Serialize};

/// Object name of the lock inside the tenant's prefix.
pub const LOCK_FILENAME: &str = "compactor.lock";

#[derive(Debug, Serialize, Deserialize)]
struct LockBody {
    holder: String,
    /// Unix milliseconds after which another compactor may take the lock.
    expires_at_ms: i64,
}

/// A tenant's lock, held until [`TenantLock::release`].
#[derive(Debug)]
pub(crate) struct TenantLock {
    bucket: Bucket,
    tenant: TenantId,
    holder: String,
    lease_ms: i64,
}

impl TenantLock {
    /// Takes the tenant's lock for `holder` (a name stable across restarts, so a compactor that restarts
    /// takes its own lock back at once), or `None` while another holder's lease runs.
    pub(crate) async fn acquire(
        bucket: &Bucket,
        tenant: &TenantId,
        holder: &str,
        lease_ms: i64,
        now_ms: i64,
    ) -> Result<Option<Self>, BucketError> {
        let lock = Self::held(bucket, tenant, holder, lease_ms);
        // Two attempts: the second after removing a lock that ran out, was ours, or vanished meanwhile.
        for _ in 0..2 {
            if bucket
                .create_tenant_object(tenant, LOCK_FILENAME, lock.body(now_ms))
                .await?
            {
                return Ok(Some(lock));
            }
            match bucket.get_tenant_object(tenant, LOCK_FILENAME).await? {
                None => continue,
                Some(bytes) => match serde_json::from_slice::<LockBody>(&bytes) {
                    Ok(b) if b.holder != holder && b.expires_at_ms > now_ms => {
                        tracing::debug!(tenant = %tenant, holder = %b.holder, "tenant locked by another compactor");
                        return Ok(None);
                    }
                    Ok(b) => {
                        tracing::info!(tenant = %tenant, holder = %b.holder, "taking over the tenant's lock");
                    }
                    Err(e) => tracing::warn!(tenant = %tenant, error = %e, "replacing an unreadable tenant lock"),
                },
            }
            bucket.delete_tenant_object(tenant, LOCK_FILENAME).await?;
        }
        Ok(None)
    }

    /// The handle of a lock `holder` took earlier for `tenant`, to release it ([`TenantLock::release`] removes
    /// it only if it is still `holder`'s).
    pub(crate) fn held(bucket: &Bucket, tenant: &TenantId, holder: &str, lease_ms: i64) -> Self {
        Self {
            bucket: bucket.clone(),
            tenant: tenant.clone(),
            holder: holder.to_owned(),
            lease_ms,
        }
    }

    fn body(&self, now_ms: i64) -> Bytes {
        let body = LockBody {
            holder: self.holder.clone(),
            expires_at_ms: now_ms.saturating_add(self.lease_ms),
        };
        Bytes::from(serde_json::to_vec(&body).expect("lock serializes"))
    }

    /// Extends the lease from `now_ms`.
    pub(crate) async fn renew(&self, now_ms: i64) -> Result<(), BucketError> {
        self.bucket
            .put_tenant_object(&self.tenant, LOCK_FILENAME, self.body(now_ms))
            .await
    }

    /// Removes the lock if it is still ours (after a takeover it is not, and stays).
    pub(crate) async fn release(self) -> Result<(), BucketError> {
        let ours = match self.bucket.get_tenant_object(&self.tenant, LOCK_FILENAME).await? {
            Some(bytes) => serde_json::from_slice::<LockBody>(&bytes).is_ok_and(|b| b.holder == self.holder),
            None => false,
        };
        if ours {
            self.bucket.delete_tenant_object(&self.tenant, LOCK_FILENAME).await?;
        }
        Ok(())
    }
}
