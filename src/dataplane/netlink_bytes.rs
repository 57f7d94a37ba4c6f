//! Reading netlink messages byte by byte: the header fields in host order, with checked
//! access, and the dumps, for the few requests nodeport-guard makes itself (`nfgen`,
//! `nfnotify`, `ipset_sizes`, `nft_tables`).

use std::io;

use netlink_sys::Socket;

/// Bytes of `struct nlmsghdr`.
pub const HEADER: usize = 16;
/// Bytes of `struct nfgenmsg`.
pub const NFGENMSG: usize = 4;
/// `NLMSG_ERROR`.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// `NLM_F_REQUEST | NLM_F_DUMP`.
pub const DUMP_REQUEST: u16 = 0x1 | 0x300;

/// The host-order `u16` at `at`, if `bytes` hold it.
pub fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

/// The host-order `u32` at `at`, if `bytes` hold it.
pub fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// A dump request of nfnetlink message type `kind` (subsystem and message), for `family`
/// (the `nfgenmsg`'s), with sequence number `seq`, carrying `attributes`.
pub fn dump_request(kind: u16, family: u8, seq: u32, attributes: &[u8]) -> Vec<u8> {
    let length = HEADER + NFGENMSG + attributes.len();
    let mut bytes = Vec::with_capacity(length);
    bytes.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_ne_bytes());
    bytes.extend_from_slice(&kind.to_ne_bytes());
    bytes.extend_from_slice(&DUMP_REQUEST.to_ne_bytes());
    bytes.extend_from_slice(&seq.to_ne_bytes());
    bytes.extend_from_slice(&0u32.to_ne_bytes());
    // nfgenmsg: the family, NFNETLINK_V0, res_id 0.
    bytes.extend_from_slice(&[family, 0, 0, 0]);
    bytes.extend_from_slice(attributes);
    bytes
}

/// An error about the answer to the request `request`.
pub fn invalid(request: &str, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{request}: {what}"))
}

/// Receives the datagrams of a dump (the answer to `request`) into `buffer`, each given to
/// `part` until it says the dump is done.
pub fn read_dump(
    socket: &Socket,
    buffer: &mut Vec<u8>,
    request: &str,
    mut part: impl FnMut(&[u8]) -> io::Result<bool>,
) -> io::Result<()> {
    loop {
        buffer.clear();
        socket.recv(buffer, 0)?;
        if buffer.is_empty() {
            return Err(invalid(request, "the kernel closed the dump"));
        }
        if part(buffer)? {
            return Ok(());
        }
    }
}

/// The attributes of `bytes` (type without flags, value), in order.
pub fn attributes(bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let length = usize::from(u16_at(bytes, at)?);
        let kind = u16_at(bytes, at + 2)? & 0x3fff;
        let value = bytes.get(at + 4..at + length.max(4))?;
        at += (length.max(4) + 3) & !3;
        Some((kind, value))
    })
}

/// Calls `each` with the family (the `nfgenmsg`'s) and the attributes of every message of
/// type `kind` in one datagram of a dump (the answer to `request`); says whether the dump is
/// done.
pub fn each_dumped(
    bytes: &[u8],
    kind: u16,
    request: &str,
    mut each: impl FnMut(u8, &[u8]),
) -> io::Result<bool> {
    let mut at = 0;
    while let (Some(length), Some(message_kind)) = (u32_at(bytes, at), u16_at(bytes, at + 4)) {
        let length = length as usize;
        let message = bytes
            .get(at..at + length)
            .filter(|_| length >= HEADER)
            .ok_or_else(|| invalid(request, "short message"))?;
        match message_kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let code = message
                    .get(HEADER..HEADER + 4)
                    .and_then(|code| code.try_into().ok())
                    .map(i32::from_ne_bytes)
                    .ok_or_else(|| invalid(request, "short error"))?;
                return match code {
                    0 => Ok(true),
                    code => Err(io::Error::from_raw_os_error(-code)),
                };
            }
            _ if message_kind == kind => {
                let family = *message
                    .get(HEADER)
                    .ok_or_else(|| invalid(request, "short message"))?;
                each(family, message.get(HEADER + NFGENMSG..).unwrap_or_default());
            }
            _ => {}
        }
        at += (length + 3) & !3;
    }
    Ok(false)
}

/// Building the kernel's messages, for the readers' tests.
#[cfg(test)]
pub mod build {
    use super::{HEADER, NFGENMSG};

    /// Appends the attribute `kind` holding `value`, padded to four bytes.
    pub fn attribute(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
        let length = 4 + value.len();
        out.extend_from_slice(&u16::try_from(length).expect("short").to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        out.resize((out.len() + 3) & !3, 0);
    }

    /// A message of type `kind` (`NLM_F_MULTI`, sequence 1) for `family`, carrying `body`.
    pub fn message(kind: u16, family: u8, body: &[u8]) -> Vec<u8> {
        let length = HEADER + NFGENMSG + body.len();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&u32::try_from(length).expect("short").to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(&2u16.to_ne_bytes());
        bytes.extend_from_slice(&1u32.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes.extend_from_slice(&[family, 0, 0, 0]);
        bytes.extend_from_slice(body);
        bytes
    }
}
