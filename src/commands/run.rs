//! `run`: the daemon (see `crate::daemon`).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;

use crate::dataplane::Host;
use crate::settings::Settings;

/// `run`: until SIGTERM or SIGINT; the rules stay in place when it stops.
pub fn run(settings: Settings, runner: Arc<dyn Host>) -> Result<ExitCode> {
    // A daemon lives long: one malloc arena keeps it near what it uses (its work is on one
    // thread at a time; the compiler's short-lived threads share it).
    crate::system::runtime::limit_malloc_arenas(DAEMON_ARENAS);
    crate::daemon::run(settings, runner)
}

/// The daemon's malloc arenas.
const DAEMON_ARENAS: i32 = 1;
