//! The RPM for the RHEL family holds what the Debian package holds (the binary, both systemd
//! units, the example config as `%config(noreplace)`, the policy directory, the man page, the
//! completions, the docs and examples, the monitoring files), requires `iptables` and `ipset`,
//! recommends `nftables`, and its scriptlets do what the Debian maintainer scripts do. It is
//! read with `rpm -qpl`, `-qpR`, `-qpi`, `--scripts` and `--dump` (Debian's `rpm` package), as
//! `tests/packaging.rs` reads the `.deb` with `dpkg-deb`.
//!
//! Building it takes minutes on a cold cache (a release build, and `cargo install
//! cargo-generate-rpm` the first time), so the build runs only with `NPG_REQUIRE_KERNEL_TESTS=1`
//! (CI), `NPG_TEST_DEB=1` or `NPG_TEST_RPM=1`; without `rpm` it skips with a printed reason,
//! unless `NPG_REQUIRE_KERNEL_TESTS=1` is set. The scriptlet test needs neither.

#[path = "support/executable.rs"]
mod executable;
mod package_contents;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest as _, Sha256};

use executable::write_executable;

const SCRIPTLETS: &str = "packaging/rpm/scriptlets";

/// Whether CI demands that every test runs (`NPG_REQUIRE_KERNEL_TESTS=1`).
fn everything_required() -> bool {
    std::env::var("NPG_REQUIRE_KERNEL_TESTS").is_ok_and(|value| value == "1")
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("cannot read `{}`: {error}", path.display()))
}

/// Runs a command; fails the test if it cannot start or fails.
#[track_caller]
fn run_ok(what: &str, command: &mut Command) -> String {
    let output: Output = command
        .output()
        .unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"));
    assert!(
        output.status.success(),
        "`{what}` exited with {}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn rpm_query(rpm: &Path, args: &[&str]) -> String {
    run_ok(
        &format!("rpm -qp {}", args.join(" ")),
        Command::new("rpm").arg("-qp").args(args).arg(rpm),
    )
}

fn sha256_of(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    let bytes = std::fs::read(path)
        .unwrap_or_else(|error| panic!("cannot read `{}`: {error}", path.display()));
    Sha256::digest(&bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// One packaged file as `rpm -qp --dump` prints it.
#[derive(Debug)]
struct Packaged {
    digest: String,
    mode: String,
    config: bool,
    doc: bool,
}

/// `rpm -qp --dump`: path, size, mtime, digest, mode, owner, group, isconfig, isdoc, rdev,
/// symlink.
fn dump(rpm: &Path) -> BTreeMap<String, Packaged> {
    rpm_query(rpm, &["--dump"])
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let file = Packaged {
                digest: (*fields.get(3)?).to_owned(),
                mode: (*fields.get(4)?).to_owned(),
                config: *fields.get(7)? == "1",
                doc: *fields.get(8)? == "1",
            };
            Some(((*fields.first()?).to_owned(), file))
        })
        .collect()
}

/// Builds the package with `packaging/rpm/build.sh`; `None` (a printed skip) when the build is
/// not asked for or `rpm` is missing.
fn build_rpm() -> Option<PathBuf> {
    let asked = ["NPG_TEST_DEB", "NPG_TEST_RPM"]
        .iter()
        .any(|name| std::env::var(name).is_ok_and(|value| value == "1"));
    if !(everything_required() || asked) {
        eprintln!(
            "skipped: building the RPM takes minutes; set NPG_TEST_RPM=1 (CI runs it with NPG_REQUIRE_KERNEL_TESTS=1)"
        );
        return None;
    }
    if Command::new("rpm").arg("--version").output().is_err() {
        assert!(
            !everything_required(),
            "NPG_REQUIRE_KERNEL_TESTS=1 is set, but `rpm` is not installed (Debian package `rpm`)"
        );
        eprintln!("skipped: `rpm` is not installed (Debian package `rpm`)");
        return None;
    }
    let stdout = run_ok(
        "packaging/rpm/build.sh",
        &mut Command::new("packaging/rpm/build.sh"),
    );
    let rpm = PathBuf::from(
        stdout
            .lines()
            .last()
            .expect("build.sh prints the path")
            .trim(),
    );
    assert!(rpm.is_file(), "{}", rpm.display());
    Some(rpm)
}

#[test]
fn rpm_holds_what_the_debian_package_holds_with_its_dependencies_and_scriptlets() {
    let Some(rpm) = build_rpm() else { return };
    let files = dump(&rpm);
    let listed = rpm_query(&rpm, &["-l"]);
    for path in files.keys() {
        assert!(listed.lines().any(|line| line == path), "{path}: {listed}");
    }
    let file = |path: &str| {
        files
            .get(path)
            .unwrap_or_else(|| panic!("the RPM lacks {path}: {listed}"))
    };
    // The packaged binary is the stripped release build of this version; the units and the
    // example config are the repository's, byte for byte.
    let binary = file("/usr/bin/nodeport-guard");
    assert_eq!(binary.mode, "0100755");
    let built = "target/assets/rpm/nodeport-guard";
    assert_eq!(binary.digest, sha256_of(built));
    let version = run_ok(
        "nodeport-guard --version",
        Command::new(built).arg("--version"),
    );
    assert_eq!(
        version.trim(),
        format!("nodeport-guard {}", env!("CARGO_PKG_VERSION"))
    );
    for (packaged, source) in [
        (
            "/usr/lib/systemd/system/nodeport-guard.service",
            "packaging/systemd/nodeport-guard.service",
        ),
        (
            "/usr/lib/systemd/system/nodeport-guard-reapply.service",
            "packaging/systemd/nodeport-guard-reapply.service",
        ),
        ("/etc/nodeport-guard/config.yaml", "packaging/config.yaml"),
        (
            "/usr/share/doc/nodeport-guard/monitoring/nodeport-guard.rules.yml",
            "packaging/monitoring/nodeport-guard.rules.yml",
        ),
        (
            "/usr/share/doc/nodeport-guard/monitoring/nodeport-guard.dashboard.json",
            "packaging/monitoring/nodeport-guard.dashboard.json",
        ),
    ] {
        assert_eq!(
            file(packaged).digest,
            sha256_of(source),
            "{packaged} differs from {source}"
        );
    }
    assert!(file("/etc/nodeport-guard/config.yaml").config);
    let config_files = rpm_query(&rpm, &["-c"]);
    assert!(
        config_files
            .lines()
            .any(|l| l == "/etc/nodeport-guard/config.yaml"),
        "{config_files}"
    );
    file("/usr/share/zsh/site-functions/_nodeport-guard");
    assert!(file("/usr/share/doc/nodeport-guard/schemas/nodeport-guard.schema.json").doc);
    package_contents::assert_shared_contents(&files.keys().cloned().collect());

    let requires = rpm_query(&rpm, &["-R"]);
    let names: Vec<&str> = requires
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    for wanted in ["iptables", "ipset", "/bin/sh"] {
        assert!(
            names.contains(&wanted),
            "Requires lacks {wanted}: {requires}"
        );
    }
    assert!(
        names.iter().any(|name| name.starts_with("libc.so.6")),
        "{requires}"
    );
    let recommends = rpm_query(&rpm, &["--recommends"]);
    assert!(
        recommends.contains("nftables") && recommends.contains("conntrack-tools"),
        "{recommends}"
    );

    let info = rpm_query(&rpm, &["-i"]);
    let field = |name: &str| -> String {
        info.lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == name).then(|| value.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("rpm -qpi has no {name}: {info}"))
    };
    assert_eq!(field("Name"), "nodeport-guard");
    assert_eq!(field("Version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(field("Release"), "1");
    assert_eq!(field("License"), "Apache-2.0");
    assert_eq!(field("Architecture"), std::env::consts::ARCH);

    // The scriptlets are the repository's.
    let scripts = rpm_query(&rpm, &["--scripts"]);
    for (section, file) in [
        ("postinstall scriptlet", "post.sh"),
        ("preuninstall scriptlet", "preun.sh"),
        ("postuninstall scriptlet", "postun.sh"),
    ] {
        let expected = read(format!("{SCRIPTLETS}/{file}"));
        assert!(
            scripts.contains(&format!("{section}:\n{}", expected.trim_end())),
            "the {section} is not {file}:\n{scripts}"
        );
    }
}

/// Runs a scriptlet with `$1` set to `argument` and a `systemctl` that only records its
/// arguments; returns them, one call a line.
fn systemctl_calls(script: &str, argument: &str) -> String {
    let dir = tempfile::tempdir().expect("temporary directory");
    let log = dir.path().join("calls");
    let fake = dir.path().join("systemctl");
    write_executable(
        &fake,
        format!("#!/bin/sh\necho \"$*\" >> '{}'\n", log.display()),
    );
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    run_ok(
        &format!("sh {script} {argument}"),
        Command::new("sh")
            .arg(format!("{SCRIPTLETS}/{script}"))
            .arg(argument)
            .env("PATH", path),
    );
    std::fs::read_to_string(&log).unwrap_or_default()
}

/// The scriptlets do what the Debian maintainer scripts do: enable both units and start the
/// daemon on install (never the reapply unit), restart it after an upgrade, and leave it alone
/// while an upgrade removes the old package. (The removal branch of `%preun` runs `cleanup`
/// on the machine's own firewall, so it is not run here; its text is checked above.)
#[test]
fn rpm_scriptlets_enable_start_and_restart_as_the_debian_scripts_do() {
    let systemd_runs = Path::new("/run/systemd/system").is_dir();
    let install = systemctl_calls("post.sh", "1");
    assert!(
        install
            .lines()
            .any(|line| line == "enable nodeport-guard.service nodeport-guard-reapply.service"),
        "{install}"
    );
    assert_eq!(
        install
            .lines()
            .any(|line| line == "start nodeport-guard.service"),
        systemd_runs,
        "{install}"
    );
    assert!(
        !install.contains("start nodeport-guard-reapply"),
        "{install}"
    );

    let upgrade = systemctl_calls("post.sh", "2");
    assert!(
        !upgrade.contains("enable") && !upgrade.contains("start"),
        "{upgrade}"
    );
    let after_upgrade = systemctl_calls("postun.sh", "1");
    assert_eq!(
        after_upgrade.contains("try-restart nodeport-guard.service"),
        systemd_runs,
        "{after_upgrade}"
    );
    let after_removal = systemctl_calls("postun.sh", "0");
    assert!(!after_removal.contains("restart"), "{after_removal}");
    let upgrade_removes_old = systemctl_calls("preun.sh", "1");
    assert!(upgrade_removes_old.is_empty(), "{upgrade_removes_old}");
    let preun = read(format!("{SCRIPTLETS}/preun.sh"));
    assert!(preun.contains("disable --now nodeport-guard.service nodeport-guard-reapply.service"));
    assert!(preun.contains("/usr/bin/nodeport-guard cleanup --yes"));
}
