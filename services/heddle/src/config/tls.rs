//! TLS settings, with Mimir's keys and flags: `server.grpc_tls_config` for every gRPC listener and
//! `ingester_client.grpc_client_config.tls_*` for the distributors' and queriers' connections to ingesters.
//!
//! `validate` checks the combination without touching files; `load` (at start) reads and checks the files.
//! Settings that would quietly leave a connection less protected than configured are errors rather than
//! ignored: a client CA without a client auth policy, client TLS paths while `tls_enabled` is false, and
//! `tls_insecure_skip_verify` (not supported).

use heddle_config::{FlagKind, FlagSpec};
use heddle_proto::transport::{ClientAuth, ClientTls, PemSource, ServerTls, TlsError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `server.grpc_tls_config:`: TLS of the gRPC listeners. TLS is on when `cert_file` and `key_file` are set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcTlsConfig {
    /// PEM certificate chain the server presents.
    pub cert_file: PathBuf,
    /// PEM private key of `cert_file`.
    pub key_file: PathBuf,
    /// Go's `tls.ClientAuthType` name: `NoClientCert` (or empty), `VerifyClientCertIfGiven`,
    /// `RequireAndVerifyClientCert`.
    pub client_auth_type: String,
    /// PEM CA certificate(s) client certificates must chain to.
    pub client_ca_file: PathBuf,
}

const CERT: &str = "--server.grpc-tls-cert-path (server.grpc_tls_config.cert_file)";
const KEY: &str = "--server.grpc-tls-key-path (server.grpc_tls_config.key_file)";
const CLIENT_CA: &str = "--server.grpc-tls-ca-path (server.grpc_tls_config.client_ca_file)";

fn set(path: &Path) -> bool {
    !path.as_os_str().is_empty()
}

impl GrpcTlsConfig {
    /// Whether the gRPC listeners serve TLS.
    pub fn enabled(&self) -> bool {
        set(&self.cert_file) || set(&self.key_file)
    }

    /// Whether every gRPC caller must present a certificate the client CA signed (mutual TLS).
    pub fn requires_client_certificates(&self) -> bool {
        self.enabled()
            && set(&self.client_ca_file)
            && self.client_auth_type.parse::<ClientAuth>().ok() == Some(ClientAuth::RequireAndVerifyClientCert)
    }

    /// Checks the combination of settings, naming the YAML key that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let prefix = "server.grpc_tls_config";
        let auth: ClientAuth = self
            .client_auth_type
            .parse()
            .map_err(|e: TlsError| format!("{prefix}.client_auth_type: {e}"))?;
        match (set(&self.cert_file), set(&self.key_file)) {
            (true, false) => return Err(format!("{prefix}.key_file: required when cert_file is set")),
            (false, true) => return Err(format!("{prefix}.cert_file: required when key_file is set")),
            (false, false) => {
                if set(&self.client_ca_file) || auth != ClientAuth::NoClientCert {
                    return Err(format!(
                        "{prefix}: client_ca_file and client_auth_type need TLS: set cert_file and key_file \
                         (--server.grpc-tls-cert-path, --server.grpc-tls-key-path)"
                    ));
                }
                return Ok(());
            }
            (true, true) => {}
        }
        match (auth.needs_client_ca(), set(&self.client_ca_file)) {
            (true, false) => Err(format!(
                "{prefix}.client_ca_file: required with client_auth_type {auth:?}, to verify client certificates"
            )),
            (false, true) => Err(format!(
                "{prefix}.client_auth_type: client_ca_file is set but client certificates are not asked for; \
                 set client_auth_type to RequireAndVerifyClientCert (or VerifyClientCertIfGiven)"
            )),
            _ => Ok(()),
        }
    }

    /// Reads and checks the certificate, key and client CA; `None` when TLS is off. Call after `validate`.
    pub fn load(&self) -> Result<Option<ServerTls>, TlsError> {
        if !self.enabled() {
            return Ok(None);
        }
        let auth: ClientAuth = self.client_auth_type.parse()?;
        let ca = set(&self.client_ca_file).then(|| PemSource::new(CLIENT_CA, &self.client_ca_file));
        ServerTls::load(
            PemSource::new(CERT, &self.cert_file),
            PemSource::new(KEY, &self.key_file),
            ca,
            auth,
        )
        .map(Some)
    }
}

/// `ingester_client:`: how distributors and queriers call ingesters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct IngesterClientConfig {
    pub grpc_client_config: GrpcClientConfig,
}

/// `ingester_client.grpc_client_config:`: TLS of the connections to ingesters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcClientConfig {
    /// Dial ingesters over TLS.
    pub tls_enabled: bool,
    /// PEM client certificate chain, for ingesters that require one.
    pub tls_cert_path: PathBuf,
    /// PEM private key of `tls_cert_path`.
    pub tls_key_path: PathBuf,
    /// PEM CA certificate(s) the ingesters' certificates must chain to.
    pub tls_ca_path: PathBuf,
    /// Name checked against the ingesters' certificates instead of the host dialed.
    pub tls_server_name: String,
    /// Accepted for Mimir compatibility; `true` is refused.
    pub tls_insecure_skip_verify: bool,
}

const CLIENT_CERT: &str = "--ingester.client.tls-cert-path (ingester_client.grpc_client_config.tls_cert_path)";
const CLIENT_KEY: &str = "--ingester.client.tls-key-path (ingester_client.grpc_client_config.tls_key_path)";
const CLIENT_SERVER_CA: &str = "--ingester.client.tls-ca-path (ingester_client.grpc_client_config.tls_ca_path)";

impl GrpcClientConfig {
    /// Whether connections to ingesters present a client certificate.
    pub fn presents_certificate(&self) -> bool {
        self.tls_enabled && set(&self.tls_cert_path)
    }

    /// Checks the combination of settings, naming the YAML key that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let prefix = "ingester_client.grpc_client_config";
        let any_set = set(&self.tls_cert_path)
            || set(&self.tls_key_path)
            || set(&self.tls_ca_path)
            || !self.tls_server_name.is_empty();
        if !self.tls_enabled {
            if any_set || self.tls_insecure_skip_verify {
                return Err(format!(
                    "{prefix}.tls_enabled: TLS settings are given but tls_enabled is false, so ingesters would be \
                     dialed in plain text; set --ingester.client.tls-enabled or remove the tls_* settings"
                ));
            }
            return Ok(());
        }
        if self.tls_insecure_skip_verify {
            return Err(format!(
                "{prefix}.tls_insecure_skip_verify: not supported; set tls_ca_path to the CA that signed the \
                 ingesters' certificates"
            ));
        }
        if !set(&self.tls_ca_path) {
            return Err(format!(
                "{prefix}.tls_ca_path: required with tls_enabled (heddle does not trust system roots for \
                 ingester connections)"
            ));
        }
        match (set(&self.tls_cert_path), set(&self.tls_key_path)) {
            (true, false) => Err(format!("{prefix}.tls_key_path: required when tls_cert_path is set")),
            (false, true) => Err(format!("{prefix}.tls_cert_path: required when tls_key_path is set")),
            _ => Ok(()),
        }
    }

    /// Reads and checks the CA and client certificate; `None` when TLS is off. Call after `validate`.
    pub fn load(&self) -> Result<Option<ClientTls>, TlsError> {
        if !self.tls_enabled {
            return Ok(None);
        }
        let identity = set(&self.tls_cert_path).then(|| {
            (
                PemSource::new(CLIENT_CERT, &self.tls_cert_path),
                PemSource::new(CLIENT_KEY, &self.tls_key_path),
            )
        });
        ClientTls::load(
            PemSource::new(CLIENT_SERVER_CA, &self.tls_ca_path),
            identity,
            Some(self.tls_server_name.as_str()),
        )
        .map(Some)
    }
}

/// Flags of `server.grpc_tls_config`, Mimir's names.
pub const GRPC_TLS_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "server.grpc-tls-cert-path",
        key: "server.grpc_tls_config.cert_file",
        kind: FlagKind::Value,
        help: "PEM certificate (chain) of every gRPC listener; with the key, turns TLS on",
    },
    FlagSpec {
        flag: "server.grpc-tls-key-path",
        key: "server.grpc_tls_config.key_file",
        kind: FlagKind::Value,
        help: "PEM private key of the gRPC certificate",
    },
    FlagSpec {
        flag: "server.grpc-tls-client-auth",
        key: "server.grpc_tls_config.client_auth_type",
        kind: FlagKind::Value,
        help: "Client certificates the gRPC listeners ask for: NoClientCert (empty), VerifyClientCertIfGiven or \
               RequireAndVerifyClientCert (mutual TLS); RequestClientCert and RequireAnyClientCert are refused",
    },
    FlagSpec {
        flag: "server.grpc-tls-ca-path",
        key: "server.grpc_tls_config.client_ca_file",
        kind: FlagKind::Value,
        help: "PEM CA that client certificates must chain to; required with a client auth type that verifies",
    },
];

/// Flags of `ingester_client.grpc_client_config`, Mimir's names.
pub const INGESTER_CLIENT_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "ingester.client.tls-enabled",
        key: "ingester_client.grpc_client_config.tls_enabled",
        kind: FlagKind::Bool,
        help: "Dial ingesters over TLS (distributors and queriers)",
    },
    FlagSpec {
        flag: "ingester.client.tls-cert-path",
        key: "ingester_client.grpc_client_config.tls_cert_path",
        kind: FlagKind::Value,
        help: "PEM client certificate presented to ingesters that require one",
    },
    FlagSpec {
        flag: "ingester.client.tls-key-path",
        key: "ingester_client.grpc_client_config.tls_key_path",
        kind: FlagKind::Value,
        help: "PEM private key of the client certificate",
    },
    FlagSpec {
        flag: "ingester.client.tls-ca-path",
        key: "ingester_client.grpc_client_config.tls_ca_path",
        kind: FlagKind::Value,
        help: "PEM CA the ingesters' certificates must chain to; required with TLS",
    },
    FlagSpec {
        flag: "ingester.client.tls-server-name",
        key: "ingester_client.grpc_client_config.tls_server_name",
        kind: FlagKind::Value,
        help: "Name to verify in the ingesters' certificates instead of the address dialed",
    },
    FlagSpec {
        flag: "ingester.client.tls-insecure-skip-verify",
        key: "ingester_client.grpc_client_config.tls_insecure_skip_verify",
        kind: FlagKind::Bool,
        help: "Accepted for Mimir compatibility; true is refused (set the CA instead)",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn server(cert: &str, key: &str, auth: &str, ca: &str) -> GrpcTlsConfig {
        GrpcTlsConfig {
            cert_file: cert.into(),
            key_file: key.into(),
            client_auth_type: auth.into(),
            client_ca_file: ca.into(),
        }
    }

    #[test]
    fn server_settings_are_checked_together() {
        let ok = [
            ("off", server("", "", "", "")),
            ("tls only", server("c", "k", "", "")),
            ("tls only, named", server("c", "k", "NoClientCert", "")),
            ("mtls", server("c", "k", "RequireAndVerifyClientCert", "ca")),
            ("optional mtls", server("c", "k", "VerifyClientCertIfGiven", "ca")),
        ];
        for (name, cfg) in ok {
            assert_eq!(cfg.validate(), Ok(()), "case {name}");
        }
        let bad = [
            ("cert without key", server("c", "", "", ""), "key_file"),
            ("key without cert", server("", "k", "", ""), "cert_file"),
            ("ca without tls", server("", "", "", "ca"), "need TLS"),
            (
                "auth without tls",
                server("", "", "RequireAndVerifyClientCert", "ca"),
                "need TLS",
            ),
            (
                "verify without ca",
                server("c", "k", "RequireAndVerifyClientCert", ""),
                "client_ca_file",
            ),
            ("ca without auth", server("c", "k", "", "ca"), "client_auth_type"),
            (
                "unverified",
                server("c", "k", "RequireAnyClientCert", "ca"),
                "not supported",
            ),
            (
                "request only",
                server("c", "k", "RequestClientCert", "ca"),
                "not supported",
            ),
            ("typo", server("c", "k", "RequireAndVerify", "ca"), "unknown"),
        ];
        for (name, cfg, want) in bad {
            let err = cfg.validate().expect_err(name);
            assert!(err.contains(want), "case {name}: {err}");
        }
    }

    fn client(enabled: bool, cert: &str, key: &str, ca: &str, skip: bool) -> GrpcClientConfig {
        GrpcClientConfig {
            tls_enabled: enabled,
            tls_cert_path: cert.into(),
            tls_key_path: key.into(),
            tls_ca_path: ca.into(),
            tls_server_name: String::new(),
            tls_insecure_skip_verify: skip,
        }
    }

    #[test]
    fn client_settings_are_checked_together() {
        let ok = [
            ("off", client(false, "", "", "", false)),
            ("tls", client(true, "", "", "ca", false)),
            ("mtls", client(true, "c", "k", "ca", false)),
        ];
        for (name, cfg) in ok {
            assert_eq!(cfg.validate(), Ok(()), "case {name}");
        }
        let bad = [
            ("paths while off", client(false, "c", "k", "ca", false), "tls_enabled"),
            (
                "skip verify",
                client(true, "", "", "ca", true),
                "tls_insecure_skip_verify",
            ),
            ("no ca", client(true, "c", "k", "", false), "tls_ca_path"),
            ("cert without key", client(true, "c", "", "ca", false), "tls_key_path"),
        ];
        for (name, cfg, want) in bad {
            let err = cfg.validate().expect_err(name);
            assert!(err.contains(want), "case {name}: {err}");
        }
    }

    #[test]
    fn a_missing_file_names_the_flag_and_the_path() {
        let cfg = server(
            "/nonexistent/heddle/server.crt",
            "/nonexistent/heddle/server.key",
            "",
            "",
        );
        let err = cfg.load().expect_err("missing files").to_string();
        assert!(err.contains("--server.grpc-tls-cert-path"), "{err}");
        assert!(err.contains("/nonexistent/heddle/server.crt"), "{err}");
    }
}
