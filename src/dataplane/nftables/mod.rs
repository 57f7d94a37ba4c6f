//! The native nftables backend: reads our tables with `nft -y -a list table`, writes every change
//! as one `nft -f` transaction (sets, chains and hooks of both families together).

use std::collections::BTreeSet;
use std::fmt::Write as _;

pub mod parse;
pub mod render;

use super::runner::joined;
use super::{Backend, Dataplane, DataplaneError, run_checked};
use crate::model::IpFamily;
use crate::plan::{ChainAction, Plan, SetAction};
use crate::ruleset::{CHAIN_PREFIX, Rule, Ruleset, Table};
use crate::state::Spelling;
use crate::state::State;
use render::{TABLE, base_chain_name, chain_name, element_commands, family_name, set_declaration};

/// Native nftables: our own `nodeport_guard` tables, written with `nft -f`.
#[derive(Debug)]
pub struct Nftables;

/// The native nftables backend.
pub static NFTABLES: Nftables = Nftables;

/// How native nftables spells what it writes: rules as `add rule` commands, hooks as base
/// chains, members in nft's spelling.
pub const SPELLING: Spelling = Spelling {
    name: "nftables",
    chain: render::render_chain,
    hook: render::render_hook,
    set_kind: render::set_kind,
    member: render::member_text,
};

impl Backend for Nftables {
    fn name(&self) -> &'static str {
        "nftables"
    }

    fn about(&self) -> &'static str {
        "nft -f (native nftables)"
    }

    fn render(&self, ruleset: &Ruleset) -> String {
        render::render_script(ruleset)
    }

    fn spelling(&self) -> &'static crate::state::Spelling {
        &SPELLING
    }

    fn rule_hash(&self, table: Table, chain: &str, rule: &Rule, family: IpFamily) -> String {
        render::render_rule(table, chain, rule, family).hash
    }

    fn observe(&self, dataplane: &Dataplane<'_>) -> Result<State, DataplaneError> {
        observe(dataplane)
    }

    fn observe_written(
        &self,
        dataplane: &Dataplane<'_>,
        plan: &Plan,
    ) -> Result<State, DataplaneError> {
        observe_written(dataplane, plan)
    }

    fn write(
        &self,
        dataplane: &Dataplane<'_>,
        plan: &Plan,
        desired: &State,
    ) -> Result<u32, DataplaneError> {
        apply(dataplane, plan, desired)
    }

    /// Every table and set of a family the plan touched: one transaction may rebuild a
    /// family's whole table.
    /// What the read-back of [`Backend::observe_written`] covers: the chains, base chains and sets the
    /// plan names, or the whole tables of the families it touched when it was read whole.
    fn unverified(&self, desired: &State, after: &State, written: &Plan) -> Plan {
        if written_objects(written).is_some() {
            return crate::plan::plan(&written.part_of(desired), &written.part_of(after));
        }
        let families = written.families();
        crate::plan::plan(
            &desired.of_families(&families),
            &after.of_families(&families),
        )
    }

    /// Our tables, chains and sets are all nf_tables objects.
    fn sign_covers(&self) -> super::Coverage {
        super::Coverage::Everything
    }
}

/// Reads our tables.
fn observe(dataplane: &Dataplane<'_>) -> Result<State, DataplaneError> {
    observe_families(dataplane, &IpFamily::BOTH)
}

/// Most chains and sets [`observe_written`] lists one by one; a plan that wrote more is read
/// back whole.
const LISTED_ONE_BY_ONE: usize = 8;

/// What one object listing names: `chain` or `set`, the family, the object's name.
type Object = (&'static str, IpFamily, String);

/// The objects a plan writes, when it writes only those: its chains, the base chains of its
/// hooks and its sets, at most [`LISTED_ONE_BY_ONE`]. `None` for a plan that rebuilds a
/// family's table (a set whose type changed) or writes more.
fn written_objects(plan: &Plan) -> Option<Vec<Object>> {
    if plan
        .sets
        .iter()
        .any(|set| set.action == SetAction::Recreate)
        || !renamed_families(plan).is_empty()
    {
        return None;
    }
    let mut objects = Vec::new();
    for table in &plan.tables {
        let family = table.key.family;
        for chain in &table.chains {
            objects.push(("chain", family, chain_name(table.key.table, &chain.name)));
        }
        for hook in &table.hooks {
            objects.push((
                "chain",
                family,
                base_chain_name(table.key.table, &hook.chain),
            ));
        }
    }
    for set in &plan.sets {
        objects.push(("set", set.family, set.name.clone()));
    }
    (objects.len() <= LISTED_ONE_BY_ONE).then_some(objects)
}

/// Reads back what a plan wrote: each chain, base chain and set it names
/// (`nft list chain|set …`, all at the same time), or our tables of the families it touched,
/// whole, when it wrote many or rebuilt a table.
fn observe_written(dataplane: &Dataplane<'_>, plan: &Plan) -> Result<State, DataplaneError> {
    let Some(objects) = written_objects(plan) else {
        return observe_families(dataplane, &plan.families().into_iter().collect::<Vec<_>>());
    };
    let listings = objects
        .into_iter()
        .map(|(kind, family, name)| {
            (
                family,
                [kind, family_name(family), TABLE]
                    .map(str::to_owned)
                    .into_iter()
                    .chain([name])
                    .collect(),
            )
        })
        .collect();
    list_all(dataplane, listings)
}

/// The listing [`parse_listing`] reads: rule handles (`-a`), numeric priorities (`-y`), set
/// elements included.
const LIST_FLAGS: [&str; 2] = ["-y", "-a"];

/// Lists our table of each family, all at the same time, and parses them in order.
fn observe_families(
    dataplane: &Dataplane<'_>,
    families: &[IpFamily],
) -> Result<State, DataplaneError> {
    let listings = families
        .iter()
        .map(|&family| {
            let what = ["table", family_name(family), TABLE].map(str::to_owned);
            (family, what.to_vec())
        })
        .collect();
    list_all(dataplane, listings)
}

/// Runs `nft -y -a list WHAT…` for every listing at the same time and parses the answers in
/// order, each as its family's. A listing of something that does not exist (a table not
/// created yet, a chain the plan deleted) reads as nothing; any other failure is an error
/// with its command and stderr.
fn list_all(
    dataplane: &Dataplane<'_>,
    listings: Vec<(IpFamily, Vec<String>)>,
) -> Result<State, DataplaneError> {
    let runner = dataplane.runner;
    let args = |what: &[String]| -> Vec<String> {
        LIST_FLAGS
            .iter()
            .map(|flag| (*flag).to_owned())
            .chain(std::iter::once("list".to_owned()))
            .chain(what.iter().cloned())
            .collect()
    };
    let outputs = std::thread::scope(|scope| {
        let running: Vec<_> = listings
            .iter()
            .map(|(_, what)| {
                let args = args(what);
                scope.spawn(move || {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    runner.run("nft", &args, None)
                })
            })
            .collect();
        running.into_iter().map(joined).collect::<Vec<_>>()
    });
    let mut state = State::default();
    for ((family, what), output) in listings.iter().zip(outputs) {
        let output = output.map_err(|source| DataplaneError::Spawn {
            program: "nft".to_owned(),
            source,
        })?;
        if !output.success {
            if output.stderr.contains("No such file or directory") {
                continue;
            }
            // Surface the failure with its command and stderr.
            let args = args(what);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_checked(dataplane.runner, "nft", &args, None)?;
            continue;
        }
        parse::parse_listing(&output.stdout, *family, &mut state);
    }
    Ok(state)
}

/// The families whose table holds chains named otherwise than [`render::chain_name`] and
/// [`render::base_chain_name`] name them: an older release's (`mangle-npg-pi-m`, base chain
/// `mangle-PREROUTING`) or a hand-made one. Their rules jump to names the plan cannot write,
/// so such a table is rebuilt whole, in the same transaction.
fn renamed_families(plan: &Plan) -> BTreeSet<IpFamily> {
    plan.tables
        .iter()
        .filter(|table| {
            table
                .chains
                .iter()
                .any(|chain| !chain.name.starts_with(CHAIN_PREFIX))
                || table
                    .hooks
                    .iter()
                    .any(|hook| !render::KERNEL_CHAINS.contains(&hook.chain.as_str()))
        })
        .map(|table| table.key.family)
        .collect()
}

/// The `nft -f` script that carries out a plan, as one transaction.
pub fn script(plan: &Plan, desired: &State) -> String {
    let mut out = String::new();
    let families: BTreeSet<IpFamily> = plan
        .tables
        .iter()
        .map(|table| table.key.family)
        .chain(plan.sets.iter().map(|set| set.family))
        .collect();
    let wanted = |family: IpFamily| {
        desired.tables.keys().any(|key| key.family == family)
            || desired.sets.values().any(|set| set.family == family)
    };
    // A set whose type changed cannot be altered in place; rebuild that family from scratch
    // inside the same transaction.
    let mut rebuild: BTreeSet<IpFamily> = plan
        .sets
        .iter()
        .filter(|set| set.action == SetAction::Recreate)
        .map(|set| set.family)
        .collect();
    rebuild.extend(renamed_families(plan));
    for family in &families {
        let name = family_name(*family);
        if !wanted(*family) {
            let _ = writeln!(out, "delete table {name} {TABLE}");
            continue;
        }
        if rebuild.contains(family) {
            let _ = writeln!(out, "delete table {name} {TABLE}");
            full_family(&mut out, *family, desired);
            continue;
        }
        let _ = writeln!(out, "add table {name} {TABLE}");
        incremental_family(&mut out, *family, plan, desired);
    }
    out
}

fn full_family(out: &mut String, family: IpFamily, desired: &State) {
    let name = family_name(family);
    let _ = writeln!(out, "add table {name} {TABLE}");
    for (set_name, set) in desired.sets.iter().filter(|(_, set)| set.family == family) {
        let _ = writeln!(out, "{}", set_declaration(set_name, &set.kind, family));
        let members: Vec<String> = set.members.iter().cloned().collect();
        out.push_str(&element_commands("add", family, set_name, &members));
    }
    let tables = desired
        .tables
        .iter()
        .filter(|(key, _)| key.family == family);
    for (key, table) in tables.clone() {
        for chain in table.chains.keys() {
            let _ = writeln!(
                out,
                "add chain {name} {TABLE} {}",
                chain_name(key.table, chain)
            );
        }
    }
    for (_, table) in tables {
        for rules in table.chains.values() {
            for rule in rules.iter() {
                let _ = writeln!(out, "{}", rule.text);
            }
        }
        for hooks in table.hooks.values() {
            for hook in hooks {
                let _ = writeln!(out, "{}", hook.rule.text);
            }
        }
    }
}

fn incremental_family(out: &mut String, family: IpFamily, plan: &Plan, desired: &State) {
    let name = family_name(family);
    let sets = plan.sets.iter().filter(|set| set.family == family);
    for set in sets.clone() {
        match set.action {
            SetAction::Create => {
                let kind = desired
                    .sets
                    .get(&set.name)
                    .map_or(set.kind.as_str(), |s| s.kind.as_str());
                let _ = writeln!(out, "{}", set_declaration(&set.name, kind, family));
                out.push_str(&element_commands("add", family, &set.name, &set.add));
            }
            SetAction::Update => {
                // Deletions first: an interval set refuses a new member that overlaps an old
                // one (a whitelist narrowed from a /24 to a /29 inside it, or widened back), and
                // the whole script is one transaction, so no packet sees the set in between.
                out.push_str(&element_commands("delete", family, &set.name, &set.remove));
                out.push_str(&element_commands("add", family, &set.name, &set.add));
            }
            SetAction::Recreate | SetAction::Delete => {}
        }
    }
    let tables: Vec<_> = plan
        .tables
        .iter()
        .filter(|table| table.key.family == family)
        .collect();
    for table in &tables {
        for chain in table
            .chains
            .iter()
            .filter(|c| c.action == ChainAction::Create)
        {
            let _ = writeln!(
                out,
                "add chain {name} {TABLE} {}",
                chain_name(table.key.table, &chain.name)
            );
        }
    }
    for table in &tables {
        for chain in table
            .chains
            .iter()
            .filter(|c| c.action != ChainAction::Create)
        {
            let _ = writeln!(
                out,
                "flush chain {name} {TABLE} {}",
                chain_name(table.key.table, &chain.name)
            );
        }
        for hook in table.hooks.iter().filter(|hook| !hook.remove.is_empty()) {
            let _ = writeln!(
                out,
                "delete chain {name} {TABLE} {}",
                base_chain_name(table.key.table, &hook.chain)
            );
        }
    }
    for table in &tables {
        for chain in table
            .chains
            .iter()
            .filter(|c| c.action != ChainAction::Delete)
        {
            for rule in &chain.after {
                let _ = writeln!(out, "{}", rule.text);
            }
        }
        for hook in &table.hooks {
            if let Some(insert) = &hook.insert {
                let _ = writeln!(out, "{}", insert.text);
            }
        }
    }
    for table in &tables {
        for chain in table
            .chains
            .iter()
            .filter(|c| c.action == ChainAction::Delete)
        {
            let _ = writeln!(
                out,
                "delete chain {name} {TABLE} {}",
                chain_name(table.key.table, &chain.name)
            );
        }
    }
    for set in sets.filter(|set| set.action == SetAction::Delete) {
        let _ = writeln!(out, "delete set {name} {TABLE} {}", set.name);
    }
}

/// Applies a plan in one `nft -f` transaction (none when there is nothing to write).
fn apply(dataplane: &Dataplane<'_>, plan: &Plan, desired: &State) -> Result<u32, DataplaneError> {
    let script = script(plan, desired);
    if script.is_empty() {
        return Ok(0);
    }
    run_checked(dataplane.runner, "nft", &["-f", "-"], Some(&script))?;
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::parse::parse_listing;
    use super::render::hook_identity;
    use super::*;
    use crate::state::{Counters, SetState, TableKey};

    #[test]
    fn listing_becomes_state() {
        let listing = "table ip nodeport_guard { # handle 3
\tset npg4-n-abc { # handle 1
\t\ttype ipv4_addr
\t\tflags interval
\t\telements = { 192.0.2.0/24, 198.51.100.1,
\t\t\t     198.51.100.5-198.51.100.9 }
\t}

\tset npg4-p-abc { # handle 2
\t\ttype ipv4_addr . inet_proto . inet_service
\t\telements = { 192.0.2.1 . tcp . 8080 }
\t}

\tset npg4-empty { # handle 8
\t\ttype ipv4_addr
\t\tflags interval
\t}

\tchain npg-m-PREROUTING { # handle 3
\t\tcounter packets 3 bytes 180 return comment \"npg:BBBB words\" # handle 6
\t\taccept # handle 7
\t}

\tchain npg-m-empty { # handle 9
\t}

\tchain npg-mangle-PREROUTING { # handle 4
\t\ttype filter hook prerouting priority -151; policy accept;
\t\tcounter packets 0 bytes 0 jump npg-m-PREROUTING comment \"npg:AAAA hook\" # handle 5
\t}

\tchain npg-filter-INPUT { # handle 10
\t\ttype filter hook input priority -1; policy accept;
\t}
}
";
        let mut state = State::default();
        parse_listing(listing, IpFamily::V4, &mut state);
        let key = TableKey {
            family: IpFamily::V4,
            table: Table::Mangle,
        };
        let table = &state.tables[&key];
        let rules = &table.chains["npg-PREROUTING"];
        // A made-up hash: the rule as listed does not hash to it, so it reads as changed.
        assert_eq!(rules[0].hash.as_deref(), Some("BBBB~"));
        assert_eq!(
            rules[0].counters.as_deref(),
            Some(&Counters {
                packets: 3,
                bytes: 180
            })
        );
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[1].hash, None, "a rule without our comment is foreign");
        assert!(
            rules[1]
                .text
                .contains("not written by nodeport-guard: accept")
        );
        assert!(
            table.chains["npg-empty"].is_empty(),
            "an empty chain of ours is listed"
        );
        assert!(
            !table.chains.contains_key("PREROUTING"),
            "a base chain is a hook"
        );
        let hook = &table.hooks["PREROUTING"][0];
        let expected = crate::state::rule_hash(
            Table::Mangle,
            "PREROUTING",
            &hook_identity("prerouting", -151, "accept", "npg-m-PREROUTING"),
        );
        assert_eq!(hook.rule.hash.as_deref(), Some(expected.as_str()));
        assert_eq!(hook.rule.counters.as_deref(), Some(&Counters::default()));
        // A base chain of ours without its jump is still listed, as a hook that is wrong.
        let filter = &state.tables[&TableKey {
            family: IpFamily::V4,
            table: Table::Filter,
        }];
        assert_eq!(filter.hooks["INPUT"].len(), 1);
        assert_eq!(filter.hooks["INPUT"][0].rule.hash, None);
        assert_eq!(state.sets["npg4-n-abc"].kind, "ipv4_addr,interval");
        assert_eq!(
            state.sets["npg4-n-abc"].members,
            BTreeSet::from(
                ["192.0.2.0/24", "198.51.100.1", "198.51.100.5-198.51.100.9"].map(String::from)
            ),
            "elements spread over lines, single addresses and ranges"
        );
        assert_eq!(
            state.sets["npg4-p-abc"].kind,
            "ipv4_addr . inet_proto . inet_service"
        );
        assert_eq!(
            state.sets["npg4-p-abc"].members,
            BTreeSet::from(["192.0.2.1 . tcp . 8080".to_owned()])
        );
        assert!(state.sets["npg4-empty"].members.is_empty());
        assert_eq!(state.sets.len(), 3);
    }

    /// Observed rules carry the command that creates them again (a rollback writes them
    /// back), without their counter values, and base chains their declaration and jump.
    #[test]
    fn listed_rules_become_commands_that_recreate_them() {
        let listing = "table ip nodeport_guard { # handle 1
\tset s { # handle 1
\t\ttype ipv4_addr
\t\tflags interval
\t}

\tchain npg-m-x { # handle 2
\t\tip saddr @s counter packets 3 bytes 180 meta mark set meta mark | 0x00020000 comment \"npg:BBB policy x ingress rule 0\" # handle 5
\t\tudp dport != { 1-5, 30008 } counter packets 0 bytes 0 log prefix \"LPI1|x\" group 1 comment \"npg:CCC\" # handle 7
\t}

\tchain npg-mangle-PREROUTING { # handle 3
\t\ttype filter hook prerouting priority mangle - 1; policy accept;
\t\tcounter packets 9 bytes 900 jump npg-m-x comment \"npg:AAA nodeport-guard hook\" # handle 4
\t}
}
";
        let mut state = State::default();
        parse_listing(
            &listing.replace("mangle - 1", "-151"),
            IpFamily::V4,
            &mut state,
        );
        let table = &state.tables[&TableKey {
            family: IpFamily::V4,
            table: Table::Mangle,
        }];
        let rules = &table.chains["npg-x"];
        assert_eq!(rules.len(), 2);
        assert_eq!(
            &*rules[0].text,
            "add rule ip nodeport_guard npg-m-x ip saddr @s counter meta mark set meta mark | 0x00020000 comment \"npg:BBB policy x ingress rule 0\""
        );
        assert_eq!(
            &*rules[1].text,
            "add rule ip nodeport_guard npg-m-x udp dport != { 1-5, 30008 } counter log prefix \"LPI1|x\" group 1 comment \"npg:CCC\""
        );
        assert_eq!(
            &*table.hooks["PREROUTING"][0].rule.text,
            "add chain ip nodeport_guard npg-mangle-PREROUTING { type filter hook prerouting priority -151; policy accept; }\n\
             add rule ip nodeport_guard npg-mangle-PREROUTING counter jump npg-m-x comment \"npg:AAA nodeport-guard hook\""
        );
    }

    fn dispatch_chain() -> crate::ruleset::Chain {
        use crate::ruleset::{Action, Match};
        let to = |name: &str, action: Action| {
            Rule::new(vec![Match::InInterface(name.to_owned())], action)
                .comment(format!("to {name}"))
        };
        crate::ruleset::Chain {
            name: "npg-from-host-endpoint".into(),
            rules: vec![
                to("eth1", Action::Goto("npg-fh-eth1".into())),
                to("eth0", Action::Goto("npg-fh-eth0".into())),
                to("eth0", Action::Goto("npg-fh-shadowed".into())),
                to("bond0", Action::Return),
                Rule::new(Vec::new(), Action::Goto("npg-fh-any".into())),
                to("eth9", Action::Goto("npg-fh-eth9".into())),
            ]
            .into(),
        }
    }

    /// A dispatch chain's interface rules become one verdict map, in a fixed order, up to the
    /// first rule that map cannot stand for: a second rule for a name already mapped (the next
    /// map starts there, after the one that shadows it) or a rule of another shape. A lone
    /// interface rule stays a rule.
    #[test]
    fn interface_rules_in_a_row_become_one_verdict_map() {
        let lines: Vec<String> =
            render::render_chain(Table::Mangle, &dispatch_chain(), IpFamily::V4)
                .into_iter()
                .map(|rule| rule.line.split(" comment ").next().unwrap().to_owned())
                .collect();
        assert_eq!(
            lines,
            [
                "add rule ip nodeport_guard npg-m-from-host-endpoint counter iifname vmap { \"eth0\" : goto npg-m-fh-eth0, \"eth1\" : goto npg-m-fh-eth1 }",
                "add rule ip nodeport_guard npg-m-from-host-endpoint counter iifname vmap { \"bond0\" : return, \"eth0\" : goto npg-m-fh-shadowed }",
                "add rule ip nodeport_guard npg-m-from-host-endpoint counter goto npg-m-fh-any",
                "add rule ip nodeport_guard npg-m-from-host-endpoint iifname \"eth9\" counter goto npg-m-fh-eth9",
            ]
        );
    }

    /// nft lists a map's elements in an order of its own; reading a listing puts them in the
    /// render's, so a map the kernel holds reads back as the line that wrote it.
    #[test]
    fn a_listed_verdict_map_reads_back_as_rendered() {
        let chain = crate::ruleset::Chain {
            name: "npg-from-host-endpoint".into(),
            rules: dispatch_chain().rules[..2].into(),
        };
        let rendered = render::render_chain(Table::Mangle, &chain, IpFamily::V4);
        let comment = rendered[0].line.split(" comment ").nth(1).unwrap();
        let listing = format!(
            "table ip nodeport_guard {{ # handle 1
\tchain npg-m-from-host-endpoint {{ # handle 2
\t\tcounter packets 7 bytes 420 iifname vmap {{ \"eth1\" : goto npg-m-fh-eth1, \"eth0\" : goto npg-m-fh-eth0 }} comment {comment} # handle 5
\t}}
}}
"
        );
        let mut state = State::default();
        parse_listing(&listing, IpFamily::V4, &mut state);
        let table = &state.tables[&TableKey {
            family: IpFamily::V4,
            table: Table::Mangle,
        }];
        let rules = &table.chains["npg-from-host-endpoint"];
        assert_eq!(rules.len(), 1);
        assert_eq!(&*rules[0].text, rendered[0].line);
        assert_eq!(rules[0].hash.as_deref(), Some(rendered[0].hash.as_str()));
    }

    /// An interval set refuses a member overlapping one it holds, so a member replaced by a
    /// net inside it (or around it) must be deleted before the new one is added, in the same
    /// transaction.
    #[test]
    fn set_updates_delete_before_they_add() {
        let plan = Plan {
            tables: vec![],
            sets: vec![crate::plan::SetChange {
                name: "npg4-s-office".into(),
                action: SetAction::Update,
                family: IpFamily::V4,
                kind: "ipv4_addr,interval".into(),
                add: vec!["203.0.113.8/29".into()],
                remove: vec!["203.0.113.0/24".into()],
            }],
        };
        let mut desired = State::default();
        desired.sets.insert(
            "npg4-s-office".into(),
            SetState {
                family: IpFamily::V4,
                kind: "ipv4_addr,interval".into(),
                members: ["203.0.113.8/29".to_owned()].into(),
            },
        );
        assert_eq!(
            script(&plan, &desired),
            "add table ip nodeport_guard\n\
             delete element ip nodeport_guard npg4-s-office { 203.0.113.0/24 }\n\
             add element ip nodeport_guard npg4-s-office { 203.0.113.8/29 }\n"
        );
    }

    #[test]
    fn chain_names_begin_with_npg_fit_28_and_read_back() {
        use super::render::split_chain_name;
        let longest = "npg-pi-".to_owned() + &"a".repeat(crate::ruleset::MAX_CHAIN_NAME - 7);
        for table in Table::ALL {
            for chain in [
                "npg-PREROUTING",
                "npg-pi-web",
                "npg-fh-eth0",
                longest.as_str(),
            ] {
                let name = chain_name(table, chain);
                assert!(name.starts_with("npg-") && name.len() <= 28, "{name}");
                assert_eq!(split_chain_name(&name), (table, chain.to_owned()));
            }
            for kernel_chain in render::KERNEL_CHAINS {
                let name = base_chain_name(table, kernel_chain);
                assert!(name.starts_with("npg-"), "{name}");
                assert_eq!(split_chain_name(&name), (table, kernel_chain.to_owned()));
            }
        }
        assert_eq!(chain_name(Table::Mangle, "npg-pi-web"), "npg-m-pi-web");
        assert_eq!(
            base_chain_name(Table::Mangle, "PREROUTING"),
            "npg-mangle-PREROUTING"
        );
        // An older release's names are not ours any more: filed as they are, to be removed;
        // a hand-made `npg-…` of neither form is marked so (see `renamed_families`).
        for old in ["mangle-npg-pi-web", "mangle-PREROUTING"] {
            assert_eq!(split_chain_name(old), (Table::Filter, old.to_owned()));
        }
        for odd in ["npg-foo", "npg-m", "npg-x-foo"] {
            let (table, chain) = split_chain_name(odd);
            assert_eq!(table, Table::Filter);
            assert!(!chain.starts_with("npg-"), "{chain}");
        }
    }

    #[test]
    fn removing_everything_of_a_family_deletes_its_table() {
        let plan = Plan {
            tables: vec![crate::plan::TablePlan {
                key: TableKey {
                    family: IpFamily::V6,
                    table: Table::Mangle,
                },
                chains: vec![],
                hooks: vec![],
            }],
            sets: vec![],
        };
        assert_eq!(
            script(&plan, &State::default()),
            "delete table ip6 nodeport_guard\n"
        );
    }
}
