//! Realistic generated policy sets for the benchmarks: mostly small whitelists, a few huge ones,
//! GlobalNetworkSets selected by label, both families.

#![allow(dead_code, missing_docs)]

use std::fmt::Write as _;

pub mod heap;

/// A deterministic pseudo-random sequence (xorshift), so every run measures the same input.
pub struct Sequence(u64);

impl Sequence {
    pub fn new(seed: u64) -> Self {
        Sequence(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// YAML documents of `policies` policies holding about `cidrs` CIDRs in all: 90 % of the
/// policies whitelist 1-4 sources, the rest share the bulk through large `nets` lists and
/// GlobalNetworkSets.
pub fn policy_set(policies: usize, cidrs: usize) -> String {
    let mut rng = Sequence::new(0x5eed ^ policies as u64 ^ (cidrs as u64) << 20);
    let mut text = String::new();
    let mut written = 0usize;
    let large = (policies / 10).max(1);
    let per_large = cidrs.saturating_sub(policies * 2) / (large * 2);
    let v4 = |rng: &mut Sequence| {
        let n = rng.next();
        format!(
            "{}.{}.{}.0/24",
            10 + (n % 100),
            (n >> 8) % 256,
            (n >> 16) % 256
        )
    };
    for index in 0..policies {
        let is_large = index % 10 == 0;
        let port = 30000 + (index % 2768);
        let _ = write!(
            text,
            "---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: policy-{index:05}\nspec:\n  order: {}\n  preDNAT: true\n  applyOnForward: true\n  selector: all()\n  ingress:\n",
            index % 1000
        );
        let count = if is_large {
            per_large.max(1)
        } else {
            1 + rng.below(4) as usize
        };
        let nets: Vec<String> = (0..count).map(|_| v4(&mut rng)).collect();
        written += count;
        let _ = write!(
            text,
            "  - action: Allow\n    protocol: TCP\n    source:\n      nets: [{}]\n    destination:\n      ports: [{port}]\n",
            nets.join(", ")
        );
        if is_large {
            // The network set carries as many again, selected by label.
            let _ = write!(
                text,
                "  - action: Allow\n    protocol: TCP\n    source:\n      selector: set == 'set-{index}'\n    destination:\n      ports: [{port}]\n"
            );
        }
        let six = format!("\"2001:db8:{:x}::/48\"", index % 65536);
        let _ = write!(
            text,
            "  - action: Allow\n    protocol: TCP\n    source:\n      nets: [{six}]\n    destination:\n      ports: [{port}]\n  - action: Deny\n    protocol: TCP\n    destination:\n      ports: [{port}]\n"
        );
        if is_large {
            let nets: Vec<String> = (0..per_large.max(1)).map(|_| v4(&mut rng)).collect();
            written += nets.len();
            let _ = write!(
                text,
                "---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: set-{index}\n  labels: {{set: set-{index}}}\nspec:\n  nets: [{}]\n",
                nets.join(", ")
            );
        }
    }
    let _ = written;
    text
}

/// Adds `extra` as the first net of the first `nets:` list of policy `name` (or takes it out
/// again).
pub fn toggle_net(text: &str, name: &str, extra: &str, on: bool) -> String {
    let marker = format!("name: {name}\n");
    let start = text.find(&marker).expect("policy in the generated set");
    let end = text[start..]
        .find("\n---\n")
        .map_or(text.len(), |offset| start + offset);
    let document = &text[start..end];
    let with = format!("nets: [{extra}, ");
    let changed = if on {
        document.replacen("nets: [", &with, 1)
    } else {
        document.replacen(&with, "nets: [", 1)
    };
    format!("{}{changed}{}", &text[..start], &text[end..])
}

/// The policy the incremental figures change: the one in the middle with an inline whitelist
/// (every tenth policy, the one before it, keeps its whitelist in a set).
pub fn inline_policy(policies: usize) -> String {
    format!("policy-{:05}", policies / 2 / 10 * 10 + 1)
}

/// A node `node1` with one interface, `eth0`, holding 198.51.100.1 and 2001:db8:1::1: the
/// addresses the impact trace sends its packets to.
pub fn host_with_eth0() -> nodeport_guard::facts::HostFacts {
    nodeport_guard::facts::HostFacts {
        interfaces: vec![nodeport_guard::facts::Interface {
            name: "eth0".into(),
            addresses: ["198.51.100.1", "2001:db8:1::1"]
                .iter()
                .filter_map(|a| a.parse().ok())
                .collect(),
        }],
        ..nodeport_guard::facts::HostFacts::minimal("node1")
    }
}

/// `text` parsed and validated as one file (panics on a diagnostic: generated input is valid).
pub fn load(text: &str) -> nodeport_guard::model::Model {
    use nodeport_guard::source::{SourceFile, Sources};
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("generated.yaml", text.to_owned()));
    let (resources, diagnostics) = nodeport_guard::load::parse_file(id, sources.get(id));
    assert!(diagnostics.is_empty(), "generated input must parse");
    let resources: Vec<_> = resources.into_iter().map(|r| (id, r)).collect();
    let (model, diagnostics) = nodeport_guard::validate::validate(&sources, &resources);
    assert!(
        !diagnostics.iter().any(|d| d.is_error()),
        "generated input must validate"
    );
    model
}
