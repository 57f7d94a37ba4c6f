//! nf_tables change notifications: the kernel sends every committed change of a table, chain,
//! rule, set or set element to the members of the netlink group `NFNLGRP_NFTABLES`, message by
//! message, each followed by a `NFT_MSG_NEWGEN` that closes its transaction (the generation
//! [`super::nfgen`] reads). nftables and iptables-nft both commit through nf_tables, so one
//! subscription sees every change to either.
//!
//! Only the names are read (family, table, chain, set): what a change means for us is
//! [`Interest::touches`]' to say, and the daemon reads the kernel itself to repair it.

use std::io;

use super::netlink_bytes::{HEADER, NFGENMSG, u16_at, u32_at};
use netlink_sys::{Socket, protocols::NETLINK_NETFILTER};

/// `NFNLGRP_NFTABLES`.
const NFNLGRP_NFTABLES: u32 = 7;
/// `NFNL_SUBSYS_NFTABLES`, the nfnetlink subsystem of nf_tables.
const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// `NLMSG_DONE`, `NLMSG_ERROR` and the other control messages are below this.
const NLMSG_MIN_TYPE: u16 = 0x10;
/// How much the kernel may queue for us before it drops notifications (`ENOBUFS`): a flush of
/// thousands of rules is one notification per rule.
const RECEIVE_BUFFER: usize = 4 << 20;

/// The nf_tables message types (`enum nf_tables_msg_types`) a notification may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `NFT_MSG_NEWTABLE`, `NEWRULE`, `NEWSET`, `NEWSETELEM` and the like.
    Added,
    /// `NFT_MSG_NEWCHAIN`: a chain created, or renamed (the message names the new name).
    ChainAdded,
    /// `NFT_MSG_DELTABLE`.
    TableDeleted,
    /// `NFT_MSG_DELCHAIN`.
    ChainDeleted,
    /// `NFT_MSG_DELRULE`.
    RuleDeleted,
    /// `NFT_MSG_DELSET`, `NFT_MSG_DELSETELEM`, `NFT_MSG_DELOBJ`, `NFT_MSG_DELFLOWTABLE`.
    OtherDeleted,
    /// `NFT_MSG_NEWGEN`: the end of a transaction.
    Generation,
}

impl Kind {
    fn of(message: u16) -> Kind {
        match message {
            // DEL… and the DESTROY… of newer kernels.
            2 | 26 => Kind::TableDeleted,
            5 | 27 => Kind::ChainDeleted,
            8 | 28 => Kind::RuleDeleted,
            11 | 14 | 20 | 24 | 29..=32 => Kind::OtherDeleted,
            15 => Kind::Generation,
            3 => Kind::ChainAdded,
            _ => Kind::Added,
        }
    }
}

/// One notified change: what it did, and the names it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// What happened.
    pub kind: Kind,
    /// The nfgenmsg family: `NFPROTO_IPV4` (2), `NFPROTO_IPV6` (10), `NFPROTO_INET` (1)…
    pub family: u8,
    /// The table (every message but the generation's names one).
    pub table: Option<String>,
    /// The chain of a chain or rule message.
    pub chain: Option<String>,
}

/// `NFPROTO_IPV4`.
pub const FAMILY_IPV4: u8 = 2;
/// `NFPROTO_IPV6`.
pub const FAMILY_IPV6: u8 = 10;

/// What of nf_tables is ours, so that a change to it can be told from everyone else's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interest {
    /// Tables wholly ours (nftables' `nodeport_guard`), of any family.
    pub owned_tables: Vec<String>,
    /// Tables we share (iptables-nft's `mangle`, `raw`), as (family, table): in them our
    /// chains (`npg…`) are ours, and so is any deletion of them.
    pub shared_tables: Vec<(u8, String)>,
    /// Base chains we hook with a jump, as (family, table, chain): a rule deleted from one may
    /// be our jump, and a rule added to one may stand in front of it.
    pub hooked: Vec<(u8, String, String)>,
}

impl Interest {
    /// Whether `change` may have changed what we own: any change in a table of ours, a change
    /// of an `npg` chain, the deletion of a shared table, or a rule added or deleted, or a chain
    /// deleted, among the base chains we hook (a notification does not say where a rule was
    /// added: one inserted at the top moves our jump down). Other programs' changes to their
    /// own chains are not.
    pub fn touches(&self, change: &Change) -> bool {
        let Some(table) = change.table.as_deref() else {
            return false;
        };
        if self.owned_tables.iter().any(|owned| owned == table) {
            return true;
        }
        let shared = self
            .shared_tables
            .iter()
            .any(|(family, name)| *family == change.family && name == table);
        if !shared {
            return false;
        }
        let chain = change.chain.as_deref();
        match change.kind {
            // A chain of ours renamed (`iptables -E`) is notified under its new name only:
            // any chain created in a table we share may be one (rare: other programs create
            // their chains once, and change rules).
            Kind::TableDeleted | Kind::ChainAdded => true,
            _ if chain.is_some_and(|chain| chain.starts_with("npg")) => true,
            Kind::Added | Kind::RuleDeleted | Kind::ChainDeleted => chain.is_some_and(|chain| {
                self.hooked.iter().any(|(family, hooked_table, hooked)| {
                    *family == change.family && hooked_table == table && hooked == chain
                })
            }),
            _ => false,
        }
    }
}

/// What one read of the subscription brought.
#[derive(Debug)]
pub enum Received {
    /// The changes in the datagram read.
    Changes(Vec<Change>),
    /// The kernel dropped notifications (the buffer was full): anything may have changed.
    Lost,
}

/// A netlink socket subscribed to nf_tables notifications of this network namespace.
pub struct Subscription {
    socket: Socket,
    buffer: Vec<u8>,
}

impl Subscription {
    /// Subscribes to `NFNLGRP_NFTABLES` (needs `CAP_NET_ADMIN`).
    pub fn open() -> io::Result<Subscription> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.add_membership(NFNLGRP_NFTABLES)?;
        // A larger buffer than the default, so bursts are not lost; not being able to set it
        // only means losing them sooner, which reads as "anything may have changed".
        let _ = socket.set_rx_buf_sz(RECEIVE_BUFFER);
        Ok(Subscription {
            socket,
            buffer: Vec::with_capacity(64 * 1024),
        })
    }

    /// Waits for the next datagram of notifications.
    pub fn receive(&mut self) -> io::Result<Received> {
        loop {
            self.buffer.clear();
            match self.socket.recv(&mut self.buffer, 0) {
                Ok(_) => return Ok(Received::Changes(parse(&self.buffer))),
                Err(error) if error.raw_os_error() == Some(nix::libc::ENOBUFS) => {
                    return Ok(Received::Lost);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }
}

/// The nf_tables changes in one datagram (several netlink messages, each 4-byte aligned);
/// anything else in it is skipped, and a message that does not add up ends the reading.
pub fn parse(bytes: &[u8]) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut at = 0;
    while let (Some(length), Some(kind)) = (u32_at(bytes, at), u16_at(bytes, at + 4)) {
        let length = length as usize;
        let Some(message) = bytes.get(at..at + length).filter(|_| length >= HEADER) else {
            break;
        };
        if kind >= NLMSG_MIN_TYPE
            && kind >> 8 == NFNL_SUBSYS_NFTABLES
            && let Some(change) = change(kind & 0xff, message)
        {
            changes.push(change);
        }
        at += (length + 3) & !3;
    }
    changes
}

/// One message's change: its family and the names among its first attributes. Every message
/// type the kernel notifies names its table in attribute 1; chains and rules name their chain
/// in attribute 3 (`NFTA_CHAIN_NAME`) and 2 (`NFTA_RULE_CHAIN`).
fn change(message: u16, bytes: &[u8]) -> Option<Change> {
    let family = *bytes.get(HEADER)?;
    let kind = Kind::of(message);
    let chain_attribute = match message {
        3..=5 | 27 => Some(3),
        6..=8 | 28 => Some(2),
        _ => None,
    };
    let mut change = Change {
        kind,
        family,
        table: None,
        chain: None,
    };
    if kind == Kind::Generation {
        return Some(change);
    }
    let mut at = HEADER + NFGENMSG;
    while let (Some(length), Some(attribute)) = (u16_at(bytes, at), u16_at(bytes, at + 2)) {
        let length = usize::from(length);
        if length < 4 {
            break;
        }
        let value = bytes.get(at + 4..at + length).map(|value| {
            let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
            String::from_utf8_lossy(&value[..end]).into_owned()
        });
        match attribute & 0x3fff {
            1 => change.table = value,
            number if Some(number) == chain_attribute => change.chain = value,
            _ => {}
        }
        at += (length + 3) & !3;
    }
    Some(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribute(kind: u16, value: &str) -> Vec<u8> {
        let mut bytes = Vec::new();
        let length = u16::try_from(4 + value.len() + 1).expect("short");
        bytes.extend_from_slice(&length.to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
        while bytes.len() % 4 != 0 {
            bytes.push(0);
        }
        bytes
    }

    /// A notification as the kernel sends it: header, nfgenmsg, attributes.
    fn message(kind: u16, family: u8, attributes: &[(u16, &str)]) -> Vec<u8> {
        let body: Vec<u8> = attributes
            .iter()
            .flat_map(|(kind, value)| attribute(*kind, value))
            .collect();
        let length = u32::try_from(HEADER + NFGENMSG + body.len()).expect("short");
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&length.to_ne_bytes());
        bytes.extend_from_slice(&(NFNL_SUBSYS_NFTABLES << 8 | kind).to_ne_bytes());
        bytes.extend_from_slice(&0u16.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes.extend_from_slice(&[family, 0, 0, 0]);
        bytes.extend_from_slice(&body);
        bytes
    }

    #[test]
    fn a_datagram_of_several_messages_is_read_whole() {
        let mut datagram = message(8, FAMILY_IPV4, &[(1, "mangle"), (2, "PREROUTING")]);
        datagram.extend(message(5, FAMILY_IPV6, &[(1, "mangle"), (3, "npg-pi-x")]));
        datagram.extend(message(2, 1, &[(1, "nodeport_guard")]));
        datagram.extend(message(15, 0, &[(1, "ignored")]));
        let changes = parse(&datagram);
        assert_eq!(
            changes,
            [
                Change {
                    kind: Kind::RuleDeleted,
                    family: FAMILY_IPV4,
                    table: Some("mangle".into()),
                    chain: Some("PREROUTING".into()),
                },
                Change {
                    kind: Kind::ChainDeleted,
                    family: FAMILY_IPV6,
                    table: Some("mangle".into()),
                    chain: Some("npg-pi-x".into()),
                },
                Change {
                    kind: Kind::TableDeleted,
                    family: 1,
                    table: Some("nodeport_guard".into()),
                    chain: None,
                },
                Change {
                    kind: Kind::Generation,
                    family: 0,
                    table: None,
                    chain: None,
                },
            ]
        );
        // Cut anywhere, it never panics and keeps what was whole.
        for end in 0..datagram.len() {
            assert!(parse(&datagram[..end]).len() <= 4);
        }
    }

    fn iptables_nft() -> Interest {
        Interest {
            owned_tables: Vec::new(),
            shared_tables: vec![
                (FAMILY_IPV4, "mangle".into()),
                (FAMILY_IPV6, "mangle".into()),
            ],
            hooked: vec![(FAMILY_IPV4, "mangle".into(), "PREROUTING".into())],
        }
    }

    fn touches(interest: &Interest, kind: u16, family: u8, attributes: &[(u16, &str)]) -> bool {
        parse(&message(kind, family, attributes))
            .iter()
            .any(|change| interest.touches(change))
    }

    #[test]
    fn our_chains_and_jumps_are_told_from_everyone_elses() {
        let ours = iptables_nft();
        // Our jump (or any rule) deleted from a base chain we hook, a rule added there (maybe
        // in front of our jump); a rule of ours changed.
        assert!(touches(
            &ours,
            8,
            FAMILY_IPV4,
            &[(1, "mangle"), (2, "PREROUTING")]
        ));
        assert!(touches(
            &ours,
            6,
            FAMILY_IPV4,
            &[(1, "mangle"), (2, "PREROUTING")]
        ));
        assert!(touches(
            &ours,
            6,
            FAMILY_IPV6,
            &[(1, "mangle"), (2, "npg-PREROUTING")]
        ));
        assert!(touches(
            &ours,
            5,
            FAMILY_IPV6,
            &[(1, "mangle"), (3, "npg-pi-a")]
        ));
        assert!(touches(&ours, 2, FAMILY_IPV4, &[(1, "mangle")]));
        // A chain created in a table we share: maybe ours renamed (`iptables -E npg-… X`),
        // which is notified under the new name only; not in a table we do not share.
        assert!(touches(&ours, 3, FAMILY_IPV4, &[(1, "mangle"), (3, "X")]));
        assert!(!touches(&ours, 3, FAMILY_IPV4, &[(1, "nat"), (3, "X")]));
        // A neighbour's own rules, a base chain we do not hook, another family or table.
        assert!(!touches(
            &ours,
            6,
            FAMILY_IPV4,
            &[(1, "mangle"), (2, "KUBE-X")]
        ));
        assert!(!touches(
            &ours,
            8,
            FAMILY_IPV4,
            &[(1, "mangle"), (2, "KUBE-X")]
        ));
        assert!(!touches(
            &ours,
            6,
            FAMILY_IPV4,
            &[(1, "mangle"), (2, "OUTPUT")]
        ));
        assert!(!touches(
            &ours,
            8,
            FAMILY_IPV6,
            &[(1, "mangle"), (2, "PREROUTING")]
        ));
        assert!(!touches(
            &ours,
            8,
            FAMILY_IPV4,
            &[(1, "nat"), (2, "PREROUTING")]
        ));
        assert!(!touches(&ours, 2, FAMILY_IPV4, &[(1, "nat")]));
        assert!(!touches(&ours, 15, 0, &[]));

        let nftables = Interest {
            owned_tables: vec!["nodeport_guard".into()],
            ..Interest::default()
        };
        assert!(touches(
            &nftables,
            14,
            FAMILY_IPV4,
            &[(1, "nodeport_guard"), (2, "npg4-a")]
        ));
        assert!(touches(&nftables, 2, FAMILY_IPV6, &[(1, "nodeport_guard")]));
        assert!(!touches(
            &nftables,
            8,
            FAMILY_IPV4,
            &[(1, "filter"), (2, "INPUT")]
        ));
    }
}
