//! `heddlectl`: the operator CLI for heddle's `heddle.admin.v1.Admin` gRPC service.
//!
//! Exit codes scripts can rely on: 0 ok, 1 the server refused or failed the call, 2 usage error,
//! 3 the server is unreachable, 4 the call was not authenticated (missing or wrong `--token-file`, or a TLS
//! handshake that either side refused: no or an untrusted client certificate, an untrusted server).

mod cli;
mod output;

use clap::Parser;
use cli::{Cli, Command};
use heddle_proto::admin as pb;
use heddle_proto::admin::admin_client::AdminClient;
use heddle_proto::transport::{ClientTls, PemSource, describe_error, grpc_uri};
use std::process::ExitCode;
use std::time::Duration;
use tonic::metadata::MetadataValue;

/// Exit code: the call succeeded.
const EXIT_OK: u8 = 0;
/// Exit code: the server answered with an error.
const EXIT_SERVER: u8 = 1;
/// Exit code: bad command line or unreadable local file.
const EXIT_USAGE: u8 = 2;
/// Exit code: could not reach the server.
const EXIT_UNREACHABLE: u8 = 3;
/// Exit code: the server refused the credentials.
const EXIT_UNAUTHENTICATED: u8 = 4;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Command::Completion { shell } = cli.command {
        cli::print_completion(shell);
        return ExitCode::from(EXIT_OK);
    }
    let token = match &cli.token_file {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(t) if !t.trim().is_empty() => Some(t.trim().to_owned()),
            Ok(_) => return usage(&format!("token file {} is empty", path.display())),
            Err(e) => return usage(&format!("cannot read token file {}: {e}", path.display())),
        },
        None => None,
    };
    let tls = match load_tls(&cli) {
        Ok(t) => t,
        Err(msg) => return usage(&msg),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("heddlectl: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_SERVER);
        }
    };
    ExitCode::from(runtime.block_on(run(cli, token, tls)))
}

/// The TLS settings of the command line, with their files read and checked; `None` for plain text.
fn load_tls(cli: &Cli) -> Result<Option<ClientTls>, String> {
    let Some(ca) = &cli.tls_ca_path else {
        if cli.addr.starts_with("https://") || cli.tls_cert_path.is_some() || cli.tls_server_name.is_some() {
            return Err("TLS needs --tls-ca-path: the CA that signed the server's gRPC certificate".into());
        }
        return Ok(None);
    };
    if cli.addr.starts_with("http://") {
        return Err(format!(
            "--addr {} is plain http:// but --tls-ca-path asks for TLS; use https:// or host:port",
            cli.addr
        ));
    }
    let identity = match (&cli.tls_cert_path, &cli.tls_key_path) {
        (Some(cert), Some(key)) => Some((
            PemSource::new("--tls-cert-path", cert),
            PemSource::new("--tls-key-path", key),
        )),
        _ => None,
    };
    ClientTls::load(
        PemSource::new("--tls-ca-path", ca),
        identity,
        cli.tls_server_name.as_deref(),
    )
    .map(Some)
    .map_err(|e| e.to_string())
}

/// Whether an error (with its sources) is a TLS failure: a certificate either side refused, or, with TLS 1.3,
/// the connection closed right after the handshake. A server refusing the client certificate sends its alert
/// only after the client has finished its side of the handshake, so a call already in flight sees just
/// "connection closed" or a broken pipe.
fn is_tls_failure(detail: &str) -> bool {
    let d = detail.to_lowercase();
    [
        "certificate",
        "alert",
        "handshake",
        "connection closed",
        "connection reset",
        "broken pipe",
    ]
    .iter()
    .any(|m| d.contains(m))
}

const TLS_HINT: &str = "the server requires a client certificate its CA signed (--tls-cert-path, --tls-key-path), \
                        and --tls-ca-path must be the CA that signed the server's";

fn usage(msg: &str) -> ExitCode {
    eprintln!("heddlectl: {msg}");
    ExitCode::from(EXIT_USAGE)
}

/// Sends one call and prints its answer; returns the exit code.
async fn run(cli: Cli, token: Option<String>, tls: Option<ClientTls>) -> u8 {
    let url = grpc_uri(&cli.addr, tls.is_some());
    let endpoint = match tonic::transport::Endpoint::from_shared(url) {
        Ok(e) => e
            .connect_timeout(Duration::from_secs(cli.timeout_s))
            .timeout(Duration::from_secs(cli.timeout_s)),
        Err(e) => {
            eprintln!("heddlectl: invalid --addr {:?}: {e}", cli.addr);
            return EXIT_USAGE;
        }
    };
    let endpoint = match &tls {
        Some(tls) => match endpoint.tls_config(tls.config()) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("heddlectl: cannot use the TLS settings: {}", describe_error(&e));
                return EXIT_USAGE;
            }
        },
        None => endpoint,
    };
    let channel = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => {
            let detail = describe_error(&e);
            if tls.is_some() && is_tls_failure(&detail) {
                eprintln!(
                    "heddlectl: TLS handshake with {} failed or was refused: {detail}; {TLS_HINT}",
                    cli.addr
                );
                return EXIT_UNAUTHENTICATED;
            }
            eprintln!("heddlectl: cannot reach {}: {detail}", cli.addr);
            return EXIT_UNREACHABLE;
        }
    };
    let auth: Option<MetadataValue<tonic::metadata::Ascii>> = match token.map(|t| format!("Bearer {t}").parse()) {
        Some(Ok(v)) => Some(v),
        Some(Err(_)) => {
            eprintln!("heddlectl: the token contains characters not allowed in a header");
            return EXIT_USAGE;
        }
        None => None,
    };
    let mut client = AdminClient::with_interceptor(channel, Auth(auth));
    let json = cli.output == cli::Output::Json;
    let result = call(&mut client, cli.command, json).await;
    match result {
        Ok(text) => {
            println!("{text}");
            EXIT_OK
        }
        Err(status) => {
            // A status with a source failed in the transport (the server never answered the call); the source
            // says why, and a TLS failure is only visible there.
            let Some(source) = std::error::Error::source(&status) else {
                eprintln!("heddlectl: {}: {}", code_name(status.code()), status.message());
                return match status.code() {
                    tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => EXIT_UNAUTHENTICATED,
                    _ => EXIT_SERVER,
                };
            };
            let detail = format!("{}: {}", status.message(), describe_error(source));
            if detail.contains("Timeout expired") {
                // Connected, but the call outlived --timeout-s (a long `flush --wait`, a stuck server).
                eprintln!(
                    "heddlectl: no answer from {} within {}s: {detail}",
                    cli.addr, cli.timeout_s
                );
                return EXIT_SERVER;
            }
            if tls.is_some() && is_tls_failure(&detail) {
                eprintln!(
                    "heddlectl: TLS handshake with {} failed or was refused: {detail}; {TLS_HINT}",
                    cli.addr
                );
                return EXIT_UNAUTHENTICATED;
            }
            // A TLS listener answers a plain-text HTTP/2 preface with a TLS alert and closes: a broken frame or
            // a broken pipe, depending on timing.
            let hint = if tls.is_none() {
                "; if it serves TLS (--server.grpc-tls-cert-path), pass --tls-ca-path"
            } else {
                ""
            };
            eprintln!("heddlectl: the connection to {} failed: {detail}{hint}", cli.addr);
            EXIT_UNREACHABLE
        }
    }
}

fn code_name(code: tonic::Code) -> String {
    format!("{code:?}").to_lowercase()
}

/// Adds `authorization: Bearer <token>` to every call when a token was given.
#[derive(Debug, Clone)]
struct Auth(Option<MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

type Client = AdminClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Auth>>;

async fn call(client: &mut Client, command: Command, json: bool) -> Result<String, tonic::Status> {
    use output as o;
    Ok(match command {
        Command::Ring => o::ring(&client.ring_status(pb::RingStatusRequest {}).await?.into_inner(), json),
        Command::Forget { id } => {
            let r = client.forget_member(pb::ForgetMemberRequest { id }).await?.into_inner();
            o::message(&r.message, json)
        }
        Command::Flush { tenant, wait } => {
            let r = client
                .flush(pb::FlushRequest { tenants: tenant, wait })
                .await?
                .into_inner();
            o::tenants_message(&r.tenants, &r.message, json)
        }
        Command::PrepareShutdown => {
            let r = client
                .prepare_shutdown(pb::PrepareShutdownRequest {})
                .await?
                .into_inner();
            o::prepared(r.prepared, json)
        }
        Command::CancelPrepareShutdown => {
            let r = client
                .cancel_prepare_shutdown(pb::CancelPrepareShutdownRequest {})
                .await?
                .into_inner();
            o::prepared(r.prepared, json)
        }
        Command::Shutdown => o::message(
            &client.shutdown(pb::ShutdownRequest {}).await?.into_inner().message,
            json,
        ),
        Command::Snapshot { tenant } => {
            let r = client
                .snapshot(pb::SnapshotRequest { tenants: tenant })
                .await?
                .into_inner();
            o::tenants_message(&r.tenants, &r.message, json)
        }
        Command::Tenants => o::tenants(
            &client
                .list_tenants(pb::ListTenantsRequest {})
                .await?
                .into_inner()
                .tenants,
            json,
        ),
        Command::Stats { tenant } => o::stats(
            &client
                .tenant_stats(pb::TenantStatsRequest { tenant })
                .await?
                .into_inner(),
            json,
        ),
        Command::Version => o::version(&client.build_info(pb::BuildInfoRequest {}).await?.into_inner(), json),
        Command::Completion { .. } => String::new(),
    })
}
