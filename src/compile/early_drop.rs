//! The early drop (`earlyDrop`, on by default): a TCP SYN (SYN set, ACK clear) that pre-DNAT
//! policy denies is dropped in raw `PREROUTING`, before connection tracking, instead of in
//! mangle after it. A SYN is never a reply, so judging it without conntrack cannot drop the
//! SYN-ACKs of the host's own connections (the seed's raw-table failure).
//!
//! It is not a second policy: the pre-DNAT path's chains, as compiled for mangle, are copied
//! into raw, their own chains (dispatch, endpoints, failsafes) renamed `npg-syn-…` so they
//! cannot meet the doNotTrack chains of the same shape, the policy chains as they are:
//!
//! ```text
//! raw     PREROUTING → npg-PREROUTING   -p tcp SYN,ACK=SYN → npg-syn-PREROUTING
//!         npg-syn-PREROUTING: clear marks, host to itself returns,
//!                             → npg-syn-from-host-endpoint → npg-syn-fh-<if> → npg-pi-…
//!                             not dropped: set the scratch1 mark ("judged before conntrack")
//! mangle  npg-PREROUTING: replies return; a SYN with the scratch1 mark returns (judged);
//!                         everything else is judged here, as without the early drop
//! ```
//!
//! A packet that is not a TCP SYN leaves raw after one rule. A SYN is judged once, in raw,
//! with every NFLOG message (staged, `Log`, the drop's) mangle would have logged; the one that
//! survives keeps the accept bit pre-DNAT policy gave it (the filter table honours it) and
//! skips mangle's second look, which could only log again. The only match of the pre-DNAT
//! path that needs conntrack is mangle's return for replies and established connections: a SYN
//! that conntrack would place in a known connection (a retransmission after the answer, a
//! simultaneous open, an expected connection of a conntrack helper) is judged as new here.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use super::binding::{Binding, Path};
use super::dispatch::self_traffic_rules;
use super::names;
use super::rules::{clear_bits, mark_clear, mark_set, set_bit};
use super::sets::SetRegistry;
use super::syn_path;
use super::syn_table;
use super::{Compiler, TableBuilder};
use crate::config::Config;
use crate::model::{self, Direction, Port, Protocol};
use crate::ruleset::{Action, Chain, Hook, MULTIPORT_SLOTS, Match, PortRange, Rule, Side, Table};

/// The top chain of the hooked kernel chain both tables use.
const TOP: &str = "npg-PREROUTING";
const KERNEL_CHAIN: &str = "PREROUTING";

/// The matches of a TCP SYN: protocol TCP, SYN set and ACK clear.
pub(crate) fn syn_matches() -> Vec<Match> {
    vec![
        Match::Protocol {
            number: Protocol::Tcp.number(),
            negated: false,
        },
        Match::TcpSyn,
    ]
}

/// Which TCP SYNs the early drop judges: those to a destination port that an enforced Deny rule
/// of pre-DNAT policy can match, less the failsafe ports (open to everyone, never denied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Guarded {
    /// No Deny rule of pre-DNAT policy can match a TCP SYN: nothing to judge early.
    Nothing,
    /// These ports (one `multiport` match).
    Ports(Vec<PortRange>),
    /// Every port: a Deny rule names no ports, excludes some, or names them by name, or the
    /// ports take more than one `multiport` match.
    Every,
}

impl Guarded {
    /// Whether a TCP SYN to `port` is judged early.
    pub(crate) fn contains(&self, port: Option<u16>) -> bool {
        match self {
            Guarded::Nothing => false,
            Guarded::Every => true,
            Guarded::Ports(ports) => port.is_some_and(|port| {
                ports
                    .iter()
                    .any(|range| range.first <= port && port <= range.last)
            }),
        }
    }
}

/// The SYNs the early drop judges, from the pre-DNAT policies the bindings enforce; the
/// compiler and the trace ask the same question.
pub(crate) fn guarded(config: &Config, bindings: &[Binding<'_>]) -> Guarded {
    let tcp = Protocol::Tcp.number();
    let mut ports = Vec::new();
    let rules = bindings
        .iter()
        .flat_map(|binding| Path::PreDnatIn.policies(binding))
        .flat_map(|policy| policy.rules(Direction::Ingress).unwrap_or_default());
    for rule in rules {
        let other_protocol = rule.protocol.is_some_and(|p| p.number() != tcp)
            || rule.not_protocol.is_some_and(|p| p.number() == tcp);
        if rule.action != model::Action::Deny || other_protocol {
            continue;
        }
        let destination = &rule.destination;
        if destination.ports.is_empty() || !destination.not_ports.is_empty() {
            return Guarded::Every;
        }
        for port in &destination.ports {
            match port {
                Port::Single(port) => ports.push((*port, *port)),
                Port::Range(first, last) => ports.push((*first, *last)),
                Port::Named(_) => return Guarded::Every,
            }
        }
    }
    let open: Vec<u16> = config
        .failsafe_inbound
        .iter()
        .filter(|failsafe| failsafe.protocol.number() == tcp && failsafe.net.is_none())
        .map(|failsafe| failsafe.port)
        .collect();
    let ports = without(merged(ports), &open);
    if ports.is_empty() {
        return Guarded::Nothing;
    }
    if ports.iter().map(PortRange::slots).sum::<usize>() > MULTIPORT_SLOTS {
        return Guarded::Every;
    }
    Guarded::Ports(ports)
}

/// Port ranges sorted, overlapping and adjacent ones joined.
fn merged(mut ranges: Vec<(u16, u16)>) -> Vec<(u16, u16)> {
    ranges.sort_unstable();
    let mut out: Vec<(u16, u16)> = Vec::new();
    for (first, last) in ranges {
        match out.last_mut() {
            Some(previous) if u32::from(first) <= u32::from(previous.1) + 1 => {
                previous.1 = previous.1.max(last);
            }
            _ => out.push((first, last)),
        }
    }
    out
}

/// `ranges` without the ports in `open`.
fn without(ranges: Vec<(u16, u16)>, open: &[u16]) -> Vec<PortRange> {
    let mut out = Vec::new();
    for (first, last) in ranges {
        let mut start = u32::from(first);
        let mut holes: Vec<u16> = open
            .iter()
            .copied()
            .filter(|port| (first..=last).contains(port))
            .collect();
        holes.sort_unstable();
        holes.dedup();
        for hole in holes {
            if u32::from(hole) > start {
                out.push((start, u32::from(hole) - 1));
            }
            start = u32::from(hole) + 1;
        }
        if start <= u32::from(last) {
            out.push((start, u32::from(last)));
        }
    }
    out.into_iter()
        .map(|(first, last)| PortRange {
            first: u16::try_from(first).expect("within a u16 range"),
            last: u16::try_from(last).expect("within a u16 range"),
        })
        .collect()
}

impl Compiler<'_> {
    /// Adds the early drop to raw, and mangle's return for the SYNs it judged, when
    /// `earlyDrop` is on and pre-DNAT policy is enforced here. With `earlyDrop: false` every
    /// drop stays in mangle, but the decision table still takes the SYNs it knows are denied
    /// straight to their log rules and drop, right after mangle's return for established
    /// connections.
    pub(super) fn early_drop(
        &self,
        builders: &mut BTreeMap<Table, TableBuilder>,
        sets: &mut SetRegistry<'_>,
        own_addresses: &[IpAddr],
        bindings: &[Binding<'_>],
    ) {
        let enforces = |path: Path| bindings.iter().any(|binding| path.enforced(binding));
        if !enforces(Path::PreDnatIn) {
            return;
        }
        let Some(mangle) = builders.get_mut(&Table::Mangle) else {
            return;
        };
        let Some(copies) = raw_copies(mangle) else {
            return;
        };
        let ports = match guarded(self.config, bindings) {
            Guarded::Nothing => return,
            Guarded::Ports(ports) => Some(ports),
            Guarded::Every => None,
        };
        let marks = self.marks;
        let judged = marks.scratch1;

        let mut top = vec![Rule::new(Vec::new(), clear_bits(marks.all()))];
        top.extend(self_traffic_rules(Side::Source, sets, own_addresses));
        top.push(Rule::new(
            Vec::new(),
            Action::Jump(names::early_drop_chain(Path::PreDnatIn.dispatch_chain())),
        ));
        top.push(
            Rule::new(Vec::new(), set_bit(judged))
                .comment("judged by pre-DNAT policy before connection tracking: not dropped"),
        );
        let mut chains: syn_path::Chains = copies
            .into_iter()
            .map(|chain| (chain.name, chain.rules))
            .collect();
        chains.insert(names::EARLY_DROP_CHAIN.to_owned(), top.into());
        syn_path::shorten(&mut chains, names::EARLY_DROP_CHAIN, ports.as_deref());
        let table = syn_table::table(
            &chains,
            names::EARLY_DROP_CHAIN,
            ports.as_deref(),
            sets.family(),
            sets,
            marks.all(),
        );

        // Only SYNs to a port pre-DNAT policy can deny (not a failsafe one) are judged here:
        // every other packet leaves raw after this one rule. What doNotTrack policy accepted,
        // mangle would not judge again: neither does this.
        let mut matches = syn_matches();
        if let Some(ports) = ports {
            matches.push(Match::Ports {
                side: Side::Destination,
                ports,
                negated: false,
            });
        }
        if enforces(Path::UntrackedIn) {
            matches.push(mark_clear(marks.accept));
        }

        if !self.config.early_drop {
            let denied = table.and_then(|table| {
                denied_rule(
                    table,
                    &matches,
                    sets,
                    "TCP SYN that pre-DNAT policy denies (decision table)",
                )
            });
            if let Some((rule, chain)) = denied {
                after_conntrack_return(mangle, rule);
                mangle.add(chain);
            }
            return;
        }
        let skip = Rule::new(
            syn_matches()
                .into_iter()
                .chain([mark_set(judged)])
                .collect(),
            Action::Return,
        )
        .comment("TCP SYN judged in raw PREROUTING before connection tracking");
        after_conntrack_return(mangle, skip);

        let raw = builders.entry(Table::Raw).or_default();
        for (name, rules) in chains {
            raw.add(Chain { name, rules });
        }
        let denied = table.and_then(|table| {
            denied_rule(
                table,
                &matches,
                sets,
                "TCP SYN that pre-DNAT policy denies: dropped before connection tracking",
            )
        });
        let syn = Rule::new(matches, Action::Goto(names::EARLY_DROP_CHAIN.to_owned()))
            .comment("TCP SYN: pre-DNAT policy before connection tracking");
        let mut added = Vec::new();
        if let Some((rule, chain)) = denied {
            raw.add(chain);
            added.push(rule);
        }
        added.push(syn);
        match raw.chains.get_mut(TOP) {
            Some(chain) => {
                let mut rules = chain.rules.to_vec();
                rules.extend(added);
                chain.rules = rules.into();
            }
            None => {
                raw.add(Chain {
                    name: TOP.to_owned(),
                    rules: added.into(),
                });
                raw.hooks.push(Hook {
                    kernel_chain: KERNEL_CHAIN.to_owned(),
                    target: TOP.to_owned(),
                });
            }
        }
    }
}

/// The rule that sends the SYNs of the decision table to `npg-syn-denied`, and that chain:
/// the dispatch rule's `matches` narrowed to the table's ports, interfaces and sources. `None`
/// if the ports take more than one `multiport` match.
fn denied_rule(
    table: syn_table::Table,
    dispatch: &[Match],
    sets: &mut SetRegistry<'_>,
    comment: &str,
) -> Option<(Rule, Chain)> {
    if table.ports.iter().map(PortRange::slots).sum::<usize>() > MULTIPORT_SLOTS {
        return None;
    }
    let every_port = [PortRange {
        first: 0,
        last: u16::MAX,
    }];
    let mut matches: Vec<Match> = dispatch
        .iter()
        .filter(|m| !matches!(m, Match::Ports { .. }))
        .cloned()
        .collect();
    if table.ports[..] != every_port[..] {
        matches.push(Match::Ports {
            side: Side::Destination,
            ports: table.ports,
            negated: false,
        });
    }
    match table.interfaces {
        syn_table::Interfaces::All => {}
        syn_table::Interfaces::Only(name) => matches.push(Match::InInterface(name)),
        syn_table::Interfaces::AllBut(name) => matches.push(Match::NotInInterface(name)),
    }
    let (nets, negated) = match table.sources {
        syn_table::Sources::All => (Vec::new(), false),
        syn_table::Sources::In(nets) => (nets, false),
        syn_table::Sources::NotIn(nets) => (nets, true),
    };
    match &nets[..] {
        [] => {}
        [net] => matches.push(Match::Net {
            side: Side::Source,
            net: *net,
            negated,
        }),
        _ => {
            let name = sets.nets_named(
                names::early_drop_set(sets.family()),
                &nets,
                if negated {
                    "sources whose TCP SYNs pre-DNAT policy lets through or judges apart"
                } else {
                    "sources whose TCP SYNs pre-DNAT policy denies"
                },
            );
            matches.push(Match::Set {
                side: Side::Source,
                name,
                lookup: crate::ruleset::SetLookup::Address,
                negated,
            });
        }
    }
    let rule =
        Rule::new(matches, Action::Goto(names::EARLY_DROP_DENIED.to_owned())).comment(comment);
    let chain = Chain {
        name: names::EARLY_DROP_DENIED.to_owned(),
        rules: table.denied.into(),
    };
    Some((rule, chain))
}

/// Puts `rule` in mangle's top chain right after its return for replies and established
/// connections.
fn after_conntrack_return(mangle: &mut TableBuilder, rule: Rule) {
    let Some(chain) = mangle.chains.get_mut(TOP) else {
        return;
    };
    let mut rules = chain.rules.to_vec();
    let after = rules
        .iter()
        .position(|rule| {
            rule.matches
                .iter()
                .any(|m| matches!(m, Match::Conntrack(_)))
        })
        .map_or(0, |index| index + 1);
    rules.insert(after, rule);
    chain.rules = rules.into();
}

/// The pre-DNAT path's chains as raw holds them: every chain its dispatch chain reaches, the
/// path's own chains renamed and the jumps to them rewritten. `None` if a rule looks at
/// conntrack, which raw cannot (the pre-DNAT path has none: left to mangle if it ever does).
fn raw_copies(mangle: &TableBuilder) -> Option<Vec<Chain>> {
    let mut reached = BTreeSet::new();
    let mut queue = vec![Path::PreDnatIn.dispatch_chain().to_owned()];
    while let Some(name) = queue.pop() {
        if !reached.insert(name.clone()) {
            continue;
        }
        let chain = mangle.chains.get(&name)?;
        for rule in chain.rules.iter() {
            if rule
                .matches
                .iter()
                .any(|m| matches!(m, Match::Conntrack(_)))
            {
                return None;
            }
            if let Action::Jump(target) | Action::Goto(target) = &rule.action {
                queue.push(target.clone());
            }
        }
    }
    let renamed: HashMap<&str, String> = reached
        .iter()
        .filter(|name| !names::is_policy_chain(name))
        .map(|name| (name.as_str(), names::early_drop_chain(name)))
        .collect();
    let rename = |name: &String| renamed.get(name.as_str()).cloned();
    let mut copies = Vec::new();
    for name in &reached {
        let chain = mangle.chains.get(name)?;
        let retargets = chain.rules.iter().any(|rule| match &rule.action {
            Action::Jump(target) | Action::Goto(target) => rename(target).is_some(),
            _ => false,
        });
        let rules = if retargets {
            chain
                .rules
                .iter()
                .map(|rule| {
                    let mut rule = rule.clone();
                    if let Action::Jump(target) | Action::Goto(target) = &mut rule.action
                        && let Some(new) = rename(target)
                    {
                        *target = new;
                    }
                    rule
                })
                .collect::<Vec<_>>()
                .into()
        } else {
            chain.rules.clone()
        };
        copies.push(Chain {
            name: rename(name).unwrap_or_else(|| name.clone()),
            rules,
        });
    }
    Some(copies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: u16, last: u16) -> PortRange {
        PortRange { first, last }
    }

    #[test]
    fn guarded_ports_are_joined_and_the_failsafe_ports_cut_out() {
        let ports = merged(vec![(30008, 30008), (30000, 30007), (22, 22), (8000, 8100)]);
        assert_eq!(ports, vec![(22, 22), (8000, 8100), (30000, 30008)]);
        assert_eq!(
            without(ports, &[22, 8080, 8000, 65535]),
            vec![range(8001, 8079), range(8081, 8100), range(30000, 30008)]
        );
        assert_eq!(
            without(vec![(0, 65535)], &[0, 65535]),
            vec![range(1, 65534)]
        );
    }

    #[test]
    fn only_the_guarded_ports_are_judged_early() {
        let guarded = Guarded::Ports(vec![range(30000, 30008)]);
        assert!(guarded.contains(Some(30000)) && guarded.contains(Some(30008)));
        assert!(!guarded.contains(Some(22)) && !guarded.contains(None));
        assert!(Guarded::Every.contains(None));
        assert!(!Guarded::Nothing.contains(Some(30008)));
    }
}
