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
pub mod conntrack;
pub mod counters;
pub mod daemon;
pub mod dataplane;
pub mod diagnostic;
pub mod digest;
pub mod drops;
pub mod engine;
pub mod facts;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod fixtures;
pub mod load;
pub mod marks;
pub mod model;
pub mod parallel;
pub mod plan;
pub mod policy_set;
pub mod reconcile;
pub mod revocation;
pub mod ruleset;
pub mod schema;
pub mod selector;
pub mod settings;
pub mod source;
pub mod spec;
pub mod state;
pub mod system;
pub mod trace;
pub mod validate;
