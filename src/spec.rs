//! The raw mirror of the policy files: what the YAML says, before anything is checked.
//!
//! These types follow Calico's `projectcalico.org/v3` field names exactly. Every value the user
//! wrote is wrapped in [`Sp`] so validation can point at it. Nothing here interprets a value:
//! CIDRs, selectors and ports are still strings; `validate` turns this into the
//! [`model`](crate::model). The same types generate the JSON Schema (`nodeport-guard schema`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, IgnoredAny, Visitor};
use serde::{Deserialize, Serialize};

use crate::source::Span;

/// A value together with the byte span it was written at.
#[derive(Clone, Debug)]
pub struct Sp<T> {
    pub value: T,
    /// Where it stands in its document, relative to the start of the file.
    pub span: Span,
}

impl<T> Sp<T> {
    /// Wraps `value` found at `span`.
    pub fn new(value: T, span: Span) -> Self {
        Sp { value, span }
    }

    /// Moves the span by `offset` bytes (documents are parsed one at a time; this turns a
    /// document-relative span into a file-relative one).
    pub fn shifted(mut self, offset: usize) -> Self {
        self.span.start += offset;
        self.span.end += offset;
        self
    }
}

impl<T: PartialEq> PartialEq for Sp<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}
impl<T: Eq> Eq for Sp<T> {}
impl<T: PartialOrd> PartialOrd for Sp<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.value.partial_cmp(&other.value)
    }
}
impl<T: Ord> Ord for Sp<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.value.cmp(&other.value)
    }
}

/// Converts a location reported by the YAML parser into a byte span.
pub(crate) fn span_of(location: &serde_saphyr::Location) -> Span {
    let span = location.span();
    let start = span.byte_offset().unwrap_or(span.offset()) as usize;
    let len = span.byte_len().unwrap_or(span.len()) as usize;
    Span::new(start, len)
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Sp<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<T>::deserialize(deserializer)?;
        Ok(Sp {
            span: span_of(&spanned.referenced),
            value: spanned.value,
        })
    }
}

impl<T: Serialize> Serialize for Sp<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

impl<T: JsonSchema> JsonSchema for Sp<T> {
    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }
    fn schema_id() -> Cow<'static, str> {
        T::schema_id()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }
    fn inline_schema() -> bool {
        T::inline_schema()
    }
}

/// A field that exists in Calico but makes no sense for host endpoints. It is accepted by the
/// parser only so that validation can say why it is rejected, and it is left out of the schema.
pub type Rejected = Option<Sp<IgnoredAny>>;

/// `metadata` of a resource.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "Metadata")]
pub struct RawMetadata {
    /// The resource's name: an RFC 1123 subdomain (lowercase letters, digits, `-`, `.`).
    pub name: Option<Sp<String>>,
    /// Not allowed: these resources are cluster-wide.
    #[schemars(skip)]
    #[serde(skip_serializing)]
    pub namespace: Option<Sp<String>>,
    /// Labels that selectors match.
    pub labels: Option<Sp<BTreeMap<Sp<String>, Sp<String>>>>,
    /// Free-form annotations; they do not change behaviour.
    pub annotations: Option<Sp<BTreeMap<Sp<String>, Sp<String>>>>,
    /// Kept by Kubernetes-style tooling; ignored.
    pub resource_version: Option<Sp<String>>,
    /// Kept by Kubernetes-style tooling; ignored.
    pub uid: Option<Sp<String>>,
    /// Kept by Kubernetes-style tooling; ignored.
    pub creation_timestamp: Option<Sp<String>>,
    /// Kept by Kubernetes-style tooling; ignored.
    pub generation: Option<Sp<i64>>,
}

/// `spec` of a `GlobalNetworkPolicy`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "GlobalNetworkPolicySpec")]
pub struct RawPolicySpec {
    /// The tier the policy runs in (a `Tier` of the policy files, or `default`).
    pub tier: Option<Sp<String>>,
    /// Lower orders run first; a policy without an order runs last.
    pub order: Option<Sp<f64>>,
    /// The host endpoints this policy applies to (Calico selector); empty means `all()`.
    pub selector: Option<Sp<String>>,
    /// `Ingress`, `Egress` or both; by default from the presence of ingress/egress rules.
    pub types: Option<Sp<Vec<Sp<String>>>>,
    /// Rules for traffic arriving at the host endpoint, in order.
    pub ingress: Option<Sp<Vec<Sp<RawRule>>>>,
    /// Rules for traffic leaving the host endpoint, in order.
    pub egress: Option<Sp<Vec<Sp<RawRule>>>>,
    /// Run in mangle PREROUTING, before DNAT, so NodePorts are seen as written.
    #[serde(rename = "preDNAT")]
    pub pre_dnat: Option<Sp<bool>>,
    /// Also apply to traffic forwarded through the host.
    pub apply_on_forward: Option<Sp<bool>>,
    /// Run in the raw table and exempt allowed packets from connection tracking.
    pub do_not_track: Option<Sp<bool>>,
    /// Calico performance hints; accepted and ignored.
    pub performance_hints: Option<Sp<Vec<Sp<String>>>>,
    /// `StagedGlobalNetworkPolicy` only: `Set` (the default) stages this spec, `Delete` stages
    /// the policy's removal. (The schema lists it for the staged kind only.)
    #[schemars(skip)]
    pub staged_action: Option<Sp<String>>,
    /// Workload only: rejected.
    #[schemars(skip)]
    #[serde(skip_serializing)]
    pub namespace_selector: Rejected,
    /// Workload only: rejected.
    #[schemars(skip)]
    #[serde(skip_serializing)]
    pub service_account_selector: Rejected,
}

/// The spec of a `Tier`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "TierSpec")]
pub struct RawTierSpec {
    /// Lower orders run first; a tier without one has 1000000, as `default`; ties run by name.
    pub order: Option<Sp<f64>>,
    /// What happens to a packet no policy of the tier decided: `Deny` (the default) or `Pass`
    /// (on to the next tier). Only normal policy has an end-of-tier action.
    pub default_action: Option<Sp<String>>,
}

/// One rule of a policy.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "Rule")]
pub struct RawRule {
    /// `Allow`, `Deny`, `Pass` or `Log`.
    pub action: Option<Sp<String>>,
    /// `TCP`, `UDP`, `ICMP`, `ICMPv6`, `SCTP`, `UDPLite` or a number 1–255.
    pub protocol: Option<Sp<RawProtocol>>,
    /// Match every protocol but this one.
    pub not_protocol: Option<Sp<RawProtocol>>,
    /// ICMP type and code to match (needs `protocol: ICMP` or `ICMPv6`).
    pub icmp: Option<Sp<RawIcmp>>,
    /// ICMP type and code not to match.
    #[serde(rename = "notICMP")]
    pub not_icmp: Option<Sp<RawIcmp>>,
    /// 4 or 6: limit the rule to one IP family.
    pub ip_version: Option<Sp<i64>>,
    /// Conditions on the packet's source.
    pub source: Option<Sp<RawEntityRule>>,
    /// Conditions on the packet's destination.
    pub destination: Option<Sp<RawEntityRule>>,
    /// Annotations of the rule; rendered as rule comments.
    pub metadata: Option<Sp<RawRuleMetadata>>,
    /// Application-layer policy for workloads: rejected.
    #[schemars(skip)]
    #[serde(skip_serializing)]
    pub http: Rejected,
}

/// `metadata` of a rule.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "RuleMetadata")]
pub struct RawRuleMetadata {
    /// Free-form annotations, shown in rule comments.
    pub annotations: Option<Sp<BTreeMap<Sp<String>, Sp<String>>>>,
}

/// `source` or `destination` of a rule.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "EntityRule")]
pub struct RawEntityRule {
    /// CIDRs the address must be in (any of them).
    pub nets: Option<Sp<Vec<Sp<String>>>>,
    /// CIDRs the address must not be in.
    pub not_nets: Option<Sp<Vec<Sp<String>>>>,
    /// The address must belong to a GlobalNetworkSet or HostEndpoint (expectedIPs) with these
    /// labels.
    pub selector: Option<Sp<String>>,
    /// The address must not belong to a GlobalNetworkSet or HostEndpoint with these labels.
    pub not_selector: Option<Sp<String>>,
    /// Ports (numbers, `from:to` ranges or named ports) the port must be in.
    pub ports: Option<Sp<Vec<Sp<RawPort>>>>,
    /// Ports the port must not be in.
    pub not_ports: Option<Sp<Vec<Sp<RawPort>>>>,
    /// Workload only: rejected.
    #[schemars(skip)]
    #[serde(skip_serializing)]
    pub namespace_selector: Rejected,
    /// Workload only: rejected.
    #[schemars(skip)]
    #[serde(skip_serializing)]
    pub service_accounts: Rejected,
    /// Workload only: rejected.
    #[schemars(skip)]
    #[serde(skip_serializing)]
    pub services: Rejected,
}

/// `icmp` / `notICMP` of a rule.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "Icmp")]
pub struct RawIcmp {
    /// ICMP type, 0–254.
    #[serde(rename = "type")]
    pub icmp_type: Option<Sp<i64>>,
    /// ICMP code, 0–255; needs a type.
    pub code: Option<Sp<i64>>,
}

/// `spec` of a `GlobalNetworkSet`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "GlobalNetworkSetSpec")]
pub struct RawNetworkSetSpec {
    /// The networks (CIDRs or single addresses) in the set.
    pub nets: Option<Sp<Vec<Sp<String>>>>,
}

/// `spec` of a `HostEndpoint`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "HostEndpointSpec")]
pub struct RawHostEndpointSpec {
    /// The node this endpoint belongs to; only endpoints of this host are enforced here.
    pub node: Option<Sp<String>>,
    /// The interface, or `*` for all interfaces; empty means "the interface holding one of
    /// `expectedIPs`".
    pub interface_name: Option<Sp<String>>,
    /// The endpoint's addresses; rule selectors match them.
    #[serde(rename = "expectedIPs")]
    pub expected_ips: Option<Sp<Vec<Sp<String>>>>,
    /// Named ports that rules may use by name.
    pub ports: Option<Sp<Vec<Sp<RawEndpointPort>>>>,
    /// Profiles; only `projectcalico-default-allow` (allow everything) is known.
    pub profiles: Option<Sp<Vec<Sp<String>>>>,
}

/// A named port of a host endpoint.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "EndpointPort")]
pub struct RawEndpointPort {
    /// The name rules use.
    pub name: Option<Sp<String>>,
    /// The port number, 1–65535.
    pub port: Option<Sp<i64>>,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: Option<Sp<RawProtocol>>,
}

/// A protocol as written: a name or a number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum RawProtocol {
    /// A number, or a string of digits.
    Number(i64),
    /// Anything else, kept as written.
    Name(String),
}

impl<'de> Deserialize<'de> for RawProtocol {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ProtocolVisitor;
        impl Visitor<'_> for ProtocolVisitor {
            type Value = RawProtocol;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a protocol name such as `TCP` or a protocol number")
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawProtocol, E> {
                Ok(RawProtocol::Number(value))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawProtocol, E> {
                Ok(RawProtocol::Number(
                    i64::try_from(value).unwrap_or(i64::MAX),
                ))
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<RawProtocol, E> {
                Ok(match value.parse::<i64>() {
                    Ok(number) if value.bytes().all(|b| b.is_ascii_digit()) => {
                        RawProtocol::Number(number)
                    }
                    _ => RawProtocol::Name(value.to_owned()),
                })
            }
        }
        deserializer.deserialize_any(ProtocolVisitor)
    }
}

impl JsonSchema for RawProtocol {
    fn schema_name() -> Cow<'static, str> {
        "Protocol".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A protocol name (exact case) or number 1-255.",
            "oneOf": [
                {"type": "string", "enum": ["TCP", "UDP", "ICMP", "ICMPv6", "SCTP", "UDPLite"]},
                {"type": "integer", "minimum": 1, "maximum": 255}
            ]
        })
    }
}

/// A port as written: a number, a `from:to` range, or a name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum RawPort {
    /// A YAML number.
    Number(i64),
    /// A string: digits, `from:to`, or a named port.
    Text(String),
}

impl<'de> Deserialize<'de> for RawPort {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PortVisitor;
        impl Visitor<'_> for PortVisitor {
            type Value = RawPort;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a port number, a `from:to` range or a port name")
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawPort, E> {
                Ok(RawPort::Number(value))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawPort, E> {
                Ok(RawPort::Number(i64::try_from(value).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<RawPort, E> {
                Ok(RawPort::Text(value.to_owned()))
            }
        }
        deserializer.deserialize_any(PortVisitor)
    }
}

impl JsonSchema for RawPort {
    fn schema_name() -> Cow<'static, str> {
        "Port".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A port number 1-65535, a range `from:to`, or a named port of a HostEndpoint.",
            "oneOf": [
                {"type": "integer", "minimum": 1, "maximum": 65535},
                {"type": "string", "pattern": "^([0-9]{1,5}(:[0-9]{1,5})?|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$"}
            ]
        })
    }
}

/// The kinds of resource a policy file may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `GlobalNetworkPolicy`.
    GlobalNetworkPolicy,
    /// `GlobalNetworkSet`.
    GlobalNetworkSet,
    /// `HostEndpoint`.
    HostEndpoint,
    /// `GlobalNetworkPolicyList`.
    GlobalNetworkPolicyList,
    /// `StagedGlobalNetworkPolicy`: a policy that only logs what it would do.
    StagedGlobalNetworkPolicy,
    /// `StagedGlobalNetworkPolicyList`.
    StagedGlobalNetworkPolicyList,
    /// `GlobalNetworkSetList`.
    GlobalNetworkSetList,
    /// `HostEndpointList`.
    HostEndpointList,
    /// `Tier`.
    Tier,
    /// `TierList`.
    TierList,
    /// `List`, with items of any kind.
    List,
}

impl Kind {
    /// Every kind, in the order they are listed in messages.
    pub const ALL: [Kind; 11] = [
        Kind::GlobalNetworkPolicy,
        Kind::StagedGlobalNetworkPolicy,
        Kind::GlobalNetworkSet,
        Kind::HostEndpoint,
        Kind::Tier,
        Kind::GlobalNetworkPolicyList,
        Kind::StagedGlobalNetworkPolicyList,
        Kind::GlobalNetworkSetList,
        Kind::HostEndpointList,
        Kind::TierList,
        Kind::List,
    ];

    /// The kind as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::GlobalNetworkPolicy => "GlobalNetworkPolicy",
            Kind::GlobalNetworkSet => "GlobalNetworkSet",
            Kind::HostEndpoint => "HostEndpoint",
            Kind::GlobalNetworkPolicyList => "GlobalNetworkPolicyList",
            Kind::StagedGlobalNetworkPolicy => "StagedGlobalNetworkPolicy",
            Kind::StagedGlobalNetworkPolicyList => "StagedGlobalNetworkPolicyList",
            Kind::GlobalNetworkSetList => "GlobalNetworkSetList",
            Kind::HostEndpointList => "HostEndpointList",
            Kind::Tier => "Tier",
            Kind::TierList => "TierList",
            Kind::List => "List",
        }
    }

    /// Parses a kind as written in YAML (exact case).
    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// For a list kind, the kind of its items (`None` for `List`, whose items may be anything);
    /// for a single kind, itself.
    pub fn item_kind(self) -> Option<Kind> {
        match self {
            Kind::GlobalNetworkPolicyList => Some(Kind::GlobalNetworkPolicy),
            Kind::StagedGlobalNetworkPolicyList => Some(Kind::StagedGlobalNetworkPolicy),
            Kind::GlobalNetworkSetList => Some(Kind::GlobalNetworkSet),
            Kind::HostEndpointList => Some(Kind::HostEndpoint),
            Kind::TierList => Some(Kind::Tier),
            Kind::List => None,
            single => Some(single),
        }
    }

    /// Whether this is one of the list kinds.
    pub fn is_list(self) -> bool {
        matches!(
            self,
            Kind::GlobalNetworkPolicyList
                | Kind::StagedGlobalNetworkPolicyList
                | Kind::GlobalNetworkSetList
                | Kind::HostEndpointList
                | Kind::TierList
                | Kind::List
        )
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The only apiVersion accepted.
pub const API_VERSION: &str = "projectcalico.org/v3";

/// The typed `spec` of a resource.
#[derive(Clone, Debug)]
pub enum RawSpec {
    /// A policy's spec (boxed: it is much the largest).
    Policy(Box<RawPolicySpec>),
    /// A network set's spec.
    NetworkSet(RawNetworkSetSpec),
    /// A host endpoint's spec.
    HostEndpoint(RawHostEndpointSpec),
    /// A tier's spec.
    Tier(RawTierSpec),
}

/// One resource as parsed: single resources only (list kinds are flattened by the loader).
///
/// Documents are parsed one at a time, so every span inside a resource (its own, and those of
/// all the [`Sp`] values in it) is relative to the start of its document; [`RawResource::at`]
/// turns one into a span of the file.
#[derive(Clone, Debug)]
pub struct RawResource {
    /// Byte offset of the resource's document in its file.
    pub shift: usize,
    /// Where the resource starts (its first key), relative to its document.
    pub span: Span,
    /// `apiVersion` as written (a list item may leave it out).
    pub api_version: Option<Sp<String>>,
    /// The kind: `GlobalNetworkPolicy`, `GlobalNetworkSet` or `HostEndpoint`.
    pub kind: Sp<Kind>,
    /// `metadata` as written.
    pub metadata: Option<Sp<RawMetadata>>,
    /// `spec` as written, typed by kind.
    pub spec: Option<Sp<RawSpec>>,
}

impl RawResource {
    /// A span inside this resource, made relative to the file.
    pub fn at(&self, span: Span) -> Span {
        Span {
            start: span.start + self.shift,
            end: span.end + self.shift,
        }
    }

    /// The resource's name as written, if any.
    pub fn name(&self) -> Option<&Sp<String>> {
        self.metadata.as_ref()?.value.name.as_ref()
    }
}
