//! Wiring the roles together and running them until SIGTERM.

use crate::access::{AuthRefusals, ClusterToken};
use crate::admin::{AdminAccess, GrpcApis};
use crate::config::{Config, Target};
use anyhow::{Context, bail};
use heddle_distributor::Distributor;
use heddle_ingester::{Ingester, Topology, TopologySource};
use heddle_limits::Overrides;
use heddle_proto::IngesterClient;
use heddle_querier::{IngesterReplicas, Querier};
use heddle_ring::{
    ClientPool, FixedReplicas, GossipMembership, GossipMetrics, InstanceState, Lifecycler, Membership, Ring,
    RingReplicas,
};
use heddle_server::{DiscardedSamples, Readiness};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn listen_addr(address: &str, port: u16) -> String {
    let host = if address.is_empty() { "0.0.0.0" } else { address };
    format!("{host}:{port}")
}

/// The ingester divides global series limits by the ring it is in: the replication factor of the ring's
/// config and the ingesters in the ring, or with zone awareness those in this ingester's zone and the number of
/// zones (Mimir's limiter).
#[derive(Debug)]
struct RingTopology {
    ring: Arc<Ring>,
    zone: String,
}

impl TopologySource for RingTopology {
    fn topology(&self) -> Topology {
        let snapshot = self.ring.snapshot();
        let cfg = snapshot.config();
        let instances = snapshot.instances();
        if cfg.zone_awareness_enabled {
            let zones: std::collections::BTreeSet<&str> = instances.iter().map(|i| i.zone.as_str()).collect();
            Topology {
                replication_factor: cfg.replication_factor,
                ingesters: instances.iter().filter(|i| i.zone == self.zone).count(),
                zones: zones.len().max(1),
            }
        } else {
            Topology {
                replication_factor: cfg.replication_factor,
                ingesters: instances.len(),
                zones: 1,
            }
        }
    }
}

/// The cluster side of a process: its gossip membership, the ring it reads, and one pooled gRPC client per
/// ingester address.
struct Cluster {
    gossip: Arc<GossipMembership>,
    ring: Arc<Ring>,
    pool: Arc<ClientPool<Arc<dyn IngesterClient>>>,
}

impl Cluster {
    /// Joins the gossip cluster as `node_id` and follows the ring until `stop`.
    async fn join(
        cfg: &Config,
        node_id: &str,
        tls: Option<heddle_proto::transport::ClientTls>,
        credentials: heddle_proto::transport::BearerToken,
        gossip_metrics: GossipMetrics,
        stop: &CancellationToken,
    ) -> anyhow::Result<Self> {
        let gossip_cfg = cfg.memberlist.gossip(node_id).await?;
        let gossip = GossipMembership::start_udp(gossip_cfg, gossip_metrics)
            .await
            .context("joining the memberlist cluster")?;
        let ring = Arc::new(Ring::new(cfg.ingester.ring.replication()));
        ring.follow(gossip.watch(), stop.clone());
        let (push_timeout, query_timeout) = (cfg.distributor.remote_timeout, cfg.querier.query_timeout);
        let pool: Arc<ClientPool<Arc<dyn IngesterClient>>> = Arc::new(ClientPool::new(Arc::new(move |addr: &str| {
            heddle_proto::GrpcIngesterClient::connect_lazy_with_tls(addr, push_timeout, tls.as_ref())
                .map(|c| {
                    Arc::new(c.with_query_timeout(query_timeout).with_credentials(&credentials))
                        as Arc<dyn IngesterClient>
                })
                .map_err(|e| format!("invalid ingester address {addr:?}: {e}"))
        })));
        // Close the channels of ingesters that left the ring.
        let (mut views, pool_ref, stop_ref) = (gossip.watch(), Arc::clone(&pool), stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop_ref.cancelled() => return,
                    changed = views.changed() => if changed.is_err() { return },
                }
                let view = Arc::clone(&views.borrow_and_update());
                pool_ref.retain(view.desc.instances.values().map(|i| i.addr.as_str()));
            }
        });
        Ok(Self { gossip, ring, pool })
    }

    /// Keeps `part` not ready until the ring has an ACTIVE ingester: a distributor or querier without one can
    /// only fail requests.
    fn gate_readiness(&self, readiness: &Readiness, part: &'static str, stop: &CancellationToken) {
        let (mut views, readiness, stop) = (self.gossip.watch(), readiness.clone(), stop.clone());
        readiness.not_ready(part, "no ACTIVE ingester in the ring yet");
        tokio::spawn(async move {
            loop {
                let active = views
                    .borrow_and_update()
                    .desc
                    .instances
                    .values()
                    .any(|i| i.state == InstanceState::Active);
                if active {
                    readiness.ready(part);
                } else {
                    readiness.not_ready(part, "no ACTIVE ingester in the ring");
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    changed = views.changed() => if changed.is_err() { return },
                }
            }
        });
    }
}

/// The gossip member name of a process that owns no ring entry: unique per host and port.
fn reader_node_id(cfg: &Config) -> String {
    let role = match cfg.target {
        Target::All => "all",
        Target::Distributor => "distributor",
        Target::Ingester => "ingester",
        Target::Querier => "querier",
        Target::Compactor => "compactor",
    };
    format!("{}-{role}-{}", heddle_ring::hostname(), cfg.server.http_listen_port)
}

/// The ring the Admin API reports and changes: the gossip membership in a cluster, else the ring of one.
fn ring_admin(
    cfg: &Config,
    membership: Option<Arc<dyn Membership>>,
    has_ingester: bool,
) -> Arc<dyn crate::admin::RingAdmin> {
    match membership {
        Some(m) => Arc::new(crate::admin::MembershipRing::new(
            m,
            has_ingester.then(|| cfg.ingester.ring.resolved_instance_id()),
            cfg.ingester.ring.heartbeat_timeout,
        )),
        None => Arc::new(crate::admin::LocalRing::new(
            cfg.ingester.ring.resolved_instance_id(),
            listen_addr(&cfg.server.grpc_listen_address, cfg.server.grpc_listen_port),
        )),
    }
}

/// Runs the configured roles until a signal (or a fatal error) stops them, then stops them in order: stop
/// accepting requests, finish in-flight ones, close the heads (flushing the WAL).
pub async fn run(cfg: Config) -> anyhow::Result<()> {
    let mut registry = Registry::default();
    let readiness = Readiness::default();
    let stop = CancellationToken::new();
    tokio::spawn(heddle_server::shutdown_signal(stop.clone()));

    // Certificates are read once, here: a bad file stops the start with the flag and path that named it.
    let grpc_tls = cfg.server.grpc_tls_config.load()?;
    let ingester_tls = cfg.ingester_client.grpc_client_config.load()?;
    let admin_token = crate::admin::AdminToken::load(&cfg.server.admin_token_file).map_err(anyhow::Error::msg)?;
    let cluster_token = ClusterToken::load(&cfg.server.cluster_token_file).map_err(anyhow::Error::msg)?;
    let refusals = AuthRefusals::register(&mut registry);
    heddle_server::register_process_metrics(&mut registry);
    // One tracker of active tenants for every per-tenant family of the process (shared through `discarded`).
    let tenant_metrics = heddle_server::TenantMetrics::new(cfg.server.tenant_metrics_idle_timeout);
    tokio::spawn(tenant_metrics.clone().run(stop.clone()));
    let discarded = DiscardedSamples::register_with(&mut registry, &tenant_metrics);
    let overrides = Arc::new(Overrides::new(cfg.limits.clone()).register_metrics(&mut registry));
    if !cfg.runtime_config.file.as_os_str().is_empty() {
        // The first load must succeed: starting with limits the operator did not ask for would be worse.
        overrides
            .reload(&cfg.runtime_config.file)
            .context("loading --runtime-config.file")?;
        tokio::spawn(overrides.clone().run_reloader(cfg.runtime_config.clone(), stop.clone()));
    }
    // Ingesters ship blocks to the bucket and queriers read them from it; distributors never touch it.
    let bucket = match cfg.target {
        Target::Distributor => None,
        _ => Some(
            heddle_bucket::Bucket::new(&cfg.blocks_storage.bucket(), &mut registry)
                .context("opening the blocks bucket (blocks_storage.backend)")?,
        ),
    };
    let ingester = match cfg.target {
        Target::All | Target::Ingester => {
            readiness.not_ready("ingester", "replaying the WAL");
            let shipping = !cfg.blocks_storage.tsdb.ship_interval.is_zero();
            Some(Ingester::new(
                &cfg.ingester,
                cfg.blocks_storage.tsdb.clone(),
                bucket.clone().filter(|_| shipping),
                &mut registry,
                discarded.clone(),
            ))
        }
        Target::Distributor | Target::Querier | Target::Compactor => None,
    };
    // Single-process mode (all roles, nobody to join) keeps its ring of one in-process ingester with RF 1;
    // everything else joins the gossip ring.
    let clustered = cfg.clustered();
    let cluster = if clustered {
        let node_id = match &ingester {
            Some(_) => cfg.ingester.ring.resolved_instance_id(),
            None => reader_node_id(&cfg),
        };
        let gossip_metrics = GossipMetrics::register(&mut registry);
        Some(
            Cluster::join(
                &cfg,
                &node_id,
                ingester_tls,
                cluster_token.bearer().clone(),
                gossip_metrics,
                &stop,
            )
            .await?,
        )
    } else {
        None
    };
    if let Some(c) = &cluster {
        let members = crate::ring_metrics::RingMembers::register(&mut registry);
        members.follow(c.gossip.watch(), cfg.ingester.ring.heartbeat_timeout, stop.clone());
    }

    if let Some(ing) = &ingester {
        ing.set_overrides(overrides.clone());
        // Reads leave a shipped block to the querier once its block list refresh has had time to find it, in a
        // listing or in a bucket index as old as queriers accept.
        // With `querier.query_store_after`, queriers leave recent data to the ingesters: a block is answered
        // here at least that long after its upload.
        let store = &cfg.blocks_storage.bucket_store;
        ing.set_shipped_blocks_grace(
            (store.sync_interval + store.bucket_index.max_stale_period).max(cfg.querier.query_store_after),
        );
        // A single process keeps the default topology (RF 1, one ingester): the global limits apply whole.
        if let Some(c) = &cluster {
            ing.set_topology_source(Arc::new(RingTopology {
                ring: Arc::clone(&c.ring),
                zone: cfg.ingester.ring.instance_zone.clone(),
            }));
        }
    }

    // One replica seam for both roles: the distributor asks it per series token, the querier per query. A
    // compactor alone has no use for it.
    let replicas: Option<Arc<IngesterReplicas>> = match (&cluster, &ingester) {
        (Some(c), _) => Some(Arc::new(RingReplicas::new(Arc::clone(&c.ring), Arc::clone(&c.pool)))),
        (None, Some(ing)) => {
            let client: Arc<dyn IngesterClient> = ing.clone();
            Some(Arc::new(FixedReplicas::single(
                cfg.ingester.ring.resolved_instance_id(),
                client,
            )))
        }
        (None, None) if cfg.target == Target::Compactor => None,
        (None, None) => bail!("--target={:?} without an ingester needs the cluster ring", cfg.target),
    };
    let replicas = move || replicas.clone().expect("every target but the compactor has replicas");
    let admin = crate::admin::AdminCore::new(
        ingester.clone(),
        ring_admin(
            &cfg,
            cluster.as_ref().map(|c| c.gossip.clone() as Arc<dyn Membership>),
            ingester.is_some(),
        ),
        stop.clone(),
        format!("{:?}", cfg.target).to_lowercase(),
    );
    let mut api = axum::Router::new();
    // Admin routes: outside the tenant layer, behind the admin gate (see `access`).
    let mut admin_routes = crate::admin::http_router(admin.clone());
    if matches!(cfg.target, Target::All | Target::Distributor) {
        let mut distributor_cfg = cfg.distributor.clone();
        distributor_cfg.body_read_timeout = cfg.server.http_server_read_timeout;
        let distributor = Distributor::with_discarded_samples(
            distributor_cfg,
            cfg.limits.clone(),
            replicas(),
            &mut registry,
            discarded.clone(),
        )
        .with_overrides(overrides.clone());
        if let Some(tracker) = distributor.ha_tracker() {
            admin_routes = admin_routes.merge(heddle_distributor::ha_tracker_router(
                tracker.clone(),
                distributor.clock().clone(),
            ));
            // Elections are shared with the other distributors over gossip; alone, they stay in memory.
            if let (Some(c), true) = (&cluster, cfg.distributor.ha_tracker.shared()) {
                tracker.set_max_clock_skew(cfg.memberlist.max_clock_skew);
                let kv: Arc<dyn heddle_ring::SharedState> = c.gossip.clone();
                tokio::spawn(tracker.clone().run_sync(
                    kv,
                    distributor.clock().clone(),
                    cfg.memberlist.gossip_interval,
                    stop.clone(),
                ));
            }
        }
        api = api.merge(heddle_distributor::router(Arc::new(distributor)));
        if let (Some(c), None) = (&cluster, &ingester) {
            c.gate_readiness(&readiness, "ring", &stop);
        }
    }
    if matches!(cfg.target, Target::All | Target::Querier) {
        let build = heddle_querier::BuildInfo {
            version: crate::admin::build::VERSION,
            revision: crate::admin::build::GIT_COMMIT,
            rustc: crate::admin::build::RUSTC,
        };
        let mut querier_cfg = cfg.querier.clone();
        querier_cfg.body_read_timeout = cfg.server.http_server_read_timeout;
        let mut querier = Querier::new(querier_cfg, replicas(), &mut registry)
            .with_overrides(overrides.clone())
            .with_build_info(build);
        if let Some(bucket) = &bucket {
            let store = &cfg.blocks_storage.bucket_store;
            querier = querier.with_store(Arc::new(
                heddle_querier::BucketStore::new(bucket.clone(), store.sync_interval, &mut registry)
                    .with_deletion_marks(store.ignore_deletion_mark_delay, store.bucket_index.max_stale_period)
                    .with_sync_dir(&store.sync_dir),
            ));
        }
        api = api.merge(heddle_querier::router(Arc::new(querier)));
        if let (Some(c), None) = (&cluster, &ingester) {
            c.gate_readiness(&readiness, "ring", &stop);
        }
    }

    // Awaited at shutdown: a compactor stopped mid-pass releases its tenant's lock first.
    let mut compactor_task = None;
    if matches!(cfg.target, Target::All | Target::Compactor) {
        let bucket = bucket.clone().context("the compactor needs the blocks bucket")?;
        // Queriers drop a marked block from their lists at most this long after the mark (if they share this
        // config, as the chart's pods do); deleting it sooner can fail a query that still reads it.
        let store = &cfg.blocks_storage.bucket_store;
        let dropped_within =
            store.ignore_deletion_mark_delay + store.bucket_index.max_stale_period + store.sync_interval;
        if cfg.compactor.deletion_delay < dropped_within {
            tracing::warn!(
                deletion_delay = ?cfg.compactor.deletion_delay,
                queriers_drop_marked_blocks_within = ?dropped_within,
                "compactor.deletion_delay is shorter than ignore_deletion_mark_delay + bucket_index.max_stale_period \
                 + sync_interval: a query may still read a block when it is deleted, and fail"
            );
        }
        let holder = format!("{}-compactor-{}", heddle_ring::hostname(), cfg.server.http_listen_port);
        let compactor = heddle_compactor::Compactor::new(
            cfg.compactor.clone(),
            bucket,
            overrides.clone(),
            Arc::new(heddle_model::SystemClock),
            holder,
            &mut registry,
        );
        compactor_task = Some(tokio::spawn(Arc::new(compactor).run(stop.clone())));
    }

    let http_options = heddle_server::HttpServerOptions::new(
        cfg.server.http_server_read_header_timeout,
        cfg.server.http_conn_limit,
        &mut registry,
    );
    let registry = Arc::new(registry);
    // With an admin listener of its own, admin routes are served there only and the public port refuses them.
    let serve_admin = AdminAccess::serve(admin_token.clone(), refusals.clone());
    let (public_admin, private_admin) = match cfg.server.admin_listener() {
        Some(addr) => (
            AdminAccess::refuse(&addr, refusals.clone()).guard(admin_routes.clone()),
            serve_admin.guard(admin_routes),
        ),
        None => (serve_admin.guard(admin_routes), axum::Router::new()),
    };
    let http = heddle_server::tenant_layer(api, cfg.multitenancy_enabled)
        .merge(heddle_server::metrics_and_ready_routes(registry, readiness.clone()))
        .merge(public_admin);
    let http_addr = listen_addr(&cfg.server.http_listen_address, cfg.server.http_listen_port);
    let http_listener = tokio::net::TcpListener::bind(&http_addr)
        .await
        .with_context(|| format!("cannot listen for HTTP on {http_addr}"))?;
    tracing::info!(http = %http_addr, "listening for HTTP");

    let http_task = tokio::spawn(heddle_server::serve_http(
        http_listener,
        http,
        stop.clone(),
        http_options,
    ));
    // Every process serves gRPC: Admin and health everywhere, the ingester API where others dial it (an
    // ingester in a cluster; the single process calls its ingester in memory).
    let grpc = crate::admin::serve_grpc(
        &cfg.server,
        grpc_tls.as_ref(),
        GrpcApis {
            ingester: ingester
                .clone()
                .filter(|_| clustered)
                .map(|i| i as Arc<dyn IngesterClient>),
            cluster_token,
            admin: admin.clone(),
            admin_token,
            admin_http: private_admin,
            refusals,
        },
        stop.clone(),
    )
    .await?;
    if ingester.is_none() {
        grpc.set_serving(true).await;
    }

    // A clustered ingester registers JOINING once its gRPC port is open, and turns ACTIVE after replay.
    let lifecycler = match (&cluster, &ingester) {
        (Some(c), Some(_)) => {
            let lc_cfg = cfg.ingester.ring.lifecycler(cfg.server.grpc_listen_port).await?;
            let membership: Arc<dyn Membership> = c.gossip.clone();
            Some(
                Lifecycler::start(lc_cfg, membership, heddle_ring::system_clock())
                    .await
                    .context("registering in the ingester ring")?,
            )
        }
        _ => None,
    };

    if let Some(ing) = &ingester {
        tokio::select! {
            res = ing.open_existing() => {
                res.context("opening the tenant heads")?;
                if let Some(lc) = &lifecycler {
                    lc.set_active().await.context("turning ACTIVE in the ring")?;
                }
                readiness.ready("ingester");
                grpc.set_serving(true).await;
                tokio::spawn(ing.clone().run_blocks_loop(stop.clone()));
                tracing::info!("ready");
            }
            _ = stop.cancelled() => {}
        }
    }

    stop.cancelled().await;
    // The whole stop is bounded by the graceful shutdown timeout, whatever is running: draining requests,
    // flushes and leaving the ring get the first three quarters (at most all but 10 s), closing the heads
    // (syncing the WAL) what is left, so it is never skipped for a slow drain. `main` then stops the runtime
    // without waiting for blocking work (a compaction) that is still running.
    let timeout = cfg.server.graceful_shutdown_timeout;
    let started = tokio::time::Instant::now();
    let deadline = started + timeout;
    let soft_deadline = deadline - (timeout / 4).min(std::time::Duration::from_secs(10));
    tracing::info!(timeout = ?timeout, "shutting down");
    readiness.not_ready("server", "shutting down");
    grpc.set_serving(false).await;
    // LEAVING first: distributors stop sending new series here while in-flight pushes finish.
    if let Some(lc) = &lifecycler {
        match tokio::time::timeout_at(soft_deadline, lc.set_state(InstanceState::Leaving)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not announce LEAVING in the ring"),
            Err(_) => tracing::warn!("announcing LEAVING in the ring did not finish in time; skipped"),
        }
    }
    let drain = async {
        if let Ok(Err(e)) = http_task.await {
            tracing::error!(error = %e, "HTTP server failed");
        }
        for task in grpc.tasks {
            if let Ok(Err(e)) = task.await {
                tracing::error!(error = %e, "gRPC server failed");
            }
        }
    };
    if tokio::time::timeout_at(soft_deadline, drain).await.is_err() {
        tracing::warn!(timeout = ?timeout, "in-flight requests did not finish in time; closing anyway");
    }
    // PrepareShutdown / `/ingester/shutdown`: leave the ring and flush before the heads close.
    if tokio::time::timeout_at(soft_deadline, admin.on_shutdown())
        .await
        .is_err()
    {
        tracing::warn!("the prepared shutdown's flush and ring leave did not finish in time; skipped the rest");
    }
    if let Some(ing) = &ingester {
        ing.close_by(soft_deadline, deadline).await;
    }
    if let Some(task) = compactor_task
        && tokio::time::timeout_at(deadline, task).await.is_err()
    {
        tracing::warn!("the compactor did not stop in time; a tenant lock it holds runs out by itself");
    }
    if let Some(lc) = &lifecycler {
        match tokio::time::timeout_at(deadline, lc.stop()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not leave the ring cleanly"),
            Err(_) => tracing::warn!("leaving the ring did not finish in time; skipped (the heartbeat goes stale)"),
        }
    }
    if let Some(c) = &cluster {
        let leave = async {
            // Give the last ring update (LEFT or LEAVING) a few gossip rounds to spread before going silent.
            if lifecycler.is_some() {
                tokio::time::sleep(cfg.memberlist.gossip_interval * 3).await;
            }
            c.gossip.shutdown().await;
        };
        if tokio::time::timeout_at(deadline, leave).await.is_err() {
            tracing::warn!("leaving the gossip cluster did not finish in time; skipped");
        }
    }
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "shutdown sequence done"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_ring::{InstanceDesc, MembershipView, ReplicationConfig};

    fn ring(zone_awareness_enabled: bool, zones: &[&str]) -> Arc<Ring> {
        let ring = Arc::new(Ring::new(ReplicationConfig {
            replication_factor: 3,
            zone_awareness_enabled,
            ..ReplicationConfig::default()
        }));
        let mut view = MembershipView::default();
        for (i, zone) in zones.iter().enumerate() {
            view.desc.upsert(InstanceDesc {
                id: format!("ing-{i}"),
                addr: format!("127.0.0.1:{}", 9000 + i),
                zone: (*zone).to_owned(),
                state: InstanceState::Active,
                tokens: vec![i as u32],
                heartbeat_ms: 0,
                registered_at_ms: 0,
            });
        }
        ring.update(&view);
        ring
    }

    #[test]
    fn the_ring_gives_the_ingester_its_topology() {
        let plain = RingTopology {
            ring: ring(false, &["", "", "", "", "", ""]),
            zone: String::new(),
        };
        let t = plain.topology();
        assert_eq!(
            t,
            Topology {
                replication_factor: 3,
                ingesters: 6,
                zones: 1
            }
        );
        assert_eq!(t.local_limit(150_000), 75_000, "global * RF / ingesters");
        let zoned = RingTopology {
            ring: ring(true, &["a", "a", "b", "b", "c", "c", "c"]),
            zone: "c".into(),
        };
        let t = zoned.topology();
        assert_eq!(
            t,
            Topology {
                replication_factor: 3,
                ingesters: 3,
                zones: 3
            }
        );
        assert_eq!(
            t.local_limit(150_000),
            50_000,
            "a zone's copy over the zone's 3 ingesters"
        );
    }
}
