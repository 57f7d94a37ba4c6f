//! One policy rule → the kernel rules that implement it, in Felix's shapes.
//!
//! A policy rule may need an OR (several nets, several port lists) that one kernel rule cannot
//! express. As in Felix, such alternatives become *match blocks* before the main rule: each
//! alternative of a block sets a scratch mark bit, and the main rule requires the bit. Long
//! lists of nets become sets instead, so the number of kernel rules does not grow with the
//! whitelist.

use std::collections::BTreeSet;

use ipnet::IpNet;

use super::sets::SetRegistry;
use crate::marks::MarkBits;
use crate::model::{self, Direction, IcmpMatch, IpFamily, Port};
use crate::ruleset::{
    Action, MULTIPORT_SLOTS, Match, PortRange, Rule, RuleOrigin, SetLookup, Side,
};

/// Lists of more nets than this become a set rather than one kernel rule per net.
pub const INLINE_NETS_MAX: usize = 8;

/// Longest NFLOG prefix the kernel keeps (64 bytes with the terminating NUL).
pub const MAX_NFLOG_PREFIX: usize = 63;

/// Everything the rule compiler needs besides the rule itself.
pub struct RuleContext<'a> {
    /// The family being compiled.
    pub family: IpFamily,
    /// Mark bits.
    pub marks: MarkBits,
    /// The policy's name.
    pub policy: &'a str,
    /// The direction of the rule list.
    pub direction: Direction,
    /// Which actions log to NFLOG.
    pub log_actions: &'a BTreeSet<model::Action>,
    /// The NFLOG group of this direction.
    pub nflog_group: u16,
}

/// Calico's NFLOG prefix, `<A|D|P|L>P<I|E><index>|<policy>`, shortened as Felix shortens it
/// when longer than the kernel keeps.
pub fn nflog_prefix(
    action: char,
    direction: Direction,
    index: Option<usize>,
    name: &str,
) -> String {
    let direction = match direction {
        Direction::Ingress => 'I',
        Direction::Egress => 'E',
    };
    let index = index.map(|i| i.to_string()).unwrap_or_default();
    let prefix = format!("{action}P{direction}{index}|{name}");
    shorten_prefix(prefix)
}

/// Shortens an NFLOG prefix longer than the kernel keeps: the first and last ten characters
/// stay readable, the middle becomes a hash.
pub fn shorten_prefix(prefix: String) -> String {
    if prefix.len() <= MAX_NFLOG_PREFIX {
        return prefix;
    }
    let head = &prefix[..10];
    let tail = &prefix[prefix.len() - 10..];
    let middle = super::names::length_limited("", &prefix, 42);
    format!("{head}{middle}_{tail}")
}

/// The words every kernel rule of a policy rule carries.
pub fn rule_comment(
    policy: &str,
    direction: Direction,
    index: usize,
    annotations: &[(String, String)],
) -> String {
    let mut comment = format!("policy {policy} {direction} rule {index}");
    for (key, value) in annotations {
        comment.push_str(&format!("; {key}={value}"));
    }
    comment
}

/// A group of alternatives of which at least one (`Any`) or none (`None`) must match.
enum Block {
    Any(Vec<Vec<Match>>),
    None(Vec<Vec<Match>>),
}

/// Compiles one rule of a policy for one family. Returns no kernel rules when the rule can
/// never match in this family.
pub fn compile_rule(
    rule: &model::Rule,
    index: usize,
    context: &RuleContext<'_>,
    sets: &mut SetRegistry<'_>,
) -> Vec<Rule> {
    if !rule.families().contains(&context.family) {
        return Vec::new();
    }
    let marks = context.marks;
    let family = context.family;
    let comment = rule_comment(
        context.policy,
        context.direction,
        index,
        &rule
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>(),
    );
    let set_identity = |what: &str| {
        format!(
            "{}/{}/{index}/{what}/{}",
            context.policy,
            context.direction,
            rule_fingerprint(rule, what)
        )
    };

    // Protocols: `notProtocol` next to a different `protocol` says nothing more; next to the
    // same one it can never match.
    let protocol = rule.protocol.map(|p| p.number());
    let not_protocol = match (rule.protocol, rule.not_protocol) {
        (Some(p), Some(n)) if p == n => return Vec::new(),
        (Some(_), Some(_)) => None,
        (None, not_protocol) => not_protocol.map(|p| p.number()),
        (Some(_), None) => None,
    };
    let protocol_match = |number: u8| Match::Protocol {
        number,
        negated: false,
    };

    let mut main: Vec<Match> = Vec::new();
    let mut negations: Vec<Match> = Vec::new();
    let mut blocks: Vec<Block> = Vec::new();
    if let Some(number) = protocol {
        main.push(protocol_match(number));
    }

    for (side, entity) in [
        (Side::Source, &rule.source),
        (Side::Destination, &rule.destination),
    ] {
        let side_word = match side {
            Side::Source => "source",
            Side::Destination => "destination",
        };
        // Ports: numeric ports in multiport chunks, named ports through address-port sets.
        let port_alternatives = port_matches(
            &entity.ports,
            side,
            protocol,
            false,
            entity.selector.as_ref(),
            sets,
            &format!("{side_word} ports"),
        );
        match port_alternatives.len() {
            0 => {}
            1 => main.extend(
                port_alternatives
                    .into_iter()
                    .flatten()
                    .filter(|m| !matches!(m, Match::Protocol { .. })),
            ),
            _ => blocks.push(Block::Any(port_alternatives)),
        }
        // notPorts: every chunk must fail, so they are ANDed in the main rule.
        negations.extend(
            port_matches(
                &entity.not_ports,
                side,
                protocol,
                true,
                entity.selector.as_ref(),
                sets,
                &format!("{side_word} notPorts"),
            )
            .into_iter()
            .flatten()
            .filter(|m| !matches!(m, Match::Protocol { .. })),
        );

        // Nets: one kernel rule holds one `-s`/`-d`, so several nets are alternatives of a
        // block; long lists become a set.
        let nets = inline_nets(&entity.nets, family);
        let not_nets = inline_nets(&entity.not_nets, family);
        let purpose = |what: &str| {
            format!(
                "{side_word} {what} of policy {} {} rule {index}",
                context.policy, context.direction
            )
        };
        let positive_inline = nets.len() <= INLINE_NETS_MAX && !nets.is_empty();
        if nets.len() > INLINE_NETS_MAX {
            let name = sets.nets(
                &set_identity(&format!("{side_word}.nets")),
                &nets,
                &purpose("nets"),
            );
            main.push(set_match(side, name, SetLookup::Address, false));
        } else if nets.len() == 1 {
            main.push(net_match(side, nets[0], false));
        } else if nets.len() > 1 {
            blocks.push(Block::Any(
                nets.iter()
                    .map(|net| vec![net_match(side, *net, false)])
                    .collect(),
            ));
        }
        if not_nets.len() > INLINE_NETS_MAX {
            let name = sets.nets(
                &set_identity(&format!("{side_word}.notNets")),
                &not_nets,
                &purpose("notNets"),
            );
            negations.push(set_match(side, name, SetLookup::Address, true));
        } else if not_nets.len() == 1 && !positive_inline {
            negations.push(net_match(side, not_nets[0], true));
        } else if !not_nets.is_empty() {
            blocks.push(Block::None(
                not_nets
                    .iter()
                    .map(|net| vec![net_match(side, *net, false)])
                    .collect(),
            ));
        }
        if let Some(selector) = &entity.selector {
            let name = sets.selector(selector);
            main.push(set_match(side, name, SetLookup::Address, false));
        }
        if let Some(selector) = &entity.not_selector {
            let name = sets.selector(selector);
            negations.push(set_match(side, name, SetLookup::Address, true));
        }
    }

    if let Some(icmp) = rule.icmp {
        main.push(icmp_match(family, icmp, false));
    }
    if let Some(number) = not_protocol {
        negations.insert(
            0,
            Match::Protocol {
                number,
                negated: true,
            },
        );
    }
    if let Some(icmp) = rule.not_icmp {
        negations.push(icmp_match(family, icmp, true));
    }
    main.extend(negations);

    let mut out: Vec<Rule> = Vec::new();
    let tag = |rule: Rule| rule.comment(comment.clone());
    // The first `Any` block can only *set* scratch0 (it starts the AND chain from 0), so every
    // `Any` block must come before any `None` block, whichever side each came from: a source
    // `notNets` block ahead of a destination `nets` block would otherwise be overridden by it,
    // and the destination condition would never be required. AND is commutative; the sort is
    // stable, so the rules read in the order the policy wrote its conditions.
    blocks.sort_by_key(|block| matches!(block, Block::None(_)));
    if let Some(first) = blocks.first() {
        let initial = match first {
            Block::Any(_) => 0,
            Block::None(_) => marks.scratch0,
        };
        out.push(tag(Rule::new(
            Vec::new(),
            Action::SetMark {
                value: initial,
                mask: marks.scratch(),
            },
        )));
        let mut any_blocks_seen = 0;
        for block in &blocks {
            match block {
                Block::Any(alternatives) => {
                    if any_blocks_seen == 0 {
                        for alternative in alternatives {
                            out.push(tag(Rule::new(alternative.clone(), set_bit(marks.scratch0))));
                        }
                    } else {
                        if any_blocks_seen > 1 {
                            out.push(tag(Rule::new(Vec::new(), clear_bits(marks.scratch1))));
                        }
                        for alternative in alternatives {
                            out.push(tag(Rule::new(alternative.clone(), set_bit(marks.scratch1))));
                        }
                        // AND this block's result into scratch0.
                        out.push(tag(Rule::new(
                            vec![mark_clear(marks.scratch1)],
                            clear_bits(marks.scratch0),
                        )));
                    }
                    any_blocks_seen += 1;
                }
                Block::None(alternatives) => {
                    for alternative in alternatives {
                        out.push(tag(Rule::new(
                            alternative.clone(),
                            clear_bits(marks.scratch0),
                        )));
                    }
                }
            }
        }
        main.push(mark_set(marks.scratch0));
    }

    let origin = RuleOrigin {
        policy: context.policy.to_owned(),
        direction: context.direction,
        rule_index: index,
    };
    let log = |letter: char| Action::Nflog {
        group: context.nflog_group,
        prefix: nflog_prefix(letter, context.direction, Some(index), context.policy),
    };
    let mut verdict = |bit: u32, letter: char, logged: bool, last: Action| {
        let mut main_rule = tag(Rule::new(main.clone(), set_bit(bit)));
        main_rule.origin = Some(origin.clone());
        out.push(main_rule);
        if logged {
            out.push(tag(Rule::new(vec![mark_set(bit)], log(letter))));
        }
        out.push(tag(Rule::new(vec![mark_set(bit)], last)));
    };
    match rule.action {
        model::Action::Allow => verdict(
            marks.accept,
            'A',
            context.log_actions.contains(&model::Action::Allow),
            Action::Return,
        ),
        model::Action::Pass => verdict(
            marks.pass,
            'P',
            context.log_actions.contains(&model::Action::Pass),
            Action::Return,
        ),
        model::Action::Deny => verdict(
            marks.drop,
            'D',
            context.log_actions.contains(&model::Action::Deny),
            Action::Drop,
        ),
        model::Action::Log => {
            let mut log_rule = tag(Rule::new(main.clone(), log('L')));
            log_rule.origin = Some(origin);
            out.push(log_rule);
        }
    }
    out
}

/// The nets of one family as the user listed them, without repeats. (Sets merge them further;
/// rules keep the user's nets so `iptables-save` reads like the policy.)
pub fn inline_nets(nets: &[IpNet], family: IpFamily) -> Vec<IpNet> {
    let mut seen = BTreeSet::new();
    nets.iter()
        .filter(|net| IpFamily::of_net(net) == family && seen.insert(**net))
        .copied()
        .collect()
}

fn net_match(side: Side, net: IpNet, negated: bool) -> Match {
    Match::Net { side, net, negated }
}

/// A fingerprint of a rule with one of its net lists left out: a set named after it keeps its
/// name when only its own members change (updated in place), and gets a new name when anything
/// else about the rule changes (so the set and the rule using it change together, atomically).
fn rule_fingerprint(rule: &model::Rule, left_out: &str) -> String {
    let mut text = format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        rule.action, rule.protocol, rule.not_protocol, rule.icmp, rule.not_icmp, rule.ip_version
    );
    for (side, entity) in [("source", &rule.source), ("destination", &rule.destination)] {
        for (what, nets) in [("nets", &entity.nets), ("notNets", &entity.not_nets)] {
            if format!("{side}.{what}") != left_out {
                text.push_str(&format!("|{side}.{what}={nets:?}"));
            }
        }
        text.push_str(&format!(
            "|{side}.selector={:?}|{side}.notSelector={:?}|{side}.ports={:?}|{side}.notPorts={:?}",
            entity.selector.as_ref().map(ToString::to_string),
            entity.not_selector.as_ref().map(ToString::to_string),
            entity.ports,
            entity.not_ports
        ));
    }
    super::names::hash(&text)
}

/// The alternatives a port list gives: each numeric chunk of at most 15 slots, and one
/// address-port set per named port. Each alternative starts with the protocol match that
/// `multiport` needs.
fn port_matches(
    ports: &[Port],
    side: Side,
    protocol: Option<u8>,
    negated: bool,
    selector: Option<&crate::selector::Selector>,
    sets: &mut SetRegistry<'_>,
    purpose: &str,
) -> Vec<Vec<Match>> {
    let Some(protocol) = protocol else {
        // Validation guarantees a protocol with ports whenever ports are given.
        return Vec::new();
    };
    let mut numeric: Vec<PortRange> = Vec::new();
    let mut named: Vec<&str> = Vec::new();
    for port in ports {
        match port {
            Port::Single(port) => numeric.push(PortRange {
                first: *port,
                last: *port,
            }),
            Port::Range(first, last) => numeric.push(PortRange {
                first: *first,
                last: *last,
            }),
            Port::Named(name) => named.push(name),
        }
    }
    let mut alternatives = Vec::new();
    for chunk in split_ports(&numeric) {
        alternatives.push(vec![
            Match::Protocol {
                number: protocol,
                negated: false,
            },
            Match::Ports {
                side,
                ports: chunk,
                negated,
            },
        ]);
    }
    for name in named {
        let set = sets.named_port(selector, protocol, name, purpose);
        alternatives.push(vec![set_match(side, set, SetLookup::AddressPort, negated)]);
    }
    alternatives
}

/// Splits ports into `multiport` chunks of at most 15 slots (a range takes two), in order.
pub fn split_ports(ports: &[PortRange]) -> Vec<Vec<PortRange>> {
    let mut chunks: Vec<Vec<PortRange>> = Vec::new();
    let mut current: Vec<PortRange> = Vec::new();
    let mut used = 0;
    for port in ports {
        if used + port.slots() > MULTIPORT_SLOTS {
            chunks.push(std::mem::take(&mut current));
            used = 0;
        }
        used += port.slots();
        current.push(*port);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

fn icmp_match(family: IpFamily, icmp: IcmpMatch, negated: bool) -> Match {
    Match::Icmp {
        family,
        icmp_type: icmp.icmp_type,
        code: icmp.code,
        negated,
    }
}

fn set_match(side: Side, name: String, lookup: SetLookup, negated: bool) -> Match {
    Match::Set {
        side,
        name,
        lookup,
        negated,
    }
}

/// `-j MARK --set-xmark bit/bit`.
pub fn set_bit(bit: u32) -> Action {
    Action::SetMark {
        value: bit,
        mask: bit,
    }
}

/// `-j MARK --set-xmark 0/bits`.
pub fn clear_bits(bits: u32) -> Action {
    Action::SetMark {
        value: 0,
        mask: bits,
    }
}

/// `-m mark --mark bit/bit`.
pub fn mark_set(bit: u32) -> Match {
    Match::Mark {
        value: bit,
        mask: bit,
        negated: false,
    }
}

/// `-m mark --mark 0/bits`.
pub fn mark_clear(bits: u32) -> Match {
    Match::Mark {
        value: 0,
        mask: bits,
        negated: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(list: &[(u16, u16)]) -> Vec<PortRange> {
        list.iter()
            .map(|&(first, last)| PortRange { first, last })
            .collect()
    }

    #[test]
    fn multiport_chunks_hold_fifteen_slots_and_ranges_count_two() {
        let singles: Vec<(u16, u16)> = (1000..1017).map(|p| (p, p)).collect();
        let chunks = split_ports(&ports(&singles));
        assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), vec![15, 2]);

        let mut mixed: Vec<(u16, u16)> = (1..=13).map(|p| (p, p)).collect();
        mixed.push((30000, 32767));
        let chunks = split_ports(&ports(&mixed));
        // 13 singles use 13 slots; the range needs 2 more and fits exactly... 15.
        assert_eq!(chunks.len(), 1);
        mixed.push((40, 40));
        assert_eq!(split_ports(&ports(&mixed)).len(), 2);
    }

    #[test]
    fn nflog_prefixes_follow_calico_and_fit_the_kernel() {
        assert_eq!(
            nflog_prefix(
                'D',
                Direction::Ingress,
                Some(1),
                "allow-cluster-nodeport-only"
            ),
            "DPI1|allow-cluster-nodeport-only"
        );
        assert_eq!(
            nflog_prefix('D', Direction::Egress, None, "default"),
            "DPE|default"
        );
        let long = nflog_prefix('A', Direction::Ingress, Some(12), &"x".repeat(200));
        assert_eq!(long.len(), MAX_NFLOG_PREFIX);
        assert!(long.starts_with("API12|xxxx"), "{long}");
    }

    #[test]
    fn inline_nets_keep_order_and_drop_repeats_and_other_families() {
        let nets: Vec<IpNet> = [
            "192.0.2.128/25",
            "2001:db8::/32",
            "192.0.2.0/25",
            "192.0.2.128/25",
        ]
        .iter()
        .map(|n| n.parse().expect("net"))
        .collect();
        let v4: Vec<String> = inline_nets(&nets, IpFamily::V4)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(v4, vec!["192.0.2.128/25", "192.0.2.0/25"]);
        assert_eq!(inline_nets(&nets, IpFamily::V6).len(), 1);
    }
}
