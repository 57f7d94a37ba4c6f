//! Watching the policy directory. The watcher only sends events; the daemon's loop reloads.
//!
//! The directory is watched without recursion, and so is its parent, so that removing and
//! recreating the directory (or swapping it for another) is seen too. Every way files change
//! in practice ends in an event for a policy file name or for `..data`: an in-place write, an
//! editor's write-to-temp-then-rename, confd's hidden temp file renamed into place, kubelet's
//! `..data_tmp` symlink renamed over `..data`. An overflowing event queue arrives as a rescan
//! request. Any of these makes the loop re-read everything; the content hash then decides
//! whether anything changed.
//!
//! Events are sent as they come; the loop waits for `debounce` of quiet before it reloads. So
//! nothing here wakes up while nothing changes (a ticking debouncer would, tens of times a
//! second).

use std::path::{Path, PathBuf};

use notify::{RecursiveMode, Watcher as _};
use tokio::sync::mpsc::UnboundedSender;

use super::Event;
use crate::load::is_policy_file_name;

/// Whether an event on `path` can change the policy set in `dir`: an event on the directory,
/// on one of its policy files or `..data`, or on a directory above it (created again after it
/// was removed with the policy directory in it).
pub fn is_relevant(path: &Path, dir: &Path) -> bool {
    if dir.starts_with(path) {
        return true;
    }
    match (
        path.parent(),
        path.file_name().and_then(|name| name.to_str()),
    ) {
        (Some(parent), Some(name)) if parent == dir => {
            is_policy_file_name(name) || name == "..data"
        }
        _ => false,
    }
}

/// Opening and reading (notify reports inotify's IN_OPEN) change nothing; the daemon's own
/// reads would otherwise trigger the next reload.
fn is_read_only(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    matches!(kind, notify::EventKind::Access(access) if *access != AccessKind::Close(AccessMode::Write))
}

/// The policy directory watcher.
pub struct DirectoryWatcher {
    watcher: notify::RecommendedWatcher,
    dir: PathBuf,
    parent: Option<PathBuf>,
    /// While the directory's parent is missing too: the nearest directory above it that
    /// exists, watched until the way down is there again.
    ancestor: Option<PathBuf>,
}

impl DirectoryWatcher {
    /// Starts watching `dir` (and its parent), sending [`Event::PoliciesChanged`] for every
    /// event that may change the policy set (the loop debounces them).
    pub fn start(dir: &Path, events: UnboundedSender<Event>) -> notify::Result<Self> {
        // notify reports absolute paths; a relative directory would match none of them, and
        // would have no parent to watch.
        let dir = &std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let watched_dir = dir.to_path_buf();
        let handler = move |result: notify::Result<notify::Event>| match result {
            Ok(event) => {
                let relevant = event.need_rescan()
                    || (!is_read_only(&event.kind)
                        && event
                            .paths
                            .iter()
                            .any(|path| is_relevant(path, &watched_dir)));
                if relevant {
                    let _ = events.send(Event::PoliciesChanged);
                }
            }
            Err(error) => {
                tracing::warn!(%error, "watching the policy directory failed; re-reading it");
                let _ = events.send(Event::PoliciesChanged);
            }
        };
        let watcher = notify::recommended_watcher(handler)?;
        let parent = dir
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty());
        let mut watcher = DirectoryWatcher {
            watcher,
            dir: dir.to_path_buf(),
            parent,
            ancestor: None,
        };
        watcher.refresh();
        Ok(watcher)
    }

    /// Re-establishes the watches: after the directory (or its parent) was removed and created
    /// again, the old watch is gone. Called before the files are read for a reload (also for
    /// the work done ahead during the debounce), so nothing written after it is missed.
    pub fn refresh(&mut self) {
        if let Some(ancestor) = self.ancestor.take() {
            let _ = self.watcher.unwatch(&ancestor);
        }
        if let Some(parent) = &self.parent {
            let _ = self.watcher.unwatch(parent);
            if parent.is_dir()
                && let Err(error) = self.watcher.watch(parent, RecursiveMode::NonRecursive)
            {
                tracing::warn!(%error, parent = %parent.display(), "cannot watch the policy directory's parent; a recreated directory is only noticed at the next resync");
            }
        }
        let _ = self.watcher.unwatch(&self.dir);
        if self.dir.is_dir() {
            if let Err(error) = self.watcher.watch(&self.dir, RecursiveMode::NonRecursive) {
                tracing::warn!(%error, dir = %self.dir.display(), "cannot watch the policy directory");
            }
            return;
        }
        if self.parent.as_ref().is_some_and(|parent| parent.is_dir()) {
            return;
        }
        // The nearest directory above that exists: its events for the way down count.
        let ancestor = self
            .dir
            .ancestors()
            .skip(2)
            .find(|ancestor| ancestor.is_dir())
            .map(Path::to_path_buf);
        if let Some(ancestor) = ancestor
            && self
                .watcher
                .watch(&ancestor, RecursiveMode::NonRecursive)
                .is_ok()
        {
            self.ancestor = Some(ancestor);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_policy_files_and_configmap_swaps_are_relevant() {
        let dir = Path::new("/etc/nodeport-guard/policies");
        assert!(is_relevant(&dir.join("a.yaml"), dir));
        assert!(is_relevant(&dir.join("..data"), dir));
        assert!(is_relevant(dir, dir));
        assert!(!is_relevant(&dir.join(".a.yaml.swp"), dir));
        assert!(!is_relevant(&dir.join("4913"), dir));
        assert!(!is_relevant(&dir.join(".a.yaml123456"), dir));
        assert!(!is_relevant(
            Path::new("/etc/nodeport-guard/config.yaml"),
            dir
        ));
        assert!(!is_relevant(&dir.join("sub/a.yaml"), dir));
        // The way down to a directory removed with its parent, created again.
        assert!(is_relevant(Path::new("/etc/nodeport-guard"), dir));
        assert!(!is_relevant(Path::new("/etc/other"), dir));
    }
}
