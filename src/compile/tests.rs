//! Unit tests of the compiler on models built in code (through `validate`'s test helper; the
//! golden tests in `tests/` run the whole pipeline from YAML).

use super::*;
use crate::dataplane::iptables::render::compiled_rules;
use crate::model::{
    Action as PolicyAction, EndpointInterface, EntityRule, HostEndpoint, Origin, Policy,
    PolicyKind, Port, Protocol, Rule as PolicyRule,
};
use crate::selector::Selector;
use crate::source::{FileId, Span};
use crate::validate::model_for_tests;

fn origin() -> Origin {
    Origin {
        file: FileId(0),
        span: Span::default(),
    }
}

fn rule(action: PolicyAction) -> PolicyRule {
    PolicyRule {
        action,
        protocol: None,
        not_protocol: None,
        icmp: None,
        not_icmp: None,
        ip_version: None,
        source: EntityRule::default(),
        destination: EntityRule::default(),
        annotations: BTreeMap::new(),
        origin: origin(),
    }
}

fn nets(list: &[&str]) -> Vec<ipnet::IpNet> {
    list.iter().map(|n| n.parse().expect("net")).collect()
}

fn tcp_port(action: PolicyAction, ports: Vec<Port>) -> PolicyRule {
    let mut rule = rule(action);
    rule.protocol = Some(Protocol::Tcp);
    rule.destination.ports = ports;
    rule
}

fn policy(name: &str, order: f64, kind: PolicyKind, ingress: Vec<PolicyRule>) -> Policy {
    Policy {
        name: name.to_owned(),
        tier: crate::model::DEFAULT_TIER.to_owned(),
        tier_origin: None,
        order: Some(order),
        selector: Selector::all(),
        ingress: Some(ingress),
        egress: None,
        kind,
        apply_on_forward: kind != PolicyKind::Normal,
        expires: None,
        origin: origin(),
    }
}

fn mission() -> Policy {
    let mut allow = rule(PolicyAction::Allow);
    allow.source.nets = nets(&["198.51.100.10/32", "198.51.100.12/32", "203.0.113.0/28"]);
    policy(
        "allow-cluster-nodeport-only",
        10.0,
        PolicyKind::PreDnat,
        vec![
            allow,
            tcp_port(PolicyAction::Deny, vec![Port::Single(30008)]),
        ],
    )
}

fn host() -> HostFacts {
    HostFacts {
        interfaces: vec![crate::facts::Interface {
            name: "eth0".into(),
            addresses: vec![
                "198.51.100.1".parse().expect("ip"),
                "2001:db8:1::1".parse().expect("ip"),
            ],
        }],
        ..HostFacts::minimal("node-1")
    }
}

/// `node-1`'s endpoint on `eth0`, without a profile (default deny).
fn eth0_endpoint() -> HostEndpoint {
    HostEndpoint {
        name: "node-1-eth0".into(),
        labels: BTreeMap::new(),
        node: "node-1".into(),
        interface: EndpointInterface::Named("eth0".into()),
        expected_ips: Vec::new(),
        ports: Vec::new(),
        default_allow: false,
        origin: Some(origin()),
    }
}

fn compile_policies(policies: Vec<Policy>, config: &Config) -> Compiled {
    let model = model_for_tests(policies, Vec::new(), Vec::new());
    compile(&model, config, &host())
}

/// The rules of one chain, without the hash comments and with matches in the compiler's
/// order, for readable assertions.
fn chain_text(compiled: &Compiled, family: IpFamily, table: Table, chain: &str) -> Vec<String> {
    let table_rules = compiled
        .ruleset
        .family(family)
        .and_then(|f| f.table(table))
        .unwrap_or_else(|| panic!("no table {table} for {family}"));
    let chain = table_rules
        .chain(chain)
        .unwrap_or_else(|| panic!("no chain {chain}"));
    compiled_rules(chain)
}

#[test]
fn mission_policy_chain_has_felix_shape() {
    let compiled = compile_policies(vec![mission()], &Config::default());
    let chain = names::policy_chain("allow-cluster-nodeport-only", Direction::Ingress);
    let comment = "-m comment --comment \"policy allow-cluster-nodeport-only ingress rule";
    let expected = vec![
        format!("-A {chain} {comment} 0\" -j MARK --set-xmark 0x0/0x180000"),
        format!("-A {chain} {comment} 0\" -s 198.51.100.10/32 -j MARK --set-xmark 0x80000/0x80000"),
        format!("-A {chain} {comment} 0\" -s 198.51.100.12/32 -j MARK --set-xmark 0x80000/0x80000"),
        format!("-A {chain} {comment} 0\" -s 203.0.113.0/28 -j MARK --set-xmark 0x80000/0x80000"),
        format!(
            "-A {chain} {comment} 0\" -m mark --mark 0x80000/0x80000 -j MARK --set-xmark 0x10000/0x10000"
        ),
        format!("-A {chain} {comment} 0\" -m mark --mark 0x10000/0x10000 -j RETURN"),
        format!(
            "-A {chain} {comment} 1\" -p tcp -m multiport --dports 30008 -j MARK --set-xmark 0x40000/0x40000"
        ),
        format!(
            "-A {chain} {comment} 1\" -m mark --mark 0x40000/0x40000 -j NFLOG --nflog-prefix \"DPI1|allow-cluster-nodeport-only\" --nflog-group 1 --nflog-size 80 --nflog-threshold 1"
        ),
        format!("-A {chain} {comment} 1\" -m mark --mark 0x40000/0x40000 -j DROP"),
    ];
    assert_eq!(
        chain_text(&compiled, IpFamily::V4, Table::Mangle, &chain),
        expected
    );
    // The IPv6 chain has no net of its family in rule 0: only the deny remains.
    assert_eq!(
        chain_text(&compiled, IpFamily::V6, Table::Mangle, &chain).len(),
        3
    );
}

#[test]
fn logging_allow_adds_nflog_before_the_return() {
    let config = Config {
        log_actions: [PolicyAction::Allow, PolicyAction::Deny].into(),
        ..Config::default()
    };
    let compiled = compile_policies(vec![mission()], &config);
    let chain = names::policy_chain("allow-cluster-nodeport-only", Direction::Ingress);
    let rules = chain_text(&compiled, IpFamily::V4, Table::Mangle, &chain);
    assert!(rules[5].contains("-m mark --mark 0x10000/0x10000 -j NFLOG --nflog-prefix \"API0|allow-cluster-nodeport-only\" --nflog-group 1"), "{rules:#?}");
    assert!(
        rules[6].ends_with("-m mark --mark 0x10000/0x10000 -j RETURN"),
        "{rules:#?}"
    );
}

#[test]
fn pre_dnat_policy_without_early_drop_hooks_mangle_prerouting_only() {
    let config = Config {
        early_drop: false,
        ..Config::default()
    };
    let compiled = compile_policies(vec![mission()], &config);
    let v4 = compiled.ruleset.family(IpFamily::V4).expect("v4");
    assert_eq!(
        v4.tables.iter().map(|t| t.table).collect::<Vec<_>>(),
        vec![Table::Mangle]
    );
    let mangle = v4.table(Table::Mangle).expect("mangle");
    assert_eq!(
        mangle.hooks,
        vec![Hook {
            kernel_chain: "PREROUTING".into(),
            target: "npg-PREROUTING".into()
        }]
    );
    let top = chain_text(&compiled, IpFamily::V4, Table::Mangle, "npg-PREROUTING");
    assert_eq!(
        top,
        vec![
            "-A npg-PREROUTING -m comment --comment \"replies and established connections\" -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
            "-A npg-PREROUTING -m comment --comment \"TCP SYN that pre-DNAT policy denies (decision table)\" -p tcp -m tcp --tcp-flags SYN,ACK SYN -m multiport --dports 30008 ! -i lo -m set ! --match-set npg4-syn-sources src -g npg-syn-denied",
            "-A npg-PREROUTING -j MARK --set-xmark 0x0/0x1f0000",
            "-A npg-PREROUTING -m comment --comment \"host to itself\" -i lo -j RETURN",
            "-A npg-PREROUTING -m comment --comment \"host to itself (src is a host address)\" -m set --match-set npg4-this-host src -j RETURN",
            "-A npg-PREROUTING -j npg-fh-all-interfaces.any",
        ]
    );
    // The decision table still shortens the walk of a denied SYN, in mangle: the policy rule's
    // NFLOG and DROP, nothing before them.
    let denied = chain_text(&compiled, IpFamily::V4, Table::Mangle, "npg-syn-denied");
    assert_eq!(denied.len(), 2, "{denied:#?}");
    assert!(
        denied[0].contains("-j NFLOG --nflog-prefix \"DPI1|allow-cluster-nodeport-only\""),
        "{denied:#?}"
    );
    assert!(denied[1].ends_with("-j DROP"), "{denied:#?}");
    let endpoint = chain_text(
        &compiled,
        IpFamily::V4,
        Table::Mangle,
        "npg-fh-all-interfaces.any",
    );
    assert_eq!(
        endpoint[0],
        "-A npg-fh-all-interfaces.any -m comment --comment \"failsafe ports\" -j npg-failsafe-in"
    );
    assert!(
        endpoint.iter().all(|r| !r.ends_with("-j DROP")),
        "pre-DNAT has no default deny: {endpoint:#?}"
    );
    let this_host = v4.set("npg4-this-host").expect("this-host set");
    assert_eq!(this_host.members.len(), 1);
    // No policy is normal: the filter table is left alone.
    assert!(
        compiled
            .warnings
            .iter()
            .all(|w| !w.message.contains("default-deny"))
    );
}

#[test]
fn normal_ingress_policy_is_default_deny_with_failsafes_first() {
    let allow = tcp_port(PolicyAction::Allow, vec![Port::Single(443)]);
    let compiled = compile_policies(
        vec![policy("web", 1.0, PolicyKind::Normal, vec![allow])],
        &Config::default(),
    );
    let endpoint = chain_text(
        &compiled,
        IpFamily::V4,
        Table::Filter,
        "npg-fh-all-interfaces.any",
    );
    let actions: Vec<&str> = endpoint
        .iter()
        .map(|r| r.rsplit(" -").next().unwrap_or_default())
        .collect();
    assert!(
        endpoint[0].contains("--ctstate INVALID -j DROP"),
        "{endpoint:#?}"
    );
    assert!(endpoint[1].ends_with("-j npg-failsafe-in"), "{endpoint:#?}");
    assert!(
        endpoint
            .iter()
            .any(|r| r.ends_with("-m mark --mark 0x0/0x20000 -j npg-pi-web")),
        "{endpoint:#?}"
    );
    assert!(
        endpoint
            .iter()
            .any(|r| r.contains("End of tier default. Drop if no policies passed packet")),
        "{actions:#?}"
    );
    assert!(
        endpoint
            .last()
            .is_some_and(|r| r.contains("allowed by profile projectcalico-default-allow"))
    );
    let failsafe = chain_text(&compiled, IpFamily::V4, Table::Filter, "npg-failsafe-in");
    assert_eq!(
        failsafe,
        [
            "-A npg-failsafe-in -p tcp -m multiport --dports 22,179,2379,2380,5473,6443,6666,6667 -j MARK --set-xmark 0x10000/0x10000",
            "-A npg-failsafe-in -p udp -m multiport --dports 68 -j MARK --set-xmark 0x10000/0x10000",
        ],
        "the default inbound failsafe ports, one rule per protocol"
    );
    assert!(
        compiled
            .warnings
            .iter()
            .any(|w| w.message.contains("default-deny for ingress"))
    );
    let filter = compiled
        .ruleset
        .family(IpFamily::V4)
        .and_then(|f| f.table(Table::Filter))
        .expect("filter");
    assert_eq!(filter.hooks.len(), 1);
    assert_eq!(filter.hooks[0].kernel_chain, "INPUT");
}

#[test]
fn failsafe_ports_share_a_rule_per_protocol_and_net() {
    use crate::config::Failsafe;
    let mut config = Config::default();
    let entry = |text: &str| -> Failsafe {
        let (protocol, rest) = text.split_once(':').expect("protocol:port[@net]");
        let (port, net) = match rest.split_once('@') {
            Some((port, net)) => (port, Some(net.parse().expect("net"))),
            None => (rest, None),
        };
        Failsafe {
            protocol: match protocol {
                "tcp" => Protocol::Tcp,
                _ => Protocol::Udp,
            },
            port: port.parse().expect("port"),
            net,
        }
    };
    // Seventeen tcp ports (one listed twice), one limited to a net, one of the other family.
    config.failsafe_inbound = (1..=16)
        .map(|i| format!("tcp:{}", 1000 + i))
        .chain(["tcp:1001".into(), "udp:53".into()])
        .chain(["tcp:22@192.0.2.0/24".into(), "tcp:23@2001:db8::/32".into()])
        .map(|text| entry(&text))
        .collect();
    let compiled = compile_policies(
        vec![policy(
            "web",
            1.0,
            PolicyKind::Normal,
            vec![rule(PolicyAction::Allow)],
        )],
        &config,
    );
    let failsafe = chain_text(&compiled, IpFamily::V4, Table::Filter, "npg-failsafe-in");
    let ports: Vec<String> = (1001..=1015).map(|p| p.to_string()).collect();
    assert_eq!(
        failsafe,
        [
            format!(
                "-A npg-failsafe-in -p tcp -m multiport --dports {} -j MARK --set-xmark 0x10000/0x10000",
                ports.join(",")
            ),
            "-A npg-failsafe-in -p tcp -m multiport --dports 1016 -j MARK --set-xmark 0x10000/0x10000".to_owned(),
            "-A npg-failsafe-in -p udp -m multiport --dports 53 -j MARK --set-xmark 0x10000/0x10000".to_owned(),
            "-A npg-failsafe-in -p tcp -m multiport --dports 22 -s 192.0.2.0/24 -j MARK --set-xmark 0x10000/0x10000".to_owned(),
        ],
        "fifteen ports a rule, in the order listed, each net apart, the other family left out"
    );
}

#[test]
fn long_net_lists_become_one_set_match() {
    let mut allow = rule(PolicyAction::Allow);
    allow.source.nets = (0..100u8)
        .map(|i| format!("10.{i}.0.0/16").parse().expect("net"))
        .collect();
    let compiled = compile_policies(
        vec![policy("big", 1.0, PolicyKind::PreDnat, vec![allow])],
        &Config::default(),
    );
    let chain = chain_text(&compiled, IpFamily::V4, Table::Mangle, "npg-pi-big");
    assert_eq!(chain.len(), 1, "{chain:#?}");
    assert!(
        chain[0].contains("-m set --match-set npg4-n-"),
        "{chain:#?}"
    );
    let v4 = compiled.ruleset.family(IpFamily::V4).expect("v4");
    let set = v4
        .sets
        .iter()
        .find(|s| s.name.starts_with("npg4-n-"))
        .expect("net set");
    // 10.0.0.0/16 … 10.99.0.0/16 merge where they can.
    assert!(set.members.len() < 100 && !set.members.is_empty());
    assert!(set.name.len() <= crate::ruleset::MAX_SET_NAME);
}

#[test]
fn more_than_fifteen_ports_split_into_a_block() {
    let ports: Vec<Port> = (1000..1017)
        .map(Port::Single)
        .chain([Port::Range(2000, 2100)])
        .collect();
    let compiled = compile_policies(
        vec![policy(
            "ports",
            1.0,
            PolicyKind::PreDnat,
            vec![tcp_port(PolicyAction::Deny, ports)],
        )],
        &Config::default(),
    );
    let chain = chain_text(&compiled, IpFamily::V4, Table::Mangle, "npg-pi-ports");
    assert!(
        chain[0].ends_with("-j MARK --set-xmark 0x0/0x180000"),
        "{chain:#?}"
    );
    assert!(chain[1].contains(
        "--dports 1000,1001,1002,1003,1004,1005,1006,1007,1008,1009,1010,1011,1012,1013,1014 "
    ));
    assert!(
        chain[2].contains("--dports 1015,1016,2000:2100 "),
        "{chain:#?}"
    );
    assert!(
        chain[3]
            .contains("-p tcp -m mark --mark 0x80000/0x80000 -j MARK --set-xmark 0x40000/0x40000"),
        "{chain:#?}"
    );
}

/// A rule needing both a `notNets` block (source) and a `nets` block (destination): the
/// alternatives of the destination must start the AND chain from a clear bit, and the source's
/// exclusions must come after them, so neither can undo the other.
#[test]
fn not_nets_block_comes_after_every_any_block_of_the_rule() {
    let mut allow = rule(PolicyAction::Allow);
    allow.source.not_nets = nets(&["198.51.100.11/32", "203.0.113.0/24"]);
    allow.destination.nets = nets(&["198.51.100.1/32", "192.0.2.1/32"]);
    let compiled = compile_policies(
        vec![policy("both", 1.0, PolicyKind::PreDnat, vec![allow])],
        &Config::default(),
    );
    let chain = chain_text(&compiled, IpFamily::V4, Table::Mangle, "npg-pi-both");
    let tail: Vec<&str> = chain
        .iter()
        .map(|line| line.split("rule 0\" ").nth(1).unwrap_or(line))
        .collect();
    assert_eq!(
        tail,
        vec![
            "-j MARK --set-xmark 0x0/0x180000",
            "-d 198.51.100.1/32 -j MARK --set-xmark 0x80000/0x80000",
            "-d 192.0.2.1/32 -j MARK --set-xmark 0x80000/0x80000",
            "-s 198.51.100.11/32 -j MARK --set-xmark 0x0/0x80000",
            "-s 203.0.113.0/24 -j MARK --set-xmark 0x0/0x80000",
            // (the Return after it is the chain's last rule, and dropped as Felix does)
            "-m mark --mark 0x80000/0x80000 -j MARK --set-xmark 0x10000/0x10000",
        ],
        "{chain:#?}"
    );
}

#[test]
fn thousands_of_policies_keep_every_chain_short() {
    let policies: Vec<Policy> = (0..2500)
        .map(|i| {
            let mut allow = rule(PolicyAction::Allow);
            allow.source.nets = nets(&["192.0.2.0/24"]);
            policy(
                &format!("p{i:05}"),
                f64::from(i),
                PolicyKind::PreDnat,
                vec![allow],
            )
        })
        .collect();
    let compiled = compile_policies(policies, &Config::default());
    let longest = compiled
        .ruleset
        .chains()
        .map(|(_, _, chain)| chain.rules.len())
        .max()
        .unwrap_or(0);
    assert!(
        longest <= 2 * POLICIES_PER_CHAIN + 10,
        "longest chain has {longest} rules"
    );
    let batches = compiled
        .ruleset
        .chains()
        .filter(|(f, t, c)| {
            *f == IpFamily::V4 && *t == Table::Mangle && c.name.starts_with("npg-pb-")
        })
        .count();
    assert_eq!(batches, 25);
}

/// `earlyDrop`: raw PREROUTING sends TCP SYNs to the ports pre-DNAT policy denies (and
/// nothing else) through copies of the pre-DNAT path's chains, which end in the same policy
/// chains, shortened for such SYNs; mangle returns the SYNs raw judged.
#[test]
fn early_drop_judges_syns_in_raw_with_the_same_policy_chains() {
    let compiled = compile_policies(vec![mission()], &Config::default());
    let v4 = compiled.ruleset.family(IpFamily::V4).expect("v4");
    assert_eq!(
        v4.tables.iter().map(|t| t.table).collect::<Vec<_>>(),
        vec![Table::Raw, Table::Mangle]
    );
    let raw = v4.table(Table::Raw).expect("raw");
    assert_eq!(
        raw.hooks,
        vec![Hook {
            kernel_chain: "PREROUTING".into(),
            target: "npg-PREROUTING".into()
        }]
    );
    // The decision table first: a SYN to the guarded port from anywhere but the whitelist and
    // the host's own addresses, on any interface but `lo`, meets what the walk would give it.
    assert_eq!(
        chain_text(&compiled, IpFamily::V4, Table::Raw, "npg-PREROUTING"),
        vec![
            "-A npg-PREROUTING -m comment --comment \"TCP SYN that pre-DNAT policy denies: dropped before connection tracking\" -p tcp -m tcp --tcp-flags SYN,ACK SYN -m multiport --dports 30008 ! -i lo -m set ! --match-set npg4-syn-sources src -g npg-syn-denied",
            "-A npg-PREROUTING -m comment --comment \"TCP SYN: pre-DNAT policy before connection tracking\" -p tcp -m tcp --tcp-flags SYN,ACK SYN -m multiport --dports 30008 -g npg-syn-PREROUTING",
        ]
    );
    let members: Vec<String> = compiled
        .ruleset
        .family(IpFamily::V4)
        .expect("v4")
        .sets
        .iter()
        .find(|set| set.name == "npg4-syn-sources")
        .expect("the table's set")
        .members
        .iter()
        .map(|member| format!("{member:?}"))
        .collect();
    assert_eq!(
        members,
        [
            "198.51.100.1/32",
            "198.51.100.10/32",
            "198.51.100.12/32",
            "203.0.113.0/28"
        ]
        .map(|net| format!("Net({net})"))
    );
    let policy_rule = "-m comment --comment \"policy allow-cluster-nodeport-only ingress rule 1\"";
    assert_eq!(
        chain_text(&compiled, IpFamily::V4, Table::Raw, "npg-syn-denied"),
        vec![
            format!(
                "-A npg-syn-denied {policy_rule} -j NFLOG --nflog-prefix \"DPI1|allow-cluster-nodeport-only\" --nflog-group 1 --nflog-size 80 --nflog-threshold 1"
            ),
            format!("-A npg-syn-denied {policy_rule} -j DROP"),
        ]
    );
    let denied = raw.chain("npg-syn-denied").expect("the table's chain");
    assert!(
        denied.rules[1].origin.is_some(),
        "status counts the table's drops for the policy rule"
    );
    // The failsafe ports are not among the SYNs raw judges, the tier's mark bits are known
    // clear and the endpoint chain's last return changes nothing: raw's top chain jumps to the
    // policy chain itself.
    let chain = names::policy_chain("allow-cluster-nodeport-only", Direction::Ingress);
    assert_eq!(
        chain_text(&compiled, IpFamily::V4, Table::Raw, "npg-syn-PREROUTING"),
        vec![
            "-A npg-syn-PREROUTING -j MARK --set-xmark 0x0/0x1f0000",
            "-A npg-syn-PREROUTING -m comment --comment \"host to itself\" -i lo -j RETURN",
            "-A npg-syn-PREROUTING -m comment --comment \"host to itself (src is a host address)\" -m set --match-set npg4-this-host src -j RETURN",
            &format!("-A npg-syn-PREROUTING -j {chain}"),
            "-A npg-syn-PREROUTING -m comment --comment \"judged by pre-DNAT policy before connection tracking: not dropped\" -j MARK --set-xmark 0x100000/0x100000",
        ]
    );
    assert_eq!(raw.chains.len(), 4, "{:#?}", raw.chains);
    // The policy chain is mangle's but for the clear of bits nothing has set yet.
    let mangle = v4.table(Table::Mangle).expect("mangle");
    let rules = |table: &crate::ruleset::TableRuleset| {
        table.chain(&chain).expect("policy chain").rules.to_vec()
    };
    assert_eq!(rules(raw)[..], rules(mangle)[1..], "the same policy chain");
    // Nothing in raw looks at conntrack, which has not run yet.
    assert!(
        raw.chains
            .iter()
            .all(|chain| chain.rules.iter().all(|rule| !rule
                .matches
                .iter()
                .any(|m| matches!(m, crate::ruleset::Match::Conntrack(_)))))
    );
    let top = chain_text(&compiled, IpFamily::V4, Table::Mangle, "npg-PREROUTING");
    assert_eq!(
        top[1],
        "-A npg-PREROUTING -m comment --comment \"TCP SYN judged in raw PREROUTING before connection tracking\" -p tcp -m tcp --tcp-flags SYN,ACK SYN -m mark --mark 0x100000/0x100000 -j RETURN"
    );
}

/// With doNotTrack policy in raw too, the SYN rule comes last in raw's top chain, only for
/// what doNotTrack did not accept, and the copies do not meet the doNotTrack chains.
#[test]
fn early_drop_follows_do_not_track_policy() {
    let mut untracked_allow = rule(PolicyAction::Allow);
    untracked_allow.source.nets = nets(&["192.0.2.0/24"]);
    let untracked = policy(
        "untracked",
        1.0,
        PolicyKind::Untracked,
        vec![untracked_allow],
    );
    let compiled = compile_policies(vec![untracked, mission()], &Config::default());
    let top = chain_text(&compiled, IpFamily::V4, Table::Raw, "npg-PREROUTING");
    assert_eq!(
        top.last().map(String::as_str),
        Some(
            "-A npg-PREROUTING -m comment --comment \"TCP SYN: pre-DNAT policy before connection tracking\" -p tcp -m tcp --tcp-flags SYN,ACK SYN -m multiport --dports 30008 -m mark --mark 0x0/0x10000 -g npg-syn-PREROUTING"
        )
    );
    assert!(
        top.iter().any(|r| r.ends_with("-j npg-from-host-endpoint")),
        "{top:#?}"
    );
    let raw = compiled
        .ruleset
        .family(IpFamily::V4)
        .and_then(|f| f.table(Table::Raw))
        .expect("raw");
    assert!(raw.chain(names::EARLY_DROP_CHAIN).is_some());
    assert!(raw.chain("npg-from-host-endpoint").is_some());
}

#[test]
fn no_policy_means_no_rules() {
    let compiled = compile_policies(Vec::new(), &Config::default());
    assert!(
        compiled
            .ruleset
            .families
            .iter()
            .all(|f| f.tables.is_empty() && f.sets.is_empty())
    );
}

#[test]
fn explicit_endpoint_without_profile_is_default_deny_even_without_policy() {
    let endpoint = eth0_endpoint();
    let model = model_for_tests(Vec::new(), Vec::new(), vec![endpoint]);
    let compiled = compile(&model, &Config::default(), &host());
    let endpoint = chain_text(&compiled, IpFamily::V4, Table::Filter, "npg-fh-eth0");
    assert!(
        endpoint.last().is_some_and(
            |r| r.ends_with("-m comment --comment \"Drop if no profiles matched\" -j DROP")
        ),
        "{endpoint:#?}"
    );
    let dispatch = chain_text(
        &compiled,
        IpFamily::V4,
        Table::Filter,
        "npg-from-host-endpoint",
    );
    assert_eq!(dispatch.len(), 1);
    assert!(
        dispatch[0].ends_with("-i eth0 -g npg-fh-eth0"),
        "{dispatch:#?}"
    );
    assert!(compiled.warnings.iter().any(|w| {
        w.message
            .contains("has no profile and no normal ingress policy")
    }));
}

#[test]
fn endpoints_of_other_nodes_are_not_enforced_but_their_addresses_are_selectable() {
    let mut allow = tcp_port(PolicyAction::Allow, vec![Port::Single(10250)]);
    allow.source.selector = Some(Selector::parse("role == 'master'").expect("selector"));
    let master = HostEndpoint {
        name: "master-eth0".into(),
        labels: [("role".to_owned(), "master".to_owned())].into(),
        node: "master".into(),
        interface: EndpointInterface::Named("eth0".into()),
        expected_ips: vec!["198.51.100.50".parse().expect("ip")],
        ports: Vec::new(),
        default_allow: false,
        origin: Some(origin()),
    };
    let policies = vec![policy("kubelet", 1.0, PolicyKind::PreDnat, vec![allow])];
    let model = model_for_tests(policies, Vec::new(), vec![master]);
    let compiled = compile(&model, &Config::default(), &host());
    // This host has no endpoint of its own: the implicit one applies, with its allow profile.
    let v4 = compiled.ruleset.family(IpFamily::V4).expect("v4");
    assert!(v4.table(Table::Filter).is_none());
    let set = v4
        .sets
        .iter()
        .find(|s| s.name.starts_with("npg4-s-"))
        .expect("selector set");
    assert_eq!(
        set.members
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["198.51.100.50"]
    );
}

#[test]
fn ipv6_off_skips_the_family_and_says_so() {
    let mut facts = host();
    facts.ipv6 = false;
    facts.ipv6_off_reason = Some("`/proc/sys/net/ipv6/conf/all/disable_ipv6` is 1".into());
    let model = model_for_tests(vec![mission()], Vec::new(), Vec::new());
    let compiled = compile(&model, &Config::default(), &facts);
    assert!(compiled.ruleset.family(IpFamily::V6).is_none());
    assert!(
        compiled
            .warnings
            .iter()
            .any(|w| w.message.contains("IPv6 rules are skipped"))
    );
}

#[test]
fn a_named_port_without_protocol_matches_the_port_on_each_of_its_protocols() {
    let model = model_of(
        "apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: node-1-eth0
  labels: {role: dns}
spec:
  node: node-1
  interfaceName: eth0
  expectedIPs: [198.51.100.1]
  ports:
    - {name: dns, port: 53, protocol: TCP}
    - {name: dns, port: 53, protocol: UDP}
    - {name: web, port: 80, protocol: TCP}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: dns
spec:
  selector: role == 'dns'
  ingress:
    - action: Allow
      destination:
        ports: [dns]
",
    );
    let compiled = compile(&model, &Config::default(), &host());
    let v4 = compiled.ruleset.family(IpFamily::V4).expect("IPv4");
    let members: Vec<Vec<String>> = v4
        .sets
        .iter()
        .filter(|set| set.kind == crate::ruleset::SetKind::IpPort)
        .map(|set| set.members.iter().map(ToString::to_string).collect())
        .collect();
    assert_eq!(
        members,
        [["198.51.100.1,tcp:53", "198.51.100.1,udp:53"]],
        "one set, both protocols, not the web port"
    );
}

#[test]
fn tiers_run_in_order_each_ending_in_its_default_action() {
    let model = model_of(
        "apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100}
---
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: platform}
spec: {order: 200, defaultAction: Pass}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: platform.ssh}
spec: {tier: platform, selector: all(), ingress: [{action: Allow, protocol: TCP, destination: {ports: [22]}}]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: security.block}
spec: {tier: security, selector: all(), ingress: [{action: Deny, source: {nets: [192.0.2.66/32]}}, {action: Pass}]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: web}
spec: {selector: all(), ingress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]}
",
    );
    let config = Config {
        log_actions: [crate::model::Action::Deny, crate::model::Action::Pass]
            .into_iter()
            .collect(),
        ..Config::default()
    };
    let compiled = compile(&model, &config, &host());
    let chain = compiled
        .ruleset
        .family(IpFamily::V4)
        .and_then(|family| family.tables.iter().find(|t| t.table == Table::Filter))
        .and_then(|table| table.chains.iter().find(|c| c.name.starts_with("npg-fh-")))
        .expect("the host endpoint's filter chain");
    let said: Vec<String> = chain
        .rules
        .iter()
        .filter_map(|rule| rule.comment.clone())
        .filter(|comment| comment.contains("tier"))
        .collect();
    assert_eq!(
        said,
        [
            "Start of tier security",
            "End of tier security: log",
            "End of tier security. Drop if no policies passed packet",
            "Start of tier platform",
            "End of tier platform: pass, logged",
            "Start of tier default",
            "End of tier default: log",
            "End of tier default. Drop if no policies passed packet",
        ]
    );
}

/// The model of a policy file's text, checked by validation (which must find no error).
fn model_of(text: &str) -> Model {
    let mut sources = crate::source::Sources::new();
    let id = sources.add(crate::source::SourceFile::new("p.yaml", text));
    let (resources, mut diagnostics) = crate::load::parse_file(id, sources.get(id));
    let resources: Vec<_> = resources
        .into_iter()
        .map(|resource| (id, resource))
        .collect();
    let (model, more) = crate::validate::validate(&sources, &resources);
    diagnostics.extend(more);
    assert!(
        !crate::diagnostic::has_errors(&diagnostics),
        "{}",
        crate::diagnostic::render_all(&diagnostics, &sources)
    );
    model
}

/// The decision table follows the host endpoint: with pre-DNAT policy on `eth0` only, SYNs on
/// other interfaces are not judged, so the table's rule names `eth0`.
#[test]
fn early_drop_table_names_the_one_interface_it_drops_on() {
    let endpoint = eth0_endpoint();
    let model = model_for_tests(vec![mission()], Vec::new(), vec![endpoint]);
    let compiled = compile(&model, &Config::default(), &host());
    let top = chain_text(&compiled, IpFamily::V4, Table::Raw, "npg-PREROUTING");
    assert_eq!(top.len(), 2, "{top:#?}");
    assert!(
        top[0].contains(" -i eth0 -m set ! --match-set npg4-syn-sources src -g npg-syn-denied"),
        "{top:#?}"
    );
}

/// A rule that looks at the destination address is beyond the table (it keys on the source
/// and the port only): every SYN walks the chains.
#[test]
fn early_drop_has_no_table_where_the_chains_look_at_the_destination() {
    let mut deny = tcp_port(PolicyAction::Deny, vec![Port::Single(30008)]);
    deny.destination.nets = nets(&["198.51.100.1/32"]);
    let policy = policy("deny-to-one", 10.0, PolicyKind::PreDnat, vec![deny]);
    let compiled = compile_policies(vec![policy], &Config::default());
    let top = chain_text(&compiled, IpFamily::V4, Table::Raw, "npg-PREROUTING");
    assert_eq!(top.len(), 1, "{top:#?}");
    assert!(top[0].ends_with("-g npg-syn-PREROUTING"), "{top:#?}");
    let raw = compiled
        .ruleset
        .family(IpFamily::V4)
        .and_then(|family| family.table(Table::Raw))
        .expect("raw");
    assert!(raw.chain("npg-syn-denied").is_none());
}
