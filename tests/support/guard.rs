//! Running the real `nodeport-guard` binary against a [`Lab`]'s node, and
//! reading back what it (and everyone else) left in the node's kernel.
//!
//! A [`Guard`] owns a temporary directory with `config.yaml`, `policies/`
//! and `state/`, so every test has its own runtime state (lock, pending
//! confirmations) and tests can run in parallel. Every command runs inside
//! the node namespace with `--config`, `--policies`, `--state-dir` and the
//! lab's `--backend`, exactly as an operator would type it on the node.
//!
//! [`Snapshot`] captures `iptables-save` / `ip6tables-save` of the lab's
//! flavour and `ipset save`, normalized so that two snapshots of the same
//! rules compare equal (timestamps and packet counters removed), and can be
//! split into "ours" (anything mentioning `npg`) and "everyone else's".

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cmd::CmdOutput;
use super::lab::{Backend, Family, Lab};
use super::sock::ConnectError;
use super::{CONNECT_TIMEOUT, DROP_TIMEOUT};

/// The binary under test, built by cargo for this test run. (Cargo tells only integration
/// tests where it is; the examples and benches that share this harness find the binary
/// themselves and never use this.)
pub const BIN: &str = match option_env!("CARGO_BIN_EXE_nodeport-guard") {
    Some(path) => path,
    None => "nodeport-guard",
};

/// The node name every test configures; policies and host endpoints refer
/// to it.
pub const NODE_NAME: &str = "node1";

/// How long to wait for asynchronous kernel changes (a rollback) to show.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often to poll while waiting.
pub const POLL: Duration = Duration::from_millis(100);

/// The `--backend` value that matches a lab flavour.
pub fn backend_arg(backend: Backend) -> &'static str {
    match backend {
        Backend::Legacy => "iptables-legacy",
        Backend::Nft => "iptables-nft",
        Backend::Nftables => "nftables",
    }
}

/// One operator's view of the node: a config file, a policy directory and a
/// state directory (all in a temporary directory removed on drop), and the
/// lab whose node runs the commands.
pub struct Guard<'lab> {
    lab: &'lab Lab,
    dir: tempfile::TempDir,
    /// The `--backend` value passed to every command.
    backend_arg: &'static str,
    /// The `--state-dir` passed to every command.
    state_dir: PathBuf,
    /// Extra environment (`env K=V …`) for every command, e.g. a `PATH` with
    /// wrapper scripts in front.
    env: Vec<(String, String)>,
}

impl fmt::Debug for Guard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl<'lab> Guard<'lab> {
    /// A guard with the minimal config `nodeName: node1`.
    #[track_caller]
    pub fn new(lab: &'lab Lab) -> Guard<'lab> {
        Guard::with_config(lab, "")
    }

    /// A guard whose config is `nodeName: node1` followed by `extra` (YAML
    /// lines of the config file, e.g. `"logActions: [Deny, Allow]\n"`).
    #[track_caller]
    pub fn with_config(lab: &'lab Lab, extra: &str) -> Guard<'lab> {
        let dir = tempfile::Builder::new()
            .prefix("npg-kernel-test-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let state_dir = dir.path().join("state");
        let guard = Guard {
            lab,
            dir,
            backend_arg: backend_arg(lab.backend()),
            state_dir,
            env: Vec::new(),
        };
        std::fs::create_dir(guard.policies_dir())
            .unwrap_or_else(|e| panic!("cannot create the policy directory: {e}"));
        guard.write_config(extra);
        guard
    }

    /// Rewrites the config file: `nodeName: node1` plus `extra`.
    #[track_caller]
    pub fn write_config(&self, extra: &str) {
        let text = format!("nodeName: {NODE_NAME}\n{extra}");
        write_file(&self.config_path(), &text);
    }

    /// The lab this guard runs in.
    pub fn lab(&self) -> &'lab Lab {
        self.lab
    }

    /// `<tmp>/config.yaml`.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    /// `<tmp>/policies`.
    pub fn policies_dir(&self) -> PathBuf {
        self.dir.path().join("policies")
    }

    /// The state directory every command gets: `<tmp>/state` unless
    /// [`Guard::with_state_dir`] chose another.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone()
    }

    /// Uses the native nftables backend (`--backend nftables`) instead of
    /// the lab's iptables flavour. The lab's own DNAT rules stay in
    /// iptables-nft (use a [`Backend::Nft`] lab), which is how kube-proxy's
    /// rules and ours live side by side on such nodes.
    pub fn native_nftables(mut self) -> Self {
        self.backend_arg = "nftables";
        self
    }

    /// Passes `--state-dir <path>` instead of `<tmp>/state`.
    pub fn with_state_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.state_dir = path.into();
        self
    }

    /// Runs every command with `key=value` in its environment (through
    /// `env`), e.g. a `PATH` that puts wrapper scripts first.
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The `--backend` value every command gets.
    pub fn backend_arg(&self) -> &'static str {
        self.backend_arg
    }

    /// The program and arguments of a command: `[env K=V…] BIN --config …
    /// --policies … --state-dir … --backend … <args…>`.
    fn command_line(&self, args: &[&str]) -> (String, Vec<String>) {
        let mut full: Vec<String> = Vec::new();
        let program = if self.env.is_empty() {
            BIN.to_owned()
        } else {
            full.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));
            full.push(BIN.to_owned());
            "env".to_owned()
        };
        for (flag, value) in [
            ("--config", path_str(&self.config_path()).to_owned()),
            ("--policies", path_str(&self.policies_dir()).to_owned()),
            ("--state-dir", path_str(&self.state_dir).to_owned()),
            ("--backend", self.backend_arg.to_owned()),
        ] {
            full.push(flag.to_owned());
            full.push(value);
        }
        full.extend(args.iter().map(|a| (*a).to_owned()));
        (program, full)
    }

    /// A path in the temporary directory (e.g. for a saved plan).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `policies/<file>` and returns its path.
    #[track_caller]
    pub fn write_policy(&self, file: &str, yaml: &str) -> PathBuf {
        let path = self.policies_dir().join(file);
        write_file(&path, yaml);
        path
    }

    /// Removes `policies/<file>`.
    #[track_caller]
    pub fn remove_policy(&self, file: &str) {
        let path = self.policies_dir().join(file);
        std::fs::remove_file(&path)
            .unwrap_or_else(|e| panic!("cannot remove {}: {e}", path.display()));
    }

    /// Runs `nodeport-guard --config … --policies … --state-dir … --backend
    /// … <args…>` inside the node namespace and returns its output whatever
    /// the exit status. Stdin is not a terminal.
    #[track_caller]
    pub fn run(&self, args: &[&str]) -> CmdOutput {
        let (program, full) = self.command_line(args);
        self.lab.node().exec(&program, &full)
    }

    /// Starts the same command as [`Guard::run`] in the background, in a
    /// process group of its own, with stdout and stderr going to
    /// `<tmp>/<log>`. `ip netns exec` and `env` replace themselves with the
    /// program, so [`Background::pid`] is nodeport-guard's own pid. The
    /// process group is killed when the returned value is dropped.
    #[track_caller]
    pub fn spawn(&self, args: &[&str], log: &str) -> Background {
        use std::os::unix::process::CommandExt as _;
        let (program, full) = self.command_line(args);
        let log_path = self.path(log);
        let file = std::fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let stderr = file
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot duplicate a file handle: {e}"));
        let program = super::cmd::program_path(&program);
        let mut command = std::process::Command::new(super::cmd::program_path("ip"));
        command
            .args(["netns", "exec", self.lab.node().name()])
            .arg(&program)
            .args(&full)
            .stdin(std::process::Stdio::null())
            .stdout(file)
            .stderr(stderr)
            .process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        Background {
            child,
            log: log_path,
        }
    }

    /// Runs a command that must exit with `code`; panics with the full
    /// output otherwise. Returns the output.
    #[track_caller]
    pub fn run_expect(&self, args: &[&str], code: i32) -> CmdOutput {
        let out = self.run(args);
        if out.status.code() != Some(code) {
            panic!("expected exit status {code}: {out}");
        }
        out
    }

    /// `apply --yes`, which must succeed.
    #[track_caller]
    pub fn apply(&self) -> CmdOutput {
        self.run_expect(&["apply", "--yes"], 0)
    }

    /// `cleanup --yes`, which must succeed.
    #[track_caller]
    pub fn cleanup(&self) -> CmdOutput {
        self.run_expect(&["cleanup", "--yes"], 0)
    }

    /// `plan --detailed-exitcode`: its exit status (0 no changes, 2 changes,
    /// 1 error) and output.
    #[track_caller]
    pub fn plan_detailed(&self) -> (i32, CmdOutput) {
        let out = self.run(&["plan", "--detailed-exitcode"]);
        let code = out
            .status
            .code()
            .unwrap_or_else(|| panic!("plan was killed by a signal: {out}"));
        (code, out)
    }

    /// `status --json`, parsed.
    #[track_caller]
    pub fn status_json(&self) -> serde_json::Value {
        let out = self.run_expect(&["status", "--json"], 0);
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("status --json is not JSON ({e}): {out}"))
    }

    /// A snapshot of the node's firewall state.
    #[track_caller]
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::take(self.lab)
    }

    /// The pid of the rollback watcher of a pending apply, if any.
    fn pending_watcher(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.state_dir().join("pending-apply.json")).ok()?;
        let value: serde_json::Value = serde_json::from_str(&text).ok()?;
        i32::try_from(value.get("watcher_pid")?.as_u64()?).ok()
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // A test that failed between `apply --confirm-timeout` and the
        // rollback leaves the watcher this test started; stop exactly that
        // process (identified by its pid and its state directory argument)
        // rather than leaving it to wake up later.
        let Some(pid) = self.pending_watcher() else {
            return;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        let state = self.state_dir();
        if cmdline.contains("__rollback-watch") && cmdline.contains(path_str(&state)) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("temporary path is not UTF-8: {}", path.display()))
}

#[track_caller]
fn write_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

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

// ---------------------------------------------------------------------------
// Kernel state snapshots.
// ---------------------------------------------------------------------------

/// The node's firewall state as the operator sees it: `iptables-save` and
/// `ip6tables-save` of the lab's flavour and `ipset save`, normalized (no
/// `#` lines with timestamps, chain packet counters zeroed).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `iptables-save`.
    pub v4: String,
    /// `ip6tables-save`.
    pub v6: String,
    /// `ipset save`.
    pub sets: String,
    /// `nft list table ip nodeport_guard` and `… ip6 …`, counters removed: the native
    /// nftables backend's tables, all ours.
    pub nft: String,
}

impl Snapshot {
    /// Reads the node's state now.
    #[track_caller]
    pub fn take(lab: &Lab) -> Snapshot {
        let node = lab.node();
        let save =
            |family| normalize_save(&super::state::iptables_save(node, lab.backend(), family));
        let nft: String = ["ip", "ip6"]
            .iter()
            .map(|family| node.exec("nft", &["list", "table", family, "nodeport_guard"]))
            .filter(|output| output.status.success())
            .map(|output| normalize_nft(&output.stdout))
            .collect();
        Snapshot {
            v4: save(Family::V4),
            v6: save(Family::V6),
            sets: node.exec_ok("ipset", &["save"]),
            nft,
        }
    }

    /// Everything that does not mention `npg`: the state other programs own.
    pub fn foreign(&self) -> Snapshot {
        Snapshot {
            nft: String::new(),
            ..self.filter(|line| !line.contains("npg"))
        }
    }

    /// Only the lines that mention `npg`: our chains, rules, jumps and sets, and our nftables
    /// tables whole.
    pub fn ours(&self) -> Snapshot {
        Snapshot {
            nft: self.nft.clone(),
            ..self.filter(|line| line.contains("npg"))
        }
    }

    /// Whether nothing mentions `npg`.
    pub fn has_nothing_of_ours(&self) -> bool {
        self.ours() == Snapshot::default()
    }

    /// The rules of `table` for `family`, one `-A …` line each, in order.
    pub fn rules(&self, family: Family, table: &str, chain: &str) -> Vec<String> {
        let text = match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        };
        let prefix = format!("-A {chain} ");
        table_section(text, table)
            .filter(|line| line.starts_with(&prefix))
            .map(str::to_string)
            .collect()
    }

    /// Names of the chains of `table` for `family` that start with `prefix`.
    pub fn chains(&self, family: Family, table: &str, prefix: &str) -> Vec<String> {
        let text = match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        };
        let mut chains: Vec<String> = table_section(text, table)
            .filter_map(|line| line.strip_prefix(':'))
            .filter_map(|decl| decl.split_whitespace().next())
            .filter(|name| name.starts_with(prefix))
            .map(str::to_string)
            .collect();
        // The nftables backend's chains are `<table>-<chain>` in `table ip|ip6 nodeport_guard`.
        let header = match family {
            Family::V4 => "table ip nodeport_guard",
            Family::V6 => "table ip6 nodeport_guard",
        };
        let nft_prefix = format!("{table}-{prefix}");
        chains.extend(
            self.nft
                .split("\ntable ")
                .map(|section| section.trim_start_matches("table "))
                .filter(|section| section.starts_with(header.trim_start_matches("table ")))
                .flat_map(|section| section.lines())
                .filter_map(|line| line.trim().strip_prefix("chain "))
                .filter_map(|rest| rest.split_whitespace().next())
                .filter_map(|name| {
                    name.strip_prefix(&format!("{table}-"))
                        .filter(|_| name.starts_with(&nft_prefix))
                })
                .map(str::to_string),
        );
        chains
    }

    /// Names of the ipsets (and of the nftables backend's sets) in the snapshot.
    pub fn set_names(&self) -> Vec<String> {
        let ipsets = self
            .sets
            .lines()
            .filter_map(|line| line.strip_prefix("create "))
            .filter_map(|rest| rest.split_whitespace().next());
        let nft_sets = self
            .nft
            .lines()
            .filter_map(|line| line.trim().strip_prefix("set "))
            .filter_map(|rest| rest.split_whitespace().next());
        ipsets.chain(nft_sets).map(str::to_string).collect()
    }

    /// Members of ipset (or nftables set) `name`.
    pub fn set_members(&self, name: &str) -> Vec<String> {
        let prefix = format!("add {name} ");
        let mut members: Vec<String> = self
            .sets
            .lines()
            .filter_map(|line| line.strip_prefix(&prefix))
            .map(|member| member.trim().to_string())
            .collect();
        // nft lists `set NAME { … elements = { a, b,\n c } }`.
        let header = format!("set {name} {{");
        if let Some(start) = self.nft.find(&header) {
            let block = &self.nft[start..];
            if let Some(elements) = block.split("elements = {").nth(1) {
                let list = elements.split('}').next().unwrap_or_default();
                members.extend(
                    list.split(',')
                        .map(str::trim)
                        .filter(|member| !member.is_empty())
                        .map(str::to_string),
                );
            }
        }
        members
    }

    /// The same rules in a canonical order: per table, chain declarations
    /// sorted by name and each chain's rules (in their own order) grouped
    /// under the chain names in sorted order; set members sorted. Two
    /// snapshots with equal canonical forms filter packets identically, even
    /// if the chains were created in a different order (iptables-nft-save
    /// prints chains in creation order).
    pub fn canonical(&self) -> Snapshot {
        let mut sets: Vec<&str> = self.sets.lines().collect();
        sets.sort_unstable();
        Snapshot {
            v4: canonical_save(&self.v4),
            v6: canonical_save(&self.v6),
            sets: sets.iter().map(|line| format!("{line}\n")).collect(),
            nft: canonical_nft(&self.nft),
        }
    }

    fn filter(&self, keep: impl Fn(&str) -> bool) -> Snapshot {
        let f = |text: &str| -> String {
            text.lines()
                .filter(|line| keep(line))
                .map(|line| format!("{line}\n"))
                .collect()
        };
        Snapshot {
            v4: f(&self.v4),
            v6: f(&self.v6),
            sets: f(&self.sets),
            nft: self.nft.clone(),
        }
    }

    /// A unified diff from `self` to `other`, for failure messages.
    pub fn diff(&self, other: &Snapshot) -> String {
        let mut out = String::new();
        for (what, a, b) in [
            ("iptables-save", &self.v4, &other.v4),
            ("ip6tables-save", &self.v6, &other.v6),
            ("ipset save", &self.sets, &other.sets),
            ("nft list table … nodeport_guard", &self.nft, &other.nft),
        ] {
            if a != b {
                out.push_str(
                    &similar::TextDiff::from_lines(a.as_str(), b.as_str())
                        .unified_diff()
                        .header(&format!("{what} (expected)"), &format!("{what} (actual)"))
                        .to_string(),
                );
            }
        }
        out
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--- iptables-save ---\n{}--- ip6tables-save ---\n{}--- ipset save ---\n{}--- nft ---\n{}",
            self.v4, self.v6, self.sets, self.nft
        )
    }
}

/// `nft list table` output without the packet counters, which change with traffic.
fn normalize_nft(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut words: Vec<&str> = Vec::new();
        let mut iter = line.split(' ').peekable();
        while let Some(word) = iter.next() {
            if (word == "packets" || word == "bytes")
                && iter.peek().is_some_and(|n| n.parse::<u64>().is_ok())
            {
                iter.next();
                continue;
            }
            words.push(word);
        }
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out
}

/// Our native nftables tables (`table ip nodeport_guard` and `table ip6
/// nodeport_guard`) as `nft list table` prints them, in a canonical form:
/// `counter packets N bytes M` zeroed, and within each table the chains and
/// sets sorted by name (nft lists them in the order they were created, which
/// says nothing about what they filter). Empty for a family without our
/// table.
#[track_caller]
pub fn nft_tables(lab: &Lab) -> String {
    let mut out = String::new();
    for family in ["ip", "ip6"] {
        let listing = lab
            .node()
            .exec("nft", &["list", "table", family, "nodeport_guard"]);
        if !listing.success() {
            continue;
        }
        let mut blocks: Vec<String> = Vec::new();
        let mut current = String::new();
        for line in listing.stdout.lines() {
            if line.starts_with("table ") || line == "}" || line.trim().is_empty() {
                continue;
            }
            current.push_str(&zero_nft_counters(line));
            current.push('\n');
            if line == "\t}" {
                blocks.push(std::mem::take(&mut current));
            }
        }
        blocks.sort();
        out.push_str(&format!("table {family} nodeport_guard {{\n"));
        out.push_str(&blocks.concat());
        out.push_str("}\n");
    }
    out
}

/// nftables state in a canonical order: the blocks of each table (chains and sets, each with
/// its contents in order) sorted by their header line, so creation order does not matter.
fn canonical_nft(text: &str) -> String {
    let mut out = String::new();
    let mut blocks: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if line.starts_with("table ") {
            out.push_str(line);
            out.push('\n');
        } else if trimmed.starts_with("chain ") || trimmed.starts_with("set ") {
            current = format!("{line}\n");
        } else if line == "}" {
            blocks.sort();
            out.extend(blocks.drain(..));
            out.push_str("}\n");
        } else if trimmed == "}" && !current.is_empty() {
            current.push_str(line);
            current.push('\n');
            blocks.push(std::mem::take(&mut current));
        } else if !current.is_empty() {
            current.push_str(line);
            current.push('\n');
        }
    }
    out
}

/// `counter packets 12 bytes 720` → `counter packets 0 bytes 0`.
fn zero_nft_counters(line: &str) -> String {
    let mut words: Vec<&str> = line.split(' ').collect();
    for i in 0..words.len() {
        if (words[i] == "packets" || words[i] == "bytes")
            && words.get(i + 1).is_some_and(|w| w.parse::<u64>().is_ok())
        {
            words[i + 1] = "0";
        }
    }
    words.join(" ")
}

/// Panics with a diff unless the two snapshots are equal.
#[track_caller]
pub fn assert_same_state(expected: &Snapshot, actual: &Snapshot, what: &str) {
    if expected != actual {
        panic!(
            "{what}: the kernel state differs:\n{}",
            expected.diff(actual)
        );
    }
}

/// Zeroes the `[packets:bytes]` counters of chain declarations, which change
/// with traffic and say nothing about the rules.
fn normalize_save(text: &str) -> String {
    text.lines()
        .map(|line| {
            if line.starts_with(':')
                && let Some(open) = line.rfind(" [")
            {
                format!("{} [0:0]\n", &line[..open])
            } else {
                format!("{line}\n")
            }
        })
        .collect()
}

/// See [`Snapshot::canonical`].
fn canonical_save(text: &str) -> String {
    let mut out = String::new();
    let mut declarations: Vec<&str> = Vec::new();
    let mut rules: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for line in text.lines() {
        if line.starts_with('*') {
            out.push_str(line);
            out.push('\n');
        } else if line.starts_with(':') {
            declarations.push(line);
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let chain = rest.split_whitespace().next().unwrap_or_default();
            rules.entry(chain).or_default().push(line);
        } else if line == "COMMIT" {
            declarations.sort_unstable();
            for line in declarations
                .drain(..)
                .chain(std::mem::take(&mut rules).into_values().flatten())
            {
                out.push_str(line);
                out.push('\n');
            }
            out.push_str("COMMIT\n");
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The lines between `*table` and its `COMMIT`.
fn table_section<'t>(text: &'t str, table: &str) -> impl Iterator<Item = &'t str> {
    let header = format!("*{table}");
    text.lines()
        .skip_while(move |line| *line != header)
        .skip(1)
        .take_while(|line| *line != "COMMIT")
}

// ---------------------------------------------------------------------------
// Reachability checks.
// ---------------------------------------------------------------------------

/// What a probe from the client is expected to find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// The connection completes and this server answers.
    Reply(&'static str),
    /// The TCP handshake reaches the node's stack, which resets it (nothing
    /// listens there): the firewall let the SYN through.
    Refused,
    /// Silently dropped: the probe times out.
    Dropped,
}

/// One TCP (or UDP) probe from the client namespace.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Source address on the client.
    pub src: IpAddr,
    /// Destination.
    pub dst: SocketAddr,
    /// UDP instead of TCP.
    pub udp: bool,
    /// What must happen.
    pub expect: Expect,
}

/// A TCP probe from `src` to `dst` that must get `reply`.
pub fn open(src: impl Into<IpAddr>, dst: SocketAddr, reply: &'static str) -> Probe {
    Probe {
        src: src.into(),
        dst,
        udp: false,
        expect: Expect::Reply(reply),
    }
}

/// A TCP probe from `src` to `dst` that must be dropped (time out).
pub fn dropped(src: impl Into<IpAddr>, dst: SocketAddr) -> Probe {
    Probe {
        src: src.into(),
        dst,
        udp: false,
        expect: Expect::Dropped,
    }
}

/// A TCP probe from `src` to a closed port `dst` that must be refused, i.e.
/// reach the node's TCP stack.
pub fn refused(src: impl Into<IpAddr>, dst: SocketAddr) -> Probe {
    Probe {
        src: src.into(),
        dst,
        udp: false,
        expect: Expect::Refused,
    }
}

impl Probe {
    /// The same probe over UDP.
    pub fn udp(mut self) -> Probe {
        self.udp = true;
        self
    }

    fn run(&self, lab: &Lab) -> Result<String, ConnectError> {
        let timeout = match self.expect {
            Expect::Dropped => DROP_TIMEOUT,
            Expect::Reply(_) | Expect::Refused => CONNECT_TIMEOUT,
        };
        if self.udp {
            lab.udp_probe(self.src, self.dst, timeout)
        } else {
            lab.connect(self.src, self.dst, timeout)
        }
    }

    fn judge(&self, result: &Result<String, ConnectError>) -> Option<String> {
        let ok = match (&self.expect, result) {
            (Expect::Reply(want), Ok(got)) => want == got,
            (Expect::Refused, Err(e)) => e.is_refused(),
            (Expect::Dropped, Err(e)) => e.is_timeout(),
            _ => false,
        };
        (!ok).then(|| {
            format!(
                "{} {} -> {}: expected {:?}, got {:?}",
                if self.udp { "udp" } else { "tcp" },
                self.src,
                self.dst,
                self.expect,
                result
            )
        })
    }
}

/// Runs all probes at the same time (so a batch of expected drops costs one
/// [`DROP_TIMEOUT`], not one each) and panics listing every probe whose
/// outcome was not the expected one.
#[track_caller]
pub fn check_reachability(lab: &Lab, context: &str, probes: &[Probe]) {
    let results: Vec<Result<String, ConnectError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = probes
            .iter()
            .map(|probe| scope.spawn(move || probe.run(lab)))
            .collect();
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    let failures: Vec<String> = probes
        .iter()
        .zip(&results)
        .filter_map(|(probe, result)| probe.judge(result))
        .collect();
    if !failures.is_empty() {
        panic!(
            "{context} ({} backend): {} of {} probes failed:\n  {}",
            lab.backend(),
            failures.len(),
            probes.len(),
            failures.join("\n  ")
        );
    }
}

/// Runs the lab's iptables for `family` in the node with `rule` split at
/// whitespace (so no argument may contain a space), e.g. `"-t mangle -F
/// npg-x"`; panics unless it succeeds. Reads like the command an operator
/// would type.
#[track_caller]
pub fn iptables(lab: &Lab, family: Family, rule: &str) {
    let args: Vec<&str> = rule.split_whitespace().collect();
    lab.iptables_ok(family, &args);
}

/// `SocketAddr` shorthand.
pub fn sa(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

// ---------------------------------------------------------------------------
// Generating one test per backend.
// ---------------------------------------------------------------------------

/// Turns a function `fn name(backend: Backend)` into two kernel tests, one
/// per iptables flavour:
///
/// ```ignore
/// /// What user-visible behaviour this guards.
/// fn whitelist_blocks_others(backend: Backend) {
///     let lab = Lab::new(backend);
///     // ...
/// }
/// backend_tests!(whitelist_blocks_others);
/// ```
///
/// expands to a module `whitelist_blocks_others` with the tests `legacy` and
/// `nft`, each gated with `require_kernel!()`: `cargo test
/// whitelist_blocks_others` runs both, `cargo test ::nft` every nft variant.
/// (The function stays outside the macro so that rustfmt formats it.)
macro_rules! backend_tests {
    ($name:ident) => {
        mod $name {
            #[test]
            fn legacy() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Legacy);
            }

            #[test]
            fn nft() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Nft);
            }

            #[test]
            fn nftables() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Nftables);
            }
        }
    };
    // For tests that read or change iptables chains by name: the native nftables backend has
    // its own tests of the same behaviour (`tests/kernel_nftables.rs`).
    ($name:ident, iptables_only) => {
        mod $name {
            #[test]
            fn legacy() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Legacy);
            }

            #[test]
            fn nft() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Nft);
            }
        }
    };
}
pub(crate) use backend_tests;
