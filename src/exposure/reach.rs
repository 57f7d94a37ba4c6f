//! Who may reach one port: the source space cut where the policies' nets begin and end, one
//! packet per piece traced by `trace`'s evaluator on every interface that can take it, and the
//! pieces let through put back together as CIDRs.
//!
//! Every address of a piece is treated alike by every rule (a net the policies name either
//! holds the whole piece or none of it), so one packet per piece is the whole answer; pieces
//! come from the nets of the policies' rules, of the network sets and the host endpoints'
//! addresses. A packet that no rule of ours drops counts as let through: nodeport-guard never
//! accepts, so where no policy applies the port is open as far as nodeport-guard is concerned.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use super::{Reachable, Transport};
use crate::config::Config;
use crate::facts::HostFacts;
use crate::model::{IpFamily, Model};
use crate::trace::{ConnState, DEFAULT_SOURCE_PORT, Evaluator, Outcome, Packet, Travel, Verdict};

/// Who may reach a port, and what decides it.
#[derive(Clone, Debug, PartialEq)]
pub struct Reach {
    /// Anyone, some or nobody.
    pub reachable: Reachable,
    /// The sources let through, as CIDRs, when some.
    pub allowed: Vec<IpNet>,
    /// What decides, in words, without repeats.
    pub decided_by: Vec<String>,
}

/// A port packets from other hosts arrive for.
#[derive(Clone, Debug)]
pub struct Port {
    pub family: IpFamily,
    pub protocol: Transport,
    /// Its number.
    pub port: u16,
    /// The host's address it is on (`None`: any of them).
    pub address: Option<IpAddr>,
    /// Whether packets for it are forwarded after DNAT (to a container or pod elsewhere)
    /// rather than taken by the host.
    pub forwarded: bool,
    /// Where nat `PREROUTING` sends its packets, which filter `INPUT` or `FORWARD` then judges:
    /// each target's address (`None`: the one the packet came to, as a REDIRECT does) and port
    /// (`None`: the same). Empty for a socket: nothing translates its packets.
    pub translated: Vec<(Option<IpAddr>, Option<u16>)>,
}

impl Port {
    /// The first packet of a connection from `src` arriving on `interface` for `dst`.
    fn packet(&self, src: IpAddr, interface: &Option<String>, dst: IpAddr) -> Packet {
        Packet {
            src,
            dst,
            protocol: self.protocol.number(),
            sport: Some(DEFAULT_SOURCE_PORT),
            dport: Some(self.port),
            icmp_type: None,
            icmp_code: None,
            in_interface: interface.clone(),
            out_interface: None,
            travel: if self.forwarded {
                Travel::Forward
            } else {
                Travel::Inbound
            },
            state: ConnState::New,
        }
    }
}

/// The policies bound to this host once, for many ports.
pub struct Reacher<'m> {
    model: &'m Model,
    evaluator: Evaluator<'m>,
    host: &'m HostFacts,
    config: &'m Config,
    /// The host's own addresses, as the pieces are cut around them.
    own_addresses: Vec<IpAddr>,
    /// The host's own addresses, each a piece of its own: a packet from one of them is the
    /// host to itself, not another host, so they are left out of who may reach a port.
    own: [BTreeSet<u128>; 2],
}

impl<'m> Reacher<'m> {
    /// Binds `model`'s policies to `host`.
    pub fn new(model: &'m Model, config: &'m Config, host: &'m HostFacts) -> Reacher<'m> {
        let own: Vec<IpAddr> = host.own_addresses(&config.host_interface_exclude);
        Reacher {
            model,
            evaluator: Evaluator::new(model, config, host),
            host,
            config,
            own: [IpFamily::V4, IpFamily::V6].map(|family| {
                own.iter()
                    .filter(|address| IpFamily::of_net(&IpNet::from(**address)) == family)
                    .copied()
                    .map(number)
                    .collect()
            }),
            own_addresses: own,
        }
    }

    /// Where the pieces of the source space begin for packets to `port`: cut only where the
    /// nets of rules that can match such a packet begin and end (see [`piece_starts`]). At
    /// 10,000 policies the nets of all rules cut the space into 80,000 pieces, each traced
    /// through every policy; a port that four policies name needs a few dozen.
    fn starts_for(&self, port: &Port) -> Vec<u128> {
        piece_starts(self.model, self.config, &self.own_addresses, port)
    }

    /// Whether the piece `start..=end` of `family` is one of the host's own addresses.
    fn is_own(&self, family: IpFamily, start: u128, end: u128) -> bool {
        start == end && self.own[usize::from(family == IpFamily::V6)].contains(&start)
    }

    /// The verdicts on `packet`, once for each of the destinations nat `PREROUTING` may
    /// translate it to (a service's endpoints: a source that one of them lets through reaches
    /// the port), or once as it is.
    fn verdicts(
        &self,
        packet: &Packet,
        translated: &[(Option<IpAddr>, Option<u16>)],
    ) -> Vec<Verdict> {
        if translated.is_empty() {
            return vec![self.evaluator.verdict(packet)];
        }
        translated
            .iter()
            .map(|&(address, port)| {
                let mut after = packet.clone();
                after.dst = address.unwrap_or(packet.dst);
                after.dport = port.or(packet.dport);
                self.evaluator.verdict_after_dnat(packet, &after)
            })
            .collect()
    }

    /// Who may reach `port`.
    pub fn reach(&self, port: &Port) -> Reach {
        let arrivals = self.arrivals(port.family, port.address);
        let starts = &self.starts_for(port);
        let mut allowed_pieces = Vec::new();
        // What decided, in words, each once in the order first met: not the verdicts
        // themselves, which are as many as the pieces (20,000 at 1,000 policies) times the
        // arrivals, each with its reasons.
        let mut allows: Vec<String> = Vec::new();
        let mut drops: Vec<String> = Vec::new();
        let once = |said: &mut Vec<String>, verdict: &Verdict| {
            let words = words(verdict);
            if !said.contains(&words) {
                said.push(words);
            }
        };
        // Per piece: let through, or not; `None` for the host's own addresses, which count as
        // neither (they fill a gap between two pieces let through, and nothing else).
        let mut through: Vec<(u128, u128, Option<bool>)> = Vec::with_capacity(starts.len());
        for (index, &start) in starts.iter().enumerate() {
            let end = starts
                .get(index + 1)
                .map_or(max_of(port.family), |next| next - 1);
            if self.is_own(port.family, start, end) {
                through.push((start, end, None));
                continue;
            }
            let mut let_through = false;
            for (interface, dst) in &arrivals {
                let packet = port.packet(address_of(port.family, start), interface, *dst);
                for verdict in self.verdicts(&packet, &port.translated) {
                    if verdict.outcome == Outcome::Dropped {
                        once(&mut drops, &verdict);
                    } else {
                        let_through = true;
                        once(&mut allows, &verdict);
                    }
                }
            }
            through.push((start, end, Some(let_through)));
        }
        let others: Vec<bool> = through.iter().filter_map(|piece| piece.2).collect();
        for (index, &(start, end, let_through)) in through.iter().enumerate() {
            let allowed = let_through.unwrap_or_else(|| {
                through[..index].iter().rev().find_map(|piece| piece.2) == Some(true)
                    && through[index + 1..].iter().find_map(|piece| piece.2) == Some(true)
            });
            if allowed {
                allowed_pieces.push((start, end));
            }
        }
        let reachable = if !others.contains(&true) {
            Reachable::Nobody
        } else if !others.contains(&false) {
            Reachable::Anyone
        } else {
            Reachable::Some
        };
        let decided_by = match reachable {
            Reachable::Anyone => allows,
            Reachable::Nobody => drops,
            Reachable::Some => {
                let mut both = allows;
                for words in drops {
                    if !both.contains(&words) {
                        both.push(words);
                    }
                }
                both
            }
        };
        Reach {
            reachable,
            allowed: if reachable == Reachable::Some {
                cidrs(port.family, &allowed_pieces)
            } else {
                Vec::new()
            },
            decided_by,
        }
    }

    /// How many pieces the source space is cut into for `port` (packets traced per
    /// interface).
    pub fn pieces(&self, port: &Port) -> usize {
        self.starts_for(port).len()
    }

    /// Whether every source may reach `port` ([`Reacher::reach`] says `anyone`), stopping at
    /// the first packet dropped.
    pub fn open_to_anyone(&self, port: &Port) -> bool {
        let arrivals = self.arrivals(port.family, port.address);
        let starts = &self.starts_for(port);
        let ends = starts
            .iter()
            .skip(1)
            .map(|next| next - 1)
            .chain([max_of(port.family)]);
        starts.iter().zip(ends).all(|(&start, end)| {
            self.is_own(port.family, start, end)
                || arrivals.iter().any(|(interface, dst)| {
                    let packet = port.packet(address_of(port.family, start), interface, *dst);
                    self.evaluator.verdict(&packet).outcome != Outcome::Dropped
                })
        })
    }

    /// The interfaces (and the address on each) a packet from another host for `address` can
    /// arrive on: the one holding it, or for any address every interface of the host with an
    /// address of the family, never loopback (one without an interface, when the host has
    /// none).
    fn arrivals(&self, family: IpFamily, address: Option<IpAddr>) -> Vec<(Option<String>, IpAddr)> {
        let exclude = &self.config.host_interface_exclude;
        let interfaces = self
            .host
            .interfaces
            .iter()
            .filter(|interface| interface.name != "lo" && !exclude.is_match(&interface.name));
        let mut arrivals = Vec::new();
        for interface in interfaces {
            let held = interface.addresses.iter().find(|a| {
                IpFamily::of_addr(a) == family
                    && !a.is_loopback()
                    && address.is_none_or(|wanted| **a == wanted)
            });
            if let Some(held) = held {
                arrivals.push((Some(interface.name.clone()), *held));
            }
        }
        if arrivals.is_empty() {
            let dst = address.unwrap_or(match family {
                IpFamily::V4 => IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED),
                IpFamily::V6 => IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED),
            });
            arrivals.push((None, dst));
        }
        arrivals
    }
}

/// The verdict in the words of `decidedBy`.
fn words(verdict: &Verdict) -> String {
    match (&verdict.policy, verdict.rule, verdict.outcome) {
        (Some(policy), Some(rule), Outcome::Allowed) => format!("{policy} rule {rule} (Allow)"),
        (Some(policy), Some(rule), _) => format!("{policy} rule {rule} (Deny)"),
        (Some(policy), None, _) => format!("{policy}: {}", verdict.reason),
        (None, _, Outcome::NotOurs) => "no rule decides".to_owned(),
        (None, _, _) if verdict.reason.contains("failsafe") => "failsafe port".to_owned(),
        (None, _, _) => verdict.reason.clone(),
    }
}

/// Where the pieces of the source space of packets to `port` begin: 0, and the first address
/// of every net that counts and the one after its last: the nets of the rules that can match
/// such a packet ([`can_match`]) and of the network sets their selectors pick, the host
/// endpoints' and failsafe ports' nets, and each of the host's own addresses. A rule that
/// never matches such a packet treats every source alike, so its nets cut nothing the
/// verdicts could tell apart.
fn piece_starts(model: &Model, config: &Config, own: &[IpAddr], port: &Port) -> Vec<u128> {
    let family = port.family;
    let mut nets: Vec<IpNet> = own.iter().map(|address| IpNet::from(*address)).collect();
    let mut selectors = Vec::new();
    let rules = model
        .policies()
        .iter()
        .chain(model.staged_policies())
        .flat_map(|policy| policy.ingress.iter().flatten())
        .filter(|rule| can_match(rule, port));
    for rule in rules {
        for entity in [&rule.source, &rule.destination] {
            nets.extend(entity.nets.iter().chain(&entity.not_nets));
            selectors.extend(entity.selector.iter().chain(&entity.not_selector));
        }
    }
    let sets = model.network_sets().iter().filter(|set| {
        selectors
            .iter()
            .any(|selector| selector.matches(&set.labels))
    });
    for set in sets {
        nets.extend(&set.nets);
    }
    let failsafes = config
        .failsafe_inbound
        .iter()
        .chain(&config.failsafe_outbound);
    nets.extend(failsafes.filter_map(|failsafe| failsafe.net));
    for endpoint in model.host_endpoints() {
        nets.extend(
            endpoint
                .expected_ips
                .iter()
                .map(|address| IpNet::from(*address)),
        );
    }
    let mut starts = BTreeSet::from([0u128]);
    for net in nets.iter().filter(|net| IpFamily::of_net(net) == family) {
        let first = number(net.network());
        let last = number(net.broadcast());
        starts.insert(first);
        if last < max_of(family) {
            starts.insert(last + 1);
        }
    }
    starts.into_iter().collect()
}

/// Whether `rule` can match a packet to `port`: its protocol, and the port's number before
/// nat (pre-DNAT policy) or after it (filter's). A named port may be any number, so it never
/// rules a rule out.
fn can_match(rule: &crate::model::Rule, port: &Port) -> bool {
    use crate::model::Port as Named;
    let protocol = port.protocol.number();
    if rule.protocol.is_some_and(|p| p.number() != protocol)
        || rule.not_protocol.is_some_and(|p| p.number() == protocol)
    {
        return false;
    }
    let holds = |ports: &[Named], number: u16| {
        ports.iter().any(|listed| match listed {
            Named::Single(single) => *single == number,
            Named::Range(first, last) => (*first..=*last).contains(&number),
            Named::Named(_) => false,
        })
    };
    let may_name = |ports: &[Named], number: u16| {
        holds(ports, number) || ports.iter().any(|listed| matches!(listed, Named::Named(_)))
    };
    let destination = &rule.destination;
    let numbers = std::iter::once(port.port).chain(port.translated.iter().filter_map(|t| t.1));
    numbers.into_iter().any(|number| {
        (destination.ports.is_empty() || may_name(&destination.ports, number))
            && !holds(&destination.not_ports, number)
    })
}

fn max_of(family: IpFamily) -> u128 {
    match family {
        IpFamily::V4 => u128::from(u32::MAX),
        IpFamily::V6 => u128::MAX,
    }
}

fn number(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn address_of(family: IpFamily, value: u128) -> IpAddr {
    match family {
        IpFamily::V4 => IpAddr::from(u32::try_from(value).unwrap_or(u32::MAX).to_be_bytes()),
        IpFamily::V6 => IpAddr::from(value.to_be_bytes()),
    }
}

/// The inclusive ranges `pieces` (sorted) as the fewest CIDRs, adjacent ranges joined.
fn cidrs(family: IpFamily, pieces: &[(u128, u128)]) -> Vec<IpNet> {
    let bits: u32 = match family {
        IpFamily::V4 => 32,
        IpFamily::V6 => 128,
    };
    let mut joined: Vec<(u128, u128)> = Vec::new();
    for &(start, end) in pieces {
        match joined.last_mut() {
            Some(last) if last.1.checked_add(1) == Some(start) => last.1 = end,
            _ => joined.push((start, end)),
        }
    }
    let mut nets = Vec::new();
    for (mut start, end) in joined {
        loop {
            // The largest block aligned at `start` that ends at or before `end`.
            let mut size_bits = if start == 0 {
                bits
            } else {
                start.trailing_zeros().min(bits)
            };
            while size_bits > 0 && block_end(start, size_bits).is_none_or(|last| last > end) {
                size_bits -= 1;
            }
            let prefix = u8::try_from(bits - size_bits).unwrap_or(0);
            if let Ok(net) = IpNet::new(address_of(family, start), prefix) {
                nets.push(net);
            }
            match block_end(start, size_bits) {
                Some(last) if last < end => start = last + 1,
                _ => break,
            }
        }
    }
    nets
}

/// The last address of the block of `2^size_bits` addresses starting at `start`.
fn block_end(start: u128, size_bits: u32) -> Option<u128> {
    let size = if size_bits >= 128 {
        None
    } else {
        Some(1u128 << size_bits)
    };
    match size {
        Some(size) => start.checked_add(size - 1),
        None => (start == 0).then_some(u128::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ports, each with its own whitelist (one inline, one a network set picked by label),
    /// a third port nobody names, and a Deny for every port: a port's pieces are cut only by
    /// the rules that can match it (its number before or after nat), and who may reach it is
    /// what the pieces of every rule say.
    #[test]
    fn a_ports_pieces_come_from_the_rules_that_can_match_it() {
        let model = crate::fixtures::model(
            "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: guard}
spec:
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
  - {action: Allow, protocol: TCP, source: {nets: [198.51.100.0/25]}, destination: {ports: [30001]}}
  - {action: Allow, protocol: TCP, source: {selector: team == 'b'}, destination: {ports: [30002]}}
  - {action: Allow, protocol: UDP, source: {nets: [192.0.2.0/24]}, destination: {ports: [30001]}}
  - {action: Deny, protocol: TCP}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: b, labels: {team: b}}
spec:
  nets: [203.0.113.0/24]
",
        );
        let config = Config::default();
        let host = crate::fixtures::golden_host();
        let reacher = Reacher::new(&model, &config, &host);
        let tcp = |number: u16, translated: Vec<(Option<IpAddr>, Option<u16>)>| Port {
            family: IpFamily::V4,
            protocol: Transport::Tcp,
            port: number,
            address: None,
            forwarded: !translated.is_empty(),
            translated,
        };
        let v4 = |a: &str| number(a.parse().expect("an address"));
        let first = reacher.starts_for(&tcp(30001, Vec::new()));
        assert!(first.contains(&v4("198.51.100.0")) && first.contains(&v4("198.51.100.128")));
        for other in ["203.0.113.0", "192.0.2.0"] {
            assert!(!first.contains(&v4(other)), "{other} cuts 30001's space");
        }
        assert_eq!(reacher.pieces(&tcp(30001, Vec::new())), first.len());
        let second = reacher.starts_for(&tcp(30002, Vec::new()));
        assert!(second.contains(&v4("203.0.113.0")) && !second.contains(&v4("198.51.100.0")));
        // A port DNATed to 30001 is judged at 30001 after nat: 30001's rules count.
        let translated = reacher.starts_for(&tcp(31000, vec![(None, Some(30001))]));
        assert!(translated.contains(&v4("198.51.100.0")));
        assert_eq!(
            reacher.reach(&tcp(30001, Vec::new())).allowed,
            [net("198.51.100.0/25")]
        );
        assert_eq!(
            reacher.reach(&tcp(30002, Vec::new())).allowed,
            [net("203.0.113.0/24")]
        );
        assert_eq!(
            reacher.reach(&tcp(30003, Vec::new())).reachable,
            Reachable::Nobody
        );
        assert!(!reacher.open_to_anyone(&tcp(30001, Vec::new())));
    }

    fn net(text: &str) -> IpNet {
        text.parse().expect("a net")
    }

    #[test]
    fn ranges_become_the_fewest_cidrs() {
        let v4 = |a: &str| number(a.parse().expect("an address"));
        assert_eq!(
            cidrs(IpFamily::V4, &[(v4("198.51.100.0"), v4("198.51.100.255"))]),
            [net("198.51.100.0/24")]
        );
        assert_eq!(
            cidrs(
                IpFamily::V4,
                &[
                    (v4("198.51.100.0"), v4("198.51.100.9")),
                    (v4("198.51.100.10"), v4("198.51.100.10")),
                    (v4("203.0.113.0"), v4("203.0.113.127")),
                ]
            ),
            [
                net("198.51.100.0/29"),
                net("198.51.100.8/31"),
                net("198.51.100.10/32"),
                net("203.0.113.0/25"),
            ]
        );
        assert_eq!(
            cidrs(IpFamily::V4, &[(0, u128::from(u32::MAX))]),
            [net("0.0.0.0/0")]
        );
        assert_eq!(cidrs(IpFamily::V6, &[(0, u128::MAX)]), [net("::/0")]);
    }
}
