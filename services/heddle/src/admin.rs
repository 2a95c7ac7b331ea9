//! The operator API: `heddle.admin.v1.Admin` over gRPC and Mimir's `/ingester/*` HTTP endpoints, both backed
//! by one [`AdminCore`] so they cannot drift apart.
//!
//! Security, one rule for both protocols: with `--server.admin-token-file` every admin call on every listener
//! needs the token ([`AdminToken`]); with `--server.admin-grpc-listen-port` admin calls (gRPC and HTTP) are
//! served only on that listener and the public ports refuse them ([`AdminAccess`], [`serve_grpc`]).

mod auth;
mod error;
mod grpc;
mod http;
mod ring;
mod serve;

pub use auth::AdminToken;
pub use error::AdminError;
pub use grpc::AdminGrpc;
pub use http::{AdminAccess, router as http_router};
pub use ring::{LocalRing, MemberStatus, MembershipRing, RingAdmin};
pub use serve::{GrpcApis, serve_grpc};

use heddle_ingester::{Ingester, TenantStats};
use heddle_model::TenantId;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;

/// What a flush did, for both APIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushOutcome {
    /// Tenants flushed (or being flushed, when not waited for).
    pub tenants: Vec<String>,
    pub message: String,
}

/// The shared implementation of every admin call.
#[derive(Debug)]
pub struct AdminCore {
    ingester: Option<Arc<Ingester>>,
    ring: Arc<dyn RingAdmin>,
    stop: CancellationToken,
    /// Set by PrepareShutdown: the next shutdown leaves the ring and flushes first.
    prepared: AtomicBool,
    target: String,
}

impl AdminCore {
    /// `stop` is the process's shutdown token: Shutdown cancels it, as SIGTERM does.
    pub fn new(
        ingester: Option<Arc<Ingester>>,
        ring: Arc<dyn RingAdmin>,
        stop: CancellationToken,
        target: impl Into<String>,
    ) -> Arc<Self> {
        Arc::new(Self {
            ingester,
            ring,
            stop,
            prepared: AtomicBool::new(false),
            target: target.into(),
        })
    }

    fn ingester(&self, call: &'static str) -> Result<&Arc<Ingester>, AdminError> {
        self.ingester.as_ref().ok_or_else(|| AdminError::NoIngester {
            target: self.target.clone(),
            call,
        })
    }

    /// The ring members.
    pub async fn ring_status(&self) -> (Vec<MemberStatus>, &'static str) {
        (self.ring.status().await, self.ring.backend())
    }

    /// Forgets a ring member.
    pub async fn forget(&self, id: &str) -> Result<(), AdminError> {
        self.ring.forget(id).await?;
        tracing::info!(member = id, "forgot ring member on operator request");
        Ok(())
    }

    /// Flushes the named tenants (all when empty). Without `wait` the flush runs in the background and the
    /// call returns the tenants it will flush.
    pub async fn flush(&self, tenants: &[String], wait: bool) -> Result<FlushOutcome, AdminError> {
        let ing = self.ingester("Flush")?.clone();
        let ids = parse_tenants(tenants)?;
        if !wait {
            let planned: Vec<String> = if ids.is_empty() {
                ing.tenants().iter().map(|t| t.to_string()).collect()
            } else {
                ids.iter().map(|t| t.to_string()).collect()
            };
            tokio::spawn(async move {
                if let Err(e) = ing.flush(&ids).await {
                    tracing::error!(error = %e, "background flush failed");
                }
            });
            return Ok(FlushOutcome {
                tenants: planned,
                message: "flush started in the background (pass wait to block until it is done): each tenant's \
                          head is compacted into blocks and shipped to the bucket"
                    .into(),
            });
        }
        let report = ing.flush(&ids).await.map_err(|e| AdminError::Flush(e.to_string()))?;
        Ok(FlushOutcome {
            message: format!(
                "compacted the heads of {} tenant(s) into {} block(s); {} block(s) uploaded to the bucket",
                report.tenants.len(),
                report.blocks_written,
                report.blocks_shipped
            ),
            tenants: report.tenants.iter().map(|t| t.to_string()).collect(),
        })
    }

    /// Makes the data durable now. The head writes chunk snapshots only when it closes (`close_with_snapshot`
    /// on shutdown), so this syncs the WAL (replay after a restart reads it) and says so.
    pub async fn snapshot(&self, tenants: &[String]) -> Result<FlushOutcome, AdminError> {
        let ing = self.ingester("Snapshot")?;
        let ids = parse_tenants(tenants)?;
        let report = ing.flush(&ids).await.map_err(|e| AdminError::Flush(e.to_string()))?;
        Ok(FlushOutcome {
            message: format!(
                "the head writes chunk snapshots only while closing (on shutdown, with \
                 --blocks-storage.tsdb.memory-snapshot-on-shutdown); synced the WAL and chunks_head of {} \
                 tenant(s) instead, which a restart replays",
                report.tenants.len()
            ),
            tenants: report.tenants.iter().map(|t| t.to_string()).collect(),
        })
    }

    /// Sets (or with `false` reverts) "leave the ring and flush on the next shutdown".
    pub fn set_prepared(&self, prepared: bool) {
        self.prepared.store(prepared, Ordering::Release);
        tracing::info!(prepared, "prepare-shutdown changed on operator request");
    }

    /// Whether the next shutdown leaves the ring and flushes.
    pub fn is_prepared(&self) -> bool {
        self.prepared.load(Ordering::Acquire)
    }

    /// Starts a graceful stop of the whole process (as SIGTERM), after marking it prepared as Mimir's
    /// `/ingester/shutdown` does (leave the ring, flush).
    pub fn shutdown(&self) -> Result<(), AdminError> {
        if self.stop.is_cancelled() {
            return Err(AdminError::ShuttingDown);
        }
        self.set_prepared(true);
        tracing::info!("shutdown requested through the admin API");
        self.stop.cancel();
        Ok(())
    }

    /// Called by `run` once the servers stopped: when prepared, leave the ring and flush every tenant.
    pub async fn on_shutdown(&self) {
        if !self.is_prepared() {
            return;
        }
        if let Err(e) = self.ring.leave().await {
            tracing::warn!(error = %e, "could not leave the ring on shutdown");
        }
        if let Some(ing) = &self.ingester
            && let Err(e) = ing.flush(&[]).await
        {
            tracing::error!(error = %e, "flush on shutdown failed");
        }
    }

    /// The tenants with a head on this ingester.
    pub fn tenants(&self) -> Result<Vec<String>, AdminError> {
        Ok(self
            .ingester("ListTenants")?
            .tenants()
            .iter()
            .map(|t| t.to_string())
            .collect())
    }

    /// One tenant's statistics.
    pub async fn tenant_stats(&self, tenant: &str) -> Result<TenantStats, AdminError> {
        let ing = self.ingester("TenantStats")?;
        let id = parse_tenant(tenant)?;
        ing.tenant_stats(&id)
            .await
            .ok_or_else(|| AdminError::UnknownTenant { tenant: tenant.into() })
    }

    /// `--target` of this process.
    pub fn target(&self) -> &str {
        &self.target
    }
}

fn parse_tenant(t: &str) -> Result<TenantId, AdminError> {
    TenantId::new(t).map_err(|e| AdminError::InvalidTenant {
        tenant: t.into(),
        reason: e.to_string(),
    })
}

fn parse_tenants(tenants: &[String]) -> Result<Vec<TenantId>, AdminError> {
    tenants.iter().map(|t| parse_tenant(t)).collect()
}

/// Build facts baked in by `build.rs`.
pub mod build {
    /// The crate version.
    pub const VERSION: &str = env!("CARGO_PKG_VERSION");
    /// `git rev-parse HEAD` at build time, or "unknown".
    pub const GIT_COMMIT: &str = env!("HEDDLE_GIT_COMMIT");
    /// `rustc --version` at build time.
    pub const RUSTC: &str = env!("HEDDLE_RUSTC_VERSION");
}
