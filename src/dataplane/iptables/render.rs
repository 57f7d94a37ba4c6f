//! `iptables-restore` text for a [`Ruleset`].
//!
//! Every rule we write carries one comment, `-m comment --comment "npg:<hash> <words>"`, where
//! the hash covers the table, the chain and the rest of the rule with its words; rules are
//! compared by these hashes. Rules are written in the order and spelling `iptables-save`
//! prints them back (the addresses,
//! interfaces and protocol of the IP header first, then the matches in the order given, then
//! the target with its options in iptables' order), so a rule read back reads exactly as it was
//! rendered and a plan's diff shows only what changed.

use std::fmt::Write as _;

use crate::model::IpFamily;
use crate::ruleset::{
    Action, Chain, CtState, Hook, Match, Rule, SetLookup, Side, Table, TableRuleset,
};
use crate::ruleset::{DEFAULT_KERNEL_LOG_LEVEL, NFLOG_SIZE, Ruleset, sanitize_comment};
use crate::state::{HASH_LENGTH, HASH_PREFIX, RenderedRule, rule_hash};

/// A string option as `iptables-save` prints it (libxtables' `xtables_save_string`): bare when
/// it is only letters, digits, `_` and `-`, else in double quotes with `"`, `\\` and `'`
/// escaped. `text` is sanitized already.
pub(crate) fn push_saved_string(out: &mut String, text: &str) {
    let bare = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        out.push_str(text);
        return;
    }
    out.push('"');
    for c in text.chars() {
        if matches!(c, '"' | '\\' | '\'') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
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
pub fn render_match(out: &mut String, matched: &Match) {
    match matched {
        Match::Protocol { number, negated } => {
            let _ = write!(
                out,
                " {}-p {}",
                bang(*negated),
                crate::ruleset::protocol_text(*number)
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
        Match::TcpSyn => out.push_str(" -m tcp --tcp-flags SYN,ACK SYN"),
        Match::InInterface(name) => {
            let _ = write!(out, " -i {name}");
        }
        Match::NotInInterface(name) => {
            let _ = write!(out, " ! -i {name}");
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
            out.push_str(" -j NFLOG --nflog-prefix ");
            push_saved_string(out, &sanitize_comment(prefix));
            let _ = write!(
                out,
                " --nflog-group {group} --nflog-size {NFLOG_SIZE} --nflog-threshold 1"
            );
        }
        Action::Log { prefix, level } => {
            out.push_str(" -j LOG --log-prefix ");
            push_saved_string(out, &sanitize_comment(prefix));
            if *level != DEFAULT_KERNEL_LOG_LEVEL {
                let _ = write!(out, " --log-level {level}");
            }
        }
        Action::NoTrack => out.push_str(" -j CT --notrack"),
    }
}

/// Where `iptables-save` prints a match of the IP header (`-s`, `-d`, `-i`, `-o`, `-p`, in
/// that order, before every `-m` match); `None` for the others, which it prints in the order
/// they were given.
fn header_position(matched: &Match) -> Option<u8> {
    match matched {
        Match::Net {
            side: Side::Source, ..
        } => Some(0),
        Match::Net {
            side: Side::Destination,
            ..
        } => Some(1),
        Match::InInterface(_) | Match::NotInInterface(_) => Some(2),
        Match::OutInterface(_) => Some(3),
        Match::Protocol { .. } => Some(4),
        _ => None,
    }
}

/// A rule in `iptables-save`'s spelling, in three parts: the IP header matches (which come
/// before our comment, as iptables prints them), the rule's words (sanitized), and the other
/// matches with the action.
pub fn rule_parts(rule: &Rule) -> (String, Option<String>, String) {
    let mut header: Vec<(u8, &Match)> = rule
        .matches
        .iter()
        .filter_map(|matched| header_position(matched).map(|position| (position, matched)))
        .collect();
    header.sort_by_key(|(position, _)| *position);
    let mut head = String::new();
    for (_, matched) in header {
        render_match(&mut head, matched);
    }
    let words = rule.comment.as_deref().map(sanitize_comment);
    let mut tail = String::new();
    let syn_port = syn_port(rule);
    for (at, matched) in rule.matches.iter().enumerate() {
        match (matched, syn_port) {
            (Match::TcpSyn, Some((_, port))) => {
                let _ = write!(tail, " -m tcp --dport {port} --tcp-flags SYN,ACK SYN");
            }
            (_, Some((folded, _))) if at == folded => {}
            _ if header_position(matched).is_none() => render_match(&mut tail, matched),
            _ => {}
        }
    }
    render_action(&mut tail, &rule.action);
    (head, words, tail)
}

/// The destination port (one port or one range, not negated) of a rule that matches a TCP
/// SYN, with where its `Ports` match is: written as `--dport` of the SYN's own `-m tcp` match,
/// as `iptables-save` prints the two together, rather than as a `multiport` match. In the
/// early drop's decision rule, which every SYN to a guarded port meets before connection
/// tracking, that is one match fewer, and on iptables-nft a native `tcp dport` instead of an
/// xt compatibility match. Not for `0:65535`, which `iptables-save` leaves out of the line.
fn syn_port(rule: &Rule) -> Option<(usize, crate::ruleset::PortRange)> {
    if !rule.matches.contains(&Match::TcpSyn) {
        return None;
    }
    let mut ports = rule
        .matches
        .iter()
        .enumerate()
        .filter_map(|(at, matched)| match matched {
            Match::Ports {
                side: Side::Destination,
                ports,
                negated: false,
            } => Some((at, ports)),
            _ => None,
        });
    let (at, ports) = ports.next()?;
    match ports.as_slice() {
        [port] if port.first != 0 || port.last != u16::MAX => Some((at, *port)),
        _ => None,
    }
}

/// Renders a rule of one of our chains, with one comment: `npg:<hash>`, then the rule's words.
///
/// Each `-m comment` is a match of its own in the kernel: 256 bytes of every rule's entry in
/// an x_tables blob, and one more call per packet (iptables-nft keeps it as an xt compat
/// expression). One comment per rule instead of two (hash, words) made the whole-table
/// replace of iptables-legacy a third cheaper at 1,000 policies. The hash still covers the
/// words as a comment of their own, as it did when they were one: a rule keeps its identity.
pub fn render_rule(table: Table, chain: &str, rule: &Rule, _family: IpFamily) -> RenderedRule {
    let (head, mut words, tail) = rule_parts(rule);
    // The words as the comment can hold them after `npg:<hash> ` (the kernel keeps 255
    // characters): the hash covers what is written, so that a rule read back hashes to it.
    if let Some(words) = &mut words {
        words.truncate(crate::ruleset::MAX_COMMENT - HASH_PREFIX.len() - HASH_LENGTH - 1);
    }
    let mut body = String::with_capacity(head.len() + tail.len() + 64);
    body.push_str(&head);
    if let Some(words) = &words {
        body.push_str(" -m comment --comment ");
        push_saved_string(&mut body, words);
    }
    body.push_str(&tail);
    let hash = rule_hash(table, chain, &body);
    let mut comment = String::with_capacity(HASH_PREFIX.len() + hash.len() + 1 + 64);
    comment.push_str(HASH_PREFIX);
    comment.push_str(&hash);
    if let Some(words) = &words {
        comment.push(' ');
        comment.push_str(words);
        // Sanitized text is ASCII: any byte is a character boundary.
        comment.truncate(crate::ruleset::MAX_COMMENT);
    }
    let mut line =
        String::with_capacity(chain.len() + head.len() + comment.len() + tail.len() + 32);
    line.push_str("-A ");
    line.push_str(chain);
    line.push_str(&head);
    line.push_str(" -m comment --comment ");
    push_saved_string(&mut line, &comment);
    line.push_str(&tail);
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

/// The rules of a chain without their hash comments and with their matches in the order the
/// compiler wrote them (not `iptables-save`'s): how the compiler's tests read a chain.
#[cfg(test)]
pub fn compiled_rules(chain: &Chain) -> Vec<String> {
    chain
        .rules
        .iter()
        .map(|rule| {
            let mut line = format!("-A {}", chain.name);
            if let Some(comment) = &rule.comment {
                line.push_str(" -m comment --comment ");
                push_saved_string(&mut line, &sanitize_comment(comment));
            }
            for matched in &rule.matches {
                render_match(&mut line, matched);
            }
            render_action(&mut line, &rule.action);
            line
        })
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
