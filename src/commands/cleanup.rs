//! `cleanup`: removes every chain, jump and set nodeport-guard owns, in both families.

use std::process::ExitCode;

use anyhow::Result;

use super::output::{ask, print_plan};
use crate::dataplane::{Dataplane, Runner};
use crate::model::IpFamily;
use crate::plan;
use crate::reconcile;
use crate::settings::Settings;
use crate::state::State;
use crate::system::runtime::StateDir;

/// `cleanup [--yes]`.
pub fn run(settings: &Settings, runner: &dyn Runner, yes: bool, full: bool) -> Result<ExitCode> {
    let state_dir = StateDir::new(&settings.state_dir);
    let backend = settings.backend.resolve(runner);
    let _lock = state_dir.lock("nodeport-guard cleanup", false)?;
    let dataplane = Dataplane::new(
        backend,
        runner,
        IpFamily::BOTH.to_vec(),
        &settings.state_dir,
    );
    let observed = dataplane.observe()?;
    let mut changes = plan::plan(&State::default(), &observed);
    super::plan::name_policies(&mut changes, settings, None);
    if changes.is_empty() {
        println!("Nothing to clean up: nodeport-guard owns nothing in {backend}.");
        return Ok(ExitCode::SUCCESS);
    }
    print_plan(&changes, full);
    if !ask("Remove all of these?", yes)? {
        eprintln!("Nothing was changed.");
        return Ok(ExitCode::from(1));
    }
    let outcome = reconcile::apply_against(&dataplane, &State::default(), observed)?;
    state_dir.clear_pending().ok();
    // Nothing is applied any more: `status` names no rules.
    state_dir.clear_applied().ok();
    super::apply::record_change(&state_dir, "cleanup", &outcome.plan);
    println!("Removed every chain, jump and set of nodeport-guard.");
    Ok(ExitCode::SUCCESS)
}
