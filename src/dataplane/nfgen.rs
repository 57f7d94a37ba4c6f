//! The nf_tables ruleset generation: a number the kernel bumps on every committed nf_tables
//! transaction of the network namespace (`nft -f`, `iptables-nft-restore`, any `nft add` or
//! `delete`), read with one `NFT_MSG_GETGEN` request over netlink. nftables and iptables-nft
//! rules both live in nf_tables, so an unchanged generation means nobody changed them; ipsets
//! and iptables-legacy's x_tables are outside it.

use std::io;

use super::netlink_bytes::{HEADER, NFGENMSG, u16_at, u32_at};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

/// `NFNL_SUBSYS_NFTABLES`, the nfnetlink subsystem of nf_tables.
const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// `NFT_MSG_NEWGEN`: the answer.
const NFT_MSG_NEWGEN: u16 = 15;
/// `NFT_MSG_GETGEN`: the request.
const NFT_MSG_GETGEN: u16 = 16;
/// `NFTA_GEN_ID`: the generation attribute (a big-endian u32).
const NFTA_GEN_ID: u16 = 1;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// `NLM_F_REQUEST`.
const NLM_F_REQUEST: u16 = 1;

/// The current nf_tables generation of this network namespace.
pub fn generation() -> io::Result<u32> {
    let mut socket = Socket::new(NETLINK_NETFILTER)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    socket.send(&request(1), 0)?;
    let mut buffer = Vec::with_capacity(4096);
    socket.recv(&mut buffer, 0)?;
    parse_answer(&buffer)
}

/// The `NFT_MSG_GETGEN` request with sequence number `seq`.
fn request(seq: u32) -> Vec<u8> {
    let length = u32::try_from(HEADER + NFGENMSG).unwrap_or(u32::MAX);
    let mut bytes = Vec::with_capacity(HEADER + NFGENMSG);
    bytes.extend_from_slice(&length.to_ne_bytes());
    bytes.extend_from_slice(&(NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETGEN).to_ne_bytes());
    bytes.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    bytes.extend_from_slice(&seq.to_ne_bytes());
    bytes.extend_from_slice(&0u32.to_ne_bytes());
    // nfgenmsg: AF_UNSPEC, NFNETLINK_V0, res_id 0.
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    bytes
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("NFT_MSG_GETGEN: {what}"),
    )
}

/// The generation in the kernel's answer (or the error it sent instead).
fn parse_answer(bytes: &[u8]) -> io::Result<u32> {
    let length = u32_at(bytes, 0).ok_or_else(|| invalid("short answer"))? as usize;
    let kind = u16_at(bytes, 4).ok_or_else(|| invalid("short answer"))?;
    let message = bytes
        .get(..length.min(bytes.len()))
        .ok_or_else(|| invalid("short answer"))?;
    if kind == NLMSG_ERROR {
        let code = i32::from_ne_bytes(
            message
                .get(HEADER..HEADER + 4)
                .and_then(|code| code.try_into().ok())
                .ok_or_else(|| invalid("short error"))?,
        );
        return Err(io::Error::from_raw_os_error(-code));
    }
    if kind != (NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWGEN) {
        return Err(invalid(&format!("unexpected message type {kind:#x}")));
    }
    let mut at = HEADER + NFGENMSG;
    while let (Some(attr_length), Some(attr_type)) = (u16_at(message, at), u16_at(message, at + 2))
    {
        let attr_length = usize::from(attr_length);
        if attr_length < 4 {
            break;
        }
        if attr_type & 0x3fff == NFTA_GEN_ID {
            let value = message
                .get(at + 4..at + 8)
                .and_then(|value| value.try_into().ok())
                .map(u32::from_be_bytes)
                .ok_or_else(|| invalid("short generation"))?;
            return Ok(value);
        }
        at += (attr_length + 3) & !3;
    }
    Err(invalid("no generation in the answer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's answer as it sends it: header, nfgenmsg, then `NFTA_GEN_ID`,
    /// `NFTA_GEN_PROC_PID` and `NFTA_GEN_PROC_NAME`.
    fn answer(generation: u32) -> Vec<u8> {
        let mut attrs = Vec::new();
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&NFTA_GEN_ID.to_ne_bytes());
        attrs.extend_from_slice(&generation.to_be_bytes());
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&2u16.to_ne_bytes());
        attrs.extend_from_slice(&4242u32.to_be_bytes());
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&3u16.to_ne_bytes());
        attrs.extend_from_slice(b"nft\0");
        let length = u32::try_from(HEADER + NFGENMSG + attrs.len()).expect("small");
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&length.to_ne_bytes());
        bytes.extend_from_slice(&(NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWGEN).to_ne_bytes());
        bytes.extend_from_slice(&0u16.to_ne_bytes());
        bytes.extend_from_slice(&1u32.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 7]);
        bytes.extend_from_slice(&attrs);
        bytes
    }

    #[test]
    fn the_generation_is_read_from_the_kernels_answer() {
        assert_eq!(
            parse_answer(&answer(0x0102_0304)).expect("parses"),
            0x0102_0304
        );
        assert!(parse_answer(&answer(7)[..10]).is_err());
    }

    #[test]
    fn an_error_answer_is_the_kernels_error() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&36u32.to_ne_bytes());
        bytes.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        bytes.extend_from_slice(&0u16.to_ne_bytes());
        bytes.extend_from_slice(&1u32.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes.extend_from_slice(&(-1i32).to_ne_bytes());
        bytes.extend_from_slice(&request(1));
        let error = parse_answer(&bytes).expect_err("an error");
        assert_eq!(error.raw_os_error(), Some(1));
    }

    #[test]
    fn the_request_is_a_getgen_of_the_nftables_subsystem() {
        let bytes = request(9);
        assert_eq!(bytes.len(), 20);
        assert_eq!(u32_at(&bytes, 0), Some(20));
        assert_eq!(u16_at(&bytes, 4), Some(0x0a10));
        assert_eq!(u16_at(&bytes, 6), Some(NLM_F_REQUEST));
        assert_eq!(u32_at(&bytes, 8), Some(9));
    }
}
