//! The fake kernel against the real one: every golden policy, on every backend, written to a
//! fresh network namespace and to a `FakeKernel` by the same reconciles (one after the other,
//! then cleanup), and after each step what our parsers read from both must be the same state
//! (rule texts and counters aside: the fake echoes rules in our spelling). Every command runs
//! on both, and must succeed or fail on both alike. Then the same refused inputs go to both,
//! and both must refuse them with the same exit code and words.
//!
//! Needs root (skipped otherwise, failed when `NPG_REQUIRE_KERNEL_TESTS=1`); a backend whose
//! programs are missing is skipped the same way.

mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};

use nodeport_guard::compile::compile;
use nodeport_guard::config::Config;
use nodeport_guard::dataplane::fake::FakeKernel;
use nodeport_guard::dataplane::{Backend, Dataplane, Kernel, Output, Runner};
use nodeport_guard::model::IpFamily;
use nodeport_guard::reconcile::{ReconcileError, reconcile};
use nodeport_guard::ruleset::Ruleset;
use nodeport_guard::state::State;
use support::Netns;

const LEGACY: &dyn Backend = &nodeport_guard::dataplane::iptables::LEGACY;
const NFT: &dyn Backend = &nodeport_guard::dataplane::iptables::NFT;
const NATIVE: &dyn Backend = &nodeport_guard::dataplane::nftables::NFTABLES;

/// Runs programs inside a network namespace.
struct NetnsRunner<'a> {
    ns: &'a Netns,
}

impl Runner for NetnsRunner<'_> {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> std::io::Result<Output> {
        if support::cmd::find_program(program).is_none() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("`{program}` not found"),
            ));
        }
        let output = match stdin {
            Some(input) => self.ns.exec_with_stdin(program, args, input),
            None => self.ns.exec(program, args),
        };
        Ok(Output {
            success: output.success(),
            code: output.status.code(),
            stdout: output.stdout,
            stderr: output.stderr,
        })
    }

    fn exists(&self, program: &str) -> bool {
        support::cmd::find_program(program).is_some()
    }
}

/// Reads no sign: every reading goes to the programs.
impl Kernel for NetnsRunner<'_> {}

/// Runs every command on the real kernel and on the fake; answers with the real kernel's
/// output and notes every command the two did not agree on (one succeeded, one failed).
/// A write can be made to fail on both (it then runs on neither).
struct Mirror<'a> {
    real: NetnsRunner<'a>,
    fake: &'a FakeKernel,
    disagreements: Mutex<Vec<String>>,
    /// Writes to let through before one fails.
    fail_after: Mutex<Option<usize>>,
}

impl Mirror<'_> {
    fn fail_write(&self, n: usize) {
        *self
            .fail_after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(n - 1);
    }

    fn take_disagreements(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .disagreements
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Reads no sign: every reading goes to the programs.
impl Kernel for Mirror<'_> {}

impl Runner for Mirror<'_> {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> std::io::Result<Output> {
        let write = program.ends_with("-restore")
            || (program == "ipset" && args.first() == Some(&"restore"))
            || (program == "nft" && args.contains(&"-f"));
        if write {
            let mut fail_after = self
                .fail_after
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match *fail_after {
                Some(0) => {
                    *fail_after = None;
                    return Ok(Output {
                        success: false,
                        code: Some(1),
                        stdout: String::new(),
                        stderr: format!("{program}: line 1 failed (made to fail by the test)\n"),
                    });
                }
                Some(n) => *fail_after = Some(n - 1),
                None => {}
            }
        }
        let real = self.real.run(program, args, stdin)?;
        let fake = self.fake.run(program, args, stdin)?;
        if real.success != fake.success {
            let input = stdin.map(String::from_utf8_lossy).unwrap_or_default();
            self.disagreements
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(format!(
                    "`{program} {}`: kernel {:?} {:?}, fake {:?} {:?}\n--- input ---\n{input}",
                    args.join(" "),
                    real.code,
                    real.stderr,
                    fake.code,
                    fake.stderr
                ));
        }
        Ok(real)
    }

    fn exists(&self, program: &str) -> bool {
        self.real.exists(program)
    }
}

fn ruleset(file: &Path) -> Ruleset {
    let set = nodeport_guard::policy_set::load(&[file.to_path_buf()]);
    assert!(set.is_valid(), "{} is not valid", file.display());
    compile(
        &set.model,
        &Config::default(),
        &nodeport_guard::fixtures::golden_host(),
    )
    .ruleset
}

/// Shapes no golden policy has: a `Log` rule written to the kernel log (`-j LOG`, nft `log`
/// without a group, at Felix's level and at the default one the tools leave out), one negated
/// net folded into the main rule, and NFLOG prefixes of 63 characters hashed.
fn felix_shapes(dir: &Path) -> Ruleset {
    let name = "a-policy-name-of-fifty-eight-characters-for-felixs-prefix1";
    assert_eq!(name.len(), 58);
    let yaml = format!(
        "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: {name}}}
spec:
  selector: all()
  preDNAT: true
  applyOnForward: true
  ingress:
  - action: Deny
    protocol: TCP
    source: {{nets: [198.51.100.10/32, 203.0.113.0/24], notNets: [203.0.113.11/32]}}
  - action: Log
    protocol: UDP
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: logs-at-warning}}
spec:
  selector: all()
  ingress:
  - action: Log
"
    );
    let file = dir.join("felix-shapes.yaml");
    std::fs::write(&file, yaml).expect("write");
    let set = nodeport_guard::policy_set::load(std::slice::from_ref(&file));
    assert!(set.is_valid(), "{:?}", set.diagnostics);
    let mut config = Config {
        log_target: nodeport_guard::config::LogTarget::KernelLog {
            prefix: "calico-packet: ".into(),
            level: 5,
        },
        ..Config::default()
    };
    let mut ruleset = compile(
        &set.model,
        &config,
        &nodeport_guard::fixtures::golden_host(),
    )
    .ruleset;
    // The filter table's Log rule at the default level (4), which the tools do not print.
    config.log_target = nodeport_guard::config::LogTarget::KernelLog {
        prefix: "npg: ".into(),
        level: 4,
    };
    let at_warning = compile(
        &set.model,
        &config,
        &nodeport_guard::fixtures::golden_host(),
    )
    .ruleset;
    for (family, warning) in ruleset.families.iter_mut().zip(at_warning.families) {
        family
            .tables
            .retain(|table| table.table != nodeport_guard::ruleset::Table::Filter);
        family.tables.extend(
            warning
                .tables
                .into_iter()
                .filter(|table| table.table == nodeport_guard::ruleset::Table::Filter),
        );
    }
    ruleset
}

/// What our parsers read, without what may differ: rule texts (the fake echoes our spelling)
/// and counters.
fn comparable(mut state: State) -> State {
    for table in state.tables.values_mut() {
        for rule in table.chains.values_mut().flat_map(Arc::make_mut) {
            rule.text = Box::default();
            rule.counters = None;
        }
        for hook in table.hooks.values_mut().flatten() {
            hook.rule.text = Box::default();
            hook.rule.counters = None;
        }
    }
    state
}

fn programs(backend: &'static dyn Backend) -> &'static [&'static str] {
    match backend.name() {
        "iptables-legacy" => &[
            "iptables-legacy-save",
            "iptables-legacy-restore",
            "ip6tables-legacy-save",
            "ip6tables-legacy-restore",
            "ipset",
        ],
        "iptables-nft" => &[
            "iptables-nft-save",
            "iptables-nft-restore",
            "ip6tables-nft-save",
            "ip6tables-nft-restore",
            "ipset",
            "nft",
        ],
        _ => &["nft"],
    }
}

/// Whether the backend's programs are here; skips (or fails, when kernel tests are required)
/// otherwise.
fn tools_present(backend: &'static dyn Backend) -> bool {
    let missing: Vec<&str> = programs(backend)
        .iter()
        .copied()
        .filter(|program| support::cmd::find_program(program).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        !support::kernel_tests_required(),
        "{} is set, but {backend} lacks {missing:?}",
        support::REQUIRE_KERNEL_TESTS_ENV
    );
    eprintln!("skipped: {backend}: {missing:?} not found");
    false
}

fn assert_same(
    backend: &'static dyn Backend,
    ns: &Netns,
    fake: &FakeKernel,
    dir: &Path,
    step: &str,
) {
    let real_runner = NetnsRunner { ns };
    let real = Dataplane::new(backend, &real_runner, IpFamily::BOTH.to_vec(), dir)
        .observe()
        .unwrap_or_else(|e| panic!("{backend} {step}: reading the kernel: {e}"));
    let faked = Dataplane::new(backend, fake, IpFamily::BOTH.to_vec(), dir)
        .observe()
        .unwrap_or_else(|e| panic!("{backend} {step}: reading the fake: {e}"));
    let (real, faked) = (comparable(real), comparable(faked));
    if real != faked {
        let real_text = serde_json::to_string_pretty(&real).unwrap_or_default();
        let fake_text = serde_json::to_string_pretty(&faked).unwrap_or_default();
        let diff = similar::TextDiff::from_lines(&real_text, &fake_text)
            .unified_diff()
            .header("kernel", "fake")
            .to_string();
        panic!("{backend} {step}: the fake reads differently from the kernel:\n{diff}");
    }
}

/// A save or listing with what may differ taken out: each rule of ours becomes its chain (or
/// indentation) and hash, the tool's date lines and ipset's random `initval` go, and ipset
/// members (listed in the kernel's hash order) are sorted. Everything else, chains, their
/// order, policies, set types, flags and elements, stays as printed.
fn shape(text: &str, sort_members: bool) -> String {
    let mut lines: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with("# Generated by") || line.starts_with("# Completed on") {
            continue;
        }
        let hash = line.split("npg:").nth(1).map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect::<String>()
        });
        let rule = line.trim_start_matches(|c| c != '-').starts_with("-A ")
            && (line.starts_with("-A ") || line.starts_with('['));
        let shaped = match hash {
            Some(hash) if rule => {
                let chain = line
                    .split("-A ")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next());
                format!("-A {} npg:{hash}", chain.unwrap_or_default())
            }
            Some(hash) if line.starts_with("\t\t") && !line.contains("elements") => {
                format!("\t\trule npg:{hash}")
            }
            _ => line
                .split(' ')
                .filter(|word| !word.starts_with("0x") && *word != "initval")
                .collect::<Vec<_>>()
                .join(" "),
        };
        lines.push(shaped);
    }
    if sort_members {
        lines.sort();
    }
    lines.join("\n")
}

/// The saves and listings our parsers read, from the kernel and from the fake, must have the
/// same shape.
fn assert_same_text(backend: &'static dyn Backend, ns: &Netns, fake: &FakeKernel, step: &str) {
    let real = NetnsRunner { ns };
    let mut commands: Vec<(String, Vec<&str>)> = Vec::new();
    match backend.name() {
        "iptables-legacy" | "iptables-nft" => {
            let flavour = if backend == LEGACY { "legacy" } else { "nft" };
            for family in ["iptables", "ip6tables"] {
                commands.push((format!("{family}-{flavour}-save"), vec!["-c"]));
            }
            commands.push(("ipset".to_owned(), vec!["save"]));
        }
        _ => {
            for family in ["ip", "ip6"] {
                commands.push((
                    "nft".to_owned(),
                    vec!["-y", "list", "table", family, "nodeport_guard"],
                ));
            }
        }
    }
    for (program, args) in &commands {
        let program = program.as_str();
        let kernel = real.run(program, args, None).expect("runs");
        let faked = fake.run(program, args, None).expect("runs");
        let sort = program == "ipset";
        let (kernel_shape, fake_shape) = (shape(&kernel.stdout, sort), shape(&faked.stdout, sort));
        if (kernel.code, &kernel_shape) != (faked.code, &fake_shape) {
            let diff = similar::TextDiff::from_lines(&kernel_shape, &fake_shape)
                .unified_diff()
                .header("kernel", "fake")
                .to_string();
            panic!(
                "{backend} {step}: `{program} {}` prints differently (codes {:?} and {:?}):\n{diff}",
                args.join(" "),
                kernel.code,
                faked.code
            );
        }
    }
}

/// Every golden policy in turn, then nothing, through the same reconciles on both.
fn golden_policies_read_the_same(backend: &'static dyn Backend) {
    if !tools_present(backend) {
        return;
    }
    let ns = Netns::new();
    let fake = FakeKernel::new();
    let dir = tempfile::tempdir().expect("temporary directory");
    let mirror = Mirror {
        real: NetnsRunner { ns: &ns },
        fake: &fake,
        disagreements: Mutex::new(Vec::new()),
        fail_after: Mutex::new(None),
    };
    let dataplane = Dataplane::new(backend, &mirror, IpFamily::BOTH.to_vec(), dir.path());
    let mut steps: Vec<(String, State)> = nodeport_guard::fixtures::example_policies()
        .iter()
        .map(|file| (file.display().to_string(), backend.desired(&ruleset(file))))
        .collect();
    steps.push((
        "Felix's shapes, Log rules to the kernel log".to_owned(),
        backend.desired(&felix_shapes(dir.path())),
    ));
    steps.push(("cleanup".to_owned(), State::default()));
    let check = |step: &str| {
        let disagreements = mirror.take_disagreements();
        assert!(
            disagreements.is_empty(),
            "{backend} {step}: kernel and fake disagree:\n{}",
            disagreements.join("\n")
        );
        assert_same(backend, &ns, &fake, dir.path(), step);
        assert_same_text(backend, &ns, &fake, step);
    };
    for (index, (step, desired)) in steps.iter().enumerate() {
        if index > 0 {
            // First a failed attempt: iptables' 2nd write (the first table, after the sets),
            // nftables' only one. Both must be rolled back alike.
            mirror.fail_write(if backend == NATIVE { 1 } else { 2 });
            let failed = reconcile(&dataplane, desired);
            assert!(
                matches!(failed, Err(ReconcileError::RolledBack { .. })),
                "{backend} {step}: expected a rollback, got {:?}",
                failed.map(|outcome| outcome.plan.summary().line())
            );
            check(&format!("{step} (rolled back)"));
        }
        let outcome =
            reconcile(&dataplane, desired).unwrap_or_else(|e| panic!("{backend} {step}: {e}"));
        assert!(
            !outcome.plan.is_empty(),
            "{backend} {step}: nothing written"
        );
        check(step);
        let again = reconcile(&dataplane, desired).expect("second reconcile");
        assert!(
            again.plan.is_empty(),
            "{backend} {step}: second reconcile writes"
        );
        if drift(backend, &ns, &fake, desired) {
            let repair = reconcile(&dataplane, desired).expect("repair");
            assert!(!repair.plan.is_empty(), "{backend} {step}: drift not seen");
            check(&format!("{step} (drift repaired)"));
        }
    }
}

/// Deletes the last rule of one of our chains on both, as another program would, by the
/// kernel's own means (its position, or its nft handle). Whether there was one.
fn drift(backend: &'static dyn Backend, ns: &Netns, fake: &FakeKernel, desired: &State) -> bool {
    let Some((key, chain, position, hash)) = desired.tables.iter().find_map(|(key, table)| {
        table.chains.iter().find_map(|(chain, rules)| {
            let hash = rules.last()?.hash.clone()?;
            Some((*key, chain.clone(), rules.len(), hash))
        })
    }) else {
        return false;
    };
    let real = NetnsRunner { ns };
    let runners: [&dyn Runner; 2] = [&real, fake];
    for runner in runners {
        let output = match backend.name() {
            "iptables-legacy" | "iptables-nft" => {
                let flavour = if backend == LEGACY { "legacy" } else { "nft" };
                let family = if key.family == IpFamily::V4 {
                    "iptables"
                } else {
                    "ip6tables"
                };
                let script = format!("*{}\n-D {chain} {position}\nCOMMIT\n", key.table);
                runner.run(
                    &format!("{family}-{flavour}-restore"),
                    &["--noflush"],
                    Some(script.as_bytes()),
                )
            }
            _ => {
                let family = if key.family == IpFamily::V4 {
                    "ip"
                } else {
                    "ip6"
                };
                let listing = runner
                    .run(
                        "nft",
                        &["-a", "list", "table", family, "nodeport_guard"],
                        None,
                    )
                    .expect("lists");
                let handle = listing
                    .stdout
                    .lines()
                    .find(|line| line.contains(&format!("npg:{hash}")))
                    .and_then(|line| line.rsplit_once("# handle "))
                    .map(|(_, handle)| handle.trim().to_owned())
                    .expect("our rule is listed");
                let name = support::snapshot::nft_chain(&key.table.to_string(), &chain);
                runner.run(
                    "nft",
                    &[
                        "delete",
                        "rule",
                        family,
                        "nodeport_guard",
                        &name,
                        "handle",
                        &handle,
                    ],
                    None,
                )
            }
        };
        let output = output.expect("runs");
        assert!(output.success, "{backend}: drift: {}", output.stderr);
    }
    true
}

#[test]
fn golden_policies_read_the_same_iptables_legacy() {
    support::require_kernel!();
    golden_policies_read_the_same(LEGACY);
}

#[test]
fn golden_policies_read_the_same_iptables_nft() {
    support::require_kernel!();
    golden_policies_read_the_same(NFT);
}

#[test]
fn golden_policies_read_the_same_nftables() {
    support::require_kernel!();
    golden_policies_read_the_same(NATIVE);
}

/// What both kernels are given, in order: set-up both must accept, then inputs to refuse, then
/// what both hold: (program, arguments, stdin).
const REFUSALS: &[(&str, &[&str], &str)] = &[
    // Set-up both must accept.
    (
        "ipset",
        &["restore"],
        "create npg4-a hash:net family inet maxelem 1048576\nadd npg4-a 192.0.2.1/32\nadd npg4-a 198.51.100.7/24\n",
    ),
    (
        "iptables-legacy-restore",
        &["--noflush"],
        "*mangle\n:npg-b - [0:0]\n:npg-a - [0:0]\n-A npg-a -m set --match-set npg4-a src -j npg-b\nCOMMIT\n",
    ),
    (
        "iptables-nft-restore",
        &["--noflush"],
        "*mangle\n:npg-b - [0:0]\n:npg-a - [0:0]\n-A npg-a -j npg-b\n-I PREROUTING 1 -m comment --comment \"npg:H x\" -j npg-a\nCOMMIT\n",
    ),
    (
        "nft",
        &["-f", "-"],
        "add table ip nodeport_guard\nadd set ip nodeport_guard s { type ipv4_addr; flags interval; }\nadd element ip nodeport_guard s { 203.0.113.0/24, 192.0.2.0/24, 198.51.100.9 }\nadd chain ip nodeport_guard c\nadd rule ip nodeport_guard c ip saddr @s counter return comment \"npg:A\"\n",
    ),
    // Refused.
    (
        "iptables-legacy-restore",
        &["--noflush"],
        "*mangle\n:npg-c - [0:0]\n-A npg-c -j npg-missing\nCOMMIT\n",
    ),
    (
        "iptables-nft-restore",
        &["--noflush"],
        "*mangle\n:npg-c - [0:0]\n-A npg-c -j npg-missing\nCOMMIT\n",
    ),
    (
        "iptables-legacy-restore",
        &["--noflush"],
        "*mangle\n-X npg-b\nCOMMIT\n",
    ),
    (
        "iptables-legacy-restore",
        &["--noflush"],
        "*mangle\n-X npg-a\nCOMMIT\n",
    ),
    (
        "iptables-nft-restore",
        &["--noflush"],
        "*mangle\n-X npg-b\nCOMMIT\n",
    ),
    ("iptables-legacy-restore", &["--noflush"], "*foo\nCOMMIT\n"),
    ("iptables-nft-restore", &["--noflush"], "*foo\nCOMMIT\n"),
    (
        "iptables-legacy-restore",
        &["--noflush"],
        "*mangle\n-A npg-zz -j RETURN\nCOMMIT\n",
    ),
    (
        "iptables-nft-restore",
        &["--noflush"],
        "*mangle\n-A npg-zz -j RETURN\nCOMMIT\n",
    ),
    (
        "iptables-legacy-restore",
        &["--noflush"],
        "*mangle\n-D PREROUTING -j npg-a\nCOMMIT\n",
    ),
    (
        "iptables-nft-restore",
        &["--noflush"],
        "*mangle\n-D PREROUTING -j npg-a\nCOMMIT\n",
    ),
    (
        "iptables-nft-restore",
        &["--noflush"],
        "*mangle\n-A npg-a -m set --match-set npg4-nope src -j RETURN\nCOMMIT\n",
    ),
    (
        "ipset",
        &["restore"],
        "create npg4-a hash:net family inet maxelem 1048576\n",
    ),
    ("ipset", &["restore"], "add npg4-zz 192.0.2.1\n"),
    ("ipset", &["restore"], "destroy npg4-a\n"),
    ("ipset", &["restore"], "destroy npg4-nope\n"),
    ("ipset", &["restore"], "add npg4-a 0.0.0.0/0\n"),
    ("ipset", &["restore"], "del npg4-a 10.0.0.0/8\n"),
    ("ipset", &["restore"], "add npg4-a 2001:db8::1\n"),
    ("ipset", &["save", "npg4-nope"], ""),
    (
        "ipset",
        &["restore"],
        "create npg4-t hash:ip family inet maxelem 1048576\nswap npg4-t npg4-a\n",
    ),
    (
        "ipset",
        &["restore"],
        "create npg4-u hash:net family inet maxelem 1048576\nadd npg4-u 203.0.113.0/24\nswap npg4-u npg4-a\ndestroy npg4-u\n",
    ),
    ("ipset", &["save", "npg4-t"], ""),
    // ipset restore is not one transaction: a syntax error drops the run of adds it ends,
    // a kernel error keeps what came before it.
    (
        "ipset",
        &["restore"],
        "create npg4-q hash:net family inet\nadd npg4-q 192.0.2.1\nadd npg4-q 2001:db8::1\n",
    ),
    ("ipset", &["save", "npg4-q"], ""),
    (
        "ipset",
        &["restore"],
        "add npg4-q 203.0.113.5\nadd npg4-q 198.51.100.0/24\nadd npg4-q 203.0.113.5\n",
    ),
    (
        "ipset",
        &["restore"],
        "add npg4-q 10.0.0.1\nadd npg4-q 0.0.0.0/0\n",
    ),
    (
        "ipset",
        &["restore"],
        "create npg4-r hash:net family inet\nadd npg4-r 10.1.0.1\ncreate npg4-q hash:net family inet\n",
    ),
    ("ipset", &["save", "npg4-q"], ""),
    ("ipset", &["save", "npg4-r"], ""),
    // (nft suggests a chain of a similar name when there is one; the fake never does.)
    (
        "nft",
        &["-f", "-"],
        "add rule ip nodeport_guard c counter jump chain-of-another-name\n",
    ),
    // All or nothing: chain d must not be left behind.
    (
        "nft",
        &["-f", "-"],
        "add chain ip nodeport_guard d\nadd rule ip nodeport_guard d counter jump chain-of-another-name\n",
    ),
    // One transaction per table: the first table stays, the second is not written.
    (
        "iptables-legacy-restore",
        &["--noflush"],
        "*filter\n:npg-d - [0:0]\nCOMMIT\n*raw\n:npg-e - [0:0]\n-A npg-zz -j RETURN\nCOMMIT\n",
    ),
    (
        "iptables-nft-restore",
        &["--noflush"],
        "*filter\n:npg-d - [0:0]\nCOMMIT\n*raw\n:npg-e - [0:0]\n-A npg-e -j npg-missing\nCOMMIT\n",
    ),
    ("nft", &["-f", "-"], "delete set ip nodeport_guard s\n"),
    ("nft", &["-f", "-"], "delete chain ip nodeport_guard c\n"),
    (
        "nft",
        &["-f", "-"],
        "add element ip nodeport_guard s { 192.0.2.0/25 }\n",
    ),
    ("nft", &["list", "table", "ip6", "nodeport_guard"], ""),
    // What both now hold.
    ("ipset", &["save", "npg4-a"], ""),
    (
        "nft",
        &["-y", "-a", "list", "table", "ip", "nodeport_guard"],
        "",
    ),
    ("nft", &["list", "chain", "ip", "nodeport_guard", "c"], ""),
    ("iptables-legacy-save", &["-c"], ""),
    ("iptables-nft-save", &["-c"], ""),
    ("iptables-nft-save", &["-t", "raw"], ""),
    ("nft", &["list", "table", "ip", "mangle"], ""),
    ("nft", &["list", "chain", "ip", "mangle", "PREROUTING"], ""),
    ("nft", &["list", "tables"], ""),
    // One set listed alone, as the read-back after a write lists what it wrote.
    (
        "nft",
        &["-f", "-"],
        "add set ip nodeport_guard listed { type ipv4_addr; flags interval; }\nadd element ip nodeport_guard listed { 192.0.2.0/24, 198.51.100.7 }\n",
    ),
    (
        "nft",
        &["-y", "list", "set", "ip", "nodeport_guard", "listed"],
        "",
    ),
    (
        "nft",
        &["-y", "list", "set", "ip", "nodeport_guard", "absent-set"],
        "",
    ),
];

/// Inputs the kernel refuses: both must refuse them with the same exit code and stderr (the
/// version banner and nft's caret lines included).
#[test]
fn the_fake_refuses_what_the_kernel_refuses() {
    support::require_kernel!();
    if !(tools_present(LEGACY) && tools_present(NFT) && tools_present(NATIVE)) {
        return;
    }
    let ns = Netns::new();
    let real = NetnsRunner { ns: &ns };
    let fake = FakeKernel::new();
    let cases = REFUSALS;
    let mut differences = Vec::new();
    // The tools' version banners (`iptables-restore v1.8.9 (legacy)`) differ between Debian
    // releases; the fake speaks for one of them.
    let version = regex::Regex::new(r"v[0-9]+\.[0-9]+(\.[0-9]+)?").expect("regex");
    for (program, args, input) in cases {
        let stdin = (!input.is_empty()).then_some(input.as_bytes());
        let kernel = real.run(program, args, stdin).expect("runs");
        let faked = fake.run(program, args, stdin).expect("runs");
        // ipset's initval is random in the kernel, and members come in its hash order.
        let stable = |text: &str| {
            let mut lines: Vec<String> = text
                .lines()
                .filter(|line| !line.starts_with("# Generated") && !line.starts_with("# Completed"))
                .map(|line| {
                    line.split_whitespace()
                        .filter(|word| !word.starts_with("initval") && !word.starts_with("0x"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            if *program == "ipset" {
                lines.sort();
            }
            lines.join("\n")
        };
        // nft may add a suggestion ("did you mean chain …") the fake does not make up: there,
        // only the position of the error must agree.
        let suggests = kernel.stderr.contains("did you mean");
        let stderr = |text: &str| {
            let text = version.replace_all(text, "vN");
            if suggests {
                text.split("Error:").next().unwrap_or_default().to_owned()
            } else {
                text.into_owned()
            }
        };
        if (kernel.code, stable(&kernel.stdout), stderr(&kernel.stderr))
            != (faked.code, stable(&faked.stdout), stderr(&faked.stderr))
        {
            differences.push(format!(
                "`{program} {}` with\n{input}kernel: {:?}\n{}{}fake:   {:?}\n{}{}",
                args.join(" "),
                kernel.code,
                kernel.stdout,
                kernel.stderr,
                faked.code,
                faked.stdout,
                faked.stderr
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "the fake answers differently:\n\n{}",
        differences.join("\n")
    );
}
