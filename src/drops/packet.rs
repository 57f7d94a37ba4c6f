//! What a logged packet was, from the first bytes of its IP header (NFLOG copies a few).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// The addresses, protocol and ports of a packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PacketSummary {
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// `tcp`, `udp`, `icmp`, `icmpv6`, `sctp`, or the protocol number.
    pub protocol: String,
    /// Source address.
    pub src: IpAddr,
    /// Source port (TCP, UDP, SCTP, unfragmented).
    pub src_port: Option<u16>,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port (TCP, UDP, SCTP, unfragmented).
    pub dst_port: Option<u16>,
}

/// IPv6 extension headers that may come before the transport header.
const IPV6_EXTENSIONS: [u8; 5] = [0, 43, 44, 51, 60];

/// Reads the IP header at the start of `bytes`; `None` when it is too short or not IP.
pub fn parse(bytes: &[u8]) -> Option<PacketSummary> {
    match bytes.first()? >> 4 {
        4 => parse_v4(bytes),
        6 => parse_v6(bytes),
        _ => None,
    }
}

fn parse_v4(bytes: &[u8]) -> Option<PacketSummary> {
    let header_len = usize::from(bytes.first()? & 0x0f) * 4;
    if header_len < 20 || bytes.len() < 20 {
        return None;
    }
    let fragment_offset = u16::from_be_bytes([bytes[6], bytes[7]]) & 0x1fff;
    let protocol = bytes[9];
    let src = Ipv4Addr::new(bytes[12], bytes[13], bytes[14], bytes[15]);
    let dst = Ipv4Addr::new(bytes[16], bytes[17], bytes[18], bytes[19]);
    let transport = (fragment_offset == 0)
        .then(|| bytes.get(header_len..))
        .flatten();
    Some(summary("ipv4", protocol, src.into(), dst.into(), transport))
}

fn parse_v6(bytes: &[u8]) -> Option<PacketSummary> {
    let src: [u8; 16] = bytes.get(8..24)?.try_into().ok()?;
    let dst: [u8; 16] = bytes.get(24..40)?.try_into().ok()?;
    let mut next = bytes[6];
    let mut at = 40;
    let mut transport = bytes.get(at..);
    // At most a few extension headers; a fragment that is not the first has no ports.
    for _ in 0..8 {
        if !IPV6_EXTENSIONS.contains(&next) {
            break;
        }
        let Some(header) = bytes.get(at..at + 8) else {
            transport = None;
            break;
        };
        let len = match next {
            44 => {
                if u16::from_be_bytes([header[2], header[3]]) >> 3 != 0 {
                    transport = None;
                    next = header[0];
                    break;
                }
                8
            }
            // AH counts in 4-byte units, less two.
            51 => (usize::from(header[1]) + 2) * 4,
            _ => (usize::from(header[1]) + 1) * 8,
        };
        next = header[0];
        at += len;
        transport = bytes.get(at..);
    }
    Some(summary(
        "ipv6",
        next,
        Ipv6Addr::from(src).into(),
        Ipv6Addr::from(dst).into(),
        transport,
    ))
}

fn summary(
    family: &str,
    protocol: u8,
    src: IpAddr,
    dst: IpAddr,
    transport: Option<&[u8]>,
) -> PacketSummary {
    let ports = match protocol {
        6 | 17 | 132 => transport.and_then(|t| {
            let t = t.get(..4)?;
            Some((
                u16::from_be_bytes([t[0], t[1]]),
                u16::from_be_bytes([t[2], t[3]]),
            ))
        }),
        _ => None,
    };
    PacketSummary {
        family: family.to_owned(),
        protocol: protocol_name(protocol),
        src,
        src_port: ports.map(|p| p.0),
        dst,
        dst_port: ports.map(|p| p.1),
    }
}

fn protocol_name(number: u8) -> String {
    match number {
        1 => "icmp".to_owned(),
        6 => "tcp".to_owned(),
        17 => "udp".to_owned(),
        58 => "icmpv6".to_owned(),
        132 => "sctp".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An IPv4 header (20 bytes) and the first 4 bytes of a transport header.
    pub(crate) fn ipv4(protocol: u8, src: [u8; 4], dst: [u8; 4], ports: (u16, u16)) -> Vec<u8> {
        let mut bytes = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, protocol, 0, 0];
        bytes.extend(src);
        bytes.extend(dst);
        bytes.extend(ports.0.to_be_bytes());
        bytes.extend(ports.1.to_be_bytes());
        bytes
    }

    fn ipv6(next: u8, extensions: &[u8], ports: (u16, u16)) -> Vec<u8> {
        let mut bytes = vec![0x60, 0, 0, 0, 0, 40, next, 64];
        bytes.extend("2001:db8::1".parse::<Ipv6Addr>().expect("ip").octets());
        bytes.extend("2001:db8::2".parse::<Ipv6Addr>().expect("ip").octets());
        bytes.extend(extensions);
        bytes.extend(ports.0.to_be_bytes());
        bytes.extend(ports.1.to_be_bytes());
        bytes
    }

    #[test]
    fn reads_ipv4_tcp_and_udp() {
        let tcp = parse(&ipv4(6, [192, 0, 2, 7], [198, 51, 100, 1], (40000, 30080))).expect("tcp");
        assert_eq!(tcp.family, "ipv4");
        assert_eq!(tcp.protocol, "tcp");
        assert_eq!(tcp.src, "192.0.2.7".parse::<IpAddr>().expect("ip"));
        assert_eq!(tcp.dst, "198.51.100.1".parse::<IpAddr>().expect("ip"));
        assert_eq!((tcp.src_port, tcp.dst_port), (Some(40000), Some(30080)));
        let udp = parse(&ipv4(17, [192, 0, 2, 7], [198, 51, 100, 1], (5, 53))).expect("udp");
        assert_eq!((udp.protocol.as_str(), udp.dst_port), ("udp", Some(53)));
    }

    #[test]
    fn no_ports_for_icmp_fragments_or_short_copies() {
        let icmp = parse(&ipv4(1, [192, 0, 2, 7], [198, 51, 100, 1], (0x0800, 0))).expect("icmp");
        assert_eq!((icmp.protocol.as_str(), icmp.dst_port), ("icmp", None));
        let mut fragment = ipv4(6, [192, 0, 2, 7], [198, 51, 100, 1], (1, 2));
        fragment[7] = 10;
        assert_eq!(parse(&fragment).expect("fragment").dst_port, None);
        let short = &ipv4(6, [192, 0, 2, 7], [198, 51, 100, 1], (1, 2))[..22];
        assert_eq!(parse(short).expect("short").dst_port, None);
        assert_eq!(parse(&[0x45, 0, 0]), None);
        assert_eq!(parse(&[]), None);
        assert_eq!(parse(&[0x20; 40]), None);
        // A header length below 20 bytes is not IPv4.
        let mut bad = ipv4(6, [192, 0, 2, 7], [198, 51, 100, 1], (1, 2));
        bad[0] = 0x44;
        assert_eq!(parse(&bad), None);
    }

    #[test]
    fn reads_ipv6_through_extension_headers() {
        let plain = parse(&ipv6(6, &[], (1234, 443))).expect("v6");
        assert_eq!(plain.family, "ipv6");
        assert_eq!(plain.src, "2001:db8::1".parse::<IpAddr>().expect("ip"));
        assert_eq!(
            (plain.protocol.as_str(), plain.dst_port),
            ("tcp", Some(443))
        );
        // Hop-by-hop options (8 bytes), then UDP.
        let hop = parse(&ipv6(0, &[17, 0, 1, 4, 0, 0, 0, 0], (1, 53))).expect("hop");
        assert_eq!((hop.protocol.as_str(), hop.dst_port), ("udp", Some(53)));
        // A first fragment has ports; a later one has not.
        let first = parse(&ipv6(44, &[17, 0, 0, 1, 0, 0, 0, 9], (1, 53))).expect("frag");
        assert_eq!(first.dst_port, Some(53));
        let later = parse(&ipv6(44, &[17, 0, 0, 0x10, 0, 0, 0, 9], (1, 53))).expect("frag");
        assert_eq!((later.protocol.as_str(), later.dst_port), ("udp", None));
        let icmp = parse(&ipv6(58, &[], (0x8000, 0))).expect("icmpv6");
        assert_eq!((icmp.protocol.as_str(), icmp.dst_port), ("icmpv6", None));
        // Cut inside an extension header.
        let cut = &ipv6(0, &[17, 0, 1, 4, 0, 0, 0, 0], (1, 53))[..44];
        assert_eq!(parse(cut).expect("cut").dst_port, None);
    }
}
