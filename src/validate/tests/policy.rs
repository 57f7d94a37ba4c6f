//! The spec of a `GlobalNetworkPolicy`.

use super::*;
use crate::model::PolicyKind;
use crate::spec::Sp;
use crate::validate::checker::locate_in_scalar;

#[test]
fn a_policy_runs_in_a_declared_tier_and_is_named_after_it() {
    expect(&policy("  tier: default\n"), &[]);
    let outcome = expect(
        &policy("  tier: security\n"),
        &[
            "4:9: error: the policy `p` is in tier `security`, so its name must start with `security.`",
            "6:9: error: the policy `p` is in tier `security`, which no `Tier` of the policy files declares",
        ],
    );
    assert_eq!(outcome.help("name must start"), "name it `security.p`");
    assert!(
        outcome
            .help("no `Tier`")
            .contains("add a `kind: Tier` named `security`")
    );
    let tier = "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: security\nspec:\n  order: 100\n---\n";
    let named = |name: &str, tier_line: &str| {
        format!(
            "{tier}apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\nspec:\n{tier_line}  selector: all()\n"
        )
    };
    let outcome = expect(&named("security.p", "  tier: security\n"), &[]);
    assert_eq!(outcome.policy("security.p").tier, "security");
    // In the default tier: no dot, or `default.`.
    expect(&named("default.q", ""), &[]);
    let outcome = expect(
        &named("security.q", ""),
        &[
            "11:9: error: the name `security.q` starts with tier `security`, but the policy is in tier `default`",
        ],
    );
    assert_eq!(
        outcome.help("starts with tier"),
        "name it `q` (or `default.q`); or, if it belongs in tier `security` (declared by a `Tier`), write `tier: security`"
    );
    // With more than one dot, the name offered fits the policy's tier.
    let outcome = expect(
        &named(
            "security.a.b",
            "  tier: security
",
        ),
        &["11:9: error: the name `security.a.b` has more than one `.`"],
    );
    assert_eq!(outcome.help("more than one"), "write `security.a-b`");
    // OpenStack's security groups are named `ossg.<name>` in any tier, as Calico's client
    // has it (`names.policyNameIsFormatted`).
    expect(&named("ossg.web", ""), &[]);
    expect(&named("ossg.web", "  tier: security\n"), &[]);
    // A policy may be in a tier Calico creates in every cluster without declaring it.
    let outcome = expect(
        &policy_named("adminnetworkpolicy.p", "  tier: adminnetworkpolicy\n"),
        &[],
    );
    assert_eq!(
        outcome.policy("adminnetworkpolicy.p").tier,
        "adminnetworkpolicy"
    );
}

/// A policy named `name` whose spec is `spec` (lines) and `selector: all()`.
fn policy_named(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\nspec:\n{spec}  selector: all()\n"
    )
}

#[test]
fn tiers_have_an_order_and_a_default_action() {
    let tier = |name: &str, spec: &str| {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: {name}\nspec:\n{spec}"
        )
    };
    let outcome = expect(&tier("t", "  order: 10\n  defaultAction: Pass\n"), &[]);
    let names: Vec<&str> = outcome
        .model
        .tiers()
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "t",
            "adminnetworkpolicy",
            "default",
            "baselineadminnetworkpolicy"
        ],
        "by order: 10, then Calico's built-in tiers (1000, 1000000, 10000000)"
    );
    assert_eq!(
        outcome.model.tiers()[0].default_action,
        crate::model::TierAction::Pass
    );
    expect(
        &tier("t", "  defaultAction: Allow\n"),
        &["6:18: error: `Allow` is not a tier's default action"],
    );
    // Calico: the default tier's order is fixed, and it denies.
    expect(
        &tier("default", "  order: 10\n"),
        &["6:10: error: the `default` tier's order is 1000000, as in Calico"],
    );
    expect(
        &tier("default", "  defaultAction: Pass\n"),
        &["6:18: error: the `default` tier's `defaultAction` is `Deny`, as in Calico"],
    );
    expect(
        &tier("a.b", "  order: 1\n"),
        &[
            "4:9: error: the tier name `a.b` has a `.`: policies in a tier are named `<tier>.<name>`, so a tier's name is one label",
        ],
    );
    expect(&tier("default", "  order: 1000000\n"), &[]);
    // Calico gives a tier without `order` the default tier's (`DefaultTierFields`): it runs
    // beside `default`, by name.
    let both = format!(
        "{}---\n{}",
        tier("alpha", "  defaultAction: Deny\n"),
        tier("zulu", "  defaultAction: Deny\n")
    );
    let outcome = expect(&both, &[]);
    let names: Vec<&str> = outcome
        .model
        .tiers()
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "adminnetworkpolicy",
            "alpha",
            "default",
            "zulu",
            "baselineadminnetworkpolicy"
        ]
    );
    // The admin network policy tiers keep their orders too, and pass by default.
    expect(
        &tier("adminnetworkpolicy", "  order: 10\n"),
        &["6:10: error: the `adminnetworkpolicy` tier's order is 1000, as in Calico"],
    );
    expect(
        &tier("baselineadminnetworkpolicy", "  order: 10\n"),
        &["6:10: error: the `baselineadminnetworkpolicy` tier's order is 10000000, as in Calico"],
    );
    let outcome = expect(&tier("adminnetworkpolicy", "  order: 1000\n"), &[]);
    assert!(outcome.model.tiers()[0].origin.is_some());
    // A tier's name fits in a label, and the name offered instead is one.
    let outcome = expect(
        &tier(&"x".repeat(64), "  order: 5\n"),
        &["4:9: error: the tier name `xxxx"],
    );
    assert!(outcome.help("tier name").contains("at most 63"));
    let outcome = expect(
        &tier("t~!s.h.i.ng", "  order: 5\n"),
        &["4:9: error: the name `t~!s.h.i.ng` contains"],
    );
    assert_eq!(outcome.help("contains"), "write `t--s-h-i-ng`");
    expect(&tier("t--s-h-i-ng", "  order: 5\n"), &[]);
}

#[test]
fn order_must_be_finite() {
    // YAML's `.inf` and `.nan` are refused by the loader already; a resource built in code
    // shows the check.
    let text = policy("  order: 1\n");
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("p.yaml", text.as_str()));
    let (mut resources, _) = crate::load::parse_file(id, sources.get(id));
    if let Some(Sp {
        value: RawSpec::Policy(spec),
        ..
    }) = resources[0].spec.as_mut()
        && let Some(order) = spec.order.as_mut()
    {
        order.value = f64::NAN;
    }
    let (model, diagnostics) = validate(&sources, &[(id, resources.remove(0))]);
    let headlines: Vec<_> = diagnostics.iter().map(|d| d.headline(&sources)).collect();
    assert_eq!(
        headlines,
        ["p.yaml:6:10: error: `order` must be a finite number"]
    );
    assert_eq!(model.policies()[0].order, None);
}

#[test]
fn policy_selectors_are_limited_and_refuse_global() {
    let outcome = expect(
        &policy("  selector: has(a) && global()\n"),
        &[
            "6:23: error: `global()` can only be used in a namespaceSelector, which does not apply to host endpoints",
        ],
    );
    assert!(outcome.help("global()").starts_with("remove it"));
    // Inside double quotes the column moves by one.
    expect(
        &policy("  selector: \"has(a) && global()\"\n"),
        &["6:24: error: `global()` can only be used"],
    );
    // Calico rejects the substring anywhere, even inside a value.
    expect(
        &policy("  selector: \"a == 'global('\"\n"),
        &["6:20: error: `global()` can only be used"],
    );
    let long = format!(
        "  selector: \"{}\"\n",
        "a == 'b' && ".repeat(90) + "c == 'd'"
    );
    expect(
        &policy(&long),
        &["6:13: error: the selector is 1088 characters long, more than the 1024 allowed"],
    );
    // Exactly at the limit: 84 terms of ten characters joined by `||` (1006), and one of
    // sixteen.
    let terms = vec!["has(abcde)"; 84].join("||") + "||has(abcdefghijk)";
    assert_eq!(terms.chars().count(), MAX_SELECTOR_CHARS);
    let exact = format!("  selector: \"{terms}\"\n");
    expect(&policy(&exact), &[]);
}

#[test]
fn selector_errors_point_into_the_selector() {
    if !real_selector_parser() {
        eprintln!("skipped: the selector module is still the placeholder");
        return;
    }
    // The `=` of `role = 'x'`: plain, double-quoted and single-quoted scalars.
    expect(
        &policy("  selector: role = 'x'\n"),
        &["6:18: error: expected `==` after `role`, found `=`"],
    );
    expect(&policy("  selector: \"role = 'x'\"\n"), &["6:19: error: "]);
    expect(
        &policy("  selector: 'a == \"b\" && role = \"x\"'\n"),
        &["6:31: error: "],
    );
    // The same in a rule's source selector.
    expect(
        &rule("action: Allow\n      source:\n        selector: role = 'x'\n"),
        &["9:24: error: "],
    );
    // A folded selector keeps its final line break: the error points at it, and the
    // help says how to write the selector instead.
    let outcome = expect(
        &policy("  selector: >\n    role == 'x'\n"),
        &["7:16: error: "],
    );
    assert!(outcome.diagnostics[0].help.is_some());
    // Folded over two lines, the value's bytes differ from the source's after the fold: an
    // error past the fold points at the whole value.
    expect(
        &policy("  selector: >-\n    role == 'x' &&\n    a = 'b'\n"),
        &["7:5: error: "],
    );
    // An error before the fold is still exact.
    expect(
        &policy("  selector: >-\n    a = 'b' &&\n    role == 'x'\n"),
        &["7:7: error: "],
    );
}

#[test]
fn selector_positions_are_found_only_where_the_source_spells_the_value() {
    // Plain and quoted scalars without escapes: exact.
    assert_eq!(
        locate_in_scalar("role = 'x'", "role = 'x'", 5, 1),
        Some((5, 1))
    );
    assert_eq!(
        locate_in_scalar("\"role = 'x'\"", "role = 'x'", 5, 1),
        Some((6, 1))
    );
    assert_eq!(
        locate_in_scalar("'a = \"x\"'", "a = \"x\"", 2, 1),
        Some((3, 1))
    );
    // An escape before the error: the source and the value differ, so no position.
    assert_eq!(locate_in_scalar("\"a\\u0020= 'x'\"", "a = 'x'", 2, 1), None);
    assert_eq!(locate_in_scalar("'a == ''x'' &'", "a == 'x' &", 9, 1), None);
    // An escape after the error does not matter.
    assert_eq!(
        locate_in_scalar("\"a = '\\t'\"", "a = '\t'", 2, 1),
        Some((3, 1))
    );
    // Errors at the end of the text, and offsets that are not character boundaries.
    assert_eq!(locate_in_scalar("has(a", "has(a", 5, 1), Some((5, 0)));
    assert_eq!(locate_in_scalar("é", "é", 1, 1), None);
    assert_eq!(locate_in_scalar("a", "a", 7, 1), None);
    assert_eq!(
        locate_in_scalar(">\n  a == 'b'\n", "a == 'b'\n", 2, 1),
        None
    );
}

#[test]
fn types_are_ingress_or_egress_once_each() {
    let outcome = expect(
        &policy("  types: [ingress, Egress, Egress, Both]\n"),
        &[
            "6:11: error: `ingress` is not a policy type",
            "6:28: error: `Egress` is listed twice in `types`",
            "6:36: error: `Both` is not a policy type",
        ],
    );
    assert_eq!(
        outcome.help("`ingress`"),
        "types are case-sensitive: write `Ingress`"
    );
    assert_eq!(outcome.help("`Both`"), "write `Ingress` or `Egress`");
}

#[test]
fn types_default_from_the_rules_as_in_calico() {
    let cases: &[(&str, bool, bool)] = &[
        ("  selector: all()\n", true, false),
        ("  ingress: [{action: Allow}]\n", true, false),
        ("  egress: [{action: Allow}]\n", false, true),
        (
            "  ingress: [{action: Allow}]\n  egress: [{action: Allow}]\n",
            true,
            true,
        ),
        ("  types: []\n  egress: [{action: Allow}]\n", false, true),
        ("  types: [Egress]\n", false, true),
        ("  types: [Ingress, Egress]\n", true, true),
    ];
    for (spec, ingress, egress) in cases {
        let outcome = expect(&policy(spec), &[]);
        let policy = outcome.policy("p");
        assert_eq!(policy.ingress.is_some(), *ingress, "{spec}");
        assert_eq!(policy.egress.is_some(), *egress, "{spec}");
    }
    // No spec at all: Calico's defaults.
    let outcome = expect(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: p\n",
        &[],
    );
    let policy = outcome.policy("p");
    assert!(policy.selector.is_all());
    assert_eq!(policy.ingress.as_ref().map(Vec::len), Some(0));
    assert!(policy.egress.is_none());
    assert_eq!(policy.kind, PolicyKind::Normal);
    let origin = policy.origin;
    let position = outcome
        .sources
        .get(origin.file)
        .line_column(origin.span.start);
    assert_eq!(position.to_string(), "4:9");
}

#[test]
fn rules_of_a_direction_that_types_leaves_out_are_a_warning() {
    let outcome = expect(
        &policy(
            "  types: [Ingress]\n  ingress: [{action: Allow}]\n  egress:\n    - action: Deny\n",
        ),
        &["9:5: warning: egress rules are ignored because `types` does not include `Egress`"],
    );
    assert!(outcome.policy("p").egress.is_none());
    expect(
        &policy("  types: [Egress]\n  ingress:\n    - action: Deny\n"),
        &["8:5: warning: ingress rules are ignored because `types` does not include `Ingress`"],
    );
}

#[test]
fn pre_dnat_and_do_not_track_combinations() {
    // Valid: pre-DNAT ingress with applyOnForward.
    let outcome = expect(
        &policy("  preDNAT: true\n  applyOnForward: true\n  ingress: [{action: Deny}]\n"),
        &[],
    );
    assert_eq!(outcome.policy("p").kind, PolicyKind::PreDnat);
    assert!(outcome.policy("p").apply_on_forward);
    let outcome = expect(
        &policy("  doNotTrack: true\n  applyOnForward: true\n  egress: [{action: Allow}]\n"),
        &[],
    );
    assert_eq!(outcome.policy("p").kind, PolicyKind::Untracked);

    // Without applyOnForward, or with it false.
    let outcome = expect(
        &policy("  preDNAT: true\n"),
        &["6:12: error: a `preDNAT` policy must also apply to forwarded traffic"],
    );
    assert_eq!(outcome.help("forwarded"), "add `applyOnForward: true`");
    let outcome = expect(
        &policy("  preDNAT: true\n  applyOnForward: false\n"),
        &["7:19: error: a `preDNAT` policy must also apply to forwarded traffic"],
    );
    assert_eq!(outcome.help("forwarded"), "write `applyOnForward: true`");
    expect(
        &policy("  doNotTrack: true\n"),
        &["6:15: error: a `doNotTrack` policy must also apply to forwarded traffic"],
    );

    // Both flags.
    expect(
        &policy("  preDNAT: true\n  doNotTrack: true\n  applyOnForward: true\n"),
        &["6:12: error: a policy cannot be both `preDNAT` and `doNotTrack`"],
    );

    // Egress rules and no types: `types` defaults to include Egress, so both errors, as
    // Calico reports them.
    expect(
        &policy(
            "  preDNAT: true\n  applyOnForward: true\n  ingress: [{action: Deny}]\n  egress:\n    - action: Allow\n",
        ),
        &[
            "6:12: error: a `preDNAT` policy cannot have the `Egress` type, which `types` defaults to",
            "10:5: error: a `preDNAT` policy cannot have egress rules",
        ],
    );
    // `Egress` written in types, no egress rules.
    expect(
        &policy("  preDNAT: true\n  applyOnForward: true\n  types: [Ingress, Egress]\n"),
        &["8:20: error: a `preDNAT` policy cannot have the `Egress` type"],
    );
    // Egress rules with `types: [Ingress]`: the rules are the error (and no warning).
    expect(
        &policy(
            "  preDNAT: true\n  applyOnForward: true\n  types: [Ingress]\n  egress:\n    - action: Allow\n",
        ),
        &["10:5: error: a `preDNAT` policy cannot have egress rules"],
    );
    // Everything wrong at once.
    expect(
        &policy("  preDNAT: true\n  doNotTrack: true\n  egress: [{action: Allow}]\n"),
        &[
            "6:12: error: a policy cannot be both",
            "6:12: error: a `preDNAT` policy cannot have the `Egress` type",
            "6:12: error: a `preDNAT` policy must also apply to forwarded traffic",
            "8:11: error: a `preDNAT` policy cannot have egress rules",
        ],
    );
}

#[test]
fn performance_hints_and_workload_fields_of_the_spec() {
    let outcome = expect(
        &policy(
            "  performanceHints: [AssumeNeededOnEveryNode, AssumeNeededOnEveryNode, Fast]\n  namespaceSelector: all()\n  serviceAccountSelector: all()\n",
        ),
        &[
            "6:47: error: `AssumeNeededOnEveryNode` is listed twice",
            "6:72: error: `Fast` is not a performance hint",
            "7:22: error: `namespaceSelector` selects workloads by namespace, which does not apply to host endpoints",
            "8:27: error: `serviceAccountSelector` selects workloads by service account",
        ],
    );
    assert_eq!(
        outcome.help("`Fast`"),
        "the only hint is `AssumeNeededOnEveryNode`"
    );
}

#[test]
fn policy_names_follow_calicos_rule() {
    // Calico: "disallow name with dot" (more than one), "disallow k8s policy name"; one dot
    // (a tier prefix) is allowed.
    let named = |name: &str| {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\nspec:\n  selector: all()\n"
        )
    };
    expect(&named("default.thing"), &[]);
    expect(&named("thing"), &[]);
    let outcome = expect(
        &named("t.h.i.ng"),
        &[
            "4:9: error: the name `t.h.i.ng` has more than one `.`: a GlobalNetworkPolicy name is one label, or a tier and a label (`<tier>.<name>`)",
        ],
    );
    assert_eq!(outcome.help("more than one"), "write `t-h-i-ng`");
    let outcome = expect(
        &named("knp.default.thing"),
        &[
            "4:9: error: the name `knp.default.thing` is reserved: `knp.default.` names Kubernetes network policies",
        ],
    );
    assert_eq!(outcome.help("reserved"), "write `thing`");
    // A network set may still have dots in its name.
    expect(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: a.b.c\n",
        &[],
    );
}

/// Every name a help offers in place of an invalid policy or tier name is valid where it is
/// offered (the policy's tier, or a tier), as Calico checks it.
#[test]
fn names_offered_in_place_of_invalid_ones_are_valid() {
    let security = "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: security\nspec:\n  order: 100\n---\n";
    let offered = |text: &str| -> Option<String> {
        let outcome = run_one(text);
        let help = outcome.diagnostics.iter().find_map(|d| d.help.clone())?;
        let rest = help.strip_prefix("write `")?;
        Some(rest[..rest.find('`')?].to_owned())
    };
    let bad = [
        "t~!s.h.i.ng",
        "T.H.I.NG",
        "Foo_Bar",
        "knp.default.x.y",
        "knp.default.thing",
        "security.a.b",
        "a.b.c",
        "-x.y.z-",
    ];
    for tier_line in ["", "  tier: security\n"] {
        for name in bad {
            let text = format!(
                "{security}apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: \"{name}\"\nspec:\n{tier_line}  selector: all()\n"
            );
            let better = offered(&text)
                .unwrap_or_else(|| panic!("no name offered for {name:?} ({tier_line:?})"));
            let fixed = text.replace(&format!("\"{name}\""), &format!("\"{better}\""));
            let outcome = run_one(&fixed);
            assert!(
                outcome.headlines().is_empty(),
                "{name:?} in {tier_line:?}: the offered {better:?} is refused: {:?}",
                outcome.headlines()
            );
        }
    }
    for name in ["t~!s.h.i.ng", "Fo.O", "a_b", "x.y"] {
        let text = format!(
            "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: \"{name}\"\nspec:\n  order: 5\n"
        );
        let better = offered(&text).unwrap_or_else(|| panic!("no tier name offered for {name:?}"));
        let outcome = run_one(&text.replace(name, &better));
        assert!(
            outcome.headlines().is_empty(),
            "tier {name:?}: the offered {better:?} is refused: {:?}",
            outcome.headlines()
        );
    }
}

/// `foo` and `default.foo` are one policy to Calico (it stores the first as the second), so
/// the second is a duplicate, and the message says why.
#[test]
fn a_default_tier_policy_and_its_prefixed_name_are_one_policy() {
    let text = format!(
        "{}---\n{}",
        policy_named("foo", ""),
        policy_named("default.foo", "")
    );
    let outcome = expect(
        &text,
        &[
            "11:9: error: another `GlobalNetworkPolicy` is already named `foo`, which is the same policy: Calico stores a policy of the default tier as `default.foo`",
        ],
    );
    assert_eq!(
        outcome.help("already named"),
        "`foo` is also defined at p.yaml:4:9"
    );
    // In another tier the prefix is the tier's, and the names differ.
    expect(&policy_named("default-foo", ""), &[]);
}
