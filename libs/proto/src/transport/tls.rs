//! TLS for the gRPC transport: [`ServerTls`] for a listener and [`ClientTls`] for a dialer, both read from
//! PEM files once, at start, and checked there (a file that is missing, unreadable or not the PEM it should be
//! is an error naming the option that pointed at it), so a bad certificate stops the process instead of
//! failing its first connection.
//!
//! What a server may ask of its clients follows Go's `crypto/tls` names, as Mimir's
//! `-server.grpc-tls-client-auth` does ([`ClientAuth`]). Only the policies that verify what they accept are
//! supported: `RequestClientCert` and `RequireAnyClientCert` take any certificate without checking who signed
//! it, which authenticates nobody, and are refused with an error saying what to use instead.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig};

/// Longest a client may take to finish the TLS handshake before the server drops the connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A PEM file to read, and the config option (flag or YAML key) that named it, for error messages.
#[derive(Debug, Clone, Copy)]
pub struct PemSource<'a> {
    /// How the operator set it, e.g. `--server.grpc-tls-cert-path`.
    pub option: &'a str,
    pub path: &'a Path,
}

impl<'a> PemSource<'a> {
    /// `path`, named by `option`.
    pub fn new(option: &'a str, path: &'a Path) -> Self {
        Self { option, path }
    }
}

/// Why TLS could not be set up. Every variant is a configuration mistake the operator must fix; none is
/// retried.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("{option}: cannot read {path}: {source}")]
    Read {
        option: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file was read but holds no PEM block of the kind expected.
    #[error("{option}: {path} holds no PEM {expected}")]
    NotPem {
        option: String,
        path: PathBuf,
        expected: &'static str,
    },
    /// The PEM blocks were found but TLS cannot use them (a corrupt certificate, a key of an unsupported kind).
    #[error("{options}: the TLS files cannot be used: {detail}")]
    Unusable { options: String, detail: String },
    /// A `client_auth_type` that is not one of Go's names, or one Heddle refuses.
    #[error("client auth type {value:?}: {reason}")]
    ClientAuth { value: String, reason: String },
}

/// What a TLS server asks of its clients: Go's `tls.ClientAuthType` names, as Mimir's
/// `-server.grpc-tls-client-auth` takes them. The empty string means [`ClientAuth::NoClientCert`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// Clients are not asked for a certificate.
    #[default]
    NoClientCert,
    /// A client may send a certificate; if it does, it must be signed by the client CA.
    VerifyClientCertIfGiven,
    /// Every client must send a certificate signed by the client CA (mutual TLS).
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    /// Whether this policy checks client certificates against a CA (which must then be configured).
    pub fn needs_client_ca(self) -> bool {
        self != ClientAuth::NoClientCert
    }
}

impl FromStr for ClientAuth {
    type Err = TlsError;

    fn from_str(value: &str) -> Result<Self, TlsError> {
        let refuse = |reason: &str| TlsError::ClientAuth {
            value: value.to_owned(),
            reason: reason.to_owned(),
        };
        match value {
            "" | "NoClientCert" => Ok(ClientAuth::NoClientCert),
            "VerifyClientCertIfGiven" => Ok(ClientAuth::VerifyClientCertIfGiven),
            "RequireAndVerifyClientCert" => Ok(ClientAuth::RequireAndVerifyClientCert),
            "RequestClientCert" | "RequireAnyClientCert" => Err(refuse(
                "not supported: it accepts client certificates without verifying them, which authenticates \
                 nobody; use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with a client CA file",
            )),
            _ => Err(refuse(
                "unknown; use NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert",
            )),
        }
    }
}

/// Reads `source` and checks it holds a PEM block whose label ends with `label` (`CERTIFICATE`, `PRIVATE KEY`).
fn read_pem(source: PemSource<'_>, label: &str, expected: &'static str) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(source.path).map_err(|e| TlsError::Read {
        option: source.option.to_owned(),
        path: source.path.to_owned(),
        source: e,
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let has_block = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{label}-----")));
    if !has_block {
        return Err(TlsError::NotPem {
            option: source.option.to_owned(),
            path: source.path.to_owned(),
            expected,
        });
    }
    Ok(bytes)
}

fn unusable(sources: &[PemSource<'_>], detail: String) -> TlsError {
    let options = sources
        .iter()
        .map(|s| format!("{}={}", s.option, s.path.display()))
        .collect::<Vec<_>>()
        .join(", ");
    TlsError::Unusable { options, detail }
}

/// Server-side TLS of a gRPC listener, loaded and checked. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ServerTls {
    config: ServerTlsConfig,
    client_auth: ClientAuth,
}

impl ServerTls {
    /// Reads the server's certificate chain and key, and with a policy other than
    /// [`ClientAuth::NoClientCert`] the CA that client certificates must chain to (required then, refused
    /// otherwise, as Mimir does). Fails if a file is missing, unreadable or unusable.
    pub fn load(
        cert: PemSource<'_>,
        key: PemSource<'_>,
        client_ca: Option<PemSource<'_>>,
        client_auth: ClientAuth,
    ) -> Result<Self, TlsError> {
        let cert_pem = read_pem(cert, "CERTIFICATE", "certificate")?;
        let key_pem = read_pem(key, "PRIVATE KEY", "private key")?;
        let mut config = ServerTlsConfig::new()
            .identity(Identity::from_pem(cert_pem, key_pem))
            .timeout(HANDSHAKE_TIMEOUT);
        let mut sources = vec![cert, key];
        match (client_auth.needs_client_ca(), client_ca) {
            (true, Some(ca)) => {
                let ca_pem = read_pem(ca, "CERTIFICATE", "CA certificate")?;
                config = config
                    .client_ca_root(Certificate::from_pem(ca_pem))
                    .client_auth_optional(client_auth == ClientAuth::VerifyClientCertIfGiven);
                sources.push(ca);
            }
            (true, None) => {
                return Err(TlsError::ClientAuth {
                    value: format!("{client_auth:?}"),
                    reason: "needs a client CA file to verify client certificates against".into(),
                });
            }
            (false, Some(ca)) => {
                return Err(TlsError::ClientAuth {
                    value: format!("{client_auth:?}"),
                    reason: format!(
                        "{} is set but client certificates are not asked for; set the client auth type to \
                         RequireAndVerifyClientCert (or VerifyClientCertIfGiven), or remove the client CA",
                        ca.option
                    ),
                });
            }
            (false, None) => {}
        }
        // Building the acceptor parses every PEM block and pairs the key with the certificate.
        Server::builder()
            .tls_config(config.clone())
            .map_err(|e| unusable(&sources, source_text(&e)))?;
        Ok(Self { config, client_auth })
    }

    /// What clients must present.
    pub fn client_auth(&self) -> ClientAuth {
        self.client_auth
    }

    /// The configuration for `tonic::transport::Server::tls_config`.
    pub fn config(&self) -> ServerTlsConfig {
        self.config.clone()
    }
}

/// Client-side TLS of a gRPC dialer, loaded and checked. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ClientTls {
    config: ClientTlsConfig,
}

impl ClientTls {
    /// Reads the CA that server certificates must chain to and, for mutual TLS, the client's own certificate
    /// chain and key. `server_name` overrides the name checked against the server's certificate (default: the
    /// host of the address dialed). Fails if a file is missing, unreadable or unusable.
    pub fn load(
        ca: PemSource<'_>,
        identity: Option<(PemSource<'_>, PemSource<'_>)>,
        server_name: Option<&str>,
    ) -> Result<Self, TlsError> {
        let ca_pem = read_pem(ca, "CERTIFICATE", "CA certificate")?;
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem));
        let mut sources = vec![ca];
        if let Some((cert, key)) = identity {
            let cert_pem = read_pem(cert, "CERTIFICATE", "certificate")?;
            let key_pem = read_pem(key, "PRIVATE KEY", "private key")?;
            config = config.identity(Identity::from_pem(cert_pem, key_pem));
            sources.extend([cert, key]);
        }
        if let Some(name) = server_name.filter(|n| !n.is_empty()) {
            config = config.domain_name(name);
        }
        // Building a connector parses the CA and the identity; nothing is dialed.
        Endpoint::from_static("https://127.0.0.1")
            .tls_config(config.clone())
            .map_err(|e| unusable(&sources, source_text(&e)))?;
        Ok(Self { config })
    }

    /// The configuration for `tonic::transport::Endpoint::tls_config`.
    pub fn config(&self) -> ClientTlsConfig {
        self.config.clone()
    }
}

/// `e` followed by its sources (`a: b: c`).
fn source_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

/// `addr` as a URI: kept if it has a scheme, else `https://addr` with TLS and `http://addr` without.
pub fn grpc_uri(addr: &str, tls: bool) -> String {
    if addr.contains("://") {
        addr.to_owned()
    } else if tls {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    }
}

/// An endpoint for `addr` ([`grpc_uri`]), over TLS when `tls` is given. Fails only when `addr` is not a valid
/// URI.
pub fn grpc_endpoint(addr: &str, tls: Option<&ClientTls>) -> Result<Endpoint, tonic::transport::Error> {
    let endpoint = Endpoint::from_shared(grpc_uri(addr, tls.is_some()))?;
    match tls {
        Some(tls) => endpoint.tls_config(tls.config()),
        None => Ok(endpoint),
    }
}

/// `e` and its sources as one line: a TLS failure is usually only visible in the innermost source.
pub fn describe_error(e: &(dyn std::error::Error + 'static)) -> String {
    source_text(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_auth_takes_go_names_and_refuses_unverified_policies() {
        let ok = [
            ("", ClientAuth::NoClientCert),
            ("NoClientCert", ClientAuth::NoClientCert),
            ("VerifyClientCertIfGiven", ClientAuth::VerifyClientCertIfGiven),
            ("RequireAndVerifyClientCert", ClientAuth::RequireAndVerifyClientCert),
        ];
        for (name, want) in ok {
            assert_eq!(name.parse::<ClientAuth>().ok(), Some(want), "case {name:?}");
        }
        let bad = [
            ("RequestClientCert", "not supported"),
            ("RequireAnyClientCert", "not supported"),
            ("requireandverifyclientcert", "unknown"),
        ];
        for (name, want) in bad {
            let err = name.parse::<ClientAuth>().expect_err(name).to_string();
            assert!(err.contains(want) && err.contains(name), "case {name:?}: {err}");
        }
    }

    #[test]
    fn files_that_are_missing_or_not_pem_name_their_option() {
        let dir = std::env::temp_dir().join(format!("heddle-proto-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("garbage.crt");
        std::fs::write(&not_pem, "hello").unwrap();
        let missing = dir.join("missing.key");
        let cases = [
            ("missing", missing.as_path(), "--key-flag: cannot read"),
            ("not pem", not_pem.as_path(), "holds no PEM"),
        ];
        for (name, path, want) in cases {
            let err = ClientTls::load(PemSource::new("--key-flag", path), None, None)
                .expect_err(name)
                .to_string();
            assert!(err.contains(want), "case {name}: {err}");
            assert!(err.contains(&path.display().to_string()), "case {name}: {err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bare_address_gets_the_scheme_of_its_transport() {
        assert_eq!(grpc_uri("h:1", true), "https://h:1");
        assert_eq!(grpc_uri("h:1", false), "http://h:1");
        assert_eq!(grpc_uri("http://h:1", true), "http://h:1");
    }
}
