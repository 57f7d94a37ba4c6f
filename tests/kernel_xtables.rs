//! The sign the daemon trusts iptables-legacy's cached view by: the digest of the x_tables
//! rules, read with two `getsockopt`s per table. It must stay the same while only the
//! counters move (traffic), and change with any rule: added, removed, or replaced by one of
//! the same size, which the entry count and size of `IPT_SO_GET_INFO` cannot see. And the
//! xtables lock the daemon holds around a cached reconcile must keep other iptables commands
//! out while letting its own through.

mod support;

use nodeport_guard::dataplane::xtables::{XtablesLock, digest};
use support::Netns;

fn digest_in(netns: &Netns) -> u128 {
    netns
        .run(digest)
        .unwrap_or_else(|error| panic!("digest in {}: {error}", netns.name()))
}

/// Runs `iptables-legacy` (or `ip6tables-legacy`) with `-w 30` in `netns`.
#[track_caller]
fn legacy(netns: &Netns, program: &str, rule: &str) {
    let mut args = vec!["-w", "30"];
    args.extend(rule.split_whitespace());
    netns.exec_ok(program, &args);
}

/// The packet counter of the first rule of `chain` in `table`.
fn first_rule_packets(netns: &Netns, table: &str, chain: &str) -> u64 {
    let listing = netns.exec_ok(
        "iptables-legacy",
        &["-w", "30", "-t", table, "-L", chain, "-v", "-x", "-n"],
    );
    listing
        .lines()
        .nth(2)
        .and_then(|line| line.split_whitespace().next())
        .and_then(|packets| packets.parse().ok())
        .unwrap_or_else(|| panic!("no first rule in\n{listing}"))
}

#[test]
fn the_digest_follows_the_rules_and_ignores_the_counters() {
    support::require_kernel!();
    let netns = Netns::new();
    netns.ip(&["link", "set", "lo", "up"]);
    let empty = digest_in(&netns);
    assert_eq!(digest_in(&netns), empty, "two readings of the same rules");

    legacy(
        &netns,
        "iptables-legacy",
        "-t mangle -A OUTPUT -s 192.0.2.1 -j ACCEPT",
    );
    legacy(
        &netns,
        "iptables-legacy",
        "-t mangle -A OUTPUT -o lo -j ACCEPT",
    );
    let two_rules = digest_in(&netns);
    assert_ne!(two_rules, empty, "rules added");

    // Traffic moves the counters, not the digest.
    legacy(
        &netns,
        "iptables-legacy",
        "-t mangle -I OUTPUT 1 -o lo -j ACCEPT",
    );
    let counted = digest_in(&netns);
    let before = first_rule_packets(&netns, "mangle", "OUTPUT");
    netns.run(|| {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        for _ in 0..3 {
            socket.send_to(b"count me", "127.0.0.1:9").expect("send");
        }
    });
    assert!(
        first_rule_packets(&netns, "mangle", "OUTPUT") > before,
        "the datagrams did not move the counters"
    );
    assert_eq!(digest_in(&netns), counted, "only counters moved");

    // A rule replaced by one of the same size: same entry count, same table size.
    legacy(
        &netns,
        "iptables-legacy",
        "-t mangle -R OUTPUT 2 -s 192.0.2.2 -j ACCEPT",
    );
    let replaced = digest_in(&netns);
    assert_ne!(replaced, counted, "a source address changed");

    // Deleting it again brings back an earlier digest: the digest is of content, not of time.
    legacy(&netns, "iptables-legacy", "-t mangle -D OUTPUT 1");
    legacy(
        &netns,
        "iptables-legacy",
        "-t mangle -R OUTPUT 1 -s 192.0.2.1 -j ACCEPT",
    );
    assert_eq!(digest_in(&netns), two_rules, "the same rules as before");

    // IPv6 rules count too, and so does a table that appears.
    legacy(
        &netns,
        "ip6tables-legacy",
        "-t raw -A PREROUTING -s 2001:db8::1 -j ACCEPT",
    );
    assert_ne!(digest_in(&netns), two_rules, "an IPv6 rule");
    let with_v6 = digest_in(&netns);
    legacy(
        &netns,
        "iptables-legacy",
        "-t nat -A POSTROUTING -o lo -j RETURN",
    );
    assert_ne!(digest_in(&netns), with_v6, "a rule in another table");
}

#[test]
fn the_xtables_lock_keeps_other_iptables_out_and_lets_ours_in() {
    support::require_kernel!();
    let netns = Netns::new();
    let lock = XtablesLock::take(std::time::Duration::from_secs(30)).expect("the xtables lock");
    // Another program, waiting a second (iptables 1.8.9 would otherwise wait for ever):
    // refused while the lock is held.
    let other = netns.exec(
        "iptables-legacy",
        &["-w", "1", "-t", "mangle", "-A", "OUTPUT", "-j", "ACCEPT"],
    );
    assert!(!other.success(), "a write got past the lock: {other}");
    // Ours take the lock file beside it (with `-w 1` too, so that a lock file not passed on
    // fails here instead of waiting for ever).
    let ours = std::process::Command::new("ip")
        .args(["netns", "exec", netns.name(), "iptables-legacy", "-w", "1"])
        .args(["-t", "mangle", "-A", "OUTPUT", "-j", "ACCEPT"])
        .env("XTABLES_LOCKFILE", lock.children_lock_file())
        .output()
        .expect("run iptables-legacy");
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    drop(lock);
    let after = netns.exec(
        "iptables-legacy",
        &["-w", "5", "-t", "mangle", "-A", "OUTPUT", "-j", "ACCEPT"],
    );
    assert!(after.success(), "the lock was not released: {after}");
}

/// The set poll's reading of an ipset: its size from the headers, and a fingerprint of its
/// members that a swap of one member for another changes though the size stays, and that the
/// order members were added in does not.
#[test]
fn an_ipset_fingerprint_sees_a_member_swapped_and_not_the_order() {
    use nodeport_guard::dataplane::ipset_sizes::{fingerprint_of, set_fingerprint, set_sizes};
    support::require_kernel!();
    let netns = Netns::new();
    let ipset = |args: &str| {
        netns.exec_ok("ipset", &args.split_whitespace().collect::<Vec<_>>());
    };
    let read = |name: &'static str| {
        netns
            .run(move || set_fingerprint(name))
            .unwrap_or_else(|error| panic!("fingerprint of {name}: {error}"))
    };
    ipset("create npg4-a hash:net family inet");
    ipset("create npg4-b hash:net family inet");
    for member in ["198.51.100.10", "203.0.113.0/28", "192.0.2.7"] {
        ipset(&format!("add npg4-a {member}"));
    }
    for member in ["192.0.2.7", "198.51.100.10", "203.0.113.0/28"] {
        ipset(&format!("add npg4-b {member}"));
    }
    assert_eq!(read("npg4-a"), read("npg4-b"), "the same members");
    // What was written, as `ipset save` spells it, gives the same fingerprint.
    let saved = netns.exec_ok("ipset", &["save", "npg4-a"]);
    let members: Vec<&str> = saved
        .lines()
        .filter_map(|line| line.strip_prefix("add npg4-a "))
        .collect();
    assert_eq!(members.len(), 3, "{saved}");
    assert_eq!(fingerprint_of(members), Some(read("npg4-a")), "{saved}");
    ipset("create npg4-p hash:ip,port family inet");
    ipset("add npg4-p 192.0.2.1,tcp:8080");
    ipset("add npg4-p 192.0.2.1,udp:53");
    ipset("add npg4-p 192.0.2.9,sctp:9");
    let saved = netns.exec_ok("ipset", &["save", "npg4-p"]);
    let members: Vec<&str> = saved
        .lines()
        .filter_map(|line| line.strip_prefix("add npg4-p "))
        .collect();
    assert_eq!(fingerprint_of(members), Some(read("npg4-p")), "{saved}");
    let before = read("npg4-a");
    ipset("del npg4-a 198.51.100.10");
    ipset("add npg4-a 198.51.100.20");
    let sizes = netns.run(set_sizes).expect("sizes");
    assert_eq!(sizes.get("npg4-a"), Some(&3), "{sizes:?}");
    assert_ne!(read("npg4-a"), before, "a member swapped");
    ipset("del npg4-a 198.51.100.20");
    ipset("add npg4-a 198.51.100.10");
    assert_eq!(read("npg4-a"), before, "swapped back");
    // A set of 5,000 members comes in several datagrams.
    ipset("create npg6-big hash:ip family inet6 maxelem 65536");
    let members: String = (0..5000u32)
        .map(|at| format!("add npg6-big 2001:db8::{at:x}\n"))
        .collect();
    netns
        .exec_with_stdin("ipset", &["restore"], members.as_bytes())
        .expect_success();
    let big = read("npg6-big");
    let saved = netns.exec_ok("ipset", &["save", "npg6-big"]);
    let members: Vec<&str> = saved
        .lines()
        .filter_map(|line| line.strip_prefix("add npg6-big "))
        .collect();
    assert_eq!(members.len(), 5000);
    assert_eq!(fingerprint_of(members), Some(big));
    ipset("del npg6-big 2001:db8::1");
    ipset("add npg6-big 2001:db8:1::1");
    assert_ne!(read("npg6-big"), big, "a member swapped in a big set");
}

/// The tables `exposure`, `--backend auto` and the iptables backends look for are read from
/// the kernel's dump of the table headers: the same tables, in every family, as `nft list
/// tables` prints, iptables-nft's among them.
#[test]
fn the_nf_tables_tables_are_those_nft_lists() {
    use nodeport_guard::dataplane::nft_tables::tables;
    support::require_kernel!();
    let netns = Netns::new();
    let script = "add table ip t4\nadd table ip6 t6\nadd table inet both\nadd table arp a\n\
                  add table bridge br\nadd table netdev nd\n";
    netns
        .exec_with_stdin("nft", &["-f", "-"], script.as_bytes())
        .expect_success();
    netns.exec_ok("iptables-nft", &["-t", "mangle", "-N", "npg-probe"]);
    netns.exec_ok("ip6tables-nft", &["-t", "raw", "-N", "npg-probe"]);
    let mut read: Vec<String> = netns
        .run(tables)
        .expect("the dump")
        .into_iter()
        .map(|(family, name)| format!("table {family} {name}"))
        .collect();
    let mut listed: Vec<String> = netns
        .exec_ok("nft", &["list", "tables"])
        .lines()
        .map(str::to_owned)
        .collect();
    read.sort();
    listed.sort();
    assert_eq!(read, listed);
    for table in [
        "table ip mangle",
        "table ip6 raw",
        "table netdev nd",
        "table inet both",
    ] {
        assert!(read.iter().any(|line| line == table), "{table} in {read:?}");
    }
    // An empty namespace has none.
    let empty = Netns::new();
    assert_eq!(empty.run(tables).expect("the dump"), []);
}
