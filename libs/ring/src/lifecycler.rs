//! The ingester lifecycler: registers the instance with its tokens, heartbeats, and walks it through
//! JOINING -> ACTIVE -> LEAVING -> unregistered (or kept, for a restart that takes the tokens back).

use crate::error::RingError;
use crate::instance::{InstanceDesc, InstanceState};
use crate::membership::Membership;
use crate::tokens::{generate_tokens, load_tokens, store_tokens};
use heddle_model::{Clock, SystemClock};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, watch};
use tokio_util::sync::CancellationToken;

/// The system clock, as [`Lifecycler::start`] takes it (tests pass a `heddle_model::ManualClock` to control
/// heartbeat timestamps).
pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// What the lifecycler registers and how often it heartbeats.
#[derive(Debug, Clone, PartialEq)]
pub struct LifecyclerConfig {
    pub instance_id: String,
    /// gRPC `host:port` others dial.
    pub instance_addr: String,
    pub zone: String,
    pub num_tokens: usize,
    /// Where tokens are kept across restarts; `None` picks new tokens on every start.
    pub tokens_file_path: Option<PathBuf>,
    pub heartbeat_period: Duration,
    /// Remove the entry on clean shutdown (true) or leave it LEAVING so a restart keeps its ring position.
    pub unregister_on_shutdown: bool,
}

struct Inner {
    cfg: LifecyclerConfig,
    membership: Arc<dyn Membership>,
    clock: Arc<dyn Clock>,
    desc: Mutex<InstanceDesc>,
    state_tx: watch::Sender<InstanceState>,
}

/// A registered ingester. Heartbeats run on a background task until [`Lifecycler::stop`].
pub struct Lifecycler {
    inner: Arc<Inner>,
    stop: CancellationToken,
    heartbeats: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl fmt::Debug for Lifecycler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lifecycler")
            .field("cfg", &self.inner.cfg)
            .field("state", &*self.inner.state_tx.borrow())
            .finish()
    }
}

impl Lifecycler {
    /// Picks tokens (the tokens file, else this id's entry already in the ring, else fresh random ones that no
    /// other member owns), saves them, registers JOINING and starts heartbeating.
    pub async fn start(
        cfg: LifecyclerConfig,
        membership: Arc<dyn Membership>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, RingError> {
        let view = Arc::clone(&membership.watch().borrow());
        let from_file = match &cfg.tokens_file_path {
            Some(path) => load_tokens(path)?,
            None => None,
        };
        let in_ring = view.desc.instances.get(&cfg.instance_id).map(|d| d.tokens.clone());
        let mut tokens = from_file.or(in_ring).unwrap_or_default();
        if tokens.len() < cfg.num_tokens {
            let mut taken = view.desc.tokens_in_use();
            taken.extend(tokens.iter().copied());
            let more = generate_tokens(cfg.num_tokens - tokens.len(), &taken, &mut rand::rng())?;
            tokens.extend(more);
            tokens.sort_unstable();
        }
        if let Some(path) = &cfg.tokens_file_path {
            store_tokens(path, &tokens)?;
        }
        let now = clock.now_ms();
        let desc = InstanceDesc {
            id: cfg.instance_id.clone(),
            addr: cfg.instance_addr.clone(),
            zone: cfg.zone.clone(),
            state: InstanceState::Joining,
            tokens,
            heartbeat_ms: now,
            registered_at_ms: now,
        };
        membership.publish(&desc).await?;
        tracing::info!(instance = %desc.id, addr = %desc.addr, zone = %desc.zone, tokens = desc.tokens.len(), "registered in the ring as JOINING");
        let inner = Arc::new(Inner {
            cfg,
            membership,
            clock,
            desc: Mutex::new(desc),
            state_tx: watch::channel(InstanceState::Joining).0,
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(heartbeat_loop(Arc::clone(&inner), stop.clone()));
        Ok(Self {
            inner,
            stop,
            heartbeats: std::sync::Mutex::new(Some(task)),
        })
    }

    /// The current state.
    pub fn state(&self) -> InstanceState {
        *self.inner.state_tx.borrow()
    }

    /// Follows state changes (readiness: ready only when ACTIVE).
    pub fn state_watch(&self) -> watch::Receiver<InstanceState> {
        self.inner.state_tx.subscribe()
    }

    /// A copy of the entry as last published.
    pub async fn desc(&self) -> InstanceDesc {
        self.inner.desc.lock().await.clone()
    }

    /// Moves to `state` and publishes it at once.
    pub async fn set_state(&self, state: InstanceState) -> Result<(), RingError> {
        let mut desc = self.inner.desc.lock().await;
        desc.state = state;
        desc.heartbeat_ms = self.inner.clock.now_ms();
        self.inner.membership.publish(&desc).await?;
        self.inner.state_tx.send_replace(state);
        tracing::info!(instance = %desc.id, state = %state, "ring state changed");
        Ok(())
    }

    /// JOINING -> ACTIVE: the WAL is replayed and the ingester takes writes.
    pub async fn set_active(&self) -> Result<(), RingError> {
        self.set_state(InstanceState::Active).await
    }

    /// Stops heartbeating and, with `unregister_on_shutdown`, removes the entry; otherwise leaves it LEAVING
    /// (callers move to LEAVING first, before draining) so a restart with the same id takes its tokens back.
    pub async fn stop(&self) -> Result<(), RingError> {
        self.stop.cancel();
        let task = self.heartbeats.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            let _ = task.await;
        }
        if self.inner.cfg.unregister_on_shutdown {
            self.inner.membership.unregister(&self.inner.cfg.instance_id).await?;
            tracing::info!(instance = %self.inner.cfg.instance_id, "unregistered from the ring");
        } else if self.state() != InstanceState::Leaving {
            self.set_state(InstanceState::Leaving).await?;
        }
        Ok(())
    }
}

impl Drop for Lifecycler {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn heartbeat_loop(inner: Arc<Inner>, stop: CancellationToken) {
    let period = inner.cfg.heartbeat_period.max(Duration::from_millis(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut desc = inner.desc.lock().await;
        desc.heartbeat_ms = inner.clock.now_ms();
        // Re-publishing the whole entry also restores it after an operator forgot this live instance.
        if let Err(e) = inner.membership.publish(&desc).await {
            tracing::warn!(instance = %desc.id, error = %e, "ring heartbeat failed");
        }
    }
}

#[cfg(test)]
#[path = "lifecycler/tests.rs"]
mod tests;
