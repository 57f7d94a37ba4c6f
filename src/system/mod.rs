//! The shell around the pure core: everything that reads the host, runs programs or touches
//! files under `/run`. Nothing outside this module (and the daemon) does IO on the kernel.

pub mod host;
pub mod runtime;
