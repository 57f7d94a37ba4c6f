//! The commands: one module each, and the dispatcher that runs the one the command line names.
//!
//! Data goes to stdout, everything else (diagnostics, warnings, questions, logs) to stderr.
//! Errors in input are printed as `path:line:column: error: message` with a code frame;
//! unexpected failures as `error: …` with their causes. Nothing panics at a user.
//!
//! The commands sit on top: they use the pipeline (`policy_set`, `plan`, `reconcile`), the
//! dataplane and the runtime directory, and nothing below calls back up. The runner that
//! executes programs is made once, in `main`, and passed down.

pub mod apply;
pub mod cleanup;
pub mod confirm;
pub mod drops;
pub mod exposure;
pub mod generate;
pub mod grant;
pub mod grants;
pub mod output;
pub mod plan;
pub mod render;
pub mod revoke;
pub mod rollback;
pub mod run;
pub mod schema;
pub mod status;
pub mod trace;
pub mod validate;

#[cfg(test)]
mod tests;

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;

use crate::cli::{Cli, Command, GlobalOptions, LogFormat};
use crate::dataplane::Host;
use crate::settings::Settings;

/// Runs a parsed command line with `runner` executing programs. Panics become a one-line
/// internal error and exit 1. A reader that goes away (`nodeport-guard grants | head -1`)
/// ends the command quietly, with exit 1: what it printed was not all read.
pub fn run(cli: &Cli, runner: Arc<dyn Host>) -> ExitCode {
    use std::io::Write as _;
    init_logging(cli);
    std::panic::set_hook(Box::new(|info| {
        if !is_closed_output(info.payload()) {
            // Not `eprintln!`: with stderr closed as well, that would panic inside the hook.
            let _ = writeln!(
                std::io::stderr(),
                "error: internal error (this is a bug in nodeport-guard): {info}"
            );
        }
    }));
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dispatch(cli, runner))) {
        Ok(Ok(code)) => code,
        Ok(Err(error)) => {
            let _ = writeln!(std::io::stderr(), "error: {error:#}");
            ExitCode::from(1)
        }
        Err(_) => ExitCode::from(1),
    }
}

/// Whether a panic's `payload` is `print!`'s on a closed stdout or stderr (EPIPE).
fn is_closed_output(payload: &(dyn std::any::Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    message.starts_with("failed printing to std")
        && message.contains(&std::io::Error::from_raw_os_error(nix::libc::EPIPE).to_string())
}

fn dispatch(cli: &Cli, runner: Arc<dyn Host>) -> Result<ExitCode> {
    let global = &cli.global;
    let local = runner.as_ref();
    match &cli.command {
        Command::Schema { config_schema } => Ok(schema::run(*config_schema)),
        Command::Generate { what, out_dir } => generate::run(*what, out_dir),
        // The watcher needs nothing but the state directory: a config file broken since the
        // apply must not stop a rollback.
        Command::RollbackWatch { id } => rollback::run(&global.state_dir, local, id),
        Command::Validate { paths } => with_settings(global, |s| Ok(validate::run(&s, paths))),
        Command::Render => with_settings(global, |s| render::run(&s)),
        Command::Plan {
            detailed_exitcode,
            json,
            out,
            full,
        } => with_settings(global, |s| {
            plan::run(&s, local, *detailed_exitcode, *json, out.as_deref(), *full)
        }),
        Command::Apply {
            yes,
            confirm_timeout,
            plan_file,
            full,
        } => with_settings(global, |s| {
            apply::run(
                &s,
                local,
                *yes,
                *confirm_timeout,
                plan_file.as_deref(),
                *full,
            )
        }),
        Command::Confirm => with_settings(global, |s| confirm::run(&s, local)),
        Command::Revoke { yes } => with_settings(global, |s| revoke::run(&s, local, *yes)),
        Command::Cleanup { yes, full } => {
            with_settings(global, |s| cleanup::run(&s, local, *yes, *full))
        }
        Command::Status {
            json,
            detailed_exitcode,
        } => with_settings(global, |s| {
            status::run(&s, local, *json, *detailed_exitcode)
        }),
        Command::Exposure {
            json,
            detailed_exitcode,
        } => with_settings(global, |s| {
            exposure::run(&s, local, *json, *detailed_exitcode)
        }),
        Command::Trace(args) => with_settings(global, |s| trace::run(&s, args)),
        Command::Drops(args) => with_settings(global, |s| drops::run(&s, args)),
        Command::Grant(args) => with_settings(global, |s| grant::run(&s, args)),
        Command::Grants { json, prune } => {
            with_settings(global, |s| grants::run(&s, *json, *prune))
        }
        Command::Run => with_settings(global, |s| run::run(s, runner.clone())),
    }
}

/// Runs `command` with the checked settings, or prints why they cannot be had (exit 1).
fn with_settings(
    global: &GlobalOptions,
    command: impl FnOnce(Settings) -> Result<ExitCode>,
) -> Result<ExitCode> {
    match Settings::from_options(global) {
        Ok((settings, warnings)) => {
            output::eprint_diagnostics(&warnings, &crate::source::Sources::new());
            command(settings)
        }
        Err((sources, diagnostics)) => {
            output::eprint_diagnostics(&diagnostics, &sources);
            Ok(ExitCode::from(1))
        }
    }
}

fn init_logging(cli: &Cli) {
    let default_level = match (cli.global.verbose, &cli.command) {
        (0, Command::Run) => "info",
        (0, _) => "warn",
        (1, _) => "info",
        (2, _) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("nodeport_guard={default_level}"))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match cli.global.log_format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder
            .with_ansi(output::use_color(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR"),
            ))
            .try_init(),
    };
}

/// The policy directory loaded and validated, for the commands that read it without compiling
/// (`trace`, `grants`). When it is missing or invalid, prints why and returns `None`.
fn load_valid(settings: &Settings) -> Option<crate::policy_set::PolicySet> {
    let dir = &settings.config.policies_dir;
    if !dir.is_dir() {
        eprintln!(
            "error: the policy directory `{}` does not exist or is not a directory",
            dir.display()
        );
        return None;
    }
    let set = crate::policy_set::load_with(std::slice::from_ref(dir), settings.load);
    if !set.is_valid() {
        output::eprint_diagnostics(&set.diagnostics, &set.sources);
        return None;
    }
    Some(set)
}
