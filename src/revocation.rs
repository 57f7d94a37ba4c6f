//! Revoking established connections a change now denies (`revokeEstablished`, `revoke`):
//! stream the conntrack table within a time budget, judge each entry with `trace::revoke`,
//! and delete exactly the entries to cut. A connection whose entry is gone is judged again
//! by its next packet, as a new one, and dropped. A failure to delete is reported and never
//! undoes the rules.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::conntrack::Flow;
use crate::dataplane::Runner;
use crate::dataplane::conntrack;
use crate::facts::HostFacts;
use crate::model::{Model, Protocol};
use crate::trace::Verdict;
use crate::trace::revoke::Judge;

/// How long reading the conntrack table may take: a reload must not stall on a huge table.
pub const LIST_BUDGET: Duration = Duration::from_secs(2);

/// Most entries read.
pub const MAX_ENTRIES: usize = 2_000_000;

/// Most connections cut at once (the rest are reported as left).
pub const MAX_CUTS: usize = 100_000;

/// One connection to cut, and what drops it now.
#[derive(Clone, Debug)]
pub struct Cut {
    /// The connection.
    pub flow: Flow,
    /// The new policies' verdict on it.
    pub verdict: Verdict,
}

/// What a revocation found and did.
#[derive(Debug, Default)]
pub struct Report {
    /// Entries read.
    pub examined: usize,
    /// Whether the table was read only in part (time or entry budget), or more connections
    /// were found than are cut at once.
    pub truncated: bool,
    /// The connections to cut.
    pub cuts: Vec<Cut>,
    /// How many were deleted.
    pub deleted: usize,
    /// The ones that could not be deleted, with why.
    pub failed: Vec<(Cut, String)>,
}

/// Connections cut from one source to one port, counted.
#[derive(Debug)]
pub struct Group<'r> {
    /// The source.
    pub src: IpAddr,
    /// The protocol, in words (`tcp`).
    pub protocol: String,
    /// The destination port (before DNAT).
    pub dport: Option<u16>,
    /// How many connections.
    pub count: usize,
    /// What drops them.
    pub verdict: &'r Verdict,
}

impl Report {
    /// The cuts, by source, protocol and port.
    pub fn groups(&self) -> Vec<Group<'_>> {
        let mut groups: BTreeMap<(IpAddr, u8, Option<u16>), Group<'_>> = BTreeMap::new();
        for cut in &self.cuts {
            let original = cut.flow.original;
            groups
                .entry((original.src, cut.flow.protocol, original.dport))
                .or_insert_with(|| Group {
                    src: original.src,
                    protocol: Protocol::from_number(cut.flow.protocol)
                        .to_string()
                        .to_lowercase(),
                    dport: original.dport,
                    count: 0,
                    verdict: &cut.verdict,
                })
                .count += 1;
        }
        groups.into_values().collect()
    }
}

/// Finds the established connections that `before` (`None`: everything) let through and
/// `after` drops, and, when `delete`, deletes their conntrack entries.
pub fn revoke(
    runner: &dyn Runner,
    before: Option<&Model>,
    after: &Model,
    config: &Config,
    host: &HostFacts,
    delete: bool,
) -> Result<Report, String> {
    let mut judge = Judge::new(before, after, config, host);
    let interfaces_matter = judge.interfaces_matter();
    let mut interfaces: HashMap<IpAddr, Option<String>> = HashMap::new();
    let mut report = Report::default();
    let deadline = Instant::now() + LIST_BUDGET;
    let mut on_flow = |flow: Flow| {
        if report.cuts.len() >= MAX_CUTS || !judge.is_candidate(&flow) {
            report.truncated |= report.cuts.len() >= MAX_CUTS;
            return;
        }
        let interface = if interfaces_matter {
            interfaces
                .entry(flow.original.src)
                .or_insert_with(|| conntrack::interface_towards(runner, flow.original.src))
                .clone()
        } else {
            None
        };
        if let Some(verdict) = judge.cut(&flow, interface) {
            report.cuts.push(Cut { flow, verdict });
        }
    };
    let listing = conntrack::list(
        runner,
        &host.families(),
        deadline,
        MAX_ENTRIES,
        &mut on_flow,
    )?;
    report.examined = listing.entries;
    report.truncated |= listing.truncated;
    if !delete {
        return Ok(report);
    }
    for cut in &report.cuts {
        match conntrack::delete(runner, &cut.flow) {
            Ok(()) => {
                report.deleted += 1;
                let original = cut.flow.original;
                tracing::info!(
                    src = %original.src,
                    dst = %original.dst,
                    protocol = cut.flow.protocol,
                    sport = original.sport,
                    dport = original.dport,
                    by = %cut.verdict.reason,
                    "cut an established connection the policies now deny"
                );
            }
            Err(error) => report.failed.push((cut.clone(), error)),
        }
    }
    for (cut, error) in &report.failed {
        tracing::warn!(
            src = %cut.flow.original.src,
            dport = cut.flow.original.dport,
            "cannot cut an established connection the policies now deny: {error}"
        );
    }
    if report.truncated {
        tracing::warn!(
            examined = report.examined,
            "the conntrack table was read only in part (it is large); established connections beyond it were left; run `nodeport-guard revoke --yes` to go on"
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::runner::Output;

    /// A conntrack table of `entries` established connections from 198.51.100.0/24 and
    /// 203.0.113.0/24 to port 30008, streamed line by line as the real program does.
    struct HugeTable {
        entries: usize,
    }

    impl Runner for HugeTable {
        fn run(&self, _: &str, _: &[&str], _: Option<&[u8]>) -> std::io::Result<Output> {
            Ok(Output {
                success: true,
                ..Output::default()
            })
        }

        fn exists(&self, _: &str) -> bool {
            true
        }

        fn run_lines(
            &self,
            _: &str,
            args: &[&str],
            line: &mut dyn FnMut(&str) -> bool,
        ) -> std::io::Result<Output> {
            if args.contains(&"ipv4") {
                for n in 0..self.entries {
                    let net = if n % 2 == 0 {
                        "198.51.100"
                    } else {
                        "203.0.113"
                    };
                    let text = format!(
                        "ipv4 2 tcp 6 431999 ESTABLISHED src={net}.{} dst=192.0.2.1 sport={} dport=30008 src=192.0.2.1 dst={net}.{} sport=30008 dport={} [ASSURED] mark=0 use=1",
                        n % 250 + 1,
                        1024 + n % 60000,
                        n % 250 + 1,
                        1024 + n % 60000
                    );
                    if !line(&text) {
                        break;
                    }
                }
            }
            Ok(Output {
                success: true,
                ..Output::default()
            })
        }
    }

    fn model(yaml: &str) -> Model {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("p.yaml"), yaml).expect("write");
        let set = crate::policy_set::load(&[dir.path().to_path_buf()]);
        assert!(set.is_valid(), "{:?}", set.diagnostics);
        set.model
    }

    const WHITELIST: &str = "apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: whitelist}
spec:
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
  - action: Allow
    source: {nets: [198.51.100.0/24]}
  - action: Deny
    protocol: TCP
    destination: {ports: [30008]}
";

    fn host() -> HostFacts {
        HostFacts {
            interfaces: vec![crate::facts::Interface {
                name: "eth0".into(),
                addresses: vec!["192.0.2.1".parse().expect("ip")],
            }],
            ..HostFacts::minimal("node1")
        }
    }

    #[test]
    fn only_the_connections_the_change_denies_are_cut() {
        let after = model(WHITELIST);
        let runner = HugeTable { entries: 1000 };
        let report =
            revoke(&runner, None, &after, &Config::default(), &host(), false).expect("revoke");
        assert_eq!(report.examined, 1000);
        assert!(!report.truncated);
        // Every other entry comes from 203.0.113.0/24, which the whitelist does not list.
        assert_eq!(report.cuts.len(), 500);
        assert!(
            report.cuts.iter().all(|cut| cut
                .flow
                .original
                .src
                .to_string()
                .starts_with("203.0.113."))
        );
        // The same change seen from policies that denied them already cuts nothing.
        let again = revoke(
            &runner,
            Some(&after),
            &after,
            &Config::default(),
            &host(),
            false,
        )
        .expect("revoke");
        assert!(again.cuts.is_empty());
    }

    #[test]
    fn a_huge_table_is_read_within_the_budget_and_says_what_was_left() {
        let after = model(WHITELIST);
        let runner = HugeTable {
            entries: 50_000_000,
        };
        let started = Instant::now();
        let report =
            revoke(&runner, None, &after, &Config::default(), &host(), false).expect("revoke");
        assert!(report.truncated, "{} entries read", report.examined);
        assert!(
            started.elapsed() < LIST_BUDGET + Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        assert!(report.examined > 0 && report.examined < 50_000_000);
    }
}
