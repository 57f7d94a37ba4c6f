//! iptables rule stores (x_tables and nf_tables flavours): `iptables-restore` and
//! `iptables-save` as the real tools (v1.8.9) do them.

use super::{Flavor, Kernel, output, split_words};
use crate::dataplane::Output;

/// Targets that are extensions, not chains.
const TARGETS: [&str; 18] = [
    "ACCEPT",
    "DROP",
    "RETURN",
    "QUEUE",
    "MARK",
    "NFLOG",
    "NOTRACK",
    "CT",
    "LOG",
    "REJECT",
    "CONNMARK",
    "DNAT",
    "SNAT",
    "MASQUERADE",
    "REDIRECT",
    "TPROXY",
    "TCPMSS",
    "TRACE",
];

const DATE: &str = "Thu Jan  1 00:00:00 1970";

/// The built-in chains of a table, in the order iptables-save prints them.
pub(super) fn builtins(table: &str) -> Option<&'static [&'static str]> {
    Some(match table {
        "raw" => &["PREROUTING", "OUTPUT"],
        "mangle" => &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
        "filter" => &["INPUT", "FORWARD", "OUTPUT"],
        "nat" => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        "security" => &["INPUT", "FORWARD", "OUTPUT"],
        _ => return None,
    })
}

/// One rule: what follows `-A CHAIN`, in the spelling it was sent in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Rule {
    pub spec: String,
    pub counters: (u64, u64),
}

impl Rule {
    /// The chain this rule jumps or goes to, if its target is not an extension.
    pub fn target(&self) -> Option<String> {
        let words = split_words(&self.spec);
        words
            .windows(2)
            .find(|w| matches!(w[0].as_str(), "-j" | "--jump" | "-g" | "--goto"))
            .map(|w| w[1].clone())
            .filter(|target| !TARGETS.contains(&target.as_str()))
    }

    /// The ipsets it matches.
    pub fn sets(&self) -> Vec<String> {
        let words = split_words(&self.spec);
        words
            .windows(2)
            .filter(|w| w[0] == "--match-set")
            .map(|w| w[1].clone())
            .collect()
    }

    fn normalized(&self) -> Vec<String> {
        split_words(&self.spec)
    }
}

/// A chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Chain {
    pub name: String,
    pub builtin: bool,
    pub policy: String,
    pub counters: (u64, u64),
    pub rules: Vec<Rule>,
    /// nf_tables only: whether a built-in chain exists as an nft base chain (iptables-nft
    /// creates it on the first rule or policy).
    pub base_exists: bool,
    /// nf_tables only: when the chain came to exist there (nft lists chains in that order);
    /// 0 until it does.
    pub nft_order: u64,
}

/// A table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Table {
    pub name: String,
    pub chains: Vec<Chain>,
    /// The last [`Chain::nft_order`] given out.
    pub last_order: u64,
    /// nf_tables only: the table's handle (it orders `nft list tables`); 0 until committed.
    pub handle: u64,
}

impl Table {
    fn new(name: &str) -> Option<Table> {
        let chains = builtins(name)?
            .iter()
            .map(|chain| Chain {
                name: (*chain).to_owned(),
                builtin: true,
                policy: "ACCEPT".to_owned(),
                counters: (0, 0),
                rules: Vec::new(),
                base_exists: false,
                nft_order: 0,
            })
            .collect();
        Some(Table {
            name: name.to_owned(),
            chains,
            last_order: 0,
            handle: 0,
        })
    }

    /// Numbers the chains that came to exist in nf_tables since the last call.
    fn number_chains(&mut self) {
        for chain in &mut self.chains {
            let exists = !chain.builtin || chain.base_exists;
            if exists && chain.nft_order == 0 {
                self.last_order += 1;
                chain.nft_order = self.last_order;
            }
        }
    }

    pub fn chain(&self, name: &str) -> Option<&Chain> {
        self.chains.iter().find(|chain| chain.name == name)
    }

    fn chain_mut(&mut self, name: &str) -> Option<&mut Chain> {
        self.chains.iter_mut().find(|chain| chain.name == name)
    }

    fn referenced(&self, name: &str) -> bool {
        self.chains
            .iter()
            .flat_map(|chain| &chain.rules)
            .any(|rule| rule.target().as_deref() == Some(name))
    }

    /// Built-in chains in kernel order, then user chains sorted by name.
    fn ordered(&self) -> Vec<&Chain> {
        let mut user: Vec<&Chain> = self.chains.iter().filter(|c| !c.builtin).collect();
        user.sort_by(|a, b| a.name.cmp(&b.name));
        self.chains
            .iter()
            .filter(|c| c.builtin)
            .chain(user)
            .collect()
    }

    fn save(&self, counters: bool, out: &mut String) {
        out.push_str(&format!("*{}\n", self.name));
        let chains = self.ordered();
        for chain in &chains {
            let policy = if chain.builtin {
                chain.policy.as_str()
            } else {
                "-"
            };
            out.push_str(&format!(
                ":{} {policy} [{}:{}]\n",
                chain.name, chain.counters.0, chain.counters.1
            ));
        }
        for chain in &chains {
            for rule in &chain.rules {
                if counters {
                    out.push_str(&format!("[{}:{}] ", rule.counters.0, rule.counters.1));
                }
                out.push_str(&format!("-A {} {}\n", chain.name, rule.spec));
            }
        }
        out.push_str("COMMIT\n");
    }
}

/// One flavour and family's tables, in the order they came to exist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Store {
    pub tables: Vec<Table>,
}

impl Store {
    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|table| table.name == name)
    }

    pub fn table_mut(&mut self, name: &str) -> Option<&mut Table> {
        self.tables.iter_mut().find(|table| table.name == name)
    }

    fn put(&mut self, table: Table) {
        match self.tables.iter_mut().find(|t| t.name == table.name) {
            Some(slot) => *slot = table,
            None => self.tables.push(table),
        }
    }

    /// Whether any rule matches the ipset `name`.
    pub fn uses_set(&self, name: &str) -> bool {
        self.tables
            .iter()
            .flat_map(|table| &table.chains)
            .flat_map(|chain| &chain.rules)
            .any(|rule| rule.sets().iter().any(|set| set == name))
    }

    /// `iptables-save` output: one table, or all.
    pub fn save(&self, table: Option<&str>, counters: bool, program: &str) -> String {
        let version = if program.contains("nft") {
            "v1.8.9 (nf_tables)"
        } else {
            "v1.8.9"
        };
        let name = program.replace("-legacy", "").replace("-nft", "");
        let saver = if program.contains("nft") {
            format!("{}-nft-save", name.trim_end_matches("-save"))
        } else {
            format!("{}-save", name.trim_end_matches("-save"))
        };
        let mut out = String::new();
        let new_table;
        let tables: Vec<&Table> = match table {
            Some(name) => match self.table(name) {
                Some(table) => vec![table],
                None => match Table::new(name) {
                    Some(table) => {
                        new_table = table;
                        vec![&new_table]
                    }
                    None => vec![],
                },
            },
            // iptables-nft-save goes through its own list of tables, in this order.
            None if program.contains("nft") => ["mangle", "security", "raw", "filter", "nat"]
                .iter()
                .filter_map(|name| self.table(name))
                .collect(),
            // The kernel lists x_tables tables newest first.
            None => self.tables.iter().rev().collect(),
        };
        for table in tables {
            out.push_str(&format!("# Generated by {saver} {version} on {DATE}\n"));
            table.save(counters, &mut out);
            out.push_str(&format!("# Completed on {DATE}\n"));
        }
        out
    }

    pub fn set_counters(&mut self, needle: &str, packets: u64, bytes: u64) -> usize {
        let mut count = 0;
        for rule in self
            .tables
            .iter_mut()
            .flat_map(|table| table.chains.iter_mut())
            .flat_map(|chain| chain.rules.iter_mut())
            .filter(|rule| rule.spec.contains(needle))
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
            chain.rules.retain(|rule| !rule.spec.contains(needle));
            count += before - chain.rules.len();
        }
        count
    }
}

/// `iptables-save [-c] [-t TABLE]`.
/// `iptables -t TABLE -S CHAIN`: the chain's declaration (`-P` for a kernel chain, `-N` for
/// a user chain) and its rules, without counters, as iptables 1.8.9 prints them; a chain that
/// does not exist is an error, worded as each flavour words it.
pub(super) fn list_command(store: &Store, flavor: Flavor, family: usize, args: &[&str]) -> Output {
    let program = if family == 0 { "iptables" } else { "ip6tables" };
    let option = |names: &[&str]| {
        args.iter()
            .position(|arg| names.contains(arg))
            .and_then(|at| args.get(at + 1).copied())
    };
    let table = option(&["-t", "--table"]).unwrap_or("filter");
    let Some(chain) = option(&["-S", "--list-rules"]) else {
        let stderr = format!("{program}: the fake kernel only answers `-t TABLE -S CHAIN`\n");
        return output(2, String::new(), stderr);
    };
    let Some(found) = store.table(table).and_then(|table| table.chain(chain)) else {
        let stderr = match flavor {
            Flavor::Legacy => "iptables: No chain/target/match by that name.\n".to_owned(),
            Flavor::Nft => format!(
                "{program} v1.8.9 (nf_tables): chain `{chain}' in table `{table}' is incompatible, use 'nft' tool.\n"
            ),
        };
        return output(1, String::new(), stderr);
    };
    let mut out = if found.builtin {
        format!("-P {} {}\n", found.name, found.policy)
    } else {
        format!("-N {}\n", found.name)
    };
    for rule in &found.rules {
        out.push_str(&format!("-A {} {}\n", found.name, rule.spec));
    }
    output(0, out, String::new())
}

pub(super) fn save_command(
    store: &mut Store,
    flavor: Flavor,
    family: usize,
    args: &[&str],
) -> Output {
    let program = program_name(flavor, family, "save");
    let counters = args.iter().any(|arg| matches!(*arg, "-c" | "--counters"));
    let table = args
        .iter()
        .position(|arg| matches!(*arg, "-t" | "--table"))
        .and_then(|at| args.get(at + 1).copied());
    if let Some(name) = table {
        if builtins(name).is_none() {
            let stderr = match flavor {
                Flavor::Legacy => format!(
                    "{program} v1.8.9 (legacy): Cannot initialize: Table does not exist (do you need to insmod?)\n"
                ),
                Flavor::Nft => {
                    format!("{program} v1.8.9 (nf_tables): table '{name}' does not exist\n")
                }
            };
            return output(1, String::new(), stderr);
        }
        // iptables-legacy makes a table exist by reading it.
        if flavor == Flavor::Legacy
            && store.table(name).is_none()
            && let Some(new) = Table::new(name)
        {
            store.put(new);
        }
    }
    output(0, store.save(table, counters, &program), String::new())
}

fn program_name(flavor: Flavor, family: usize, verb: &str) -> String {
    let base = if family == 0 { "iptables" } else { "ip6tables" };
    match flavor {
        Flavor::Legacy => format!("{base}-legacy-{verb}"),
        Flavor::Nft => format!("{base}-nft-{verb}"),
    }
}

/// What went wrong on a line, in the real tool's words.
enum Failure {
    /// A command the kernel (or libiptc) refused: `iptables-restore: line N failed`, exit 1;
    /// iptables-nft adds the reason.
    Line(String),
    /// A parameter problem: the message, then `Error occurred at line: N`, exit 2.
    Parameter(String),
    /// iptables-nft: a batch the kernel refused at commit (`line N: CHAIN_DEL failed …`),
    /// exit 4.
    Commit(String),
}

/// `iptables-restore [--noflush] [--counters]`: one transaction per table.
pub(super) fn restore(
    kernel: &mut Kernel,
    flavor: Flavor,
    family: usize,
    args: &[&str],
    input: &str,
    drop_rules: &[String],
) -> Output {
    let noflush = args.iter().any(|arg| matches!(*arg, "-n" | "--noflush"));
    let with_counters = args.iter().any(|arg| matches!(*arg, "-c" | "--counters"));
    let messages = Messages::new(flavor, family);
    let fail = |line: usize, failure: Failure| messages.fail(line, failure);
    let mut current: Option<Table> = None;
    let mut pending_jumps: Vec<String> = Vec::new();
    for (index, raw) in input.lines().enumerate() {
        let number = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            match open_table(kernel, flavor, family, noflush, name) {
                Some(table) => current = Some(table),
                None => return fail(number, Failure::Parameter(messages.bad_table(name, number))),
            }
            pending_jumps.clear();
            continue;
        }
        let Some(table) = current.as_mut() else {
            return fail(number, Failure::Line(String::new()));
        };
        if line == "COMMIT" {
            if let Some(missing) = pending_jumps
                .iter()
                .find(|target| table.chain(target).is_none())
            {
                return fail(
                    number,
                    Failure::Parameter(format!("Chain '{missing}' does not exist")),
                );
            }
            let Some(mut done) = current.take() else {
                continue;
            };
            if flavor == Flavor::Nft && done.handle == 0 {
                kernel.table_handles += 1;
                done.handle = kernel.table_handles;
            }
            store(kernel, flavor, family).put(done);
            continue;
        }
        if let Some(declaration) = line.strip_prefix(':') {
            if let Err(failure) = declare_chain(table, declaration) {
                return fail(number, failure);
            }
            continue;
        }
        let (rule_counters, command) = match line.strip_prefix('[') {
            Some(rest) => match rest.split_once("] ") {
                Some((numbers, command)) => (parse_counters(&format!("[{numbers}]")), command),
                None => (None, line),
            },
            None => (None, line),
        };
        let counters = if with_counters {
            rule_counters.unwrap_or((0, 0))
        } else {
            (0, 0)
        };
        let sets_exist = |rule: &Rule| -> Result<(), Failure> {
            for set in rule.sets() {
                if !kernel_has_set(&kernel.sets, &set) {
                    return Err(Failure::Parameter(format!("Set {set} doesn't exist.\n")));
                }
            }
            Ok(())
        };
        let result = apply_command(
            table,
            flavor,
            command,
            counters,
            drop_rules,
            &sets_exist,
            &mut pending_jumps,
        );
        if let Err(failure) = result {
            return fail(number, failure);
        }
        table.number_chains();
    }
    if current.is_some() {
        // A table without COMMIT is never written.
        return output(
            1,
            String::new(),
            format!(
                "{}: COMMIT expected at line {}\n",
                messages.banner,
                input.lines().count() + 1
            ),
        );
    }
    output(0, String::new(), String::new())
}

/// How one restore program words its failures.
struct Messages {
    flavor: Flavor,
    short: &'static str,
    long: String,
    banner: String,
}

impl Messages {
    fn new(flavor: Flavor, family: usize) -> Messages {
        let short = if family == 0 {
            "iptables-restore"
        } else {
            "ip6tables-restore"
        };
        let long = program_name(flavor, family, "restore");
        let banner = match flavor {
            Flavor::Legacy => format!("{short} v1.8.9 (legacy)"),
            Flavor::Nft => format!("{long} v1.8.9 (nf_tables)"),
        };
        Messages {
            flavor,
            short,
            long,
            banner,
        }
    }

    /// What the program prints and how it exits when line `line` fails.
    fn fail(&self, line: usize, failure: Failure) -> Output {
        let (flavor, short, long, banner) = (self.flavor, self.short, &self.long, &self.banner);
        match failure {
            Failure::Line(reason) => {
                let text = match flavor {
                    Flavor::Legacy => format!("{short}: line {line} failed\n"),
                    Flavor::Nft if reason.is_empty() => format!("{long}: line {line} failed\n"),
                    Flavor::Nft => format!("{long}: line {line} failed: {reason}\n"),
                };
                output(1, String::new(), text)
            }
            Failure::Parameter(message) => {
                let name = match flavor {
                    Flavor::Legacy => short,
                    Flavor::Nft => long.as_str(),
                };
                output(
                    2,
                    String::new(),
                    format!(
                        "{banner}: {message}\nError occurred at line: {line}\nTry `{name} -h' or '{name} --help' for more information.\n"
                    ),
                )
            }
            Failure::Commit(message) => output(
                4,
                String::new(),
                format!("{banner}: \nline {line}: {message}\n"),
            ),
        }
    }

    /// A table name the kernel does not know.
    fn bad_table(&self, name: &str, number: usize) -> String {
        match self.flavor {
            Flavor::Legacy => format!("{}: unable to initialize table '{name}'", self.short),
            Flavor::Nft => format!("{}: line {number} table name '{name}' invalid", self.long),
        }
    }
}

/// `*TABLE`: the table a restore goes on to change (a copy, written back at `COMMIT`); `None`
/// for a table the kernel does not know.
fn open_table(
    kernel: &mut Kernel,
    flavor: Flavor,
    family: usize,
    noflush: bool,
    name: &str,
) -> Option<Table> {
    let existing = store(kernel, flavor, family).table(name).cloned();
    let handle = existing.as_ref().map_or(0, |table| table.handle);
    let table = match (noflush, existing) {
        (true, Some(table)) => Some(table),
        (_, _) => Table::new(name).map(|table| Table { handle, ..table }),
    };
    // iptables-legacy instantiates a table by opening it, whatever follows.
    if flavor == Flavor::Legacy
        && let Some(table) = &table
        && store(kernel, flavor, family).table(name).is_none()
    {
        store(kernel, flavor, family).put(table.clone());
    }
    table
}

/// `:CHAIN POLICY [packets:bytes]`: declares (or flushes) a chain.
fn declare_chain(table: &mut Table, declaration: &str) -> Result<(), Failure> {
    let words = split_words(declaration);
    let name = words.first().cloned().unwrap_or_default();
    let policy = words.get(1).cloned().unwrap_or_else(|| "-".to_owned());
    let counters = words
        .get(2)
        .and_then(|w| parse_counters(w))
        .unwrap_or((0, 0));
    match table.chain_mut(&name) {
        Some(chain) if chain.builtin => {
            if policy != "-" {
                chain.policy = policy;
                chain.base_exists = true;
            }
            chain.counters = counters;
        }
        Some(chain) => {
            chain.rules.clear();
            chain.counters = counters;
        }
        None if name.len() > 28 => {
            return Err(Failure::Parameter(format!("Invalid chain name `{name}'")));
        }
        None => table.chains.push(Chain {
            name,
            builtin: false,
            policy: "-".to_owned(),
            counters,
            rules: Vec::new(),
            base_exists: false,
            nft_order: 0,
        }),
    }
    table.number_chains();
    Ok(())
}

fn kernel_has_set(sets: &super::ipset::Sets, name: &str) -> bool {
    sets.get(name).is_some()
}

fn store(kernel: &mut Kernel, flavor: Flavor, family: usize) -> &mut Store {
    match flavor {
        Flavor::Legacy => &mut kernel.legacy[family],
        Flavor::Nft => &mut kernel.nft_xt[family],
    }
}

fn parse_counters(word: &str) -> Option<(u64, u64)> {
    let inner = word.strip_prefix('[')?.strip_suffix(']')?;
    let (packets, bytes) = inner.split_once(':')?;
    Some((packets.parse().ok()?, bytes.parse().ok()?))
}

/// The rule text after `-A CHAIN ` (or `-I CHAIN N `), as sent.
fn rest_after(command: &str, skip_words: usize) -> String {
    let mut rest = command.trim_start();
    for _ in 0..skip_words {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        rest = &rest[end..];
    }
    rest.trim().to_owned()
}

/// One command of a table block (`-A CHAIN …`, `-N CHAIN`, …) and what applying it needs.
struct Command<'a> {
    flavor: Flavor,
    text: &'a str,
    words: Vec<String>,
    /// The word after the verb; empty when there is none.
    chain_name: String,
    /// The counters the line starts with (`[packets:bytes]`), for a new rule.
    counters: (u64, u64),
    drop_rules: &'a [String],
    sets_exist: &'a dyn Fn(&Rule) -> Result<(), Failure>,
}

impl Command<'_> {
    /// A refused command: iptables-nft says `nft`, iptables-legacy says nothing.
    fn refused(&self, nft: &str) -> Failure {
        Failure::Line(match self.flavor {
            Flavor::Legacy => String::new(),
            Flavor::Nft => nft.to_owned(),
        })
    }

    fn no_chain(&self) -> Failure {
        self.refused("No chain/target/match by that name.")
    }

    /// The rule after the first `skip_words` words, with the line's counters.
    fn rule(&self, skip_words: usize) -> Rule {
        Rule {
            spec: rest_after(self.text, skip_words),
            counters: self.counters,
        }
    }

    /// The number after the chain's name, if there is one.
    fn position(&self) -> Option<usize> {
        self.words.get(2).and_then(|w| w.parse::<usize>().ok())
    }

    /// Its sets must exist, and so must the chain it jumps to: at once for iptables-legacy,
    /// at commit for iptables-nft (which resolves jumps then).
    fn check_rule(
        &self,
        table: &Table,
        rule: &Rule,
        pending: &mut Vec<String>,
    ) -> Result<(), Failure> {
        (self.sets_exist)(rule)?;
        if let Some(target) = rule.target()
            && table.chain(&target).is_none()
        {
            match self.flavor {
                Flavor::Legacy => {
                    return Err(Failure::Parameter(format!(
                        "Couldn't load target `{target}':No such file or directory\n"
                    )));
                }
                // iptables-nft resolves jumps when the batch is committed.
                Flavor::Nft => pending.push(target),
            }
        }
        Ok(())
    }

    /// A rule the kernel silently loses (`FakeKernel::drop_rules_containing`).
    fn dropped(&self, spec: &str) -> bool {
        self.drop_rules
            .iter()
            .any(|needle| spec.contains(needle.as_str()))
    }
}

fn apply_command(
    table: &mut Table,
    flavor: Flavor,
    command: &str,
    counters: (u64, u64),
    drop_rules: &[String],
    sets_exist: &dyn Fn(&Rule) -> Result<(), Failure>,
    pending_jumps: &mut Vec<String>,
) -> Result<(), Failure> {
    let words = split_words(command);
    let verb = words.first().cloned().unwrap_or_default();
    let command = Command {
        flavor,
        text: command,
        chain_name: words.get(1).cloned().unwrap_or_default(),
        words,
        counters,
        drop_rules,
        sets_exist,
    };
    match verb.as_str() {
        "-A" | "--append" => append_rule(table, &command, pending_jumps),
        "-I" | "--insert" => insert_rule(table, &command, pending_jumps),
        "-R" | "--replace" => replace_rule(table, &command, pending_jumps),
        "-D" | "--delete" => delete_rule(table, &command),
        "-F" | "--flush" => flush_chains(table, &command),
        "-Z" | "--zero" => {
            zero_counters(table, &command.chain_name);
            Ok(())
        }
        "-N" | "--new-chain" => new_chain(table, &command),
        "-X" | "--delete-chain" => delete_chains(table, &command),
        "-P" | "--policy" => set_policy(table, &command),
        _ => Err(Failure::Parameter(format!("unknown command `{verb}'"))),
    }
}

/// `-A CHAIN RULE`.
fn append_rule(
    table: &mut Table,
    command: &Command,
    pending_jumps: &mut Vec<String>,
) -> Result<(), Failure> {
    let rule = command.rule(2);
    command.check_rule(table, &rule, pending_jumps)?;
    let chain = table
        .chain_mut(&command.chain_name)
        .ok_or_else(|| command.no_chain())?;
    chain.base_exists = true;
    if !command.dropped(&rule.spec) {
        chain.rules.push(rule);
    }
    Ok(())
}

/// `-I CHAIN [N] RULE`: at position N, counted from 1 (the default).
fn insert_rule(
    table: &mut Table,
    command: &Command,
    pending_jumps: &mut Vec<String>,
) -> Result<(), Failure> {
    let (position, skip) = match command.position() {
        Some(position) => (position, 3),
        None => (1, 2),
    };
    let rule = command.rule(skip);
    command.check_rule(table, &rule, pending_jumps)?;
    let chain = table
        .chain_mut(&command.chain_name)
        .ok_or_else(|| command.no_chain())?;
    if position == 0 || position > chain.rules.len() + 1 {
        return Err(command.refused("Index of insertion too big."));
    }
    chain.base_exists = true;
    if !command.dropped(&rule.spec) {
        chain.rules.insert(position - 1, rule);
    }
    Ok(())
}

/// `-R CHAIN N RULE`.
fn replace_rule(
    table: &mut Table,
    command: &Command,
    pending_jumps: &mut Vec<String>,
) -> Result<(), Failure> {
    let position = command.position().unwrap_or(0);
    let rule = command.rule(3);
    command.check_rule(table, &rule, pending_jumps)?;
    let chain = table
        .chain_mut(&command.chain_name)
        .ok_or_else(|| command.no_chain())?;
    if position == 0 || position > chain.rules.len() {
        return Err(command.refused("Index of replacement too big."));
    }
    chain.rules[position - 1] = rule;
    Ok(())
}

/// `-D CHAIN N` or `-D CHAIN RULE`.
fn delete_rule(table: &mut Table, command: &Command) -> Result<(), Failure> {
    let chain = table
        .chain_mut(&command.chain_name)
        .ok_or_else(|| command.no_chain())?;
    let by_number = command.position().filter(|_| command.words.len() == 3);
    let index = match by_number {
        Some(position) => (position >= 1 && position <= chain.rules.len()).then(|| position - 1),
        None => {
            let wanted = split_words(&rest_after(command.text, 2));
            chain
                .rules
                .iter()
                .position(|rule| rule.normalized() == wanted)
        }
    };
    let Some(index) = index else {
        return Err(command.refused(if by_number.is_some() {
            "Index of deletion too big."
        } else {
            "Bad rule (does a matching rule exist in that chain?)."
        }));
    };
    chain.rules.remove(index);
    Ok(())
}

/// `-F [CHAIN]`: without a chain, every chain of the table.
fn flush_chains(table: &mut Table, command: &Command) -> Result<(), Failure> {
    if command.chain_name.is_empty() {
        table
            .chains
            .iter_mut()
            .for_each(|chain| chain.rules.clear());
    } else {
        table
            .chain_mut(&command.chain_name)
            .ok_or_else(|| command.no_chain())?
            .rules
            .clear();
    }
    Ok(())
}

/// `-Z [CHAIN]`: the counters of the chain (or of every chain) and of its rules.
fn zero_counters(table: &mut Table, chain_name: &str) {
    for chain in table
        .chains
        .iter_mut()
        .filter(|chain| chain_name.is_empty() || chain.name == chain_name)
    {
        chain.counters = (0, 0);
        chain
            .rules
            .iter_mut()
            .for_each(|rule| rule.counters = (0, 0));
    }
}

/// `-N CHAIN`.
fn new_chain(table: &mut Table, command: &Command) -> Result<(), Failure> {
    if table.chain(&command.chain_name).is_some() {
        return Err(command.refused("Chain already exists."));
    }
    table.chains.push(Chain {
        name: command.chain_name.clone(),
        builtin: false,
        policy: "-".to_owned(),
        counters: (0, 0),
        rules: Vec::new(),
        base_exists: false,
        nft_order: 0,
    });
    Ok(())
}

/// `-X [CHAIN]`: without a chain, every user chain of the table. Each must be empty and
/// unreferenced.
fn delete_chains(table: &mut Table, command: &Command) -> Result<(), Failure> {
    let names: Vec<String> = if command.chain_name.is_empty() {
        table
            .chains
            .iter()
            .filter(|chain| !chain.builtin)
            .map(|chain| chain.name.clone())
            .collect()
    } else {
        vec![command.chain_name.clone()]
    };
    for name in names {
        let chain = table.chain(&name).ok_or_else(|| command.no_chain())?;
        let busy = chain.builtin || !chain.rules.is_empty() || table.referenced(&name);
        if busy {
            return Err(match command.flavor {
                Flavor::Legacy => Failure::Line(String::new()),
                Flavor::Nft => Failure::Commit(format!(
                    "CHAIN_DEL failed (Device or resource busy): chain {name}"
                )),
            });
        }
        table.chains.retain(|chain| chain.name != name);
    }
    Ok(())
}

/// `-P CHAIN POLICY`: a built-in chain's policy, ACCEPT or DROP.
fn set_policy(table: &mut Table, command: &Command) -> Result<(), Failure> {
    let chain_name = &command.chain_name;
    let policy = command.words.get(2).cloned().unwrap_or_default();
    let chain = table
        .chain_mut(chain_name)
        .ok_or_else(|| command.no_chain())?;
    if !chain.builtin || !matches!(policy.as_str(), "ACCEPT" | "DROP") {
        return Err(Failure::Parameter(format!(
            "Bad built-in chain name or policy `{chain_name}' `{policy}'"
        )));
    }
    chain.policy = policy;
    chain.base_exists = true;
    Ok(())
}
