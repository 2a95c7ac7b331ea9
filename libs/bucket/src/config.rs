//! Bucket configuration: Mimir's keys under `blocks_storage:` (`backend`, `filesystem.dir`, `s3.*`).

use heddle_config::{FlagKind, FlagSpec};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Which object store holds the blocks (`blocks_storage.backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// A local (or mounted) directory: the default, for single-process use.
    Filesystem,
    /// Any S3-compatible endpoint: AWS, MinIO, Ceph, s3s-fs.
    S3,
}

impl Backend {
    /// The name used in config, errors and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Filesystem => "filesystem",
            Backend::S3 => "s3",
        }
    }
}

/// The bucket part of `blocks_storage:`: `backend`, `filesystem:` and `s3:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BucketConfig {
    /// Which store holds the blocks.
    pub backend: Backend,
    /// `blocks_storage.filesystem:`.
    pub filesystem: FilesystemConfig,
    /// `blocks_storage.s3:`.
    pub s3: S3Config,
}

impl Default for BucketConfig {
    fn default() -> Self {
        Self {
            backend: Backend::Filesystem,
            filesystem: FilesystemConfig::default(),
            s3: S3Config::default(),
        }
    }
}

/// `blocks_storage.filesystem:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesystemConfig {
    /// Directory that plays the bucket: `<dir>/<tenant>/<ULID>/...`. Created if missing.
    pub dir: PathBuf,
}

impl Default for FilesystemConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("./blocks"),
        }
    }
}

/// `blocks_storage.s3:` (Mimir's names). Empty credentials, region and endpoint fall back to the standard AWS
/// environment variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, and the
/// rest of what `object_store`'s `AmazonS3Builder::from_env` reads, such as web identity for IRSA).
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3Config {
    /// `host[:port]` of the S3 service (Mimir's form), or a full `http(s)://` URL. Empty: AWS itself
    /// (`s3.<region>.amazonaws.com`) unless `AWS_ENDPOINT_URL` is set.
    pub endpoint: String,
    /// The bucket. Required with the s3 backend.
    pub bucket_name: String,
    /// Access key id; empty: from the environment.
    pub access_key_id: String,
    /// Secret access key; empty: from the environment. Never printed.
    pub secret_access_key: String,
    /// Plain HTTP instead of HTTPS to an `endpoint` given without a scheme.
    pub insecure: bool,
    /// Region used for request signing. Empty (Mimir's default): `AWS_REGION`, else `us-east-1`.
    pub region: String,
}

// The secret must not reach logs through `{:?}` of a config.
impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = if self.secret_access_key.is_empty() {
            ""
        } else {
            "<redacted>"
        };
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket_name", &self.bucket_name)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &secret)
            .field("insecure", &self.insecure)
            .field("region", &self.region)
            .finish()
    }
}

impl S3Config {
    /// The endpoint as a URL, or `None` for "not configured". `host:port` gets `http://` when `insecure`,
    /// `https://` otherwise.
    pub fn endpoint_url(&self) -> Option<String> {
        let endpoint = self.endpoint.trim();
        if endpoint.is_empty() {
            None
        } else if endpoint.contains("://") {
            Some(endpoint.trim_end_matches('/').to_owned())
        } else {
            let scheme = if self.insecure { "http" } else { "https" };
            Some(format!("{scheme}://{}", endpoint.trim_end_matches('/')))
        }
    }
}

impl BucketConfig {
    /// Checks what the chosen backend needs, naming the YAML key that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        match self.backend {
            Backend::Filesystem => {
                if self.filesystem.dir.as_os_str().is_empty() {
                    return Err("blocks_storage.filesystem.dir: must not be empty with the filesystem backend".into());
                }
            }
            Backend::S3 => {
                let s3 = &self.s3;
                if s3.bucket_name.trim().is_empty() {
                    return Err("blocks_storage.s3.bucket_name: must be set when blocks_storage.backend is s3".into());
                }
                if s3.access_key_id.is_empty() != s3.secret_access_key.is_empty() {
                    let missing = if s3.access_key_id.is_empty() {
                        "access_key_id"
                    } else {
                        "secret_access_key"
                    };
                    return Err(format!(
                        "blocks_storage.s3.{missing}: access_key_id and secret_access_key must be set together \
                         (or both left empty to use the AWS environment)"
                    ));
                }
                if let Some(url) = s3.endpoint_url() {
                    let scheme = url.split("://").next().unwrap_or_default();
                    if scheme != "http" && scheme != "https" {
                        return Err(format!(
                            "blocks_storage.s3.endpoint: {:?} has scheme {scheme:?}; use host:port or an http(s) URL",
                            s3.endpoint
                        ));
                    }
                    if url.len() <= scheme.len() + 3 {
                        return Err(format!("blocks_storage.s3.endpoint: {:?} has no host", s3.endpoint));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Flags for [`BucketConfig`]; keys are relative to the YAML root.
pub const BUCKET_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "blocks-storage.backend",
        key: "blocks_storage.backend",
        kind: FlagKind::Value,
        help: "Object store for blocks: filesystem or s3",
    },
    FlagSpec {
        flag: "blocks-storage.filesystem.dir",
        key: "blocks_storage.filesystem.dir",
        kind: FlagKind::Value,
        help: "Directory used as the bucket by the filesystem backend",
    },
    FlagSpec {
        flag: "blocks-storage.s3.endpoint",
        key: "blocks_storage.s3.endpoint",
        kind: FlagKind::Value,
        help: "S3 endpoint as host:port or an http(s) URL; empty: AWS (or AWS_ENDPOINT_URL)",
    },
    FlagSpec {
        flag: "blocks-storage.s3.bucket-name",
        key: "blocks_storage.s3.bucket_name",
        kind: FlagKind::Value,
        help: "S3 bucket name (required with the s3 backend)",
    },
    FlagSpec {
        flag: "blocks-storage.s3.access-key-id",
        key: "blocks_storage.s3.access_key_id",
        kind: FlagKind::Value,
        help: "S3 access key id; empty: AWS_ACCESS_KEY_ID or the AWS credential chain",
    },
    FlagSpec {
        flag: "blocks-storage.s3.secret-access-key",
        key: "blocks_storage.s3.secret_access_key",
        kind: FlagKind::Value,
        help: "S3 secret access key; empty: AWS_SECRET_ACCESS_KEY or the AWS credential chain",
    },
    FlagSpec {
        flag: "blocks-storage.s3.insecure",
        key: "blocks_storage.s3.insecure",
        kind: FlagKind::Bool,
        help: "Use plain HTTP to an endpoint given as host:port",
    },
    FlagSpec {
        flag: "blocks-storage.s3.region",
        key: "blocks_storage.s3.region",
        kind: FlagKind::Value,
        help: "S3 region for request signing; empty: AWS_REGION, else us-east-1",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(f: impl FnOnce(&mut S3Config)) -> BucketConfig {
        let mut cfg = BucketConfig {
            backend: Backend::S3,
            ..BucketConfig::default()
        };
        cfg.s3.bucket_name = "blocks".into();
        f(&mut cfg.s3);
        cfg
    }

    #[test]
    fn validate_names_the_key() {
        let cases: &[(&str, BucketConfig, Option<&str>)] = &[
            ("default filesystem", BucketConfig::default(), None),
            (
                "empty filesystem dir",
                BucketConfig {
                    filesystem: FilesystemConfig { dir: PathBuf::new() },
                    ..BucketConfig::default()
                },
                Some("blocks_storage.filesystem.dir"),
            ),
            ("s3 complete", s3(|_| {}), None),
            (
                "s3 without bucket",
                s3(|s| s.bucket_name.clear()),
                Some("blocks_storage.s3.bucket_name"),
            ),
            (
                "s3 key without secret",
                s3(|s| s.access_key_id = "k".into()),
                Some("blocks_storage.s3.secret_access_key"),
            ),
            (
                "s3 secret without key",
                s3(|s| s.secret_access_key = "s".into()),
                Some("blocks_storage.s3.access_key_id"),
            ),
            (
                "s3 bad scheme",
                s3(|s| s.endpoint = "ftp://x".into()),
                Some("blocks_storage.s3.endpoint"),
            ),
        ];
        for (name, cfg, want) in cases {
            match (cfg.validate(), want) {
                (Ok(()), None) => {}
                (Err(e), Some(key)) => assert!(e.starts_with(key), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want error naming {want:?}"),
            }
        }
    }

    #[test]
    fn endpoint_gets_a_scheme_from_insecure() {
        let mut c = S3Config {
            endpoint: "127.0.0.1:9000".into(),
            ..S3Config::default()
        };
        assert_eq!(c.endpoint_url().as_deref(), Some("https://127.0.0.1:9000"));
        c.insecure = true;
        assert_eq!(c.endpoint_url().as_deref(), Some("http://127.0.0.1:9000"));
        c.endpoint = "http://minio:9000/".into();
        assert_eq!(c.endpoint_url().as_deref(), Some("http://minio:9000"));
        c.endpoint.clear();
        assert_eq!(c.endpoint_url(), None);
    }

    #[test]
    fn parses_mimir_names_and_hides_the_secret() {
        let cfg: BucketConfig = serde_json::from_value(serde_json::json!({
            "backend": "s3",
            "s3": {"endpoint": "127.0.0.1:9000", "bucket_name": "b", "access_key_id": "k",
                   "secret_access_key": "hush", "insecure": true}
        }))
        .expect("parses");
        assert_eq!(cfg.backend, Backend::S3);
        assert_eq!(cfg.s3.bucket_name, "b");
        assert!(cfg.s3.insecure);
        assert_eq!(cfg.filesystem.dir, PathBuf::from("./blocks"));
        assert!(!format!("{cfg:?}").contains("hush"), "{cfg:?}");
        let unknown = serde_json::from_value::<BucketConfig>(serde_json::json!({"s3": {"bucket": "x"}}));
        assert!(unknown.is_err(), "unknown keys are refused");
        let backend = serde_json::from_value::<BucketConfig>(serde_json::json!({"backend": "gcs"}));
        assert!(backend.is_err(), "unknown backends are refused");
    }

    #[test]
    fn every_flag_names_a_key_of_the_config() {
        let json = serde_json::to_value(BucketConfig::default()).expect("serializes");
        for spec in BUCKET_FLAGS {
            let mut at = &json;
            let path = spec.key.strip_prefix("blocks_storage.").expect("under blocks_storage");
            for part in path.split('.') {
                at = at.get(part).unwrap_or_else(|| panic!("{}: no key {part}", spec.flag));
            }
            assert_eq!(spec.flag.replace('-', "_"), spec.key.replace('-', "_"), "{}", spec.flag);
        }
    }

    #[test]
    fn flags_fill_the_config() {
        #[derive(Debug, Default, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        struct Root {
            blocks_storage: BucketConfig,
        }
        let args = [
            "heddle",
            "--blocks-storage.backend=s3",
            "--blocks-storage.s3.endpoint=127.0.0.1:9000",
            "--blocks-storage.s3.bucket-name=blocks",
            "--blocks-storage.s3.access-key-id=ak",
            "--blocks-storage.s3.secret-access-key=sk",
            "--blocks-storage.s3.insecure=true",
            "--blocks-storage.s3.region=eu-west-1",
            "--blocks-storage.filesystem.dir=/data/blocks",
        ];
        let (root, _) =
            heddle_config::load::<Root>("heddle", "test", BUCKET_FLAGS, args.map(String::from)).expect("flags parse");
        let want = BucketConfig {
            backend: Backend::S3,
            filesystem: FilesystemConfig {
                dir: PathBuf::from("/data/blocks"),
            },
            s3: S3Config {
                endpoint: "127.0.0.1:9000".into(),
                bucket_name: "blocks".into(),
                access_key_id: "ak".into(),
                secret_access_key: "sk".into(),
                insecure: true,
                region: "eu-west-1".into(),
            },
        };
        assert_eq!(root.blocks_storage, want);
        let (root, _) =
            heddle_config::load::<Root>("heddle", "test", BUCKET_FLAGS, ["heddle".to_owned()]).expect("defaults");
        assert_eq!(root.blocks_storage, BucketConfig::default());
    }
}
