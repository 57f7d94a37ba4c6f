use std::path::PathBuf;

use super::*;
use crate::counters::PolicyFile;
use crate::policy_set::{self, PolicySet};

fn at(text: &str) -> Timestamp {
    text.parse().expect("a time")
}

fn read(text: &str, now: &str) -> PolicySet {
    policy_set::from_files(
        &[PolicyFile {
            path: PathBuf::from("policies/grant.yaml"),
            text: text.to_owned(),
        }],
        at(now),
    )
}

fn headlines(set: &PolicySet) -> Vec<String> {
    set.diagnostics
        .iter()
        .map(|d| {
            let help = d.help.clone().unwrap_or_default();
            format!("{} | {help}", d.headline(&set.sources))
        })
        .collect()
}

const WHITELIST: &str = "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: whitelist
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  ingress:
    - action: Deny
      protocol: TCP
      destination:
        ports: [30008]
";

fn grant() -> Grant {
    Grant {
        name: "vendor".to_owned(),
        sources: vec!["198.51.100.7/32".parse().expect("net")],
        ports: vec![30008, 30009],
        protocol: GrantProtocol::Tcp,
        expires: at("2026-12-05T18:00:00Z"),
        granted_by: "alice".to_owned(),
        reason: Some("backup upload: \"nightly\"".to_owned()),
        order: 9.0,
    }
}

fn with_grant(now: &str) -> PolicySet {
    read(&format!("{WHITELIST}---\n{}", grant().render()), now)
}

#[test]
fn a_grant_file_is_valid_and_counts_until_its_instant() {
    let set = with_grant("2026-12-05T17:59:59Z");
    assert!(set.is_valid(), "{:?}", headlines(&set));
    assert!(headlines(&set).is_empty(), "{:?}", headlines(&set));
    let names: Vec<_> = set.model.policies().iter().map(|p| &p.name).collect();
    assert_eq!(names, ["grant-vendor", "whitelist"], "the grant runs first");
    let policy = &set.model.policies()[0];
    let expiry = policy.expires.as_ref().expect("an expiry");
    assert_eq!(expiry.at, at("2026-12-05T18:00:00Z"));
    assert_eq!(expiry.granted_by.as_deref(), Some("alice"));
    assert_eq!(expiry.reason.as_deref(), Some("backup upload: \"nightly\""));
    assert_eq!(set.next_expiry(), Some(at("2026-12-05T18:00:00Z")));
}

#[test]
fn at_its_instant_a_grant_is_left_out_with_a_warning_never_an_error() {
    let before = with_grant("2026-12-05T17:59:59Z");
    let set = with_grant("2026-12-05T18:00:00Z");
    assert!(set.is_valid());
    let names: Vec<_> = set.model.policies().iter().map(|p| &p.name).collect();
    assert_eq!(names, ["whitelist"]);
    assert_eq!(
        headlines(&set),
        [
            "policies/grant.yaml:22:32: warning: the GlobalNetworkPolicy `grant-vendor` expired at 2026-12-05T18:00:00Z (0s ago): it is left out, as if no file held it | delete its file (`nodeport-guard grants --prune` deletes the files that hold only expired resources), or move the expiry forward"
        ]
    );
    assert_ne!(
        before.fingerprint, set.fingerprint,
        "the same files mean other rules once a resource expired"
    );
    assert_eq!(set.next_expiry(), None);
    assert!(!set.holds_no_policy());
}

#[test]
fn an_expiry_never_counts_as_the_directory_emptying() {
    let set = read(&grant().render(), "2027-01-01T00:00:00Z");
    assert!(set.model.is_empty());
    assert!(!set.holds_no_policy());
}

#[test]
fn network_sets_and_staged_policies_expire_too() {
    let text = "apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata:
  name: partner
  annotations:
    nodeport-guard.io/expires: 2026-12-01T00:00:00+01:00
  labels: {role: partner}
spec:
  nets: [203.0.113.0/28]
---
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata:
  name: trial
  annotations:
    nodeport-guard.io/expires: 2026-12-02T00:00:00Z
spec:
  ingress: [{action: Deny}]
";
    let set = read(text, "2026-11-30T23:30:00Z");
    assert_eq!(set.model.network_sets().len(), 0, "+01:00 is 23:00 UTC");
    assert_eq!(set.model.staged_policies().len(), 1);
    let items = expiring(&set);
    let shown: Vec<_> = items
        .iter()
        .map(|item| {
            format!(
                "{} {} {} {:?} {}",
                item.kind,
                item.name,
                item.status(),
                item.sources,
                item.relative(set.now)
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            "GlobalNetworkSet partner expired [\"203.0.113.0/28\"] expired 30m ago",
            "StagedGlobalNetworkPolicy trial active [] expires in 1d",
        ]
    );
}

#[test]
fn an_expiry_that_is_not_a_time_with_an_offset_is_an_error_that_shows_one() {
    let check = |value: &str| {
        let text = format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: p\n  annotations:\n    nodeport-guard.io/expires: \"{value}\"\n"
        );
        headlines(&read(&text, "2026-01-01T00:00:00Z"))
    };
    assert_eq!(
        check("2026-12-05T18:00:00"),
        [
            "policies/grant.yaml:6:32: error: `2026-12-05T18:00:00` is not an RFC 3339 time with an offset | add the offset: `2026-12-05T18:00:00Z` for UTC, or for example `2026-12-05T18:00:00+02:00`"
        ]
    );
    assert_eq!(
        check("tomorrow"),
        [
            "policies/grant.yaml:6:32: error: `tomorrow` is not an RFC 3339 time with an offset | write a time with its offset, for example `2026-12-05T18:00:00Z`"
        ]
    );
    assert_eq!(check("2026-12-05T18:00:00Z[Europe/Paris]").len(), 1);
    assert!(check("2026-12-05T18:00:00.5-05:00").is_empty());
}

#[test]
fn only_policies_staged_policies_and_network_sets_expire() {
    let text = "apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: eth0
  annotations:
    nodeport-guard.io/expires: 2026-12-05T18:00:00Z
spec:
  node: node-1
  interfaceName: eth0
";
    let shown = headlines(&read(text, "2026-01-01T00:00:00Z"));
    assert_eq!(shown.len(), 1);
    assert!(
        shown[0].contains("error: a `HostEndpoint` cannot expire"),
        "{shown:?}"
    );
}

#[test]
fn grant_names_and_orders() {
    assert_eq!(
        default_name(&"198.51.100.7/32".parse().expect("net"), 30008),
        "198-51-100-7-30008"
    );
    assert_eq!(
        default_name(&"203.0.113.0/28".parse().expect("net"), 22),
        "203-0-113-0-28-22"
    );
    assert_eq!(
        default_name(&"2001:db8::7/128".parse().expect("net"), 443),
        "2001-db8--7-443"
    );
    let set = with_grant("2026-01-01T00:00:00Z");
    assert_eq!(first_order(&set.validated, "grant-new"), Ok(8.0));
    assert_eq!(first_order(&set.validated, "grant-vendor"), Ok(9.0));
    let unordered = read(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: p\n",
        "2026-01-01T00:00:00Z",
    );
    assert_eq!(first_order(&unordered.validated, "grant-new"), Ok(0.0));
    assert_eq!(
        default_name(&"::/0".parse().expect("net"), 30008),
        "0-0-30008",
        "a name that `grant` accepts"
    );
    // One less than 1e20 is 1e20 again: the next float below it still runs first.
    let huge = read(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: p\nspec:\n  order: 1e20\n",
        "2026-01-01T00:00:00Z",
    );
    let order = first_order(&huge.validated, "grant-new").expect("an order");
    assert!(order < 1e20, "{order}");
    assert_eq!(
        order.to_string().parse::<f64>().ok(),
        Some(order),
        "written as it is"
    );
    // Nothing comes before the lowest float: said, never written as `-inf`.
    let lowest = read(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: p\nspec:\n  order: -1.7976931348623157e308\n",
        "2026-01-01T00:00:00Z",
    );
    let refused = first_order(&lowest.validated, "grant-new").expect_err("no order before it");
    assert!(refused.contains("policy `p`"), "{refused}");
}

#[test]
fn a_grant_of_both_families_is_one_rule_per_family() {
    let mut grant = grant();
    grant.sources = ["198.51.100.7/32", "2001:db8::7/128", "203.0.113.0/28"]
        .iter()
        .map(|net| net.parse().expect("net"))
        .collect();
    let set = read(&grant.render(), "2026-12-05T17:00:00Z");
    assert!(set.is_valid(), "{:?}", headlines(&set));
    let policy = &set.model.policies()[0];
    let rules = policy.ingress.as_ref().expect("ingress rules");
    let nets: Vec<Vec<String>> = rules
        .iter()
        .map(|rule| rule.source.nets.iter().map(ToString::to_string).collect())
        .collect();
    assert_eq!(
        nets,
        [
            vec!["198.51.100.7/32", "203.0.113.0/28"],
            vec!["2001:db8::7/128"]
        ]
    );
    assert!(rules.iter().all(|rule| rule.destination.ports.len() == 2));
}

#[test]
fn only_a_set_of_time_boxed_resources_may_empty_without_allow_empty() {
    let grants_only = read(&grant().render(), "2026-12-05T17:00:00Z");
    assert!(only_time_boxed(&grants_only.model));
    assert!(!only_time_boxed(&with_grant("2026-12-05T17:00:00Z").model));
    assert!(!only_time_boxed(&read("", "2026-12-05T17:00:00Z").model));
}

#[test]
fn durations_in_words() {
    let words = |seconds: i64| human_duration(jiff::SignedDuration::from_secs(seconds));
    assert_eq!(words(0), "0s");
    assert_eq!(words(59), "59s");
    assert_eq!(words(3_600 + 120 + 5), "1h 2m");
    assert_eq!(words(2 * 86_400 + 5), "2d");
    assert_eq!(words(-90), "1m 30s");
}

/// A policy named `name` in `tier`, expiring at `expires` when given, allowing `port`.
fn policy(name: &str, tier: Option<&str>, expires: Option<&str>, port: u16) -> String {
    let annotations = expires.map_or_else(String::new, |at| {
        format!("  annotations:\n    nodeport-guard.io/expires: \"{at}\"\n")
    });
    let tier = tier.map_or_else(String::new, |tier| format!("  tier: {tier}\n"));
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\n{annotations}spec:\n{tier}  preDNAT: true\n  applyOnForward: true\n  ingress:\n    - action: Allow\n      protocol: TCP\n      destination:\n        ports: [{port}]\n"
    )
}

#[test]
fn an_expired_resource_takes_no_part_in_the_checks_across_resources() {
    // The same name twice, the first expiring: an error until then, then the second alone.
    let text = format!(
        "{}---\n{}",
        policy("dup", None, Some("2026-12-05T18:00:00Z"), 80),
        policy("dup", None, None, 443)
    );
    let before = read(&text, "2026-12-05T17:00:00Z");
    assert!(!before.is_valid(), "both count until the expiry");
    assert!(
        headlines(&before)
            .iter()
            .any(|h| h.contains("error: another `GlobalNetworkPolicy` is already named `dup`")),
        "{:?}",
        headlines(&before)
    );
    let after = read(&text, "2026-12-05T18:00:00Z");
    assert!(after.is_valid(), "{:?}", headlines(&after));
    let ports: Vec<String> = after
        .model
        .policies()
        .iter()
        .flat_map(|p| p.ingress.iter().flatten())
        .flat_map(|rule| rule.destination.ports.iter().map(ToString::to_string))
        .collect();
    assert_eq!(ports, ["443"], "the one still in force");
    // The second expiring instead: the first stays.
    let text = format!(
        "{}---\n{}",
        policy("dup", None, None, 80),
        policy("dup", None, Some("2026-12-05T18:00:00Z"), 443)
    );
    let after = read(&text, "2026-12-05T18:00:01Z");
    assert!(after.is_valid(), "{:?}", headlines(&after));
    assert_eq!(after.model.policies().len(), 1);

    // An expired policy in a tier no file declares: a warning, no error.
    let text = policy("gone.old", Some("gone"), Some("2026-12-01T00:00:00Z"), 80);
    let set = read(&text, "2026-12-05T18:00:00Z");
    assert!(set.is_valid(), "{:?}", headlines(&set));
    assert!(!read(&text, "2026-11-30T00:00:00Z").is_valid());
}

#[test]
fn what_is_wrong_with_a_resource_stops_mattering_when_it_expires() {
    // An invalid port in a grant that expires at 18:00, beside a valid policy.
    let broken = policy("stale", None, Some("2026-12-05T18:00:00Z"), 80)
        .replace("ports: [80]", "ports: [99999]");
    let text = format!("{broken}---\n{}", policy("web", None, None, 443));
    let before = read(&text, "2026-12-05T17:00:00Z");
    assert!(!before.is_valid(), "an error until the expiry");
    assert!(
        headlines(&before)
            .iter()
            .any(|h| h.starts_with("policies/grant.yaml:") && h.contains("99999")),
        "{:?}",
        headlines(&before)
    );
    let after = read(&text, "2026-12-05T18:00:00Z");
    assert!(after.is_valid(), "{:?}", headlines(&after));
    assert_eq!(after.model.policies().len(), 1);
    // Without an expiry it is an error whatever the time.
    let text = broken.replace(
        "  annotations:\n    nodeport-guard.io/expires: \"2026-12-05T18:00:00Z\"\n",
        "",
    );
    assert!(!read(&text, "2027-01-01T00:00:00Z").is_valid());
}
