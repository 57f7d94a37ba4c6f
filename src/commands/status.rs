//! `status`: packets and bytes per policy rule from the kernel's counters, a pending
//! confirmation, a failed rollback and the daemon's own summary.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Result;

use crate::counters::{self, AppliedIndex, RuleCounter};
use crate::dataplane::{Dataplane, Runner};
use crate::model::IpFamily;
use crate::policy_set;
use crate::settings::Settings;
use crate::system::host::host_facts;
use crate::system::runtime::{StateDir, now_seconds};

/// `status [--json]`.
pub fn run(settings: &Settings, runner: &dyn Runner, json: bool) -> Result<ExitCode> {
    let state_dir = StateDir::new(&settings.state_dir);
    let backend = settings.backend.resolve(runner);
    let dataplane = Dataplane::new(
        backend,
        runner,
        IpFamily::BOTH.to_vec(),
        &settings.state_dir,
    );
    let observed = dataplane.observe()?;
    let index = match state_dir.applied()? {
        Some(index) => index,
        None => match policy_set::compile_for(settings, &host_facts(&settings.config)) {
            Some((_, compiled)) => {
                counters::origin_index(&compiled.ruleset, backend, now_seconds())
            }
            None => AppliedIndex::default(),
        },
    };
    let rows = counters::rule_counters(&observed, &index);
    let daemon = state_dir.daemon_status()?;
    let pending = state_dir.pending()?;
    let last_rollback = state_dir.last_rollback().ok().flatten();
    if json {
        let value = serde_json::json!({
            "backend": backend.name(),
            "rules": rows,
            "daemon": daemon,
            "pendingConfirmation": pending.map(|p| serde_json::json!({"id": p.id, "deadline": p.deadline})),
            "lastRollback": last_rollback,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut stdout = std::io::stdout().lock();
    print_table(&mut stdout, &rows)?;
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

/// The counters as a table, one line per policy rule.
fn print_table(out: &mut impl std::io::Write, rows: &[RuleCounter]) -> std::io::Result<()> {
    let width = rows
        .iter()
        .map(|row| row.policy.len())
        .max()
        .unwrap_or(6)
        .max(6);
    writeln!(
        out,
        "{:width$}  {:9}  {:>4}  {:>12}  {:>14}",
        "POLICY", "DIRECTION", "RULE", "PACKETS", "BYTES"
    )?;
    for row in rows {
        writeln!(
            out,
            "{:width$}  {:9}  {:>4}  {:>12}  {:>14}",
            row.policy,
            row.direction.to_string(),
            row.rule,
            row.packets,
            row.bytes
        )?;
    }
    if rows.is_empty() {
        writeln!(out, "(no policy rules are applied)")?;
    }
    Ok(())
}
