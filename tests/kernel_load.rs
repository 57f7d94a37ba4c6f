//! Load test of the daemon: 1,000 policies and 100,000 CIDRs (the
//! benchmark's generator, `benches/common/mod.rs`), and the policy file
//! rewritten ten times a second for a minute, alternating two variants.
//! The daemon's memory stays flat, it ends in the right state, and it logs
//! no error.
//!
//! Gated: it takes minutes, so it only runs with `NPG_LOAD_TESTS=1`
//! (`scripts/test` does not set it). Run it with the optimised binary:
//!
//! ```text
//! NPG_LOAD_TESTS=1 cargo test --release --test kernel_load -- --nocapture
//! ```
//!
//! `NPG_LOAD_SECONDS` changes how long the files are rewritten (default 60).

#[path = "../benches/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use support::{Backend, Guard, Lab, wait_until};

/// How long the policy file is rewritten, unless `NPG_LOAD_SECONDS` says.
const DEFAULT_SECONDS: u64 = 60;

/// Time between two rewrites: ten a second.
const REWRITE_EVERY: Duration = Duration::from_millis(100);

/// How often the daemon's memory is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// Allowed growth of the daemon's peak memory from the warm-up window to
/// the last window.
const MAX_GROWTH: f64 = 1.2;

/// Whether the gate is open.
fn load_tests_enabled() -> bool {
    let enabled = std::env::var("NPG_LOAD_TESTS").is_ok_and(|v| matches!(v.trim(), "1" | "true"));
    if !enabled {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"skipped: load test; set NPG_LOAD_TESTS=1 to run it\n",
        );
    }
    enabled
}

/// The daemon's resident memory in KiB (`VmRSS` of /proc/<pid>/status).
fn rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// Writes `text` to `policies/<file>` atomically (a hidden temporary file
/// renamed over it), as editors and ConfigMap updates do, so the daemon
/// never reads half a file.
fn write_atomically(guard: &Guard<'_>, file: &str, text: &str) {
    let dir = guard.policies_dir();
    let temporary = dir.join(format!(".{file}.tmp"));
    std::fs::write(&temporary, text).expect("write the temporary policy file");
    std::fs::rename(&temporary, dir.join(file)).expect("rename the policy file");
}

/// The two variants: the generated set, and the same with one network
/// set's first net replaced and one more policy.
fn variants() -> [String; 2] {
    let a = common::policy_set(1_000, 100_000);
    let marker = "kind: GlobalNetworkSet\nmetadata:\n  name: set-0\n  labels: {set: set-0}\nspec:\n  nets: [";
    let at = a.find(marker).expect("the generator writes set-0") + marker.len();
    let end = at + a[at..].find(',').expect("set-0 has several nets");
    let mut b = format!("{}192.0.2.0/24{}", &a[..at], &a[end..]);
    b.push_str(
        "---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: load-extra\nspec:\n  order: 5\n  preDNAT: true\n  applyOnForward: true\n  selector: all()\n  ingress:\n  - action: Deny\n    protocol: UDP\n    destination:\n      ports: [30999]\n",
    );
    [a, b]
}

/// The daemon under a storm of rewrites: memory (VmRSS) sampled every two
/// seconds stays flat (the peak of the last window is at most 1.2× the
/// peak of the window after warm-up), `plan --detailed-exitcode` exits 0
/// once the rewrites stop (the last variant is applied exactly), and the
/// log holds no error.
fn daemon_stays_flat_and_correct_under_a_rewrite_storm(backend: Backend, native_nftables: bool) {
    let seconds = std::env::var("NPG_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SECONDS);
    let lab = Lab::new(backend);
    let mut guard = Guard::new(&lab);
    if native_nftables {
        guard = guard.native_nftables();
    }
    guard.write_config("debounce: 50ms\nresyncInterval: 1h\n");
    let variants = variants();
    write_atomically(&guard, "load.yaml", &variants[0]);

    let started = Instant::now();
    let mut daemon = guard.spawn(&["run"], "daemon.log");
    let converged = wait_until(Duration::from_secs(600), Duration::from_secs(1), || {
        guard.plan_detailed().0 == 0
    });
    assert!(converged, "first apply:\n{}", daemon.log());
    let first_apply = started.elapsed();

    let storm = Duration::from_secs(seconds);
    let storm_started = Instant::now();
    let mut samples: Vec<(Duration, u64)> = Vec::new();
    let mut next_sample = storm_started;
    let mut writes = 0usize;
    while storm_started.elapsed() < storm {
        write_atomically(&guard, "load.yaml", &variants[(writes + 1) % 2]);
        writes += 1;
        if Instant::now() >= next_sample {
            let rss = rss_kib(daemon.pid()).expect("the daemon is running");
            samples.push((storm_started.elapsed(), rss));
            next_sample += SAMPLE_EVERY;
        }
        // Pacing of the rewrites: ten a second is the load being tested.
        std::thread::sleep(REWRITE_EVERY);
    }
    let last = &variants[writes % 2];
    let settled = wait_until(Duration::from_secs(600), Duration::from_secs(1), || {
        guard.plan_detailed().0 == 0
    });
    assert!(daemon.running(), "the daemon died:\n{}", daemon.log());
    assert!(
        settled,
        "the last variant was not applied:\n{}",
        daemon.log()
    );
    assert!(
        std::fs::read_to_string(guard.policies_dir().join("load.yaml")).expect("policy") == *last
    );

    // Peaks per window: a sample may fall inside a reload or between two.
    let window = |from: Duration, to: Duration| {
        samples
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, rss)| *rss)
            .max()
    };
    let third = storm / 3;
    let warm = window(third, third * 2).expect("samples after warm-up");
    let end = window(third * 2, storm + SAMPLE_EVERY).expect("samples at the end");
    let log = daemon.log();
    let applies = log.matches(" applied").count();
    let report = format!(
        "{backend} (native nftables: {native_nftables}): first apply {first_apply:?}, {writes} rewrites in {storm:?}, {applies} applies logged, VmRSS peak {warm} KiB after warm-up, {end} KiB at the end; samples {samples:?}\n"
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), report.as_bytes());
    assert!(
        end as f64 <= warm as f64 * MAX_GROWTH,
        "the daemon's memory grew: {report}"
    );
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "errors in the daemon log: {errors:#?}");
    // SIGTERM is handled between two reloads, and a reload of this set takes a while.
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        daemon
            .wait_exit(Duration::from_secs(120))
            .is_some_and(|s| s.success()),
        "{}",
        daemon.log()
    );
}

/// See [`daemon_stays_flat_and_correct_under_a_rewrite_storm`]
/// (iptables-legacy and ipset).
#[test]
fn daemon_stays_flat_and_correct_under_a_rewrite_storm_legacy() {
    if !load_tests_enabled() {
        return;
    }
    support::require_kernel!();
    daemon_stays_flat_and_correct_under_a_rewrite_storm(Backend::Legacy, false);
}

/// See [`daemon_stays_flat_and_correct_under_a_rewrite_storm`] (native
/// nftables).
#[test]
fn daemon_stays_flat_and_correct_under_a_rewrite_storm_nftables() {
    if !load_tests_enabled() {
        return;
    }
    support::require_kernel!();
    daemon_stays_flat_and_correct_under_a_rewrite_storm(Backend::Nft, true);
}

/// The metrics endpoint at 1,000 policies and 10,000 CIDRs (iptables-nft, the backend of the
/// issue's measurements): 200 concurrent scrapes answered within 10 s, at most 4 child
/// processes of the daemon at any moment, resident memory at most twice the idle figure; then a
/// policy change made during a 300-scrape storm reaches the kernel within a second of the
/// daemon's own reload time without a storm. Figures are printed.
#[test]
fn metrics_storm_at_1000_policies() {
    if !load_tests_enabled() {
        return;
    }
    support::require_kernel!();
    use support::daemon::{get, resident_kib, scrape_storm};
    let lab = Lab::new(Backend::Nft);
    let guard = Guard::with_config(
        &lab,
        "debounce: 50ms\nresyncInterval: 90s\nmetricsAddress: 127.0.0.1:9808\n",
    );
    let address: std::net::SocketAddr = "127.0.0.1:9808".parse().expect("an address");
    let set = common::policy_set(1_000, 10_000);
    write_atomically(&guard, "load.yaml", &set);
    let mut daemon = support::daemon::Daemon::spawn(&guard, "daemon");
    daemon.wait_ready(Duration::from_secs(600));
    let pid = daemon.pid();
    assert!(matches!(
        lab.node().run(|| get(address, "/metrics")),
        Ok((200, _))
    ));
    let idle = resident_kib(pid);
    let storm = |count: usize, change: Option<&str>| {
        let (storm, changed) = scrape_storm(lab.node(), address, count, pid, || {
            change.map(|text| {
                std::thread::sleep(Duration::from_millis(50));
                let before = daemon.mark();
                write_atomically(&guard, "load.yaml", text);
                let written = Instant::now();
                daemon.expect_log(before, " applied", Duration::from_secs(60));
                written.elapsed()
            })
        });
        let ok = storm
            .answers
            .iter()
            .filter(|answer| matches!(answer, Ok((200, _))))
            .count();
        (ok, storm.took, storm.most_children, changed)
    };
    // The reload time of the same change without a storm.
    let quiet_before = daemon.mark();
    let started = Instant::now();
    write_atomically(&guard, "load.yaml", &variants_of(&set, 1));
    daemon.expect_log(quiet_before, " applied", Duration::from_secs(60));
    let quiet = started.elapsed();
    let (ok, took, most, _) = storm(200, None);
    let resident = resident_kib(pid);
    let (ok_during, took_during, most_during, changed) = storm(300, Some(&variants_of(&set, 2)));
    let changed = changed.expect("a change");
    let report = format!(
        "1,000 policies: {ok}/200 scrapes in {took:?}, at most {most} children; resident {idle} KiB idle, {resident} KiB after; a reload {quiet:?} quiet, {changed:?} during a storm of 300 ({ok_during} answered in {took_during:?}, at most {most_during} children)\n"
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), report.as_bytes());
    assert_eq!(ok, 200, "{report}");
    assert!(took <= Duration::from_secs(10), "{report}");
    assert!(most <= 4 && most_during <= 4, "{report}");
    assert!(resident <= idle * 2, "{report}");
    assert!(changed <= quiet + Duration::from_secs(1), "{report}");
    assert!(daemon.running(), "{}", daemon.log());
}

/// `set` with one more policy, numbered `n`.
fn variants_of(set: &str, n: usize) -> String {
    format!(
        "{set}---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: storm-extra-{n}\nspec:\n  order: 5\n  preDNAT: true\n  applyOnForward: true\n  selector: all()\n  ingress:\n  - action: Deny\n    protocol: UDP\n    destination:\n      ports: [{port}]\n",
        port = 30_900 + n
    )
}
