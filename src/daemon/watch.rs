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

/// Policy files that a program is writing: data written (inotify's IN_MODIFY) and the file
/// not closed since (IN_CLOSE_WRITE). A reload waits for them: a file written in pieces
/// (`scp`, a shell redirect, a slow generator) may be valid YAML half-way, say, with its
/// Allow rules and without the Deny that follows, and applying that would open the ports
/// until the rest arrives. A rename into place or a removal ends the wait for that name too,
/// and so does an overflowed event queue; an entry no write has refreshed for
/// [`OpenWrites::FORGET_AFTER`] is forgotten (a close event lost), so a reload is never held
/// back for good.
#[derive(Debug, Default)]
pub struct OpenWrites {
    since: std::collections::HashMap<PathBuf, std::time::Instant>,
}

impl OpenWrites {
    /// How long a file without a new write counts as open.
    pub const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

    /// Takes `event` (in the policy directory `dir`, or on one of the files its symlinks
    /// lead to, `targets`) into account at `now`.
    pub fn note(
        &mut self,
        event: &notify::Event,
        dir: &Path,
        targets: &std::collections::BTreeSet<PathBuf>,
        now: std::time::Instant,
    ) {
        use notify::EventKind;
        use notify::event::{AccessKind, AccessMode, ModifyKind};
        if event.need_rescan() {
            self.since.clear();
            return;
        }
        let policy_files = event.paths.iter().filter(|path| {
            targets.contains(*path)
                || path.parent() == Some(dir)
                    && path
                        .file_name()
                        .and_then(|name| name.to_str())
                        .is_some_and(is_policy_file_name)
        });
        match event.kind {
            EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => {
                for path in policy_files {
                    self.since.insert(path.clone(), now);
                }
            }
            EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Remove(_)
            | EventKind::Modify(ModifyKind::Name(_)) => {
                for path in policy_files {
                    self.since.remove(path);
                }
            }
            _ => {}
        }
    }

    /// A policy file still being written at `now`, if any.
    pub fn still_open(&mut self, now: std::time::Instant) -> Option<PathBuf> {
        self.since.retain(|file, since| {
            let open = now.saturating_duration_since(*since) < Self::FORGET_AFTER;
            if !open {
                tracing::warn!(
                    file = %file.display(),
                    "a policy file was written to and not closed for 30 s; reading it as it is"
                );
            }
            open
        });
        self.since.keys().min().cloned()
    }
}

/// The open writes as the watcher notes them, for a second look after the files are read:
/// a write that began while they were read is seen there (see [`Daemon`](super::Daemon)).
#[derive(Clone, Debug, Default)]
pub struct Writes(Option<std::sync::Arc<std::sync::Mutex<OpenWrites>>>);

impl Writes {
    /// Whether a policy file is being written now.
    pub fn any_open(&self) -> bool {
        self.0.as_ref().is_some_and(|writes| {
            writes
                .lock()
                .is_ok_and(|mut writes| writes.still_open(std::time::Instant::now()).is_some())
        })
    }
}

/// How recently a policy file may have been written for a reload that no file event asked
/// for to take it as it is: the watcher notes a write only once its thread has read the
/// event, so a resync (or a drift check, a SIGHUP) that reads a file just written may come
/// before that note. Such a reload keeps the last good rules; the file events that follow
/// (or the next resync, when events were lost) apply the file.
pub const QUIET: std::time::Duration = std::time::Duration::from_millis(500);

/// A policy file in `dir` (or the file a policy symlink there leads to) last modified less
/// than `within` before now, if any.
pub fn written_within(dir: &Path, within: std::time::Duration) -> Option<PathBuf> {
    let now = std::time::SystemTime::now();
    std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
        let path = entry.path();
        let name = entry.file_name();
        if !name.to_str().is_some_and(is_policy_file_name) {
            return None;
        }
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
        // A time ahead of now (a clock set back) counts as recent.
        let recent = now
            .duration_since(modified)
            .map_or(true, |age| age < within);
        recent.then_some(path)
    })
}

/// The config file as the daemon read it at start: it is read only then (the backend, the
/// mark bits, the listeners follow from it), so a change is said, not applied.
pub struct ConfigFile {
    path: PathBuf,
    /// As read at start.
    digest: Option<String>,
    /// As last said to differ from that.
    said: Option<String>,
}

impl ConfigFile {
    /// The config file at `path` as it is now.
    pub fn read(path: &Path) -> ConfigFile {
        let digest = Self::digest(path);
        ConfigFile {
            path: path.to_path_buf(),
            said: digest.clone(),
            digest,
        }
    }

    fn digest(path: &Path) -> Option<String> {
        std::fs::read_to_string(path)
            .ok()
            .map(|text| crate::digest::hash(&text))
    }

    /// Warns (once per change) when the file differs from the one read at start; true when
    /// it did.
    pub fn warn_if_changed(&mut self) -> bool {
        let now = Self::digest(&self.path);
        let changed = now != self.digest && now != self.said;
        if now == self.digest {
            self.said.clone_from(&now);
        }
        if changed {
            tracing::warn!(
                config = %self.path.display(),
                "the config file changed; the daemon reads it only when it starts: restart it to use the change (the policy files are reloaded now)"
            );
            self.said = now;
        }
        changed
    }
}

/// The policy directory watcher.
pub struct DirectoryWatcher {
    watcher: notify::RecommendedWatcher,
    dir: PathBuf,
    parent: Option<PathBuf>,
    /// While the directory's parent is missing too: the nearest directory above it that
    /// exists, watched until the way down is there again.
    ancestor: Option<PathBuf>,
    /// The policy files being written.
    writes: std::sync::Arc<std::sync::Mutex<OpenWrites>>,
    /// The file last said to be still open, in the log.
    said_open: Option<PathBuf>,
    /// Where the policy files that are symlinks lead.
    targets: std::sync::Arc<std::sync::Mutex<Targets>>,
}

/// The files that policy files which are symbolic links lead to, and the directories that hold
/// them: a file edited where it lives (outside the policy directory, or in a ConfigMap's
/// timestamped folder, `sed -i --follow-symlinks`) changes the policies as much as one in it.
#[derive(Debug, Default)]
struct Targets {
    files: std::collections::BTreeSet<PathBuf>,
    dirs: std::collections::BTreeSet<PathBuf>,
}

impl Targets {
    /// The targets of the symlinked policy files in `dir` now.
    fn of(dir: &Path) -> Targets {
        let mut targets = Targets::default();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return targets;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let is_link = entry.file_type().is_ok_and(|kind| kind.is_symlink());
            if !is_link || !name.to_str().is_some_and(is_policy_file_name) {
                continue;
            }
            let Ok(target) = std::fs::canonicalize(entry.path()) else {
                continue;
            };
            if let Some(parent) = target.parent()
                && parent != dir
            {
                targets.dirs.insert(parent.to_path_buf());
                targets.files.insert(target);
            }
        }
        targets
    }
}

impl DirectoryWatcher {
    /// Starts watching `dir` (and its parent), sending [`Event::PoliciesChanged`] for every
    /// event that may change the policy set (the loop debounces them).
    pub fn start(dir: &Path, events: UnboundedSender<Event>) -> notify::Result<Self> {
        // notify reports absolute paths; a relative directory would match none of them, and
        // would have no parent to watch.
        let dir = &std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let watched_dir = dir.to_path_buf();
        let writes = std::sync::Arc::new(std::sync::Mutex::new(OpenWrites::default()));
        let noted = writes.clone();
        let targets = std::sync::Arc::new(std::sync::Mutex::new(Targets::default()));
        let followed = targets.clone();
        let handler = move |result: notify::Result<notify::Event>| match result {
            Ok(event) => {
                let followed = followed
                    .lock()
                    .map(|targets| targets.files.clone())
                    .unwrap_or_default();
                if let Ok(mut writes) = noted.lock() {
                    writes.note(&event, &watched_dir, &followed, std::time::Instant::now());
                }
                let relevant = event.need_rescan()
                    || (!is_read_only(&event.kind)
                        && event.paths.iter().any(|path| {
                            is_relevant(path, &watched_dir) || followed.contains(path)
                        }));
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
            writes,
            said_open: None,
            targets,
        };
        watcher.refresh();
        Ok(watcher)
    }

    /// Watches the directories holding the files the policy files' symlinks lead to (and
    /// no longer those it led to before).
    ///
    /// The lock on the targets is let go before notify is called: notify's calls wait for its
    /// event thread, which takes that lock in the handler.
    fn follow_links(&mut self) {
        let now = Targets::of(&self.dir);
        let (gone, new): (Vec<PathBuf>, Vec<PathBuf>) = {
            let Ok(mut targets) = self.targets.lock() else {
                return;
            };
            let gone = targets.dirs.difference(&now.dirs).cloned().collect();
            let new = now.dirs.difference(&targets.dirs).cloned().collect();
            *targets = now;
            (gone, new)
        };
        let watched = [&self.dir, self.parent.as_ref().unwrap_or(&self.dir)];
        for gone in gone.iter().filter(|gone| !watched.contains(gone)) {
            let _ = self.watcher.unwatch(gone);
        }
        for new in new.iter().filter(|new| !watched.contains(new)) {
            let _ = self.watcher.watch(new, RecursiveMode::NonRecursive);
        }
    }

    /// The open writes, to look at again later (see [`Writes`]).
    pub fn writes(&self) -> Writes {
        Writes(Some(self.writes.clone()))
    }

    /// A policy file a program is still writing (see [`OpenWrites`]), if any; said once per
    /// file in the log.
    pub fn being_written(&mut self) -> Option<PathBuf> {
        let open = self
            .writes
            .lock()
            .ok()?
            .still_open(std::time::Instant::now());
        if let Some(file) = &open
            && self.said_open.as_ref() != Some(file)
        {
            tracing::info!(file = %file.display(), "a policy file is still being written; the reload waits until it is closed");
        }
        self.said_open.clone_from(&open);
        open
    }

    /// Re-establishes the watches: after the directory (or its parent) was removed and created
    /// again, the old watch is gone. Called before the files are read for a reload (also for
    /// the work done ahead during the debounce), so nothing written after it is missed.
    pub fn refresh(&mut self) {
        if let Some(ancestor) = self.ancestor.take() {
            let _ = self.watcher.unwatch(&ancestor);
        }
        // Watched again without an unwatch first (inotify keeps the watch of a directory still
        // there, and makes a new one for a directory created again), so no event is lost in
        // between.
        if let Some(parent) = &self.parent
            && parent.is_dir()
            && let Err(error) = self.watcher.watch(parent, RecursiveMode::NonRecursive)
        {
            tracing::warn!(%error, parent = %parent.display(), "cannot watch the policy directory's parent; a recreated directory is only noticed at the next resync");
        }
        self.follow_links();
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
    fn the_files_symlinked_policy_files_lead_to_are_followed() {
        let root = tempfile::tempdir().expect("temporary directory");
        let root = std::fs::canonicalize(root.path()).expect("canonical");
        let dir = root.join("policies");
        let outside = root.join("elsewhere");
        let stamped = dir.join("..2026_12_07");
        for path in [&dir, &outside, &stamped] {
            std::fs::create_dir_all(path).expect("mkdir");
        }
        std::fs::write(outside.join("a.yaml"), "").expect("write");
        std::fs::write(stamped.join("b.yaml"), "").expect("write");
        std::fs::write(dir.join("plain.yaml"), "").expect("write");
        std::os::unix::fs::symlink(outside.join("a.yaml"), dir.join("a.yaml")).expect("link");
        // A ConfigMap mount: name -> ..data/name, ..data -> ..<timestamp>.
        std::os::unix::fs::symlink("..2026_12_07", dir.join("..data")).expect("link");
        std::os::unix::fs::symlink("..data/b.yaml", dir.join("b.yaml")).expect("link");
        // Not a policy file name: not followed.
        std::os::unix::fs::symlink(outside.join("a.yaml"), dir.join("notes.txt")).expect("link");
        let targets = Targets::of(&dir);
        assert_eq!(
            targets.files,
            [stamped.join("b.yaml"), outside.join("a.yaml")].into()
        );
        assert_eq!(targets.dirs, [stamped, outside].into());
    }

    #[test]
    fn a_changed_config_file_is_said_once() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("config.yaml");
        let mut config = ConfigFile::read(&path);
        assert!(!config.warn_if_changed(), "missing, and still missing");
        std::fs::write(&path, "earlyDrop: false\n").expect("write");
        assert!(config.warn_if_changed());
        assert!(!config.warn_if_changed(), "said once");
        std::fs::write(&path, "earlyDrop: true\n").expect("write");
        assert!(config.warn_if_changed());
        // Back to what the daemon started with (no file): nothing to restart for.
        std::fs::remove_file(&path).expect("remove");
        assert!(!config.warn_if_changed());
    }

    #[test]
    fn a_policy_file_written_and_not_closed_is_being_written() {
        use notify::event::{
            AccessKind, AccessMode, CreateKind, DataChange, ModifyKind, RemoveKind, RenameMode,
        };
        use notify::{Event, EventKind};
        let dir = Path::new("/etc/nodeport-guard/policies");
        let file = dir.join("a.yaml");
        let event = |kind: EventKind, path: &Path| Event::new(kind).add_path(path.to_path_buf());
        let written = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
        let start = std::time::Instant::now();
        let mut writes = OpenWrites::default();
        let none = std::collections::BTreeSet::new();
        // Created (a symlink, a hard link, `touch`): nothing to wait for.
        writes.note(
            &event(EventKind::Create(CreateKind::File), &file),
            dir,
            &none,
            start,
        );
        assert_eq!(writes.still_open(start), None);
        // Written in pieces, then closed.
        writes.note(&event(written, &file), dir, &none, start);
        assert_eq!(writes.still_open(start), Some(file.clone()));
        writes.note(&event(closed, &file), dir, &none, start);
        assert_eq!(writes.still_open(start), None);
        // Removed or renamed while open: that name is done with.
        writes.note(&event(written, &file), dir, &none, start);
        writes.note(
            &event(EventKind::Remove(RemoveKind::File), &file),
            dir,
            &none,
            start,
        );
        assert_eq!(writes.still_open(start), None);
        writes.note(&event(written, &file), dir, &none, start);
        let renamed = EventKind::Modify(ModifyKind::Name(RenameMode::From));
        writes.note(&event(renamed, &file), dir, &none, start);
        assert_eq!(writes.still_open(start), None);
        // Files that are not policy files, and files elsewhere, do not count.
        writes.note(&event(written, &dir.join(".a.yaml.swp")), dir, &none, start);
        writes.note(&event(written, &dir.join("sub/a.yaml")), dir, &none, start);
        assert_eq!(writes.still_open(start), None);
        // A close that never came is forgotten; so is everything after a queue overflow.
        writes.note(&event(written, &file), dir, &none, start);
        assert_eq!(
            writes.still_open(start + OpenWrites::FORGET_AFTER),
            None,
            "forgotten"
        );
        writes.note(&event(written, &file), dir, &none, start);
        writes.note(
            &Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan),
            dir,
            &none,
            start,
        );
        assert_eq!(writes.still_open(start), None);
        // A file a policy symlink leads to, written where it lives.
        let target = Path::new("/srv/policies/a.yaml");
        let targets = std::collections::BTreeSet::from([target.to_path_buf()]);
        writes.note(&event(written, target), dir, &targets, start);
        assert_eq!(writes.still_open(start), Some(target.to_path_buf()));
        writes.note(&event(closed, target), dir, &targets, start);
        assert_eq!(writes.still_open(start), None);
    }

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
