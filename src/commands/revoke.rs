//! `revoke`: cut, once and on demand, the established connections the policies deny.

use std::process::ExitCode;

use anyhow::Result;

use super::output::{Cutting, ask, print_established, print_revoked};
use crate::dataplane::Host;
use crate::policy_set;
use crate::revocation;
use crate::settings::Settings;
use crate::system::host::host_facts;

/// `revoke [--yes]`: lists the established connections the policy files deny (of those that
/// came in through a host endpoint; never the host's own, loopback, or a failsafe port), asks,
/// and deletes their conntrack entries.
pub fn run(settings: &Settings, runner: &dyn Host, yes: bool) -> Result<ExitCode> {
    let policies = &settings.config.policies_dir;
    let set = policy_set::load_with(std::slice::from_ref(policies), settings.load);
    if !set.is_valid() {
        super::output::eprint_diagnostics(&set.diagnostics, &set.sources);
        return Ok(ExitCode::from(1));
    }
    let facts = host_facts(&settings.config);
    let found = revocation::revoke(runner, None, &set.model, &settings.config, &facts, false)
        .map_err(anyhow::Error::msg)?;
    if found.cuts.is_empty() {
        println!(
            "No established connection is denied by the policies ({} entries read).",
            found.examined
        );
        return Ok(ExitCode::SUCCESS);
    }
    print_established(&found, Cutting::OnDemand);
    if !ask("Cut these connections?", yes)? {
        eprintln!("Nothing was cut.");
        return Ok(ExitCode::from(1));
    }
    let done = revocation::revoke(runner, None, &set.model, &settings.config, &facts, true)
        .map_err(anyhow::Error::msg)?;
    print_revoked(&done);
    Ok(if done.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
