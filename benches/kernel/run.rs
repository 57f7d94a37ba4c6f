//! Running programs inside a namespace, timed, with the CPU time they used.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::Netns;

/// What a program did.
pub(crate) struct Ran {
    pub(crate) elapsed: Duration,
    pub(crate) success: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// One program run: program, arguments, stdin.
pub(crate) type Step = (String, Vec<String>, Option<Vec<u8>>);

pub(crate) fn step(program: &str, args: &[&str], stdin: Option<&str>) -> Step {
    (
        program.to_owned(),
        args.iter().map(|a| (*a).to_owned()).collect(),
        stdin.map(|s| s.as_bytes().to_vec()),
    )
}

/// Runs a program on the calling thread (already in the right namespace) and times it from
/// spawn to exit, its output read through pipes as nodeport-guard reads its children's.
pub(crate) fn run_here(program: &str, args: &[String], stdin: Option<&[u8]>) -> Ran {
    let path = support::cmd::program_path(program);
    let started = Instant::now();
    let mut child = Command::new(&path)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", path.display()));
    let writer = match (stdin, child.stdin.take()) {
        (Some(data), Some(mut pipe)) => {
            let data = data.to_vec();
            Some(std::thread::spawn(move || {
                let _ = pipe.write_all(&data);
            }))
        }
        _ => None,
    };
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot wait for {}: {e}", path.display()));
    let elapsed = started.elapsed();
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    Ran {
        elapsed,
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// User + system CPU time of this process's finished children (and theirs) so far.
pub(crate) fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(Duration::ZERO, |usage| {
        let micros = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(t.tv_sec().max(0) as u64)
                + Duration::from_micros(t.tv_usec().max(0) as u64)
        };
        micros(usage.user_time()) + micros(usage.system_time())
    })
}

thread_local! {
    /// CPU time of the last [`run_steps`] (all processes it started).
    static LAST_CPU: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// CPU time the processes of the last [`run_steps`] on this thread used.
pub(crate) fn last_cpu() -> Duration {
    LAST_CPU.with(std::cell::Cell::get)
}

/// Runs the steps one after the other inside `ns` (children inherit the namespace of the
/// thread that starts them; no `ip netns exec` in the measured path) and returns the total
/// time; panics with the output of a step that fails. [`last_cpu`] then tells the CPU time
/// they used.
pub(crate) fn run_steps(ns: &Netns, steps: &[Step]) -> Duration {
    let cpu_before = children_cpu();
    let elapsed = run_steps_inner(ns, steps);
    LAST_CPU.with(|cell| cell.set(children_cpu().saturating_sub(cpu_before)));
    elapsed
}

pub(crate) fn run_steps_inner(ns: &Netns, steps: &[Step]) -> Duration {
    ns.run(|| {
        let started = Instant::now();
        for (program, args, stdin) in steps {
            let ran = run_here(program, args, stdin.as_deref());
            if !ran.success {
                panic!(
                    "`{program} {}` failed in {}: {}{}",
                    args.join(" "),
                    ns.name(),
                    ran.stdout,
                    ran.stderr
                );
            }
        }
        started.elapsed()
    })
}

pub(crate) fn run_one(ns: &Netns, program: &str, args: &[String], stdin: Option<&[u8]>) -> Ran {
    let cpu_before = children_cpu();
    let ran = ns.run(|| run_here(program, args, stdin));
    LAST_CPU.with(|cell| cell.set(children_cpu().saturating_sub(cpu_before)));
    ran
}
