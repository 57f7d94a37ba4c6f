//! Whether one policy rule matches one packet: the conditions `compile::rules` writes into
//! kernel rules, evaluated on the packet instead. Selectors stand for the addresses of the
//! network sets and host endpoints they select, named ports for the `(address, protocol,
//! port)` of the host endpoints that define them, exactly as the sets the compiler fills.

use std::net::IpAddr;

use ipnet::IpNet;

use super::Packet;
use crate::model::{self, EntityRule, IcmpMatch, IpFamily, Model, Port};
use crate::selector::Selector;

/// Which end of the packet a rule's `source` or `destination` looks at.
#[derive(Clone, Copy)]
enum End {
    Source,
    Destination,
}

impl Packet {
    fn address(&self, end: End) -> IpAddr {
        match end {
            End::Source => self.src,
            End::Destination => self.dst,
        }
    }

    fn port(&self, end: End) -> Option<u16> {
        match end {
            End::Source => self.sport,
            End::Destination => self.dport,
        }
    }
}

/// Whether `rule` matches `packet` (of `family`), with the model's sets and endpoints behind
/// its selectors and named ports.
pub fn rule_matches(
    model: &Model,
    selections: &Selections<'_>,
    rule: &model::Rule,
    packet: &Packet,
    family: IpFamily,
) -> bool {
    // Every field that can decide a match is looked at below; this list makes a new field fail
    // to compile here until it is (as in the compiler's `compile_rule`).
    let model::Rule {
        action: _,
        protocol,
        not_protocol,
        icmp,
        not_icmp,
        ip_version: _, // in `applies_to`
        source: _,
        destination: _,
        annotations: _,
        origin: _,
    } = rule;
    // `notProtocol` equal to `protocol` can never match; a different one says nothing more.
    match (*protocol, *not_protocol) {
        (Some(p), Some(n)) if p == n => return false,
        (Some(p), _) if p.number() != packet.protocol => return false,
        (None, Some(n)) if n.number() == packet.protocol => return false,
        _ => {}
    }
    if let Some(icmp) = *icmp
        && !icmp_matches(icmp, packet)
    {
        return false;
    }
    if let Some(icmp) = *not_icmp
        && icmp_matches(icmp, packet)
    {
        return false;
    }
    let protocol = protocol.map(model::Protocol::number);
    let ends = [
        (End::Source, &rule.source),
        (End::Destination, &rule.destination),
    ];
    // The cheapest tests first: most rules a packet meets are for another port, and a rule's
    // family and nets take a walk over all its nets.
    ends.iter()
        .all(|&(end, entity)| ports_of_entity_match(model, entity, protocol, packet, end))
        && rule.applies_to(family)
        && ends.iter().all(|&(end, entity)| {
            addresses_of_entity_match(selections, entity, packet, end, family)
        })
}

/// An ICMP type (and code, if given) match; a packet of another protocol never matches.
fn icmp_matches(icmp: IcmpMatch, packet: &Packet) -> bool {
    let is_icmp = matches!(packet.protocol, 1 | 58);
    is_icmp
        && packet.icmp_type == Some(icmp.icmp_type)
        && icmp.code.is_none_or(|code| packet.icmp_code == Some(code))
}

/// Whether the packet's port at `end` is one of the entity's ports and none of its
/// `notPorts`.
fn ports_of_entity_match(
    model: &Model,
    entity: &EntityRule,
    protocol: Option<u8>,
    packet: &Packet,
    end: End,
) -> bool {
    let selector = entity.selector.as_ref();
    if !entity.ports.is_empty()
        && !ports_match(model, &entity.ports, protocol, selector, packet, end)
    {
        return false;
    }
    !entity.not_ports.iter().any(|port| {
        ports_match(
            model,
            std::slice::from_ref(port),
            protocol,
            selector,
            packet,
            end,
        )
    })
}

/// Whether the packet's address at `end` is in the entity's nets (of the family) and
/// selector, and in none of its `notNets` and not-selector.
fn addresses_of_entity_match(
    selections: &Selections<'_>,
    entity: &EntityRule,
    packet: &Packet,
    end: End,
    family: IpFamily,
) -> bool {
    let address = packet.address(end);
    let in_nets = |nets: &[IpNet]| {
        nets.iter()
            .filter(|net| IpFamily::of_net(net) == family)
            .any(|net| net.contains(&address))
    };
    let nets_of_family = entity
        .nets
        .iter()
        .any(|net| IpFamily::of_net(net) == family);
    if nets_of_family && !in_nets(&entity.nets) {
        return false;
    }
    if in_nets(&entity.not_nets) {
        return false;
    }
    if let Some(selector) = &entity.selector
        && !selections.selected(selector, address)
    {
        return false;
    }
    if let Some(selector) = &entity.not_selector
        && selections.selected(selector, address)
    {
        return false;
    }
    true
}

/// Whether any of `ports` matches the packet's port at `end`: a number or range of the rule's
/// protocol, or a named port of the endpoints `selector` picks (every endpoint without one).
fn ports_match(
    model: &Model,
    ports: &[Port],
    protocol: Option<u8>,
    selector: Option<&Selector>,
    packet: &Packet,
    end: End,
) -> bool {
    let Some(port) = packet.port(end) else {
        return false;
    };
    ports.iter().any(|wanted| match wanted {
        Port::Single(single) => protocol.is_some() && *single == port,
        Port::Range(first, last) => protocol.is_some() && (*first..=*last).contains(&port),
        Port::Named(name) => named_port_matches(model, name, protocol, selector, packet, end, port),
    })
}

fn named_port_matches(
    model: &Model,
    name: &str,
    protocol: Option<u8>,
    selector: Option<&Selector>,
    packet: &Packet,
    end: End,
    port: u16,
) -> bool {
    let address = packet.address(end);
    model
        .host_endpoints()
        .iter()
        .filter(|endpoint| selector.is_none_or(|selector| selector.matches(&endpoint.labels)))
        .filter(|endpoint| endpoint.expected_ips.contains(&address))
        .flat_map(|endpoint| &endpoint.ports)
        .any(|named| {
            named.name == name
                && named.port == port
                && named.protocol.number() == packet.protocol
                && protocol.is_none_or(|wanted| wanted == packet.protocol)
        })
}

/// Whether a rule selector picks `address`: one of the nets of a network set it matches, or
/// an expected address of a host endpoint (of any node) it matches.
pub fn selected(model: &Model, selector: &Selector, address: IpAddr) -> bool {
    model
        .network_sets()
        .iter()
        .filter(|set| selector.matches(&set.labels))
        .any(|set| set.nets.iter().any(|net| net.contains(&address)))
        || model
            .host_endpoints()
            .iter()
            .filter(|endpoint| selector.matches(&endpoint.labels))
            .any(|endpoint| endpoint.expected_ips.contains(&address))
}

/// The nets behind each rule selector of a model's policies, found once for tracing many
/// packets: matching a selector against every network set and host endpoint for each packet
/// and rule cost `plan` at 10,000 policies most of a minute.
/// Keyed by each selector's address in the model it borrows, so a key cannot outlive it.
#[derive(Debug)]
pub struct Selections<'m> {
    model: &'m Model,
    nets: std::collections::HashMap<*const Selector, Box<[IpNet]>>,
}

impl<'m> Selections<'m> {
    /// The nets every rule selector of `model`'s policies (enforced and staged) picks.
    pub fn of(model: &'m Model) -> Selections<'m> {
        let mut nets = std::collections::HashMap::new();
        let rules = model
            .policies()
            .iter()
            .chain(model.staged_policies())
            .flat_map(|policy| policy.ingress.iter().chain(&policy.egress).flatten());
        for rule in rules {
            for entity in [&rule.source, &rule.destination] {
                for selector in entity.selector.iter().chain(&entity.not_selector) {
                    nets.entry(key(selector))
                        .or_insert_with(|| selected_nets(model, selector));
                }
            }
        }
        Selections { model, nets }
    }

    /// Whether `selector` picks `address` (see [`selected`]); a selector not found in advance
    /// is matched against the model's sets and endpoints.
    pub fn selected(&self, selector: &Selector, address: IpAddr) -> bool {
        match self.nets.get(&key(selector)) {
            Some(nets) => nets.iter().any(|net| net.contains(&address)),
            None => selected(self.model, selector, address),
        }
    }
}

fn key(selector: &Selector) -> *const Selector {
    std::ptr::from_ref(selector)
}

/// The nets of the network sets `selector` matches and the expected addresses (as single-
/// address nets) of the host endpoints it matches.
fn selected_nets(model: &Model, selector: &Selector) -> Box<[IpNet]> {
    let sets = model
        .network_sets()
        .iter()
        .filter(|set| selector.matches(&set.labels))
        .flat_map(|set| set.nets.iter().copied());
    let endpoints = model
        .host_endpoints()
        .iter()
        .filter(|endpoint| selector.matches(&endpoint.labels))
        .flat_map(|endpoint| endpoint.expected_ips.iter().map(|ip| IpNet::from(*ip)));
    sets.chain(endpoints).collect()
}
