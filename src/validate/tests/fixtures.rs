//! The reference fixtures, and the order of the model.

use super::*;
use crate::model::PolicyKind;

const V1_TO_V4: &str = "# V1\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: allow-cluster-internal-ingress-only\nspec:\n  order: 20\n  preDNAT: true\n  applyOnForward: true\n  selector: has(kubernetes-host)\n  ingress:\n    - action: Allow\n      source:\n        nets: [10.240.0.0/16, 192.168.0.0/16]\n    - action: Deny\n---\n# V2\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: allow-outbound-external\nspec:\n  order: 10\n  selector: has(kubernetes-host)\n  egress:\n    - action: Allow\n---\n# V3\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: allow-nodeport\nspec:\n  preDNAT: true\n  applyOnForward: true\n  order: 10\n  selector: has(kubernetes-host)\n  ingress:\n    - action: Allow\n      protocol: TCP\n      destination:\n        selector: has(kubernetes-host)\n        ports: [31852]\n---\n# V4\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: drop-other-ingress\nspec:\n  order: 20\n  preDNAT: true\n  applyOnForward: true\n  selector: has(host-endpoint)\n  ingress:\n    - action: Deny\n";

const V5_V6: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: ingress-k8s-masters\nspec:\n  selector: has(node-role.kubernetes.io/control-plane)\n  ingress:\n    - action: Allow\n      protocol: TCP\n      destination:\n        ports: [6443]\n    - action: Allow\n      destination:\n        nets: [127.0.0.0/8]\n    - action: Allow\n      protocol: TCP\n      source:\n        selector: has(node-role.kubernetes.io/control-plane)\n      destination:\n        ports: [2380, 10250]\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: ingress-k8s-workers\nspec:\n  selector: has(kubernetes-worker)\n  ingress:\n    - action: Allow\n      destination:\n        nets: [127.0.0.0/8]\n    - action: Allow\n      protocol: TCP\n      source:\n        selector: has(node-role.kubernetes.io/control-plane)\n      destination:\n        ports: [10250]\n";

const V7_V8: &str = "- apiVersion: projectcalico.org/v3\n  kind: GlobalNetworkPolicy\n  metadata:\n    name: failsafe\n  spec:\n    selector: \"all()\"\n    order: 0\n    ingress:\n      - action: Allow\n        protocol: TCP\n        source:\n          nets: [192.0.2.0/24]\n        destination:\n          ports: [22]\n      - action: Allow\n        protocol: ICMP\n    egress:\n      - action: Allow\n        protocol: TCP\n        destination:\n          nets: [198.51.100.10/32]\n          ports: [2379, 2380]\n      - action: Allow\n        protocol: UDP\n        destination:\n          ports: [67]\n- apiVersion: projectcalico.org/v3\n  kind: GlobalNetworkPolicy\n  metadata:\n    name: empty-default-deny\n  spec:\n    types: [Ingress, Egress]\n    selector: has(host-endpoint)\n    applyOnForward: true\n";

const V9_V10: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: k8s-worker\nspec:\n  selector: \"role == 'k8s-worker'\"\n  order: 0\n  ingress:\n    - action: Allow\n      protocol: TCP\n      source:\n        nets: ['10.0.0.0/24']\n      destination:\n        ports: [22]\n    - action: Allow\n      protocol: ICMP\n    - action: Allow\n      protocol: TCP\n      destination:\n        ports: [10250]\n  egress:\n    - action: Allow\n      protocol: TCP\n      destination:\n        nets: ['10.0.0.5/32']\n        ports: [2379]\n    - action: Allow\n      protocol: UDP\n      destination:\n        ports: [53, 67]\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicyList\nitems:\n  - apiVersion: projectcalico.org/v3\n    kind: GlobalNetworkPolicy\n    metadata:\n      name: memcached-untracked\n    spec:\n      selector: role == 'memcached'\n      order: 5\n      doNotTrack: true\n      applyOnForward: true\n      ingress:\n        - action: Allow\n          protocol: TCP\n          destination:\n            ports: [11211]\n      egress:\n        - action: Allow\n          protocol: TCP\n          source:\n            ports: [11211]\n---\napiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: node1-eth0\n  labels:\n    kubernetes-host: ingress\nspec:\n  interfaceName: eth0\n  node: node1\n  expectedIPs: [10.240.0.11]\n  ports:\n    - name: web\n      port: 8080\n      protocol: TCP\n---\napiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: node2-auto-hep\n  labels:\n    kubernetes-host: \"\"\n    projectcalico.org/created-by: calico-kube-controllers\nspec:\n  interfaceName: \"*\"\n  node: node2\n  expectedIPs: [10.240.0.12]\n  profiles: [projectcalico-default-allow]\n";

#[test]
fn the_reference_fixtures_are_valid_with_calicos_derived_values() {
    let outcome = run(&[
        ("v1-v4.yaml", V1_TO_V4),
        ("v5-v6.yaml", V5_V6),
        ("v7-v8.yaml", V7_V8),
        ("v9-v10.yaml", V9_V10),
    ]);
    assert_eq!(outcome.headlines(), Vec::<String>::new());
    let types = |name: &str| {
        let policy = outcome.policy(name);
        (policy.ingress.is_some(), policy.egress.is_some())
    };
    let ingress = (true, false);
    let egress = (false, true);
    let both = (true, true);
    for (name, expected) in [
        ("allow-cluster-internal-ingress-only", ingress),
        ("allow-outbound-external", egress),
        ("allow-nodeport", ingress),
        ("drop-other-ingress", ingress),
        ("ingress-k8s-masters", ingress),
        ("ingress-k8s-workers", ingress),
        ("failsafe", both),
        ("empty-default-deny", both),
        ("k8s-worker", both),
        ("memcached-untracked", both),
    ] {
        assert_eq!(types(name), expected, "{name}");
    }
    let order: Vec<&str> = outcome
        .model
        .policies()
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        order,
        [
            "failsafe",
            "k8s-worker",
            "memcached-untracked",
            "allow-nodeport",
            "allow-outbound-external",
            "allow-cluster-internal-ingress-only",
            "drop-other-ingress",
            "empty-default-deny",
            "ingress-k8s-masters",
            "ingress-k8s-workers",
        ]
    );
    assert_eq!(outcome.policy("allow-nodeport").kind, PolicyKind::PreDnat);
    assert_eq!(
        outcome.policy("memcached-untracked").kind,
        PolicyKind::Untracked
    );
    assert_eq!(outcome.policy("failsafe").kind, PolicyKind::Normal);
    assert_eq!(
        outcome.policy("failsafe").ingress.as_ref().map(Vec::len),
        Some(2)
    );
    let endpoints: Vec<(&str, bool)> = outcome
        .model
        .host_endpoints()
        .iter()
        .map(|endpoint| (endpoint.name.as_str(), endpoint.default_allow))
        .collect();
    assert_eq!(endpoints, [("node1-eth0", false), ("node2-auto-hep", true)]);
    // Origins are file-relative: the second policy of the first file starts in its second
    // document.
    let origin = outcome.policy("allow-outbound-external").origin;
    assert_eq!(origin.file, FileId(0));
    assert_eq!(
        outcome
            .sources
            .get(origin.file)
            .line_column(origin.span.start)
            .to_string(),
        "21:9"
    );
}

#[test]
fn policies_are_ordered_by_order_then_name_with_no_order_last() {
    let named = |name: &str, order: &str| {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\nspec:\n{order}  selector: all()\n---\n"
        )
    };
    let text = [
        named("z-none", ""),
        named("b-ten", "  order: 10\n"),
        named("a-none", ""),
        named("c-minus", "  order: -5.5\n"),
        named("a-ten", "  order: 10\n"),
        named("b-half", "  order: 0.5\n"),
        named("big", "  order: 1e300\n"),
        named("a-zero", "  order: 0\n"),
    ]
    .concat();
    let outcome = expect(&text, &[]);
    let order: Vec<&str> = outcome
        .model
        .policies()
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        order,
        [
            "c-minus", "a-zero", "b-half", "a-ten", "b-ten", "big", "a-none", "z-none"
        ]
    );
    // Sets and endpoints come sorted by name.
    let sets = format!(
        "{}---\n{}",
        network_set("  nets: []\n").replace("name: s", "name: zz"),
        network_set("  nets: []\n")
    );
    let outcome = expect(&sets, &[]);
    let names: Vec<&str> = outcome
        .model
        .network_sets()
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["s", "zz"]);
}
