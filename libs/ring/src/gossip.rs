//! The gossip membership backend over `chitchat` (scuttlebutt anti-entropy with a phi-accrual failure
//! detector), the equivalent of dskit's memberlist KV.
//!
//! Every process is a gossip member; ingesters also publish their ring entry in their own node state
//! ([`codec`]). A refresh task turns chitchat's state into a [`MembershipView`] whenever a node's version or
//! liveness changes: members the failure detector declares dead stay in the view as unreachable (they keep
//! their tokens, so a short outage does not move series), until chitchat drops them after
//! `dead_node_grace_period`. A member restarting with the same id is a new chitchat generation; the newest
//! live generation wins.

mod auth;
mod codec;
mod metrics;

pub use auth::ClusterKey;
pub use metrics::GossipMetrics;

use crate::desc::{MembershipView, RingDesc};
use crate::error::RingError;
use crate::instance::{InstanceDesc, InstanceState};
use crate::membership::Membership;
use chitchat::transport::Transport;
use chitchat::{Chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig, ProtocolVersion};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// Settings of one gossip member.
#[derive(Debug, Clone, PartialEq)]
pub struct GossipConfig {
    /// This member's id; for an ingester, its ring instance id.
    pub node_id: String,
    /// Members with another label ignore each other (`memberlist.cluster_label`).
    pub cluster_label: String,
    /// UDP address to listen on.
    pub listen_addr: SocketAddr,
    /// Address other members reach this one at.
    pub advertise_addr: SocketAddr,
    /// Seeds: `host:port` (DNS names are resolved, and re-resolved periodically, by chitchat).
    pub seeds: Vec<String>,
    pub gossip_interval: Duration,
    /// How long a dead member (and a forget marker) is kept before it is dropped.
    pub dead_node_grace_period: Duration,
    /// Sign and verify every datagram with this key; `None` gossips unauthenticated (anyone who can send
    /// UDP to the gossip port can join).
    pub cluster_key: Option<ClusterKey>,
    /// How far members' clocks may disagree: signed datagrams older or newer than this are dropped, and
    /// gossiped times beyond now plus this are clamped or ignored.
    pub max_clock_skew: Duration,
}

/// A running gossip member.
pub struct GossipMembership {
    node_id: String,
    chitchat: Arc<tokio::sync::Mutex<Chitchat>>,
    handle: tokio::sync::Mutex<Option<ChitchatHandle>>,
    tx: watch::Sender<Arc<MembershipView>>,
    refresh: Arc<Notify>,
    stop: CancellationToken,
    max_clock_skew: Duration,
    metrics: GossipMetrics,
}

impl std::fmt::Debug for GossipMembership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GossipMembership")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl GossipMembership {
    /// Binds, starts gossiping with the seeds and starts the refresh task. `transport` is the UDP one of
    /// [`Self::start_udp`] in production, a `ChannelTransport` in tests; `cfg.cluster_key` is applied by
    /// [`Self::start_udp`] only.
    pub async fn start(
        cfg: GossipConfig,
        transport: &dyn Transport,
        metrics: GossipMetrics,
    ) -> Result<Arc<Self>, RingError> {
        let generation = crate::ring::now_ms().max(0) as u64;
        let chitchat_id = ChitchatId::new(cfg.node_id.clone(), generation, cfg.advertise_addr);
        let config = ChitchatConfig {
            chitchat_id,
            cluster_id: cfg.cluster_label.clone(),
            gossip_interval: cfg.gossip_interval,
            listen_addr: cfg.listen_addr,
            seed_nodes: cfg.seeds.clone(),
            failure_detector_config: FailureDetectorConfig {
                initial_interval: cfg.gossip_interval,
                dead_node_grace_period: cfg.dead_node_grace_period,
                ..FailureDetectorConfig::default()
            },
            marked_for_deletion_grace_period: cfg.dead_node_grace_period,
            catchup_callback: None,
            extra_liveness_predicate: None,
            protocol_version: ProtocolVersion::V0,
        };
        let handle = chitchat::spawn_chitchat(config, Vec::new(), transport)
            .await
            .map_err(|e| RingError::Memberlist(format!("cannot start gossip on {}: {e:#}", cfg.listen_addr)))?;
        let chitchat = handle.chitchat();
        let (tx, _) = watch::channel(Arc::new(MembershipView::default()));
        let me = Arc::new(Self {
            node_id: cfg.node_id.clone(),
            chitchat,
            handle: tokio::sync::Mutex::new(Some(handle)),
            tx,
            refresh: Arc::new(Notify::new()),
            stop: CancellationToken::new(),
            max_clock_skew: cfg.max_clock_skew,
            metrics,
        });
        tokio::spawn(refresh_loop(Arc::clone(&me), cfg.gossip_interval));
        tracing::info!(node = %cfg.node_id, listen = %cfg.listen_addr, advertise = %cfg.advertise_addr, seeds = ?cfg.seeds, "gossip started");
        Ok(me)
    }

    /// [`Self::start`] over UDP, the production transport: every datagram signed and verified with
    /// `cfg.cluster_key` when there is one (see [`auth`]).
    pub async fn start_udp(cfg: GossipConfig, metrics: GossipMetrics) -> Result<Arc<Self>, RingError> {
        match cfg.cluster_key.clone() {
            Some(key) => {
                let transport = auth::AuthUdpTransport {
                    key,
                    max_clock_skew: cfg.max_clock_skew,
                    metrics: metrics.clone(),
                };
                Self::start(cfg, &transport, metrics).await
            }
            None => {
                tracing::warn!(
                    listen = %cfg.listen_addr,
                    "gossip is not authenticated: anyone who can reach this UDP port can join the ring, claim \
                     tokens and forget members; set memberlist.cluster_key_file on every member"
                );
                Self::start(cfg, &chitchat::transport::UdpTransport, metrics).await
            }
        }
    }

    /// This member's id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Ids of the members the failure detector currently considers alive (ring owners or not), self included.
    pub async fn live_members(&self) -> BTreeSet<String> {
        let c = self.chitchat.lock().await;
        c.live_nodes().map(|id| id.node_id.to_string()).collect()
    }

    /// Stops gossiping. Call after [`Membership::unregister`] and a short pause so the LEFT entry spreads.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        if let Some(handle) = self.handle.lock().await.take()
            && let Err(e) = handle.shutdown().await
        {
            tracing::warn!(error = %e, "gossip shutdown failed");
        }
    }

    /// Runs `f` on the chitchat state, then wakes the refresh task (so a change is seen at once).
    pub(crate) async fn with_chitchat<T>(&self, f: impl FnOnce(&mut Chitchat) -> T) -> T {
        let out = f(&mut *self.chitchat.lock().await);
        self.refresh.notify_one();
        out
    }

    async fn set_own(&self, desc: &InstanceDesc) -> Result<(), RingError> {
        if desc.id != self.node_id {
            return Err(RingError::Memberlist(format!(
                "member {} cannot publish the entry of instance {}: each instance publishes its own",
                self.node_id, desc.id
            )));
        }
        {
            let mut c = self.chitchat.lock().await;
            let state = c.self_node_state();
            for (k, v) in codec::encode(desc) {
                state.set(k, v);
            }
        }
        self.refresh.notify_one();
        Ok(())
    }
}

impl Drop for GossipMembership {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[async_trait::async_trait]
impl Membership for GossipMembership {
    async fn publish(&self, desc: &InstanceDesc) -> Result<(), RingError> {
        self.set_own(desc).await
    }

    async fn unregister(&self, id: &str) -> Result<(), RingError> {
        let left = InstanceDesc {
            id: id.to_owned(),
            addr: String::new(),
            zone: String::new(),
            state: InstanceState::Left,
            tokens: Vec::new(),
            heartbeat_ms: crate::ring::now_ms(),
            registered_at_ms: 0,
        };
        self.set_own(&left).await
    }

    async fn forget(&self, id: &str) -> Result<(), RingError> {
        {
            let mut c = self.chitchat.lock().await;
            c.self_node_state()
                .set_with_ttl(format!("{}{id}", codec::FORGET_PREFIX), crate::ring::now_ms());
        }
        tracing::info!(instance = %id, "forgetting ring member");
        self.refresh.notify_one();
        Ok(())
    }

    fn watch(&self) -> watch::Receiver<Arc<MembershipView>> {
        self.tx.subscribe()
    }
}

/// What the view depends on: every node's identity, version and liveness.
type Fingerprint = Vec<(ChitchatId, u64, bool)>;

async fn refresh_loop(me: Arc<GossipMembership>, interval: Duration) {
    let mut last: Option<Fingerprint> = None;
    loop {
        {
            let c = me.chitchat.lock().await;
            let live: HashSet<&ChitchatId> = c.live_nodes().collect();
            let fingerprint: Fingerprint = c
                .node_states()
                .iter()
                .map(|(id, state)| (id.clone(), state.max_version(), live.contains(id)))
                .collect();
            if last.as_ref() != Some(&fingerprint) {
                let bounds = TimeBounds {
                    now_ms: crate::ring::now_ms(),
                    max_skew_ms: i64::try_from(me.max_clock_skew.as_millis()).unwrap_or(i64::MAX),
                };
                let view = build_view(&c, &live, bounds, &me.metrics);
                me.tx.send_if_modified(|current| {
                    if **current == view {
                        false
                    } else {
                        *current = Arc::new(view);
                        true
                    }
                });
                last = Some(fingerprint);
            }
        }
        tokio::select! {
            _ = me.stop.cancelled() => return,
            _ = me.refresh.notified() => {}
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// Gossiped times are trusted up to `now_ms + max_skew_ms`: a member's clock may run that far ahead.
#[derive(Debug, Clone, Copy)]
struct TimeBounds {
    now_ms: i64,
    max_skew_ms: i64,
}

impl TimeBounds {
    fn in_future(&self, at_ms: i64) -> bool {
        at_ms > self.now_ms.saturating_add(self.max_skew_ms)
    }
}

/// The membership view of chitchat's state. Times beyond [`TimeBounds`] are not trusted: a forget marker in
/// the future is ignored (it would hide the member until its heartbeat caught up, possibly forever); a
/// heartbeat in the future is ignored too (the member counts as not heard from, so unhealthy: such a
/// heartbeat would keep a dead member healthy until the clock reached it); a registration time in the
/// future is clamped to now (it only ranks the member's duplicated tokens). Each is counted in
/// `heddle_memberlist_future_values_total`.
fn build_view(
    c: &Chitchat,
    live: &HashSet<&ChitchatId>,
    bounds: TimeBounds,
    metrics: &GossipMetrics,
) -> MembershipView {
    // Newest live generation of each node id, else its newest dead one.
    let mut best: BTreeMap<&str, (&ChitchatId, bool)> = BTreeMap::new();
    for id in c.node_states().keys() {
        let alive = live.contains(id);
        let better = match best.get(&*id.node_id) {
            None => true,
            Some((cur, cur_alive)) => (alive, id.generation_id) > (*cur_alive, cur.generation_id),
        };
        if better {
            best.insert(&id.node_id, (id, alive));
        }
    }
    let mut forgotten: BTreeMap<String, i64> = BTreeMap::new();
    for state in c.node_states().values() {
        for (key, value) in state.iter_prefix(codec::FORGET_PREFIX) {
            if let (Some(id), Ok(at)) = (key.strip_prefix(codec::FORGET_PREFIX), value.value.parse::<i64>()) {
                if bounds.in_future(at) {
                    metrics.future_value("forget");
                    continue;
                }
                let e = forgotten.entry(id.to_owned()).or_insert(at);
                *e = (*e).max(at);
            }
        }
    }
    let mut desc = RingDesc::default();
    let mut unreachable = BTreeSet::new();
    for (node_id, (id, alive)) in best {
        let Some(state) = c.node_state(id) else { continue };
        match codec::decode(node_id, |k| state.get(k)) {
            Ok(Some(mut inst)) => {
                if bounds.in_future(inst.heartbeat_ms) {
                    // Ignored, as if never heard from: clamping to now would refresh it at every rebuild, and
                    // keeping it would hold a dead member healthy (and unforgettable) until the clock got there.
                    metrics.future_value("heartbeat");
                    inst.heartbeat_ms = 0;
                }
                if bounds.in_future(inst.registered_at_ms) {
                    metrics.future_value("registered_at");
                    inst.registered_at_ms = bounds.now_ms;
                }
                if forgotten.get(node_id).is_some_and(|&at| inst.heartbeat_ms <= at)
                    || inst.state == InstanceState::Left
                {
                    continue;
                }
                if !alive {
                    unreachable.insert(node_id.to_owned());
                }
                desc.upsert(inst);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "ignoring an undecodable ring entry"),
        }
    }
    MembershipView { desc, unreachable }
}

#[cfg(test)]
#[path = "gossip/tests.rs"]
mod tests;
