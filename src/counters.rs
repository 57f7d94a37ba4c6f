//! Which kernel rules carry which policy rule's verdict, and their counters summed per policy
//! rule: what `status` and the metrics endpoint show. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dataplane::Backend;
use crate::model::{Direction, IpFamily};
use crate::ruleset::{RuleOrigin, Ruleset, Table};
use crate::state::{self, State};

/// One applied rule that carries a policy rule's verdict.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OriginEntry {
    /// The family of the table the rule is in.
    pub family: IpFamily,
    /// The table the rule is in.
    pub table: Table,
    /// The chain of ours the rule is in.
    pub chain: String,
    /// The rule's hash.
    pub hash: String,
    /// The policy rule.
    pub origin: RuleOrigin,
}

/// Which kernel rules carry which policy rule's verdict, as last applied.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AppliedIndex {
    /// Seconds since the epoch.
    pub applied_at: u64,
    /// The entries.
    pub origins: Vec<OriginEntry>,
    /// [`State::identity`] of what was applied, to tell later whether the kernel still holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_identity: Option<String>,
    /// The policy files it was compiled from, as they were read: what `plan` compares a change
    /// with to say which sources it cuts off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_files: Vec<PolicyFile>,
}

/// The policy files an apply recorded, and when: what they meant then (expiries included).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct AppliedFiles {
    /// Seconds since the epoch.
    pub applied_at: u64,
    /// The files.
    #[serde(default)]
    pub policy_files: Vec<PolicyFile>,
}

impl AppliedFiles {
    /// The instant they were applied at.
    pub fn instant(&self) -> jiff::Timestamp {
        applied_instant(self.applied_at)
    }
}

/// Seconds since the epoch as an instant (the epoch itself if out of range).
pub fn applied_instant(applied_at: u64) -> jiff::Timestamp {
    i64::try_from(applied_at)
        .ok()
        .and_then(|seconds| jiff::Timestamp::from_second(seconds).ok())
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// One policy file as it was applied.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PolicyFile {
    /// Where it was read from.
    pub path: std::path::PathBuf,
    /// Its contents when they were applied, so `status` can point into them after an edit.
    pub text: String,
}

impl AppliedIndex {
    /// The index, knowing the state it was applied with.
    pub fn of_desired(mut self, desired: &State) -> AppliedIndex {
        self.desired_identity = Some(desired.identity());
        self
    }

    /// The index, knowing the policy files it was compiled from.
    pub fn of_policies(mut self, sources: &crate::source::Sources) -> AppliedIndex {
        self.policy_files = policy_files(sources);
        self
    }
}

/// The files of `sources`, as [`PolicyFile`]s.
pub fn policy_files(sources: &crate::source::Sources) -> Vec<PolicyFile> {
    sources
        .iter()
        .map(|(_, file)| PolicyFile {
            path: file.path.clone(),
            text: file.text.clone(),
        })
        .collect()
}

/// Which kernel rules carry which policy rule's verdict, as `backend` writes `ruleset`;
/// `applied_at` is stamped by the caller.
pub fn origin_index(
    ruleset: &Ruleset,
    backend: &'static dyn Backend,
    applied_at: u64,
) -> AppliedIndex {
    let mut origins = Vec::new();
    for (family, table, chain) in ruleset.chains() {
        for rule in chain.rules.iter() {
            if let Some(origin) = &rule.origin {
                origins.push(OriginEntry {
                    family,
                    table,
                    chain: chain.name.clone(),
                    hash: backend.rule_hash(table, &chain.name, rule, family),
                    origin: RuleOrigin::clone(origin),
                });
            }
        }
    }
    AppliedIndex {
        applied_at,
        origins,
        desired_identity: None,
        policy_files: Vec::new(),
    }
}

/// Whether the kernel holds a policy rule: every kernel rule that carries its verdict, some of
/// them (in one family but not the other, say), or none.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub enum Presence {
    /// Every kernel rule of it is there.
    Yes,
    /// Some are missing.
    Partly,
    /// None is there.
    No,
}

impl Presence {
    /// `yes`, `partly` or `no`.
    pub fn as_str(self) -> &'static str {
        match self {
            Presence::Yes => "yes",
            Presence::Partly => "partly",
            Presence::No => "no",
        }
    }
}

/// Packets and bytes matched by one policy rule.
#[derive(Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct RuleCounter {
    /// Policy name.
    pub policy: String,
    /// The policy's tier.
    pub tier: String,
    /// Whether it counts an ingress or an egress rule of the policy.
    pub direction: Direction,
    /// Rule index.
    pub rule: usize,
    /// Packets matched (all families).
    pub packets: u64,
    /// Bytes matched (all families).
    pub bytes: u64,
    /// Whether the kernel holds it.
    pub in_kernel: Presence,
    /// Whether it is a staged policy's rule (it only logs).
    pub staged: bool,
}

/// Per policy rule: packets, bytes, kernel rules found, kernel rules expected.
type Tally = (u64, u64, usize, usize);

/// A policy rule: staged or not, policy, direction, rule index (enforced rules first), tier.
type RuleKey = (bool, String, Direction, usize, String);

/// Packets and bytes per policy rule: the counters of the kernel rules that carry each policy
/// rule's verdict, summed over families and tables.
pub fn rule_counters(observed: &State, index: &AppliedIndex) -> Vec<RuleCounter> {
    let mut totals: BTreeMap<RuleKey, Tally> = BTreeMap::new();
    for entry in &index.origins {
        let key = state::TableKey {
            family: entry.family,
            table: entry.table,
        };
        let found = observed
            .tables
            .get(&key)
            .and_then(|table| table.chains.get(&entry.chain))
            .and_then(|rules| {
                rules
                    .iter()
                    .find(|rule| rule.hash.as_deref() == Some(entry.hash.as_str()))
            });
        let counters = found
            .filter(|_| entry.origin.counted)
            .and_then(|rule| rule.counters.as_deref().copied())
            .unwrap_or_default();
        let total = totals
            .entry((
                entry.origin.staged,
                entry.origin.policy.to_string(),
                entry.origin.direction,
                entry.origin.rule_index,
                entry.origin.tier.to_string(),
            ))
            .or_default();
        total.0 += counters.packets;
        total.1 += counters.bytes;
        total.2 += usize::from(found.is_some());
        total.3 += 1;
    }
    totals
        .into_iter()
        .map(
            |((staged, policy, direction, rule, tier), (packets, bytes, found, expected))| {
                RuleCounter {
                    staged,
                    policy,
                    tier,
                    direction,
                    rule,
                    packets,
                    bytes,
                    in_kernel: match found {
                        0 => Presence::No,
                        found if found == expected => Presence::Yes,
                        _ => Presence::Partly,
                    },
                }
            },
        )
        .collect()
}
