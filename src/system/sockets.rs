//! The sockets of this network namespace that listen (TCP) or are bound without a peer (UDP),
//! read from the kernel with `sock_diag` over netlink (`SOCK_DIAG_BY_FAMILY` dumps, as `ss`
//! does), and the processes that hold them (`/proc/<pid>/fd` links to `socket:[inode]`).
//!
//! The request and the answers are a few fixed structs (`inet_diag_req_v2`, `inet_diag_msg`),
//! written and read here byte by byte like `dataplane::nfgen`; [`parse_dump`] is pure and
//! tested on answers built the way the kernel lays them out. Nothing is written: a dump only
//! reads.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_SOCK_DIAG};

/// `SOCK_DIAG_BY_FAMILY`: the request and its answers.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: the end of a dump.
const NLMSG_DONE: u16 = 3;
/// `NLM_F_REQUEST | NLM_F_DUMP`.
const DUMP_FLAGS: u16 = 0x1 | 0x300;
/// Bytes of `struct nlmsghdr`.
const HEADER: usize = 16;
/// Bytes of `struct inet_diag_msg`.
const DIAG_MSG: usize = 72;
/// `INET_DIAG_SKV6ONLY`: whether an IPv6 socket refuses IPv4 (a `u8`).
const INET_DIAG_SKV6ONLY: u16 = 11;
/// `TCP_LISTEN`, as a socket state.
const TCP_LISTEN: u8 = 10;
/// `TCP_CLOSE`: an unconnected UDP socket.
const TCP_CLOSE: u8 = 7;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// A listening or bound socket, with the processes that hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The IP protocol number (6 TCP, 17 UDP).
    pub protocol: u8,
    /// Its local address (the unspecified address for every address).
    pub address: IpAddr,
    /// Its local port.
    pub port: u16,
    /// For IPv6 on `::`: whether it takes IPv4 too (`IPV6_V6ONLY` off).
    pub dual_stack: bool,
    /// The names of the processes holding it, where `/proc` tells them.
    pub processes: Vec<String>,
}

/// One socket as `sock_diag` tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiagSocket {
    /// Its local address.
    pub address: IpAddr,
    /// Its local port.
    pub port: u16,
    /// Its peer's port (0: none).
    pub peer_port: u16,
    /// Its state (`TCP_LISTEN`, `TCP_CLOSE`, …).
    pub state: u8,
    /// Its inode, to find the processes holding it.
    pub inode: u32,
    /// For IPv6: whether it takes IPv4 too (`IPV6_V6ONLY` off).
    pub dual_stack: bool,
}

/// The listening TCP and bound UDP sockets of this network namespace, both families, with
/// the names of the processes holding them where `/proc` tells them.
pub fn listening() -> io::Result<Vec<Bound>> {
    let mut found = Vec::new();
    for (protocol, wanted) in [(IPPROTO_TCP, TCP_LISTEN), (IPPROTO_UDP, TCP_CLOSE)] {
        for family in [AF_INET, AF_INET6] {
            for socket in dump(family, protocol, 1u32 << wanted)? {
                if socket.state == wanted && socket.peer_port == 0 {
                    found.push((protocol, socket));
                }
            }
        }
    }
    let inodes: BTreeSet<u32> = found.iter().map(|(_, socket)| socket.inode).collect();
    let owners = owners(&inodes);
    Ok(found
        .into_iter()
        .map(|(protocol, socket)| Bound {
            protocol,
            address: socket.address,
            port: socket.port,
            dual_stack: socket.dual_stack,
            processes: owners.get(&socket.inode).cloned().unwrap_or_default(),
        })
        .collect())
}

/// One `SOCK_DIAG_BY_FAMILY` dump of `family` and `protocol` in `states`.
fn dump(family: u8, protocol: u8, states: u32) -> io::Result<Vec<DiagSocket>> {
    let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    socket.send(&request(family, protocol, states, 1), 0)?;
    let mut found = Vec::new();
    let mut buffer = Vec::with_capacity(1 << 16);
    loop {
        buffer.clear();
        socket.recv(&mut buffer, 0)?;
        if buffer.is_empty() {
            return Ok(found);
        }
        let (sockets, done) = parse_dump(&buffer)?;
        found.extend(sockets);
        if done {
            return Ok(found);
        }
    }
}

/// The dump request: `nlmsghdr` and `inet_diag_req_v2` for every socket of `family` and
/// `protocol` in `states`.
fn request(family: u8, protocol: u8, states: u32, seq: u32) -> Vec<u8> {
    let length = HEADER + 56;
    let mut bytes = Vec::with_capacity(length);
    bytes.extend_from_slice(&u32::try_from(length).unwrap_or(0).to_ne_bytes());
    bytes.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    bytes.extend_from_slice(&DUMP_FLAGS.to_ne_bytes());
    bytes.extend_from_slice(&seq.to_ne_bytes());
    bytes.extend_from_slice(&0u32.to_ne_bytes());
    bytes.extend_from_slice(&[family, protocol, 0, 0]);
    bytes.extend_from_slice(&states.to_ne_bytes());
    // `inet_diag_sockid`, all zero: every socket.
    bytes.resize(length, 0);
    bytes
}

/// The sockets in one datagram of a dump's answer, and whether it ended the dump.
pub fn parse_dump(bytes: &[u8]) -> io::Result<(Vec<DiagSocket>, bool)> {
    let mut sockets = Vec::new();
    let mut offset = 0;
    while offset + HEADER <= bytes.len() {
        let length = read_u32(bytes, offset) as usize;
        let kind = u16::from_ne_bytes([bytes[offset + 4], bytes[offset + 5]]);
        if length < HEADER || offset + length > bytes.len() {
            return Err(invalid("a sock_diag answer that does not add up"));
        }
        let body = &bytes[offset + HEADER..offset + length];
        match kind {
            NLMSG_DONE => return Ok((sockets, true)),
            NLMSG_ERROR => {
                let code = body
                    .get(..4)
                    .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                return Err(io::Error::from_raw_os_error(-code));
            }
            SOCK_DIAG_BY_FAMILY => sockets.extend(parse_socket(body)),
            _ => {}
        }
        offset += (length + 3) & !3;
    }
    Ok((sockets, false))
}

/// One `inet_diag_msg` and its attributes.
fn parse_socket(body: &[u8]) -> Option<DiagSocket> {
    if body.len() < DIAG_MSG {
        return None;
    }
    let address = match body[0] {
        AF_INET => IpAddr::V4(Ipv4Addr::new(body[8], body[9], body[10], body[11])),
        AF_INET6 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&body[8..24]);
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    let mut dual_stack = false;
    let mut offset = DIAG_MSG;
    while offset + 4 <= body.len() {
        let length = usize::from(u16::from_ne_bytes([body[offset], body[offset + 1]]));
        let kind = u16::from_ne_bytes([body[offset + 2], body[offset + 3]]);
        if length < 4 || offset + length > body.len() {
            break;
        }
        if kind == INET_DIAG_SKV6ONLY && length > 4 {
            dual_stack = body[offset + 4] == 0;
        }
        offset += (length + 3) & !3;
    }
    Some(DiagSocket {
        address,
        port: u16::from_be_bytes([body[4], body[5]]),
        peer_port: u16::from_be_bytes([body[6], body[7]]),
        state: body[1],
        inode: read_u32(body, 68),
        dual_stack: dual_stack && body[0] == AF_INET6,
    })
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// The names of the processes holding each of `inodes`, from `/proc/<pid>/fd` (processes
/// this user may not look into are passed over: their sockets stay without an owner).
fn owners(inodes: &BTreeSet<u32>) -> BTreeMap<u32, Vec<String>> {
    let mut owners: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return owners;
    };
    for process in processes.filter_map(Result::ok) {
        let pid = process.file_name();
        if !pid.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else {
            continue;
        };
        let mut name: Option<String> = None;
        for fd in fds.filter_map(Result::ok) {
            let Some(inode) = std::fs::read_link(fd.path())
                .ok()
                .and_then(|link| socket_inode(&link.to_string_lossy()))
            else {
                continue;
            };
            if !inodes.contains(&inode) {
                continue;
            }
            let name = name.get_or_insert_with(|| {
                std::fs::read_to_string(process.path().join("comm"))
                    .map(|comm| comm.trim_end().to_owned())
                    .unwrap_or_else(|_| format!("pid {}", pid.to_string_lossy()))
            });
            let names = owners.entry(inode).or_default();
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    owners
}

/// The inode of a `/proc/<pid>/fd` link to a socket (`socket:[1234]`).
fn socket_inode(link: &str) -> Option<u32> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer datagram as the kernel lays it out: `inet_diag_msg`s, then `NLMSG_DONE`.
    /// Family, address, port, state, inode, `INET_DIAG_SKV6ONLY`.
    type Entry<'a> = (u8, &'a [u8], u16, u8, u32, Option<u8>);

    fn answer(sockets: &[Entry<'_>]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for &(family, address, port, state, inode, v6only) in sockets {
            let mut body = vec![0u8; DIAG_MSG];
            body[0] = family;
            body[1] = state;
            body[4..6].copy_from_slice(&port.to_be_bytes());
            body[8..8 + address.len()].copy_from_slice(address);
            body[68..72].copy_from_slice(&inode.to_ne_bytes());
            if let Some(flag) = v6only {
                body.extend_from_slice(&5u16.to_ne_bytes());
                body.extend_from_slice(&INET_DIAG_SKV6ONLY.to_ne_bytes());
                body.extend_from_slice(&[flag, 0, 0, 0]);
            }
            let length = u32::try_from(HEADER + body.len()).expect("small");
            bytes.extend_from_slice(&length.to_ne_bytes());
            bytes.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
            bytes.extend_from_slice(&[0; 10]);
            bytes.extend_from_slice(&body);
        }
        bytes.extend_from_slice(&20u32.to_ne_bytes());
        bytes.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        bytes.extend_from_slice(&[0; 14]);
        bytes
    }

    #[test]
    fn a_dump_answer_gives_addresses_ports_states_inodes_and_dual_stack() {
        let v6: [u8; 16] = "2001:db8:1::1".parse::<Ipv6Addr>().expect("v6").octets();
        let bytes = answer(&[
            (AF_INET, &[198, 51, 100, 1], 9100, TCP_LISTEN, 41, None),
            (AF_INET6, &[0; 16], 22, TCP_LISTEN, 42, Some(0)),
            (AF_INET6, &v6, 8080, TCP_LISTEN, 43, Some(1)),
        ]);
        let (sockets, done) = parse_dump(&bytes).expect("parses");
        assert!(done);
        let seen: Vec<(String, u16, u32, bool)> = sockets
            .iter()
            .map(|s| (s.address.to_string(), s.port, s.inode, s.dual_stack))
            .collect();
        assert_eq!(
            seen,
            [
                ("198.51.100.1".to_owned(), 9100, 41, false),
                ("::".to_owned(), 22, 42, true),
                ("2001:db8:1::1".to_owned(), 8080, 43, false),
            ]
        );
    }

    #[test]
    fn an_error_answer_is_the_kernels_error_and_a_short_one_is_refused() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&20u32.to_ne_bytes());
        bytes.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        bytes.extend_from_slice(&[0; 10]);
        bytes.extend_from_slice(&(-13i32).to_ne_bytes());
        let error = parse_dump(&bytes).expect_err("an error");
        assert_eq!(error.raw_os_error(), Some(13));
        let mut short = answer(&[]);
        short[0] = 200;
        assert!(parse_dump(&short).is_err());
    }

    #[test]
    fn socket_links_name_their_inode() {
        assert_eq!(socket_inode("socket:[1234]"), Some(1234));
        assert_eq!(socket_inode("pipe:[1234]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn this_namespace_can_be_read() {
        // Unprivileged and read-only: every user may dump sockets.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let sockets = listening().expect("sock_diag");
        let ours = sockets
            .iter()
            .find(|socket| socket.port == port && socket.protocol == IPPROTO_TCP)
            .expect("our listener");
        assert!(ours.address.is_loopback());
        assert!(!ours.processes.is_empty(), "{ours:?}");
    }
}
