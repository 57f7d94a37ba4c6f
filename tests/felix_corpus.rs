//! Felix's own rendering tests, as a corpus: every in-scope entry of `felix/rules/policy_test.go`,
//! `nflogprefix_test.go` and the NFLOG shapes of `endpoints_test.go` (projectcalico/calico
//! v3.30.7) renders here as Felix expects it.
//!
//! Felix's tables render a protobuf rule (`proto.Rule`, with ipset ids where we have
//! selectors); each case here is that rule written as a user would write it in a
//! `GlobalNetworkPolicy` named `default.foo` (the name Felix's tests give their policy), compiled
//! for the golden host, and the rules of its policy chain are compared with Felix's expected
//! rules after both are normalised the same way (see [`normalise`]): chain names dropped, our
//! `-m comment` (with its `npg:` hash) dropped, set names numbered in order of appearance, mark
//! values named by role (accept, pass, drop, scratch0, scratch1: Felix's tests and we place the
//! bits differently), option spellings made one (`--source`/`-s`, `--set-mark`/`--set-xmark`,
//! `--nflog-range`/`--nflog-size`, protocol names/numbers), and the header matches (`-p`, `-s`,
//! `-d`) taken as the set iptables itself keeps them as. What is compared is the rest: every
//! rule, its order, every match and its order, the targets, the NFLOG groups and prefixes.
//!
//! Adaptations, each marked at its case: Calico's API wants a `protocol` wherever there are ports
//! or ICMP fields, so those cases add it and Felix's expected match gains the `-p` that
//! `CalculateRuleMatch` would put first; a tier whose default action is Pass cannot be the
//! `default` tier in Calico's API, so that case's tier is `pass-tier`. Felix writes both
//! directions' chains of every policy; we write the chains an endpoint uses, so a case looks at
//! the direction its rule is in. Felix strips the RETURN rules at a chain's end
//! (`ProtoRulesToIptablesRules`), and so do we: a one-rule policy's expected chain is Felix's
//! rules for the rule with its trailing RETURN left off.
//!
//! Out of scope: rules with two positive (or two negated) ipsets on one side (a host endpoint
//! rule has one `selector` and one `notSelector` per side), profiles (we know only Calico's
//! allow-all one and log nothing of it), REJECT (we always drop), `Log` with specifiers in the
//! prefix or with a rate limit (no such options here), workload endpoints, and the flow-log
//! settings that have no counterpart (logging on here is `logActions: [Allow, Deny, Pass]`,
//! off is `logActions: []`).
//!
//! Deliberate differences, each with a test that fails if we copied Felix (see docs/felix.md):
//! staged policies render logging-only rules (Felix renders nothing), and Felix's entry
//! "positive and negatednumeric, named ports and CIDRs" never clears scratch1 between positive
//! blocks, so Felix accepts a packet that matches the destination ports but not the source
//! nets; we clear it, as Calico's API means.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use nodeport_guard::compile::compile;
use nodeport_guard::compile::rules::nflog_prefix;
use nodeport_guard::config::{Config, LogTarget};
use nodeport_guard::dataplane::iptables::render::rule_parts;
use nodeport_guard::model::{Action, Direction, IpFamily};
use nodeport_guard::ruleset::{self, Ruleset, Table};

// ---------------------------------------------------------------------------------------------
// Normalising

/// Which bit plays which part, to name mark values by role.
#[derive(Clone, Copy)]
struct Roles {
    accept: u32,
    pass: u32,
    drop: u32,
    scratch0: u32,
    scratch1: u32,
}

/// The marks of Felix's `rrConfigNormal` (policy_test.go).
const FELIX_POLICY_MARKS: Roles = Roles {
    accept: 0x80,
    pass: 0x100,
    scratch0: 0x200,
    scratch1: 0x400,
    drop: 0x800,
};

/// The marks of Felix's `rrConfigNormalMangleReturn` (endpoints_test.go).
const FELIX_ENDPOINT_MARKS: Roles = Roles {
    accept: 0x8,
    pass: 0x10,
    scratch0: 0x20,
    scratch1: 0x40,
    drop: 0x80,
};

impl Roles {
    /// The roles of a compiled ruleset's marks.
    fn of(ruleset: &Ruleset) -> Roles {
        let marks = &ruleset.marks;
        Roles {
            accept: marks.accept,
            pass: marks.pass,
            drop: marks.drop,
            scratch0: marks.scratch0,
            scratch1: marks.scratch1,
        }
    }

    /// A mark value (`0x200`, `0`, `512`) as the roles of its bits, `accept|pass` or `0`.
    fn name(self, text: &str) -> String {
        let value = match text.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => text.parse(),
        }
        .unwrap_or_else(|_| panic!("mark value `{text}`"));
        if value == 0 {
            return "0".into();
        }
        let named = [
            (self.accept, "accept"),
            (self.pass, "pass"),
            (self.drop, "drop"),
            (self.scratch0, "scratch0"),
            (self.scratch1, "scratch1"),
        ];
        let known: u32 = named.iter().map(|(bit, _)| bit).fold(0, |a, b| a | b);
        assert_eq!(value & !known, 0, "mark value `{text}` has bits of no role");
        named
            .iter()
            .filter(|(bit, _)| value & bit != 0)
            .map(|(_, name)| *name)
            .collect::<Vec<_>>()
            .join("|")
    }

    /// `value/mask` with both named.
    fn pair(self, text: &str) -> String {
        let (value, mask) = text.split_once('/').unwrap_or((text, "0xffffffff"));
        format!("{}/{}", self.name(value), self.name(mask))
    }
}

/// Splits a rule as iptables-restore does: words, and double-quoted strings as one word.
fn words(rule: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in rule.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            ' ' if !quoted => {
                if started {
                    out.push(std::mem::take(&mut current));
                }
                started = false;
            }
            _ => {
                current.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(current);
    }
    out
}

/// A protocol as its number (names as `/etc/protocols` and iptables spell them).
fn protocol_number(text: &str) -> String {
    if text == "icmpv6" {
        return "58".into();
    }
    (0..=u8::MAX)
        .find(|&number| ruleset::protocol_keyword(number) == Some(text))
        .map_or_else(|| text.to_owned(), |number| number.to_string())
}

/// One rule in one spelling: the header matches as a sorted set, then each `-m` match in order,
/// then the target with its options (NFLOG's and LOG's sorted, as their order means nothing).
/// Set names become `set1`, `set2`, … in order of first appearance in `sets`.
fn normalise_rule(rule: &str, roles: Roles, sets: &mut HashMap<String, String>) -> String {
    let mut words = words(rule).into_iter().peekable();
    if words.peek().is_some_and(|w| w == "-A") {
        words.next();
        words.next();
    }
    let mut header = Vec::new();
    let mut modules: Vec<Vec<String>> = Vec::new();
    let mut target: Vec<String> = Vec::new();
    let mut bang = "";
    while let Some(word) = words.next() {
        let mut value = || words.next().unwrap_or_default();
        match word.as_str() {
            "!" => {
                bang = "! ";
                continue;
            }
            "-p" | "--protocol" => header.push(format!("{bang}-p {}", protocol_number(&value()))),
            "-s" | "--source" => header.push(format!("{bang}-s {}", value())),
            "-d" | "--destination" => header.push(format!("{bang}-d {}", value())),
            "-m" | "--match" => modules.push(vec![value()]),
            "-j" | "--jump" | "-g" | "--goto" => {
                target.push(value());
                target.extend(words.by_ref());
                break;
            }
            option => {
                let module = modules.last_mut().expect("an option after its -m");
                let option = match option {
                    "--source-ports" => "--sports",
                    "--destination-ports" => "--dports",
                    other => other,
                };
                // An option's arguments are the words up to the next option (`--match-set`
                // takes two).
                let mut arguments = Vec::new();
                while let Some(next) = words.next_if(|w| !w.starts_with('-') && w != "!") {
                    arguments.push(next);
                }
                if let Some(first) = arguments.first_mut() {
                    *first = match option {
                        "--mark" => roles.pair(first),
                        "--match-set" => {
                            let next = format!("set{}", sets.len() + 1);
                            sets.entry(first.clone()).or_insert(next).clone()
                        }
                        _ => first.clone(),
                    };
                }
                module.push(format!("{bang}{option} {}", arguments.join(" ")));
            }
        }
        bang = "";
    }
    modules.retain(|module| module[0] != "comment");
    header.sort();
    let mut text = header.join(" ");
    for module in modules {
        text.push_str(&format!(" -m {}", module.join(" ")));
    }
    text.push_str(&format!(" -j {}", normalise_target(&target, roles)));
    text.trim().to_owned()
}

/// A target and its options in one spelling.
fn normalise_target(target: &[String], roles: Roles) -> String {
    let Some((name, options)) = target.split_first() else {
        return "(none)".into();
    };
    let mut pairs: BTreeMap<String, String> = BTreeMap::new();
    for pair in options.chunks(2) {
        let option = match pair[0].as_str() {
            "--set-mark" => "--set-xmark",
            "--nflog-range" => "--nflog-size",
            other => other,
        };
        let value = pair.get(1).cloned().unwrap_or_default();
        let value = if option == "--set-xmark" {
            roles.pair(&value)
        } else {
            value
        };
        pairs.insert(option.to_owned(), value);
    }
    match name.as_str() {
        // Ours also asks for each packet to go out at once (`--nflog-threshold 1`): a
        // difference of delivery, not of rule (docs/felix.md).
        "NFLOG" => {
            pairs.remove("--nflog-threshold");
        }
        // `iptables-save` leaves out the default level, warning (4).
        "LOG" => {
            pairs
                .entry("--log-level".into())
                .or_insert_with(|| "4".into());
        }
        _ => {}
    }
    let mut text = name.clone();
    for (option, value) in pairs {
        text.push_str(&format!(" {option} {value}"));
    }
    text
}

/// Rules in one spelling, sharing one numbering of sets.
fn normalise(rules: &[String], roles: Roles) -> Vec<String> {
    let mut sets = HashMap::new();
    rules
        .iter()
        .map(|rule| normalise_rule(rule, roles, &mut sets))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Compiling ours

/// Logging as Felix's `FlowLogsEnabled` stands for it: every verdict, or none.
fn config(logging: bool) -> Config {
    Config {
        node_name: Some("node1".into()),
        log_actions: if logging {
            [Action::Allow, Action::Deny, Action::Pass].into()
        } else {
            Default::default()
        },
        ..Config::default()
    }
}

/// The ruleset of a policy file, for the golden host.
fn compiled(yaml: &str, config: &Config) -> Ruleset {
    let dir = tempfile::tempdir().expect("tempdir");
    let path: PathBuf = dir.path().join("p.yaml");
    std::fs::write(&path, yaml).expect("write");
    let set = nodeport_guard::policy_set::load(&[path]);
    let errors: Vec<String> = set
        .diagnostics
        .iter()
        .map(|d| d.headline(&set.sources))
        .collect();
    assert!(set.is_valid(), "{yaml}\n{errors:#?}");
    compile(&set.model, config, &nodeport_guard::fixtures::golden_host()).ruleset
}

/// The rules of one of our chains in `iptables-save`'s spelling, without their comment.
fn chain(ruleset: &Ruleset, family: IpFamily, table: Table, name: &str) -> Vec<ruleset::Rule> {
    ruleset
        .family(family)
        .and_then(|f| f.table(table))
        .and_then(|t| t.chain(name))
        .map(|chain| chain.rules.to_vec())
        .unwrap_or_default()
}

fn spelled(rules: &[ruleset::Rule]) -> Vec<String> {
    rules
        .iter()
        .map(|rule| {
            let (head, _, tail) = rule_parts(rule);
            format!("{head}{tail}")
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// policy_test.go: `ruleTestData`, through every table that renders it

/// One entry of `ruleTestData`: (upstream name, IP version, the rule's fields as a flow mapping
/// without `action`, the protocol Calico's API adds (see the module doc), Felix's match).
type RuleEntry = (
    &'static str,
    u8,
    &'static str,
    Option<&'static str>,
    &'static str,
);

const RULE_TEST_DATA: &[RuleEntry] = &[
    ("Empty rule", 4, "", None, ""),
    ("Protocol name", 4, "protocol: TCP", None, "-p tcp"),
    ("Protocol num", 4, "protocol: 8", None, "-p 8"),
    (
        "Source net",
        4,
        "source: {nets: [10.0.0.0/16]}",
        None,
        "--source 10.0.0.0/16",
    ),
    (
        "Source IP set",
        4,
        "source: {selector: \"role == 'db'\"}",
        None,
        "-m set --match-set cali40ipsetid1 src",
    ),
    (
        "Source ports",
        4,
        "source: {ports: ['10:12']}",
        Some("tcp"),
        "-m multiport --source-ports 10:12",
    ),
    (
        "Source ports (multiple)",
        4,
        "source: {ports: ['10:12', '20:30', 8080]}",
        Some("tcp"),
        "-m multiport --source-ports 10:12,20:30,8080",
    ),
    (
        "ICMP",
        4,
        "icmp: {type: 10}",
        Some("icmp"),
        "-m icmp --icmp-type 10",
    ),
    (
        "ICMP with code",
        4,
        "icmp: {type: 10, code: 12}",
        Some("icmp"),
        "-m icmp --icmp-type 10/12",
    ),
    (
        "ICMP",
        6,
        "icmp: {type: 10}",
        Some("icmpv6"),
        "-m icmp6 --icmpv6-type 10",
    ),
    (
        "ICMP with code",
        6,
        "icmp: {type: 10, code: 12}",
        Some("icmpv6"),
        "-m icmp6 --icmpv6-type 10/12",
    ),
    (
        "Dest net",
        4,
        "destination: {nets: [10.0.0.0/16]}",
        None,
        "--destination 10.0.0.0/16",
    ),
    (
        "Dest IP set",
        4,
        "destination: {selector: \"role == 'db'\"}",
        None,
        "-m set --match-set cali40ipsetid1 dst",
    ),
    (
        "Dest ports",
        4,
        "destination: {ports: ['10:12']}",
        Some("tcp"),
        "-m multiport --destination-ports 10:12",
    ),
    (
        "Dest ports (multiple)",
        4,
        "destination: {ports: ['10:12', '20:30', 8080]}",
        Some("tcp"),
        "-m multiport --destination-ports 10:12,20:30,8080",
    ),
    // Negated matches.
    ("Protocol name", 4, "notProtocol: TCP", None, "! -p tcp"),
    ("Protocol num", 4, "notProtocol: 8", None, "! -p 8"),
    (
        "Negated source net",
        4,
        "source: {notNets: [10.0.0.0/16]}",
        None,
        "! --source 10.0.0.0/16",
    ),
    (
        "Negated source IP set",
        4,
        "source: {notSelector: \"role == 'db'\"}",
        None,
        "-m set ! --match-set cali40ipsetid1 src",
    ),
    (
        "Negated source IP set v6",
        6,
        "source: {notSelector: \"role == 'db'\"}",
        None,
        "-m set ! --match-set cali60ipsetid1 src",
    ),
    (
        "Negated source ports",
        4,
        "source: {notPorts: ['10:12']}",
        Some("tcp"),
        "-m multiport ! --source-ports 10:12",
    ),
    (
        "Negated source ports (multiple)",
        4,
        "source: {notPorts: ['10:12', '20:30', 8080]}",
        Some("tcp"),
        "-m multiport ! --source-ports 10:12,20:30,8080",
    ),
    (
        "Negated source ports (>15) should be broken into blocks",
        4,
        "source: {notPorts: ['1:2', '3:4', '5:6', '7:8', '9:10', '11:12', '13:14', '15:16']}",
        Some("tcp"),
        "-m multiport ! --source-ports 1:2,3:4,5:6,7:8,9:10,11:12,13:14 -m multiport ! --source-ports 15:16",
    ),
    (
        "ICMP",
        4,
        "notICMP: {type: 10}",
        Some("icmp"),
        "-m icmp ! --icmp-type 10",
    ),
    (
        "ICMP with code",
        4,
        "notICMP: {type: 10, code: 12}",
        Some("icmp"),
        "-m icmp ! --icmp-type 10/12",
    ),
    (
        "ICMP",
        6,
        "notICMP: {type: 10}",
        Some("icmpv6"),
        "-m icmp6 ! --icmpv6-type 10",
    ),
    (
        "ICMP with code",
        6,
        "notICMP: {type: 10, code: 12}",
        Some("icmpv6"),
        "-m icmp6 ! --icmpv6-type 10/12",
    ),
    (
        "Dest net",
        4,
        "destination: {notNets: [10.0.0.0/16]}",
        None,
        "! --destination 10.0.0.0/16",
    ),
    (
        "Dest IP set",
        4,
        "destination: {notSelector: \"role == 'db'\"}",
        None,
        "-m set ! --match-set cali40ipsetid1 dst",
    ),
    (
        "Dest IP set",
        6,
        "destination: {notSelector: \"role == 'db'\"}",
        None,
        "-m set ! --match-set cali60ipsetid1 dst",
    ),
    (
        "Dest ports",
        4,
        "destination: {notPorts: ['10:12']}",
        Some("tcp"),
        "-m multiport ! --destination-ports 10:12",
    ),
    (
        "Dest ports (>15) should be broken into blocks",
        4,
        "destination: {notPorts: ['1:2', '3:4', '5:6', '7:8', '9:10', '11:12', '13:14', '15:16']}",
        Some("tcp"),
        "-m multiport ! --destination-ports 1:2,3:4,5:6,7:8,9:10,11:12,13:14 -m multiport ! --destination-ports 15:16",
    ),
    (
        "Dest ports (multiple)",
        4,
        "destination: {notPorts: ['10:12', '20:30', 8080]}",
        Some("tcp"),
        "-m multiport ! --destination-ports 10:12,20:30,8080",
    ),
];

/// `filteredRuleTestData`: a negated catch-all net, for which Felix writes no rule.
const FILTERED_RULE_TEST_DATA: &[(&str, u8, &str)] = &[
    (
        "Negated catch-all IPv4 source net (should be filtered out)",
        4,
        "source: {notNets: [0.0.0.0/0]}",
    ),
    (
        "Negated catch-all IPv6 source net (should be filtered out)",
        6,
        "source: {notNets: ['::/0']}",
    ),
    (
        "Negated catch-all IPv4 destination net (should be filtered out)",
        4,
        "destination: {notNets: [0.0.0.0/0]}",
    ),
    (
        "Negated catch-all IPv6 destination net (should be filtered out)",
        6,
        "destination: {notNets: ['::/0']}",
    ),
];

/// How a table of policy_test.go renders an entry: the rule's action and where it is.
#[derive(Clone, Copy, Debug)]
enum Variant {
    /// "Allow rules should be correctly rendered" (and "… with flowlogs enabled").
    Allow,
    /// "pass rules should be correctly rendered" (…).
    Pass,
    /// "Deny (DROP) rules should be correctly rendered" and "Inbound deny rules should be
    /// correctly rendered within a policy" (…).
    Deny,
    /// "Outbound deny rules should be correctly rendered within a policy" (…).
    EgressDeny,
    /// The inbound deny of a pre-DNAT policy: Felix renders its chain as any other.
    PreDnatDeny,
    /// "Log rules should be correctly rendered", with `logTarget: log`.
    Log,
    /// "Log rules should be correctly rendered with non-default prefix" (`foobar`).
    LogWithPrefix,
}

const VARIANTS: [Variant; 7] = [
    Variant::Allow,
    Variant::Pass,
    Variant::Deny,
    Variant::EgressDeny,
    Variant::PreDnatDeny,
    Variant::Log,
    Variant::LogWithPrefix,
];

impl Variant {
    fn action(self) -> &'static str {
        match self {
            Variant::Allow => "Allow",
            Variant::Pass => "Pass",
            Variant::Deny | Variant::EgressDeny | Variant::PreDnatDeny => "Deny",
            Variant::Log | Variant::LogWithPrefix => "Log",
        }
    }

    fn egress(self) -> bool {
        matches!(self, Variant::EgressDeny)
    }

    /// The whole policy file holding `rule` (a flow mapping's inside).
    fn policy(self, rule: &str) -> String {
        let rule = if rule.is_empty() {
            format!("{{action: {}}}", self.action())
        } else {
            format!("{{action: {}, {rule}}}", self.action())
        };
        let (types, list, extra) = match self {
            Variant::EgressDeny => ("Egress", "egress", ""),
            Variant::PreDnatDeny => (
                "Ingress",
                "ingress",
                "  preDNAT: true\n  applyOnForward: true\n",
            ),
            _ => ("Ingress", "ingress", ""),
        };
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {{name: default.foo}}\nspec:\n  selector: all()\n  types: [{types}]\n{extra}  {list}:\n  - {rule}\n"
        )
    }

    fn config(self, logging: bool) -> Config {
        let mut config = config(logging);
        let prefix = match self {
            Variant::Log => Some("calico-packet: "),
            Variant::LogWithPrefix => Some("foobar: "),
            _ => None,
        };
        if let Some(prefix) = prefix {
            config.log_target = LogTarget::KernelLog {
                prefix: prefix.into(),
                level: 5,
            };
        }
        config
    }

    /// Our policy chain for the rule.
    fn ours(self, rule: &str, family: IpFamily, logging: bool) -> Vec<String> {
        let ruleset = compiled(&self.policy(rule), &self.config(logging));
        let (table, name) = match self {
            Variant::EgressDeny => (Table::Filter, "npg-po-default.foo"),
            Variant::PreDnatDeny => (Table::Mangle, "npg-pi-default.foo"),
            _ => (Table::Filter, "npg-pi-default.foo"),
        };
        spelled(&chain(&ruleset, family, table, name))
    }

    /// Felix's rules for a rule whose match is `matched`, as the table's body expects them,
    /// RETURN left off the chain's end.
    fn felix(self, matched: &str, logging: bool) -> Vec<String> {
        let (mark, letter, last) = match self {
            Variant::Allow => ("0x80", "A", "RETURN"),
            Variant::Pass => ("0x100", "P", "RETURN"),
            Variant::Deny | Variant::EgressDeny | Variant::PreDnatDeny => ("0x800", "D", "DROP"),
            Variant::Log => {
                return vec![format!(
                    "{matched} --jump LOG --log-prefix \"calico-packet: \" --log-level 5"
                )];
            }
            Variant::LogWithPrefix => {
                return vec![format!(
                    "{matched} --jump LOG --log-prefix \"foobar: \" --log-level 5"
                )];
            }
        };
        let (group, direction) = if self.egress() { (2, "E") } else { (1, "I") };
        let mut rules = vec![format!("{matched} --jump MARK --set-mark {mark}/{mark}")];
        if logging {
            rules.push(format!(
                "-m mark --mark {mark}/{mark} --jump NFLOG --nflog-group {group} --nflog-prefix {letter}P{direction}0|default.foo --nflog-range 80"
            ));
        }
        if last != "RETURN" {
            rules.push(format!("-m mark --mark {mark}/{mark} --jump {last}"));
        }
        rules
    }
}

fn family(version: u8) -> IpFamily {
    if version == 6 {
        IpFamily::V6
    } else {
        IpFamily::V4
    }
}

/// The rule's fields with the protocol Calico's API adds, and Felix's match with its `-p`.
fn adapted(entry: &RuleEntry) -> (String, String) {
    let &(_, _, fields, protocol, matched) = entry;
    match protocol {
        None => (fields.to_owned(), matched.to_owned()),
        Some(protocol) => {
            let name = match protocol {
                "icmpv6" => "ICMPv6".to_owned(),
                other => other.to_uppercase(),
            };
            (
                format!("protocol: {name}, {fields}"),
                format!("-p {protocol} {matched}"),
            )
        }
    }
}

/// A difference between our chain and Felix's, in words.
fn difference(case: &str, ours: &[String], felix: &[String], roles: (Roles, Roles)) -> String {
    format!(
        "{case}:\n  ours:  {:#?}\n  felix: {:#?}",
        normalise(ours, roles.0),
        normalise(felix, roles.1)
    )
}

/// Adds to `differences` the case (named by `case`) where ours and Felix's differ.
fn compare(
    differences: &mut Vec<String>,
    case: impl FnOnce() -> String,
    ours: &[String],
    felix: &[String],
    roles: (Roles, Roles),
) {
    if !same(ours, felix, roles.0, roles.1) {
        differences.push(difference(&case(), ours, felix, roles));
    }
}

/// Ours and Felix's, normalised, are the same.
fn same(ours: &[String], felix: &[String], ours_roles: Roles, felix_roles: Roles) -> bool {
    normalise(ours, ours_roles) == normalise(felix, felix_roles)
}

/// Our mark roles (the default `markMask`, which every case uses).
fn our_roles() -> Roles {
    Roles::of(&compiled(&Variant::Allow.policy(""), &Config::default()))
}

#[test]
fn rule_test_data_renders_as_felix_in_every_table() {
    let roles = our_roles();
    let mut differences = Vec::new();
    let mut cases = 0;
    for entry in RULE_TEST_DATA {
        let (fields, matched) = adapted(entry);
        for variant in VARIANTS {
            for logging in [false, true] {
                cases += 1;
                let ours = variant.ours(&fields, family(entry.1), logging);
                let felix = variant.felix(&matched, logging);
                let case = || {
                    format!(
                        "{:?} (IPv{}) as {variant:?}, logging {logging}",
                        entry.0, entry.1
                    )
                };
                compare(
                    &mut differences,
                    case,
                    &ours,
                    &felix,
                    (roles, FELIX_POLICY_MARKS),
                );
            }
        }
    }
    assert!(cases >= 400, "only {cases} cases");
    assert!(
        differences.is_empty(),
        "{} of {cases} cases differ from Felix:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

/// Felix writes no rule for these; we refuse the policy (a `notNets` that excludes every
/// address is an error at its line and column: the rule could never match), which leaves no
/// rule either, and says why.
#[test]
fn filtered_rule_test_data_is_refused() {
    for &(upstream, _, fields) in FILTERED_RULE_TEST_DATA {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.yaml");
        std::fs::write(&path, Variant::Allow.policy(fields)).expect("write");
        let set = nodeport_guard::policy_set::load(&[path]);
        assert!(!set.is_valid(), "{upstream:?} is accepted");
    }
}

// ---------------------------------------------------------------------------------------------
// policy_test.go: "CIDR split tests" (and "… with flowlogs enabled")

const CLEAR_BOTH_MARKS_RULE: &str = "-A test --jump MARK --set-mark 0x0/0x600";
const PRE_SET_ALL_BLOCKS_MARK_RULE: &str = "-A test --jump MARK --set-mark 0x200/0x600";
const ALLOW_IF_ALL_MARK_RULE: &str =
    "-A test -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80";
const NFLOG_ALLOW_RULE: &str = "-A test -m mark --mark 0x80/0x80 --jump NFLOG --nflog-group 1 --nflog-prefix API0|default.foo --nflog-range 80";
const ALLOW_IF_ALL_MARK_AND_TCP_RULE: &str =
    "-A test -p tcp -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80";
const ALLOW_IF_ALL_MARK_AND_UDP_RULE: &str =
    "-A test -p udp -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80";
const ALL_BLOCKS_PASS_AND_EQ_THIS_BLOCK_PASS_RULE: &str =
    "-A test -m mark --mark 0/0x400 --jump MARK --set-mark 0/0x200";

/// (upstream name, numbers of source nets, negated source nets, destination nets, negated
/// destination nets, Felix's rules without the final RETURN and the NFLOG rule before it).
type CidrSplit = (&'static str, [usize; 4], &'static [&'static str]);

const CIDR_SPLIT: &[CidrSplit] = &[
    (
        "2 src, 0 !src, 0 dst, 0 !dst",
        [2, 0, 0, 0],
        &[
            CLEAR_BOTH_MARKS_RULE,
            "-A test --source 10.0.0.0/24 --jump MARK --set-mark 0x200/0x200",
            "-A test --source 10.0.1.0/24 --jump MARK --set-mark 0x200/0x200",
            ALLOW_IF_ALL_MARK_RULE,
        ],
    ),
    (
        "0 src, 2 !src, 0 dst, 0 !dst",
        [0, 2, 0, 0],
        &[
            PRE_SET_ALL_BLOCKS_MARK_RULE,
            "-A test --source 11.0.0.0/24 --jump MARK --set-mark 0/0x200",
            "-A test --source 11.0.1.0/24 --jump MARK --set-mark 0/0x200",
            ALLOW_IF_ALL_MARK_RULE,
        ],
    ),
    (
        "0 src, 0 !src, 2 dst, 0 !dst",
        [0, 0, 2, 0],
        &[
            CLEAR_BOTH_MARKS_RULE,
            "-A test --destination 12.0.0.0/24 --jump MARK --set-mark 0x200/0x200",
            "-A test --destination 12.0.1.0/24 --jump MARK --set-mark 0x200/0x200",
            ALLOW_IF_ALL_MARK_RULE,
        ],
    ),
    (
        "0 src, 0 !src, 0 dst, 2 !dst",
        [0, 0, 0, 2],
        &[
            PRE_SET_ALL_BLOCKS_MARK_RULE,
            "-A test --destination 13.0.0.0/24 --jump MARK --set-mark 0/0x200",
            "-A test --destination 13.0.1.0/24 --jump MARK --set-mark 0/0x200",
            ALLOW_IF_ALL_MARK_RULE,
        ],
    ),
    (
        "1 src, 1 !src, 0 dst, 0 !dst",
        [1, 1, 0, 0],
        &[
            PRE_SET_ALL_BLOCKS_MARK_RULE,
            "-A test --source 11.0.0.0/24 --jump MARK --set-mark 0/0x200",
            "-A test --source 10.0.0.0/24 -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80",
        ],
    ),
    (
        "2 src, 1 !src, 0 dst, 0 !dst",
        [2, 1, 0, 0],
        &[
            CLEAR_BOTH_MARKS_RULE,
            "-A test --source 10.0.0.0/24 --jump MARK --set-mark 0x200/0x200",
            "-A test --source 10.0.1.0/24 --jump MARK --set-mark 0x200/0x200",
            "-A test ! --source 11.0.0.0/24 -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80",
        ],
    ),
    (
        "0 src, 0 !src, 1 dst, 1 !dst",
        [0, 0, 1, 1],
        &[
            PRE_SET_ALL_BLOCKS_MARK_RULE,
            "-A test --destination 13.0.0.0/24 --jump MARK --set-mark 0/0x200",
            "-A test --destination 12.0.0.0/24 -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80",
        ],
    ),
    (
        "0 src, 0 !src, 2 dst, 1 !dst",
        [0, 0, 2, 1],
        &[
            CLEAR_BOTH_MARKS_RULE,
            "-A test --destination 12.0.0.0/24 --jump MARK --set-mark 0x200/0x200",
            "-A test --destination 12.0.1.0/24 --jump MARK --set-mark 0x200/0x200",
            "-A test ! --destination 13.0.0.0/24 -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80",
        ],
    ),
    (
        "1 src, 1 !src, 1 dst, 1 !dst",
        [1, 1, 1, 1],
        &[
            PRE_SET_ALL_BLOCKS_MARK_RULE,
            "-A test --source 11.0.0.0/24 --jump MARK --set-mark 0/0x200",
            "-A test --destination 13.0.0.0/24 --jump MARK --set-mark 0/0x200",
            "-A test --source 10.0.0.0/24 --destination 12.0.0.0/24 -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80",
        ],
    ),
    (
        "2 src, 2 !src, 2 dst, 2 !dst",
        [2, 2, 2, 2],
        &[
            CLEAR_BOTH_MARKS_RULE,
            "-A test --source 10.0.0.0/24 --jump MARK --set-mark 0x200/0x200",
            "-A test --source 10.0.1.0/24 --jump MARK --set-mark 0x200/0x200",
            "-A test --destination 12.0.0.0/24 --jump MARK --set-mark 0x400/0x400",
            "-A test --destination 12.0.1.0/24 --jump MARK --set-mark 0x400/0x400",
            ALL_BLOCKS_PASS_AND_EQ_THIS_BLOCK_PASS_RULE,
            "-A test --source 11.0.0.0/24 --jump MARK --set-mark 0/0x200",
            "-A test --source 11.0.1.0/24 --jump MARK --set-mark 0/0x200",
            "-A test --destination 13.0.0.0/24 --jump MARK --set-mark 0/0x200",
            "-A test --destination 13.0.1.0/24 --jump MARK --set-mark 0/0x200",
            ALLOW_IF_ALL_MARK_RULE,
        ],
    ),
];

/// An Allow rule's Felix rules from those before its RETURN: the NFLOG rule when logging (the
/// RETURN itself is the chain's end).
fn with_allow_tail(rules: &[&str], logging: bool) -> Vec<String> {
    let mut rules: Vec<String> = rules.iter().map(|rule| (*rule).to_owned()).collect();
    if logging {
        rules.push(NFLOG_ALLOW_RULE.to_owned());
    }
    rules
}

/// The nets of a CIDR split entry as a rule's fields.
fn split_fields([src, not_src, dst, not_dst]: [usize; 4]) -> String {
    let list = |nets: &[&str], n: usize| nets[..n].join(", ");
    let mut sides = Vec::new();
    for (side, nets, not_nets, n, not_n) in [
        (
            "source",
            ["10.0.0.0/24", "10.0.1.0/24"],
            ["11.0.0.0/24", "11.0.1.0/24"],
            src,
            not_src,
        ),
        (
            "destination",
            ["12.0.0.0/24", "12.0.1.0/24"],
            ["13.0.0.0/24", "13.0.1.0/24"],
            dst,
            not_dst,
        ),
    ] {
        let mut fields = Vec::new();
        if n > 0 {
            fields.push(format!("nets: [{}]", list(&nets, n)));
        }
        if not_n > 0 {
            fields.push(format!("notNets: [{}]", list(&not_nets, not_n)));
        }
        if !fields.is_empty() {
            sides.push(format!("{side}: {{{}}}", fields.join(", ")));
        }
    }
    sides.join(", ")
}

#[test]
fn cidr_split_tests_render_as_felix() {
    let cases: Vec<(String, String, Vec<&str>)> = CIDR_SPLIT
        .iter()
        .map(|&(upstream, counts, rules)| {
            (
                format!("CIDR split {upstream:?}"),
                split_fields(counts),
                rules.to_vec(),
            )
        })
        .collect();
    allow_entries_render_as_felix(&cases);
}

// ---------------------------------------------------------------------------------------------
// policy_test.go: "Named port tests" (and "… with flowlogs enabled")

/// The host endpoint that gives the named ports of the named-port cases (Felix's tests give
/// ipset ids; here a named port is a set of the endpoints' addresses and ports).
const NAMED_PORTS_ENDPOINT: &str = "---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node1-eth0}
spec:
  node: node1
  interfaceName: eth0
  expectedIPs: [198.51.100.1]
  ports:
  - {name: ipset-1, port: 1001, protocol: TCP}
  - {name: ipset-2, port: 1002, protocol: TCP}
  - {name: ipset-3, port: 1003, protocol: TCP}
  - {name: ipset-4, port: 1004, protocol: TCP}
";

const EIGHT_RANGES: &str = "'1:2', '3:4', '5:6', '7:8', '9:10', '11:12', '13:14', '15:16'";

/// (upstream description, with the side where upstream has the same description twice; the
/// rule's fields; Felix's rules before the RETURN).
type NamedPortEntry = (&'static str, String, Vec<&'static str>);

/// The named-port entries with positive ports only.
fn named_port_entries() -> Vec<NamedPortEntry> {
    let ranges = EIGHT_RANGES;
    vec![
        (
            "Named port on its own rendered as single rule",
            "protocol: TCP, source: {ports: [ipset-1]}".into(),
            vec!["-A test -p tcp -m set --match-set cali40ipset-1 src,src --jump MARK --set-mark 0x80/0x80"],
        ),
        (
            "Two named ports need a block (source)",
            "protocol: UDP, source: {ports: [ipset-1, ipset-2]}".into(),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -m set --match-set cali40ipset-1 src,src --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-2 src,src --jump MARK --set-mark 0x200/0x200",
                ALLOW_IF_ALL_MARK_AND_UDP_RULE,
            ],
        ),
        (
            "Multiple named + numeric ports",
            format!("protocol: TCP, source: {{ports: [{ranges}, ipset-1, ipset-2, ipset-3]}}"),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -p tcp -m multiport --source-ports 1:2,3:4,5:6,7:8,9:10,11:12,13:14 --jump MARK --set-mark 0x200/0x200",
                "-A test -p tcp -m multiport --source-ports 15:16 --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-1 src,src --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-2 src,src --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-3 src,src --jump MARK --set-mark 0x200/0x200",
                ALLOW_IF_ALL_MARK_AND_TCP_RULE,
            ],
        ),
        (
            "Overflow of numeric ports (source)",
            format!("protocol: UDP, source: {{ports: [{ranges}]}}"),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -p udp -m multiport --source-ports 1:2,3:4,5:6,7:8,9:10,11:12,13:14 --jump MARK --set-mark 0x200/0x200",
                "-A test -p udp -m multiport --source-ports 15:16 --jump MARK --set-mark 0x200/0x200",
                ALLOW_IF_ALL_MARK_AND_UDP_RULE,
            ],
        ),
        (
            "Named + numeric ports need a block (source)",
            "protocol: TCP, source: {ports: ['1:2', ipset-1]}".into(),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -p tcp -m multiport --source-ports 1:2 --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-1 src,src --jump MARK --set-mark 0x200/0x200",
                ALLOW_IF_ALL_MARK_AND_TCP_RULE,
            ],
        ),
        (
            "Single named port fits in rule",
            "protocol: TCP, destination: {ports: [ipset-1]}".into(),
            vec!["-A test -p tcp -m set --match-set cali40ipset-1 dst,dst --jump MARK --set-mark 0x80/0x80"],
        ),
        (
            "Two named ports need a block (destination)",
            "protocol: TCP, destination: {ports: [ipset-1, ipset-2]}".into(),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -m set --match-set cali40ipset-1 dst,dst --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-2 dst,dst --jump MARK --set-mark 0x200/0x200",
                ALLOW_IF_ALL_MARK_AND_TCP_RULE,
            ],
        ),
        (
            "Named + numeric ports need a block (destination)",
            "protocol: TCP, destination: {ports: ['1:2', ipset-1]}".into(),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -p tcp -m multiport --destination-ports 1:2 --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-1 dst,dst --jump MARK --set-mark 0x200/0x200",
                ALLOW_IF_ALL_MARK_AND_TCP_RULE,
            ],
        ),
        (
            "Positive source needs block only",
            "protocol: UDP, source: {ports: ['1:2', ipset-1]}, destination: {ports: ['3:4']}".into(),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -p udp -m multiport --source-ports 1:2 --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-1 src,src --jump MARK --set-mark 0x200/0x200",
                "-A test -p udp -m multiport --destination-ports 3:4 -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80",
            ],
        ),
        (
            "Positive dest needs block only",
            "protocol: TCP, source: {ports: ['1:2']}, destination: {ports: ['3:4', ipset-1]}".into(),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -p tcp -m multiport --destination-ports 3:4 --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-1 dst,dst --jump MARK --set-mark 0x200/0x200",
                "-A test -p tcp -m multiport --source-ports 1:2 -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80",
            ],
        ),
        (
            "Positive source and dest need blocks",
            "protocol: TCP, source: {ports: ['1:2', ipset-1]}, destination: {ports: ['3:4', ipset-2]}".into(),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -p tcp -m multiport --source-ports 1:2 --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-1 src,src --jump MARK --set-mark 0x200/0x200",
                "-A test -p tcp -m multiport --destination-ports 3:4 --jump MARK --set-mark 0x400/0x400",
                "-A test -m set --match-set cali40ipset-2 dst,dst --jump MARK --set-mark 0x400/0x400",
                ALL_BLOCKS_PASS_AND_EQ_THIS_BLOCK_PASS_RULE,
                ALLOW_IF_ALL_MARK_AND_TCP_RULE,
            ],
        ),
        (
            "Overflow of numeric ports (destination)",
            format!("protocol: UDP, destination: {{ports: [{ranges}]}}"),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -p udp -m multiport --destination-ports 1:2,3:4,5:6,7:8,9:10,11:12,13:14 --jump MARK --set-mark 0x200/0x200",
                "-A test -p udp -m multiport --destination-ports 15:16 --jump MARK --set-mark 0x200/0x200",
                ALLOW_IF_ALL_MARK_AND_UDP_RULE,
            ],
        ),
    ]
}

/// The named-port entries with negated ports, or with nets.
fn negated_named_port_entries() -> Vec<NamedPortEntry> {
    let ranges = EIGHT_RANGES;
    vec![
        (
            "Negated named + numeric ports rendered in single rule (source)",
            "protocol: TCP, source: {notPorts: ['1:2', ipset-1]}".into(),
            vec![
                "-A test -p tcp -m multiport ! --source-ports 1:2 -m set ! --match-set cali40ipset-1 src,src --jump MARK --set-mark 0x80/0x80",
            ],
        ),
        (
            "Multiple negated named + numeric ports rendered in single rule (source)",
            format!("protocol: TCP, source: {{notPorts: [{ranges}, ipset-1, ipset-2, ipset-3]}}"),
            vec![
                "-A test -p tcp -m multiport ! --source-ports 1:2,3:4,5:6,7:8,9:10,11:12,13:14 -m multiport ! --source-ports 15:16 -m set ! --match-set cali40ipset-1 src,src -m set ! --match-set cali40ipset-2 src,src -m set ! --match-set cali40ipset-3 src,src --jump MARK --set-mark 0x80/0x80",
            ],
        ),
        (
            "Negated named + numeric ports rendered in single rule (destination)",
            "protocol: TCP, destination: {notPorts: ['1:2', ipset-1]}".into(),
            vec![
                "-A test -p tcp -m multiport ! --destination-ports 1:2 -m set ! --match-set cali40ipset-1 dst,dst --jump MARK --set-mark 0x80/0x80",
            ],
        ),
        (
            "Multiple negated named + numeric ports rendered in single rule (destination)",
            format!(
                "protocol: UDP, destination: {{notPorts: [{ranges}, ipset-1, ipset-2, ipset-3]}}"
            ),
            vec![
                "-A test -p udp -m multiport ! --destination-ports 1:2,3:4,5:6,7:8,9:10,11:12,13:14 -m multiport ! --destination-ports 15:16 -m set ! --match-set cali40ipset-1 dst,dst -m set ! --match-set cali40ipset-2 dst,dst -m set ! --match-set cali40ipset-3 dst,dst --jump MARK --set-mark 0x80/0x80",
            ],
        ),
        (
            "numeric, named ports and CIDRs",
            format!(
                "protocol: TCP, source: {{ports: [{ranges}, ipset-1, ipset-2, ipset-3], nets: [10.1.0.0/16, 11.0.0.0/8]}}"
            ),
            vec![
                CLEAR_BOTH_MARKS_RULE,
                "-A test -p tcp -m multiport --source-ports 1:2,3:4,5:6,7:8,9:10,11:12,13:14 --jump MARK --set-mark 0x200/0x200",
                "-A test -p tcp -m multiport --source-ports 15:16 --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-1 src,src --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-2 src,src --jump MARK --set-mark 0x200/0x200",
                "-A test -m set --match-set cali40ipset-3 src,src --jump MARK --set-mark 0x200/0x200",
                "-A test --source 10.1.0.0/16 --jump MARK --set-mark 0x400/0x400",
                "-A test --source 11.0.0.0/8 --jump MARK --set-mark 0x400/0x400",
                ALL_BLOCKS_PASS_AND_EQ_THIS_BLOCK_PASS_RULE,
                ALLOW_IF_ALL_MARK_AND_TCP_RULE,
            ],
        ),
    ]
}

/// A policy file holding one Allow rule, with the named ports' host endpoint.
fn with_named_ports(fields: &str) -> String {
    format!("{}{NAMED_PORTS_ENDPOINT}", Variant::Allow.policy(fields))
}

/// Our chain for a one-Allow-rule policy, next to the named ports' host endpoint.
fn allow_chain(fields: &str, logging: bool) -> Vec<String> {
    let ruleset = compiled(&with_named_ports(fields), &config(logging));
    spelled(&chain(
        &ruleset,
        IpFamily::V4,
        Table::Filter,
        "npg-pi-default.foo",
    ))
}

/// Each entry (case, the Allow rule's fields, Felix's rules before the RETURN) gives Felix's
/// rules, with logging off and on.
fn allow_entries_render_as_felix(entries: &[(String, String, Vec<&str>)]) {
    let roles = our_roles();
    let mut differences = Vec::new();
    for (case, fields, rules) in entries {
        for logging in [false, true] {
            compare(
                &mut differences,
                || format!("{case}, logging {logging}"),
                &allow_chain(fields, logging),
                &with_allow_tail(rules, logging),
                (roles, FELIX_POLICY_MARKS),
            );
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[test]
fn named_port_tests_render_as_felix() {
    let mut entries = named_port_entries();
    entries.extend(negated_named_port_entries());
    assert_eq!(entries.len(), 17);
    let cases: Vec<(String, String, Vec<&str>)> = entries
        .into_iter()
        .map(|(upstream, fields, rules)| (format!("Named port {upstream:?}"), fields, rules))
        .collect();
    allow_entries_render_as_felix(&cases);
}

/// Felix's "positive and negatednumeric, named ports and CIDRs": four positive blocks, of which
/// the third and fourth only ever *set* scratch1, which the second left set: a packet on the
/// destination ports from outside the source nets is accepted. Calico's API says every field
/// must match, so we clear scratch1 before each positive block after the second. This test
/// fails if we ever render Felix's rules instead.
#[test]
fn positive_blocks_after_the_second_clear_scratch1_unlike_felix() {
    const CLEAR_THIS_BLOCK: &str = "-A test --jump MARK --set-mark 0/0x400";
    let felix: Vec<&str> = vec![
        CLEAR_BOTH_MARKS_RULE,
        "-A test -p tcp -m multiport --source-ports 1:2,3:4,5:6,7:8,9:10,11:12,13:14 --jump MARK --set-mark 0x200/0x200",
        "-A test -p tcp -m multiport --source-ports 15:16 --jump MARK --set-mark 0x200/0x200",
        "-A test -m set --match-set cali40ipset-1 src,src --jump MARK --set-mark 0x200/0x200",
        "-A test -p tcp -m multiport --destination-ports 2:3 --jump MARK --set-mark 0x400/0x400",
        "-A test -m set --match-set cali40ipset-2 dst,dst --jump MARK --set-mark 0x400/0x400",
        ALL_BLOCKS_PASS_AND_EQ_THIS_BLOCK_PASS_RULE,
        "-A test --source 10.1.0.0/16 --jump MARK --set-mark 0x400/0x400",
        "-A test --source 11.0.0.0/8 --jump MARK --set-mark 0x400/0x400",
        ALL_BLOCKS_PASS_AND_EQ_THIS_BLOCK_PASS_RULE,
        "-A test --destination 12.1.0.0/16 --jump MARK --set-mark 0x400/0x400",
        "-A test --destination 13.0.0.0/8 --jump MARK --set-mark 0x400/0x400",
        ALL_BLOCKS_PASS_AND_EQ_THIS_BLOCK_PASS_RULE,
        "-A test --source 14.1.0.0/16 --jump MARK --set-mark 0/0x200",
        "-A test --source 15.0.0.0/8 --jump MARK --set-mark 0/0x200",
        "-A test --destination 16.1.0.0/16 --jump MARK --set-mark 0/0x200",
        "-A test --destination 17.0.0.0/8 --jump MARK --set-mark 0/0x200",
        "-A test -p tcp -m multiport ! --source-ports 101 -m set ! --match-set cali40ipset-3 src,src -m multiport ! --destination-ports 201 -m set ! --match-set cali40ipset-4 dst,dst -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80",
    ];
    let fields = format!(
        "protocol: TCP, \
         source: {{ports: [{EIGHT_RANGES}, ipset-1], nets: [10.1.0.0/16, 11.0.0.0/8], \
                   notPorts: [101, ipset-3], notNets: [14.1.0.0/16, 15.0.0.0/8]}}, \
         destination: {{ports: ['2:3', ipset-2], nets: [12.1.0.0/16, 13.0.0.0/8], \
                        notPorts: [201, ipset-4], notNets: [16.1.0.0/16, 17.0.0.0/8]}}"
    );
    let roles = our_roles();
    let ours = allow_chain(&fields, false);
    let felix_rules = with_allow_tail(&felix, false);
    assert!(
        !same(&ours, &felix_rules, roles, FELIX_POLICY_MARKS),
        "we render Felix's rules, which accept packets that match only some positive blocks"
    );
    // Ours is Felix's with scratch1 cleared before the third and the fourth positive block.
    let mut expected = felix.clone();
    expected.insert(10, CLEAR_THIS_BLOCK);
    expected.insert(7, CLEAR_THIS_BLOCK);
    let expected = with_allow_tail(&expected, false);
    assert!(
        same(&ours, &expected, roles, FELIX_POLICY_MARKS),
        "{}",
        difference(
            "positive blocks",
            &ours,
            &expected,
            (roles, FELIX_POLICY_MARKS)
        )
    );
}

// ---------------------------------------------------------------------------------------------
// policy_test.go: staged policies

/// "Inbound deny rules should be correctly rendered within a staged policy" and its three
/// siblings: Felix programs nothing for a staged policy (its flow logs say what it would do).
/// We ship no flow logs, so a staged policy renders rules that only log (docs/felix.md): never
/// a drop, never an accept, whatever its rules say.
#[test]
fn staged_policies_render_logging_only_rules_unlike_felix() {
    for (action, list) in [
        ("Deny", "ingress"),
        ("Deny", "egress"),
        ("Allow", "ingress"),
        ("Allow", "egress"),
    ] {
        let types = if list == "ingress" {
            "Ingress"
        } else {
            "Egress"
        };
        let yaml = format!(
            "apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata: {{name: default.foo}}\nspec:\n  selector: all()\n  types: [{types}]\n  {list}:\n  - {{action: {action}, source: {{nets: [10.0.0.0/16]}}}}\n"
        );
        let ruleset = compiled(&yaml, &config(true));
        let staged: Vec<&ruleset::Rule> = ruleset
            .chains()
            .filter(|(_, _, chain)| chain.name.starts_with("npg-sp"))
            .flat_map(|(_, _, chain)| chain.rules.iter())
            .collect();
        assert!(!staged.is_empty(), "{action} {list}: Felix's nothing");
        assert!(
            staged.iter().any(|rule| matches!(
                rule.action,
                ruleset::Action::Nflog { ref prefix, .. } if prefix.contains("|staged:default.foo")
            )),
            "{action} {list}: logs as staged"
        );
        for rule in staged {
            assert!(
                !matches!(
                    rule.action,
                    ruleset::Action::Drop | ruleset::Action::NoTrack
                ),
                "{action} {list}: a staged rule that decides: {rule:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// nflogprefix_test.go

#[test]
fn nflog_prefixes_are_felixs_to_the_character() {
    // "CalculateNFLOGPrefixStr should return correct result": the policy entries (the profile
    // one is out of scope).
    let rules: [(char, Direction, usize, &str, &str, bool); 5] = [
        (
            'A',
            Direction::Ingress,
            0,
            "namespace1/default.policy",
            "API0|namespace1/default.policy",
            false,
        ),
        (
            'D',
            Direction::Egress,
            88,
            "01234567890123456789012345678901234567890123456789012345",
            "DPE88|01234567890123456789012345678901234567890123456789012345",
            false,
        ),
        (
            'D',
            Direction::Ingress,
            88,
            "012345678901234567890123456789012345678901234567890123456",
            "DPI88|0123_S7GBfc7R7_4bzrXpbzglqoJrRG_UxIP0CuYjRWshz_7890123456",
            true,
        ),
        (
            'D',
            Direction::Egress,
            1,
            "quite-a-long-namespace/quite-a-long-tier-name.quite-a-long-policy-name",
            "DPE1|quite_nnW4FYptgISH4G3jdI6KJWVcEx19s0BDp2On0wVAY_olicy-name",
            true,
        ),
        (
            'D',
            Direction::Egress,
            2,
            "quite-a-long-namespace/quite-a-long-tier-name.quite-a-long-policy-name2",
            "DPE2|quite_1G46uquk9ypeSpt4I-AIn1FSwWxCefDd8GEcuoxHP_licy-name2",
            true,
        ),
    ];
    for (action, direction, index, name, expected, hashed) in rules {
        let actual = nflog_prefix(action, direction, Some(index), name);
        assert_eq!(actual, expected, "{name}");
        assert_eq!(actual.len() == 63, hashed, "{actual}");
        assert!(actual.len() <= 63, "{actual}");
    }
    // "CalculateEndOfTierDropNFLOGPrefixStr should return correct result".
    let tiers: [(Direction, &str, &str); 3] = [
        (Direction::Egress, "tier-1", "DPE|tier-1"),
        (
            Direction::Ingress,
            "tier-01234567890123456789012345678901234567890123456789012",
            "DPI|tier-01234567890123456789012345678901234567890123456789012",
        ),
        (
            Direction::Ingress,
            "tier-012345678901234567890123456789012345678901234567890123",
            "DPI|tier-0_phEfG4Vhbq2xh4TQsePNa2X9YRj5peCVw1FgaNSbd_4567890123",
        ),
    ];
    for (direction, tier, expected) in tiers {
        assert_eq!(nflog_prefix('D', direction, None, tier), expected, "{tier}");
    }
}

/// The 63-character prefix of nflogprefix_test.go, from a policy file to the rule that logs it:
/// the compiled rule carries Felix's hashed prefix.
#[test]
fn a_sixty_three_character_prefix_is_hashed_in_the_rules() {
    let name = "012345678901234567890123456789012345678901234567890123456";
    let mut rules = String::new();
    for _ in 0..88 {
        rules.push_str("  - {action: Allow, protocol: TCP, destination: {ports: [1]}}\n");
    }
    rules.push_str("  - {action: Deny}\n");
    let yaml = format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {{name: \"{name}\"}}\nspec:\n  selector: all()\n  ingress:\n{rules}"
    );
    let hashed = "DPI88|0123_S7GBfc7R7_4bzrXpbzglqoJrRG_UxIP0CuYjRWshz_7890123456";
    let ruleset = compiled(&yaml, &Config::default());
    let logged: Vec<&str> = ruleset
        .chains()
        .flat_map(|(_, _, chain)| chain.rules.iter())
        .filter_map(|rule| match &rule.action {
            ruleset::Action::Nflog { prefix, .. } => Some(prefix.as_str()),
            _ => None,
        })
        .collect();
    assert!(logged.contains(&hashed), "{logged:#?}");
    // `drops` resolves it to its policy: `drops::prefix`'s unit tests.
}

// ---------------------------------------------------------------------------------------------
// endpoints_test.go: the NFLOG shapes of a host endpoint's chains

/// A host endpoint `eth0` of node1 (no profile) and one policy of `tier` selecting it, with a
/// rule in each direction (normal policy) or an ingress rule (pre-DNAT).
fn endpoint_policies(tier: &str, pre_dnat: bool) -> String {
    let mut yaml = String::from(
        "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata: {name: node1-eth0}\nspec: {node: node1, interfaceName: eth0, expectedIPs: [198.51.100.1]}\n",
    );
    if tier != "default" {
        yaml.push_str(&format!(
            "---\napiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {{name: {tier}}}\nspec: {{order: 100, defaultAction: Pass}}\n"
        ));
    }
    let name = if tier == "default" {
        "default.ai".to_owned()
    } else {
        format!("{tier}.ai")
    };
    let spec = if pre_dnat {
        "  preDNAT: true\n  applyOnForward: true\n  ingress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]\n"
    } else {
        "  ingress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]\n  egress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]\n"
    };
    yaml.push_str(&format!(
        "---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {{name: \"{name}\"}}\nspec:\n  tier: {tier}\n  selector: all()\n{spec}"
    ));
    yaml
}

/// The rules of an endpoint chain after its last policy: after the last "Return if policy
/// accepted", or after the last jump to a policy chain where that return would end the chain
/// and is left out (a return at the end of a chain is what falling off it does anyway).
fn after_the_policies(ruleset: &Ruleset, table: Table, name: &str) -> Vec<String> {
    let rules = chain(ruleset, IpFamily::V4, table, name);
    let returns = rules
        .iter()
        .rposition(|rule| rule.comment.as_deref() == Some("Return if policy accepted"));
    let jumps = rules.iter().rposition(|rule| {
        matches!(&rule.action, ruleset::Action::Jump(to) | ruleset::Action::Goto(to)
            if to.starts_with("npg-pi-") || to.starts_with("npg-po-"))
    });
    let last = returns
        .max(jumps)
        .unwrap_or_else(|| panic!("{name} jumps to no policy"));
    spelled(&rules[last + 1..])
}

/// One endpoint shape: (upstream test and fixture, tier, pre-DNAT, table, chain, logging,
/// Felix's rules after the last policy's return, for an endpoint without profiles).
type EndpointShape = (
    &'static str,
    &'static str,
    bool,
    Table,
    &'static str,
    bool,
    &'static [&'static str],
);

const ENDPOINT_SHAPES: &[EndpointShape] = &[
    (
        "with normal config: should render a host endpoint (cali-fh-eth0)",
        "default",
        false,
        Table::Filter,
        "npg-fh-eth0",
        false,
        &["-m mark --mark 0/0x10 --jump DROP", "--jump DROP"],
    ),
    (
        "with normal config: should render a host endpoint (cali-th-eth0)",
        "default",
        false,
        Table::Filter,
        "npg-th-eth0",
        false,
        &["-m mark --mark 0/0x10 --jump DROP", "--jump DROP"],
    ),
    (
        "with normal config and flow logs enabled: should render a host endpoint (cali-fh-eth0: nflogDefaultTierIngress, nflogProfileIngress)",
        "default",
        false,
        Table::Filter,
        "npg-fh-eth0",
        true,
        &[
            "-m mark --mark 0/0x10 --jump NFLOG --nflog-group 1 --nflog-prefix DPI|default --nflog-range 80",
            "-m mark --mark 0/0x10 --jump DROP",
            "--jump NFLOG --nflog-group 1 --nflog-prefix DRI --nflog-range 80",
            "--jump DROP",
        ],
    ),
    (
        "with normal config and flow logs enabled: should render a host endpoint (cali-th-eth0: nflogDefaultTierEgress, nflogProfileEgress)",
        "default",
        false,
        Table::Filter,
        "npg-th-eth0",
        true,
        &[
            "-m mark --mark 0/0x10 --jump NFLOG --nflog-group 2 --nflog-prefix DPE|default --nflog-range 80",
            "-m mark --mark 0/0x10 --jump DROP",
            "--jump NFLOG --nflog-group 2 --nflog-prefix DRE --nflog-range 80",
            "--jump DROP",
        ],
    ),
    (
        "with normal config: … tier DefaultAction is Pass (tier `pass-tier`)",
        "pass-tier",
        false,
        Table::Filter,
        "npg-fh-eth0",
        false,
        &["--jump DROP"],
    ),
    (
        "with normal config and flow logs enabled: … tier DefaultAction is Pass (nflogDefaultTierIngressWithPassAction, tier `pass-tier`)",
        "pass-tier",
        false,
        Table::Filter,
        "npg-fh-eth0",
        true,
        &[
            "-m mark --mark 0/0x10 --jump NFLOG --nflog-group 1 --nflog-prefix PPI|pass-tier --nflog-range 80",
            "--jump NFLOG --nflog-group 1 --nflog-prefix DRI --nflog-range 80",
            "--jump DROP",
        ],
    ),
    (
        "with normal config: should render host endpoint mangle chains with pre-DNAT policies",
        "default",
        true,
        Table::Mangle,
        "npg-fh-eth0",
        false,
        &[],
    ),
    (
        "with normal config and flow logs enabled: should render host endpoint mangle chains with pre-DNAT policies",
        "default",
        true,
        Table::Mangle,
        "npg-fh-eth0",
        true,
        &[],
    ),
];

#[test]
fn host_endpoint_nflog_shapes_are_felixs() {
    let roles = our_roles();
    let mut differences = Vec::new();
    for &(upstream, tier, pre_dnat, table, name, logging, felix) in ENDPOINT_SHAPES {
        let ruleset = compiled(&endpoint_policies(tier, pre_dnat), &config(logging));
        let ours = after_the_policies(&ruleset, table, name);
        let felix: Vec<String> = felix.iter().map(|rule| (*rule).to_owned()).collect();
        compare(
            &mut differences,
            || upstream.to_owned(),
            &ours,
            &felix,
            (roles, FELIX_ENDPOINT_MARKS),
        );
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The normaliser itself

#[test]
fn the_normaliser_makes_spellings_one_and_keeps_what_differs() {
    let felix = FELIX_POLICY_MARKS;
    let ours = our_roles();
    assert_eq!(
        normalise(
            &["-A test ! --source 11.0.0.0/24 -m mark --mark 0x200/0x200 --jump MARK --set-mark 0x80/0x80".into()],
            felix
        ),
        normalise(
            &[format!(
                "! -s 11.0.0.0/24 -m comment --comment \"npg:x policy default.foo ingress rule 0\" -m mark --mark {:#x}/{:#x} -j MARK --set-xmark {:#x}/{:#x}",
                ours.scratch0, ours.scratch0, ours.accept, ours.accept
            )],
            ours
        )
    );
    // A negation, a net, a mark role, a prefix or a match order that differ stay different.
    let base =
        "-p tcp -m multiport --dports 80 -m set --match-set a src -j MARK --set-xmark 0x80/0x80";
    for other in [
        "-p tcp -m multiport ! --dports 80 -m set --match-set a src -j MARK --set-xmark 0x80/0x80",
        "-p udp -m multiport --dports 80 -m set --match-set a src -j MARK --set-xmark 0x80/0x80",
        "-p tcp -m set --match-set a src -m multiport --dports 80 -j MARK --set-xmark 0x80/0x80",
        "-p tcp -m multiport --dports 80 -m set --match-set a src -j MARK --set-xmark 0x100/0x100",
    ] {
        assert_ne!(
            normalise(&[base.into()], felix),
            normalise(&[other.into()], felix),
            "{other}"
        );
    }
    assert_ne!(
        normalise(
            &["-j NFLOG --nflog-prefix DPI|a --nflog-group 1".into()],
            felix
        ),
        normalise(
            &["-j NFLOG --nflog-prefix DPI|b --nflog-group 1".into()],
            felix
        )
    );
}
