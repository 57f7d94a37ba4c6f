//! Kernel tests of tiers, from Calico's own documentation of tiered host protection, adapted to
//! the lab's TEST-NET addresses and ports (each test names its page): several tiers, a `Pass`
//! rule, `defaultAction: Pass`, tiers with no policy for the endpoint, pre-DNAT tiers (no
//! end-of-tier drop) and the end-of-tier drop's NFLOG prefix `DPI|<tier>`. Then removing a
//! `Tier` that still has policies: `plan` and `apply` refuse it, and the kernel keeps the
//! rules. On iptables-legacy, iptables-nft and native nftables.

mod support;

use std::net::IpAddr;
use std::time::Duration;

use support::{
    Backend, Guard, Lab, NflogCapture, addr, backend_tests, check_reachability, dropped, open,
    ports, replies, sa,
};

/// How long to wait for an NFLOG message of a rule with `--nflog-threshold 1`.
const NFLOG_TIMEOUT: Duration = Duration::from_secs(3);

/// The lab node's `eth0` (the clients' side) as a host endpoint with `labels` (a flow
/// mapping), as Calico's docs create `my-host-eth0` / `node1-eth0`.
fn host_endpoint(labels: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: node1-eth0
  labels: {labels}
spec:
  interfaceName: eth0
  node: node1
  expectedIPs: ['{node}']
",
        node = addr::NODE_V4
    )
}

/// Waits for the NFLOG message of `src`'s first packet to `dport` and checks its prefix.
#[track_caller]
fn expect_logged(log: &NflogCapture, src: impl Into<IpAddr>, dport: u16, prefix: &str) {
    let src = src.into();
    let event = log
        .wait_for(NFLOG_TIMEOUT, |e| {
            e.src == Some(src) && e.dport == Some(dport)
        })
        .unwrap_or_else(|| panic!("no NFLOG message for {src}\n{}", log.diagnostics()));
    assert_eq!(event.prefix, prefix, "{event}");
}

/// "Protect hosts and VMs" (docs.tigera.io/calico/3.30/network-policy/hosts/protect-hosts,
/// tigera/docs `calico_versioned_docs/version-3.30/network-policy/hosts/protect-hosts.mdx`)
/// with its policy in the `security` tier of "Get started with policy tiers" ("Create a
/// tier", order 300; `calico/network-policy/policy-tiers/tiered-policy.mdx`). The
/// management CIDR becomes the on-link clients' 198.51.100.0/24, SSH (a failsafe port here
/// as in Calico) the lab's host service, the kubelet port the NodePort's local target; the
/// egress rules (etcd, DNS, DHCP) become one Allow, as the lab's probes need no outbound
/// connection.
///
/// As documented: the management network reaches the host service, the other network does
/// not and is dropped at the end of tier `security` (`DPI|security`: the tier's policy
/// selected the endpoint and decided nothing, and a tier ends in Deny); everyone reaches the
/// kubelet-like port. `plan` and `status` name the policy's tier.
fn docs_protect_hosts_in_a_security_tier(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let policies = format!(
        "apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: security
spec:
  order: 300
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: security.k8s-worker
spec:
  tier: security
  selector: \"role == 'k8s-worker'\"
  order: 0
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets:
          - '{management}'
      destination:
        ports: [{ssh}]
    - action: Allow
      protocol: ICMP
    - action: Allow
      protocol: TCP
      destination:
        ports: [{kubelet}]
  egress:
    - action: Allow
---
{endpoint}",
        management = addr::CLIENT_NET_V4,
        ssh = ports::HOST_SERVICE,
        kubelet = ports::NODEPORT_TARGET,
        endpoint = host_endpoint("{role: k8s-worker, environment: production}"),
    );
    guard.write_policy("protect-hosts.yaml", &policies);
    // `plan` and `status` name the tier.
    let plan = guard.run(&["plan"]);
    assert!(
        plan.stdout
            .contains("ingress rules of policy `security.k8s-worker` (tier security)"),
        "{plan}"
    );
    guard.apply();
    let status = guard.run_expect(&["status"], 0).stdout;
    assert!(
        status.contains("security.k8s-worker (tier security)"),
        "{status}"
    );

    let (management, outside) = (addr::CLIENT_V4[0], addr::CLIENT_REMOTE_V4[0]);
    let node = |port| sa(addr::NODE_V4, port);
    check_reachability(
        &lab,
        "protect hosts in tier security",
        &[
            open(management, node(ports::HOST_SERVICE), replies::HOST_SERVICE),
            dropped(outside, node(ports::HOST_SERVICE)),
            open(
                outside,
                node(ports::NODEPORT_TARGET),
                replies::NODEPORT_TARGET,
            ),
        ],
    );
    expect_logged(&log, outside, ports::HOST_SERVICE, "DPI|security");
}
backend_tests!(docs_protect_hosts_in_a_security_tier);

/// "Get started with policy tiers", "Pass action rule example" and "Pass default action
/// tier example" (tigera/docs `calico/network-policy/policy-tiers/tiered-policy.mdx`): the
/// DevOps policy `devops.stage-env` in tier `devops` denies what does not come from `env ==
/// "stage"` and passes the rest on; the application's policy in `default` then decides.
/// Here the host endpoint is the stage endpoint, the remote clients' network a
/// GlobalNetworkSet labelled `env: prod`, and the application allows one on-link client.
///
/// As documented, in three variants: with the Pass rule, the prod network is denied by the
/// DevOps policy (`DPI0|devops.stage-env`), the rest goes on to `default`, where the allowed
/// client connects and the other is dropped at the default tier's end (`DPI|default`).
/// Without the Pass rule but with `defaultAction: Pass`, the same. With neither, the tier's
/// implicit default deny drops everyone (`DPI|devops`).
fn docs_pass_rule_and_pass_default_action(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let (allowed, other, prod) = (
        addr::CLIENT_V4[0],
        addr::CLIENT_V4[1],
        addr::CLIENT_REMOTE_V4[0],
    );
    let policies = |default_action: &str, pass_rule: bool| {
        let pass = if pass_rule {
            "    - action: Pass\n"
        } else {
            ""
        };
        format!(
            "apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: devops
spec:
  order: 300
  defaultAction: {default_action}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: devops.stage-env
spec:
  tier: devops
  order: 255
  selector: env == \"stage\"
  ingress:
    - action: Deny
      source:
        selector: env != \"stage\"
{pass}  egress:
    - action: Deny
      destination:
        selector: env != \"stage\"
{pass}  types:
    - Ingress
    - Egress
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata:
  name: prod-clients
  labels: {{env: prod}}
spec:
  nets: ['{prod_net}']
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: application
spec:
  selector: env == \"stage\"
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: ['{allowed}/32']
  egress:
    - action: Allow
---
{endpoint}",
            prod_net = addr::CLIENT_REMOTE_NET_V4,
            endpoint = host_endpoint("{env: stage}"),
        )
    };
    let service = sa(addr::NODE_V4, ports::HOST_SERVICE);

    for (context, default_action, pass_rule) in [
        ("a Pass rule", "Deny", true),
        ("defaultAction Pass", "Pass", false),
    ] {
        guard.write_policy("tiers.yaml", &policies(default_action, pass_rule));
        guard.apply();
        check_reachability(
            &lab,
            context,
            &[
                open(allowed, service, replies::HOST_SERVICE),
                dropped(other, service),
                dropped(prod, service),
            ],
        );
    }
    expect_logged(&log, prod, ports::HOST_SERVICE, "DPI0|devops.stage-env");
    expect_logged(&log, other, ports::HOST_SERVICE, "DPI|default");

    // Neither: the implicit default deny at the end of tier `devops`.
    guard.write_policy("tiers.yaml", &policies("Deny", false));
    guard.apply();
    check_reachability(
        &lab,
        "the implicit default deny",
        &[dropped(allowed, service), dropped(prod, service)],
    );
    expect_logged(&log, allowed, ports::HOST_SERVICE, "DPI|devops");
    expect_logged(&log, prod, ports::HOST_SERVICE, "DPI0|devops.stage-env");
}
backend_tests!(docs_pass_rule_and_pass_default_action);

/// "Get started with policy tiers", "Policy endpoint matching across tiers"
/// (tigera/docs `calico/network-policy/policy-tiers/tiered-policy.mdx`): policy D in tier
/// `security` passes; tier `platform` has no policy that selects the endpoint, so it is
/// skipped, its end-of-tier deny included; the application tier (`default`) decides, with
/// policy J. A fourth tier, `empty`, has no policies at all.
///
/// As documented: the client policy J allows connects; the other is dropped at the end of
/// `default` (`DPI|default`), not at the end of `platform` or `empty`, which it passed
/// through.
fn docs_tiers_that_select_nothing_are_skipped(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let (allowed, other) = (addr::CLIENT_V4[0], addr::CLIENT_REMOTE_V4[0]);
    let tier = |name: &str, order: u32| {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: {name}\nspec:\n  order: {order}\n---\n"
        )
    };
    let policies = format!(
        "{security}{platform}{empty}apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: security.policy-d
spec:
  tier: security
  selector: role == 'app'
  ingress:
    - action: Pass
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: platform.policy-g
spec:
  tier: platform
  selector: role == 'database'
  ingress:
    - action: Allow
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: policy-j
spec:
  selector: role == 'app'
  ingress:
    - action: Allow
      source:
        nets: ['{allowed}/32']
---
{endpoint}",
        security = tier("security", 100),
        platform = tier("platform", 200),
        empty = tier("empty", 300),
        endpoint = host_endpoint("{role: app}"),
    );
    guard.write_policy("tiers.yaml", &policies);
    let validate = guard.run_expect(&["validate"], 0).stdout;
    assert!(validate.contains("3 tiers"), "{validate}");
    guard.apply();

    let service = sa(addr::NODE_V4, ports::HOST_SERVICE);
    check_reachability(
        &lab,
        "tiers that select nothing",
        &[
            open(allowed, service, replies::HOST_SERVICE),
            dropped(other, service),
        ],
    );
    expect_logged(&log, other, ports::HOST_SERVICE, "DPI|default");
}
backend_tests!(docs_tiers_that_select_nothing_are_skipped);

/// "Apply policy to Kubernetes node ports" (tigera/docs
/// `calico/network-policy/services/kubernetes-node-ports.mdx`: `allow-cluster-internal-ingress-only`,
/// `allow-nodeport`, both pre-DNAT) behind a pre-DNAT `security` tier whose one policy denies
/// a blocked client, as `policies/tiered-host-protection.yaml` does. The cluster's nets become
/// the on-link 198.51.100.0/24, port 31852 the lab's NodePort, and the policies select every
/// host endpoint (the node's implicit one). "Pre-DNAT policy" (docs reference
/// `host-endpoints/pre-dnat`): such tiers have no end-of-tier drop, whatever their
/// `defaultAction`.
///
/// As documented: the blocked client is denied by the security tier (`DPI0|security.blocked`);
/// another remote client, which the security tier (defaultAction Deny) does not decide, goes on
/// to `default`: it reaches the NodePort (`allow-nodeport`, order 10) and not the host service
/// (`allow-cluster-internal-ingress-only`'s Deny, `DPI1|…`); the cluster's clients reach both.
fn docs_pre_dnat_tiers_have_no_end_of_tier_drop(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let log = NflogCapture::start(lab.node(), 1);
    let (internal, remote, blocked) = (
        addr::CLIENT_V4[0],
        addr::CLIENT_REMOTE_V4[0],
        addr::CLIENT_REMOTE_V4[1],
    );
    let policies = format!(
        "apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: security
spec:
  order: 100
  defaultAction: Deny
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: security.blocked
spec:
  tier: security
  preDNAT: true
  applyOnForward: true
  selector: has(kubernetes.io/hostname)
  ingress:
    - action: Deny
      source:
        nets: ['{blocked}/32']
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: allow-cluster-internal-ingress-only
spec:
  order: 20
  preDNAT: true
  applyOnForward: true
  ingress:
    - action: Allow
      source:
        nets: ['{cluster}']
    - action: Deny
  selector: has(kubernetes.io/hostname)
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: allow-nodeport
spec:
  preDNAT: true
  applyOnForward: true
  order: 10
  ingress:
    - action: Allow
      protocol: TCP
      destination:
        ports: [{nodeport}]
  selector: has(kubernetes.io/hostname)
",
        cluster = addr::CLIENT_NET_V4,
        nodeport = ports::NODEPORT,
    );
    guard.write_policy("node-ports.yaml", &policies);
    guard.apply();

    let node = |port| sa(addr::NODE_V4, port);
    let (nodeport, service) = (node(ports::NODEPORT), node(ports::HOST_SERVICE));
    check_reachability(
        &lab,
        "pre-DNAT tiers",
        &[
            open(internal, nodeport, replies::NODEPORT_TARGET),
            open(internal, service, replies::HOST_SERVICE),
            open(remote, nodeport, replies::NODEPORT_TARGET),
            dropped(remote, service),
            dropped(blocked, nodeport),
        ],
    );
    expect_logged(&log, blocked, ports::NODEPORT, "DPI0|security.blocked");
    expect_logged(
        &log,
        remote,
        ports::HOST_SERVICE,
        "DPI1|allow-cluster-internal-ingress-only",
    );
}
backend_tests!(docs_pre_dnat_tiers_have_no_end_of_tier_drop);

/// Calico refuses to delete a tier that still has policies ("Cannot delete a non-empty
/// tier", clientv3 `tiers.Delete`). Here, removing the `Tier` file while a policy is still in
/// the tier makes `plan` and `apply` fail, naming the policy's `tier:` by file, line and
/// column; the kernel keeps the rules it had (the tier still drops).
fn removing_a_tier_that_still_has_policies_is_refused(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let tier = "apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: security
spec:
  order: 100
";
    let policy = format!(
        "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: security.gate
spec:
  tier: security
  selector: has(kubernetes.io/hostname)
  ingress:
    - action: Deny
      protocol: TCP
      source:
        nets: ['{}/32']
      destination:
        ports: [{}]
    - action: Pass
",
        addr::CLIENT_V4[1],
        ports::HOST_SERVICE
    );
    guard.write_policy("tier.yaml", tier);
    guard.write_policy("gate.yaml", &policy);
    guard.apply();
    let before = guard.snapshot();

    guard.remove_policy("tier.yaml");
    let (code, plan) = guard.plan_detailed();
    assert_eq!(code, 1, "{plan}");
    assert!(
        plan.stderr.contains(
            "gate.yaml:6:9: error: the policy `security.gate` is in tier `security`, which no `Tier` of the policy files declares"
        ),
        "{plan}"
    );
    assert!(
        plan.stderr
            .contains("help: add a `kind: Tier` named `security`"),
        "{plan}"
    );
    let apply = guard.run_expect(&["apply", "--yes"], 1);
    assert!(apply.stderr.contains("gate.yaml:6:9"), "{apply}");
    support::assert_same_state(&before, &guard.snapshot(), "after the refused apply");
    let service = sa(addr::NODE_V4, ports::HOST_SERVICE);
    check_reachability(
        &lab,
        "the tier's rules stay",
        &[
            open(addr::CLIENT_V4[0], service, replies::HOST_SERVICE),
            dropped(addr::CLIENT_V4[1], service),
        ],
    );
}
backend_tests!(removing_a_tier_that_still_has_policies_is_refused);
