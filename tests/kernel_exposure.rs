//! Kernel tests of `exposure`: on a node with host services, the lab's NodePort-like and
//! docker-like DNAT, kube-proxy's and docker's own rule layouts (iptables on the iptables
//! backends, nftables on the nftables one: the rule sets the parsers' unit tests read, from
//! `tests/data/exposure/`) and loopback-only servers, the audit lists every port another host
//! can reach, with the verdict the kernel then gives, and changes nothing in the kernel.

mod support;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use serde_json::Value;
use support::daemon::{Daemon, daemon_config, http_get_ok, parse_prometheus};
use support::fixtures::{MISSION_NAME, Whitelist, mission_policy};
use support::{
    Backend, Family, Guard, Lab, POLL, Role, SETTLE_TIMEOUT, addr, backend_tests,
    check_reachability, dropped, open, ports, replies, sa,
};

/// A loopback-only TCP and UDP port: never listed.
const LOOPBACK_ONLY: u16 = 9300;
/// An SSH-like server on the node: a failsafe port.
const SSH: u16 = 22;

/// Everything the kernel holds that the audit could touch: every table of both iptables
/// flavours, the nftables ruleset and the ipsets, and x_tables' list of tables (reading a
/// legacy table that does not exist would create it).
fn kernel_state(lab: &Lab) -> String {
    let node = lab.node();
    let mut state = String::new();
    for program in [
        "iptables-legacy-save",
        "ip6tables-legacy-save",
        "iptables-nft-save",
        "ip6tables-nft-save",
    ] {
        let listing = node.exec(program, &[] as &[&str]);
        state.push_str(&format!(
            "## {program}\n{}\n",
            without_comments(&listing.stdout)
        ));
    }
    for (what, program, args) in [
        ("nft", "nft", vec!["list", "ruleset"]),
        ("ipset", "ipset", vec!["save"]),
        (
            "tables",
            "cat",
            vec!["/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"],
        ),
    ] {
        state.push_str(&format!(
            "## {what}\n{}\n",
            node.exec(program, &args).stdout
        ));
    }
    without_counters(&state)
}

fn without_comments(save: &str) -> String {
    save.lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| format!("{line}\n"))
        .collect()
}

/// `state` without packet and byte counts: stray IPv6 neighbour discovery moves them while a
/// test runs, and they are the kernel's, not a change anyone made.
fn without_counters(state: &str) -> String {
    let mut out = String::new();
    for line in state.lines() {
        let mut words: Vec<String> = line.split(' ').map(str::to_owned).collect();
        for index in 0..words.len() {
            let numeric = words
                .get(index + 1)
                .is_some_and(|word| word.parse::<u64>().is_ok());
            if (words[index] == "packets" || words[index] == "bytes") && numeric {
                words[index + 1] = "0".to_owned();
            }
            if words[index].starts_with('[')
                && words[index].ends_with(']')
                && words[index].contains(':')
            {
                words[index] = "[0:0]".to_owned();
            }
        }
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out
}

/// The lab with its standard services, an SSH-like server, loopback-only servers, and
/// kube-proxy's and docker's rule layouts in the backend's firewall mode.
fn exposed_lab(backend: Backend) -> Lab {
    let mut lab = Lab::new(backend);
    lab.serve_tcp(Role::Node, sa(addr::NODE_V4, SSH), "ssh");
    for loopback in [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ] {
        lab.serve_tcp(
            Role::Node,
            SocketAddr::new(loopback, LOOPBACK_ONLY),
            "loopback",
        );
        lab.serve_udp(
            Role::Node,
            SocketAddr::new(loopback, LOOPBACK_ONLY),
            "loopback",
        );
    }
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/exposure/");
    let read = |name: &str| {
        std::fs::read(format!("{data}{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    match backend {
        Backend::Legacy | Backend::Nft => {
            for (family, file) in [
                (Family::V4, "kube-proxy-iptables.save"),
                (Family::V4, "docker-iptables.save"),
                (Family::V6, "docker-ip6tables.save"),
            ] {
                lab.node()
                    .exec_with_stdin(
                        backend.iptables_restore(family),
                        &["--noflush"],
                        &read(file),
                    )
                    .expect_success();
            }
        }
        Backend::Nftables => {
            for file in ["kube-proxy.nft", "docker.nft"] {
                lab.node()
                    .exec_with_stdin("nft", &["-f", "-"], &read(file))
                    .expect_success();
            }
        }
    }
    lab
}

/// The ports of `exposure --json` as `via family protocol/port`, each with its entry.
fn ports_of(document: &Value) -> Vec<(String, Value)> {
    document["ports"]
        .as_array()
        .unwrap_or_else(|| panic!("no ports: {document}"))
        .iter()
        .map(|port| {
            let key = format!(
                "{} {} {}/{}",
                port["via"].as_str().unwrap_or("?"),
                port["family"].as_str().unwrap_or("?"),
                port["protocol"].as_str().unwrap_or("?"),
                port["port"]
            );
            (key, port.clone())
        })
        .collect()
}

#[track_caller]
fn entry<'p>(ports: &'p [(String, Value)], key: &str) -> &'p Value {
    ports
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, port)| port)
        .unwrap_or_else(|| {
            let keys: Vec<&str> = ports.iter().map(|(k, _)| k.as_str()).collect();
            panic!("`{key}` is not listed; listed: {keys:?}")
        })
}

/// Under the mission whitelist, as applied: NodePort 30008 is reachable from the two listed
/// sources only (and the kernel agrees), docker's and kube-proxy's published ports and the
/// host services are open to anyone (and the kernel agrees), every socket on a host address
/// is listed with its process, loopback-only ones are not, `--detailed-exitcode` says 2, and
/// the kernel holds exactly what it held before.
fn exposure_lists_every_reachable_port_with_the_kernels_verdict(backend: Backend) {
    let lab = exposed_lab(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("mission.yaml", &mission_policy());
    guard.apply();
    let before = kernel_state(&lab);

    let out = guard.run_expect(&["exposure", "--json", "--detailed-exitcode"], 2);
    let document: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    assert_eq!(document["apiVersion"], "nodeport-guard/v1");
    assert_eq!(document["kind"], "Exposure");
    assert_eq!(document["evaluatedAgainst"], "applied", "{out}");
    let ports = ports_of(&document);

    let nodeport = entry(&ports, "dnat ipv4 tcp/30008");
    assert_eq!(nodeport["reachableFrom"], "some", "{nodeport}");
    assert_eq!(
        nodeport["allowed"],
        serde_json::json!(["198.51.100.10/32", "198.51.100.12/32"])
    );
    assert!(
        nodeport["decidedBy"]
            .as_str()
            .is_some_and(|by| by.contains(MISSION_NAME)),
        "{nodeport}"
    );
    assert_eq!(
        nodeport["target"],
        format!("{}:{}", addr::NODE_V4, ports::NODEPORT_TARGET)
    );
    let kube = entry(&ports, "dnat ipv4 tcp/30080");
    assert_eq!(kube["owner"], "Service shop/web:http", "{kube}");
    assert_eq!(kube["reachableFrom"], "anyone");
    assert_eq!(
        entry(&ports, "dnat ipv4 udp/30054")["owner"],
        "Service infra/dns:dns"
    );
    for family in ["ipv4", "ipv6"] {
        let published = entry(&ports, &format!("dnat {family} tcp/{}", ports::PUBLISHED));
        assert_eq!(published["reachableFrom"], "anyone", "{published}");
        assert_eq!(
            entry(
                &ports,
                &format!("dnat {family} udp/{}", ports::NODEPORT_UDP)
            )["reachableFrom"],
            "anyone"
        );
        for (protocol, port) in [
            ("tcp", ports::NODEPORT_TARGET),
            ("tcp", ports::HOST_SERVICE),
            ("udp", ports::NODEPORT_UDP_TARGET),
        ] {
            let socket = entry(&ports, &format!("socket {family} {protocol}/{port}"));
            assert_eq!(socket["reachableFrom"], "anyone", "{socket}");
            assert!(
                socket["owner"].as_str().is_some_and(|o| !o.is_empty()),
                "{socket}"
            );
        }
    }
    let docker = ports
        .iter()
        .find(|(key, port)| key == "dnat ipv4 tcp/8000" && port["owner"].is_string())
        .map(|(_, port)| port)
        .unwrap_or_else(|| panic!("docker's published port has no container: {out}"));
    assert_eq!(docker["owner"], "container 192.0.2.2:80");
    for (key, _) in &ports {
        assert!(
            !key.ends_with(&format!("/{LOOPBACK_ONLY}")) && !key.ends_with("/5432"),
            "a loopback-only port is listed: {key}"
        );
    }
    // Ports open to anyone come first.
    let order: Vec<&str> = ports
        .iter()
        .map(|(_, port)| port["reachableFrom"].as_str().unwrap_or(""))
        .collect();
    let first_some = order
        .iter()
        .position(|r| *r != "anyone")
        .unwrap_or(order.len());
    assert!(
        order[first_some..].iter().all(|r| *r != "anyone"),
        "{order:?}"
    );

    // The table says the same in words.
    let table = guard.run_expect(&["exposure"], 0);
    assert!(
        table
            .stdout
            .contains("Judged under the policies as last applied"),
        "{table}"
    );
    assert!(
        table.stdout.contains("198.51.100.10/32, 198.51.100.12/32"),
        "{table}"
    );

    assert_eq!(kernel_state(&lab), before, "exposure changed the kernel");

    // The kernel agrees with the verdicts.
    let published = sa(addr::NODE_V4, ports::PUBLISHED);
    check_reachability(
        &lab,
        "exposure's verdicts",
        &[
            open(
                addr::CLIENT_V4[0],
                sa(addr::NODE_V4, ports::NODEPORT),
                replies::NODEPORT_TARGET,
            ),
            dropped(addr::CLIENT_V4[1], sa(addr::NODE_V4, ports::NODEPORT)),
            open(addr::CLIENT_V4[1], published, replies::CONTAINER),
            open(
                addr::CLIENT_REMOTE_V4[0],
                sa(addr::NODE_V4, ports::HOST_SERVICE),
                replies::HOST_SERVICE,
            ),
        ],
    );
    assert_eq!(kernel_state(&lab), before, "exposure changed the kernel");
}
backend_tests!(exposure_lists_every_reachable_port_with_the_kernels_verdict);

/// `exposure --json --detailed-exitcode` run expecting `code`: its document, judged under
/// `basis` (`evaluatedAgainst`), and its ports.
#[track_caller]
fn audit(guard: &Guard<'_>, code: i32, basis: &str) -> Vec<(String, Value)> {
    let out = guard.run_expect(&["exposure", "--json", "--detailed-exitcode"], code);
    let document: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    assert_eq!(document["evaluatedAgainst"], basis, "{out}");
    ports_of(&document)
}

/// Every port listed is reachable by anyone, decided by nothing of ours being in the kernel.
#[track_caller]
fn all_open_to_anyone(ports: &[(String, Value)]) {
    assert!(ports.len() >= 12, "{ports:?}");
    for (key, port) in ports {
        assert_eq!(port["reachableFrom"], "anyone", "{key}: {port}");
        assert_eq!(
            port["decidedBy"], "nothing of nodeport-guard is in the kernel",
            "{key}: {port}"
        );
    }
}

/// With a deny-all policy in the files and nothing of ours in the kernel: nothing drops
/// anything, so every port is reachable by anyone (said in words), `--detailed-exitcode` is 2,
/// and a client does reach the NodePort. Applied: every port is reachable by nobody but the
/// failsafe SSH port, `--detailed-exitcode` is 0, and the kernel agrees. After `cleanup`, and
/// when the kernel lost our rules while the state directory still records the apply (cleaned
/// by hand, a reboot): anyone again. The audit changes nothing.
fn nothing_applied_is_open_to_anyone_and_deny_all_leaves_only_failsafe_ports(backend: Backend) {
    let lab = exposed_lab(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("deny-all.yaml", nodeport_guard::fixtures::DENY_ALL);
    let before = kernel_state(&lab);
    let ports = audit(&guard, 2, "nothing");
    all_open_to_anyone(&ports);
    assert_eq!(
        entry(&ports, &format!("dnat ipv4 tcp/{}", ports::NODEPORT))["target"],
        format!("{}:{}", addr::NODE_V4, ports::NODEPORT_TARGET)
    );
    let table = guard.run_expect(&["exposure"], 0);
    assert!(
        table
            .stdout
            .starts_with("Nothing of nodeport-guard is in the kernel"),
        "{table}"
    );
    assert_eq!(kernel_state(&lab), before, "exposure changed the kernel");
    check_reachability(
        &lab,
        "nothing applied",
        &[
            open(
                addr::CLIENT_V4[1],
                sa(addr::NODE_V4, ports::NODEPORT),
                replies::NODEPORT_TARGET,
            ),
            open(
                addr::CLIENT_V4[1],
                sa(addr::NODE_V4, ports::HOST_SERVICE),
                replies::HOST_SERVICE,
            ),
        ],
    );

    guard.apply();
    let ports = audit(&guard, 0, "applied");
    for (key, port) in &ports {
        let expected = if key == &format!("socket ipv4 tcp/{SSH}") {
            "anyone"
        } else {
            "nobody"
        };
        assert_eq!(port["reachableFrom"], expected, "{key}: {port}");
    }
    assert_eq!(
        entry(&ports, &format!("socket ipv4 tcp/{SSH}"))["decidedBy"],
        "failsafe port"
    );
    assert!(ports.len() >= 12, "{ports:?}");
    check_reachability(
        &lab,
        "deny-all applied",
        &[
            open(addr::CLIENT_V4[0], sa(addr::NODE_V4, SSH), "ssh"),
            dropped(addr::CLIENT_V4[0], sa(addr::NODE_V4, ports::HOST_SERVICE)),
            dropped(addr::CLIENT_V4[0], sa(addr::NODE_V4, ports::PUBLISHED)),
            dropped(addr::CLIENT_V4[0], sa(addr::NODE_V4, ports::NODEPORT)),
        ],
    );

    // Cleaned up: nothing applied, the record gone with it.
    let record = guard.state_dir().join("applied.json");
    let recorded = std::fs::read(&record).expect("the apply's record");
    guard.cleanup();
    all_open_to_anyone(&audit(&guard, 2, "nothing"));
    // Our rules gone while the state directory still records the apply: the kernel decides.
    std::fs::write(&record, recorded).expect("the record back");
    all_open_to_anyone(&audit(&guard, 2, "nothing"));
    let table = guard.run_expect(&["exposure"], 0);
    assert!(
        table
            .stdout
            .contains("the state directory records an apply the kernel no longer holds"),
        "{table}"
    );
    check_reachability(
        &lab,
        "cleaned up",
        &[open(
            addr::CLIENT_V4[0],
            sa(addr::NODE_V4, ports::NODEPORT),
            replies::NODEPORT_TARGET,
        )],
    );
}
backend_tests!(nothing_applied_is_open_to_anyone_and_deny_all_leaves_only_failsafe_ports);

/// Deny-all applied, then another program deletes our IPv4 table (nftables; the IPv6 one
/// stays): the IPv4 ports are reachable by anyone again, as a client finds, and `exposure`
/// says so with a note, while the IPv6 ones are still judged under the policies.
#[test]
fn a_family_whose_rules_were_deleted_is_open_to_anyone() {
    support::require_kernel!();
    let lab = exposed_lab(Backend::Nftables);
    let guard = Guard::new(&lab);
    guard.write_policy("deny-all.yaml", nodeport_guard::fixtures::DENY_ALL);
    guard.apply();
    lab.node()
        .exec_ok("nft", &["delete", "table", "ip", "nodeport_guard"]);
    let out = guard.run_expect(&["exposure", "--json", "--detailed-exitcode"], 2);
    let document: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(document["evaluatedAgainst"], "applied", "{out}");
    let notes = document["notes"].to_string();
    assert!(
        notes.contains("nothing of nodeport-guard for IPv4"),
        "{out}"
    );
    let ports = ports_of(&document);
    let v4 = entry(&ports, &format!("dnat ipv4 tcp/{}", ports::NODEPORT));
    assert_eq!(v4["reachableFrom"], "anyone", "{v4}");
    let v6: Vec<&Value> = ports
        .iter()
        .filter(|(key, _)| key.contains("ipv6") && !key.ends_with(&format!("/{SSH}")))
        .map(|(_, port)| port)
        .collect();
    assert!(!v6.is_empty(), "{ports:?}");
    assert!(
        v6.iter().all(|port| port["reachableFrom"] == "nobody"),
        "{ports:?}"
    );
    check_reachability(
        &lab,
        "IPv4 table deleted",
        &[open(
            addr::CLIENT_V4[0],
            sa(addr::NODE_V4, ports::NODEPORT),
            replies::NODEPORT_TARGET,
        )],
    );
}

/// Hand-written published ports beyond one port per rule (`tests/data/exposure/handmade*`, in
/// the backend's firewall mode): a DNAT of a multiport list (an nftables anonymous set) and of
/// a range to the container, a REDIRECT of one port to the node's server and of a list (a
/// named set) to themselves. Each port is listed apart, with the kernel's verdict: a client
/// reaches the container and the redirected server.
fn port_lists_ranges_and_redirects_are_listed(backend: Backend) {
    let lab = exposed_lab(backend);
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/exposure/");
    match backend {
        Backend::Legacy | Backend::Nft => {
            let save = std::fs::read(format!("{data}handmade-iptables.save")).expect("rules");
            lab.node()
                .exec_with_stdin(backend.iptables_restore(Family::V4), &["--noflush"], &save)
                .expect_success();
        }
        Backend::Nftables => {
            let nft = std::fs::read(format!("{data}handmade.nft")).expect("rules");
            lab.node()
                .exec_with_stdin("nft", &["-f", "-"], &nft)
                .expect_success();
        }
    }
    let guard = Guard::new(&lab);
    let out = guard.run_expect(&["exposure", "--json", "--detailed-exitcode"], 2);
    for port in ["32001", "32010", "30014", "31053"] {
        assert!(!out.stderr.contains(port), "a warning about {port}: {out}");
    }
    let document: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    let ports = ports_of(&document);
    let container = format!("{}:{}", addr::POD_V4, ports::CONTAINER);
    for port in [32001, 32002, 32010, 32011] {
        let published = entry(&ports, &format!("dnat ipv4 tcp/{port}"));
        assert_eq!(published["target"], container, "{published}");
        assert_eq!(published["reachableFrom"], "anyone", "{published}");
    }
    assert_eq!(
        entry(&ports, "dnat ipv4 tcp/30014")["target"],
        format!(":{}", ports::NODEPORT_TARGET)
    );
    for port in [31053, 31054] {
        assert_eq!(
            entry(&ports, &format!("dnat ipv4 udp/{port}"))["target"],
            format!(":{port}")
        );
    }
    let table = guard.run_expect(&["exposure"], 0);
    assert!(
        table
            .stdout
            .contains(&format!("REDIRECT to :{}", ports::NODEPORT_TARGET)),
        "{table}"
    );
    check_reachability(
        &lab,
        "hand-written published ports",
        &[
            open(
                addr::CLIENT_V4[0],
                sa(addr::NODE_V4, 32002),
                replies::CONTAINER,
            ),
            open(
                addr::CLIENT_V4[0],
                sa(addr::NODE_V4, 32011),
                replies::CONTAINER,
            ),
            open(
                addr::CLIENT_V4[0],
                sa(addr::NODE_V4, 30014),
                replies::NODEPORT_TARGET,
            ),
        ],
    );
}
backend_tests!(port_lists_ranges_and_redirects_are_listed);

/// `plan` warns when a change leaves a published port that was guarded open to anyone: here
/// the mission whitelist, applied, is replaced by the same policy on another port. The
/// published ports that were open before (docker's, kube-proxy's) are not named.
fn plan_warns_when_a_guarded_published_port_would_open(backend: Backend) {
    let lab = exposed_lab(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("mission.yaml", &mission_policy());
    guard.apply();
    guard.write_policy(
        "mission.yaml",
        &Whitelist::mission().port(ports::HOST_SERVICE).yaml(),
    );
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 2, "{out}");
    let warning = format!(
        "warning: published port tcp/{} (IPv4, DNAT to {}:{}) was guarded and would be open to anyone",
        ports::NODEPORT,
        addr::NODE_V4,
        ports::NODEPORT_TARGET
    );
    assert!(out.stdout.contains(&warning), "{out}");
    // The IPv6 NodePort was guarded too: nobody could reach it (the whitelist lists IPv4
    // sources only).
    assert!(
        out.stdout.contains(&format!(
            "warning: published port tcp/{} (IPv6, DNAT to [{}]:{})",
            ports::NODEPORT,
            addr::NODE_V6,
            ports::NODEPORT_TARGET
        )),
        "{out}"
    );
    assert_eq!(
        out.stdout.matches("was guarded and would be open").count(),
        2,
        "only the NodePort was guarded: {out}"
    );
}
backend_tests!(plan_warns_when_a_guarded_published_port_would_open);

/// The daemon exports `nodeport_guard_exposed_ports{reachable,via}` after it applies: under
/// the mission whitelist, the IPv4 NodePort is reachable by some, the IPv6 one (no IPv6 source
/// listed) by nobody, the other published ports and every socket by anyone.
fn daemon_exports_the_exposed_ports(backend: Backend) {
    let lab = exposed_lab(backend);
    let metrics: SocketAddr = "127.0.0.1:9808".parse().expect("an address");
    let guard = Guard::with_config(
        &lab,
        &daemon_config("1h", &format!("metricsAddress: {metrics}\n")),
    );
    guard.write_policy("mission.yaml", &mission_policy());
    let _daemon = Daemon::start(&guard);
    let series = |reachable: &str, via: &str| {
        format!("nodeport_guard_exposed_ports{{reachable=\"{reachable}\",via=\"{via}\"}}")
    };
    let deadline = std::time::Instant::now() + SETTLE_TIMEOUT;
    let samples = loop {
        let response = http_get_ok(lab.node(), metrics, "/metrics");
        let samples = parse_prometheus(&response.body)
            .unwrap_or_else(|e| panic!("invalid /metrics ({e}):\n{}", response.body));
        if samples.contains_key(&series("some", "dnat")) {
            break samples;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exposed ports in /metrics:\n{}",
            response.body
        );
        std::thread::sleep(POLL);
    };
    let value = |reachable: &str, via: &str| {
        samples
            .get(&series(reachable, via))
            .copied()
            .unwrap_or_else(|| panic!("no {} sample", series(reachable, via)))
    };
    assert_eq!(value("some", "dnat"), 1.0);
    assert_eq!(value("nobody", "dnat"), 1.0);
    assert!(value("anyone", "dnat") >= 5.0, "{samples:?}");
    assert!(value("anyone", "socket") >= 6.0, "{samples:?}");
    assert_eq!(value("some", "socket"), 0.0);
    assert_eq!(value("nobody", "socket"), 0.0);
}
backend_tests!(daemon_exports_the_exposed_ports);
