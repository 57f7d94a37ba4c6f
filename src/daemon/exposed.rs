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

use std::sync::{Arc, Mutex, PoisonError};

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

/// The policies to audit next, whether a thread is auditing, and what the last audit saw.
struct Slot {
    next: Option<Inputs>,
    running: bool,
    last: Option<(String, exposure::Inventory)>,
}

static SLOT: Mutex<Slot> = Mutex::new(Slot {
    next: None,
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
    loop {
        let next = {
            let mut slot = SLOT.lock().unwrap_or_else(PoisonError::into_inner);
            let next = slot.next.take();
            slot.running = next.is_some();
            next
        };
        let Some(inputs) = next else {
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
