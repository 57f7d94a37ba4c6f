//! The engine: "make the kernel match the policy directory", written once, below both the
//! commands and the daemon.
//!
//! It owns the whole job: load → validate → compile → desired state → observe → plan → write
//! → verify → record (the applied index, the last change, the command line's view of the
//! kernel). It returns values (prepared policies, plans, outcomes, diagnostics) and never
//! prints: the commands show what it returns, the daemon logs and counts it.
//!
//! An [`Engine`] is a borrow of the settings and the runner for one piece of work (a command,
//! or one daemon event). What outlives it is kept in two places:
//!
//! * [`Memory`]: the daemon's memos (validated files, compiled policy chains, rendered chains)
//!   and its view of the kernel, held across events;
//! * the state directory: the applied index (with the policy files it was made from) and the
//!   command line's saved view of the kernel ([`crate::reconcile::view`]).
//!
//! The life cycle of the kernel view, in both forms, is in `ARCHITECTURE.md`.

mod applied;
mod memory;
mod others;
pub mod record;
mod saved;
pub mod window;

use std::path::PathBuf;
use std::sync::Mutex;

pub use applied::promotions;
pub use memory::{Memory, Reconciled, Rendered};
pub use others::{Leftover, Leftovers, Retired, SwitchOver, defer_set_deletions};
pub use saved::SavedPlan;

use crate::compile::{self, Compiled};
use crate::counters::{self, AppliedIndex, PolicyFile};
use crate::dataplane::{Backend, Dataplane, Host};
use crate::diagnostic::Diagnostic;
use crate::facts::HostFacts;
use crate::model::Model;
use crate::plan::{self, Plan};
use crate::policy_set::{self, PolicySet};
use crate::reconcile::{self, Read, view};
use crate::settings::Settings;
use crate::source::Sources;
use crate::state::State;
use crate::system::host::host_facts;
use crate::system::runtime::{StateDir, now_seconds};

/// One piece of work on the kernel for the settings and runner it borrows.
pub struct Engine<'a> {
    /// The checked settings.
    pub settings: &'a Settings,
    /// What runs the kernel's programs.
    pub runner: &'a dyn Host,
    /// The backend that reads and writes.
    pub backend: &'static dyn Backend,
    /// The runtime state directory.
    pub state_dir: StateDir,
    /// The policies last applied, validated, keyed by their files: a command asks for them up
    /// to three times (naming deleted chains' policies, what a change cuts off, the established
    /// connections it cuts), and validating 1,000 policies costs about as much as compiling.
    applied: Mutex<Option<(counters::AppliedFiles, Model)>>,
}

/// Why the policy directory could not be compiled.
#[derive(Debug)]
pub enum Rejected {
    /// The directory does not exist or is not a directory.
    MissingDirectory(PathBuf),
    /// Some file is invalid: the set with its diagnostics.
    Invalid(Box<PolicySet>),
}

/// A policy directory, compiled for a host, or why it could not be.
#[derive(Debug)]
pub enum Compiling {
    /// The directory does not exist or is not a directory.
    MissingDirectory,
    /// Some file is invalid: the set with its diagnostics.
    Invalid(PolicySet),
    /// Every file is valid: the set and what it compiled to.
    Compiled(PolicySet, Compiled),
}

/// Loads, validates and compiles the policy directory of `settings` for a host whose facts
/// were read.
pub fn compile(settings: &Settings, facts: &HostFacts) -> Compiling {
    compile_through(settings, facts, None)
}

/// [`compile`], reading the policies through `store` when given.
fn compile_through(
    settings: &Settings,
    facts: &HostFacts,
    store: Option<&dyn policy_set::Store>,
) -> Compiling {
    if !settings.config.policies_dir.is_dir() {
        return Compiling::MissingDirectory;
    }
    let paths = std::slice::from_ref(&settings.config.policies_dir);
    let set = match store {
        Some(store) => policy_set::load_through(paths, settings.load, store),
        None => policy_set::load_with(paths, settings.load),
    };
    if !set.is_valid() {
        return Compiling::Invalid(set);
    }
    let compiled = compile::compile(&set.model, &settings.config, facts);
    Compiling::Compiled(set, compiled)
}

/// The policies compiled for this host and the backend that will write them.
pub struct Prepared {
    /// The compiled policies.
    pub compiled: Compiled,
    /// The policy files' fingerprint.
    pub policies_fingerprint: String,
    pub backend: &'static dyn Backend,
    /// The state the backend writes for them.
    pub desired: State,
    /// The validated policies.
    pub model: Model,
    /// The policy files, as read.
    pub policy_files: Vec<PolicyFile>,
    /// The files read, for showing diagnostics.
    pub sources: Sources,
    /// Warnings of validation and compilation, in that order.
    pub warnings: Vec<Diagnostic>,
    /// The host they were compiled for.
    pub facts: HostFacts,
    /// Every resource that carries an expiry, active or expired, at the instant the files
    /// were read.
    pub expiring: Vec<crate::grants::Expiring>,
}

impl Prepared {
    /// Which kernel rules carry which policy rule's verdict.
    pub fn index(&self) -> AppliedIndex {
        let mut index = counters::origin_index(&self.compiled.ruleset, self.backend, now_seconds())
            .of_desired(&self.desired);
        index.policy_files = self.policy_files.clone();
        index
    }
}

/// The policies prepared and the kernel read, side by side, and the plan between them.
pub struct Planned {
    /// The policies to apply.
    pub prepared: Prepared,
    /// What the kernel holds of ours.
    pub observed: State,
    /// How it was read, and what of it may be kept as the command line's view.
    pub observation: view::Observation,
    /// What writing `prepared.desired` changes, its chains named by policy.
    pub plan: Plan,
}

impl<'a> Engine<'a> {
    /// The engine for `settings`, with the backend they choose resolved on `runner`.
    pub fn new(settings: &'a Settings, runner: &'a dyn Host) -> Engine<'a> {
        Engine::with_backend(settings, runner, settings.backend.resolve(runner))
    }

    /// The backend the engine reads and writes with.
    pub fn backend(&self) -> &'static dyn Backend {
        self.backend
    }

    /// Everything the kernel holds of ours, both families, with counters.
    pub fn observe(&self) -> Result<State, crate::dataplane::DataplaneError> {
        self.dataplane(crate::model::IpFamily::BOTH.to_vec())
            .observe()
    }

    /// The engine for `settings` with `backend` (a saved plan's, a running daemon's).
    pub fn with_backend(
        settings: &'a Settings,
        runner: &'a dyn Host,
        backend: &'static dyn Backend,
    ) -> Engine<'a> {
        Engine {
            settings,
            runner,
            backend,
            state_dir: StateDir::new(&settings.state_dir),
            applied: Mutex::new(None),
        }
    }

    /// The dataplane of this engine's backend for `families`.
    pub fn dataplane(&self, families: Vec<crate::model::IpFamily>) -> Dataplane<'a> {
        Dataplane::new(
            self.backend,
            self.runner,
            families,
            &self.settings.state_dir,
        )
    }

    /// The command line's cache of validated policy sets, in the state directory.
    pub fn cache(&self) -> crate::disk_cache::DiskCache {
        crate::disk_cache::DiskCache::new(self.state_dir.path())
    }

    /// The host's facts, as the compiler needs them.
    pub fn facts(&self) -> HostFacts {
        host_facts(&self.settings.config)
    }

    /// Loads, validates and compiles the policy directory for `facts`.
    pub fn prepare_for(&self, facts: &HostFacts) -> Result<Prepared, Rejected> {
        let (set, compiled) = match compile_through(self.settings, facts, Some(&self.cache())) {
            Compiling::MissingDirectory => {
                return Err(Rejected::MissingDirectory(
                    self.settings.config.policies_dir.clone(),
                ));
            }
            Compiling::Invalid(set) => return Err(Rejected::Invalid(Box::new(set))),
            Compiling::Compiled(set, compiled) => (set, compiled),
        };
        let desired = self.backend.desired(&compiled.ruleset);
        let expiring = crate::grants::expiring(&set);
        let mut warnings = set.diagnostics.clone();
        warnings.extend(compiled.warnings.iter().cloned());
        Ok(Prepared {
            policies_fingerprint: set.fingerprint,
            backend: self.backend,
            desired,
            policy_files: counters::policy_files(&set.sources),
            sources: set.sources,
            model: set.model,
            warnings,
            facts: facts.clone(),
            expiring,
            compiled,
        })
    }

    /// [`Engine::prepare_for`] this host.
    pub fn prepare(&self) -> Result<Prepared, Rejected> {
        self.prepare_for(&self.facts())
    }

    /// Compiles the policies while another thread reads what the kernel holds: neither needs
    /// the other, and together they are most of the time `plan` and `apply` take. The kernel
    /// is read from the view the last command kept when the kernel's sign says it is still the
    /// kernel's ([`view`]), else whole (keeping a view of it when that is certain). Follow with
    /// [`Engine::plan_against`].
    pub fn prepare_observing(&self) -> Result<(Prepared, view::Observation), Rejected> {
        let facts = self.facts();
        let dataplane = self.dataplane(facts.families());
        let (prepared, observation) = std::thread::scope(|scope| {
            let observing = scope.spawn(|| {
                let mut observed = view::observe(&dataplane, self.state_dir.view());
                match observed.read {
                    Read::Cached => tracing::debug!(
                        "the kernel's sign is the one of the view the last command kept: planning against that view"
                    ),
                    Read::Whole => tracing::debug!("read every rule of ours in the kernel"),
                }
                if let Some(saved) = observed.save.take() {
                    self.state_dir.set_view(&saved);
                }
                observed
            });
            let validating = scope.spawn(|| self.validate_applied_ahead());
            let prepared = self.prepare_for(&facts);
            let observed = crate::dataplane::runner::joined(observing);
            crate::dataplane::runner::joined(validating);
            (prepared, observed)
        });
        Ok((prepared?, observation))
    }

    /// The plan from what `observation` read to `prepared`, its chains named by policy; an
    /// error when the kernel could not be read.
    pub fn plan_against(
        &self,
        prepared: Prepared,
        mut observation: view::Observation,
    ) -> anyhow::Result<Planned> {
        let observed = std::mem::replace(&mut observation.state, Ok(State::default()))?;
        let mut changes = plan::plan(&prepared.desired, &observed);
        self.name_policies(&mut changes, Some(&prepared.model));
        Ok(Planned {
            prepared,
            observed,
            observation,
            plan: changes,
        })
    }

    /// Writes `changes`, the plan from `before` to `desired` that was shown, checks the
    /// result, and records it: the applied index, the last change (for `status`), and the
    /// command line's view of the kernel when `observation` allows keeping one. On failure the
    /// previous rules are put back and nothing is recorded.
    pub fn write(
        &self,
        dataplane: &Dataplane<'_>,
        desired: &State,
        before: State,
        changes: Plan,
        observation: Option<&view::Observation>,
        index: &AppliedIndex,
    ) -> Result<reconcile::Outcome, reconcile::ReconcileError> {
        let outcome = reconcile::write_planned(dataplane, desired, before, changes)?;
        // What was written and verified is the kernel's now, if nobody else wrote meanwhile.
        let commits = outcome.commits;
        if let Some(saved) = observation
            .and_then(|observation| view::after_write(dataplane, observation, commits, desired))
        {
            self.state_dir.set_view(&saved);
        }
        record::applied(&self.state_dir, index);
        record::change(&self.state_dir, "apply", &outcome.plan);
        Ok(outcome)
    }

    /// Cuts the established connections that `after` denies and `before` let through
    /// (`revokeEstablished`, or `revoke`), or with `delete` false only counts them.
    pub fn revoke(
        &self,
        before: Option<&Model>,
        after: &Model,
        facts: &HostFacts,
        delete: bool,
    ) -> Result<crate::revocation::Report, String> {
        crate::revocation::revoke(
            self.runner,
            before,
            after,
            &self.settings.config,
            facts,
            delete,
        )
    }
}
