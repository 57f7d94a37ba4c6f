//! The early drop (`earlyDrop`, on by default): a TCP SYN (SYN set, ACK clear) that pre-DNAT
//! policy denies is dropped in raw `PREROUTING`, before connection tracking, instead of in
//! mangle after it. A SYN is never a reply, so judging it without conntrack cannot drop the
//! SYN-ACKs of the host's own connections (the seed's raw-table failure).
//!
//! It is not a second policy: the pre-DNAT path's chains, as compiled for mangle, are copied
//! into raw, their own chains (dispatch, endpoints, failsafes) renamed `npg-syn-…` so they
//! cannot meet the doNotTrack chains of the same shape, the policy chains as they are:
//!
//! ```text
//! raw     PREROUTING → npg-PREROUTING   -p tcp SYN,ACK=SYN → npg-syn-PREROUTING
//!         npg-syn-PREROUTING: clear marks, host to itself returns,
//!                             → npg-syn-from-host-endpoint → npg-syn-fh-<if> → npg-pi-…
//!                             not dropped: set the scratch1 mark ("judged before conntrack")
//! mangle  npg-PREROUTING: replies return; a SYN with the scratch1 mark returns (judged);
//!                         everything else is judged here, as without the early drop
//! ```
//!
//! A packet that is not a TCP SYN leaves raw after one rule. A SYN is judged once, in raw,
//! with every NFLOG message (staged, `Log`, the drop's) mangle would have logged; the one that
//! survives keeps the accept bit pre-DNAT policy gave it (the filter table honours it) and
//! skips mangle's second look, which could only log again. The only match of the pre-DNAT
//! path that needs conntrack is mangle's return for replies and established connections: a SYN
//! that conntrack would place in a known connection (a retransmission after the answer, a
//! simultaneous open, an expected connection of a conntrack helper) is judged as new here.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use super::binding::{Binding, Path};
use super::dispatch::self_traffic_rules;
use super::names;
use super::rules::{clear_bits, mark_clear, mark_set, set_bit};
use super::sets::SetRegistry;
use super::{Compiler, TableBuilder};
use crate::model::Protocol;
use crate::ruleset::{Action, Chain, Hook, Match, Rule, Side, Table};

/// The top chain of the hooked kernel chain both tables use.
const TOP: &str = "npg-PREROUTING";
const KERNEL_CHAIN: &str = "PREROUTING";

/// The matches of a TCP SYN: protocol TCP, SYN set and ACK clear.
pub(crate) fn syn_matches() -> Vec<Match> {
    vec![
        Match::Protocol {
            number: Protocol::Tcp.number(),
            negated: false,
        },
        Match::TcpSyn,
    ]
}

impl Compiler<'_> {
    /// Adds the early drop to raw, and mangle's return for the SYNs it judged, when
    /// `earlyDrop` is on and pre-DNAT policy is enforced here.
    pub(super) fn early_drop(
        &self,
        builders: &mut BTreeMap<Table, TableBuilder>,
        sets: &mut SetRegistry<'_>,
        own_addresses: &[IpAddr],
        bindings: &[Binding<'_>],
    ) {
        let enforces = |path: Path| bindings.iter().any(|binding| path.enforced(binding));
        if !self.config.early_drop || !enforces(Path::PreDnatIn) {
            return;
        }
        let Some(mangle) = builders.get_mut(&Table::Mangle) else {
            return;
        };
        let Some(copies) = raw_copies(mangle) else {
            return;
        };
        let marks = self.marks;
        let judged = marks.scratch1;
        mark_judged_syns(mangle, judged);

        let raw = builders.entry(Table::Raw).or_default();
        for chain in copies {
            raw.add(chain);
        }
        let mut top = vec![Rule::new(Vec::new(), clear_bits(marks.all()))];
        top.extend(self_traffic_rules(Side::Source, sets, own_addresses));
        top.push(Rule::new(
            Vec::new(),
            Action::Jump(names::early_drop_chain(Path::PreDnatIn.dispatch_chain())),
        ));
        top.push(
            Rule::new(Vec::new(), set_bit(judged))
                .comment("judged by pre-DNAT policy before connection tracking: not dropped"),
        );
        raw.add(Chain {
            name: names::EARLY_DROP_CHAIN.to_owned(),
            rules: top.into(),
        });

        // What doNotTrack policy accepted, mangle would not judge again: neither does this.
        let mut matches = syn_matches();
        if enforces(Path::UntrackedIn) {
            matches.push(mark_clear(marks.accept));
        }
        let syn = Rule::new(matches, Action::Goto(names::EARLY_DROP_CHAIN.to_owned()))
            .comment("TCP SYN: pre-DNAT policy before connection tracking");
        match raw.chains.get_mut(TOP) {
            Some(chain) => {
                let mut rules = chain.rules.to_vec();
                rules.push(syn);
                chain.rules = rules.into();
            }
            None => {
                raw.add(Chain {
                    name: TOP.to_owned(),
                    rules: vec![syn].into(),
                });
                raw.hooks.push(Hook {
                    kernel_chain: KERNEL_CHAIN.to_owned(),
                    target: TOP.to_owned(),
                });
            }
        }
    }
}

/// Mangle's return for the SYNs the early drop judged, right after the return for replies.
fn mark_judged_syns(mangle: &mut TableBuilder, judged: u32) {
    let Some(chain) = mangle.chains.get_mut(TOP) else {
        return;
    };
    let mut matches = syn_matches();
    matches.push(mark_set(judged));
    let skip = Rule::new(matches, Action::Return)
        .comment("TCP SYN judged in raw PREROUTING before connection tracking");
    let mut rules = chain.rules.to_vec();
    let after = rules
        .iter()
        .position(|rule| {
            rule.matches
                .iter()
                .any(|m| matches!(m, Match::Conntrack(_)))
        })
        .map_or(0, |index| index + 1);
    rules.insert(after, skip);
    chain.rules = rules.into();
}

/// The pre-DNAT path's chains as raw holds them: every chain its dispatch chain reaches, the
/// path's own chains renamed and the jumps to them rewritten. `None` if a rule looks at
/// conntrack, which raw cannot (the pre-DNAT path has none: left to mangle if it ever does).
fn raw_copies(mangle: &TableBuilder) -> Option<Vec<Chain>> {
    let mut reached = BTreeSet::new();
    let mut queue = vec![Path::PreDnatIn.dispatch_chain().to_owned()];
    while let Some(name) = queue.pop() {
        if !reached.insert(name.clone()) {
            continue;
        }
        let chain = mangle.chains.get(&name)?;
        for rule in chain.rules.iter() {
            if rule
                .matches
                .iter()
                .any(|m| matches!(m, Match::Conntrack(_)))
            {
                return None;
            }
            if let Action::Jump(target) | Action::Goto(target) = &rule.action {
                queue.push(target.clone());
            }
        }
    }
    let renamed: HashMap<&str, String> = reached
        .iter()
        .filter(|name| !names::is_policy_chain(name))
        .map(|name| (name.as_str(), names::early_drop_chain(name)))
        .collect();
    let rename = |name: &String| renamed.get(name.as_str()).cloned();
    let mut copies = Vec::new();
    for name in &reached {
        let chain = mangle.chains.get(name)?;
        let retargets = chain.rules.iter().any(|rule| match &rule.action {
            Action::Jump(target) | Action::Goto(target) => rename(target).is_some(),
            _ => false,
        });
        let rules = if retargets {
            chain
                .rules
                .iter()
                .map(|rule| {
                    let mut rule = rule.clone();
                    if let Action::Jump(target) | Action::Goto(target) = &mut rule.action
                        && let Some(new) = rename(target)
                    {
                        *target = new;
                    }
                    rule
                })
                .collect::<Vec<_>>()
                .into()
        } else {
            chain.rules.clone()
        };
        copies.push(Chain {
            name: rename(name).unwrap_or_else(|| name.clone()),
            rules,
        });
    }
    Some(copies)
}
