//! Reconciling: observe, plan, apply, verify; and putting the previous state back when an
//! apply fails half-way. The CLI and the daemon both reconcile through here.
//!
//! The reconciler is level-triggered: it never needs to know why it was called. Whatever the
//! kernel holds, it computes the difference from the desired state and applies only that.

use std::time::{Duration, Instant};

use crate::dataplane::{Dataplane, DataplaneError};
use crate::plan::{Plan, Summary, plan};
use crate::state::State;

/// What one reconcile did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The plan that was carried out (empty when nothing had to change).
    pub plan: Plan,
    /// What the kernel held before.
    pub before: State,
    /// How long applying and verifying took.
    pub elapsed: Duration,
    /// How many nf_tables transactions the write committed (see
    /// [`crate::dataplane::Backend::write`]).
    pub commits: u32,
}

impl Outcome {
    /// The plan's counts.
    pub fn summary(&self) -> Summary {
        self.plan.summary()
    }
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading the kernel failed; nothing was written.
    #[error("cannot read the current rules: {0}")]
    Observe(#[source] DataplaneError),
    /// Writing failed; the previous state was put back.
    #[error("{error}; the previous rules were restored")]
    RolledBack {
        /// What failed (in the message already, so not repeated as a source).
        error: DataplaneError,
    },
    /// Writing failed and putting the previous state back failed too.
    #[error("{error}; restoring the previous rules failed as well: {restore}")]
    RestoreFailed {
        /// What failed first (in the message already).
        error: DataplaneError,
        /// Why the restore failed.
        restore: DataplaneError,
    },
}

/// Applies the difference between `desired` and what the kernel holds, and checks the result.
/// On failure, puts back what the kernel held before.
pub fn reconcile(dataplane: &Dataplane<'_>, desired: &State) -> Result<Outcome, ReconcileError> {
    let before = dataplane.observe().map_err(ReconcileError::Observe)?;
    apply_against(dataplane, desired, before)
}

/// Like [`reconcile`], with the kernel's current state already read.
pub fn apply_against(
    dataplane: &Dataplane<'_>,
    desired: &State,
    before: State,
) -> Result<Outcome, ReconcileError> {
    let changes = plan(desired, &before);
    write_planned(dataplane, desired, before, changes)
}

/// Carries out `changes`, the plan from `before` (what the kernel held) to `desired`, as it
/// was made (and shown): the plan is not made again. Checks the result; on failure, puts back
/// `before`.
pub fn write_planned(
    dataplane: &Dataplane<'_>,
    desired: &State,
    before: State,
    changes: Plan,
) -> Result<Outcome, ReconcileError> {
    let started = Instant::now();
    if changes.is_empty() {
        return Ok(Outcome {
            plan: changes,
            before,
            elapsed: started.elapsed(),
            commits: 0,
        });
    }
    let result = dataplane
        .apply_and_read_back(&changes, desired)
        .and_then(|(commits, after)| {
            check(dataplane, desired, &after, &changes)?;
            Ok(commits)
        });
    match result {
        Ok(commits) => Ok(Outcome {
            plan: changes,
            before,
            elapsed: started.elapsed(),
            commits,
        }),
        Err(error) => {
            tracing::error!(%error, "apply failed; restoring the previous rules");
            match restore(dataplane, &before) {
                Ok(_) => Err(ReconcileError::RolledBack { error }),
                Err(restore) => Err(ReconcileError::RestoreFailed { error, restore }),
            }
        }
    }
}

/// How a reconcile read the kernel before planning (see [`view`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Every rule and set was read.
    Whole,
    /// The view was still the kernel's (only what the sign does not cover, such as ipsets,
    /// was read).
    Cached,
}

/// Whether `after`, the read-back of a write of `written`, holds `desired` there. What the
/// plan did not touch was read just before it was made and needed no change; reading it again
/// would only double the time an apply takes. With iptables the read-back is every table and
/// set the plan names; with nftables every table and set of a family it touched, since one
/// transaction may rebuild a family's whole table.
fn check(
    dataplane: &Dataplane<'_>,
    desired: &State,
    after: &State,
    written: &Plan,
) -> Result<(), DataplaneError> {
    let remaining = dataplane.backend.unverified(desired, after, written);
    if remaining.is_empty() {
        Ok(())
    } else {
        Err(DataplaneError::Verify(remaining.summary().line()))
    }
}

/// Puts `previous` back, whatever the kernel holds now, and returns what it changed.
pub fn restore(dataplane: &Dataplane<'_>, previous: &State) -> Result<Plan, DataplaneError> {
    let now = dataplane.observe()?;
    let changes = plan(previous, &now);
    if changes.is_empty() {
        return Ok(changes);
    }
    let (_, after) = dataplane.apply_and_read_back(&changes, previous)?;
    check(dataplane, previous, &after, &changes)?;
    Ok(changes)
}

#[cfg(test)]
mod tests;
pub mod view;

pub use view::{FirstRead, Prefetched, View, ViewAside, reconcile_after, reconcile_cached};
