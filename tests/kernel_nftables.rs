//! Kernel tests of what only the native nftables backend has: its own tables, base chains at
//! their priorities, and drift done with `nft`. (Every behaviour test of the other suites also
//! runs on this backend: `backend_tests!` makes an `nftables` variant.)

mod support;

use support::{
    Backend, Family, Guard, Lab, addr, assert_same_state, check_reachability, dropped, open, ports,
    replies, sa,
};

/// The NodePort whitelist: 198.51.100.10 may reach 30008, everyone else is dropped there.
/// (Not the mission fixture: it lists an IPv6 source too, so both nftables tables get rules.)
const WHITELIST: &str = r#"apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: guard-nodeport
spec:
  preDNAT: true
  applyOnForward: true
  ingress:
    - action: Allow
      source:
        nets: [198.51.100.10/32]
    - action: Allow
      source:
        nets: ["2001:db8:1::10/128"]
    - action: Deny
      protocol: TCP
      destination:
        ports: [30008]
"#;

fn nft(lab: &Lab, args: &[&str]) -> String {
    lab.node().exec_ok("nft", args)
}

fn guarded(lab: &Lab, context: &str) {
    check_reachability(
        lab,
        context,
        &[
            open(
                addr::CLIENT_V4[0],
                sa(addr::NODE_V4, ports::NODEPORT),
                replies::NODEPORT_TARGET,
            ),
            dropped(addr::CLIENT_V4[1], sa(addr::NODE_V4, ports::NODEPORT)),
            open(
                addr::CLIENT_V6[0],
                sa(addr::NODE_V6, ports::NODEPORT),
                replies::NODEPORT_TARGET,
            ),
            dropped(addr::CLIENT_V6[1], sa(addr::NODE_V6, ports::NODEPORT)),
        ],
    );
}

fn unguarded(lab: &Lab, context: &str) {
    check_reachability(
        lab,
        context,
        &[open(
            addr::CLIENT_V4[1],
            sa(addr::NODE_V4, ports::NODEPORT),
            replies::NODEPORT_TARGET,
        )],
    );
}

/// The backend writes one table per family, `ip nodeport_guard` and `ip6 nodeport_guard`, with
/// its pre-DNAT base chain at priority mangle − 1 (before DNAT at −100, after conntrack at
/// −200), next to kube-proxy-style iptables-nft DNAT rules, which it leaves alone; `cleanup`
/// deletes both tables and nothing else.
#[test]
fn tables_and_priorities_next_to_iptables_nft() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nftables);
    let guard = Guard::new(&lab);
    let before = guard.snapshot();
    guard.write_policy("a.yaml", WHITELIST);
    guard.apply();
    let tables = nft(&lab, &["list", "tables"]);
    assert!(tables.contains("table ip nodeport_guard"), "{tables}");
    assert!(tables.contains("table ip6 nodeport_guard"), "{tables}");
    let base = nft(
        &lab,
        &[
            "list",
            "chain",
            "ip",
            "nodeport_guard",
            "npg-mangle-PREROUTING",
        ],
    );
    assert!(
        base.contains("hook prerouting priority mangle - 1"),
        "{base}"
    );
    // The lab's DNAT is iptables-nft's, untouched.
    assert_same_state(
        &before.foreign(),
        &guard.snapshot().foreign(),
        "iptables rules after apply",
    );
    guarded(&lab, "after apply");

    guard.cleanup();
    let tables = nft(&lab, &["list", "tables"]);
    assert!(!tables.contains("nodeport_guard"), "{tables}");
    assert_same_state(&before, &guard.snapshot(), "after cleanup");
    unguarded(&lab, "after cleanup");
}

/// Drift done with `nft` (our base chain deleted, a policy chain flushed, a foreign rule added
/// to one of our chains, a set member deleted) is reported by `plan --detailed-exitcode` (2)
/// and repaired by `apply` exactly, and a saved plan made before the drift is refused as stale.
#[test]
fn drift_is_reported_repaired_and_makes_saved_plans_stale() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nftables);
    // Only mangle judges here: with the early drop, raw would still drop the denied SYNs.
    let guard = Guard::with_config(&lab, "earlyDrop: false\n");
    guard.write_policy("a.yaml", WHITELIST);
    guard.apply();
    let applied = guard.snapshot().canonical();
    let plan_file = guard.path("saved.plan");
    let plan_file = plan_file.to_str().expect("utf-8 path");
    guard.run_expect(&["plan", "--out", plan_file], 0);

    let policy_chain = guard
        .snapshot()
        .chains(Family::V4, "mangle", "npg-pi-")
        .into_iter()
        .next()
        .expect("a policy chain");
    let nft_chain = support::snapshot::nft_chain("mangle", &policy_chain);
    nft(
        &lab,
        &[
            "delete",
            "chain",
            "ip",
            "nodeport_guard",
            "npg-mangle-PREROUTING",
        ],
    );
    nft(
        &lab,
        &["flush", "chain", "ip6", "nodeport_guard", &nft_chain],
    );
    nft(
        &lab,
        &[
            "add",
            "rule",
            "ip",
            "nodeport_guard",
            "npg-m-PREROUTING",
            "counter",
            "accept",
        ],
    );
    nft(
        &lab,
        &[
            "delete",
            "element",
            "ip",
            "nodeport_guard",
            "npg4-this-host",
            "{",
            "198.51.100.1",
            "}",
        ],
    );
    unguarded(&lab, "after the drift");

    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 2, "drift must be reported: {out}");
    assert!(out.stdout.contains(&policy_chain), "{}", out.stdout);
    assert!(out.stdout.contains("npg4-this-host"), "{}", out.stdout);
    let stale = guard.run_expect(&["apply", "--yes", plan_file], 1);
    assert!(stale.stderr.contains("stale plan"), "{}", stale.stderr);

    guard.apply();
    assert_same_state(&applied, &guard.snapshot().canonical(), "after the repair");
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 0, "{out}");
    guarded(&lab, "after the repair");
}

/// In nftables an `accept` ends only its own chain's evaluation: a foreign accept-everything
/// rule inserted first in iptables-nft's mangle PREROUTING (priority −150) cannot let anyone
/// past our drop, which runs at −151 in our own table.
#[test]
fn a_foreign_accept_cannot_bypass_our_drop() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nftables);
    let guard = Guard::new(&lab);
    guard.write_policy("a.yaml", WHITELIST);
    guard.apply();
    support::iptables(&lab, Family::V4, "-t mangle -I PREROUTING 1 -j ACCEPT");
    support::iptables(&lab, Family::V6, "-t mangle -I PREROUTING 1 -j ACCEPT");
    guarded(&lab, "with a foreign ACCEPT first in mangle PREROUTING");
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 0, "foreign rules are not ours to plan for: {out}");
}

/// A table written by an older release, whose chains were named `<table>-npg-…` and whose
/// base chains `<table>-<CHAIN>` (here one that drops every SYN to the NodePort), with a chain
/// made by hand (`npg-foo`), is rebuilt whole by the first `apply` in one transaction: the whitelist holds, every chain left in the
/// table is named `npg…`, and the next plan has nothing to do.
#[test]
fn a_table_with_an_older_releases_chain_names_is_rebuilt() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nftables);
    let guard = Guard::new(&lab);
    let old = "table ip nodeport_guard {
        chain mangle-npg-PREROUTING {
            tcp dport 30008 counter drop comment \"npg:oldreleaseAAAAAA\"
        }
        chain mangle-PREROUTING {
            type filter hook prerouting priority -151; policy accept;
            counter jump mangle-npg-PREROUTING comment \"npg:oldreleaseBBBBBB\"
        }
        chain npg-foo {
            counter comment \"npg:oldreleaseCCCCCC\"
        }
    }";
    let script = guard.path("old.nft");
    std::fs::write(&script, old).expect("write the old table");
    nft(&lab, &["-f", script.to_str().expect("utf-8 path")]);
    check_reachability(
        &lab,
        "with the older release's table",
        &[dropped(
            addr::CLIENT_V4[0],
            sa(addr::NODE_V4, ports::NODEPORT),
        )],
    );

    guard.write_policy("a.yaml", WHITELIST);
    guard.apply();
    guarded(&lab, "after the upgrade's apply");
    let listing = nft(&lab, &["list", "table", "ip", "nodeport_guard"]);
    let chains: Vec<&str> = listing
        .lines()
        .filter_map(|line| line.trim().strip_prefix("chain "))
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(!chains.is_empty(), "{listing}");
    assert!(
        chains.iter().all(|chain| chain.starts_with("npg")),
        "{listing}"
    );
    assert!(!listing.contains("oldrelease"), "{listing}");
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 0, "the rebuilt table is what the policies say: {out}");

    // A chain made by hand in our table, named like ours but of neither of our forms: the
    // next apply removes it (rebuilding the table), and the whitelist holds.
    nft(&lab, &["add", "chain", "ip", "nodeport_guard", "npg-foo"]);
    guard.apply();
    let listing = nft(&lab, &["list", "table", "ip", "nodeport_guard"]);
    assert!(!listing.contains("npg-foo"), "{listing}");
    guarded(&lab, "after the hand-made chain's apply");
}

/// The daemon repairs drift done with `nft` within its resync interval (1 s): a deleted base
/// chain, a flushed policy chain, a deleted set member; each with a warning in its log, and
/// the whitelist holds again after each.
#[test]
fn the_daemon_repairs_nft_drift_within_the_resync_interval() {
    use std::time::Duration;
    use support::daemon::{Daemon, daemon_config};
    support::require_kernel!();
    let lab = Lab::new(Backend::Nftables);
    let guard = Guard::with_config(&lab, &daemon_config("1s", ""));
    guard.write_policy("a.yaml", WHITELIST);
    let daemon = Daemon::start(&guard);
    guarded(&lab, "at start");
    let applied = guard.snapshot().ours().canonical();
    let policy_chain = support::snapshot::nft_chain(
        "mangle",
        &guard
            .snapshot()
            .chains(Family::V4, "mangle", "npg-pi-")
            .into_iter()
            .next()
            .expect("a policy chain"),
    );
    let drifts: [(&str, &[&str]); 3] = [
        (
            "a deleted base chain",
            &[
                "delete",
                "chain",
                "ip",
                "nodeport_guard",
                "npg-mangle-PREROUTING",
            ],
        ),
        (
            "a flushed policy chain",
            &["flush", "chain", "ip", "nodeport_guard", &policy_chain],
        ),
        (
            "a deleted set member",
            &[
                "delete",
                "element",
                "ip",
                "nodeport_guard",
                "npg4-this-host",
                "{",
                "198.51.100.1",
                "}",
            ],
        ),
    ];
    for (what, command) in drifts {
        let mark = daemon.mark();
        nft(&lab, command);
        daemon.expect_log(mark, "drift repaired", Duration::from_secs(5));
        let repaired = support::wait_until(Duration::from_secs(5), support::guard::POLL, || {
            guard.snapshot().ours().canonical() == applied
        });
        assert!(
            repaired,
            "{what} was not repaired:\n{}",
            applied.diff(&guard.snapshot().ours().canonical())
        );
        guarded(&lab, &format!("after repairing {what}"));
    }
}
