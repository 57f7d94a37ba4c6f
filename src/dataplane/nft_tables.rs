//! The nf_tables tables of the network namespace, read with one netlink dump of their headers
//! (`NFT_MSG_GETTABLE`, what `nft list tables` asks the kernel first), made in-process.
//!
//! `nft list tables` itself (nftables 1.0.6, Debian 12) fills its whole cache before it prints
//! the names: every chain and rule of every table. With iptables-nft holding 10,000 policies
//! of ours that took two minutes of kernel time and 600 MiB; the dump reads a few hundred
//! bytes. Callers that only need the names ([`super::nat`], [`super::detect`], the iptables
//! backends' check for a table) ask [`listing`].

use std::io;

use super::netlink_bytes::{attributes, dump_request, each_dumped, read_dump};
use super::{Kernel, Output, Runner};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

/// `NFNL_SUBSYS_NFTABLES`.
const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// `NFT_MSG_NEWTABLE`: each table of the answer.
const NFT_MSG_NEWTABLE: u16 = 0;
/// `NFT_MSG_GETTABLE`: the request.
const NFT_MSG_GETTABLE: u16 = 1;
/// `NFTA_TABLE_NAME`.
const NFTA_TABLE_NAME: u16 = 1;
/// `NFPROTO_UNSPEC`: every family.
const NFPROTO_UNSPEC: u8 = 0;
/// What the dump's request is called in errors.
const REQUEST: &str = "NFT_MSG_GETTABLE";

/// Every nf_tables table of this network namespace, as (family, name) in nft's words
/// (`ip`, `ip6`, `inet`, `arp`, `bridge`, `netdev`), in the kernel's order.
pub fn tables() -> io::Result<Vec<(String, String)>> {
    let mut socket = Socket::new(NETLINK_NETFILTER)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    socket.send(&request(1), 0)?;
    let mut tables = Vec::new();
    let mut buffer = Vec::with_capacity(16 * 1024);
    read_dump(&socket, &mut buffer, REQUEST, |part| {
        parse_part(part, &mut tables)
    })?;
    Ok(tables)
}

/// What `nft list tables` prints (`table FAMILY NAME` lines), from the kernel's dump when
/// `kernel` reads it, else from `nft list tables` run by `runner` (slow with a large ruleset;
/// see the module's text). The output of a dump is always a success.
pub fn listing(runner: &dyn Runner, kernel: &dyn Kernel) -> io::Result<Output> {
    match kernel.nft_tables() {
        Some(tables) => Ok(Output {
            success: true,
            code: Some(0),
            stdout: tables
                .iter()
                .map(|(family, name)| format!("table {family} {name}\n"))
                .collect(),
            stderr: String::new(),
        }),
        None => runner.run("nft", &["list", "tables"], None),
    }
}

/// Whether the table `family` `name` exists (`family` in nft's words), from the kernel's dump
/// when `kernel` reads it, else by asking `nft list table` for it (which lists its rules).
pub fn exists(runner: &dyn Runner, kernel: &dyn Kernel, family: &str, name: &str) -> bool {
    match kernel.nft_tables() {
        Some(tables) => tables.iter().any(|(f, n)| f == family && n == name),
        None => runner
            .run("nft", &["list", "table", family, name], None)
            .is_ok_and(|output| output.success),
    }
}

/// The dump request with sequence number `seq`.
fn request(seq: u32) -> Vec<u8> {
    dump_request(
        NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETTABLE,
        NFPROTO_UNSPEC,
        seq,
        &[],
    )
}

/// nft's word for an `NFPROTO_*` family.
fn family_name(family: u8) -> Option<&'static str> {
    Some(match family {
        1 => "inet",
        2 => "ip",
        3 => "arp",
        5 => "netdev",
        7 => "bridge",
        10 => "ip6",
        _ => return None,
    })
}

/// Adds the tables of one datagram of the dump to `tables`; says whether the dump is done.
fn parse_part(bytes: &[u8], tables: &mut Vec<(String, String)>) -> io::Result<bool> {
    each_dumped(
        bytes,
        NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWTABLE,
        REQUEST,
        |family, body| {
            let name = attributes(body)
                .find(|(kind, _)| *kind == NFTA_TABLE_NAME)
                .map(|(_, value)| {
                    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
                    String::from_utf8_lossy(&value[..end]).into_owned()
                });
            if let (Some(family), Some(name)) = (family_name(family), name) {
                tables.push((family.to_owned(), name));
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::netlink_bytes::build::{attribute, message};
    use crate::dataplane::netlink_bytes::{HEADER, NFGENMSG, NLMSG_DONE, u16_at, u32_at};

    /// One table as the kernel sends it: header, nfgenmsg, then `NFTA_TABLE_NAME`,
    /// `NFTA_TABLE_FLAGS`, `NFTA_TABLE_USE` and `NFTA_TABLE_HANDLE`.
    fn table(family: u8, name: &str) -> Vec<u8> {
        let mut attrs = Vec::new();
        let mut push = |kind: u16, value: &[u8]| attribute(&mut attrs, kind, value);
        push(NFTA_TABLE_NAME, format!("{name}\0").as_bytes());
        push(2, &0u32.to_be_bytes());
        push(3, &4u32.to_be_bytes());
        push(4, &[0, 0, 0, 0, 0, 0, 0, 9]);
        message(NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWTABLE, family, &attrs)
    }

    #[test]
    fn the_request_dumps_the_tables_of_every_family() {
        let bytes = request(3);
        assert_eq!(bytes.len(), HEADER + NFGENMSG);
        assert_eq!(u32_at(&bytes, 0), Some(20));
        assert_eq!(u16_at(&bytes, 4), Some(0x0a01));
        assert_eq!(u16_at(&bytes, 6), Some(0x301));
        assert_eq!(u32_at(&bytes, 8), Some(3));
        assert_eq!(bytes[HEADER], 0, "NFPROTO_UNSPEC");
    }

    #[test]
    fn tables_are_read_in_nfts_words_across_datagrams() {
        let mut tables = Vec::new();
        let mut first = table(2, "mangle");
        first.extend(table(10, "raw"));
        first.extend(table(4, "unknown-family"));
        assert!(!parse_part(&first, &mut tables).expect("parses"));
        let mut second = table(1, "nodeport_guard");
        second.extend(table(7, "filter"));
        second.extend(message(NLMSG_DONE, 0, &[]));
        assert!(parse_part(&second, &mut tables).expect("parses"));
        let spelled: Vec<String> = tables.iter().map(|(f, n)| format!("{f} {n}")).collect();
        assert_eq!(
            spelled,
            [
                "ip mangle",
                "ip6 raw",
                "inet nodeport_guard",
                "bridge filter"
            ]
        );
    }

    #[test]
    fn a_short_message_is_an_error_not_a_panic() {
        let whole = table(2, "nat");
        // The length still says the whole message.
        for cut in [HEADER - 1, HEADER, HEADER + 2, whole.len() - 3] {
            let mut tables = Vec::new();
            assert!(
                parse_part(&whole[..cut], &mut tables).is_err(),
                "cut at {cut}"
            );
            assert!(tables.is_empty());
        }
    }
}
