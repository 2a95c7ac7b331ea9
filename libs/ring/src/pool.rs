//! A cache of one client per instance address, shared by every lookup (dskit's `ring_client.Pool`, without
//! its health checks: unhealthy instances are already skipped by the ring).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

/// Makes the client for an address; clients are expected to connect lazily, so this does not block.
pub type ClientFactory<C> = Arc<dyn Fn(&str) -> Result<C, String> + Send + Sync>;

/// One `C` per address, created on first use.
pub struct ClientPool<C> {
    factory: ClientFactory<C>,
    clients: RwLock<HashMap<String, C>>,
}

impl<C> fmt::Debug for ClientPool<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.clients.read().map(|c| c.len()).unwrap_or(0);
        f.debug_struct("ClientPool").field("clients", &n).finish()
    }
}

impl<C: Clone> ClientPool<C> {
    /// An empty pool creating clients with `factory`.
    pub fn new(factory: ClientFactory<C>) -> Self {
        Self {
            factory,
            clients: RwLock::new(HashMap::new()),
        }
    }

    /// The client for `addr`: a shared read lock on the hit path, the factory on a miss.
    pub fn get(&self, addr: &str) -> Result<C, String> {
        if let Some(c) = self.clients.read().unwrap_or_else(|e| e.into_inner()).get(addr) {
            return Ok(c.clone());
        }
        let mut clients = self.clients.write().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(addr) {
            return Ok(c.clone());
        }
        let c = (self.factory)(addr)?;
        clients.insert(addr.to_owned(), c.clone());
        Ok(c)
    }

    /// Drops clients of addresses not in `keep` (instances that left the ring).
    pub fn retain<'a>(&self, keep: impl IntoIterator<Item = &'a str>) {
        let keep: std::collections::HashSet<&str> = keep.into_iter().collect();
        self.clients
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|addr, _| keep.contains(addr.as_str()));
    }

    /// Number of cached clients.
    pub fn len(&self) -> usize {
        self.clients.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when no client is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn creates_once_per_address_and_forgets_departed_ones() {
        let made = Arc::new(AtomicUsize::new(0));
        let m = Arc::clone(&made);
        let pool: ClientPool<String> = ClientPool::new(Arc::new(move |addr: &str| {
            m.fetch_add(1, Ordering::SeqCst);
            if addr.is_empty() {
                Err("empty address".into())
            } else {
                Ok(format!("client-{addr}"))
            }
        }));
        assert_eq!(pool.get("a:1").unwrap(), "client-a:1");
        assert_eq!(pool.get("a:1").unwrap(), "client-a:1");
        assert_eq!(pool.get("b:1").unwrap(), "client-b:1");
        assert_eq!(made.load(Ordering::SeqCst), 2);
        assert_eq!(pool.get("").unwrap_err(), "empty address");
        pool.retain(["b:1"]);
        assert_eq!(pool.len(), 1);
        pool.get("a:1").unwrap();
        assert_eq!(made.load(Ordering::SeqCst), 4, "re-created after retain dropped it");
    }
}
