//! Kernel tests of what nodeport-guard is for: source whitelists in front of
//! NodePorts, docker published ports and high port ranges, enforced before
//! DNAT, for IPv4 and IPv6, without breaking the node's own connections.
//!
//! Every test runs the real binary in the node namespace of a [`Lab`] and
//! judges it by what a user sees: which connections complete, which time
//! out, and what `tcpdump -i nflog:1` shows.

mod support;

use support::fixtures::Whitelist;
use support::{
    Backend, CONNECT_TIMEOUT, DROP_TIMEOUT, Family, Guard, Lab, NflogCapture, Role, addr,
    backend_tests, check_reachability, dropped, iptables, open, ports, replies, sa,
};

/// How long to wait for an NFLOG message of a rule with `--nflog-threshold 1`.
const NFLOG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The mission policy with the lab's addresses: two whitelisted sources,
/// everyone else dropped on NodePort 30008. The selector is the shipped
/// example's (`policies/nodeport-whitelist.yaml`), not the fixture's `all()`,
/// so the test of the mission also covers the example's selector.
fn nodeport_whitelist() -> String {
    Whitelist::mission()
        .selector("has(kubernetes.io/hostname)")
        .yaml()
}

/// The mission: with the NodePort whitelist applied, whitelisted clients
/// reach NodePort 30008 through kube-proxy's DNAT, other clients (on-link
/// and routed) time out, a port the policy does not mention (9100) stays
/// open for everyone, and each dropped SYN shows up on `nflog:1` with
/// prefix `DPI1|allow-cluster-nodeport-only`, its real source address and
/// the NodePort (not the DNAT target port) as destination.
fn nodeport_whitelist_admits_listed_sources_and_logs_the_rest(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    guard.write_policy("nodeport.yaml", &nodeport_whitelist());
    guard.apply();

    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    let host_service = sa(addr::NODE_V4, ports::HOST_SERVICE);
    let listed = [addr::CLIENT_V4[0], addr::CLIENT_V4[2]];
    let unlisted = [addr::CLIENT_V4[1], addr::CLIENT_REMOTE_V4[0]];
    let mut probes = Vec::new();
    for src in listed {
        probes.push(open(src, nodeport, replies::NODEPORT_TARGET));
    }
    for src in unlisted {
        probes.push(dropped(src, nodeport));
        probes.push(open(src, host_service, replies::HOST_SERVICE));
    }
    check_reachability(&lab, "NodePort whitelist", &probes);

    for src in unlisted {
        let event = log
            .wait_for(NFLOG_TIMEOUT, |e| e.src == Some(src.into()))
            .unwrap_or_else(|| panic!("no NFLOG message for {src}\n{}", log.diagnostics()));
        assert_eq!(event.prefix, "DPI1|allow-cluster-nodeport-only", "{event}");
        assert_eq!(event.dst, Some(addr::NODE_V4.into()), "{event}");
        assert_eq!(
            event.dport,
            Some(ports::NODEPORT),
            "logged before DNAT: {event}"
        );
        assert_eq!(event.hook, Some(0), "logged in PREROUTING: {event}");
    }
    // The listed sources' connections happened at the same time as the
    // drops above, and the rule logs with threshold 1 (no batching).
    let logged_listed: Vec<_> = log
        .events()
        .into_iter()
        .filter(|e| listed.iter().any(|&a| e.src == Some(a.into())))
        .collect();
    assert!(
        logged_listed.is_empty(),
        "allowed sources were logged: {logged_listed:?}"
    );
    // Everyone who got through went through the DNAT to the real server.
    let target = lab.tcp_server(sa(addr::NODE_V4, ports::NODEPORT_TARGET));
    let mut peers: Vec<_> = target.peers().iter().map(|p| p.ip()).collect();
    peers.sort();
    assert_eq!(peers, listed.map(std::net::IpAddr::from).to_vec());
}
backend_tests!(nodeport_whitelist_admits_listed_sources_and_logs_the_rest);

/// Guards TCP 49100:49500 (a range inside the Linux ephemeral port range)
/// for everyone except 198.51.100.12.
const HIGH_PORT_GUARD: &str = r#"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: guard-high-ports
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      source:
        nets: [198.51.100.12/32]
    - action: Allow
      source:
        nets: ["2001:db8:1::12/128"]
    - action: Deny
      protocol: TCP
      destination:
        ports: ["49100:49500"]
"#;

/// The node-local server inside the guarded range.
const HIGH_PORT: u16 = 49200;

/// The regression that started the project: with TCP 49100:49500 guarded,
/// the node's own outbound connection from local port 49125 (inside the
/// guarded range) to a server that is *not* whitelisted still completes,
/// in both families, because its SYN-ACK is an ESTABLISHED reply in
/// mangle. The guard itself is active: an unlisted client cannot reach a
/// node server on port 49200, the listed one can.
fn guarded_port_range_keeps_node_outbound_connections_working(backend: Backend) {
    let mut lab = Lab::new(backend);
    for family in Family::ALL {
        lab.serve_tcp(
            Role::Node,
            sa(family.node_addr(), HIGH_PORT),
            "node-high-port",
        );
    }
    let guard = Guard::new(&lab);
    guard.write_policy("high-ports.yaml", HIGH_PORT_GUARD);
    guard.apply();

    for family in Family::ALL {
        let dst = sa(family.client_addrs()[0], ports::CLIENT_SERVICE);
        let reply = lab
            .node_connect_from_port(ports::NODE_EPHEMERAL, dst, CONNECT_TIMEOUT)
            .unwrap_or_else(|e| panic!("{backend}: node {family} from port 49125 -> {dst}: {e}"));
        assert_eq!(reply, replies::CLIENT_SERVICE);
    }
    let mut probes = Vec::new();
    for family in Family::ALL {
        let high = sa(family.node_addr(), HIGH_PORT);
        probes.push(dropped(family.client_addrs()[1], high));
        probes.push(open(family.client_addrs()[2], high, "node-high-port"));
    }
    check_reachability(&lab, "guarded high ports", &probes);
}
backend_tests!(guarded_port_range_keeps_node_outbound_connections_working);

/// The contrast, without nodeport-guard: the naive whitelist users wrote
/// in the raw table (`-m set ! --match-set white src -p tcp -m multiport
/// --dports 49100:49500 -j DROP`) blocks unlisted clients as intended, but
/// also drops the SYN-ACK of the node's own connection from port 49125,
/// so that connection times out.
fn naive_raw_table_whitelist_breaks_node_outbound_connections(backend: Backend) {
    let mut lab = Lab::new(backend);
    lab.serve_tcp(Role::Node, sa(addr::NODE_V4, HIGH_PORT), "node-high-port");
    let node = lab.node();
    node.exec_ok("ipset", &["create", "white", "hash:net"]);
    node.exec_ok("ipset", &["add", "white", "198.51.100.12/32"]);
    iptables(
        &lab,
        Family::V4,
        "-t raw -A PREROUTING -m set ! --match-set white src \
         -p tcp -m multiport --dports 49100:49500 -j DROP",
    );

    let dst = sa(addr::CLIENT_V4[0], ports::CLIENT_SERVICE);
    let err = lab
        .node_connect_from_port(ports::NODE_EPHEMERAL, dst, DROP_TIMEOUT)
        .expect_err("the raw-table whitelist drops the SYN-ACK of the node's own connection");
    assert!(err.is_timeout(), "{backend}: {err}");
    let high = sa(addr::NODE_V4, HIGH_PORT);
    check_reachability(
        &lab,
        "naive raw whitelist",
        &[
            dropped(addr::CLIENT_V4[1], high),
            open(addr::CLIENT_V4[2], high, "node-high-port"),
        ],
    );
}
backend_tests!(naive_raw_table_whitelist_breaks_node_outbound_connections);

/// A dual-stack whitelist: one Allow per family, one Deny for both.
/// (Not the mission fixture: this test needs the IPv6 Allow rule next to it.)
const DUAL_STACK_WHITELIST: &str = r#"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: dual-stack-nodeport
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      source:
        nets: [198.51.100.10/32, 198.51.100.12/32]
    - action: Allow
      source:
        nets: ["2001:db8:1::10/128", "2001:db8:1::12/128"]
    - action: Deny
      protocol: TCP
      destination:
        ports: [30008]
"#;

/// IPv6 is enforced through ip6tables like IPv4 through iptables: with a
/// dual-stack whitelist, listed IPv6 clients reach the NodePort through
/// the IPv6 DNAT, unlisted ones (on-link and routed) time out and are
/// logged as `DPI2|dual-stack-nodeport` with their IPv6 source, and the
/// IPv4 half of the same policy works at the same time.
fn dual_stack_whitelist_is_enforced_for_ipv6_and_ipv4(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    guard.write_policy("dual.yaml", DUAL_STACK_WHITELIST);
    guard.apply();

    let nodeport6 = sa(addr::NODE_V6, ports::NODEPORT);
    let nodeport4 = sa(addr::NODE_V4, ports::NODEPORT);
    let unlisted6 = [addr::CLIENT_V6[1], addr::CLIENT_REMOTE_V6[0]];
    let mut probes = vec![
        open(addr::CLIENT_V6[0], nodeport6, replies::NODEPORT_TARGET),
        open(addr::CLIENT_V6[2], nodeport6, replies::NODEPORT_TARGET),
        open(addr::CLIENT_V4[0], nodeport4, replies::NODEPORT_TARGET),
        dropped(addr::CLIENT_V4[1], nodeport4),
        open(
            addr::CLIENT_V6[1],
            sa(addr::NODE_V6, ports::HOST_SERVICE),
            replies::HOST_SERVICE,
        ),
    ];
    probes.extend(unlisted6.iter().map(|&src| dropped(src, nodeport6)));
    check_reachability(&lab, "dual-stack whitelist", &probes);

    for src in unlisted6 {
        let event = log
            .wait_for(NFLOG_TIMEOUT, |e| e.src == Some(src.into()))
            .unwrap_or_else(|| panic!("no NFLOG message for {src}\n{}", log.diagnostics()));
        assert_eq!(event.prefix, "DPI2|dual-stack-nodeport", "{event}");
        assert_eq!(event.family, 10, "an IPv6 message: {event}");
        assert_eq!(event.dport, Some(ports::NODEPORT), "{event}");
    }
    let v6_target = lab.tcp_server(sa(addr::NODE_V6, ports::NODEPORT_TARGET));
    assert_eq!(v6_target.accepted(), 2, "{backend}");
}
backend_tests!(dual_stack_whitelist_is_enforced_for_ipv6_and_ipv4);

/// A normal (filter) ingress policy on the host lets only one IPv6 client in; everything else
/// meets the tier's default deny, whatever the protocol. IPv6 neighbour discovery still passes
/// (as a failsafe), so with both neighbour caches empty the listed client reaches the host
/// service and an unlisted one is dropped. Without it the node's neighbour solicitations would
/// meet the default deny, and no IPv6 peer could reach anything, failsafe ports included.
const ONLY_ONE_V6_CLIENT: &str = r#"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: v6-only-listed
spec:
  selector: all()
  types: [Ingress]
  ingress:
    - action: Allow
      source:
        nets: ["2001:db8:1::10/128"]
"#;

fn ipv6_neighbour_discovery_survives_a_default_deny(backend: Backend) {
    let lab = Lab::new(backend);
    // The host service is a failsafe port here: an unlisted client may use it, but its
    // neighbour solicitations carry its own address, which the policy does not list.
    let guard = Guard::with_config(
        &lab,
        &format!(
            "failsafeInbound: [{{protocol: tcp, port: {}}}]\n",
            ports::HOST_SERVICE
        ),
    );
    guard.write_policy("v6.yaml", ONLY_ONE_V6_CLIENT);
    guard.apply();
    for ns in [lab.node(), lab.client()] {
        ns.exec_ok("ip", &["-6", "neigh", "flush", "all"]);
    }
    let service6 = sa(addr::NODE_V6, ports::HOST_SERVICE);
    check_reachability(
        &lab,
        "a failsafe port over IPv6 under a default deny",
        &[
            open(addr::CLIENT_V6[1], service6, replies::HOST_SERVICE),
            open(addr::CLIENT_V6[0], service6, replies::HOST_SERVICE),
            dropped(
                addr::CLIENT_V6[1],
                sa(addr::NODE_V6, ports::NODEPORT_TARGET),
            ),
        ],
    );
}
backend_tests!(ipv6_neighbour_discovery_survives_a_default_deny);

/// A whitelist in front of the docker-like published port 8000 (DNAT to the
/// container's port 80, forwarded through the node).
const PUBLISHED_PORT_WHITELIST: &str = r#"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: docker-web-8000
spec:
  order: 20
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: [198.51.100.10/32]
      destination:
        ports: [8000]
    - action: Allow
      protocol: TCP
      source:
        nets: ["2001:db8:1::10/128"]
      destination:
        ports: [8000]
    - action: Deny
      protocol: TCP
      destination:
        ports: [8000]
"#;

/// `docker run -p 8000:80`: a pre-DNAT whitelist on the published port
/// (the port clients use, before docker's DNAT) lets the listed client
/// reach the container through FORWARD and drops everyone else, in both
/// families; the container only ever sees the listed client.
fn published_docker_port_whitelist_admits_only_listed_sources(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("docker.yaml", PUBLISHED_PORT_WHITELIST);
    guard.apply();

    let mut probes = Vec::new();
    for family in Family::ALL {
        let published = sa(family.node_addr(), ports::PUBLISHED);
        let clients = family.client_addrs();
        probes.push(open(clients[0], published, replies::CONTAINER));
        probes.push(dropped(clients[1], published));
        probes.push(dropped(family.client_remote_addrs()[0], published));
    }
    check_reachability(&lab, "published port whitelist", &probes);
    for family in Family::ALL {
        let container = lab.tcp_server(sa(family.pod_addr(), ports::CONTAINER));
        let peers: Vec<_> = container.peers().iter().map(|p| p.ip()).collect();
        assert_eq!(peers, vec![family.client_addrs()[0]], "{backend} {family}");
    }
}
backend_tests!(published_docker_port_whitelist_admits_only_listed_sources);
