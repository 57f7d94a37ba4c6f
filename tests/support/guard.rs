//! Running the real `nodeport-guard` binary against a [`Lab`]'s node.
//!
//! A [`Guard`] owns a temporary directory with `config.yaml`, `policies/`
//! and `state/`, so every test has its own runtime state (lock, pending
//! confirmations) and tests can run in parallel. Every command runs inside
//! the node namespace with `--config`, `--policies`, `--state-dir` and the
//! lab's `--backend`, exactly as an operator would type it on the node.
//! [`Guard::spawn`] starts such a command in the background (a
//! [`Background`]), [`Guard::snapshot`] reads back the kernel state (a
//! [`Snapshot`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::background::Background;
use super::cmd::CmdOutput;
use super::lab::{Backend, Family, Lab};
use super::snapshot::Snapshot;

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

    /// Passes `--backend <name>` instead of the lab's flavour.
    pub fn with_backend(mut self, name: &'static str) -> Self {
        self.backend_arg = name;
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
        Background::new(child, log_path)
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

    /// Our rules (both families, canonical order), our nftables tables, and the members of our
    /// sets: what must come back after drift. (Set headers are left out: `ipset save` prints
    /// a random `initval`, which a recreated set does not keep.)
    #[track_caller]
    pub fn our_rules_and_members(&self) -> String {
        let ours = self.snapshot().ours().canonical();
        let members: String = ours
            .sets
            .lines()
            .filter(|line| line.starts_with("add "))
            .map(|line| format!("{line}\n"))
            .collect();
        format!("{}{}{}{members}", ours.v4, ours.v6, ours.nft)
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

/// Runs the lab's iptables for `family` in the node with `rule` split at
/// whitespace (so no argument may contain a space), e.g. `"-t mangle -F
/// npg-x"`; panics unless it succeeds. Reads like the command an operator
/// would type.
#[track_caller]
pub fn iptables(lab: &Lab, family: Family, rule: &str) {
    let args: Vec<&str> = rule.split_whitespace().collect();
    lab.iptables_ok(family, &args);
}
