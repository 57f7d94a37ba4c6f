//! `cleanup`: removes every chain, jump and set nodeport-guard owns, in both families.

use std::process::ExitCode;

use anyhow::Result;

use super::output::{ask, print_plan};
use crate::dataplane::Host;
use crate::engine::{Engine, record};
use crate::model::IpFamily;
use crate::plan;
use crate::reconcile;
use crate::settings::Settings;
use crate::state::State;

/// `cleanup [--yes]`.
pub fn run(settings: &Settings, runner: &dyn Host, yes: bool, full: bool) -> Result<ExitCode> {
    let engine = Engine::new(settings, runner);
    let backend = engine.backend;
    let state_dir = &engine.state_dir;
    let _lock = state_dir.lock("nodeport-guard cleanup", false)?;
    let dataplane = engine.dataplane(IpFamily::BOTH.to_vec());
    let observed = dataplane.observe()?;
    let mut changes = plan::plan(&State::default(), &observed);
    engine.name_policies(&mut changes, None);
    if changes.is_empty() {
        println!("Nothing to clean up: nodeport-guard owns nothing in {backend}.");
        return Ok(ExitCode::SUCCESS);
    }
    print_plan(&changes, full);
    if !ask("Remove all of these?", yes)? {
        eprintln!("Nothing was changed.");
        return Ok(ExitCode::from(1));
    }
    let outcome = reconcile::write_planned(&dataplane, &State::default(), observed, changes)?;
    state_dir.clear_pending().ok();
    // Nothing is applied any more: `status` names no rules.
    state_dir.clear_applied().ok();
    record::change(state_dir, "cleanup", &outcome.plan);
    println!("Removed every chain, jump and set of nodeport-guard.");
    Ok(ExitCode::SUCCESS)
}
