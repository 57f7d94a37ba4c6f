//! The validated policy model: what the policy files mean, with every value parsed and checked.
//!
//! Architecture invariant: a [`Model`] can only be built by `validate`, so every name, label,
//! CIDR, port and selector in it is known to be well-formed and safe to render into kernel
//! input. The model knows nothing about iptables or nftables.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::selector::Selector;
use crate::source::{FileId, Span};

/// Where a resource or rule was written, for warnings that point back at the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Origin {
    /// The file it was read from (see [`FileId`]).
    pub file: FileId,
    /// The span in that file.
    pub span: Span,
}

/// Labels of an endpoint or network set.
pub type Labels = BTreeMap<String, String>;

/// Every resource of a valid policy set.
///
/// Its fields are private and it has no public constructor: outside the crate a `Model` comes
/// only from `validate::validate`, and inside it only `validate` calls `Model::from_checked`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Model {
    /// Tiers in evaluation order (by `order`, then by name), the built-in ones among them.
    tiers: Vec<Tier>,
    /// Policies in evaluation order: tier by tier, and in a tier by `order` (none last), then by
    /// name.
    policies: Vec<Arc<Policy>>,
    /// Network sets, sorted by name.
    network_sets: Vec<Arc<NetworkSet>>,
    /// Host endpoints of every node, sorted by name.
    host_endpoints: Vec<Arc<HostEndpoint>>,
    /// Staged policies (`stagedAction: Set`), in evaluation order like `policies`.
    staged: Vec<Arc<Policy>>,
    /// Staged deletions (`stagedAction: Delete`), sorted by name.
    staged_deletions: Vec<StagedDeletion>,
}

impl Model {
    /// A model of resources `validate` checked, in the order it put them. Only `validate`
    /// calls this (and the unit tests through its test helper): everything else reads models.
    pub(crate) fn from_checked(
        tiers: Vec<Tier>,
        policies: Vec<Arc<Policy>>,
        network_sets: Vec<Arc<NetworkSet>>,
        host_endpoints: Vec<Arc<HostEndpoint>>,
    ) -> Model {
        Model {
            tiers,
            policies,
            network_sets,
            host_endpoints,
            staged: Vec::new(),
            staged_deletions: Vec::new(),
        }
    }

    /// This model with the staged policies `validate` checked (in evaluation order) and the
    /// staged deletions. Only `validate` calls this.
    pub(crate) fn with_staged(
        mut self,
        staged: Vec<Arc<Policy>>,
        staged_deletions: Vec<StagedDeletion>,
    ) -> Model {
        self.staged = staged;
        self.staged_deletions = staged_deletions;
        self
    }

    /// Tiers in evaluation order (by `order`, then by name), the built-in ones among them.
    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }

    /// The tier of this name.
    pub fn tier(&self, name: &str) -> Option<&Tier> {
        self.tiers.iter().find(|tier| tier.name == name)
    }

    /// Policies in evaluation order: tier by tier, and in a tier by `order` (none last), then
    /// by name.
    pub fn policies(&self) -> &[Arc<Policy>] {
        &self.policies
    }

    /// Network sets, sorted by name.
    pub fn network_sets(&self) -> &[Arc<NetworkSet>] {
        &self.network_sets
    }

    /// Host endpoints of every node, sorted by name.
    pub fn host_endpoints(&self) -> &[Arc<HostEndpoint>] {
        &self.host_endpoints
    }

    /// Staged policies (`StagedGlobalNetworkPolicy` with `stagedAction: Set`), in evaluation
    /// order like [`Model::policies`]. They never decide a packet's fate; they only log.
    pub fn staged_policies(&self) -> &[Arc<Policy>] {
        &self.staged
    }

    /// Staged deletions (`stagedAction: Delete`), sorted by name: nothing to evaluate.
    pub fn staged_deletions(&self) -> &[StagedDeletion] {
        &self.staged_deletions
    }

    /// Whether the policy set holds no policy at all, enforced or staged.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty() && self.staged.is_empty() && self.staged_deletions.is_empty()
    }

    /// Whether it enforces nothing: no policy but staged ones, which never change a verdict
    /// (the daemon's `allowEmpty` guard).
    pub fn enforces_nothing(&self) -> bool {
        self.policies.is_empty()
    }
}

/// An IP family.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum IpFamily {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// Both families, IPv4 first.
    pub const BOTH: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

    /// The family of an address.
    pub fn of_addr(addr: &IpAddr) -> IpFamily {
        match addr {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    /// The family of a network.
    pub fn of_net(net: &IpNet) -> IpFamily {
        match net {
            IpNet::V4(_) => IpFamily::V4,
            IpNet::V6(_) => IpFamily::V6,
        }
    }

    /// `4` or `6`.
    pub fn number(self) -> u8 {
        match self {
            IpFamily::V4 => 4,
            IpFamily::V6 => 6,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        })
    }
}

/// Where a policy runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum PolicyKind {
    /// Normal policy: filter `INPUT`/`OUTPUT` (and `FORWARD` with `applyOnForward`), default
    /// deny at the end.
    Normal,
    /// `preDNAT: true`: mangle `PREROUTING`, ingress only, no default deny.
    PreDnat,
    /// `doNotTrack: true`: raw table, allowed packets skip connection tracking.
    Untracked,
}

/// Traffic direction relative to the host endpoint.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Arriving at the endpoint.
    Ingress,
    /// Leaving the endpoint.
    Egress,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        })
    }
}

/// A `GlobalNetworkPolicy`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    /// The policy's name (an RFC 1123 subdomain).
    pub name: String,
    /// The tier it runs in (`default` unless `spec.tier` says otherwise).
    pub tier: String,
    /// Where `spec.tier` was written, if it was.
    pub tier_origin: Option<Origin>,
    /// `order`; `None` runs after every ordered policy.
    #[serde(with = "exact_float::optional")]
    pub order: Option<f64>,
    /// Which host endpoints it applies to.
    pub selector: Selector,
    /// Ingress rules, if the policy's `types` include `Ingress`.
    pub ingress: Option<Vec<Rule>>,
    /// Egress rules, if the policy's `types` include `Egress`.
    pub egress: Option<Vec<Rule>>,
    /// Where it runs.
    pub kind: PolicyKind,
    /// `applyOnForward`.
    pub apply_on_forward: bool,
    /// When it stops counting (`nodeport-guard.io/expires`), if ever.
    pub expires: Option<Expiry>,
    /// Where it was written.
    pub origin: Origin,
}

impl Policy {
    /// The rules of one direction, if the policy governs it.
    pub fn rules(&self, direction: Direction) -> Option<&[Rule]> {
        match direction {
            Direction::Ingress => self.ingress.as_deref(),
            Direction::Egress => self.egress.as_deref(),
        }
    }

    /// Its name in backquotes, and its tier when that is not `default`: "`security.gate`
    /// (tier security)", for warnings.
    pub fn described(&self) -> String {
        if self.tier == DEFAULT_TIER {
            format!("`{}`", self.name)
        } else {
            format!("`{}` (tier {})", self.name, self.tier)
        }
    }
}

/// A `StagedGlobalNetworkPolicy` with `stagedAction: Delete`: it stages the removal of the
/// enforced policy of its name, and has nothing to evaluate.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StagedDeletion {
    /// The policy's name.
    pub name: String,
    /// The tier it was in; its chains are named after it.
    pub tier: String,
    /// When it stops counting (`nodeport-guard.io/expires`), if ever.
    pub expires: Option<Expiry>,
    /// Where it was written.
    pub origin: Origin,
}

/// The annotation that makes a policy, staged policy or network set expire: an RFC 3339 time
/// with an offset, from which on the resource is treated as if no file held it.
pub const EXPIRES_ANNOTATION: &str = "nodeport-guard.io/expires";

/// The annotation `grant` writes with who granted the access.
pub const GRANTED_BY_ANNOTATION: &str = "nodeport-guard.io/granted-by";

/// The annotation `grant` writes with why the access was granted.
pub const REASON_ANNOTATION: &str = "nodeport-guard.io/reason";

/// When a resource stops counting, and what its other grant annotations say.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Expiry {
    /// The instant from which on the resource is left out.
    #[serde(with = "timestamp_text")]
    pub at: jiff::Timestamp,
    /// Where the annotation's value was written.
    pub origin: Origin,
    /// `nodeport-guard.io/granted-by`, if written.
    pub granted_by: Option<String>,
    /// `nodeport-guard.io/reason`, if written.
    pub reason: Option<String>,
}

impl Expiry {
    /// Whether the resource no longer counts at `now` (the instant itself included).
    pub fn has_passed(&self, now: jiff::Timestamp) -> bool {
        self.at <= now
    }
}

/// The tier every policy without `spec.tier` is in; it always exists.
pub const DEFAULT_TIER: &str = "default";

/// Calico's order of the `default` tier, and of a `Tier` written without `order` (v3.29 on,
/// `libcalico-go/lib/resources/tier.go` `DefaultTierFields`).
pub const DEFAULT_TIER_ORDER: f64 = 1_000_000.0;

/// The tiers Calico v3.30 creates in every cluster (`clientv3` `EnsureInitialized`): name,
/// order (which a `Tier` of that name must keep, `validateTier`) and default action.
pub const BUILTIN_TIERS: [(&str, f64, TierAction); 3] = [
    ("adminnetworkpolicy", 1_000.0, TierAction::Pass),
    (DEFAULT_TIER, DEFAULT_TIER_ORDER, TierAction::Deny),
    ("baselineadminnetworkpolicy", 10_000_000.0, TierAction::Pass),
];

/// A tier: policies that run as a group, tiers one after the other in `order`. A `Pass` rule
/// ends its policy's tier; a tier ends in its `defaultAction` for normal policy.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tier {
    /// Its name (a DNS label: policies outside `default` are named `<tier>.<name>`).
    pub name: String,
    /// `order` (Calico's 1000000 when the file has none): lower runs first.
    #[serde(with = "exact_float")]
    pub order: f64,
    /// What happens to a packet no policy of the tier decided, for normal policy.
    pub default_action: TierAction,
    /// Where it was written; `None` for a built-in tier no file declares.
    pub origin: Option<Origin>,
}

impl Tier {
    /// The `default` tier as Calico has it when no file declares it.
    pub fn implicit_default() -> Tier {
        Tier::builtin(DEFAULT_TIER).expect("`default` is a built-in tier")
    }

    /// The built-in tier of this name as Calico creates it, if there is one.
    pub fn builtin(name: &str) -> Option<Tier> {
        BUILTIN_TIERS
            .iter()
            .find(|(builtin, _, _)| *builtin == name)
            .map(|&(name, order, default_action)| Tier {
                name: name.to_owned(),
                order,
                default_action,
                origin: None,
            })
    }
}

/// A tier's `defaultAction`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TierAction {
    /// Drop what no policy of the tier allowed or passed (Calico's default).
    Deny,
    /// Go on to the next tier.
    Pass,
}

/// What a rule does when it matches.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Action {
    /// Accept the packet: stop evaluating policy.
    Allow,
    /// Drop the packet.
    Deny,
    /// Skip the remaining policies of the tier.
    Pass,
    /// Log the packet and go on with the next rule.
    Log,
}

impl Action {
    /// The action as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "Allow",
            Action::Deny => "Deny",
            Action::Pass => "Pass",
            Action::Log => "Log",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An IP protocol.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Protocol {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// ICMP (1); IPv4 only.
    Icmp,
    /// ICMPv6 (58); IPv6 only.
    Icmpv6,
    /// SCTP (132).
    Sctp,
    /// UDP-Lite (136).
    UdpLite,
    /// Any other protocol, by number.
    Number(u8),
}

impl Protocol {
    /// The protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Icmp => 1,
            Protocol::Icmpv6 => 58,
            Protocol::Sctp => 132,
            Protocol::UdpLite => 136,
            Protocol::Number(number) => number,
        }
    }

    /// The protocol for a number, using the named variant where there is one.
    pub fn from_number(number: u8) -> Protocol {
        match number {
            6 => Protocol::Tcp,
            17 => Protocol::Udp,
            1 => Protocol::Icmp,
            58 => Protocol::Icmpv6,
            132 => Protocol::Sctp,
            136 => Protocol::UdpLite,
            other => Protocol::Number(other),
        }
    }

    /// Whether rules may match ports of this protocol (Calico: TCP, UDP, SCTP).
    pub fn has_ports(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::Udp | Protocol::Sctp)
    }

    /// The only family the protocol exists in, for ICMP and ICMPv6.
    pub fn family(self) -> Option<IpFamily> {
        match self {
            Protocol::Icmp => Some(IpFamily::V4),
            Protocol::Icmpv6 => Some(IpFamily::V6),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protocol::Tcp => f.write_str("TCP"),
            Protocol::Udp => f.write_str("UDP"),
            Protocol::Icmp => f.write_str("ICMP"),
            Protocol::Icmpv6 => f.write_str("ICMPv6"),
            Protocol::Sctp => f.write_str("SCTP"),
            Protocol::UdpLite => f.write_str("UDPLite"),
            Protocol::Number(number) => write!(f, "{number}"),
        }
    }
}

/// An ICMP type and optional code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct IcmpMatch {
    /// Type, 0–254.
    pub icmp_type: u8,
    /// Code, 0–255.
    pub code: Option<u8>,
}

/// One entry of `ports` / `notPorts`.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Port {
    /// One port number.
    Single(u16),
    /// An inclusive range `first:last`.
    Range(u16, u16),
    /// A named port of a host endpoint.
    Named(String),
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Port::Single(port) => write!(f, "{port}"),
            Port::Range(first, last) => write!(f, "{first}:{last}"),
            Port::Named(name) => f.write_str(name),
        }
    }
}

/// `source` or `destination` of a rule. Every condition present must hold.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EntityRule {
    /// The address is in one of these networks (empty: no condition).
    pub nets: Vec<IpNet>,
    /// The address is in none of these networks.
    pub not_nets: Vec<IpNet>,
    /// The address belongs to a network set or host endpoint these labels select.
    pub selector: Option<Selector>,
    /// The address belongs to no network set or host endpoint these labels select.
    pub not_selector: Option<Selector>,
    /// The port is one of these (empty: no condition).
    pub ports: Vec<Port>,
    /// The port is none of these.
    pub not_ports: Vec<Port>,
}

impl EntityRule {
    /// Whether the entity rule has no condition at all.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
            && self.not_nets.is_empty()
            && self.selector.is_none()
            && self.not_selector.is_none()
            && self.ports.is_empty()
            && self.not_ports.is_empty()
    }
}

/// A policy rule.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Rule {
    /// What happens on a match.
    pub action: Action,
    /// The packet's protocol must be this one.
    pub protocol: Option<Protocol>,
    /// The packet's protocol must not be this one.
    pub not_protocol: Option<Protocol>,
    /// ICMP type/code to match.
    pub icmp: Option<IcmpMatch>,
    /// ICMP type/code not to match.
    pub not_icmp: Option<IcmpMatch>,
    /// The only family the rule applies to, if limited.
    pub ip_version: Option<IpFamily>,
    /// Conditions on the source.
    pub source: EntityRule,
    /// Conditions on the destination.
    pub destination: EntityRule,
    /// Rule annotations, rendered as comments.
    pub annotations: BTreeMap<String, String>,
    /// Where it was written.
    pub origin: Origin,
}

impl Rule {
    /// The families this rule can apply to, from `ipVersion`, its nets and its protocol.
    pub fn families(&self) -> Vec<IpFamily> {
        IpFamily::BOTH
            .into_iter()
            .filter(|family| self.applies_to(*family))
            .collect()
    }

    /// Whether `other` matches the same packets with the same action: every field but where
    /// the rule was written and its annotations (an edit above a rule moves its origin, and
    /// that changes no verdict).
    pub fn decides_like(&self, other: &Rule) -> bool {
        /// Every field but the two that decide nothing (named, so that a new field must be
        /// placed on one side or the other).
        #[allow(clippy::type_complexity)]
        fn deciding(
            rule: &Rule,
        ) -> (
            &Action,
            &Option<Protocol>,
            &Option<Protocol>,
            &Option<IcmpMatch>,
            &Option<IcmpMatch>,
            &Option<IpFamily>,
            &EntityRule,
            &EntityRule,
        ) {
            let Rule {
                action,
                protocol,
                not_protocol,
                icmp,
                not_icmp,
                ip_version,
                source,
                destination,
                annotations: _,
                origin: _,
            } = rule;
            (
                action,
                protocol,
                not_protocol,
                icmp,
                not_icmp,
                ip_version,
                source,
                destination,
            )
        }
        deciding(self) == deciding(other)
    }

    /// Whether this rule can apply to `family` (see [`Rule::families`]), without allocating:
    /// the tracer asks it for every rule of every packet it follows.
    pub fn applies_to(&self, family: IpFamily) -> bool {
        self.ip_version.is_none_or(|wanted| wanted == family)
            && self
                .protocol
                .and_then(Protocol::family)
                .is_none_or(|wanted| wanted == family)
            && self
                .source
                .nets
                .iter()
                .chain(&self.source.not_nets)
                .chain(&self.destination.nets)
                .chain(&self.destination.not_nets)
                .all(|net| IpFamily::of_net(net) == family)
    }
}

/// A `GlobalNetworkSet`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct NetworkSet {
    /// `metadata.name`; the set's ipsets are named after it.
    pub name: String,
    /// Labels rule selectors match.
    pub labels: Labels,
    /// The networks in the set (single addresses as /32 or /128).
    pub nets: Vec<IpNet>,
    /// When it stops counting (`nodeport-guard.io/expires`), if ever.
    pub expires: Option<Expiry>,
    /// Where it was written.
    pub origin: Origin,
}

/// The interface a host endpoint stands for.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum EndpointInterface {
    /// `interfaceName: "*"`: every interface of the host.
    All,
    /// One named interface.
    Named(String),
    /// No interface name: the interface that holds one of `expectedIPs`.
    ByAddress,
}

/// A named port of a host endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct NamedPort {
    /// Name rules refer to.
    pub name: String,
    /// Port number.
    pub port: u16,
    /// TCP, UDP or SCTP.
    pub protocol: Protocol,
}

/// A `HostEndpoint`, explicit or the implicit one of this host.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct HostEndpoint {
    /// Name (`<node>-implicit` for the implicit endpoint).
    pub name: String,
    /// Labels policy selectors match.
    pub labels: Labels,
    /// The node it belongs to.
    pub node: String,
    /// Which interface(s) it stands for.
    pub interface: EndpointInterface,
    /// Its addresses, which rule selectors match.
    pub expected_ips: Vec<IpAddr>,
    /// Named ports.
    pub ports: Vec<NamedPort>,
    /// Whether it carries Calico's allow-all profile (`projectcalico-default-allow`): traffic no
    /// policy decided is allowed instead of dropped.
    pub default_allow: bool,
    /// Where it was written; `None` for the implicit endpoint.
    pub origin: Option<Origin>,
}

/// A timestamp as its RFC 3339 text, for the command line's cache of validated files.
mod timestamp_text {
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        at: &jiff::Timestamp,
        out: S,
    ) -> Result<S::Ok, S::Error> {
        out.collect_str(at)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        input: D,
    ) -> Result<jiff::Timestamp, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(input)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A float as its bits, so that it reads back exactly whatever the JSON reader rounds.
mod exact_float {
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &f64, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_u64(value.to_bits())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<f64, D::Error> {
        u64::deserialize(input).map(f64::from_bits)
    }

    pub(super) mod optional {
        use serde::{Deserialize as _, Deserializer, Serializer};

        #[allow(clippy::ref_option)] // serde's `with` hands a reference to the field
        pub(crate) fn serialize<S: Serializer>(
            value: &Option<f64>,
            out: S,
        ) -> Result<S::Ok, S::Error> {
            match value {
                Some(value) => out.serialize_some(&value.to_bits()),
                None => out.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            input: D,
        ) -> Result<Option<f64>, D::Error> {
            Option::<u64>::deserialize(input).map(|bits| bits.map(f64::from_bits))
        }
    }
}
