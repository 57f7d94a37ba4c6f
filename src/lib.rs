//! nodeport-guard: source-IP whitelists for published ports, from Calico-shaped policy files.
//!
//! The pipeline, top to bottom (see `ARCHITECTURE.md`):
//!
//! ```text
//! files ──load──▶ SourceFile ──parse──▶ RawResource ──validate──▶ Model (+ Diagnostics)
//!       ──compile──▶ Ruleset ──render──▶ iptables-restore / ipset / nft text
//! kernel ──observe──▶ Observed ──plan(desired, observed)──▶ Plan ──apply──▶ kernel
//! ```

pub mod cli;
pub mod commands;
pub mod compile;
pub mod config;
pub(crate) mod conntrack;
pub mod counters;
pub(crate) mod daemon;
pub mod dataplane;
pub mod diagnostic;
pub(crate) mod digest;
pub mod disk_cache;
pub(crate) mod drops;
pub(crate) mod engine;
pub(crate) mod exposure;
pub mod facts;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod fixtures;
pub(crate) mod grants;
pub mod load;
pub(crate) mod marks;
pub mod model;
pub(crate) mod parallel;
pub mod plan;
pub mod policy_set;
pub mod reconcile;
pub(crate) mod revocation;
pub mod ruleset;
pub mod schema;
pub mod selector;
pub(crate) mod settings;
pub mod source;
pub(crate) mod spec;
pub mod state;
pub(crate) mod system;
pub mod trace;
pub mod validate;
