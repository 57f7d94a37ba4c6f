//! The early drop's raw path, made as short as what it means allows.
//!
//! The raw copies of the pre-DNAT chains are entered only by TCP SYNs whose destination port is
//! one pre-DNAT policy can deny (the dispatch rule in raw `npg-PREROUTING` says so), with every
//! mark bit of ours cleared by its first rule. What the copies do for such a packet is fixed; which of
//! their rules it walks through is not: the chains were compiled for every packet. Three
//! rewrites, each keeping what every such packet meets (its verdict, its NFLOG messages, the
//! mark it leaves with), shorten the walk:
//!
//! * a rule that cannot match such a packet goes (another protocol, ICMP, destination ports
//!   none of the dispatched ports are in: the failsafe ports, for instance);
//! * a jump to a chain left empty goes, and a jump to a chain that only goes to another one
//!   goes there directly;
//! * mark bits known to be clear where a rule is met (cleared above and set by nothing since,
//!   or a rule above left the chain when the bit was set) settle its mark matches: a clear of bits already clear goes, a match that cannot hold
//!   takes its rule with it, one that must hold is left out of the rule.
//!
//! Rules that carry a policy rule's verdict stay wherever they can still match, so `status`
//! finds its counters in raw as in mangle.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::model::Protocol;
use crate::ruleset::{Action, Match, PortRange, Rule, Side};

/// The chains of the raw path by name, with the rules they hold.
pub(super) type Chains = BTreeMap<String, Vec<Rule>>;

/// Shortens the path that starts at `root`, which every packet enters as a TCP SYN to one of
/// `ports` (any port if `None`). Chains no longer reached from `root` are left out.
pub(super) fn shorten(chains: &mut Chains, root: &str, ports: Option<&[PortRange]>) {
    for rules in chains.values_mut() {
        rules.retain(|rule| !rule.matches.iter().any(|m| never(m, ports)));
    }
    fold_jumps(chains);
    settle_marks(chains, root);
    fold_jumps(chains);
    let reached = reached(chains, root);
    chains.retain(|name, _| reached.contains(name));
}

/// Whether `m` cannot hold for a TCP SYN to one of `ports`.
fn never(m: &Match, ports: Option<&[PortRange]>) -> bool {
    let overlaps = |a: &PortRange, b: &PortRange| a.first <= b.last && b.first <= a.last;
    let covers = |a: &PortRange, b: &PortRange| a.first <= b.first && b.last <= a.last;
    match m {
        Match::Protocol { number, negated } => (*number == Protocol::Tcp.number()) == *negated,
        Match::Icmp { .. } => true,
        Match::Ports {
            side: Side::Destination,
            ports: matched,
            negated,
        } => match ports {
            None => false,
            Some(dispatched) if *negated => dispatched
                .iter()
                .all(|d| matched.iter().any(|m| covers(m, d))),
            Some(dispatched) => !dispatched
                .iter()
                .any(|d| matched.iter().any(|m| overlaps(m, d))),
        },
        _ => false,
    }
}

/// A jump to an empty chain goes (a goto to one returns); a jump or goto to a chain whose only
/// rule goes, unconditionally, to another chain is aimed at that chain instead.
fn fold_jumps(chains: &mut Chains) {
    loop {
        let empty: BTreeSet<String> = chains
            .iter()
            .filter(|(_, rules)| rules.is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        let forwards: HashMap<String, String> = chains
            .iter()
            .filter_map(|(name, rules)| match rules.as_slice() {
                [rule] if rule.matches.is_empty() => match &rule.action {
                    Action::Goto(next) => Some((name.clone(), next.clone())),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        let mut changed = false;
        for rules in chains.values_mut() {
            let before = rules.len();
            rules.retain(|rule| !matches!(&rule.action, Action::Jump(t) if empty.contains(t)));
            changed |= rules.len() != before;
            for rule in rules.iter_mut() {
                match &mut rule.action {
                    Action::Goto(target) if empty.contains(target) => {
                        rule.action = Action::Return;
                        changed = true;
                    }
                    Action::Jump(target) | Action::Goto(target) => {
                        if let Some(next) = forwards.get(target.as_str()) {
                            *target = next.clone();
                            changed = true;
                        }
                    }
                    _ => {}
                }
            }
        }
        if !changed {
            return;
        }
    }
}

/// The chains reached from `root`, `root` included.
fn reached(chains: &Chains, root: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut queue = vec![root.to_owned()];
    while let Some(name) = queue.pop() {
        if !chains.contains_key(&name) || !seen.insert(name.clone()) {
            continue;
        }
        for rule in &chains[&name] {
            if let Action::Jump(target) | Action::Goto(target) = &rule.action {
                queue.push(target.clone());
            }
        }
    }
    seen
}

/// The chains reached from `root`, each after every chain that jumps or goes to it (the
/// chains form no cycle: the kernel refuses loops).
fn callers_first(chains: &Chains, root: &str) -> Vec<String> {
    fn visit(chains: &Chains, name: &str, seen: &mut BTreeSet<String>, out: &mut Vec<String>) {
        if !chains.contains_key(name) || !seen.insert(name.to_owned()) {
            return;
        }
        for rule in &chains[name] {
            if let Action::Jump(target) | Action::Goto(target) = &rule.action {
                visit(chains, target, seen, out);
            }
        }
        out.push(name.to_owned());
    }
    let mut out = Vec::new();
    visit(chains, root, &mut BTreeSet::new(), &mut out);
    out.reverse();
    out
}

/// The mark bits a chain may set, with the chains it jumps or goes to.
fn bits_set(chains: &Chains, name: &str, memo: &mut HashMap<String, u32>) -> u32 {
    if let Some(bits) = memo.get(name) {
        return *bits;
    }
    let mut bits = 0;
    for rule in chains.get(name).map(Vec::as_slice).unwrap_or_default() {
        match &rule.action {
            Action::SetMark { value, .. } => bits |= value,
            Action::Jump(target) | Action::Goto(target) => bits |= bits_set(chains, target, memo),
            _ => {}
        }
    }
    memo.insert(name.to_owned(), bits);
    bits
}

/// What a mark match is, given the bits known to be clear: `Some(true)` always holds,
/// `Some(false)` never, `None` depends on the packet (and every other match: `None`).
fn settled(m: &Match, clear: u32) -> Option<bool> {
    let Match::Mark {
        value,
        mask,
        negated,
    } = m
    else {
        return None;
    };
    if value & mask & clear != 0 {
        Some(*negated)
    } else if mask & !clear == 0 {
        Some((value & mask == 0) != *negated)
    } else {
        None
    }
}

/// The mark bit a packet that goes on after `rule` must have clear: the rule leaves the chain
/// (or drops) when that one bit is set, and looks at nothing else.
fn left_only_if_clear(rule: &Rule) -> u32 {
    match (rule.matches.as_slice(), &rule.action) {
        (
            [
                Match::Mark {
                    value,
                    mask,
                    negated: false,
                },
            ],
            Action::Return | Action::Drop | Action::Goto(_),
        ) if value == mask && mask.count_ones() == 1 => *mask,
        _ => 0,
    }
}

/// Follows the bits known to be clear through the chains from `root` (entered with no bit
/// known) and settles what they decide (see the module's words).
fn settle_marks(chains: &mut Chains, root: &str) {
    let mut set_by = HashMap::new();
    for name in chains.keys().cloned().collect::<Vec<_>>() {
        bits_set(chains, &name, &mut set_by);
    }
    // The bits known clear where each chain is entered: what every way in agrees on.
    let mut entry: HashMap<String, u32> = HashMap::from([(root.to_owned(), 0)]);
    for name in callers_first(chains, root) {
        let Some(mut clear) = entry.get(&name).copied() else {
            continue;
        };
        let mut kept = Vec::new();
        let mut ended = false;
        for mut rule in std::mem::take(chains.get_mut(&name).expect("reached")) {
            if ended {
                kept.push(rule);
                continue;
            }
            if rule
                .matches
                .iter()
                .any(|m| settled(m, clear) == Some(false))
            {
                continue;
            }
            rule.matches.retain(|m| settled(m, clear) != Some(true));
            let always = rule.matches.is_empty();
            match &rule.action {
                Action::SetMark { value: 0, mask } if mask & !clear == 0 => continue,
                Action::SetMark { value, mask } if always => {
                    clear = (clear & !mask) | (mask & !value)
                }
                Action::SetMark { value, .. } => clear &= !value,
                Action::Jump(target) | Action::Goto(target) => {
                    let into = entry.entry(target.clone()).or_insert(clear);
                    *into &= clear;
                    clear &= !set_by.get(target.as_str()).copied().unwrap_or(0);
                    ended = always && matches!(rule.action, Action::Goto(_));
                }
                Action::Return | Action::Drop => ended = always,
                _ => {}
            }
            clear |= left_only_if_clear(&rule);
            kept.push(rule);
        }
        *chains.get_mut(&name).expect("reached") = kept;
    }
}

#[cfg(test)]
#[path = "syn_path_tests.rs"]
mod tests;
