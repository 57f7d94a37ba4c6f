//! Fixtures the unit tests, the integration tests and the benchmarks share: the example
//! policies and the host the golden files are rendered for, the mission's whitelist, and
//! settings for a policy directory. A test double like `dataplane::fake`, never used by the
//! program itself.

use std::path::{Path, PathBuf};

use crate::config::{BackendChoice, Config};
use crate::dataplane::{BACKENDS, Backend};
use crate::facts::{HostFacts, Interface};
use crate::settings::Settings;

/// The mission in one policy: a NodePort only the whitelisted source may reach.
pub const WHITELIST: &str = "\
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: guard-nodeport
spec:
  preDNAT: true
  applyOnForward: true
  selector: has(kubernetes.io/hostname)
  ingress:
    - action: Allow
      source:
        nets: [198.51.100.10/32]
    - action: Deny
      protocol: TCP
      destination:
        ports: [30008]
";

/// Ingress denied everywhere: a normal policy on every host endpoint, forwarded traffic
/// included, with no rule (Calico's default deny at the end of its tier). Only failsafe ports
/// stay open.
pub const DENY_ALL: &str = "\
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: deny-all
spec:
  selector: all()
  applyOnForward: true
  types: [Ingress]
";

/// The policies of `yaml` (one file, `policies.yaml`), validated.
///
/// # Panics
///
/// When they are invalid: a fixture's input is valid.
pub fn model(yaml: &str) -> crate::model::Model {
    let file = crate::counters::PolicyFile {
        path: PathBuf::from("policies.yaml"),
        text: yaml.to_owned(),
    };
    let set = crate::policy_set::from_files(&[file]);
    assert!(set.is_valid(), "{:?}", set.diagnostics);
    set.model
}

/// The example policies in `policies/`, sorted (each has a golden file in `tests/golden/`).
///
/// # Panics
///
/// When they are missing: a test over none of them would test nothing.
pub fn example_policies() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    assert!(
        files.len() >= 5,
        "the example policies in `{}` are missing",
        dir.display()
    );
    files
}

/// The host the golden files are rendered for: fixed, so they do not depend on this machine.
pub fn golden_host() -> HostFacts {
    let address = |text: &str| text.parse().ok();
    HostFacts {
        interfaces: vec![Interface {
            name: "eth0".into(),
            addresses: ["198.51.100.1", "2001:db8:1::1"]
                .into_iter()
                .filter_map(address)
                .collect(),
        }],
        ..HostFacts::minimal("node1")
    }
}

/// Settings for node `node1` reading `policies_dir`, with its state under `state_dir`.
pub fn settings(policies_dir: &Path, state_dir: &Path, backend: &'static dyn Backend) -> Settings {
    Settings {
        config: Config {
            policies_dir: policies_dir.to_path_buf(),
            node_name: Some("node1".to_owned()),
            ..Config::default()
        },
        config_path: state_dir.join("no-config.yaml"),
        backend: BackendChoice::Named(backend),
        state_dir: state_dir.to_path_buf(),
        load: Default::default(),
    }
}

/// Every backend, for tests that run on each.
pub fn each_backend(test: impl Fn(&'static dyn Backend)) {
    for backend in BACKENDS {
        test(*backend);
    }
}
