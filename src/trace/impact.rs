//! Which sources a change of policies cuts off: the same packets traced through the policies
//! before and after, for the sources and ports the policies name. `plan` says so in words
//! before anyone applies the change.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

use super::{ConnState, Evaluator, Outcome, Packet, Travel, Verdict};
use crate::compile::binding;
use crate::config::Config;
use crate::facts::HostFacts;
use crate::model::{IpFamily, Model, Port, Rule};

/// Most sources tried (the first of each net the policies name, among those a changed rule
/// can match).
pub const MAX_SOURCES: usize = 256;

/// Most destination ports tried (among those a changed rule can match).
pub const MAX_PORTS: usize = 64;

/// A connection that gets through before the change and is dropped after it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cut {
    /// The source.
    pub src: IpAddr,
    /// The destination (one of this host's addresses).
    pub dst: IpAddr,
    /// The protocol number.
    pub protocol: u8,
    /// The destination port.
    pub dport: u16,
    /// The interface it arrives on (`None`: one without an endpoint of its own).
    pub interface: Option<String>,
    /// What drops it after the change.
    pub dropped_by: Verdict,
}

/// What a change does to the sources the policies name.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Impact {
    /// The connections cut off.
    pub cuts: Vec<Cut>,
    /// How many packets were traced through both.
    pub checked: usize,
}

/// The new connections that `before` lets through and `after` drops, among those from the
/// sources and to the ports either names, arriving at this host.
pub fn cuts(before: &Model, after: &Model, config: &Config, host: &HostFacts) -> Impact {
    cuts_among(before, after, config, host, true)
}

/// [`cuts`], tracing only the packets a changed rule can match when `narrow` (what `cuts`
/// does), or every packet of the sources and ports named (what the tests compare it with).
pub(super) fn cuts_among(
    before: &Model,
    after: &Model,
    config: &Config,
    host: &HostFacts,
    narrow: bool,
) -> Impact {
    let mut sources = named_sources(&[before, after]);
    let mut ports = named_ports(&[before, after]);
    if let Some(changed) = changed_rules(before, after).filter(|_| narrow) {
        // Only packets some changed rule can match may change verdict: every other policy
        // is the same, in the same place, and a policy none of whose rules match a packet
        // passes it on as it did.
        //
        // Where some changed rule matches sources (or ports) it does not name, every source
        // (or port) stays, those the changed rules name first: they are the ones the cap
        // below must not leave out.
        let named = changed_source_nets(&changed);
        let in_named = |source: &IpAddr| named.iter().any(|net| net.contains(source));
        if sources_all_named(&changed) {
            sources.retain(in_named);
        } else {
            sources.sort_by_key(|source| !in_named(source));
        }
        let matched = changed_port_ranges(&changed);
        let in_matched = |(protocol, port): &(u8, u16)| {
            matched
                .iter()
                .any(|(p, first, last)| p == protocol && (first..=last).contains(&port))
        };
        if ports_all_named(&changed) {
            ports.retain(in_matched);
        } else {
            ports.sort_by_key(|port| !in_matched(port));
        }
    }
    // Capped after narrowing, so a large policy set still samples what the change touches.
    sources.truncate(MAX_SOURCES);
    ports.truncate(MAX_PORTS);
    let interfaces = bound_interfaces(&[before, after], config, host);
    let own = host.own_addresses(&config.host_interface_exclude);
    let (before, after) = (
        Evaluator::new(before, config, host),
        Evaluator::new(after, config, host),
    );
    let mut impact = Impact::default();
    for src in sources {
        let family = IpFamily::of_addr(&src);
        let Some(dst) = own.iter().find(|a| IpFamily::of_addr(a) == family).copied() else {
            continue;
        };
        for &(protocol, dport) in &ports {
            for interface in &interfaces {
                let packet = Packet {
                    src,
                    dst,
                    protocol,
                    sport: Some(super::DEFAULT_SOURCE_PORT),
                    dport: Some(dport),
                    icmp_type: None,
                    icmp_code: None,
                    in_interface: interface.clone(),
                    out_interface: None,
                    travel: Travel::Inbound,
                    state: ConnState::New,
                };
                impact.checked += 1;
                let was = before.verdict(&packet);
                if was.outcome == Outcome::Dropped {
                    continue;
                }
                let now = after.verdict(&packet);
                if now.outcome == Outcome::Dropped {
                    impact.cuts.push(Cut {
                        src,
                        dst,
                        protocol,
                        dport,
                        interface: interface.clone(),
                        dropped_by: now,
                    });
                }
            }
        }
    }
    // In the order of the sources, then ports, whichever were tried first.
    impact.cuts.sort_by(|a, b| {
        (a.src, a.protocol, a.dport, &a.interface).cmp(&(b.src, b.protocol, b.dport, &b.interface))
    });
    impact
}

/// The ingress rules of the policies that differ between `before` and `after` (both
/// versions), when only rules differ: the same tiers, network sets and host endpoints, the same
/// policies in the same order with the same selectors, kinds and types. `None` otherwise (a
/// change there can move any packet).
fn changed_rules<'m>(before: &'m Model, after: &'m Model) -> Option<Vec<&'m Rule>> {
    let same_sets = before.network_sets().len() == after.network_sets().len()
        && before
            .network_sets()
            .iter()
            .zip(after.network_sets())
            .all(|(a, b)| a.name == b.name && a.labels == b.labels && a.nets == b.nets);
    let same_endpoints = before.host_endpoints().len() == after.host_endpoints().len()
        && before
            .host_endpoints()
            .iter()
            .zip(after.host_endpoints())
            .all(|(a, b)| {
                (
                    &a.name,
                    &a.labels,
                    &a.node,
                    &a.interface,
                    &a.expected_ips,
                    &a.ports,
                    a.default_allow,
                ) == (
                    &b.name,
                    &b.labels,
                    &b.node,
                    &b.interface,
                    &b.expected_ips,
                    &b.ports,
                    b.default_allow,
                )
            });
    if before.tiers() != after.tiers()
        || !same_sets
        || !same_endpoints
        || before.policies().len() != after.policies().len()
    {
        return None;
    }
    let mut changed = Vec::new();
    for (a, b) in before.policies().iter().zip(after.policies()) {
        let placed = (
            &a.name,
            &a.tier,
            a.order,
            &a.selector,
            a.kind,
            a.apply_on_forward,
        ) == (
            &b.name,
            &b.tier,
            b.order,
            &b.selector,
            b.kind,
            b.apply_on_forward,
        );
        let governs =
            (a.ingress.is_some(), a.egress.is_some()) == (b.ingress.is_some(), b.egress.is_some());
        if !placed || !governs {
            return None;
        }
        let same_ingress = match (&a.ingress, &b.ingress) {
            (Some(a), Some(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.decides_like(b))
            }
            (a, b) => a.is_none() && b.is_none(),
        };
        if !same_ingress {
            changed.extend(a.ingress.iter().flatten());
            changed.extend(b.ingress.iter().flatten());
        }
    }
    Some(changed)
}

/// Whether every one of `rules` requires a source in its nets (so a source outside all of
/// them matches none): not when some rule matches sources without nets (no `nets`,
/// `notNets`, or a selector).
fn sources_all_named(rules: &[&Rule]) -> bool {
    rules.iter().all(|rule| {
        let source = &rule.source;
        !source.nets.is_empty()
            && source.not_nets.is_empty()
            && source.selector.is_none()
            && source.not_selector.is_none()
    })
}

/// The source nets (and not-nets) `rules` name.
fn changed_source_nets(rules: &[&Rule]) -> Vec<IpNet> {
    rules
        .iter()
        .flat_map(|rule| rule.source.nets.iter().chain(&rule.source.not_nets))
        .copied()
        .collect()
}

/// Whether every one of `rules` requires a protocol and a destination port it names: not
/// when some rule matches a port it does not name (no protocol or ports, `notPorts`, a named
/// port).
fn ports_all_named(rules: &[&Rule]) -> bool {
    rules.iter().all(|rule| {
        let destination = &rule.destination;
        rule.protocol.is_some()
            && !destination.ports.is_empty()
            && destination.not_ports.is_empty()
            && !destination
                .ports
                .iter()
                .any(|port| matches!(port, Port::Named(_)))
    })
}

/// The (protocol, first port, last port) of each numbered destination port `rules` name
/// with a protocol.
fn changed_port_ranges(rules: &[&Rule]) -> Vec<(u8, u16, u16)> {
    let mut ranges = Vec::new();
    for rule in rules {
        let Some(protocol) = rule.protocol else {
            continue;
        };
        for port in &rule.destination.ports {
            match port {
                Port::Single(port) => ranges.push((protocol.number(), *port, *port)),
                Port::Range(first, last) => ranges.push((protocol.number(), *first, *last)),
                Port::Named(_) => {}
            }
        }
    }
    ranges
}

/// One address of each net the policies and network sets name (the address itself for a
/// host route, else the first address after the network's), sorted.
fn named_sources(models: &[&Model]) -> Vec<IpAddr> {
    let mut nets: Vec<IpNet> = Vec::new();
    for model in models {
        for policy in model.policies() {
            for rule in policy.ingress.iter().flatten() {
                nets.extend(rule.source.nets.iter().chain(&rule.source.not_nets));
            }
        }
        for set in model.network_sets() {
            nets.extend(&set.nets);
        }
    }
    let mut sources: BTreeSet<IpAddr> = BTreeSet::new();
    for net in nets {
        let address = if net.prefix_len() == net.max_prefix_len() {
            Some(net.addr())
        } else {
            net.hosts().next()
        };
        sources.extend(address);
    }
    sources.into_iter().collect()
}

/// The destination ports the policies' ingress rules name, with their protocol, sorted.
fn named_ports(models: &[&Model]) -> Vec<(u8, u16)> {
    let mut ports: BTreeSet<(u8, u16)> = BTreeSet::new();
    for model in models {
        for policy in model.policies() {
            for rule in policy.ingress.iter().flatten() {
                let Some(protocol) = rule.protocol else {
                    continue;
                };
                for port in &rule.destination.ports {
                    match port {
                        Port::Single(port) => ports.insert((protocol.number(), *port)),
                        Port::Range(first, _) => ports.insert((protocol.number(), *first)),
                        Port::Named(_) => false,
                    };
                }
            }
        }
    }
    ports.into_iter().collect()
}

/// Every interface a host endpoint stands for, before or after, and `None` (one without an
/// endpoint of its own).
fn bound_interfaces(models: &[&Model], config: &Config, host: &HostFacts) -> Vec<Option<String>> {
    let mut interfaces: BTreeSet<Option<String>> = BTreeSet::new();
    interfaces.insert(None);
    for model in models {
        let endpoints = binding::endpoints_of_host(model, config, host);
        let mut warnings = Vec::new();
        for bound in binding::bind(model, endpoints, host, &mut warnings) {
            interfaces.insert(bound.interface);
        }
    }
    interfaces.into_iter().collect()
}
