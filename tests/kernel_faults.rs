//! Kernel tests of what happens when things go wrong around nodeport-guard:
//! a restore program failing half-way, `kill -9` in the middle of an apply
//! or a daemon reload, another program holding the xtables lock, sets
//! changing under live traffic, and a state directory that cannot be
//! written.
//!
//! Failing programs are simulated with wrapper scripts put first in the
//! `PATH` of the nodeport-guard process only (nodeport-guard looks programs
//! up in `PATH` before the sbin directories): they forward to the real
//! program, except for the one write they are told to break.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::{
    Backend, Guard, Lab, Snapshot, addr, assert_contains, backend_tests, cmd, nft_tables, ports,
    replies, sa, wait_until,
};

/// How long to wait for a daemon to converge.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);

/// Polling interval.
const POLL: Duration = Duration::from_millis(50);

/// Turns `fn name(backend: Backend, native_nftables: bool)` into the tests
/// `name::legacy`, `name::nft` and `name::nftables` (native nftables; the
/// lab's DNAT stays in iptables-nft).
macro_rules! all_backends {
    ($name:ident) => {
        mod $name {
            #[test]
            fn legacy() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Legacy, false);
            }

            #[test]
            fn nft() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Nft, false);
            }

            #[test]
            fn nftables() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Nft, true);
            }
        }
    };
}

// ---------------------------------------------------------------------------
// Policies: two versions that touch both families, chains and sets.
// ---------------------------------------------------------------------------

/// Ten /32s around `first` (so the list becomes a set) plus the listed
/// client.
fn long_list(listed: &str, filler_octet: u8) -> String {
    let mut nets: Vec<String> = (0..10)
        .map(|i| format!("10.{filler_octet}.{i}.0/24"))
        .collect();
    nets.push(listed.to_owned());
    nets.join(", ")
}

/// A pre-DNAT whitelist on `port` (IPv4 through an ipset, IPv6 inline) and
/// an office network set allowed by label; everyone else is dropped there.
fn version(name: &str, port: u16, office: &str, filler_octet: u8) -> String {
    format!(
        "apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata:
  name: office-{name}
  labels:
    role: office-{name}
spec:
  nets: [{office}]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: {name}
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      source:
        nets: [{list}]
    - action: Allow
      source:
        nets: [\"2001:db8:1::10/128\"]
    - action: Allow
      source:
        selector: role == 'office-{name}'
    - action: Deny
      protocol: TCP
      destination:
        ports: [{port}]
",
        list = long_list("198.51.100.10/32", filler_octet),
    )
}

/// Version A: guards the NodePort.
fn version_a() -> String {
    version("guard-a", ports::NODEPORT, "203.0.113.10/32", 1)
}

/// Version B: guards the host service, with other sets.
fn version_b() -> String {
    version("guard-b", ports::HOST_SERVICE, "203.0.113.11/32", 2)
}

fn guard_for(lab: &Lab, native_nftables: bool) -> Guard<'_> {
    let guard = Guard::new(lab);
    if native_nftables {
        guard.native_nftables()
    } else {
        guard
    }
}

// ---------------------------------------------------------------------------
// Kernel state, split into the parts that change atomically.
// ---------------------------------------------------------------------------

/// Our state, per part that one write changes atomically: one entry per
/// (family, table) for iptables (one `iptables-restore` each), one for all
/// of native nftables (one transaction). Values are canonical (order of
/// creation does not matter).
fn atomic_parts(lab: &Lab, native_nftables: bool) -> BTreeMap<String, String> {
    let mut parts = BTreeMap::new();
    if native_nftables {
        parts.insert("nftables".to_owned(), nft_tables(lab));
        return parts;
    }
    let snapshot = Snapshot::take(lab).canonical();
    for (family, text) in [("ipv4", &snapshot.v4), ("ipv6", &snapshot.v6)] {
        let mut table = String::new();
        for line in text.lines() {
            if let Some(name) = line.strip_prefix('*') {
                table = name.to_owned();
            } else if line.contains("npg") {
                let part = parts.entry(format!("{family} {table}")).or_default();
                part.push_str(line);
                part.push('\n');
            }
        }
    }
    parts
}

/// Panics unless every atomic part of `now` equals that part of `old` or of
/// `new` (a missing part counts as empty). Returns which version each part
/// matched, for statistics.
#[track_caller]
fn assert_each_part_old_or_new(
    now: &BTreeMap<String, String>,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
    context: &str,
) -> Vec<&'static str> {
    let keys: BTreeSet<&String> = now.keys().chain(old.keys()).chain(new.keys()).collect();
    let empty = String::new();
    let mut matched = Vec::new();
    for key in keys {
        let (n, o, w) = (
            now.get(key).unwrap_or(&empty),
            old.get(key).unwrap_or(&empty),
            new.get(key).unwrap_or(&empty),
        );
        if n == o {
            matched.push("old");
        } else if n == w {
            matched.push("new");
        } else {
            panic!(
                "{context}: {key} is neither the old nor the new version\n--- now ---\n{n}--- old ---\n{o}--- new ---\n{w}"
            );
        }
    }
    matched
}

/// With ipset (not transactional): every set our rules use exists, and
/// every set of ours is one the old or the new version has.
#[track_caller]
fn assert_sets_consistent(lab: &Lab, old: &Snapshot, new: &Snapshot, context: &str) {
    let now = Snapshot::take(lab);
    let known: BTreeSet<String> = old.set_names().into_iter().chain(new.set_names()).collect();
    let existing: BTreeSet<String> = now.set_names().into_iter().collect();
    for name in &existing {
        assert!(
            !name.starts_with("npg") || known.contains(name),
            "{context}: set {name} belongs to neither version\n{now:?}"
        );
    }
    for rule in now.v4.lines().chain(now.v6.lines()) {
        if let Some(rest) = rule.split("--match-set ").nth(1) {
            let name = rest.split_whitespace().next().unwrap_or_default();
            assert!(
                existing.contains(name),
                "{context}: rule uses set {name}, which does not exist: {rule}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Wrapper scripts.
// ---------------------------------------------------------------------------

/// A directory of wrapper scripts for the programs nodeport-guard runs.
/// Until [`Wrappers::arm`] is called they only forward (and log); armed,
/// the `n`-th *write* (a restore, an `ipset restore`, an `nft -f`) counted
/// over all wrapped programs fails in the chosen way.
struct Wrappers {
    dir: tempfile::TempDir,
}

/// How the armed write fails.
#[derive(Clone, Copy, Debug)]
enum Breakage {
    /// Fails without doing anything (exit 4, message on stderr).
    Before,
    /// Forwards the first half of its input, then fails.
    HalfWay,
    /// Forwards everything (the write happens), then reports failure.
    AfterCommit,
}

impl Wrappers {
    fn new() -> Wrappers {
        let dir = tempfile::Builder::new()
            .prefix("npg-wrappers-")
            .tempdir()
            .expect("temporary directory");
        Wrappers { dir }
    }

    /// Wraps `program`; `write_test` is a shell condition on the arguments
    /// that is true for calls that write.
    fn wrap(&self, program: &str, write_test: &str) {
        let real =
            cmd::find_program(program).unwrap_or_else(|| panic!("{program} is not installed"));
        let dir = self.dir.path().display();
        let real = real.display();
        let script = format!(
            r#"#!/bin/sh
# Test wrapper for {program}: forwards to {real}, breaks the armed write.
dir='{dir}'
name='{program}'
is_write() {{ {write_test}; }}
mode=$(cat "$dir/mode" 2>/dev/null)
if is_write "$@"; then
  # Writes may run at the same time (iptables-nft's two families): count under a lock.
  n=$(flock "$dir/count.lock" sh -c 'n=$(( $(cat "$1/count" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$1/count"; echo "$n"' count "$dir")
  if [ -n "$mode" ] && [ "$n" -eq "${{mode#* }}" ]; then
    echo "$name $* -> broken (${{mode%% *}}, write $n)" >> "$dir/calls"
    case "${{mode%% *}}" in
      before)
        cat > /dev/null
        echo "$name: simulated failure of write $n" >&2
        exit 4 ;;
      half)
        cat > "$dir/input.$n"
        lines=$(wc -l < "$dir/input.$n")
        head -n $((lines / 2)) "$dir/input.$n" | '{real}' "$@"
        echo "$name: simulated failure half-way through write $n" >&2
        exit 4 ;;
      after)
        '{real}' "$@"
        echo "$name: simulated failure after write $n was carried out (exit $?)" >&2
        exit 4 ;;
    esac
  fi
  tee -a "$dir/input.log" | '{real}' "$@"
  rc=$?
else
  '{real}' "$@"
  rc=$?
fi
echo "$name $* -> $rc" >> "$dir/calls"
exit $rc
"#
        );
        let path = self.dir.path().join(program);
        support::executable::write_executable(&path, script);
    }

    /// Wraps the four iptables restore programs.
    fn wrap_restores(&self) {
        for program in [
            "iptables-legacy-restore",
            "ip6tables-legacy-restore",
            "iptables-nft-restore",
            "ip6tables-nft-restore",
        ] {
            self.wrap(program, "true");
        }
    }

    /// Wraps `ipset` (writes: `ipset restore`).
    fn wrap_ipset(&self) {
        self.wrap("ipset", "[ \"$1\" = restore ]");
    }

    /// Wraps `nft` (writes: `nft -f …`).
    fn wrap_nft(&self) {
        self.wrap(
            "nft",
            "case \" $* \" in *\" -f \"*) true ;; *) false ;; esac",
        );
    }

    /// Breaks the `n`-th write from now on.
    fn arm(&self, breakage: Breakage, n: usize) {
        let _ = std::fs::remove_file(self.dir.path().join("count"));
        let word = match breakage {
            Breakage::Before => "before",
            Breakage::HalfWay => "half",
            Breakage::AfterCommit => "after",
        };
        std::fs::write(self.dir.path().join("mode"), format!("{word} {n}")).expect("arm");
    }

    /// Back to forwarding only.
    fn disarm(&self) {
        let _ = std::fs::remove_file(self.dir.path().join("mode"));
    }

    /// The `PATH` for nodeport-guard: the wrappers first.
    fn path_env(&self) -> String {
        format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            self.dir.path().display()
        )
    }

    /// Every call so far, one line each: `program args -> exit status`.
    fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("calls")).unwrap_or_default()
    }

    /// Everything written to the wrapped programs' stdin (unbroken writes).
    fn inputs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("input.log")).unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------
// A failing write.
// ---------------------------------------------------------------------------

/// Applies version A, then version B with the `n`-th write broken as
/// `breakage`: `apply` exits 1, names the failing command and its stderr,
/// says the previous rules were restored, and the kernel holds exactly
/// version A; a later `apply` (nothing broken) gets B in.
#[track_caller]
fn failed_write_restores_version_a(
    lab: &Lab,
    guard: &Guard<'_>,
    wrappers: &Wrappers,
    native_nftables: bool,
    breakage: Breakage,
    n: usize,
    program: &str,
) {
    guard.write_policy("policy.yaml", &version_a());
    wrappers.disarm();
    guard.apply();
    let before = atomic_parts(lab, native_nftables);
    let before_sets = Snapshot::take(lab).canonical().sets;

    guard.write_policy("policy.yaml", &version_b());
    wrappers.arm(breakage, n);
    let out = guard.run(&["apply", "--yes"]);
    wrappers.disarm();
    let context = format!("{breakage:?} write {n} of {program}");
    assert_eq!(out.status.code(), Some(1), "{context}: {out}");
    assert_contains(&out.stderr, program, &context);
    assert_contains(&out.stderr, "simulated failure", &context);
    assert_contains(&out.stderr, "the previous rules were restored", &context);
    assert!(
        !out.stderr.contains("panicked"),
        "{context}: no panic: {out}"
    );
    assert_eq!(
        atomic_parts(lab, native_nftables),
        before,
        "{context}: the kernel must hold exactly the previous rules\n{}",
        wrappers.calls()
    );
    assert_eq!(
        Snapshot::take(lab).canonical().sets,
        before_sets,
        "{context}: the previous sets\n{}",
        wrappers.calls()
    );
    let (code, plan) = guard.plan_detailed();
    assert_eq!(code, 2, "{context}: B is still to be applied: {plan}");
    guard.apply();
    let (code, plan) = guard.plan_detailed();
    assert_eq!(code, 0, "{context}: B applied: {plan}");
}

/// The second restore failing after the first was committed (iptables-legacy:
/// IPv6's, after IPv4's mangle and raw tables, where the early drop lives;
/// iptables-nft restores both families at once, so either may be second):
/// `apply` exits 1 naming the restore command and its stderr, and puts the
/// committed tables back, so the kernel holds exactly the previous rules and
/// sets.
fn restore_failing_half_way_leaves_the_previous_rules(backend: Backend) {
    let lab = Lab::new(backend);
    let wrappers = Wrappers::new();
    wrappers.wrap_restores();
    let guard = Guard::new(&lab).with_env("PATH", &wrappers.path_env());
    let (first, second) = match backend {
        Backend::Legacy => ("iptables-legacy-restore", "ip6tables-legacy-restore"),
        Backend::Nft | Backend::Nftables => ("tables-nft-restore", "tables-nft-restore"),
    };
    failed_write_restores_version_a(&lab, &guard, &wrappers, false, Breakage::Before, 2, second);
    // The first restore failing is the plain case.
    failed_write_restores_version_a(&lab, &guard, &wrappers, false, Breakage::Before, 1, first);
}
backend_tests!(
    restore_failing_half_way_leaves_the_previous_rules,
    iptables_only
);

/// The rollback watcher's first restore failing (as when another program holds the tables for
/// a moment) does not lose the rollback: it tries again, the kernel goes back to exactly the
/// previous rules and sets, and `confirm` says the apply was rolled back.
fn rollback_watcher_tries_again_after_a_failed_restore(backend: Backend) {
    let lab = Lab::new(backend);
    let wrappers = Wrappers::new();
    wrappers.wrap_restores();
    let guard = Guard::new(&lab).with_env("PATH", &wrappers.path_env());
    // A's sets are destroyed by B and created again by the rollback, with a new random hash
    // seed (`initval`): compare everything but that.
    let now = || {
        let mut snapshot = guard.snapshot().canonical();
        snapshot.sets = snapshot
            .sets
            .lines()
            .map(|line| format!("{}\n", line.split(" initval ").next().unwrap_or(line)))
            .collect();
        snapshot
    };
    guard.write_policy("policy.yaml", &version_a());
    guard.apply();
    let a = now();
    guard.write_policy("policy.yaml", &version_b());
    guard.run_expect(&["apply", "--yes", "--confirm-timeout", "2"], 0);
    // The watcher sleeps until the deadline; the first restore it runs then fails.
    wrappers.arm(Breakage::Before, 1);
    assert!(now() != a, "B must differ from A");

    let rolled_back = wait_until(Duration::from_secs(15), POLL, || now() == a);
    assert!(
        rolled_back,
        "not rolled back after a failed first attempt:\n{}\ncalls:\n{}\nwatcher.log:\n{}",
        a.diff(&now()),
        wrappers.calls(),
        std::fs::read_to_string(guard.state_dir().join("watcher.log")).unwrap_or_default()
    );
    assert!(
        wrappers.calls().contains("-> broken"),
        "the watcher's first restore was not the broken one:\n{}",
        wrappers.calls()
    );
    let out = guard.run_expect(&["confirm"], 1);
    assert_contains(&out.stderr, "was rolled back", "confirm after the rollback");
}
backend_tests!(
    rollback_watcher_tries_again_after_a_failed_restore,
    iptables_only
);

/// `ipset restore` failing: half-way through creating and updating the new
/// sets (ipset is not transactional, so half the commands took effect), and
/// on the final destroy of the old sets (after the tables were switched).
/// Both times `apply` exits 1 naming `ipset`, and the kernel holds exactly
/// the previous rules and sets.
fn ipset_failing_leaves_the_previous_rules_and_sets(backend: Backend) {
    let lab = Lab::new(backend);
    let wrappers = Wrappers::new();
    wrappers.wrap_ipset();
    let guard = Guard::new(&lab).with_env("PATH", &wrappers.path_env());
    failed_write_restores_version_a(
        &lab,
        &guard,
        &wrappers,
        false,
        Breakage::HalfWay,
        1,
        "ipset",
    );
    failed_write_restores_version_a(&lab, &guard, &wrappers, false, Breakage::Before, 2, "ipset");
}
backend_tests!(
    ipset_failing_leaves_the_previous_rules_and_sets,
    iptables_only
);

/// `nft -f` failing with the native nftables backend: when it refuses the
/// transaction, and when it reports failure although the transaction went
/// through: `apply` exits 1 naming `nft -f` and its stderr, and the kernel
/// holds exactly the previous tables.
#[test]
fn nft_failing_leaves_the_previous_tables() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nft);
    let wrappers = Wrappers::new();
    wrappers.wrap_nft();
    let guard = Guard::new(&lab)
        .native_nftables()
        .with_env("PATH", &wrappers.path_env());
    failed_write_restores_version_a(&lab, &guard, &wrappers, true, Breakage::Before, 1, "nft -f");
    failed_write_restores_version_a(
        &lab,
        &guard,
        &wrappers,
        true,
        Breakage::AfterCommit,
        1,
        "nft -f",
    );
}

// ---------------------------------------------------------------------------
// kill -9.
// ---------------------------------------------------------------------------

/// A deterministic pseudo-random sequence for kill delays (xorshift).
struct Delays(u64);

impl Delays {
    fn next(&mut self, max: Duration) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let max_micros = max.as_micros().max(1) as u64;
        Duration::from_micros(self.0 % max_micros)
    }
}

/// `kill -9` of `apply` at random moments while it switches from one
/// version to the other (the delays spread over the time a whole apply
/// takes): every table (iptables) or the whole transaction (nftables) is
/// exactly the old or the new version, every set a rule uses exists, and
/// the next `apply --yes` converges (`plan --detailed-exitcode` then exits
/// 0 and the kernel holds the new version).
fn apply_killed_at_random_moments_leaves_whole_tables_and_converges(
    backend: Backend,
    native_nftables: bool,
) {
    let lab = Lab::new(backend);
    let guard = guard_for(&lab, native_nftables);
    let versions = [version_a(), version_b()];
    let mut parts = Vec::new();
    let mut snapshots = Vec::new();
    let mut took = Duration::ZERO;
    for text in &versions {
        guard.write_policy("policy.yaml", text);
        let started = Instant::now();
        guard.apply();
        took = took.max(started.elapsed());
        parts.push(atomic_parts(&lab, native_nftables));
        snapshots.push(Snapshot::take(&lab));
    }
    let mut delays = Delays(0x9e37_79b9_7f4a_7c15);
    let mut outcomes: BTreeMap<Vec<&str>, usize> = BTreeMap::new();
    for round in 0..20 {
        let (old, new) = (round % 2, (round + 1) % 2);
        guard.write_policy("policy.yaml", &versions[new]);
        let delay = delays.next(took + took / 4);
        let mut apply = guard.spawn(&["apply", "--yes"], "apply.log");
        std::thread::sleep(delay);
        apply.kill9();
        let context = format!("round {round}, killed after {delay:?}");
        let now = atomic_parts(&lab, native_nftables);
        let matched = assert_each_part_old_or_new(&now, &parts[old], &parts[new], &context);
        *outcomes.entry(matched).or_default() += 1;
        if !native_nftables {
            assert_sets_consistent(&lab, &snapshots[old], &snapshots[new], &context);
        }
        guard.apply();
        let (code, plan) = guard.plan_detailed();
        assert_eq!(code, 0, "{context}: converged: {plan}");
        assert_eq!(
            atomic_parts(&lab, native_nftables),
            parts[new],
            "{context}: the new version"
        );
    }
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("apply killed (apply takes {took:?}): {outcomes:?}\n").as_bytes(),
    );
}
all_backends!(apply_killed_at_random_moments_leaves_whole_tables_and_converges);

/// The config of a daemon that reacts fast and never resyncs on its own
/// during a test.
const FAST_DAEMON: &str = "debounce: 20ms\nresyncInterval: 1h\n";

/// Starts `run` and waits until it applied what the policy directory says.
#[track_caller]
fn start_daemon(guard: &Guard<'_>, log: &str) -> support::Background {
    let mut daemon = guard.spawn(&["run"], log);
    let converged = wait_until(CONVERGE_TIMEOUT, POLL, || guard.plan_detailed().0 == 0);
    assert!(
        converged && daemon.running(),
        "the daemon did not converge:\n{}",
        daemon.log()
    );
    daemon
}

/// `kill -9` of the daemon while it reloads a changed policy file: the
/// kernel holds whole old or new tables, and a restarted daemon converges
/// to the new version.
fn daemon_killed_while_reloading_converges_after_restart(backend: Backend, native_nftables: bool) {
    let lab = Lab::new(backend);
    let guard = guard_for(&lab, native_nftables);
    guard.write_config(FAST_DAEMON);
    let versions = [version_a(), version_b()];
    let mut parts = Vec::new();
    let mut took = Duration::ZERO;
    for text in &versions {
        guard.write_policy("policy.yaml", text);
        let started = Instant::now();
        guard.apply();
        took = took.max(started.elapsed());
        parts.push(atomic_parts(&lab, native_nftables));
    }
    guard.write_policy("policy.yaml", &versions[0]);
    let mut daemon = start_daemon(&guard, "daemon-0.log");
    let mut delays = Delays(0x2545_f491_4f6c_dd1d);
    for round in 0..6 {
        let (old, new) = (round % 2, (round + 1) % 2);
        guard.write_policy("policy.yaml", &versions[new]);
        let delay = delays.next(took * 2 + Duration::from_millis(20));
        std::thread::sleep(delay);
        daemon.kill9();
        let context = format!("round {round}, daemon killed {delay:?} after the change");
        let now = atomic_parts(&lab, native_nftables);
        assert_each_part_old_or_new(&now, &parts[old], &parts[new], &context);
        daemon = start_daemon(&guard, &format!("daemon-{}.log", round + 1));
        assert_eq!(
            atomic_parts(&lab, native_nftables),
            parts[new],
            "{context}: the restarted daemon applied the new version\n{}",
            daemon.log()
        );
    }
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM stops the daemon with 0: {status:?}\n{}",
        daemon.log()
    );
    assert_eq!(guard.plan_detailed().0, 0, "the rules stay after SIGTERM");
}
all_backends!(daemon_killed_while_reloading_converges_after_restart);

/// A policy file with a port out of range (line 13).
const BROKEN: &str = "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: broken
spec:
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Deny
      protocol: TCP
      destination:
        ports: [70000]
";

/// The daemon never applies a broken or suddenly empty policy set. When a
/// file becomes invalid it logs the error with the file's location and the
/// last good rules stay, also through a SIGHUP reload, and are put back
/// from memory when someone flushes one of them (resync). When every
/// policy file disappears it refuses (`allowEmpty` is false) and keeps the
/// rules. `apply --yes` of an empty directory, by contrast, removes them:
/// only the daemon guards against an empty set.
fn daemon_keeps_the_last_good_rules_on_invalid_or_empty_input(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_config("debounce: 20ms\nresyncInterval: 1s\n");
    guard.write_policy("policy.yaml", &version_a());
    let mut daemon = start_daemon(&guard, "daemon.log");
    let good = atomic_parts(&lab, false);

    guard.write_policy("broken.yaml", BROKEN);
    let reported = wait_until(CONVERGE_TIMEOUT, POLL, || {
        daemon.log().contains("broken.yaml:13:")
    });
    assert!(
        reported,
        "the error is logged with its location:\n{}",
        daemon.log()
    );
    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    let chain = Snapshot::take(&lab)
        .chains(support::Family::V4, "mangle", "npg-pi-")
        .into_iter()
        .next()
        .expect("a policy chain");
    lab.iptables_ok(support::Family::V4, &["-t", "mangle", "-F", &chain]);
    let repaired = wait_until(CONVERGE_TIMEOUT, POLL, || atomic_parts(&lab, false) == good);
    assert!(
        repaired,
        "the last good rules are put back while the files are invalid:\n{}",
        daemon.log()
    );

    guard.remove_policy("broken.yaml");
    guard.remove_policy("policy.yaml");
    let refused = wait_until(CONVERGE_TIMEOUT, POLL, || {
        daemon.log().contains("holds no policy at all")
    });
    assert!(refused, "the empty set is refused:\n{}", daemon.log());
    // Watched over two resyncs, the rules do not change.
    let changed = wait_until(Duration::from_millis(2500), POLL, || {
        atomic_parts(&lab, false) != good
    });
    assert!(!changed, "the rules changed:\n{}", daemon.log());
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        daemon
            .wait_exit(Duration::from_secs(10))
            .is_some_and(|s| s.success()),
        "{}",
        daemon.log()
    );
    assert_eq!(
        atomic_parts(&lab, false),
        good,
        "the rules stay after SIGTERM"
    );

    guard.apply();
    assert!(
        Snapshot::take(&lab).has_nothing_of_ours(),
        "apply of an empty directory removes everything"
    );
}
backend_tests!(
    daemon_keeps_the_last_good_rules_on_invalid_or_empty_input,
    iptables_only
);

// ---------------------------------------------------------------------------
// The xtables lock.
// ---------------------------------------------------------------------------

/// The lock file iptables-legacy takes (host-wide, also inside network
/// namespaces).
const XTABLES_LOCK: &str = "/run/xtables.lock";

/// Holds the xtables lock with `flock` for `seconds`; killed on drop.
struct LockHolder {
    child: std::process::Child,
}

impl LockHolder {
    #[track_caller]
    fn hold(seconds: u32) -> LockHolder {
        use std::os::unix::process::CommandExt as _;
        let child = std::process::Command::new(cmd::program_path("flock"))
            .arg(XTABLES_LOCK)
            .arg("-c")
            .arg(format!("sleep {seconds}"))
            .process_group(0)
            .spawn()
            .expect("start flock");
        let holder = LockHolder { child };
        let held = wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
            !cmd::run("flock", &["-n", XTABLES_LOCK, "true"], None).success()
        });
        assert!(held, "flock did not take {XTABLES_LOCK}");
        holder
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Another program holding the xtables lock (iptables-legacy's, host-wide)
/// makes `apply` wait for it and then succeed, and the operator is told on
/// stderr why `apply` is waiting.
#[test]
fn apply_waits_for_the_xtables_lock_and_says_so() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Legacy);
    let guard = Guard::new(&lab);
    guard.write_policy("policy.yaml", &version_a());
    let holder = LockHolder::hold(3);
    let started = Instant::now();
    let out = guard.run(&["apply", "--yes"]);
    let waited = started.elapsed();
    drop(holder);
    assert_eq!(out.status.code(), Some(0), "{out}");
    assert!(
        waited >= Duration::from_millis(1500),
        "apply returned after {waited:?}, before the lock was free: {out}"
    );
    assert_contains(&out.stderr, "xtables lock", "apply's stderr");
    assert_eq!(guard.plan_detailed().0, 0);
}

// ---------------------------------------------------------------------------
// Sets under traffic.
// ---------------------------------------------------------------------------

/// Version `i` of a whitelist whose two sets (a network set selected by
/// label, and a long nets list) always hold the steady clients
/// 203.0.113.10 and 198.51.100.10 and, besides them, other members each
/// time.
fn changing_sets(i: u8) -> String {
    format!(
        "apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata:
  name: office
  labels:
    role: office
spec:
  nets: [203.0.113.10/32, 10.99.{i}.0/24, 192.0.2.{i}/32]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: steady-whitelist
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      protocol: TCP
      source:
        selector: role == 'office'
    - action: Allow
      protocol: TCP
      source:
        nets: [{list}]
    - action: Deny
      protocol: TCP
      destination:
        ports: [{nodeport}, {service}]
",
        list = long_list("198.51.100.10/32", 100 + i),
        nodeport = ports::NODEPORT,
        service = ports::HOST_SERVICE,
    )
}

/// Sets in use are updated in place, never destroyed or swapped under a
/// rule: while the steady clients keep connecting, eight applies change
/// the other members of the network set and of the long nets list. No
/// connection of a steady client fails, the sets keep their names, every
/// `ipset` call succeeds, and no `destroy` or `swap` ever names a set that
/// a rule uses.
fn sets_in_use_are_updated_in_place_under_traffic(backend: Backend) {
    let lab = Lab::new(backend);
    let wrappers = Wrappers::new();
    wrappers.wrap_ipset();
    let guard = Guard::new(&lab).with_env("PATH", &wrappers.path_env());
    guard.write_policy("policy.yaml", &changing_sets(0));
    guard.apply();
    let names_before: BTreeSet<String> = Snapshot::take(&lab).set_names().into_iter().collect();

    let stop = AtomicBool::new(false);
    let attempts = AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for (src, dst, reply) in [
            (
                addr::CLIENT_REMOTE_V4[0],
                sa(addr::NODE_V4, ports::NODEPORT),
                replies::NODEPORT_TARGET,
            ),
            (
                addr::CLIENT_V4[0],
                sa(addr::NODE_V4, ports::HOST_SERVICE),
                replies::HOST_SERVICE,
            ),
        ] {
            let (stop, attempts, failures, lab) = (&stop, &attempts, &failures, &lab);
            scope.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    match lab.connect(src.into(), dst, Duration::from_secs(2)) {
                        Ok(got) if got == reply => {}
                        other => failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!("{src} -> {dst}: {other:?}")),
                    }
                    // Pacing, not waiting for a condition: keep connecting
                    // all the time without flooding conntrack.
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
        }
        for i in 1..=8 {
            guard.write_policy("policy.yaml", &changing_sets(i));
            guard.apply();
        }
        stop.store(true, Ordering::SeqCst);
    });
    let failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    assert!(
        failures.is_empty(),
        "{} of {} connections of steady clients failed: {failures:#?}",
        failures.len(),
        attempts.load(Ordering::SeqCst)
    );
    assert!(attempts.load(Ordering::SeqCst) > 20, "traffic flowed");
    let names_after: BTreeSet<String> = Snapshot::take(&lab).set_names().into_iter().collect();
    assert_eq!(names_before, names_after, "the sets kept their names");
    let calls = wrappers.calls();
    for line in calls.lines() {
        assert!(
            line.ends_with("-> 0"),
            "an ipset call failed: {line}\n{calls}"
        );
    }
    let inputs = wrappers.inputs();
    for line in inputs.lines() {
        let mut words = line.split_whitespace();
        if let (Some("destroy" | "swap"), Some(name)) = (words.next(), words.next()) {
            assert!(
                !names_before.contains(name),
                "a set in use was destroyed or swapped: {line}\n{inputs}"
            );
        }
    }
    assert!(
        inputs.contains(" -exist"),
        "members were updated in place:\n{inputs}"
    );
}
backend_tests!(
    sets_in_use_are_updated_in_place_under_traffic,
    iptables_only
);

// ---------------------------------------------------------------------------
// A state directory that cannot be written.
// ---------------------------------------------------------------------------

/// A tmpfs mounted for one test (in the root mount namespace, which `ip
/// netns exec` copies), unmounted on drop.
struct TmpfsMount {
    dir: tempfile::TempDir,
}

impl TmpfsMount {
    #[track_caller]
    fn new(size: &str) -> TmpfsMount {
        let dir = tempfile::Builder::new()
            .prefix("npg-tmpfs-")
            .tempdir()
            .expect("temporary directory");
        let target = dir.path().display().to_string();
        cmd::run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "tmpfs",
                &target,
            ],
            None,
        )
        .expect_success();
        TmpfsMount { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    #[track_caller]
    fn read_only(&self) {
        let target = self.path().display().to_string();
        cmd::run("mount", &["-o", "remount,ro", &target], None).expect_success();
    }

    /// Fills the file system up.
    #[track_caller]
    fn fill(&self) {
        let fill = self.path().join("fill");
        // dd stops with "No space left on device"; that is the point.
        let _ = cmd::run(
            "dd",
            &["if=/dev/zero", &format!("of={}", fill.display()), "bs=4096"],
            None,
        );
        let probe = std::fs::write(self.path().join("probe"), b"x");
        assert!(probe.is_err(), "the tmpfs should be full");
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let target = self.dir.path().display().to_string();
        let out = cmd::run("umount", &["-l", &target], None);
        if !out.success() {
            eprintln!("warning: could not unmount {target}: {out}");
        }
    }
}

/// Which unusable state directory a test points nodeport-guard at.
#[derive(Clone, Copy, Debug)]
enum Unwritable {
    /// An existing directory on a read-only file system.
    ReadOnly,
    /// A directory that does not exist and cannot be created (read-only
    /// file system).
    Missing,
    /// An existing directory on a full file system.
    Full,
}

/// With a state directory that cannot be written (read-only, missing on a
/// read-only file system, or on a full file system): `apply` still
/// reconciles and says it could not use the state directory; the daemon
/// still applies and repairs, and says so; `apply --confirm-timeout`
/// refuses, saying it cannot promise the rollback, and changes nothing.
fn unwritable_state_dir_still_reconciles_but_refuses_a_confirm_window(which: Unwritable) {
    let lab = Lab::new(Backend::Nft);
    let mount = TmpfsMount::new("1m");
    let state: PathBuf = match which {
        Unwritable::Missing => mount.path().join("missing/state"),
        Unwritable::ReadOnly | Unwritable::Full => {
            let state = mount.path().join("state");
            std::fs::create_dir(&state).expect("state directory");
            state
        }
    };
    match which {
        Unwritable::Full => mount.fill(),
        Unwritable::ReadOnly | Unwritable::Missing => mount.read_only(),
    }
    let guard = Guard::new(&lab).with_state_dir(&state);
    guard.write_config(FAST_DAEMON);

    guard.write_policy("policy.yaml", &version_a());
    let out = guard.run(&["apply", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{which:?}: {out}");
    assert_contains(&out.stderr, "state directory", &format!("{which:?} apply"));
    assert_eq!(guard.plan_detailed().0, 0, "{which:?}: applied");

    let before = Snapshot::take(&lab);
    guard.write_policy("policy.yaml", &version_b());
    let out = guard.run(&["apply", "--yes", "--confirm-timeout", "30"]);
    assert_eq!(out.status.code(), Some(1), "{which:?}: {out}");
    assert_contains(
        &out.stderr,
        "state directory",
        &format!("{which:?} confirm"),
    );
    assert_contains(&out.stderr, "roll", &format!("{which:?} confirm"));
    assert_eq!(
        Snapshot::take(&lab),
        before,
        "{which:?}: a refused confirm window changes nothing"
    );

    let mut daemon = start_daemon(&guard, "daemon.log");
    // Drift is repaired too.
    let chain = Snapshot::take(&lab)
        .chains(support::Family::V4, "mangle", "npg-pi-")
        .into_iter()
        .next()
        .expect("a policy chain");
    lab.iptables_ok(support::Family::V4, &["-t", "mangle", "-F", &chain]);
    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    let repaired = wait_until(CONVERGE_TIMEOUT, POLL, || guard.plan_detailed().0 == 0);
    assert!(
        repaired,
        "{which:?}: the daemon repaired drift:\n{}",
        daemon.log()
    );
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        daemon
            .wait_exit(Duration::from_secs(10))
            .is_some_and(|s| s.success()),
        "{which:?}: {}",
        daemon.log()
    );
    assert_contains(
        &daemon.log(),
        "state directory",
        &format!("{which:?} daemon log"),
    );
}

/// See [`unwritable_state_dir_still_reconciles_but_refuses_a_confirm_window`].
mod unwritable_state_dir_still_reconciles_but_refuses_a_confirm_window {
    use super::Unwritable;

    #[test]
    fn read_only() {
        crate::support::require_kernel!();
        super::unwritable_state_dir_still_reconciles_but_refuses_a_confirm_window(
            Unwritable::ReadOnly,
        );
    }

    #[test]
    fn missing() {
        crate::support::require_kernel!();
        super::unwritable_state_dir_still_reconciles_but_refuses_a_confirm_window(
            Unwritable::Missing,
        );
    }

    #[test]
    fn full() {
        crate::support::require_kernel!();
        super::unwritable_state_dir_still_reconciles_but_refuses_a_confirm_window(Unwritable::Full);
    }
}

/// `plan` or `apply` reads the kernel from the view the last command kept under the state
/// directory when the kernel's nf_tables generation says nothing changed since (iptables-nft,
/// nftables; iptables-legacy keeps none). Another program that changes
/// our rules or sets between two commands is seen all the same: the next `plan` shows the
/// drift and `apply` repairs it. Each time, the planning with the view says what a plan that
/// reads the whole kernel says.
fn another_program_between_two_commands_is_seen_despite_the_saved_view(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("mission.yaml", &support::fixtures::mission_policy());
    guard.apply();
    let view = guard.state_dir().join("view.json");
    let plan = |context: &str| {
        let out = guard.run(&["-vv", "plan", "--detailed-exitcode"]);
        let code = out.status.code().expect("plan exited");
        let cached = out.stderr.contains("planning against that view");
        // The same plan from a whole reading of the kernel.
        std::fs::remove_file(&view).ok();
        let whole = guard.run(&["plan", "--detailed-exitcode"]);
        assert_eq!(
            (whole.status.code(), whole.stdout.as_str()),
            (Some(code), out.stdout.as_str()),
            "{context}: a plan with the view and one without differ"
        );
        (code, cached, out.stdout)
    };
    // iptables-legacy has no generation, so its commands keep no view.
    let keeps_views = backend != Backend::Legacy;
    let (code, cached, output) = plan("after the apply");
    assert_eq!((code, cached), (0, keeps_views), "{output}");
    let (code, cached, output) = plan("nothing changed");
    assert_eq!((code, cached), (0, keeps_views), "{output}");

    let (table, chain) = ("mangle", "npg-PREROUTING");
    let flushed = match backend {
        Backend::Nftables => lab.node().exec(
            "nft",
            &[
                "flush",
                "chain",
                "ip",
                "nodeport_guard",
                &support::snapshot::nft_chain(table, chain),
            ],
        ),
        _ => lab.node().exec(
            backend.iptables(support::Family::V4),
            &["-t", table, "-F", chain],
        ),
    };
    assert!(flushed.success(), "{flushed}");
    let (code, cached, output) = plan("after another program flushed a chain of ours");
    assert_eq!((code, cached), (2, false), "{output}");
    assert_contains(&output, chain, "the plan of the flushed chain");
    guard.apply();
    let (code, _, output) = plan("repaired");
    assert_eq!(code, 0, "{output}");
    let (code, cached, output) = plan("repaired, nothing changed");
    assert_eq!((code, cached), (0, keeps_views), "{output}");

    // A set member added by hand: ipsets are outside the iptables backends' sign and read by
    // every command; nftables' own sets move its generation.
    let added = match backend {
        Backend::Nftables => lab.node().exec(
            "nft",
            &[
                "add",
                "element",
                "ip",
                "nodeport_guard",
                "npg4-this-host",
                "{ 192.0.2.99 }",
            ],
        ),
        _ => lab
            .node()
            .exec("ipset", &["add", "npg4-this-host", "192.0.2.99"]),
    };
    assert!(added.success(), "{added}");
    let (code, _, output) = plan("after another program added a set member");
    assert_eq!(code, 2, "{output}");
    assert_contains(&output, "192.0.2.99", "the plan of the set");
    guard.apply();
    let (code, _, output) = plan("repaired again");
    assert_eq!(code, 0, "{output}");
}
backend_tests!(another_program_between_two_commands_is_seen_despite_the_saved_view);
