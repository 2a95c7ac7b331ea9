//! Authenticated gossip datagrams: every datagram carries an HMAC-SHA256 tag under the cluster key, and a
//! member drops every datagram whose tag is missing or wrong before chitchat sees it. A stranger on the
//! network can then neither join the ring, publish tokens, forget members nor take part in HA elections:
//! chitchat never learns it exists.
//!
//! Wire format (chitchat's envelope unchanged, a trailer appended):
//!
//! | bytes | content |
//! |---|---|
//! | n | chitchat envelope, as chitchat's own UDP transport sends it |
//! | 4 | marker `HGA1` (tells a datagram without a tag from one with a wrong tag) |
//! | 8 | sender's wall clock, unix ms, i64 little-endian |
//! | 32 | HMAC-SHA256 over everything before it, keyed by `HMAC-SHA256(cluster key, "heddle gossip v1")` |
//!
//! Replay: a datagram whose timestamp is more than `max_clock_skew` away from the receiver's clock is
//! dropped, so a captured datagram is useless once that window has passed. Inside the window a replay
//! changes nothing: chitchat's state is versioned per key, and a member applies only versions newer than
//! the ones it holds, so a replayed delta is a no-op and a replayed digest only earns the (tagged, and
//! therefore useless to a stranger without the key) reply a member would send anyway. The payload is not
//! encrypted: membership and HA elections are not secret, only their integrity matters.

use super::metrics::GossipMetrics;
use anyhow::Context;
use aws_lc_rs::hmac;
use chitchat::ChitchatEnvelope;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport};
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MARKER: &[u8; 4] = b"HGA1";
const TIMESTAMP_LEN: usize = 8;
const TAG_LEN: usize = 32;
/// Bytes appended to every datagram.
pub(crate) const TRAILER_LEN: usize = MARKER.len() + TIMESTAMP_LEN + TAG_LEN;
const _: () = assert!(TRAILER_LEN <= chitchat::TRANSPORT_RESERVED_LEN);
/// The largest UDP payload (IPv4), as chitchat's own transport receives.
const MAX_DATAGRAM: usize = 65_507;
/// Domain separation: the file's key is never used directly, so the same secret used elsewhere cannot be
/// turned into gossip tags.
const KEY_CONTEXT: &[u8] = b"heddle gossip v1";
/// Dropped datagrams are logged at most this often per member (a stranger can send many).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The shared secret gossip datagrams are signed with (`--memberlist.cluster-key-file`). Its `Debug`
/// never shows the key.
#[derive(Clone)]
pub struct ClusterKey(Arc<hmac::Key>);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(<redacted>)")
    }
}

impl PartialEq for ClusterKey {
    /// Keys are compared by identity: configurations holding clones of one loaded key are equal.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl ClusterKey {
    /// Shortest secret accepted, in bytes.
    pub const MIN_LEN: usize = 16;

    /// The key derived from `secret`, which must be at least [`Self::MIN_LEN`] bytes.
    pub fn new(secret: &[u8]) -> Result<Self, String> {
        if secret.len() < Self::MIN_LEN {
            return Err(format!(
                "the cluster key is {} bytes; at least {} are needed (e.g. `openssl rand -base64 32`)",
                secret.len(),
                Self::MIN_LEN
            ));
        }
        let outer = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let derived = hmac::sign(&outer, KEY_CONTEXT);
        Ok(Self(Arc::new(hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref()))))
    }

    /// Reads the key from `path`: the file's bytes, surrounding whitespace (a trailing newline) removed.
    pub fn load(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("memberlist.cluster_key_file {}: {e}", path.display()))?;
        Self::new(bytes.trim_ascii()).map_err(|e| format!("memberlist.cluster_key_file {}: {e}", path.display()))
    }

    /// Appends the trailer for `buf` (an encoded envelope) sent at `now_ms`.
    fn seal(&self, buf: &mut Vec<u8>, now_ms: i64) {
        buf.extend_from_slice(MARKER);
        buf.extend_from_slice(&now_ms.to_le_bytes());
        let tag = hmac::sign(&self.0, buf);
        buf.extend_from_slice(tag.as_ref());
    }

    /// The envelope bytes of `datagram` if its trailer is present, its tag right and its timestamp within
    /// `max_skew` of `now_ms`; else why it must be dropped.
    fn open<'a>(&self, datagram: &'a [u8], now_ms: i64, max_skew: Duration) -> Result<&'a [u8], Rejected> {
        let Some(body_len) = datagram.len().checked_sub(TRAILER_LEN) else {
            return Err(Rejected::MissingTag);
        };
        let (signed, tag) = datagram.split_at(datagram.len() - TAG_LEN);
        if &signed[body_len..body_len + MARKER.len()] != MARKER {
            return Err(Rejected::MissingTag);
        }
        // Constant time: aws-lc compares the tags without an early exit.
        hmac::verify(&self.0, signed, tag).map_err(|_| Rejected::BadTag)?;
        let mut ts = [0u8; TIMESTAMP_LEN];
        ts.copy_from_slice(&signed[body_len + MARKER.len()..]);
        let sent_ms = i64::from_le_bytes(ts);
        let skew_ms = i64::try_from(max_skew.as_millis()).unwrap_or(i64::MAX);
        if now_ms.saturating_sub(sent_ms).saturating_abs() > skew_ms {
            return Err(Rejected::Stale { sent_ms });
        }
        Ok(&datagram[..body_len])
    }
}

/// Why a datagram was dropped; the `reason` label of `heddle_memberlist_dropped_datagrams_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// No trailer: a member without the key (or not Heddle at all).
    MissingTag,
    /// A trailer whose tag does not match: another key, or a tampered datagram.
    BadTag,
    /// A valid tag but a timestamp outside the allowed clock skew: a replay, or a clock far off.
    Stale { sent_ms: i64 },
    /// A valid tag around bytes that are not a chitchat message (a member of another version).
    Malformed,
}

impl Rejected {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::MissingTag => "missing-tag",
            Self::BadTag => "bad-tag",
            Self::Stale { .. } => "stale",
            Self::Malformed => "malformed",
        }
    }
}

/// chitchat's UDP transport with every datagram signed and verified under a [`ClusterKey`].
pub(crate) struct AuthUdpTransport {
    pub(crate) key: ClusterKey,
    pub(crate) max_clock_skew: Duration,
    pub(crate) metrics: GossipMetrics,
}

#[async_trait::async_trait]
impl Transport for AuthUdpTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let socket = tokio::net::UdpSocket::bind(listen_addr)
            .await
            .with_context(|| format!("failed to bind to {listen_addr}/UDP for gossip"))?;
        Ok(Box::new(AuthUdpSocket {
            socket,
            key: self.key.clone(),
            max_clock_skew: self.max_clock_skew,
            metrics: self.metrics.clone(),
            buf_send: Vec::with_capacity(MAX_DATAGRAM),
            buf_recv: vec![0u8; MAX_DATAGRAM].into_boxed_slice(),
            last_log: None,
        }))
    }
}

struct AuthUdpSocket {
    socket: tokio::net::UdpSocket,
    key: ClusterKey,
    max_clock_skew: Duration,
    metrics: GossipMetrics,
    buf_send: Vec<u8>,
    buf_recv: Box<[u8]>,
    last_log: Option<Instant>,
}

impl AuthUdpSocket {
    /// Counts a dropped datagram and logs it unless one was logged less than [`LOG_EVERY`] ago.
    fn dropped(&mut self, from: SocketAddr, len: usize, why: Rejected, detail: Option<String>) {
        self.metrics.dropped_datagram(why.reason());
        if self.last_log.is_some_and(|at| at.elapsed() < LOG_EVERY) {
            return;
        }
        self.last_log = Some(Instant::now());
        let detail = match (why, detail) {
            (_, Some(d)) => d,
            (Rejected::Stale { sent_ms }, None) => format!(
                "sent at {sent_ms} ms, more than memberlist.max_clock_skew ({:?}) from this member's clock",
                self.max_clock_skew
            ),
            (_, None) => String::new(),
        };
        tracing::warn!(%from, len, reason = why.reason(), detail, "dropping a gossip datagram that is not authenticated \
            with this cluster's key (memberlist.cluster_key_file); further drops are counted in \
            heddle_memberlist_dropped_datagrams_total and logged at most every 10s");
    }
}

fn is_transient(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::OutOfMemory | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused
    )
}

#[async_trait::async_trait]
impl Socket for AuthUdpSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        self.socket.local_addr().context("failed to get UDP socket address")
    }

    async fn send(&mut self, to: SocketAddr, envelope: ChitchatEnvelope) -> anyhow::Result<SendOutcome> {
        self.buf_send.clear();
        envelope.serialize(&mut self.buf_send);
        self.key.seal(&mut self.buf_send, crate::ring::now_ms());
        let num_bytes_sent = self
            .socket
            .send_to(&self.buf_send, to)
            .await
            .context("failed to send chitchat message to peer")?;
        Ok(SendOutcome { num_bytes_sent })
    }

    /// Returns the next authenticated message; everything else is dropped here. Cancellable, as chitchat
    /// needs: no state is kept across an await.
    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        loop {
            let (len, from) = match self.socket.recv_from(&mut self.buf_recv).await {
                Ok(r) => r,
                Err(e) if is_transient(&e) => {
                    tracing::warn!(error = %e, "transient UDP recv error");
                    continue;
                }
                Err(e) => return Err(e).context("fatal UDP recv error"),
            };
            let opened = self
                .key
                .open(&self.buf_recv[..len], crate::ring::now_ms(), self.max_clock_skew)
                .map(|body| {
                    let mut cursor = body;
                    ChitchatEnvelope::deserialize(&mut cursor).map_err(|e| e.to_string())
                });
            match opened {
                Ok(Ok(envelope)) => {
                    return Ok(RecvOutcome {
                        from_addr: from,
                        envelope,
                        num_bytes_received: len,
                    });
                }
                Ok(Err(e)) => self.dropped(from, len, Rejected::Malformed, Some(e)),
                Err(why) => self.dropped(from, len, why, None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;
    const SKEW: Duration = Duration::from_secs(30);

    fn key(s: &str) -> ClusterKey {
        ClusterKey::new(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_sealed_datagram_opens_only_with_the_same_key_untouched_and_in_time() {
        let k = key("0123456789abcdef-one");
        let body = b"chitchat envelope bytes".to_vec();
        let mut sealed = body.clone();
        k.seal(&mut sealed, NOW);
        assert_eq!(sealed.len(), body.len() + TRAILER_LEN);
        assert_eq!(k.open(&sealed, NOW + 1_000, SKEW), Ok(&body[..]));

        let cases: Vec<(&str, Vec<u8>, ClusterKey, i64, Rejected)> = vec![
            ("unsigned", body.clone(), k.clone(), NOW, Rejected::MissingTag),
            ("empty", Vec::new(), k.clone(), NOW, Rejected::MissingTag),
            (
                "other key",
                sealed.clone(),
                key("0123456789abcdef-two"),
                NOW,
                Rejected::BadTag,
            ),
            (
                "flipped body byte",
                {
                    let mut s = sealed.clone();
                    s[0] ^= 1;
                    s
                },
                k.clone(),
                NOW,
                Rejected::BadTag,
            ),
            (
                "forged timestamp",
                {
                    let mut s = sealed.clone();
                    s[body.len() + MARKER.len()] ^= 1;
                    s
                },
                k.clone(),
                NOW,
                Rejected::BadTag,
            ),
            (
                "replayed later",
                sealed.clone(),
                k.clone(),
                NOW + 31_000,
                Rejected::Stale { sent_ms: NOW },
            ),
            (
                "from the future",
                sealed.clone(),
                k.clone(),
                NOW - 31_000,
                Rejected::Stale { sent_ms: NOW },
            ),
        ];
        for (name, datagram, key, now, want) in cases {
            assert_eq!(key.open(&datagram, now, SKEW), Err(want), "{name}");
        }
    }

    #[test]
    fn short_keys_are_refused_and_the_key_never_prints() {
        let err = ClusterKey::new(b"short").unwrap_err();
        assert!(err.contains("5 bytes") && err.contains("at least 16"), "{err}");
        assert_eq!(format!("{:?}", key("0123456789abcdef")), "ClusterKey(<redacted>)");
    }

    #[test]
    fn a_key_file_is_read_without_its_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "0123456789abcdef\n").unwrap();
        let from_file = ClusterKey::load(&path).unwrap();
        let mut sealed = b"x".to_vec();
        key("0123456789abcdef").seal(&mut sealed, NOW);
        assert!(
            from_file.open(&sealed, NOW, SKEW).is_ok(),
            "the newline is not part of the key"
        );
        let err = ClusterKey::load(&dir.path().join("missing")).unwrap_err();
        assert!(
            err.starts_with("memberlist.cluster_key_file") && err.contains("missing"),
            "{err}"
        );
    }
}
