//! The command line (clap derive) and shell completion.

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Operate a heddle process through its gRPC Admin service.
///
/// Exit codes: 0 ok, 1 server error, 2 usage error, 3 server unreachable, 4 unauthenticated (a refused
/// token or a refused TLS handshake).
#[derive(Debug, Parser)]
#[command(name = "heddlectl", version)]
pub struct Cli {
    /// gRPC address of the heddle process (its admin port when `--server.admin-grpc-listen-port` is set).
    #[arg(long, global = true, default_value = "127.0.0.1:9095", env = "HEDDLECTL_ADDR")]
    pub addr: String,
    /// File holding the bearer token the server requires (`--server.admin-token-file` on the server).
    #[arg(long, global = true, env = "HEDDLECTL_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM CA the server's gRPC certificate must chain to; turns TLS on (`--server.grpc-tls-cert-path` on the
    /// server). An `https://` address needs it too: heddlectl does not trust system roots.
    #[arg(long, global = true, env = "HEDDLECTL_TLS_CA_PATH")]
    pub tls_ca_path: Option<PathBuf>,
    /// PEM client certificate, for a server with `--server.grpc-tls-client-auth=RequireAndVerifyClientCert`.
    #[arg(long, global = true, env = "HEDDLECTL_TLS_CERT_PATH", requires = "tls_key_path")]
    pub tls_cert_path: Option<PathBuf>,
    /// PEM private key of `--tls-cert-path`.
    #[arg(long, global = true, env = "HEDDLECTL_TLS_KEY_PATH", requires = "tls_cert_path")]
    pub tls_key_path: Option<PathBuf>,
    /// Name to verify in the server's certificate instead of the host of `--addr`.
    #[arg(long, global = true, env = "HEDDLECTL_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Connect and call timeout, in seconds.
    #[arg(long, global = true, default_value_t = 10)]
    pub timeout_s: u64,
    #[command(subcommand)]
    pub command: Command,
}

/// How answers are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// One JSON document for scripts.
    Json,
}

/// The admin calls.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the ring members: state, zone, address, tokens, ownership, heartbeat age.
    Ring,
    /// Remove a dead member from the ring.
    Forget {
        /// The member's ring id (see `heddlectl ring`).
        id: String,
    },
    /// Make one tenant's (or every tenant's) data durable now.
    Flush {
        /// Tenant to flush; repeat for several; none flushes all.
        #[arg(long)]
        tenant: Vec<String>,
        /// Return only when the flush has finished.
        #[arg(long)]
        wait: bool,
    },
    /// On the next shutdown, leave the ring and flush first.
    PrepareShutdown,
    /// Revert prepare-shutdown.
    CancelPrepareShutdown,
    /// Stop the process gracefully (as SIGTERM).
    Shutdown,
    /// Write a chunk snapshot now (or sync the WAL where snapshots are not available).
    Snapshot {
        /// Tenant to snapshot; repeat for several; none does all.
        #[arg(long)]
        tenant: Vec<String>,
    },
    /// List the tenants with data on this ingester.
    Tenants,
    /// Statistics of one tenant's head.
    Stats {
        /// The tenant id.
        tenant: String,
    },
    /// Version, git commit and compiler of the server.
    Version,
    /// Print a shell completion script.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Writes the completion script for `shell` to stdout.
pub fn print_completion(shell: clap_complete::Shell) {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "heddlectl", &mut std::io::stdout());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_the_documented_forms() {
        let cases: &[(&str, &[&str])] = &[
            ("ring", &["heddlectl", "--addr=h:1", "ring"]),
            (
                "flush tenants",
                &["heddlectl", "flush", "--tenant", "a", "--tenant=b", "--wait"],
            ),
            ("json after command", &["heddlectl", "tenants", "--output=json"]),
            ("stats", &["heddlectl", "stats", "t1"]),
            ("completion", &["heddlectl", "completion", "zsh"]),
            (
                "mtls",
                &[
                    "heddlectl",
                    "version",
                    "--tls-ca-path=ca.crt",
                    "--tls-cert-path=c.crt",
                    "--tls-key-path=c.key",
                    "--tls-server-name=ingester-0",
                ],
            ),
        ];
        for (name, argv) in cases {
            assert!(Cli::try_parse_from(*argv).is_ok(), "case {name}");
        }
        let bad: &[(&str, &[&str])] = &[
            ("no command", &["heddlectl"]),
            ("forget without id", &["heddlectl", "forget"]),
            ("unknown output", &["heddlectl", "ring", "--output=xml"]),
            (
                "cert without key",
                &["heddlectl", "ring", "--tls-ca-path=ca", "--tls-cert-path=c"],
            ),
        ];
        for (name, argv) in bad {
            assert!(Cli::try_parse_from(*argv).is_err(), "case {name}");
        }
        let c = Cli::try_parse_from(["heddlectl", "flush", "--tenant", "a", "--tenant=b", "--wait"]).unwrap();
        match c.command {
            Command::Flush { tenant, wait } => assert_eq!((tenant, wait), (vec!["a".into(), "b".into()], true)),
            other => panic!("parsed {other:?}"),
        }
    }
}
