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
//! * `flood`: TCP SYNs from spoofed sources to the guarded NodePort absorbed per second, with
//!   the early drop on and off, versus one bare drop rule in raw `PREROUTING` (the floor) and
//!   in mangle `PREROUTING`; `--flood-script FILE` adds a setup of one's own (the scripts in
//!   `benches/kernel/flood-parts/` weigh the parts of the early drop's rule on iptables-nft).
//! * `idle`: the daemon at rest with 1,000 policies: resident memory and CPU.
//!
//! Needs root (network namespaces); without it every scenario is skipped with a message and
//! the bench exits 0. It only runs under `cargo bench` (cargo passes `--bench`): `cargo test
//! --all-targets` runs bench binaries too, and this one must not touch the kernel there. The
//! binary measured is the release build cargo makes for benchmarks
//! (`target/release/nodeport-guard`). Nothing outside the `npgt-` namespaces it creates is
//! touched; they are removed when a scenario ends, on a panic, and on Ctrl-C / SIGTERM.
//!
//! Layout: `dataplane` (plan, apply, loop, incremental), `daemon` (reload, idle), `packet`
//! and `flood` hold the scenarios; `opts`, `report`, `run`, `site`, `policies` and `signals` what they
//! share.

#![allow(missing_docs)]

#[path = "../common/mod.rs"]
mod common;
#[path = "../../tests/support/mod.rs"]
mod support;

mod daemon;
mod dataplane;
mod flood;
mod opts;
mod packet;
mod policies;
mod report;
mod run;
mod signals;
mod site;

use std::process::Command;
use std::time::Instant;

use daemon::{idle_scenario, reload_scenario};
use dataplane::{apply_scenario, incremental_scenario, loop_scenario, plan_scenario};
use flood::flood_scenario;
use opts::parse_opts;
use packet::packet_scenario;
use report::Report;
use signals::handle_signals;

/// The release binary cargo built for this benchmark.
pub(crate) const BUILT: &str = env!("CARGO_BIN_EXE_nodeport-guard");

/// The binary measured: the one cargo built, or `NPG_BIN` (to measure another build, e.g. the
/// one before a change, against the same baselines).
pub(crate) fn bin() -> String {
    std::env::var("NPG_BIN").unwrap_or_else(|_| BUILT.to_owned())
}

/// The NodePort the per-packet and reload scenarios guard (DNAT to the node's server).
pub(crate) const NODEPORT: u16 = 30008;
/// The node-local server behind it.
pub(crate) const TARGET_PORT: u16 = 8080;

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
            "flood" => flood_scenario(&opts, &mut report),
            "idle" => idle_scenario(&opts, &mut report),
            _ => {}
        }
        println!("({scenario} took {:.0?})\n", started.elapsed());
    }
    println!("\nmachine at the end: {}", machine());
    report.print();
}
