//! The per-tenant limits (`limits:` in YAML): defaults, validation and flags.
//!
//! Names and defaults follow Mimir (`-distributor.*`, `-validation.*`, `-ingester.max-global-*`). The flag
//! table beside the struct is what the binary hands to `heddle_config::load`, so flags, YAML keys and the
//! reference cannot drift.

use crate::names::{NameValidationScheme, OtelTranslationStrategy};
use heddle_config::InvalidKey;
use heddle_config::{FlagKind, FlagSpec, serde_duration};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The hard ceiling on `max_native_histogram_buckets`: the most buckets any native histogram may have
/// (`heddle_model::histogram::MAX_BUCKETS_CEILING`, whose docs say why it is this value).
pub const MAX_NATIVE_HISTOGRAM_BUCKETS_CEILING: usize = heddle_model::histogram::MAX_BUCKETS_CEILING;

/// Per-tenant limits (`limits:` in YAML; the defaults of every tenant). A tenant's values can be overridden
/// in the runtime config file ([`crate::Overrides`]). The ingestion rate is enforced per distributor process
/// (Mimir's "local" strategy): with N distributors a tenant may send up to N times the rate. The series
/// limits are enforced by the ingesters (their series admission reads them from `Overrides`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Samples per second each tenant may push (token-bucket refill rate).
    pub ingestion_rate: f64,
    /// Token-bucket size: samples a tenant may push at once. A request with more samples is always refused.
    pub ingestion_burst_size: usize,
    /// Most labels per series, counting `__name__`.
    pub max_label_names_per_series: usize,
    /// Longest label name, in bytes.
    pub max_label_name_length: usize,
    /// Longest label value, in bytes.
    pub max_label_value_length: usize,
    /// Which metric and label names are accepted: `legacy` (Prometheus 2's character sets, the default) or
    /// `utf8` (any non-empty name, as Prometheus 3 accepts). Applies to every write path: remote write 1.0
    /// and 2.0 and OTLP.
    pub name_validation_scheme: NameValidationScheme,
    /// How OTLP metric and attribute names become Prometheus names: `UnderscoreEscapingWithSuffixes` (the
    /// default, as Prometheus'), `UnderscoreEscapingWithoutSuffixes`, `NoUTF8EscapingWithSuffixes` or
    /// `NoTranslation`; the last two keep dots and other characters, so they need `name_validation_scheme:
    /// utf8`. Mimir's default (empty) derives the strategy from other settings; Heddle names it outright.
    pub otel_translation_strategy: OtelTranslationStrategy,
    /// OTLP resource attributes copied onto every series of their resource as labels (named by the
    /// translation strategy's rules), besides `job` and `instance`. Per tenant, so a runtime override takes
    /// effect without a restart (Mimir's `promote_otel_resource_attributes`).
    pub promote_otel_resource_attributes: Vec<String>,
    /// How far past the distributor's clock a sample timestamp may be.
    #[serde(with = "serde_duration")]
    pub creation_grace_period: Duration,
    /// How far before the distributor's clock a sample timestamp may be; older samples are refused
    /// (`err-heddle-sample-too-far-in-past`). 0 disables the check, Mimir's default, which Heddle keeps: the
    /// ingesters refuse what their heads cannot hold anyway (older than half a block range before a head's
    /// newest sample, or one block range before now for an empty head), so this is for tenants that want a
    /// tighter, earlier refusal.
    #[serde(with = "serde_duration")]
    pub past_grace_period: Duration,
    /// Most buckets (positive and negative together) a native histogram sample may have, Mimir's
    /// `max_native_histogram_buckets`. 0 means no limit of the tenant's own, leaving the hard ceiling
    /// ([`MAX_NATIVE_HISTOGRAM_BUCKETS_CEILING`], 16,384), which no value raises: `validate` refuses a
    /// larger one. Mimir's default is 0 (unlimited); Heddle's, 160, is what Mimir's documentation recommends
    /// and Grafana Cloud applies: the OpenTelemetry SDK's default size of an exponential histogram, and more
    /// than a Prometheus client's native histogram has over the range of a latency. A histogram over it loses
    /// resolution rather than being refused (`reduce_native_histogram_over_max_buckets`).
    pub max_native_histogram_buckets: usize,
    /// A native histogram over `max_native_histogram_buckets` gets its resolution halved (neighbouring buckets
    /// merged) until it fits, instead of being refused; one that cannot fit even at the lowest schema (-4), or
    /// that has custom buckets, is refused all the same. Mimir's `reduce_native_histogram_over_max_buckets`,
    /// also on by default.
    pub reduce_native_histogram_over_max_buckets: bool,
    /// Most in-memory series of a tenant across the cluster (0 = no limit), enforced by ingesters when they
    /// create a series. Each ingester applies `global * replication_factor / ingesters`.
    pub max_global_series_per_user: usize,
    /// Most in-memory series of one metric name of a tenant across the cluster (0 = no limit).
    pub max_global_series_per_metric: usize,
    /// Longest metric family name, HELP text or UNIT of a metadata entry, in bytes; a longer entry is dropped
    /// with a 400 naming it (Mimir's `max_metadata_length`, whose newer versions truncate HELP instead:
    /// Heddle refuses, as Cortex did, so the sender learns that its help text is cut nowhere silently).
    pub max_metadata_length: usize,
    /// Most metric families with metadata per tenant across the cluster (0 = no limit), enforced by ingesters:
    /// each keeps `global * replication_factor / ingesters`. Mimir's default is 0; Heddle's 10,000 bounds what
    /// one tenant can make an ingester hold (at most 3 KiB of text per entry) while being far above what a
    /// Prometheus server's families come to.
    pub max_global_metadata_per_user: usize,
    /// Most distinct metadata entries (type, help, unit) per metric family and tenant (0 = no limit); several
    /// exist when targets disagree about a family's help. Mimir's default is 0; Heddle's is 10.
    pub max_global_metadata_per_metric: usize,
    /// Size of the tenant's exemplar store across the cluster (0 = exemplars are not stored, Mimir's default):
    /// each ingester keeps a circular buffer of `global * replication_factor / ingesters` exemplars, the oldest
    /// overwritten first (Prometheus' `max_exemplars`).
    pub max_global_exemplars_per_user: usize,
    /// Store a zero sample at a remote-write series' created timestamp (2.0's `created_timestamp` or
    /// `Sample.start_timestamp`), as Prometheus' `created-timestamp-zero-ingestion` feature does, so `rate()`
    /// and `increase()` see a counter's first increment. Off by default, as in Prometheus.
    pub created_timestamp_zero_ingestion_enabled: bool,
    /// The same for OTLP: a zero sample at the start time of cumulative sums, histograms and summaries
    /// (Mimir's `otel_created_timestamp_zero_ingestion_enabled`, off by default).
    pub otel_created_timestamp_zero_ingestion_enabled: bool,
    /// Deduplicate samples from Prometheus HA pairs (the HA tracker) for this tenant.
    pub accept_ha_samples: bool,
    /// Label naming the HA cluster (the Prometheus pair) a series comes from.
    pub ha_cluster_label: String,
    /// Label naming the replica within the HA cluster; removed before ingesting.
    pub ha_replica_label: String,
    /// Most HA clusters tracked per tenant (0 = no limit); a request from a new cluster past it gets 400.
    pub ha_max_clusters: usize,
    /// Most series one query may fetch (0 = no limit), counted as the query's sources are merged, while they
    /// stream; all queries of one remote-read request count together. Mimir's default is 0; Heddle's
    /// 500,000 is several times the default tenant series limit, while bounding what one request can make the
    /// querier hold.
    pub max_fetched_series_per_query: usize,
    /// Most chunks one query may fetch from ingesters and blocks (0 = no limit); Mimir's default.
    pub max_fetched_chunks_per_query: usize,
    /// Most chunk bytes one query may fetch from ingesters and blocks (0 = no limit). Mimir's default is 0;
    /// Heddle's 1 GiB bounds the compressed data one request can make the querier hold.
    pub max_fetched_chunk_bytes_per_query: usize,
    /// Longest time range (`end - start`) a range query may span (0 = no limit); longer ones are refused with
    /// 400 (`err-heddle-max-query-length`). Mimir's `max_query_length`, also 0 by default.
    #[serde(with = "serde_duration")]
    pub max_query_length: Duration,
    /// How far back from now a query may read (0 = no limit): earlier parts of a query's range are left out,
    /// as if they held no data. Mimir's `max_query_lookback`, also 0 by default.
    #[serde(with = "serde_duration")]
    pub max_query_lookback: Duration,
    /// How long the compactor keeps a tenant's blocks in the bucket (0 = forever): a block whose newest sample
    /// is older than this is marked for deletion. Mimir's `compactor_blocks_retention_period`, also 0 by default.
    #[serde(with = "serde_duration")]
    pub compactor_blocks_retention_period: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            ingestion_rate: 10_000.0,
            ingestion_burst_size: 200_000,
            max_label_names_per_series: 30,
            max_label_name_length: 1024,
            max_label_value_length: 2048,
            name_validation_scheme: NameValidationScheme::Legacy,
            otel_translation_strategy: OtelTranslationStrategy::UnderscoreEscapingWithSuffixes,
            promote_otel_resource_attributes: Vec::new(),
            creation_grace_period: Duration::from_secs(600),
            past_grace_period: Duration::ZERO,
            max_native_histogram_buckets: 160,
            reduce_native_histogram_over_max_buckets: true,
            max_global_series_per_user: 150_000,
            max_global_series_per_metric: 0,
            max_metadata_length: 1024,
            max_global_metadata_per_user: 10_000,
            max_global_metadata_per_metric: 10,
            max_global_exemplars_per_user: 0,
            created_timestamp_zero_ingestion_enabled: false,
            otel_created_timestamp_zero_ingestion_enabled: false,
            accept_ha_samples: false,
            ha_cluster_label: "cluster".into(),
            ha_replica_label: "__replica__".into(),
            ha_max_clusters: 100,
            max_fetched_series_per_query: 500_000,
            max_fetched_chunks_per_query: 2_000_000,
            max_fetched_chunk_bytes_per_query: 1 << 30,
            max_query_length: Duration::ZERO,
            max_query_lookback: Duration::ZERO,
            compactor_blocks_retention_period: Duration::ZERO,
        }
    }
}

impl Limits {
    /// Checks values that would refuse every request.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        if !(self.ingestion_rate.is_finite() && self.ingestion_rate > 0.0) {
            return Err(InvalidKey {
                key: "limits.ingestion_rate",
                reason: format!(
                    "must be a positive number of samples per second, got {}",
                    self.ingestion_rate
                ),
            });
        }
        let positive = [
            ("limits.ingestion_burst_size", self.ingestion_burst_size),
            ("limits.max_label_names_per_series", self.max_label_names_per_series),
            ("limits.max_label_name_length", self.max_label_name_length),
            ("limits.max_label_value_length", self.max_label_value_length),
            ("limits.max_metadata_length", self.max_metadata_length),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(InvalidKey {
                    key,
                    reason: "must be greater than 0".into(),
                });
            }
        }
        if self.max_native_histogram_buckets > MAX_NATIVE_HISTOGRAM_BUCKETS_CEILING {
            return Err(InvalidKey {
                key: "limits.max_native_histogram_buckets",
                reason: format!(
                    "{} is above the hard ceiling of {MAX_NATIVE_HISTOGRAM_BUCKETS_CEILING} buckets per native \
                     histogram, which no configuration raises (0 means the ceiling); histograms wider than it are \
                     refused whatever the limit",
                    self.max_native_histogram_buckets
                ),
            });
        }
        if !self.otel_translation_strategy.escapes() && self.name_validation_scheme == NameValidationScheme::Legacy {
            return Err(InvalidKey {
                key: "limits.otel_translation_strategy",
                reason: format!(
                    "{} keeps OTLP names such as `http.server.duration` as they are, and the `legacy` name \
                     validation scheme would refuse them; set `limits.name_validation_scheme: utf8` too, or use \
                     UnderscoreEscapingWithSuffixes or UnderscoreEscapingWithoutSuffixes",
                    self.otel_translation_strategy.as_str()
                ),
            });
        }
        if self.promote_otel_resource_attributes.iter().any(String::is_empty) {
            return Err(InvalidKey {
                key: "limits.promote_otel_resource_attributes",
                reason: "must not contain an empty attribute name".into(),
            });
        }
        if self.accept_ha_samples {
            let labels = [
                ("limits.ha_cluster_label", &self.ha_cluster_label),
                ("limits.ha_replica_label", &self.ha_replica_label),
            ];
            for (key, value) in labels {
                if value.is_empty() {
                    return Err(InvalidKey {
                        key,
                        reason: "must not be empty when `limits.accept_ha_samples` is true".into(),
                    });
                }
            }
            if self.ha_cluster_label == self.ha_replica_label {
                return Err(InvalidKey {
                    key: "limits.ha_replica_label",
                    reason: format!(
                        "must differ from `limits.ha_cluster_label` ({:?})",
                        self.ha_cluster_label
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Flags for [`Limits`], keyed under `limits.` (Mimir's flag names).
pub const LIMITS_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "distributor.ingestion-rate-limit",
        key: "limits.ingestion_rate",
        kind: FlagKind::Value,
        help: "Per-tenant ingestion rate limit, in samples per second, enforced by each distributor",
    },
    FlagSpec {
        flag: "distributor.ingestion-burst-size",
        key: "limits.ingestion_burst_size",
        kind: FlagKind::Value,
        help: "Per-tenant burst size, in samples; a request with more samples is refused with 429",
    },
    FlagSpec {
        flag: "validation.max-label-names-per-series",
        key: "limits.max_label_names_per_series",
        kind: FlagKind::Value,
        help: "Most labels a series may have, including __name__",
    },
    FlagSpec {
        flag: "validation.max-length-label-name",
        key: "limits.max_label_name_length",
        kind: FlagKind::Value,
        help: "Longest accepted label name, in bytes",
    },
    FlagSpec {
        flag: "validation.max-length-label-value",
        key: "limits.max_label_value_length",
        kind: FlagKind::Value,
        help: "Longest accepted label value, in bytes",
    },
    FlagSpec {
        flag: "validation.name-validation-scheme",
        key: "limits.name_validation_scheme",
        kind: FlagKind::Value,
        help: "Which metric and label names are accepted: legacy ([a-zA-Z_:][a-zA-Z0-9_:]*) or utf8 (any non-empty name)",
    },
    FlagSpec {
        flag: "distributor.otel-translation-strategy",
        key: "limits.otel_translation_strategy",
        kind: FlagKind::Value,
        help: "How OTLP names become Prometheus names: UnderscoreEscapingWithSuffixes, UnderscoreEscapingWithoutSuffixes, NoUTF8EscapingWithSuffixes or NoTranslation (the last two need utf8 name validation)",
    },
    FlagSpec {
        flag: "distributor.otel-promote-resource-attributes",
        key: "limits.promote_otel_resource_attributes",
        kind: FlagKind::List,
        help: "OTLP resource attribute promoted to a label of every series of its resource (repeatable)",
    },
    FlagSpec {
        flag: "validation.create-grace-period",
        key: "limits.creation_grace_period",
        kind: FlagKind::Value,
        help: "How far into the future (past the distributor's clock) a sample timestamp may be",
    },
    FlagSpec {
        flag: "validation.past-grace-period",
        key: "limits.past_grace_period",
        kind: FlagKind::Value,
        help: "How far into the past (before the distributor's clock) a sample timestamp may be; 0 disables the check",
    },
    FlagSpec {
        flag: "validation.max-native-histogram-buckets",
        key: "limits.max_native_histogram_buckets",
        kind: FlagKind::Value,
        help: "Most buckets a native histogram sample may have; more are reduced or refused (0 = the hard ceiling, 16384, which no value raises)",
    },
    FlagSpec {
        flag: "validation.reduce-native-histogram-over-max-buckets",
        key: "limits.reduce_native_histogram_over_max_buckets",
        kind: FlagKind::Bool,
        help: "Lower the resolution of a native histogram over the bucket limit until it fits, instead of refusing it",
    },
    FlagSpec {
        flag: "ingester.max-global-series-per-user",
        key: "limits.max_global_series_per_user",
        kind: FlagKind::Value,
        help: "Most in-memory series per tenant across the cluster, enforced by ingesters (0 = no limit)",
    },
    FlagSpec {
        flag: "ingester.max-global-series-per-metric",
        key: "limits.max_global_series_per_metric",
        kind: FlagKind::Value,
        help: "Most in-memory series per metric name and tenant across the cluster (0 = no limit)",
    },
    FlagSpec {
        flag: "validation.max-metadata-length",
        key: "limits.max_metadata_length",
        kind: FlagKind::Value,
        help: "Longest accepted metric family name, HELP or UNIT of a metadata entry, in bytes",
    },
    FlagSpec {
        flag: "ingester.max-global-metadata-per-user",
        key: "limits.max_global_metadata_per_user",
        kind: FlagKind::Value,
        help: "Most metric families with metadata per tenant across the cluster, enforced by ingesters (0 = no limit)",
    },
    FlagSpec {
        flag: "ingester.max-global-metadata-per-metric",
        key: "limits.max_global_metadata_per_metric",
        kind: FlagKind::Value,
        help: "Most distinct metadata entries per metric family and tenant across the cluster (0 = no limit)",
    },
    FlagSpec {
        flag: "ingester.max-global-exemplars-per-user",
        key: "limits.max_global_exemplars_per_user",
        kind: FlagKind::Value,
        help: "Exemplars kept per tenant across the cluster, in a circular buffer per ingester (0 = exemplars are dropped)",
    },
    FlagSpec {
        flag: "distributor.created-timestamp-zero-ingestion-enabled",
        key: "limits.created_timestamp_zero_ingestion_enabled",
        kind: FlagKind::Bool,
        help: "Store a zero sample at each remote-write series' created timestamp, when it precedes the series' samples",
    },
    FlagSpec {
        flag: "distributor.otel-created-timestamp-zero-ingestion-enabled",
        key: "limits.otel_created_timestamp_zero_ingestion_enabled",
        kind: FlagKind::Bool,
        help: "Store a zero sample at the start time of OTLP cumulative sums, histograms and summaries",
    },
    FlagSpec {
        flag: "distributor.ha-tracker.enable-for-all-users",
        key: "limits.accept_ha_samples",
        kind: FlagKind::Bool,
        help: "Deduplicate samples from Prometheus HA pairs, keeping one elected replica per cluster",
    },
    FlagSpec {
        flag: "distributor.ha-tracker.cluster",
        key: "limits.ha_cluster_label",
        kind: FlagKind::Value,
        help: "Label naming the Prometheus HA cluster of a series",
    },
    FlagSpec {
        flag: "distributor.ha-tracker.replica",
        key: "limits.ha_replica_label",
        kind: FlagKind::Value,
        help: "Label naming the replica within an HA cluster; dropped before ingesting",
    },
    FlagSpec {
        flag: "distributor.ha-tracker.max-clusters",
        key: "limits.ha_max_clusters",
        kind: FlagKind::Value,
        help: "Most HA clusters tracked per tenant (0 = no limit)",
    },
    FlagSpec {
        flag: "querier.max-fetched-series-per-query",
        key: "limits.max_fetched_series_per_query",
        kind: FlagKind::Value,
        help: "Most series one query (all queries of a remote-read request together) may fetch; more get 422 (0 = no limit)",
    },
    FlagSpec {
        flag: "querier.max-fetched-chunks-per-query",
        key: "limits.max_fetched_chunks_per_query",
        kind: FlagKind::Value,
        help: "Most chunks one query may fetch from ingesters and blocks; more get 422 (0 = no limit)",
    },
    FlagSpec {
        flag: "querier.max-fetched-chunk-bytes-per-query",
        key: "limits.max_fetched_chunk_bytes_per_query",
        kind: FlagKind::Value,
        help: "Most chunk bytes one query may fetch from ingesters and blocks; more get 422 (0 = no limit)",
    },
    FlagSpec {
        flag: "store.max-query-length",
        key: "limits.max_query_length",
        kind: FlagKind::Value,
        help: "Longest time range a range query may span; longer get 400 (0 = no limit)",
    },
    FlagSpec {
        flag: "querier.max-query-lookback",
        key: "limits.max_query_lookback",
        kind: FlagKind::Value,
        help: "How far back from now a query may read; older data is left out of answers (0 = no limit)",
    },
    FlagSpec {
        flag: "compactor.blocks-retention-period",
        key: "limits.compactor_blocks_retention_period",
        kind: FlagKind::Value,
        help: "How long the compactor keeps a tenant's blocks in the bucket; older blocks are deleted (0 = forever)",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_mimirs_and_valid() {
        let l = Limits::default();
        assert_eq!(l.ingestion_rate, 10_000.0);
        assert_eq!(l.ingestion_burst_size, 200_000);
        assert_eq!(l.creation_grace_period, Duration::from_secs(600));
        assert_eq!(l.past_grace_period, Duration::ZERO, "Mimir's default: disabled");
        assert_eq!(
            l.max_native_histogram_buckets, 160,
            "Mimir's recommended value, not its 0"
        );
        l.validate().unwrap();
        Limits {
            max_native_histogram_buckets: MAX_NATIVE_HISTOGRAM_BUCKETS_CEILING,
            ..Limits::default()
        }
        .validate()
        .expect("the ceiling itself is a valid limit");
    }

    #[test]
    fn yaml_round_trip_and_unknown_keys() {
        let l: Limits = serde_norway::from_str("ingestion_rate: 5\ncreation_grace_period: 1h30m\n").unwrap();
        assert_eq!(l.ingestion_rate, 5.0);
        assert_eq!(l.creation_grace_period, Duration::from_secs(5400));
        assert_eq!(l.max_label_names_per_series, 30, "unset keys keep their default");
        let back: Limits = serde_norway::from_str(&serde_norway::to_string(&l).unwrap()).unwrap();
        assert_eq!(back, l);
        let l: Limits = serde_norway::from_str("max_query_length: 12h\nmax_query_lookback: 7d\n").unwrap();
        assert_eq!(l.max_query_length, Duration::from_secs(12 * 3600));
        assert_eq!(l.max_query_lookback, Duration::from_secs(7 * 86400));
        assert_eq!(
            Limits::default().max_query_length,
            Duration::ZERO,
            "Mimir's default: unlimited"
        );
        let l: Limits = serde_norway::from_str(
            "name_validation_scheme: utf8\notel_translation_strategy: NoUTF8EscapingWithSuffixes\n\
             promote_otel_resource_attributes: [host.name, k8s.pod.name]\n",
        )
        .unwrap();
        assert_eq!(l.name_validation_scheme, NameValidationScheme::Utf8);
        assert_eq!(
            l.otel_translation_strategy,
            OtelTranslationStrategy::NoUtf8EscapingWithSuffixes
        );
        assert_eq!(l.promote_otel_resource_attributes, ["host.name", "k8s.pod.name"]);
        l.validate().unwrap();
        let err = serde_norway::from_str::<Limits>("ingestion_rte: 5\n").unwrap_err();
        assert!(err.to_string().contains("ingestion_rte"), "{err}");
    }

    #[test]
    fn validate_names_the_key() {
        let cases: &[(&str, Limits, &str)] = &[
            (
                "zero rate",
                Limits {
                    ingestion_rate: 0.0,
                    ..Limits::default()
                },
                "limits.ingestion_rate",
            ),
            (
                "nan rate",
                Limits {
                    ingestion_rate: f64::NAN,
                    ..Limits::default()
                },
                "limits.ingestion_rate",
            ),
            (
                "zero burst",
                Limits {
                    ingestion_burst_size: 0,
                    ..Limits::default()
                },
                "limits.ingestion_burst_size",
            ),
            (
                "zero label count",
                Limits {
                    max_label_names_per_series: 0,
                    ..Limits::default()
                },
                "limits.max_label_names_per_series",
            ),
            (
                "unescaped OTLP names under legacy validation",
                Limits {
                    otel_translation_strategy: OtelTranslationStrategy::NoTranslation,
                    ..Limits::default()
                },
                "limits.otel_translation_strategy",
            ),
            (
                "histogram bucket limit above the ceiling",
                Limits {
                    max_native_histogram_buckets: MAX_NATIVE_HISTOGRAM_BUCKETS_CEILING + 1,
                    ..Limits::default()
                },
                "limits.max_native_histogram_buckets",
            ),
            (
                "empty promoted attribute",
                Limits {
                    promote_otel_resource_attributes: vec![String::new()],
                    ..Limits::default()
                },
                "limits.promote_otel_resource_attributes",
            ),
        ];
        for (name, limits, key) in cases {
            let err = limits.validate().expect_err(name);
            assert_eq!(err.key, *key, "case {name}");
            assert!(err.to_string().contains(key), "case {name}: {err}");
        }
    }

    #[test]
    fn flag_table_covers_every_key() {
        let lim = serde_norway::to_value(Limits::default()).unwrap();
        let keys: Vec<String> = lim
            .as_mapping()
            .unwrap()
            .keys()
            .map(|k| format!("limits.{}", k.as_str().unwrap()))
            .collect();
        for k in &keys {
            assert!(LIMITS_FLAGS.iter().any(|f| f.key == k), "no flag for {k}");
        }
    }
}
