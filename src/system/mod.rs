//! The shell around the pure core: everything that reads the host, starts processes or touches
//! files under `/run`, the NFLOG socket (`nflog`), and the
//! listening sockets and their processes (`sockets`, `sock_diag` over netlink). Programs that read or write the kernel's rules run in `dataplane`.

pub mod host;
pub mod nflog;
pub mod runtime;
pub mod sockets;
pub mod watcher;
