//! The querier's configuration (YAML section `querier`).

use heddle_config::{FlagKind, FlagSpec};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Querier settings. Keys follow Mimir's names where the concept is the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuerierConfig {
    /// Upper bound of one `ChunkedReadResponse` message in a streamed remote-read answer, in bytes (the frame
    /// header is not counted). Prometheus recommends 1 MiB (`--storage.remote.read-max-bytes-in-frame`).
    pub max_bytes_in_frame: usize,
    /// How long a query may run before it fails with 503 (Mimir: `querier.timeout`).
    #[serde(with = "heddle_config::serde_duration")]
    pub query_timeout: Duration,
    /// Most samples one query may return, after replicas are merged (all queries of a remote-read request
    /// together); 0 = unlimited.
    /// Prometheus' own default for `--storage.remote.read-sample-limit` is 5e7.
    pub max_samples_per_query: usize,
    /// Most decompressed bytes a remote-read request body may declare (Prometheus refuses above 32 MiB).
    pub max_read_request_bytes: usize,
    /// Longest regular expression a label matcher may carry, in bytes (0 = no limit); longer ones get 400
    /// before they are compiled. Heddle's own key (Mimir has none): 64 KiB leaves room for the alternations
    /// Grafana builds from multi-value variables while keeping what one matcher can cost to compile small.
    pub max_regex_length: usize,
    /// Most samples a PromQL query may hold in memory at once: the samples fetched for it plus the points of
    /// the step being evaluated; more fail with 422 (Mimir: `querier.max-samples`, same default).
    pub max_samples: usize,
    /// How far back an instant selector looks for a sample (Mimir and Prometheus: 5 minutes).
    #[serde(with = "heddle_config::serde_duration")]
    pub lookback_delta: Duration,
    /// PromQL queries (`query`, `query_range`) one querier evaluates at once; more wait for a slot, and the
    /// wait counts toward the query's timeout (Mimir: `querier.max-concurrent`, same default).
    pub max_concurrent: usize,
    /// Ingesters are asked only by queries whose end is within this long before now (0: always, Heddle's
    /// default; Mimir's is 13h). Set it only below what every ingester answers for: its shipped blocks, kept
    /// `blocks_storage.tsdb.retention_period` (a block not shipped yet is older only when the bucket is down).
    #[serde(with = "heddle_config::serde_duration")]
    pub query_ingesters_within: Duration,
    /// The bucket is asked only for the part of a query's range older than this before now (0: always,
    /// Heddle's default; Mimir's is 12h). Ingesters then keep answering their shipped blocks this long after
    /// the upload, so it must stay below `blocks_storage.tsdb.retention_period`.
    #[serde(with = "heddle_config::serde_duration")]
    pub query_store_after: Duration,
    /// Most bytes all requests the querier is answering may hold together in what they allocate in proportion
    /// to their input: bodies as they arrive, remote read's decompressed copy and decoded request, URL-encoded
    /// forms, parsed selectors and PromQL queries, each reserved before it is allocated (0 = no limit). A
    /// request that would pass it is refused at once with 503 (never queued); one that could not fit even
    /// alone gets 413. Heddle's own key, after Mimir's `max_inflight_push_requests_bytes`: 512 MiB holds the
    /// largest remote read the size limits accept (its body, 32 MiB decompressed and a decoded request about
    /// ten times that) beside the single process's other queries.
    pub max_inflight_requests_bytes: usize,
    /// Largest request body the querier reads (remote read, compressed; a URL-encoded form), in bytes; larger
    /// ones get 413 before or as they arrive. Mimir's query-frontend `max_body_size` and its default.
    pub max_body_size: usize,
    /// Longest time a request body may take to arrive (set from `server.http_server_read_timeout`).
    #[serde(skip)]
    pub body_read_timeout: Duration,
}

impl Default for QuerierConfig {
    fn default() -> Self {
        Self {
            max_bytes_in_frame: 1 << 20,
            query_timeout: Duration::from_secs(120),
            max_samples_per_query: 50_000_000,
            max_read_request_bytes: 32 << 20,
            max_regex_length: 64 << 10,
            max_samples: 50_000_000,
            lookback_delta: Duration::from_secs(5 * 60),
            max_concurrent: 20,
            query_ingesters_within: Duration::ZERO,
            query_store_after: Duration::ZERO,
            max_inflight_requests_bytes: 512 << 20,
            max_body_size: 10 << 20,
            body_read_timeout: Duration::from_secs(30),
        }
    }
}

/// Flags for [`QuerierConfig`], keyed under `querier.`; the binary hands them to `heddle_config::load`.
pub const QUERIER_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "querier.max-bytes-in-frame",
        key: "querier.max_bytes_in_frame",
        kind: FlagKind::Value,
        help: "Largest message of a streamed remote-read response, in bytes (Prometheus recommends 1 MiB)",
    },
    FlagSpec {
        // Mimir's flag for the same setting.
        flag: "querier.timeout",
        key: "querier.query_timeout",
        kind: FlagKind::Value,
        help: "How long a query may run before it fails with 503",
    },
    FlagSpec {
        flag: "querier.max-samples-per-query",
        key: "querier.max_samples_per_query",
        kind: FlagKind::Value,
        help: "Most samples one query (all queries of a remote-read request together) may select after replicas are merged (422 above); 0 = unlimited",
    },
    FlagSpec {
        flag: "querier.max-read-request-bytes",
        key: "querier.max_read_request_bytes",
        kind: FlagKind::Value,
        help: "Largest decompressed remote-read request body, in bytes, checked before allocating",
    },
    FlagSpec {
        flag: "querier.max-regex-length",
        key: "querier.max_regex_length",
        kind: FlagKind::Value,
        help: "Longest regular expression of a label matcher, in bytes; longer get 400 before compiling (0 = no limit)",
    },
    FlagSpec {
        flag: "querier.max-samples",
        key: "querier.max_samples",
        kind: FlagKind::Value,
        help: "Most samples a PromQL query may hold in memory at once; more get 422",
    },
    FlagSpec {
        flag: "querier.lookback-delta",
        key: "querier.lookback_delta",
        kind: FlagKind::Value,
        help: "How far back an instant selector of a PromQL query looks for a sample",
    },
    FlagSpec {
        flag: "querier.max-concurrent",
        key: "querier.max_concurrent",
        kind: FlagKind::Value,
        help: "PromQL queries evaluated at once by one querier; more wait, within their timeout",
    },
    FlagSpec {
        flag: "querier.query-ingesters-within",
        key: "querier.query_ingesters_within",
        kind: FlagKind::Value,
        help: "Ask ingesters only for queries ending within this long before now (0 = always)",
    },
    FlagSpec {
        flag: "querier.query-store-after",
        key: "querier.query_store_after",
        kind: FlagKind::Value,
        help: "Ask the bucket only for the part of a query older than this before now (0 = always)",
    },
    FlagSpec {
        flag: "querier.max-inflight-requests-bytes",
        key: "querier.max_inflight_requests_bytes",
        kind: FlagKind::Value,
        help: "Most bytes the requests being answered may hold in bodies, decoded requests, forms and parsed queries (503 above, 413 for one that cannot fit alone); 0 = no limit",
    },
    FlagSpec {
        flag: "querier.max-body-size",
        key: "querier.max_body_size",
        kind: FlagKind::Value,
        help: "Largest request body the querier reads (remote read compressed, or a URL-encoded form), in bytes; larger get 413",
    },
];

/// Smallest frame limit accepted: one XOR chunk (at most ~1 KiB) plus a generous label set must fit.
const MIN_BYTES_IN_FRAME: usize = 4096;

impl QuerierConfig {
    /// Checks values that deserialize but make no sense; the message names the YAML key.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_bytes_in_frame < MIN_BYTES_IN_FRAME {
            return Err(format!(
                "querier.max_bytes_in_frame is {}; it must be at least {MIN_BYTES_IN_FRAME} so that one chunk and \
                 its labels fit in a frame",
                self.max_bytes_in_frame
            ));
        }
        if !self.query_ingesters_within.is_zero()
            && !self.query_store_after.is_zero()
            && self.query_ingesters_within < self.query_store_after
        {
            return Err(format!(
                "querier.query_ingesters_within ({}) is shorter than querier.query_store_after ({}): data between \
                 the two would be read from neither the ingesters nor the bucket",
                heddle_config::format_duration(self.query_ingesters_within),
                heddle_config::format_duration(self.query_store_after)
            ));
        }
        if self.query_timeout.is_zero() {
            return Err("querier.query_timeout must be greater than 0".into());
        }
        if self.max_read_request_bytes == 0 {
            return Err("querier.max_read_request_bytes must be greater than 0".into());
        }
        if self.max_samples == 0 {
            return Err("querier.max_samples must be greater than 0".into());
        }
        if self.lookback_delta.as_millis() == 0 {
            return Err("querier.lookback_delta must be at least 1ms".into());
        }
        if self.max_body_size == 0 {
            return Err("querier.max_body_size must be greater than 0".into());
        }
        let one_read = self.max_body_size.saturating_add(self.max_read_request_bytes);
        if self.max_inflight_requests_bytes > 0 && self.max_inflight_requests_bytes < one_read {
            return Err(format!(
                "querier.max_inflight_requests_bytes is {}; it must be at least querier.max_body_size + \
                 querier.max_read_request_bytes ({one_read}) so that one remote read of the largest size the limits \
                 accept can be read and decompressed, or 0 (no limit)",
                self.max_inflight_requests_bytes
            ));
        }
        if self.max_concurrent == 0 {
            return Err("querier.max_concurrent must be greater than 0 (it would refuse every query)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(QuerierConfig::default().validate(), Ok(()));
    }

    #[test]
    fn validate_names_the_key() {
        let cfg = QuerierConfig {
            max_bytes_in_frame: 10,
            ..Default::default()
        };
        assert!(cfg.validate().unwrap_err().contains("querier.max_bytes_in_frame"));
        let cfg = QuerierConfig {
            query_timeout: Duration::ZERO,
            ..Default::default()
        };
        assert!(cfg.validate().unwrap_err().contains("querier.query_timeout"));
        let cfg = QuerierConfig {
            max_concurrent: 0,
            ..Default::default()
        };
        assert!(cfg.validate().unwrap_err().contains("querier.max_concurrent"));
        let cfg = QuerierConfig {
            max_inflight_requests_bytes: 1 << 20,
            ..Default::default()
        };
        assert!(
            cfg.validate()
                .unwrap_err()
                .contains("querier.max_inflight_requests_bytes")
        );
        let cfg = QuerierConfig {
            max_inflight_requests_bytes: 0,
            ..Default::default()
        };
        assert_eq!(cfg.validate(), Ok(()), "0 is no limit");
    }

    #[test]
    fn every_key_has_a_flag() {
        #[derive(Serialize, Default)]
        struct Root {
            querier: QuerierConfig,
        }
        let (keys_without_flag, flags_without_key) = heddle_config::uncovered_keys::<Root>(QUERIER_FLAGS);
        assert!(
            keys_without_flag.is_empty(),
            "keys without a flag: {keys_without_flag:?}"
        );
        assert!(
            flags_without_key.is_empty(),
            "flags without a key: {flags_without_key:?}"
        );
    }

    #[test]
    fn deserializes_with_defaults_and_rejects_unknown_keys() {
        let cfg: QuerierConfig = serde_json::from_str(r#"{"query_timeout":"30s","max_samples_per_query":7}"#).unwrap();
        assert_eq!(cfg.query_timeout, Duration::from_secs(30));
        assert_eq!(cfg.max_samples_per_query, 7);
        assert_eq!(cfg.max_bytes_in_frame, 1 << 20);
        assert!(serde_json::from_str::<QuerierConfig>(r#"{"max_bytes":1}"#).is_err());
    }
}
