//! What nodeport-guard owns in the kernel, or wants to own, as comparable lines.
//!
//! Both sides of a plan have this shape: the desired state is the rendered [`Ruleset`]; the
//! observed state is parsed from `iptables-save` and `ipset save` (or `nft -j list`). Rules are
//! identified by the hash in their `npg:` comment, never by their text, because the kernel
//! prints rules back in its own spelling. Foreign rules and chains are not part of a state at
//! all, except foreign rules found inside our own chains (they have no hash), which a plan
//! then removes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::IpFamily;
use crate::ruleset::{Hook, Rule, Ruleset, SetKind, SetMember, Table};

mod packed;
pub use packed::PackedState;

/// A table of one family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TableKey {
    /// Which family's tables: IPv4 (`iptables`, `ip`) or IPv6 (`ip6tables`, `ip6`).
    pub family: IpFamily,
    /// Which of the family's tables (`raw`, `mangle`, `filter`).
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
    /// Packets the rule matched since it was written (or its counters were zeroed).
    pub packets: u64,
    /// Bytes of those packets, headers included.
    pub bytes: u64,
}

/// The hash in a rule's `npg:` comment, kept inline: a daemon keeps one per rule it wants
/// (340,000 at 10,000 policies), and a string of its own each would cost an allocation of 32
/// bytes beside the line. A longer one (a comment edited by hand) is kept as read.
#[derive(Clone)]
pub struct RuleHash(HashRepr);

#[derive(Clone)]
enum HashRepr {
    Short { len: u8, bytes: [u8; SHORT_HASH] },
    Long(Box<str>),
}

/// The longest hash kept inline (ours are 16 characters).
const SHORT_HASH: usize = 22;

impl RuleHash {
    /// The hash as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Made from a `&str` of exactly these bytes: always UTF-8.
            HashRepr::Short { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            HashRepr::Long(text) => text,
        }
    }
}

impl From<&str> for RuleHash {
    fn from(text: &str) -> RuleHash {
        match u8::try_from(text.len()) {
            Ok(len) if text.len() <= SHORT_HASH => {
                let mut bytes = [0; SHORT_HASH];
                bytes[..text.len()].copy_from_slice(text.as_bytes());
                RuleHash(HashRepr::Short { len, bytes })
            }
            _ => RuleHash(HashRepr::Long(text.into())),
        }
    }
}

impl From<String> for RuleHash {
    fn from(text: String) -> RuleHash {
        RuleHash::from(text.as_str())
    }
}

impl std::ops::Deref for RuleHash {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for RuleHash {
    fn eq(&self, other: &RuleHash) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for RuleHash {}

impl PartialEq<str> for RuleHash {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for RuleHash {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::hash::Hash for RuleHash {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for RuleHash {
    fn partial_cmp(&self, other: &RuleHash) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RuleHash {
    fn cmp(&self, other: &RuleHash) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::fmt::Debug for RuleHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for RuleHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RuleHash {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RuleHash {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<RuleHash, D::Error> {
        Ok(RuleHash::from(String::deserialize(deserializer)?))
    }
}

/// One rule line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleLine {
    /// The hash in its `npg:` comment; `None` for a rule that is not ours.
    pub hash: Option<RuleHash>,
    /// The rule as a load line (`-A chain …`), in our spelling for desired rules and the
    /// kernel's for observed ones. (A boxed `str`: a daemon keeps 34,000 of these at 1,000
    /// policies, and a line never grows after it is made.)
    pub text: Box<str>,
    /// Counters, when read with them (boxed: desired lines, the most kept, have none).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub counters: Option<Box<Counters>>,
}

/// One of our rules in a chain we do not own (our jump in a kernel chain).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRule {
    /// 1-based position in the chain.
    pub position: usize,
    /// The jump as the kernel spells it back.
    pub rule: RuleLine,
}

/// Our part of one table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableState {
    /// Our chains and their rules: shared, so that a chain rendered again the same, or a state
    /// that keeps the chains of another, copies no line.
    pub chains: BTreeMap<String, Arc<[RuleLine]>>,
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
    /// Tables with anything of ours. (Saved as a list of pairs: JSON map keys must be strings.)
    #[serde(with = "table_list")]
    pub tables: BTreeMap<TableKey, TableState>,
    /// Our sets by name.
    pub sets: BTreeMap<String, SetState>,
}

impl State {
    /// The same state without rule counters (what a saved view keeps: counters move with
    /// every packet, and planning never looks at them).
    pub fn without_counters(&self) -> State {
        let uncounted = |rule: &RuleLine| RuleLine {
            counters: None,
            ..rule.clone()
        };
        let tables = self
            .tables
            .iter()
            .map(|(key, table)| {
                let chains = table
                    .chains
                    .iter()
                    .map(|(name, rules)| (name.clone(), rules.iter().map(uncounted).collect()))
                    .collect();
                let hooks = table
                    .hooks
                    .iter()
                    .map(|(name, hooks)| {
                        let hooks = hooks
                            .iter()
                            .map(|hook| HookRule {
                                position: hook.position,
                                rule: uncounted(&hook.rule),
                            })
                            .collect();
                        (name.clone(), hooks)
                    })
                    .collect();
                (*key, TableState { chains, hooks })
            })
            .collect();
        State {
            tables,
            sets: self.sets.clone(),
        }
    }

    /// The part of this state in these tables and sets.
    pub fn within(&self, tables: &BTreeSet<TableKey>, sets: &BTreeSet<String>) -> State {
        State {
            tables: self
                .tables
                .iter()
                .filter(|(key, _)| tables.contains(key))
                .map(|(key, table)| (*key, table.clone()))
                .collect(),
            sets: self
                .sets
                .iter()
                .filter(|(name, _)| sets.contains(*name))
                .map(|(name, set)| (name.clone(), set.clone()))
                .collect(),
        }
    }

    /// The part of this state of these families.
    pub fn of_families(&self, families: &BTreeSet<IpFamily>) -> State {
        let tables = self
            .tables
            .keys()
            .filter(|key| families.contains(&key.family))
            .copied()
            .collect();
        let sets = self
            .sets
            .iter()
            .filter(|(_, set)| families.contains(&set.family))
            .map(|(name, _)| name.clone())
            .collect();
        self.within(&tables, &sets)
    }

    /// Whether we own nothing at all.
    pub fn is_empty(&self) -> bool {
        self.tables.values().all(TableState::is_empty) && self.sets.is_empty()
    }

    /// A digest of what `plan` compares: each chain by its rules' hashes, each hooked chain by
    /// its jumps' positions and hashes, each set by type and members. States with the same
    /// identity need no plan between them, whatever the kernel's spelling of their rules.
    pub fn identity(&self) -> String {
        let mut text = String::new();
        for (key, table) in self.tables.iter().filter(|(_, table)| !table.is_empty()) {
            text.push_str(&format!("table {key}\n"));
            for (chain, rules) in &table.chains {
                text.push_str(&format!("chain {chain}"));
                for rule in rules.iter() {
                    text.push(' ');
                    text.push_str(rule.hash.as_deref().unwrap_or("?"));
                }
                text.push('\n');
            }
            for (chain, hooks) in &table.hooks {
                text.push_str(&format!("hook {chain}"));
                for hook in hooks {
                    let hash = hook.rule.hash.as_deref().unwrap_or("?");
                    text.push_str(&format!(" {}:{hash}", hook.position));
                }
                text.push('\n');
            }
        }
        for (name, set) in &self.sets {
            text.push_str(&format!("set {name} {} {}", set.kind, set.family));
            for member in &set.members {
                text.push(' ');
                text.push_str(member);
            }
            text.push('\n');
        }
        crate::digest::hash(&text)
    }

    /// A hash of the state without counters: equal fingerprints mean the same rules and sets.
    pub fn fingerprint(&self) -> String {
        use base64::Engine as _;
        use sha2::{Digest as _, Sha256};
        let mut hasher = Sha256::new();
        let mut field = |text: &str| {
            hasher.update(text.as_bytes());
            hasher.update([0]);
        };
        for (key, table) in self.tables.iter().filter(|(_, table)| !table.is_empty()) {
            field(&key.to_string());
            for (chain, rules) in &table.chains {
                field(chain);
                for rule in rules.iter() {
                    field(&rule.text);
                }
            }
            for (chain, hooks) in &table.hooks {
                field(chain);
                for hook in hooks {
                    field(&hook.position.to_string());
                    field(&hook.rule.text);
                }
            }
        }
        for (name, set) in &self.sets {
            field(name);
            field(&set.kind);
            field(&set.family.to_string());
            for member in &set.members {
                field(member);
            }
        }
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hasher.finalize())
    }
}

/// Serializes the tables map as a list of `[key, table]` pairs.
mod table_list {
    use std::collections::BTreeMap;

    use serde::{Deserialize as _, Deserializer, Serialize as _, Serializer};

    use super::{TableKey, TableState};

    pub fn serialize<S: Serializer>(
        tables: &BTreeMap<TableKey, TableState>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        tables.iter().collect::<Vec<_>>().serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<TableKey, TableState>, D::Error> {
        Ok(Vec::<(TableKey, TableState)>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}

/// The comment prefix that marks a rule as ours, in every backend.
pub const HASH_PREFIX: &str = "npg:";

/// The length of a rule's hash ([`rule_hash`]).
pub const HASH_LENGTH: usize = 16;

/// What the readers put after a rule's hash when the rule, as the kernel prints it, does not
/// hash to its comment's hash: a rule changed in place with our comment kept. The plan then
/// sees another rule there than the one wanted, and puts the wanted one back.
pub const CHANGED_MARK: &str = "~";

/// The hashes of rules that this kernel prints otherwise than they are rendered (so that they
/// never hash to their comment), learned from the read-back of our own writes: a rule read
/// right after we wrote it is ours as written, whatever its spelling. Empty where the
/// kernel's spelling is the render's (every shape, on the versions `tests/kernel_canonical.rs`
/// runs); it keeps a newer or older iptables from making every rule look changed.
static OWN_SPELLINGS: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());

/// The hash a reader keeps for a rule whose comment says `hash` and whose printed form hashes
/// to `printed`: `hash`, or `hash` with [`CHANGED_MARK`] when the two differ and this
/// kernel's spelling of it was not learned from our own write.
pub fn observed_hash(hash: &str, printed: &str) -> RuleHash {
    let learned = || {
        OWN_SPELLINGS
            .lock()
            .is_ok_and(|learned| learned.contains(hash))
    };
    if hash == printed || learned() {
        RuleHash::from(hash)
    } else {
        RuleHash::from(format!("{hash}{CHANGED_MARK}"))
    }
}

/// Learns that this kernel prints the rules of these hashes otherwise than they are rendered
/// (see [`observed_hash`]).
pub fn learn_own_spellings(hashes: Vec<String>) {
    if let Ok(mut spellings) = OWN_SPELLINGS.lock() {
        spellings.extend(hashes);
    }
}

/// One rendered rule: its identity hash and the line (or commands) that write it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedRule {
    /// The hash in its `npg:` comment.
    pub hash: String,
    /// What the backend writes for it: an `-A` line, or `add rule` commands.
    pub line: String,
}

/// The identity hash of a rule with this body in this table and chain: the first 16
/// characters of the URL-safe base64 of SHA-256 over `"<table> <chain><body>"`.
pub fn rule_hash(table: Table, chain: &str, body: &str) -> String {
    use base64::Engine as _;
    use sha2::{Digest as _, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(table.as_str().as_bytes());
    hasher.update(b" ");
    hasher.update(chain.as_bytes());
    hasher.update(body.as_bytes());
    // 12 bytes encode to exactly 16 base64 characters.
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&hasher.finalize()[..12])
}

/// How a backend spells what it writes: rules, hooks, set types and members.
pub struct Spelling {
    /// Which spelling this is (a backend's name): what [`RenderMemo`] keeps apart.
    pub name: &'static str,
    /// The rules of one of our chains (one line a rule, or fewer where the backend merges
    /// rules: nftables' verdict maps).
    pub chain: fn(Table, &crate::ruleset::Chain, IpFamily) -> Vec<RenderedRule>,
    /// The jump from a kernel chain into ours.
    pub hook: fn(Table, &Hook, IpFamily) -> RenderedRule,
    /// A set's type.
    pub set_kind: fn(SetKind, IpFamily) -> String,
    /// A set member, as the kernel prints it back.
    pub member: fn(&SetMember) -> String,
}

fn line(rendered: RenderedRule) -> RuleLine {
    // A line is written once and then kept (by the daemon, for as long as it holds): without
    // the spare capacity its building left, which is a quarter of the text on average.
    RuleLine {
        hash: Some(RuleHash::from(rendered.hash)),
        text: rendered.line.into_boxed_str(),
        counters: None,
    }
}

/// The state a backend writes for a ruleset, spelled its way.
pub fn desired(ruleset: &Ruleset, spelling: &Spelling) -> State {
    let rendered = render(ruleset, spelling, None);
    std::sync::Arc::unwrap_or_clone(rendered.state)
}

/// [`desired`], rendering again only the chains and sets whose content changed since the
/// last render with `memo` (the rest are copied from that render's state), and leaving this
/// render in `memo` for the next. The result is the one [`desired`] gives.
pub fn desired_with(ruleset: &Ruleset, spelling: &Spelling, memo: &mut RenderMemo) -> Arc<State> {
    let last = memo
        .last
        .take()
        .filter(|last| last.spelling == spelling.name && !last.aside);
    let rendered = render(ruleset, spelling, Some(last.as_ref()));
    let state = Arc::clone(&rendered.state);
    memo.last = Some(rendered);
    state
}

/// The last state [`desired_with`] rendered, with the rules and members it was rendered
/// from. They are shared with the ruleset (and the compile memo), not copies: a chain whose
/// rules are the very ones rendered last is known unchanged without comparing them.
#[derive(Debug, Default)]
pub struct RenderMemo {
    last: Option<Rendered>,
}

impl RenderMemo {
    /// How many chains the last render copied from the one before, and how many it rendered.
    pub fn last_render(&self) -> (usize, usize) {
        self.last
            .as_ref()
            .map_or((0, 0), |last| (last.chains_copied, last.chains_rendered))
    }

    /// Lets go of the last render's state while it is `applied`, which a daemon at rest keeps
    /// packed ([`PackedState`]); [`RenderMemo::take_back`] puts it back. A memo of any other
    /// state is forgotten: the next render then renders every chain.
    pub fn set_aside(&mut self, applied: &Arc<State>) {
        match &mut self.last {
            Some(last) if last.aside => {}
            Some(last) if Arc::ptr_eq(&last.state, applied) => {
                last.state = Arc::default();
                last.aside = true;
            }
            _ => self.last = None,
        }
    }

    /// Gives back the state [`RenderMemo::set_aside`] let go of: `applied`, unpacked.
    pub fn take_back(&mut self, applied: &Arc<State>) {
        if let Some(last) = &mut self.last
            && last.aside
        {
            last.state = Arc::clone(applied);
            last.aside = false;
        }
    }
}

#[derive(Debug)]
struct Rendered {
    spelling: &'static str,
    /// Empty while set aside ([`RenderMemo::set_aside`]).
    state: Arc<State>,
    /// Whether `state` is set aside: the memo is then not used until it is taken back.
    aside: bool,
    /// Per table, per chain: the rules it was rendered from.
    chains: BTreeMap<TableKey, RulesOf>,
    /// Per set: the members it was rendered from.
    sets: HashMap<String, Arc<[SetMember]>>,
    /// How many chains it copied from the render before, and how many it rendered.
    chains_copied: usize,
    chains_rendered: usize,
}

/// Per chain, the rules it was rendered from.
type RulesOf = HashMap<String, Arc<[Rule]>>;

/// The same content: the same allocation, or equal (a chain compiled again the same).
fn same<T: PartialEq>(last: Option<&Arc<[T]>>, now: &Arc<[T]>) -> bool {
    last.is_some_and(|last| Arc::ptr_eq(last, now) || **last == **now)
}

/// Renders `ruleset`. With `memo` (`Some`, holding the last render, if any), also keeps what
/// it rendered from, and copies from the last render what is unchanged there.
fn render(ruleset: &Ruleset, spelling: &Spelling, memo: Option<Option<&Rendered>>) -> Rendered {
    let remember = memo.is_some();
    let last = memo.flatten();
    let mut state = State::default();
    let mut chains = BTreeMap::new();
    // Each table's lines are rendered and hashed on a thread of its own (the bulk of the work
    // for a large policy set), then gathered in order.
    let pieces: Vec<_> = ruleset
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
        let key = TableKey {
            family,
            table: table.table,
        };
        let last =
            last.and_then(|last| Some((last.state.tables.get(&key)?, last.chains.get(&key)?)));
        table_state(key, table, spelling, remember, last)
    });
    let (mut chains_copied, mut chains_rendered) = (0, 0);
    for table in tables {
        state.tables.insert(table.key, table.state);
        if remember {
            chains.insert(table.key, table.rules);
        }
        chains_copied += table.copied;
        chains_rendered += table.rendered;
    }
    let mut sets = HashMap::new();
    for family in &ruleset.families {
        for set in &family.sets {
            let unchanged = last
                .filter(|last| same(last.sets.get(&set.name), &set.members))
                .and_then(|last| last.state.sets.get(&set.name))
                .filter(|last| {
                    last.family == set.family
                        && last.kind == (spelling.set_kind)(set.kind, set.family)
                });
            let set_state = match unchanged {
                Some(set_state) => set_state.clone(),
                None => SetState {
                    family: set.family,
                    kind: (spelling.set_kind)(set.kind, set.family),
                    members: set.members.iter().map(spelling.member).collect(),
                },
            };
            state.sets.insert(set.name.clone(), set_state);
            if remember {
                sets.insert(set.name.clone(), Arc::clone(&set.members));
            }
        }
    }
    Rendered {
        spelling: spelling.name,
        state: Arc::new(state),
        aside: false,
        chains,
        sets,
        chains_copied,
        chains_rendered,
    }
}

/// One table's chains and hooks as lines; a chain whose rules are those in `last` keeps the
/// lines it had there.
fn table_state(
    key: TableKey,
    table: &crate::ruleset::TableRuleset,
    spelling: &Spelling,
    remember: bool,
    last: Option<(&TableState, &RulesOf)>,
) -> TableRender {
    let mut table_state = TableState::default();
    let mut rules_of = HashMap::new();
    let (mut copied, mut rendered) = (0, 0);
    for chain in &table.chains {
        let unchanged = last
            .filter(|(_, rules)| same(rules.get(&chain.name), &chain.rules))
            .and_then(|(state, _)| state.chains.get(&chain.name));
        let lines = match unchanged {
            Some(lines) => {
                copied += 1;
                lines.clone()
            }
            None => {
                rendered += 1;
                (spelling.chain)(table.table, chain, key.family)
                    .into_iter()
                    .map(line)
                    .collect()
            }
        };
        table_state.chains.insert(chain.name.clone(), lines);
        if remember {
            rules_of.insert(chain.name.clone(), Arc::clone(&chain.rules));
        }
    }
    for hook in &table.hooks {
        let rule = line((spelling.hook)(table.table, hook, key.family));
        table_state.hooks.insert(
            hook.kernel_chain.clone(),
            vec![HookRule { position: 1, rule }],
        );
    }
    TableRender {
        key,
        state: table_state,
        rules: rules_of,
        copied,
        rendered,
    }
}

/// One table rendered.
struct TableRender {
    key: TableKey,
    state: TableState,
    rules: RulesOf,
    copied: usize,
    rendered: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::IpFamily;

    fn sample() -> State {
        let mut table = TableState::default();
        table.chains.insert(
            "npg-a".into(),
            vec![RuleLine {
                hash: Some("h".into()),
                text: "-A npg-a -j RETURN".into(),
                counters: Some(Box::new(Counters {
                    packets: 1,
                    bytes: 2,
                })),
            }]
            .into(),
        );
        let mut state = State::default();
        state.tables.insert(
            TableKey {
                family: IpFamily::V6,
                table: Table::Mangle,
            },
            table,
        );
        state
    }

    #[test]
    fn within_keeps_only_the_named_tables_and_sets() {
        let mut state = sample();
        state.sets.insert(
            "npg6-a".into(),
            SetState {
                family: IpFamily::V6,
                kind: "hash:net".into(),
                members: BTreeSet::from(["2001:db8::/32".to_owned()]),
            },
        );
        let mangle6 = TableKey {
            family: IpFamily::V6,
            table: Table::Mangle,
        };
        let mangle4 = TableKey {
            family: IpFamily::V4,
            table: Table::Mangle,
        };
        let nothing = state.within(&BTreeSet::from([mangle4]), &BTreeSet::new());
        assert!(nothing.is_empty());
        let table_only = state.within(&BTreeSet::from([mangle6]), &BTreeSet::new());
        assert_eq!(table_only.tables, state.tables);
        assert!(table_only.sets.is_empty());
        let set_only = state.within(&BTreeSet::new(), &BTreeSet::from(["npg6-a".to_owned()]));
        assert_eq!(set_only.sets, state.sets);
        assert!(set_only.tables.is_empty());
        assert_eq!(state.of_families(&BTreeSet::from([IpFamily::V6])), state);
        assert!(
            state
                .of_families(&BTreeSet::from([IpFamily::V4]))
                .is_empty()
        );
    }

    #[test]
    fn states_survive_a_json_round_trip() {
        let state = sample();
        let text = serde_json::to_string(&state).expect("serializes");
        let back: State = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(back, state);
    }

    #[test]
    fn fingerprints_ignore_counters_but_see_every_rule() {
        let state = sample();
        let mut counted = state.clone();
        if let Some(table) = counted.tables.values_mut().next() {
            table
                .chains
                .values_mut()
                .for_each(|rules| Arc::make_mut(rules)[0].counters = None);
        }
        assert_eq!(state.fingerprint(), counted.fingerprint());
        let mut changed = state.clone();
        if let Some(table) = changed.tables.values_mut().next() {
            table.chains.values_mut().for_each(|rules| {
                let line = &mut Arc::make_mut(rules)[0];
                line.text = format!("{} x", line.text).into();
            });
        }
        assert_ne!(state.fingerprint(), changed.fingerprint());
        assert_ne!(state.fingerprint(), State::default().fingerprint());
    }
}
