//! Wiring the roles together and running them until SIGTERM.

use crate::config::{Config, Target};
use anyhow::{Context, bail};
use heddle_distributor::{Distributor, Overrides, SingleIngesterRing};
use heddle_ingester::{Ingester, LimitsSource, SeriesLimits};
use heddle_model::TenantId;
use heddle_querier::{Querier, StaticIngesters};
use heddle_server::{DiscardedSamples, Readiness};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn listen_addr(address: &str, port: u16) -> String {
    let host = if address.is_empty() { "0.0.0.0" } else { address };
    format!("{host}:{port}")
}

/// The ingester reads its per-tenant series limits from the runtime-config overrides.
#[derive(Debug)]
struct OverridesLimits(Arc<Overrides>);

impl LimitsSource for OverridesLimits {
    fn series_limits(&self, tenant: &TenantId) -> SeriesLimits {
        let l = self.0.get(tenant.as_str());
        SeriesLimits {
            max_global_series_per_user: l.max_global_series_per_user,
            max_global_series_per_metric: l.max_global_series_per_metric,
        }
    }
}

/// Runs the configured roles until a signal (or a fatal error) stops them, then stops them in order: stop
/// accepting requests, finish in-flight ones, close the heads (flushing the WAL).
pub async fn run(cfg: Config) -> anyhow::Result<()> {
    let mut registry = Registry::default();
    let readiness = Readiness::default();
    let stop = CancellationToken::new();
    tokio::spawn(heddle_server::shutdown_signal(stop.clone()));

    let discarded = DiscardedSamples::register(&mut registry);
    let overrides = Arc::new(Overrides::new(cfg.limits.clone()).register_metrics(&mut registry));
    if !cfg.runtime_config.file.as_os_str().is_empty() {
        // The first load must succeed: starting with limits the operator did not ask for would be worse.
        overrides
            .reload(&cfg.runtime_config.file)
            .context("loading --runtime-config.file")?;
        tokio::spawn(overrides.clone().run_reloader(cfg.runtime_config.clone(), stop.clone()));
    }
    let ingester = match cfg.target {
        Target::All | Target::Ingester => {
            readiness.not_ready("ingester", "replaying the WAL");
            Some(Ingester::new(
                &cfg.ingester,
                cfg.blocks_storage.tsdb.clone(),
                &mut registry,
                discarded.clone(),
            ))
        }
        Target::Distributor | Target::Querier => bail!(
            "--target={:?} needs the cluster ring to find ingesters, which this build does not have yet; \
             run --target=all (single process) or --target=ingester",
            cfg.target
        ),
    };

    if let Some(ing) = &ingester {
        ing.set_limits_source(Arc::new(OverridesLimits(overrides.clone())));
    }

    let admin_token = crate::admin::AdminToken::load(&cfg.server.admin_token_file).map_err(anyhow::Error::msg)?;
    let admin = crate::admin::AdminCore::new(
        ingester.clone(),
        Arc::new(crate::admin::LocalRing::new(
            "local",
            listen_addr(&cfg.server.grpc_listen_address, cfg.server.grpc_listen_port),
        )),
        stop.clone(),
        format!("{:?}", cfg.target).to_lowercase(),
    );
    let mut api = axum::Router::new();
    if let (Target::All, Some(ing)) = (cfg.target, &ingester) {
        let client: Arc<dyn heddle_proto::IngesterClient> = ing.clone();
        let ring = Arc::new(SingleIngesterRing::new("local", client.clone()));
        let distributor = Distributor::with_discarded_samples(
            cfg.distributor.clone(),
            cfg.limits.clone(),
            ring,
            &mut registry,
            discarded.clone(),
        )
        .with_overrides(overrides.clone());
        let querier = Querier::new(
            cfg.querier.clone(),
            Arc::new(StaticIngesters::new(vec![client])),
            &mut registry,
        );
        api = api
            .merge(heddle_distributor::router(Arc::new(distributor)))
            .merge(heddle_querier::router(Arc::new(querier)));
    }

    let registry = Arc::new(registry);
    let http = heddle_server::tenant_layer(api, cfg.multitenancy_enabled)
        .merge(heddle_server::metrics_and_ready_routes(registry, readiness.clone()))
        .merge(crate::admin::http_router(admin.clone(), admin_token.clone()));
    let http_addr = listen_addr(&cfg.server.http_listen_address, cfg.server.http_listen_port);
    let http_listener = tokio::net::TcpListener::bind(&http_addr)
        .await
        .with_context(|| format!("cannot listen for HTTP on {http_addr}"))?;
    tracing::info!(http = %http_addr, "listening for HTTP");

    let http_task = tokio::spawn(heddle_server::serve_http(http_listener, http, stop.clone()));
    // Every process serves gRPC: Admin and health everywhere, the ingester API where there is an ingester.
    let grpc = crate::admin::serve_grpc(
        &cfg.server,
        ingester.clone().map(|i| i as Arc<dyn heddle_proto::IngesterClient>),
        admin.clone(),
        admin_token,
        stop.clone(),
    )
    .await?;
    if ingester.is_none() {
        grpc.set_serving(true).await;
    }

    if let Some(ing) = &ingester {
        tokio::select! {
            res = ing.open_existing() => {
                res.context("opening the tenant heads")?;
                readiness.ready("ingester");
                grpc.set_serving(true).await;
                tracing::info!("ready");
            }
            _ = stop.cancelled() => {}
        }
    }

    stop.cancelled().await;
    readiness.not_ready("server", "shutting down");
    grpc.set_serving(false).await;
    let timeout = cfg.server.graceful_shutdown_timeout;
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
    if tokio::time::timeout(timeout, drain).await.is_err() {
        tracing::warn!(timeout = ?timeout, "in-flight requests did not finish in time; closing anyway");
    }
    // PrepareShutdown / `/ingester/shutdown`: leave the ring and flush before the heads close.
    admin.on_shutdown().await;
    if let Some(ing) = &ingester {
        ing.close().await;
    }
    Ok(())
}
