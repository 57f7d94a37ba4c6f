//! Kernel tests of the daemon (`nodeport-guard run`): it picks up every way
//! operators and tools change the policy directory within seconds, never
//! opens a gap while reloading, keeps the last good rules when the files are
//! broken or gone, repairs what other programs change, follows the node's
//! addresses, obeys signals, serves honest metrics, and costs nothing at
//! rest.
//!
//! Every test runs the real binary as a child process in the node namespace
//! of a [`Lab`] (see [`support::daemon::Daemon`]) and judges it by what a
//! user sees: which connections to NodePort 30008 complete and which are
//! dropped, what the kernel holds, what the daemon logs, what `status` and
//! `/metrics` say. The policy is the NodePort whitelist; tests switch which
//! client source it allows, so that a change is visible as traffic.
//!
//! Tests about the watcher use a long `resyncInterval`, so that only the
//! watcher (not the periodic resync) can make a change effective in time;
//! each of them runs on one backend (named in its doc comment and test
//! name) because watching does not depend on the backend. Tests about the
//! kernel side run on both. The idle test also keeps the watcher tests
//! honest: a daemon whose loop re-reads the directory on its own, without
//! any event, would pass them without watching anything; the idle test
//! fails for such a daemon.

mod support;

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::daemon::{Daemon, daemon_config, http_get, http_get_ok, parse_prometheus};
use support::fixtures::Whitelist;
use support::{
    Backend, Family, Guard, Lab, POLL, addr, backend_tests, check_reachability, dropped, iptables,
    open, ports, replies, sa, wait_until,
};

/// How quickly a change to the policy files must be effective.
const RELOAD_WITHIN: Duration = Duration::from_secs(3);

/// How quickly a resync (every second in drift tests) must repair drift.
const REPAIR_WITHIN: Duration = Duration::from_millis(2500);

/// A long resync interval: changes can only be picked up by the watcher.
const NO_RESYNC: &str = "90s";

/// The first client source (198.51.100.10).
const SRC_A: Ipv4Addr = addr::CLIENT_V4[0];
/// The second client source (198.51.100.11).
const SRC_B: Ipv4Addr = addr::CLIENT_V4[1];

/// The NodePort whitelist: `allowed` may reach TCP 30008, everyone else is
/// dropped there (pre-DNAT, as kube-proxy's DNAT follows).
fn whitelist(allowed: &[Ipv4Addr]) -> String {
    whitelist_plus(allowed, "")
}

/// [`whitelist`] with `extra` (YAML list items, indented by 4) between the
/// Allow and the Deny rule.
fn whitelist_plus(allowed: &[Ipv4Addr], extra: &str) -> String {
    Whitelist::mission()
        .name("guard-nodeport")
        .nets(allowed.iter().map(|a| format!("{a}/32")))
        .rules_before_deny(extra)
        .yaml()
}

/// The same traffic outcome as `whitelist(allowed)`, but with an unrelated
/// extra rule that needs an ipset of its own (a GlobalNetworkSet selected by
/// label, admitted to port 9999): switching between the two rewrites the
/// policy chain and creates or removes sets.
fn whitelist_with_office(allowed: &[Ipv4Addr]) -> String {
    let policy = whitelist_plus(
        allowed,
        r#"    - action: Allow
      protocol: TCP
      source:
        selector: role == 'office'
      destination:
        ports: [9999]
"#,
    );
    format!(
        r#"apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata:
  name: office
  labels:
    role: office
spec:
  nets: [192.0.2.98/32, 192.0.2.99/32]
---
{policy}"#
    )
}

/// A second policy, ordered before the whitelist, that admits `src` to
/// the NodePort.
fn extra_allow(src: Ipv4Addr) -> String {
    format!(
        r#"apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: allow-one-more
spec:
  order: 5
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: [{src}/32]
      destination:
        ports: [{port}]
"#,
        port = ports::NODEPORT
    )
}

/// Whether one round of quick probes sees exactly `allowed` reach the
/// NodePort's server and `blocked` dropped. The short timeouts make a round
/// cheap; a handshake over the lab's veth takes well under a millisecond.
fn traffic_is(lab: &Lab, allowed: &[Ipv4Addr], blocked: &[Ipv4Addr]) -> bool {
    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    std::thread::scope(|scope| {
        let allowed: Vec<_> = allowed
            .iter()
            .map(|&src| {
                scope.spawn(move || {
                    lab.connect(src.into(), nodeport, Duration::from_millis(500))
                        .is_ok_and(|reply| reply == replies::NODEPORT_TARGET)
                })
            })
            .collect();
        let blocked: Vec<_> = blocked
            .iter()
            .map(|&src| {
                scope.spawn(move || {
                    lab.connect(src.into(), nodeport, Duration::from_millis(300))
                        .is_err_and(|e| e.is_timeout())
                })
            })
            .collect();
        allowed
            .into_iter()
            .chain(blocked)
            .map(|handle| handle.join().unwrap_or(false))
            .collect::<Vec<bool>>()
            .into_iter()
            .all(|ok| ok)
    })
}

/// The standard probes for "exactly `allowed` reach NodePort 30008".
fn nodeport_probes(allowed: &[Ipv4Addr], blocked: &[Ipv4Addr]) -> Vec<support::Probe> {
    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    allowed
        .iter()
        .map(|&src| open(src, nodeport, replies::NODEPORT_TARGET))
        .chain(blocked.iter().map(|&src| dropped(src, nodeport)))
        .collect()
}

/// Checks now (with the harness's standard timeouts) that exactly `allowed`
/// reach the NodePort and `blocked` are dropped.
#[track_caller]
fn assert_traffic(lab: &Lab, allowed: &[Ipv4Addr], blocked: &[Ipv4Addr], context: &str) {
    check_reachability(lab, context, &nodeport_probes(allowed, blocked));
}

/// Polls until exactly `allowed` reach the NodePort and `blocked` are
/// dropped, failing (with the daemon's log) unless a round of probes that
/// started within `within` of `since` saw it; then confirms with the
/// standard timeouts. Returns when the successful round started, relative
/// to `since`.
#[track_caller]
fn expect_traffic_within(
    lab: &Lab,
    daemon: &Daemon,
    since: Instant,
    allowed: &[Ipv4Addr],
    blocked: &[Ipv4Addr],
    context: &str,
) -> Duration {
    let seen = loop {
        let round = Instant::now();
        if round - since > RELOAD_WITHIN {
            break None;
        }
        if traffic_is(lab, allowed, blocked) {
            break Some(round - since);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let Some(elapsed) = seen else {
        panic!(
            "{context} ({} backend): not effective within {RELOAD_WITHIN:?} (allowed \
             {allowed:?}, blocked {blocked:?})\n--- daemon log ---\n{}",
            lab.backend(),
            daemon.log()
        );
    };
    assert_traffic(lab, allowed, blocked, context);
    elapsed
}

/// A guard whose config has the fast debounce and `resync`, plus `extra`.
fn daemon_guard<'lab>(lab: &'lab Lab, resync: &str, extra: &str) -> Guard<'lab> {
    Guard::with_config(lab, &daemon_config(resync, extra))
}

/// Writes `text` to `path` in place (open with O_TRUNC, write), as `echo >`
/// and most programs do.
#[track_caller]
fn write_in_place(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

#[track_caller]
fn rename(from: &Path, to: &Path) {
    std::fs::rename(from, to)
        .unwrap_or_else(|e| panic!("cannot rename {} to {}: {e}", from.display(), to.display()));
}

#[track_caller]
fn remove(path: &Path) {
    std::fs::remove_file(path).unwrap_or_else(|e| panic!("cannot remove {}: {e}", path.display()));
}

#[track_caller]
fn symlink(target: &str, link: &Path) {
    std::os::unix::fs::symlink(target, link)
        .unwrap_or_else(|e| panic!("cannot link {} -> {target}: {e}", link.display()));
}

/// `/metrics` and `/healthz` of the daemon, on the node's loopback.
const METRICS_ADDR: &str = "127.0.0.1:9808";

fn metrics_addr() -> std::net::SocketAddr {
    METRICS_ADDR.parse().expect("a socket address")
}

/// Fetches `/metrics`, which must answer 200 with valid Prometheus text.
#[track_caller]
fn scrape(lab: &Lab) -> support::daemon::Samples {
    let response = http_get_ok(lab.node(), metrics_addr(), "/metrics");
    assert_eq!(response.status, 200, "{response:?}");
    assert!(
        response
            .head
            .to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{}",
        response.head
    );
    parse_prometheus(&response.body).unwrap_or_else(|e| {
        panic!(
            "/metrics is not valid Prometheus text: {e}\n{}",
            response.body
        )
    })
}

/// One sample's value (0 when absent).
fn sample(samples: &support::daemon::Samples, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

/// Polls `/metrics` until `series` exceeds `above`; returns its value.
#[track_caller]
fn wait_metric_above(lab: &Lab, daemon: &Daemon, series: &str, above: f64) -> f64 {
    let mut value = above;
    let moved = wait_until(RELOAD_WITHIN, POLL, || {
        value = sample(&scrape(lab), series);
        value > above
    });
    assert!(
        moved,
        "{series} stayed at {value} (expected > {above})\n--- daemon log ---\n{}",
        daemon.log()
    );
    value
}

/// Generates `mod $name { #[test] fn $variant() }` for a test that runs on
/// one backend only, so that it is named like the `backend_tests!` ones.
macro_rules! one_backend_test {
    ($name:ident, $backend:ident, $variant:ident) => {
        mod $name {
            #[test]
            fn $variant() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::$backend);
            }
        }
    };
}

// ---------------------------------------------------------------------------
// 1. Every way the directory changes is picked up within 3 s.
// ---------------------------------------------------------------------------

/// (legacy) Rewriting the policy file in place (truncate and write, as
/// `cat > policies.yaml` does) is effective within 3 s, in both directions.
fn in_place_write_is_applied_within_3s(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");

    let t = Instant::now();
    write_in_place(&file, &whitelist(&[SRC_B]));
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_B],
        &[SRC_A],
        "after an in-place write",
    );

    let t = Instant::now();
    write_in_place(&file, &whitelist(&[SRC_A]));
    expect_traffic_within(&lab, &daemon, t, &[SRC_A], &[SRC_B], "after a second write");
}
one_backend_test!(in_place_write_is_applied_within_3s, Legacy, legacy);

/// (legacy) A policy directory given as a relative path (`--policies policies`, run from its
/// parent) is watched like an absolute one: a change is effective within 3 s.
fn relative_policy_directory_is_watched(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start_relative(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");

    let t = Instant::now();
    write_in_place(&file, &whitelist(&[SRC_B]));
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_B],
        &[SRC_A],
        "after a write into a directory given as a relative path",
    );
}
one_backend_test!(relative_policy_directory_is_watched, Legacy, legacy);

/// (nft) An editor's save is effective within 3 s: first the "write a temp
/// file, rename it over the original" save (with vim's `.swp` swap file and
/// its `4913` probe file created and deleted around it), then vim's default
/// backup dance (rename the original to `policies.yaml~`, write a new
/// `policies.yaml`, delete the `~`), during which the file is briefly
/// missing.
fn editor_saves_are_applied_within_3s(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let dir = guard.policies_dir();
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");

    // Write to a temporary file, rename over the original.
    let swap = dir.join(".policies.yaml.swp");
    write_in_place(&swap, "b0VIM 9.0 swap file\n");
    let t = Instant::now();
    write_in_place(&dir.join("4913"), "");
    remove(&dir.join("4913"));
    let temporary = dir.join("policies.yaml.tmp");
    write_in_place(&temporary, &whitelist(&[SRC_B]));
    rename(&temporary, &file);
    remove(&swap);
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_B],
        &[SRC_A],
        "after write-temp-and-rename",
    );

    // vim with `backupcopy=no`: original renamed to the backup name, a new
    // file written, the backup deleted.
    let t = Instant::now();
    write_in_place(&swap, "b0VIM 9.0 swap file\n");
    write_in_place(&dir.join("4913"), "");
    remove(&dir.join("4913"));
    let backup = dir.join("policies.yaml~");
    rename(&file, &backup);
    write_in_place(&file, &whitelist(&[SRC_A]));
    remove(&backup);
    remove(&swap);
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_A],
        &[SRC_B],
        "after vim's backup save",
    );
}
one_backend_test!(editor_saves_are_applied_within_3s, Nft, nft);

/// (legacy) confd's way of replacing a file — write the hidden staging
/// file `.policies.yaml<random>` in the directory, then rename it to
/// `policies.yaml` — is effective within 3 s.
fn confd_staging_file_renamed_into_place_is_applied_within_3s(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");

    let staging = guard.policies_dir().join(".policies.yaml123456");
    let t = Instant::now();
    write_in_place(&staging, &whitelist(&[SRC_B]));
    rename(&staging, &file);
    expect_traffic_within(&lab, &daemon, t, &[SRC_B], &[SRC_A], "after confd's rename");
}
one_backend_test!(
    confd_staging_file_renamed_into_place_is_applied_within_3s,
    Legacy,
    legacy
);

/// Writes a kubelet-style ConfigMap payload directory `..<stamp>` holding
/// `policies.yaml` with `text`.
#[track_caller]
fn configmap_payload(dir: &Path, stamp: &str, text: &str) {
    let payload = dir.join(format!("..{stamp}"));
    std::fs::create_dir(&payload)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", payload.display()));
    write_in_place(&payload.join("policies.yaml"), text);
}

/// Performs kubelet's atomic ConfigMap update: a new payload directory, a
/// `..data_tmp` symlink to it renamed over `..data`, the old payload
/// removed.
#[track_caller]
fn configmap_update(dir: &Path, old_stamp: &str, new_stamp: &str, text: &str) {
    configmap_payload(dir, new_stamp, text);
    let data_tmp = dir.join("..data_tmp");
    symlink(&format!("..{new_stamp}"), &data_tmp);
    rename(&data_tmp, &dir.join("..data"));
    std::fs::remove_dir_all(dir.join(format!("..{old_stamp}")))
        .unwrap_or_else(|e| panic!("cannot remove the old payload: {e}"));
}

/// (nft) A Kubernetes ConfigMap mount (`..<timestamp>/policies.yaml`,
/// `..data -> ..<timestamp>`, visible `policies.yaml -> ..data/policies.yaml`)
/// is read through its symlinks, and kubelet's atomic update (new payload
/// directory, `..data_tmp` renamed over `..data`, old payload removed) is
/// effective within 3 s, twice in a row.
fn configmap_update_is_applied_within_3s(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    let dir = guard.policies_dir();
    let first = "2026_11_29_20_00_00.000000001";
    let second = "2026_11_29_20_05_00.000000002";
    let third = "2026_11_29_20_10_00.000000003";
    configmap_payload(&dir, first, &whitelist(&[SRC_A]));
    symlink(&format!("..{first}"), &dir.join("..data"));
    symlink("..data/policies.yaml", &dir.join("policies.yaml"));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");

    let t = Instant::now();
    configmap_update(&dir, first, second, &whitelist(&[SRC_B]));
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_B],
        &[SRC_A],
        "after a ConfigMap update",
    );

    let t = Instant::now();
    configmap_update(&dir, second, third, &whitelist(&[SRC_A]));
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_A],
        &[SRC_B],
        "after a second update",
    );
}
one_backend_test!(configmap_update_is_applied_within_3s, Nft, nft);

/// (legacy) Deleting one of two policy files is effective within 3 s: the
/// remaining file's policies apply (the source that only the deleted file
/// admitted is dropped again).
fn deleting_a_file_applies_the_remaining_files_within_3s(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    guard.write_policy("a-whitelist.yaml", &whitelist(&[SRC_A]));
    guard.write_policy("b-extra.yaml", &extra_allow(SRC_B));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A, SRC_B], &[addr::CLIENT_V4[3]], "both files");

    let t = Instant::now();
    guard.remove_policy("b-extra.yaml");
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_A],
        &[SRC_B],
        "after deleting a file",
    );
}
one_backend_test!(
    deleting_a_file_applies_the_remaining_files_within_3s,
    Legacy,
    legacy
);

/// (nft) A policy file written in two pieces with a pause between them
/// (`scp`, a shell redirect): the first piece is valid YAML with the Allow
/// rule and without the Deny that follows. The daemon waits for the writer to
/// close the file: while it is open, the denied source stays denied (applying
/// the first piece would open the port to everyone); once it is closed, the
/// whole file is effective.
///
/// Resyncs come every second meanwhile: they too keep the last rules while
/// the file is open (a resync reads the files, and would read the first
/// piece).
fn a_file_still_being_written_is_not_applied_half_way(backend: Backend) {
    use std::io::Write as _;
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, "1s", "");
    guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let whole = whitelist(&[SRC_B]);
    let deny = whole.find("  - action: Deny").expect("a Deny rule");
    let (first, rest) = whole.split_at(deny);
    let path = guard.policies_dir().join("policies.yaml");
    let mut file = std::fs::File::create(&path).expect("open for writing");
    file.write_all(first.as_bytes()).expect("write");
    file.flush().expect("flush");
    // Well past the debounce, and two resyncs: a reload would have happened by now.
    std::thread::sleep(Duration::from_millis(2500));
    assert_traffic(
        &lab,
        &[SRC_A],
        &[SRC_B],
        "while the file is half written (the last rules stay)",
    );
    let t = Instant::now();
    file.write_all(rest.as_bytes()).expect("write");
    drop(file);
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_B],
        &[SRC_A],
        "after the writer closed the file",
    );
}
one_backend_test!(a_file_still_being_written_is_not_applied_half_way, Nft, nft);

/// (nft) Removing the whole policy directory keeps the last rules (and the
/// daemon says why in its log) instead of dropping the protection; once
/// the directory is recreated with new content, that content is effective
/// within 3 s. So is a prepared directory renamed into place (the old one
/// renamed away), and a later write into that new directory.
fn removed_directory_keeps_rules_and_recreated_directory_applies(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let applied = guard.our_rules_and_members();

    let dir = guard.policies_dir();
    let mark = daemon.mark();
    std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("cannot remove the directory: {e}"));
    // The daemon notices (and keeps the rules), either as an empty set or
    // as an unreadable directory; both must be said in the log.
    let said = wait_until(RELOAD_WITHIN, POLL, || {
        let log = daemon.log_since(mark);
        log.contains("ERROR") || log.contains("WARN")
    });
    assert!(
        said,
        "the daemon did not say anything about the missing directory\n{}",
        daemon.log()
    );
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "while the directory is missing");
    assert_eq!(
        guard.our_rules_and_members(),
        applied,
        "our rules while the directory is missing"
    );

    let t = Instant::now();
    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot recreate the directory: {e}"));
    write_in_place(&dir.join("policies.yaml"), &whitelist(&[SRC_B]));
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_B],
        &[SRC_A],
        "after recreating the directory",
    );

    // Deployment tools swap a prepared directory in: the new content is
    // effective within 3 s, and the moved-away directory is no longer read.
    let prepared = guard.path("policies.new");
    let old = guard.path("policies.old");
    std::fs::create_dir(&prepared).unwrap_or_else(|e| panic!("cannot create {prepared:?}: {e}"));
    write_in_place(&prepared.join("policies.yaml"), &whitelist(&[SRC_A]));
    let t = Instant::now();
    rename(&dir, &old);
    rename(&prepared, &dir);
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_A],
        &[SRC_B],
        "after swapping in a prepared directory",
    );
    let t = Instant::now();
    write_in_place(&dir.join("policies.yaml"), &whitelist(&[SRC_B]));
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_B],
        &[SRC_A],
        "after writing into the swapped-in directory",
    );

    // A file written a moment after the directory is created again, while the daemon waits
    // out the debounce of the creation (the work it does ahead then read the directory empty,
    // before it watched it, and the file was never seen until the resync).
    std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("cannot remove the directory: {e}"));
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot recreate the directory: {e}"));
    std::thread::sleep(Duration::from_millis(100));
    write_in_place(&dir.join("policies.yaml"), &whitelist(&[SRC_A]));
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_A],
        &[SRC_B],
        "after a file written 100 ms after the directory came back",
    );
}
one_backend_test!(
    removed_directory_keeps_rules_and_recreated_directory_applies,
    Nft,
    nft
);

/// (legacy) A burst of about 16 000 inotify events (2000 rewrites of the
/// policy file alternating between two versions, each with an editor probe
/// file created and deleted: open, modify, close, create, delete… — about
/// the default inotify queue limit of 16 384) ends with the final content
/// effective within 3 s of the burst, and the daemon still running:
/// whatever the watcher coalesced or dropped, the last state wins.
fn burst_of_file_events_ends_with_the_final_content(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let mut daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");

    let versions = [whitelist(&[SRC_A]), whitelist(&[SRC_B])];
    let probe = guard.policies_dir().join("4913");
    for i in 0..2000 {
        write_in_place(&file, &versions[i % 2]);
        write_in_place(&probe, "");
        remove(&probe);
    }
    let t = Instant::now();
    expect_traffic_within(&lab, &daemon, t, &[SRC_B], &[SRC_A], "after the burst");
    daemon.assert_running("after the burst");
}
one_backend_test!(
    burst_of_file_events_ends_with_the_final_content,
    Legacy,
    legacy
);

// ---------------------------------------------------------------------------
// 2. Reloads never open a gap.
// ---------------------------------------------------------------------------

/// What the probers saw.
#[derive(Debug, Default)]
struct ProbeLog {
    attempts: usize,
    wrong: Vec<String>,
}

/// Connects from `src` to the NodePort every 50 ms until `stop`, recording
/// every outcome that is not the expected one (`expect_open`: the server
/// answers; otherwise: the SYN is dropped). An allowed probe's timeout is
/// below the first SYN retransmission (1 s), so one dropped SYN counts as a
/// failure.
fn probe_until(
    lab: &Lab,
    stop: &AtomicBool,
    epoch: Instant,
    src: Ipv4Addr,
    expect_open: bool,
    probes: &Mutex<ProbeLog>,
) {
    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    let timeout = Duration::from_millis(if expect_open { 900 } else { 300 });
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let result = lab.connect(src.into(), nodeport, timeout);
        let ok = match &result {
            Ok(reply) => expect_open && reply == replies::NODEPORT_TARGET,
            Err(e) => !expect_open && e.is_timeout(),
        };
        let mut log = probes.lock().expect("probe log");
        log.attempts += 1;
        if !ok {
            log.wrong
                .push(format!("{src} at +{:?}: {result:?}", started - epoch));
        }
        drop(log);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// While the policy file is rewritten 30 times, alternating between the
/// whitelist and the same whitelist plus an unrelated rule that needs its
/// own ipsets (so every rewrite really changes chains and sets), a prober
/// connecting every 50 ms from the allowed source never fails and one from
/// a blocked source never gets through: each reload is atomic.
fn rewrites_never_open_a_gap(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");

    let stop = AtomicBool::new(false);
    let epoch = Instant::now();
    let allowed_log = Mutex::new(ProbeLog::default());
    let blocked_log = Mutex::new(ProbeLog::default());
    let mut reloads = 0;
    std::thread::scope(|scope| {
        scope.spawn(|| probe_until(&lab, &stop, epoch, SRC_A, true, &allowed_log));
        // A blocked probe waits 300 ms for its dropped SYN: several
        // staggered probers start one every ~50 ms between them.
        for _ in 0..6 {
            scope.spawn(|| probe_until(&lab, &stop, epoch, SRC_B, false, &blocked_log));
            std::thread::sleep(Duration::from_millis(50));
        }

        for i in 0..30 {
            let mark = daemon.mark();
            let text = if i % 2 == 0 {
                whitelist_with_office(&[SRC_A])
            } else {
                whitelist(&[SRC_A])
            };
            write_in_place(&file, &text);
            if daemon
                .wait_for_log(mark, "INFO applied", RELOAD_WITHIN)
                .is_some()
            {
                reloads += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let allowed = allowed_log.into_inner().expect("probe log");
    let blocked = blocked_log.into_inner().expect("probe log");
    let log = daemon.log();
    assert_eq!(
        reloads, 30,
        "every rewrite must be applied (within {RELOAD_WITHIN:?})\n--- daemon log ---\n{log}"
    );
    assert!(
        allowed.attempts >= 30 && blocked.attempts >= 30,
        "too few probes: {allowed:?} {blocked:?}"
    );
    assert!(
        allowed.wrong.is_empty() && blocked.wrong.is_empty(),
        "gaps during reloads: allowed source failed {} of {} times, blocked source got \
         through {} of {} times:\n  {}\n--- daemon log ---\n{log}",
        allowed.wrong.len(),
        allowed.attempts,
        blocked.wrong.len(),
        blocked.attempts,
        allowed
            .wrong
            .iter()
            .chain(&blocked.wrong)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    assert!(!log.contains("failed"), "{log}");
}
backend_tests!(rewrites_never_open_a_gap);

// ---------------------------------------------------------------------------
// 3. Invalid files.
// ---------------------------------------------------------------------------

/// The daemon section of `status --json`.
#[track_caller]
fn daemon_status(guard: &Guard<'_>) -> serde_json::Value {
    guard.status_json()["daemon"].clone()
}

/// Whether `status --json` says the policy files are invalid.
#[track_caller]
fn status_says_invalid(guard: &Guard<'_>) -> bool {
    let daemon = daemon_status(guard);
    let summary = daemon["summary"].as_str().unwrap_or_default().to_string();
    let errors = daemon["lastErrors"].as_array().map_or(0, Vec::len);
    summary.contains("invalid") || errors > 0
}

/// An invalid policy file (a bad CIDR) leaves the traffic as it was and
/// the daemon running; the daemon logs the error as `path:line:column:
/// error: …`, `status` (text and `--json`) shows the invalid state with the
/// error, and fixing the file is effective within 3 s and clears the
/// invalid state. Reverting a broken file to exactly the last good content
/// (the operator's "undo") clears the invalid state too, within 3 s.
fn invalid_file_keeps_traffic_and_the_fix_applies(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let mut daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let applied = guard.our_rules_and_members();

    let broken = whitelist(&[SRC_B]).replace("198.51.100.11/32", "198.51.100.300/32");
    let mark = daemon.mark();
    write_in_place(&file, &broken);
    let prefix = format!("{}:", file.display());
    let line = daemon.expect_log(mark, &prefix, RELOAD_WITHIN);
    let position = line
        .split_once(&prefix)
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let mut parts = position.splitn(3, ':');
    let (line_no, column, rest) = (parts.next(), parts.next(), parts.next());
    assert!(
        line_no.is_some_and(|n| n.parse::<u32>().is_ok())
            && column.is_some_and(|n| n.parse::<u32>().is_ok())
            && rest.is_some_and(|r| r.starts_with(" error: ")),
        "expected `{prefix}LINE:COLUMN: error: …`, got: {line}"
    );
    daemon.assert_running("after an invalid file");
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "with the invalid file");
    assert_eq!(
        guard.our_rules_and_members(),
        applied,
        "rules with the invalid file"
    );

    assert!(
        wait_until(RELOAD_WITHIN, POLL, || status_says_invalid(&guard)),
        "status --json does not show the invalid state: {}",
        daemon_status(&guard)
    );
    let json = daemon_status(&guard);
    let errors = json["lastErrors"].to_string();
    assert!(
        errors.contains(&prefix) && errors.contains("error"),
        "status --json lastErrors: {json}"
    );
    let text = guard.run_expect(&["status"], 0).stdout;
    assert!(
        text.contains("invalid") && text.contains(&prefix),
        "status does not show the invalid state:\n{text}"
    );

    let t = Instant::now();
    write_in_place(&file, &whitelist(&[SRC_B]));
    expect_traffic_within(&lab, &daemon, t, &[SRC_B], &[SRC_A], "after the fix");
    assert!(
        wait_until(RELOAD_WITHIN, POLL, || !status_says_invalid(&guard)),
        "status still shows the invalid state after the fix: {}",
        daemon_status(&guard)
    );

    // Break it again, then undo the edit: the content is exactly what is
    // applied, so nothing needs to change in the kernel, but the status
    // must stop saying that the files are invalid.
    let mark = daemon.mark();
    write_in_place(&file, &broken);
    daemon.expect_log(mark, &prefix, RELOAD_WITHIN);
    assert!(
        wait_until(RELOAD_WITHIN, POLL, || status_says_invalid(&guard)),
        "status --json does not show the invalid state: {}",
        daemon_status(&guard)
    );
    write_in_place(&file, &whitelist(&[SRC_B]));
    assert!(
        wait_until(RELOAD_WITHIN, POLL, || !status_says_invalid(&guard)),
        "after reverting the broken file to the applied content, status --json still says \
         the files are invalid: {}\n--- daemon log ---\n{}",
        daemon_status(&guard),
        daemon.log()
    );
    assert_traffic(&lab, &[SRC_B], &[SRC_A], "after the undo");
}
backend_tests!(invalid_file_keeps_traffic_and_the_fix_applies);

// ---------------------------------------------------------------------------
// 4. Drift repair.
// ---------------------------------------------------------------------------

/// With `resyncInterval: 1s`, each of these changes by another program is
/// repaired within 2.5 s, exactly (our rules and set members as before),
/// with a `drift repaired` warning in the log: our jump deleted from mangle
/// PREROUTING (IPv4 and IPv6), our policy chain flushed, a member deleted
/// from the host-address ipset, that ipset replaced by an empty one
/// (`ipset swap` with a fresh set: destroy-and-recreate, which `ipset
/// destroy` itself refuses while our rules use the set), and a foreign rule
/// inserted at position 1 of mangle PREROUTING (our jump goes back to
/// position 1, the foreign rule stays, second). While the policy files are
/// invalid, drift is still repaired, with the last good rules.
fn drift_is_repaired_within_the_resync_interval(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, "1s", "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let snapshot = guard.snapshot();
    let applied = guard.our_rules_and_members();
    let chain = snapshot
        .chains(Family::V4, "mangle", "npg-pi-")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no policy chain in\n{snapshot:?}"));
    for family in Family::ALL {
        let first = snapshot.rules(family, "mangle", "PREROUTING");
        assert!(
            first
                .first()
                .is_some_and(|r| r.contains("-j npg-PREROUTING")),
            "{family}: our jump is not first: {first:?}"
        );
    }
    let host_set = "npg4-this-host";
    let node = addr::NODE_V4.to_string();
    assert!(
        snapshot.set_members(host_set).contains(&node),
        "{:?}",
        snapshot.set_members(host_set)
    );

    let expect_repair = |what: &str, drift: &dyn Fn()| {
        let mark = daemon.mark();
        drift();
        let t = Instant::now();
        let repaired = wait_until(REPAIR_WITHIN + Duration::from_secs(2), POLL, || {
            guard.our_rules_and_members() == applied
        });
        let elapsed = t.elapsed();
        assert!(
            repaired && elapsed <= REPAIR_WITHIN,
            "{what}: not repaired within {REPAIR_WITHIN:?} (repaired: {repaired}, after \
             {elapsed:?}); kernel now:\n{}\n--- daemon log ---\n{}",
            guard.our_rules_and_members(),
            daemon.log_since(mark)
        );
        let line = daemon.expect_log(mark, "drift repaired", Duration::from_secs(2));
        assert!(line.contains("WARN"), "{what}: {line}");
    };

    expect_repair("our IPv4 jump deleted", &|| {
        iptables(&lab, Family::V4, "-t mangle -D PREROUTING 1");
    });
    expect_repair("our IPv6 jump deleted", &|| {
        iptables(&lab, Family::V6, "-t mangle -D PREROUTING 1");
    });
    expect_repair("our policy chain flushed", &|| {
        iptables(&lab, Family::V4, &format!("-t mangle -F {chain}"));
    });
    expect_repair("a set member deleted", &|| {
        lab.node().exec_ok("ipset", &["del", host_set, &node]);
    });
    expect_repair("the set replaced by an empty one", &|| {
        let node = lab.node();
        node.exec_ok(
            "ipset",
            &[
                "create",
                "drift-empty",
                "hash:ip",
                "family",
                "inet",
                "maxelem",
                "1048576",
            ],
        );
        node.exec_ok("ipset", &["swap", "drift-empty", host_set]);
        node.exec_ok("ipset", &["destroy", "drift-empty"]);
    });

    let mark = daemon.mark();
    iptables(
        &lab,
        Family::V4,
        "-t mangle -I PREROUTING 1 -m comment --comment operator-mark -j MARK --set-xmark 0x1/0x1",
    );
    let t = Instant::now();
    let mut prerouting = Vec::new();
    let moved = wait_until(REPAIR_WITHIN + Duration::from_secs(2), POLL, || {
        prerouting = guard.snapshot().rules(Family::V4, "mangle", "PREROUTING");
        prerouting.len() == 2
            && prerouting[0].contains("-j npg-PREROUTING")
            && prerouting[1].contains("operator-mark")
    });
    let elapsed = t.elapsed();
    assert!(
        moved && elapsed <= REPAIR_WITHIN,
        "our jump is not back at position 1 within {REPAIR_WITHIN:?} (after {elapsed:?}): \
         {prerouting:#?}\n--- daemon log ---\n{}",
        daemon.log_since(mark)
    );
    daemon.expect_log(mark, "drift repaired", Duration::from_secs(2));
    assert_eq!(guard.our_rules_and_members(), applied);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "after the repairs");

    // While the policy files are invalid, drift is repaired with the last
    // good rules.
    let mark = daemon.mark();
    write_in_place(&file, "kind: [broken\n");
    daemon.expect_log(mark, "invalid", RELOAD_WITHIN);
    expect_repair(
        "our policy chain flushed while the files are invalid",
        &|| {
            iptables(&lab, Family::V4, &format!("-t mangle -F {chain}"));
        },
    );
    assert_traffic(
        &lab,
        &[SRC_A],
        &[SRC_B],
        "repaired while the files are invalid",
    );
}
backend_tests!(drift_is_repaired_within_the_resync_interval, iptables_only);

/// SIGHUP re-checks the kernel even when it cannot use the files: with the policy files invalid
/// (and then the directory emptied) and no resync due for an hour, a flushed policy chain is
/// back right after SIGHUP (or sooner, by the drift watch), and the whitelist holds again.
fn sighup_repairs_drift_while_the_files_cannot_be_used(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, "1h", "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let applied = guard.our_rules_and_members();
    let chain = guard
        .snapshot()
        .chains(Family::V4, "mangle", "npg-pi-")
        .into_iter()
        .next()
        .expect("a policy chain");
    let repaired_by_sighup = |what: &str| {
        // The drift watch may put it back before the signal arrives (it also uses the last
        // good rules); either way it is back right after SIGHUP.
        iptables(&lab, Family::V4, &format!("-t mangle -F {chain}"));
        let mark = daemon.mark();
        daemon.signal(Signal::SIGHUP);
        let repaired = wait_until(RELOAD_WITHIN, POLL, || {
            guard.our_rules_and_members() == applied
        });
        assert!(
            repaired,
            "{what}: not repaired after SIGHUP; kernel now:\n{}\n--- daemon log ---\n{}",
            guard.our_rules_and_members(),
            daemon.log_since(mark)
        );
        assert_traffic(&lab, &[SRC_A], &[SRC_B], what);
    };

    let mark = daemon.mark();
    write_in_place(&file, "kind: [broken\n");
    daemon.expect_log(mark, "invalid", RELOAD_WITHIN);
    repaired_by_sighup("invalid policy files");

    let mark = daemon.mark();
    guard.remove_policy("policies.yaml");
    daemon.expect_log(mark, "keeping the rules in place", RELOAD_WITHIN);
    repaired_by_sighup("an empty policy directory");
}
backend_tests!(
    sighup_repairs_drift_while_the_files_cannot_be_used,
    iptables_only
);

// ---------------------------------------------------------------------------
// 5. The empty-set guard.
// ---------------------------------------------------------------------------

/// Deleting every policy file keeps the rules in place (through resyncs,
/// too) and the daemon logs why, naming `allowEmpty` — once, and at most
/// again at each resync, not in a flood; `status` says so.
/// A new file afterwards is effective within 3 s. A daemon restarted on an
/// empty directory keeps the rules it finds in the kernel, too.
fn emptied_directory_keeps_the_rules(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, "1s", "");
    guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let mut daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let applied = guard.our_rules_and_members();

    let mark = daemon.mark();
    let removed = Instant::now();
    guard.remove_policy("policies.yaml");
    let line = daemon.expect_log(mark, "allowEmpty", RELOAD_WITHIN);
    assert!(line.contains("ERROR") || line.contains("WARN"), "{line}");
    // Hold the empty directory over more than one resync.
    std::thread::sleep(Duration::from_millis(1500));
    // Said once, and at most again at each resync (every second): not a
    // flood of identical errors.
    let refusals = daemon.count_since(mark, "allowEmpty");
    let window = removed.elapsed();
    let refusals_allowed = 2 + window.as_secs() as usize;
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "with no policy file");
    assert_eq!(
        guard.our_rules_and_members(),
        applied,
        "rules with no policy file"
    );
    let status = daemon_status(&guard);
    assert!(
        status["summary"]
            .as_str()
            .is_some_and(|s| s.contains("empty")),
        "status --json: {status}"
    );

    let t = Instant::now();
    guard.write_policy("policies.yaml", &whitelist(&[SRC_B]));
    expect_traffic_within(&lab, &daemon, t, &[SRC_B], &[SRC_A], "after a new file");

    // A daemon (re)started on an empty directory while the kernel holds our
    // rules (a ConfigMap mounted late after a reboot) keeps them too.
    let applied = guard.our_rules_and_members();
    daemon.signal(Signal::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(1)).is_some());
    guard.remove_policy("policies.yaml");
    let restarted = Daemon::start(&guard);
    restarted.expect_log(0, "allowEmpty", RELOAD_WITHIN);
    assert_traffic(
        &lab,
        &[SRC_B],
        &[SRC_A],
        "after a restart on an empty directory",
    );
    assert_eq!(
        guard.our_rules_and_members(),
        applied,
        "rules after a restart on an empty directory"
    );
    assert!(
        refusals <= refusals_allowed,
        "the refusal of the empty directory was logged {refusals} times in {window:?} \
         (resync every 1 s; at most {refusals_allowed} expected)"
    );
}
backend_tests!(emptied_directory_keeps_the_rules);

/// With `allowEmpty: true`, deleting every policy file removes the rules
/// within 3 s: the NodePort is open to everyone and nothing of ours (chain,
/// jump or set) is left in the kernel.
fn emptied_directory_with_allow_empty_removes_the_rules(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "allowEmpty: true\n");
    guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");

    let t = Instant::now();
    guard.remove_policy("policies.yaml");
    expect_traffic_within(
        &lab,
        &daemon,
        t,
        &[SRC_A, SRC_B],
        &[],
        "after deleting every file",
    );
    // The sets go last, after every table's rules: the port opens a moment before.
    support::wait_until(support::SETTLE_TIMEOUT, support::POLL, || {
        guard.snapshot().has_nothing_of_ours()
    });
    let snapshot = guard.snapshot();
    assert!(
        snapshot.has_nothing_of_ours(),
        "left behind:\n{:?}",
        snapshot.ours()
    );
}
backend_tests!(emptied_directory_with_allow_empty_removes_the_rules);

// ---------------------------------------------------------------------------
// 6. Signals and the lock.
// ---------------------------------------------------------------------------

/// SIGTERM stops the daemon with exit status 0 within 1 s and leaves the
/// rules in place (traffic and kernel state unchanged); so does SIGINT for
/// a daemon started again on the same state directory, which finds the
/// rules already right and changes nothing.
fn sigterm_and_sigint_stop_at_once_leaving_the_rules(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let applied;
    {
        let mut daemon = Daemon::start(&guard);
        assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
        applied = guard.our_rules_and_members();
        let t = Instant::now();
        daemon.signal(Signal::SIGTERM);
        let status = daemon.wait_exit(Duration::from_secs(1));
        assert!(
            status.is_some_and(|s| s.code() == Some(0)),
            "SIGTERM: expected exit status 0 within 1 s, got {status:?} after {:?}\n{}",
            t.elapsed(),
            daemon.log()
        );
        assert!(
            daemon.log().contains("the rules stay in place"),
            "{}",
            daemon.log()
        );
    }
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "after SIGTERM");
    assert_eq!(
        guard.our_rules_and_members(),
        applied,
        "rules after SIGTERM"
    );

    let mut daemon = Daemon::spawn(&guard, "second-start");
    daemon.wait_ready(support::daemon::READY_TIMEOUT);
    let log = daemon.log();
    assert!(
        log.contains("no changes needed") && !log.contains("INFO applied"),
        "a restart over the same rules must change nothing:\n{log}"
    );
    let t = Instant::now();
    daemon.signal(Signal::SIGINT);
    let status = daemon.wait_exit(Duration::from_secs(1));
    assert!(
        status.is_some_and(|s| s.code() == Some(0)),
        "SIGINT: expected exit status 0 within 1 s, got {status:?} after {:?}\n{}",
        t.elapsed(),
        daemon.log()
    );
    assert_eq!(guard.our_rules_and_members(), applied, "rules after SIGINT");
}
backend_tests!(sigterm_and_sigint_stop_at_once_leaving_the_rules);

/// (legacy) SIGHUP reloads: the policy file is a hard link to a file
/// outside the watched directory, so a write through that other name is
/// invisible to the watcher (inotify reports it to the directory the file
/// was opened in; and the resync interval is long); the change is not
/// applied until SIGHUP, after which the daemon logs the reload and the
/// change is effective within 3 s.
fn sighup_reloads(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    let outside = guard.path("outside");
    std::fs::create_dir(&outside).unwrap_or_else(|e| panic!("cannot create {outside:?}: {e}"));
    let target = outside.join("policies.yaml");
    write_in_place(&target, &whitelist(&[SRC_A]));
    std::fs::hard_link(&target, guard.policies_dir().join("policies.yaml"))
        .unwrap_or_else(|e| panic!("cannot link {target:?}: {e}"));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");

    let mark = daemon.mark();
    write_in_place(&target, &whitelist(&[SRC_B]));
    // Not seen by the watcher: the old rules stay (checked over ~1 s).
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "before SIGHUP");
    assert!(
        !daemon.log_since(mark).contains("INFO applied"),
        "{}",
        daemon.log_since(mark)
    );

    let t = Instant::now();
    daemon.signal(Signal::SIGHUP);
    daemon.expect_log(mark, "SIGHUP", RELOAD_WITHIN);
    expect_traffic_within(&lab, &daemon, t, &[SRC_B], &[SRC_A], "after SIGHUP");
    daemon.expect_log(mark, "INFO applied event=Reload", RELOAD_WITHIN);
}
one_backend_test!(sighup_reloads, Legacy, legacy);

/// (legacy) A second `run` with the same state directory refuses to start:
/// it exits non-zero at once, saying another nodeport-guard (with its pid)
/// holds the lock; the first daemon keeps running and keeps applying
/// changes.
fn second_daemon_on_the_same_state_dir_refuses_to_start(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let mut first = Daemon::start(&guard);

    let mut second = Daemon::spawn(&guard, "second");
    let status = second.wait_exit(Duration::from_secs(5));
    let log = second.log();
    assert!(
        status.is_some_and(|s| !s.success()),
        "the second daemon must exit with an error, got {status:?}\n{log}"
    );
    assert!(
        log.contains("another nodeport-guard") && log.contains(&first.pid().to_string()),
        "the refusal must name the other nodeport-guard and its pid:\n{log}"
    );
    assert!(!log.contains("panicked"), "{log}");

    first.assert_running("after the second daemon's attempt");
    let t = Instant::now();
    write_in_place(&file, &whitelist(&[SRC_B]));
    expect_traffic_within(
        &lab,
        &first,
        t,
        &[SRC_B],
        &[SRC_A],
        "first daemon after the refusal",
    );
}
one_backend_test!(
    second_daemon_on_the_same_state_dir_refuses_to_start,
    Legacy,
    legacy
);

// ---------------------------------------------------------------------------
// 7. Metrics.
// ---------------------------------------------------------------------------

/// `GET /healthz` answers 200, an unknown path 404, and `GET /metrics`
/// valid Prometheus text (`# HELP` / `# TYPE` before every family, every
/// sample `name{labels} value` or `name value`) whose numbers move with
/// what happens: `reloads_total{result="ok"}` after a policy change,
/// `drift_repairs_total` after our jump is deleted, and the per-rule packet
/// and byte counters of the allow and the deny rule after traffic.
fn metrics_are_valid_and_move(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, "1s", &format!("metricsAddress: {METRICS_ADDR}\n"));
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);

    let health = http_get_ok(lab.node(), metrics_addr(), "/healthz");
    assert_eq!(health.status, 200, "{health:?}");
    let missing = http_get(lab.node(), metrics_addr(), "/no-such-page").expect("an answer");
    assert_eq!(missing.status, 404, "{missing:?}");

    let reloads_ok = "nodeport_guard_reloads_total{result=\"ok\"}";
    let drift = |samples: &support::daemon::Samples| -> f64 {
        ["notification", "poll", "resync"]
            .iter()
            .map(|trigger| {
                sample(
                    samples,
                    &format!("nodeport_guard_drift_repairs_total{{trigger=\"{trigger}\"}}"),
                )
            })
            .sum()
    };
    let rule = |kind: &str, index: usize| {
        format!(
            "nodeport_guard_rule_{kind}_total{{policy=\"guard-nodeport\",direction=\"ingress\",rule=\"{index}\",tier=\"default\"}}"
        )
    };
    let before = scrape(&lab);
    for series in [
        reloads_ok,
        "nodeport_guard_reloads_total{result=\"failed\"}",
        "nodeport_guard_reloads_total{result=\"refused\"}",
        "nodeport_guard_drift_repairs_total{trigger=\"notification\"}",
        "nodeport_guard_drift_repairs_total{trigger=\"poll\"}",
        "nodeport_guard_drift_repairs_total{trigger=\"resync\"}",
        "nodeport_guard_policies",
        &rule("packets", 0),
        &rule("packets", 1),
        &rule("bytes", 0),
        &rule("bytes", 1),
    ] {
        assert!(
            before.contains_key(series),
            "{series} missing in {before:#?}"
        );
    }
    assert_eq!(sample(&before, "nodeport_guard_policies"), 1.0);
    assert!(sample(&before, reloads_ok) >= 1.0, "{before:#?}");

    let t = Instant::now();
    write_in_place(&file, &whitelist(&[SRC_B]));
    wait_metric_above(&lab, &daemon, reloads_ok, sample(&before, reloads_ok));
    expect_traffic_within(&lab, &daemon, t, &[SRC_B], &[SRC_A], "after the change");

    let now = drift(&scrape(&lab));
    delete_our_jump(&lab);
    assert!(
        wait_until(RELOAD_WITHIN, POLL, || drift(&scrape(&lab)) > now),
        "no drift repair counted\n--- daemon log ---\n{}",
        daemon.log()
    );

    let now = scrape(&lab);
    assert_traffic(&lab, &[SRC_B], &[SRC_A], "traffic for the counters");
    for series in [
        rule("packets", 0),
        rule("packets", 1),
        rule("bytes", 0),
        rule("bytes", 1),
    ] {
        wait_metric_above(&lab, &daemon, &series, sample(&now, &series));
    }
    let health = http_get_ok(lab.node(), metrics_addr(), "/healthz");
    assert_eq!(health.status, 200, "{health:?}");
}
backend_tests!(metrics_are_valid_and_move);

// ---------------------------------------------------------------------------
// 8. Address changes.
// ---------------------------------------------------------------------------

/// Members of one of our sets in the node (an ipset, or a set of the nftables backend).
fn set_members(lab: &Lab, set: &str) -> Vec<String> {
    support::Snapshot::take(lab).set_members(set)
}

/// Removes our IPv4 jump into mangle PREROUTING the way another program would: the rule in
/// iptables, the base chain in nftables.
fn delete_our_jump(lab: &Lab) {
    match lab.backend() {
        Backend::Nftables => {
            lab.node().exec_ok(
                "nft",
                &[
                    "delete",
                    "chain",
                    "ip",
                    "nodeport_guard",
                    "npg-mangle-PREROUTING",
                ],
            );
        }
        Backend::Legacy | Backend::Nft => iptables(lab, Family::V4, "-t mangle -D PREROUTING 1"),
    }
}

/// Changes our rules the way another program would, between two reloads: our IPv4 jump
/// deleted, the first policy chain flushed, the node's address deleted from the host-address
/// set. On nftables all three are nf_tables changes; on iptables-nft the set is an ipset,
/// outside the nf_tables generation.
fn foreign_drift(lab: &Lab) {
    delete_our_jump(lab);
    let node = addr::NODE_V4.to_string();
    match lab.backend() {
        Backend::Nftables => {
            let listing = lab
                .node()
                .exec_ok("nft", &["list", "table", "ip", "nodeport_guard"]);
            let chain = listing
                .lines()
                .filter_map(|line| line.trim().strip_prefix("chain "))
                .map(|rest| rest.trim_end_matches(" {"))
                .find(|name| name.starts_with("npg-m-pi-"))
                .unwrap_or_else(|| panic!("no policy chain in\n{listing}"))
                .to_owned();
            lab.node()
                .exec_ok("nft", &["flush", "chain", "ip", "nodeport_guard", &chain]);
            lab.node().exec_ok(
                "nft",
                &[
                    "delete",
                    "element",
                    "ip",
                    "nodeport_guard",
                    "npg4-this-host",
                    &format!("{{ {node} }}"),
                ],
            );
        }
        Backend::Legacy | Backend::Nft => {
            let chain = support::Snapshot::take(lab)
                .chains(Family::V4, "mangle", "npg-pi-")
                .into_iter()
                .next()
                .expect("a policy chain");
            iptables(lab, Family::V4, &format!("-t mangle -F {chain}"));
            lab.node()
                .exec_ok("ipset", &["del", "npg4-this-host", &node]);
        }
    }
}

/// The daemon plans a reload against what it last wrote while nothing else has committed to
/// nf_tables (its cached view); a change another program made between two reloads must still
/// be seen and repaired by the next reload a file change triggers, long before any resync:
/// after it the kernel holds exactly what the new files say (`plan` finds nothing to do) and
/// the traffic follows them.
fn a_reload_after_foreign_changes_repairs_them_too(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, "1h", "");
    let file = guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    // A first reload of the daemon's own, so that the next one can plan against the view it
    // keeps after a write of its own.
    let since = Instant::now();
    write_in_place(&file, &whitelist(&[SRC_A, SRC_B]));
    expect_traffic_within(&lab, &daemon, since, &[SRC_A, SRC_B], &[], "reload");
    for round in 0..3 {
        // The drift watch may repair part of it first; whatever it leaves, the reload must
        // repair.
        foreign_drift(&lab);
        let mark = daemon.mark();
        let allowed: &[Ipv4Addr] = if round % 2 == 0 {
            &[SRC_A]
        } else {
            &[SRC_A, SRC_B]
        };
        write_in_place(&file, &whitelist(allowed));
        daemon.expect_log(mark, "applied", RELOAD_WITHIN);
        let (code, out) = guard.plan_detailed();
        assert_eq!(
            code,
            0,
            "round {round}: the reload left the foreign changes in place:\n{out}\n--- daemon log ---\n{}",
            daemon.log_since(mark)
        );
        let blocked: &[Ipv4Addr] = if round % 2 == 0 { &[SRC_B] } else { &[] };
        assert_traffic(&lab, allowed, blocked, &format!("round {round}"));
    }
}
backend_tests!(a_reload_after_foreign_changes_repairs_them_too);

/// Waits up to 3 s until `set` does (`present`) or does not contain
/// `member`.
#[track_caller]
fn expect_member(lab: &Lab, daemon: &Daemon, set: &str, member: &str, present: bool) {
    let t = Instant::now();
    let mut members = Vec::new();
    let ok = wait_until(RELOAD_WITHIN, Duration::from_millis(50), || {
        members = set_members(lab, set);
        members.iter().any(|m| m == member) == present
    });
    assert!(
        ok,
        "{set} {} {member} after {:?}: {members:?}\n--- daemon log ---\n{}",
        if present { "lacks" } else { "still has" },
        t.elapsed(),
        daemon.log()
    );
}

/// An address added to the node's `eth0` (IPv4 and IPv6) shows up in the
/// host-address ipsets (`npg4-this-host`, `npg6-this-host`) within 3 s,
/// without a resync (the interval is long: rtnetlink notifications do it),
/// and disappears within 3 s of being removed.
fn address_changes_are_followed(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let daemon = Daemon::start(&guard);
    let node = lab.node();
    assert!(set_members(&lab, "npg4-this-host").contains(&addr::NODE_V4.to_string()));

    node.ip(&["addr", "add", "198.51.100.99/24", "dev", "eth0"]);
    expect_member(&lab, &daemon, "npg4-this-host", "198.51.100.99", true);
    node.ip(&[
        "-6",
        "addr",
        "add",
        "2001:db8:1::99/64",
        "dev",
        "eth0",
        "nodad",
    ]);
    expect_member(&lab, &daemon, "npg6-this-host", "2001:db8:1::99", true);

    node.ip(&["addr", "del", "198.51.100.99/24", "dev", "eth0"]);
    expect_member(&lab, &daemon, "npg4-this-host", "198.51.100.99", false);
    node.ip(&["-6", "addr", "del", "2001:db8:1::99/64", "dev", "eth0"]);
    expect_member(&lab, &daemon, "npg6-this-host", "2001:db8:1::99", false);
    assert!(set_members(&lab, "npg4-this-host").contains(&addr::NODE_V4.to_string()));
}
backend_tests!(address_changes_are_followed);

// ---------------------------------------------------------------------------
// 9. Idle.
// ---------------------------------------------------------------------------

/// At rest (no changes, resync every 90 s) the daemon does nothing: its
/// loop does not wake up for a reload (nothing is logged, not even at debug
/// level, over 10 s) and it uses almost no CPU (under 0.2 s of user+system
/// time over those 10 s).
fn idle_daemon_uses_almost_no_cpu(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = daemon_guard(&lab, NO_RESYNC, "");
    guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    // -vv: the daemon logs (at debug level) every time its loop wakes up
    // for a reload, even one that finds nothing to do.
    let mut daemon = Daemon::start_with(&guard, &["-vv"]);
    let mark = daemon.mark();
    let (cpu, switches) = (daemon.cpu_time(), daemon.context_switches());
    // The test is about nothing happening: hold still.
    std::thread::sleep(Duration::from_secs(10));
    daemon.assert_running("while idle");
    let used = daemon.cpu_time().saturating_sub(cpu);
    let woke = daemon.context_switches().saturating_sub(switches);
    eprintln!("idle daemon ({backend}): {used:?} CPU, {woke} context switches in 10 s");
    let log = daemon.log_since(mark);
    assert!(
        log.is_empty(),
        "the idle daemon's loop woke up {} times in 10 s ({used:?} CPU, {woke} context \
         switches); first lines:\n{}",
        log.lines().count(),
        log.lines().take(5).collect::<Vec<_>>().join("\n")
    );
    assert!(
        used < Duration::from_millis(200),
        "the idle daemon used {used:?} of CPU in 10 s ({woke} context switches)"
    );
}
backend_tests!(idle_daemon_uses_almost_no_cpu);

/// A daemon started after a switch of backend puts the policies into its own backend and then
/// removes the old one's rules, which would go on filtering by the old policies: here the old
/// rules allow SRC_B and refer to a set the new policies no longer want (a set that cannot be
/// destroyed while they refer to it).
#[test]
fn a_daemon_on_another_backend_removes_the_first_one_s_rules() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nft);
    let state = tempfile::tempdir().expect("state directory");
    let legacy = daemon_guard(&lab, NO_RESYNC, "")
        .with_backend("iptables-legacy")
        .with_state_dir(state.path());
    let many: Vec<String> = std::iter::once(format!("{SRC_B}/32"))
        .chain((0..20).map(|at| format!("203.0.113.{at}/32")))
        .collect();
    legacy.write_policy(
        "policies.yaml",
        &Whitelist::mission()
            .name("guard-nodeport")
            .nets(many)
            .yaml(),
    );
    legacy.apply();
    assert_traffic(&lab, &[SRC_B], &[SRC_A], "the old backend's policies");

    let nft = daemon_guard(&lab, NO_RESYNC, "")
        .with_backend("iptables-nft")
        .with_state_dir(state.path());
    // Started with an invalid file, it cannot put the policies into its own backend first:
    // the old rules stay (and filter) until the file is fixed.
    let file = nft.write_policy("policies.yaml", "kind: [");
    let daemon = Daemon::start(&nft);
    daemon.expect_log(
        0,
        "other backends hold rules of nodeport-guard from before a switch of backend",
        RELOAD_WITHIN,
    );
    assert_traffic(&lab, &[SRC_B], &[SRC_A], "while the files are invalid");
    let mark = daemon.mark();
    write_in_place(&file, &whitelist(&[SRC_A]));
    daemon.expect_log(
        mark,
        "removed the rules of nodeport-guard from the backend used before",
        RELOAD_WITHIN,
    );
    // What it applied is said, and recorded as the last change.
    assert!(
        daemon
            .log_since(mark)
            .contains("applied the policies to this backend before removing"),
        "{}",
        daemon.log()
    );
    assert_eq!(nft.status_json()["lastApply"]["by"], "daemon");
    let legacy_rules = lab.node().exec_ok("iptables-legacy-save", &[] as &[&str]);
    assert!(
        !legacy_rules.contains("npg"),
        "iptables-legacy still holds ours:\n{legacy_rules}"
    );
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "the new backend's policies alone");
    let (code, out) = nft.plan_detailed();
    assert_eq!(code, 0, "{out}");
}
