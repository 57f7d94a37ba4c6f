//! The policies the scenarios load.

use std::net::Ipv4Addr;

use crate::NODEPORT;
use crate::common;

/// The generated policy set of the compile benchmark: `policies` policies, 10 CIDRs each on
/// average, a tenth of them large (sets), both families.
pub(crate) fn bulk(policies: usize) -> String {
    common::policy_set(policies, policies * 10)
}

/// Policies whose render holds at least `rules` kernel rules.
pub(crate) fn policies_for_rules(rules: usize) -> usize {
    use nodeport_guard::compile::compile;
    use nodeport_guard::config::Config;
    use nodeport_guard::facts::HostFacts;
    use nodeport_guard::load::parse_file;
    use nodeport_guard::source::{SourceFile, Sources};
    let mut policies = 10;
    loop {
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("g.yaml", bulk(policies)));
        let (resources, _) = parse_file(id, sources.get(id));
        let resources: Vec<_> = resources.into_iter().map(|r| (id, r)).collect();
        let (model, _) = nodeport_guard::validate::validate(&sources, &resources);
        let compiled = compile(&model, &Config::default(), &HostFacts::minimal("node1"));
        let count: usize = compiled
            .ruleset
            .chains()
            .map(|(_, _, c)| c.rules.len())
            .sum();
        if count >= rules {
            return policies;
        }
        policies += (policies / 10).max(1);
    }
}

/// One policy guarding the NodePort: TCP from the whitelist allowed, everything else to the
/// port denied. (Not the mission fixture: its Allow is scoped to TCP to the NodePort and its
/// `order` is 0, and changing the rules measured would change the figures.)
pub(crate) fn guard_policy(nets: &[String]) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: a-guard\nspec:\n  order: 0\n  preDNAT: true\n  applyOnForward: true\n  selector: all()\n  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      nets: [{}]\n    destination:\n      ports: [{NODEPORT}]\n  - action: Deny\n    protocol: TCP\n    destination:\n      ports: [{NODEPORT}]\n",
        nets.join(", ")
    )
}

/// `count` disjoint IPv4 CIDRs with eight prefix lengths (/24 to /32, one per /24 block, so
/// no set merges them), then the client's address, last.
pub(crate) fn whitelist(count: usize, client: Ipv4Addr) -> Vec<String> {
    const LENGTHS: [u32; 8] = [24, 25, 26, 27, 28, 29, 30, 32];
    let mut nets: Vec<String> = (0..count.saturating_sub(1))
        .map(|i| {
            let base = (11u32 << 24) + (i as u32) * 256;
            let length = LENGTHS[i % LENGTHS.len()];
            format!("{}/{length}", Ipv4Addr::from(base))
        })
        .collect();
    nets.push(format!("{client}/32"));
    nets
}

/// `count` host endpoints of this node, on interfaces `d00`, `d01`… and, last by name, the
/// client's `eth0`, with a normal policy letting everything in (an endpoint without one drops
/// everything, as in Calico). Interfaces that do not exist are matched by name all the same.
pub(crate) fn many_endpoints(count: usize) -> String {
    let mut out = String::new();
    let names = (0..count.saturating_sub(1))
        .map(|i| format!("d{i:02}"))
        .chain(["eth0".to_owned()]);
    for name in names {
        out.push_str(&format!(
            "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: node1-{name}\n  labels: {{role: edge}}\nspec:\n  node: node1\n  interfaceName: {name}\n---\n"
        ));
    }
    out.push_str("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: b-edge-in\nspec:\n  order: 10\n  selector: role == 'edge'\n  ingress:\n  - action: Allow\n");
    out
}
