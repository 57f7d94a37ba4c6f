//! Kernel tests of staged policies (`StagedGlobalNetworkPolicy`): they never change a verdict,
//! they only log to NFLOG what they would have done, with the policy name part of Calico's
//! prefix written `staged:<name>` (`DPI0|staged:office-only`), and a staged tier's end as
//! `DPI|staged:<tier>`. On iptables-legacy, iptables-nft and native nftables.

mod support;

use std::net::IpAddr;
use std::time::Duration;

use support::{
    Backend, Guard, Lab, NflogCapture, addr, backend_tests, check_reachability, dropped, open,
    ports, replies, sa,
};

/// How long to wait for an NFLOG message of a rule with `--nflog-threshold 1`.
const NFLOG_TIMEOUT: Duration = Duration::from_secs(3);

/// A policy of `kind` applying to every host endpoint before DNAT, with the given ingress
/// rules (YAML list items, indented by four spaces).
fn pre_dnat(kind: &str, name: &str, order: u32, rules: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3
kind: {kind}
metadata:
  name: {name}
spec:
  order: {order}
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
{rules}"
    )
}

/// Allow TCP from `net` to `port`, then deny TCP to `port` for everyone else.
fn whitelist_rules(net: &str, port: u16) -> String {
    format!(
        "    - action: Allow
      protocol: TCP
      source:
        nets: [\"{net}\"]
      destination:
        ports: [{port}]
    - action: Deny
      protocol: TCP
      destination:
        ports: [{port}]
"
    )
}

fn v4(a: std::net::Ipv4Addr) -> IpAddr {
    a.into()
}

/// A staged Deny drops nothing: with only a staged policy denying the NodePort to everyone,
/// every client still connects, and each connection's SYN is logged as
/// `DPI0|staged:office-only` on the ingress group. `plan` and `status` show it as staged.
fn staged_deny_drops_nothing_and_logs_with_the_staged_prefix(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let deny = format!(
        "    - action: Deny
      protocol: TCP
      destination:
        ports: [{}]
",
        ports::NODEPORT
    );
    guard.write_policy(
        "staged.yaml",
        &pre_dnat("StagedGlobalNetworkPolicy", "office-only", 10, &deny),
    );
    guard.apply();

    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    let (first, second) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);
    check_reachability(
        &lab,
        "a staged Deny",
        &[
            open(first, nodeport, replies::NODEPORT_TARGET),
            open(second, nodeport, replies::NODEPORT_TARGET),
        ],
    );
    for src in [first, second] {
        let event = log
            .wait_for(NFLOG_TIMEOUT, |e| {
                e.src == Some(v4(src)) && e.dport == Some(ports::NODEPORT)
            })
            .unwrap_or_else(|| panic!("no staged log for {src}\n{}", log.diagnostics()));
        assert_eq!(event.prefix, "DPI0|staged:office-only", "{event}");
    }

    let status = guard.status_json();
    let rows = status["rules"].as_array().expect("rules");
    let row = rows
        .iter()
        .find(|r| r["policy"] == "office-only" && r["rule"] == 0)
        .unwrap_or_else(|| panic!("no staged row in {status:#}"));
    assert_eq!(row["staged"], true, "{row}");
    assert!(row["packets"].as_u64().unwrap_or(0) >= 2, "{row}");
    let text = guard.run_expect(&["status"], 0).stdout;
    assert!(text.contains("office-only (staged)"), "{text}");
}
backend_tests!(staged_deny_drops_nothing_and_logs_with_the_staged_prefix);

/// An enforced whitelist next to a staged one behaves exactly as without it: the listed
/// source connects, the unlisted one is dropped and logged with the enforced prefix
/// (`DPI1|nodeport-whitelist`). The staged policy, which would allow only the other source,
/// logs its own view: the listed source as `DPI1|staged:nodeport-whitelist`, and never the
/// source it would allow. Then promoting it (the staged file becomes the enforced one)
/// makes its Deny drop, and `plan` says so first.
fn enforced_and_staged_policies_of_one_name_keep_the_enforced_verdicts(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let (listed, unlisted) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);
    let enforced = pre_dnat(
        "GlobalNetworkPolicy",
        "nodeport-whitelist",
        10,
        &whitelist_rules(&format!("{listed}/32"), ports::NODEPORT),
    );
    let staged = pre_dnat(
        "StagedGlobalNetworkPolicy",
        "nodeport-whitelist",
        10,
        &whitelist_rules(&format!("{unlisted}/32"), ports::NODEPORT),
    );
    guard.write_policy("enforced.yaml", &enforced);
    guard.write_policy("staged.yaml", &staged);
    guard.apply();

    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    check_reachability(
        &lab,
        "enforced next to staged",
        &[
            open(listed, nodeport, replies::NODEPORT_TARGET),
            dropped(unlisted, nodeport),
        ],
    );
    let from = |src, prefix: &'static str| {
        move |e: &support::nflog::NflogEvent| e.src == Some(v4(src)) && e.prefix == prefix
    };
    for (src, prefix) in [
        (unlisted, "DPI1|nodeport-whitelist"),
        (listed, "DPI1|staged:nodeport-whitelist"),
    ] {
        assert!(
            log.wait_for(NFLOG_TIMEOUT, from(src, prefix)).is_some(),
            "no {prefix} for {src}\n{}",
            log.diagnostics()
        );
    }
    log.expect_none(Duration::from_millis(500), |e| {
        e.src == Some(v4(unlisted)) && e.prefix.contains("staged:")
    });

    // Promote: the staged spec becomes the enforced policy.
    guard.remove_policy("staged.yaml");
    guard.write_policy(
        "enforced.yaml",
        &staged.replace("StagedGlobalNetworkPolicy", "GlobalNetworkPolicy"),
    );
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.stdout
            .contains("policy `nodeport-whitelist`: promoted from staged: its Deny rules now drop"),
        "{out}"
    );
    guard.apply();
    check_reachability(
        &lab,
        "promoted",
        &[
            dropped(listed, nodeport),
            open(unlisted, nodeport, replies::NODEPORT_TARGET),
        ],
    );
}
backend_tests!(enforced_and_staged_policies_of_one_name_keep_the_enforced_verdicts);

/// A staged normal policy in a tier whose `defaultAction` is Deny: what no staged rule
/// decided is logged as the staged tier's end, `DPI|staged:security`, and still reaches the
/// host service (nothing enforced selects the host, whose implicit endpoint allows all). The
/// source the staged policy allows is not logged.
fn a_staged_tier_end_logs_what_it_would_drop_without_dropping(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let (listed, unlisted) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);
    guard.write_policy(
        "tier.yaml",
        &format!(
            "apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: security
spec:
  order: 100
---
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata:
  name: security.audit
spec:
  tier: security
  selector: has(kubernetes.io/hostname)
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: [{listed}/32]
      destination:
        ports: [{port}]
",
            port = ports::HOST_SERVICE
        ),
    );
    guard.apply();

    let service = sa(addr::NODE_V4, ports::HOST_SERVICE);
    check_reachability(
        &lab,
        "a staged tier's default deny",
        &[
            open(listed, service, replies::HOST_SERVICE),
            open(unlisted, service, replies::HOST_SERVICE),
        ],
    );
    let event = log
        .wait_for(NFLOG_TIMEOUT, |e| {
            e.src == Some(v4(unlisted)) && e.dport == Some(ports::HOST_SERVICE)
        })
        .unwrap_or_else(|| panic!("no staged tier end\n{}", log.diagnostics()));
    assert_eq!(event.prefix, "DPI|staged:security", "{event}");
    assert_eq!(event.hook, Some(1), "logged in INPUT: {event}");
    log.expect_none(Duration::from_millis(500), |e| e.src == Some(v4(listed)));
}
backend_tests!(a_staged_tier_end_logs_what_it_would_drop_without_dropping);

/// A staged egress Deny logs on the egress group (`nflogGroupEgress`, 2) with `E` in the
/// prefix, `DPE0|staged:no-client-service`, and the node's own connection still completes.
fn staged_egress_deny_logs_on_the_egress_group(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 2);
    guard.write_policy(
        "egress.yaml",
        &format!(
            "apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata:
  name: no-client-service
spec:
  selector: all()
  egress:
    - action: Deny
      protocol: TCP
      destination:
        ports: [{port}]
",
            port = ports::CLIENT_SERVICE
        ),
    );
    guard.apply();
    let reply = lab
        .node_connect_from_port(
            ports::NODE_EPHEMERAL,
            sa(addr::CLIENT_V4[0], ports::CLIENT_SERVICE),
            support::CONNECT_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("{backend}: the node's own connection: {e}"));
    assert_eq!(reply, replies::CLIENT_SERVICE);
    let event = log
        .wait_for(NFLOG_TIMEOUT, |e| e.dport == Some(ports::CLIENT_SERVICE))
        .unwrap_or_else(|| panic!("no staged egress log\n{}", log.diagnostics()));
    assert_eq!(event.prefix, "DPE0|staged:no-client-service", "{event}");
}
backend_tests!(staged_egress_deny_logs_on_the_egress_group);
