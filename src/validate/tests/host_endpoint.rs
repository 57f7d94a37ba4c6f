//! `HostEndpoint`.

use super::*;
use crate::model::{EndpointInterface, NamedPort, Protocol};

#[test]
fn host_endpoints_need_a_node_and_an_interface_or_addresses() {
    let outcome = expect(
        &host_endpoint("  interfaceName: eth0\n"),
        &["6:3: error: the host endpoint has no `node`"],
    );
    assert!(outcome.help("`node`").contains("`nodeName`"));
    expect(
        &host_endpoint("  node: Node_1\n  interfaceName: eth0\n"),
        &["6:9: error: the node name `Node_1` has uppercase letters"],
    );
    expect(
        &host_endpoint("  node: n1\n"),
        &["6:3: error: the host endpoint has neither an `interfaceName` nor `expectedIPs`"],
    );
    expect(
        &host_endpoint("  node: n1\n  interfaceName: ''\n  expectedIPs: []\n"),
        &["7:18: error: the host endpoint has neither an `interfaceName` nor `expectedIPs`"],
    );
    // No spec at all.
    expect(
        "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: h\n",
        &[
            "1:1: error: the host endpoint has no `node`",
            "1:1: error: the host endpoint has neither",
        ],
    );
}

#[test]
fn interface_names_are_star_empty_or_linux_names() {
    for (written, interface) in [
        ("'*'", EndpointInterface::All),
        ("eth0", EndpointInterface::Named("eth0".into())),
        (
            "br-lan_1.10",
            EndpointInterface::Named("br-lan_1.10".into()),
        ),
        (
            "abcdefghijklmno",
            EndpointInterface::Named("abcdefghijklmno".into()),
        ),
        ("''", EndpointInterface::ByAddress),
    ] {
        let outcome = expect(
            &host_endpoint(&format!(
                "  node: n1\n  interfaceName: {written}\n  expectedIPs: [192.0.2.1]\n"
            )),
            &[],
        );
        assert_eq!(outcome.model.host_endpoints()[0].interface, interface);
    }
    expect(
        &host_endpoint("  node: n1\n  interfaceName: abcdefghijklmnop\n"),
        &[
            "7:18: error: interface name `abcdefghijklmnop` is 16 characters long, more than the 15 Linux allows",
        ],
    );
    let outcome = expect(
        &host_endpoint("  node: n1\n  interfaceName: 'eth*'\n"),
        &["7:18: error: interface name `eth*` contains `*`, which interface names cannot hold"],
    );
    assert!(
        outcome
            .help("interface name")
            .starts_with("only `\"*\"` on its own")
    );
    expect(
        &host_endpoint("  node: n1\n  interfaceName: 'eth 0'\n"),
        &["7:18: error: interface name `eth 0` contains a space"],
    );
}

#[test]
fn expected_ips_are_plain_addresses() {
    let outcome = expect(
        &host_endpoint(
            "  node: n1\n  expectedIPs: [192.0.2.1/24, nope, '2001:db8::1', 192.0.2.1]\n",
        ),
        &[
            "7:17: error: `192.0.2.1/24` is a network, but `expectedIPs` holds single addresses",
            "7:31: error: `nope` is not an IP address",
        ],
    );
    assert_eq!(
        outcome.help("is a network"),
        "write the address without `/24`: `192.0.2.1`"
    );
    let outcome = expect(
        &host_endpoint("  node: n1\n  expectedIPs: [192.0.2.1, '2001:db8::1', 192.0.2.1]\n"),
        &[],
    );
    let endpoint = &outcome.model.host_endpoints()[0];
    assert_eq!(endpoint.interface, EndpointInterface::ByAddress);
    assert_eq!(endpoint.expected_ips.len(), 2);
}

#[test]
fn endpoint_ports_are_named_numbered_and_have_a_port_protocol() {
    expect(
        &host_endpoint(
            "  node: n1\n  interfaceName: eth0\n  ports:\n    - {port: 80, protocol: TCP}\n    - {name: Web, port: 0, protocol: ICMP}\n    - {name: api, port: 70000}\n    - {name: web, port: 81, protocol: tcp}\n    - {name: web, port: 82, protocol: UDP}\n",
        ),
        &[
            "9:7: error: the port has no `name`",
            "10:14: error: port name `Web` has uppercase letters",
            "10:25: error: port 0 is not a port",
            "10:38: error: a named port needs `TCP`, `UDP` or `SCTP`, not `ICMP`",
            "11:7: error: the port has no `protocol`",
            "11:25: error: `70000` is not a port",
            "12:39: error: `tcp` is not a protocol name",
        ],
    );
    // Calico: "should accept HostEndpointSpec with name-clashing ports" (one name, two
    // protocols); a rule's named port matches both. The same name twice on one protocol is
    // accepted as well, with a warning.
    let outcome = expect(
        &host_endpoint(
            "  node: n1\n  interfaceName: eth0\n  ports:\n    - {name: dns, port: 53, protocol: TCP}\n    - {name: dns, port: 53, protocol: UDP}\n    - {name: web, port: 80, protocol: TCP}\n    - {name: web, port: 8080, protocol: TCP}\n",
        ),
        &[
            "12:14: warning: port name `web` is used twice for TCP in this host endpoint: a rule's `web` matches both ports",
        ],
    );
    assert_eq!(outcome.model.host_endpoints()[0].ports.len(), 4);
    let outcome = expect(
        &host_endpoint(
            "  node: n1\n  interfaceName: eth0\n  ports:\n    - {name: web, port: 8080, protocol: TCP}\n    - {name: dns, port: 53, protocol: 17}\n",
        ),
        &[],
    );
    assert_eq!(
        outcome.model.host_endpoints()[0].ports,
        [
            NamedPort {
                name: "web".into(),
                port: 8080,
                protocol: Protocol::Tcp
            },
            NamedPort {
                name: "dns".into(),
                port: 53,
                protocol: Protocol::Udp
            },
        ]
    );
}

#[test]
fn only_the_allow_all_profile_exists() {
    let outcome = expect(
        &host_endpoint(
            "  node: n1\n  interfaceName: eth0\n  profiles: [projectcalico-default-allow, kns.default]\n",
        ),
        &["8:43: error: profile `kns.default` does not exist here"],
    );
    assert!(
        outcome
            .help("profile")
            .contains("`projectcalico-default-allow`")
    );
    let outcome = expect(
        &host_endpoint(
            "  node: n1\n  interfaceName: '*'\n  profiles: [projectcalico-default-allow]\n",
        ),
        &[],
    );
    assert!(outcome.model.host_endpoints()[0].default_allow);
    let outcome = expect(&host_endpoint("  node: n1\n  interfaceName: eth0\n"), &[]);
    let endpoint = &outcome.model.host_endpoints()[0];
    assert!(!endpoint.default_allow);
    assert_eq!(endpoint.node, "n1");
    assert!(endpoint.origin.is_some());
}
