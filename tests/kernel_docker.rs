//! A real Docker Engine in the lab's node namespace: `containerd` and `dockerd` (Debian's
//! `docker.io`) run in the node's network namespace and in a mount namespace of their own,
//! with their data under a temporary directory, their sockets and state on a private tmpfs
//! `/run`, the `vfs` storage driver, and an image imported from a static busybox (no registry
//! is reachable). `docker run -p` publishes a container's port with docker's own rules (in the
//! iptables flavour of the backend under test), and nodeport-guard's whitelist guards it:
//! listed sources reach the container, others do not, in both families; docker rewriting its
//! rules for a new container changes nothing of ours; `exposure` names the container;
//! `cleanup` leaves docker's rules working.
//!
//! Needs `dockerd`, `containerd`, `runc`, the `docker` client and a statically linked
//! `/bin/busybox` (`scripts/test` installs `docker.io` and `busybox-static`); without them the
//! tests are skipped, or fail when `NPG_REQUIRE_KERNEL_TESTS=1`.

mod support;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::fixtures::Whitelist;
use support::{
    Backend, CONNECT_TIMEOUT, DROP_TIMEOUT, GateDecision, Guard, Lab, POLL, addr, backend_tests,
    gate_decision, kernel_tests_required, sa, wait_until,
};

/// The port `docker run -p` publishes on the node.
const PUBLISHED: u16 = 30081;
/// What the container answers on every connection.
const REPLY: &str = "docker-web";
/// How long dockerd may take to start, and a container to answer.
const DOCKER_TIMEOUT: Duration = Duration::from_secs(120);

/// One engine at a time: three containerd and dockerd starting together on a small CI machine
/// is what made one of them miss its start-up deadline.
static ENGINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Starts containerd, then dockerd, in the network namespace this runs in and a private mount
/// namespace (`unshare --mount --propagation private`), and stops both on SIGTERM, dockerd
/// first. `/sys` is mounted again so that it shows this network namespace's devices (docker
/// reads its bridge's settings there), with the host's cgroup hierarchies put back.
const START: &str = r#"set -e
mkdir -p "$D/cgroup"
mount --rbind /sys/fs/cgroup "$D/cgroup"
umount -l /sys
mount -t sysfs sysfs /sys
mount --rbind "$D/cgroup" /sys/fs/cgroup
mount -t tmpfs tmpfs /run
mkdir -p /run/containerd /run/docker
printf 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n' >"$D/containerd.toml"
containerd --config "$D/containerd.toml" --root "$D/containerd" --state /run/containerd \
  --address /run/containerd/containerd.sock >"$D/containerd.log" 2>&1 &
c=$!
i=0
while [ ! -S /run/containerd/containerd.sock ]; do
  kill -0 "$c" 2>/dev/null || { echo "containerd exited" >&2; exit 1; }
  i=$((i + 1)); [ "$i" -lt 1200 ] || { echo "containerd did not start" >&2; exit 1; }
  sleep 0.05
done
dockerd --data-root "$D/docker" --exec-root /run/docker --pidfile /run/docker.pid \
  -H unix:///run/docker.sock --containerd /run/containerd/containerd.sock \
  --storage-driver vfs >"$D/dockerd.log" 2>&1 &
d=$!
trap 'kill -TERM "$d"; wait "$d"; kill -TERM "$c"; wait "$c"; exit 0' TERM
wait
"#;

/// Why a Docker Engine cannot run here, or `None` if it can.
fn docker_unavailable() -> Option<String> {
    for program in ["dockerd", "containerd", "runc", "nsenter", "unshare", "tar"] {
        if support::cmd::find_program(program).is_none() {
            return Some(format!("`{program}` is not installed (Debian: docker.io)"));
        }
    }
    if docker_client().is_none() {
        return Some("the `docker` client is not installed (Debian: docker.io)".to_owned());
    }
    match std::fs::read("/bin/busybox") {
        Ok(elf) if !has_interpreter(&elf) => None,
        Ok(_) => Some("/bin/busybox is linked dynamically (Debian: busybox-static)".to_owned()),
        Err(_) => Some("/bin/busybox is missing (Debian: busybox-static)".to_owned()),
    }
}

/// Debian's client next to its `dockerd` when there is one, else the first in `PATH`.
fn docker_client() -> Option<PathBuf> {
    let debian = Path::new("/usr/bin/docker");
    if debian.is_file() {
        return Some(debian.to_owned());
    }
    support::cmd::find_program("docker")
}

/// Whether a 64-bit little-endian ELF file asks for a program interpreter (is linked
/// dynamically): one of its program headers is `PT_INTERP`.
fn has_interpreter(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let read = |at: usize, len: usize| -> Option<u64> {
        let bytes = elf.get(at..at + len)?;
        Some(
            bytes
                .iter()
                .rev()
                .fold(0u64, |value, byte| value << 8 | u64::from(*byte)),
        )
    };
    let header = || -> Option<bool> {
        if elf.get(..4)? != b"\x7fELF" || elf.get(4)? != &2 || elf.get(5)? != &1 {
            return Some(true);
        }
        let table = usize::try_from(read(0x20, 8)?).ok()?;
        let size = usize::try_from(read(0x36, 2)?).ok()?;
        let count = usize::try_from(read(0x38, 2)?).ok()?;
        Some((0..count).any(|i| read(table + i * size, 4) == Some(u64::from(PT_INTERP))))
    };
    header().unwrap_or(true)
}

/// Returns whether the test should go on: prints a skip line, or panics under
/// `NPG_REQUIRE_KERNEL_TESTS=1`, when Docker cannot run.
fn docker_tests_enabled() -> bool {
    match gate_decision(docker_unavailable().as_deref(), kernel_tests_required()) {
        GateDecision::Run => true,
        GateDecision::Skip(reason) => {
            let _ = writeln!(std::io::stderr(), "skipped: {reason}");
            false
        }
        GateDecision::Fail(reason) => panic!("Docker tests are required: {reason}"),
    }
}

/// A Docker Engine running in the lab's node namespace; dropping it removes every container,
/// stops dockerd and containerd and deletes their data.
struct Docker {
    /// The shell that started them (see [`START`]); it shares their namespaces.
    shell: Child,
    dir: tempfile::TempDir,
    /// Held until this engine is stopped (see [`ENGINE`]).
    _engine: std::sync::MutexGuard<'static, ()>,
}

impl Docker {
    /// Starts the engine in `lab`'s node namespace, with docker's rules in the iptables
    /// flavour of the lab's backend, and imports the busybox image `npg-busybox`.
    fn start(lab: &Lab) -> Docker {
        let engine = ENGINE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::Builder::new()
            .prefix("npg-docker-")
            .tempdir()
            .expect("temporary directory");
        // dockerd runs `iptables` from PATH: the flavour under test, first.
        let shims = dir.path().join("bin");
        std::fs::create_dir(&shims).expect("shim directory");
        let flavour = match lab.backend() {
            Backend::Legacy => "legacy",
            _ => "nft",
        };
        for program in ["iptables", "ip6tables"] {
            let target = support::cmd::find_program(&format!("{program}-{flavour}"))
                .unwrap_or_else(|| panic!("{program}-{flavour} is not installed"));
            std::os::unix::fs::symlink(target, shims.join(program)).expect("iptables shim");
        }
        let path = format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            shims.display()
        );
        let shell_log = std::fs::File::create(dir.path().join("shell.log")).expect("shell log");
        let shell = Command::new("nsenter")
            .arg(format!("--net={}", lab.node().path().display()))
            .args(["unshare", "--mount", "--propagation", "private", "sh", "-c"])
            .arg(START)
            .env("D", dir.path())
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(shell_log)
            .spawn()
            .expect("start containerd and dockerd");
        let mut docker = Docker {
            shell,
            dir,
            _engine: engine,
        };
        let mut exited = None;
        let ready = wait_until(DOCKER_TIMEOUT, POLL, || {
            exited = docker.shell.try_wait().ok().flatten();
            exited.is_some() || docker.cli(&["version"]).status.success()
        }) && exited.is_none();
        assert!(
            ready,
            "dockerd did not start (start-up shell: {exited:?}):\n{}",
            docker.logs()
        );
        docker.import_busybox();
        docker
    }

    /// `docker ARGS` against this engine (run in its mount and network namespaces).
    fn cli(&self, args: &[&str]) -> std::process::Output {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .expect("run docker")
    }

    /// `docker ARGS`, which must succeed; its standard output.
    #[track_caller]
    fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "docker {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--target={}", self.shell.id()))
            .args(["--mount", "--net"])
            .arg(docker_client().expect("docker client"))
            .args(["-H", "unix:///run/docker.sock"])
            .args(args);
        command
    }

    /// `docker import` of a root filesystem holding only a static busybox and the applets
    /// the container runs.
    fn import_busybox(&self) {
        let root = self.dir.path().join("rootfs");
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).expect("rootfs");
        std::fs::copy("/bin/busybox", bin.join("busybox")).expect("copy busybox");
        for applet in ["sh", "nc", "echo"] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("applet");
        }
        let tar = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .args(["-c", "."])
            .output()
            .expect("tar the rootfs");
        assert!(tar.status.success(), "tar failed");
        let mut import = self
            .command(&["import", "-", "npg-busybox"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("docker import");
        import
            .stdin
            .take()
            .expect("stdin")
            .write_all(&tar.stdout)
            .expect("write the image");
        let out = import.wait_with_output().expect("docker import");
        assert!(
            out.status.success(),
            "docker import failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `docker run -d -p PUBLISHED:80` of a container answering [`REPLY`] on port 80.
    fn run_web(&self, name: &str) {
        self.cli_ok(&[
            "run",
            "-d",
            "--name",
            name,
            "-p",
            &format!("{PUBLISHED}:80"),
            "npg-busybox",
            "/bin/nc",
            "-ll",
            "-p",
            "80",
            "-e",
            "/bin/echo",
            REPLY,
        ]);
    }

    /// The container's address on docker's bridge.
    fn address(&self, name: &str) -> String {
        self.cli_ok(&["inspect", "-f", "{{.NetworkSettings.IPAddress}}", name])
    }

    /// The last lines of the start-up shell's, dockerd's and containerd's logs.
    fn logs(&self) -> String {
        const LINES: usize = 30;
        ["shell.log", "dockerd.log", "containerd.log"]
            .iter()
            .map(|file| {
                let text = std::fs::read_to_string(self.dir.path().join(file)).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(LINES)..].join("\n");
                format!("--- {file} (last {LINES} lines) ---\n{tail}\n")
            })
            .collect()
    }
}

impl Drop for Docker {
    fn drop(&mut self) {
        let containers = self.cli(&["ps", "-aq"]);
        let ids = String::from_utf8_lossy(&containers.stdout).to_string();
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(ids);
            let _ = self.cli(&args);
        }
        // The mount namespace, to find whatever outlives the shell (a container's shim). Held
        // open until the end: a namespace's number is given to the next one made once it is
        // gone (every `ip netns exec` makes one), and the processes of that one are not ours
        // to kill. (This killed another test's commands, and once an engine's start.)
        let path = format!("/proc/{}/ns/mnt", self.shell.id());
        let held = std::fs::File::open(&path).ok();
        let namespace = held.as_ref().and_then(|_| std::fs::read_link(&path).ok());
        let shell = nix::unistd::Pid::from_raw(self.shell.id() as i32);
        let _ = nix::sys::signal::kill(shell, nix::sys::signal::Signal::SIGTERM);
        let stopped = wait_until(Duration::from_secs(30), POLL, || {
            matches!(self.shell.try_wait(), Ok(Some(_)))
        });
        if !stopped {
            let _ = self.shell.kill();
            let _ = self.shell.wait();
        }
        if let Some(namespace) = namespace {
            for pid in processes_in(&namespace) {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
        drop(held);
    }
}

/// The processes whose mount namespace is `namespace` (a `mnt:[…]` link).
fn processes_in(namespace: &Path) -> Vec<nix::unistd::Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|link| link == namespace)
        })
        .map(nix::unistd::Pid::from_raw)
        .collect()
}

/// Connects from `src` to the published port on the node's address of its family.
fn reach(lab: &Lab, src: std::net::IpAddr, timeout: Duration) -> Result<String, String> {
    let node = match src {
        std::net::IpAddr::V4(_) => std::net::IpAddr::V4(addr::NODE_V4),
        std::net::IpAddr::V6(_) => std::net::IpAddr::V6(addr::NODE_V6),
    };
    let dst: SocketAddr = sa(node, PUBLISHED);
    lab.connect(src, dst, timeout)
        .map_err(|error| format!("{error:?}"))
}

/// Waits until `src` gets the container's answer (a new container takes a moment).
#[track_caller]
fn assert_reaches(lab: &Lab, src: std::net::IpAddr) {
    let mut last = Err(String::new());
    let reached = wait_until(DOCKER_TIMEOUT, POLL, || {
        last = reach(lab, src, CONNECT_TIMEOUT);
        last.as_deref() == Ok(REPLY)
    });
    assert!(reached, "{src} does not reach the container: {last:?}");
}

/// `src`'s connection times out: its SYN was dropped.
#[track_caller]
fn assert_dropped(lab: &Lab, src: std::net::IpAddr) {
    let result = reach(lab, src, DROP_TIMEOUT);
    assert_eq!(result, Err("TimedOut".to_owned()), "{src} was not dropped");
}

/// `exposure --json`'s entry for docker's published IPv4 port.
fn published_entry(guard: &Guard) -> Value {
    let out = guard.run_expect(&["exposure", "--json"], 0);
    let json: Value = serde_json::from_str(&out.stdout).expect("exposure --json");
    json["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|port| {
            port["via"] == "dnat"
                && port["family"] == "ipv4"
                && port["protocol"] == "tcp"
                && port["port"] == PUBLISHED
        })
        .cloned()
        .unwrap_or_else(|| panic!("docker's published port is not listed:\n{}", out.stdout))
}

/// The mission whitelist on a port that `docker run -p` published: the listed sources reach
/// the container, an unlisted one (IPv4, and IPv6 through docker's userland proxy) is
/// dropped; a new container in the old one's place (docker rewrites its DNAT) changes
/// nothing of ours; `exposure` names the container and its whitelist; `cleanup` opens the
/// port to everyone again through docker's untouched rules.
fn published_port_is_whitelisted(backend: Backend) {
    if !docker_tests_enabled() {
        return;
    }
    let lab = Lab::new(backend);
    let docker = Docker::start(&lab);
    docker.run_web("web");
    let listed = std::net::IpAddr::V4(addr::CLIENT_V4[0]);
    let unlisted = std::net::IpAddr::V4(addr::CLIENT_V4[1]);
    let unlisted_v6 = std::net::IpAddr::V6(addr::CLIENT_V6[1]);
    // Docker's rules (and, for IPv6, its userland proxy) work before ours exist.
    assert_reaches(&lab, unlisted);
    assert_reaches(&lab, unlisted_v6);

    let guard = Guard::new(&lab);
    guard.write_policy(
        "docker.yaml",
        &Whitelist::mission()
            .name("docker-web")
            .port(PUBLISHED)
            .yaml(),
    );
    guard.apply();
    assert_reaches(&lab, listed);
    assert_dropped(&lab, unlisted);
    assert_dropped(&lab, unlisted_v6);

    let entry = published_entry(&guard);
    let container = docker.address("web");
    assert_eq!(entry["target"], format!("{container}:80"), "{entry}");
    assert_eq!(entry["reachableFrom"], "some", "{entry}");
    assert!(
        entry["decidedBy"]
            .as_str()
            .is_some_and(|by| by.contains("docker-web")),
        "{entry}"
    );

    // A new container in the old one's place: docker deletes and writes its rules again.
    docker.cli_ok(&["rm", "-f", "web"]);
    docker.run_web("web2");
    assert_reaches(&lab, listed);
    assert_dropped(&lab, unlisted);
    let (code, plan) = guard.plan_detailed();
    assert_eq!(code, 0, "docker's rewrite disturbed ours:\n{plan}");

    guard.cleanup();
    assert_reaches(&lab, unlisted);
    let entry = published_entry(&guard);
    assert_eq!(entry["reachableFrom"], "anyone", "{entry}");
}
backend_tests!(published_port_is_whitelisted);
