//! Traces what one policy change cuts off (the warning `plan` and `apply` print) through a
//! large generated policy set, for profilers
//! (`perf record target/release/examples/profile_impact 10000`): a CIDR added to the inline
//! whitelist of the policy in the middle, as the kernel bench's incremental row does.

#![allow(missing_docs)]

#[path = "../benches/common/mod.rs"]
mod common;

use nodeport_guard::config::Config;

fn main() {
    let policies: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let text = common::policy_set(policies, policies * 10);
    let name = common::inline_policy(policies);
    let changed = common::toggle_net(&text, &name, "192.0.2.77/32", true);
    let (before, after) = (common::load(&text), common::load(&changed));
    let host = common::host_with_eth0();
    let started = std::time::Instant::now();
    let impact = nodeport_guard::trace::impact::cuts(&before, &after, &Config::default(), &host);
    eprintln!(
        "impact of a CIDR added to {name}: {:?}, {} packets traced, {} cut",
        started.elapsed(),
        impact.checked,
        impact.cuts.len()
    );
}
