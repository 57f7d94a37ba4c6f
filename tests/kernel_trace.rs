//! Kernel tests of `trace` and of what `plan` says a change cuts off: the
//! trace of a packet, run in the node namespace on the files `apply` used,
//! names the verdict, the rule and the NFLOG prefix the kernel then shows
//! for that packet, on the paths the differential test does not generate
//! (normal policy on an explicit host endpoint of one interface).

mod support;

use std::net::{IpAddr, SocketAddr};

use support::fixtures::{MISSION_NAME, Whitelist};
use support::{
    Backend, Guard, Lab, NflogCapture, addr, backend_tests, check_reachability, dropped, open,
    ports, replies, sa,
};

/// How long to wait for an NFLOG message.
const NFLOG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// `trace --json` of a TCP packet from `src` to `dst`, in the node namespace,
/// with `extra` arguments.
fn trace(guard: &Guard<'_>, src: IpAddr, dst: SocketAddr, extra: &[&str]) -> serde_json::Value {
    let src = src.to_string();
    let dst_ip = dst.ip().to_string();
    let dport = dst.port().to_string();
    let mut args = vec![
        "trace", "--src", &src, "--dst", &dst_ip, "--dport", &dport, "--json",
    ];
    args.extend_from_slice(extra);
    let out = guard.run_expect(&args, 0);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("trace --json: {e}\n{out}"))
}

/// Asserts that the kernel logs exactly the prefix the trace named for a
/// dropped packet from `src`.
fn assert_logged_as_traced(log: &NflogCapture, src: IpAddr, traced: &serde_json::Value) {
    assert_eq!(traced["verdict"]["outcome"], "dropped", "{traced:#}");
    let prefix = traced["verdict"]["nflogPrefix"]
        .as_str()
        .unwrap_or_else(|| panic!("no prefix in the trace: {traced:#}"));
    let event = log
        .wait_for(NFLOG_TIMEOUT, |e| e.src == Some(src))
        .unwrap_or_else(|| panic!("no NFLOG message for {src}\n{}", log.diagnostics()));
    assert_eq!(event.prefix, prefix, "{event}");
}

/// The mission whitelist: `trace` says a listed source is allowed by rule 0
/// and an unlisted one dropped by rule 1 with `DPI1|allow-cluster-nodeport-only`;
/// the kernel lets the first through and drops and logs the second with that
/// prefix. A port the policy does not name is not ours to decide, and open.
fn trace_of_the_whitelist_agrees_with_the_kernel(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    guard.write_policy("nodeport.yaml", &Whitelist::mission().yaml());
    guard.apply();
    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    let host_service = sa(addr::NODE_V4, ports::HOST_SERVICE);
    let (listed, unlisted) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);

    let allowed = trace(&guard, listed.into(), nodeport, &[]);
    assert_eq!(allowed["verdict"]["outcome"], "allowed", "{allowed:#}");
    assert_eq!(allowed["verdict"]["rule"], 0);
    let denied = trace(&guard, unlisted.into(), nodeport, &[]);
    assert_eq!(denied["verdict"]["policy"], MISSION_NAME);
    assert_eq!(denied["verdict"]["rule"], 1);
    let other_port = trace(&guard, unlisted.into(), host_service, &[]);
    assert_eq!(
        other_port["verdict"]["outcome"], "notOurs",
        "{other_port:#}"
    );

    check_reachability(
        &lab,
        "whitelist as traced",
        &[
            open(listed, nodeport, replies::NODEPORT_TARGET),
            dropped(unlisted, nodeport),
            open(unlisted, host_service, replies::HOST_SERVICE),
        ],
    );
    assert_logged_as_traced(&log, unlisted.into(), &denied);
}
backend_tests!(trace_of_the_whitelist_agrees_with_the_kernel);

/// A normal ingress policy on an explicit host endpoint of `eth0`, which
/// allows only the host service from one source: `trace --iface eth0` says
/// another source is dropped at the end of tier `default` (`DPI|default`),
/// the listed one allowed, SSH allowed as a failsafe port, and the kernel
/// agrees, logging the drop with the traced prefix.
fn trace_of_normal_policy_on_an_interface_agrees_with_the_kernel(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let (listed, unlisted) = (addr::CLIENT_V4[0], addr::CLIENT_V4[1]);
    guard.write_policy(
        "edge.yaml",
        &format!(
            r"apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: node1-eth0
  labels: {{role: edge}}
spec:
  node: node1
  interfaceName: eth0
  expectedIPs: [{node}]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: edge-host-service
spec:
  selector: role == 'edge'
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: TCP
      source: {{nets: [{listed}/32]}}
      destination: {{ports: [{port}]}}
",
            node = addr::NODE_V4,
            port = ports::HOST_SERVICE,
        ),
    );
    guard.apply();
    let host_service = sa(addr::NODE_V4, ports::HOST_SERVICE);
    let eth0 = ["--iface", "eth0"];

    let allowed = trace(&guard, listed.into(), host_service, &eth0);
    assert_eq!(allowed["verdict"]["outcome"], "allowed", "{allowed:#}");
    assert_eq!(allowed["verdict"]["at"], "filter INPUT");
    let denied = trace(&guard, unlisted.into(), host_service, &eth0);
    assert_eq!(denied["verdict"]["tier"], "default", "{denied:#}");
    assert_eq!(denied["verdict"]["nflogPrefix"], "DPI|default");
    // Without --iface, the interface holding the destination address is assumed: eth0.
    let assumed = trace(&guard, unlisted.into(), host_service, &[]);
    assert_eq!(assumed["verdict"], denied["verdict"], "{assumed:#}");
    assert!(
        assumed["notes"]
            .to_string()
            .contains("interface eth0 assumed"),
        "{assumed:#}"
    );
    let ssh = trace(&guard, unlisted.into(), sa(addr::NODE_V4, 22), &eth0);
    assert!(
        ssh["verdict"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("failsafe")),
        "{ssh:#}"
    );

    check_reachability(
        &lab,
        "normal policy as traced",
        &[
            open(listed, host_service, replies::HOST_SERVICE),
            dropped(unlisted, host_service),
        ],
    );
    assert_logged_as_traced(&log, unlisted.into(), &denied);
}
backend_tests!(trace_of_normal_policy_on_an_interface_agrees_with_the_kernel);

/// After the mission is applied, a change that takes 198.51.100.10 off the
/// whitelist makes `plan` (and `apply`, before it asks) say in words that
/// this source's connections to the NodePort were allowed and will be
/// dropped by rule 1; a change that adds a source says nothing of the kind.
fn plan_names_the_sources_a_change_cuts_off(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("nodeport.yaml", &Whitelist::mission().yaml());
    guard.apply();

    guard.write_policy(
        "nodeport.yaml",
        &Whitelist::mission().nets(["198.51.100.12/32"]).yaml(),
    );
    let plan = guard.run_expect(&["plan"], 0);
    let expected = format!(
        "198.51.100.10 → tcp/{} was allowed, will be dropped by rule 1 of policy {MISSION_NAME} (tier default)",
        ports::NODEPORT
    );
    assert!(plan.stderr.contains(&expected), "{plan}");
    assert!(!plan.stderr.contains("198.51.100.12 →"), "{plan}");
    let json = guard.run_expect(&["plan", "--json"], 0);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).expect("plan --json");
    assert_eq!(value["cutOff"][0]["src"], "198.51.100.10", "{value:#}");

    guard.write_policy(
        "nodeport.yaml",
        &Whitelist::mission()
            .nets(["198.51.100.10/32", "198.51.100.12/32", "198.51.100.13/32"])
            .yaml(),
    );
    let wider = guard.run_expect(&["plan"], 0);
    assert!(!wider.stderr.contains("cuts off"), "{wider}");
}
backend_tests!(plan_names_the_sources_a_change_cuts_off);
