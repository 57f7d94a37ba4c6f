//! `confirm`: keeps the rules of a pending `apply --confirm-timeout`.

use std::process::ExitCode;

use anyhow::Result;

use crate::dataplane::Host;
use crate::settings::Settings;
use crate::system::runtime::{RollbackRecord, StateDir, now_seconds};
use crate::system::watcher;

/// How long `confirm` waits for the writers' lock (a rollback under way holds it).
const CONFIRM_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// `confirm`: exit 0 when an apply was waiting and is now kept, 1 when none was waiting.
pub fn run(settings: &Settings, runner: &dyn Host) -> Result<ExitCode> {
    let state_dir = StateDir::new(&settings.state_dir);
    // Nothing pending needs no lock (a daemon holds it for as long as it runs); anything else
    // is done with the lock held. The rollback watcher holds it while it rolls back (with
    // retries, seconds at most).
    if state_dir.pending()?.is_none() {
        return Ok(none_pending(&state_dir));
    }
    let _lock = state_dir.lock_within("nodeport-guard confirm", CONFIRM_PATIENCE)?;
    if let Some(id) =
        crate::engine::window::settle_unwatched(&state_dir, runner, "nodeport-guard confirm")?
    {
        eprintln!(
            "error: too late: apply {id} was not confirmed in time; its rollback watcher had stopped, so its previous rules were put back now"
        );
        return Ok(ExitCode::from(1));
    }
    let Some(pending) = state_dir.pending()? else {
        return Ok(none_pending(&state_dir));
    };
    if now_seconds() >= pending.deadline {
        eprintln!(
            "error: too late: the confirm window of apply {} has closed; its rollback is under way",
            pending.id
        );
        return Ok(ExitCode::from(1));
    }
    state_dir.clear_pending()?;
    if let Some(pid) = pending.watcher_pid
        && watcher::is_watching(pid, &pending.id)
    {
        watcher::stop(pid);
    }
    state_dir
        .set_last_rollback(&RollbackRecord {
            id: pending.id.clone(),
            at: now_seconds(),
            outcome: "was confirmed".to_owned(),
        })
        .ok();
    println!("Confirmed: the new rules stay.");
    Ok(ExitCode::SUCCESS)
}

/// Says that no apply waits for confirmation (and what became of the last one); exit 1.
fn none_pending(state_dir: &StateDir) -> ExitCode {
    match state_dir.last_rollback().ok().flatten() {
        Some(record) => eprintln!(
            "error: no apply is waiting for confirmation; the last one ({}) {}",
            record.id, record.outcome
        ),
        None => eprintln!("error: no apply is waiting for confirmation"),
    }
    ExitCode::from(1)
}
