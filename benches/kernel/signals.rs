//! Cleanup on Ctrl-C / SIGTERM.

use std::process::Command;

use crate::support;

/// Daemons this process started, so a signal can stop them before the namespaces go.
pub(crate) struct Registry {
    pub(crate) daemons: std::sync::Mutex<Vec<u32>>,
}

pub(crate) static REGISTRY: Registry = Registry {
    daemons: std::sync::Mutex::new(Vec::new()),
};

impl Registry {
    pub(crate) fn daemon(&self, pid: u32) {
        self.daemons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pid);
    }

    pub(crate) fn forget(&self, pid: u32) {
        self.daemons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&p| p != pid);
    }
}

/// Blocks SIGINT and SIGTERM in every thread and handles them on one: stop our daemons, delete
/// our namespaces (`npgt-<pid>-*`), exit 130. Must run before any other thread starts.
pub(crate) fn handle_signals() {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    if pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None).is_err() {
        return;
    }
    std::thread::spawn(move || {
        let Ok(signal) = set.wait() else { return };
        eprintln!("\n{signal}: stopping the daemons and removing the namespaces");
        let daemons = REGISTRY
            .daemons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for pid in daemons {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let prefix = format!("npgt-{}-", std::process::id());
        if let Ok(entries) = std::fs::read_dir("/run/netns") {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with(&prefix) {
                    let _ = Command::new(support::cmd::program_path("ip"))
                        .args(["netns", "del", &name])
                        .status();
                }
            }
        }
        std::process::exit(130);
    });
}
