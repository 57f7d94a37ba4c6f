//! `status`: what the kernel holds, read from the kernel. Per policy rule whether it is there
//! and its packets and bytes; whether that is what the policies say (and if not, what differs);
//! a pending confirmation, the last apply, confirmation or rollback; the daemon.

use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Result;
use serde_json::json;

use super::output::plural;
use crate::counters::{self, Presence, RuleCounter};
use crate::dataplane::{Backend, Host};
use crate::engine::{self, Compiling};
use crate::model::DEFAULT_TIER;
use crate::plan::{self, Plan};
use crate::settings::Settings;
use crate::state::State;
use crate::system::host::host_facts;
use crate::system::runtime::{
    ApplyRecord, PendingApply, RollbackRecord, StateDir, now_seconds, process_alive,
};

/// How the kernel compares with the policy files.
enum Comparison {
    /// It holds exactly what they say.
    Same,
    /// It differs: what `apply` would change.
    Differs(Plan),
    /// The files cannot be compiled, so nobody can tell.
    Unknown(String),
}

/// Everything `status` says.
pub(super) struct Report {
    backend: &'static dyn Backend,
    /// Whether the kernel holds anything of ours.
    applied: bool,
    rows: Vec<RuleCounter>,
    sync: Comparison,
    pending: Option<PendingApply>,
    last_apply: Option<ApplyRecord>,
    last_rollback: Option<RollbackRecord>,
    daemon: Option<serde_json::Value>,
    daemon_running: bool,
    /// The resources of the policy files that carry an expiry, and when they were read.
    expiring: Vec<crate::grants::Expiring>,
    now: jiff::Timestamp,
    /// The other backends that hold rules of ours (from before a switch of backend).
    others: Vec<&'static str>,
}

/// `status [--json] [--detailed-exitcode]`: with `--detailed-exitcode`, 0 in sync, 2 out of
/// sync, 1 when that cannot be told (the policy files are invalid or missing).
pub fn run(settings: &Settings, runner: &dyn Host, json: bool, detailed: bool) -> Result<ExitCode> {
    let state_dir = StateDir::new(&settings.state_dir);
    let engine = crate::engine::Engine::new(settings, runner);
    let backend = engine.backend();
    let observed = engine.observe()?;
    let mut report = gather(settings, backend, &observed, &state_dir)?;
    let leftovers = engine.leftovers();
    leftovers.warn_unread();
    report.others = leftovers
        .found
        .iter()
        .map(|leftover| leftover.dataplane.backend.name())
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        report.print(&mut std::io::stdout().lock())?;
    }
    Ok(match (&report.sync, detailed) {
        (_, false) => ExitCode::SUCCESS,
        (Comparison::Same, true) if report.others.is_empty() => ExitCode::SUCCESS,
        (Comparison::Same, true) => ExitCode::from(2),
        (Comparison::Differs(_), true) => ExitCode::from(2),
        (Comparison::Unknown(why), true) => {
            eprintln!("error: cannot tell whether the kernel is in sync: {why}");
            ExitCode::from(1)
        }
    })
}

pub(super) fn gather(
    settings: &Settings,
    backend: &'static dyn Backend,
    observed: &State,
    state_dir: &StateDir,
) -> Result<Report> {
    let compiling = engine::compile(settings, &host_facts(&settings.config));
    let sync = match &compiling {
        Compiling::Compiled(_, compiled) => {
            let changes = plan::plan(&backend.desired(&compiled.ruleset), observed);
            if changes.is_empty() {
                Comparison::Same
            } else {
                Comparison::Differs(changes)
            }
        }
        Compiling::Invalid(set) => {
            let errors = set.diagnostics.iter().filter(|d| d.is_error()).count();
            Comparison::Unknown(format!(
                "the policy files are invalid ({errors} error{}; `nodeport-guard validate` shows them)",
                plural(errors)
            ))
        }
        Compiling::MissingDirectory => Comparison::Unknown(format!(
            "the policy directory `{}` does not exist",
            settings.config.policies_dir.display()
        )),
    };
    // The rules the kernel holds, named by what was last applied; without that record, by
    // what the policy files would write, as far as the kernel holds it.
    let rows = match readable(state_dir.applied()) {
        Some(index) if !observed.is_empty() => counters::rule_counters(observed, &index),
        Some(_) => Vec::new(),
        None => match &compiling {
            Compiling::Compiled(_, compiled) => {
                let index = counters::origin_index(&compiled.ruleset, backend, now_seconds());
                counters::rule_counters(observed, &index)
                    .into_iter()
                    .filter(|row| row.in_kernel != Presence::No)
                    .collect()
            }
            _ => Vec::new(),
        },
    };
    let daemon = readable(state_dir.daemon_status());
    let daemon_running = daemon
        .as_ref()
        .and_then(|status| status.get("pid"))
        .and_then(serde_json::Value::as_u64)
        .and_then(|pid| u32::try_from(pid).ok())
        .is_some_and(process_alive);
    Ok(Report {
        backend,
        applied: !observed.is_empty(),
        rows,
        sync,
        pending: readable(state_dir.pending()),
        last_apply: state_dir.last_apply().ok().flatten(),
        last_rollback: state_dir.last_rollback().ok().flatten(),
        daemon,
        daemon_running,
        expiring: match &compiling {
            Compiling::Compiled(set, _) => crate::grants::expiring(set),
            _ => Vec::new(),
        },
        now: settings.load.now,
        others: Vec::new(),
    })
}

/// A record of the state directory, or none with a warning when it cannot be read: `status`
/// reads the kernel whatever a damaged record says.
fn readable<T>(record: Result<Option<T>>) -> Option<T> {
    record.unwrap_or_else(|error| {
        eprintln!("warning: {error:#}");
        None
    })
}

/// `2026-12-01T21:18:21Z (5s ago)`.
fn when(at: u64) -> String {
    let time = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(at));
    let ago = now_seconds().saturating_sub(at);
    let ago = humantime::format_duration(Duration::from_secs(ago));
    format!("{time} ({ago} ago)")
}

impl Report {
    pub(super) fn json(&self) -> serde_json::Value {
        let (in_sync, differences) = match &self.sync {
            Comparison::Same => (json!(self.others.is_empty()), serde_json::Value::Null),
            Comparison::Differs(changes) => (
                json!(false),
                json!({"summary": changes.summary(), "line": changes.summary().line(), "what": changes.describe()}),
            ),
            Comparison::Unknown(why) => (serde_json::Value::Null, json!({"unknown": why})),
        };
        let mut daemon = self.daemon.clone();
        if let Some(serde_json::Value::Object(fields)) = &mut daemon {
            fields.insert("running".to_owned(), json!(self.daemon_running));
        }
        super::output::json_document(
            "Status",
            json!({
                "backend": self.backend.name(),
                "applied": self.applied,
                "inSync": in_sync,
                "differences": differences,
                "rules": self.rows,
                "daemon": daemon,
                "pendingConfirmation": self.pending.as_ref().map(|p| json!({"id": p.id, "deadline": p.deadline})),
                "lastApply": self.last_apply,
                "lastRollback": self.last_rollback,
                "expiring": super::grants::list_json(&self.expiring, self.now)["items"],
                "otherBackends": self.others,
            }),
        )
    }

    pub(super) fn print(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        print_table(out, &self.rows)?;
        writeln!(out)?;
        match (&self.sync, self.applied) {
            (Comparison::Same, true) if self.others.is_empty() => writeln!(
                out,
                "In sync: the kernel holds exactly what the policies say ({}).",
                self.backend
            )?,
            (Comparison::Same, true) => {
                writeln!(out, "{} holds exactly what the policies say.", self.backend)?
            }
            (Comparison::Same, false) => writeln!(
                out,
                "Nothing of nodeport-guard is in the kernel ({}), and the policies ask for nothing on this host.",
                self.backend
            )?,
            (Comparison::Differs(changes), applied) => {
                if applied {
                    writeln!(
                        out,
                        "Out of sync: the kernel ({}) differs from the policies; `apply` would change {}.",
                        self.backend,
                        changes.summary().counts()
                    )?;
                } else {
                    writeln!(
                        out,
                        "Nothing of nodeport-guard is in the kernel ({}); `apply` would change {}.",
                        self.backend,
                        changes.summary().counts()
                    )?;
                }
                for part in changes.describe().split("; ") {
                    writeln!(out, "  {part}")?;
                }
                writeln!(
                    out,
                    "`nodeport-guard plan` shows every line; `nodeport-guard apply` fixes it."
                )?;
            }
            (Comparison::Unknown(why), _) => writeln!(
                out,
                "Cannot compare the kernel ({}) with the policies: {why}.",
                self.backend
            )?,
        }
        for other in &self.others {
            writeln!(
                out,
                "Out of sync: rules of nodeport-guard are also in {other}, from before a switch of backend, and still filter; `nodeport-guard apply` removes them."
            )?;
        }
        self.print_history(out)?;
        super::grants::write_expiring(out, &self.expiring, self.now)?;
        self.print_daemon(out)
    }

    fn print_history(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        if let Some(record) = &self.last_apply {
            writeln!(
                out,
                "\nLast change: {} by {}: {}.",
                when(record.at),
                record.by,
                record.summary
            )?;
        }
        if let Some(pending) = &self.pending {
            let watched = pending
                .watcher_pid
                .is_some_and(|pid| crate::system::watcher::is_watching(pid, &pending.id));
            if watched || now_seconds() < pending.deadline {
                writeln!(
                    out,
                    "\nAn apply is waiting for `nodeport-guard confirm` (rolled back {} s from now).",
                    pending.deadline.saturating_sub(now_seconds())
                )?;
            } else {
                writeln!(
                    out,
                    "\nAn apply ({}) was not confirmed in time, and its rollback watcher has stopped: its rules still stand. The next `nodeport-guard confirm`, `apply` or daemon start rolls it back.",
                    pending.id
                )?;
            }
        }
        if let Some(record) = &self.last_rollback {
            // A rollback that failed left rules in place that nobody confirmed.
            if record.outcome.contains("failed") {
                writeln!(
                    out,
                    "\nThe last unconfirmed apply ({}) {}.",
                    record.id, record.outcome
                )?;
            } else {
                writeln!(
                    out,
                    "\nThe last apply with a confirm window ({}) {}: {}.",
                    record.id,
                    record.outcome,
                    when(record.at)
                )?;
            }
        }
        Ok(())
    }

    fn print_daemon(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let Some(daemon) = &self.daemon else {
            return writeln!(out, "\nDaemon: not running.");
        };
        let summary = daemon
            .get("summary")
            .and_then(|s| s.as_str())
            .unwrap_or_default();
        if self.daemon_running {
            let pid = daemon.get("pid").and_then(serde_json::Value::as_u64);
            writeln!(
                out,
                "\nDaemon: running (pid {}): {summary}",
                pid.unwrap_or_default()
            )?;
        } else {
            let at = daemon.get("updatedAt").and_then(serde_json::Value::as_u64);
            writeln!(
                out,
                "\nDaemon: not running (last seen {}): {summary}",
                at.map_or_else(|| "at an unknown time".to_owned(), when)
            )?;
        }
        if let Some(errors) = daemon.get("lastErrors").and_then(|e| e.as_array()) {
            for error in errors {
                if let Some(text) = error.as_str() {
                    writeln!(out, "  {text}")?;
                }
            }
        }
        Ok(())
    }
}

/// The counters as a table, one line per policy rule the kernel holds.
fn print_table(out: &mut impl std::io::Write, rows: &[RuleCounter]) -> std::io::Result<()> {
    // A policy outside `default` says its tier.
    let name = |row: &RuleCounter| match (row.staged, row.tier == DEFAULT_TIER) {
        (false, true) => row.policy.clone(),
        (true, true) => format!("{} (staged)", row.policy),
        (false, false) => format!("{} (tier {})", row.policy, row.tier),
        (true, false) => format!("{} (staged, tier {})", row.policy, row.tier),
    };
    let width = rows
        .iter()
        .map(|row| name(row).len())
        .max()
        .unwrap_or(6)
        .max(6);
    writeln!(
        out,
        "{:width$}  {:9}  {:>4}  {:>12}  {:>14}  IN-KERNEL",
        "POLICY", "DIRECTION", "RULE", "PACKETS", "BYTES"
    )?;
    for row in rows {
        writeln!(
            out,
            "{:width$}  {:9}  {:>4}  {:>12}  {:>14}  {}",
            name(row),
            row.direction.to_string(),
            row.rule,
            row.packets,
            row.bytes,
            row.in_kernel.as_str()
        )?;
    }
    if rows.is_empty() {
        writeln!(out, "(no policy rules are applied)")?;
    }
    Ok(())
}
