//! The native nftables backend: reads our tables with `nft -j list table`, writes every change
//! as one `nft -f` transaction (sets, chains and hooks of both families together).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::Value;

use super::{Dataplane, DataplaneError, run_checked};
use crate::model::IpFamily;
use crate::plan::{ChainAction, Plan, SetAction};
use crate::render::nft::{
    TABLE, base_chain_name, chain_name, element_commands, family_name, hook_identity,
    set_declaration,
};
use crate::ruleset::Table;
use crate::state::{Counters, HookRule, RuleLine, SetState, State, TableKey, TableState};

/// Reads our tables.
pub fn observe(dataplane: &Dataplane<'_>) -> Result<State, DataplaneError> {
    observe_families(dataplane, &IpFamily::BOTH)
}

/// Reads back what a plan wrote: our tables of the families it touched, whole (a transaction
/// that rebuilds a family's table rewrites more than the plan names).
pub fn observe_written(dataplane: &Dataplane<'_>, plan: &Plan) -> Result<State, DataplaneError> {
    observe_families(dataplane, &plan.families().into_iter().collect::<Vec<_>>())
}

/// Lists our table of each family, as JSON and as text, all at the same time, and parses them
/// in order.
fn observe_families(
    dataplane: &Dataplane<'_>,
    families: &[IpFamily],
) -> Result<State, DataplaneError> {
    let runner = dataplane.runner;
    let listings = std::thread::scope(|scope| {
        let listings: Vec<_> = families
            .iter()
            .map(|&family| {
                let json = scope.spawn(move || {
                    runner.run(
                        "nft",
                        &["-j", "list", "table", family_name(family), TABLE],
                        None,
                    )
                });
                // The same rules as nft prints them, by handle, so that an observed state can
                // be written back (a failed or unconfirmed apply puts the previous rules back).
                // `-t` leaves set elements out; they are read from the JSON.
                let text = scope.spawn(move || {
                    run_checked(
                        runner,
                        "nft",
                        &["-a", "-t", "list", "table", family_name(family), TABLE],
                        None,
                    )
                });
                (family, json, text)
            })
            .collect();
        listings
            .into_iter()
            .map(|(family, json, text)| {
                (
                    family,
                    super::iptables::joined(json),
                    super::iptables::joined(text),
                )
            })
            .collect::<Vec<_>>()
    });
    let mut state = State::default();
    for (family, output, listing) in listings {
        let output = output.map_err(|source| DataplaneError::Spawn {
            program: "nft".to_owned(),
            source,
        })?;
        if !output.success {
            if output.stderr.contains("No such file or directory") {
                continue;
            }
            // Surface the failure with its command and stderr.
            run_checked(
                dataplane.runner,
                "nft",
                &["-j", "list", "table", family_name(family), TABLE],
                None,
            )?;
            continue;
        }
        let json: Value = serde_json::from_str(&output.stdout).map_err(|error| {
            DataplaneError::Verify(format!(
                "`nft -j list table` printed JSON that cannot be read: {error}"
            ))
        })?;
        let texts = rule_texts(&listing?.stdout);
        parse_table_with_texts(&json, family, &texts, &mut state);
    }
    Ok(state)
}

/// The rules of an `nft -a list table` listing by handle, each as the `add rule` command that
/// creates it again, with its counter values left out (they are not part of the rule, and a
/// text that changed with traffic would look like a different state).
pub fn rule_texts(listing: &str) -> BTreeMap<u64, String> {
    let mut texts = BTreeMap::new();
    let mut table = String::new();
    let mut chain: Option<String> = None;
    for line in listing.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("table ") {
            // `table ip nodeport_guard { # handle 1`
            table = rest.split(" {").next().unwrap_or_default().to_owned();
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("chain ") {
            chain = rest.split_whitespace().next().map(str::to_owned);
            continue;
        }
        if trimmed.starts_with("set ") || trimmed == "}" {
            chain = None;
            continue;
        }
        let (Some(chain), Some((body, handle))) = (&chain, trimmed.rsplit_once(" # handle "))
        else {
            continue;
        };
        let Ok(handle) = handle.trim().parse::<u64>() else {
            continue;
        };
        texts.insert(
            handle,
            format!("add rule {table} {chain} {}", without_counter_values(body)),
        );
    }
    texts
}

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

/// Splits an nft chain name into the iptables table it stands for and our chain name.
fn split_chain(name: &str) -> (Table, String) {
    for table in Table::ALL {
        if let Some(rest) = name.strip_prefix(&format!("{table}-")) {
            return (table, rest.to_owned());
        }
    }
    // Not a name we write: file it under filter so the plan removes it.
    (Table::Filter, name.to_owned())
}

fn hash_of_comment(comment: Option<&str>) -> Option<String> {
    let text = comment?.strip_prefix(crate::render::iptables::HASH_PREFIX)?;
    let hash: String = text
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    (!hash.is_empty()).then_some(hash)
}

/// Turns `nft -j list table` output into our state. Pure.
pub fn parse_table(json: &Value, family: IpFamily, state: &mut State) {
    parse_table_with_texts(json, family, &BTreeMap::new(), state);
}

/// [`parse_table`], with the rules' texts by handle (from [`rule_texts`]): rules of ours then
/// carry the command that creates them again, and base chains of ours the commands that
/// declare them and their jump, so the state can be written back. Pure.
pub fn parse_table_with_texts(
    json: &Value,
    family: IpFamily,
    texts: &BTreeMap<u64, String>,
    state: &mut State,
) {
    let Some(items) = json.get("nftables").and_then(Value::as_array) else {
        return;
    };
    // Base chains: name → (hook, priority, policy).
    let mut base_chains: Vec<(String, String, i64, String)> = Vec::new();
    for item in items {
        if let Some(chain) = item.get("chain") {
            let name = chain
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match chain.get("hook").and_then(Value::as_str) {
                Some(hook) => base_chains.push((
                    name.to_owned(),
                    hook.to_owned(),
                    chain
                        .get("prio")
                        .and_then(Value::as_i64)
                        .unwrap_or_default(),
                    chain
                        .get("policy")
                        .and_then(Value::as_str)
                        .unwrap_or("accept")
                        .to_owned(),
                )),
                None => {
                    let (table, ours) = split_chain(name);
                    table_state(state, family, table)
                        .chains
                        .entry(ours)
                        .or_default();
                }
            }
        }
        if let Some(set) = item.get("set") {
            let name = set.get("name").and_then(Value::as_str).unwrap_or_default();
            let set_type = match set.get("type") {
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" . "),
                Some(Value::String(text)) => text.clone(),
                _ => String::new(),
            };
            let flags: Vec<&str> = set
                .get("flags")
                .and_then(Value::as_array)
                .map(|flags| flags.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let kind = if flags.is_empty() {
                set_type
            } else {
                format!("{set_type},{}", flags.join(","))
            };
            let members: BTreeSet<String> = set
                .get("elem")
                .and_then(Value::as_array)
                .map(|elements| elements.iter().map(element_text).collect())
                .unwrap_or_default();
            state.sets.insert(
                name.to_owned(),
                SetState {
                    family,
                    kind,
                    members,
                },
            );
        }
    }
    for item in items {
        let Some(rule) = item.get("rule") else {
            continue;
        };
        let chain = rule
            .get("chain")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let comment = rule.get("comment").and_then(Value::as_str);
        let handle = rule
            .get("handle")
            .and_then(Value::as_u64)
            .unwrap_or_default();
        let expressions = rule
            .get("expr")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let counters = expressions.iter().find_map(|e| {
            let counter = e.get("counter")?;
            Some(Counters {
                packets: counter.get("packets")?.as_u64()?,
                bytes: counter.get("bytes")?.as_u64()?,
            })
        });
        if let Some((_, hook, priority, policy)) =
            base_chains.iter().find(|(name, ..)| name == chain)
        {
            let (table, kernel_chain) = split_chain(chain);
            let target = expressions
                .iter()
                .find_map(|e| e.get("jump")?.get("target")?.as_str())
                .unwrap_or_default();
            let identity = hook_identity(hook, *priority, policy, target);
            let hooks = table_state(state, family, table)
                .hooks
                .entry(kernel_chain.clone())
                .or_default();
            let hash = if hash_of_comment(comment).is_some() {
                Some(crate::render::iptables::rule_hash(
                    table,
                    &kernel_chain,
                    &identity,
                ))
            } else {
                None
            };
            let text = match (comment, &hash) {
                (Some(comment), Some(_)) => crate::render::nft::hook_commands(
                    family, chain, hook, *priority, policy, target, comment,
                ),
                _ => format!("base chain {chain}: {identity} (handle {handle})"),
            };
            hooks.push(HookRule {
                position: hooks.len() + 1,
                rule: RuleLine {
                    hash,
                    text,
                    counters,
                },
            });
            continue;
        }
        let (table, ours) = split_chain(chain);
        let hash = hash_of_comment(comment);
        let text = match comment {
            Some(_) if hash.is_some() && texts.contains_key(&handle) => texts[&handle].clone(),
            Some(comment) if hash.is_some() => format!("rule {handle}: {comment}"),
            _ => format!(
                "rule {handle}, not written by nodeport-guard: {}",
                Value::Array(expressions)
            ),
        };
        table_state(state, family, table)
            .chains
            .entry(ours)
            .or_default()
            .push(RuleLine {
                hash,
                text,
                counters,
            });
    }
    // A base chain without rules is still ours and still wrong.
    for (name, hook, priority, policy) in &base_chains {
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
                        hook_identity(hook, *priority, policy, "")
                    ),
                    counters: None,
                },
            });
        }
    }
}

fn table_state(state: &mut State, family: IpFamily, table: Table) -> &mut TableState {
    state.tables.entry(TableKey { family, table }).or_default()
}

/// A set element as nft lists it: `192.0.2.0/24`, `192.0.2.1`, `192.0.2.1 . tcp . 8080`.
fn element_text(element: &Value) -> String {
    match element {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        Value::Object(object) => {
            if let Some(prefix) = object.get("prefix") {
                let address = prefix
                    .get("addr")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let length = prefix
                    .get("len")
                    .and_then(Value::as_u64)
                    .unwrap_or_default();
                format!("{address}/{length}")
            } else if let Some(Value::Array(parts)) = object.get("concat") {
                parts
                    .iter()
                    .map(element_text)
                    .collect::<Vec<_>>()
                    .join(" . ")
            } else if let Some(Value::Array(range)) = object.get("range") {
                range.iter().map(element_text).collect::<Vec<_>>().join("-")
            } else if let Some(inner) = object.get("elem").and_then(|e| e.get("val")) {
                element_text(inner)
            } else {
                element.to_string()
            }
        }
        other => other.to_string(),
    }
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
    let rebuild: BTreeSet<IpFamily> = plan
        .sets
        .iter()
        .filter(|set| set.action == SetAction::Recreate)
        .map(|set| set.family)
        .collect();
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
            for rule in rules {
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

/// Applies a plan in one `nft -f` transaction.
pub fn apply(
    dataplane: &Dataplane<'_>,
    plan: &Plan,
    desired: &State,
) -> Result<(), DataplaneError> {
    let script = script(plan, desired);
    if script.is_empty() {
        return Ok(());
    }
    run_checked(dataplane.runner, "nft", &["-f", "-"], Some(&script))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_becomes_state() {
        let json: Value = serde_json::from_str(r#"{"nftables": [
            {"metainfo": {"version": "1.0.6"}},
            {"table": {"family": "ip", "name": "nodeport_guard", "handle": 3}},
            {"set": {"family": "ip", "name": "npg4-n-abc", "table": "nodeport_guard", "type": "ipv4_addr", "handle": 1, "flags": ["interval"], "elem": [{"prefix": {"addr": "192.0.2.0", "len": 24}}, "198.51.100.1"]}},
            {"set": {"family": "ip", "name": "npg4-p-abc", "table": "nodeport_guard", "type": ["ipv4_addr", "inet_proto", "inet_service"], "handle": 2, "elem": [{"concat": ["192.0.2.1", "tcp", 8080]}]}},
            {"chain": {"family": "ip", "table": "nodeport_guard", "name": "mangle-npg-PREROUTING", "handle": 3}},
            {"chain": {"family": "ip", "table": "nodeport_guard", "name": "mangle-PREROUTING", "handle": 4, "type": "filter", "hook": "prerouting", "prio": -151, "policy": "accept"}},
            {"rule": {"family": "ip", "table": "nodeport_guard", "chain": "mangle-npg-PREROUTING", "handle": 6, "comment": "npg:BBBB words", "expr": [{"counter": {"packets": 3, "bytes": 180}}, {"return": null}]}},
            {"rule": {"family": "ip", "table": "nodeport_guard", "chain": "mangle-npg-PREROUTING", "handle": 7, "expr": [{"accept": null}]}},
            {"rule": {"family": "ip", "table": "nodeport_guard", "chain": "mangle-PREROUTING", "handle": 5, "comment": "npg:AAAA hook", "expr": [{"counter": {"packets": 0, "bytes": 0}}, {"jump": {"target": "mangle-npg-PREROUTING"}}]}}
        ]}"#).expect("json");
        let mut state = State::default();
        parse_table(&json, IpFamily::V4, &mut state);
        let key = TableKey {
            family: IpFamily::V4,
            table: Table::Mangle,
        };
        let table = &state.tables[&key];
        let rules = &table.chains["npg-PREROUTING"];
        assert_eq!(rules[0].hash.as_deref(), Some("BBBB"));
        assert_eq!(
            rules[0].counters,
            Some(Counters {
                packets: 3,
                bytes: 180
            })
        );
        assert_eq!(rules[1].hash, None);
        let hook = &table.hooks["PREROUTING"][0];
        let expected = crate::render::iptables::rule_hash(
            Table::Mangle,
            "PREROUTING",
            &hook_identity("prerouting", -151, "accept", "mangle-npg-PREROUTING"),
        );
        assert_eq!(hook.rule.hash.as_deref(), Some(expected.as_str()));
        assert_eq!(state.sets["npg4-n-abc"].kind, "ipv4_addr,interval");
        assert!(state.sets["npg4-n-abc"].members.contains("192.0.2.0/24"));
        assert!(
            state.sets["npg4-p-abc"]
                .members
                .contains("192.0.2.1 . tcp . 8080")
        );
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

\tchain mangle-npg-x { # handle 2
\t\tip saddr @s counter packets 3 bytes 180 meta mark set meta mark | 0x00020000 comment \"npg:BBB policy x ingress rule 0\" # handle 5
\t\tudp dport != { 1-5, 30008 } counter packets 0 bytes 0 log prefix \"LPI1|x\" group 1 comment \"npg:CCC\" # handle 7
\t}

\tchain mangle-PREROUTING { # handle 3
\t\ttype filter hook prerouting priority mangle - 1; policy accept;
\t\tcounter packets 9 bytes 900 jump mangle-npg-x comment \"npg:AAA nodeport-guard hook\" # handle 4
\t}
}
";
        let texts = rule_texts(listing);
        assert_eq!(
            texts[&5],
            "add rule ip nodeport_guard mangle-npg-x ip saddr @s counter meta mark set meta mark | 0x00020000 comment \"npg:BBB policy x ingress rule 0\""
        );
        assert_eq!(
            texts[&7],
            "add rule ip nodeport_guard mangle-npg-x udp dport != { 1-5, 30008 } counter log prefix \"LPI1|x\" group 1 comment \"npg:CCC\""
        );
        assert_eq!(texts.len(), 3);

        let json: Value = serde_json::from_str(r#"{"nftables": [
            {"chain": {"family": "ip", "table": "nodeport_guard", "name": "mangle-npg-x", "handle": 2}},
            {"chain": {"family": "ip", "table": "nodeport_guard", "name": "mangle-PREROUTING", "handle": 3, "type": "filter", "hook": "prerouting", "prio": -151, "policy": "accept"}},
            {"rule": {"family": "ip", "table": "nodeport_guard", "chain": "mangle-npg-x", "handle": 5, "comment": "npg:BBB policy x ingress rule 0", "expr": [{"counter": {"packets": 3, "bytes": 180}}]}},
            {"rule": {"family": "ip", "table": "nodeport_guard", "chain": "mangle-PREROUTING", "handle": 4, "comment": "npg:AAA nodeport-guard hook", "expr": [{"counter": {"packets": 9, "bytes": 900}}, {"jump": {"target": "mangle-npg-x"}}]}}
        ]}"#).expect("json");
        let mut state = State::default();
        parse_table_with_texts(&json, IpFamily::V4, &texts, &mut state);
        let table = &state.tables[&TableKey {
            family: IpFamily::V4,
            table: Table::Mangle,
        }];
        assert_eq!(table.chains["npg-x"][0].text, texts[&5]);
        assert_eq!(
            table.hooks["PREROUTING"][0].rule.text,
            "add chain ip nodeport_guard mangle-PREROUTING { type filter hook prerouting priority -151; policy accept; }\n\
             add rule ip nodeport_guard mangle-PREROUTING counter jump mangle-npg-x comment \"npg:AAA nodeport-guard hook\""
        );
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
