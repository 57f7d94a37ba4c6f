//! Connection-tracking entries as `conntrack -L -o extended` prints them, and the arguments
//! that delete exactly one of them. Pure: `dataplane::conntrack` runs the program.

use std::net::IpAddr;

use serde::Serialize;

use crate::model::IpFamily;

/// One direction of a tracked connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (TCP, UDP, SCTP, UDP-Lite).
    pub sport: Option<u16>,
    /// Destination port.
    pub dport: Option<u16>,
}

/// One tracked connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Flow {
    pub family: IpFamily,
    /// The protocol number.
    pub protocol: u8,
    /// The TCP state (`ESTABLISHED`, `TIME_WAIT`, …); `None` for other protocols.
    pub state: Option<String>,
    /// The original direction: the packet that opened it, as mangle `PREROUTING` saw it
    /// (before DNAT).
    pub original: Tuple,
    /// The reply direction (after DNAT: its source is where DNAT sent the connection).
    pub reply: Tuple,
}

impl Flow {
    /// Whether DNAT rewrote the destination of the original direction.
    pub fn dnat(&self) -> bool {
        self.reply.src != self.original.dst || self.reply.sport != self.original.dport
    }

    /// `conntrack -D` arguments that delete this connection and no other: family, protocol
    /// and the whole original tuple.
    pub fn delete_args(&self) -> Vec<String> {
        let family = match self.family {
            IpFamily::V4 => "ipv4",
            IpFamily::V6 => "ipv6",
        };
        let mut args = vec![
            "-D".to_owned(),
            "-f".to_owned(),
            family.to_owned(),
            "-p".to_owned(),
            self.protocol.to_string(),
            "--orig-src".to_owned(),
            self.original.src.to_string(),
            "--orig-dst".to_owned(),
            self.original.dst.to_string(),
        ];
        if let Some(port) = self.original.sport {
            args.extend(["--orig-port-src".to_owned(), port.to_string()]);
        }
        if let Some(port) = self.original.dport {
            args.extend(["--orig-port-dst".to_owned(), port.to_string()]);
        }
        args
    }
}

/// Parses one line of `conntrack -L -o extended`, e.g.
/// `ipv4 2 tcp 6 431999 ESTABLISHED src=198.51.100.10 dst=198.51.100.1 sport=40000
/// dport=30008 src=198.51.100.1 dst=198.51.100.10 sport=8080 dport=40000 [ASSURED] mark=0
/// use=1`. `None` for lines that are not an entry (a summary, a protocol without addresses).
pub fn parse_line(line: &str) -> Option<Flow> {
    let mut words = line.split_whitespace();
    let family = match words.next()? {
        "ipv4" => IpFamily::V4,
        "ipv6" => IpFamily::V6,
        _ => return None,
    };
    let _family_number = words.next()?;
    let _protocol_name = words.next()?;
    let protocol: u8 = words.next()?.parse().ok()?;
    let _timeout = words.next()?;
    let mut state = None;
    let mut tuples: Vec<[Option<&str>; 4]> = Vec::new();
    for word in words {
        let Some((key, value)) = word.split_once('=') else {
            if tuples.is_empty() && word.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
                state = Some(word.to_owned());
            }
            continue;
        };
        let slot = match key {
            "src" => 0,
            "dst" => 1,
            "sport" => 2,
            "dport" => 3,
            _ => continue,
        };
        // A new tuple starts at each `src=`.
        if slot == 0 {
            tuples.push([None; 4]);
        }
        if let Some(tuple) = tuples.last_mut()
            && tuple[slot].is_none()
        {
            tuple[slot] = Some(value);
        }
    }
    let tuple = |fields: &[Option<&str>; 4]| -> Option<Tuple> {
        let port = |text: Option<&str>| text.and_then(|t| t.parse().ok());
        Some(Tuple {
            src: fields[0]?.parse().ok()?,
            dst: fields[1]?.parse().ok()?,
            sport: port(fields[2]),
            dport: port(fields[3]),
        })
    };
    Some(Flow {
        family,
        protocol,
        state,
        original: tuple(tuples.first()?)?,
        reply: tuple(tuples.get(1)?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_udp_and_ipv6_entries_parse_with_both_directions() {
        let tcp = parse_line(
            "ipv4     2 tcp      6 431999 ESTABLISHED src=198.51.100.10 dst=198.51.100.1 sport=40000 dport=30008 src=198.51.100.1 dst=198.51.100.10 sport=8080 dport=40000 [ASSURED] mark=0 use=1",
        )
        .expect("tcp");
        assert_eq!(tcp.protocol, 6);
        assert_eq!(tcp.state.as_deref(), Some("ESTABLISHED"));
        assert_eq!(tcp.original.dport, Some(30008));
        assert_eq!(tcp.reply.sport, Some(8080));
        assert!(tcp.dnat());
        assert_eq!(
            tcp.delete_args().join(" "),
            "-D -f ipv4 -p 6 --orig-src 198.51.100.10 --orig-dst 198.51.100.1 --orig-port-src 40000 --orig-port-dst 30008"
        );

        let udp = parse_line(
            "ipv4     2 udp      17 29 src=198.51.100.11 dst=198.51.100.1 sport=5000 dport=9101 [UNREPLIED] src=198.51.100.1 dst=198.51.100.11 sport=9101 dport=5000 mark=0 use=1",
        )
        .expect("udp");
        assert_eq!(udp.state, None);
        assert!(!udp.dnat());

        let v6 = parse_line(
            "ipv6     10 tcp      6 299 ESTABLISHED src=2001:db8:1::10 dst=2001:db8:1::1 sport=40001 dport=22 src=2001:db8:1::1 dst=2001:db8:1::10 sport=22 dport=40001 [ASSURED] mark=0 use=1",
        )
        .expect("ipv6");
        assert_eq!(v6.family, IpFamily::V6);
    }

    #[test]
    fn icmp_entries_have_no_ports_and_summaries_are_not_entries() {
        let icmp = parse_line(
            "ipv4     2 icmp     1 29 src=198.51.100.10 dst=198.51.100.1 type=8 code=0 id=7 src=198.51.100.1 dst=198.51.100.10 type=0 code=0 id=7 mark=0 use=1",
        )
        .expect("icmp");
        assert_eq!(icmp.original.sport, None);
        assert_eq!(
            parse_line("conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown."),
            None
        );
        assert_eq!(parse_line(""), None);
    }
}
