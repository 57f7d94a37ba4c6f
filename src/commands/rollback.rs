//! The hidden `__rollback-watch`: the process `apply --confirm-timeout` leaves behind, which
//! puts the previous rules back at the deadline unless the apply was confirmed.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use crate::dataplane::Host;
use crate::system::runtime::{StateDir, now_seconds};

pub use crate::engine::window::{
    ROLLBACK_ATTEMPTS, roll_back, roll_back_retrying, settle_unwatched,
};

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
