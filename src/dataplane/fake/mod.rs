//! An in-memory kernel, in the manner of knftables' `Fake`: a [`Runner`] that emulates
//! `iptables-restore`/`iptables-save` (legacy and nft, both families), `ipset` and `nft`, so the
//! whole observe → plan → apply → verify loop runs without root.
//!
//! It parses what we send, rejects what the kernel would reject (with the real tool's exit code
//! and a stderr like its own), answers the save and list commands in the kernel's layout, and
//! records every command it ran. Tests can make writes fail, make it silently drop a rule,
//! set counters and change rules as a foreign program would.
//!
//! What it does not emulate: packet matching; most match and target options (rules are kept,
//! and printed back, in the spelling they were sent in; only jumps, gotos and ipset matches
//! are checked); nft's "did you mean" suggestions; nft's `table … { chain … { … } }` block
//! syntax (our scripts write one command a line); hash order (ipset members and nft's
//! non-interval elements are listed in the order they were added). `tests/kernel_fake.rs`
//! holds it to the real kernel's answers.

mod ipset;
mod nft;
mod xtables;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

use super::{Output, Runner};

/// One command the fake ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// The program as named (`iptables-nft-restore`, `ipset`, `nft`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// What was written to its stdin.
    pub stdin: Option<String>,
    /// Whether it was a write (a restore or `nft -f`).
    pub write: bool,
    /// Whether it succeeded.
    pub success: bool,
}

impl Invocation {
    /// The command line, words joined by spaces.
    pub fn line(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The programs the fake answers for.
pub const PROGRAMS: [&str; 16] = [
    "iptables-legacy",
    "ip6tables-legacy",
    "iptables-nft",
    "ip6tables-nft",
    "iptables-legacy-save",
    "iptables-legacy-restore",
    "ip6tables-legacy-save",
    "ip6tables-legacy-restore",
    "iptables-nft-save",
    "iptables-nft-restore",
    "ip6tables-nft-save",
    "ip6tables-nft-restore",
    "iptables",
    "ipset",
    "nft",
    "ip6tables",
];

/// Which iptables rule store a program uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// x_tables.
    Legacy,
    /// nf_tables.
    Nft,
}

#[derive(Clone, Debug, Default)]
struct Kernel {
    /// iptables-legacy, IPv4 and IPv6.
    legacy: [xtables::Store; 2],
    /// iptables-nft, IPv4 and IPv6.
    nft_xt: [xtables::Store; 2],
    sets: ipset::Sets,
    nft: nft::Ruleset,
    /// The last nf_tables table handle given out (nft's tables and iptables-nft's share them).
    table_handles: u64,
    /// The nf_tables generation: bumped by every successful nftables or iptables-nft write.
    generation: u32,
}

#[derive(Debug, Default)]
struct Faults {
    writes: usize,
    fail_writes: BTreeSet<usize>,
    fail_programs: BTreeSet<String>,
    drop_rules: Vec<String>,
}

#[derive(Debug, Default)]
struct Inner {
    kernel: Kernel,
    faults: Faults,
    log: Vec<Invocation>,
}

/// The in-memory kernel. Cheap to create; every test gets its own.
#[derive(Debug)]
pub struct FakeKernel {
    inner: Mutex<Inner>,
    /// Which fake this is, as [`Runner::namespace_identity`] tells namespaces apart.
    namespace: u64,
}

impl Default for FakeKernel {
    fn default() -> FakeKernel {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        FakeKernel {
            inner: Mutex::default(),
            namespace: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

fn output(code: i32, stdout: String, stderr: String) -> Output {
    Output {
        success: code == 0,
        code: Some(code),
        stdout,
        stderr,
    }
}

pub(crate) use crate::dataplane::iptables::parse::split_words;

impl FakeKernel {
    /// An empty kernel: no tables, chains, rules or sets.
    pub fn new() -> FakeKernel {
        FakeKernel::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes the `n`th write from now (1-based; a restore or `nft -f`) fail without changing
    /// anything.
    pub fn fail_write(&self, n: usize) {
        let mut inner = self.lock();
        let at = inner.faults.writes + n;
        inner.faults.fail_writes.insert(at);
    }

    /// Makes every write of `program` fail without changing anything.
    pub fn fail_program(&self, program: &str) {
        self.lock().faults.fail_programs.insert(program.to_owned());
    }

    /// From now on, silently drops every rule written whose text contains `needle` (as if the
    /// kernel lost it): the write succeeds, the rule is not there.
    pub fn drop_rules_containing(&self, needle: &str) {
        self.lock().faults.drop_rules.push(needle.to_owned());
    }

    /// Removes every fault set up so far.
    pub fn clear_faults(&self) {
        let mut inner = self.lock();
        inner.faults.fail_writes.clear();
        inner.faults.fail_programs.clear();
        inner.faults.drop_rules.clear();
    }

    /// How many writes ran so far.
    pub fn writes(&self) -> usize {
        self.lock().faults.writes
    }

    /// Every command run so far, in order.
    pub fn commands(&self) -> Vec<Invocation> {
        self.lock().log.clone()
    }

    /// Forgets the commands run so far.
    pub fn clear_commands(&self) {
        self.lock().log.clear();
    }

    /// Sets the counters of every rule (iptables or nft) whose text contains `needle`; returns
    /// how many rules matched.
    pub fn set_counters(&self, needle: &str, packets: u64, bytes: u64) -> usize {
        let mut inner = self.lock();
        let kernel = &mut inner.kernel;
        let mut count = 0;
        for store in kernel.legacy.iter_mut().chain(kernel.nft_xt.iter_mut()) {
            count += store.set_counters(needle, packets, bytes);
        }
        count + kernel.nft.set_counters(needle, packets, bytes)
    }

    /// Deletes every rule (iptables or nft) whose text contains `needle`, as another program
    /// would; returns how many were deleted.
    pub fn delete_rules_containing(&self, needle: &str) -> usize {
        let mut inner = self.lock();
        let kernel = &mut inner.kernel;
        let mut count = 0;
        for store in &mut kernel.legacy {
            count += store.delete_rules(needle);
        }
        let mut nf_tables = 0;
        for store in &mut kernel.nft_xt {
            nf_tables += store.delete_rules(needle);
        }
        nf_tables += kernel.nft.delete_rules(needle);
        if nf_tables > 0 {
            kernel.generation = kernel.generation.wrapping_add(1);
        }
        count + nf_tables
    }

    /// Runs a command as another program would: not logged, not counted as a write, never
    /// failed on purpose (drift).
    pub fn foreign(&self, program: &str, args: &[&str], stdin: &str) -> Output {
        let mut inner = self.lock();
        let (result, _) = dispatch(&mut inner.kernel, &[], program, args, Some(stdin));
        if result.success {
            let commits = nf_tables_commits(program, args, Some(stdin));
            inner.kernel.generation = inner.kernel.generation.wrapping_add(commits);
        }
        result
    }

    /// Everything the kernel holds, as the save and list commands print it: both iptables
    /// flavours and families with counters, `ipset save` and the listing of nft's own tables
    /// (without handles, which the kernel hands out anew to a rule written again). Equal
    /// snapshots mean equal rules, sets and counters.
    pub fn snapshot(&self) -> String {
        let inner = self.lock();
        let kernel = &inner.kernel;
        let mut out = String::new();
        for (name, store) in [
            ("iptables-legacy", &kernel.legacy[0]),
            ("ip6tables-legacy", &kernel.legacy[1]),
            ("iptables-nft", &kernel.nft_xt[0]),
            ("ip6tables-nft", &kernel.nft_xt[1]),
        ] {
            out.push_str(&format!("## {name}\n"));
            out.push_str(&store.save(None, true, name));
        }
        out.push_str("## ipset\n");
        out.push_str(&kernel.sets.save(None).unwrap_or_default());
        out.push_str("## nft\n");
        out.push_str(&nft::list_own_tables(kernel, false));
        out
    }
}

fn is_write(program: &str, args: &[&str]) -> bool {
    program.ends_with("-restore")
        || (program == "ipset" && args.first() == Some(&"restore"))
        || (program == "nft" && args.contains(&"-f"))
}

fn injected_failure(program: &str) -> Output {
    let stderr = if program.ends_with("-restore") {
        let name = program.replace("-legacy", "").replace("-nft", "");
        format!("{name}: line 1 failed\n")
    } else if program == "ipset" {
        "ipset v7.17: Error in line 1: Kernel error received: Operation not permitted\n".to_owned()
    } else {
        "/dev/stdin:1:1-3: Error: Could not process rule: Operation not permitted\n".to_owned()
    };
    output(1, String::new(), stderr)
}

/// What an iptables program does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    /// `iptables-*-save`.
    Save,
    /// `iptables-*-restore`.
    Restore,
    /// `iptables-legacy` or `iptables-nft` itself (only `-t TABLE -S CHAIN` is emulated).
    List,
}

/// Which store and family an iptables program uses, and what it does.
fn iptables_program(program: &str) -> Option<(Flavor, usize, Verb)> {
    let (family, rest) = match program.strip_prefix("ip6tables-") {
        Some(rest) => (1, rest),
        None => (0, program.strip_prefix("iptables-")?),
    };
    let (flavor, verb) = match rest {
        "legacy" => return Some((Flavor::Legacy, family, Verb::List)),
        "nft" => return Some((Flavor::Nft, family, Verb::List)),
        _ => {
            if let Some(verb) = rest.strip_prefix("legacy-") {
                (Flavor::Legacy, verb)
            } else if let Some(verb) = rest.strip_prefix("nft-") {
                (Flavor::Nft, verb)
            } else {
                return None;
            }
        }
    };
    match verb {
        "save" => Some((flavor, family, Verb::Save)),
        "restore" => Some((flavor, family, Verb::Restore)),
        _ => None,
    }
}

/// Runs one command against the kernel; returns its output and whether it is a known program.
fn dispatch(
    kernel: &mut Kernel,
    drop_rules: &[String],
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> (Output, bool) {
    if let Some((flavor, family, verb)) = iptables_program(program) {
        if verb == Verb::List {
            let store = match flavor {
                Flavor::Legacy => &kernel.legacy[family],
                Flavor::Nft => &kernel.nft_xt[family],
            };
            return (xtables::list_command(store, flavor, family, args), true);
        }
        if verb == Verb::Restore {
            let result = xtables::restore(
                kernel,
                flavor,
                family,
                args,
                stdin.unwrap_or_default(),
                drop_rules,
            );
            return (result, true);
        }
        let legacy_present = !kernel.legacy[family].tables.is_empty();
        let store = match flavor {
            Flavor::Legacy => &mut kernel.legacy[family],
            Flavor::Nft => &mut kernel.nft_xt[family],
        };
        let mut result = xtables::save_command(store, flavor, family, args);
        if flavor == Flavor::Nft && legacy_present {
            // As iptables-nft-save does, once per run, when x_tables rules exist too.
            let name = if family == 0 { "iptables" } else { "ip6tables" };
            result.stderr.push_str(&format!(
                "# Warning: {name}-legacy tables present, use {name}-legacy-save to see them\n"
            ));
        }
        return (result, true);
    }
    match program {
        "iptables" | "ip6tables" => {
            if args.first() == Some(&"--version") {
                let text = format!("{program} v1.8.9 (nf_tables)\n");
                (output(0, text, String::new()), true)
            } else {
                let text = format!(
                    "{program} v1.8.9 (nf_tables): the fake kernel only answers `--version`\n"
                );
                (output(2, String::new(), text), true)
            }
        }
        "ipset" => (ipset::command(kernel, args, stdin), true),
        "nft" => (nft::command(kernel, args, stdin, drop_rules), true),
        _ => (Output::default(), false),
    }
}

impl Runner for FakeKernel {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> std::io::Result<Output> {
        let text = stdin.map(|bytes| String::from_utf8_lossy(bytes).into_owned());
        let mut inner = self.lock();
        if !PROGRAMS.contains(&program) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("`{program}` not found (the fake kernel does not emulate it)"),
            ));
        }
        let write = is_write(program, args);
        let inner = &mut *inner;
        let result = if write {
            inner.faults.writes += 1;
            let nth = inner.faults.writes;
            if inner.faults.fail_writes.remove(&nth) || inner.faults.fail_programs.contains(program)
            {
                injected_failure(program)
            } else {
                dispatch(
                    &mut inner.kernel,
                    &inner.faults.drop_rules,
                    program,
                    args,
                    text.as_deref(),
                )
                .0
            }
        } else {
            dispatch(&mut inner.kernel, &[], program, args, text.as_deref()).0
        };
        if result.success {
            let commits = nf_tables_commits(program, args, text.as_deref());
            inner.kernel.generation = inner.kernel.generation.wrapping_add(commits);
        }
        inner.log.push(Invocation {
            program: program.to_owned(),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            stdin: text,
            write,
            success: result.success,
        });
        Ok(result)
    }

    fn exists(&self, program: &str) -> bool {
        PROGRAMS.contains(&program)
    }
}

/// What a fake kernel tells without a program, read from its own state.
impl super::Kernel for FakeKernel {
    fn nft_generation(&self) -> Option<u32> {
        Some(self.lock().kernel.generation)
    }

    /// The digest of the iptables-legacy rules without their counters, like the kernel's.
    fn xtables_digest(&self) -> Option<u128> {
        let inner = self.lock();
        let saves = [
            inner.kernel.legacy[0].save(None, false, "iptables-legacy"),
            inner.kernel.legacy[1].save(None, false, "ip6tables-legacy"),
        ];
        Some(super::xtables::fingerprinter().of(&saves))
    }

    fn nft_tables(&self) -> Option<Vec<(String, String)>> {
        Some(nft::tables(&self.lock().kernel))
    }

    fn namespace_identity(&self) -> Option<String> {
        Some(format!("fake/{}", self.namespace))
    }

    /// Nobody else writes this kernel but [`FakeKernel::foreign`], whose callers stand for a
    /// program that ignores the lock.
    fn holding_xtables_lock(&self) -> Option<Box<dyn super::Host + '_>> {
        Some(Box::new(self))
    }
}

/// How many nf_tables transactions a command commits when it succeeds: `iptables-nft-restore`
/// one per `COMMIT` line (each table of its input in turn), `nft -f` one, an `nft` verb that
/// changes something one.
fn nf_tables_commits(program: &str, args: &[&str], input: Option<&str>) -> u32 {
    if program.ends_with("tables-nft-restore") {
        let commits = input
            .unwrap_or_default()
            .lines()
            .filter(|line| line.trim() == "COMMIT")
            .count();
        return u32::try_from(commits).unwrap_or(u32::MAX);
    }
    if program != "nft" {
        return 0;
    }
    if args.contains(&"-f") {
        return 1;
    }
    let changes = args
        .iter()
        .find(|arg| !arg.starts_with('-'))
        .is_some_and(|verb| {
            matches!(
                *verb,
                "add" | "create" | "insert" | "replace" | "delete" | "destroy" | "flush" | "reset"
            )
        });
    u32::from(changes)
}
