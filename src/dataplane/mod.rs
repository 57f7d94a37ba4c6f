//! The dataplane: the only code that runs `iptables-restore`, `ipset` or `nft` and reads the
//! kernel's rules.
//!
//! Every backend is one implementation of [`Backend`], in a module of its own that holds its
//! renderer, its parser of what the kernel prints and the programs it runs; [`BACKENDS`] lists
//! them. Programs run behind the [`Runner`] seam; the kernel's signs and the xtables lock sit
//! behind the [`Kernel`] seam beside it. The binary fills both with [`SystemRunner`], tests
//! with the in-memory kernel in `fake`.
//!
//! Adding a backend: a new module implementing [`Backend`], and one line in [`BACKENDS`].

pub mod conntrack;
pub mod detect;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod ipset_sizes;
pub mod iptables;
pub mod kernel;
pub mod namespace;
pub mod nat;
mod netlink_bytes;
pub mod nfgen;
pub mod nfnotify;
pub mod nft_tables;
pub mod nftables;
pub mod runner;
pub mod xtables;

use std::fmt;
use std::path::{Path, PathBuf};

pub use kernel::{Host, Kernel};
pub use runner::{
    CommandFailure, DataplaneError, ObserveError, Output, Runner, SystemRunner, failed_line_number,
    run_checked,
};

use crate::model::IpFamily;
use crate::plan::Plan;
use crate::ruleset::{Rule, Ruleset, Table};
use crate::state::State;

/// One way of programming the kernel: how the ruleset is spelled, how it is written as one
/// transaction, and how what the kernel holds is read back.
///
/// The pure half (`render`, `desired`, `rule_hash`, `unverified`) never runs anything; the
/// rest runs programs only through the dataplane's [`Runner`].
pub trait Backend: fmt::Debug + Send + Sync {
    /// The name in the config file, on the command line, in saved plans and in logs.
    fn name(&self) -> &'static str;

    /// One line for `--help`: what it runs.
    fn about(&self) -> &'static str;

    /// The whole ruleset in this backend's load syntax, as `render` prints it.
    fn render(&self, ruleset: &Ruleset) -> String;

    /// How this backend spells rules and sets as it reads them back.
    fn spelling(&self) -> &'static crate::state::Spelling;

    /// The state this backend writes for a ruleset, in the spelling it reads back.
    fn desired(&self, ruleset: &Ruleset) -> State {
        crate::state::desired(ruleset, self.spelling())
    }

    /// [`Backend::desired`], rendering again only what changed since the last render with
    /// `memo` (the daemon's reloads).
    fn desired_with(
        &self,
        ruleset: &Ruleset,
        memo: &mut crate::state::RenderMemo,
    ) -> std::sync::Arc<State> {
        crate::state::desired_with(ruleset, self.spelling(), memo)
    }

    /// The identity hash this backend gives a rule of one of our chains.
    fn rule_hash(&self, table: Table, chain: &str, rule: &Rule, family: IpFamily) -> String;

    /// Reads what the kernel holds of ours, with rule counters, in both families.
    fn observe(&self, dataplane: &Dataplane<'_>) -> Result<State, DataplaneError>;

    /// Reads back what `plan` wrote: at least every table and set it names (see
    /// [`Plan::scope`]), with or without anything else.
    fn observe_written(
        &self,
        dataplane: &Dataplane<'_>,
        plan: &Plan,
    ) -> Result<State, DataplaneError>;

    /// Carries out a plan that leads to `desired`, as atomically as the backend can, and
    /// says how many nf_tables transactions it committed (each moves the generation by one;
    /// x_tables and ipset writes commit none).
    fn write(
        &self,
        dataplane: &Dataplane<'_>,
        plan: &Plan,
        desired: &State,
    ) -> Result<u32, DataplaneError>;

    /// [`Backend::write`], then [`Backend::observe_written`]: what a write committed and what
    /// the kernel holds of it after. A backend may overlap the two.
    fn write_and_read_back(
        &self,
        dataplane: &Dataplane<'_>,
        plan: &Plan,
        desired: &State,
    ) -> Result<(u32, State), DataplaneError> {
        let commits = self.write(dataplane, plan, desired)?;
        Ok((commits, self.observe_written(dataplane, plan)?))
    }

    /// What of `desired` the read-back `after` of a write of `written` still lacks: the part of
    /// the kernel the write may have changed, compared with what it should be.
    fn unverified(&self, desired: &State, after: &State, written: &Plan) -> Plan;

    /// What tells that the kernel still holds a state this backend read or wrote.
    fn sign(&self) -> Sign {
        Sign::NfGeneration
    }

    /// Whether its sets are ipsets, which every iptables backend shares: one kernel subsystem,
    /// whichever of x_tables or nf_tables holds the rules that refer to them.
    fn shares_ipsets(&self) -> bool {
        false
    }

    /// How much of what [`Backend::observe`] reads [`Backend::sign`] covers, so that a state
    /// read (or written and verified) at one sign is still the kernel's at the same sign.
    fn sign_covers(&self) -> Coverage {
        Coverage::Nothing
    }

    /// The kernel's sign now, as this backend reads it.
    fn read_sign(&self, kernel: &dyn Kernel) -> Option<Stamp> {
        match self.sign() {
            Sign::NfGeneration => kernel.nft_generation().map(Stamp::Generation),
            Sign::XtablesDigest => kernel.xtables_digest().map(Stamp::Digest),
        }
    }

    /// What keeps other writers out between two readings of the sign, for as long as the
    /// result is held: nothing with nf_tables, whose generation counts every commit; the
    /// xtables lock with iptables-legacy, whose digest only tells that something changed.
    fn hold_writers_off<'k>(&self, kernel: &'k dyn Kernel) -> Hold<'k> {
        match self.sign() {
            Sign::NfGeneration => Hold::Unneeded,
            Sign::XtablesDigest => match kernel.holding_xtables_lock() {
                Some(host) => Hold::Held(host),
                None => Hold::Unavailable,
            },
        }
    }

    /// The kernel's state now, from `cached` (read at the current sign) and a fresh read of
    /// what the sign does not cover.
    fn refresh(&self, dataplane: &Dataplane<'_>, cached: &State) -> Result<State, DataplaneError> {
        match self.sign_covers() {
            Coverage::Everything => Ok(cached.clone()),
            Coverage::Rules | Coverage::Nothing => self.observe(dataplane),
        }
    }
}

/// What tells a backend that nobody changed the kernel since it last read or wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sign {
    /// The nf_tables generation ([`nfgen`]): it moves with every committed transaction, so the
    /// commits of a write can be counted (nftables, iptables-nft).
    NfGeneration,
    /// The digest of the x_tables rules ([`xtables`]), under the xtables lock so that only
    /// our own write can change them between two readings (iptables-legacy).
    XtablesDigest,
}

/// A reading of the kernel's [`Sign`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Stamp {
    /// The nf_tables generation.
    Generation(u32),
    /// The digest of the x_tables rules, read under the xtables lock (saved in hex: JSON
    /// numbers do not hold 128 bits).
    Digest(#[serde(with = "hex_u128")] u128),
}

/// A `u128` as 32 hex digits.
mod hex_u128 {
    pub fn serialize<S: serde::Serializer>(value: &u128, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{value:032x}"))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<u128, D::Error> {
        let text: String = serde::Deserialize::deserialize(deserializer)?;
        u128::from_str_radix(&text, 16).map_err(serde::de::Error::custom)
    }
}

impl Stamp {
    /// Whether `self`, read after a write that committed `commits` nf_tables transactions,
    /// was reached from `from` by that write alone. A generation moves by one per commit; a
    /// digest read under the lock held since `from` can only have been changed by the write.
    pub fn follows(self, from: Stamp, commits: u32) -> bool {
        match (from, self) {
            (Stamp::Generation(from), Stamp::Generation(now)) => now == from.wrapping_add(commits),
            (Stamp::Digest(_), Stamp::Digest(_)) => true,
            _ => false,
        }
    }
}

/// What [`Backend::hold_writers_off`] holds.
pub enum Hold<'k> {
    /// Nothing needs holding: the sign counts every writer's commits.
    Unneeded,
    /// The xtables lock, and the host whose iptables commands run under it.
    Held(Box<dyn Host + 'k>),
    /// The lock could not be taken; no reading of the sign can be trusted.
    Unavailable,
}

/// What a backend's [`Sign`] covers of its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Nothing: the state is read whole every time.
    Nothing,
    /// The rules, not the sets: iptables' chains live in x_tables or nf_tables, its ipsets
    /// in neither, and ipsets have no generation.
    Rules,
    /// Everything: native nftables keeps its sets in its own tables.
    Everything,
}

/// Every backend, in the order `--help` lists them.
pub static BACKENDS: &[&dyn Backend] = &[&iptables::LEGACY, &iptables::NFT, &nftables::NFTABLES];

/// The backend of this name.
pub fn by_name(name: &str) -> Option<&'static dyn Backend> {
    BACKENDS
        .iter()
        .copied()
        .find(|backend| backend.name() == name)
}

impl fmt::Display for dyn Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq for dyn Backend {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for dyn Backend {}

/// A backend stored by name (saved plans, pending applies, status files).
pub mod serde_by_name {
    use serde::{Deserialize as _, Deserializer, Serializer, de::Error as _};

    use super::Backend;

    /// Writes the backend's name.
    pub fn serialize<S: Serializer>(
        backend: &&'static dyn Backend,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(backend.name())
    }

    /// Reads a backend's name.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<&'static dyn Backend, D::Error> {
        let name = String::deserialize(deserializer)?;
        super::by_name(&name).ok_or_else(|| D::Error::custom(format!("unknown backend `{name}`")))
    }
}

/// Which backend to use: one by name, or whichever the host already uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// Detect what the host already uses.
    Auto,
    /// This one.
    Named(&'static dyn Backend),
}

impl BackendChoice {
    /// What `--help` says of `auto`.
    pub const AUTO_ABOUT: &'static str = "Use what the host already uses";

    /// Parses the name used in the config file and on the command line.
    pub fn parse(text: &str) -> Option<BackendChoice> {
        match text {
            "auto" => Some(BackendChoice::Auto),
            name => by_name(name).map(BackendChoice::Named),
        }
    }

    /// The name used in the config file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Named(backend) => backend.name(),
        }
    }

    /// Every name a choice can have, `auto` first.
    pub fn names() -> impl Iterator<Item = &'static str> {
        std::iter::once("auto").chain(BACKENDS.iter().map(|backend| backend.name()))
    }

    /// The backend to use: the one chosen, or the one the host uses when `auto`.
    pub fn resolve(self, runner: &dyn Host) -> &'static dyn Backend {
        match self {
            BackendChoice::Named(backend) => backend,
            BackendChoice::Auto => {
                let (backend, reason) = detect::detect(runner);
                tracing::info!(%backend, reason, "backend chosen");
                backend
            }
        }
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A backend bound to a runner: reads and writes our part of the kernel.
#[derive(Clone)]
pub struct Dataplane<'r> {
    /// The backend: how rules are spelled, written and read back.
    pub backend: &'static dyn Backend,
    /// How programs are run.
    pub runner: &'r dyn Runner,
    /// What the kernel tells without a program.
    pub kernel: &'r dyn Kernel,
    /// Whether this dataplane's iptables commands run under the xtables lock we hold
    /// ([`Hold::Held`]).
    pub holds_xtables_lock: bool,
    /// The families that are programmed; the other family is still read, so leftovers of ours
    /// there are cleaned up.
    pub families: Vec<IpFamily>,
    /// Whether reading it reads the sets too: not for another iptables backend's rules while
    /// the backend in use keeps the ipsets they share (see `engine::others`).
    pub reads_sets: bool,
    /// Where the backend may remember what it created (iptables-nft: the base chains it made
    /// exist, so cleanup can remove them again).
    pub state_dir: PathBuf,
}

impl<'r> Dataplane<'r> {
    /// A backend bound to a host, programming `families`.
    pub fn new(
        backend: &'static dyn Backend,
        host: &'r dyn Host,
        families: Vec<IpFamily>,
        state_dir: &Path,
    ) -> Dataplane<'r> {
        Dataplane {
            backend,
            runner: host,
            kernel: host,
            holds_xtables_lock: false,
            reads_sets: true,
            families,
            state_dir: state_dir.to_path_buf(),
        }
    }

    /// The same backend and families, on the host a [`Hold::Held`] gave: under the lock.
    pub fn holding<'s>(&self, held: &'s dyn Host) -> Dataplane<'s> {
        Dataplane {
            holds_xtables_lock: true,
            reads_sets: self.reads_sets,
            ..Dataplane::new(self.backend, held, self.families.clone(), &self.state_dir)
        }
    }

    /// The kernel's sign now (see [`Backend::read_sign`]).
    pub fn sign(&self) -> Option<Stamp> {
        self.backend.read_sign(self.kernel)
    }

    /// Reads what the kernel holds of ours, with rule counters.
    pub fn observe(&self) -> Result<State, DataplaneError> {
        self.backend.observe(self)
    }

    /// Reads back what `plan` wrote (see [`Backend::observe_written`]).
    pub fn observe_written(&self, plan: &Plan) -> Result<State, DataplaneError> {
        self.backend.observe_written(self, plan)
    }

    /// Carries out a plan that leads to `desired`, saying how many nf_tables transactions it
    /// committed (see [`Backend::write`]).
    pub fn apply(&self, plan: &Plan, desired: &State) -> Result<u32, DataplaneError> {
        self.backend.write(self, plan, desired)
    }

    /// Carries out a plan and reads back what it wrote (see
    /// [`Backend::write_and_read_back`]), the rules it wrote taken as ours however the kernel
    /// spells them (see [`crate::plan::accept_own_spelling`]).
    pub fn apply_and_read_back(
        &self,
        plan: &Plan,
        desired: &State,
    ) -> Result<(u32, State), DataplaneError> {
        let (commits, after) = self.backend.write_and_read_back(self, plan, desired)?;
        Ok((
            commits,
            crate::plan::accept_own_spelling(after, desired, plan),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_are_the_ones_files_and_scripts_already_use() {
        // Saved plans, pending applies, status files and config files name backends: these
        // names are a format.
        let names: Vec<&str> = BACKENDS.iter().map(|backend| backend.name()).collect();
        assert_eq!(names, ["iptables-legacy", "iptables-nft", "nftables"]);
        assert_eq!(
            BackendChoice::names().collect::<Vec<_>>(),
            ["auto", "iptables-legacy", "iptables-nft", "nftables"]
        );
    }

    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct Stored {
        #[serde(with = "serde_by_name")]
        backend: &'static dyn Backend,
    }

    #[test]
    fn a_stored_backend_is_its_name_and_reads_back() {
        for backend in BACKENDS {
            let text = serde_json::to_string(&Stored { backend: *backend }).expect("serializes");
            assert_eq!(text, format!("{{\"backend\":\"{}\"}}", backend.name()));
            let read: Stored = serde_json::from_str(&text).expect("reads back");
            assert_eq!(read.backend, *backend);
        }
        let error = serde_json::from_str::<Stored>("{\"backend\":\"ebtables\"}")
            .expect_err("an unknown backend is refused");
        assert!(
            error.to_string().contains("unknown backend `ebtables`"),
            "{error}"
        );
    }

    #[test]
    fn a_choice_is_auto_or_a_listed_backend() {
        assert_eq!(BackendChoice::parse("auto"), Some(BackendChoice::Auto));
        assert_eq!(
            BackendChoice::parse("nftables"),
            Some(BackendChoice::Named(&nftables::NFTABLES))
        );
        assert_eq!(BackendChoice::parse("iptables"), None);
        for name in BackendChoice::names() {
            assert_eq!(
                BackendChoice::parse(name).map(BackendChoice::as_str),
                Some(name)
            );
        }
    }
}
