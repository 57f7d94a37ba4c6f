//! `render`: the desired state in the backend's load syntax; reads no firewall state.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use super::plan::print_rejected;
use crate::config::BackendChoice;
use crate::dataplane::iptables;
use crate::engine::{self, Compiling, Rejected};
use crate::settings::Settings;
use crate::system::host::host_facts;

/// `render`. With `--backend auto` nothing is detected (render reads no kernel state): the
/// iptables syntax is printed.
pub fn run(settings: &Settings) -> Result<ExitCode> {
    let compiled = match engine::compile(settings, &host_facts(&settings.config)) {
        Compiling::MissingDirectory => {
            print_rejected(&Rejected::MissingDirectory(
                settings.config.policies_dir.clone(),
            ));
            return Ok(ExitCode::from(1));
        }
        Compiling::Invalid(set) => {
            print_rejected(&Rejected::Invalid(Box::new(set)));
            return Ok(ExitCode::from(1));
        }
        Compiling::Compiled(set, compiled) => {
            let mut warnings = set.diagnostics;
            warnings.extend(compiled.warnings.iter().cloned());
            super::output::eprint_diagnostics(&warnings, &set.sources);
            compiled
        }
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
