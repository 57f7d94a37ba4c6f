//! Scenario `packet`: new TCP connections per second through a guarded NodePort.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::daemon::passes;
use crate::opts::{Bk, Opts};
use crate::policies::{guard_policy, many_endpoints, whitelist};
use crate::report::{Report, Target, median_f};
use crate::run::run_steps;
use crate::site::{Site, restore_steps};
use crate::support::{Backend as LabBackend, Lab, Netns, Proto, addr};
use crate::{NODEPORT, TARGET_PORT};

/// A server that accepts and forgets, on two threads, in the node namespace.
pub(crate) struct Sink {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) threads: Vec<std::thread::JoinHandle<()>>,
    pub(crate) listener: Arc<std::net::TcpListener>,
}

impl Sink {
    pub(crate) fn start(ns: &Netns, bind: SocketAddr) -> Sink {
        // A deep accept queue: the clients complete handshakes in the kernel faster than two
        // threads accept them whenever the scheduler looks away, and a full queue drops SYNs
        // (each costing the client a one-second retransmission).
        ns.sysctl("net.core.somaxconn", "4096");
        let listener = ns.run(|| {
            use nix::sys::socket::{
                AddressFamily, Backlog, SockFlag, SockType, SockaddrIn, bind as bind_to, listen,
                socket,
            };
            let SocketAddr::V4(v4) = bind else {
                panic!("the sink listens on IPv4")
            };
            let fd = socket(
                AddressFamily::Inet,
                SockType::Stream,
                SockFlag::SOCK_CLOEXEC,
                None,
            )
            .expect("socket");
            use std::os::fd::AsRawFd as _;
            bind_to(fd.as_raw_fd(), &SockaddrIn::from(v4)).expect("bind the sink");
            listen(&fd, Backlog::new(4096).expect("backlog")).expect("listen");
            std::net::TcpListener::from(fd)
        });
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..2)
            .map(|i| {
                let listener = Arc::clone(&listener);
                let stop = Arc::clone(&stop);
                ns.spawn(&format!("sink-{i}"), move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = listener.accept();
                    }
                })
            })
            .collect();
        Sink {
            stop,
            threads,
            listener,
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd as _;
        self.stop.store(true, Ordering::Relaxed);
        // Shutting a listening socket down wakes every accept() on it with an error.
        let _ =
            nix::sys::socket::shutdown(self.listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// One guarded NodePort (or an unguarded one) ready for load.
pub(crate) struct PacketSetup {
    pub(crate) name: String,
    pub(crate) backend: String,
    pub(crate) cidrs: usize,
    pub(crate) lab: Lab,
    pub(crate) _site: Option<Site>,
    pub(crate) _sink: Sink,
}

pub(crate) fn packet_lab(backend: LabBackend) -> (Lab, Sink) {
    let lab = Lab::builder(backend).standard_services(false).build();
    // Short conntrack timeouts for closed flows, so a long run never fills the table.
    for key in [
        "net.netfilter.nf_conntrack_tcp_timeout_close",
        "net.netfilter.nf_conntrack_tcp_timeout_time_wait",
    ] {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lab.node().sysctl(key, "1");
        }));
    }
    let target = SocketAddr::new(addr::NODE_V4.into(), TARGET_PORT);
    let sink = Sink::start(lab.node(), target);
    lab.add_dnat(Proto::Tcp, NODEPORT, target);
    (lab, sink)
}

/// Felix's way to match a list of nets: one rule per CIDR, made from our own render by
/// replacing the set match of the whitelist rule with one `-s` rule per member.
pub(crate) fn felix_style(rendered: &str) -> String {
    let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in rendered.lines() {
        if let Some(rest) = line.strip_prefix("add ") {
            let mut parts = rest.split_whitespace();
            if let (Some(set), Some(member)) = (parts.next(), parts.next()) {
                members
                    .entry(set.to_owned())
                    .or_default()
                    .push(member.to_owned());
            }
        }
    }
    let mut out = String::new();
    for line in rendered.lines() {
        let whitelist = members.keys().find(|set| {
            set.starts_with("npg4-n-") && line.contains(&format!("--match-set {set} src"))
        });
        match whitelist {
            Some(set) if line.starts_with("-A ") => {
                let needle = format!("-m set --match-set {set} src");
                for member in &members[set] {
                    let net = if member.contains('/') {
                        member.clone()
                    } else {
                        format!("{member}/32")
                    };
                    let _ = writeln!(out, "{}", line.replacen(&needle, &format!("-s {net}"), 1));
                }
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The whitelisted client gets through the NodePort, others do not.
fn assert_guarded(lab: &Lab) {
    assert!(
        passes(lab, addr::CLIENT_V4[0], Duration::from_secs(2)),
        "the whitelisted client must get through"
    );
    assert!(
        !passes(lab, addr::CLIENT_V4[3], Duration::from_millis(300)),
        "others must not"
    );
}

pub(crate) fn guard_setup(backend: Bk, cidrs: usize, felix: bool) -> PacketSetup {
    let (lab, sink) = packet_lab(backend.lab());
    let site = Site::new(backend, "");
    site.write_policy(
        "guard.yaml",
        &guard_policy(&whitelist(cidrs, addr::CLIENT_V4[0])),
    );
    if felix {
        let rendered = felix_style(&site.render(lab.node()));
        run_steps(lab.node(), &restore_steps(backend, &rendered));
    } else {
        site.run(lab.node(), &["apply", "--yes"]);
    }
    assert_guarded(&lab);
    PacketSetup {
        name: if felix {
            format!("one rule per CIDR ({})", backend.arg())
        } else {
            format!("nodeport-guard {}", backend.arg())
        },
        backend: backend.arg().to_owned(),
        cidrs,
        lab,
        _site: Some(site),
        _sink: sink,
    }
}

/// Host endpoints of the dispatch rows: a host with many VLANs or bonds; the client's `eth0`
/// comes last in name order, so a linear dispatch compares it with every other name first.
const ENDPOINTS: usize = 64;

/// The contrast to nftables' verdict maps: each map rule of our render replaced by one rule
/// per interface, in the map's order (the client's `eth0` last).
pub(crate) fn linear_dispatch(rendered: &str) -> String {
    let mut out = String::new();
    for line in rendered.lines() {
        let Some((head, rest)) = line.split_once(" counter iifname vmap { ") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let (elements, tail) = rest.split_once(" }").expect("a map ends in ` }`");
        for element in elements.split(", ") {
            let (name, verdict) = element.split_once(" : ").expect("name : verdict");
            let _ = writeln!(out, "{head} iifname {name} counter {verdict}{tail}");
        }
    }
    out
}

/// A NodePort guarded for 10 CIDRs on a host with [`ENDPOINTS`] host endpoints, dispatched
/// as nodeport-guard writes it or, with `linear`, one rule per interface.
pub(crate) fn endpoints_setup(backend: Bk, linear: bool) -> PacketSetup {
    let (lab, sink) = packet_lab(backend.lab());
    let site = Site::new(backend, "");
    site.write_policy(
        "guard.yaml",
        &guard_policy(&whitelist(10, addr::CLIENT_V4[0])),
    );
    site.write_policy("endpoints.yaml", &many_endpoints(ENDPOINTS));
    if linear {
        let rendered = site.render(lab.node());
        let linear = linear_dispatch(&rendered);
        assert_ne!(linear, rendered, "the render dispatches with verdict maps");
        run_steps(lab.node(), &restore_steps(backend, &linear));
    } else {
        site.run(lab.node(), &["apply", "--yes"]);
    }
    assert_guarded(&lab);
    let how = if linear {
        "one rule per interface"
    } else {
        "nodeport-guard"
    };
    PacketSetup {
        name: format!("{how} {}, {ENDPOINTS} host endpoints", backend.arg()),
        backend: backend.arg().to_owned(),
        cidrs: 10,
        lab,
        _site: Some(site),
        _sink: sink,
    }
}

/// New connections per second from the client's whitelisted address to the NodePort over
/// `duration`: `threads` clients connecting and resetting (SO_LINGER 0) in a loop.
pub(crate) fn connections_per_second(lab: &Lab, threads: usize, duration: Duration) -> f64 {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, setsockopt, socket, sockopt,
    };
    let count = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let slow = Arc::new(AtomicU64::new(0));
    let start = Arc::new(std::sync::Barrier::new(threads + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (count, errors, start, stop, slow) = (
                Arc::clone(&count),
                Arc::clone(&errors),
                Arc::clone(&start),
                Arc::clone(&stop),
                Arc::clone(&slow),
            );
            lab.client().spawn(&format!("load-{i}"), move || {
                let src = SockaddrIn::from(std::net::SocketAddrV4::new(addr::CLIENT_V4[0], 0));
                let dst = SockaddrIn::from(std::net::SocketAddrV4::new(addr::NODE_V4, NODEPORT));
                let linger = nix::libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                };
                let timeout = nix::sys::time::TimeVal::new(1, 0);
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let Ok(fd) = socket(
                        AddressFamily::Inet,
                        SockType::Stream,
                        SockFlag::SOCK_CLOEXEC,
                        None,
                    ) else {
                        errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let _ = setsockopt(&fd, sockopt::Linger, &linger);
                    let _ = setsockopt(&fd, sockopt::SendTimeout, &timeout);
                    use std::os::fd::AsRawFd as _;
                    let began = Instant::now();
                    let result = bind(fd.as_raw_fd(), &src)
                        .map_err(|e| ("bind", e))
                        .and_then(|()| connect(fd.as_raw_fd(), &dst).map_err(|e| ("connect", e)));
                    if began.elapsed() > Duration::from_millis(100) {
                        slow.fetch_add(1, Ordering::Relaxed);
                    }
                    match result {
                        Ok(()) => {
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                        Err((what, errno)) => {
                            if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("    first failure: {what}: {errno}");
                            }
                        }
                    }
                    // Dropping the socket sends a reset: no TIME_WAIT, the port is free again.
                }
            })
        })
        .collect();
    start.wait();
    let started = Instant::now();
    let before = count.load(Ordering::Relaxed);
    std::thread::sleep(duration);
    let done = count.load(Ordering::Relaxed) - before;
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        let _ = handle.join();
    }
    let failed = errors.load(Ordering::Relaxed);
    let slow = slow.load(Ordering::Relaxed);
    if failed > 0 || slow > 0 {
        println!("    ({failed} failed connections, {slow} took over 100 ms)");
    }
    done as f64 / elapsed.as_secs_f64()
}

pub(crate) fn packet_scenario(opts: &Opts, report: &mut Report) {
    let rounds = opts.runs(7, 3);
    let duration = Duration::from_millis(if opts.quick { 700 } else { 1500 });
    let sizes = [10usize, 1_000, 100_000];
    let threads = 2;
    println!("packet: building the labs (the 100,000-rule ones take a while)");
    let (floor_lab, floor_sink) = packet_lab(LabBackend::Nft);
    let floor = PacketSetup {
        name: "no firewall".to_owned(),
        backend: "-".to_owned(),
        cidrs: 0,
        lab: floor_lab,
        _site: None,
        _sink: floor_sink,
    };
    let mut setups = vec![floor];
    for &backend in &opts.backends {
        for &cidrs in &sizes {
            setups.push(guard_setup(backend, cidrs, false));
        }
    }
    for &backend in opts.backends.iter().filter(|b| b.iptables()) {
        for &cidrs in &sizes {
            setups.push(guard_setup(backend, cidrs, true));
        }
    }
    for &backend in &opts.backends {
        setups.push(endpoints_setup(backend, false));
        if !backend.iptables() {
            setups.push(endpoints_setup(backend, true));
        }
    }
    println!(
        "packet: {} setups, {rounds} rounds of {duration:?} each, {threads} client threads",
        setups.len()
    );
    for setup in &setups {
        connections_per_second(&setup.lab, threads, Duration::from_millis(300));
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
    for round in 0..rounds {
        // Rotate the order every round so no setup always runs right after the same one.
        for offset in 0..setups.len() {
            let index = (offset + round) % setups.len();
            rates[index].push(connections_per_second(
                &setups[index].lab,
                threads,
                duration,
            ));
        }
        print!(".");
        let _ = std::io::stdout().flush();
    }
    println!();
    let floor_rates = &rates[0];
    report.add(
        "packet",
        "-",
        "new connections/s, no firewall (floor)",
        format!("{:.0}/s", median_f(floor_rates)),
        "-".to_owned(),
        None,
        Target::None,
    );
    for (setup, own) in setups.iter().zip(&rates).skip(1) {
        let ratios: Vec<f64> = own
            .iter()
            .zip(floor_rates)
            .map(|(a, b)| a / b.max(1.0))
            .collect();
        let target = if setup.name.starts_with("nodeport-guard") && setup.cidrs == 100_000 {
            Target::AtLeast(0.95)
        } else {
            Target::None
        };
        report.add(
            "packet",
            &setup.backend,
            &format!("new connections/s, {} CIDRs, {}", setup.cidrs, setup.name),
            format!("{:.0}/s", median_f(own)),
            format!("{:.0}/s (no firewall)", median_f(floor_rates)),
            Some(median_f(&ratios)),
            target,
        );
    }
}
