//! The daemon's side of expiries (`nodeport-guard.io/expires`): the clock the policy files are
//! read at, the timer for the next expiry, and the log line of each expiry enforced.
//!
//! Design goals:
//! 1. Act at the instant: the loop wakes for the earliest expiry still to come and reloads
//!    (with [`super::Event::Expired`]) within a second after it, without a file event or a
//!    resync.
//! 2. Never miss one when the wall clock jumps (an NTP step, a suspend): the deadline is a
//!    wall-clock time, looked at again at least every [`RECHECK`]; a monotonic sleep alone
//!    would oversleep a suspend and ignore a step.
//! 3. Never repeat one: the clock the daemon reads the files at never goes back (a step
//!    backwards holds it where it was), so what has expired stays expired, and each expiry is
//!    logged once.
//!
//! The clock is a [`Clock`] given to the daemon, so the tests move time by hand.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::grants::Expiring;

/// The longest the loop sleeps before looking at the wall clock again while an expiry is to
/// come.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Where the daemon reads the wall-clock time.
pub trait Clock: Send + Sync {
    /// The present.
    fn now(&self) -> Timestamp;
}

/// The system's clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock the tests set by hand.
#[cfg(test)]
#[derive(Debug)]
pub struct ManualClock(std::sync::Mutex<Timestamp>);

#[cfg(test)]
impl ManualClock {
    /// A clock standing at `now`.
    pub fn new(now: Timestamp) -> ManualClock {
        ManualClock(std::sync::Mutex::new(now))
    }

    /// Sets the time (forwards or backwards, as a clock step would).
    pub fn set(&self, now: Timestamp) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = now;
    }
}

#[cfg(test)]
impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What the daemon keeps about expiries between reloads.
pub struct Expiries {
    clock: Arc<dyn Clock>,
    /// The latest time read: the daemon's present never goes back.
    high_water: Timestamp,
    /// The earliest expiry still to come, of the files last read or of the rules last applied.
    next: Option<Timestamp>,
    /// The expiries already logged as enforced: kind, name and instant.
    enforced: BTreeSet<(&'static str, String, Timestamp)>,
}

impl Expiries {
    /// Expiries read with `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Expiries {
        Expiries {
            clock,
            high_water: Timestamp::UNIX_EPOCH,
            next: None,
            enforced: BTreeSet::new(),
        }
    }

    /// The daemon's present: the clock, or the latest time read when the clock went back.
    pub fn now(&mut self) -> Timestamp {
        self.high_water = self.high_water.max(self.clock.now());
        self.high_water
    }

    /// Sets the timer to the earliest of `candidates`.
    pub fn set_next(&mut self, candidates: impl IntoIterator<Item = Option<Timestamp>>) {
        self.next = candidates.into_iter().flatten().min();
    }

    /// The next expiry the timer waits for.
    #[cfg(test)]
    pub fn next(&self) -> Option<Timestamp> {
        self.next
    }

    /// Whether the next expiry has come.
    pub fn due(&mut self) -> bool {
        let now = self.now();
        self.next.is_some_and(|next| next <= now)
    }

    /// How long the loop may sleep before it looks again: until the next expiry, at most
    /// [`RECHECK`]; `None` when no expiry is to come.
    pub fn wait(&mut self) -> Option<Duration> {
        let next = self.next?;
        let now = self.now();
        let left = Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO);
        Some(left.min(RECHECK))
    }

    /// The expiries of `items` that have passed and were not logged yet: each is enforced
    /// once, when the rules without it are applied.
    pub fn newly_enforced<'a>(&mut self, items: &'a [Expiring]) -> Vec<&'a Expiring> {
        items
            .iter()
            .filter(|item| !item.active)
            .filter(|item| {
                self.enforced
                    .insert((item.kind, item.name.clone(), item.expires))
            })
            .collect()
    }
}

/// Logs each expiry the daemon has just enforced.
pub fn log_enforced(items: &[&Expiring], now: Timestamp, revoking: bool) {
    for item in items {
        tracing::info!(
            kind = item.kind,
            name = %item.name,
            file = %item.file.display(),
            expired_at = %item.expires,
            late_ms = now.duration_since(item.expires).as_millis() as i64,
            revoke_established = revoking,
            "expiry enforced: the {} `{}` no longer counts",
            item.kind,
            item.name
        );
    }
}

/// The metrics of the expiries of the files last read.
pub fn count(metrics: &super::metrics::Shared, items: &[Expiring], next: Option<Timestamp>) {
    if let Ok(mut metrics) = metrics.lock() {
        metrics.grants_active = items.iter().filter(|item| item.active).count();
        metrics.grant_next_expiry = next.map(Timestamp::as_second);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("time")
    }

    #[test]
    fn the_present_never_goes_back_and_the_timer_rechecks_every_second() {
        let clock = Arc::new(ManualClock::new(at("2026-12-05T17:00:00Z")));
        let mut expiries = Expiries::new(clock.clone());
        assert_eq!(expiries.wait(), None, "no expiry, no timer");
        expiries.set_next([None, Some(at("2026-12-05T18:00:00Z")), None]);
        assert_eq!(
            expiries.wait(),
            Some(RECHECK),
            "far away: look again in a second"
        );
        clock.set(at("2026-12-05T17:59:59.750Z"));
        assert_eq!(expiries.wait(), Some(Duration::from_millis(250)));
        assert!(!expiries.due());
        // A step backwards holds the present where it was.
        clock.set(at("2026-12-05T17:00:00Z"));
        assert_eq!(expiries.now(), at("2026-12-05T17:59:59.750Z"));
        assert_eq!(expiries.wait(), Some(Duration::from_millis(250)));
        // A step (or a suspend) past the deadline: due at once.
        clock.set(at("2026-12-06T09:00:00Z"));
        assert!(expiries.due());
        assert_eq!(expiries.wait(), Some(Duration::ZERO));
    }
}
