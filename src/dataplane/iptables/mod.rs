//! The iptables backends (legacy and nft): reading with `iptables-save -c` and `ipset save`,
//! writing with one `ipset restore` and one `iptables-restore --noflush` per family.
//!
//! The scripts are built by pure functions ([`ipset_script`], [`table_script`]) so they are
//! unit-tested as text; the kernel tests check what they do.

use std::fmt::Write as _;

pub mod ipset;
pub mod parse;
pub mod render;

use super::runner::joined;
use super::{Backend, Coverage, Dataplane, DataplaneError, Sign, run_checked};
use crate::model::IpFamily;
use crate::plan::{ChainAction, Plan, SetAction, TablePlan};
use crate::ruleset::{Rule, Ruleset, Table};
use crate::state::Spelling;
use crate::state::State;
use ipset::{MAX_ELEMENTS, family_option};

/// How long restore waits for the xtables lock another program holds, in seconds.
pub const LOCK_WAIT_SECONDS: &str = "60";

/// An iptables backend: iptables with the legacy (x_tables) or the nf_tables kernel
/// interface, and ipset for the sets.
#[derive(Debug)]
pub struct Iptables {
    name: &'static str,
    about: &'static str,
    legacy: bool,
}

/// iptables with the legacy (x_tables) kernel interface.
pub static LEGACY: Iptables = Iptables {
    name: "iptables-legacy",
    about: "iptables-legacy-restore, ip6tables-legacy-restore, ipset",
    legacy: true,
};

/// iptables with the nf_tables kernel interface.
pub static NFT: Iptables = Iptables {
    name: "iptables-nft",
    about: "iptables-nft-restore, ip6tables-nft-restore, ipset",
    legacy: false,
};

impl Iptables {
    /// The save and restore programs of a family.
    pub fn programs(&self, family: IpFamily) -> (&'static str, &'static str) {
        match (self.legacy, family) {
            (true, IpFamily::V4) => ("iptables-legacy-save", "iptables-legacy-restore"),
            (true, IpFamily::V6) => ("ip6tables-legacy-save", "ip6tables-legacy-restore"),
            (false, IpFamily::V4) => ("iptables-nft-save", "iptables-nft-restore"),
            (false, IpFamily::V6) => ("ip6tables-nft-save", "ip6tables-nft-restore"),
        }
    }

    /// The program that lists one chain of a family (`-t TABLE -S CHAIN`).
    pub fn lister(&self, family: IpFamily) -> &'static str {
        match (self.legacy, family) {
            (true, IpFamily::V4) => "iptables-legacy",
            (true, IpFamily::V6) => "ip6tables-legacy",
            (false, IpFamily::V4) => "iptables-nft",
            (false, IpFamily::V6) => "ip6tables-nft",
        }
    }
}

/// How the iptables backends spell what they write: rules as `-A` lines, hooks as our jump at
/// position 1, members as `ipset save` prints them.
pub const SPELLING: Spelling = Spelling {
    name: "iptables",
    chain: render::render_chain,
    hook: |table, hook, _| render::render_hook(table, hook),
    set_kind: |kind, _| kind.ipset_type().to_owned(),
    member: ToString::to_string,
};

impl Backend for Iptables {
    fn name(&self) -> &'static str {
        self.name
    }

    fn about(&self) -> &'static str {
        self.about
    }

    fn render(&self, ruleset: &Ruleset) -> String {
        render::render_all(ruleset)
    }

    fn spelling(&self) -> &'static crate::state::Spelling {
        &SPELLING
    }

    fn rule_hash(&self, table: Table, chain: &str, rule: &Rule, family: IpFamily) -> String {
        render::render_rule(table, chain, rule, family).hash
    }

    fn observe(&self, dataplane: &Dataplane<'_>) -> Result<State, DataplaneError> {
        observe(self, dataplane)
    }

    fn observe_written(
        &self,
        dataplane: &Dataplane<'_>,
        plan: &Plan,
    ) -> Result<State, DataplaneError> {
        observe_written(self, dataplane, plan)
    }

    fn write(
        &self,
        dataplane: &Dataplane<'_>,
        plan: &Plan,
        _desired: &State,
    ) -> Result<u32, DataplaneError> {
        Ok(apply(self, dataplane, plan, false)?.0)
    }

    /// iptables-nft reads each family's tables back as soon as its restore is done, when the
    /// write is too large to list chain by chain; the sets are read after the stale ones are
    /// destroyed.
    fn write_and_read_back(
        &self,
        dataplane: &Dataplane<'_>,
        plan: &Plan,
        _desired: &State,
    ) -> Result<(u32, State), DataplaneError> {
        let pipelined = !self.legacy && written_chains(plan).is_none();
        let (commits, read) = apply(self, dataplane, plan, pipelined)?;
        let after = match read {
            Some(mut tables) => {
                tables.sets = read_sets(dataplane.runner, plan)?.sets;
                tables
            }
            None => observe_written(self, dataplane, plan)?,
        };
        Ok((commits, after))
    }

    /// What the read-back of [`Backend::observe_written`] covers: the chains, kernel chains and sets
    /// the plan names, or every table and set it names when it read them whole (iptables
    /// writes one table of one family per restore, so nothing else can have changed).
    fn unverified(&self, desired: &State, after: &State, written: &Plan) -> Plan {
        if written_chains(written).is_some() {
            return crate::plan::plan(&written.part_of(desired), &written.part_of(after));
        }
        let (tables, sets) = written.scope();
        crate::plan::plan(
            &desired.within(&tables, &sets),
            &after.within(&tables, &sets),
        )
    }

    fn sign(&self) -> Sign {
        if self.legacy {
            Sign::XtablesDigest
        } else {
            Sign::NfGeneration
        }
    }

    fn shares_ipsets(&self) -> bool {
        true
    }

    fn sign_covers(&self) -> Coverage {
        Coverage::Rules
    }

    /// The chains and jumps as cached, the sets read again (`ipset save`): ipsets are outside
    /// x_tables, nf_tables and their signs.
    fn refresh(&self, dataplane: &Dataplane<'_>, cached: &State) -> Result<State, DataplaneError> {
        let sets = run_checked(dataplane.runner, "ipset", &["save"], None)?;
        let mut state = State {
            tables: cached.tables.clone(),
            sets: Default::default(),
        };
        parse::parse_ipset_save(&sets.stdout, &mut state);
        Ok(state)
    }
}

/// Reads our chains, jumps and sets: `iptables-save -c`, `ip6tables-save -c` and `ipset save`
/// run at the same time (they read different kernel tables), and are parsed in that order.
fn observe(iptables: &Iptables, dataplane: &Dataplane<'_>) -> Result<State, DataplaneError> {
    let runner = dataplane.runner;
    let (saves, sets) = std::thread::scope(|scope| {
        let saves = IpFamily::BOTH.map(|family| {
            let (save, _) = iptables.programs(family);
            (
                family,
                scope.spawn(move || run_checked(runner, save, &["-c"], None)),
            )
        });
        let sets = dataplane
            .reads_sets
            .then(|| run_checked(runner, "ipset", &["save"], None));
        (saves.map(|(family, save)| (family, joined(save))), sets)
    });
    let mut state = State::default();
    for (family, save) in saves {
        match save {
            Ok(output) => parse::parse_iptables_save(&output.stdout, family, &mut state)?,
            // A kernel without IPv6 has no ip6tables tables; nothing of ours can be there.
            Err(error) if !dataplane.families.contains(&family) => {
                tracing::debug!(%error, "cannot read {family} rules; IPv6 is off, skipping");
            }
            Err(error) => return Err(error),
        }
    }
    if let Some(sets) = sets {
        parse::parse_ipset_save(&sets?.stdout, &mut state);
    }
    Ok(state)
}

/// Sets a plan may write before [`observe_written`] reads all sets rather than one by one.
const SETS_READ_ONE_BY_ONE: usize = 8;

/// Most chains (ours, and kernel chains holding our jumps) [`observe_written`] lists one by
/// one; a plan that wrote more is read back by whole tables.
const CHAINS_LISTED_ONE_BY_ONE: usize = 8;

/// The chains a plan writes, per table, when the read-back can list them one by one: at most
/// [`CHAINS_LISTED_ONE_BY_ONE`], none deleted (iptables-nft says a missing chain is
/// "incompatible", which cannot be told from a chain that really is).
fn written_chains(plan: &Plan) -> Option<Vec<(crate::state::TableKey, Vec<&str>)>> {
    let mut count = 0;
    let mut chains = Vec::new();
    for table in &plan.tables {
        if table
            .chains
            .iter()
            .any(|chain| chain.action == ChainAction::Delete)
        {
            return None;
        }
        let names: Vec<&str> = table
            .chains
            .iter()
            .map(|chain| chain.name.as_str())
            .chain(table.hooks.iter().map(|hook| hook.chain.as_str()))
            .collect();
        count += names.len();
        chains.push((table.key, names));
    }
    (count <= CHAINS_LISTED_ONE_BY_ONE).then_some(chains)
}

/// Reads back what a plan wrote, and only that: each chain it wrote (`iptables -t TABLE -S
/// CHAIN`, a few milliseconds where saving the table takes a hundred), or each table it wrote
/// (`iptables-save -t TABLE`) when it wrote many chains or deleted one; and each set it wrote
/// (`ipset save NAME`, or all of `ipset save` when it wrote many); all at the same time.
/// Whatever else the result holds is outside the plan.
fn observe_written(
    iptables: &Iptables,
    dataplane: &Dataplane<'_>,
    plan: &Plan,
) -> Result<State, DataplaneError> {
    if let Some(chains) = written_chains(plan) {
        match observe_chains(iptables, dataplane, plan, &chains) {
            Ok(state) => return Ok(state),
            // A chain listing that fails (an iptables without `-S CHAIN` in that table, or a
            // chain gone) is no verdict: read the tables whole.
            Err(error) => {
                tracing::debug!(%error, "listing the written chains failed; reading the tables")
            }
        }
    }
    observe_tables(iptables, dataplane, plan)
}

/// [`observe_written`] chain by chain: each listing becomes a table of `iptables-save` text.
fn observe_chains(
    iptables: &Iptables,
    dataplane: &Dataplane<'_>,
    plan: &Plan,
    chains: &[(crate::state::TableKey, Vec<&str>)],
) -> Result<State, DataplaneError> {
    let runner = dataplane.runner;
    let (listings, sets) = std::thread::scope(|scope| {
        let listings: Vec<_> = chains
            .iter()
            .map(|(key, names)| {
                let lister = iptables.lister(key.family);
                let table = key.table.as_str();
                let running: Vec<_> = names
                    .iter()
                    .map(|chain| {
                        scope.spawn(move || {
                            run_checked(runner, lister, &["-t", table, "-S", chain], None)
                        })
                    })
                    .collect();
                (key, running)
            })
            .collect();
        let sets = read_written_sets(scope, runner, plan);
        (
            listings
                .into_iter()
                .map(|(key, running)| (key, running.into_iter().map(joined).collect::<Vec<_>>()))
                .collect::<Vec<_>>(),
            sets.into_iter().map(joined).collect::<Vec<_>>(),
        )
    });
    let mut state = State::default();
    for (key, outputs) in listings {
        let mut text = format!("*{}\n", key.table.as_str());
        let mut rules = String::new();
        for output in outputs {
            for line in output?.stdout.lines() {
                if let Some(chain) = line.strip_prefix("-N ") {
                    let _ = writeln!(text, ":{chain} - [0:0]");
                } else if let Some(policy) = line.strip_prefix("-P ") {
                    let _ = writeln!(text, ":{policy} [0:0]");
                } else if line.starts_with("-A ") {
                    rules.push_str(line);
                    rules.push('\n');
                }
            }
        }
        text.push_str(&rules);
        text.push_str("COMMIT\n");
        parse::parse_iptables_save(&text, key.family, &mut state)?;
    }
    for set in sets {
        parse::parse_ipset_save(&set?.stdout, &mut state);
    }
    Ok(state)
}

/// Reads the sets a plan wrote: one by one, or all when it wrote many.
fn read_written_sets<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    runner: &'scope dyn super::Runner,
    plan: &'scope Plan,
) -> Vec<std::thread::ScopedJoinHandle<'scope, Result<super::Output, DataplaneError>>> {
    if plan.sets.len() > SETS_READ_ONE_BY_ONE {
        vec![scope.spawn(move || run_checked(runner, "ipset", &["save"], None))]
    } else {
        plan.sets
            .iter()
            .map(|set| scope.spawn(move || read_set(runner, &set.name)))
            .collect()
    }
}

/// [`observe_written`] by whole tables.
fn observe_tables(
    iptables: &Iptables,
    dataplane: &Dataplane<'_>,
    plan: &Plan,
) -> Result<State, DataplaneError> {
    let tables: Vec<&TablePlan> = plan.tables.iter().collect();
    let (state, sets) = std::thread::scope(|scope| {
        let sets = scope.spawn(|| read_sets(dataplane.runner, plan));
        (
            read_tables(iptables, dataplane.runner, &tables),
            joined(sets),
        )
    });
    let mut state = state?;
    state.sets = sets?.sets;
    Ok(state)
}

/// Reads `tables` whole, all at the same time, each part parsed on the thread that read it
/// while the slower saves still run: `iptables-save -t TABLE` for each table, except that
/// iptables-nft reads two or more tables of a family with one `iptables-save`.
/// `iptables-nft-save` reads the family's whole ruleset from the kernel whichever table it
/// prints (`-t raw` and `-t mangle` at 1,000 policies: 0.34 and 0.31 s; both with one save:
/// 0.39 s), while iptables-legacy reads only the table it is asked for.
fn read_tables(
    iptables: &Iptables,
    runner: &dyn super::Runner,
    tables: &[&TablePlan],
) -> Result<State, DataplaneError> {
    let reads = table_reads(iptables.legacy, tables);
    let parts = std::thread::scope(|scope| {
        let running: Vec<_> = reads
            .iter()
            .map(|(family, table, keys)| {
                let (save, _) = iptables.programs(*family);
                let family = *family;
                scope.spawn(move || {
                    let args: &[&str] = match table {
                        Some(table) => &["-t", table.as_str()],
                        None => &[],
                    };
                    let saved = run_checked(runner, save, args, None)?;
                    let mut part = State::default();
                    parse::parse_iptables_save(&saved.stdout, family, &mut part)?;
                    part.tables.retain(|key, _| keys.contains(key));
                    Ok::<_, DataplaneError>(part)
                })
            })
            .collect();
        running.into_iter().map(joined).collect::<Vec<_>>()
    });
    let mut state = State::default();
    for part in parts {
        // Each part holds its own tables: their keys never meet.
        state.tables.extend(part?.tables);
    }
    Ok(state)
}

/// The saves that read `tables`: a family's table alone (`Some`), or all of a family's tables
/// at once (`None`, iptables-nft with two or more of them); each with the tables it is for.
fn table_reads(
    legacy: bool,
    tables: &[&TablePlan],
) -> Vec<(IpFamily, Option<Table>, Vec<crate::state::TableKey>)> {
    let mut reads: Vec<(IpFamily, Option<Table>, Vec<crate::state::TableKey>)> = Vec::new();
    for table in tables {
        let key = table.key;
        match reads
            .iter_mut()
            .find(|(family, _, _)| *family == key.family)
        {
            Some((_, one, keys)) if !legacy => {
                *one = None;
                keys.push(key);
            }
            _ => reads.push((key.family, Some(key.table), vec![key])),
        }
    }
    reads
}

/// Reads back the sets `plan` wrote (see [`read_written_sets`]).
fn read_sets(runner: &dyn super::Runner, plan: &Plan) -> Result<State, DataplaneError> {
    let saves = std::thread::scope(|scope| {
        read_written_sets(scope, runner, plan)
            .into_iter()
            .map(joined)
            .collect::<Vec<_>>()
    });
    let mut state = State::default();
    for saved in saves {
        parse::parse_ipset_save(&saved?.stdout, &mut state);
    }
    Ok(state)
}

/// `ipset save NAME`; a set that does not exist (it was just destroyed) reads as nothing.
fn read_set(runner: &dyn super::Runner, name: &str) -> Result<super::Output, DataplaneError> {
    match run_checked(runner, "ipset", &["save", name], None) {
        Err(DataplaneError::Failed(failure)) if failure.stderr.contains("does not exist") => {
            Ok(super::Output::default())
        }
        other => other,
    }
}

/// Applies a plan: the ipsets it creates or changes, one restore per family (each of its
/// tables committed in turn, as `iptables-restore` does), then the ipsets it destroys. Returns
/// the nf_tables transactions committed: one per table with iptables-nft (and one per base chain
/// or table it removes), none with iptables-legacy; and with `read_back`, the tables it wrote
/// as iptables-nft holds them after the write (see [`Backend::write_and_read_back`]).
///
/// iptables-nft's two families are restored at the same time, and each family's tables are
/// read back as soon as its restore is done, while the other's may still run: they share no
/// table, and most of a restore is the program parsing its input (a commit that races the
/// other family's is retried by `iptables-nft-restore` itself). iptables-legacy's restores take
/// the xtables lock in turn anyway, so they run one after the other, and read nothing back.
fn apply(
    iptables: &Iptables,
    dataplane: &Dataplane<'_>,
    plan: &Plan,
    read_back: bool,
) -> Result<(u32, Option<State>), DataplaneError> {
    let sets = ipset_script(plan);
    std::thread::scope(|scope| {
        if !iptables.legacy {
            scope.spawn(|| base_chains::remember_created(dataplane, plan));
        }
        if !sets.is_empty() {
            run_checked(dataplane.runner, "ipset", &["restore"], Some(&sets))?;
        }
        Ok::<_, DataplaneError>(())
    })?;
    let families = by_family(plan);
    let (mut commits, read) = if iptables.legacy {
        for (family, tables) in &families {
            restore_family(iptables, dataplane, *family, tables)?;
        }
        (0, None)
    } else {
        let done = std::thread::scope(|scope| {
            let running: Vec<_> = families
                .iter()
                .map(|(family, tables)| {
                    scope.spawn(move || {
                        let commits = restore_family(iptables, dataplane, *family, tables)?;
                        let read = read_back
                            .then(|| read_tables(iptables, dataplane.runner, tables))
                            .transpose()?;
                        Ok::<_, DataplaneError>((commits, read))
                    })
                })
                .collect();
            running.into_iter().map(joined).collect::<Vec<_>>()
        });
        let mut commits = 0;
        let mut state = read_back.then(State::default);
        for family in done {
            let (written, read) = family?;
            commits += written;
            if let (Some(state), Some(read)) = (state.as_mut(), read) {
                state.tables.extend(read.tables);
            }
        }
        (commits, state)
    };
    if !iptables.legacy {
        commits += base_chains::remove_created(dataplane, plan);
    }
    let destroy = ipset_destroy_script(plan);
    if !destroy.is_empty() {
        run_checked(dataplane.runner, "ipset", &["restore"], Some(&destroy))?;
    }
    Ok((commits, read))
}

/// One `iptables-restore --noflush` of `tables`, the plan's tables of `family`; returns the
/// nf_tables transactions it committed (iptables-nft commits each table's `COMMIT` as one).
fn restore_family(
    iptables: &Iptables,
    dataplane: &Dataplane<'_>,
    family: IpFamily,
    tables: &[&TablePlan],
) -> Result<u32, DataplaneError> {
    let (_, restore) = iptables.programs(family);
    let script: String = tables.iter().map(|table| table_script(table)).collect();
    // iptables-legacy-restore waits for the lock without a word; say why nothing happens.
    let lock = super::xtables::lock_path();
    let busy = iptables.legacy && !dataplane.holds_xtables_lock && xtables_lock_busy(&lock);
    if busy {
        tracing::warn!(
            %family,
            "another program holds the xtables lock `{}`; waiting up to {LOCK_WAIT_SECONDS} s for it",
            lock.display()
        );
    }
    let started = std::time::Instant::now();
    let output = run_checked(
        dataplane.runner,
        restore,
        &["--noflush", "--wait", LOCK_WAIT_SECONDS],
        Some(&script),
    )?;
    if busy || output.stderr.contains("lock") {
        tracing::warn!(
            %family,
            waited_ms = started.elapsed().as_millis() as u64,
            "waited for the xtables lock another program held: {}",
            output.stderr.trim()
        );
    }
    Ok(if iptables.legacy {
        0
    } else {
        u32::try_from(tables.len()).unwrap_or(u32::MAX)
    })
}

/// The plan's tables grouped by family, in the plan's order: one restore loads each group.
fn by_family(plan: &Plan) -> Vec<(IpFamily, Vec<&TablePlan>)> {
    let mut groups: Vec<(IpFamily, Vec<&TablePlan>)> = Vec::new();
    for table in &plan.tables {
        match groups
            .iter_mut()
            .find(|(family, _)| *family == table.key.family)
        {
            Some((_, tables)) => tables.push(table),
            None => groups.push((table.key.family, vec![table])),
        }
    }
    groups
}

/// Whether another process holds the xtables lock at `path` now. The file is never created; a
/// missing one means nobody holds the lock. Taking the lock for the test releases it at once.
pub fn xtables_lock_busy(path: &std::path::Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(_released_on_drop) => false,
        Err((_, errno)) => errno == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// iptables-nft makes a kernel table and base chain (`table ip mangle { chain PREROUTING … }`)
/// exist the first time a rule goes into a built-in chain, and leaves them behind when the
/// rule is deleted. So that `cleanup` leaves `nft list ruleset` as it found it, the base chains
/// our jumps made exist are remembered in the state directory, and removed again when our
/// last jump leaves them, if nobody else put anything there meanwhile.
mod base_chains {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use crate::dataplane::{Dataplane, Runner};
    use crate::model::IpFamily;
    use crate::plan::Plan;
    use crate::ruleset::Table;

    type Created = BTreeSet<(IpFamily, Table, String)>;

    fn file(dataplane: &Dataplane<'_>) -> PathBuf {
        dataplane.state_dir.join("iptables-nft-created.json")
    }

    fn load(dataplane: &Dataplane<'_>) -> Created {
        std::fs::read(file(dataplane))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    fn store(dataplane: &Dataplane<'_>, created: &Created) {
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&dataplane.state_dir)?;
            let bytes = serde_json::to_vec(created).map_err(std::io::Error::other)?;
            std::fs::write(file(dataplane), bytes)
        };
        if let Err(error) = write() {
            tracing::debug!(%error, "cannot remember the base chains iptables-nft created");
        }
    }

    fn nft_family(family: IpFamily) -> &'static str {
        match family {
            IpFamily::V4 => "ip",
            IpFamily::V6 => "ip6",
        }
    }

    /// The chain's listing, or `None` when it does not exist (or `nft` is missing).
    fn list_chain(
        runner: &dyn Runner,
        family: IpFamily,
        table: Table,
        chain: &str,
    ) -> Option<String> {
        let output = runner
            .run(
                "nft",
                &["list", "chain", nft_family(family), table.as_str(), chain],
                None,
            )
            .ok()?;
        output.success.then_some(output.stdout)
    }

    /// Whether a listed base chain holds no rule and accepts by default.
    pub fn is_empty_accepting(listing: &str) -> bool {
        let body: Vec<&str> = listing
            .lines()
            .map(str::trim)
            .filter(|line| {
                !line.is_empty()
                    && !line.starts_with("table ")
                    && !line.starts_with("chain ")
                    && *line != "}"
            })
            .collect();
        body.len() == 1 && body[0].starts_with("type ") && body[0].ends_with("policy accept;")
    }

    pub fn remember_created(dataplane: &Dataplane<'_>, plan: &Plan) {
        if !dataplane.runner.exists("nft") {
            return;
        }
        let mut created = load(dataplane);
        let before = created.len();
        for table in &plan.tables {
            if !table.hooks.iter().any(|hook| hook.insert.is_some()) {
                continue;
            }
            // An empty chain name stands for the table itself.
            let table_key = (table.key.family, table.key.table, String::new());
            let table_exists = crate::dataplane::nft_tables::exists(
                dataplane.runner,
                dataplane.kernel,
                nft_family(table.key.family),
                table.key.table.as_str(),
            );
            if !table_exists {
                created.insert(table_key);
            }
            for hook in table.hooks.iter().filter(|hook| hook.insert.is_some()) {
                let key = (table.key.family, table.key.table, hook.chain.clone());
                if !created.contains(&key)
                    && list_chain(
                        dataplane.runner,
                        table.key.family,
                        table.key.table,
                        &hook.chain,
                    )
                    .is_none()
                {
                    created.insert(key);
                }
            }
        }
        if created.len() != before {
            store(dataplane, &created);
        }
    }

    /// Removes the base chains and tables our jumps made exist once our last jump leaves
    /// them; returns how many it removed (each an nf_tables commit).
    pub fn remove_created(dataplane: &Dataplane<'_>, plan: &Plan) -> u32 {
        let mut created = load(dataplane);
        if created.is_empty() || !dataplane.runner.exists("nft") {
            return 0;
        }
        let mut removed = 0;
        let mut delete = |args: &[&str]| {
            let deleted = dataplane.runner.run("nft", args, None);
            removed += u32::from(deleted.is_ok_and(|output| output.success));
        };
        let runner = dataplane.runner;
        for table in &plan.tables {
            let family = nft_family(table.key.family);
            let name = table.key.table.as_str();
            for hook in table.hooks.iter().filter(|hook| hook.insert.is_none()) {
                let key = (table.key.family, table.key.table, hook.chain.clone());
                if !created.remove(&key) {
                    continue;
                }
                let empty = list_chain(runner, table.key.family, table.key.table, &hook.chain)
                    .is_some_and(|listing| is_empty_accepting(&listing));
                if empty {
                    delete(&["delete", "chain", family, name, &hook.chain]);
                }
            }
            let table_key = (table.key.family, table.key.table, String::new());
            let our_chains_left = created.iter().any(|(f, t, chain)| {
                *f == table.key.family && *t == table.key.table && !chain.is_empty()
            });
            if created.contains(&table_key) && !our_chains_left {
                created.remove(&table_key);
                let no_chains = runner
                    .run("nft", &["list", "table", family, name], None)
                    .is_ok_and(|listing| {
                        listing.success
                            && !listing
                                .stdout
                                .lines()
                                .any(|line| line.trim_start().starts_with("chain "))
                    });
                if no_chains {
                    delete(&["delete", "table", family, name]);
                }
            }
        }
        store(dataplane, &created);
        removed
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn empty_accepting_base_chains_are_recognised() {
            let empty = "table ip mangle {\n\tchain PREROUTING {\n\t\ttype filter hook prerouting priority mangle; policy accept;\n\t}\n}\n";
            assert!(super::is_empty_accepting(empty));
            let used = "table ip mangle {\n\tchain PREROUTING {\n\t\ttype filter hook prerouting priority mangle; policy accept;\n\t\tcounter packets 0 bytes 0 accept\n\t}\n}\n";
            assert!(!super::is_empty_accepting(used));
            let dropping = "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy drop;\n\t}\n}\n";
            assert!(!super::is_empty_accepting(dropping));
        }
    }
}

/// The temporary name a set is rebuilt under before it is swapped in.
pub fn temporary_set_name(name: &str) -> String {
    let digest = crate::digest::hash(name);
    format!("npg-tmp-{}", &digest[..20])
}

/// `ipset restore` input creating and updating sets. New members are added before old ones are
/// removed, so a member that stays in a network's whitelist never drops out on the way.
pub fn ipset_script(plan: &Plan) -> String {
    let mut out = String::new();
    for set in &plan.sets {
        // A set is created with all its members (`add`), sized for them.
        let create = |name: &str| {
            format!(
                "create {name} {} family {} hashsize {} maxelem {MAX_ELEMENTS}\n",
                set.kind,
                family_option(set.family),
                ipset::hash_size(set.add.len()),
            )
        };
        match set.action {
            SetAction::Create => {
                out.push_str(&create(&set.name));
                for member in &set.add {
                    let _ = writeln!(out, "add {} {member}", set.name);
                }
            }
            SetAction::Update => {
                for member in &set.add {
                    let _ = writeln!(out, "add {} {member} -exist", set.name);
                }
                for member in &set.remove {
                    let _ = writeln!(out, "del {} {member} -exist", set.name);
                }
            }
            SetAction::Recreate => {
                // Swap needs the same type and family; when they differ, the set still in use
                // cannot be replaced in place and this fails loudly rather than leaving a gap.
                let temporary = temporary_set_name(&set.name);
                let _ = writeln!(out, "destroy {temporary} -exist");
                out.push_str(&create(&temporary));
                for member in &set.add {
                    let _ = writeln!(out, "add {temporary} {member}");
                }
                let _ = writeln!(out, "swap {temporary} {}", set.name);
                let _ = writeln!(out, "destroy {temporary}");
            }
            SetAction::Delete => {}
        }
    }
    out
}

/// `ipset restore` input destroying the sets no rule uses any more (run after the tables).
pub fn ipset_destroy_script(plan: &Plan) -> String {
    plan.sets
        .iter()
        .filter(|set| set.action == SetAction::Delete)
        .map(|set| format!("destroy {}\n", set.name))
        .collect()
}

/// `iptables-restore --noflush` input for one table: declares (and so flushes) every chain that
/// is created, changed or deleted, fills the new and changed ones, fixes our jumps in kernel
/// chains, and deletes the chains no longer wanted, all in one atomic commit.
pub fn table_script(table: &TablePlan) -> String {
    let mut out = format!("*{}\n", table.key.table);
    for chain in &table.chains {
        let _ = writeln!(out, ":{} - [0:0]", chain.name);
    }
    for chain in &table.chains {
        if chain.action != ChainAction::Delete {
            for rule in &chain.after {
                let _ = writeln!(out, "{}", rule.text);
            }
        }
    }
    for hook in &table.hooks {
        for removed in &hook.remove {
            let _ = writeln!(out, "{}", removed.rule.text.replacen("-A ", "-D ", 1));
        }
        if let Some(insert) = &hook.insert {
            let rest = insert
                .text
                .strip_prefix(&format!("-A {} ", hook.chain))
                .unwrap_or(&insert.text);
            let _ = writeln!(out, "-I {} 1 {rest}", hook.chain);
        }
    }
    for chain in &table.chains {
        if chain.action == ChainAction::Delete {
            let _ = writeln!(out, "-X {}", chain.name);
        }
    }
    out.push_str("COMMIT\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ChainChange, HookChange, SetChange};
    use crate::ruleset::Table;
    use crate::state::{HookRule, RuleLine, TableKey};

    fn rule(text: &str) -> RuleLine {
        RuleLine {
            hash: parse::rule_hash(text),
            text: text.into(),
            counters: None,
        }
    }

    #[test]
    fn iptables_nft_reads_a_family_s_tables_with_one_save() {
        let plan = |family, table| TablePlan {
            key: TableKey { family, table },
            chains: vec![],
            hooks: vec![],
        };
        let written = [
            plan(IpFamily::V4, Table::Raw),
            plan(IpFamily::V4, Table::Mangle),
            plan(IpFamily::V6, Table::Mangle),
        ];
        let tables: Vec<&TablePlan> = written.iter().collect();
        let key = |family, table| TableKey { family, table };
        let v4 = vec![
            key(IpFamily::V4, Table::Raw),
            key(IpFamily::V4, Table::Mangle),
        ];
        let v6_mangle = vec![key(IpFamily::V6, Table::Mangle)];
        assert_eq!(
            table_reads(false, &tables),
            vec![
                (IpFamily::V4, None, v4),
                (IpFamily::V6, Some(Table::Mangle), v6_mangle.clone()),
            ]
        );
        assert_eq!(
            table_reads(true, &tables),
            vec![
                (
                    IpFamily::V4,
                    Some(Table::Raw),
                    vec![key(IpFamily::V4, Table::Raw)]
                ),
                (
                    IpFamily::V4,
                    Some(Table::Mangle),
                    vec![key(IpFamily::V4, Table::Mangle)]
                ),
                (IpFamily::V6, Some(Table::Mangle), v6_mangle),
            ]
        );
    }

    #[test]
    fn table_script_declares_fills_hooks_and_deletes_in_one_commit() {
        let plan = TablePlan {
            key: TableKey {
                family: IpFamily::V4,
                table: Table::Mangle,
            },
            chains: vec![
                ChainChange {
                    policy: None,
                    name: "npg-a".into(),
                    action: ChainAction::Replace,
                    before: vec![],
                    after: vec![rule("-A npg-a -m comment --comment \"npg:1\" -j RETURN")],
                },
                ChainChange {
                    policy: None,
                    name: "npg-old".into(),
                    action: ChainAction::Delete,
                    before: vec![],
                    after: vec![],
                },
            ],
            hooks: vec![HookChange {
                chain: "PREROUTING".into(),
                remove: vec![HookRule {
                    position: 3,
                    rule: rule("-A PREROUTING -m comment --comment \"npg:h\" -j npg-a"),
                }],
                insert: Some(rule(
                    "-A PREROUTING -m comment --comment \"npg:h\" -j npg-a",
                )),
                reason: String::new(),
            }],
        };
        assert_eq!(
            table_script(&plan),
            "*mangle\n:npg-a - [0:0]\n:npg-old - [0:0]\n-A npg-a -m comment --comment \"npg:1\" -j RETURN\n-D PREROUTING -m comment --comment \"npg:h\" -j npg-a\n-I PREROUTING 1 -m comment --comment \"npg:h\" -j npg-a\n-X npg-old\nCOMMIT\n"
        );
    }

    #[test]
    fn a_held_xtables_lock_is_seen_and_a_missing_one_is_free() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("xtables.lock");
        assert!(!xtables_lock_busy(&path), "a missing lock file is free");
        let file = std::fs::File::create(&path).expect("lock file");
        assert!(!xtables_lock_busy(&path));
        let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| errno)
            .expect("lock");
        assert!(xtables_lock_busy(&path), "a held lock is busy");
        drop(held);
        assert!(!xtables_lock_busy(&path), "released again");
    }

    #[test]
    fn set_updates_add_before_they_remove() {
        let plan = Plan {
            tables: vec![],
            sets: vec![
                SetChange {
                    name: "npg4-a".into(),
                    action: SetAction::Update,
                    family: IpFamily::V4,
                    kind: "hash:net".into(),
                    add: vec!["192.0.2.0/24".into()],
                    remove: vec!["198.51.100.0/24".into()],
                },
                SetChange {
                    name: "npg6-b".into(),
                    action: SetAction::Create,
                    family: IpFamily::V6,
                    kind: "hash:net".into(),
                    add: vec!["2001:db8::/32".into()],
                    remove: vec![],
                },
                SetChange {
                    name: "npg4-c".into(),
                    action: SetAction::Delete,
                    family: IpFamily::V4,
                    kind: "hash:net".into(),
                    add: vec![],
                    remove: vec![],
                },
            ],
        };
        assert_eq!(
            ipset_script(&plan),
            "add npg4-a 192.0.2.0/24 -exist\ndel npg4-a 198.51.100.0/24 -exist\ncreate npg6-b hash:net family inet6 hashsize 64 maxelem 1048576\nadd npg6-b 2001:db8::/32\n"
        );
        assert_eq!(ipset_destroy_script(&plan), "destroy npg4-c\n");
    }
}
