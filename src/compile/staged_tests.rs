//! Unit tests of the staged section and staged policy chains, from YAML through validation,
//! with golden-style assertions on the rendered iptables rules.

use super::*;
use crate::dataplane::iptables::render::compiled_rules;
use crate::model::Action as PolicyAction;
use crate::ruleset::Action;
use crate::source::{SourceFile, Sources};

const WHITELIST: &str = "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: whitelist
spec:
  selector: all()
  ingress:
  - action: Allow
    protocol: TCP
    source:
      nets: [192.0.2.0/24]
    destination:
      ports: [8080]
  - action: Deny
    protocol: TCP
    destination:
      ports: [8080]
";

const STAGED: &str = "apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata:
  name: office-only
spec:
  selector: all()
  ingress:
  - action: Allow
    protocol: TCP
    source:
      nets: [198.51.100.0/24, 203.0.113.0/24]
  - action: Pass
    source:
      nets: [192.0.2.7/32]
  - action: Log
  - action: Deny
";

fn compile_yaml(text: &str, config: &Config) -> Compiled {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("p.yaml", text));
    let (parsed, problems) = crate::load::parse_file(id, sources.get(id));
    assert!(problems.is_empty(), "{problems:?}");
    let resources: Vec<_> = parsed.into_iter().map(|r| (id, r)).collect();
    let (model, diagnostics) = crate::validate::validate(&sources, &resources);
    assert!(
        diagnostics
            .iter()
            .all(|d| d.severity != crate::diagnostic::Severity::Error),
        "{diagnostics:?}"
    );
    compile(&model, config, &HostFacts::minimal("node-1"))
}

/// The rules of a chain without their hash comments, matches in the compiler's order.
fn text(compiled: &Compiled, family: IpFamily, table: Table, chain: &str) -> Vec<String> {
    let chain = compiled
        .ruleset
        .family(family)
        .and_then(|f| f.table(table))
        .and_then(|t| t.chain(chain))
        .unwrap_or_else(|| panic!("no chain {chain}"));
    compiled_rules(chain)
}

const ENDPOINT: &str = "npg-fh-all-interfaces.any";

#[test]
fn the_staged_section_runs_after_the_failsafes_and_clears_its_marks() {
    let compiled = compile_yaml(&format!("{WHITELIST}---\n{STAGED}"), &Config::default());
    let rules = text(&compiled, IpFamily::V4, Table::Filter, ENDPOINT);
    let c = |words: &str| format!("-A {ENDPOINT} -m comment --comment \"{words}\"");
    let expected = vec![
        format!(
            "{} -m conntrack --ctstate INVALID -j DROP",
            c("drop packets conntrack finds invalid")
        ),
        format!("{} -j npg-failsafe-in", c("failsafe ports")),
        format!(
            "{} -m mark --mark 0x10000/0x10000 -j RETURN",
            c("allowed as a failsafe port")
        ),
        format!(
            "{} -j MARK --set-xmark 0x0/0x70000",
            c("Start of staged policies: they log, never drop")
        ),
        format!(
            "{} -j MARK --set-xmark 0x0/0x20000",
            c("Start of staged tier default")
        ),
        format!("-A {ENDPOINT} -m mark --mark 0x0/0x70000 -j npg-spi-office-only"),
        format!(
            "{} -m mark --mark 0x0/0x70000 -j NFLOG --nflog-prefix \"DPI|staged:default\" --nflog-group 1 --nflog-size 80 --nflog-threshold 1",
            c("End of staged tier default: would drop, logged")
        ),
        format!(
            "{} -m mark --mark 0x0/0x70000 -j MARK --set-xmark 0x40000/0x40000",
            c("End of staged tier default: staged evaluation ends")
        ),
        format!(
            "{} -j MARK --set-xmark 0x0/0x1f0000",
            c("End of staged policies: clear their marks")
        ),
        format!("-A {ENDPOINT} -j MARK --set-xmark 0x0/0x30000"),
        format!(
            "{} -j MARK --set-xmark 0x0/0x20000",
            c("Start of tier default")
        ),
        format!("-A {ENDPOINT} -m mark --mark 0x0/0x20000 -j npg-pi-whitelist"),
    ];
    assert_eq!(rules[..expected.len()], expected[..], "{rules:#?}");
}

#[test]
fn a_staged_policy_chain_logs_with_the_staged_prefix_and_never_drops() {
    let compiled = compile_yaml(STAGED, &Config::default());
    let chain = names::staged_policy_chain("office-only", Direction::Ingress);
    assert_eq!(chain, "npg-spi-office-only");
    let rules = text(&compiled, IpFamily::V4, Table::Filter, &chain);
    let c = |index: usize| {
        format!(
            "-A {chain} -m comment --comment \"staged policy office-only ingress rule {index}\""
        )
    };
    let nflog = |prefix: &str| {
        format!(
            "-j NFLOG --nflog-prefix \"{prefix}\" --nflog-group 1 --nflog-size 80 --nflog-threshold 1"
        )
    };
    let expected = vec![
        format!("{} -j MARK --set-xmark 0x0/0x180000", c(0)),
        format!(
            "{} -s 198.51.100.0/24 -j MARK --set-xmark 0x80000/0x80000",
            c(0)
        ),
        format!(
            "{} -s 203.0.113.0/24 -j MARK --set-xmark 0x80000/0x80000",
            c(0)
        ),
        format!(
            "{} -p tcp -m mark --mark 0x80000/0x80000 -j MARK --set-xmark 0x10000/0x10000",
            c(0)
        ),
        format!("{} -m mark --mark 0x10000/0x10000 -j RETURN", c(0)),
        format!(
            "{} -s 192.0.2.7/32 -j MARK --set-xmark 0x20000/0x20000",
            c(1)
        ),
        format!("{} -m mark --mark 0x20000/0x20000 -j RETURN", c(1)),
        format!("{} {}", c(2), nflog("LPI2|staged:office-only")),
        format!("{} -j MARK --set-xmark 0x40000/0x40000", c(3)),
        format!(
            "{} -m mark --mark 0x40000/0x40000 {}",
            c(3),
            nflog("DPI3|staged:office-only")
        ),
    ];
    assert_eq!(rules, expected, "{rules:#?}");
}

#[test]
fn staged_allow_and_pass_log_as_log_actions_say() {
    let config = Config {
        log_actions: [PolicyAction::Allow, PolicyAction::Pass].into(),
        ..Config::default()
    };
    let compiled = compile_yaml(STAGED, &config);
    let rules = text(
        &compiled,
        IpFamily::V4,
        Table::Filter,
        "npg-spi-office-only",
    );
    let joined = rules.join("\n");
    assert!(
        joined.contains("--nflog-prefix \"API0|staged:office-only\""),
        "{joined}"
    );
    assert!(
        joined.contains("--nflog-prefix \"PPI1|staged:office-only\""),
        "{joined}"
    );
    // A staged Deny logs even when denials do not.
    assert!(
        joined.contains("--nflog-prefix \"DPI3|staged:office-only\""),
        "{joined}"
    );
    let endpoint = text(&compiled, IpFamily::V4, Table::Filter, ENDPOINT).join("\n");
    assert!(endpoint.contains("\"DPI|staged:default\""), "{endpoint}");
}

#[test]
fn staged_rules_never_drop_accept_or_skip_conntrack() {
    let untracked = "---\napiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata:\n  name: raw-deny\nspec:\n  doNotTrack: true\n  applyOnForward: true\n  ingress:\n  - action: Allow\n    protocol: UDP\n  - action: Deny\n";
    let compiled = compile_yaml(&format!("{STAGED}{untracked}"), &Config::default());
    let mut staged_rules = 0;
    for (_, _, chain) in compiled.ruleset.chains() {
        if !chain.name.starts_with("npg-sp") {
            continue;
        }
        for rule in chain.rules.iter() {
            staged_rules += 1;
            assert!(
                !matches!(rule.action, Action::Drop | Action::NoTrack),
                "{}: {rule:?}",
                chain.name
            );
            if let Some(origin) = &rule.origin {
                assert!(origin.staged, "{origin:?}");
            }
        }
    }
    assert!(staged_rules > 0);
    // With no enforced policy nothing is dropped at all, not even what conntrack finds
    // invalid, and no table returns early for an accept bit a staged pass set and cleared.
    for (_, _, chain) in compiled.ruleset.chains() {
        for rule in chain.rules.iter() {
            assert_ne!(rule.action, Action::Drop, "{}: {rule:?}", chain.name);
            assert_ne!(
                rule.comment.as_deref(),
                Some("accepted by an earlier table"),
                "{}",
                chain.name
            );
        }
    }
    // A staged untracked policy lives in raw, with no end-of-tier log.
    let raw = text(&compiled, IpFamily::V4, Table::Raw, ENDPOINT).join("\n");
    assert!(raw.contains("-j npg-spi-raw-deny"), "{raw}");
    assert!(!raw.contains("staged:default"), "{raw}");
}

#[test]
fn staging_leaves_the_enforced_chains_as_they_were() {
    let alone = compile_yaml(WHITELIST, &Config::default());
    let both = compile_yaml(&format!("{WHITELIST}---\n{STAGED}"), &Config::default());
    for (family, table, chain) in alone.ruleset.chains() {
        let other = both
            .ruleset
            .family(family)
            .and_then(|f| f.table(table))
            .and_then(|t| t.chain(&chain.name))
            .unwrap_or_else(|| panic!("{} is gone", chain.name));
        if chain.name == ENDPOINT {
            // The endpoint chain only gains the staged section.
            let kept: Vec<_> = other
                .rules
                .iter()
                .filter(|rule| {
                    !rule.comment.as_deref().is_some_and(|c| c.contains("staged"))
                        && !matches!(&rule.action, Action::Jump(target) if target.starts_with("npg-sp"))
                })
                .collect();
            assert_eq!(kept, chain.rules.iter().collect::<Vec<_>>());
        } else {
            assert_eq!(other, chain, "{}", chain.name);
        }
    }
}

#[test]
fn a_staged_policy_of_an_enforced_name_has_its_own_chain() {
    let staged_whitelist = WHITELIST
        .replace(
            "kind: GlobalNetworkPolicy",
            "kind: StagedGlobalNetworkPolicy",
        )
        .replace("ports: [8080]", "ports: [9090]");
    let compiled = compile_yaml(
        &format!("{WHITELIST}---\n{staged_whitelist}"),
        &Config::default(),
    );
    let enforced = text(&compiled, IpFamily::V4, Table::Filter, "npg-pi-whitelist").join("\n");
    let staged = text(&compiled, IpFamily::V4, Table::Filter, "npg-spi-whitelist").join("\n");
    assert!(enforced.contains("--dports 8080") && !enforced.contains("9090"));
    assert!(staged.contains("--dports 9090") && staged.contains("DPI1|staged:whitelist"));
    assert_eq!(
        compiled.names.enforced.iter().collect::<Vec<_>>(),
        ["whitelist"]
    );
    assert_eq!(
        compiled.names.staged.iter().collect::<Vec<_>>(),
        ["whitelist"]
    );
}

#[test]
fn a_staged_deletion_compiles_to_nothing_and_says_so() {
    let deletion = "---\napiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata:\n  name: whitelist\nspec:\n  stagedAction: Delete\n";
    let alone = compile_yaml(WHITELIST, &Config::default());
    let compiled = compile_yaml(&format!("{WHITELIST}{deletion}"), &Config::default());
    assert_eq!(compiled.ruleset, alone.ruleset);
    assert!(
        compiled.warnings.iter().any(|w| w
            .message
            .starts_with("staged: would delete policy `whitelist`")),
        "{:?}",
        compiled.warnings
    );
}

#[test]
fn long_staged_prefixes_are_shortened_like_the_others() {
    let long = "a-staged-policy-name-long-enough-to-overflow-the-kernels-nflog-prefix";
    let compiled = compile_yaml(&STAGED.replace("office-only", long), &Config::default());
    let chain = names::staged_policy_chain(long, Direction::Ingress);
    assert!(
        chain.len() <= crate::ruleset::MAX_CHAIN_NAME && chain.starts_with("npg-spi-a-staged-_")
    );
    let rules = compiled
        .ruleset
        .family(IpFamily::V4)
        .and_then(|f| f.table(Table::Filter))
        .and_then(|t| t.chain(&chain))
        .expect("chain");
    let prefixes: Vec<&str> = rules
        .rules
        .iter()
        .filter_map(|rule| match &rule.action {
            Action::Nflog { prefix, .. } => Some(prefix.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(prefixes.len(), 2);
    for prefix in prefixes {
        assert!(prefix.len() <= rules::MAX_NFLOG_PREFIX, "{prefix}");
        assert!(
            prefix.starts_with("LPI2|stage") || prefix.starts_with("DPI3|stage"),
            "{prefix}"
        );
    }
}

#[test]
fn staged_egress_logs_on_the_egress_group_with_e() {
    let egress = "apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata:
  name: no-smtp
spec:
  selector: all()
  egress:
  - action: Deny
    protocol: TCP
    destination:
      ports: [25]
";
    let compiled = compile_yaml(egress, &Config::default());
    let chain = names::staged_policy_chain("no-smtp", Direction::Egress);
    assert_eq!(chain, "npg-spo-no-smtp");
    let rules = text(&compiled, IpFamily::V4, Table::Filter, &chain).join("\n");
    assert!(
        rules.contains("--nflog-prefix \"DPE0|staged:no-smtp\" --nflog-group 2"),
        "{rules}"
    );
    assert!(!rules.contains("-j DROP"), "{rules}");
    let endpoint = text(
        &compiled,
        IpFamily::V4,
        Table::Filter,
        "npg-th-all-interfaces.any",
    );
    let endpoint = endpoint.join("\n");
    assert!(endpoint.contains("-j npg-spo-no-smtp"), "{endpoint}");
    assert!(
        endpoint.contains("--nflog-prefix \"DPE|staged:default\" --nflog-group 2"),
        "{endpoint}"
    );
    // Only a staged policy selects the host: its own traffic is not default-deny.
    assert!(
        !compiled
            .warnings
            .iter()
            .any(|w| w.message.contains("default-deny")),
        "{:?}",
        compiled.warnings
    );
}

#[test]
fn many_staged_policies_are_batched_and_stay_gated() {
    let mut text = String::new();
    for index in 0..(POLICIES_PER_CHAIN + 5) {
        text.push_str(&format!(
            "---\napiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata:\n  name: s{index:03}\nspec:\n  order: {index}\n  selector: all()\n  ingress:\n  - action: Deny\n"
        ));
    }
    let compiled = compile_yaml(&text, &Config::default());
    let filter = compiled
        .ruleset
        .family(IpFamily::V4)
        .and_then(|f| f.table(Table::Filter))
        .expect("filter");
    let batches: Vec<_> = filter
        .chains
        .iter()
        .filter(|chain| chain.name.starts_with("npg-pb-"))
        .collect();
    assert_eq!(batches.len(), 2);
    assert_eq!(
        batches.iter().map(|b| b.rules.len()).sum::<usize>(),
        POLICIES_PER_CHAIN + 5
    );
    for rule in batches.iter().flat_map(|b| b.rules.iter()) {
        assert!(matches!(&rule.action, Action::Jump(t) if t.starts_with("npg-spi-")));
        assert_eq!(rule.matches.len(), 1, "gated: {rule:?}");
    }
}
