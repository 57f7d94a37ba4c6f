//! The commands against the in-memory kernel: saved plans and their staleness, the rollback
//! watcher's decisions, `confirm`. No root, no real kernel.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::exposure::{self, Basis};
use super::{apply, cleanup, confirm, plan, rollback, status};
use crate::dataplane::fake::FakeKernel;
use crate::dataplane::{Backend, Dataplane};
use crate::fixtures::{self, WHITELIST, each_backend};
use crate::model::IpFamily;
use crate::settings::Settings;
use crate::state::State;
use crate::system::runtime::now_seconds;
use crate::system::runtime::{PendingApply, StateDir};

struct Harness {
    dir: tempfile::TempDir,
    settings: Settings,
    kernel: FakeKernel,
    backend: &'static dyn Backend,
}

impl Harness {
    /// Another program deletes the whitelist's allow rule (drift).
    fn remove_our_allow_rule(&self) {
        let removed = self.kernel.delete_rules_containing("198.51.100.10");
        assert!(removed > 0, "no allow rule of ours to remove");
    }

    fn new(backend: &'static dyn Backend) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).expect("policies");
        std::fs::write(policies.join("whitelist.yaml"), WHITELIST).expect("policy");
        let settings = fixtures::settings(&policies, &dir.path().join("state"), backend);
        Harness {
            dir,
            settings,
            kernel: FakeKernel::new(),
            backend,
        }
    }

    fn plan_file(&self) -> PathBuf {
        self.dir.path().join("plan.json")
    }

    fn edit_policy(&self, from: &str, to: &str) {
        let path = self.settings.config.policies_dir.join("whitelist.yaml");
        let text = std::fs::read_to_string(&path).expect("read");
        std::fs::write(&path, text.replace(from, to)).expect("write");
    }

    fn ours(&self) -> State {
        Dataplane::new(
            self.backend,
            &self.kernel,
            IpFamily::BOTH.to_vec(),
            &self.settings.state_dir,
        )
        .observe()
        .expect("observe")
    }

    fn plan_out(&self) {
        let code = plan::run(
            &self.settings,
            &self.kernel,
            false,
            false,
            Some(&self.plan_file()),
            false,
        )
        .expect("plan");
        assert_exit(code, 0);
    }

    fn apply(&self, plan_file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
        apply::run(&self.settings, &self.kernel, true, None, plan_file, false)
    }

    fn state_dir(&self) -> StateDir {
        StateDir::new(&self.settings.state_dir)
    }

    fn pending(&self, id: &str, previous: State) {
        self.state_dir()
            .set_pending(&PendingApply {
                id: id.to_owned(),
                backend: self.backend,
                families: IpFamily::BOTH.to_vec(),
                deadline: 0,
                watcher_pid: None,
                previous,
                previous_index: None,
            })
            .expect("pending");
    }

    /// [`Harness::pending`] within its window, watched by a process that stands in for the
    /// watcher (its command line names `__rollback-watch` and the id); returns it.
    fn pending_watched(&self, id: &str, previous: State) -> std::process::Child {
        let watcher = std::process::Command::new("sh")
            .args(["-c", "sleep 60", "__rollback-watch", id])
            .spawn()
            .expect("a stand-in watcher");
        self.state_dir()
            .set_pending(&PendingApply {
                id: id.to_owned(),
                backend: self.backend,
                families: IpFamily::BOTH.to_vec(),
                deadline: now_seconds() + 3600,
                watcher_pid: Some(watcher.id()),
                previous,
                previous_index: None,
            })
            .expect("pending");
        watcher
    }

    /// Applies the whitelist (version A), then the same with another source (version B);
    /// returns what A wrote.
    fn a_then_b(&self) -> State {
        assert_exit(self.apply(None).expect("apply version A"), 0);
        let version_a = self.ours();
        self.edit_policy("198.51.100.10/32", "198.51.100.11/32");
        assert_exit(self.apply(None).expect("apply version B"), 0);
        version_a
    }

    /// The program every write of this backend's tables goes through.
    fn restore_program(&self) -> &'static str {
        match self.backend.name() {
            "iptables-legacy" => "iptables-legacy-restore",
            "iptables-nft" => "iptables-nft-restore",
            _ => "nft",
        }
    }
}

fn assert_exit(code: ExitCode, expected: u8) {
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", ExitCode::from(expected))
    );
}

#[test]
fn a_saved_plan_applies_what_it_showed() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        harness.plan_out();
        assert!(
            harness.ours().is_empty(),
            "{backend}: `plan` writes nothing"
        );
        assert_exit(harness.apply(Some(&harness.plan_file())).expect("apply"), 0);
        let code =
            plan::run(&harness.settings, &harness.kernel, true, false, None, false).expect("plan");
        assert_exit(code, 0);
        assert!(!harness.ours().is_empty());
    });
}

#[test]
fn a_saved_plan_of_another_backend_or_format_is_refused() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        harness.plan_out();
        let other = crate::dataplane::BACKENDS
            .iter()
            .copied()
            .find(|other| other.name() != backend.name())
            .expect("another backend");
        let mut settings = harness.settings.clone();
        settings.backend = crate::dataplane::BackendChoice::Named(other);
        let error = apply::run(
            &settings,
            &harness.kernel,
            true,
            None,
            Some(&harness.plan_file()),
            false,
        )
        .expect_err("another backend's plan is refused");
        assert!(
            error
                .to_string()
                .contains(&format!("is a plan for {}", backend.name())),
            "{backend}: {error:#}"
        );
        let text = std::fs::read_to_string(harness.plan_file()).expect("read");
        std::fs::write(
            harness.plan_file(),
            text.replacen("\"format\": 1", "\"format\": 2", 1),
        )
        .expect("write");
        let error = harness
            .apply(Some(&harness.plan_file()))
            .expect_err("an unknown format is refused");
        assert!(
            error.to_string().contains("format 2"),
            "{backend}: {error:#}"
        );
        assert!(harness.ours().is_empty(), "{backend}: nothing written");
    });
}

#[test]
fn a_saved_plan_is_refused_when_the_policy_files_changed() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        harness.plan_out();
        harness.edit_policy("198.51.100.10/32", "198.51.100.11/32");
        let before = harness.kernel.snapshot();
        let error = harness
            .apply(Some(&harness.plan_file()))
            .expect_err("a stale plan is refused");
        assert!(
            error.to_string().contains("stale plan: the policy files"),
            "{backend}: {error:#}"
        );
        assert_eq!(
            harness.kernel.snapshot(),
            before,
            "{backend}: nothing written"
        );
    });
}

#[test]
fn a_saved_plan_is_refused_when_the_kernel_changed() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        harness.plan_out();
        // Someone applies in the meantime.
        assert_exit(harness.apply(None).expect("apply"), 0);
        let before = harness.kernel.snapshot();
        let error = harness
            .apply(Some(&harness.plan_file()))
            .expect_err("a stale plan is refused");
        assert!(
            error
                .to_string()
                .contains("stale plan: the kernel's rules changed"),
            "{backend}: {error:#}"
        );
        assert_eq!(
            harness.kernel.snapshot(),
            before,
            "{backend}: nothing written"
        );
    });
}

#[test]
fn an_earlier_unconfirmed_apply_blocks_the_next() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        let mut watcher = harness.pending_watched("earlier", State::default());
        let error = harness.apply(None).expect_err("refused");
        let _ = watcher.kill();
        let _ = watcher.wait();
        assert!(
            error
                .to_string()
                .contains("waiting for `nodeport-guard confirm`")
        );
        assert!(harness.ours().is_empty(), "{backend}: nothing written");
    });
}

#[test]
fn the_watcher_rolls_back_only_its_own_unconfirmed_apply() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        let version_a = harness.a_then_b();
        let applied = harness.kernel.snapshot();
        assert_ne!(harness.ours(), version_a);
        harness.pending("mine", version_a.clone());
        let state_dir = harness.state_dir();

        // Another apply's watcher: not its business.
        rollback::roll_back(&state_dir, &harness.kernel, "another").expect("no-op");
        assert_eq!(harness.kernel.snapshot(), applied, "{backend}");
        assert!(state_dir.pending().expect("read").is_some());

        rollback::roll_back(&state_dir, &harness.kernel, "mine").expect("rolled back");
        let back = harness.ours();
        assert!(
            crate::plan::plan(&version_a, &back).is_empty(),
            "{backend}: version A is back"
        );
        assert!(state_dir.pending().expect("read").is_none());
        let record = state_dir.last_rollback().expect("read").expect("recorded");
        assert_eq!(
            record.outcome,
            "was not confirmed in time and was rolled back"
        );
    });
}

#[test]
fn a_confirmed_apply_is_not_rolled_back() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        let previous = harness.ours();
        assert_exit(harness.apply(None).expect("apply"), 0);
        let applied = harness.kernel.snapshot();
        let mut watcher = harness.pending_watched("mine", previous);
        assert_exit(
            confirm::run(&harness.settings, &harness.kernel).expect("confirm"),
            0,
        );
        // The watcher was told (SIGTERM).
        let ended = watcher.wait().expect("the watcher ends");
        assert!(!ended.success(), "{backend}: {ended:?}");
        let state_dir = harness.state_dir();
        assert_eq!(
            state_dir
                .last_rollback()
                .expect("read")
                .expect("recorded")
                .outcome,
            "was confirmed"
        );
        rollback::roll_back(&state_dir, &harness.kernel, "mine").expect("no-op");
        assert_eq!(
            harness.kernel.snapshot(),
            applied,
            "{backend}: the new rules stay"
        );
        // Nothing is waiting any more.
        assert_exit(
            confirm::run(&harness.settings, &harness.kernel).expect("confirm"),
            1,
        );
    });
}

#[test]
fn an_unwatched_apply_past_its_deadline_is_rolled_back_by_the_next_command() {
    each_backend(|backend| {
        // The watcher was killed (or the apply before it started one): `confirm` comes too
        // late and says so, and the previous rules are back.
        let harness = Harness::new(backend);
        let version_a = harness.a_then_b();
        harness.pending("mine", version_a.clone());
        assert_exit(
            confirm::run(&harness.settings, &harness.kernel).expect("confirm"),
            1,
        );
        assert!(
            crate::plan::plan(&version_a, &harness.ours()).is_empty(),
            "{backend}: version A is back"
        );
        let state_dir = harness.state_dir();
        assert!(state_dir.pending().expect("read").is_none());
        let outcome = state_dir
            .last_rollback()
            .expect("read")
            .expect("recorded")
            .outcome;
        assert!(
            outcome.contains("its rollback watcher had stopped"),
            "{outcome}"
        );

        // The same found by `apply`: it rolls back, then applies the files (version B).
        harness.pending("again", version_a.clone());
        assert_exit(harness.apply(None).expect("apply after"), 0);
        assert!(state_dir.pending().expect("read").is_none());
        assert!(!crate::plan::plan(&version_a, &harness.ours()).is_empty());
        let record = state_dir.last_rollback().expect("read").expect("recorded");
        assert_eq!(record.id, "again");
    });
}

#[test]
fn a_rollback_that_keeps_failing_is_recorded_with_its_cause() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        let previous = harness.ours();
        assert_exit(harness.apply(None).expect("apply"), 0);
        harness.pending("mine", previous);
        harness.kernel.fail_program(harness.restore_program());
        let writes = harness.kernel.writes();
        let state_dir = harness.state_dir();
        let error =
            rollback::roll_back_retrying(&state_dir, &harness.kernel, "mine", Duration::ZERO)
                .expect_err("every attempt fails");
        assert!(harness.kernel.writes() >= writes + rollback::ROLLBACK_ATTEMPTS as usize);
        let record = state_dir.last_rollback().expect("read").expect("recorded");
        assert!(
            record.outcome.contains("rolling it back failed 5 times"),
            "{backend}: {}",
            record.outcome
        );
        assert!(record.outcome.contains(&format!("{error:#}")));
        assert!(state_dir.pending().expect("read").is_none());
    });
}

#[test]
fn a_rollback_that_fails_once_succeeds_on_the_next_attempt() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        let previous = harness.ours();
        assert_exit(harness.apply(None).expect("apply"), 0);
        harness.pending("mine", previous.clone());
        harness.kernel.fail_write(1);
        let state_dir = harness.state_dir();
        rollback::roll_back_retrying(&state_dir, &harness.kernel, "mine", Duration::ZERO)
            .expect("the second attempt works");
        assert_eq!(harness.ours(), previous, "{backend}");
    });
}

#[test]
fn cleanup_removes_everything_of_ours_and_then_has_nothing_to_do() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        assert_exit(harness.apply(None).expect("apply"), 0);
        assert!(!harness.ours().is_empty());
        assert_exit(
            cleanup::run(&harness.settings, &harness.kernel, true, false).expect("cleanup"),
            0,
        );
        assert!(
            harness.ours().is_empty(),
            "{backend}: nothing of ours is left"
        );
        let writes = harness.kernel.writes();
        assert_exit(
            cleanup::run(&harness.settings, &harness.kernel, true, false).expect("cleanup"),
            0,
        );
        assert_eq!(
            harness.kernel.writes(),
            writes,
            "{backend}: nothing to write"
        );
    });
}

#[test]
fn cleanup_leaves_foreign_rules_alone() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        let foreign = if backend.name() == "nftables" {
            harness.kernel.foreign(
                "nft",
                &["-f", "-"],
                "add table ip filter\nadd chain ip filter KUBE-X\nadd rule ip filter KUBE-X counter drop\n",
            )
        } else {
            harness.kernel.foreign(
                harness.restore_program(),
                &["--noflush"],
                "*mangle\n:KUBE-X - [0:0]\n-A KUBE-X -j DROP\nCOMMIT\n",
            )
        };
        assert!(foreign.success, "{}", foreign.stderr);
        let before = harness.kernel.snapshot();
        assert_exit(harness.apply(None).expect("apply"), 0);
        assert_exit(
            cleanup::run(&harness.settings, &harness.kernel, true, false).expect("cleanup"),
            0,
        );
        assert!(
            harness.kernel.snapshot().contains("KUBE-X"),
            "{backend}: the foreign chain stays"
        );
        assert!(harness.ours().is_empty());
        if backend.name() == "nftables" {
            assert_eq!(harness.kernel.snapshot(), before, "{backend}: as it was");
        }
    });
}

impl Harness {
    fn status(&self) -> serde_json::Value {
        let ours = self.ours();
        status::gather(&self.settings, self.backend, &ours, &self.state_dir())
            .expect("status")
            .json()
    }

    fn status_exit(&self) -> String {
        let code = status::run(&self.settings, &self.kernel, true, true).expect("status");
        format!("{code:?}")
    }
}

fn exit(code: u8) -> String {
    format!("{:?}", ExitCode::from(code))
}

#[test]
fn status_reads_the_kernel_not_the_policy_files() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        // Before the first apply: nothing is there, and that is not what the policies say.
        let before = harness.status();
        assert_eq!(before["applied"], false, "{backend}: {before:#}");
        assert_eq!(before["inSync"], false);
        assert_eq!(before["rules"], serde_json::json!([]));
        assert_eq!(harness.status_exit(), exit(2));

        assert_exit(harness.apply(None).expect("apply"), 0);
        let applied = harness.status();
        assert_eq!(applied["applied"], true, "{backend}: {applied:#}");
        assert_eq!(applied["inSync"], true);
        let rules = applied["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), 2, "{applied:#}");
        assert!(
            rules.iter().all(|rule| rule["inKernel"] == "yes"),
            "{applied:#}"
        );
        assert_eq!(applied["lastApply"]["by"], "apply");
        assert_eq!(harness.status_exit(), exit(0));

        // Another program deletes our allow rule: status says so, as plan would.
        harness.remove_our_allow_rule();
        let drifted = harness.status();
        assert_eq!(drifted["inSync"], false, "{backend}: {drifted:#}");
        assert!(
            drifted["rules"]
                .as_array()
                .expect("rules")
                .iter()
                .any(|rule| rule["rule"] == 0 && rule["inKernel"] != "yes"),
            "{drifted:#}"
        );
        assert_eq!(harness.status_exit(), exit(2));

        assert_exit(
            cleanup::run(&harness.settings, &harness.kernel, true, false).expect("cleanup"),
            0,
        );
        let cleaned = harness.status();
        assert_eq!(cleaned["applied"], false, "{backend}: {cleaned:#}");
        assert_eq!(cleaned["rules"], serde_json::json!([]));
        assert_eq!(cleaned["lastApply"]["by"], "cleanup");
    });
}

#[test]
fn status_cannot_tell_when_the_policy_files_are_invalid() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        assert_exit(harness.apply(None).expect("apply"), 0);
        harness.edit_policy("198.51.100.10/32", "198.51.100.300/32");
        let status = harness.status();
        assert_eq!(
            status["inSync"],
            serde_json::Value::Null,
            "{backend}: {status:#}"
        );
        assert!(
            status["differences"]["unknown"]
                .as_str()
                .is_some_and(|why| why.contains("invalid")),
            "{status:#}"
        );
        // The kernel's rules are still named and counted.
        assert_eq!(status["rules"].as_array().map(Vec::len), Some(2));
        assert_eq!(harness.status_exit(), exit(1));
    });
}

#[test]
fn status_text_says_what_the_kernel_holds_and_what_happened() {
    let harness = Harness::new(&crate::dataplane::iptables::LEGACY);
    let text = |harness: &Harness| {
        let ours = harness.ours();
        let report = status::gather(
            &harness.settings,
            harness.backend,
            &ours,
            &harness.state_dir(),
        )
        .expect("status");
        let mut out = Vec::new();
        report.print(&mut out).expect("print");
        String::from_utf8(out).expect("text")
    };
    let before = text(&harness);
    assert!(before.contains("(no policy rules are applied)"), "{before}");
    assert!(
        before.contains(
            "Nothing of nodeport-guard is in the kernel (iptables-legacy); `apply` would change"
        ),
        "{before}"
    );
    assert!(before.contains("Daemon: not running."), "{before}");

    assert_exit(harness.apply(None).expect("apply"), 0);
    let after = text(&harness);
    assert!(
        after.contains("In sync: the kernel holds exactly what the policies say"),
        "{after}"
    );
    assert!(after.contains("Last change: "), "{after}");
    assert!(after.contains(" by apply: "), "{after}");
    let row = after
        .lines()
        .find(|line| line.starts_with("guard-nodeport") && line.contains(" ingress "))
        .unwrap_or_else(|| panic!("no row in\n{after}"));
    assert!(row.ends_with(" yes"), "{row}");
    println!("{after}");
}

/// A policy rule is whole only with its log and verdict rules: one whose NFLOG rule is gone
/// (no drop is logged) is `partly` in the kernel, and its packets are counted once.
#[test]
fn a_rule_without_its_log_rule_is_partly_in_the_kernel() {
    each_backend(|backend| {
        let harness = Harness::new(backend);
        assert_exit(harness.apply(None).expect("apply"), 0);
        let presence = |harness: &Harness| {
            let report = status::gather(
                &harness.settings,
                harness.backend,
                &harness.ours(),
                &harness.state_dir(),
            )
            .expect("status");
            let json = report.json();
            json["rules"]
                .as_array()
                .expect("rows")
                .iter()
                .map(|row| {
                    (
                        row["rule"].as_u64(),
                        row["inKernel"].as_str().map(str::to_owned),
                    )
                })
                .collect::<Vec<_>>()
        };
        let whole = presence(&harness);
        assert!(
            whole
                .iter()
                .all(|(_, presence)| presence.as_deref() == Some("yes")),
            "{backend}: {whole:?}"
        );
        let removed = harness
            .kernel
            .delete_rules_containing("DPI1|guard-nodeport");
        assert!(removed > 0, "{backend}: no log rule removed");
        let after = presence(&harness);
        assert!(
            after.contains(&(Some(1), Some("partly".to_owned()))),
            "{backend}: {after:?}"
        );
        assert!(
            after.contains(&(Some(0), Some("yes".to_owned()))),
            "{backend}: {after:?}"
        );
    });
}

/// A rollback puts back what the kernel held before the apply. When that had drifted from what
/// was applied before (a rule of ours deleted by another program), the record says so.
#[test]
fn a_rollback_says_when_what_it_put_back_had_drifted() {
    each_backend(|backend| {
        for drift in [false, true] {
            let harness = Harness::new(backend);
            assert_exit(harness.apply(None).expect("apply version A"), 0);
            if drift {
                harness.remove_our_allow_rule();
            }
            let previous = harness.ours();
            let state_dir = harness.state_dir();
            let mut pending = PendingApply {
                id: "mine".to_owned(),
                backend,
                families: IpFamily::BOTH.to_vec(),
                deadline: 0,
                watcher_pid: None,
                previous,
                previous_index: state_dir.applied().expect("read"),
            };
            assert!(pending.previous_index.is_some());
            harness.edit_policy("198.51.100.10/32", "198.51.100.11/32");
            assert_exit(harness.apply(None).expect("apply version B"), 0);
            pending.deadline = 0;
            state_dir.set_pending(&pending).expect("pending");
            rollback::roll_back(&state_dir, &harness.kernel, "mine").expect("rolled back");
            let outcome = state_dir
                .last_rollback()
                .expect("read")
                .expect("recorded")
                .outcome;
            assert_eq!(
                outcome.contains("another program had changed them"),
                drift,
                "{backend}, drift {drift}: {outcome}"
            );
        }
    });
}

/// The desired state and policy names of policy text, as `plan` sees them.
fn desired_of(text: &str) -> (State, crate::compile::PolicyNames) {
    let mut sources = crate::source::Sources::new();
    let id = sources.add(crate::source::SourceFile::new("p.yaml", text));
    let (parsed, _) = crate::load::parse_file(id, sources.get(id));
    let resources: Vec<_> = parsed.into_iter().map(|r| (id, r)).collect();
    let (model, diagnostics) = crate::validate::validate(&sources, &resources);
    assert!(diagnostics.iter().all(|d| !d.is_error()), "{diagnostics:?}");
    let compiled = crate::compile::compile(
        &model,
        &crate::config::Config::default(),
        &crate::facts::HostFacts::minimal("node-1"),
    );
    let desired = crate::dataplane::iptables::NFT.desired(&compiled.ruleset);
    (desired, compiled.names)
}

#[test]
fn plan_says_when_a_policy_is_promoted_from_staged_or_goes_back() {
    let staged = WHITELIST.replace(
        "kind: GlobalNetworkPolicy",
        "kind: StagedGlobalNetworkPolicy",
    );
    assert_ne!(staged, WHITELIST);
    let (enforced_state, enforced_names) = desired_of(WHITELIST);
    let (staged_state, staged_names) = desired_of(&staged);
    let (both_state, both_names) = desired_of(&format!("{WHITELIST}---\n{staged}"));
    let name = enforced_names.enforced.first().expect("a policy").clone();
    let promoted = format!("policy `{name}`: promoted from staged: its Deny rules now drop");
    let back =
        format!("policy `{name}`: back to staged: its Deny rules no longer drop, they only log");
    // Staged in the kernel, enforced in the files: promoted (with or without an enforced
    // policy of the name before).
    for observed in [&staged_state, &both_state] {
        assert_eq!(
            crate::engine::promotions(&enforced_names, &enforced_state, observed),
            std::slice::from_ref(&promoted)
        );
    }
    // Enforced in the kernel, staged only in the files: back to staged.
    assert_eq!(
        crate::engine::promotions(&staged_names, &staged_state, &enforced_state),
        [back]
    );
    // Nothing moves: the same state, or a staged twin added next to the enforced policy.
    assert!(crate::engine::promotions(&both_names, &both_state, &both_state).is_empty());
    assert!(crate::engine::promotions(&both_names, &both_state, &enforced_state).is_empty());
    assert!(
        crate::engine::promotions(&enforced_names, &enforced_state, &State::default()).is_empty()
    );
}

#[test]
fn color_only_on_a_terminal_and_never_with_no_color() {
    use super::output::use_color;
    assert!(use_color(true, None));
    assert!(!use_color(false, None));
    assert!(!use_color(true, Some("1".into())));
    // NO_COLOR set to the empty string does not count (no-color.org).
    assert!(use_color(true, Some("".into())));
}

/// A policy outside `default` is named with its tier: in `plan`'s chain headings and
/// `--json` (`policy.tier` of a chain), in `status`'s table and `--json` (`tier` of a rule),
/// and in the warnings.
#[test]
fn plan_status_and_warnings_name_a_policys_tier() {
    let harness = Harness::new(&crate::dataplane::iptables::LEGACY);
    std::fs::write(
        harness.settings.config.policies_dir.join("tiers.yaml"),
        "apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: security
spec:
  order: 100
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: security.gate
spec:
  tier: security
  selector: has(kubernetes.io/hostname)
  ingress:
    - action: Deny
      source:
        nets: [203.0.113.0/24]
    - action: Pass
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: security.nobody
spec:
  tier: security
  selector: role == 'nobody'
",
    )
    .expect("policy");
    let engine = crate::engine::Engine::new(&harness.settings, &harness.kernel);
    let Ok(prepared) = engine.prepare() else {
        panic!("valid")
    };
    let warnings: Vec<&str> = prepared
        .compiled
        .warnings
        .iter()
        .map(|w| w.message.as_str())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w
                .starts_with("policy `security.nobody` (tier security) selects no host endpoint")),
        "{warnings:#?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("selected by `security.gate` (tier security)")),
        "{warnings:#?}"
    );
    let mut changes = crate::plan::plan(&prepared.desired, &harness.ours());
    engine.name_policies(&mut changes, Some(&prepared.model));
    let text = crate::plan::render(&changes, crate::plan::Style::default());
    assert!(
        text.contains("# create chain npg-pi-security.gate (IPv4 filter): ingress rules of policy `security.gate` (tier security)\n"),
        "{text}"
    );
    // The overview names the tier too.
    assert!(
        text.contains("  policy security.gate (tier security): new: "),
        "{text}"
    );
    let json = serde_json::to_value(&changes).expect("json");
    let chain = json["tables"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|table| table["chains"].as_array().into_iter().flatten())
        .find(|chain| chain["name"] == "npg-pi-security.gate")
        .unwrap_or_else(|| panic!("no chain of security.gate in {json:#}"));
    assert_eq!(
        chain["policy"],
        serde_json::json!({"name": "security.gate", "tier": "security", "direction": "ingress"})
    );

    assert_exit(harness.apply(None).expect("apply"), 0);
    let status = harness.status();
    let row = status["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|row| row["policy"] == "security.gate")
        .unwrap_or_else(|| panic!("no row of security.gate in {status:#}"));
    assert_eq!(row["tier"], "security", "{row}");
    let ours = harness.ours();
    let report = status::gather(
        &harness.settings,
        harness.backend,
        &ours,
        &harness.state_dir(),
    )
    .expect("status");
    let mut out = Vec::new();
    report.print(&mut out).expect("print");
    let text = String::from_utf8(out).expect("text");
    assert!(
        text.contains("security.gate (tier security)  ingress"),
        "{text}"
    );
}

/// The rollback watcher's command line parses with ids that look like options (one in 64
/// base64url ids starts with `-`).
#[test]
fn the_rollback_watcher_takes_any_id_even_one_that_looks_like_an_option() {
    use std::path::Path;
    for id in ["-OLAHZGrfYSX", "--help", "_x-y", "abc"] {
        let mut line = vec![std::ffi::OsString::from("nodeport-guard")];
        line.extend(crate::system::watcher::arguments(Path::new("/run/x"), id));
        let matches = crate::cli::command()
            .try_get_matches_from(line)
            .unwrap_or_else(|e| panic!("id {id}: {e}"));
        let cli =
            <crate::cli::Cli as clap::FromArgMatches>::from_arg_matches(&matches).expect("parses");
        match cli.command {
            crate::cli::Command::RollbackWatch { id: parsed } => assert_eq!(parsed, id),
            other => panic!("id {id}: parsed as {other:?}"),
        }
        assert_eq!(cli.global.state_dir, Path::new("/run/x"));
    }
}

/// What `exposure` judges by: the kernel says whether anything of ours is applied, whatever
/// the state directory records and the policy files say.
#[test]
fn exposure_judges_by_what_the_kernel_holds_of_ours() {
    let judged = |harness: &Harness| {
        let judged = exposure::policies(&harness.settings, &harness.kernel)
            .expect("policies")
            .expect("something to judge by");
        // The families holding rules of ours: none, or both.
        assert_eq!(
            judged.guarded.is_empty(),
            judged.basis.as_str() == "nothing",
            "{:?}",
            judged.guarded
        );
        (judged.model.is_some(), judged.basis)
    };
    each_backend(|backend| {
        let mut harness = Harness::new(backend);
        // Never applied: nothing drops anything, whatever the files say.
        assert_eq!(
            judged(&harness),
            (false, Basis::Nothing { recorded: false }),
            "{backend}"
        );
        assert_exit(harness.apply(None).expect("apply"), 0);
        assert_eq!(judged(&harness), (true, Basis::Applied), "{backend}");
        // A reboot (or a hand-made flush): the state directory records an apply the kernel
        // no longer holds.
        harness.kernel = FakeKernel::new();
        assert_eq!(
            judged(&harness),
            (false, Basis::Nothing { recorded: true }),
            "{backend}"
        );
        assert_exit(harness.apply(None).expect("apply"), 0);
        assert_eq!(judged(&harness), (true, Basis::Applied), "{backend}");
        // Our rules in the kernel, which policies they came from not recorded: the files.
        harness.state_dir().clear_applied().expect("clear");
        assert_eq!(judged(&harness), (true, Basis::Files), "{backend}");
        assert_exit(
            cleanup::run(&harness.settings, &harness.kernel, true, false).expect("cleanup"),
            0,
        );
        assert_eq!(
            judged(&harness),
            (false, Basis::Nothing { recorded: false }),
            "{backend}"
        );
    });
    assert_eq!(
        exposure::basis(false, true),
        Basis::Nothing { recorded: true }
    );
    assert_eq!(exposure::basis(true, false), Basis::Files);
}
