//! Kernel tests of `--backend auto`: nodeport-guard writes where the host's other firewall
//! users already are, because iptables-legacy and iptables-nft rules live in different kernel
//! subsystems and a jump put in the wrong one does not run where it seems to.

mod support;

use support::{BIN, Backend, Guard, Lab};

const POLICY: &str = r#"apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: guard-nodeport
spec:
  preDNAT: true
  applyOnForward: true
  ingress:
    - action: Deny
      protocol: TCP
      source:
        nets: [203.0.113.0/24]
      destination:
        ports: [30008]
"#;

/// Runs `nodeport-guard … --backend auto <args>` in the node and checks it succeeded.
fn auto(guard: &Guard<'_>, args: &[&str]) -> String {
    let config = guard.config_path();
    let policies = guard.policies_dir();
    let state = guard.state_dir();
    let mut full = vec![
        "--config",
        config.to_str().expect("utf-8"),
        "--policies",
        policies.to_str().expect("utf-8"),
        "--state-dir",
        state.to_str().expect("utf-8"),
        "--backend",
        "auto",
        "-v",
    ];
    full.extend_from_slice(args);
    let out = guard.lab().node().exec(BIN, &full);
    assert!(out.status.success(), "{out}");
    out.stderr
}

fn holds_ours(lab: &Lab, save: &str) -> bool {
    lab.node()
        .exec_ok(save, &[] as &[&str])
        .contains("npg-PREROUTING")
}

/// With the lab's kube-proxy-style DNAT rules in one iptables variant, `auto` writes into that
/// variant and leaves the other empty of ours; `cleanup` with `auto` finds them there again.
#[test]
fn auto_follows_the_iptables_variant_the_host_uses() {
    support::require_kernel!();
    for (backend, ours, other) in [
        (Backend::Legacy, "iptables-legacy-save", "iptables-nft-save"),
        (Backend::Nft, "iptables-nft-save", "iptables-legacy-save"),
    ] {
        let lab = Lab::new(backend);
        let guard = Guard::new(&lab);
        guard.write_policy("a.yaml", POLICY);
        let log = auto(&guard, &["apply", "--yes"]);
        assert!(log.contains("backend chosen"), "{log}");
        assert!(
            holds_ours(&lab, ours),
            "{backend}: our rules must be in {ours}"
        );
        assert!(
            !holds_ours(&lab, other),
            "{backend}: nothing of ours may be in {other}"
        );
        auto(&guard, &["cleanup", "--yes"]);
        assert!(
            guard.snapshot().has_nothing_of_ours(),
            "{backend}: {:?}",
            guard.snapshot().ours()
        );
    }
}

/// On a host that uses native nftables (a table of its own, no iptables rules at all), `auto`
/// picks the native nftables backend.
#[test]
fn auto_picks_native_nftables_where_the_host_uses_it() {
    support::require_kernel!();
    let lab = Lab::builder(Backend::Nftables)
        .standard_services(false)
        .build();
    lab.node()
        .exec_ok("nft", &["add", "table", "inet", "hostfirewall"]);
    let guard = Guard::new(&lab);
    guard.write_policy("a.yaml", POLICY);
    let log = auto(&guard, &["apply", "--yes"]);
    assert!(log.contains("native nftables"), "{log}");
    let tables = lab.node().exec_ok("nft", &["list", "tables"]);
    assert!(tables.contains("table ip nodeport_guard"), "{tables}");
    assert!(!holds_ours(&lab, "iptables-nft-save") && !holds_ours(&lab, "iptables-legacy-save"));
    auto(&guard, &["cleanup", "--yes"]);
    let tables = lab.node().exec_ok("nft", &["list", "tables"]);
    assert!(
        !tables.contains("nodeport_guard") && tables.contains("hostfirewall"),
        "{tables}"
    );
}
