//! The shell around the pure core: everything that reads the host, starts processes or touches
//! files under `/run`, and the NFLOG socket (`nflog`). Programs that read or write the kernel's rules run in `dataplane`.

pub mod host;
pub mod nflog;
pub mod runtime;
pub mod watcher;
