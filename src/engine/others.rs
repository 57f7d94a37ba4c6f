//! Rules of ours in the backends the engine does not use: a host switched from one backend to
//! another (`--backend`, or `backend:` in the config) still holds the first one's rules, and
//! they still filter. `cleanup` removes them with the rest; `apply` and the daemon remove them
//! once their own write stands; `plan` and `status` show them.

use crate::dataplane::{BACKENDS, Backend, Dataplane, DataplaneError, Sign};
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
    /// What removes it (without the ipsets while another backend still refers to them).
    pub plan: Plan,
}

impl Leftover<'_> {
    /// What it holds, in words: rules, or only the ipsets the iptables backends share.
    pub fn what(&self) -> &'static str {
        if self.plan.tables.is_empty() {
            "sets"
        } else {
            "rules"
        }
    }
}

/// What the other backends hold of ours.
#[derive(Default)]
pub struct Leftovers<'a> {
    /// Each backend holding anything of ours, with what removes it.
    pub found: Vec<Leftover<'a>>,
    /// The backends that could not be read, and why: rules of ours there would go unseen.
    /// (A backend whose programs are not installed holds nothing and is not here.)
    pub unread: Vec<(&'static dyn Backend, String)>,
}

impl Leftovers<'_> {
    /// Whether another backend holds something of ours.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// Says at warning level which backends could not be read.
    pub fn warn_unread(&self) {
        for (backend, error) in &self.unread {
            tracing::warn!(%backend, %error, "cannot read this backend: rules of nodeport-guard there, if any, go unseen");
        }
    }
}

impl<'a> Engine<'a> {
    /// Every backend but the engine's, read at the same time, with the plan that empties
    /// each; those holding nothing are left out.
    pub fn leftovers(&self) -> Leftovers<'a> {
        let order: Vec<_> = BACKENDS
            .iter()
            .copied()
            .filter(|backend| !same(*backend, self.backend))
            .collect();
        // The backend in use keeps the ipsets when it shares them: the others' are not read.
        let sets_by = if self.backend.shares_ipsets() {
            None
        } else {
            last_sharing(&order)
        };
        let (steps, unread) = self.read_backends(&order, sets_by);
        Leftovers {
            found: empty_plans(steps, sets_by),
            unread,
        }
    }

    /// Every backend, the engine's last, read, with the plan that empties each (`cleanup`);
    /// those holding nothing are left out. The engine's own backend must be readable.
    pub fn everything_of_ours(&self) -> Result<Leftovers<'a>, DataplaneError> {
        let mut order: Vec<_> = BACKENDS
            .iter()
            .copied()
            .filter(|backend| !same(*backend, self.backend))
            .collect();
        order.push(self.backend);
        let sets_by = last_sharing(&order);
        let (mut steps, unread) = self.read_backends(&order[..order.len() - 1], sets_by);
        let mut dataplane = self.dataplane(IpFamily::BOTH.to_vec());
        dataplane.reads_sets = !self.backend.shares_ipsets() || sets_by == Some(order.len() - 1);
        let observed = dataplane.observe()?;
        steps.push((order.len() - 1, dataplane, observed));
        Ok(Leftovers {
            found: empty_plans(steps, sets_by),
            unread,
        })
    }

    /// The families to read another backend in: IPv6 only where the kernel has it (where it
    /// does not, `ip6tables-save` fails, and nothing of ours can be there).
    fn families(&self) -> Vec<IpFamily> {
        if crate::system::host::kernel_has_ipv6() {
            IpFamily::BOTH.to_vec()
        } else {
            vec![IpFamily::V4]
        }
    }

    /// `order`'s backends, each read on a thread of its own, with their places in `order`;
    /// of the iptables ones only the one at `sets_by` reads the ipsets they share.
    #[allow(clippy::type_complexity)]
    fn read_backends(
        &self,
        order: &[&'static dyn Backend],
        sets_by: Option<usize>,
    ) -> (
        Vec<(usize, Dataplane<'a>, State)>,
        Vec<(&'static dyn Backend, String)>,
    ) {
        let families = self.families();
        let reads: Vec<_> = std::thread::scope(|scope| {
            let reads: Vec<_> = order
                .iter()
                .enumerate()
                .map(|(at, &backend)| {
                    let families = families.clone();
                    let reads_sets = !backend.shares_ipsets() || sets_by == Some(at);
                    let read = scope.spawn(move || {
                        // iptables-legacy without a single table holds nothing: no program
                        // needs to run to say so.
                        if backend.sign() == Sign::XtablesDigest
                            && self.runner.has_xtables() == Some(false)
                        {
                            return Ok(None);
                        }
                        let mut dataplane = Dataplane::new(
                            backend,
                            self.runner,
                            families,
                            &self.settings.state_dir,
                        );
                        dataplane.reads_sets = reads_sets;
                        match dataplane.observe() {
                            Ok(observed) => Ok(Some((dataplane, observed))),
                            // Its programs are not installed: nothing of ours is there.
                            Err(DataplaneError::Spawn { source, .. })
                                if source.kind() == std::io::ErrorKind::NotFound =>
                            {
                                Ok(None)
                            }
                            Err(error) => Err(error.to_string()),
                        }
                    });
                    (at, backend, read)
                })
                .collect();
            reads
                .into_iter()
                .map(|(at, backend, read)| {
                    let result = read
                        .join()
                        .unwrap_or_else(|_| Err("the reader panicked".to_owned()));
                    (at, backend, result)
                })
                .collect()
        });
        let mut steps = Vec::new();
        let mut unread = Vec::new();
        for (at, backend, result) in reads {
            match result {
                Ok(Some((dataplane, observed))) => steps.push((at, dataplane, observed)),
                Ok(None) => {}
                Err(error) => unread.push((backend, error)),
            }
        }
        (steps, unread)
    }
}

fn same(a: &'static dyn Backend, b: &'static dyn Backend) -> bool {
    std::ptr::addr_eq(a, b)
}

/// The place of the last backend in `order` that shares the ipsets.
fn last_sharing(order: &[&'static dyn Backend]) -> Option<usize> {
    order.iter().rposition(|backend| backend.shares_ipsets())
}

/// The plan that empties each backend read, without those that hold nothing. The iptables
/// backends share the ipsets (one kernel subsystem), and a set cannot be destroyed while a
/// rule of either refers to it: only the backend at `sets_by`, the last of them, removes the
/// sets, after every rule of ours is gone; with `None` the backend in use keeps them. Pure.
fn empty_plans<'a>(
    steps: Vec<(usize, Dataplane<'a>, State)>,
    sets_by: Option<usize>,
) -> Vec<Leftover<'a>> {
    steps
        .into_iter()
        .map(|(at, dataplane, observed)| {
            let mut plan = plan::plan(&State::default(), &observed);
            if dataplane.backend.shares_ipsets() && Some(at) != sets_by {
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

/// Takes the set deletions out of `changes` and returns them: while another backend's rules
/// of ours refer to a set, it cannot be destroyed; they are made once those rules are gone.
pub fn defer_set_deletions(changes: &mut Plan) -> Vec<String> {
    let (deleted, kept) = std::mem::take(&mut changes.sets)
        .into_iter()
        .partition(|set| set.action == SetAction::Delete);
    changes.sets = kept;
    deleted.into_iter().map(|set| set.name).collect()
}

/// One other backend's rules of ours, removed or not.
pub struct Retired {
    /// The backend that held them.
    pub backend: &'static dyn Backend,
    /// Why they were not removed (they still filter).
    pub error: Option<String>,
}

/// What a start after a switch of backend came to (see [`Engine::switch_over`]).
pub enum SwitchOver {
    /// No other backend holds anything of ours (or none could be read: said at warning level).
    Nothing,
    /// Other backends hold rules of ours, but the policies cannot be put into this one first
    /// (invalid, missing, or asking for nothing): the old rules stay, and filter.
    Waiting(String),
    /// The policies were written here; then each other backend's rules went, or not.
    Done(Vec<Retired>),
    /// Writing the policies here failed (rolled back): the old rules stay.
    Failed(String),
}

impl Engine<'_> {
    /// Removes the rules of ours that `leftovers` hold, now that the policies stand in this
    /// engine's backend (`dataplane`, written to hold `desired`), then, when set deletions were
    /// deferred for them, those sets. Each failure is reported and the rest go on; the
    /// policies stay applied. Also says whether the deferred sets went.
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
    /// without the policies in between.
    pub fn switch_over(&self) -> SwitchOver {
        let leftovers = self.leftovers();
        leftovers.warn_unread();
        if leftovers.is_empty() {
            return SwitchOver::Nothing;
        }
        let prepared = match self.prepare() {
            Ok(prepared) if !prepared.desired.is_empty() => prepared,
            Ok(_) => {
                return SwitchOver::Waiting("the policies ask for nothing on this host".into());
            }
            Err(super::Rejected::MissingDirectory(dir)) => {
                return SwitchOver::Waiting(format!(
                    "the policy directory `{}` does not exist",
                    dir.display()
                ));
            }
            Err(super::Rejected::Invalid(_)) => {
                return SwitchOver::Waiting("the policy files are invalid".into());
            }
        };
        let dataplane = self.dataplane(prepared.compiled.ruleset.ip_families());
        let observed = match dataplane.observe() {
            Ok(observed) => observed,
            Err(error) => return SwitchOver::Failed(error.to_string()),
        };
        let mut changes = plan::plan(&prepared.desired, &observed);
        let deferred = self.backend.shares_ipsets()
            && leftovers
                .found
                .iter()
                .any(|leftover| leftover.dataplane.backend.shares_ipsets())
            && !defer_set_deletions(&mut changes).is_empty();
        let applied = (!changes.is_empty()).then(|| changes.summary().counts());
        if let Some(counts) = &applied {
            if let Err(error) = crate::reconcile::write_planned(
                &dataplane,
                &prepared.desired,
                observed,
                changes.clone(),
            ) {
                return SwitchOver::Failed(error.to_string());
            }
            super::record::change(&self.state_dir, "daemon", &changes);
            super::record::applied(&self.state_dir, &prepared.index());
            tracing::info!(
                backend = %self.backend,
                changes = %counts,
                "applied the policies to this backend before removing the rules of the backend used before"
            );
        }
        let (retired, sets) = self.retire(&dataplane, &prepared.desired, leftovers.found, deferred);
        if let Some(error) = sets {
            tracing::warn!(%error, "sets of nodeport-guard no longer used were not removed");
        }
        SwitchOver::Done(retired)
    }
}
