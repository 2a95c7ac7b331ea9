//! The background loop over every tenant: rate snapshots, compaction ticks (idle heads compacted whole, idle
//! tenants closed, expired metric metadata dropped), shipping and retention (see `crate::blocks` for what each does to one tenant).

use super::Ingester;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

impl Ingester {
    /// The background loop: compaction ticks, idle-head compaction, shipping and retention, until `stop`.
    pub async fn run_blocks_loop(self: Arc<Self>, stop: CancellationToken) {
        let mut compact_tick = tokio::time::interval(self.tsdb.head_compaction_interval);
        compact_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shipping = !self.tsdb.ship_interval.is_zero() && self.bucket.is_some();
        // Without shipping still tick (rarely) so the select below stays simple.
        let ship_every = if shipping {
            self.tsdb.ship_interval
        } else {
            Duration::from_secs(3600)
        };
        let mut ship_tick = tokio::time::interval(ship_every);
        ship_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut rate_tick = tokio::time::interval(crate::rates::RATE_TICK);
        rate_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let range = self.tsdb.block_range_ms();
        let metrics = &self.metrics.blocks;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = rate_tick.tick() => {
                    let now = Instant::now();
                    for tenant in self.all_tenants() {
                        tenant.observe_rate(now);
                    }
                }
                _ = compact_tick.tick() => {
                    if !self.is_running() { continue; }
                    for tenant in self.all_tenants() {
                        let force = tenant.idle(self.tsdb.head_compaction_idle_timeout, Instant::now());
                        if let Err(e) = crate::blocks::compact(&tenant, range, metrics, force).await {
                            tracing::error!(tenant = %tenant.id(), error = %e, "head compaction failed; retrying on the next tick");
                        }
                    }
                    self.close_idle_tenants().await;
                    self.purge_metadata();
                }
                _ = ship_tick.tick() => {
                    if !self.is_running() || !shipping { continue; }
                    for tenant in self.all_tenants() {
                        if let Err(e) = crate::blocks::ship(&tenant, metrics).await {
                            tracing::warn!(tenant = %tenant.id(), error = %e, "shipping blocks failed; retrying on the next tick");
                        }
                        crate::blocks::delete_expired(&tenant, self.tsdb.retention_period, self.shipped_blocks_grace(), metrics).await;
                    }
                }
            }
        }
    }
}
