//! Scenarios `plan`, `apply`, `loop` and `incremental`: one nodeport-guard command at a
//! time against its baseline.

use std::time::Duration;

use crate::bin;
use crate::common::toggle_net;
use crate::opts::Opts;
use crate::policies::{bulk, policies_for_rules};
use crate::report::{Report, Target, interleave, median, ms, pair_ratio};
use crate::run::{Step, run_steps, step};
use crate::site::{Site, per_rule_steps, restore_steps, rule_count};
use crate::support::Netns;

pub(crate) fn namespace_with_rules(site: &Site) -> Netns {
    let ns = Netns::new();
    site.run(&ns, &["apply", "--yes"]);
    ns
}

pub(crate) fn plan_scenario(opts: &Opts, report: &mut Report) {
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
pub(crate) fn time_full_apply(site: &Site) -> (Duration, Option<Duration>) {
    let ns = Netns::new();
    let ran = site.run(&ns, &["apply", "--yes"]);
    (ran.elapsed, applied_in(&ran.stdout))
}

/// The "Applied in N ms." figure (the dataplane part: plan, write, read back).
pub(crate) fn applied_in(stdout: &str) -> Option<Duration> {
    stdout.lines().find_map(|line| {
        line.strip_prefix("Applied in ")?
            .strip_suffix(" ms.")?
            .parse()
            .ok()
            .map(Duration::from_millis)
    })
}

pub(crate) fn time_restore(steps: &[Step]) -> Duration {
    let ns = Netns::new();
    run_steps(&ns, steps)
}

pub(crate) fn apply_scenario(opts: &Opts, report: &mut Report) {
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

pub(crate) fn loop_scenario(opts: &Opts, report: &mut Report) {
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

pub(crate) fn plan_summary(site: &Site, ns: &Netns) -> serde_json::Value {
    let ran = site.run(ns, &["plan", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&ran.stdout).expect("plan --json");
    value["summary"].clone()
}

pub(crate) fn incremental_scenario(opts: &Opts, report: &mut Report) {
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
                // The target for the command line (the dataplane part is far below).
                Target::AtMost(0.3),
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
