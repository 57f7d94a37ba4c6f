//! Random scenarios for the differential test, the packets to probe them
//! with, and the smaller scenarios a failing case shrinks to.
//!
//! Everything is drawn from a seeded generator, so a seed reproduces a run.
//! The vocabulary is the lab's: client sources 198.51.100.10-13 (on-link),
//! 203.0.113.10-13 (routed), 2001:db8:1::10-13, 2001:db8:2::10-13; the
//! node's addresses 198.51.100.1, 192.0.2.1, 2001:db8:1::1, 2001:db8:3::1;
//! the ports the lab serves. Nets are drawn so that they cover some of the
//! sources (or none), lists sometimes grow past eight entries (ipsets) and
//! port lists past fifteen slots (several multiport matches).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::{
    Action, Config, DEFAULT_TIER, Entity, Family, Labels, NetworkSet, Packet, Policy, PortSpec,
    ProtoSpec, RemoteEndpoint, Rule, Scenario, Selector, Tier,
};

/// SplitMix64: small, fast and good enough to drive a test generator.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// `true` with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Shuffles in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// The seed of case `index` of a run with `seed`: each case can be
/// replayed on its own.
pub fn case_seed(seed: u64, index: usize) -> u64 {
    Rng::new(seed ^ (index as u64).wrapping_mul(0xa076_1d64_78bd_642f)).next_u64()
}

/// Client source addresses of a family (on-link first, then routed).
pub fn sources(family: Family) -> Vec<IpAddr> {
    match family {
        Family::V4 => (10..14)
            .map(|i| IpAddr::V4(Ipv4Addr::new(198, 51, 100, i)))
            .chain((10..14).map(|i| IpAddr::V4(Ipv4Addr::new(203, 0, 113, i))))
            .collect(),
        Family::V6 => (0x10..0x14)
            .map(|i| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, i)))
            .chain((0x10..0x14).map(|i| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, i))))
            .collect(),
    }
}

/// The node's addresses a client can reach: the client-facing one first,
/// then the pod-link one (routed through the node's client-facing side).
pub fn node_addresses(family: Family) -> [IpAddr; 2] {
    match family {
        Family::V4 => [
            IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)),
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        ],
        Family::V6 => [
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 1)),
        ],
    }
}

/// TCP destination ports probed (closed ones answer with a reset, which
/// shows the SYN got through): the NodePort, the port behind it, the host
/// service, failsafe SSH and a closed port.
pub const TCP_PORTS: [u16; 5] = [30008, 8080, 9100, 22, 7000];

/// UDP destination ports probed, each with a server on the node's
/// client-facing address (a closed UDP port answers with an ICMP error,
/// which the kernel rate-limits, so it would look like a drop): the UDP
/// NodePort, the port behind it, a plain UDP service and failsafe DHCP.
pub const UDP_PORTS: [u16; 4] = [30053, 5353, 9101, 68];

/// Destination ports rules are drawn from: the probed ones and their
/// neighbours.
const RULE_PORTS: [u16; 15] = [
    30008, 30053, 8080, 9100, 9101, 5353, 22, 68, 7000, 30007, 30009, 9099, 53, 443, 31000,
];

/// Destination port ranges rules are drawn from.
const RULE_RANGES: [(u16, u16); 8] = [
    (30000, 32767),
    (30008, 30053),
    (9000, 9200),
    (1, 1024),
    (5000, 6000),
    (8080, 9100),
    (1, 65535),
    (7000, 7000),
];

/// How many source ports one case may use; probes of a case use distinct
/// ones, so their NFLOG messages can be told apart.
pub const SOURCE_PORTS_PER_CASE: u16 = 16;

/// The source ports of case `index`.
pub fn source_port_pool(index: usize) -> Vec<u16> {
    let base = 20_000 + (index % 2_500) as u16 * SOURCE_PORTS_PER_CASE;
    (base..base + SOURCE_PORTS_PER_CASE).collect()
}

const SET_KEYS: [&str; 3] = ["role", "zone", "tier"];
const SET_VALUES: [&str; 5] = ["edge", "office", "lab", "a", "b"];
const NODE_KEYS: [&str; 4] = ["kubernetes.io/hostname", "kubernetes.io/os", "role", "zone"];
const NODE_VALUES: [&str; 6] = ["node1", "node2", "linux", "windows", "edge", "a"];
const NAMES: [&str; 12] = [
    "a",
    "b",
    "allow-office",
    "deny-rest",
    "z-last",
    "p1",
    "p2",
    "m",
    "nodeports",
    "aa",
    "log-all",
    // A dot is the tier's: in `default`, `default.<name>` (outside it, `<tier>.<name>`).
    "default.x-y",
];

fn masked(ip: IpAddr, prefix: u8) -> IpNet {
    IpNet::new(ip, prefix)
        .map(|n| n.trunc())
        .unwrap_or_else(|e| panic!("bad prefix {prefix} for {ip}: {e}"))
}

/// A net of `family` that covers some client sources (or the node's
/// addresses, for `destination`), or none of them.
fn random_net(rng: &mut Rng, family: Family, destination: bool, negated: bool) -> IpNet {
    let roll = rng.below(100);
    let anchors: Vec<IpAddr> = if destination {
        node_addresses(family).to_vec()
    } else {
        sources(family)
    };
    let prefixes: &[u8] = match family {
        Family::V4 => &[32, 32, 31, 30, 29, 24, 24, 16, 8],
        Family::V6 => &[128, 128, 127, 126, 125, 64, 64, 48, 32],
    };
    if roll < 70 {
        masked(*rng.pick(&anchors), *rng.pick(prefixes))
    } else if roll < 75 && !negated {
        match family {
            Family::V4 => "0.0.0.0/0".parse().expect("net"),
            Family::V6 => "::/0".parse().expect("net"),
        }
    } else {
        filler_net(rng, family)
    }
}

/// A net that covers no address of the lab.
fn filler_net(rng: &mut Rng, family: Family) -> IpNet {
    match family {
        Family::V4 => masked(
            IpAddr::V4(Ipv4Addr::new(
                10,
                rng.below(256) as u8,
                rng.below(256) as u8,
                rng.below(256) as u8,
            )),
            *rng.pick(&[32, 24, 16]),
        ),
        Family::V6 => masked(
            IpAddr::V6(Ipv6Addr::new(
                0xfd00,
                rng.below(0xffff) as u16,
                0,
                0,
                0,
                0,
                0,
                rng.below(0xffff) as u16,
            )),
            *rng.pick(&[128, 64, 48]),
        ),
    }
}

fn random_nets(rng: &mut Rng, family: Family, destination: bool, negated: bool) -> Vec<IpNet> {
    let mut nets: Vec<IpNet> = (0..1 + rng.below(3))
        .map(|_| random_net(rng, family, destination, negated))
        .collect();
    if rng.chance(20) {
        // Longer than eight: the list becomes an ipset / a named set.
        for _ in 0..7 + rng.below(6) {
            nets.push(filler_net(rng, family));
        }
        rng.shuffle(&mut nets);
    }
    nets
}

fn random_ports(rng: &mut Rng, destination: bool, pool: &[u16]) -> Vec<PortSpec> {
    let mut ports = Vec::new();
    for _ in 0..1 + rng.below(3) {
        ports.push(if destination {
            if rng.chance(70) {
                PortSpec::Single(*rng.pick(&RULE_PORTS))
            } else {
                let (a, b) = *rng.pick(&RULE_RANGES);
                PortSpec::Range(a, b)
            }
        } else if rng.chance(60) {
            PortSpec::Single(*rng.pick(pool))
        } else {
            let a = *rng.pick(pool);
            let b = a.saturating_add(rng.below(8) as u16);
            PortSpec::Range(a, b)
        });
    }
    if rng.chance(15) {
        // More than fifteen multiport slots: several alternatives.
        for i in 0..14 + rng.below(4) {
            ports.push(PortSpec::Single(40_000 + i as u16 * 7));
        }
        rng.shuffle(&mut ports);
    }
    ports
}

fn random_label_selector(rng: &mut Rng, keys: &[&str], values: &[&str], depth: u32) -> Selector {
    let k = (*rng.pick(keys)).to_owned();
    let v = (*rng.pick(values)).to_owned();
    let roll = rng.below(if depth == 0 { 10 } else { 13 });
    match roll {
        0 => Selector::All,
        1 => Selector::Has(k),
        2 | 3 => Selector::Eq(k, v),
        4 => Selector::Ne(k, v),
        5 => {
            let w = (*rng.pick(values)).to_owned();
            Selector::In(k, vec![v, w])
        }
        6 => Selector::NotIn(k, vec![v]),
        7 => Selector::Contains(k, v[..1].to_owned()),
        8 => Selector::StartsWith(k, v[..v.len().min(2)].to_owned()),
        9 => Selector::EndsWith(k, v[v.len() - 1..].to_owned()),
        10 => Selector::Not(Box::new(random_label_selector(
            rng,
            keys,
            values,
            depth - 1,
        ))),
        11 => Selector::And(
            Box::new(random_label_selector(rng, keys, values, depth - 1)),
            Box::new(random_label_selector(rng, keys, values, depth - 1)),
        ),
        _ => Selector::Or(
            Box::new(random_label_selector(rng, keys, values, depth - 1)),
            Box::new(random_label_selector(rng, keys, values, depth - 1)),
        ),
    }
}

fn random_labels(rng: &mut Rng) -> Labels {
    let mut labels = Labels::new();
    for _ in 0..rng.below(3) {
        labels.insert(
            (*rng.pick(&SET_KEYS)).to_owned(),
            (*rng.pick(&SET_VALUES)).to_owned(),
        );
    }
    labels
}

fn random_protocol(rng: &mut Rng, family: Family) -> ProtoSpec {
    let roll = rng.below(100);
    let number = match roll {
        0..40 => 6,
        40..75 => 17,
        75..85 => 132,
        85..90 => 136,
        _ => match family {
            Family::V4 => 1,
            Family::V6 => 58,
        },
    };
    ProtoSpec {
        number,
        numeric: matches!(number, 6 | 17) && rng.chance(20),
    }
}

fn random_entity(
    rng: &mut Rng,
    family: Family,
    destination: bool,
    ports_allowed: bool,
    pool: &[u16],
) -> Entity {
    let (nets, not_nets, selector, not_selector, ports, not_ports) = if destination {
        (12, 10, 5, 5, 55, 15)
    } else {
        (35, 25, 20, 10, 12, 6)
    };
    let mut entity = Entity::default();
    if rng.chance(nets) {
        entity.nets = random_nets(rng, family, destination, false);
    }
    if rng.chance(not_nets) {
        entity.not_nets = random_nets(rng, family, destination, true);
    }
    if rng.chance(selector) {
        entity.selector = Some(random_label_selector(rng, &SET_KEYS, &SET_VALUES, 1));
    }
    if rng.chance(not_selector) {
        entity.not_selector = Some(random_label_selector(rng, &SET_KEYS, &SET_VALUES, 1));
    }
    if ports_allowed && rng.chance(ports) {
        entity.ports = random_ports(rng, destination, pool);
    }
    if ports_allowed && rng.chance(not_ports) {
        entity.not_ports = random_ports(rng, destination, pool);
    }
    entity
}

fn random_rule(rng: &mut Rng, pool: &[u16]) -> Rule {
    let action = match rng.below(100) {
        0..35 => Action::Allow,
        35..75 => Action::Deny,
        75..88 => Action::Pass,
        _ => Action::Log,
    };
    // All nets of one rule are of one family (anything else is invalid).
    let family = if rng.chance(55) {
        Family::V4
    } else {
        Family::V6
    };
    let protocol = rng.chance(70).then(|| random_protocol(rng, family));
    let not_protocol = rng.chance(12).then(|| random_protocol(rng, family));
    let ip_version = rng.chance(15).then_some(family);
    let ports_allowed = protocol.is_some_and(ProtoSpec::has_ports);
    Rule {
        action,
        protocol,
        not_protocol,
        ip_version,
        source: random_entity(rng, family, false, ports_allowed, pool),
        destination: random_entity(rng, family, true, ports_allowed, pool),
    }
}

/// A random scenario for case `index` (whose probes use
/// [`source_port_pool`]`(index)`).
pub fn scenario(rng: &mut Rng, index: usize) -> Scenario {
    let pool = source_port_pool(index);
    let mut config = Config::default();
    let mut actions = Vec::new();
    for (action, percent) in [(Action::Allow, 25), (Action::Deny, 80), (Action::Pass, 25)] {
        if rng.chance(percent) {
            actions.push(action);
        }
    }
    config.log_actions = actions;
    if rng.chance(15) {
        let mut list = vec![(6u8, 22u16)];
        list.push(*rng.pick(&[(6u8, 9100u16), (17, 5353), (6, 30008), (17, 30053)]));
        config.failsafe_inbound = Some(list);
    }
    if rng.chance(50) {
        config.host_labels.insert("role".into(), "edge".into());
    }
    // Every other case drops denied TCP SYNs in mangle instead of raw: the same reference
    // judges both.
    config.early_drop = index.is_multiple_of(2);

    let mut scenario = Scenario {
        config,
        ..Scenario::default()
    };
    let mut set_names = BTreeSet::new();
    for i in 0..rng.below(4) {
        let name = format!("set-{i}");
        set_names.insert(name.clone());
        let mut nets: Vec<IpNet> = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let family = if rng.chance(55) {
                Family::V4
            } else {
                Family::V6
            };
            let destination = rng.chance(15);
            nets.push(random_net(rng, family, destination, false));
        }
        if rng.chance(15) {
            for _ in 0..10 {
                nets.push(filler_net(rng, Family::V4));
            }
        }
        scenario.sets.push(NetworkSet {
            name,
            labels: random_labels(rng),
            nets,
        });
    }
    if rng.chance(20) {
        let family = if rng.chance(50) {
            Family::V4
        } else {
            Family::V6
        };
        let mut ips = sources(family);
        rng.shuffle(&mut ips);
        ips.truncate(1 + rng.below(3));
        scenario.endpoints.push(RemoteEndpoint {
            name: "node2-eth0".into(),
            node: "node2".into(),
            labels: random_labels(rng),
            expected_ips: ips,
        });
    }

    // Tiers besides `default` in some cases: before it, after it, or without an order (beside
    // it, by name: `audit` before, the others after).
    if rng.chance(40) {
        for name in ["security", "audit", "platform"]
            .iter()
            .take(1 + rng.below(3))
        {
            scenario.tiers.push(Tier {
                name: (*name).to_owned(),
                order: *rng.pick(&[Some(50.0), Some(500.0), Some(2_000_000.0), None]),
                pass: rng.chance(50),
            });
        }
    }
    let mut names: Vec<&str> = NAMES.to_vec();
    rng.shuffle(&mut names);
    let orders = [10.0, 20.0, 20.0, 30.0, 5.5, 100.0];
    for name in names.iter().take(1 + rng.below(5)) {
        let tier = match scenario.tiers.len() {
            0 => DEFAULT_TIER.to_owned(),
            count if rng.chance(60) => scenario.tiers[rng.below(count)].name.clone(),
            _ => DEFAULT_TIER.to_owned(),
        };
        let name = if tier == DEFAULT_TIER {
            (*name).to_owned()
        } else {
            let base = name.strip_prefix("default.").unwrap_or(name);
            format!("{tier}.{base}")
        };
        let selector = if rng.chance(70) {
            Selector::All
        } else {
            random_label_selector(rng, &NODE_KEYS, &NODE_VALUES, 1)
        };
        let rules = (0..rng.below(5)).map(|_| random_rule(rng, &pool)).collect();
        scenario.policies.push(Policy {
            name,
            tier,
            order: rng.chance(80).then(|| *rng.pick(&orders)),
            selector,
            explicit_types: rng.chance(30),
            ingress: rules,
            staged: rng.chance(20),
        });
        // Sometimes a staged change to an enforced policy: a staged twin of the same name.
        let last = scenario.policies.last().cloned();
        if let Some(enforced) = last.filter(|p| !p.staged)
            && rng.chance(15)
        {
            let ingress = (0..rng.below(5)).map(|_| random_rule(rng, &pool)).collect();
            scenario.policies.push(Policy {
                staged: true,
                ingress,
                ..enforced
            });
        }
    }
    scenario
}

/// Every packet the lab can send in case `index`, with the source port of
/// each drawn from the case's pool.
pub fn packet_space(rng: &mut Rng, index: usize) -> Vec<Packet> {
    let pool = source_port_pool(index);
    let mut packets = Vec::new();
    for family in [Family::V4, Family::V6] {
        let [main, other] = node_addresses(family);
        for src in sources(family) {
            for dport in TCP_PORTS {
                for dst in [main, other] {
                    packets.push(Packet {
                        src,
                        sport: *rng.pick(&pool),
                        dst,
                        dport,
                        proto: 6,
                    });
                }
            }
            for dport in UDP_PORTS {
                packets.push(Packet {
                    src,
                    sport: *rng.pick(&pool),
                    dst: main,
                    dport,
                    proto: 17,
                });
            }
        }
    }
    packets
}

/// Picks up to `count` packets with distinct source ports, spread over the
/// different ways the reference decides (a different deciding rule, or
/// allowed vs dropped, alternating), so that one case exercises as many
/// rules as possible.
pub fn pick_probes(
    rng: &mut Rng,
    scenario: &Scenario,
    mut packets: Vec<Packet>,
    count: usize,
) -> Vec<Packet> {
    rng.shuffle(&mut packets);
    let mut groups: Vec<(String, Vec<Packet>)> = Vec::new();
    for packet in packets {
        let verdict = super::evaluate(scenario, &packet);
        let key = format!("{} {}", verdict.allowed, verdict.reason);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(packet),
            None => groups.push((key, vec![packet])),
        }
    }
    // Alternate between ways of being dropped and ways of being allowed, so both kinds of
    // mistake get probed even when one kind decides most packets.
    let (mut dropped, mut allowed): (Vec<_>, Vec<_>) = groups
        .into_iter()
        .partition(|(key, _)| key.starts_with("false"));
    let mut groups = Vec::new();
    while !dropped.is_empty() || !allowed.is_empty() {
        for side in [&mut dropped, &mut allowed] {
            if !side.is_empty() {
                groups.push(side.remove(0));
            }
        }
    }
    let mut picked: Vec<Packet> = Vec::new();
    let mut used_ports = BTreeSet::new();
    let mut round = 0;
    while picked.len() < count && groups.iter().any(|(_, m)| m.len() > round) {
        for (_, members) in &groups {
            if picked.len() >= count {
                break;
            }
            if let Some(packet) = members.get(round)
                && used_ports.insert(packet.sport)
            {
                picked.push(*packet);
            }
        }
        round += 1;
    }
    picked
}

// ---------------------------------------------------------------------------
// Shrinking.
// ---------------------------------------------------------------------------

fn without<T: Clone>(items: &[T], index: usize) -> Vec<T> {
    let mut out = items.to_vec();
    out.remove(index);
    out
}

fn entity_candidates(entity: &Entity) -> Vec<Entity> {
    let mut out = Vec::new();
    if !entity.is_empty() {
        out.push(Entity::default());
    }
    macro_rules! list {
        ($field:ident) => {
            if !entity.$field.is_empty() {
                let mut e = entity.clone();
                e.$field.clear();
                out.push(e);
                if entity.$field.len() > 1 {
                    // Halves first, then one element at a time.
                    let half = entity.$field.len() / 2;
                    let mut e = entity.clone();
                    e.$field.truncate(half);
                    out.push(e);
                    let mut e = entity.clone();
                    e.$field.drain(..half);
                    out.push(e);
                    for i in 0..entity.$field.len() {
                        let mut e = entity.clone();
                        e.$field = without(&entity.$field, i);
                        out.push(e);
                    }
                }
            }
        };
    }
    list!(nets);
    list!(not_nets);
    list!(ports);
    list!(not_ports);
    for (i, selector) in [&entity.selector, &entity.not_selector]
        .into_iter()
        .enumerate()
    {
        if let Some(selector) = selector {
            let mut e = entity.clone();
            if i == 0 {
                e.selector = None;
            } else {
                e.not_selector = None;
            }
            out.push(e);
            for simpler in selector.simpler() {
                let mut e = entity.clone();
                if i == 0 {
                    e.selector = Some(simpler);
                } else {
                    e.not_selector = Some(simpler);
                }
                out.push(e);
            }
        }
    }
    out
}

fn rule_candidates(rule: &Rule) -> Vec<Rule> {
    let mut out = Vec::new();
    if rule.not_protocol.is_some() {
        out.push(Rule {
            not_protocol: None,
            ..rule.clone()
        });
    }
    if rule.ip_version.is_some() {
        out.push(Rule {
            ip_version: None,
            ..rule.clone()
        });
    }
    if rule.protocol.is_some() {
        let mut r = rule.clone();
        r.protocol = None;
        // Ports need a protocol.
        for entity in [&mut r.source, &mut r.destination] {
            entity.ports.clear();
            entity.not_ports.clear();
        }
        out.push(r);
    }
    if rule.protocol.is_some_and(|p| p.numeric) {
        let mut r = rule.clone();
        if let Some(p) = r.protocol.as_mut() {
            p.numeric = false;
        }
        out.push(r);
    }
    if matches!(rule.action, Action::Log | Action::Pass) {
        for action in [Action::Deny, Action::Allow] {
            out.push(Rule {
                action,
                ..rule.clone()
            });
        }
    }
    for entity in entity_candidates(&rule.source) {
        out.push(Rule {
            source: entity,
            ..rule.clone()
        });
    }
    for entity in entity_candidates(&rule.destination) {
        out.push(Rule {
            destination: entity,
            ..rule.clone()
        });
    }
    out
}

/// Smaller or simpler variants of `scenario`, most promising first: whole
/// policies, sets and rules removed, then single fields, list entries and
/// selector parts.
pub fn shrink_candidates(scenario: &Scenario) -> Vec<Scenario> {
    let mut out = Vec::new();
    for i in 0..scenario.policies.len() {
        out.push(Scenario {
            policies: without(&scenario.policies, i),
            ..scenario.clone()
        });
    }
    for i in 0..scenario.sets.len() {
        out.push(Scenario {
            sets: without(&scenario.sets, i),
            ..scenario.clone()
        });
    }
    for i in 0..scenario.endpoints.len() {
        out.push(Scenario {
            endpoints: without(&scenario.endpoints, i),
            ..scenario.clone()
        });
    }
    for (p, policy) in scenario.policies.iter().enumerate() {
        for r in 0..policy.ingress.len() {
            let mut s = scenario.clone();
            s.policies[p].ingress.remove(r);
            out.push(s);
        }
    }
    let config = &scenario.config;
    if config.failsafe_inbound.is_some() {
        let mut s = scenario.clone();
        s.config.failsafe_inbound = None;
        out.push(s);
    }
    if !config.host_labels.is_empty() {
        let mut s = scenario.clone();
        s.config.host_labels.clear();
        out.push(s);
    }
    if !config.early_drop {
        let mut s = scenario.clone();
        s.config.early_drop = true;
        out.push(s);
    }
    for i in 0..config.log_actions.len() {
        let mut s = scenario.clone();
        s.config.log_actions.remove(i);
        out.push(s);
    }
    for (p, policy) in scenario.policies.iter().enumerate() {
        for simpler in policy.selector.simpler() {
            let mut s = scenario.clone();
            s.policies[p].selector = simpler;
            out.push(s);
        }
        if policy.explicit_types {
            let mut s = scenario.clone();
            s.policies[p].explicit_types = false;
            out.push(s);
        }
        if policy.order.is_some_and(|o| o.fract() != 0.0) {
            let mut s = scenario.clone();
            s.policies[p].order = policy.order.map(f64::floor);
            out.push(s);
        }
        for (r, rule) in policy.ingress.iter().enumerate() {
            for candidate in rule_candidates(rule) {
                let mut s = scenario.clone();
                s.policies[p].ingress[r] = candidate;
                out.push(s);
            }
        }
    }
    for (i, set) in scenario.sets.iter().enumerate() {
        if !set.labels.is_empty() {
            let mut s = scenario.clone();
            s.sets[i].labels.clear();
            out.push(s);
        }
        for n in 0..set.nets.len() {
            if set.nets.len() > 1 {
                let mut s = scenario.clone();
                s.sets[i].nets.remove(n);
                out.push(s);
            }
        }
    }
    out
}
