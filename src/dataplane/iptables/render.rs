//! `iptables-restore` text for a [`Ruleset`].
//!
//! Every rule we write starts with `-m comment --comment "npg:<hash>"`, where the hash covers
//! the table, the chain and the rest of the rule. `iptables-save` prints rules back in its own
//! order and spelling, so we never compare rule text: we compare these hashes.

use std::fmt::Write as _;

use crate::model::IpFamily;
use crate::ruleset::{
    Action, Chain, CtState, Hook, Match, Rule, SetLookup, Side, Table, TableRuleset,
};
use crate::ruleset::{NFLOG_SIZE, Ruleset, push_sanitized, sanitize_comment};
use crate::state::{HASH_PREFIX, RenderedRule, rule_hash};

fn protocol_name(number: u8, family: IpFamily) -> String {
    match (number, family) {
        (6, _) => "tcp".into(),
        (17, _) => "udp".into(),
        (1, _) => "icmp".into(),
        (58, IpFamily::V6) => "ipv6-icmp".into(),
        (132, _) => "sctp".into(),
        (136, _) => "udplite".into(),
        (other, _) => other.to_string(),
    }
}

fn hex(value: u32) -> String {
    format!("{value:#x}")
}

fn side_flag(side: Side, source: &'static str, destination: &'static str) -> &'static str {
    match side {
        Side::Source => source,
        Side::Destination => destination,
    }
}

fn bang(negated: bool) -> &'static str {
    if negated { "! " } else { "" }
}

/// The match part of a rule.
pub fn render_match(out: &mut String, matched: &Match, family: IpFamily) {
    match matched {
        Match::Protocol { number, negated } => {
            let _ = write!(
                out,
                " {}-p {}",
                bang(*negated),
                protocol_name(*number, family)
            );
        }
        Match::Net { side, net, negated } => {
            let _ = write!(
                out,
                " {}{} {net}",
                bang(*negated),
                side_flag(*side, "-s", "-d")
            );
        }
        Match::Set {
            side,
            name,
            lookup,
            negated,
        } => {
            let direction = side_flag(*side, "src", "dst");
            let flags = match lookup {
                SetLookup::Address => direction.to_owned(),
                SetLookup::AddressPort => format!("{direction},{direction}"),
            };
            let _ = write!(out, " -m set {}--match-set {name} {flags}", bang(*negated));
        }
        Match::Ports {
            side,
            ports,
            negated,
        } => {
            let list: Vec<String> = ports.iter().map(ToString::to_string).collect();
            let _ = write!(
                out,
                " -m multiport {}{} {}",
                bang(*negated),
                side_flag(*side, "--sports", "--dports"),
                list.join(",")
            );
        }
        Match::Icmp {
            family: icmp_family,
            icmp_type,
            code,
            negated,
        } => {
            let value = match code {
                Some(code) => format!("{icmp_type}/{code}"),
                None => icmp_type.to_string(),
            };
            match icmp_family {
                IpFamily::V4 => {
                    let _ = write!(out, " -m icmp {}--icmp-type {value}", bang(*negated));
                }
                IpFamily::V6 => {
                    let _ = write!(out, " -m icmp6 {}--icmpv6-type {value}", bang(*negated));
                }
            }
        }
        Match::Mark {
            value,
            mask,
            negated,
        } => {
            let _ = write!(
                out,
                " -m mark {}--mark {}/{}",
                bang(*negated),
                hex(*value),
                hex(*mask)
            );
        }
        Match::Conntrack(state) => {
            let states = match state {
                CtState::RelatedEstablished => "RELATED,ESTABLISHED",
                CtState::Invalid => "INVALID",
            };
            let _ = write!(out, " -m conntrack --ctstate {states}");
        }
        Match::InInterface(name) => {
            let _ = write!(out, " -i {name}");
        }
        Match::OutInterface(name) => {
            let _ = write!(out, " -o {name}");
        }
    }
}

/// The action part of a rule.
pub fn render_action(out: &mut String, action: &Action) {
    match action {
        Action::Return => out.push_str(" -j RETURN"),
        Action::Drop => out.push_str(" -j DROP"),
        Action::Jump(chain) => {
            let _ = write!(out, " -j {chain}");
        }
        Action::Goto(chain) => {
            let _ = write!(out, " -g {chain}");
        }
        Action::SetMark { value, mask } => {
            let _ = write!(out, " -j MARK --set-xmark {}/{}", hex(*value), hex(*mask));
        }
        Action::Nflog { group, prefix } => {
            let _ = write!(out, " -j NFLOG --nflog-group {group} --nflog-prefix \"");
            push_sanitized(out, prefix);
            let _ = write!(out, "\" --nflog-size {NFLOG_SIZE} --nflog-threshold 1");
        }
        Action::NoTrack => out.push_str(" -j CT --notrack"),
    }
}

/// Everything of a rule after its hash comment: the words comment, matches and action.
pub fn rule_body(rule: &Rule, family: IpFamily) -> String {
    let mut body = String::new();
    if let Some(comment) = &rule.comment {
        let _ = write!(
            body,
            " -m comment --comment \"{}\"",
            sanitize_comment(comment)
        );
    }
    for matched in &rule.matches {
        render_match(&mut body, matched, family);
    }
    render_action(&mut body, &rule.action);
    body
}

/// Renders a rule of one of our chains.
pub fn render_rule(table: Table, chain: &str, rule: &Rule, family: IpFamily) -> RenderedRule {
    let body = rule_body(rule, family);
    let hash = rule_hash(table, chain, &body);
    let mut line = String::with_capacity(chain.len() + body.len() + 48);
    line.push_str("-A ");
    line.push_str(chain);
    line.push_str(" -m comment --comment \"");
    line.push_str(HASH_PREFIX);
    line.push_str(&hash);
    line.push('"');
    line.push_str(&body);
    RenderedRule { line, hash }
}

/// Renders the jump from a kernel chain into ours, as an `-A` line (callers turn it into
/// `-I <chain> 1` when inserting).
pub fn render_hook(table: Table, hook: &Hook) -> RenderedRule {
    let body = format!(" -j {}", hook.target);
    let hash = rule_hash(table, &hook.kernel_chain, &body);
    RenderedRule {
        line: format!(
            "-A {} -m comment --comment \"{HASH_PREFIX}{hash}\"{body}",
            hook.kernel_chain
        ),
        hash,
    }
}

/// The rendered rules of one chain.
pub fn render_chain(table: Table, chain: &Chain, family: IpFamily) -> Vec<RenderedRule> {
    chain
        .rules
        .iter()
        .map(|rule| render_rule(table, &chain.name, rule, family))
        .collect()
}

/// `iptables-restore --noflush` input that creates one table's chains and hooks from nothing.
pub fn render_table(table: &TableRuleset, family: IpFamily) -> String {
    let mut out = format!("*{}\n", table.table);
    for chain in &table.chains {
        let _ = writeln!(out, ":{} - [0:0]", chain.name);
    }
    for chain in &table.chains {
        for rule in render_chain(table.table, chain, family) {
            out.push_str(&rule.line);
            out.push('\n');
        }
    }
    for hook in &table.hooks {
        let rendered = render_hook(table.table, hook);
        let line = rendered.line.replacen(
            &format!("-A {} ", hook.kernel_chain),
            &format!("-I {} 1 ", hook.kernel_chain),
            1,
        );
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("COMMIT\n");
    out
}

/// The whole desired state as `ipset restore` and `iptables-restore` text, in the order it
/// would be loaded, with `#` headers saying what each part is for.
pub fn render_all(ruleset: &Ruleset) -> String {
    let mut out = String::new();
    let sets: Vec<_> = ruleset
        .families
        .iter()
        .flat_map(|family| family.sets.iter().cloned())
        .collect();
    if !sets.is_empty() {
        out.push_str("# ipset restore\n");
        out.push_str(&super::ipset::render_sets(&sets));
    }
    // Each table renders on a thread of its own; the texts are joined in order.
    let pieces: Vec<(IpFamily, &TableRuleset)> = ruleset
        .families
        .iter()
        .flat_map(|family| {
            family
                .tables
                .iter()
                .map(move |table| (family.family, table))
        })
        .collect();
    let tables = crate::parallel::map(pieces, |(family, table)| {
        let tool = match family {
            IpFamily::V4 => "iptables-restore",
            IpFamily::V6 => "ip6tables-restore",
        };
        format!(
            "# {tool} --noflush ({family}, table {})\n{}",
            table.table,
            render_table(table, family)
        )
    });
    for text in tables {
        out.push_str(&text);
    }
    if out.is_empty() {
        out.push_str("# no policy applies to this host: nothing to load\n");
    }
    out
}
