//! One tenant on this ingester: its head, its local blocks, its shipper, its series admission and its rate,
//! opened as one unit (local blocks, then the head's replay, then the admission hook on the head). Closing it
//! closes the head (WAL flushed and synced, optionally a chunk snapshot); its local blocks are read-only mapped
//! files and its shipper holds nothing open, so they go when the `Tenant` is dropped.
//!
//! The ingester keeps one map of these; every per-tenant path (push, reads, blocks, admin) takes a `&Tenant`.
//! What a tenant needs that is not its own (configuration, metrics, the instance limits) is passed in by the
//! caller. Closing an idle tenant for good ([`Tenant::closable`]) is [`Tenant::close`] and dropping it from the
//! map (its head is empty by then, so `heddle_ingester_memory_series` holds none of its series), taking it off
//! `heddle_ingester_tenants`; its rate, activity and block upload times go with it.

use crate::limits::SeriesAdmission;
use crate::local_blocks::LocalBlocks;
use crate::metadata::TenantMetadata;
use crate::rates::TenantRate;
use heddle_bucket::{Bucket, Shipper};
use heddle_model::TenantId;
use heddle_tsdb::block::BlockReader;
use heddle_tsdb::{Head, HeadOptions, ReplayStats, TsdbError};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A tenant's state on this ingester.
#[derive(Debug)]
pub(crate) struct Tenant {
    id: TenantId,
    head: Arc<Head>,
    /// Shared with the head's compaction, which adds the blocks it writes before truncating the head.
    blocks: Arc<LocalBlocks>,
    /// Where its blocks go; `None` when shipping is off.
    shipper: Option<Shipper>,
    /// The head's series lifecycle hook (kept for tests and diagnostics; the head holds it too).
    #[cfg_attr(not(test), allow(dead_code))]
    admission: Arc<SeriesAdmission>,
    rate: TenantRate,
    /// Metric metadata, in memory only.
    metadata: TenantMetadata,
    /// Samples appended when the blocks loop last saw the count change, and when: for idle compaction.
    activity: Mutex<Option<(u64, Instant)>>,
    /// When this process saw each block reach the bucket (at the end of a ship, or when a read first found
    /// it in the shipper's list, whichever came first).
    shipped_at: Mutex<HashMap<String, Instant>>,
    /// Blocks `shipper.json` listed when the tenant was opened: they count as shipped at `opened`.
    shipped_before_open: BTreeSet<String>,
    opened: Instant,
    /// When the last push reached this tenant (its opening, before the first): for closing idle tenants.
    last_push: Mutex<Instant>,
}

impl Tenant {
    /// Opens the tenant stored in `dir` (an empty one if missing): deletes half-written blocks and opens the
    /// others, replays the head from the end of the newest block on, and installs `admission` on it (the
    /// replayed series are counted, never refused). Blocking: run it off the async runtime.
    pub(crate) fn open(
        id: TenantId,
        dir: PathBuf,
        mut opts: HeadOptions,
        bucket: Option<Bucket>,
        admission: Arc<SeriesAdmission>,
    ) -> Result<(Tenant, ReplayStats), TsdbError> {
        let (blocks, newest_end) = LocalBlocks::open(&dir)?;
        opts.min_valid_time = opts.min_valid_time.max(newest_end);
        let (head, stats) = Head::open(&dir, opts)?;
        head.set_series_lifecycle(admission.clone());
        let shipper = bucket.map(|b| Shipper::new(id.clone(), dir, b));
        let shipped_before_open = shipper.as_ref().map(Shipper::shipped).unwrap_or_default();
        let tenant = Tenant {
            id,
            head: Arc::new(head),
            blocks: Arc::new(blocks),
            shipper,
            admission,
            rate: TenantRate::default(),
            metadata: TenantMetadata::default(),
            activity: Mutex::new(None),
            shipped_at: Mutex::new(HashMap::new()),
            shipped_before_open,
            opened: Instant::now(),
            last_push: Mutex::new(Instant::now()),
        };
        Ok((tenant, stats))
    }

    /// Closes the head (flushing and syncing its WAL), first writing a chunk snapshot when `snapshot`; returns
    /// the series in the snapshot. Reads keep working. Blocking.
    pub(crate) fn close(&self, snapshot: bool) -> Result<Option<u64>, TsdbError> {
        if snapshot {
            self.head.close_with_snapshot().map(|s| s.map(|s| s.series))
        } else {
            self.head.close().map(|()| None)
        }
    }

    pub(crate) fn id(&self) -> &TenantId {
        &self.id
    }

    pub(crate) fn head(&self) -> &Arc<Head> {
        &self.head
    }

    pub(crate) fn blocks(&self) -> &Arc<LocalBlocks> {
        &self.blocks
    }

    pub(crate) fn shipper(&self) -> Option<&Shipper> {
        self.shipper.as_ref()
    }

    pub(crate) fn rate(&self) -> &TenantRate {
        &self.rate
    }

    pub(crate) fn metadata(&self) -> &TenantMetadata {
        &self.metadata
    }

    #[cfg(test)]
    pub(crate) fn admission(&self) -> &SeriesAdmission {
        &self.admission
    }

    /// The local blocks a query of `[mint, maxt]` reads here: those overlapping it that are not in the bucket,
    /// or reached it less than `grace` ago. A shipped block is the querier's to read from the bucket; answering
    /// it here too would read it twice. `grace` covers the querier's block list refresh: until it lists the
    /// block, the ingester still answers it, so no sample goes missing in between.
    ///
    /// Also returns the ULIDs of the overlapping blocks left to the bucket, sorted: the read's answer names
    /// them, so the querier can check that it read each of them (or a block compacted from it) from the bucket
    /// instead of trusting that its list caught up within `grace`.
    pub(crate) fn queryable_blocks(
        &self,
        mint: i64,
        maxt: i64,
        grace: Duration,
    ) -> (Vec<Arc<BlockReader>>, Vec<String>) {
        let skip = self.left_to_bucket(grace);
        (
            self.blocks.overlapping(mint, maxt, &skip),
            self.blocks.overlapping_of(mint, maxt, &skip),
        )
    }

    /// The shipped blocks that reached the bucket at least `grace` ago: reads leave them to the querier.
    fn left_to_bucket(&self, grace: Duration) -> BTreeSet<String> {
        let Some(shipper) = &self.shipper else {
            return BTreeSet::new();
        };
        let mut skip = shipper.shipped();
        if !grace.is_zero() {
            let now = Instant::now();
            let mut shipped_at = self.shipped_at.lock().unwrap_or_else(|p| p.into_inner());
            skip.retain(|ulid| {
                let since = match shipped_at.get(ulid) {
                    Some(at) => *at,
                    None if self.shipped_before_open.contains(ulid) => self.opened,
                    // Listed by a ship that is still uploading other blocks (its end notes the time): the
                    // block reached the bucket just now, so the querier may not list it yet.
                    None => *shipped_at.entry(ulid.clone()).or_insert(now),
                };
                now.saturating_duration_since(since) >= grace
            });
        }
        skip
    }

    /// The shipped blocks that reads still answer here (reached the bucket less than `grace` ago): the local
    /// retention keeps them even when they are past it, so no block leaves this ingester before a querier's
    /// list can hold it.
    pub(crate) fn still_answered(&self, grace: Duration) -> BTreeSet<String> {
        let Some(shipper) = &self.shipper else {
            return BTreeSet::new();
        };
        let left = self.left_to_bucket(grace);
        shipper.shipped().into_iter().filter(|u| !left.contains(u)).collect()
    }

    /// Notes that `ulids` reached the bucket now (see [`Tenant::queryable_blocks`]); a block a read already
    /// found in the shipper's list keeps that earlier time.
    pub(crate) fn note_shipped(&self, ulids: impl IntoIterator<Item = String>) {
        let now = Instant::now();
        let mut shipped_at = self.shipped_at.lock().unwrap_or_else(|p| p.into_inner());
        for u in ulids {
            shipped_at.entry(u).or_insert(now);
        }
    }

    /// Forgets the upload times of blocks deleted from disk.
    pub(crate) fn forget_shipped(&self, ulids: &[String]) {
        let mut shipped_at = self.shipped_at.lock().unwrap_or_else(|p| p.into_inner());
        for u in ulids {
            shipped_at.remove(u);
        }
    }

    /// Notes that a push reached the tenant now.
    pub(crate) fn note_push(&self) {
        *self.last_push.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Why the tenant may not be closed as idle at `now` after `timeout` without a push, or `Ok` when it may:
    /// no push for that long, an empty head (the idle compaction wrote its samples into blocks), and every
    /// local block in the bucket (with shipping off: no local block, since this is its only copy).
    pub(crate) fn closable(&self, timeout: Duration, now: Instant) -> Result<(), &'static str> {
        let last_push = *self.last_push.lock().unwrap_or_else(|p| p.into_inner());
        if timeout.is_zero() || now.saturating_duration_since(last_push) < timeout {
            return Err("pushed to recently");
        }
        if self.head.stats().series > 0 {
            return Err("head not empty");
        }
        let unshipped = match &self.shipper {
            Some(shipper) => self.blocks.count_unshipped(&shipper.shipped()),
            None => self.blocks.len(),
        };
        if unshipped > 0 {
            return Err("blocks not shipped");
        }
        Ok(())
    }

    /// Records the head's appended-sample count for the rate.
    pub(crate) fn observe_rate(&self, now: Instant) {
        self.rate.observe(now, self.head.stats().samples_appended);
    }

    /// Whether the head has samples and received none for `timeout` (0: never idle), as seen by successive
    /// calls (the blocks loop's ticks).
    pub(crate) fn idle(&self, timeout: Duration, now: Instant) -> bool {
        let stats = self.head.stats();
        let mut activity = self.activity.lock().unwrap_or_else(|p| p.into_inner());
        let entry = activity.get_or_insert((stats.samples_appended, now));
        if entry.0 != stats.samples_appended {
            *entry = (stats.samples_appended, now);
            return false;
        }
        let has_samples = stats.max_time.is_some_and(|t| t >= self.head.min_valid_time());
        !timeout.is_zero() && has_samples && now.duration_since(entry.1) >= timeout
    }
}
