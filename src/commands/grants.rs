//! `grants`: every resource that carries an expiry, and `--prune`, which deletes the files
//! that hold only expired ones.

use std::process::ExitCode;

use anyhow::{Context as _, Result};

use crate::grants::{self, Expiring};
use crate::settings::Settings;

/// `grants [--json] [--prune]`: exit 0, 1 on invalid policy files.
pub fn run(settings: &Settings, json: bool, prune: bool) -> Result<ExitCode> {
    let Some(set) = super::load_valid(settings) else {
        return Ok(ExitCode::from(1));
    };
    let items = grants::expiring(&set);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&list_json(&items, set.now))?
        );
    } else if items.is_empty() {
        println!("no policy, staged policy or network set carries an expiry");
    } else {
        for item in &items {
            println!("{}", describe(item, set.now));
        }
    }
    if prune {
        let files = grants::prunable(&set);
        if files.is_empty() {
            eprintln!("no file holds only expired resources: nothing to prune");
        }
        for file in files {
            fs_err::remove_file(&file)
                .with_context(|| format!("cannot prune `{}`", file.display()))?;
            eprintln!(
                "removed {} (it held only expired resources)",
                file.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The JSON list: `apiVersion: nodeport-guard/v1`, `kind: GrantList`, `items`.
pub fn list_json(items: &[Expiring], now: jiff::Timestamp) -> serde_json::Value {
    let items: Vec<serde_json::Value> = items
        .iter()
        .map(|item| {
            serde_json::json!({
                "kind": item.kind,
                "name": item.name,
                "file": item.file,
                "sources": item.sources,
                "ports": item.ports,
                "expires": item.expires.to_string(),
                "expiresInSeconds": item.expires.duration_since(now).as_secs(),
                "grantedBy": item.granted_by,
                "reason": item.reason,
                "status": item.status(),
            })
        })
        .collect();
    serde_json::json!({
        "apiVersion": "nodeport-guard/v1",
        "kind": "GrantList",
        "items": items,
    })
}

/// Two lines for one resource: what and until when, then who may reach what, who and why.
pub fn describe(item: &Expiring, now: jiff::Timestamp) -> String {
    let mut first = format!(
        "{} `{}` ({}): {}, {} ({})",
        item.kind,
        item.name,
        item.file.display(),
        item.status(),
        item.relative(now),
        item.expires
    );
    let mut details = Vec::new();
    if !item.sources.is_empty() {
        details.push(format!("sources {}", item.sources.join(", ")));
    }
    if !item.ports.is_empty() {
        details.push(format!("ports {}", item.ports.join(", ")));
    }
    if let Some(by) = &item.granted_by {
        details.push(format!("granted by {by}"));
    }
    if let Some(reason) = &item.reason {
        details.push(format!("reason: {reason}"));
    }
    if !details.is_empty() {
        first.push_str("\n    ");
        first.push_str(&details.join("; "));
    }
    first
}

/// The expiring resources after a plan or a status: a heading and two lines each; nothing
/// when there are none.
pub fn write_expiring(
    out: &mut impl std::io::Write,
    items: &[Expiring],
    now: jiff::Timestamp,
) -> std::io::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nExpiring (`nodeport-guard.io/expires`):")?;
    for item in items {
        writeln!(out, "  {}", describe(item, now).replace('\n', "\n  "))?;
    }
    Ok(())
}
