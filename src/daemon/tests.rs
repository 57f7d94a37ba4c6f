//! The daemon loop's guards against the in-memory kernel: what it applies, what it refuses and
//! what it repairs, one event at a time (no event loop, no root).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::{Daemon, Event, metrics};
use crate::dataplane::fake::FakeKernel;
use crate::dataplane::{Backend, Host};
use crate::fixtures::{self, WHITELIST, each_backend};
use crate::system::runtime::StateDir;

struct Harness {
    _dir: tempfile::TempDir,
    policies: PathBuf,
    kernel: Arc<FakeKernel>,
    daemon: Daemon,
}

impl Harness {
    /// Another program deletes the whitelist's allow rule (drift).
    fn remove_our_allow_rule(&self) {
        let removed = self.kernel.delete_rules_containing("198.51.100.10");
        assert!(removed > 0, "no allow rule of ours to remove");
    }

    fn new(backend: &'static dyn Backend, allow_empty: bool) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).expect("policies");
        let mut settings = fixtures::settings(&policies, &dir.path().join("state"), backend);
        settings.config.allow_empty = allow_empty;
        let kernel = Arc::new(FakeKernel::new());
        let runner: Arc<dyn Host> = kernel.clone();
        let state_dir = StateDir::new(&settings.state_dir);
        let metrics: metrics::Shared = Arc::new(Mutex::new(metrics::Metrics::default()));
        let daemon = Daemon::new(settings, backend, runner, state_dir, metrics);
        Harness {
            _dir: dir,
            policies,
            kernel,
            daemon,
        }
    }

    /// A new daemon on the same kernel, state directory and policies.
    fn restart(&mut self) {
        let settings = self.daemon.settings.clone();
        let state_dir = StateDir::new(&settings.state_dir);
        let runner: Arc<dyn Host> = self.kernel.clone();
        let backend = self.daemon.backend;
        let metrics: metrics::Shared = Arc::new(Mutex::new(metrics::Metrics::default()));
        self.daemon = Daemon::new(settings, backend, runner, state_dir, metrics);
    }

    /// Handles `event` as the main loop does when the next event comes after a long quiet: the
    /// daemon rests (packs what it applied) and then forgets its compile and render memos.
    fn handle(&mut self, event: Event) -> bool {
        let looked = self.handle_and_rest(event);
        self.daemon.forget();
        looked
    }

    /// Handles `event` as the main loop does when the next event comes within
    /// [`super::kept::FORGET_AFTER`]: the daemon rests, and keeps its memos.
    fn handle_and_rest(&mut self, event: Event) -> bool {
        let looked = self.daemon.handle(event);
        self.daemon.rest();
        looked
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.policies.join(name), text).expect("write policy");
    }

    fn remove(&self, name: &str) {
        std::fs::remove_file(self.policies.join(name)).expect("remove policy");
    }

    fn ours(&self) -> crate::state::State {
        self.daemon
            .dataplane(crate::model::IpFamily::BOTH.to_vec())
            .observe()
            .expect("observe")
    }

    fn metric(&self, read: impl Fn(&metrics::Metrics) -> u64) -> u64 {
        read(&self.daemon.metrics.lock().expect("metrics"))
    }
}

fn applied(harness: &mut Harness) -> crate::state::State {
    harness.write("whitelist.yaml", WHITELIST);
    harness.handle(Event::PoliciesChanged);
    let ours = harness.ours();
    assert!(!ours.is_empty(), "the whitelist was applied");
    assert!(harness.daemon.last_errors.is_empty());
    assert!(
        harness.daemon.summary.starts_with("1 policy applied with "),
        "{}",
        harness.daemon.summary
    );
    ours
}

#[test]
fn valid_policies_are_applied_and_a_second_event_changes_nothing() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        let writes = harness.kernel.writes();
        harness.handle(Event::Resync);
        assert_eq!(
            harness.kernel.writes(),
            writes,
            "{backend}: nothing to write"
        );
        assert_eq!(harness.ours(), ours);
        assert_eq!(harness.metric(|m| m.drift_repairs.resync), 0);
    });
}

#[test]
fn invalid_policy_files_keep_the_last_good_rules() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        harness.write(
            "whitelist.yaml",
            &WHITELIST.replace("198.51.100.10/32", "198.51.100.300/32"),
        );
        harness.handle(Event::PoliciesChanged);
        assert_eq!(
            harness.ours(),
            ours,
            "{backend}: the kernel keeps the last good rules"
        );
        assert!(
            harness.daemon.summary.contains("invalid"),
            "{}",
            harness.daemon.summary
        );
        assert_eq!(
            harness.daemon.last_errors.len(),
            1,
            "{:?}",
            harness.daemon.last_errors
        );
        assert!(harness.daemon.last_errors[0].contains("whitelist.yaml:"));
        assert_eq!(harness.metric(|m| u64::from(m.policy_files_invalid)), 1);
        assert!(
            harness.daemon.summary.contains("(1 error)"),
            "{}",
            harness.daemon.summary
        );
    });
}

/// A resync (or any reload no file event asked for) may read a file the moment after a
/// write, before the watcher has noted the write: a file modified that recently is taken for
/// one still being written, and the last good rules stay. Once the file is quiet, the next
/// resync applies it.
#[test]
fn a_resync_right_after_a_write_keeps_the_last_rules_until_the_file_is_quiet() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        let opened = WHITELIST.replace("198.51.100.10/32", "198.51.100.20/32");
        harness.write("whitelist.yaml", &opened);
        for event in [Event::Resync, Event::Reload] {
            harness.handle(event);
            assert_eq!(
                harness.ours(),
                ours,
                "{backend}: {event:?} right after the write keeps the last rules"
            );
        }
        let file = std::fs::File::options()
            .append(true)
            .open(harness.policies.join("whitelist.yaml"))
            .expect("open");
        let quiet = std::time::SystemTime::now() - 2 * super::watch::QUIET;
        file.set_modified(quiet).expect("set the time");
        harness.handle(Event::Resync);
        let now = harness.ours();
        assert_ne!(now, ours, "{backend}: the quiet file is applied");
        assert!(
            format!("{now:?}").contains("198.51.100.20"),
            "{backend}: {now:?}"
        );
    });
}

#[test]
fn drift_is_repaired_on_resync_even_while_the_files_are_invalid() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        harness.write("whitelist.yaml", "kind: [");
        harness.handle(Event::PoliciesChanged);
        harness.remove_our_allow_rule();
        assert_ne!(harness.ours(), ours);
        harness.handle(Event::Resync);
        assert_eq!(
            harness.ours(),
            ours,
            "{backend}: repaired with the last good rules"
        );
        assert_eq!(harness.metric(|m| m.drift_repairs.resync), 1);
    });
}

#[test]
fn a_daemon_started_while_the_files_are_invalid_repairs_with_the_last_apply() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        harness.write("whitelist.yaml", "kind: [");
        // A new daemon (a restart): it has applied nothing, the state directory recorded the
        // last apply's files.
        harness.restart();
        harness.handle(Event::Resync);
        assert_eq!(harness.ours(), ours, "{backend}: nothing changed at start");
        harness.remove_our_allow_rule();
        harness.handle(Event::Resync);
        assert_eq!(
            harness.ours(),
            ours,
            "{backend}: repaired with the last apply's policies"
        );
    });
}

/// What `handle` tells the drift watch: whether the event looked at the kernel (and left it as
/// the rules it keeps say). A drift check while the files are invalid repairs with the last
/// good rules, so it looked: the poll must not go on asking for checks after it (iptables-
/// legacy's poll asks again while what it expects stays behind a neighbour's change). A file
/// event that changes nothing does not look.
#[test]
fn handle_says_whether_the_event_looked_at_the_kernel() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        applied(&mut harness);
        assert!(
            !harness.handle(Event::PoliciesChanged),
            "{backend}: files unchanged"
        );
        assert!(
            harness.handle(Event::Drift(super::drift::Trigger::Poll)),
            "{backend}: a drift check"
        );
        harness.write("whitelist.yaml", "kind: [");
        assert!(
            !harness.handle(Event::PoliciesChanged),
            "{backend}: invalid files, no repair on a file event"
        );
        assert!(
            harness.handle(Event::Drift(super::drift::Trigger::Poll)),
            "{backend}: a drift check repairs with the last good rules"
        );
    });
}

#[test]
fn drift_is_repaired_on_resync() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        harness.remove_our_allow_rule();
        harness.handle(Event::Resync);
        assert_eq!(harness.ours(), ours, "{backend}");
        assert_eq!(harness.metric(|m| m.drift_repairs.resync), 1);
    });
}

#[test]
fn drift_noticed_by_a_watch_is_repaired_and_counted_under_its_trigger() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        // The echo of the daemon's own write: nothing to repair, nothing counted.
        harness.handle(Event::Drift(super::drift::Trigger::Notification));
        assert_eq!(harness.metric(|m| m.drift_repairs.notification), 0);
        let reloads = harness.metric(|m| m.reloads_ok);
        for (trigger, count) in [
            (super::drift::Trigger::Notification, 1),
            (super::drift::Trigger::Poll, 1),
            (super::drift::Trigger::Notification, 2),
        ] {
            harness.remove_our_allow_rule();
            harness.handle(Event::Drift(trigger));
            assert_eq!(harness.ours(), ours, "{backend}: {trigger:?}");
            let counted = harness.metric(|m| match trigger {
                super::drift::Trigger::Notification => m.drift_repairs.notification,
                super::drift::Trigger::Poll => m.drift_repairs.poll,
                super::drift::Trigger::Resync => m.drift_repairs.resync,
            });
            assert_eq!(counted, count, "{backend}: {trigger:?}");
        }
        assert_eq!(harness.metric(|m| m.drift_repairs.resync), 0);
        assert_eq!(harness.metric(|m| m.reloads_ok), reloads + 3);
    });
}

#[test]
fn a_suddenly_empty_directory_keeps_the_rules() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        harness.remove("whitelist.yaml");
        harness.handle(Event::PoliciesChanged);
        assert_eq!(harness.ours(), ours, "{backend}: nothing removed");
        assert!(harness.daemon.refusing_empty);
        assert_eq!(harness.metric(|m| m.reloads_refused), 1);
        // Said once, not at every resync.
        harness.handle(Event::Resync);
        assert_eq!(harness.metric(|m| m.reloads_refused), 1);
        assert_eq!(harness.ours(), ours);
    });
}

#[test]
fn a_directory_left_with_staged_policies_only_keeps_the_rules() {
    // A staged policy never changes a verdict: dropping to staged ones only is dropping every
    // protection.
    const STAGED: &str = "apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata: {name: try-deny}\nspec:\n  stagedAction: Set\n  preDNAT: true\n  applyOnForward: true\n  ingress: [{action: Deny, protocol: TCP, destination: {ports: [30008]}}]\n";
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        harness.write("staged.yaml", STAGED);
        let ours = applied(&mut harness);
        harness.remove("whitelist.yaml");
        harness.handle(Event::PoliciesChanged);
        assert_eq!(harness.ours(), ours, "{backend}: nothing removed");
        assert!(harness.daemon.refusing_empty, "{backend}");
    });
}

#[test]
fn a_missing_directory_keeps_the_rules() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        std::fs::remove_dir_all(&harness.policies).expect("remove the directory");
        harness.handle(Event::PoliciesChanged);
        assert_eq!(harness.ours(), ours, "{backend}: nothing removed");
        assert!(
            harness
                .daemon
                .summary
                .contains("refusing an empty policy set")
        );
    });
}

#[test]
fn allow_empty_lets_an_emptied_directory_remove_the_rules() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, true);
        applied(&mut harness);
        harness.remove("whitelist.yaml");
        harness.handle(Event::PoliciesChanged);
        assert!(
            harness.ours().is_empty(),
            "{backend}: allowEmpty removes everything"
        );
        assert!(!harness.daemon.refusing_empty);
    });
}

#[test]
fn revoking_the_last_grant_removes_it_without_allow_empty() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let grant = crate::grants::Grant {
            name: "vendor".to_owned(),
            sources: vec!["198.51.100.7/32".parse().expect("net")],
            ports: vec![30008],
            protocol: crate::grants::GrantProtocol::Tcp,
            expires: "2099-01-01T00:00:00Z".parse().expect("time"),
            granted_by: "alice".to_owned(),
            reason: None,
            order: 0.0,
        };
        harness.write("grant-vendor.yaml", &grant.render());
        harness.handle(Event::PoliciesChanged);
        assert!(
            !harness.ours().is_empty(),
            "{backend}: the grant was applied"
        );
        harness.remove("grant-vendor.yaml");
        harness.handle(Event::PoliciesChanged);
        assert!(
            harness.ours().is_empty(),
            "{backend}: a revoked grant is no protection to keep"
        );
        assert!(!harness.daemon.refusing_empty);
    });
}

/// A second policy in the filter table: with it, a change is more than one write.
const SSH_FROM_OFFICE: &str = "\
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: ssh-from-office
spec:
  selector: has(kubernetes.io/hostname)
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: [192.0.2.0/24]
      destination:
        ports: [22]
";

#[test]
fn a_failed_apply_keeps_the_previous_rules_and_says_so() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        let changed = WHITELIST.replace("198.51.100.10/32", "198.51.100.20/32") + SSH_FROM_OFFICE;
        harness.write("whitelist.yaml", &changed);
        // nftables writes everything in one transaction; iptables one table at a time, so its
        // second write fails after the first went through, and the first must be undone.
        let one_transaction = backend.name() == "nftables";
        harness
            .kernel
            .fail_write(if one_transaction { 1 } else { 2 });
        let writes = harness.kernel.writes();
        harness.handle(Event::PoliciesChanged);
        assert_eq!(harness.ours(), ours, "{backend}: the previous rules");
        if !one_transaction {
            assert!(
                harness.kernel.writes() > writes + 2,
                "{backend}: the first write was undone by more writes"
            );
        }
        assert!(
            harness.daemon.summary.starts_with("apply failed"),
            "{}",
            harness.daemon.summary
        );
        assert!(
            harness
                .daemon
                .summary
                .contains("the previous rules were restored")
        );
        assert_eq!(harness.metric(|m| m.reloads_failed), 1);
        assert_eq!(harness.metric(|m| u64::from(m.in_sync)), 0, "{backend}");
        let synced_before = harness.metric(|m| m.last_sync_timestamp);
        assert!(synced_before > 0, "{backend}: the first apply was a sync");
        // The next event applies the change.
        harness.handle(Event::PoliciesChanged);
        assert_ne!(harness.ours(), ours);
        assert!(harness.daemon.last_errors.is_empty());
        assert_eq!(harness.metric(|m| u64::from(m.in_sync)), 1, "{backend}");
        assert!(harness.metric(|m| m.last_sync_timestamp) >= synced_before);
    });
}

#[test]
fn sighup_repairs_drift_while_the_files_are_invalid_or_gone() {
    each_backend(|backend| {
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        harness.write("whitelist.yaml", "kind: [");
        harness.handle(Event::PoliciesChanged);
        harness.remove_our_allow_rule();
        harness.handle(Event::Reload);
        assert_eq!(
            harness.ours(),
            ours,
            "{backend}: SIGHUP put the last good rules back"
        );

        harness.remove("whitelist.yaml");
        harness.handle(Event::PoliciesChanged);
        harness.remove_our_allow_rule();
        harness.handle(Event::Reload);
        assert_eq!(
            harness.ours(),
            ours,
            "{backend}: also with an empty directory"
        );
    });
}

#[test]
fn a_resting_daemon_packs_what_it_applied_and_asks_the_kernel_what_an_awake_one_asks() {
    each_backend(|backend| {
        #[derive(Clone, Copy)]
        enum Between {
            Nothing,
            Rest,
            RestAndForget,
        }
        let mut forgetting = Harness::new(backend, false);
        let mut resting = Harness::new(backend, false);
        let mut awake = Harness::new(backend, false);
        let ours = applied(&mut forgetting);
        assert!(
            forgetting.daemon.is_resting(),
            "{backend}: packed after the event"
        );
        for harness in [&mut resting, &mut awake] {
            harness.write("whitelist.yaml", WHITELIST);
            harness.daemon.handle(Event::PoliciesChanged);
            assert_eq!(harness.ours(), ours, "{backend}");
        }
        let edited = WHITELIST.replace("198.51.100.10/32", "198.51.100.11/32");
        let mut asked = Vec::new();
        for (harness, between) in [
            (&mut forgetting, Between::RestAndForget),
            (&mut resting, Between::Rest),
            (&mut awake, Between::Nothing),
        ] {
            harness.kernel.clear_commands();
            let events = |harness: &mut Harness, event| match between {
                Between::RestAndForget => harness.handle(event),
                Between::Rest => harness.handle_and_rest(event),
                Between::Nothing => harness.daemon.handle(event),
            };
            // A check with nothing to do, a repair, an edit, and a check after the edit.
            events(harness, Event::Resync);
            harness.remove_our_allow_rule();
            events(harness, Event::Drift(super::drift::Trigger::Notification));
            assert_eq!(harness.ours(), ours, "{backend}: repaired");
            harness.write("whitelist.yaml", &edited);
            events(harness, Event::PoliciesChanged);
            events(harness, Event::Resync);
            // Some readings run on threads of their own: their order is not the point.
            let mut commands: Vec<String> = harness
                .kernel
                .commands()
                .iter()
                .map(|command| format!("{} <<{:?}", command.line(), command.stdin))
                .collect();
            commands.sort();
            asked.push((commands, harness.ours()));
        }
        assert!(forgetting.daemon.is_resting(), "{backend}");
        assert!(resting.daemon.is_resting(), "{backend}");
        assert!(!asked[0].1.is_empty());
        assert_ne!(asked[0].1, ours, "{backend}: the edit was applied");
        for other in [1, 2] {
            assert!(
                asked[0].0 == asked[other].0,
                "{backend}: resting and forgetting, then {}:\n{}\n\n{}",
                if other == 1 { "resting" } else { "awake" },
                asked[0].0.join("\n"),
                asked[other].0.join("\n")
            );
            assert_eq!(asked[0].1, asked[other].1, "{backend}: the same rules");
        }
    });
}

#[test]
fn the_echo_of_our_own_write_while_a_file_is_being_written_reads_nothing() {
    each_backend(|backend| {
        if backend.sign() != crate::dataplane::Sign::NfGeneration {
            // x_tables send no notifications: no echo to tell apart.
            return;
        }
        let mut harness = Harness::new(backend, false);
        let ours = applied(&mut harness);
        harness.daemon.files_settling = true;
        harness.kernel.clear_commands();
        harness.handle(Event::Drift(super::drift::Trigger::Notification));
        assert_eq!(
            harness.kernel.commands(),
            Vec::new(),
            "{backend}: nothing to repair, nothing read"
        );
        // Another program's change meanwhile is repaired, files written or not.
        harness.remove_our_allow_rule();
        harness.handle(Event::Drift(super::drift::Trigger::Notification));
        assert_eq!(harness.ours(), ours, "{backend}");
    });
}
