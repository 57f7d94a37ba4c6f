//! Reconciling: observe, plan, apply, verify; and putting the previous state back when an
//! apply fails half-way. The CLI and the daemon both reconcile through here.
//!
//! The reconciler is level-triggered: it never needs to know why it was called. Whatever the
//! kernel holds, it computes the difference from the desired state and applies only that.

use std::time::{Duration, Instant};

use crate::dataplane::{Dataplane, DataplaneError, Hold, Stamp};
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
    let result = dataplane.apply(&changes, desired).and_then(|commits| {
        verify(dataplane, desired, &changes)?;
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

/// What the kernel held of ours at a sign of the kernel's (see [`crate::dataplane::Sign`]):
/// while the sign stays the same nobody has changed the rules, so the daemon plans against
/// this instead of reading every rule again (Felix's table syncer does the same with its
/// cached view).
#[derive(Clone, Debug)]
pub struct Cached {
    /// The sign at which `state` was the kernel's.
    sign: Stamp,
    /// Our part of the kernel then.
    state: std::sync::Arc<State>,
}

/// How a [`reconcile_cached`] read the kernel before planning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Every rule and set was read.
    Whole,
    /// The cached view was still the kernel's (only what the sign does not cover, such as
    /// ipsets, was read).
    Cached,
}

/// Like [`reconcile`], planning against `cache` when the kernel's sign says the kernel has not
/// changed since it was taken, and leaving in `cache` what the kernel holds afterwards when
/// that is certain: when the sign moved by this reconcile's own write alone (nf_tables: by
/// exactly the transactions it committed; x_tables: under the xtables lock, held from the
/// first reading to the last). Anything else (a backend without a sign, a sign that cannot be
/// read, a lock that cannot be taken, a foreign commit, a failed write) leaves the cache
/// empty, so the next reconcile reads the whole kernel again.
pub fn reconcile_cached(
    dataplane: &Dataplane<'_>,
    desired: &std::sync::Arc<State>,
    cache: &mut Option<Cached>,
) -> Result<(Outcome, Read), ReconcileError> {
    let first = FirstRead::take(dataplane, cache.as_ref());
    reconcile_after(dataplane, desired, cache, first)
}

/// The first reading of a [`reconcile_cached`]: the kernel's sign, what it does not cover
/// (ipsets) read beside it when there is a view to trust, and for iptables-legacy the xtables
/// lock, held from then on. The daemon takes it while it compiles (the x_tables digest takes
/// tens of milliseconds at thousands of rules) and hands it to [`reconcile_after`].
pub struct FirstRead<'r> {
    /// The host holding the xtables lock (iptables-legacy).
    locked: Option<Box<dyn crate::dataplane::Host + 'r>>,
    /// The sign, or `None`: no sign to trust (none read, or the lock not taken).
    start: Option<Stamp>,
    /// The view refreshed, read at `start`.
    refreshed: Option<Result<State, DataplaneError>>,
}

impl<'r> FirstRead<'r> {
    /// Reads the sign of `dataplane`'s kernel and, with a `cached` view, what the sign does not
    /// cover.
    pub fn take(dataplane: &Dataplane<'r>, cached: Option<&Cached>) -> FirstRead<'r> {
        use crate::dataplane::Coverage;
        let unsigned = FirstRead {
            locked: None,
            start: None,
            refreshed: None,
        };
        if dataplane.backend.sign_covers() == Coverage::Nothing {
            return unsigned;
        }
        let locked = match dataplane.backend.hold_writers_off(dataplane.kernel) {
            Hold::Unneeded => None,
            Hold::Held(host) => Some(host),
            Hold::Unavailable => return unsigned,
        };
        let reader = under(dataplane, locked.as_deref());
        let (start, refreshed) = match cached {
            Some(cached) => std::thread::scope(|scope| {
                let refreshed = scope.spawn(|| reader.backend.refresh(&reader, &cached.state));
                let start = reader.sign();
                (start, Some(crate::dataplane::runner::joined(refreshed)))
            }),
            None => (reader.sign(), None),
        };
        FirstRead {
            locked,
            start,
            refreshed,
        }
    }
}

/// `dataplane`, under the xtables lock when `locked` holds it.
fn under<'s>(
    dataplane: &Dataplane<'s>,
    locked: Option<&'s dyn crate::dataplane::Host>,
) -> Dataplane<'s> {
    match locked {
        Some(host) => dataplane.holding(host),
        None => dataplane.clone(),
    }
}

/// [`reconcile_cached`] after its [`FirstRead`], taken of the same kernel with the `cache` of
/// now.
pub fn reconcile_after(
    dataplane: &Dataplane<'_>,
    desired: &std::sync::Arc<State>,
    cache: &mut Option<Cached>,
    first: FirstRead<'_>,
) -> Result<(Outcome, Read), ReconcileError> {
    let cached = cache.take();
    let Some(start) = first.start else {
        return reconcile(dataplane, desired).map(|outcome| (outcome, Read::Whole));
    };
    let dataplane = under(dataplane, first.locked.as_deref());
    let (before, read, valid_from) = match (cached, first.refreshed) {
        (Some(cached), Some(refreshed)) if cached.sign == start => (
            refreshed.map_err(ReconcileError::Observe)?,
            Read::Cached,
            Some(start),
        ),
        _ => {
            let before = dataplane.observe().map_err(ReconcileError::Observe)?;
            // Read in one piece only if nothing changed while it was read.
            let after_read = dataplane.sign();
            (
                before,
                Read::Whole,
                (after_read == Some(start)).then_some(start),
            )
        }
    };
    let outcome = apply_against(&dataplane, desired, before)?;
    if let (Some(from), Some(now)) = (valid_from, dataplane.sign())
        && now.follows(from, outcome.commits)
    {
        // Written and verified, or found to need nothing: either way the kernel holds what the
        // planner compares of `desired`, so the view shares it rather than keeping a copy.
        *cache = Some(Cached {
            sign: now,
            state: std::sync::Arc::clone(desired),
        });
    }
    Ok((outcome, read))
}

/// Reads back what `written` wrote and checks that the kernel holds `desired` there. What the
/// plan did not touch was read just before it was made and needed no change; reading it again
/// would only double the time an apply takes. With iptables that is every table and set the
/// plan names; with nftables every table and set of a family it touched, since one
/// transaction may rebuild a family's whole table.
pub fn verify(
    dataplane: &Dataplane<'_>,
    desired: &State,
    written: &Plan,
) -> Result<(), DataplaneError> {
    let after = dataplane.observe_written(written)?;
    let remaining = dataplane.backend.unverified(desired, &after, written);
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
    dataplane.apply(&changes, previous)?;
    verify(dataplane, previous, &changes)?;
    Ok(changes)
}

#[cfg(test)]
mod tests;
pub mod view;
