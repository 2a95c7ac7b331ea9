//! Per-tenant limits that change without a restart: the runtime config file (`--runtime-config.file`).
//!
//! The file holds `overrides: {<tenant>: {<limits key>: <value>, ...}}`, Mimir's layout. A tenant's entry
//! only names the keys it changes; the others keep the defaults from `limits:`. The file is re-read every
//! `--runtime-config.reload-period`; a file that fails to parse or validate is refused whole, the last good
//! overrides stay in force, and the failure is logged and counted.
//!
//! Readers ([`Overrides::get`]) take a read lock only long enough to clone an `Arc`.

use crate::error::RuntimeConfigError;
use crate::limits::Limits;
use heddle_config::InvalidKey;
use heddle_config::{FlagKind, FlagSpec, serde_duration};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `runtime_config:` settings (Mimir's names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfigConfig {
    /// The runtime config file; empty means no per-tenant overrides.
    pub file: PathBuf,
    /// How often the file is re-read.
    #[serde(with = "serde_duration")]
    pub period: Duration,
}

impl Default for RuntimeConfigConfig {
    fn default() -> Self {
        Self {
            file: PathBuf::new(),
            period: Duration::from_secs(10),
        }
    }
}

impl RuntimeConfigConfig {
    /// Checks the reload period.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        if self.period.is_zero() {
            return Err(InvalidKey {
                key: "runtime_config.period",
                reason: "must be greater than 0s".into(),
            });
        }
        Ok(())
    }
}

/// Flags for [`RuntimeConfigConfig`].
pub const RUNTIME_CONFIG_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "runtime-config.file",
        key: "runtime_config.file",
        kind: FlagKind::Value,
        help: "YAML file with per-tenant limit overrides (overrides: {tenant: {ingestion_rate: ...}}), reloaded periodically",
    },
    FlagSpec {
        flag: "runtime-config.reload-period",
        key: "runtime_config.period",
        kind: FlagKind::Value,
        help: "How often the runtime config file is re-read",
    },
];

/// The runtime config file's layout.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RuntimeFile {
    overrides: HashMap<String, serde_norway::Mapping>,
}

/// Every tenant's limits: the defaults plus the overrides of the last good runtime config file.
#[derive(Debug)]
pub struct Overrides {
    defaults: Arc<Limits>,
    tenants: RwLock<Arc<HashMap<String, Arc<Limits>>>>,
    metrics: ReloadMetrics,
}

#[derive(Debug, Clone, Default)]
struct ReloadMetrics {
    last_successful: Gauge,
    failures: Counter,
    tenants: Gauge,
}

impl Overrides {
    /// Every tenant gets `defaults` until overrides are loaded.
    pub fn new(defaults: Limits) -> Self {
        Self {
            defaults: Arc::new(defaults),
            tenants: RwLock::new(Arc::new(HashMap::new())),
            metrics: ReloadMetrics::default(),
        }
    }

    /// Registers `heddle_runtime_config_last_reload_successful`, `heddle_runtime_config_reload_failures_total`
    /// and `heddle_runtime_config_overridden_tenants`.
    pub fn register_metrics(self, registry: &mut Registry) -> Self {
        registry.register(
            "heddle_runtime_config_last_reload_successful",
            "Whether the last read of the runtime config file succeeded (1) or kept the previous overrides (0)",
            self.metrics.last_successful.clone(),
        );
        registry.register(
            "heddle_runtime_config_reload_failures",
            "Reads of the runtime config file that failed and kept the previous overrides",
            self.metrics.failures.clone(),
        );
        registry.register(
            "heddle_runtime_config_overridden_tenants",
            "Tenants with overrides in the runtime config file",
            self.metrics.tenants.clone(),
        );
        self
    }

    /// The limits of `tenant`.
    pub fn get(&self, tenant: &str) -> Arc<Limits> {
        let map = self.tenants.read().unwrap_or_else(|p| p.into_inner());
        map.get(tenant).cloned().unwrap_or_else(|| self.defaults.clone())
    }

    /// The defaults (`limits:`).
    pub fn defaults(&self) -> &Limits {
        &self.defaults
    }

    /// Parses a runtime config document and, if every tenant's limits are valid, makes it the one in force.
    /// On error nothing changes. Returns how many tenants have overrides.
    pub fn apply_yaml(&self, yaml: &str) -> Result<usize, RuntimeConfigError> {
        let parsed = parse(yaml, &self.defaults)?;
        let n = parsed.len();
        *self.tenants.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(parsed);
        self.metrics.tenants.set(n as i64);
        Ok(n)
    }

    /// Reads `path` and applies it ([`Overrides::apply_yaml`]), recording the outcome in the metrics and the
    /// log. An empty or missing-but-configured file is an error (the previous overrides stay).
    pub fn reload(&self, path: &Path) -> Result<usize, RuntimeConfigError> {
        let result = std::fs::read_to_string(path)
            .map_err(|e| RuntimeConfigError::Read {
                path: path.display().to_string(),
                detail: e.to_string(),
            })
            .and_then(|text| self.apply_yaml(&text));
        match &result {
            Ok(n) => {
                self.metrics.last_successful.set(1);
                tracing::debug!(path = %path.display(), tenants = n, "loaded runtime config");
            }
            Err(e) => {
                self.metrics.last_successful.set(0);
                self.metrics.failures.inc();
                tracing::error!(path = %path.display(), error = %e, "runtime config refused; keeping the previous overrides");
            }
        }
        result
    }

    /// Re-reads the file every `cfg.period` until `stop` is cancelled. Does nothing when no file is set.
    /// Only reloads when the file's contents changed, so an unchanged file costs one read per period.
    pub async fn run_reloader(self: Arc<Self>, cfg: RuntimeConfigConfig, stop: CancellationToken) {
        if cfg.file.as_os_str().is_empty() {
            return;
        }
        let mut last: Option<String> = None;
        let mut tick = tokio::time::interval(cfg.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let text = match tokio::fs::read_to_string(&cfg.file).await {
                Ok(t) => t,
                Err(_) => {
                    // Let `reload` produce the error, metric and log line.
                    last = None;
                    let _ = self.reload(&cfg.file);
                    continue;
                }
            };
            if last.as_deref() == Some(text.as_str()) {
                continue;
            }
            match self.apply_yaml(&text) {
                Ok(n) => {
                    self.metrics.last_successful.set(1);
                    tracing::info!(path = %cfg.file.display(), tenants = n, "loaded runtime config");
                    last = Some(text);
                }
                Err(e) => {
                    self.metrics.last_successful.set(0);
                    self.metrics.failures.inc();
                    tracing::error!(path = %cfg.file.display(), error = %e, "runtime config refused; keeping the previous overrides");
                    last = None;
                }
            }
        }
    }
}

/// Parses the document: each tenant's keys are laid over the defaults, then validated.
fn parse(yaml: &str, defaults: &Limits) -> Result<HashMap<String, Arc<Limits>>, RuntimeConfigError> {
    // An empty document (a file truncated by an editor or a config tool mid-write) must not wipe every
    // tenant's overrides: it is refused, and `overrides: {}` says "none" on purpose.
    let document: serde_norway::Value =
        serde_norway::from_str(yaml).map_err(|e| RuntimeConfigError::Parse { detail: e.to_string() })?;
    if document.is_null() {
        return Err(RuntimeConfigError::Empty);
    }
    let file: RuntimeFile =
        serde_norway::from_value(document).map_err(|e| RuntimeConfigError::Parse { detail: e.to_string() })?;
    let base = match serde_norway::to_value(defaults) {
        Ok(serde_norway::Value::Mapping(m)) => m,
        _ => serde_norway::Mapping::new(),
    };
    let mut out = HashMap::with_capacity(file.overrides.len());
    for (tenant, keys) in file.overrides {
        let mut merged = base.clone();
        for (k, v) in keys {
            merged.insert(k, v);
        }
        let limits: Limits =
            serde_norway::from_value(serde_norway::Value::Mapping(merged)).map_err(|e| RuntimeConfigError::Tenant {
                tenant: tenant.clone(),
                detail: e.to_string(),
            })?;
        limits.validate().map_err(|e| RuntimeConfigError::Tenant {
            tenant: tenant.clone(),
            detail: e.to_string(),
        })?;
        out.insert(tenant, Arc::new(limits));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_keys_override_defaults_and_others_are_kept() {
        let o = Overrides::new(Limits::default());
        let n = o
            .apply_yaml("overrides:\n  team-a:\n    ingestion_rate: 5\n    max_global_series_per_user: 10\n")
            .unwrap();
        assert_eq!(n, 1);
        let a = o.get("team-a");
        assert_eq!(a.ingestion_rate, 5.0);
        assert_eq!(a.max_global_series_per_user, 10);
        assert_eq!(a.ingestion_burst_size, 200_000, "unset keys keep the default");
        assert_eq!(
            o.get("team-b").ingestion_rate,
            10_000.0,
            "other tenants get the defaults"
        );
    }

    #[test]
    fn bad_documents_keep_the_last_good_overrides() {
        let o = Overrides::new(Limits::default());
        o.apply_yaml("overrides:\n  a:\n    ingestion_rate: 7\n").unwrap();
        let cases = [
            ("not yaml", "overrides: [\n"),
            ("unknown key", "overrides:\n  a:\n    ingestion_rte: 1\n"),
            ("invalid value", "overrides:\n  a:\n    ingestion_rate: 0\n"),
            ("wrong type", "overrides:\n  a:\n    ingestion_rate: fast\n"),
            ("unknown top-level key", "limits: {}\n"),
        ];
        for (name, doc) in cases {
            let err = o.apply_yaml(doc).expect_err(name);
            assert_eq!(o.get("a").ingestion_rate, 7.0, "case {name}: {err}");
        }
        let err = o.apply_yaml("overrides:\n  a:\n    ingestion_rate: 0\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("tenant a") && msg.contains("limits.ingestion_rate"),
            "{msg}"
        );
        for empty in ["", "  \n", "# only a comment\n"] {
            let err = o.apply_yaml(empty).expect_err("an empty document is refused");
            assert!(err.to_string().contains("overrides: {}"), "{err}");
            assert_eq!(
                o.get("a").ingestion_rate,
                7.0,
                "{empty:?} keeps the last good overrides"
            );
        }
        o.apply_yaml("overrides: {}\n").unwrap();
        assert_eq!(
            o.get("a").ingestion_rate,
            10_000.0,
            "`overrides: {{}}` removes every override"
        );
    }

    #[test]
    fn reload_counts_failures_and_keeps_going() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runtime.yaml");
        let mut registry = Registry::default();
        let o = Overrides::new(Limits::default()).register_metrics(&mut registry);
        assert!(o.reload(&path).is_err(), "a missing file is an error");
        std::fs::write(&path, "overrides:\n  a:\n    max_label_names_per_series: 3\n").unwrap();
        assert_eq!(o.reload(&path).unwrap(), 1);
        std::fs::write(&path, "overrides:\n  a:\n    max_label_names_per_series: -1\n").unwrap();
        assert!(o.reload(&path).is_err());
        assert_eq!(o.get("a").max_label_names_per_series, 3);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("heddle_runtime_config_reload_failures_total 2"), "{text}");
        assert!(
            text.contains("heddle_runtime_config_last_reload_successful 0"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reloader_picks_up_changes_without_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runtime.yaml");
        std::fs::write(&path, "overrides:\n  a:\n    ingestion_rate: 1\n").unwrap();
        let o = Arc::new(Overrides::new(Limits::default()));
        let stop = CancellationToken::new();
        let cfg = RuntimeConfigConfig {
            file: path.clone(),
            period: Duration::from_secs(10),
        };
        let task = tokio::spawn(o.clone().run_reloader(cfg, stop.clone()));
        let mut seen = Vec::new();
        for rate in [1.0, 2.0] {
            if rate == 2.0 {
                std::fs::write(&path, "overrides:\n  a:\n    ingestion_rate: 2\n").unwrap();
            }
            // Bounded: at most 5 periods for the reloader to notice.
            for _ in 0..5 {
                tokio::time::advance(Duration::from_secs(10)).await;
                // Let the reloader's file read (a blocking-pool task) complete.
                for _ in 0..50 {
                    tokio::task::yield_now().await;
                    if o.get("a").ingestion_rate == rate {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                if o.get("a").ingestion_rate == rate {
                    break;
                }
            }
            seen.push(o.get("a").ingestion_rate);
        }
        stop.cancel();
        task.await.unwrap();
        assert_eq!(seen, vec![1.0, 2.0]);
    }

    #[test]
    fn flags_cover_every_key() {
        let v = serde_norway::to_value(RuntimeConfigConfig::default()).unwrap();
        for k in v.as_mapping().unwrap().keys() {
            let k = format!("runtime_config.{}", k.as_str().unwrap());
            assert!(RUNTIME_CONFIG_FLAGS.iter().any(|f| f.key == k), "no flag for {k}");
        }
        assert!(
            RuntimeConfigConfig {
                period: Duration::ZERO,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
    }
}
