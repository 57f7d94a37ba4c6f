//! `plan`: what `apply` would change, as a diff per chain and set, with what the change cuts
//! off; the engine prepares and plans, this shows it.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use super::output::{Cutting, established_json, print_cuts, print_established, print_plan};
use crate::engine::{self, Engine, Planned, Prepared, Rejected};
use crate::settings::Settings;

/// Prints why the policies could not be prepared: the diagnostics of invalid files, or the
/// missing directory.
pub fn print_rejected(rejected: &Rejected) {
    match rejected {
        Rejected::MissingDirectory(dir) => eprintln!(
            "error: the policy directory `{}` does not exist or is not a directory",
            dir.display()
        ),
        Rejected::Invalid(set) => super::output::eprint_diagnostics(&set.diagnostics, &set.sources),
    }
}

/// Prints the warnings of prepared policies (validation's and compilation's).
pub fn print_warnings(prepared: &Prepared) {
    super::output::eprint_diagnostics(&prepared.warnings, &prepared.sources);
}

/// Plans with `engine`, printing the policies' diagnostics; `None` when they are invalid
/// (already said).
pub fn planned(engine: &Engine<'_>) -> Result<Option<Planned>> {
    match engine.prepare_observing() {
        Err(rejected) => {
            print_rejected(&rejected);
            Ok(None)
        }
        Ok((prepared, observation)) => {
            print_warnings(&prepared);
            Ok(Some(engine.plan_against(prepared, observation)?))
        }
    }
}

/// `plan [--detailed-exitcode] [--json] [--out FILE]`.
pub fn run(
    settings: &Settings,
    runner: &dyn crate::dataplane::Host,
    detailed: bool,
    json: bool,
    out: Option<&Path>,
    full: bool,
) -> Result<ExitCode> {
    let engine = Engine::new(settings, runner);
    // Rules of ours in another backend (the host switched backends), read while the policies
    // compile: `apply` removes them.
    let (planned, mut leftovers) = std::thread::scope(|scope| {
        let others = scope.spawn(|| engine.leftovers());
        let planned = planned(&engine);
        (planned, others.join().unwrap_or_default())
    });
    let Some(planned) = planned? else {
        return Ok(ExitCode::from(1));
    };
    let Planned {
        prepared,
        observed,
        plan: changes,
        ..
    } = &planned;
    leftovers.warn_unread();
    for leftover in &mut leftovers.found {
        engine.name_policies(&mut leftover.plan, None);
    }
    let cut_off = engine.cut_off(prepared);
    let established = if changes.is_empty() {
        None
    } else {
        engine.established_cuts(prepared)
    };
    let promotions = engine::promotions(&prepared.compiled.names, &prepared.desired, observed);
    // With nothing of ours in the kernel no published port is guarded now, whatever the state
    // directory records: none can lose a guard.
    let opened = if changes.is_empty() || observed.is_empty() {
        Vec::new()
    } else {
        engine.opened_published_ports(prepared)
    };
    if json {
        // Validation's (an expired resource, say) and compilation's, as the text says them.
        let warnings: Vec<String> = prepared
            .warnings
            .iter()
            .filter(|warning| !warning.is_error())
            .map(|warning| warning.message.clone())
            .collect();
        let value = super::output::json_document(
            "Plan",
            serde_json::json!({
                "backend": prepared.backend.name(),
                "summary": changes.summary(),
                "changes": !changes.is_empty(),
                "warnings": warnings,
                "cutOff": cut_off.as_ref().map(|impact| &impact.cuts),
                "established": established.as_ref().map(|report| established_json(report, settings.config.revoke_established)),
                "promotions": promotions,
                "expiring": super::grants::list_json(&prepared.expiring, settings.load.now)["items"],
                "openedPublishedPorts": opened,
                "plan": changes,
                "otherBackends": leftovers.found.iter().map(|leftover| serde_json::json!({
                    "backend": leftover.dataplane.backend.name(),
                    "summary": leftover.plan.summary(),
                    "plan": leftover.plan,
                })).collect::<Vec<_>>(),
            }),
        );
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if changes.is_empty() && leftovers.is_empty() {
        println!("No changes: the kernel holds exactly what the policies say.");
    } else {
        for line in &promotions {
            println!("{line}");
        }
        print_plan(changes, full);
        if let Some(impact) = &cut_off {
            print_cuts(impact);
        }
        if let Some(report) = &established {
            print_established(
                report,
                if settings.config.revoke_established {
                    Cutting::OnChange
                } else {
                    Cutting::No
                },
            );
        }
        for line in &opened {
            println!("warning: {line}");
        }
        super::output::print_leftovers(&leftovers.found, full);
    }
    if !json {
        super::grants::write_expiring(
            &mut std::io::stdout().lock(),
            &prepared.expiring,
            settings.load.now,
        )?;
    }
    if let Some(path) = out {
        let saved = engine::SavedPlan::of(&planned, &settings.config.policies_dir);
        fs_err::write(path, serde_json::to_vec_pretty(&saved)?)?;
        eprintln!(
            "Saved the plan to `{}`; apply it with `nodeport-guard apply {}`.",
            path.display(),
            path.display()
        );
    }
    Ok(
        if detailed && !(changes.is_empty() && leftovers.is_empty()) {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        },
    )
}
