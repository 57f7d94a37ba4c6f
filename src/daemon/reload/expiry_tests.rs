//! The daemon and expiries on the in-memory kernel, with a clock set by hand: an expiry
//! enforced at its instant, several in turn, one already past at start, clock steps both
//! ways, and an expiry while the files are invalid.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

use super::Daemon;
use crate::daemon::expiry::{Expiries, ManualClock};
use crate::daemon::{Event, metrics};
use crate::dataplane::fake::FakeKernel;
use crate::dataplane::{Backend, Host};
use crate::fixtures::{self, WHITELIST, each_backend};
use crate::grants::{Grant, GrantProtocol};
use crate::system::runtime::StateDir;

struct Harness {
    _dir: tempfile::TempDir,
    policies: PathBuf,
    kernel: Arc<FakeKernel>,
    clock: Arc<ManualClock>,
    daemon: Daemon,
}

fn at(text: &str) -> Timestamp {
    text.parse().expect("time")
}

impl Harness {
    fn new(backend: &'static dyn Backend, now: &str) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).expect("policies");
        let settings = fixtures::settings(&policies, &dir.path().join("state"), backend);
        let kernel = Arc::new(FakeKernel::new());
        let runner: Arc<dyn Host> = kernel.clone();
        let state_dir = StateDir::new(&settings.state_dir);
        let metrics: metrics::Shared = Arc::new(Mutex::new(metrics::Metrics::default()));
        let mut daemon = Daemon::new(settings, backend, runner, state_dir, metrics);
        let clock = Arc::new(ManualClock::new(at(now)));
        daemon.expiry = Expiries::new(clock.clone());
        Harness {
            _dir: dir,
            policies,
            kernel,
            clock,
            daemon,
        }
    }

    fn grant(&self, name: &str, source: &str, until: &str) {
        let grant = Grant {
            name: name.to_owned(),
            sources: vec![source.parse().expect("net")],
            ports: vec![30008],
            protocol: GrantProtocol::Tcp,
            expires: at(until),
            granted_by: "alice".to_owned(),
            reason: None,
            order: 0.0,
        };
        std::fs::write(
            self.policies.join(crate::grants::file_name(&grant.name)),
            grant.render(),
        )
        .expect("write");
    }

    fn whitelist(&self) {
        std::fs::write(self.policies.join("whitelist.yaml"), WHITELIST).expect("write");
    }

    /// Whether the kernel holds a rule naming `needle`.
    fn holds(&self, needle: &str) -> bool {
        self.kernel.snapshot().contains(needle)
    }

    /// The loop's timer: moves the clock and handles `Event::Expired` when it is due.
    fn tick(&mut self, now: &str) -> bool {
        self.clock.set(at(now));
        let due = self.daemon.expiry.due();
        if due {
            self.daemon.handle(Event::Expired);
        }
        due
    }

    fn metric<T>(&self, read: impl Fn(&metrics::Metrics) -> T) -> T {
        read(&self.daemon.metrics.lock().expect("metrics"))
    }
}

#[test]
fn an_expiry_is_enforced_at_its_instant_and_not_before() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, "2026-12-05T17:00:00Z");
        harness.whitelist();
        harness.grant("vendor", "203.0.113.207/32", "2026-12-05T18:00:00Z");
        harness.daemon.handle(Event::PoliciesChanged);
        assert!(
            harness.holds("203.0.113.207"),
            "{backend}: the grant is applied"
        );
        assert_eq!(
            harness.daemon.expiry.next(),
            Some(at("2026-12-05T18:00:00Z"))
        );
        assert_eq!(harness.metric(|m| m.grants_active), 1);
        assert_eq!(
            harness.metric(|m| m.grant_next_expiry),
            Some(at("2026-12-05T18:00:00Z").as_second())
        );
        assert!(!harness.tick("2026-12-05T17:59:59.999Z"));
        assert!(harness.holds("203.0.113.207"));
        assert!(harness.tick("2026-12-05T18:00:00Z"), "due at the instant");
        assert!(
            !harness.holds("203.0.113.207"),
            "{backend}: the grant is gone"
        );
        assert!(harness.holds("198.51.100.10"), "the whitelist stays");
        assert_eq!(harness.daemon.expiry.next(), None);
        assert_eq!(harness.metric(|m| m.grants_active), 0);
        assert_eq!(harness.metric(|m| m.grant_next_expiry), None);
        let writes = harness.kernel.writes();
        assert!(!harness.tick("2026-12-05T18:00:05Z"), "never repeated");
        assert_eq!(harness.kernel.writes(), writes);
    });
}

#[test]
fn several_expiries_are_enforced_in_turn() {
    let backend = crate::dataplane::BACKENDS[0];
    let mut harness = Harness::new(backend, "2026-12-05T17:00:00Z");
    harness.whitelist();
    harness.grant("first", "203.0.113.211/32", "2026-12-05T18:00:00Z");
    harness.grant("second", "203.0.113.212/32", "2026-12-05T19:00:00+01:00");
    harness.grant("third", "203.0.113.213/32", "2026-12-05T20:00:00Z");
    harness.daemon.handle(Event::PoliciesChanged);
    assert!(harness.holds("203.0.113.211") && harness.holds("203.0.113.212"));
    assert!(harness.tick("2026-12-05T18:00:00.500Z"));
    assert!(!harness.holds("203.0.113.211") && !harness.holds("203.0.113.212"));
    assert!(harness.holds("203.0.113.213"));
    assert_eq!(
        harness.daemon.expiry.next(),
        Some(at("2026-12-05T20:00:00Z"))
    );
    assert_eq!(harness.metric(|m| m.grants_active), 1);
    assert!(harness.tick("2026-12-05T20:00:00Z"));
    assert!(!harness.holds("203.0.113.213"));
    assert!(harness.holds("198.51.100.10"));
}

#[test]
fn a_grant_already_past_at_start_is_never_applied_and_blocks_nothing() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, "2026-12-06T00:00:00Z");
        harness.whitelist();
        harness.grant("stale", "203.0.113.207/32", "2026-12-05T18:00:00Z");
        harness.daemon.handle(Event::PoliciesChanged);
        assert!(harness.daemon.last_errors.is_empty());
        assert!(
            harness.holds("198.51.100.10"),
            "{backend}: the reload went through"
        );
        assert!(!harness.holds("203.0.113.207"));
        assert_eq!(harness.daemon.expiry.next(), None);
    });
}

#[test]
fn clock_steps_neither_miss_nor_repeat_an_expiry() {
    let backend = crate::dataplane::BACKENDS[0];
    let mut harness = Harness::new(backend, "2026-12-05T17:00:00Z");
    harness.whitelist();
    harness.grant("first", "203.0.113.211/32", "2026-12-05T18:00:00Z");
    harness.grant("second", "203.0.113.212/32", "2026-12-05T20:00:00Z");
    harness.daemon.handle(Event::PoliciesChanged);
    // A suspend (or an NTP step) carries the clock past both expiries: one reload, both gone.
    assert!(harness.tick("2026-12-06T08:00:00Z"));
    assert!(!harness.holds("203.0.113.211") && !harness.holds("203.0.113.212"));
    // A step backwards does not bring them back, whatever wakes the daemon.
    harness.clock.set(at("2026-12-05T17:30:00Z"));
    harness.daemon.handle(Event::Resync);
    harness.daemon.handle(Event::PoliciesChanged);
    assert!(!harness.holds("203.0.113.211") && !harness.holds("203.0.113.212"));
    assert_eq!(harness.daemon.expiry.next(), None);
}

#[test]
fn an_expiry_empties_the_directory_whatever_allow_empty_says() {
    let backend = crate::dataplane::BACKENDS[0];
    let mut harness = Harness::new(backend, "2026-12-05T17:00:00Z");
    assert!(!harness.daemon.settings.config.allow_empty);
    harness.grant("only", "203.0.113.207/32", "2026-12-05T18:00:00Z");
    harness.daemon.handle(Event::PoliciesChanged);
    assert!(harness.holds("203.0.113.207"));
    assert!(harness.tick("2026-12-05T18:00:00Z"));
    assert!(
        !harness.holds("203.0.113.207"),
        "the expired grant is not held in place"
    );
    assert!(
        harness.daemon.last_errors.is_empty(),
        "{:?}",
        harness.daemon.last_errors
    );
}

#[test]
fn an_expiry_is_enforced_while_the_files_are_invalid() {
    let backend = crate::dataplane::BACKENDS[0];
    let mut harness = Harness::new(backend, "2026-12-05T17:00:00Z");
    harness.whitelist();
    harness.grant("vendor", "203.0.113.207/32", "2026-12-05T18:00:00Z");
    harness.daemon.handle(Event::PoliciesChanged);
    std::fs::write(harness.policies.join("broken.yaml"), "kind: Nonsense\n").expect("write");
    harness.daemon.handle(Event::PoliciesChanged);
    assert!(!harness.daemon.last_errors.is_empty());
    assert_eq!(
        harness.daemon.expiry.next(),
        Some(at("2026-12-05T18:00:00Z")),
        "the timer follows the rules in place"
    );
    assert!(harness.tick("2026-12-05T18:00:00Z"));
    assert!(
        !harness.holds("203.0.113.207"),
        "the last good rules lose the grant"
    );
    assert!(harness.holds("198.51.100.10"), "and keep the rest");
}
