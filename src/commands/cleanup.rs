//! `cleanup`: removes every chain, jump and set nodeport-guard owns, in both families and in
//! every backend that holds any: a host switched from one backend to another still holds the
//! first one's rules, and they still filter.

use std::process::ExitCode;

use anyhow::Result;

use super::output::{ask, print_plan};
use crate::dataplane::Host;
use crate::engine::{Engine, record};
use crate::reconcile;
use crate::settings::Settings;
use crate::state::State;

/// `cleanup [--yes]`.
pub fn run(settings: &Settings, runner: &dyn Host, yes: bool, full: bool) -> Result<ExitCode> {
    let engine = Engine::new(settings, runner);
    let state_dir = &engine.state_dir;
    let _lock = state_dir.lock("nodeport-guard cleanup", false)?;
    let mut steps = engine.everything_of_ours()?;
    if steps.is_empty() {
        println!(
            "Nothing to clean up: nodeport-guard owns nothing in {}.",
            engine.backend
        );
        return Ok(ExitCode::SUCCESS);
    }
    let several = steps.len() > 1;
    for step in &mut steps {
        engine.name_policies(&mut step.plan, None);
        if several {
            println!("In {}:", step.dataplane.backend);
        }
        print_plan(&step.plan, full);
    }
    if !ask("Remove all of these?", yes)? {
        eprintln!("Nothing was changed.");
        return Ok(ExitCode::from(1));
    }
    for step in steps {
        let outcome =
            reconcile::write_planned(&step.dataplane, &State::default(), step.observed, step.plan)?;
        record::change(state_dir, "cleanup", &outcome.plan);
    }
    state_dir.clear_pending().ok();
    // Nothing is applied any more: `status` names no rules.
    state_dir.clear_applied().ok();
    println!("Removed every chain, jump and set of nodeport-guard.");
    Ok(ExitCode::SUCCESS)
}
