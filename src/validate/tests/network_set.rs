//! `GlobalNetworkSet`.

use super::*;

#[test]
fn network_sets_take_cidrs_and_addresses() {
    let outcome = expect(
        &network_set(
            "  nets: [192.0.2.0/24, 198.51.100.7, '2001:db8::1', '2001:db8::/32', 192.0.2.0/24]\n",
        ),
        &[],
    );
    let nets: Vec<String> = outcome.model.network_sets()[0]
        .nets
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        nets,
        [
            "192.0.2.0/24",
            "198.51.100.7/32",
            "2001:db8::1/128",
            "2001:db8::/32"
        ]
    );
    // Calico's lenient `cidr` rule for a set's nets: host bits are cleared, with a warning.
    let outcome = expect(
        &network_set("  nets: [192.0.2.1/24, not-an-ip, '2001:db8::1/32']\n"),
        &[
            "6:10: warning: `192.0.2.1/24` has host bits set: the set holds the network `192.0.2.0/24`",
            "6:24: error: `not-an-ip` is not an address or a CIDR",
            "6:35: warning: `2001:db8::1/32` has host bits set: the set holds the network `2001:db8::/32`",
        ],
    );
    assert!(
        outcome
            .help("192.0.2.1/24")
            .starts_with("write `192.0.2.0/24`")
    );
    let outcome = expect(
        &network_set("  nets: [192.0.2.1/24, 192.0.2.0/24]\n"),
        &[
            "6:10: warning: `192.0.2.1/24` has host bits set: the set holds the network `192.0.2.0/24`",
        ],
    );
    let nets: Vec<String> = outcome.model.network_sets()[0]
        .nets
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(nets, ["192.0.2.0/24"], "the masked network, once");
    // Calico: "should reject GlobalNetworkSet with reserved labels".
    expect(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n  labels: {projectcalico.org/namespace: default}\n",
        &[
            "5:12: error: `projectcalico.org/namespace` is a label Calico reserves: a GlobalNetworkSet belongs to no namespace",
        ],
    );
    expect(&network_set("  nets: []\n"), &[]);
    expect(&network_set("  {}\n"), &[]);
    let outcome = expect(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n  labels: {role: lb}\n",
        &[],
    );
    assert!(outcome.model.network_sets()[0].nets.is_empty());
    assert_eq!(
        outcome.model.network_sets()[0]
            .labels
            .get("role")
            .map(String::as_str),
        Some("lb")
    );
}
