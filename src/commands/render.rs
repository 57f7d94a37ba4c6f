//! `render`: the desired state in the backend's load syntax; reads no firewall state.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use crate::config::BackendChoice;
use crate::dataplane::iptables;
use crate::policy_set;
use crate::settings::Settings;
use crate::system::host::host_facts;

/// `render`. With `--backend auto` nothing is detected (render reads no kernel state): the
/// iptables syntax is printed.
pub fn run(settings: &Settings) -> Result<ExitCode> {
    let Some((_, compiled)) = policy_set::compile_for(settings, &host_facts(&settings.config))
    else {
        return Ok(ExitCode::from(1));
    };
    let backend = match settings.backend {
        BackendChoice::Named(backend) => backend,
        BackendChoice::Auto => &iptables::NFT,
    };
    let text = backend.render(&compiled.ruleset);
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}
