//! Writes the benchmarks' generated policy set to stdout: `gen_policies POLICIES CIDRS`.

#![allow(missing_docs)]

#[path = "../benches/common/mod.rs"]
mod common;

fn main() {
    let mut args = std::env::args().skip(1);
    let policies: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let cidrs: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(policies * 10);
    print!("{}", common::policy_set(policies, cidrs));
}
