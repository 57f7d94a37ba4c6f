//! Running external programs so that a failure explains itself in a CI log:
//! every error carries the full command line, exit status, stdout and stderr.

use std::ffi::OsStr;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// Directories searched after `PATH`. Test runners (and `sudo`) sometimes
/// drop the sbin directories from `PATH`, which is where `ip`, `iptables-*`,
/// `ipset`, `nft` and `conntrack` live.
const FALLBACK_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// Finds `name` in `PATH` or in the usual sbin/bin directories.
pub fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let path = PathBuf::from(name);
        return path.is_file().then_some(path);
    }
    let from_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    from_path
        .into_iter()
        .chain(FALLBACK_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Like [`find_program`], but falls back to the bare name so that the
/// eventual "failed to start" error names the program the test asked for.
pub fn program_path(name: &str) -> PathBuf {
    find_program(name).unwrap_or_else(|| PathBuf::from(name))
}

/// The result of a finished command, with its command line kept for messages.
#[derive(Debug, Clone)]
pub struct CmdOutput {
    /// The command line, shell-quoted for copy and paste.
    pub command: String,
    /// Exit status of the process.
    pub status: ExitStatus,
    /// Standard output, lossily decoded as UTF-8.
    pub stdout: String,
    /// Standard error, lossily decoded as UTF-8.
    pub stderr: String,
}

impl CmdOutput {
    /// Whether the command exited with status 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Returns `self` if the command succeeded, panics with every detail
    /// (command line, status, stdout, stderr) otherwise.
    #[track_caller]
    pub fn expect_success(self) -> CmdOutput {
        if !self.success() {
            panic!("command failed: {self}");
        }
        self
    }
}

impl fmt::Display for CmdOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command,
            self.status,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

/// Quotes one argument for display the way a POSIX shell would need it.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%[]".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Renders a program and its arguments as one copy-and-paste-able line.
pub fn command_line<S: AsRef<OsStr>>(program: &Path, args: &[S]) -> String {
    std::iter::once(program.as_os_str())
        .chain(args.iter().map(AsRef::as_ref))
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `program` (looked up with [`program_path`]) with `args`, optionally
/// feeding `stdin`, and waits for it. Panics only if the process cannot be
/// started at all; a non-zero exit is reported in the returned [`CmdOutput`].
#[track_caller]
pub fn run<S: AsRef<OsStr>>(program: &str, args: &[S], stdin: Option<&[u8]>) -> CmdOutput {
    let path = program_path(program);
    let command = command_line(&path, args);
    let mut cmd = Command::new(&path);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("failed to start `{command}`: {e}"));
    // Feed stdin from a separate thread: writing a large input while the child
    // fills its stdout pipe would otherwise deadlock both processes.
    let writer = match (stdin, child.stdin.take()) {
        (Some(data), Some(mut pipe)) => {
            let data = data.to_vec();
            Some(std::thread::spawn(move || pipe.write_all(&data)))
        }
        _ => None,
    };
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("failed to wait for `{command}`: {e}"));
    if let Some(writer) = writer {
        // A child that exits without reading its input makes the write fail
        // with EPIPE; its exit status and stderr explain that better.
        let _ = writer.join();
    }
    CmdOutput {
        command,
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs a command that must succeed and returns its stdout; panics with the
/// command line, status, stdout and stderr otherwise.
#[track_caller]
pub fn run_ok<S: AsRef<OsStr>>(program: &str, args: &[S]) -> String {
    run(program, args, None).expect_success().stdout
}
