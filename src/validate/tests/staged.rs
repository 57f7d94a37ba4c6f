//! `StagedGlobalNetworkPolicy`: the enforced kind's spec plus `stagedAction`, checked as
//! Calico's `validateStagedGlobalNetworkPolicy` (libcalico-go/lib/validator/v3/validator.go)
//! does: `Set` validates the spec like a GlobalNetworkPolicy's (`validateGlobalNetworkPolicySpec`
//! on the converted policy), `Delete` needs every spec field but `tier` at its zero value
//! ("Spec fields, except Tier, should all be zero-value if stagedAction is Delete").

use super::*;

/// A staged policy named `p` with `spec` (indented by two spaces) starting on line 6.
fn staged(spec: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata:\n  name: p\nspec:\n{spec}"
    )
}

#[test]
fn a_staged_policy_is_checked_and_kept_apart_from_enforced_ones() {
    // Calico's clientv3 "StagedGlobalNetworkPolicy tests" stage specs like this one with
    // `stagedAction: Set`; left out, it defaults to `Set` (upstream
    // `TestCRDDefaults_StagedGlobalNetworkPolicy`).
    for action in ["  stagedAction: Set\n", ""] {
        let outcome = expect(
            &staged(&format!(
                "{action}  selector: all()\n  ingress:\n  - action: Deny\n    protocol: TCP\n    destination:\n      ports: [8080]\n"
            )),
            &[],
        );
        assert!(outcome.model.policies().is_empty());
        let staged = outcome.model.staged_policies();
        assert_eq!(staged.len(), 1);
        assert_eq!(staged[0].name, "p");
        assert_eq!(staged[0].ingress.as_ref().map(Vec::len), Some(1));
        assert!(outcome.model.staged_deletions().is_empty());
        assert!(!outcome.model.is_empty());
    }
}

#[test]
fn a_staged_spec_is_validated_as_strictly_as_an_enforced_one() {
    // The rule checks are the enforced kind's: ports need a protocol that has ports.
    let outcome = expect(
        &staged("  ingress:\n  - action: Deny\n    destination:\n      ports: [80]\n"),
        &["9:14: error: "],
    );
    assert!(
        outcome.headlines()[0].contains("protocol"),
        "{:?}",
        outcome.headlines()
    );
    // So are the policy-level ones: preDNAT needs applyOnForward.
    expect(
        &staged("  preDNAT: true\n  ingress:\n  - action: Deny\n"),
        &["6:12: error: a `preDNAT` policy must also apply to forwarded traffic"],
    );
    // And the name rules ("disallow name with dot" in Calico's tests), and the tier prefix.
    let text = "apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata:\n  name: a.b.c\nspec:\n  selector: all()\n";
    expect(
        text,
        &["4:9: error: the name `a.b.c` has more than one `.`"],
    );
    expect(
        &staged("  tier: security\n"),
        &[
            "4:9: error: the policy `p` is in tier `security`, so its name must start with `security.`",
            "6:9: error: the policy `p` is in tier `security`, which no `Tier` of the policy files declares",
        ],
    );
}

#[test]
fn staged_action_is_set_or_delete() {
    let outcome = expect(
        &staged("  stagedAction: set\n"),
        &["6:17: error: `set` is not a staged action"],
    );
    assert_eq!(
        outcome.help("not a staged action"),
        "staged actions are case-sensitive: write `Set`"
    );
    let outcome = expect(
        &staged("  stagedAction: Learn\n"),
        &["6:17: error: `Learn` is not a staged action"],
    );
    assert!(
        outcome
            .help("not a staged action")
            .contains("Calico Enterprise")
    );
    // Only the staged kind has the field.
    let outcome = expect(
        &policy("  stagedAction: Set\n"),
        &["6:17: error: `stagedAction` belongs to a `StagedGlobalNetworkPolicy`"],
    );
    assert!(
        outcome
            .help("belongs to")
            .contains("kind: StagedGlobalNetworkPolicy")
    );
}

#[test]
fn a_staged_deletion_has_nothing_but_its_tier() {
    // Calico's "Staged policy deletes" fixtures (`tier1.gnp`: `StagedAction: Delete` and
    // `Tier` only) are valid.
    let tier = "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: tier1\nspec:\n  order: 10\n---\n";
    let text = format!(
        "{tier}apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata:\n  name: tier1.gnp\nspec:\n  stagedAction: Delete\n  tier: tier1\n"
    );
    let outcome = expect(&text, &[]);
    let deletions = outcome.model.staged_deletions();
    assert_eq!(deletions.len(), 1);
    assert_eq!(
        (deletions[0].name.as_str(), deletions[0].tier.as_str()),
        ("tier1.gnp", "tier1")
    );
    assert!(outcome.model.staged_policies().is_empty());
    // Zero values are what Calico compares with: an empty selector and `false` are fine.
    expect(
        &staged("  stagedAction: Delete\n  selector: ''\n  preDNAT: false\n"),
        &[],
    );
    // Anything else is an error at the field.
    let outcome = expect(
        &staged(
            "  stagedAction: Delete\n  order: 10\n  selector: all()\n  ingress:\n  - action: Deny\n  doNotTrack: true\n",
        ),
        &[
            "7:10: error: a staged policy with `stagedAction: Delete` has nothing to evaluate, so it cannot have `order`",
            "8:13: error: a staged policy with `stagedAction: Delete` has nothing to evaluate, so it cannot have `selector`",
            "10:5: error: a staged policy with `stagedAction: Delete` has nothing to evaluate, so it cannot have `ingress`",
            "11:15: error: a staged policy with `stagedAction: Delete` has nothing to evaluate, so it cannot have `doNotTrack`",
        ],
    );
    assert!(
        outcome
            .help("cannot have `order`")
            .contains("stagedAction: Set")
    );
    // A deletion's name follows the policy name rules too.
    let text = "apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata:\n  name: knp.default.x\nspec:\n  stagedAction: Delete\n";
    expect(text, &["4:9: error: the name `knp.default.x` is reserved"]);
}

#[test]
fn staged_names_are_unique_among_staged_policies_only() {
    let enforced = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: p\nspec:\n  selector: all()\n---\n";
    // Staging a change to an existing policy: the same name as the enforced one.
    let outcome = expect(&format!("{enforced}{}", staged("  selector: all()\n")), &[]);
    assert_eq!(outcome.model.policies().len(), 1);
    assert_eq!(outcome.model.staged_policies().len(), 1);
    // Two staged policies of one name are an error, as for every kind.
    let twice = format!("{}---\n{}", staged("  order: 1\n"), staged("  order: 2\n"));
    let outcome = expect(
        &twice,
        &["11:9: error: another `StagedGlobalNetworkPolicy` is already named `p`"],
    );
    assert_eq!(outcome.model.staged_policies().len(), 1);
}

#[test]
fn staged_policies_come_in_lists_and_in_evaluation_order() {
    let text = "apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicyList\nitems:\n- metadata: {name: late}\n  spec: {order: 20}\n- metadata: {name: early}\n  spec: {order: 10}\n---\napiVersion: projectcalico.org/v3\nkind: List\nitems:\n- apiVersion: projectcalico.org/v3\n  kind: StagedGlobalNetworkPolicy\n  metadata: {name: gone}\n  spec: {stagedAction: Delete}\n";
    let outcome = expect(text, &[]);
    let names: Vec<&str> = outcome
        .model
        .staged_policies()
        .iter()
        .map(|policy| policy.name.as_str())
        .collect();
    assert_eq!(names, ["early", "late"]);
    assert_eq!(outcome.model.staged_deletions()[0].name, "gone");
}

#[test]
fn unknown_fields_of_a_staged_spec_are_errors_with_their_position() {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new(
        "p.yaml",
        staged("  selector: all()\n  stagedActon: Set\n"),
    ));
    let (_, problems) = crate::load::parse_file(id, sources.get(id));
    let headlines: Vec<String> = problems.iter().map(|d| d.headline(&sources)).collect();
    assert_eq!(headlines.len(), 1, "{headlines:?}");
    assert!(
        headlines[0].starts_with("p.yaml:7:3: error: unknown field `stagedActon`"),
        "{headlines:?}"
    );
}
