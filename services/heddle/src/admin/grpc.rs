//! `heddle.admin.v1.Admin`: the gRPC face of [`AdminCore`].

use super::{AdminCore, build};
use heddle_proto::admin as pb;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The gRPC Admin service.
#[derive(Debug, Clone)]
pub struct AdminGrpc(pub Arc<AdminCore>);

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminGrpc {
    #[tracing::instrument(skip_all)]
    async fn ring_status(&self, _: Request<pb::RingStatusRequest>) -> Result<Response<pb::RingStatusResponse>, Status> {
        let (members, backend) = self.0.ring_status().await;
        Ok(Response::new(pb::RingStatusResponse {
            members: members
                .into_iter()
                .map(|m| pb::RingMember {
                    id: m.id,
                    state: m.state,
                    zone: m.zone,
                    address: m.address,
                    tokens: m.tokens,
                    ownership_percent: m.ownership_percent,
                    heartbeat_age_ms: m.heartbeat_age_ms,
                })
                .collect(),
            backend: backend.into(),
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn forget_member(
        &self,
        req: Request<pb::ForgetMemberRequest>,
    ) -> Result<Response<pb::ForgetMemberResponse>, Status> {
        let id = req.into_inner().id;
        self.0.forget(&id).await?;
        Ok(Response::new(pb::ForgetMemberResponse {
            message: format!("forgot ring member {id}"),
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn flush(&self, req: Request<pb::FlushRequest>) -> Result<Response<pb::FlushResponse>, Status> {
        let req = req.into_inner();
        let out = self.0.flush(&req.tenants, req.wait).await?;
        Ok(Response::new(pb::FlushResponse {
            tenants: out.tenants,
            message: out.message,
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn prepare_shutdown(
        &self,
        _: Request<pb::PrepareShutdownRequest>,
    ) -> Result<Response<pb::PrepareShutdownResponse>, Status> {
        self.0.set_prepared(true);
        Ok(Response::new(pb::PrepareShutdownResponse { prepared: true }))
    }

    #[tracing::instrument(skip_all)]
    async fn cancel_prepare_shutdown(
        &self,
        _: Request<pb::CancelPrepareShutdownRequest>,
    ) -> Result<Response<pb::PrepareShutdownResponse>, Status> {
        self.0.set_prepared(false);
        Ok(Response::new(pb::PrepareShutdownResponse { prepared: false }))
    }

    #[tracing::instrument(skip_all)]
    async fn shutdown(&self, _: Request<pb::ShutdownRequest>) -> Result<Response<pb::ShutdownResponse>, Status> {
        self.0.shutdown()?;
        Ok(Response::new(pb::ShutdownResponse {
            message: "graceful shutdown started: the process leaves the ring, flushes and exits".into(),
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn snapshot(&self, req: Request<pb::SnapshotRequest>) -> Result<Response<pb::SnapshotResponse>, Status> {
        let out = self.0.snapshot(&req.into_inner().tenants).await?;
        Ok(Response::new(pb::SnapshotResponse {
            tenants: out.tenants,
            message: out.message,
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn list_tenants(
        &self,
        _: Request<pb::ListTenantsRequest>,
    ) -> Result<Response<pb::ListTenantsResponse>, Status> {
        Ok(Response::new(pb::ListTenantsResponse {
            tenants: self.0.tenants()?,
        }))
    }

    #[tracing::instrument(skip_all, fields(tenant))]
    async fn tenant_stats(
        &self,
        req: Request<pb::TenantStatsRequest>,
    ) -> Result<Response<pb::TenantStatsResponse>, Status> {
        let tenant = req.into_inner().tenant;
        tracing::Span::current().record("tenant", tenant.as_str());
        let s = self.0.tenant_stats(&tenant).await?;
        Ok(Response::new(pb::TenantStatsResponse {
            tenant: s.tenant.to_string(),
            series: s.series,
            samples_appended: s.samples_appended,
            head_min_time_ms: s.min_time_ms,
            head_max_time_ms: s.max_time_ms,
            wal_bytes: s.wal_bytes,
            wal_segments: s.wal_segments,
            samples_per_second: s.samples_per_second,
            blocks_pending_upload: s.blocks_pending_upload,
        }))
    }

    async fn build_info(&self, _: Request<pb::BuildInfoRequest>) -> Result<Response<pb::BuildInfoResponse>, Status> {
        Ok(Response::new(pb::BuildInfoResponse {
            version: build::VERSION.into(),
            git_commit: build::GIT_COMMIT.into(),
            rustc: build::RUSTC.into(),
            target: self.0.target().into(),
        }))
    }
}
