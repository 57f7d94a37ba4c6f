//! Kernel tests of the daemon under hostile conditions ("Under attack" in docs/SPEC.md): a
//! foreign flush of its rules is repaired within a second with the default `resyncInterval`;
//! a neighbour committing its own rules many times a second costs it nothing; a program
//! deleting its jump in a loop meets rate-limited repairs, logged and counted; and a storm of
//! scrapes or of idle connections on the metrics endpoint changes neither its memory, nor the
//! number of programs it runs, nor how fast a policy change reaches the kernel, nor
//! `/healthz`.

mod support;

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::daemon::{
    Daemon, daemon_config, get, http_get_ok, parse_prometheus, resident_kib, scrape_storm,
};
use support::fixtures::Whitelist;
use support::{Backend, Family, Guard, Lab, POLL, addr, backend_tests, iptables, wait_until};

/// The default resync interval: only the drift watch can repair within a second.
const DEFAULT_RESYNC: &str = "90s";
/// The contract: drift repaired within a second.
const REPAIR_WITHIN: Duration = Duration::from_secs(1);
const SRC_A: Ipv4Addr = addr::CLIENT_V4[0];
const SRC_B: Ipv4Addr = addr::CLIENT_V4[1];
const METRICS_ADDR: &str = "127.0.0.1:9808";

fn metrics_addr() -> SocketAddr {
    METRICS_ADDR.parse().expect("a socket address")
}

fn whitelist(allowed: &[Ipv4Addr]) -> String {
    Whitelist::mission()
        .name("guard-nodeport")
        .nets(allowed.iter().map(|a| format!("{a}/32")))
        .yaml()
}

/// A guard with the default resync interval, `/metrics` on [`METRICS_ADDR`], and the
/// whitelist of [`SRC_A`].
fn serving_guard(lab: &Lab) -> Guard<'_> {
    let guard = Guard::with_config(
        lab,
        &daemon_config(DEFAULT_RESYNC, &format!("metricsAddress: {METRICS_ADDR}\n")),
    );
    guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    guard
}

/// Exactly `allowed` reach the NodePort and `blocked` are dropped.
#[track_caller]
fn assert_traffic(lab: &Lab, allowed: &[Ipv4Addr], blocked: &[Ipv4Addr], context: &str) {
    let nodeport = support::sa(addr::NODE_V4, support::ports::NODEPORT);
    let probes: Vec<support::Probe> = allowed
        .iter()
        .map(|&src| support::open(src, nodeport, support::replies::NODEPORT_TARGET))
        .chain(blocked.iter().map(|&src| support::dropped(src, nodeport)))
        .collect();
    support::check_reachability(lab, context, &probes);
}

/// Flushes our rules the way an administrator would: `iptables -t mangle -F` (both
/// families), or `nft flush table ip nodeport_guard`.
fn foreign_flush(lab: &Lab) {
    match lab.backend() {
        Backend::Nftables => {
            lab.node()
                .exec_ok("nft", &["flush", "table", "ip", "nodeport_guard"]);
        }
        Backend::Legacy | Backend::Nft => {
            iptables(lab, Family::V4, "-t mangle -F");
        }
    }
}

/// Deletes our IPv4 jump (iptables) or our base chain (nftables), as a hostile program would.
fn delete_our_jump(lab: &Lab) -> bool {
    match lab.backend() {
        Backend::Nftables => lab
            .node()
            .exec(
                "nft",
                &[
                    "delete",
                    "chain",
                    "ip",
                    "nodeport_guard",
                    "npg-mangle-PREROUTING",
                ],
            )
            .success(),
        Backend::Legacy | Backend::Nft => lab
            .iptables(Family::V4, &["-t", "mangle", "-D", "PREROUTING", "1"])
            .success(),
    }
}

/// After `iptables -t mangle -F` or `nft flush table ip nodeport_guard`, with the default
/// `resyncInterval` (90 s), the daemon has put our rules back within a second (the time of its
/// `drift repaired` line, written after the write was read back and checked, against the
/// moment the flush returned: polling the kernel from here would add the cost of each
/// reading), the kernel holds exactly what it held before, the denied source is dropped again,
/// and the repair is counted under the watch's trigger.
fn a_foreign_flush_is_repaired_within_a_second(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let applied = guard.our_rules_and_members();
    let trigger = if backend == Backend::Legacy {
        "poll"
    } else {
        "notification"
    };
    for round in 0..3 {
        let line =
            repaired_within_a_second(&daemon, &format!("{backend} round {round}: flush"), || {
                foreign_flush(&lab)
            });
        assert!(line.contains(trigger), "{line}");
        assert_eq!(
            guard.our_rules_and_members(),
            applied,
            "{backend} round {round}"
        );
        assert_traffic(&lab, &[SRC_A], &[SRC_B], "after the repair");
    }
    let samples = scrape(&lab);
    let counted = samples
        .get(&format!(
            "nodeport_guard_drift_repairs_total{{trigger=\"{trigger}\"}}"
        ))
        .copied()
        .unwrap_or(0.0);
    assert!(counted >= 3.0, "{samples:#?}");
}
backend_tests!(a_foreign_flush_is_repaired_within_a_second);

/// With a policy that expires in the directory, the daemon wakes at least once a second to
/// look at the clock; a flush is still repaired within a second, every time. (The legacy poll
/// once took the tables as such a wake found them for the state it expects, so a flush made
/// before the wake and after the poll's last reading stood until the resync, 90 s.)
fn a_flush_is_repaired_within_a_second_while_a_policy_waits_to_expire(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let tomorrow = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24);
    guard.write_policy(
        "vendor.yaml",
        &format!(
            "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: vendor-until-tomorrow
  annotations:
    nodeport-guard.io/expires: \"{tomorrow}\"
spec:
  order: 1
  preDNAT: true
  applyOnForward: true
  ingress:
    - action: Allow
      source:
        nets: [203.0.113.77/32]
"
        ),
    );
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let applied = guard.our_rules_and_members();
    for round in 0..8 {
        repaired_within_a_second(&daemon, &format!("{backend} round {round}"), || {
            foreign_flush(&lab)
        });
        assert_eq!(
            guard.our_rules_and_members(),
            applied,
            "{backend} round {round}"
        );
        // The rate limit's tokens come back (one a second), and the flushes land at other
        // moments of the daemon's once-a-second wake.
        std::thread::sleep(Duration::from_millis(1300));
    }
}
backend_tests!(a_flush_is_repaired_within_a_second_while_a_policy_waits_to_expire);

/// Runs `change` and waits for the daemon's `drift repaired` line: written within a second of
/// the moment `change` returned (the time stamp of the line, written after the write was read
/// back and checked). Returns the line.
#[track_caller]
fn repaired_within_a_second(daemon: &Daemon, what: &str, change: impl FnOnce()) -> String {
    let mark = daemon.mark();
    change();
    let changed = jiff::Timestamp::now();
    let line = daemon.expect_log(mark, "drift repaired", Duration::from_secs(5));
    let repaired_at: jiff::Timestamp = line
        .split_whitespace()
        .next()
        .and_then(|stamp| stamp.parse().ok())
        .unwrap_or_else(|| panic!("no time stamp in {line}"));
    let elapsed = repaired_at.duration_since(changed);
    eprintln!("{what}: repaired after {elapsed:?}");
    assert!(
        elapsed <= jiff::SignedDuration::try_from(REPAIR_WITHIN).expect("small"),
        "{what}: repaired only after {elapsed:?}\n--- daemon log ---\n{}",
        daemon.log_since(mark)
    );
    line
}

/// The other ways another program changes what the daemon owns, each repaired within a second
/// with the default `resyncInterval`: a rule put in front of our jump at the top of mangle
/// `PREROUTING` (iptables; nftables' base chain is ours alone), and one of our sets emptied
/// (`ipset flush`, or `nft flush set`), which lets the whitelisted source's SYNs be dropped;
/// for nftables also our table switched off (`flags dormant`: every chain of it stops, so the
/// denied source gets through).
fn other_foreign_changes_are_repaired_within_a_second(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let applied = guard.our_rules_and_members();
    let inserted = "a rule inserted above our jump";
    let flushed = "one of our sets flushed";
    let dormant = "our table set dormant";
    let changes: &[&str] = if backend == Backend::Nftables {
        &[flushed, dormant]
    } else {
        &[inserted, flushed]
    };
    for &what in changes {
        repaired_within_a_second(&daemon, &format!("{backend}: {what}"), || {
            if what == inserted {
                iptables(
                    &lab,
                    Family::V4,
                    "-t mangle -I PREROUTING 1 -p tcp --dport 30008 -j ACCEPT",
                );
            } else if what == dormant {
                lab.node()
                    .exec_ok("nft", &["add table ip nodeport_guard { flags dormant; }"]);
            } else {
                flush_a_set_of_ours(&lab);
            }
        });
        assert_eq!(guard.our_rules_and_members(), applied, "{backend}, {what}");
        if backend == Backend::Nftables {
            let listed = lab
                .node()
                .exec_ok("nft", &["list", "table", "ip", "nodeport_guard"]);
            assert!(
                !listed.contains("dormant"),
                "{what}: still dormant:\n{listed}"
            );
        }
        if backend != Backend::Nftables {
            let listed = lab.iptables_ok(Family::V4, &["-t", "mangle", "-S", "PREROUTING"]);
            let first = listed.lines().find(|line| line.starts_with("-A "));
            assert!(
                first.is_some_and(|line| line.contains("-j npg-")),
                "{backend}, {what}: our jump is not first again:\n{listed}"
            );
        }
        assert_traffic(&lab, &[SRC_A], &[SRC_B], what);
    }
}
backend_tests!(other_foreign_changes_are_repaired_within_a_second);

/// Our chain renamed by another program (`iptables -E npg-PREROUTING RENAMED`, in raw and
/// mangle) and then emptied: our jump, its comment unchanged, now leads to a chain that is not
/// ours. The daemon notices (iptables-nft: the chain's notification names only its new name)
/// and puts back both the chain and a jump to it; the renamed chain, now another program's, is
/// left alone. nftables has no jump to retarget (its base chains are ours).
fn a_renamed_chain_of_ours_is_put_back_with_its_jump(backend: Backend) {
    if backend == Backend::Nftables {
        return;
    }
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let applied = guard.our_rules_and_members();
    let mark = daemon.mark();
    for table in ["raw", "mangle"] {
        iptables(
            &lab,
            Family::V4,
            &format!("-t {table} -E npg-PREROUTING RENAMED"),
        );
    }
    for table in ["raw", "mangle"] {
        iptables(&lab, Family::V4, &format!("-t {table} -F RENAMED"));
    }
    let jumps_to_ours = || {
        ["raw", "mangle"].iter().all(|table| {
            let listed = lab.iptables_ok(Family::V4, &["-t", table, "-S", "PREROUTING"]);
            listed
                .lines()
                .find(|line| line.starts_with("-A "))
                .is_some_and(|line| line.ends_with("-j npg-PREROUTING"))
        })
    };
    let repaired = wait_until(Duration::from_secs(3), POLL, || {
        jumps_to_ours() && guard.our_rules_and_members() == applied
    });
    assert!(
        repaired,
        "{backend}: not put back within 3 s\n--- daemon log ---\n{}",
        daemon.log_since(mark)
    );
    for table in ["raw", "mangle"] {
        let listed = lab.iptables_ok(Family::V4, &["-t", table, "-S", "RENAMED"]);
        assert!(
            listed.contains("-N RENAMED"),
            "{backend}: {table}: {listed}"
        );
    }
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "after the rename");
}
backend_tests!(a_renamed_chain_of_ours_is_put_back_with_its_jump);

/// One of our rules changed in place by another program that kept its comment (and so the
/// `npg:` hash that names it): the whitelist's drop in mangle and in raw made an accept. The
/// rule as printed no longer hashes to its comment, so the daemon sees a rule it did not
/// write and puts its own back (nftables: `nft replace rule … handle N`, the same).
fn a_rule_changed_in_place_with_our_comment_kept_is_put_back(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let daemon = Daemon::start(&guard);
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "at start");
    let applied = guard.our_rules_and_members();
    // `iptables -R CHAIN N` with the saved line's words, its drop made an accept.
    let replace_drops = |table: &str| {
        let listed = lab.iptables_ok(Family::V4, &["-t", table, "-S"]);
        let lines: Vec<&str> = listed
            .lines()
            .filter(|l| l.starts_with("-A npg-"))
            .collect();
        let mut replaced = 0;
        for (index, line) in lines.iter().enumerate() {
            if !line.ends_with(" -j DROP") {
                continue;
            }
            let chain = line.split_whitespace().nth(1).expect("chain");
            let position = lines[..=index]
                .iter()
                .filter(|l| l.split_whitespace().nth(1) == Some(chain))
                .count()
                .to_string();
            let body = &line[3 + chain.len()..line.len() - "DROP".len()];
            let (before, rest) = body.split_once("--comment \"").expect("our comment");
            let (comment, after) = rest.split_once('"').expect("closed comment");
            let mut args = vec!["-t", table, "-R", chain, position.as_str()];
            args.extend(before.split_whitespace());
            args.extend(["--comment", comment]);
            args.extend(after.split_whitespace());
            args.push("ACCEPT");
            lab.iptables_ok(Family::V4, &args);
            replaced += 1;
        }
        assert!(
            replaced > 0,
            "{backend}: no drop of ours in {table}:\n{listed}"
        );
    };
    // The same with nft: every drop of ours (with its comment) replaced by an accept.
    let replace_nft_drops = || {
        let listed = lab
            .node()
            .exec_ok("nft", &["-a", "list", "table", "ip", "nodeport_guard"]);
        let mut chain = "";
        let mut replaced = 0;
        for line in listed.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("chain ") {
                chain = rest.split_whitespace().next().unwrap_or_default();
            }
            let Some((body, handle)) = line.rsplit_once(" # handle ") else {
                continue;
            };
            if !body.contains(" drop comment \"npg:") {
                continue;
            }
            let body = body.replace(" drop comment", " accept comment");
            lab.node().exec_ok(
                "nft",
                &[format!(
                    "replace rule ip nodeport_guard {chain} handle {handle} {body}"
                )],
            );
            replaced += 1;
        }
        assert!(replaced > 0, "no drop of ours:\n{listed}");
    };
    repaired_within_a_second(&daemon, &format!("{backend}: drops made accepts"), || {
        if backend == Backend::Nftables {
            replace_nft_drops();
        } else {
            replace_drops("raw");
            replace_drops("mangle");
        }
    });
    let back = wait_until(Duration::from_secs(3), POLL, || {
        guard.our_rules_and_members() == applied
    });
    assert!(back, "{backend}: our rules are not as applied");
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "after the change");
}
backend_tests!(a_rule_changed_in_place_with_our_comment_kept_is_put_back);

/// One of our sets emptied right after the daemon repaired something else (a rule put into
/// our chain): the check the repair made may have read the sets before the flush, and the set
/// poll must report the difference again rather than take it as already checked. Ten rounds;
/// each set is back within 3 s (the poll runs every second, and a check after a repair waits
/// for the rate limit).
fn a_set_flushed_right_after_a_repair_is_repaired_too(backend: Backend) {
    if backend == Backend::Nftables {
        return;
    }
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let daemon = Daemon::start(&guard);
    let applied = guard.our_rules_and_members();
    let ours = |line: &str| line.starts_with("-A npg-PREROUTING") && line.contains("-j ACCEPT");
    for round in 0..10 {
        let mark = daemon.mark();
        iptables(&lab, Family::V4, "-t mangle -I npg-PREROUTING 1 -j ACCEPT");
        let removed = wait_until(Duration::from_secs(3), Duration::from_millis(5), || {
            let listed = lab.iptables_ok(Family::V4, &["-t", "mangle", "-S", "npg-PREROUTING"]);
            !listed.lines().any(ours)
        });
        assert!(removed, "{backend}, round {round}: the rule stayed");
        flush_a_set_of_ours(&lab);
        let repaired = wait_until(Duration::from_secs(3), POLL, || {
            guard.our_rules_and_members() == applied
        });
        assert!(
            repaired,
            "{backend}, round {round}: the set was not repaired within 3 s\n--- daemon log ---\n{}",
            daemon.log_since(mark)
        );
    }
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "after the rounds");
}
backend_tests!(a_set_flushed_right_after_a_repair_is_repaired_too);

/// One member of our sets swapped for another (`ipset del` then `ipset add`): the set's size
/// stays, so only its members tell; repaired within a second, as a flush is (iptables
/// backends: nftables' sets live in our table, whose every change is notified).
fn a_member_swapped_in_a_set_of_ours_is_repaired_within_a_second(backend: Backend) {
    if backend == Backend::Nftables {
        return;
    }
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let daemon = Daemon::start(&guard);
    let applied = guard.our_rules_and_members();
    let saved = lab.node().exec_ok("ipset", &["save"]);
    let (set, member) = saved
        .lines()
        .filter_map(|line| line.strip_prefix("add "))
        .filter(|rest| rest.starts_with("npg4"))
        .find_map(|rest| rest.split_once(' '))
        .map(|(set, member)| {
            (
                set.to_owned(),
                member
                    .split_whitespace()
                    .next()
                    .unwrap_or(member)
                    .to_owned(),
            )
        })
        .unwrap_or_else(|| panic!("no set of ours with members in\n{saved}"));
    repaired_within_a_second(
        &daemon,
        &format!("{backend}: {member} of {set} swapped"),
        || {
            lab.node().exec_ok("ipset", &["del", &set, &member]);
            lab.node().exec_ok("ipset", &["add", &set, "203.0.113.200"]);
        },
    );
    assert_eq!(guard.our_rules_and_members(), applied, "{backend}");
    assert_traffic(&lab, &[SRC_A], &[SRC_B], "after the swap");
}
backend_tests!(a_member_swapped_in_a_set_of_ours_is_repaired_within_a_second);

/// Empties the first of our IPv4 sets that holds a member: `ipset flush`, or nftables' `nft
/// flush set` in our table.
fn flush_a_set_of_ours(lab: &Lab) {
    match lab.backend() {
        Backend::Nftables => {
            let table = lab
                .node()
                .exec_ok("nft", &["list", "table", "ip", "nodeport_guard"]);
            let mut current = None;
            let mut full = None;
            for line in table.lines().map(str::trim) {
                if let Some(rest) = line.strip_prefix("set ") {
                    current = rest.split_whitespace().next().map(str::to_owned);
                } else if line.starts_with("elements = ") && full.is_none() {
                    full = current.clone();
                }
            }
            let set = full.unwrap_or_else(|| panic!("no set with members in\n{table}"));
            lab.node()
                .exec_ok("nft", &["flush", "set", "ip", "nodeport_guard", &set]);
        }
        Backend::Legacy | Backend::Nft => {
            let saved = lab.node().exec_ok("ipset", &["save"]);
            let set = saved
                .lines()
                .filter_map(|line| line.strip_prefix("add npg4"))
                .find_map(|rest| rest.split_whitespace().next())
                .map(|suffix| format!("npg4{suffix}"))
                .unwrap_or_else(|| panic!("no set of ours with members in\n{saved}"));
            lab.node().exec_ok("ipset", &["flush", &set]);
        }
    }
}

/// `GET /metrics` as Prometheus text.
#[track_caller]
fn scrape(lab: &Lab) -> support::daemon::Samples {
    let response = http_get_ok(lab.node(), metrics_addr(), "/metrics");
    assert_eq!(response.status, 200, "{response:?}");
    parse_prometheus(&response.body)
        .unwrap_or_else(|e| panic!("/metrics is not Prometheus text: {e}\n{}", response.body))
}

/// One commit of a neighbour's own rules: a rule added to its chain in mangle (iptables) or
/// to its own table (nftables); every 20th commit empties the chain again.
fn neighbour_commit(lab: &Lab, round: usize) {
    let source = format!("203.0.113.{}", round % 20 + 1);
    match lab.backend() {
        Backend::Nftables => {
            let rule = if round.is_multiple_of(20) {
                "flush chain ip neighbour c".to_owned()
            } else {
                format!("add rule ip neighbour c ip saddr {source} return")
            };
            let args: Vec<&str> = rule.split(' ').collect();
            lab.node().exec_ok("nft", &args);
        }
        Backend::Legacy | Backend::Nft => {
            if round.is_multiple_of(20) {
                iptables(lab, Family::V4, "-t mangle -F KUBE-NEIGHBOUR");
            } else {
                iptables(
                    lab,
                    Family::V4,
                    &format!("-t mangle -A KUBE-NEIGHBOUR -s {source}/32 -j RETURN"),
                );
            }
        }
    }
}

/// A neighbour (kube-proxy, docker) committing its own rules 20 times a second for 10 s: the
/// daemon rewrites nothing of ours and its CPU time stays under 0.5 s in those 10 s.
fn a_neighbour_committing_often_costs_nothing(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::with_config(&lab, &daemon_config(DEFAULT_RESYNC, ""));
    guard.write_policy("policies.yaml", &whitelist(&[SRC_A]));
    let mut daemon = Daemon::start(&guard);
    match backend {
        Backend::Nftables => {
            lab.node()
                .exec_ok("nft", &["add", "table", "ip", "neighbour"]);
            lab.node()
                .exec_ok("nft", &["add", "chain", "ip", "neighbour", "c"]);
        }
        Backend::Legacy | Backend::Nft => iptables(&lab, Family::V4, "-t mangle -N KUBE-NEIGHBOUR"),
    }
    let applied = guard.our_rules_and_members();
    let mark = daemon.mark();
    let cpu = daemon.cpu_time();
    let started = Instant::now();
    for round in 0..200 {
        neighbour_commit(&lab, round);
        let next = started + Duration::from_millis(50) * (round as u32 + 1);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    daemon.assert_running("after the neighbour's commits");
    let used = daemon.cpu_time().saturating_sub(cpu);
    eprintln!(
        "{backend}: 200 neighbour commits in {:?}; the daemon used {used:?} of CPU",
        started.elapsed()
    );
    assert_eq!(
        guard.our_rules_and_members(),
        applied,
        "{backend}: our rules changed"
    );
    let log = daemon.log_since(mark);
    assert!(
        !log.contains("applied") && !log.contains("drift repaired"),
        "{backend}: the daemon rewrote its rules:\n{log}"
    );
    assert!(
        used < Duration::from_millis(500),
        "{backend}: the daemon used {used:?} of CPU while a neighbour committed 20 times a second"
    );
}
backend_tests!(a_neighbour_committing_often_costs_nothing);

/// A program deleting our jump again and again for 5 s: the daemon keeps repairing, but after
/// a burst at most one repair a second (a dozen at most), says so once in the log, and counts
/// it in `/metrics`; once the program stops, the rules are back within a second.
fn a_program_fighting_us_meets_rate_limited_repairs(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let daemon = Daemon::start(&guard);
    let applied = guard.our_rules_and_members();
    let mark = daemon.mark();
    let started = Instant::now();
    let mut deleted = 0;
    while started.elapsed() < Duration::from_secs(5) {
        deleted += usize::from(delete_our_jump(&lab));
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped = Instant::now();
    let repaired = wait_until(REPAIR_WITHIN * 3, Duration::from_millis(10), || {
        guard.our_rules_and_members() == applied
    });
    let log = daemon.log_since(mark);
    assert!(
        repaired && stopped.elapsed() <= REPAIR_WITHIN + Duration::from_millis(500),
        "{backend}: not repaired after the fight ({:?})\n{}",
        stopped.elapsed(),
        daemon.log()
    );
    let repairs = daemon.count_since(mark, "drift repaired");
    let warnings = daemon.count_since(mark, "rate-limited");
    eprintln!("{backend}: {deleted} deletions in 5 s, {repairs} repairs, {warnings} warnings");
    assert!(
        deleted >= 10,
        "{backend}: the fight did not happen ({deleted})\n{log}"
    );
    assert!(
        (5..=16).contains(&repairs),
        "{backend}: {repairs} repairs for {deleted} deletions in 5 s\n{log}"
    );
    assert_eq!(warnings, 1, "{backend}: said once\n{log}");
    let limited = scrape(&lab)
        .get("nodeport_guard_drift_checks_rate_limited_total")
        .copied()
        .unwrap_or(0.0);
    assert!(limited >= 1.0, "{backend}: not counted");
}
backend_tests!(a_program_fighting_us_meets_rate_limited_repairs);

/// 200 concurrent scrapes are all answered within 10 s, with at most 4 programs of the
/// daemon's running at any moment (one reading of the counters for all) and its resident
/// memory at most twice what it was before; a policy change made during the storm reaches the
/// kernel within a second.
fn a_scrape_storm_changes_nothing(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let file = guard.policies_dir().join("policies.yaml");
    let daemon = Daemon::start(&guard);
    let pid = daemon.pid();
    scrape(&lab);
    let idle = resident_kib(pid);
    let (storm, changed_after) = scrape_storm(lab.node(), metrics_addr(), 200, pid, || {
        // A policy change in the middle of the storm.
        std::thread::sleep(Duration::from_millis(50));
        let before = guard.our_rules_and_members();
        std::fs::write(&file, whitelist(&[SRC_B])).expect("write the policy");
        let written = Instant::now();
        wait_until(Duration::from_secs(5), Duration::from_millis(10), || {
            guard.our_rules_and_members() != before
        });
        written.elapsed()
    });
    let most_children = storm.most_children;
    let (answers, took) = (storm.answers, storm.took);
    let failed: Vec<_> = answers
        .iter()
        .filter(|answer| !matches!(answer, Ok((200, _))))
        .collect();
    let resident = resident_kib(pid);
    eprintln!(
        "{backend}: 200 scrapes in {took:?}; at most {most_children} children; resident \
         {idle} KiB idle, {resident} KiB after; the policy change in the kernel after \
         {changed_after:?}"
    );
    assert!(
        failed.is_empty(),
        "{} scrapes failed: {failed:?}",
        failed.len()
    );
    assert!(took <= Duration::from_secs(10), "200 scrapes took {took:?}");
    assert!(most_children <= 4, "{most_children} children at once");
    assert!(
        resident <= idle * 2,
        "resident memory went from {idle} KiB to {resident} KiB"
    );
    // The debounce (100 ms) is part of it.
    assert!(
        changed_after <= Duration::from_secs(1),
        "the policy change took {changed_after:?} to reach the kernel during the storm\n{}",
        daemon.log()
    );
}
/// The endpoint does not depend on the backend: iptables-nft.
#[test]
fn a_scrape_storm_changes_nothing_nft() {
    support::require_kernel!();
    a_scrape_storm_changes_nothing(Backend::Nft);
}

/// 2,000 connections that never send a request do not delay `/healthz`: it answers within
/// 500 ms while they are open, and they are closed (they do not pile up in the daemon). They
/// are held for 8 s: past the 5 s for which the kernel holds them back (`TCP_DEFER_ACCEPT`),
/// after which it hands them all to the daemon at once.
fn idle_connections_do_not_delay_healthz(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let daemon = Daemon::start(&guard);
    http_get_ok(lab.node(), metrics_addr(), "/healthz");
    raise_open_files_limit();
    let descriptors = || {
        std::fs::read_dir(format!("/proc/{}/fd", daemon.pid()))
            .map(|fds| fds.count())
            .unwrap_or(0)
    };
    let (opened, health, open_files) = lab.node().run(|| {
        let mut idle = Vec::new();
        for _ in 0..2000 {
            if let Ok(stream) =
                TcpStream::connect_timeout(&metrics_addr(), Duration::from_millis(200))
            {
                idle.push(stream);
            }
        }
        let mut health = Vec::new();
        let mut open_files = 0;
        let until = std::time::Instant::now() + Duration::from_secs(8);
        while health.len() < 5 || std::time::Instant::now() < until {
            health.push(get(metrics_addr(), "/healthz"));
            open_files = open_files.max(descriptors());
            std::thread::sleep(Duration::from_millis(100));
        }
        (idle.len(), health, open_files)
    });
    let slowest = health
        .iter()
        .filter_map(|answer| answer.as_ref().ok().map(|(_, took)| *took))
        .max();
    eprintln!(
        "{backend}: {opened} idle connections held 8 s; {} /healthz, the slowest {slowest:?}; \
         the daemon held at most {open_files} descriptors",
        health.len()
    );
    assert!(opened >= 1000, "only {opened} connections were opened");
    for answer in &health {
        match answer {
            Ok((200, took)) => assert!(
                *took <= Duration::from_millis(500),
                "/healthz took {took:?} among {opened} idle connections"
            ),
            other => panic!("/healthz among {opened} idle connections: {other:?}"),
        }
    }
    assert!(
        open_files < 200,
        "the daemon holds {open_files} descriptors"
    );
}
/// The endpoint does not depend on the backend: iptables-nft.
#[test]
fn idle_connections_do_not_delay_healthz_nft() {
    support::require_kernel!();
    idle_connections_do_not_delay_healthz(Backend::Nft);
}

/// Lets the test hold 2,000 sockets.
fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard.min(65_536), hard);
    }
}

/// A request head over 8 KiB and one that trickles in slower than 5 s are dropped; junk is
/// refused; `/healthz` stays up meanwhile.
fn oversized_and_slow_requests_are_dropped(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = serving_guard(&lab);
    let _daemon = Daemon::start(&guard);
    http_get_ok(lab.node(), metrics_addr(), "/healthz");
    lab.node().run(|| {
        // Over 8 KiB of headers: no answer but an error status, or the connection closed.
        let mut big = TcpStream::connect(metrics_addr()).expect("connect");
        big.set_read_timeout(Some(Duration::from_secs(6))).ok();
        let header = format!("X-Pad: {}\r\n", "a".repeat(1000));
        let _ = write!(big, "GET /metrics HTTP/1.1\r\nHost: x\r\n");
        for _ in 0..10 {
            let _ = big.write_all(header.as_bytes());
        }
        let _ = big.write_all(b"\r\n");
        let mut answer = String::new();
        let _ = big.read_to_string(&mut answer);
        assert!(
            !answer.starts_with("HTTP/1.1 200"),
            "an oversized request was answered: {answer}"
        );
        // Junk.
        let mut junk = TcpStream::connect(metrics_addr()).expect("connect");
        junk.set_read_timeout(Some(Duration::from_secs(6))).ok();
        let _ = junk.write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n");
        let mut answer = Vec::new();
        let _ = junk.read_to_end(&mut answer);
        assert!(!answer.starts_with(b"HTTP/1.1 200"));
        // A head that is never finished: closed after about 5 s.
        let mut slow = TcpStream::connect(metrics_addr()).expect("connect");
        slow.set_read_timeout(Some(Duration::from_secs(10))).ok();
        let started = Instant::now();
        let _ = slow.write_all(b"GET /metrics HTTP/1.1\r\n");
        let mut answer = Vec::new();
        let _ = slow.read_to_end(&mut answer);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(4) && took <= Duration::from_secs(7),
            "a slow request was dropped after {took:?}: {answer:?}"
        );
        assert!(matches!(get(metrics_addr(), "/healthz"), Ok((200, _))));
    });
    assert!(wait_until(Duration::from_secs(2), POLL, || {
        matches!(
            lab.node().run(|| get(metrics_addr(), "/healthz")),
            Ok((200, _))
        )
    }));
}
/// The endpoint does not depend on the backend: iptables-nft.
#[test]
fn oversized_and_slow_requests_are_dropped_nft() {
    support::require_kernel!();
    oversized_and_slow_requests_are_dropped(Backend::Nft);
}

/// `/metrics` passes `promtool check metrics` (the Prometheus project's own linter) in the
/// Prometheus text format, with every family and label it had before, the repairs by trigger;
/// a scraper that asks for OpenMetrics gets it.
#[test]
fn metrics_pass_promtool_nft() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nft);
    let guard = serving_guard(&lab);
    let _daemon = Daemon::start(&guard);
    let text = http_get_ok(lab.node(), metrics_addr(), "/metrics");
    assert!(
        text.head
            .to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{}",
        text.head
    );
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/test installs it)");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.body.as_bytes())
        .expect("write to promtool");
    let checked = promtool.wait_with_output().expect("promtool");
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}\n{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr),
        text.body
    );
    for family in [
        "# TYPE nodeport_guard_reloads_total counter",
        "# TYPE nodeport_guard_drift_repairs_total counter",
        "# TYPE nodeport_guard_rule_packets_total counter",
        "# TYPE nodeport_guard_rule_bytes_total counter",
        "# TYPE nodeport_guard_policies gauge",
        "# TYPE nodeport_guard_apply_duration_seconds histogram",
        "nodeport_guard_drift_repairs_total{trigger=\"notification\"} 0",
        "nodeport_guard_rule_packets_total{policy=\"guard-nodeport\",direction=\"ingress\",rule=\"0\",tier=\"default\"}",
    ] {
        assert!(
            text.body.contains(family),
            "{family} missing in\n{}",
            text.body
        );
    }
    let openmetrics = lab.node().run(|| {
        let mut stream = TcpStream::connect(metrics_addr()).expect("connect");
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n"
        )
        .expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read");
        answer
    });
    assert!(
        openmetrics
            .to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{openmetrics}"
    );
    assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
}
