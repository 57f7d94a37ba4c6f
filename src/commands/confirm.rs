//! `confirm`: keeps the rules of a pending `apply --confirm-timeout`.

use std::process::ExitCode;

use anyhow::Result;

use crate::settings::Settings;
use crate::system::runtime::{RollbackRecord, StateDir, now_seconds};
use crate::system::watcher;

/// `confirm`: exit 0 when an apply was waiting and is now kept, 1 when none was waiting.
pub fn run(settings: &Settings) -> Result<ExitCode> {
    let state_dir = StateDir::new(&settings.state_dir);
    let _lock = state_dir.lock("nodeport-guard confirm", true)?;
    let Some(pending) = state_dir.pending()? else {
        match state_dir.last_rollback()? {
            Some(record) => eprintln!(
                "error: no apply is waiting for confirmation; the last one ({}) {}",
                record.id, record.outcome
            ),
            None => eprintln!("error: no apply is waiting for confirmation"),
        }
        return Ok(ExitCode::from(1));
    };
    state_dir.clear_pending()?;
    if let Some(pid) = pending.watcher_pid {
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
