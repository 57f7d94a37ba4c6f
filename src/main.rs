//! The `nodeport-guard` binary: parses the command line and hands it to the commands, with the
//! runner that executes the system's programs.

use std::process::ExitCode;
use std::sync::Arc;

use clap::FromArgMatches as _;
use nodeport_guard::cli::Cli;
use nodeport_guard::dataplane::SystemRunner;

/// Usage errors exit 1 like every other error (`--help` and `--version` exit 0).
fn main() -> ExitCode {
    let cli = match nodeport_guard::cli::command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches))
    {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    nodeport_guard::commands::run(&cli, Arc::new(SystemRunner))
}
