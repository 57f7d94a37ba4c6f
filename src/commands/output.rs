//! What the commands share in talking to the operator: the plan display and the question
//! before a change.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use anyhow::{Result, bail};

use crate::plan::{self, Plan, Style};

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
