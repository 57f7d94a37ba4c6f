//! Rules of ours in the backends the engine does not use: a host switched from one backend to
//! another (`--backend`, or `backend:` in the config) still holds the first one's rules, and
//! they still filter. `cleanup` removes them with the rest; `apply` removes them once its own
//! write stands; `plan` shows them.

use crate::dataplane::{BACKENDS, Backend, Dataplane};
use crate::model::IpFamily;
use crate::plan::{self, Plan, SetAction};
use crate::state::State;

use super::Engine;

/// One backend's part of ours, read, and the plan that removes it.
pub struct Leftover<'a> {
    /// The backend, bound to the engine's runner.
    pub dataplane: Dataplane<'a>,
    /// What it holds of ours.
    pub observed: State,
    /// What removes it (without the ipsets where another backend still refers to them).
    pub plan: Plan,
}

impl<'a> Engine<'a> {
    /// Every backend but the engine's, read, with the plan that empties each; those holding
    /// nothing are left out. A backend that cannot be read (its programs are missing, its
    /// kernel part is absent) holds nothing of ours.
    pub fn leftovers(&self) -> Vec<Leftover<'a>> {
        let keeps_ipsets = self.backend.shares_ipsets();
        let steps = self.read_backends(|backend| !same(backend, self.backend), keeps_ipsets);
        empty_plans(steps, keeps_ipsets)
    }

    /// Every backend, the engine's last, read, with the plan that empties each (`cleanup`);
    /// those holding nothing are left out. Only the engine's own backend must be readable.
    pub fn everything_of_ours(
        &self,
    ) -> Result<Vec<Leftover<'a>>, crate::dataplane::DataplaneError> {
        let mut steps = self.read_backends(|backend| !same(backend, self.backend), false);
        let dataplane = self.dataplane(IpFamily::BOTH.to_vec());
        let observed = dataplane.observe()?;
        steps.push((dataplane, observed));
        Ok(empty_plans(steps, false))
    }

    /// The backends `wanted` says, each read at the same time; with `keeps_ipsets`, the
    /// iptables ones without the ipsets (the backend in use keeps them).
    fn read_backends(
        &self,
        wanted: impl Fn(&'static dyn Backend) -> bool,
        keeps_ipsets: bool,
    ) -> Vec<(Dataplane<'a>, State)> {
        let wanted: Vec<_> = BACKENDS
            .iter()
            .copied()
            .filter(|backend| wanted(*backend))
            .collect();
        std::thread::scope(|scope| {
            let reads: Vec<_> = wanted
                .into_iter()
                .map(|backend| scope.spawn(move || self.read_backend(backend, keeps_ipsets)))
                .collect();
            reads
                .into_iter()
                .filter_map(|read| read.join().ok().flatten())
                .collect()
        })
    }

    fn read_backend(
        &self,
        backend: &'static dyn Backend,
        keeps_ipsets: bool,
    ) -> Option<(Dataplane<'a>, State)> {
        let mut dataplane = Dataplane::new(
            backend,
            self.runner,
            IpFamily::BOTH.to_vec(),
            &self.settings.state_dir,
        );
        dataplane.reads_sets = !(keeps_ipsets && backend.shares_ipsets());
        match dataplane.observe() {
            Ok(observed) => Some((dataplane, observed)),
            Err(error) => {
                tracing::debug!(%backend, %error, "cannot read this backend; nothing of ours is there");
                None
            }
        }
    }
}

fn same(a: &'static dyn Backend, b: &'static dyn Backend) -> bool {
    std::ptr::addr_eq(a, b)
}

/// The plan that empties each backend, in order, without those that hold nothing. The
/// iptables backends share the ipsets (one kernel subsystem), and a set cannot be destroyed
/// while a rule of either refers to it: only the last of them removes the sets, after every
/// rule of ours is gone, and none does when `ipsets_kept` (the backend in use shares them
/// and keeps what it needs). Pure.
fn empty_plans<'a>(steps: Vec<(Dataplane<'a>, State)>, ipsets_kept: bool) -> Vec<Leftover<'a>> {
    let last_with_ipsets = steps
        .iter()
        .rposition(|(dataplane, _)| dataplane.backend.shares_ipsets())
        .filter(|_| !ipsets_kept);
    steps
        .into_iter()
        .enumerate()
        .map(|(at, (dataplane, observed))| {
            let mut plan = plan::plan(&State::default(), &observed);
            if dataplane.backend.shares_ipsets() && Some(at) != last_with_ipsets {
                plan.sets.clear();
            }
            Leftover {
                dataplane,
                observed,
                plan,
            }
        })
        .filter(|leftover| !leftover.plan.is_empty())
        .collect()
}

/// Takes the set deletions out of `changes`: while another backend's rules of ours refer to
/// a set, it cannot be destroyed; they are made again once those rules are gone.
pub fn defer_set_deletions(changes: &mut Plan) -> bool {
    let before = changes.sets.len();
    changes.sets.retain(|set| set.action != SetAction::Delete);
    changes.sets.len() != before
}

/// One other backend's rules of ours, removed or not.
pub struct Retired {
    /// The backend that held them.
    pub backend: &'static dyn Backend,
    /// Why they were not removed (they still filter).
    pub error: Option<String>,
}

impl Engine<'_> {
    /// Removes the rules of ours that `leftovers` hold, now that the policies stand in this
    /// engine's backend (`dataplane`, written to hold `desired`), then, with `deferred`, the
    /// sets no longer wanted that they referred to. Each failure is reported and the rest go
    /// on; the policies stay applied. Also says whether the deferred sets went.
    pub fn retire(
        &self,
        dataplane: &Dataplane<'_>,
        desired: &State,
        leftovers: Vec<Leftover<'_>>,
        deferred: bool,
    ) -> (Vec<Retired>, Option<String>) {
        let retired = leftovers
            .into_iter()
            .map(|leftover| Retired {
                backend: leftover.dataplane.backend,
                error: crate::reconcile::write_planned(
                    &leftover.dataplane,
                    &State::default(),
                    leftover.observed,
                    leftover.plan,
                )
                .err()
                .map(|error| error.to_string()),
            })
            .collect();
        let sets = deferred
            .then(|| crate::reconcile::reconcile(dataplane, desired).err())
            .flatten()
            .map(|error| error.to_string());
        (retired, sets)
    }

    /// When other backends hold rules of ours (the daemon starts after a switch of backend),
    /// writes the policies into this engine's backend, the set deletions deferred while the
    /// old rules refer to the sets, then removes the other backends' rules: the host is never
    /// without the policies in between. `None` when no other backend holds anything of ours,
    /// or the policies cannot be compiled or ask for nothing (the caller's first reconcile
    /// says why, and the old rules keep filtering).
    pub fn switch_over(&self) -> Option<Result<Vec<Retired>, String>> {
        let leftovers = self.leftovers();
        if leftovers.is_empty() {
            return None;
        }
        let prepared = self.prepare().ok()?;
        if prepared.desired.is_empty() {
            return None;
        }
        let dataplane = self.dataplane(prepared.compiled.ruleset.ip_families());
        let observed = match dataplane.observe() {
            Ok(observed) => observed,
            Err(error) => return Some(Err(error.to_string())),
        };
        let mut changes = plan::plan(&prepared.desired, &observed);
        let deferred = self.backend.shares_ipsets()
            && leftovers
                .iter()
                .any(|leftover| leftover.dataplane.backend.shares_ipsets())
            && defer_set_deletions(&mut changes);
        if let Err(error) =
            crate::reconcile::write_planned(&dataplane, &prepared.desired, observed, changes)
        {
            return Some(Err(error.to_string()));
        }
        let (retired, sets) = self.retire(&dataplane, &prepared.desired, leftovers, deferred);
        if let Some(error) = sets {
            tracing::warn!(%error, "sets of nodeport-guard no longer used were not removed");
        }
        Some(Ok(retired))
    }
}
