//! The connection-tracking table, through `conntrack` (conntrack-tools): listing it as a stream
//! within a time budget, deleting one entry, and asking the routing table which interface a
//! peer is behind.
//!
//! The `conntrack` program rather than ctnetlink in-process: it is the tool operators already
//! use for the same job (`conntrack -D`), its `-o extended` output is stable across versions,
//! Debian ships it (our package recommends it), and it keeps netlink message building out of
//! a crate that denies `unsafe`.

use std::net::IpAddr;
use std::time::Instant;

use super::runner::Runner;
use crate::conntrack::{Flow, parse_line};
use crate::model::IpFamily;

/// The program.
pub const CONNTRACK: &str = "conntrack";

/// How far a listing got.
#[derive(Debug, Default)]
pub struct Listing {
    /// Entries read.
    pub entries: usize,
    /// Whether the listing stopped before the end (time or entry budget).
    pub truncated: bool,
}

/// Streams every entry of `families` to `flow`, stopping at `deadline` or after `max_entries`;
/// an error when `conntrack` is missing or fails.
pub fn list(
    runner: &dyn Runner,
    families: &[IpFamily],
    deadline: Instant,
    max_entries: usize,
    flow: &mut dyn FnMut(Flow),
) -> Result<Listing, String> {
    let mut listing = Listing::default();
    for family in families {
        let name = match family {
            IpFamily::V4 => "ipv4",
            IpFamily::V6 => "ipv6",
        };
        let mut on_line = |line: &str| {
            if Instant::now() >= deadline || listing.entries >= max_entries {
                listing.truncated = true;
                return false;
            }
            if let Some(parsed) = parse_line(line) {
                listing.entries += 1;
                flow(parsed);
            }
            true
        };
        let output = runner
            .run_lines(
                CONNTRACK,
                &["-L", "-f", name, "-o", "extended"],
                &mut on_line,
            )
            .map_err(|error| format!("cannot run `{CONNTRACK}`: {error}"))?;
        if !output.success && !listing.truncated {
            return Err(format!(
                "`{CONNTRACK} -L -f {name}` failed: {}",
                output.stderr.trim()
            ));
        }
        if listing.truncated {
            break;
        }
    }
    Ok(listing)
}

/// Deletes the entry of `flow` (by its whole original tuple). A flow that is already gone
/// (it ended, or another program removed it) is not an error.
pub fn delete(runner: &dyn Runner, flow: &Flow) -> Result<(), String> {
    let args = flow.delete_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = runner
        .run(CONNTRACK, &args, None)
        .map_err(|error| format!("cannot run `{CONNTRACK}`: {error}"))?;
    let gone = output.stderr.contains("0 flow entries");
    if output.success || gone {
        Ok(())
    } else {
        Err(format!(
            "`{CONNTRACK} {}` failed: {}",
            args.join(" "),
            output.stderr.trim()
        ))
    }
}

/// The interface the host reaches `peer` through (`ip route get`), which is the interface the
/// peer's packets arrive on when routing is symmetric.
pub fn interface_towards(runner: &dyn Runner, peer: IpAddr) -> Option<String> {
    let peer = peer.to_string();
    let output = runner
        .run("ip", &["-o", "route", "get", &peer], None)
        .ok()?;
    if !output.success {
        return None;
    }
    let mut words = output.stdout.split_whitespace();
    words.find(|word| *word == "dev")?;
    words.next().map(str::to_owned)
}
