//! Runtime state under `/run/nodeport-guard`: the lock every writer takes, the pending apply
//! waiting for `confirm`, and the index that maps kernel rules back to policy rules.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::counters::AppliedIndex;
use crate::dataplane::Backend;
use crate::model::IpFamily;
use crate::reconcile::View;
use crate::state::State;

/// The file of [`StateDir::view`].
const VIEW: &str = "view.json";

/// The runtime state directory.
#[derive(Clone, Debug)]
pub struct StateDir {
    path: PathBuf,
}

/// Holding the lock; released when dropped. Empty when the state directory cannot be written
/// (read-only or full `/run`): reconciling goes on without the lock rather than stop.
#[derive(Debug)]
pub struct LockGuard {
    _lock: Option<Flock<File>>,
}

/// Whether an IO error means "this file system cannot take writes now", as opposed to a
/// permission or programming problem.
fn is_unwritable(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(code) if code == nix::libc::EROFS || code == nix::libc::ENOSPC || code == nix::libc::EDQUOT
    )
}

/// Who holds the lock we could not take.
#[derive(Debug, thiserror::Error)]
#[error("another nodeport-guard ({holder}) is changing the rules; lock file `{path}`")]
pub struct LockBusy {
    /// What the holder wrote into the lock file.
    pub holder: String,
    /// The lock file.
    pub path: String,
}

impl StateDir {
    /// The state directory at `path` (created when first needed).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StateDir { path: path.into() }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn ensure(&self) -> Result<()> {
        fs_err::create_dir_all(&self.path).with_context(|| {
            format!(
                "cannot create the state directory `{}`",
                self.path.display()
            )
        })
    }

    /// Takes the writers' lock, waiting at most `patience` for it (then failing as
    /// [`StateDir::lock`] without waiting does, naming the holder).
    pub fn lock_within(&self, who: &str, patience: std::time::Duration) -> Result<LockGuard> {
        let until = std::time::Instant::now() + patience;
        loop {
            match self.lock(who, false) {
                Err(error)
                    if error.downcast_ref::<LockBusy>().is_some()
                        && std::time::Instant::now() < until =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                taken => return taken,
            }
        }
    }

    /// Takes the writers' lock, waiting for it when `wait`, and records `who` holds it.
    pub fn lock(&self, who: &str, wait: bool) -> Result<LockGuard> {
        if self.path.exists() && !self.path.is_dir() {
            anyhow::bail!(
                "the state directory `{}` is not a directory; give `--state-dir` a directory (it is created when missing)",
                self.path.display()
            );
        }
        let opened = std::fs::create_dir_all(&self.path).and_then(|()| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(self.file("lock"))
        });
        let path = self.file("lock");
        let file = match opened {
            Ok(file) => file,
            Err(error) if is_unwritable(&error) => {
                tracing::warn!(
                    %error,
                    dir = %self.path.display(),
                    "cannot write the state directory; going on without the lock that keeps two nodeport-guards apart"
                );
                return Ok(LockGuard { _lock: None });
            }
            Err(error) => {
                return Err(anyhow::Error::new(error)
                    .context(format!("cannot open the lock file `{}`", path.display())));
            }
        };
        let arg = if wait {
            FlockArg::LockExclusive
        } else {
            FlockArg::LockExclusiveNonblock
        };
        let mut attempt = Flock::lock(file, arg);
        // A signal may interrupt the wait; that is not someone else holding the lock.
        while let Err((file, nix::errno::Errno::EINTR)) = attempt {
            attempt = Flock::lock(file, arg);
        }
        let mut lock = match attempt {
            Ok(lock) => lock,
            Err((mut file, _)) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(LockBusy {
                    holder: holder.trim().to_owned(),
                    path: path.display().to_string(),
                }
                .into());
            }
        };
        // Who holds it is only for messages; a full disk must not stop us here.
        if lock.set_len(0).is_ok() && lock.rewind().is_ok() {
            let _ = write!(lock, "{who}, pid {}", std::process::id());
        }
        Ok(LockGuard { _lock: Some(lock) })
    }

    fn read_json<T: for<'de> Deserialize<'de>>(&self, name: &str) -> Result<Option<T>> {
        let path = self.file(name);
        match fs_err::read_to_string(&path) {
            Ok(text) => {
                Ok(Some(serde_json::from_str(&text).with_context(|| {
                    format!(
                        "`{}` is damaged (nodeport-guard writes it whole, so another program or a full disk changed it); delete it to go on without what it recorded",
                        path.display()
                    )
                })?))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Writes a file atomically (temporary file, then rename).
    fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<()> {
        self.ensure()?;
        let path = self.file(name);
        let temporary = self.file(&format!(".{name}.tmp"));
        fs_err::write(&temporary, serde_json::to_vec_pretty(value)?)?;
        fs_err::rename(&temporary, &path)?;
        Ok(())
    }

    fn remove(&self, name: &str) -> Result<()> {
        match fs_err::remove_file(self.file(name)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error.into()),
            _ => Ok(()),
        }
    }

    /// The apply waiting for confirmation, if any.
    pub fn pending(&self) -> Result<Option<PendingApply>> {
        self.read_json("pending-apply.json")
    }

    /// Records an apply waiting for confirmation.
    pub fn set_pending(&self, pending: &PendingApply) -> Result<()> {
        self.write_json("pending-apply.json", pending)
    }

    /// Forgets the pending apply.
    pub fn clear_pending(&self) -> Result<()> {
        self.remove("pending-apply.json")
    }

    /// What happened to the last unconfirmed apply.
    pub fn last_rollback(&self) -> Result<Option<RollbackRecord>> {
        self.read_json("last-rollback.json")
    }

    /// Records what happened to an unconfirmed apply.
    pub fn set_last_rollback(&self, record: &RollbackRecord) -> Result<()> {
        self.write_json("last-rollback.json", record)
    }

    /// The index of the rules last applied.
    pub fn applied(&self) -> Result<Option<AppliedIndex>> {
        self.read_json("applied.json")
    }

    /// The policy files the last apply recorded ([`AppliedIndex::policy_files`]), without
    /// building the rest of the index: at 10,000 policies the index names 172,000 rules, and
    /// `plan` and `apply` ask for the files up to four times.
    pub fn applied_policy_files(&self) -> Result<Option<crate::counters::AppliedFiles>> {
        self.read_json::<crate::counters::AppliedFiles>("applied.json")
    }

    /// Forgets the index of the applied rules (the rules it named are gone).
    pub fn clear_applied(&self) -> Result<()> {
        self.remove("applied.json")
    }

    /// Records the index of the rules just applied.
    pub fn set_applied(&self, index: &AppliedIndex) -> Result<()> {
        self.write_json("applied.json", index)
    }

    /// The view of the kernel the last command kept ([`crate::reconcile::view`]); `None`
    /// when there is none or it cannot be read (a damaged view is only a slower command).
    pub fn view(&self) -> Option<View> {
        self.read_json(VIEW)
            .inspect_err(|error| tracing::debug!("ignoring the saved view: {error:#}"))
            .ok()
            .flatten()
    }

    /// Keeps `view` for the next command; a state directory that cannot be written only
    /// makes the next command read the whole kernel.
    pub fn set_view(&self, view: &View) {
        let written = self.ensure().and_then(|()| {
            // Named after this process: two commands saving at once each rename a whole file.
            let path = self.file(VIEW);
            let temporary = self.file(&format!(".{VIEW}.{}.tmp", std::process::id()));
            fs_err::write(&temporary, serde_json::to_vec(view)?)?;
            fs_err::rename(&temporary, &path)?;
            Ok(())
        });
        if let Err(error) = written {
            tracing::debug!("cannot keep a view of the kernel: {error:#}");
        }
    }

    /// The last change written to the kernel, by any command or the daemon.
    pub fn last_apply(&self) -> Result<Option<ApplyRecord>> {
        self.read_json("last-apply.json")
    }

    /// Records a change written to the kernel, now, by `by`.
    pub fn record_change(&self, by: &str, summary: String) -> Result<()> {
        self.write_json(
            "last-apply.json",
            &ApplyRecord {
                at: now_seconds(),
                by: by.to_owned(),
                summary,
            },
        )
    }

    /// The daemon's status, if a daemon wrote one.
    pub fn daemon_status(&self) -> Result<Option<serde_json::Value>> {
        self.read_json("daemon.json")
    }

    /// Writes the daemon's status.
    pub fn set_daemon_status(&self, status: &serde_json::Value) -> Result<()> {
        self.write_json("daemon.json", status)
    }
}

/// An apply that is rolled back unless confirmed in time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PendingApply {
    /// Random id, so a watcher only acts on its own apply.
    pub id: String,
    /// The backend that wrote it.
    #[serde(with = "crate::dataplane::serde_by_name")]
    pub backend: &'static dyn Backend,
    /// Families programmed.
    pub families: Vec<IpFamily>,
    /// Seconds since the epoch after which it is rolled back.
    pub deadline: u64,
    /// The rollback watcher's pid.
    pub watcher_pid: Option<u32>,
    /// What the kernel held before: restored on rollback.
    pub previous: State,
    /// The index of the rules applied before (for `status`): restored on rollback.
    #[serde(default)]
    pub previous_index: Option<AppliedIndex>,
}

/// A change written to the kernel.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyRecord {
    /// Seconds since the epoch.
    pub at: u64,
    /// Who wrote it: `apply`, `cleanup`, `rollback` or `daemon`.
    pub by: String,
    /// What changed, in words (the plan's summary line).
    pub summary: String,
}

/// What became of an unconfirmed apply.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RollbackRecord {
    /// The pending apply's id.
    pub id: String,
    /// Seconds since the epoch.
    pub at: u64,
    /// What happened, in words.
    pub outcome: String,
}

/// Whether a process with this pid runs (on this host, in this pid namespace).
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // Signal 0 checks without sending; EPERM means it runs as another user.
    pid > 0
        && matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Ok(()) | Err(nix::errno::Errno::EPERM)
        )
}

/// Seconds since the epoch.
pub fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// What a resting daemon gives back after its work: the heap memory freed
/// ([`release_free_memory`]) and, after work that ran much of its code (a reload, not the
/// check after a drift notification, which may come every second), the pages of its code
/// ([`release_code_pages`]).
pub fn give_back_memory(ran_much_code: bool) {
    release_free_memory();
    if ran_much_code {
        release_code_pages();
    }
}

/// Gives the heap memory freed since the last call back to the system: mimalloc (the
/// program's allocator, `src/main.rs`) otherwise returns freed pages a second or more later,
/// and only as its own timers see fit; a daemon would sit near the peak of its last reload
/// (parsing and compiling every policy) until then. glibc's heap, which only C code of the C
/// library uses, is trimmed too.
#[allow(unsafe_code)]
pub fn release_free_memory() {
    // SAFETY: neither call has preconditions: each only returns pages its allocator holds free.
    unsafe {
        libmimalloc_sys::mi_collect(true);
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        nix::libc::malloc_trim(0);
    }
}

/// Unmaps the pages of this program's own machine code from the process, so that a resting
/// daemon keeps resident only the code it runs at rest. Parsing, validating and compiling a
/// thousand policies run most of the binary's 8 MB of code once, and the kernel maps every
/// page of it in, with its neighbours, for good: about 7 MiB of a resting daemon's resident
/// memory (`docs/performance.md`). The pages stay in the page cache, clean and shared: the
/// next reload maps back what it runs with minor faults (no disk read unless the kernel has
/// reclaimed them meanwhile, which it may do just the same while they are mapped).
///
/// Only the read-only mappings of the program's own file (its code, and its read-only data:
/// string constants, tables, about 1 MiB more of a resting daemon) that hold no private page
/// are touched: nothing was written to them, so dropping them loses nothing. The relocated
/// part of the read-only data (`.data.rel.ro`) is private memory written at start that only
/// looks read-only: its mapping holds anonymous pages and is left alone.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn release_code_pages() {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    let here = release_code_pages as *const () as usize;
    for (start, end) in own_code_ranges(&smaps, here) {
        // SAFETY: the range is a whole mapping of the file this very function's code is
        // mapped from, private and not writable, with no private page in it (nothing was
        // written to it: no relocation, breakpoint or uprobe): MADV_DONTNEED only drops its
        // page table entries, and the next access maps the same file pages again.
        unsafe {
            nix::libc::madvise(
                start as *mut nix::libc::c_void,
                end - start,
                nix::libc::MADV_DONTNEED,
            );
        }
    }
}

/// Other systems keep their code pages.
#[cfg(not(target_os = "linux"))]
pub fn release_code_pages() {}

/// In `/proc/self/smaps` text, the read-only private mappings (code and data) of the file
/// (device and inode) whose mapping holds the address `here`, leaving out any with a private
/// page (`Anonymous:` above 0 kB: relocated data, or a page written by a debugger's breakpoint
/// or a uprobe): `(start, end)`.
fn own_code_ranges(smaps: &str, here: usize) -> Vec<(usize, usize)> {
    struct Mapping<'a> {
        start: usize,
        end: usize,
        read_only: bool,
        file: Option<(&'a str, &'a str)>,
        anonymous_kb: u64,
    }
    let mut mappings: Vec<Mapping<'_>> = Vec::new();
    for line in smaps.lines() {
        if let Some(value) = line.strip_prefix("Anonymous:") {
            if let Some(last) = mappings.last_mut() {
                last.anonymous_kb = value
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(u64::MAX);
            }
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(_offset), Some(device), Some(inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let has_path = fields.next().is_some();
        mappings.push(Mapping {
            start,
            end,
            read_only: perms == "r-xp" || perms == "r--p",
            file: (has_path && inode != "0").then_some((device, inode)),
            anonymous_kb: u64::MAX,
        });
    }
    let Some(own) = mappings
        .iter()
        .find(|mapping| mapping.start <= here && here < mapping.end)
        .and_then(|mapping| mapping.file)
    else {
        return Vec::new();
    };
    mappings
        .iter()
        .filter(|mapping| {
            mapping.read_only
                && mapping.file == Some(own)
                && mapping.anonymous_kb == 0
                && mapping.start < mapping.end
        })
        .map(|mapping| (mapping.start, mapping.end))
        .collect()
}

/// Lowers the scheduling priority of the calling thread to `nice` (Linux keeps a nice value
/// per thread; threads and processes it starts inherit it). The metrics endpoint reads
/// the counters so, so that on a busy node a storm of scrapes takes CPU from the reloads last.
/// Best effort.
#[allow(unsafe_code)]
pub fn lower_this_threads_priority(nice: i32) {
    let thread = nix::unistd::gettid().as_raw();
    let Ok(thread) = nix::libc::id_t::try_from(thread) else {
        return;
    };
    // SAFETY: `setpriority` only changes the nice value of the thread named; no memory is
    // passed.
    unsafe {
        nix::libc::setpriority(nix::libc::PRIO_PROCESS, thread, nice);
    }
}

/// Asks the kernel to hand a connection accepted by `listener` to the program only once its
/// first bytes have arrived, or after about `seconds` (`TCP_DEFER_ACCEPT`; nginx's `deferred`).
/// Until then a connection that sends nothing holds no descriptor of ours and no place in the
/// queue of connections waiting to be accepted, so a flood of idle connections cannot delay a
/// request. Best effort: an error leaves the socket as it was.
#[allow(unsafe_code)]
pub fn defer_accept(listener: &impl std::os::fd::AsRawFd, seconds: u32) -> std::io::Result<()> {
    let seconds = nix::libc::c_int::try_from(seconds).unwrap_or(nix::libc::c_int::MAX);
    let length = nix::libc::socklen_t::try_from(std::mem::size_of::<nix::libc::c_int>())
        .unwrap_or(nix::libc::socklen_t::MAX);
    // SAFETY: the value passed is a live `c_int` whose size is given; the descriptor is
    // borrowed for the call.
    let result = unsafe {
        nix::libc::setsockopt(
            listener.as_raw_fd(),
            nix::libc::IPPROTO_TCP,
            nix::libc::TCP_DEFER_ACCEPT,
            std::ptr::from_ref(&seconds).cast(),
            length,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::own_code_ranges;

    #[test]
    fn only_the_program_s_own_unwritten_read_only_mappings_are_released() {
        let smaps = "\
55bfc6db3000-55bfc6f84000 r--p 00000000 08:01 1234 /usr/sbin/nodeport-guard
Rss: 1024 kB
Anonymous: 0 kB
55bfc6f84000-55bfc7777000 r-xp 001d0000 08:01 1234 /usr/sbin/nodeport-guard
Rss: 7420 kB
Anonymous: 0 kB
55bfc7777000-55bfc77b2000 r--p 009c2000 08:01 1234 /usr/sbin/nodeport-guard
Anonymous: 236 kB
55bfe2090000-55bfe4025000 rw-p 00000000 00:00 0 [heap]
Anonymous: 20200 kB
7fa7481b2000-7fa748308000 r-xp 00028000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous: 0 kB
7fa7c0000000-7fa7c0100000 r-xp 00000000 08:02 1234 /mnt/other/program
Anonymous: 0 kB
7ffc0bdfc000-7ffc0bdfe000 r-xp 00000000 00:00 0 [vdso]
Anonymous: 0 kB
";
        let here = 0x55bf_c700_0000;
        assert_eq!(
            own_code_ranges(smaps, here),
            vec![
                (0x55bf_c6db_3000, 0x55bf_c6f8_4000),
                (0x55bf_c6f8_4000, 0x55bf_c777_7000)
            ],
            "the relocated data, the heap, libc, and the same inode on another device (another \
             file) are left alone"
        );
        // A page written (a breakpoint, a uprobe): that mapping is left alone.
        let written = smaps.replacen(
            "Rss: 7420 kB\nAnonymous: 0 kB",
            "Rss: 7420 kB\nAnonymous: 4 kB",
            1,
        );
        assert_eq!(
            own_code_ranges(&written, here),
            vec![(0x55bf_c6db_3000, 0x55bf_c6f8_4000)]
        );
        // An address in no mapping of a file: nothing.
        assert!(own_code_ranges(smaps, 0x7ffc_0bdf_c100).is_empty());
    }

    /// Resident kB of this program's executable mappings.
    fn own_code_resident_kb() -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        let exe = exe.to_string_lossy();
        let mut in_code = false;
        let mut total = 0;
        for line in smaps.lines() {
            if line.contains(" r-xp ") || line.contains(" r--p ") || line.contains(" rw-p ") {
                in_code = line.contains(" r-xp ") && line.ends_with(exe.as_ref());
            } else if in_code && let Some(value) = line.strip_prefix("Rss:") {
                total += value
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        }
        total
    }

    #[test]
    fn the_code_pages_are_given_back() {
        let before = own_code_resident_kb();
        super::release_code_pages();
        let after = own_code_resident_kb();
        eprintln!("code resident: {before} kB -> {after} kB");
        assert!(after < before, "{before} kB -> {after} kB");
    }
}
