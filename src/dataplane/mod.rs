//! The dataplane: the only code that runs `iptables-restore`, `ipset` or `nft` and reads the
//! kernel's rules.
//!
//! Programs run behind the two-method [`Runner`] trait (as in knftables), with the input written
//! to their stdin, never through a shell. A failed command keeps its command line, its stderr
//! and, when the program names one, the line of our input it failed on.

pub mod detect;
pub mod fake;
pub mod iptables;
pub mod nft;

use std::fmt;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::config::BackendChoice;
use crate::model::IpFamily;
use crate::plan::Plan;
use crate::ruleset::{Rule, Ruleset, Table};
use crate::state::State;

/// What a program printed and how it ended.
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// Whether it exited with status 0.
    pub success: bool,
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

/// Runs programs.
pub trait Runner: Send + Sync {
    /// Runs `program` with `args`, writing `stdin` to it if given, and waits for it.
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> std::io::Result<Output>;

    /// Whether `program` can be found.
    fn exists(&self, program: &str) -> bool;
}

/// Runs real programs, found in `PATH` and the usual `sbin` directories (a cron job or a
/// container may lack them in `PATH`).
#[derive(Clone, Debug, Default)]
pub struct SystemRunner;

const SBIN_DIRECTORIES: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

impl SystemRunner {
    fn resolve(program: &str) -> Option<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain(SBIN_DIRECTORIES.iter().map(PathBuf::from))
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    }
}

impl Runner for SystemRunner {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> std::io::Result<Output> {
        let path = Self::resolve(program).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("`{program}` not found"),
            )
        })?;
        let started = Instant::now();
        let mut child = Command::new(path)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A program that exits early closes its stdin; its stderr then says why.
            let _ = pipe.write_all(input);
        }
        let output = child.wait_with_output()?;
        tracing::trace!(
            program,
            ?args,
            input_bytes = stdin.map_or(0, <[u8]>::len),
            elapsed_ms = started.elapsed().as_millis() as u64,
            code = output.status.code(),
            "ran"
        );
        Ok(Output {
            success: output.status.success(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    fn exists(&self, program: &str) -> bool {
        Self::resolve(program).is_some()
    }
}

/// A command that failed, with everything needed to understand why.
#[derive(Debug)]
pub struct CommandFailure {
    /// The command line.
    pub command: String,
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// What it printed on stderr.
    pub stderr: String,
    /// The line of our input it complained about, with its number, if it named one.
    pub input_line: Option<(usize, String)>,
}

impl fmt::Display for CommandFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` failed", self.command)?;
        if let Some(code) = self.code {
            write!(f, " with exit code {code}")?;
        }
        let stderr = self.stderr.trim();
        if !stderr.is_empty() {
            write!(f, ": {stderr}")?;
        }
        if let Some((number, line)) = &self.input_line {
            write!(f, "\n  input line {number}: {line}")?;
        }
        Ok(())
    }
}

/// Why the dataplane could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// A program could not be started.
    #[error("cannot run `{program}`: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A program failed.
    #[error("{0}")]
    Failed(Box<CommandFailure>),
    /// The kernel's rules could not be read.
    #[error(transparent)]
    Observe(#[from] crate::observe::ObserveError),
    /// After applying, the kernel does not hold what was written.
    #[error(
        "the kernel does not hold what was just written ({0}); another program may be changing the same rules"
    )]
    Verify(String),
}

/// Runs a program and turns a failure into a [`DataplaneError`], pointing at the input line the
/// program named (`line N failed`, `Error in line N`).
pub fn run_checked(
    runner: &dyn Runner,
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<Output, DataplaneError> {
    let output = runner
        .run(program, args, stdin.map(str::as_bytes))
        .map_err(|source| DataplaneError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    if output.success {
        return Ok(output);
    }
    let input_line = stdin.and_then(|input| {
        failed_line_number(&output.stderr).and_then(|number| {
            input
                .lines()
                .nth(number.checked_sub(1)?)
                .map(|line| (number, line.to_owned()))
        })
    });
    Err(DataplaneError::Failed(Box::new(CommandFailure {
        command: std::iter::once(program)
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" "),
        code: output.code,
        stderr: output.stderr,
        input_line,
    })))
}

/// The input line number a restore program's error message names, if any.
pub fn failed_line_number(stderr: &str) -> Option<usize> {
    for marker in ["line ", "Error in line "] {
        for (index, _) in stderr.match_indices(marker) {
            let digits: String = stderr[index + marker.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(number) = digits.parse() {
                return Some(number);
            }
        }
    }
    None
}

/// The backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// iptables with the legacy (x_tables) kernel interface.
    IptablesLegacy,
    /// iptables with the nf_tables kernel interface.
    IptablesNft,
    /// Native nftables: our own `nodeport_guard` tables, written with `nft -f`.
    Nftables,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::IptablesLegacy => "iptables-legacy",
            Backend::IptablesNft => "iptables-nft",
            Backend::Nftables => "nftables",
        })
    }
}

impl Backend {
    /// The backend to use: the one chosen, or the one the host uses when `auto`.
    pub fn resolve(choice: BackendChoice, runner: &dyn Runner) -> Backend {
        match choice {
            BackendChoice::IptablesLegacy => Backend::IptablesLegacy,
            BackendChoice::IptablesNft => Backend::IptablesNft,
            BackendChoice::Nftables => Backend::Nftables,
            BackendChoice::Auto => {
                let (backend, reason) = detect::detect(runner);
                tracing::info!(%backend, reason, "backend chosen");
                backend
            }
        }
    }

    /// The whole ruleset in this backend's load syntax, as `render` prints it.
    pub fn render(self, ruleset: &Ruleset) -> String {
        match self {
            Backend::IptablesLegacy | Backend::IptablesNft => {
                crate::render::render_iptables(ruleset)
            }
            Backend::Nftables => crate::render::nft::render_script(ruleset),
        }
    }

    /// The state this backend writes for a ruleset.
    pub fn desired(self, ruleset: &Ruleset) -> State {
        match self {
            Backend::IptablesLegacy | Backend::IptablesNft => {
                crate::state::desired_iptables(ruleset)
            }
            Backend::Nftables => crate::state::desired_nft(ruleset),
        }
    }

    /// The identity hash this backend gives a rule of one of our chains.
    pub fn rule_hash(self, table: Table, chain: &str, rule: &Rule, family: IpFamily) -> String {
        match self {
            Backend::IptablesLegacy | Backend::IptablesNft => {
                crate::render::iptables::render_rule(table, chain, rule, family).hash
            }
            Backend::Nftables => crate::render::nft::render_rule(table, chain, rule, family).hash,
        }
    }
}

/// A backend bound to a runner: reads and writes our part of the kernel.
pub struct Dataplane<'r> {
    /// The backend.
    pub backend: Backend,
    /// How programs are run.
    pub runner: &'r dyn Runner,
    /// The families that are programmed; the other family is still read, so leftovers of ours
    /// there are cleaned up.
    pub families: Vec<IpFamily>,
    /// Where the backend may remember what it created (iptables-nft: the base chains it made
    /// exist, so cleanup can remove them again).
    pub state_dir: PathBuf,
}

impl<'r> Dataplane<'r> {
    /// A backend bound to a runner, programming `families`.
    pub fn new(
        backend: Backend,
        runner: &'r dyn Runner,
        families: Vec<IpFamily>,
        state_dir: &std::path::Path,
    ) -> Dataplane<'r> {
        Dataplane {
            backend,
            runner,
            families,
            state_dir: state_dir.to_path_buf(),
        }
    }
}

impl Dataplane<'_> {
    /// Reads what the kernel holds of ours, with rule counters.
    pub fn observe(&self) -> Result<State, DataplaneError> {
        match self.backend {
            Backend::IptablesLegacy | Backend::IptablesNft => iptables::observe(self),
            Backend::Nftables => nft::observe(self),
        }
    }

    /// Reads back what `plan` wrote: at least every table and set it names (see
    /// [`Plan::scope`]), with or without anything else.
    pub fn observe_written(&self, plan: &Plan) -> Result<State, DataplaneError> {
        match self.backend {
            Backend::IptablesLegacy | Backend::IptablesNft => iptables::observe_written(self, plan),
            Backend::Nftables => nft::observe_written(self, plan),
        }
    }

    /// Carries out a plan that leads to `desired`. iptables: sets first, then one atomic
    /// restore per table and family, then set deletions. nftables: one transaction.
    pub fn apply(&self, plan: &Plan, desired: &State) -> Result<(), DataplaneError> {
        match self.backend {
            Backend::IptablesLegacy | Backend::IptablesNft => iptables::apply(self, plan),
            Backend::Nftables => nft::apply(self, plan, desired),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_errors_point_at_the_input_line() {
        assert_eq!(
            failed_line_number("iptables-restore: line 7 failed\n"),
            Some(7)
        );
        assert_eq!(
            failed_line_number("ipset v7.17: Error in line 3: Syntax error"),
            Some(3)
        );
        assert_eq!(failed_line_number("Another app is holding the lock"), None);
    }
}
