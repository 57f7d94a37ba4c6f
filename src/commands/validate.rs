//! `validate`: parse and check policy files; no root, no kernel.

use std::path::PathBuf;
use std::process::ExitCode;

use super::output::plural;
use crate::policy_set;
use crate::settings::Settings;

/// `validate [PATH…]`: exit 0 when valid, 1 when not.
pub fn run(settings: &Settings, paths: &[PathBuf]) -> ExitCode {
    let paths = if paths.is_empty() {
        vec![settings.config.policies_dir.clone()]
    } else {
        paths.to_vec()
    };
    let set = policy_set::load_with(&paths, settings.load);
    super::output::eprint_diagnostics(&set.diagnostics, &set.sources);
    if !set.is_valid() {
        let errors = set.diagnostics.iter().filter(|d| d.is_error()).count();
        eprintln!(
            "{errors} error{} in {} file{}: nothing from these files may be applied",
            plural(errors),
            set.sources.len(),
            plural(set.sources.len())
        );
        return ExitCode::from(1);
    }
    let policies = set.model.policies().len();
    // Tiers the files declare (the implicit `default` is not counted), when there are any.
    let tiers = set
        .model
        .tiers()
        .iter()
        .filter(|tier| tier.origin.is_some())
        .count();
    let tiers = if tiers == 0 {
        String::new()
    } else {
        format!(", {tiers} tier{}", plural(tiers))
    };
    // Staged policies (and staged deletions), when there are any.
    let staged = set.model.staged_policies().len() + set.model.staged_deletions().len();
    let staged = if staged == 0 {
        String::new()
    } else {
        format!(
            " (and {staged} staged polic{})",
            if staged == 1 { "y" } else { "ies" }
        )
    };
    println!(
        "valid: {} polic{}{staged}, {} network set{}, {} host endpoint{}{tiers} in {} file{}",
        policies,
        if policies == 1 { "y" } else { "ies" },
        set.model.network_sets().len(),
        plural(set.model.network_sets().len()),
        set.model.host_endpoints().len(),
        plural(set.model.host_endpoints().len()),
        set.sources.len(),
        plural(set.sources.len())
    );
    ExitCode::SUCCESS
}
