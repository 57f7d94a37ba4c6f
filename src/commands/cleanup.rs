//! `cleanup`: removes every chain, jump and set nodeport-guard owns, in both families and in
//! every backend that holds any: a host switched from one backend to another still holds the
//! first one's rules, and they still filter.

use std::process::ExitCode;

use anyhow::Result;

use super::output::{ask, print_plan};
use crate::dataplane::{BACKENDS, Backend, Dataplane, Host};
use crate::engine::{Engine, record};
use crate::model::IpFamily;
use crate::plan::{self, Plan};
use crate::reconcile;
use crate::settings::Settings;
use crate::state::State;

/// `cleanup [--yes]`.
pub fn run(settings: &Settings, runner: &dyn Host, yes: bool, full: bool) -> Result<ExitCode> {
    let engine = Engine::new(settings, runner);
    let chosen = engine.backend;
    let state_dir = &engine.state_dir;
    let _lock = state_dir.lock("nodeport-guard cleanup", false)?;
    let mut steps = Vec::new();
    for backend in others_then(chosen) {
        let dataplane = Dataplane::new(
            backend,
            runner,
            IpFamily::BOTH.to_vec(),
            &settings.state_dir,
        );
        let observed = match dataplane.observe() {
            Ok(observed) => observed,
            Err(error) if !std::ptr::addr_eq(backend, chosen) => {
                // Its programs are missing or its kernel part is absent: nothing of ours
                // can be there.
                tracing::debug!(%backend, %error, "cannot read this backend; skipping it");
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        steps.push((dataplane, observed));
    }
    let plans = plans(&steps);
    let mut steps: Vec<_> = steps
        .into_iter()
        .zip(plans)
        .filter(|(_, changes)| !changes.is_empty())
        .collect();
    if steps.is_empty() {
        println!("Nothing to clean up: nodeport-guard owns nothing in {chosen}.");
        return Ok(ExitCode::SUCCESS);
    }
    let several = steps.len() > 1;
    for ((dataplane, _), changes) in &mut steps {
        engine.name_policies(changes, None);
        if several {
            println!("In {}:", dataplane.backend);
        }
        print_plan(changes, full);
    }
    if !ask("Remove all of these?", yes)? {
        eprintln!("Nothing was changed.");
        return Ok(ExitCode::from(1));
    }
    for ((dataplane, observed), changes) in steps {
        let outcome = reconcile::write_planned(&dataplane, &State::default(), observed, changes)?;
        record::change(state_dir, "cleanup", &outcome.plan);
    }
    state_dir.clear_pending().ok();
    // Nothing is applied any more: `status` names no rules.
    state_dir.clear_applied().ok();
    println!("Removed every chain, jump and set of nodeport-guard.");
    Ok(ExitCode::SUCCESS)
}

/// Every backend, the chosen one last.
fn others_then(chosen: &'static dyn Backend) -> Vec<&'static dyn Backend> {
    let (mut order, last): (Vec<_>, Vec<_>) = BACKENDS
        .iter()
        .copied()
        .partition(|backend| !std::ptr::addr_eq(*backend, chosen));
    order.extend(last);
    order
}

/// The plan that empties each backend, in order. The two iptables backends share the ipsets
/// (one kernel subsystem), and a set cannot be destroyed while a rule of either refers to it:
/// only the last of them removes the sets, after every rule of ours is gone. Pure.
fn plans(steps: &[(Dataplane<'_>, State)]) -> Vec<Plan> {
    let last_with_ipsets = steps
        .iter()
        .rposition(|(dataplane, _)| dataplane.backend.shares_ipsets());
    steps
        .iter()
        .enumerate()
        .map(|(at, (dataplane, observed))| {
            let mut changes = plan::plan(&State::default(), observed);
            if dataplane.backend.shares_ipsets() && Some(at) != last_with_ipsets {
                changes.sets.clear();
            }
            changes
        })
        .collect()
}
