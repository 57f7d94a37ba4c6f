//! A reference evaluator: what SPEC.md ("Semantics") says a set of pre-DNAT
//! policies does with one packet, written from the contract and Calico's
//! documented rules, not from the compiler. The differential kernel test
//! (`tests/kernel_differential.rs`) compares it with what the kernel does
//! after `nodeport-guard apply`.
//!
//! Scope: ingress packets from outside the node, in conntrack state NEW,
//! judged by `preDNAT: true` policies on the implicit host endpoint (there
//! is no HostEndpoint of this node; HostEndpoints of other nodes exist only
//! as addresses rule selectors may match). The packet is seen before DNAT,
//! so the destination is the NodePort, not the port behind it. For one
//! packet the contract says:
//!
//! 1. a failsafe inbound port (protocol and destination port) is allowed
//!    before any policy;
//! 2. the policies whose `selector` matches the endpoint's labels run tier by
//!    tier (tiers by `order`, then name; `default` has order 1000000, and so
//!    has a `Tier` without one, as Calico's client fills it in), and inside a
//!    tier in `order` (lower first, no order last),
//!    ties broken by name;
//! 3. inside a policy the rules run in order: a matching `Log` logs
//!    (`LPI<i>|<policy>`) and goes on; `Allow` allows, `Deny` drops, `Pass`
//!    skips the remaining policies of its tier; each logs
//!    `API…`/`DPI…`/`PPI…` when `logActions` lists it;
//! 4. nothing decided: allowed (a pre-DNAT tier has no end-of-tier action,
//!    whatever its `defaultAction`, and the implicit endpoint carries the
//!    allow-all profile).
//!
//! A rule exists in a family only if `ipVersion` allows it, its protocol
//! exists there (ICMP only in IPv4, ICMPv6 only in IPv6), and each of its
//! four net lists is empty or holds nets of that family. Rule selectors
//! stand for the nets of the GlobalNetworkSets and the `expectedIPs` of
//! the HostEndpoints whose labels they match; the implicit endpoint has
//! no addresses of its own.

#![allow(dead_code)]

pub mod generate;

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::net::IpAddr;

use ipnet::IpNet;

/// Labels of an endpoint or network set.
pub type Labels = BTreeMap<String, String>;

/// This node's name in every scenario.
pub const NODE_NAME: &str = "node1";

/// A Calico selector, as a tree (so the generator and the shrinker can
/// work on it) that prints in Calico's syntax.
#[derive(Clone, Debug, PartialEq)]
pub enum Selector {
    /// `all()`.
    All,
    /// `has(k)`.
    Has(String),
    /// `k == 'v'`.
    Eq(String, String),
    /// `k != 'v'`.
    Ne(String, String),
    /// `k in {'a', 'b'}`.
    In(String, Vec<String>),
    /// `k not in {'a', 'b'}`.
    NotIn(String, Vec<String>),
    /// `k contains 'v'`.
    Contains(String, String),
    /// `k starts with 'v'`.
    StartsWith(String, String),
    /// `k ends with 'v'`.
    EndsWith(String, String),
    /// `!(e)`.
    Not(Box<Selector>),
    /// `(a && b)`.
    And(Box<Selector>, Box<Selector>),
    /// `(a || b)`.
    Or(Box<Selector>, Box<Selector>),
}

impl Selector {
    /// Whether the selector matches `labels` (SPEC: Calico's selector
    /// language; a missing key makes `==`, `in`, `contains`, `starts with`,
    /// `ends with` false and `!=`, `not in` true).
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = |k: &String| labels.get(k);
        match self {
            Selector::All => true,
            Selector::Has(k) => labels.contains_key(k),
            Selector::Eq(k, v) => value(k) == Some(v),
            Selector::Ne(k, v) => value(k) != Some(v),
            Selector::In(k, vs) => value(k).is_some_and(|x| vs.contains(x)),
            Selector::NotIn(k, vs) => !value(k).is_some_and(|x| vs.contains(x)),
            Selector::Contains(k, v) => value(k).is_some_and(|x| x.contains(v.as_str())),
            Selector::StartsWith(k, v) => value(k).is_some_and(|x| x.starts_with(v.as_str())),
            Selector::EndsWith(k, v) => value(k).is_some_and(|x| x.ends_with(v.as_str())),
            Selector::Not(e) => !e.matches(labels),
            Selector::And(a, b) => a.matches(labels) && b.matches(labels),
            Selector::Or(a, b) => a.matches(labels) || b.matches(labels),
        }
    }

    /// Simpler selectors to try while shrinking.
    pub fn simpler(&self) -> Vec<Selector> {
        let mut out = Vec::new();
        if *self != Selector::All {
            out.push(Selector::All);
        }
        match self {
            Selector::Not(e) => out.push((**e).clone()),
            Selector::And(a, b) | Selector::Or(a, b) => {
                out.push((**a).clone());
                out.push((**b).clone());
            }
            _ => {}
        }
        out
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |vs: &[String]| {
            vs.iter()
                .map(|v| format!("'{v}'"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Selector::All => f.write_str("all()"),
            Selector::Has(k) => write!(f, "has({k})"),
            Selector::Eq(k, v) => write!(f, "{k} == '{v}'"),
            Selector::Ne(k, v) => write!(f, "{k} != '{v}'"),
            Selector::In(k, vs) => write!(f, "{k} in {{{}}}", set(vs)),
            Selector::NotIn(k, vs) => write!(f, "{k} not in {{{}}}", set(vs)),
            Selector::Contains(k, v) => write!(f, "{k} contains '{v}'"),
            Selector::StartsWith(k, v) => write!(f, "{k} starts with '{v}'"),
            Selector::EndsWith(k, v) => write!(f, "{k} ends with '{v}'"),
            Selector::Not(e) => write!(f, "!({e})"),
            Selector::And(a, b) => write!(f, "({a} && {b})"),
            Selector::Or(a, b) => write!(f, "({a} || {b})"),
        }
    }
}

/// A rule action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// Allow: accept, stop evaluating.
    Allow,
    /// Deny: drop.
    Deny,
    /// Pass: skip the remaining policies.
    Pass,
    /// Log: log and go on.
    Log,
}

impl Action {
    /// As written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "Allow",
            Action::Deny => "Deny",
            Action::Pass => "Pass",
            Action::Log => "Log",
        }
    }

    /// The first letter of Calico's NFLOG prefix.
    pub fn letter(self) -> char {
        match self {
            Action::Allow => 'A',
            Action::Deny => 'D',
            Action::Pass => 'P',
            Action::Log => 'L',
        }
    }
}

/// `protocol` / `notProtocol`: a protocol number, written as Calico's name
/// or as the number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtoSpec {
    /// The IP protocol number.
    pub number: u8,
    /// Written as a number (`6`) rather than a name (`TCP`).
    pub numeric: bool,
}

impl ProtoSpec {
    /// Calico's name for the protocol, if it has one.
    pub fn name(self) -> Option<&'static str> {
        match self.number {
            6 => Some("TCP"),
            17 => Some("UDP"),
            1 => Some("ICMP"),
            58 => Some("ICMPv6"),
            132 => Some("SCTP"),
            136 => Some("UDPLite"),
            _ => None,
        }
    }

    /// Whether rules may give ports with this protocol (TCP, UDP, SCTP).
    pub fn has_ports(self) -> bool {
        matches!(self.number, 6 | 17 | 132)
    }

    /// The only family the protocol exists in (ICMP, ICMPv6).
    pub fn family(self) -> Option<Family> {
        match self.number {
            1 => Some(Family::V4),
            58 => Some(Family::V6),
            _ => None,
        }
    }

    fn yaml(self) -> String {
        match (self.numeric, self.name()) {
            (false, Some(name)) => name.to_owned(),
            _ => self.number.to_string(),
        }
    }
}

/// An IP family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// The family of an address.
    pub fn of(ip: &IpAddr) -> Family {
        if ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }

    /// The family of a network.
    pub fn of_net(net: &IpNet) -> Family {
        match net {
            IpNet::V4(_) => Family::V4,
            IpNet::V6(_) => Family::V6,
        }
    }

    /// `4` or `6`.
    pub fn number(self) -> u8 {
        match self {
            Family::V4 => 4,
            Family::V6 => 6,
        }
    }
}

/// One entry of `ports` / `notPorts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortSpec {
    /// A single port.
    Single(u16),
    /// An inclusive range.
    Range(u16, u16),
}

impl PortSpec {
    /// Whether `port` is this port or in this range.
    pub fn contains(self, port: u16) -> bool {
        match self {
            PortSpec::Single(p) => p == port,
            PortSpec::Range(a, b) => (a..=b).contains(&port),
        }
    }

    fn yaml(self) -> String {
        match self {
            PortSpec::Single(p) => p.to_string(),
            PortSpec::Range(a, b) => format!("\"{a}:{b}\""),
        }
    }
}

/// `source` or `destination` of a rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entity {
    /// `nets`.
    pub nets: Vec<IpNet>,
    /// `notNets`.
    pub not_nets: Vec<IpNet>,
    /// `selector`.
    pub selector: Option<Selector>,
    /// `notSelector`.
    pub not_selector: Option<Selector>,
    /// `ports`.
    pub ports: Vec<PortSpec>,
    /// `notPorts`.
    pub not_ports: Vec<PortSpec>,
}

impl Entity {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Entity::default()
    }
}

/// An ingress rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// `action`.
    pub action: Action,
    /// `protocol`.
    pub protocol: Option<ProtoSpec>,
    /// `notProtocol`.
    pub not_protocol: Option<ProtoSpec>,
    /// `ipVersion`.
    pub ip_version: Option<Family>,
    /// `source`.
    pub source: Entity,
    /// `destination`.
    pub destination: Entity,
}

/// A `preDNAT: true` GlobalNetworkPolicy with ingress rules.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// `metadata.name` (`<tier>.<name>` outside `default`).
    pub name: String,
    /// `spec.tier`.
    pub tier: String,
    /// `order`.
    pub order: Option<f64>,
    /// `selector`.
    pub selector: Selector,
    /// Whether `types: [Ingress]` is written (always written when there is
    /// no rule).
    pub explicit_types: bool,
    /// `ingress`.
    pub ingress: Vec<Rule>,
    /// A `StagedGlobalNetworkPolicy`: judged in a pass of its own before the enforced
    /// policies, logging as `<A|D|P|L>PI<n>|staged:<name>` (Deny and Log always), deciding
    /// nothing.
    pub staged: bool,
}

/// A Tier.
#[derive(Clone, Debug, PartialEq)]
pub struct Tier {
    /// `metadata.name`.
    pub name: String,
    /// `order`, left out of the file when `None` (Calico then gives it 1000000).
    pub order: Option<f64>,
    /// `defaultAction: Pass` (else `Deny`); pre-DNAT tiers have no end-of-tier action either
    /// way.
    pub pass: bool,
}

/// The tier policies without `spec.tier` are in.
pub const DEFAULT_TIER: &str = "default";

/// A GlobalNetworkSet.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkSet {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Labels,
    /// Nets, either family.
    pub nets: Vec<IpNet>,
}

/// A HostEndpoint of another node: not enforced here, but rule selectors
/// match its `expectedIPs`.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteEndpoint {
    /// Name.
    pub name: String,
    /// `spec.node` (never this node).
    pub node: String,
    /// Labels.
    pub labels: Labels,
    /// `expectedIPs`.
    pub expected_ips: Vec<IpAddr>,
}

/// What of the config file matters to the evaluator.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `logActions` (Allow, Deny, Pass).
    pub log_actions: Vec<Action>,
    /// `failsafeInbound` as `(protocol number, port)`; `None` is the default
    /// list.
    pub failsafe_inbound: Option<Vec<(u8, u16)>>,
    /// `hostLabels`.
    pub host_labels: Labels,
    /// `earlyDrop`: where a denied TCP SYN is dropped (raw or mangle). The evaluator ignores
    /// it: the contract is that verdicts and logs are the same either way.
    pub early_drop: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            log_actions: vec![Action::Deny],
            failsafe_inbound: None,
            host_labels: Labels::new(),
            early_drop: true,
        }
    }
}

/// The default `failsafeInbound` of SPEC.md.
pub const DEFAULT_FAILSAFE_INBOUND: [(u8, u16); 9] = [
    (6, 22),
    (17, 68),
    (6, 179),
    (6, 2379),
    (6, 2380),
    (6, 5473),
    (6, 6443),
    (6, 6666),
    (6, 6667),
];

impl Config {
    /// The failsafe inbound ports in force.
    pub fn failsafe(&self) -> Vec<(u8, u16)> {
        self.failsafe_inbound
            .clone()
            .unwrap_or_else(|| DEFAULT_FAILSAFE_INBOUND.to_vec())
    }

    /// The config file lines after `nodeName: node1`.
    pub fn yaml(&self) -> String {
        let mut out = String::new();
        let actions: Vec<&str> = self.log_actions.iter().map(|a| a.as_str()).collect();
        let _ = writeln!(out, "logActions: [{}]", actions.join(", "));
        if let Some(list) = &self.failsafe_inbound {
            let entries: Vec<String> = list
                .iter()
                .map(|(proto, port)| {
                    let name = if *proto == 17 { "udp" } else { "tcp" };
                    format!("{{protocol: {name}, port: {port}}}")
                })
                .collect();
            let _ = writeln!(out, "failsafeInbound: [{}]", entries.join(", "));
        }
        if !self.host_labels.is_empty() {
            let _ = writeln!(out, "hostLabels: {}", labels_yaml(&self.host_labels));
        }
        if !self.early_drop {
            let _ = writeln!(out, "earlyDrop: false");
        }
        out
    }
}

/// A whole input: config and policy files.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scenario {
    /// The config.
    pub config: Config,
    /// Tiers besides `default`.
    pub tiers: Vec<Tier>,
    /// Policies.
    pub policies: Vec<Policy>,
    /// Network sets.
    pub sets: Vec<NetworkSet>,
    /// Host endpoints of other nodes.
    pub endpoints: Vec<RemoteEndpoint>,
}

/// One packet from outside, in conntrack state NEW, before DNAT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Source address.
    pub src: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination address (one of the node's).
    pub dst: IpAddr,
    /// Destination port (the NodePort, before DNAT).
    pub dport: u16,
    /// 6 (TCP) or 17 (UDP).
    pub proto: u8,
}

impl Packet {
    /// The packet's family.
    pub fn family(&self) -> Family {
        Family::of(&self.src)
    }
}

impl fmt::Display for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = if self.proto == 17 { "udp" } else { "tcp" };
        write!(
            f,
            "{proto} {} -> {}",
            std::net::SocketAddr::new(self.src, self.sport),
            std::net::SocketAddr::new(self.dst, self.dport)
        )
    }
}

/// What the contract says happens to a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Allowed (reaches the node's stack / the DNAT target) or dropped.
    pub allowed: bool,
    /// NFLOG prefixes logged for the packet, in order.
    pub logs: Vec<String>,
    /// What decided, in words (also used to pick probes that take
    /// different paths).
    pub reason: String,
}

/// The labels of the implicit host endpoint of [`NODE_NAME`].
pub fn node_labels(config: &Config) -> Labels {
    let mut labels = Labels::new();
    labels.insert("kubernetes.io/hostname".into(), NODE_NAME.into());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.extend(config.host_labels.clone());
    labels
}

/// The policies that apply to the implicit endpoint, in evaluation order.
pub fn ordered_policies(scenario: &Scenario) -> Vec<&Policy> {
    let labels = node_labels(&scenario.config);
    let mut policies: Vec<&Policy> = scenario
        .policies
        .iter()
        .filter(|p| p.selector.matches(&labels))
        .collect();
    // A tier without `order` has the default tier's (`DefaultTierFields`).
    let mut tiers: Vec<(&str, f64)> = scenario
        .tiers
        .iter()
        .map(|tier| (tier.name.as_str(), tier.order.unwrap_or(1_000_000.0)))
        .chain(std::iter::once((DEFAULT_TIER, 1_000_000.0)))
        .collect();
    tiers.sort_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
    });
    let rank = |p: &Policy| tiers.iter().position(|(name, _)| *name == p.tier);
    let order_key = |order: Option<f64>| order.unwrap_or(f64::INFINITY);
    policies.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| {
                order_key(a.order)
                    .partial_cmp(&order_key(b.order))
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
            .then_with(|| a.name.as_bytes().cmp(b.name.as_bytes()))
    });
    policies
}

/// The contract's verdict for `packet`.
pub fn evaluate(scenario: &Scenario, packet: &Packet) -> Verdict {
    if scenario
        .config
        .failsafe()
        .contains(&(packet.proto, packet.dport))
    {
        return Verdict {
            allowed: true,
            logs: Vec::new(),
            reason: format!("failsafe {}/{}", packet.proto, packet.dport),
        };
    }
    let mut logs = Vec::new();
    let policies = ordered_policies(scenario);
    // The staged pass: its verdict is only logged.
    let staged: Vec<&Policy> = policies.iter().copied().filter(|p| p.staged).collect();
    let _ = judge(scenario, &staged, packet, true, &mut logs);
    let enforced: Vec<&Policy> = policies.iter().copied().filter(|p| !p.staged).collect();
    match judge(scenario, &enforced, packet, false, &mut logs) {
        Some((allowed, reason)) => Verdict {
            allowed,
            logs,
            reason,
        },
        None => Verdict {
            allowed: true,
            logs,
            reason: "no policy decided (pre-DNAT has no default deny)".into(),
        },
    }
}

/// Runs `policies` (in evaluation order) on `packet`, appending what they log; the deciding
/// rule's verdict (allowed?) and reason, if one decided. Staged policies log with `staged:`
/// before the name, and their Deny always logs.
fn judge(
    scenario: &Scenario,
    policies: &[&Policy],
    packet: &Packet,
    staged: bool,
    logs: &mut Vec<String>,
) -> Option<(bool, String)> {
    let logged = |action: Action| {
        scenario.config.log_actions.contains(&action) || (staged && action == Action::Deny)
    };
    // The tier a `Pass` ended: its remaining policies are skipped.
    let mut passed: Option<&str> = None;
    for policy in policies {
        if passed == Some(policy.tier.as_str()) {
            continue;
        }
        passed = None;
        let name = if staged {
            format!("staged:{}", policy.name)
        } else {
            policy.name.clone()
        };
        for (index, rule) in policy.ingress.iter().enumerate() {
            if !rule_matches(scenario, rule, packet) {
                continue;
            }
            let prefix = format!("{}PI{index}|{name}", rule.action.letter());
            let reason = format!("{} by rule {index} of `{name}`", rule.action.as_str());
            match rule.action {
                Action::Log => logs.push(prefix),
                Action::Pass => {
                    if logged(rule.action) {
                        logs.push(prefix);
                    }
                    passed = Some(policy.tier.as_str());
                    break;
                }
                Action::Allow | Action::Deny => {
                    if logged(rule.action) {
                        logs.push(prefix);
                    }
                    return Some((rule.action != Action::Deny, reason));
                }
            }
        }
    }
    None
}

/// Whether the rule exists in `family` (see the module docs).
pub fn rule_in_family(rule: &Rule, family: Family) -> bool {
    if rule.ip_version.is_some_and(|v| v != family) {
        return false;
    }
    if rule
        .protocol
        .and_then(ProtoSpec::family)
        .is_some_and(|f| f != family)
    {
        return false;
    }
    [
        &rule.source.nets,
        &rule.source.not_nets,
        &rule.destination.nets,
        &rule.destination.not_nets,
    ]
    .iter()
    .all(|nets| nets.is_empty() || nets.iter().any(|n| Family::of_net(n) == family))
}

/// Whether `rule` matches `packet`.
pub fn rule_matches(scenario: &Scenario, rule: &Rule, packet: &Packet) -> bool {
    let family = packet.family();
    if !rule_in_family(rule, family) {
        return false;
    }
    if rule.protocol.is_some_and(|p| p.number != packet.proto) {
        return false;
    }
    if rule.not_protocol.is_some_and(|p| p.number == packet.proto) {
        return false;
    }
    entity_matches(scenario, &rule.source, packet.src, packet.sport)
        && entity_matches(scenario, &rule.destination, packet.dst, packet.dport)
}

fn in_nets(nets: &[IpNet], ip: IpAddr) -> bool {
    nets.iter().any(|n| n.contains(&ip))
}

/// The addresses a rule selector stands for contain `ip`.
pub fn selected(scenario: &Scenario, selector: &Selector, ip: IpAddr) -> bool {
    scenario
        .sets
        .iter()
        .filter(|s| selector.matches(&s.labels))
        .any(|s| in_nets(&s.nets, ip))
        || scenario
            .endpoints
            .iter()
            .filter(|e| selector.matches(&e.labels))
            .any(|e| e.expected_ips.contains(&ip))
}

fn entity_matches(scenario: &Scenario, entity: &Entity, ip: IpAddr, port: u16) -> bool {
    (entity.nets.is_empty() || in_nets(&entity.nets, ip))
        && !in_nets(&entity.not_nets, ip)
        && entity
            .selector
            .as_ref()
            .is_none_or(|s| selected(scenario, s, ip))
        && !entity
            .not_selector
            .as_ref()
            .is_some_and(|s| selected(scenario, s, ip))
        && (entity.ports.is_empty() || entity.ports.iter().any(|p| p.contains(port)))
        && !entity.not_ports.iter().any(|p| p.contains(port))
}

// ---------------------------------------------------------------------------
// YAML.
// ---------------------------------------------------------------------------

fn quoted(text: &str) -> String {
    format!("\"{text}\"")
}

fn labels_yaml(labels: &Labels) -> String {
    let entries: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{}: {}", quoted(k), quoted(v)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

fn list_yaml<T>(items: &[T], item: impl Fn(&T) -> String) -> String {
    format!(
        "[{}]",
        items.iter().map(item).collect::<Vec<_>>().join(", ")
    )
}

fn entity_yaml(out: &mut String, key: &str, entity: &Entity) {
    if entity.is_empty() {
        return;
    }
    let _ = writeln!(out, "      {key}:");
    let nets = |n: &IpNet| quoted(&n.to_string());
    if !entity.nets.is_empty() {
        let _ = writeln!(out, "        nets: {}", list_yaml(&entity.nets, nets));
    }
    if !entity.not_nets.is_empty() {
        let _ = writeln!(
            out,
            "        notNets: {}",
            list_yaml(&entity.not_nets, nets)
        );
    }
    if let Some(s) = &entity.selector {
        let _ = writeln!(out, "        selector: {}", quoted(&s.to_string()));
    }
    if let Some(s) = &entity.not_selector {
        let _ = writeln!(out, "        notSelector: {}", quoted(&s.to_string()));
    }
    if !entity.ports.is_empty() {
        let _ = writeln!(
            out,
            "        ports: {}",
            list_yaml(&entity.ports, |p| p.yaml())
        );
    }
    if !entity.not_ports.is_empty() {
        let _ = writeln!(
            out,
            "        notPorts: {}",
            list_yaml(&entity.not_ports, |p| p.yaml())
        );
    }
}

impl Policy {
    /// The policy as one YAML document.
    pub fn yaml(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "apiVersion: projectcalico.org/v3\nkind: {}\nmetadata:\n  name: {}\nspec:",
            if self.staged {
                "StagedGlobalNetworkPolicy"
            } else {
                "GlobalNetworkPolicy"
            },
            self.name
        );
        if let Some(order) = self.order {
            if order.fract() == 0.0 {
                let _ = writeln!(out, "  order: {order:.0}");
            } else {
                let _ = writeln!(out, "  order: {order}");
            }
        }
        if self.tier != DEFAULT_TIER {
            let _ = writeln!(out, "  tier: {}", self.tier);
        }
        let _ = writeln!(out, "  preDNAT: true\n  applyOnForward: true");
        let _ = writeln!(out, "  selector: {}", quoted(&self.selector.to_string()));
        if self.explicit_types || self.ingress.is_empty() {
            let _ = writeln!(out, "  types: [Ingress]");
        }
        if self.ingress.is_empty() {
            let _ = writeln!(out, "  ingress: []");
            return out;
        }
        let _ = writeln!(out, "  ingress:");
        for rule in &self.ingress {
            let _ = writeln!(out, "    - action: {}", rule.action.as_str());
            if let Some(p) = rule.protocol {
                let _ = writeln!(out, "      protocol: {}", p.yaml());
            }
            if let Some(p) = rule.not_protocol {
                let _ = writeln!(out, "      notProtocol: {}", p.yaml());
            }
            if let Some(v) = rule.ip_version {
                let _ = writeln!(out, "      ipVersion: {}", v.number());
            }
            entity_yaml(&mut out, "source", &rule.source);
            entity_yaml(&mut out, "destination", &rule.destination);
        }
        out
    }
}

impl Scenario {
    /// Every resource as one multi-document YAML file.
    pub fn policy_yaml(&self) -> String {
        let mut documents: Vec<String> = Vec::new();
        for tier in &self.tiers {
            let order = tier
                .order
                .map(|order| format!("  order: {order:.0}\n"))
                .unwrap_or_default();
            documents.push(format!(
                "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: {}\nspec:\n{order}  defaultAction: {}\n",
                tier.name,
                if tier.pass { "Pass" } else { "Deny" }
            ));
        }
        for set in &self.sets {
            documents.push(format!(
                "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: {}\n  labels: {}\nspec:\n  nets: {}\n",
                set.name,
                labels_yaml(&set.labels),
                list_yaml(&set.nets, |n| quoted(&n.to_string()))
            ));
        }
        for endpoint in &self.endpoints {
            documents.push(format!(
                "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: {}\n  labels: {}\nspec:\n  node: {}\n  interfaceName: eth0\n  expectedIPs: {}\n",
                endpoint.name,
                labels_yaml(&endpoint.labels),
                endpoint.node,
                list_yaml(&endpoint.expected_ips, |ip| quoted(&ip.to_string()))
            ));
        }
        documents.extend(self.policies.iter().map(Policy::yaml));
        documents
            .iter()
            .map(|d| format!("---\n{d}"))
            .collect::<String>()
    }
}
