//! The reconciler driven through the in-memory kernel: every golden policy on every backend,
//! rollback, verification, drift repair, the order of writes, and what reads the kernel after
//! it (counters, detection). No root needed.

use std::path::PathBuf;

use crate::config::Config;
use crate::dataplane::fake::{FakeKernel, Invocation};
use crate::dataplane::{Backend, Dataplane, DataplaneError, Runner};
use crate::model::IpFamily;
use crate::plan::{ChainAction, plan};
use crate::reconcile::{ReconcileError, reconcile};
use crate::ruleset::Ruleset;
use crate::state::State;

const LEGACY: &dyn Backend = &crate::dataplane::iptables::LEGACY;
const NFT: &dyn Backend = &crate::dataplane::iptables::NFT;
const NATIVE: &dyn Backend = &crate::dataplane::nftables::NFTABLES;

const BACKENDS: [&dyn Backend; 3] = [LEGACY, NFT, NATIVE];

fn ruleset(file: &std::path::Path) -> Ruleset {
    let set = crate::policy_set::load(&[file.to_path_buf()]);
    assert!(set.is_valid(), "{} is not valid", file.display());
    crate::compile::compile(
        &set.model,
        &Config::default(),
        &crate::fixtures::golden_host(),
    )
    .ruleset
}

fn policy(name: &str) -> Ruleset {
    ruleset(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("policies")
            .join(format!("{name}.yaml")),
    )
}

struct Setup {
    fake: FakeKernel,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            fake: FakeKernel::new(),
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    fn dataplane(&self, backend: &'static dyn Backend) -> Dataplane<'_> {
        Dataplane::new(
            backend,
            &self.fake,
            IpFamily::BOTH.to_vec(),
            self.dir.path(),
        )
    }
}

/// What the planner compares: per chain the hashes in order, per hook chain the positions and
/// hashes, per set family, type and members. Rule texts and counters are left out.
pub(crate) fn projection(state: &State) -> String {
    let mut out = String::new();
    for (key, table) in &state.tables {
        for (chain, rules) in &table.chains {
            let hashes: Vec<&str> = rules
                .iter()
                .map(|rule| rule.hash.as_deref().unwrap_or("<foreign>"))
                .collect();
            out.push_str(&format!("{key} {chain}: {}\n", hashes.join(" ")));
        }
        for (chain, hooks) in &table.hooks {
            for hook in hooks {
                out.push_str(&format!(
                    "{key} hook {chain}@{}: {}\n",
                    hook.position,
                    hook.rule.hash.as_deref().unwrap_or("<foreign>")
                ));
            }
        }
    }
    for (name, set) in &state.sets {
        let members: Vec<&str> = set.members.iter().map(String::as_str).collect();
        out.push_str(&format!(
            "set {name} {} {}: {}\n",
            set.family,
            set.kind,
            members.join(" ")
        ));
    }
    out
}

#[test]
fn every_golden_policy_reaches_its_desired_state_on_every_backend() {
    for file in crate::fixtures::example_policies() {
        let rules = ruleset(&file);
        for backend in BACKENDS {
            let setup = Setup::new();
            let dataplane = setup.dataplane(backend);
            let desired = backend.desired(&rules);
            let what = format!("{} on {backend}", file.display());
            let outcome = reconcile(&dataplane, &desired).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(!outcome.plan.is_empty(), "{what}: the first apply writes");
            let observed = dataplane.observe().expect("observe");
            assert_eq!(projection(&observed), projection(&desired), "{what}");
            assert!(plan(&desired, &observed).is_empty(), "{what}");
            let again = reconcile(&dataplane, &desired).expect("second reconcile");
            assert!(
                again.plan.is_empty(),
                "{what}: second reconcile planned {:?}",
                again.plan
            );
            // And back to nothing: cleanup leaves no trace of ours.
            reconcile(&dataplane, &State::default()).expect("cleanup");
            assert!(
                dataplane.observe().expect("observe").is_empty(),
                "{what}: cleanup"
            );
        }
    }
}

fn assert_rolled_back(
    result: Result<crate::reconcile::Outcome, ReconcileError>,
    what: &str,
) -> DataplaneError {
    match result {
        Err(error @ ReconcileError::RolledBack { .. }) => {
            assert!(
                error
                    .to_string()
                    .contains("the previous rules were restored"),
                "{what}: {error}"
            );
            let ReconcileError::RolledBack { error } = error else {
                unreachable!()
            };
            error
        }
        Err(other) => panic!("{what}: expected a rollback, got {other}"),
        Ok(outcome) => panic!("{what}: expected a failure, applied {:?}", outcome.plan),
    }
}

#[test]
fn a_failed_write_leaves_the_kernel_exactly_as_before() {
    let first = policy("nodeport-whitelist");
    let second = policy("dual-stack");
    for backend in BACKENDS {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        reconcile(&dataplane, &backend.desired(&first)).expect("first apply");
        // (Counters stay out of it: a rollback rewrites the chains it changed, and a rewritten
        // rule starts from zero in the real kernel as well.)
        let before = setup.fake.snapshot();
        // iptables writes sets, then a table per restore: the 2nd write is the first table,
        // after the sets changed. nftables writes everything in one transaction: its 1st.
        let nth = if backend == NATIVE { 1 } else { 2 };
        setup.fake.fail_write(nth);
        let error = assert_rolled_back(
            reconcile(&dataplane, &backend.desired(&second)),
            &backend.to_string(),
        );
        assert!(
            matches!(error, DataplaneError::Failed(_)),
            "{backend}: {error}"
        );
        assert_eq!(
            setup.fake.snapshot(),
            before,
            "{backend}: the kernel changed"
        );
    }
}

#[test]
fn a_failed_write_on_an_empty_kernel_leaves_it_empty() {
    let rules = policy("office-networkset");
    for backend in [LEGACY, NFT] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let before = setup.fake.snapshot();
        setup.fake.fail_write(2);
        assert_rolled_back(
            reconcile(&dataplane, &backend.desired(&rules)),
            &backend.to_string(),
        );
        assert_eq!(
            setup.fake.snapshot(),
            before,
            "{backend}: the sets were left behind"
        );
    }
}

#[test]
fn a_rule_the_kernel_loses_is_a_verify_error_and_is_rolled_back() {
    let first = policy("nodeport-whitelist");
    let second = policy("dual-stack");
    for backend in BACKENDS {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let old = backend.desired(&first);
        reconcile(&dataplane, &old).expect("first apply");
        let desired = backend.desired(&second);
        let victim = a_new_rule(&desired, &old);
        let before = setup.fake.snapshot();
        setup.fake.drop_rules_containing(&format!("npg:{victim}"));
        let error = assert_rolled_back(reconcile(&dataplane, &desired), &backend.to_string());
        assert!(
            matches!(error, DataplaneError::Verify(_)),
            "{backend}: {error}"
        );
        if backend == NATIVE {
            // A chain nft deleted and made again is listed after the others, as in the kernel.
            assert_eq!(
                sorted_lines(&setup.fake.snapshot()),
                sorted_lines(&before),
                "{backend}"
            );
        } else {
            assert_eq!(setup.fake.snapshot(), before, "{backend}: not rolled back");
        }
    }
}

/// The hash of a rule of `desired` that `old` does not have.
fn a_new_rule(desired: &State, old: &State) -> String {
    let old_hashes = projection(old);
    desired
        .tables
        .values()
        .flat_map(|table| table.chains.values())
        .flat_map(|rules| rules.iter())
        .filter_map(|rule| rule.hash.as_deref().map(str::to_owned))
        .find(|hash| !old_hashes.contains(hash.as_str()))
        .expect("a new rule")
}

fn sorted_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    lines
}

#[test]
fn drift_is_repaired_by_putting_back_exactly_what_went_missing() {
    let rules = policy("nodeport-whitelist");
    for backend in BACKENDS {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let desired = backend.desired(&rules);
        reconcile(&dataplane, &desired).expect("apply");
        // A rule of one family only, so one chain of one table misses it.
        let everything = projection(&desired);
        let (key, chain, hash) = desired
            .tables
            .iter()
            .flat_map(|(key, table)| {
                table.chains.iter().flat_map(move |(chain, rules)| {
                    rules
                        .iter()
                        .map(move |rule| (*key, chain.clone(), rule.hash.clone()))
                })
            })
            .find_map(|(key, chain, hash)| {
                let hash = hash?;
                (everything.matches(hash.as_str()).count() == 1).then_some((key, chain, hash))
            })
            .expect("a rule of one family");
        assert_eq!(
            setup.fake.delete_rules_containing(&format!("npg:{hash}")),
            1
        );
        let drifted = dataplane.observe().expect("observe");
        assert!(
            !plan(&desired, &drifted).is_empty(),
            "{backend}: drift not seen"
        );
        let outcome = reconcile(&dataplane, &desired).expect("repair");
        let summary = outcome.plan.summary();
        assert_eq!(
            outcome.plan.tables.len(),
            1,
            "{backend}: {}",
            summary.line()
        );
        assert_eq!(outcome.plan.tables[0].key, key, "{backend}");
        let changes: Vec<(&str, ChainAction)> = outcome.plan.tables[0]
            .chains
            .iter()
            .map(|change| (change.name.as_str(), change.action))
            .collect();
        assert_eq!(
            changes,
            vec![(chain.as_str(), ChainAction::Replace)],
            "{backend}"
        );
        assert!(outcome.plan.tables[0].hooks.is_empty(), "{backend}");
        assert!(outcome.plan.sets.is_empty(), "{backend}");
        let repaired = dataplane.observe().expect("observe");
        assert_eq!(projection(&repaired), projection(&desired), "{backend}");
    }
}

#[test]
fn a_foreign_program_moving_our_jump_is_repaired() {
    let rules = policy("docker-published-port");
    for backend in [LEGACY, NFT] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let desired = backend.desired(&rules);
        reconcile(&dataplane, &desired).expect("apply");
        let restore = if backend == LEGACY {
            "iptables-legacy-restore"
        } else {
            "iptables-nft-restore"
        };
        let output = setup.fake.foreign(
            restore,
            &["--noflush"],
            "*mangle\n-I PREROUTING 1 -s 10.9.9.9/32 -j ACCEPT\nCOMMIT\n",
        );
        assert!(output.success, "{}", output.stderr);
        let outcome = reconcile(&dataplane, &desired).expect("repair");
        assert_eq!(outcome.plan.summary().hooks_to_fix, 1, "{backend}");
        let save = setup
            .fake
            .run(
                restore.replace("restore", "save").as_str(),
                &["-t", "mangle"],
                None,
            )
            .expect("save");
        let prerouting: Vec<&str> = save
            .stdout
            .lines()
            .filter(|line| line.starts_with("-A PREROUTING"))
            .collect();
        assert_eq!(prerouting.len(), 2, "{backend}: {}", save.stdout);
        assert!(
            prerouting[0].contains("npg:"),
            "{backend}: ours first: {prerouting:?}"
        );
        assert!(
            prerouting[1].contains("10.9.9.9"),
            "{backend}: theirs kept: {prerouting:?}"
        );
    }
}

#[test]
fn iptables_creates_sets_before_the_tables_using_them_and_destroys_them_after() {
    let rules = policy("office-networkset");
    for backend in [LEGACY, NFT] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let desired = backend.desired(&rules);
        assert!(!desired.sets.is_empty(), "the policy uses sets");
        reconcile(&dataplane, &desired).expect("apply");
        let writes: Vec<_> = setup
            .fake
            .commands()
            .into_iter()
            .filter(|c| c.write)
            .collect();
        let kinds: Vec<&str> = writes
            .iter()
            .map(|c| {
                if c.program == "ipset" {
                    "sets"
                } else {
                    "table"
                }
            })
            .collect();
        assert_eq!(kinds.first(), Some(&"sets"), "{backend}: {kinds:?}");
        assert!(
            kinds[1..].iter().all(|kind| *kind == "table"),
            "{backend}: {kinds:?}"
        );
        assert!(
            writes[0]
                .stdin
                .as_deref()
                .unwrap_or_default()
                .contains("create npg"),
            "{backend}"
        );
        setup.fake.clear_commands();
        reconcile(&dataplane, &State::default()).expect("cleanup");
        let writes: Vec<_> = setup
            .fake
            .commands()
            .into_iter()
            .filter(|c| c.write)
            .collect();
        let last = writes.last().expect("writes");
        assert_eq!(last.program, "ipset", "{backend}");
        assert!(
            last.stdin
                .as_deref()
                .unwrap_or_default()
                .starts_with("destroy npg"),
            "{backend}: {:?}",
            last.stdin
        );
        assert!(
            writes[..writes.len() - 1]
                .iter()
                .all(|c| c.program != "ipset"),
            "{backend}: sets destroyed before the tables let go of them"
        );
        assert!(
            setup
                .fake
                .run("ipset", &["save"], None)
                .expect("save")
                .stdout
                .is_empty()
        );
    }
}
#[test]
fn counters_set_by_a_test_are_read_back() {
    let rules = policy("nodeport-whitelist");
    for backend in BACKENDS {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let desired = backend.desired(&rules);
        reconcile(&dataplane, &desired).expect("apply");
        assert!(setup.fake.set_counters("npg:", 5, 300) > 0);
        let observed = dataplane.observe().expect("observe");
        let counted = observed
            .tables
            .values()
            .flat_map(|table| table.chains.values())
            .flat_map(|rules| rules.iter())
            .all(|rule| {
                rule.counters
                    .as_ref()
                    .is_some_and(|c| c.packets == 5 && c.bytes == 300)
            });
        assert!(counted, "{backend}");
    }
}

#[test]
fn a_program_that_always_fails_is_reported_with_its_stderr() {
    let rules = policy("nodeport-range");
    let setup = Setup::new();
    let dataplane = setup.dataplane(NATIVE);
    setup.fake.fail_program("nft");
    let Err(ReconcileError::RolledBack { error }) = reconcile(&dataplane, &NATIVE.desired(&rules))
    else {
        panic!("expected a rollback");
    };
    assert!(
        error.to_string().contains("Operation not permitted"),
        "{error}"
    );
    let writes = setup.fake.commands().iter().filter(|c| c.write).count();
    assert_eq!(writes, 1, "nothing to restore, so nothing more written");
}

/// A set of ours whose type is wrong cannot be swapped for one of the right type while a rule
/// uses it: the apply fails loudly and the kernel is put back as it was.
#[test]
fn a_set_of_another_type_is_refused_and_rolled_back() {
    let rules = policy("dual-stack");
    for backend in [LEGACY, NFT] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let desired = backend.desired(&rules);
        reconcile(&dataplane, &desired).expect("apply");
        let restore = if backend == LEGACY {
            "iptables-legacy-restore"
        } else {
            "iptables-nft-restore"
        };
        // Another program puts a hash:net set under our name and points a rule at it.
        let foreign = setup.fake.foreign(
            "ipset",
            &["restore"],
            "create npg4-wrong hash:net family inet maxelem 1048576\nadd npg4-wrong 192.0.2.0/24\n",
        );
        assert!(foreign.success, "{}", foreign.stderr);
        let script = "*mangle\n:npg-extra - [0:0]\n-A npg-extra -m set --match-set npg4-wrong src -j RETURN\nCOMMIT\n";
        assert!(setup.fake.foreign(restore, &["--noflush"], script).success);
        let mut wanted = desired.clone();
        let mut set = wanted.sets["npg4-this-host"].clone();
        set.kind = "hash:ip".into();
        wanted.sets.insert("npg4-wrong".into(), set);
        let before = setup.fake.snapshot();
        let error = assert_rolled_back(reconcile(&dataplane, &wanted), &backend.to_string());
        assert!(
            error
                .to_string()
                .contains("The sets cannot be swapped: their type does not match"),
            "{backend}: {error}"
        );
        assert_eq!(setup.fake.snapshot(), before, "{backend}");
    }
}

/// `--backend auto` stays with the backend our rules are already in.
#[test]
fn detection_finds_our_rules_in_the_fake() {
    let rules = policy("nodeport-range");
    for backend in BACKENDS {
        let setup = Setup::new();
        reconcile(&setup.dataplane(backend), &backend.desired(&rules)).expect("apply");
        let (found, reason) = crate::dataplane::detect::detect(&setup.fake);
        assert_eq!(found, backend, "{reason}");
    }
}

// ---------------------------------------------------------------------------------------------
// The cached view (reconcile_cached).

use crate::reconcile::{Read, View, reconcile_cached};
use std::sync::Arc;

/// The hash of the first rule of ours in `desired`.
fn first_rule_hash(desired: &State) -> String {
    desired
        .tables
        .values()
        .flat_map(|table| table.chains.values().flat_map(|rules| rules.iter()))
        .find_map(|rule| rule.hash.as_deref().map(str::to_owned))
        .expect("a rule")
}

/// Whether a command read the kernel's rules (a save or an nft listing).
fn reads_rules(invocation: &crate::dataplane::fake::Invocation) -> bool {
    invocation.program.ends_with("-save")
        || (invocation.program == "nft" && invocation.args.iter().any(|arg| arg == "list"))
}

#[test]
fn an_unchanged_sign_plans_against_the_cached_view_without_reading_the_rules() {
    for backend in [LEGACY, NFT, NATIVE] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let first = Arc::new(backend.desired(&policy("nodeport-whitelist")));
        let second = Arc::new(backend.desired(&policy("office-networkset")));
        let mut cache: Option<View> = None;
        let (_, read) = reconcile_cached(&dataplane, &first, &mut cache).expect("apply");
        assert_eq!(read, Read::Whole, "{backend}: the first read is whole");
        assert!(cache.is_some(), "{backend}: a write of ours keeps the view");
        setup.fake.clear_commands();
        let (outcome, read) = reconcile_cached(&dataplane, &second, &mut cache).expect("change");
        assert_eq!(read, Read::Cached, "{backend}");
        assert!(!outcome.plan.is_empty(), "{backend}");
        // Planned without reading the rules first (the read-back after the write reads them).
        let commands = setup.fake.commands();
        let first_write = commands.iter().position(|c| c.write).expect("a write");
        assert!(
            !commands[..first_write].iter().any(reads_rules),
            "{backend}: read before planning: {:?}",
            commands.iter().map(|c| c.line()).collect::<Vec<_>>()
        );
        // The result is what a whole read would have given.
        assert_eq!(
            projection(&dataplane.observe().expect("observe")),
            projection(&second),
            "{backend}"
        );
        // And nothing to do is found from the cache too, without a write.
        setup.fake.clear_commands();
        let (outcome, read) = reconcile_cached(&dataplane, &second, &mut cache).expect("again");
        assert!(outcome.plan.is_empty(), "{backend}");
        assert_eq!(read, Read::Cached, "{backend}");
        assert!(
            !setup
                .fake
                .commands()
                .iter()
                .any(|c| c.write || reads_rules(c)),
            "{backend}: {:?}",
            setup.fake.commands()
        );
    }
}

#[test]
fn a_foreign_commit_makes_the_next_reconcile_read_everything_and_repair_it() {
    for backend in [LEGACY, NFT, NATIVE] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let desired = Arc::new(backend.desired(&policy("nodeport-whitelist")));
        let mut cache = None;
        reconcile_cached(&dataplane, &desired, &mut cache).expect("apply");
        let hash = first_rule_hash(&desired);
        assert!(setup.fake.delete_rules_containing(&format!("npg:{hash}")) > 0);
        let (outcome, read) = reconcile_cached(&dataplane, &desired, &mut cache).expect("repair");
        assert_eq!(read, Read::Whole, "{backend}: the sign moved");
        assert!(!outcome.plan.is_empty(), "{backend}: the drift is repaired");
        assert_eq!(
            projection(&dataplane.observe().expect("observe")),
            projection(&desired),
            "{backend}"
        );
    }
}

#[test]
fn ipsets_are_read_again_even_when_the_iptables_rules_are_cached() {
    use crate::dataplane::Kernel as _;
    for backend in [LEGACY, NFT] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let desired = Arc::new(backend.desired(&policy("office-networkset")));
        let set = desired.sets.keys().next().expect("a set").clone();
        let mut cache = None;
        reconcile_cached(&dataplane, &desired, &mut cache).expect("apply");
        let signs = (setup.fake.nft_generation(), setup.fake.xtables_digest());
        // ipset is outside nf_tables and x_tables: neither sign moves.
        let output = setup
            .fake
            .foreign("ipset", &["add", &set, "192.0.2.99"], "");
        assert!(output.success, "{}", output.stderr);
        assert_eq!(
            (setup.fake.nft_generation(), setup.fake.xtables_digest()),
            signs
        );
        let (outcome, read) = reconcile_cached(&dataplane, &desired, &mut cache).expect("repair");
        assert_eq!(read, Read::Cached, "{backend}");
        assert_eq!(outcome.plan.sets.len(), 1, "{}", outcome.plan.describe());
        assert_eq!(outcome.plan.sets[0].remove, vec!["192.0.2.99".to_owned()]);
    }
}

#[test]
fn a_failed_write_empties_the_cache() {
    for backend in [LEGACY, NFT, NATIVE] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let first = Arc::new(backend.desired(&policy("nodeport-whitelist")));
        let second = Arc::new(backend.desired(&policy("docker-published-port")));
        let mut cache = None;
        reconcile_cached(&dataplane, &first, &mut cache).expect("apply");
        setup.fake.fail_write(1);
        assert!(reconcile_cached(&dataplane, &second, &mut cache).is_err());
        assert!(cache.is_none(), "{backend}");
        let (_, read) = reconcile_cached(&dataplane, &second, &mut cache).expect("retry");
        assert_eq!(read, Read::Whole, "{backend}");
        assert_eq!(
            projection(&dataplane.observe().expect("observe")),
            projection(&second),
            "{backend}"
        );
    }
}

/// The policy example with its first whitelisted address changed: one chain differs.
fn one_chain_changed() -> Ruleset {
    let example =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("policies/nodeport-whitelist.yaml");
    let text = std::fs::read_to_string(&example).expect("the example");
    assert!(text.contains("198.51.100.10/32"));
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("changed.yaml");
    std::fs::write(
        &file,
        text.replacen("198.51.100.10/32", "198.51.100.11/32", 1),
    )
    .expect("write");
    ruleset(&file)
}

#[test]
fn a_small_write_is_verified_by_listing_only_its_chains() {
    for backend in [LEGACY, NFT] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        reconcile(&dataplane, &backend.desired(&policy("nodeport-whitelist"))).expect("apply");
        let desired = backend.desired(&one_chain_changed());
        setup.fake.clear_commands();
        let outcome = reconcile(&dataplane, &desired).expect("the change");
        let changed: Vec<&str> = outcome
            .plan
            .tables
            .iter()
            .flat_map(|table| table.chains.iter().map(|chain| chain.name.as_str()))
            .collect();
        assert!(
            !changed.is_empty() && changed.len() <= 2,
            "{backend}: {changed:?}"
        );
        let commands = setup.fake.commands();
        let after_write = commands
            .iter()
            .skip_while(|command| !command.write)
            .skip_while(|command| command.write);
        let reads: Vec<String> = after_write.map(Invocation::line).collect();
        assert!(
            reads.iter().all(|read| !read.contains("-save")),
            "{backend}: the read-back saved whole tables: {reads:?}"
        );
        for chain in changed {
            assert!(
                reads
                    .iter()
                    .any(|read| read.ends_with(&format!("-S {chain}"))),
                "{backend}: {chain} was not listed: {reads:?}"
            );
        }
        assert_eq!(
            projection(&dataplane.observe().expect("read")),
            projection(&desired),
            "{backend}"
        );

        // A rule the kernel loses on the way is seen by that listing, and rolled back.
        let back = backend.desired(&policy("nodeport-whitelist"));
        let victim = a_new_rule(&back, &desired);
        let before = setup.fake.snapshot();
        setup.fake.drop_rules_containing(&format!("npg:{victim}"));
        let error = assert_rolled_back(reconcile(&dataplane, &back), &backend.to_string());
        assert!(
            matches!(error, DataplaneError::Verify(_)),
            "{backend}: {error}"
        );
        assert_eq!(setup.fake.snapshot(), before, "{backend}: not rolled back");
    }
}

// ---------------------------------------------------------------------------------------------
// The command line's saved view (view::observe, view::after_write).

use crate::reconcile::{view, write_planned};

/// Writes the plan from `before` to `desired`, and says how many nf_tables transactions that
/// committed.
fn commits_writing(dataplane: &Dataplane<'_>, desired: &State, before: State) -> u32 {
    let changes = crate::plan::plan(desired, &before);
    write_planned(dataplane, desired, before, changes)
        .expect("apply")
        .commits
}

/// A view as the state directory keeps it: written out as JSON and read back.
fn kept(saved: view::View) -> view::View {
    serde_json::from_slice(&serde_json::to_vec(&saved).expect("serialise")).expect("read back")
}

/// The view the next command finds after one that applied `desired` to an empty kernel.
fn view_after_apply(setup: &Setup, backend: &'static dyn Backend, desired: &State) -> view::View {
    let dataplane = setup.dataplane(backend);
    let mut observed = view::observe(&dataplane, None);
    assert_eq!(observed.read, Read::Whole, "{backend}");
    assert!(
        observed.save.is_some(),
        "{backend}: a still kernel read whole is kept"
    );
    let before = std::mem::replace(&mut observed.state, Ok(State::default())).expect("observe");
    let commits = commits_writing(&dataplane, desired, before);
    let saved = view::after_write(&dataplane, &observed, commits, desired)
        .expect("the generation moved by our commits alone");
    kept(saved)
}

/// iptables-legacy has no generation: its commands keep no view and read the kernel whole.
#[test]
fn iptables_legacy_keeps_no_view() {
    let setup = Setup::new();
    let dataplane = setup.dataplane(LEGACY);
    let desired = LEGACY.desired(&policy("nodeport-whitelist"));
    let mut observed = view::observe(&dataplane, None);
    assert!(observed.save.is_none());
    let before = std::mem::replace(&mut observed.state, Ok(State::default())).expect("observe");
    let commits = commits_writing(&dataplane, &desired, before);
    assert!(view::after_write(&dataplane, &observed, commits, &desired).is_none());
    let observed = view::observe(&dataplane, None);
    assert_eq!(
        (observed.read, observed.save.is_none()),
        (Read::Whole, true)
    );
}

#[test]
fn a_saved_view_stands_for_the_kernel_until_anyone_changes_it() {
    for backend in [NFT, NATIVE] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let desired = backend.desired(&policy("nodeport-whitelist"));
        let saved = view_after_apply(&setup, backend, &desired);
        setup.fake.clear_commands();
        let observed = view::observe(&dataplane, Some(saved));
        assert_eq!(observed.read, Read::Cached, "{backend}");
        assert!(
            !setup.fake.commands().iter().any(reads_rules),
            "{backend}: no rule was read: {:?}",
            setup.fake.commands()
        );
        let state = observed.state.expect("state");
        assert!(plan(&desired, &state).is_empty(), "{backend}");
        assert_eq!(
            state.fingerprint(),
            dataplane.observe().expect("observe").fingerprint(),
            "{backend}: the view is what a whole read gives"
        );

        // Another program deletes one of our rules: the view is not used again.
        let saved = view_after_apply(&Setup::new(), backend, &desired);
        let hash = first_rule_hash(&desired);
        let other = Setup::new();
        let other_dataplane = other.dataplane(backend);
        reconcile(&other_dataplane, &desired).expect("apply");
        // The same rules, written by as many commits: the same sign, another namespace.
        let observed = view::observe(&other_dataplane, Some(saved));
        assert_eq!(
            observed.read,
            Read::Whole,
            "{backend}: another namespace's view is never read"
        );
        let saved = view_after_apply(&other, backend, &desired);
        assert!(other.fake.delete_rules_containing(&format!("npg:{hash}")) > 0);
        let observed = view::observe(&other_dataplane, Some(saved));
        assert_eq!(observed.read, Read::Whole, "{backend}: the sign moved");
        let changes = plan(&desired, &observed.state.expect("state"));
        assert!(!changes.is_empty(), "{backend}: the deleted rule is seen");
    }
}

#[test]
fn a_foreign_commit_during_a_write_keeps_no_view_after_it() {
    for backend in [NFT, NATIVE] {
        let setup = Setup::new();
        let dataplane = setup.dataplane(backend);
        let mut observed = view::observe(&dataplane, None);
        let before = std::mem::replace(&mut observed.state, Ok(State::default())).expect("observe");
        // Someone commits between the reading and the write.
        let output = setup
            .fake
            .foreign("nft", &["-f", "-"], "add table inet someone_else\n");
        assert!(output.success, "{}", output.stderr);
        let desired = backend.desired(&policy("nodeport-whitelist"));
        let commits = commits_writing(&dataplane, &desired, before);
        assert!(
            view::after_write(&dataplane, &observed, commits, &desired).is_none(),
            "{backend}"
        );
    }
}

#[test]
fn a_view_of_another_backend_or_families_is_not_read() {
    let setup = Setup::new();
    let desired = NATIVE.desired(&policy("nodeport-whitelist"));
    let saved = view_after_apply(&setup, NATIVE, &desired);
    let json = serde_json::to_vec(&saved).expect("serialise");
    let observed = view::observe(&setup.dataplane(NFT), Some(kept(saved)));
    assert_eq!(observed.read, Read::Whole, "another backend's view");
    let only_v4 = Dataplane::new(NATIVE, &setup.fake, vec![IpFamily::V4], setup.dir.path());
    let saved: view::View = serde_json::from_slice(&json).expect("read back");
    assert_eq!(view::observe(&only_v4, Some(saved)).read, Read::Whole);
    let saved: view::View = serde_json::from_slice(&json).expect("read back");
    assert_eq!(
        view::observe(&setup.dataplane(NATIVE), Some(saved)).read,
        Read::Cached
    );
}
