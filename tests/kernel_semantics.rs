//! Kernel tests of Calico's policy semantics as nodeport-guard enforces them
//! for host endpoints: order and name precedence, Pass, Log, UDP, notNets,
//! long port lists, network sets, failsafe ports, normal (filter INPUT)
//! policy with its default deny, and `status` counters.

mod support;

use std::net::IpAddr;
use std::time::Duration;

use support::fixtures::mission_policy;
use support::{
    Backend, CONNECT_TIMEOUT, Family, Guard, Lab, NflogCapture, Role, addr, backend_tests,
    check_reachability, dropped, open, ports, refused, replies, sa,
};

/// How long to wait for an NFLOG message of a rule with `--nflog-threshold 1`.
const NFLOG_TIMEOUT: Duration = Duration::from_secs(3);

/// A pre-DNAT policy applying to every host endpoint, with `order` (or none)
/// and the given ingress rules (YAML list items, indented by four spaces).
fn pre_dnat(name: &str, order: Option<u32>, rules: &str) -> String {
    let order = order.map(|o| format!("  order: {o}\n")).unwrap_or_default();
    format!(
        "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: {name}
spec:
{order}  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
{rules}"
    )
}

/// An ingress rule allowing TCP from `net` to `port`.
fn allow_tcp(net: &str, port: u16) -> String {
    format!(
        "    - action: Allow
      protocol: TCP
      source:
        nets: [\"{net}\"]
      destination:
        ports: [{port}]
"
    )
}

/// An ingress rule denying TCP to `port` for everyone.
fn deny_tcp(port: u16) -> String {
    format!(
        "    - action: Deny
      protocol: TCP
      destination:
        ports: [{port}]
"
    )
}

fn v4(a: std::net::Ipv4Addr) -> IpAddr {
    a.into()
}

/// Policies run in `order`, lower first, so an Allow with order 10 beats
/// a Deny with order 20 even when the Deny's name sorts first; a policy
/// without `order` runs last; equal orders run in name order (the first
/// name's verdict wins, whether Allow or Deny).
fn lower_order_wins_and_equal_orders_run_in_name_order(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let listed = format!("{}/32", addr::CLIENT_V4[0]);
    let late = format!("{}/32", addr::CLIENT_V4[1]);
    // NodePort: order decides.
    guard.write_policy(
        "a.yaml",
        &pre_dnat("a-deny-nodeport", Some(20), &deny_tcp(ports::NODEPORT)),
    );
    guard.write_policy(
        "z.yaml",
        &pre_dnat(
            "z-allow-nodeport",
            Some(10),
            &allow_tcp(&listed, ports::NODEPORT),
        ),
    );
    guard.write_policy(
        "aa.yaml",
        &pre_dnat(
            "aa-unordered-allow-nodeport",
            None,
            &allow_tcp(&late, ports::NODEPORT),
        ),
    );
    // Host service: equal order, the Allow's name sorts first.
    guard.write_policy(
        "b.yaml",
        &pre_dnat(
            "b-allow-host-service",
            Some(15),
            &allow_tcp(&listed, ports::HOST_SERVICE),
        ),
    );
    guard.write_policy(
        "c.yaml",
        &pre_dnat(
            "c-deny-host-service",
            Some(15),
            &deny_tcp(ports::HOST_SERVICE),
        ),
    );
    // Published port: equal order, the Deny's name sorts first.
    guard.write_policy(
        "d.yaml",
        &pre_dnat("d-deny-published", Some(15), &deny_tcp(ports::PUBLISHED)),
    );
    guard.write_policy(
        "e.yaml",
        &pre_dnat(
            "e-allow-published",
            Some(15),
            &allow_tcp(&listed, ports::PUBLISHED),
        ),
    );
    guard.apply();

    let (listed, late, other) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1], addr::CLIENT_V4[2]);
    let node = |port| sa(addr::NODE_V4, port);
    check_reachability(
        &lab,
        "policy order",
        &[
            open(listed, node(ports::NODEPORT), replies::NODEPORT_TARGET),
            dropped(late, node(ports::NODEPORT)),
            open(listed, node(ports::HOST_SERVICE), replies::HOST_SERVICE),
            dropped(other, node(ports::HOST_SERVICE)),
            dropped(listed, node(ports::PUBLISHED)),
        ],
    );
}
backend_tests!(lower_order_wins_and_equal_orders_run_in_name_order);

/// `Pass` skips the remaining policies: a source passed by the first
/// policy is not dropped by a later Deny and ends in the implicit host
/// endpoint's allow; other sources still hit the Deny. Pass is not
/// logged with the default `logActions: [Deny]`.
fn pass_skips_the_remaining_policies(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let pass = "    - action: Pass
      source:
        nets: [198.51.100.10/32]
";
    guard.write_policy("1.yaml", &pre_dnat("first-pass", Some(10), pass));
    guard.write_policy(
        "2.yaml",
        &pre_dnat("then-deny", Some(20), &deny_tcp(ports::NODEPORT)),
    );
    guard.apply();

    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    check_reachability(
        &lab,
        "Pass",
        &[
            open(addr::CLIENT_V4[0], nodeport, replies::NODEPORT_TARGET),
            dropped(addr::CLIENT_V4[1], nodeport),
        ],
    );
    log.expect_prefix("DPI0|then-deny", NFLOG_TIMEOUT);
    let passed: Vec<_> = log
        .events()
        .into_iter()
        .filter(|e| e.src == Some(v4(addr::CLIENT_V4[0])))
        .collect();
    assert!(
        passed.is_empty(),
        "the passed source was logged: {passed:?}"
    );
}
backend_tests!(pass_skips_the_remaining_policies);

/// `Log` logs every matching packet with prefix `LPI<index>|<policy>` and
/// goes on to the next rule: the listed client is logged and connects;
/// the unlisted one is logged by the Log rule and then by the Deny
/// (`DPI2|…`) and times out.
fn log_rule_logs_and_continues_with_the_next_rule(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let rules = format!(
        "    - action: Log
      protocol: TCP
      destination:
        ports: [{port}]
{allow}{deny}",
        port = ports::NODEPORT,
        allow = allow_tcp("198.51.100.10/32", ports::NODEPORT),
        deny = deny_tcp(ports::NODEPORT),
    );
    guard.write_policy("log.yaml", &pre_dnat("log-then-decide", Some(10), &rules));
    guard.apply();

    let (listed, unlisted) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);
    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    check_reachability(
        &lab,
        "Log",
        &[
            open(listed, nodeport, replies::NODEPORT_TARGET),
            dropped(unlisted, nodeport),
        ],
    );
    for (src, prefix) in [
        (listed, "LPI0|log-then-decide"),
        (unlisted, "LPI0|log-then-decide"),
        (unlisted, "DPI2|log-then-decide"),
    ] {
        let found = log.wait_for(NFLOG_TIMEOUT, |e| {
            e.prefix == prefix && e.src == Some(v4(src))
        });
        assert!(
            found.is_some(),
            "no {prefix} for {src}\n{}",
            log.diagnostics()
        );
    }
    let denied_listed: Vec<_> = log
        .events()
        .into_iter()
        .filter(|e| e.prefix.starts_with('D') && e.src == Some(v4(listed)))
        .collect();
    assert!(denied_listed.is_empty(), "{denied_listed:?}");
}
backend_tests!(log_rule_logs_and_continues_with_the_next_rule);

/// A UDP whitelist: on UDP NodePort 30053 the listed client's datagrams
/// reach the server behind the DNAT, the unlisted client's are dropped
/// (IPv4 and IPv6), and TCP to the same port number is not affected.
fn udp_whitelist_drops_datagrams_of_unlisted_sources(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let rules = format!(
        "    - action: Allow
      protocol: UDP
      source:
        nets: [198.51.100.10/32]
    - action: Allow
      protocol: UDP
      source:
        nets: [\"2001:db8:1::10/128\"]
    - action: Deny
      protocol: UDP
      destination:
        ports: [{port}]
",
        port = ports::NODEPORT_UDP
    );
    guard.write_policy("udp.yaml", &pre_dnat("udp-nodeport", Some(10), &rules));
    guard.apply();

    let mut probes = Vec::new();
    for family in Family::ALL {
        let target = sa(family.node_addr(), ports::NODEPORT_UDP);
        let clients = family.client_addrs();
        probes.push(open(clients[0], target, replies::NODEPORT_UDP_TARGET).udp());
        probes.push(dropped(clients[1], target).udp());
        probes.push(refused(clients[1], target));
    }
    check_reachability(&lab, "UDP whitelist", &probes);
    for family in Family::ALL {
        let server = lab.udp_server(sa(family.node_addr(), ports::NODEPORT_UDP_TARGET));
        assert_eq!(
            server.peers().iter().map(|p| p.ip()).collect::<Vec<_>>(),
            vec![family.client_addrs()[0]]
        );
    }
}
backend_tests!(udp_whitelist_drops_datagrams_of_unlisted_sources);

/// `notNets` expresses a whitelist in one Deny rule: everyone *not* in
/// the listed nets is dropped. Both compiled forms are enforced: a short
/// list (inline rules, NodePort 30008) and a list longer than eight nets
/// (an ipset, host service 9100).
fn not_nets_deny_drops_everyone_outside_the_nets(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let short = format!(
        "    - action: Deny
      protocol: TCP
      source:
        notNets: [198.51.100.10/32, 203.0.113.8/30]
      destination:
        ports: [{}]
",
        ports::NODEPORT
    );
    let long_nets: Vec<String> = (20..28)
        .map(|i| format!("198.51.100.{i}/32"))
        .chain([
            "198.51.100.12/32".to_string(),
            "203.0.113.12/32".to_string(),
        ])
        .collect();
    let long = format!(
        "    - action: Deny
      protocol: TCP
      source:
        notNets: [{}]
      destination:
        ports: [{}]
",
        long_nets.join(", "),
        ports::HOST_SERVICE
    );
    guard.write_policy("short.yaml", &pre_dnat("not-nets-short", Some(10), &short));
    guard.write_policy("long.yaml", &pre_dnat("not-nets-long", Some(20), &long));
    guard.apply();
    let sets = guard.snapshot();
    let set = sets
        .set_names()
        .into_iter()
        .find(|name| {
            name.starts_with("npg4-")
                && sets.set_members(name).contains(&"203.0.113.12".to_string())
        })
        .unwrap_or_else(|| panic!("no ipset holds the long notNets list:\n{sets:?}"));
    // The set may merge adjacent nets (198.51.100.20-27 into two /30s).
    assert!(
        sets.set_members(&set)
            .contains(&"198.51.100.12".to_string()),
        "{sets:?}"
    );

    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    let host_service = sa(addr::NODE_V4, ports::HOST_SERVICE);
    check_reachability(
        &lab,
        "notNets",
        &[
            open(addr::CLIENT_V4[0], nodeport, replies::NODEPORT_TARGET),
            open(
                addr::CLIENT_REMOTE_V4[0],
                nodeport,
                replies::NODEPORT_TARGET,
            ),
            open(
                addr::CLIENT_REMOTE_V4[1],
                nodeport,
                replies::NODEPORT_TARGET,
            ),
            dropped(addr::CLIENT_V4[1], nodeport),
            dropped(addr::CLIENT_REMOTE_V4[2], nodeport),
            open(addr::CLIENT_V4[2], host_service, replies::HOST_SERVICE),
            open(
                addr::CLIENT_REMOTE_V4[2],
                host_service,
                replies::HOST_SERVICE,
            ),
            dropped(addr::CLIENT_V4[0], host_service),
        ],
    );
}
backend_tests!(not_nets_deny_drops_everyone_outside_the_nets);

/// One rule may list more ports than one iptables `multiport` match holds
/// (15): sixteen single ports plus a range are all guarded (the first,
/// the sixteenth and a port inside the range drop for an unlisted
/// client), ports next to them are not, and the listed client reaches
/// all of them (closed ports answer with a reset, so "refused" shows the
/// SYN got through).
fn more_than_fifteen_ports_and_a_range_in_one_rule_are_all_guarded(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let port_list: Vec<String> = (31001..=31016)
        .map(|p| p.to_string())
        .chain(["\"31100:31200\"".to_string()])
        .collect();
    let rules = format!(
        "    - action: Allow
      source:
        nets: [198.51.100.10/32]
    - action: Deny
      protocol: TCP
      destination:
        ports: [{}]
",
        port_list.join(", ")
    );
    guard.write_policy("ports.yaml", &pre_dnat("many-ports", Some(10), &rules));
    guard.apply();

    let (listed, unlisted) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);
    let node = |port| sa(addr::NODE_V4, port);
    let mut probes = Vec::new();
    for port in [31001, 31016, 31150] {
        probes.push(dropped(unlisted, node(port)));
        probes.push(refused(listed, node(port)));
    }
    for port in [31017, 31099, 31201] {
        probes.push(refused(unlisted, node(port)));
    }
    check_reachability(&lab, "16 ports and a range", &probes);
}
backend_tests!(more_than_fifteen_ports_and_a_range_in_one_rule_are_all_guarded);

/// An office network set and a NodePort policy that admits it by label.
fn office_set(nets: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata:
  name: office
  labels:
    role: office
spec:
  nets: [{nets}]
"
    )
}

/// A GlobalNetworkSet selected by label (`source.selector: role ==
/// 'office'`) is the whitelist: its members reach the NodePort, others do
/// not. Adding a member to the set changes only the ipset (`plan` shows
/// no chain change) and the new member gets in after `apply`.
fn network_set_selected_by_label_is_the_whitelist_and_can_grow(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let rules = format!(
        "    - action: Allow
      protocol: TCP
      source:
        selector: role == 'office'
      destination:
        ports: [{port}]
{deny}",
        port = ports::NODEPORT,
        deny = deny_tcp(ports::NODEPORT)
    );
    guard.write_policy("policy.yaml", &pre_dnat("office-only", Some(30), &rules));
    guard.write_policy(
        "office.yaml",
        &office_set("198.51.100.12/32, 203.0.113.8/30"),
    );
    guard.apply();

    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    check_reachability(
        &lab,
        "network set",
        &[
            open(addr::CLIENT_V4[2], nodeport, replies::NODEPORT_TARGET),
            open(
                addr::CLIENT_REMOTE_V4[0],
                nodeport,
                replies::NODEPORT_TARGET,
            ),
            dropped(addr::CLIENT_V4[1], nodeport),
            dropped(addr::CLIENT_REMOTE_V4[2], nodeport),
        ],
    );

    guard.write_policy(
        "office.yaml",
        &office_set("198.51.100.12/32, 203.0.113.8/30, 198.51.100.11/32"),
    );
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.stdout
            .contains("Plan: 0 chains to add, 0 to change, 0 to remove; 0 jumps to fix"),
        "only the set should change:\n{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("+198.51.100.11"),
        "the plan shows the new member:\n{}",
        out.stdout
    );
    guard.apply();
    let snapshot = guard.snapshot();
    assert!(
        snapshot.set_names().iter().any(|s| snapshot
            .set_members(s)
            .contains(&"198.51.100.11".to_string())),
        "{snapshot:?}"
    );
    check_reachability(
        &lab,
        "grown network set",
        &[open(addr::CLIENT_V4[1], nodeport, replies::NODEPORT_TARGET)],
    );
}
backend_tests!(network_set_selected_by_label_is_the_whitelist_and_can_grow);

/// A deny-everything pre-DNAT policy.
const DENY_EVERYTHING: &str = "    - action: Deny\n";

/// No policy can lock the operator out: under a pre-DNAT policy that
/// denies everything, SSH (failsafe tcp/22) on the node still accepts
/// connections from anyone, while the NodePort and the host service are
/// dropped, and the node's own outbound connections still complete.
fn failsafe_ssh_stays_open_under_a_deny_everything_policy(backend: Backend) {
    let mut lab = Lab::new(backend);
    lab.serve_tcp(Role::Node, sa(addr::NODE_V4, 22), "node-ssh");
    let guard = Guard::new(&lab);
    guard.write_policy(
        "deny.yaml",
        &pre_dnat("deny-everything", Some(1), DENY_EVERYTHING),
    );
    guard.apply();

    let unlisted = addr::CLIENT_V4[1];
    check_reachability(
        &lab,
        "failsafe under deny-everything",
        &[
            open(unlisted, sa(addr::NODE_V4, 22), "node-ssh"),
            open(addr::CLIENT_REMOTE_V4[0], sa(addr::NODE_V4, 22), "node-ssh"),
            dropped(unlisted, sa(addr::NODE_V4, ports::NODEPORT)),
            dropped(unlisted, sa(addr::NODE_V4, ports::HOST_SERVICE)),
        ],
    );
    let reply = lab
        .node_connect_from_port(
            ports::NODE_EPHEMERAL,
            sa(addr::CLIENT_V4[0], ports::CLIENT_SERVICE),
            CONNECT_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("{backend}: the node's own connection: {e}"));
    assert_eq!(reply, replies::CLIENT_SERVICE);
}
backend_tests!(failsafe_ssh_stays_open_under_a_deny_everything_policy);

/// A normal (filter INPUT) policy that allows the host service 9100 to one
/// client only.
const HOST_SERVICE_POLICY: &str = "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: host-services
spec:
  order: 10
  selector: all()
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: [198.51.100.10/32]
      destination:
        ports: [9100]
";

/// A normal policy protects host services on filter INPUT and, as in
/// Calico, makes the host default-deny for ingress, which `plan` says in
/// words before anything is applied (naming the failsafe ports). After
/// `apply`: the listed client reaches 9100, the unlisted one does not
/// (logged as `DPI|default`); ports no rule allows are dropped even for
/// the listed client (a local server, and the NodePort whose DNAT target
/// is local); failsafe SSH stays reachable; the node's own outbound
/// connections still complete.
fn normal_policy_protects_host_services_with_a_default_deny(backend: Backend) {
    let mut lab = Lab::new(backend);
    lab.serve_tcp(Role::Node, sa(addr::NODE_V4, 22), "node-ssh");
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    guard.write_policy("host.yaml", HOST_SERVICE_POLICY);

    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 2, "{out}");
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("default-deny"),
        "plan must warn about the default deny:\n{said}"
    );
    assert!(
        said.contains("tcp/22"),
        "plan must name the failsafe ports:\n{said}"
    );
    guard.apply();
    assert!(
        !guard
            .snapshot()
            .chains(Family::V4, "filter", "npg-")
            .is_empty(),
        "a normal policy lives in the filter table"
    );

    let (listed, unlisted) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);
    let node = |port| sa(addr::NODE_V4, port);
    check_reachability(
        &lab,
        "normal policy",
        &[
            open(listed, node(ports::HOST_SERVICE), replies::HOST_SERVICE),
            dropped(unlisted, node(ports::HOST_SERVICE)),
            dropped(listed, node(ports::NODEPORT_TARGET)),
            dropped(listed, node(ports::NODEPORT)),
            open(unlisted, node(22), "node-ssh"),
        ],
    );
    let event = log.wait_for(NFLOG_TIMEOUT, |e| {
        e.src == Some(v4(unlisted)) && e.dport == Some(ports::HOST_SERVICE)
    });
    let event = event.unwrap_or_else(|| panic!("default deny not logged\n{}", log.diagnostics()));
    assert_eq!(event.prefix, "DPI|default", "{event}");
    assert_eq!(event.hook, Some(1), "dropped in INPUT: {event}");
    let reply = lab
        .node_connect_from_port(
            ports::NODE_EPHEMERAL,
            sa(addr::CLIENT_V4[0], ports::CLIENT_SERVICE),
            CONNECT_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("{backend}: the node's own connection: {e}"));
    assert_eq!(reply, replies::CLIENT_SERVICE);
}
backend_tests!(normal_policy_protects_host_services_with_a_default_deny);

/// `(packets, bytes)` of a policy rule in `status --json`.
#[track_caller]
fn json_counters(status: &serde_json::Value, policy: &str, rule: u64) -> (u64, u64) {
    let rules = status["rules"]
        .as_array()
        .unwrap_or_else(|| panic!("no rules in {status:#}"));
    let row = rules
        .iter()
        .find(|r| r["policy"] == policy && r["rule"] == rule && r["direction"] == "ingress")
        .unwrap_or_else(|| panic!("no row for {policy} ingress rule {rule} in {status:#}"));
    let number = |key: &str| {
        row[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {row}"))
    };
    (number("packets"), number("bytes"))
}

/// `(packets, bytes)` of a policy rule in the `status` table.
#[track_caller]
fn text_counters(status: &str, policy: &str, rule: u64) -> (u64, u64) {
    let rule = rule.to_string();
    let line = status
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|words| {
            words.len() == 6 && words[0] == policy && words[1] == "ingress" && words[2] == rule
        })
        .unwrap_or_else(|| panic!("no line for {policy} ingress rule {rule} in:\n{status}"));
    let number = |word: &str| word.parse().unwrap_or_else(|e| panic!("{word}: {e}"));
    (number(line[3]), number(line[4]))
}

/// `status` and `status --json` count, per policy rule, the packets that
/// rule decided: after one allowed connection and two dropped ones (plus
/// traffic to an unguarded port, which no rule decides), the Allow rule
/// shows exactly the one SYN it accepted (later packets are established
/// and never reach the policy) and the Deny rule at least the two SYNs
/// it dropped; text and JSON agree. With the early drop (the default) both
/// SYNs' counts come from the raw copies of the rules, the allowed one once
/// (mangle returns a SYN raw judged).
fn status_reports_packets_of_the_rule_that_decided(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("nodeport.yaml", &mission_policy());
    guard.apply();
    let before = guard.status_json();
    assert_eq!(
        json_counters(&before, "allow-cluster-nodeport-only", 0).0,
        0
    );
    assert_eq!(
        json_counters(&before, "allow-cluster-nodeport-only", 1).0,
        0
    );

    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    check_reachability(
        &lab,
        "traffic for status",
        &[
            open(addr::CLIENT_V4[0], nodeport, replies::NODEPORT_TARGET),
            dropped(addr::CLIENT_V4[1], nodeport),
            dropped(addr::CLIENT_REMOTE_V4[0], nodeport),
            open(
                addr::CLIENT_V4[1],
                sa(addr::NODE_V4, ports::HOST_SERVICE),
                replies::HOST_SERVICE,
            ),
        ],
    );
    let status = guard.status_json();
    let (allowed, allowed_bytes) = json_counters(&status, "allow-cluster-nodeport-only", 0);
    let (denied, denied_bytes) = json_counters(&status, "allow-cluster-nodeport-only", 1);
    assert_eq!(allowed, 1, "one SYN was allowed: {status:#}");
    assert!(allowed_bytes > 0, "{status:#}");
    assert!(denied >= 2, "two connections were dropped: {status:#}");
    assert!(denied_bytes >= 2 * 40, "{status:#}");

    let text = guard.run_expect(&["status"], 0).stdout;
    assert_eq!(
        text_counters(&text, "allow-cluster-nodeport-only", 0),
        (allowed, allowed_bytes)
    );
    let (denied_text, _) = text_counters(&text, "allow-cluster-nodeport-only", 1);
    assert!(denied_text >= denied, "{text}");
}
backend_tests!(status_reports_packets_of_the_rule_that_decided);

/// A monitoring net may reach the node's addresses except one excluded
/// host (source `nets` + `notNets`, destination `nets`: two OR-lists in one
/// rule); everyone but two office addresses is denied sixteen NodePorts
/// (source `notNets` + more ports than one multiport match holds); port
/// 9100 is closed to the rest.
const NOT_NETS_WITH_OTHER_ALTERNATIVES: &str = "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: monitoring
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      source:
        nets: [198.51.100.0/24]
        notNets: [198.51.100.11/32]
      destination:
        nets: [198.51.100.1/32, 192.0.2.1/32]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: office-nodeports
spec:
  order: 20
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Deny
      protocol: TCP
      source:
        notNets: [198.51.100.10/32, 203.0.113.10/32]
      destination:
        ports: [30008, 31001, 31002, 31003, 31004, 31005, 31006, 31007, 31008, 31009, 31010, 31011, 31012, 31013, 31014, 31015]
    - action: Deny
      protocol: TCP
      destination:
        ports: [9100]
";

/// Regression (found by the differential test): when a rule's source
/// `notNets` and another list of alternatives (destination `nets`, or more
/// ports than one multiport match holds) were both compiled to match
/// blocks, the `notNets` block came first and the other block could only
/// set the match bit: an excluded source was still allowed (fail open),
/// a whitelisted office address was denied its NodePort, and ports outside
/// the list were denied to everyone. Every condition of a rule must hold.
fn not_nets_and_other_alternatives_in_one_rule_all_hold(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("rules.yaml", NOT_NETS_WITH_OTHER_ALTERNATIVES);
    guard.apply();
    let node = |port| sa(addr::NODE_V4, port);
    check_reachability(
        &lab,
        "notNets next to other alternatives",
        &[
            // The excluded monitoring host is not allowed by `monitoring`.
            dropped(addr::CLIENT_V4[1], node(ports::HOST_SERVICE)),
            open(
                addr::CLIENT_V4[2],
                node(ports::HOST_SERVICE),
                replies::HOST_SERVICE,
            ),
            // The office address keeps its NodePort; others lose it.
            open(
                addr::CLIENT_REMOTE_V4[0],
                node(ports::NODEPORT),
                replies::NODEPORT_TARGET,
            ),
            dropped(addr::CLIENT_REMOTE_V4[1], node(ports::NODEPORT)),
            // A port outside the sixteen is not denied.
            refused(addr::CLIENT_REMOTE_V4[1], node(7000)),
        ],
    );
}

backend_tests!(not_nets_and_other_alternatives_in_one_rule_all_hold);

/// Regression (found by the differential test): with the nftables backend, a
/// rule excluding one source port and one destination port (`source.notPorts:
/// [21403]`, `destination.notPorts: [9100]`) denied a connection to 9100 from
/// port 21404: nft merged the two `!=` comparisons of adjacent header fields
/// into one ("not both"), so only the packet from 21403 to 9100 escaped the
/// rule. Each exclusion holds on its own.
fn excluded_source_and_destination_ports_each_hold(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let rules = "    - action: Deny
      protocol: TCP
      source:
        notPorts: [21403]
      destination:
        notPorts: [9100]
";
    guard.write_policy("ports.yaml", &pre_dnat("excluded-ports", Some(10), rules));
    guard.apply();
    let (code, plan) = guard.plan_detailed();
    assert_eq!(code, 0, "the kernel reads back as applied:\n{plan}");
    let connect = |sport: u16, dport: u16, timeout: Duration| {
        support::sock::Connect::to(sa(addr::NODE_V4, dport))
            .from(addr::CLIENT_V4[0])
            .source_port(sport)
            .timeout(timeout)
            .tcp(lab.client())
    };
    // The destination port is excluded: allowed whatever the source port.
    assert_eq!(
        connect(21404, ports::HOST_SERVICE, CONNECT_TIMEOUT).as_deref(),
        Ok(replies::HOST_SERVICE)
    );
    // The source port is excluded: allowed whatever the destination port.
    assert_eq!(
        connect(21403, ports::NODEPORT, CONNECT_TIMEOUT).as_deref(),
        Ok(replies::NODEPORT_TARGET)
    );
    // Neither is excluded: denied.
    let denied = connect(21405, ports::NODEPORT, support::DROP_TIMEOUT);
    assert!(denied.as_ref().is_err_and(|e| e.is_timeout()), "{denied:?}");
}

backend_tests!(excluded_source_and_destination_ports_each_hold);

/// Regression (found by the differential test): with the nftables backend,
/// narrowing a network set's member to a net inside it (203.0.113.0/24 →
/// 203.0.113.12/31) or widening it back failed ("interval overlaps with an
/// existing one") because the new member was added before the old one was
/// deleted, so `apply` refused a valid edit (and a daemon would retry it
/// forever). Each edit is applied in place, and the whitelist follows it.
fn network_set_narrowed_and_widened_again_applies_in_place(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let rules = format!(
        "    - action: Allow
      protocol: TCP
      source:
        selector: role == 'office'
{deny}",
        deny = deny_tcp(ports::NODEPORT)
    );
    guard.write_policy("policy.yaml", &pre_dnat("office-only", Some(30), &rules));
    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    let (inside, outside) = (addr::CLIENT_REMOTE_V4[2], addr::CLIENT_REMOTE_V4[0]);
    for (nets, outside_allowed) in [
        ("203.0.113.0/24", true),
        ("203.0.113.12/31", false),
        ("203.0.113.0/24", true),
    ] {
        guard.write_policy("office.yaml", &office_set(nets));
        guard.apply();
        let (code, out) = guard.plan_detailed();
        assert_eq!(code, 0, "after applying {nets}: {out}");
        let outside_probe = if outside_allowed {
            open(outside, nodeport, replies::NODEPORT_TARGET)
        } else {
            dropped(outside, nodeport)
        };
        check_reachability(
            &lab,
            &format!("office set {nets}"),
            &[
                open(inside, nodeport, replies::NODEPORT_TARGET),
                outside_probe,
            ],
        );
    }
}

backend_tests!(network_set_narrowed_and_widened_again_applies_in_place);

/// Tightening a policy does not cut flows conntrack already tracks: the
/// pre-DNAT chain lets ESTABLISHED packets through before any policy. A UDP
/// flow to the NodePort that was answered before a Deny was applied keeps
/// being answered (same source port), a new flow from the same client is
/// dropped, and once conntrack forgets the flow (`conntrack -F` here, its
/// timeout on a real node) the Deny applies to it too.
fn established_flows_survive_a_tightening_until_conntrack_forgets_them(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let nodeport = sa(addr::NODE_V4, ports::NODEPORT_UDP);
    let client = addr::CLIENT_V4[1];
    let flow = |port: u16, timeout: Duration| {
        support::Connect::to(nodeport)
            .from(client)
            .source_port(port)
            .timeout(timeout)
            .udp(lab.client())
    };
    assert_eq!(
        flow(41000, CONNECT_TIMEOUT),
        Ok(replies::NODEPORT_UDP_TARGET.to_string()),
        "the flow is answered before the policy"
    );
    let deny = "    - action: Deny
      protocol: UDP
      destination:
        ports: [30053]
";
    guard.write_policy("deny.yaml", &pre_dnat("deny-udp-nodeport", Some(10), deny));
    guard.apply();
    assert_eq!(
        flow(41000, CONNECT_TIMEOUT),
        Ok(replies::NODEPORT_UDP_TARGET.to_string()),
        "the tracked flow survives the tightening"
    );
    let drop = support::DROP_TIMEOUT;
    assert_eq!(flow(41001, drop), Err(support::ConnectError::TimedOut));
    support::conntrack_flush(lab.node());
    assert_eq!(
        flow(41000, drop),
        Err(support::ConnectError::TimedOut),
        "a forgotten flow meets the Deny"
    );
}
backend_tests!(established_flows_survive_a_tightening_until_conntrack_forgets_them);

/// The host is never cut off from itself: under a pre-DNAT policy that
/// denies everything, the node still reaches its own host service on its
/// own addresses (IPv4 and IPv6, looped back through `lo`), while the same
/// service is dropped for a client.
fn the_host_reaches_its_own_services_under_a_deny_everything_policy(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy(
        "deny.yaml",
        &pre_dnat("deny-everything", Some(1), DENY_EVERYTHING),
    );
    guard.apply();
    for family in [Family::V4, Family::V6] {
        let service = sa(family.node_addr(), ports::HOST_SERVICE);
        let reply = support::Connect::to(service)
            .from(family.node_addr())
            .timeout(CONNECT_TIMEOUT)
            .tcp(lab.node())
            .unwrap_or_else(|e| panic!("{backend}: the node to its own {service}: {e}"));
        assert_eq!(reply, replies::HOST_SERVICE);
    }
    check_reachability(
        &lab,
        "a client under deny-everything",
        &[dropped(
            addr::CLIENT_V4[1],
            sa(addr::NODE_V4, ports::HOST_SERVICE),
        )],
    );
}
backend_tests!(the_host_reaches_its_own_services_under_a_deny_everything_policy);

/// A named port without a protocol (as Calico accepts it): the host endpoint gives `svc` on TCP
/// and UDP, a rule denies one client `svc` with no `protocol`; that client loses the TCP
/// service and keeps every other port, the other client keeps everything.
fn named_port_without_protocol_matches_the_endpoints_port(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let (listed, unlisted) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);
    guard.write_policy(
        "svc.yaml",
        &format!(
            "apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: node1-eth0
  labels: {{role: svc}}
spec:
  node: node1
  interfaceName: eth0
  expectedIPs: [{node}]
  ports:
    - {{name: svc, port: {port}, protocol: TCP}}
    - {{name: svc, port: {port}, protocol: UDP}}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: svc-not-for-one-client
spec:
  selector: role == 'svc'
  ingress:
    - action: Deny
      source:
        nets: [{unlisted}/32]
      destination:
        ports: [svc]
    - action: Allow
",
            node = addr::NODE_V4,
            port = ports::HOST_SERVICE,
        ),
    );
    guard.apply();
    let node = |port| sa(addr::NODE_V4, port);
    check_reachability(
        &lab,
        "named port without protocol",
        &[
            open(listed, node(ports::HOST_SERVICE), replies::HOST_SERVICE),
            dropped(unlisted, node(ports::HOST_SERVICE)),
            open(
                unlisted,
                node(ports::NODEPORT_TARGET),
                replies::NODEPORT_TARGET,
            ),
        ],
    );
}
backend_tests!(named_port_without_protocol_matches_the_endpoints_port);

/// Tiers, as Calico runs them: tier `security` (order 100) before `default`. A Deny in
/// `security` is final; what `security` does not decide meets its `defaultAction`: `Deny` drops
/// it at the tier's end, `Pass` (and a `Pass` rule) sends it on to `default`, which allows.
fn tiers_end_in_their_default_action_and_pass_goes_on(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let (listed, unlisted) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);
    let policies = |default_action: &str, pass_rule: bool| {
        format!(
            "apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: security
spec:
  order: 100
  defaultAction: {default_action}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: security.gate
spec:
  tier: security
  selector: has(kubernetes.io/hostname)
  ingress:
    - action: Deny
      protocol: TCP
      source:
        nets: [{unlisted}/32]
      destination:
        ports: [{port}]
{pass}---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: allow-the-rest
spec:
  selector: has(kubernetes.io/hostname)
  ingress:
    - action: Allow
",
            port = ports::HOST_SERVICE,
            pass = if pass_rule {
                "    - action: Pass\n"
            } else {
                ""
            },
        )
    };
    let node = |port| sa(addr::NODE_V4, port);
    let service = node(ports::HOST_SERVICE);

    // defaultAction Deny, no Pass rule: the tier's end drops what `gate` left undecided.
    guard.write_policy("tiers.yaml", &policies("Deny", false));
    guard.apply();
    check_reachability(
        &lab,
        "tier security ends in Deny",
        &[dropped(listed, service), dropped(unlisted, service)],
    );
    // A Pass rule sends the rest on to the default tier.
    guard.write_policy("tiers.yaml", &policies("Deny", true));
    guard.apply();
    check_reachability(
        &lab,
        "a Pass rule goes on to the next tier",
        &[
            open(listed, service, replies::HOST_SERVICE),
            dropped(unlisted, service),
        ],
    );
    // defaultAction Pass does the same for what no rule decided.
    guard.write_policy("tiers.yaml", &policies("Pass", false));
    guard.apply();
    check_reachability(
        &lab,
        "defaultAction Pass goes on to the next tier",
        &[
            open(listed, service, replies::HOST_SERVICE),
            dropped(unlisted, service),
        ],
    );
}
backend_tests!(tiers_end_in_their_default_action_and_pass_goes_on);

/// A host endpoint's interface is what sends a packet to its policies (Felix's dispatch
/// chains; native nftables looks the interface up in a verdict map when there are several).
/// `eth0`, `eth1` and `*` each have an endpoint: traffic arriving on `eth0` meets `eth0`'s
/// policy only, not `eth1`'s nor those of `*` (allow everything; no NodePort for one client
/// before DNAT, which `eth0` must skip although its own endpoint has nothing to check there).
/// Once `eth0` has no endpoint of its own, the `*` endpoint's policies are what it meets.
fn each_interface_meets_its_own_endpoints_policy(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let (listed, unlisted) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);
    let endpoint = |interface: &str, label: &str| {
        format!(
            "apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: node1-{label}
  labels: {{ep: {label}}}
spec:
  node: node1
  interfaceName: \"{interface}\"
"
        )
    };
    guard.write_policy("eth0.yaml", &endpoint("eth0", "eth0"));
    guard.write_policy(
        "others.yaml",
        &format!(
            "{eth1}---
{all}---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: eth0-host-service-for-one-client
spec:
  selector: ep == 'eth0'
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: [{listed}/32]
      destination:
        ports: [{service}]
    - action: Allow
      protocol: TCP
      destination:
        ports: [{target}]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: eth1-nothing-in
spec:
  selector: ep == 'eth1'
  ingress:
    - action: Deny
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: others-everything-in
spec:
  selector: ep == 'all'
  ingress:
    - action: Allow
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: others-nodeport-not-for-one-client
spec:
  selector: ep == 'all'
  preDNAT: true
  applyOnForward: true
  ingress:
    - action: Deny
      protocol: TCP
      source:
        nets: [{unlisted}/32]
      destination:
        ports: [{nodeport}]
",
            eth1 = endpoint("eth1", "eth1"),
            all = endpoint("*", "all"),
            service = ports::HOST_SERVICE,
            target = ports::NODEPORT_TARGET,
            nodeport = ports::NODEPORT,
        ),
    );
    guard.apply();
    let (code, plan) = guard.plan_detailed();
    assert_eq!(code, 0, "the rules read back as they were written: {plan}");
    let node = |port| sa(addr::NODE_V4, port);
    check_reachability(
        &lab,
        "eth0 with an endpoint of its own",
        &[
            open(listed, node(ports::HOST_SERVICE), replies::HOST_SERVICE),
            dropped(unlisted, node(ports::HOST_SERVICE)),
            open(unlisted, node(ports::NODEPORT), replies::NODEPORT_TARGET),
        ],
    );
    guard.remove_policy("eth0.yaml");
    guard.apply();
    check_reachability(
        &lab,
        "eth0 under the `*` endpoint",
        &[
            open(listed, node(ports::NODEPORT), replies::NODEPORT_TARGET),
            dropped(unlisted, node(ports::NODEPORT)),
            open(unlisted, node(ports::HOST_SERVICE), replies::HOST_SERVICE),
        ],
    );
}
backend_tests!(each_interface_meets_its_own_endpoints_policy);
