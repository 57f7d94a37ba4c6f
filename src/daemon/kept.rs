//! The state the daemon last applied, kept packed while the daemon rests.
//!
//! Between events nothing reads the rule lines of the applied state: the next plan, a repair
//! and the drift watch's interest need them only when an event comes. At 1,000 policies they
//! are 34,000 lines in as many allocations (about 9 MiB); packed ([`PackedState`]) they take a
//! fifth of that. The daemon packs them once [`REST_AFTER`] has passed without an event
//! ([`Kept::rest`], with the engine's memos and view letting go of them too) and unpacks them
//! when the next event begins ([`Kept::live`]); a state unpacked and not replaced is not
//! packed again. Packing and unpacking take about 25 ms each at 1,000 policies: a burst of
//! reloads and their echoes does neither.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::state::{PackedState, State};

/// How long the daemon waits after an event before it packs what it applied.
pub(super) const REST_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// How long the daemon waits after an event before it forgets the engine's compile and render
/// memos (`Memory::forget_memos`): long enough that a run of edits (a script's, a ConfigMap's
/// updates, an operator's) finds them, short enough that a quiet daemon is small.
pub(super) const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// What a daemon does once events stop coming, and when: it rests ([`REST_AFTER`]), then
/// forgets its memos ([`FORGET_AFTER`]), each counted from the last event handled.
#[derive(Debug, Clone, Copy)]
pub(super) struct Quiet {
    event_at: tokio::time::Instant,
    next: Option<Stage>,
}

/// A step of [`Quiet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Pack the applied state (`Daemon::rest`).
    Rest,
    /// Forget the compile and render memos (`Daemon::forget`).
    Forget,
}

impl Quiet {
    /// The quiet after an event handled at `at`.
    pub(super) fn after_event(at: tokio::time::Instant) -> Quiet {
        Quiet {
            event_at: at,
            next: Some(Stage::Rest),
        }
    }

    /// When the next step is due; `None` once both are done.
    pub(super) fn due(&self) -> Option<tokio::time::Instant> {
        let after = match self.next? {
            Stage::Rest => REST_AFTER,
            Stage::Forget => FORGET_AFTER,
        };
        Some(self.event_at + after)
    }

    /// The step due now, and the next one after it.
    pub(super) fn fire(&mut self) -> Option<Stage> {
        let stage = self.next?;
        self.next = match stage {
            Stage::Rest => Some(Stage::Forget),
            Stage::Forget => None,
        };
        Some(stage)
    }
}

/// Identities of kept states, so that the drift watch knows a state unpacked again from one
/// replaced by a new apply.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The applied state: live, packed, or both (the packed form of the live one).
pub(super) struct Kept {
    id: u64,
    live: Option<Arc<State>>,
    packed: Option<PackedState>,
}

impl Kept {
    /// A state just applied.
    pub(super) fn new(state: Arc<State>) -> Kept {
        Kept {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            live: Some(state),
            packed: None,
        }
    }

    /// Which state this is: the same through packing and unpacking, new with every state
    /// applied.
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    /// Whether `state` is this one, live.
    pub(super) fn is(&self, state: &Arc<State>) -> bool {
        self.live
            .as_ref()
            .is_some_and(|live| Arc::ptr_eq(live, state))
    }

    /// The state, unpacked if it was resting.
    pub(super) fn live(&mut self) -> &Arc<State> {
        let packed = &self.packed;
        self.live.get_or_insert_with(|| {
            let packed = packed
                .as_ref()
                .expect("a kept state is live or packed, never neither");
            Arc::new(packed.unpack())
        })
    }

    /// The state when it is live (while an event is handled).
    pub(super) fn if_live(&self) -> Option<&Arc<State>> {
        self.live.as_ref()
    }

    /// Lets go of the live state, packing it first unless it was unpacked from its packed form,
    /// when nothing else holds it. Returns whether it did.
    pub(super) fn rest(&mut self) -> bool {
        let Some(live) = &self.live else {
            return true;
        };
        if Arc::strong_count(live) > 1 {
            return false;
        }
        if self.packed.is_none() {
            self.packed = Some(PackedState::pack(live));
        }
        self.live = None;
        true
    }

    /// Whether it rests packed.
    #[cfg(test)]
    pub(super) fn is_resting(&self) -> bool {
        self.live.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::{FORGET_AFTER, Quiet, REST_AFTER, Stage};

    #[test]
    fn a_quiet_daemon_rests_then_forgets_counted_from_the_last_event() {
        let event = tokio::time::Instant::now();
        let mut quiet = Quiet::after_event(event);
        assert_eq!(quiet.due(), Some(event + REST_AFTER));
        assert_eq!(quiet.fire(), Some(Stage::Rest));
        assert_eq!(quiet.due(), Some(event + FORGET_AFTER));
        assert_eq!(quiet.fire(), Some(Stage::Forget));
        assert_eq!(quiet.due(), None, "nothing more until the next event");
        assert_eq!(quiet.fire(), None);
        assert!(REST_AFTER < FORGET_AFTER);
    }
}
