//! Noticing within a second that another program changed what the daemon owns, without paying
//! for the changes other programs make to their own rules.
//!
//! - nftables and iptables-nft: a thread subscribed to nf_tables' change notifications
//!   ([`crate::dataplane::nfnotify`]) sends [`Event::Drift`] when a change touches our table,
//!   our `npg` chains, or deletes a rule from a base chain we hook ([`Interest`], from the
//!   state last applied). kube-proxy's and docker's commits are read, found foreign, and
//!   dropped.
//! - iptables-legacy, whose x_tables send no notifications: a thread reads the counter-free
//!   digest of the tables we have rules in every [`POLL_EVERY`] ([`xtables::digest_of`]: one copy of
//!   each table out of the kernel, no lock taken) and sends [`Event::Drift`] when it moved.
//! - ipsets (both iptables backends), which neither watch sees: a thread reads how many
//!   members each of our sets holds every [`POLL_EVERY`] (one netlink dump of the sets'
//!   headers, [`ipset_sizes`]) and sends [`Event::Drift`] when that differs from what was
//!   applied. A member swapped for another is only seen at the resync.
//!
//! The loop waits [`SETTLE`] after the first notice (a flush is hundreds of notifications),
//! then reconciles the way a resync does, but against its cached view when the kernel's sign
//! says only its own write happened meanwhile, so the echo of its own writes costs next to
//! nothing. Checks are rate-limited ([`Limiter`]): a program that deletes our jump in a loop
//! gets a repair a second after the first few, with a warning and a counter, never a spinning
//! daemon. The resync timer stays the full check (it also covers a set whose members were
//! swapped one for one).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::Event;
use super::metrics::Metrics;
use crate::dataplane::nfnotify::{self, FAMILY_IPV4, FAMILY_IPV6, Interest, Received};
use crate::dataplane::{Backend, Sign, ipset_sizes, xtables};
use crate::model::IpFamily;
use crate::state::State;

/// How long the loop waits after the first notice before it checks: changes come in bursts.
pub const SETTLE: Duration = Duration::from_millis(100);
/// How often iptables-legacy's tables are read: often enough that a change is repaired
/// within a second (a reading is one copy of each table out of the kernel).
pub const POLL_EVERY: Duration = Duration::from_millis(400);
/// Checks allowed in a burst before the rate limit applies.
pub const BURST: u32 = 5;
/// The sustained rate of checks: one per this interval.
pub const REFILL: Duration = Duration::from_secs(1);

/// What noticed the drift (the `trigger` label of `nodeport_guard_drift_repairs_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// An nf_tables change notification.
    Notification,
    /// iptables-legacy's once-a-second digest.
    Poll,
    /// The resync timer (and SIGHUP or an address change repairing with the last good rules).
    Resync,
}

impl Trigger {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Notification => "notification",
            Trigger::Poll => "poll",
            Trigger::Resync => "resync",
        }
    }

    /// Counts one repair.
    pub fn count(self, metrics: &mut Metrics) {
        match self {
            Trigger::Notification => metrics.drift_repairs.notification += 1,
            Trigger::Poll => metrics.drift_repairs.poll += 1,
            Trigger::Resync => metrics.drift_repairs.resync += 1,
        }
    }
}

/// What of the kernel is ours, for the watch threads; replaced after every apply.
type SharedInterest = Arc<Mutex<Interest>>;

/// iptables-legacy: what the poll thread compares its readings with.
type Baseline = Arc<Mutex<Option<Expect>>>;

/// The number of members of each of our ipsets as last applied, which the set poll expects.
/// The sizes the set poll expects (`None` before the first apply), and how many writes of ours
/// the daemon has made: after each, a difference the poll already reported is reported again,
/// since the check it brought may have read the sets before they changed (a set flushed while
/// a repair of something else ran).
type SetSizes = Arc<Mutex<SetExpectation>>;

/// What the set poll expects of our ipsets (see [`SetSizes`]).
#[derive(Clone, Debug, Default)]
struct SetExpectation {
    /// The members each set holds (`None` before the first apply). Shared, like `prints`:
    /// each poll takes a copy of the expectation, which must not copy every set's name.
    sizes: Option<Arc<BTreeMap<String, usize>>>,
    /// The writes of ours so far.
    writes: u64,
    /// The fingerprint of each set of at most [`MAX_FINGERPRINTED`] members
    /// ([`ipset_sizes::fingerprint_of`] what was applied).
    prints: Arc<BTreeMap<String, u64>>,
}

/// What the next poll expects of our tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// This digest: the tables as two checks in a row left them.
    Digest(u128),
    /// Nothing certain: they changed since the check before (by our write, or another
    /// program's meanwhile), so the next poll asks for a check whatever it reads.
    Check,
}

/// The watch thread of the backend, and what it looks for.
pub struct Watch {
    interest: SharedInterest,
    baseline: Baseline,
    /// Reloads and repairs counted at the last [`Watch::follow`]: when they moved, the check
    /// may have written.
    writes: Option<u64>,
    /// The identity of the state `interest` was made from (`Kept::id`: a state is replaced,
    /// not changed, and keeps its identity while the daemon packs and unpacks it).
    from: Option<u64>,
    /// The set poll's expectation (iptables backends).
    set_sizes: SetSizes,
    backend: &'static dyn Backend,
    /// How the watch works, for the log: "notifications", "poll", or "off".
    pub mode: &'static str,
}

impl Watch {
    /// Starts the thread that watches `backend`'s rules and sends [`Event::Drift`] on `events`,
    /// and for ipsets the thread that polls their sizes. Without a watch (no netlink
    /// subscription, say) the resync timer is the only check.
    pub fn start(backend: &'static dyn Backend, events: UnboundedSender<Event>) -> Watch {
        let interest = SharedInterest::default();
        let baseline = Baseline::default();
        let set_sizes = SetSizes::default();
        if backend.name() != "nftables" {
            start_set_poll(set_sizes.clone(), events.clone());
        }
        let started = match backend.sign() {
            Sign::NfGeneration => start_notifications(interest.clone(), events),
            Sign::XtablesDigest => start_poll(interest.clone(), baseline.clone(), events),
        };
        let mode = match (started, backend.sign()) {
            (false, _) => "off",
            (true, Sign::NfGeneration) => "notifications",
            (true, Sign::XtablesDigest) => "poll",
        };
        Watch {
            interest,
            baseline,
            writes: None,
            from: None,
            set_sizes,
            backend,
            mode,
        }
    }

    /// iptables-legacy: the digest of our tables now, taken before an event is handled (see
    /// [`Watch::follow`]); `None` with another watch or when they cannot be read.
    pub fn reading(&self) -> Reading {
        if self.mode != "poll" {
            return Reading(None);
        }
        Reading(poll_digest(&shared_tables(&self.interest)))
    }

    /// Looks for changes to `applied` from now on. Called after every handled event, with the
    /// [`Watch::reading`] taken before it and whether it reconciled the kernel. For
    /// iptables-legacy this sets what the poll expects ([`next_expectation`]): the reading
    /// before the event once the event found the kernel as `applied` says, so that a change
    /// made while the event was handled (after its own reading of the kernel) is seen by the
    /// next poll rather than taken for the state the event left. When `applied` has rules in
    /// other tables than the reading covered (at start, none), those are read after the event.
    pub fn follow(
        &mut self,
        applied: &Arc<State>,
        id: u64,
        metrics: &super::metrics::Shared,
        before: Reading,
        reconciled: bool,
    ) {
        let mut before = before;
        let replaced = self.from != Some(id);
        if replaced {
            let interest = interest(self.backend, applied);
            if let Ok(mut shared) = self.interest.lock() {
                if shared.shared_tables != interest.shared_tables {
                    // The reading before the event is of other tables (none, at start): read
                    // the new ones now.
                    before = Reading(None);
                }
                *shared = interest;
            }
            if before.0.is_none() {
                before = self.reading();
            }
            let sizes = applied
                .sets
                .iter()
                .map(|(name, set)| (name.clone(), set.members.len()))
                .collect();
            let prints = applied
                .sets
                .iter()
                .filter(|(_, set)| set.members.len() <= MAX_FINGERPRINTED)
                .filter_map(|(name, set)| {
                    let print =
                        ipset_sizes::fingerprint_of(set.members.iter().map(String::as_str))?;
                    Some((name.clone(), print))
                })
                .collect();
            if let Ok(mut shared) = self.set_sizes.lock() {
                shared.sizes = Some(Arc::new(sizes));
                shared.prints = Arc::new(prints);
            }
            self.from = Some(id);
        }
        let writes = metrics.lock().map_or(0, |metrics| {
            metrics.reloads_ok
                + metrics.drift_repairs.notification
                + metrics.drift_repairs.poll
                + metrics.drift_repairs.resync
        });
        if self.writes != Some(writes)
            && let Ok(mut shared) = self.set_sizes.lock()
        {
            shared.writes = writes;
        }
        if self.mode == "poll" {
            let wrote = self.writes.is_some_and(|before| before != writes);
            if let Ok(mut baseline) = self.baseline.lock() {
                *baseline = next_expectation(*baseline, before, wrote, reconciled || replaced);
            }
        }
        self.writes = Some(writes);
    }
}

/// The poll's reading of our x_tables before an event is handled (see [`Watch::reading`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading(Option<u128>);

/// What the poll expects after an event, from what it expected before (`old`), its reading
/// before the event, whether the event wrote, and whether it reconciled the kernel (or
/// applied other rules). After a write nothing is certain: the next poll asks for a check,
/// which finds the daemon's cached view when only its own write moved the tables. After a
/// reconcile that wrote nothing, the tables were as applied when the event read them, so at
/// the reading before it (a change made meanwhile is in the kernel's reading, which the event
/// saw, or after it, which the next poll sees). After an event that did not look at the kernel
/// (files unchanged, say), the expectation stays: the event proved nothing.
fn next_expectation(
    old: Option<Expect>,
    before: Reading,
    wrote: bool,
    reconciled: bool,
) -> Option<Expect> {
    match (before.0, wrote, reconciled) {
        (_, true, _) | (None, _, _) => Some(Expect::Check),
        (Some(digest), false, true) => Some(Expect::Digest(digest)),
        (Some(_), false, false) => old.or(Some(Expect::Check)),
    }
}

/// What of nf_tables (or x_tables) `applied` owns: nftables' own tables, or the tables
/// iptables shares with others, with the base chains our jumps are in.
pub fn interest(backend: &'static dyn Backend, applied: &State) -> Interest {
    if backend.name() == "nftables" {
        return Interest {
            owned_tables: vec![crate::dataplane::nftables::render::TABLE.to_owned()],
            ..Interest::default()
        };
    }
    let family = |family: IpFamily| match family {
        IpFamily::V4 => FAMILY_IPV4,
        IpFamily::V6 => FAMILY_IPV6,
    };
    let mut wanted = Interest::default();
    for (key, table) in &applied.tables {
        if table.is_empty() {
            continue;
        }
        let name = key.table.as_str().to_owned();
        wanted
            .shared_tables
            .push((family(key.family), name.clone()));
        for (chain, rules) in &table.hooks {
            if !rules.is_empty() {
                wanted
                    .hooked
                    .push((family(key.family), name.clone(), chain.clone()));
            }
        }
    }
    wanted
}

/// The notification thread: reads every notification, sends one event per datagram that
/// touches what is ours (or after notifications were lost).
fn start_notifications(interest: SharedInterest, events: UnboundedSender<Event>) -> bool {
    let mut subscription = match nfnotify::Subscription::open() {
        Ok(subscription) => subscription,
        Err(error) => {
            tracing::warn!(%error, "cannot subscribe to nf_tables notifications; drift is only seen at resync");
            return false;
        }
    };
    std::thread::Builder::new()
        .name("nft-notify".into())
        .spawn(move || {
            loop {
                let ours = match subscription.receive() {
                    Ok(Received::Changes(changes)) => interest.lock().is_ok_and(|interest| {
                        changes.iter().any(|change| interest.touches(change))
                    }),
                    Ok(Received::Lost) => true,
                    Err(error) => {
                        tracing::warn!(%error, "reading nf_tables notifications failed; drift is only seen at resync");
                        break;
                    }
                };
                if ours && events.send(Event::Drift(Trigger::Notification)).is_err() {
                    break;
                }
            }
        })
        .is_ok()
}

/// The x_tables tables `interest` holds rules of ours in, as the poll reads them.
fn shared_tables(interest: &SharedInterest) -> Vec<(u8, String)> {
    interest
        .lock()
        .map(|interest| interest.shared_tables.clone())
        .unwrap_or_default()
}

/// The digest of `tables` (x_tables), `None` when they cannot be read.
fn poll_digest(tables: &[(u8, String)]) -> Option<u128> {
    let named: Vec<(IpFamily, &str)> = tables
        .iter()
        .map(|(family, name)| {
            let family = if *family == FAMILY_IPV6 {
                IpFamily::V6
            } else {
                IpFamily::V4
            };
            (family, name.as_str())
        })
        .collect();
    xtables::digest_of(&named).ok()
}

/// The poll thread of iptables-legacy: the digest of our tables every [`POLL_EVERY`],
/// compared with the baseline the daemon left.
fn start_poll(
    interest: SharedInterest,
    baseline: Baseline,
    events: UnboundedSender<Event>,
) -> bool {
    std::thread::Builder::new()
        .name("xtables-poll".into())
        .spawn(move || {
            loop {
                std::thread::sleep(POLL_EVERY);
                let tables = shared_tables(&interest);
                let Some(expected) = baseline.lock().ok().and_then(|baseline| *baseline) else {
                    continue;
                };
                if tables.is_empty() {
                    continue;
                }
                let moved = match expected {
                    Expect::Check => true,
                    Expect::Digest(expected) => {
                        poll_digest(&tables).is_some_and(|digest| digest != expected)
                    }
                };
                if moved && events.send(Event::Drift(Trigger::Poll)).is_err() {
                    break;
                }
            }
        })
        .is_ok()
}

/// Sets of at most this many members are fingerprinted too (see [`start_set_poll`]).
const MAX_FINGERPRINTED: usize = 4096;

/// How many sets each poll fingerprints, in turn.
const FINGERPRINTS_PER_POLL: usize = 8;

/// The set poll: the size of each of our ipsets every [`POLL_EVERY`], against what was last
/// applied. A difference is reported once (a set that stays different after the check, whatever
/// the reason, costs one check, not one every poll). A member swapped for another keeps the
/// size: while the sizes are as applied, each poll also reads the members of a few of our sets
/// of at most [`MAX_FINGERPRINTED`] members, in turn, and reports a set whose fingerprint is
/// not that of the members applied. (With a few sets, that is every set at every poll; a set
/// bigger than that is checked by size only, and whole at resync.)
fn start_set_poll(expected: SetSizes, events: UnboundedSender<Event>) {
    let spawned = std::thread::Builder::new()
        .name("ipset-poll".into())
        .spawn(move || {
            let mut reported = None;
            let mut reported_after = 0;
            let mut prints = Fingerprints::default();
            loop {
                std::thread::sleep(POLL_EVERY);
                let Some(SetExpectation {
                    sizes: Some(expected),
                    writes,
                    prints: expected_prints,
                }) = expected.lock().ok().map(|shared| shared.clone())
                else {
                    continue;
                };
                if writes != reported_after {
                    reported = None;
                }
                let Ok(mut now) = ipset_sizes::set_sizes() else {
                    continue;
                };
                now.retain(|name, _| crate::ruleset::is_our_set(name));
                let moved = if now == *expected {
                    reported = None;
                    prints.moved(&expected_prints, writes)
                } else if reported.as_ref() == Some(&now) {
                    false
                } else {
                    reported = Some(now);
                    reported_after = writes;
                    true
                };
                if moved && events.send(Event::Drift(Trigger::Poll)).is_err() {
                    break;
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the ipset poll; a change to our sets is only seen at resync");
    }
}

/// The set poll's turn through our smaller sets' fingerprints, and what it reported.
#[derive(Default)]
struct Fingerprints {
    /// The fingerprint last reported per set (said once, until our next write).
    reported: BTreeMap<String, u64>,
    /// The count of our writes `reported` is since.
    after: u64,
    /// Where the next poll starts among the sets, in turn.
    next: usize,
}

impl Fingerprints {
    /// Reads the next few sets' fingerprints; says whether one differs from `expected` (what
    /// was applied) in a way not reported since write number `writes`.
    fn moved(&mut self, expected: &BTreeMap<String, u64>, writes: u64) -> bool {
        if self.after != writes {
            self.reported.clear();
            self.after = writes;
        }
        let sets: Vec<(&String, &u64)> = expected.iter().collect();
        if sets.is_empty() {
            return false;
        }
        let turn: Vec<(&String, &u64)> = (0..FINGERPRINTS_PER_POLL.min(sets.len()))
            .map(|at| sets[(self.next + at) % sets.len()])
            .collect();
        let names: Vec<&str> = turn.iter().map(|(name, _)| name.as_str()).collect();
        let mut moved = false;
        for ((name, expected), print) in turn.into_iter().zip(ipset_sizes::set_fingerprints(&names))
        {
            let Ok(print) = print else {
                continue;
            };
            if print != *expected && self.reported.get(name) != Some(&print) {
                self.reported.insert(name.clone(), print);
                moved = true;
            }
        }
        self.next = (self.next + FINGERPRINTS_PER_POLL) % sets.len();
        moved
    }
}

/// A check held back by the rate limit: counted, and said once per episode.
pub fn limited(metrics: &super::metrics::Shared, first: bool) {
    if let Ok(mut metrics) = metrics.lock() {
        metrics.drift_rate_limited += 1;
    }
    if first {
        tracing::warn!(
            burst = BURST,
            every = %humantime::format_duration(REFILL),
            "another program keeps changing nodeport-guard's rules; drift repairs are rate-limited (after a burst, one a second)"
        );
    }
}

/// When the loop checks after a notice: [`SETTLE`] after the first, and no more than
/// [`BURST`] checks at once, then one per [`REFILL`] (a token bucket).
#[derive(Debug)]
pub struct Limiter {
    /// The pending check: when, and what noticed it first.
    pending: Option<(Instant, Trigger)>,
    /// Checks available now, in units of one check.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    updated: Instant,
    /// Whether the limit is holding checks back (said once per episode).
    limiting: bool,
}

/// What the loop does when [`Limiter::due`] comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fire {
    /// Check now.
    Check(Trigger),
    /// Held back by the rate limit until the next [`Limiter::due`].
    Limited {
        /// The first time in an episode (to say so once).
        first: bool,
    },
}

impl Limiter {
    /// A limiter with a full bucket.
    pub fn new(now: Instant) -> Limiter {
        Limiter {
            pending: None,
            tokens: f64::from(BURST),
            updated: now,
            limiting: false,
        }
    }

    /// A change was noticed: check after [`SETTLE`] (a poll, which reads the tables after the
    /// change, at once) unless a check is already pending. A pending check brought by a change
    /// notification becomes the new trigger's: a notification with no commit since our own
    /// write is taken for its echo and reads nothing, which would lose a change the set poll
    /// saw meanwhile (ipsets send no notification).
    pub fn noticed(&mut self, now: Instant, trigger: Trigger) {
        let settle = if trigger == Trigger::Poll {
            Duration::ZERO
        } else {
            SETTLE
        };
        match &mut self.pending {
            None => self.pending = Some((now + settle, trigger)),
            Some((at, pending))
                if *pending == Trigger::Notification && trigger != Trigger::Notification =>
            {
                *pending = trigger;
                *at = (*at).min(now + settle);
            }
            Some(_) => {}
        }
    }

    /// When the pending check is due.
    pub fn due(&self) -> Option<Instant> {
        self.pending.map(|(at, _)| at)
    }

    /// The pending check came due at `now`: check, or wait for the bucket.
    pub fn fire(&mut self, now: Instant) -> Option<Fire> {
        let (_, trigger) = self.pending?;
        let refill = REFILL.as_secs_f64();
        self.tokens =
            (self.tokens + (now - self.updated).as_secs_f64() / refill).min(f64::from(BURST));
        self.updated = now;
        if self.tokens >= 1.0 {
            // The episode is over once the bucket has filled up again.
            if self.tokens >= f64::from(BURST) {
                self.limiting = false;
            }
            self.tokens -= 1.0;
            self.pending = None;
            return Some(Fire::Check(trigger));
        }
        let wait = Duration::from_secs_f64((1.0 - self.tokens) * refill);
        self.pending = Some((now + wait, trigger));
        let first = !self.limiting;
        self.limiting = true;
        Some(Fire::Limited { first })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_expects_the_reading_taken_before_a_reconcile_that_wrote_nothing() {
        let (old, before) = (Some(Expect::Digest(1)), Reading(Some(2)));
        // A check found the tables as applied when it read them: whatever changed after its
        // reading (the tables now read 3, say) differs from 2 and is seen by the next poll.
        assert_eq!(
            next_expectation(old, before, false, true),
            Some(Expect::Digest(2))
        );
        // A write: one more check, which finds the cached view when only the write moved the
        // tables.
        assert_eq!(
            next_expectation(old, before, true, true),
            Some(Expect::Check)
        );
        // An event that did not look at the kernel proves nothing: a change the poll has not
        // read yet must still differ from what it expects.
        assert_eq!(next_expectation(old, before, false, false), old);
        assert_eq!(
            next_expectation(Some(Expect::Check), before, false, false),
            Some(Expect::Check)
        );
        // Tables that could not be read: a check.
        assert_eq!(
            next_expectation(old, Reading(None), false, true),
            Some(Expect::Check)
        );
    }

    #[test]
    fn a_burst_of_notices_is_one_check_after_the_settle() {
        let start = Instant::now();
        let mut limiter = Limiter::new(start);
        assert_eq!(limiter.due(), None);
        limiter.noticed(start, Trigger::Notification);
        limiter.noticed(start + Duration::from_millis(5), Trigger::Notification);
        assert_eq!(limiter.due(), Some(start + SETTLE));
        assert_eq!(
            limiter.fire(start + SETTLE),
            Some(Fire::Check(Trigger::Notification))
        );
        assert_eq!(limiter.due(), None);
        assert_eq!(limiter.fire(start + SETTLE), None);
        // A poll's notice while a notification's check is pending makes it the poll's, at once:
        // the notification's may be taken for the echo of our own write and read nothing.
        let later = start + Duration::from_secs(10);
        limiter.noticed(later, Trigger::Notification);
        limiter.noticed(later + Duration::from_millis(1), Trigger::Poll);
        assert_eq!(limiter.due(), Some(later + Duration::from_millis(1)));
        assert_eq!(
            limiter.fire(later + Duration::from_millis(1)),
            Some(Fire::Check(Trigger::Poll))
        );
        // And a notification after a poll leaves the poll's check as it is.
        limiter.noticed(later + SETTLE, Trigger::Poll);
        limiter.noticed(later + SETTLE, Trigger::Notification);
        assert_eq!(
            limiter.fire(later + SETTLE),
            Some(Fire::Check(Trigger::Poll))
        );
    }

    #[test]
    fn a_program_fighting_us_gets_a_check_a_second_after_the_burst() {
        let start = Instant::now();
        let mut limiter = Limiter::new(start);
        let mut now = start;
        let mut checks = Vec::new();
        let mut limited = Vec::new();
        // Our jump deleted every 10 ms for 10 s.
        while now < start + Duration::from_secs(10) {
            limiter.noticed(now, Trigger::Notification);
            if let Some(due) = limiter.due()
                && due <= now
            {
                match limiter.fire(now) {
                    Some(Fire::Check(_)) => checks.push(now - start),
                    Some(Fire::Limited { first }) => limited.push(first),
                    None => {}
                }
            }
            now += Duration::from_millis(10);
        }
        // The burst, then one a second: never more than BURST + 10.
        assert!(checks.len() <= BURST as usize + 10, "{checks:?}");
        assert!(checks.len() >= 10, "{checks:?}");
        assert_eq!(limited.iter().filter(|first| **first).count(), 1);
        for pair in checks[BURST as usize..].windows(2) {
            assert!(
                pair[1] - pair[0] >= Duration::from_millis(990),
                "{checks:?}"
            );
        }
        // Once the fight stops, the bucket fills again.
        let later = now + Duration::from_secs(10);
        assert_eq!(
            limiter.fire(later),
            Some(Fire::Check(Trigger::Notification))
        );
        for round in 0..BURST - 1 {
            let at = later + SETTLE * (round + 1);
            limiter.noticed(at, Trigger::Notification);
            assert_eq!(
                limiter.fire(at + SETTLE),
                Some(Fire::Check(Trigger::Notification)),
                "{round}"
            );
        }
    }
}
