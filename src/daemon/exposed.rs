//! The daemon's `nodeport_guard_exposed_ports{reachable,via}` gauge: the exposure audit
//! (`crate::exposure`) after each reload or resync that applied, under the policies it
//! applied.
//!
//! Reading the sockets and nat tables and tracing every port costs more than a small reload,
//! so the audit runs on a thread of its own and never delays the loop. One runs at a time; a
//! reload that comes in meanwhile leaves its policies for the next round, so the gauge always
//! ends up describing the last policies applied. Tracing is the expensive part (every piece of
//! the source space the policies cut, through every policy): it is skipped when the policy
//! files, the host, the config and the inventory are those of the last audit, as at most
//! resyncs.
//!
//! The audit waits for the reloads to settle (a second without one) and runs at the lowest
//! priority: at 1,000 policies it traces for about two seconds of CPU, which on a small node
//! would otherwise compete with the next reload (`docs/performance.md`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::metrics::Shared;
use crate::config::Config;
use crate::dataplane::Host;
use crate::exposure;
use crate::facts::HostFacts;
use crate::model::Model;

/// What an audit is of: the policies (with their files' fingerprint), the config, the host.
struct Inputs {
    fingerprint: String,
    model: Model,
    config: Config,
    facts: HostFacts,
}

/// How long the audit waits after the last reload before it starts.
const SETTLE: Duration = Duration::from_secs(1);

/// The audit thread's nice value: the lowest priority there is.
const NICE: i32 = 19;

/// The policies to audit next and when they came, whether a thread is auditing, and what the
/// last audit saw.
struct Slot {
    next: Option<Inputs>,
    since: Option<Instant>,
    running: bool,
    last: Option<(String, exposure::Inventory)>,
}

static SLOT: Mutex<Slot> = Mutex::new(Slot {
    next: None,
    since: None,
    running: false,
    last: None,
});

/// Audits the ports under `model` (read from files of `fingerprint`) in the background and
/// sets the gauge in `metrics`.
pub(super) fn refresh(
    metrics: &Shared,
    runner: &Arc<dyn Host>,
    fingerprint: &str,
    model: &Model,
    config: &Config,
    facts: &HostFacts,
) {
    let mut slot = SLOT.lock().unwrap_or_else(PoisonError::into_inner);
    slot.next = Some(Inputs {
        fingerprint: fingerprint.to_owned(),
        model: model.clone(),
        config: config.clone(),
        facts: facts.clone(),
    });
    slot.since = Some(Instant::now());
    if slot.running {
        return;
    }
    slot.running = true;
    let (metrics, runner) = (metrics.clone(), runner.clone());
    let spawned = std::thread::Builder::new()
        .name("exposure".into())
        .spawn(move || audit_until_done(&metrics, runner.as_ref()));
    if let Err(error) = spawned {
        slot.running = false;
        tracing::warn!(%error, "cannot start the exposure audit");
    }
}

fn audit_until_done(metrics: &Shared, runner: &dyn Host) {
    crate::system::runtime::lower_this_threads_priority(NICE);
    loop {
        let next = settled();
        let Some(inputs) = next else {
            // The audit ends after the reload gave its freed memory back: what the audit
            // freed (hundreds of MiB at its peak with 1,000 policies) is given back here, or
            // the daemon would rest at that peak until the next event.
            crate::system::runtime::give_back_memory(true);
            return;
        };
        let inventory = match exposure::scan::inventory(runner) {
            Ok(inventory) => inventory,
            Err(error) => {
                tracing::warn!(%error, "cannot audit the exposed ports");
                continue;
            }
        };
        // The metrics' address too: the unit tests run several daemons in one process.
        let key = format!(
            "{:p} {} {:?} {:?}",
            Arc::as_ptr(metrics),
            inputs.fingerprint,
            inputs.config,
            inputs.facts
        );
        let seen = {
            let slot = SLOT.lock().unwrap_or_else(PoisonError::into_inner);
            slot.last
                .as_ref()
                .is_some_and(|(last, known)| *last == key && *known == inventory)
        };
        if seen {
            continue;
        }
        let exposed = exposure::assess(&inventory, &inputs.model, &inputs.config, &inputs.facts);
        if let Ok(mut metrics) = metrics.lock() {
            metrics.exposed_ports = Some(exposure::counts(&exposed));
        }
        SLOT.lock().unwrap_or_else(PoisonError::into_inner).last = Some((key, inventory));
    }
}

/// The policies to audit next, once no reload has come for [`SETTLE`].
fn settled() -> Option<Inputs> {
    loop {
        let wait = {
            let mut slot = SLOT.lock().unwrap_or_else(PoisonError::into_inner);
            let quiet = slot.since.map_or(SETTLE, |since| since.elapsed());
            if quiet >= SETTLE {
                let next = slot.next.take();
                slot.running = next.is_some();
                return next;
            }
            SETTLE - quiet
        };
        std::thread::sleep(wait);
    }
}
