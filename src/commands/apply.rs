//! `apply`: the policies (or a saved plan) into the kernel atomically, optionally with a
//! confirm window after which an unconfirmed apply rolls back.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};

use super::output::{ask, print_cuts, print_leftovers, print_plan};
use super::plan::{print_rejected, print_warnings};
use crate::counters::AppliedIndex;
use crate::dataplane::{Backend, Host};
use crate::engine::{Engine, Leftover, Retired, SavedPlan, defer_set_deletions, record};
use crate::model::{IpFamily, Model};
use crate::plan;
use crate::policy_set;
use crate::reconcile;
use crate::settings::Settings;
use crate::state::State;
use crate::system::runtime::{PendingApply, StateDir, now_seconds};
use crate::system::watcher;

/// What an apply writes, from the policies or from a saved plan.
struct Target {
    backend: &'static dyn Backend,
    families: Vec<IpFamily>,
    desired: State,
    index: AppliedIndex,
    /// A saved plan's fingerprint of the kernel it was made against.
    expected_observed: Option<String>,
}

/// Reads a saved plan, refusing it when the policy files changed since.
fn saved_target(settings: &Settings, path: &Path) -> Result<Target> {
    /// The one field every format of a saved plan has.
    #[derive(serde::Deserialize)]
    struct Format {
        format: u32,
    }
    let bytes = fs_err::read(path)?;
    let not_a_plan = || format!("`{}` is not a plan saved by `plan --out`", path.display());
    let format = serde_json::from_slice::<Format>(&bytes)
        .with_context(not_a_plan)?
        .format;
    if format != SavedPlan::FORMAT {
        bail!(
            "`{}` is a plan of format {format}, and this nodeport-guard reads format {} only; make a new plan",
            path.display(),
            SavedPlan::FORMAT
        );
    }
    let saved: SavedPlan = serde_json::from_slice(&bytes).with_context(not_a_plan)?;
    if let crate::dataplane::BackendChoice::Named(backend) = settings.backend
        && backend.name() != saved.backend.name()
    {
        bail!(
            "`{}` is a plan for {}, and the backend here is {} (--backend or the config's `backend`); make a new plan, or apply it with `--backend {}`",
            path.display(),
            saved.backend.name(),
            backend.name(),
            saved.backend.name()
        );
    }
    let set = policy_set::load(std::slice::from_ref(&settings.config.policies_dir));
    if set.fingerprint != saved.policies {
        bail!(
            "stale plan: the policy files in `{}` changed since the plan was made; make a new plan",
            settings.config.policies_dir.display()
        );
    }
    Ok(Target {
        backend: saved.backend,
        families: saved.families,
        desired: saved.desired,
        index: saved.index,
        expected_observed: Some(saved.observed),
    })
}

/// `apply [--yes] [--confirm-timeout SECS] [PLANFILE]`.
pub fn run(
    settings: &Settings,
    runner: &dyn Host,
    yes: bool,
    confirm_timeout: Option<u64>,
    plan_file: Option<&Path>,
    full: bool,
) -> Result<ExitCode> {
    let engine = Engine::new(settings, runner);
    // Taken first so that the kernel can be read (under the lock) while the policies compile;
    // a failure is reported where it always was, after the policies' diagnostics.
    let lock = engine.state_dir.lock("nodeport-guard apply", false);
    let mut observation = None;
    let mut cut_off = None;
    // The policies to apply, validated (for naming the plan's chains); a saved plan's are
    // validated from its files below.
    let mut model = None;
    // What other backends hold of ours (the host switched backends), read while the policies
    // compile.
    let mut leftovers = None;
    let target = match plan_file {
        Some(path) => saved_target(settings, path)?,
        None => {
            let (prepared, observed, others) = prepare(&engine, lock.is_ok());
            (observation, leftovers) = (observed, others);
            let prepared = match prepared {
                Ok(prepared) => prepared,
                Err(rejected) => {
                    print_rejected(&rejected);
                    return Ok(ExitCode::from(1));
                }
            };
            print_warnings(&prepared);
            cut_off = engine.cut_off(&prepared);
            let index = prepared.index();
            model = Some(prepared.model);
            Target {
                backend: prepared.backend,
                families: prepared.compiled.ruleset.ip_families(),
                index,
                desired: prepared.desired,
                expected_observed: None,
            }
        }
    };
    let _lock = lock?;
    let state_dir = &engine.state_dir;
    if settle_confirm_window(state_dir, runner)? {
        // The kernel changed under the reading taken while the policies compiled.
        observation = None;
    }
    let engine = Engine::with_backend(settings, runner, target.backend);
    let dataplane = engine.dataplane(target.families.clone());
    let observed = match observation.as_mut() {
        Some(observation) => std::mem::replace(&mut observation.state, Ok(State::default()))?,
        None => dataplane.observe()?,
    };
    if let Some(expected) = &target.expected_observed
        && observed.fingerprint() != *expected
    {
        bail!("stale plan: the kernel's rules changed since the plan was made; make a new plan");
    }
    let mut changes = plan::plan(&target.desired, &observed);
    let Others {
        retired: leftovers,
        deferred,
    } = others(
        &engine,
        leftovers,
        plan_file.is_some(),
        confirm_timeout.is_some(),
        &mut changes,
    );
    let model = model.or_else(|| {
        let policies = policy_set::from_files_through(
            &target.index.policy_files,
            crate::counters::applied_instant(target.index.applied_at),
            &engine.cache(),
        );
        policies.is_valid().then_some(policies.model)
    });
    engine.name_policies(&mut changes, model.as_ref());
    if changes.is_empty() && leftovers.is_empty() {
        println!("No changes: the kernel holds exactly what the policies say.");
        if confirm_timeout.is_some() {
            println!("Nothing changed, so there is nothing to confirm.");
        }
        record::applied(&engine.state_dir, &target.index);
        return Ok(ExitCode::SUCCESS);
    }
    if !changes.is_empty() {
        print_plan(&changes, full);
    }
    if let Some(impact) = &cut_off {
        print_cuts(impact);
    }
    print_leftovers(&leftovers, full);
    if !deferred.is_empty() && !leftovers.is_empty() {
        println!(
            "Then the sets no longer used, once no rule refers to them: {}.",
            deferred.join(", ")
        );
    }
    if !ask("Apply these changes?", yes)? {
        eprintln!("Nothing was changed.");
        return Ok(ExitCode::from(1));
    }
    // With a confirm window, the way back is written down before anything changes, so an
    // interrupted apply can still be rolled back.
    let pending = match confirm_timeout {
        Some(seconds) => Some(
            record_pending(&engine.state_dir, &target, observed.clone(), seconds).with_context(|| {
                format!(
                    "refusing `--confirm-timeout`: the way back cannot be written to the state directory `{}`, so no rollback could be promised; nothing was changed (use a writable `--state-dir`, or apply without `--confirm-timeout`)",
                    engine.state_dir.path().display()
                )
            })?,
        ),
        None => None,
    };
    // What was applied before, for the connections the change revokes (read before the
    // record is replaced).
    let revoke_from = settings
        .config
        .revoke_established
        .then(|| engine.applied_model());
    let written = engine.write(
        &dataplane,
        &target.desired,
        observed,
        changes,
        observation.as_ref(),
        &target.index,
    );
    let outcome = match written {
        Ok(outcome) => outcome,
        Err(error) => {
            engine.state_dir.clear_pending().ok();
            return Err(error.into());
        }
    };
    println!("Applied in {} ms.", outcome.elapsed.as_millis());
    let retiring = !leftovers.is_empty();
    retire(
        &engine,
        &dataplane,
        &target.desired,
        leftovers,
        retiring && !deferred.is_empty(),
    );
    if let Some(before) = revoke_from
        && !target.index.policy_files.is_empty()
    {
        revoke_after_apply(&engine, before.as_ref(), model.as_ref());
    }
    if let Some(pending) = pending
        && let Err(error) = start_watcher(&engine.state_dir, pending)
    {
        // Without a watcher nothing would roll back: undo now rather than leave a promise
        // that cannot be kept.
        let restored = reconcile::restore(&dataplane, &outcome.before);
        engine.state_dir.clear_pending().ok();
        return Err(match restored {
            Ok(_) => error.context("the previous rules were restored"),
            Err(restore) => error.context(format!(
                "restoring the previous rules failed too: {restore}"
            )),
        });
    }
    Ok(ExitCode::SUCCESS)
}

/// The policies prepared, with the kernel read beside them when `observing` (the lock is
/// held), and what other backends hold of ours, read at the same time.
fn prepare<'a>(
    engine: &Engine<'a>,
    observing: bool,
) -> (
    Result<crate::engine::Prepared, crate::engine::Rejected>,
    Option<crate::reconcile::view::Observation>,
    Option<crate::engine::Leftovers<'a>>,
) {
    std::thread::scope(|scope| {
        let others = scope.spawn(|| engine.leftovers());
        let (prepared, observation) = if observing {
            match engine.prepare_observing() {
                Ok((prepared, observed)) => (Ok(prepared), Some(observed)),
                Err(rejected) => (Err(rejected), None),
            }
        } else {
            (engine.prepare(), None)
        };
        (prepared, observation, others.join().ok())
    })
}

/// What other backends hold of ours, as an apply deals with it.
struct Others<'a> {
    /// What this apply removes once its own write stands.
    retired: Vec<Leftover<'a>>,
    /// The sets this apply does not delete while other backends' rules refer to them.
    deferred: Vec<String>,
}

/// Rules of ours in another backend still filter: they go once this write stands, and the
/// sets they refer to after them; with `kept_because`, they stay, said in a warning. Set
/// deletions are deferred while they refer to the sets, either way.
fn others<'a>(
    engine: &Engine<'a>,
    read_early: Option<crate::engine::Leftovers<'a>>,
    saved_plan: bool,
    confirm_window: bool,
    changes: &mut plan::Plan,
) -> Others<'a> {
    let mut leftovers = read_early.unwrap_or_else(|| engine.leftovers());
    leftovers.warn_unread();
    let kept_because = if saved_plan {
        Some("a saved plan is applied as it was shown; `apply` without a plan removes them")
    } else if confirm_window {
        // A rollback puts back only this backend's rules.
        Some(
            "they stay while this apply waits for `confirm`; the next apply without `--confirm-timeout` removes them",
        )
    } else {
        None
    };
    let deferred = if engine.backend.shares_ipsets()
        && leftovers
            .found
            .iter()
            .any(|leftover| leftover.dataplane.backend.shares_ipsets())
    {
        defer_set_deletions(changes)
    } else {
        Vec::new()
    };
    if let Some(because) = kept_because {
        for leftover in &leftovers.found {
            eprintln!(
                "warning: {} of nodeport-guard in {} (from before a switch of backend) still filter: {because}",
                leftover.what(),
                leftover.dataplane.backend
            );
        }
        leftovers.found.clear();
    }
    for leftover in &mut leftovers.found {
        engine.name_policies(&mut leftover.plan, None);
    }
    Others {
        retired: leftovers.found,
        deferred,
    }
}

/// Removes the rules of ours that other backends hold, now that the policies stand in this
/// one, then the sets deferred for them, and says how it went: a failure is a warning, the
/// policies stay applied, and `plan` and the next apply show what is left.
fn retire(
    engine: &Engine<'_>,
    dataplane: &crate::dataplane::Dataplane<'_>,
    desired: &State,
    leftovers: Vec<Leftover<'_>>,
    deferred: bool,
) {
    let (retired, sets) = engine.retire(dataplane, desired, leftovers, deferred);
    for Retired { backend, error } in retired {
        match error {
            None => println!("Removed the rules of nodeport-guard from {backend}."),
            Some(error) => eprintln!(
                "warning: the rules of nodeport-guard in {backend} were not removed, and still filter: {error}"
            ),
        }
    }
    if let Some(error) = sets {
        eprintln!("warning: sets of nodeport-guard no longer used were not removed: {error}");
    }
}

/// Cuts the established connections the applied policies deny and the ones before allowed
/// (`revokeEstablished`), and says so; a failure is reported, the rules stay.
fn revoke_after_apply(engine: &Engine<'_>, before: Option<&Model>, after: Option<&Model>) {
    let Some(after) = after else {
        return;
    };
    match engine.revoke(before, after, &engine.facts(), true) {
        Ok(report) => super::output::print_revoked(&report),
        Err(error) => eprintln!(
            "warning: established connections were not revoked (the rules are applied): {error}"
        ),
    }
}

/// Refuses while an earlier apply waits for `confirm`; one that nothing watches any more is
/// rolled back first if its deadline has passed (true: the kernel changed).
fn settle_confirm_window(state_dir: &StateDir, runner: &dyn Host) -> Result<bool> {
    let rolled_back =
        crate::engine::window::settle_unwatched(state_dir, runner, "nodeport-guard apply")?;
    if let Some(id) = &rolled_back {
        eprintln!(
            "The earlier apply {id} was not confirmed in time and its rollback watcher had stopped: its previous rules are back now."
        );
    }
    if let Some(pending) = state_dir.pending()? {
        bail!(
            "an earlier apply ({}) is waiting for `nodeport-guard confirm`; confirm it or let it roll back first",
            pending.id
        );
    }
    Ok(rolled_back.is_some())
}

fn record_pending(
    state_dir: &StateDir,
    target: &Target,
    previous: State,
    seconds: u64,
) -> Result<PendingApply> {
    let seed = format!(
        "{}-{}-{}",
        std::process::id(),
        now_seconds(),
        previous.fingerprint()
    );
    let id = crate::digest::hash(&seed)[..12].to_owned();
    let pending = PendingApply {
        id,
        backend: target.backend,
        families: target.families.clone(),
        deadline: now_seconds() + seconds,
        watcher_pid: None,
        previous,
        previous_index: state_dir.applied().ok().flatten(),
    };
    state_dir.set_pending(&pending)?;
    Ok(pending)
}

fn start_watcher(state_dir: &StateDir, mut pending: PendingApply) -> Result<()> {
    pending.watcher_pid = Some(watcher::spawn(state_dir.path(), &pending.id)?);
    state_dir.set_pending(&pending)?;
    eprintln!(
        "Run `nodeport-guard confirm` within {} s to keep these rules; otherwise the previous rules come back.",
        pending.deadline.saturating_sub(now_seconds())
    );
    Ok(())
}
