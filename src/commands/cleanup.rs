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

/// `cleanup [--yes]`: exit 1 when a backend could not be read or emptied (the others are
/// emptied all the same).
pub fn run(settings: &Settings, runner: &dyn Host, yes: bool, full: bool) -> Result<ExitCode> {
    let engine = Engine::new(settings, runner);
    let state_dir = &engine.state_dir;
    let _lock = state_dir.lock("nodeport-guard cleanup", false)?;
    let everything = engine.everything_of_ours()?;
    for (backend, error) in &everything.unread {
        eprintln!(
            "warning: cannot read {backend}, so rules of nodeport-guard there, if any, stay: {error}"
        );
    }
    let mut steps = everything.found;
    if steps.is_empty() {
        println!(
            "Nothing to clean up: nodeport-guard owns nothing in {}.",
            engine.backend
        );
        return Ok(exit(everything.unread.is_empty()));
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
    let mut all_removed = true;
    for step in steps {
        let backend = step.dataplane.backend;
        match reconcile::write_planned(&step.dataplane, &State::default(), step.observed, step.plan)
        {
            Ok(outcome) => record::change(state_dir, "cleanup", &outcome.plan),
            Err(error) => {
                all_removed = false;
                eprintln!("error: in {backend}: {error}");
            }
        }
    }
    if !all_removed {
        return Ok(ExitCode::from(1));
    }
    state_dir.clear_pending().ok();
    // Nothing is applied any more: `status` names no rules.
    state_dir.clear_applied().ok();
    println!("Removed every chain, jump and set of nodeport-guard.");
    Ok(exit(everything.unread.is_empty()))
}

fn exit(success: bool) -> ExitCode {
    if success {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
