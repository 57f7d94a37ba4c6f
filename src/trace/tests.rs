//! The evaluator on policies written as users write them (YAML, through the loader and the
//! validator), one behaviour per test. Agreement with the kernel is the differential kernel
//! test's job; these pin the words and the paths.

use std::net::IpAddr;

use super::*;
use crate::fixtures::{golden_host, model};

fn ip(text: &str) -> IpAddr {
    text.parse().expect("address")
}

fn tcp(src: &str, dport: u16) -> Packet {
    Packet {
        src: ip(src),
        dst: ip("198.51.100.1"),
        protocol: 6,
        sport: Some(40000),
        dport: Some(dport),
        icmp_type: None,
        icmp_code: None,
        in_interface: Some("eth0".into()),
        out_interface: None,
        travel: Travel::Inbound,
        state: ConnState::New,
    }
}

fn run(yaml: &str, packet: &Packet) -> Trace {
    run_with(yaml, &Config::default(), packet)
}

fn run_with(yaml: &str, config: &Config, packet: &Packet) -> Trace {
    trace(&model(yaml), config, &golden_host(), packet)
}

const WHITELIST: &str = r"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: nodeport-whitelist}
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      source: {nets: [203.0.113.0/28]}
    - action: Deny
      protocol: TCP
      destination: {ports: [30008]}
";

#[test]
fn a_source_outside_the_whitelist_is_dropped_by_the_deny_rule_and_logged() {
    let traced = run(WHITELIST, &tcp("192.0.2.50", 30008));
    assert_eq!(traced.verdict.outcome, Outcome::Dropped);
    assert_eq!(traced.verdict.policy.as_deref(), Some("nodeport-whitelist"));
    assert_eq!(traced.verdict.rule, Some(1));
    // A TCP SYN: the early drop decides, before connection tracking.
    assert_eq!(
        traced.verdict.at.as_deref(),
        Some("raw PREROUTING before connection tracking")
    );
    assert_eq!(
        traced.verdict.reason,
        "dropped by rule 1 of policy nodeport-whitelist (tier default)"
    );
    assert_eq!(traced.stages.len(), 1, "mangle never sees it");
    let logged = vec![Logged {
        group: 1,
        prefix: "DPI1|nodeport-whitelist".into(),
    }];
    assert_eq!(traced.logs, logged);

    // Without it, or for what is not a SYN, mangle decides the same, with the same log.
    let late = Config {
        early_drop: false,
        ..Config::default()
    };
    let traced = run_with(WHITELIST, &late, &tcp("192.0.2.50", 30008));
    assert_eq!(traced.verdict.at.as_deref(), Some("mangle PREROUTING"));
    assert_eq!(
        (traced.verdict.outcome, traced.verdict.rule),
        (Outcome::Dropped, Some(1))
    );
    assert_eq!(traced.logs, logged);
    let mut udp = tcp("192.0.2.50", 30008);
    udp.protocol = 17;
    let udp_whitelist = WHITELIST.replace("protocol: TCP", "protocol: UDP");
    let traced = run(&udp_whitelist, &udp);
    assert_eq!(traced.verdict.at.as_deref(), Some("mangle PREROUTING"));
    assert_eq!(traced.logs, logged);
    // Raw sends on only the SYNs to a port a Deny rule names: others are mangle's, as is
    // a SYN to a failsafe port.
    for port in [30009, 22] {
        let traced = run(WHITELIST, &tcp("192.0.2.50", port));
        assert_ne!(traced.verdict.outcome, Outcome::Dropped);
        assert!(
            traced.stages.iter().all(|stage| stage.table != "raw"),
            "{:?}",
            traced.stages
        );
    }
}

/// A SYN the early drop lets on is judged once: raw marks it, mangle returns it, and what
/// logs (a `Log` rule) logs once.
#[test]
fn a_syn_the_early_drop_lets_on_is_not_judged_again_in_mangle() {
    let logging = WHITELIST.replace(
        "  ingress:\n",
        "  ingress:\n    - action: Log\n      protocol: TCP\n",
    );
    let traced = run(&logging, &tcp("203.0.113.5", 30008));
    assert_eq!(traced.verdict.outcome, Outcome::Allowed);
    assert_eq!(traced.verdict.at.as_deref(), Some(early_drop::AT));
    assert_eq!(traced.logs.len(), 1, "{:?}", traced.logs);
    assert_eq!(traced.stages[0].table, "raw");
    assert!(traced.stages[0].steps.iter().any(|s| s.kind == "judged"));
    assert_eq!(traced.stages[1].table, "mangle");
    assert_eq!(traced.stages[1].steps[0].kind, "judgedInRaw");
    // The raw copies of the endpoint chains have names of their own; policy chains do not.
    let chains: Vec<&str> = traced.stages[0]
        .steps
        .iter()
        .filter_map(|s| s.chain.as_deref())
        .collect();
    assert!(chains.contains(&"npg-syn-fh-all-in_VzCNahGO"), "{chains:?}");
    assert!(
        chains.iter().any(|c| c.starts_with("npg-pi-")),
        "{chains:?}"
    );
}

#[test]
fn a_whitelisted_source_is_allowed_with_the_accept_mark_and_nothing_logged() {
    let traced = run(WHITELIST, &tcp("203.0.113.5", 30008));
    assert_eq!(traced.verdict.outcome, Outcome::Allowed);
    assert_eq!(traced.verdict.rule, Some(0));
    assert!(traced.logs.is_empty());
    let rule_step = traced.stages[0]
        .steps
        .iter()
        .find(|step| step.kind == "rule")
        .expect("a rule step");
    assert_eq!(rule_step.marks, vec!["accept=0x10000".to_owned()]);
}

#[test]
fn ports_the_policy_does_not_name_are_not_ours_to_decide() {
    let traced = run(WHITELIST, &tcp("192.0.2.50", 8080));
    assert_eq!(traced.verdict.outcome, Outcome::NotOurs);
    assert!(traced.logs.is_empty());
}

#[test]
fn ipv6_neighbour_discovery_comes_before_any_policy() {
    let deny_all = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: deny-all}\nspec:\n  preDNAT: true\n  applyOnForward: true\n  selector: all()\n  ingress:\n    - action: Deny\n";
    let icmpv6 = |icmp_type| Packet {
        src: ip("fe80::2"),
        dst: ip("ff02::1:ff00:1"),
        protocol: 58,
        sport: None,
        dport: None,
        icmp_type: Some(icmp_type),
        ..tcp("192.0.2.50", 0)
    };
    let solicitation = run(deny_all, &icmpv6(135));
    assert_eq!(solicitation.verdict.outcome, Outcome::Allowed);
    let steps: Vec<&str> = solicitation
        .stages
        .iter()
        .flat_map(|stage| &stage.steps)
        .map(|step| step.text.as_str())
        .collect();
    assert!(
        steps
            .iter()
            .any(|text| text.contains("IPv6 neighbour discovery (ICMPv6 type 135)")),
        "{steps:?}"
    );
    // An echo request is no neighbour discovery.
    assert_eq!(
        run(deny_all, &icmpv6(128)).verdict.outcome,
        Outcome::Dropped
    );
}

#[test]
fn failsafe_ports_come_before_any_policy() {
    let traced = run(WHITELIST, &tcp("192.0.2.50", 22));
    assert_eq!(traced.verdict.outcome, Outcome::Allowed);
    assert!(
        traced.verdict.reason.contains("failsafe"),
        "{:?}",
        traced.verdict
    );
}

#[test]
fn established_connections_and_the_host_itself_are_never_judged() {
    let mut packet = tcp("192.0.2.50", 30008);
    packet.state = ConnState::Established;
    assert_eq!(run(WHITELIST, &packet).verdict.outcome, Outcome::NotOurs);

    let mut packet = tcp("198.51.100.1", 30008);
    packet.dst = ip("198.51.100.1");
    let traced = run(WHITELIST, &packet);
    assert_eq!(traced.verdict.outcome, Outcome::NotOurs);
    // Neither raw (the early drop) nor mangle judges it.
    assert_eq!(traced.stages[0].table, "raw");
    assert_eq!(traced.stages[0].steps[1].kind, "hostToItself");
    assert_eq!(traced.stages[1].steps[0].kind, "hostToItself");
}

#[test]
fn the_other_family_is_not_judged_by_a_rule_of_one_family() {
    let mut packet = tcp("2001:db8:9::1", 30008);
    packet.dst = ip("2001:db8:1::1");
    // The Allow rule is IPv4 only; the Deny rule exists in both families.
    let traced = run(WHITELIST, &packet);
    assert_eq!(traced.verdict.outcome, Outcome::Dropped);
    assert_eq!(traced.verdict.rule, Some(1));
}

const TIERED: &str = r"
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: security.blocklist}
spec:
  tier: security
  selector: all()
  types: [Ingress]
  ingress:
    - action: Deny
      source: {nets: [192.0.2.0/28]}
    - action: Pass
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: web}
spec:
  selector: all()
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: TCP
      destination: {ports: [443]}
";

#[test]
fn pass_ends_the_tier_and_the_next_tier_decides_normal_policy_ends_in_a_drop() {
    let allowed = run(TIERED, &tcp("198.51.100.50", 443));
    assert_eq!(allowed.verdict.outcome, Outcome::Allowed);
    assert_eq!(allowed.verdict.policy.as_deref(), Some("web"));
    assert_eq!(allowed.verdict.at.as_deref(), Some("filter INPUT"));

    let blocked = run(TIERED, &tcp("192.0.2.5", 443));
    assert_eq!(
        blocked.verdict.policy.as_deref(),
        Some("security.blocklist")
    );
    assert_eq!(blocked.verdict.outcome, Outcome::Dropped);

    // Port 80: passed by the security tier, then nothing in `default` allows it: the end of
    // tier `default` drops and logs.
    let end = run(TIERED, &tcp("198.51.100.50", 80));
    assert_eq!(end.verdict.outcome, Outcome::Dropped);
    assert_eq!(end.verdict.tier.as_deref(), Some("default"));
    assert_eq!(end.verdict.nflog_prefix.as_deref(), Some("DPI|default"));
}

#[test]
fn a_tier_that_nothing_passes_drops_at_its_own_end() {
    let yaml = TIERED.replace("    - action: Pass\n", "");
    let traced = run(&yaml, &tcp("198.51.100.50", 443));
    assert_eq!(traced.verdict.outcome, Outcome::Dropped);
    assert_eq!(traced.verdict.nflog_prefix.as_deref(), Some("DPI|security"));
}

#[test]
fn log_rules_log_and_go_on_and_log_actions_decide_what_else_logs() {
    let yaml = WHITELIST.replace(
        "    - action: Allow\n",
        "    - action: Log\n      protocol: TCP\n    - action: Allow\n",
    );
    let mut config = Config::default();
    config.log_actions.insert(model::Action::Allow);
    let traced = run_with(&yaml, &config, &tcp("203.0.113.5", 30008));
    assert_eq!(traced.verdict.outcome, Outcome::Allowed);
    let prefixes: Vec<&str> = traced.logs.iter().map(|l| l.prefix.as_str()).collect();
    assert_eq!(
        prefixes,
        vec!["LPI0|nodeport-whitelist", "API1|nodeport-whitelist"]
    );
    // With `logTarget: log`, the Log rule writes to the kernel log: no NFLOG prefix.
    config.log_target = crate::config::LogTarget::KernelLog {
        prefix: "calico-packet: ".into(),
        level: 5,
    };
    let traced = run_with(&yaml, &config, &tcp("203.0.113.5", 30008));
    let prefixes: Vec<&str> = traced.logs.iter().map(|l| l.prefix.as_str()).collect();
    assert_eq!(prefixes, vec!["API1|nodeport-whitelist"]);
    assert!(
        traced
            .stages
            .iter()
            .flat_map(|stage| &stage.steps)
            .any(|step| step.text.contains("logged to the kernel log")),
        "{traced:#?}"
    );
}

const EXPLICIT_ENDPOINT: &str = r"
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node1-eth0, labels: {role: edge}}
spec:
  node: node1
  interfaceName: eth0
  expectedIPs: [198.51.100.1]
  ports:
    - {name: web, port: 8443, protocol: TCP}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: edge-web}
spec:
  selector: role == 'edge'
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: TCP
      destination: {ports: [web]}
";

#[test]
fn an_explicit_endpoint_has_no_profile_and_named_ports_resolve_to_its_ports() {
    let allowed = run(EXPLICIT_ENDPOINT, &tcp("192.0.2.9", 8443));
    assert_eq!(allowed.verdict.outcome, Outcome::Allowed, "{allowed:#?}");
    let dropped = run(EXPLICIT_ENDPOINT, &tcp("192.0.2.9", 8080));
    assert_eq!(dropped.verdict.outcome, Outcome::Dropped);
    assert_eq!(dropped.verdict.nflog_prefix.as_deref(), Some("DPI|default"));
    // Another interface has no endpoint here: nothing of ours judges it.
    let mut other = tcp("192.0.2.9", 8080);
    other.in_interface = Some("eth1".into());
    assert_eq!(
        run(EXPLICIT_ENDPOINT, &other).verdict.outcome,
        Outcome::NotOurs
    );
}

#[test]
fn a_selector_stands_for_the_nets_of_the_network_sets_it_matches() {
    let yaml = format!(
        "{}---\n{}",
        r"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: office, labels: {trusted: 'yes'}}
spec: {nets: [198.51.100.128/25]}
",
        WHITELIST.replace(
            "source: {nets: [203.0.113.0/28]}",
            "source: {selector: trusted == 'yes'}"
        )
    );
    assert_eq!(
        run(&yaml, &tcp("198.51.100.200", 30008)).verdict.outcome,
        Outcome::Allowed
    );
    assert_eq!(
        run(&yaml, &tcp("198.51.100.20", 30008)).verdict.outcome,
        Outcome::Dropped
    );
}

#[test]
fn a_change_names_the_sources_it_cuts_off_and_not_those_it_lets_in() {
    let before = model(WHITELIST);
    let after = model(&WHITELIST.replace("203.0.113.0/28", "203.0.113.16/28"));
    let impact = impact::cuts(&before, &after, &Config::default(), &golden_host());
    let cut: Vec<(IpAddr, u16)> = impact.cuts.iter().map(|c| (c.src, c.dport)).collect();
    // 203.0.113.1 (the first address of the old net) loses port 30008; 203.0.113.17 gains it.
    assert_eq!(cut, vec![(ip("203.0.113.1"), 30008)]);
    assert_eq!(impact.cuts[0].dropped_by.rule, Some(1));
    assert!(impact.checked >= 2, "{impact:?}");
    let unchanged = impact::cuts(&before, &before, &Config::default(), &golden_host());
    assert!(unchanged.cuts.is_empty());
}

#[test]
fn a_staged_deny_logs_what_it_would_do_and_changes_no_verdict() {
    let staged = WHITELIST
        .replace(
            "kind: GlobalNetworkPolicy",
            "kind: StagedGlobalNetworkPolicy",
        )
        .replace("name: nodeport-whitelist", "name: stricter")
        .replace("203.0.113.0/28", "203.0.113.0/30");
    let yaml = format!("{WHITELIST}---\n{staged}");
    // 203.0.113.5 is in the enforced whitelist, not in the staged one.
    let traced = run(&yaml, &tcp("203.0.113.5", 30008));
    assert_eq!(traced.verdict.outcome, Outcome::Allowed);
    assert_eq!(traced.verdict.policy.as_deref(), Some("nodeport-whitelist"));
    let prefixes: Vec<&str> = traced.logs.iter().map(|l| l.prefix.as_str()).collect();
    assert_eq!(prefixes, vec!["DPI1|staged:stricter"]);
}

/// Policies whose rules all name ports, or sources, and one that names neither.
const GUARDS: &str = r"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: a-guard}
spec:
  order: 1
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      protocol: TCP
      source: {nets: [198.51.100.10/32, 203.0.113.0/28]}
      destination: {ports: [30008]}
    - action: Deny
      protocol: TCP
      destination: {ports: [30008]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: b-ssh}
spec:
  order: 2
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      source: {nets: [192.0.2.0/26]}
    - action: Deny
      protocol: TCP
      destination: {ports: ['30100:30200']}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: c-udp}
spec:
  order: 3
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Deny
      protocol: UDP
      source: {nets: [198.51.100.128/25]}
      destination: {ports: [30053]}
";

#[test]
fn tracing_only_what_changed_rules_match_cuts_the_same_connections() {
    let before = model(GUARDS);
    let edits = [
        ("198.51.100.10/32", "198.51.100.11/32"),
        ("203.0.113.0/28", "203.0.113.0/29"),
        (
            "ports: [30008]}\n    - action: Deny",
            "ports: [30009]}\n    - action: Deny",
        ),
        (
            "destination: {ports: [30008]}\n---",
            "destination: {ports: [30007]}\n---",
        ),
        ("'30100:30200'", "'30100:30150'"),
        ("192.0.2.0/26", "192.0.2.0/27"),
        ("198.51.100.128/25", "198.51.100.0/24"),
        ("protocol: UDP", "protocol: TCP"),
        ("order: 3", "order: 0"),
        (
            "action: Allow\n      source: {nets: [192.0.2.0/26]}",
            "action: Deny\n      source: {nets: [192.0.2.0/26]}",
        ),
    ];
    for (from, to) in edits {
        assert!(GUARDS.contains(from), "{from}");
        let after = model(&GUARDS.replacen(from, to, 1));
        let narrow = impact::cuts_among(&before, &after, &Config::default(), &golden_host(), true);
        let full = impact::cuts_among(&before, &after, &Config::default(), &golden_host(), false);
        assert_eq!(narrow.cuts, full.cuts, "{from} -> {to}");
        assert!(narrow.checked <= full.checked);
    }
    // The guard's own change is traced on its port alone.
    let after = model(&GUARDS.replacen("198.51.100.10/32", "198.51.100.11/32", 1));
    let full = assert_traced_narrowly(&before, &after);
    assert!(!full.cuts.is_empty(), "the edit cuts 198.51.100.10");
}

/// Checks that tracing only what changed between `before` and `after` finds the cuts tracing
/// everything finds, with at most a third of the packets; returns the full trace's impact.
fn assert_traced_narrowly(before: &Model, after: &Model) -> impact::Impact {
    let narrow = impact::cuts_among(before, after, &Config::default(), &golden_host(), true);
    let full = impact::cuts_among(before, after, &Config::default(), &golden_host(), false);
    assert_eq!(narrow.cuts, full.cuts);
    assert!(
        narrow.checked * 3 <= full.checked,
        "{} of {}",
        narrow.checked,
        full.checked
    );
    full
}

#[test]
fn selections_found_in_advance_pick_what_matching_each_time_picks() {
    let yaml = r"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: office, labels: {trusted: 'yes'}}
spec: {nets: [198.51.100.128/25, '2001:db8:1::/64']}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: partners, labels: {trusted: 'partly'}}
spec: {nets: [203.0.113.0/28]}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node1-eth0, labels: {role: node}}
spec: {node: node1, interfaceName: eth0, expectedIPs: [192.0.2.10, '2001:db8::10']}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: guard}
spec:
  selector: all()
  ingress:
    - action: Allow
      source: {selector: trusted == 'yes', notSelector: role == 'node'}
    - action: Deny
      source: {selector: has(trusted) || role == 'node'}
      destination: {notSelector: trusted == 'partly'}
";
    let model = model(yaml);
    let selections = Selections::of(&model);
    let addresses = [
        "198.51.100.200",
        "198.51.100.20",
        "203.0.113.5",
        "203.0.113.17",
        "192.0.2.10",
        "192.0.2.11",
        "2001:db8:1::5",
        "2001:db8::10",
        "2001:db8::11",
    ];
    let mut selectors = 0;
    let mut picked = 0;
    for rule in model
        .policies()
        .iter()
        .flat_map(|p| p.ingress.iter().flatten())
    {
        for entity in [&rule.source, &rule.destination] {
            for selector in entity.selector.iter().chain(&entity.not_selector) {
                selectors += 1;
                for address in addresses.map(ip) {
                    let expected = selected(&model, selector, address);
                    assert_eq!(
                        selections.selected(selector, address),
                        expected,
                        "{selector:?} {address}"
                    );
                    picked += usize::from(expected);
                }
            }
        }
    }
    assert_eq!(selectors, 4);
    // Both kinds of source behind the selectors are exercised, not only misses.
    assert!(picked >= 6, "{picked}");
}

#[test]
fn an_edit_that_moves_the_policies_below_it_is_still_traced_on_its_own_port() {
    // A longer line moves where every later rule was written; that changes no verdict.
    let before = model(GUARDS);
    let after = model(&GUARDS.replacen(
        "198.51.100.10/32, ",
        "198.51.100.10/32, 198.51.100.99/32, ",
        1,
    ));
    assert_traced_narrowly(&before, &after);
}

#[test]
fn the_sources_a_change_names_are_tried_however_many_others_the_policies_name() {
    // More named sources than are traced, all sorting before the one the change cuts off.
    let many: Vec<String> = (0..=255)
        .map(|host| format!("192.0.2.{host}/32"))
        .chain((0..64).map(|host| format!("198.51.100.{host}/32")))
        .collect();
    let yaml = format!(
        r"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: a-many}}
spec:
  order: 1
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      protocol: TCP
      source: {{nets: [{}]}}
      destination: {{ports: [30001]}}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: z-office}}
spec:
  order: 2
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      protocol: TCP
      source: {{nets: [203.0.113.200/32]}}
      destination: {{ports: [30008]}}
    - action: Deny
      protocol: TCP
      destination: {{ports: [30008]}}
",
        many.join(", ")
    );
    assert!(many.len() > impact::MAX_SOURCES);
    let before = model(&yaml);
    let after = model(&yaml.replace("203.0.113.200/32", "203.0.113.201/32"));
    let impact = impact::cuts(&before, &after, &Config::default(), &golden_host());
    let cut: Vec<(IpAddr, u16)> = impact.cuts.iter().map(|c| (c.src, c.dport)).collect();
    assert_eq!(cut, vec![(ip("203.0.113.200"), 30008)]);
}

#[test]
fn the_verdict_alone_is_the_verdict_of_the_whole_trace() {
    let sources = [
        "198.51.100.10",
        "198.51.100.200",
        "203.0.113.1",
        "203.0.113.20",
        "192.0.2.1",
        "192.0.2.100",
        "2001:db8::1",
    ];
    let ports = [22, 30008, 30053, 30100, 30150, 30201, 8080];
    let (config, host) = (Config::default(), golden_host());
    let mut decided = 0;
    for yaml in [WHITELIST, TIERED, EXPLICIT_ENDPOINT, GUARDS] {
        let model = model(yaml);
        let evaluator = Evaluator::new(&model, &config, &host);
        for source in sources {
            for port in ports {
                for protocol in [6, 17] {
                    let mut packet = tcp(source, port);
                    packet.protocol = protocol;
                    if packet.src.is_ipv6() {
                        packet.dst = ip("2001:db8:1::1");
                    }
                    let traced = evaluator.trace(&packet).verdict;
                    assert_eq!(evaluator.verdict(&packet), traced, "{packet:?}");
                    decided += usize::from(traced.outcome != Outcome::NotOurs);
                }
            }
        }
    }
    // Most packets meet a policy that decides, so the shortcut is exercised both ways.
    assert!(decided > 50, "{decided}");
}
