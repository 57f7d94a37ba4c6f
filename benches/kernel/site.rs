//! A nodeport-guard installation (config, policy directory, state directory), and the
//! restore and per-rule steps its `render` output stands for.

use std::path::PathBuf;

use crate::bin;
use crate::opts::Bk;
use crate::run::{Ran, Step, run_one, step};
use crate::support::Netns;

pub(crate) struct Site {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) backend: Bk,
}

impl Site {
    pub(crate) fn new(backend: Bk, config_extra: &str) -> Site {
        let dir = tempfile::Builder::new()
            .prefix("npg-kernel-bench-")
            // NPG_BENCH_KEEP=1 keeps the directories (configs, logs) for a look afterwards.
            .disable_cleanup(std::env::var_os("NPG_BENCH_KEEP").is_some())
            .tempdir()
            .expect("temporary directory");
        let site = Site { dir, backend };
        std::fs::create_dir(site.policies()).expect("policy directory");
        std::fs::write(
            site.path("config.yaml"),
            format!("nodeName: node1\n{config_extra}"),
        )
        .expect("config");
        site
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn policies(&self) -> PathBuf {
        self.path("policies")
    }

    pub(crate) fn write_policy(&self, file: &str, text: &str) {
        std::fs::write(self.policies().join(file), text).expect("policy file");
    }

    pub(crate) fn args(&self, command: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--config".into(),
            self.path("config.yaml").display().to_string(),
            "--policies".into(),
            self.policies().display().to_string(),
            "--state-dir".into(),
            self.path("state").display().to_string(),
            "--backend".into(),
            self.backend.arg().into(),
        ];
        args.extend(command.iter().map(|c| (*c).to_owned()));
        args
    }

    /// Runs nodeport-guard with `command` in `ns`; panics unless it exits 0.
    pub(crate) fn run(&self, ns: &Netns, command: &[&str]) -> Ran {
        let ran = run_one(ns, &bin(), &self.args(command), None);
        if !ran.success {
            panic!(
                "nodeport-guard {} failed in {}:\n{}{}",
                command.join(" "),
                ns.name(),
                ran.stdout,
                ran.stderr
            );
        }
        ran
    }

    /// `render` output for the host `ns` stands for (its addresses are part of the rules).
    pub(crate) fn render(&self, ns: &Netns) -> String {
        self.run(ns, &["render"]).stdout
    }
}

/// The `ipset restore` / `iptables-restore` / `ip6tables-restore` (or `nft -f`) steps that load
/// `render` output as it is: the floor of an apply.
pub(crate) fn restore_steps(backend: Bk, rendered: &str) -> Vec<Step> {
    if !backend.iptables() {
        return vec![step("nft", &["-f", "-"], Some(rendered))];
    }
    let mut steps = Vec::new();
    for section in sections(rendered) {
        let (program, args): (String, Vec<&str>) = match section.0.as_str() {
            "ipset" => ("ipset".into(), vec!["restore"]),
            "v4" => (backend.tool(false, "restore"), vec!["--noflush"]),
            "v6" => (backend.tool(true, "restore"), vec!["--noflush"]),
            _ => continue,
        };
        steps.push(step(&program, &args, Some(&section.1)));
    }
    steps
}

/// `render` output split at its `# …` headers into (ipset | v4 | v6, text).
pub(crate) fn sections(rendered: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in rendered.lines() {
        if let Some(header) = line.strip_prefix("# ") {
            let kind = if header.starts_with("ipset") {
                "ipset"
            } else if header.starts_with("ip6tables") {
                "v6"
            } else if header.starts_with("iptables") {
                "v4"
            } else {
                "other"
            };
            out.push((kind.to_owned(), String::new()));
            continue;
        }
        if let Some((_, text)) = out.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

/// The kernel rules (`-A`/`-I` lines, or nft `add rule` lines) in `render` output.
pub(crate) fn rule_count(rendered: &str) -> usize {
    rendered
        .lines()
        .filter(|l| l.starts_with("-A ") || l.starts_with("-I ") || l.starts_with("add rule "))
        .count()
}

/// Splits a restore line into words; double quotes group (our comments never hold quotes).
pub(crate) fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            c => {
                current.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(current);
    }
    out
}

/// What a hand-written script does: one `ipset` or `iptables` call per set, member, chain and
/// rule of `render` output.
pub(crate) fn per_rule_steps(backend: Bk, rendered: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    for (kind, text) in sections(rendered) {
        let mut table = String::from("filter");
        for line in text.lines() {
            let mut args: Vec<String> = Vec::new();
            let program = match kind.as_str() {
                "ipset" => {
                    args = words(line);
                    "ipset".to_owned()
                }
                "v4" | "v6" => {
                    let tool = backend.tool(kind == "v6", "");
                    if let Some(name) = line.strip_prefix('*') {
                        name.clone_into(&mut table);
                        continue;
                    }
                    if line == "COMMIT" || line.is_empty() {
                        continue;
                    }
                    args.extend(["-w".to_owned(), "-t".to_owned(), table.clone()]);
                    if let Some(declaration) = line.strip_prefix(':') {
                        let chain = declaration.split_whitespace().next().unwrap_or_default();
                        args.extend(["-N".to_owned(), chain.to_owned()]);
                    } else {
                        args.extend(words(line));
                    }
                    tool
                }
                _ => continue,
            };
            if !args.is_empty() {
                steps.push((program, args, None));
            }
        }
    }
    steps
}
