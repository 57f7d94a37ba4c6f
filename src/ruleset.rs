//! The compiled ruleset: tables, chains, rules and sets as plain values, for any backend.
//!
//! The compiler produces a [`Ruleset`]; renderers turn it into `iptables-restore`, `ipset
//! restore` or `nft -f` text. Nothing here knows a backend's syntax, and nothing here runs
//! anything. Every string in a ruleset is either one of our own constants or a value that
//! validation checked (names, interface names, CIDRs), so rendering never has to escape
//! user text except comments, which the renderers sanitise.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::marks::MarkBits;
use crate::model::{Direction, IpFamily};

/// Prefix of every chain we own.
pub const CHAIN_PREFIX: &str = "npg-";
/// Prefix of every ipset we own.
pub const SET_PREFIX: &str = "npg";

/// Whether an ipset is ours: `npg4-…` and `npg6-…` (see `compile::names`), or `npg-tmp-…`, the
/// name a set is rebuilt under before it is swapped in. Another program's `npgx` or
/// `npg-mine` is not.
pub fn is_our_set(name: &str) -> bool {
    ["npg4-", "npg6-", "npg-tmp-"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}
/// Longest chain name we write: two under the 28 characters iptables accepts and the contract
/// promises, so that the nftables backend's names, which carry the table's letter
/// (`npg-m-pi-…`), keep within 28 too.
pub const MAX_CHAIN_NAME: usize = 26;
/// Longest ipset name the kernel accepts.
pub const MAX_SET_NAME: usize = 31;
/// Most ports one `multiport` match may hold (a range counts as two).
pub const MULTIPORT_SLOTS: usize = 15;

/// A netfilter table we use.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    /// `raw`: before connection tracking; doNotTrack policy.
    Raw,
    /// `mangle`: after connection tracking, before DNAT; pre-DNAT policy.
    Mangle,
    /// `filter`: normal policy.
    Filter,
}

impl Table {
    /// The table's name in iptables.
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Raw => "raw",
            Table::Mangle => "mangle",
            Table::Filter => "filter",
        }
    }

    /// Every table we may use, in the order a packet meets them.
    pub const ALL: [Table; 3] = [Table::Raw, Table::Mangle, Table::Filter];
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The whole desired state.
#[derive(Clone, Debug, PartialEq)]
pub struct Ruleset {
    /// The mark bits the rules use.
    pub marks: MarkBits,
    /// One entry per family we program (IPv4 first).
    pub families: Vec<FamilyRuleset>,
}

impl Ruleset {
    /// The families this ruleset programs.
    pub fn ip_families(&self) -> Vec<IpFamily> {
        self.families.iter().map(|family| family.family).collect()
    }

    /// The ruleset of one family, if it is programmed.
    pub fn family(&self, family: IpFamily) -> Option<&FamilyRuleset> {
        self.families.iter().find(|f| f.family == family)
    }

    /// Every chain of every table and family.
    pub fn chains(&self) -> impl Iterator<Item = (IpFamily, Table, &Chain)> {
        self.families.iter().flat_map(|family| {
            family.tables.iter().flat_map(move |table| {
                table
                    .chains
                    .iter()
                    .map(move |chain| (family.family, table.table, chain))
            })
        })
    }
}

/// Everything of one IP family.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilyRuleset {
    /// The family every table and set of it is written for.
    pub family: IpFamily,
    /// The tables we use, in packet order; tables we do not need are absent.
    pub tables: Vec<TableRuleset>,
    /// The ipsets (or nft sets) the rules refer to, sorted by name.
    pub sets: Vec<IpSet>,
}

impl FamilyRuleset {
    /// The table with this name, if we use it.
    pub fn table(&self, table: Table) -> Option<&TableRuleset> {
        self.tables.iter().find(|t| t.table == table)
    }

    /// The set with this name.
    pub fn set(&self, name: &str) -> Option<&IpSet> {
        self.sets.iter().find(|set| set.name == name)
    }
}

/// Our chains in one table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableRuleset {
    /// The kernel table its chains go into.
    pub table: Table,
    /// The kernel chains we hook, each with the chain we jump to from its first position.
    pub hooks: Vec<Hook>,
    /// Our chains, sorted by name.
    pub chains: Vec<Chain>,
}

impl TableRuleset {
    /// The chain with this name.
    pub fn chain(&self, name: &str) -> Option<&Chain> {
        self.chains.iter().find(|chain| chain.name == name)
    }
}

/// One jump from a kernel chain into ours, kept at position 1.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hook {
    /// The kernel's chain: `PREROUTING`, `INPUT`, `FORWARD` or `OUTPUT`.
    pub kernel_chain: String,
    /// Our chain it jumps to.
    pub target: String,
}

/// One of our chains.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Chain {
    /// Its name, starting with [`CHAIN_PREFIX`].
    pub name: String,
    /// Its rules in order: shared, so that an unchanged chain passes from one compile to the
    /// next (and to the render memo) without a copy.
    pub rules: std::sync::Arc<[Rule]>,
}

/// One rule: all matches must hold, then the action runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    /// Conditions, in rendering order.
    pub matches: Vec<Match>,
    /// What to do.
    pub action: Action,
    /// Words for people reading the kernel's rules (sanitised when rendered).
    pub comment: Option<String>,
    /// For the rule that carries a policy rule's verdict: which policy rule it is, so `status`
    /// can map kernel counters back to it. Boxed: few rules carry one, and a daemon keeps every
    /// rule it compiled.
    pub origin: Option<Box<RuleOrigin>>,
}

impl Rule {
    /// A rule with these matches and action and nothing else.
    pub fn new(mut matches: Vec<Match>, action: Action) -> Rule {
        // Kept as long as the rule is (a daemon keeps what it compiled): without spare room.
        matches.shrink_to_fit();
        Rule {
            matches,
            action,
            comment: None,
            origin: None,
        }
    }

    /// Adds a comment.
    #[must_use]
    pub fn comment(mut self, comment: impl Into<String>) -> Rule {
        self.comment = Some(comment.into());
        self
    }
}

fn default_tier() -> std::sync::Arc<str> {
    std::sync::Arc::from(crate::model::DEFAULT_TIER)
}

fn is_default_tier(tier: &str) -> bool {
    tier == crate::model::DEFAULT_TIER
}

/// Which policy rule a kernel rule carries the verdict of.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct RuleOrigin {
    /// Policy name (shared by every rule of the policy: a daemon keeps every rule it
    /// compiled).
    pub policy: std::sync::Arc<str>,
    /// The policy's tier (left out of a saved index when `default`, so older ones read the
    /// same).
    #[serde(default = "default_tier", skip_serializing_if = "is_default_tier")]
    pub tier: std::sync::Arc<str>,
    /// Whether the rule is one of the policy's ingress or egress rules.
    pub direction: Direction,
    /// Index of the rule in the policy's list for that direction.
    pub rule_index: usize,
    /// Whether the policy is a staged one (it only logs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub staged: bool,
    /// Whether this kernel rule's counters count the policy rule's packets: the rule that
    /// matches does; the log and verdict rules that follow it on its mark bit see the same
    /// packets again, and only say whether the policy rule is whole (an older saved index
    /// holds counted rules only).
    #[serde(default = "counted_default", skip_serializing_if = "Clone::clone")]
    pub counted: bool,
}

fn counted_default() -> bool {
    true
}

/// Which address or port of a packet a match looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Source.
    Source,
    /// Destination.
    Destination,
}

/// A port or an inclusive port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (equal to `first` for one port).
    pub last: u16,
}

impl PortRange {
    /// Multiport slots this entry takes: one for a port, two for a range.
    pub fn slots(&self) -> usize {
        if self.first == self.last { 1 } else { 2 }
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}:{}", self.first, self.last)
        }
    }
}

/// Connection tracking states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtState {
    /// `RELATED,ESTABLISHED`.
    RelatedEstablished,
    /// `INVALID`.
    Invalid,
}

/// How a set match reads the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetLookup {
    /// The address only (`hash:net`, `hash:ip`).
    Address,
    /// Address and port (`hash:ip,port`).
    AddressPort,
}

/// A condition on a packet.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Match {
    /// IP protocol number (`-p`).
    Protocol {
        /// Protocol number.
        number: u8,
        /// Match every other protocol instead.
        negated: bool,
    },
    /// One network (`-s` / `-d`).
    Net {
        /// Which address.
        side: Side,
        /// The network.
        net: IpNet,
        /// Match addresses outside it instead.
        negated: bool,
    },
    /// Membership in one of our sets.
    Set {
        /// Which address (and port).
        side: Side,
        /// The set's name.
        name: String,
        /// What is looked up.
        lookup: SetLookup,
        /// Match non-members instead.
        negated: bool,
    },
    /// Ports (`-m multiport`); needs a protocol match before it. At most
    /// [`MULTIPORT_SLOTS`] slots.
    Ports {
        /// Which port.
        side: Side,
        /// The ports and ranges.
        ports: Vec<PortRange>,
        /// Match every other port instead.
        negated: bool,
    },
    /// ICMP or ICMPv6 type and code.
    Icmp {
        /// Which ICMP.
        family: IpFamily,
        /// The ICMP (or ICMPv6) type number.
        icmp_type: u8,
        /// Code, if matched.
        code: Option<u8>,
        /// Match every other type/code instead.
        negated: bool,
    },
    /// `(mark & mask) == value`, or `!=` when negated.
    Mark {
        /// Expected value of the masked bits.
        value: u32,
        /// The bits looked at.
        mask: u32,
        /// Match when the bits differ instead.
        negated: bool,
    },
    /// Connection tracking state.
    Conntrack(CtState),
    /// A TCP SYN: SYN set, ACK clear (`-m tcp --tcp-flags SYN,ACK SYN`); needs the TCP
    /// protocol match before it. Never a reply: a reply's SYN carries ACK.
    TcpSyn,
    /// Incoming interface (`-i`); a trailing `+` matches a prefix.
    InInterface(String),
    /// Any incoming interface but this one (`! -i`).
    NotInInterface(String),
    /// Outgoing interface (`-o`).
    OutInterface(String),
}

/// What a rule does.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Leave this chain (our chains never ACCEPT: an allowed packet goes back to the kernel
    /// chain, where other tools' rules still apply).
    Return,
    /// Drop the packet.
    Drop,
    /// Jump to one of our chains and come back.
    Jump(String),
    /// Go to one of our chains and do not come back here.
    Goto(String),
    /// `mark = (mark & !mask) | value`.
    SetMark {
        /// New value of the masked bits.
        value: u32,
        /// The bits written.
        mask: u32,
    },
    /// Send to NFLOG.
    Nflog {
        /// NFLOG group.
        group: u16,
        /// Prefix (already shortened to the kernel's limit and made of safe characters).
        prefix: String,
    },
    /// Write to the kernel log (`-j LOG`, nftables `log` without a group).
    Log {
        /// The text before the packet (made of safe characters, at most 29).
        prefix: String,
        /// The syslog level, 0 to 7.
        level: u8,
    },
    /// Exempt from connection tracking (raw table only).
    NoTrack,
}

/// The syslog level the kernel log uses when a rule names none (warning): `iptables-save` and
/// `nft list` leave it out.
pub const DEFAULT_KERNEL_LOG_LEVEL: u8 = 4;

/// The type of an ipset.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum SetKind {
    /// Networks (`hash:net`).
    Net,
    /// Single addresses (`hash:ip`).
    Ip,
    /// Address, protocol and port (`hash:ip,port`).
    IpPort,
}

impl SetKind {
    /// The ipset type name.
    pub fn ipset_type(self) -> &'static str {
        match self {
            SetKind::Net => "hash:net",
            SetKind::Ip => "hash:ip",
            SetKind::IpPort => "hash:ip,port",
        }
    }
}

/// A member of a set.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SetMember {
    /// A network.
    Net(IpNet),
    /// An address.
    Ip(IpAddr),
    /// An address with protocol and port.
    IpPort(IpAddr, u8, u16),
}

impl fmt::Display for SetMember {
    /// The member as `ipset save` prints it (a network of one address without its `/32` or
    /// `/128`), so desired and observed members compare equal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetMember::Net(net) if net.prefix_len() == net.max_prefix_len() => {
                write!(f, "{}", net.addr())
            }
            SetMember::Net(net) => write!(f, "{net}"),
            SetMember::Ip(ip) => write!(f, "{ip}"),
            SetMember::IpPort(ip, protocol, port) => {
                let name = match protocol {
                    6 => "tcp",
                    17 => "udp",
                    132 => "sctp",
                    _ => "tcp",
                };
                write!(f, "{ip},{name}:{port}")
            }
        }
    }
}

/// One of our sets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IpSet {
    /// Name, starting with [`SET_PREFIX`].
    pub name: String,
    /// Family of its members.
    pub family: IpFamily,
    /// Type.
    pub kind: SetKind,
    /// Members, sorted and without duplicates.
    pub members: std::sync::Arc<[SetMember]>,
    /// What the set is for, in words (kept in plans, not in the kernel).
    pub purpose: String,
}

/// The kernel chains each table's hooks attach to, in the order we hook them.
pub fn kernel_chains(table: Table) -> &'static [&'static str] {
    match table {
        Table::Raw => &["PREROUTING", "OUTPUT"],
        Table::Mangle => &["PREROUTING"],
        Table::Filter => &["INPUT", "FORWARD", "OUTPUT"],
    }
}

/// Longest comment (and NFLOG prefix) any backend writes before its own limit cuts it: the
/// iptables `comment` match keeps 255 characters.
pub const MAX_COMMENT: usize = 255;

/// Longest words after the hash in a rule's comment that every backend keeps whole: nftables
/// keeps 127 characters of a comment, of which `npg:`, the 16 characters of the hash and a
/// space come first.
pub const MAX_RULE_WORDS: usize = 127 - 21;

/// Bytes of each packet NFLOG copies: enough for the IP and TCP/UDP headers.
pub const NFLOG_SIZE: u32 = 80;

/// The keyword of an IP protocol number as `iptables-save` and `nft list` print it: both ask
/// `getprotobynumber(3)`, whose names on Debian and most distributions are netbase's
/// `/etc/protocols`, reproduced here; `None` for numbers it has no name for.
pub fn protocol_keyword(number: u8) -> Option<&'static str> {
    Some(match number {
        0 => "ip",
        1 => "icmp",
        2 => "igmp",
        3 => "ggp",
        4 => "ipencap",
        5 => "st",
        6 => "tcp",
        8 => "egp",
        9 => "igp",
        12 => "pup",
        17 => "udp",
        20 => "hmp",
        22 => "xns-idp",
        27 => "rdp",
        29 => "iso-tp4",
        33 => "dccp",
        36 => "xtp",
        37 => "ddp",
        38 => "idpr-cmtp",
        41 => "ipv6",
        43 => "ipv6-route",
        44 => "ipv6-frag",
        45 => "idrp",
        46 => "rsvp",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        57 => "skip",
        58 => "ipv6-icmp",
        59 => "ipv6-nonxt",
        60 => "ipv6-opts",
        73 => "rspf",
        81 => "vmtp",
        88 => "eigrp",
        89 => "ospf",
        93 => "ax.25",
        94 => "ipip",
        97 => "etherip",
        98 => "encap",
        103 => "pim",
        108 => "ipcomp",
        112 => "vrrp",
        115 => "l2tp",
        124 => "isis",
        132 => "sctp",
        133 => "fc",
        135 => "mobility-header",
        136 => "udplite",
        137 => "mpls-in-ip",
        138 => "manet",
        139 => "hip",
        140 => "shim6",
        141 => "wesp",
        142 => "rohc",
        143 => "ethernet",
        _ => return None,
    })
}

/// A protocol as the kernel's tools print it: its keyword, else its number.
pub fn protocol_text(number: u8) -> String {
    protocol_keyword(number).map_or_else(|| number.to_string(), str::to_owned)
}

/// Makes text safe inside a double-quoted comment or log prefix of every backend: characters
/// other than letters, digits and ` _.,:;=/@%+|()#-` become `_`, and it is cut to
/// [`MAX_COMMENT`].
pub fn sanitize_comment(text: &str) -> String {
    let mut clean = String::with_capacity(text.len().min(MAX_COMMENT));
    push_sanitized(&mut clean, text);
    clean
}

/// Appends `text` sanitized as [`sanitize_comment`] does, without allocating.
pub fn push_sanitized(out: &mut String, text: &str) {
    const SAFE: &str = " _.,:;=/@%+|()#-";
    for c in text.chars().take(MAX_COMMENT) {
        out.push(if c.is_ascii_alphanumeric() || SAFE.contains(c) {
            c
        } else {
            '_'
        });
    }
}
