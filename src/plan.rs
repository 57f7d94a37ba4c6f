//! Planning: the difference between the desired and the observed [`State`], and how it is shown.
//!
//! Pure: a plan is a function of two states. It lists, per table, the chains to create,
//! replace or delete and the jumps to fix, and per set the members to add and remove. `apply`
//! carries out exactly a plan; `plan` prints it as a unified diff per chain and per set, with
//! a one-line summary.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use std::collections::HashMap;

use crate::model::{Direction, IpFamily};
use crate::state::{CHANGED_MARK, HookRule, RuleHash, RuleLine, SetState, State, TableKey};

/// What happens to a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChainAction {
    /// It does not exist yet.
    Create,
    /// Its rules change (it is flushed and refilled in one transaction).
    Replace,
    /// It is no longer wanted.
    Delete,
}

/// A change to one chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainChange {
    /// The chain.
    pub name: String,
    /// What happens.
    pub action: ChainAction,
    /// The rules now (observed).
    pub before: Vec<RuleLine>,
    /// The rules after (desired).
    pub after: Vec<RuleLine>,
    /// The policy whose rules the chain holds, when it is a policy's chain and the policies
    /// (or the ones last applied, for a chain being deleted) say which ([`Plan::name_policies`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<ChainPolicy>,
}

/// The policy a chain holds the rules of (`plan --json`: `name`, `tier`, `direction`, and
/// `staged` when it is a staged one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainPolicy {
    /// The policy's name.
    pub name: String,
    /// The tier it is in (the default tier is `default`).
    pub tier: String,
    /// Which of its rule lists.
    pub direction: Direction,
    /// Whether it is a staged policy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub staged: bool,
}

impl ChainPolicy {
    /// In words: "ingress rules of policy `security.gate` (tier security)".
    pub fn describe(&self) -> String {
        format!(
            "{} rules of {}policy `{}` (tier {})",
            self.direction,
            if self.staged { "staged " } else { "" },
            self.name,
            self.tier
        )
    }
}

/// A change to our rules in a kernel chain (or a foreign chain holding something of ours).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookChange {
    /// The kernel's chain the jump is in (`PREROUTING`, `INPUT`, ...).
    pub chain: String,
    /// Our rules to delete from it.
    pub remove: Vec<HookRule>,
    /// Our jump to insert at position 1.
    pub insert: Option<RuleLine>,
    /// Why, in words.
    pub reason: String,
}

/// Everything that changes in one table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TablePlan {
    /// The table.
    pub key: TableKey,
    /// Chain changes, sorted by chain name.
    pub chains: Vec<ChainChange>,
    /// Hook changes.
    pub hooks: Vec<HookChange>,
}

/// What happens to a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SetAction {
    /// It does not exist yet.
    Create,
    /// Members are added and removed in place.
    Update,
    /// Its type or family differ: rebuilt under a temporary name and swapped in.
    Recreate,
    /// It is no longer wanted.
    Delete,
}

/// A change to one set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetChange {
    /// The set.
    pub name: String,
    /// What happens.
    pub action: SetAction,
    /// Its family after the change (before, for a deletion).
    pub family: IpFamily,
    /// Its type after the change (before, for a deletion).
    pub kind: String,
    /// Members to add (for create and recreate: every member).
    pub add: Vec<String>,
    /// Members to remove.
    pub remove: Vec<String>,
}

/// Everything `apply` will do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Per table with changes.
    pub tables: Vec<TablePlan>,
    /// Per set with changes.
    pub sets: Vec<SetChange>,
}

/// Counts for the summary line (`plan --json`'s `summary`: camelCase keys, as every JSON
/// nodeport-guard prints).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Chains to create.
    pub chains_to_add: usize,
    /// Chains whose rules change.
    pub chains_to_change: usize,
    /// Chains to delete.
    pub chains_to_remove: usize,
    /// Kernel chains whose jump into ours is inserted, moved or removed.
    pub hooks_to_fix: usize,
    /// Sets to create.
    pub sets_to_add: usize,
    /// Sets updated or rebuilt.
    pub sets_to_change: usize,
    /// Sets to delete.
    pub sets_to_remove: usize,
    /// Members added over all sets.
    pub members_to_add: usize,
    /// Members removed over all sets.
    pub members_to_remove: usize,
}

impl Plan {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty() && self.sets.is_empty()
    }

    /// What the plan writes: the tables and the sets it names.
    pub fn scope(&self) -> (BTreeSet<TableKey>, BTreeSet<String>) {
        (
            self.tables.iter().map(|table| table.key).collect(),
            self.sets.iter().map(|set| set.name.clone()).collect(),
        )
    }

    /// The families whose tables or sets the plan changes.
    pub fn families(&self) -> BTreeSet<IpFamily> {
        self.tables
            .iter()
            .map(|table| table.key.family)
            .chain(self.sets.iter().map(|set| set.family))
            .collect()
    }

    /// Says which policy (and tier) each policy chain of the plan belongs to, from `owners`
    /// (chain name → policy; the commands know it from the compiler's chain names).
    pub fn name_policies(&mut self, owners: &HashMap<String, ChainPolicy>) {
        for table in &mut self.tables {
            for chain in &mut table.chains {
                chain.policy = owners.get(&chain.name).cloned();
            }
        }
    }

    /// The part of `state` this plan names: the chains and hook chains it changes, per table,
    /// and the sets it changes.
    pub fn part_of(&self, state: &State) -> State {
        let mut named = State::default();
        for change in &self.tables {
            let Some(table) = state.tables.get(&change.key) else {
                continue;
            };
            let mut part = crate::state::TableState::default();
            for chain in &change.chains {
                if let Some(rules) = table.chains.get(&chain.name) {
                    part.chains.insert(chain.name.clone(), rules.clone());
                }
            }
            for hook in &change.hooks {
                if let Some(rules) = table.hooks.get(&hook.chain) {
                    part.hooks.insert(hook.chain.clone(), rules.clone());
                }
            }
            if !part.is_empty() {
                named.tables.insert(change.key, part);
            }
        }
        for set in &self.sets {
            if let Some(found) = state.sets.get(&set.name) {
                named.sets.insert(set.name.clone(), found.clone());
            }
        }
        named
    }

    /// What the plan touches, in a few words for a log line or `status`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for table in &self.tables {
            for chain in &table.chains {
                let action = format!("{:?}", chain.action).to_lowercase();
                parts.push(format!("{action} chain {} ({})", chain.name, table.key));
            }
            for hook in &table.hooks {
                parts.push(format!("{} ({})", hook.reason, table.key));
            }
        }
        for set in &self.sets {
            let action = format!("{:?}", set.action).to_lowercase();
            parts.push(format!(
                "{action} set {} (+{} -{})",
                set.name,
                set.add.len(),
                set.remove.len()
            ));
        }
        parts.join("; ")
    }

    /// The counts of the summary line.
    pub fn summary(&self) -> Summary {
        let mut summary = Summary::default();
        for table in &self.tables {
            for chain in &table.chains {
                match chain.action {
                    ChainAction::Create => summary.chains_to_add += 1,
                    ChainAction::Replace => summary.chains_to_change += 1,
                    ChainAction::Delete => summary.chains_to_remove += 1,
                }
            }
            summary.hooks_to_fix += table.hooks.len();
        }
        for set in &self.sets {
            match set.action {
                SetAction::Create => summary.sets_to_add += 1,
                SetAction::Update | SetAction::Recreate => summary.sets_to_change += 1,
                SetAction::Delete => summary.sets_to_remove += 1,
            }
            summary.members_to_add += set.add.len();
            summary.members_to_remove += set.remove.len();
        }
        summary
    }
}

impl Summary {
    /// The one-line summary.
    pub fn line(&self) -> String {
        format!("Plan: {}", self.counts())
    }

    /// The counts alone: `10 chains to add, 0 to change, …`.
    pub fn counts(&self) -> String {
        format!(
            "{} chain{} to add, {} to change, {} to remove; {} jump{} to fix; {} set{} to add, {} to change, {} to remove ({} member{} to add, {} to remove)",
            self.chains_to_add,
            plural(self.chains_to_add),
            self.chains_to_change,
            self.chains_to_remove,
            self.hooks_to_fix,
            plural(self.hooks_to_fix),
            self.sets_to_add,
            plural(self.sets_to_add),
            self.sets_to_change,
            self.sets_to_remove,
            self.members_to_add,
            plural(self.members_to_add),
            self.members_to_remove,
        )
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

fn hashes(rules: &[RuleLine]) -> Vec<Option<&str>> {
    rules.iter().map(|rule| rule.hash.as_deref()).collect()
}

/// `after`, read back right after we wrote `written` towards `desired`, with the rules the
/// readers marked changed in the chains and jumps written taken as ours when `desired` wants
/// a rule of that hash there: the kernel spells them its own way. Their hashes are learned, so that later readings take them as
/// they are printed now.
pub fn accept_own_spelling(after: State, desired: &State, written: &Plan) -> State {
    let marked = |line: &RuleLine| {
        line.hash
            .as_ref()
            .and_then(|hash| hash.strip_suffix(CHANGED_MARK))
            .map(str::to_owned)
    };
    let any = after.tables.values().any(|table| {
        table
            .chains
            .values()
            .flat_map(|rules| rules.iter())
            .any(|line| marked(line).is_some())
            || table
                .hooks
                .values()
                .flatten()
                .any(|hook| marked(&hook.rule).is_some())
    });
    if !any {
        return after;
    }
    let mut after = after;
    let mut learned = Vec::new();
    for (key, table) in &mut after.tables {
        let wanted = desired.tables.get(key);
        let Some(wrote) = written.tables.iter().find(|table| table.key == *key) else {
            continue;
        };
        for (name, rules) in &mut table.chains {
            let chain = wanted.and_then(|table| table.chains.get(name));
            let written_chain = wrote.chains.iter().any(|change| change.name == *name);
            if !written_chain || !rules.iter().any(|line| marked(line).is_some()) {
                continue;
            }
            for line in Arc::make_mut(rules) {
                if let Some(hash) = marked(line)
                    && chain.is_some_and(|rules| {
                        rules
                            .iter()
                            .any(|want| want.hash.as_deref() == Some(hash.as_str()))
                    })
                {
                    line.hash = Some(RuleHash::from(hash.as_str()));
                    learned.push(hash);
                }
            }
        }
        for (name, hooks) in &mut table.hooks {
            if !wrote.hooks.iter().any(|hook| hook.chain == *name) {
                continue;
            }
            let wanted_hooks = wanted.and_then(|table| table.hooks.get(name));
            for hook in hooks {
                if let Some(hash) = marked(&hook.rule)
                    && wanted_hooks.is_some_and(|hooks| {
                        hooks
                            .iter()
                            .any(|want| want.rule.hash.as_deref() == Some(hash.as_str()))
                    })
                {
                    hook.rule.hash = Some(RuleHash::from(hash.as_str()));
                    learned.push(hash);
                }
            }
        }
    }
    if !learned.is_empty() {
        tracing::debug!(
            rules = learned.len(),
            "the kernel prints some of our rules otherwise than they are rendered; their hashes are checked by comment only"
        );
        crate::state::learn_own_spellings(learned);
    }
    after
}

/// Computes the plan that turns `observed` into `desired`.
pub fn plan(desired: &State, observed: &State) -> Plan {
    let mut result = Plan::default();
    let keys: BTreeSet<TableKey> = desired
        .tables
        .keys()
        .chain(observed.tables.keys())
        .copied()
        .collect();
    let empty = Default::default();
    for key in keys {
        let want = desired.tables.get(&key).unwrap_or(&empty);
        let have = observed.tables.get(&key).unwrap_or(&empty);
        let mut table_plan = TablePlan {
            key,
            chains: Vec::new(),
            hooks: Vec::new(),
        };
        let names: BTreeSet<&String> = want.chains.keys().chain(have.chains.keys()).collect();
        for name in names {
            let change = match (want.chains.get(name), have.chains.get(name)) {
                (Some(after), None) => Some((ChainAction::Create, Vec::new(), after.to_vec())),
                // The very lines (a chain the planner's view shares with what was rendered
                // from it) need no comparing.
                (Some(after), Some(before))
                    if !Arc::ptr_eq(after, before) && hashes(after) != hashes(before) =>
                {
                    Some((ChainAction::Replace, before.to_vec(), after.to_vec()))
                }
                (None, Some(before)) => Some((ChainAction::Delete, before.to_vec(), Vec::new())),
                _ => None,
            };
            if let Some((action, before, after)) = change {
                table_plan.chains.push(ChainChange {
                    policy: None,
                    name: name.clone(),
                    action,
                    before,
                    after,
                });
            }
        }
        let hook_chains: BTreeSet<&String> = want.hooks.keys().chain(have.hooks.keys()).collect();
        for chain in hook_chains {
            let wanted = want.hooks.get(chain).and_then(|rules| rules.first());
            let present = have.hooks.get(chain).map(Vec::as_slice).unwrap_or_default();
            if let Some(change) = hook_change(chain, wanted, present) {
                table_plan.hooks.push(change);
            }
        }
        if !table_plan.chains.is_empty() || !table_plan.hooks.is_empty() {
            result.tables.push(table_plan);
        }
    }

    let set_names: BTreeSet<&String> = desired.sets.keys().chain(observed.sets.keys()).collect();
    for name in set_names {
        if let Some(change) = set_change(name, desired.sets.get(name), observed.sets.get(name)) {
            result.sets.push(change);
        }
    }
    result
}

fn hook_change(chain: &str, wanted: Option<&HookRule>, present: &[HookRule]) -> Option<HookChange> {
    let reason = match (wanted, present) {
        (None, []) => return None,
        (Some(want), [have])
            if have.position == 1
                && have.rule.hash.is_some()
                && have.rule.hash == want.rule.hash =>
        {
            return None;
        }
        (Some(_), []) => format!("insert our jump at position 1 of `{chain}`"),
        (Some(want), [have]) if have.rule.hash == want.rule.hash => format!(
            "our jump in `{chain}` is at position {}; move it back to position 1",
            have.position
        ),
        (Some(_), [_]) => format!("replace our jump in `{chain}`"),
        (Some(_), _) => format!(
            "`{chain}` holds {} rules of ours; keep one at position 1",
            present.len()
        ),
        (None, _) => format!("remove our rules from `{chain}`"),
    };
    Some(HookChange {
        chain: chain.to_owned(),
        remove: present.to_vec(),
        insert: wanted.map(|hook| hook.rule.clone()),
        reason,
    })
}

fn set_change(name: &str, want: Option<&SetState>, have: Option<&SetState>) -> Option<SetChange> {
    let sorted = |members: &BTreeSet<String>| members.iter().cloned().collect::<Vec<_>>();
    match (want, have) {
        (Some(want), None) => Some(SetChange {
            name: name.to_owned(),
            action: SetAction::Create,
            family: want.family,
            kind: want.kind.clone(),
            add: sorted(&want.members),
            remove: Vec::new(),
        }),
        (Some(want), Some(have)) if want.kind != have.kind || want.family != have.family => {
            Some(SetChange {
                name: name.to_owned(),
                action: SetAction::Recreate,
                family: want.family,
                kind: want.kind.clone(),
                add: sorted(&want.members),
                remove: sorted(&have.members),
            })
        }
        (Some(want), Some(have)) if want.members != have.members => Some(SetChange {
            name: name.to_owned(),
            action: SetAction::Update,
            family: want.family,
            kind: want.kind.clone(),
            add: want.members.difference(&have.members).cloned().collect(),
            remove: have.members.difference(&want.members).cloned().collect(),
        }),
        (None, Some(have)) => Some(SetChange {
            name: name.to_owned(),
            action: SetAction::Delete,
            family: have.family,
            kind: have.kind.clone(),
            add: Vec::new(),
            remove: sorted(&have.members),
        }),
        _ => None,
    }
}

/// How a plan is printed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Style {
    /// Use ANSI colours.
    pub color: bool,
    /// Most set members listed per set before "… and N more".
    pub max_members: usize,
    /// Every line (`--full`): the rules of chains created or deleted whole that belong to no
    /// policy (nodeport-guard's own top-level, dispatch and failsafe chains) and of every
    /// chain deleted whole, which by default are counted, not listed.
    pub full: bool,
}

/// Who a chain is for: the policy its rules' comments name (`policy NAME ingress rule N`,
/// `staged policy NAME …`), else nodeport-guard's own plumbing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Owner {
    Policy {
        name: String,
        staged: bool,
        /// Its tier, when the plan was told ([`Plan::name_policies`]).
        tier: Option<String>,
    },
    Plumbing,
}

impl Owner {
    fn of(chain: &ChainChange) -> Owner {
        if let Some(policy) = &chain.policy {
            return Owner::Policy {
                name: policy.name.clone(),
                staged: policy.staged,
                tier: Some(policy.tier.clone()),
            };
        }
        chain
            .after
            .iter()
            .chain(&chain.before)
            .find_map(|rule| policy_named_in(&rule.text))
            .map_or(Owner::Plumbing, |(name, staged)| Owner::Policy {
                name: name.to_owned(),
                staged,
                tier: None,
            })
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Policy { name, staged, tier } => {
                if *staged {
                    f.write_str("staged ")?;
                }
                write!(f, "policy {name}")?;
                match tier {
                    Some(tier) => write!(f, " (tier {tier})"),
                    None => Ok(()),
                }
            }
            Owner::Plumbing => f.write_str(
                "nodeport-guard's own chains (connection state, dispatch, failsafe ports)",
            ),
        }
    }
}

/// The policy a rule's comment names: `policy NAME ingress rule N` (or `egress`), with
/// whether it is `staged policy …`.
fn policy_named_in(text: &str) -> Option<(&str, bool)> {
    let mut rest = text;
    while let Some(at) = rest.find("policy ") {
        let before = &rest[..at];
        let after = &rest[at + "policy ".len()..];
        let mut words = after.split([' ', '"']);
        if let (Some(name), Some(direction), Some("rule")) =
            (words.next(), words.next(), words.next())
            && matches!(direction, "ingress" | "egress")
            && !name.is_empty()
        {
            return Some((name, before.ends_with("staged ")));
        }
        rest = after;
    }
    None
}

/// Rules added and removed in a chain change, by hash.
fn rule_counts(chain: &ChainChange) -> (usize, usize) {
    let hashes = |rules: &[RuleLine]| -> Vec<Option<crate::state::RuleHash>> {
        rules.iter().map(|rule| rule.hash.clone()).collect()
    };
    let before = hashes(&chain.before);
    let after = hashes(&chain.after);
    let added = after.iter().filter(|hash| !before.contains(hash)).count();
    let removed = before.iter().filter(|hash| !after.contains(hash)).count();
    (added, removed)
}

/// What changes, per policy (and for nodeport-guard's own chains) and per set, in words and
/// counts: the head of a plan.
pub fn overview(plan: &Plan) -> String {
    #[derive(Default)]
    struct Tally {
        created: usize,
        replaced: usize,
        deleted: usize,
        added: usize,
        removed: usize,
    }
    let mut owners: std::collections::BTreeMap<Owner, Tally> = std::collections::BTreeMap::new();
    let mut hooks = 0;
    // A chain named by its comments only (the raw table's SYN path) belongs with the chains
    // of the same policy that the plan was told the tier of.
    let mut tiers = std::collections::BTreeMap::new();
    for chain in plan.tables.iter().flat_map(|table| &table.chains) {
        if let Some(policy) = &chain.policy {
            tiers.insert((policy.name.clone(), policy.staged), policy.tier.clone());
        }
    }
    for table in &plan.tables {
        for chain in &table.chains {
            let mut owner = Owner::of(chain);
            if let Owner::Policy {
                name,
                staged,
                tier: tier @ None,
            } = &mut owner
                && let Some(known) = tiers.get(&(name.clone(), *staged))
            {
                *tier = Some(known.clone());
            }
            let tally = owners.entry(owner).or_default();
            match chain.action {
                ChainAction::Create => tally.created += 1,
                ChainAction::Replace => tally.replaced += 1,
                ChainAction::Delete => tally.deleted += 1,
            }
            let (added, removed) = rule_counts(chain);
            tally.added += added;
            tally.removed += removed;
        }
        hooks += table.hooks.len();
    }
    let mut out = String::new();
    for (owner, tally) in &owners {
        let chains = tally.created + tally.replaced + tally.deleted;
        let what = if tally.created == chains {
            format!(
                "new: {} in {}",
                counted(tally.added, "rule"),
                counted(chains, "chain")
            )
        } else if tally.deleted == chains {
            format!(
                "removed: {} in {}",
                counted(tally.removed, "rule"),
                counted(chains, "chain")
            )
        } else {
            format!(
                "{} added, {} removed in {}",
                counted(tally.added, "rule"),
                counted(tally.removed, "rule"),
                counted(chains, "chain")
            )
        };
        let _ = writeln!(out, "  {owner}: {what}");
    }
    if hooks > 0 {
        let _ = writeln!(
            out,
            "  jumps from the kernel's chains into ours: {} to fix",
            hooks
        );
    }
    for set in &plan.sets {
        let what = match set.action {
            SetAction::Create => format!("new, {}", counted(set.add.len(), "member")),
            SetAction::Delete => "removed".to_owned(),
            SetAction::Recreate => format!(
                "rebuilt (its type changed), {}",
                counted(set.add.len(), "member")
            ),
            SetAction::Update => format!(
                "{} added, {} removed",
                counted(set.add.len(), "member"),
                counted(set.remove.len(), "member")
            ),
        };
        let _ = writeln!(out, "  set {} ({}): {what}", set.name, set.family);
    }
    if out.is_empty() {
        return out;
    }
    format!("What changes:\n{out}\n")
}

fn counted(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

fn paint(text: &str, code: &str, style: Style) -> String {
    if style.color {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// Prints a plan as unified diffs per chain and set (without the summary line).
pub fn render(plan: &Plan, style: Style) -> String {
    let mut out = overview(plan);
    let mut collapsed = Vec::new();
    for table in &plan.tables {
        for chain in &table.chains {
            let verb = match chain.action {
                ChainAction::Create => "create",
                ChainAction::Replace => "change",
                ChainAction::Delete => "delete",
            };
            let owner = Owner::of(chain);
            let whole = match chain.action {
                ChainAction::Create => owner == Owner::Plumbing,
                ChainAction::Delete => true,
                ChainAction::Replace => false,
            };
            let about = match (&chain.policy, &owner) {
                (Some(policy), _) => Some(policy.describe()),
                (None, Owner::Plumbing) => None,
                (None, owner) => Some(owner.to_string()),
            };
            let title = match &about {
                Some(about) => format!("# {verb} chain {} ({}): {about}", chain.name, table.key),
                None => format!("# {verb} chain {} ({})", chain.name, table.key),
            };
            if whole && !style.full {
                let rules = counted(chain.before.len().max(chain.after.len()), "rule");
                let separator = if about.is_some() { "," } else { ":" };
                collapsed.push(paint(&format!("{title}{separator} {rules}"), "1", style));
                continue;
            }
            let _ = writeln!(out, "{}", paint(&title, "1", style));
            out.push_str(&chain_diff(chain, style));
            out.push('\n');
        }
        for hook in &table.hooks {
            let _ = writeln!(
                out,
                "{}",
                paint(&format!("# {} ({})", hook.reason, table.key), "1", style)
            );
            for removed in &hook.remove {
                let _ = writeln!(
                    out,
                    "{}",
                    paint(&format!("-{}", removed.rule.text), "31", style)
                );
            }
            if let Some(insert) = &hook.insert {
                let text = match insert.text.strip_prefix(&format!("-A {} ", hook.chain)) {
                    Some(rest) => format!("-I {} 1 {rest}", hook.chain),
                    None => insert.text.to_string(),
                };
                for line in text.lines() {
                    let _ = writeln!(out, "{}", paint(&format!("+{line}"), "32", style));
                }
            }
            out.push('\n');
        }
    }
    for set in &plan.sets {
        let verb = match set.action {
            SetAction::Create => "create",
            SetAction::Update => "change",
            SetAction::Recreate => "rebuild (type changed)",
            SetAction::Delete => "delete",
        };
        let _ = writeln!(
            out,
            "{}",
            paint(
                &format!("# {verb} set {} ({} {})", set.name, set.kind, set.family),
                "1",
                style
            )
        );
        let limit = if style.max_members == 0 {
            usize::MAX
        } else {
            style.max_members
        };
        for (sign, members, code) in [("-", &set.remove, "31"), ("+", &set.add, "32")] {
            for member in members.iter().take(limit) {
                let _ = writeln!(out, "{}", paint(&format!("{sign}{member}"), code, style));
            }
            if members.len() > limit {
                let _ = writeln!(out, "{sign}… and {} more", members.len() - limit);
            }
        }
        out.push('\n');
    }
    if !collapsed.is_empty() {
        for line in &collapsed {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(
            out,
            "({} created or deleted whole {} counted, not listed: `--full` shows every line)\n",
            counted(collapsed.len(), "chain"),
            if collapsed.len() == 1 { "is" } else { "are" }
        );
    }
    out
}

/// A unified diff of a chain's rules. Observed rules whose hash the desired chain also has are
/// shown in the desired spelling, so only real differences appear.
fn chain_diff(chain: &ChainChange, style: Style) -> String {
    let after: Vec<&str> = chain.after.iter().map(|rule| &*rule.text).collect();
    let before: Vec<&str> = chain
        .before
        .iter()
        .map(|rule| {
            rule.hash
                .as_ref()
                .and_then(|hash| {
                    chain
                        .after
                        .iter()
                        .find(|want| want.hash.as_ref() == Some(hash))
                })
                .map_or(&*rule.text, |want| &*want.text)
        })
        .collect();
    let before_text = lines_text(&before);
    let after_text = lines_text(&after);
    let diff = similar::TextDiff::from_lines(&before_text, &after_text);
    let mut out = String::new();
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        let _ = writeln!(out, "{}", paint(&hunk.header().to_string(), "36", style));
        for change in hunk.iter_changes() {
            let (sign, code) = match change.tag() {
                similar::ChangeTag::Delete => ("-", "31"),
                similar::ChangeTag::Insert => ("+", "32"),
                similar::ChangeTag::Equal => (" ", ""),
            };
            let text = format!("{sign}{}", change.value().trim_end_matches('\n'));
            let _ = writeln!(
                out,
                "{}",
                if code.is_empty() {
                    text
                } else {
                    paint(&text, code, style)
                }
            );
        }
    }
    if chain.before.is_empty() && chain.after.is_empty() {
        let _ = writeln!(out, "(empty chain)");
    }
    out
}

fn lines_text(lines: &[&str]) -> String {
    let mut text = lines.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ruleset::Table;
    use crate::state::TableState;

    fn line(hash: &str, text: &str) -> RuleLine {
        RuleLine {
            hash: (!hash.is_empty()).then(|| hash.into()),
            text: text.into(),
            counters: None,
        }
    }

    fn key() -> TableKey {
        TableKey {
            family: IpFamily::V4,
            table: Table::Mangle,
        }
    }

    fn state(chains: &[(&str, Vec<RuleLine>)], hook: Option<(usize, RuleLine)>) -> State {
        let mut table = TableState::default();
        for (name, rules) in chains {
            table
                .chains
                .insert((*name).to_owned(), rules.clone().into());
        }
        if let Some((position, rule)) = hook {
            table
                .hooks
                .insert("PREROUTING".to_owned(), vec![HookRule { position, rule }]);
        }
        let mut state = State::default();
        state.tables.insert(key(), table);
        state
    }

    fn jump() -> RuleLine {
        line(
            "j",
            "-A PREROUTING -m comment --comment \"npg:j\" -j npg-PREROUTING",
        )
    }

    #[test]
    fn json_keys_are_camel_case_as_in_status_and_calico() {
        let value = serde_json::to_value(Summary::default()).expect("json");
        let keys: Vec<&String> = value.as_object().expect("object").keys().collect();
        assert!(keys.iter().any(|k| *k == "chainsToAdd"), "{keys:?}");
        assert!(keys.iter().all(|k| !k.contains('_')), "{keys:?}");
    }

    #[test]
    fn equal_states_need_nothing() {
        let desired = state(
            &[("npg-a", vec![line("1", "-A npg-a one")])],
            Some((1, jump())),
        );
        assert!(plan(&desired, &desired).is_empty());
        // Spelling differences do not matter: only hashes are compared.
        let observed = state(
            &[("npg-a", vec![line("1", "-A npg-a ONE as saved")])],
            Some((1, jump())),
        );
        assert!(plan(&desired, &observed).is_empty());
    }

    #[test]
    fn chains_are_created_replaced_and_deleted() {
        let desired = state(
            &[
                ("npg-new", vec![line("1", "-A npg-new x")]),
                ("npg-same", vec![line("2", "-A npg-same y")]),
                ("npg-changed", vec![line("3", "-A npg-changed z")]),
            ],
            Some((1, jump())),
        );
        let observed = state(
            &[
                ("npg-same", vec![line("2", "-A npg-same y")]),
                (
                    "npg-changed",
                    vec![
                        line("3", "-A npg-changed z"),
                        line("", "-A npg-changed -j ACCEPT"),
                    ],
                ),
                ("npg-old", vec![]),
            ],
            Some((1, jump())),
        );
        let plan = plan(&desired, &observed);
        let actions: Vec<(&str, ChainAction)> = plan.tables[0]
            .chains
            .iter()
            .map(|c| (c.name.as_str(), c.action))
            .collect();
        assert_eq!(
            actions,
            vec![
                ("npg-changed", ChainAction::Replace),
                ("npg-new", ChainAction::Create),
                ("npg-old", ChainAction::Delete)
            ]
        );
        let summary = plan.summary();
        assert_eq!(
            (
                summary.chains_to_add,
                summary.chains_to_change,
                summary.chains_to_remove
            ),
            (1, 1, 1)
        );
        let text = render(&plan, Style::default());
        assert!(text.contains("-A npg-changed -j ACCEPT\n"), "{text}");
        assert!(
            text.contains("# create chain npg-new (IPv4 mangle)"),
            "{text}"
        );
    }

    /// A policy chain of the iptables backends, as rendered: rule comments name the policy.
    fn policy_rule(hash: &str, chain: &str, policy: &str, rest: &str) -> RuleLine {
        line(
            hash,
            &format!(
                "-A {chain}{rest} -m comment --comment \"npg:{hash}\" -m comment --comment \"policy {policy} ingress rule 0\" -j MARK --set-xmark 0x10000/0x10000"
            ),
        )
    }

    #[test]
    fn a_policy_s_chains_named_by_comment_only_count_with_its_tier() {
        // The raw table's SYN path chain is named by its rules' comments only; the mangle
        // chain of the same policy is named with its tier. One line for the policy.
        let desired = state(
            &[
                (
                    "npg-pi-web",
                    vec![policy_rule("a", "npg-pi-web", "web", " -s 198.51.100.0/24")],
                ),
                (
                    "npg-syn-web",
                    vec![policy_rule("s", "npg-syn-web", "web", " -s 203.0.113.0/24")],
                ),
            ],
            None,
        );
        let mut plan = plan(&desired, &State::default());
        plan.name_policies(&HashMap::from([(
            "npg-pi-web".to_owned(),
            ChainPolicy {
                name: "web".to_owned(),
                tier: "default".to_owned(),
                direction: Direction::Ingress,
                staged: false,
            },
        )]));
        let head = overview(&plan);
        assert_eq!(
            head, "What changes:\n  policy web (tier default): new: 2 rules in 2 chains\n\n",
            "{head}"
        );
    }

    #[test]
    fn a_plan_starts_with_what_changes_per_policy_and_set_and_counts_whole_plumbing_chains() {
        let desired = state(
            &[
                (
                    "npg-pi-web",
                    vec![
                        policy_rule("a", "npg-pi-web", "web", " -s 198.51.100.0/24"),
                        policy_rule("b", "npg-pi-web", "web", " -s 203.0.113.0/24"),
                    ],
                ),
                (
                    "npg-PREROUTING",
                    vec![
                        line("p1", "-A npg-PREROUTING -j RETURN"),
                        line("p2", "-A npg-PREROUTING -j npg-from-host-endpoint"),
                    ],
                ),
            ],
            Some((1, jump())),
        );
        let observed = state(
            &[
                (
                    "npg-pi-web",
                    vec![policy_rule("a", "npg-pi-web", "web", " -s 198.51.100.0/24")],
                ),
                (
                    "npg-pi-gone",
                    vec![policy_rule("g", "npg-pi-gone", "gone", " -s 192.0.2.0/24")],
                ),
            ],
            Some((1, jump())),
        );
        let plan = plan(&desired, &observed);
        let text = render(&plan, Style::default());
        let head = text.split("\n\n").next().unwrap_or_default();
        assert_eq!(
            head,
            "What changes:\n  \
             policy gone: removed: 1 rule in 1 chain\n  \
             policy web: 1 rule added, 0 rules removed in 1 chain\n  \
             nodeport-guard's own chains (connection state, dispatch, failsafe ports): new: 2 rules in 1 chain",
            "{text}"
        );
        // The policy's changed chain is a diff; the plumbing chain created whole and the chain
        // deleted whole are counted, not listed.
        assert!(text.contains("+-A npg-pi-web -s 203.0.113.0/24"), "{text}");
        assert!(
            text.contains("# create chain npg-PREROUTING (IPv4 mangle): 2 rules\n"),
            "{text}"
        );
        assert!(
            text.contains("# delete chain npg-pi-gone (IPv4 mangle): policy gone, 1 rule\n"),
            "{text}"
        );
        assert!(!text.contains("-j npg-from-host-endpoint"), "{text}");
        assert!(text.contains("`--full` shows every line"), "{text}");
        // `--full` lists every line and no count.
        let full = render(
            &plan,
            Style {
                full: true,
                ..Style::default()
            },
        );
        assert!(
            full.contains("+-A npg-PREROUTING -j npg-from-host-endpoint"),
            "{full}"
        );
        assert!(full.contains("--A npg-pi-gone -s 192.0.2.0/24"), "{full}");
        assert!(!full.contains("`--full`"), "{full}");
    }

    #[test]
    fn a_changed_port_reads_as_one_line_out_and_one_in_that_differ_only_in_the_port() {
        let rule = |hash: &str, port: u16| {
            policy_rule(
                hash,
                "npg-pi-web",
                "web",
                &format!(" -p tcp -m multiport --dports {port}"),
            )
        };
        let observed = state(&[("npg-pi-web", vec![rule("old", 30008)])], None);
        let desired = state(&[("npg-pi-web", vec![rule("new", 30009)])], None);
        let text = render(&plan(&desired, &observed), Style::default());
        let removed: Vec<&str> = text.lines().filter(|l| l.starts_with("--A")).collect();
        let added: Vec<&str> = text.lines().filter(|l| l.starts_with("+-A")).collect();
        assert_eq!((removed.len(), added.len()), (1, 1), "{text}");
        let differing: Vec<(&str, &str)> = removed[0]
            .split(' ')
            .zip(added[0].split(' '))
            .filter(|(a, b)| a != b)
            .collect();
        assert_eq!(
            differing,
            vec![
                ("--A", "+-A"),
                ("30008", "30009"),
                ("\"npg:old\"", "\"npg:new\"")
            ],
            "{text}"
        );
    }

    #[test]
    fn the_policy_of_a_rule_is_read_from_its_comment() {
        assert_eq!(
            policy_named_in("-A x -m comment --comment \"policy web ingress rule 3\" -j DROP"),
            Some(("web", false))
        );
        assert_eq!(
            policy_named_in(
                "ip saddr 1.2.3.4 counter drop comment \"npg:h staged policy sec.gate egress rule 0\""
            ),
            Some(("sec.gate", true))
        );
        assert_eq!(
            policy_named_in("-A x -m comment --comment \"Return if policy accepted\" -j RETURN"),
            None
        );
    }

    #[test]
    fn a_jump_pushed_down_or_missing_is_fixed() {
        let desired = state(&[], Some((1, jump())));
        let pushed = state(&[], Some((2, jump())));
        let plan_pushed = plan(&desired, &pushed);
        assert_eq!(plan_pushed.tables[0].hooks.len(), 1);
        assert!(plan_pushed.tables[0].hooks[0].reason.contains("position 2"));
        let missing = State::default();
        let plan_missing = plan(&desired, &missing);
        assert_eq!(plan_missing.summary().hooks_to_fix, 1);
        let removed = plan(&State::default(), &desired);
        assert_eq!(removed.tables[0].hooks[0].insert, None);
    }

    #[test]
    fn sets_are_diffed_member_by_member() {
        let set = |kind: &str, members: &[&str]| SetState {
            family: IpFamily::V4,
            kind: kind.to_owned(),
            members: members.iter().map(|m| (*m).to_owned()).collect(),
        };
        let mut desired = State::default();
        desired.sets.insert(
            "npg4-a".into(),
            set("hash:net", &["192.0.2.0/24", "198.51.100.1"]),
        );
        desired.sets.insert("npg4-b".into(), set("hash:net", &[]));
        desired
            .sets
            .insert("npg4-c".into(), set("hash:net", &["192.0.2.1"]));
        let mut observed = State::default();
        observed.sets.insert(
            "npg4-a".into(),
            set("hash:net", &["192.0.2.0/24", "203.0.113.1"]),
        );
        observed
            .sets
            .insert("npg4-c".into(), set("hash:ip", &["192.0.2.1"]));
        observed.sets.insert("npg4-d".into(), set("hash:net", &[]));
        let plan = plan(&desired, &observed);
        let actions: Vec<(&str, SetAction)> = plan
            .sets
            .iter()
            .map(|s| (s.name.as_str(), s.action))
            .collect();
        assert_eq!(
            actions,
            vec![
                ("npg4-a", SetAction::Update),
                ("npg4-b", SetAction::Create),
                ("npg4-c", SetAction::Recreate),
                ("npg4-d", SetAction::Delete)
            ]
        );
        assert_eq!(plan.sets[0].add, vec!["198.51.100.1"]);
        assert_eq!(plan.sets[0].remove, vec!["203.0.113.1"]);
    }
}
