//! Incremental compilation: the policy chains of the last compile, kept with fingerprints of
//! what they were compiled from, so that a compile after an edit compiles again only the
//! policies that changed (the daemon's reloads; Felix keeps its rules the same way).
//!
//! A policy's chain is a function of the policy's name, tier and rules, of the family, and of
//! a context shared by every policy: the mark bits, the logged actions, the NFLOG groups, and
//! the GlobalNetworkSets and HostEndpoints that rule selectors and named ports resolve
//! against. When the context changes, every chain is compiled again; otherwise a chain whose
//! policy fingerprint is unchanged is taken from the memo, and the sets and warnings its rules
//! registered are registered again in the same order. The result is the one a full compile
//! gives (a property test compares them over random edit sequences).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::sets::SetEvent;
use crate::config::Config;
use crate::digest::Fingerprinter;
use crate::marks::MarkBits;
use crate::model::{EntityRule, HostEndpoint, IpFamily, Model, NetworkSet, Policy, Rule};
use crate::ruleset;

/// What the last compile with this memo produced, for the next one.
#[derive(Debug, Default)]
pub struct Memo {
    fingerprinter: Fingerprinter,
    /// The fingerprint of the context the chains were compiled in.
    context: Option<u128>,
    families: BTreeMap<IpFamily, FamilyMemo>,
    last_compile: Reuse,
}

/// How many policy chains a compile took from the memo, and how many it compiled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reuse {
    /// Taken from the memo.
    pub reused: usize,
    /// Policy chains compiled afresh.
    pub compiled: usize,
}

/// The policy chains of one family: those of the last compile, and those the compile under
/// way used or made (which become the last when it ends; the rest are forgotten).
#[derive(Debug, Default)]
pub(super) struct FamilyMemo {
    last: HashMap<String, Arc<Entry>>,
    next: HashMap<String, Arc<Entry>>,
}

/// One policy chain as compiled.
#[derive(Debug)]
pub(super) struct Entry {
    /// The fingerprint of the policy it was compiled from.
    pub policy: u128,
    /// The compiled rules of the chain, shared with the ruleset.
    pub rules: Arc<[ruleset::Rule]>,
    /// What compiling it registered, in order.
    pub events: Vec<SetEvent>,
}

/// A memo lent to one compile: the fingerprints of this compile's policies, and each family's
/// chains behind a lock of its own (the families compile on threads of their own).
pub(super) struct Lent {
    enforced: HashMap<String, u128>,
    staged: HashMap<String, u128>,
    families: BTreeMap<IpFamily, Mutex<FamilyMemo>>,
    reused: AtomicUsize,
    compiled: AtomicUsize,
}

impl Memo {
    /// Lends the memo to a compile of `model`: forgets every chain when the context changed.
    pub(super) fn lend(&mut self, model: &Model, config: &Config, marks: MarkBits) -> Lent {
        let context = self.fingerprinter.of(&Context {
            marks,
            config,
            network_sets: model.network_sets(),
            host_endpoints: model.host_endpoints(),
        });
        if self.context != Some(context) {
            self.families.clear();
            self.context = Some(context);
        }
        let fingerprints = |policies: &[Arc<Policy>]| {
            policies
                .iter()
                .map(|policy| {
                    (
                        policy.name.clone(),
                        self.fingerprinter.of(&Compiled(policy)),
                    )
                })
                .collect()
        };
        Lent {
            enforced: fingerprints(model.policies()),
            staged: fingerprints(model.staged_policies()),
            families: IpFamily::BOTH
                .into_iter()
                .map(|family| {
                    let memo = self.families.remove(&family).unwrap_or_default();
                    (family, Mutex::new(memo))
                })
                .collect(),
            reused: AtomicUsize::new(0),
            compiled: AtomicUsize::new(0),
        }
    }

    /// Takes the memo back after the compile: what it used or made is what the next compile
    /// may reuse.
    pub(super) fn restore(&mut self, lent: Lent) {
        self.last_compile = Reuse {
            reused: lent.reused.into_inner(),
            compiled: lent.compiled.into_inner(),
        };
        self.families = lent
            .families
            .into_iter()
            .map(|(family, memo)| {
                let memo = memo
                    .into_inner()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let last = memo.next;
                (
                    family,
                    FamilyMemo {
                        last,
                        next: HashMap::new(),
                    },
                )
            })
            .collect();
    }

    /// How many policy chains the last compile took from the memo, and how many it compiled.
    pub fn last_compile(&self) -> Reuse {
        self.last_compile
    }
}

impl Lent {
    /// The chain `name` of `policy` in `family` if the memo holds it compiled from the same
    /// policy; it is kept for the next compile.
    pub(super) fn get(
        &self,
        family: IpFamily,
        name: &str,
        policy: &Policy,
        staged: bool,
    ) -> Option<Arc<Entry>> {
        let fingerprint = self.fingerprint(policy, staged)?;
        let mut memo = self.families.get(&family)?.lock().ok()?;
        let entry = if let Some(entry) = memo.next.get(name) {
            (entry.policy == fingerprint).then(|| Arc::clone(entry))
        } else {
            let entry = memo.last.remove(name).filter(|e| e.policy == fingerprint);
            if let Some(entry) = &entry {
                memo.next.insert(name.to_owned(), Arc::clone(entry));
            }
            entry
        };
        let counter = if entry.is_some() {
            &self.reused
        } else {
            &self.compiled
        };
        counter.fetch_add(1, Ordering::Relaxed);
        entry
    }

    /// Keeps a chain just compiled for the next compile.
    pub(super) fn put(
        &self,
        family: IpFamily,
        name: &str,
        policy: &Policy,
        staged: bool,
        rules: Arc<[ruleset::Rule]>,
        events: Vec<SetEvent>,
    ) {
        let Some(policy) = self.fingerprint(policy, staged) else {
            return;
        };
        let Some(Ok(mut memo)) = self.families.get(&family).map(Mutex::lock) else {
            return;
        };
        memo.next.insert(
            name.to_owned(),
            Arc::new(Entry {
                policy,
                rules,
                events,
            }),
        );
    }

    fn fingerprint(&self, policy: &Policy, staged: bool) -> Option<u128> {
        let fingerprints = if staged { &self.staged } else { &self.enforced };
        fingerprints.get(&policy.name).copied()
    }
}

/// What every policy chain depends on besides its policy.
struct Context<'a> {
    marks: MarkBits,
    config: &'a Config,
    network_sets: &'a [Arc<NetworkSet>],
    host_endpoints: &'a [Arc<HostEndpoint>],
}

impl Hash for Context<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.marks.hash(state);
        self.config.log_actions.hash(state);
        self.config.log_target.hash(state);
        self.config.nflog_group.hash(state);
        self.config.nflog_group_egress.hash(state);
        state.write_usize(self.network_sets.len());
        for set in self.network_sets {
            // Where a set was written does not change what it holds.
            let NetworkSet {
                name,
                labels,
                nets,
                // An expired set is not in the model at all; a live one's expiry decides nothing.
                expires: _,
                origin: _,
            } = &**set;
            (name, labels, nets).hash(state);
        }
        state.write_usize(self.host_endpoints.len());
        for endpoint in self.host_endpoints {
            let HostEndpoint {
                name,
                labels,
                node,
                interface,
                expected_ips,
                ports,
                default_allow,
                origin: _,
            } = &**endpoint;
            (
                name,
                labels,
                node,
                interface,
                expected_ips,
                ports,
                default_allow,
            )
                .hash(state);
        }
    }
}

/// The part of a policy its chain is compiled from. The fields are named one by one, so a
/// field added to [`Policy`] or [`Rule`] must be placed on one side or the other here.
struct Compiled<'a>(&'a Policy);

impl Hash for Compiled<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let Policy {
            name,
            tier,
            ingress,
            egress,
            // Which endpoints and hooks a policy applies to is decided outside its chain,
            // and where it was written only places warnings.
            tier_origin: _,
            order: _,
            selector: _,
            kind: _,
            apply_on_forward: _,
            // An expired policy is not in the model at all.
            expires: _,
            origin: _,
        } = self.0;
        (name, tier).hash(state);
        for rules in [ingress, egress] {
            match rules {
                None => state.write_u8(0),
                Some(rules) => {
                    state.write_u8(1);
                    state.write_usize(rules.len());
                    for rule in rules {
                        hash_rule(rule, state);
                    }
                }
            }
        }
    }
}

fn hash_rule<H: Hasher>(rule: &Rule, state: &mut H) {
    let Rule {
        action,
        protocol,
        not_protocol,
        icmp,
        not_icmp,
        ip_version,
        source,
        destination,
        annotations,
        origin: _,
    } = rule;
    (action, protocol, not_protocol, icmp, not_icmp, ip_version).hash(state);
    for entity in [source, destination] {
        let EntityRule {
            nets,
            not_nets,
            selector,
            not_selector,
            ports,
            not_ports,
        } = entity;
        (nets, not_nets, selector, not_selector, ports, not_ports).hash(state);
    }
    annotations.hash(state);
}
