//! The audit on the real rule sets the parsers' tests read (kube-proxy and docker, iptables
//! and nftables), with sockets, under the mission's whitelist and a deny-all policy.

use std::collections::BTreeSet;

use super::*;
use crate::config::Config;
use crate::fixtures::{DENY_ALL, WHITELIST, golden_host, model};

/// The DNAT rules of both parsers on the same programs' rules in their two firewall modes.
fn parsed(save: &[(&str, IpFamily)], json: &str) -> (Vec<String>, Vec<String>) {
    let mut from_iptables = Vec::new();
    for (text, family) in save {
        let (found, notes) = xtables::parse_nat(text, *family);
        assert!(notes.is_empty(), "{notes:?}");
        from_iptables.extend(found);
    }
    from_iptables.sort();
    let (from_nft, notes) = nft::parse_ruleset(json).expect("nft JSON");
    assert!(notes.is_empty(), "{notes:?}");
    (describe(&from_iptables), describe(&from_nft))
}

#[test]
fn kube_proxy_nodeports_lead_to_every_endpoint_and_name_the_service_in_both_modes() {
    let (iptables, nftables) = parsed(
        &[(
            include_str!("../../tests/data/exposure/kube-proxy-iptables.save"),
            IpFamily::V4,
        )],
        include_str!("../../tests/data/exposure/kube-proxy.json"),
    );
    // The cluster IPs (203.0.113.x) are DNATed too; `assess` leaves them out unless they are
    // the host's own.
    let expected = [
        "V4 tcp/80 Net(203.0.113.200/32) -> 192.0.2.2:80 (Service shop/web:http)",
        "V4 tcp/80 Net(203.0.113.200/32) -> 192.0.2.3:80 (Service shop/web:http)",
        "V4 tcp/30080 Local -> 192.0.2.2:80 (Service shop/web:http)",
        "V4 tcp/30080 Local -> 192.0.2.3:80 (Service shop/web:http)",
        "V4 udp/53 Net(203.0.113.201/32) -> 192.0.2.4:53 (Service infra/dns:dns)",
        "V4 udp/30054 Local -> 192.0.2.4:53 (Service infra/dns:dns)",
    ];
    assert_eq!(iptables, expected, "iptables mode");
    assert_eq!(nftables, expected, "nftables mode");
}

#[test]
fn docker_published_ports_name_the_container_and_keep_the_loopback_condition_in_both_firewalls() {
    let (iptables, nftables) = parsed(
        &[
            (
                include_str!("../../tests/data/exposure/docker-iptables.save"),
                IpFamily::V4,
            ),
            (
                include_str!("../../tests/data/exposure/docker-ip6tables.save"),
                IpFamily::V6,
            ),
        ],
        include_str!("../../tests/data/exposure/docker.json"),
    );
    let expected = [
        "V4 tcp/5432 Net(127.0.0.1/32) -> 192.0.2.3:5432 (container 192.0.2.3:5432)",
        "V4 tcp/8000 Local -> 192.0.2.2:80 (container 192.0.2.2:80)",
        "V6 tcp/8000 Local -> [2001:db8:3::2]:80 (container [2001:db8:3::2]:80)",
    ];
    assert_eq!(iptables, expected, "iptables firewall");
    assert_eq!(nftables, expected, "nftables firewall");
}

#[test]
fn multiport_lists_ranges_sets_and_redirects_are_published_ports_in_both_firewalls() {
    let (iptables, nftables) = parsed(
        &[(
            include_str!("../../tests/data/exposure/handmade-iptables.save"),
            IpFamily::V4,
        )],
        include_str!("../../tests/data/exposure/handmade.json"),
    );
    let expected = [
        "V4 tcp/30014 Any -> :8080 (-)",
        "V4 tcp/32001 Any -> 192.0.2.2:80 (-)",
        "V4 tcp/32002 Any -> 192.0.2.2:80 (-)",
        "V4 tcp/32010 Any -> 192.0.2.2:80 (-)",
        "V4 tcp/32011 Any -> 192.0.2.2:80 (-)",
        "V4 udp/31053 Any -> :31053 (-)",
        "V4 udp/31054 Any -> :31054 (-)",
    ];
    assert_eq!(iptables, expected, "iptables");
    assert_eq!(nftables, expected, "nftables");
}

fn socket(protocol: Transport, address: &str, port: u16, process: &str) -> Listening {
    Listening {
        protocol,
        address: address.parse().expect("address"),
        port,
        dual_stack: false,
        processes: vec![process.to_owned()],
    }
}

/// kube-proxy (iptables) and docker (iptables, both families) DNAT, and sockets: one on every
/// address, one dual-stack, one on loopback (never listed), one UDP.
fn inventory() -> Inventory {
    let mut dnat = Vec::new();
    for (text, family) in [
        (
            include_str!("../../tests/data/exposure/kube-proxy-iptables.save"),
            IpFamily::V4,
        ),
        (
            include_str!("../../tests/data/exposure/docker-iptables.save"),
            IpFamily::V4,
        ),
        (
            include_str!("../../tests/data/exposure/docker-ip6tables.save"),
            IpFamily::V6,
        ),
    ] {
        dnat.extend(xtables::parse_nat(text, family).0);
    }
    let mut ssh = socket(Transport::Tcp, "::", 22, "sshd");
    ssh.dual_stack = true;
    Inventory {
        sockets: vec![
            ssh,
            socket(Transport::Tcp, "198.51.100.1", 9100, "node_exporter"),
            socket(Transport::Tcp, "127.0.0.1", 5432, "postgres"),
            socket(Transport::Tcp, "::1", 5432, "postgres"),
            socket(Transport::Udp, "0.0.0.0", 5353, "avahi-daemon"),
        ],
        dnat,
        notes: Vec::new(),
        ipv6_off: false,
    }
}

fn rows(exposed: &[Exposed]) -> Vec<String> {
    exposed
        .iter()
        .map(|port| {
            let allowed: Vec<String> = port.allowed.iter().map(ToString::to_string).collect();
            format!(
                "{}/{} {:?} {} {} ({}) {}{} by {}",
                port.protocol,
                port.port,
                port.family,
                port.via.as_str(),
                port.target,
                port.owner.as_deref().unwrap_or("-"),
                port.reachable_from.as_str(),
                if allowed.is_empty() {
                    String::new()
                } else {
                    format!(" {}", allowed.join(","))
                },
                port.decided_by
            )
        })
        .collect()
}

#[test]
fn without_policies_every_outside_port_is_open_to_anyone_and_loopback_is_never_listed() {
    let exposed = assess(&inventory(), &model(""), &Config::default(), &golden_host());
    assert_eq!(
        rows(&exposed),
        [
            "tcp/8000 V4 dnat 192.0.2.2:80 (container 192.0.2.2:80) anyone by no rule decides",
            "tcp/8000 V6 dnat [2001:db8:3::2]:80 (container [2001:db8:3::2]:80) anyone by no rule decides",
            "udp/30054 V4 dnat 192.0.2.4:53 (Service infra/dns:dns) anyone by no rule decides",
            "tcp/30080 V4 dnat 192.0.2.2:80, 192.0.2.3:80 (Service shop/web:http) anyone by no rule decides",
            "tcp/22 V4 socket [::]:22 (sshd) anyone by no rule decides",
            "tcp/22 V6 socket [::]:22 (sshd) anyone by no rule decides",
            "udp/5353 V4 socket 0.0.0.0:5353 (avahi-daemon) anyone by no rule decides",
            "tcp/9100 V4 socket 198.51.100.1:9100 (node_exporter) anyone by no rule decides",
        ]
    );
}

#[test]
fn the_mission_whitelist_guards_its_nodeport_and_leaves_the_rest_open() {
    let mut inventory = inventory();
    inventory.dnat.push(Dnat {
        family: IpFamily::V4,
        protocol: Transport::Tcp,
        port: 30008,
        destination: Destination::Any,
        target: "198.51.100.1:8080".into(),
        owner: None,
        redirect: false,
    });
    let exposed = assess(
        &inventory,
        &model(WHITELIST),
        &Config::default(),
        &golden_host(),
    );
    let guarded: Vec<&Exposed> = exposed.iter().filter(|port| port.port == 30008).collect();
    assert_eq!(guarded.len(), 1);
    assert_eq!(guarded[0].reachable_from, Reachable::Some);
    assert_eq!(
        guarded[0].allowed,
        ["198.51.100.10/32".parse::<IpNet>().expect("net")]
    );
    assert_eq!(
        guarded[0].decided_by,
        "guard-nodeport rule 0 (Allow); guard-nodeport rule 1 (Deny)"
    );
    // Open to anyone: listed first.
    assert_eq!(exposed.last().map(|port| port.port), Some(30008));
    let open_dnat = exposed
        .iter()
        .filter(|port| port.via == Via::Dnat && port.reachable_from == Reachable::Anyone)
        .count();
    assert_eq!(open_dnat, 4);
}

#[test]
fn deny_all_leaves_only_the_failsafe_ports() {
    let exposed = assess(
        &inventory(),
        &model(DENY_ALL),
        &Config::default(),
        &golden_host(),
    );
    let open: Vec<String> = rows(&exposed)
        .into_iter()
        .filter(|row| !row.contains(" nobody "))
        .collect();
    assert_eq!(
        open,
        [
            "tcp/22 V4 socket [::]:22 (sshd) anyone by failsafe port",
            "tcp/22 V6 socket [::]:22 (sshd) anyone by failsafe port",
        ]
    );
    let closed = exposed
        .iter()
        .find(|port| port.port == 9100)
        .expect("port 9100");
    assert_eq!(
        closed.decided_by,
        "dropped at the end of tier default (its default action is Deny)"
    );
}

#[test]
fn a_published_port_that_loses_its_guard_is_named() {
    let mut inventory = inventory();
    inventory.dnat.push(Dnat {
        family: IpFamily::V4,
        protocol: Transport::Tcp,
        port: 30008,
        destination: Destination::Local,
        target: "192.0.2.2:80".into(),
        owner: Some("Service shop/guarded:http".into()),
        redirect: false,
    });
    let config = Config::default();
    let (guarded, open) = (model(WHITELIST), model(""));
    assert_eq!(
        newly_open(&inventory.dnat, &guarded, &open, &config, &golden_host()),
        [
            "published port tcp/30008 (IPv4, DNAT to 192.0.2.2:80, Service shop/guarded:http) was guarded and would be open to anyone"
        ]
    );
    assert!(newly_open(&inventory.dnat, &open, &guarded, &config, &golden_host()).is_empty());
    let after = assess(&inventory, &open, &config, &golden_host());
    let counts = counts(&after);
    assert_eq!(counts[&(Reachable::Anyone, Via::Dnat)], 5);
    assert_eq!(counts[&(Reachable::Nobody, Via::Socket)], 0);
}

#[test]
fn with_nothing_of_ours_in_the_kernel_every_port_is_open_to_anyone() {
    let exposed = unguarded(&inventory(), &Config::default(), &golden_host());
    let judged_by_no_policy = assess(&inventory(), &model(""), &Config::default(), &golden_host());
    let ports = |exposed: &[Exposed]| {
        exposed
            .iter()
            .map(|port| {
                (
                    port.via,
                    port.family,
                    port.protocol,
                    port.port,
                    port.target.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(ports(&exposed), ports(&judged_by_no_policy));
    assert!(exposed.iter().all(|port| {
        port.reachable_from == Reachable::Anyone
            && port.allowed.is_empty()
            && port.decided_by == NOTHING_APPLIED
    }));
    // The failsafe port too: no failsafe rule is in the kernel either.
    assert!(
        exposed
            .iter()
            .any(|port| port.port == 22 && port.decided_by == NOTHING_APPLIED)
    );
}

#[test]
fn a_redirect_is_judged_as_the_host_taking_the_packet() {
    let mut inventory = inventory();
    let (found, notes) = xtables::parse_nat(
        "*nat\n-A PREROUTING -p tcp -m tcp --dport 30014 -j REDIRECT --to-ports 8080\nCOMMIT\n",
        IpFamily::V4,
    );
    assert!(notes.is_empty(), "{notes:?}");
    inventory.dnat.extend(found);
    let exposed = assess(
        &inventory,
        &model(DENY_ALL),
        &Config::default(),
        &golden_host(),
    );
    let redirect = exposed
        .iter()
        .find(|port| port.port == 30014)
        .expect("the redirected port");
    assert_eq!(
        (redirect.via, redirect.target.as_str(), redirect.redirect),
        (Via::Dnat, ":8080", true)
    );
    // Taken by the host (INPUT), not forwarded: the deny-all's inbound default drops it.
    assert_eq!(redirect.reachable_from, Reachable::Nobody);
    assert_eq!(
        redirect.decided_by,
        "dropped at the end of tier default (its default action is Deny)"
    );
}

/// Normal ingress policy judges a published port as filter `INPUT` sees it: after nat
/// `PREROUTING`'s DNAT or REDIRECT, at the target's port.
#[test]
fn normal_policy_judges_a_port_published_to_the_host_itself_after_its_translation() {
    const ALLOW_9002: &str = "\
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: host-in
spec:
  selector: all()
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: [203.0.113.5/32]
      destination:
        ports: [9002, 8080]
";
    let (found, notes) = xtables::parse_nat(
        "*nat
-A PREROUTING -p tcp -m tcp --dport 30095 -j DNAT --to-destination 198.51.100.1:9002
-A PREROUTING -p tcp -m tcp --dport 7795 -j REDIRECT --to-ports 9002
-A PREROUTING -p tcp -m tcp --dport 8080 -j DNAT --to-destination 198.51.100.1:30081
COMMIT
",
        IpFamily::V4,
    );
    assert!(notes.is_empty(), "{notes:?}");
    let inventory = Inventory {
        sockets: Vec::new(),
        dnat: found,
        notes: Vec::new(),
        ipv6_off: false,
    };
    let exposed = assess(
        &inventory,
        &model(ALLOW_9002),
        &Config::default(),
        &golden_host(),
    );
    let reach = |port: u16| {
        let entry = exposed
            .iter()
            .find(|entry| entry.port == port)
            .unwrap_or_else(|| panic!("port {port} is listed"));
        (entry.reachable_from, entry.allowed.clone())
    };
    let only = vec!["203.0.113.5/32".parse::<IpNet>().expect("net")];
    // 9002 after the DNAT and after the REDIRECT: what the policy allows.
    assert_eq!(reach(30095), (Reachable::Some, only.clone()));
    assert_eq!(reach(7795), (Reachable::Some, only));
    // 8080 is allowed, but INPUT sees 30081, which is not.
    assert_eq!(reach(8080), (Reachable::Nobody, Vec::new()));
}

#[test]
fn dnat_targets_read_as_addresses_and_ports() {
    let v4 = |text: &str| text.parse::<IpAddr>().ok();
    assert_eq!(
        translations("192.0.2.2:80, 192.0.2.3:80, 192.0.2.2:80"),
        [(v4("192.0.2.2"), Some(80)), (v4("192.0.2.3"), Some(80))]
    );
    assert_eq!(translations(":8080"), [(None, Some(8080))]);
    assert_eq!(translations("192.0.2.2"), [(v4("192.0.2.2"), None)]);
    assert_eq!(
        translations("[2001:db8::2]:80-81"),
        [(v4("2001:db8::2"), Some(80))]
    );
    assert_eq!(translations("2001:db8::2"), [(v4("2001:db8::2"), None)]);
    assert_eq!(translations("somewhere:80"), []);
}

#[test]
fn port_sets_merge_intersect_and_parse_as_iptables_prints_them() {
    let set = |text: &str| PortSet::parse_xtables(text).expect(text);
    assert_eq!(set("32001,32002").to_string(), "32001-32002");
    assert_eq!(set("32010:32011,80,79").to_string(), "79-80, 32010-32011");
    assert_eq!(set(":1023").len(), 1024);
    assert_eq!(set("1024:").len(), 64_512);
    assert_eq!(PortSet::parse_xtables("http"), None);
    assert_eq!(PortSet::parse_xtables("9:8"), None);
    assert_eq!(
        set("30000:30100").intersect(&set("30050,30200")),
        Some(PortSet::one(30050))
    );
    assert_eq!(set("1:10").intersect(&set("11:20")), None);
    assert_eq!(
        set("5000:5002,6000").ports().collect::<Vec<_>>(),
        [5000, 5001, 5002, 6000]
    );
}

#[test]
fn the_hosts_own_addresses_are_neither_let_through_nor_samples_of_other_hosts() {
    // Two addresses of the host's own, and a policy that names one of them as a destination:
    // the source space is cut there, and a piece that starts at a host address must not be
    // judged as "the host to itself".
    let mut host = golden_host();
    host.interfaces[0]
        .addresses
        .push("198.51.100.2".parse().expect("address"));
    let policies = format!(
        "{WHITELIST}---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: dst-only
spec:
  preDNAT: true
  applyOnForward: true
  order: 300
  selector: has(kubernetes.io/hostname)
  ingress:
    - action: Deny
      protocol: TCP
      destination:
        nets: [198.51.100.1/32]
        ports: [43000]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: wide
spec:
  preDNAT: true
  applyOnForward: true
  order: 400
  selector: has(kubernetes.io/hostname)
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: [198.51.100.0/24]
      destination:
        ports: [30009]
    - action: Deny
      protocol: TCP
      destination:
        ports: [30009, 30010]
"
    );
    let inventory = Inventory {
        sockets: [30008, 30009, 30010]
            .map(|port| socket(Transport::Tcp, "198.51.100.1", port, "server"))
            .into(),
        dnat: Vec::new(),
        notes: Vec::new(),
        ipv6_off: false,
    };
    let exposed = assess(&inventory, &model(&policies), &Config::default(), &host);
    let port = |number: u16| {
        exposed
            .iter()
            .find(|port| port.port == number)
            .expect("port listed")
    };
    let net = |text: &str| text.parse::<IpNet>().expect("net");
    assert_eq!(port(30008).reachable_from, Reachable::Some);
    assert_eq!(port(30008).allowed, [net("198.51.100.10/32")]);
    // The host's addresses inside an allowed net do not split it.
    assert_eq!(port(30009).reachable_from, Reachable::Some);
    assert_eq!(port(30009).allowed, [net("198.51.100.0/24")]);
    assert_eq!(port(30010).reachable_from, Reachable::Nobody);
    assert!(port(30010).allowed.is_empty());
}

#[test]
fn a_kernel_without_ipv6_has_no_ipv6_port_to_reach() {
    let mut inventory = inventory();
    inventory.ipv6_off = true;
    let exposed = assess(&inventory, &model(""), &Config::default(), &golden_host());
    let families: BTreeSet<IpFamily> = exposed.iter().map(|port| port.family).collect();
    assert_eq!(families, BTreeSet::from([IpFamily::V4]));
    // The dual-stack socket still takes IPv4.
    assert!(exposed.iter().any(|port| port.port == 22));
}
