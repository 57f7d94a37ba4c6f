//! Scenarios `reload` and `idle`: the daemon, its reload latency and its cost at rest.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::opts::Opts;
use crate::policies::{bulk, guard_policy};
use crate::report::{Report, Target, ms, percentile};
use crate::signals::REGISTRY;
use crate::site::Site;
use crate::support;
use crate::support::{Backend as LabBackend, Connect, Lab, Netns, Proto, Role, addr};
use crate::{NODEPORT, TARGET_PORT, bin};

/// A daemon running in a namespace; stopped (SIGTERM, then SIGKILL) on drop.
pub(crate) struct Daemon {
    pub(crate) child: Child,
}

impl Daemon {
    pub(crate) fn start(site: &Site, ns: &Netns) -> Daemon {
        let log = std::fs::File::create(site.path("daemon.log")).expect("log file");
        let args = site.args(&["run"]);
        let child = ns.run(|| {
            Command::new(bin())
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start the daemon")
        });
        REGISTRY.daemon(child.id());
        Daemon { child }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                REGISTRY.forget(self.child.id());
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        REGISTRY.forget(self.child.id());
    }
}

/// A lab (client, node, pod) whose node runs a bare server behind a NodePort-style DNAT
/// `NODE:30008 → NODE:8080`, without any firewall.
pub(crate) fn nodeport_lab(backend: LabBackend) -> Lab {
    let mut lab = Lab::builder(backend).standard_services(false).build();
    let node = SocketAddr::new(addr::NODE_V4.into(), TARGET_PORT);
    lab.serve_tcp(Role::Node, node, "nodeport-target");
    lab.add_dnat(Proto::Tcp, NODEPORT, node);
    lab
}

pub(crate) fn nodeport() -> SocketAddr {
    SocketAddr::new(addr::NODE_V4.into(), NODEPORT)
}

/// Whether a connection from `src` to the NodePort gets through within `timeout` (the
/// handshake completes; the per-packet sink answers nothing).
pub(crate) fn passes(lab: &Lab, src: Ipv4Addr, timeout: Duration) -> bool {
    matches!(
        Connect::to(nodeport())
            .from(IpAddr::V4(src))
            .timeout(timeout)
            .tcp(lab.client()),
        Ok(_) | Err(support::ConnectError::NoReply(_))
    )
}

pub(crate) fn reload_policy(allowed: Ipv4Addr) -> String {
    guard_policy(&[format!("{allowed}/32")])
}

pub(crate) fn wait_for(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the daemon's first apply guards the NodePort: `allowed` gets through, `denied`
/// does not.
pub(crate) fn wait_for_guard(lab: &Lab, allowed: Ipv4Addr, denied: Ipv4Addr) {
    wait_for("the daemon's first apply", Duration::from_secs(120), || {
        !passes(lab, denied, Duration::from_millis(50))
            && passes(lab, allowed, Duration::from_millis(200))
    });
}

pub(crate) fn reload_scenario(opts: &Opts, report: &mut Report) {
    let reloads = opts.runs(100, 20);
    for &backend in &opts.backends {
        println!(
            "reload, {backend:?}: {} policies + the probe policy, debounce 100ms, {reloads} reloads",
            opts.policies
        );
        let lab = nodeport_lab(backend.lab());
        let site = Site::new(backend, "debounce: 100ms\n");
        site.write_policy("bulk.yaml", &bulk(opts.policies));
        let [first, second] = [addr::CLIENT_V4[1], addr::CLIENT_V4[2]];
        site.write_policy("reload.yaml", &reload_policy(first));
        let daemon = Daemon::start(&site, lab.node());
        wait_for_guard(&lab, first, second);
        // Two reloads untimed (there and back): the first after the start also waits for the
        // start's own bookkeeping (recording 17,000 rules' origins), which no later reload does.
        for allowed in [second, first] {
            let temporary = site.policies().join(".reload.yaml.tmp");
            std::fs::write(&temporary, reload_policy(allowed)).expect("write");
            std::fs::rename(&temporary, site.policies().join("reload.yaml")).expect("rename");
            wait_for("the warm-up reload", Duration::from_secs(30), || {
                passes(&lab, allowed, Duration::from_millis(5))
            });
            std::thread::sleep(Duration::from_millis(300));
        }
        let mut latencies = Vec::new();
        for index in 0..reloads {
            let allowed = if index % 2 == 0 { second } else { first };
            let temporary = site.policies().join(".reload.yaml.tmp");
            std::fs::write(&temporary, reload_policy(allowed)).expect("write");
            let started = Instant::now();
            std::fs::rename(&temporary, site.policies().join("reload.yaml")).expect("rename");
            loop {
                if passes(&lab, allowed, Duration::from_millis(5)) {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "reload {index} never took effect; see {}",
                    site.path("daemon.log").display()
                );
            }
            latencies.push(started.elapsed());
            print!(".");
            let _ = std::io::stdout().flush();
            // Let the daemon settle (its verify may still run) before the next change.
            std::thread::sleep(Duration::from_millis(300));
        }
        let mut sorted: Vec<u128> = latencies.iter().map(Duration::as_millis).collect();
        sorted.sort_unstable();
        let in_order: Vec<u128> = latencies.iter().map(Duration::as_millis).collect();
        println!(" ms, in order: {in_order:?}; sorted: {sorted:?}");
        let rss = status_kib(daemon.pid(), "VmRSS:");
        report.add(
            "reload",
            backend.arg(),
            &format!("rename → effective, p50 ({reloads} reloads)"),
            ms(percentile(&latencies, 0.5)),
            "debounce 100 ms".to_owned(),
            None,
            Target::None,
        );
        report.add(
            "reload",
            backend.arg(),
            &format!("rename → effective, p99 ({reloads} reloads)"),
            ms(percentile(&latencies, 0.99)),
            "150 ms".to_owned(),
            Some(percentile(&latencies, 0.99).as_secs_f64() / 0.15),
            Target::AtMost(1.0),
        );
        report.add(
            "reload",
            backend.arg(),
            "daemon resident memory after the reloads",
            format!("{:.1} MiB", rss as f64 / 1024.0),
            format!("{} MiB", resident_target(opts.policies)),
            Some(rss as f64 / 1024.0 / resident_target(opts.policies)),
            Target::AtMost(1.0),
        );
        drop(daemon);
    }
}

/// The target for the daemon's resident memory at rest, in MiB: 16 at 1,000 policies,
/// 64 at 10,000 (in between and beyond, the nearer of the two).
fn resident_target(policies: usize) -> f64 {
    if policies > 3_000 { 64.0 } else { 16.0 }
}

/// A `/proc/<pid>/status` figure in KiB (or a count).
pub(crate) fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            line.strip_prefix(field)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// User + system CPU time of a process so far.
pub(crate) fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // USER_HZ, the unit of these fields, is 100 on every Linux architecture that matters.
    Duration::from_millis(ticks * 10)
}

/// Waits (up to two minutes) until `pid` has used no CPU and run no program for two seconds in
/// a row.
fn wait_at_rest(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = cpu_time(pid);
    let mut still = 0;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1));
        let now = cpu_time(pid);
        // A daemon waiting for a program it ran (`nft` reading back 170,000 rules takes
        // seconds) uses no CPU of its own meanwhile: that is not rest.
        if now == last && !has_children(pid) {
            still += 1;
            if still == 2 {
                return;
            }
        } else {
            still = 0;
        }
        last = now;
    }
    println!("  the daemon did not come to rest within two minutes");
}

/// Whether a process of `pid`'s is running (found by its parent field in `/proc/*/stat`).
fn has_children(pid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let parent = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        parent == Some(pid)
    })
}

pub(crate) fn idle_scenario(opts: &Opts, report: &mut Report) {
    let window = Duration::from_secs(if opts.quick { 15 } else { 60 });
    for &backend in &opts.backends {
        println!(
            "idle, {backend:?}: the daemon at rest with {} policies for {window:?}",
            opts.policies
        );
        let lab = nodeport_lab(backend.lab());
        let site = Site::new(backend, "debounce: 100ms\n");
        site.write_policy("bulk.yaml", &bulk(opts.policies));
        site.write_policy("reload.yaml", &reload_policy(addr::CLIENT_V4[1]));
        let daemon = Daemon::start(&site, lab.node());
        wait_for_guard(&lab, addr::CLIENT_V4[1], addr::CLIENT_V4[2]);
        let pid = daemon.pid();
        // The rules work before the daemon is done (it verifies, records the applied state,
        // reads counters); at 10,000 policies that takes seconds. At rest means its CPU time
        // stopped moving.
        wait_at_rest(pid);
        let cpu_before = cpu_time(pid);
        let switches_before = status_kib(pid, "voluntary_ctxt_switches:")
            + status_kib(pid, "nonvoluntary_ctxt_switches:");
        std::thread::sleep(window);
        let cpu = cpu_time(pid).saturating_sub(cpu_before);
        let switches = (status_kib(pid, "voluntary_ctxt_switches:")
            + status_kib(pid, "nonvoluntary_ctxt_switches:"))
        .saturating_sub(switches_before);
        let rss = status_kib(pid, "VmRSS:");
        let hwm = status_kib(pid, "VmHWM:");
        // Anonymous (heap, stacks) and file-backed (the binary's code and libc, shared with
        // the page cache) pages, for the doc's account of what the figure is made of.
        let (anon, file) = (status_kib(pid, "RssAnon:"), status_kib(pid, "RssFile:"));
        report.add(
            "idle",
            backend.arg(),
            &format!("resident memory at rest, {} policies", opts.policies),
            format!(
                "{:.1} MiB ({:.1} anonymous, {:.1} file; peak {:.1} MiB)",
                rss as f64 / 1024.0,
                anon as f64 / 1024.0,
                file as f64 / 1024.0,
                hwm as f64 / 1024.0
            ),
            format!("{} MiB", resident_target(opts.policies)),
            Some(rss as f64 / 1024.0 / resident_target(opts.policies)),
            Target::AtMost(1.0),
        );
        report.add(
            "idle",
            backend.arg(),
            &format!("CPU over {} idle seconds", window.as_secs()),
            format!(
                "{} ({:.3} %; {:.1} wakeups/s)",
                ms(cpu),
                cpu.as_secs_f64() / window.as_secs_f64() * 100.0,
                switches as f64 / window.as_secs_f64()
            ),
            "≈ 0 (≤ 0.1 % of one core)".to_owned(),
            Some(cpu.as_secs_f64() / window.as_secs_f64() * 100.0 / 0.1),
            Target::AtMost(1.0),
        );
        drop(daemon);
    }
}
