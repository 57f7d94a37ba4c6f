//! The hidden `__rollback-watch`: the process `apply --confirm-timeout` leaves behind, which
//! puts the previous rules back at the deadline unless the apply was confirmed.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use crate::dataplane::{Dataplane, Host};
use crate::engine::record;
use crate::reconcile;
use crate::system::runtime::{RollbackRecord, StateDir, now_seconds};

/// How often the rollback watcher tries to put the previous rules back.
pub const ROLLBACK_ATTEMPTS: u32 = 5;

/// `__rollback-watch ID`: waits for the deadline (a hang-up of the terminal that started it
/// does not cancel the rollback), then rolls back.
pub fn run(state_dir: &Path, runner: &dyn Host, id: &str) -> Result<ExitCode> {
    let state_dir = StateDir::new(state_dir);
    let Some(pending) = state_dir.pending()? else {
        eprintln!("{}: apply {id}: nothing pending any more", now_seconds());
        return Ok(ExitCode::SUCCESS);
    };
    if pending.id != id {
        eprintln!(
            "{}: apply {id}: replaced by apply {}; nothing to do",
            now_seconds(),
            pending.id
        );
        return Ok(ExitCode::SUCCESS);
    }
    let wait = pending.deadline.saturating_sub(now_seconds());
    eprintln!(
        "{}: watching apply {id}: rolling it back in {wait} s unless it is confirmed",
        now_seconds()
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let sleep = tokio::time::sleep(Duration::from_secs(wait));
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => break,
                _ = async { match hangup.as_mut() { Some(signal) => { signal.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
        }
    });
    roll_back_retrying(&state_dir, runner, id, Duration::from_secs(1))?;
    eprintln!(
        "{}: apply {id}: done (rolled back, or confirmed or replaced meanwhile)",
        now_seconds()
    );
    Ok(ExitCode::SUCCESS)
}

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
    let mut outcome = "was not confirmed in time and was rolled back".to_owned();
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
