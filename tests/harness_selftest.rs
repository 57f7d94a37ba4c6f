//! Self-tests of the kernel test harness in `tests/support`.
//!
//! The kernel tests build real network namespaces and check that the harness
//! does what it promises: namespaces appear and disappear, every client source
//! reaches the node, both DNAT paths work with both iptables flavours, a DROP
//! rule turns into a timeout (and nothing else), NFLOG messages are captured
//! with the right prefix and source, and the node's own outbound connection
//! from a fixed local port completes. The first few tests need no kernel.

mod support;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use support::{
    Backend, CONNECT_TIMEOUT, ConnectError, DROP_TIMEOUT, Family, GateDecision, Lab, Netns,
    NflogCapture, Proto, Role, addr, conntrack_flush, conntrack_list, gate_decision,
    ipset_list_names, nflog, nft_list_ruleset, ports, replies,
};

/// How long to wait for an NFLOG message that must arrive.
const NFLOG_TIMEOUT: Duration = Duration::from_secs(5);

fn sa(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

/// Names of all namespaces currently listed by `ip netns list`.
fn netns_names() -> BTreeSet<String> {
    support::cmd::run_ok("ip", &["netns", "list"])
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The message of a caught panic, for asserting on its content.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else {
        "<non-string panic>".to_string()
    }
}

// ---------------------------------------------------------------------------
// Tests that need no kernel.
// ---------------------------------------------------------------------------

#[test]
fn gate_skips_or_fails_as_configured() {
    assert_eq!(gate_decision(None, false), GateDecision::Run);
    assert_eq!(gate_decision(None, true), GateDecision::Run);
    assert_eq!(
        gate_decision(Some("needs root"), false),
        GateDecision::Skip("needs root".into())
    );
    assert_eq!(
        gate_decision(Some("needs root"), true),
        GateDecision::Fail("needs root".into())
    );
    assert_eq!(
        support::REQUIRE_KERNEL_TESTS_ENV,
        "NPG_REQUIRE_KERNEL_TESTS"
    );
}

#[test]
fn wait_until_polls_until_true_and_gives_up_at_deadline() {
    let mut calls = 0;
    assert!(support::wait_until(
        Duration::from_secs(5),
        Duration::from_millis(1),
        || {
            calls += 1;
            calls >= 3
        }
    ));
    assert_eq!(calls, 3);

    let start = Instant::now();
    assert!(!support::wait_until(
        Duration::from_millis(50),
        Duration::from_millis(10),
        || false
    ));
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(50),
        "returned early: {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(2), "overslept: {elapsed:?}");
}

#[test]
fn backend_names_the_right_binaries() {
    assert_eq!(Backend::Legacy.iptables(Family::V4), "iptables-legacy");
    assert_eq!(Backend::Legacy.iptables(Family::V6), "ip6tables-legacy");
    assert_eq!(Backend::Nft.iptables(Family::V4), "iptables-nft");
    assert_eq!(Backend::Nft.iptables(Family::V6), "ip6tables-nft");
    assert_eq!(Backend::Nft.iptables_save(Family::V6), "ip6tables-nft-save");
    assert_eq!(
        Backend::Legacy.iptables_restore(Family::V4),
        "iptables-legacy-restore"
    );
}

/// Appends one NFLOG TLV (native byte order header, padded to 4 bytes).
fn tlv(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = u16::try_from(4 + value.len()).expect("TLV too long for the test");
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// A pcap stream (native byte order, NFLOG link type) with the given records.
fn pcap(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4_u32.to_ne_bytes());
    out.extend_from_slice(&2u16.to_ne_bytes());
    out.extend_from_slice(&4u16.to_ne_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_ne_bytes());
    out.extend_from_slice(&nflog::LINKTYPE_NFLOG.to_ne_bytes());
    for record in records {
        let len = u32::try_from(record.len()).expect("record too long for the test");
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(record);
    }
    out
}

fn nflog_record(family: u8, prefix: &str, hook: u8, payload: &[u8]) -> Vec<u8> {
    let mut rec = vec![family, 0, 0, 1];
    tlv(&mut rec, nflog::NFULA_PACKET_HDR, &[0x08, 0x00, hook, 0]);
    tlv(&mut rec, nflog::NFULA_IFINDEX_INDEV, &2u32.to_be_bytes());
    let mut p = prefix.as_bytes().to_vec();
    p.push(0);
    tlv(&mut rec, nflog::NFULA_PREFIX, &p);
    tlv(&mut rec, nflog::NFULA_PAYLOAD, payload);
    rec
}

#[test]
fn pcap_parser_reads_nflog_records() {
    // IPv4 TCP SYN 198.51.100.11:40000 -> 198.51.100.1:30008.
    let mut v4 = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0];
    v4.extend_from_slice(&addr::CLIENT_V4[1].octets());
    v4.extend_from_slice(&addr::NODE_V4.octets());
    v4.extend_from_slice(&40000u16.to_be_bytes());
    v4.extend_from_slice(&30008u16.to_be_bytes());
    v4.extend_from_slice(&[0; 16]);
    // IPv6 with a hop-by-hop header, then UDP 2001:db8:2::10:5000 -> [2001:db8:1::1]:30053.
    let mut v6 = vec![0x60, 0, 0, 0, 0, 16, 0, 64];
    v6.extend_from_slice(&addr::CLIENT_REMOTE_V6[0].octets());
    v6.extend_from_slice(&addr::NODE_V6.octets());
    v6.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    v6.extend_from_slice(&5000u16.to_be_bytes());
    v6.extend_from_slice(&30053u16.to_be_bytes());
    v6.extend_from_slice(&[0, 8, 0, 0]);

    let stream = pcap(&[
        nflog_record(2, "DPI0|allow-cluster-nodeport-only", 0, &v4),
        nflog_record(10, "DPI1|v6", 1, &v6),
    ]);
    let mut events = Vec::new();
    nflog::read_nflog_pcap(stream.as_slice(), |e| events.push(e)).expect("valid stream");
    assert_eq!(events.len(), 2, "{events:?}");

    let e = &events[0];
    assert_eq!(e.prefix, "DPI0|allow-cluster-nodeport-only");
    assert_eq!(e.family, 2);
    assert_eq!(e.hook, Some(0));
    assert_eq!(e.indev, Some(2));
    assert_eq!(e.src, Some(addr::CLIENT_V4[1].into()));
    assert_eq!(e.dst, Some(addr::NODE_V4.into()));
    assert_eq!(
        (e.proto, e.sport, e.dport),
        (Some(6), Some(40000), Some(30008))
    );
    assert_eq!(
        e.to_string(),
        "[DPI0|allow-cluster-nodeport-only] tcp 198.51.100.11:40000 -> 198.51.100.1:30008 hook=0"
    );

    let e = &events[1];
    assert_eq!(e.prefix, "DPI1|v6");
    assert_eq!(e.src, Some(addr::CLIENT_REMOTE_V6[0].into()));
    assert_eq!(e.dst, Some(addr::NODE_V6.into()));
    assert_eq!(
        (e.proto, e.sport, e.dport),
        (Some(17), Some(5000), Some(30053))
    );
}

#[test]
fn pcap_parser_rejects_other_streams_and_tolerates_truncation() {
    let mut wrong_link = pcap(&[]);
    wrong_link[20..24].copy_from_slice(&1u32.to_ne_bytes());
    let err = nflog::read_nflog_pcap(wrong_link.as_slice(), |_| {}).expect_err("link type 1");
    assert!(err.contains("link type"), "{err}");

    let err = nflog::read_nflog_pcap(&b"definitely not a pcap stream"[..], |_| {})
        .expect_err("bad magic");
    assert!(err.contains("magic"), "{err}");

    // A capture killed mid-record ends the stream without an error.
    let mut truncated = pcap(&[nflog_record(2, "x", 0, &[0x45])]);
    truncated.truncate(truncated.len() - 3);
    let mut n = 0;
    nflog::read_nflog_pcap(truncated.as_slice(), |_| n += 1).expect("truncation is EOF");
    assert_eq!(n, 0);
    // And an empty stream (killed before the header was flushed) is fine too.
    nflog::read_nflog_pcap(&[][..], |_| n += 1).expect("empty stream");
}

// ---------------------------------------------------------------------------
// Namespaces.
// ---------------------------------------------------------------------------

#[test]
fn netns_is_created_and_removed() {
    support::require_kernel!();
    let ns = Netns::new();
    let name = ns.name().to_string();
    assert!(name.starts_with("npgt-"), "{name}");
    assert!(
        netns_names().contains(&name),
        "{name} not in `ip netns list`"
    );
    assert!(ns.path().exists());
    let lo = ns.ip(&["-o", "link", "show", "lo"]);
    assert!(lo.contains("UP"), "lo is not up: {lo}");

    drop(ns);
    assert!(
        !netns_names().contains(&name),
        "{name} still in `ip netns list` after drop"
    );
}

#[test]
fn netns_exec_helpers_report_everything() {
    support::require_kernel!();
    let ns = Netns::new();
    let out = ns.exec_with_stdin("cat", &[] as &[&str], b"hello from stdin");
    assert!(out.success(), "{out}");
    assert_eq!(out.stdout, "hello from stdin");

    // The command runs inside the namespace: it sees only lo.
    let links = ns.exec_ok("ip", &["-o", "link"]);
    assert_eq!(links.lines().count(), 1, "{links}");

    // exec_ok must name the command, the status and the stderr on failure.
    let payload = catch_unwind(AssertUnwindSafe(|| {
        ns.exec_ok("ip", &["link", "show", "no-such-dev0"]);
    }))
    .expect_err("exec_ok must panic on failure");
    let msg = panic_message(payload.as_ref());
    assert!(msg.contains("netns exec"), "{msg}");
    assert!(msg.contains("no-such-dev0"), "{msg}");
    assert!(msg.contains("exit status"), "{msg}");
    assert!(msg.contains("--- stderr ---"), "{msg}");

    ns.sysctl("net.ipv4.ip_forward", "1");
    assert_eq!(ns.read_sysctl("net.ipv4.ip_forward"), "1");
    assert_eq!(
        ns.exec_ok("cat", &["/proc/sys/net/ipv4/ip_forward"]).trim(),
        "1",
        "the sysctl must be set inside the namespace"
    );
}

#[test]
fn lab_is_cleaned_up_when_the_test_panics() {
    support::require_kernel!();
    let mut names = Vec::new();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let lab = Lab::new(Backend::Nft);
        names.extend([&lab.node(), &lab.client(), &lab.pod()].map(|n| n.name().to_string()));
        panic!("simulated test failure");
    }));
    assert!(result.is_err());
    assert_eq!(names.len(), 3);
    let left = netns_names();
    for name in &names {
        assert!(!left.contains(name), "{name} survived a panicking test");
    }
}

#[test]
fn lab_is_cleaned_up_when_building_fails_half_way() {
    support::require_kernel!();
    // The unspecified address cannot be assigned, so the build fails after
    // the namespaces and links exist.
    let payload = catch_unwind(|| {
        Lab::builder(Backend::Legacy)
            .client_source(std::net::Ipv6Addr::UNSPECIFIED)
            .build()
    })
    .expect_err("assigning :: must fail");
    let msg = panic_message(payload.as_ref());
    assert!(msg.contains("addr add ::/128"), "{msg}");
    let name = msg
        .split_whitespace()
        .find(|word| word.starts_with("npgt-"))
        .unwrap_or_else(|| panic!("no namespace name in: {msg}"));
    assert!(
        !netns_names().contains(name),
        "{name} survived a failed build"
    );
}

// ---------------------------------------------------------------------------
// Reachability and DNAT.
// ---------------------------------------------------------------------------

#[test]
fn plain_service_is_reachable_from_every_source() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nft);
    for family in Family::ALL {
        let target = sa(family.node_addr(), ports::HOST_SERVICE);
        let sources: Vec<IpAddr> = family
            .client_addrs()
            .into_iter()
            .chain(family.client_remote_addrs())
            .collect();
        for &src in &sources {
            let reply = lab
                .connect(src, target, CONNECT_TIMEOUT)
                .unwrap_or_else(|e| panic!("{src} -> {target}: {e}"));
            assert_eq!(reply, replies::HOST_SERVICE);
        }
        // The server saw the original source addresses, in order.
        let seen: Vec<IpAddr> = lab
            .tcp_server(target)
            .peers()
            .iter()
            .map(|p| p.ip())
            .collect();
        assert_eq!(seen, sources);
    }
}

#[test]
fn closed_port_is_refused_not_timed_out() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nft);
    let start = Instant::now();
    let err = lab
        .connect(
            addr::CLIENT_V4[0].into(),
            sa(addr::NODE_V4, 1),
            DROP_TIMEOUT,
        )
        .expect_err("nothing listens on port 1");
    assert_eq!(err, ConnectError::Refused);
    assert!(
        start.elapsed() < DROP_TIMEOUT,
        "a refusal must be immediate"
    );
    let err = lab
        .connect(
            addr::CLIENT_V6[0].into(),
            sa(addr::NODE_V6, 1),
            DROP_TIMEOUT,
        )
        .expect_err("nothing listens on port 1");
    assert_eq!(err, ConnectError::Refused);
}

#[test]
fn reject_is_reported_as_refused_or_unreachable_not_as_timeout() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Legacy);
    let target = sa(addr::NODE_V4, ports::HOST_SERVICE);
    let reset = addr::CLIENT_V4[1];
    let port_unreachable = addr::CLIENT_V4[2];
    let prohibited = addr::CLIENT_V4[3];
    for (src, with) in [
        (reset, "tcp-reset"),
        (port_unreachable, "icmp-port-unreachable"),
        (prohibited, "icmp-admin-prohibited"),
    ] {
        let src = src.to_string();
        let rule = [
            "-I",
            "INPUT",
            "-s",
            &src,
            "-p",
            "tcp",
            "-j",
            "REJECT",
            "--reject-with",
            with,
        ];
        lab.iptables_ok(Family::V4, &rule);
    }
    let connect = |src: std::net::Ipv4Addr| {
        lab.connect(src.into(), target, DROP_TIMEOUT)
            .expect_err("rejected")
    };
    assert_eq!(connect(reset), ConnectError::Refused);
    // ICMP answers to a SYN are only "soft" errors on this path; the helper
    // must still not report them as a silent drop.
    assert_eq!(connect(port_unreachable), ConnectError::Refused);
    let err = connect(prohibited);
    assert!(matches!(err, ConnectError::Unreachable(_)), "{err}");
}

fn nodeport_dnat_reaches_local_server(backend: Backend) {
    let lab = Lab::new(backend);
    for family in Family::ALL {
        let nodeport = sa(family.node_addr(), ports::NODEPORT);
        let target = sa(family.node_addr(), ports::NODEPORT_TARGET);
        for src in [family.client_addrs()[2], family.client_remote_addrs()[1]] {
            let reply = lab
                .connect(src, nodeport, CONNECT_TIMEOUT)
                .unwrap_or_else(|e| panic!("{backend}: {src} -> {nodeport}: {e}"));
            assert_eq!(reply, replies::NODEPORT_TARGET);
        }
        let server = lab.tcp_server(target);
        assert_eq!(server.accepted(), 2, "{backend} {family}");
    }
    let rules = lab.iptables_save(Family::V4);
    assert!(
        rules.contains("--dport 30008 -j DNAT --to-destination 198.51.100.1:8080"),
        "{rules}"
    );
}

#[test]
fn nodeport_dnat_reaches_local_server_legacy() {
    support::require_kernel!();
    nodeport_dnat_reaches_local_server(Backend::Legacy);
}

#[test]
fn nodeport_dnat_reaches_local_server_nft() {
    support::require_kernel!();
    nodeport_dnat_reaches_local_server(Backend::Nft);
}

fn docker_dnat_reaches_container(backend: Backend) {
    let lab = Lab::new(backend);
    for family in Family::ALL {
        let published = sa(family.node_addr(), ports::PUBLISHED);
        let src = family.client_addrs()[0];
        let reply = lab
            .connect(src, published, CONNECT_TIMEOUT)
            .unwrap_or_else(|e| panic!("{backend}: {src} -> {published}: {e}"));
        assert_eq!(reply, replies::CONTAINER);
        // Forwarded, not masqueraded: the container sees the client address.
        let server = lab.tcp_server(sa(family.pod_addr(), ports::CONTAINER));
        assert_eq!(
            server.peers().iter().map(|p| p.ip()).collect::<Vec<_>>(),
            vec![src]
        );
    }
}

#[test]
fn docker_dnat_reaches_container_legacy() {
    support::require_kernel!();
    docker_dnat_reaches_container(Backend::Legacy);
}

#[test]
fn docker_dnat_reaches_container_nft() {
    support::require_kernel!();
    docker_dnat_reaches_container(Backend::Nft);
}

// ---------------------------------------------------------------------------
// Drops, NFLOG, UDP.
// ---------------------------------------------------------------------------

fn drop_rule(lab: &Lab, family: Family, src: IpAddr, dport: u16, proto: &str, target: &[&str]) {
    let src = src.to_string();
    let dport = dport.to_string();
    let mut args = vec![
        "-t",
        "mangle",
        "-I",
        "PREROUTING",
        "-s",
        &src,
        "-p",
        proto,
        "--dport",
        &dport,
        "-j",
    ];
    args.extend_from_slice(target);
    lab.iptables_ok(family, &args);
}

fn mangle_drop_times_out_only_for_that_source(backend: Backend) {
    let lab = Lab::new(backend);
    for family in Family::ALL {
        let nodeport = sa(family.node_addr(), ports::NODEPORT);
        let blocked = family.client_addrs()[1];
        let allowed = family.client_addrs()[0];
        drop_rule(&lab, family, blocked, ports::NODEPORT, "tcp", &["DROP"]);

        let start = Instant::now();
        let err = lab
            .connect(blocked, nodeport, DROP_TIMEOUT)
            .expect_err("the dropped source must not connect");
        assert_eq!(err, ConnectError::TimedOut, "{backend} {family}");
        assert!(
            start.elapsed() >= DROP_TIMEOUT.mul_f32(0.9),
            "a timeout must take the whole timeout: {:?}",
            start.elapsed()
        );
        let reply = lab
            .connect(allowed, nodeport, CONNECT_TIMEOUT)
            .unwrap_or_else(|e| panic!("{backend}: {allowed} must still connect: {e}"));
        assert_eq!(reply, replies::NODEPORT_TARGET);
        assert_eq!(
            lab.tcp_server(sa(family.node_addr(), ports::NODEPORT_TARGET))
                .accepted(),
            1
        );
    }
}

#[test]
fn mangle_drop_times_out_only_for_that_source_legacy() {
    support::require_kernel!();
    mangle_drop_times_out_only_for_that_source(Backend::Legacy);
}

#[test]
fn mangle_drop_times_out_only_for_that_source_nft() {
    support::require_kernel!();
    mangle_drop_times_out_only_for_that_source(Backend::Nft);
}

fn nflog_before_drop_is_captured(backend: Backend) {
    let lab = Lab::new(backend);
    let capture = NflogCapture::start(lab.node(), 1);
    for family in Family::ALL {
        let blocked = family.client_addrs()[1];
        let prefix = format!("DPI0|test-policy-{family}");
        drop_rule(&lab, family, blocked, ports::NODEPORT, "tcp", &["DROP"]);
        // Inserted at the top, so it runs before the DROP.
        drop_rule(
            &lab,
            family,
            blocked,
            ports::NODEPORT,
            "tcp",
            &["NFLOG", "--nflog-group", "1", "--nflog-prefix", &prefix],
        );
        let nodeport = sa(family.node_addr(), ports::NODEPORT);
        let err = lab
            .connect(blocked, nodeport, DROP_TIMEOUT)
            .expect_err("dropped");
        assert!(err.is_timeout(), "{backend} {family}: {err}");

        let event = capture.expect_prefix(&prefix, NFLOG_TIMEOUT);
        assert_eq!(event.prefix, prefix);
        assert_eq!(event.src, Some(blocked), "{event}");
        assert_eq!(event.dst, Some(family.node_addr()), "{event}");
        assert_eq!(event.proto, Some(6), "{event}");
        assert_eq!(event.dport, Some(ports::NODEPORT), "{event}");
        assert_eq!(event.hook, Some(0), "logged in PREROUTING: {event}");
    }
    // An allowed source is not logged. The wait must outlast the kernel's
    // NFLOG flush interval, or a batched message could still be on its way.
    let allowed = addr::CLIENT_V4[0];
    lab.connect(
        allowed.into(),
        sa(addr::NODE_V4, ports::NODEPORT),
        CONNECT_TIMEOUT,
    )
    .expect("allowed source connects");
    capture.expect_none(
        nflog::NFLOG_FLUSH_INTERVAL + Duration::from_millis(500),
        |e| e.src == Some(allowed.into()),
    );
}

#[test]
fn nflog_capture_reports_why_it_cannot_start() {
    support::require_kernel!();
    let ns = Netns::new();
    let _first = NflogCapture::start(&ns, 7);
    // The kernel allows one listener per NFLOG group and namespace.
    let payload = catch_unwind(AssertUnwindSafe(|| NflogCapture::start(&ns, 7)))
        .expect_err("group 7 is already taken");
    let msg = panic_message(payload.as_ref());
    assert!(msg.contains("nflog:7"), "{msg}");
    assert!(msg.contains("--- stderr ---"), "{msg}");
    assert!(
        msg.contains("tcpdump:"),
        "tcpdump's own error must be shown: {msg}"
    );
}

#[test]
fn nflog_before_drop_is_captured_legacy() {
    support::require_kernel!();
    nflog_before_drop_is_captured(Backend::Legacy);
}

#[test]
fn nflog_before_drop_is_captured_nft() {
    support::require_kernel!();
    nflog_before_drop_is_captured(Backend::Nft);
}

fn udp_nodeport_and_drop(backend: Backend) {
    let lab = Lab::new(backend);
    for family in Family::ALL {
        let nodeport = sa(family.node_addr(), ports::NODEPORT_UDP);
        let (allowed, blocked) = (family.client_addrs()[0], family.client_remote_addrs()[2]);
        let reply = lab
            .udp_probe(allowed, nodeport, CONNECT_TIMEOUT)
            .unwrap_or_else(|e| panic!("{backend} udp {allowed} -> {nodeport}: {e}"));
        assert_eq!(reply, replies::NODEPORT_UDP_TARGET);

        let closed = sa(family.node_addr(), 9);
        let err = lab
            .udp_probe(allowed, closed, DROP_TIMEOUT)
            .expect_err("closed UDP port");
        assert_eq!(err, ConnectError::Refused, "ICMP port unreachable expected");

        drop_rule(&lab, family, blocked, ports::NODEPORT_UDP, "udp", &["DROP"]);
        let err = lab
            .udp_probe(blocked, nodeport, DROP_TIMEOUT)
            .expect_err("dropped UDP");
        assert_eq!(err, ConnectError::TimedOut);
        let server = lab.udp_server(sa(family.node_addr(), ports::NODEPORT_UDP_TARGET));
        assert_eq!(server.received(), 1, "{backend} {family}");
    }
}

#[test]
fn udp_nodeport_and_drop_legacy() {
    support::require_kernel!();
    udp_nodeport_and_drop(Backend::Legacy);
}

#[test]
fn udp_nodeport_and_drop_nft() {
    support::require_kernel!();
    udp_nodeport_and_drop(Backend::Nft);
}

// ---------------------------------------------------------------------------
// The node's own outbound connections.
// ---------------------------------------------------------------------------

#[test]
fn node_outbound_connection_from_fixed_port_completes() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nft);
    for family in Family::ALL {
        let dst = sa(family.client_addrs()[0], ports::CLIENT_SERVICE);
        // Twice, to show that the fixed port can be reused right away.
        for _ in 0..2 {
            let reply = lab
                .node_connect_from_port(ports::NODE_EPHEMERAL, dst, CONNECT_TIMEOUT)
                .unwrap_or_else(|e| panic!("node -> {dst} from port 49125: {e}"));
            assert_eq!(reply, replies::CLIENT_SERVICE);
        }
        let peers = lab.tcp_server(dst).peers();
        assert_eq!(peers.len(), 2);
        for peer in peers {
            assert_eq!(peer, sa(family.node_addr(), ports::NODE_EPHEMERAL));
        }
    }
}

#[test]
fn node_outbound_connection_times_out_when_replies_are_dropped() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Legacy);
    // The regression the tool must avoid: dropping *replies* to the node's own
    // connection because their destination port lies in a guarded range.
    lab.iptables_ok(
        Family::V4,
        &["-I", "INPUT", "-p", "tcp", "--dport", "49125", "-j", "DROP"],
    );
    let dst = sa(addr::CLIENT_V4[0], ports::CLIENT_SERVICE);
    let err = lab
        .node_connect_from_port(ports::NODE_EPHEMERAL, dst, DROP_TIMEOUT)
        .expect_err("replies are dropped");
    assert!(err.is_timeout(), "{err}");
}

// ---------------------------------------------------------------------------
// Building blocks and state helpers.
// ---------------------------------------------------------------------------

#[test]
fn custom_lab_with_extra_sources_servers_and_dnat() {
    support::require_kernel!();
    let extra_v4: IpAddr = "203.0.113.77".parse().expect("literal");
    let extra_v6: IpAddr = "2001:db8:1::77".parse().expect("literal");
    let far_v6: IpAddr = "2001:db8:4::5".parse().expect("literal");
    let mut lab = Lab::builder(Backend::Legacy)
        .standard_services(false)
        .client_source(extra_v4)
        .build();
    lab.add_client_source(extra_v6);
    lab.add_client_source(far_v6);
    lab.add_client_source(extra_v6); // idempotent

    // The bare lab has no DNAT rules and no servers.
    assert!(!lab.iptables_save(Family::V4).contains("DNAT"));
    let err = lab
        .connect(
            extra_v4,
            sa(addr::NODE_V4, ports::HOST_SERVICE),
            DROP_TIMEOUT,
        )
        .expect_err("no server");
    assert!(err.is_refused(), "{err}");

    let v4 = lab.serve_tcp(Role::Node, sa(addr::NODE_V4, 0), "custom-v4");
    let v6 = lab.serve_tcp(Role::Pod, sa(addr::POD_V6, 8443), "custom-v6");
    lab.add_dnat(Proto::Tcp, 31000, v4);
    lab.add_dnat(Proto::Tcp, 31000, v6);
    let reply = lab
        .connect(extra_v4, sa(addr::NODE_V4, 31000), CONNECT_TIMEOUT)
        .expect("custom v4 DNAT");
    assert_eq!(reply, "custom-v4");
    for src in [extra_v6, far_v6] {
        let reply = lab
            .connect(src, sa(addr::NODE_V6, 31000), CONNECT_TIMEOUT)
            .unwrap_or_else(|e| panic!("custom v6 DNAT from {src}: {e}"));
        assert_eq!(reply, "custom-v6");
    }
    assert_eq!(lab.tcp_server(v6).accepted(), 2);
}

fn state_helpers_see_kernel_state(backend: Backend) {
    let lab = Lab::new(backend);
    let node = lab.node();

    let v6_rules = support::iptables_save(node, backend, Family::V6);
    assert!(
        v6_rules.contains("--to-destination [2001:db8:1::1]:8080"),
        "{v6_rules}"
    );
    assert!(!v6_rules.contains("# Generated"), "{v6_rules}");

    let ruleset = nft_list_ruleset(node);
    match backend {
        // iptables-nft rules are nftables rules; legacy ones are invisible to nft.
        Backend::Nft | Backend::Nftables => {
            assert!(ruleset.contains("dnat to 198.51.100.1:8080"), "{ruleset}")
        }
        Backend::Legacy => assert!(!ruleset.contains("dnat"), "{ruleset}"),
    }

    assert!(ipset_list_names(node).is_empty());
    node.exec_ok("ipset", &["create", "npgt-selftest", "hash:net"]);
    assert_eq!(ipset_list_names(node), vec!["npgt-selftest".to_string()]);

    lab.connect(
        addr::CLIENT_V4[0].into(),
        sa(addr::NODE_V4, ports::NODEPORT),
        CONNECT_TIMEOUT,
    )
    .expect("NodePort");
    let entries = conntrack_list(node);
    assert!(
        entries.iter().any(|e| e.contains("dport=30008")),
        "{entries:#?}"
    );
    conntrack_flush(node);
    assert!(
        support::wait_until(Duration::from_secs(2), Duration::from_millis(20), || {
            conntrack_list(node).is_empty()
        }),
        "conntrack table not empty after flush: {:#?}",
        conntrack_list(node)
    );
}

#[test]
fn state_helpers_see_kernel_state_legacy() {
    support::require_kernel!();
    state_helpers_see_kernel_state(Backend::Legacy);
}

#[test]
fn state_helpers_see_kernel_state_nft() {
    support::require_kernel!();
    state_helpers_see_kernel_state(Backend::Nft);
}
