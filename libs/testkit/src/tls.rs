//! Throwaway certificates for TLS tests, made with the `openssl` command line (no crate dependency): a CA, a
//! server certificate for `localhost` and `127.0.0.1`, and a client certificate, all P-256 keys valid for a
//! day, in a directory the caller owns. [`TestPki::server_args`] and friends turn them into heddle's flags.

use crate::{TestkitError, run_bounded};
use heddle_proto::transport::{ClientTls, PemSource};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Longest one `openssl` call may take.
const OPENSSL_TIMEOUT: Duration = Duration::from_secs(30);

/// A CA and two certificates it signed, as PEM files.
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The CA certificate (what both sides trust).
    pub ca_cert: PathBuf,
    /// Server certificate with SANs `localhost` and `127.0.0.1`, usable for server and client auth (a heddle
    /// process both serves and dials gRPC with it).
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// Client certificate (CN `client`), client auth only.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<(), TestkitError> {
    let mut cmd = Command::new("openssl");
    cmd.args(args).current_dir(dir);
    let out = run_bounded(cmd, OPENSSL_TIMEOUT)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TestkitError::io(
            format!("running openssl {}", args.join(" ")),
            std::io::Error::other(out.stderr),
        ))
    }
}

fn write(path: &Path, text: &str) -> Result<(), TestkitError> {
    std::fs::write(path, text).map_err(|e| TestkitError::io(format!("writing {}", path.display()), e))
}

/// Creates `<name>.key` and `<name>.crt` in `dir`, signed by the CA there, with the extensions in `ext`.
fn issue(dir: &Path, name: &str, ext: &str) -> Result<(PathBuf, PathBuf), TestkitError> {
    let (key, csr, crt, ext_file) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
        format!("{name}.ext"),
    );
    write(&dir.join(&ext_file), ext)?;
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={name}"),
        ],
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-sha256",
            "-extfile",
            &ext_file,
            "-out",
            &crt,
        ],
    )?;
    Ok((dir.join(crt), dir.join(key)))
}

impl TestPki {
    /// Generates a fresh CA named `ca_name` and its two certificates in `dir` (created if missing). Two
    /// calls give two unrelated CAs: a certificate of one is refused by a server trusting the other.
    pub fn generate(dir: &Path, ca_name: &str) -> Result<Self, TestkitError> {
        Self::generate_for(dir, ca_name, &[])
    }

    /// [`TestPki::generate`] with extra DNS names on the server certificate (a name a chart tells clients to
    /// verify, say).
    pub fn generate_for(dir: &Path, ca_name: &str, server_dns_names: &[&str]) -> Result<Self, TestkitError> {
        std::fs::create_dir_all(dir).map_err(|e| TestkitError::io(format!("creating {}", dir.display()), e))?;
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "1",
                "-subj",
                &format!("/CN={ca_name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        )?;
        let extra: String = server_dns_names.iter().map(|n| format!(",DNS:{n}")).collect();
        let (server_cert, server_key) = issue(
            dir,
            "server",
            &format!(
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n\
                 subjectAltName=DNS:localhost,IP:127.0.0.1{extra}\n"
            ),
        )?;
        let (client_cert, client_key) = issue(
            dir,
            "client",
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
        )?;
        Ok(Self {
            ca_cert: dir.join("ca.crt"),
            server_cert,
            server_key,
            client_cert,
            client_key,
        })
    }

    /// heddle flags serving gRPC with the server certificate and requiring client certificates of this CA.
    pub fn server_args(&self) -> Vec<String> {
        vec![
            format!("--server.grpc-tls-cert-path={}", self.server_cert.display()),
            format!("--server.grpc-tls-key-path={}", self.server_key.display()),
            "--server.grpc-tls-client-auth=RequireAndVerifyClientCert".to_owned(),
            format!("--server.grpc-tls-ca-path={}", self.ca_cert.display()),
        ]
    }

    /// heddle flags dialing ingesters over mutual TLS (the server certificate doubles as the client's).
    pub fn ingester_client_args(&self) -> Vec<String> {
        vec![
            "--ingester.client.tls-enabled".to_owned(),
            format!("--ingester.client.tls-cert-path={}", self.server_cert.display()),
            format!("--ingester.client.tls-key-path={}", self.server_key.display()),
            format!("--ingester.client.tls-ca-path={}", self.ca_cert.display()),
        ]
    }

    /// heddlectl flags for mutual TLS with the client certificate.
    pub fn heddlectl_args(&self) -> Vec<String> {
        vec![
            format!("--tls-ca-path={}", self.ca_cert.display()),
            format!("--tls-cert-path={}", self.client_cert.display()),
            format!("--tls-key-path={}", self.client_key.display()),
        ]
    }

    /// A gRPC client TLS config presenting the client certificate, for the harness's own calls.
    pub fn client_tls(&self) -> Result<ClientTls, TestkitError> {
        ClientTls::load(
            PemSource::new("test CA", &self.ca_cert),
            Some((
                PemSource::new("test client cert", &self.client_cert),
                PemSource::new("test client key", &self.client_key),
            )),
            None,
        )
        .map_err(|e| TestkitError::io("loading the test client certificate", std::io::Error::other(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_files_load_as_heddle_tls() {
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::generate(dir.path(), "test-ca").expect("openssl generates the test pki");
        pki.client_tls().expect("client certificate loads");
        heddle_proto::transport::ServerTls::load(
            PemSource::new("cert", &pki.server_cert),
            PemSource::new("key", &pki.server_key),
            Some(PemSource::new("ca", &pki.ca_cert)),
            heddle_proto::transport::ClientAuth::RequireAndVerifyClientCert,
        )
        .expect("server certificate loads");
    }
}
