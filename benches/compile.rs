//! Compile + render time and peak memory at 10 … 10,000 policies and up to 100,000 CIDRs, and
//! how they grow.
//!
//! `cargo bench --bench compile` runs criterion's measurements of compile + render and then
//! prints, for each size, measured side by side in this run: the median time to load the
//! policy text (YAML parsing and validation) and to compile + render it, the time per policy,
//! the growth factor against the size ten times smaller (near 10× means linear), the time to
//! trace what one added CIDR cuts off (the warning `plan` and `apply` print), the peak heap
//! (counted by this bench's global allocator) of each stage, and the longest chain, which must
//! stay at a few hundred rules however many policies there are.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) only criterion's quick test mode
//! runs.

#![allow(missing_docs)]

mod common;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use nodeport_guard::compile::compile;
use nodeport_guard::config::Config;
use nodeport_guard::dataplane::iptables::render::render_all as render_iptables;
use nodeport_guard::facts::HostFacts;
use nodeport_guard::model::Model;
use nodeport_guard::trace::impact;

const SIZES: [(usize, usize); 4] = [(10, 100), (100, 1_000), (1_000, 10_000), (10_000, 100_000)];

use common::heap::peak_heap;

#[global_allocator]
static ALLOCATOR: common::heap::Counting = common::heap::Counting;

fn model(policies: usize, cidrs: usize) -> Model {
    common::load(&common::policy_set(policies, cidrs))
}

fn compile_and_render(model: &Model) -> usize {
    let compiled = compile(model, &Config::default(), &HostFacts::minimal("node1"));
    render_iptables(&compiled.ruleset).len()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("compile+render");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for (policies, cidrs) in SIZES {
        let model = model(policies, cidrs);
        group.bench_function(format!("{policies} policies, {cidrs} CIDRs"), |b| {
            b.iter(|| compile_and_render(&model));
        });
    }
    group.finish();
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time(runs: usize, mut f: impl FnMut()) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let started = Instant::now();
                f();
                started.elapsed()
            })
            .collect(),
    )
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Prints the growth table: medians and peaks measured side by side in this run.
fn growth() {
    println!("\ncompile + render, medians of this run (load = YAML parsing + validation):");
    println!(
        "{:>8} {:>8} {:>7} {:>10} {:>10} {:>10} {:>7} {:>10} {:>11} {:>11} {:>10} {:>7}",
        "policies",
        "CIDRs",
        "rules",
        "load",
        "compile+r",
        "per policy",
        "growth",
        "impact",
        "heap load",
        "heap comp+r",
        "text",
        "longest"
    );
    let mut previous: Option<Duration> = None;
    for (policies, cidrs) in SIZES {
        let text = common::policy_set(policies, cidrs);
        let runs = if policies >= 10_000 { 5 } else { 11 };
        let load_time = time(runs, || {
            std::hint::black_box(common::load(&text));
        });
        let (model, load_heap) = peak_heap(|| common::load(&text));
        let compile_time = time(runs, || {
            std::hint::black_box(compile_and_render(&model));
        });
        let (_, compile_heap) = peak_heap(|| compile_and_render(&model));
        let changed = common::load(&common::toggle_net(
            &text,
            &common::inline_policy(policies),
            "192.0.2.77/32",
            true,
        ));
        let host = common::host_with_eth0();
        let traced = impact::cuts(&model, &changed, &Config::default(), &host).checked;
        assert!(traced > 0, "the change must be traced through some packets");
        let impact_time = time(runs, || {
            std::hint::black_box(impact::cuts(&model, &changed, &Config::default(), &host));
        });
        let compiled = compile(&model, &Config::default(), &HostFacts::minimal("node1"));
        let rules: usize = compiled
            .ruleset
            .chains()
            .map(|(_, _, c)| c.rules.len())
            .sum();
        let longest = compiled
            .ruleset
            .chains()
            .map(|(_, _, c)| c.rules.len())
            .max()
            .unwrap_or(0);
        let total = load_time + compile_time;
        let growth = previous.map_or("-".to_owned(), |p| {
            format!("{:.1}x", total.as_secs_f64() / p.as_secs_f64())
        });
        println!(
            "{policies:>8} {cidrs:>8} {rules:>7} {:>8.1}ms {:>8.1}ms {:>8.1}µs {growth:>7} {:>8.1}ms {:>11} {:>11} {:>10} {longest:>7}",
            load_time.as_secs_f64() * 1e3,
            compile_time.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e6 / policies as f64,
            impact_time.as_secs_f64() * 1e3,
            mib(load_heap),
            mib(compile_heap),
            mib(text.len()),
        );
        previous = Some(total);
    }
    println!(
        "growth: (load + compile+render) against the size ten times smaller; impact: tracing \
         what one CIDR added to an inline whitelist cuts off; heap: the most heap each stage \
         held at once beyond its input"
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if std::env::args().any(|arg| arg == "--bench") {
        growth();
    }
}
