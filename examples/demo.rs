//! The demo of the README (`scripts/demo`): nodeport-guard protecting a NodePort, in throwaway
//! network namespaces. It never touches the host's own firewall, and removes everything it
//! made, even when a step fails.
//!
//! Run it as root through `scripts/demo`, which builds it first.

#![allow(missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use support::{Backend, CONNECT_TIMEOUT, DROP_TIMEOUT, Lab, addr, ports};

/// The whitelisted and the blocked source of the mission example (policies/nodeport-whitelist.yaml).
const ALLOWED: IpAddr = IpAddr::V4(addr::CLIENT_V4[0]);
const BLOCKED: IpAddr = IpAddr::V4(addr::CLIENT_V4[1]);

fn step(number: u32, text: &str) {
    use std::io::IsTerminal as _;
    let bold = std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    if bold {
        println!("\n\x1b[1m==> {number}. {text}\x1b[0m");
    } else {
        println!("\n==> {number}. {text}");
    }
}

fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the demo knows where it is");
    // target/<profile>/examples/demo → target/<profile>/nodeport-guard
    exe.parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("nodeport-guard"))
        .filter(|path| path.is_file())
        .expect("build nodeport-guard first: scripts/demo does")
}

struct Demo {
    lab: Lab,
    binary: PathBuf,
    config: PathBuf,
    policies: PathBuf,
    state: PathBuf,
    backend: &'static str,
}

impl Demo {
    fn run(&self, args: &[&str]) -> support::CmdOutput {
        let mut full: Vec<String> = vec![
            "--config".into(),
            self.config.display().to_string(),
            "--policies".into(),
            self.policies.display().to_string(),
            "--state-dir".into(),
            self.state.display().to_string(),
            "--backend".into(),
            self.backend.into(),
        ];
        full.extend(args.iter().map(|arg| (*arg).to_owned()));
        self.lab
            .node()
            .exec(&self.binary.display().to_string(), &full)
    }

    /// Starts a command in the node's namespace without waiting for it.
    fn spawn(&self, args: &[&str]) -> std::process::Child {
        let mut full: Vec<String> = vec![
            "netns".into(),
            "exec".into(),
            self.lab.node().name().to_owned(),
            self.binary.display().to_string(),
            "--config".into(),
            self.config.display().to_string(),
            "--policies".into(),
            self.policies.display().to_string(),
        ];
        full.extend(args.iter().map(|arg| (*arg).to_owned()));
        std::process::Command::new("ip")
            .args(&full)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start nodeport-guard")
    }

    /// Whether some program listens on NFLOG group 1 in the node's namespace.
    fn group_bound(&self) -> bool {
        let table = self
            .lab
            .node()
            .exec("cat", &["/proc/net/netfilter/nfnetlink_log"])
            .stdout;
        table
            .lines()
            .any(|line| line.split_whitespace().next() == Some("1"))
    }

    fn probe(&self, source: IpAddr, port: u16, expect_open: bool) -> bool {
        let destination = SocketAddr::new(addr::NODE_V4.into(), port);
        let timeout = if expect_open {
            CONNECT_TIMEOUT
        } else {
            DROP_TIMEOUT
        };
        let result = self.lab.connect(source, destination, timeout);
        let shown = match &result {
            Ok(answer) => format!("connected, the server answered {:?}", answer.trim()),
            Err(error) if error.is_timeout() => "no answer: dropped".to_owned(),
            Err(error) => format!("failed: {error:?}"),
        };
        println!("    {source:>15} → {destination:<19} {shown}");
        result.is_ok() == expect_open
    }
}

/// Runs `drops --count 1` while the blocked client knocks, and prints the line it shows.
fn show_one_drop(demo: &Demo) -> bool {
    use std::io::Read as _;
    let mut drops = demo.spawn(&["drops", "--count", "1"]);
    let deadline = std::time::Instant::now() + CONNECT_TIMEOUT * 5;
    while !demo.group_bound() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    while std::time::Instant::now() < deadline {
        let _ = demo.lab.connect(
            BLOCKED,
            SocketAddr::new(addr::NODE_V4.into(), ports::NODEPORT),
            DROP_TIMEOUT,
        );
        if let Ok(Some(_)) = drops.try_wait() {
            break;
        }
    }
    let _ = drops.kill();
    let _ = drops.wait();
    let mut shown = String::new();
    if let Some(mut out) = drops.stdout.take() {
        let _ = out.read_to_string(&mut shown);
    }
    match shown.lines().next() {
        Some(line) => {
            println!("    {line}");
            line.contains("allow-cluster-nodeport-only") && line.contains("rule 1")
        }
        None => {
            println!("    drops showed nothing");
            false
        }
    }
}

fn main() -> ExitCode {
    if let Some(reason) = support::kernel_unavailable_reason() {
        eprintln!("the demo needs root and network namespaces: {reason}");
        return ExitCode::from(1);
    }
    let backend_arg = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "iptables-nft".to_owned());
    let (lab_backend, backend) = match backend_arg.as_str() {
        "iptables-legacy" => (Backend::Legacy, "iptables-legacy"),
        "nftables" => (Backend::Nft, "nftables"),
        _ => (Backend::Nft, "iptables-nft"),
    };
    let work = tempfile::tempdir().expect("a temporary directory");
    let policies = work.path().join("policies");
    std::fs::create_dir(&policies).expect("policy directory");
    for entry in std::fs::read_dir("policies").expect("run the demo from the repository root") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, policies.join(path.file_name().expect("name"))).expect("copy example");
    }
    let config = work.path().join("config.yaml");
    std::fs::write(&config, "nodeName: demo-node\n").expect("config");

    step(
        1,
        "A node, a client and a pod (a container's namespace) in throwaway network namespaces",
    );
    let demo = Demo {
        lab: Lab::new(lab_backend),
        binary: binary(),
        config,
        policies: policies.clone(),
        state: work.path().join("state"),
        backend,
    };
    println!(
        "    node {} (198.51.100.1), client {} (198.51.100.10-13 and 203.0.113.10-13), pod {} (192.0.2.2, routed through the node)",
        demo.lab.node().name(),
        demo.lab.client().name(),
        demo.lab.pod().name()
    );
    println!(
        "    NodePort 30008 is DNATed to a local server on 8080, as kube-proxy does; port 9100 is a plain host service"
    );

    step(2, "Before nodeport-guard: everyone reaches NodePort 30008");
    let mut ok = demo.probe(ALLOWED, ports::NODEPORT, true);
    ok &= demo.probe(BLOCKED, ports::NODEPORT, true);

    step(3, "validate the example policies (policies/*.yaml)");
    let validate = demo.run(&["validate"]);
    print!("    {}", validate.stdout);
    ok &= validate.status.success();

    step(
        4,
        "plan: what nodeport-guard would change (the NodePort policy's chain in full)",
    );
    let plan = demo.run(&["plan"]);
    for section in plan.stdout.split("\n\n") {
        let mut lines = section.lines();
        let Some(header) = lines.next() else { continue };
        if section.contains("allow-cluster-nodeport-only")
            || header.starts_with("Plan:")
            || header.starts_with("What changes")
        {
            println!("    {}", section.replace('\n', "\n    "));
        } else {
            println!("    {header}  …");
        }
    }

    step(5, "apply --yes");
    let apply = demo.run(&["apply", "--yes"]);
    println!("    {}", apply.stdout.lines().last().unwrap_or_default());
    ok &= apply.status.success();

    step(
        6,
        "After: only whitelisted sources reach NodePort 30008; other ports stay open",
    );
    ok &= demo.probe(ALLOWED, ports::NODEPORT, true);
    ok &= demo.probe(BLOCKED, ports::NODEPORT, false);
    ok &= demo.probe(BLOCKED, ports::HOST_SERVICE, true);

    step(
        7,
        "drops --count 1: who was dropped, by which policy and rule (from NFLOG group 1)",
    );
    ok &= show_one_drop(&demo);

    step(
        8,
        "trace: the same packet through the policies, worked out without the kernel",
    );
    let trace = demo.run(&[
        "trace",
        "--src",
        &BLOCKED.to_string(),
        "--dst",
        &addr::NODE_V4.to_string(),
        "--dport",
        &ports::NODEPORT.to_string(),
    ]);
    for line in trace.stdout.lines().filter(|l| !l.trim().is_empty()) {
        println!("    {line}");
    }
    ok &= trace.status.success() && trace.stdout.contains("rule 1 (Deny) matched");

    step(
        9,
        "status: what the kernel holds, packets per policy rule, and whether it is in sync",
    );
    let status = demo.run(&["status"]);
    for line in status.stdout.lines().filter(|l| {
        l.starts_with("POLICY")
            || l.contains("allow-cluster-nodeport-only")
            || l.starts_with("In sync")
            || l.starts_with("Out of sync")
    }) {
        println!("    {line}");
    }

    step(10, "cleanup --yes: nothing of nodeport-guard remains");
    let cleanup = demo.run(&["cleanup", "--yes"]);
    println!("    {}", cleanup.stdout.lines().last().unwrap_or_default());
    ok &= cleanup.status.success();
    let leftovers = [
        demo.lab.iptables_save(support::Family::V4),
        demo.lab.iptables_save(support::Family::V6),
        demo.lab.node().exec("ipset", &["list", "-n"]).stdout,
        demo.lab.node().exec("nft", &["list", "ruleset"]).stdout,
    ]
    .iter()
    .flat_map(|text| {
        text.lines()
            .filter(|l| l.contains("npg") || l.contains("nodeport_guard"))
            .map(str::to_owned)
    })
    .count();
    println!(
        "    lines naming npg left in iptables-save, ip6tables-save, ipset and nft: {leftovers}"
    );
    ok &= leftovers == 0;

    drop(demo);
    println!(
        "\nThe namespaces are gone. {}",
        if ok {
            "Demo finished: everything behaved as expected."
        } else {
            "Something did not behave as expected (see above)."
        }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
