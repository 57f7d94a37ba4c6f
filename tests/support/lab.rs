//! The client / node / pod topology (see the diagram in the module docs of
//! `support`) and the standard scenario the tool's tests start from.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::cmd::CmdOutput;
use super::netns::{Netns, link_veth};
use super::sock::{Connect, ConnectError, TcpServer, UdpServer};

/// Addresses of the standard topology. All are TEST-NET / documentation
/// addresses (RFC 5737, RFC 3849), so nothing can leak to a real network.
pub mod addr {
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// The node's address on the client-facing link (`eth0`).
    pub const NODE_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    /// The node's IPv6 address on the client-facing link (`eth0`).
    pub const NODE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
    /// The node's address on the pod link (`eth1`), the pod's gateway.
    pub const NODE_POD_GW_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    /// The node's IPv6 address on the pod link (`eth1`).
    pub const NODE_POD_GW_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 1);
    /// The pod's / container's address.
    pub const POD_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    /// The pod's / container's IPv6 address.
    pub const POD_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 2);

    /// Client sources on the node's own subnet 198.51.100.0/24. The first is
    /// the client's primary address, the next hop for [`CLIENT_REMOTE_V4`].
    pub const CLIENT_V4: [Ipv4Addr; 4] = [
        Ipv4Addr::new(198, 51, 100, 10),
        Ipv4Addr::new(198, 51, 100, 11),
        Ipv4Addr::new(198, 51, 100, 12),
        Ipv4Addr::new(198, 51, 100, 13),
    ];
    /// Client IPv6 sources on the node's own subnet 2001:db8:1::/64.
    pub const CLIENT_V6: [Ipv6Addr; 4] = [
        Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10),
        Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x11),
        Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x12),
        Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x13),
    ];
    /// Client sources in another network, 203.0.113.0/24, which the node
    /// reaches through a route via [`CLIENT_V4`]`[0]`.
    pub const CLIENT_REMOTE_V4: [Ipv4Addr; 4] = [
        Ipv4Addr::new(203, 0, 113, 10),
        Ipv4Addr::new(203, 0, 113, 11),
        Ipv4Addr::new(203, 0, 113, 12),
        Ipv4Addr::new(203, 0, 113, 13),
    ];
    /// Client IPv6 sources in another network, 2001:db8:2::/64, routed via
    /// [`CLIENT_V6`]`[0]`.
    pub const CLIENT_REMOTE_V6: [Ipv6Addr; 4] = [
        Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x10),
        Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x11),
        Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x12),
        Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x13),
    ];

    /// The client-side network shared with the node.
    pub const CLIENT_NET_V4: &str = "198.51.100.0/24";
    /// The client-side IPv6 network shared with the node.
    pub const CLIENT_NET_V6: &str = "2001:db8:1::/64";
    /// The routed client network behind [`CLIENT_V4`]`[0]`.
    pub const CLIENT_REMOTE_NET_V4: &str = "203.0.113.0/24";
    /// The routed IPv6 client network behind [`CLIENT_V6`]`[0]`.
    pub const CLIENT_REMOTE_NET_V6: &str = "2001:db8:2::/64";
    /// The pod network behind the node.
    pub const POD_NET_V4: &str = "192.0.2.0/24";
    /// The IPv6 pod network behind the node.
    pub const POD_NET_V6: &str = "2001:db8:3::/64";
}

/// Ports of the standard scenario built by [`Lab::new`](super::Lab::new).
pub mod ports {
    /// TCP NodePort on the node, DNATed (kube-proxy style) to the local
    /// server on [`NODEPORT_TARGET`].
    pub const NODEPORT: u16 = 30008;
    /// The node-local TCP server behind [`NODEPORT`].
    pub const NODEPORT_TARGET: u16 = 8080;
    /// UDP NodePort on the node, DNATed to the local UDP server on
    /// [`NODEPORT_UDP_TARGET`].
    pub const NODEPORT_UDP: u16 = 30053;
    /// The node-local UDP server behind [`NODEPORT_UDP`].
    pub const NODEPORT_UDP_TARGET: u16 = 5353;
    /// Docker-like published port on the node (`docker run -p 8000:80`),
    /// DNATed to [`CONTAINER`] on the pod, i.e. through FORWARD.
    pub const PUBLISHED: u16 = 8000;
    /// The container port behind [`PUBLISHED`].
    pub const CONTAINER: u16 = 80;
    /// A plain host service on the node with no DNAT in front of it.
    pub const HOST_SERVICE: u16 = 9100;
    /// A server on the client for the node's own outbound connections.
    pub const CLIENT_SERVICE: u16 = 9200;
    /// A local port for the node's outbound connection that lies in a typical
    /// guarded range (inside the Linux ephemeral range 32768–60999).
    pub const NODE_EPHEMERAL: u16 = 49125;
}

/// Reply lines of the standard servers, so a test can tell which server (and
/// thus which path) answered a connection.
pub mod replies {
    /// Reply of the node-local server behind the NodePort DNAT.
    pub const NODEPORT_TARGET: &str = "node-nodeport-target";
    /// Reply of the node-local UDP server behind the UDP NodePort DNAT.
    pub const NODEPORT_UDP_TARGET: &str = "node-nodeport-udp-target";
    /// Reply of the container server behind the docker-like DNAT.
    pub const CONTAINER: &str = "pod-container";
    /// Reply of the plain host service.
    pub const HOST_SERVICE: &str = "node-host-service";
    /// Reply of the client-side server.
    pub const CLIENT_SERVICE: &str = "client-service";
}

/// Which firewall backend a lab tests: it decides which iptables flavour
/// programs the lab's own rules (DNAT, foreign rules) and which `--backend`
/// nodeport-guard uses. A namespace must stick to one iptables flavour for a
/// given table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// `iptables-legacy` / `ip6tables-legacy` (x_tables).
    Legacy,
    /// `iptables-nft` / `ip6tables-nft` (nf_tables with xtables compat).
    Nft,
    /// nodeport-guard's native nftables backend; the lab's own rules (the
    /// kube-proxy-like DNAT) use iptables-nft, as on a node with kube-proxy.
    Nftables,
}

impl Backend {
    /// Both flavours, for looping a test over them.
    pub const ALL: [Backend; 2] = [Backend::Legacy, Backend::Nft];

    /// The `iptables` binary of this flavour for `family`.
    pub fn iptables(self, family: Family) -> &'static str {
        match (self, family) {
            (Backend::Legacy, Family::V4) => "iptables-legacy",
            (Backend::Legacy, Family::V6) => "ip6tables-legacy",
            (Backend::Nft | Backend::Nftables, Family::V4) => "iptables-nft",
            (Backend::Nft | Backend::Nftables, Family::V6) => "ip6tables-nft",
        }
    }

    /// The `iptables-save` binary of this flavour for `family`.
    pub fn iptables_save(self, family: Family) -> &'static str {
        match (self, family) {
            (Backend::Legacy, Family::V4) => "iptables-legacy-save",
            (Backend::Legacy, Family::V6) => "ip6tables-legacy-save",
            (Backend::Nft | Backend::Nftables, Family::V4) => "iptables-nft-save",
            (Backend::Nft | Backend::Nftables, Family::V6) => "ip6tables-nft-save",
        }
    }

    /// The `iptables-restore` binary of this flavour for `family`.
    pub fn iptables_restore(self, family: Family) -> &'static str {
        match (self, family) {
            (Backend::Legacy, Family::V4) => "iptables-legacy-restore",
            (Backend::Legacy, Family::V6) => "ip6tables-legacy-restore",
            (Backend::Nft | Backend::Nftables, Family::V4) => "iptables-nft-restore",
            (Backend::Nft | Backend::Nftables, Family::V6) => "ip6tables-nft-restore",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Legacy => "legacy",
            Backend::Nft => "nft",
            Backend::Nftables => "nftables",
        })
    }
}

/// IP family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// Both families, for looping a test over them.
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];

    /// The family of an address.
    pub fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// The node's client-facing address in this family.
    pub fn node_addr(self) -> IpAddr {
        match self {
            Family::V4 => addr::NODE_V4.into(),
            Family::V6 => addr::NODE_V6.into(),
        }
    }

    /// The pod's address in this family.
    pub fn pod_addr(self) -> IpAddr {
        match self {
            Family::V4 => addr::POD_V4.into(),
            Family::V6 => addr::POD_V6.into(),
        }
    }

    /// The client's on-link source addresses in this family.
    pub fn client_addrs(self) -> Vec<IpAddr> {
        match self {
            Family::V4 => addr::CLIENT_V4.iter().map(|&a| a.into()).collect(),
            Family::V6 => addr::CLIENT_V6.iter().map(|&a| a.into()).collect(),
        }
    }

    /// The client's routed (other network) source addresses in this family.
    pub fn client_remote_addrs(self) -> Vec<IpAddr> {
        match self {
            Family::V4 => addr::CLIENT_REMOTE_V4.iter().map(|&a| a.into()).collect(),
            Family::V6 => addr::CLIENT_REMOTE_V6.iter().map(|&a| a.into()).collect(),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        })
    }
}

/// Transport protocol of a DNAT rule or server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Proto {
    /// The name iptables expects after `-p`.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// One of the three machines of the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The protected host, where the tool runs.
    Node,
    /// The outside machine connecting to the node.
    Client,
    /// The pod / container behind the node.
    Pod,
}

/// Options for building a [`Lab`]; obtained from [`Lab::builder`].
#[derive(Debug, Clone)]
pub struct LabBuilder {
    backend: Backend,
    standard_services: bool,
    extra_sources: Vec<IpAddr>,
}

impl LabBuilder {
    /// Whether to install the standard servers and DNAT rules (default: yes).
    /// Without them the lab is the bare topology: addresses, routes and
    /// forwarding, an empty firewall and no servers.
    pub fn standard_services(mut self, enabled: bool) -> LabBuilder {
        self.standard_services = enabled;
        self
    }

    /// Adds another client source address (see [`Lab::add_client_source`]).
    pub fn client_source(mut self, ip: impl Into<IpAddr>) -> LabBuilder {
        self.extra_sources.push(ip.into());
        self
    }

    /// Builds the lab; panics with the failing command if anything fails, in
    /// which case everything created so far is removed again.
    #[track_caller]
    pub fn build(self) -> Lab {
        let mut lab = Lab::topology(self.backend);
        for ip in self.extra_sources {
            lab.add_client_source(ip);
        }
        if self.standard_services {
            lab.install_standard_services();
        }
        lab
    }
}

/// The client / node / pod lab (see the module docs of `support` for the
/// diagram). Everything it created — namespaces, links, rules, servers —
/// disappears when it is dropped, also when the test panics.
pub struct Lab {
    // Servers are declared (and therefore dropped) before the namespaces: a
    // server thread keeps its namespace alive in the kernel until it exits.
    tcp_servers: Vec<TcpServer>,
    udp_servers: Vec<UdpServer>,
    backend: Backend,
    node: Netns,
    client: Netns,
    pod: Netns,
}

impl fmt::Debug for Lab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lab")
            .field("backend", &self.backend)
            .field("node", &self.node.name())
            .field("client", &self.client.name())
            .field("pod", &self.pod.name())
            .finish_non_exhaustive()
    }
}

impl Lab {
    /// The standard lab with the chosen iptables flavour: the topology plus
    /// these services (all reply with a line from [`replies`]):
    ///
    /// * node-local TCP server on `NODE:8080` (v4 and v6), reached through a
    ///   kube-proxy-like `nat PREROUTING -p tcp --dport 30008 -j DNAT
    ///   --to-destination NODE:8080`;
    /// * node-local UDP server on `NODE:5353`, behind UDP NodePort 30053;
    /// * container TCP server on `POD:80`, behind a docker-like `-p 8000:80`
    ///   DNAT (forwarded through the node);
    /// * plain host service on `NODE:9100` without any DNAT;
    /// * client-side server on `CLIENT_V4[0]:9200` / `CLIENT_V6[0]:9200` for
    ///   the node's own outbound connections.
    #[track_caller]
    pub fn new(backend: Backend) -> Lab {
        Lab::builder(backend).build()
    }

    /// A builder for labs with a different set of services or sources.
    pub fn builder(backend: Backend) -> LabBuilder {
        LabBuilder {
            backend,
            standard_services: true,
            extra_sources: Vec::new(),
        }
    }

    /// Creates the namespaces, links, addresses, routes and sysctls.
    #[track_caller]
    fn topology(backend: Backend) -> Lab {
        // Each `Netns` is owned as soon as it exists, so a panic in any later
        // step drops (deletes) whatever was already created.
        let lab = Lab {
            tcp_servers: Vec::new(),
            udp_servers: Vec::new(),
            backend,
            node: Netns::new(),
            client: Netns::new(),
            pod: Netns::new(),
        };
        for ns in [&lab.node, &lab.client, &lab.pod] {
            // Without this, new IPv6 addresses (including link-local ones) are
            // "tentative" for about a second while DAD runs and cannot be
            // bound; `nodad` on each address covers the global ones, these
            // cover the link-local ones of interfaces created afterwards.
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0");
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0");
            // Pin reverse-path filtering to "off" instead of inheriting
            // whatever the distribution default is: the routed client network
            // and DNAT to local addresses should not depend on it.
            ns.sysctl("net.ipv4.conf.all.rp_filter", "0");
            ns.sysctl("net.ipv4.conf.default.rp_filter", "0");
        }
        lab.node.sysctl("net.ipv4.ip_forward", "1");
        lab.node.sysctl("net.ipv6.conf.all.forwarding", "1");

        link_veth(&lab.node, "eth0", &lab.client, "eth0");
        link_veth(&lab.node, "eth1", &lab.pod, "eth0");

        let (node, client, pod) = (&lab.node, &lab.client, &lab.pod);
        add_addr(node, "eth0", &format!("{}/24", addr::NODE_V4));
        add_addr(node, "eth0", &format!("{}/64", addr::NODE_V6));
        add_addr(node, "eth1", &format!("{}/24", addr::NODE_POD_GW_V4));
        add_addr(node, "eth1", &format!("{}/64", addr::NODE_POD_GW_V6));
        for a in addr::CLIENT_V4 {
            add_addr(client, "eth0", &format!("{a}/24"));
        }
        for a in addr::CLIENT_V6 {
            add_addr(client, "eth0", &format!("{a}/64"));
        }
        for a in addr::CLIENT_REMOTE_V4 {
            add_addr(client, "eth0", &format!("{a}/32"));
        }
        for a in addr::CLIENT_REMOTE_V6 {
            add_addr(client, "eth0", &format!("{a}/128"));
        }
        add_addr(pod, "eth0", &format!("{}/24", addr::POD_V4));
        add_addr(pod, "eth0", &format!("{}/64", addr::POD_V6));

        node.ip(&["link", "set", "eth0", "up"]);
        node.ip(&["link", "set", "eth1", "up"]);
        client.ip(&["link", "set", "eth0", "up"]);
        pod.ip(&["link", "set", "eth0", "up"]);

        let client_gw4 = addr::CLIENT_V4[0].to_string();
        let client_gw6 = addr::CLIENT_V6[0].to_string();
        node.ip(&[
            "route",
            "add",
            addr::CLIENT_REMOTE_NET_V4,
            "via",
            &client_gw4,
        ]);
        node.ip(&[
            "-6",
            "route",
            "add",
            addr::CLIENT_REMOTE_NET_V6,
            "via",
            &client_gw6,
        ]);
        let node4 = addr::NODE_V4.to_string();
        let node6 = addr::NODE_V6.to_string();
        client.ip(&["route", "add", addr::POD_NET_V4, "via", &node4]);
        client.ip(&["-6", "route", "add", addr::POD_NET_V6, "via", &node6]);
        let gw4 = addr::NODE_POD_GW_V4.to_string();
        let gw6 = addr::NODE_POD_GW_V6.to_string();
        pod.ip(&["route", "add", "default", "via", &gw4]);
        pod.ip(&["-6", "route", "add", "default", "via", &gw6]);
        lab
    }

    /// Starts the standard servers and installs the standard DNAT rules.
    #[track_caller]
    fn install_standard_services(&mut self) {
        for family in Family::ALL {
            let node = family.node_addr();
            let pod = family.pod_addr();
            let client = family.client_addrs()[0];
            self.serve_tcp(
                Role::Node,
                SocketAddr::new(node, ports::NODEPORT_TARGET),
                replies::NODEPORT_TARGET,
            );
            self.serve_udp(
                Role::Node,
                SocketAddr::new(node, ports::NODEPORT_UDP_TARGET),
                replies::NODEPORT_UDP_TARGET,
            );
            self.serve_tcp(
                Role::Node,
                SocketAddr::new(node, ports::HOST_SERVICE),
                replies::HOST_SERVICE,
            );
            self.serve_tcp(
                Role::Pod,
                SocketAddr::new(pod, ports::CONTAINER),
                replies::CONTAINER,
            );
            self.serve_tcp(
                Role::Client,
                SocketAddr::new(client, ports::CLIENT_SERVICE),
                replies::CLIENT_SERVICE,
            );
            self.add_dnat(
                Proto::Tcp,
                ports::NODEPORT,
                SocketAddr::new(node, ports::NODEPORT_TARGET),
            );
            self.add_dnat(
                Proto::Udp,
                ports::NODEPORT_UDP,
                SocketAddr::new(node, ports::NODEPORT_UDP_TARGET),
            );
            self.add_dnat(
                Proto::Tcp,
                ports::PUBLISHED,
                SocketAddr::new(pod, ports::CONTAINER),
            );
        }
    }

    /// The iptables flavour this lab was built for.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The protected host.
    pub fn node(&self) -> &Netns {
        &self.node
    }

    /// The outside machine.
    pub fn client(&self) -> &Netns {
        &self.client
    }

    /// The pod / container behind the node.
    pub fn pod(&self) -> &Netns {
        &self.pod
    }

    /// The namespace playing `role`.
    pub fn ns(&self, role: Role) -> &Netns {
        match role {
            Role::Node => &self.node,
            Role::Client => &self.client,
            Role::Pod => &self.pod,
        }
    }

    /// Runs the lab's iptables flavour for `family` in the node namespace.
    /// `-w 30` is added because iptables-legacy takes the host-wide
    /// `/run/xtables.lock` even inside a namespace, and some releases fail at
    /// once ("Another app is currently holding the xtables lock") instead of
    /// waiting when a parallel test holds it.
    #[track_caller]
    pub fn iptables(&self, family: Family, args: &[&str]) -> CmdOutput {
        let mut full = vec!["-w", "30"];
        full.extend_from_slice(args);
        self.node.exec(self.backend.iptables(family), &full)
    }

    /// Like [`Lab::iptables`] but panics (with command, status, stdout and
    /// stderr) unless it succeeds; returns stdout.
    #[track_caller]
    pub fn iptables_ok(&self, family: Family, args: &[&str]) -> String {
        self.iptables(family, args).expect_success().stdout
    }

    /// `iptables-save` of the node with the lab's flavour (see
    /// [`iptables_save`](super::state::iptables_save)).
    #[track_caller]
    pub fn iptables_save(&self, family: Family) -> String {
        super::state::iptables_save(&self.node, self.backend, family)
    }

    /// Appends a kube-proxy / docker style DNAT in the node's `nat
    /// PREROUTING`: `-p <proto> --dport <dport> -j DNAT --to-destination <to>`
    /// with the lab's flavour and the family of `to`. A local `to` address
    /// behaves like a NodePort, the pod address like a published port.
    #[track_caller]
    pub fn add_dnat(&self, proto: Proto, dport: u16, to: SocketAddr) {
        let family = Family::of(to.ip());
        let dport = dport.to_string();
        let to = to.to_string(); // "[2001:db8::1]:80" for IPv6, as ip6tables wants
        self.iptables_ok(
            family,
            &[
                "-t",
                "nat",
                "-A",
                "PREROUTING",
                "-p",
                proto.as_str(),
                "--dport",
                &dport,
                "-j",
                "DNAT",
                "--to-destination",
                &to,
            ],
        );
    }

    /// Adds a source address to the client. Addresses in the on-link
    /// networks (198.51.100.0/24, 2001:db8:1::/64) get that prefix; any other
    /// address is added as a host address and the node gets a host route to
    /// it via the client, so it can be used as a source right away.
    #[track_caller]
    pub fn add_client_source(&self, ip: impl Into<IpAddr>) {
        let ip = ip.into();
        let (prefix, on_link, gw) = match ip {
            IpAddr::V4(a) => (
                if in_v4_24(a, addr::NODE_V4) { 24 } else { 32 },
                in_v4_24(a, addr::NODE_V4),
                addr::CLIENT_V4[0].to_string(),
            ),
            IpAddr::V6(a) => (
                if in_v6_64(a, addr::NODE_V6) { 64 } else { 128 },
                in_v6_64(a, addr::NODE_V6),
                addr::CLIENT_V6[0].to_string(),
            ),
        };
        let with_prefix = format!("{ip}/{prefix}");
        let existing = self.client.ip(&["-o", "addr", "show", "dev", "eth0"]);
        if !existing.contains(&format!(" {with_prefix} ")) {
            add_addr(&self.client, "eth0", &with_prefix);
        }
        if !on_link {
            let host = format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 });
            // `replace` keeps this idempotent and is a no-op for addresses the
            // standard 203.0.113.0/24 / 2001:db8:2::/64 routes already cover.
            self.node.ip(&["route", "replace", &host, "via", &gw]);
        }
    }

    /// Starts a TCP server in `role`'s namespace on `bind` that answers every
    /// connection with `reply` and counts them; it lives as long as the lab.
    /// Returns the bound address (useful with port 0).
    #[track_caller]
    pub fn serve_tcp(&mut self, role: Role, bind: SocketAddr, reply: &str) -> SocketAddr {
        let server = TcpServer::start(self.ns(role), bind, reply);
        let addr = server.local_addr();
        self.tcp_servers.push(server);
        addr
    }

    /// Starts a UDP server in `role`'s namespace on `bind` that answers every
    /// datagram (see [`UdpServer`]); it lives as long as the lab.
    #[track_caller]
    pub fn serve_udp(&mut self, role: Role, bind: SocketAddr, reply: &str) -> SocketAddr {
        let server = UdpServer::start(self.ns(role), bind, reply);
        let addr = server.local_addr();
        self.udp_servers.push(server);
        addr
    }

    /// The lab's TCP server bound to `bind`; panics (listing the servers)
    /// if there is none.
    #[track_caller]
    pub fn tcp_server(&self, bind: SocketAddr) -> &TcpServer {
        match self.tcp_servers.iter().find(|s| s.local_addr() == bind) {
            Some(server) => server,
            None => panic!(
                "no TCP server on {bind}; the lab has: {:?}",
                self.tcp_servers
                    .iter()
                    .map(TcpServer::local_addr)
                    .collect::<Vec<_>>()
            ),
        }
    }

    /// The lab's UDP server bound to `bind`; panics if there is none.
    #[track_caller]
    pub fn udp_server(&self, bind: SocketAddr) -> &UdpServer {
        match self.udp_servers.iter().find(|s| s.local_addr() == bind) {
            Some(server) => server,
            None => panic!(
                "no UDP server on {bind}; the lab has: {:?}",
                self.udp_servers
                    .iter()
                    .map(UdpServer::local_addr)
                    .collect::<Vec<_>>()
            ),
        }
    }

    /// TCP connection from the client, from source address `src`, to `dst`;
    /// returns the server's reply line. See [`Connect`] for the errors.
    pub fn connect(
        &self,
        src: IpAddr,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<String, ConnectError> {
        Connect::to(dst)
            .from(src)
            .timeout(timeout)
            .tcp(&self.client)
    }

    /// UDP request from the client, from `src`, to `dst`; returns the name of
    /// the server that answered.
    pub fn udp_probe(
        &self,
        src: IpAddr,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<String, ConnectError> {
        Connect::to(dst)
            .from(src)
            .timeout(timeout)
            .udp(&self.client)
    }

    /// The node's *own* outbound TCP connection from its client-facing
    /// address (of `dst`'s family) and local port `local_port` to `dst`
    /// (normally the client service). `Ok` means the handshake completed and
    /// the reply arrived, i.e. the node's firewall let the replies in.
    pub fn node_connect_from_port(
        &self,
        local_port: u16,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<String, ConnectError> {
        Connect::to(dst)
            .from(Family::of(dst.ip()).node_addr())
            .source_port(local_port)
            .timeout(timeout)
            .tcp(&self.node)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Stop the servers first so that no thread still sits in a namespace
        // when it is deleted; the namespaces then drop in field order.
        self.tcp_servers.clear();
        self.udp_servers.clear();
    }
}

/// Adds an address to `dev`; IPv6 addresses get `nodad` so they are usable
/// immediately instead of "tentative".
#[track_caller]
fn add_addr(ns: &Netns, dev: &str, cidr: &str) {
    if cidr.contains(':') {
        ns.ip(&["-6", "addr", "add", cidr, "dev", dev, "nodad"]);
    } else {
        ns.ip(&["addr", "add", cidr, "dev", dev]);
    }
}

fn in_v4_24(a: Ipv4Addr, net: Ipv4Addr) -> bool {
    a.octets()[..3] == net.octets()[..3]
}

fn in_v6_64(a: Ipv6Addr, net: Ipv6Addr) -> bool {
    a.segments()[..4] == net.segments()[..4]
}
