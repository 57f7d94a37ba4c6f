//! What the commands share in talking to the operator: the plan display and the question
//! before a change.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use anyhow::{Result, bail};

use crate::plan::{self, Plan, Style};
use crate::trace::impact::Impact;

fn style() -> Style {
    Style {
        color: std::io::stdout().is_terminal(),
        max_members: 20,
    }
}

/// Prints a plan and its summary line to stdout.
pub fn print_plan(plan: &Plan) {
    let mut stdout = std::io::stdout().lock();
    let _ = write!(stdout, "{}", plan::render(plan, style()));
    let _ = writeln!(stdout, "{}", plan.summary().line());
}

/// Most cut-off connections listed one by one.
const CUTS_LISTED: usize = 10;

/// Says which connections from sources the policies name a change cuts off (to stderr, as
/// the other warnings).
pub fn print_cuts(impact: &Impact) {
    if impact.cuts.is_empty() {
        return;
    }
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(
        stderr,
        "warning: this change cuts off {} connection{} that the policies last applied let through (new connections; {} packet{} traced):",
        impact.cuts.len(),
        plural(impact.cuts.len()),
        impact.checked,
        plural(impact.checked)
    );
    for cut in impact.cuts.iter().take(CUTS_LISTED) {
        let protocol = crate::model::Protocol::from_number(cut.protocol)
            .to_string()
            .to_lowercase();
        let interface = cut
            .interface
            .as_deref()
            .map(|name| format!(" on {name}"))
            .unwrap_or_default();
        let _ = writeln!(
            stderr,
            "  {} → {protocol}/{}{interface} was allowed, will be {}",
            cut.src, cut.dport, cut.dropped_by.reason
        );
    }
    if impact.cuts.len() > CUTS_LISTED {
        let _ = writeln!(stderr, "  … and {} more", impact.cuts.len() - CUTS_LISTED);
    }
}

/// Asks on the terminal, or refuses when stdin is not one and `yes` was not given.
pub fn ask(question: &str, yes: bool) -> Result<bool> {
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

/// `""` for one, `"s"` for any other count.
pub fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}
