//! Scenario `flood`: TCP SYNs from spoofed sources to the guarded NodePort, absorbed per
//! second, against the raw-table floor.
//!
//! One sender thread writes SYNs into the client's end of the veth as fast as it can; the
//! node processes each on the sender's CPU, in the same system call, so the rate the sender
//! reaches is bound by what the node does with a packet it drops. Per backend, four setups
//! drop the same flood:
//!
//! * the floor: one bare rule in raw `PREROUTING` (nftables: a chain at raw priority),
//!   `-p tcp --syn --dport 30008 ! -s <allowed> -j DROP`, before connection tracking;
//! * the same bare rule in mangle `PREROUTING`, after connection tracking;
//! * nodeport-guard with `earlyDrop: false`: the mission whitelist judged in mangle;
//! * nodeport-guard with `earlyDrop: true` (the default): denied SYNs dropped in raw.
//!
//! Each `--flood-script FILE` adds one more setup per backend: a shell script run in the
//! node's namespace that sets up its own drop (to weigh what a part of a rule costs, for
//! example our rule without its set match).
//!
//! The setups take turns, round after round; each figure is the median of its per-round
//! ratios to the floor of its backend. Rounds are short and many: the machine's speed drifts
//! over seconds, and a floor measured within a second of each setup cancels that out.

use std::io::Write as _;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use crate::NODEPORT;
use crate::daemon::passes;
use crate::opts::{Bk, Opts};
use crate::packet::{Sink, packet_lab};
use crate::policies::guard_policy;
use crate::report::{Report, Target, median_f};
use crate::run::{run_steps, step};
use crate::site::Site;
use crate::support::{Flood, Lab, addr};

/// The mission's whitelist: two clients of the lab and a /28 of the routed network (the
/// flood's sources, 203.0.113.64 and up, are outside it).
fn mission_nets() -> Vec<String> {
    vec![
        format!("{}/32", addr::CLIENT_V4[0]),
        format!("{}/32", addr::CLIENT_V4[2]),
        "203.0.113.0/28".to_owned(),
    ]
}

/// How a setup drops the flood.
#[derive(Clone, PartialEq, Eq)]
enum Dropper {
    RawFloor,
    BareMangle,
    Guard {
        early_drop: bool,
    },
    /// A `--flood-script`.
    Script(String),
}

impl Dropper {
    const ALL: [Dropper; 4] = [
        Dropper::RawFloor,
        Dropper::BareMangle,
        Dropper::Guard { early_drop: false },
        Dropper::Guard { early_drop: true },
    ];

    fn all(opts: &Opts) -> Vec<Dropper> {
        let scripts = opts.flood_scripts.iter().cloned().map(Dropper::Script);
        Dropper::ALL.into_iter().chain(scripts).collect()
    }

    fn name(&self) -> String {
        match self {
            Dropper::RawFloor => "a bare raw PREROUTING drop (the floor)".to_owned(),
            Dropper::BareMangle => "a bare mangle PREROUTING drop (after conntrack)".to_owned(),
            Dropper::Guard { early_drop: false } => {
                "nodeport-guard, earlyDrop: false (mangle)".to_owned()
            }
            Dropper::Guard { early_drop: true } => {
                "nodeport-guard, earlyDrop: true (raw)".to_owned()
            }
            Dropper::Script(path) => format!("script {path}"),
        }
    }
}

struct FloodSetup {
    backend: Bk,
    dropper: Dropper,
    lab: Lab,
    _site: Option<Site>,
    _sink: Sink,
}

/// The bare rule, in `table` (`raw` or `mangle`), in the backend's own syntax.
fn bare_rule(backend: Bk, table: &str) -> Vec<crate::run::Step> {
    let allowed = addr::CLIENT_V4[0].to_string();
    let port = NODEPORT.to_string();
    if backend.iptables() {
        let rule = [
            "-t",
            table,
            "-A",
            "PREROUTING",
            "-p",
            "tcp",
            "--syn",
            "--dport",
            &port,
            "!",
            "-s",
            &allowed,
            "-j",
            "DROP",
        ];
        return vec![step(&backend.tool(false, ""), &rule, None)];
    }
    let priority = if table == "raw" { -300 } else { -150 };
    let script = format!(
        "table ip bare {{\n  chain prerouting {{\n    type filter hook prerouting priority {priority}; policy accept;\n    tcp dport {NODEPORT} tcp flags syn / syn,ack ip saddr != {allowed} drop\n  }}\n}}\n"
    );
    vec![step("nft", &["-f", "-"], Some(&script))]
}

fn setup(backend: Bk, dropper: Dropper) -> FloodSetup {
    let (lab, sink) = packet_lab(backend.lab());
    let site = match &dropper {
        Dropper::RawFloor => {
            run_steps(lab.node(), &bare_rule(backend, "raw"));
            None
        }
        Dropper::BareMangle => {
            run_steps(lab.node(), &bare_rule(backend, "mangle"));
            None
        }
        Dropper::Script(path) => {
            run_steps(lab.node(), &[step("sh", &["-e", path], None)]);
            None
        }
        Dropper::Guard { early_drop } => {
            let site = Site::new(backend, &format!("earlyDrop: {early_drop}\n"));
            site.write_policy("guard.yaml", &guard_policy(&mission_nets()));
            site.run(lab.node(), &["apply", "--yes"]);
            Some(site)
        }
    };
    assert!(
        passes(&lab, addr::CLIENT_V4[0], Duration::from_secs(2)),
        "the whitelisted client must get through ({})",
        dropper.name()
    );
    assert!(
        !passes(&lab, addr::CLIENT_V4[3], Duration::from_millis(300)),
        "others must not ({})",
        dropper.name()
    );
    FloodSetup {
        backend,
        dropper,
        lab,
        _site: site,
        _sink: sink,
    }
}

/// SYNs the node absorbs per second, flooded for `duration` by one sender.
fn absorbed_per_second(lab: &Lab, duration: Duration) -> f64 {
    let nodeport = SocketAddrV4::new(addr::NODE_V4, NODEPORT);
    let flood = Flood::start(lab.client(), nodeport, 1);
    // Let the sender get going before counting.
    std::thread::sleep(Duration::from_millis(50));
    let before = flood.sent();
    let started = Instant::now();
    std::thread::sleep(duration);
    let sent = flood.sent() - before;
    let elapsed = started.elapsed();
    flood.stop();
    sent as f64 / elapsed.as_secs_f64()
}

pub(crate) fn flood_scenario(opts: &Opts, report: &mut Report) {
    let rounds = opts.runs(25, 5);
    let duration = Duration::from_millis(if opts.quick { 200 } else { 400 });
    let mut setups = Vec::new();
    for &backend in &opts.backends {
        for dropper in Dropper::all(opts) {
            setups.push(setup(backend, dropper));
        }
    }
    println!(
        "flood: {} setups, {rounds} rounds of {duration:?} each, one sender",
        setups.len()
    );
    for setup in &setups {
        absorbed_per_second(&setup.lab, Duration::from_millis(200));
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
    for round in 0..rounds {
        // Rotate the order every round so no setup always runs right after the same one.
        for offset in 0..setups.len() {
            let index = (offset + round) % setups.len();
            rates[index].push(absorbed_per_second(&setups[index].lab, duration));
        }
        print!(".");
        let _ = std::io::stdout().flush();
    }
    println!();
    for &backend in &opts.backends {
        let of = |dropper: &Dropper| {
            setups
                .iter()
                .position(|s| s.backend == backend && s.dropper == *dropper)
                .map(|index| &rates[index])
                .expect("every setup ran")
        };
        let floor = of(&Dropper::RawFloor);
        for dropper in Dropper::all(opts) {
            let own = of(&dropper);
            let ratios: Vec<f64> = own.iter().zip(floor).map(|(a, b)| a / b.max(1.0)).collect();
            let target = match &dropper {
                Dropper::Guard { early_drop: true } => Target::AtLeast(0.9),
                _ => Target::None,
            };
            report.add(
                "flood",
                backend.arg(),
                &format!("SYNs absorbed/s, {}", dropper.name()),
                format!("{:.0}/s", median_f(own)),
                format!("{:.0}/s (raw floor)", median_f(floor)),
                Some(median_f(&ratios)),
                target,
            );
        }
    }
}
