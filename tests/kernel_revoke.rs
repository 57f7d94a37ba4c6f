//! Kernel tests of revocation (`revokeEstablished`, `revoke`): with real
//! long-lived connections, a change that takes a source off the whitelist
//! cuts that source's established TCP and UDP flows within a second, and
//! nothing else: the connections of sources that stay allowed, a failsafe
//! SSH session from the very source that was removed, and the host's own
//! outbound connection keep carrying traffic. With the option off, nothing
//! is cut and `plan` says how many connections keep running.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use support::daemon::{Daemon, daemon_config};
use support::session::{EchoServer, Session};
use support::{Backend, Connect, Guard, Lab, Role, addr, backend_tests, sa};

/// The guarded TCP service on the node (no DNAT).
const SERVICE: u16 = 7100;
/// The guarded UDP service on the node.
const UDP_SERVICE: u16 = 9101;
/// The failsafe SSH port.
const SSH: u16 = 22;
/// Where the client serves the node's own outbound connection.
const CLIENT_SERVICE: u16 = 7200;
/// How long an exchange may take on a connection that still works.
const ANSWER: Duration = Duration::from_secs(1);

/// A whitelist of `listed` for the TCP service, SSH (a failsafe port, so
/// the Deny never applies to it) and the UDP service.
fn whitelist(listed: &[IpAddr]) -> String {
    let nets: Vec<String> = listed.iter().map(|ip| format!("{ip}/32")).collect();
    format!(
        r"apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: revocable
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      source:
        nets: [{}]
    - action: Deny
      protocol: TCP
      destination:
        ports: [{SERVICE}, {SSH}]
    - action: Deny
      protocol: UDP
      destination:
        ports: [{UDP_SERVICE}]
",
        nets.join(", ")
    )
}

/// The long-lived connections of one test.
struct Sessions {
    /// From the source that is taken off the whitelist.
    removed_tcp: Session,
    removed_udp: Session,
    /// From the source that stays.
    kept_tcp: Session,
    /// Failsafe SSH from the removed source.
    ssh: Session,
    /// The node's own connection out to the removed source.
    outbound: Session,
}

impl Sessions {
    fn open(lab: &Lab, removed: IpAddr, kept: IpAddr) -> Sessions {
        let node = IpAddr::from(addr::NODE_V4);
        let tcp = |src: IpAddr, port: u16| {
            Session::tcp(
                Connect::to(sa(addr::NODE_V4, port))
                    .from(src)
                    .timeout(ANSWER)
                    .open_tcp(lab.client())
                    .unwrap_or_else(|e| panic!("connect {src} -> {port}: {e}")),
            )
        };
        let mut sessions = Sessions {
            removed_tcp: tcp(removed, SERVICE),
            removed_udp: Session::Udp(
                Connect::to(sa(addr::NODE_V4, UDP_SERVICE))
                    .from(removed)
                    .source_port(40400)
                    .open_udp(lab.client())
                    .expect("udp socket"),
            ),
            kept_tcp: tcp(kept, SERVICE),
            ssh: tcp(removed, SSH),
            outbound: Session::tcp(
                Connect::to(SocketAddr::new(removed, CLIENT_SERVICE))
                    .from(node)
                    .timeout(ANSWER)
                    .open_tcp(lab.node())
                    .expect("the node's outbound connection"),
            ),
        };
        for (name, session) in sessions.all() {
            assert!(
                session.exchange(ANSWER),
                "{name} does not work to begin with"
            );
        }
        sessions
    }

    fn all(&mut self) -> [(&'static str, &mut Session); 5] {
        [
            ("the removed source's TCP connection", &mut self.removed_tcp),
            ("the removed source's UDP flow", &mut self.removed_udp),
            ("the kept source's TCP connection", &mut self.kept_tcp),
            ("the failsafe SSH session", &mut self.ssh),
            ("the node's outbound connection", &mut self.outbound),
        ]
    }

    /// Asserts that the survivors still carry traffic.
    fn assert_survivors(&mut self, context: &str) {
        for (name, session) in [
            ("the kept source's TCP connection", &mut self.kept_tcp),
            ("the failsafe SSH session", &mut self.ssh),
            ("the node's outbound connection", &mut self.outbound),
        ] {
            assert!(session.exchange(ANSWER), "{context}: {name} was cut");
        }
    }
}

/// A lab with the echo servers and the UDP service.
fn revocation_lab(backend: Backend) -> (Lab, Vec<EchoServer>) {
    let mut lab = Lab::new(backend);
    lab.serve_udp(Role::Node, sa(addr::NODE_V4, UDP_SERVICE), "node-udp");
    let servers = vec![
        EchoServer::start(lab.node(), sa(addr::NODE_V4, SERVICE)),
        EchoServer::start(lab.node(), sa(addr::NODE_V4, SSH)),
        EchoServer::start(lab.client(), sa(addr::CLIENT_V4[0], CLIENT_SERVICE)),
    ];
    (lab, servers)
}

/// The removed and the kept source.
fn sources() -> (IpAddr, IpAddr) {
    (
        IpAddr::from(addr::CLIENT_V4[0]),
        IpAddr::from(addr::CLIENT_V4[2]),
    )
}

/// Applies the whitelist of both sources, opens the sessions, then writes (without applying)
/// the whitelist without the removed source.
fn open_then_remove(lab: &Lab, guard: &Guard<'_>) -> Sessions {
    let (removed, kept) = sources();
    guard.write_policy("whitelist.yaml", &whitelist(&[removed, kept]));
    guard.apply();
    let sessions = Sessions::open(lab, removed, kept);
    guard.write_policy("whitelist.yaml", &whitelist(&[kept]));
    sessions
}

/// With `revokeEstablished: true`, `apply` of a whitelist without
/// 198.51.100.10 cuts its TCP connection and UDP flow (the next exchange
/// gets no answer, within a second of `apply` returning) and nothing else.
fn apply_cuts_the_connections_of_a_removed_source(backend: Backend) {
    let (lab, _servers) = revocation_lab(backend);
    let guard = Guard::with_config(&lab, "revokeEstablished: true\n");
    let mut sessions = open_then_remove(&lab, &guard);
    let plan = guard.run_expect(&["plan"], 0);
    assert!(
        plan.stderr
            .contains("2 established connections the new policies deny will be cut"),
        "{plan}"
    );
    let applied = guard.run_expect(&["apply", "--yes"], 0);
    let cut_at = Instant::now();
    assert!(
        applied.stderr.contains("Cut 2 established connections"),
        "{applied}"
    );
    assert!(
        !sessions.removed_tcp.exchange(ANSWER),
        "the removed source's TCP connection still works"
    );
    assert!(
        !sessions.removed_udp.exchange(ANSWER),
        "the removed source's UDP flow still works"
    );
    assert!(cut_at.elapsed() < Duration::from_secs(3));
    sessions.assert_survivors("after the cut");
}
backend_tests!(apply_cuts_the_connections_of_a_removed_source);

/// Without the option the same change cuts nothing, and `plan` says how
/// many established connections keep running; `revoke --yes` then cuts
/// them on demand, and only them.
fn without_the_option_connections_keep_running_until_revoke(backend: Backend) {
    let (lab, _servers) = revocation_lab(backend);
    let guard = Guard::new(&lab);
    let mut sessions = open_then_remove(&lab, &guard);
    let plan = guard.run_expect(&["plan"], 0);
    assert!(
        plan.stderr
            .contains("2 established connections the new policies deny will keep running"),
        "{plan}"
    );
    guard.apply();
    for (name, session) in sessions.all() {
        assert!(
            session.exchange(ANSWER),
            "without revokeEstablished, {name} was cut"
        );
    }

    let revoked = guard.run_expect(&["revoke", "--yes"], 0);
    assert!(
        revoked.stderr.contains("Cut 2 established connections"),
        "{revoked}"
    );
    assert!(
        !sessions.removed_tcp.exchange(ANSWER),
        "revoke left the TCP connection"
    );
    assert!(
        !sessions.removed_udp.exchange(ANSWER),
        "revoke left the UDP flow"
    );
    sessions.assert_survivors("after revoke");
}
backend_tests!(without_the_option_connections_keep_running_until_revoke);

/// The daemon with `revokeEstablished: true`: thirty reloads that do not
/// take anything away cut nothing (every session answers after each), and
/// the reload that removes the source cuts exactly its connections, counted
/// in `/metrics`.
fn daemon_cuts_only_what_a_reload_takes_away(backend: Backend) {
    let (lab, _servers) = revocation_lab(backend);
    let guard = Guard::with_config(
        &lab,
        &daemon_config(
            "1h",
            "revokeEstablished: true\nmetricsAddress: 127.0.0.1:9811\n",
        ),
    );
    let (removed, kept) = sources();
    guard.write_policy("whitelist.yaml", &whitelist(&[removed, kept]));
    let daemon = Daemon::start(&guard);
    let mut sessions = Sessions::open(&lab, removed, kept);

    // Thirty reloads that only widen the whitelist (a third source comes and goes).
    let extra = IpAddr::from(addr::CLIENT_V4[3]);
    for round in 0..30 {
        let mark = daemon.mark();
        let listed: Vec<IpAddr> = if round % 2 == 0 {
            vec![removed, kept, extra]
        } else {
            vec![removed, kept]
        };
        guard.write_policy("whitelist.yaml", &whitelist(&listed));
        daemon.expect_log(mark, "applied", Duration::from_secs(10));
        for (name, session) in sessions.all() {
            assert!(session.exchange(ANSWER), "reload {round} cut {name}");
        }
    }

    let mark = daemon.mark();
    guard.write_policy("whitelist.yaml", &whitelist(&[kept]));
    daemon.expect_log(
        mark,
        "revoked established connections",
        Duration::from_secs(10),
    );
    assert!(
        !sessions.removed_tcp.exchange(ANSWER),
        "the TCP connection was left"
    );
    assert!(
        !sessions.removed_udp.exchange(ANSWER),
        "the UDP flow was left"
    );
    sessions.assert_survivors("after the reload that removed the source");
    let metrics = support::daemon::http_get_ok(
        lab.node(),
        sa(std::net::Ipv4Addr::LOCALHOST, 9811),
        "/metrics",
    );
    assert!(
        metrics
            .body
            .contains("nodeport_guard_revoked_connections_total{result=\"cut\"} 2"),
        "{}",
        metrics.body
    );
}
backend_tests!(daemon_cuts_only_what_a_reload_takes_away);
