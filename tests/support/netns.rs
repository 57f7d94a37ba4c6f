//! Named network namespaces that clean up after themselves, and running code
//! inside them.
//!
//! Namespaces are per *thread* on Linux: a thread that calls `setns(2)` on
//! `/run/netns/<name>` lives in that namespace from then on, and any socket it
//! creates stays in that namespace even when used from another thread. The
//! harness therefore does socket work on short-lived dedicated threads, never
//! on the test's own thread, so the test thread always stays in the root
//! namespace.

use std::ffi::OsStr;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};
use std::thread::JoinHandle;

use nix::sched::{CloneFlags, setns};

use super::cmd::{self, CmdOutput};

/// Prefix of every namespace the harness creates; `ip netns list | grep
/// npgt-` finds leftovers.
pub const NETNS_PREFIX: &str = "npgt-";

/// Directory where `ip netns` keeps its bind mounts.
const NETNS_DIR: &str = "/run/netns";

/// Source of unique suffixes, shared by everything this process names.
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// `ip netns add` mounts `/run/netns` on first use; two concurrent first uses
/// race on that mount, so creations and deletions in this process are
/// serialized (they take milliseconds, so this costs nothing noticeable).
static NETNS_LOCK: Mutex<()> = Mutex::new(());

/// A fresh, process-unique number for naming things.
pub fn unique_id() -> u32 {
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// Runs `ip netns <args>` under [`NETNS_LOCK`].
fn ip_netns(args: &[&str]) -> CmdOutput {
    let _guard = NETNS_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut full = vec!["netns"];
    full.extend_from_slice(args);
    cmd::run("ip", &full, None)
}

/// Deletes namespaces left behind by earlier test processes that were killed
/// before their `Drop` ran (e.g. by a CI timeout). Only names whose embedded
/// pid no longer exists are touched, so parallel test binaries are safe.
fn reap_stale_namespaces() {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(NETNS_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != me && !PathBuf::from(format!("/proc/{pid}")).exists() {
            let out = ip_netns(&["del", &name]);
            if !out.success() {
                eprintln!("warning: could not remove stale namespace {name}: {out}");
            }
        }
    }
}

/// Checks that this process can create and delete a namespace; used by the
/// kernel-test gate. Returns the reason as an error if it cannot.
pub fn probe_netns_support() -> Result<(), String> {
    let name = format!("{NETNS_PREFIX}{}-probe", std::process::id());
    let add = ip_netns(&["add", &name]);
    if !add.success() {
        return Err(format!("cannot create a network namespace: {add}"));
    }
    let del = ip_netns(&["del", &name]);
    if !del.success() {
        return Err(format!("cannot delete network namespace {name}: {del}"));
    }
    Ok(())
}

/// Opens the namespace file and moves the calling thread into it.
fn enter(name: &str) -> Result<(), String> {
    let path = format!("{NETNS_DIR}/{name}");
    let file = File::open(&path).map_err(|e| format!("cannot open {path}: {e}"))?;
    setns(&file, CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns({path}) failed: {e}"))
}

/// A named network namespace (`ip netns add`), deleted again on drop, also
/// when the test panics. `lo` is up.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace named `npgt-<pid>-<n>` and brings `lo` up. Panics
    /// with the `ip` output if that fails.
    #[track_caller]
    pub fn new() -> Netns {
        static REAP: Once = Once::new();
        REAP.call_once(reap_stale_namespaces);

        let name = format!("{NETNS_PREFIX}{}-{}", std::process::id(), unique_id());
        let add = ip_netns(&["add", &name]);
        if !add.success() {
            panic!("cannot create network namespace {name}: {add}");
        }
        // From here on `Drop` removes the namespace, also if the next step panics.
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// The namespace's name as shown by `ip netns list`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path of the namespace's bind mount, e.g. `/run/netns/npgt-4711-3`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(&self.name)
    }

    /// Runs `ip netns exec <ns> <program> <args…>` and returns its output
    /// whatever the exit status.
    #[track_caller]
    pub fn exec<S: AsRef<OsStr>>(&self, program: &str, args: &[S]) -> CmdOutput {
        self.exec_inner(program, args, None)
    }

    /// Like [`Netns::exec`] but feeds `stdin` to the program (e.g. an
    /// `iptables-restore` or `nft -f -` script).
    #[track_caller]
    pub fn exec_with_stdin<S: AsRef<OsStr>>(
        &self,
        program: &str,
        args: &[S],
        stdin: &[u8],
    ) -> CmdOutput {
        self.exec_inner(program, args, Some(stdin))
    }

    /// Runs a program in the namespace that must succeed and returns its
    /// stdout; panics with command line, status, stdout and stderr otherwise.
    #[track_caller]
    pub fn exec_ok<S: AsRef<OsStr>>(&self, program: &str, args: &[S]) -> String {
        self.exec(program, args).expect_success().stdout
    }

    #[track_caller]
    fn exec_inner<S: AsRef<OsStr>>(
        &self,
        program: &str,
        args: &[S],
        stdin: Option<&[u8]>,
    ) -> CmdOutput {
        // The absolute path is resolved here because `ip netns exec` searches
        // the PATH it inherited, which may lack the sbin directories.
        let program = cmd::program_path(program);
        let mut full: Vec<&OsStr> = vec![
            OsStr::new("netns"),
            OsStr::new("exec"),
            OsStr::new(&self.name),
            program.as_os_str(),
        ];
        full.extend(args.iter().map(AsRef::as_ref));
        cmd::run("ip", &full, stdin)
    }

    /// Runs `ip -n <ns> <args…>`, which must succeed, and returns stdout.
    /// Cheaper than `exec("ip", …)` because no mount namespace is set up.
    #[track_caller]
    pub fn ip(&self, args: &[&str]) -> String {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        cmd::run_ok("ip", &full)
    }

    /// Sets a sysctl inside the namespace, e.g.
    /// `sysctl("net.ipv4.ip_forward", "1")`. Panics with the key and error on
    /// failure.
    #[track_caller]
    pub fn sysctl(&self, key: &str, value: &str) {
        let path = sysctl_path(key);
        let result = self.run(|| std::fs::write(&path, format!("{value}\n")));
        if let Err(e) = result {
            panic!(
                "cannot set sysctl {key}={value} in {}: {e} ({})",
                self.name,
                path.display()
            );
        }
    }

    /// Reads a sysctl inside the namespace (trimmed).
    #[track_caller]
    pub fn read_sysctl(&self, key: &str) -> String {
        let path = sysctl_path(key);
        match self.run(|| std::fs::read_to_string(&path)) {
            Ok(value) => value.trim().to_string(),
            Err(e) => panic!("cannot read sysctl {key} in {}: {e}", self.name),
        }
    }

    /// Runs `f` on a fresh thread that has entered this namespace and returns
    /// its result. `/proc/sys/net` and every socket created by `f` belong to
    /// this namespace. A panic in `f` is propagated to the caller.
    #[track_caller]
    pub fn run<F, R>(&self, f: F) -> R
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        let name = self.name.as_str();
        std::thread::scope(|scope| {
            let handle = scope.spawn(move || {
                if let Err(e) = enter(name) {
                    panic!("cannot enter network namespace {name}: {e}");
                }
                f()
            });
            match handle.join() {
                Ok(value) => value,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Spawns a named, detached thread that enters this namespace and then
    /// runs `f`; used for long-running servers. If entering fails, the thread
    /// panics, which surfaces through the returned handle.
    pub fn spawn<F, R>(&self, thread_name: &str, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let name = self.name.clone();
        std::thread::Builder::new()
            .name(thread_name.to_string())
            .spawn(move || {
                if let Err(e) = enter(&name) {
                    panic!("cannot enter network namespace {name}: {e}");
                }
                f()
            })
            .unwrap_or_else(|e| panic!("cannot spawn thread {thread_name}: {e}"))
    }
}

impl Default for Netns {
    fn default() -> Self {
        Netns::new()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace also destroys its veth ends (and with them
        // the peers in other namespaces), its firewall rules, ipsets and
        // conntrack table. Panicking here could abort an unwinding test, so a
        // failure is only reported.
        let out = ip_netns(&["del", &self.name]);
        if !out.success() {
            eprintln!(
                "warning: could not delete network namespace {}: {out}",
                self.name
            );
        }
    }
}

fn sysctl_path(key: &str) -> PathBuf {
    PathBuf::from("/proc/sys").join(key.replace('.', "/"))
}

/// Creates a veth pair with one end named `a_if` in `a` and the other named
/// `b_if` in `b`, both still down.
///
/// The pair is created directly inside the namespaces with a single netlink
/// request (`ip -n a link add a_if type veth peer name b_if netns b`), so it
/// never exists in the root namespace (no name clashes with the host or other
/// labs, nothing to move) and there is no half-made state to clean up: either
/// both ends exist or neither does. Deleting either namespace removes both.
#[track_caller]
pub fn link_veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str) {
    assert!(
        a_if.len() <= 15 && b_if.len() <= 15,
        "interface names must be at most 15 bytes: {a_if:?}, {b_if:?}"
    );
    a.ip(&[
        "link",
        "add",
        a_if,
        "type",
        "veth",
        "peer",
        "name",
        b_if,
        "netns",
        b.name(),
    ]);
}
