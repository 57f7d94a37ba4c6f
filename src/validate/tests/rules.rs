//! Rules and their entity rules.

use super::*;
use crate::model::{Action, IcmpMatch, IpFamily, Port, Protocol};

#[test]
fn actions_are_required_and_case_sensitive() {
    let outcome = expect(
        &rule("protocol: TCP\n"),
        &["7:7: error: the rule has no `action`"],
    );
    assert_eq!(
        outcome.help("action"),
        "add `action: Allow` (or `Deny`, `Pass`, `Log`)"
    );
    for (written, help) in [
        ("allow", "write `Allow`"),
        ("Accept", "write `Allow`"),
        ("DROP", "write `Deny`"),
        ("Jump", "write `Allow`, `Deny`, `Pass` or `Log`"),
    ] {
        let outcome = expect(
            &rule(&format!("action: {written}\n")),
            &[&format!("7:15: error: `{written}` is not an action")],
        );
        assert_eq!(outcome.help("action"), help);
    }
    for action in ["Allow", "Deny", "Pass", "Log"] {
        expect(&rule(&format!("action: {action}\n")), &[]);
    }
}

#[test]
fn protocols_are_exact_names_or_numbers_from_1_to_255() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "tcp",
            "8:17: error: `tcp` is not a protocol name: names are case-sensitive",
            "write `TCP`",
        ),
        (
            "icmpv6",
            "8:17: error: `icmpv6` is not a protocol name",
            "write `ICMPv6`",
        ),
        (
            "ipv6-icmp",
            "8:17: error: `ipv6-icmp` is not a protocol name",
            "write `ICMPv6`",
        ),
        (
            "GRE",
            "8:17: error: `GRE` is not a protocol",
            "write `TCP`, `UDP`, `ICMP`, `ICMPv6`, `SCTP`, `UDPLite` or a protocol number 1-255",
        ),
        (
            "0",
            "8:17: error: protocol number 0 is not a protocol",
            "leave `protocol` out",
        ),
        (
            "'0'",
            "8:17: error: protocol number 0 is not a protocol",
            "leave `protocol` out",
        ),
        (
            "256",
            "8:17: error: protocol number 256 is not between 1 and 255",
            "write a protocol name",
        ),
        (
            "-1",
            "8:17: error: protocol number -1 is not between 1 and 255",
            "write a protocol name",
        ),
    ];
    for (written, headline, help) in cases {
        let outcome = expect(
            &rule(&format!("action: Allow\n      protocol: {written}\n")),
            &[headline],
        );
        assert!(
            outcome.help("protocol").starts_with(help),
            "{written}: {}",
            outcome.help("protocol")
        );
    }
    expect(
        &rule("action: Allow\n      notProtocol: udp\n"),
        &["8:20: error: `udp` is not a protocol name"],
    );
    for (written, parsed) in [
        ("TCP", Protocol::Tcp),
        ("UDPLite", Protocol::UdpLite),
        ("6", Protocol::Tcp),
        ("'17'", Protocol::Udp),
        ("47", Protocol::Number(47)),
        ("255", Protocol::Number(255)),
    ] {
        let outcome = expect(
            &rule(&format!("action: Allow\n      protocol: {written}\n")),
            &[],
        );
        let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
        assert_eq!(rules[0].protocol, Some(parsed), "{written}");
    }
}

#[test]
fn ports_need_tcp_udp_or_sctp() {
    let outcome = expect(
        &rule("action: Allow\n      destination:\n        ports: [80]\n"),
        &["9:16: error: ports need a protocol that has ports"],
    );
    assert_eq!(
        outcome.help("ports need"),
        "add `protocol: TCP` (or `UDP`, `SCTP`) to the rule"
    );
    // Every list is reported; a list of named ports alone needs no protocol (Calico: "should
    // accept Rule with dest named ports and no protocol", "… source named ports …"): the
    // endpoint's port says which.
    expect(
        &rule(
            "action: Allow\n      source:\n        notPorts: [web]\n      destination:\n        ports: [80]\n        notPorts: ['1:2', web]\n",
        ),
        &[
            "11:16: error: ports need a protocol that has ports",
            "12:19: error: ports need a protocol that has ports",
        ],
    );
    expect(
        &rule(
            "action: Allow\n      source:\n        ports: [dns]\n      destination:\n        ports: [web]\n",
        ),
        &[],
    );
    // `notProtocol` never says which protocol a packet has.
    let outcome = expect(
        &rule("action: Allow\n      notProtocol: UDP\n      destination:\n        ports: [80]\n"),
        &["10:16: error: ports need a protocol that has ports"],
    );
    assert!(
        outcome
            .help("ports need")
            .contains("`notProtocol` does not say")
    );
    // A protocol without ports, UDPLite included (as in Calico).
    for written in ["ICMP", "UDPLite", "47"] {
        expect(
            &rule(&format!(
                "action: Allow\n      protocol: {written}\n      destination:\n        ports: [80]\n"
            )),
            &["10:16: error: ports can only be matched with `TCP`, `UDP` or `SCTP`, not"],
        );
    }
    for written in ["TCP", "UDP", "SCTP", "6", "17", "132"] {
        expect(
            &rule(&format!(
                "action: Allow\n      protocol: {written}\n      destination:\n        ports: [80]\n"
            )),
            &[],
        );
    }
    // An empty list is no condition; a wrong protocol is reported once, not again here.
    expect(
        &rule("action: Allow\n      destination:\n        ports: []\n"),
        &[],
    );
    expect(
        &rule("action: Allow\n      protocol: tcp\n      destination:\n        ports: [80]\n"),
        &["8:17: error: `tcp` is not a protocol name"],
    );
}

#[test]
fn ports_are_numbers_ranges_or_kubernetes_port_names() {
    let cases: &[(&str, &str, Option<&str>)] = &[
        (
            "0",
            "port 0 is not a port: ports are 1-65535",
            Some("remove it; a rule without ports matches every port"),
        ),
        ("'0'", "port 0 is not a port: ports are 1-65535", None),
        ("65536", "`65536` is not a port: ports are 1-65535", None),
        ("-1", "`-1` is not a port: ports are 1-65535", None),
        (
            "'99999999999999999999999'",
            "`99999999999999999999999` is not a port",
            None,
        ),
        (
            "'90:80'",
            "the range `90:80` starts after it ends",
            Some("write `80:90`"),
        ),
        (
            "'0:80'",
            "port 0 is not a port",
            Some("ranges lie within 1-65535: write `1:80`"),
        ),
        (
            "'80:70000'",
            "`70000` is not a port",
            Some("ranges lie within 1-65535: write `80:65535`"),
        ),
        (
            "80-90",
            "port name `80-90` has no letter",
            Some("ranges are written with a colon: `80:90`"),
        ),
        (
            "'80:'",
            "port name `80:` contains `:`",
            Some("ranges are written `first:last`"),
        ),
        (
            "Web",
            "port name `Web` has uppercase letters",
            Some("write `web`"),
        ),
        ("my_port", "port name `my_port` contains `_`", None),
        ("a--b", "port name `a--b` contains `--`", None),
        ("-web", "port name `-web` starts or ends with `-`", None),
        ("web-", "port name `web-` starts or ends with `-`", None),
        (
            "abcdefghijklmnop",
            "port name `abcdefghijklmnop` is 16 characters long, more than the 15 allowed",
            None,
        ),
        ("''", "a port name cannot be empty", None),
    ];
    for (written, message, help) in cases {
        let outcome = expect(
            &rule(&format!(
                "action: Allow\n      protocol: TCP\n      destination:\n        ports: [{written}]\n"
            )),
            &[&format!("10:17: error: {message}")],
        );
        if let Some(help) = help {
            assert!(
                outcome.help(message).starts_with(help),
                "{written}: {}",
                outcome.help(message)
            );
        }
    }
    let outcome = expect(
        &rule(
            "action: Allow\n      protocol: TCP\n      destination:\n        ports: [1, 65535, '80', '8000:8080', '5:5', http, web-1]\n",
        ),
        &[],
    );
    let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
    assert_eq!(
        rules[0].destination.ports,
        [
            Port::Single(1),
            Port::Single(65535),
            Port::Single(80),
            Port::Range(8000, 8080),
            Port::Range(5, 5),
            Port::Named("http".into()),
            Port::Named("web-1".into()),
        ]
    );
}

#[test]
fn icmp_fields_need_an_icmp_protocol_and_valid_numbers() {
    let outcome = expect(
        &rule("action: Allow\n      icmp: {type: 8}\n"),
        &["8:13: error: `icmp` needs `protocol: ICMP` or `protocol: ICMPv6`"],
    );
    assert!(outcome.help("`icmp`").contains("`protocol: ICMPv6` (IPv6)"));
    expect(
        &rule("action: Allow\n      protocol: TCP\n      notICMP: {type: 8}\n"),
        &["9:16: error: `notICMP` needs `protocol: ICMP` or `protocol: ICMPv6`, not `TCP`"],
    );
    expect(
        &rule("action: Allow\n      protocol: ICMP\n      icmp: {type: 255, code: 256}\n"),
        &[
            "9:20: error: ICMP type 255 is not between 0 and 254",
            "9:31: error: ICMP code 256 is not between 0 and 255",
        ],
    );
    expect(
        &rule("action: Allow\n      protocol: ICMP\n      icmp: {code: 1}\n"),
        &["9:20: error: an ICMP code needs an ICMP type"],
    );
    // Numbers 1 and 58 are the ICMP protocols too.
    for protocol in ["ICMP", "ICMPv6", "1", "58"] {
        let outcome = expect(
            &rule(&format!(
                "action: Allow\n      protocol: {protocol}\n      icmp: {{type: 3, code: 1}}\n      notICMP: {{type: 0}}\n"
            )),
            &[],
        );
        let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
        assert_eq!(
            rules[0].icmp,
            Some(IcmpMatch {
                icmp_type: 3,
                code: Some(1)
            })
        );
        assert_eq!(
            rules[0].not_icmp,
            Some(IcmpMatch {
                icmp_type: 0,
                code: None
            })
        );
    }
}

#[test]
fn ip_version_is_4_or_6_and_fits_icmp() {
    expect(
        &rule("action: Allow\n      ipVersion: 5\n"),
        &["8:18: error: `ipVersion` must be 4 or 6, not 5"],
    );
    let outcome = expect(
        &rule("action: Allow\n      protocol: ICMP\n      ipVersion: 6\n"),
        &["9:18: error: `protocol: ICMP` exists only in IPv4, so it cannot go with `ipVersion: 6`"],
    );
    assert_eq!(
        outcome.help("exists only"),
        "write `ipVersion: 4`, or use `ICMPv6` for IPv6"
    );
    expect(
        &rule("action: Allow\n      protocol: 58\n      ipVersion: 4\n"),
        &[
            "9:18: error: `protocol: ICMPv6` exists only in IPv6, so it cannot go with `ipVersion: 4`",
        ],
    );
    expect(
        &rule("action: Allow\n      notProtocol: ICMP\n      ipVersion: 6\n"),
        &["9:18: error: `notProtocol: ICMP` exists only in IPv4"],
    );
    let outcome = expect(
        &rule("action: Allow\n      protocol: ICMPv6\n      ipVersion: 6\n"),
        &[],
    );
    let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
    assert_eq!(rules[0].ip_version, Some(IpFamily::V6));
}

#[test]
fn rule_nets_are_strict_cidrs() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "10.0.0.1",
            "`10.0.0.1` is an address, not a CIDR",
            "write `10.0.0.1/32`",
        ),
        (
            "'2001:db8::1'",
            "`2001:db8::1` is an address, not a CIDR",
            "write `2001:db8::1/128`",
        ),
        (
            "10.1.2.3/8",
            "`10.1.2.3/8` has host bits set",
            "write the network `10.0.0.0/8`, or `10.1.2.3/32` for the single address",
        ),
        (
            "10.0.0.0/33",
            "`10.0.0.0/33` is not a CIDR",
            "write a network such as",
        ),
        (
            "example.com",
            "`example.com` is not a CIDR",
            "write a network such as",
        ),
    ];
    for (written, message, help) in cases {
        let outcome = expect(
            &rule(&format!(
                "action: Allow\n      source:\n        nets: [{written}]\n"
            )),
            &[&format!("9:16: error: {message}")],
        );
        assert!(
            outcome.help(message).starts_with(help),
            "{written}: {}",
            outcome.help(message)
        );
    }
}

#[test]
fn rule_nets_agree_with_ip_version_and_with_each_other() {
    let outcome = expect(
        &rule(
            "action: Allow\n      ipVersion: 4\n      source:\n        nets: [10.0.0.0/8, 'fd00::/8']\n",
        ),
        &["10:28: error: `fd00::/8` is an IPv6 network, but `ipVersion` is 4"],
    );
    assert_eq!(
        outcome.help("ipVersion"),
        "write an IPv4 network, or `ipVersion: 6`"
    );
    // The mix is reported on the net that introduced it, in Calico's scan order.
    let outcome = expect(
        &rule(
            "action: Allow\n      source:\n        notNets: ['fd00::/8']\n      destination:\n        nets: [10.0.0.0/8, 192.0.2.0/24]\n        notNets: ['fd01::/16']\n",
        ),
        &["11:16: error: `10.0.0.0/8` is an IPv4 network, but this rule already has IPv6 networks"],
    );
    assert_eq!(
        outcome.help("already has"),
        "split the rule into one rule per IP family (each may set `ipVersion`)"
    );
    let outcome = expect(
        &rule(
            "action: Allow\n      source:\n        nets: ['::/0', 'fd00::/8']\n      destination:\n        notNets: ['fd00::/16']\n",
        ),
        &[],
    );
    let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
    assert_eq!(rules[0].families(), [IpFamily::V6]);
}

#[test]
fn catch_all_not_nets_match_nothing() {
    let outcome = expect(
        &rule(
            "action: Allow\n      source:\n        notNets: [0.0.0.0/0]\n      destination:\n        notNets: ['::/0']\n",
        ),
        &[
            "9:19: error: `0.0.0.0/0` in `notNets` excludes every address, so the rule matches nothing",
            "11:19: error: `::/0` in `notNets` excludes every address",
        ],
    );
    assert!(outcome.help("excludes").starts_with("remove the entry"));
    expect(
        &rule("action: Allow\n      source:\n        nets: [0.0.0.0/0]\n"),
        &[],
    );
}

#[test]
fn icmp_with_networks_of_the_other_family_never_matches() {
    let outcome = expect(
        &rule("action: Allow\n      protocol: ICMP\n      source:\n        nets: ['fd00::/8']\n"),
        &[
            "8:17: warning: the rule never matches: `ICMP` exists only in IPv4, and its networks are IPv6",
        ],
    );
    assert_eq!(
        outcome.help("never matches"),
        "write `protocol: ICMPv6` for IPv6 networks"
    );
}

#[test]
fn rule_selectors_are_checked_like_policy_selectors() {
    expect(
        &rule(
            "action: Allow\n      source:\n        selector: global()\n      destination:\n        notSelector: \"has(x) || global()\"\n",
        ),
        &[
            "9:19: error: `global()` can only be used in a namespaceSelector",
            "11:33: error: `global()` can only be used in a namespaceSelector",
        ],
    );
    let outcome = expect(
        &rule("action: Allow\n      source:\n        selector: has(a)\n        notSelector: ''\n"),
        &[],
    );
    let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
    assert!(rules[0].source.selector.is_some());
    assert!(
        rules[0]
            .source
            .not_selector
            .as_ref()
            .is_some_and(Selector::is_all)
    );
}

#[test]
fn workload_only_fields_are_refused() {
    let outcome = expect(
        &rule(
            "action: Allow\n      http: {methods: [GET]}\n      source:\n        namespaceSelector: all()\n        serviceAccounts: {names: [a]}\n      destination:\n        services: {name: web, namespace: default}\n",
        ),
        &[
            "8:13: error: `http` matches HTTP requests of workloads, which does not apply to host endpoints",
            "10:28: error: `namespaceSelector` selects workloads by namespace",
            "11:26: error: `serviceAccounts` selects workloads by service account",
            "13:19: error: `services` selects Kubernetes services, which do not apply to host endpoints",
        ],
    );
    assert_eq!(
        outcome.help("`services`"),
        "remove `services`; match the service's addresses with `nets` or a GlobalNetworkSet"
    );
}

#[test]
fn rule_annotations_are_checked_and_kept() {
    expect(
        &rule(
            "action: Allow\n      metadata:\n        annotations:\n          'bad key': x\n          why: \"two\\nlines\"\n",
        ),
        &[
            "10:11: error: annotation key `bad key` contains a space",
            "11:16: error: the annotation holds the control character `\\n`",
        ],
    );
    let outcome = expect(
        &rule(
            "action: Allow\n      metadata:\n        annotations: {why: \"ticket #42: let the LB in\"}\n",
        ),
        &[],
    );
    let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
    assert_eq!(
        rules[0].annotations.get("why").map(String::as_str),
        Some("ticket #42: let the LB in")
    );
    let origin = rules[0].origin;
    let position = outcome
        .sources
        .get(origin.file)
        .line_column(origin.span.start);
    assert_eq!(position.to_string(), "7:7");
}

#[test]
fn invalid_rules_are_left_out_of_the_model() {
    let outcome = run_one(&policy(
        "  ingress:\n    - action: Allow\n    - action: Nope\n    - action: Deny\n",
    ));
    let actions: Vec<_> = outcome
        .policy("p")
        .ingress
        .iter()
        .flatten()
        .map(|rule| rule.action)
        .collect();
    assert_eq!(actions, [Action::Allow, Action::Deny]);
}
