//! A plan saved by `plan --out`, and applied exactly by `apply PLANFILE`.

use serde::{Deserialize, Serialize};

use super::Planned;
use crate::counters::AppliedIndex;
use crate::dataplane::Backend;
use crate::model::IpFamily;
use crate::state::State;

/// A plan saved by `plan --out`.
#[derive(Debug, Serialize, Deserialize)]
pub struct SavedPlan {
    /// Format version.
    pub format: u32,
    /// The backend the plan was made for.
    #[serde(with = "crate::dataplane::serde_by_name")]
    pub backend: &'static dyn Backend,
    /// The families it programs.
    pub families: Vec<IpFamily>,
    /// Fingerprint of what the kernel held when the plan was made.
    pub observed: String,
    /// Fingerprint of the policy files the plan was made from.
    pub policies: String,
    /// The state to apply.
    pub desired: State,
    /// Where the policies were read from.
    pub policies_dir: String,
    /// Which kernel rules carry which policy rule's verdict.
    pub index: AppliedIndex,
}

impl SavedPlan {
    /// The format this version writes and reads.
    pub const FORMAT: u32 = 1;

    /// The plan of `planned` to save, for the policies read from `policies_dir`.
    pub fn of(planned: &Planned, policies_dir: &std::path::Path) -> SavedPlan {
        let prepared = &planned.prepared;
        SavedPlan {
            format: SavedPlan::FORMAT,
            backend: prepared.backend,
            families: prepared.compiled.ruleset.ip_families(),
            observed: planned.observed.fingerprint(),
            index: prepared.index(),
            policies: prepared.policies_fingerprint.clone(),
            desired: prepared.desired.clone(),
            policies_dir: policies_dir.display().to_string(),
        }
    }
}
