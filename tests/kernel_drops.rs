//! Kernel tests of `nodeport-guard drops`: denied packets read from the NFLOG groups (or from
//! the daemon's stream), each named by the policy rule that dropped it; a group held by
//! another program named; the daemon's drop counting in `/metrics`; and a flood of drops that
//! neither grows the daemon nor holds up its reloads.
//!
//! NFLOG is per network namespace, so every `drops` runs in the node namespace (as `Guard`
//! runs everything). Our rules log with threshold 1 (iptables `--nflog-threshold 1`, nft
//! `queue-threshold 1`), so each packet is sent at once; still, every wait polls with a
//! generous timeout.

mod support;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use support::daemon::{Daemon, counting_guard, http_get_ok, parse_prometheus};
use support::fixtures::{MISSION_NAME, Whitelist};
use support::{
    Backend, Guard, Lab, NflogCapture, POLL, addr, backend_tests, ports, sa, wait_until,
};

/// A source the mission whitelist does not list.
const BLOCKED: std::net::Ipv4Addr = addr::CLIENT_V4[1];

/// How long `drops` may take to bind the groups, or a packet to show.
const WAIT: Duration = Duration::from_secs(10);

/// `/metrics` on the node's loopback.
const METRICS_ADDR: &str = "127.0.0.1:9808";

/// The series of the mission policy's Deny rule (rule 1) in `/metrics`.
fn mission_series() -> String {
    format!(
        "nodeport_guard_dropped_packets_total{{policy=\"{MISSION_NAME}\",rule=\"1\",direction=\"ingress\",tier=\"default\"}}"
    )
}

/// Whether some socket has bound NFLOG group `group` in the node namespace.
fn group_bound(lab: &Lab, group: u16) -> bool {
    let out = lab
        .node()
        .exec("cat", &["/proc/net/netfilter/nfnetlink_log"]);
    out.stdout
        .lines()
        .any(|line| line.split_whitespace().next() == Some(&group.to_string()))
}

/// SYNs from `BLOCKED` to the NodePort until `done` says so (each attempt is dropped).
fn knock_until(lab: &Lab, timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    wait_until(timeout, POLL, || {
        let _ = lab.connect(BLOCKED.into(), nodeport, Duration::from_millis(300));
        done()
    })
}

/// The JSON lines in a log that mixes stdout and stderr.
fn json_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// The packet of the blocked client as `drops --json` shows it.
#[track_caller]
fn assert_names_the_mission_rule(packet: &serde_json::Value) {
    assert_eq!(packet["kind"], "rule", "{packet}");
    assert_eq!(packet["policy"], MISSION_NAME, "{packet}");
    assert_eq!(packet["tier"], "default", "{packet}");
    assert_eq!(packet["rule"], 1, "{packet}");
    assert_eq!(packet["direction"], "ingress", "{packet}");
    assert_eq!(packet["action"], "deny", "{packet}");
    assert_eq!(packet["staged"], false, "{packet}");
    assert_eq!(packet["prefix"], format!("DPI1|{MISSION_NAME}"), "{packet}");
    assert_eq!(packet["family"], "ipv4", "{packet}");
    assert_eq!(packet["protocol"], "tcp", "{packet}");
    assert_eq!(packet["src"], BLOCKED.to_string(), "{packet}");
    assert_eq!(packet["dst"], addr::NODE_V4.to_string(), "{packet}");
    assert_eq!(packet["dstPort"], ports::NODEPORT, "{packet}");
    assert!(packet["inInterface"].is_string(), "{packet}");
    let words = packet["description"].as_str().unwrap_or_default();
    assert_eq!(
        words,
        format!("denied by policy {MISSION_NAME} (tier default) ingress rule 1"),
        "{packet}"
    );
}

/// (a) `drops --count 1 --json`, bound to the groups itself, names the policy and rule that
/// dropped a blocked client's SYN, and exits 0 after that one packet.
fn drops_names_the_policy_and_rule_of_a_blocked_client(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("nodeport.yaml", &Whitelist::mission().yaml());
    guard.apply();
    let mut drops = guard.spawn(&["drops", "--count", "1", "--json"], "drops.log");
    assert!(
        wait_until(WAIT, POLL, || group_bound(&lab, 1)),
        "drops never bound group 1\n{}",
        drops.log()
    );
    let exited = knock_until(&lab, WAIT, || !drops.running());
    assert!(exited, "drops --count 1 did not exit\n{}", drops.log());
    let status = drops.wait_exit(WAIT).expect("exited");
    assert!(status.success(), "{status:?}\n{}", drops.log());
    let packets = json_lines(&drops.log());
    assert_eq!(packets.len(), 1, "{}", drops.log());
    assert_names_the_mission_rule(&packets[0]);
}
backend_tests!(drops_names_the_policy_and_rule_of_a_blocked_client);

/// (b) With tcpdump holding group 1, `drops` exits 1 and names it (the kernel allows one
/// listener per group). Not about the backend: legacy only.
#[test]
fn drops_names_the_program_holding_the_group() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Legacy);
    let guard = Guard::new(&lab);
    guard.write_policy("nodeport.yaml", &Whitelist::mission().yaml());
    let _tcpdump = NflogCapture::start(lab.node(), 1);
    let out = guard.run_expect(&["drops"], 1);
    assert!(
        out.stderr
            .contains("NFLOG group 1 is held by another program: tcpdump (pid "),
        "{out}"
    );
    assert!(out.stderr.contains("use the daemon's stream"), "{out}");
    // --since needs the daemon's buffer: without a daemon that is an error, said so.
    let out = guard.run_expect(&["drops", "--since", "1m"], 1);
    assert!(
        out.stderr.contains("daemon's buffer of recent drops"),
        "{out}"
    );
}

/// (c) With the daemon running it is the listener: `drops` reads its stream (the group is
/// the daemon's), names the rule, `/metrics` counts the drop under that rule, and
/// `drops --since` replays the recent ones from the daemon's buffer.
fn drops_reads_the_daemons_stream_and_metrics_count(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = counting_guard(&lab, METRICS_ADDR);
    guard.write_policy("nodeport.yaml", &Whitelist::mission().yaml());
    let daemon = Daemon::start(&guard);
    daemon.expect_log(0, "counting drops", WAIT);
    let socket = guard.state_dir().join("drops.sock");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&socket)
            .unwrap_or_else(|e| panic!("{}: {e}", socket.display()))
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "{}", socket.display());

    let mut drops = guard.spawn(&["drops", "--count", "1", "--json"], "drops.log");
    let exited = knock_until(&lab, WAIT, || !drops.running());
    assert!(
        exited,
        "drops --count 1 did not exit\n{}\n--- daemon ---\n{}",
        drops.log(),
        daemon.log()
    );
    let status = drops.wait_exit(WAIT).expect("exited");
    assert!(status.success(), "{status:?}\n{}", drops.log());
    let packets = json_lines(&drops.log());
    assert_eq!(packets.len(), 1, "{}", drops.log());
    assert_names_the_mission_rule(&packets[0]);

    let metrics_addr: SocketAddr = METRICS_ADDR.parse().expect("address");
    let body = http_get_ok(lab.node(), metrics_addr, "/metrics").body;
    let samples = parse_prometheus(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    let counted = samples.get(&mission_series()).copied().unwrap_or(0.0);
    assert!(counted >= 1.0, "{} = {counted}\n{body}", mission_series());
    assert_eq!(
        samples.get("nodeport_guard_drops_listening"),
        Some(&1.0),
        "{body}"
    );

    let out = guard.run_expect(&["drops", "--since", "5m", "--count", "1", "--json"], 0);
    let replayed = json_lines(&out.stdout);
    assert_eq!(replayed.len(), 1, "{out}");
    assert_names_the_mission_rule(&replayed[0]);
}
backend_tests!(drops_reads_the_daemons_stream_and_metrics_count);

/// The daemon's resident memory in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// Sends UDP datagrams from `BLOCKED` to `dst` for `duration`; returns how many were sent.
fn flood(dst: SocketAddr, duration: Duration) -> impl FnOnce() -> u64 + Send + 'static {
    move || {
        let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V4(BLOCKED), 0)).expect("bind");
        let started = Instant::now();
        let mut sent = 0u64;
        while started.elapsed() < duration {
            for _ in 0..100 {
                if socket.send_to(b"flood", dst).is_ok() {
                    sent += 1;
                }
            }
        }
        sent
    }
}

/// Two UDP Deny rules (indices 1 and 2) before the mission's TCP Deny, for the flood.
fn udp_denies(ports: &[u16]) -> String {
    ports
        .iter()
        .map(|port| {
            format!("    - action: Deny\n      protocol: UDP\n      destination:\n        ports: [{port}]\n")
        })
        .collect()
}

/// (d) Tens of thousands of denied packets in a couple of seconds: the daemon counts them (or
/// says how many it skipped), its memory stays flat, and a reload during the flood completes
/// within seconds. Legacy only: the bound is the daemon's, not the backend's.
#[test]
fn a_flood_of_drops_keeps_the_daemon_small_and_reloading() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Legacy);
    let guard = counting_guard(&lab, METRICS_ADDR);
    let policy = Whitelist::mission().rules_before_deny(&udp_denies(&[30999]));
    guard.write_policy("nodeport.yaml", &policy.yaml());
    let daemon = Daemon::start(&guard);
    daemon.expect_log(0, "counting drops", WAIT);
    let target = sa(addr::NODE_V4, 30999);
    // Warm up (first allocations, the first client of the stream), then measure.
    lab.client().run(flood(target, Duration::from_millis(300)));
    let mut stream = guard.spawn(&["drops", "--json"], "stream.log");
    wait_until(WAIT, POLL, || {
        stream.log().contains("\"dstPort\":30999") || {
            lab.client().run(flood(target, Duration::from_millis(50)));
            false
        }
    });
    let before = rss_kib(daemon.pid());

    let flooding = lab
        .client()
        .spawn("flood", flood(target, Duration::from_secs(3)));
    // A reload in the middle of the flood (once the stream shows it): one more rule, so that
    // something changes.
    let shown = stream.log().len();
    wait_until(WAIT, POLL, || stream.log().len() > shown + 64 * 1024);
    let mark = daemon.mark();
    let more = Whitelist::mission().rules_before_deny(&udp_denies(&[30999, 30998]));
    guard.write_policy("nodeport.yaml", &more.yaml());
    let started = Instant::now();
    let applied = daemon.wait_for_log(mark, "applied", Duration::from_secs(5));
    let reload = started.elapsed();
    let sent = flooding.join().expect("flood");
    assert!(
        applied.is_some(),
        "no reload during the flood\n{}",
        daemon.log()
    );
    let after = rss_kib(daemon.pid());
    let body = http_get_ok(
        lab.node(),
        METRICS_ADDR.parse().expect("address"),
        "/metrics",
    )
    .body;
    let samples = parse_prometheus(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    let counted: f64 = samples
        .iter()
        .filter(|(k, _)| k.starts_with("nodeport_guard_dropped_packets_total{"))
        .map(|(_, v)| v)
        .sum();
    let skipped = samples
        .get("nodeport_guard_dropped_packets_skipped_total")
        .copied()
        .unwrap_or(0.0);
    eprintln!(
        "flood: {sent} datagrams sent, {counted} drops counted, {skipped} skipped; RSS {before} KiB before, {after} KiB after; reload took {reload:?}"
    );
    assert!(
        sent >= 20_000,
        "the flood was too small to mean anything: {sent}"
    );
    assert!(counted >= 10_000.0, "{counted} counted of {sent}\n{body}");
    assert!(
        after <= before + 16 * 1024,
        "RSS grew from {before} KiB to {after} KiB during a flood of {sent} drops"
    );
    assert!(reload < Duration::from_secs(5), "reload took {reload:?}");
    stream.signal(nix::sys::signal::Signal::SIGTERM);
    let status = stream.wait_exit(WAIT).expect("drops exits on SIGTERM");
    assert!(status.success(), "{status:?}");
    let log = stream.log();
    assert!(
        log.contains(" packets shown, "),
        "no summary on SIGTERM:\n{}",
        &log[log.len().saturating_sub(2000)..]
    );
    assert!(log.contains("top sources:"), "no top sources");
    assert!(
        log.contains(&BLOCKED.to_string()),
        "the flooding source is not in the summary"
    );
}

/// A normal egress policy: UDP to 40999 denied by rule 0, everything else not allowed, so the
/// tier's default deny drops it (`DPE|default`).
const EGRESS_POLICY: &str = "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: deny-out
spec:
  selector: all()
  types: [Egress]
  egress:
    - action: Deny
      protocol: UDP
      destination:
        ports: [40999]
";

/// Runs `drops --count 1 --json <filters>` while the node sends UDP datagrams to each of
/// `targets` in turn; returns the one packet it printed.
fn one_egress_drop(
    lab: &Lab,
    guard: &Guard<'_>,
    filters: &[&str],
    targets: &[SocketAddr],
) -> serde_json::Value {
    let mut args = vec!["drops", "--count", "1", "--json"];
    args.extend(filters);
    let mut drops = guard.spawn(&args, "drops-egress.log");
    assert!(
        wait_until(WAIT, POLL, || group_bound(lab, 2)),
        "drops never bound group 2\n{}",
        drops.log()
    );
    let targets = targets.to_vec();
    let exited = wait_until(WAIT, POLL, || {
        let targets = targets.clone();
        lab.node().run(move || {
            for target in targets {
                let bind = SocketAddr::new(
                    if target.is_ipv4() {
                        IpAddr::V4(addr::NODE_V4)
                    } else {
                        IpAddr::V6(addr::NODE_V6)
                    },
                    0,
                );
                let socket = UdpSocket::bind(bind).expect("bind");
                let _ = socket.send_to(b"out", target);
            }
        });
        !drops.running()
    });
    assert!(exited, "drops {filters:?} did not exit\n{}", drops.log());
    let status = drops.wait_exit(WAIT).expect("exited");
    assert!(status.success(), "{status:?}\n{}", drops.log());
    let packets = json_lines(&drops.log());
    assert_eq!(packets.len(), 1, "{}", drops.log());
    packets[0].clone()
}

/// Egress drops come on group 2: a rule's (`DPE0|deny-out`), with `--port`; the end of the
/// tier's (`DPE|default`) for what no rule allowed; IPv6 with `--src`. Output packets have no
/// input interface.
fn egress_drops_name_the_rule_and_the_end_of_the_tier(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("egress.yaml", EGRESS_POLICY);
    guard.apply();
    let by_rule = sa(addr::CLIENT_V4[0], 40999);
    let by_tier = sa(addr::CLIENT_V4[0], 40998);

    let rule = one_egress_drop(&lab, &guard, &["--port", "40999"], &[by_tier, by_rule]);
    assert_eq!(rule["kind"], "rule", "{rule}");
    assert_eq!(rule["policy"], "deny-out", "{rule}");
    assert_eq!(rule["rule"], 0, "{rule}");
    assert_eq!(rule["direction"], "egress", "{rule}");
    assert_eq!(rule["group"], 2, "{rule}");
    assert_eq!(rule["protocol"], "udp", "{rule}");
    assert_eq!(rule["dstPort"], 40999, "{rule}");
    assert_eq!(rule["inInterface"], serde_json::Value::Null, "{rule}");

    let tier = one_egress_drop(&lab, &guard, &["--port", "40998"], &[by_rule, by_tier]);
    assert_eq!(tier["kind"], "endOfTier", "{tier}");
    assert_eq!(tier["tier"], "default", "{tier}");
    assert_eq!(tier["direction"], "egress", "{tier}");
    assert_eq!(tier["prefix"], "DPE|default", "{tier}");
    assert!(
        tier["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("denied at the end of tier default egress")),
        "{tier}"
    );

    let v6 = sa(addr::CLIENT_V6[0], 40999);
    let ipv6 = one_egress_drop(&lab, &guard, &["--src", "2001:db8::/32"], &[by_rule, v6]);
    assert_eq!(ipv6["family"], "ipv6", "{ipv6}");
    assert_eq!(ipv6["src"], addr::NODE_V6.to_string(), "{ipv6}");
    assert_eq!(ipv6["dst"], addr::CLIENT_V6[0].to_string(), "{ipv6}");
    assert_eq!(ipv6["policy"], "deny-out", "{ipv6}");
}
backend_tests!(egress_drops_name_the_rule_and_the_end_of_the_tier);

/// With tcpdump holding group 1 before the daemon starts, the daemon says so, enforces the
/// policy all the same, and reports that it is not counting drops.
#[test]
fn the_daemon_enforces_without_counting_when_the_group_is_held() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nftables);
    let guard = counting_guard(&lab, METRICS_ADDR);
    guard.write_policy("nodeport.yaml", &Whitelist::mission().yaml());
    let _tcpdump = NflogCapture::start(lab.node(), 1);
    let mut daemon = Daemon::start(&guard);
    daemon.expect_log(
        0,
        "NFLOG group 1 is held by another program: tcpdump (pid ",
        WAIT,
    );
    support::check_reachability(
        &lab,
        "enforced without drop counting",
        &[
            support::dropped(BLOCKED, sa(addr::NODE_V4, ports::NODEPORT)),
            support::open(
                addr::CLIENT_V4[0],
                sa(addr::NODE_V4, ports::NODEPORT),
                support::replies::NODEPORT_TARGET,
            ),
        ],
    );
    let body = http_get_ok(
        lab.node(),
        METRICS_ADDR.parse().expect("address"),
        "/metrics",
    )
    .body;
    let samples = parse_prometheus(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    assert_eq!(
        samples.get("nodeport_guard_drops_listening"),
        Some(&0.0),
        "{body}"
    );
    assert!(!guard.state_dir().join("drops.sock").exists());
    daemon.assert_running("after the warning");
}
