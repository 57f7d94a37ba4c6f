//! The daemon's `nodeport_guard_exposed_ports{reachable,via}` gauge: the exposure audit
//! (`crate::exposure`) after each reload or resync that applied, under the policies it
//! applied.
//!
//! Reading the sockets and nat tables and tracing every port costs more than a small reload,
//! so the audit runs on a thread of its own and never delays the loop. One runs at a time; a
//! reload that comes in meanwhile leaves its policies for the next round, so the gauge always
//! ends up describing the last policies applied.

use std::sync::{Arc, Mutex, PoisonError};

use super::metrics::Shared;
use crate::config::Config;
use crate::dataplane::Runner;
use crate::exposure;
use crate::facts::HostFacts;
use crate::model::Model;

/// The policies to audit next and whether a thread is auditing.
#[derive(Default)]
struct Slot {
    next: Option<(Model, Config, HostFacts)>,
    running: bool,
}

static SLOT: Mutex<Slot> = Mutex::new(Slot {
    next: None,
    running: false,
});

/// Audits the ports under `model` in the background and sets the gauge in `metrics`.
pub(super) fn refresh(
    metrics: &Shared,
    runner: &Arc<dyn Runner>,
    model: &Model,
    config: &Config,
    facts: &HostFacts,
) {
    let mut slot = SLOT.lock().unwrap_or_else(PoisonError::into_inner);
    slot.next = Some((model.clone(), config.clone(), facts.clone()));
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

fn audit_until_done(metrics: &Shared, runner: &dyn Runner) {
    loop {
        let next = {
            let mut slot = SLOT.lock().unwrap_or_else(PoisonError::into_inner);
            let next = slot.next.take();
            slot.running = next.is_some();
            next
        };
        let Some((model, config, facts)) = next else {
            return;
        };
        match exposure::scan::inventory(runner) {
            Ok(inventory) => {
                let exposed = exposure::assess(&inventory, &model, &config, &facts);
                if let Ok(mut metrics) = metrics.lock() {
                    metrics.exposed_ports = Some(exposure::counts(&exposed));
                }
            }
            Err(error) => tracing::warn!(%error, "cannot audit the exposed ports"),
        }
    }
}
