//! What the engine writes down in the state directory after a change reached the kernel. A
//! state directory that cannot be written never undoes a change: the caller hears about it.

use crate::counters::AppliedIndex;
use crate::plan::Plan;
use crate::system::runtime::StateDir;

/// Records which kernel rules carry which policy rule (and the policy files they came from);
/// a failure is logged, since `status` then cannot name the policy rules of the counters.
pub fn applied(state_dir: &StateDir, index: &AppliedIndex) {
    if let Err(error) = state_dir.set_applied(index) {
        tracing::warn!(
            dir = %state_dir.path().display(),
            "cannot write the state directory, so `status` cannot name the policy rules of the counters: {error:#}"
        );
    }
}

/// Records a change written to the kernel by `by` for `status`; a failure is logged.
pub fn change(state_dir: &StateDir, by: &str, plan: &Plan) {
    if let Err(error) = state_dir.record_change(by, plan.summary().counts()) {
        tracing::warn!(
            dir = %state_dir.path().display(),
            "cannot write the state directory, so `status` cannot show the last change: {error:#}"
        );
    }
}
