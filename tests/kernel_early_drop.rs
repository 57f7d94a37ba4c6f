//! Kernel tests of the early drop (`earlyDrop`, on by default) under a SYN flood: the TCP
//! SYNs the whitelist denies are dropped in raw `PREROUTING`, before connection tracking,
//! while whitelisted clients go on connecting and denied ones stay out.
//!
//! "Before connection tracking" is seen by an observer of the test's own: an nftables base
//! chain right after conntrack (priority -199, before mangle at -150) that counts the flood's
//! SYNs reaching it. With `earlyDrop: false` it counts them (the control: mangle drops them
//! after conntrack); with the early drop it sees none.

mod support;

use std::net::SocketAddrV4;
use std::time::Duration;

use support::fixtures::{MISSION_NAME, mission_policy};
use support::{
    Backend, CONNECT_TIMEOUT, Connect, ConnectError, DROP_TIMEOUT, Flood, Guard, Lab, addr,
    backend_tests, conntrack_list, ports, replies, sa, wait_until,
};

/// The observer: a counter of the flood's SYNs right after connection tracking.
const OBSERVER: &str = "table ip npgtest_observer {
  chain after_conntrack {
    type filter hook prerouting priority -199; policy accept;
    ip saddr 203.0.113.64-203.0.113.255 tcp flags syn / syn,ack counter
  }
}
";

/// Flood packets to send before the connects start, and at least while they run.
const FLOOD_PACKETS: u64 = 20_000;

fn observed(lab: &Lab) -> u64 {
    let listing = lab.node().exec_ok(
        "nft",
        &["list", "chain", "ip", "npgtest_observer", "after_conntrack"],
    );
    listing
        .split_whitespace()
        .skip_while(|word| *word != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {listing}"))
}

fn reset_observer(lab: &Lab) {
    lab.node().exec_ok(
        "nft",
        &["reset", "counters", "table", "ip", "npgtest_observer"],
    );
}

/// Runs a flood until it sent [`FLOOD_PACKETS`], then `during`, then stops it.
fn flooded<R>(lab: &Lab, during: impl FnOnce() -> R) -> (R, u64) {
    let nodeport = SocketAddrV4::new(addr::NODE_V4, ports::NODEPORT);
    let flood = Flood::start(lab.client(), nodeport, 1);
    assert!(
        wait_until(Duration::from_secs(20), Duration::from_millis(20), || {
            flood.sent() >= FLOOD_PACKETS
        }),
        "the flood sent only {} packets",
        flood.sent()
    );
    let result = during();
    (result, flood.stop())
}

/// The flood's sources in the node's conntrack table.
fn flood_entries(lab: &Lab) -> Vec<String> {
    conntrack_list(lab.node())
        .into_iter()
        .filter(|entry| {
            entry
                .split_whitespace()
                .find_map(|word| word.strip_prefix("src="))
                .and_then(|src| src.parse::<std::net::Ipv4Addr>().ok())
                .is_some_and(|src| src >= support::flood::FLOOD_FIRST_SOURCE)
        })
        .collect()
}

/// Under a SYN flood from spoofed sources to the guarded NodePort: a whitelisted client's 50
/// sequential connections all complete, a denied client's still times out, no conntrack
/// entry is left for a flood source, and none of the flood's SYNs gets past conntrack (the
/// observer counts none); with `earlyDrop: false` the observer counts them, as mangle drops
/// them only after conntrack.
fn denied_syns_are_dropped_before_connection_tracking_under_a_flood(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("nodeport.yaml", &mission_policy());
    guard.apply();
    lab.node()
        .exec_with_stdin("nft", &["-f", "-"], OBSERVER.as_bytes())
        .expect_success();

    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    let (denied, sent) = flooded(&lab, || {
        for attempt in 1..=50 {
            let reply = Connect::to(nodeport)
                .from(addr::CLIENT_V4[0])
                .timeout(CONNECT_TIMEOUT)
                .tcp(lab.client());
            assert_eq!(
                reply.as_deref(),
                Ok(replies::NODEPORT_TARGET),
                "whitelisted connection {attempt} of 50 during the flood"
            );
        }
        Connect::to(nodeport)
            .from(addr::CLIENT_V4[1])
            .timeout(DROP_TIMEOUT)
            .tcp(lab.client())
    });
    assert!(
        matches!(denied, Err(ConnectError::TimedOut)),
        "a denied client must still time out: {denied:?}"
    );
    assert!(sent >= FLOOD_PACKETS, "{sent}");
    assert_eq!(flood_entries(&lab), Vec::<String>::new());
    assert_eq!(
        observed(&lab),
        0,
        "{sent} flood SYNs sent; none may get past connection tracking"
    );
    // The decision table dropped them (`npg-syn-denied`), and `status` counts them for the
    // Deny rule all the same.
    // (Some of what the sender wrote may be lost in the veth's backlog before netfilter.)
    let counted = deny_rule_packets(&guard);
    assert!(
        counted >= sent / 2,
        "{sent} flood SYNs sent, the Deny rule counts {counted}"
    );
    let raw = guard.our_rules_and_members();
    let denied = match backend {
        Backend::Nftables => support::snapshot::nft_chain("raw", "npg-syn-denied"),
        _ => "npg-syn-denied".to_owned(),
    };
    assert!(raw.contains(&denied), "{raw}");

    // The control: the same flood with every drop in mangle passes conntrack first.
    guard.write_config("earlyDrop: false\n");
    guard.apply();
    reset_observer(&lab);
    let ((), sent) = flooded(&lab, || ());
    let seen = observed(&lab);
    assert!(
        seen > 0,
        "{sent} flood SYNs sent: with earlyDrop off they reach conntrack and mangle"
    );
    assert_eq!(flood_entries(&lab), Vec::<String>::new());
    // Mangle's decision table dropped them, and `status` counts them for the Deny rule.
    let counted = deny_rule_packets(&guard);
    assert!(
        counted >= sent / 2,
        "{sent} flood SYNs sent with earlyDrop off, the Deny rule counts {counted}"
    );
}

/// The packets `status` counts for the mission's Deny rule.
fn deny_rule_packets(guard: &Guard) -> u64 {
    let status = guard.status_json();
    let deny = status["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|row| row["policy"] == MISSION_NAME && row["rule"] == 1)
        .unwrap_or_else(|| panic!("no row for the Deny rule in {status:#}"))
        .clone();
    deny["packets"].as_u64().unwrap_or(0)
}
backend_tests!(denied_syns_are_dropped_before_connection_tracking_under_a_flood);
