//! Running `nodeport-guard run` (the daemon) as a child process inside a
//! [`Lab`](super::Lab)'s node namespace, reading its log, signalling it, and
//! talking HTTP to its metrics endpoint.
//!
//! A [`Daemon`] is started from a [`Guard`]: it uses the guard's config,
//! policy directory, state directory and the lab's `--backend`, exactly as
//! `Guard::run` does, but does not wait for the process. Its stderr goes to
//! a log file in a `logs/` subdirectory of the guard's temporary directory
//! (not directly in the directory that holds `policies/`: the daemon watches
//! that directory too, and its own log lines would be watcher noise).
//!
//! The process is `ip netns exec <node> nodeport-guard …`; `ip netns exec`
//! execs the program in place, so the child's pid *is* the daemon's pid and
//! signals reach the daemon directly. If a test does not stop the daemon,
//! [`Drop`] kills it with SIGKILL and reaps it, so no daemon outlives its
//! test (and none keeps a namespace busy).

use std::fmt;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::cmd;
use super::guard::{BIN, Guard, POLL, backend_arg};
use super::lab::Lab;
use super::netns::Netns;
use super::wait_until;

/// How long a daemon may take from `spawn` to its first completed
/// reconcile (it then writes `daemon.json` with its pid).
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The config lines every daemon test starts from: fast debounce, and the
/// resync interval the test needs (`"1s"` for drift tests, long for tests
/// where only the watcher may cause a reload).
pub fn daemon_config(resync: &str, extra: &str) -> String {
    format!("debounce: 100ms\nresyncInterval: {resync}\n{extra}")
}

/// A guard for a daemon that serves `/metrics` on `metrics_addr` and counts drops (it holds
/// the NFLOG groups), with a resync interval long enough that only events cause reloads.
pub fn counting_guard<'lab>(lab: &'lab Lab, metrics_addr: &str) -> Guard<'lab> {
    Guard::with_config(
        lab,
        &daemon_config(
            "90s",
            &format!("metricsAddress: {metrics_addr}\nnflogListener: true\n"),
        ),
    )
}

/// A running (or exited) `nodeport-guard run`.
pub struct Daemon {
    child: Child,
    exit: Option<ExitStatus>,
    log_path: PathBuf,
    state_dir: PathBuf,
    command: String,
}

impl fmt::Debug for Daemon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Daemon")
            .field("pid", &self.child.id())
            .field("command", &self.command)
            .field("exit", &self.exit)
            .finish_non_exhaustive()
    }
}

impl Daemon {
    /// Starts `nodeport-guard … run` in the guard's node namespace and
    /// waits until it has finished its first reconcile (its status file
    /// names its pid). Panics with the log if it exits or does not get
    /// there within [`READY_TIMEOUT`].
    #[track_caller]
    pub fn start(guard: &Guard<'_>) -> Daemon {
        Daemon::start_with(guard, &[])
    }

    /// [`Daemon::start`] with extra global options before `run` (e.g.
    /// `-vv` for debug logging).
    #[track_caller]
    pub fn start_with(guard: &Guard<'_>, options: &[&str]) -> Daemon {
        let mut daemon = Daemon::spawn_with(guard, "daemon", options);
        daemon.wait_ready(READY_TIMEOUT);
        daemon
    }

    /// Starts `nodeport-guard … run` without waiting for anything; its
    /// stderr goes to `logs/<name>.log` in the guard's directory.
    #[track_caller]
    pub fn spawn(guard: &Guard<'_>, name: &str) -> Daemon {
        Daemon::spawn_with(guard, name, &[])
    }

    /// [`Daemon::start`], run from the guard's directory with `--policies policies`: the
    /// policy directory as a relative path, as an operator may give it.
    #[track_caller]
    pub fn start_relative(guard: &Guard<'_>) -> Daemon {
        let mut daemon = Daemon::spawn_in(guard, "daemon", &[], true);
        daemon.wait_ready(READY_TIMEOUT);
        daemon
    }

    /// [`Daemon::spawn`] with extra global options before `run`.
    #[track_caller]
    pub fn spawn_with(guard: &Guard<'_>, name: &str, options: &[&str]) -> Daemon {
        Daemon::spawn_in(guard, name, options, false)
    }

    /// [`Daemon::spawn_with`]; `relative`: from the guard's directory, with the policy
    /// directory given relative to it.
    #[track_caller]
    fn spawn_in(guard: &Guard<'_>, name: &str, options: &[&str], relative: bool) -> Daemon {
        let logs = guard.path("logs");
        std::fs::create_dir_all(&logs)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", logs.display()));
        let log_path = logs.join(format!("{name}.log"));
        let log = File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let lab = guard.lab();
        let mut args: Vec<String> = vec![
            "netns".into(),
            "exec".into(),
            lab.node().name().into(),
            BIN.into(),
            "--config".into(),
            guard.config_path().display().to_string(),
            "--policies".into(),
            if relative {
                "policies".into()
            } else {
                guard.policies_dir().display().to_string()
            },
            "--state-dir".into(),
            guard.state_dir().display().to_string(),
            "--backend".into(),
            backend_arg(lab.backend()).into(),
        ];
        args.extend(options.iter().map(|option| (*option).to_string()));
        args.push("run".into());
        let ip = cmd::program_path("ip");
        let command = cmd::command_line(&ip, &args);
        let child = Command::new(&ip)
            .args(&args)
            .current_dir(guard.path(""))
            // The default level of `run` is info; a RUST_LOG inherited from
            // the test environment must not hide the lines tests look for.
            .env_remove("RUST_LOG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{command}`: {e}"));
        Daemon {
            child,
            exit: None,
            log_path,
            state_dir: guard.state_dir(),
            command,
        }
    }

    /// The daemon's pid (`ip netns exec` execs in place).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the daemon has written its status file with its own pid,
    /// i.e. finished its first reconcile with the watcher already running.
    #[track_caller]
    pub fn wait_ready(&mut self, timeout: Duration) {
        let status_file = self.state_dir.join("daemon.json");
        let pid = u64::from(self.pid());
        let ready = wait_until(timeout, Duration::from_millis(20), || {
            let mine = std::fs::read_to_string(&status_file)
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                .and_then(|value| value.get("pid").and_then(serde_json::Value::as_u64))
                == Some(pid);
            mine || !self.running()
        });
        if !self.running() {
            panic!(
                "the daemon exited ({:?}) before it was ready: `{}`\n--- log ---\n{}",
                self.exit,
                self.command,
                self.log()
            );
        }
        if !ready {
            panic!(
                "the daemon was not ready within {timeout:?}: `{}`\n--- log ---\n{}",
                self.command,
                self.log()
            );
        }
    }

    /// Everything the daemon wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// A position in the log, for [`Daemon::log_since`] and
    /// [`Daemon::wait_for_log`].
    pub fn mark(&self) -> usize {
        self.log().len()
    }

    /// What the daemon logged after `mark`.
    pub fn log_since(&self, mark: usize) -> String {
        self.log().get(mark..).unwrap_or_default().to_string()
    }

    /// How many log lines after `mark` contain `needle`.
    pub fn count_since(&self, mark: usize, needle: &str) -> usize {
        self.log_since(mark)
            .lines()
            .filter(|line| line.contains(needle))
            .count()
    }

    /// Waits until a log line after `mark` contains `needle` and returns it;
    /// `None` after `timeout`.
    pub fn wait_for_log(&self, mark: usize, needle: &str, timeout: Duration) -> Option<String> {
        let mut found = None;
        wait_until(timeout, Duration::from_millis(20), || {
            found = self
                .log_since(mark)
                .lines()
                .find(|line| line.contains(needle))
                .map(str::to_string);
            found.is_some()
        });
        found
    }

    /// Like [`Daemon::wait_for_log`] but panics with the log when nothing
    /// matched.
    #[track_caller]
    pub fn expect_log(&self, mark: usize, needle: &str, timeout: Duration) -> String {
        self.wait_for_log(mark, needle, timeout).unwrap_or_else(|| {
            panic!(
                "no log line containing {needle:?} within {timeout:?}\n--- log since mark ---\n{}",
                self.log_since(mark)
            )
        })
    }

    /// Whether the process is still running (reaps it if it exited).
    pub fn running(&mut self) -> bool {
        if self.exit.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.exit = Some(status);
        }
        self.exit.is_none()
    }

    /// Panics with the log unless the daemon is still running.
    #[track_caller]
    pub fn assert_running(&mut self, context: &str) {
        if !self.running() {
            panic!(
                "{context}: the daemon exited with {:?}\n--- log ---\n{}",
                self.exit,
                self.log()
            );
        }
    }

    /// Sends `signal` to the daemon.
    #[track_caller]
    pub fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.pid()).expect("pid fits in i32"));
        kill(pid, signal).unwrap_or_else(|e| panic!("cannot send {signal} to the daemon: {e}"));
    }

    /// Waits up to `timeout` for the process to exit; its status, or `None`
    /// if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_until(timeout, Duration::from_millis(10), || !self.running());
        self.exit
    }

    /// User plus system CPU time the daemon (all its threads) used so far,
    /// from `/proc/<pid>/stat`.
    #[track_caller]
    pub fn cpu_time(&self) -> Duration {
        let path = format!("/proc/{}/stat", self.pid());
        let stat =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        // The command name (field 2) is in parentheses and may contain
        // spaces; fields after it are plain. utime and stime are fields 14
        // and 15, i.e. the 12th and 13th after the closing parenthesis.
        let rest = &stat[stat.rfind(')').expect("a comm field") + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
        Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second() as f64)
    }

    /// Voluntary plus involuntary context switches over all the daemon's
    /// threads: how often it woke up.
    pub fn context_switches(&self) -> u64 {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid())) else {
            return 0;
        };
        tasks
            .flatten()
            .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
            .flat_map(|status| {
                status
                    .lines()
                    .filter(|line| line.contains("ctxt_switches"))
                    .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
                    .collect::<Vec<_>>()
            })
            .sum()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn clock_ticks_per_second() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        cmd::run("getconf", &["CLK_TCK"], None)
            .stdout
            .trim()
            .parse()
            .unwrap_or(100)
    })
}

// ---------------------------------------------------------------------------
// HTTP, for /metrics and /healthz.
// ---------------------------------------------------------------------------

/// An HTTP response: status code and body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// E.g. 200.
    pub status: u16,
    /// The raw header block (status line included).
    pub head: String,
    /// The body.
    pub body: String,
}

/// `GET path` on `addr` from inside `ns` (HTTP/1.1, `Connection: close`),
/// spoken over a plain `TcpStream` since `curl` may not exist.
pub fn http_get(ns: &Netns, addr: SocketAddr, path: &str) -> Result<HttpResponse, String> {
    let path = path.to_string();
    ns.run(move || {
        let raw = get_raw(addr, path.as_str(), Duration::from_secs(2))?;
        let text = String::from_utf8(raw).map_err(|e| format!("not UTF-8: {e}"))?;
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("no end of headers in {text:?}"))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("bad status line in {head:?}"))?;
        Ok(HttpResponse {
            status,
            head: head.to_string(),
            body: body.to_string(),
        })
    })
}

/// Polls `GET path` until it answers (the listener may not be up yet).
#[track_caller]
pub fn http_get_ok(ns: &Netns, addr: SocketAddr, path: &str) -> HttpResponse {
    let mut last = Err(String::new());
    wait_until(Duration::from_secs(5), POLL, || {
        last = http_get(ns, addr, path);
        last.is_ok()
    });
    last.unwrap_or_else(|e| panic!("GET {path} on {addr} failed: {e}"))
}

/// One sample of a Prometheus text exposition: `name{labels}` → value.
pub type Samples = std::collections::BTreeMap<String, f64>;

/// Parses and checks Prometheus text format 0.0.4: every line is a `# HELP
/// name text` / `# TYPE name kind` comment or a sample `name value` /
/// `name{label="value",…} value`; names are `[a-zA-Z_:][a-zA-Z0-9_:]*`;
/// every sample belongs to a family declared by a `# TYPE` line before it
/// (`_sum` / `_count` / `_bucket` for summaries and histograms), which has a
/// `# HELP` line too. Returns the samples keyed by `name{labels}` exactly as
/// written.
pub fn parse_prometheus(text: &str) -> Result<Samples, String> {
    let mut samples = Samples::new();
    let mut types: std::collections::BTreeMap<String, String> = Default::default();
    let mut helps: std::collections::BTreeSet<String> = Default::default();
    let valid_name = |name: &str| {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    if !text.ends_with('\n') {
        return Err("the exposition does not end with a newline".into());
    }
    for (number, line) in text.lines().enumerate() {
        let number = number + 1;
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("HELP"), Some(name), Some(_)) if valid_name(name) => {
                    helps.insert(name.to_string());
                }
                (Some("TYPE"), Some(name), Some(kind)) if valid_name(name) => {
                    if !matches!(
                        kind,
                        "counter" | "gauge" | "summary" | "histogram" | "untyped"
                    ) {
                        return Err(format!("line {number}: unknown type {kind:?}: {line}"));
                    }
                    if types.insert(name.to_string(), kind.to_string()).is_some() {
                        return Err(format!("line {number}: second TYPE for {name}"));
                    }
                }
                _ => return Err(format!("line {number}: malformed comment: {line}")),
            }
            continue;
        }
        if line.is_empty() {
            return Err(format!("line {number}: empty line"));
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("line {number}: no value: {line}"))?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v
                .parse()
                .map_err(|_| format!("line {number}: bad value {v:?}: {line}"))?,
        };
        let name = match series.split_once('{') {
            None => series,
            Some((name, labels)) => {
                let labels = labels
                    .strip_suffix('}')
                    .ok_or_else(|| format!("line {number}: unterminated labels: {line}"))?;
                check_labels(labels).map_err(|e| format!("line {number}: {e}: {line}"))?;
                name
            }
        };
        if !valid_name(name) {
            return Err(format!("line {number}: bad metric name {name:?}: {line}"));
        }
        let family = ["_sum", "_count", "_bucket"]
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .find(|base| {
                types
                    .get(*base)
                    .is_some_and(|kind| kind == "summary" || kind == "histogram")
            })
            .unwrap_or(name);
        if !types.contains_key(family) {
            return Err(format!("line {number}: sample before its # TYPE: {line}"));
        }
        if !helps.contains(family) {
            return Err(format!("line {number}: sample without # HELP: {line}"));
        }
        if samples.insert(series.to_string(), value).is_some() {
            return Err(format!("line {number}: duplicate series {series}"));
        }
    }
    Ok(samples)
}

/// Checks `k="v",k2="v2"` (values with `\"`, `\\` and `\n` escapes).
fn check_labels(labels: &str) -> Result<(), String> {
    let mut rest = labels;
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once("=\"")
            .ok_or_else(|| format!("bad label list {labels:?}"))?;
        if key.is_empty()
            || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || key.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(format!("bad label name {key:?}"));
        }
        let mut end = None;
        let mut escaped = false;
        for (i, c) in after.char_indices() {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(i);
                    break;
                }
                (false, '\n') => return Err("newline in a label value".into()),
                _ => {}
            }
        }
        let end = end.ok_or_else(|| format!("unterminated label value in {labels:?}"))?;
        rest = &after[end + 1..];
        if let Some(next) = rest.strip_prefix(',') {
            rest = next;
        } else if !rest.is_empty() {
            return Err(format!("junk after a label value in {labels:?}"));
        }
    }
    Ok(())
}

/// Whether the process `pid` exists (and is not a zombie).
pub fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// The daemon's children now (`/proc/<pid>/task/*/children`).
pub fn children(pid: u32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .map(|children| children.split_whitespace().count())
        .sum()
}

/// The daemon's resident memory in KiB (`VmRSS`).
pub fn resident_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// `GET path` on `addr` from this thread (in its network namespace): the answer's bytes.
fn get_raw(addr: SocketAddr, path: &str, connect_timeout: Duration) -> Result<Vec<u8>, String> {
    let mut stream = TcpStream::connect_timeout(&addr, connect_timeout)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| format!("read: {e}"))?;
    Ok(raw)
}

/// One `GET path` on `addr` from a thread already in the right network namespace;
/// the status and how long it took.
pub fn get(addr: SocketAddr, path: &str) -> Result<(u16, Duration), String> {
    let started = Instant::now();
    let answer = get_raw(addr, path, Duration::from_secs(10))?;
    let status = String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| "no status line".to_owned())?;
    Ok((status, started.elapsed()))
}

/// What [`scrape_storm`] saw.
pub struct Storm {
    /// Each request's status and time, or why it failed.
    pub answers: Vec<Result<(u16, Duration), String>>,
    /// How long they all took.
    pub took: Duration,
    /// The most children `pid` had at once (counted every 2 ms).
    pub most_children: usize,
}

/// `count` concurrent `GET /metrics` on `addr` from inside `ns`, while `during` runs beside
/// them and the children of `pid` (the daemon) are counted.
pub fn scrape_storm<T: Send>(
    ns: &Netns,
    addr: SocketAddr,
    count: usize,
    pid: u32,
    during: impl FnOnce() -> T + Send,
) -> (Storm, T) {
    let watching = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut most = 0;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(children(pid));
                std::thread::sleep(Duration::from_millis(2));
            }
            most
        });
        let storm = scope.spawn(|| {
            ns.run(|| {
                let started = Instant::now();
                let answers = std::thread::scope(|inner| {
                    let handles: Vec<_> = (0..count)
                        .map(|_| inner.spawn(|| get(addr, "/metrics")))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
                        .collect()
                });
                (answers, started.elapsed())
            })
        });
        let result = during();
        let (answers, took) = storm.join().expect("the storm");
        watching.store(false, std::sync::atomic::Ordering::Relaxed);
        let most_children = watcher.join().expect("the watcher");
        (
            Storm {
                answers,
                took,
                most_children,
            },
            result,
        )
    })
}
