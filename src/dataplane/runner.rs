//! Running programs: the [`Runner`] seam every backend reads and writes the kernel through
//! (as in knftables), and what a failed program leaves to say why.
//!
//! Programs get their input on stdin, never through a shell. A failed command keeps its
//! command line, its stderr and, when the program names one, the line of our input it failed
//! on.

use std::fmt;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use super::kernel::{Host, Kernel};

/// What a program printed and how it ended.
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// Whether it exited with status 0.
    pub success: bool,
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// Everything it printed on stdout (nothing when its lines were streamed).
    pub stdout: String,
    /// Everything it printed on stderr, which says why it failed.
    pub stderr: String,
}

/// Runs programs.
pub trait Runner: Send + Sync {
    /// Runs `program` with `args`, writing `stdin` to it if given, and waits for it.
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> std::io::Result<Output>;

    /// Whether `program` can be found.
    fn exists(&self, program: &str) -> bool;

    /// Runs `program` with `args` and hands each line of its stdout to `line` as it comes;
    /// when `line` returns `false` the program is stopped. The output's `stdout` is empty.
    /// (This default runs the program to its end first, for runners that cannot stream.)
    fn run_lines(
        &self,
        program: &str,
        args: &[&str],
        line: &mut dyn FnMut(&str) -> bool,
    ) -> std::io::Result<Output> {
        let output = self.run(program, args, None)?;
        for text in output.stdout.lines() {
            if !line(text) {
                break;
            }
        }
        Ok(Output {
            stdout: String::new(),
            ..output
        })
    }
}

/// A borrowed runner runs what it borrows.
impl<R: Runner + ?Sized> Runner for &R {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> std::io::Result<Output> {
        (**self).run(program, args, stdin)
    }

    fn exists(&self, program: &str) -> bool {
        (**self).exists(program)
    }

    fn run_lines(
        &self,
        program: &str,
        args: &[&str],
        line: &mut dyn FnMut(&str) -> bool,
    ) -> std::io::Result<Output> {
        (**self).run_lines(program, args, line)
    }
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

    /// The path of `program`, or an error naming it.
    fn found(program: &str) -> std::io::Result<PathBuf> {
        Self::resolve(program).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("`{program}` not found"),
            )
        })
    }
}

/// How long the daemon waits for the xtables lock before it reads the kernel whole instead.
const XTABLES_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs `program` to its end, with `XTABLES_LOCKFILE` set to `lock_file` if given.
fn run_program(
    program: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
    lock_file: Option<&std::path::Path>,
) -> std::io::Result<Output> {
    let path = SystemRunner::found(program)?;
    let started = Instant::now();
    let mut command = Command::new(path);
    if let Some(lock_file) = lock_file {
        command.env("XTABLES_LOCKFILE", lock_file);
    }
    let mut child = command
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

impl Runner for SystemRunner {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> std::io::Result<Output> {
        run_program(program, args, stdin, None)
    }

    fn exists(&self, program: &str) -> bool {
        Self::resolve(program).is_some()
    }

    fn run_lines(
        &self,
        program: &str,
        args: &[&str],
        line: &mut dyn FnMut(&str) -> bool,
    ) -> std::io::Result<Output> {
        use std::io::{BufRead as _, Read as _};
        let path = Self::found(program)?;
        let mut child = Command::new(path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        // stderr is read on the side, so that a chatty program cannot block on it.
        let mut stderr_pipe = child.stderr.take();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(pipe) = stderr_pipe.as_mut() {
                let _ = pipe.take(64 * 1024).read_to_string(&mut text);
            }
            text
        });
        let mut stopped = false;
        if let Some(stdout) = child.stdout.take() {
            for text in std::io::BufReader::new(stdout).lines() {
                let Ok(text) = text else { break };
                if !line(&text) {
                    stopped = true;
                    let _ = child.kill();
                    break;
                }
            }
        }
        let status = child.wait()?;
        let stderr = stderr.join().unwrap_or_default();
        Ok(Output {
            success: status.success() || stopped,
            code: status.code(),
            stdout: String::new(),
            stderr,
        })
    }
}

/// The kernel of this process's network namespace, read in the process.
impl Kernel for SystemRunner {
    fn nft_generation(&self) -> Option<u32> {
        super::nfgen::generation()
            .inspect_err(|error| {
                tracing::debug!(%error, "cannot read the nf_tables generation");
            })
            .ok()
    }

    fn xtables_digest(&self) -> Option<u128> {
        super::xtables::digest()
            .inspect_err(|error| {
                tracing::debug!(%error, "cannot read the x_tables rules");
            })
            .ok()
    }

    fn has_xtables(&self) -> Option<bool> {
        super::xtables::any_table()
            .inspect_err(|error| tracing::debug!(%error, "cannot list the x_tables tables"))
            .ok()
    }

    fn nft_tables(&self) -> Option<Vec<(String, String)>> {
        super::nft_tables::tables()
            .inspect_err(|error| tracing::debug!(%error, "cannot list the nf_tables tables"))
            .ok()
    }

    fn namespace_identity(&self) -> Option<String> {
        super::namespace::identity()
            .inspect_err(|error| {
                tracing::debug!(%error, "cannot tell which network namespace this is");
            })
            .ok()
    }

    fn holding_xtables_lock(&self) -> Option<Box<dyn Host + '_>> {
        match super::xtables::XtablesLock::take(XTABLES_LOCK_WAIT) {
            Ok(lock) => Some(Box::new(Locked { lock })),
            Err(error) => {
                tracing::debug!(%error, "cannot take the xtables lock");
                None
            }
        }
    }
}

/// A [`SystemRunner`] holding the xtables lock; its iptables commands take the lock file
/// beside it.
struct Locked {
    lock: super::xtables::XtablesLock,
}

impl Runner for Locked {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> std::io::Result<Output> {
        run_program(program, args, stdin, Some(self.lock.children_lock_file()))
    }

    fn exists(&self, program: &str) -> bool {
        SystemRunner.exists(program)
    }
}

/// The kernel a [`Locked`] runner reaches is the system's; the lock is held already.
impl Kernel for Locked {
    fn nft_generation(&self) -> Option<u32> {
        SystemRunner.nft_generation()
    }

    fn xtables_digest(&self) -> Option<u128> {
        SystemRunner.xtables_digest()
    }

    fn has_xtables(&self) -> Option<bool> {
        SystemRunner.has_xtables()
    }

    fn nft_tables(&self) -> Option<Vec<(String, String)>> {
        SystemRunner.nft_tables()
    }

    fn namespace_identity(&self) -> Option<String> {
        SystemRunner.namespace_identity()
    }
}

/// Why a save could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ObserveError {
    /// The iptables variant refuses to show a table (iptables-legacy next to nft rules).
    #[error(
        "`{table}` holds rules this iptables cannot show ({line}); use the other iptables backend"
    )]
    Incompatible {
        /// The table it would not show.
        table: String,
        /// The line that said so.
        line: String,
    },
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
        /// The program that could not be started.
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
    Observe(#[from] ObserveError),
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

/// The result of a scoped thread; a panic in it goes on in the caller.
pub(crate) fn joined<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
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
