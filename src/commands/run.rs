//! `run`: the daemon (see `crate::daemon`).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;

use crate::dataplane::Host;
use crate::settings::Settings;

/// `run`: until SIGTERM or SIGINT; the rules stay in place when it stops.
pub fn run(settings: Settings, runner: Arc<dyn Host>) -> Result<ExitCode> {
    crate::daemon::run(settings, runner)
}
