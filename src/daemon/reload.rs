//! What the daemon does with one event: the engine computes a reload's outcome, and the
//! outcome is then reported in one place (the log, the metrics, the status file, the drop
//! resolver).

use std::sync::Arc;
use std::time::Instant;

use super::kept::Kept;
use super::{Event, drops, expiry, metrics};
use crate::compile;
use crate::dataplane::{Backend, Dataplane, Host};
use crate::engine::{Engine, Memory, Reconciled, Rendered, record};
use crate::facts::HostFacts;
use crate::model::{IpFamily, Model};
use crate::policy_set::PolicySet;
use crate::reconcile;
use crate::settings::Settings;
use crate::state::State;
use crate::system::runtime::{StateDir, now_seconds};

/// What the last successful apply was made from.
struct LastGood {
    fingerprint: String,
    /// The set's [`PolicySet::files_fingerprint`].
    files_fingerprint: String,
    facts: HostFacts,
    model: Model,
    /// The rendered state, packed while the daemon rests.
    desired: Kept,
    /// The families `desired` was rendered for.
    families: Vec<IpFamily>,
}

/// The daemon's state between events.
pub(super) struct Daemon {
    pub(super) settings: Settings,
    pub(super) backend: &'static dyn Backend,
    runner: Arc<dyn Host>,
    state_dir: StateDir,
    pub(super) metrics: metrics::Shared,
    last_good: Option<LastGood>,
    /// The engine's memos and view of the kernel, kept across events.
    memory: Memory,
    pub(super) last_errors: Vec<String>,
    pub(super) summary: String,
    /// Whether the last reload was refused because the set was empty (so the refusal is said
    /// once, not at every resync).
    pub(super) refusing_empty: bool,
    /// Whether the operator was told that the state directory cannot be written (once).
    state_dir_warned: bool,
    /// The NFLOG listener, when the daemon counts drops.
    pub(super) drop_log: Option<Arc<drops::DropLog>>,
    /// The clock the files are read at and the timer for the next expiry.
    pub(super) expiry: expiry::Expiries,
    /// The files read, compiled and rendered while the debounce runs, for the reload it ends
    /// in; the main loop drops it at every file event.
    pub(super) ahead: Option<Ahead>,
    /// Whether other backends may still hold rules of ours (see [`Daemon::switch_over`]).
    switch_pending: bool,
    /// A policy file is being written (the watcher says so before each event): reloads keep
    /// the last good rules until it is closed.
    pub(super) files_settling: bool,
    /// The watcher's open writes, looked at again once the files are read.
    pub(super) writes: super::watch::Writes,
    /// Whether the operator was told that they do (once).
    switch_warned: bool,
}

/// A reload's work done ahead ([`Daemon::prepare`]): the files read and, when valid, compiled
/// and rendered for the host facts read with them.
pub(super) struct Ahead {
    set: PolicySet,
    facts: HostFacts,
    rendered: Option<(Rendered, Option<reconcile::Prefetched>)>,
    started: Instant,
    read_at: Instant,
}

/// What one reload came to.
enum Outcome {
    /// The policy files are invalid: the last good rules stay (and, on a full check, are put
    /// back).
    Invalid {
        errors: Vec<String>,
        repaired: Option<Repair>,
    },
    /// The set became empty and `allowEmpty` is false: the rules stay.
    RefusedEmpty {
        missing: bool,
        /// It holds staged policies, which enforce nothing.
        staged_only: bool,
        repaired: Option<Repair>,
    },
    /// A policy file is still being written: the files are not read, and the last good rules
    /// stay (and, on a full check, are put back).
    Settling { repaired: Option<Repair> },
    /// The files and addresses are those applied; nothing to do.
    Unchanged,
    /// The policies were reconciled with the kernel.
    Applied(Box<Applied>),
    /// Writing failed; the previous rules were put back (or that failed too).
    Failed(reconcile::ReconcileError),
}

/// A reconcile that wrote (or found nothing to change).
struct Applied {
    set: PolicySet,
    facts: HostFacts,
    /// `None` when nothing was compiled: the files and the host were those last applied.
    compiled: Option<compile::Compiled>,
    desired: Arc<State>,
    outcome: reconcile::Outcome,
    /// Whether the change undid another program's, and what noticed it.
    drift: Option<super::drift::Trigger>,
    /// The phases' durations, for the log.
    phases: Phases,
}

/// When each phase of a reload ended.
struct Phases {
    started: Instant,
    read_at: Instant,
    compiled_at: Instant,
    desired_at: Instant,
    written_at: Instant,
    read: reconcile::Read,
    /// When the reload itself began: later than `desired_at` when the files were compiled
    /// and rendered ahead, while the debounce ran.
    resumed_at: Instant,
}

/// The last good rules put back while the files are unusable.
type Repair = Result<reconcile::Outcome, reconcile::ReconcileError>;

impl Daemon {
    pub(super) fn new(
        settings: Settings,
        backend: &'static dyn Backend,
        runner: Arc<dyn Host>,
        state_dir: StateDir,
        metrics: metrics::Shared,
    ) -> Daemon {
        Daemon {
            settings,
            backend,
            runner,
            state_dir,
            metrics,
            last_good: None,
            memory: Memory::default(),
            last_errors: Vec::new(),
            summary: "starting".to_owned(),
            refusing_empty: false,
            state_dir_warned: false,
            drop_log: None,
            expiry: expiry::Expiries::new(Arc::new(expiry::SystemClock)),
            ahead: None,
            switch_pending: false,
            files_settling: false,
            writes: super::watch::Writes::default(),
            switch_warned: false,
        }
    }

    pub(super) fn dataplane(&self, families: Vec<IpFamily>) -> Dataplane<'_> {
        self.engine().dataplane(families)
    }

    fn engine(&self) -> Engine<'_> {
        Engine::with_backend(&self.settings, self.runner.as_ref(), self.backend)
    }

    /// At start, and before each event while it is not done: when other backends hold rules
    /// of ours (a switch of backend), puts the policies into this one and removes theirs (see
    /// [`Engine::switch_over`]), and logs it. While it waits (the policies are invalid, say)
    /// the old rules keep filtering, and a reload's set deletions could fail on sets they
    /// refer to: the next event tries again, and it is said at warning level once.
    pub(super) fn switch_over(&mut self) {
        use crate::engine::{Retired, SwitchOver};
        let (done, warning) = match self.engine().switch_over() {
            SwitchOver::Nothing => (true, None),
            SwitchOver::Done(retired) => {
                let mut done = true;
                for Retired { backend, error } in retired {
                    match error {
                        None => {
                            tracing::info!(%backend, "removed the rules of nodeport-guard from the backend used before")
                        }
                        Some(error) => {
                            done = false;
                            tracing::warn!(%backend, %error, "the rules of nodeport-guard in the backend used before were not removed, and still filter; trying again at the next event");
                        }
                    }
                }
                (done, None)
            }
            SwitchOver::Waiting(why) => (false, Some(why)),
            SwitchOver::Failed(error) => (
                false,
                Some(format!("writing the policies here failed: {error}")),
            ),
        };
        if let Some(why) = warning {
            if self.switch_warned {
                tracing::debug!(why, "other backends still hold rules of nodeport-guard");
            } else {
                tracing::warn!(
                    why,
                    "other backends hold rules of nodeport-guard from before a switch of backend, and they still filter; they are removed once the policies can be put into this backend first"
                );
                self.switch_warned = true;
            }
        }
        self.switch_pending = !done;
    }

    /// Handles one event: computes what it comes to, then reports that. Returns whether it
    /// read the kernel and reconciled it with the rules it keeps: the policies, or the last
    /// good rules while the files are unusable; also when the write failed (the rules before
    /// it were put back: trying again at once would fail the same way).
    pub(super) fn handle(&mut self, event: Event) -> bool {
        if let Ok(mut metrics) = self.metrics.lock() {
            metrics.heartbeat = Some(Instant::now());
        }
        self.wake();
        if self.switch_pending {
            self.switch_over();
        }
        let outcome = self.reload(event);
        let looked = match &outcome {
            Outcome::Applied(_) | Outcome::Failed(_) => true,
            Outcome::Invalid { repaired, .. }
            | Outcome::RefusedEmpty { repaired, .. }
            | Outcome::Settling { repaired } => repaired.is_some(),
            Outcome::Unchanged => false,
        };
        self.report(event, outcome);
        looked
    }

    /// Does ahead what the reload at the end of the debounce will do before it reads the
    /// kernel: reads the files and, when they are valid, compiles and renders them. The files
    /// cannot have changed since when the reload comes (the main loop drops the work at every
    /// file event); the host facts are read again then, and the work is redone if they moved.
    pub(super) fn prepare(&mut self) {
        let started = Instant::now();
        self.wake();
        self.settings.load.now = self.expiry.now();
        let engine = Engine::with_backend(&self.settings, self.runner.as_ref(), self.backend);
        let set = engine.load(&mut self.memory);
        let facts = engine.facts();
        let read_at = Instant::now();
        let rendered = (set.is_valid() && !set.holds_no_policy())
            .then(|| engine.render_ahead(&mut self.memory, &set.model, &facts));
        self.ahead = Some(Ahead {
            set,
            facts,
            rendered,
            started,
            read_at,
        });
    }

    /// What `event` comes to: reads the files, guards against invalid and empty sets, and
    /// reconciles the kernel through the engine.
    fn reload(&mut self, event: Event) -> Outcome {
        let resumed_at = Instant::now();
        let ahead = self
            .ahead
            .take()
            .filter(|_| event == Event::PoliciesChanged);
        let engine = Engine::with_backend(&self.settings, self.runner.as_ref(), self.backend);
        let facts = engine.facts();
        // A file written half-way may read as a valid set that says less than the whole.
        if self.files_settling && self.last_good.is_some() {
            return Outcome::Settling {
                repaired: self.repair_unless_echo(event, &facts),
            };
        }
        let (set, rendered, started, read_at) = match ahead {
            Some(ahead) => {
                let rendered = ahead.rendered.filter(|_| ahead.facts == facts);
                (ahead.set, rendered, ahead.started, ahead.read_at)
            }
            None => {
                // The files are read at the daemon's present, which decides what has expired.
                self.settings.load.now = self.expiry.now();
                let engine =
                    Engine::with_backend(&self.settings, self.runner.as_ref(), self.backend);
                let set = engine.load(&mut self.memory);
                (set, None, resumed_at, Instant::now())
            }
        };
        if self.may_be_half_written(event, &set) {
            return Outcome::Settling {
                repaired: self.repair_unless_echo(event, &facts),
            };
        }
        self.expiries_read(&set);
        if !set.is_valid() {
            let errors = set
                .diagnostics
                .iter()
                .filter(|d| d.is_error())
                .map(|d| d.one_line(&set.sources))
                .collect();
            let repaired = self.repair_with_last_good(event, &facts);
            return Outcome::Invalid { errors, repaired };
        }
        if set.holds_no_policy()
            && !self.settings.config.allow_empty
            && self.would_remove_protection()
        {
            let missing = !self.settings.config.policies_dir.is_dir();
            let staged_only = !set.validated.is_empty();
            let repaired = self.repair_with_last_good(event, &facts);
            return Outcome::RefusedEmpty {
                missing,
                staged_only,
                repaired,
            };
        }
        let last_fingerprint = self.last_good.as_ref().map(|good| &good.fingerprint);
        let new_files = last_fingerprint != Some(&set.fingerprint);
        if new_files {
            for warning in set.diagnostics.iter().filter(|d| !d.is_error()) {
                tracing::warn!("{}", warning.one_line(&set.sources));
            }
        }
        let unchanged = !new_files && self.last_good.as_ref().is_some_and(|g| g.facts == facts);
        if unchanged && event.may_skip_unchanged() {
            return Outcome::Unchanged;
        }
        // A change notification with nothing committed since our own write: its echo.
        if unchanged
            && event == Event::Drift(super::drift::Trigger::Notification)
            && Engine::with_backend(&self.settings, self.runner.as_ref(), self.backend)
                .kernel_unmoved(&self.memory)
        {
            return Outcome::Unchanged;
        }
        if event.reads_whole_kernel() {
            self.memory.forget_view();
        }
        let engine = Engine::with_backend(&self.settings, self.runner.as_ref(), self.backend);
        // With the files and the host as they were, only the kernel can need a change: the
        // rules last applied are what a compile would give again.
        let again = self
            .last_good
            .as_mut()
            .filter(|_| unchanged)
            .map(|good| (Arc::clone(good.desired.live()), good.families.clone()));
        let unpack = |reconciled: Reconciled| {
            let Reconciled {
                compiled,
                desired,
                compiled_at,
                desired_at,
                result,
            } = reconciled;
            (Some(compiled), desired, compiled_at, desired_at, result)
        };
        let (compiled, desired, compiled_at, desired_at, result) = match (again, rendered) {
            (Some((desired, families)), _) => {
                let now = Instant::now();
                let result = engine.reconcile_again(&mut self.memory, &desired, families);
                (None, desired, now, now, result)
            }
            (None, Some((rendered, prefetched))) => {
                unpack(engine.reconcile_rendered(&mut self.memory, rendered, prefetched))
            }
            (None, None) => unpack(engine.reconcile(&mut self.memory, &set.model, &facts)),
        };
        let written_at = Instant::now();
        match result {
            Ok((outcome, read)) => {
                // New files make it a reload, whatever woke the loop.
                let drift = event
                    .drift_trigger()
                    .filter(|_| !new_files && !outcome.plan.is_empty() && self.last_good.is_some());
                Outcome::Applied(Box::new(Applied {
                    set,
                    facts,
                    compiled,
                    desired,
                    outcome,
                    drift,
                    phases: Phases {
                        started,
                        read_at,
                        compiled_at,
                        desired_at,
                        written_at,
                        read,
                        resumed_at,
                    },
                }))
            }
            Err(error) => Outcome::Failed(error),
        }
    }

    /// Whether `set`, read for `event`, holds other files than the last good set and may hold a file
    /// read half-way: a write that the watcher had not yet noted when the reload began, or
    /// that began while the files were read. Only for a change of the files: with the
    /// files as last applied (an expiry changes only the time), there is nothing to wait for.
    fn may_be_half_written(&self, event: Event, set: &PolicySet) -> bool {
        let Some(good) = &self.last_good else {
            return false;
        };
        if good.files_fingerprint == set.files_fingerprint {
            return false;
        }
        if self.writes.any_open() {
            return true;
        }
        // A file event's reload comes after its debounce, and the write's own event has been
        // noted by then; any other reload may come right after the write.
        event != Event::PoliciesChanged
            && super::watch::written_within(&self.settings.config.policies_dir, super::watch::QUIET)
                .is_some()
    }

    /// Says what `outcome` came to: the log, the metrics (all of them here), the status file.
    fn report(&mut self, event: Event, outcome: Outcome) {
        self.count(event, &outcome);
        match outcome {
            Outcome::Invalid { errors, repaired } => {
                if errors != self.last_errors {
                    for error in &errors {
                        tracing::error!("{error}");
                    }
                    tracing::error!(
                        errors = errors.len(),
                        "the policy files are invalid; nothing of them is applied and the last good rules stay"
                    );
                }
                self.summary = format!(
                    "policy files invalid ({} error{}); keeping the last good rules",
                    errors.len(),
                    if errors.len() == 1 { "" } else { "s" }
                );
                self.last_errors = errors;
                self.write_status();
                self.report_repair(repaired);
            }
            Outcome::Settling { repaired } => {
                tracing::debug!(
                    ?event,
                    "a policy file is still being written; the last good rules stay until it is closed"
                );
                self.report_repair(repaired);
            }
            Outcome::RefusedEmpty {
                missing,
                staged_only,
                repaired,
            } => {
                self.last_errors.clear();
                let what = if missing {
                    "is missing"
                } else if staged_only {
                    "holds staged policies only, which never change a verdict"
                } else {
                    "holds no policy at all"
                };
                if !self.refusing_empty {
                    tracing::error!(
                        dir = %self.settings.config.policies_dir.display(),
                        "the policy directory {what}; keeping the rules in place instead of removing all protection (set `allowEmpty: true` to allow this)"
                    );
                }
                self.refusing_empty = true;
                self.summary = "refusing an empty policy set; keeping the last rules".to_owned();
                self.last_errors = vec![format!(
                    "the policy directory {what}; the previous rules are kept (allowEmpty is false)"
                )];
                self.write_status();
                self.report_repair(repaired);
            }
            Outcome::Unchanged => {
                self.refusing_empty = false;
                tracing::debug!(?event, "policies and addresses unchanged; nothing to do");
                if !self.last_errors.is_empty() {
                    self.last_errors.clear();
                    // The files went back to what is applied: say so.
                    tracing::info!("the policy files are valid again and match the applied rules");
                    let policies = self
                        .last_good
                        .as_ref()
                        .map_or(0, |good| good.model.policies().len());
                    self.summary = applied_summary(policies, self.backend, false);
                    self.write_status();
                }
            }
            Outcome::Applied(applied) => {
                self.refusing_empty = false;
                self.last_errors.clear();
                self.report_applied(event, *applied);
                self.write_status();
            }
            Outcome::Failed(error) => {
                self.refusing_empty = false;
                tracing::error!(%error, ?event, "applying the policies failed");
                self.summary = format!("apply failed: {error}");
                self.last_errors = vec![error.to_string()];
                self.write_status();
            }
        }
    }

    /// The metrics of `outcome`: every metric a reload moves is moved here.
    fn count(&self, event: Event, outcome: &Outcome) {
        let Ok(mut metrics) = self.metrics.lock() else {
            return;
        };
        let repaired = match outcome {
            Outcome::Invalid { errors, repaired } => {
                metrics.reloads_failed += u64::from(*errors != self.last_errors);
                metrics.policy_files_invalid = true;
                repaired
            }
            Outcome::RefusedEmpty { repaired, .. } => {
                metrics.policy_files_invalid = false;
                metrics.reloads_refused += u64::from(!self.refusing_empty);
                repaired
            }
            Outcome::Unchanged => {
                metrics.policy_files_invalid = false;
                return;
            }
            Outcome::Settling { repaired } => repaired,
            Outcome::Failed(_) => {
                metrics.policy_files_invalid = false;
                metrics.reloads_failed += 1;
                metrics.in_sync = false;
                return;
            }
            Outcome::Applied(applied) => {
                metrics.policy_files_invalid = false;
                let outcome = &applied.outcome;
                let changed = !outcome.plan.is_empty();
                // A resync that finds nothing to change is no reload.
                metrics.reloads_ok += u64::from(changed || !event.finds_drift());
                if let Some(trigger) = applied.drift {
                    trigger.count(&mut metrics);
                }
                if changed {
                    metrics.last_apply_seconds = outcome.elapsed.as_secs_f64();
                    metrics.apply_seconds.observe(outcome.elapsed.as_secs_f64());
                }
                if changed || metrics.last_apply_timestamp == 0 {
                    metrics.last_apply_timestamp = now_seconds();
                }
                metrics.policies = applied.set.model.policies().len();
                metrics.rules = applied
                    .desired
                    .tables
                    .values()
                    .flat_map(|t| t.chains.values())
                    .map(|rules| rules.len())
                    .sum();
                metrics.set_members = applied.desired.sets.values().map(|s| s.members.len()).sum();
                metrics.in_sync = true;
                metrics.last_sync_timestamp = now_seconds();
                return;
            }
        };
        // Repairing with the last good rules reads the kernel and leaves them in place.
        match repaired {
            Some(Ok(outcome)) => {
                if !outcome.plan.is_empty() {
                    event
                        .drift_trigger()
                        .unwrap_or(super::drift::Trigger::Resync)
                        .count(&mut metrics);
                }
                metrics.in_sync = true;
                metrics.last_sync_timestamp = now_seconds();
            }
            Some(Err(_)) => metrics.in_sync = false,
            None => {}
        }
    }

    /// Logs and records a reconcile that applied (or found nothing to change), records the
    /// applied index, revokes what the change denies, and remembers the set as the last good.
    fn report_applied(&mut self, event: Event, applied: Applied) {
        let Applied {
            set,
            facts,
            compiled,
            desired,
            outcome,
            drift,
            phases,
        } = applied;
        let (reused, compiled_now, rendered) = self.memory.last_work();
        tracing::debug!(
            read = ?phases.read,
            read_and_validate_ms = ms(phases.read_at - phases.started),
            compile_ms = ms(phases.compiled_at - phases.read_at),
            render_ms = ms(phases.desired_at - phases.compiled_at),
            done_ahead = phases.resumed_at > phases.desired_at,
            dataplane_ms = ms(phases.written_at - phases.desired_at.max(phases.resumed_at)),
            policy_chains_reused = reused,
            policy_chains_compiled = compiled_now,
            chains_rendered = rendered,
            "kernel state for the plan; the reload's phases"
        );
        let summary = outcome.summary();
        let changed = !outcome.plan.is_empty();
        let policies = set.model.policies().len();
        if let Some(trigger) = drift {
            tracing::warn!(
                trigger = trigger.as_str(),
                changes = %summary.line(),
                what = %outcome.plan.describe(),
                "drift repaired: another program changed nodeport-guard's rules"
            );
        } else if changed {
            tracing::info!(
                ?event,
                policies,
                changes = %summary.line(),
                elapsed_ms = phases.started.elapsed().as_millis() as u64,
                "applied"
            );
        } else if event.quiet_when_unchanged() {
            // The echo of our own writes, or a change that left ours as it was.
            tracing::debug!(?event, "no changes needed");
        } else {
            tracing::info!(
                ?event,
                policies,
                elapsed_ms = phases.started.elapsed().as_millis() as u64,
                "no changes needed"
            );
        }
        for warning in compiled.iter().flat_map(|compiled| &compiled.warnings) {
            tracing::debug!(warning = %warning.message, "plan note");
        }
        if changed {
            let recorded = self
                .state_dir
                .record_change("daemon", outcome.plan.summary().counts());
            self.state_dir_result(recorded);
        }
        self.expiries_enforced(&crate::grants::expiring(&set));
        if changed && self.settings.config.revoke_established {
            self.revoke_established(&set.model, &facts);
        }
        // Without a compile, the rules, their origins and the policies are those recorded.
        let families = match &compiled {
            Some(compiled) => {
                let index =
                    crate::counters::origin_index(&compiled.ruleset, self.backend, now_seconds())
                        .of_desired(&desired)
                        .of_policies(&set.sources);
                let recorded = self.state_dir.set_applied(&index);
                self.state_dir_result(recorded);
                if let Some(log) = &self.drop_log {
                    log.set_resolver(crate::drops::Resolver::new(
                        &set.model,
                        &self.settings.config,
                    ));
                }
                compiled.ruleset.ip_families()
            }
            None => self
                .last_good
                .as_ref()
                .map(|good| good.families.clone())
                .unwrap_or_default(),
        };
        self.summary = applied_summary(policies, self.backend, changed);
        tracing::debug!(
            record_ms = ms(phases.written_at.elapsed()),
            "recorded the applied state"
        );
        super::exposed::refresh(
            &self.metrics,
            &self.runner,
            &set.fingerprint,
            &set.model,
            &self.settings.config,
            &facts,
        );
        // The same state as before (a check that found the files and the host unchanged)
        // keeps its identity: the drift watch then has nothing new to look for.
        let desired = match self.last_good.take() {
            Some(good) if good.desired.is(&desired) => good.desired,
            _ => Kept::new(desired),
        };
        self.last_good = Some(LastGood {
            fingerprint: set.fingerprint,
            files_fingerprint: set.files_fingerprint,
            facts,
            model: set.model,
            desired,
            families,
        });
    }

    /// The state of the last good apply (what the drift watch looks after) and its identity,
    /// while an event is handled (at rest it is packed).
    pub(super) fn applied_state(&self) -> Option<(&Arc<State>, u64)> {
        let good = self.last_good.as_ref()?;
        Some((good.desired.if_live()?, good.desired.id()))
    }

    /// Puts the daemon to rest once events stop coming: the rule lines of the state last
    /// applied are packed, and the engine's memos and view let go of them
    /// (`docs/performance.md`, "The daemon at rest packs what it applied").
    pub(super) fn rest(&mut self) {
        if self.ahead.is_some() {
            // A reload is being prepared: it is not the time.
            return;
        }
        let Some(good) = &mut self.last_good else {
            return;
        };
        let Some(applied) = good.desired.if_live() else {
            return;
        };
        self.memory.set_aside(applied);
        if !good.desired.rest() {
            // Something else still holds it: packing would free nothing.
            if let Some(applied) = good.desired.if_live() {
                self.memory.take_back(applied);
            }
        }
    }

    /// Takes a step of a quiet daemon ([`super::kept::Quiet`]).
    pub(super) fn quiet(&mut self, stage: Option<super::kept::Stage>) {
        match stage {
            Some(super::kept::Stage::Rest) => self.rest(),
            Some(super::kept::Stage::Forget) => self.forget(),
            None => {}
        }
    }

    /// After a longer quiet than [`Daemon::rest`]'s: forgets the engine's compile and render
    /// memos (`docs/performance.md`, "The daemon at rest forgets how it built its rules").
    pub(super) fn forget(&mut self) {
        if self.ahead.is_none() {
            self.memory.forget_memos();
        }
    }

    /// Whether the state last applied rests packed.
    #[cfg(test)]
    pub(super) fn is_resting(&self) -> bool {
        self.last_good
            .as_ref()
            .is_some_and(|good| good.desired.is_resting())
    }

    /// Wakes the daemon for an event: undoes [`Daemon::rest`].
    pub(super) fn wake(&mut self) {
        if let Some(good) = &mut self.last_good
            && good.desired.if_live().is_none()
        {
            let applied = Arc::clone(good.desired.live());
            self.memory.take_back(&applied);
        }
    }

    /// Whether an empty policy set would take protection away: some was applied, or the kernel
    /// holds rules of ours (from before a restart).
    fn would_remove_protection(&self) -> bool {
        if let Some(good) = self
            .last_good
            .as_ref()
            .filter(|good| !good.model.enforces_nothing())
        {
            // Ending time-boxed exceptions early (`grant --revoke` of the last grant) is no
            // loss of protection, as their expiry is not.
            return !crate::grants::only_time_boxed(&good.model);
        }
        let dataplane = self.dataplane(IpFamily::BOTH.to_vec());
        dataplane
            .observe()
            .map(|state| !state.is_empty())
            .unwrap_or(true)
    }

    /// On the events that may ([`Event::repairs_with_last_good`]), puts the last good rules
    /// back even while the files are unusable.
    fn repair_with_last_good(&mut self, event: Event, facts: &HostFacts) -> Option<Repair> {
        if !event.repairs_with_last_good() {
            return None;
        }
        if self.last_good.is_none() {
            self.last_good = self.recorded_last_good(facts);
        }
        self.expire_last_good(facts);
        let good = self.last_good.as_mut()?;
        let desired = if &good.facts == facts {
            Arc::clone(good.desired.live())
        } else {
            let compiled = compile::compile(&good.model, &self.settings.config, facts);
            Arc::new(self.backend.desired(&compiled.ruleset))
        };
        let engine = Engine::with_backend(&self.settings, self.runner.as_ref(), self.backend);
        Some(engine.repair(&mut self.memory, &desired, facts.families()))
    }

    /// [`Daemon::repair_with_last_good`] while the files settle, except for the echo of our own
    /// write (a change notification with nothing committed since it): the kernel then holds
    /// the last good rules, and a repair would only drop the view, so that the reload the
    /// files are about to bring would read the whole kernel.
    fn repair_unless_echo(&mut self, event: Event, facts: &HostFacts) -> Option<Repair> {
        let echo = event == Event::Drift(super::drift::Trigger::Notification)
            && Engine::with_backend(&self.settings, self.runner.as_ref(), self.backend)
                .kernel_unmoved(&self.memory);
        if echo {
            return None;
        }
        self.repair_with_last_good(event, facts)
    }

    /// The last good rules when this daemon has applied none yet (it started while the files
    /// were invalid or empty): the policy files of the last apply, as the state directory
    /// recorded them, compiled for this host. Without them, drift could not be repaired and
    /// "keeping the last good rules" would only be keeping what another program left.
    fn recorded_last_good(&mut self, facts: &HostFacts) -> Option<LastGood> {
        let index = self.state_dir.applied().ok().flatten()?;
        if index.policy_files.is_empty() {
            return None;
        }
        let set = crate::policy_set::from_files(&index.policy_files, self.expiry.now());
        if !set.is_valid() {
            return None;
        }
        let compiled = compile::compile(&set.model, &self.settings.config, facts);
        let desired = self.backend.desired(&compiled.ruleset);
        if desired.is_empty() {
            return None;
        }
        tracing::info!(
            policies = set.model.policies().len(),
            "repairing with the policies of the last apply, as the state directory recorded them"
        );
        Some(LastGood {
            fingerprint: set.fingerprint,
            files_fingerprint: set.files_fingerprint,
            facts: facts.clone(),
            model: set.model,
            desired: Kept::new(Arc::new(desired)),
            families: facts.families(),
        })
    }

    /// Logs and records what [`Daemon::repair_with_last_good`] did.
    fn report_repair(&mut self, repaired: Option<Repair>) {
        match repaired {
            Some(Ok(outcome)) if !outcome.plan.is_empty() => {
                tracing::warn!(changes = %outcome.summary().line(), what = %outcome.plan.describe(), "drift repaired with the last good rules");
                record::change(&self.state_dir, "daemon", &outcome.plan);
            }
            Some(Err(error)) => tracing::error!(%error, "repairing drift failed"),
            Some(Ok(_)) | None => {}
        }
    }

    /// Cuts the established connections the new policies deny that the last good ones let
    /// through (`revokeEstablished`). Bounded in time; a failure is counted and logged, and
    /// never undoes the rules just applied.
    fn revoke_established(&mut self, after: &Model, facts: &HostFacts) {
        let before = self.last_good.as_ref().map(|good| &good.model);
        let started = Instant::now();
        match self.engine().revoke(before, after, facts, true) {
            Ok(report) => {
                if let Ok(mut metrics) = self.metrics.lock() {
                    metrics.revoked_connections += report.deleted as u64;
                    metrics.revoke_failures += report.failed.len() as u64;
                }
                if report.deleted > 0 || !report.failed.is_empty() {
                    tracing::info!(
                        cut = report.deleted,
                        failed = report.failed.len(),
                        examined = report.examined,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "revoked established connections the new policies deny"
                    );
                }
            }
            Err(error) => {
                if let Ok(mut metrics) = self.metrics.lock() {
                    metrics.revoke_failures += 1;
                }
                tracing::warn!(
                    "cannot revoke established connections (the rules are applied): {error}"
                );
            }
        }
    }

    /// Warns (once) when the state directory cannot be written: reconciling goes on, but
    /// `status` loses the daemon's summary and the names of the counted rules.
    fn state_dir_result(&mut self, result: anyhow::Result<()>) {
        if let Err(error) = result
            && !self.state_dir_warned
        {
            self.state_dir_warned = true;
            tracing::warn!(
                dir = %self.state_dir.path().display(),
                "cannot write the state directory; reconciling goes on, but `status` cannot show the daemon's state or name the policy rules of the counters: {error:#}"
            );
        }
    }

    pub(super) fn write_status(&mut self) {
        let status = serde_json::json!({
            "pid": std::process::id(),
            "backend": self.backend.name(),
            "summary": self.summary,
            "lastErrors": self.last_errors,
            "updatedAt": now_seconds(),
        });
        let written = self.state_dir.set_daemon_status(&status);
        self.state_dir_result(written);
    }
}

/// Expiries (`nodeport-guard.io/expires`): the timer, the log of each one enforced, and the
/// last good rules losing what expires while the files are unusable.
impl Daemon {
    /// What the files just read say about expiries: sets the timer (for the files, or, while
    /// they are invalid, for the rules last applied) and the metrics.
    fn expiries_read(&mut self, set: &crate::policy_set::PolicySet) {
        let now = self.expiry.now();
        let valid = set.is_valid();
        let items = if valid {
            crate::grants::expiring(set)
        } else {
            Vec::new()
        };
        let applied = self
            .last_good
            .as_ref()
            .and_then(|good| crate::validate::expiry::next_expiry(&good.model, now));
        self.expiry
            .set_next([valid.then(|| set.next_expiry()).flatten(), applied]);
        if valid {
            expiry::count(&self.metrics, &items, set.next_expiry());
        }
    }

    /// Logs the expiries the rules just applied enforce, each once.
    fn expiries_enforced(&mut self, items: &[crate::grants::Expiring]) {
        let now = self.expiry.now();
        let revoking = self.settings.config.revoke_established;
        let enforced = self.expiry.newly_enforced(items);
        expiry::log_enforced(&enforced, now, revoking);
    }

    /// While the files are invalid the last good rules stay, but not what has expired in them
    /// since: they are compiled again without it (the repair that follows writes them).
    fn expire_last_good(&mut self, facts: &crate::facts::HostFacts) {
        let now = self.expiry.now();
        let Some(good) = &mut self.last_good else {
            return;
        };
        let (model, expired) = crate::validate::expiry::at(&good.model, now);
        if expired.is_empty() {
            return;
        }
        for warning in &expired {
            tracing::warn!(
                "{}; the policy files are invalid, so the last good rules are applied without it",
                warning.message
            );
        }
        let compiled = crate::compile::compile(&model, &self.settings.config, facts);
        good.desired = Kept::new(Arc::new(self.backend.desired(&compiled.ruleset)));
        good.facts = facts.clone();
        good.model = model;
        // The same files, once valid again, are read as new.
        good.fingerprint.push_str(" (expired since)");
    }
}

/// A duration in milliseconds with a fraction, for the log.
fn ms(duration: std::time::Duration) -> f64 {
    (duration.as_secs_f64() * 10_000.0).round() / 10.0
}

pub(super) fn applied_summary(
    policies: usize,
    backend: &'static dyn Backend,
    changed_now: bool,
) -> String {
    format!(
        "{policies} polic{} applied with {backend}; last change {}",
        if policies == 1 { "y" } else { "ies" },
        if changed_now { "now" } else { "earlier" }
    )
}

#[cfg(test)]
mod expiry_tests;
