//! Incremental compilation and rendering (what the daemon's reloads use) give exactly what a
//! full compile and render give, over random sequences of edits to a policy directory: policies
//! added, removed, changed, moved between files and tiers, staged; GlobalNetworkSets and
//! HostEndpoints that rule selectors and named ports resolve against changed; the logged
//! actions changed in the config. The incremental side reads the policies through the command
//! line's cache of validated sets on disk (`disk_cache`), as `plan` and `apply` do.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use nodeport_guard::compile::{Memo, compile, compile_with};
use nodeport_guard::config::Config;
use nodeport_guard::counters::PolicyFile;
use nodeport_guard::dataplane::{iptables, nftables};
use nodeport_guard::facts::HostFacts;
use nodeport_guard::model::Action;
use nodeport_guard::policy_set;
use nodeport_guard::state::{RenderMemo, Spelling, desired, desired_with};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Policy {
    id: u8,
    file: u8,
    order: Option<u8>,
    security_tier: bool,
    staged: bool,
    pre_dnat: bool,
    rules: Vec<Rule>,
}

#[derive(Clone, Debug)]
struct Rule {
    action: &'static str,
    tcp: bool,
    six: bool,
    nets: Vec<u8>,
    /// Selects network sets and endpoints by `role`.
    role: Option<&'static str>,
    /// Destination port `http` (a named port) instead of a number.
    named_port: bool,
    port: u16,
}

#[derive(Clone, Debug)]
struct NetworkSet {
    role: &'static str,
    nets: Vec<u8>,
}

#[derive(Clone, Debug)]
struct Endpoint {
    node1: bool,
    role: &'static str,
    ip: u8,
    http_port: u16,
}

#[derive(Clone, Debug)]
struct World {
    policies: Vec<Policy>,
    sets: Vec<NetworkSet>,
    endpoints: Vec<Endpoint>,
    log_deny: bool,
}

#[derive(Clone, Debug)]
enum Edit {
    Replace(usize, Policy),
    Add(Policy),
    Remove(usize),
    Move(usize, u8),
    Order(usize, Option<u8>),
    Tier(usize),
    Staged(usize),
    SetNets(usize, Vec<u8>),
    SetRole(usize, &'static str),
    EndpointIp(usize, u8),
    EndpointPort(usize, u16),
    LogDeny,
}

const ROLES: [&str; 3] = ["office", "lab", "vpn"];

fn arb_rule() -> impl Strategy<Value = Rule> {
    (
        prop::sample::select(vec!["Allow", "Deny", "Pass", "Log"]),
        any::<bool>(),
        prop::bool::weighted(0.2),
        prop::collection::vec(any::<u8>(), 0..4),
        prop::option::of(prop::sample::select(ROLES.to_vec())),
        prop::bool::weighted(0.3),
        1u16..60000,
    )
        .prop_map(|(action, tcp, six, nets, role, named_port, port)| Rule {
            action,
            tcp,
            six,
            nets,
            role,
            named_port,
            port,
        })
}

fn arb_policy() -> impl Strategy<Value = Policy> {
    (
        0u8..24,
        0u8..3,
        prop::option::of(0u8..50),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.3),
        prop::collection::vec(arb_rule(), 0..4),
    )
        .prop_map(
            |(id, file, order, security_tier, staged, pre_dnat, rules)| Policy {
                id,
                file,
                order,
                security_tier,
                staged,
                pre_dnat,
                rules,
            },
        )
}

fn arb_world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(arb_policy(), 1..10),
        prop::collection::vec(
            (
                prop::sample::select(ROLES.to_vec()),
                prop::collection::vec(any::<u8>(), 0..4),
            )
                .prop_map(|(role, nets)| NetworkSet { role, nets }),
            0..3,
        ),
        prop::collection::vec(
            (
                any::<bool>(),
                prop::sample::select(ROLES.to_vec()),
                any::<u8>(),
                1u16..60000,
            )
                .prop_map(|(node1, role, ip, http_port)| Endpoint {
                    node1,
                    role,
                    ip,
                    http_port,
                }),
            0..3,
        ),
        any::<bool>(),
    )
        .prop_map(|(policies, sets, endpoints, log_deny)| World {
            policies,
            sets,
            endpoints,
            log_deny,
        })
}

fn arb_edit() -> impl Strategy<Value = Edit> {
    let index = 0usize..16;
    prop_oneof![
        3 => (index.clone(), arb_policy()).prop_map(|(i, p)| Edit::Replace(i, p)),
        2 => arb_policy().prop_map(Edit::Add),
        1 => index.clone().prop_map(Edit::Remove),
        1 => (index.clone(), 0u8..3).prop_map(|(i, f)| Edit::Move(i, f)),
        1 => (index.clone(), prop::option::of(0u8..50)).prop_map(|(i, o)| Edit::Order(i, o)),
        1 => index.clone().prop_map(Edit::Tier),
        1 => index.clone().prop_map(Edit::Staged),
        2 => (index.clone(), prop::collection::vec(any::<u8>(), 0..4))
            .prop_map(|(i, n)| Edit::SetNets(i, n)),
        1 => (index.clone(), prop::sample::select(ROLES.to_vec()))
            .prop_map(|(i, r)| Edit::SetRole(i, r)),
        1 => (index.clone(), any::<u8>()).prop_map(|(i, ip)| Edit::EndpointIp(i, ip)),
        1 => (index, 1u16..60000).prop_map(|(i, p)| Edit::EndpointPort(i, p)),
        1 => Just(Edit::LogDeny),
    ]
}

impl World {
    fn apply(&mut self, edit: &Edit) {
        fn pick<T>(items: &mut [T], index: usize) -> Option<&mut T> {
            let len = items.len();
            (len > 0).then(|| &mut items[index % len])
        }
        match edit.clone() {
            Edit::Replace(i, policy) => {
                if let Some(p) = pick(&mut self.policies, i) {
                    *p = Policy { id: p.id, ..policy };
                }
            }
            Edit::Add(policy) => self.policies.push(policy),
            Edit::Remove(i) => {
                if !self.policies.is_empty() {
                    let len = self.policies.len();
                    self.policies.remove(i % len);
                }
            }
            Edit::Move(i, file) => pick(&mut self.policies, i)
                .into_iter()
                .for_each(|p| p.file = file),
            Edit::Order(i, order) => pick(&mut self.policies, i)
                .into_iter()
                .for_each(|p| p.order = order),
            Edit::Tier(i) => pick(&mut self.policies, i)
                .into_iter()
                .for_each(|p| p.security_tier = !p.security_tier),
            Edit::Staged(i) => pick(&mut self.policies, i)
                .into_iter()
                .for_each(|p| p.staged = !p.staged),
            Edit::SetNets(i, nets) => pick(&mut self.sets, i)
                .into_iter()
                .for_each(|s| s.nets = nets.clone()),
            Edit::SetRole(i, role) => pick(&mut self.sets, i)
                .into_iter()
                .for_each(|s| s.role = role),
            Edit::EndpointIp(i, ip) => pick(&mut self.endpoints, i)
                .into_iter()
                .for_each(|e| e.ip = ip),
            Edit::EndpointPort(i, port) => pick(&mut self.endpoints, i)
                .into_iter()
                .for_each(|e| e.http_port = port),
            Edit::LogDeny => self.log_deny = !self.log_deny,
        }
    }

    /// The policy files: the sets, endpoints and tier, then three files of policies. Two
    /// policies with the same name and kind: the first wins (the second would be an error).
    fn files(&self) -> Vec<PolicyFile> {
        let mut common = String::from(
            "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: security\nspec:\n  order: 100\n",
        );
        for (index, set) in self.sets.iter().enumerate() {
            let nets: Vec<String> = set
                .nets
                .iter()
                .map(|b| format!("198.51.{b}.0/24"))
                .collect();
            let _ = write!(
                common,
                "---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: set{index}\n  labels: {{role: {}}}\nspec:\n  nets: [{}]\n",
                set.role,
                nets.join(", ")
            );
        }
        for (index, endpoint) in self.endpoints.iter().enumerate() {
            let node = if endpoint.node1 { "node1" } else { "node2" };
            let _ = write!(
                common,
                "---\napiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: hep{index}\n  labels: {{role: {}}}\nspec:\n  node: {node}\n  interfaceName: eth{index}\n  expectedIPs: [192.0.2.{}]\n  ports:\n  - name: http\n    port: {}\n    protocol: TCP\n",
                endpoint.role, endpoint.ip, endpoint.http_port
            );
        }
        let mut files = vec![common, String::new(), String::new(), String::new()];
        let mut seen = BTreeSet::new();
        for policy in &self.policies {
            if !seen.insert((policy.id, policy.staged, policy.security_tier)) {
                continue;
            }
            let text = &mut files[1 + usize::from(policy.file)];
            write_policy(text, policy);
        }
        files
            .into_iter()
            .enumerate()
            .map(|(index, text)| PolicyFile {
                path: format!("/policies/{index}.yaml").into(),
                text,
            })
            .collect()
    }

    fn config(&self) -> Config {
        let mut config = Config {
            node_name: Some("node1".to_owned()),
            ..Config::default()
        };
        if self.log_deny {
            config.log_actions.insert(Action::Deny);
        } else {
            config.log_actions.remove(&Action::Deny);
        }
        config
    }
}

fn write_policy(text: &mut String, policy: &Policy) {
    let kind = if policy.staged {
        "StagedGlobalNetworkPolicy"
    } else {
        "GlobalNetworkPolicy"
    };
    let (name, tier) = if policy.security_tier {
        (format!("security.p{}", policy.id), "security")
    } else {
        (format!("p{}", policy.id), "default")
    };
    let _ = write!(
        text,
        "---\napiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  tier: {tier}\n  selector: all()\n"
    );
    if let Some(order) = policy.order {
        let _ = writeln!(text, "  order: {order}");
    }
    if policy.pre_dnat {
        text.push_str("  preDNAT: true\n  applyOnForward: true\n");
    }
    text.push_str("  ingress:\n");
    if policy.rules.is_empty() {
        text.push_str("  - action: Deny\n");
    }
    for rule in &policy.rules {
        // Calico allows only Allow and Deny in preDNAT policies.
        let action = if policy.pre_dnat && !matches!(rule.action, "Allow" | "Deny") {
            "Deny"
        } else {
            rule.action
        };
        let _ = writeln!(text, "  - action: {action}");
        if rule.tcp || rule.named_port {
            text.push_str("    protocol: TCP\n");
        }
        text.push_str("    source:\n");
        if !rule.nets.is_empty() {
            let nets: Vec<String> = rule
                .nets
                .iter()
                .map(|b| {
                    if rule.six {
                        format!("\"2001:db8:{b:x}::/48\"")
                    } else {
                        format!("203.0.{b}.0/24")
                    }
                })
                .collect();
            let _ = writeln!(text, "      nets: [{}]", nets.join(", "));
        }
        if let Some(role) = rule.role {
            let _ = writeln!(text, "      selector: role == '{role}'");
        }
        text.push_str("    destination:\n");
        if rule.named_port {
            text.push_str("      ports: [http]\n");
        } else if rule.tcp {
            let _ = writeln!(text, "      ports: [{}]", rule.port);
        }
    }
}

const SPELLINGS: [&Spelling; 2] = [&iptables::SPELLING, &nftables::SPELLING];

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn incremental_compile_and_render_equal_full_ones(
        mut world in arb_world(),
        edits in prop::collection::vec(arb_edit(), 1..12),
    ) {
        let host = HostFacts::minimal("node1");
        let mut memo = Memo::default();
        let mut render_memos = [RenderMemo::default(), RenderMemo::default()];
        // The incremental side reads the files through the command line's cache on disk (a
        // miss, then a hit), so a model read back from it compiles as the full one does.
        let state = tempfile::tempdir().expect("a state directory");
        let disk = nodeport_guard::disk_cache::DiskCache::new(state.path());
        let mut valid_steps = 0;
        for edit in std::iter::once(None).chain(edits.iter().map(Some)) {
            if let Some(edit) = edit {
                world.apply(edit);
            }
            let set = policy_set::from_files(&world.files(), jiff::Timestamp::UNIX_EPOCH);
            if !set.is_valid() {
                // An invalid set is never compiled: the daemon keeps the last good rules and
                // its memo as it was.
                let errors: Vec<_> = set.diagnostics.iter().map(|d| d.message.clone()).collect();
                prop_assert!(false, "the generator wrote an invalid set: {errors:?}");
            }
            valid_steps += 1;
            let config = world.config();
            let full = compile(&set.model, &config, &host);
            let files = world.files();
            policy_set::from_files_through(&files, jiff::Timestamp::UNIX_EPOCH, &disk);
            let kept = policy_set::from_files_through(&files, jiff::Timestamp::UNIX_EPOCH, &disk);
            prop_assert_eq!(format!("{:?}", set.model), format!("{:?}", kept.model));
            let incremental = compile_with(&kept.model, &config, &host, &mut memo);
            prop_assert_eq!(format!("{full:?}"), format!("{incremental:?}"));
            for (spelling, render_memo) in SPELLINGS.iter().zip(&mut render_memos) {
                let whole = desired(&full.ruleset, spelling);
                let again = desired_with(&incremental.ruleset, spelling, render_memo);
                prop_assert!(whole == *again, "{} render differs after {edit:?}", spelling.name);
            }
        }
        prop_assert!(valid_steps > 0);
    }
}

/// The memo does save work: after one policy of many changes, only its chain is compiled and
/// only the chains it touches are rendered again.
#[test]
fn one_changed_policy_compiles_one_chain() {
    let mut world = World {
        policies: (0..40)
            .map(|id| Policy {
                id,
                file: id % 3,
                order: Some(id),
                security_tier: false,
                staged: false,
                pre_dnat: false,
                rules: vec![Rule {
                    action: "Allow",
                    tcp: true,
                    six: false,
                    nets: vec![id],
                    role: None,
                    named_port: false,
                    port: 30000 + u16::from(id),
                }],
            })
            .collect(),
        sets: Vec::new(),
        endpoints: Vec::new(),
        log_deny: false,
    };
    let host = HostFacts::minimal("node1");
    let mut memo = Memo::default();
    let mut render_memo = RenderMemo::default();
    let mut run = |world: &World| {
        let set = policy_set::from_files(&world.files(), jiff::Timestamp::UNIX_EPOCH);
        assert!(set.is_valid(), "{:?}", set.diagnostics);
        let compiled = compile_with(&set.model, &world.config(), &host, &mut memo);
        desired_with(&compiled.ruleset, &iptables::SPELLING, &mut render_memo);
        (memo.last_compile(), render_memo.last_render())
    };
    // Both families: each policy has a chain in each.
    let (first, (copied, rendered)) = run(&world);
    assert_eq!((first.reused, first.compiled), (0, 80));
    assert_eq!(copied, 0);
    assert!(rendered > 40, "{rendered} chains rendered");

    world.policies[7].rules[0].nets = vec![200];
    let (second, (copied, rendered)) = run(&world);
    assert_eq!((second.reused, second.compiled), (78, 2));
    // The policy's IPv4 chain, and nothing else: its jump is the same, and its IPv6 chain
    // (which the IPv4 net leaves empty) compiles to the same rules.
    assert_eq!(rendered, 1, "{copied} copied");

    world.log_deny = true;
    let (third, _) = run(&world);
    assert_eq!(
        third.reused, 0,
        "a changed context compiles everything again"
    );
}
