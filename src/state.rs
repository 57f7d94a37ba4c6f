//! What nodeport-guard owns in the kernel, or wants to own, as comparable lines.
//!
//! Both sides of a plan have this shape: the desired state is the rendered [`Ruleset`]; the
//! observed state is parsed from `iptables-save` and `ipset save` (or `nft -j list`). Rules are
//! identified by the hash in their `npg:` comment, never by their text, because the kernel
//! prints rules back in its own spelling. Foreign rules and chains are not part of a state at
//! all, except foreign rules found inside our own chains (they have no hash), which a plan
//! then removes.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::IpFamily;
use crate::render::iptables::{render_chain, render_hook};
use crate::ruleset::{Ruleset, Table};

/// A table of one family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TableKey {
    /// The family.
    pub family: IpFamily,
    /// The table.
    pub table: Table,
}

impl std::fmt::Display for TableKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.family, self.table)
    }
}

/// Packet and byte counters of a rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

/// One rule line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleLine {
    /// The hash in its `npg:` comment; `None` for a rule that is not ours.
    pub hash: Option<String>,
    /// The rule as a load line (`-A chain …`), in our spelling for desired rules and the
    /// kernel's for observed ones.
    pub text: String,
    /// Counters, when read with them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub counters: Option<Counters>,
}

/// One of our rules in a chain we do not own (our jump in a kernel chain).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRule {
    /// 1-based position in the chain.
    pub position: usize,
    /// The rule.
    pub rule: RuleLine,
}

/// Our part of one table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableState {
    /// Our chains and their rules.
    pub chains: BTreeMap<String, Vec<RuleLine>>,
    /// Per chain we do not own: our rules in it.
    pub hooks: BTreeMap<String, Vec<HookRule>>,
}

impl TableState {
    /// Whether we own nothing in this table.
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.hooks.values().all(Vec::is_empty)
    }
}

/// One of our sets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetState {
    /// Family of its members.
    pub family: IpFamily,
    /// Its type as the backend names it (`hash:net`, …).
    pub kind: String,
    /// Members in the backend's spelling.
    pub members: BTreeSet<String>,
}

/// Everything we own (or want to own).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Tables with anything of ours.
    pub tables: BTreeMap<TableKey, TableState>,
    /// Our sets by name.
    pub sets: BTreeMap<String, SetState>,
}

impl State {
    /// Whether we own nothing at all.
    pub fn is_empty(&self) -> bool {
        self.tables.values().all(TableState::is_empty) && self.sets.is_empty()
    }

    /// A hash of the state without counters: equal fingerprints mean the same rules and sets.
    pub fn fingerprint(&self) -> String {
        let mut copy = self.clone();
        for table in copy.tables.values_mut() {
            for rules in table.chains.values_mut() {
                for rule in rules {
                    rule.counters = None;
                }
            }
            for rules in table.hooks.values_mut() {
                for hook in rules {
                    hook.rule.counters = None;
                }
            }
        }
        copy.tables.retain(|_, table| !table.is_empty());
        let text = serde_json::to_string(&copy).unwrap_or_default();
        crate::compile::names::hash(&text)
    }
}

/// The desired state of a ruleset as the iptables backends write it.
pub fn desired_iptables(ruleset: &Ruleset) -> State {
    let mut state = State::default();
    for family in &ruleset.families {
        for table in &family.tables {
            let mut table_state = TableState::default();
            for chain in &table.chains {
                let rules = render_chain(table.table, chain, family.family)
                    .into_iter()
                    .map(|rendered| RuleLine {
                        hash: Some(rendered.hash),
                        text: rendered.line,
                        counters: None,
                    })
                    .collect();
                table_state.chains.insert(chain.name.clone(), rules);
            }
            for hook in &table.hooks {
                let rendered = render_hook(table.table, hook);
                table_state.hooks.insert(
                    hook.kernel_chain.clone(),
                    vec![HookRule {
                        position: 1,
                        rule: RuleLine {
                            hash: Some(rendered.hash),
                            text: rendered.line,
                            counters: None,
                        },
                    }],
                );
            }
            state.tables.insert(
                TableKey {
                    family: family.family,
                    table: table.table,
                },
                table_state,
            );
        }
        for set in &family.sets {
            state.sets.insert(
                set.name.clone(),
                SetState {
                    family: set.family,
                    kind: set.kind.ipset_type().to_owned(),
                    members: set.members.iter().map(ToString::to_string).collect(),
                },
            );
        }
    }
    state
}
