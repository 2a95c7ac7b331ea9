//! The whole process's configuration: one struct per component, and the flag table covering every key.

use heddle_compactor::CompactorConfig;
use heddle_config::{FlagKind, FlagSpec};
use heddle_distributor::DistributorConfig;
use heddle_ingester::{IngesterConfig, TsdbConfig};
use heddle_limits::{Limits, RuntimeConfigConfig};
use heddle_querier::QuerierConfig;
use heddle_ring::MemberlistConfig;
use heddle_server::LogFormat;
use serde::{Deserialize, Serialize};

mod tls;

pub use tls::{GrpcTlsConfig, IngesterClientConfig};

/// Which roles this process runs (`-target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// Every role in one process. Without `memberlist.join_members`, the distributor and querier call the one
    /// in-process ingester directly (a ring of one, RF 1); with it, the process joins the cluster ring.
    #[default]
    All,
    Distributor,
    Ingester,
    Querier,
    /// Only the compactor: it needs the bucket, nothing of the ring.
    Compactor,
}

/// Top-level YAML, Mimir's layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub target: Target,
    /// Require `X-Scope-OrgID`; when false every request belongs to tenant `anonymous`.
    pub multitenancy_enabled: bool,
    pub server: ServerConfig,
    pub distributor: DistributorConfig,
    pub limits: Limits,
    /// Per-tenant overrides of `limits`, reloaded without a restart.
    pub runtime_config: RuntimeConfigConfig,
    pub ingester: IngesterConfig,
    pub querier: QuerierConfig,
    pub blocks_storage: BlocksStorageConfig,
    /// Gossip membership of the cluster ring; unused in single-process mode.
    pub memberlist: MemberlistConfig,
    /// How distributors and queriers dial ingesters (Mimir's `ingester_client`).
    pub ingester_client: IngesterClientConfig,
    pub compactor: CompactorConfig,
}

/// `server:`: listeners and logging.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Empty means every interface, as in Mimir.
    pub http_listen_address: String,
    pub http_listen_port: u16,
    pub grpc_listen_address: String,
    pub grpc_listen_port: u16,
    pub log_level: String,
    pub log_format: LogFormat,
    /// Longest wait for in-flight requests and head closing after SIGTERM.
    #[serde(with = "heddle_config::serde_duration")]
    pub graceful_shutdown_timeout: std::time::Duration,
    /// Longest time a remote-write body may take to arrive (Mimir's `http_server_read_timeout`); a slower sender
    /// gets 503 and a closed connection.
    #[serde(with = "heddle_config::serde_duration")]
    pub http_server_read_timeout: std::time::Duration,
    /// Longest time an HTTP connection may take to send a request head; a slower one is closed, so a client
    /// sending headers a byte at a time (slowloris) holds a connection only this long. Idle keep-alive
    /// connections are closed after it too. dskit's `http_server_read_header_timeout`, which defaults to the
    /// read timeout; Heddle's default is 10 s, long for a request head on any real network. 0: no limit.
    #[serde(with = "heddle_config::serde_duration")]
    pub http_server_read_header_timeout: std::time::Duration,
    /// Most HTTP connections open at once; at the limit the listener stops accepting until one closes (further
    /// clients wait in the kernel's queue). dskit's `http_conn_limit` defaults to 0 (no limit); Heddle's 4096
    /// leaves room for many Prometheus senders and Grafana users while a connection flood cannot exhaust the
    /// process' file descriptors. 0: no limit.
    pub http_conn_limit: usize,
    /// How long a tenant may be idle in this process (no push, no refusal, nothing counted for it) before its
    /// series are removed from `/metrics` (received, discarded, metadata, exemplars, HA dedupes), so tenant
    /// churn does not grow the exposition for months. Mimir's distributor forgets such a tenant after 15 m
    /// (its ingester's `-ingester.active-series-metrics-idle-timeout` is the same idea, 10 m). 0: never.
    #[serde(with = "heddle_config::serde_duration")]
    pub tenant_metrics_idle_timeout: std::time::Duration,
    /// Where the Admin gRPC service listens when it has its own port; empty for every interface.
    pub admin_grpc_listen_address: String,
    /// 0 (the default) serves the Admin service on the main gRPC port.
    pub admin_grpc_listen_port: u16,
    /// File holding the bearer token admin calls (gRPC Admin, `/ingester/*`, `/distributor/ha_tracker`) must
    /// present on every listener; empty: none.
    pub admin_token_file: std::path::PathBuf,
    /// File holding the token of the cluster's internal gRPC API: ingesters require it on every call and
    /// distributors and queriers send it. No Mimir equivalent (Mimir relies on the network or mTLS). Empty: none.
    pub cluster_token_file: std::path::PathBuf,
    /// TLS of every gRPC listener (the main one and the admin one); off unless a certificate and key are set.
    pub grpc_tls_config: GrpcTlsConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            http_listen_address: String::new(),
            http_listen_port: 8080,
            grpc_listen_address: String::new(),
            grpc_listen_port: 9095,
            log_level: "info".into(),
            log_format: LogFormat::Logfmt,
            graceful_shutdown_timeout: std::time::Duration::from_secs(30),
            http_server_read_timeout: std::time::Duration::from_secs(30),
            http_server_read_header_timeout: std::time::Duration::from_secs(10),
            http_conn_limit: 4096,
            tenant_metrics_idle_timeout: heddle_server::DEFAULT_TENANT_METRICS_IDLE_TIMEOUT,
            admin_grpc_listen_address: String::new(),
            admin_grpc_listen_port: 0,
            admin_token_file: std::path::PathBuf::new(),
            cluster_token_file: std::path::PathBuf::new(),
            grpc_tls_config: GrpcTlsConfig::default(),
        }
    }
}

/// `blocks_storage:`: the ingesters' TSDBs, the bucket blocks are shipped to, and how queriers read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BlocksStorageConfig {
    pub tsdb: TsdbConfig,
    /// Object store kind: `filesystem` (the default: a local directory, for the single process) or `s3`.
    pub backend: heddle_bucket::Backend,
    pub filesystem: heddle_bucket::FilesystemConfig,
    pub s3: heddle_bucket::S3Config,
    pub bucket_store: BucketStoreConfig,
}

impl Default for BlocksStorageConfig {
    fn default() -> Self {
        let bucket = heddle_bucket::BucketConfig::default();
        Self {
            tsdb: TsdbConfig::default(),
            backend: bucket.backend,
            filesystem: bucket.filesystem,
            s3: bucket.s3,
            bucket_store: BucketStoreConfig::default(),
        }
    }
}

impl BlocksStorageConfig {
    /// The bucket settings as `heddle-bucket` takes them.
    pub fn bucket(&self) -> heddle_bucket::BucketConfig {
        heddle_bucket::BucketConfig {
            backend: self.backend,
            filesystem: self.filesystem.clone(),
            s3: self.s3.clone(),
        }
    }
}

/// `blocks_storage.bucket_store:`: how queriers read blocks from the bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BucketStoreConfig {
    /// Directory where queriers keep each bucket block's index header (`<tenant>/<ULID>/index-header`), so a
    /// restart does not read them from the bucket again; files of blocks no longer listed are removed. Need
    /// not survive a restart, but should (Mimir's name and default, `./tsdb-sync`, beside `./tsdb`).
    pub sync_dir: std::path::PathBuf,
    /// How often a querier lists a tenant's blocks again (Mimir's default is 15m; Heddle's 1m, so a block
    /// shipped by a flush is queryable from the bucket within a minute).
    #[serde(with = "heddle_config::serde_duration")]
    pub sync_interval: std::time::Duration,
    /// How long after a block is marked for deletion queriers stop reading it (Mimir's default, 1h). Keep it
    /// well under `compactor.deletion_delay` (less `bucket_index.max_stale_period` and `sync_interval`), so
    /// no querier still reads a block when it is deleted.
    #[serde(with = "heddle_config::serde_duration")]
    pub ignore_deletion_mark_delay: std::time::Duration,
    pub bucket_index: BucketIndexConfig,
}

impl Default for BucketStoreConfig {
    fn default() -> Self {
        Self {
            sync_dir: std::path::PathBuf::from("./tsdb-sync"),
            sync_interval: std::time::Duration::from_secs(60),
            ignore_deletion_mark_delay: std::time::Duration::from_secs(3600),
            bucket_index: BucketIndexConfig::default(),
        }
    }
}

/// `blocks_storage.bucket_store.bucket_index:`: how queriers use the bucket index the compactor writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BucketIndexConfig {
    /// Oldest bucket index a querier uses; with none younger it lists the bucket. Ingesters keep answering a
    /// shipped block this long (plus `sync_interval`) after its upload, since an index that old may not list
    /// it yet (Mimir's default, 1h).
    #[serde(with = "heddle_config::serde_duration")]
    pub max_stale_period: std::time::Duration,
}

impl Default for BucketIndexConfig {
    fn default() -> Self {
        Self {
            max_stale_period: std::time::Duration::from_secs(3600),
        }
    }
}

const BUCKET_STORE_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "blocks-storage.bucket-store.sync-dir",
        key: "blocks_storage.bucket_store.sync_dir",
        kind: FlagKind::Value,
        help: "Directory where queriers keep the index headers of bucket blocks across restarts",
    },
    FlagSpec {
        flag: "blocks-storage.bucket-store.sync-interval",
        key: "blocks_storage.bucket_store.sync_interval",
        kind: FlagKind::Value,
        help: "How often queriers list a tenant's blocks in the bucket again",
    },
    FlagSpec {
        flag: "blocks-storage.bucket-store.ignore-deletion-marks-delay",
        key: "blocks_storage.bucket_store.ignore_deletion_mark_delay",
        kind: FlagKind::Value,
        help: "How long after a block is marked for deletion queriers stop reading it",
    },
    FlagSpec {
        flag: "blocks-storage.bucket-store.bucket-index.max-stale-period",
        key: "blocks_storage.bucket_store.bucket_index.max_stale_period",
        kind: FlagKind::Value,
        help: "Oldest bucket index queriers use instead of listing the bucket",
    },
];

/// Flags of the keys this crate owns.
const OWN_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "target",
        key: "target",
        kind: FlagKind::Value,
        help: "Roles to run: all, distributor, ingester, querier or compactor",
    },
    FlagSpec {
        flag: "auth.multitenancy-enabled",
        key: "multitenancy_enabled",
        kind: FlagKind::Bool,
        help: "Require the X-Scope-OrgID header; when false all data belongs to tenant 'anonymous'",
    },
    FlagSpec {
        flag: "server.http-listen-address",
        key: "server.http_listen_address",
        kind: FlagKind::Value,
        help: "HTTP listen address; empty for every interface",
    },
    FlagSpec {
        flag: "server.http-listen-port",
        key: "server.http_listen_port",
        kind: FlagKind::Value,
        help: "HTTP listen port",
    },
    FlagSpec {
        flag: "server.grpc-listen-address",
        key: "server.grpc_listen_address",
        kind: FlagKind::Value,
        help: "gRPC listen address; empty for every interface",
    },
    FlagSpec {
        flag: "server.grpc-listen-port",
        key: "server.grpc_listen_port",
        kind: FlagKind::Value,
        help: "gRPC listen port",
    },
    FlagSpec {
        flag: "log.level",
        key: "server.log_level",
        kind: FlagKind::Value,
        help: "Log filter: error, warn, info, debug, or per-module directives like heddle_ingester=debug,info",
    },
    FlagSpec {
        flag: "log.format",
        key: "server.log_format",
        kind: FlagKind::Value,
        help: "Log format: logfmt or json",
    },
    FlagSpec {
        flag: "server.graceful-shutdown-timeout",
        key: "server.graceful_shutdown_timeout",
        kind: FlagKind::Value,
        help: "Longest wait for in-flight requests and for closing the heads after SIGTERM",
    },
    FlagSpec {
        flag: "server.http-server-read-timeout",
        key: "server.http_server_read_timeout",
        kind: FlagKind::Value,
        help: "Longest time a remote-write body may take to arrive; slower senders get 503 and a closed connection",
    },
    FlagSpec {
        flag: "server.http-server-read-header-timeout",
        key: "server.http_server_read_header_timeout",
        kind: FlagKind::Value,
        help: "Longest time an HTTP connection may take to send a request head (also the idle keep-alive limit); 0 = none",
    },
    FlagSpec {
        flag: "server.http-conn-limit",
        key: "server.http_conn_limit",
        kind: FlagKind::Value,
        help: "Most HTTP connections open at once; further clients wait until one closes (0 = no limit)",
    },
    FlagSpec {
        flag: "server.tenant-metrics-idle-timeout",
        key: "server.tenant_metrics_idle_timeout",
        kind: FlagKind::Value,
        help: "Remove a tenant's series from /metrics once nothing of it happened in this process for this long \
               (Mimir forgets an inactive tenant's series after 15m); 0: never",
    },
];

/// Flags of the operator API's listener and credentials.
const ADMIN_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "server.admin-grpc-listen-address",
        key: "server.admin_grpc_listen_address",
        kind: FlagKind::Value,
        help: "Admin gRPC listen address when it has its own port; empty for every interface",
    },
    FlagSpec {
        flag: "server.admin-grpc-listen-port",
        key: "server.admin_grpc_listen_port",
        kind: FlagKind::Value,
        help: "Serve the Admin gRPC service on this port only; 0 serves it on the main gRPC port",
    },
    FlagSpec {
        flag: "server.admin-token-file",
        key: "server.admin_token_file",
        kind: FlagKind::Value,
        help: "File with the bearer token every admin call must send on every listener: Admin gRPC, /ingester/* and \
               /distributor/ha_tracker; empty: no token",
    },
    FlagSpec {
        flag: "server.cluster-token-file",
        key: "server.cluster_token_file",
        kind: FlagKind::Value,
        help: "File with the shared token of the internal ingester gRPC API: ingesters require it, distributors and \
               queriers send it (the same file on every process); required in a cluster with multitenancy or an \
               admin token unless gRPC uses mutual TLS, and needs --memberlist.cluster-key-file in a cluster; empty: \
               no token",
    },
];

/// Every flag of the binary, in `--help` order.
pub fn flags() -> Vec<FlagSpec> {
    [
        OWN_FLAGS,
        ADMIN_FLAGS,
        tls::GRPC_TLS_FLAGS,
        tls::INGESTER_CLIENT_FLAGS,
        heddle_ingester::TSDB_FLAGS,
        heddle_bucket::BUCKET_FLAGS,
        BUCKET_STORE_FLAGS,
        heddle_ingester::INGESTER_FLAGS,
        heddle_ingester::INSTANCE_LIMITS_FLAGS,
        heddle_distributor::DISTRIBUTOR_FLAGS,
        heddle_distributor::HA_TRACKER_FLAGS,
        heddle_limits::LIMITS_FLAGS,
        heddle_limits::RUNTIME_CONFIG_FLAGS,
        heddle_querier::QUERIER_FLAGS,
        heddle_compactor::COMPACTOR_FLAGS,
        heddle_ring::RING_FLAGS,
        heddle_ring::MEMBERLIST_FLAGS,
    ]
    .concat()
}

impl Config {
    /// Checks every component, naming the YAML key that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.server.http_server_read_timeout.is_zero() {
            return Err("server.http_server_read_timeout: must be positive, or every push would time out".into());
        }
        self.distributor.validate().map_err(|e| e.to_string())?;
        self.limits.validate().map_err(|e| e.to_string())?;
        self.runtime_config.validate().map_err(|e| e.to_string())?;
        self.ingester.instance_limits.validate()?;
        self.blocks_storage.tsdb.validate()?;
        self.blocks_storage.bucket().validate()?;
        if self.blocks_storage.bucket_store.sync_dir.as_os_str().is_empty() {
            return Err("blocks_storage.bucket_store.sync_dir: must name a directory".into());
        }
        self.querier.validate()?;
        self.compactor.validate()?;
        self.validate_query_split()?;
        self.ingester.ring.validate()?;
        self.memberlist.validate()?;
        self.server.grpc_tls_config.validate()?;
        self.ingester_client.grpc_client_config.validate()?;
        self.server.validate_admin_listener()?;
        self.validate_cluster_credentials()?;
        self.validate_token_travels_signed()?;
        Ok(())
    }

    /// Whether this process is part of a cluster: every role but the single process without peers and the
    /// compactor (which only talks to the bucket). Only then does it serve (an ingester) or dial (a
    /// distributor, a querier) the ingester gRPC API.
    pub fn clustered(&self) -> bool {
        match self.target {
            Target::All => !self.memberlist.join_members.is_empty(),
            Target::Compactor => false,
            Target::Distributor | Target::Ingester | Target::Querier => true,
        }
    }

    /// Queriers leave data newer than `querier.query_store_after` to the ingesters, which answer for it only
    /// while they hold it: their local blocks (kept `retention_period`) and their open tenants (closed when idle
    /// for `close_idle_tsdb_timeout`).
    fn validate_query_split(&self) -> Result<(), String> {
        let after = self.querier.query_store_after;
        if after.is_zero() {
            return Ok(());
        }
        let tsdb = &self.blocks_storage.tsdb;
        for (key, held) in [
            ("blocks_storage.tsdb.retention_period", tsdb.retention_period),
            (
                "blocks_storage.tsdb.close_idle_tsdb_timeout",
                tsdb.close_idle_tsdb_timeout,
            ),
        ] {
            if !held.is_zero() && held <= after {
                return Err(format!(
                    "querier.query_store_after: {} is not shorter than {key} ({}), so data between the two would be \
                     read from neither the bucket nor the ingesters",
                    heddle_config::format_duration(after),
                    heddle_config::format_duration(held)
                ));
            }
        }
        Ok(())
    }

    /// With tenants to keep apart (multitenancy) or an admin surface to protect (an admin token), a cluster's
    /// ingester API must not be open: anyone reaching an ingester's gRPC port could read and write every tenant.
    /// Each clustered process needs credentials for its side of that API: ingesters a cluster token or
    /// required client certificates; distributors and queriers a cluster token or a client certificate.
    fn validate_cluster_credentials(&self) -> Result<(), String> {
        let guarded = if self.multitenancy_enabled {
            "--auth.multitenancy-enabled"
        } else if !self.server.admin_token_file.as_os_str().is_empty() {
            "--server.admin-token-file"
        } else {
            return Ok(());
        };
        if !self.clustered() || !self.server.cluster_token_file.as_os_str().is_empty() {
            return Ok(());
        }
        let target = format!("{:?}", self.target).to_lowercase();
        let serves = matches!(self.target, Target::All | Target::Ingester);
        let dials = self.target != Target::Ingester;
        if serves && !self.server.grpc_tls_config.requires_client_certificates() {
            return Err(format!(
                "server.cluster_token_file: this --target={target} process serves the ingester gRPC API to its \
                 cluster with {guarded}, but nothing authenticates the callers, so anyone reaching its gRPC port \
                 could read and write every tenant; set --server.cluster-token-file (the same file on every \
                 process) or mutual TLS (--server.grpc-tls-client-auth=RequireAndVerifyClientCert with \
                 --server.grpc-tls-ca-path)"
            ));
        }
        if dials && !self.ingester_client.grpc_client_config.presents_certificate() {
            return Err(format!(
                "server.cluster_token_file: this --target={target} process calls ingesters in a cluster with \
                 {guarded}, and the ingesters must require credentials, but it has none to present; set \
                 --server.cluster-token-file (the same file on every process) or a client certificate \
                 (--ingester.client.tls-enabled with --ingester.client.tls-cert-path and -tls-key-path)"
            ));
        }
        Ok(())
    }
}

impl Config {
    /// Distributors and queriers send the cluster token with every call to whatever the ring calls an
    /// ingester, and the ring is whoever gossips: without a gossip key a stranger who reaches the gossip port
    /// joins as an ingester, receives pushes and the token with each, and can then call every real ingester.
    /// So a clustered process with a token must sign its gossip.
    fn validate_token_travels_signed(&self) -> Result<(), String> {
        if !self.clustered()
            || self.server.cluster_token_file.as_os_str().is_empty()
            || !self.memberlist.cluster_key_file.is_empty()
        {
            return Ok(());
        }
        let target = format!("{:?}", self.target).to_lowercase();
        Err(format!(
            "memberlist.cluster_key_file: this --target={target} process has a cluster token \
             (--server.cluster-token-file) but gossips without a key, so anyone who reaches the gossip port \
             (--memberlist.bind-port) could join the ring as an ingester and receive the token with every push \
             sent to it; set --memberlist.cluster-key-file (a shared secret of at least 16 bytes, the same file on \
             every process)"
        ))
    }
}

impl ServerConfig {
    /// The address of the admin listener when admin calls have their own (`admin_grpc_listen_port` set).
    pub fn admin_listener(&self) -> Option<String> {
        (self.admin_grpc_listen_port != 0).then(|| {
            let host = match self.admin_grpc_listen_address.as_str() {
                "" => "0.0.0.0",
                a => a,
            };
            format!("{host}:{}", self.admin_grpc_listen_port)
        })
    }

    /// An admin address without a port would leave admin calls on the public ports while looking locked down.
    fn validate_admin_listener(&self) -> Result<(), String> {
        if !self.admin_grpc_listen_address.is_empty() && self.admin_grpc_listen_port == 0 {
            return Err(format!(
                "server.admin_grpc_listen_port: --server.admin-grpc-listen-address={} is set but the port is 0, so \
                 admin calls would still be served on the public ports; set --server.admin-grpc-listen-port to \
                 give them their own listener",
                self.admin_grpc_listen_address
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_yaml_key_has_exactly_one_flag() {
        let specs = flags();
        let (missing, dangling) = heddle_config::uncovered_keys::<Config>(&specs);
        assert!(missing.is_empty(), "YAML keys without a flag: {missing:?}");
        assert!(dangling.is_empty(), "flags naming no YAML key: {dangling:?}");
        let mut names: Vec<_> = specs.iter().map(|s| s.flag).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a flag is declared twice");
    }

    #[test]
    fn a_guarded_cluster_needs_credentials_on_each_side_of_the_ingester_api() {
        let base = |target: Target, multitenancy: bool, admin_token: bool| {
            let mut c = Config {
                target,
                multitenancy_enabled: multitenancy,
                ..Config::default()
            };
            if admin_token {
                c.server.admin_token_file = "/etc/admin".into();
            }
            c
        };
        let token = |mut c: Config| {
            c.server.cluster_token_file = "/etc/cluster".into();
            c.memberlist.cluster_key_file = "/etc/gossip-key".into();
            c
        };
        let mtls = |mut c: Config| {
            c.server.grpc_tls_config = GrpcTlsConfig {
                cert_file: "s.crt".into(),
                key_file: "s.key".into(),
                client_auth_type: "RequireAndVerifyClientCert".into(),
                client_ca_file: "ca.crt".into(),
            };
            c.ingester_client.grpc_client_config.tls_enabled = true;
            c.ingester_client.grpc_client_config.tls_ca_path = "ca.crt".into();
            c.ingester_client.grpc_client_config.tls_cert_path = "c.crt".into();
            c.ingester_client.grpc_client_config.tls_key_path = "c.key".into();
            c
        };
        let joined = |mut c: Config| {
            c.memberlist.join_members = vec!["10.0.0.1:7946".into()];
            c
        };
        let cases: Vec<(&str, Config, Option<&str>)> = vec![
            ("single process, multitenant", base(Target::All, true, true), None),
            (
                "cluster without tenants or admin token",
                base(Target::Ingester, false, false),
                None,
            ),
            (
                "multitenant ingester, open",
                base(Target::Ingester, true, false),
                Some("--target=ingester process serves the ingester gRPC API"),
            ),
            (
                "ingester with an admin token, open",
                base(Target::Ingester, false, true),
                Some("with --server.admin-token-file"),
            ),
            (
                "multitenant distributor, open",
                base(Target::Distributor, true, false),
                Some("--target=distributor process calls ingesters"),
            ),
            (
                "clustered all, open",
                joined(base(Target::All, true, false)),
                Some("--target=all process serves"),
            ),
            (
                "ingester with the token",
                token(base(Target::Ingester, true, false)),
                None,
            ),
            ("querier with the token", token(base(Target::Querier, true, true)), None),
            ("ingester with mTLS", mtls(base(Target::Ingester, true, false)), None),
            (
                "distributor with a client certificate",
                mtls(base(Target::Distributor, true, false)),
                None,
            ),
        ];
        for (name, cfg, want) in cases {
            match (cfg.validate(), want) {
                (Ok(()), None) => {}
                (Err(e), Some(text)) => {
                    assert!(e.contains(text), "case {name}: {e}");
                    assert!(
                        e.contains("--server.cluster-token-file"),
                        "case {name} names the token: {e}"
                    );
                    assert!(
                        e.contains("--server.grpc-tls-client-auth") || e.contains("--ingester.client.tls-cert-path"),
                        "case {name} names mTLS: {e}"
                    );
                }
                (got, want) => panic!("case {name}: got {got:?}, want {want:?}"),
            }
        }
        let mut half = mtls(base(Target::Ingester, true, false));
        half.server.grpc_tls_config.client_auth_type = "VerifyClientCertIfGiven".into();
        assert!(
            half.validate().is_err(),
            "optional client certificates do not authenticate every caller"
        );
    }

    #[test]
    fn a_cluster_token_travels_only_over_signed_gossip() {
        let cases = [
            (Target::Ingester, vec![], true),
            (Target::Distributor, vec![], true),
            (Target::Querier, vec![], true),
            (Target::All, vec!["10.0.0.1:7946".to_owned()], true),
            // No gossip, so no stranger can join: the single process and the compactor.
            (Target::All, vec![], false),
            (Target::Compactor, vec![], false),
        ];
        for (target, join, refused) in cases {
            let mut c = Config {
                target,
                ..Config::default()
            };
            c.memberlist.join_members = join;
            c.server.cluster_token_file = "/etc/cluster".into();
            let name = format!("{target:?} clustered={}", c.clustered());
            match (c.validate(), refused) {
                (Err(e), true) => {
                    for flag in [
                        "--server.cluster-token-file",
                        "--memberlist.cluster-key-file",
                        "--target=",
                    ] {
                        assert!(e.contains(flag), "{name}: {flag} missing in {e}");
                    }
                    assert!(e.starts_with("memberlist.cluster_key_file"), "{name}: {e}");
                }
                (Ok(()), false) => {}
                (got, _) => panic!("{name}: got {got:?}, refused={refused}"),
            }
            c.memberlist.cluster_key_file = "/etc/gossip-key".into();
            c.validate().unwrap_or_else(|e| panic!("{name} with a key: {e}"));
        }
    }

    #[test]
    fn an_admin_address_without_a_port_is_refused() {
        let mut c = Config::default();
        c.server.admin_grpc_listen_address = "127.0.0.1".into();
        let e = c.validate().unwrap_err();
        assert!(e.contains("--server.admin-grpc-listen-port"), "{e}");
        assert_eq!(c.server.admin_listener(), None);
        c.server.admin_grpc_listen_port = 9096;
        c.validate().unwrap();
        assert_eq!(c.server.admin_listener().as_deref(), Some("127.0.0.1:9096"));
    }

    #[test]
    fn the_store_is_left_only_what_ingesters_still_hold() {
        let mut c = Config::default();
        c.querier.query_store_after = std::time::Duration::from_secs(12 * 3600);
        c.querier.query_ingesters_within = std::time::Duration::from_secs(13 * 3600);
        c.validate().unwrap();
        c.blocks_storage.tsdb.retention_period = std::time::Duration::from_secs(6 * 3600);
        let e = c.validate().unwrap_err();
        assert!(e.contains("blocks_storage.tsdb.retention_period"), "{e}");
        c.blocks_storage.tsdb.retention_period = std::time::Duration::from_secs(24 * 3600);
        c.querier.query_ingesters_within = std::time::Duration::from_secs(3600);
        let e = c.validate().unwrap_err();
        assert!(e.contains("querier.query_ingesters_within"), "{e}");
    }

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn reference_doc_is_current() {
        let generated = heddle_config::render_reference::<Config>(&flags());
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        if std::env::var_os("HEDDLE_UPDATE_DOCS").is_some() {
            let start = on_disk.find("| flag |").unwrap_or(on_disk.len());
            std::fs::write(path, format!("{}{generated}", &on_disk[..start])).unwrap();
            return;
        }
        assert!(
            on_disk.contains(&generated),
            "docs/configuration.md is stale: run `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle reference_doc`"
        );
    }
}
