//! What the Debian package and the RPM both hold in the same places, checked against a
//! package's list of paths (`tests/packaging.rs` reads the `.deb`, `tests/packaging_rpm.rs` the
//! `.rpm`).

use std::collections::BTreeSet;

/// Paths both packages install, in the same place on Debian and on the RHEL family.
const SHARED_PATHS: &[&str] = &[
    "/usr/bin/nodeport-guard",
    "/etc/nodeport-guard/config.yaml",
    "/etc/nodeport-guard/policies/README",
    "/usr/share/man/man1/nodeport-guard.1.gz",
    "/usr/share/bash-completion/completions/nodeport-guard",
    "/usr/share/fish/vendor_completions.d/nodeport-guard.fish",
    "/usr/share/doc/nodeport-guard/schemas/nodeport-guard.schema.json",
    "/usr/share/doc/nodeport-guard/confd/conf.d/nodeport-guard.toml",
    "/usr/share/doc/nodeport-guard/monitoring/nodeport-guard.rules.yml",
    "/usr/share/doc/nodeport-guard/monitoring/prometheusrule.yaml",
    "/usr/share/doc/nodeport-guard/monitoring/nodeport-guard.dashboard.json",
];

/// Asserts that a package's `paths` hold every shared path and every example policy, and that
/// its policy directory holds no policy: nothing is enforced until the operator adds one.
#[track_caller]
pub fn assert_shared_contents(paths: &BTreeSet<String>) {
    for path in SHARED_PATHS {
        assert!(paths.contains(*path), "the package lacks {path}: {paths:?}");
    }
    assert!(
        !paths.iter().any(|path| {
            path.starts_with("/etc/nodeport-guard/policies/")
                && nodeport_guard::load::is_policy_file_name(path.rsplit('/').next().unwrap_or(""))
        }),
        "the package ships a policy: {paths:?}"
    );
    for entry in std::fs::read_dir("policies").expect("policies/") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let packaged = format!("/usr/share/doc/nodeport-guard/examples/{name}");
        assert!(paths.contains(&packaged), "example {name} is not packaged");
    }
}
