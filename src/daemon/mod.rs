//! The daemon (`run`): one loop over one [`Event`] enum.
//!
//! Design goals, in order:
//! 1. Never apply a broken or accidentally empty policy set: keep the last good rules and say
//!    why, loudly.
//! 2. Never leave a gap: every change is one reconcile (atomic per table), and a failed apply
//!    puts the previous rules back.
//! 3. Pick up every change to the files within a second (debounced), and put back within
//!    `resyncInterval` what another program removed.
//! 4. Cost nothing at rest: the loop sleeps until an event, a signal or the resync timer.
//!
//! The reconciler is level-triggered: whatever woke the loop, it re-reads the files and the
//! kernel and applies the difference. A change that leaves the files' content and the host's
//! addresses the same does not even read the kernel.

mod debounce;
pub mod drops;
pub mod metrics;
pub mod netlink;
pub mod watch;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::compile;
use crate::counters::{self, RuleCounter};
use crate::dataplane::{Backend, Dataplane, Runner};
use crate::facts::HostFacts;
use crate::model::{IpFamily, Model};
use crate::policy_set::{self, PolicySet};
use crate::reconcile;
use crate::settings::Settings;
use crate::state::State;
use crate::system::host::host_facts;
use crate::system::runtime::{StateDir, now_seconds};

/// Why the loop wakes up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Something in the policy directory changed.
    PoliciesChanged,
    /// SIGHUP: reload now.
    Reload,
    /// The resync timer: read the kernel back and repair drift.
    Resync,
    /// An address or link changed.
    AddressesChanged,
}

/// What the last successful apply was made from.
struct LastGood {
    fingerprint: String,
    facts: HostFacts,
    model: Model,
    desired: Arc<State>,
}

struct Daemon {
    settings: Settings,
    backend: &'static dyn Backend,
    runner: Arc<dyn Runner>,
    state_dir: StateDir,
    metrics: metrics::Shared,
    last_good: Option<LastGood>,
    /// What the kernel holds of ours at a sign of the kernel's (the nf_tables generation, the
    /// x_tables digest), while nobody else changes it (see [`reconcile::reconcile_cached`]);
    /// dropped on every resync and SIGHUP.
    cache: Option<reconcile::Cached>,
    /// The policy files checked at the last read: a reload parses and validates only the files
    /// that changed.
    parse_cache: crate::policy_set::Cache,
    /// The policy chains last compiled: a reload compiles only the policies that changed.
    compile_memo: compile::Memo,
    /// The state last rendered: a reload renders only the chains and sets that changed.
    render_memo: crate::state::RenderMemo,
    last_errors: Vec<String>,
    summary: String,
    /// Whether the last reload was refused because the set was empty (so the refusal is said
    /// once, not at every resync).
    refusing_empty: bool,
    /// Whether the operator was told that the state directory cannot be written (once).
    state_dir_warned: bool,
    /// The NFLOG listener, when the daemon counts drops.
    drop_log: Option<Arc<drops::DropLog>>,
}

/// What a reload compiled and rendered, and how its reconcile went.
struct Reconciled {
    compiled: compile::Compiled,
    desired: Arc<State>,
    compiled_at: Instant,
    desired_at: Instant,
    result: Result<(reconcile::Outcome, reconcile::Read), reconcile::ReconcileError>,
}

/// Runs the daemon until SIGTERM or SIGINT. The rules stay in place when it stops.
pub fn run(settings: Settings, runner: Arc<dyn Runner>) -> Result<ExitCode> {
    let state_dir = StateDir::new(&settings.state_dir);
    let _lock = state_dir
        .lock("nodeport-guard run", false)
        .context("refusing to start a second daemon")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the event loop")?;
    runtime.block_on(run_loop(settings, runner, state_dir))
}

async fn run_loop(
    settings: Settings,
    runner: Arc<dyn Runner>,
    state_dir: StateDir,
) -> Result<ExitCode> {
    let backend = settings.backend.resolve(runner.as_ref());
    let metrics: metrics::Shared = Arc::new(Mutex::new(metrics::Metrics {
        resync_interval_seconds: settings.config.resync_interval.as_secs_f64(),
        ..metrics::Metrics::default()
    }));
    let (sender, mut events) = mpsc::unbounded_channel();
    let mut watcher = watch::DirectoryWatcher::start(&settings.config.policies_dir, sender.clone())
        .context("cannot watch the policy directory")?;
    let netlink = netlink::start(sender.clone());
    if let Some(address) = settings.config.metrics_address {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on `metricsAddress` {address}"))?;
        let stale_after = settings.config.resync_interval * 3 + Duration::from_secs(30);
        let counter_settings = settings.clone();
        let counter_runner = runner.clone();
        tokio::spawn(metrics::serve(
            listener,
            metrics.clone(),
            move || read_counters(&counter_settings, counter_runner.as_ref(), backend),
            stale_after,
        ));
        tracing::info!(%address, "serving /metrics and /healthz");
    }
    let mut hangup = signal(SignalKind::hangup())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;

    let drop_log = drops::DropLog::start(&settings, metrics.clone());
    let mut daemon = Daemon::new(settings, backend, runner, state_dir, metrics);
    daemon.drop_log = drop_log;
    tracing::info!(
        %backend,
        policies = %daemon.settings.config.policies_dir.display(),
        resync = %humantime::format_duration(daemon.settings.config.resync_interval),
        address_notifications = netlink,
        "nodeport-guard daemon starting"
    );
    daemon.handle(Event::Resync);
    crate::system::runtime::release_free_memory();
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&daemon.summary),
    ]);

    let mut resync = tokio::time::interval(daemon.settings.config.resync_interval);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    resync.tick().await;
    let watchdog_every = sd_notify::watchdog_enabled().map(|timeout| timeout / 2);
    let mut watchdog = tokio::time::interval(watchdog_every.unwrap_or(Duration::from_secs(3600)));
    // Addresses often change in bursts (an interface comes up with several); wait a moment.
    let address_settle = Duration::from_millis(250);
    let mut pending_addresses: Option<tokio::time::Instant> = None;
    // Files change in bursts too (an editor's temp file and rename, a ConfigMap's swap).
    let mut file_events = debounce::Debounce::new(daemon.settings.config.debounce);

    loop {
        let address_deadline = pending_addresses;
        let policies_deadline = file_events.due();
        tokio::select! {
            Some(event) = events.recv() => {
                let now = tokio::time::Instant::now();
                match event {
                    Event::AddressesChanged => {
                        pending_addresses.get_or_insert(now + address_settle);
                    }
                    _ => file_events.event(now),
                }
                continue;
            }
            () = sleep_until(policies_deadline) => {
                file_events.fired();
                watcher.refresh();
                daemon.handle(Event::PoliciesChanged);
            }
            () = sleep_until(address_deadline) => {
                pending_addresses = None;
                daemon.handle(Event::AddressesChanged);
            }
            _ = hangup.recv() => {
                tracing::info!("SIGHUP: reloading");
                watcher.refresh();
                daemon.handle(Event::Reload);
            }
            _ = resync.tick() => {
                // A directory recreated while its parent could not be watched is found here.
                watcher.refresh();
                daemon.handle(Event::Resync);
            }
            _ = watchdog.tick(), if watchdog_every.is_some() => {
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
            }
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        }
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(&daemon.summary)]);
        crate::system::runtime::release_free_memory();
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    if let Some(log) = &daemon.drop_log {
        log.close();
    }
    tracing::info!("stopping; the rules stay in place");
    Ok(ExitCode::SUCCESS)
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending::<()>().await,
    }
}

fn read_counters(
    settings: &Settings,
    runner: &dyn Runner,
    backend: &'static dyn Backend,
) -> Vec<RuleCounter> {
    let dataplane = Dataplane::new(
        backend,
        runner,
        IpFamily::BOTH.to_vec(),
        &settings.state_dir,
    );
    let state_dir = StateDir::new(&settings.state_dir);
    match (dataplane.observe(), state_dir.applied()) {
        (Ok(observed), Ok(Some(index))) => counters::rule_counters(&observed, &index),
        _ => Vec::new(),
    }
}

impl Daemon {
    fn new(
        settings: Settings,
        backend: &'static dyn Backend,
        runner: Arc<dyn Runner>,
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
            cache: None,
            parse_cache: Default::default(),
            compile_memo: Default::default(),
            render_memo: Default::default(),
            last_errors: Vec::new(),
            summary: "starting".to_owned(),
            refusing_empty: false,
            state_dir_warned: false,
            drop_log: None,
        }
    }

    fn dataplane(&self, families: Vec<IpFamily>) -> Dataplane<'_> {
        Dataplane::new(
            self.backend,
            self.runner.as_ref(),
            families,
            &self.settings.state_dir,
        )
    }

    /// Reads the policy directory, as a policy set. A missing directory reads as an empty set
    /// (a ConfigMap or confd glitch, or a directory being replaced), which the empty-set guard
    /// then catches.
    fn read_policies(&mut self) -> PolicySet {
        if !self.settings.config.policies_dir.is_dir() {
            return PolicySet::missing();
        }
        policy_set::load_cached(
            std::slice::from_ref(&self.settings.config.policies_dir),
            self.settings.load,
            &mut self.parse_cache,
        )
    }

    /// Compiles and renders `model` and reconciles the kernel with it. With iptables-legacy and
    /// a cached view to check, the first reading of the kernel (the xtables lock, the digest of
    /// its rules, the ipsets) is taken on a thread meanwhile: it takes tens of milliseconds at thousands of rules, as
    /// long as the compile. The lock is then held a little longer; only for x_tables, whose
    /// digest is read under it, does reading it early leave the reconcile exact.
    fn compile_and_reconcile(&mut self, model: &Model, facts: &HostFacts) -> Reconciled {
        let runner = Arc::clone(&self.runner);
        let ahead = (self.backend.sign() == crate::dataplane::Sign::XtablesDigest
            && self.cache.is_some())
        .then(|| {
            (
                Dataplane::new(
                    self.backend,
                    runner.as_ref(),
                    IpFamily::BOTH.to_vec(),
                    &self.settings.state_dir,
                ),
                self.cache.clone(),
            )
        });
        std::thread::scope(|scope| {
            let first = ahead.as_ref().map(|(dataplane, cached)| {
                scope.spawn(move || reconcile::FirstRead::take(dataplane, cached.as_ref()))
            });
            let compiled =
                compile::compile_with(model, &self.settings.config, facts, &mut self.compile_memo);
            let compiled_at = Instant::now();
            let desired = self
                .backend
                .desired_with(&compiled.ruleset, &mut self.render_memo);
            let desired_at = Instant::now();
            let dataplane = Dataplane::new(
                self.backend,
                runner.as_ref(),
                compiled.ruleset.ip_families(),
                &self.settings.state_dir,
            );
            let first = match first {
                Some(first) => crate::dataplane::runner::joined(first),
                None => reconcile::FirstRead::take(&dataplane, self.cache.as_ref()),
            };
            let mut cache = self.cache.take();
            let result = reconcile::reconcile_after(&dataplane, &desired, &mut cache, first);
            self.cache = cache;
            Reconciled {
                compiled,
                desired,
                compiled_at,
                desired_at,
                result,
            }
        })
    }

    fn handle(&mut self, event: Event) {
        let started = Instant::now();
        if let Ok(mut metrics) = self.metrics.lock() {
            metrics.heartbeat = Some(Instant::now());
        }
        let set = self.read_policies();
        let facts = host_facts(&self.settings.config);
        let read_at = Instant::now();
        if !set.is_valid() {
            self.invalid(&set, event, &facts);
            return;
        }
        if let Ok(mut metrics) = self.metrics.lock() {
            metrics.policy_files_invalid = false;
        }
        let had_errors = !self.last_errors.is_empty();
        self.last_errors.clear();
        if set.model.is_empty()
            && !self.settings.config.allow_empty
            && self.would_remove_protection()
        {
            self.refuse_empty(event, &facts);
            return;
        }
        self.refusing_empty = false;
        let unchanged = self
            .last_good
            .as_ref()
            .is_some_and(|good| good.fingerprint == set.fingerprint && good.facts == facts);
        let new_files = self
            .last_good
            .as_ref()
            .is_none_or(|good| good.fingerprint != set.fingerprint);
        if new_files {
            for warning in set.diagnostics.iter().filter(|d| !d.is_error()) {
                tracing::warn!("{}", warning.headline(&set.sources));
            }
        }
        if unchanged && matches!(event, Event::PoliciesChanged | Event::AddressesChanged) {
            tracing::debug!(?event, "policies and addresses unchanged; nothing to do");
            if had_errors {
                // The files went back to what is applied: say so.
                tracing::info!("the policy files are valid again and match the applied rules");
                self.summary = applied_summary(set.model.policies().len(), self.backend, false);
                self.write_status();
            }
            return;
        }
        if matches!(event, Event::Resync | Event::Reload) {
            // The resync timer and SIGHUP read the whole kernel, whatever the sign says.
            self.cache = None;
        }
        let Reconciled {
            compiled,
            desired,
            compiled_at,
            desired_at,
            result,
        } = self.compile_and_reconcile(&set.model, &facts);
        let written_at = Instant::now();
        match result {
            Ok((outcome, read)) => {
                tracing::debug!(
                    ?read,
                    read_and_validate_ms = ms(read_at - started),
                    compile_ms = ms(compiled_at - read_at),
                    render_ms = ms(desired_at - compiled_at),
                    dataplane_ms = ms(written_at - desired_at),
                    policy_chains_reused = self.compile_memo.last_compile().reused,
                    policy_chains_compiled = self.compile_memo.last_compile().compiled,
                    chains_rendered = self.render_memo.last_render().1,
                    "kernel state for the plan; the reload's phases"
                );
                let summary = outcome.summary();
                let changed = !outcome.plan.is_empty();
                self.count_applied(event, &outcome, set.model.policies().len(), &desired);
                if event == Event::Resync && changed && self.last_good.is_some() {
                    tracing::warn!(
                        changes = %summary.line(),
                        what = %outcome.plan.describe(),
                        "drift repaired: another program changed nodeport-guard's rules"
                    );
                } else if changed {
                    tracing::info!(
                        ?event,
                        policies = set.model.policies().len(),
                        changes = %summary.line(),
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "applied"
                    );
                } else {
                    tracing::info!(
                        ?event,
                        policies = set.model.policies().len(),
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "no changes needed"
                    );
                }
                for warning in &compiled.warnings {
                    tracing::debug!(warning = %warning.message, "plan note");
                }
                if changed {
                    let recorded = self
                        .state_dir
                        .record_change("daemon", outcome.plan.summary().counts());
                    self.state_dir_result(recorded);
                }
                if changed && self.settings.config.revoke_established {
                    self.revoke_established(&set.model, &facts);
                }
                let index = counters::origin_index(&compiled.ruleset, self.backend, now_seconds())
                    .of_desired(&desired)
                    .of_policies(&set.sources);
                let recorded = self.state_dir.set_applied(&index);
                self.state_dir_result(recorded);
                self.summary = applied_summary(set.model.policies().len(), self.backend, changed);
                if let Some(log) = &self.drop_log {
                    log.set_resolver(crate::drops::Resolver::new(
                        &set.model,
                        &self.settings.config,
                    ));
                }
                tracing::debug!(
                    record_ms = ms(written_at.elapsed()),
                    "recorded the applied state"
                );
                self.last_good = Some(LastGood {
                    fingerprint: set.fingerprint,
                    facts,
                    model: set.model,
                    desired,
                });
            }
            Err(error) => {
                if let Ok(mut metrics) = self.metrics.lock() {
                    metrics.reloads_failed += 1;
                    metrics.in_sync = false;
                }
                tracing::error!(%error, ?event, "applying the policies failed");
                self.summary = format!("apply failed: {error}");
                self.last_errors = vec![error.to_string()];
            }
        }
        self.write_status();
    }

    /// The metrics of a reload that applied (or found nothing to change).
    fn count_applied(
        &self,
        event: Event,
        outcome: &reconcile::Outcome,
        policies: usize,
        desired: &State,
    ) {
        let changed = !outcome.plan.is_empty();
        if let Ok(mut metrics) = self.metrics.lock() {
            metrics.reloads_ok += u64::from(event != Event::Resync || changed);
            if event == Event::Resync && changed && self.last_good.is_some() {
                metrics.drift_repairs += 1;
            }
            if changed {
                metrics.last_apply_seconds = outcome.elapsed.as_secs_f64();
                metrics.apply_seconds_sum += outcome.elapsed.as_secs_f64();
                metrics.apply_count += 1;
            }
            if changed || metrics.last_apply_timestamp == 0 {
                metrics.last_apply_timestamp = now_seconds();
            }
            metrics.policies = policies;
            metrics.rules = desired
                .tables
                .values()
                .flat_map(|t| t.chains.values())
                .map(|rules| rules.len())
                .sum();
            metrics.set_members = desired.sets.values().map(|s| s.members.len()).sum();
            metrics.in_sync = true;
            metrics.last_sync_timestamp = now_seconds();
        }
    }

    /// Keeps the rules in place instead of applying an empty set, saying why once.
    fn refuse_empty(&mut self, event: Event, facts: &HostFacts) {
        if let Ok(mut metrics) = self.metrics.lock() {
            metrics.reloads_refused += u64::from(!self.refusing_empty);
        }
        let missing = !self.settings.config.policies_dir.is_dir();
        let what = if missing {
            "is missing"
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
        self.repair_with_last_good(event, facts);
    }

    /// Whether an empty policy set would take protection away: some was applied, or the kernel
    /// holds rules of ours (from before a restart).
    fn would_remove_protection(&self) -> bool {
        if self
            .last_good
            .as_ref()
            .is_some_and(|good| !good.model.is_empty())
        {
            return true;
        }
        let dataplane = self.dataplane(IpFamily::BOTH.to_vec());
        dataplane
            .observe()
            .map(|state| !state.is_empty())
            .unwrap_or(true)
    }

    fn invalid(&mut self, set: &PolicySet, event: Event, facts: &HostFacts) {
        let errors: Vec<String> = set
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.headline(&set.sources))
            .collect();
        let fresh = errors != self.last_errors;
        if fresh {
            for error in &errors {
                tracing::error!("{error}");
            }
            tracing::error!(
                errors = errors.len(),
                "the policy files are invalid; nothing of them is applied and the last good rules stay"
            );
            if let Ok(mut metrics) = self.metrics.lock() {
                metrics.reloads_failed += 1;
            }
        }
        if let Ok(mut metrics) = self.metrics.lock() {
            metrics.policy_files_invalid = true;
        }
        self.summary = format!(
            "policy files invalid ({} error{}); keeping the last good rules",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        );
        self.last_errors = errors;
        self.write_status();
        self.repair_with_last_good(event, facts);
    }

    /// On resync, SIGHUP and address changes, keeps the last good rules in place even while the
    /// files are unusable.
    fn repair_with_last_good(&mut self, event: Event, facts: &HostFacts) {
        if !matches!(
            event,
            Event::Resync | Event::Reload | Event::AddressesChanged
        ) {
            return;
        }
        let Some(good) = &self.last_good else { return };
        let desired = if &good.facts == facts {
            Arc::clone(&good.desired)
        } else {
            let compiled = compile::compile(&good.model, &self.settings.config, facts);
            Arc::new(self.backend.desired(&compiled.ruleset))
        };
        let dataplane = self.dataplane(facts.families());
        let result = reconcile::reconcile(&dataplane, &desired);
        // Whatever it wrote, the next reload reads the whole kernel again.
        self.cache = None;
        if let Ok(mut metrics) = self.metrics.lock() {
            metrics.in_sync = result.is_ok();
            if result.is_ok() {
                metrics.last_sync_timestamp = now_seconds();
            }
        }
        match result {
            Ok(outcome) if !outcome.plan.is_empty() => {
                if let Ok(mut metrics) = self.metrics.lock() {
                    metrics.drift_repairs += 1;
                }
                tracing::warn!(changes = %outcome.summary().line(), what = %outcome.plan.describe(), "drift repaired with the last good rules");
                let recorded = self
                    .state_dir
                    .record_change("daemon", outcome.plan.summary().counts());
                self.state_dir_result(recorded);
            }
            Ok(_) => {}
            Err(error) => tracing::error!(%error, "repairing drift failed"),
        }
    }

    /// Cuts the established connections the new policies deny that the last good ones let
    /// through (`revokeEstablished`). Bounded in time; a failure is counted and logged, and
    /// never undoes the rules just applied.
    fn revoke_established(&mut self, after: &Model, facts: &HostFacts) {
        let before = self.last_good.as_ref().map(|good| &good.model);
        let started = Instant::now();
        match crate::revocation::revoke(
            self.runner.as_ref(),
            before,
            after,
            &self.settings.config,
            facts,
            true,
        ) {
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
    fn state_dir_result(&mut self, result: Result<()>) {
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

    fn write_status(&mut self) {
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

/// A duration in milliseconds with a fraction, for the log.
fn ms(duration: std::time::Duration) -> f64 {
    (duration.as_secs_f64() * 10_000.0).round() / 10.0
}

fn applied_summary(policies: usize, backend: &'static dyn Backend, changed_now: bool) -> String {
    format!(
        "{policies} polic{} applied with {backend}; last change {}",
        if policies == 1 { "y" } else { "ies" },
        if changed_now { "now" } else { "earlier" }
    )
}

#[cfg(test)]
mod tests;
