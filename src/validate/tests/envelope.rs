//! `apiVersion`, metadata, names, labels, annotations and duplicates.

use super::*;

#[test]
fn api_version_must_be_projectcalico_v3() {
    let text = "kind: GlobalNetworkSet\nmetadata:\n  name: s\n";
    let outcome = expect(
        text,
        &["1:1: error: the `GlobalNetworkSet` has no `apiVersion`"],
    );
    assert_eq!(
        outcome.help("no `apiVersion`"),
        "add `apiVersion: projectcalico.org/v3`"
    );

    let text = "apiVersion: projectcalico.org/v1\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n";
    let outcome = expect(
        text,
        &["1:13: error: `projectcalico.org/v1` is not a supported apiVersion"],
    );
    assert_eq!(
        outcome.help("apiVersion"),
        "write `apiVersion: projectcalico.org/v3`"
    );

    let text =
        "apiVersion: crd.projectcalico.org/v1\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n";
    let outcome = expect(text, &["1:13: error: `crd.projectcalico.org/v1` is not"]);
    assert!(outcome.help("apiVersion").contains("skips validation"));
}

#[test]
fn metadata_and_name_are_required() {
    expect(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nspec: {}\n",
        &["1:1: error: the `GlobalNetworkSet` has no `metadata`"],
    );
    expect(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  labels: {a: b}\n",
        &["4:3: error: the `GlobalNetworkSet` has no `name`"],
    );
}

#[test]
fn names_are_rfc_1123_subdomains_and_the_message_says_what_is_wrong() {
    let named =
        |name: &str| network_set("  nets: []\n").replace("name: s", &format!("name: {name}"));
    let cases: &[(&str, &str, &str)] = &[
        (
            "Web",
            "4:9: error: the name `Web` has uppercase letters",
            "write `web`",
        ),
        (
            "web_server",
            "4:9: error: the name `web_server` contains `_`",
            "write `web-server`",
        ),
        (
            "'a b'",
            "4:9: error: the name `a b` contains a space",
            "write `a-b`",
        ),
        (
            "-web",
            "4:9: error: the name `-web` does not start with a letter or digit",
            "write `web`",
        ),
        (
            "web.",
            "4:9: error: the name `web.` does not end with a letter or digit",
            "write `web`",
        ),
        (
            "a..b",
            "4:9: error: the name `a..b` has two dots in a row",
            "names are lowercase",
        ),
        (
            "a-.b",
            "4:9: error: the name `a-.b` has `-` next to `.`",
            "names are lowercase",
        ),
        ("''", "4:9: error: the name is empty", "names are lowercase"),
        (
            "'é'",
            "4:9: error: the name `é` contains `é`",
            "names are lowercase",
        ),
    ];
    for (name, headline, help) in cases {
        let outcome = expect(&named(name), &[headline]);
        assert!(
            outcome.help("name").starts_with(help),
            "{name}: {}",
            outcome.help("name")
        );
    }
    let long = "a".repeat(254);
    expect(&named(&long), &["4:9: error: the name `aaaa"]);
    let outcome = run_one(&named(&long));
    assert!(outcome.headlines()[0].ends_with("is 254 bytes long, more than the 253 allowed"));
    // Dots are fine (Calico v3.29+ allows one in policy names; see the module notes).
    expect(&named(&format!("{}.b.c", "a".repeat(100))), &[]);
    expect(&named(&"a".repeat(253)), &[]);
}

#[test]
fn namespace_is_refused_on_cluster_wide_resources() {
    let text =
        network_set("  nets: []\n").replace("  name: s\n", "  name: s\n  namespace: default\n");
    let outcome = expect(
        &text,
        &["5:14: error: `GlobalNetworkSet` is a cluster-wide resource, so it has no namespace"],
    );
    assert_eq!(outcome.help("namespace"), "remove `namespace`");
}

#[test]
fn labels_follow_kubernetes_rules() {
    let text = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n  labels:\n    good: yes-1\n    example.com/role: edge\n    Example.com/x: a\n    -bad: a\n    a/b/c: a\n    /x: a\n    ok: -bad\n    fine: 'a b'\n    long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n    empty: ''\n";
    let outcome = expect(
        text,
        &[
            "8:5: error: label key `Example.com/x` has a prefix `Example.com` that has uppercase letters",
            "9:5: error: label key `-bad` does not start with a letter or digit",
            "10:5: error: label key `a/b/c` has more than one `/`",
            "11:5: error: label key `/x` has nothing before `/`",
            "12:9: error: label value `-bad` does not start with a letter or digit",
            "13:11: error: label value `a b` contains a space",
            "14:11: error: label value `aaaa",
        ],
    );
    assert!(outcome.headlines()[6].ends_with("is 68 characters long, more than the 63 allowed"));
    // Invalid labels are left out of the model; valid ones are kept.
    let labels = &outcome.model.network_sets()[0].labels;
    assert_eq!(
        labels.keys().map(String::as_str).collect::<Vec<_>>(),
        ["empty", "example.com/role", "good"]
    );
}

#[test]
fn label_helpers_used_by_the_config_say_what_is_wrong() {
    assert_eq!(label_key_problem("kubernetes.io/hostname"), None);
    assert_eq!(label_key_problem("a_b.c-d"), None);
    assert_eq!(
        label_key_problem("a/"),
        Some("label key `a/` has nothing after `/`".to_owned())
    );
    assert_eq!(
        label_key_problem(&format!("x/{}", "a".repeat(64))),
        Some(format!(
            "label key `x/{}…` has a part after `/` of 64 characters, more than the 63 allowed",
            "a".repeat(62)
        ))
    );
    assert_eq!(
        label_key_problem("a/b_"),
        Some(
            "label key `a/b_` has a part after `/` that does not end with a letter or digit"
                .to_owned()
        )
    );
    assert_eq!(
        label_key_problem(""),
        Some("the label key is empty".to_owned())
    );
    assert_eq!(label_value_problem(""), None);
    assert_eq!(
        label_value_problem("a\nb"),
        Some("label value `a\\nb` contains `\\n`".to_owned())
    );
    assert!(is_subdomain("node-1.example.com"));
    assert!(!is_subdomain("Node"));
    assert!(!is_subdomain(""));
}

#[test]
fn annotations_are_qualified_keys_and_one_line_values() {
    let text = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n  annotations:\n    Example.COM/Owner: team\n    bad key: x\n    newline: \"a\\nb\"\n    nul: \"a\\0b\"\n    bell: \"\\a\"\n    del: \"\\x7f\"\n    tab: \"a\\tb\"\n    block: |\n      text\n    unicode: \"héllo → ok\"\n";
    let outcome = expect(
        text,
        &[
            "7:5: error: annotation key `bad key` contains a space",
            "8:14: error: the annotation holds the control character `\\n`",
            "9:10: error: the annotation holds the control character `\\u{0}`",
            "10:11: error: the annotation holds the control character `\\u{7}`",
            "11:10: error: the annotation holds the control character `\\u{7f}`",
            "12:10: error: the annotation holds the control character `\\t`",
            "14:7: error: the annotation holds the control character `\\n`",
        ],
    );
    let block = &outcome.diagnostics[6];
    assert!(
        block
            .help
            .as_deref()
            .is_some_and(|help| help.contains("`>-` or `|-`"))
    );
}

#[test]
fn annotations_may_hold_at_most_256_kib() {
    let big = "a".repeat(MAX_ANNOTATION_BYTES);
    let text = format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n  annotations:\n    k: {big}\n"
    );
    expect(
        &text,
        &["6:5: error: the annotations hold 262145 bytes, more than the 262144 (256 KiB) allowed"],
    );
}

#[test]
fn duplicate_names_of_one_kind_are_errors_at_the_second_definition() {
    let first = policy("  selector: all()\n");
    let second = format!(
        "# the same name again\n{first}---\n{}",
        network_set("  nets: []\n").replace("name: s", "name: p")
    );
    let outcome = run(&[("a.yaml", &first), ("b.yaml", &second)]);
    assert_eq!(
        outcome.headlines(),
        ["b.yaml:5:9: error: another `GlobalNetworkPolicy` is already named `p`"]
    );
    assert_eq!(
        outcome.help("already named"),
        "`p` is also defined at a.yaml:4:9"
    );
    // The first definition is the one in the model; a set may share the policy's name.
    assert_eq!(outcome.model.policies().len(), 1);
    assert_eq!(outcome.model.policies()[0].origin.file, FileId(0));
    assert_eq!(outcome.model.network_sets().len(), 1);

    let third = format!("{first}---\n{first}---\n{first}");
    let outcome = run_one(&third);
    assert_eq!(outcome.headlines().len(), 2, "{:?}", outcome.headlines());
    assert_eq!(
        outcome.help("already named"),
        "`p` is also defined at p.yaml:4:9"
    );
}

#[test]
fn every_error_of_every_resource_is_reported() {
    let text = format!(
        "{}---\n{}---\n{}",
        rule("action: allow\n      protocol: tcp\n      destination:\n        ports: [0]\n"),
        network_set("  nets: [10.0.0.1/8, nope]\n"),
        host_endpoint("  interfaceName: eth0\n  profiles: [kns.default]\n")
    );
    let outcome = expect(
        &text,
        &[
            "7:15: error: `allow` is not an action",
            "8:17: error: `tcp` is not a protocol name",
            "10:17: error: port 0 is not a port",
            "17:10: warning: `10.0.0.1/8` has host bits set: the set holds the network `10.0.0.0/8`",
            "17:22: error: `nope` is not an address or a CIDR",
            "24:3: error: the host endpoint has no `node`",
            "25:14: error: profile `kns.default` does not exist here",
        ],
    );
    // The valid parts stay in the model: the policy without its rule, the set with its one
    // usable net (masked); the endpoint, which has no node, is left out.
    assert_eq!(outcome.policy("p").ingress.as_ref().map(Vec::len), Some(0));
    assert_eq!(outcome.model.network_sets()[0].nets.len(), 1);
    assert!(outcome.model.host_endpoints().is_empty());
}
