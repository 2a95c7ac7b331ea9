//! Ring and gossip configuration: `ingester.ring.*` and `memberlist.*` in YAML, Mimir's names.

use crate::error::RingError;
use crate::gossip::{ClusterKey, GossipConfig};
use crate::lifecycler::LifecyclerConfig;
use crate::replication::ReplicationConfig;
use heddle_config::{FlagKind, FlagSpec, serde_duration};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `ingester.ring:` settings.
///
/// `replication_factor` defaults to 3 as in Mimir. The single-process mode (`--target=all` without
/// `memberlist.join_members`) ignores it and runs an in-memory ring of its one ingester with RF 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RingConfig {
    /// Copies of every series; a write needs `replication_factor/2 + 1` acknowledgements.
    pub replication_factor: usize,
    /// This ingester's id in the ring; empty means the hostname.
    pub instance_id: String,
    /// Address others dial for gRPC; empty means the address the hostname resolves to.
    pub instance_addr: String,
    /// Port others dial for gRPC; 0 means `server.grpc_listen_port`.
    pub instance_port: u16,
    /// This ingester's zone (needed with zone awareness).
    pub instance_zone: String,
    /// Place the replicas of a series in distinct zones.
    pub zone_awareness_enabled: bool,
    /// File keeping this ingester's tokens across restarts; empty picks new tokens on every start.
    pub tokens_file_path: String,
    /// Tokens per ingester.
    pub num_tokens: usize,
    /// How often the ingester refreshes its heartbeat in the ring.
    #[serde(with = "serde_duration")]
    pub heartbeat_period: Duration,
    /// An ingester whose heartbeat is older than this is unhealthy and skipped; 0 disables the check.
    #[serde(with = "serde_duration")]
    pub heartbeat_timeout: Duration,
    /// Remove the ingester from the ring on clean shutdown; false keeps it LEAVING so a restart under the same
    /// id takes its tokens back.
    pub unregister_on_shutdown: bool,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self {
            replication_factor: 3,
            instance_id: String::new(),
            instance_addr: String::new(),
            instance_port: 0,
            instance_zone: String::new(),
            zone_awareness_enabled: false,
            tokens_file_path: String::new(),
            num_tokens: 128,
            heartbeat_period: Duration::from_secs(15),
            heartbeat_timeout: Duration::from_secs(60),
            unregister_on_shutdown: true,
        }
    }
}

/// `memberlist:` settings (the gossip layer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemberlistConfig {
    /// IP to listen on for gossip (UDP); empty means every interface.
    pub bind_addr: String,
    /// Gossip port.
    pub bind_port: u16,
    /// IP other members reach this one at; empty means `bind_addr`, or the hostname's address.
    pub advertise_addr: String,
    /// Port other members reach this one at; 0 means `bind_port`.
    pub advertise_port: u16,
    /// Members to join: `host:port` or `host` (then `bind_port`); DNS names are re-resolved periodically, so a
    /// Kubernetes headless service works. Empty in single-process mode.
    pub join_members: Vec<String>,
    /// Members with a different label ignore each other.
    pub cluster_label: String,
    /// Time between gossip rounds.
    #[serde(with = "serde_duration")]
    pub gossip_interval: Duration,
    /// How long a member that left or died stays in the ring as unhealthy before it is dropped.
    #[serde(with = "serde_duration")]
    pub left_ingesters_timeout: Duration,
    /// File holding the cluster's shared secret (at least 16 bytes; surrounding whitespace is dropped).
    /// Every gossip datagram is then signed with it (HMAC-SHA256) and datagrams without a valid tag are
    /// dropped. Empty gossips unauthenticated. All members must use the same key.
    pub cluster_key_file: String,
    /// How far members' clocks may disagree: signed datagrams dated further away are dropped (replays), and
    /// gossiped times (heartbeats, forget markers, HA elections) further in the future are not trusted.
    #[serde(with = "serde_duration")]
    pub max_clock_skew: Duration,
}

impl Default for MemberlistConfig {
    fn default() -> Self {
        Self {
            bind_addr: String::new(),
            bind_port: 7946,
            advertise_addr: String::new(),
            advertise_port: 0,
            join_members: Vec::new(),
            cluster_label: "heddle".into(),
            gossip_interval: Duration::from_millis(200),
            left_ingesters_timeout: Duration::from_secs(300),
            cluster_key_file: String::new(),
            max_clock_skew: Duration::from_secs(30),
        }
    }
}

/// The machine's hostname, the default instance id.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "heddle".into())
}

/// The first IPv4 address `host` resolves to (the hostname's, in a pod: the pod IP); loopback if none.
async fn resolve_ip(host: &str) -> IpAddr {
    match tokio::net::lookup_host((host, 0)).await {
        Ok(addrs) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            addrs
                .iter()
                .find(|a| a.is_ipv4() && !a.ip().is_loopback())
                .or_else(|| addrs.first())
                .map(|a| a.ip())
                .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
        }
        Err(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

impl RingConfig {
    /// Checks values the ring cannot work with, naming the YAML key.
    pub fn validate(&self) -> Result<(), String> {
        if self.replication_factor == 0 {
            return Err("ingester.ring.replication_factor: must be at least 1".into());
        }
        if self.num_tokens == 0 || self.num_tokens > 4096 {
            return Err(format!(
                "ingester.ring.num_tokens: {} is outside 1..=4096",
                self.num_tokens
            ));
        }
        if self.heartbeat_period.is_zero() {
            return Err("ingester.ring.heartbeat_period: must be positive".into());
        }
        if !self.heartbeat_timeout.is_zero() && self.heartbeat_timeout <= self.heartbeat_period {
            return Err(format!(
                "ingester.ring.heartbeat_timeout: {:?} must exceed ingester.ring.heartbeat_period {:?} (or be 0 to disable)",
                self.heartbeat_timeout, self.heartbeat_period
            ));
        }
        Ok(())
    }

    /// The replica-set settings.
    pub fn replication(&self) -> ReplicationConfig {
        ReplicationConfig {
            replication_factor: self.replication_factor,
            zone_awareness_enabled: self.zone_awareness_enabled,
            heartbeat_timeout: self.heartbeat_timeout,
        }
    }

    /// The id this process registers under (`instance_id`, else the hostname).
    pub fn resolved_instance_id(&self) -> String {
        if self.instance_id.is_empty() {
            hostname()
        } else {
            self.instance_id.clone()
        }
    }

    /// The lifecycler settings, resolving defaults: the hostname for the id, its address for `instance_addr`,
    /// `grpc_port` for `instance_port`.
    pub async fn lifecycler(&self, grpc_port: u16) -> Result<LifecyclerConfig, RingError> {
        if self.zone_awareness_enabled && self.instance_zone.is_empty() {
            return Err(RingError::Config(
                "ingester.ring.instance_zone: must be set when ingester.ring.zone_awareness_enabled is true".into(),
            ));
        }
        let host = if self.instance_addr.is_empty() {
            resolve_ip(&hostname()).await.to_string()
        } else {
            self.instance_addr.clone()
        };
        let port = if self.instance_port == 0 {
            grpc_port
        } else {
            self.instance_port
        };
        let addr = match host.parse::<IpAddr>() {
            Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
            _ => format!("{host}:{port}"),
        };
        Ok(LifecyclerConfig {
            instance_id: self.resolved_instance_id(),
            instance_addr: addr,
            zone: self.instance_zone.clone(),
            num_tokens: self.num_tokens,
            tokens_file_path: (!self.tokens_file_path.is_empty()).then(|| PathBuf::from(&self.tokens_file_path)),
            heartbeat_period: self.heartbeat_period,
            unregister_on_shutdown: self.unregister_on_shutdown,
        })
    }
}

impl MemberlistConfig {
    /// Checks values gossip cannot work with, naming the YAML key.
    pub fn validate(&self) -> Result<(), String> {
        if self.gossip_interval.is_zero() {
            return Err("memberlist.gossip_interval: must be positive".into());
        }
        if self.max_clock_skew < Duration::from_secs(1) {
            return Err(format!(
                "memberlist.max_clock_skew: {:?} is below 1s: members' clocks never agree that closely",
                self.max_clock_skew
            ));
        }
        if !self.bind_addr.is_empty() && self.bind_addr.parse::<IpAddr>().is_err() {
            return Err(format!(
                "memberlist.bind_addr: {:?} is not an IP address",
                self.bind_addr
            ));
        }
        if !self.advertise_addr.is_empty() && self.advertise_addr.parse::<IpAddr>().is_err() {
            return Err(format!(
                "memberlist.advertise_addr: {:?} is not an IP address",
                self.advertise_addr
            ));
        }
        Ok(())
    }

    /// The seeds with a port each (`bind_port` when a member has none; a `dns+` prefix is accepted and dropped).
    pub fn seeds(&self) -> Vec<String> {
        self.join_members
            .iter()
            .map(|m| m.trim().trim_start_matches("dns+"))
            .filter(|m| !m.is_empty())
            .map(|m| {
                let has_port = m.parse::<SocketAddr>().is_ok()
                    || m.rsplit_once(':')
                        .is_some_and(|(h, p)| !h.contains(':') && p.parse::<u16>().is_ok());
                if has_port {
                    m.to_owned()
                } else {
                    format!("{m}:{}", self.bind_port)
                }
            })
            .collect()
    }

    /// Gossip settings for a member called `node_id`.
    pub async fn gossip(&self, node_id: &str) -> Result<GossipConfig, RingError> {
        self.validate().map_err(RingError::Config)?;
        let bind_ip: IpAddr = self.bind_addr.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let advertise_ip = match self.advertise_addr.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) if !bind_ip.is_unspecified() => bind_ip,
            Err(_) => resolve_ip(&hostname()).await,
        };
        let advertise_port = if self.advertise_port == 0 {
            self.bind_port
        } else {
            self.advertise_port
        };
        Ok(GossipConfig {
            node_id: node_id.to_owned(),
            cluster_label: self.cluster_label.clone(),
            listen_addr: SocketAddr::new(bind_ip, self.bind_port),
            advertise_addr: SocketAddr::new(advertise_ip, advertise_port),
            seeds: self.seeds(),
            gossip_interval: self.gossip_interval,
            dead_node_grace_period: self.left_ingesters_timeout,
            cluster_key: self.cluster_key()?,
            max_clock_skew: self.max_clock_skew,
        })
    }

    /// The key of `cluster_key_file`, read now; `None` when no file is set.
    pub fn cluster_key(&self) -> Result<Option<ClusterKey>, RingError> {
        if self.cluster_key_file.is_empty() {
            return Ok(None);
        }
        ClusterKey::load(Path::new(&self.cluster_key_file))
            .map(Some)
            .map_err(RingError::Config)
    }
}

/// Flags for [`RingConfig`] (YAML under `ingester.ring`).
pub const RING_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "ingester.ring.replication-factor",
        key: "ingester.ring.replication_factor",
        kind: FlagKind::Value,
        help: "Copies of every series; a write needs RF/2+1 acknowledgements (single-process mode uses 1)",
    },
    FlagSpec {
        flag: "ingester.ring.instance-id",
        key: "ingester.ring.instance_id",
        kind: FlagKind::Value,
        help: "This ingester's id in the ring; empty means the hostname",
    },
    FlagSpec {
        flag: "ingester.ring.instance-addr",
        key: "ingester.ring.instance_addr",
        kind: FlagKind::Value,
        help: "Address others dial for gRPC; empty means the hostname's address",
    },
    FlagSpec {
        flag: "ingester.ring.instance-port",
        key: "ingester.ring.instance_port",
        kind: FlagKind::Value,
        help: "Port others dial for gRPC; 0 means server.grpc_listen_port",
    },
    FlagSpec {
        flag: "ingester.ring.instance-zone",
        key: "ingester.ring.instance_zone",
        kind: FlagKind::Value,
        help: "This ingester's availability zone",
    },
    FlagSpec {
        flag: "ingester.ring.zone-awareness-enabled",
        key: "ingester.ring.zone_awareness_enabled",
        kind: FlagKind::Bool,
        help: "Place the replicas of a series in distinct zones",
    },
    FlagSpec {
        flag: "ingester.ring.tokens-file-path",
        key: "ingester.ring.tokens_file_path",
        kind: FlagKind::Value,
        help: "File keeping the ingester's tokens across restarts; empty picks new ones each start",
    },
    FlagSpec {
        flag: "ingester.ring.num-tokens",
        key: "ingester.ring.num_tokens",
        kind: FlagKind::Value,
        help: "Tokens per ingester",
    },
    FlagSpec {
        flag: "ingester.ring.heartbeat-period",
        key: "ingester.ring.heartbeat_period",
        kind: FlagKind::Value,
        help: "How often an ingester refreshes its ring heartbeat",
    },
    FlagSpec {
        flag: "ingester.ring.heartbeat-timeout",
        key: "ingester.ring.heartbeat_timeout",
        kind: FlagKind::Value,
        help: "An ingester whose heartbeat is older is unhealthy and skipped; 0 disables",
    },
    FlagSpec {
        flag: "ingester.ring.unregister-on-shutdown",
        key: "ingester.ring.unregister_on_shutdown",
        kind: FlagKind::Bool,
        help: "Leave the ring on clean shutdown; false keeps the entry so a restart reclaims its tokens",
    },
];

/// Flags for [`MemberlistConfig`].
pub const MEMBERLIST_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "memberlist.bind-addr",
        key: "memberlist.bind_addr",
        kind: FlagKind::Value,
        help: "IP to listen on for gossip; empty means every interface",
    },
    FlagSpec {
        flag: "memberlist.bind-port",
        key: "memberlist.bind_port",
        kind: FlagKind::Value,
        help: "Gossip (UDP) port",
    },
    FlagSpec {
        flag: "memberlist.advertise-addr",
        key: "memberlist.advertise_addr",
        kind: FlagKind::Value,
        help: "IP other members reach this one at; empty means bind-addr or the hostname's address",
    },
    FlagSpec {
        flag: "memberlist.advertise-port",
        key: "memberlist.advertise_port",
        kind: FlagKind::Value,
        help: "Port other members reach this one at; 0 means bind-port",
    },
    FlagSpec {
        flag: "memberlist.join",
        key: "memberlist.join_members",
        kind: FlagKind::List,
        help: "Member to join, host[:port]; repeatable; DNS names are re-resolved (a headless service works)",
    },
    FlagSpec {
        flag: "memberlist.cluster-label",
        key: "memberlist.cluster_label",
        kind: FlagKind::Value,
        help: "Members with a different label ignore each other",
    },
    FlagSpec {
        flag: "memberlist.gossip-interval",
        key: "memberlist.gossip_interval",
        kind: FlagKind::Value,
        help: "Time between gossip rounds",
    },
    FlagSpec {
        flag: "memberlist.left-ingesters-timeout",
        key: "memberlist.left_ingesters_timeout",
        kind: FlagKind::Value,
        help: "How long a member that left or died stays in the ring before it is dropped",
    },
    FlagSpec {
        flag: "memberlist.cluster-key-file",
        key: "memberlist.cluster_key_file",
        kind: FlagKind::Value,
        help: "File with the cluster's shared secret (>= 16 bytes): gossip datagrams are signed with it \
               (HMAC-SHA256) and unsigned ones dropped; empty gossips unauthenticated",
    },
    FlagSpec {
        flag: "memberlist.max-clock-skew",
        key: "memberlist.max_clock_skew",
        kind: FlagKind::Value,
        help: "How far members' clocks may disagree: older or newer signed datagrams are dropped, and \
               gossiped times further in the future are not trusted",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_mimirs_and_valid() {
        let r = RingConfig::default();
        r.validate().unwrap();
        assert_eq!(
            (r.replication_factor, r.num_tokens, r.unregister_on_shutdown),
            (3, 128, true)
        );
        assert_eq!(
            (r.heartbeat_period, r.heartbeat_timeout),
            (Duration::from_secs(15), Duration::from_secs(60))
        );
        let m = MemberlistConfig::default();
        m.validate().unwrap();
        assert_eq!(m.bind_port, 7946);
    }

    #[test]
    fn validation_names_the_key() {
        let cases: [(&str, RingConfig, &str); 3] = [
            (
                "rf 0",
                RingConfig {
                    replication_factor: 0,
                    ..Default::default()
                },
                "ingester.ring.replication_factor",
            ),
            (
                "no tokens",
                RingConfig {
                    num_tokens: 0,
                    ..Default::default()
                },
                "ingester.ring.num_tokens",
            ),
            (
                "timeout below period",
                RingConfig {
                    heartbeat_timeout: Duration::from_secs(5),
                    ..Default::default()
                },
                "ingester.ring.heartbeat_timeout",
            ),
        ];
        for (name, cfg, key) in cases {
            let err = cfg.validate().unwrap_err();
            assert!(err.starts_with(key), "{name}: {err}");
        }
        let bad = MemberlistConfig {
            bind_addr: "not-an-ip".into(),
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().starts_with("memberlist.bind_addr"));
        let bad = MemberlistConfig {
            max_clock_skew: Duration::from_millis(500),
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().starts_with("memberlist.max_clock_skew"));
    }

    #[tokio::test]
    async fn the_cluster_key_is_read_at_start_and_a_bad_file_names_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let m = |file: &str| MemberlistConfig {
            bind_addr: "127.0.0.1".into(),
            cluster_key_file: file.into(),
            ..Default::default()
        };
        assert_eq!(
            m("").gossip("d").await.unwrap().cluster_key,
            None,
            "no file: open gossip"
        );
        let good = dir.path().join("key");
        std::fs::write(&good, "0123456789abcdef0123\n").unwrap();
        assert!(
            m(good.to_str().unwrap())
                .gossip("d")
                .await
                .unwrap()
                .cluster_key
                .is_some()
        );
        let short = dir.path().join("short");
        std::fs::write(&short, "tiny").unwrap();
        for (file, want) in [(short, "at least 16 are needed"), (dir.path().join("absent"), "absent")] {
            let err = m(file.to_str().unwrap()).gossip("d").await.unwrap_err().to_string();
            assert!(
                err.starts_with("memberlist.cluster_key_file") && err.contains(want),
                "{err}"
            );
        }
    }

    #[test]
    fn seeds_get_the_default_port() {
        let m = MemberlistConfig {
            join_members: vec![
                "heddle-gossip-ring.ns.svc.cluster.local".into(),
                "dns+ring:7000".into(),
                "10.0.0.1:7947".into(),
                "[::1]:7000".into(),
                " ".into(),
            ],
            ..Default::default()
        };
        assert_eq!(
            m.seeds(),
            [
                "heddle-gossip-ring.ns.svc.cluster.local:7946",
                "ring:7000",
                "10.0.0.1:7947",
                "[::1]:7000"
            ]
        );
    }

    #[tokio::test]
    async fn lifecycler_and_gossip_settings_resolve_defaults() {
        let r = RingConfig {
            instance_id: "ing-7".into(),
            instance_addr: "10.1.2.3".into(),
            tokens_file_path: "/data/tokens".into(),
            ..Default::default()
        };
        let lc = r.lifecycler(9095).await.unwrap();
        assert_eq!(
            (lc.instance_id.as_str(), lc.instance_addr.as_str()),
            ("ing-7", "10.1.2.3:9095")
        );
        assert_eq!(lc.tokens_file_path, Some(PathBuf::from("/data/tokens")));
        let zoned = RingConfig {
            zone_awareness_enabled: true,
            ..r
        };
        assert!(
            zoned
                .lifecycler(9095)
                .await
                .unwrap_err()
                .to_string()
                .contains("instance_zone")
        );

        let m = MemberlistConfig {
            bind_addr: "127.0.0.1".into(),
            bind_port: 17946,
            ..Default::default()
        };
        let g = m.gossip("ing-7").await.unwrap();
        assert_eq!(g.listen_addr, g.advertise_addr);
        assert_eq!(g.listen_addr.to_string(), "127.0.0.1:17946");
        assert!(!RingConfig::default().resolved_instance_id().is_empty());
    }
}
