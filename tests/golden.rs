//! Golden tests: every example in `policies/` validates, and renders to exactly the text checked
//! in under `tests/golden/`. The golden files are meant to be read: a change to the compiler
//! shows up here as a diff a reviewer can judge.
//!
//! To accept a deliberate change, run `NPG_BLESS=1 cargo test --test golden` and review the diff.

use std::path::{Path, PathBuf};

use nodeport_guard::compile::compile;
use nodeport_guard::config::Config;
use nodeport_guard::policy_set::load as load_policies;

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir("policies")
        .expect("policies/ exists")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn render(file: &Path) -> String {
    let set = load_policies(&[file.to_path_buf()]);
    let errors: Vec<String> = set
        .diagnostics
        .iter()
        .map(|d| d.headline(&set.sources))
        .collect();
    assert!(
        set.is_valid(),
        "{} is not valid: {errors:#?}",
        file.display()
    );
    assert!(
        errors.is_empty(),
        "{} has warnings: {errors:#?}",
        file.display()
    );
    let compiled = compile(
        &set.model,
        &Config::default(),
        &nodeport_guard::fixtures::golden_host(),
    );
    let mut text = String::new();
    for warning in &compiled.warnings {
        text.push_str(&format!("# note: {}\n", warning.message));
    }
    text.push_str(&nodeport_guard::dataplane::iptables::render::render_all(
        &compiled.ruleset,
    ));
    text
}

#[test]
fn every_example_validates_and_renders_as_its_golden_file() {
    let bless = std::env::var_os("NPG_BLESS").is_some();
    let mut mismatches = Vec::new();
    let examples = examples();
    assert!(examples.len() >= 5, "the examples are missing");
    for file in examples {
        let stem = file
            .file_stem()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let golden = Path::new("tests/golden").join(format!("{stem}.rules"));
        let actual = render(&file);
        if bless {
            std::fs::write(&golden, &actual).expect("write golden");
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected != actual {
            let diff = similar::TextDiff::from_lines(&expected, &actual)
                .unified_diff()
                .header(&golden.display().to_string(), "rendered")
                .to_string();
            mismatches.push(diff);
        }
    }
    assert!(
        mismatches.is_empty(),
        "rendered rules differ from the golden files (run `NPG_BLESS=1 cargo test --test golden` to accept, then review):\n{}",
        mismatches.join("\n")
    );
}

/// The mission example must keep Felix's `cali-pi-*` rule sequence: scratch0 per allowed net,
/// accept mark, RETURN, drop mark on port 30008, NFLOG, DROP.
#[test]
fn mission_example_keeps_felix_shape() {
    let text = render(Path::new("policies/nodeport-whitelist.yaml"));
    let policy_rules = |table: &str| -> Vec<&str> {
        let mut in_table = false;
        text.lines()
            .filter(|line| {
                if line.starts_with("# ") {
                    in_table = line.contains(&format!("table {table})"));
                }
                // The policy chain's rules (not the early drop's copies of its log and drop).
                in_table
                    && line.starts_with("-A npg-pi-")
                    && line.contains("policy allow-cluster-nodeport-only ingress rule")
            })
            .collect()
    };
    // The early drop judges TCP SYNs in raw with the same policy chain, less what cannot
    // concern a SYN to a guarded port: here the clear of mark bits nothing has set yet.
    let without_hash = |line: &str| -> String {
        line.split(' ')
            .filter(|word| !word.starts_with("\"npg:"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let raw_rules: Vec<String> = policy_rules("raw").into_iter().map(without_hash).collect();
    let policy_rules = policy_rules("mangle");
    let mangle_rules: Vec<String> = policy_rules.iter().map(|l| without_hash(l)).collect();
    let mut rest = mangle_rules.iter();
    for raw in &raw_rules {
        assert!(
            rest.any(|m| m == raw),
            "{raw}: not in mangle's chain, in order"
        );
    }
    assert_eq!(mangle_rules.len() - raw_rules.len(), 1);
    let shapes: Vec<&str> = policy_rules
        .iter()
        .map(|line| line.rsplit_once(" -j ").map_or("", |(_, action)| action))
        .collect();
    // The IPv4 chain comes first; in the IPv6 chain rule 0 has no net of its family and is
    // left out, so only rule 1's three rules follow.
    assert_eq!(shapes.len(), 9 + 3);
    assert_eq!(
        &shapes[..9],
        &[
            "MARK --set-xmark 0x0/0x180000",
            "MARK --set-xmark 0x80000/0x80000",
            "MARK --set-xmark 0x80000/0x80000",
            "MARK --set-xmark 0x80000/0x80000",
            "MARK --set-xmark 0x10000/0x10000",
            "RETURN",
            "MARK --set-xmark 0x40000/0x40000",
            "NFLOG --nflog-prefix \"DPI1|allow-cluster-nodeport-only\" --nflog-group 1 --nflog-size 80 --nflog-threshold 1",
            "DROP",
        ]
    );
    assert!(policy_rules[6].contains("-p tcp -m comment"));
    assert!(policy_rules[6].contains("-m multiport --dports 30008"));
}
