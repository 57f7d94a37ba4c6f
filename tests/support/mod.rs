//! Kernel test harness for nodeport-guard.
//!
//! The tool programs iptables/ipset/nftables rules, so its interesting tests
//! have to run against the real kernel. This harness builds throw-away network
//! namespaces, wires them together with veth pairs, runs TCP/UDP servers and
//! clients inside them *from Rust threads* (no `nc`/`socat` needed), captures
//! NFLOG messages and offers assertions on kernel state. Nothing here touches
//! the host's own (root namespace) firewall, addresses or routes: every veth
//! pair is created directly inside the namespaces (`ip -n A link add … peer
//! … netns B`), so no interface ever appears in the root namespace.
//!
//! # Topology built by [`Lab`]
//!
//! ```text
//!         client                          node                          pod
//!  +----------------------+      +------------------------------+      +------------------+
//!  | eth0                 | veth | eth0                    eth1 | veth | eth0             |
//!  | 198.51.100.10-13/24  |------| 198.51.100.1/24 192.0.2.1/24 |------| 192.0.2.2/24     |
//!  | 2001:db8:1::10-13/64 |      | 2001:db8:1::1/64             |      | 2001:db8:3::2/64 |
//!  | 203.0.113.10-13/32   |      |             2001:db8:3::1/64 |      | default via node |
//!  | 2001:db8:2::10-13/128|      | forwarding on (v4 and v6)    |      +------------------+
//!  | pod nets via node    |      | 203.0.113.0/24, 2001:db8:2:: |
//!  +----------------------+      |   /64 via client (.10, ::10) |
//!                                +------------------------------+
//! ```
//!
//! The client's 198.51.100.x / 2001:db8:1::x sources are on-link with the
//! node; the 203.0.113.x / 2001:db8:2::x sources are a *different* network
//! that the node reaches through a route, so a test can whitelist one network
//! and prove that the other is blocked. See [`addr`] and [`ports`] for the
//! constants and [`Lab::new`] for the standard services (a NodePort-like DNAT
//! to a local server, a docker-like DNAT to the pod, a plain host service and
//! a server on the client for the node's own outbound connections).
//!
//! # Usage
//!
//! ```ignore
//! mod support;
//!
//! use std::net::SocketAddr;
//! use support::{Backend, CONNECT_TIMEOUT, DROP_TIMEOUT, Family, Lab, NflogCapture, addr, ports};
//!
//! fn nodeport_whitelist(backend: Backend) {
//!     let lab = Lab::new(backend);
//!     let log = NflogCapture::start(lab.node(), 1);
//!     // ... run nodeport-guard inside lab.node(), e.g. lab.node().exec_ok(bin, &args) ...
//!     let nodeport = SocketAddr::new(addr::NODE_V4.into(), ports::NODEPORT);
//!     let allowed = addr::CLIENT_V4[0].into();      // whitelisted by the policy
//!     let blocked = addr::CLIENT_REMOTE_V4[0].into(); // not whitelisted
//!     assert!(lab.connect(allowed, nodeport, CONNECT_TIMEOUT).is_ok());
//!     assert!(lab.connect(blocked, nodeport, DROP_TIMEOUT).unwrap_err().is_timeout());
//!     let event = log.expect_prefix("DPI0|allow-cluster-nodeport-only", CONNECT_TIMEOUT);
//!     assert_eq!(event.src, Some(blocked));
//! }
//!
//! #[test]
//! fn nodeport_whitelist_legacy() {
//!     support::require_kernel!();
//!     nodeport_whitelist(Backend::Legacy);
//! }
//! ```
//!
//! To run the real binary on the node, use [`Guard`] (a temporary config,
//! policy and state directory per test, every command run in the node
//! namespace with the lab's `--backend`; `guard.rs`), [`Background`] for a
//! command it started in the background (`background.rs`), [`Snapshot`] to
//! compare kernel state (`snapshot.rs`), [`check_reachability`] to run many
//! probes at once (`reachability.rs`), `backend_tests!` to turn a
//! `fn(Backend)` into one test per backend (`macros.rs`), and the policies
//! several tests share, such as the mission policy, from [`fixtures`].
//!
//! To run the daemon (`nodeport-guard run`) as a child process in the node
//! namespace, read its log, signal it and scrape its `/metrics`, use
//! [`daemon::Daemon`] (started from a `Guard`; killed with SIGKILL on drop
//! if the test did not stop it), [`daemon::http_get`] and
//! [`daemon::parse_prometheus`].
//!
//! Kernel tests are skipped (with a visible "skipped: needs root" line) when
//! not running as root, unless [`REQUIRE_KERNEL_TESTS_ENV`]
//! (`NPG_REQUIRE_KERNEL_TESTS=1`) is set, in which case they fail instead: CI
//! sets it so that kernel tests can never be skipped silently.
//!
//! The harness must be mounted at the crate root of each test binary
//! (`mod support;`), because [`require_kernel!`] refers to `crate::support`.
//!
//! # Requirements
//!
//! Root (CAP_SYS_ADMIN + CAP_NET_ADMIN), iproute2, `iptables-legacy`,
//! `iptables-nft` and their `ip6tables`/`-save`/`-restore` siblings, `ipset`,
//! `nft`, `conntrack` (conntrack-tools) and `tcpdump` (only for
//! [`NflogCapture`]). The `nix` dev-dependency needs the `sched` feature for
//! `setns(2)`, besides `fs`, `net`, `process`, `signal`, `socket`, `user`.
//!
//! # Kernel behaviour worth knowing
//!
//! * IPv6 addresses are "tentative" (unbindable) for about a second while
//!   duplicate address detection runs; the lab adds them with `nodad` and sets
//!   `accept_dad=0`, so they are usable at once.
//! * `rp_filter` is pinned to 0 in every lab namespace rather than inherited.
//! * iptables-legacy takes the host-wide `/run/xtables.lock` even inside a
//!   namespace, so parallel tests serialize on it. Debian 12's 1.8.9 waits
//!   for the lock anyway, but other releases fail at once ("Another app is
//!   currently holding the xtables lock") unless given `-w`, which
//!   [`Lab::iptables`] therefore always passes.
//! * NFLOG messages are batched by the kernel for up to one second (see
//!   [`nflog`]): wait with a deadline, and wait longer than that before
//!   concluding that something was not logged.
//! * Over a veth, an ICMP error answering a TCP SYN (plain `REJECT`,
//!   `icmp-admin-prohibited`, …) arrives while connect() still holds the
//!   socket lock and is kept only as a "soft" error; the SYN is retransmitted
//!   and connect() just times out. [`Connect`] reads the soft error
//!   (`SO_ERROR`) after the timeout, so such a reject costs the timeout but is
//!   reported as refused/unreachable, not as a drop. `tcp-reset` is instant.
//! * With a fixed source port, a just-closed connection's 4-tuple stays busy
//!   (LAST_ACK) until the peer's final ACK arrives; [`Connect`] retries on
//!   EADDRNOTAVAIL until its deadline.
//! * Conntrack tables are per namespace. A flow that is already tracked keeps
//!   its DNAT mapping and matches `--ctstate ESTABLISHED` rules until it
//!   expires or [`conntrack_flush`] removes it, so flush after changing rules
//!   when earlier probes used the same flow.
//! * `nft list ruleset` cannot print the DNAT target of `ip6tables-nft`
//!   (it is an xtables compat expression: "XT target DNAT not found"); use
//!   [`iptables_save`] to inspect rules of the nft flavour reliably.

// Each test binary that does `mod support;` uses a different subset of the
// harness, so unused items are expected and must not fail `-D warnings`.
#![allow(dead_code, unused_imports, unused_macros)]

pub mod background;
pub mod cmd;
pub mod daemon;
pub mod executable;
pub mod fixtures;
pub mod flood;
pub mod guard;
pub mod lab;
mod macros;
pub mod netns;
pub mod nflog;
pub mod reachability;
pub mod session;
pub mod snapshot;
pub mod sock;
pub mod state;

use std::io::Write;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use background::Background;
pub use cmd::CmdOutput;
pub use flood::Flood;
pub use guard::{BIN, Guard, NODE_NAME, POLL, SETTLE_TIMEOUT, backend_arg, iptables};
pub use lab::{Backend, Family, Lab, LabBuilder, Proto, Role, addr, ports, replies};
pub use netns::{Netns, link_veth};
pub use nflog::{NflogCapture, NflogEvent};
pub use reachability::{Expect, Probe, check_reachability, dropped, open, refused, sa};
pub use snapshot::{Snapshot, assert_same_state, nft_tables};
pub use sock::{Connect, ConnectError, TcpServer, UdpServer, connect, udp_probe};
pub use state::{
    conntrack_flush, conntrack_list, ipset_list_names, iptables_save, nft_list_ruleset,
};

/// Environment variable that turns "skip kernel tests" into "fail kernel
/// tests". CI sets `NPG_REQUIRE_KERNEL_TESTS=1` so that a runner that lost
/// root (or `ip`) cannot produce a green run that tested nothing.
pub const REQUIRE_KERNEL_TESTS_ENV: &str = "NPG_REQUIRE_KERNEL_TESTS";

/// Timeout for connections that are *expected to be dropped*. A dropped SYN
/// produces no answer at all, so this is the time a negative check costs; on
/// an idle veth a successful handshake takes well under a millisecond, so one
/// second leaves a large margin without making the suite slow.
pub const DROP_TIMEOUT: Duration = Duration::from_secs(1);

/// Timeout for connections that are *expected to succeed*. Generous, because
/// a success returns as soon as it happens and a slow CI machine should not
/// turn into a flaky failure.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the gate decided for this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateDecision {
    /// Kernel tests can run.
    Run,
    /// Kernel tests cannot run here and are not required: skip them.
    Skip(String),
    /// Kernel tests cannot run here but CI requires them: fail.
    Fail(String),
}

/// Pure decision logic of the gate, separated from the environment so that it
/// can be unit-tested: `unavailable` is `Some(reason)` when the kernel tests
/// cannot run, `required` is whether [`REQUIRE_KERNEL_TESTS_ENV`] is set.
pub fn gate_decision(unavailable: Option<&str>, required: bool) -> GateDecision {
    match (unavailable, required) {
        (None, _) => GateDecision::Run,
        (Some(reason), false) => GateDecision::Skip(reason.to_string()),
        (Some(reason), true) => GateDecision::Fail(reason.to_string()),
    }
}

/// Whether the environment demands that kernel tests run (`=1` or `=true`).
pub fn kernel_tests_required() -> bool {
    std::env::var(REQUIRE_KERNEL_TESTS_ENV)
        .map(|v| matches!(v.trim(), "1" | "true" | "yes"))
        .unwrap_or(false)
}

/// Why kernel tests cannot run in this process, or `None` if they can.
///
/// Checked once per process: effective uid 0, an `ip` binary, and an actual
/// `ip netns add`/`del` round trip (root inside an unprivileged container may
/// still lack CAP_SYS_ADMIN, which only a real attempt reveals).
pub fn kernel_unavailable_reason() -> Option<String> {
    static REASON: OnceLock<Option<String>> = OnceLock::new();
    REASON
        .get_or_init(|| {
            if !nix::unistd::geteuid().is_root() {
                return Some("effective uid is not 0".to_string());
            }
            if cmd::find_program("ip").is_none() {
                return Some(
                    "`ip` (iproute2) was not found in PATH or the sbin directories".to_string(),
                );
            }
            netns::probe_netns_support().err()
        })
        .clone()
}

/// Function form of [`require_kernel!`]: returns `true` if the calling test
/// should go on, prints a "skipped" line and returns `false` if it should
/// return early, and panics if kernel tests are required but impossible.
#[track_caller]
pub fn kernel_tests_enabled() -> bool {
    let reason = kernel_unavailable_reason();
    match gate_decision(reason.as_deref(), kernel_tests_required()) {
        GateDecision::Run => true,
        GateDecision::Skip(reason) => {
            let test = std::thread::current()
                .name()
                .unwrap_or("<unnamed test>")
                .to_string();
            // Written to the real stderr rather than through `eprintln!`, which
            // libtest captures, so the skip is visible in every test log.
            let _ = writeln!(
                std::io::stderr(),
                "skipped: needs root: kernel test `{test}` did not run ({reason}); \
                 set {REQUIRE_KERNEL_TESTS_ENV}=1 to make this a failure"
            );
            false
        }
        GateDecision::Fail(reason) => {
            panic!("{REQUIRE_KERNEL_TESTS_ENV} is set, but kernel tests cannot run here: {reason}")
        }
    }
}

/// Put at the top of every kernel test: returns from the test (after printing
/// "skipped: needs root …") when it cannot run, or panics when
/// `NPG_REQUIRE_KERNEL_TESTS=1` demands that it runs.
macro_rules! require_kernel {
    () => {
        if !$crate::support::kernel_tests_enabled() {
            return;
        }
    };
}
pub(crate) use require_kernel;

pub(crate) use macros::backend_tests;

/// Asserts that `haystack` contains `needle`; `what` names it in the failure message.
#[track_caller]
pub fn assert_contains(haystack: &str, needle: &str, what: &str) {
    assert!(
        haystack.contains(needle),
        "{what}: expected {needle:?} in:\n{haystack}"
    );
}

/// Polls `condition` every `poll_interval` until it returns `true` (→ `true`)
/// or `timeout` has passed (→ `false`). The condition is always checked once
/// more at the deadline, so a slow poll cannot make a test miss the state it
/// waited for. Use this instead of fixed sleeps.
pub fn wait_until(
    timeout: Duration,
    poll_interval: Duration,
    mut condition: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(poll_interval.min(deadline - now));
    }
}
