//! nftables: `nft -f -` transactions and `nft [-y] [-a] list …`, as nft v1.0.6 does them, over
//! our own tables and the tables iptables-nft keeps (which nft sees as well).

use std::net::IpAddr;

use ipnet::IpNet;

mod list;

use super::xtables::{self, Store};
use super::{Kernel, output};
use crate::dataplane::Output;
pub(in crate::dataplane::fake) use list::list_own_tables;
use list::*;

/// Every table of the kernel, as (family, name), in `nft list tables`'s order: what the
/// kernel's netlink dump of the tables gives.
pub(super) fn tables(kernel: &Kernel) -> Vec<(String, String)> {
    table_names(kernel)
}

/// A set.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Set {
    name: String,
    handle: u64,
    kind: String,
    flags: Vec<String>,
    elements: Vec<String>,
}

impl Set {
    fn interval(&self) -> bool {
        self.flags.iter().any(|flag| flag == "interval")
    }
}

/// A base chain's hook.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Base {
    kind: String,
    hook: String,
    priority: i64,
    policy: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    handle: u64,
    /// The rule as sent, with `counter` standing for its counter.
    body: String,
    counters: (u64, u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Chain {
    name: String,
    handle: u64,
    base: Option<Base>,
    rules: Vec<Rule>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Table {
    family: String,
    name: String,
    handle: u64,
    next_handle: u64,
    sets: Vec<Set>,
    chains: Vec<Chain>,
}

impl Table {
    fn handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }

    fn chain_mut(&mut self, name: &str) -> Option<&mut Chain> {
        self.chains.iter_mut().find(|chain| chain.name == name)
    }

    fn set_mut(&mut self, name: &str) -> Option<&mut Set> {
        self.sets.iter_mut().find(|set| set.name == name)
    }

    fn jumps_to(&self, name: &str) -> bool {
        self.chains
            .iter()
            .flat_map(|chain| &chain.rules)
            .any(|rule| targets(&rule.body).iter().any(|target| target == name))
    }

    fn uses_set(&self, name: &str) -> bool {
        self.chains
            .iter()
            .flat_map(|chain| &chain.rules)
            .any(|rule| set_refs(&rule.body).iter().any(|set| set == name))
    }
}

/// The tables nft itself manages (not those of iptables-nft).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Ruleset {
    tables: Vec<Table>,
}

impl Ruleset {
    fn table(&self, family: &str, name: &str) -> Option<&Table> {
        self.tables
            .iter()
            .find(|table| table.family == family && table.name == name)
    }

    fn table_mut(&mut self, family: &str, name: &str) -> Option<&mut Table> {
        self.tables
            .iter_mut()
            .find(|table| table.family == family && table.name == name)
    }

    pub fn set_counters(&mut self, needle: &str, packets: u64, bytes: u64) -> usize {
        let mut count = 0;
        for rule in self
            .tables
            .iter_mut()
            .flat_map(|table| table.chains.iter_mut())
            .flat_map(|chain| chain.rules.iter_mut())
            .filter(|rule| rule.body.contains(needle))
        {
            rule.counters = (packets, bytes);
            count += 1;
        }
        count
    }

    pub fn delete_rules(&mut self, needle: &str) -> usize {
        let mut count = 0;
        for chain in self
            .tables
            .iter_mut()
            .flat_map(|table| table.chains.iter_mut())
        {
            let before = chain.rules.len();
            chain.rules.retain(|rule| !rule.body.contains(needle));
            count += before - chain.rules.len();
        }
        count
    }
}

/// Words of a rule outside quoted strings.
fn bare_words(body: &str) -> Vec<&str> {
    let mut words = Vec::new();
    for (index, part) in body.split('"').enumerate() {
        if index % 2 == 0 {
            words.extend(part.split_whitespace());
        }
    }
    words
}

fn targets(body: &str) -> Vec<String> {
    bare_words(body)
        .windows(2)
        .filter(|w| matches!(w[0], "jump" | "goto"))
        // In a verdict map, `goto chain,`.
        .map(|w| w[1].trim_end_matches(',').to_owned())
        .collect()
}

fn set_refs(body: &str) -> Vec<String> {
    bare_words(body)
        .iter()
        .filter_map(|word| word.strip_prefix('@'))
        .map(str::to_owned)
        .collect()
}

/// `counter packets 3 bytes 180` → `counter`, with the values.
fn strip_counter(body: &str) -> (String, (u64, u64)) {
    let words: Vec<&str> = body.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    let mut counters = (0, 0);
    let mut index = 0;
    while index < words.len() {
        out.push(words[index]);
        if words[index] == "counter"
            && words.get(index + 1) == Some(&"packets")
            && words.get(index + 3) == Some(&"bytes")
        {
            counters = (
                words[index + 2].parse().unwrap_or(0),
                words[index + 4].parse().unwrap_or(0),
            );
            index += 5;
        } else {
            index += 1;
        }
    }
    (out.join(" "), counters)
}

fn with_counter(body: &str, counters: (u64, u64)) -> String {
    let words: Vec<&str> = body.split(' ').collect();
    let mut out = String::new();
    let mut in_quote = false;
    for (index, word) in words.iter().enumerate() {
        if index > 0 {
            out.push(' ');
        }
        out.push_str(word);
        if !in_quote && *word == "counter" {
            out.push_str(&format!(" packets {} bytes {}", counters.0, counters.1));
        }
        if word.matches('"').count() % 2 == 1 {
            in_quote = !in_quote;
        }
    }
    out
}

/// A failed command: what nft says, and which word it points at.
struct Failure {
    message: String,
    word: Option<String>,
}

fn fail(message: &str, word: &str) -> Failure {
    Failure {
        message: message.to_owned(),
        word: Some(word.to_owned()),
    }
}

const ENOENT: &str = "Could not process rule: No such file or directory";
const EBUSY: &str = "Could not process rule: Device or resource busy";

/// The `nft` command.
pub(super) fn command(
    kernel: &mut Kernel,
    args: &[&str],
    stdin: Option<&str>,
    drop_rules: &[String],
) -> Output {
    let mut handles = false;
    let mut numeric = false;
    let mut file: Option<&str> = None;
    let mut words: Vec<&str> = Vec::new();
    let mut index = 0;
    while index < args.len() {
        match args[index] {
            "-a" | "--handle" => handles = true,
            "-y" | "--numeric-priority" => numeric = true,
            "-f" | "--file" => {
                file = args.get(index + 1).copied();
                index += 1;
            }
            "-n" | "-s" | "--stateless" | "-nn" => {}
            word => words.push(word),
        }
        index += 1;
    }
    if let Some(file) = file {
        let input = if file == "-" {
            stdin.unwrap_or_default().to_owned()
        } else {
            return output(
                1,
                String::new(),
                format!("Error: Could not process rule: No such file or directory\n{file}\n"),
            );
        };
        return transaction(kernel, &input, "/dev/stdin", drop_rules);
    }
    match words.as_slice() {
        ["list", "ruleset"] => output(
            0,
            list_ruleset_with(kernel, handles, numeric),
            String::new(),
        ),
        ["list", "tables"] => {
            let mut out = String::new();
            for (family, name) in table_names(kernel) {
                out.push_str(&format!("table {family} {name}\n"));
            }
            output(0, out, String::new())
        }
        ["list", "table", family, name] => {
            match list_table(kernel, family, name, None, handles, numeric) {
                Some(text) => output(0, text, xt_warning(kernel, family, name)),
                None => missing(&words, 3),
            }
        }
        ["list", "chain", family, table, chain] => {
            match list_table(kernel, family, table, Some(chain), handles, numeric) {
                Some(text) => output(0, text, xt_warning(kernel, family, table)),
                None => missing(&words, 4),
            }
        }
        ["list", "set", family, table, set] => {
            match kernel
                .nft
                .table(family, table)
                .and_then(|native| list::list_native_set(native, set, handles))
            {
                Some(text) => output(0, text, String::new()),
                None => missing(&words, 4),
            }
        }
        [] => output(1, String::new(), "Error: no command given\n".to_owned()),
        _ => {
            let line = words.join(" ");
            let result = transaction(kernel, &line, "", drop_rules);
            if result.success {
                result
            } else {
                output(1, String::new(), result.stderr)
            }
        }
    }
}

/// Splits a script into commands: one a line, a line with an open brace going on until it
/// closes. Returns (line number, text).
fn commands(input: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (index, line) in input.lines().enumerate() {
        let text = line.split_once('#').map_or(line, |(before, _)| before);
        let text = if line.contains('"') { line } else { text };
        let text = text.trim();
        if text.is_empty() && pending.is_none() {
            continue;
        }
        let (number, mut command) = pending.take().unwrap_or((index + 1, String::new()));
        if !command.is_empty() {
            command.push(' ');
        }
        command.push_str(text);
        if command.matches('{').count() > command.matches('}').count() {
            pending = Some((number, command));
        } else {
            out.push((number, command));
        }
    }
    if let Some(rest) = pending {
        out.push(rest);
    }
    out
}

/// Runs a script as one transaction: all of it or nothing.
fn transaction(kernel: &mut Kernel, input: &str, source: &str, drop_rules: &[String]) -> Output {
    let saved_nft = kernel.nft.clone();
    let saved_xt = kernel.nft_xt.clone();
    for (number, command) in commands(input) {
        if let Err(failure) = run_command(kernel, &command, drop_rules) {
            kernel.nft = saved_nft;
            kernel.nft_xt = saved_xt;
            let line = input.lines().nth(number - 1).unwrap_or(&command);
            let (start, end) = failure
                .word
                .as_deref()
                .and_then(|word| find_word(line, word).map(|at| (at, at + word.len())))
                .unwrap_or((0, line.len().max(1)));
            let carets = format!("{}{}", " ".repeat(start), "^".repeat(end - start));
            let location = if source.is_empty() {
                String::new()
            } else {
                format!("{source}:{number}:{}-{}: ", start + 1, end)
            };
            return output(
                1,
                String::new(),
                format!("{location}Error: {}\n{line}\n{carets}\n", failure.message),
            );
        }
    }
    output(0, String::new(), String::new())
}

/// Where `word` stands alone in `line`.
fn find_word(line: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = line[from..].find(word) {
        let start = from + at;
        let end = start + word.len();
        let before = line[..start].chars().last();
        let after = line[end..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| c.is_whitespace() || "{}@,;".contains(c));
        if boundary(before) && boundary(after) {
            return Some(start);
        }
        from = end;
    }
    None
}

/// The text inside the outer braces of `rest`, if it has them.
fn braced(rest: &str) -> Option<&str> {
    let rest = rest.trim();
    rest.strip_prefix('{')?.strip_suffix('}').map(str::trim)
}

/// One command of a transaction, split into its words: `VERB OBJECT FAMILY TABLE NAME …`.
struct Command<'a> {
    text: &'a str,
    words: Vec<&'a str>,
    /// `destroy` reads as `delete`, with [`Command::tolerant`] set.
    verb: &'a str,
    object: &'a str,
    family: &'a str,
    table: &'a str,
    name: &'a str,
    /// `destroy`: deleting what is not there is no error.
    tolerant: bool,
}

impl<'a> Command<'a> {
    fn parse(text: &'a str) -> Self {
        let words: Vec<&str> = text.split_whitespace().collect();
        let word = |index: usize| words.get(index).copied().unwrap_or_default();
        let verb = word(0);
        let tolerant = verb == "destroy";
        Command {
            text,
            verb: if tolerant { "delete" } else { verb },
            object: word(1),
            family: word(2),
            table: word(3),
            name: word(4),
            tolerant,
            words,
        }
    }

    /// The text after the first `count` words.
    fn rest_after(&self, count: usize) -> String {
        let mut rest = self.text;
        for _ in 0..count {
            rest = rest.trim_start();
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            rest = &rest[end..];
        }
        rest.trim().to_owned()
    }

    /// What deleting a missing `word` gives: nothing for `destroy`, ENOENT for `delete`.
    fn missing(&self, word: &str) -> Result<(), Failure> {
        if self.tolerant {
            Ok(())
        } else {
            Err(fail(ENOENT, word))
        }
    }
}

fn run_command(kernel: &mut Kernel, command: &str, drop_rules: &[String]) -> Result<(), Failure> {
    let command = Command::parse(command);
    let family = command.family;
    if family_index(family).is_none() && !matches!(family, "inet" | "arp" | "bridge" | "netdev") {
        return Err(fail("syntax error, unexpected string", family));
    }
    // iptables-nft's tables: nft can list, flush and delete what is there.
    let xt = family_index(family).filter(|&index| {
        kernel.nft.table(family, command.table).is_none()
            && kernel.nft_xt[index].table(command.table).is_some()
    });
    if let Some(index) = xt {
        return xt_command(
            &mut kernel.nft_xt[index],
            command.verb,
            command.object,
            command.table,
            command.name,
            command.tolerant,
        );
    }
    match (command.verb, command.object) {
        ("add" | "create", "table") => return add_table(kernel, &command),
        ("delete", "table") => return delete_table(kernel, &command),
        _ => {}
    }
    let Some(table) = kernel.nft.table_mut(family, command.table) else {
        return command.missing(command.table);
    };
    match (command.verb, command.object) {
        ("flush", "table") => {
            flush_table(table);
            Ok(())
        }
        ("add" | "create", "chain") => add_chain(table, &command),
        ("delete", "chain") => delete_chain(table, &command),
        ("flush", "chain") => flush_chain(table, command.name),
        ("add" | "create", "set") => add_set(table, &command),
        ("delete", "set") => delete_set(table, &command),
        ("flush", "set") => flush_set(table, command.name),
        ("add" | "create" | "delete", "element") => change_elements(table, &command),
        ("add" | "insert", "rule") => add_rule(table, &command, drop_rules),
        ("delete", "rule") => delete_rule(table, &command),
        _ => Err(fail("syntax error, unexpected string", command.object)),
    }
}

/// `add table` (there already: nothing) and `create table` (there already: EEXIST).
fn add_table(kernel: &mut Kernel, command: &Command) -> Result<(), Failure> {
    if kernel.nft.table(command.family, command.table).is_some() {
        return if command.verb == "create" {
            Err(fail("Could not process rule: File exists", command.table))
        } else {
            Ok(())
        };
    }
    kernel.table_handles += 1;
    let handle = kernel.table_handles;
    kernel.nft.tables.push(Table {
        family: command.family.to_owned(),
        name: command.table.to_owned(),
        handle,
        next_handle: 0,
        sets: Vec::new(),
        chains: Vec::new(),
    });
    Ok(())
}

/// `delete table` and `destroy table`.
fn delete_table(kernel: &mut Kernel, command: &Command) -> Result<(), Failure> {
    if kernel.nft.table(command.family, command.table).is_none() {
        return command.missing(command.table);
    }
    kernel
        .nft
        .tables
        .retain(|table| !(table.family == command.family && table.name == command.table));
    Ok(())
}

/// `flush table`: every chain's rules go; chains and sets stay.
fn flush_table(table: &mut Table) {
    table
        .chains
        .iter_mut()
        .for_each(|chain| chain.rules.clear());
}

/// `add chain` and `create chain`, with or without a base chain's `{ type … hook … }`.
fn add_chain(table: &mut Table, command: &Command) -> Result<(), Failure> {
    let name = command.name;
    let base = match braced(&command.rest_after(5)) {
        Some(spec) => Some(parse_base(spec).ok_or_else(|| fail("syntax error", name))?),
        None => None,
    };
    if table.chains.iter().any(|chain| chain.name == name) {
        if command.verb == "create" {
            return Err(fail("Could not process rule: File exists", name));
        }
        return Ok(());
    }
    let handle = table.handle();
    table.chains.push(Chain {
        name: name.to_owned(),
        handle,
        base,
        rules: Vec::new(),
    });
    Ok(())
}

/// `delete chain` and `destroy chain`.
fn delete_chain(table: &mut Table, command: &Command) -> Result<(), Failure> {
    let name = command.name;
    if table.chains.iter().all(|chain| chain.name != name) {
        return command.missing(name);
    }
    // The kernel deletes a chain's rules with it; only a jump to it keeps it.
    if table.jumps_to(name) {
        return Err(fail(EBUSY, name));
    }
    table.chains.retain(|chain| chain.name != name);
    Ok(())
}

/// `flush chain`.
fn flush_chain(table: &mut Table, name: &str) -> Result<(), Failure> {
    table
        .chain_mut(name)
        .ok_or_else(|| fail(ENOENT, name))?
        .rules
        .clear();
    Ok(())
}

/// `add set` (the same set there already: nothing) and `create set`.
fn add_set(table: &mut Table, command: &Command) -> Result<(), Failure> {
    let name = command.name;
    let spec_text = command.rest_after(5);
    let spec = braced(&spec_text).ok_or_else(|| fail("syntax error", name))?;
    let mut kind = String::new();
    let mut flags = Vec::new();
    for part in spec.split(';').map(str::trim) {
        if let Some(value) = part.strip_prefix("type ") {
            kind = value.trim().to_owned();
        } else if let Some(value) = part.strip_prefix("flags ") {
            flags = value.split(',').map(|f| f.trim().to_owned()).collect();
        }
    }
    if kind.is_empty() {
        return Err(fail("set definition does not specify key", name));
    }
    if let Some(existing) = table.sets.iter().find(|set| set.name == name) {
        return if command.verb == "add" && existing.kind == kind && existing.flags == flags {
            Ok(())
        } else {
            Err(fail("Could not process rule: File exists", name))
        };
    }
    let handle = table.handle();
    table.sets.push(Set {
        name: name.to_owned(),
        handle,
        kind,
        flags,
        elements: Vec::new(),
    });
    Ok(())
}

/// `delete set` and `destroy set`.
fn delete_set(table: &mut Table, command: &Command) -> Result<(), Failure> {
    let name = command.name;
    if !table.sets.iter().any(|set| set.name == name) {
        return command.missing(name);
    }
    if table.uses_set(name) {
        return Err(fail(EBUSY, name));
    }
    table.sets.retain(|set| set.name != name);
    Ok(())
}

/// `flush set`.
fn flush_set(table: &mut Table, name: &str) -> Result<(), Failure> {
    table
        .set_mut(name)
        .ok_or_else(|| fail(ENOENT, name))?
        .elements
        .clear();
    Ok(())
}

/// `add element`, `create element`, `delete element` and `destroy element`: `{ a, b, … }`, one
/// element after the other.
fn change_elements(table: &mut Table, command: &Command) -> Result<(), Failure> {
    let name = command.name;
    let set = table.set_mut(name).ok_or_else(|| fail(ENOENT, name))?;
    let list = command.rest_after(5);
    let list = braced(&list).ok_or_else(|| fail("syntax error", name))?;
    for element in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let normal = normalize(set, element)
            .ok_or_else(|| fail("Could not process rule: Invalid argument", element))?;
        if command.verb == "delete" {
            delete_element(set, element, &normal, command.tolerant)?;
        } else {
            add_element(set, element, normal, command.verb == "create")?;
        }
    }
    Ok(())
}

/// One element of `add element` (there already: nothing) or `create element` (EEXIST).
fn add_element(set: &mut Set, element: &str, normal: String, create: bool) -> Result<(), Failure> {
    if set.elements.contains(&normal) {
        if create {
            return Err(fail("Could not process rule: File exists", element));
        }
        return Ok(());
    }
    if set.interval()
        && let Some((start, end)) = range_of(&normal)
    {
        let overlaps = set
            .elements
            .iter()
            .filter_map(|e| range_of(e))
            .any(|(other_start, other_end)| start <= other_end && other_start <= end);
        if overlaps {
            return Err(fail("interval overlaps with an existing one", element));
        }
    }
    set.elements.push(normal);
    Ok(())
}

/// One element of `delete element` (missing: ENOENT) or `destroy element` (missing: nothing).
fn delete_element(
    set: &mut Set,
    element: &str,
    normal: &str,
    tolerant: bool,
) -> Result<(), Failure> {
    match set.elements.iter().position(|e| e == normal) {
        Some(at) => {
            set.elements.remove(at);
        }
        None if tolerant => {}
        None => return Err(fail(ENOENT, element)),
    }
    Ok(())
}

/// `add rule` (at the end of the chain) and `insert rule` (at its start). The chain, every
/// chain it jumps to and every set it names must be there.
fn add_rule(table: &mut Table, command: &Command, drop_rules: &[String]) -> Result<(), Failure> {
    let name = command.name;
    let body = command.rest_after(5);
    let (body, counters) = strip_counter(&body);
    if table.chains.iter().all(|chain| chain.name != name) {
        return Err(fail(ENOENT, name));
    }
    for target in targets(&body) {
        if table.chains.iter().all(|chain| chain.name != target) {
            return Err(fail(ENOENT, &target));
        }
    }
    for set in set_refs(&body) {
        if table.sets.iter().all(|s| s.name != set) {
            return Err(fail(ENOENT, &format!("@{set}")));
        }
    }
    if drop_rules
        .iter()
        .any(|needle| body.contains(needle.as_str()))
    {
        return Ok(());
    }
    let handle = table.handle();
    let chain = table.chain_mut(name).ok_or_else(|| fail(ENOENT, name))?;
    let rule = Rule {
        handle,
        body,
        counters,
    };
    if command.verb == "insert" {
        chain.rules.insert(0, rule);
    } else {
        chain.rules.push(rule);
    }
    Ok(())
}

/// `delete rule … handle N` and `destroy rule … handle N`.
fn delete_rule(table: &mut Table, command: &Command) -> Result<(), Failure> {
    let name = command.name;
    let handle: Option<u64> = match command.words.get(5..7) {
        Some(["handle", number]) => number.parse().ok(),
        _ => None,
    };
    let handle = handle.ok_or_else(|| fail("syntax error, expecting handle", name))?;
    let chain = table.chain_mut(name).ok_or_else(|| fail(ENOENT, name))?;
    let before = chain.rules.len();
    chain.rules.retain(|rule| rule.handle != handle);
    if chain.rules.len() == before && !command.tolerant {
        return Err(fail(ENOENT, &handle.to_string()));
    }
    Ok(())
}

fn xt_command(
    store: &mut Store,
    verb: &str,
    object: &str,
    table_name: &str,
    name: &str,
    tolerant: bool,
) -> Result<(), Failure> {
    match (verb, object) {
        ("delete", "table") => {
            store.tables.retain(|table| table.name != table_name);
            Ok(())
        }
        ("add", "table") => Ok(()),
        ("delete", "chain") => {
            let Some(table) = store.table_mut(table_name) else {
                return Err(fail(ENOENT, table_name));
            };
            let Some(chain) = table.chains.iter_mut().find(|chain| chain.name == name) else {
                return if tolerant {
                    Ok(())
                } else {
                    Err(fail(ENOENT, name))
                };
            };
            if chain.builtin && !chain.base_exists {
                return if tolerant {
                    Ok(())
                } else {
                    Err(fail(ENOENT, name))
                };
            }
            if chain.builtin {
                chain.rules.clear();
                chain.base_exists = false;
                chain.nft_order = 0;
            } else {
                let referenced = table
                    .chains
                    .iter()
                    .flat_map(|chain| &chain.rules)
                    .any(|rule| rule.target().as_deref() == Some(name));
                if referenced {
                    return Err(fail(EBUSY, name));
                }
                table.chains.retain(|chain| chain.name != name);
            }
            Ok(())
        }
        _ => Err(fail(
            "Could not process rule: Operation not supported (the fake kernel only lists and deletes iptables-nft's tables and chains)",
            object,
        )),
    }
}

fn parse_base(spec: &str) -> Option<Base> {
    let words: Vec<&str> = spec.split([' ', ';']).filter(|w| !w.is_empty()).collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|word| *word == key)
            .and_then(|at| words.get(at + 1).copied())
    };
    Some(Base {
        kind: after("type")?.to_owned(),
        hook: after("hook")?.to_owned(),
        priority: after("priority")?.parse().ok()?,
        policy: after("policy").unwrap_or("accept").to_owned(),
    })
}

fn parse_ip(text: &str, kind: &str) -> Option<IpAddr> {
    let address: IpAddr = text.parse().ok()?;
    let v6 = kind.starts_with("ipv6_addr");
    (address.is_ipv6() == v6).then_some(address)
}

/// An element as nft prints it back, or `None` when nft refuses it.
fn normalize(set: &Set, element: &str) -> Option<String> {
    if set.kind.contains(" . ") {
        let parts: Vec<&str> = element.split(" . ").map(str::trim).collect();
        let [address, protocol, port] = parts.as_slice() else {
            return None;
        };
        let address = parse_ip(address, &set.kind)?;
        let protocol = match *protocol {
            "tcp" | "6" => "tcp",
            "udp" | "17" => "udp",
            "sctp" | "132" => "sctp",
            "udplite" | "136" => "udplite",
            _ => return None,
        };
        let port: u16 = port.parse().ok()?;
        return Some(format!("{address} . {protocol} . {port}"));
    }
    if let Some((first, last)) = element.split_once('-') {
        if !set.interval() {
            return None;
        }
        let (first, last) = (parse_ip(first, &set.kind)?, parse_ip(last, &set.kind)?);
        return (first <= last).then(|| format!("{first}-{last}"));
    }
    match element.split_once('/') {
        Some((address, prefix)) => {
            let address = parse_ip(address, &set.kind)?;
            let prefix: u8 = prefix.parse().ok()?;
            let net = IpNet::new(address, prefix).ok()?.trunc();
            if prefix == net.max_prefix_len() {
                Some(net.addr().to_string())
            } else if set.interval() {
                Some(net.to_string())
            } else {
                None
            }
        }
        None => Some(parse_ip(element, &set.kind)?.to_string()),
    }
}

/// The addresses an element of an interval set covers.
fn range_of(element: &str) -> Option<(u128, u128)> {
    let number = |address: IpAddr| match address {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    };
    if let Some((first, last)) = element.split_once('-') {
        return Some((number(first.parse().ok()?), number(last.parse().ok()?)));
    }
    let net: IpNet = match element.parse() {
        Ok(net) => net,
        Err(_) => IpNet::from(element.parse::<IpAddr>().ok()?),
    };
    Some((number(net.network()), number(net.broadcast())))
}
