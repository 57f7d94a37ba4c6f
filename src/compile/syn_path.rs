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
//! * a return that ends a chain goes, a jump to a chain left empty goes, and a jump to a
//!   chain that only jumps or goes to another one goes there directly;
//! * mark bits known to be clear where a rule is met (cleared above and set by nothing since,
//!   or a rule above left the chain when the bit was set) settle its mark matches: a clear of bits already clear goes, a match that cannot hold
//!   takes its rule with it, one that must hold is left out of the rule.
//!
//! Rules that carry a policy rule's verdict stay wherever they can still match, so `status`
//! finds its counters in raw as in mangle.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::{TableBuilder, names};
use crate::model::Protocol;
use crate::ruleset::{Action, Match, PortRange, Rule, Side};

/// Chains by name, with the rules they hold (shared: a chain nothing changes is not copied).
pub(super) type Chains = BTreeMap<String, Arc<[Rule]>>;

/// Shortens the path that starts at `root`, which every packet enters as a TCP SYN to one of
/// `ports` (any port if `None`). Chains no longer reached from `root` are left out.
pub(super) fn shorten(chains: &mut Chains, root: &str, ports: Option<&[PortRange]>) {
    for rules in chains.values_mut() {
        if rules.iter().any(|rule| cannot_match(rule, ports)) {
            *rules = rules
                .iter()
                .filter(|rule| !cannot_match(rule, ports))
                .cloned()
                .collect();
        }
    }
    tidy(chains, &[root], &|_| true);
    let reached = reached(chains, root);
    chains.retain(|name, _| reached.contains(name));
}

/// Folds jumps and settles what mark bits known clear decide, in the chains reached from
/// `roots` (entered with no bit known) that `editable` allows to change; every chain stays.
/// What every packet meets on the way (verdict, messages, the marks it leaves with) is kept.
pub(super) fn tidy(chains: &mut Chains, roots: &[&str], editable: &dyn Fn(&str) -> bool) {
    fold_jumps(chains, editable);
    settle_marks(chains, roots, editable);
    fold_jumps(chains, editable);
}

/// Tidies mangle's pre-DNAT path, the same way, in the chains the path builds per compile
/// (dispatch, endpoints, failsafe): policy chains are shared between compiles and left as they
/// are. What every packet meets is kept, so verdicts, NFLOG messages and marks do not move.
pub(super) fn tidy_table(builder: &mut TableBuilder) {
    let mut chains: Chains = builder
        .chains
        .iter()
        .map(|(name, chain)| (name.clone(), Arc::clone(&chain.rules)))
        .collect();
    let roots: Vec<&str> = builder
        .hooks
        .iter()
        .map(|hook| hook.target.as_str())
        .collect();
    tidy(&mut chains, &roots, &|name| !names::is_policy_chain(name));
    // A chain folded away is left out (policy chains stay, whatever reaches them).
    let reached: BTreeSet<String> = roots
        .iter()
        .flat_map(|root| reached(&chains, root))
        .collect();
    builder
        .chains
        .retain(|name, _| names::is_policy_chain(name) || reached.contains(name));
    for (name, rules) in chains {
        if let Some(chain) = builder.chains.get_mut(&name)
            && !Arc::ptr_eq(&chain.rules, &rules)
        {
            chain.rules = rules;
        }
    }
}

fn cannot_match(rule: &Rule, ports: Option<&[PortRange]>) -> bool {
    rule.matches.iter().any(|m| never(m, ports))
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

/// A return that ends a chain goes (the chain ends there anyway); a jump to an empty chain
/// goes (a goto to one returns); a jump or goto to a chain whose only rule jumps or goes,
/// unconditionally, to another chain is aimed at that chain instead.
fn fold_jumps(chains: &mut Chains, editable: &dyn Fn(&str) -> bool) {
    for (name, rules) in chains.iter_mut() {
        let end = rules.len()
            - rules
                .iter()
                .rev()
                .take_while(|rule| rule.action == Action::Return)
                .count();
        if editable(name) && end < rules.len() {
            *rules = rules[..end].to_vec().into();
        }
    }
    loop {
        let empty: BTreeSet<String> = chains
            .iter()
            .filter(|(_, rules)| rules.is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        let forwards: HashMap<String, String> = chains
            .iter()
            .filter_map(|(name, rules)| match &rules[..] {
                [rule] if rule.matches.is_empty() => match &rule.action {
                    Action::Goto(next) | Action::Jump(next) => Some((name.clone(), next.clone())),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        let folds = |rule: &Rule| match &rule.action {
            Action::Jump(target) | Action::Goto(target) => {
                empty.contains(target) || forwards.contains_key(target)
            }
            _ => false,
        };
        let mut changed = false;
        for (name, rules) in chains.iter_mut() {
            if !editable(name) || !rules.iter().any(folds) {
                continue;
            }
            changed = true;
            *rules = rules
                .iter()
                .filter(|rule| !matches!(&rule.action, Action::Jump(t) if empty.contains(t)))
                .map(|rule| {
                    let mut rule = rule.clone();
                    match &mut rule.action {
                        Action::Goto(target) if empty.contains(target) => {
                            rule.action = Action::Return;
                        }
                        Action::Jump(target) | Action::Goto(target) => {
                            if let Some(next) = forwards.get(target.as_str()) {
                                *target = next.clone();
                            }
                        }
                        _ => {}
                    }
                    rule
                })
                .collect();
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
        for rule in chains[&name].iter() {
            if let Action::Jump(target) | Action::Goto(target) = &rule.action {
                queue.push(target.clone());
            }
        }
    }
    seen
}

/// The chains reached from `roots`, each after every chain that jumps or goes to it (the
/// chains form no cycle: the kernel refuses loops).
fn callers_first<'a>(chains: &'a Chains, roots: &[&'a str]) -> Vec<&'a str> {
    fn visit<'a>(
        chains: &'a Chains,
        name: &'a str,
        seen: &mut HashSet<&'a str>,
        out: &mut Vec<&'a str>,
    ) {
        let Some(rules) = chains.get(name) else {
            return;
        };
        if !seen.insert(name) {
            return;
        }
        for rule in rules.iter() {
            if let Action::Jump(target) | Action::Goto(target) = &rule.action {
                visit(chains, target, seen, out);
            }
        }
        out.push(name);
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for root in roots {
        visit(chains, root, &mut seen, &mut out);
    }
    out.reverse();
    out
}

/// The mark bits a chain may set, with the chains it jumps or goes to.
fn bits_set<'a>(chains: &'a Chains, name: &'a str, memo: &mut HashMap<&'a str, u32>) -> u32 {
    if let Some(bits) = memo.get(name) {
        return *bits;
    }
    let mut bits = 0;
    for rule in chains.get(name).map(|rules| &rules[..]).unwrap_or_default() {
        match &rule.action {
            Action::SetMark { value, .. } => bits |= value,
            Action::Jump(target) | Action::Goto(target) => bits |= bits_set(chains, target, memo),
            _ => {}
        }
    }
    memo.insert(name, bits);
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

/// Follows the bits known to be clear through the chains from `roots` and settles what they
/// decide in the chains `editable` allows to change (see the module's words).
fn settle_marks(chains: &mut Chains, roots: &[&str], editable: &dyn Fn(&str) -> bool) {
    let mut set_by = HashMap::new();
    for name in chains.keys() {
        bits_set(chains, name, &mut set_by);
    }
    // The bits known clear where each chain is entered: what every way in agrees on.
    let mut entry: HashMap<&str, u32> = roots.iter().map(|root| (*root, 0)).collect();
    // A chain's walk reads its own rules and what its callers' walks noted, never another
    // chain's rules: the settled chains go in once every chain is walked.
    let mut settled = Vec::new();
    for name in callers_first(chains, roots) {
        let Some(clear) = entry.get(name).copied() else {
            continue;
        };
        if let Some(kept) = walk(&chains[name], clear, &set_by, &mut entry, editable(name)) {
            settled.push((name.to_owned(), kept));
        }
    }
    for (name, kept) in settled {
        chains.insert(name, kept.into());
    }
}

/// One chain's rules, entered with `clear` known clear, as what is known settles them; notes
/// in `entry` what is known where it jumps or goes. Returns the settled rules if `editable`
/// and they differ from `rules` (most chains have nothing to settle and are not copied).
fn walk<'a>(
    rules: &'a [Rule],
    mut clear: u32,
    set_by: &HashMap<&str, u32>,
    entry: &mut HashMap<&'a str, u32>,
    editable: bool,
) -> Option<Vec<Rule>> {
    // The settled rules, from the first rule that differs on (up to it, `rules`' own).
    let mut kept: Option<Vec<Rule>> = None;
    let differs_at = |kept: &mut Option<Vec<Rule>>, index: usize| {
        if editable && kept.is_none() {
            *kept = Some(rules[..index].to_vec());
        }
    };
    let mut ended = false;
    for (index, rule) in rules.iter().enumerate() {
        if ended {
            if let Some(kept) = &mut kept {
                kept.push(rule.clone());
            }
            continue;
        }
        if rule
            .matches
            .iter()
            .any(|m| settled(m, clear) == Some(false))
        {
            differs_at(&mut kept, index);
            continue;
        }
        // Settling takes matches away, never changes the action: the action is read from
        // `rules`, which `entry` borrows.
        let action = &rule.action;
        let rule = if rule.matches.iter().any(|m| settled(m, clear) == Some(true)) {
            differs_at(&mut kept, index);
            let mut rule = rule.clone();
            rule.matches.retain(|m| settled(m, clear) != Some(true));
            std::borrow::Cow::Owned(rule)
        } else {
            std::borrow::Cow::Borrowed(rule)
        };
        let always = rule.matches.is_empty();
        match action {
            Action::SetMark { value: 0, mask } if mask & !clear == 0 => {
                differs_at(&mut kept, index);
                continue;
            }
            Action::SetMark { value, mask } if always => clear = (clear & !mask) | (mask & !value),
            Action::SetMark { value, .. } => clear &= !value,
            Action::Jump(target) | Action::Goto(target) => {
                let into = entry.entry(target.as_str()).or_insert(clear);
                *into &= clear;
                clear &= !set_by.get(target.as_str()).copied().unwrap_or(0);
                ended = always && matches!(action, Action::Goto(_));
            }
            Action::Return | Action::Drop => ended = always,
            _ => {}
        }
        clear |= left_only_if_clear(&rule);
        if let Some(kept) = &mut kept {
            kept.push(rule.into_owned());
        }
    }
    kept
}

#[cfg(test)]
#[path = "syn_path_tests.rs"]
mod tests;
