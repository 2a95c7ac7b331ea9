//! The `heddle-loadtest` binary: `push` and `verify` subcommands; JSON summary on stdout, progress on stderr.
//! Exit status: 0 on success, 1 when a request failed or verification found a difference, 2 on unusable flags.

use clap::Parser;
use heddle_loadtest::args::{Cli, Command};
use heddle_loadtest::{run_push, run_verify};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("heddle-loadtest: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (json, ok) = match cli.command {
        Command::Push(args) => {
            let report = runtime.block_on(run_push(&args))?;
            (serde_json::to_string(&report)?, report.errors == 0)
        }
        Command::Verify(args) => {
            let report = runtime.block_on(run_verify(&args))?;
            (serde_json::to_string(&report)?, report.verified)
        }
    };
    println!("{json}");
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
