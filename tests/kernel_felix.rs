//! Kernel tests of the shapes that follow Felix's own rendering tests (`tests/felix_corpus.rs`
//! checks the rules; these check what the kernel does with them), on iptables-legacy,
//! iptables-nft and native nftables: a single negated net folded into the rule with several
//! positive ones decides as Calico says; NFLOG prefixes of 63 characters and more come out
//! hashed exactly as Felix hashes them, for a policy rule and for a tier's end; `Log` rules
//! with `logTarget: log` go to the kernel log (`-j LOG`, nft `log`) and not to NFLOG.

mod support;

use std::net::IpAddr;
use std::time::Duration;

use nodeport_guard::compile::rules::nflog_prefix;
use nodeport_guard::model::Direction;
use support::{
    Backend, Guard, Lab, NflogCapture, Snapshot, addr, backend_tests, check_reachability, dropped,
    open, ports, replies, sa,
};

/// How long to wait for an NFLOG message of a rule with `--nflog-threshold 1`.
const NFLOG_TIMEOUT: Duration = Duration::from_secs(3);

/// A tier name of 59 characters: `DPI|<tier>` is 63 characters, the first length Felix hashes.
const LONG_TIER: &str = "tier-of-fifty-nine-characters-whose-end-prefix-felix-hashes";

/// Waits for the NFLOG message of `src`'s first packet to `dport` and returns its prefix.
#[track_caller]
fn logged_prefix(log: &NflogCapture, src: impl Into<IpAddr>, dport: u16) -> String {
    let src = src.into();
    log.wait_for(NFLOG_TIMEOUT, |e| {
        e.src == Some(src) && e.dport == Some(dport)
    })
    .unwrap_or_else(|| panic!("no NFLOG message for {src}\n{}", log.diagnostics()))
    .prefix
}

/// A tier with a 59-character name and its policy: rule 0 denies one remote client the host
/// service; rule 1 allows it to two on-link clients and the remote network, but for one
/// address (three positive nets and one `notNets`: Felix's "2 src, 1 !src" shape, the negation
/// in the main rule). Everyone else meets the end of the tier.
fn long_names_and_a_folded_negation() -> (String, String) {
    assert_eq!(LONG_TIER.len(), 59);
    let policy = format!("{LONG_TIER}.deny-remote");
    let yaml = format!(
        "apiVersion: projectcalico.org/v3
kind: Tier
metadata: {{name: {LONG_TIER}}}
spec: {{order: 100}}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: {policy}}}
spec:
  tier: {LONG_TIER}
  selector: all()
  types: [Ingress]
  ingress:
  - action: Deny
    protocol: TCP
    source: {{nets: ['{denied}/32']}}
    destination: {{ports: [{port}]}}
  - action: Allow
    protocol: TCP
    source:
      nets: ['{first}/32', '{third}/32', '{remote_net}']
      notNets: ['{excluded}/32']
    destination: {{ports: [{port}]}}
",
        denied = addr::CLIENT_REMOTE_V4[0],
        first = addr::CLIENT_V4[0],
        third = addr::CLIENT_V4[2],
        remote_net = addr::CLIENT_REMOTE_NET_V4,
        excluded = addr::CLIENT_REMOTE_V4[1],
        port = ports::HOST_SERVICE,
    );
    (policy, yaml)
}

/// The folded negation decides as Calico's API says (the listed on-link clients and the
/// remote network are allowed, its excluded address is not, an unlisted client is not), and
/// both the rule's and the tier end's prefixes are Felix's hashed ones, 63 characters long.
fn felix_shapes_decide_and_log_as_felix(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let (policy, yaml) = long_names_and_a_folded_negation();
    guard.write_policy("felix.yaml", &yaml);
    guard.apply();
    let service = sa(addr::NODE_V4, ports::HOST_SERVICE);
    check_reachability(
        &lab,
        "one negated net folded into the rule",
        &[
            open(addr::CLIENT_V4[0], service, replies::HOST_SERVICE),
            open(addr::CLIENT_V4[2], service, replies::HOST_SERVICE),
            open(addr::CLIENT_REMOTE_V4[2], service, replies::HOST_SERVICE),
            dropped(addr::CLIENT_REMOTE_V4[1], service),
            dropped(addr::CLIENT_V4[1], service),
            dropped(addr::CLIENT_REMOTE_V4[0], service),
        ],
    );
    let rule = nflog_prefix('D', Direction::Ingress, Some(0), &policy);
    let tier_end = nflog_prefix('D', Direction::Ingress, None, LONG_TIER);
    for prefix in [&rule, &tier_end] {
        assert_eq!(prefix.len(), 63, "{prefix}");
        assert_eq!(&prefix[10..11], "_", "{prefix}");
    }
    assert_eq!(
        logged_prefix(&log, addr::CLIENT_REMOTE_V4[0], ports::HOST_SERVICE),
        rule
    );
    assert_eq!(
        logged_prefix(&log, addr::CLIENT_REMOTE_V4[1], ports::HOST_SERVICE),
        tier_end
    );
    assert_eq!(
        logged_prefix(&log, addr::CLIENT_V4[1], ports::HOST_SERVICE),
        tier_end
    );
}
backend_tests!(felix_shapes_decide_and_log_as_felix);

/// With `logTarget: log`, a `Log` rule is Felix's: the kernel holds `-j LOG --log-prefix
/// "calico-packet: " --log-level 5` (nftables: `log prefix "calico-packet: " level notice`),
/// it counts the packets it logs (`status`), NFLOG sees none of them, the packet goes on to
/// the next rule, and the rules read back as written (`plan` finds nothing to do).
fn log_rules_go_to_the_kernel_log_with_felixs_prefix_and_level(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::with_config(&lab, "logTarget: log\n");
    let log = NflogCapture::start(lab.node(), 1);
    let yaml = format!(
        "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: log-then-allow}}
spec:
  selector: all()
  preDNAT: true
  applyOnForward: true
  ingress:
  - action: Log
    protocol: TCP
    destination: {{ports: [{nodeport}]}}
  - action: Deny
    protocol: TCP
    source: {{nets: ['{denied}/32']}}
    destination: {{ports: [{nodeport}]}}
",
        nodeport = ports::NODEPORT,
        denied = addr::CLIENT_V4[1],
    );
    guard.write_policy("log.yaml", &yaml);
    guard.apply();
    let (code, plan) = guard.plan_detailed();
    assert_eq!(code, 0, "the rules read back as written: {plan}");
    let snapshot = Snapshot::take(&lab);
    let kernel = format!("{}{}", snapshot.v4, snapshot.nft);
    let expected = if backend == Backend::Nftables {
        "log prefix \"calico-packet: \" level notice"
    } else {
        "-j LOG --log-prefix \"calico-packet: \" --log-level 5"
    };
    assert!(kernel.contains(expected), "{kernel}");
    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    check_reachability(
        &lab,
        "a Log rule logs and the next rule decides",
        &[
            open(addr::CLIENT_V4[0], nodeport, replies::NODEPORT_TARGET),
            dropped(addr::CLIENT_V4[1], nodeport),
        ],
    );
    let status = guard.status_json();
    let logged = status["rules"]
        .as_array()
        .and_then(|rules| {
            rules
                .iter()
                .find(|r| r["policy"] == "log-then-allow" && r["rule"] == 0)
        })
        .and_then(|row| row["packets"].as_u64())
        .unwrap_or_else(|| panic!("no counter of the Log rule: {status:#}"));
    assert!(logged >= 2, "both SYNs were logged: {status:#}");
    // The Deny rule's NFLOG message arrives; the Log rule sent none.
    let denied = logged_prefix(&log, addr::CLIENT_V4[1], ports::NODEPORT);
    assert_eq!(denied, "DPI1|log-then-allow");
    assert!(
        log.events()
            .iter()
            .all(|event| !event.prefix.starts_with("LPI")),
        "a Log rule wrote to NFLOG: {:#?}",
        log.events()
    );
}
backend_tests!(log_rules_go_to_the_kernel_log_with_felixs_prefix_and_level);
