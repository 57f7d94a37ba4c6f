//! `nft list …`: our tables and iptables-nft's, as nft v1.0.6 prints them.

use super::*;

/// nft's warning when it lists a table iptables-nft made.
pub(super) fn xt_warning(kernel: &Kernel, family: &str, name: &str) -> String {
    let xt = kernel.nft.table(family, name).is_none()
        && family_index(family).is_some_and(|index| kernel.nft_xt[index].table(name).is_some());
    if xt {
        format!("# Warning: table {family} {name} is managed by iptables-nft, do not touch!\n")
    } else {
        String::new()
    }
}

pub(super) fn missing(words: &[&str], at: usize) -> Output {
    let line = words.join(" ");
    let start: usize = words[..at].iter().map(|w| w.len() + 1).sum();
    let carets = format!("{}{}", " ".repeat(start), "^".repeat(words[at].len()));
    output(
        1,
        String::new(),
        format!("Error: No such file or directory\n{line}\n{carets}\n"),
    )
}

pub(super) fn family_index(family: &str) -> Option<usize> {
    match family {
        "ip" => Some(0),
        "ip6" => Some(1),
        _ => None,
    }
}

/// Every nf_tables table, iptables-nft's included, in the order they were made.
pub(super) fn table_names(kernel: &Kernel) -> Vec<(String, String)> {
    let mut names: Vec<(u64, String, String)> = Vec::new();
    for (family, store) in ["ip", "ip6"].into_iter().zip(&kernel.nft_xt) {
        for table in &store.tables {
            names.push((table.handle, family.to_owned(), table.name.clone()));
        }
    }
    for table in &kernel.nft.tables {
        names.push((table.handle, table.family.clone(), table.name.clone()));
    }
    names.sort();
    names
        .into_iter()
        .map(|(_, family, name)| (family, name))
        .collect()
}

/// `nft list ruleset` of nft's own tables (not those of iptables-nft, whose chains the
/// iptables-nft saves show), as [`super::FakeKernel::snapshot`] uses it.
pub(in crate::dataplane::fake) fn list_own_tables(kernel: &Kernel, handles: bool) -> String {
    kernel
        .nft
        .tables
        .iter()
        .filter_map(|table| list_native(table, None, handles, true))
        .collect()
}

pub(super) fn list_ruleset_with(kernel: &Kernel, handles: bool, numeric: bool) -> String {
    let mut out = String::new();
    for (family, name) in table_names(kernel) {
        if let Some(text) = list_table(kernel, &family, &name, None, handles, numeric) {
            out.push_str(&text);
        }
    }
    out
}

pub(super) fn handle_note(handles: bool, handle: u64) -> String {
    if handles {
        format!(" # handle {handle}")
    } else {
        String::new()
    }
}

/// How nft names a priority without `-y`.
pub(super) fn priority_text(priority: i64, numeric: bool) -> String {
    if numeric {
        return priority.to_string();
    }
    let named = [
        ("raw", -300),
        ("mangle", -150),
        ("dstnat", -100),
        ("filter", 0),
        ("security", 50),
        ("srcnat", 100),
    ];
    for (name, value) in named {
        let difference = priority - value;
        if difference == 0 {
            return name.to_owned();
        }
        if difference.abs() <= 10 {
            let sign = if difference < 0 { '-' } else { '+' };
            return format!("{name} {sign} {}", difference.abs());
        }
    }
    priority.to_string()
}

/// A set's elements as `nft list` prints them: as many to a line as the key's width allows
/// (seen with nft 1.0.6: five `inet_service`, two `ipv4_addr`, one `ipv6_addr` or
/// concatenation).
pub(super) fn elements_text(kind: &str, elements: &[String]) -> String {
    let bits: usize = kind
        .split(" . ")
        .map(|part| match part.trim() {
            "inet_service" => 16,
            "ipv6_addr" => 128,
            _ => 32,
        })
        .sum();
    let per_line = (80 / bits).max(1);
    let mut out = String::from("\t\telements = { ");
    for (index, element) in elements.iter().enumerate() {
        out.push_str(element);
        if index + 1 == elements.len() {
            out.push_str(" }\n");
        } else if (index + 1) % per_line == 0 {
            out.push_str(",\n\t\t\t     ");
        } else {
            out.push_str(", ");
        }
    }
    out
}

pub(super) fn list_table(
    kernel: &Kernel,
    family: &str,
    name: &str,
    only_chain: Option<&str>,
    handles: bool,
    numeric: bool,
) -> Option<String> {
    if let Some(table) = kernel.nft.table(family, name) {
        return list_native(table, only_chain, handles, numeric);
    }
    let store = &kernel.nft_xt[family_index(family)?];
    list_xt(store, family, name, only_chain, handles, numeric)
}

/// `nft list set FAMILY TABLE NAME` of a native table: the table around that one set.
pub(super) fn list_native_set(table: &Table, name: &str, handles: bool) -> Option<String> {
    let only = Table {
        sets: table
            .sets
            .iter()
            .filter(|set| set.name == name)
            .cloned()
            .collect(),
        chains: Vec::new(),
        ..table.clone()
    };
    if only.sets.is_empty() {
        return None;
    }
    // nft prints the set's handle with `-a`, not the table's.
    let text = list_native(&only, None, handles, true)?;
    let (first, rest) = text.split_once('\n')?;
    let first = first
        .split_once(" # handle")
        .map_or(first, |(head, _)| head);
    let first = if first.ends_with('{') {
        first.to_owned()
    } else {
        format!("{first} {{")
    };
    Some(format!("{first}\n{rest}"))
}

pub(super) fn list_native(
    table: &Table,
    only_chain: Option<&str>,
    handles: bool,
    numeric: bool,
) -> Option<String> {
    let mut blocks: Vec<String> = Vec::new();
    if only_chain.is_none() {
        for set in &table.sets {
            let mut block = format!(
                "\tset {} {{{}\n",
                set.name,
                handle_note(handles, set.handle)
            );
            block.push_str(&format!("\t\ttype {}\n", set.kind));
            if !set.flags.is_empty() {
                block.push_str(&format!("\t\tflags {}\n", set.flags.join(",")));
            }
            if !set.elements.is_empty() {
                let mut elements = set.elements.clone();
                if set.interval() {
                    elements.sort_by_key(|element| range_of(element).map(|(start, _)| start));
                }
                block.push_str(&elements_text(&set.kind, &elements));
            }
            block.push_str("\t}\n");
            blocks.push(block);
        }
    }
    let mut found = only_chain.is_none();
    for chain in &table.chains {
        if only_chain.is_some_and(|only| only != chain.name) {
            continue;
        }
        found = true;
        let mut block = format!(
            "\tchain {} {{{}\n",
            chain.name,
            handle_note(handles, chain.handle)
        );
        if let Some(base) = &chain.base {
            block.push_str(&format!(
                "\t\ttype {} hook {} priority {}; policy {};\n",
                base.kind,
                base.hook,
                priority_text(base.priority, numeric),
                base.policy
            ));
        }
        for rule in &chain.rules {
            block.push_str(&format!(
                "\t\t{}{}\n",
                with_counter(&rule.body, rule.counters),
                handle_note(handles, rule.handle)
            ));
        }
        block.push_str("\t}\n");
        blocks.push(block);
    }
    if !found {
        return None;
    }
    Some(format!(
        "table {} {} {{{}\n{}}}\n",
        table.family,
        table.name,
        handle_note(handles, table.handle),
        blocks.join("\n")
    ))
}

/// How iptables-nft's base chain for a built-in chain is declared.
pub(super) fn xt_base(table: &str, chain: &str) -> (String, i64) {
    let kind = match (table, chain) {
        ("nat", _) => "nat",
        ("mangle", "OUTPUT") => "route",
        _ => "filter",
    };
    let priority = match (table, chain) {
        ("raw", _) => -300,
        ("mangle", _) => -150,
        ("nat", "PREROUTING" | "OUTPUT") => -100,
        ("nat", _) => 100,
        ("security", _) => 50,
        _ => 0,
    };
    (kind.to_owned(), priority)
}

pub(super) fn list_xt(
    store: &Store,
    family: &str,
    name: &str,
    only_chain: Option<&str>,
    handles: bool,
    numeric: bool,
) -> Option<String> {
    let table = store.table(name)?;
    let mut blocks = Vec::new();
    let mut handle = 0;
    let mut chains: Vec<&xtables::Chain> = table.chains.iter().collect();
    chains.sort_by_key(|chain| chain.nft_order);
    for chain in chains {
        handle += 1;
        if chain.builtin && !chain.base_exists {
            continue;
        }
        if only_chain.is_some_and(|only| only != chain.name) {
            continue;
        }
        let mut block = format!(
            "\tchain {} {{{}\n",
            chain.name,
            handle_note(handles, handle)
        );
        if chain.builtin {
            let (kind, priority) = xt_base(name, &chain.name);
            block.push_str(&format!(
                "\t\ttype {kind} hook {} priority {}; policy {};\n",
                chain.name.to_lowercase(),
                priority_text(priority, numeric),
                chain.policy.to_lowercase()
            ));
        }
        for rule in &chain.rules {
            handle += 1;
            let action = match rule.target() {
                Some(target) => format!("jump {target}"),
                None => "xt target".to_owned(),
            };
            // A comment match prints as nothing, and leaves its space.
            let space = if rule.spec.contains("-m comment") {
                " "
            } else {
                ""
            };
            block.push_str(&format!(
                "\t\t{space}counter packets {} bytes {} {action}{}\n",
                rule.counters.0,
                rule.counters.1,
                handle_note(handles, handle)
            ));
        }
        block.push_str("\t}\n");
        blocks.push(block);
    }
    if only_chain.is_some() && blocks.is_empty() {
        return None;
    }
    Some(format!(
        "table {family} {name} {{{}\n{}}}\n",
        handle_note(handles, table.handle),
        blocks.join("\n")
    ))
}
