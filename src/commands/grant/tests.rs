//! `grant` and `grants` on a policy directory of their own: what is written, what is refused
//! (and then nothing is written), `--revoke`, `--prune`. No kernel.

use std::path::Path;
use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command};
use crate::fixtures::{self, WHITELIST};
use crate::policy_set;
use crate::settings::Settings;

/// A grant named `vendor` for an hour.
const VENDOR: [&str; 8] = [
    "--src",
    "192.0.2.77",
    "--port",
    "30008",
    "--for",
    "1h",
    "--name",
    "vendor",
];

struct Harness {
    _dir: tempfile::TempDir,
    settings: Settings,
}

fn harness() -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).expect("policies");
    std::fs::write(policies.join("whitelist.yaml"), WHITELIST).expect("policy");
    let mut settings = fixtures::settings(
        &policies,
        &dir.path().join("state"),
        crate::dataplane::BACKENDS[0],
    );
    settings.load.now = "2026-12-05T12:00:00Z".parse().expect("time");
    Harness {
        _dir: dir,
        settings,
    }
}

impl Harness {
    fn dir(&self) -> &Path {
        &self.settings.config.policies_dir
    }

    fn grant(&self, args: &[&str]) -> ExitCode {
        let cli = Cli::try_parse_from(["nodeport-guard", "grant"].iter().chain(args))
            .expect("command line");
        let Command::Grant(args) = &cli.command else {
            panic!("not grant")
        };
        super::run(&self.settings, args).unwrap_or(ExitCode::from(1))
    }

    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir())
            .expect("dir")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }

    fn set(&self) -> policy_set::PolicySet {
        policy_set::load_with(&[self.dir().to_path_buf()], self.settings.load)
    }
}

#[test]
fn grant_writes_a_valid_policy_that_runs_first_and_ends_when_asked() {
    let harness = harness();
    let code = harness.grant(&[
        "--src",
        "192.0.2.77,203.0.113.0/28",
        "--port",
        "30008,30009",
        "--for",
        "2h",
        "--reason",
        "vendor backup",
    ]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(
        harness.files(),
        ["grant-192-0-2-77-30008.yaml", "whitelist.yaml"]
    );
    let set = harness.set();
    assert!(set.is_valid());
    let first = &set.model.policies()[0];
    assert_eq!(first.name, "grant-192-0-2-77-30008");
    let expiry = first.expires.as_ref().expect("expires");
    assert_eq!(expiry.at.to_string(), "2026-12-05T14:00:00Z");
    assert_eq!(expiry.reason.as_deref(), Some("vendor backup"));
    let items = crate::grants::expiring(&set);
    assert_eq!(items[0].sources, ["192.0.2.77/32", "203.0.113.0/28"]);
    assert_eq!(items[0].ports, ["tcp/30008", "tcp/30009"]);
}

#[test]
fn an_existing_grant_is_replaced_only_when_asked() {
    let harness = harness();
    let args = VENDOR;
    assert_eq!(harness.grant(&args), ExitCode::SUCCESS);
    let path = harness.dir().join("grant-vendor.yaml");
    let before = std::fs::read_to_string(&path).expect("file");
    let later = [
        "--src",
        "192.0.2.77",
        "--port",
        "30008",
        "--until",
        "2026-12-06T00:00:00+01:00",
        "--name",
        "vendor",
    ];
    assert_eq!(harness.grant(&later), ExitCode::from(1));
    assert_eq!(std::fs::read_to_string(&path).expect("file"), before);
    let replace: Vec<&str> = later.iter().copied().chain(["--replace"]).collect();
    assert_eq!(harness.grant(&replace), ExitCode::SUCCESS);
    let set = harness.set();
    let grant = set
        .model
        .policies()
        .iter()
        .find(|p| p.name == "grant-vendor")
        .expect("grant");
    assert_eq!(
        grant.expires.as_ref().expect("expiry").at.to_string(),
        "2026-12-05T23:00:00Z"
    );
    assert_eq!(
        harness.files(),
        ["grant-vendor.yaml", "whitelist.yaml"],
        "no temporary file left"
    );
}

#[test]
fn nothing_is_written_when_the_directory_would_not_validate() {
    let harness = harness();
    // (Host bits in `--src` are refused as a flag: see below.) An end that has passed, or a name that could leave the directory.
    assert_eq!(
        harness.grant(&[
            "--src",
            "192.0.2.77",
            "--port",
            "1",
            "--until",
            "2026-12-05T11:00:00Z"
        ]),
        ExitCode::from(1)
    );
    assert_eq!(
        harness.grant(&[
            "--src",
            "192.0.2.77",
            "--port",
            "1",
            "--for",
            "1h",
            "--name",
            "../x"
        ]),
        ExitCode::from(1)
    );
    // Another file already broken.
    std::fs::write(harness.dir().join("broken.yaml"), "kind: Nonsense\n").expect("write");
    assert_eq!(
        harness.grant(&["--src", "192.0.2.77", "--port", "30008", "--for", "1h"]),
        ExitCode::from(1)
    );
    assert_eq!(harness.files(), ["broken.yaml", "whitelist.yaml"]);
}

#[test]
fn revoke_deletes_the_grant_and_prune_only_files_holding_nothing_live() {
    let harness = harness();
    let args = VENDOR;
    assert_eq!(harness.grant(&args), ExitCode::SUCCESS);
    assert_eq!(harness.grant(&["--revoke", "vendor"]), ExitCode::SUCCESS);
    assert_eq!(harness.grant(&["--revoke", "vendor"]), ExitCode::from(1));
    assert_eq!(harness.files(), ["whitelist.yaml"]);
    // By the policy's name, as `grants` lists it.
    assert_eq!(harness.grant(&args), ExitCode::SUCCESS);
    assert_eq!(
        harness.grant(&["--revoke", "grant-vendor"]),
        ExitCode::SUCCESS
    );
    assert_eq!(harness.files(), ["whitelist.yaml"]);

    let expired = |name: &str| {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: {name}\n  annotations:\n    nodeport-guard.io/expires: 2026-12-01T00:00:00Z\nspec:\n  nets: [192.0.2.0/28]\n"
        )
    };
    std::fs::write(harness.dir().join("old.yaml"), expired("old")).expect("write");
    let mixed = format!(
        "{}---\n{}",
        expired("old-in-mixed"),
        WHITELIST.replace("guard-nodeport", "live")
    );
    std::fs::write(harness.dir().join("mixed.yaml"), mixed).expect("write");
    assert_eq!(harness.grant(&args), ExitCode::SUCCESS);
    assert_eq!(
        super::super::grants::run(&harness.settings, false, true).expect("grants"),
        ExitCode::SUCCESS
    );
    assert_eq!(
        harness.files(),
        ["grant-vendor.yaml", "mixed.yaml", "whitelist.yaml"]
    );
}

#[test]
fn trace_says_when_the_deciding_grant_ends() {
    let harness = harness();
    let args = [
        "--src",
        "192.0.2.77",
        "--port",
        "30008",
        "--for",
        "90m",
        "--name",
        "vendor",
    ];
    assert_eq!(harness.grant(&args), ExitCode::SUCCESS);
    let set = harness.set();
    let packet = super::inbound_packet(
        "192.0.2.77".parse().expect("ip"),
        "198.51.100.1".parse().expect("ip"),
        crate::grants::GrantProtocol::Tcp,
        30008,
    );
    let traced = crate::trace::trace(
        &set.model,
        &harness.settings.config,
        &fixtures::golden_host(),
        &packet,
    );
    assert_eq!(traced.verdict.policy.as_deref(), Some("grant-vendor"));
    assert_eq!(
        super::super::trace::deciding_expiry(&set, &traced).as_deref(),
        Some(
            "the deciding policy `grant-vendor` expires in 1h 30m (2026-12-05T13:30:00Z): from then on it no longer counts and this packet is judged without it"
        )
    );
}

#[test]
fn a_grant_shorter_than_a_second_is_refused_and_none_lasts_longer_than_asked() {
    let harness = harness();
    let short = [
        "--src",
        "198.51.100.7",
        "--port",
        "30008",
        "--name",
        "short",
    ];
    for duration in ["0s", "500ms"] {
        let args: Vec<&str> = short.iter().copied().chain(["--for", duration]).collect();
        assert_eq!(harness.grant(&args), ExitCode::from(1), "{duration}");
    }
    assert_eq!(harness.files(), ["whitelist.yaml"]);
    let args: Vec<&str> = short.iter().copied().chain(["--for", "1s"]).collect();
    assert_eq!(harness.grant(&args), ExitCode::SUCCESS);
    let expires = crate::grants::expiring(&harness.set())[0].expires;
    assert!(expires > harness.settings.load.now, "{expires}");
    let until = [
        "--src",
        "198.51.100.7",
        "--port",
        "30008",
        "--name",
        "until",
        "--until",
        "2026-12-05T18:00:00.5Z",
    ];
    assert_eq!(harness.grant(&until), ExitCode::SUCCESS);
    let ends: Vec<_> = crate::grants::expiring(&harness.set())
        .iter()
        .map(|grant| grant.expires.to_string())
        .collect();
    assert!(
        ends.contains(&"2026-12-05T18:00:00Z".to_owned()),
        "{ends:?}"
    );
}

#[test]
fn flags_a_policy_file_would_refuse_are_refused_as_flags() {
    let refused = |flag: &str, value: &str| {
        let args = [
            "nodeport-guard",
            "grant",
            "--src",
            "198.51.100.7",
            "--port",
            "30008",
            "--for",
            "1h",
            flag,
            value,
        ];
        let error = Cli::try_parse_from(args).expect_err(value).to_string();
        assert!(error.contains(&format!("'{flag} ")), "{error}");
        error
    };
    let host_bits = refused("--src", "198.51.100.7/24");
    assert!(host_bits.contains("198.51.100.0/24"), "{host_bits}");
    refused("--src", "::ffff:198.51.100.7");
    refused("--reason", "two\nlines");
    for fine in ["198.51.100.0/24", "2001:db8::7", "198.51.100.7"] {
        let args = [
            "nodeport-guard",
            "grant",
            "--src",
            fine,
            "--port",
            "30008",
            "--for",
            "1h",
        ];
        assert!(Cli::try_parse_from(args).is_ok(), "{fine}");
    }
}
