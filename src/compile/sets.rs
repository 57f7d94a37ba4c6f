//! The sets of one family: created on first use by the rules that refer to them, so only
//! referenced sets exist.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::names;
use crate::model::{IpFamily, Model};
use crate::ruleset::{IpSet, SetKind, SetMember};
use crate::selector::Selector;

/// Collects the sets rules refer to.
pub struct SetRegistry<'m> {
    family: IpFamily,
    model: &'m Model,
    sets: BTreeMap<String, IpSet>,
    /// Selectors that matched nothing, for warnings (canonical text).
    pub empty_selectors: Vec<String>,
    /// Named ports no endpoint defines, for warnings.
    pub unknown_named_ports: Vec<String>,
    /// While a policy chain compiles for the memo: everything registered, in order, each
    /// whole (so that registering it again has the same effect whatever came before).
    recording: Option<Vec<SetEvent>>,
}

/// One registration, as [`SetRegistry::record`] keeps it.
#[derive(Clone, Debug)]
pub(super) enum SetEvent {
    /// A set was used.
    Set(IpSet),
    /// A selector matched nothing (canonical text).
    EmptySelector(String),
    /// A named port is defined by no endpoint.
    UnknownNamedPort(String),
}

impl<'m> SetRegistry<'m> {
    /// An empty registry for `family`, resolving selectors against `model`.
    pub fn new(family: IpFamily, model: &'m Model) -> Self {
        SetRegistry {
            family,
            model,
            sets: BTreeMap::new(),
            empty_selectors: Vec::new(),
            unknown_named_ports: Vec::new(),
            recording: None,
        }
    }

    /// Starts keeping every registration, until [`SetRegistry::recorded`].
    pub(super) fn record(&mut self) {
        self.recording = Some(Vec::new());
    }

    /// The registrations since [`SetRegistry::record`], and stops keeping them.
    pub(super) fn recorded(&mut self) -> Vec<SetEvent> {
        self.recording.take().unwrap_or_default()
    }

    /// Registers again what a compile recorded, in the same order: the registry ends up as
    /// if the rules had been compiled here.
    pub(super) fn replay(&mut self, events: &[SetEvent]) {
        for event in events {
            match event {
                SetEvent::Set(set) => {
                    if !self.sets.contains_key(&set.name) {
                        self.sets.insert(set.name.clone(), set.clone());
                    }
                }
                SetEvent::EmptySelector(selector) => self.note_empty_selector(selector),
                SetEvent::UnknownNamedPort(port) => self.note_unknown_named_port(port),
            }
        }
    }

    fn note_empty_selector(&mut self, canonical: &str) {
        if let Some(recording) = &mut self.recording {
            recording.push(SetEvent::EmptySelector(canonical.to_owned()));
        }
        if !self.empty_selectors.iter().any(|s| s == canonical) {
            self.empty_selectors.push(canonical.to_owned());
        }
    }

    fn note_unknown_named_port(&mut self, port: &str) {
        if let Some(recording) = &mut self.recording {
            recording.push(SetEvent::UnknownNamedPort(port.to_owned()));
        }
        if !self.unknown_named_ports.iter().any(|p| p == port) {
            self.unknown_named_ports.push(port.to_owned());
        }
    }

    /// Whether the set `name` is registered and need not be built again: never while
    /// recording, where every registration is kept whole.
    fn known(&self, name: &str) -> bool {
        self.recording.is_none() && self.sets.contains_key(name)
    }

    /// A set registered so far.
    pub(super) fn get(&self, name: &str) -> Option<&IpSet> {
        self.sets.get(name)
    }

    /// The family the sets are registered for.
    pub fn family(&self) -> IpFamily {
        self.family
    }

    fn insert(
        &mut self,
        name: String,
        kind: SetKind,
        members: Vec<SetMember>,
        purpose: &str,
    ) -> String {
        let set = IpSet {
            name: name.clone(),
            family: self.family,
            kind,
            members: members.into(),
            purpose: purpose.to_owned(),
        };
        if let Some(recording) = &mut self.recording {
            recording.push(SetEvent::Set(set.clone()));
        }
        self.sets.entry(name.clone()).or_insert(set);
        name
    }

    /// A set holding `nets` (of this family), named after `identity`.
    pub fn nets(&mut self, identity: &str, nets: &[IpNet], purpose: &str) -> String {
        let name = names::set_name(self.family, "n", identity);
        let members = net_members(nets);
        self.insert(name, SetKind::Net, members, purpose)
    }

    /// A set holding `nets` (of this family), named `name` whatever they are.
    pub(super) fn nets_named(&mut self, name: String, nets: &[IpNet], purpose: &str) -> String {
        let members = net_members(nets);
        self.insert(name, SetKind::Net, members, purpose)
    }

    /// The set of addresses a rule selector matches: the nets of every matching network set and
    /// the expected addresses of every matching host endpoint, of any node.
    pub fn selector(&mut self, selector: &Selector) -> String {
        let canonical = selector.to_string();
        let name = names::set_name(self.family, "s", &format!("s:{canonical}"));
        if self.known(&name) {
            return name;
        }
        let family = self.family;
        let mut nets: Vec<IpNet> = self
            .model
            .network_sets()
            .iter()
            .filter(|set| selector.matches(&set.labels))
            .flat_map(|set| set.nets.iter().copied())
            .filter(|net| IpFamily::of_net(net) == family)
            .collect();
        nets.extend(
            self.model
                .host_endpoints()
                .iter()
                .filter(|endpoint| selector.matches(&endpoint.labels))
                .flat_map(|endpoint| endpoint.expected_ips.iter().copied())
                .filter(|ip| IpFamily::of_addr(ip) == family)
                .map(IpNet::from),
        );
        let anything_selected = self
            .model
            .network_sets()
            .iter()
            .any(|set| selector.matches(&set.labels))
            || self
                .model
                .host_endpoints()
                .iter()
                .any(|endpoint| selector.matches(&endpoint.labels));
        if !anything_selected {
            self.note_empty_selector(&canonical);
        }
        let members = net_members(&nets);
        self.insert(
            name,
            SetKind::Net,
            members,
            &format!("addresses selected by `{canonical}`"),
        )
    }

    /// The set of `(address, protocol, port)` of a named port on the endpoints `selector`
    /// matches (every endpoint when there is no selector): of one protocol, or, for a rule
    /// without a protocol (`None`), of every protocol the name is defined with.
    pub fn named_port(
        &mut self,
        selector: Option<&Selector>,
        protocol: Option<u8>,
        port_name: &str,
        purpose: &str,
    ) -> String {
        let selector_text = selector.map_or_else(|| "all()".to_owned(), ToString::to_string);
        let protocol_text = protocol.map_or_else(|| "any".to_owned(), |number| number.to_string());
        let name = names::set_name(
            self.family,
            "p",
            &format!("p:{selector_text}|{protocol_text}|{port_name}"),
        );
        if self.known(&name) {
            return name;
        }
        let family = self.family;
        let mut members: Vec<SetMember> = Vec::new();
        let mut defined = false;
        for endpoint in self.model.host_endpoints() {
            if selector.is_some_and(|selector| !selector.matches(&endpoint.labels)) {
                continue;
            }
            for port in endpoint.ports.iter().filter(|port| port.name == port_name) {
                defined = true;
                let number = port.protocol.number();
                if protocol.is_some_and(|wanted| wanted != number) {
                    continue;
                }
                members.extend(
                    endpoint
                        .expected_ips
                        .iter()
                        .filter(|ip| IpFamily::of_addr(ip) == family)
                        .map(|ip| SetMember::IpPort(*ip, number, port.port)),
                );
            }
        }
        if !defined {
            self.note_unknown_named_port(port_name);
        }
        members.sort();
        members.dedup();
        self.insert(
            name,
            SetKind::IpPort,
            members,
            &format!("named port `{port_name}` ({purpose})"),
        )
    }

    /// The set of the host's own addresses.
    pub fn this_host(&mut self, addresses: &[IpAddr]) -> String {
        let name = names::this_host_set(self.family);
        let family = self.family;
        let mut members: Vec<SetMember> = addresses
            .iter()
            .filter(|ip| IpFamily::of_addr(ip) == family)
            .map(|ip| SetMember::Ip(*ip))
            .collect();
        members.sort();
        members.dedup();
        self.insert(name, SetKind::Ip, members, "this host's own addresses")
    }

    /// The sets, sorted by name.
    pub fn into_sets(self) -> Vec<IpSet> {
        self.sets.into_values().collect()
    }
}

/// Set members for networks: merged (nftables interval sets refuse overlaps, and fewer
/// members are faster to load), with `/0` split in two halves because `hash:net` refuses it.
pub fn net_members(nets: &[IpNet]) -> Vec<SetMember> {
    let mut members = Vec::new();
    for net in IpNet::aggregate(&nets.to_vec()) {
        if net.prefix_len() == 0 {
            let halves: [IpNet; 2] = match net {
                IpNet::V4(_) => [
                    IpNet::V4(Ipv4Net::new_assert([0, 0, 0, 0].into(), 1)),
                    IpNet::V4(Ipv4Net::new_assert([128, 0, 0, 0].into(), 1)),
                ],
                IpNet::V6(_) => [
                    IpNet::V6(Ipv6Net::new_assert(0u128.into(), 1)),
                    IpNet::V6(Ipv6Net::new_assert((1u128 << 127).into(), 1)),
                ],
            };
            members.extend(halves.into_iter().map(SetMember::Net));
        } else {
            members.push(SetMember::Net(net));
        }
    }
    members.sort();
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_merged_and_catch_all_is_split() {
        let nets: Vec<IpNet> = ["192.0.2.0/25", "192.0.2.128/25", "192.0.2.7/32"]
            .iter()
            .map(|n| n.parse().expect("net"))
            .collect();
        let members: Vec<String> = net_members(&nets).iter().map(ToString::to_string).collect();
        assert_eq!(members, vec!["192.0.2.0/24"]);
        let all: Vec<String> = net_members(&["0.0.0.0/0".parse().expect("net")])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(all, vec!["0.0.0.0/1", "128.0.0.0/1"]);
        let all6 = net_members(&["::/0".parse().expect("net")]);
        assert_eq!(all6.len(), 2);
    }
}
