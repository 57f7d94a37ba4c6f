//! A `nodeport-guard` process running in the background, started by
//! [`Guard::spawn`](super::guard::Guard::spawn): its pid, its log, signals,
//! and the kill of its whole process group when it is dropped.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::guard::SETTLE_TIMEOUT;

/// A nodeport-guard process running in the background (see
/// [`Guard::spawn`]). Dropping it kills its whole process group (the
/// program and any `iptables-restore` it started) and reaps it.
pub struct Background {
    child: std::process::Child,
    log: PathBuf,
}

impl fmt::Debug for Background {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Background")
            .field("pid", &self.child.id())
            .field("log", &self.log)
            .finish()
    }
}

impl Background {
    /// Wraps a started process whose stdout and stderr go to `log`.
    pub(super) fn new(child: std::process::Child, log: PathBuf) -> Background {
        Background { child, log }
    }

    /// The pid of nodeport-guard (also its process group id).
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(i32::MAX)
    }

    /// Everything it wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` to nodeport-guard itself (not its children).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal);
    }

    /// Whether the process is still running (not yet exited).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `SIGKILL` to nodeport-guard alone, as a crash or the OOM killer
    /// would do it: programs it started keep running until they finish.
    /// Returns after nodeport-guard is reaped and every process of its
    /// group is gone.
    #[track_caller]
    pub fn kill9(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
        self.wait_group_gone();
    }

    /// Waits up to `timeout` for the process to exit; returns its exit
    /// status, or `None` if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut status = None;
        super::wait_until(timeout, Duration::from_millis(20), || {
            status = self.child.try_wait().ok().flatten();
            status.is_some()
        });
        status
    }

    /// Waits until no process of the group is left (orphaned children of
    /// a killed nodeport-guard finish on their own).
    #[track_caller]
    fn wait_group_gone(&self) {
        let group = nix::unistd::Pid::from_raw(-self.pid());
        let gone = super::wait_until(SETTLE_TIMEOUT, Duration::from_millis(10), || {
            nix::sys::signal::kill(group, None).is_err()
        });
        assert!(gone, "processes of group {} are still running", self.pid());
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(-self.pid()),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = self.child.wait();
        }
    }
}
