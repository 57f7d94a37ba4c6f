//! Kernel tests of the reconciler's promises to the operator: `plan` tells
//! the truth, `apply` converges and repairs drift, nothing that belongs to
//! someone else is touched, bad input and missing consent change nothing,
//! an unconfirmed apply rolls back, and saved plans refuse to apply stale.

mod support;

use std::time::{Duration, Instant};

use support::fixtures::Whitelist;
use support::snapshot::Snapshot;
use support::{
    Backend, Family, Guard, Lab, POLL, SETTLE_TIMEOUT, addr, assert_contains, assert_same_state,
    backend_tests, check_reachability, dropped, iptables, nft_tables, open, ports, replies, sa,
};

/// A pre-DNAT whitelist named `name`: 198.51.100.10 and .12 may reach TCP
/// `port`, everyone else is dropped there.
fn whitelist(name: &str, port: u16) -> String {
    Whitelist::mission().name(name).port(port).yaml()
}

/// Policy set A: the NodePort whitelist.
fn policy_a() -> String {
    whitelist("guard-nodeport", ports::NODEPORT)
}

/// Policy set B: the same whitelist on the host service instead.
fn policy_b() -> String {
    whitelist("guard-host-service", ports::HOST_SERVICE)
}

/// Probes that tell A (NodePort guarded, host service open) from B (the
/// reverse) for the unlisted client 198.51.100.11, and that the listed
/// client .10 gets through either way.
fn behaves_like_a(lab: &Lab, context: &str) {
    let unlisted = addr::CLIENT_V4[1];
    check_reachability(
        lab,
        context,
        &[
            dropped(unlisted, sa(addr::NODE_V4, ports::NODEPORT)),
            open(
                unlisted,
                sa(addr::NODE_V4, ports::HOST_SERVICE),
                replies::HOST_SERVICE,
            ),
            open(
                addr::CLIENT_V4[0],
                sa(addr::NODE_V4, ports::NODEPORT),
                replies::NODEPORT_TARGET,
            ),
        ],
    );
}

/// See [`behaves_like_a`].
fn behaves_like_b(lab: &Lab, context: &str) {
    let unlisted = addr::CLIENT_V4[1];
    check_reachability(
        lab,
        context,
        &[
            open(
                unlisted,
                sa(addr::NODE_V4, ports::NODEPORT),
                replies::NODEPORT_TARGET,
            ),
            dropped(unlisted, sa(addr::NODE_V4, ports::HOST_SERVICE)),
            open(
                addr::CLIENT_V4[0],
                sa(addr::NODE_V4, ports::HOST_SERVICE),
                replies::HOST_SERVICE,
            ),
        ],
    );
}

/// Nothing guarded: the unlisted client reaches the NodePort.
fn behaves_unguarded(lab: &Lab, context: &str) {
    check_reachability(
        lab,
        context,
        &[open(
            addr::CLIENT_V4[1],
            sa(addr::NODE_V4, ports::NODEPORT),
            replies::NODEPORT_TARGET,
        )],
    );
}

/// The first chain of ours in mangle (IPv4) whose name starts with `prefix`.
#[track_caller]
fn mangle_chain(guard: &Guard<'_>, prefix: &str) -> String {
    let snapshot = guard.snapshot();
    snapshot
        .chains(Family::V4, "mangle", prefix)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no mangle chain {prefix}* in\n{snapshot:?}"))
}

/// `plan --detailed-exitcode` exits 2 while the kernel lacks the policy
/// (and changes nothing), 0 right after `apply --yes`, and still 0 after
/// traffic has moved the rule counters; a second `apply` says "No
/// changes" and leaves `iptables-save` / `ip6tables-save` / `ipset save`
/// byte-identical.
fn plan_reports_changes_until_apply_and_reapply_is_a_no_op(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("a.yaml", &policy_a());

    let before = guard.snapshot();
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 2, "changes pending: {out}");
    assert_contains(&out.stdout, "Plan: ", "plan summary");
    assert_same_state(
        &before,
        &guard.snapshot(),
        "plan must not change the kernel",
    );
    assert!(before.has_nothing_of_ours(), "{before:?}");

    let out = guard.apply();
    assert_contains(&out.stdout, "Applied", "apply output");
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 0, "nothing left to do: {out}");
    assert_contains(&out.stdout, "No changes", "plan after apply");

    behaves_like_a(&lab, "after apply");
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 0, "traffic (counters) is not drift: {out}");

    let applied = guard.snapshot();
    assert!(
        !applied.has_nothing_of_ours(),
        "apply wrote nothing: {applied:?}"
    );
    let out = guard.apply();
    assert_contains(&out.stdout, "No changes", "second apply");
    assert_same_state(
        &applied,
        &guard.snapshot(),
        "a second apply must change nothing",
    );
}
backend_tests!(plan_reports_changes_until_apply_and_reapply_is_a_no_op);

/// Drift is reported and repaired without touching foreign rules: after
/// someone flushes our policy chain, deletes our jump from mangle
/// PREROUTING and inserts their own rule at position 1 there, the
/// whitelist is gone; `plan --detailed-exitcode` exits 2 naming the
/// flushed chain and the missing jump; `apply --yes` puts our jump back
/// at position 1 with the foreign rule kept at position 2, restores our
/// rules exactly, and the whitelist works again.
fn drift_is_reported_and_repaired_keeping_foreign_rules(backend: Backend) {
    let lab = Lab::new(backend);
    // Only mangle judges here: with the early drop, raw would still drop the denied SYNs.
    let guard = Guard::with_config(&lab, "earlyDrop: false\n");
    guard.write_policy("a.yaml", &policy_a());
    guard.apply();
    let applied = guard.snapshot();
    let policy_chain = mangle_chain(&guard, "npg-pi-");

    iptables(&lab, Family::V4, &format!("-t mangle -F {policy_chain}"));
    let jump = &applied.rules(Family::V4, "mangle", "PREROUTING")[0];
    assert_contains(jump, "-j npg-PREROUTING", "our jump is first in PREROUTING");
    iptables(&lab, Family::V4, "-t mangle -D PREROUTING 1");
    iptables(
        &lab,
        Family::V4,
        "-t mangle -I PREROUTING 1 -m comment --comment operator-mark -j MARK --set-xmark 0x1/0x1",
    );
    behaves_unguarded(&lab, "after the drift");

    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 2, "drift must be reported: {out}");
    assert_contains(&out.stdout, &policy_chain, "plan names the flushed chain");
    assert_contains(
        &out.stdout,
        "jump at position 1 of `PREROUTING`",
        "plan names the jump",
    );

    guard.apply();
    let repaired = guard.snapshot();
    let prerouting = repaired.rules(Family::V4, "mangle", "PREROUTING");
    assert_contains(
        &prerouting[0],
        "-j npg-PREROUTING",
        "our jump is back at position 1",
    );
    assert_contains(
        &prerouting[1],
        "operator-mark",
        "the foreign rule is kept at position 2",
    );
    assert_same_state(
        &applied.ours().canonical(),
        &repaired.ours().canonical(),
        "our rules after repair",
    );
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 0, "{out}");
    behaves_like_a(&lab, "after the repair");
}
backend_tests!(
    drift_is_reported_and_repaired_keeping_foreign_rules,
    iptables_only
);

/// Policy A applied with `config`, then another program's ACCEPT inserted at the top of
/// mangle PREROUTING, above our jump.
fn policy_a_under_a_foreign_accept<'lab>(lab: &'lab Lab, config: &str) -> Guard<'lab> {
    let guard = Guard::with_config(lab, config);
    guard.write_policy("a.yaml", &policy_a());
    guard.apply();
    iptables(
        lab,
        Family::V4,
        "-t mangle -I PREROUTING 1 -m comment --comment other-tool -j ACCEPT",
    );
    guard
}

/// Another program that inserts an ACCEPT at the top of mangle
/// PREROUTING (ahead of our jump) opens every guarded port; `plan` says
/// our jump must move back to position 1, and after `apply` it is first
/// again, the ACCEPT second, and the whitelist holds.
fn foreign_accept_inserted_above_our_jump_cannot_bypass_after_apply(backend: Backend) {
    let lab = Lab::new(backend);
    // Only mangle judges here: with the early drop, raw would still drop the denied SYNs
    // (`early_drop_survives_a_foreign_accept_in_mangle`).
    let guard = policy_a_under_a_foreign_accept(&lab, "earlyDrop: false\n");
    behaves_unguarded(&lab, "with a foreign ACCEPT above our jump");
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 2, "{out}");
    assert_contains(
        &out.stdout,
        "position 2; move it back to position 1",
        "plan explains the move",
    );

    guard.apply();
    let prerouting = guard.snapshot().rules(Family::V4, "mangle", "PREROUTING");
    assert_contains(&prerouting[0], "-j npg-PREROUTING", "our jump first");
    assert_contains(&prerouting[1], "other-tool", "the foreign ACCEPT second");
    assert_eq!(prerouting.len(), 2, "{prerouting:?}");
    behaves_like_a(&lab, "after apply");
}
backend_tests!(
    foreign_accept_inserted_above_our_jump_cannot_bypass_after_apply,
    iptables_only
);

/// With the early drop on (the default), a foreign ACCEPT at the top of mangle PREROUTING
/// does not open the guarded port to new connections: their SYNs were judged in raw.
fn early_drop_survives_a_foreign_accept_in_mangle(backend: Backend) {
    let lab = Lab::new(backend);
    let _guard = policy_a_under_a_foreign_accept(&lab, "");
    behaves_like_a(&lab, "with a foreign ACCEPT above our jump in mangle");
}
backend_tests!(
    early_drop_survives_a_foreign_accept_in_mangle,
    iptables_only
);

/// kube-proxy-, docker- and operator-owned state in every table of both
/// families, and a foreign ipset.
fn install_foreign_state(lab: &Lab) {
    for family in Family::ALL {
        let (unused_src, service) = match family {
            Family::V4 => ("192.0.2.99", "10.96.0.1/32"),
            Family::V6 => ("2001:db8:3::99", "fd00:96::1/128"),
        };
        let rules = [
            // kube-proxy: a service chain hooked first in nat PREROUTING,
            // ahead of the lab's DNAT rules.
            "-t nat -N KUBE-SERVICES".to_string(),
            format!(
                "-t nat -A KUBE-SERVICES -d {service} -p tcp --dport 443 \
                 -m comment --comment default/kubernetes:https -j RETURN"
            ),
            "-t nat -I PREROUTING 1 -m comment --comment kubernetes-service-portals \
             -j KUBE-SERVICES"
                .to_string(),
            // docker: DOCKER-USER hooked from FORWARD.
            "-N DOCKER-USER".to_string(),
            format!("-A DOCKER-USER -s {unused_src} -j DROP"),
            "-A DOCKER-USER -j RETURN".to_string(),
            "-A FORWARD -j DOCKER-USER".to_string(),
            // The operator's own rules in mangle, filter INPUT and raw.
            format!("-t mangle -A PREROUTING -s {unused_src} -j MARK --set-xmark 0x1/0x1"),
            format!("-A INPUT -s {unused_src} -p tcp --dport 9999 -j DROP"),
            format!("-t raw -A PREROUTING -s {unused_src} -j CT --notrack"),
        ];
        for rule in rules {
            iptables(lab, family, &rule);
        }
    }
    let node = lab.node();
    node.exec_ok("ipset", &["create", "user-set", "hash:ip"]);
    node.exec_ok("ipset", &["add", "user-set", "192.0.2.99"]);
    // A name that starts like ours but is not one of ours (`npg4-…`, `npg6-…`).
    node.exec_ok("ipset", &["create", "npgx-notours", "hash:ip"]);
    node.exec_ok("ipset", &["add", "npgx-notours", "192.0.2.98"]);
}

/// Policies that make nodeport-guard use mangle, filter INPUT/FORWARD/OUTPUT
/// and selector ipsets: a network set, a pre-DNAT whitelist selecting it,
/// and a normal allow-all policy in both directions, also on forward.
const BROAD_POLICIES: &str = r#"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata:
  name: office
  labels:
    role: office
spec:
  nets: [198.51.100.12/32, "2001:db8:1::12/128"]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: office-nodeport
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      source:
        selector: role == 'office'
    - action: Deny
      protocol: TCP
      destination:
        ports: [30008]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: allow-everything-else
spec:
  order: 100
  applyOnForward: true
  selector: all()
  types: [Ingress, Egress]
  ingress:
    - action: Allow
  egress:
    - action: Allow
"#;

/// `nft list ruleset` of the node with rule counters removed.
fn nft_ruleset(lab: &Lab) -> String {
    let text = support::nft_list_ruleset(lab.node());
    let counters = regex::Regex::new(r"counter packets \d+ bytes \d+").expect("regex");
    counters.replace_all(&text, "counter").into_owned()
}

/// nodeport-guard never changes what it does not own: with kube-proxy's
/// nat chains, docker's DOCKER-USER, the operator's rules in mangle,
/// filter and raw (IPv4 and IPv6) and foreign ipsets in place (one named
/// `npgx-notours`: like ours, but not `npg4-…` or `npg6-…`), the foreign
/// part of `iptables-save`, `ip6tables-save` and `ipset save` is
/// byte-identical after `apply`; after `cleanup` the whole state (and
/// `nft list ruleset`) is byte-identical to before, with nothing of ours
/// left; a second `cleanup` finds nothing and exits 0.
fn foreign_rules_chains_and_sets_survive_apply_and_cleanup(backend: Backend) {
    let lab = Lab::new(backend);
    install_foreign_state(&lab);
    let guard = Guard::new(&lab);
    guard.write_policy("broad.yaml", BROAD_POLICIES);

    let before = guard.snapshot();
    let nft_before = nft_ruleset(&lab);
    guard.apply();
    let applied = guard.snapshot();
    // raw: the early drop of denied TCP SYNs, beside the operator's own raw rule.
    for table in ["raw", "mangle", "filter"] {
        assert!(
            !applied.chains(Family::V4, table, "npg-").is_empty(),
            "the policies must use {table}: {applied:?}"
        );
    }
    assert!(
        applied.set_names().iter().any(|s| s.starts_with("npg4-")),
        "{applied:?}"
    );
    assert!(
        applied.set_names().iter().any(|s| s.starts_with("npg6-")),
        "{applied:?}"
    );
    assert_same_state(
        &before.foreign(),
        &applied.foreign(),
        "foreign state after apply",
    );
    check_reachability(
        &lab,
        "the office set is enforced",
        &[
            open(
                addr::CLIENT_V4[2],
                sa(addr::NODE_V4, ports::NODEPORT),
                replies::NODEPORT_TARGET,
            ),
            dropped(addr::CLIENT_V4[1], sa(addr::NODE_V4, ports::NODEPORT)),
        ],
    );

    guard.cleanup();
    let after = guard.snapshot();
    assert!(
        after.has_nothing_of_ours(),
        "left behind:\n{:?}",
        after.ours()
    );
    assert_same_state(&before, &after, "state after cleanup");
    let out = guard.cleanup();
    assert_contains(&out.stdout, "Nothing to clean up", "second cleanup");
    assert_same_state(&before, &guard.snapshot(), "state after a second cleanup");

    let nft_after = nft_ruleset(&lab);
    assert!(
        nft_before == nft_after,
        "nft list ruleset after apply + cleanup differs from before:\n{}",
        similar::TextDiff::from_lines(&nft_before, &nft_after).unified_diff()
    );
}
backend_tests!(foreign_rules_chains_and_sets_survive_apply_and_cleanup);

/// Removes the tables that hold nothing but empty built-in chains with an
/// ACCEPT policy from an `iptables-save` text.
fn without_empty_tables(save: &str) -> String {
    let mut out = String::new();
    let mut table: Vec<&str> = Vec::new();
    for line in save.lines() {
        table.push(line);
        if line == "COMMIT" {
            let empty = table.iter().all(|l| {
                l.starts_with('*') || l.starts_with(':') && l.contains(" ACCEPT ") || *l == "COMMIT"
            });
            if !empty {
                out.extend(table.iter().map(|l| format!("{l}\n")));
            }
            table.clear();
        }
    }
    out
}

/// On a node whose mangle tables were never used, `apply` then `cleanup`
/// must leave the firewall as it found it (the contract: "everything
/// else exactly as before"). With iptables-nft, `nft list ruleset` must
/// not gain an empty `table ip mangle` / `table ip6 mangle`. With
/// iptables-legacy the kernel keeps a table once it was used in a
/// namespace and `iptables-save` lists it, which no program can undo,
/// so there the test only allows empty built-in tables as difference.
fn cleanup_leaves_no_table_behind_that_it_created(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("a.yaml", &policy_a());
    let before = guard.snapshot();
    assert!(
        !before.v4.contains("*mangle"),
        "the lab must not use mangle: {before:?}"
    );
    let nft_before = nft_ruleset(&lab);

    guard.apply();
    guard.cleanup();
    let after = guard.snapshot();
    assert!(after.has_nothing_of_ours(), "{:?}", after.ours());
    match backend {
        Backend::Nft | Backend::Nftables => {
            let nft_after = nft_ruleset(&lab);
            assert!(
                nft_before == nft_after,
                "nft list ruleset after apply + cleanup differs from before:\n{}",
                similar::TextDiff::from_lines(&nft_before, &nft_after).unified_diff()
            );
            assert_same_state(&before, &after, "state after cleanup");
        }
        Backend::Legacy => {
            assert_eq!(
                without_empty_tables(&before.v4),
                without_empty_tables(&after.v4)
            );
            assert_eq!(
                without_empty_tables(&before.v6),
                without_empty_tables(&after.v6)
            );
            assert_eq!(before.sets, after.sets);
        }
    }
}
backend_tests!(cleanup_leaves_no_table_behind_that_it_created);

/// Line 14 holds a port out of range.
const BROKEN_POLICY: &str = r#"apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: broken
spec:
  order: 5
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Deny
      protocol: TCP
      destination:
        ports: [70000]
"#;

/// Asserts that stderr has an error line `<file>:14:<col>: error: …`.
#[track_caller]
fn assert_error_at_line_14(stderr: &str, file: &std::path::Path) {
    let pattern = format!(
        r"(?m)^{}:14:\d+: error: ",
        regex::escape(&file.display().to_string())
    );
    let re = regex::Regex::new(&pattern).expect("regex");
    assert!(
        re.is_match(stderr),
        "expected an error matching {pattern:?} on stderr:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A policy directory with an error is refused as a whole: `apply --yes`
/// exits 1, prints `path:line:col: error:` pointing at the bad line, and
/// the kernel is unchanged — both on a fresh node and on a node where
/// rules were applied before (a valid new policy next to the broken file
/// is not applied either).
fn invalid_policy_is_refused_with_its_location_and_changes_nothing(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let broken = guard.write_policy("broken.yaml", BROKEN_POLICY);
    let fresh = guard.snapshot();
    let out = guard.run_expect(&["apply", "--yes"], 1);
    assert_error_at_line_14(&out.stderr, &broken);
    assert_same_state(
        &fresh,
        &guard.snapshot(),
        "fresh node after a refused apply",
    );
    let out = guard.run_expect(&["plan", "--detailed-exitcode"], 1);
    assert_error_at_line_14(&out.stderr, &broken);

    guard.remove_policy("broken.yaml");
    guard.write_policy("a.yaml", &policy_a());
    guard.apply();
    let applied = guard.snapshot();
    guard.write_policy("b.yaml", &policy_b());
    let broken = guard.write_policy("broken.yaml", BROKEN_POLICY);
    let out = guard.run_expect(&["apply", "--yes"], 1);
    assert_error_at_line_14(&out.stderr, &broken);
    assert_same_state(
        &applied,
        &guard.snapshot(),
        "applied rules after a refused apply",
    );
    behaves_like_a(&lab, "after the refused apply");
}
backend_tests!(invalid_policy_is_refused_with_its_location_and_changes_nothing);

/// Consent is required: off a terminal (stdin is not a tty), `apply`
/// and `cleanup` without `--yes` exit 1, say that `--yes` is needed, and
/// change nothing.
fn apply_and_cleanup_without_yes_off_a_terminal_change_nothing(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("a.yaml", &policy_a());
    let fresh = guard.snapshot();
    let out = guard.run_expect(&["apply"], 1);
    assert_contains(&out.stderr, "--yes", "apply explains what is missing");
    assert_same_state(&fresh, &guard.snapshot(), "after apply without --yes");

    guard.apply();
    let applied = guard.snapshot();
    let out = guard.run_expect(&["cleanup"], 1);
    assert_contains(&out.stderr, "--yes", "cleanup explains what is missing");
    assert_same_state(&applied, &guard.snapshot(), "after cleanup without --yes");
}
backend_tests!(apply_and_cleanup_without_yes_off_a_terminal_change_nothing);

/// The rollback watcher's pid from the state directory.
#[track_caller]
fn watcher_pid(guard: &Guard<'_>) -> u32 {
    let path = guard.state_dir().join("pending-apply.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no pending apply in {}: {e}", path.display()));
    let value: serde_json::Value = serde_json::from_str(&text).expect("pending-apply.json is JSON");
    value["watcher_pid"]
        .as_u64()
        .and_then(|pid| u32::try_from(pid).ok())
        .unwrap_or_else(|| panic!("no watcher pid in {text}"))
}

/// The confirm window of the `--confirm-timeout` tests, in seconds: the deadline counts in
/// whole seconds, so the window is between 3 and 4 s, long enough for the checks a test makes
/// before it (probes, `status`, a refused apply) on a loaded machine.
const CONFIRM_WINDOW: &str = "4";

/// The files of the guard's state directory and whether the rollback watcher still runs, for
/// a failure message.
fn state_dir_report(guard: &Guard<'_>) -> String {
    let mut report = String::new();
    let Ok(entries) = std::fs::read_dir(guard.state_dir()) else {
        return "(cannot be read)".to_owned();
    };
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let text: String = text.chars().take(600).collect();
        report.push_str(&format!(
            "{}: {text}\n",
            entry.file_name().to_string_lossy()
        ));
        if let Some(pid) = text
            .split("\"watcher_pid\":")
            .nth(1)
            .and_then(|rest| {
                rest.trim_start()
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
            })
            .and_then(|pid| pid.parse::<u32>().ok())
        {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let stack = std::fs::read_to_string(format!("/proc/{pid}/stack")).unwrap_or_default();
            report.push_str(&format!("watcher {pid}: {stat}\n{stack}\n"));
        }
    }
    report
}

fn process_gone(pid: u32) -> bool {
    // A zombie (exited, not yet reaped) counts as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// `apply --confirm-timeout 4` without `confirm`: the new rules (B) are
/// in force at once, `status` says a confirmation is pending and a second
/// apply is refused meanwhile; after the apply process has exited, the
/// kernel returns by itself to exactly the previous rules (A) within a
/// few seconds, in rules and in behaviour. `confirm` then exits 1 and
/// says the apply was rolled back; on a node with nothing pending
/// `confirm` exits 1 too.
fn unconfirmed_apply_rolls_back_to_the_previous_rules(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let out = guard.run_expect(&["confirm"], 1);
    assert_contains(
        &out.stderr,
        "no apply is waiting",
        "confirm with nothing pending",
    );

    guard.write_policy("policy.yaml", &policy_a());
    guard.apply();
    let a = guard.snapshot().canonical();
    guard.write_policy("policy.yaml", &policy_b());
    let started = Instant::now();
    let out = guard.run_expect(&["apply", "--yes", "--confirm-timeout", CONFIRM_WINDOW], 0);
    assert_contains(
        &out.stderr,
        "nodeport-guard confirm",
        "apply explains the confirmation",
    );
    let b = guard.snapshot().canonical();
    assert!(a != b, "B must differ from A");
    behaves_like_b(&lab, "before the deadline");
    let status = guard.run_expect(&["status"], 0);
    assert_contains(
        &status.stdout,
        "waiting for `nodeport-guard confirm`",
        "status",
    );
    let out = guard.run_expect(&["apply", "--yes"], 1);
    assert_contains(
        &out.stderr,
        "waiting for `nodeport-guard confirm`",
        "apply while pending",
    );

    let rolled_back =
        support::wait_until(SETTLE_TIMEOUT, POLL, || guard.snapshot().canonical() == a);
    assert!(
        rolled_back,
        "not rolled back {:?} after the apply:\n{}\nstate directory:\n{}",
        started.elapsed(),
        a.diff(&guard.snapshot().canonical()),
        state_dir_report(&guard)
    );
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "rolled back too early: {:?}",
        started.elapsed()
    );
    behaves_like_a(&lab, "after the rollback");

    let out = guard.run_expect(&["confirm"], 1);
    assert_contains(&out.stderr, "rolled back", "confirm after the rollback");
    // Version A was in the kernel as applied: nothing had drifted before the apply.
    assert!(
        !out.stderr.contains("another program had changed them"),
        "a rollback to what was applied is not drift: {}",
        out.stderr
    );
    // `status` names the rules that are back in its table, says that the kernel no longer holds
    // what the policy files (version B) say, and that the apply was rolled back.
    let status = guard.run_expect(&["status"], 0);
    let table: String = status
        .stdout
        .lines()
        .take_while(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    assert_contains(&table, "guard-nodeport", "status after the rollback");
    assert!(
        !table.contains("guard-host-service"),
        "status after the rollback names the rules that went:\n{}",
        status.stdout
    );
    assert_contains(&status.stdout, "Out of sync", "status after the rollback");
    assert_contains(
        &status.stdout,
        "was rolled back",
        "status after the rollback",
    );
    let code = guard.run(&["status", "--detailed-exitcode"]).status.code();
    assert_eq!(code, Some(2), "the kernel differs from the policy files");
}
backend_tests!(unconfirmed_apply_rolls_back_to_the_previous_rules);

/// `apply --confirm-timeout 4` followed by `confirm` in time: `confirm`
/// exits 0, the rollback watcher is gone, and the new rules (B) are still
/// in force, in rules and behaviour, well past the deadline.
fn confirmed_apply_keeps_the_new_rules_past_the_deadline(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("policy.yaml", &policy_a());
    guard.apply();
    guard.write_policy("policy.yaml", &policy_b());
    guard.run_expect(&["apply", "--yes", "--confirm-timeout", CONFIRM_WINDOW], 0);
    let deadline =
        Instant::now() + Duration::from_secs(CONFIRM_WINDOW.parse().expect("a number of seconds"));
    let b = guard.snapshot().canonical();
    let watcher = watcher_pid(&guard);

    let out = guard.run_expect(&["confirm"], 0);
    assert_contains(&out.stdout, "Confirmed", "confirm output");
    assert!(
        support::wait_until(SETTLE_TIMEOUT, POLL, || process_gone(watcher)),
        "the rollback watcher (pid {watcher}) is still running after confirm"
    );
    // Watch the rules until well past the deadline: they must not change.
    let watch_until = deadline + Duration::from_secs(2);
    let changed = support::wait_until(watch_until - Instant::now(), POLL, || {
        guard.snapshot().canonical() != b
    });
    assert!(
        !changed,
        "the confirmed rules changed:\n{}",
        b.diff(&guard.snapshot().canonical())
    );
    behaves_like_b(&lab, "after the deadline");
    guard.run_expect(&["confirm"], 1);
}
backend_tests!(confirmed_apply_keeps_the_new_rules_past_the_deadline);

/// Policy A applied, then B applied with a confirm window: the kernel's rules of each
/// (canonical), B's now in force.
fn b_in_a_confirm_window_after_a(guard: &Guard<'_>) -> (Snapshot, Snapshot) {
    guard.write_policy("policy.yaml", &policy_a());
    guard.apply();
    let a = guard.snapshot().canonical();
    guard.write_policy("policy.yaml", &policy_b());
    guard.run_expect(&["apply", "--yes", "--confirm-timeout", CONFIRM_WINDOW], 0);
    (a, guard.snapshot().canonical())
}

/// A daemon started during an apply's confirm window waits for it: the
/// rollback comes at the deadline (not when the daemon stops, which used to
/// take every rule with it), then the daemon applies the policy files (B)
/// and, stopped, leaves them in place.
fn a_daemon_started_in_a_confirm_window_waits_for_it(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let (_, b) = b_in_a_confirm_window_after_a(&guard);
    let daemon = guard.spawn(&["run"], "daemon.log");
    // The rollback itself may stand for only a moment before the daemon applies the files
    // again: its record says it came.
    let record = guard.state_dir().join("last-rollback.json");
    let rolled_back = support::wait_until(SETTLE_TIMEOUT, POLL, || {
        std::fs::read_to_string(&record)
            .is_ok_and(|text| text.contains("was not confirmed in time and was rolled back"))
    });
    assert!(
        rolled_back,
        "not rolled back at the deadline with a daemon waiting:\nstate directory:\n{}\ndaemon log:\n{}",
        state_dir_report(&guard),
        daemon.log()
    );

    let applied_b = support::wait_until(SETTLE_TIMEOUT, POLL, || guard.snapshot().canonical() == b);
    assert!(
        applied_b,
        "the daemon did not apply the files after the rollback:\n{}",
        daemon.log()
    );
    let log = daemon.log();
    let (Some(waiting), Some(starting)) = (
        log.find("waiting for `nodeport-guard confirm`"),
        log.find("daemon starting"),
    ) else {
        panic!("the daemon did not say it waits, then start:\n{log}");
    };
    assert!(waiting < starting, "{log}");
    assert_contains(
        &daemon.log(),
        "waiting for `nodeport-guard confirm`",
        "the daemon says why it waits",
    );
    let mut daemon = daemon;
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(10));
    assert!(status.is_some_and(|status| status.success()), "{status:?}");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        guard.snapshot().canonical() == b,
        "the rules changed after the daemon stopped:\n{}",
        b.diff(&guard.snapshot().canonical())
    );
    behaves_like_b(&lab, "after the daemon stopped");
}
backend_tests!(a_daemon_started_in_a_confirm_window_waits_for_it);

/// A confirm window whose rollback watcher was killed is still kept: past
/// the deadline, `confirm` comes too late (exit 1), and the previous rules
/// (A) are back; the next `apply` is not blocked.
fn a_confirm_window_whose_watcher_was_killed_still_rolls_back(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let (a, _) = b_in_a_confirm_window_after_a(&guard);
    let watcher = watcher_pid(&guard);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(watcher).expect("a pid")),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(support::wait_until(SETTLE_TIMEOUT, POLL, || process_gone(
        watcher
    )));
    std::thread::sleep(Duration::from_secs(
        CONFIRM_WINDOW.parse::<u64>().expect("a number of seconds") + 1,
    ));
    let out = guard.run_expect(&["confirm"], 1);
    assert_contains(&out.stderr, "too late", "confirm after the deadline");
    assert!(
        guard.snapshot().canonical() == a,
        "A is not back:\n{}",
        a.diff(&guard.snapshot().canonical())
    );
    behaves_like_a(&lab, "after the late rollback");
    guard.apply();
    behaves_like_b(&lab, "after the next apply");
}
backend_tests!(a_confirm_window_whose_watcher_was_killed_still_rolls_back);

/// `plan --out FILE` saves a plan without changing the kernel, and
/// `apply --yes FILE` applies exactly it, also when traffic has moved
/// the counters of the rules in between (counters are not drift).
fn saved_plan_applies_what_was_planned(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("policy.yaml", &policy_a());
    guard.apply();
    let a = guard.snapshot();

    guard.write_policy("policy.yaml", &policy_b());
    let plan = guard.path("b.plan");
    let plan = plan.to_str().expect("utf-8 path");
    guard.run_expect(&["plan", "--out", plan], 0);
    assert_same_state(
        &a,
        &guard.snapshot(),
        "plan --out must not change the kernel",
    );
    behaves_like_a(&lab, "traffic between plan and apply");

    guard.run_expect(&["apply", "--yes", plan], 0);
    behaves_like_b(&lab, "after applying the saved plan");
    let (code, out) = guard.plan_detailed();
    assert_eq!(
        code, 0,
        "the saved plan brought the kernel to the policies: {out}"
    );
}
backend_tests!(saved_plan_applies_what_was_planned);

/// A saved plan is refused with "stale plan" (exit 1, kernel unchanged)
/// when the kernel's rules changed after it was made: when one of our
/// chains was flushed, and when another apply ran in between.
fn saved_plan_is_refused_as_stale_when_the_kernel_changed(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("policy.yaml", &policy_a());
    guard.apply();
    guard.write_policy("policy.yaml", &policy_b());
    let plan = guard.path("b.plan");
    let plan = plan.to_str().expect("utf-8 path");
    guard.run_expect(&["plan", "--out", plan], 0);

    let chain = mangle_chain(&guard, "npg-pi-");
    iptables(&lab, Family::V4, &format!("-t mangle -F {chain}"));
    let drifted = guard.snapshot();
    let out = guard.run_expect(&["apply", "--yes", plan], 1);
    assert_contains(&out.stderr, "stale plan", "flushed chain");
    assert_same_state(&drifted, &guard.snapshot(), "after a refused stale plan");

    guard.write_policy("policy.yaml", &policy_a());
    guard.apply();
    guard.write_policy("policy.yaml", &policy_b());
    guard.run_expect(&["plan", "--out", plan], 0);
    guard.apply();
    let applied = guard.snapshot();
    let out = guard.run_expect(&["apply", "--yes", plan], 1);
    assert_contains(&out.stderr, "stale plan", "another apply in between");
    assert_same_state(&applied, &guard.snapshot(), "after a refused stale plan");
}
backend_tests!(
    saved_plan_is_refused_as_stale_when_the_kernel_changed,
    iptables_only
);

/// A saved plan is refused with "stale plan" (exit 1, kernel unchanged)
/// when the policy files changed after it was made: an edited file, and
/// a new file.
fn saved_plan_is_refused_as_stale_when_the_policies_changed(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    guard.write_policy("policy.yaml", &policy_a());
    let plan = guard.path("a.plan");
    let plan = plan.to_str().expect("utf-8 path");
    guard.run_expect(&["plan", "--out", plan], 0);
    let fresh = guard.snapshot();

    guard.write_policy(
        "policy.yaml",
        &policy_a().replace("198.51.100.12/32", "198.51.100.11/32"),
    );
    let out = guard.run_expect(&["apply", "--yes", plan], 1);
    assert_contains(&out.stderr, "stale plan", "edited policy file");
    assert_same_state(&fresh, &guard.snapshot(), "after a refused stale plan");

    guard.write_policy("policy.yaml", &policy_a());
    guard.run_expect(&["plan", "--out", plan], 0);
    guard.write_policy("b.yaml", &policy_b());
    let out = guard.run_expect(&["apply", "--yes", plan], 1);
    assert_contains(&out.stderr, "stale plan", "new policy file");
    assert_same_state(&fresh, &guard.snapshot(), "after a refused stale plan");
    behaves_unguarded(&lab, "nothing was applied");
}
backend_tests!(saved_plan_is_refused_as_stale_when_the_policies_changed);

/// With the native nftables backend an unconfirmed `apply
/// --confirm-timeout 4` rolls back as well: the new rules (B) are in force
/// at once, and then the kernel returns by itself to exactly the previous
/// tables (A), in rules and in behaviour; `confirm` then says the apply was
/// rolled back.
#[test]
fn unconfirmed_apply_rolls_back_with_native_nftables() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nft);
    let guard = Guard::new(&lab).native_nftables();
    guard.write_policy("policy.yaml", &policy_a());
    guard.apply();
    let a = nft_tables(&lab);
    guard.write_policy("policy.yaml", &policy_b());
    guard.run_expect(&["apply", "--yes", "--confirm-timeout", CONFIRM_WINDOW], 0);
    assert_ne!(nft_tables(&lab), a, "B must differ from A");
    behaves_like_b(&lab, "before the deadline");

    let rolled_back = support::wait_until(SETTLE_TIMEOUT, POLL, || nft_tables(&lab) == a);
    let out = guard.run_expect(&["confirm"], 1);
    assert!(
        rolled_back,
        "not rolled back ({}):\n--- A ---\n{a}--- now ---\n{}",
        out.stderr.trim(),
        nft_tables(&lab)
    );
    assert_contains(&out.stderr, "was rolled back", "confirm after the rollback");
    behaves_like_a(&lab, "after the rollback");
}

/// With the native nftables backend a foreign ACCEPT cannot open a guarded
/// port at all: an accept only ends its own base chain, and our base chain
/// still sees the packet. Neither an iptables-nft ACCEPT at the top of
/// mangle PREROUTING nor a foreign nft table accepting everything at a
/// priority before ours makes the NodePort reachable for the unlisted
/// client, and `plan` finds nothing to repair.
#[test]
fn foreign_accept_cannot_bypass_native_nftables() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nft);
    let guard = Guard::new(&lab).native_nftables();
    guard.write_policy("a.yaml", &policy_a());
    guard.apply();
    iptables(
        &lab,
        Family::V4,
        "-t mangle -I PREROUTING 1 -m comment --comment other-tool -j ACCEPT",
    );
    lab.node().exec_with_stdin(
        "nft",
        &["-f", "-"],
        b"add table ip other_tool\n\
          add chain ip other_tool early { type filter hook prerouting priority -400; policy accept; }\n\
          add rule ip other_tool early accept\n",
    )
    .expect_success();
    behaves_like_a(&lab, "with foreign accepts before our base chain");
    let (code, out) = guard.plan_detailed();
    assert_eq!(code, 0, "{out}");
}

/// Everything any backend holds: both iptables flavours in both families, the ipsets they
/// share, and nftables' ruleset.
fn every_backend(lab: &Lab) -> String {
    let node = lab.node();
    let mut text = String::new();
    for program in [
        "iptables-legacy-save",
        "ip6tables-legacy-save",
        "iptables-nft-save",
        "ip6tables-nft-save",
    ] {
        text += &node.exec_ok(program, &[] as &[&str]);
    }
    text += &node.exec_ok("ipset", &["save"]);
    text += &node.exec_ok("nft", &["list", "ruleset"]);
    text
}

/// A host switched from one backend to another still holds the first one's rules, and they
/// still filter. `cleanup` removes ours from every backend, whichever it is told to use; the
/// two iptables backends share the ipsets, which a rule of either keeps from being destroyed
/// (before, every cleanup failed on `destroy`, and the rules of both stayed).
#[test]
fn cleanup_removes_ours_from_every_backend() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nft);
    let state = tempfile::tempdir().expect("state directory");
    let guard = |backend| {
        Guard::new(&lab)
            .with_backend(backend)
            .with_state_dir(state.path())
    };
    let before = guard("iptables-nft").snapshot();
    let nft_before = nft_ruleset(&lab);
    // An apply with a confirm window leaves the other backends' rules alone (a rollback could
    // not put them back), so all three keep theirs.
    for backend in ["iptables-legacy", "nftables", "iptables-nft"] {
        let guard = guard(backend);
        guard.write_policy("a.yaml", &policy_a());
        guard.run_expect(&["apply", "--yes", "--confirm-timeout", "600"], 0);
        guard.run_expect(&["confirm"], 0);
    }
    let applied = every_backend(&lab);
    for (what, held) in [
        ("iptables-legacy", ":npg-PREROUTING"),
        ("an ipset", "create npg4-"),
        ("nftables", "table ip nodeport_guard"),
    ] {
        assert!(
            applied.contains(held),
            "{what} holds nothing of ours:\n{applied}"
        );
    }

    let guard = guard("iptables-nft");
    let out = guard.cleanup();
    for backend in ["In iptables-legacy:", "In nftables:", "In iptables-nft:"] {
        assert_contains(&out.stdout, backend, "cleanup names each backend");
    }
    let ours: Vec<String> = every_backend(&lab)
        .lines()
        .filter(|line| line.contains("npg") || line.contains("nodeport_guard"))
        .map(str::to_owned)
        .collect();
    assert!(ours.is_empty(), "left after cleanup: {ours:#?}");
    assert_contains(
        &guard.cleanup().stdout,
        "Nothing to clean up",
        "a second cleanup",
    );
    // What other programs hold is as it was.
    assert_same_state(&before, &guard.snapshot(), "state after cleanup");
    let nft_after = nft_ruleset(&lab);
    assert!(
        nft_before == nft_after,
        "nft list ruleset after cleanup differs from before:\n{}",
        similar::TextDiff::from_lines(&nft_before, &nft_after).unified_diff()
    );
}

/// Policy set A with `count` more sources in 203.0.113.0/24 (the sources become an ipset).
fn whitelist_of(count: u8) -> String {
    let more = (0..count).map(|at| format!("203.0.113.{at}/32"));
    Whitelist::mission()
        .name("guard-nodeport")
        .nets(std::iter::once(format!("{}/32", addr::CLIENT_V4[0])).chain(more))
        .port(ports::NODEPORT)
        .yaml()
}

/// Switching backends: `plan` shows the rules the old backend still holds, and `apply` with
/// the new one removes them once its own write stands, even when the policies changed in
/// between so that the new backend no longer wants a set the old one's rules refer to
/// (before, that apply failed on `destroy` and rolled back, every time).
#[test]
fn apply_on_another_backend_removes_the_first_one_s_rules() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nft);
    let state = tempfile::tempdir().expect("state directory");
    let legacy = Guard::new(&lab)
        .with_backend("iptables-legacy")
        .with_state_dir(state.path());
    legacy.write_policy("a.yaml", &whitelist_of(20));
    legacy.apply();
    let sets_before = Snapshot::take(&lab).set_names();

    let nft = Guard::new(&lab)
        .with_backend("iptables-nft")
        .with_state_dir(state.path());
    nft.write_policy("a.yaml", &whitelist_of(0));
    let out = nft.run_expect(&["status", "--detailed-exitcode"], 2);
    assert_contains(&out.stdout, "also in iptables-legacy", "status");
    let (code, out) = nft.plan_detailed();
    assert_eq!(code, 2, "{out}");
    assert_contains(
        &out.stdout,
        "In iptables-legacy, rules of nodeport-guard",
        "plan",
    );
    // With a confirm window the old rules stay (a rollback could not put them back), and the
    // set they refer to stays with them: the apply does not fail on it.
    let out = nft.run_expect(&["apply", "--yes", "--confirm-timeout", "600"], 0);
    assert_contains(
        &out.stderr,
        "rules of nodeport-guard in iptables-legacy (from before a switch of backend) still filter",
        "apply with a confirm window",
    );
    nft.run_expect(&["confirm"], 0);
    let still = lab.node().exec_ok("iptables-legacy-save", &[] as &[&str]);
    assert!(
        still.contains("npg"),
        "iptables-legacy holds ours still:\n{still}"
    );
    let out = nft.apply();
    assert_contains(
        &out.stdout,
        "Removed the rules of nodeport-guard from iptables-legacy.",
        "apply",
    );
    let legacy_rules = lab.node().exec_ok("iptables-legacy-save", &[] as &[&str])
        + &lab.node().exec_ok("ip6tables-legacy-save", &[] as &[&str]);
    assert!(
        !legacy_rules.contains("npg"),
        "iptables-legacy still holds ours:\n{legacy_rules}"
    );
    let sets_after = Snapshot::take(&lab).set_names();
    assert!(
        sets_before.iter().any(|set| !sets_after.contains(set)),
        "a set only the old rules used is gone: {sets_before:?} then {sets_after:?}"
    );
    let (code, out) = nft.plan_detailed();
    assert_eq!(code, 0, "{out}");
    nft.run_expect(&["status", "--detailed-exitcode"], 0);
    behaves_like_a(&lab, "after the switch");
}
