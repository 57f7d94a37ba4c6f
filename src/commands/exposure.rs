//! `exposure`: every port of this host another host can reach, and who may reach it
//! (`crate::exposure`), under the policies last applied or, with nothing applied, the files.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use crate::dataplane::Host;
use crate::exposure::{self, Exposed, Reachable, Via};
use crate::model::Model;
use crate::policy_set;
use crate::settings::Settings;
use crate::system::host::host_facts;

/// Which policies the ports were judged under.
pub enum Basis {
    /// The policy files the last apply recorded.
    Applied,
    /// The policy directory's files: nothing applied (or not recorded).
    Files,
}

impl Basis {
    fn words(&self, settings: &Settings) -> String {
        match self {
            Basis::Applied => "the policies as last applied".to_owned(),
            Basis::Files => format!(
                "the policy files in `{}` (nothing is applied)",
                settings.config.policies_dir.display()
            ),
        }
    }
}

/// The policies to judge by: those last applied, else the files (printing their diagnostics;
/// `None` when they are invalid or missing).
pub fn policies(settings: &Settings, runner: &dyn Host) -> Option<(Model, Basis)> {
    if let Some(model) = crate::engine::Engine::new(settings, runner).applied_model() {
        return Some((model, Basis::Applied));
    }
    let directory = &settings.config.policies_dir;
    if !directory.is_dir() {
        eprintln!(
            "error: nothing is applied and the policy directory `{}` does not exist or is not a directory",
            directory.display()
        );
        return None;
    }
    let set = policy_set::load_with(std::slice::from_ref(directory), settings.load);
    if !set.is_valid() {
        super::output::eprint_diagnostics(&set.diagnostics, &set.sources);
        return None;
    }
    Some((set.model, Basis::Files))
}

/// `exposure [--json] [--detailed-exitcode]`.
pub fn run(settings: &Settings, runner: &dyn Host, json: bool, detailed: bool) -> Result<ExitCode> {
    let Some((model, basis)) = policies(settings, runner) else {
        return Ok(ExitCode::from(1));
    };
    let inventory = exposure::scan::inventory(runner)?;
    let facts = host_facts(&settings.config);
    let exposed = exposure::assess(&inventory, &model, &settings.config, &facts);
    for note in &inventory.notes {
        eprintln!("warning: {note}");
    }
    let text = if json {
        let document = super::output::json_document(
            "Exposure",
            serde_json::json!({
                "evaluatedAgainst": match basis { Basis::Applied => "applied", Basis::Files => "files" },
                "ports": exposed,
                "notes": inventory.notes,
            }),
        );
        let mut text =
            serde_json::to_string_pretty(&document).context("cannot encode the ports")?;
        text.push('\n');
        text
    } else {
        table(&exposed, &basis.words(settings))
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    let open = exposed
        .iter()
        .any(|port| port.via == Via::Dnat && port.reachable_from == Reachable::Anyone);
    Ok(if detailed && open {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// The ports as a table: port, protocol, what it is, reachable from, decided by.
pub fn table(exposed: &[Exposed], basis: &str) -> String {
    let mut rows = vec![[
        "PORT".to_owned(),
        "PROTO".to_owned(),
        "WHAT".to_owned(),
        "REACHABLE FROM".to_owned(),
        "DECIDED BY".to_owned(),
    ]];
    for port in exposed {
        let family = match port.family {
            crate::model::IpFamily::V4 => "ipv4",
            crate::model::IpFamily::V6 => "ipv6",
        };
        let owner = port
            .owner
            .as_deref()
            .map(|owner| format!(" ({owner})"))
            .unwrap_or_default();
        let what = match port.via {
            Via::Dnat => format!("DNAT to {}{owner}", port.target),
            Via::Socket => format!("listening on {}{owner}", port.target),
        };
        let reachable = match port.reachable_from {
            Reachable::Some => port
                .allowed
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            other => other.as_str().to_owned(),
        };
        rows.push([
            port.port.to_string(),
            format!("{}/{family}", port.protocol),
            what,
            reachable,
            port.decided_by.clone(),
        ]);
    }
    let mut widths = [0usize; 5];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = format!("Judged under {basis}.\n");
    if exposed.is_empty() {
        out.push_str("No port of this host is reachable from another host.\n");
        return out;
    }
    for row in &rows {
        let mut line = String::new();
        for (index, (cell, width)) in row.iter().zip(widths).enumerate() {
            if index + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
