//! `exposure`: every port of this host another host can reach, and who may reach it
//! (`crate::exposure`), under the policies now applied. The kernel says whether anything is:
//! with nothing of ours in it, every port is open as far as nodeport-guard is concerned,
//! whatever the state directory and the policy files say; with our rules in it, they are the
//! policies last applied, or, when the state directory does not record those, the files.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use crate::dataplane::Host;
use crate::exposure::{self, Exposed, Reachable, Via};
use crate::model::{IpFamily, Model};
use crate::policy_set;
use crate::settings::Settings;
use crate::system::host::host_facts;

/// Which policies the ports were judged under.
#[derive(Debug, PartialEq, Eq)]
pub enum Basis {
    /// Nothing of nodeport-guard is in the kernel: no rule of it drops anything.
    Nothing {
        /// The state directory still records an apply (the kernel was cleaned by hand, or
        /// rebooted).
        recorded: bool,
    },
    /// The policy files the last apply recorded.
    Applied,
    /// The policy directory's files: the kernel holds rules of ours, but the state directory
    /// does not record which policies they came from.
    Files,
}

/// What the ports are judged under, from what the kernel holds of ours (`kernel_holds_ours`)
/// and whether the state directory records the policies last applied (`recorded`). Pure.
pub fn basis(kernel_holds_ours: bool, recorded: bool) -> Basis {
    match (kernel_holds_ours, recorded) {
        (false, recorded) => Basis::Nothing { recorded },
        (true, true) => Basis::Applied,
        (true, false) => Basis::Files,
    }
}

impl Basis {
    /// The table's first line.
    pub fn heading(&self, settings: &Settings) -> String {
        match self {
            Basis::Nothing { recorded } => format!(
                "Nothing of nodeport-guard is in the kernel: no rule of it drops a packet, so every port is reachable by anyone as far as it is concerned{}.",
                if *recorded {
                    " (the state directory records an apply the kernel no longer holds: cleaned up by hand, or a reboot)"
                } else {
                    ""
                }
            ),
            Basis::Applied => "Judged under the policies as last applied.".to_owned(),
            Basis::Files => format!(
                "Judged under the policy files in `{}` (the kernel holds rules of nodeport-guard, but which policies they came from is not recorded).",
                settings.config.policies_dir.display()
            ),
        }
    }

    /// `evaluatedAgainst` in JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            Basis::Nothing { .. } => "nothing",
            Basis::Applied => "applied",
            Basis::Files => "files",
        }
    }
}

/// The families the kernel holds anything of ours in, read with the backend the settings
/// choose (with `auto`, the one our chains are in).
fn families_holding_ours(settings: &Settings, runner: &dyn Host) -> Result<Vec<IpFamily>> {
    let engine = crate::engine::Engine::new(settings, runner);
    let observed = engine.observe().with_context(|| {
        format!(
            "cannot read what the kernel holds of ours ({})",
            engine.backend()
        )
    })?;
    Ok(IpFamily::BOTH
        .into_iter()
        .filter(|family| {
            observed
                .tables
                .iter()
                .any(|(key, table)| key.family == *family && !table.is_empty())
                || observed.sets.values().any(|set| set.family == *family)
        })
        .collect())
}

/// What the ports are judged under: the policies (none when nothing of ours is in the
/// kernel), what they are, and the families the kernel holds rules of ours in.
pub struct Judged {
    /// The policies (none when nothing of ours is in the kernel).
    pub model: Option<Model>,
    /// What they are.
    pub basis: Basis,
    /// The families the kernel holds anything of ours in.
    pub guarded: Vec<IpFamily>,
}

/// The policies to judge by and what they are: none when nothing of ours is in the kernel;
/// else those last applied, else the files (printing their diagnostics; `Ok(None)` when they
/// are invalid or missing).
pub fn policies(settings: &Settings, runner: &dyn Host) -> Result<Option<Judged>> {
    let engine = crate::engine::Engine::new(settings, runner);
    let applied = engine.applied_model();
    let guarded = families_holding_ours(settings, runner)?;
    match basis(!guarded.is_empty(), applied.is_some()) {
        Basis::Nothing { recorded } => {
            return Ok(Some(Judged {
                model: None,
                basis: Basis::Nothing { recorded },
                guarded,
            }));
        }
        Basis::Applied => {
            return Ok(Some(Judged {
                model: applied,
                basis: Basis::Applied,
                guarded,
            }));
        }
        Basis::Files => {}
    }
    let directory = &settings.config.policies_dir;
    if !directory.is_dir() {
        eprintln!(
            "error: the kernel holds rules of nodeport-guard, the state directory does not record which policies they came from, and the policy directory `{}` does not exist or is not a directory",
            directory.display()
        );
        return Ok(None);
    }
    let set = policy_set::load_with(std::slice::from_ref(directory), settings.load);
    if !set.is_valid() {
        super::output::eprint_diagnostics(&set.diagnostics, &set.sources);
        return Ok(None);
    }
    Ok(Some(Judged {
        model: Some(set.model),
        basis: Basis::Files,
        guarded,
    }))
}

/// `exposure [--json] [--detailed-exitcode]`.
pub fn run(settings: &Settings, runner: &dyn Host, json: bool, detailed: bool) -> Result<ExitCode> {
    let Some(Judged {
        model,
        basis,
        guarded,
    }) = policies(settings, runner)?
    else {
        return Ok(ExitCode::from(1));
    };
    let mut inventory = exposure::scan::inventory(runner)?;
    let facts = host_facts(&settings.config);
    // A family the host programs but the kernel holds nothing of ours in (its tables deleted
    // or flushed by another program): nothing guards its ports.
    let bare: Vec<IpFamily> = match &model {
        Some(_) => facts
            .families()
            .into_iter()
            .filter(|family| !guarded.contains(family))
            .collect(),
        None => Vec::new(),
    };
    let judged: Vec<IpFamily> = IpFamily::BOTH
        .into_iter()
        .filter(|family| !bare.contains(family))
        .collect();
    let exposed = match &model {
        Some(model) => exposure::assess_in(&inventory, model, &settings.config, &facts, &judged),
        None => exposure::unguarded(&inventory, &settings.config, &facts),
    };
    for family in bare {
        inventory.notes.push(format!(
            "the kernel holds nothing of nodeport-guard for {family}: its ports are reachable by anyone (`plan` shows what is missing, `apply` puts it back)"
        ));
    }
    for note in &inventory.notes {
        eprintln!("warning: {note}");
    }
    let text = if json {
        let document = super::output::json_document(
            "Exposure",
            serde_json::json!({
                "evaluatedAgainst": basis.as_str(),
                "ports": exposed,
                "notes": inventory.notes,
            }),
        );
        let mut text =
            serde_json::to_string_pretty(&document).context("cannot encode the ports")?;
        text.push('\n');
        text
    } else {
        table(&exposed, &basis.heading(settings))
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

/// The ports as a table under `heading` (what they were judged under): port, protocol, what
/// it is, reachable from, decided by.
pub fn table(exposed: &[Exposed], heading: &str) -> String {
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
            Via::Dnat if port.redirect => format!("REDIRECT to {}{owner}", port.target),
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
    let mut out = format!("{heading}\n");
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
