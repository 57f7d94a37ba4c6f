//! How many members each ipset holds, read with one netlink dump of the sets' headers: the
//! request `ipset list -t` sends (`IPSET_CMD_LIST` with `IPSET_FLAG_LIST_HEADER`), made
//! in-process. The drift watch polls it: a foreign `ipset flush`, `add` or `del` changes a
//! count, and no program is started, nor any member copied out of the kernel, to see it.

use std::collections::BTreeMap;
use std::io;

use super::netlink_bytes::{attributes, dump_request, each_dumped, read_dump};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

/// `NFNL_SUBSYS_IPSET`.
const NFNL_SUBSYS_IPSET: u16 = 6;
/// `IPSET_CMD_LIST`.
const IPSET_CMD_LIST: u16 = 7;
/// `IPSET_PROTOCOL`: the version of the ipset netlink protocol spoken (7 since Linux 3.x).
const IPSET_PROTOCOL: u8 = 7;
/// `IPSET_ATTR_PROTOCOL`.
const ATTR_PROTOCOL: u16 = 1;
/// `IPSET_ATTR_SETNAME`.
const ATTR_SETNAME: u16 = 2;
/// `IPSET_ATTR_FLAGS`.
const ATTR_FLAGS: u16 = 6;
/// `IPSET_ATTR_DATA`: the nested header of a set.
const ATTR_DATA: u16 = 7;
/// `IPSET_ATTR_ELEMENTS`, inside the data: the number of members (a big-endian u32).
const ATTR_ELEMENTS: u16 = 24;
/// `IPSET_FLAG_LIST_HEADER`: the headers only, no members.
const FLAG_LIST_HEADER: u32 = 1 << 2;
/// `NLA_F_NET_BYTEORDER`.
const NLA_F_NET_BYTEORDER: u16 = 1 << 14;
/// `AF_INET`: the ipset subsystem ignores the family of a list request but wants one.
const AF_INET: u8 = 2;

/// The number of members of every ipset of this network namespace, by name.
pub fn set_sizes() -> io::Result<BTreeMap<String, usize>> {
    let mut socket = Socket::new(NETLINK_NETFILTER)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    socket.send(&request(1), 0)?;
    let mut sizes = BTreeMap::new();
    let mut buffer = Vec::with_capacity(64 * 1024);
    read_dump(&socket, &mut buffer, "IPSET_CMD_LIST", |part| {
        parse_part(part, &mut sizes)
    })?;
    Ok(sizes)
}

/// `IPSET_ATTR_ADT`: the nested list of a set's members in a full listing.
const ATTR_ADT: u16 = 8;

/// A fingerprint of the members of the ipset `name`, whatever order the kernel lists them in:
/// one netlink dump of that set (what `ipset list NAME` asks for, made in-process), each
/// member read as its address, prefix, protocol and port, hashed, and the hashes added. It
/// equals [`fingerprint_of`] the same members as `ipset save` spells them, so a set can be
/// compared with what was written without a program or any text. A member swapped for
/// another leaves the set's size as it was; not its fingerprint.
pub fn set_fingerprint(name: &str) -> io::Result<u64> {
    set_fingerprints(&[name])
        .pop()
        .unwrap_or_else(|| Err(invalid("no answer")))
}

/// [`set_fingerprint`] of each of `names`, in order, over one netlink socket.
pub fn set_fingerprints(names: &[&str]) -> Vec<io::Result<u64>> {
    let socket = Socket::new(NETLINK_NETFILTER).and_then(|mut socket| {
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(socket)
    });
    let socket = match socket {
        Ok(socket) => socket,
        Err(error) => {
            let kind = error.kind();
            return names.iter().map(|_| Err(kind.into())).collect();
        }
    };
    let mut buffer = Vec::with_capacity(64 * 1024);
    let mut one = |seq: u32, name: &str| -> io::Result<u64> {
        socket.send(&members_request(seq, name), 0)?;
        let mut members = Members::default();
        read_dump(&socket, &mut buffer, "IPSET_CMD_LIST", |part| {
            parse_members(part, &mut members)
        })?;
        Ok(members.fingerprint())
    };
    names
        .iter()
        .zip(2u32..)
        .map(|(name, seq)| one(seq, name))
        .collect()
}

/// The fingerprint [`set_fingerprint`] reads for a set of these members, spelled as `ipset
/// save` spells them (`192.0.2.0/24`, `2001:db8::1`, `192.0.2.1,tcp:8080`); `None` when one
/// is spelled otherwise.
pub fn fingerprint_of<'a>(members: impl IntoIterator<Item = &'a str>) -> Option<u64> {
    let mut all = Members::default();
    for member in members {
        all.add(Member::parse(member)?);
    }
    Some(all.fingerprint())
}

/// One member of a set, as the set poll compares them.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Member {
    address: std::net::IpAddr,
    /// The prefix length; the address's whole length for a single address.
    prefix: u8,
    /// The protocol number, 0 when the set has none.
    protocol: u8,
    /// The port, 0 when the set has none.
    port: u16,
}

impl Member {
    /// Reads `ipset save`'s spelling.
    fn parse(text: &str) -> Option<Member> {
        let (address, rest) = match text.split_once(',') {
            Some((address, rest)) => (address, Some(rest)),
            None => (text, None),
        };
        let (address, prefix) = match address.split_once('/') {
            Some((address, prefix)) => (address.parse().ok()?, Some(prefix.parse().ok()?)),
            None => (address.parse().ok()?, None),
        };
        let (protocol, port) = match rest {
            None => (0, 0),
            Some(rest) => {
                let (protocol, port) = rest.split_once(':')?;
                let protocol = match protocol {
                    "tcp" => 6,
                    "udp" => 17,
                    "sctp" => 132,
                    "udplite" => 136,
                    number => number.parse().ok()?,
                };
                (protocol, port.parse().ok()?)
            }
        };
        Some(Member::new(address, prefix, protocol, port))
    }

    fn new(address: std::net::IpAddr, prefix: Option<u8>, protocol: u8, port: u16) -> Member {
        let whole = if address.is_ipv4() { 32 } else { 128 };
        Member {
            address,
            prefix: prefix.unwrap_or(whole),
            protocol,
            port,
        }
    }

    /// Reads a member's attributes in a dump (`IPSET_ATTR_DATA` inside `IPSET_ATTR_ADT`).
    fn from_attributes(data: &[u8]) -> Option<Member> {
        let (mut address, mut prefix, mut protocol, mut port) = (None, None, 0, 0);
        for (kind, value) in attributes(data) {
            match kind {
                ATTR_IP => {
                    for (family, bytes) in attributes(value) {
                        address = match family {
                            ATTR_IPADDR_IPV4 => {
                                let octets: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
                                Some(std::net::IpAddr::from(octets))
                            }
                            ATTR_IPADDR_IPV6 => {
                                let octets: [u8; 16] = bytes.get(..16)?.try_into().ok()?;
                                Some(std::net::IpAddr::from(octets))
                            }
                            _ => address,
                        };
                    }
                }
                ATTR_CIDR => prefix = value.first().copied(),
                ATTR_PORT => port = u16::from_be_bytes(value.get(..2)?.try_into().ok()?),
                ATTR_PROTO => protocol = *value.first()?,
                _ => {}
            }
        }
        Some(Member::new(address?, prefix, protocol, port))
    }
}

/// `IPSET_ATTR_IP`, `IPSET_ATTR_CIDR`, `IPSET_ATTR_PORT` and `IPSET_ATTR_PROTO` of a member,
/// and the address attributes nested in the first.
const ATTR_IP: u16 = 1;
const ATTR_CIDR: u16 = 3;
const ATTR_PORT: u16 = 4;
const ATTR_PROTO: u16 = 7;
const ATTR_IPADDR_IPV4: u16 = 1;
const ATTR_IPADDR_IPV6: u16 = 2;

/// Members hashed one by one and added up, so that their order does not count.
#[derive(Default)]
struct Members {
    count: u64,
    sum: u64,
    /// A member that could not be read makes the whole fingerprint unlike any other.
    unreadable: u64,
}

impl Members {
    fn add(&mut self, member: Member) {
        use std::hash::{Hash as _, Hasher as _};
        let mut hasher = std::hash::DefaultHasher::new();
        member.hash(&mut hasher);
        self.count += 1;
        self.sum = self.sum.wrapping_add(hasher.finish());
    }

    fn fingerprint(&self) -> u64 {
        self.sum ^ self.count.rotate_left(32) ^ self.unreadable.rotate_left(48)
    }
}

/// The request listing the set `name` with its members.
fn members_request(seq: u32, name: &str) -> Vec<u8> {
    let mut attributes = Vec::new();
    attributes.extend_from_slice(&5u16.to_ne_bytes());
    attributes.extend_from_slice(&ATTR_PROTOCOL.to_ne_bytes());
    attributes.extend_from_slice(&[IPSET_PROTOCOL, 0, 0, 0]);
    let mut value = name.as_bytes().to_vec();
    value.push(0);
    attributes.extend_from_slice(
        &u16::try_from(4 + value.len())
            .unwrap_or(u16::MAX)
            .to_ne_bytes(),
    );
    attributes.extend_from_slice(&ATTR_SETNAME.to_ne_bytes());
    attributes.extend_from_slice(&value);
    attributes.resize((attributes.len() + 3) & !3, 0);
    frame(seq, &attributes)
}

/// Adds the members of one datagram of a set's dump; says whether the dump is done.
fn parse_members(bytes: &[u8], members: &mut Members) -> io::Result<bool> {
    each_message(bytes, |body| {
        for (attribute, value) in attributes(body) {
            if attribute == ATTR_ADT {
                for (_, member) in attributes(value) {
                    match Member::from_attributes(member) {
                        Some(member) => members.add(member),
                        None => members.unreadable += 1,
                    }
                }
            }
        }
    })
}

/// The dump request with sequence number `seq`.
fn request(seq: u32) -> Vec<u8> {
    let mut attributes = Vec::new();
    // IPSET_ATTR_PROTOCOL: u8, padded to four bytes.
    attributes.extend_from_slice(&5u16.to_ne_bytes());
    attributes.extend_from_slice(&ATTR_PROTOCOL.to_ne_bytes());
    attributes.extend_from_slice(&[IPSET_PROTOCOL, 0, 0, 0]);
    // IPSET_ATTR_FLAGS: big-endian u32.
    attributes.extend_from_slice(&8u16.to_ne_bytes());
    attributes.extend_from_slice(&(ATTR_FLAGS | NLA_F_NET_BYTEORDER).to_ne_bytes());
    attributes.extend_from_slice(&FLAG_LIST_HEADER.to_be_bytes());
    frame(seq, &attributes)
}

/// An `IPSET_CMD_LIST` dump request carrying `attributes`.
fn frame(seq: u32, attributes: &[u8]) -> Vec<u8> {
    dump_request(
        NFNL_SUBSYS_IPSET << 8 | IPSET_CMD_LIST,
        AF_INET,
        seq,
        attributes,
    )
}

fn invalid(what: &str) -> io::Error {
    super::netlink_bytes::invalid("IPSET_CMD_LIST", what)
}

/// Calls `each` with the body of every `IPSET_CMD_LIST` message of one datagram of a dump;
/// says whether the dump is done.
fn each_message(bytes: &[u8], mut each: impl FnMut(&[u8])) -> io::Result<bool> {
    each_dumped(
        bytes,
        NFNL_SUBSYS_IPSET << 8 | IPSET_CMD_LIST,
        "IPSET_CMD_LIST",
        |_, body| each(body),
    )
}

/// Adds the sets of one datagram of the dump to `sizes`; says whether the dump is done.
fn parse_part(bytes: &[u8], sizes: &mut BTreeMap<String, usize>) -> io::Result<bool> {
    each_message(bytes, |body| {
        let mut name = None;
        let mut elements = None;
        for (attribute, value) in attributes(body) {
            match attribute {
                ATTR_SETNAME => {
                    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
                    name = Some(String::from_utf8_lossy(&value[..end]).into_owned());
                }
                ATTR_DATA => {
                    elements = attributes(value)
                        .find(|(inner, _)| *inner == ATTR_ELEMENTS)
                        .and_then(|(_, count)| count.get(..4)?.try_into().ok())
                        .map(u32::from_be_bytes);
                }
                _ => {}
            }
        }
        if let (Some(name), Some(elements)) = (name, elements) {
            sizes.insert(name, elements as usize);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::netlink_bytes::build::{self, attribute};
    use crate::dataplane::netlink_bytes::{HEADER, NLMSG_DONE, NLMSG_ERROR, u16_at};

    /// One set's header as the kernel sends it (Linux 6.18, read with strace from `ipset list
    /// -t`): protocol, name, type, family, revision, index, then the nested data with the hash
    /// size, maxelem, bucket size, initval, references, memory size and the member count.
    fn header(name: &str, elements: u32) -> Vec<u8> {
        let mut attrs = Vec::new();
        let mut push = |kind: u16, value: &[u8]| attribute(&mut attrs, kind, value);
        push(ATTR_PROTOCOL, &[7]);
        push(ATTR_SETNAME, format!("{name}\0").as_bytes());
        push(3, b"hash:net\0");
        push(5, &[2]);
        push(4, &[7]);
        push(0xb | NLA_F_NET_BYTEORDER, &[0, 0]);
        let mut data = Vec::new();
        for (kind, value) in [
            (0x12, 1024u32),
            (0x13, 65536),
            (0x11, 0x77a7_a543),
            (0x19, 0),
            (0x1a, 504),
            (ATTR_ELEMENTS, elements),
        ] {
            data.extend_from_slice(&8u16.to_ne_bytes());
            data.extend_from_slice(&(kind | NLA_F_NET_BYTEORDER).to_ne_bytes());
            data.extend_from_slice(&value.to_be_bytes());
        }
        push(ATTR_DATA | (1 << 15), &data);
        message(NFNL_SUBSYS_IPSET << 8 | IPSET_CMD_LIST, &attrs)
    }

    fn message(kind: u16, body: &[u8]) -> Vec<u8> {
        build::message(kind, AF_INET, body)
    }

    #[test]
    fn the_request_is_what_ipset_list_terse_sends() {
        let bytes = request(9);
        assert_eq!(bytes.len(), 36);
        assert_eq!(u16_at(&bytes, 4), Some(6 << 8 | 7));
        assert_eq!(u16_at(&bytes, 6), Some(0x301));
        assert_eq!(&bytes[20..28], &[5, 0, 1, 0, 7, 0, 0, 0]);
        assert_eq!(&bytes[28..36], &[8, 0, 6, 0x40, 0, 0, 0, 4]);
    }

    #[test]
    fn each_set_s_member_count_is_read_until_the_dump_ends() {
        let mut sizes = BTreeMap::new();
        let mut part = header("npg4-a", 40);
        part.extend(header("KUBE-NODE-PORT-TCP", 3));
        assert!(!parse_part(&part, &mut sizes).expect("parsed"));
        let done = message(NLMSG_DONE, &[]);
        assert!(parse_part(&done, &mut sizes).expect("parsed"));
        assert_eq!(
            sizes.into_iter().collect::<Vec<_>>(),
            [
                ("KUBE-NODE-PORT-TCP".to_owned(), 3),
                ("npg4-a".to_owned(), 40)
            ]
        );
    }

    #[test]
    fn an_error_from_the_kernel_is_an_error() {
        let mut body = (-1i32).to_ne_bytes().to_vec();
        body.extend_from_slice(&[0; 16]);
        let mut error = message(NLMSG_ERROR, &[]);
        error.truncate(HEADER);
        error.extend_from_slice(&body);
        let length = u32::try_from(error.len()).unwrap();
        error[..4].copy_from_slice(&length.to_ne_bytes());
        let mut sizes = BTreeMap::new();
        assert_eq!(
            parse_part(&error, &mut sizes).unwrap_err().raw_os_error(),
            Some(1)
        );
    }

    #[test]
    fn members_are_read_as_ipset_save_spells_them_whatever_their_order() {
        let one = fingerprint_of(["192.0.2.0/24", "198.51.100.7", "2001:db8::1"]);
        assert!(one.is_some());
        assert_eq!(
            one,
            fingerprint_of(["2001:db8::1", "198.51.100.7/32", "192.0.2.0/24"]),
            "order and a full-length prefix do not count"
        );
        assert_ne!(
            one,
            fingerprint_of(["192.0.2.0/24", "198.51.100.8", "2001:db8::1"])
        );
        assert_ne!(one, fingerprint_of(["192.0.2.0/24", "198.51.100.7"]));
        assert_eq!(
            fingerprint_of(["192.0.2.1,tcp:8080"]),
            fingerprint_of(["192.0.2.1,6:8080"])
        );
        assert_ne!(
            fingerprint_of(["192.0.2.1,tcp:8080"]),
            fingerprint_of(["192.0.2.1,udp:8080"])
        );
        assert_eq!(fingerprint_of(["not an address"]), None);
    }
}
