//! Calico's own validator cases, as a corpus: every in-scope `Entry(...)` of
//! `libcalico-go/lib/validator/v3/validator_test.go` (projectcalico/calico) gives Calico's
//! answer here too. A case passes when "no error diagnostics" equals "Calico says valid";
//! warnings do not count. Loading errors count as errors, as calicoctl's decoding errors do.
//!
//! Calico's table validates Go structs, often a bare `Rule`, `EntityRule`, `ICMPFields`,
//! `Protocol` or `HostEndpointSpec`. Each is written here as the YAML a user would put in a
//! policy file, and each table says how its entries become whole files:
//! - a bare rule (and the `ICMPFields`, `Protocol` or `EntityRule` inside one) is the one
//!   ingress rule of a `GlobalNetworkPolicy` named `thing`; an `ICMPFields` sits in a rule with
//!   `protocol: ICMP`;
//! - a `HostEndpointSpec` is the spec of a `HostEndpoint` named `h`;
//! - the generic `ObjectMeta` checks (made upstream on an `IPPool`) are made on a
//!   `GlobalNetworkSet`.
//!
//! Out of scope: workloads, namespaced policy, BGP, IP pools, Felix and kube-controllers
//! configuration, HTTP matches, services, service accounts, `namespaceSelector`; and the one
//! upstream port holding a name and numbers at once, which YAML cannot express.
//!
//! Tiers: the `Tier` entries of the same table as of v3.30.7 (the seed's version, line numbers
//! of that file), the one newer entry that concerns a tier name v3.30 has too, and the cases of
//! `libcalico-go/lib/names/policy_test.go` ("Backend Tiered policy name", "Tiered policy
//! name") that decide which policy names `names.ValidateTieredPolicyName` lets into a tier,
//! which calicoctl checks on every create. Calico's client refuses a policy whose tier does not
//! exist, so a case whose policy is in a tier other than a built-in one comes with that
//! `Tier`. The entries for Kubernetes' `knp.`, `kanp.` and `kbanp.` names are out of scope
//! (they are Kubernetes policies, and a GlobalNetworkPolicy cannot have two dots), as are the
//! newer table's `kube-admin` and `kube-baseline` tiers (v3.32 renamed the admin network
//! policy tiers; in v3.30 those are names like any other).
//!
//! Where we knowingly differ from Calico, the case is in [`KNOWN_DISAGREEMENTS`] with the
//! reason, and a test checks that it still differs.

use super::*;

/// Calico's answer for a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Calico {
    Valid,
    Invalid,
}

use Calico::{Invalid, Valid};

/// One upstream entry: its name exactly as in `Entry("...")`, the file, Calico's answer.
struct Case {
    upstream: &'static str,
    yaml: String,
    calico: Calico,
}

/// Entries that are one rule: (upstream name, the rule as a flow mapping, Calico's answer).
/// [`rule`] makes each the one ingress rule of the policy `thing`.
const RULES: &[(&str, &str, Calico)] = &[
    // (API) Actions.
    ("should accept allow action", "{action: Allow}", Valid),
    ("should accept deny action", "{action: Deny}", Valid),
    ("should accept log action", "{action: Log}", Valid),
    ("should reject unknown action", "{action: unknown}", Invalid),
    (
        "should reject unknown action",
        "{action: allowfoo}",
        Invalid,
    ),
    ("should reject rule with no action", "{}", Invalid),
    (
        "should accept IP version 4",
        "{action: Allow, ipVersion: 4}",
        Valid,
    ),
    (
        "should accept IP version 6",
        "{action: Allow, ipVersion: 6}",
        Valid,
    ),
    (
        "should reject IP version 0",
        "{action: Allow, ipVersion: 0}",
        Invalid,
    ),
    (
        "should accept protocol TCP",
        "{action: Allow, protocol: TCP}",
        Valid,
    ),
    (
        "should accept protocol UDP",
        "{action: Allow, protocol: UDP}",
        Valid,
    ),
    (
        "should accept protocol ICMP",
        "{action: Allow, protocol: ICMP}",
        Valid,
    ),
    (
        "should accept protocol ICMPv6",
        "{action: Allow, protocol: ICMPv6}",
        Valid,
    ),
    (
        "should accept protocol SCTP",
        "{action: Allow, protocol: SCTP}",
        Valid,
    ),
    (
        "should accept protocol UDPLite",
        "{action: Allow, protocol: UDPLite}",
        Valid,
    ),
    (
        "should accept protocol 1 as int",
        "{action: Allow, protocol: 1}",
        Valid,
    ),
    (
        "should accept protocol 255 as int",
        "{action: Allow, protocol: 255}",
        Valid,
    ),
    (
        "should accept protocol 255 as string",
        "{action: Allow, protocol: '255'}",
        Valid,
    ),
    (
        "should accept protocol 1 as string",
        "{action: Allow, protocol: '1'}",
        Valid,
    ),
    (
        "should reject protocol 0 as int",
        "{action: Allow, protocol: 0}",
        Invalid,
    ),
    (
        "should reject protocol 256 as string",
        "{action: Allow, protocol: '256'}",
        Invalid,
    ),
    (
        "should reject protocol 0 as string",
        "{action: Allow, protocol: '0'}",
        Invalid,
    ),
    (
        "should reject protocol tcpfoo",
        "{action: Allow, protocol: tcpfoo}",
        Invalid,
    ),
    (
        "should reject protocol footcp",
        "{action: Allow, protocol: footcp}",
        Invalid,
    ),
    (
        "should reject protocol tcp",
        "{action: Allow, protocol: tcp}",
        Invalid,
    ),
    (
        "should accept ICMP with no config",
        "{action: Allow, protocol: ICMP, icmp: {}}",
        Valid,
    ),
    (
        "should accept ICMP with type with min value",
        "{action: Allow, protocol: ICMP, icmp: {type: 0}}",
        Valid,
    ),
    (
        "should accept ICMP with type with max value",
        "{action: Allow, protocol: ICMP, icmp: {type: 254}}",
        Valid,
    ),
    (
        "should accept ICMP with type and code with min value",
        "{action: Allow, protocol: ICMP, icmp: {type: 128, code: 0}}",
        Valid,
    ),
    (
        "should accept ICMP with type and code with min value",
        "{action: Allow, protocol: ICMP, icmp: {type: 128, code: 255}}",
        Valid,
    ),
    (
        "should reject ICMP with code and no type",
        "{action: Allow, protocol: ICMP, icmp: {code: 0}}",
        Invalid,
    ),
    (
        "should reject ICMP with type too high",
        "{action: Allow, protocol: ICMP, icmp: {type: 255}}",
        Invalid,
    ),
    (
        "should reject ICMP with code too high",
        "{action: Allow, protocol: ICMP, icmp: {type: 128, code: 256}}",
        Invalid,
    ),
    (
        "should accept valid selector",
        r#"{action: Allow, source: {selector: 'foo == "bar"'}}"#,
        Valid,
    ),
    (
        "should accept valid selector with 'has' and a '/'",
        "{action: Allow, source: {selector: 'has(calico/k8s_ns)'}}",
        Valid,
    ),
    (
        "should accept valid selector with 'has' and two '/'",
        "{action: Allow, source: {selector: 'has(calico/k8s_ns/role)'}}",
        Valid,
    ),
    (
        "should accept valid selector with 'has' and two '/' and '-.'",
        "{action: Allow, source: {selector: 'has(calico/k8s_NS-.1/role)'}}",
        Valid,
    ),
    (
        "should reject invalid selector",
        "{action: Allow, source: {selector: 'thing=hello &'}}",
        Invalid,
    ),
    (
        "should accept Rule with valid annotations",
        "{action: Allow, metadata: {annotations: {foo: bar}}}",
        Valid,
    ),
    (
        "should reject Rule with invalid annotations",
        "{action: Allow, metadata: {annotations: {'...': bar}}}",
        Invalid,
    ),
    (
        "should accept Rule with protocol SCTP and no other config",
        "{action: Allow, protocol: SCTP}",
        Valid,
    ),
    (
        "should accept Rule with source ports and protocol type 6",
        "{action: Allow, protocol: 6, source: {ports: [1]}}",
        Valid,
    ),
    (
        "should accept Rule with source named ports and protocol type 6",
        "{action: Allow, protocol: 6, source: {ports: [foo]}}",
        Valid,
    ),
    (
        "should accept Rule with source named ports and protocol type tcp",
        "{action: Allow, protocol: TCP, source: {ports: [foo]}}",
        Valid,
    ),
    (
        "should accept Rule with source named ports and protocol type udp",
        "{action: Allow, protocol: UDP, source: {ports: [foo]}}",
        Valid,
    ),
    (
        "should accept Rule with empty source ports and protocol type 7",
        "{action: Allow, protocol: 7, source: {ports: []}}",
        Valid,
    ),
    (
        "should accept Rule with source !ports and protocol type 17",
        "{action: Allow, protocol: 17, source: {notPorts: [1]}}",
        Valid,
    ),
    (
        "should accept Rule with empty source !ports and protocol type 100",
        "{action: Allow, protocol: 100, source: {notPorts: []}}",
        Valid,
    ),
    (
        "should accept Rule with dest ports and protocol type tcp",
        "{action: Allow, protocol: TCP, destination: {ports: [1]}}",
        Valid,
    ),
    (
        "should reject Rule with dest ports and no protocol",
        "{action: Allow, destination: {ports: [1]}}",
        Invalid,
    ),
    (
        "should reject Rule with invalid port (port 0)",
        "{action: Allow, protocol: TCP, destination: {notPorts: [0]}}",
        Invalid,
    ),
    // From the "Validator errors" table: MinPort 0, MaxPort 456.
    (
        "should reject Rule with invalid port (name + number)",
        "{action: Allow, protocol: TCP, destination: {notPorts: ['0:456']}}",
        Invalid,
    ),
    (
        "should reject named port Rule with invalid protocol",
        "{action: Allow, protocol: unknown, destination: {notPorts: [foo]}}",
        Invalid,
    ),
    (
        "should accept Rule with empty dest ports and protocol type SCTP",
        "{action: Allow, protocol: SCTP, destination: {ports: []}}",
        Valid,
    ),
    (
        "should accept Rule with empty dest !ports and protocol type ICMPv6",
        "{action: Allow, ipVersion: 6, protocol: ICMPv6, destination: {notPorts: []}}",
        Valid,
    ),
    (
        "should reject Rule with icmp fields and no protocol",
        "{action: Allow, ipVersion: 4, icmp: {type: 0}}",
        Invalid,
    ),
    (
        "should not reject Rule with icmp fields and no ipversion",
        "{action: Allow, protocol: ICMP, icmp: {type: 0}}",
        Valid,
    ),
    (
        "should not reject Rule with icmpv6 fields and no ipversion",
        "{action: Allow, protocol: ICMPv6, icmp: {type: 0}}",
        Valid,
    ),
    (
        "should reject Rule with mismatched ipversion for icmp",
        "{action: Allow, protocol: ICMP, ipVersion: 6}",
        Invalid,
    ),
    (
        "should reject Rule with mismatched ipversion for icmpv6",
        "{action: Allow, protocol: ICMPv6, ipVersion: 4}",
        Invalid,
    ),
    (
        "should allow Rule with correct ipversion for icmp",
        "{action: Allow, ipVersion: 4, protocol: ICMP, icmp: {type: 0}}",
        Valid,
    ),
    (
        "should allow Rule with correct ipversion for icmpv6",
        "{action: Allow, ipVersion: 6, protocol: ICMPv6, icmp: {type: 0}}",
        Valid,
    ),
    (
        "should reject Rule with source ports and protocol type 7",
        "{action: Allow, protocol: 7, source: {ports: [1]}}",
        Invalid,
    ),
    (
        "should reject Rule with source !ports and protocol type 100",
        "{action: Allow, protocol: 100, source: {notPorts: [1]}}",
        Invalid,
    ),
    (
        "should allow Rule with dest ports and protocol type sctp",
        "{action: Allow, protocol: SCTP, destination: {ports: [1]}}",
        Valid,
    ),
    // Upstream's protocol here is the lower-case "icmp", despite the entry's name.
    (
        "should reject Rule with dest !ports and protocol type udp",
        "{action: Allow, ipVersion: 4, protocol: icmp, destination: {notPorts: [1]}}",
        Invalid,
    ),
    (
        "should reject Rule with invalid source ports and protocol type tcp",
        "{action: Allow, protocol: TCP, source: {ports: ['200:100']}}",
        Invalid,
    ),
    (
        "should reject Rule with invalid source !ports and protocol type tcp",
        "{action: Allow, protocol: TCP, source: {notPorts: ['200:100']}}",
        Invalid,
    ),
    (
        "should reject Rule with invalid dest ports and protocol type tcp",
        "{action: Allow, protocol: TCP, destination: {ports: ['200:100']}}",
        Invalid,
    ),
    (
        "should reject Rule with invalid dest !ports and protocol type tcp",
        "{action: Allow, protocol: TCP, destination: {notPorts: ['200:100']}}",
        Invalid,
    ),
    (
        "should reject Rule with one invalid port in the port range (MinPort 0)",
        "{action: Allow, protocol: TCP, destination: {notPorts: ['0:100']}}",
        Invalid,
    ),
    (
        "should reject rule with an IPv6 protocol and an IPVersion=4",
        "{action: Allow, protocol: ICMPv6, ipVersion: 4}",
        Invalid,
    ),
    (
        "should reject rule with an IPv4 protocol and an IPVersion=6",
        "{action: Allow, protocol: ICMP, ipVersion: 6}",
        Invalid,
    ),
    (
        "should reject rule mixed IPv4 (src) and IPv6 (dest)",
        "{action: Allow, protocol: TCP, source: {nets: [1.2.3.0/26]}, destination: {nets: ['aabb:aabb::0000/122']}}",
        Invalid,
    ),
    (
        "should reject rule mixed IPv6 (src) and IPv4 (dest)",
        "{action: Allow, protocol: TCP, source: {nets: ['aabb:aabb::/128']}, destination: {nets: [1.2.0.0/32]}}",
        Invalid,
    ),
    (
        "should reject rule mixed IPv6 version and IPv4 Net",
        "{action: Allow, protocol: TCP, ipVersion: 6, source: {nets: [1.0.0.0/10]}, destination: {nets: [1.2.0.0/32]}}",
        Invalid,
    ),
    (
        "should reject rule mixed IPVersion and Source Net IP version",
        "{action: Allow, protocol: TCP, ipVersion: 6, source: {nets: [1.2.3.4/32]}}",
        Invalid,
    ),
    (
        "should reject rule mixed IPVersion and Dest Net IP version",
        "{action: Allow, protocol: TCP, ipVersion: 4, destination: {nets: ['aabb:aabb::ffff/128']}}",
        Invalid,
    ),
    (
        "net list: should reject rule mixed IPv4 (src) and IPv6 (dest)",
        "{action: Allow, protocol: TCP, source: {nets: [1.2.3.0/26]}, destination: {nets: ['aabb:aabb::0000/122']}}",
        Invalid,
    ),
    (
        "net list: should reject rule mixed IPv6 (src) and IPv4 (dest)",
        "{action: Allow, protocol: TCP, source: {nets: ['aabb:aabb::/128']}, destination: {nets: [1.2.0.0/32]}}",
        Invalid,
    ),
    (
        "net list: should reject rule mixed IPv6 version and IPv4 Net",
        "{action: Allow, protocol: TCP, ipVersion: 6, source: {nets: [1.0.0.0/10]}, destination: {nets: [1.2.0.0/32]}}",
        Invalid,
    ),
    (
        "net list: should reject rule mixed IPv6 version and IPv4 Net",
        "{action: Allow, protocol: TCP, ipVersion: 6, source: {nets: [1.0.0.0/10]}, destination: {notNets: [1.2.0.0/32]}}",
        Invalid,
    ),
    (
        "net list: should reject rule mixed IPVersion and Source Net IP version",
        "{action: Allow, protocol: TCP, ipVersion: 6, source: {nets: [1.2.3.4/32]}}",
        Invalid,
    ),
    (
        "net list: should reject rule mixed IPVersion and Dest Net IP version",
        "{action: Allow, protocol: TCP, ipVersion: 4, destination: {nets: ['aabb:aabb::ffff/128']}}",
        Invalid,
    ),
    // The EntityRule entries: a bare EntityRule upstream, with spaces around `global()`.
    (
        "disallow global() in EntityRule selector field",
        "{action: Allow, source: {selector: '  global()  '}}",
        Invalid,
    ),
    (
        "disallow bad selectors in EntityRule selector field",
        "{action: Allow, source: {selector: 'global() && bad'}}",
        Invalid,
    ),
];

/// Entries that are a whole `GlobalNetworkPolicy`: (upstream name, `metadata.name`, `spec` as
/// a flow mapping, Calico's answer).
const POLICIES: &[(&str, &str, &str, Calico)] = &[
    (
        "disallow name with invalid character",
        "t~!s.h.i.ng",
        "{}",
        Invalid,
    ),
    (
        "disallow name with mixed case characters",
        "tHiNg",
        "{}",
        Invalid,
    ),
    ("allow valid name", "thing", "{}", Valid),
    (
        "disallow k8s policy name",
        "knp.default.thing",
        "{}",
        Invalid,
    ),
    ("disallow name with dot", "t.h.i.ng", "{}", Invalid),
    (
        "should reject GlobalNetworkPolicy with both PreDNAT and DoNotTrack",
        "thing",
        "{preDNAT: true, doNotTrack: true, applyOnForward: true}",
        Invalid,
    ),
    (
        "should accept GlobalNetworkPolicy PreDNAT but not DoNotTrack",
        "thing",
        "{preDNAT: true, applyOnForward: true}",
        Valid,
    ),
    (
        "should accept GlobalNetworkPolicy DoNotTrack but not PreDNAT",
        "thing",
        "{preDNAT: false, doNotTrack: true, applyOnForward: true}",
        Valid,
    ),
    (
        "should reject pre-DNAT GlobalNetworkPolicy egress rules",
        "thing",
        "{preDNAT: true, applyOnForward: true, egress: [{action: Allow}]}",
        Invalid,
    ),
    (
        "should accept pre-DNAT GlobalNetworkPolicy ingress rules",
        "thing",
        "{preDNAT: true, applyOnForward: true, ingress: [{action: Allow}]}",
        Valid,
    ),
    (
        "should accept GlobalNetworkPolicy ApplyOnForward but not PreDNAT",
        "thing",
        "{preDNAT: false, applyOnForward: true}",
        Valid,
    ),
    (
        "should accept GlobalNetworkPolicy ApplyOnForward but not DoNotTrack",
        "thing",
        "{doNotTrack: false, applyOnForward: true}",
        Valid,
    ),
    (
        "should accept GlobalNetworkPolicy ApplyOnForward and PreDNAT",
        "thing",
        "{preDNAT: true, applyOnForward: true}",
        Valid,
    ),
    (
        "should accept GlobalNetworkPolicy ApplyOnForward and DoNotTrack",
        "thing",
        "{doNotTrack: true, applyOnForward: true}",
        Valid,
    ),
    (
        "should accept GlobalNetworkPolicy no ApplyOnForward DoNotTrack PreDNAT",
        "thing",
        "{preDNAT: false, doNotTrack: false, applyOnForward: false}",
        Valid,
    ),
    (
        "should reject GlobalNetworkPolicy PreDNAT but not ApplyOnForward",
        "thing",
        "{preDNAT: true, applyOnForward: false}",
        Invalid,
    ),
    (
        "should reject GlobalNetworkPolicy DoNotTrack but not ApplyOnForward",
        "thing",
        "{doNotTrack: true, applyOnForward: false}",
        Invalid,
    ),
    ("allow missing Types", "thing", "{}", Valid),
    ("allow empty Types", "thing", "{types: []}", Valid),
    ("allow ingress Types", "thing", "{types: [Ingress]}", Valid),
    ("allow egress Types", "thing", "{types: [Egress]}", Valid),
    (
        "allow ingress+egress Types",
        "thing",
        "{types: [Ingress, Egress]}",
        Valid,
    ),
    (
        "disallow repeated egress Types",
        "thing",
        "{types: [Egress, Egress]}",
        Invalid,
    ),
    (
        "disallow unexpected value",
        "thing",
        "{types: [unexpected]}",
        Invalid,
    ),
    (
        "allow Types without ingress when Ingress present (gnp)",
        "thing",
        "{ingress: [{action: Allow}], types: [Egress]}",
        Valid,
    ),
    (
        "allow Types without egress when Egress present (gnp)",
        "thing",
        "{egress: [{action: Allow}], types: [Ingress]}",
        Valid,
    ),
    (
        "allow Types with ingress when Ingress present (gnp)",
        "thing",
        "{ingress: [{action: Allow}], types: [Ingress]}",
        Valid,
    ),
    (
        "allow Types with ingress+egress when Ingress present (gnp)",
        "thing",
        "{ingress: [{action: Allow}], types: [Ingress, Egress]}",
        Valid,
    ),
    (
        "allow Types with egress when Egress present (gnp)",
        "thing",
        "{egress: [{action: Allow}], types: [Egress]}",
        Valid,
    ),
    (
        "allow Types with ingress+egress when Egress present (gnp)",
        "thing",
        "{egress: [{action: Allow}], types: [Ingress, Egress]}",
        Valid,
    ),
    (
        "allow ingress Types with pre-DNAT (gnp)",
        "thing",
        "{preDNAT: true, applyOnForward: true, types: [Ingress]}",
        Valid,
    ),
    (
        "disallow egress Types with pre-DNAT (gnp)",
        "thing",
        "{preDNAT: true, applyOnForward: true, types: [Egress]}",
        Invalid,
    ),
    (
        "disallow ingress+egress Types with pre-DNAT (gnp)",
        "thing",
        "{preDNAT: true, applyOnForward: true, types: [Ingress, Egress]}",
        Invalid,
    ),
    (
        "disallow global() in selector field",
        "thing",
        "{selector: global()}",
        Invalid,
    ),
    (
        "disallow global() in EntityRule selector field",
        "thing",
        "{ingress: [{action: Allow, source: {selector: global()}}]}",
        Invalid,
    ),
];

/// Entries that are a `HostEndpointSpec`: (upstream name, the spec of the host endpoint `h`
/// as a flow mapping, Calico's answer).
const HOST_ENDPOINTS: &[(&str, &str, Calico)] = &[
    (
        "should accept HostEndpointSpec with a port (m)",
        "{interfaceName: eth0, ports: [{name: a-valid-port, protocol: TCP, port: 1234}], node: node01}",
        Valid,
    ),
    (
        "should reject HostEndpointSpec with an unnamed port (m)",
        "{interfaceName: eth0, ports: [{protocol: TCP, port: 1234}], node: node01}",
        Invalid,
    ),
    (
        "should reject HostEndpointSpec with a missing node",
        "{interfaceName: eth0, ports: [{name: a-valid-port, protocol: TCP, port: 1234}]}",
        Invalid,
    ),
    (
        "should accept HostEndpointSpec with name-clashing ports (m)",
        "{interfaceName: eth0, ports: [{name: a-valid-port, protocol: TCP, port: 1234}, {name: a-valid-port, protocol: UDP, port: 5456}], node: node01}",
        Valid,
    ),
    (
        "should accept HostEndpointSpec with interfaceName *",
        "{interfaceName: '*', node: node01}",
        Valid,
    ),
    (
        "should accept host endpoint with interface and node",
        "{interfaceName: eth0, node: node01}",
        Valid,
    ),
    (
        "should accept host endpoint with expected IPs",
        "{expectedIPs: [1.2.3.4, 'aabb:aabb::ffff'], node: node01}",
        Valid,
    ),
    (
        "should accept host endpoint with interface and expected IPs",
        "{interfaceName: eth0, expectedIPs: [1.2.3.4, 'aabb:aabb::ffff'], node: node01}",
        Valid,
    ),
    ("should reject host endpoint with no config", "{}", Invalid),
    (
        "should reject host endpoint with blank interface an no IPs",
        "{interfaceName: '', expectedIPs: [], node: node01}",
        Invalid,
    ),
    (
        "should reject host endpoint with no prefix and dots at the start of the name",
        "{interfaceName: eth0, profiles: [.fun], node: node01}",
        Invalid,
    ),
];

/// Entries that are a `GlobalNetworkSet` (or generic `ObjectMeta` checks): (upstream name,
/// `metadata` and `spec` as flow mappings, Calico's answer). Longer values are in
/// [`generated_cases`].
const NETWORK_SETS: &[(&str, &str, &str, Calico)] = &[
    (
        "should accept GlobalNetworkSetSpec with CIDRs and IPs",
        "{name: s}",
        "{nets: [10.0.0.1, 11.0.0.0/8, 'dead:beef::', 'dead:beef::/96']}",
        Valid,
    ),
    (
        "should reject GlobalNetworkSetSpec with bad CIDR",
        "{name: s}",
        "{nets: [garbage]}",
        Invalid,
    ),
    (
        "should accept GlobalNetworkSet with labels",
        "{name: testset, labels: {a: b}}",
        "{nets: [10.0.0.1]}",
        Valid,
    ),
    (
        "should reject GlobalNetworkSet with reserved labels",
        "{name: testset, labels: {projectcalico.org/namespace: foo}}",
        "{nets: [10.0.0.1]}",
        Invalid,
    ),
    (
        "should reject GlobalNetworkSet with bad name",
        "{name: test$set}",
        "{nets: [10.0.0.1]}",
        Invalid,
    ),
    (
        "should reject invalid labels in metadata (uppercase domain)",
        "{name: pool.name, labels: {ProjectCalico.org/label: value}}",
        "{nets: [1.2.3.0/26]}",
        Invalid,
    ),
    (
        "should accept valid labels in metadata (uppercase name)",
        "{name: pool.name, labels: {projectcalico.org/Label: value}}",
        "{nets: [1.2.3.0/26]}",
        Valid,
    ),
    (
        "should reject invalid annotations in metadata",
        "{name: pool.name, annotations: {projectcalico.org$label: value}}",
        "{nets: [1.2.3.0/26]}",
        Invalid,
    ),
    (
        "should accept valid annotations in metadata (uppercase domain and name)",
        "{name: pool.name, annotations: {ProjectCalico.org/Label: value}}",
        "{nets: [1.2.3.0/26]}",
        Valid,
    ),
];

/// `Tier` entries: (upstream name and where, the tier's name, its `spec` as a flow mapping,
/// Calico's answer).
const TIERS: &[(&str, &str, &str, Calico)] = &[
    // validator_test.go:2550-2614 (v3.30.7).
    ("Tier: valid name", "foo", "{order: 100}", Valid),
    ("Tier: valid name with dash", "fo-o", "{order: 100}", Valid),
    (
        "Tier: disallow dot in name",
        "fo.o",
        "{order: 100}",
        Invalid,
    ),
    (
        "Tier: disallow other chars",
        "t~!s.h.i.ng",
        "{order: 100}",
        Invalid,
    ),
    (
        "Tier: disallow default tier with an invalid order",
        "default",
        "{order: 10}",
        Invalid,
    ),
    (
        "Tier: allow default tier with the predefined order",
        "default",
        "{order: 1000000}",
        Valid,
    ),
    (
        "Tier: disallow adminnetworkpolicy tier with an invalid order",
        "adminnetworkpolicy",
        "{order: 10}",
        Invalid,
    ),
    (
        "Tier: allow adminnetworkpolicy tier with the predefined order",
        "adminnetworkpolicy",
        "{order: 1000}",
        Valid,
    ),
    (
        "Tier: disallow baselineadminnetworkpolicy tier with an invalid order",
        "baselineadminnetworkpolicy",
        "{order: 10}",
        Invalid,
    ),
    (
        "Tier: allow baselineadminnetworkpolicy tier with the predefined order",
        "baselineadminnetworkpolicy",
        "{order: 10000000}",
        Valid,
    ),
    (
        "Tier: allow a tier with a valid order",
        "platform",
        "{order: 100}",
        Valid,
    ),
    // Calico's client fills in a missing order (the default tier's) and default action (Deny)
    // before it validates (`resources.DefaultTierFields`), so a spec without either is valid,
    // and a built-in tier without its order is not.
    (
        "should accept an empty Tier spec (master validator_test.go:4405)",
        "valid-tier",
        "{}",
        Valid,
    ),
    (
        "DefaultTierFields then validateTier: adminnetworkpolicy without an order is 1e6",
        "adminnetworkpolicy",
        "{}",
        Invalid,
    ),
    (
        "DefaultTierFields then validateTier: default without an order is 1e6",
        "default",
        "{}",
        Valid,
    ),
    // The CRD's enum (`+kubebuilder:validation:Enum=Pass;Deny`, and `validate:"oneof=Deny
    // Pass"` on `TierSpec.DefaultAction`).
    (
        "TierSpec.DefaultAction oneof=Deny Pass: Pass",
        "t",
        "{defaultAction: Pass}",
        Valid,
    ),
    (
        "TierSpec.DefaultAction oneof=Deny Pass: Deny",
        "t",
        "{defaultAction: Deny}",
        Valid,
    ),
    (
        "TierSpec.DefaultAction oneof=Deny Pass: Allow",
        "t",
        "{defaultAction: Allow}",
        Invalid,
    ),
    // Newer than v3.30 (v3.32, a CEL rule on `Tier`; master validator_test.go:3146). v3.30 has
    // no such check: see KNOWN_DISAGREEMENTS.
    (
        "Tier: disallow default tier with an invalid default action",
        "default",
        "{order: 1000000, defaultAction: Pass}",
        Invalid,
    ),
];

/// `StagedGlobalNetworkPolicy` entries (validator_test.go:2466-2545, v3.30.7): (upstream name,
/// the policy's name, its spec as a flow mapping, Calico's answer). A spec in tier `eng`
/// comes with that `Tier`.
const STAGED: &[(&str, &str, &str, Calico)] = &[
    (
        "disallow name with invalid character",
        "t~!s.h.i.ng",
        "{stagedAction: Set, selector: 'foo == \"bar\"'}",
        Invalid,
    ),
    (
        "disallow name with mixed case characters",
        "tHiNg",
        "{stagedAction: Set, selector: 'foo == \"bar\"'}",
        Invalid,
    ),
    (
        "allow valid name",
        "thing",
        "{stagedAction: Set, selector: 'foo == \"bar\"'}",
        Valid,
    ),
    (
        "disallow k8s policy name",
        "knp.default.thing",
        "{stagedAction: Set, selector: 'foo == \"bar\"'}",
        Invalid,
    ),
    (
        "disallow name with dot",
        "t.h.i.ng",
        "{stagedAction: Set, selector: 'foo == \"bar\"'}",
        Invalid,
    ),
    (
        "should accept a valid StagedAction value 'Set'",
        "thing",
        "{stagedAction: Set, selector: 'foo == \"bar\"'}",
        Valid,
    ),
    (
        "should accept an unset StagedAction",
        "thing",
        "{selector: 'foo == \"bar\"'}",
        Valid,
    ),
    (
        "should accept a valid StagedAction value 'Delete'",
        "eng.thing",
        "{stagedAction: Delete, tier: eng}",
        Valid,
    ),
    (
        "should reject a valid StagedAction value 'Delete' if any other Spec field is set",
        "thing",
        "{stagedAction: Delete, selector: 'foo == \"bar\"'}",
        Invalid,
    ),
    (
        "should reject a StagedAction value 'Warning'",
        "thing",
        "{stagedAction: Warning, selector: 'foo == \"bar\"'}",
        Invalid,
    ),
    (
        "should accept an empty StagedAction value",
        "thing",
        "{stagedAction: '', selector: 'foo == \"bar\"'}",
        Valid,
    ),
    (
        "should accept an empty selector value when StagedAction is Delete",
        "thing",
        "{stagedAction: Delete}",
        Valid,
    ),
];

/// Which policy names a tier lets in (`names.ValidateTieredPolicyName`, called by calicoctl's
/// client on create; its cases in `libcalico-go/lib/names/policy_test.go`, v3.30.7): (upstream
/// name, the GlobalNetworkPolicy's name, its `spec.tier` or `None`, Calico's answer). Every
/// case declares the tiers `footier` and `baztier`.
const TIERED_NAMES: &[(&str, &str, Option<&str>, Calico)] = &[
    (
        "Backend Tiered policy name: Empty tier spec with correctly formatted name",
        "footier.bazpolicy",
        None,
        Invalid,
    ),
    (
        "Backend Tiered policy name: Tier spec present with incorrectly formatted name",
        "bazpolicy",
        Some("footier"),
        Invalid,
    ),
    (
        "Backend Tiered policy name: Correcty formatted tiered policy name but not matching tier spec",
        "footier.bazpolicy",
        Some("baztier"),
        Invalid,
    ),
    (
        "Backend Tiered policy name: Network Policy and empty tier",
        "foobar",
        None,
        Valid,
    ),
    (
        "Backend Tiered policy name: Matching tier spec and correctly formatted tiered policy name",
        "footier.bazpolicy",
        Some("footier"),
        Valid,
    ),
    (
        "Tiered policy name: Policy in default tier with prefix",
        "default.bazpolicy",
        None,
        Valid,
    ),
    (
        "Tiered policy name: Policy in default tier with prefix (tier written)",
        "default.bazpolicy",
        Some("default"),
        Valid,
    ),
    // A tier Calico creates in every cluster needs no `Tier` (clientv3 `EnsureInitialized`).
    (
        "EnsureInitialized: a policy in the built-in adminnetworkpolicy tier",
        "adminnetworkpolicy.bazpolicy",
        Some("adminnetworkpolicy"),
        Valid,
    ),
    // The client checks that the tier exists before anything else (clientv3
    // globalnetworkpolicy.go `Create`).
    (
        "globalNetworkPolicies.Create: the tier does not exist",
        "nosuchtier.bazpolicy",
        Some("nosuchtier"),
        Invalid,
    ),
    // `names.policyNameIsFormatted`: OpenStack's `ossg.` names skip the prefix rule.
    (
        "ValidateTieredPolicyName: an OpenStack-derived name in the default tier",
        "ossg.bazpolicy",
        None,
        Valid,
    ),
];

/// A `Tier` named `name` whose spec is the flow mapping `spec`.
fn tier(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: {name}\nspec: {spec}\n"
    )
}

/// A `StagedGlobalNetworkPolicy` named `name` whose spec is the flow mapping `spec`, with the
/// `Tier` `eng` when the spec puts it there.
fn staged(name: &str, spec: &str) -> String {
    let policy = format!(
        "apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata:\n  name: {name}\nspec: {spec}\n"
    );
    if spec.contains("tier: eng") {
        format!("{}---\n{policy}", tier("eng", "{order: 100}"))
    } else {
        policy
    }
}

/// The GlobalNetworkPolicy `name` in `tier` (none: `spec.tier` left out), after the tiers
/// `footier` and `baztier`.
fn tiered(name: &str, in_tier: Option<&str>) -> String {
    let spec = in_tier.map_or_else(
        || "{selector: all()}".to_owned(),
        |in_tier| format!("{{tier: {in_tier}, selector: all()}}"),
    );
    format!(
        "{}---\n{}---\n{}",
        tier("footier", "{order: 100}"),
        tier("baztier", "{order: 200}"),
        gnp(name, &spec)
    )
}

/// An upstream entry on which we knowingly give the other answer than Calico's.
struct Disagreement {
    upstream: &'static str,
    yaml: &'static str,
    calico: Calico,
    reason: &'static str,
}

const KNOWN_DISAGREEMENTS: &[Disagreement] = &[
    Disagreement {
        upstream: "validateTier (validator.go:1642, v3.30.7) checks no defaultAction: `default` may pass",
        yaml: "apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: default
spec:
  order: 1000000
  defaultAction: Pass
",
        calico: Valid,
        reason: "Calico v3.32 refuses it (\"Tier: disallow default tier with an invalid default action\", in TIERS) and v3.30 creates `default` with Deny; we give the newer answer, so a file we accept is one every Calico accepts",
    },
    Disagreement {
        upstream: "should accept host endpoint with prefixed profile name",
        yaml: "apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: h
spec:
  interfaceName: eth0
  profiles: [knp.default.fun, knp.default.funner.11234-a]
  node: node01
",
        calico: Valid,
        reason: "we know one profile only, projectcalico-default-allow (docs/SPEC.md); any other is an error",
    },
    Disagreement {
        upstream: "should accept host endpoint without prefixed profile name",
        yaml: "apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: h
spec:
  interfaceName: eth0
  profiles: [fun-funner1234]
  node: node01
",
        calico: Valid,
        reason: "we know one profile only, projectcalico-default-allow (docs/SPEC.md); any other is an error",
    },
];

/// A `GlobalNetworkPolicy` named `name` whose spec is the flow mapping `spec`.
fn gnp(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\nspec: {spec}\n"
    )
}

/// The policy `thing` whose one ingress rule is the flow mapping `rule`.
fn rule(rule: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: thing\nspec:\n  ingress:\n    - {rule}\n"
    )
}

/// The `HostEndpoint` `h` whose spec is the flow mapping `spec`.
fn hep(spec: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: h\nspec: {spec}\n"
    )
}

/// A `GlobalNetworkSet` whose metadata and spec are the flow mappings `metadata` and `spec`.
fn gns(metadata: &str, spec: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {metadata}\nspec: {spec}\n"
    )
}

/// The generic `ObjectMeta` entries whose values are too long to write out: label values of
/// 63 and 64 characters, annotations of 256 KiB, names of 253 and 254 characters.
fn generated_cases() -> Vec<Case> {
    let x = |n: usize| "x".repeat(n);
    let pool = |metadata: String| gns(&metadata, "{nets: [1.2.3.0/26]}");
    let label = |n| {
        pool(format!(
            "{{name: pool.name, labels: {{projectcalico.org/label: {}}}}}",
            x(n)
        ))
    };
    let annotation = |n| {
        pool(format!(
            "{{name: pool.name, annotations: {{key: {}}}}}",
            x(n)
        ))
    };
    let name = |n| pool(format!("{{name: {}}}", x(n)));
    let max_annotations = 256 * 1024;
    [
        ("should accept valid labels in metadata", label(63), Valid),
        (
            "should reject an excessively long value in labels in metadata",
            label(64),
            Invalid,
        ),
        (
            "should allow annotations in metadata <= 256k",
            annotation(max_annotations - 3),
            Valid,
        ),
        (
            "should disallow annotations in metadata > 256k",
            annotation(max_annotations - 2),
            Invalid,
        ),
        ("should allow a name of 253 chars", name(253), Valid),
        ("should disallow a name of 254 chars", name(254), Invalid),
    ]
    .into_iter()
    .map(|(upstream, yaml, calico)| Case {
        upstream,
        yaml,
        calico,
    })
    .collect()
}

/// Every case of the corpus, as whole files.
fn corpus() -> Vec<Case> {
    let case = |upstream, yaml, calico| Case {
        upstream,
        yaml,
        calico,
    };
    let rules = RULES
        .iter()
        .map(|&(upstream, body, calico)| case(upstream, rule(body), calico));
    let policies = POLICIES
        .iter()
        .map(|&(upstream, name, spec, calico)| case(upstream, gnp(name, spec), calico));
    let host_endpoints = HOST_ENDPOINTS
        .iter()
        .map(|&(upstream, spec, calico)| case(upstream, hep(spec), calico));
    let network_sets = NETWORK_SETS
        .iter()
        .map(|&(upstream, metadata, spec, calico)| case(upstream, gns(metadata, spec), calico));
    let tiers = TIERS
        .iter()
        .map(|&(upstream, name, spec, calico)| case(upstream, tier(name, spec), calico));
    let staged_policies = STAGED
        .iter()
        .map(|&(upstream, name, spec, calico)| case(upstream, staged(name, spec), calico));
    let tiered_names = TIERED_NAMES
        .iter()
        .map(|&(upstream, name, in_tier, calico)| case(upstream, tiered(name, in_tier), calico));
    let long_tier_names = [
        (
            "Tier: allow valid name of 63 chars",
            tier(&"x".repeat(63), "{order: 100}"),
            Valid,
        ),
        (
            "Tier: disallow a name of 64 chars",
            tier(&"x".repeat(64), "{order: 100}"),
            Invalid,
        ),
    ]
    .into_iter()
    .map(|(upstream, yaml, calico)| case(upstream, yaml, calico));
    // `names.TieredPolicyName` stores `bazpolicy` as `default.bazpolicy` ("Tiered policy name:
    // Policy in default tier", "… with prefix"), so the second is the first again: Calico's
    // create says it already exists.
    let same_name = case(
        "Tiered policy name: Policy in default tier, and with prefix: one stored name",
        format!(
            "{}---\n{}",
            gnp("bazpolicy", "{}"),
            gnp("default.bazpolicy", "{}")
        ),
        Invalid,
    );
    rules
        .chain(policies)
        .chain(tiers)
        .chain(staged_policies)
        .chain(tiered_names)
        .chain(long_tier_names)
        .chain(std::iter::once(same_name))
        .chain(host_endpoints)
        .chain(network_sets)
        .chain(generated_cases())
        .collect()
}

/// The error headlines (loading and validation) that `yaml` gives as the file `p.yaml`.
fn errors(yaml: &str) -> Vec<String> {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("p.yaml", yaml));
    let (parsed, problems) = crate::load::parse_file(id, sources.get(id));
    let resources: Vec<_> = parsed.into_iter().map(|resource| (id, resource)).collect();
    let (_, diagnostics) = validate(&sources, &resources);
    problems
        .iter()
        .chain(&diagnostics)
        .filter(|diagnostic| diagnostic.severity == Severity::Error)
        .map(|diagnostic| diagnostic.headline(&sources))
        .collect()
}

/// `Ok` when our answer for `yaml` is `calico`; otherwise what differs.
fn compare(upstream: &str, yaml: &str, calico: Calico) -> Result<(), String> {
    let errors = errors(yaml);
    let ours = if errors.is_empty() { Valid } else { Invalid };
    if ours == calico {
        Ok(())
    } else {
        Err(format!(
            "{upstream:?}: Calico says {calico:?}, we say {ours:?} {errors:#?}\n{yaml}"
        ))
    }
}

#[test]
fn calico_corpus_gives_calicos_answer() {
    let cases = corpus();
    assert!(cases.len() >= 60, "only {} cases", cases.len());
    let differences: Vec<String> = cases
        .iter()
        .filter_map(|case| compare(case.upstream, &case.yaml, case.calico).err())
        .collect();
    assert!(
        differences.is_empty(),
        "{} of {} cases differ from Calico:\n{}",
        differences.len(),
        cases.len(),
        differences.join("\n")
    );
}

#[test]
fn calico_corpus_known_disagreements_still_disagree() {
    for disagreement in KNOWN_DISAGREEMENTS {
        assert!(
            compare(
                disagreement.upstream,
                disagreement.yaml,
                disagreement.calico
            )
            .is_err(),
            "{:?} now gives Calico's answer ({:?}): move it into the corpus (it was listed because {})",
            disagreement.upstream,
            disagreement.calico,
            disagreement.reason
        );
    }
}

/// Every error of every invalid case says what to write instead (a `help:` line).
#[test]
fn every_error_of_the_corpus_has_a_help_line() {
    let mut missing = Vec::new();
    for case in corpus() {
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("p.yaml", &case.yaml));
        let (parsed, problems) = crate::load::parse_file(id, sources.get(id));
        let resources: Vec<_> = parsed.into_iter().map(|resource| (id, resource)).collect();
        let (_, diagnostics) = validate(&sources, &resources);
        for diagnostic in problems.iter().chain(&diagnostics) {
            if diagnostic.severity == Severity::Error
                && diagnostic.help.as_deref().is_none_or(str::is_empty)
            {
                missing.push(format!("{}: {}", case.upstream, diagnostic.message));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "errors without help:\n{}",
        missing.join("\n")
    );
}
