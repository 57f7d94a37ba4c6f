//! Reading back what nodeport-guard (and everyone else) left in a [`Lab`]'s
//! node kernel.
//!
//! [`Snapshot`] captures `iptables-save` / `ip6tables-save` of the lab's
//! flavour and `ipset save`, normalized so that two snapshots of the same
//! rules compare equal (timestamps and packet counters removed), and can be
//! split into "ours" (anything mentioning `npg`) and "everyone else's".

use std::fmt;

use super::lab::{Family, Lab};

/// The node's firewall state as the operator sees it: `iptables-save` and
/// `ip6tables-save` of the lab's flavour and `ipset save`, normalized (no
/// `#` lines with timestamps, chain packet counters zeroed).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `iptables-save`.
    pub v4: String,
    /// `ip6tables-save`.
    pub v6: String,
    /// `ipset save`.
    pub sets: String,
    /// `nft list table ip nodeport_guard` and `… ip6 …`, counters removed: the native
    /// nftables backend's tables, all ours.
    pub nft: String,
}

impl Snapshot {
    /// Reads the node's state now.
    #[track_caller]
    pub fn take(lab: &Lab) -> Snapshot {
        let node = lab.node();
        let save =
            |family| normalize_save(&super::state::iptables_save(node, lab.backend(), family));
        let nft: String = ["ip", "ip6"]
            .iter()
            .map(|family| node.exec("nft", &["list", "table", family, "nodeport_guard"]))
            .filter(|output| output.status.success())
            .map(|output| normalize_nft(&output.stdout))
            .collect();
        Snapshot {
            v4: save(Family::V4),
            v6: save(Family::V6),
            sets: node.exec_ok("ipset", &["save"]),
            nft,
        }
    }

    /// Everything that does not mention `npg`: the state other programs own.
    pub fn foreign(&self) -> Snapshot {
        Snapshot {
            nft: String::new(),
            ..self.filter(|line| !mentions_ours(line))
        }
    }

    /// Only the lines that mention `npg`: our chains, rules, jumps and sets, and our nftables
    /// tables whole.
    pub fn ours(&self) -> Snapshot {
        Snapshot {
            nft: self.nft.clone(),
            ..self.filter(mentions_ours)
        }
    }

    /// Whether nothing mentions `npg`.
    pub fn has_nothing_of_ours(&self) -> bool {
        self.ours() == Snapshot::default()
    }

    /// The rules of `table` for `family`, one `-A …` line each, in order.
    pub fn rules(&self, family: Family, table: &str, chain: &str) -> Vec<String> {
        let text = match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        };
        let prefix = format!("-A {chain} ");
        table_section(text, table)
            .filter(|line| line.starts_with(&prefix))
            .map(str::to_string)
            .collect()
    }

    /// Names of the chains of `table` for `family` that start with `prefix`.
    pub fn chains(&self, family: Family, table: &str, prefix: &str) -> Vec<String> {
        let text = match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        };
        let mut chains: Vec<String> = table_section(text, table)
            .filter_map(|line| line.strip_prefix(':'))
            .filter_map(|decl| decl.split_whitespace().next())
            .filter(|name| name.starts_with(prefix))
            .map(str::to_string)
            .collect();
        // The nftables backend's chains are `npg<letter of table>-…` (see [`nft_chain`]) in
        // `table ip|ip6 nodeport_guard`.
        let header = match family {
            Family::V4 => "table ip nodeport_guard",
            Family::V6 => "table ip6 nodeport_guard",
        };
        let nft_prefix = nft_chain(table, prefix);
        let ours = nft_chain(table, "npg-");
        chains.extend(
            self.nft
                .split("\ntable ")
                .map(|section| section.trim_start_matches("table "))
                .filter(|section| section.starts_with(header.trim_start_matches("table ")))
                .flat_map(|section| section.lines())
                .filter_map(|line| line.trim().strip_prefix("chain "))
                .filter_map(|rest| rest.split_whitespace().next())
                .filter(|name| name.starts_with(&nft_prefix))
                .filter_map(|name| name.strip_prefix(&ours))
                .map(|rest| format!("npg-{rest}")),
        );
        chains
    }

    /// Names of the ipsets (and of the nftables backend's sets) in the snapshot.
    pub fn set_names(&self) -> Vec<String> {
        let ipsets = self
            .sets
            .lines()
            .filter_map(|line| line.strip_prefix("create "))
            .filter_map(|rest| rest.split_whitespace().next());
        let nft_sets = self
            .nft
            .lines()
            .filter_map(|line| line.trim().strip_prefix("set "))
            .filter_map(|rest| rest.split_whitespace().next());
        ipsets.chain(nft_sets).map(str::to_string).collect()
    }

    /// Members of ipset (or nftables set) `name`.
    pub fn set_members(&self, name: &str) -> Vec<String> {
        let prefix = format!("add {name} ");
        let mut members: Vec<String> = self
            .sets
            .lines()
            .filter_map(|line| line.strip_prefix(&prefix))
            .map(|member| member.trim().to_string())
            .collect();
        // nft lists `set NAME { … elements = { a, b,\n c } }`.
        let header = format!("set {name} {{");
        if let Some(start) = self.nft.find(&header) {
            let block = &self.nft[start..];
            if let Some(elements) = block.split("elements = {").nth(1) {
                let list = elements.split('}').next().unwrap_or_default();
                members.extend(
                    list.split(',')
                        .map(str::trim)
                        .filter(|member| !member.is_empty())
                        .map(str::to_string),
                );
            }
        }
        members
    }

    /// The same rules in a canonical order: per table, chain declarations
    /// sorted by name and each chain's rules (in their own order) grouped
    /// under the chain names in sorted order; set members sorted. Two
    /// snapshots with equal canonical forms filter packets identically, even
    /// if the chains were created in a different order (iptables-nft-save
    /// prints chains in creation order).
    pub fn canonical(&self) -> Snapshot {
        let mut sets: Vec<&str> = self.sets.lines().collect();
        sets.sort_unstable();
        Snapshot {
            v4: canonical_save(&self.v4),
            v6: canonical_save(&self.v6),
            sets: sets.iter().map(|line| format!("{line}\n")).collect(),
            nft: canonical_nft(&self.nft),
        }
    }

    fn filter(&self, keep: impl Fn(&str) -> bool) -> Snapshot {
        let f = |text: &str| -> String {
            text.lines()
                .filter(|line| keep(line))
                .map(|line| format!("{line}\n"))
                .collect()
        };
        Snapshot {
            v4: f(&self.v4),
            v6: f(&self.v6),
            sets: f(&self.sets),
            nft: self.nft.clone(),
        }
    }

    /// A unified diff from `self` to `other`, for failure messages.
    pub fn diff(&self, other: &Snapshot) -> String {
        let mut out = String::new();
        for (what, a, b) in [
            ("iptables-save", &self.v4, &other.v4),
            ("ip6tables-save", &self.v6, &other.v6),
            ("ipset save", &self.sets, &other.sets),
            ("nft list table … nodeport_guard", &self.nft, &other.nft),
        ] {
            if a != b {
                out.push_str(
                    &similar::TextDiff::from_lines(a.as_str(), b.as_str())
                        .unified_diff()
                        .header(&format!("{what} (expected)"), &format!("{what} (actual)"))
                        .to_string(),
                );
            }
        }
        out
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--- iptables-save ---\n{}--- ip6tables-save ---\n{}--- ipset save ---\n{}--- nft ---\n{}",
            self.v4, self.v6, self.sets, self.nft
        )
    }
}

/// `nft list table` output without the packet counters, which change with traffic.
fn normalize_nft(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut words: Vec<&str> = Vec::new();
        let mut iter = line.split(' ').peekable();
        while let Some(word) = iter.next() {
            if (word == "packets" || word == "bytes")
                && iter.peek().is_some_and(|n| n.parse::<u64>().is_ok())
            {
                iter.next();
                continue;
            }
            words.push(word);
        }
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out
}

/// Our native nftables tables (`table ip nodeport_guard` and `table ip6
/// nodeport_guard`) as `nft list table` prints them, in a canonical form:
/// `counter packets N bytes M` zeroed, and within each table the chains and
/// sets sorted by name (nft lists them in the order they were created, which
/// says nothing about what they filter). Empty for a family without our
/// table.
#[track_caller]
pub fn nft_tables(lab: &Lab) -> String {
    let mut out = String::new();
    for family in ["ip", "ip6"] {
        let listing = lab
            .node()
            .exec("nft", &["list", "table", family, "nodeport_guard"]);
        if !listing.success() {
            continue;
        }
        let mut blocks: Vec<String> = Vec::new();
        let mut current = String::new();
        for line in listing.stdout.lines() {
            if line.starts_with("table ") || line == "}" || line.trim().is_empty() {
                continue;
            }
            current.push_str(&zero_nft_counters(line));
            current.push('\n');
            if line == "\t}" {
                blocks.push(std::mem::take(&mut current));
            }
        }
        blocks.sort();
        out.push_str(&format!("table {family} nodeport_guard {{\n"));
        out.push_str(&blocks.concat());
        out.push_str("}\n");
    }
    out
}

/// nftables state in a canonical order: the blocks of each table (chains and sets, each with
/// its contents in order) sorted by their header line, so creation order does not matter.
fn canonical_nft(text: &str) -> String {
    let mut out = String::new();
    let mut blocks: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if line.starts_with("table ") {
            out.push_str(line);
            out.push('\n');
        } else if trimmed.starts_with("chain ") || trimmed.starts_with("set ") {
            current = format!("{line}\n");
        } else if line == "}" {
            blocks.sort();
            out.extend(blocks.drain(..));
            out.push_str("}\n");
        } else if trimmed == "}" && !current.is_empty() {
            current.push_str(line);
            current.push('\n');
            blocks.push(std::mem::take(&mut current));
        } else if !current.is_empty() {
            current.push_str(line);
            current.push('\n');
        }
    }
    out
}

/// `counter packets 12 bytes 720` → `counter packets 0 bytes 0`.
fn zero_nft_counters(line: &str) -> String {
    let mut words: Vec<&str> = line.split(' ').collect();
    for i in 0..words.len() {
        if (words[i] == "packets" || words[i] == "bytes")
            && words.get(i + 1).is_some_and(|w| w.parse::<u64>().is_ok())
        {
            words[i + 1] = "0";
        }
    }
    words.join(" ")
}

/// Panics with a diff unless the two snapshots are equal.
#[track_caller]
pub fn assert_same_state(expected: &Snapshot, actual: &Snapshot, what: &str) {
    if expected != actual {
        panic!(
            "{what}: the kernel state differs:\n{}",
            expected.diff(actual)
        );
    }
}

/// Zeroes the `[packets:bytes]` counters of chain declarations, which change
/// with traffic and say nothing about the rules.
fn normalize_save(text: &str) -> String {
    text.lines()
        .map(|line| {
            if line.starts_with(':')
                && let Some(open) = line.rfind(" [")
            {
                format!("{} [0:0]\n", &line[..open])
            } else {
                format!("{line}\n")
            }
        })
        .collect()
}

/// See [`Snapshot::canonical`].
fn canonical_save(text: &str) -> String {
    let mut out = String::new();
    let mut declarations: Vec<&str> = Vec::new();
    let mut rules: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for line in text.lines() {
        if line.starts_with('*') {
            out.push_str(line);
            out.push('\n');
        } else if line.starts_with(':') {
            declarations.push(line);
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let chain = rest.split_whitespace().next().unwrap_or_default();
            rules.entry(chain).or_default().push(line);
        } else if line == "COMMIT" {
            declarations.sort_unstable();
            for line in declarations
                .drain(..)
                .chain(std::mem::take(&mut rules).into_values().flatten())
            {
                out.push_str(line);
                out.push('\n');
            }
            out.push_str("COMMIT\n");
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    // A filtered save (`ours()`) has lost its `*table` and `COMMIT` lines: what it holds still
    // counts.
    declarations.sort_unstable();
    for line in declarations
        .into_iter()
        .chain(rules.into_values().flatten())
    {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The lines between `*table` and its `COMMIT`.
fn table_section<'t>(text: &'t str, table: &str) -> impl Iterator<Item = &'t str> {
    let header = format!("*{table}");
    text.lines()
        .skip_while(move |line| *line != header)
        .skip(1)
        .take_while(|line| *line != "COMMIT")
}

/// The nftables backend's name for our chain `chain` (`npg-…`) of iptables table `table`:
/// `npg-pi-web` of mangle is `npg-m-pi-web` (raw `npg-r-…`, filter `npg-f-…`).
pub fn nft_chain(table: &str, chain: &str) -> String {
    let letter = match table {
        "raw" => 'r',
        "mangle" => 'm',
        "filter" => 'f',
        other => panic!("no nftables letter for table {other}"),
    };
    let rest = chain
        .strip_prefix("npg-")
        .unwrap_or_else(|| panic!("{chain} is not one of our chains"));
    format!("npg-{letter}-{rest}")
}

/// Whether a line of `iptables-save` or `ipset save` mentions one of our chains or sets
/// (`npg-…`, `npg4-…`, `npg6-…`) or carries our comment (`npg:…`); another program's `npgx`
/// set is not ours.
fn mentions_ours(line: &str) -> bool {
    ["npg-", "npg4-", "npg6-", "npg:"]
        .iter()
        .any(|mark| line.contains(mark))
}
