//! When to reload after a burst of file events.
//!
//! A reload happens once `quiet` has passed without another event, so an editor's temporary
//! file and rename, or a ConfigMap's symlink swap, cost one reload. A writer that never pauses
//! (a log written into the policy directory, a loop of `touch`) must not postpone the reload
//! for ever: it happens at the latest `max_wait` after the first event of the burst.
//!
//! Pure: the caller passes the time, so the rule is tested without a clock.

use std::time::Duration;

use tokio::time::Instant;

/// How many quiet periods a burst may last before the reload happens anyway.
const MAX_WAIT_IN_QUIET_PERIODS: u32 = 10;

/// How long after a file event, with no other, the reload's work before the kernel is done
/// ahead; a later event throws that work away. Editors and ConfigMap swaps write in bursts of
/// a few milliseconds.
pub const PREPARE_AFTER: Duration = Duration::from_millis(20);

/// When to do a reload's work ahead after an event at `now`, the reload being `due`: after
/// [`PREPARE_AFTER`] of quiet, if the reload is not due by then.
pub fn prepare_at(now: Instant, due: Option<Instant>) -> Option<Instant> {
    let at = now + PREPARE_AFTER;
    due.filter(|due| *due > at).map(|_| at)
}

/// The pending reload of one burst of events.
#[derive(Debug, Clone)]
pub struct Debounce {
    quiet: Duration,
    max_wait: Duration,
    /// The first event of the burst not yet handled, and the time the reload is due.
    pending: Option<(Instant, Instant)>,
}

impl Debounce {
    /// A debounce waiting for `quiet` without events, or `10 × quiet` after the first.
    pub fn new(quiet: Duration) -> Self {
        Debounce {
            quiet,
            max_wait: quiet * MAX_WAIT_IN_QUIET_PERIODS,
            pending: None,
        }
    }

    /// An event arrived at `now`.
    pub fn event(&mut self, now: Instant) {
        let first = self.pending.map_or(now, |(first, _)| first);
        let due = (now + self.quiet).min(first + self.max_wait);
        self.pending = Some((first, due));
    }

    /// When the reload is due, if an event is pending.
    pub fn due(&self) -> Option<Instant> {
        self.pending.map(|(_, due)| due)
    }

    /// The reload was due at `now` but must wait (a policy file is still being written):
    /// due again after `quiet`, past the burst's `max_wait`.
    pub fn hold(&mut self, now: Instant) {
        self.pending = Some((now, now + self.quiet));
    }

    /// The reload is happening: the next event starts a new burst.
    pub fn fired(&mut self) {
        self.pending = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn work_is_done_ahead_only_when_the_reload_is_due_later() {
        let start = Instant::now();
        let mut debounce = Debounce::new(200 * MS);
        debounce.event(start);
        assert_eq!(
            prepare_at(start, debounce.due()),
            Some(start + PREPARE_AFTER)
        );
        assert_eq!(prepare_at(start, None), None);
        let mut short = Debounce::new(PREPARE_AFTER);
        short.event(start);
        assert_eq!(prepare_at(start, short.due()), None);
    }

    #[test]
    fn nothing_is_due_without_an_event() {
        assert_eq!(Debounce::new(200 * MS).due(), None);
    }

    #[test]
    fn one_event_is_due_after_the_quiet_period() {
        let start = Instant::now();
        let mut debounce = Debounce::new(200 * MS);
        debounce.event(start);
        assert_eq!(debounce.due(), Some(start + 200 * MS));
    }

    #[test]
    fn each_event_of_a_burst_postpones_the_reload() {
        let start = Instant::now();
        let mut debounce = Debounce::new(200 * MS);
        debounce.event(start);
        debounce.event(start + 50 * MS);
        debounce.event(start + 120 * MS);
        assert_eq!(debounce.due(), Some(start + 320 * MS));
    }

    #[test]
    fn a_writer_that_never_pauses_cannot_postpone_the_reload_past_the_bound() {
        let start = Instant::now();
        let mut debounce = Debounce::new(200 * MS);
        for step in 0..100 {
            debounce.event(start + step * 50 * MS);
        }
        assert_eq!(debounce.due(), Some(start + 2000 * MS));
    }

    #[test]
    fn after_the_reload_the_next_event_starts_a_new_burst() {
        let start = Instant::now();
        let mut debounce = Debounce::new(200 * MS);
        debounce.event(start);
        debounce.fired();
        assert_eq!(debounce.due(), None);
        debounce.event(start + 5000 * MS);
        debounce.event(start + 5100 * MS);
        assert_eq!(debounce.due(), Some(start + 5300 * MS));
    }
}
