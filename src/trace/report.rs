//! What a trace says: the packet, the steps through each table, the NFLOG messages and the
//! verdict, as data that `trace` prints in words or as JSON.

use std::net::IpAddr;

use serde::Serialize;

use crate::model::IpFamily;

/// How the packet travels relative to this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Travel {
    /// It arrives for the host itself (or for a NodePort, judged before DNAT in mangle).
    Inbound,
    /// The host routes it from one interface to another (after DNAT to a pod, or a router).
    Forward,
    /// The host sends it.
    Outbound,
}

/// The packet's connection-tracking state, as the kernel would classify it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ConnState {
    /// The first packet of a connection.
    New,
    /// A packet of a connection conntrack already knows, or its reply.
    Established,
    /// Related to a known connection (an ICMP error, an FTP data connection).
    Related,
    /// A packet conntrack cannot place.
    Invalid,
}

/// One packet, as the first table sees it (before DNAT).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Packet {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number.
    pub protocol: u8,
    /// Source port (TCP, UDP, SCTP, UDP-Lite).
    pub sport: Option<u16>,
    /// Destination port.
    pub dport: Option<u16>,
    /// ICMP type (ICMP, ICMPv6).
    pub icmp_type: Option<u8>,
    /// ICMP code, with `icmp_type`; `None` matches any code.
    pub icmp_code: Option<u8>,
    /// The interface it arrives on (inbound, forward); `None`: one without an endpoint of its
    /// own.
    pub in_interface: Option<String>,
    /// The interface it leaves by (outbound, forward).
    pub out_interface: Option<String>,
    /// How it travels.
    pub travel: Travel,
    /// Its conntrack state.
    pub state: ConnState,
}

impl Packet {
    /// The packet's family (of its source address).
    pub fn family(&self) -> IpFamily {
        IpFamily::of_addr(&self.src)
    }

    /// Whether it is a TCP SYN (SYN set, ACK clear): the first packet of a new TCP connection.
    pub fn is_tcp_syn(&self) -> bool {
        self.protocol == 6 && self.state == ConnState::New
    }
}

/// What nodeport-guard's rules do with the packet in the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// A rule of ours drops it.
    Dropped,
    /// A policy, a failsafe port or a profile allowed it: our chains return it to the kernel's
    /// chain, where other programs' rules still apply.
    Allowed,
    /// No rule of ours decided about it.
    NotOurs,
}

/// The decision, in words and as fields.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// Dropped, allowed, or not ours to decide.
    pub outcome: Outcome,
    /// What decided, in words.
    pub reason: String,
    /// The table and kernel chain where it was decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The deciding policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Its tier (or the tier whose end decided).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The deciding rule's index in its policy's rule list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<usize>,
    /// The NFLOG prefix the kernel logs for the decision, if it logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nflog_prefix: Option<String>,
}

/// One step along the path, in words, with what it touched.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// What kind of step (`conntrack`, `hostToItself`, `endpoint`, `failsafe`, `tier`,
    /// `policy`, `rule`, `endOfTier`, `profile`, …).
    pub kind: &'static str,
    /// The step in words.
    pub text: String,
    /// Nesting depth for printing.
    #[serde(skip)]
    pub depth: usize,
    /// The chain the step happens in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain: Option<String>,
    /// The policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The tier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The rule index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<usize>,
    /// The rule's action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The mark bits set, as `name=0x…`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<String>,
    /// The NFLOG prefix logged here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nflog_prefix: Option<String>,
    /// The NFLOG group it is logged to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nflog_group: Option<u16>,
}

impl Step {
    pub(super) fn new(kind: &'static str, depth: usize, text: impl Into<String>) -> Step {
        Step {
            kind,
            text: text.into(),
            depth,
            chain: None,
            policy: None,
            tier: None,
            rule: None,
            action: None,
            marks: Vec::new(),
            nflog_prefix: None,
            nflog_group: None,
        }
    }
}

/// One table the packet passes, with its steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    /// `raw`, `mangle` or `filter`.
    pub table: &'static str,
    /// The kernel chain hooked (`PREROUTING`, `INPUT`, …).
    pub hook: &'static str,
    /// What this table judges, in words.
    pub judges: &'static str,
    /// Each chain and rule the packet went through, in order.
    pub steps: Vec<Step>,
}

/// One NFLOG message the kernel would send for the packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Logged {
    /// The NFLOG group.
    pub group: u16,
    /// The NFLOG prefix, as `drops` and `nflog` show it.
    pub prefix: String,
}

/// The whole trace of one packet.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Trace {
    /// The packet as traced, with what was left out filled in.
    pub packet: Packet,
    /// `IPv4` or `IPv6`.
    pub family: String,
    /// Notes about the packet or the host (assumptions, IPv6 off).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The tables, in the order the packet passes them.
    pub stages: Vec<Stage>,
    /// Every NFLOG message, in order.
    pub logs: Vec<Logged>,
    /// The final verdict.
    pub verdict: Verdict,
}
