//! Rules are rendered in the kernel's own spelling: every rule `render` prints comes back from
//! `iptables-save` (iptables-legacy, iptables-nft) or `nft list table` (nftables) byte for byte,
//! counters aside. So a plan's diff of a changed rule shows only what changed, never the same
//! rule spelled twice. Checked for every example policy and for one policy with every shape the
//! compiler writes, on all three backends.

mod support;

use std::path::PathBuf;

use support::{Backend, Family, Guard, Lab, backend_tests};

/// The example policies (`policies/*.yaml`), the same files as the golden tests.
fn examples() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("policies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "too few examples: {files:?}");
    files
}

/// One policy file with every kind of match and action the compiler writes: protocols by name
/// and number, negated protocols, protocols without ports, ports (one, several, ranges,
/// negated, source ports), nets of one address and wider ones in both families, negated nets,
/// network-set selectors, named ports, ICMP and ICMPv6 types and codes (negated too),
/// interfaces (two endpoints of their own: nftables dispatches them with a verdict map),
/// filter-table policy with its end-of-tier drop, untracked policy, egress, a tier with `Pass`.
fn every_shape() -> String {
    EVERY_SHAPE.replace("{node}", &support::addr::NODE_V4.to_string())
}

const EVERY_SHAPE: &str = r#"apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata:
  name: office
  labels: {role: office}
spec:
  nets: [198.51.100.0/24, 2001:db8:5::/48]
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: node1-eth0
  labels: {role: edge}
spec:
  node: node1
  interfaceName: eth0
  expectedIPs: [{node}]
  ports:
    - {name: web, port: 8080, protocol: TCP}
    - {name: dns, port: 53, protocol: UDP}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: node1-eth1
  labels: {role: edge}
spec:
  node: node1
  interfaceName: eth1
---
apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: security
spec:
  order: 100
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: security.screen
spec:
  tier: security
  order: 10
  selector: all()
  preDNAT: true
  applyOnForward: true
  types: [Ingress]
  ingress:
    - action: Deny
      source:
        nets: [203.0.113.128/25]
    - action: Pass
      protocol: 47
    - action: Deny
      notProtocol: TCP
      protocol: UDP
      destination:
        notPorts: [53, 5353]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: shapes-pre-dnat
spec:
  order: 20
  selector: all()
  preDNAT: true
  applyOnForward: true
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: [198.51.100.7/32, 203.0.113.0/28]
        ports: [1024]
      destination:
        ports: [30008, 30010, "30100:30200"]
    - action: Allow
      protocol: TCP
      source:
        nets: [2001:db8:1::7/128, 2001:db8:2::/64]
      destination:
        ports: [30008]
    - action: Allow
      protocol: SCTP
      destination:
        ports: [9000]
    # Out of order, overlapping and adjacent: nft lists its sets sorted and merged.
    - action: Allow
      protocol: UDP
      destination:
        ports: [8080, 80, "70:90", 81, 443, 443, "30000:30005", 30006, 65534, 65535]
    - action: Allow
      protocol: TCP
      destination:
        notPorts: [9001, 22]
    - action: Allow
      protocol: TCP
      destination:
        ports: [443, 443]
    - action: Allow
      protocol: TCP
      destination:
        ports: ["80:85", 86]
    - action: Allow
      protocol: UDP
      destination:
        notPorts: [22, 22]
    # One port excluded on each side, written twice: still one port to nft.
    - action: Allow
      protocol: TCP
      source:
        notPorts: [21403]
      destination:
        notPorts: [7000, 7000]
    - action: Allow
      protocol: UDPLite
      # Words the comment changes: sanitized (quote, backticks) and cut to what it holds.
      metadata:
        annotations:
          owner: "platform team's `edge` group, with a note long enough to be cut by both backends: nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
    - action: Allow
      protocol: UDP
      source:
        selector: role == 'office'
        notNets: [198.51.100.128/25]
      destination:
        ports: [30053]
    - action: Allow
      protocol: ICMP
      icmp: {type: 8, code: 0}
    - action: Allow
      protocol: ICMP
      notICMP: {type: 5}
    - action: Allow
      protocol: ICMPv6
      icmp: {type: 128}
    - action: Allow
      protocol: ICMPv6
      icmp: {type: 1, code: 4}
    - action: Deny
      protocol: ICMP
      notICMP: {type: 3, code: 13}
    - action: Deny
      protocol: 200
    - action: Log
      protocol: TCP
      destination:
        notPorts: [22]
    - action: Deny
      protocol: TCP
      destination:
        ports: ["30000:32767"]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: shapes-host
spec:
  order: 30
  selector: role == 'edge'
  types: [Ingress, Egress]
  ingress:
    - action: Allow
      protocol: TCP
      destination:
        ports: [web]
    - action: Allow
      protocol: UDP
      destination:
        ports: [dns]
    - action: Allow
      source:
        notSelector: role == 'office'
        nets: [192.0.2.0/24]
  egress:
    - action: Allow
      protocol: TCP
      destination:
        nets: [198.51.100.0/24]
        notPorts: [25]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: shapes-untracked
spec:
  order: 40
  selector: role == 'edge'
  doNotTrack: true
  applyOnForward: true
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: UDP
      source:
        nets: [192.0.2.53/32]
        ports: [53]
---
# The longest name there is: its rules' comments are cut to what each kernel keeps.
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc-ddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd
spec:
  order: 50
  selector: role == 'edge'
  preDNAT: true
  applyOnForward: true
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: TCP
      source:
        nets: [192.0.2.7/32]
      destination:
        ports: [30009]
"#;

/// Our rules as the kernel prints them, one `chain<TAB>rule` line each, sorted; counters read
/// as `counter`.
fn kernel_rules(lab: &Lab) -> Vec<String> {
    let mut rules = Vec::new();
    match lab.backend() {
        Backend::Legacy | Backend::Nft => {
            for family in [Family::V4, Family::V6] {
                for line in lab.iptables_save(family).lines() {
                    if line.starts_with("-A ") && line.contains("\"npg:") {
                        rules.push(format!("{family:?}\t{line}"));
                    }
                }
            }
        }
        Backend::Nftables => {
            for family in ["ip", "ip6"] {
                let listing = lab
                    .node()
                    .exec("nft", &["list", "table", family, "nodeport_guard"]);
                if !listing.success() {
                    continue;
                }
                let mut chain = String::new();
                for line in listing.stdout.lines() {
                    let trimmed = line.trim();
                    if let Some(name) = trimmed.strip_prefix("chain ") {
                        chain = name.trim_end_matches(" {").to_owned();
                    } else if line.starts_with("\t\t") && trimmed.contains("comment \"npg:") {
                        let rule = with_sorted_map(&without_counts(trimmed));
                        rules.push(format!("{family}\t{chain}\t{rule}"));
                    }
                }
            }
        }
    }
    rules.sort();
    rules
}

/// `counter packets 3 bytes 180` → `counter`, as the rule was written.
fn without_counts(rule: &str) -> String {
    let words: Vec<&str> = rule.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        out.push(words[i]);
        if words[i] == "counter" && words.get(i + 1) == Some(&"packets") {
            i += 5;
        } else {
            i += 1;
        }
    }
    out.join(" ")
}

/// A verdict map's elements sorted: nft lists them in an order of its own, the render sorted.
fn with_sorted_map(rule: &str) -> String {
    let Some((head, rest)) = rule.split_once(" vmap { ") else {
        return rule.to_owned();
    };
    let (elements, tail) = rest.split_once(" }").expect("a verdict map ends in ` }`");
    let mut elements: Vec<&str> = elements.split(", ").collect();
    elements.sort_unstable();
    format!("{head} vmap {{ {} }}{tail}", elements.join(", "))
}

/// The rules `render` prints, in the same form as [`kernel_rules`].
fn rendered_rules(guard: &Guard<'_>, backend: Backend) -> Vec<String> {
    let render = guard.run_expect(&["render"], 0).stdout;
    let mut rules = Vec::new();
    let mut family = Family::V4;
    for line in render.lines() {
        match backend {
            Backend::Legacy | Backend::Nft => {
                if line.starts_with("# ip6tables-restore") {
                    family = Family::V6;
                } else if line.starts_with("# iptables-restore") {
                    family = Family::V4;
                }
                // A hook is inserted at the top; iptables-save prints it as any rule.
                let line = match line.strip_prefix("-I ") {
                    Some(rest) => match rest.split_once(" 1 ") {
                        Some((chain, rule)) => format!("-A {chain} {rule}"),
                        None => continue,
                    },
                    None if line.starts_with("-A ") => line.to_owned(),
                    None => continue,
                };
                rules.push(format!("{family:?}\t{line}"));
            }
            Backend::Nftables => {
                let words: Vec<&str> = line.splitn(6, ' ').collect();
                if let ["add", "rule", family, _table, chain, rule] = words.as_slice() {
                    rules.push(format!("{family}\t{chain}\t{rule}"));
                }
            }
        }
    }
    rules.sort();
    rules
}

/// The lines only one side has, for a failure message.
fn differences(rendered: &[String], kernel: &[String]) -> String {
    let only = |a: &[String], b: &[String]| -> Vec<String> {
        a.iter().filter(|line| !b.contains(line)).cloned().collect()
    };
    format!(
        "rendered, not read back:\n  {}\nread back, not rendered:\n  {}",
        only(rendered, kernel).join("\n  "),
        only(kernel, rendered).join("\n  ")
    )
}

/// Applies `yaml` and checks that every rule comes back exactly as rendered.
#[track_caller]
fn reads_back_as_rendered(lab: &Lab, guard: &Guard<'_>, name: &str, yaml: &str) -> Vec<String> {
    guard.write_policy("policy.yaml", yaml);
    guard.apply();
    let rendered = rendered_rules(guard, lab.backend());
    let kernel = kernel_rules(lab);
    assert!(
        rendered.len() >= 10,
        "{name}: too few rules rendered: {rendered:#?}"
    );
    assert!(
        rendered == kernel,
        "{name}: {} rules rendered, {} read back; {}",
        rendered.len(),
        kernel.len(),
        differences(&rendered, &kernel)
    );
    // And each hashes to its comment as the kernel prints it, so `plan` finds nothing changed
    // (a rule changed in place with its comment kept would not). Without the view apply kept,
    // so that `plan` reads every rule from the kernel.
    let view = guard.state_dir().join("view.json");
    if view.exists() {
        std::fs::remove_file(&view).expect("remove the view");
    }
    let (code, output) = guard.plan_detailed();
    assert_eq!(
        code, 0,
        "{name}: a plan right after apply:\n{}",
        output.stdout
    );
    guard.cleanup();
    rendered
}

/// Every example policy's rules read back byte for byte as rendered.
fn example_rules_read_back_as_rendered(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    for file in examples() {
        let yaml = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        reads_back_as_rendered(&lab, &guard, &file.display().to_string(), &yaml);
    }
}
backend_tests!(example_rules_read_back_as_rendered);

/// A policy with every shape the compiler writes reads back byte for byte as rendered.
fn every_shape_reads_back_as_rendered(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let rendered = reads_back_as_rendered(&lab, &guard, "every shape", &every_shape());
    if backend == Backend::Nftables {
        assert!(
            rendered.iter().any(|rule| rule.contains(" vmap { ")),
            "two endpoints of their own are dispatched with a verdict map: {rendered:#?}"
        );
    }
}
backend_tests!(every_shape_reads_back_as_rendered);
