//! Property tests: bad input never panics anything, every valid policy set compiles into a
//! ruleset the kernel would accept (names within limits, every jump to a chain that exists,
//! every set referenced exists) and that reads back as itself, and the early drop's decision
//! table drops only the SYNs `trace` says the policies deny.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;

use ipnet::IpNet;

use nodeport_guard::compile::compile;
use nodeport_guard::config::Config;
use nodeport_guard::dataplane::Backend as _;
use nodeport_guard::dataplane::iptables;
use nodeport_guard::dataplane::iptables::parse::parse_iptables_save;
use nodeport_guard::dataplane::iptables::render::render_table;
use nodeport_guard::facts::{HostFacts, Interface};
use nodeport_guard::load::parse_file;
use nodeport_guard::model::IpFamily;
use nodeport_guard::plan::plan;
use nodeport_guard::policy_set::load as load_policies;
use nodeport_guard::ruleset::{
    Action, IpSet, MAX_CHAIN_NAME, MAX_SET_NAME, Match, Rule, Ruleset, SetMember, Side, Table,
};
use nodeport_guard::selector::Selector;
use nodeport_guard::source::{SourceFile, Sources};
use nodeport_guard::state::State;
use nodeport_guard::trace::{ConnState, Evaluator, Outcome, Packet, Travel};
use nodeport_guard::validate::validate;
use proptest::prelude::*;

fn parse_and_validate(text: &str) {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("p.yaml", text));
    let (resources, diagnostics) = parse_file(id, sources.get(id));
    let resources: Vec<_> = resources.into_iter().map(|r| (id, r)).collect();
    let (_, more) = validate(&sources, &resources);
    for diagnostic in diagnostics.iter().chain(&more) {
        // Rendering touches every span: it must not panic either.
        let _ = diagnostic.render(&sources);
    }
}

const EXAMPLE: &str = include_str!("../policies/nodeport-whitelist.yaml");

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        parse_and_validate(&text);
    }

    #[test]
    fn mangled_examples_never_panic(cut in 0usize..EXAMPLE.len(), insert in "[ -~\\n\\t]{0,12}") {
        let mut text = EXAMPLE.to_owned();
        let at = (0..=cut).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text.insert_str(at, &insert);
        parse_and_validate(&text);
    }

    #[test]
    fn selectors_never_panic_and_print_canonically(text in "[a-z!&|()=' {},.in-]{0,40}") {
        if let Ok(selector) = Selector::parse(&text) {
            let canonical = selector.to_string();
            let again = Selector::parse(&canonical).expect("the canonical form parses");
            prop_assert_eq!(again.to_string(), canonical);
        }
    }
}

/// One generated policy, written as YAML.
#[derive(Debug, Clone)]
struct GeneratedPolicy {
    order: Option<u16>,
    pre_dnat: bool,
    /// A `StagedGlobalNetworkPolicy` (it only logs).
    staged: bool,
    rules: Vec<GeneratedRule>,
}

#[derive(Debug, Clone)]
struct GeneratedRule {
    action: &'static str,
    protocol: Option<&'static str>,
    six: bool,
    nets: Vec<u8>,
    not_nets: Vec<u8>,
    ports: Vec<(u16, u16)>,
    not_ports: Vec<u16>,
    office: bool,
}

fn arb_rule() -> impl Strategy<Value = GeneratedRule> {
    (
        prop::sample::select(vec!["Allow", "Deny", "Pass", "Log"]),
        prop::option::of(prop::sample::select(vec!["TCP", "UDP", "SCTP"])),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 0..12),
        prop::collection::vec(any::<u8>(), 0..3),
        prop::collection::vec((1u16..60000, 0u16..3), 0..20),
        prop::collection::vec(1u16..60000, 0..3),
        any::<bool>(),
    )
        .prop_map(
            |(action, protocol, six, nets, not_nets, ports, not_ports, office)| GeneratedRule {
                action,
                protocol,
                six,
                nets,
                not_nets,
                ports: ports
                    .into_iter()
                    .map(|(first, span)| (first, first + span))
                    .collect(),
                not_ports,
                office,
            },
        )
}

fn arb_policy() -> impl Strategy<Value = GeneratedPolicy> {
    (
        prop::option::of(0u16..100),
        any::<bool>(),
        prop::collection::vec(arb_rule(), 0..5),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(order, pre_dnat, rules, staged)| GeneratedPolicy {
            order,
            pre_dnat,
            staged,
            rules,
        })
}

fn net(six: bool, byte: u8) -> String {
    if six {
        format!("\"2001:db8:{byte:x}::/48\"")
    } else {
        format!("203.0.{byte}.0/24")
    }
}

fn yaml(policies: &[GeneratedPolicy]) -> String {
    let mut text = String::from(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: office\n  labels: {role: office}\nspec:\n  nets: [198.51.100.0/24, \"2001:db8:ff::/64\"]\n",
    );
    for (index, policy) in policies.iter().enumerate() {
        let kind = if policy.staged {
            "StagedGlobalNetworkPolicy"
        } else {
            "GlobalNetworkPolicy"
        };
        let _ = write!(
            text,
            "---\napiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata:\n  name: p{index}\nspec:\n"
        );
        if let Some(order) = policy.order {
            let _ = writeln!(text, "  order: {order}");
        }
        if policy.pre_dnat {
            text.push_str("  preDNAT: true\n  applyOnForward: true\n");
        }
        text.push_str("  ingress:\n");
        if policy.rules.is_empty() {
            text.push_str("  - action: Deny\n");
        }
        for rule in &policy.rules {
            let _ = writeln!(text, "  - action: {}", rule.action);
            if let Some(protocol) = rule.protocol {
                let _ = writeln!(text, "    protocol: {protocol}");
            }
            text.push_str("    source:\n");
            if !rule.nets.is_empty() {
                let nets: Vec<String> = rule.nets.iter().map(|b| net(rule.six, *b)).collect();
                let _ = writeln!(text, "      nets: [{}]", nets.join(", "));
            }
            if !rule.not_nets.is_empty() {
                let nets: Vec<String> = rule
                    .not_nets
                    .iter()
                    .map(|b| net(rule.six, b.wrapping_add(128)))
                    .collect();
                let _ = writeln!(text, "      notNets: [{}]", nets.join(", "));
            }
            if rule.office {
                text.push_str("      selector: role == 'office'\n");
            }
            text.push_str("    destination:\n");
            if rule.protocol.is_some() {
                if !rule.ports.is_empty() {
                    let ports: Vec<String> = rule
                        .ports
                        .iter()
                        .map(|(a, b)| {
                            if a == b {
                                a.to_string()
                            } else {
                                format!("\"{a}:{b}\"")
                            }
                        })
                        .collect();
                    let _ = writeln!(text, "      ports: [{}]", ports.join(", "));
                }
                if !rule.not_ports.is_empty() {
                    let ports: Vec<String> =
                        rule.not_ports.iter().map(ToString::to_string).collect();
                    let _ = writeln!(text, "      notPorts: [{}]", ports.join(", "));
                }
            }
        }
    }
    text
}

/// Checks what the kernel would check: names within limits and every reference resolvable.
fn check_kernel_acceptable(ruleset: &Ruleset) -> Result<(), String> {
    for family in &ruleset.families {
        let sets: BTreeSet<&str> = family.sets.iter().map(|s| s.name.as_str()).collect();
        for set in &family.sets {
            if set.name.len() > MAX_SET_NAME || !set.name.starts_with("npg") {
                return Err(format!("bad set name {}", set.name));
            }
        }
        for table in &family.tables {
            let chains: BTreeSet<&str> = table.chains.iter().map(|c| c.name.as_str()).collect();
            for hook in &table.hooks {
                if !chains.contains(hook.target.as_str()) {
                    return Err(format!("hook to missing chain {}", hook.target));
                }
            }
            for chain in &table.chains {
                if chain.name.len() > MAX_CHAIN_NAME || !chain.name.starts_with("npg-") {
                    return Err(format!("bad chain name {}", chain.name));
                }
                for rule in chain.rules.iter() {
                    if let Action::Jump(target) | Action::Goto(target) = &rule.action
                        && !chains.contains(target.as_str())
                    {
                        return Err(format!("{} jumps to missing {target}", chain.name));
                    }
                    for matched in &rule.matches {
                        if let Match::Set { name, .. } = matched
                            && !sets.contains(name.as_str())
                        {
                            return Err(format!("{} uses missing set {name}", chain.name));
                        }
                        if let Match::Ports { ports, .. } = matched {
                            let slots: usize = ports.iter().map(|p| p.slots()).sum();
                            if slots > 15 {
                                return Err(format!(
                                    "{} has a multiport of {slots} slots",
                                    chain.name
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn valid_policies_compile_to_rules_the_kernel_accepts(policies in prop::collection::vec(arb_policy(), 0..6)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("generated.yaml");
        let text = yaml(&policies);
        std::fs::write(&file, &text).expect("write");
        let set = load_policies(&[file]);
        let errors: Vec<String> = set.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.headline(&set.sources)).collect();
        prop_assert!(set.is_valid(), "generated policies must be valid: {errors:#?}\n{text}");

        let host = HostFacts::minimal("node1");
        let compiled = compile(&set.model, &Config::default(), &host);
        check_kernel_acceptable(&compiled.ruleset).map_err(TestCaseError::fail)?;
        // Staged policies' chains never drop.
        for (_, _, chain) in compiled.ruleset.chains() {
            if chain.name.starts_with("npg-sp") {
                prop_assert!(chain.rules.iter().all(|rule| rule.action != Action::Drop), "{}", chain.name);
            }
        }

        // Deterministic: compiling again gives the same ruleset.
        let again = compile(&set.model, &Config::default(), &host);
        prop_assert_eq!(&again.ruleset, &compiled.ruleset);

        // Reading the rendered text back gives the state we wanted: render ∘ observe is stable.
        let desired = iptables::NFT.desired(&compiled.ruleset);
        let mut observed = State::default();
        for family in &compiled.ruleset.families {
            for table in &family.tables {
                parse_iptables_save(&render_table(table, family.family), family.family, &mut observed)
                    .expect("our own text parses");
            }
        }
        observed.sets = desired.sets.clone();
        let remaining = plan(&desired, &observed);
        let chain_changes: usize = remaining.tables.iter().map(|t| t.chains.len()).sum();
        prop_assert_eq!(chain_changes, 0, "{:?}", remaining.summary());
    }
}

/// Whether the early drop's table rule (the `npg-PREROUTING` rule of raw that goes to
/// `npg-syn-denied`) matches a TCP SYN from `src` to `dport` arriving on `interface`, read off
/// its matches as the kernel would (sets by their members).
fn table_rule_matches(
    rule: &Rule,
    sets: &[IpSet],
    src: IpAddr,
    dport: u16,
    interface: &str,
) -> bool {
    let in_net = |net: &IpNet| net.contains(&src);
    rule.matches.iter().all(|matched| match matched {
        Match::Protocol { number, negated } => (*number == 6) != *negated,
        Match::TcpSyn => true,
        // Our mark bits are clear on a packet that comes in (doNotTrack has not accepted it).
        Match::Mark {
            value: 0,
            negated: false,
            ..
        } => true,
        Match::Ports {
            side: Side::Destination,
            ports,
            negated,
        } => ports.iter().any(|p| p.first <= dport && dport <= p.last) != *negated,
        Match::InInterface(name) => name == interface,
        Match::NotInInterface(name) => name != interface,
        Match::Net {
            side: Side::Source,
            net,
            negated,
        } => in_net(net) != *negated,
        Match::Set {
            side: Side::Source,
            name,
            negated,
            ..
        } => {
            let set = sets
                .iter()
                .find(|set| set.name == *name)
                .expect("the table's set exists");
            let member = set.members.iter().any(|member| match member {
                SetMember::Net(net) => in_net(net),
                SetMember::Ip(ip) => *ip == src,
                SetMember::IpPort(..) => panic!("the table's set holds networks"),
            });
            member != *negated
        }
        other => panic!("the table's rule has a match it should not have: {other:?}"),
    })
}

/// Addresses around every network the generated policies name, the office set's, the host's
/// own and one no policy names.
fn probe_sources(policies: &[GeneratedPolicy]) -> Vec<IpAddr> {
    let mut bytes: BTreeSet<u8> = BTreeSet::new();
    for rule in policies.iter().flat_map(|p| &p.rules) {
        bytes.extend(rule.nets.iter().copied());
        bytes.extend(rule.not_nets.iter().map(|b| b.wrapping_add(128)));
    }
    let mut out: Vec<IpAddr> = Vec::new();
    for byte in bytes {
        for last in [0u8, 1, 255] {
            out.push(IpAddr::from([203, 0, byte, last]));
        }
        out.push(IpAddr::from([
            0x2001,
            0xdb8,
            u16::from(byte),
            0,
            0,
            0,
            0,
            1,
        ]));
        out.push(IpAddr::from([
            0x2001,
            0xdb8,
            u16::from(byte),
            0xffff,
            0,
            0,
            0,
            1,
        ]));
    }
    out.extend([
        IpAddr::from([198, 51, 100, 9]),
        IpAddr::from([0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 9]),
        IpAddr::from([192, 0, 2, 2]),
        IpAddr::from([0x2001, 0xdb8, 0xaa, 0, 0, 0, 0, 2]),
        IpAddr::from([127, 0, 0, 1]),
        IpAddr::from([198, 18, 0, 1]),
        IpAddr::from([0x2001, 0xdb8, 0xeeee, 0, 0, 0, 0, 1]),
    ]);
    out
}

/// Ports at and beside every port and range the generated policies name, a failsafe port and
/// one no policy names.
fn probe_ports(policies: &[GeneratedPolicy]) -> Vec<u16> {
    let mut ports: BTreeSet<u16> = BTreeSet::from([22, 30000, 65535]);
    for rule in policies.iter().flat_map(|p| &p.rules) {
        for (first, last) in &rule.ports {
            ports.extend([*first, *last, first.saturating_sub(1).max(1), last + 1]);
        }
        ports.extend(rule.not_ports.iter().copied());
    }
    ports.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The early drop's decision table (in raw, or in mangle with `earlyDrop: false`) drops a
    /// TCP SYN only where `trace` (which evaluates the policies, not the rules) says pre-DNAT
    /// policy drops it, with the same NFLOG messages on the way: the table is a shortcut of the
    /// walk, never a second opinion.
    #[test]
    fn the_early_drop_table_drops_only_what_the_policies_deny(policies in prop::collection::vec(arb_policy(), 1..5), early_drop in any::<bool>()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("generated.yaml");
        let text = yaml(&policies);
        std::fs::write(&file, &text).expect("write");
        let set = load_policies(&[file]);
        prop_assert!(set.is_valid(), "generated policies must be valid\n{text}");
        let host = HostFacts {
            node_name: "node1".to_owned(),
            interfaces: vec![
                Interface { name: "eth0".to_owned(), addresses: vec![IpAddr::from([192, 0, 2, 2]), IpAddr::from([0x2001, 0xdb8, 0xaa, 0, 0, 0, 0, 2])] },
                Interface { name: "lo".to_owned(), addresses: vec![IpAddr::from([127, 0, 0, 1]), IpAddr::from([0, 0, 0, 0, 0, 0, 0, 1])] },
            ],
            ipv6: true,
            ipv6_off_reason: None,
        };
        // With `earlyDrop: false` the table sits in mangle, after the return for established
        // connections.
        let config = Config { early_drop, ..Config::default() };
        let table = if early_drop { Table::Raw } else { Table::Mangle };
        let compiled = compile(&set.model, &config, &host);
        let evaluator = Evaluator::new(&set.model, &config, &host);
        let sources = probe_sources(&policies);
        let ports = probe_ports(&policies);
        for family in &compiled.ruleset.families {
            let Some(holder) = family.table(table) else { continue };
            let Some(top) = holder.chain("npg-PREROUTING") else { continue };
            let Some(rule) = top.rules.iter().find(|rule| rule.action == Action::Goto("npg-syn-denied".to_owned())) else { continue };
            let denied = holder.chain("npg-syn-denied").expect("the table's chain exists");
            let logged: Vec<String> = denied.rules.iter().filter_map(|rule| match &rule.action {
                Action::Nflog { prefix, .. } => Some(prefix.clone()),
                _ => None,
            }).collect();
            let dst = match family.family {
                IpFamily::V4 => IpAddr::from([192, 0, 2, 2]),
                IpFamily::V6 => IpAddr::from([0x2001, 0xdb8, 0xaa, 0, 0, 0, 0, 2]),
            };
            for src in sources.iter().filter(|a| a.is_ipv4() == dst.is_ipv4()) {
                for dport in &ports {
                    for interface in ["eth0", "lo"] {
                        if !table_rule_matches(rule, &family.sets, *src, *dport, interface) {
                            continue;
                        }
                        let packet = Packet {
                            src: *src,
                            dst,
                            protocol: 6,
                            sport: Some(40000),
                            dport: Some(*dport),
                            icmp_type: None,
                            icmp_code: None,
                            in_interface: Some(interface.to_owned()),
                            out_interface: None,
                            travel: Travel::Inbound,
                            state: ConnState::New,
                        };
                        let trace = evaluator.trace(&packet);
                        let what = format!("a SYN from {src} to port {dport} on {interface}\n{text}");
                        prop_assert_eq!(trace.verdict.outcome, Outcome::Dropped, "the table drops {} but the policies do not: {:?}", what, trace.verdict);
                        let prefixes: Vec<String> = trace.logs.iter().map(|log| log.prefix.clone()).collect();
                        prop_assert_eq!(&prefixes, &logged, "NFLOG of {}", what);
                    }
                }
            }
        }
    }
}
