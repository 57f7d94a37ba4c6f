//! Reading our nftables tables back: an `nft -y -a list table` listing parsed into a
//! [`State`]. Pure: the backend runs `nft` and hands its output here.

use std::collections::BTreeSet;

use super::render::{TABLE, family_name, hook_commands, hook_identity, map_elements};
use crate::model::IpFamily;
use crate::ruleset::Table;
use crate::state::{Counters, HookRule, RuleLine, SetState, State, TableKey, TableState};

/// `counter packets 3 bytes 180 …` → `counter …`.
fn without_counter_values(body: &str) -> String {
    let words: Vec<&str> = body.split(' ').collect();
    let mut out: Vec<&str> = Vec::with_capacity(words.len());
    let mut index = 0;
    while index < words.len() {
        out.push(words[index]);
        if words[index] == "counter"
            && words.get(index + 1) == Some(&"packets")
            && words.get(index + 3) == Some(&"bytes")
        {
            index += 5;
        } else {
            index += 1;
        }
    }
    out.join(" ")
}

/// A rule body with the elements of its verdict map, if it has one, in the order the render
/// writes them (nft lists them in an order of its own).
fn with_sorted_map(body: String) -> String {
    const OPENING: &str = " vmap { ";
    let Some(start) = body.find(OPENING) else {
        return body;
    };
    let elements = start + OPENING.len();
    let Some(length) = body[elements..].find(" }") else {
        return body;
    };
    let arms = body[elements..elements + length]
        .split(", ")
        .map(str::to_owned)
        .collect();
    let end = elements + length + " }".len();
    format!(
        "{} vmap {}{}",
        &body[..start],
        map_elements(arms),
        &body[end..]
    )
}

/// Splits an nft chain name into the iptables table it stands for and our chain name.
fn split_chain(name: &str) -> (Table, String) {
    super::render::split_chain_name(name)
}

fn hash_of_comment(comment: Option<&str>) -> Option<crate::state::RuleHash> {
    let text = comment?.strip_prefix(crate::state::HASH_PREFIX)?;
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(text.len());
    (end > 0).then(|| crate::state::RuleHash::from(&text[..end]))
}

/// One rule of a listing.
struct ListedRule<'a> {
    chain: &'a str,
    handle: u64,
    body: &'a str,
    comment: Option<&'a str>,
    counters: Option<Counters>,
    target: Option<&'a str>,
}

/// Our regular chains as a listing is read (by table and name), before they are shared.
type Chains = std::collections::BTreeMap<(Table, String), Vec<RuleLine>>;

/// A base chain of a listing: name, hook, priority, policy.
type BaseChain<'a> = (&'a str, &'a str, i64, &'a str);

/// Turns an `nft -y -a list table` listing of our table (numeric priorities, rule handles,
/// set elements) into our state. Rules of ours carry the command that creates them again, and
/// base chains of ours the commands that declare them and their jump, so an observed state
/// can be written back. Pure.
pub fn parse_listing(listing: &str, family: IpFamily, state: &mut State) {
    let listed = read(listing, family);
    for (name, set) in listed.sets {
        state.sets.insert(name.to_owned(), set);
    }
    let chain_of = |chain: &str| {
        listed
            .base_chains
            .iter()
            .find(|(name, ..)| *name == chain)
            .copied()
    };
    // Our chains, empty ones included (base chains are hooks, below), gathered before they
    // are shared.
    let mut chains = Chains::new();
    for name in listed.chains.iter().filter(|name| chain_of(name).is_none()) {
        chains.entry(split_chain(name)).or_default();
    }
    for rule in &listed.rules {
        match chain_of(rule.chain) {
            Some(base) => add_hook_rule(state, family, base, rule),
            None => add_chain_rule(&mut chains, family, rule),
        }
    }
    for ((table, name), rules) in chains {
        let slot = table_state(state, family, table)
            .chains
            .entry(name)
            .or_default();
        *slot = slot.iter().cloned().chain(rules).collect();
    }
    // A table switched off (`flags dormant`: none of its chains sees a packet) holds, as far
    // as the plan can tell, a chain of a name no render writes, so that the table is rebuilt
    // whole, without the flag (see `renamed_families`).
    if listed.dormant {
        table_state(state, family, Table::Filter)
            .chains
            .entry(DORMANT.to_owned())
            .or_default();
    }
    // A base chain without rules is still ours and still wrong.
    for (name, hook, priority, policy) in listed.base_chains {
        let (table, kernel_chain) = split_chain(name);
        let hooks = table_state(state, family, table)
            .hooks
            .entry(kernel_chain)
            .or_default();
        if hooks.is_empty() {
            hooks.push(HookRule {
                position: 1,
                rule: RuleLine {
                    hash: None,
                    text: format!(
                        "base chain {name}: {}",
                        hook_identity(hook, priority, policy, "")
                    )
                    .into(),
                    counters: None,
                },
            });
        }
    }
}

/// How a dormant table of ours shows in the plan: as a chain to remove (see
/// [`parse_listing`]).
pub const DORMANT: &str = "(the table is dormant: flags dormant switches off every chain)";

/// What a listing holds, in the order it lists it.
struct Listing<'a> {
    /// The table carries `flags dormant`.
    dormant: bool,
    base_chains: Vec<BaseChain<'a>>,
    rules: Vec<ListedRule<'a>>,
    chains: Vec<&'a str>,
    sets: Vec<(&'a str, SetState)>,
}

/// Reads a listing line by line: sets with their type and elements, chains, base chains'
/// declarations and rules with their handles.
fn read(listing: &str, family: IpFamily) -> Listing<'_> {
    let mut listed = Listing {
        dormant: false,
        base_chains: Vec::new(),
        rules: Vec::new(),
        chains: Vec::new(),
        sets: Vec::new(),
    };
    let mut chain: Option<&str> = None;
    let mut set: Option<(&str, SetState)> = None;
    let mut in_elements = false;
    for line in listing.lines() {
        let trimmed = line.trim();
        if let Some((_, state_of_set)) = &mut set {
            let closed = set_line(trimmed, state_of_set, &mut in_elements);
            if closed && let Some(done) = set.take() {
                listed.sets.push(done);
            }
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("set ") {
            let name = rest.split_whitespace().next().unwrap_or_default();
            set = Some((
                name,
                SetState {
                    family,
                    kind: String::new(),
                    members: BTreeSet::new(),
                },
            ));
        } else if let Some(rest) = trimmed.strip_prefix("chain ") {
            let name = rest.split_whitespace().next().unwrap_or_default();
            chain = Some(name);
            listed.chains.push(name);
        } else if trimmed == "}" {
            chain = None;
        } else if chain.is_none()
            && let Some(flags) = trimmed.strip_prefix("flags ")
        {
            listed.dormant |= flags.split([',', ' ']).any(|flag| flag == "dormant");
        } else if let Some(current) = chain {
            if let Some(base) = base_chain(current, trimmed) {
                listed.base_chains.push(base);
            } else if let Some(rule) = listed_rule(current, trimmed) {
                listed.rules.push(rule);
            }
        }
    }
    listed
}

/// Reads one line inside a set's block into it; `true` at the block's end.
fn set_line(trimmed: &str, set: &mut SetState, in_elements: &mut bool) -> bool {
    if *in_elements || trimmed.starts_with("elements = {") {
        let list = trimmed.strip_prefix("elements = {").unwrap_or(trimmed);
        let (list, closed) = match list.strip_suffix('}') {
            Some(list) => (list, true),
            None => (list, false),
        };
        set.members.extend(
            list.split(',')
                .map(str::trim)
                .filter(|member| !member.is_empty())
                .map(str::to_owned),
        );
        *in_elements = !closed;
    } else if let Some(set_type) = trimmed.strip_prefix("type ") {
        set.kind = set_type.to_owned();
    } else if let Some(flags) = trimmed.strip_prefix("flags ") {
        set.kind = format!("{},{}", set.kind, flags.replace(' ', ""));
    } else if trimmed == "}" {
        return true;
    }
    false
}

/// A base chain's declaration (`type filter hook prerouting priority -151; policy accept;`).
fn base_chain<'a>(chain: &'a str, trimmed: &'a str) -> Option<BaseChain<'a>> {
    if !(trimmed.starts_with("type ") && trimmed.contains(" hook ")) {
        return None;
    }
    let words: Vec<&str> = trimmed
        .split([' ', ';'])
        .filter(|w| !w.is_empty())
        .collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|word| *word == key)
            .and_then(|at| words.get(at + 1).copied())
    };
    Some((
        chain,
        after("hook").unwrap_or_default(),
        after("priority")
            .and_then(|p| p.parse().ok())
            .unwrap_or_default(),
        after("policy").unwrap_or("accept"),
    ))
}

/// A rule line (`… # handle N`) of a chain.
fn listed_rule<'a>(chain: &'a str, trimmed: &'a str) -> Option<ListedRule<'a>> {
    let (body, handle) = trimmed.rsplit_once(" # handle ")?;
    let handle = handle.trim().parse::<u64>().ok()?;
    let comment = body
        .rsplit_once(" comment \"")
        .or_else(|| body.strip_prefix("comment \"").map(|rest| ("", rest)))
        .and_then(|(_, rest)| rest.strip_suffix('"'));
    let words: Vec<&str> = body.split(' ').collect();
    let counters = words.windows(5).find_map(|w| match w {
        ["counter", "packets", packets, "bytes", bytes] => Some(Counters {
            packets: packets.parse().ok()?,
            bytes: bytes.parse().ok()?,
        }),
        _ => None,
    });
    let target = words
        .windows(2)
        .find_map(|w| matches!(w[0], "jump" | "goto").then_some(w[1]));
    Some(ListedRule {
        chain,
        handle,
        body,
        comment,
        counters,
        target,
    })
}

/// A rule of one of our base chains: the jump of a hook.
fn add_hook_rule(state: &mut State, family: IpFamily, base: BaseChain<'_>, rule: &ListedRule<'_>) {
    let (chain, hook, priority, policy) = base;
    let (table, kernel_chain) = split_chain(chain);
    let target = rule.target.unwrap_or_default();
    let identity = hook_identity(hook, priority, policy, target);
    let hash = hash_of_comment(rule.comment)
        .map(|_| crate::state::rule_hash(table, &kernel_chain, &identity).into());
    let text = match (rule.comment, &hash) {
        (Some(comment), Some(_)) => {
            hook_commands(family, chain, hook, priority, policy, target, comment)
        }
        _ => format!("base chain {chain}: {identity} (handle {})", rule.handle),
    };
    let hooks = table_state(state, family, table)
        .hooks
        .entry(kernel_chain)
        .or_default();
    hooks.push(HookRule {
        position: hooks.len() + 1,
        rule: RuleLine {
            hash,
            text: text.into(),
            counters: rule.counters.map(Box::new),
        },
    });
}

/// The hash a rule of ours would carry if it were rendered as it is listed: its body without
/// the counter's values and the comment, and the comment's words (see `render::rule_command`).
fn printed_hash(rule: &ListedRule<'_>) -> String {
    let (table, chain) = split_chain(rule.chain);
    let body = rule
        .body
        .rsplit_once(" comment \"")
        .map_or(rule.body, |(body, _)| body);
    let words = rule
        .comment
        .and_then(|comment| comment.split_once(' '))
        .map_or("", |(_, words)| words);
    let body = with_sorted_map(without_counter_values(body));
    crate::state::rule_hash(table, &chain, &format!(" {body}|{words}"))
}

/// A rule of one of our regular chains.
fn add_chain_rule(chains: &mut Chains, family: IpFamily, rule: &ListedRule<'_>) {
    // Its comment's hash, marked changed when the rule as listed does not hash to it (see
    // [`crate::state::observed_hash`]).
    let hash = hash_of_comment(rule.comment)
        .map(|hash| crate::state::observed_hash(&hash, &printed_hash(rule)));
    // Ours: the command that creates it again, without its counter values (they are not part
    // of the rule, and a text that changed with traffic would look like another state).
    let body = with_sorted_map(without_counter_values(rule.body));
    let text = match &hash {
        Some(_) => format!(
            "add rule {} {TABLE} {} {body}",
            family_name(family),
            rule.chain
        ),
        None => format!(
            "rule {}, not written by nodeport-guard: {body}",
            rule.handle
        ),
    };
    chains
        .entry(split_chain(rule.chain))
        .or_default()
        .push(RuleLine {
            hash,
            text: text.into(),
            counters: rule.counters.map(Box::new),
        });
}

fn table_state(state: &mut State, family: IpFamily, table: Table) -> &mut TableState {
    state.tables.entry(TableKey { family, table }).or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ruleset::{Action, Match, Rule};

    /// A rule rendered with `words`, listed back as `nft -a list table` lists it.
    fn listed_back(words: &str) -> (String, Option<String>) {
        let mut rule = Rule::new(vec![Match::InInterface("eth0".into())], Action::Return);
        rule.comment = Some(words.to_owned());
        let rendered =
            super::super::render::render_rule(Table::Mangle, "npg-x", &rule, IpFamily::V4);
        let chain = super::super::render::chain_name(Table::Mangle, "npg-x");
        let rest = rendered
            .line
            .strip_prefix(&format!("add rule ip {TABLE} {chain}"))
            .expect("an add rule command")
            .replace(" counter", " counter packets 0 bytes 0");
        let listing = format!(
            "table ip {TABLE} {{\n\tchain {chain} {{\n\t\t{} # handle 5\n\t}}\n}}\n",
            rest.trim()
        );
        let mut state = State::default();
        parse_listing(&listing, IpFamily::V4, &mut state);
        let read = state.tables.values().next().expect("a table").chains["npg-x"][0]
            .hash
            .as_deref()
            .map(str::to_owned);
        (rendered.hash, read)
    }

    #[test]
    fn rules_whose_words_the_comment_changes_read_back_as_written() {
        // Backticks (sanitized to `_`), and words longer than the comment holds.
        for words in [
            "to host endpoint `node1-eth0` (interface `eth0`)",
            &"a very long annotation ".repeat(12),
            "plain words",
        ] {
            let (rendered, read) = listed_back(words);
            assert_eq!(read.as_deref(), Some(rendered.as_str()), "{words}");
        }
    }
}
