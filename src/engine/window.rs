//! The confirm window of `apply --confirm-timeout`: putting the previous rules back when it is
//! not confirmed in time, by its watcher or, when nothing watches it any more, by the next
//! command that finds it.

use std::time::Duration;

use anyhow::Result;

use super::record;
use crate::dataplane::{Dataplane, Host};
use crate::reconcile;
use crate::system::runtime::{RollbackRecord, StateDir, now_seconds};
use crate::system::watcher;

/// How often the rollback watcher tries to put the previous rules back.
pub const ROLLBACK_ATTEMPTS: u32 = 5;

/// A rollback is the promise of `--confirm-timeout`: a failure that may pass (another program
/// holding the lock or writing the same tables) is tried again, `pause` apart, before it is
/// given up and recorded where `confirm` and `status` show it.
pub fn roll_back_retrying(
    state_dir: &StateDir,
    runner: &dyn Host,
    id: &str,
    pause: Duration,
) -> Result<()> {
    let mut last_error = None;
    for attempt in 1..=ROLLBACK_ATTEMPTS {
        match roll_back(state_dir, runner, id) {
            Ok(()) => return Ok(()),
            Err(error) => {
                last_error = Some(error);
                if attempt < ROLLBACK_ATTEMPTS {
                    std::thread::sleep(pause);
                }
            }
        }
    }
    let error = last_error.unwrap_or_else(|| anyhow::anyhow!("no attempt was made"));
    let _ = state_dir.clear_pending();
    state_dir.set_last_rollback(&RollbackRecord {
        id: id.to_owned(),
        at: now_seconds(),
        outcome: format!(
            "was not confirmed in time; rolling it back failed {ROLLBACK_ATTEMPTS} times: {error:#}"
        ),
    })?;
    Err(error)
}

/// One attempt: under the lock, puts back the rules from before the pending apply `id`, unless
/// it was confirmed (or replaced) meanwhile.
pub fn roll_back(state_dir: &StateDir, runner: &dyn Host, id: &str) -> Result<()> {
    let _lock = state_dir.lock("nodeport-guard rollback", true)?;
    roll_back_locked(
        state_dir,
        runner,
        id,
        "was not confirmed in time and was rolled back",
    )
}

/// A pending apply that nothing watches any more (its watcher was killed, or the apply itself
/// before it could start one) would never be rolled back, and would block every later apply:
/// called with the writers' lock held, this keeps the promise. Past the deadline it rolls the
/// apply back now and returns its id; before it, it starts a new watcher.
pub fn settle_unwatched(
    state_dir: &StateDir,
    runner: &dyn Host,
    by: &str,
) -> Result<Option<String>> {
    let Some(mut pending) = state_dir.pending()? else {
        return Ok(None);
    };
    if pending
        .watcher_pid
        .is_some_and(|pid| watcher::is_watching(pid, &pending.id))
    {
        return Ok(None);
    }
    if now_seconds() < pending.deadline {
        pending.watcher_pid = Some(watcher::spawn(state_dir.path(), &pending.id)?);
        state_dir.set_pending(&pending)?;
        tracing::warn!(
            id = %pending.id,
            "the rollback watcher of a pending apply was gone; started a new one"
        );
        return Ok(None);
    }
    roll_back_locked(
        state_dir,
        runner,
        &pending.id,
        &format!(
            "was not confirmed in time and was rolled back by `{by}` (its rollback watcher had stopped)"
        ),
    )?;
    Ok(Some(pending.id))
}

/// [`roll_back`] with the lock held; `rolled_back` is the outcome recorded.
fn roll_back_locked(
    state_dir: &StateDir,
    runner: &dyn Host,
    id: &str,
    rolled_back: &str,
) -> Result<()> {
    let Some(pending) = state_dir.pending()? else {
        return Ok(());
    };
    if pending.id != id {
        return Ok(());
    }
    let dataplane = Dataplane::new(
        pending.backend,
        runner,
        pending.families.clone(),
        state_dir.path(),
    );
    let restored = reconcile::restore(&dataplane, &pending.previous)?;
    // `status` names the counters of the rules that are back, not of the ones that went.
    match &pending.previous_index {
        Some(index) => record::applied(state_dir, index),
        None => {
            let _ = state_dir.clear_applied();
        }
    }
    record::change(state_dir, "rollback", &restored);
    // What is back is what the kernel held before the apply, drift included: if that was not
    // what had been applied before it (a jump deleted, a chain flushed), the hole is back too.
    let drifted = pending
        .previous_index
        .as_ref()
        .and_then(|index| index.desired_identity.as_deref())
        .is_some_and(|applied| applied != pending.previous.identity());
    let mut outcome = rolled_back.to_owned();
    if drifted {
        outcome.push_str(
            "; the rules put back are not what was applied before it (another program had changed them since): `nodeport-guard plan` shows how they differ from the policy files, `nodeport-guard apply` puts the policies back",
        );
    }
    state_dir.clear_pending()?;
    state_dir.set_last_rollback(&RollbackRecord {
        id: id.to_owned(),
        at: now_seconds(),
        outcome,
    })?;
    Ok(())
}
