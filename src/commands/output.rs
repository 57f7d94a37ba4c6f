//! What the commands share in talking to the operator: the plan display and the question
//! before a change.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use anyhow::{Result, bail};

use crate::plan::{self, Plan, Style};
use crate::trace::impact::Impact;

/// Whether to color output written to a stream: only a terminal, and never when `NO_COLOR` is
/// set to anything but the empty string (<https://no-color.org>).
pub fn use_color(is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    is_terminal && no_color.is_none_or(|value| value.is_empty())
}

fn style(full: bool) -> Style {
    Style {
        color: use_color(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ),
        max_members: if full { 0 } else { 20 },
        full,
    }
}

/// Prints a plan and its summary line to stdout: what changes per policy and set, then the
/// diffs (with `full`, every line of every chain and set).
pub fn print_plan(plan: &Plan, full: bool) {
    let mut stdout = std::io::stdout().lock();
    let _ = write!(stdout, "{}", plan::render(plan, style(full)));
    let _ = writeln!(stdout, "{}", plan.summary().line());
}

/// Rules of ours in other backends, each with what removes it: they were written before the
/// host switched backends, they still filter, and `apply` removes them once its own write
/// stands.
pub fn print_leftovers(leftovers: &[crate::engine::Leftover<'_>], full: bool) {
    for leftover in leftovers {
        match leftover.what() {
            "rules" => println!(
                "In {}, rules of nodeport-guard from before a switch of backend still filter; `apply` removes them:",
                leftover.dataplane.backend
            ),
            what => println!(
                "In {}, {what} of nodeport-guard from before a switch of backend; `apply` removes them:",
                leftover.dataplane.backend
            ),
        }
        print_plan(&leftover.plan, full);
    }
}

/// The version of the JSON documents `plan`, `status` and `trace` print (`apiVersion`, with
/// `kind`): within it fields are only ever added; a rename or removal makes a new version.
pub const JSON_API_VERSION: &str = "nodeport-guard/v1";

/// A JSON document of `kind`: `apiVersion` and `kind` first, then `fields` (an object).
pub fn json_document(kind: &str, fields: serde_json::Value) -> serde_json::Value {
    let mut document = serde_json::Map::new();
    document.insert("apiVersion".to_owned(), JSON_API_VERSION.into());
    document.insert("kind".to_owned(), kind.into());
    match fields {
        serde_json::Value::Object(fields) => document.extend(fields),
        other => {
            document.insert("value".to_owned(), other);
        }
    }
    serde_json::Value::Object(document)
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

/// Says what a revocation cut, to stderr.
pub fn print_revoked(report: &crate::revocation::Report) {
    let mut stderr = std::io::stderr().lock();
    if report.deleted > 0 {
        let _ = writeln!(
            stderr,
            "Cut {} established connection{} the policies now deny:",
            report.deleted,
            plural(report.deleted)
        );
        write_groups(&mut stderr, &report.groups());
    }
    for (cut, error) in &report.failed {
        let _ = writeln!(
            stderr,
            "warning: cannot cut the connection from {} to port {:?}: {error}",
            cut.flow.original.src, cut.flow.original.dport
        );
    }
    if report.truncated {
        let _ = writeln!(
            stderr,
            "warning: the conntrack table was read only in part ({} entries); run `nodeport-guard revoke --yes` to go on",
            report.examined
        );
    }
}

/// The connections of a revocation by source and port, at most [`GROUPS_LISTED`] lines.
fn write_groups(out: &mut impl std::io::Write, groups: &[crate::revocation::Group<'_>]) {
    for group in groups.iter().take(GROUPS_LISTED) {
        let port = group.dport.map(|p| format!("/{p}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "  {} from {} to {}{port}: {}",
            group.count, group.src, group.protocol, group.verdict.reason
        );
    }
    if groups.len() > GROUPS_LISTED {
        let _ = writeln!(
            out,
            "  … and {} more sources and ports",
            groups.len() - GROUPS_LISTED
        );
    }
}

/// Most groups of established connections listed.
const GROUPS_LISTED: usize = 10;

/// What cuts established connections, for [`print_established`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cutting {
    /// A change, with `revokeEstablished`.
    OnChange,
    /// Nothing: a change without `revokeEstablished`.
    No,
    /// `nodeport-guard revoke`, now.
    OnDemand,
}

/// Says which established connections a change cuts (with `revokeEstablished`) or leaves
/// running (without), or `revoke` cuts, to stderr.
pub fn print_established(report: &crate::revocation::Report, cutting: Cutting) {
    let groups = report.groups();
    if groups.is_empty() {
        return;
    }
    let mut stderr = std::io::stderr().lock();
    let total = report.cuts.len();
    let _ = match cutting {
        Cutting::OnChange => writeln!(
            stderr,
            "note: {total} established connection{} the new policies deny will be cut (revokeEstablished):",
            plural(total)
        ),
        Cutting::No => writeln!(
            stderr,
            "note: {total} established connection{} the new policies deny will keep running: revokeEstablished is off, so only new connections are judged (`nodeport-guard revoke` cuts them):",
            plural(total)
        ),
        Cutting::OnDemand => writeln!(
            stderr,
            "{total} established connection{} the policies deny:",
            plural(total)
        ),
    };
    write_groups(&mut stderr, &groups);
    if report.truncated {
        let _ = writeln!(
            stderr,
            "  (the conntrack table was read only in part: {} entries)",
            report.examined
        );
    }
}

/// The same as JSON: whether they are cut, and per source and port how many.
pub fn established_json(report: &crate::revocation::Report, revoke: bool) -> serde_json::Value {
    let groups: Vec<serde_json::Value> = report
        .groups()
        .iter()
        .map(|group| {
            serde_json::json!({
                "src": group.src,
                "protocol": group.protocol,
                "dport": group.dport,
                "connections": group.count,
                "droppedBy": group.verdict,
            })
        })
        .collect();
    serde_json::json!({
        "revoke": revoke,
        "connections": report.cuts.len(),
        "examined": report.examined,
        "truncated": report.truncated,
        "bySource": groups,
    })
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

/// Prints diagnostics to stderr, rendered as [`crate::diagnostic::render_all`] does.
pub fn eprint_diagnostics(
    diagnostics: &[crate::diagnostic::Diagnostic],
    sources: &crate::source::Sources,
) {
    use std::io::Write as _;
    if diagnostics.is_empty() {
        return;
    }
    let mut stderr = std::io::stderr().lock();
    let _ = write!(
        stderr,
        "{}",
        crate::diagnostic::render_all(diagnostics, sources)
    );
}
