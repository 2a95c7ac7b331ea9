//! How an instance entry is spread over a gossip node's keys.
//!
//! One key per field, so a heartbeat re-sends only `ring.heartbeat_ms` and not the 128 tokens. A node without
//! `ring.state` is a non-owning member (a distributor or querier reading the ring). Keys:
//!
//! | key | value |
//! |---|---|
//! | `ring.state` | `ACTIVE`, `LEAVING`, `PENDING`, `JOINING` or `LEFT` |
//! | `ring.addr` | gRPC `host:port` |
//! | `ring.zone` | zone, may be empty |
//! | `ring.tokens` | JSON array of u32, ascending |
//! | `ring.heartbeat_ms`, `ring.registered_at_ms` | unix milliseconds, decimal |
//! | `ring.forget.<id>` | set by any member: hide `<id>` while its heartbeat is not newer than this value (ms) |

use crate::error::RingError;
use crate::instance::{InstanceDesc, InstanceState};

pub(crate) const KEY_STATE: &str = "ring.state";
pub(crate) const KEY_ADDR: &str = "ring.addr";
pub(crate) const KEY_ZONE: &str = "ring.zone";
pub(crate) const KEY_TOKENS: &str = "ring.tokens";
pub(crate) const KEY_HEARTBEAT: &str = "ring.heartbeat_ms";
pub(crate) const KEY_REGISTERED: &str = "ring.registered_at_ms";
pub(crate) const FORGET_PREFIX: &str = "ring.forget.";

/// The key-value pairs publishing `desc`.
pub(crate) fn encode(desc: &InstanceDesc) -> Vec<(&'static str, String)> {
    let tokens = serde_json::to_string(&desc.tokens).unwrap_or_else(|_| "[]".into());
    vec![
        (KEY_ADDR, desc.addr.clone()),
        (KEY_ZONE, desc.zone.clone()),
        (KEY_TOKENS, tokens),
        (KEY_HEARTBEAT, desc.heartbeat_ms.to_string()),
        (KEY_REGISTERED, desc.registered_at_ms.to_string()),
        // Last, so a reader never sees a new state with the previous fields (keys of one update arrive together,
        // but the order documents the intent).
        (KEY_STATE, desc.state.as_str().to_owned()),
    ]
}

/// The entry node `id` publishes, read through `get`; `Ok(None)` for a non-owning member.
pub(crate) fn decode<'a>(id: &str, get: impl Fn(&str) -> Option<&'a str>) -> Result<Option<InstanceDesc>, RingError> {
    let Some(state) = get(KEY_STATE) else {
        return Ok(None);
    };
    let bad = |key: &str, reason: String| RingError::Decode {
        id: id.to_owned(),
        key: key.to_owned(),
        reason,
    };
    let state: InstanceState = state.parse().map_err(|e| bad(KEY_STATE, e))?;
    let field = |key: &str| get(key).ok_or_else(|| bad(key, "missing".into()));
    let int = |key: &str| -> Result<i64, RingError> { field(key)?.parse().map_err(|e| bad(key, format!("{e}"))) };
    let mut tokens: Vec<u32> = serde_json::from_str(field(KEY_TOKENS)?).map_err(|e| bad(KEY_TOKENS, e.to_string()))?;
    tokens.sort_unstable();
    tokens.dedup();
    Ok(Some(InstanceDesc {
        id: id.to_owned(),
        addr: field(KEY_ADDR)?.to_owned(),
        zone: get(KEY_ZONE).unwrap_or_default().to_owned(),
        state,
        tokens,
        heartbeat_ms: int(KEY_HEARTBEAT)?,
        registered_at_ms: int(KEY_REGISTERED)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn state_strategy() -> impl Strategy<Value = InstanceState> {
        proptest::sample::select(InstanceState::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn encode_decode_round_trips(
            addr in "[a-z0-9.:-]{0,30}",
            zone in "[a-z0-9-]{0,10}",
            state in state_strategy(),
            mut tokens in proptest::collection::vec(any::<u32>(), 0..200),
            heartbeat_ms in any::<i64>(),
            registered_at_ms in any::<i64>(),
        ) {
            tokens.sort_unstable();
            tokens.dedup();
            let desc = InstanceDesc { id: "node-1".into(), addr, zone, state, tokens, heartbeat_ms, registered_at_ms };
            let kv: BTreeMap<&str, String> = encode(&desc).into_iter().collect();
            let back = decode("node-1", |k| kv.get(k).map(String::as_str)).unwrap();
            prop_assert_eq!(back, Some(desc));
        }

        #[test]
        fn decode_never_panics(values in proptest::collection::vec(".{0,20}", 6)) {
            let keys = [KEY_STATE, KEY_ADDR, KEY_ZONE, KEY_TOKENS, KEY_HEARTBEAT, KEY_REGISTERED];
            let kv: BTreeMap<&str, &str> = keys.iter().copied().zip(values.iter().map(String::as_str)).collect();
            let _ = decode("x", |k| kv.get(k).copied());
        }
    }

    #[test]
    fn member_without_state_is_not_an_instance_and_bad_fields_name_the_key() {
        assert_eq!(decode("d", |_| None).unwrap(), None);
        let err = decode("i", |k| match k {
            KEY_STATE => Some("ACTIVE"),
            KEY_TOKENS => Some("[1,"),
            _ => Some("1"),
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("ring.tokens") && err.contains("instance i"), "{err}");
    }
}
