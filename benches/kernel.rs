//! Kernel benchmarks: nodeport-guard against the real kernel in throwaway network namespaces,
//! each figure measured side by side with its baseline in the same run.
//!
//! ```text
//! sudo cargo bench --bench kernel                      # every scenario, every backend
//! sudo cargo bench --bench kernel -- apply --quick     # one scenario, fewer runs
//! sudo cargo bench --bench kernel -- plan reload --backend iptables-nft --runs 21
//! ```
//!
//! Scenarios (see `docs/performance.md` for what each one means and what limits it):
//!
//! * `plan`: `nodeport-guard plan` against a kernel holding the rules of 1,000 policies, versus
//!   a bare `iptables-save` + `ip6tables-save` + `ipset save` (`nft list ruleset`) of it.
//! * `apply`: `nodeport-guard apply` into an empty namespace, versus a bare `ipset restore` +
//!   `iptables-restore` + `ip6tables-restore` (`nft -f`) of the text `nodeport-guard render`
//!   prints.
//! * `loop`: the rules of about 1,000 kernel rules written by a loop calling `iptables -A` /
//!   `ipset add` once per rule, versus `nodeport-guard apply`.
//! * `incremental`: `apply` after one policy among 1,000 changed, versus the full apply.
//! * `reload`: the daemon at 1,000 policies with `debounce: 100ms`: from the rename of a policy
//!   file to the first connection the new rule lets through, p50 and p99.
//! * `packet`: new TCP connections per second through a guarded NodePort (DNAT), whitelists of
//!   10, 1,000 and 100,000 CIDRs, versus no firewall and versus one rule per CIDR.
//! * `idle`: the daemon at rest with 1,000 policies: resident memory and CPU.
//!
//! Needs root (network namespaces); without it every scenario is skipped with a message and
//! the bench exits 0. It only runs under `cargo bench` (cargo passes `--bench`): `cargo test
//! --all-targets` runs bench binaries too, and this one must not touch the kernel there. The
//! binary measured is the release build cargo makes for benchmarks
//! (`target/release/nodeport-guard`). Nothing outside the `npgt-` namespaces it creates is
//! touched; they are removed when a scenario ends, on a panic, and on Ctrl-C / SIGTERM.

#![allow(missing_docs)]

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::{Backend as LabBackend, Connect, Lab, Netns, Proto, Role, addr};

/// The release binary cargo built for this benchmark.
const BUILT: &str = env!("CARGO_BIN_EXE_nodeport-guard");

/// The binary measured: the one cargo built, or `NPG_BIN` (to measure another build, e.g. the
/// one before a change, against the same baselines).
fn bin() -> String {
    std::env::var("NPG_BIN").unwrap_or_else(|_| BUILT.to_owned())
}

/// The NodePort the per-packet and reload scenarios guard (DNAT to the node's server).
const NODEPORT: u16 = 30008;
/// The node-local server behind it.
const TARGET_PORT: u16 = 8080;

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bk {
    Legacy,
    Nft,
    Nftables,
}

impl Bk {
    const ALL: [Bk; 3] = [Bk::Legacy, Bk::Nft, Bk::Nftables];

    fn arg(self) -> &'static str {
        match self {
            Bk::Legacy => "iptables-legacy",
            Bk::Nft => "iptables-nft",
            Bk::Nftables => "nftables",
        }
    }

    fn lab(self) -> LabBackend {
        match self {
            Bk::Legacy => LabBackend::Legacy,
            Bk::Nft | Bk::Nftables => LabBackend::Nft,
        }
    }

    fn iptables(self) -> bool {
        self != Bk::Nftables
    }

    /// `iptables`, `ip6tables` of this flavour, plus the suffix of save/restore.
    fn tool(self, v6: bool, what: &str) -> String {
        let flavour = if self == Bk::Legacy { "legacy" } else { "nft" };
        let base = if v6 { "ip6tables" } else { "iptables" };
        if what.is_empty() {
            format!("{base}-{flavour}")
        } else {
            format!("{base}-{flavour}-{what}")
        }
    }
}

#[derive(Debug)]
struct Opts {
    scenarios: Vec<String>,
    quick: bool,
    backends: Vec<Bk>,
    policies: usize,
    runs: Option<usize>,
}

const SCENARIOS: [&str; 7] = [
    "plan",
    "apply",
    "loop",
    "incremental",
    "reload",
    "packet",
    "idle",
];

const USAGE: &str = "usage: cargo bench --bench kernel -- [SCENARIO…] [--quick] [--runs N] \
[--policies N] [--backend iptables-legacy,iptables-nft,nftables]
scenarios: plan apply loop incremental reload packet idle (default: all)";

fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let mut opts = Opts {
        scenarios: Vec::new(),
        quick: false,
        backends: Bk::ALL.to_vec(),
        policies: 1_000,
        runs: None,
    };
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--bench" => {}
            "--quick" => opts.quick = true,
            "--runs" => {
                opts.runs = Some(
                    iter.next()
                        .and_then(|v| v.parse().ok())
                        .ok_or("--runs needs a number")?,
                );
            }
            "--policies" => {
                opts.policies = iter
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--policies needs a number")?;
            }
            "--backend" => {
                let list = iter.next().ok_or("--backend needs a value")?;
                opts.backends = list
                    .split(',')
                    .map(|name| {
                        Bk::ALL
                            .into_iter()
                            .find(|bk| bk.arg() == name || bk.arg().ends_with(name))
                            .ok_or(format!("unknown backend `{name}`"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            "all" => opts
                .scenarios
                .extend(SCENARIOS.iter().map(|s| (*s).to_owned())),
            name if SCENARIOS.contains(&name) => opts.scenarios.push(name.to_owned()),
            // Filters cargo or criterion may pass along.
            other if other.starts_with('-') => {}
            other => return Err(format!("unknown scenario `{other}`\n{USAGE}")),
        }
    }
    if opts.scenarios.is_empty() {
        opts.scenarios = SCENARIOS.iter().map(|s| (*s).to_owned()).collect();
    }
    Ok(opts)
}

impl Opts {
    fn runs(&self, normal: usize, quick: usize) -> usize {
        self.runs.unwrap_or(if self.quick { quick } else { normal })
    }
}

// ---------------------------------------------------------------------------------------------
// Results

#[derive(Clone, Copy, Debug)]
enum Target {
    AtMost(f64),
    AtLeast(f64),
    None,
}

#[derive(Debug)]
struct Row {
    scenario: String,
    backend: String,
    figure: String,
    candidate: String,
    baseline: String,
    ratio: Option<f64>,
    target: Target,
}

impl Row {
    fn verdict(&self) -> &'static str {
        match (self.target, self.ratio) {
            (Target::AtMost(limit), Some(ratio)) if ratio <= limit => "met",
            (Target::AtLeast(limit), Some(ratio)) if ratio >= limit => "met",
            (Target::None, _) => "-",
            _ => "MISSED",
        }
    }

    fn target_text(&self) -> String {
        match self.target {
            Target::AtMost(limit) => format!("≤ {limit}"),
            Target::AtLeast(limit) => format!("≥ {limit}"),
            Target::None => "-".to_owned(),
        }
    }
}

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        scenario: &str,
        backend: &str,
        figure: &str,
        candidate: String,
        baseline: String,
        ratio: Option<f64>,
        target: Target,
    ) {
        let row = Row {
            scenario: scenario.to_owned(),
            backend: backend.to_owned(),
            figure: figure.to_owned(),
            candidate,
            baseline,
            ratio,
            target,
        };
        println!(
            "  => {} {} {}: {} vs {} ratio {} target {} {}",
            row.scenario,
            row.backend,
            row.figure,
            row.candidate,
            row.baseline,
            row.ratio.map_or("-".to_owned(), |r| format!("{r:.3}")),
            row.target_text(),
            row.verdict()
        );
        self.rows.push(row);
    }

    fn print(&self) {
        println!(
            "\n| scenario | backend | figure | nodeport-guard | baseline | ratio | target | met |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for row in &self.rows {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                row.scenario,
                row.backend,
                row.figure,
                row.candidate,
                row.baseline,
                row.ratio.map_or("-".to_owned(), |r| format!("{r:.2}")),
                row.target_text(),
                row.verdict()
            );
        }
    }
}

fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

fn median_f(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

/// The value below which `p` of the values lie (nearest rank).
fn percentile(values: &[Duration], p: f64) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Median of the per-pair ratios candidate/baseline: each pair ran back to back, so the ratio
/// cancels most of the drift other load on the machine causes.
fn pair_ratio(candidate: &[Duration], baseline: &[Duration]) -> f64 {
    let ratios: Vec<f64> = candidate
        .iter()
        .zip(baseline)
        .map(|(c, b)| c.as_secs_f64() / b.as_secs_f64().max(1e-9))
        .collect();
    median_f(&ratios)
}

/// Wall-clock times of repeated runs, and the CPU time their processes used.
#[derive(Default)]
struct Series {
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
}

impl Series {
    fn push(&mut self, wall: Duration) {
        self.wall.push(wall);
        self.cpu.push(last_cpu());
    }

    /// "median wall (CPU median cpu)".
    fn text(&self) -> String {
        format!("{} (CPU {})", ms(median(&self.wall)), ms(median(&self.cpu)))
    }
}

/// Runs `a` and `b` `runs` times each, interleaved (A B B A A B …), and returns their times.
fn interleave(
    runs: usize,
    mut a: impl FnMut() -> Duration,
    mut b: impl FnMut() -> Duration,
) -> (Series, Series) {
    let (mut ta, mut tb) = (Series::default(), Series::default());
    for run in 0..runs {
        if run % 2 == 0 {
            ta.push(a());
            tb.push(b());
        } else {
            tb.push(b());
            ta.push(a());
        }
        print!(".");
        let _ = std::io::stdout().flush();
    }
    println!();
    (ta, tb)
}

// ---------------------------------------------------------------------------------------------
// Running programs inside a namespace

/// What a program did.
struct Ran {
    elapsed: Duration,
    success: bool,
    stdout: String,
    stderr: String,
}

/// One program run: program, arguments, stdin.
type Step = (String, Vec<String>, Option<Vec<u8>>);

fn step(program: &str, args: &[&str], stdin: Option<&str>) -> Step {
    (
        program.to_owned(),
        args.iter().map(|a| (*a).to_owned()).collect(),
        stdin.map(|s| s.as_bytes().to_vec()),
    )
}

/// Runs a program on the calling thread (already in the right namespace) and times it from
/// spawn to exit, its output read through pipes as nodeport-guard reads its children's.
fn run_here(program: &str, args: &[String], stdin: Option<&[u8]>) -> Ran {
    let path = support::cmd::program_path(program);
    let started = Instant::now();
    let mut child = Command::new(&path)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", path.display()));
    let writer = match (stdin, child.stdin.take()) {
        (Some(data), Some(mut pipe)) => {
            let data = data.to_vec();
            Some(std::thread::spawn(move || {
                let _ = pipe.write_all(&data);
            }))
        }
        _ => None,
    };
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot wait for {}: {e}", path.display()));
    let elapsed = started.elapsed();
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    Ran {
        elapsed,
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// User + system CPU time of this process's finished children (and theirs) so far.
fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(Duration::ZERO, |usage| {
        let micros = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(t.tv_sec().max(0) as u64)
                + Duration::from_micros(t.tv_usec().max(0) as u64)
        };
        micros(usage.user_time()) + micros(usage.system_time())
    })
}

thread_local! {
    /// CPU time of the last [`run_steps`] (all processes it started).
    static LAST_CPU: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// CPU time the processes of the last [`run_steps`] on this thread used.
fn last_cpu() -> Duration {
    LAST_CPU.with(std::cell::Cell::get)
}

/// Runs the steps one after the other inside `ns` (children inherit the namespace of the
/// thread that starts them; no `ip netns exec` in the measured path) and returns the total
/// time; panics with the output of a step that fails. [`last_cpu`] then tells the CPU time
/// they used.
fn run_steps(ns: &Netns, steps: &[Step]) -> Duration {
    let cpu_before = children_cpu();
    let elapsed = run_steps_inner(ns, steps);
    LAST_CPU.with(|cell| cell.set(children_cpu().saturating_sub(cpu_before)));
    elapsed
}

fn run_steps_inner(ns: &Netns, steps: &[Step]) -> Duration {
    ns.run(|| {
        let started = Instant::now();
        for (program, args, stdin) in steps {
            let ran = run_here(program, args, stdin.as_deref());
            if !ran.success {
                panic!(
                    "`{program} {}` failed in {}: {}{}",
                    args.join(" "),
                    ns.name(),
                    ran.stdout,
                    ran.stderr
                );
            }
        }
        started.elapsed()
    })
}

fn run_one(ns: &Netns, program: &str, args: &[String], stdin: Option<&[u8]>) -> Ran {
    let cpu_before = children_cpu();
    let ran = ns.run(|| run_here(program, args, stdin));
    LAST_CPU.with(|cell| cell.set(children_cpu().saturating_sub(cpu_before)));
    ran
}

// ---------------------------------------------------------------------------------------------
// A nodeport-guard installation: config, policy directory and state directory

struct Site {
    dir: tempfile::TempDir,
    backend: Bk,
}

impl Site {
    fn new(backend: Bk, config_extra: &str) -> Site {
        let dir = tempfile::Builder::new()
            .prefix("npg-kernel-bench-")
            .tempdir()
            .expect("temporary directory");
        let site = Site { dir, backend };
        std::fs::create_dir(site.policies()).expect("policy directory");
        std::fs::write(
            site.path("config.yaml"),
            format!("nodeName: node1\n{config_extra}"),
        )
        .expect("config");
        site
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn policies(&self) -> PathBuf {
        self.path("policies")
    }

    fn write_policy(&self, file: &str, text: &str) {
        std::fs::write(self.policies().join(file), text).expect("policy file");
    }

    fn args(&self, command: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--config".into(),
            self.path("config.yaml").display().to_string(),
            "--policies".into(),
            self.policies().display().to_string(),
            "--state-dir".into(),
            self.path("state").display().to_string(),
            "--backend".into(),
            self.backend.arg().into(),
        ];
        args.extend(command.iter().map(|c| (*c).to_owned()));
        args
    }

    /// Runs nodeport-guard with `command` in `ns`; panics unless it exits 0.
    fn run(&self, ns: &Netns, command: &[&str]) -> Ran {
        let ran = run_one(ns, &bin(), &self.args(command), None);
        if !ran.success {
            panic!(
                "nodeport-guard {} failed in {}:\n{}{}",
                command.join(" "),
                ns.name(),
                ran.stdout,
                ran.stderr
            );
        }
        ran
    }

    /// `render` output for the host `ns` stands for (its addresses are part of the rules).
    fn render(&self, ns: &Netns) -> String {
        self.run(ns, &["render"]).stdout
    }
}

/// The `ipset restore` / `iptables-restore` / `ip6tables-restore` (or `nft -f`) steps that load
/// `render` output as it is: the floor of an apply.
fn restore_steps(backend: Bk, rendered: &str) -> Vec<Step> {
    if !backend.iptables() {
        return vec![step("nft", &["-f", "-"], Some(rendered))];
    }
    let mut steps = Vec::new();
    for section in sections(rendered) {
        let (program, args): (String, Vec<&str>) = match section.0.as_str() {
            "ipset" => ("ipset".into(), vec!["restore"]),
            "v4" => (backend.tool(false, "restore"), vec!["--noflush"]),
            "v6" => (backend.tool(true, "restore"), vec!["--noflush"]),
            _ => continue,
        };
        steps.push(step(&program, &args, Some(&section.1)));
    }
    steps
}

/// `render` output split at its `# …` headers into (ipset | v4 | v6, text).
fn sections(rendered: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in rendered.lines() {
        if let Some(header) = line.strip_prefix("# ") {
            let kind = if header.starts_with("ipset") {
                "ipset"
            } else if header.starts_with("ip6tables") {
                "v6"
            } else if header.starts_with("iptables") {
                "v4"
            } else {
                "other"
            };
            out.push((kind.to_owned(), String::new()));
            continue;
        }
        if let Some((_, text)) = out.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

/// The kernel rules (`-A`/`-I` lines, or nft `add rule` lines) in `render` output.
fn rule_count(rendered: &str) -> usize {
    rendered
        .lines()
        .filter(|l| l.starts_with("-A ") || l.starts_with("-I ") || l.starts_with("add rule "))
        .count()
}

/// Splits a restore line into words; double quotes group (our comments never hold quotes).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            c => {
                current.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(current);
    }
    out
}

/// What a hand-written script does: one `ipset` or `iptables` call per set, member, chain and
/// rule of `render` output.
fn per_rule_steps(backend: Bk, rendered: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    for (kind, text) in sections(rendered) {
        let mut table = String::from("filter");
        for line in text.lines() {
            let mut args: Vec<String> = Vec::new();
            let program = match kind.as_str() {
                "ipset" => {
                    args = words(line);
                    "ipset".to_owned()
                }
                "v4" | "v6" => {
                    let tool = backend.tool(kind == "v6", "");
                    if let Some(name) = line.strip_prefix('*') {
                        name.clone_into(&mut table);
                        continue;
                    }
                    if line == "COMMIT" || line.is_empty() {
                        continue;
                    }
                    args.extend(["-w".to_owned(), "-t".to_owned(), table.clone()]);
                    if let Some(declaration) = line.strip_prefix(':') {
                        let chain = declaration.split_whitespace().next().unwrap_or_default();
                        args.extend(["-N".to_owned(), chain.to_owned()]);
                    } else {
                        args.extend(words(line));
                    }
                    tool
                }
                _ => continue,
            };
            if !args.is_empty() {
                steps.push((program, args, None));
            }
        }
    }
    steps
}

// ---------------------------------------------------------------------------------------------
// Policies

/// The generated policy set of the compile benchmark: `policies` policies, 10 CIDRs each on
/// average, a tenth of them large (sets), both families.
fn bulk(policies: usize) -> String {
    common::policy_set(policies, policies * 10)
}

/// Policies whose render holds at least `rules` kernel rules.
fn policies_for_rules(rules: usize) -> usize {
    use nodeport_guard::compile::compile;
    use nodeport_guard::config::Config;
    use nodeport_guard::facts::HostFacts;
    use nodeport_guard::load::parse_file;
    use nodeport_guard::source::{SourceFile, Sources};
    let mut policies = 10;
    loop {
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("g.yaml", bulk(policies)));
        let (resources, _) = parse_file(id, sources.get(id));
        let resources: Vec<_> = resources.into_iter().map(|r| (id, r)).collect();
        let (model, _) = nodeport_guard::validate::validate(&sources, &resources);
        let compiled = compile(&model, &Config::default(), &HostFacts::minimal("node1"));
        let count: usize = compiled
            .ruleset
            .chains()
            .map(|(_, _, c)| c.rules.len())
            .sum();
        if count >= rules {
            return policies;
        }
        policies += (policies / 10).max(1);
    }
}

/// Adds `extra` as the first net of the first `nets:` list of policy `name` (or takes it out
/// again).
fn toggle_net(text: &str, name: &str, extra: &str, on: bool) -> String {
    let marker = format!("name: {name}\n");
    let start = text.find(&marker).expect("policy in the generated set");
    let end = text[start..]
        .find("\n---\n")
        .map_or(text.len(), |offset| start + offset);
    let document = &text[start..end];
    let with = format!("nets: [{extra}, ");
    let changed = if on {
        document.replacen("nets: [", &with, 1)
    } else {
        document.replacen(&with, "nets: [", 1)
    };
    format!("{}{changed}{}", &text[..start], &text[end..])
}

/// One policy guarding the NodePort: TCP from the whitelist allowed, everything else to the
/// port denied.
fn guard_policy(nets: &[String]) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: a-guard\nspec:\n  order: 0\n  preDNAT: true\n  applyOnForward: true\n  selector: all()\n  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      nets: [{}]\n    destination:\n      ports: [{NODEPORT}]\n  - action: Deny\n    protocol: TCP\n    destination:\n      ports: [{NODEPORT}]\n",
        nets.join(", ")
    )
}

/// `count` disjoint IPv4 CIDRs with eight prefix lengths (/24 to /32, one per /24 block, so
/// no set merges them), then the client's address, last.
fn whitelist(count: usize, client: Ipv4Addr) -> Vec<String> {
    const LENGTHS: [u32; 8] = [24, 25, 26, 27, 28, 29, 30, 32];
    let mut nets: Vec<String> = (0..count.saturating_sub(1))
        .map(|i| {
            let base = (11u32 << 24) + (i as u32) * 256;
            let length = LENGTHS[i % LENGTHS.len()];
            format!("{}/{length}", Ipv4Addr::from(base))
        })
        .collect();
    nets.push(format!("{client}/32"));
    nets
}

// ---------------------------------------------------------------------------------------------
// Scenarios: plan, apply, loop, incremental

fn namespace_with_rules(site: &Site) -> Netns {
    let ns = Netns::new();
    site.run(&ns, &["apply", "--yes"]);
    ns
}

fn plan_scenario(opts: &Opts, report: &mut Report) {
    let runs = opts.runs(11, 5);
    for &backend in &opts.backends {
        println!(
            "plan, {backend:?}: {} policies, {runs} runs each",
            opts.policies
        );
        let site = Site::new(backend, "");
        site.write_policy("policies.yaml", &bulk(opts.policies));
        let ns = namespace_with_rules(&site);
        let check = site.run(&ns, &["plan"]);
        assert!(
            check.stdout.starts_with("No changes"),
            "the kernel must hold the policies already: {}",
            check.stdout
        );
        let plan_args = site.args(&["plan"]);
        let floor: Vec<Step> = if backend.iptables() {
            vec![
                step(&backend.tool(false, "save"), &[], None),
                step(&backend.tool(true, "save"), &[], None),
                step("ipset", &["save"], None),
            ]
        } else {
            vec![step("nft", &["list", "ruleset"], None)]
        };
        let (ours, bare) = interleave(
            runs,
            || run_steps(&ns, &[(bin(), plan_args.clone(), None)]),
            || run_steps(&ns, &floor),
        );
        report.add(
            "plan",
            backend.arg(),
            &format!("plan, {} policies, nothing to change", opts.policies),
            ours.text(),
            format!(
                "{} ({})",
                bare.text(),
                if backend.iptables() {
                    "iptables-save + ip6tables-save + ipset save"
                } else {
                    "nft list ruleset"
                }
            ),
            Some(pair_ratio(&ours.wall, &bare.wall)),
            Target::AtMost(1.5),
        );
    }
}

/// Times `apply` into a fresh namespace (created and removed outside the measurement).
fn time_full_apply(site: &Site) -> (Duration, Option<Duration>) {
    let ns = Netns::new();
    let ran = site.run(&ns, &["apply", "--yes"]);
    (ran.elapsed, applied_in(&ran.stdout))
}

/// The "Applied in N ms." figure (the dataplane part: plan, write, read back).
fn applied_in(stdout: &str) -> Option<Duration> {
    stdout.lines().find_map(|line| {
        line.strip_prefix("Applied in ")?
            .strip_suffix(" ms.")?
            .parse()
            .ok()
            .map(Duration::from_millis)
    })
}

fn time_restore(steps: &[Step]) -> Duration {
    let ns = Netns::new();
    run_steps(&ns, steps)
}

fn apply_scenario(opts: &Opts, report: &mut Report) {
    let runs = opts.runs(9, 3);
    for &backend in &opts.backends {
        println!(
            "apply, {backend:?}: {} policies into an empty namespace, {runs} runs each",
            opts.policies
        );
        let site = Site::new(backend, "");
        site.write_policy("policies.yaml", &bulk(opts.policies));
        let rendered = site.render(&Netns::new());
        let steps = restore_steps(backend, &rendered);
        // Both load the same thing: after the bare restore, nodeport-guard sees nothing to do.
        {
            let ns = Netns::new();
            run_steps(&ns, &steps);
            let check = site.run(&ns, &["plan"]);
            assert!(
                check.stdout.starts_with("No changes"),
                "the bare restore must load exactly what apply loads: {}",
                check.stdout
            );
        }
        let (ours, bare) = interleave(runs, || time_full_apply(&site).0, || time_restore(&steps));
        report.add(
            "apply",
            backend.arg(),
            &format!(
                "full apply, {} policies ({} rules)",
                opts.policies,
                rule_count(&rendered)
            ),
            ours.text(),
            format!(
                "{} (bare {} of the rendered text)",
                bare.text(),
                if backend.iptables() {
                    "ipset restore + iptables-restore + ip6tables-restore"
                } else {
                    "nft -f"
                }
            ),
            Some(pair_ratio(&ours.wall, &bare.wall)),
            Target::AtMost(1.3),
        );
    }
}

fn loop_scenario(opts: &Opts, report: &mut Report) {
    let runs = opts.runs(3, 1);
    let policies = policies_for_rules(1_000);
    for &backend in opts.backends.iter().filter(|b| b.iptables()) {
        let site = Site::new(backend, "");
        site.write_policy("policies.yaml", &bulk(policies));
        let rendered = site.render(&Netns::new());
        let steps = per_rule_steps(backend, &rendered);
        println!(
            "loop, {backend:?}: {policies} policies = {} rules; {} commands per loop, {runs} runs each",
            rule_count(&rendered),
            steps.len()
        );
        {
            let ns = Netns::new();
            run_steps(&ns, &steps);
            let check = site.run(&ns, &["plan"]);
            assert!(
                check.stdout.starts_with("No changes"),
                "the loop must load exactly what apply loads: {}",
                check.stdout
            );
        }
        let (looped, ours) = interleave(runs, || time_restore(&steps), || time_full_apply(&site).0);
        report.add(
            "loop",
            backend.arg(),
            &format!(
                "per-rule loop ÷ apply, {} rules + {} set members",
                rule_count(&rendered),
                rendered.lines().filter(|l| l.starts_with("add ")).count()
            ),
            ours.text(),
            format!("{} ({} commands)", looped.text(), steps.len()),
            Some(pair_ratio(&looped.wall, &ours.wall)),
            Target::AtLeast(10.0),
        );
    }
}

fn plan_summary(site: &Site, ns: &Netns) -> serde_json::Value {
    let ran = site.run(ns, &["plan", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&ran.stdout).expect("plan --json");
    value["summary"].clone()
}

fn incremental_scenario(opts: &Opts, report: &mut Report) {
    let runs = opts.runs(9, 3);
    // Every tenth policy is a large one (its nets become a set); the others list a few nets
    // inline (rules of their own chain).
    let base = opts.policies / 2 / 10 * 10;
    let changes = [
        ("one CIDR added to an inline whitelist", base + 1),
        ("one CIDR added to a whitelist held in a set", base),
    ];
    for &backend in &opts.backends {
        for (what, index) in changes {
            let policy = format!("policy-{index:05}");
            println!("incremental, {backend:?}: {what} among {}", opts.policies);
            let original = bulk(opts.policies);
            let site = Site::new(backend, "");
            site.write_policy("policies.yaml", &original);
            let ns = namespace_with_rules(&site);
            let mut on = false;
            // What one change writes, from the plan.
            site.write_policy(
                "policies.yaml",
                &toggle_net(&original, &policy, "192.0.2.77/32", true),
            );
            let summary = plan_summary(&site, &ns);
            println!("  one change writes: {summary}");
            site.write_policy("policies.yaml", &original);
            let mut dataplane_incremental = Vec::new();
            let mut dataplane_full = Vec::new();
            let (incremental, full) = interleave(
                runs,
                || {
                    on = !on;
                    site.write_policy(
                        "policies.yaml",
                        &toggle_net(&original, &policy, "192.0.2.77/32", on),
                    );
                    let ran = site.run(&ns, &["apply", "--yes"]);
                    dataplane_incremental.extend(applied_in(&ran.stdout));
                    ran.elapsed
                },
                || {
                    let (elapsed, dataplane) = time_full_apply(&site);
                    dataplane_full.extend(dataplane);
                    elapsed
                },
            );
            report.add(
                "incremental",
                backend.arg(),
                &format!("apply after {what} ÷ full apply"),
                incremental.text(),
                full.text(),
                Some(pair_ratio(&incremental.wall, &full.wall)),
                Target::AtMost(0.1),
            );
            report.add(
                "incremental",
                backend.arg(),
                &format!("dataplane part (\"Applied in\"), {what}"),
                ms(median(&dataplane_incremental)),
                ms(median(&dataplane_full)),
                Some(
                    median(&dataplane_incremental).as_secs_f64()
                        / median(&dataplane_full).as_secs_f64().max(1e-9),
                ),
                Target::None,
            );
            println!("  writes: {summary}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The daemon: reload latency and rest

/// A daemon running in a namespace; stopped (SIGTERM, then SIGKILL) on drop.
struct Daemon {
    child: Child,
}

impl Daemon {
    fn start(site: &Site, ns: &Netns) -> Daemon {
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

    fn pid(&self) -> u32 {
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
fn nodeport_lab(backend: LabBackend) -> Lab {
    let mut lab = Lab::builder(backend).standard_services(false).build();
    let node = SocketAddr::new(addr::NODE_V4.into(), TARGET_PORT);
    lab.serve_tcp(Role::Node, node, "nodeport-target");
    lab.add_dnat(Proto::Tcp, NODEPORT, node);
    lab
}

fn nodeport() -> SocketAddr {
    SocketAddr::new(addr::NODE_V4.into(), NODEPORT)
}

/// Whether a connection from `src` to the NodePort gets through within `timeout` (the
/// handshake completes; the per-packet sink answers nothing).
fn passes(lab: &Lab, src: Ipv4Addr, timeout: Duration) -> bool {
    matches!(
        Connect::to(nodeport())
            .from(IpAddr::V4(src))
            .timeout(timeout)
            .tcp(lab.client()),
        Ok(_) | Err(support::ConnectError::NoReply(_))
    )
}

fn reload_policy(allowed: Ipv4Addr) -> String {
    guard_policy(&[format!("{allowed}/32")])
}

fn wait_for(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the daemon's first apply guards the NodePort: `allowed` gets through, `denied`
/// does not.
fn wait_for_guard(lab: &Lab, allowed: Ipv4Addr, denied: Ipv4Addr) {
    wait_for("the daemon's first apply", Duration::from_secs(120), || {
        !passes(lab, denied, Duration::from_millis(50))
            && passes(lab, allowed, Duration::from_millis(200))
    });
}

fn reload_scenario(opts: &Opts, report: &mut Report) {
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
        println!();
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
            "300 ms".to_owned(),
            Some(percentile(&latencies, 0.99).as_secs_f64() / 0.3),
            Target::AtMost(1.0),
        );
        report.add(
            "reload",
            backend.arg(),
            "daemon resident memory after the reloads",
            format!("{:.1} MiB", rss as f64 / 1024.0),
            "20 MiB".to_owned(),
            Some(rss as f64 / 1024.0 / 20.0),
            Target::AtMost(1.0),
        );
        drop(daemon);
    }
}

/// A `/proc/<pid>/status` figure in KiB (or a count).
fn status_kib(pid: u32, field: &str) -> u64 {
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
fn cpu_time(pid: u32) -> Duration {
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

fn idle_scenario(opts: &Opts, report: &mut Report) {
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
        std::thread::sleep(Duration::from_secs(2));
        let pid = daemon.pid();
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
        report.add(
            "idle",
            backend.arg(),
            &format!("resident memory at rest, {} policies", opts.policies),
            format!(
                "{:.1} MiB (peak {:.1} MiB)",
                rss as f64 / 1024.0,
                hwm as f64 / 1024.0
            ),
            "20 MiB".to_owned(),
            Some(rss as f64 / 1024.0 / 20.0),
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

// ---------------------------------------------------------------------------------------------
// Per-packet cost: new connections per second

/// A server that accepts and forgets, on two threads, in the node namespace.
struct Sink {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    listener: Arc<std::net::TcpListener>,
}

impl Sink {
    fn start(ns: &Netns, bind: SocketAddr) -> Sink {
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
struct PacketSetup {
    name: String,
    backend: String,
    cidrs: usize,
    lab: Lab,
    _site: Option<Site>,
    _sink: Sink,
}

fn packet_lab(backend: LabBackend) -> (Lab, Sink) {
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
fn felix_style(rendered: &str) -> String {
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

fn guard_setup(backend: Bk, cidrs: usize, felix: bool) -> PacketSetup {
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
    assert!(
        passes(&lab, addr::CLIENT_V4[0], Duration::from_secs(2)),
        "the whitelisted client must get through"
    );
    assert!(
        !passes(&lab, addr::CLIENT_V4[3], Duration::from_millis(300)),
        "others must not"
    );
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

/// New connections per second from the client's whitelisted address to the NodePort over
/// `duration`: `threads` clients connecting and resetting (SO_LINGER 0) in a loop.
fn connections_per_second(lab: &Lab, threads: usize, duration: Duration) -> f64 {
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

fn packet_scenario(opts: &Opts, report: &mut Report) {
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
            Target::AtLeast(0.9)
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

// ---------------------------------------------------------------------------------------------
// Cleanup on Ctrl-C / SIGTERM

/// Daemons this process started, so a signal can stop them before the namespaces go.
struct Registry {
    daemons: std::sync::Mutex<Vec<u32>>,
}

static REGISTRY: Registry = Registry {
    daemons: std::sync::Mutex::new(Vec::new()),
};

impl Registry {
    fn daemon(&self, pid: u32) {
        self.daemons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pid);
    }

    fn forget(&self, pid: u32) {
        self.daemons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&p| p != pid);
    }
}

/// Blocks SIGINT and SIGTERM in every thread and handles them on one: stop our daemons, delete
/// our namespaces (`npgt-<pid>-*`), exit 130. Must run before any other thread starts.
fn handle_signals() {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    if pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None).is_err() {
        return;
    }
    std::thread::spawn(move || {
        let Ok(signal) = set.wait() else { return };
        eprintln!("\n{signal}: stopping the daemons and removing the namespaces");
        let daemons = REGISTRY
            .daemons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for pid in daemons {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let prefix = format!("npgt-{}-", std::process::id());
        if let Ok(entries) = std::fs::read_dir("/run/netns") {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with(&prefix) {
                    let _ = Command::new(support::cmd::program_path("ip"))
                        .args(["netns", "del", &name])
                        .status();
                }
            }
        }
        std::process::exit(130);
    });
}

// ---------------------------------------------------------------------------------------------

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name\t: ").map(str::to_owned))
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let version = |program: &str, arg: &str| {
        Command::new(support::cmd::program_path(program))
            .arg(arg)
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned()
            })
            .unwrap_or_default()
    };
    format!(
        "{cpu}, {cores} cores, Linux {}, load average {}; {}; {}; {}",
        kernel.trim(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        version("iptables-legacy", "--version"),
        version("ipset", "--version"),
        version("nft", "--version"),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") && std::env::var_os("NPG_KERNEL_BENCH").is_none() {
        println!(
            "kernel benchmarks: not run outside `cargo bench` (run `cargo bench --bench kernel`)"
        );
        return;
    }
    let opts = match parse_opts(&args) {
        Ok(opts) => opts,
        Err(message) => {
            println!("{message}");
            return;
        }
    };
    if let Some(reason) = support::kernel_unavailable_reason() {
        println!(
            "kernel benchmarks skipped: they need root to create network namespaces ({reason})"
        );
        return;
    }
    handle_signals();
    println!("nodeport-guard kernel benchmarks: {}", bin());
    println!("machine: {}", machine());
    println!("options: {opts:?}\n");
    let mut report = Report::default();
    for scenario in opts.scenarios.clone() {
        let started = Instant::now();
        match scenario.as_str() {
            "plan" => plan_scenario(&opts, &mut report),
            "apply" => apply_scenario(&opts, &mut report),
            "loop" => loop_scenario(&opts, &mut report),
            "incremental" => incremental_scenario(&opts, &mut report),
            "reload" => reload_scenario(&opts, &mut report),
            "packet" => packet_scenario(&opts, &mut report),
            "idle" => idle_scenario(&opts, &mut report),
            _ => {}
        }
        println!("({scenario} took {:.0?})\n", started.elapsed());
    }
    println!("\nmachine at the end: {}", machine());
    report.print();
}
