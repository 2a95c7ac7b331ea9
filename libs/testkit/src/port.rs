//! Port picking for processes started by tests.

use crate::TestkitError;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out: above the well-known and registered ports services on the machine tend to use.
const LOWEST: u32 = 10_000;
/// Ports tried before falling back to one the kernel picks.
const ATTEMPTS: u32 = 256;

/// Returns a TCP port on 127.0.0.1 that was free a moment ago (bound and closed again), for a process the test
/// starts to listen on.
///
/// The port is taken below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), which outgoing
/// connections and `bind(0)` draw from: a port picked there could become another connection's source port
/// before the process binds it, and fail its start with "Address already in use". Each test process walks the
/// range from its own starting point (from its pid) and never hands out a port twice, so concurrent tests do
/// not pick alike. A port taken since it was checked is still possible; tests accept that small race rather than
/// sharing fixed ports.
pub fn free_port() -> Result<u16, TestkitError> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let top = ephemeral_start().max(LOWEST + ATTEMPTS);
    let span = top - LOWEST;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..ATTEMPTS {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = LOWEST + (start + n) % span;
        if let Ok(port) = u16::try_from(port)
            && TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            return Ok(port);
        }
    }
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| TestkitError::io("binding 127.0.0.1:0", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| TestkitError::io("reading the bound address", e))?
        .port();
    Ok(port)
}

/// The first port of the kernel's ephemeral range (Linux's default, 32768, where it cannot be read).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_port_is_bindable_and_nonzero() {
        let port = free_port().expect("free port");
        assert_ne!(port, 0);
        TcpListener::bind(("127.0.0.1", port)).expect("port is bindable again");
    }

    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_differ() {
        let ports: Vec<u16> = (0..20).map(|_| free_port().expect("free port")).collect();
        for p in &ports {
            assert!(
                (LOWEST..ephemeral_start()).contains(&u32::from(*p)),
                "{p} is outside [{LOWEST}, {})",
                ephemeral_start()
            );
        }
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
    }
}
