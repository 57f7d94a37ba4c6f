//! The commands that read or change the kernel: `plan`, `apply`, `confirm`, `cleanup` and
//! `status`, and the watcher that rolls back an unconfirmed apply.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};

use crate::app::{Settings, compile_policies, compile_policies_for, load_policies};
use crate::compile::Compiled;
use crate::config::BackendChoice;
use crate::dataplane::{Backend, Dataplane, SystemRunner, detect};
use crate::facts::HostFacts;
use crate::model::IpFamily;
use crate::plan::{self, Plan, Style};
use crate::reconcile;
use crate::ruleset::Ruleset;
use crate::state::{self, State};
use crate::system::host::host_facts;
use crate::system::runtime::{
    AppliedIndex, OriginEntry, PendingApply, RollbackRecord, StateDir, now_seconds,
};

/// The backend to use, detected when `auto`.
pub fn resolve_backend(choice: BackendChoice, runner: &SystemRunner) -> Result<Backend> {
    match choice {
        BackendChoice::IptablesLegacy => Ok(Backend::IptablesLegacy),
        BackendChoice::IptablesNft => Ok(Backend::IptablesNft),
        BackendChoice::Nftables => Ok(Backend::Nftables),
        BackendChoice::Auto => {
            let (backend, reason) = detect::detect(runner);
            tracing::info!(%backend, reason, "backend chosen");
            Ok(backend)
        }
    }
}

/// The families a ruleset programs.
pub fn families(ruleset: &Ruleset) -> Vec<IpFamily> {
    ruleset
        .families
        .iter()
        .map(|family| family.family)
        .collect()
}

/// The desired state of a ruleset for a backend.
pub fn desired_state(ruleset: &Ruleset, backend: Backend) -> State {
    match backend {
        Backend::IptablesLegacy | Backend::IptablesNft => state::desired_iptables(ruleset),
        Backend::Nftables => state::desired_nft(ruleset),
    }
}

/// Which kernel rules carry which policy rule's verdict.
pub fn origin_index(ruleset: &Ruleset, backend: Backend) -> AppliedIndex {
    let mut origins = Vec::new();
    for (family, table, chain) in ruleset.chains() {
        for rule in &chain.rules {
            if let Some(origin) = &rule.origin {
                let rendered = match backend {
                    Backend::Nftables => {
                        crate::render::nft::render_rule(table, &chain.name, rule, family)
                    }
                    Backend::IptablesLegacy | Backend::IptablesNft => {
                        crate::render::iptables::render_rule(table, &chain.name, rule, family)
                    }
                };
                origins.push(OriginEntry {
                    family,
                    table,
                    chain: chain.name.clone(),
                    hash: rendered.hash,
                    origin: origin.clone(),
                });
            }
        }
    }
    AppliedIndex {
        applied_at: now_seconds(),
        origins,
    }
}

/// A plan saved by `plan --out`.
#[derive(Debug, Serialize, Deserialize)]
pub struct SavedPlan {
    /// Format version.
    pub format: u32,
    /// The backend the plan was made for.
    pub backend: Backend,
    /// The families it programs.
    pub families: Vec<IpFamily>,
    /// Fingerprint of what the kernel held when the plan was made.
    pub observed: String,
    /// Fingerprint of the policy files the plan was made from.
    pub policies: String,
    /// The state to apply.
    pub desired: State,
    /// Where the policies were read from.
    pub policies_dir: String,
    /// Which kernel rules carry which policy rule's verdict.
    pub index: AppliedIndex,
}

struct Prepared {
    compiled: Compiled,
    policies_fingerprint: String,
    backend: Backend,
    desired: State,
}

fn prepare_for(settings: &Settings, backend: Backend, facts: &HostFacts) -> Option<Prepared> {
    let (set, compiled) = compile_policies_for(settings, facts)?;
    let desired = desired_state(&compiled.ruleset, backend);
    Some(Prepared {
        compiled,
        policies_fingerprint: set.fingerprint,
        backend,
        desired,
    })
}

/// The backend to use. When it cannot be told, the policies are checked first: broken policy
/// files are what the operator must see first (`Ok(None)` after their diagnostics), and only
/// valid ones let the backend's error through.
fn backend_after_policies(
    settings: &Settings,
    runner: &SystemRunner,
    facts: &HostFacts,
) -> Result<Option<Backend>> {
    match resolve_backend(settings.backend, runner) {
        Ok(backend) => Ok(Some(backend)),
        Err(error) => match compile_policies_for(settings, facts) {
            None => Ok(None),
            Some(_) => Err(error),
        },
    }
}

/// [`prepare_for`] with the backend resolved first (see [`backend_after_policies`]).
fn prepare(settings: &Settings, runner: &SystemRunner) -> Result<Option<Prepared>> {
    let facts = host_facts(&settings.config);
    let Some(backend) = backend_after_policies(settings, runner, &facts)? else {
        return Ok(None);
    };
    Ok(prepare_for(settings, backend, &facts))
}

/// What the kernel held, read while the policies compiled.
type Observed = Result<State, crate::dataplane::DataplaneError>;

/// Compiles the policies (printing their diagnostics) while another thread reads what the
/// kernel holds: neither needs the other, and together they are most of the time `plan` and
/// `apply` take. The kernel's answer is only looked at once the policies are known to be valid;
/// `None` when they are not.
fn prepare_observing(
    settings: &Settings,
    runner: &SystemRunner,
) -> Result<Option<(Prepared, Observed)>> {
    let facts = host_facts(&settings.config);
    let Some(backend) = backend_after_policies(settings, runner, &facts)? else {
        return Ok(None);
    };
    let dataplane = Dataplane {
        backend,
        runner,
        families: facts.families(),
        state_dir: settings.state_dir.clone(),
    };
    Ok(std::thread::scope(|scope| {
        let observing = scope.spawn(|| dataplane.observe());
        let prepared = prepare_for(settings, backend, &facts);
        let observed = observing
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        prepared.map(|prepared| (prepared, observed))
    }))
}

fn style() -> Style {
    Style {
        color: std::io::stdout().is_terminal(),
        max_members: 20,
    }
}

fn print_plan(plan: &Plan) {
    let mut stdout = std::io::stdout().lock();
    let _ = write!(stdout, "{}", plan::render(plan, style()));
    let _ = writeln!(stdout, "{}", plan.summary().line());
}

/// `plan`.
pub fn plan_command(
    settings: &Settings,
    detailed: bool,
    json: bool,
    out: Option<&Path>,
) -> Result<ExitCode> {
    let runner = SystemRunner;
    let Some((prepared, observed)) = prepare_observing(settings, &runner)? else {
        return Ok(ExitCode::from(1));
    };
    let dataplane = Dataplane {
        backend: prepared.backend,
        runner: &runner,
        families: families(&prepared.compiled.ruleset),
        state_dir: settings.state_dir.clone(),
    };
    let observed = observed?;
    let changes = plan::plan(&prepared.desired, &observed);
    if json {
        let warnings: Vec<String> = prepared
            .compiled
            .warnings
            .iter()
            .map(|warning| warning.message.clone())
            .collect();
        let value = serde_json::json!({
            "backend": prepared.backend,
            "summary": changes.summary(),
            "changes": !changes.is_empty(),
            "warnings": warnings,
            "plan": changes,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if changes.is_empty() {
        println!("No changes: the kernel holds exactly what the policies say.");
    } else {
        print_plan(&changes);
    }
    if let Some(path) = out {
        let saved = SavedPlan {
            format: 1,
            backend: prepared.backend,
            families: dataplane.families.clone(),
            observed: observed.fingerprint(),
            policies: prepared.policies_fingerprint,
            index: origin_index(&prepared.compiled.ruleset, prepared.backend),
            desired: prepared.desired,
            policies_dir: settings.config.policies_dir.display().to_string(),
        };
        fs_err::write(path, serde_json::to_vec_pretty(&saved)?)?;
        eprintln!(
            "Saved the plan to `{}`; apply it with `nodeport-guard apply {}`.",
            path.display(),
            path.display()
        );
    }
    Ok(if detailed && !changes.is_empty() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// Asks on the terminal, or refuses when stdin is not one and `yes` was not given.
fn confirm_interactively(question: &str, yes: bool) -> Result<bool> {
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        bail!("refusing to change the firewall without `--yes`: stdin is not a terminal to ask on");
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// `apply`.
pub fn apply_command(
    settings: &Settings,
    yes: bool,
    confirm_timeout: Option<u64>,
    plan_file: Option<&Path>,
) -> Result<ExitCode> {
    let runner = SystemRunner;
    let state_dir = StateDir::new(&settings.state_dir);
    // Taken first so that the kernel can be read (under the lock) while the policies compile;
    // a failure is reported where it always was, after the policies' diagnostics.
    let lock = state_dir.lock("nodeport-guard apply", false);
    let mut observed_early = None;
    let (backend, families, desired, index, expected_observed) = match plan_file {
        Some(path) => {
            let saved: SavedPlan =
                serde_json::from_slice(&fs_err::read(path)?).with_context(|| {
                    format!("`{}` is not a plan saved by `plan --out`", path.display())
                })?;
            let set = load_policies(std::slice::from_ref(&settings.config.policies_dir));
            if set.fingerprint != saved.policies {
                bail!(
                    "stale plan: the policy files in `{}` changed since the plan was made; make a new plan",
                    settings.config.policies_dir.display()
                );
            }
            (
                saved.backend,
                saved.families,
                saved.desired,
                saved.index,
                Some(saved.observed),
            )
        }
        None => {
            let prepared = if lock.is_ok() {
                prepare_observing(settings, &runner)?.map(|(prepared, observed)| {
                    observed_early = Some(observed);
                    prepared
                })
            } else {
                prepare(settings, &runner)?
            };
            let Some(prepared) = prepared else {
                return Ok(ExitCode::from(1));
            };
            let families = families(&prepared.compiled.ruleset);
            let index = origin_index(&prepared.compiled.ruleset, prepared.backend);
            (prepared.backend, families, prepared.desired, index, None)
        }
    };
    let _lock = lock?;
    if let Some(pending) = state_dir.pending()? {
        bail!(
            "an earlier apply ({}) is waiting for `nodeport-guard confirm`; confirm it or let it roll back first",
            pending.id
        );
    }
    let dataplane = Dataplane {
        backend,
        runner: &runner,
        families: families.clone(),
        state_dir: settings.state_dir.clone(),
    };
    let observed = match observed_early {
        Some(observed) => observed?,
        None => dataplane.observe()?,
    };
    if let Some(expected) = expected_observed
        && observed.fingerprint() != expected
    {
        bail!("stale plan: the kernel's rules changed since the plan was made; make a new plan");
    }
    let changes = plan::plan(&desired, &observed);
    if changes.is_empty() {
        println!("No changes: the kernel holds exactly what the policies say.");
        record_applied(&state_dir, &index);
        return Ok(ExitCode::SUCCESS);
    }
    print_plan(&changes);
    if !confirm_interactively("Apply these changes?", yes)? {
        eprintln!("Nothing was changed.");
        return Ok(ExitCode::from(1));
    }
    // With a confirm window, the way back is written down before anything changes, so an
    // interrupted apply can still be rolled back.
    let pending = match confirm_timeout {
        Some(seconds) => Some(
            record_pending(&state_dir, backend, families, observed.clone(), seconds)
                .with_context(|| {
                    format!(
                        "refusing `--confirm-timeout`: the way back cannot be written to the state directory `{}`, so no rollback could be promised; nothing was changed (use a writable `--state-dir`, or apply without `--confirm-timeout`)",
                        state_dir.path().display()
                    )
                })?,
        ),
        None => None,
    };
    let outcome = match reconcile::apply_against(&dataplane, &desired, observed) {
        Ok(outcome) => outcome,
        Err(error) => {
            state_dir.clear_pending().ok();
            return Err(error.into());
        }
    };
    record_applied(&state_dir, &index);
    println!("Applied in {} ms.", outcome.elapsed.as_millis());
    if let Some(pending) = pending
        && let Err(error) = start_watcher(&state_dir, pending)
    {
        // Without a watcher nothing would roll back: undo now rather than leave a promise
        // that cannot be kept.
        let restored = reconcile::restore(&dataplane, &outcome.before);
        state_dir.clear_pending().ok();
        return Err(match restored {
            Ok(()) => error.context("the previous rules were restored"),
            Err(restore) => error.context(format!(
                "restoring the previous rules failed too: {restore}"
            )),
        });
    }
    Ok(ExitCode::SUCCESS)
}

/// Records which kernel rules carry which policy rule; a state directory that cannot be written
/// does not stop an apply, but the operator hears about it.
fn record_applied(state_dir: &StateDir, index: &AppliedIndex) {
    if let Err(error) = state_dir.set_applied(index) {
        tracing::warn!(
            dir = %state_dir.path().display(),
            "cannot write the state directory, so `status` cannot name the policy rules of the counters: {error:#}"
        );
    }
}

fn record_pending(
    state_dir: &StateDir,
    backend: Backend,
    families: Vec<IpFamily>,
    previous: State,
    seconds: u64,
) -> Result<PendingApply> {
    let seed = format!(
        "{}-{}-{}",
        std::process::id(),
        now_seconds(),
        previous.fingerprint()
    );
    let id = crate::compile::names::hash(&seed)[..12].to_owned();
    let pending = PendingApply {
        id,
        backend,
        families,
        deadline: now_seconds() + seconds,
        watcher_pid: None,
        previous,
        previous_index: state_dir.applied().ok().flatten(),
    };
    state_dir.set_pending(&pending)?;
    Ok(pending)
}

fn start_watcher(state_dir: &StateDir, mut pending: PendingApply) -> Result<()> {
    use std::os::unix::process::CommandExt as _;
    let exe = std::env::current_exe()
        .context("cannot find this program to start the rollback watcher")?;
    let child = std::process::Command::new(exe)
        .arg("--state-dir")
        .arg(state_dir.path())
        .arg("__rollback-watch")
        .arg(&pending.id)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        // Its own process group: Ctrl-C on this terminal must not stop the rollback.
        .process_group(0)
        .spawn()
        .context("cannot start the rollback watcher")?;
    pending.watcher_pid = Some(child.id());
    state_dir.set_pending(&pending)?;
    eprintln!(
        "Run `nodeport-guard confirm` within {} s to keep these rules; otherwise the previous rules come back.",
        pending.deadline.saturating_sub(now_seconds())
    );
    Ok(())
}

/// `confirm`.
pub fn confirm_command(settings: &Settings) -> Result<ExitCode> {
    let state_dir = StateDir::new(&settings.state_dir);
    let _lock = state_dir.lock("nodeport-guard confirm", true)?;
    let Some(pending) = state_dir.pending()? else {
        match state_dir.last_rollback()? {
            Some(record) => eprintln!(
                "error: no apply is waiting for confirmation; the last one ({}) {}",
                record.id, record.outcome
            ),
            None => eprintln!("error: no apply is waiting for confirmation"),
        }
        return Ok(ExitCode::from(1));
    };
    state_dir.clear_pending()?;
    if let Some(pid) = pending.watcher_pid {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    state_dir
        .set_last_rollback(&RollbackRecord {
            id: pending.id.clone(),
            at: now_seconds(),
            outcome: "was confirmed".to_owned(),
        })
        .ok();
    println!("Confirmed: the new rules stay.");
    Ok(ExitCode::SUCCESS)
}

/// The hidden `__rollback-watch` command: waits for the deadline, then restores the previous
/// rules unless the apply was confirmed.
pub fn rollback_watch(state_dir: &Path, id: &str) -> Result<ExitCode> {
    let state_dir = StateDir::new(state_dir);
    let Some(pending) = state_dir.pending()? else {
        return Ok(ExitCode::SUCCESS);
    };
    if pending.id != id {
        return Ok(ExitCode::SUCCESS);
    }
    let wait = pending.deadline.saturating_sub(now_seconds());
    // A hang-up of the terminal that started us must not cancel the rollback.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let sleep = tokio::time::sleep(Duration::from_secs(wait));
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => break,
                _ = async { match hangup.as_mut() { Some(signal) => { signal.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
        }
    });
    // A rollback is the promise of `--confirm-timeout`: a failure that may pass (another
    // program holding the lock or writing the same tables) is tried again before it is given up
    // and recorded where `confirm` and `status` show it.
    let mut last_error = None;
    for attempt in 1..=ROLLBACK_ATTEMPTS {
        match roll_back(&state_dir, id) {
            Ok(()) => return Ok(ExitCode::SUCCESS),
            Err(error) => {
                last_error = Some(error);
                if attempt < ROLLBACK_ATTEMPTS {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    }
    let error = last_error.unwrap_or_else(|| anyhow::anyhow!("no attempt was made"));
    let _ = state_dir.clear_pending();
    state_dir.set_last_rollback(&RollbackRecord {
        id: id.to_owned(),
        at: now_seconds(),
        outcome: format!(
            "was not confirmed in time; rolling it back failed {ROLLBACK_ATTEMPTS} times: {error:#}"
        ),
    })?;
    Err(error)
}

/// How often the rollback watcher tries to put the previous rules back.
const ROLLBACK_ATTEMPTS: u32 = 5;

/// One attempt of the rollback watcher: under the lock, puts back the rules from before the
/// pending apply `id`, unless it was confirmed (or replaced) meanwhile.
fn roll_back(state_dir: &StateDir, id: &str) -> Result<()> {
    let _lock = state_dir.lock("nodeport-guard rollback", true)?;
    let Some(pending) = state_dir.pending()? else {
        return Ok(());
    };
    if pending.id != id {
        return Ok(());
    }
    let runner = SystemRunner;
    let dataplane = Dataplane {
        backend: pending.backend,
        runner: &runner,
        families: pending.families.clone(),
        state_dir: state_dir.path().to_path_buf(),
    };
    reconcile::restore(&dataplane, &pending.previous)?;
    // `status` names the counters of the rules that are back, not of the ones that went.
    match &pending.previous_index {
        Some(index) => record_applied(state_dir, index),
        None => {
            let _ = state_dir.clear_applied();
        }
    }
    state_dir.clear_pending()?;
    state_dir.set_last_rollback(&RollbackRecord {
        id: id.to_owned(),
        at: now_seconds(),
        outcome: "was not confirmed in time and was rolled back".to_owned(),
    })?;
    Ok(())
}

/// `cleanup`.
pub fn cleanup_command(settings: &Settings, yes: bool) -> Result<ExitCode> {
    let runner = SystemRunner;
    let state_dir = StateDir::new(&settings.state_dir);
    let backend = resolve_backend(settings.backend, &runner)?;
    let _lock = state_dir.lock("nodeport-guard cleanup", false)?;
    let dataplane = Dataplane {
        backend,
        runner: &runner,
        families: IpFamily::BOTH.to_vec(),
        state_dir: settings.state_dir.clone(),
    };
    let observed = dataplane.observe()?;
    let changes = plan::plan(&State::default(), &observed);
    if changes.is_empty() {
        println!("Nothing to clean up: nodeport-guard owns nothing in {backend}.");
        return Ok(ExitCode::SUCCESS);
    }
    print_plan(&changes);
    if !confirm_interactively("Remove all of these?", yes)? {
        eprintln!("Nothing was changed.");
        return Ok(ExitCode::from(1));
    }
    reconcile::apply_against(&dataplane, &State::default(), observed)?;
    state_dir.clear_pending().ok();
    println!("Removed every chain, jump and set of nodeport-guard.");
    Ok(ExitCode::SUCCESS)
}

/// One line of `status`.
#[derive(Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleStatus {
    /// Policy name.
    pub policy: String,
    /// Direction.
    pub direction: crate::model::Direction,
    /// Rule index.
    pub rule: usize,
    /// Packets matched (all families).
    pub packets: u64,
    /// Bytes matched (all families).
    pub bytes: u64,
}

/// Packets and bytes per policy rule: the counters of the kernel rules that carry each policy
/// rule's verdict, summed over families and tables.
pub fn rule_counters(observed: &State, index: &AppliedIndex) -> Vec<RuleStatus> {
    let mut totals: std::collections::BTreeMap<
        (String, crate::model::Direction, usize),
        (u64, u64),
    > = Default::default();
    for entry in &index.origins {
        let key = state::TableKey {
            family: entry.family,
            table: entry.table,
        };
        let counters = observed
            .tables
            .get(&key)
            .and_then(|table| table.chains.get(&entry.chain))
            .and_then(|rules| {
                rules
                    .iter()
                    .find(|rule| rule.hash.as_deref() == Some(entry.hash.as_str()))
            })
            .and_then(|rule| rule.counters)
            .unwrap_or_default();
        let total = totals
            .entry((
                entry.origin.policy.clone(),
                entry.origin.direction,
                entry.origin.rule_index,
            ))
            .or_default();
        total.0 += counters.packets;
        total.1 += counters.bytes;
    }
    totals
        .into_iter()
        .map(|((policy, direction, rule), (packets, bytes))| RuleStatus {
            policy,
            direction,
            rule,
            packets,
            bytes,
        })
        .collect()
}

/// `status`.
pub fn status_command(settings: &Settings, json: bool) -> Result<ExitCode> {
    let runner = SystemRunner;
    let state_dir = StateDir::new(&settings.state_dir);
    let backend = resolve_backend(settings.backend, &runner)?;
    let dataplane = Dataplane {
        backend,
        runner: &runner,
        families: IpFamily::BOTH.to_vec(),
        state_dir: settings.state_dir.clone(),
    };
    let observed = dataplane.observe()?;
    let index = match state_dir.applied()? {
        Some(index) => index,
        None => match compile_policies(settings) {
            Some((_, compiled)) => origin_index(&compiled.ruleset, backend),
            None => AppliedIndex::default(),
        },
    };
    let rows = rule_counters(&observed, &index);
    let daemon = state_dir.daemon_status()?;
    let pending = state_dir.pending()?;
    let last_rollback = state_dir.last_rollback().ok().flatten();
    if json {
        let value = serde_json::json!({
            "backend": backend,
            "rules": rows,
            "daemon": daemon,
            "pendingConfirmation": pending.map(|p| serde_json::json!({"id": p.id, "deadline": p.deadline})),
            "lastRollback": last_rollback,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut stdout = std::io::stdout().lock();
    let width = rows
        .iter()
        .map(|row| row.policy.len())
        .max()
        .unwrap_or(6)
        .max(6);
    writeln!(
        stdout,
        "{:width$}  {:9}  {:>4}  {:>12}  {:>14}",
        "POLICY", "DIRECTION", "RULE", "PACKETS", "BYTES"
    )?;
    for row in &rows {
        writeln!(
            stdout,
            "{:width$}  {:9}  {:>4}  {:>12}  {:>14}",
            row.policy,
            row.direction.to_string(),
            row.rule,
            row.packets,
            row.bytes
        )?;
    }
    if rows.is_empty() {
        writeln!(stdout, "(no policy rules are applied)")?;
    }
    if let Some(pending) = pending {
        writeln!(
            stdout,
            "\nAn apply is waiting for `nodeport-guard confirm` (rolled back {} s from now).",
            pending.deadline.saturating_sub(now_seconds())
        )?;
    }
    // A rollback that failed left rules in place that nobody confirmed: say so until the next.
    if let Some(record) = last_rollback.filter(|record| record.outcome.contains("failed")) {
        writeln!(
            stdout,
            "\nThe last unconfirmed apply ({}) {}.",
            record.id, record.outcome
        )?;
    }
    if let Some(daemon) = daemon {
        if let Some(line) = daemon.get("summary").and_then(|s| s.as_str()) {
            writeln!(stdout, "\nDaemon: {line}")?;
        }
        if let Some(errors) = daemon.get("lastErrors").and_then(|e| e.as_array()) {
            for error in errors {
                if let Some(text) = error.as_str() {
                    writeln!(stdout, "  {text}")?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
