//! Differential testing of the policy semantics: random pre-DNAT policy
//! sets are applied to a real node with `nodeport-guard apply --yes`, and
//! packets from the client are compared with what two evaluators say about
//! them: the reference (`tests/reference/`, written from SPEC.md's
//! "Semantics") and `nodeport-guard trace` (`nodeport_guard::trace`, run on
//! the same files as the library): allowed or dropped, and which NFLOG
//! prefixes are logged.
//!
//! Each case draws policies (orders with ties and without order; actions
//! Allow, Deny, Pass, Log; some of them staged, which only log, some staged
//! twins of enforced ones; nets and notNets covering some of the client's
//! addresses, also lists longer than eight that become ipsets; ports,
//! notPorts and ranges, also more than fifteen; protocols by name and by
//! number, notProtocol, ipVersion; source and destination selectors over
//! GlobalNetworkSets and other nodes' HostEndpoints; policy selectors over
//! the node's labels; both families), a config (`logActions`, failsafe
//! ports, host labels; `earlyDrop` on in even cases and off in odd ones, so
//! denied TCP SYNs are dropped in raw in half the cases and in mangle in the
//! other half, against the same reference), and about eight packets that the reference decides
//! in different ways (see `generate::pick_probes`). The probes of a case run
//! in parallel; a probe the reference drops waits
//! [`DROP_PROBE_TIMEOUT`], one it allows up to [`ALLOW_PROBE_TIMEOUT`].
//! One lab serves every case of a backend (apply replaces the whole set;
//! conntrack is flushed between cases).
//!
//! On a mismatch the case is shrunk (policies, rules, fields, list entries
//! and selector parts removed one at a time while the kernel still
//! disagrees with the reference about that packet) and the test fails with
//! the minimal config and policy YAML, the packet, both verdicts, and the
//! seed to replay it.
//!
//! Environment:
//! - `NPG_DIFF_SEED=<n>` (decimal or `0x…`): the run's seed; without it a
//!   fresh seed is drawn and printed on failure.
//! - `NPG_DIFF_CASES=<n>`: cases per backend (default [`DEFAULT_CASES`]).
//!
//! Backends: iptables-legacy, iptables-nft, and native nftables (the lab's
//! DNAT stays in iptables-nft then, as kube-proxy's would).

mod reference;
mod support;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use reference::generate::{self, Rng};
use reference::{Action, Entity, Family, Packet, Policy, PortSpec, Rule, Scenario, Selector};
use support::{Backend, Connect, ConnectError, Guard, Lab, NflogCapture, Role, conntrack_flush};

/// Cases per backend when `NPG_DIFF_CASES` is not set.
pub const DEFAULT_CASES: usize = 150;

/// Packets probed per case.
pub const PROBES_PER_CASE: usize = 8;

/// How long a probe the reference expects to be dropped waits. The lab is
/// two namespaces on one machine: an answer takes well under a millisecond.
pub const DROP_PROBE_TIMEOUT: Duration = Duration::from_millis(400);

/// How long a probe the reference expects to get through may take. It
/// returns as soon as the answer is there; only a wrongly dropped packet
/// waits this long.
pub const ALLOW_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long to wait for the NFLOG messages the reference expects.
const NFLOG_WAIT: Duration = Duration::from_secs(2);

/// Most kernel runs one shrink may take.
const MAX_SHRINK_RUNS: usize = 400;

/// The UDP service the lab gets besides its standard ones.
const UDP_SERVICE_REPLY: &str = "node-udp-service";

/// Seed and case count of a run.
#[derive(Clone, Copy, Debug)]
struct RunSettings {
    seed: u64,
    cases: usize,
}

fn parse_number(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

fn run_settings() -> RunSettings {
    let seed = std::env::var("NPG_DIFF_SEED")
        .ok()
        .map(|text| {
            parse_number(&text).unwrap_or_else(|| panic!("NPG_DIFF_SEED={text} is not a number"))
        })
        .unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            Rng::new(nanos ^ u64::from(std::process::id())).next_u64()
        });
    let cases = std::env::var("NPG_DIFF_CASES")
        .ok()
        .map(|text| {
            parse_number(&text).unwrap_or_else(|| panic!("NPG_DIFF_CASES={text} is not a number"))
                as usize
        })
        .unwrap_or(DEFAULT_CASES);
    RunSettings { seed, cases }
}

/// What the kernel did with one probe.
#[derive(Clone, Debug)]
struct Observed {
    /// Got through (an answer from a server, or a reset / ICMP refusal from
    /// the node's stack).
    allowed: bool,
    /// The probe's result in words.
    detail: String,
    /// NFLOG prefixes seen for this packet.
    logs: BTreeSet<String>,
}

/// A case that failed.
#[derive(Clone, Debug)]
enum Failure {
    /// `apply --yes` refused or failed.
    Apply(String),
    /// The kernel disagreed with an evaluator (`judge`: the reference or
    /// the trace) about `packet`.
    Mismatch {
        judge: &'static str,
        packet: Packet,
        expected: reference::Verdict,
        observed: Observed,
    },
}

impl Failure {
    fn same_kind(&self, other: &Failure) -> bool {
        matches!(
            (self, other),
            (Failure::Apply(_), Failure::Apply(_))
                | (Failure::Mismatch { .. }, Failure::Mismatch { .. })
        )
    }

    fn describe(&self) -> String {
        match self {
            Failure::Apply(output) => format!("apply --yes failed:\n{output}"),
            Failure::Mismatch {
                judge,
                packet,
                expected,
                observed,
            } => {
                let word = |allowed: bool| if allowed { "allowed" } else { "dropped" };
                let expected_logs: BTreeSet<&String> = expected.logs.iter().collect();
                format!(
                    "packet:    {packet}\n{judge:<10} {}, logs {:?} ({})\nkernel:    {}, logs {:?} ({})",
                    word(expected.allowed),
                    expected_logs,
                    expected.reason,
                    word(observed.allowed),
                    observed.logs,
                    observed.detail
                )
            }
        }
    }
}

/// One backend's lab, guard and NFLOG capture, reused by every case.
struct Differential<'lab> {
    lab: &'lab Lab,
    guard: Guard<'lab>,
    log: NflogCapture,
    runs: usize,
    probes: usize,
    /// Probes the reference expected to be dropped.
    drops: usize,
    /// Probes the reference expected to be logged.
    logged: usize,
}

impl<'lab> Differential<'lab> {
    /// Writes the case's config and policies and applies them; the output
    /// of a failed apply as the error.
    fn apply(&mut self, scenario: &Scenario) -> Result<(), String> {
        self.guard.write_config(&scenario.config.yaml());
        self.guard
            .write_policy("case.yaml", &scenario.policy_yaml());
        let out = self.guard.run(&["apply", "--yes"]);
        self.runs += 1;
        if out.status.code() == Some(0) {
            Ok(())
        } else {
            Err(out.to_string())
        }
    }

    /// Applies `scenario`, probes `packets` in parallel and returns the first
    /// packet the kernel and the reference disagree about.
    fn check(
        &mut self,
        scenario: &Scenario,
        packets: &[Packet],
        patience: Duration,
    ) -> Option<Failure> {
        if let Err(output) = self.apply(scenario) {
            return Some(Failure::Apply(output));
        }
        conntrack_flush(self.lab.node());
        let expected: Vec<reference::Verdict> = packets
            .iter()
            .map(|p| reference::evaluate(scenario, p))
            .collect();
        let traced = traced_verdicts(&self.guard, packets);
        let log_start = self.log.events().len();
        let lab = self.lab;
        let results: Vec<Result<String, ConnectError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = packets
                .iter()
                .zip(&expected)
                .map(|(packet, verdict)| {
                    let timeout = if verdict.allowed {
                        patience
                    } else {
                        DROP_PROBE_TIMEOUT
                    };
                    scope.spawn(move || probe(lab, packet, timeout))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        self.probes += packets.len();
        self.drops += expected.iter().filter(|v| !v.allowed).count();
        self.logged += expected.iter().filter(|v| !v.logs.is_empty()).count();

        // Every expected message, then a moment for unexpected ones.
        let key = |src: IpAddr, sport: u16, dport: u16, proto: u8| (src, sport, dport, proto);
        let wanted: BTreeSet<_> = packets
            .iter()
            .zip(&expected)
            .flat_map(|(p, v)| {
                v.logs
                    .iter()
                    .map(move |prefix| (key(p.src, p.sport, p.dport, p.proto), prefix.clone()))
            })
            .collect();
        let seen = |log: &NflogCapture| -> BTreeSet<((IpAddr, u16, u16, u8), String)> {
            log.events()[log_start..]
                .iter()
                .filter_map(|e| Some((key(e.src?, e.sport?, e.dport?, e.proto?), e.prefix.clone())))
                .collect()
        };
        support::wait_until(NFLOG_WAIT, Duration::from_millis(20), || {
            seen(&self.log).is_superset(&wanted)
        });
        std::thread::sleep(Duration::from_millis(30));
        let seen = seen(&self.log);
        // Each rule logs a packet once: a message twice means a packet was judged twice (by
        // the early drop in raw and again in mangle, say).
        let mut times: std::collections::BTreeMap<_, usize> = std::collections::BTreeMap::new();
        for event in &self.log.events()[log_start..] {
            if let (Some(src), Some(sport), Some(dport), Some(proto)) =
                (event.src, event.sport, event.dport, event.proto)
            {
                *times
                    .entry((key(src, sport, dport, proto), event.prefix.clone()))
                    .or_default() += 1;
            }
        }

        for (((packet, verdict), traced), result) in
            packets.iter().zip(expected).zip(traced).zip(results)
        {
            let (allowed, detail) = match &result {
                Ok(reply) => (true, format!("answered by {reply}")),
                Err(ConnectError::Refused) => (true, "refused by the node's stack".to_owned()),
                Err(ConnectError::TimedOut) => (false, "timed out".to_owned()),
                Err(other) => (!verdict.allowed, format!("unexpected probe error: {other}")),
            };
            let packet_key = key(packet.src, packet.sport, packet.dport, packet.proto);
            let logs: BTreeSet<String> = seen
                .iter()
                .filter(|(k, _)| *k == packet_key)
                .map(|(k, prefix)| match times.get(&(*k, prefix.clone())) {
                    Some(&count) if count > 1 => format!("{prefix} (logged {count} times)"),
                    _ => prefix.clone(),
                })
                .collect();
            let expected_logs: BTreeSet<String> = verdict.logs.iter().cloned().collect();
            let broken = matches!(
                result,
                Err(ref e) if !matches!(e, ConnectError::Refused | ConnectError::TimedOut)
            );
            let observed = Observed {
                allowed,
                detail,
                logs,
            };
            if allowed != verdict.allowed || observed.logs != expected_logs || broken {
                return Some(Failure::Mismatch {
                    judge: "reference:",
                    packet: *packet,
                    expected: verdict,
                    observed,
                });
            }
            let traced_logs: BTreeSet<String> = traced.logs.iter().cloned().collect();
            if allowed != traced.allowed || observed.logs != traced_logs {
                return Some(Failure::Mismatch {
                    judge: "trace:",
                    packet: *packet,
                    expected: traced,
                    observed,
                });
            }
        }
        None
    }

    /// Runs `after` on a node that held exactly `before` (applied to a
    /// cleaned-up node): a case of the shrinker, independent of whatever
    /// ran earlier. `None` also when `before` itself cannot be applied.
    fn check_transition(
        &mut self,
        case: &Transition,
        packets: &[Packet],
        patience: Duration,
    ) -> Option<Failure> {
        self.guard.run_expect(&["cleanup", "--yes"], 0);
        self.apply(&case.before).ok()?;
        self.check(&case.after, packets, patience)
    }

    /// Shrinks a failing case: keeps the smallest variant (of the policy set
    /// applied before and of the one that failed) on which the kernel still
    /// fails the same way for the same packet.
    fn shrink(&mut self, case: Transition, failure: Failure) -> (Transition, Failure, usize) {
        let packets: Vec<Packet> = match &failure {
            Failure::Mismatch { packet, .. } => vec![*packet],
            Failure::Apply(_) => Vec::new(),
        };
        let mut current = (case, failure);
        let mut runs = 0;
        'outer: loop {
            for candidate in current.0.candidates() {
                if runs >= MAX_SHRINK_RUNS {
                    break 'outer;
                }
                runs += 1;
                if let Some(found) =
                    self.check_transition(&candidate, &packets, Duration::from_secs(1))
                    && found.same_kind(&current.1)
                {
                    current = (candidate, found);
                    continue 'outer;
                }
            }
            break;
        }
        // Confirm the minimal case with the patient timeout, so a slow
        // machine cannot pass a timing artefact off as a finding.
        if let Some(confirmed) =
            self.check_transition(&current.0, &packets, support::CONNECT_TIMEOUT)
            && confirmed.same_kind(&current.1)
        {
            current.1 = confirmed;
        }
        (current.0, current.1, runs)
    }
}

/// A case as the shrinker sees it: the policy set the node held, and the
/// one applied on top of it.
#[derive(Clone, Debug)]
struct Transition {
    before: Scenario,
    after: Scenario,
}

impl Transition {
    /// Smaller cases: nothing before, then smaller `after`s, then smaller
    /// `before`s.
    fn candidates(&self) -> Vec<Transition> {
        let mut out = Vec::new();
        if self.before != Scenario::default() {
            out.push(Transition {
                before: Scenario::default(),
                after: self.after.clone(),
            });
        }
        out.extend(
            generate::shrink_candidates(&self.after)
                .into_iter()
                .map(|after| Transition {
                    before: self.before.clone(),
                    after,
                }),
        );
        out.extend(
            generate::shrink_candidates(&self.before)
                .into_iter()
                .map(|before| Transition {
                    before,
                    after: self.after.clone(),
                }),
        );
        out
    }

    /// The case as config and policy files.
    fn describe(&self) -> String {
        let files = |s: &Scenario| {
            format!(
                "--- config.yaml (after `nodeName: node1`) ---\n{}--- policies ---\n{}",
                s.config.yaml(),
                s.policy_yaml()
            )
        };
        if self.before == Scenario::default() {
            files(&self.after)
        } else {
            format!(
                "applied first (on a node without rules):\n{}\nthen:\n{}",
                files(&self.before),
                files(&self.after)
            )
        }
    }
}

/// What `nodeport-guard trace` says about each packet, run as the library on
/// the guard's config and policy files, for the node as the lab builds it
/// (node `node1`, the implicit host endpoint; the probes arrive from the
/// client, never from one of the node's own addresses).
fn traced_verdicts(guard: &Guard<'_>, packets: &[Packet]) -> Vec<reference::Verdict> {
    use nodeport_guard::trace::{ConnState, Outcome, Travel};
    let mut sources = nodeport_guard::source::Sources::default();
    let (config, problems) = nodeport_guard::config::load(&guard.config_path(), &mut sources);
    assert!(problems.is_empty(), "the case's config: {problems:?}");
    let set = nodeport_guard::policy_set::load(&[guard.policies_dir()]);
    assert!(set.is_valid(), "the case's policies: {:?}", set.diagnostics);
    let host = nodeport_guard::facts::HostFacts::minimal(reference::NODE_NAME);
    packets
        .iter()
        .map(|p| {
            let packet = nodeport_guard::trace::Packet {
                src: p.src,
                dst: p.dst,
                protocol: p.proto,
                sport: Some(p.sport),
                dport: Some(p.dport),
                icmp_type: None,
                icmp_code: None,
                in_interface: None,
                out_interface: None,
                travel: Travel::Inbound,
                state: ConnState::New,
            };
            let traced = nodeport_guard::trace::trace(&set.model, &config, &host, &packet);
            reference::Verdict {
                allowed: traced.verdict.outcome != Outcome::Dropped,
                logs: traced.logs.into_iter().map(|l| l.prefix).collect(),
                reason: traced.verdict.reason,
            }
        })
        .collect()
}

/// Sends `packet` from the client and returns the answer.
fn probe(lab: &Lab, packet: &Packet, timeout: Duration) -> Result<String, ConnectError> {
    let connect = Connect::to(SocketAddr::new(packet.dst, packet.dport))
        .from(packet.src)
        .source_port(packet.sport)
        .timeout(timeout);
    if packet.proto == 17 {
        connect.udp(lab.client())
    } else {
        connect.tcp(lab.client())
    }
}

/// The MAC address of `eth0` in `ns`.
fn mac(ns: &support::Netns) -> String {
    let link = ns.ip(&["-o", "link", "show", "eth0"]);
    link.split_whitespace()
        .skip_while(|word| *word != "link/ether")
        .nth(1)
        .unwrap_or_else(|| panic!("no MAC address in {link:?}"))
        .to_owned()
}

/// The standard lab plus UDP servers on 9101 (a plain UDP service) and 68
/// (failsafe DHCP), so every probed UDP port answers when allowed.
///
/// The IPv6 neighbours on the client link are made permanent: a policy may
/// rightly drop ICMPv6 from some sources (a Deny without protocol, or with
/// `protocol: ICMPv6`), which then includes the neighbour advertisements
/// of that source, and the node could no longer answer a *different*
/// source routed through it. That is what the policy says, but it is not
/// what the packet under test is about.
fn differential_lab(backend: Backend) -> Lab {
    let mut lab = Lab::new(backend);
    let (node_mac, client_mac) = (mac(lab.node()), mac(lab.client()));
    for source in generate::sources(Family::V6).iter().take(4) {
        let source = source.to_string();
        lab.node().ip(&[
            "-6",
            "neigh",
            "replace",
            &source,
            "lladdr",
            &client_mac,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ]);
    }
    let node = support::addr::NODE_V6.to_string();
    lab.client().ip(&[
        "-6",
        "neigh",
        "replace",
        &node,
        "lladdr",
        &node_mac,
        "dev",
        "eth0",
        "nud",
        "permanent",
    ]);
    for family in [support::Family::V4, support::Family::V6] {
        for port in [9101, 68] {
            lab.serve_udp(
                Role::Node,
                SocketAddr::new(family.node_addr(), port),
                UDP_SERVICE_REPLY,
            );
        }
    }
    lab
}

/// Runs the differential test against one backend.
fn differential(backend: Backend, native_nftables: bool) {
    let settings = run_settings();
    let name = match (backend, native_nftables) {
        (Backend::Nftables, _) | (_, true) => "nftables",
        (Backend::Legacy, false) => "iptables-legacy",
        (Backend::Nft, false) => "iptables-nft",
    };
    // Each backend gets its own cases from the same run seed.
    let seed = settings.seed ^ reference_hash(name);
    let lab = differential_lab(backend);
    let mut guard = Guard::new(&lab);
    if native_nftables {
        guard = guard.native_nftables();
    }
    let log = NflogCapture::start(lab.node(), 1);
    let mut run = Differential {
        lab: &lab,
        guard,
        log,
        runs: 0,
        probes: 0,
        drops: 0,
        logged: 0,
    };
    let started = Instant::now();
    let mut previous = Scenario::default();
    // Cases with a `Tier` besides `default`.
    let mut tiered = 0;
    for index in 0..settings.cases {
        let mut rng = Rng::new(generate::case_seed(seed, index));
        let scenario = generate::scenario(&mut rng, index);
        let space = generate::packet_space(&mut rng, index);
        let packets = generate::pick_probes(&mut rng, &scenario, space, PROBES_PER_CASE);
        tiered += usize::from(!scenario.tiers.is_empty());
        let Some(failure) = run.check(&scenario, &packets, ALLOW_PROBE_TIMEOUT) else {
            previous = scenario;
            continue;
        };
        let case = Transition {
            before: previous,
            after: scenario,
        };
        let original = format!("{}\n{}", failure.describe(), case.describe());
        let (minimal, failure, shrink_runs) = run.shrink(case, failure);
        let kernel = kernel_rules(&lab, native_nftables);
        panic!(
            "{name}: the kernel disagrees with the reference in case {index} \
             (replay: NPG_DIFF_SEED={} NPG_DIFF_CASES={} cargo test --test kernel_differential {})\n\
             \n=== minimal case (after {shrink_runs} shrinking runs) ===\n{}\n{}\
             \n=== original case ===\n{original}\
             \n=== kernel rules of the minimal case, with counters ===\n{kernel}",
            settings.seed,
            index + 1,
            test_name(name),
            failure.describe(),
            minimal.describe(),
        );
    }
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "{name}: {} cases ({tiered} with tiers), {} probes ({} dropped, {} logged), {} applies agreed with the reference and the trace in {:.1} s (seed {:#x})\n",
            settings.cases,
            run.probes,
            run.drops,
            run.logged,
            run.runs,
            started.elapsed().as_secs_f64(),
            settings.seed
        )
        .as_bytes(),
    );
}

/// Our part of the node's rules with packet counters, for failure
/// messages: `iptables-save -c` / `ip6tables-save -c` of the raw and mangle tables,
/// or our nftables tables.
fn kernel_rules(lab: &Lab, native_nftables: bool) -> String {
    if native_nftables {
        return lab.node().exec("nft", &["list", "ruleset"]).stdout;
    }
    let mut out = String::new();
    for family in [support::Family::V4, support::Family::V6] {
        for table in ["raw", "mangle"] {
            let save = lab
                .node()
                .exec(lab.backend().iptables_save(family), &["-c", "-t", table]);
            out.push_str(&save.stdout);
        }
    }
    out.push_str(&lab.node().exec("ipset", &["list"]).stdout);
    out
}

fn test_name(backend: &str) -> &'static str {
    match backend {
        "iptables-legacy" => "policy_semantics_match_the_reference::legacy",
        "iptables-nft" => "policy_semantics_match_the_reference::nft",
        _ => "policy_semantics_match_the_reference::nftables",
    }
}

/// A fixed number per backend name (FNV-1a), to derive per-backend seeds.
fn reference_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Random pre-DNAT policy sets, applied with `nodeport-guard apply`, treat
/// real packets from the client (TCP and UDP, IPv4 and IPv6, NodePorts
/// before DNAT and plain host ports) exactly as SPEC.md's semantics say:
/// the same packets are allowed and dropped, and the same NFLOG prefixes
/// are logged, as the reference evaluator computes.
mod policy_semantics_match_the_reference {
    #[test]
    fn legacy() {
        crate::support::require_kernel!();
        super::differential(crate::support::Backend::Legacy, false);
    }

    #[test]
    fn nft() {
        crate::support::require_kernel!();
        super::differential(crate::support::Backend::Nft, false);
    }

    #[test]
    fn nftables() {
        crate::support::require_kernel!();
        super::differential(crate::support::Backend::Nft, true);
    }
}

// ---------------------------------------------------------------------------
// The reference evaluator itself (no kernel needed).
// ---------------------------------------------------------------------------

fn ip(text: &str) -> IpAddr {
    text.parse().expect("address")
}

fn tcp(src: &str, dport: u16) -> Packet {
    Packet {
        src: ip(src),
        sport: 20000,
        dst: ip(if src.contains(':') {
            "2001:db8:1::1"
        } else {
            "198.51.100.1"
        }),
        dport,
        proto: 6,
    }
}

fn rule(action: Action) -> Rule {
    Rule {
        action,
        protocol: None,
        not_protocol: None,
        ip_version: None,
        source: Entity::default(),
        destination: Entity::default(),
    }
}

fn from(nets: &[&str], action: Action) -> Rule {
    let mut r = rule(action);
    r.source.nets = nets.iter().map(|n| n.parse().expect("net")).collect();
    r
}

fn policy(name: &str, order: Option<f64>, ingress: Vec<Rule>) -> Policy {
    Policy {
        name: name.into(),
        tier: reference::DEFAULT_TIER.into(),
        order,
        selector: Selector::All,
        explicit_types: false,
        ingress,
        staged: false,
    }
}

fn scenario(policies: Vec<Policy>) -> Scenario {
    Scenario {
        policies,
        ..Scenario::default()
    }
}

/// The reference runs policies by order, then by name, unordered ones
/// last: the first deciding rule wins.
#[test]
fn reference_runs_policies_by_order_then_name_unordered_last() {
    let s = scenario(vec![
        policy("z", None, vec![rule(Action::Allow)]),
        policy("b", Some(10.0), vec![rule(Action::Deny)]),
        policy(
            "a",
            Some(10.0),
            vec![from(&["198.51.100.10/32"], Action::Allow)],
        ),
    ]);
    let allowed = reference::evaluate(&s, &tcp("198.51.100.10", 30008));
    assert!(allowed.allowed, "{allowed:?}");
    assert_eq!(allowed.reason, "Allow by rule 0 of `a`");
    let denied = reference::evaluate(&s, &tcp("198.51.100.11", 30008));
    assert!(!denied.allowed);
    assert_eq!(denied.logs, vec!["DPI0|b".to_string()]);
}

/// Pass skips the remaining policies and ends in the implicit endpoint's
/// allow; Log logs and goes on; no decision means allowed (pre-DNAT has no
/// default deny); failsafe ports are allowed before any policy.
#[test]
fn reference_pass_allows_log_continues_and_failsafe_comes_first() {
    let mut s = scenario(vec![
        policy(
            "first",
            Some(1.0),
            vec![rule(Action::Log), from(&["198.51.100.10/32"], Action::Pass)],
        ),
        policy(
            "second",
            Some(2.0),
            vec![from(&["198.51.100.0/24"], Action::Deny)],
        ),
    ]);
    s.config.log_actions = vec![Action::Pass, Action::Deny];
    let passed = reference::evaluate(&s, &tcp("198.51.100.10", 9100));
    assert!(passed.allowed);
    assert_eq!(passed.logs, vec!["LPI0|first", "PPI1|first"]);
    let denied = reference::evaluate(&s, &tcp("198.51.100.11", 9100));
    assert!(!denied.allowed);
    assert_eq!(denied.logs, vec!["LPI0|first", "DPI0|second"]);
    let undecided = reference::evaluate(&s, &tcp("203.0.113.10", 9100));
    assert!(undecided.allowed);
    let ssh = reference::evaluate(&s, &tcp("198.51.100.11", 22));
    assert!(ssh.allowed && ssh.logs.is_empty());
}

/// Staged policies decide nothing: they log their own view first (`staged:`, Deny always),
/// and the enforced policies decide as without them.
#[test]
fn reference_staged_policies_only_log() {
    let mut staged_deny = policy(
        "gate",
        Some(1.0),
        vec![
            from(&["198.51.100.10/32"], Action::Allow),
            rule(Action::Deny),
        ],
    );
    staged_deny.staged = true;
    let enforced = policy(
        "gate",
        Some(1.0),
        vec![from(&["198.51.100.11/32"], Action::Deny)],
    );
    let s = scenario(vec![staged_deny, enforced]);
    let allowed_by_staged = reference::evaluate(&s, &tcp("198.51.100.10", 9100));
    assert!(allowed_by_staged.allowed && allowed_by_staged.logs.is_empty());
    let both_deny = reference::evaluate(&s, &tcp("198.51.100.11", 9100));
    assert!(!both_deny.allowed);
    assert_eq!(both_deny.logs, vec!["DPI1|staged:gate", "DPI0|gate"]);
    let staged_only = reference::evaluate(&s, &tcp("203.0.113.10", 9100));
    assert!(staged_only.allowed);
    assert_eq!(staged_only.logs, vec!["DPI1|staged:gate"]);
    assert!(s.policy_yaml().contains("kind: StagedGlobalNetworkPolicy"));
}

/// Tiers run in order, and a `Pass` ends only its own tier: the next tier still decides.
#[test]
fn reference_pass_ends_its_tier_and_the_next_tier_decides() {
    let mut first = policy(
        "security.first",
        Some(1.0),
        vec![from(&["198.51.100.10/32"], Action::Pass)],
    );
    first.tier = "security".into();
    let mut s = scenario(vec![
        first,
        policy(
            "second",
            Some(2.0),
            vec![from(&["198.51.100.0/24"], Action::Deny)],
        ),
    ]);
    s.tiers.push(reference::Tier {
        name: "security".into(),
        order: Some(50.0),
        pass: false,
    });
    s.config.log_actions = vec![Action::Pass, Action::Deny];
    let passed_on = reference::evaluate(&s, &tcp("198.51.100.10", 9100));
    assert!(
        !passed_on.allowed,
        "the default tier denies what security passed"
    );
    assert_eq!(passed_on.logs, vec!["PPI0|security.first", "DPI0|second"]);
    // After the default tier (order 1000000), the same Pass comes too late.
    s.tiers[0].order = Some(2_000_000.0);
    let denied_first = reference::evaluate(&s, &tcp("198.51.100.10", 9100));
    assert_eq!(denied_first.logs, vec!["DPI0|second"]);
}

/// A rule exists only in the families its nets and `ipVersion` allow: a
/// Deny with IPv4 `notNets` does not touch IPv6 packets.
#[test]
fn reference_rules_exist_only_in_their_family() {
    let mut deny = rule(Action::Deny);
    deny.source.not_nets = vec!["198.51.100.0/24".parse().expect("net")];
    let s = scenario(vec![policy("only-v4", Some(1.0), vec![deny])]);
    assert!(!reference::evaluate(&s, &tcp("203.0.113.10", 30008)).allowed);
    assert!(reference::evaluate(&s, &tcp("198.51.100.10", 30008)).allowed);
    assert!(reference::evaluate(&s, &tcp("2001:db8:2::10", 30008)).allowed);
    let mut v6 = rule(Action::Deny);
    v6.ip_version = Some(Family::V6);
    let s = scenario(vec![policy("only-v6", Some(1.0), vec![v6])]);
    assert!(reference::evaluate(&s, &tcp("198.51.100.10", 30008)).allowed);
    assert!(!reference::evaluate(&s, &tcp("2001:db8:1::10", 30008)).allowed);
}

/// Rule selectors stand for network sets' nets and other nodes' host
/// endpoint addresses; a notSelector that selects nothing excludes
/// nothing; ports and ranges match the destination port before DNAT.
#[test]
fn reference_selectors_and_ports() {
    let mut labels = reference::Labels::new();
    labels.insert("role".into(), "office".into());
    let mut allow = rule(Action::Allow);
    allow.source.selector = Some(Selector::Eq("role".into(), "office".into()));
    allow.protocol = Some(reference::ProtoSpec {
        number: 6,
        numeric: false,
    });
    allow.destination.ports = vec![PortSpec::Range(30000, 32767)];
    let mut deny = rule(Action::Deny);
    deny.source.not_selector = Some(Selector::Has("nothing".into()));
    let mut s = scenario(vec![policy("p", None, vec![allow, deny])]);
    s.sets.push(reference::NetworkSet {
        name: "office".into(),
        labels: labels.clone(),
        nets: vec!["198.51.100.12/31".parse().expect("net")],
    });
    s.endpoints.push(reference::RemoteEndpoint {
        name: "n2".into(),
        node: "node2".into(),
        labels,
        expected_ips: vec![ip("203.0.113.10")],
    });
    assert!(reference::evaluate(&s, &tcp("198.51.100.13", 30008)).allowed);
    assert!(reference::evaluate(&s, &tcp("203.0.113.10", 30008)).allowed);
    assert!(!reference::evaluate(&s, &tcp("198.51.100.13", 8080)).allowed);
    assert!(!reference::evaluate(&s, &tcp("198.51.100.10", 30008)).allowed);
}

/// Every generated scenario is valid input: `nodeport-guard validate`
/// accepts the policies and the config of a few hundred of them, so a
/// differential failure is never a generator mistake.
#[test]
fn generated_scenarios_are_valid_input() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).expect("policy directory");
    let config = dir.path().join("config.yaml");
    let seed = run_settings().seed;
    for index in 0..150 {
        let mut rng = Rng::new(generate::case_seed(seed, index));
        let s = generate::scenario(&mut rng, index);
        std::fs::write(&config, format!("nodeName: node1\n{}", s.config.yaml())).expect("config");
        std::fs::write(policies.join("case.yaml"), s.policy_yaml()).expect("policies");
        let out = std::process::Command::new(support::guard::BIN)
            .arg("--config")
            .arg(&config)
            .arg("validate")
            .arg(&policies)
            .output()
            .expect("run nodeport-guard validate");
        assert!(
            out.status.success(),
            "generated case {index} (seed {seed:#x}) is invalid:\n{}\n--- config ---\n{}--- policies ---\n{}",
            String::from_utf8_lossy(&out.stderr),
            s.config.yaml(),
            s.policy_yaml()
        );
    }
}
