//! The files in `packaging/` must work with the binary they ship: the systemd unit verifies and
//! keeps its promises (notify, reload, watchdog, sandbox), the Kubernetes manifests parse and
//! their arguments, mounts and probe agree with the binary and its config, the confd template
//! renders files that `validate` accepts, the example config holds every key and is accepted,
//! and the Debian package holds what `packaging/deb/build.sh` promises.
//!
//! Tests that need a tool (`systemd-analyze`, `dpkg-deb`) skip with a printed reason when it is
//! missing, unless `NPG_REQUIRE_KERNEL_TESTS=1` is set (CI sets it), which turns a skip into a
//! failure. Building the Debian package takes minutes on a cold cache (a release build, and
//! `cargo install cargo-deb` the first time), so that test runs only with
//! `NPG_REQUIRE_KERNEL_TESTS=1` or `NPG_TEST_DEB=1`.

#[path = "support/executable.rs"]
mod executable;
mod package_contents;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use executable::write_executable;

/// The binary under test, built by cargo for this test run.
const BIN: &str = env!("CARGO_BIN_EXE_nodeport-guard");
const UNIT: &str = "packaging/systemd/nodeport-guard.service";
const REAPPLY_UNIT: &str = "packaging/systemd/nodeport-guard-reapply.service";
const EXAMPLE_CONFIG: &str = "packaging/config.yaml";
const KUBERNETES_DIR: &str = "packaging/kubernetes";
const CONFD_RESOURCE: &str = "packaging/confd/conf.d/nodeport-guard.toml";
const CONFD_TEMPLATE: &str = "packaging/confd/templates/policies.yaml.tmpl";
const MISSION_POLICY: &str = "policies/nodeport-whitelist.yaml";

// ---------------------------------------------------------------------------------------------
// Helpers

/// Whether CI demands that every test runs (`NPG_REQUIRE_KERNEL_TESTS=1`).
fn everything_required() -> bool {
    std::env::var("NPG_REQUIRE_KERNEL_TESTS").is_ok_and(|value| value == "1")
}

/// Skips the calling test with `reason`, or fails it when every test must run.
fn skip(reason: &str) {
    assert!(
        !everything_required(),
        "NPG_REQUIRE_KERNEL_TESTS=1 is set, but {reason}"
    );
    eprintln!("skipped: {reason}");
}

/// Finds a program in `PATH` or the sbin directories that test runners sometimes drop.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Runs a command and returns its output; fails the test if it cannot start.
fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"))
}

/// Everything about a finished command, for assertion messages.
fn describe(command: &str, output: &Output) -> String {
    format!(
        "`{command}` exited with {}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("cannot read `{}`: {error}", path.display()))
}

fn write(path: impl AsRef<Path>, text: &str) {
    let path = path.as_ref();
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create the parent directory");
    }
    std::fs::write(path, text)
        .unwrap_or_else(|error| panic!("cannot write `{}`: {error}", path.display()));
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temporary directory")
}

/// Every YAML document of a file, as JSON values.
fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = read(path);
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|error| panic!("`{}` is not valid YAML: {error}", path.display()))
}

/// `key=value` lines of a systemd unit, comments and section headers left out, in order.
fn unit_settings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with(['#', ';', '[']))
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect()
}

/// Every value a unit gives `key`.
fn unit_values(settings: &[(String, String)], key: &str) -> Vec<String> {
    settings
        .iter()
        .filter(|(name, _)| name == key)
        .map(|(_, value)| value.clone())
        .collect()
}

/// The one value a unit gives `key`.
#[track_caller]
fn unit_value(settings: &[(String, String)], key: &str) -> String {
    let values = unit_values(settings, key);
    assert_eq!(values.len(), 1, "expected exactly one `{key}=`: {values:?}");
    values[0].clone()
}

/// A systemd time span such as `90s`, `3min` or `1h` (the forms our units use), in seconds.
fn systemd_seconds(span: &str) -> u64 {
    let digits: String = span.chars().take_while(char::is_ascii_digit).collect();
    let number: u64 = digits
        .parse()
        .unwrap_or_else(|_| panic!("`{span}` is not a time span"));
    match &span[digits.len()..] {
        "" | "s" | "sec" => number,
        "min" | "m" => number * 60,
        "h" => number * 3600,
        unit => panic!("unexpected time unit `{unit}` in `{span}`"),
    }
}

/// The CLI's default `--state-dir`, from the same clap definition the binary uses.
fn default_state_dir() -> String {
    use clap::CommandFactory as _;
    let command = nodeport_guard::cli::Cli::command();
    let argument = command
        .get_arguments()
        .find(|argument| argument.get_long() == Some("state-dir"))
        .expect("the CLI has --state-dir");
    argument
        .get_default_values()
        .first()
        .and_then(|value| value.to_str())
        .expect("--state-dir has a default")
        .to_owned()
}

/// The config keys the binary accepts: the properties of the checked-in config schema (a test
/// in `tests/schema.rs` keeps it equal to what the binary generates).
fn config_keys() -> Vec<String> {
    let schema: Value =
        serde_json::from_str(&read("schemas/config.schema.json")).expect("config schema is JSON");
    let keys: Vec<String> = schema["properties"]
        .as_object()
        .expect("the config schema lists properties")
        .keys()
        .cloned()
        .collect();
    assert!(keys.len() >= 16, "too few config keys: {keys:?}");
    keys
}

// ---------------------------------------------------------------------------------------------
// systemd

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let Some(analyze) = find_program("systemd-analyze") else {
        skip("`systemd-analyze` is not installed (Debian package `systemd`)");
        return;
    };
    let dir = temp_dir();
    // verify checks that ExecStart's binary exists: point it at the binary under test.
    let unit = read(UNIT).replace(
        "ExecStart=/usr/bin/nodeport-guard run",
        &format!("ExecStart={BIN} run"),
    );
    assert!(unit.contains(&format!("ExecStart={BIN} run")));
    let unit_path = dir.path().join("nodeport-guard.service");
    let reapply_path = dir.path().join("nodeport-guard-reapply.service");
    write(&unit_path, &unit);
    write(&reapply_path, &read(REAPPLY_UNIT));

    let mut command = Command::new(&analyze);
    // Documentation=man:nodeport-guard(1) is checked against the man page the binary
    // generates, when `man` is there to look it up.
    if find_program("man").is_some() {
        let man_dir = dir.path().join("man");
        let generated = run(Command::new(BIN)
            .args(["generate", "man", "--out-dir"])
            .arg(man_dir.join("man1")));
        assert!(generated.status.success(), "{generated:?}");
        command.env("MANPATH", &man_dir);
    } else {
        command.arg("--man=no");
    }
    // Only our units: a broken unit elsewhere on the machine is not our failure.
    command
        .arg("--recursive-errors=no")
        .arg("verify")
        .arg(&unit_path)
        .arg(&reapply_path);
    let output = run(&mut command);
    let text = describe("systemd-analyze verify", &output);
    assert!(output.status.success(), "{text}");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let complaints: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .filter(|line| line.contains("nodeport-guard"))
        .collect();
    assert!(complaints.is_empty(), "systemd-analyze complains: {text}");

    // The sandbox stays tight: systemd's own exposure score (0 best, 10 worst; 1.9 when
    // written), at most 2.5.
    let security = run(Command::new(&analyze)
        .args(["security", "--offline=yes", "--threshold=25"])
        .arg(&unit_path));
    assert!(
        security.status.success(),
        "{}",
        describe(
            "systemd-analyze security --offline=yes --threshold=25",
            &security
        )
    );
}

#[test]
fn unit_is_a_notify_daemon_with_reload_watchdog_and_restart() {
    let settings = unit_settings(&read(UNIT));
    assert_eq!(unit_value(&settings, "Type"), "notify");
    assert_eq!(
        unit_value(&settings, "ExecStart"),
        "/usr/bin/nodeport-guard run"
    );
    assert_eq!(
        unit_value(&settings, "ExecReload"),
        "/bin/kill -HUP $MAINPID"
    );
    assert_eq!(unit_value(&settings, "Restart"), "on-failure");
    assert!(systemd_seconds(&unit_value(&settings, "RestartSec")) >= 1);
    // The daemon pings every WatchdogSec/2 from the loop that also runs iptables-restore,
    // which may wait this long for the xtables lock: the ping interval must outlast one wait.
    let lock_wait: u64 = nodeport_guard::dataplane::iptables::LOCK_WAIT_SECONDS
        .parse()
        .expect("LOCK_WAIT_SECONDS is a number");
    let watchdog = systemd_seconds(&unit_value(&settings, "WatchdogSec"));
    assert!(
        watchdog / 2 > lock_wait,
        "WatchdogSec={watchdog}s: the daemon pings every {}s, less than one {lock_wait}s xtables lock wait",
        watchdog / 2
    );
    assert!(systemd_seconds(&unit_value(&settings, "TimeoutStartSec")) > lock_wait);
    assert_eq!(
        unit_values(&settings, "WantedBy"),
        vec!["multi-user.target"]
    );
}

#[test]
fn unit_sandbox_leaves_exactly_what_the_daemon_needs() {
    let settings = unit_settings(&read(UNIT));
    // The state directory the daemon locks (the CLI's default --state-dir) is the unit's
    // RuntimeDirectory, and writable.
    let state_dir = default_state_dir();
    assert_eq!(
        format!("/run/{}", unit_value(&settings, "RuntimeDirectory")),
        state_dir
    );
    assert_eq!(unit_value(&settings, "ProtectSystem"), "strict");
    let writable: Vec<String> = unit_values(&settings, "ReadWritePaths")
        .iter()
        .flat_map(|value| value.split_whitespace().map(str::to_owned))
        .collect();
    assert!(writable.contains(&state_dir), "{writable:?}");
    // '-': a missing lock file (nftables-only host) must not stop the unit from starting.
    assert!(
        writable.contains(&"-/run/xtables.lock".to_owned()),
        "{writable:?}"
    );
    // ... and it is created before the sandbox is built, outside it, for iptables-legacy.
    assert!(
        unit_values(&settings, "ExecStartPre")
            .iter()
            .any(|command| command.starts_with('+') && command.contains("/run/xtables.lock")),
        "no privileged ExecStartPre creates /run/xtables.lock"
    );
    let mut capabilities: Vec<String> = unit_value(&settings, "CapabilityBoundingSet")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    capabilities.sort();
    assert_eq!(capabilities, vec!["CAP_NET_ADMIN", "CAP_NET_RAW"]);
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictNamespaces", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("SystemCallArchitectures", "native"),
    ] {
        assert_eq!(unit_value(&settings, key), value, "{key}");
    }
    let mut families: Vec<String> = unit_value(&settings, "RestrictAddressFamilies")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    families.sort();
    assert_eq!(
        families,
        vec!["AF_INET", "AF_INET6", "AF_NETLINK", "AF_UNIX"]
    );
    // /proc/net and /proc/sys/net must stay visible (iptables-legacy, disable_ipv6).
    assert!(unit_values(&settings, "ProcSubset").is_empty());
    assert!(unit_values(&settings, "PrivateNetwork").is_empty());
}

#[test]
fn unit_orders_against_the_firewall_loaders_that_flush_the_ruleset() {
    let settings = unit_settings(&read(UNIT));
    let words = |key: &str| -> Vec<String> {
        unit_values(&settings, key)
            .iter()
            .flat_map(|value| value.split_whitespace().map(str::to_owned))
            .collect()
    };
    assert!(words("Before").contains(&"network-pre.target".to_owned()));
    assert!(words("Wants").contains(&"network-pre.target".to_owned()));
    for loader in ["nftables.service", "netfilter-persistent.service"] {
        assert!(
            words("After").contains(&loader.to_owned()),
            "After={loader}"
        );
    }
    assert!(words("ReloadPropagatedFrom").contains(&"nftables.service".to_owned()));

    let reapply = unit_settings(&read(REAPPLY_UNIT));
    let reapply_words = |key: &str| -> Vec<String> {
        unit_values(&reapply, key)
            .iter()
            .flat_map(|value| value.split_whitespace().map(str::to_owned))
            .collect()
    };
    for loader in ["nftables.service", "netfilter-persistent.service"] {
        for key in ["After", "PartOf", "WantedBy"] {
            assert!(
                reapply_words(key).contains(&loader.to_owned()),
                "reapply unit: {key}={loader}"
            );
        }
    }
    assert_eq!(unit_value(&reapply, "Type"), "oneshot");
    assert_eq!(unit_value(&reapply, "RemainAfterExit"), "yes");
    assert!(
        unit_value(&reapply, "ExecStart").contains("try-reload-or-restart nodeport-guard.service")
    );
}

// ---------------------------------------------------------------------------------------------
// The example config

#[test]
fn example_config_names_every_key_with_its_default() {
    let text = read(EXAMPLE_CONFIG);
    let mapping: BTreeMap<String, Value> =
        serde_saphyr::from_str(&text).expect("packaging/config.yaml is a YAML mapping");
    let mut keys = config_keys();
    keys.sort();
    let mut written: Vec<String> = mapping.keys().cloned().collect();
    written.sort();
    assert_eq!(
        written, keys,
        "packaging/config.yaml must set every config key"
    );
    for key in &keys {
        assert!(
            text.lines()
                .position(|line| line.starts_with(&format!("{key}:")))
                .is_some_and(|index| index > 0
                    && text
                        .lines()
                        .nth(index - 1)
                        .is_some_and(|above| above.starts_with('#'))),
            "`{key}` in packaging/config.yaml needs a comment above it"
        );
    }

    // Every value is the built-in default: the file as shipped changes nothing.
    let mut sources = nodeport_guard::source::Sources::new();
    let id = sources.add(nodeport_guard::source::SourceFile::new(
        EXAMPLE_CONFIG,
        text.clone(),
    ));
    let (config, diagnostics) = nodeport_guard::config::parse(id, sources.get(id));
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    assert_eq!(
        format!("{config:?}"),
        format!("{:?}", nodeport_guard::config::Config::default()),
        "packaging/config.yaml must hold the defaults"
    );
}

#[test]
fn example_config_is_accepted_by_the_binary() {
    let dir = temp_dir();
    write(dir.path().join("policy.yaml"), &read(MISSION_POLICY));
    let output = run(Command::new(BIN)
        .args(["--config", EXAMPLE_CONFIG, "validate"])
        .arg(dir.path()));
    let text = describe(
        "nodeport-guard --config packaging/config.yaml validate",
        &output,
    );
    assert!(output.status.success(), "{text}");
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("valid: 1 policy"),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Kubernetes

/// The manifests of `packaging/kubernetes/`, by kind and name.
struct Manifests {
    documents: Vec<Value>,
}

impl Manifests {
    fn load() -> Manifests {
        let mut documents = Vec::new();
        let mut files: Vec<PathBuf> = std::fs::read_dir(KUBERNETES_DIR)
            .expect("packaging/kubernetes/")
            .map(|entry| entry.expect("directory entry").path())
            .filter(|path| {
                path.extension()
                    .is_some_and(|extension| extension == "yaml")
            })
            .collect();
        files.sort();
        for file in files {
            let parsed = yaml_documents(&file);
            assert!(!parsed.is_empty(), "`{}` holds no document", file.display());
            for document in parsed {
                assert!(
                    document["apiVersion"].is_string() && document["kind"].is_string(),
                    "`{}`: every document needs apiVersion and kind",
                    file.display()
                );
                documents.push(document);
            }
        }
        Manifests { documents }
    }

    #[track_caller]
    fn one(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<&Value> = self
            .documents
            .iter()
            .filter(|document| document["kind"] == kind && document["metadata"]["name"] == name)
            .collect();
        assert_eq!(found.len(), 1, "expected one {kind} `{name}`");
        found[0]
    }

    fn daemonset(&self) -> &Value {
        self.one("DaemonSet", "nodeport-guard")
    }

    fn container(&self) -> &Value {
        let containers = self.daemonset()["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers");
        assert_eq!(containers.len(), 1);
        &containers[0]
    }

    /// The ConfigMap a volume of the DaemonSet refers to.
    fn config_map_of_volume(&self, volume: &str) -> &Value {
        let volumes = self.daemonset()["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .expect("volumes");
        let name = volumes
            .iter()
            .find(|candidate| candidate["name"] == volume)
            .and_then(|found| found["configMap"]["name"].as_str())
            .unwrap_or_else(|| panic!("volume `{volume}` is not a ConfigMap"));
        self.one("ConfigMap", name)
    }

    /// The container's mounts of ConfigMaps: (mount path, ConfigMap).
    fn config_map_mounts(&self) -> Vec<(String, &Value)> {
        let volumes = self.daemonset()["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .expect("volumes");
        self.container()["volumeMounts"]
            .as_array()
            .expect("volumeMounts")
            .iter()
            .filter(|mount| {
                volumes.iter().any(|volume| {
                    volume["name"] == mount["name"] && volume["configMap"].is_object()
                })
            })
            .map(|mount| {
                let path = mount["mountPath"].as_str().expect("mountPath").to_owned();
                let volume = mount["name"].as_str().expect("mount name");
                (path, self.config_map_of_volume(volume))
            })
            .collect()
    }

    fn args(&self) -> Vec<String> {
        self.container()["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|arg| arg.as_str().expect("string arg").to_owned())
            .collect()
    }
}

/// The `metricsAddress` of the config ConfigMap's config.yaml.
fn metrics_address(manifests: &Manifests) -> String {
    let config = manifests.one("ConfigMap", "nodeport-guard-config")["data"]["config.yaml"]
        .as_str()
        .expect("the config ConfigMap holds config.yaml")
        .to_owned();
    let parsed: BTreeMap<String, Value> =
        serde_saphyr::from_str(&config).expect("config.yaml is a mapping");
    parsed["metricsAddress"]
        .as_str()
        .expect("config.yaml sets metricsAddress (the probes need /healthz)")
        .to_owned()
}

#[test]
fn daemonset_runs_on_the_host_network_with_two_capabilities() {
    let manifests = Manifests::load();
    let pod = &manifests.daemonset()["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert!(
        pod["tolerations"]
            .as_array()
            .expect("tolerations")
            .iter()
            .any(|toleration| toleration["operator"] == "Exists" && toleration["key"].is_null()),
        "the DaemonSet must tolerate every taint"
    );
    let security = &manifests.container()["securityContext"];
    assert_ne!(security["privileged"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    let added: Vec<&str> = security["capabilities"]["add"]
        .as_array()
        .expect("capabilities.add")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        added.contains(&"NET_ADMIN") && added.contains(&"NET_RAW"),
        "{added:?}"
    );
    // No RBAC: the daemon reads files, not the API.
    assert_eq!(pod["automountServiceAccountToken"], false);
    for kind in ["ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"] {
        assert!(
            !manifests
                .documents
                .iter()
                .any(|document| document["kind"] == kind),
            "unexpected {kind}"
        );
    }
}

#[test]
fn daemonset_mounts_update_in_place_and_share_the_host_locks() {
    let manifests = Manifests::load();
    let mounts = manifests.container()["volumeMounts"]
        .as_array()
        .expect("volumeMounts");
    // A subPath mount of a ConfigMap is never updated: the daemon would never see a change.
    for mount in mounts {
        assert!(mount["subPath"].is_null(), "subPath mount: {mount}");
    }
    let mount_paths: Vec<(String, &Value)> = manifests.config_map_mounts();
    assert!(
        mount_paths
            .iter()
            .any(|(path, config_map)| path == "/etc/nodeport-guard/policies"
                && config_map["metadata"]["name"] == "nodeport-guard-policies"),
        "the policies ConfigMap must be mounted as /etc/nodeport-guard/policies"
    );
    let volumes = manifests.daemonset()["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    let host_path_of = |mount_path: &str| -> &Value {
        let mount = mounts
            .iter()
            .find(|mount| mount["mountPath"] == mount_path)
            .unwrap_or_else(|| panic!("nothing is mounted at {mount_path}"));
        let volume = volumes
            .iter()
            .find(|volume| volume["name"] == mount["name"])
            .expect("the mount's volume");
        &volume["hostPath"]
    };
    let lock = host_path_of("/run/xtables.lock");
    assert_eq!(lock["path"], "/run/xtables.lock");
    assert_eq!(lock["type"], "FileOrCreate");
    let state_dir = default_state_dir();
    let state = host_path_of(&state_dir);
    assert_eq!(state["path"], state_dir.as_str());
}

#[test]
fn daemonset_probe_asks_the_configured_metrics_address() {
    let manifests = Manifests::load();
    let address: std::net::SocketAddr = metrics_address(&manifests)
        .parse()
        .expect("metricsAddress is host:port");
    for probe in ["livenessProbe", "startupProbe"] {
        let get = &manifests.container()[probe]["httpGet"];
        assert_eq!(get["path"], "/healthz", "{probe}");
        assert_eq!(
            get["port"],
            address.port(),
            "{probe} port vs metricsAddress"
        );
        // The kubelet connects to the pod IP (the node's address, with hostNetwork) unless
        // told otherwise; a loopback listener needs the probe to name loopback.
        if address.ip().is_loopback() {
            assert_eq!(get["host"], address.ip().to_string(), "{probe} host");
        }
    }
}

#[test]
fn daemonset_arguments_validate_the_configmaps_as_mounted() {
    let manifests = Manifests::load();
    let args = manifests.args();
    assert_eq!(
        args.iter().filter(|arg| *arg == "run").count(),
        1,
        "the DaemonSet runs `run`: {args:?}"
    );
    // Lay the ConfigMaps out as the kubelet mounts them, under a temporary root.
    let root = temp_dir();
    let mounts = manifests.config_map_mounts();
    for (mount_path, config_map) in &mounts {
        for (file, content) in config_map["data"].as_object().expect("ConfigMap data") {
            let content = content.as_str().expect("string data");
            write(
                root.path()
                    .join(mount_path.trim_start_matches('/'))
                    .join(file),
                content,
            );
        }
    }
    let relocate = |arg: &str| -> String {
        let mut arg = arg.to_owned();
        for (mount_path, _) in &mounts {
            let moved = format!("{}{mount_path}", root.path().display());
            arg = arg.replace(mount_path.as_str(), &moved);
        }
        arg
    };
    // The same arguments, with `validate <the mounted policy directory>` in place of `run`.
    let policies = root.path().join("etc/nodeport-guard/policies");
    let mut command = Command::new(BIN);
    for arg in &args {
        if arg == "run" {
            command.arg("validate").arg(&policies);
        } else {
            command.arg(relocate(arg));
        }
    }
    let output = run(&mut command);
    let text = describe(
        &format!("nodeport-guard {args:?} (run → validate)"),
        &output,
    );
    assert!(output.status.success(), "{text}");
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("valid: 1 policy"),
        "{text}"
    );
    // The config that was read is the ConfigMap's: a broken copy must make the same
    // command fail, or the test would prove nothing about --config.
    let config = root.path().join("etc/nodeport-guard/config/config.yaml");
    assert!(
        config.is_file(),
        "the config ConfigMap is not where --config points"
    );
    write(&config, "metricsAddress: nowhere\n");
    let mut broken = Command::new(BIN);
    for arg in &args {
        if arg == "run" {
            broken.arg("validate").arg(&policies);
        } else {
            broken.arg(relocate(arg));
        }
    }
    assert!(!run(&mut broken).status.success());
}

#[test]
fn policies_configmap_carries_the_mission_example() {
    let manifests = Manifests::load();
    let data = manifests.one("ConfigMap", "nodeport-guard-policies")["data"]
        .as_object()
        .expect("data");
    let embedded = data["nodeport-whitelist.yaml"]
        .as_str()
        .expect("nodeport-whitelist.yaml");
    let embedded: Vec<Value> = serde_saphyr::from_multiple(embedded).expect("YAML");
    let example = yaml_documents(Path::new(MISSION_POLICY));
    assert_eq!(
        embedded, example,
        "the ConfigMap's policy drifted from {MISSION_POLICY}"
    );
}

#[test]
fn kustomization_lists_every_manifest_and_the_image_builds_from_the_binary() {
    let kustomization = yaml_documents(&Path::new(KUBERNETES_DIR).join("kustomization.yaml"));
    let mut listed: Vec<String> = kustomization[0]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|resource| resource.as_str().expect("file name").to_owned())
        .collect();
    listed.sort();
    let mut present: Vec<String> = std::fs::read_dir(KUBERNETES_DIR)
        .expect("packaging/kubernetes/")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    present.sort();
    assert_eq!(listed, present);

    let dockerfile = read(Path::new(KUBERNETES_DIR).join("Dockerfile"));
    assert!(dockerfile.contains("COPY target/release/nodeport-guard /usr/bin/nodeport-guard"));
    for package in ["iptables", "ipset", "nftables"] {
        assert!(
            dockerfile
                .lines()
                .any(|line| line.split_whitespace().any(|word| word == package)),
            "the image must install {package}"
        );
    }
    assert!(dockerfile.contains(r#"ENTRYPOINT ["/usr/bin/nodeport-guard"]"#));
    // The context is the repository root: everything but what COPY reads stays out of it.
    let ignore = read(Path::new(KUBERNETES_DIR).join("Dockerfile.dockerignore"));
    assert!(ignore.lines().any(|line| line == "*"));
    assert!(
        ignore
            .lines()
            .any(|line| line == "!target/release/nodeport-guard")
    );
    assert!(ignore.lines().any(|line| line == "!policies/"));
}

// ---------------------------------------------------------------------------------------------
// confd

/// The `key = value` pairs of the confd template resource's `[template]` table, values as
/// written (quotes kept). Commented-out lines are left out.
fn confd_settings() -> BTreeMap<String, String> {
    let text = read(CONFD_RESOURCE);
    let mut in_template = false;
    let mut settings = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_template = line == "[template]";
        } else if in_template
            && !line.starts_with('#')
            && let Some((key, value)) = line.split_once('=')
        {
            settings.insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    settings
}

fn unquote(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("`{value}` is not a quoted string"))
}

/// Renders the template as confd would for `values` (key → value): the text outside the one
/// `{{range gets "PATTERN"}}…{{end}}` block as is, the block once per key (sorted, as confd's
/// store returns them) with `{{.Key}}` and `{{.Value}}` substituted. Returns the pattern too.
fn render_template(template: &str, values: &BTreeMap<&str, &str>) -> (String, String) {
    let open = "{{range gets \"";
    let start = template
        .find(open)
        .expect("the template ranges over `gets`");
    let pattern_end = start
        + open.len()
        + template[start + open.len()..]
            .find("\"}}")
            .expect("closing of the range action");
    let pattern = template[start + open.len()..pattern_end].to_owned();
    let body_start = pattern_end + "\"}}".len();
    let body_end = body_start
        + template[body_start..]
            .find("{{end}}")
            .expect("the range's {{end}}");
    let body = &template[body_start..body_end];
    let mut rendered = template[..start].to_owned();
    for (key, value) in values {
        rendered.push_str(&body.replace("{{.Key}}", key).replace("{{.Value}}", value));
    }
    rendered.push_str(&template[body_end + "{{end}}".len()..]);
    assert!(
        !rendered.contains("{{"),
        "the template uses actions this test does not render: {rendered}"
    );
    (rendered, pattern)
}

#[test]
fn confd_resource_checks_with_validate_and_needs_no_reload() {
    let settings = confd_settings();
    let check = unquote(&settings["check_cmd"]);
    assert!(
        check.contains("nodeport-guard validate {{.src}}"),
        "{check}"
    );
    // The daemon watches the directory; a reload_cmd as well would apply every change twice.
    assert!(!settings.contains_key("reload_cmd"), "{settings:?}");
    let dest = unquote(&settings["dest"]);
    let dest_path = Path::new(dest);
    assert_eq!(
        dest_path.parent(),
        Some(Path::new(nodeport_guard::config::DEFAULT_POLICIES_DIR))
    );
    assert!(nodeport_guard::load::is_policy_file_name(
        &dest_path.file_name().expect("file name").to_string_lossy()
    ));
    assert_eq!(unquote(&settings["mode"]), "0644");
    assert_eq!(unquote(&settings["src"]), "policies.yaml.tmpl");
    assert!(Path::new(CONFD_TEMPLATE).ends_with(unquote(&settings["src"])));
    assert_eq!(settings["keys"], r#"["/nodeport-guard/policies"]"#);
}

#[test]
fn confd_template_renders_files_that_validate_accepts() {
    let template = read(CONFD_TEMPLATE);
    let office = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: office\n  labels:\n    role: office\nspec:\n  nets: [203.0.113.64/26]\n";
    let grafana = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: office-only-grafana\nspec:\n  order: 30\n  preDNAT: true\n  applyOnForward: true\n  selector: all()\n  ingress:\n    - action: Allow\n      protocol: TCP\n      source:\n        selector: role == 'office'\n      destination:\n        ports: [30300]\n    - action: Deny\n      protocol: TCP\n      destination:\n        ports: [30300]";
    let values = BTreeMap::from([
        ("/nodeport-guard/policies/grafana", grafana),
        ("/nodeport-guard/policies/office", office),
    ]);
    let (rendered, pattern) = render_template(&template, &values);
    let keys = confd_settings()["keys"].clone();
    let prefix = pattern.trim_end_matches("/*");
    assert!(
        keys.contains(&format!("\"{prefix}\"")),
        "the template reads `{pattern}`, but the resource fetches {keys}"
    );

    // confd stages the rendered file as a hidden file next to dest and runs check_cmd on it
    // through the shell.
    let dir = temp_dir();
    let staged = dir.path().join(".policies.yaml123456789");
    write(&staged, &rendered);
    let check = unquote(&confd_settings()["check_cmd"])
        .replace("/usr/bin/nodeport-guard", BIN)
        .replace("{{.src}}", &staged.display().to_string());
    let output = run(Command::new("/bin/sh").arg("-c").arg(&check));
    let text = describe(&check, &output);
    assert!(output.status.success(), "{text}\n--- rendered\n{rendered}");
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("valid: 1 policy, 1 network set"),
        "{text}"
    );

    // A bad value in the store fails the check, so confd keeps the current file.
    let broken = BTreeMap::from([(
        "/nodeport-guard/policies/office",
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: office\nspec:\n  nets: [203.0.113.300/26]\n",
    )]);
    let (rendered, _) = render_template(&template, &broken);
    write(&staged, &rendered);
    let output = run(Command::new("/bin/sh").arg("-c").arg(&check));
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        describe(&check, &output)
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(".policies.yaml123456789:"),
        "errors must name the staged file: {}",
        describe(&check, &output)
    );
}

// ---------------------------------------------------------------------------------------------
// Man page and completions

#[test]
fn generate_writes_the_man_page_and_completions_the_package_ships() {
    let dir = temp_dir();
    for what in ["man", "completions"] {
        let output = run(Command::new(BIN)
            .args(["generate", what, "--out-dir"])
            .arg(dir.path()));
        assert!(
            output.status.success(),
            "{}",
            describe(&format!("nodeport-guard generate {what}"), &output)
        );
    }
    let man = read(dir.path().join("nodeport-guard.1"));
    assert!(
        man.contains(".TH nodeport-guard 1"),
        "not a man page: {man}"
    );
    for command in [
        "validate", "plan", "apply", "run", "cleanup", "trace", "drops", "revoke",
    ] {
        assert!(
            man.contains(command),
            "the man page does not mention `{command}`"
        );
    }
    // More than the `--help` text: the sections a man page has.
    for section in [
        ".SH \"POLICY FILES\"",
        ".SH CONFIGURATION",
        ".SH FILES",
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH EXAMPLES",
    ] {
        assert!(man.contains(section), "the man page has no {section}");
    }
    let manifest = read("Cargo.toml");
    for (file, packaged_as) in [
        (
            "nodeport-guard.bash",
            "usr/share/bash-completion/completions/nodeport-guard",
        ),
        ("_nodeport-guard", "usr/share/zsh/vendor-completions/"),
        (
            "nodeport-guard.fish",
            "usr/share/fish/vendor_completions.d/",
        ),
    ] {
        let text = read(dir.path().join(file));
        assert!(
            text.contains("validate") && text.contains("config") && text.contains("policies"),
            "`{file}` does not complete the commands and flags"
        );
        assert!(
            manifest.contains(&format!(r#"["target/assets/{file}", "{packaged_as}""#)),
            "Cargo.toml's deb assets must ship target/assets/{file} as {packaged_as}"
        );
    }
    assert!(manifest.contains(r#"["target/assets/*.1", "usr/share/man/man1/""#));
}

// ---------------------------------------------------------------------------------------------
// The Debian package

/// The members of the package's data archive (`dpkg-deb -c`), without the leading `.`, with
/// their mode strings.
fn deb_members(deb: &Path) -> BTreeMap<String, String> {
    let output = run(Command::new("dpkg-deb").arg("-c").arg(deb));
    assert!(
        output.status.success(),
        "{}",
        describe("dpkg-deb -c", &output)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let mode = (*fields.first()?).to_owned();
            let path = fields.get(5)?.trim_start_matches('.').to_owned();
            Some((path, mode))
        })
        .collect()
}

/// One file of the package's data archive.
fn deb_file(deb: &Path, member: &str) -> Vec<u8> {
    let output = run(Command::new("sh").arg("-c").arg(format!(
        "dpkg-deb --fsys-tarfile '{}' | tar -xOf - '.{member}'",
        deb.display()
    )));
    assert!(
        output.status.success(),
        "{}",
        describe(&format!("extract {member}"), &output)
    );
    output.stdout
}

#[test]
fn debian_package_holds_binary_units_config_docs_and_dependencies() {
    if !(everything_required() || std::env::var("NPG_TEST_DEB").is_ok_and(|value| value == "1")) {
        eprintln!(
            "skipped: building the Debian package takes minutes; set NPG_TEST_DEB=1 (CI runs it with NPG_REQUIRE_KERNEL_TESTS=1)"
        );
        return;
    }
    if find_program("dpkg-deb").is_none() {
        skip("`dpkg-deb` is not installed (Debian package `dpkg`)");
        return;
    }
    let output = run(&mut Command::new("packaging/deb/build.sh"));
    let text = describe("packaging/deb/build.sh", &output);
    assert!(output.status.success(), "{text}");
    let deb = PathBuf::from(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .last()
            .expect("build.sh prints the package path")
            .trim(),
    );
    assert!(deb.is_file(), "{text}");

    let members = deb_members(&deb);
    let has = |path: &str| members.contains_key(path);
    assert!(
        members
            .get("/usr/bin/nodeport-guard")
            .is_some_and(|mode| mode == "-rwxr-xr-x"),
        "{members:?}"
    );
    // Debian 12 merged /usr: /lib/systemd/system and /usr/lib/systemd/system are one place.
    let unit_dir = ["/usr/lib/systemd/system", "/lib/systemd/system"]
        .into_iter()
        .find(|dir| has(&format!("{dir}/nodeport-guard.service")))
        .unwrap_or_else(|| panic!("no nodeport-guard.service in {members:?}"));
    for unit in [UNIT, REAPPLY_UNIT] {
        let name = Path::new(unit)
            .file_name()
            .expect("unit name")
            .to_string_lossy();
        assert_eq!(
            deb_file(&deb, &format!("{unit_dir}/{name}")),
            read(unit).into_bytes(),
            "the packaged {name} differs from {unit}"
        );
    }
    assert_eq!(
        deb_file(&deb, "/etc/nodeport-guard/config.yaml"),
        read(EXAMPLE_CONFIG).into_bytes()
    );
    for path in [
        "/etc/nodeport-guard/policies/",
        "/usr/share/zsh/vendor-completions/_nodeport-guard",
        "/usr/share/doc/nodeport-guard/copyright",
    ] {
        assert!(has(path), "the package lacks {path}: {members:?}");
    }
    package_contents::assert_shared_contents(&members.keys().cloned().collect());
    let man = deb_file(&deb, "/usr/share/man/man1/nodeport-guard.1.gz");
    assert!(
        man.starts_with(&[0x1f, 0x8b]),
        "the man page is not gzipped"
    );

    let field = |name: &str| -> String {
        let output = run(Command::new("dpkg-deb").args(["-f"]).arg(&deb).arg(name));
        assert!(
            output.status.success(),
            "{}",
            describe("dpkg-deb -f", &output)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    let depends = field("Depends");
    for package in ["iptables", "ipset", "libc6"] {
        assert!(
            depends
                .split(',')
                .any(|dependency| dependency.trim().starts_with(package)),
            "Depends: {depends} lacks {package}"
        );
    }
    let recommends = field("Recommends");
    assert!(recommends.contains("nftables") && recommends.contains("conntrack"));
    assert!(field("Version").starts_with(env!("CARGO_PKG_VERSION")));

    let control = temp_dir();
    let output = run(Command::new("sh").arg("-c").arg(format!(
        "dpkg-deb --ctrl-tarfile '{}' | tar -xf - -C '{}'",
        deb.display(),
        control.path().display()
    )));
    assert!(
        output.status.success(),
        "{}",
        describe("dpkg-deb --ctrl-tarfile", &output)
    );
    let conffiles = read(control.path().join("conffiles"));
    assert!(
        conffiles
            .lines()
            .any(|line| line == "/etc/nodeport-guard/config.yaml"),
        "conffiles: {conffiles}"
    );
    let postinst = read(control.path().join("postinst"));
    assert!(postinst.contains("deb-systemd-helper enable nodeport-guard.service"));
    assert!(postinst.contains("deb-systemd-helper enable nodeport-guard-reapply.service"));
    let prerm = read(control.path().join("prerm"));
    assert!(
        !prerm.contains("#DEBHELPER#"),
        "cargo-deb did not fill in prerm"
    );
    assert!(prerm.contains("deb-systemd-invoke stop nodeport-guard.service"));
    assert!(prerm.contains("/usr/bin/nodeport-guard cleanup --yes"));

    // The packaged binary is a working build of this version.
    let extracted = control.path().join("nodeport-guard");
    write_executable(&extracted, deb_file(&deb, "/usr/bin/nodeport-guard"));
    let version = run(Command::new(&extracted).arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("nodeport-guard {}", env!("CARGO_PKG_VERSION"))
    );
}
