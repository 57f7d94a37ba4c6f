//! The rollback watcher's process: started detached from the terminal by `apply
//! --confirm-timeout`, stopped by `confirm`.

use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result};

/// The rollback watchers' log in the state directory.
pub const WATCHER_LOG: &str = "watcher.log";

/// Starts `nodeport-guard --state-dir DIR __rollback-watch ID` in its own process group (Ctrl-C
/// on the terminal that ran `apply` must not stop the rollback); returns its pid.
pub fn spawn(state_dir: &Path, id: &str) -> Result<u32> {
    let exe = std::env::current_exe()
        .context("cannot find this program to start the rollback watcher")?;
    // What the watcher says (its errors, what it did) goes to a log in the state directory:
    // it has no terminal, and a rollback that did not happen must be explainable.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(state_dir.join(WATCHER_LOG))
        .map_or_else(|_| Stdio::null(), Stdio::from);
    let child = Command::new(exe)
        .args(arguments(state_dir, id))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start the rollback watcher")?;
    Ok(child.id())
}

/// The watcher's command line after the program. An id is a base64url digest and may start
/// with `-`: after `--` it is the id, not an option (an id read as an option left the watcher
/// unable to start, and the apply without its rollback, once in 64 applies).
pub(crate) fn arguments(state_dir: &Path, id: &str) -> [std::ffi::OsString; 5] {
    [
        "--state-dir".into(),
        state_dir.into(),
        "__rollback-watch".into(),
        "--".into(),
        id.into(),
    ]
}

/// Whether process `pid` is the rollback watcher of apply `id` (its command line says so): a
/// pid alone may have been reused by another program since the watcher ended.
pub fn is_watching(pid: u32, id: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let words: Vec<&[u8]> = cmdline.split(|byte| *byte == 0).collect();
    words.contains(&b"__rollback-watch".as_slice()) && words.contains(&id.as_bytes())
}

/// Tells a watcher its apply was confirmed (SIGTERM); one that is gone already is no error.
pub fn stop(pid: u32) {
    // 0 (or a pid too large to be one) would signal a process group: ours.
    let Ok(pid) = i32::try_from(pid) else { return };
    if pid <= 0 {
        return;
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    );
}
