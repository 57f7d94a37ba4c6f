//! The daemon (`run`): one loop over one [`Event`] enum.
//!
//! Design goals, in order:
//! 1. Never apply a broken or accidentally empty policy set: keep the last good rules and say
//!    why, loudly.
//! 2. Never leave a gap: every change is one reconcile (atomic per table), and a failed apply
//!    puts the previous rules back.
//! 3. Pick up every change to the files within a second (debounced), and put back within a
//!    second what another program removed ([`drift`]); `resyncInterval` is the full check.
//! 4. Cost nothing at rest: the loop sleeps until an event, a signal or the resync timer.
//!
//! The reconciler is level-triggered: whatever woke the loop, it re-reads the files and the
//! kernel and applies the difference. A change that leaves the files' content and the host's
//! addresses the same does not even read the kernel.

mod debounce;
pub mod drift;
pub mod drops;
pub mod expiry;
mod exposed;
pub mod http;
mod kept;
pub mod metrics;
pub mod netlink;
mod reload;
pub mod watch;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::counters::{self, RuleCounter};
use crate::dataplane::{Backend, Dataplane, Host};
use crate::model::IpFamily;
use crate::settings::Settings;
use crate::system::runtime::{StateDir, now_seconds};
use reload::Daemon;

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
    /// A policy, staged policy or network set has expired (`nodeport-guard.io/expires`).
    Expired,
    /// Another program may have changed what we own (see [`drift`]): repair it.
    Drift(drift::Trigger),
}

impl Event {
    /// Whether the event reads the whole kernel, whatever its sign says (the resync timer and
    /// SIGHUP are the full checks).
    fn reads_whole_kernel(self) -> bool {
        match self {
            Event::Resync | Event::Reload => true,
            // The kernel's sign moved: the cached view is read again anyway, and kept when only
            // our own write moved it.
            Event::PoliciesChanged | Event::AddressesChanged | Event::Drift(_) | Event::Expired => {
                false
            }
        }
    }

    /// Whether the event puts the last good rules back while the files are unusable (invalid,
    /// or a suddenly empty set refused): a file event only says the files are unusable.
    fn repairs_with_last_good(self) -> bool {
        match self {
            // An expiry is enforced on the last good rules too while the files are unusable.
            Event::Resync
            | Event::Reload
            | Event::AddressesChanged
            | Event::Drift(_)
            | Event::Expired => true,
            Event::PoliciesChanged => false,
        }
    }

    /// Whether the event needs nothing done when the files and the host's addresses are those
    /// last applied (the full checks always look at the kernel).
    fn may_skip_unchanged(self) -> bool {
        match self {
            // The files' fingerprint counts what has expired: unchanged, nothing expired since.
            Event::PoliciesChanged | Event::AddressesChanged | Event::Expired => true,
            Event::Resync | Event::Reload | Event::Drift(_) => false,
        }
    }

    /// Whether a change the event finds to make, after a good apply, is drift: another
    /// program changed our rules.
    fn finds_drift(self) -> bool {
        self.drift_trigger().is_some()
    }

    /// Whether "no changes needed" after the event is only worth a debug line: drift checks
    /// also fire on the echo of our own writes and on other programs' changes to their rules.
    fn quiet_when_unchanged(self) -> bool {
        match self {
            Event::Drift(_) => true,
            Event::PoliciesChanged
            | Event::Reload
            | Event::Resync
            | Event::AddressesChanged
            | Event::Expired => false,
        }
    }

    /// What noticed the drift such a change repairs (the `trigger` label).
    fn drift_trigger(self) -> Option<drift::Trigger> {
        match self {
            Event::Drift(trigger) => Some(trigger),
            Event::Resync => Some(drift::Trigger::Resync),
            Event::PoliciesChanged | Event::Reload | Event::AddressesChanged | Event::Expired => {
                None
            }
        }
    }
}

/// Runs the daemon until SIGTERM or SIGINT. The rules stay in place when it stops.
pub fn run(settings: Settings, runner: Arc<dyn Host>) -> Result<ExitCode> {
    let state_dir = StateDir::new(&settings.state_dir);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the event loop")?;
    runtime.block_on(async {
        let Some(_lock) = lock_after_any_confirm_window(&state_dir, runner.as_ref()).await? else {
            tracing::info!("stopped while waiting; nothing was changed");
            return Ok(ExitCode::SUCCESS);
        };
        run_loop(settings, runner, state_dir).await
    })
}

/// Takes the writers' lock for the daemon's life, once no `apply --confirm-timeout` waits
/// for `confirm`. A daemon started during such a window would hold the lock that the rollback
/// watcher needs at the deadline: the rollback would come only when the daemon stops, and
/// take every rule with it. So the daemon waits, without the lock, until the apply is
/// confirmed or rolled back (one whose watcher is gone is rolled back here at its deadline).
/// `None`: stopped by SIGTERM or SIGINT while waiting (SIGHUP changes nothing then).
async fn lock_after_any_confirm_window(
    state_dir: &StateDir,
    runner: &dyn Host,
) -> Result<Option<crate::system::runtime::LockGuard>> {
    let mut said = false;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    loop {
        let waiting = state_dir.pending().ok().flatten();
        match state_dir.lock("nodeport-guard run", false) {
            Ok(lock) => {
                // A failure here (a damaged record, a restore that fails) must not keep the
                // daemon from enforcing the policy files: said, and the daemon goes on.
                if let Err(error) =
                    crate::engine::window::settle_unwatched(state_dir, runner, "nodeport-guard run")
                {
                    tracing::error!("cannot settle an apply nothing watches any more: {error:#}");
                }
                let Ok(Some(pending)) = state_dir.pending() else {
                    return Ok(Some(lock));
                };
                if !said {
                    tracing::warn!(
                        id = %pending.id,
                        rolled_back_in_s = pending.deadline.saturating_sub(now_seconds()),
                        "an apply is waiting for `nodeport-guard confirm`; the daemon starts once it is confirmed or rolled back"
                    );
                    said = true;
                }
            }
            // The watcher holds the lock while it rolls back.
            Err(error)
                if waiting.is_some()
                    && error
                        .downcast_ref::<crate::system::runtime::LockBusy>()
                        .is_some() => {}
            Err(error) => return Err(error.context("refusing to start a second daemon")),
        }
        // systemd's start timeout must not run out while the window is open.
        let _ = sd_notify::notify(&[
            sd_notify::NotifyState::Status(
                "waiting for a pending apply to be confirmed or rolled back",
            ),
            sd_notify::NotifyState::ExtendTimeoutUsec(5_000_000),
        ]);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = hangup.recv() => {}
            _ = terminate.recv() => return Ok(None),
            _ = interrupt.recv() => return Ok(None),
        }
    }
}

/// Connections the kernel keeps for the metrics server until it accepts them (capped by
/// `net.core.somaxconn`, 4,096 by default). A full queue drops new connection requests, and
/// their clients retry a second later: a burst of connections must not push `/healthz` past
/// a probe's timeout while the server catches up.
const METRICS_BACKLOG: u32 = 4096;

/// A listening socket on `address` with a queue of [`METRICS_BACKLOG`], that holds back a
/// connection until its request arrives (for at most [`http::HEAD_TIMEOUT`]; after that the
/// server's own limits close it).
fn listen(address: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    let listener = socket.listen(METRICS_BACKLOG)?;
    let head_timeout = u32::try_from(http::HEAD_TIMEOUT.as_secs()).unwrap_or(u32::MAX);
    if let Err(error) = crate::system::runtime::defer_accept(&listener, head_timeout) {
        tracing::debug!(%error, "connections to /metrics are accepted before their request");
    }
    Ok(listener)
}

/// Serves `/metrics` and `/healthz` on `metricsAddress`, when set.
async fn serve_metrics(
    settings: &Settings,
    runner: &Arc<dyn Host>,
    backend: &'static dyn Backend,
    metrics: &metrics::Shared,
) -> Result<()> {
    let Some(address) = settings.config.metrics_address else {
        return Ok(());
    };
    let listener =
        listen(address).with_context(|| format!("cannot listen on `metricsAddress` {address}"))?;
    let stale_after = settings.config.resync_interval * 3 + Duration::from_secs(30);
    let counter_settings = settings.clone();
    let counter_runner = runner.clone();
    http::start(
        listener.into_std()?,
        metrics.clone(),
        move || read_counters(&counter_settings, counter_runner.as_ref(), backend),
        stale_after,
    )
    .context("cannot start serving /metrics")?;
    tracing::info!(%address, "serving /metrics and /healthz");
    Ok(())
}

async fn run_loop(
    settings: Settings,
    runner: Arc<dyn Host>,
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
    let mut drift_watch = drift::Watch::start(backend, sender.clone());
    serve_metrics(&settings, &runner, backend, &metrics).await?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut config_file = watch::ConfigFile::read(&settings.config_path);
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;

    let drop_log = drops::DropLog::start(&settings, metrics.clone());
    let mut daemon = Daemon::new(settings, backend, runner, state_dir, metrics);
    daemon.writes = watcher.writes();
    daemon.drop_log = drop_log;
    tracing::info!(
        %backend,
        policies = %daemon.settings.config.policies_dir.display(),
        resync = %humantime::format_duration(daemon.settings.config.resync_interval),
        address_notifications = netlink,
        drift_watch = drift_watch.mode,
        "nodeport-guard daemon starting"
    );
    daemon.switch_over();
    let before = drift_watch.reading();
    let reconciled = daemon.handle(Event::Resync);
    if let Some((applied, id)) = daemon.applied_state() {
        drift_watch.follow(applied, id, &daemon.metrics, before, reconciled);
    }
    crate::system::runtime::give_back_memory(true);
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
    // The reload's work before the kernel, done while the debounce runs (see `Daemon::prepare`).
    let mut prepare_at: Option<tokio::time::Instant> = None;
    let mut drift_checks = drift::Limiter::new(tokio::time::Instant::now());
    // When the daemon packs what it applied (`Daemon::rest`): once events stop coming, so
    // that a burst of them (reloads and their echoes) never waits for packing and unpacking;
    // and when it forgets how it built its rules (`Daemon::forget`), after a longer quiet.
    let mut quiet = kept::Quiet::after_event(tokio::time::Instant::now());

    loop {
        let address_deadline = pending_addresses;
        let policies_deadline = file_events.due();
        let expiry_wait = daemon.expiry.wait();
        let drift_deadline = drift_checks.due();
        let event = tokio::select! {
            Some(event) = events.recv() => {
                let now = tokio::time::Instant::now();
                match event {
                    Event::AddressesChanged => {
                        pending_addresses.get_or_insert(now + address_settle);
                    }
                    Event::Drift(trigger) => drift_checks.noticed(now, trigger),
                    Event::PoliciesChanged => {
                        file_events.event(now);
                        daemon.ahead = None;
                        prepare_at = debounce::prepare_at(now, file_events.due());
                    }
                    // These come from the loop's own timers and signals, never on the channel.
                    Event::Reload | Event::Resync | Event::Expired => {
                        tracing::debug!(?event, "ignoring an event sent on the channel");
                    }
                }
                continue;
            }
            () = sleep_until(prepare_at) => {
                prepare_at = None;
                watcher.refresh(); // before the files are read: see `refresh`
                daemon.prepare();
                continue;
            }
            () = sleep_until(policies_deadline) => {
                if watcher.being_written().is_some() {
                    file_events.hold(tokio::time::Instant::now());
                    continue;
                }
                file_events.fired();
                prepare_at = None;
                watcher.refresh();
                Event::PoliciesChanged
            }
            () = sleep_until(quiet.due()) => {
                daemon.quiet(quiet.fire());
                // Whatever ran since the last event (a check after a drift notification
                // reads and parses the kernel's rules) is not what runs at rest.
                crate::system::runtime::give_back_memory(true);
                continue;
            }
            () = sleep_until(address_deadline) => {
                pending_addresses = None;
                Event::AddressesChanged
            }
            () = sleep_until(expiry_wait.map(|wait| tokio::time::Instant::now() + wait)) => {
                // The wall clock is looked at again: the sleep may have been cut short (at
                // most a second) or stretched by a suspend.
                if !daemon.expiry.due() {
                    continue;
                }
                Event::Expired
            }
            () = sleep_until(drift_deadline) => {
                match drift_checks.fire(tokio::time::Instant::now()) {
                    Some(drift::Fire::Check(trigger)) => Event::Drift(trigger),
                    Some(drift::Fire::Limited { first }) => {
                        drift::limited(&daemon.metrics, first);
                        continue;
                    }
                    None => continue,
                }
            }
            _ = hangup.recv() => {
                tracing::info!("SIGHUP: reloading");
                let _ = config_file.warn_if_changed();
                watcher.refresh();
                Event::Reload
            }
            _ = resync.tick() => {
                // A directory recreated while its parent could not be watched is found here.
                watcher.refresh();
                Event::Resync
            }
            _ = watchdog.tick(), if watchdog_every.is_some() => {
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                continue;
            }
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        };
        // The drift watch's reading before the event is handled: what follows compares the
        // kernel with it, so a change made while the event is handled is never taken for the
        // state the handling left.
        let before = drift_watch.reading();
        daemon.files_settling = watcher.being_written().is_some();
        let reconciled = daemon.handle(event);
        if let Some((applied, id)) = daemon.applied_state() {
            drift_watch.follow(applied, id, &daemon.metrics, before, reconciled);
        }
        quiet = kept::Quiet::after_event(tokio::time::Instant::now());
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(&daemon.summary)]);
        crate::system::runtime::give_back_memory(!matches!(event, Event::Drift(_)));
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
    runner: &dyn Host,
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

#[cfg(test)]
mod tests;
