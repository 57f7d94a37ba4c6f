//! `nft -f` text for a [`Ruleset`]: the native nftables backend.
//!
//! Each family gets one table, `ip nodeport_guard` or `ip6 nodeport_guard`. The iptables
//! tables become a letter in the chain names (`npg-pi-m` of mangle is `npg-m-pi-m`, of raw
//! `npg-r-pi-m`, of filter `npg-f-…`), and each hooked kernel chain becomes a base chain of ours
//! (`npg-mangle-PREROUTING`) at one less than the iptables priority of its table:
//!
//! | iptables            | our base chain          | hook        | priority           |
//! |---------------------|-------------------------|-------------|--------------------|
//! | raw PREROUTING      | `npg-raw-PREROUTING`    | prerouting  | raw − 1 (−301)     |
//! | mangle PREROUTING   | `npg-mangle-PREROUTING` | prerouting  | mangle − 1 (−151)  |
//! | filter INPUT        | `npg-filter-INPUT`      | input       | filter − 1 (−1)    |
//! | filter FORWARD      | `npg-filter-FORWARD`    | forward     | filter − 1 (−1)    |
//! | filter OUTPUT       | `npg-filter-OUTPUT`     | output      | filter − 1 (−1)    |
//! | raw OUTPUT          | `npg-raw-OUTPUT`        | output      | raw − 1 (−301)     |
//!
//! So our chains see a packet before iptables-nft's (kube-proxy's, docker's) chains of the
//! same stage, and the pre-DNAT chain runs after connection tracking (−200) and before DNAT
//! (−100), exactly where the iptables backends put it. Our chains never accept: a packet they
//! let through goes on to every other table; a drop is final.
//!
//! Every rule carries `counter` (for `status`) and a comment starting `npg:<hash>`.

use std::fmt::Write as _;

use crate::model::IpFamily;
use crate::ruleset::{
    Action, Chain, CtState, Hook, IpSet, Match, PortRange, Rule, Ruleset, SetKind, SetLookup,
    SetMember, Side, Table,
};
use crate::ruleset::{CHAIN_PREFIX, DEFAULT_KERNEL_LOG_LEVEL, NFLOG_SIZE, sanitize_comment};
use crate::state::{HASH_LENGTH, HASH_PREFIX, RenderedRule, rule_hash};

/// The name of our table in every family.
pub const TABLE: &str = "nodeport_guard";
/// Longest comment nftables keeps.
pub const MAX_COMMENT: usize = 128;

/// `ip` or `ip6`.
pub fn family_name(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "ip",
        IpFamily::V6 => "ip6",
    }
}

/// The letter of an iptables table in the names of our nft chains.
fn table_letter(table: Table) -> char {
    match table {
        Table::Raw => 'r',
        Table::Mangle => 'm',
        Table::Filter => 'f',
    }
}

/// The nft chain holding one of our iptables-shaped chains: `npg-pi-m` of mangle is
/// `npg-m-pi-m`. A name that is not ours (see [`split_chain_name`]) stays as it is.
pub fn chain_name(table: Table, chain: &str) -> String {
    match chain.strip_prefix(CHAIN_PREFIX) {
        Some(rest) => format!("{CHAIN_PREFIX}{}-{rest}", table_letter(table)),
        None => chain.to_owned(),
    }
}

/// The base chain standing for a kernel chain's hook: `npg-mangle-PREROUTING`.
pub fn base_chain_name(table: Table, kernel_chain: &str) -> String {
    format!("{CHAIN_PREFIX}{table}-{kernel_chain}")
}

/// The kernel chains whose hooks our base chains stand for.
pub const KERNEL_CHAINS: [&str; 4] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT"];

/// The inverse of [`chain_name`] and [`base_chain_name`]: the table and our chain name (or
/// the kernel chain, for a base chain). A name of neither form (an older release's
/// `mangle-npg-pi-m`, or one written by hand, also `npg-foo`) is filed under filter as a name
/// that does not begin with `npg-` ([`FOREIGN_MARK`] goes before one that does), so that the
/// plan rebuilds the table without it (see `renamed_families`): no name the plan writes would
/// reach it.
pub fn split_chain_name(name: &str) -> (Table, String) {
    if let Some(rest) = name.strip_prefix(CHAIN_PREFIX) {
        for table in Table::ALL {
            if let Some(kernel_chain) = rest.strip_prefix(table.as_str())
                && let Some(kernel_chain) = kernel_chain.strip_prefix('-')
            {
                return (table, kernel_chain.to_owned());
            }
        }
    }
    for table in Table::ALL {
        if let Some(rest) = name
            .strip_prefix(CHAIN_PREFIX)
            .and_then(|rest| rest.strip_prefix(table_letter(table)))
            .and_then(|rest| rest.strip_prefix('-'))
        {
            return (table, format!("{CHAIN_PREFIX}{rest}"));
        }
    }
    if name.starts_with(CHAIN_PREFIX) {
        return (Table::Filter, format!("{FOREIGN_MARK}{name}"));
    }
    (Table::Filter, name.to_owned())
}

/// What [`split_chain_name`] puts before a name that begins like ours but is of neither of our
/// forms.
pub const FOREIGN_MARK: &str = "?";

/// Hook and priority of the base chain for a kernel chain of a table.
pub fn hook_of(table: Table, kernel_chain: &str) -> (&'static str, i32) {
    let hook = match kernel_chain {
        "PREROUTING" => "prerouting",
        "INPUT" => "input",
        "FORWARD" => "forward",
        _ => "output",
    };
    let priority = match table {
        Table::Raw => -301,
        Table::Mangle => -151,
        Table::Filter => -1,
    };
    (hook, priority)
}

/// What identifies a base chain of ours: its hook, priority, policy and the chain it jumps to.
/// Observing computes the same text from the kernel's answer.
pub fn hook_identity(hook: &str, priority: i64, policy: &str, target: &str) -> String {
    format!("hook {hook} priority {priority} policy {policy} jump {target}")
}

/// The comment of a rule: the hash, then the words, cut to what nftables keeps.
fn comment(hash: &str, words: Option<&str>) -> String {
    let mut text = format!("{}{hash}", HASH_PREFIX);
    if let Some(words) = words {
        text.push(' ');
        text.push_str(&sanitize_comment(words));
    }
    text.truncate(MAX_COMMENT - 1);
    text
}

fn address_word(family: IpFamily) -> &'static str {
    family_name(family)
}

fn side_word(side: Side) -> (&'static str, &'static str) {
    match side {
        Side::Source => ("saddr", "sport"),
        Side::Destination => ("daddr", "dport"),
    }
}

fn operator(negated: bool) -> &'static str {
    if negated { "!= " } else { "" }
}

/// The protocols whose ports nft names after them (`tcp dport 22`).
fn ported_protocol(number: u8) -> Option<&'static str> {
    match number {
        6 => Some("tcp"),
        17 => Some("udp"),
        132 => Some("sctp"),
        136 => Some("udplite"),
        _ => None,
    }
}

/// ICMP types by the names `nft list` prints.
fn icmp_type_name(family: IpFamily, number: u8) -> String {
    let name = match (family, number) {
        (IpFamily::V4, 0) => "echo-reply",
        (IpFamily::V4, 3) => "destination-unreachable",
        (IpFamily::V4, 4) => "source-quench",
        (IpFamily::V4, 5) => "redirect",
        (IpFamily::V4, 8) => "echo-request",
        (IpFamily::V4, 9) => "router-advertisement",
        (IpFamily::V4, 10) => "router-solicitation",
        (IpFamily::V4, 11) => "time-exceeded",
        (IpFamily::V4, 12) => "parameter-problem",
        (IpFamily::V4, 13) => "timestamp-request",
        (IpFamily::V4, 14) => "timestamp-reply",
        (IpFamily::V4, 15) => "info-request",
        (IpFamily::V4, 16) => "info-reply",
        (IpFamily::V4, 17) => "address-mask-request",
        (IpFamily::V4, 18) => "address-mask-reply",
        (IpFamily::V6, 1) => "destination-unreachable",
        (IpFamily::V6, 2) => "packet-too-big",
        (IpFamily::V6, 3) => "time-exceeded",
        (IpFamily::V6, 4) => "parameter-problem",
        (IpFamily::V6, 128) => "echo-request",
        (IpFamily::V6, 129) => "echo-reply",
        (IpFamily::V6, 130) => "mld-listener-query",
        (IpFamily::V6, 131) => "mld-listener-report",
        (IpFamily::V6, 132) => "mld-listener-done",
        (IpFamily::V6, 133) => "nd-router-solicit",
        (IpFamily::V6, 134) => "nd-router-advert",
        (IpFamily::V6, 135) => "nd-neighbor-solicit",
        (IpFamily::V6, 136) => "nd-neighbor-advert",
        (IpFamily::V6, 137) => "nd-redirect",
        (IpFamily::V6, 138) => "router-renumbering",
        (IpFamily::V6, 141) => "ind-neighbor-solicit",
        (IpFamily::V6, 142) => "ind-neighbor-advert",
        (IpFamily::V6, 143) => "mld2-listener-report",
        _ => return number.to_string(),
    };
    name.to_owned()
}

/// ICMP codes by the names `nft list` prints (whatever the type).
fn icmp_code_name(family: IpFamily, number: u8) -> String {
    let name = match (family, number) {
        (IpFamily::V4, 0) => "net-unreachable",
        (IpFamily::V4, 1) => "host-unreachable",
        (IpFamily::V4, 2) => "prot-unreachable",
        (IpFamily::V4, 3) => "port-unreachable",
        (IpFamily::V4, 4) => "frag-needed",
        (IpFamily::V4, 9) => "net-prohibited",
        (IpFamily::V4, 10) => "host-prohibited",
        (IpFamily::V4, 13) => "admin-prohibited",
        (IpFamily::V6, 0) => "no-route",
        (IpFamily::V6, 1) => "admin-prohibited",
        (IpFamily::V6, 3) => "addr-unreachable",
        (IpFamily::V6, 4) => "port-unreachable",
        (IpFamily::V6, 5) => "policy-fail",
        (IpFamily::V6, 6) => "reject-route",
        _ => return number.to_string(),
    };
    name.to_owned()
}

/// A network as nft prints it: a single address without its prefix length.
fn net_text(net: &ipnet::IpNet) -> String {
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

/// What a rule's protocol match becomes: nft folds `meta l4proto tcp` into the ports or ICMP
/// matches after it (`tcp dport 22`, `icmp type echo-request`) and prints it only otherwise.
fn folded_protocol(matches: &[Match], family: IpFamily) -> Option<&'static str> {
    let number = matches.iter().find_map(|matched| match matched {
        Match::Protocol {
            number,
            negated: false,
        } => Some(*number),
        _ => None,
    })?;
    let folds_into = |matched: &Match| match matched {
        Match::Ports { .. }
        | Match::Set {
            lookup: SetLookup::AddressPort,
            ..
        } => ported_protocol(number).is_some(),
        Match::TcpSyn => number == 6,
        Match::Icmp {
            family: icmp_family,
            ..
        } => {
            *icmp_family == family
                && matches!((family, number), (IpFamily::V4, 1) | (IpFamily::V6, 58))
        }
        _ => false,
    };
    if !matches.iter().any(folds_into) {
        return None;
    }
    match number {
        1 => Some("icmp"),
        58 => Some("icmpv6"),
        other => ported_protocol(other),
    }
}

/// The transport header a port is read from: named after the folded protocol (`tcp dport`),
/// else the generic `th`.
fn ported_header(protocol: Option<&'static str>) -> &'static str {
    match protocol {
        Some(word) if !matches!(word, "icmp" | "icmpv6") => word,
        _ => "th",
    }
}

/// A match in `nft list`'s spelling; `protocol` is the protocol folded into ports and ICMP
/// matches (see [`folded_protocol`]).
fn render_match(
    out: &mut String,
    matched: &Match,
    family: IpFamily,
    protocol: Option<&'static str>,
    unmergeable: bool,
) {
    match matched {
        Match::Protocol { number, negated } => {
            if protocol.is_some() && !*negated {
                return;
            }
            let _ = write!(
                out,
                " meta l4proto {}{}",
                operator(*negated),
                crate::ruleset::protocol_text(*number)
            );
        }
        Match::Net { side, net, negated } => {
            let _ = write!(
                out,
                " {} {} {}{}",
                address_word(family),
                side_word(*side).0,
                operator(*negated),
                net_text(net)
            );
        }
        Match::Set {
            side,
            name,
            lookup,
            negated,
        } => {
            let (address, port) = side_word(*side);
            match lookup {
                SetLookup::Address => {
                    let _ = write!(
                        out,
                        " {} {address} {}@{name}",
                        address_word(family),
                        operator(*negated)
                    );
                }
                SetLookup::AddressPort => {
                    let _ = write!(
                        out,
                        " {} {address} . meta l4proto . {} {port} {}@{name}",
                        address_word(family),
                        ported_header(protocol),
                        operator(*negated)
                    );
                }
            }
        }
        Match::Ports {
            side,
            ports,
            negated,
        } => {
            let degenerate_range = unmergeable && *negated && *side == Side::Destination;
            let list: Vec<String> = listed_ports(ports)
                .iter()
                .map(|p| {
                    if p.first == p.last && !degenerate_range {
                        p.first.to_string()
                    } else {
                        format!("{}-{}", p.first, p.last)
                    }
                })
                .collect();
            let header = ported_header(protocol);
            // One element is written as a value (nft would make a set of one a value anyway);
            // more are an anonymous set.
            let values = match list.as_slice() {
                [one] => one.clone(),
                _ => format!("{{ {} }}", list.join(", ")),
            };
            let _ = write!(
                out,
                " {header} {} {}{values}",
                side_word(*side).1,
                operator(*negated),
            );
        }
        Match::Icmp {
            family: icmp_family,
            icmp_type,
            code,
            negated,
        } => {
            let word = match icmp_family {
                IpFamily::V4 => "icmp",
                IpFamily::V6 => "icmpv6",
            };
            let type_name = icmp_type_name(*icmp_family, *icmp_type);
            match code {
                Some(code) if *negated => {
                    let code = icmp_code_name(*icmp_family, *code);
                    let _ = write!(
                        out,
                        " {word} type . {word} code != {{ {type_name} . {code} }}"
                    );
                }
                Some(code) => {
                    let code = icmp_code_name(*icmp_family, *code);
                    let _ = write!(out, " {word} type {type_name} {word} code {code}");
                }
                None => {
                    let _ = write!(out, " {word} type {}{type_name}", operator(*negated));
                }
            }
        }
        Match::Mark {
            value,
            mask,
            negated,
        } => {
            let comparison = if *negated { "!=" } else { "==" };
            let _ = write!(out, " meta mark & {mask:#010x} {comparison} {value:#010x}");
        }
        Match::Conntrack(state) => {
            let states = match state {
                CtState::RelatedEstablished => "established,related",
                CtState::Invalid => "invalid",
            };
            let _ = write!(out, " ct state {states}");
        }
        Match::TcpSyn => out.push_str(" tcp flags syn / syn,ack"),
        Match::InInterface(name) => {
            let _ = write!(out, " iifname \"{}\"", name.replace('+', "*"));
        }
        Match::NotInInterface(name) => {
            let _ = write!(out, " iifname != \"{}\"", name.replace('+', "*"));
        }
        Match::OutInterface(name) => {
            let _ = write!(out, " oifname \"{}\"", name.replace('+', "*"));
        }
    }
}

fn render_action(out: &mut String, action: &Action, table: Table) {
    match action {
        Action::Return => out.push_str(" return"),
        Action::Drop => out.push_str(" drop"),
        Action::Jump(chain) => {
            let _ = write!(out, " jump {}", chain_name(table, chain));
        }
        Action::Goto(chain) => {
            let _ = write!(out, " goto {}", chain_name(table, chain));
        }
        Action::SetMark { value, mask } => {
            // `(mark & !mask) | value`, as nft simplifies it when it lists the rule.
            let value = value & mask;
            let keep = !mask | value;
            match (keep, value) {
                (0, value) => {
                    let _ = write!(out, " meta mark set {value:#010x}");
                }
                (u32::MAX, value) => {
                    let _ = write!(out, " meta mark set meta mark | {value:#010x}");
                }
                (keep, 0) => {
                    let _ = write!(out, " meta mark set meta mark & {keep:#010x}");
                }
                (keep, value) => {
                    let _ = write!(
                        out,
                        " meta mark set meta mark & {keep:#010x} | {value:#010x}"
                    );
                }
            }
        }
        Action::Nflog { group, prefix } => {
            let _ = write!(
                out,
                " log prefix \"{}\" group {group} snaplen {} queue-threshold 1",
                sanitize_comment(prefix),
                NFLOG_SIZE
            );
        }
        Action::Log { prefix, level } => {
            let _ = write!(out, " log prefix \"{}\"", sanitize_comment(prefix));
            if *level != DEFAULT_KERNEL_LOG_LEVEL {
                let _ = write!(out, " level {}", syslog_level_name(*level));
            }
        }
        Action::NoTrack => out.push_str(" notrack"),
    }
}

/// The elements of an anonymous set of ports as nft lists them back: in order, without
/// duplicates, and, in a set that holds a range (an interval set), with overlapping and
/// adjacent elements merged: `{ 65534, 65535 }` stays, `{ 80-85, 86 }` is listed as
/// `{ 80-86 }`. Rendering them so keeps a rule's words the kernel's, so that reading it back
/// finds no change. Pure.
fn listed_ports(ports: &[PortRange]) -> Vec<PortRange> {
    let interval = ports.iter().any(|port| port.first != port.last);
    let mut sorted = ports.to_vec();
    sorted.sort_by_key(|port| (port.first, port.last));
    let mut listed: Vec<PortRange> = Vec::with_capacity(sorted.len());
    for port in sorted {
        match listed.last_mut() {
            Some(last)
                if port.first <= last.last
                    || interval && last.last.checked_add(1) == Some(port.first) =>
            {
                last.last = last.last.max(port.last);
            }
            _ => listed.push(port),
        }
    }
    listed
}

/// Whether a rule excludes one port on each side (`tcp sport != 21403 tcp dport != 7000`).
///
/// nft (1.0.6, Debian 12's, at least) merges two comparisons of adjacent header fields into
/// one comparison of both, which keeps the meaning of `==` but not of `!=`: the rule above
/// becomes "sport and dport are not both 21403 and 7000", so a packet to port 7000 from port
/// 21404 matches (`nft --debug=netlink` shows one `cmp neq` over 4 bytes). A range with equal
/// ends is compared with `range neq`, which nft leaves alone, so such a rule writes its
/// destination port as `7000-7000`; the kernel lists it back that way.
fn negated_port_pair(matches: &[Match]) -> bool {
    let single_excluded = |wanted: Side| {
        matches.iter().any(|matched| {
            matches!(matched, Match::Ports { side, ports, negated: true }
                if *side == wanted
                    && matches!(listed_ports(ports).as_slice(), [one] if one.first == one.last))
        })
    };
    single_excluded(Side::Source) && single_excluded(Side::Destination)
}

/// The matches, the counter and the action of a rule, as nft writes them after the chain.
pub fn rule_body(rule: &Rule, family: IpFamily, table: Table) -> String {
    let mut body = String::with_capacity(128);
    let protocol = folded_protocol(&rule.matches, family);
    let unmergeable = negated_port_pair(&rule.matches);
    for matched in &rule.matches {
        render_match(&mut body, matched, family, protocol, unmergeable);
    }
    body.push_str(" counter");
    render_action(&mut body, &rule.action, table);
    body
}

/// Renders a rule of one of our chains as an `add rule` command.
pub fn render_rule(table: Table, chain: &str, rule: &Rule, family: IpFamily) -> RenderedRule {
    let body = rule_body(rule, family, table);
    rule_command(table, chain, &body, rule.comment.as_deref(), family)
}

/// The `add rule` command of a rule body, with the hash of body and words in its comment.
fn rule_command(
    table: Table,
    chain: &str,
    body: &str,
    words: Option<&str>,
    family: IpFamily,
) -> RenderedRule {
    // The words as the comment holds them (sanitized, within the kernel's 128 bytes after
    // `npg:<hash> `): the hash covers what is written, so that a rule read back hashes to it.
    let words = words.map(|words| {
        let mut written = sanitize_comment(words);
        written.truncate(MAX_COMMENT - 1 - HASH_PREFIX.len() - HASH_LENGTH - 1);
        written
    });
    let words = words.as_deref();
    let hash = rule_hash(
        table,
        chain,
        &format!("{body}|{}", words.unwrap_or_default()),
    );
    let line = format!(
        "add rule {} {TABLE} {}{body} comment \"{}\"",
        family_name(family),
        chain_name(table, chain),
        comment(&hash, words)
    );
    RenderedRule { hash, line }
}

/// The rendered rules of one chain. A run of two or more rules that each send one interface,
/// named exactly, to a verdict (a dispatch chain's `iifname "eth0" goto …` rules) becomes one
/// verdict map: a packet is looked up once in a hash of the names instead of being compared
/// with each in turn, and one that names none falls through to the next rule, as it would
/// past the run. The policy rules that `status` counts one by one are never merged.
pub fn render_chain(table: Table, chain: &Chain, family: IpFamily) -> Vec<RenderedRule> {
    let rules = &chain.rules[..];
    let mut out = Vec::with_capacity(rules.len());
    let mut at = 0;
    while at < rules.len() {
        let (direction, arms) = interface_arms(&rules[at..], table);
        if arms.len() >= MIN_MAP_ARMS {
            at += arms.len();
            let body = format!(" counter {direction} vmap {}", map_elements(arms));
            out.push(rule_command(
                table,
                &chain.name,
                &body,
                Some("dispatch by interface"),
                family,
            ));
        } else {
            out.push(render_rule(table, &chain.name, &rules[at], family));
            at += 1;
        }
    }
    out
}

/// Fewest interface rules worth a verdict map.
const MIN_MAP_ARMS: usize = 2;

/// The longest run at the start of `rules` that a verdict map can stand for: rules whose only
/// match is one exact interface name of one direction and whose action is a verdict, each name
/// once. The direction's word (`iifname` or `oifname`) and the arms, `"eth0" : goto chain`.
fn interface_arms(rules: &[Rule], table: Table) -> (&'static str, Vec<String>) {
    let mut direction = "";
    let mut names = std::collections::BTreeSet::new();
    let mut arms = Vec::new();
    for rule in rules {
        let (word, name) = match rule.matches.as_slice() {
            [Match::InInterface(name)] => ("iifname", name),
            [Match::OutInterface(name)] => ("oifname", name),
            _ => break,
        };
        let verdict = match &rule.action {
            Action::Return => "return".to_owned(),
            Action::Drop => "drop".to_owned(),
            Action::Jump(target) => format!("jump {}", chain_name(table, target)),
            Action::Goto(target) => format!("goto {}", chain_name(table, target)),
            _ => break,
        };
        let exact = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if rule.origin.is_some()
            || !exact
            || (!direction.is_empty() && direction != word)
            || !names.insert(name.as_str())
        {
            break;
        }
        direction = word;
        arms.push(format!("\"{name}\" : {verdict}"));
    }
    (direction, arms)
}

/// A map's elements in the one order both the render and a listing's reading use (nft lists
/// them in an order of its own: by their bytes read as a host-endian number).
pub fn map_elements(mut arms: Vec<String>) -> String {
    arms.sort_unstable();
    format!("{{ {} }}", arms.join(", "))
}

/// Renders the base chain of a hook: its declaration and its one jump, as two commands.
pub fn render_hook(table: Table, hook: &Hook, family: IpFamily) -> RenderedRule {
    let (hook_name, priority) = hook_of(table, &hook.kernel_chain);
    let target = chain_name(table, &hook.target);
    let identity = hook_identity(hook_name, i64::from(priority), "accept", &target);
    let hash = rule_hash(table, &hook.kernel_chain, &identity);
    let name = base_chain_name(table, &hook.kernel_chain);
    let line = hook_commands(
        family,
        &name,
        hook_name,
        i64::from(priority),
        "accept",
        &target,
        &comment(&hash, Some("nodeport-guard hook")),
    );
    RenderedRule { hash, line }
}

/// The two commands that declare a base chain of ours and its one jump (also used to write an
/// observed base chain back).
pub fn hook_commands(
    family: IpFamily,
    name: &str,
    hook: &str,
    priority: i64,
    policy: &str,
    target: &str,
    comment: &str,
) -> String {
    let family = family_name(family);
    format!(
        "add chain {family} {TABLE} {name} {{ type filter hook {hook} priority {priority}; policy {policy}; }}\nadd rule {family} {TABLE} {name} counter jump {target} comment \"{comment}\""
    )
}

/// The nft type of a set, with its flags: `ipv4_addr`, `ipv4_addr,interval`,
/// `ipv4_addr . inet_proto . inet_service`.
pub fn set_kind(kind: SetKind, family: IpFamily) -> String {
    let address = match family {
        IpFamily::V4 => "ipv4_addr",
        IpFamily::V6 => "ipv6_addr",
    };
    match kind {
        SetKind::Net => format!("{address},interval"),
        SetKind::Ip => address.to_owned(),
        SetKind::IpPort => format!("{address} . inet_proto . inet_service"),
    }
}

/// The `add set` command of a set whose kind is [`set_kind`]'s text.
pub fn set_declaration(name: &str, kind: &str, family: IpFamily) -> String {
    let (set_type, flags) = match kind.split_once(',') {
        Some((set_type, flags)) => (set_type, format!(" flags {flags};")),
        None => (kind, String::new()),
    };
    format!(
        "add set {} {TABLE} {name} {{ type {set_type};{flags} }}",
        family_name(family)
    )
}

/// A member as nft writes (and lists) it.
pub fn member_text(member: &SetMember) -> String {
    match member {
        SetMember::IpPort(ip, protocol, port) => {
            format!(
                "{ip} . {} . {port}",
                crate::ruleset::protocol_text(*protocol)
            )
        }
        other => other.to_string(),
    }
}

/// `add element` commands for `members`, in chunks so no line grows without bound.
pub fn element_commands(verb: &str, family: IpFamily, set: &str, members: &[String]) -> String {
    let mut out = String::new();
    for chunk in members.chunks(1000) {
        let _ = writeln!(
            out,
            "{verb} element {} {TABLE} {set} {{ {} }}",
            family_name(family),
            chunk.join(", ")
        );
    }
    out
}

/// An `nft -f` script that creates the whole ruleset from nothing (for `render`).
pub fn render_script(ruleset: &Ruleset) -> String {
    let mut out = String::new();
    for family in &ruleset.families {
        if family.tables.is_empty() && family.sets.is_empty() {
            continue;
        }
        let name = family_name(family.family);
        let _ = writeln!(out, "# {} ({})", family.family, name);
        let _ = writeln!(out, "add table {name} {TABLE}");
        for set in &family.sets {
            render_set(&mut out, set);
        }
        for table in &family.tables {
            for chain in &table.chains {
                let _ = writeln!(
                    out,
                    "add chain {name} {TABLE} {}",
                    chain_name(table.table, &chain.name)
                );
            }
        }
        for table in &family.tables {
            for chain in &table.chains {
                for rule in render_chain(table.table, chain, family.family) {
                    let _ = writeln!(out, "{}", rule.line);
                }
            }
            for hook in &table.hooks {
                let _ = writeln!(
                    out,
                    "{}",
                    render_hook(table.table, hook, family.family).line
                );
            }
        }
    }
    if out.is_empty() {
        out.push_str("# no policy applies to this host: nothing to load\n");
    }
    out
}

fn render_set(out: &mut String, set: &IpSet) {
    let kind = set_kind(set.kind, set.family);
    let _ = writeln!(out, "{}", set_declaration(&set.name, &kind, set.family));
    let members: Vec<String> = set.members.iter().map(member_text).collect();
    out.push_str(&element_commands("add", set.family, &set.name, &members));
}

/// nft's name of a syslog level (it takes no numbers).
fn syslog_level_name(level: u8) -> &'static str {
    match level {
        0 => "emerg",
        1 => "alert",
        2 => "crit",
        3 => "err",
        4 => "warn",
        5 => "notice",
        6 => "info",
        _ => "debug",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(text: &str) -> Vec<PortRange> {
        text.split(", ")
            .map(|part| {
                let (first, last) = part.split_once('-').unwrap_or((part, part));
                PortRange {
                    first: first.parse().expect("port"),
                    last: last.parse().expect("port"),
                }
            })
            .collect()
    }

    fn listed(text: &str) -> String {
        listed_ports(&ports(text))
            .iter()
            .map(|port| match port.first == port.last {
                true => port.first.to_string(),
                false => format!("{}-{}", port.first, port.last),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    #[test]
    fn port_sets_are_rendered_as_nft_lists_them_back() {
        // Each pair: what a policy says, what `nft list` (v1.0.6) printed after loading it.
        for (written, listed_back) in [
            ("8080, 80", "80, 8080"),
            ("9000, 22", "22, 9000"),
            ("80, 70-90, 81", "70-90"),
            ("443, 443", "443"),
            ("80, 81, 82", "80, 81, 82"),
            ("65534, 65535", "65534, 65535"),
            ("80-85, 86-90", "80-90"),
            ("80-85, 86", "80-86"),
            ("79, 80-85", "79-85"),
            ("80-85, 87-90", "80-85, 87-90"),
            ("80-85, 85-90", "80-90"),
            ("80-85, 82", "80-85"),
            ("1-2, 3-4, 5", "1-5"),
            ("65530-65534, 65535", "65530-65535"),
            ("80, 81, 82-85", "80-85"),
            ("83, 84, 80-82", "80-84"),
            ("5, 1-4, 5", "1-5"),
            ("70-90, 65534, 65535", "70-90, 65534-65535"),
        ] {
            assert_eq!(listed(written), listed_back, "{written}");
        }
    }
}
