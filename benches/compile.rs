//! Compile + render time at 10 … 10,000 policies and up to 100,000 CIDRs, and how it grows.
//!
//! `cargo bench --bench compile` runs criterion's measurements and then prints, for each size,
//! the median time, the time per policy, and the growth factor against the size ten times
//! smaller measured in the same run (near 10× means linear). It also prints the longest chain,
//! which must stay at a few hundred rules however many policies there are.

#![allow(missing_docs)]

mod common;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use nodeport_guard::compile::compile;
use nodeport_guard::config::Config;
use nodeport_guard::facts::HostFacts;
use nodeport_guard::load::parse_file;
use nodeport_guard::model::Model;
use nodeport_guard::render::render_iptables;
use nodeport_guard::source::{SourceFile, Sources};
use nodeport_guard::validate::validate;

const SIZES: [(usize, usize); 4] = [(10, 100), (100, 1_000), (1_000, 10_000), (10_000, 100_000)];

fn model(policies: usize, cidrs: usize) -> Model {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new(
        "generated.yaml",
        common::policy_set(policies, cidrs),
    ));
    let (resources, diagnostics) = parse_file(id, sources.get(id));
    assert!(diagnostics.is_empty(), "generated input must parse");
    let resources: Vec<_> = resources.into_iter().map(|r| (id, r)).collect();
    let (model, diagnostics) = validate(&sources, &resources);
    assert!(
        !diagnostics.iter().any(|d| d.is_error()),
        "generated input must validate"
    );
    model
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

fn median(model: &Model, runs: usize) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(compile_and_render(model));
            started.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Prints the growth table: medians measured side by side in this run.
fn growth() {
    println!("\ncompile + render, medians of this run:");
    println!(
        "{:>9} {:>9} {:>12} {:>14} {:>10} {:>14}",
        "policies", "CIDRs", "median", "per policy", "growth", "longest chain"
    );
    let mut previous: Option<Duration> = None;
    for (policies, cidrs) in SIZES {
        let model = model(policies, cidrs);
        let runs = if policies >= 10_000 { 5 } else { 11 };
        let time = median(&model, runs);
        let compiled = compile(&model, &Config::default(), &HostFacts::minimal("node1"));
        let longest = compiled
            .ruleset
            .chains()
            .map(|(_, _, c)| c.rules.len())
            .max()
            .unwrap_or(0);
        let growth = previous.map_or("-".to_owned(), |p| {
            format!("{:.1}x", time.as_secs_f64() / p.as_secs_f64())
        });
        println!(
            "{policies:>9} {cidrs:>9} {:>10.2}ms {:>12.1}µs {growth:>10} {longest:>14}",
            time.as_secs_f64() * 1e3,
            time.as_secs_f64() * 1e6 / policies as f64
        );
        previous = Some(time);
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    growth();
}
